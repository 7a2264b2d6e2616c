//! The nginx part of a node's view: servers and upstreams for the Services, the stream
//! module when a Service needs it, and the limits fitted to the open-files budget.

use super::haproxy::{last_line, number_in, with_number, PLACEHOLDER};
use super::{addr_text, first_word, safe_path, SkipReason, Skipped, ViewError, ViewOptions};
use crate::fdlimit::{self, FdBudget};
use k8slb_common::app_protocol::BackendProtocol;
use k8slb_common::names::{ConfigLine, ServiceKey};
use k8slb_common::state::{Mode, PortState, Protocol, State, Stickiness};
use serde::Serialize;
use std::net::{IpAddr, SocketAddr};

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

/// The lines that let a WebSocket handshake through an nginx location (HAProxy passes
/// one as it is): the client's `Upgrade` header, and `Connection: upgrade` when it sent
/// one (`$k8slb_connection`, a map of `$http_upgrade` the actor writes in every
/// nginx.conf: [`crate::render::nx_http_base`]), else `close` as nginx sends by default.
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

pub(super) fn nginx_view(
    state: &State,
    opts: &ViewOptions,
    skipped: &mut Vec<Skipped>,
    notes: &mut Vec<String>,
) -> Result<NginxView, ViewError> {
    let cfg = &state.config.nginx;
    let pid_file = safe_path("pid file", &opts.pid_file)?;
    let mut global = admin_global(&cfg.global, notes);
    let add_events = !global.iter().any(|l| first_word(l) == "events");
    let loads_stream = loads_stream(&global);
    let (http_servers, stream_servers) = service_servers(state, skipped, notes);
    // The routes' L4 streams are rendered in `stream { }` too ([`crate::render::nginx::stream`]).
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

/// The admin's `nginx.global` lines, minus `pid` (the actor sets it), dropped with a note.
fn admin_global(lines: &[ConfigLine], notes: &mut Vec<String>) -> Vec<ConfigLine> {
    let mut global = Vec::with_capacity(lines.len());
    for l in lines {
        if first_word(l) == "pid" {
            notes.push(format!(
                "nginx.global line {:?} dropped: the actor sets pid",
                l.as_str()
            ));
        } else {
            global.push(l.clone());
        }
    }
    global
}

/// Whether the admin's global lines load the stream module (`load_module` of it, or
/// Debian's `include .../modules-enabled/...`).
fn loads_stream(global: &[ConfigLine]) -> bool {
    global.iter().any(|l| {
        let w = first_word(l);
        (w == "load_module" && l.as_str().contains("ngx_stream_module"))
            || (w == "include" && l.as_str().contains("modules-enabled"))
    })
}

/// Which block of nginx.conf a Service port's server goes in.
enum Block {
    /// `http { }`: an http-mode TCP port.
    Http,
    /// `stream { }`: a tcp-mode or UDP port.
    Stream,
}

/// The `http { }` and the `stream { }` servers of the ports of the Services with an
/// address; the ports nginx cannot serve are `skipped`.
fn service_servers(
    state: &State,
    skipped: &mut Vec<Skipped>,
    notes: &mut Vec<String>,
) -> (Vec<NginxServer>, Vec<NginxServer>) {
    let cert_dir = state.config.cert_path.as_str().trim_end_matches('/');
    let mut http_servers = Vec::new();
    let mut stream_servers = Vec::new();
    for (key, svc) in &state.services {
        if svc.ips.is_empty() {
            continue;
        }
        for p in &svc.ports {
            match port_server(key, &svc.ips, p, cert_dir, skipped, notes) {
                Some((Block::Http, s)) => http_servers.push(s),
                Some((Block::Stream, s)) => stream_servers.push(s),
                None => {}
            }
        }
    }
    (http_servers, stream_servers)
}

/// The server of port `p` of Service `key` (VIPs `ips`) and its block, or `None` (the
/// port `skipped`: SCTP, PROXY protocol to an http-mode port, TLS without a certificate).
fn port_server(
    key: &ServiceKey,
    ips: &[IpAddr],
    p: &PortState,
    cert_dir: &str,
    skipped: &mut Vec<Skipped>,
    notes: &mut Vec<String>,
) -> Option<(Block, NginxServer)> {
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
            return None;
        }
    };
    let l7 = p.mode == Mode::Http && !udp;
    if l7 && p.proxy_protocol.is_some() {
        skipped.push(skip(SkipReason::NginxHttpProxyProtocol));
        return None;
    }
    let cert = match (p.tls && !udp, &p.cert) {
        (false, _) => None,
        (true, Some(c)) => Some(format!("{cert_dir}/{c}")),
        (true, None) => {
            skipped.push(skip(SkipReason::TlsWithoutCert));
            return None;
        }
    };
    let servers = upstream_servers(p);
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
        listens: ips
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
    Some((if l7 { Block::Http } else { Block::Stream }, s))
}

/// The upstream's servers: port `p`'s endpoints (draining ones `down`), or one `down`
/// placeholder (an empty upstream is a config error; a down placeholder is valid: 502).
fn upstream_servers(p: &PortState) -> Vec<NginxUpstreamServer> {
    let mut servers: Vec<NginxUpstreamServer> = p
        .endpoints
        .iter()
        .map(|e| NginxUpstreamServer {
            addr: addr_text(SocketAddr::new(e.ip, e.port)),
            down: e.draining,
        })
        .collect();
    if servers.is_empty() {
        servers.push(NginxUpstreamServer {
            addr: addr_text(PLACEHOLDER),
            down: true,
        });
    }
    servers
}
