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
