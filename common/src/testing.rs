//! Test support shared by the crates' tests (feature `testing`, enabled only in their
//! `[dev-dependencies]`): never part of a binary.

/// A self-signed ECDSA P-256 certificate for `cn` (with `cn` as its DNS subjectAltName)
/// and its key, PEM, made by the `openssl` command in a temporary directory. Panics with
/// the way to install openssl when it is missing (a test that needs it fails, never
/// skips).
pub fn self_signed(cn: &str) -> (String, String) {
    self_signed_for(&[cn])
}

/// [`self_signed`] for several DNS names: the first is the CN, all are subjectAltNames.
pub fn self_signed_for(names: &[&str]) -> (String, String) {
    let cn = names.first().expect("a name");
    let san: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    let d = tempfile::tempdir().expect("a temporary directory");
    let (crt, key) = (d.path().join("c.pem"), d.path().join("k.pem"));
    let out = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"])
        .args(["-nodes", "-days", "2", "-subj", &format!("/CN={cn}")])
        .args(["-addext", &format!("subjectAltName={}", san.join(","))])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("the openssl command (apt-get install -y openssl; ./scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "openssl req: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        std::fs::read_to_string(crt).expect("the certificate"),
        std::fs::read_to_string(key).expect("the key"),
    )
}

/// A CA: a self-signed certificate with `CA:TRUE` and keyCertSign, and its key (ECDSA
/// P-256), PEM, made by the `openssl` command.
pub fn ca(cn: &str) -> (String, String) {
    let d = tempfile::tempdir().expect("a temporary directory");
    let (crt, key) = (d.path().join("ca.pem"), d.path().join("ca.key"));
    openssl(
        std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "2", "-subj", &format!("/CN={cn}")])
            .args(["-addext", "basicConstraints=critical,CA:TRUE"])
            .args(["-addext", "keyUsage=critical,keyCertSign,digitalSignature"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&crt),
    );
    (
        std::fs::read_to_string(crt).expect("the certificate"),
        std::fs::read_to_string(key).expect("the key"),
    )
}

/// A certificate signed by `ca` (a [`ca`]'s certificate and key) for the DNS names
/// `dns` and the URIs `uris` (subjectAltNames; none: a client certificate, extended key
/// usage clientAuth, else serverAuth), and its key (ECDSA P-256), PEM.
pub fn signed_by(ca: &(String, String), dns: &[&str], uris: &[&str]) -> (String, String) {
    let d = tempfile::tempdir().expect("a temporary directory");
    let p = |n: &str| d.path().join(n);
    std::fs::write(p("ca.pem"), &ca.0).expect("writing the CA");
    std::fs::write(p("ca.key"), &ca.1).expect("writing the CA key");
    let sans: Vec<String> = dns
        .iter()
        .map(|n| format!("DNS:{n}"))
        .chain(uris.iter().map(|u| format!("URI:{u}")))
        .collect();
    let mut ext = String::from("basicConstraints=CA:FALSE\n");
    if sans.is_empty() {
        ext.push_str("extendedKeyUsage=clientAuth\n");
    } else {
        ext.push_str(&format!(
            "extendedKeyUsage=serverAuth\nsubjectAltName={}\n",
            sans.join(",")
        ));
    }
    std::fs::write(p("ext.cnf"), ext).expect("writing the extensions");
    openssl(
        std::process::Command::new("openssl")
            .args([
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-subj", "/CN=default/O=Acme Co"])
            .arg("-keyout")
            .arg(p("k.pem"))
            .arg("-out")
            .arg(p("c.csr")),
    );
    openssl(
        std::process::Command::new("openssl")
            .args(["x509", "-req", "-days", "2", "-set_serial", "2"])
            .arg("-in")
            .arg(p("c.csr"))
            .arg("-CA")
            .arg(p("ca.pem"))
            .arg("-CAkey")
            .arg(p("ca.key"))
            .arg("-extfile")
            .arg(p("ext.cnf"))
            .arg("-out")
            .arg(p("c.pem")),
    );
    (
        std::fs::read_to_string(p("c.pem")).expect("the certificate"),
        std::fs::read_to_string(p("k.pem")).expect("the key"),
    )
}

fn openssl(cmd: &mut std::process::Command) {
    let out = cmd.output().expect(
        "the openssl command (apt-get install -y openssl; ./scripts/install-deps.sh installs it)",
    );
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
