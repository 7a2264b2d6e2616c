//! The HAProxy part of a node's view: frontends and backends for the Services, server
//! slots ([`assign_slots`]), the routes' backends (computed once here, rendered by
//! [`crate::render::haproxy`]) and the limits fitted to the open-files budget.

use super::keepalived::family_suffix;
use super::{
    addr_text, first_word, push_socket_addr, push_u32, safe_path, SkipReason, Skipped, ViewError,
    ViewOptions,
};
use crate::fdlimit::{self, FdBudget, HaproxyFds};
use k8slb_common::app_protocol::BackendProtocol;
use k8slb_common::names::{ConfigLine, ServiceKey};
use k8slb_common::routes::{
    BackendId, BackendState, CertFile, HttpRoutes, Retry, RouteAction, Sticky, WeightedBackend,
};
use k8slb_common::state::{Mode, PortState, Protocol, ProxyProtocol, State, Stickiness};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

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
    /// A route backend's copy ([`BackendCopy`]): the backend whose
    /// servers its servers `track` (same slots), instead of checking on their own.
    pub track: Option<String>,
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
        match &self.track {
            None => l.push_str(&self.server_opts),
            Some(base) => {
                let opts = &self.server_opts;
                l.push_str(opts.strip_prefix(" check").unwrap_or(opts));
                l.push_str(" track ");
                l.push_str(base);
                l.push_str("/s");
                push_u32(l, n as u32);
            }
        }
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

/// The copy of route backend `id` whose servers present client certificate `c` (a
/// Gateway's `spec.tls.backend.clientCertificateRef`):
/// `rtb_<ns>_<name>_<port>_c<namespace>_<secret>` ([`CertFile::stem`]: neither part
/// holds `_`, and a retry key starts with `r`, so no other backend's name is this one).
pub fn client_cert_backend_name(id: &BackendId, c: &CertFile) -> String {
    format!("{}_c{}", route_backend_name(id), c.stem())
}

/// The HAProxy backend a rule's weighted backend `b` goes to: its route backend, or the
/// copy that presents its client certificate ([`client_cert_backend_name`]).
pub fn weighted_backend_name(b: &WeightedBackend) -> String {
    match &b.client_certificate {
        None => route_backend_name(&b.id),
        Some(c) => client_cert_backend_name(&b.id, c),
    }
}

/// A copy of a route backend: the same servers (tracking the route backend's), with
/// other options. `cert`: its servers present that client certificate; `retry`: it
/// retries with that policy, `<name>_<key>` ([`Retry::key`]; the frontend picks it by
/// the rule's `txn.k8slb_rt`, as HAProxy's `retries` and `retry-on` are backend
/// keywords).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BackendCopy<'a> {
    pub id: &'a BackendId,
    pub cert: Option<&'a CertFile>,
    pub retry: Option<&'a Retry>,
}

impl BackendCopy<'_> {
    pub fn name(&self) -> String {
        let base = match self.cert {
            None => route_backend_name(self.id),
            Some(c) => client_cert_backend_name(self.id, c),
        };
        match self.retry {
            None => base,
            Some(r) => format!("{base}_{}", r.key()),
        }
    }
}

/// The copies of route backends that the forwarding rules of `routes` may send to, for
/// the backends in the table: each (backend, client certificate) that a weighted
/// backend presents, and each of those and of the route backends themselves with the
/// retry policy of a rule that has one (every backend of its split, weight 0 too).
pub fn backend_copies(routes: &HttpRoutes) -> BTreeSet<BackendCopy<'_>> {
    let mut out = BTreeSet::new();
    let forwards = routes
        .listeners
        .iter()
        .flat_map(|l| {
            l.virtual_hosts
                .iter()
                .flat_map(|v| &v.rules)
                .map(|r| (&r.action, r.filters.retry.as_ref()))
                .chain(l.default_action.iter().map(|a| (a, None)))
        })
        .filter_map(|(a, retry)| match a {
            RouteAction::Forward { backends, .. } => Some((backends, retry)),
            _ => None,
        });
    for (backends, retry) in forwards {
        for b in backends
            .iter()
            .filter(|b| routes.backends.contains_key(&b.id))
        {
            let cert = b.client_certificate.as_ref();
            if cert.is_some() {
                out.insert(BackendCopy {
                    id: &b.id,
                    cert,
                    retry: None,
                });
            }
            if retry.is_some() {
                out.insert(BackendCopy {
                    id: &b.id,
                    cert,
                    retry,
                });
            }
        }
    }
    out
}

/// The HAProxy backends of `routes` with their server slots, `prev`'s slots kept (what
/// the node's view holds, so that an endpoint change is a Runtime API change): the
/// `mode http` ones of the HTTP rules (`rtb_*`, every backend of the table), their
/// copies ([`backend_copies`]: presenting a client certificate, retrying), then the
/// `mode tcp` ones of the TCP and TLS streams (`rtt_*`, [`stream_backend_ids`]). Both
/// kinds have the same server slots, so [`crate::render::runtime_diff`] applies an
/// endpoint change to either through the Runtime API.
///
/// `files_dir`: the routes' files directory (checked by the caller), where a backend's
/// CA bundle is ([`ca_file`]); `cert_file`: where a client certificate's PEM (chain
/// and key) is on the node.
pub fn route_backends(
    routes: &HttpRoutes,
    prev: &[Backend],
    files_dir: &str,
    cert_file: &dyn Fn(&CertFile) -> String,
) -> Vec<Backend> {
    let prev: HashMap<&str, &Backend> = prev.iter().map(|b| (b.name.as_str(), b)).collect();
    let v6 = routes.listeners.iter().any(|l| l.ip.is_ipv6())
        || routes.streams.iter().any(|s| s.ip.is_ipv6());
    let backend = |name: String, st: &BackendState, mode: Mode| {
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
            server_opts: {
                let mut o = String::from(" check");
                // TLS to the endpoints (a BackendTLSPolicy), verified: the chain against
                // the bundle, the name against the SNI sent (health checks inherit it).
                if let (Mode::Http, Some(t)) = (mode, &st.tls) {
                    let name = t.server_name.as_str();
                    o.push_str(&format!(
                        " ssl verify required ca-file {} sni str({name}) verifyhost {name} check-sni {name}",
                        ca_file(files_dir, &t.ca)
                    ));
                    if st.protocol == BackendProtocol::H2c {
                        o.push_str(" alpn h2");
                    }
                }
                if mode == Mode::Http && st.protocol == BackendProtocol::H2c {
                    o.push_str(" proto h2");
                }
                o
            },
            slots,
            name,
            track: None,
        }
    };
    let mut out: Vec<Backend> = routes
        .backends
        .iter()
        .map(|(id, st)| backend(route_backend_name(id), st, Mode::Http))
        .collect();
    // The copies (client certificates, retries): the base's slots exactly (so the
    // Runtime API sets them alike), each server tracking the base's of its slot (no
    // health checks of their own: a copy costs the endpoints nothing). A copy that
    // presents a client certificate adds `crt` to the servers' TLS options (only a TLS
    // backend's rules carry one).
    let bases: HashMap<&BackendId, usize> = routes
        .backends
        .keys()
        .enumerate()
        .map(|(i, id)| (id, i))
        .collect();
    let copies = backend_copies(routes);
    // A TLS backend that some rule reaches with a client certificate may refuse a
    // handshake without one: its checks (which its copies track) are a TCP connect,
    // not a TLS handshake that presents nothing.
    for c in copies.iter().filter(|c| c.cert.is_some()) {
        let base = &mut out[bases[c.id]];
        if routes.backends[c.id].tls.is_some() && !base.server_opts.contains(" no-check-ssl") {
            base.server_opts.push_str(" no-check-ssl");
        }
    }
    for copy in copies {
        let base = &out[bases[copy.id]];
        let mut server_opts = base.server_opts.replace(" no-check-ssl", "");
        if let Some(c) = copy.cert.filter(|_| routes.backends[copy.id].tls.is_some()) {
            server_opts.push_str(" crt ");
            server_opts.push_str(&cert_file(c));
        }
        let copy = Backend {
            name: copy.name(),
            track: Some(base.name.clone()),
            server_opts,
            ..base.clone()
        };
        out.push(copy);
    }
    for id in stream_backend_ids(routes) {
        out.push(backend(
            stream_backend_name(id),
            &routes.backends[id],
            Mode::Tcp,
        ));
    }
    out
}

/// The file of CA bundle `ca` in the routes' files directory `dir` (both proxies name
/// it; the render writes it, staged with the config).
pub fn ca_file(dir: &str, ca: &k8slb_common::routes::CaId) -> String {
    format!("{}/ca-{ca}.pem", dir.trim_end_matches('/'))
}

/// Server slots for a backend of `n` endpoints: `max(8, next_power_of_two(n + n/2))`.
/// The headroom is for a rolling update (Kubernetes' default surge is 25%, and
/// terminating endpoints drain in their slots meanwhile): a new slot count means a
/// reload, and with `next_power_of_two(n)` alone a Deployment of 8 or 16 replicas
/// reloaded on its first rolling update. Once grown, the count is kept while it fits.
pub fn slot_count(n: usize) -> usize {
    (n + n.div_ceil(2)).next_power_of_two().max(8)
}

/// Also used for the backends of L7 routes ([`route_backends`]).
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

pub(super) fn haproxy_view(
    state: &State,
    opts: &ViewOptions,
    prev: Option<&HaproxyView>,
    skipped: &mut Vec<Skipped>,
    notes: &mut Vec<String>,
) -> Result<HaproxyView, ViewError> {
    let cfg = &state.config.haproxy;
    let runtime_socket = safe_path("runtime socket", &opts.runtime_socket)?;
    let pid_file = safe_path("pid file", &opts.pid_file)?;
    let mut global = admin_global(&cfg.global, notes);
    let default_global = default_global(&global);
    let httpfront = admin_httpfront(&cfg.httpfront, notes);
    let default_timeouts = default_timeouts(&cfg.defaults);
    let (frontends, backends) = service_proxies(state, prev, skipped, notes);
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

/// The admin's `haproxy.global` lines, minus those the actor sets (`pidfile`, `daemon`,
/// `master-worker`), each dropped with a note.
fn admin_global(lines: &[ConfigLine], notes: &mut Vec<String>) -> Vec<ConfigLine> {
    let mut global = Vec::with_capacity(lines.len());
    for l in lines {
        match first_word(l) {
            "pidfile" | "daemon" | "master-worker" => notes.push(format!(
                "haproxy.global line {:?} dropped: the actor sets it",
                l.as_str()
            )),
            _ => global.push(l.clone()),
        }
    }
    global
}

/// `hard-stop-after 30m` and `mworker-max-reloads 50`, each unless `global` sets it.
fn default_global(global: &[ConfigLine]) -> Vec<&'static str> {
    [
        ("hard-stop-after", "hard-stop-after 30m"),
        ("mworker-max-reloads", "mworker-max-reloads 50"),
    ]
    .into_iter()
    .filter(|(w, _)| !global.iter().any(|l| first_word(l) == *w))
    .map(|(_, l)| l)
    .collect()
}

/// The admin's `haproxy.httpfront` lines, minus k8slb's default ones (and copies of them
/// in admins' configs), which repeat what the template writes in every http frontend
/// ([`HTTP_FRONTEND_LINES`]): each dropped with a note.
fn admin_httpfront(lines: &[ConfigLine], notes: &mut Vec<String>) -> Vec<ConfigLine> {
    let mut httpfront = Vec::with_capacity(lines.len());
    for l in lines {
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
    httpfront
}

/// `timeout connect 5s`, `timeout client 30s`, `timeout server 30s`, each unless the
/// admin's `haproxy.defaults` sets that timeout.
fn default_timeouts(defaults: &[ConfigLine]) -> Vec<&'static str> {
    let has_timeout = |which: &str| {
        defaults.iter().any(|l| {
            let mut w = l.as_str().split_whitespace();
            w.next() == Some("timeout") && w.next() == Some(which)
        })
    };
    [
        ("connect", "timeout connect 5s"),
        ("client", "timeout client 30s"),
        ("server", "timeout server 30s"),
    ]
    .into_iter()
    .filter(|(w, _)| !has_timeout(w))
    .map(|(_, l)| l)
    .collect()
}

/// The frontends (one per VIP) and the backend of every TCP port of the Services with
/// an address, `prev`'s server slots kept; the other ports are `skipped`.
fn service_proxies(
    state: &State,
    prev: Option<&HaproxyView>,
    skipped: &mut Vec<Skipped>,
    notes: &mut Vec<String>,
) -> (Vec<Frontend>, Vec<Backend>) {
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
            port_frontends(&svc.ips, p, &base, &be_name, crt, &mut frontends);
            let prev = prev_backends.get(be_name.as_str()).copied();
            backends.push(port_backend(key, &svc.ips, p, be_name, prev, notes));
        }
    }
    (frontends, backends)
}

/// One frontend per VIP of `ips` for port `p`: `fe_<base>_<v4|v6>[_<k>]`, bound to
/// `<ip>:<port>`, forwarding to `backend`.
fn port_frontends(
    ips: &[IpAddr],
    p: &PortState,
    base: &str,
    backend: &str,
    crt: Option<String>,
    frontends: &mut Vec<Frontend>,
) {
    let source_ranges = (!p.source_ranges.is_empty()).then(|| {
        p.source_ranges
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    });
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for ip in ips {
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
            backend: backend.to_string(),
            h2: p.app_protocol == BackendProtocol::H2c,
        });
    }
}

/// The backend `name` of port `p` of Service `key` (VIPs `ips`): stickiness, server
/// options and the endpoints in server slots (`prev`'s kept).
fn port_backend(
    key: &ServiceKey,
    ips: &[IpAddr],
    p: &PortState,
    name: String,
    prev: Option<&Backend>,
    notes: &mut Vec<String>,
) -> Backend {
    let cookie = p.stickiness == Stickiness::Cookie && p.mode == Mode::Http;
    if p.stickiness == Stickiness::Cookie && !cookie {
        notes.push(format!(
            "{key} port {}: cookie stickiness needs http mode; none applied",
            p.port
        ));
    }
    let stick_source = (p.stickiness == Stickiness::Source).then(|| StickSource {
        table_type: if ips.iter().any(|i| i.is_ipv6()) {
            "ipv6"
        } else {
            "ip"
        },
        expire_s: p.stickiness_timeout_s.max(1),
    });
    let eps: Vec<(SocketAddr, bool)> = p
        .endpoints
        .iter()
        .map(|e| (SocketAddr::new(e.ip, e.port), e.draining))
        .collect();
    Backend {
        name,
        mode: p.mode,
        stick_source,
        cookie,
        server_opts: port_server_opts(p),
        slots: assign_slots(&eps, prev),
        track: None,
    }
}

/// The options of every `server` line of port `p`'s backend, each with a leading space:
/// `check`, `ssl verify none`, `proto h2`, `send-proxy[-v2]`, `check-send-proxy`.
fn port_server_opts(p: &PortState) -> String {
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
    server_opts
}

/// The index of the last line whose first word is `word`.
pub(super) fn last_line(lines: &[ConfigLine], word: &str) -> Option<usize> {
    lines.iter().rposition(|l| first_word(l) == word)
}

/// The number after `keyword` in `lines[i]`.
pub(super) fn number_in(
    lines: &[ConfigLine],
    i: usize,
    keyword: &str,
) -> Option<(std::ops::Range<usize>, u64)> {
    fdlimit::find_number(lines[i].as_str(), keyword)
}

/// `line` with the digits at `range` replaced by `n` (digits for digits: still a valid
/// `ConfigLine`).
pub(super) fn with_number(line: &mut ConfigLine, range: std::ops::Range<usize>, n: u64) {
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
    // When even the smallest `maxconn` does not fit, the applier refuses the view
    // ([`NodeView::fd_shortfall`](super::NodeView::fd_shortfall)).
    let used = fds.fit(configured, limit);
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
