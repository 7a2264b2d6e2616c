//! Gateway API L4 into the route model's streams: `TLS` listeners with
//! `tls.mode: Passthrough` and TLSRoutes (routed by SNI), `TCP` listeners and TCPRoutes,
//! `UDP` listeners and UDPRoutes (experimental channel, v1alpha2), as the specification
//! documents them: listener protocols and their route kinds, hostname intersection for
//! TLSRoute, one route per listener (per server name for TLS; the oldest wins), weighted
//! backends on the Service port of the route's protocol, ReferenceGrant, `tls.mode:
//! Terminate` (the listener's certificates, chosen by SNI as an HTTPS listener's; no
//! passthrough and termination on one port), and the refusals (UDP under HAProxy). The reference router
//! (`HttpRoutes::route_stream`) answers "where does this connection go".

mod support;

use k8slb_common::gateway::types::L4Kind;
use k8slb_common::gateway::{Condition, GatewayOutput};
use k8slb_common::objects::Objects;
use k8slb_common::routes::StreamProtocol;
use serde_json::json;
use support::*;

const VIP: &str = "198.18.0.60";

const CLASS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
"#;

const GATEWAY: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: tls
    port: 443
    protocol: TLS
    tls: { mode: Passthrough }
    allowedRoutes: { namespaces: { from: All } }
  - { name: pg, port: 5432, protocol: TCP, allowedRoutes: { namespaces: { from: All } } }
  - { name: dns, port: 53, protocol: UDP, allowedRoutes: { namespaces: { from: All } } }
  - { name: dns-tcp, port: 53, protocol: TCP, allowedRoutes: { namespaces: { from: All } } }
"#;

/// A Service `ns/name` with TCP port 5432, TCP port 443 and UDP port 53 (and TCP 53).
fn service(ns: &str, name: &str) -> k8s_openapi::api::core::v1::Service {
    svc(ns, name)
        .type_("ClusterIP")
        .port_full(Some("pg"), 5432, "TCP", json!(5432))
        .port_full(Some("tls"), 443, "TCP", json!(8443))
        .port_full(Some("dns"), 53, "UDP", json!(5353))
        .port_full(Some("dns-tcp"), 53, "TCP", json!(5353))
        .build()
}

/// The EndpointSlice of `ns/name`: one endpoint `ip` on each of its ports.
fn endpoints(ns: &str, name: &str, ip: &str) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": { "name": format!("{name}-x"), "namespace": ns,
                      "labels": { "kubernetes.io/service-name": name } },
        "addressType": "IPv4",
        "ports": [
            { "name": "pg", "port": 5432, "protocol": "TCP" },
            { "name": "tls", "port": 8443, "protocol": "TCP" },
            { "name": "dns", "port": 5353, "protocol": "UDP" },
            { "name": "dns-tcp", "port": 5353, "protocol": "TCP" }
        ],
        "endpoints": [ { "addresses": [ip], "conditions": { "ready": true, "serving": true, "terminating": false } } ]
    }))
    .unwrap()
}

fn objects(texts: &[&str]) -> Objects {
    let mut o = Objects::default();
    for t in texts {
        o.add_text(t).unwrap();
    }
    assert!(o.problems.is_empty(), "{:?}", o.problems);
    for (i, n) in ["a", "b", "c"].iter().enumerate() {
        for ns in ["default", "infra"] {
            o.services.push(service(ns, n));
            o.slices
                .push(endpoints(ns, n, &format!("10.244.1.{}", i + 1)));
        }
    }
    o
}

fn run_with(o: &Objects, serves_udp: bool) -> GatewayOutput {
    translate_tuned(o, &[], VIP, |i| i.serves_udp = serves_udp)
}

fn run(o: &Objects) -> GatewayOutput {
    run_with(o, true)
}

/// Where a connection goes: `<service>@<endpoint ip:port>` per backend with its weight,
/// `closed` when the route has no backend, `none` when no route takes it.
fn goes(out: &GatewayOutput, port: u16, protocol: StreamProtocol, sni: Option<&str>) -> String {
    let Some(r) = out
        .routes
        .route_stream(VIP.parse().unwrap(), port, protocol, sni)
    else {
        return "none".into();
    };
    if r.backends.is_empty() {
        return "closed".into();
    }
    let table = if protocol == StreamProtocol::Udp {
        &out.routes.udp_backends
    } else {
        &out.routes.backends
    };
    r.backends
        .iter()
        .map(|b| {
            let eps: Vec<String> = table[&b.id]
                .endpoints
                .iter()
                .map(|e| format!("{}:{}", e.ip, e.port))
                .collect();
            format!("{}@{}*{}", b.id.service.name, eps.join(","), b.weight)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn cond<'a>(conds: &'a [Condition], t: &str) -> &'a Condition {
    conds
        .iter()
        .find(|c| c.type_.as_str() == t)
        .unwrap_or_else(|| panic!("no {t} in {conds:?}"))
}

fn route_cond(out: &GatewayOutput, kind: L4Kind, route: &str, t: &str) -> (bool, &'static str) {
    let parents = &out.l4_routes[&(kind, route.parse().unwrap())];
    let c = cond(&parents[0].conditions, t);
    (c.status, c.reason.as_str())
}

fn listener<'a>(out: &'a GatewayOutput, name: &str) -> &'a k8slb_common::gateway::ListenerStatus {
    out.gateways[&"infra/gw".parse().unwrap()]
        .listeners
        .iter()
        .find(|l| l.name == name)
        .unwrap()
}

fn route(kind: &str, name: &str, created: u32, body: &str) -> String {
    let version = "v1alpha2";
    format!(
        "apiVersion: gateway.networking.k8s.io/{version}\nkind: {kind}\nmetadata: {{ name: {name}, namespace: default, creationTimestamp: \"2026-01-01T00:00:{created:02}Z\" }}\nspec:\n{body}\n"
    )
}

#[test]
fn tcp_udp_and_passthrough_listeners_take_their_route_kinds() {
    let tcp = route(
        "TCPRoute",
        "pg",
        1,
        "  parentRefs: [{ name: gw, namespace: infra, sectionName: pg }]\n  rules: [{ backendRefs: [{ name: a, port: 5432 }] }]",
    );
    let udp = route(
        "UDPRoute",
        "dns",
        2,
        "  parentRefs: [{ name: gw, namespace: infra, sectionName: dns }]\n  rules: [{ backendRefs: [{ name: b, port: 53 }] }]",
    );
    let tls = route(
        "TLSRoute",
        "site",
        3,
        "  parentRefs: [{ name: gw, namespace: infra }]\n  hostnames: [site.example.com]\n  rules: [{ backendRefs: [{ name: c, port: 443 }] }]",
    );
    let out = run(&objects(&[CLASS, GATEWAY, &tcp, &udp, &tls]));
    // Each on the Service port of its protocol: 5432/TCP, 53/UDP (target 5353/UDP), 443.
    assert_eq!(
        goes(&out, 5432, StreamProtocol::Tcp, None),
        "a@10.244.1.1:5432*1"
    );
    assert_eq!(
        goes(&out, 53, StreamProtocol::Udp, None),
        "b@10.244.1.2:5353*1"
    );
    assert_eq!(
        goes(&out, 443, StreamProtocol::Tls, Some("site.example.com")),
        "c@10.244.1.3:8443*1"
    );
    // An SNI no route takes: no route (the connection is closed).
    assert_eq!(
        goes(&out, 443, StreamProtocol::Tls, Some("other.example.com")),
        "none"
    );
    assert_eq!(goes(&out, 443, StreamProtocol::Tls, None), "none");
    // 53/TCP and 53/UDP are two listeners; the TCP one has no route.
    assert_eq!(goes(&out, 53, StreamProtocol::Tcp, None), "none");
    for (kind, name) in [
        (L4Kind::Tcp, "default/pg"),
        (L4Kind::Udp, "default/dns"),
        (L4Kind::Tls, "default/site"),
    ] {
        assert_eq!(route_cond(&out, kind, name, "Accepted"), (true, "Accepted"));
        assert_eq!(
            route_cond(&out, kind, name, "ResolvedRefs"),
            (true, "ResolvedRefs")
        );
    }
    // Listener status: supportedKinds is the protocol's kind, attachedRoutes counts.
    for (name, kind, attached) in [
        ("tls", "TLSRoute", 1),
        ("pg", "TCPRoute", 1),
        ("dns", "UDPRoute", 1),
        ("dns-tcp", "TCPRoute", 0),
    ] {
        let l = listener(&out, name);
        assert_eq!(l.supported_kinds, vec![kind], "{name}");
        assert_eq!(l.attached_routes, attached, "{name}");
        assert!(cond(&l.conditions, "Programmed").status, "{name}");
    }
    // No HTTP listener came out of it.
    assert!(out.routes.listeners.is_empty());
    assert_eq!(out.routes.streams.len(), 4);
}

#[test]
fn a_route_kind_attaches_only_to_its_protocols_listeners() {
    // A TCPRoute naming the UDP listener, a UDPRoute naming the TCP one, an HTTPRoute
    // naming the TLS one: NotAllowedByListeners, nothing served.
    let tcp = route(
        "TCPRoute",
        "wrong",
        1,
        "  parentRefs: [{ name: gw, namespace: infra, sectionName: dns }]\n  rules: [{ backendRefs: [{ name: a, port: 5432 }] }]",
    );
    let udp = route(
        "UDPRoute",
        "wrong",
        2,
        "  parentRefs: [{ name: gw, namespace: infra, sectionName: pg }]\n  rules: [{ backendRefs: [{ name: b, port: 53 }] }]",
    );
    let http = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: web, namespace: default }
spec:
  parentRefs: [{ name: gw, namespace: infra, sectionName: tls }]
  rules: [{ backendRefs: [{ name: a, port: 5432 }] }]
"#;
    let out = run(&objects(&[CLASS, GATEWAY, &tcp, &udp, http]));
    assert_eq!(
        route_cond(&out, L4Kind::Tcp, "default/wrong", "Accepted"),
        (false, "NotAllowedByListeners")
    );
    assert_eq!(
        route_cond(&out, L4Kind::Udp, "default/wrong", "Accepted"),
        (false, "NotAllowedByListeners")
    );
    let c = cond(
        &out.http_routes[&"default/web".parse().unwrap()][0].conditions,
        "Accepted",
    );
    assert_eq!(
        (c.status, c.reason.as_str()),
        (false, "NotAllowedByListeners")
    );
    assert!(out.routes.streams.iter().all(|s| s.routes.is_empty()));
}

#[test]
fn tls_routes_are_chosen_by_server_name_exact_before_wildcard_before_any() {
    let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: any, port: 443, protocol: TLS, tls: { mode: Passthrough }, allowedRoutes: { namespaces: { from: All } } }
  - { name: shop, port: 443, protocol: TLS, hostname: "*.shop.example", tls: { mode: Passthrough }, allowedRoutes: { namespaces: { from: All } } }
"#;
    let exact = route(
        "TLSRoute",
        "exact",
        1,
        "  parentRefs: [{ name: gw, namespace: infra }]\n  hostnames: [api.example.com]\n  rules: [{ backendRefs: [{ name: a, port: 443 }] }]",
    );
    let wild = route(
        "TLSRoute",
        "wild",
        2,
        "  parentRefs: [{ name: gw, namespace: infra }]\n  hostnames: [\"*.example.com\"]\n  rules: [{ backendRefs: [{ name: b, port: 443 }] }]",
    );
    let catchall = route(
        "TLSRoute",
        "catchall",
        3,
        "  parentRefs: [{ name: gw, namespace: infra, sectionName: any }]\n  rules: [{ backendRefs: [{ name: c, port: 443 }] }]",
    );
    // A route for a host outside the `shop` listener's wildcard attaches to `any` only.
    let out = run(&objects(&[CLASS, gw, &exact, &wild, &catchall]));
    let to = |sni: &str| {
        goes(&out, 443, StreamProtocol::Tls, Some(sni))
            .split('@')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(to("api.example.com"), "a");
    assert_eq!(to("API.Example.com"), "a", "SNI is case-insensitive");
    assert_eq!(to("www.example.com"), "b");
    assert_eq!(
        to("a.b.example.com"),
        "b",
        "Gateway API wildcards: any depth"
    );
    assert_eq!(
        to("example.com"),
        "c",
        "the wildcard needs a label before it"
    );
    assert_eq!(to("x.shop.example"), "c");
    // The route without hostnames on a listener with a hostname takes the listener's:
    // the catch-all named only `any`, so `*.shop.example` has no route of its own.
    assert_eq!(listener_of(&out, "shop").attached_routes, 0);
    assert_eq!(listener_of(&out, "any").attached_routes, 3);
}

fn listener_of<'a>(
    out: &'a GatewayOutput,
    name: &str,
) -> &'a k8slb_common::gateway::ListenerStatus {
    listener(out, name)
}

#[test]
fn the_oldest_route_holds_a_tcp_listener_the_newer_attached_without_traffic_and_a_server_name() {
    let first = route(
        "TCPRoute",
        "first",
        1,
        "  parentRefs: [{ name: gw, namespace: infra, sectionName: pg }]\n  rules: [{ backendRefs: [{ name: a, port: 5432 }] }]",
    );
    let second = route(
        "TCPRoute",
        "second",
        2,
        "  parentRefs: [{ name: gw, namespace: infra, sectionName: pg }]\n  rules: [{ backendRefs: [{ name: b, port: 5432 }] }]",
    );
    let tls_old = route(
        "TLSRoute",
        "old",
        3,
        "  parentRefs: [{ name: gw, namespace: infra }]\n  hostnames: [db.example.com]\n  rules: [{ backendRefs: [{ name: a, port: 443 }] }]",
    );
    let tls_new = route(
        "TLSRoute",
        "new",
        4,
        "  parentRefs: [{ name: gw, namespace: infra }]\n  hostnames: [db.example.com, new.example.com]\n  rules: [{ backendRefs: [{ name: b, port: 443 }] }]",
    );
    // Listed newest first: the order of the objects does not matter, their age does.
    let out = run(&objects(&[
        CLASS, GATEWAY, &tls_new, &second, &tls_old, &first,
    ]));
    assert!(goes(&out, 5432, StreamProtocol::Tcp, None).starts_with("a@"));
    // The newer TCPRoute is attached (Accepted, counted: the specification's
    // TCPRouteMultipleRoutesAttachment) and gets no traffic; its message says why.
    let (ok, reason) = route_cond(&out, L4Kind::Tcp, "default/second", "Accepted");
    assert_eq!((ok, reason), (true, "Accepted"));
    let msg = &cond(
        &out.l4_routes[&(L4Kind::Tcp, "default/second".parse().unwrap())][0].conditions,
        "Accepted",
    )
    .message;
    assert!(msg.contains("TCPRoute default/first"), "{msg}");
    // The newer TLSRoute keeps the server name nobody else holds.
    assert!(goes(&out, 443, StreamProtocol::Tls, Some("db.example.com")).starts_with("a@"));
    assert!(goes(&out, 443, StreamProtocol::Tls, Some("new.example.com")).starts_with("b@"));
    assert_eq!(
        route_cond(&out, L4Kind::Tls, "default/new", "Accepted"),
        (true, "Accepted")
    );
    assert_eq!(listener(&out, "pg").attached_routes, 2);
}

#[test]
fn weights_and_refused_backends_of_an_l4_route() {
    let split = route(
        "TCPRoute",
        "split",
        1,
        "  parentRefs: [{ name: gw, namespace: infra, sectionName: pg }]\n  rules:\n  - backendRefs: [{ name: a, port: 5432, weight: 90 }, { name: b, port: 5432, weight: 10 }, { name: c, port: 5432, weight: 0 }]\n  - backendRefs: [{ name: nope, port: 5432, weight: 5 }]",
    );
    // Cross-namespace without a ReferenceGrant; and a UDP backend on a TCP-only port.
    let refused = route(
        "TLSRoute",
        "refused",
        2,
        "  parentRefs: [{ name: gw, namespace: infra }]\n  rules: [{ backendRefs: [{ name: a, port: 443, namespace: infra }] }]",
    );
    let wrong_port = route(
        "UDPRoute",
        "wrong-port",
        3,
        "  parentRefs: [{ name: gw, namespace: infra, sectionName: dns }]\n  rules: [{ backendRefs: [{ name: a, port: 5432 }] }]",
    );
    let out = run(&objects(&[CLASS, GATEWAY, &split, &refused, &wrong_port]));
    assert_eq!(
        goes(&out, 5432, StreamProtocol::Tcp, None),
        "a@10.244.1.1:5432*90 b@10.244.1.2:5432*10"
    );
    // The invalid reference (a second rule's; L4 rules' backends count together) keeps
    // its share, closed: 5 of 105.
    let r = out
        .routes
        .route_stream(VIP.parse().unwrap(), 5432, StreamProtocol::Tcp, None)
        .unwrap();
    assert_eq!(r.invalid, 5);
    assert_eq!(
        route_cond(&out, L4Kind::Tcp, "default/split", "ResolvedRefs"),
        (false, "BackendNotFound")
    );
    assert_eq!(
        route_cond(&out, L4Kind::Tls, "default/refused", "ResolvedRefs"),
        (false, "RefNotPermitted")
    );
    // Accepted (it is attached), but its connections are closed.
    assert_eq!(
        route_cond(&out, L4Kind::Tls, "default/refused", "Accepted"),
        (true, "Accepted")
    );
    assert_eq!(
        goes(&out, 443, StreamProtocol::Tls, Some("any.example.com")),
        "closed"
    );
    assert_eq!(
        route_cond(&out, L4Kind::Udp, "default/wrong-port", "ResolvedRefs"),
        (false, "BackendNotFound")
    );
    assert_eq!(goes(&out, 53, StreamProtocol::Udp, None), "closed");

    // With a ReferenceGrant from TLSRoutes of `default`, the reference resolves.
    let grant = r#"
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: tls-to-infra, namespace: infra }
spec:
  from: [{ group: gateway.networking.k8s.io, kind: TLSRoute, namespace: default }]
  to: [{ group: "", kind: Service }]
"#;
    let out = run(&objects(&[CLASS, GATEWAY, &refused, grant]));
    assert_eq!(
        goes(&out, 443, StreamProtocol::Tls, Some("any.example.com")),
        "a@10.244.1.1:8443*1"
    );
    // A grant for HTTPRoutes does not cover TLSRoutes.
    let http_grant = grant.replace("kind: TLSRoute", "kind: HTTPRoute");
    let out = run(&objects(&[CLASS, GATEWAY, &refused, &http_grant]));
    assert_eq!(
        route_cond(&out, L4Kind::Tls, "default/refused", "ResolvedRefs"),
        (false, "RefNotPermitted")
    );
}

#[test]
fn listeners_that_cannot_be_served_say_why() {
    let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: dns, port: 53, protocol: UDP }
  - { name: terminate, port: 8443, protocol: TLS, tls: { mode: Terminate, certificateRefs: [{ name: x }] } }
  - { name: tcp-a, port: 9000, protocol: TCP }
  - { name: tcp-b, port: 9000, protocol: TCP }
  - { name: web, port: 9001, protocol: HTTP }
  - { name: raw, port: 9001, protocol: TCP }
  - { name: kinds, port: 9002, protocol: TCP, allowedRoutes: { kinds: [{ kind: HTTPRoute }] } }
"#;
    let out = run_with(&objects(&[CLASS, gw]), false);
    let reason = |name: &str, t: &str| {
        let c = cond(&listener(&out, name).conditions, t);
        (c.status, c.reason.as_str())
    };
    // HAProxy does not proxy UDP.
    assert_eq!(reason("dns", "Accepted"), (false, "UnsupportedProtocol"));
    assert!(cond(&listener(&out, "dns").conditions, "Accepted")
        .message
        .contains("nginx"));
    // A terminating TLS listener whose certificate does not resolve: not served
    // (InvalidCertificateRef, as an HTTPS listener's), still listing its kind.
    assert_eq!(
        reason("terminate", "ResolvedRefs"),
        (false, "InvalidCertificateRef")
    );
    assert_eq!(listener(&out, "terminate").supported_kinds, ["TLSRoute"]);
    // Two TCP listeners on one port: nothing tells their connections apart.
    assert_eq!(reason("tcp-a", "Conflicted"), (true, "HostnameConflict"));
    assert_eq!(reason("tcp-b", "Conflicted"), (true, "HostnameConflict"));
    // HTTP and TCP on one port: a protocol conflict.
    assert_eq!(reason("raw", "Conflicted"), (true, "ProtocolConflict"));
    assert_eq!(reason("web", "Conflicted"), (true, "ProtocolConflict"));
    // A TCP listener that allows only HTTPRoutes: InvalidRouteKinds, supports none.
    assert_eq!(
        reason("kinds", "ResolvedRefs"),
        (false, "InvalidRouteKinds")
    );
    assert!(listener(&out, "kinds").supported_kinds.is_empty());
    for name in ["dns", "terminate", "tcp-a", "tcp-b", "web", "raw"] {
        assert_eq!(reason(name, "Programmed"), (false, "Invalid"), "{name}");
    }
    assert!(out.routes.streams.iter().all(|s| s.port == 9002));

    // Under nginx the same UDP listener is served.
    let out = run_with(&objects(&[CLASS, gw]), true);
    assert_eq!(
        cond(&listener(&out, "dns").conditions, "Accepted")
            .reason
            .as_str(),
        "Accepted"
    );
}

#[test]
fn every_refusing_condition_has_a_reason_the_problems_know() {
    // The reasons of conditions that refuse something become problems (Events, the
    // metric label): each must be one the plan knows by name, not an `Other`.
    let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: dns, port: 53, protocol: UDP }
  - { name: terminate, port: 8443, protocol: TLS, tls: { mode: Terminate } }
  - { name: tcp-a, port: 9000, protocol: TCP }
  - { name: tcp-b, port: 9000, protocol: TCP }
  - { name: web, port: 9001, protocol: HTTP }
  - { name: raw, port: 9001, protocol: TCP }
  - { name: kinds, port: 9002, protocol: TCP, allowedRoutes: { kinds: [{ kind: HTTPRoute }] } }
  - name: sel
    port: 9003
    protocol: TCP
    allowedRoutes: { namespaces: { from: Selector, selector: { matchExpressions: [{ key: a, operator: Exists, values: [b] }] } } }
"#;
    let out = run_with(&objects(&[CLASS, gw]), false);
    let mut seen = 0;
    for l in &out.gateways[&"infra/gw".parse().unwrap()].listeners {
        for c in l.conditions.iter().filter(|c| {
            (c.type_.as_str() == "Conflicted" && c.status)
                || (c.type_.as_str() != "Conflicted" && !c.status)
        }) {
            let r: k8slb_common::problem::Reason = c.reason.as_str().parse().unwrap();
            if c.type_.as_str() != "Programmed" {
                seen += 1;
                assert!(
                    !matches!(r, k8slb_common::problem::Reason::Other(_)),
                    "listener {}: {} is not a known reason",
                    l.name,
                    c.reason
                );
            }
        }
    }
    assert!(seen >= 6, "{seen}");
}

/// A TLS Secret of namespace `ns` for `names`, as the plan knows it.
fn tls_secret(ns: &str, name: &str, names: &[&str]) -> k8slb_common::ingress::SecretMeta {
    k8slb_common::ingress::SecretMeta {
        namespace: ns.into(),
        name: name.into(),
        type_: "kubernetes.io/tls".into(),
        valid: true,
        version: "0123456789abcdef".into(),
        refusal: String::new(),
        dns_names: names.iter().map(|n| n.to_string()).collect(),
    }
}

const TERMINATE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: shop
    port: 8443
    protocol: TLS
    hostname: "*.shop.example"
    tls: { mode: Terminate, certificateRefs: [{ name: shop-tls }] }
    allowedRoutes: { namespaces: { from: All } }
  - name: db
    port: 8443
    protocol: TLS
    hostname: db.example
    tls: { certificateRefs: [{ name: db-tls }] }
    allowedRoutes: { namespaces: { from: All } }
"#;

#[test]
fn a_terminating_tls_listener_routes_server_names_to_plain_backends_with_its_certificates() {
    let shop = route(
        "TLSRoute",
        "shop",
        1,
        "  parentRefs: [{ name: gw, namespace: infra, sectionName: shop }]\n  hostnames: [\"www.shop.example\", \"*.shop.example\"]\n  rules: [{ backendRefs: [{ name: a, port: 5432 }] }]",
    );
    let db = route(
        "TLSRoute",
        "db",
        2,
        "  parentRefs: [{ name: gw, namespace: infra }]\n  rules: [{ backendRefs: [{ name: b, port: 5432 }] }]",
    );
    let o = objects(&[CLASS, TERMINATE, &shop, &db]);
    let out = translate_tuned(
        &o,
        &[
            tls_secret("infra", "shop-tls", &["*.shop.example"]),
            tls_secret("infra", "db-tls", &["db.example"]),
        ],
        VIP,
        |_| {},
    );
    // Both listeners (one with the specification's default mode) are served and take
    // TLSRoutes.
    for name in ["shop", "db"] {
        let l = listener(&out, name);
        assert_eq!(l.supported_kinds, ["TLSRoute"], "{name}");
        for t in ["Accepted", "ResolvedRefs", "Programmed"] {
            assert!(cond(&l.conditions, t).status, "{name} {t}: {l:?}");
        }
    }
    // db names no section: on shop, *.shop.example is held by the older route.
    assert_eq!(listener(&out, "shop").attached_routes, 1);
    assert_eq!(listener(&out, "db").attached_routes, 1);
    assert!(out.gateways[&"infra/gw".parse().unwrap()]
        .warnings
        .is_empty());
    // By server name, to the backends' plain TCP port (5432, not the TLS one).
    let sni = |n: &str| goes(&out, 8443, StreamProtocol::Tls, Some(n));
    assert_eq!(sni("www.shop.example"), "a@10.244.1.1:5432*1");
    assert_eq!(sni("x.y.shop.example"), "a@10.244.1.1:5432*1");
    assert_eq!(sni("db.example"), "b@10.244.1.2:5432*1");
    assert_eq!(sni("other.example"), "none");
    // One stream that terminates, each certificate for its listener's hostname only.
    let [s] = out.routes.streams.as_slice() else {
        panic!("{:?}", out.routes.streams)
    };
    let t = s.terminate.as_ref().expect("terminated");
    let certs: Vec<(String, Vec<&str>)> = t
        .certificates
        .iter()
        .map(|c| (c.file.stem(), c.hosts.iter().map(|h| h.as_str()).collect()))
        .collect();
    assert_eq!(
        certs,
        [
            ("infra_db-tls".to_string(), vec!["db.example"]),
            ("infra_shop-tls".to_string(), vec!["*.shop.example"]),
        ]
    );
    // Their Secrets are what the nodes get.
    let used: Vec<String> = k8slb_common::certs::used_by_routes(&out.routes)
        .iter()
        .map(|f| f.stem())
        .collect();
    assert_eq!(used, ["infra_db-tls", "infra_shop-tls"]);
}

#[test]
fn a_terminating_tls_listener_checks_its_certificates_as_an_https_listener() {
    let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: missing, port: 8443, protocol: TLS, hostname: a.example, tls: { mode: Terminate, certificateRefs: [{ name: nope }] } }
  - { name: none, port: 8444, protocol: TLS, hostname: a.example, tls: { mode: Terminate } }
  - { name: other-ns, port: 8445, protocol: TLS, hostname: a.example, tls: { mode: Terminate, certificateRefs: [{ name: a-tls, namespace: certs }] } }
  - { name: mismatch, port: 8446, protocol: TLS, hostname: b.example, tls: { mode: Terminate, certificateRefs: [{ name: a-tls }] } }
"#;
    let out = translate_tuned(
        &objects(&[CLASS, gw]),
        &[
            tls_secret("infra", "a-tls", &["a.example"]),
            tls_secret("certs", "a-tls", &["a.example"]),
        ],
        VIP,
        |_| {},
    );
    let reason = |name: &str, t: &str| {
        let c = cond(&listener(&out, name).conditions, t);
        (c.status, c.reason.as_str())
    };
    assert_eq!(
        reason("missing", "ResolvedRefs"),
        (false, "InvalidCertificateRef")
    );
    assert_eq!(
        reason("none", "ResolvedRefs"),
        (false, "InvalidCertificateRef")
    );
    assert!(cond(&listener(&out, "none").conditions, "ResolvedRefs")
        .message
        .contains("TLS listener with tls.mode Terminate needs tls.certificateRefs"));
    // Another namespace's Secret without a ReferenceGrant.
    assert_eq!(
        reason("other-ns", "ResolvedRefs"),
        (false, "RefNotPermitted")
    );
    // A certificate not for the hostname: served for exactly that hostname, with a
    // CertificateHostMismatch warning (as an HTTPS listener).
    assert_eq!(reason("mismatch", "Programmed"), (true, "Programmed"));
    let st = &out.gateways[&"infra/gw".parse().unwrap()];
    assert!(
        st.warnings
            .iter()
            .any(|(r, m)| r.as_str() == "CertificateHostMismatch"
                && m.starts_with("listener mismatch: ")),
        "{:?}",
        st.warnings
    );
    let ports: Vec<u16> = out.routes.streams.iter().map(|s| s.port).collect();
    assert_eq!(ports, [8446]);
    let t = out.routes.streams[0].terminate.as_ref().unwrap();
    assert_eq!(t.certificates[0].hosts[0].as_str(), "b.example");
}

/// A Gateway with a terminating and a passthrough TLS listener on 8443 (the layout of
/// the suite's TLSRouteMixedTerminationSameNamespace), and a passthrough one alone on
/// 9443.
const MIXED_GW: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: tls-terminate, port: 8443, protocol: TLS, hostname: terminate.example, tls: { mode: Terminate, certificateRefs: [{ name: a-tls }] } }
  - { name: tls-passthrough, port: 8443, protocol: TLS, hostname: passthrough.example, tls: { mode: Passthrough } }
  - { name: alone, port: 9443, protocol: TLS, hostname: passthrough.example, tls: { mode: Passthrough } }
"#;

#[test]
fn passthrough_and_terminate_on_one_port_are_both_refused_where_the_provider_does_not_serve_both_modes(
) {
    // TLSRouteListenerMixedTerminationNotSupported, for a provider that does not serve
    // them (both of k8slb's do); another port keeps serving.
    let out = translate_tuned(
        &objects(&[CLASS, MIXED_GW]),
        &[tls_secret("infra", "a-tls", &["terminate.example"])],
        VIP,
        |i| i.serves_tls_mixed = false,
    );
    for name in ["tls-terminate", "tls-passthrough"] {
        let c = cond(&listener(&out, name).conditions, "Accepted");
        assert_eq!((c.status, c.reason.as_str()), (false, "ProtocolConflict"));
        let c = cond(&listener(&out, name).conditions, "Conflicted");
        assert_eq!((c.status, c.reason.as_str()), (true, "ProtocolConflict"));
        assert_eq!(listener(&out, name).attached_routes, 0);
        assert!(listener(&out, name).supported_kinds.is_empty(), "{name}");
    }
    assert!(cond(&listener(&out, "alone").conditions, "Accepted").status);
    let ports: Vec<(u16, bool)> = out
        .routes
        .streams
        .iter()
        .map(|s| (s.port, s.terminate.is_some()))
        .collect();
    assert_eq!(ports, [(9443, false)]);
}

#[test]
fn passthrough_and_terminate_on_one_port_are_both_served_where_the_provider_serves_both_modes() {
    // TLSRouteMixedTerminationSameNamespace: both listeners Accepted, each
    // taking TLSRoutes and its route; one stream on 8443 that terminates with the
    // terminating listener's certificate and passes the other listener's route through.
    let terminated = route(
        "TLSRoute",
        "terminated",
        1,
        "  parentRefs: [{ name: gw, namespace: infra }]\n  hostnames: [terminate.example]\n  rules: [{ backendRefs: [{ name: a, port: 5432 }] }]",
    );
    let passed = route(
        "TLSRoute",
        "passed",
        2,
        "  parentRefs: [{ name: gw, namespace: infra }]\n  hostnames: [passthrough.example]\n  rules: [{ backendRefs: [{ name: b, port: 443 }] }]",
    );
    let gw = MIXED_GW.replace(
        " } }\n",
        " }, allowedRoutes: { namespaces: { from: All } } }\n",
    );
    let out = translate_tuned(
        &objects(&[CLASS, &gw, &terminated, &passed]),
        &[tls_secret("infra", "a-tls", &["terminate.example"])],
        VIP,
        |i| i.serves_tls_mixed = true,
    );
    for name in ["tls-terminate", "tls-passthrough"] {
        let l = listener(&out, name);
        let c = cond(&l.conditions, "Accepted");
        assert_eq!((c.status, c.reason.as_str()), (true, "Accepted"), "{name}");
        assert!(
            !l.conditions
                .iter()
                .any(|c| c.type_.as_str() == "Conflicted" && c.status),
            "{name}: {:?}",
            l.conditions
        );
        assert_eq!(l.supported_kinds, ["TLSRoute"], "{name}");
        assert_eq!(l.attached_routes, 1, "{name}");
    }
    for r in ["default/terminated", "default/passed"] {
        assert_eq!(
            route_cond(&out, L4Kind::Tls, r, "Accepted"),
            (true, "Accepted")
        );
    }
    let s = out.routes.streams.iter().find(|s| s.port == 8443).unwrap();
    assert!(s.is_mixed(), "{s:?}");
    let t = s.terminate.as_ref().unwrap();
    assert_eq!(t.certificates.len(), 1);
    assert_eq!(t.certificates[0].hosts[0].as_str(), "terminate.example");
    let modes: Vec<(&str, bool)> = s
        .routes
        .iter()
        .map(|r| (r.host.as_ref().unwrap().as_str(), r.passthrough))
        .collect();
    assert_eq!(
        modes,
        [("passthrough.example", true), ("terminate.example", false)]
    );
    assert_eq!(
        goes(&out, 8443, StreamProtocol::Tls, Some("terminate.example")),
        "a@10.244.1.1:5432*1"
    );
    assert_eq!(
        goes(&out, 8443, StreamProtocol::Tls, Some("passthrough.example")),
        "b@10.244.1.2:8443*1"
    );
    // A port of one mode marks nothing.
    let alone = out.routes.streams.iter().find(|s| s.port == 9443).unwrap();
    assert!(alone.terminate.is_none() && !alone.is_mixed());
}

#[test]
fn a_shared_address_port_keeps_the_tls_mode_of_its_first_gateway_and_the_newer_listener_says_why_where_both_are_not_served(
) {
    // Two Gateways on one address (as sharing by consent allows), one passing TLS
    // through on 8443, the newer terminating it there: the older keeps the port, the
    // newer's certificate never answers on it.
    let older = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: old, namespace: infra, creationTimestamp: "2026-01-01T00:00:01Z" }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: pass, port: 8443, protocol: TLS, tls: { mode: Passthrough }, allowedRoutes: { namespaces: { from: All } } }
"#;
    let newer = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: new, namespace: infra, creationTimestamp: "2026-01-01T00:00:02Z" }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: term, port: 8443, protocol: TLS, hostname: a.example, tls: { mode: Terminate, certificateRefs: [{ name: a-tls }] }, allowedRoutes: { namespaces: { from: All } } }
"#;
    let r = route(
        "TLSRoute",
        "r",
        3,
        "  parentRefs: [{ name: old, namespace: infra }, { name: new, namespace: infra }]\n  rules: [{ backendRefs: [{ name: a, port: 443 }] }]",
    );
    // The provider does not serve both modes, or not every LB node's actor does yet
    // (version skew): the newer Gateway's listener says so in its conditions.
    for (pending, why) in [
        (
            false,
            "Passthrough and Terminate on one port are not served by this provider",
        ),
        (true, k8slb_common::gateway::MIXED_PENDING),
    ] {
        let out = translate_tuned(
            &objects(&[CLASS, older, newer, &r]),
            &[tls_secret("infra", "a-tls", &["a.example"])],
            VIP,
            |i| {
                i.serves_tls_mixed = false;
                i.tls_mixed_pending = pending;
            },
        );
        let [s] = out.routes.streams.as_slice() else {
            panic!("{:?}", out.routes.streams)
        };
        assert!(s.terminate.is_none(), "{s:?}");
        assert!(k8slb_common::certs::used_by_routes(&out.routes).is_empty());
        assert_eq!(
            goes(&out, 8443, StreamProtocol::Tls, Some("a.example")),
            "a@10.244.1.1:8443*1"
        );
        let of = |gw: &str| &out.gateways[&format!("infra/{gw}").parse().unwrap()].listeners[0];
        let term = of("new");
        for t in ["Accepted", "Conflicted"] {
            let c = cond(&term.conditions, t);
            assert_eq!(c.reason.as_str(), "ProtocolConflict", "{t}");
            assert_eq!(
                c.message,
                format!("Gateway infra/old, older on a shared address, has a TLS listener on port 8443 with the other tls.mode: {why}"),
                "{t}"
            );
        }
        assert!(
            !cond(&term.conditions, "Programmed").status,
            "{:?}",
            term.conditions
        );
        assert_eq!(term.attached_routes, 0);
        assert!(cond(&of("old").conditions, "Accepted").status);
    }
}
