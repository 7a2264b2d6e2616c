//! Gateways in the plan: each Gateway of our class is a tenant of the allocator like a
//! Service (sticky, its pool by annotation, `spec.addresses` by name, its listener ports
//! checked against Services on a shared address), its routes are in `state.http` next to
//! the Ingresses', and every refusing condition is a problem on its object.

mod support;

use k8slb_common::objects::Objects;
use k8slb_common::plan::{plan, plan_round, PlanOptions, Provider};
use k8slb_common::routes::RouteAction;
use k8slb_common::state::State;
use support::*;

const POOLS: &str = r#"{ "pools": {
    "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" },
    "other": { "network": "198.18.1.0/24", "range": "198.18.1.100-198.18.1.120" } } }"#;

const CLASS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
"#;

/// A Gateway `infra/<name>` of class k8slb with an HTTP listener on `port`, created at
/// second `created`, with `extra` appended to its spec (YAML, indented two spaces).
fn gateway(name: &str, port: u16, created: u32, extra: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: {name}
  namespace: infra
  uid: uid-{name}
  creationTimestamp: "2026-01-01T00:00:{created:02}Z"
spec:
  gatewayClassName: k8slb
  listeners:
  - {{ name: http, port: {port}, protocol: HTTP, allowedRoutes: {{ namespaces: {{ from: All }} }} }}
{extra}
"#
    )
}

/// An HTTPRoute `default/<name>` on Gateway infra/<gateway>, `/` to Service `backend`:80.
fn route(name: &str, gateway: &str, backend: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: default }}
spec:
  parentRefs: [ {{ name: {gateway}, namespace: infra }} ]
  hostnames: [ app.example.com ]
  rules:
  - backendRefs: [ {{ name: {backend}, port: 80 }} ]
"#
    )
}

fn objects(services: Vec<k8s_openapi::api::core::v1::Service>, texts: &[&str]) -> Objects {
    let mut o = objs(services, nodes(2), vec![]);
    o.services.push(backend_svc("default", "app", 80));
    for t in texts {
        o.add_text(t).unwrap();
    }
    assert!(o.problems.is_empty(), "{:?}", o.problems);
    o
}

fn gateway_ips(s: &State, key: &str) -> Vec<String> {
    s.gateways
        .get(&key.parse().unwrap())
        .map(|g| g.ips.iter().map(|i| i.to_string()).collect())
        .unwrap_or_default()
}

fn problems_on(s: &State, object: &str) -> Vec<(String, String)> {
    s.problems
        .iter()
        .filter(|p| p.object.to_string() == object)
        .map(|p| (p.reason.to_string(), p.message.clone()))
        .collect()
}

fn ports_on(s: &State, ip: &str) -> Vec<u16> {
    s.http
        .listeners
        .iter()
        .filter(|l| l.ip.to_string() == ip)
        .map(|l| l.port)
        .collect()
}

#[test]
fn a_gateway_gets_its_own_address_serves_its_routes_and_keeps_the_address() {
    let c = cfg(POOLS);
    let gw = gateway("gw", 80, 5, "");
    let rt = route("web", "gw", "app");
    let o = objects(
        vec![svc("default", "svc").port(80).created(1).build()],
        &[CLASS, &gw, &rt],
    );
    let s = run(&c, &o, None);
    assert_eq!(ips(&s, "default/svc"), ["198.18.0.100"]);
    assert_eq!(gateway_ips(&s, "infra/gw"), ["198.18.0.101"]);
    let vip = &s.vips[&"198.18.0.101".parse().unwrap()];
    assert_eq!(vip.gateways.len(), 1, "{vip:?}");
    assert!(vip.services.is_empty() && !vip.ingress, "{vip:?}");
    assert!(vip.owner.is_some(), "{vip:?}");
    assert_eq!(ports_on(&s, "198.18.0.101"), [80]);
    let action = s
        .http
        .route("198.18.0.101".parse().unwrap(), 80, "app.example.com", "/x")
        .expect("the route is served");
    match action {
        RouteAction::Forward { backends, .. } => {
            assert_eq!(backends[0].id.to_string(), "default/app:80")
        }
        other => panic!("{other:?}"),
    }
    assert!(s.problems.is_empty(), "{:?}", s.problems);

    // A Service older than the Gateway, added later, does not take its address; the
    // state is stable.
    let o2 = objects(
        vec![
            svc("default", "svc").port(80).created(1).build(),
            svc("default", "early").port(80).created(0).build(),
        ],
        &[CLASS, &gw, &rt],
    );
    let s2 = run(&c, &o2, Some(&s));
    assert_eq!(gateway_ips(&s2, "infra/gw"), ["198.18.0.101"]);
    assert_eq!(ips(&s2, "default/early"), ["198.18.0.102"]);
    assert_eq!(run(&c, &o2, Some(&s2)), s2, "a no-op recompute is a no-op");

    // Lost state: the Gateway's status.addresses is adopted.
    let shown = gateway(
        "gw",
        80,
        5,
        "status:\n  addresses: [ { type: IPAddress, value: 198.18.0.110 } ]",
    );
    let s3 = run(&c, &objects(vec![], &[CLASS, &shown, &rt]), None);
    assert_eq!(gateway_ips(&s3, "infra/gw"), ["198.18.0.110"]);

    // Deleted: the address is released, nothing of it is served.
    let s4 = run(&c, &objects(vec![], &[CLASS, &rt]), Some(&s));
    assert!(s4.gateways.is_empty() && s4.http.is_empty(), "{s4:?}");
    assert!(!s4.vips.contains_key(&"198.18.0.101".parse().unwrap()));
}

#[test]
fn a_gateway_pool_comes_from_its_annotation_or_infrastructure_and_addresses_by_name() {
    let c = cfg(POOLS);
    let by_annotation = gateway("a", 80, 1, "").replace(
        "  uid: uid-a\n",
        "  uid: uid-a\n  annotations: { loadbalancer/pool: other }\n",
    );
    let by_infrastructure = gateway(
        "b",
        80,
        2,
        "  infrastructure: { annotations: { loadbalancer/pool: other } }",
    );
    let by_address = gateway(
        "c",
        80,
        3,
        "  addresses: [ { type: IPAddress, value: 198.18.0.115 } ]",
    );
    let s = run(
        &c,
        &objects(
            vec![],
            &[CLASS, &by_annotation, &by_infrastructure, &by_address],
        ),
        None,
    );
    assert_eq!(gateway_ips(&s, "infra/a"), ["198.18.1.100"]);
    assert_eq!(gateway_ips(&s, "infra/b"), ["198.18.1.101"]);
    assert_eq!(gateway_ips(&s, "infra/c"), ["198.18.0.115"]);
    assert_eq!(s.gateways[&"infra/a".parse().unwrap()].pool, "other");
    assert!(s.problems.is_empty(), "{:?}", s.problems);
}

#[test]
fn a_refused_address_request_is_a_problem_and_never_loses_the_address_held() {
    let c = cfg(POOLS);
    let good = gateway("gw", 80, 1, "");
    let s = run(&c, &objects(vec![], &[CLASS, &good]), None);
    assert_eq!(gateway_ips(&s, "infra/gw"), ["198.18.0.100"]);
    for (extra, reason, status) in [
        (
            "  addresses: [ { type: Hostname, value: lb.example.com } ]",
            "UnsupportedAddress",
            ("Accepted", "UnsupportedAddress"),
        ),
        (
            "  addresses: [ { type: IPAddress, value: \"198.18.0.300\" } ]",
            "InvalidIp",
            ("Programmed", "AddressNotUsable"),
        ),
        (
            "  addresses: [ { type: IPAddress, value: \"203.0.113.9\" } ]",
            "IpOutsidePool",
            ("Programmed", "AddressNotUsable"),
        ),
        (
            "  infrastructure: { parametersRef: { group: invalid.io, kind: InvalidParameters, name: invalid } }",
            "InvalidParameters",
            ("Accepted", "InvalidParameters"),
        ),
        (
            "  infrastructure: { annotations: { loadbalancer/pool: nope } }",
            "UnknownPool",
            ("Programmed", "Programmed"),
        ),
        (
            "  infrastructure: { annotations: { loadbalancer/pool: \"a\\nb\" } }",
            "InvalidPool",
            ("Programmed", "Programmed"),
        ),
    ] {
        let bad = gateway("gw", 80, 1, extra);
        let o = objects(vec![], &[CLASS, &bad]);
        let s2 = run(&c, &o, Some(&s));
        assert_eq!(gateway_ips(&s2, "infra/gw"), ["198.18.0.100"], "{extra}");
        let p = problems_on(&s2, "Gateway infra/gw");
        assert!(p.iter().any(|(r, _)| r == reason), "{extra}: {p:?}");
        // Once per reason: the status condition does not report it a second time.
        assert_eq!(
            p.iter().filter(|(r, _)| r == reason).count(),
            1,
            "{extra}: {p:?}"
        );
        // The Gateway's status says it too.
        let st = plan_round(&c, &PlanOptions::default(), &o, Some(&s)).gateway;
        let conds = &st.gateways[&"infra/gw".parse().unwrap()].conditions;
        let cond = conds.iter().find(|c| c.type_.as_str() == status.0).unwrap();
        assert_eq!(cond.reason.as_str(), status.1, "{extra}: {conds:?}");
        // A new Gateway refused the same way gets nothing.
        let s3 = run(&c, &objects(vec![], &[CLASS, &bad]), None);
        assert!(gateway_ips(&s3, "infra/gw").is_empty(), "{extra}");
    }
}

#[test]
fn a_listener_on_a_port_a_sharing_service_holds_is_port_unavailable_and_the_gateway_stays() {
    let mut c = cfg(POOLS);
    // k8slb's sharing rule (by name, no key): what this test is about.
    c.tenancy.address_sharing = k8slb_common::config::AddressSharing::Open;
    let gw = gateway("gw", 80, 1, "");
    let rt = route("web", "gw", "app");
    let s = run(&c, &objects(vec![], &[CLASS, &gw, &rt]), None);
    assert_eq!(gateway_ips(&s, "infra/gw"), ["198.18.0.100"]);
    // A Service asks for the Gateway's address by name, on another port: shared.
    let sharing = svc("default", "dns")
        .port(9000)
        .ip("198.18.0.100")
        .created(9)
        .build();
    let s2 = run(
        &c,
        &objects(vec![sharing.clone()], &[CLASS, &gw, &rt]),
        Some(&s),
    );
    assert_eq!(ips(&s2, "default/dns"), ["198.18.0.100"]);
    // The Gateway then adds a listener on that port: that listener is not served.
    let grown = gateway("gw", 80, 1, "").replace(
        "  listeners:\n",
        "  listeners:\n  - { name: extra, port: 9000, protocol: HTTP }\n",
    );
    let s3 = run(
        &c,
        &objects(vec![sharing], &[CLASS, &grown, &rt]),
        Some(&s2),
    );
    assert_eq!(gateway_ips(&s3, "infra/gw"), ["198.18.0.100"]);
    assert_eq!(ips(&s3, "default/dns"), ["198.18.0.100"]);
    assert_eq!(ports_on(&s3, "198.18.0.100"), [80]);
    let p = problems_on(&s3, "Gateway infra/gw");
    assert!(
        p.iter().any(|(r, m)| r == "PortUnavailable"
            && m.contains("listener extra")
            && m.contains("Service default/dns")),
        "{p:?}"
    );
}

#[test]
fn refusing_conditions_are_problems_on_their_objects() {
    let c = cfg(POOLS);
    let gw = gateway("gw", 80, 1, "");
    let missing = route("broken", "gw", "nothere");
    let s = run(&c, &objects(vec![], &[CLASS, &gw, &missing]), None);
    let p = problems_on(&s, "HTTPRoute default/broken");
    assert!(
        p.iter()
            .any(|(r, m)| r == "BackendNotFound" && m.starts_with("on Gateway infra/gw: ")),
        "{p:?}"
    );
    // Served as the spec says: 500 for the rule whose backend is missing.
    let action = s
        .http
        .route("198.18.0.100".parse().unwrap(), 80, "app.example.com", "/")
        .unwrap();
    assert!(
        matches!(action, RouteAction::Respond { status } if status.code() == 500),
        "{action:?}"
    );
}

#[test]
fn gateways_of_other_classes_are_not_ours_and_kubeproxy_serves_none() {
    let c = cfg(POOLS);
    let theirs =
        gateway("gw", 80, 1, "").replace("gatewayClassName: k8slb", "gatewayClassName: other");
    let s = run(&c, &objects(vec![], &[CLASS, &theirs]), None);
    assert!(
        s.gateways.is_empty() && s.vips.is_empty() && s.problems.is_empty(),
        "{s:?}"
    );

    let ours = gateway("gw", 80, 1, "");
    let o = objects(vec![], &[CLASS, &ours]);
    let opts = PlanOptions {
        provider: Provider::Kubeproxy,
        ..Default::default()
    };
    let s = plan(&c, &opts, &o, None);
    assert!(s.gateways.is_empty() && s.vips.is_empty(), "{s:?}");
    let p = problems_on(&s, "Gateway infra/gw");
    assert!(p.iter().any(|(r, _)| r == "NothingToServe"), "{p:?}");
}

#[test]
fn a_gateway_and_the_ingresses_of_its_pool_are_on_different_addresses() {
    let c = cfg(POOLS);
    let gw = gateway("gw", 80, 5, "");
    let rt = route("web", "gw", "app");
    let mut o = objects(vec![], &[CLASS, &gw, &rt]);
    o.ingresses = vec![ing("default", "i")
        .rule("i.example.com", "/", "app", 80)
        .created(1)
        .build()];
    o.ingress_classes = vec![ingress_class()];
    let s = run(&c, &o, None);
    let ingress_vip: Vec<_> = s.vips.iter().filter(|(_, v)| v.ingress).collect();
    assert_eq!(ingress_vip.len(), 1);
    assert_eq!(ingress_vip[0].0.to_string(), "198.18.0.100");
    assert_eq!(gateway_ips(&s, "infra/gw"), ["198.18.0.101"]);
    assert_eq!(ports_on(&s, "198.18.0.100"), [80], "no TLS: HTTP only");
    assert_eq!(ports_on(&s, "198.18.0.101"), [80]);
    assert!(s.problems.is_empty(), "{:?}", s.problems);
}

/// A TCPRoute and a UDPRoute `default/<name>` on listener `section` of Gateway infra/gw,
/// to Service `backend` port `port`.
fn l4_route(kind: &str, name: &str, section: &str, backend: &str, port: u16) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: {kind}
metadata: {{ name: {name}, namespace: default }}
spec:
  parentRefs: [ {{ name: gw, namespace: infra, sectionName: {section} }} ]
  rules:
  - backendRefs: [ {{ name: {backend}, port: {port} }} ]
"#
    )
}

#[test]
fn l4_listeners_hold_their_transports_ports_and_udp_needs_nginx() {
    let mut c = cfg(POOLS);
    // k8slb's sharing rule (by name, no key): what this test is about.
    c.tenancy.address_sharing = k8slb_common::config::AddressSharing::Open;
    let gw = gateway("gw", 80, 1, "").replace(
        "  listeners:\n",
        "  listeners:\n  - { name: dns, port: 53, protocol: UDP, allowedRoutes: { namespaces: { from: All } } }\n  - { name: dns-tcp, port: 53, protocol: TCP, allowedRoutes: { namespaces: { from: All } } }\n",
    );
    let tcp = l4_route("TCPRoute", "dns-tcp", "dns-tcp", "dns", 53);
    let udp = l4_route("UDPRoute", "dns", "dns", "dns", 53);
    let mut o = objects(vec![], &[CLASS, &gw, &tcp, &udp]);
    o.services.push(
        svc("default", "dns")
            .type_("ClusterIP")
            .port(53)
            .udp(53)
            .build(),
    );
    let nginx = PlanOptions {
        provider: Provider::Nginx,
        ..PlanOptions::default()
    };
    let s = plan(&c, &nginx, &o, None);
    let ip: std::net::IpAddr = "198.18.0.100".parse().unwrap();
    assert_eq!(gateway_ips(&s, "infra/gw"), ["198.18.0.100"]);
    let streams: Vec<(u16, &str)> = s
        .http
        .streams
        .iter()
        .filter(|l| l.ip == ip)
        .map(|l| (l.port, l.protocol.as_str()))
        .collect();
    assert_eq!(streams, [(53, "TCP"), (53, "UDP")]);
    assert_eq!(problems_on(&s, "UDPRoute default/dns"), []);
    // The state round-trips with its streams (the actors read it as JSON).
    assert_eq!(State::from_json(&s.to_json()).unwrap(), s);

    // A Service asks for the Gateway's address by name on 9000/UDP: shared. The Gateway
    // then adds a UDP listener on 9000: PortUnavailable, and a TCP one on 9000: served.
    let sharing = svc("default", "game")
        .udp(9000)
        .ip("198.18.0.100")
        .created(9)
        .build();
    let mut o2 = o.clone();
    o2.services.push(sharing.clone());
    let s2 = plan(&c, &nginx, &o2, Some(&s));
    assert_eq!(ips(&s2, "default/game"), ["198.18.0.100"]);
    let grown = gw.replace(
        "  listeners:\n",
        "  listeners:\n  - { name: game, port: 9000, protocol: UDP }\n  - { name: game-tcp, port: 9000, protocol: TCP }\n",
    );
    let mut o3 = objects(vec![], &[CLASS, &grown, &tcp, &udp]);
    o3.services.extend(o2.services.iter().cloned());
    let s3 = plan(&c, &nginx, &o3, Some(&s2));
    assert_eq!(gateway_ips(&s3, "infra/gw"), ["198.18.0.100"]);
    let p = problems_on(&s3, "Gateway infra/gw");
    assert!(
        p.iter().any(|(r, m)| r == "PortUnavailable"
            && m.contains("listener game:")
            && m.contains("9000/UDP")
            && m.contains("Service default/game")),
        "{p:?}"
    );
    assert!(
        !p.iter().any(|(_, m)| m.contains("listener game-tcp")),
        "{p:?}"
    );
    assert!(s3
        .http
        .streams
        .iter()
        .any(|l| l.port == 9000 && l.protocol.as_str() == "TCP"));

    // Under HAProxy (the default provider), the UDP listener is refused and says why.
    let s4 = run(&c, &o, None);
    let p = problems_on(&s4, "Gateway infra/gw");
    assert!(
        p.iter().any(|(r, m)| r == "UnsupportedProtocol"
            && m.contains("listener dns: HAProxy does not proxy UDP")),
        "{p:?}"
    );
    assert!(s4.http.streams.iter().all(|l| l.protocol.as_str() != "UDP"));
    // The UDPRoute is not allowed by any listener: a problem on it.
    let p = problems_on(&s4, "UDPRoute default/dns");
    assert!(p.iter().any(|(r, _)| r == "NotAllowedByListeners"), "{p:?}");
}

#[test]
fn a_class_parameters_configmap_names_the_pool_of_its_gateways() {
    let c = cfg(POOLS);
    let class = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec:
  controllerName: k8slb.io/gateway-controller
  parametersRef: { group: "", kind: ConfigMap, name: gw-params, namespace: k8slb-system }
"#;
    let params = |pool: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: gw-params, namespace: k8slb-system }}\ndata: {{ pool: \"{pool}\" }}\n"
        )
    };
    let gw = gateway("gw", 80, 1, "");
    let annotated = gateway("mine", 81, 2, "").replace(
        "  uid: uid-mine\n",
        "  uid: uid-mine\n  annotations: { loadbalancer/pool: default }\n",
    );
    let s = run(
        &c,
        &objects(vec![], &[class, &params("other"), &gw, &annotated]),
        None,
    );
    assert_eq!(gateway_ips(&s, "infra/gw"), ["198.18.1.100"]);
    assert_eq!(s.gateways[&"infra/gw".parse().unwrap()].pool, "other");
    // The Gateway's own annotation wins over its class's parameters.
    assert_eq!(gateway_ips(&s, "infra/mine"), ["198.18.0.100"]);
    assert_eq!(problems_on(&s, "GatewayClass k8slb"), []);
    let s_ok = run(&c, &objects(vec![], &[class, &params("other"), &gw]), None);
    assert_eq!(gateway_ips(&s_ok, "infra/gw"), ["198.18.1.100"]);

    // Parameters that name no pool, a pool that does not exist, or no ConfigMap at all:
    // the class is not Accepted (InvalidParameters, a problem on it), and its Gateways
    // get nothing new.
    for (texts, why) in [
        (vec![params("nope")], "pool nope does not exist"),
        (vec![params("Bad Pool")], "data.pool"),
        (vec![], "does not exist"),
    ] {
        let mut all: Vec<&str> = vec![class, &gw];
        all.extend(texts.iter().map(String::as_str));
        let s = run(&c, &objects(vec![], &all), None);
        let p = problems_on(&s, "GatewayClass k8slb");
        assert!(
            p.iter()
                .any(|(r, m)| r == "InvalidParameters" && m.contains(why)),
            "{why}: {p:?}"
        );
        assert_eq!(gateway_ips(&s, "infra/gw"), Vec::<String>::new(), "{why}");

        // Broken after the Gateway got its address: it keeps it, and is still served.
        let s2 = run(&c, &objects(vec![], &all), Some(&s_ok));
        assert_eq!(gateway_ips(&s2, "infra/gw"), ["198.18.1.100"], "{why}");
        assert_eq!(ports_on(&s2, "198.18.1.100"), [80], "{why}");
        assert!(
            problems_on(&s2, "GatewayClass k8slb")
                .iter()
                .any(|(r, _)| r == "InvalidParameters"),
            "{why}"
        );
    }
}

/// A backendRef or certificateRef name is any string up to 253 characters (the CRD sets
/// no pattern): one with a newline would forge a log line through the problem, its Event
/// and the route's status. Every message that quotes it is escaped.
#[test]
fn a_reference_name_with_a_newline_is_escaped_in_problems_and_conditions() {
    let c = cfg(POOLS);
    let gw = gateway("gw", 80, 5, "");
    let forged = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: forged, namespace: default }
spec:
  parentRefs: [ { name: gw, namespace: infra } ]
  rules:
  - backendRefs: [ { name: "web\n2026-11-26T00:00:00Z ERROR k8slb: admin password reset", port: 80 } ]
"#;
    let o = objects(vec![], &[CLASS, &gw, forged]);
    let s = run(&c, &o, None);
    let p = problems_on(&s, "HTTPRoute default/forged");
    assert!(
        p.iter()
            .any(|(r, m)| r == "BackendNotFound" && m.contains(r"web\n2026")),
        "{p:?}"
    );
    assert!(
        s.problems
            .iter()
            .all(|p| !p.message.chars().any(char::is_control)),
        "{:?}",
        s.problems
    );
    let status = plan_round(&c, &PlanOptions::default(), &o, None).gateway;
    let conditions: Vec<_> = status
        .http_routes
        .values()
        .flatten()
        .flat_map(|p| &p.conditions)
        .collect();
    assert!(conditions.iter().any(|c| c.message.contains(r"web\n2026")));
    assert!(conditions
        .iter()
        .all(|c| !c.message.chars().any(char::is_control)));
}

fn cert_fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/certs")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn tls_secret(name: &str, type_: &str, crt: &str, key: &str) -> k8s_openapi::api::core::v1::Secret {
    use base64::Engine;
    let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": type_,
        "metadata": { "name": name, "namespace": "infra" },
        "data": { "tls.crt": b(crt), "tls.key": b(key) }
    }))
    .unwrap()
}

/// A Gateway's certificateRefs get the same check as an Ingress's Secrets (type, then what
/// both proxies load, certs::inspect): a Secret of another type and one the proxies would
/// refuse (a 1024-bit RSA intermediate, the issue 20 case) make their listener
/// InvalidCertificateRef with a problem (an Event) saying why; the Gateway's other HTTPS
/// listener is served with its certificate.
#[test]
fn a_certificate_ref_the_proxies_would_refuse_costs_only_its_listener() {
    let c = cfg(POOLS);
    let gw = gateway(
        "gw",
        80,
        5,
        r#"  - { name: good, port: 443, protocol: HTTPS, hostname: a.example.com, tls: { certificateRefs: [{ name: good }] } }
  - { name: weak, port: 443, protocol: HTTPS, hostname: b.example.com, tls: { certificateRefs: [{ name: weak }] } }
  - { name: opaque, port: 443, protocol: HTTPS, hostname: c.example.com, tls: { certificateRefs: [{ name: opaque }] } }"#,
    );
    let mut o = objects(vec![], &[CLASS, &gw, &route("web", "gw", "app")]);
    let f = cert_fixture;
    o.secrets = vec![
        tls_secret(
            "good",
            "kubernetes.io/tls",
            &(f("leaf.crt") + &f("int.crt")),
            &f("leaf.key"),
        ),
        tls_secret(
            "weak",
            "kubernetes.io/tls",
            &(f("weak-int-leaf.crt") + &f("weak-int.crt")),
            &f("leaf.key"),
        ),
        tls_secret("opaque", "Opaque", &f("ec.crt"), &f("ec.key")),
    ];
    let s = run(&c, &o, None);
    let p = problems_on(&s, "Gateway infra/gw");
    assert!(
        p.iter().any(|(r, m)| r == "InvalidCertificateRef"
            && m.contains("infra/weak")
            && m.contains("RSA key of 1024 bits")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|(r, m)| r == "InvalidCertificateRef"
            && m.contains("infra/opaque")
            && m.contains("of type \"Opaque\"")),
        "{p:?}"
    );
    let served: Vec<(String, String)> = s
        .http
        .listeners
        .iter()
        .flat_map(|l| l.tls.iter().flat_map(|t| &t.certificates))
        .flat_map(|c| c.hosts.iter().map(|h| (h.to_string(), c.file.stem())))
        .collect();
    assert_eq!(
        served,
        [("a.example.com".to_string(), "infra_good".to_string())]
    );
    assert!(!s.to_json().contains("BEGIN"));
}

/// An `IPAddress` entry of `spec.addresses` without a value (optional since the API's
/// GatewayAddressEmpty; the suite's GatewayOptionalAddressValue) asks for any address:
/// the Gateway decodes, gets its pool's next address, is Programmed, and nothing is a
/// problem. Before, the Gateway did not decode at all (skipped, Undecodable).
#[test]
fn an_ip_address_entry_without_a_value_asks_for_any_address_of_the_pool() {
    let c = cfg(POOLS);
    let gw = gateway("gw", 8080, 1, "  addresses: [ { type: IPAddress } ]");
    let o = objects(vec![], &[CLASS, &gw]);
    assert!(o.problems.is_empty(), "{:?}", o.problems);
    let s = run(&c, &o, None);
    assert_eq!(gateway_ips(&s, "infra/gw"), ["198.18.0.100"]);
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    let st = plan_round(&c, &PlanOptions::default(), &o, None).gateway;
    let conds = &st.gateways[&"infra/gw".parse().unwrap()].conditions;
    for t in ["Accepted", "Programmed"] {
        assert!(
            conds.iter().any(|c| c.type_.as_str() == t && c.status),
            "{t}: {conds:?}"
        );
    }
}

/// TLS listeners of both modes on one port (TLSRouteModeMixed) are served by the plan
/// for both proxies: one stream that terminates and passes the passthrough listener's
/// route through, and no `ProtocolConflict`.
#[test]
fn tls_listeners_of_both_modes_on_one_port_are_served_under_both_proxies() {
    let c = cfg(POOLS);
    let gw = gateway(
        "gw",
        80,
        5,
        r#"  - { name: term, port: 8883, protocol: TLS, hostname: a.example.com, tls: { mode: Terminate, certificateRefs: [{ name: good }] }, allowedRoutes: { namespaces: { from: All } } }
  - { name: pass, port: 8883, protocol: TLS, hostname: b.example.com, tls: { mode: Passthrough }, allowedRoutes: { namespaces: { from: All } } }"#,
    );
    let term = l4_route("TLSRoute", "term", "term", "app", 80);
    let pass = l4_route("TLSRoute", "pass", "pass", "app", 80);
    let mut o = objects(vec![], &[CLASS, &gw, &term, &pass]);
    let f = cert_fixture;
    o.secrets = vec![tls_secret(
        "good",
        "kubernetes.io/tls",
        &(f("leaf.crt") + &f("int.crt")),
        &f("leaf.key"),
    )];
    let nginx = PlanOptions {
        provider: Provider::Nginx,
        ..PlanOptions::default()
    };
    let nginx = plan(&c, &nginx, &o, None);
    let haproxy = run(&c, &o, None);
    assert_eq!(nginx.http.streams, haproxy.http.streams);
    let s = haproxy
        .http
        .streams
        .iter()
        .find(|s| s.port == 8883)
        .expect("the port served under HAProxy");
    assert!(s.is_mixed(), "{s:?}");
    let modes: Vec<(Option<String>, bool)> = s
        .routes
        .iter()
        .map(|r| (r.host.as_ref().map(|h| h.to_string()), r.passthrough))
        .collect();
    assert_eq!(
        modes,
        [
            (Some("a.example.com".into()), false),
            (Some("b.example.com".into()), true)
        ]
    );
    let p = problems_on(&haproxy, "Gateway infra/gw");
    assert!(!p.iter().any(|(r, _)| r == "ProtocolConflict"), "{p:?}");
    // The state round-trips with the mark (the actors read it as JSON).
    assert_eq!(State::from_json(&haproxy.to_json()).unwrap(), haproxy);
    let p = problems_on(&nginx, "Gateway infra/gw");
    assert!(!p.iter().any(|(r, _)| r == "ProtocolConflict"), "{p:?}");
}

/// Version skew: TLS listeners of both modes on one port are planned only once every LB
/// node's actor reports rendering them (`tlsMixed`): an actor older than that would
/// terminate the passthrough names with the other listener's certificate. Until then
/// both listeners of the port are `ProtocolConflict` (as where the provider does not
/// serve both modes), their conditions and the Gateway's problem (its Event) say why and
/// what to do, and the rest of the Gateway is served; once every LB node has it, the
/// port is served mixed. A node without a report counts as having none; a node that is
/// not an LB node does not count.
#[test]
fn tls_listeners_of_both_modes_on_one_port_wait_until_every_lb_nodes_actor_renders_them() {
    use k8slb_common::features::{Features, Fleet};
    let c = cfg(POOLS);
    let gw = gateway(
        "gw",
        80,
        5,
        r#"  - { name: term, port: 8883, protocol: TLS, hostname: a.example.com, tls: { mode: Terminate, certificateRefs: [{ name: good }] }, allowedRoutes: { namespaces: { from: All } } }
  - { name: pass, port: 8883, protocol: TLS, hostname: b.example.com, tls: { mode: Passthrough }, allowedRoutes: { namespaces: { from: All } } }
  - { name: alone, port: 8884, protocol: TLS, hostname: b.example.com, tls: { mode: Passthrough }, allowedRoutes: { namespaces: { from: All } } }"#,
    );
    let term = l4_route("TLSRoute", "term", "term", "app", 80);
    let pass = l4_route("TLSRoute", "pass", "pass", "app", 80);
    let alone = l4_route("TLSRoute", "alone", "alone", "app", 80);
    let mut o = objects(
        vec![],
        &[CLASS, &gw, &term, &pass, &alone, &route("web", "gw", "app")],
    );
    let f = cert_fixture;
    o.secrets = vec![tls_secret(
        "good",
        "kubernetes.io/tls",
        &(f("leaf.crt") + &f("int.crt")),
        &f("leaf.key"),
    )];
    let node = |n: &str| n.parse().unwrap();
    let with = |fleet: Vec<(&str, Features)>| PlanOptions {
        fleet: Fleet::Reported(fleet.into_iter().map(|(n, f)| (node(n), f)).collect()),
        ..PlanOptions::default()
    };
    let all = Features::this_build;
    let stream_ports = |s: &State| -> Vec<(u16, bool)> {
        s.http
            .streams
            .iter()
            .map(|s| (s.port, s.is_mixed()))
            .collect()
    };
    let old_lb02 = with(vec![("lb01", all()), ("lb02", Features::none())]);
    let no_lb_reported = with(vec![("not-an-lb", all())]);
    for opts in [old_lb02, no_lb_reported] {
        let round = plan_round(&c, &opts, &o, None);
        let s = &round.state;
        // The mixed port is not served; the one of one mode and the HTTP one are.
        assert_eq!(stream_ports(s), [(8884, false)], "{:?}", opts.fleet);
        assert_eq!(ports_on(s, "198.18.0.100"), [80]);
        let st = &round.gateway.gateways[&"infra/gw".parse().unwrap()];
        for name in ["term", "pass"] {
            let l = st.listeners.iter().find(|l| l.name == name).unwrap();
            for t in ["Accepted", "Conflicted"] {
                let c = l.conditions.iter().find(|c| c.type_.as_str() == t).unwrap();
                assert_eq!(c.reason.as_str(), "ProtocolConflict", "{name} {t}");
                assert_eq!(
                    c.message,
                    "another TLS listener uses port 8883 with the other tls.mode: not every load-balancer node's actor supports TLS listeners of both modes on one port yet: upgrade the DaemonSet",
                    "{name} {t}"
                );
            }
        }
        let p = problems_on(s, "Gateway infra/gw");
        assert!(
            p.iter().any(|(r, m)| r == "ProtocolConflict"
                && m.starts_with("listener term: ")
                && m.ends_with("upgrade the DaemonSet")),
            "{p:?}"
        );
        // Only the Gateway that asks for it: the routes of the other listeners are
        // served.
        for r in ["TLSRoute default/alone", "HTTPRoute default/web"] {
            assert_eq!(problems_on(s, r), [], "{r}");
        }
    }
    // Every LB node renders it: served mixed, nothing refused.
    let s = plan(&c, &with(vec![("lb01", all()), ("lb02", all())]), &o, None);
    assert_eq!(stream_ports(&s), [(8883, true), (8884, false)]);
    assert_eq!(problems_on(&s, "Gateway infra/gw"), []);
    // lb02 just joined and has not reported yet: the others' features stand (a node
    // added does not withdraw the port everywhere).
    assert_eq!(plan(&c, &with(vec![("lb01", all())]), &o, None), s);
    // Where no actor reports (files mode, `plan`): this build's features.
    assert_eq!(run(&c, &o, None), s);
}
