//! `haproxy_rt::update_cert` against a real HAProxy (root: a network namespace made by
//! the test; `apt-get install -y haproxy openssl`): a renewed certificate is taken without
//! a reload, a key that does not match is refused with the transaction aborted and the
//! old certificate still served, and no error quotes key material.

mod support;

use k8slb_actor::haproxy_rt::{update_cert, RuntimeError};
use k8slb_common::testing::self_signed;
use std::path::Path;

fn served_cn(ns: &support::Netns) -> String {
    let out = ns
        .cmd("sh")
        .arg("-c")
        .arg("openssl s_client -connect 198.18.0.1:443 -servername site </dev/null 2>/dev/null | openssl x509 -noout -subject")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs root: runs HAProxy in a network namespace it creates; ./scripts/test.sh runs it"]
fn a_certificate_is_replaced_hitless_and_a_mismatched_key_is_refused_and_aborted() {
    support::require_root_and(&["haproxy", "openssl"]);
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (c1, k1) = self_signed("one");
    let (c2, k2) = self_signed("two");
    let cert = dir.join("default_site.pem");
    std::fs::write(&cert, format!("{c1}{k1}")).unwrap();
    let list = dir.join("list");
    std::fs::write(&list, format!("{} site\n", cert.display())).unwrap();
    let sock = dir.join("rt.sock");
    let cfg = dir.join("h.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  stats socket {} mode 600 level admin\ndefaults\n  mode http\n  timeout connect 1s\n  timeout client 5s\n  timeout server 5s\nfrontend f\n  bind 198.18.0.1:443 ssl crt-list {}\n  http-request return status 200 content-type text/plain string ok\n",
            sock.display(),
            list.display()
        ),
    )
    .unwrap();
    let ns = support::Netns::new("k8slbcu");
    ns.ip("addr add 198.18.0.1/32 dev lo");
    let child = ns
        .cmd("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&cfg)
        .spawn()
        .unwrap();
    let pid = child.id();
    let _h = Killed(child);
    assert!(
        support::wait_until_every(
            std::time::Duration::from_secs(10),
            std::time::Duration::from_millis(50),
            || served_cn(&ns).contains("one")
        ),
        "HAProxy serves the first certificate"
    );
    let path = cert.to_str().unwrap();

    // Renewed: the file is replaced, then HAProxy told; same process, new certificate.
    std::fs::write(&cert, format!("{c2}{k2}")).unwrap();
    update_cert(&sock, path).expect("the renewal is taken");
    assert!(served_cn(&ns).contains("two"), "{}", served_cn(&ns));

    // A key that does not match: refused, the transaction aborted, "two" still served.
    std::fs::write(&cert, format!("{c1}{k2}")).unwrap();
    let e = update_cert(&sock, path).unwrap_err();
    assert!(matches!(e, RuntimeError::Refused { .. }), "{e}");
    let msg = e.to_string();
    for secret in [&k1, &k2] {
        assert!(!msg.contains(secret.lines().nth(1).unwrap()), "{msg}");
    }
    assert!(served_cn(&ns).contains("two"), "{}", served_cn(&ns));
    // Nothing is left open: a good update works right after.
    std::fs::write(&cert, format!("{c1}{k1}")).unwrap();
    update_cert(&sock, path).expect("no transaction left behind");
    assert!(served_cn(&ns).contains("one"), "{}", served_cn(&ns));
    // A path the config does not load is refused.
    assert!(update_cert(&sock, dir.join("one.crt").to_str().unwrap()).is_err());
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "the same HAProxy process throughout"
    );
}
