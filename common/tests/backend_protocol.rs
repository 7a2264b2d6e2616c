//! The protocol a proxy speaks to a backend (`k8slb_common::app_protocol`), from the
//! Service port's `appProtocol`, for the three ways traffic reaches a Service: a Service
//! of type LoadBalancer, an Ingress backend, an HTTPRoute backendRef.
//! `kubernetes.io/h2c` is HTTP/2 in cleartext (gRPC), `kubernetes.io/ws` and any other
//! value HTTP/1.1; `kubernetes.io/wss` is refused for routes (no TLS to route backends).

mod support;

use k8slb_common::app_protocol::BackendProtocol;
use k8slb_common::gateway::translate;
use k8slb_common::objects::Objects;
use k8slb_common::routes::{BackendId, FixedStatus, RouteAction};
use k8slb_common::state::State;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::IpAddr;
use support::*;

const POOLS: &str = r#"{ "pools": {
    "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" } } }"#;

/// A ClusterIP Service `name` with port 80 of `app_protocol` (none: `None`).
fn backend(name: &str, app_protocol: Option<&str>) -> k8s_openapi::api::core::v1::Service {
    let mut s = svc("default", name).type_("ClusterIP").port(80);
    if let Some(a) = app_protocol {
        s.0["spec"]["ports"][0]["appProtocol"] = json!(a);
    }
    s.build()
}

fn protocol_of(s: &State, id: &str) -> Option<BackendProtocol> {
    let id: BackendId = id.parse().unwrap();
    s.http.backends.get(&id).map(|b| b.protocol)
}

#[test]
fn a_service_port_in_http_mode_speaks_h2c_when_its_app_protocol_says_so() {
    let mk = |name: &str, port: i32, app: Option<&str>| {
        let mut s = svc("default", name).port(port).created(port as u32 % 60);
        if let Some(a) = app {
            s.0["spec"]["ports"][0]["appProtocol"] = json!(a);
        }
        s.build()
    };
    let o = objs(
        vec![
            // (port 80: http mode by k8slb's rules; 9000: tcp mode)
            mk("grpc-http", 80, Some("kubernetes.io/h2c")),
            mk("grpc-tcp", 9000, Some("kubernetes.io/h2c")),
            mk("ws", 80, Some("kubernetes.io/ws")),
            mk("wss", 80, Some("kubernetes.io/wss")),
            mk("named", 80, Some("grpc")),
            mk("plain", 80, None),
        ],
        nodes(1),
        vec![],
    );
    let s = run(&cfg(POOLS), &o, None);
    // (Service, what its port speaks to the backends, why)
    let table = [
        (
            "grpc-http",
            BackendProtocol::H2c,
            "http mode + kubernetes.io/h2c",
        ),
        (
            "grpc-tcp",
            BackendProtocol::Http,
            "tcp mode passes any protocol as bytes",
        ),
        (
            "ws",
            BackendProtocol::Http,
            "a WebSocket upgrade is HTTP/1.1",
        ),
        (
            "wss",
            BackendProtocol::Http,
            "TLS to the backend is sslbackend's, as ever",
        ),
        (
            "named",
            BackendProtocol::Http,
            "an implementation-specific name",
        ),
        ("plain", BackendProtocol::Http, "no appProtocol"),
    ];
    for (name, want, why) in table {
        let p = &s.services[&format!("default/{name}").parse().unwrap()].ports[0];
        assert_eq!(p.app_protocol, want, "{name}: {why}");
    }
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    // The state document names h2c only where it is.
    let doc = serde_json::to_value(&s.services).unwrap();
    assert_eq!(doc["default/grpc-http"]["ports"][0]["appProtocol"], "h2c");
    assert!(doc["default/plain"]["ports"][0]
        .get("appProtocol")
        .is_none());
}

#[test]
fn an_ingress_backend_speaks_h2c_and_a_wss_one_answers_503_with_a_problem() {
    let mut o = objs(vec![], nodes(1), vec![]);
    o.services = vec![
        backend("grpc", Some("kubernetes.io/h2c")),
        backend("ws", Some("kubernetes.io/ws")),
        backend("wss", Some("kubernetes.io/wss")),
    ];
    o.ingresses = vec![ing("default", "web")
        .rule("grpc.example.com", "/", "grpc", 80)
        .rule("ws.example.com", "/", "ws", 80)
        .rule("wss.example.com", "/", "wss", 80)
        .build()];
    o.ingress_classes = vec![ingress_class()];
    let s = run(&cfg(POOLS), &o, None);
    assert_eq!(
        protocol_of(&s, "default/grpc:80"),
        Some(BackendProtocol::H2c)
    );
    assert_eq!(
        protocol_of(&s, "default/ws:80"),
        Some(BackendProtocol::Http)
    );
    assert_eq!(protocol_of(&s, "default/wss:80"), None, "never served");
    let vip: IpAddr = ingress_ips(&s, "default/web")[0].parse().unwrap();
    assert_eq!(
        s.http.route(vip, 80, "wss.example.com", "/"),
        Some(&RouteAction::Respond {
            status: FixedStatus::ServiceUnavailable503
        })
    );
    let problems = ingress_problems(&s, "default/web");
    assert!(
        problems
            .iter()
            .any(|(r, m)| r == "UnsupportedBackend" && m.contains("kubernetes.io/wss")),
        "{problems:?}"
    );
}

const GATEWAY: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: default }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: http, port: 80, protocol: HTTP }
"#;

fn route(name: &str, backend: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: default }}
spec:
  parentRefs: [ {{ name: gw }} ]
  hostnames: [ {name}.example.com ]
  rules:
  - backendRefs: [ {{ name: {backend}, port: 80 }} ]
"#
    )
}

/// GEP-1911 (the Gateway API's backend protocol): h2c and ws backends are served; a
/// protocol the implementation cannot speak is `ResolvedRefs: False`, reason
/// `UnsupportedProtocol`, and its requests get 500 (an invalid backendRef's share).
#[test]
fn an_httproute_backend_speaks_h2c_and_a_wss_one_is_unsupported_protocol() {
    let mut o = Objects::default();
    for t in [
        GATEWAY,
        &route("grpc", "grpc"),
        &route("ws", "ws"),
        &route("wss", "wss"),
    ] {
        o.add_text(t).unwrap();
    }
    o.services = vec![
        backend("grpc", Some("kubernetes.io/h2c")),
        backend("ws", Some("kubernetes.io/ws")),
        backend("wss", Some("kubernetes.io/wss")),
    ];
    let vip: IpAddr = "198.18.0.50".parse().unwrap();
    let addresses = BTreeMap::from([("default/gw".parse().unwrap(), vec![vip])]);
    let out = translate(&o.gateway_input(&[], &addresses, &BTreeMap::new()));
    let protocol = |id: &str| {
        out.routes
            .backends
            .get(&id.parse::<BackendId>().unwrap())
            .map(|b| b.protocol)
    };
    assert_eq!(protocol("default/grpc:80"), Some(BackendProtocol::H2c));
    assert_eq!(protocol("default/ws:80"), Some(BackendProtocol::Http));
    assert_eq!(protocol("default/wss:80"), None);
    let resolved = |route: &str| {
        let parents = &out.http_routes[&route.parse().unwrap()];
        let c = parents[0]
            .conditions
            .iter()
            .find(|c| c.type_.as_str() == "ResolvedRefs")
            .unwrap();
        (c.status, c.reason.as_str())
    };
    assert_eq!(resolved("default/grpc"), (true, "ResolvedRefs"));
    assert_eq!(resolved("default/ws"), (true, "ResolvedRefs"));
    assert_eq!(resolved("default/wss"), (false, "UnsupportedProtocol"));
    assert!(
        matches!(
            out.routes.route(vip, 80, "wss.example.com", "/"),
            Some(RouteAction::Forward { invalid, .. }) if *invalid > 0
        ) || matches!(
            out.routes.route(vip, 80, "wss.example.com", "/"),
            Some(RouteAction::Respond {
                status: FixedStatus::InternalServerError500
            })
        )
    );
}
