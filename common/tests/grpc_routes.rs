//! GRPCRoute into the route model (`k8slb_common::gateway::grpc`), one case per upstream
//! test of the GATEWAY-GRPC profile (Gateway API v1.6.1, `conformance/tests/grpcroute-*`):
//! the manifests are transcribed from each test's YAML and the base manifests (the class
//! name is ours), the expectations are the facts its Go file states: which backend
//! answers a call (by method, metadata, `:authority`), and `Unimplemented` where no rule
//! matches (a proxy's 404, which gRPC clients read as Unimplemented). A gRPC call is
//! `POST /<service>/<method>` over HTTP/2; the reference router answers for it.
//! Then what k8slb refuses, with the condition, rather than serves wrongly.

mod support;

use k8slb_common::app_protocol::BackendProtocol;
use k8slb_common::gateway::GatewayOutput;
use k8slb_common::objects::Objects;
use k8slb_common::routes::{Request, RouteAction};
use support::*;

const VIP: &str = "198.18.0.70";
const INFRA: &str = "gateway-conformance-infra";
const SVC: &str = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";

/// From `conformance/base/manifests.yaml`: our class and the `same-namespace` Gateway.
const BASE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: same-namespace, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes: { namespaces: { from: Same } }
"#;

fn objects(extra: &str) -> Objects {
    let mut o = Objects::default();
    o.add_text(BASE).unwrap();
    o.add_text(extra).unwrap();
    assert!(o.problems.is_empty(), "{:?}", o.problems);
    for (i, name) in [
        "grpc-infra-backend-v1",
        "grpc-infra-backend-v2",
        "grpc-infra-backend-v3",
    ]
    .iter()
    .enumerate()
    {
        // No appProtocol: a GRPCRoute's backends speak h2c anyway.
        o.services.push(backend_svc(INFRA, name, 8080));
        let ip = format!("10.244.3.{}", i + 1);
        o.slices.push(slice(
            INFRA,
            name,
            "x",
            None,
            8080,
            &[(&ip, true, true, false)],
        ));
    }
    o
}

fn run(o: &Objects) -> GatewayOutput {
    translate_on(o, &[], VIP)
}

/// Where a gRPC call of `method` with `metadata` to `authority` goes: the backend
/// Service names joined by `+` (a split), or `Unimplemented` (no rule: 404).
fn call(out: &GatewayOutput, authority: &str, method: &str, metadata: &[(&str, &str)]) -> String {
    let path = format!("/{SVC}/{method}");
    let req = Request {
        host: authority,
        path: &path,
        method: "POST",
        headers: metadata,
        query: &[],
    };
    match out.routes.route_request(VIP.parse().unwrap(), 80, &req) {
        Some(RouteAction::Forward { backends, .. }) => backends
            .iter()
            .map(|b| b.id.service.name.to_string())
            .collect::<Vec<_>>()
            .join("+"),
        None | Some(RouteAction::Respond { .. }) => "Unimplemented".into(),
        Some(other) => format!("{other:?}"),
    }
}

/// The route's conditions on its one parent: (type, status, reason).
fn conditions(out: &GatewayOutput, route: &str) -> Vec<(&'static str, bool, &'static str)> {
    let parents = &out.grpc_routes[&format!("{INFRA}/{route}").parse().unwrap()];
    assert_eq!(parents.len(), 1, "{parents:?}");
    parents[0]
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status, c.reason.as_str()))
        .collect()
}

fn accepted(out: &GatewayOutput, route: &str) {
    assert_eq!(
        conditions(out, route),
        [
            ("Accepted", true, "Accepted"),
            ("ResolvedRefs", true, "ResolvedRefs")
        ],
        "{route}"
    );
}

#[test]
fn grpc_exact_method_matching() {
    let out = run(&objects(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: exact-matching, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: same-namespace }]
  rules:
  - matches: [{ method: { service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: Echo } }]
    backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }]
  - matches: [{ method: { service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: EchoTwo } }]
    backendRefs: [{ name: grpc-infra-backend-v2, port: 8080 }]
"#,
    ));
    accepted(&out, "exact-matching");
    let any = "198.18.0.70";
    assert_eq!(call(&out, any, "Echo", &[]), "grpc-infra-backend-v1");
    assert_eq!(call(&out, any, "EchoTwo", &[]), "grpc-infra-backend-v2");
    assert_eq!(call(&out, any, "EchoThree", &[]), "Unimplemented");
    // The listener takes GRPCRoutes beside HTTPRoutes, and counts this one.
    let gw = &out.gateways[&format!("{INFRA}/same-namespace").parse().unwrap()];
    assert_eq!(gw.listeners[0].supported_kinds, ["HTTPRoute", "GRPCRoute"]);
    assert_eq!(gw.listeners[0].attached_routes, 1);
    // Its backends speak h2c though their Service ports name no appProtocol.
    for b in out.routes.backends.values() {
        assert_eq!(b.protocol, BackendProtocol::H2c);
    }
    assert_eq!(out.routes.backends.len(), 2);
}

#[test]
fn grpc_route_header_matching() {
    let out = run(&objects(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: grpc-header-matching, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: same-namespace }]
  rules:
  - matches: [{ headers: [{ name: version, value: one }] }]
    backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }]
  - matches: [{ headers: [{ name: version, value: two }] }]
    backendRefs: [{ name: grpc-infra-backend-v2, port: 8080 }]
  - matches: [{ headers: [{ name: version, value: two }, { name: color, value: orange }] }]
    backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }]
  - matches: [{ headers: [{ name: color, value: blue }] }, { headers: [{ name: color, value: green }] }]
    backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }]
  - matches: [{ headers: [{ name: color, value: red }] }, { headers: [{ name: color, value: yellow }] }]
    backendRefs: [{ name: grpc-infra-backend-v2, port: 8080 }]
"#,
    ));
    accepted(&out, "grpc-header-matching");
    let (v1, v2, none) = (
        "grpc-infra-backend-v1",
        "grpc-infra-backend-v2",
        "Unimplemented",
    );
    // (metadata, where the call goes); gRPC metadata keys arrive in lowercase.
    let table: [(&[(&str, &str)], &str); 11] = [
        (&[("version", "one")], v1),
        (&[("version", "two")], v2),
        (&[("version", "two"), ("color", "orange")], v1),
        (&[("version", "two"), ("color", "blue")], v2),
        (&[("color", "orange")], none),
        (&[("some-other-header", "one")], none),
        (&[("color", "blue")], v1),
        (&[("color", "green")], v1),
        (&[("color", "red")], v2),
        (&[("color", "yellow")], v2),
        (&[("color", "purple")], none),
    ];
    for (md, want) in table {
        assert_eq!(call(&out, "198.18.0.70", "Echo", md), want, "{md:?}");
    }
}

#[test]
fn grpc_route_listener_hostname_matching() {
    let out = run(&objects(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: grpcroute-listener-hostname-matching, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: listener-1, port: 80, protocol: HTTP, allowedRoutes: { namespaces: { from: Same } }, hostname: bar.com }
  - { name: listener-2, port: 80, protocol: HTTP, allowedRoutes: { namespaces: { from: Same } }, hostname: foo.bar.com }
  - { name: listener-3, port: 80, protocol: HTTP, allowedRoutes: { namespaces: { from: Same } }, hostname: "*.bar.com" }
  - { name: listener-4, port: 80, protocol: HTTP, allowedRoutes: { namespaces: { from: Same } }, hostname: "*.foo.com" }
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: backend-v1, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: grpcroute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-1 }]
  rules: [{ backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }] }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: backend-v2, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: grpcroute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-2 }]
  rules: [{ backendRefs: [{ name: grpc-infra-backend-v2, port: 8080 }] }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: backend-v3, namespace: gateway-conformance-infra }
spec:
  parentRefs:
  - { name: grpcroute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-3 }
  - { name: grpcroute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-4 }
  rules: [{ backendRefs: [{ name: grpc-infra-backend-v3, port: 8080 }] }]
"#,
    ));
    // The test's Gateway shares port 80 of our one test address with same-namespace,
    // which has no routes here: the hostnames decide.
    for r in ["backend-v1", "backend-v2"] {
        accepted(&out, r);
    }
    let table = [
        ("bar.com", "grpc-infra-backend-v1"),
        ("foo.bar.com", "grpc-infra-backend-v2"),
        ("baz.bar.com", "grpc-infra-backend-v3"),
        ("boo.bar.com", "grpc-infra-backend-v3"),
        ("multiple.prefixes.bar.com", "grpc-infra-backend-v3"),
        ("multiple.prefixes.foo.com", "grpc-infra-backend-v3"),
        ("foo.com", "Unimplemented"),
        ("no.matching.host", "Unimplemented"),
    ];
    for (authority, want) in table {
        assert_eq!(call(&out, authority, "Echo", &[]), want, "{authority}");
    }
}

#[test]
fn grpc_route_weight_and_named_rule() {
    let out = run(&objects(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: weighted-backends, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: same-namespace }]
  hostnames: [weights.example]
  rules:
  - backendRefs:
    - { name: grpc-infra-backend-v1, port: 8080, weight: 70 }
    - { name: grpc-infra-backend-v2, port: 8080, weight: 30 }
    - { name: grpc-infra-backend-v3, port: 8080, weight: 0 }
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: grpc-named-rules, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: same-namespace }]
  hostnames: [named.example]
  rules:
  - name: named-rule
    matches: [{ method: { service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: Echo } }]
    backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }]
  - matches: [{ method: { service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: EchoTwo } }]
    backendRefs: [{ name: grpc-infra-backend-v2, port: 8080 }]
"#,
    ));
    accepted(&out, "weighted-backends");
    accepted(&out, "grpc-named-rules");
    let split = out
        .routes
        .route_request(
            VIP.parse().unwrap(),
            80,
            &Request {
                host: "weights.example",
                path: &format!("/{SVC}/Echo"),
                method: "POST",
                headers: &[],
                query: &[],
            },
        )
        .cloned();
    match split {
        Some(RouteAction::Forward { backends, invalid }) => {
            let w: Vec<(String, u16)> = backends
                .iter()
                .map(|b| (b.id.service.name.to_string(), b.weight))
                .collect();
            assert_eq!(
                w,
                [
                    ("grpc-infra-backend-v1".to_string(), 70),
                    ("grpc-infra-backend-v2".to_string(), 30)
                ],
                "weight 0 sends nothing"
            );
            assert_eq!(invalid, 0);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        call(&out, "named.example", "Echo", &[]),
        "grpc-infra-backend-v1"
    );
    assert_eq!(
        call(&out, "named.example", "EchoTwo", &[]),
        "grpc-infra-backend-v2"
    );
}

/// What cannot be served exactly is `Accepted: False` (`UnsupportedValue`), and nothing
/// of the route is served; what can is served, and the listener counts only it.
#[test]
fn a_method_without_service_or_a_real_regex_is_refused_a_literal_regex_is_served() {
    let out = run(&objects(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: any-service, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: same-namespace }]
  hostnames: [a.example]
  rules:
  - matches: [{ method: { method: Echo } }]
    backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: regex, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: same-namespace }]
  hostnames: [b.example]
  rules:
  - matches: [{ method: { type: RegularExpression, service: ".*", method: Echo } }]
    backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: literal-regex, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: same-namespace }]
  hostnames: [c.example]
  rules:
  - matches: [{ method: { type: RegularExpression, service: 'gateway_api_conformance\.echo_basic\.grpcecho\.GrpcEcho', method: EchoTwo } }]
    backendRefs: [{ name: grpc-infra-backend-v2, port: 8080 }]
"#,
    ));
    for r in ["any-service", "regex"] {
        assert_eq!(
            conditions(&out, r)[0],
            ("Accepted", false, "UnsupportedValue"),
            "{r}"
        );
    }
    assert_eq!(call(&out, "a.example", "Echo", &[]), "Unimplemented");
    assert_eq!(call(&out, "b.example", "Echo", &[]), "Unimplemented");
    accepted(&out, "literal-regex");
    assert_eq!(
        call(&out, "c.example", "EchoTwo", &[]),
        "grpc-infra-backend-v2"
    );
    assert_eq!(call(&out, "c.example", "Echo", &[]), "Unimplemented");
    let gw = &out.gateways[&format!("{INFRA}/same-namespace").parse().unwrap()];
    assert_eq!(gw.listeners[0].attached_routes, 1, "only the served route");
}

/// A listener that allows HTTPRoutes only does not take GRPCRoutes
/// (`NotAllowedByListeners`); a ReferenceGrant must name GRPCRoute as the `from` kind.
#[test]
fn listener_kinds_and_reference_grants_name_grpcroute() {
    let out = run(&objects(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: http-only, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: http, port: 8080, protocol: HTTP, allowedRoutes: { kinds: [{ kind: HTTPRoute }] } }
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: on-http-only, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: http-only }]
  rules: [{ backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }] }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: cross-ns, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: same-namespace }]
  hostnames: [x.example]
  rules: [{ backendRefs: [{ name: elsewhere, namespace: other, port: 8080 }] }]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: http-only-grant, namespace: other }
spec:
  from: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra }]
  to: [{ group: "", kind: Service }]
"#,
    ));
    let gw = &out.gateways[&format!("{INFRA}/http-only").parse().unwrap()];
    assert_eq!(gw.listeners[0].supported_kinds, ["HTTPRoute"]);
    assert_eq!(
        conditions(&out, "on-http-only")[0],
        ("Accepted", false, "NotAllowedByListeners")
    );
    let c = conditions(&out, "cross-ns");
    assert!(
        c.contains(&("ResolvedRefs", false, "RefNotPermitted")),
        "a grant from HTTPRoute does not cover a GRPCRoute: {c:?}"
    );
}
