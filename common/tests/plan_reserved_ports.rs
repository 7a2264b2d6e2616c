//! Ports the LB nodes keep for themselves (global config `reservedPorts`; default sshd,
//! etcd, kube-apiserver, k8slb's admin ports, kubelet, kube-proxy): a proxy told to
//! listen on one of them on a VIP could not bind and would refuse the node's whole
//! config. They are refused at plan time on the object that asked (a Service port, an
//! Ingress port annotation, a Gateway listener), and the rest of that object and every
//! other object is served.

mod support;

use k8slb_common::plan::{plan, PlanOptions, Provider};
use k8slb_common::state::State;
use support::*;

const POOLS: &str = r#"{ "pools": {
    "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" } } }"#;

fn ports_of(s: &State, key: &str) -> Vec<u16> {
    s.services[&key.parse().unwrap()]
        .ports
        .iter()
        .map(|p| p.port)
        .collect()
}

#[test]
fn a_service_port_the_nodes_keep_is_refused_and_its_other_ports_are_served() {
    let c = cfg(POOLS);
    let services = vec![
        svc("evil", "kubelet")
            .port(10250)
            .port(9254)
            .port(22)
            .port(8080)
            .created(1)
            .build(),
        svc("bank", "web").port(80).created(2).build(),
    ];
    let s = run(&c, &objs(services, nodes(2), vec![]), None);
    assert_eq!(ports_of(&s, "evil/kubelet"), [8080]);
    assert_eq!(ips(&s, "evil/kubelet"), ["198.18.0.100"]);
    let p = problems_of(&s, "evil/kubelet");
    let reserved: Vec<_> = p.iter().filter(|(r, _)| r == "PortReserved").collect();
    assert_eq!(reserved.len(), 3, "{p:?}");
    assert!(
        reserved
            .iter()
            .any(|(_, m)| m.contains("10250") && m.contains("reservedPorts")),
        "{p:?}"
    );
    assert_eq!(ports_of(&s, "bank/web"), [80]);
    assert!(problems_of(&s, "bank/web").is_empty());
}

#[test]
fn the_admin_sets_the_reserved_ports_and_kubeproxy_reserves_none() {
    // The admin's list replaces the default one: 22 is served, 8080 is not.
    let c = cfg(r#"{ "pools": {
        "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" } },
        "reservedPorts": [8080, "30000-32767"] }"#);
    let services = vec![svc("a", "s")
        .port(22)
        .port(8080)
        .port(31000)
        .created(1)
        .build()];
    let o = objs(services, nodes(2), vec![]);
    let s = run(&c, &o, None);
    assert_eq!(ports_of(&s, "a/s"), [22]);
    // kube-proxy binds nothing on the node: every port is served.
    let kp = PlanOptions {
        provider: Provider::Kubeproxy,
        ..Default::default()
    };
    let s = plan(&c, &kp, &o, None);
    assert_eq!(ports_of(&s, "a/s"), [22, 8080, 31000]);
    assert!(problems_of(&s, "a/s").is_empty());
}

#[test]
fn an_ingress_port_annotation_on_a_reserved_port_is_refused_and_the_rest_is_served() {
    let c = cfg(POOLS);
    let mut o = objs(vec![], nodes(2), vec![]);
    o.ingress_classes.push(ingress_class());
    o.services.push(backend_svc("evil", "app", 80));
    o.services.push(backend_svc("bank", "app", 80));
    o.ingresses.push(
        ing("evil", "grab")
            .rule("evil.example.com", "/", "app", 80)
            .ann("loadbalancer/http-port", "6443")
            .created(1)
            .build(),
    );
    o.ingresses.push(
        ing("bank", "web")
            .rule("bank.example.com", "/", "app", 80)
            .created(2)
            .build(),
    );
    let s = run(&c, &o, None);
    let p = ingress_problems(&s, "evil/grab");
    assert!(
        p.iter()
            .any(|(r, m)| r == "PortReserved" && m.contains("6443")),
        "{p:?}"
    );
    // No listener on 6443; bank's Ingress is served on 80 as before.
    assert!(s.http.listeners.iter().all(|l| l.port != 6443));
    assert!(s.http.listeners.iter().any(|l| l.port == 80));
    assert!(ingress_problems(&s, "bank/web").is_empty());
}

#[test]
fn a_gateway_listener_on_a_reserved_port_is_port_unavailable_and_its_other_listeners_serve() {
    let c = cfg(POOLS);
    let mut o = objs(vec![], nodes(2), vec![]);
    o.services.push(backend_svc("default", "app", 80));
    for t in [
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
"#,
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra, uid: uid-gw, creationTimestamp: "2026-01-01T00:00:01Z" }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: http, port: 80, protocol: HTTP, allowedRoutes: { namespaces: { from: All } } }
  - { name: ssh, port: 22, protocol: TCP, allowedRoutes: { namespaces: { from: All } } }
  - { name: kubelet, port: 10250, protocol: HTTP, allowedRoutes: { namespaces: { from: All } } }
"#,
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: web, namespace: default }
spec:
  parentRefs: [ { name: gw, namespace: infra } ]
  rules:
  - backendRefs: [ { name: app, port: 80 } ]
"#,
    ] {
        o.add_text(t).unwrap();
    }
    let s = run(&c, &o, None);
    let p: Vec<_> = s
        .problems
        .iter()
        .filter(|p| p.object.to_string() == "Gateway infra/gw")
        .map(|p| (p.reason.to_string(), p.message.clone()))
        .collect();
    for port in ["22/TCP", "10250/TCP"] {
        assert!(
            p.iter().any(|(r, m)| r == "PortUnavailable"
                && m.contains(port)
                && m.contains("reservedPorts")),
            "{port}: {p:?}"
        );
    }
    let ports: Vec<u16> = s.http.listeners.iter().map(|l| l.port).collect();
    assert_eq!(ports, [80]);
    assert!(s.http.streams.iter().all(|l| l.port != 22));
}
