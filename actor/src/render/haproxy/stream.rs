//! The L4 route frontends of haproxy.cfg (TCPRoute, TLSRoute passthrough or terminated):
//! `mode tcp` frontends to the routes' `rtt_*` backends, SNI maps and weighted splits.
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
//!   weights is a `set map`, not a reload ([`crate::render::SplitsMap`]).
//! - **HAProxy TLS passthrough**: `tcp-request inspect-delay 5s`, then `reject unless {
//!   req.ssl_hello_type 1 }` as the first content rule (it waits for the whole
//!   ClientHello, up to the delay, and closes what is not TLS; an `accept` there would end
//!   the rule list before the routing below), `req.ssl_sni,lower` looked up in a map of
//!   exact names (`map_str`), then of wildcard suffixes (`map_end` on `.suffix`, longest
//!   first: any depth of labels, as the model says), then the any-name route; no route,
//!   or a route without a backend: `reject`.
//! - **HAProxy TLS termination** (a `TLS` listener with `tls.mode: Terminate`): the
//!   bind is `ssl` with the listener's crt-list, written as an HTTPS listener's
//!   ([`super::http::hp_tls`]: each certificate filtered by its listener's hostname,
//!   the default first), and the same maps are looked up with the handshake's server
//!   name, `ssl_fc_sni,lower` (the content rules run once the handshake is done; no
//!   inspect delay). The backends get the plain bytes. A listener left without a
//!   certificate (the quarantine took them out) rejects every connection.
//! - **HAProxy, both modes on one port** (TLSRouteModeMixed): the frontend on the
//!   address is the passthrough one, whose maps send the server names of the terminated
//!   routes to backend `rth_<address>_<port>`: one server, `unix@<hop_dir>/<frontend>.sock
//!   send-proxy-v2`, the bind (`mode 600 accept-proxy`, TLS as above) of frontend
//!   `<frontend>_t`, which routes among the terminated routes only (they keep their
//!   precedence, so it picks the route the port's frontend picked). PROXY protocol v2
//!   carries the client's address, so logs and `src` see the client. `unix@`, not
//!   `abns@`: a socket file in a 0700 directory only the proxy's user reaches, where
//!   an abstract socket in the host's network namespace would take a PROXY header
//!   (any client address) from any process of the node; HAProxy binds a unix socket
//!   through a temporary name renamed over the path, so a file a crashed HAProxy left
//!   does not stop a start, and hands it to the new worker on a reload.

use crate::render::files::{files_dir, ip_slug, stream_frontend_name, SplitsMap};
use crate::render::haproxy::http::{hp_tls, HpTls};
use crate::render_error::RenderError;
use crate::view::stream_backend_name;
use crate::view::HttpRenderOptions;
use k8slb_common::routes::{
    BackendId, BackendState, HttpRoutes, StreamListener, StreamProtocol, StreamRoute,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

/// The value of a connection no route takes (HAProxy).
const REJECT: &str = "x";

/// The streams with every split's weights blanked (they are splits-map entries, set over
/// the Runtime API); a route with one backend keeps only whether its weight is 0.
pub fn streams_but_weights(routes: &HttpRoutes) -> Vec<StreamListener> {
    let mut out = routes.streams.clone();
    for r in out.iter_mut().flat_map(|s| s.routes.iter_mut()) {
        k8slb_common::routes::blank_weights(&mut r.backends, &mut r.invalid);
    }
    out
}

#[derive(Serialize)]
pub(crate) struct HpStream {
    name: String,
    bind: String,
    /// Every connection is closed (no route, or one without a backend).
    reject_all: bool,
    /// The one backend every connection goes to (TCP).
    direct: Option<String>,
    /// Routed by the TLS server name (a `TLS` listener).
    tls: bool,
    /// TLS terminated by the bind (its certificates); `None`: passed through (the
    /// ClientHello inspected).
    terminate: Option<HpTls>,
    sni_map: Option<String>,
    suffixes_map: Option<String>,
    /// The value of a connection no name matched: the any-name route's (TLS), the route's
    /// (TCP).
    any: Option<String>,
    splits_map: Option<String>,
    splits: Vec<HpStreamSplit>,
    /// The internal frontend of a TLS port of both modes: bound on a unix socket, it
    /// takes the PROXY protocol header the port's frontend sends (the client's
    /// address) and terminates TLS.
    accept_proxy: bool,
    /// The port's frontend hands the terminated routes' connections to this hop.
    hop: Option<HpStreamHop>,
}

/// `backend <backend>` with one server, `<socket> send-proxy-v2`: the way from a TLS
/// port's passthrough frontend to its terminating one.
#[derive(Serialize)]
pub(crate) struct HpStreamHop {
    backend: String,
    socket: String,
}

impl HpStream {
    fn new(
        name: String,
        bind: String,
        splits_map: Option<String>,
        splits: Vec<HpStreamSplit>,
    ) -> Self {
        HpStream {
            name,
            bind,
            reject_all: false,
            direct: None,
            tls: false,
            terminate: None,
            sni_map: None,
            suffixes_map: None,
            any: None,
            splits_map,
            splits,
            accept_proxy: false,
            hop: None,
        }
    }
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
        let name = stream_frontend_name(s);
        let dir = files_dir(o)?;
        let tls = s.protocol == StreamProtocol::Tls;
        let terminate = match &s.terminate {
            Some(t) if tls => {
                if t.certificates.is_empty() && t.default_certificate.is_none() {
                    notes.push(format!(
                        "{name}: TLS termination without any certificate; every connection it would terminate is rejected"
                    ));
                    None
                } else {
                    Some(hp_tls(t, o, &dir, format!("{dir}/{name}.crt-list"), files)?)
                }
            }
            _ => None,
        };
        let no_certificate = s.terminate.is_some() && terminate.is_none();
        // A port of both TLS modes: the frontend on the address passes through and
        // hands the server names of the terminated routes to an internal frontend.
        let mixed = tls && s.is_mixed();
        // A TCP listener has one route (the model's invariant; a second is noted below).
        let taken = if s.protocol == StreamProtocol::Tcp {
            1
        } else {
            s.routes.len()
        };
        let (mut splits, mut hop_splits) = (Vec::new(), Vec::new());
        let values: Vec<String> = s
            .routes
            .iter()
            .take(taken)
            .enumerate()
            .map(|(i, r)| {
                let into = if mixed && !r.passthrough {
                    &mut hop_splits
                } else {
                    &mut splits
                };
                hp_value(i, r, &routes.backends, into, notes, &name)
            })
            .collect();
        let splits_map = SplitsMap::of_stream(s, o)?.write(files);
        if s.protocol == StreamProtocol::Tcp {
            let mut st = HpStream::new(name.clone(), bind, splits_map, splits);
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
        if !mixed {
            let mut st = HpStream::new(name.clone(), bind, splits_map, splits);
            st.tls = true;
            st.reject_all = no_certificate;
            st.terminate = terminate;
            let all: Vec<(&StreamRoute, String)> = s.routes.iter().zip(values).collect();
            sni_maps(&mut st, &all, &format!("{dir}/{name}"), files);
            out.push(st);
            continue;
        }
        // Mixed: the terminated routes' connections go to the hop (unless they are
        // closed anyway: no backend, or no certificate to terminate them with).
        let hop_name = format!("{name}_t");
        let socket = super::hop_socket(o, &name)?;
        let hop_backend = format!("rth_{}_{}", ip_slug(s.ip), s.port);
        let (mut front, mut back) = (Vec::new(), Vec::new());
        for (r, v) in s.routes.iter().zip(values) {
            if r.passthrough {
                front.push((r, v));
            } else if no_certificate || v == REJECT {
                front.push((r, REJECT.to_string()));
            } else {
                front.push((r, hop_backend.clone()));
                back.push((r, v));
            }
        }
        let mut st = HpStream::new(name.clone(), bind, splits_map.clone(), splits);
        st.tls = true;
        sni_maps(&mut st, &front, &format!("{dir}/{name}"), files);
        if !back.is_empty() {
            st.hop = Some(HpStreamHop {
                backend: hop_backend,
                socket: socket.clone(),
            });
        }
        out.push(st);
        if !back.is_empty() {
            let mut hop = HpStream::new(hop_name.clone(), socket, splits_map, hop_splits);
            hop.tls = true;
            hop.accept_proxy = true;
            hop.terminate = terminate;
            sni_maps(&mut hop, &back, &format!("{dir}/{hop_name}"), files);
            out.push(hop);
        }
    }
    Ok((out, skipped))
}

/// The SNI maps of `st` for `routes` (each with its value), in precedence order: exact
/// names, then wildcard suffixes (longest first), then any name. Files `<base>.sni.map`
/// and `<base>.suffixes.map`.
fn sni_maps(
    st: &mut HpStream,
    routes: &[(&StreamRoute, String)],
    base: &str,
    files: &mut BTreeMap<String, String>,
) {
    let mut seen = BTreeSet::new();
    let (mut exact, mut suffixes) = (String::new(), Vec::new());
    for (r, v) in routes {
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
            let f = format!("{base}.{ext}");
            files.insert(f.clone(), text);
            f
        })
    };
    st.sni_map = map("sni.map", exact);
    st.suffixes_map = map("suffixes.map", suffixes);
}
