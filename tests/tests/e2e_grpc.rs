//! GRPCRoute end to end in the standalone (files) mode: GatewayClass, Gateway, GRPCRoute
//! and Service documents → the watcher's plan → the actors render them into the real
//! HAProxy and nginx → gRPC calls (h2c) from the lab's client through the Gateway's
//! address reach the backends' gRPC echo servers (lab-backend `--grpc`, the conformance
//! suite's GrpcEcho service). The route is the upstream GRPCExactMethodMatching one
//! (Gateway API v1.6.1), on the backends' pods.
//! Needs root, keepalived, haproxy, nginx and the built binaries; fails (never skips)
//! without them.

use k8slb_tests::bins;
use k8slb_tests::objects::{svc, tcp};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::GRPC_PORT;
use k8slb_tests::wait;
use serde_json::{json, Value};
use std::net::IpAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn gateway_api(kind: &str, ns: Option<&str>, name: &str, spec: Value) -> Value {
    let mut meta = json!({"name": name, "creationTimestamp": "2026-01-01T00:00:01Z"});
    if let Some(ns) = ns {
        meta["namespace"] = json!(ns);
    }
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
           "metadata": meta, "spec": spec})
}

/// A ClusterIP Service `default/<name>` (port 8080 → the backends' gRPC port) whose
/// endpoint is the lab's backend `which`.
fn grpc_backend(sys: &System, name: &str, which: usize) {
    let s = svc("default", name).port(tcp("grpc", 8080, GRPC_PORT));
    let mut v = s.to_value();
    v["spec"]["type"] = json!("ClusterIP");
    sys.apply(&format!("svc-{name}"), &v).unwrap();
    let ip = sys.backend_ips()[which];
    sys.apply(
        &format!("eps-{name}"),
        &s.endpoints(&format!("{name}-1"), &[ip]),
    )
    .unwrap();
}

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
    .unwrap_or_else(|e| panic!("Gateway {key} got no address: {e:#}"));
    ip.unwrap()
}

/// One call from the client: `grpc=<status> http=<status> backend=<pod>` or `error=...`.
fn call(sys: &System, ip: IpAddr, method: &str) -> String {
    let bin = bins::locate("lab-client").unwrap();
    let bin = bin.to_string_lossy().into_owned();
    let addr = format!("{ip}:80");
    let out = sys
        .lab
        .run_in("client", &[&bin, "grpc", &addr, "grpc.example", method])
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn grpc_route_end_to_end(proxy: &str) {
    let sys = System::start(Options::new(&format!("grpc-{proxy}")).proxy(proxy)).expect("system");
    grpc_backend(&sys, "grpc-v1", 0);
    grpc_backend(&sys, "grpc-v2", 1);
    let backends: Vec<String> = sys.backends.keys().cloned().collect();
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
                 "allowedRoutes": {"namespaces": {"from": "All"}}}]}),
        ),
    )
    .unwrap();
    let method = |m: &str| json!({"method": {"service": "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho", "method": m}});
    sys.apply(
        "grpcroute",
        &gateway_api(
            "GRPCRoute",
            Some("default"),
            "exact-matching",
            json!({"parentRefs": [{"name": "gw", "namespace": "infra"}],
                   "rules": [
                       {"matches": [method("Echo")], "backendRefs": [{"name": "grpc-v1", "port": 8080}]},
                       {"matches": [method("EchoTwo")], "backendRefs": [{"name": "grpc-v2", "port": 8080}]}]}),
        ),
    )
    .unwrap();
    let ip = wait_gateway_ip(&sys, "infra/gw");
    let want_echo = format!("grpc=0 http=200 backend={}", backends[0]);
    wait::until(T, || Ok(call(&sys, ip, "Echo") == want_echo)).unwrap_or_else(|e| {
        panic!(
            "{proxy}: Echo never reached {}: {e:#}; last: {}",
            backends[0],
            call(&sys, ip, "Echo")
        )
    });
    assert_eq!(
        call(&sys, ip, "EchoTwo"),
        format!("grpc=0 http=200 backend={}", backends[1]),
        "{proxy}"
    );
    // No rule: the proxy's 404, which gRPC clients read as Unimplemented.
    assert_eq!(
        call(&sys, ip, "EchoThree"),
        "grpc=none http=404 backend=",
        "{proxy}"
    );
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn haproxy_serves_a_grpcroute_to_real_grpc_calls() {
    grpc_route_end_to_end("haproxy");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn nginx_serves_a_grpcroute_to_real_grpc_calls() {
    grpc_route_end_to_end("nginx");
}
