//! The Kubernetes objects the lab feeds to the watcher's files source, as JSON values
//! (JSON is YAML, so they are written as `.yaml` files), and chainable builders for them.

use serde_json::{json, Value};
use std::net::IpAddr;

/// The global ConfigMap `k8slb-system/global`, key `config` holding k8slb's JSON.
pub fn global_config(config: &Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "global", "namespace": "k8slb-system"},
        "data": {"config": serde_json::to_string_pretty(config).expect("json")},
    })
}

/// A Node; `lb` labels it `type=loadBalancer`. Ready, with InternalIP addresses.
pub fn node(name: &str, addrs: &[IpAddr], lb: bool) -> Value {
    let mut labels = json!({"kubernetes.io/hostname": name});
    if lb {
        labels["type"] = json!("loadBalancer");
    }
    let addresses: Vec<Value> = addrs
        .iter()
        .map(|a| json!({"type": "InternalIP", "address": a.to_string()}))
        .chain([json!({"type": "Hostname", "address": name})])
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "uid": format!("uid-node-{name}")},
        "status": {
            "addresses": addresses,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

/// A Service port: (name, port, targetPort, protocol).
#[derive(Debug, Clone)]
pub struct Port {
    pub name: String,
    pub port: u16,
    pub target: u16,
    pub protocol: String,
}

pub fn tcp(name: &str, port: u16, target: u16) -> Port {
    Port {
        name: name.into(),
        port,
        target,
        protocol: "TCP".into(),
    }
}

pub fn udp(name: &str, port: u16, target: u16) -> Port {
    Port {
        name: name.into(),
        port,
        target,
        protocol: "UDP".into(),
    }
}

/// A `type: LoadBalancer` Service builder.
#[derive(Debug, Clone)]
pub struct Svc {
    pub namespace: String,
    pub name: String,
    pub ports: Vec<Port>,
    pub annotations: Vec<(String, String)>,
    pub lb_ip: Option<String>,
    pub selector_app: String,
}

pub fn svc(namespace: &str, name: &str) -> Svc {
    Svc {
        namespace: namespace.into(),
        name: name.into(),
        ports: Vec::new(),
        annotations: Vec::new(),
        lb_ip: None,
        selector_app: name.into(),
    }
}

impl Svc {
    pub fn port(mut self, p: Port) -> Self {
        self.ports.push(p);
        self
    }
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.annotations.push((k.into(), v.into()));
        self
    }
    pub fn lb_ip(mut self, ip: &str) -> Self {
        self.lb_ip = Some(ip.into());
        self
    }
    pub fn app(mut self, app: &str) -> Self {
        self.selector_app = app.into();
        self
    }
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn to_value(&self) -> Value {
        let ann: serde_json::Map<String, Value> = self
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let ports: Vec<Value> = self
            .ports
            .iter()
            .map(|p| json!({"name": p.name, "port": p.port, "protocol": p.protocol, "targetPort": p.target}))
            .collect();
        let mut spec = json!({
            "type": "LoadBalancer",
            "ports": ports,
            "selector": {"app": self.selector_app},
        });
        if let Some(ip) = &self.lb_ip {
            spec["loadBalancerIP"] = json!(ip);
        }
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": format!("uid-svc-{}-{}", self.namespace, self.name),
                "annotations": ann,
                "creationTimestamp": "2024-01-01T00:00:00Z",
            },
            "spec": spec,
        })
    }

    /// The EndpointSlice of this Service with `addrs` as ready endpoints, each port of the
    /// Service mapped to its target port.
    pub fn endpoints(&self, slice: &str, addrs: &[IpAddr]) -> Value {
        let eps: Vec<(IpAddr, bool)> = addrs.iter().map(|a| (*a, true)).collect();
        endpoint_slice(self, slice, &eps)
    }
}

/// An EndpointSlice for `svc` named `slice`, with (address, ready) endpoints.
pub fn endpoint_slice(svc: &Svc, slice: &str, eps: &[(IpAddr, bool)]) -> Value {
    let v6 = eps.first().is_some_and(|(a, _)| a.is_ipv6());
    let endpoints: Vec<Value> = eps
        .iter()
        .map(|(a, ready)| {
            json!({
                "addresses": [a.to_string()],
                "conditions": {"ready": ready, "serving": ready, "terminating": false},
            })
        })
        .collect();
    let ports: Vec<Value> = svc
        .ports
        .iter()
        .map(|p| json!({"name": p.name, "port": p.target, "protocol": p.protocol}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": slice,
            "namespace": svc.namespace,
            "labels": {"kubernetes.io/service-name": svc.name},
        },
        "addressType": if v6 { "IPv6" } else { "IPv4" },
        "endpoints": endpoints,
        "ports": ports,
    })
}
