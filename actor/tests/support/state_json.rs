//! The published state the netns tests hand to the actor, built in one place: one pool
//! `default`, one VRRP instance (`k8slb_default_<vrid>`) whose first node owns its VIPs
//! (priorities 150, 100, ...), and plain TCP Services (one endpoint each) on those VIPs.
//! Everything else is the defaults the watcher would publish: 100 ms adverts, no unicast,
//! no preempt, HAProxy timeouts of 1 s / 5 s.
//!
//! ```ignore
//! let json = StateJson::pool("198.18.0.0/24", "198.18.0.100", 60)
//!     .node("node1", "198.18.0.1")
//!     .node("node2", "198.18.0.2")
//!     .service("default/web", VIP, &[8080], ("198.18.0.1", 9001))
//!     .json();
//! ```

use k8slb_common::state::State;
use serde_json::{json, Map, Value};

/// A state document under construction; see the module documentation.
#[derive(Debug, Clone)]
pub struct StateJson {
    network: String,
    first: String,
    vrid: u8,
    nodes: Vec<(String, String)>,
    services: Vec<Svc>,
}

#[derive(Debug, Clone)]
struct Svc {
    key: String,
    vip: String,
    ports: Vec<u16>,
    endpoint: (String, u16),
}

impl StateJson {
    /// Pool `default` on `network` (a /24) whose allocation starts at `first`, and the
    /// VRRP instance `vrid`.
    pub fn pool(network: &str, first: &str, vrid: u8) -> Self {
        StateJson {
            network: network.into(),
            first: first.into(),
            vrid,
            nodes: Vec::new(),
            services: Vec::new(),
        }
    }

    /// An LB node and its address; the first one added owns every VIP.
    pub fn node(mut self, name: &str, address: &str) -> Self {
        self.nodes.push((name.into(), address.into()));
        self
    }

    /// Service `key` (`<ns>/<name>`) on `vip`, a TCP port for each of `ports`, all with
    /// the one `endpoint` (address, port).
    pub fn service(mut self, key: &str, vip: &str, ports: &[u16], endpoint: (&str, u16)) -> Self {
        self.services.push(Svc {
            key: key.into(),
            vip: vip.into(),
            ports: ports.to_vec(),
            endpoint: (endpoint.0.into(), endpoint.1),
        });
        self
    }

    /// The document as a `Value`.
    pub fn value(&self) -> Value {
        let owner = self.nodes.first().map(|n| n.0.as_str()).unwrap_or_default();
        let mut vips: Vec<&str> = Vec::new();
        let mut vip_states = Map::new();
        let mut services = Map::new();
        for s in &self.services {
            if !vips.contains(&s.vip.as_str()) {
                vips.push(&s.vip);
            }
            let owners = vip_states.entry(s.vip.clone()).or_insert_with(
                || json!({ "pool": "default", "vrid": self.vrid, "owner": owner, "services": [] }),
            );
            owners["services"]
                .as_array_mut()
                .expect("services is a list")
                .push(json!(s.key));
            let ports: Vec<Value> = s
                .ports
                .iter()
                .map(|p| {
                    json!({
                        "protocol": "TCP", "port": p, "mode": "tcp", "tls": false,
                        "redirect": false, "backendTls": false, "check": false,
                        "stickiness": "none", "stickinessTimeoutS": 10800, "sourceRanges": [],
                        "endpoints": [ { "ip": s.endpoint.0, "port": s.endpoint.1 } ]
                    })
                })
                .collect();
            services.insert(
                s.key.clone(),
                json!({ "ips": [s.vip], "pool": "default", "ipMode": "Proxy", "ports": ports }),
            );
        }
        let nodes: Map<String, Value> = self
            .nodes
            .iter()
            .map(|(n, a)| (n.clone(), json!({ "addresses": [a] })))
            .collect();
        let members: Vec<Value> = self
            .nodes
            .iter()
            .zip((0..).map(|i| 150 - 50 * i))
            .map(|((n, _), priority)| json!({ "node": n, "priority": priority }))
            .collect();
        json!({
            "version": 1,
            "config": {
                "pools": {
                    "default": { "network": self.network, "prefixLen": 24, "family": "v4",
                        "first": self.first }
                },
                "keepalived": { "advertIntMs": 100, "unicast": false, "preempt": false,
                    "emailServerTimeoutS": 30, "garpRepeat": 1, "garpMasterDelayS": 1 },
                "haproxy": { "global": [],
                    "defaults": ["timeout connect 1s", "timeout client 5s", "timeout server 5s"],
                    "tcpfront": [], "httpfront": [], "tcpback": [], "httpback": [] },
                "nginx": { "global": [], "http": [], "proxy": [], "upstream": [], "stream": [] },
                "certPath": "/etc/certs"
            },
            "nodes": nodes,
            "instances": [ {
                "vrid": self.vrid, "name": format!("k8slb_default_{}", self.vrid),
                "pool": "default", "family": "v4", "members": members, "vips": vips
            } ],
            "vips": vip_states,
            "services": services,
            "problems": []
        })
    }

    /// The document as the watcher writes it (pretty JSON).
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(&self.value()).expect("a JSON value serialises")
    }

    /// The document parsed as the actor parses it.
    pub fn state(&self) -> State {
        State::from_json(&self.json()).expect("the test state parses")
    }
}
