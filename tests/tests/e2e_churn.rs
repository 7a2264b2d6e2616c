//! A new Service and endpoint churn under steady load: zero failed requests on the
//! existing Service, zero HAProxy reloads for endpoint-only changes.

use k8slb_tests::objects::{endpoint_slice, svc, tcp};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::{self, Proto, Steady};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn new_service_and_endpoint_churn_under_load() {
    let mut sys = System::start(Options::new("churn").backends(3)).expect("system");
    let s = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply_service(&s).unwrap();
    let ip = sys.wait_ips("default/web", T).unwrap()[0];
    let target = SocketAddr::new(ip, 80);
    sys.wait_serving(Proto::Http, target, T).unwrap();
    sys.wait_one_holder(ip, T).unwrap();
    // Reloads still in flight for the Service's creation are done before counting.
    let reloads_before = sys
        .settled_haproxy_reloads(Duration::from_millis(1500), T)
        .unwrap();
    let load = traffic::start_load(
        &mut sys.lab,
        "client",
        "load",
        Proto::Http,
        target,
        Steady {
            rate: 200.0,
            concurrency: 4,
            max: Duration::from_secs(60),
        },
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));

    // Endpoint churn: subsets of the three backends, never empty, ready flags flipping.
    let be: Vec<IpAddr> = sys.backend_ips();
    let sets: Vec<Vec<(IpAddr, bool)>> = vec![
        vec![(be[0], true), (be[1], true)],
        vec![(be[0], true), (be[1], false), (be[2], true)],
        vec![(be[2], true)],
        vec![(be[1], true), (be[2], true)],
        vec![(be[0], true), (be[1], true), (be[2], true)],
        vec![(be[0], true)],
        vec![(be[0], true), (be[2], false)],
        vec![(be[0], true), (be[1], true), (be[2], true)],
    ];
    for (i, set) in sets.iter().enumerate() {
        sys.apply("eps-default-web", &endpoint_slice(&s, "web-1", set))
            .unwrap();
        std::thread::sleep(Duration::from_millis(400));
        eprintln!("churn step {i} applied");
    }
    let reloads_churn = sys
        .settled_haproxy_reloads(Duration::from_millis(1500), T)
        .unwrap();

    // A new Service while the load goes on (this one may reload; the old one must not fail).
    let s2 = svc("default", "web2").port(tcp("http", 80, 8080));
    sys.apply_service(&s2).unwrap();
    let ip2 = sys.wait_ips("default/web2", T).unwrap()[0];
    sys.wait_serving(Proto::Http, SocketAddr::new(ip2, 80), T)
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let r = load.stop_load(&mut sys.lab).unwrap();
    eprintln!("load during churn: {r:?}; reloads before {reloads_before:?}, after churn {reloads_churn:?}");
    assert!(r.ok > 500, "too little load went through: {r:?}");
    assert_eq!(
        r.failed, 0,
        "requests failed during churn / new Service: {r:?}"
    );
    assert_eq!(
        reloads_before, reloads_churn,
        "HAProxy reloaded for endpoint-only changes"
    );
    assert_eq!(r.by_backend.len(), 3, "{r:?}");
    sys.lab.pass();
}
