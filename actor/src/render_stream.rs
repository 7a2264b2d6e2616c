//! Rendering the L4 part of the route model ([`HttpRoutes::streams`]: TCP, UDP and TLS
//! passthrough routed by SNI) for HAProxy and nginx: pure, from the model + options to
//! typed template contexts (the templates are `haproxy-routes.cfg.tera` and
//! `nginx-streams.conf.tera`, rendered by `render_http::HttpRenderer`).
//!
//! Decisions:
//! - **HAProxy backends.** A TCP or TLS stream forwards to `mode tcp` backends `rtt_*`
//!   ([`crate::view::stream_backend_name`]), one per Service port, apart from the
//!   `mode http` `rtb_*` of the HTTP rules (a port both an HTTPRoute and a TCPRoute name
//!   is two backends with the same endpoints). They have the same server slots as every
//!   other backend ([`crate::view::route_backends`]), so endpoint churn is a Runtime API
//!   change, no reload ([`crate::render::runtime_diff`]).
//! - **HAProxy weights** are the HTTP path's splits: a route with two or more backends
//!   draws `rand(10000)` per connection and takes the first backend whose cumulative
//!   share in the listener's splits map (keys `r<route>_b<i>`) is above the draw. Per
//!   Service backends (not one backend per route with weighted servers) keep one slot
//!   table per Service port whatever the number of routes naming it, and a change of
//!   weights is a `set map`, not a reload ([`stream_split_entries`]).
//! - **HAProxy TLS passthrough**: `tcp-request inspect-delay 5s`, then `reject unless {
//!   req.ssl_hello_type 1 }` as the first content rule (it waits for the whole
//!   ClientHello, up to the delay, and closes what is not TLS; an `accept` there would end
//!   the rule list before the routing below), `req.ssl_sni,lower` looked up in a map of
//!   exact names (`map_str`), then of wildcard suffixes (`map_end` on `.suffix`, longest
//!   first: any depth of labels, as the model says), then the any-name route; no route,
//!   or a route without a backend: `reject`.
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
//!
//! Every value written is a validated type from the model (`Hostname`, `ObjectName`,
//! numbers, addresses), a path checked by [`crate::view::safe_path`], an admin
//! `ConfigLine`, or a fixed keyword from this file.

use crate::render_error::RenderError;

/// The template of the L7 routes and L4 streams part of haproxy.cfg.
pub const HAPROXY_ROUTES: &str = "haproxy-routes.cfg.tera";

/// A split draws a number below this; each backend's share is its part of it.
pub const SPLIT_SCALE: u32 = 10_000;
use crate::view::{safe_path, stream_backend_name, HttpRenderOptions, PLACEHOLDER};
use k8slb_common::routes::{
    BackendId, BackendState, HttpRoutes, Sticky, StreamListener, StreamProtocol, StreamRoute,
    WeightedBackend,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

/// The value of a connection no route takes (HAProxy).
const REJECT: &str = "x";

/// nginx's closing sink (see the module's documentation).
pub const NGINX_SINK: &str = "127.75.78.1:1";
/// The upstream of [`NGINX_SINK`].
const SINK_UPSTREAM: &str = "k8slb_sink";

fn ip_slug(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "_")
}

/// The cumulative shares (of [`SPLIT_SCALE`]) of `backends`, in
/// order: backend `i` takes a draw below its share and at or above the one before. A
/// weight 0 has no share; every weight 0: every share 0.
pub fn cumulative_shares(backends: &[WeightedBackend]) -> Vec<u32> {
    cumulative_shares_with(backends, 0)
}

/// [`cumulative_shares`] of `backends` and, after them, a share of weight `rest` that
/// no backend takes (a draw at or above the last share: the invalid references' 500).
pub fn cumulative_shares_with(backends: &[WeightedBackend], rest: u16) -> Vec<u32> {
    let total: u64 = backends.iter().map(|b| u64::from(b.weight)).sum::<u64>() + u64::from(rest);
    let mut cum = 0u64;
    backends
        .iter()
        .map(|b| {
            cum += u64::from(b.weight);
            (cum * u64::from(SPLIT_SCALE))
                .checked_div(total)
                .unwrap_or(0) as u32
        })
        .collect()
}

/// The splits of stream listener `s` (each route with two or more backends) as its
/// splits-map entries (`r<route>_b<i>`, cumulative share), in render order: the map's
/// content, and what a change of weights sets over the Runtime API.
pub fn stream_split_entries(s: &StreamListener) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for (i, r) in s.routes.iter().enumerate() {
        if r.is_split() {
            for (j, share) in cumulative_shares_with(&r.backends, r.invalid)
                .into_iter()
                .enumerate()
            {
                out.push((format!("r{i}_b{j}"), share));
            }
        }
    }
    out
}

fn frontend_name(s: &StreamListener) -> String {
    format!("rts_{}_{}", ip_slug(s.ip), s.port)
}

fn files_dir(o: &HttpRenderOptions) -> Result<String, RenderError> {
    let dir =
        safe_path("routes files directory", &o.files_dir).map_err(|e| RenderError::Render {
            name: HAPROXY_ROUTES,
            detail: e.to_string(),
        })?;
    Ok(dir.trim_end_matches('/').to_string())
}

/// The splits map of the (TCP or TLS) stream listener `s`.
pub fn stream_splits_map_path(
    s: &StreamListener,
    o: &HttpRenderOptions,
) -> Result<String, RenderError> {
    Ok(format!("{}/{}.splits.map", files_dir(o)?, frontend_name(s)))
}

/// The streams with every split's weights blanked (they are splits-map entries, set over
/// the Runtime API); a route with one backend keeps only whether its weight is 0.
pub fn streams_but_weights(routes: &HttpRoutes) -> Vec<StreamListener> {
    let mut out = routes.streams.clone();
    for r in out.iter_mut().flat_map(|s| s.routes.iter_mut()) {
        k8slb_common::routes::blank_weights(&mut r.backends, &mut r.invalid);
    }
    out
}

// ---------------------------------------------------------------------------------------
// HAProxy

#[derive(Serialize)]
pub(crate) struct HpStream {
    name: String,
    bind: String,
    /// Every connection is closed (no route, or one without a backend).
    reject_all: bool,
    /// The one backend every connection goes to (TCP).
    direct: Option<String>,
    tls: bool,
    sni_map: Option<String>,
    suffixes_map: Option<String>,
    /// The value of a connection no name matched: the any-name route's (TLS), the route's
    /// (TCP).
    any: Option<String>,
    splits_map: Option<String>,
    splits: Vec<HpStreamSplit>,
}

#[derive(Serialize)]
pub(crate) struct HpStreamSplit {
    id: String,
    /// (splits map key, backend name or [`REJECT`]).
    backends: Vec<(String, String)>,
}

/// A route's value: a backend name, a split id (`s<i>`, added to `splits`), or
/// [`REJECT`].
fn hp_value(
    i: usize,
    r: &StreamRoute,
    table: &BTreeMap<BackendId, BackendState>,
    splits: &mut Vec<HpStreamSplit>,
    notes: &mut Vec<String>,
    what: &str,
) -> String {
    let name = |id: &BackendId, notes: &mut Vec<String>| {
        if table.contains_key(id) {
            stream_backend_name(id)
        } else {
            notes.push(format!(
                "{what}: backend {id} is not in the backends table; its connections are closed"
            ));
            REJECT.to_string()
        }
    };
    match r.backends.as_slice() {
        [] => REJECT.to_string(),
        [one] if one.weight == 0 && r.invalid == 0 => REJECT.to_string(),
        [one] if r.invalid == 0 => name(&one.id, notes),
        // Two or more, or one and the invalid share (a draw above the last backend's
        // share falls through to `reject`).
        several => {
            let id = format!("s{i}");
            splits.push(HpStreamSplit {
                id: id.clone(),
                backends: several
                    .iter()
                    .enumerate()
                    .map(|(j, b)| (format!("r{i}_b{j}"), name(&b.id, notes)))
                    .collect(),
            });
            id
        }
    }
}

pub(crate) fn hp_streams(
    routes: &HttpRoutes,
    o: &HttpRenderOptions,
    files: &mut BTreeMap<String, String>,
    notes: &mut Vec<String>,
) -> Result<(Vec<HpStream>, Vec<String>), RenderError> {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for s in &routes.streams {
        let bind = SocketAddr::new(s.ip, s.port).to_string();
        if s.protocol.is_udp() {
            let line = format!(
                "route stream {bind}/UDP: {}",
                crate::view::SkipReason::HaproxyUdp.as_str()
            );
            notes.push(format!("{line}; not rendered"));
            skipped.push(line);
            continue;
        }
        let name = frontend_name(s);
        let dir = files_dir(o)?;
        let mut splits = Vec::new();
        // A TCP listener has one route (the model's invariant; a second is noted below).
        let taken = if s.protocol == StreamProtocol::Tcp {
            1
        } else {
            s.routes.len()
        };
        let values: Vec<String> = s
            .routes
            .iter()
            .take(taken)
            .enumerate()
            .map(|(i, r)| hp_value(i, r, &routes.backends, &mut splits, notes, &name))
            .collect();
        let entries: String = stream_split_entries(s)
            .iter()
            .map(|(k, v)| format!("{k} {v}\n"))
            .collect();
        let splits_map = if entries.is_empty() {
            None
        } else {
            let f = stream_splits_map_path(s, o)?;
            files.insert(f.clone(), entries);
            Some(f)
        };
        let mut st = HpStream {
            bind,
            reject_all: false,
            direct: None,
            tls: s.protocol == StreamProtocol::Tls,
            sni_map: None,
            suffixes_map: None,
            any: None,
            splits_map,
            splits,
            name: name.clone(),
        };
        if s.protocol == StreamProtocol::Tcp {
            if s.routes.len() > 1 {
                notes.push(format!(
                    "{name}: a TCP listener takes one route; the first is used"
                ));
            }
            match values.first().map(String::as_str) {
                None | Some(REJECT) => st.reject_all = true,
                Some(v) if v.starts_with("rtt_") => st.direct = Some(v.to_string()),
                Some(v) => st.any = Some(v.to_string()),
            }
            out.push(st);
            continue;
        }
        // TLS: exact names, then wildcard suffixes (longest first), then any name.
        let mut seen = BTreeSet::new();
        let (mut exact, mut suffixes) = (String::new(), Vec::new());
        for (r, v) in s.routes.iter().zip(&values) {
            match &r.host {
                None => {
                    st.any.get_or_insert_with(|| v.clone());
                }
                Some(h) if !seen.insert(h.as_str()) => {}
                Some(h) => match h.wildcard_suffix() {
                    Some(suffix) => suffixes.push((suffix.to_string(), v.clone())),
                    None => exact.push_str(&format!("{h} {v}\n")),
                },
            }
        }
        suffixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        let suffixes: String = suffixes.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        let mut map = |ext: &str, text: String| {
            (!text.is_empty()).then(|| {
                let f = format!("{dir}/{name}.{ext}");
                files.insert(f.clone(), text);
                f
            })
        };
        st.sni_map = map("sni.map", exact);
        st.suffixes_map = map("suffixes.map", suffixes);
        out.push(st);
    }
    Ok((out, skipped))
}

// ---------------------------------------------------------------------------------------
// nginx

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
}

impl NxStreams {
    pub(crate) fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
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
    /// `proxy_pass` target: an upstream or a map variable; `None`: `deny all`.
    proxy_pass: Option<String>,
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
const MAX_NGINX_WEIGHT: u128 = 100_000;

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

pub(crate) fn nx_streams(routes: &HttpRoutes, notes: &mut Vec<String>) -> NxStreams {
    let mut out = NxStreams::default();
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
            out.servers.push(NxStreamServer {
                listen,
                udp: s.protocol.is_udp(),
                ssl_preread: false,
                proxy_pass: target,
            });
            continue;
        }
        let mut seen = BTreeSet::new();
        let mut entries = String::new();
        let mut default = None;
        for (i, r) in s.routes.iter().enumerate() {
            if r.host.as_ref().is_some_and(|h| !seen.insert(h.as_str())) {
                continue;
            }
            if r.host.is_none() && default.is_some() {
                continue;
            }
            let target = upstream(i, r, notes).unwrap_or_else(|| SINK_UPSTREAM.to_string());
            match &r.host {
                // `*.suffix` in a `hostnames` map matches any depth, not the suffix itself.
                Some(h) => entries.push_str(&format!("\n    {h} {target};")),
                None => default = Some(target),
            }
        }
        let sni_var = format!("$k8slb_sni_{slug}");
        let tls_var = format!("$k8slb_tls_{slug}");
        out.maps.push(format!(
            "map $ssl_preread_server_name {sni_var} {{\n    hostnames;{entries}\n    default {};\n  }}",
            default.as_deref().unwrap_or(SINK_UPSTREAM)
        ));
        // What is not TLS has no protocol: closed, whatever the any-name route.
        out.maps.push(format!(
            "map $ssl_preread_protocol {tls_var} {{\n    \"\" {SINK_UPSTREAM};\n    default {sni_var};\n  }}"
        ));
        out.sink = Some(NGINX_SINK);
        out.servers.push(NxStreamServer {
            listen,
            udp: false,
            ssl_preread: true,
            proxy_pass: Some(tls_var),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_weights_give_each_backend_its_share_whatever_its_endpoint_count() {
        // 90/10 over one endpoint each.
        assert_eq!(nx_weights(&[(90, 1), (10, 1)]), [Some(9), Some(1)]);
        // 2 vs 3 endpoints, equal weights: each endpoint of the first weighs 3/2 of the
        // second's, so each backend gets half.
        assert_eq!(nx_weights(&[(1, 2), (1, 3)]), [Some(3), Some(2)]);
        // Weight 0 or no ready endpoint: no share.
        assert_eq!(nx_weights(&[(5, 1), (0, 4), (7, 0)]), [Some(1), None, None]);
        // Too large: scaled, shares kept within 10^-5.
        let w = nx_weights(&[(65535, 7), (1, 9), (3, 11), (2, 13)]);
        assert!(w
            .iter()
            .flatten()
            .all(|w| *w >= 1 && *w <= MAX_NGINX_WEIGHT));
        let share0 = (w[0].unwrap() * 7) as f64
            / (w[0].unwrap() * 7 + w[1].unwrap() * 9 + w[2].unwrap() * 11 + w[3].unwrap() * 13)
                as f64;
        assert!((share0 - 65535.0 / 65541.0).abs() < 1e-4, "{share0}");
    }

    #[test]
    fn cumulative_shares_end_at_the_scale() {
        let b = |w| WeightedBackend {
            id: "default/a:80".parse().unwrap(),
            weight: w,
        };
        assert_eq!(cumulative_shares(&[b(90), b(10)]), [9000, 10000]);
        assert_eq!(cumulative_shares(&[b(0), b(0)]), [0, 0]);
    }
}
