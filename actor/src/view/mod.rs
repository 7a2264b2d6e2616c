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

mod fds;
mod haproxy;
mod keepalived;
mod nginx;
#[cfg(test)]
mod tests;

use crate::fdlimit::FdBudget;
pub use fds::FD_SHORTFALL;
use haproxy::haproxy_view;
pub use haproxy::{
    assign_slots, backend_copies, ca_file, client_cert_backend_name, route_backend_name,
    route_backends, slot_count, stream_backend_ids, stream_backend_name, weighted_backend_name,
    Backend, BackendCopy, Frontend, HaproxyView, Slot, StickSource, HTTP_FRONTEND_LINES,
    PLACEHOLDER,
};
use k8slb_common::names::{ConfigLine, IfName, NodeName, PoolName, ServiceKey};
use k8slb_common::routes::{CertFile, HttpRoutes, RouteAction};
use k8slb_common::state::{Protocol, Provider, State};
use keepalived::keepalived_view;
pub use keepalived::{anchor, EmailView, InstanceView, KeepalivedView, TrackFile, Unicast};
use nginx::nginx_view;
pub use nginx::{
    nginx_upgrade_lines, NginxServer, NginxUpstreamServer, NginxView, NGINX_STREAM_MODULE,
    NGINX_WORKER_CONNECTIONS,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
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
    /// Where the proxy binds its internal hops' unix sockets (a TLS port of both modes;
    /// HAProxy's conditional hosts and RequestMirror: [`HttpRenderOptions::hop_dir`]);
    /// the actor makes it, 0700.
    pub hop_dir: PathBuf,
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
            hop_dir: PathBuf::from("/run/k8slb/hop"),
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

/// `n` in decimal, without `fmt` (the server lines of a 10,000-Service render are
/// 200,000 lines; `write!` made them a quarter of the render time).
pub(super) fn push_u32(out: &mut String, n: u32) {
    if n >= 10 {
        push_u32(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

/// `addr.to_string()`, faster (see [`push_socket_addr`]).
pub(super) fn addr_text(addr: SocketAddr) -> String {
    let mut s = String::with_capacity(21);
    push_socket_addr(&mut s, addr);
    s
}

/// `a.b.c.d:port` for IPv4 without `fmt`; IPv6 through `Display` (`[addr]:port`, the
/// same text `SocketAddr::to_string` gives).
pub(super) fn push_socket_addr(out: &mut String, addr: SocketAddr) {
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
        hop_dir: opts.hop_dir.clone(),
        httpfront: cfg.haproxy.httpfront.clone(),
        httpback: cfg.haproxy.httpback.clone(),
        tcpfront: cfg.haproxy.tcpfront.clone(),
        tcpback: cfg.haproxy.tcpback.clone(),
        nginx_http: cfg.nginx.http.clone(),
        nginx_proxy: cfg.nginx.proxy.clone(),
        nginx_upstream: cfg.nginx.upstream.clone(),
        nginx_stream: cfg.nginx.stream.clone(),
    };
    safe_path("secret certificate directory", &o.secret_cert_dir)?;
    let files_dir = safe_path("routes directory", &o.files_dir)?;
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
    let backends = match opts.proxy {
        Provider::Haproxy => route_backends(
            &routes,
            previous.map(|p| p.backends.as_slice()).unwrap_or_default(),
            &files_dir,
            &|c| client_cert_file(c, &o),
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
    Ok(Some(HttpPart {
        routes,
        opts: o,
        backends,
    }))
}

/// Where client certificate `c` (chain, then key: what HAProxy's `crt` and nginx's
/// `proxy_ssl_certificate` and `_key` read) is on the node: `<dir>/<stem>.pem`, the
/// directories of `o` (checked by [`http_part`]).
pub fn client_cert_file(c: &CertFile, o: &HttpRenderOptions) -> String {
    let dir = match c {
        CertFile::Pool { .. } => &o.pool_cert_dir,
        CertFile::Secret { .. } => &o.secret_cert_dir,
    };
    format!(
        "{}/{}.pem",
        dir.to_string_lossy().trim_end_matches('/'),
        c.stem()
    )
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
    // HTTPS listeners' and terminating TLS listeners' (a terminating listener left
    // without any refuses its connections).
    let settings = routes
        .listeners
        .iter_mut()
        .filter_map(|l| l.tls.as_mut())
        .chain(
            routes
                .streams
                .iter_mut()
                .filter_map(|s| s.terminate.as_mut()),
        );
    for tls in settings {
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
    // A client certificate not on the node (or not in the version named): its
    // backends become the rule's invalid share (500), never reached without it.
    let mut absent_clients = BTreeSet::new();
    for l in &mut routes.listeners {
        let actions = l
            .virtual_hosts
            .iter_mut()
            .flat_map(|v| &mut v.rules)
            .map(|r| &mut r.action)
            .chain(l.default_action.as_mut());
        for a in actions {
            let RouteAction::Forward { backends, invalid } = a else {
                continue;
            };
            backends.retain(|b| match &b.client_certificate {
                Some(c) if !usable(c) => {
                    *invalid = invalid.saturating_add(b.weight.max(1));
                    absent_clients.insert(c.clone());
                    false
                }
                _ => true,
            });
        }
    }
    for f in &absent_clients {
        notes.push(format!(
            "the client certificate of Secret {} (version {}) is not on this node yet: the requests that present it to TLS backends get 500 until it arrives",
            f.stem().replacen('_', "/", 1),
            f.version()
        ));
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
    /// Where the proxy binds the unix sockets of its internal hops: on a TLS port of
    /// both modes (TLSRouteModeMixed) the passthrough frontend hands connections to
    /// sockets here, with a PROXY protocol header (HAProxy `unix@`, the terminating
    /// listeners'; nginx `unix:`, all of them); HAProxy's listener frontends hand a
    /// conditional host's requests to its frontend here (`rtv_*.sock`, with a PROXY
    /// header too), and RequestMirror's copies go through `k8slb_mirror.sock`
    /// (`render::haproxy::hop_socket`). A directory only the proxy's user may
    /// enter (the actor makes it 0700, root's; for nginx 0710, its workers' group may
    /// enter it to connect); never in
    /// `files_dir`, whose other entries the actor removes.
    pub hop_dir: PathBuf,
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
    /// Admin `nginx.stream` lines (read only to see whether they size the maps' hash
    /// themselves).
    pub nginx_stream: Vec<ConfigLine>,
}

impl Default for HttpRenderOptions {
    fn default() -> Self {
        HttpRenderOptions {
            pool_cert_dir: "/etc/certs".into(),
            secret_cert_dir: "/run/k8slb/certs".into(),
            files_dir: "/run/k8slb/routes".into(),
            hop_dir: "/run/k8slb/hop".into(),
            httpfront: Vec::new(),
            httpback: Vec::new(),
            tcpfront: Vec::new(),
            tcpback: Vec::new(),
            nginx_http: Vec::new(),
            nginx_proxy: Vec::new(),
            nginx_upstream: Vec::new(),
            nginx_stream: Vec::new(),
        }
    }
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
pub(super) fn first_word(l: &ConfigLine) -> &str {
    l.as_str()
        .split(|c: char| c.is_whitespace() || c == ';' || c == '{')
        .find(|w| !w.is_empty())
        .unwrap_or("")
}
