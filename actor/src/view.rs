//! This node's view of the published state: a pure function from (state, node, options)
//! to everything the templates need, and nothing more.
//!
//! Every string in a [`NodeView`] is either a validated name from the state
//! (`PoolName`, `NodeName`, `IfName`, `ObjectName`, `ConfigLine`, `CertPath`, ...), a
//! number, an address formatted by `std`, a fixed keyword from this file, or a path from
//! [`ViewOptions`] checked by [`safe_path`]. Nothing free-form from the state is copied:
//! notably `VrrpInstance::name`, `ServiceState::pool` and `PoolInfo::network` (plain
//! `String`s in the schema) are never rendered; instance names are rebuilt here as
//! `k8slb_<pool>_<vrid>`.
//!
//! Decisions documented here (see also `render`):
//! - **Server slots** (HAProxy): each backend has `max(8, next_power_of_two(ready +
//!   draining))` `server s<N>` lines; the unused ones are `127.0.0.1:1 ... disabled`
//!   placeholders (a fixed port, not `:0`, which HAProxy would treat as "port mapping").
//!   An endpoint change that still fits the slots is applied with `set server` through the
//!   Runtime API (see [`crate::render::runtime_diff`]) without a reload.
//!   [`view_with_previous`] keeps an endpoint in the slot it had in the previous view,
//!   so unrelated endpoints, cookies (`cookie s<N>`) and stick tables do not move.
//! - **Draining** endpoints are rendered as normal servers with `weight 0` (the config
//!   equivalent of the Runtime API's `state drain`): no new connections, existing and
//!   sticky ones finish. In nginx they are `down` (existing connections finish in the old
//!   workers after the reload).

use crate::fdlimit::{self, FdBudget, HaproxyFds};
use k8slb_common::app_protocol::BackendProtocol;
use k8slb_common::names::{ConfigLine, Email, IfName, NodeName, PoolName, ServiceKey, SmtpServer};
use k8slb_common::routes::{BackendId, BackendState, CertFile, HttpRoutes, Sticky};
use k8slb_common::state::{Family, Mode, Protocol, Provider, ProxyProtocol, State, Stickiness};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// `--proxy` / `PROXY`: one of common's [`Provider`]s, listed with what each means.
pub fn provider_arg() -> impl clap::builder::TypedValueParser<Value = Provider> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let help = |p: Provider| match p {
        Provider::Haproxy => "HAProxy in master-worker mode (default; all features)",
        Provider::Nginx => "nginx: `http` for L7 ports, `stream` for L4 TCP and UDP ports",
        Provider::Kubeproxy => "No proxy: keepalived only, kube-proxy forwards (`ipMode: VIP`)",
    };
    PossibleValuesParser::new(Provider::ALL.map(|p| PossibleValue::new(p.as_str()).help(help(p))))
        .map(|s| {
            Provider::ALL
                .into_iter()
                .find(|p| p.as_str() == s)
                .unwrap_or_default()
        })
}

/// What the caller knows about this node that the state does not say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewOptions {
    pub proxy: Provider,
    /// Interface per pool, resolved by the caller (a forced `interface` in the state
    /// wins; otherwise detection). A pool of an instance this node is a member of that
    /// is missing here is a [`ViewError::NoInterface`].
    pub interfaces: BTreeMap<PoolName, IfName>,
    /// k8slb's `PRIORITY<n>`: the priority this node uses for the n-th instance (1-based,
    /// in vrid order) when it is not that instance's owner.
    pub priority_overrides: BTreeMap<u32, u8>,
    /// HAProxy master/stats socket (Runtime API) to render.
    pub runtime_socket: PathBuf,
    /// pid file of the proxy (`pidfile` / `pid`).
    pub pid_file: PathBuf,
    /// This node's addresses as seen locally (fallback for `unicast_src_ip` when the state
    /// has none of the instance's family).
    pub node_addresses: Vec<IpAddr>,
    /// The proxy health file keepalived tracks (`track_file`, weight 0): the actor writes
    /// `0` while the proxy runs and `1` when it exits (see [`crate::apply`]). Unused for
    /// kubeproxy.
    pub track_file: PathBuf,
    /// The open-files limit the proxy runs under: HAProxy's `maxconn` and nginx's
    /// `worker_connections` / `worker_rlimit_nofile` are lowered to fit it (with a
    /// note), never raised ([`crate::fdlimit`]). `None`: rendered as configured (the
    /// `render` command, snapshots).
    pub fd_budget: Option<FdBudget>,
    /// Where the node's certificates of TLS Secrets are (`<dir>/<stem>.pem`), for the
    /// routes' HTTPS listeners.
    pub secret_cert_dir: PathBuf,
    /// Where the actor writes the routes' HAProxy map and crt-list files.
    pub routes_dir: PathBuf,
    /// The certificates of TLS Secrets on this node (stem → version, as
    /// `k8slb_common::certs::files::present` reads `secret_cert_dir`). A certificate the
    /// state names that is not here, or not in the version the state names, is left out
    /// of its listener (its hosts get the listener's default certificate, with a note)
    /// rather than naming a file the proxy cannot load, which would fail the whole
    /// config. `None`: not checked (`k8slb-actor render`, snapshots).
    pub secret_certs: Option<BTreeMap<String, String>>,
    /// The pools whose certificate is on this node (`<certPath>/<pool>.pem`, for nginx
    /// also `.key`). A pool certificate that is not is left out as its listeners' default
    /// (their first certificate is the default then, with a note) rather than naming a
    /// file the proxy cannot load, which would fail the whole config. `None`: not checked
    /// (`k8slb-actor render`, snapshots).
    pub pool_certs: Option<BTreeSet<PoolName>>,
}

impl ViewOptions {
    /// Defaults for `proxy`: no interfaces, no overrides, sockets under `/run/k8slb`.
    pub fn new(proxy: Provider) -> Self {
        let pid = match proxy {
            Provider::Nginx => "/run/k8slb/nginx.pid",
            _ => "/run/k8slb/haproxy.pid",
        };
        ViewOptions {
            proxy,
            interfaces: BTreeMap::new(),
            priority_overrides: BTreeMap::new(),
            runtime_socket: PathBuf::from("/run/k8slb/haproxy.sock"),
            pid_file: PathBuf::from(pid),
            node_addresses: Vec::new(),
            track_file: PathBuf::from("/run/k8slb/proxy-health"),
            fd_budget: None,
            secret_cert_dir: PathBuf::from("/run/k8slb/certs"),
            routes_dir: PathBuf::from("/run/k8slb/routes"),
            secret_certs: None,
            pool_certs: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    #[error("no interface for pool {pool} (VRRP instance {vrid}): no address of this node (VIPs do not count) is in the pool's network; set `interface` on the pool or pass --interface {pool}=<ifname>")]
    NoInterface { pool: PoolName, vrid: u8 },
    #[error("VRRP instance {vrid} refers to pool {pool}, which is not in the config")]
    UnknownPool { pool: PoolName, vrid: u8 },
    #[error("VIP {vip} of VRRP instance {vrid} is not of the instance's family")]
    VipFamily { vip: IpAddr, vrid: u8 },
    #[error("pool {pool} has prefix length {prefix_len}, too long for its family")]
    PrefixLen { pool: PoolName, prefix_len: u8 },
    #[error("priority {priority} for node {node} in VRRP instance {vrid} is outside 1..=254")]
    Priority {
        node: NodeName,
        vrid: u8,
        priority: u8,
    },
    #[error("PRIORITY{n}={priority} is outside 1..=254")]
    PriorityOverride { n: u32, priority: u8 },
    #[error("advertInt {ms} ms is outside 10..=40950 ms (VRRPv3)")]
    AdvertInt { ms: u32 },
    #[error("{what} {path:?} must be an absolute path of letters, digits, '/', '.', '_' and '-'")]
    UnsafePath { what: &'static str, path: PathBuf },
}

impl ViewError {
    /// Fixed label for metrics and Events.
    pub fn category(&self) -> &'static str {
        match self {
            ViewError::NoInterface { .. } => "NoInterface",
            ViewError::UnknownPool { .. } => "UnknownPool",
            ViewError::VipFamily { .. } => "VipFamily",
            ViewError::PrefixLen { .. } => "PrefixLen",
            ViewError::Priority { .. } | ViewError::PriorityOverride { .. } => "Priority",
            ViewError::AdvertInt { .. } => "AdvertInt",
            ViewError::UnsafePath { .. } => "UnsafePath",
        }
    }
}

/// Everything this node renders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeView {
    pub node: NodeName,
    pub proxy: Provider,
    pub keepalived: KeepalivedView,
    /// `Some` iff `proxy == Haproxy`.
    pub haproxy: Option<HaproxyView>,
    /// `Some` iff `proxy == Nginx`.
    pub nginx: Option<NginxView>,
    /// Ports of the state that this proxy does not serve, with the reason (also written
    /// as comments in the proxy config).
    pub skipped: Vec<Skipped>,
    /// Other things worth a log line (never rendered).
    #[serde(skip)]
    pub notes: Vec<String>,
    /// The L7 routes this node's proxy serves (Ingresses), if any.
    #[serde(skip)]
    pub http: Option<HttpPart>,
}

/// The routes part of a node's view: the model as served, where its files are, and (for
/// HAProxy) its backends with their server slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpPart {
    pub routes: HttpRoutes,
    pub opts: HttpRenderOptions,
    /// HAProxy only: the route backends, slots kept from the previous view.
    pub backends: Vec<Backend>,
}

impl NodeView {
    /// Every address and transport the proxy config listens on: the Services' frontends
    /// (servers), the route listeners and the L4 route listeners (UDP ones only for
    /// nginx: HAProxy serves no UDP).
    pub fn listens(&self) -> BTreeSet<(SocketAddr, crate::ports::Transport)> {
        use crate::ports::Transport;
        let mut out = BTreeSet::new();
        if let Some(h) = &self.haproxy {
            out.extend(
                h.frontends
                    .iter()
                    .filter_map(|f| f.bind.parse().ok())
                    .map(|a| (a, Transport::Tcp)),
            );
        }
        if let Some(n) = &self.nginx {
            for s in n.http_servers.iter().chain(&n.stream_servers) {
                let t = if s.udp {
                    Transport::Udp
                } else {
                    Transport::Tcp
                };
                out.extend(
                    s.listens
                        .iter()
                        .filter_map(|l| l.parse().ok())
                        .map(|a| (a, t)),
                );
            }
        }
        if let Some(http) = &self.http {
            out.extend(
                http.routes
                    .listeners
                    .iter()
                    .map(|l| (SocketAddr::new(l.ip, l.port), Transport::Tcp)),
            );
            for s in &http.routes.streams {
                let t = if s.protocol.is_udp() {
                    Transport::Udp
                } else {
                    Transport::Tcp
                };
                if t == Transport::Udp && self.nginx.is_none() {
                    continue;
                }
                out.insert((SocketAddr::new(s.ip, s.port), t));
            }
        }
        out
    }

    /// The proxy's connection limit as rendered, when known: HAProxy's global
    /// `maxconn` (if configured), nginx's `worker_connections` (the default events
    /// block, or the admin's).
    pub fn proxy_maxconn(&self) -> Option<u64> {
        match (&self.haproxy, &self.nginx) {
            (Some(h), _) => h.maxconn,
            (_, Some(n)) => n.worker_connections,
            _ => None,
        }
    }
}

/// A port that is not rendered, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub service: ServiceKey,
    pub port: u16,
    pub protocol: Protocol,
    pub reason: SkipReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SkipReason {
    #[serde(rename = "HAProxy does not proxy UDP")]
    HaproxyUdp,
    #[serde(rename = "SCTP is not proxied")]
    Sctp,
    #[serde(rename = "TLS without a certificate name")]
    TlsWithoutCert,
    #[serde(rename = "nginx cannot send the PROXY protocol from an http server")]
    NginxHttpProxyProtocol,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::HaproxyUdp => "HAProxy does not proxy UDP",
            SkipReason::Sctp => "SCTP is not proxied",
            SkipReason::TlsWithoutCert => "TLS without a certificate name",
            SkipReason::NginxHttpProxyProtocol => {
                "nginx cannot send the PROXY protocol from an http server"
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// keepalived

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeepalivedView {
    pub router_id: NodeName,
    /// `advert_int` in seconds with up to two decimals (`0.1`, `1`, `1.5`).
    pub advert_int: String,
    pub garp_master_delay: u32,
    pub garp_master_repeat: u32,
    pub email: Option<EmailView>,
    /// `track_file` on the proxy's health file (`None` for kubeproxy).
    pub track_file: Option<TrackFile>,
    pub instances: Vec<InstanceView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EmailView {
    pub to: Email,
    pub from: Option<Email>,
    pub server: Option<SmtpServer>,
    pub timeout_s: u32,
}

/// keepalived's `track_file` block on the proxy's health file, with weight 0: any
/// non-zero value faults every instance, so the VIPs move to the next node. It replaces
/// `vrrp_track_process`, which needs the kernel's process-events connector and so only
/// works in the initial network namespace (in any other, every instance stays in FAULT:
/// "Failed to set/clear process event listen").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrackFile {
    /// Name of the `track_file` block.
    pub name: &'static str,
    /// [`ViewOptions::track_file`], checked by [`safe_path`].
    pub file: String,
    /// `init_file` value if the file does not exist when keepalived starts (never
    /// `overwrite`: the actor owns the file). `1`: no proxy confirmed yet.
    pub init: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceView {
    /// `k8slb_<pool>_<vrid>`.
    pub name: String,
    pub pool: PoolName,
    pub vrid: u8,
    pub family: Family,
    pub interface: IfName,
    pub priority: u8,
    /// True iff this node is the instance's owner.
    pub owner: bool,
    pub nopreempt: bool,
    pub unicast: Option<Unicast>,
    /// The only address in the advertisements (`virtual_ipaddress`, on `lo`): see
    /// [`anchor`].
    pub anchor: String,
    /// `<ip>/<prefix_len>`, rendered as `virtual_ipaddress_excluded` (not advertised).
    pub vips: Vec<String>,
}

/// The address an instance advertises, the same on every node for the instance's whole
/// life: `127.75.76.<vrid>/32` (IPv4) or `fe80::4b4c:<vrid>/128` (IPv6), put on `lo`
/// by the master ("KL", k8slb's letters; unique per VRID, and VRIDs are unique in a state).
///
/// keepalived drops an advertisement whose address list differs from its own
/// configuration of the instance ("received an unexpected ip number count"), so with the
/// VIPs advertised a node that has applied a new VIP list for an instance (a Service
/// released or added) hears no master from a node that has not, takes over after three
/// advert intervals, and both hold every VIP of the instance until they apply the same
/// state (3.2 s in the chaos soak, after an API outage). With this fixed address and the
/// VIPs in `virtual_ipaddress_excluded` (set and removed with the instance's state, with
/// gratuitous ARP / unsolicited NA, but not advertised), nodes agree on the master
/// whatever VIP list each has applied. VRRPv3 needs at least one advertised address of
/// the instance's family, hence one per family; on `lo` it reaches no network (127/8 is
/// local anyway; an IPv6 link-local on `lo` is not routed).
pub fn anchor(family: Family, vrid: u8) -> String {
    match family {
        Family::V4 => format!("{}/32", Ipv4Addr::new(127, 75, 76, vrid)),
        Family::V6 => format!(
            "{}/128",
            std::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0x4b4c, u16::from(vrid))
        ),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unicast {
    pub src: IpAddr,
    pub peers: Vec<IpAddr>,
}

// ---------------------------------------------------------------------------------------
// HAProxy

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HaproxyView {
    pub runtime_socket: String,
    pub pid_file: String,
    /// Admin `haproxy.global` lines, minus the ones the actor must own (`pidfile`,
    /// `daemon`, `master-worker`), which are listed in `NodeView::notes`.
    pub global: Vec<ConfigLine>,
    pub defaults: Vec<ConfigLine>,
    /// `hard-stop-after 30m` / `mworker-max-reloads 50`, each added unless an admin
    /// `haproxy.global` line sets it: old workers holding long connections cannot pile
    /// up over frequent reloads (haproxy/haproxy#3204, #2184).
    pub default_global: Vec<&'static str>,
    /// `timeout connect|client|server` lines added because the admin gave none.
    pub default_timeouts: Vec<&'static str>,
    pub tcpfront: Vec<ConfigLine>,
    pub httpfront: Vec<ConfigLine>,
    pub tcpback: Vec<ConfigLine>,
    pub httpback: Vec<ConfigLine>,
    pub frontends: Vec<Frontend>,
    pub backends: Vec<Backend>,
    /// The global `maxconn` as rendered (after fitting to the open-files limit).
    #[serde(skip)]
    pub maxconn: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Frontend {
    /// `fe_<namespace>_<name>_<port>_<v4|v6>`.
    pub name: String,
    /// `<ip>:<port>`, IPv6 in brackets.
    pub bind: String,
    /// `<certPath>/<cert>.pem` when TLS is terminated here.
    pub crt: Option<String>,
    pub mode: Mode,
    /// Space-separated CIDRs for `tcp-request connection reject unless { src ... }`.
    pub source_ranges: Option<String>,
    pub redirect: bool,
    pub backend: String,
    /// The port's backends speak h2c (`appProtocol: kubernetes.io/h2c`): a TLS bind
    /// offers `alpn h2,http/1.1` so gRPC clients get HTTP/2. (A cleartext bind takes
    /// HTTP/1.1 and h2c prior knowledge alike.)
    pub h2: bool,
}

/// Serialised (for the template) as `BackendCtx`: the `server` lines of all slots are one
/// pre-rendered string, `server_lines` ([`Backend::server_lines`]: `\n  server s<N>
/// <addr>[ opts][ cookie s<N>][ disabled|weight 0]` per slot), made only of fixed
/// keywords, numbers and addresses. One string per backend instead of a loop over up to
/// hundreds of thousands of servers keeps a 10,000-Service render in budget (see the
/// `render` bench); the rest of the backend's structure stays in the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// `be_<namespace>_<name>_<port>`.
    pub name: String,
    pub mode: Mode,
    /// `stick-table type ip|ipv6 ... expire <s>s` + `stick on src`.
    pub stick_source: Option<StickSource>,
    /// `cookie K8SLB insert indirect nocache` + `cookie s<N>` on servers.
    pub cookie: bool,
    /// Options common to every server line (fixed keywords only), with a leading space.
    pub server_opts: String,
    pub slots: Vec<Slot>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StickSource {
    pub table_type: &'static str,
    pub expire_s: u32,
}

impl Backend {
    fn write_server_line(&self, i: usize, l: &mut String) {
        let slot = &self.slots[i];
        let n = i + 1;
        l.push('s');
        push_u32(l, n as u32);
        l.push(' ');
        push_socket_addr(l, slot.endpoint.unwrap_or(PLACEHOLDER));
        l.push_str(&self.server_opts);
        if self.cookie {
            l.push_str(" cookie s");
            push_u32(l, n as u32);
        }
        match slot.state() {
            "empty" => l.push_str(" disabled"),
            "drain" => l.push_str(" weight 0"),
            _ => {}
        }
    }

    /// Every slot's line, each as `\n  server <server_line>`: the `server_lines` the
    /// template writes after the backend's other lines.
    pub fn server_lines(&self) -> String {
        let mut out = String::with_capacity(self.slots.len() * 72);
        for i in 0..self.slots.len() {
            out.push_str("\n  server ");
            self.write_server_line(i, &mut out);
        }
        out
    }
}

impl Serialize for Backend {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct BackendCtx<'a> {
            name: &'a str,
            mode: Mode,
            stick_source: &'a Option<StickSource>,
            cookie: bool,
            server_lines: String,
        }
        BackendCtx {
            name: &self.name,
            mode: self.mode,
            stick_source: &self.stick_source,
            cookie: self.cookie,
            server_lines: self.server_lines(),
        }
        .serialize(s)
    }
}

/// One `server s<N>` line: an endpoint or an empty (disabled) placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub endpoint: Option<SocketAddr>,
    pub draining: bool,
}

/// Address of an empty slot: fixed port (not `:0`), harmless if ever enabled by mistake.
pub const PLACEHOLDER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 1);

impl Slot {
    pub const EMPTY: Slot = Slot {
        endpoint: None,
        draining: false,
    };
    /// `ready`, `drain` or `empty`.
    pub fn state(&self) -> &'static str {
        match (self.endpoint, self.draining) {
            (None, _) => "empty",
            (Some(_), true) => "drain",
            (Some(_), false) => "ready",
        }
    }
}

/// `n` in decimal, without `fmt` (the server lines of a 10,000-Service render are
/// 200,000 lines; `write!` made them a quarter of the render time).
fn push_u32(out: &mut String, n: u32) {
    if n >= 10 {
        push_u32(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

/// `addr.to_string()`, faster (see [`push_socket_addr`]).
fn addr_text(addr: SocketAddr) -> String {
    let mut s = String::with_capacity(21);
    push_socket_addr(&mut s, addr);
    s
}

/// `a.b.c.d:port` for IPv4 without `fmt`; IPv6 through `Display` (`[addr]:port`, the
/// same text `SocketAddr::to_string` gives).
fn push_socket_addr(out: &mut String, addr: SocketAddr) {
    match addr {
        SocketAddr::V4(a) => {
            for (k, o) in a.ip().octets().into_iter().enumerate() {
                if k > 0 {
                    out.push('.');
                }
                push_u32(out, u32::from(o));
            }
            out.push(':');
            push_u32(out, u32::from(a.port()));
        }
        SocketAddr::V6(_) => {
            use std::fmt::Write;
            let _ = write!(out, "{addr}");
        }
    }
}

impl Serialize for Slot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct SlotCtx {
            addr: String,
            state: &'static str,
        }
        SlotCtx {
            addr: self.endpoint.unwrap_or(PLACEHOLDER).to_string(),
            state: self.state(),
        }
        .serialize(s)
    }
}

// ---------------------------------------------------------------------------------------
// nginx

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NginxView {
    pub pid_file: String,
    /// Admin `nginx.global` lines, minus `pid` (the actor owns it).
    pub global: Vec<ConfigLine>,
    /// No admin global line opens an `events` block: render `events {}`.
    pub add_events: bool,
    /// `worker_connections` of the events block the actor renders (`add_events`), or
    /// of the admin's; `None` if unknown.
    pub worker_connections: Option<u64>,
    /// Path of the stream module to load, when a `stream` block is rendered and the
    /// admin lines do not load it.
    pub stream_module: Option<&'static str>,
    pub http: Vec<ConfigLine>,
    pub proxy: Vec<ConfigLine>,
    /// The WebSocket lines after `proxy` in every proxied location
    /// ([`nginx_upgrade_lines`]).
    pub upgrade: Vec<&'static str>,
    pub upstream: Vec<ConfigLine>,
    pub stream: Vec<ConfigLine>,
    pub http_servers: Vec<NginxServer>,
    pub stream_servers: Vec<NginxServer>,
    /// Render `stream { }` at all (L4 ports or admin stream lines).
    pub has_stream: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NginxServer {
    /// `up_<namespace>_<name>_<port>` (+ `_udp` / `_tcp` in stream).
    pub upstream: String,
    /// `<ip>:<port>` (IPv6 in brackets), one `listen` each.
    pub listens: Vec<String>,
    pub udp: bool,
    /// `<certPath>/<cert>` (without `.pem` / `.key`) when TLS is terminated here.
    pub cert: Option<String>,
    /// `allow` lines (without [`k8slb_common::state::FAIL_CLOSED_SOURCE_RANGE`], which
    /// nginx cannot parse).
    pub allow: Vec<ipnet::IpNet>,
    /// `deny all;` after them: the Service has source ranges (possibly only ones that
    /// did not parse: then no client gets in).
    pub deny_all: bool,
    pub redirect: bool,
    pub backend_tls: bool,
    /// The port's backends speak h2c (`appProtocol: kubernetes.io/h2c`): `grpc_pass
    /// grpc://` instead of `proxy_pass http://`, and `http2` on the listens. nginx before
    /// 1.25.1 takes only HTTP/2 on a cleartext `http2` listen (no HTTP/1.1), which such a
    /// port's clients speak.
    pub h2c: bool,
    pub proxy_protocol: bool,
    /// `ip_hash` (http) / `hash $remote_addr consistent` (stream).
    pub hash_source: bool,
    /// Serialised as `server_lines`, one pre-rendered string: `\n    server <addr>[ down]
    /// max_fails=3 fail_timeout=5s;` per server (render speed, see [`Backend`]).
    #[serde(rename = "server_lines", serialize_with = "nginx_server_lines")]
    pub servers: Vec<NginxUpstreamServer>,
}

fn nginx_server_lines<S: serde::Serializer>(
    servers: &[NginxUpstreamServer],
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut out = String::with_capacity(servers.len() * 64);
    for u in servers {
        out.push_str("\n    server ");
        out.push_str(&u.addr);
        if u.down {
            out.push_str(" down");
        }
        out.push_str(" max_fails=3 fail_timeout=5s;");
    }
    s.serialize_str(&out)
}

/// One upstream `server` (`<addr>[ down]`); the template gets them pre-rendered, see
/// [`NginxServer::servers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NginxUpstreamServer {
    pub addr: String,
    pub down: bool,
}

impl Serialize for NginxUpstreamServer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.down {
            s.collect_str(&format_args!("{} down", self.addr))
        } else {
            s.serialize_str(&self.addr)
        }
    }
}

// ---------------------------------------------------------------------------------------

/// This node's view of `state`.
pub fn view(state: &State, node: &NodeName, opts: &ViewOptions) -> Result<NodeView, ViewError> {
    view_with_previous(state, node, opts, None)
}

/// Like [`view`], but endpoints that were already in a server slot of `previous` keep
/// that slot (so an endpoint change moves nothing else, and the Runtime API diff is
/// minimal). Pass the view that is currently applied.
pub fn view_with_previous(
    state: &State,
    node: &NodeName,
    opts: &ViewOptions,
    previous: Option<&NodeView>,
) -> Result<NodeView, ViewError> {
    let mut notes = Vec::new();
    let keepalived = keepalived_view(state, node, opts, &mut notes)?;
    let mut skipped = Vec::new();
    let (haproxy, nginx) = match opts.proxy {
        Provider::Haproxy => {
            let prev = previous.and_then(|p| p.haproxy.as_ref());
            (
                Some(haproxy_view(state, opts, prev, &mut skipped, &mut notes)?),
                None,
            )
        }
        Provider::Nginx => (
            None,
            Some(nginx_view(state, opts, &mut skipped, &mut notes)?),
        ),
        Provider::Kubeproxy => (None, None),
    };
    let http = http_part(
        state,
        opts,
        previous.and_then(|p| p.http.as_ref()),
        &mut notes,
    )?;
    Ok(NodeView {
        node: node.clone(),
        proxy: opts.proxy,
        keepalived,
        haproxy,
        nginx,
        skipped,
        notes,
        http,
    })
}

/// The routes of the state for this node's proxy: every listener (a backup must be
/// ready to take any VIP), none for kubeproxy.
fn http_part(
    state: &State,
    opts: &ViewOptions,
    previous: Option<&HttpPart>,
    notes: &mut Vec<String>,
) -> Result<Option<HttpPart>, ViewError> {
    if state.http.is_empty() || !opts.proxy.has_proxy() {
        return Ok(None);
    }
    let cfg = &state.config;
    let o = HttpRenderOptions {
        pool_cert_dir: PathBuf::from(cfg.cert_path.as_str()),
        secret_cert_dir: opts.secret_cert_dir.clone(),
        files_dir: opts.routes_dir.clone(),
        httpfront: cfg.haproxy.httpfront.clone(),
        httpback: cfg.haproxy.httpback.clone(),
        tcpfront: cfg.haproxy.tcpfront.clone(),
        tcpback: cfg.haproxy.tcpback.clone(),
        nginx_http: cfg.nginx.http.clone(),
        nginx_proxy: cfg.nginx.proxy.clone(),
        nginx_upstream: cfg.nginx.upstream.clone(),
    };
    safe_path("secret certificate directory", &o.secret_cert_dir)?;
    safe_path("routes directory", &o.files_dir)?;
    let backends = match opts.proxy {
        Provider::Haproxy => route_backends(
            &state.http,
            previous.map(|p| p.backends.as_slice()).unwrap_or_default(),
        ),
        _ => Vec::new(),
    };
    if opts.proxy == Provider::Haproxy {
        // The plan never gives HAProxy a UDP stream; were one here, it is left out (a
        // comment in haproxy.cfg, as a Service's UDP port).
        for s in state.http.streams.iter().filter(|s| s.protocol.is_udp()) {
            notes.push(format!(
                "route stream {}/UDP skipped: {}",
                SocketAddr::new(s.ip, s.port),
                SkipReason::HaproxyUdp.as_str()
            ));
        }
    }
    let mut routes = state.http.clone();
    if opts.secret_certs.is_some() || opts.pool_certs.is_some() {
        without_absent_certs(
            &mut routes,
            opts.secret_certs.as_ref(),
            opts.pool_certs.as_ref(),
            &o.pool_cert_dir,
            notes,
        );
    }
    Ok(Some(HttpPart {
        routes,
        opts: o,
        backends,
    }))
}

/// Leave out of `routes` every Secret certificate that `present` (stem → version) does not
/// hold in the version named, and every pool certificate of a pool not in `pools` (the
/// admin's files in `pool_dir`), with a note each. `None`: that kind is not checked.
fn without_absent_certs(
    routes: &mut HttpRoutes,
    present: Option<&BTreeMap<String, String>>,
    pools: Option<&BTreeSet<PoolName>>,
    pool_dir: &std::path::Path,
    notes: &mut Vec<String>,
) {
    let usable = |f: &CertFile| match f {
        CertFile::Pool { pool } => pools.is_none_or(|p| p.contains(pool)),
        CertFile::Secret { .. } => present.is_none_or(|present| {
            present
                .get(&f.stem())
                .is_some_and(|v| f.version().is_empty() || v == f.version())
        }),
    };
    let mut absent = BTreeSet::new();
    for l in &mut routes.listeners {
        let Some(tls) = &mut l.tls else { continue };
        tls.certificates.retain(|c| {
            let ok = usable(&c.file);
            if !ok {
                absent.insert(c.file.clone());
            }
            ok
        });
        if tls.default_certificate.as_ref().is_some_and(|f| !usable(f)) {
            absent.extend(tls.default_certificate.take());
        }
    }
    for f in absent {
        if let CertFile::Pool { pool } = &f {
            notes.push(format!(
                "the certificate of pool {pool} ({}/{pool}.pem) is not on this node: its listeners' first certificate is their default",
                pool_dir.display()
            ));
            continue;
        }
        let why = match present.and_then(|p| p.get(&f.stem())) {
            None => "is not on this node yet".to_string(),
            Some(v) => format!("is on this node in version {v}, not {}", f.version()),
        };
        notes.push(format!(
            "the certificate of Secret {} (version {}) {why}: its hosts get the default certificate until it arrives",
            f.stem().replacen('_', "/", 1),
            f.version()
        ));
    }
}

/// Where files are on the node, and the admin's proxy lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRenderOptions {
    /// The pools' certificates (`<dir>/<pool>.pem`, nginx also `.key`): the state's `certPath`.
    pub pool_cert_dir: PathBuf,
    /// The Secrets' certificates, written by the actor: `<dir>/<namespace>_<name>.pem`.
    pub secret_cert_dir: PathBuf,
    /// Where the actor writes HAProxy's crt-list and map files ([`HaproxyRoutes::files`]).
    pub files_dir: PathBuf,
    /// Admin `haproxy.httpfront` / `haproxy.httpback` lines.
    pub httpfront: Vec<ConfigLine>,
    pub httpback: Vec<ConfigLine>,
    /// Admin `haproxy.tcpfront` / `haproxy.tcpback` lines: the L4 streams' frontends and
    /// backends get them, as a Service's TCP ports do.
    pub tcpfront: Vec<ConfigLine>,
    pub tcpback: Vec<ConfigLine>,
    /// Admin `nginx.http` lines (read only to see whether they size the server names
    /// hash themselves), `nginx.proxy` and `nginx.upstream` lines.
    pub nginx_http: Vec<ConfigLine>,
    pub nginx_proxy: Vec<ConfigLine>,
    pub nginx_upstream: Vec<ConfigLine>,
}

impl Default for HttpRenderOptions {
    fn default() -> Self {
        HttpRenderOptions {
            pool_cert_dir: "/etc/certs".into(),
            secret_cert_dir: "/run/k8slb/certs".into(),
            files_dir: "/run/k8slb/routes".into(),
            httpfront: Vec::new(),
            httpback: Vec::new(),
            tcpfront: Vec::new(),
            tcpback: Vec::new(),
            nginx_http: Vec::new(),
            nginx_proxy: Vec::new(),
            nginx_upstream: Vec::new(),
        }
    }
}

/// The HAProxy backend (and nginx upstream) of a route backend: `rtb_<ns>_<name>_<port>`
/// (Services' are `be_...`).
pub fn route_backend_name(id: &BackendId) -> String {
    format!(
        "rtb_{}_{}_{}",
        id.service.namespace, id.service.name, id.port
    )
}

/// The `mode tcp` HAProxy backend of a Service port that a TCP or TLS stream forwards
/// to: apart from its `mode http` [`route_backend_name`] (an HTTPRoute and a TCPRoute
/// may name the same port), same endpoints.
pub fn stream_backend_name(id: &BackendId) -> String {
    format!(
        "rtt_{}_{}_{}",
        id.service.namespace, id.service.name, id.port
    )
}

/// The backends the TCP and TLS streams of `routes` forward to (UDP streams are not
/// HAProxy's), in the table's order; an id missing from the table is left out (the
/// renderer notes it).
pub fn stream_backend_ids(routes: &HttpRoutes) -> BTreeSet<&BackendId> {
    routes
        .streams
        .iter()
        .filter(|s| !s.protocol.is_udp())
        .flat_map(|s| &s.routes)
        .flat_map(|r| &r.backends)
        .map(|b| &b.id)
        .filter(|id| routes.backends.contains_key(*id))
        .collect()
}

/// The HAProxy backends of `routes` with their server slots, `prev`'s slots kept (what
/// the node's view holds, so that an endpoint change is a Runtime API change): the
/// `mode http` ones of the HTTP rules (`rtb_*`, every backend of the table), then the
/// `mode tcp` ones of the TCP and TLS streams (`rtt_*`, [`stream_backend_ids`]). Both
/// kinds have the same server slots, so [`crate::render::runtime_diff`] applies an
/// endpoint change to either through the Runtime API.
pub fn route_backends(routes: &HttpRoutes, prev: &[Backend]) -> Vec<Backend> {
    let prev: HashMap<&str, &Backend> = prev.iter().map(|b| (b.name.as_str(), b)).collect();
    let v6 = routes.listeners.iter().any(|l| l.ip.is_ipv6())
        || routes.streams.iter().any(|s| s.ip.is_ipv6());
    let backend = |id: &BackendId, st: &BackendState, mode: Mode| {
        let name = match mode {
            Mode::Http => route_backend_name(id),
            Mode::Tcp => stream_backend_name(id),
        };
        let eps: Vec<(SocketAddr, bool)> = st
            .endpoints
            .iter()
            .map(|e| (SocketAddr::new(e.ip, e.port), e.draining))
            .collect();
        let slots = assign_slots(&eps, prev.get(name.as_str()).copied());
        Backend {
            mode,
            stick_source: matches!(st.stickiness, Some(Sticky::Source)).then_some(StickSource {
                table_type: if v6 { "ipv6" } else { "ip" },
                expire_s: 10800,
            }),
            // A cookie is HTTP: a tcp backend has none.
            cookie: mode == Mode::Http && matches!(st.stickiness, Some(Sticky::Cookie { .. })),
            // h2c backends (appProtocol kubernetes.io/h2c) speak HTTP/2 to the server;
            // only in http mode (a stream passes bytes).
            server_opts: if mode == Mode::Http && st.protocol == BackendProtocol::H2c {
                " check proto h2".into()
            } else {
                " check".into()
            },
            slots,
            name,
        }
    };
    let mut out: Vec<Backend> = routes
        .backends
        .iter()
        .map(|(id, st)| backend(id, st, Mode::Http))
        .collect();
    for id in stream_backend_ids(routes) {
        out.push(backend(id, &routes.backends[id], Mode::Tcp));
    }
    out
}

/// The lines that let a WebSocket handshake through an nginx location (HAProxy passes
/// one as it is): the client's `Upgrade` header, and `Connection: upgrade` when it sent
/// one (`$k8slb_connection`, a map of `$http_upgrade` the actor writes in every
/// nginx.conf: `render_http::nx_http_base`), else `close` as nginx sends by default.
/// nginx speaks HTTP/1.1 to backends with the default `nginx.proxy` lines
/// (`proxy_http_version 1.1`), which an upgrade needs. Left out for a header the
/// admin's `nginx.proxy` lines already set.
pub fn nginx_upgrade_lines(proxy: &[ConfigLine]) -> Vec<&'static str> {
    let sets = |h: &str| {
        proxy.iter().any(|l| {
            let mut w = l.as_str().split_whitespace();
            w.next() == Some("proxy_set_header")
                && w.next().is_some_and(|n| n.eq_ignore_ascii_case(h))
        })
    };
    let mut out = Vec::new();
    if !sets("Upgrade") {
        out.push("proxy_set_header Upgrade $http_upgrade;");
    }
    if !sets("Connection") {
        out.push("proxy_set_header Connection $k8slb_connection;");
    }
    out
}

/// `ms` as seconds with the fewest decimals (`100` -> `0.1`, `1000` -> `1`).
fn advert_int(ms: u32) -> Result<String, ViewError> {
    if !(10..=40950).contains(&ms) {
        return Err(ViewError::AdvertInt { ms });
    }
    // VRRPv3 has centisecond resolution: round to it.
    let cs = (ms + 5) / 10;
    let (whole, frac) = (cs / 100, cs % 100);
    Ok(match frac {
        0 => whole.to_string(),
        f if f % 10 == 0 => format!("{whole}.{}", f / 10),
        f => format!("{whole}.{f:02}"),
    })
}

fn keepalived_view(
    state: &State,
    node: &NodeName,
    opts: &ViewOptions,
    notes: &mut Vec<String>,
) -> Result<KeepalivedView, ViewError> {
    let cfg = &state.config.keepalived;
    for (&n, &priority) in &opts.priority_overrides {
        if !(1..=254).contains(&priority) {
            return Err(ViewError::PriorityOverride { n, priority });
        }
    }
    let email = cfg.email.as_ref().map(|to| EmailView {
        to: to.clone(),
        from: cfg.email_from.clone(),
        server: cfg.email_server.clone(),
        timeout_s: cfg.email_server_timeout_s,
    });
    let track_file = if opts.proxy.has_proxy() {
        Some(TrackFile {
            name: "k8slb_proxy",
            file: safe_path("track file", &opts.track_file)?,
            init: 1,
        })
    } else {
        None
    };

    let mut ordered: Vec<_> = state.instances.iter().collect();
    ordered.sort_by_key(|i| i.vrid);
    let mut instances = Vec::new();
    for (idx, inst) in ordered.into_iter().enumerate() {
        let Some(me) = inst.members.iter().find(|m| &m.node == node) else {
            continue;
        };
        if inst.vips.is_empty() {
            // keepalived refuses an instance without a VIP; the VRID stays reserved in
            // the state, so leaving the instance out loses nothing.
            notes.push(format!(
                "VRRP instance {} (pool {}) has no VIP; not rendered",
                inst.vrid, inst.pool
            ));
            continue;
        }
        let pool = state
            .config
            .pools
            .get(&inst.pool)
            .ok_or_else(|| ViewError::UnknownPool {
                pool: inst.pool.clone(),
                vrid: inst.vrid,
            })?;
        let interface = opts
            .interfaces
            .get(&inst.pool)
            .or(pool.interface.as_ref())
            .cloned()
            .ok_or_else(|| ViewError::NoInterface {
                pool: inst.pool.clone(),
                vrid: inst.vrid,
            })?;
        let max_prefix = match inst.family {
            Family::V4 => 32,
            Family::V6 => 128,
        };
        if pool.prefix_len > max_prefix {
            return Err(ViewError::PrefixLen {
                pool: inst.pool.clone(),
                prefix_len: pool.prefix_len,
            });
        }
        if !(1..=254).contains(&me.priority) {
            return Err(ViewError::Priority {
                node: node.clone(),
                vrid: inst.vrid,
                priority: me.priority,
            });
        }
        let owner = inst.owner() == Some(node);
        let n = idx as u32 + 1;
        let priority = match opts.priority_overrides.get(&n) {
            Some(&p) if !owner => p,
            _ => me.priority,
        };
        let mut vips = Vec::with_capacity(inst.vips.len());
        for vip in &inst.vips {
            if Family::of(vip) != inst.family {
                return Err(ViewError::VipFamily {
                    vip: *vip,
                    vrid: inst.vrid,
                });
            }
            vips.push(format!("{vip}/{}", pool.prefix_len));
        }
        let unicast = if cfg.unicast {
            let fam = |a: &&IpAddr| Family::of(a) == inst.family;
            let src = state
                .nodes
                .get(node)
                .and_then(|n| n.addresses.iter().find(fam))
                .or_else(|| opts.node_addresses.iter().find(fam))
                .copied();
            match src {
                Some(src) => {
                    let mut peers = Vec::new();
                    for m in inst.members.iter().filter(|m| &m.node != node) {
                        match state
                            .nodes
                            .get(&m.node)
                            .and_then(|n| n.addresses.iter().find(fam))
                        {
                            Some(a) => peers.push(*a),
                            None => notes.push(format!(
                                "VRRP instance {}: peer {} has no {:?} address; left out of unicast_peer",
                                inst.vrid, m.node, inst.family
                            )),
                        }
                    }
                    Some(Unicast { src, peers })
                }
                None => {
                    notes.push(format!(
                        "VRRP instance {}: this node has no {:?} address; using multicast",
                        inst.vrid, inst.family
                    ));
                    None
                }
            }
        } else {
            None
        };
        instances.push(InstanceView {
            name: format!("k8slb_{}_{}", inst.pool, inst.vrid),
            pool: inst.pool.clone(),
            vrid: inst.vrid,
            family: inst.family,
            interface,
            priority,
            owner,
            nopreempt: !(cfg.preempt || inst.preempt),
            unicast,
            anchor: anchor(inst.family, inst.vrid),
            vips,
        });
    }
    Ok(KeepalivedView {
        router_id: node.clone(),
        advert_int: advert_int(cfg.advert_int_ms)?,
        garp_master_delay: cfg.garp_master_delay_s,
        garp_master_repeat: cfg.garp_repeat,
        email,
        track_file,
        instances,
    })
}

/// The same allow-list as `CertPath`: what may be pasted into a config as a path.
pub fn safe_path(what: &'static str, p: &Path) -> Result<String, ViewError> {
    let bad = || ViewError::UnsafePath {
        what,
        path: p.to_path_buf(),
    };
    let s = p.to_str().ok_or_else(bad)?;
    let ok = s.starts_with('/')
        && s.len() <= 1024
        && !s.split('/').any(|c| c == "..")
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b));
    if ok {
        Ok(s.to_string())
    } else {
        Err(bad())
    }
}

/// First word of an admin line (for "is this directive already set").
fn first_word(l: &ConfigLine) -> &str {
    l.as_str()
        .split(|c: char| c.is_whitespace() || c == ';' || c == '{')
        .find(|w| !w.is_empty())
        .unwrap_or("")
}

fn family_suffix(ip: &IpAddr) -> &'static str {
    match ip {
        IpAddr::V4(_) => "v4",
        IpAddr::V6(_) => "v6",
    }
}

/// Server slots for a backend of `n` endpoints: `max(8, next_power_of_two(n + n/2))`.
/// The headroom is for a rolling update (Kubernetes' default surge is 25%, and
/// terminating endpoints drain in their slots meanwhile): a new slot count means a
/// reload, and with `next_power_of_two(n)` alone a Deployment of 8 or 16 replicas
/// reloaded on its first rolling update. Once grown, the count is kept while it fits.
pub fn slot_count(n: usize) -> usize {
    (n + n.div_ceil(2)).next_power_of_two().max(8)
}

/// Also used by `render_http` for the backends of L7 routes.
pub fn assign_slots(eps: &[(SocketAddr, bool)], prev: Option<&Backend>) -> Vec<Slot> {
    let fresh = slot_count(eps.len());
    if let Some(prev) = prev {
        let prev_n = prev.slots.len();
        // Keep the previous slot count while it fits and is not wildly oversized.
        let count = if eps.len() <= prev_n && prev_n <= fresh * 4 {
            prev_n
        } else {
            fresh
        };
        if count == prev_n {
            // Unchanged endpoints (the common case, by far): the previous slots as they
            // are. (Their occupied slots, in order, are exactly `eps`.)
            let occupied = prev
                .slots
                .iter()
                .filter_map(|s| s.endpoint.map(|ep| (ep, s.draining)));
            if eps.iter().copied().eq(occupied) {
                return prev.slots.clone();
            }
            let mut slots = vec![Slot::EMPTY; count];
            let wanted: HashMap<SocketAddr, bool> = eps.iter().copied().collect();
            let mut placed: HashMap<SocketAddr, ()> = HashMap::new();
            for (i, s) in prev.slots.iter().enumerate() {
                if let Some(ep) = s.endpoint {
                    if let Some(&draining) = wanted.get(&ep) {
                        if placed.insert(ep, ()).is_none() {
                            slots[i] = Slot {
                                endpoint: Some(ep),
                                draining,
                            };
                        }
                    }
                }
            }
            let free_list: Vec<usize> = (0..count)
                .filter(|&i| slots[i].endpoint.is_none())
                .collect();
            let mut free = free_list.into_iter();
            for &(ep, draining) in eps {
                if placed.contains_key(&ep) {
                    continue;
                }
                let i = free.next().expect("count >= number of endpoints");
                slots[i] = Slot {
                    endpoint: Some(ep),
                    draining,
                };
            }
            return slots;
        }
    }
    let mut slots: Vec<Slot> = eps
        .iter()
        .map(|&(ep, draining)| Slot {
            endpoint: Some(ep),
            draining,
        })
        .collect();
    slots.resize(fresh, Slot::EMPTY);
    slots
}

/// The lines templates/haproxy.cfg.tera writes in every http-mode frontend, which an
/// admin's `haproxy.httpfront` need not (and must not) repeat.
pub const HTTP_FRONTEND_LINES: [&str; 5] = [
    "option forwardfor",
    "http-request set-header X-Forwarded-Proto https if { ssl_fc }",
    "http-request set-header X-Forwarded-Proto http unless { ssl_fc }",
    "http-request set-header X-Forwarded-Port %[dst_port]",
    // k8slb's own default spelling.
    "http-request add-header X-Forwarded-Proto https if { ssl_fc }",
];

fn haproxy_view(
    state: &State,
    opts: &ViewOptions,
    prev: Option<&HaproxyView>,
    skipped: &mut Vec<Skipped>,
    notes: &mut Vec<String>,
) -> Result<HaproxyView, ViewError> {
    let cfg = &state.config.haproxy;
    let runtime_socket = safe_path("runtime socket", &opts.runtime_socket)?;
    let pid_file = safe_path("pid file", &opts.pid_file)?;
    let mut global = Vec::with_capacity(cfg.global.len());
    for l in &cfg.global {
        match first_word(l) {
            "pidfile" | "daemon" | "master-worker" => notes.push(format!(
                "haproxy.global line {:?} dropped: the actor sets it",
                l.as_str()
            )),
            _ => global.push(l.clone()),
        }
    }
    let default_global = [
        ("hard-stop-after", "hard-stop-after 30m"),
        ("mworker-max-reloads", "mworker-max-reloads 50"),
    ]
    .into_iter()
    .filter(|(w, _)| !global.iter().any(|l| first_word(l) == *w))
    .map(|(_, l)| l)
    .collect();
    let has_timeout = |which: &str| {
        cfg.defaults.iter().any(|l| {
            let mut w = l.as_str().split_whitespace();
            w.next() == Some("timeout") && w.next() == Some(which)
        })
    };
    // k8slb's default httpfront lines (and copies of them in admins' configs) repeat
    // what the template writes in every http frontend: drop them, with a note.
    let mut httpfront = Vec::with_capacity(cfg.httpfront.len());
    for l in &cfg.httpfront {
        let words: Vec<&str> = l.as_str().split_whitespace().collect();
        if HTTP_FRONTEND_LINES
            .iter()
            .any(|t| t.split_whitespace().eq(words.iter().copied()))
        {
            notes.push(format!(
                "haproxy.httpfront line {:?} dropped: every http frontend has it",
                l.as_str()
            ));
        } else {
            httpfront.push(l.clone());
        }
    }
    let default_timeouts = [
        ("connect", "timeout connect 5s"),
        ("client", "timeout client 30s"),
        ("server", "timeout server 30s"),
    ]
    .into_iter()
    .filter(|(w, _)| !has_timeout(w))
    .map(|(_, l)| l)
    .collect();

    let prev_backends: HashMap<&str, &Backend> = prev
        .map(|p| p.backends.iter().map(|b| (b.name.as_str(), b)).collect())
        .unwrap_or_default();
    let cert_dir = state.config.cert_path.as_str().trim_end_matches('/');

    let mut frontends = Vec::new();
    let mut backends = Vec::new();
    for (key, svc) in &state.services {
        if svc.ips.is_empty() {
            continue;
        }
        for p in &svc.ports {
            let skip = |reason| Skipped {
                service: key.clone(),
                port: p.port,
                protocol: p.protocol,
                reason,
            };
            match p.protocol {
                Protocol::Tcp => {}
                Protocol::Udp => {
                    skipped.push(skip(SkipReason::HaproxyUdp));
                    continue;
                }
                Protocol::Sctp => {
                    skipped.push(skip(SkipReason::Sctp));
                    continue;
                }
            }
            let crt = match (p.tls, &p.cert) {
                (false, _) => None,
                (true, Some(c)) => Some(format!("{cert_dir}/{c}.pem")),
                (true, None) => {
                    skipped.push(skip(SkipReason::TlsWithoutCert));
                    continue;
                }
            };
            let base = format!("{}_{}_{}", key.namespace, key.name, p.port);
            let be_name = format!("be_{base}");
            let source_ranges = (!p.source_ranges.is_empty()).then(|| {
                p.source_ranges
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            });
            let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
            for ip in &svc.ips {
                let fam = family_suffix(ip);
                let k = seen.entry(fam).or_default();
                *k += 1;
                let name = if *k == 1 {
                    format!("fe_{base}_{fam}")
                } else {
                    format!("fe_{base}_{fam}_{k}")
                };
                frontends.push(Frontend {
                    name,
                    bind: addr_text(SocketAddr::new(*ip, p.port)),
                    crt: crt.clone(),
                    mode: p.mode,
                    source_ranges: source_ranges.clone(),
                    redirect: p.redirect && p.mode == Mode::Http && !p.tls,
                    backend: be_name.clone(),
                    h2: p.app_protocol == BackendProtocol::H2c,
                });
            }

            let cookie = p.stickiness == Stickiness::Cookie && p.mode == Mode::Http;
            if p.stickiness == Stickiness::Cookie && !cookie {
                notes.push(format!(
                    "{key} port {}: cookie stickiness needs http mode; none applied",
                    p.port
                ));
            }
            let stick_source = (p.stickiness == Stickiness::Source).then(|| StickSource {
                table_type: if svc.ips.iter().any(|i| i.is_ipv6()) {
                    "ipv6"
                } else {
                    "ip"
                },
                expire_s: p.stickiness_timeout_s.max(1),
            });
            let mut server_opts = String::new();
            if p.check {
                server_opts.push_str(" check");
            }
            if p.backend_tls {
                server_opts.push_str(" ssl verify none");
            }
            if p.app_protocol == BackendProtocol::H2c {
                server_opts.push_str(" proto h2");
            }
            match p.proxy_protocol {
                Some(ProxyProtocol::V1) => server_opts.push_str(" send-proxy"),
                Some(ProxyProtocol::V2) => server_opts.push_str(" send-proxy-v2"),
                None => {}
            }
            if p.check && p.proxy_protocol.is_some() {
                server_opts.push_str(" check-send-proxy");
            }
            let eps: Vec<(SocketAddr, bool)> = p
                .endpoints
                .iter()
                .map(|e| (SocketAddr::new(e.ip, e.port), e.draining))
                .collect();
            let slots = assign_slots(&eps, prev_backends.get(be_name.as_str()).copied());
            backends.push(Backend {
                name: be_name,
                mode: p.mode,
                stick_source,
                cookie,
                server_opts,
                slots,
            });
        }
    }
    let maxconn = fit_haproxy(
        &mut global,
        cfg,
        &frontends,
        &backends,
        opts.fd_budget,
        notes,
    );
    Ok(HaproxyView {
        runtime_socket,
        pid_file,
        global,
        default_global,
        defaults: cfg.defaults.clone(),
        default_timeouts,
        tcpfront: cfg.tcpfront.clone(),
        httpfront,
        tcpback: cfg.tcpback.clone(),
        httpback: cfg.httpback.clone(),
        maxconn,
        frontends,
        backends,
    })
}

/// The index of the last line whose first word is `word`.
fn last_line(lines: &[ConfigLine], word: &str) -> Option<usize> {
    lines.iter().rposition(|l| first_word(l) == word)
}

/// The number after `keyword` in `lines[i]`.
fn number_in(
    lines: &[ConfigLine],
    i: usize,
    keyword: &str,
) -> Option<(std::ops::Range<usize>, u64)> {
    fdlimit::find_number(lines[i].as_str(), keyword)
}

/// `line` with the digits at `range` replaced by `n` (digits for digits: still a valid
/// `ConfigLine`).
fn with_number(line: &mut ConfigLine, range: std::ops::Range<usize>, n: u64) {
    let mut t = line.as_str().to_string();
    t.replace_range(range, &n.to_string());
    if let Ok(l) = t.parse() {
        *line = l;
    }
}

/// Fit the admin's global `maxconn` (and a `ulimit-n` above the limit) to `budget`;
/// returns the `maxconn` rendered, if one is configured (without one, HAProxy derives
/// its own from the limit).
fn fit_haproxy(
    global: &mut [ConfigLine],
    cfg: &k8slb_common::state::HaproxySections,
    frontends: &[Frontend],
    backends: &[Backend],
    budget: Option<FdBudget>,
    notes: &mut Vec<String>,
) -> Option<u64> {
    let i = last_line(global, "maxconn");
    let configured = i.and_then(|i| number_in(global, i, "maxconn"));
    let Some(budget) = budget else {
        return configured.map(|(_, v)| v);
    };
    let mut limit = budget.limit;
    if let Some(u) = last_line(global, "ulimit-n") {
        if let Some((r, v)) = number_in(global, u, "ulimit-n") {
            if v > budget.limit {
                with_number(&mut global[u], r, budget.limit);
                notes.push(format!(
                    "haproxy.global ulimit-n {v} lowered to {}: the open-files limit is {}",
                    budget.limit, budget.limit
                ));
            } else {
                limit = v;
            }
        }
    }
    let threads = last_line(global, "nbthread")
        .and_then(|t| number_in(global, t, "nbthread"))
        .map_or(budget.cpus, |(_, v)| v);
    let splice = [
        &*global,
        &cfg.defaults,
        &cfg.tcpfront,
        &cfg.httpfront,
        &cfg.tcpback,
        &cfg.httpback,
    ]
    .iter()
    .any(|ls| ls.iter().any(|l| l.as_str().contains("splice")));
    let fds = HaproxyFds {
        listeners: frontends.len() as u64 + 1,
        checks: backends
            .iter()
            .filter(|b| b.server_opts.contains(" check"))
            .map(|b| b.slots.len() as u64)
            .sum(),
        threads,
        splice,
    };
    let (i, (range, configured)) = (i?, configured?);
    let used = fds.fit(configured, limit);
    if fds.needed(used) > limit {
        notes.push(format!(
            "haproxy.global maxconn {configured}: the open-files limit {limit} is too low even \
             for the {} listeners and {} checked servers; HAProxy cannot start until it is raised",
            fds.listeners, fds.checks
        ));
    }
    if used < configured {
        with_number(&mut global[i], range, used);
        notes.push(format!(
            "haproxy.global maxconn {configured} lowered to {used}: the open-files limit is \
             {limit} (HAProxy needs 2 descriptors per connection, plus one per listener and \
             per checked server, 3 per thread and {} more)",
            fdlimit::HAPROXY_BASE_FDS + fdlimit::FD_MARGIN,
        ));
    }
    Some(used)
}

/// nginx's default `worker_connections` (its own, 512, is 256 proxied connections).
pub const NGINX_WORKER_CONNECTIONS: u64 = 16384;

/// Fit nginx's `worker_rlimit_nofile` and `worker_connections` (the actor's default
/// events block, or the admin's `events { worker_connections N; }` line) to `budget`;
/// returns the `worker_connections` rendered, if known.
fn fit_nginx(
    global: &mut [ConfigLine],
    add_events: bool,
    budget: Option<FdBudget>,
    notes: &mut Vec<String>,
) -> Option<u64> {
    let mut nofile = budget.map(|b| b.limit);
    if let (Some(b), Some(i)) = (budget, last_line(global, "worker_rlimit_nofile")) {
        if let Some((r, v)) = number_in(global, i, "worker_rlimit_nofile") {
            if v > b.limit {
                with_number(&mut global[i], r, b.limit);
                notes.push(format!(
                    "nginx.global worker_rlimit_nofile {v} lowered to {}: the open-files limit is {}",
                    b.limit, b.limit
                ));
            } else {
                nofile = Some(v);
            }
        }
    }
    if add_events {
        let used = nofile.map_or(NGINX_WORKER_CONNECTIONS, |n| {
            fdlimit::nginx_worker_connections(NGINX_WORKER_CONNECTIONS, n)
        });
        if used < NGINX_WORKER_CONNECTIONS {
            notes.push(format!(
                "nginx worker_connections {NGINX_WORKER_CONNECTIONS} (the actor's default) lowered to {used}: \
                 the open-files limit per worker is {}",
                nofile.unwrap_or_default()
            ));
        }
        return Some(used);
    }
    // The admin's events block: one line (`events { worker_connections N; }`) or
    // several (`events {`, `worker_connections N;`, `}`).
    let start = global.iter().position(|l| first_word(l) == "events")?;
    let (i, (range, configured)) = (start..global.len())
        .find_map(|i| Some((i, number_in(global, i, "worker_connections")?)))?;
    let used = nofile.map_or(configured, |n| {
        fdlimit::nginx_worker_connections(configured, n)
    });
    if used < configured {
        with_number(&mut global[i], range, used);
        notes.push(format!(
            "nginx.global worker_connections {configured} lowered to {used}: the open-files limit per worker is {}",
            nofile.unwrap_or_default()
        ));
    }
    Some(used)
}

/// Debian's path of the dynamic stream module.
pub const NGINX_STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

fn nginx_view(
    state: &State,
    opts: &ViewOptions,
    skipped: &mut Vec<Skipped>,
    notes: &mut Vec<String>,
) -> Result<NginxView, ViewError> {
    let cfg = &state.config.nginx;
    let pid_file = safe_path("pid file", &opts.pid_file)?;
    let mut global = Vec::with_capacity(cfg.global.len());
    for l in &cfg.global {
        if first_word(l) == "pid" {
            notes.push(format!(
                "nginx.global line {:?} dropped: the actor sets pid",
                l.as_str()
            ));
        } else {
            global.push(l.clone());
        }
    }
    let add_events = !global.iter().any(|l| first_word(l) == "events");
    let loads_stream = global.iter().any(|l| {
        let w = first_word(l);
        (w == "load_module" && l.as_str().contains("ngx_stream_module"))
            || (w == "include" && l.as_str().contains("modules-enabled"))
    });
    let cert_dir = state.config.cert_path.as_str().trim_end_matches('/');

    let mut http_servers = Vec::new();
    let mut stream_servers = Vec::new();
    for (key, svc) in &state.services {
        if svc.ips.is_empty() {
            continue;
        }
        for p in &svc.ports {
            let skip = |reason| Skipped {
                service: key.clone(),
                port: p.port,
                protocol: p.protocol,
                reason,
            };
            let udp = match p.protocol {
                Protocol::Tcp => false,
                Protocol::Udp => true,
                Protocol::Sctp => {
                    skipped.push(skip(SkipReason::Sctp));
                    continue;
                }
            };
            let l7 = p.mode == Mode::Http && !udp;
            if l7 && p.proxy_protocol.is_some() {
                skipped.push(skip(SkipReason::NginxHttpProxyProtocol));
                continue;
            }
            let cert = match (p.tls && !udp, &p.cert) {
                (false, _) => None,
                (true, Some(c)) => Some(format!("{cert_dir}/{c}")),
                (true, None) => {
                    skipped.push(skip(SkipReason::TlsWithoutCert));
                    continue;
                }
            };
            let mut servers: Vec<NginxUpstreamServer> = p
                .endpoints
                .iter()
                .map(|e| NginxUpstreamServer {
                    addr: addr_text(SocketAddr::new(e.ip, e.port)),
                    down: e.draining,
                })
                .collect();
            if servers.is_empty() {
                // An empty upstream is a config error; a down placeholder is valid (502).
                servers.push(NginxUpstreamServer {
                    addr: addr_text(PLACEHOLDER),
                    down: true,
                });
            }
            if p.stickiness == Stickiness::Cookie {
                notes.push(format!(
                    "{key} port {}: nginx has no cookie stickiness; using the client address",
                    p.port
                ));
            }
            if udp && p.proxy_protocol.is_some() {
                notes.push(format!(
                    "{key} port {}/UDP: PROXY protocol not sent over UDP",
                    p.port
                ));
            }
            let mut upstream = format!("up_{}_{}_{}", key.namespace, key.name, p.port);
            if !l7 {
                upstream.push_str(if udp { "_udp" } else { "_tcp" });
            }
            let s = NginxServer {
                upstream,
                listens: svc
                    .ips
                    .iter()
                    .map(|ip| addr_text(SocketAddr::new(*ip, p.port)))
                    .collect(),
                udp,
                cert,
                allow: p
                    .source_ranges
                    .iter()
                    .filter(|n| !k8slb_common::state::is_fail_closed_source_range(n))
                    .cloned()
                    .collect(),
                deny_all: !p.source_ranges.is_empty(),
                redirect: l7 && p.redirect && !p.tls,
                backend_tls: p.backend_tls,
                h2c: l7 && p.app_protocol == BackendProtocol::H2c,
                proxy_protocol: !udp && p.proxy_protocol.is_some(),
                hash_source: p.stickiness != Stickiness::None,
                servers,
            };
            if l7 {
                http_servers.push(s);
            } else {
                stream_servers.push(s);
            }
        }
    }
    // The routes' L4 streams are rendered in `stream { }` too (render_http).
    let has_stream =
        !stream_servers.is_empty() || !cfg.stream.is_empty() || !state.http.streams.is_empty();
    let worker_connections = fit_nginx(&mut global, add_events, opts.fd_budget, notes);
    Ok(NginxView {
        pid_file,
        global,
        add_events,
        worker_connections,
        stream_module: (has_stream && !loads_stream).then_some(NGINX_STREAM_MODULE),
        http: cfg.http.clone(),
        proxy: cfg.proxy.clone(),
        upgrade: nginx_upgrade_lines(&cfg.proxy),
        upstream: cfg.upstream.clone(),
        stream: cfg.stream.clone(),
        http_servers,
        stream_servers,
        has_stream,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_address_text_is_display_text() {
        for a in [
            "0.0.0.0:0",
            "10.1.2.3:8080",
            "255.255.255.255:65535",
            "127.0.0.1:1",
            "[::]:0",
            "[fd00::1]:443",
            "[2001:db8::ffff:1.2.3.4]:80",
        ] {
            let a: SocketAddr = a.parse().unwrap();
            let mut s = String::new();
            push_socket_addr(&mut s, a);
            assert_eq!(s, a.to_string());
        }
        for n in [0u32, 1, 9, 10, 99, 100, 65535, u32::MAX] {
            let mut s = String::new();
            push_u32(&mut s, n);
            assert_eq!(s, n.to_string());
        }
    }

    #[test]
    fn advert_int_seconds() {
        assert_eq!(advert_int(100).unwrap(), "0.1");
        assert_eq!(advert_int(1000).unwrap(), "1");
        assert_eq!(advert_int(1500).unwrap(), "1.5");
        assert_eq!(advert_int(10).unwrap(), "0.01");
        assert_eq!(advert_int(250).unwrap(), "0.25");
        assert_eq!(advert_int(40950).unwrap(), "40.95");
        assert!(advert_int(0).is_err());
        assert!(advert_int(40960).is_err());
    }

    #[test]
    fn slots() {
        assert_eq!(slot_count(0), 8);
        assert_eq!(slot_count(5), 8);
        // 8 replicas + a 25% surge + 2 still draining fit without a reload.
        assert_eq!(slot_count(8), 16);
        assert!(slot_count(8) >= 8 + 2 + 2);
        assert_eq!(slot_count(10), 16);
        assert_eq!(slot_count(11), 32);
        assert_eq!(slot_count(16), 32);
        let a: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let c: SocketAddr = "10.0.0.3:80".parse().unwrap();
        let first = assign_slots(&[(a, false), (b, false), (c, false)], None);
        let prev = Backend {
            name: "be".into(),
            mode: Mode::Tcp,
            stick_source: None,
            cookie: false,
            server_opts: String::new(),
            slots: first,
        };
        // b leaves, a new endpoint 10.0.0.0 (sorted first) arrives: a and c stay put.
        let z: SocketAddr = "10.0.0.0:80".parse().unwrap();
        let next = assign_slots(&[(z, false), (a, false), (c, true)], Some(&prev));
        assert_eq!(next[0].endpoint, Some(a));
        assert_eq!(next[1].endpoint, Some(z));
        assert_eq!(next[2].endpoint, Some(c));
        assert!(next[2].draining);
        assert_eq!(next.len(), 8);
        // Unchanged endpoints keep every slot, whether the slots hold them in the
        // endpoints' order (first) or not (next: z sits after a).
        for slots in [prev.slots.clone(), next.clone()] {
            let eps: Vec<(SocketAddr, bool)> = [z, a, b, c]
                .iter()
                .filter_map(|ep| {
                    slots
                        .iter()
                        .find(|s| s.endpoint == Some(*ep))
                        .map(|s| (*ep, s.draining))
                })
                .collect();
            let be = Backend {
                slots: slots.clone(),
                ..prev.clone()
            };
            assert_eq!(assign_slots(&eps, Some(&be)), slots);
        }
    }

    #[test]
    fn haproxy_global_defaults_unless_the_admin_sets_them() {
        let mut state = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
        let node: NodeName = "n1".parse().unwrap();
        let opts = ViewOptions::new(Provider::Haproxy);
        let v = view(&state, &node, &opts).unwrap();
        assert_eq!(
            v.haproxy.unwrap().default_global,
            ["hard-stop-after 30m", "mworker-max-reloads 50"]
        );
        state.config.haproxy.global = vec!["hard-stop-after 5m".parse().unwrap()];
        let v = view(&state, &node, &opts).unwrap();
        let hp = v.haproxy.unwrap();
        assert_eq!(hp.default_global, ["mworker-max-reloads 50"]);
        assert_eq!(hp.global.len(), 1);
    }

    #[test]
    fn httpfront_lines_the_template_writes_are_dropped_once() {
        let mut state = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
        let node: NodeName = "n1".parse().unwrap();
        let opts = ViewOptions::new(Provider::Haproxy);
        // k8slb's defaults, spaced differently, and one line of the admin's own.
        state.config.haproxy.httpfront = [
            "option  forwardfor",
            "http-request add-header X-Forwarded-Proto https if { ssl_fc }",
            "http-request set-header X-Real-IP %[src]",
        ]
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
        let v = view(&state, &node, &opts).unwrap();
        let kept: Vec<&str> = v
            .haproxy
            .as_ref()
            .unwrap()
            .httpfront
            .iter()
            .map(|l| l.as_str())
            .collect();
        assert_eq!(kept, ["http-request set-header X-Real-IP %[src]"]);
        assert_eq!(
            v.notes
                .iter()
                .filter(|n| n.contains("every http frontend has it"))
                .count(),
            2,
            "{:?}",
            v.notes
        );
        // The template itself writes each of them exactly once per http frontend.
        let tpl = include_str!("../../templates/haproxy.cfg.tera");
        for l in &HTTP_FRONTEND_LINES[..4] {
            assert_eq!(tpl.matches(l).count(), 1, "{l}");
        }
    }

    /// Issue 9: `maxconn 20000` under a hard limit of 20,000 made HAProxy exit at start.
    #[test]
    fn proxy_limits_are_lowered_to_the_open_files_limit_never_raised() {
        let mut state = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
        state.config.haproxy.global = vec!["maxconn 20000".parse().unwrap()];
        let node: NodeName = "n1".parse().unwrap();
        let mut opts = ViewOptions::new(Provider::Haproxy);
        let maxconn = |v: &NodeView| {
            v.haproxy
                .as_ref()
                .unwrap()
                .global
                .iter()
                .map(|l| l.as_str().to_string())
                .find(|l| l.starts_with("maxconn"))
        };
        // No budget: as configured.
        let v = view(&state, &node, &opts).unwrap();
        assert_eq!(maxconn(&v).as_deref(), Some("maxconn 20000"));
        assert_eq!(v.proxy_maxconn(), Some(20000));
        // Under 4096: lowered, with a note naming the configured value, the limit and
        // the value used.
        opts.fd_budget = Some(FdBudget {
            limit: 4096,
            cpus: 2,
        });
        let v = view(&state, &node, &opts).unwrap();
        assert_eq!(maxconn(&v).as_deref(), Some("maxconn 2000"));
        assert_eq!(v.proxy_maxconn(), Some(2000));
        let note: Vec<&String> = v.notes.iter().filter(|n| n.contains("maxconn")).collect();
        assert_eq!(note.len(), 1, "{:?}", v.notes);
        assert!(
            note[0].starts_with(
                "haproxy.global maxconn 20000 lowered to 2000: the open-files limit is 4096"
            ),
            "{}",
            note[0]
        );
        // Too many listeners for the limit: said plainly.
        let mut tight = opts.clone();
        tight.fd_budget = Some(FdBudget { limit: 50, cpus: 2 });
        let v = view(&state, &node, &tight).unwrap();
        assert!(
            v.notes
                .iter()
                .any(|n| n.contains("too low even for the 1 listeners")),
            "{:?}",
            v.notes
        );
        // A value that fits is never raised, and no note.
        state.config.haproxy.global = vec![
            "maxconn 500".parse().unwrap(),
            "ulimit-n 100000".parse().unwrap(),
        ];
        let v = view(&state, &node, &opts).unwrap();
        assert_eq!(maxconn(&v).as_deref(), Some("maxconn 500"));
        let hp = v.haproxy.as_ref().unwrap();
        assert_eq!(hp.global[1].as_str(), "ulimit-n 4096");
        assert!(
            !v.notes.iter().any(|n| n.contains("maxconn")),
            "{:?}",
            v.notes
        );
        assert!(v
            .notes
            .iter()
            .any(|n| n.contains("ulimit-n 100000 lowered to 4096")));

        // nginx: the default events block and an admin's worker_rlimit_nofile.
        let mut opts = ViewOptions::new(Provider::Nginx);
        state.config.nginx.global = vec![];
        let v = view(&state, &node, &opts).unwrap();
        assert_eq!(v.proxy_maxconn(), Some(NGINX_WORKER_CONNECTIONS));
        opts.fd_budget = Some(FdBudget {
            limit: 4096,
            cpus: 2,
        });
        state.config.nginx.global = vec!["worker_rlimit_nofile 65536;".parse().unwrap()];
        let v = view(&state, &node, &opts).unwrap();
        let nx = v.nginx.as_ref().unwrap();
        assert_eq!(nx.global[0].as_str(), "worker_rlimit_nofile 4096;");
        assert_eq!(
            nx.worker_connections,
            Some(4096 - crate::fdlimit::FD_MARGIN)
        );
        // The admin's own events block: its worker_connections is fitted too.
        state.config.nginx.global = vec!["events { worker_connections 100000; multi_accept on; }"
            .parse()
            .unwrap()];
        let v = view(&state, &node, &opts).unwrap();
        let nx = v.nginx.as_ref().unwrap();
        assert_eq!(
            nx.global[0].as_str(),
            format!(
                "events {{ worker_connections {}; multi_accept on; }}",
                4096 - crate::fdlimit::FD_MARGIN
            )
        );
        assert!(!nx.add_events);
        // ... also over several lines (as in k8slb's sample config).
        let state = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
        let v = view(&state, &node, &opts).unwrap();
        assert_eq!(v.proxy_maxconn(), Some(1024));
        opts.fd_budget = Some(FdBudget {
            limit: 1000,
            cpus: 2,
        });
        let v = view(&state, &node, &opts).unwrap();
        assert_eq!(v.proxy_maxconn(), Some(1000 - crate::fdlimit::FD_MARGIN));
        assert!(v
            .nginx
            .as_ref()
            .unwrap()
            .global
            .iter()
            .any(|l| l.as_str()
                == format!("  worker_connections {};", 1000 - crate::fdlimit::FD_MARGIN)));
    }

    #[test]
    fn safe_paths() {
        assert!(safe_path("x", Path::new("/run/k8slb/haproxy.sock")).is_ok());
        for bad in ["run/x", "/a b", "/a\nb", "/a/../b", "/a;b", "/a{b"] {
            assert!(safe_path("x", Path::new(bad)).is_err(), "{bad:?}");
        }
    }
}
