use super::*;

#[cfg(feature = "fs")]
fn cert(name: &str, body: &str) -> (String, NodeCert) {
    let file = CertFile::Secret {
        namespace: "default".parse().unwrap(),
        name: name.parse().unwrap(),
        version: chain_version(&format!("CHAIN {body}\n")),
    };
    (
        file.stem(),
        NodeCert {
            file,
            chain_pem: format!("CHAIN {body}\n"),
            key_pem: format!("KEY {body}\n"),
        },
    )
}

#[test]
#[cfg(feature = "fs")]
fn node_files_are_0600_replaced_when_changed_removed_when_unused_and_versioned() {
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("certs");
    let first: BTreeMap<_, _> = [cert("a", "1"), cert("b", "1")].into();
    let s = files::sync(&dir, &first).unwrap();
    assert_eq!(s.written, ["default_a", "default_b"]);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("default_a.pem")), 0o600);
    assert_eq!(mode(&dir.join("default_a.version")), 0o600);
    assert_eq!(
        std::fs::read_to_string(dir.join("default_a.pem")).unwrap(),
        "CHAIN 1\nKEY 1\n"
    );
    let present = files::present(&dir);
    assert_eq!(present["default_a"], first["default_a"].file.version());
    assert_eq!(present.len(), 2);
    // Unchanged: nothing written.
    assert_eq!(files::sync(&dir, &first).unwrap(), Synced::default());
    // a renewed, b gone.
    let second: BTreeMap<_, _> = [cert("a", "2")].into();
    let s = files::sync(&dir, &second).unwrap();
    assert_eq!(
        (s.written, s.removed),
        (vec!["default_a".to_string()], vec!["default_b".to_string()])
    );
    assert!(!dir.join("default_b.pem").exists() && !dir.join("default_b.version").exists());
    assert_eq!(
        files::present(&dir)["default_a"],
        second["default_a"].file.version()
    );
    // A .pem without its .version is not a certificate the state can use.
    std::fs::remove_file(dir.join("default_a.version")).unwrap();
    assert!(files::present(&dir).is_empty());
    assert!(files::present(&d.path().join("missing")).is_empty());
}

fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/certs")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn tls_secret(crt: &str, key: &str) -> Secret {
    use k8s_openapi::ByteString;
    Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("web-tls".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        type_: Some(TLS_SECRET_TYPE.into()),
        data: Some(
            [
                ("tls.crt".to_string(), ByteString(crt.as_bytes().to_vec())),
                ("tls.key".to_string(), ByteString(key.as_bytes().to_vec())),
            ]
            .into(),
        ),
        ..Default::default()
    }
}

/// The fixtures' PEM `f` with its base64 body replaced by the base64 of `der`.
fn pem_of(label: &str, der: &[u8]) -> String {
    super::pem::encode(label, der)
}

/// The first PEM block's DER of fixture `f`.
fn der_of(f: &str) -> Vec<u8> {
    super::pem::blocks(&fixture(f), 8).unwrap().remove(0).der
}

/// One row per class: what OpenSSL (under HAProxy 2.6 and nginx, security level 2)
/// refuses, what k8slb refuses beyond it, and what both load. `actor/tests/
/// cert_acceptance.rs` shows each class against the real `haproxy -c` and `nginx -t`.
/// No message quotes the key, and every message is short.
#[test]
fn a_secret_is_accepted_only_if_both_proxies_load_it() {
    let f = fixture;
    // A P-521 point's OID bytes (secp521r1) inside a block that is no key at all.
    let p521_oid_junk = pem_of(
        "PRIVATE KEY",
        &[
            0x30, 0x09, 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23, 0x05, 0x00,
        ],
    );
    let junk_cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let mut leaf_der_plus = der_of("leaf.crt");
    leaf_der_plus.extend_from_slice(b"XYZW");
    let mut rsa_der_plus = der_of("rsa.key");
    rsa_der_plus.push(0);
    let chain = f("leaf.crt") + &f("int.crt");
    type Case = (&'static str, String, String, Result<(), &'static str>);
    let cases: Vec<Case> = vec![
            // Both proxies load these.
            ("RSA 2048, PKCS#8", f("rsa.crt"), f("rsa.key"), Ok(())),
            ("RSA 2048, PKCS#1", f("rsa.crt"), f("rsa-pkcs1.key"), Ok(())),
            ("P-256, PKCS#8", f("ec.crt"), f("ec.key"), Ok(())),
            ("P-256, SEC1", f("ec.crt"), f("ec-sec1.key"), Ok(())),
            ("P-384", f("p384.crt"), f("p384.key"), Ok(())),
            ("P-521", f("p521.crt"), f("p521.key"), Ok(())),
            ("Ed25519", f("ed25519.crt"), f("ed25519.key"), Ok(())),
            ("leaf + intermediate", chain.clone(), f("leaf.key"), Ok(())),
            (
                "leaf + intermediate + root",
                chain.clone() + &f("ca.crt"),
                f("leaf.key"),
                Ok(()),
            ),
            (
                "text around the blocks",
                format!("subject=CN = x\n{}\nissuer=...\n{}", f("leaf.crt"), f("int.crt")),
                f("leaf.key"),
                Ok(()),
            ),
            (
                "self-signed with SHA-1 (its own signature is not checked)",
                f("sha1-self.crt"),
                f("ec.key"),
                Ok(()),
            ),
            // The proxies refuse these.
            (
                "a junk CERTIFICATE block after a valid one",
                f("ec.crt") + junk_cert,
                f("ec.key"),
                Err("certificate 2 of tls.crt does not decode as X.509"),
            ),
            (
                "a junk leaf",
                junk_cert.to_string(),
                f("ec.key"),
                Err("leaf certificate (block 1 of tls.crt) does not decode"),
            ),
            (
                "bytes after the leaf's DER",
                pem_of("CERTIFICATE", &leaf_der_plus),
                f("leaf.key"),
                Err("has bytes after its X.509 structure"),
            ),
            (
                "a leaf signed with SHA-1",
                f("sha1-leaf.crt"),
                f("leaf.key"),
                Err("is signed with SHA-1, which the proxies refuse on a leaf"),
            ),
            (
                "a leaf signed with MD5",
                f("md5-leaf.crt"),
                f("leaf.key"),
                Err("is signed with MD5"),
            ),
            (
                "a 1024-bit RSA intermediate",
                f("weak-int-leaf.crt") + &f("weak-int.crt"),
                f("leaf.key"),
                Err("certificate 2 of tls.crt has an RSA key of 1024 bits, which the proxies refuse"),
            ),
            (
                "an intermediate signed with SHA-1",
                f("sha1-int-leaf.crt") + &f("sha1-int.crt"),
                f("leaf.key"),
                Err("certificate 2 of tls.crt is signed with SHA-1, which the proxies refuse on a CA"),
            ),
            (
                "a 1024-bit RSA leaf",
                f("rsa1024.crt"),
                f("rsa1024.key"),
                Err("RSA key of 1024 bits, which the proxies refuse"),
            ),
            (
                "a P-192 leaf",
                f("p192.crt"),
                f("p192.key"),
                Err("P-192, which the proxies refuse"),
            ),
            (
                "junk PRIVATE KEY holding the P-521 OID",
                f("p521.crt"),
                p521_oid_junk,
                Err("tls.key is not a valid PKCS#8 private key"),
            ),
            (
                "a real P-521 key of another certificate",
                f("p521.crt"),
                f("other-p521.key"),
                Err("does not match the leaf certificate"),
            ),
            (
                "another P-256 key",
                f("ec.crt"),
                f("other-ec.key"),
                Err("does not match"),
            ),
            ("an EC key for an RSA certificate", f("rsa.crt"), f("ec.key"), Err("does not match")),
            (
                "the chain in the wrong order",
                f("int.crt") + &f("leaf.crt"),
                f("leaf.key"),
                Err("does not match the leaf certificate"),
            ),
            (
                "an encrypted key",
                f("ec.crt"),
                "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n".into(),
                Err("tls.key is encrypted"),
            ),
            // k8slb refuses these, which the proxies load.
            (
                "an Ed448 key",
                f("ed448.crt"),
                f("ed448.key"),
                Err("has an Ed448 key; k8slb serves RSA (2048 to 8192 bits), ECDSA (P-256, P-384, P-521) and Ed25519 keys"),
            ),
            (
                "a secp256k1 key",
                f("k256.crt"),
                f("k256.key"),
                Err("on the curve secp256k1; k8slb serves"),
            ),
            (
                "a private key in tls.crt",
                f("ec.crt") + &f("ec.key"),
                f("ec.key"),
                Err("block 2 of tls.crt is a private key, not a CERTIFICATE"),
            ),
            (
                "two keys",
                f("ec.crt"),
                f("ec.key") + &f("ec.key"),
                Err("more than 1 PEM blocks"),
            ),
            (
                "bytes after the key's DER",
                f("rsa.crt"),
                pem_of("PRIVATE KEY", &rsa_der_plus),
                Err("tls.key is not a valid PKCS#8 private key"),
            ),
            (
                "more certificates than the cap",
                f("ec.crt").repeat(MAX_CHAIN_CERTS + 1),
                f("ec.key"),
                Err("more than 8 PEM blocks"),
            ),
            (
                "more bytes than the cap",
                f("ec.crt") + &"x".repeat(MAX_CHAIN_BYTES),
                f("ec.key"),
                Err("more than the 65536 k8slb reads"),
            ),
            ("no certificate", "text".into(), f("ec.key"), Err("holds no PEM CERTIFICATE")),
            ("no key", f("ec.crt"), "".into(), Err("holds no PEM private key")),
            (
                "a certificate where the key should be",
                f("ec.crt"),
                f("ec.crt"),
                Err("tls.key holds a PEM block that is not an unencrypted private key"),
            ),
        ];
    for (what, crt, key, want) in &cases {
        let got = inspect(&tls_secret(crt, key));
        match (want, &got) {
            (Ok(()), Ok(c)) => {
                // What the nodes get is the canonical PEM of the same blocks.
                let blocks = |t: &str| super::pem::blocks(t, 8).unwrap();
                assert_eq!(blocks(&c.chain_pem), blocks(crt), "{what}");
                assert_eq!(blocks(&c.key_pem), blocks(key), "{what}");
                assert!(!c.chain_pem.contains("subject="), "{what}");
            }
            (Err(part), Err(e)) => {
                let msg = e.to_string();
                assert!(msg.contains(part), "{what}: {msg}");
                assert!(msg.len() < 300, "{what}: {} bytes: {msg}", msg.len());
                assert!(
                    !msg.contains("PRIVATE KEY"),
                    "{what}: reads like a leak: {msg}"
                );
                for line in key.lines().filter(|l| !l.starts_with("-----")) {
                    assert!(!msg.contains(line), "{what} quotes the key: {msg}");
                }
            }
            _ => panic!("{what}: want {want:?}, got {got:?}"),
        }
    }
}

/// OpenSSL compares only the public half of a key with the certificate; k8slb also
/// checks that the private half is the public half's, so a key that "matches" also
/// signs: an RSA key with the certificate's n and e but another d, an EC key with the
/// certificate's public point but another scalar, are refused.
#[test]
fn a_key_that_only_claims_the_certificates_public_key_is_refused() {
    use pkcs1::der::{Decode, Encode};
    let rsa = der_of("rsa-pkcs1.key");
    let mut k = pkcs1::RsaPrivateKeyRef::from_der(&rsa).unwrap();
    let other = der_of("rsa1024.key");
    let other_info = pkcs8::PrivateKeyInfoRef::from_der(&other).unwrap();
    let o = pkcs1::RsaPrivateKeyRef::from_der(other_info.private_key.as_bytes()).unwrap();
    k.private_exponent = o.private_exponent;
    let forged = pem_of("RSA PRIVATE KEY", &k.to_der().unwrap());
    let e = inspect(&tls_secret(&fixture("rsa.crt"), &forged)).unwrap_err();
    assert_eq!(e.to_string(), "tls.key is not a consistent RSA private key");

    let mine = der_of("ec-sec1.key");
    let theirs = der_of("other-ec.key");
    let theirs = pkcs8::PrivateKeyInfoRef::from_der(&theirs).unwrap();
    let theirs = sec1::EcPrivateKey::from_der(theirs.private_key.as_bytes()).unwrap();
    let mut k = sec1::EcPrivateKey::from_der(&mine).unwrap();
    k.private_key = theirs.private_key;
    let forged = pem_of("EC PRIVATE KEY", &k.to_der().unwrap());
    let e = inspect(&tls_secret(&fixture("ec.crt"), &forged)).unwrap_err();
    assert!(
        e.to_string().contains("its public point is not its own"),
        "{e}"
    );
}

#[test]
fn a_secret_of_another_type_is_refused_whatever_it_holds() {
    let mut s = tls_secret(&fixture("ec.crt"), &fixture("ec.key"));
    s.type_ = Some("Opaque".into());
    assert_eq!(inspect(&s), Err(CertError::WrongType("Opaque".into())));
    s.type_ = None;
    assert_eq!(inspect(&s), Err(CertError::WrongType("Opaque".into())));
    s.type_ = Some("x".repeat(1000));
    let Err(CertError::WrongType(t)) = inspect(&s) else {
        panic!("accepted")
    };
    assert_eq!(t.len(), 64, "bounded");
}

/// The canonical chain is what the version is taken of: text around the blocks, CRLF
/// line ends or another line width do not make a new version.
#[test]
fn the_version_is_the_canonical_chains() {
    let (crt, key) = (
        fixture("leaf.crt") + &fixture("int.crt"),
        fixture("leaf.key"),
    );
    let a = inspect(&tls_secret(&crt, &key)).unwrap();
    let noisy = format!("# bundle\r\n{}", crt.replace('\n', "\r\n"));
    let b = inspect(&tls_secret(&noisy, &key)).unwrap();
    assert_eq!(a.file, b.file);
    assert_eq!(a.chain_pem, crt, "openssl's output is already canonical");
}

#[test]
fn a_stem_is_a_namespace_and_a_secret_name_or_nothing() {
    let (ns, name) = secret_of_stem("default_web-tls").unwrap();
    assert_eq!((ns.as_str(), name.as_str()), ("default", "web-tls"));
    for bad in [
        "",
        "default",
        "_web",
        "default_",
        "../x_y",
        "a_b/c",
        "a_../../etc",
        "A_b",
        "a_b c",
        "a_b\n",
    ] {
        assert!(secret_of_stem(bad).is_none(), "{bad:?}");
    }
}

#[test]
fn node_secret_names_are_valid_and_distinct() {
    let a = node_secret_name("default_web-tls");
    let b = node_secret_name("default_web-tls2");
    assert_ne!(a, b);
    assert_eq!(a.len(), "k8slb-cert-".len() + 16);
    assert!(a
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'));
}
