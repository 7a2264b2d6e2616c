//! The HAProxy provider end to end: L7, redirect, L4, IPv6, a backend killed.
//! Needs root, keepalived, haproxy and the built binaries; fails (never skips) without them.

use k8slb_tests::objects::{svc, tcp};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::{self, Proto, TCP_PORT};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn vip(sys: &System, key: &str) -> IpAddr {
    sys.wait_ips(key, T).expect("an IP")[0]
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn http_through_the_vip_reaches_both_backends() {
    let mut sys = System::start(Options::new("http")).expect("system");
    let s = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply_service(&s).unwrap();
    let ip = vip(&sys, "default/web");
    assert!(
        ip.to_string().starts_with("198.18.0."),
        "{ip} not from pool default"
    );
    let target = SocketAddr::new(ip, 80);
    sys.wait_serving(Proto::Http, target, T).unwrap();
    sys.wait_one_holder(ip, T).unwrap();
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 200, 0.0).unwrap();
    assert_eq!(r.failed, 0, "{r:?}");
    assert!(r.by_backend.get("be1").copied().unwrap_or(0) > 20, "{r:?}");
    assert!(r.by_backend.get("be2").copied().unwrap_or(0) > 20, "{r:?}");
    // The backend sees X-Forwarded-For with the client's address (http mode).
    let body = sys
        .lab
        .check_in(
            "client",
            &["curl", "-sf", "-m", "5", &format!("http://{ip}/")],
        )
        .unwrap();
    assert!(body.contains("x-forwarded-for=198.18.0.2"), "{body}");
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn http_redirects_to_https_and_terminates_tls() {
    let mut sys = System::start(Options::new("redirect")).expect("system");
    let s = svc("default", "secure")
        .port(tcp("http", 80, 8080))
        .port(tcp("https", 443, 8080))
        .annotation("loadbalancer/sslredirect", "true");
    sys.apply_service(&s).unwrap();
    let ip = vip(&sys, "default/secure");
    sys.wait_one_holder(ip, T).unwrap();
    let url = format!("https://{ip}/");
    k8slb_tests::wait::until(T, || {
        Ok(sys
            .lab
            .run_in("client", &["curl", "-skf", "-m", "2", &url])?
            .status
            .success())
    })
    .expect("https answers");
    let out = sys
        .lab
        .check_in(
            "client",
            &[
                "curl",
                "-s",
                "-m",
                "5",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{redirect_url}",
                &format!("http://{ip}/x"),
            ],
        )
        .unwrap();
    let (code, location) = out.split_once(' ').unwrap_or((&out, ""));
    assert!(
        ["301", "302", "307", "308"].contains(&code),
        "no redirect: {out}"
    );
    assert!(
        location.starts_with(&format!("https://{ip}")),
        "redirect to {location}"
    );
    let body = sys
        .lab
        .check_in("client", &["curl", "-skf", "-m", "5", &url])
        .unwrap();
    assert!(body.starts_with("backend=be"), "{body}");
    assert!(
        body.contains("x-forwarded-proto=https"),
        "no X-Forwarded-Proto: {body}"
    );
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn l4_tcp_passthrough() {
    let mut sys = System::start(Options::new("l4")).expect("system");
    let s = svc("default", "echo")
        .port(tcp("echo", 7000, TCP_PORT))
        .annotation("loadbalancer/mode", "tcp");
    sys.apply_service(&s).unwrap();
    let ip = vip(&sys, "default/echo");
    let target = SocketAddr::new(ip, 7000);
    sys.wait_serving(Proto::Tcp, target, T).unwrap();
    let r = traffic::load(&sys.lab, "client", Proto::Tcp, target, 100, 0.0).unwrap();
    assert_eq!(r.failed, 0, "{r:?}");
    assert_eq!(r.by_backend.len(), 2, "{r:?}");
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn ipv6_vip() {
    let mut sys = System::start(Options::new("v6")).expect("system");
    let s = svc("default", "web6")
        .port(tcp("http", 80, 8080))
        .annotation("loadbalancer/pool", "ipv6");
    sys.apply_service(&s).unwrap();
    let ip = vip(&sys, "default/web6");
    assert!(ip.is_ipv6(), "{ip}");
    assert!(
        ip.to_string().starts_with("fd00:18::101:"),
        "{ip} not from pool ipv6's range"
    );
    let target = SocketAddr::new(ip, 80);
    sys.wait_serving(Proto::Http, target, T).unwrap();
    sys.wait_one_holder(ip, T).unwrap();
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 100, 0.0).unwrap();
    assert_eq!(r.failed, 0, "{r:?}");
    assert_eq!(r.by_backend.len(), 2, "{r:?}");
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn a_killed_backend_stops_getting_requests() {
    let mut sys = System::start(Options::new("bekill")).expect("system");
    let s = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply_service(&s).unwrap();
    let ip = vip(&sys, "default/web");
    let target = SocketAddr::new(ip, 80);
    sys.wait_serving(Proto::Http, target, T).unwrap();
    let be1 = sys.backends["be1"];
    sys.lab.kill(be1).unwrap();
    // Detection: health checks mark be1 down (the EndpointSlice still lists it, as it
    // would for a pod that hangs before its readiness probe fails).
    k8slb_tests::wait::until(Duration::from_secs(20), || {
        let r = traffic::load(&sys.lab, "client", Proto::Http, target, 20, 0.0)?;
        Ok(r.failed == 0)
    })
    .expect("be1 is never taken out of rotation");
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 200, 100.0).unwrap();
    assert_eq!(r.failed, 0, "requests failed after detection: {r:?}");
    assert_eq!(
        r.by_backend.keys().collect::<Vec<_>>(),
        vec!["be2"],
        "{r:?}"
    );
    sys.lab.pass();
}
