//! The status the Gateway API v1.6.1 conformance suite expects of routes that are not
//! accepted and of listeners with route kinds they do not serve, one case per upstream
//! test (`conformance/tests/<name>.go` of kubernetes-sigs/gateway-api, tag v1.6.1). Its
//! manifests are transcribed from the test's YAML and the base manifests (the class name
//! is ours); the expectations are the facts its Go file states:
//!
//! - the route has exactly one parent entry for the Gateway, `Accepted: False` with the
//!   named reason (`HTTPRouteMustHaveCondition`, `HTTPRouteMustHaveNoAcceptedParents`);
//! - where the test calls `HTTPRouteMustHaveResolvedRefsConditionsTrue` first, the same
//!   entry also has `ResolvedRefs: True` (reason `ResolvedRefs`);
//! - the Gateway has 0 routes attached (`GatewayMustHaveZeroRoutes`: one listener with
//!   `attachedRoutes: 0`).

mod support;

use k8slb_common::gateway::types::L4Kind;
use k8slb_common::gateway::{Condition, GatewayOutput, ParentStatus};
use k8slb_common::objects::Objects;
use support::*;

const VIP: &str = "198.18.0.60";
const INFRA: &str = "gateway-conformance-infra";
const WEB: &str = "gateway-conformance-web-backend";

/// What every case shares, from `conformance/base/manifests.yaml`: the namespaces, our
/// class, the `same-namespace` Gateway (one HTTP listener, routes from its namespace).
const BASE: &str = r#"
apiVersion: v1
kind: Namespace
metadata: { name: gateway-conformance-infra, labels: { gateway-conformance: infra } }
---
apiVersion: v1
kind: Namespace
metadata: { name: gateway-conformance-web-backend, labels: { gateway-conformance: web-backend } }
---
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

/// The base objects, `extra`, and the echo backends the tests name (with endpoints).
fn objects(extra: &str) -> Objects {
    let mut o = Objects::default();
    o.add_text(BASE).unwrap();
    o.add_text(extra).unwrap();
    assert!(o.problems.is_empty(), "{:?}", o.problems);
    let backends = [
        (INFRA, "infra-backend-v1", 8080, "10.244.1.1"),
        (INFRA, "tls-backend", 443, "10.244.1.2"),
        (WEB, "web-backend", 8080, "10.244.2.1"),
    ];
    for (ns, name, port, ip) in backends {
        o.services.push(backend_svc(ns, name, port));
        o.slices
            .push(slice(ns, name, "x", None, port, &[(ip, true, true, false)]));
    }
    o
}

fn run(o: &Objects) -> GatewayOutput {
    translate_on(o, &[], VIP)
}

/// (type, status, reason) of each condition: what the suite compares.
fn triples(c: &[Condition]) -> Vec<(&'static str, bool, &'static str)> {
    c.iter()
        .map(|c| (c.type_.as_str(), c.status, c.reason.as_str()))
        .collect()
}

/// The one parent entry the suite expects, for Gateway `gw` of the infra namespace.
fn only_parent<'a>(parents: &'a [ParentStatus], gw: &str) -> &'a ParentStatus {
    assert_eq!(parents.len(), 1, "{parents:?}");
    let p = &parents[0];
    assert_eq!(
        (p.parent.namespace.as_str(), p.parent.name.as_str()),
        (INFRA, gw)
    );
    p
}

fn http_parent<'a>(out: &'a GatewayOutput, route: &str, gw: &str) -> &'a ParentStatus {
    only_parent(&out.http_routes[&route.parse().unwrap()], gw)
}

/// `GatewayMustHaveZeroRoutes`: no listener in status, or one with 0 routes attached.
fn zero_routes(out: &GatewayOutput, gw: &str) {
    let st = &out.gateways[&format!("{INFRA}/{gw}").parse().unwrap()];
    let attached: Vec<u32> = st.listeners.iter().map(|l| l.attached_routes).collect();
    assert!(attached.is_empty() || attached == [0], "{gw}: {attached:?}");
}

#[test]
fn http_route_invalid_cross_namespace_parent_ref() {
    let route = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: invalid-cross-namespace-parent-ref, namespace: gateway-conformance-web-backend }
spec:
  parentRefs:
  - { name: same-namespace, namespace: gateway-conformance-infra }
  rules:
  - backendRefs: [{ name: web-backend, port: 8080 }]
"#;
    let out = run(&objects(route));
    let p = http_parent(
        &out,
        &format!("{WEB}/invalid-cross-namespace-parent-ref"),
        "same-namespace",
    );
    assert_eq!(
        triples(&p.conditions),
        [
            ("Accepted", false, "NotAllowedByListeners"),
            ("ResolvedRefs", true, "ResolvedRefs"),
        ]
    );
    zero_routes(&out, "same-namespace");
}

#[test]
fn http_route_invalid_parent_ref_not_matching_listener_port() {
    let route = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: httproute-listener-not-matching-route-port, namespace: gateway-conformance-infra }
spec:
  parentRefs:
  - { name: same-namespace, namespace: gateway-conformance-infra, port: 81 }
  rules:
  - backendRefs: [{ name: infra-backend-v1, kind: Service, port: 8080 }]
"#;
    let out = run(&objects(route));
    let p = http_parent(
        &out,
        &format!("{INFRA}/httproute-listener-not-matching-route-port"),
        "same-namespace",
    );
    assert_eq!(
        triples(&p.conditions),
        [
            ("Accepted", false, "NoMatchingParent"),
            ("ResolvedRefs", true, "ResolvedRefs"),
        ]
    );
    zero_routes(&out, "same-namespace");
}

#[test]
fn http_route_disallowed_kind() {
    let objs = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: tlsroutes-only, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: tls
    port: 443
    protocol: TLS
    tls: { mode: Passthrough }
    allowedRoutes: { namespaces: { from: Same }, kinds: [{ kind: TLSRoute }] }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: disallowed-kind, namespace: gateway-conformance-infra }
spec:
  parentRefs:
  - { name: tlsroutes-only, namespace: gateway-conformance-infra }
  rules:
  - backendRefs: [{ name: infra-backend-v1, port: 8080 }]
"#;
    let out = run(&objects(objs));
    let p = http_parent(&out, &format!("{INFRA}/disallowed-kind"), "tlsroutes-only");
    assert_eq!(
        triples(&p.conditions),
        [
            ("Accepted", false, "NotAllowedByListeners"),
            ("ResolvedRefs", true, "ResolvedRefs"),
        ]
    );
    zero_routes(&out, "tlsroutes-only");
}

/// Not a failure the suite measured, the same rule: a route that attaches nowhere still
/// says why its references do not resolve.
#[test]
fn a_route_that_attaches_nowhere_still_reports_an_unresolved_reference() {
    let route = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: nowhere, namespace: gateway-conformance-infra }
spec:
  parentRefs:
  - { name: same-namespace, port: 81 }
  rules:
  - backendRefs: [{ name: infra-backend-v1, port: 8080 }, { name: absent, port: 8080 }]
"#;
    let out = run(&objects(route));
    let p = http_parent(&out, &format!("{INFRA}/nowhere"), "same-namespace");
    assert_eq!(
        triples(&p.conditions),
        [
            ("Accepted", false, "NoMatchingParent"),
            ("ResolvedRefs", false, "BackendNotFound"),
        ]
    );
    // Resolved aside: an unattached route's backends are not in the model.
    assert!(out.routes.backends.is_empty(), "{:?}", out.routes.backends);
}

#[test]
fn http_route_invalid_parent_ref_not_matching_section_name() {
    let route = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: httproute-listener-not-matching-section-name, namespace: gateway-conformance-infra }
spec:
  parentRefs:
  - { name: same-namespace, namespace: gateway-conformance-infra, port: 80, sectionName: http1 }
  rules:
  - backendRefs: [{ name: infra-backend-v1, kind: Service, port: 8080 }]
"#;
    let out = run(&objects(route));
    let p = http_parent(
        &out,
        &format!("{INFRA}/httproute-listener-not-matching-section-name"),
        "same-namespace",
    );
    assert_eq!(
        triples(&p.conditions)[0],
        ("Accepted", false, "NoMatchingParent")
    );
    zero_routes(&out, "same-namespace");
}

#[test]
fn http_route_invalid_parent_ref_section_name_not_matching_port() {
    let objs = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gateway-with-one-not-matching-port-and-section-name-route, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes: { kinds: [{ kind: HTTPRoute }], namespaces: { from: All } }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: httproute-listener-section-name-not-matching-port, namespace: gateway-conformance-infra }
spec:
  parentRefs:
  - name: gateway-with-one-not-matching-port-and-section-name-route
    namespace: gateway-conformance-infra
    sectionName: http
    port: 81
  rules:
  - backendRefs: [{ name: infra-backend-v1, kind: Service, port: 8080 }]
"#;
    let gw = "gateway-with-one-not-matching-port-and-section-name-route";
    let out = run(&objects(objs));
    let p = http_parent(
        &out,
        &format!("{INFRA}/httproute-listener-section-name-not-matching-port"),
        gw,
    );
    assert_eq!(
        triples(&p.conditions)[0],
        ("Accepted", false, "NoMatchingParent")
    );
    zero_routes(&out, gw);
}

#[test]
fn tls_route_invalid_no_matching_listener() {
    let objs = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gateway-tlsroute-tls-passthrough-only, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: tls-passthrough, protocol: TLS, port: 443, allowedRoutes: { namespaces: { from: Same } }, tls: { mode: Passthrough } }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gateway-tlsroute-http-only, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: http, port: 80, protocol: HTTP, allowedRoutes: { namespaces: { from: Same } } }
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: { name: tlsroute-not-allowed-protocol-http, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: gateway-tlsroute-http-only }]
  hostnames: [tls.example.com]
  rules: [{ backendRefs: [{ name: tls-backend, port: 443 }] }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: { name: tlsroute-no-matching-section-name, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: gateway-tlsroute-tls-passthrough-only, sectionName: nonexistent-listener }]
  hostnames: [tls.example.com]
  rules: [{ backendRefs: [{ name: tls-backend, port: 443 }] }]
"#;
    let out = run(&objects(objs));
    let tls =
        |name: &str| &out.l4_routes[&(L4Kind::Tls, format!("{INFRA}/{name}").parse().unwrap())];
    let p = only_parent(
        tls("tlsroute-not-allowed-protocol-http"),
        "gateway-tlsroute-http-only",
    );
    assert_eq!(
        triples(&p.conditions),
        [
            ("Accepted", false, "NotAllowedByListeners"),
            ("ResolvedRefs", true, "ResolvedRefs"),
        ]
    );
    let p = only_parent(
        tls("tlsroute-no-matching-section-name"),
        "gateway-tlsroute-tls-passthrough-only",
    );
    assert_eq!(
        triples(&p.conditions),
        [
            ("Accepted", false, "NoMatchingParent"),
            ("ResolvedRefs", true, "ResolvedRefs"),
        ]
    );
    zero_routes(&out, "gateway-tlsroute-http-only");
}

/// GatewayInvalidRouteKind: a listener whose only allowed kind is not one k8slb serves
/// there has no supportedKinds; with HTTPRoute beside it, HTTPRoute; both say
/// `ResolvedRefs: False` (`InvalidRouteKinds`) and 0 routes attached.
#[test]
fn gateway_invalid_route_kind() {
    let objs = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gateway-only-invalid-route-kind, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes: { namespaces: { from: All }, kinds: [{ kind: InvalidRoute }] }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gateway-supported-and-invalid-route-kind, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes: { namespaces: { from: All }, kinds: [{ kind: InvalidRoute }, { kind: HTTPRoute }] }
"#;
    let out = run(&objects(objs));
    for (gw, kinds) in [
        ("gateway-only-invalid-route-kind", vec![]),
        (
            "gateway-supported-and-invalid-route-kind",
            vec!["HTTPRoute"],
        ),
    ] {
        let st = &out.gateways[&format!("{INFRA}/{gw}").parse().unwrap()];
        assert_eq!(st.listeners.len(), 1, "{gw}");
        let l = &st.listeners[0];
        assert_eq!(l.name, "http");
        assert_eq!(l.supported_kinds, kinds, "{gw}");
        assert_eq!(l.attached_routes, 0, "{gw}");
        assert!(
            triples(&l.conditions).contains(&("ResolvedRefs", false, "InvalidRouteKinds")),
            "{gw}: {:?}",
            l.conditions
        );
    }
}

/// GatewayInvalidTLSConfiguration: an HTTPS listener whose certificate reference does
/// not resolve (here: no such Secret) is not served, says `ResolvedRefs: False`
/// (`InvalidCertificateRef`), and still lists HTTPRoute as its supported kind.
#[test]
fn gateway_invalid_tls_configuration() {
    let objs = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gateway-certificate-nonexistent-secret, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    allowedRoutes: { namespaces: { from: Same } }
    tls: { certificateRefs: [{ group: "", kind: Secret, name: nonexistent-certificate }] }
"#;
    let out = run(&objects(objs));
    let st = &out.gateways[&format!("{INFRA}/gateway-certificate-nonexistent-secret")
        .parse()
        .unwrap()];
    let l = &st.listeners[0];
    // The suite checks that the kinds it names are listed (an implementation may support
    // more): GRPCRoute is served on HTTPS listeners too.
    assert_eq!(l.supported_kinds, ["HTTPRoute", "GRPCRoute"]);
    assert_eq!(l.attached_routes, 0);
    assert!(
        triples(&l.conditions).contains(&("ResolvedRefs", false, "InvalidCertificateRef")),
        "{:?}",
        l.conditions
    );
}

/// GatewayListenerUnsupportedProtocol: a Gateway none of whose listeners is valid is
/// `Accepted: False` (`ListenersNotValid`); one with a valid listener beside an invalid
/// one is `Accepted: True` with the same reason; the invalid listener supports no kind.
#[test]
fn gateway_listener_unsupported_protocol() {
    let objs = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gateway-only-unsupported-protocols, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: invalid, port: 8080, protocol: example.com/invalid-protocol }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gateway-supported-and-unsupported-protocols, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: http, port: 80, protocol: HTTP }
  - { name: invalid, port: 8080, protocol: example.com/invalid-protocol }
"#;
    let out = run(&objects(objs));
    let gw = |n: &str| &out.gateways[&format!("{INFRA}/{n}").parse().unwrap()];
    let only = gw("gateway-only-unsupported-protocols");
    assert!(
        triples(&only.conditions).contains(&("Accepted", false, "ListenersNotValid")),
        "{:?}",
        only.conditions
    );
    let mixed = gw("gateway-supported-and-unsupported-protocols");
    assert!(
        triples(&mixed.conditions).contains(&("Accepted", true, "ListenersNotValid")),
        "{:?}",
        mixed.conditions
    );
    for st in [only, mixed] {
        let invalid = st.listeners.iter().find(|l| l.name == "invalid").unwrap();
        assert!(invalid.supported_kinds.is_empty());
        assert!(
            triples(&invalid.conditions).contains(&("Accepted", false, "UnsupportedProtocol")),
            "{:?}",
            invalid.conditions
        );
    }
    let http = mixed.listeners.iter().find(|l| l.name == "http").unwrap();
    assert_eq!(http.supported_kinds, ["HTTPRoute", "GRPCRoute"]);
}

/// GatewayWithAttachedRoutes, its third part: a route attaches to a listener that is not
/// served (its certificate does not exist) all the same: the listener counts it
/// (`attachedRoutes: 1`, Programmed and ResolvedRefs False), the route's own unresolved
/// backend is `ResolvedRefs: False`; nothing is served on that listener.
#[test]
fn gateway_with_attached_routes_counts_a_route_on_an_unresolved_listener() {
    let objs = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: unresolved-gateway-with-one-attached-unresolved-route, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: tls
    port: 443
    protocol: HTTPS
    allowedRoutes:
      kinds: [{ kind: HTTPRoute }]
      namespaces:
        from: Selector
        selector: { matchLabels: { kubernetes.io/metadata.name: gateway-conformance-infra } }
    tls: { mode: Terminate, certificateRefs: [{ group: "", kind: Secret, name: does-not-exist }] }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: http-route-4, namespace: gateway-conformance-infra }
spec:
  parentRefs:
  - { kind: Gateway, name: unresolved-gateway-with-one-attached-unresolved-route, namespace: gateway-conformance-infra, sectionName: tls }
  rules:
  - backendRefs: [{ name: does-not-exist, port: 8080 }]
"#;
    let mut o = objects(objs);
    // The API server labels every namespace with its name.
    for ns in &mut o.namespaces {
        let name = ns.metadata.name.clone().unwrap();
        ns.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("kubernetes.io/metadata.name".into(), name);
    }
    let out = run(&o);
    let gw = "unresolved-gateway-with-one-attached-unresolved-route";
    let st = &out.gateways[&format!("{INFRA}/{gw}").parse().unwrap()];
    let l = &st.listeners[0];
    assert_eq!(l.attached_routes, 1, "{:?}", l.conditions);
    let conds = triples(&l.conditions);
    assert!(
        conds.iter().any(|c| c.0 == "Programmed" && !c.1)
            && conds.iter().any(|c| c.0 == "ResolvedRefs" && !c.1),
        "{conds:?}"
    );
    let p = http_parent(&out, &format!("{INFRA}/http-route-4"), gw);
    let rc = triples(&p.conditions);
    assert!(rc.contains(&("Accepted", true, "Accepted")), "{rc:?}");
    assert!(rc.iter().any(|c| c.0 == "ResolvedRefs" && !c.1), "{rc:?}");
    // Not served: no route of the model is on the Gateway's port 443.
    assert!(
        out.routes.listeners.iter().all(|l| l.port != 443),
        "{:?}",
        out.routes.listeners
    );
}

/// GatewayInvalidParametersRef: `spec.infrastructure.parametersRef` names a kind k8slb
/// does not have (it has none): `Accepted: False` (`InvalidParameters`).
#[test]
fn gateway_invalid_parameters_ref() {
    let objs = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gateway-invalid-parameters-ref, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: http, port: 80, protocol: HTTP }
  infrastructure:
    parametersRef: { group: invalid.io, kind: InvalidParameters, name: invalid }
"#;
    let out = run(&objects(objs));
    let st = &out.gateways[&format!("{INFRA}/gateway-invalid-parameters-ref")
        .parse()
        .unwrap()];
    assert!(
        triples(&st.conditions).contains(&("Accepted", false, "InvalidParameters")),
        "{:?}",
        st.conditions
    );
    // The Gateway without it is accepted (the condition is the reference's doing).
    let same = &out.gateways[&format!("{INFRA}/same-namespace").parse().unwrap()];
    assert!(triples(&same.conditions).contains(&("Accepted", true, "Accepted")));
}
