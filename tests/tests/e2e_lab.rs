//! The harness itself: namespaces, links, backends, the client, the probe, teardown.
//! Needs root; fails (never skips) without it.

use k8slb_tests::traffic::{self, Proto, HTTP_PORT, TCP_PORT, UDP_PORT};
use k8slb_tests::{Lab, Role};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn lab_builds_serves_cuts_and_tears_down() {
    let mut lab = Lab::new("harness").expect("lab");
    lab.add_host("be1", Role::Backend, 21).unwrap();
    lab.add_host("be2", Role::Backend, 22).unwrap();
    lab.add_host("client", Role::Client, 2).unwrap();
    traffic::start_backend(&mut lab, "be1").unwrap();
    traffic::start_backend(&mut lab, "be2").unwrap();
    let be1 = lab.host("be1").clone();

    for (proto, port) in [
        (Proto::Http, HTTP_PORT),
        (Proto::Tcp, TCP_PORT),
        (Proto::Udp, UDP_PORT),
    ] {
        for ip in [be1.v4.into(), std::net::IpAddr::V6(be1.v6)] {
            let r =
                traffic::load(&lab, "client", proto, SocketAddr::new(ip, port), 20, 0.0).unwrap();
            assert_eq!((r.ok, r.failed), (20, 0), "{proto:?} to {ip}: {r:?}");
            assert_eq!(r.by_backend.get("be1"), Some(&20), "{r:?}");
        }
    }

    // A cut link: requests fail; restored: they work again; the probe sees the gap.
    let target = SocketAddr::new(be1.v4.into(), HTTP_PORT);
    let probe = traffic::start_probe(
        &mut lab,
        "client",
        "probe",
        Proto::Http,
        target,
        10,
        Duration::from_secs(20),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    lab.cut_link("be1").unwrap();
    let r = traffic::load_args(
        &lab,
        "client",
        Proto::Http,
        target,
        &["-n", "1", "--timeout-ms", "200"],
    )
    .unwrap();
    assert_eq!(r.failed, 1, "cut link still answers: {r:?}");
    std::thread::sleep(Duration::from_millis(500));
    lab.restore_link("be1").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let p = probe.stop_probe(&mut lab).unwrap();
    assert!(p.recovered, "{p:?}");
    assert!(p.failed > 0, "the probe did not see the cut: {p:?}");

    // Teardown removes every namespace and process.
    let namespaces: Vec<String> = lab
        .hosts()
        .map(|h| h.ns.clone())
        .chain([lab.switch_ns.clone()])
        .collect();
    lab.pass();
    let errors = lab.teardown();
    assert!(errors.is_empty(), "{errors:?}");
    for ns in namespaces {
        assert!(
            !Path::new("/run/netns").join(&ns).exists(),
            "{ns} left behind"
        );
    }
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn lab_cleans_up_after_a_panic() {
    let result = std::panic::catch_unwind(|| {
        let mut lab = Lab::new("panic").expect("lab");
        lab.add_host("be1", Role::Backend, 21).unwrap();
        traffic::start_backend(&mut lab, "be1").unwrap();
        let ns = lab.host("be1").ns.clone();
        std::fs::write("/tmp/k8slb-lab-panic-ns", &ns).unwrap();
        lab.pass(); // keep the test output quiet: the panic is on purpose
        panic!("on purpose");
    });
    assert!(result.is_err());
    let ns = std::fs::read_to_string("/tmp/k8slb-lab-panic-ns").unwrap();
    let _ = std::fs::remove_file("/tmp/k8slb-lab-panic-ns");
    assert!(
        !Path::new("/run/netns").join(&ns).exists(),
        "{ns} left behind after a panic"
    );
}
