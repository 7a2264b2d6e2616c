//! The L4 routes of nginx.conf's `stream { }` (TCPRoute, TLSRoute passthrough or
//! terminated, UDPRoute): upstreams with weights, SNI maps, a sink for what no route
//! takes.
//!
//! Decisions:
//! - **nginx**: in `stream { }`, one upstream per route whose servers are every backend's
//!   ready endpoints, each weighted so that its backend's share follows the route's
//!   weights ([`nx_weights`]); nginx's weighted round-robin then gives each backend its
//!   share. TLS passthrough: `ssl_preread on`, a `map $ssl_preread_server_name` with
//!   `hostnames` (exact names first, then `*.suffix`, which in nginx matches any depth,
//!   the longest first, then `default`: the any-name route), behind a map on
//!   `$ssl_preread_protocol` that sends what is not TLS to the closing sink.
//! - **Closing in nginx.** nginx 1.22's stream module decides by SNI only in the content
//!   phase (`ssl_preread` runs after the access phase), and a server has one content
//!   handler, `proxy_pass` or `return`, chosen statically; `ssl_reject_handshake` and
//!   `pass` are not in its stream module. So a connection no route takes is proxied to
//!   one internal sink, `127.75.78.1:1` (loopback, next to the keepalived anchors
//!   `127.75.76.x`; no file, so nothing is left behind by a crash), a server that
//!   refuses every connection with `deny all` (the access module, before any content
//!   handler; its `return ""` is only there because nginx requires a handler). A TCP or
//!   UDP listener without a usable route is bound and refuses with `deny all` itself
//!   (not left unbound: another socket on `0.0.0.0:<port>` of the node would take it).
//! - **nginx TLS termination** (a `TLS` listener with `tls.mode: Terminate`): `listen
//!   ... ssl`, and the same `hostnames` map of routes on `$ssl_server_name` (the
//!   handshake's server name) instead of the preread one. nginx 1.22's stream module has
//!   no `server_name`, so one server holds every certificate of the port: one alone is
//!   named as it is (`nginx -t` loads it); several are chosen by a `hostnames` map of
//!   `$ssl_server_name` (each certificate for its listener's hostname, as HAProxy's
//!   crt-list filters, `default` the port's default certificate), which nginx loads at
//!   each handshake (the plan checked that both proxies load each of them). A listener
//!   left without a certificate (the quarantine took them out) refuses every connection.
//! - **nginx, both modes on one port** (TLSRouteModeMixed): the server on the address
//!   reads the ClientHello (`ssl_preread`) and, by the same `hostnames` map, proxies
//!   each connection with `proxy_protocol on` (nginx's is per server, so every
//!   connection of the port gets the header) to an upstream `k8slb_hop_<port>_p` or
//!   `_t`: `unix:<hop_dir>/rts_<address>_<port>_tls_{p,t}.sock`, servers that take the
//!   header (`listen ... proxy_protocol`, `set_real_ip_from unix:`: `$remote_addr` is
//!   the client's) and pass through by the ClientHello, or terminate and route by the
//!   handshake's name, among their own routes. The names come from the address and port
//!   only; the directory is the actor's ([`crate::daemons::prepare_nginx_hop_dir`]): 0710,
//!   root's, of the workers' group (they connect to the sockets; nginx makes them
//!   0666), and a fresh start removes the sockets a killed nginx left (it would not
//!   bind them).

use crate::render::files::{cert_path, ip_slug};
use crate::render::nginx::NGINX_STREAMS;
use crate::render_error::RenderError;
use crate::view::{HttpRenderOptions, PLACEHOLDER};
use k8slb_common::routes::{
    BackendId, BackendState, CertFile, HttpRoutes, ListenerTls, Sticky, StreamProtocol,
    StreamRoute, WeightedBackend,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

/// nginx's closing sink (see the module's documentation).
pub const NGINX_SINK: &str = "127.75.78.1:1";

/// The upstream of [`NGINX_SINK`].
const SINK_UPSTREAM: &str = "k8slb_sink";

#[derive(Serialize, Default)]
pub(crate) struct NxStreams {
    upstreams: Vec<NxStreamUpstream>,
    /// `map` blocks (TLS listeners), pre-rendered from validated hosts and generated
    /// names.
    maps: Vec<String>,
    servers: Vec<NxStreamServer>,
    /// Render the closing sink ([`NGINX_SINK`]).
    sink: Option<&'static str>,
    /// The sink takes datagrams too (a UDP route's invalid share): it drops them.
    sink_udp: bool,
    /// `map_hash_bucket_size` / `map_hash_max_size` lines sized for the maps' keys
    /// (see [`nx_map_hash_lines`]).
    hash_lines: Vec<String>,
}

/// nginx refuses the whole config when a map key does not fit its hash bucket (64
/// bytes by default in `stream { }` as in `http { }`: a 253-character server name of
/// one TLSRoute would block every other route), so the streams size the maps' hash for
/// their own keys, unless the admin's `nginx.stream` lines do (then a note).
fn nx_map_hash_lines(
    keys: (usize, usize),
    o: &HttpRenderOptions,
    notes: &mut Vec<String>,
) -> Vec<String> {
    let (longest, count) = keys;
    if count == 0 {
        return Vec::new();
    }
    // An entry is the key, a pointer and 2 bytes, rounded up to a pointer; a bucket
    // holds one entry and a terminating pointer (as server_names_hash_bucket_size).
    let bucket = ((longest + 2 + 8).next_multiple_of(8) + 8)
        .next_power_of_two()
        .max(64);
    let size = (count * 4).next_power_of_two().max(2048);
    let mut out = Vec::new();
    for (word, value) in [
        ("map_hash_bucket_size", bucket),
        ("map_hash_max_size", size),
    ] {
        if o.nginx_stream
            .iter()
            .any(|l| l.as_str().split_whitespace().next() == Some(word))
        {
            notes.push(format!(
                "nginx.stream sets {word}; the stream maps need at least {value}"
            ));
        } else {
            out.push(format!("{word} {value};"));
        }
    }
    out
}

/// The longest map key and the most keys of one map (`sizes`), with the map of `keys`.
fn count_keys<'k>(sizes: &mut (usize, usize), keys: impl IntoIterator<Item = &'k str>) {
    let mut n = 0;
    for k in keys {
        sizes.0 = sizes.0.max(k.len());
        n += 1;
    }
    sizes.1 = sizes.1.max(n);
}

impl NxStreams {
    pub(crate) fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// A TLS server (`server`, its listen given) that routes `targets` (each route
    /// with its upstream, in precedence order) by server name: the handshake's when it
    /// terminates with `ssl`, else the ClientHello's (`ssl_preread`), what is not TLS
    /// to the sink. `slug` names its maps.
    fn tls_server(
        &mut self,
        slug: &str,
        mut server: NxStreamServer,
        ssl: Option<(String, String)>,
        targets: &[(&StreamRoute, String)],
    ) {
        let mut entries = String::new();
        let mut default = SINK_UPSTREAM;
        for (r, target) in targets {
            match &r.host {
                // `*.suffix` in a `hostnames` map matches any depth, not the suffix itself.
                Some(h) => entries.push_str(&format!("\n    {h} {target};")),
                None => default = target,
            }
        }
        let sni_var = format!("$k8slb_sni_{slug}");
        let tls_var = format!("$k8slb_tls_{slug}");
        if ssl.is_some() {
            // Terminated: the handshake's server name; what is not TLS fails it.
            self.maps.push(format!(
                "map $ssl_server_name {sni_var} {{\n    hostnames;{entries}\n    default {default};\n  }}"
            ));
            server.ssl = ssl;
            server.proxy_pass = Some(sni_var);
            self.servers.push(server);
            return;
        }
        self.maps.push(format!(
            "map $ssl_preread_server_name {sni_var} {{\n    hostnames;{entries}\n    default {default};\n  }}"
        ));
        // What is not TLS has no protocol: closed, whatever the any-name route.
        self.maps.push(format!(
            "map $ssl_preread_protocol {tls_var} {{\n    \"\" {SINK_UPSTREAM};\n    default {sni_var};\n  }}"
        ));
        server.ssl_preread = true;
        server.proxy_pass = Some(tls_var);
        self.servers.push(server);
    }
}

/// The unix socket of the internal server `name` of a TLS port of both modes:
/// `<hop_dir>/rts_<name>.sock` (the address, port and part only). A path too long for a
/// unix socket (107 bytes) is the admin's work dir, refused whole.
fn nx_hop_socket(o: &HttpRenderOptions, name: &str) -> Result<String, RenderError> {
    let dir = crate::view::safe_path("hop sockets directory", &o.hop_dir)
        .map_err(|e| crate::render::files::render_err(NGINX_STREAMS, e))?;
    let path = format!("{}/rts_{name}.sock", dir.trim_end_matches('/'));
    if path.len() > 107 {
        return Err(crate::render::files::render_err(
            NGINX_STREAMS,
            format!("the hop socket path {path} is longer than a unix socket path may be (107 bytes): use a shorter --work-dir"),
        ));
    }
    Ok(path)
}

#[derive(Serialize)]
struct NxStreamUpstream {
    /// One of its servers is the closing sink (the invalid references' share).
    #[serde(skip)]
    sink: bool,
    name: String,
    hash_source: bool,
    /// `\n    server <addr> weight=<n>[ down] max_fails=3 fail_timeout=5s;` per server.
    server_lines: String,
}

#[derive(Serialize)]
struct NxStreamServer {
    listen: String,
    udp: bool,
    ssl_preread: bool,
    /// TLS terminated here: `ssl_certificate` (a file, or a map variable) and its key.
    ssl: Option<(String, String)>,
    /// `proxy_pass` target: an upstream or a map variable; `None`: `deny all`.
    proxy_pass: Option<String>,
    /// Sends a PROXY protocol header to what it proxies to (`proxy_protocol on`): the
    /// server on the address of a TLS port of both modes, whose targets are the
    /// internal servers below.
    proxy_protocol: bool,
    /// An internal server on a unix socket: takes the PROXY protocol header and the
    /// client's address from it (`listen ... proxy_protocol`, `set_real_ip_from unix:`).
    accept_proxy: bool,
}

impl NxStreamServer {
    fn new(listen: String, proxy_pass: Option<String>) -> Self {
        NxStreamServer {
            listen,
            udp: false,
            ssl_preread: false,
            ssl: None,
            proxy_pass,
            proxy_protocol: false,
            accept_proxy: false,
        }
    }
}

/// The certificate and key files of `f` (a Secret's `.pem` holds both).
fn nx_cert_files(f: &CertFile, o: &HttpRenderOptions) -> Result<(String, String), RenderError> {
    let base = cert_path(f, o)?;
    let key = match f {
        CertFile::Pool { .. } => format!("{base}.key"),
        CertFile::Secret { .. } => format!("{base}.pem"),
    };
    Ok((format!("{base}.pem"), key))
}

/// The `ssl_certificate` and `ssl_certificate_key` values of a terminating stream
/// `slug` (see the module's documentation), with the map that chooses them when there
/// are several; `None` without any certificate.
fn nx_terminate(
    slug: &str,
    t: &ListenerTls,
    o: &HttpRenderOptions,
    (maps, keys): (&mut Vec<String>, &mut Vec<String>),
) -> Result<Option<(String, String)>, RenderError> {
    let Some(default) = t
        .default_certificate
        .as_ref()
        .or_else(|| t.certificates.first().map(|c| &c.file))
    else {
        return Ok(None);
    };
    let files: BTreeSet<&CertFile> = t
        .certificates
        .iter()
        .map(|c| &c.file)
        .chain([default])
        .collect();
    if files.len() == 1 {
        return nx_cert_files(default, o).map(Some);
    }
    let (mut crt, mut key) = (String::new(), String::new());
    let mut seen = BTreeSet::new();
    for c in &t.certificates {
        let (cf, kf) = nx_cert_files(&c.file, o)?;
        // The first certificate of a hostname takes it (one file per name in a map).
        for h in c.hosts.iter().filter(|h| seen.insert(h.as_str())) {
            crt.push_str(&format!("\n    {h} {cf};"));
            key.push_str(&format!("\n    {h} {kf};"));
        }
    }
    let (dc, dk) = nx_cert_files(default, o)?;
    keys.extend(seen.iter().map(|h| h.to_string()));
    let (cv, kv) = (format!("$k8slb_crt_{slug}"), format!("$k8slb_key_{slug}"));
    maps.push(format!(
        "map $ssl_server_name {cv} {{\n    hostnames;{crt}\n    default {dc};\n  }}"
    ));
    maps.push(format!(
        "map $ssl_server_name {kv} {{\n    hostnames;{key}\n    default {dk};\n  }}"
    ));
    Ok(Some((cv, kv)))
}

fn gcd(a: u128, b: u128) -> u128 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The largest server weight written; above it the weights are scaled down (rounded,
/// at least 1), which moves a backend's share by less than one part in 10^5.
pub(crate) const MAX_NGINX_WEIGHT: u128 = 100_000;

/// The nginx server weight of each ready endpoint of each backend `(weight, ready
/// endpoints)`, so that backend `b`'s share of the round-robin is `weight_b / Σ weight`:
/// `weight_b · L / n_b` with `L` the least common multiple of the `n_b`, divided by the
/// weights' greatest common divisor. `None` for a backend without a ready endpoint or
/// of weight 0 (its share goes to the others: nginx skips servers it cannot use).
pub fn nx_weights(backends: &[(u16, usize)]) -> Vec<Option<u128>> {
    let live = |&(w, n): &(u16, usize)| w > 0 && n > 0;
    let lcm = backends
        .iter()
        .filter(|b| live(b))
        .fold(1u128, |l, &(_, n)| l / gcd(l, n as u128) * n as u128);
    let raw: Vec<Option<u128>> = backends
        .iter()
        .map(|b| live(b).then(|| u128::from(b.0) * (lcm / b.1 as u128)))
        .collect();
    let g = raw.iter().flatten().fold(0u128, |g, &w| gcd(g, w)).max(1);
    let max = raw.iter().flatten().max().copied().unwrap_or(1) / g;
    raw.into_iter()
        .map(|w| {
            w.map(|w| {
                let w = w / g;
                if max <= MAX_NGINX_WEIGHT {
                    w
                } else {
                    ((w * MAX_NGINX_WEIGHT + max / 2) / max).max(1)
                }
            })
        })
        .collect()
}

fn proto_word(p: StreamProtocol) -> &'static str {
    match p {
        StreamProtocol::Tcp => "tcp",
        StreamProtocol::Udp => "udp",
        StreamProtocol::Tls => "tls",
    }
}

/// The upstream of route `r` (`None`: no backend it can use: weight 0, or not in the
/// table), named `name`.
fn nx_upstream(
    name: String,
    r: &StreamRoute,
    table: &BTreeMap<BackendId, BackendState>,
    notes: &mut Vec<String>,
) -> Option<NxStreamUpstream> {
    let present: Vec<(&WeightedBackend, &BackendState)> = r
        .backends
        .iter()
        .filter(|b| b.weight > 0)
        .filter_map(|b| match table.get(&b.id) {
            Some(st) => Some((b, st)),
            None => {
                notes.push(format!(
                    "{name}: backend {} is not in the backends table; left out",
                    b.id
                ));
                None
            }
        })
        .collect();
    if present.is_empty() {
        return None;
    }
    let ready = |st: &BackendState| st.endpoints.iter().filter(|e| !e.draining).count();
    // The invalid references' share goes to the closing sink, weighted like a backend of
    // one endpoint.
    let mut shares: Vec<(u16, usize)> = present
        .iter()
        .map(|(b, st)| (b.weight, ready(st)))
        .collect();
    if r.invalid > 0 {
        shares.push((r.invalid, 1));
    }
    let weights = nx_weights(&shares);
    let mut lines = String::new();
    let mut push = |addr: SocketAddr, weight: Option<u128>, down: bool| {
        lines.push_str("\n    server ");
        lines.push_str(&addr.to_string());
        if let Some(w) = weight.filter(|w| *w != 1) {
            lines.push_str(&format!(" weight={w}"));
        }
        if down {
            lines.push_str(" down");
        }
        if addr.to_string() == NGINX_SINK {
            // Closing is what it is for, never a failure to count (a UDP datagram it
            // drops gets no answer): it is never taken out of the draw.
            lines.push_str(" max_fails=0;");
        } else {
            lines.push_str(" max_fails=3 fail_timeout=5s;");
        }
    };
    let mut servers = 0;
    for ((_, st), w) in present.iter().zip(&weights) {
        for e in &st.endpoints {
            push(SocketAddr::new(e.ip, e.port), *w, e.draining || w.is_none());
            servers += 1;
        }
    }
    let sink = r.invalid > 0;
    if let (true, Some(w)) = (sink, weights.last()) {
        let addr: SocketAddr = NGINX_SINK.parse().expect("the sink is an address");
        push(addr, *w, w.is_none());
    }
    if servers == 0 {
        // An empty upstream is a config error; a down placeholder is valid (closed).
        push(PLACEHOLDER, None, true);
    }
    Some(NxStreamUpstream {
        sink,
        name,
        hash_source: present
            .iter()
            .all(|(_, st)| matches!(st.stickiness, Some(Sticky::Source))),
        server_lines: lines,
    })
}

pub(crate) fn nx_streams(
    routes: &HttpRoutes,
    o: &HttpRenderOptions,
    notes: &mut Vec<String>,
) -> Result<NxStreams, RenderError> {
    let mut out = NxStreams::default();
    let mut sizes = (0, 0);
    for s in &routes.streams {
        let slug = format!("{}_{}_{}", ip_slug(s.ip), s.port, proto_word(s.protocol));
        let table = if s.protocol.is_udp() {
            &routes.udp_backends
        } else {
            &routes.backends
        };
        let listen = SocketAddr::new(s.ip, s.port).to_string();
        let udp = s.protocol.is_udp();
        let mut upstream = |i: usize, r: &StreamRoute, notes: &mut Vec<String>| {
            nx_upstream(format!("rts_{slug}_r{i}"), r, table, notes).map(|u| {
                let name = u.name.clone();
                if u.sink {
                    out.sink = Some(NGINX_SINK);
                    out.sink_udp |= udp;
                }
                out.upstreams.push(u);
                name
            })
        };
        if s.protocol != StreamProtocol::Tls {
            if s.routes.len() > 1 {
                notes.push(format!(
                    "{listen}/{}: one route per listener; the first is used",
                    s.protocol.as_str()
                ));
            }
            let target = s.routes.first().and_then(|r| upstream(0, r, notes));
            let mut server = NxStreamServer::new(listen, target);
            server.udp = s.protocol.is_udp();
            out.servers.push(server);
            continue;
        }
        // A port of both TLS modes (TLSRouteModeMixed): see the module's documentation.
        let mixed = s.is_mixed();
        let ssl = match &s.terminate {
            Some(t) => {
                let mut keys = Vec::new();
                let ssl = nx_terminate(&slug, t, o, (&mut out.maps, &mut keys))?;
                count_keys(&mut sizes, keys.iter().map(String::as_str));
                if ssl.is_none() && !mixed {
                    notes.push(format!(
                        "{listen}/TLS: TLS termination without any certificate; every connection is refused"
                    ));
                    out.servers.push(NxStreamServer::new(listen, None));
                    continue;
                }
                if ssl.is_none() {
                    notes.push(format!(
                        "{listen}/TLS: TLS termination without any certificate; the connections it would terminate are refused"
                    ));
                }
                ssl
            }
            None => None,
        };
        // Each route's target, the first of each server name (and of any name) only.
        let mut seen = BTreeSet::new();
        let mut any = false;
        let mut targets: Vec<(&StreamRoute, String)> = Vec::new();
        for (i, r) in s.routes.iter().enumerate() {
            if r.host.as_ref().is_some_and(|h| !seen.insert(h.as_str())) {
                continue;
            }
            if r.host.is_none() && std::mem::replace(&mut any, true) {
                continue;
            }
            let target = upstream(i, r, notes).unwrap_or_else(|| SINK_UPSTREAM.to_string());
            targets.push((r, target));
        }
        count_keys(&mut sizes, seen.iter().copied());
        out.sink = Some(NGINX_SINK);
        if !mixed {
            let server = NxStreamServer::new(listen, None);
            out.tls_server(&slug, server, ssl, &targets);
            continue;
        }
        // Mixed: the port's server reads the ClientHello and sends every connection,
        // with a PROXY protocol header (nginx's is per server), to one of two servers
        // on unix sockets: one passes through, one terminates.
        let hop = |part: &str| -> Result<(String, String), RenderError> {
            let path = nx_hop_socket(o, &format!("{slug}_{part}"))?;
            Ok((format!("k8slb_hop_{slug}_{part}"), path))
        };
        let (pass_up, pass_path) = hop("p")?;
        let (term_up, term_path) = hop("t")?;
        let (mut front, mut passed, mut terminated) = (Vec::new(), Vec::new(), Vec::new());
        for (r, target) in targets {
            let via = if target == SINK_UPSTREAM {
                SINK_UPSTREAM.to_string()
            } else if r.passthrough {
                passed.push((r, target));
                pass_up.clone()
            } else if ssl.is_some() {
                terminated.push((r, target));
                term_up.clone()
            } else {
                SINK_UPSTREAM.to_string()
            };
            front.push((r, via));
        }
        let mut hop_server = |name: String, path: &str, on: bool| {
            if on {
                out.upstreams.push(NxStreamUpstream {
                    sink: false,
                    name,
                    hash_source: false,
                    server_lines: format!("\n    server unix:{path};"),
                });
            }
        };
        hop_server(pass_up, &pass_path, !passed.is_empty());
        hop_server(term_up, &term_path, !terminated.is_empty());
        let mut server = NxStreamServer::new(listen, None);
        server.proxy_protocol = true;
        out.tls_server(&slug, server, None, &front);
        if !passed.is_empty() {
            let mut server = NxStreamServer::new(format!("unix:{pass_path}"), None);
            server.accept_proxy = true;
            out.tls_server(&format!("{slug}_p"), server, None, &passed);
        }
        if !terminated.is_empty() {
            let mut server = NxStreamServer::new(format!("unix:{term_path}"), None);
            server.accept_proxy = true;
            out.tls_server(&format!("{slug}_t"), server, ssl, &terminated);
        }
    }
    out.hash_lines = nx_map_hash_lines(sizes, o, notes);
    Ok(out)
}
