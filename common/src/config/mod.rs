//! The global config: ConfigMap `k8slb-system/global`, key `config`, k8slb's JSON format.
//!
//! ```json
//! { "pools": { "default": { "network": "192.168.10.0/24",
//!                           "range": "192.168.10.200-192.168.10.254",
//!                           "interface": "eth0" } },
//!   "keepalived": { "email": "", "emailFrom": "", "emailServer": "", "emailServerTimeout": "30",
//!                   "advertInt": 0.1, "unicast": false, "preempt": false },
//!   "haproxy": { "global": [], "defaults": [], "tcpfront": [], "httpfront": [], "tcpback": [], "httpback": [] },
//!   "nginx": { "global": [], "http": [], "proxy": [], "upstream": [], "stream": [] },
//!   "loadBalancerClass": "k8slb.io/loadbalancer", "claimUnclassed": true,
//!   "reservedPorts": [22, "2379-2380", 6443, 9253, 9254, 10250, 10256],
//!   "limits": { "conditionalRulesPerHost": 256 },
//!   "bgp": { "asn": 64512, "peers": [{ "address": "198.18.3.1", "asn": 64513, "bfd": true }] } }
//! ```
//!
//! A config is checked as a whole and every problem is listed; one bad key rejects the
//! whole document (the caller keeps the last good config in force). Unknown keys are
//! problems too, with the closest known key suggested, so a typo never silently turns a
//! setting off.

mod check;
mod defaults;
#[cfg(test)]
mod tests;

use crate::ipam::PoolExpr;
use crate::names::{ConfigLine, Email, IfName, PoolName, SmtpServer};
use crate::state::{
    ActorConfig, CertPath, Family, HaproxySections, KeepalivedSettings, NginxSections, PoolInfo,
};
use check::*;
pub use defaults::*;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// Our `spec.loadBalancerClass` unless the config says otherwise.
pub const DEFAULT_CLASS: &str = "k8slb.io/loadbalancer";
/// Default VRRP advertisement interval: 100 ms, so a dead master is detected in
/// 3 x 100 ms + skew (about 0.3-0.4 s). The cost is 10 small multicast (or unicast)
/// packets per second per VRRP instance from its master; keepalived's default (1 s) gives
/// about 3.5 s failover.
pub const DEFAULT_ADVERT_INT_MS: u32 = 100;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub name: PoolName,
    pub network: PoolExpr,
    pub range: PoolExpr,
    pub interface: Option<IfName>,
    /// `maxScale`: the most addresses one object may ask for with `loadbalancer/scale`
    /// (default and at most [`crate::scale::MAX`]).
    pub max_scale: u8,
    /// `addressesPerNamespace`: the most addresses of this pool the Services and
    /// Gateways of one namespace may hold together (default: no limit).
    pub per_namespace: Option<u32>,
    /// `mode`: `"vrrp"` (default) or `"bgp"` (every LB node announces the addresses).
    pub mode: crate::bgp::PoolMode,
}

impl Pool {
    pub fn family(&self) -> Family {
        if self.network.range().family_is_v4() {
            Family::V4
        } else {
            Family::V6
        }
    }
}

/// A checked global config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalConfig {
    pub pools: BTreeMap<PoolName, Pool>,
    pub keepalived: KeepalivedSettings,
    pub haproxy: HaproxySections,
    pub nginx: NginxSections,
    /// Our load-balancer class.
    pub class: String,
    /// Also claim LoadBalancer Services that name no class.
    pub claim_unclassed: bool,
    /// The ports the LB nodes keep for themselves: no Service, Ingress or Gateway
    /// listener is served on them by a proxy (it could not bind, and would exit).
    pub reserved_ports: ReservedPorts,
    /// Who may serve which host (see [`crate::tenancy`]).
    pub tenancy: Tenancy,
    /// What one tenant may ask of the shared proxies (`limits`).
    pub limits: Limits,
    /// `bgp`: the routers the LB nodes announce BGP-mode pools to.
    pub bgp: Option<crate::bgp::BgpSettings>,
    /// Things that are accepted but worth telling (a CIDR that was not aligned, ...).
    pub warnings: Vec<String>,
}

/// Host ownership between namespaces (`tenancy` in the config; see [`crate::tenancy`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tenancy {
    /// `hostOwnership: "Shared"`: any namespace may serve any host (no ownership).
    /// Default `"Strict"`: the namespace of the oldest claim owns a host.
    pub shared_hosts: bool,
    /// `namespaceGroups`: namespaces that share their hosts (and, with a sharing key,
    /// their addresses), group by group.
    pub namespace_groups: Vec<std::collections::BTreeSet<String>>,
    /// `addressSharing`: who may join an address another tenant holds.
    pub address_sharing: AddressSharing,
}

/// Who may ask for an address that another tenant holds (always on other ports, never
/// the pool's Ingress address, never one that was allocated dynamically).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AddressSharing {
    /// `"SameNamespace"` (default): every tenant on it carries the same
    /// `loadbalancer/allow-shared-ip` key and is in the same namespace (or group).
    #[default]
    SameNamespace,
    /// `"AnyNamespace"`: the same key, in any namespace.
    AnyNamespace,
    /// `"Open"`: k8slb's rule, anyone asking for it by name (no key).
    Open,
}

/// Ports (TCP and UDP alike) that the LB nodes use themselves, as sorted, disjoint
/// inclusive ranges. A proxy that was told to listen on one of them on a VIP could not
/// bind (sshd, kubelet, etcd, the API server and k8slb's own admin ports listen on every
/// address of the node) and would refuse the node's whole config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedPorts(Vec<(u16, u16)>);

impl ReservedPorts {
    /// k8slb's default: sshd (22), etcd (2379-2380), kube-apiserver (6443), the
    /// watcher's and the actor's admin ports (9253, 9254), kubelet (10250) and
    /// kube-proxy's health port (10256).
    pub fn default_set() -> ReservedPorts {
        ReservedPorts::from_ranges(vec![
            (22, 22),
            (2379, 2380),
            (6443, 6443),
            (9253, 9254),
            (10250, 10250),
            (10256, 10256),
        ])
    }

    /// No reserved port.
    pub fn none() -> ReservedPorts {
        ReservedPorts(vec![])
    }

    /// From inclusive ranges in any order, merged.
    pub fn from_ranges(mut ranges: Vec<(u16, u16)>) -> ReservedPorts {
        ranges.sort_unstable();
        let mut out: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            match out.last_mut() {
                Some(last) if u32::from(a) <= u32::from(last.1) + 1 => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        ReservedPorts(out)
    }

    pub fn contains(&self, port: u16) -> bool {
        let i = self.0.partition_point(|&(_, b)| b < port);
        self.0.get(i).is_some_and(|&(a, _)| a <= port)
    }

    pub fn ranges(&self) -> &[(u16, u16)] {
        &self.0
    }
}

impl Default for ReservedPorts {
    fn default() -> Self {
        ReservedPorts::default_set()
    }
}

impl fmt::Display for ReservedPorts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (a, b)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if a == b {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}-{b}")?;
            }
        }
        Ok(())
    }
}

/// Default of `limits.conditionalRulesPerHost`.
pub const DEFAULT_CONDITIONAL_RULES_PER_HOST: usize = 256;

/// Default of `limits.portsPerService`.
pub const DEFAULT_PORTS_PER_SERVICE: usize = 256;

/// Default of `limits.retryBackendsPerNamespace`.
pub const DEFAULT_RETRY_BACKENDS_PER_NAMESPACE: usize = 64;

/// Default of `limits.listenerSetListenersPerGateway`.
pub const DEFAULT_LISTENER_SET_LISTENERS_PER_GATEWAY: usize = 256;

/// Default of `limits.mirrorsPerRule`.
pub const DEFAULT_MIRRORS_PER_RULE: usize = 4;

/// `limits`: bounds on what one tenant's objects may cost every other tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Rules that match on more than the path (method, headers, query parameters) on
    /// one host of one listener: they are tried in order for every request of that
    /// host. Rules beyond it are refused (the oldest routes keep theirs).
    pub conditional_rules_per_host: usize,
    /// Ports of one Service served on its addresses: each is a listening socket (an
    /// open file) of the proxy on every LB node that serves it, from a budget all
    /// tenants share. Ports beyond it (in the Service's order) are not served.
    pub ports_per_service: usize,
    /// HAProxy serves an HTTPRoute rule's `retry` on a copy of the rule's backend per
    /// retry policy (its servers are the backend's, tracked): the most such copies one
    /// namespace's routes may make. The route beyond it is refused (older routes keep
    /// theirs).
    pub retry_backends_per_namespace: usize,
    /// The listeners ListenerSets may add to one Gateway, all sets together (the API
    /// bounds a set to 64 listeners, not the number of sets): each is a hostname, and
    /// on a new port a listening socket, on every LB node. Listeners beyond it, in the
    /// specification's precedence (older sets first), are not accepted
    /// (`TooManyListeners`); the older keep serving.
    pub listener_set_listeners_per_gateway: usize,
    /// RequestMirror filters of one HTTPRoute rule: each copies every request the rule
    /// takes (HAProxy: about 4x a request's CPU per copy, measured by the
    /// `tenant_cost` bench), on the proxy every tenant shares. A rule with more is
    /// refused (its route is not accepted). 0 forbids mirroring.
    pub mirrors_per_rule: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            conditional_rules_per_host: DEFAULT_CONDITIONAL_RULES_PER_HOST,
            ports_per_service: DEFAULT_PORTS_PER_SERVICE,
            retry_backends_per_namespace: DEFAULT_RETRY_BACKENDS_PER_NAMESPACE,
            listener_set_listeners_per_gateway: DEFAULT_LISTENER_SET_LISTENERS_PER_GATEWAY,
            mirrors_per_rule: DEFAULT_MIRRORS_PER_RULE,
        }
    }
}

impl GlobalConfig {
    /// The part of the config that the actors need, with the watcher's cert path.
    pub fn actor_config(&self, cert_path: &CertPath) -> ActorConfig {
        ActorConfig {
            pools: self
                .pools
                .iter()
                .map(|(n, p)| {
                    (
                        n.clone(),
                        PoolInfo {
                            network: p.network.canonical(),
                            prefix_len: p.network.prefix_len(),
                            family: p.family(),
                            interface: p.interface.clone(),
                            first: p.network.range().start(),
                            mode: p.mode,
                        },
                    )
                })
                .collect(),
            keepalived: self.keepalived.clone(),
            haproxy: self.haproxy.clone(),
            nginx: self.nginx.clone(),
            cert_path: cert_path.clone(),
            bgp: self.bgp.clone(),
        }
    }
}

/// Every problem found in a config, each with the JSON path of the offending key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} problem(s): {}", self.0.len(), self.0.join("; "))
    }
}

impl std::error::Error for ConfigErrors {}

/// Parse and check a global config (the JSON text of the ConfigMap's `config` key).
pub fn parse_global_config(text: &str) -> Result<GlobalConfig, ConfigErrors> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ConfigErrors(vec![format!("config is not valid JSON: {e}")]))?;
    let mut c = Checker::default();
    for path in duplicate_keys(text) {
        c.err(
            &path,
            "duplicate key: the object gives it more than once (only one would be used)",
        );
    }
    let cfg = c.global(&value);
    if c.errors.is_empty() {
        let mut cfg = cfg;
        cfg.warnings = c.warnings;
        Ok(cfg)
    } else {
        Err(ConfigErrors(c.errors))
    }
}

/// Read a config file: raw JSON, or the `global` ConfigMap as YAML/JSON (key `config`).
pub fn parse_config_file(text: &str) -> Result<GlobalConfig, ConfigErrors> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        if let Ok(v) = serde_json::from_str::<Value>(text) {
            if v.get("kind").and_then(Value::as_str) == Some("ConfigMap") {
                return config_from_configmap_value(&v);
            }
            return parse_global_config(text);
        }
    }
    // Through serde_yaml's own Value first: it refuses a key given twice, which a
    // serde_json::Value would silently collapse to the last one.
    let v: Value = serde_yaml::from_str::<serde_yaml::Value>(text)
        .map_err(|e| e.to_string())
        .and_then(|y| serde_json::to_value(y).map_err(|e| e.to_string()))
        .map_err(|e| ConfigErrors(vec![format!("config file is neither JSON nor YAML: {e}")]))?;
    if v.get("kind").and_then(Value::as_str) == Some("ConfigMap") {
        config_from_configmap_value(&v)
    } else {
        parse_global_config(&serde_json::to_string(&v).expect("json"))
    }
}

fn config_from_configmap_value(v: &Value) -> Result<GlobalConfig, ConfigErrors> {
    match v.pointer("/data/config").and_then(Value::as_str) {
        Some(s) => parse_global_config(s),
        None => Err(ConfigErrors(vec![
            "ConfigMap has no data.config key holding the JSON config".into(),
        ])),
    }
}
