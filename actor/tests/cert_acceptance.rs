//! The proof of "k8slb accepts a TLS Secret => both proxies load it": a spread of Secrets
//! generated with the `openssl` CLI at test time (leaf key types x signature digests x
//! chain shapes, key forms, and the hostile inputs of issue 20), each judged by
//! `k8slb_common::certs::inspect` and by the real `haproxy -c` and `nginx -t` on a minimal
//! config that loads it (one HTTPS listener, the Secret's chain then key in one file, as
//! the nodes have it), inside a network namespace the test creates.
//!
//! For every case: `inspect` accepts it exactly when both proxies load it, except the cases
//! of [`POLICY`] (refused by k8slb, loaded by both: key types k8slb does not serve, and so
//! on; `common/src/certs/openssl.rs` says why), which must be refused by `inspect` and
//! loaded by both proxies (so that list cannot go stale). What an accepted Secret gives the
//! nodes (`NodeCert::pem`, re-encoded) is loaded by both too.
//!
//! Needs root (the namespace) and `apt-get install -y haproxy nginx openssl iproute2`:
//! plain `cargo test` lists it as ignored; run with `-- --include-ignored`. Without root
//! or a binary it FAILS, never passes.

mod support;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use k8slb_common::certs::inspect;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::Netns;

/// Cases refused by k8slb that both proxies load.
const POLICY: &[&str] = &[
    "leaf ed448, self-signed",
    "leaf secp256k1, self-signed",
    "leaf secp224r1, self-signed",
    "leaf brainpoolP256r1, self-signed",
    "leaf rsa2040, self-signed",
    "intermediate ed448",
    "intermediate secp256k1",
    "leaf p256 signed by the CA with sha3-256",
    "leaf p256, SEC1 key with explicit curve parameters",
    "leaf p256, two keys in tls.key",
    "leaf p256 + intermediate, TRUSTED CERTIFICATE label",
    "leaf p256 + intermediate with bytes after its DER",
];

struct Lab {
    dir: tempfile::TempDir,
    n: std::cell::Cell<usize>,
}

impl Lab {
    fn new() -> Self {
        Lab {
            dir: tempfile::Builder::new()
                .prefix("k8slb-cert-acceptance")
                .tempdir()
                .unwrap(),
            n: std::cell::Cell::new(0),
        }
    }

    fn path(&self, ext: &str) -> PathBuf {
        self.n.set(self.n.get() + 1);
        self.dir.path().join(format!("f{}.{ext}", self.n.get()))
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A new private key (PKCS#8 PEM): `rsa<bits>`, `ed25519`, `ed448` or an EC curve.
    fn key(&self, kind: &str) -> PathBuf {
        let out = self.path("key");
        let o = out.to_str().unwrap();
        if let Some(bits) = kind.strip_prefix("rsa") {
            let opt = format!("rsa_keygen_bits:{bits}");
            self.openssl(&["genpkey", "-algorithm", "RSA", "-pkeyopt", &opt, "-out", o]);
        } else if kind == "ed25519" || kind == "ed448" {
            self.openssl(&["genpkey", "-algorithm", kind, "-out", o]);
        } else {
            let curve = format!("ec_paramgen_curve:{kind}");
            self.openssl(&[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                &curve,
                "-pkeyopt",
                "ec_param_enc:named_curve",
                "-out",
                o,
            ]);
        }
        out
    }

    /// A certificate for `key`: self-signed, or signed by `ca` (certificate, key); with
    /// `digest` (none for EdDSA signers), a CA certificate if `is_ca`.
    fn cert(
        &self,
        key: &Path,
        cn: &str,
        ca: Option<(&Path, &Path)>,
        digest: Option<&str>,
        is_ca: bool,
    ) -> PathBuf {
        let out = self.path("crt");
        let subj = format!("/CN={cn}");
        let digest = digest.map(|d| format!("-{d}"));
        let ext = self.path("ext");
        // Only for a certificate signed by a CA.
        std::fs::write(
            &ext,
            if is_ca {
                "basicConstraints=critical,CA:TRUE\n"
            } else {
                "basicConstraints=CA:FALSE\n"
            },
        )
        .unwrap();
        let (k, o, e) = (
            key.to_str().unwrap(),
            out.to_str().unwrap(),
            ext.to_str().unwrap(),
        );
        match ca {
            None => {
                // openssl's default v3_ca extensions (a subject key id, an authority key
                // id naming it): what self-signed certificates usually carry.
                let mut args = vec!["req", "-x509", "-new", "-key", k, "-subj", &subj];
                args.extend(["-days", "2", "-out", o]);
                if let Some(d) = &digest {
                    args.push(d);
                }
                self.openssl(&args);
            }
            Some((ca_crt, ca_key)) => {
                let csr = self.path("csr");
                let c = csr.to_str().unwrap();
                self.openssl(&["req", "-new", "-key", k, "-subj", &subj, "-out", c]);
                let serial = self.n.get().to_string();
                let mut args = vec![
                    "x509",
                    "-req",
                    "-in",
                    c,
                    "-CA",
                    ca_crt.to_str().unwrap(),
                    "-CAkey",
                    ca_key.to_str().unwrap(),
                    "-set_serial",
                    &serial,
                    "-days",
                    "2",
                    "-extfile",
                    e,
                    "-out",
                    o,
                ];
                if let Some(d) = &digest {
                    args.push(d);
                }
                self.openssl(&args);
            }
        }
        out
    }

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    /// `openssl <args> -in <p>` output as a string (key conversions).
    fn convert(&self, p: &Path, args: &[&str]) -> String {
        let out = self.path("pem");
        let mut a = args.to_vec();
        a.extend(["-in", p.to_str().unwrap(), "-out", out.to_str().unwrap()]);
        self.openssl(&a);
        Self::read(&out)
    }
}

struct Case {
    name: String,
    crt: String,
    key: String,
}

fn case(name: impl Into<String>, crt: String, key: String) -> Case {
    Case {
        name: name.into(),
        crt,
        key,
    }
}

/// The spread: every key type as a self-signed leaf; a leaf signed by a CA with every
/// digest; intermediates of every key type; CA signatures with every digest; key forms;
/// the hostile inputs of issue 20.
fn cases(lab: &Lab) -> Vec<Case> {
    let r = Lab::read;
    let mut out = Vec::new();
    let ed = |k: &str| k.starts_with("ed");
    // Leaf key types, self-signed (SHA-256 where the key type takes a digest).
    let leaf_kinds = [
        "rsa1024",
        "rsa2040",
        "rsa2048",
        "rsa3072",
        "rsa4096",
        "prime192v1",
        "secp224r1",
        "prime256v1",
        "secp384r1",
        "secp521r1",
        "secp256k1",
        "brainpoolP256r1",
        "ed25519",
        "ed448",
    ];
    for k in leaf_kinds {
        let key = lab.key(k);
        let d = (!ed(k)).then_some("sha256");
        let crt = lab.cert(&key, "leaf.test", None, d, false);
        let name = match k {
            "prime256v1" => "p256",
            "secp384r1" => "p384",
            "secp521r1" => "p521",
            k => k,
        };
        out.push(case(format!("leaf {name}, self-signed"), r(&crt), r(&key)));
    }
    // Self-signed with every digest (a self-signed certificate's own signature is not
    // checked by OpenSSL): RSA and P-256.
    let rsa = lab.key("rsa2048");
    let p256 = lab.key("prime256v1");
    for d in ["md5", "sha1", "sha224", "sha384", "sha512"] {
        let crt = lab.cert(&rsa, "leaf.test", None, Some(d), false);
        out.push(case(
            format!("leaf rsa2048, self-signed with {d}"),
            r(&crt),
            r(&rsa),
        ));
        if d != "md5" {
            let crt = lab.cert(&p256, "leaf.test", None, Some(d), false);
            out.push(case(
                format!("leaf p256, self-signed with {d}"),
                r(&crt),
                r(&p256),
            ));
        }
    }
    // A root CA (RSA 2048, SHA-256) signs a P-256 leaf with every digest; the chain is the
    // leaf alone, or the leaf and the root.
    let ca_key = lab.key("rsa2048");
    let ca = lab.cert(&ca_key, "root", None, Some("sha256"), true);
    let leaf_key = lab.key("prime256v1");
    for d in [
        "md5", "sha1", "sha224", "sha256", "sha384", "sha512", "sha3-256",
    ] {
        let crt = lab.cert(&leaf_key, "leaf.test", Some((&ca, &ca_key)), Some(d), false);
        out.push(case(
            format!("leaf p256 signed by the CA with {d}"),
            r(&crt),
            r(&leaf_key),
        ));
        if d == "sha1" || d == "sha256" {
            out.push(case(
                format!("leaf p256 signed by the CA with {d} + root"),
                r(&crt) + &r(&ca),
                r(&leaf_key),
            ));
        }
    }
    // Intermediates of every key type (signed by the root with SHA-256), each signing a
    // P-256 leaf (SHA-256, or EdDSA).
    let int_kinds = [
        "rsa1024",
        "rsa2048",
        "rsa4096",
        "prime192v1",
        "prime256v1",
        "secp384r1",
        "secp521r1",
        "secp256k1",
        "ed25519",
        "ed448",
    ];
    for k in int_kinds {
        let ik = lab.key(k);
        let int = lab.cert(
            &ik,
            "intermediate",
            Some((&ca, &ca_key)),
            Some("sha256"),
            true,
        );
        let d = (!ed(k)).then_some("sha256");
        let leaf = lab.cert(&leaf_key, "leaf.test", Some((&int, &ik)), d, false);
        let name = match k {
            "prime192v1" => "p192",
            "prime256v1" => "p256",
            "secp384r1" => "p384",
            "secp521r1" => "p521",
            k => k,
        };
        out.push(case(
            format!("intermediate {name}"),
            r(&leaf) + &r(&int),
            r(&leaf_key),
        ));
    }
    // An intermediate signed by the root with every digest, the chain with and without
    // the root; a weak root.
    let ik = lab.key("prime256v1");
    for d in ["md5", "sha1", "sha224", "sha512"] {
        let int = lab.cert(&ik, "intermediate", Some((&ca, &ca_key)), Some(d), true);
        let leaf = lab.cert(
            &leaf_key,
            "leaf.test",
            Some((&int, &ik)),
            Some("sha256"),
            false,
        );
        out.push(case(
            format!("leaf p256 + intermediate signed with {d}"),
            r(&leaf) + &r(&int),
            r(&leaf_key),
        ));
        out.push(case(
            format!("leaf p256 + intermediate signed with {d} + root"),
            r(&leaf) + &r(&int) + &r(&ca),
            r(&leaf_key),
        ));
    }
    let weak_root_key = lab.key("rsa1024");
    let weak_root = lab.cert(&weak_root_key, "weak root", None, Some("sha256"), true);
    let int = lab.cert(
        &ik,
        "intermediate",
        Some((&weak_root, &weak_root_key)),
        Some("sha256"),
        true,
    );
    let leaf = lab.cert(
        &leaf_key,
        "leaf.test",
        Some((&int, &ik)),
        Some("sha256"),
        false,
    );
    out.push(case(
        "leaf p256 + intermediate + 1024-bit root",
        r(&leaf) + &r(&int) + &r(&weak_root),
        r(&leaf_key),
    ));
    out.push(case(
        "leaf p256 + intermediate, 1024-bit root left out",
        r(&leaf) + &r(&int),
        r(&leaf_key),
    ));
    let sha1_root = lab.cert(&ca_key, "root", None, Some("sha1"), true);
    let int = lab.cert(
        &ik,
        "intermediate",
        Some((&sha1_root, &ca_key)),
        Some("sha256"),
        true,
    );
    let leaf = lab.cert(
        &leaf_key,
        "leaf.test",
        Some((&int, &ik)),
        Some("sha256"),
        false,
    );
    let good_chain = r(&leaf) + &r(&int);
    out.push(case(
        "leaf p256 + intermediate + root self-signed with sha1",
        good_chain.clone() + &r(&sha1_root),
        r(&leaf_key),
    ));
    // Key forms.
    for (k, name) in [
        ("prime256v1", "p256"),
        ("secp384r1", "p384"),
        ("secp521r1", "p521"),
    ] {
        let key = lab.key(k);
        let crt = r(&lab.cert(&key, "leaf.test", None, Some("sha256"), false));
        out.push(case(
            format!("leaf {name}, SEC1 key"),
            crt.clone(),
            lab.convert(&key, &["ec"]),
        ));
        out.push(case(
            format!("leaf {name}, SEC1 key with a compressed public point"),
            crt.clone(),
            lab.convert(&key, &["ec", "-conv_form", "compressed"]),
        ));
        out.push(case(
            format!("leaf {name}, SEC1 key without its public point"),
            crt,
            lab.convert(&key, &["ec", "-no_public"]),
        ));
    }
    let p256_crt = r(&lab.cert(&p256, "leaf.test", None, Some("sha256"), false));
    out.push(case(
        "leaf p256, SEC1 key with explicit curve parameters",
        p256_crt.clone(),
        lab.convert(&p256, &["ec", "-param_enc", "explicit"]),
    ));
    let rsa_crt = r(&lab.cert(&rsa, "leaf.test", None, Some("sha256"), false));
    out.push(case(
        "leaf rsa2048, PKCS#1 key",
        rsa_crt.clone(),
        lab.convert(&rsa, &["rsa", "-traditional"]),
    ));
    out.push(case(
        "leaf p256, encrypted PKCS#8 key",
        p256_crt.clone(),
        lab.convert(&p256, &["pkcs8", "-topk8", "-passout", "pass:x"]),
    ));
    // The hostile inputs of issue 20, and their neighbours.
    let junk = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    out.push(case(
        "leaf p256 + a junk CERTIFICATE block",
        p256_crt.clone() + junk,
        r(&p256),
    ));
    out.push(case(
        "leaf p256 + intermediate in the wrong order",
        r(&int) + &r(&leaf),
        r(&leaf_key),
    ));
    out.push(case(
        "leaf p256, two keys in tls.key",
        p256_crt.clone(),
        r(&p256) + &r(&p256),
    ));
    out.push(case(
        "leaf p256 + intermediate, TRUSTED CERTIFICATE label",
        r(&leaf) + &r(&int).replace(" CERTIFICATE-----", " TRUSTED CERTIFICATE-----"),
        r(&leaf_key),
    ));
    let der_plus = |pem: &str| {
        use base64::Engine;
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let mut der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        der.extend_from_slice(b"XYZW");
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n")
    };
    out.push(case(
        "leaf p256 with bytes after its DER",
        der_plus(&p256_crt),
        r(&p256),
    ));
    out.push(case(
        "leaf p256 + intermediate with bytes after its DER",
        r(&leaf) + &der_plus(&r(&int)),
        r(&leaf_key),
    ));
    // A junk PRIVATE KEY block holding the P-521 OID bytes.
    let p521 = lab.key("secp521r1");
    let p521_crt = r(&lab.cert(&p521, "leaf.test", None, Some("sha256"), false));
    out.push(case(
        "leaf p521, a junk PRIVATE KEY holding the P-521 OID",
        p521_crt.clone(),
        "-----BEGIN PRIVATE KEY-----\nMAkGBSuBBAAjBQA=\n-----END PRIVATE KEY-----\n".into(),
    ));
    // A real key of the same type that is not the certificate's, every type.
    for k in ["rsa2048", "prime256v1", "secp384r1", "secp521r1", "ed25519"] {
        let a = lab.key(k);
        let b = lab.key(k);
        let d = (!ed(k)).then_some("sha256");
        let crt = lab.cert(&a, "leaf.test", None, d, false);
        out.push(case(format!("leaf {k}, another {k} key"), r(&crt), r(&b)));
    }
    out.push(case("leaf rsa2048, a P-256 key", rsa_crt, r(&p256)));
    out.push(case(
        "leaf ed448, an Ed25519 key",
        r(&lab.cert(&lab.key("ed448"), "leaf.test", None, None, false)),
        r(&lab.key("ed25519")),
    ));
    out
}

fn secret(c: &Case) -> Secret {
    let mut s = Secret {
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            [
                ("tls.crt".to_string(), ByteString(c.crt.as_bytes().to_vec())),
                ("tls.key".to_string(), ByteString(c.key.as_bytes().to_vec())),
            ]
            .into(),
        ),
        ..Default::default()
    };
    s.metadata.name = Some("web-tls".into());
    s.metadata.namespace = Some("default".into());
    s
}

/// Whether (haproxy -c, nginx -t) load `pem` (chain then key) as an HTTPS listener's
/// certificate, with their output.
fn proxies_load(ns: &Netns, dir: &Path, pem: &str) -> (bool, bool, String) {
    let file = dir.join("cert.pem");
    std::fs::write(&file, pem).unwrap();
    let f = file.display();
    let hcfg = dir.join("haproxy.cfg");
    std::fs::write(
        &hcfg,
        format!(
            "defaults\n  mode http\n  timeout client 1s\n  timeout server 1s\n  timeout connect 1s\n\
             frontend f\n  bind 127.0.0.1:8443 ssl crt {f}\n  default_backend b\n\
             backend b\n  server s 127.0.0.1:8080\n"
        ),
    )
    .unwrap();
    let h = ns
        .cmd("haproxy")
        .arg("-c")
        .arg("-f")
        .arg(&hcfg)
        .output()
        .unwrap();
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let ncfg = dir.join("nginx.conf");
    std::fs::write(
        &ncfg,
        format!(
            "error_log {d}/logs/error.log;\npid {d}/nginx.pid;\nevents {{}}\nhttp {{\n  access_log off;\n\
             server {{\n    listen 127.0.0.1:8444 ssl;\n    ssl_certificate {f};\n    ssl_certificate_key {f};\n  }}\n}}\n",
            d = dir.display()
        ),
    )
    .unwrap();
    let n = ns
        .cmd("nginx")
        .args(["-t", "-q", "-p"])
        .arg(dir)
        .arg("-c")
        .arg(&ncfg)
        .output()
        .unwrap();
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    (
        h.status.success(),
        n.status.success(),
        format!("haproxy: {}nginx: {}", text(&h), text(&n)),
    )
}

#[test]
#[ignore = "needs root: a network namespace for haproxy -c and nginx -t; run with --include-ignored"]
fn inspect_accepts_exactly_what_both_proxies_load() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "ip"]);
    let lab = Lab::new();
    let cases = cases(&lab);
    let ns = Netns::new("k8slbcert");
    let dir = lab.dir.path().join("check");
    std::fs::create_dir_all(&dir).unwrap();
    let mut table = Vec::new();
    let mut wrong = Vec::new();
    let (mut accepted, mut refused_by_proxies, mut policy) = (0, 0, 0);
    for c in &cases {
        let verdict = inspect(&secret(c));
        let (h, n, out) = proxies_load(&ns, &dir, &format!("{}{}", c.crt, c.key));
        let is_policy = POLICY.contains(&c.name.as_str());
        let why = match &verdict {
            Ok(_) => "accepted".to_string(),
            Err(e) => e.to_string(),
        };
        table.push(format!(
            "{:<60} haproxy {:<4} nginx {:<4} k8slb: {why}",
            c.name,
            if h { "OK" } else { "FAIL" },
            if n { "OK" } else { "FAIL" }
        ));
        match (&verdict, h && n, is_policy) {
            (Ok(cert), true, false) => {
                // What the nodes get from it loads too.
                let (h2, n2, out2) = proxies_load(&ns, &dir, &cert.pem());
                if !(h2 && n2) {
                    wrong.push(format!("{}: the node file is refused:\n{out2}", c.name));
                }
                accepted += 1;
            }
            (Err(_), false, false) => refused_by_proxies += 1,
            (Err(_), true, true) => policy += 1,
            (Ok(_), false, _) => wrong.push(format!(
                "{}: k8slb accepts what a proxy refuses:\n{out}",
                c.name
            )),
            (Err(e), true, false) => wrong.push(format!(
                "{}: k8slb refuses ({e}) what both proxies load, and it is not in POLICY",
                c.name
            )),
            (_, _, true) => wrong.push(format!(
                "{}: in POLICY, but k8slb {} and the proxies {}:\n{out}",
                c.name,
                if verdict.is_ok() {
                    "accepts"
                } else {
                    "refuses"
                },
                if h && n { "load it" } else { "refuse it" }
            )),
        }
    }
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    for p in POLICY {
        assert!(names.contains(p), "POLICY names no case: {p}");
    }
    println!("{}", table.join("\n"));
    println!(
        "{} cases: {accepted} accepted by k8slb and both proxies, {refused_by_proxies} refused by k8slb and a proxy, {policy} refused by k8slb only (policy)",
        cases.len()
    );
    assert!(
        wrong.is_empty(),
        "{}\n\n{}",
        wrong.join("\n\n"),
        table.join("\n")
    );
    assert!(
        accepted >= 20 && refused_by_proxies >= 20,
        "a decent spread"
    );
}
