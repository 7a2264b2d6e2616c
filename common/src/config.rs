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
//!   "limits": { "conditionalRulesPerHost": 256 } }
//! ```
//!
//! A config is checked as a whole and every problem is listed; one bad key rejects the
//! whole document (the caller keeps the last good config in force). Unknown keys are
//! problems too, with the closest known key suggested, so a typo never silently turns a
//! setting off.

use crate::ipam::PoolExpr;
use crate::names::{ConfigLine, Email, IfName, PoolName, SmtpServer};
use crate::state::{
    ActorConfig, CertPath, Family, HaproxySections, KeepalivedSettings, NginxSections, PoolInfo,
};
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

/// `limits`: bounds on what one tenant's objects may cost every other tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Rules that match on more than the path (method, headers, query parameters) on
    /// one host of one listener: they are tried in order for every request of that
    /// host. Rules beyond it are refused (the oldest routes keep theirs).
    pub conditional_rules_per_host: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            conditional_rules_per_host: DEFAULT_CONDITIONAL_RULES_PER_HOST,
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
                        },
                    )
                })
                .collect(),
            keepalived: self.keepalived.clone(),
            haproxy: self.haproxy.clone(),
            nginx: self.nginx.clone(),
            cert_path: cert_path.clone(),
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

const TOP_KEYS: &[&str] = &[
    "pools",
    "keepalived",
    "haproxy",
    "nginx",
    "loadBalancerClass",
    "claimUnclassed",
    "reservedPorts",
    "tenancy",
    "limits",
];
const LIMITS_KEYS: &[&str] = &["conditionalRulesPerHost"];
const TENANCY_KEYS: &[&str] = &["hostOwnership", "namespaceGroups", "addressSharing"];
const POOL_KEYS: &[&str] = &[
    "network",
    "range",
    "interface",
    "maxScale",
    "addressesPerNamespace",
];
const KEEPALIVED_KEYS: &[&str] = &[
    "email",
    "emailFrom",
    "emailServer",
    "emailServerTimeout",
    "advertInt",
    "unicast",
    "preempt",
    "garpRepeat",
    "garpMasterDelay",
];
const HAPROXY_KEYS: &[&str] = &[
    "global",
    "defaults",
    "tcpfront",
    "httpfront",
    "tcpback",
    "httpback",
];
const NGINX_KEYS: &[&str] = &["global", "http", "proxy", "upstream", "stream"];

/// HAProxy sections used when the config has no `haproxy` key. Unlike k8slb's sample
/// (`timeout connect 30ms`, `daemon`, `chroot`), these suit an actor that supervises
/// HAProxy in the foreground.
pub fn default_haproxy() -> HaproxySections {
    let lines = |v: &[&str]| v.iter().map(|s| s.parse().expect("valid")).collect();
    HaproxySections {
        global: lines(&[
            "maxconn 20000",
            "ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets",
            "ssl-default-server-options ssl-min-ver TLSv1.2 no-tls-tickets",
            "tune.ssl.default-dh-param 2048",
        ]),
        defaults: lines(&[
            "log global",
            "retries 3",
            "option redispatch",
            "balance leastconn",
            "timeout connect 5s",
            "timeout check 1s",
            "timeout client 30s",
            "timeout server 30s",
            "timeout tunnel 1h",
        ]),
        tcpfront: vec![],
        // X-Forwarded-For/-Proto/-Port are written by the template in every http
        // frontend (k8slb's default httpfront lines would only repeat them).
        httpfront: vec![],
        tcpback: vec![],
        httpback: vec![],
    }
}

/// nginx sections used when the config has no `nginx` key.
pub fn default_nginx() -> NginxSections {
    let lines = |v: &[&str]| v.iter().map(|s| s.parse().expect("valid")).collect();
    NginxSections {
        global: lines(&["worker_processes auto;"]),
        http: lines(&[
            "sendfile on;",
            "keepalive_timeout 65;",
            "ssl_protocols TLSv1.2 TLSv1.3;",
        ]),
        proxy: lines(&[
            // The client's Host as sent, port included (nginx's $host drops it); the
            // actor defines $k8slb_host in every nginx.conf (render_http::nx_http_base).
            "proxy_set_header Host $k8slb_host;",
            "proxy_set_header X-Real-IP $remote_addr;",
            "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
            "proxy_set_header X-Forwarded-Proto $scheme;",
            "proxy_http_version 1.1;",
            "proxy_connect_timeout 5s;",
            "proxy_next_upstream error timeout;",
        ]),
        upstream: vec![],
        stream: vec![],
    }
}

pub fn default_keepalived() -> KeepalivedSettings {
    KeepalivedSettings {
        advert_int_ms: DEFAULT_ADVERT_INT_MS,
        unicast: false,
        preempt: false,
        email: None,
        email_from: None,
        email_server: None,
        email_server_timeout_s: 30,
        garp_repeat: 5,
        garp_master_delay_s: 1,
    }
}

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

#[derive(Default)]
struct Checker {
    errors: Vec<String>,
    warnings: Vec<String>,
}

impl Checker {
    fn err(&mut self, path: &str, msg: impl fmt::Display) {
        self.errors.push(format!("{path}: {msg}"));
    }

    fn object<'a>(&mut self, path: &str, v: &'a Value) -> Option<&'a Map<String, Value>> {
        match v {
            Value::Object(m) => Some(m),
            _ => {
                self.err(path, format!("expected an object, found {}", kind(v)));
                None
            }
        }
    }

    fn unknown_keys(&mut self, path: &str, m: &Map<String, Value>, known: &[&str]) {
        for k in m.keys() {
            if !known.contains(&k.as_str()) {
                let hint = closest(k, known)
                    .map(|s| format!(" (did you mean {s:?}?)"))
                    .unwrap_or_else(|| format!(" (known keys: {})", known.join(", ")));
                self.err(&join(path, k), format!("unknown key{hint}"));
            }
        }
    }

    fn global(&mut self, v: &Value) -> GlobalConfig {
        let mut cfg = GlobalConfig {
            pools: BTreeMap::new(),
            keepalived: default_keepalived(),
            haproxy: default_haproxy(),
            nginx: default_nginx(),
            class: DEFAULT_CLASS.to_string(),
            claim_unclassed: true,
            reserved_ports: ReservedPorts::default_set(),
            tenancy: Tenancy::default(),
            limits: Limits::default(),
            warnings: vec![],
        };
        let Some(top) = self.object("config", v) else {
            return cfg;
        };
        self.unknown_keys("", top, TOP_KEYS);
        match top.get("pools") {
            Some(p) => cfg.pools = self.pools(p),
            None => self.err("pools", "is required (an object of pool name -> pool)"),
        }
        if let Some(k) = top.get("keepalived") {
            cfg.keepalived = self.keepalived(k);
        }
        if let Some(h) = top.get("haproxy") {
            cfg.haproxy = self.haproxy(h);
        }
        if let Some(n) = top.get("nginx") {
            cfg.nginx = self.nginx(n);
        }
        if let Some(c) = top.get("loadBalancerClass") {
            match c.as_str() {
                Some(s) if valid_class(s) => cfg.class = s.to_string(),
                _ => self.err(
                    "loadBalancerClass",
                    "expected a label-style name such as \"k8slb.io/loadbalancer\"",
                ),
            }
        }
        if let Some(b) = top.get("claimUnclassed") {
            if let Some(b) = self.boolean("claimUnclassed", b) {
                cfg.claim_unclassed = b;
            }
        }
        if let Some(t) = top.get("tenancy") {
            cfg.tenancy = self.tenancy(t);
        }
        if let Some(r) = top.get("reservedPorts") {
            if let Some(r) = self.reserved_ports(r) {
                cfg.reserved_ports = r;
            }
        }
        if let Some(l) = top.get("limits") {
            cfg.limits = self.limits(l);
        }
        cfg
    }

    /// `tenancy`: `hostOwnership` (`"Strict"`, the default, or `"Shared"`) and
    /// `namespaceGroups` (an array of arrays of namespace names).
    fn tenancy(&mut self, v: &Value) -> Tenancy {
        let mut t = Tenancy::default();
        let Some(m) = self.object("tenancy", v) else {
            return t;
        };
        self.unknown_keys("tenancy", m, TENANCY_KEYS);
        match m.get("hostOwnership") {
            None => {}
            Some(Value::String(s)) if s.eq_ignore_ascii_case("strict") => {}
            Some(Value::String(s)) if s.eq_ignore_ascii_case("shared") => t.shared_hosts = true,
            Some(_) => self.err(
                "tenancy.hostOwnership",
                "expected \"Strict\" (the namespace of the oldest claim owns a host) or \"Shared\"",
            ),
        }
        match m
            .get("addressSharing")
            .map(|v| v.as_str().map(str::to_ascii_lowercase))
        {
            None => {}
            Some(Some(v)) if v == "samenamespace" => {}
            Some(Some(v)) if v == "anynamespace" => {
                t.address_sharing = AddressSharing::AnyNamespace
            }
            Some(Some(v)) if v == "open" => t.address_sharing = AddressSharing::Open,
            Some(_) => self.err(
                "tenancy.addressSharing",
                "expected \"SameNamespace\" (the default), \"AnyNamespace\" or \"Open\"",
            ),
        }
        if let Some(g) = m.get("namespaceGroups") {
            let groups = g.as_array().map(|groups| {
                groups
                    .iter()
                    .map(|g| {
                        g.as_array().and_then(|names| {
                            names
                                .iter()
                                .map(|n| {
                                    n.as_str()
                                        .filter(|n| n.parse::<crate::names::ObjectName>().is_ok())
                                        .map(str::to_string)
                                })
                                .collect::<Option<std::collections::BTreeSet<String>>>()
                        })
                    })
                    .collect::<Option<Vec<_>>>()
            });
            match groups.flatten() {
                Some(groups) => t.namespace_groups = groups,
                None => self.err(
                    "tenancy.namespaceGroups",
                    "expected an array of arrays of namespace names",
                ),
            }
        }
        t
    }

    /// `reservedPorts`: an array of ports (`22`, `"22"`) and inclusive ranges
    /// (`"2379-2380"`); it replaces the default list (`[]` reserves none).
    fn reserved_ports(&mut self, v: &Value) -> Option<ReservedPorts> {
        let Value::Array(items) = v else {
            self.err(
                "reservedPorts",
                format!(
                    "expected an array of ports and \"from-to\" ranges, found {}",
                    kind(v)
                ),
            );
            return None;
        };
        let port = |s: &str| s.trim().parse::<u16>().ok().filter(|p| *p != 0);
        let mut ranges = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let range = match item {
                Value::Number(n) => n
                    .as_u64()
                    .and_then(|n| u16::try_from(n).ok())
                    .filter(|p| *p != 0)
                    .map(|p| (p, p)),
                Value::String(s) => match s.split_once('-') {
                    Some((a, b)) => port(a).zip(port(b)).filter(|(a, b)| a <= b),
                    None => port(s).map(|p| (p, p)),
                },
                _ => None,
            };
            match range {
                Some(r) => ranges.push(r),
                None => {
                    ok = false;
                    self.err(
                        &format!("reservedPorts[{i}]"),
                        format!(
                            "expected a port (1-65535) or a range \"from-to\", found {}",
                            item.to_string().chars().take(40).collect::<String>()
                        ),
                    );
                }
            }
        }
        ok.then(|| ReservedPorts::from_ranges(ranges))
    }

    fn limits(&mut self, v: &Value) -> Limits {
        let mut out = Limits::default();
        let Some(m) = self.object("limits", v) else {
            return out;
        };
        self.unknown_keys("limits", m, LIMITS_KEYS);
        if let Some(n) = m.get("conditionalRulesPerHost") {
            let path = "limits.conditionalRulesPerHost";
            match self.number(path, n) {
                Some(n) if n.fract() == 0.0 && (1.0..=100_000.0).contains(&n) => {
                    out.conditional_rules_per_host = n as usize;
                }
                Some(_) => self.err(path, "expected a whole number from 1 to 100000"),
                None => {}
            }
        }
        out
    }

    fn pools(&mut self, v: &Value) -> BTreeMap<PoolName, Pool> {
        let mut out = BTreeMap::new();
        let Some(m) = self.object("pools", v) else {
            return out;
        };
        for (name, pv) in m {
            if let Some(pool) = self.pool(name, pv) {
                out.insert(pool.name.clone(), pool);
            }
        }
        self.check_overlaps(&out);
        out
    }

    /// One pool; None (and errors) if it is not valid.
    fn pool(&mut self, name: &str, pv: &Value) -> Option<Pool> {
        let path = join("pools", name);
        let pool_name: Option<PoolName> = match name.parse() {
            Ok(n) => Some(n),
            Err(e) => {
                self.err(&path, e);
                None
            }
        };
        let pm = self.object(&path, pv)?;
        self.unknown_keys(&path, pm, POOL_KEYS);
        let network = self.pool_expr(&path, pm, "network");
        let range = self.pool_expr(&path, pm, "range");
        let interface = self.pool_interface(&path, pm);
        let mut max_scale = crate::scale::MAX;
        if let Some(v) = pm.get("maxScale") {
            match self.number(&join(&path, "maxScale"), v) {
                Some(n)
                    if n.fract() == 0.0 && (1.0..=f64::from(crate::scale::MAX)).contains(&n) =>
                {
                    max_scale = n as u8
                }
                Some(_) => self.err(
                    &join(&path, "maxScale"),
                    format!("expected a whole number from 1 to {}", crate::scale::MAX),
                ),
                None => {}
            }
        }
        let mut per_namespace = None;
        if let Some(v) = pm.get("addressesPerNamespace") {
            match self.number(&join(&path, "addressesPerNamespace"), v) {
                Some(n) if n.fract() == 0.0 && n <= f64::from(u32::MAX) => {
                    per_namespace = Some(n as u32)
                }
                Some(_) => self.err(
                    &join(&path, "addressesPerNamespace"),
                    "expected a whole number (0 or more)",
                ),
                None => {}
            }
        }
        let (Some(pool_name), Some(network), Some(range)) = (pool_name, network, range) else {
            return None;
        };
        if network.range().family_is_v4() != range.range().family_is_v4() {
            self.err(
                &join(&path, "range"),
                format!(
                    "{} and network {} are of different address families",
                    range, network
                ),
            );
            return None;
        }
        if !network.range().contains_range(&range.range()) {
            self.err(
                &join(&path, "range"),
                format!("{range} is not inside the pool's network {network}"),
            );
            return None;
        }
        Some(Pool {
            name: pool_name,
            network,
            range,
            interface,
            max_scale,
            per_namespace,
        })
    }

    /// `pools.<name>.interface`: optional, blank is absent.
    fn pool_interface(&mut self, path: &str, pm: &Map<String, Value>) -> Option<IfName> {
        match pm.get("interface") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => match s.trim().parse::<IfName>() {
                Ok(i) => Some(i),
                Err(e) => {
                    self.err(&join(path, "interface"), e);
                    None
                }
            },
            Some(other) => {
                self.err(
                    &join(path, "interface"),
                    format!("expected a string, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// Every address belongs to at most one pool.
    fn check_overlaps(&mut self, out: &BTreeMap<PoolName, Pool>) {
        let pools: Vec<&Pool> = out.values().collect();
        for (i, a) in pools.iter().enumerate() {
            for b in &pools[i + 1..] {
                if a.network.range().overlaps(&b.network.range()) {
                    self.err(
                        &join("pools", b.name.as_str()),
                        format!(
                            "network {} overlaps pool {:?} (network {}); pools must not share addresses",
                            b.network, a.name.as_str(), a.network
                        ),
                    );
                }
            }
        }
    }

    fn pool_expr(&mut self, path: &str, m: &Map<String, Value>, key: &str) -> Option<PoolExpr> {
        let p = join(path, key);
        match m.get(key) {
            None | Some(Value::Null) => {
                self.err(&p, "is required");
                None
            }
            Some(Value::String(s)) => match PoolExpr::parse(s) {
                Ok(e) => {
                    if e.was_normalised() {
                        self.warnings.push(format!(
                            "{p}: {:?} is not aligned to its prefix; using {}",
                            s.trim(),
                            e
                        ));
                    }
                    Some(e)
                }
                Err(e) => {
                    self.err(&p, e);
                    None
                }
            },
            Some(other) => {
                self.err(&p, format!("expected a string, found {}", kind(other)));
                None
            }
        }
    }

    fn boolean(&mut self, path: &str, v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
            other => {
                self.err(
                    path,
                    format!("expected true or false, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// A non-negative number given as a JSON number or a numeric string (k8slb wrote
    /// `"emailServerTimeout": "30"`).
    fn number(&mut self, path: &str, v: &Value) -> Option<f64> {
        let n = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n.is_finite() && n >= 0.0 => Some(n),
            _ => {
                self.err(path, format!("expected a non-negative number, found {v}"));
                None
            }
        }
    }

    fn keepalived(&mut self, v: &Value) -> KeepalivedSettings {
        let mut k = default_keepalived();
        let Some(m) = self.object("keepalived", v) else {
            return k;
        };
        self.unknown_keys("keepalived", m, KEEPALIVED_KEYS);
        self.keepalived_email(m, &mut k);
        self.keepalived_vrrp(m, &mut k);
        if k.email.is_some() && (k.email_from.is_none() || k.email_server.is_none()) {
            self.err(
                "keepalived.email",
                "needs emailFrom and emailServer as well",
            );
        }
        k
    }

    /// `keepalived.<key>` as trimmed text; blank is absent.
    fn keepalived_text(&mut self, m: &Map<String, Value>, key: &str) -> Option<String> {
        match m.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => Some(s.trim().to_string()),
            Some(o) => {
                self.err(
                    &join("keepalived", key),
                    format!("expected a string, found {}", kind(o)),
                );
                None
            }
        }
    }

    /// The notification e-mail settings.
    fn keepalived_email(&mut self, m: &Map<String, Value>, k: &mut KeepalivedSettings) {
        if let Some(s) = self.keepalived_text(m, "email") {
            match s.parse::<Email>() {
                Ok(e) => k.email = Some(e),
                Err(e) => self.err("keepalived.email", e),
            }
        }
        if let Some(s) = self.keepalived_text(m, "emailFrom") {
            match s.parse::<Email>() {
                Ok(e) => k.email_from = Some(e),
                Err(e) => self.err("keepalived.emailFrom", e),
            }
        }
        if let Some(s) = self.keepalived_text(m, "emailServer") {
            match s.parse::<SmtpServer>() {
                Ok(e) => k.email_server = Some(e),
                Err(e) => self.err("keepalived.emailServer", e),
            }
        }
        if let Some(v) = m.get("emailServerTimeout") {
            if !matches!(v, Value::String(s) if s.trim().is_empty()) {
                if let Some(n) = self.number("keepalived.emailServerTimeout", v) {
                    if n.fract() == 0.0 && (1.0..=3600.0).contains(&n) {
                        k.email_server_timeout_s = n as u32;
                    } else {
                        self.err(
                            "keepalived.emailServerTimeout",
                            "expected whole seconds between 1 and 3600",
                        );
                    }
                }
            }
        }
    }

    /// Advertisement interval, unicast, preemption, gratuitous ARP.
    fn keepalived_vrrp(&mut self, m: &Map<String, Value>, k: &mut KeepalivedSettings) {
        if let Some(v) = m.get("advertInt") {
            if let Some(n) = self.number("keepalived.advertInt", v) {
                // VRRPv3: centiseconds, 0.01 s .. 40.95 s.
                let ms = (n * 1000.0).round();
                if !(10.0..=40950.0).contains(&ms) || !(ms as u32).is_multiple_of(10) {
                    self.err(
                        "keepalived.advertInt",
                        "expected seconds between 0.01 and 40.95 in steps of 0.01 (VRRPv3)",
                    );
                } else {
                    k.advert_int_ms = ms as u32;
                }
            }
        }
        if let Some(v) = m.get("unicast") {
            if let Some(b) = self.boolean("keepalived.unicast", v) {
                k.unicast = b;
            }
        }
        if let Some(v) = m.get("preempt") {
            if let Some(b) = self.boolean("keepalived.preempt", v) {
                k.preempt = b;
            }
        }
        if let Some(v) = m.get("garpRepeat") {
            if let Some(n) = self.number("keepalived.garpRepeat", v) {
                if n.fract() == 0.0 && (1.0..=100.0).contains(&n) {
                    k.garp_repeat = n as u32;
                } else {
                    self.err("keepalived.garpRepeat", "expected a whole number 1..100");
                }
            }
        }
        if let Some(v) = m.get("garpMasterDelay") {
            if let Some(n) = self.number("keepalived.garpMasterDelay", v) {
                if n.fract() == 0.0 && n <= 255.0 {
                    k.garp_master_delay_s = n as u32;
                } else {
                    self.err(
                        "keepalived.garpMasterDelay",
                        "expected whole seconds 0..255",
                    );
                }
            }
        }
    }

    fn lines(&mut self, path: &str, m: &Map<String, Value>, key: &str) -> Option<Vec<ConfigLine>> {
        let v = m.get(key)?;
        let p = join(path, key);
        let Value::Array(items) = v else {
            self.err(
                &p,
                format!("expected an array of strings, found {}", kind(v)),
            );
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let ip = format!("{p}[{i}]");
            match item {
                Value::String(s) => match s.parse::<ConfigLine>() {
                    Ok(l) => out.push(l),
                    Err(e) => self.err(&ip, e),
                },
                other => self.err(&ip, format!("expected a string, found {}", kind(other))),
            }
        }
        Some(out)
    }

    fn haproxy(&mut self, v: &Value) -> HaproxySections {
        let mut h = default_haproxy();
        let Some(m) = self.object("haproxy", v) else {
            return h;
        };
        self.unknown_keys("haproxy", m, HAPROXY_KEYS);
        macro_rules! take {
            ($($f:ident),*) => {$(
                if let Some(l) = self.lines("haproxy", m, stringify!($f)) { h.$f = l; }
            )*};
        }
        take!(global, defaults, tcpfront, httpfront, tcpback, httpback);
        h
    }

    fn nginx(&mut self, v: &Value) -> NginxSections {
        let mut n = default_nginx();
        let Some(m) = self.object("nginx", v) else {
            return n;
        };
        self.unknown_keys("nginx", m, NGINX_KEYS);
        macro_rules! take {
            ($($f:ident),*) => {$(
                if let Some(l) = self.lines("nginx", m, stringify!($f)) { n.$f = l; }
            )*};
        }
        take!(global, http, proxy, upstream, stream);
        n
    }
}

/// The JSON paths of keys given twice in one object. `serde_json::Value` keeps the last
/// one silently, which would turn a copy-pasted pool that was not renamed into a pool
/// that quietly vanished.
fn duplicate_keys(text: &str) -> Vec<String> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    struct Walk<'a> {
        path: String,
        out: &'a mut Vec<String>,
    }
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
            let mut i = 0;
            while s
                .next_element_seed(Walk {
                    path: format!("{}[{i}]", self.path),
                    out: &mut *self.out,
                })?
                .is_some()
            {
                i += 1;
            }
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
            let mut seen = std::collections::BTreeSet::new();
            while let Some(k) = m.next_key::<String>()? {
                let path = join(&self.path, &k);
                if !seen.insert(k) && !self.out.contains(&path) {
                    self.out.push(path.clone());
                }
                m.next_value_seed(Walk {
                    path,
                    out: &mut *self.out,
                })?;
            }
            Ok(())
        }
    }
    let mut out = Vec::new();
    let mut d = serde_json::Deserializer::from_str(text);
    // The text already parsed as a Value, so this walk cannot fail.
    let _ = Walk {
        path: String::new(),
        out: &mut out,
    }
    .deserialize(&mut d);
    out
}

fn valid_class(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-./_".contains(&b))
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The known key closest to `k` (case-insensitive equality, or edit distance <= 2).
fn closest<'a>(k: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = k.to_ascii_lowercase();
    known
        .iter()
        .map(|c| (strsim::levenshtein(&lower, &c.to_ascii_lowercase()), *c))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const README_TWO_POOLS: &str = r#"{ "pools": {
        "default": { "network": "192.168.10.0/24", "range": "192.168.10.200-192.168.10.254" },
        "external": { "network": "1.2.3.0/22", "range": "1.2.3.50-1.2.3.74", "interface": "em1" } } }"#;

    #[test]
    fn conditional_rules_per_host_defaults_to_256_and_is_admin_settable() {
        let c = parse_global_config(README_TWO_POOLS).unwrap();
        assert_eq!(c.limits.conditional_rules_per_host, 256);
        let with = |limits: &str| {
            let text = README_TWO_POOLS.trim_end().trim_end_matches('}');
            parse_global_config(&format!("{text}, \"limits\": {limits} }}"))
        };
        let c = with(r#"{ "conditionalRulesPerHost": 8000 }"#).unwrap();
        assert_eq!(c.limits.conditional_rules_per_host, 8000);
        for bad in [
            r#"{ "conditionalRulesPerHost": 0 }"#,
            r#"{ "conditionalRulesPerHost": 2.5 }"#,
            r#"{ "conditionalRulesPerHost": -1 }"#,
            r#"{ "conditionalRulesPerHots": 10 }"#,
            r#"[]"#,
        ] {
            let e = with(bad).unwrap_err();
            assert!(e.0.iter().any(|m| m.starts_with("limits")), "{bad}: {e}");
        }
    }

    #[test]
    fn readme_two_pool_config_is_accepted_with_a_warning() {
        let c = parse_global_config(README_TWO_POOLS).unwrap();
        assert_eq!(c.pools.len(), 2);
        let ext = &c.pools[&"external".parse().unwrap()];
        assert_eq!(ext.network.canonical(), "1.2.0.0/22");
        assert_eq!(ext.interface.as_ref().unwrap().as_str(), "em1");
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("1.2.3.0/22"));
        assert_eq!(c.class, DEFAULT_CLASS);
        assert!(c.claim_unclassed);
        assert_eq!(c.keepalived.advert_int_ms, 100);
    }

    #[test]
    fn every_problem_is_listed() {
        let bad = r#"{ "pools": {
            "a": { "network": "10.0.0.0/24", "range": "10.0.1.0-10.0.1.5" },
            "b": { "network": "10.0.0.0/16", "range": "10.0.0.1-10.0.0.2", "interfce": "eth0" },
            "c d": { "network": "10.9.0.0/24", "range": "10.9.0.1" } },
          "haproxy": { "global": ["maxconn 10\nfrontend evil"], "defualts": [] },
          "keepalived": { "advertInt": 0.005 },
          "poolz": {} }"#;
        let e = parse_global_config(bad).unwrap_err();
        let all = e.0.join("\n");
        for needle in [
            "pools.a.range: 10.0.1.0-10.0.1.5 is not inside the pool's network 10.0.0.0/24",
            "pools.b.interfce: unknown key (did you mean \"interface\"?)",
            "pools.c d: invalid pool name",
            "haproxy.global[0]: invalid config line",
            "haproxy.defualts: unknown key (did you mean \"defaults\"?)",
            "keepalived.advertInt",
            "poolz: unknown key (did you mean \"pools\"?)",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
    }

    #[test]
    fn overlapping_pools_are_refused() {
        let e = parse_global_config(
            r#"{"pools":{"a":{"network":"10.0.0.0/24","range":"10.0.0.10-10.0.0.20"},
                         "b":{"network":"10.0.0.128/25","range":"10.0.0.200-10.0.0.210"}}}"#,
        )
        .unwrap_err();
        assert!(e.0[0].contains("overlaps pool \"a\""), "{e}");
    }

    #[test]
    fn ipv6_pool_and_family_mismatch() {
        let ok = parse_global_config(
            r#"{"pools":{"ipv6":{"network":"2001:468::/32","range":"2001:468:101::/96"}}}"#,
        )
        .unwrap();
        assert_eq!(ok.pools.values().next().unwrap().family(), Family::V6);
        let e = parse_global_config(
            r#"{"pools":{"x":{"network":"2001:468::/32","range":"10.0.0.1-10.0.0.2"}}}"#,
        )
        .unwrap_err();
        assert!(e.0[0].contains("different address families"), "{e}");
    }

    #[test]
    fn k8slb_readme_ipv6_example_is_reported_not_accepted() {
        // The seed README's IPv6 pool has its range outside its network.
        let e = parse_global_config(
            r#"{"pools":{"ipv6":{"network":"2001:468::/64","range":"2001:468:101::/96","interface":"eth0"}}}"#,
        )
        .unwrap_err();
        assert!(
            e.0[0].contains("not inside the pool's network 2001:468::/64"),
            "{e}"
        );
    }

    #[test]
    fn keepalived_section_and_strings_as_numbers() {
        let c = parse_global_config(
            r#"{"pools":{},"keepalived":{"email":"ops@example.com","emailFrom":"lb@example.com",
                "emailServer":"smtp.example.com","emailServerTimeout":"30","advertInt":"0.25",
                "unicast":true}}"#,
        )
        .unwrap();
        assert_eq!(c.keepalived.advert_int_ms, 250);
        assert!(c.keepalived.unicast);
        assert_eq!(c.keepalived.email.unwrap().as_str(), "ops@example.com");
        // k8slb's manifest default: all empty strings.
        let c = parse_global_config(
            r#"{"pools":{},"keepalived":{"email":"","emailFrom":"","emailServer":"","emailServerTimeout":"30"}}"#,
        )
        .unwrap();
        assert!(c.keepalived.email.is_none());
    }

    #[test]
    fn missing_pools_and_not_json() {
        assert!(parse_global_config("{}").unwrap_err().0[0].contains("pools: is required"));
        assert!(parse_global_config("pools: {}").unwrap_err().0[0].contains("not valid JSON"));
    }

    #[test]
    fn configmap_yaml_is_read() {
        let y = r#"
apiVersion: v1
kind: ConfigMap
metadata: { name: global, namespace: k8slb-system }
data:
  config: |
    { "pools": { "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" } } }
"#;
        let c = parse_config_file(y).unwrap();
        assert_eq!(c.pools.len(), 1);
    }

    #[test]
    fn reserved_ports_default_to_the_nodes_own_and_a_list_replaces_them() {
        let base = r#""pools": {"default": {"network": "198.18.0.0/24", "range": "198.18.0.10-198.18.0.20"}}"#;
        let d = parse_global_config(&format!("{{{base}}}")).unwrap();
        for p in [22, 2379, 2380, 6443, 9253, 9254, 10250, 10256] {
            assert!(d.reserved_ports.contains(p), "{p}");
        }
        for p in [21, 23, 80, 443, 2378, 2381, 9252, 9255, 10251] {
            assert!(!d.reserved_ports.contains(p), "{p}");
        }
        let c = parse_global_config(&format!(
            r#"{{{base}, "reservedPorts": [8080, "30000-32767", "22", "30010-30020"]}}"#
        ))
        .unwrap();
        assert_eq!(c.reserved_ports.to_string(), "22,8080,30000-32767");
        assert!(c.reserved_ports.contains(31000) && !c.reserved_ports.contains(6443));
        let none = parse_global_config(&format!(r#"{{{base}, "reservedPorts": []}}"#)).unwrap();
        assert!(!none.reserved_ports.contains(22));
        for bad in [
            r#""22""#,
            r#"[0]"#,
            r#"[70000]"#,
            r#"["9-3"]"#,
            r#"["a-b"]"#,
            r#"[true]"#,
        ] {
            let e =
                parse_global_config(&format!(r#"{{{base}, "reservedPorts": {bad}}}"#)).unwrap_err();
            assert!(e.to_string().contains("reservedPorts"), "{bad}: {e}");
        }
    }
}
