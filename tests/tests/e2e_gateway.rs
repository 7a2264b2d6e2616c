//! Gateway API end to end in the standalone (files) mode: GatewayClass, Gateway,
//! HTTPRoute and ReferenceGrant documents → the watcher's plan (the Gateway's own
//! address, the routes) → the actors render them into real HAProxy and nginx → requests
//! from the client through the Gateway's address reach the pods.
//! Needs root, keepalived, haproxy, nginx and the built binaries; fails (never skips)
//! without them.

use k8slb_common::testing::self_signed;
use k8slb_tests::l7::{
    self, body, fingerprint, served_by, served_by_https, served_fingerprint, status,
    status_and_location, tls_secret,
};
use k8slb_tests::objects::{svc, tcp};
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
