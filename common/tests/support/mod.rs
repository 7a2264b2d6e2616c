//! Chainable fixtures: `svc("default", "web").port(80).created(3)`, `node("lb1")`.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8slb_common::config::{parse_global_config, GlobalConfig};
use k8slb_common::objects::Objects;
use k8slb_common::plan::{plan, PlanOptions};
use k8slb_common::state::State;
use serde_json::{json, Value};

pub struct Svc(pub Value);

pub fn svc(ns: &str, name: &str) -> Svc {
    Svc(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"), "annotations": {} },
        "spec": { "type": "LoadBalancer", "ports": [] }
    }))
}

impl Svc {
    pub fn port(self, port: i32) -> Self {
        self.port_full(None, port, "TCP", json!(port))
    }
    pub fn named_port(self, name: &str, port: i32, target: Value) -> Self {
        self.port_full(Some(name), port, "TCP", target)
    }
    pub fn udp(self, port: i32) -> Self {
        self.port_full(None, port, "UDP", json!(port))
    }
    pub fn port_full(mut self, name: Option<&str>, port: i32, proto: &str, target: Value) -> Self {
        let mut p = json!({ "port": port, "protocol": proto, "targetPort": target });
        if let Some(n) = name {
            p["name"] = json!(n);
        }
        self.0["spec"]["ports"].as_array_mut().unwrap().push(p);
        self
    }
    pub fn ann(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["annotations"][k] = json!(v);
        self
    }
    pub fn pool(self, p: &str) -> Self {
        self.ann("loadbalancer/pool", p)
    }
    pub fn ip(mut self, ip: &str) -> Self {
        self.0["spec"]["loadBalancerIP"] = json!(ip);
        self
    }
    pub fn created(mut self, sec: u32) -> Self {
        self.0["metadata"]["creationTimestamp"] = json!(format!(
            "2026-01-01T00:{:02}:{:02}Z",
            sec / 60 % 60,
            sec % 60
        ));
        self
    }
    pub fn class(mut self, c: &str) -> Self {
        self.0["spec"]["loadBalancerClass"] = json!(c);
        self
    }
    pub fn type_(mut self, t: &str) -> Self {
        self.0["spec"]["type"] = json!(t);
        self
    }
    pub fn status_ip(mut self, ip: &str) -> Self {
        self.0["status"] =
            json!({ "loadBalancer": { "ingress": [ { "ip": ip, "ipMode": "Proxy" } ] } });
        self
    }
    pub fn spec(mut self, k: &str, v: Value) -> Self {
        self.0["spec"][k] = v;
        self
    }
    pub fn build(self) -> Service {
        serde_json::from_value(self.0).expect("fixture service decodes")
    }
}

pub fn node(name: &str, addr: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "labels": { "type": "loadBalancer" } },
        "status": { "conditions": [ { "type": "Ready", "status": "True" } ],
                    "addresses": [ { "type": "InternalIP", "address": addr } ] }
    }))
    .unwrap()
}

pub fn nodes(n: usize) -> Vec<Node> {
    (1..=n)
        .map(|i| node(&format!("lb{i:02}"), &format!("198.18.0.{i}")))
        .collect()
}

/// A slice for `svc` with one port (`port_name`, `port`) and endpoints given as
/// (ip, ready, serving, terminating).
pub fn slice(
    ns: &str,
    svc: &str,
    suffix: &str,
    port_name: Option<&str>,
    port: i32,
    eps: &[(&str, bool, bool, bool)],
) -> EndpointSlice {
    let mut p = json!({ "port": port, "protocol": "TCP" });
    if let Some(n) = port_name {
        p["name"] = json!(n);
    }
    let endpoints: Vec<Value> = eps
        .iter()
        .map(|(ip, r, s, t)| json!({ "addresses": [ip], "conditions": { "ready": r, "serving": s, "terminating": t } }))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": { "name": format!("{svc}-{suffix}"), "namespace": ns,
                      "labels": { "kubernetes.io/service-name": svc } },
        "addressType": if eps.first().is_some_and(|e| e.0.contains(':')) { "IPv6" } else { "IPv4" },
        "ports": [p], "endpoints": endpoints
    }))
    .unwrap()
}

pub const TWO_POOLS: &str = r#"{ "pools": {
    "default": { "network": "192.168.10.0/24", "range": "192.168.10.200-192.168.10.254" },
    "external": { "network": "1.2.3.0/22", "range": "1.2.3.50-1.2.3.74", "interface": "em1" },
    "ipv6": { "network": "2001:468::/32", "range": "2001:468:101::/96" } } }"#;

pub fn cfg(json: &str) -> GlobalConfig {
    parse_global_config(json).unwrap_or_else(|e| panic!("fixture config: {e}"))
}

pub fn objs(services: Vec<Service>, nodes: Vec<Node>, slices: Vec<EndpointSlice>) -> Objects {
    Objects {
        services,
        slices,
        nodes,
        configmaps: vec![],
        problems: vec![],
        held_services: vec![],
        ..Default::default()
    }
}

pub fn run(c: &GlobalConfig, o: &Objects, prev: Option<&State>) -> State {
    plan(c, &PlanOptions::default(), o, prev)
}

pub fn ips(s: &State, key: &str) -> Vec<String> {
    s.services
        .get(&key.parse().unwrap())
        .map(|v| v.ips.iter().map(|i| i.to_string()).collect())
        .unwrap_or_default()
}

pub fn problems_of(s: &State, key: &str) -> Vec<(String, String)> {
    let obj = format!("Service {key}");
    s.problems
        .iter()
        .filter(|p| p.object.to_string() == obj)
        .map(|p| (p.reason.to_string(), p.message.clone()))
        .collect()
}

/// An Ingress of class `k8slb` (`spec.ingressClassName`), with no rules yet.
pub struct Ing(pub Value);

pub fn ing(ns: &str, name: &str) -> Ing {
    Ing(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": { "name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"), "annotations": {} },
        "spec": { "ingressClassName": "k8slb", "rules": [] }
    }))
}

impl Ing {
    /// A rule: `host` (empty: any), path Prefix `path` to Service `svc` port `port`.
    pub fn rule(mut self, host: &str, path: &str, svc: &str, port: i32) -> Self {
        let mut r = json!({ "http": { "paths": [ { "path": path, "pathType": "Prefix",
            "backend": { "service": { "name": svc, "port": { "number": port } } } } ] } });
        if !host.is_empty() {
            r["host"] = json!(host);
        }
        self.0["spec"]["rules"].as_array_mut().unwrap().push(r);
        self
    }
    pub fn ann(mut self, k: &str, v: &str) -> Self {
        self.0["metadata"]["annotations"][k] = json!(v);
        self
    }
    pub fn pool(self, p: &str) -> Self {
        self.ann("loadbalancer/pool", p)
    }
    pub fn class(mut self, c: &str) -> Self {
        self.0["spec"]["ingressClassName"] = json!(c);
        self
    }
    pub fn tls(mut self, secret: &str, hosts: &[&str]) -> Self {
        let t = json!({ "secretName": secret, "hosts": hosts });
        match self.0["spec"]["tls"].as_array_mut() {
            Some(a) => a.push(t),
            None => self.0["spec"]["tls"] = json!([t]),
        }
        self
    }
    pub fn created(mut self, sec: u32) -> Self {
        self.0["metadata"]["creationTimestamp"] = json!(format!(
            "2026-01-01T00:{:02}:{:02}Z",
            sec / 60 % 60,
            sec % 60
        ));
        self
    }
    pub fn status_ip(mut self, ip: &str) -> Self {
        self.0["status"] = json!({ "loadBalancer": { "ingress": [ { "ip": ip } ] } });
        self
    }
    pub fn build(self) -> k8s_openapi::api::networking::v1::Ingress {
        serde_json::from_value(self.0).expect("fixture ingress decodes")
    }
}

/// Our IngressClass `k8slb`.
pub fn ingress_class() -> k8s_openapi::api::networking::v1::IngressClass {
    serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": { "name": "k8slb" },
        "spec": { "controller": "k8slb.io/ingress-controller" }
    }))
    .unwrap()
}

/// A backend Service (ClusterIP) for Ingress rules.
pub fn backend_svc(ns: &str, name: &str, port: i32) -> Service {
    svc(ns, name).type_("ClusterIP").port(port).build()
}

/// The planned Ingress `key`'s addresses.
pub fn ingress_ips(s: &State, key: &str) -> Vec<String> {
    s.ingresses
        .get(&key.parse().unwrap())
        .map(|v| v.ips.iter().map(|i| i.to_string()).collect())
        .unwrap_or_default()
}

/// The problems of Ingress `key`: (reason, message).
pub fn ingress_problems(s: &State, key: &str) -> Vec<(String, String)> {
    let obj = format!("Ingress {key}");
    s.problems
        .iter()
        .filter(|p| p.object.to_string() == obj)
        .map(|p| (p.reason.to_string(), p.message.clone()))
        .collect()
}

/// The Gateway API translation of `o` with every Gateway on the one address `vip` (and
/// the Secrets `secrets` known), as the plan would call it after allocation.
pub fn translate_on(
    o: &Objects,
    secrets: &[k8slb_common::ingress::SecretMeta],
    vip: &str,
) -> k8slb_common::gateway::GatewayOutput {
    translate_tuned(o, secrets, vip, |_| {})
}

/// [`translate_on`] with the input changed by `tune` first (what the provider serves,
/// a limit).
pub fn translate_tuned(
    o: &Objects,
    secrets: &[k8slb_common::ingress::SecretMeta],
    vip: &str,
    tune: impl FnOnce(&mut k8slb_common::gateway::GatewayInput<'_>),
) -> k8slb_common::gateway::GatewayOutput {
    let addresses: std::collections::BTreeMap<_, _> = o
        .gateways
        .iter()
        .map(|g| {
            (
                k8slb_common::names::ObjectKey::new(
                    g.metadata.namespace.as_deref().unwrap(),
                    g.metadata.name.as_deref().unwrap(),
                )
                .unwrap(),
                vec![vip.parse::<std::net::IpAddr>().unwrap()],
            )
        })
        .collect();
    let unavailable = std::collections::BTreeMap::new();
    let mut input = o.gateway_input(secrets, &addresses, &unavailable);
    tune(&mut input);
    k8slb_common::gateway::translate(&input)
}
