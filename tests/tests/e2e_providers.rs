//! The nginx and kubeproxy providers: their basic paths.

use k8slb_tests::objects::{svc, tcp, udp};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::{self, Proto, UDP_PORT};
use k8slb_tests::wait;
use std::net::SocketAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn nginx_http_and_udp() {
    let mut sys = System::start(Options::new("nginx").proxy("nginx")).expect("system");
    let s = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply_service(&s).unwrap();
    let u = svc("default", "dns").port(udp("dns", 5353, UDP_PORT));
    sys.apply_service(&u).unwrap();
    let ip = sys.wait_ips("default/web", T).unwrap()[0];
    let uip = sys.wait_ips("default/dns", T).unwrap()[0];
    let target = SocketAddr::new(ip, 80);
    sys.wait_serving(Proto::Http, target, T).unwrap();
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 100, 0.0).unwrap();
    assert_eq!(r.failed, 0, "{r:?}");
    assert_eq!(r.by_backend.len(), 2, "{r:?}");
    let utarget = SocketAddr::new(uip, 5353);
    sys.wait_serving(Proto::Udp, utarget, T).unwrap();
    let r = traffic::load(&sys.lab, "client", Proto::Udp, utarget, 100, 0.0).unwrap();
    assert_eq!(r.failed, 0, "{r:?}");
    assert_eq!(r.by_backend.len(), 2, "UDP through nginx reached {r:?}");
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn kubeproxy_holds_and_moves_the_vip() {
    let mut sys = System::start(Options::new("kubeproxy").proxy("kubeproxy")).expect("system");
    let s = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply_service(&s).unwrap();
    let ip = sys.wait_ips("default/web", T).unwrap()[0];
    let st = sys.state().unwrap();
    let ss = st
        .services
        .iter()
        .find(|(k, _)| k.to_string() == "default/web")
        .unwrap()
        .1;
    assert_eq!(
        ss.ip_mode,
        k8slb_common::state::IpMode::Vip,
        "kubeproxy publishes ipMode VIP"
    );
    let master = sys.wait_one_holder(ip, T).unwrap();
    assert!(
        sys.pids_named(&master, "haproxy").unwrap().is_empty(),
        "kubeproxy runs no haproxy"
    );
    sys.lab.cut_link(&master).unwrap();
    wait::until(T, || Ok(sys.holders(ip)?.iter().any(|h| *h != master)))
        .expect("the VIP did not move");
    sys.lab.restore_link(&master).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    sys.wait_one_holder(ip, T).unwrap();
    sys.lab.pass();
}
