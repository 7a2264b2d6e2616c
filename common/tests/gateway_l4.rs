//! Gateway API L4 into the route model's streams: `TLS` listeners with
//! `tls.mode: Passthrough` and TLSRoutes (routed by SNI), `TCP` listeners and TCPRoutes,
//! `UDP` listeners and UDPRoutes (experimental channel, v1alpha2), as the specification
//! documents them: listener protocols and their route kinds, hostname intersection for
//! TLSRoute, one route per listener (per server name for TLS; the oldest wins), weighted
//! backends on the Service port of the route's protocol, ReferenceGrant, and the
//! refusals (UDP under HAProxy, TLS termination on a TLS listener). The reference router
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
    // A TLS mode the implementation does not serve: the specification's
    // UnsupportedValue (TLSRouteListenerTerminateNotSupported), and no kinds.
    assert_eq!(reason("terminate", "Accepted"), (false, "UnsupportedValue"));
    assert!(listener(&out, "terminate").supported_kinds.is_empty());
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
