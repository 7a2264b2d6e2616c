//! Gateway API end to end in the standalone (files) mode: GatewayClass, Gateway,
//! HTTPRoute, TLSRoute, TCPRoute, UDPRoute, ReferenceGrant and BackendTLSPolicy documents → the watcher's
//! plan (the Gateway's own address, the routes) → the actors render them into real
//! HAProxy and nginx → requests, connections and datagrams from the client through the
//! Gateway's address reach the pods.
//! Needs root, keepalived, haproxy, nginx and the built binaries; fails (never skips)
//! without them.

use k8slb_common::testing::self_signed;
use k8slb_tests::l7::{
    self, body, fingerprint, served_by, served_by_https, served_fingerprint, status,
    status_and_location, tls_secret,
};
use k8slb_tests::objects::{svc, tcp, udp};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::{self, Proto};
use k8slb_tests::wait;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// ClusterIP Services `<ns>/<name>` (port 80 → the backends' 8080) whose endpoints are
/// the lab's backends `which` (indexes).
fn backend(sys: &System, ns: &str, name: &str, which: &[usize]) {
    let s = svc(ns, name).port(tcp("http", 80, 8080));
    let mut v = s.to_value();
    v["spec"]["type"] = json!("ClusterIP");
    sys.apply(&format!("svc-{ns}-{name}"), &v).unwrap();
    let all = sys.backend_ips();
    let ips: Vec<IpAddr> = which.iter().map(|i| all[*i]).collect();
    sys.apply(
        &format!("eps-{ns}-{name}"),
        &s.endpoints(&format!("{name}-1"), &ips),
    )
    .unwrap();
}

fn gateway_api(kind: &str, ns: Option<&str>, name: &str, spec: Value) -> Value {
    let mut meta = json!({"name": name, "creationTimestamp": "2026-01-01T00:00:01Z"});
    if let Some(ns) = ns {
        meta["namespace"] = json!(ns);
    }
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
           "metadata": meta, "spec": spec})
}

fn route(name: &str, hostnames: Value, rules: Value) -> Value {
    gateway_api(
        "HTTPRoute",
        Some("default"),
        name,
        json!({"parentRefs": [{"name": "gw", "namespace": "infra"}],
               "hostnames": hostnames, "rules": rules}),
    )
}

fn to(name: &str, weight: u32) -> Value {
    json!({"name": name, "port": 80, "weight": weight})
}

/// The address the state gives Gateway `key`.
fn wait_gateway_ip(sys: &System, key: &str) -> IpAddr {
    let mut ip = None;
    wait::until(T, || {
        let s = sys.state()?;
        ip = s
            .gateways
            .iter()
            .find(|(k, _)| k.to_string() == key)
            .and_then(|(_, g)| g.ips.first().copied());
        Ok(ip.is_some())
    })
    .unwrap_or_else(|e| {
        panic!(
            "Gateway {key} got no address: {e:#}; problems: {:?}",
            sys.state().map(|s| s.problems).unwrap_or_default()
        )
    });
    ip.unwrap()
}

/// Which backend (as the load reports it) serves `host` alone.
fn backend_of(sys: &System, ip: IpAddr, host: &str) -> String {
    let r = traffic::load_args(
        &sys.lab,
        "client",
        Proto::Http,
        SocketAddr::new(ip, 80),
        &["-n", "10", "--host", host, "--path", "/"],
    )
    .unwrap();
    assert_eq!(r.failed, 0, "{host}: {r:?}");
    assert_eq!(r.by_backend.len(), 1, "{host}: one backend: {r:?}");
    r.by_backend.into_keys().next().unwrap()
}

fn gateway_routes_and_splits(proxy: &str) {
    let mut sys = System::start(Options::new(&format!("gw-{proxy}")).proxy(proxy)).expect("system");
    backend(&sys, "default", "app-a", &[0]);
    backend(&sys, "default", "app-b", &[1]);
    backend(&sys, "other", "app-o", &[0, 1]);
    let (crt, key) = self_signed("secure.example");
    sys.apply("secret-secure", &tls_secret("infra", "secure", &crt, &key))
        .unwrap();
    let (crt2, key2) = self_signed("second.example");
    sys.apply(
        "secret-second",
        &tls_secret("infra", "second", &crt2, &key2),
    )
    .unwrap();
    sys.apply(
        "gatewayclass",
        &gateway_api(
            "GatewayClass",
            None,
            "k8slb",
            json!({"controllerName": "k8slb.io/gateway-controller"}),
        ),
    )
    .unwrap();
    sys.apply(
        "gateway",
        &gateway_api(
            "Gateway",
            Some("infra"),
            "gw",
            json!({"gatewayClassName": "k8slb", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP",
                 "allowedRoutes": {"namespaces": {"from": "All"}}},
                {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "secure.example",
                 "tls": {"certificateRefs": [{"name": "secure"}]},
                 "allowedRoutes": {"namespaces": {"from": "All"}}},
                // A second HTTPS listener on the same port: its certificate by SNI.
                {"name": "https-second", "port": 443, "protocol": "HTTPS",
                 "hostname": "second.example",
                 "tls": {"certificateRefs": [{"name": "second"}]},
                 "allowedRoutes": {"namespaces": {"from": "All"}}},
            ]}),
        ),
    )
    .unwrap();
    sys.apply(
        "route-a",
        &route(
            "a",
            json!(["a.example"]),
            json!([{"backendRefs": [to("app-a", 1)]}]),
        ),
    )
    .unwrap();
    sys.apply(
        "route-split",
        &route(
            "split",
            json!(["split.example"]),
            json!([{"backendRefs": [to("app-a", 90), to("app-b", 10)]}]),
        ),
    )
    .unwrap();
    sys.apply(
        "route-paths",
        &route(
            "paths",
            json!(["paths.example", "secure.example"]),
            json!([
                {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}}],
                 "backendRefs": [to("app-b", 1)]},
                {"matches": [{"path": {"type": "Exact", "value": "/old"}}],
                 "filters": [{"type": "RequestRedirect",
                              "requestRedirect": {"scheme": "https", "hostname": "secure.example",
                                                  "statusCode": 301}}]},
            ]),
        ),
    )
    .unwrap();
    // A header match, and filters: a prefix rewrite, a request header set, a response
    // header added.
    sys.apply(
        "route-match",
        &route(
            "match",
            json!(["match.example"]),
            json!([
                {"matches": [{"path": {"value": "/"},
                              "headers": [{"name": "x-test-canary", "value": "yes"}]}],
                 "backendRefs": [to("app-b", 1)]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}}],
                 "filters": [
                     {"type": "URLRewrite",
                      "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}}},
                     {"type": "RequestHeaderModifier",
                      "requestHeaderModifier": {"set": [{"name": "x-test-env", "value": "prod"}],
                                                "remove": ["x-test-drop"]}},
                     {"type": "ResponseHeaderModifier",
                      "responseHeaderModifier": {"add": [{"name": "x-test-resp", "value": "yes"}]}},
                 ],
                 "backendRefs": [to("app-a", 1)]},
                {"backendRefs": [to("app-a", 1)]},
            ]),
        ),
    )
    .unwrap();
    sys.apply(
        "route-second",
        &route(
            "second",
            json!(["second.example"]),
            json!([{"backendRefs": [to("app-b", 1)]}]),
        ),
    )
    .unwrap();
    // Across namespaces, without a ReferenceGrant: refused, answered 500.
    sys.apply(
        "route-cross",
        &route(
            "cross",
            json!(["cross.example"]),
            json!([{"backendRefs": [{"name": "app-o", "namespace": "other", "port": 80}]}]),
        ),
    )
    .unwrap();

    let ip = wait_gateway_ip(&sys, "infra/gw");
    sys.wait_one_holder(ip, T).unwrap();
    let base = format!("http://{ip}");
    wait::until(T, || {
        Ok(status(&sys, "a.example", &format!("{base}/")) == "200")
    })
    .unwrap_or_else(|e| panic!("{proxy}: a.example never answered 200: {e:#}"));

    // Host and path routing, and what matches nothing.
    let a = backend_of(&sys, ip, "a.example");
    assert_eq!(
        status(&sys, "paths.example", &format!("{base}/api/x")),
        "200"
    );
    assert_eq!(
        status(&sys, "paths.example", &format!("{base}/apix")),
        "404"
    );
    assert_eq!(status(&sys, "nobody.example", &format!("{base}/")), "404");
    // The redirect.
    assert_eq!(
        status_and_location(&sys, "paths.example", &format!("{base}/old")),
        "301 https://secure.example/old"
    );
    // The refused cross-namespace reference: 500 and a problem on the route.
    assert_eq!(status(&sys, "cross.example", &format!("{base}/")), "500");
    let problems = sys.state().unwrap().problems;
    assert!(
        problems
            .iter()
            .any(|p| p.object.to_string() == "HTTPRoute default/cross"
                && p.reason.as_str() == "RefNotPermitted"),
        "{problems:?}"
    );
    // HTTPS on the listener's certificate, routed by the same route.
    assert_eq!(
        served_fingerprint(&sys, ip, 443, "secure.example"),
        fingerprint(&crt)
    );
    let https = sys
        .lab
        .run_in(
            "client",
            &[
                "curl",
                "-s",
                "-k",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-m",
                "3",
                "--resolve",
                &format!("secure.example:443:{ip}"),
                "https://secure.example/api/x",
            ],
        )
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert_eq!(https, "200", "{proxy}: HTTPS through the Gateway");

    // Two HTTPS listeners on port 443: each hostname gets its own certificate.
    assert_eq!(
        served_fingerprint(&sys, ip, 443, "second.example"),
        fingerprint(&crt2),
        "{proxy}: the second listener's certificate"
    );
    // Which lab backend is app-a's and which app-b's, as they name themselves.
    let pod_a = served_by(&sys, "a.example", &format!("{base}/"));
    let pod_b = served_by(&sys, "paths.example", &format!("{base}/api/x"));
    assert!(
        !pod_a.is_empty() && !pod_b.is_empty() && pod_a != pod_b,
        "{proxy}: app-a on {pod_a:?}, app-b on {pod_b:?}"
    );
    assert_eq!(
        served_by_https(&sys, ip, 443, "second.example", "/"),
        pod_b,
        "{proxy}: HTTPS on the second listener"
    );

    // The header match: with the header, app-b; without it, app-a.
    let canary = body(
        &sys,
        &[
            "-H",
            "Host: match.example",
            "-H",
            "x-test-canary: yes",
            &format!("{base}/x"),
        ],
    );
    assert_eq!(l7::backend_of(&canary), pod_b, "{proxy}: {canary}");
    assert_eq!(
        served_by(&sys, "match.example", &format!("{base}/x")),
        pod_a,
        "{proxy}: without the header"
    );
    // The rewrite and the header modifiers.
    let answer = body(
        &sys,
        &[
            "-i",
            "-H",
            "Host: match.example",
            "-H",
            "x-test-drop: 1",
            "-H",
            "x-test-env: dev",
            &format!("{base}/api/items?q=1"),
        ],
    );
    assert!(answer.contains("path=/v2/items?q=1"), "{proxy}: {answer}");
    assert!(answer.contains("x-test-env=prod"), "{proxy}: {answer}");
    assert!(!answer.contains("x-test-drop"), "{proxy}: {answer}");
    assert!(
        answer.to_ascii_lowercase().contains("x-test-resp: yes"),
        "{proxy}: {answer}"
    );

    // The 90/10 split, over 1,000 requests.
    let r = traffic::load_args(
        &sys.lab,
        "client",
        Proto::Http,
        SocketAddr::new(ip, 80),
        &["-n", "1000", "--host", "split.example", "--path", "/"],
    )
    .unwrap();
    assert_eq!(r.failed, 0, "{proxy}: {r:?}");
    let to_a = r.by_backend.get(&a).copied().unwrap_or(0);
    println!(
        "{proxy}: 90/10 split over 1000 requests: app-a {to_a}, app-b {}",
        1000 - to_a
    );
    assert!(
        (850..=950).contains(&to_a),
        "{proxy}: 90/10 split gave {r:?}"
    );

    // The weights turned around: HAProxy takes them over its Runtime API (`set map`),
    // without a reload; nginx reloads.
    let reloads_before = (proxy == "haproxy").then(|| {
        sys.settled_haproxy_reloads(Duration::from_millis(1500), T)
            .unwrap()
    });
    sys.apply(
        "route-split",
        &route(
            "split",
            json!(["split.example"]),
            json!([{"backendRefs": [to("app-a", 10), to("app-b", 90)]}]),
        ),
    )
    .unwrap();
    let mut last = None;
    wait::until(T, || {
        let r = traffic::load_args(
            &sys.lab,
            "client",
            Proto::Http,
            SocketAddr::new(ip, 80),
            &["-n", "1000", "--host", "split.example", "--path", "/"],
        )?;
        let to_a = r.by_backend.get(&a).copied().unwrap_or(0);
        let done = r.failed == 0 && (50..=150).contains(&to_a);
        last = Some(r);
        Ok(done)
    })
    .unwrap_or_else(|e| panic!("{proxy}: the 10/90 split never showed: {e:#}; last {last:?}"));
    println!("{proxy}: after the weights turned, 10/90: {last:?}");
    if let Some(before) = reloads_before {
        let after = sys
            .settled_haproxy_reloads(Duration::from_millis(1500), T)
            .unwrap();
        assert_eq!(after, before, "a change of weights reloaded HAProxy");
        println!("haproxy: reloads {before} -> {after} for the change of weights");
    }

    // A ReferenceGrant in the other namespace lets the route reach its Service.
    sys.apply(
        "grant",
        &gateway_api(
            "ReferenceGrant",
            Some("other"),
            "from-default",
            json!({"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                             "namespace": "default"}],
                   "to": [{"group": "", "kind": "Service"}]}),
        ),
    )
    .unwrap();
    wait::until(T, || {
        Ok(status(&sys, "cross.example", &format!("{base}/")) == "200")
    })
    .unwrap_or_else(|e| panic!("{proxy}: the granted reference never answered 200: {e:#}"));
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn haproxy_serves_gateway_routes_splits_redirects_tls_and_reference_grants() {
    gateway_routes_and_splits("haproxy");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn nginx_serves_gateway_routes_splits_redirects_tls_and_reference_grants() {
    gateway_routes_and_splits("nginx");
}

// Gateway API L4 (issue 12): TCP, UDP and TLS passthrough listeners with TCPRoute,
// UDPRoute and TLSRoute (v1alpha2) on a Gateway of their own, through the real actors,
// keepalived and proxies.

/// ClusterIP Service `<ns>/<name>` on the lab backends' L4 ports (TCP echo 9000, HTTPS
/// 443 for TLS passthrough, UDP echo 9001, each its own target port) whose endpoints are
/// the lab's backends `which` (indexes).
fn l4_backend(sys: &System, ns: &str, name: &str, which: &[usize]) {
    let s = svc(ns, name)
        .port(tcp("echo", traffic::TCP_PORT, traffic::TCP_PORT))
        .port(tcp("https", traffic::HTTPS_PORT, traffic::HTTPS_PORT))
        .port(udp("echo-udp", traffic::UDP_PORT, traffic::UDP_PORT));
    let mut v = s.to_value();
    v["spec"]["type"] = json!("ClusterIP");
    sys.apply(&format!("svc-{ns}-{name}"), &v).unwrap();
    let all = sys.backend_ips();
    let ips: Vec<IpAddr> = which.iter().map(|i| all[*i]).collect();
    sys.apply(
        &format!("eps-{ns}-{name}"),
        &s.endpoints(&format!("{name}-1"), &ips),
    )
    .unwrap();
}

/// A TLSRoute, TCPRoute or UDPRoute `default/<name>` (v1alpha2) on listener `section`
/// of Gateway `infra/l4`, one rule with `backend_refs`.
fn l4_route(kind: &str, name: &str, section: &str, hostnames: Value, backend_refs: Value) -> Value {
    let parent = json!({"name": "l4", "namespace": "infra", "sectionName": section});
    let mut spec = json!({"parentRefs": [parent], "rules": [{"backendRefs": backend_refs}]});
    if !hostnames.is_null() {
        spec["hostnames"] = hostnames;
    }
    let mut v = gateway_api(kind, Some("default"), name, spec);
    v["apiVersion"] = json!("gateway.networking.k8s.io/v1alpha2");
    v
}

fn l4_to(name: &str, port: u16, weight: u32) -> Value {
    json!({"name": name, "port": port, "weight": weight})
}

/// `n` connections (requests, datagrams) from the client to `ip:port`, one after the
/// other; `extra`: more lab-client flags (`--host` is the SNI for HTTPS).
fn l4_load(
    sys: &System,
    proto: Proto,
    ip: IpAddr,
    port: u16,
    n: u64,
    extra: &[&str],
) -> traffic::LoadResult {
    let n = n.to_string();
    let mut args = vec!["-n", n.as_str(), "--timeout-ms", "1000"];
    args.extend_from_slice(extra);
    traffic::load_args(&sys.lab, "client", proto, SocketAddr::new(ip, port), &args).unwrap()
}

/// Waits until one connection to `ip:port` (`proto`, `extra` flags) is answered.
fn wait_l4(sys: &System, proto: Proto, ip: IpAddr, port: u16, extra: &[&str], what: &str) {
    let mut last = None;
    wait::until(T, || {
        let r = l4_load(sys, proto, ip, port, 1, extra);
        let ok = r.ok == 1;
        last = Some(r);
        Ok(ok)
    })
    .unwrap_or_else(|e| {
        panic!(
            "{what} never answered: {e:#}; last {last:?}; problems: {:?}",
            sys.state().map(|s| s.problems).unwrap_or_default()
        )
    });
}

/// Whether the state's problems have one on `object` with `reason` whose message
/// contains `says`.
fn has_problem(sys: &System, object: &str, reason: &str, says: &str) -> bool {
    sys.state().is_ok_and(|s| {
        s.problems.iter().any(|p| {
            p.object.to_string() == object
                && p.reason.as_str() == reason
                && p.message.contains(says)
        })
    })
}

fn gateway_l4_routes(proxy: &str) {
    let mut sys =
        System::start(Options::new(&format!("gwl4-{proxy}")).proxy(proxy)).expect("system");
    let names: Vec<String> = sys.backends.keys().cloned().collect();
    let (be_a, be_b) = (names[0].clone(), names[1].clone());
    l4_backend(&sys, "default", "app-a", &[0]);
    l4_backend(&sys, "default", "app-b", &[1]);
    l4_backend(&sys, "default", "app-ab", &[0, 1]);
    l4_backend(&sys, "other", "app-o", &[0, 1]);
    sys.apply(
        "gatewayclass",
        &gateway_api(
            "GatewayClass",
            None,
            "k8slb",
            json!({"controllerName": "k8slb.io/gateway-controller"}),
        ),
    )
    .unwrap();
    let all = json!({"namespaces": {"from": "All"}});
    // The Gateway's listener ports (the backends' ports are traffic::*_PORT).
    let (tcp_port, split_port, cross_port, tls_port, udp_port) = (9000, 9100, 9200, 443, 9001);
    sys.apply(
        "gateway-l4",
        &gateway_api(
            "Gateway",
            Some("infra"),
            "l4",
            json!({"gatewayClassName": "k8slb", "listeners": [
                {"name": "tcp", "port": tcp_port, "protocol": "TCP", "allowedRoutes": all},
                {"name": "split", "port": split_port, "protocol": "TCP", "allowedRoutes": all},
                {"name": "cross", "port": cross_port, "protocol": "TCP", "allowedRoutes": all},
                {"name": "tls", "port": tls_port, "protocol": "TLS", "tls": {"mode": "Passthrough"},
                 "allowedRoutes": all},
                // HAProxy does not proxy UDP: refused under it, served by nginx.
                {"name": "udp", "port": udp_port, "protocol": "UDP", "allowedRoutes": all},
            ]}),
        ),
    )
    .unwrap();
    let (echo, https, dgram) = (traffic::TCP_PORT, traffic::HTTPS_PORT, traffic::UDP_PORT);
    for (stem, route) in [
        (
            "tcproute-tcp",
            l4_route(
                "TCPRoute",
                "tcp",
                "tcp",
                Value::Null,
                json!([l4_to("app-ab", echo, 1)]),
            ),
        ),
        (
            "tcproute-split",
            l4_route(
                "TCPRoute",
                "split",
                "split",
                Value::Null,
                json!([l4_to("app-a", echo, 90), l4_to("app-b", echo, 10)]),
            ),
        ),
        // Across namespaces, without a ReferenceGrant: refused, its connections closed.
        (
            "tcproute-cross",
            l4_route(
                "TCPRoute",
                "cross",
                "cross",
                Value::Null,
                json!([{"name": "app-o", "namespace": "other", "port": echo}]),
            ),
        ),
        (
            "tlsroute-one",
            l4_route(
                "TLSRoute",
                "one",
                "tls",
                json!(["one.example"]),
                json!([l4_to("app-a", https, 1)]),
            ),
        ),
        (
            "tlsroute-two",
            l4_route(
                "TLSRoute",
                "two",
                "tls",
                json!(["two.example"]),
                json!([l4_to("app-b", https, 1)]),
            ),
        ),
        (
            "udproute",
            l4_route(
                "UDPRoute",
                "udp",
                "udp",
                Value::Null,
                json!([l4_to("app-ab", dgram, 1)]),
            ),
        ),
    ] {
        sys.apply(stem, &route).unwrap();
    }

    let ip = wait_gateway_ip(&sys, "infra/l4");
    assert!(
        matches!(ip, IpAddr::V4(a) if a.octets()[..3] == [198, 18, 0]
            && (100..=120).contains(&a.octets()[3])),
        "{proxy}: the Gateway's address {ip} is not from the default pool's range"
    );
    sys.wait_one_holder(ip, T).unwrap();
    wait_l4(
        &sys,
        Proto::Tcp,
        ip,
        tcp_port,
        &[],
        &format!("{proxy}: the TCP listener"),
    );

    // TCP: the route's Service, both its backends.
    let r = l4_load(&sys, Proto::Tcp, ip, tcp_port, 100, &[]);
    println!("{proxy}: TCPRoute over 100 connections: {r:?}");
    assert_eq!(r.failed, 0, "{proxy}: TCP through the Gateway: {r:?}");
    assert_eq!(
        r.by_backend.keys().cloned().collect::<Vec<_>>(),
        [be_a.clone(), be_b.clone()],
        "{proxy}: both backends of app-ab answer TCP: {r:?}"
    );

    // The 90/10 TCP split, over 1,000 connections (HAProxy: a random draw per connection,
    // 900 ± 9.5 for one standard deviation; nginx: weighted round-robin).
    wait_l4(
        &sys,
        Proto::Tcp,
        ip,
        split_port,
        &[],
        &format!("{proxy}: the split listener"),
    );
    let r = l4_load(&sys, Proto::Tcp, ip, split_port, 1000, &[]);
    assert_eq!(r.failed, 0, "{proxy}: {r:?}");
    let to_a = r.by_backend.get(&be_a).copied().unwrap_or(0);
    let to_b = r.by_backend.get(&be_b).copied().unwrap_or(0);
    println!("{proxy}: 90/10 TCP split over 1000 connections: app-a {to_a}, app-b {to_b}");
    assert_eq!(to_a + to_b, 1000, "{proxy}: {r:?}");
    assert!(
        (850..=950).contains(&to_a),
        "{proxy}: 90/10 TCP split gave {r:?}"
    );

    // TLS passthrough: the client's SNI picks the route; the backends terminate TLS and
    // say who they are. An unknown name is closed.
    for (sni, want) in [("one.example", &be_a), ("two.example", &be_b)] {
        wait_l4(
            &sys,
            Proto::Https,
            ip,
            tls_port,
            &["--host", sni],
            &format!("{proxy}: TLS {sni}"),
        );
        let r = l4_load(&sys, Proto::Https, ip, tls_port, 20, &["--host", sni]);
        println!("{proxy}: TLS passthrough, SNI {sni}: {r:?}");
        assert_eq!(r.failed, 0, "{proxy}: SNI {sni}: {r:?}");
        assert_eq!(
            r.by_backend.keys().collect::<Vec<_>>(),
            [want],
            "{proxy}: SNI {sni} goes to {want} alone: {r:?}"
        );
    }
    let r = l4_load(
        &sys,
        Proto::Https,
        ip,
        tls_port,
        5,
        &["--host", "nobody.example"],
    );
    println!("{proxy}: TLS passthrough, unknown SNI: {r:?}");
    assert_eq!(r.ok, 0, "{proxy}: an unknown SNI reached a backend: {r:?}");
    assert!(r.by_backend.is_empty(), "{proxy}: {r:?}");

    // UDP: nginx carries it to the backends; under HAProxy the listener is refused, with
    // a problem on the Gateway that names HAProxy, and the rest of the Gateway is served
    // (above).
    if proxy == "nginx" {
        wait_l4(
            &sys,
            Proto::Udp,
            ip,
            udp_port,
            &[],
            "nginx: the UDP listener",
        );
        let r = l4_load(&sys, Proto::Udp, ip, udp_port, 100, &[]);
        println!("nginx: UDPRoute over 100 datagrams (each from its own port): {r:?}");
        assert_eq!(r.failed, 0, "nginx: UDP through the Gateway: {r:?}");
        assert_eq!(
            r.by_backend.keys().cloned().collect::<Vec<_>>(),
            [be_a.clone(), be_b.clone()],
            "nginx: both backends of app-ab answer UDP: {r:?}"
        );
        assert!(
            !has_problem(&sys, "Gateway infra/l4", "UnsupportedProtocol", ""),
            "nginx: {:?}",
            sys.state().unwrap().problems
        );
    } else {
        wait::until(T, || {
            Ok(has_problem(
                &sys,
                "Gateway infra/l4",
                "UnsupportedProtocol",
                "HAProxy",
            ))
        })
        .unwrap_or_else(|e| {
            panic!(
                "haproxy: no UnsupportedProtocol problem naming HAProxy on the Gateway: \
                 {e:#}; {:?}",
                sys.state().unwrap().problems
            )
        });
        let r = l4_load(&sys, Proto::Udp, ip, udp_port, 3, &["--timeout-ms", "300"]);
        assert_eq!(r.ok, 0, "haproxy: something answered UDP: {r:?}");
    }

    // The cross-namespace TCPRoute without a ReferenceGrant: RefNotPermitted, and its
    // connections are closed (no backend answers).
    wait::until(T, || {
        Ok(has_problem(
            &sys,
            "TCPRoute default/cross",
            "RefNotPermitted",
            "",
        ))
    })
    .unwrap_or_else(|e| {
        panic!(
            "{proxy}: no RefNotPermitted on TCPRoute default/cross: {e:#}; {:?}",
            sys.state().unwrap().problems
        )
    });
    let r = l4_load(&sys, Proto::Tcp, ip, cross_port, 5, &[]);
    println!("{proxy}: the refused cross-namespace TCPRoute: {r:?}");
    assert_eq!(
        r.ok, 0,
        "{proxy}: the refused reference reached a backend: {r:?}"
    );
    assert!(r.by_backend.is_empty(), "{proxy}: {r:?}");
    // Closed by the proxy, not refused by the kernel: the listener is served.
    assert!(
        !r.errors.contains_key("connect:ConnectionRefused"),
        "{proxy}: nothing listens on the cross listener's port: {r:?}"
    );
    // A ReferenceGrant from TCPRoutes in default lets it reach app-o.
    sys.apply(
        "grant-tcproute",
        &gateway_api(
            "ReferenceGrant",
            Some("other"),
            "tcproutes-from-default",
            json!({"from": [{"group": "gateway.networking.k8s.io", "kind": "TCPRoute",
                             "namespace": "default"}],
                   "to": [{"group": "", "kind": "Service"}]}),
        ),
    )
    .unwrap();
    wait_l4(
        &sys,
        Proto::Tcp,
        ip,
        cross_port,
        &[],
        &format!("{proxy}: the granted TCPRoute"),
    );
    let r = l4_load(&sys, Proto::Tcp, ip, cross_port, 20, &[]);
    println!("{proxy}: the cross-namespace TCPRoute, granted: {r:?}");
    assert_eq!(r.failed, 0, "{proxy}: the granted TCPRoute: {r:?}");
    assert!(
        !has_problem(&sys, "TCPRoute default/cross", "RefNotPermitted", ""),
        "{proxy}: {:?}",
        sys.state().unwrap().problems
    );
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn haproxy_serves_gateway_l4_tcp_splits_tls_passthrough_and_grants_and_refuses_udp() {
    gateway_l4_routes("haproxy");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn nginx_serves_gateway_l4_tcp_udp_splits_tls_passthrough_and_grants() {
    gateway_l4_routes("nginx");
}

/// A BackendTLSPolicy among tenants, through the real proxy: shop's policy makes the
/// proxy reach shop's HTTPS endpoint verified (the backend sees the policy's hostname as
/// SNI); evil's policies (a 1 MiB CA ConfigMap; a ca.crt that is not PEM; a hostname
/// with a control character; and one naming a Service `api`, which can only be evil's
/// own) are refused on evil's Services alone, whose requests get 500; shop and a plain
/// route are still served.
fn backend_tls_policies_among_tenants(proxy: &str) {
    use k8slb_common::testing::{ca, signed_by};
    let opts = Options::new(&format!("btls-{proxy}"))
        .proxy(proxy)
        .lbs(1)
        .backends(1);
    let mut sys = System::start(opts).unwrap();
    let be = sys.backend_ips()[0];
    // shop's HTTPS endpoint: the lab's TLS echo with a certificate shop's CA signed.
    let shop_ca = ca("shop-ca");
    let (crt, key) = signed_by(&shop_ca, &["api.shop.internal"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let (c, k) = (dir.path().join("api.crt"), dir.path().join("api.key"));
    std::fs::write(&c, crt).unwrap();
    std::fs::write(&k, key).unwrap();
    let bin = k8slb_tests::bins::locate("lab-backend").unwrap();
    let echo = format!("{be}:8443,shop,api-lab-0");
    sys.lab
        .spawn_in(
            "be1",
            "tls-echo",
            &[
                bin.to_str().unwrap(),
                "--echo-tls",
                &echo,
                "--echo-cert",
                c.to_str().unwrap(),
                "--echo-key",
                k.to_str().unwrap(),
            ],
        )
        .unwrap();
    sys.apply(
        "gateway",
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            gateway_api("GatewayClass", None, "k8slb",
                json!({"controllerName": "k8slb.io/gateway-controller"})),
            gateway_api("Gateway", Some("infra"), "gw", json!({"gatewayClassName": "k8slb",
                "listeners": [{"name": "http", "port": 80, "protocol": "HTTP",
                               "allowedRoutes": {"namespaces": {"from": "All"}}}]})),
        ]}),
    )
    .unwrap();
    let shop = svc("shop", "api").port(tcp("https", 443, 8443));
    let mut v = shop.to_value();
    v["spec"]["type"] = json!("ClusterIP");
    sys.apply("svc-shop-api", &v).unwrap();
    sys.apply("eps-shop-api", &shop.endpoints("api-1", &[be]))
        .unwrap();
    for (ns, name) in [
        ("evil", "api"),
        ("evil", "junk"),
        ("evil", "ctl"),
        ("default", "plain"),
    ] {
        backend(&sys, ns, name, &[0]);
    }
    let route_to = |ns: &str, name: &str, host: &str, port: u16| {
        let mut r = gateway_api(
            "HTTPRoute",
            Some(ns),
            name,
            json!({"parentRefs": [{"name": "gw", "namespace": "infra"}],
                   "hostnames": [host],
                   "rules": [{"backendRefs": [{"name": name, "port": port}]}]}),
        );
        r["metadata"]["name"] = json!(format!("{name}-route"));
        r
    };
    let cm = |ns: &str, name: &str, ca: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": ns}, "data": {"ca.crt": ca}})
    };
    let policy = |ns: &str, name: &str, target: &str, ca: &str, host: &str| {
        gateway_api(
            "BackendTLSPolicy",
            Some(ns),
            name,
            json!({"targetRefs": [{"group": "", "kind": "Service", "name": target}],
                   "validation": {"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": ca}],
                                  "hostname": host}}),
        )
    };
    let huge = shop_ca.0.repeat(1 + (1 << 20) / shop_ca.0.len());
    sys.apply(
        "tenants",
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            route_to("shop", "api", "shop.example.com", 443),
            route_to("evil", "api", "evil.example.com", 80),
            route_to("evil", "junk", "junk.example.com", 80),
            route_to("evil", "ctl", "ctl.example.com", 80),
            route_to("default", "plain", "plain.example.com", 80),
            cm("shop", "shop-ca", &shop_ca.0),
            cm("evil", "huge", &huge),
            cm("evil", "junk", "not a certificate\n"),
            policy("shop", "api-tls", "api", "shop-ca", "api.shop.internal"),
            policy("evil", "steal", "api", "huge", "api.shop.internal"),
            policy("evil", "junk", "junk", "junk", "junk.example"),
            policy("evil", "ctl", "ctl", "shop-ca", "a\u{7}b.example"),
        ]}),
    )
    .unwrap();
    let ip = wait_gateway_ip(&sys, "infra/gw");
    let url = |path: &str| format!("http://{ip}{path}");
    let got = |host: &str| status(&sys, host, &url("/"));
    wait::until(T, || {
        Ok(got("shop.example.com") == "200"
            && got("evil.example.com") == "500"
            && got("junk.example.com") == "500"
            && got("ctl.example.com") == "500"
            && got("plain.example.com") == "200")
    })
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}: shop {} evil {} junk {} ctl {} plain {}; problems {:?}",
            got("shop.example.com"),
            got("evil.example.com"),
            got("junk.example.com"),
            got("ctl.example.com"),
            got("plain.example.com"),
            sys.state().map(|s| s.problems).unwrap_or_default()
        )
    });
    // shop's endpoint was reached over TLS, with the policy's hostname as SNI.
    let answer = body(&sys, &["-H", "Host: shop.example.com", &url("/")]);
    let v: Value = serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"));
    assert_eq!(v["tls"]["serverName"], "api.shop.internal", "{v}");
    assert_eq!(v["namespace"], "shop", "{v}");
    // Each refusal is a problem on its own policy only.
    let st = sys.state().unwrap();
    for (policy, reason) in [
        ("BackendTLSPolicy evil/steal", "NoValidCACertificate"),
        ("BackendTLSPolicy evil/junk", "NoValidCACertificate"),
        ("BackendTLSPolicy evil/ctl", "InvalidValidationHostname"),
    ] {
        assert!(
            st.problems
                .iter()
                .any(|p| p.object.to_string() == policy && p.reason.as_str() == reason),
            "{policy} {reason}: {:?}",
            st.problems
        );
    }
    assert!(
        !st.problems
            .iter()
            .any(|p| p.object.to_string().contains("shop")),
        "{:?}",
        st.problems
    );
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces, keepalived and HAProxy; ./scripts/test.sh runs it"]
fn haproxy_serves_backend_tls_policies_and_refuses_hostile_ones_alone() {
    backend_tls_policies_among_tenants("haproxy");
}

#[test]
#[ignore = "needs root: the lab's network namespaces, keepalived and nginx; ./scripts/test.sh runs it"]
fn nginx_serves_backend_tls_policies_and_refuses_hostile_ones_alone() {
    backend_tls_policies_among_tenants("nginx");
}
