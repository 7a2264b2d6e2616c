//! The seed README's examples, as written: only the addresses are moved into the lab's
//! ranges (1.2.3.0/22 → 198.18.1.0/24 and 198.18.2.0/24, 2001:468::/64 → fd00:18::/64),
//! since the lab never uses addresses outside 198.18.0.0/15 and fd00::/8.
//! Pools (see k8slb_tests::system): default, external (interface em1), public, ipv6.

use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::{self, Proto};
use k8slb_tests::wait;
use serde_json::json;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

use k8slb_tests::seed::{DUAL, INGRESS, MYAPP_HTTP, MYAPP_HTTPS, RANCHER};

/// The EndpointSlice kube-controller-manager would make for a Service: every backend,
/// ready, with the Service's port names and target ports.
fn slice(sys: &System, ns: &str, svc: &str, ports: &[(&str, u16)]) -> serde_json::Value {
    let endpoints: Vec<_> = sys
        .backend_ips()
        .iter()
        .map(|a| json!({"addresses": [a.to_string()], "conditions": {"ready": true}}))
        .collect();
    let ports: Vec<_> = ports
        .iter()
        .map(|(n, p)| json!({"name": n, "port": p, "protocol": "TCP"}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{svc}-abcde"), "namespace": ns,
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4", "endpoints": endpoints, "ports": ports,
    })
}

fn both_backends(sys: &System, target: SocketAddr) {
    sys.wait_serving(Proto::Http, target, T).unwrap();
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 60, 0.0).unwrap();
    assert_eq!(r.failed, 0, "{target}: {r:?}");
    assert_eq!(r.by_backend.len(), 2, "{target}: {r:?}");
}

/// HTTPS through the VIP, terminated with the example certificate.
fn https_ok(sys: &System, ip: IpAddr) {
    let host = match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    let url = format!("https://{host}/");
    wait::until(T, || {
        Ok(sys
            .lab
            .run_in("client", &["curl", "-skf", "-m", "2", &url])?
            .status
            .success())
    })
    .unwrap_or_else(|e| panic!("{url}: {e:#}"));
    let out = sys
        .lab
        .run_in("client", &["curl", "-skv", "-m", "5", &url])
        .unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    let verbose = String::from_utf8_lossy(&out.stderr);
    assert!(body.starts_with("backend=be"), "{url}: {body}");
    assert!(
        verbose.contains("k8slb-example.invalid"),
        "{url} did not present the example cert: {verbose}"
    );
}

/// A plain HTTP port of a Service with TLS answers with a redirect to HTTPS (the seed's
/// rule: any port 443 turns the redirect on for every frontend unless
/// `loadbalancer/sslredirect: "false"`).
fn redirects_to_https(sys: &System, target: SocketAddr) {
    let url = format!("http://{target}/x");
    let mut out = String::new();
    wait::until(T, || {
        out = sys.lab.check_in(
            "client",
            &[
                "curl",
                "-s",
                "-m",
                "2",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{redirect_url}",
                &url,
            ],
        )?;
        Ok(!out.starts_with("000"))
    })
    .unwrap_or_else(|e| panic!("{url}: {e:#}"));
    let (code, location) = out.split_once(' ').unwrap_or((&out, ""));
    assert!(
        ["301", "302", "307", "308"].contains(&code),
        "{url}: no redirect: {out}"
    );
    let host = match target.ip() {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    assert!(
        location.starts_with(&format!("https://{host}")),
        "{url}: redirect to {location}"
    );
}

/// HTTPS requests (one connection each) reach both backends.
fn https_both_backends(sys: &System, ip: IpAddr) {
    let url = format!("https://{ip}/");
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let body = sys
            .lab
            .check_in("client", &["curl", "-skf", "-m", "5", &url])
            .unwrap_or_else(|e| panic!("{url}: {e:#}"));
        seen.insert(body.lines().next().unwrap_or_default().to_string());
    }
    assert_eq!(seen.len(), 2, "{url} reached {seen:?}");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn seed_readme_examples_work_as_written() {
    let mut sys = System::start(Options::new("seed")).expect("system");
    let lbs = sys.lb_nodes();

    // 1. The most basic example: myapp-loadbalancer, port 80, a dynamic IP from `default`.
    sys.apply(
        "eps-myapp",
        &slice(
            &sys,
            "default",
            "myapp-loadbalancer",
            &[("http", 80), ("https", 80)],
        ),
    )
    .unwrap();
    sys.apply_text("myapp-loadbalancer.yml", MYAPP_HTTP)
        .unwrap();
    let ip = sys.wait_ips("default/myapp-loadbalancer", T).unwrap()[0];
    assert!(ip.to_string().starts_with("198.18.0.1"), "{ip}");
    both_backends(&sys, SocketAddr::new(ip, 80));

    // 2. SSL termination on 443 with <certPath>/default.pem; the IP stays.
    sys.apply_text("myapp-loadbalancer.yml", MYAPP_HTTPS)
        .unwrap();
    wait::until(T, || {
        let st = sys.state()?;
        Ok(st.services.iter().any(|(k, s)| {
            k.to_string() == "default/myapp-loadbalancer"
                && s.ports.iter().any(|p| p.port == 443 && p.tls)
        }))
    })
    .expect("port 443 with TLS in the state");
    assert_eq!(
        sys.wait_ips("default/myapp-loadbalancer", T).unwrap()[0],
        ip,
        "the IP moved"
    );
    https_ok(&sys, ip);
    std::fs::remove_file(sys.objects_dir.join("myapp-loadbalancer.yml")).unwrap();

    // 3. Rancher on a static IP from pool `external` (forced interface em1), TLS.
    sys.apply(
        "eps-rancher",
        &slice(
            &sys,
            "cattle-system",
            "rancher-loadbalancer",
            &[("https", 443)],
        ),
    )
    .unwrap();
    sys.apply_text("rancher-loadbalancer.yml", RANCHER).unwrap();
    let rip: IpAddr = "198.18.1.4".parse().unwrap();
    assert_eq!(
        sys.wait_ips("cattle-system/rancher-loadbalancer", T)
            .unwrap(),
        vec![rip]
    );
    let holder = sys.wait_one_holder(rip, T).unwrap();
    let on_em1 = sys
        .lab
        .ip(
            &sys.lab.host(&holder).ns,
            &["-br", "addr", "show", "dev", "em1"],
        )
        .unwrap();
    assert!(
        on_em1.contains("198.18.1.4"),
        "the VIP is not on em1: {on_em1}"
    );
    https_ok(&sys, rip);
    std::fs::remove_file(sys.objects_dir.join("rancher-loadbalancer.yml")).unwrap();
    wait::until(T, || Ok(sys.holders(rip)?.is_empty())).expect("rancher's VIP released");

    // 4. Simulated dual stack: the same pods behind an IPv4 and an IPv6 Service.
    sys.apply(
        "eps-myapp6",
        &slice(&sys, "default", "myapp-loadbalancer6", &[("http", 80)]),
    )
    .unwrap();
    sys.apply_text("myapp-dual.yml", DUAL).unwrap();
    let ip4 = sys.wait_ips("default/myapp-loadbalancer", T).unwrap()[0];
    let ip6 = sys.wait_ips("default/myapp-loadbalancer6", T).unwrap()[0];
    assert_eq!(ip4, rip);
    assert_eq!(ip6, "fd00:18::201:4".parse::<IpAddr>().unwrap());
    both_backends(&sys, SocketAddr::new(ip4, 80));
    both_backends(&sys, SocketAddr::new(ip6, 80));
    std::fs::remove_file(sys.objects_dir.join("myapp-dual.yml")).unwrap();

    // 5. The Ingress controller's floating IP: 443 terminated, 80 redirected to it.
    sys.apply(
        "eps-ingress",
        &slice(
            &sys,
            "ingress-nginx",
            "ingress-lb",
            &[("http", 80), ("https", 80)],
        ),
    )
    .unwrap();
    sys.apply_text("ingress-lb.yml", INGRESS).unwrap();
    let iip: IpAddr = "198.18.2.4".parse().unwrap();
    assert_eq!(
        sys.wait_ips("ingress-nginx/ingress-lb", T).unwrap(),
        vec![iip]
    );
    redirects_to_https(&sys, SocketAddr::new(iip, 80));
    https_ok(&sys, iip);
    https_both_backends(&sys, iip);
    assert_eq!(sys.holders(iip).unwrap().len(), 1, "{lbs:?}");
    sys.lab.pass();
}
