//! The published state: the one document the watcher writes and every actor reads.
//!
//! It is versioned, deterministic JSON: every map is a `BTreeMap`, every list is sorted
//! (or ordered by a documented rule), there is no clock and no random in it, so the same
//! inputs give byte-identical output and a no-op recompute is a no-op write.
//!
//! Everything in it that a template can paste into a config file is a validated type
//! (`PoolName`, `NodeName`, `IfName`, `IpAddr`, `IpNet`, enums, numbers, `ConfigLine`).
//! The actor deserialises it with the same types, so a hand-edited or corrupted state
//! file is refused at the door rather than rendered.
//!
//! Size: see [`crate::publish`] for how the document is compressed and sharded to stay
//! under Kubernetes' 1 MiB object limit.

pub use crate::endpoints::Endpoint;
use crate::names::{
    ConfigLine, Email, IfName, NodeName, ObjectKey, PoolName, PortName, ServiceKey, SmtpServer,
};
pub use crate::problem::{ObjRef, Problem, Reason};
use crate::routes::HttpRoutes;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Bumped on any incompatible change of this schema. Actors refuse other versions.
pub const STATE_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    pub version: u32,
    /// The provider the watcher planned this state for (its `PROXY` / `--proxy`): it
    /// decides `ipMode` and which proxy sections the config keeps. An actor serving
    /// another provider refuses to render the state (it says so on `/readyz` and keeps
    /// running what it applied last). Absent (`None`) in states published by a watcher
    /// older than this field: the actor then renders for its own `--proxy`, as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
    /// What the actors need from the global config (pools, keepalived, proxy sections).
    pub config: ActorConfig,
    /// The load-balancer nodes (selected, Ready, not excluded), with their addresses.
    pub nodes: BTreeMap<NodeName, LbNode>,
    /// VRRP instances, sorted by `vrid`. Each carries the VIPs of one pool and has one
    /// owner (highest priority) and ordered backups.
    pub instances: Vec<VrrpInstance>,
    /// Every allocated VIP: its pool, its instance, and the Services on it.
    pub vips: BTreeMap<IpAddr, VipState>,
    /// Every claimed Service, keyed `<namespace>/<name>`. Services that got no IP are
    /// here too (with empty `ips`), so their problems and frontends are visible.
    pub services: BTreeMap<ServiceKey, ServiceState>,
    /// The L7 routes: every HTTP(S) listener of every VIP that serves Ingresses (and,
    /// later, Gateway API routes), with their backends. Empty (and absent from the JSON)
    /// when nothing is routed at L7.
    #[serde(default, skip_serializing_if = "HttpRoutes::is_empty")]
    pub http: HttpRoutes,
    /// Every Ingress of our class, keyed `<namespace>/<name>`: its VIPs (what its
    /// `status.loadBalancer.ingress` shows). Ingresses that got no IP are here too
    /// (empty `ips`), so their problems are visible.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ingresses: BTreeMap<ObjectKey, IngressState>,
    /// Every Gateway of one of our GatewayClasses, keyed `<namespace>/<name>`: its
    /// addresses (what its `status.addresses` shows; its listeners are in [`State::http`]).
    /// Gateways that got no address are here too (empty `ips`). Absent when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gateways: BTreeMap<ObjectKey, GatewayState>,
    /// Released addresses and the VRID of the instance they were in, while that VRID is
    /// in use or free: an address allocated again goes back to that VRID. An LB node that
    /// still runs an older state (its state watch reconnecting after an API outage) may
    /// still hold the address in that instance; in the same VRID, VRRP elects one holder,
    /// where in another instance both nodes would hold it at once. Absent when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub released: BTreeMap<IpAddr, u8>,
    /// Everything that went wrong, one entry per object and reason. Sorted.
    pub problems: Vec<Problem>,
}

impl State {
    pub fn empty(config: ActorConfig) -> Self {
        State {
            version: STATE_VERSION,
            provider: None,
            config,
            nodes: BTreeMap::new(),
            instances: Vec::new(),
            vips: BTreeMap::new(),
            services: BTreeMap::new(),
            http: HttpRoutes::default(),
            ingresses: BTreeMap::new(),
            gateways: BTreeMap::new(),
            released: BTreeMap::new(),
            problems: Vec::new(),
        }
    }

    /// Deterministic JSON (pretty, newline-terminated).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("state serialises");
        s.push('\n');
        s
    }

    pub fn from_json(s: &str) -> Result<Self, StateError> {
        #[derive(Deserialize)]
        struct Probe {
            version: u32,
        }
        let probe: Probe = serde_json::from_str(s).map_err(StateError::Decode)?;
        if probe.version != STATE_VERSION {
            return Err(StateError::Version {
                found: probe.version,
                expected: STATE_VERSION,
            });
        }
        serde_json::from_str(s).map_err(StateError::Decode)
    }
}

/// Which proxy carries the traffic: `haproxy` (default, every feature), `nginx`, or
/// `kubeproxy` (no proxy: keepalived holds the VIPs, kube-proxy forwards, `ipMode: VIP`).
/// The watcher plans for one (it decides `ipMode` and what is supported) and records it
/// in the state; the actor renders for one. The one type for this concept in the
/// workspace; the actor's daemons are [`Provider`]-derived (keepalived + the proxy).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    #[default]
    Haproxy,
    Nginx,
    Kubeproxy,
}

impl Provider {
    pub const ALL: [Provider; 3] = [Provider::Haproxy, Provider::Nginx, Provider::Kubeproxy];

    /// The name used on the command line, in the state and in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Haproxy => "haproxy",
            Provider::Nginx => "nginx",
            Provider::Kubeproxy => "kubeproxy",
        }
    }

    /// True iff a proxy process serves the VIPs (not kubeproxy).
    pub fn has_proxy(self) -> bool {
        self != Provider::Kubeproxy
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Provider {
    type Err = String;
    /// k8slb's `PROXY`: case-insensitive; empty means haproxy; `kube-proxy` is accepted.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "" | "haproxy" => Ok(Provider::Haproxy),
            "nginx" => Ok(Provider::Nginx),
            "kubeproxy" | "kube-proxy" => Ok(Provider::Kubeproxy),
            _ => Err(format!(
                "unknown proxy {s:?}: expected haproxy, nginx or kubeproxy"
            )),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state is not valid: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("state version {found} is not supported (expected {expected})")]
    Version { found: u32, expected: u32 },
}

/// The part of the global config that the actors render from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActorConfig {
    pub pools: BTreeMap<PoolName, PoolInfo>,
    pub keepalived: KeepalivedSettings,
    pub haproxy: HaproxySections,
    pub nginx: NginxSections,
    /// Directory of the TLS certificates on the LB nodes (k8slb's `CERT_PATH`).
    pub cert_path: CertPath,
    /// The routers BGP-mode pools are announced to (`None`: no `bgp` in the config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<crate::bgp::BgpSettings>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolInfo {
    /// The pool's network, canonical (`192.168.10.0/24`, or `a-b` for a range network).
    pub network: String,
    /// Prefix length the VIPs of this pool carry on the interface: the network's prefix
    /// when it is a CIDR, otherwise the host prefix (32 or 128).
    pub prefix_len: u8,
    pub family: Family,
    /// Forced interface; `None` means each actor detects it (longest-prefix match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<IfName>,
    /// The network's first address: what interface detection matches against.
    pub first: IpAddr,
    /// VRRP (default, absent from the JSON) or BGP: a BGP-mode pool's VIPs are in no
    /// VRRP instance; every LB node binds them on `lo` and announces them.
    #[serde(default, skip_serializing_if = "crate::bgp::PoolMode::is_vrrp")]
    pub mode: crate::bgp::PoolMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeepalivedSettings {
    /// VRRP advertisement interval in milliseconds (VRRPv3: 10 ms resolution).
    pub advert_int_ms: u32,
    /// Unicast VRRP to the other members' node addresses instead of multicast.
    pub unicast: bool,
    /// Preempt: a node of higher priority takes a VIP back when it returns. Off by
    /// default (fewer moves); the owner still gets the VIP at first election.
    pub preempt: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<Email>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email_from: Option<Email>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email_server: Option<SmtpServer>,
    pub email_server_timeout_s: u32,
    /// Gratuitous ARP / unsolicited NA: how many are sent at takeover, and the delay
    /// in seconds before the second burst (keepalived `garp_master_delay`).
    pub garp_repeat: u32,
    pub garp_master_delay_s: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HaproxySections {
    pub global: Vec<ConfigLine>,
    pub defaults: Vec<ConfigLine>,
    pub tcpfront: Vec<ConfigLine>,
    pub httpfront: Vec<ConfigLine>,
    pub tcpback: Vec<ConfigLine>,
    pub httpback: Vec<ConfigLine>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NginxSections {
    pub global: Vec<ConfigLine>,
    pub http: Vec<ConfigLine>,
    pub proxy: Vec<ConfigLine>,
    pub upstream: Vec<ConfigLine>,
    pub stream: Vec<ConfigLine>,
}

/// An absolute directory path made of safe characters only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct CertPath(String);

impl CertPath {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for CertPath {
    type Err = crate::names::NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = s.starts_with('/')
            && s.len() <= 1024
            && !s.split('/').any(|c| c == "..")
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b));
        if ok {
            Ok(CertPath(s.trim_end_matches('/').to_string()).or_root())
        } else {
            Err(crate::names::NameError {
                what: "certificate path",
                value: s.chars().take(80).collect(),
                why: "must be an absolute path of letters, digits, '/', '.', '_' and '-'",
            })
        }
    }
}

impl CertPath {
    fn or_root(self) -> Self {
        if self.0.is_empty() {
            CertPath("/".into())
        } else {
            self
        }
    }
}

impl<'de> Deserialize<'de> for CertPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl Default for CertPath {
    fn default() -> Self {
        CertPath("/etc/certs".into())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbNode {
    /// The node's InternalIP (then ExternalIP) addresses, sorted; used for VRRP unicast
    /// peers and `unicast_src_ip`.
    pub addresses: Vec<IpAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VrrpInstance {
    /// `virtual_router_id`, `VRID_OFFSET` applied; stable for the instance's lifetime and
    /// unique among our instances.
    pub vrid: u8,
    /// Instance name for keepalived (`k8slb_<pool>_<vrid>`).
    pub name: String,
    pub pool: PoolName,
    pub family: Family,
    /// Members in priority order: the first is the owner (the MASTER while it lives).
    pub members: Vec<Member>,
    /// VIPs carried by this instance, sorted.
    pub vips: Vec<IpAddr>,
    /// The owner takes the VIPs back when it can (VRRP preemption), whatever
    /// `keepalived.preempt` says: set when a VIP here is one of several of a scaled
    /// Service or pool of Ingresses (`loadbalancer/scale`), whose point is that each is
    /// served by its own node. Without it, the node whose keepalived starts the instance
    /// first keeps it, and the N addresses can end up on one node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preempt: bool,
}

impl VrrpInstance {
    pub fn owner(&self) -> Option<&NodeName> {
        self.members.first().map(|m| &m.node)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub node: NodeName,
    /// VRRP priority, 1..=254, distinct within an instance, descending along `members`.
    pub priority: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VipState {
    pub pool: PoolName,
    /// The `vrid` of the instance that carries it (0 while no LB node exists).
    pub vrid: u8,
    /// The node that owns it (`None` while no LB node exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<NodeName>,
    /// Services on this VIP (more than one when shared), sorted.
    pub services: Vec<ServiceKey>,
    /// The VIP serves its pool's Ingresses (its listeners are in [`State::http`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ingress: bool,
    /// The Gateways on this VIP (one, unless a Gateway asked for a shared address by
    /// name), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<ObjectKey>,
}

/// An Ingress of our class, as planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressState {
    /// Its VIPs (the pool's ingress VIPs: one, or N with `loadbalancer/scale`), sorted.
    pub ips: Vec<IpAddr>,
    /// The pool (annotation `loadbalancer/pool`, default `default`), as written.
    pub pool: String,
    /// The Ingress's `metadata.uid`, so writers can tell a re-created Ingress apart.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// A Gateway of one of our GatewayClasses, as planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayState {
    /// Its addresses, sorted.
    pub ips: Vec<IpAddr>,
    /// Its pool (annotation `loadbalancer/pool`, default `default`), as written.
    pub pool: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Ports of its addresses that another tenant holds (a Service that shares the
    /// address by name), with who: those listeners are `PortUnavailable`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unavailable: BTreeMap<u16, String>,
    /// The same for UDP ports.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unavailable_udp: BTreeMap<u16, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IpMode {
    Proxy,
    #[serde(rename = "VIP")]
    Vip,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceState {
    /// Allocated VIPs, canonical text (RFC 5952 for IPv6), sorted: one per pool, or N
    /// with `loadbalancer/scale`.
    pub ips: Vec<IpAddr>,
    /// The pool (annotation `loadbalancer/pool`, default `default`); for a dual-stack
    /// Service with two pools, `"<v4pool>,<v6pool>"` as written.
    pub pool: String,
    pub ip_mode: IpMode,
    /// The Service's `metadata.uid`, so writers can tell a re-created Service apart.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The frontends: one per Service port, listened on every IP in `ips`.
    pub ports: Vec<PortState>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// L4: bytes in, bytes out.
    Tcp,
    /// L7: HTTP, with X-Forwarded-*, redirects and cookies possible.
    Http,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stickiness {
    None,
    /// Same client address, same backend (Service `sessionAffinity: ClientIP`, or
    /// annotation `loadbalancer/stickiness: source`).
    Source,
    /// An inserted cookie (`loadbalancer/stickiness: cookie`; http mode only).
    Cookie,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    V1,
    V2,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<PortName>,
    pub protocol: Protocol,
    /// The public port on the VIP.
    pub port: u16,
    pub mode: Mode,
    /// Terminate TLS with `<certPath>/<pool>.pem` (first pool of the Service).
    pub tls: bool,
    /// Certificate file stem (the pool name) when `tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PoolName>,
    /// Redirect plain HTTP to HTTPS (http-mode frontends without TLS only).
    pub redirect: bool,
    /// Speak TLS to the backends (certificate not verified, as k8slb did).
    pub backend_tls: bool,
    /// Active health checks on the backends.
    pub check: bool,
    pub stickiness: Stickiness,
    /// Session-affinity timeout in seconds (Service `sessionAffinityConfig`, default 10800).
    pub stickiness_timeout_s: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<ProxyProtocol>,
    /// What an http-mode port speaks to its backends: `h2c` when the Service port's
    /// `appProtocol` is `kubernetes.io/h2c` (gRPC); HTTP/1.1 otherwise.
    #[serde(
        default,
        skip_serializing_if = "crate::app_protocol::BackendProtocol::is_http"
    )]
    pub app_protocol: crate::app_protocol::BackendProtocol,
    /// Client CIDRs allowed to connect (`spec.loadBalancerSourceRanges`); empty: all.
    /// A range that did not parse is [`FAIL_CLOSED_SOURCE_RANGE`] (no client).
    pub source_ranges: Vec<IpNet>,
    /// Backends: ready endpoints, then terminating ones that still serve (draining).
    /// Sorted by (ip, port).
    pub endpoints: Vec<Endpoint>,
}

/// What an unparsable `loadBalancerSourceRanges` entry becomes in the state: a range no
/// client connects from (the limited broadcast address), so the port fails closed. nginx
/// cannot parse it (`255.255.255.255` is its inet_addr error value): the nginx render
/// leaves it out of the `allow` lines and keeps `deny all;`.
pub const FAIL_CLOSED_SOURCE_RANGE: &str = "255.255.255.255/32";

/// Is `n` [`FAIL_CLOSED_SOURCE_RANGE`]?
pub fn is_fail_closed_source_range(n: &IpNet) -> bool {
    n.to_string() == FAIL_CLOSED_SOURCE_RANGE
}
