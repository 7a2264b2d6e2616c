//! What one TLS Secret costs the watcher: `certs::inspect` on each key type of the test
//! fixtures (parse every certificate, check the key, derive its public key). The watcher
//! inspects each Secret that a route names once per plan round, so this times the number
//! of such Secrets is the per-round cost. Run:
//!
//!     cargo bench -p k8slb-common --bench certs
//!
//! Measured (2 shared cores): RSA 2048 14 us, P-256 52 us, P-384 144 us, P-521 130 us,
//! Ed25519 21 us, a P-256 leaf + intermediate + RSA root 63 us.

use std::hint::black_box;

use criterion::Criterion;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use k8slb_common::certs::inspect;

fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/certs")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn secret(crt: &str, key: &str) -> Secret {
    let mut s = Secret {
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            [
                ("tls.crt".to_string(), ByteString(crt.as_bytes().to_vec())),
                ("tls.key".to_string(), ByteString(key.as_bytes().to_vec())),
            ]
            .into(),
        ),
        ..Default::default()
    };
    s.metadata.name = Some("web-tls".into());
    s.metadata.namespace = Some("default".into());
    s
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let cases = [
        ("rsa2048", fixture("rsa.crt"), fixture("rsa.key")),
        ("p256", fixture("ec.crt"), fixture("ec.key")),
        ("p384", fixture("p384.crt"), fixture("p384.key")),
        ("p521", fixture("p521.crt"), fixture("p521.key")),
        ("ed25519", fixture("ed25519.crt"), fixture("ed25519.key")),
        (
            "p256_leaf_int_root",
            fixture("leaf.crt") + &fixture("int.crt") + &fixture("ca.crt"),
            fixture("leaf.key"),
        ),
    ];
    let mut g = c.benchmark_group("inspect");
    for (name, crt, key) in &cases {
        let s = secret(crt, key);
        assert!(inspect(&s).is_ok(), "{name}");
        g.bench_function(*name, |b| b.iter(|| inspect(black_box(&s))));
    }
    g.finish();
    c.final_summary();
}
