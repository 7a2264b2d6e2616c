//! What a change needs: [`is_structural`] (a reload) or [`runtime_diff`] (HAProxy Runtime
//! API commands: server addresses, split weights, certificates; no reload).

use crate::render::SplitsMap;
use crate::view::{Backend, HaproxyView, NodeView};
use k8slb_common::routes::{CertFile, HttpRoutes, Listener};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// One HAProxy Runtime API command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeCommand {
    /// `set server <be>/<srv> addr <ip> port <port>`
    SetServer {
        backend: String,
        server: String,
        addr: IpAddr,
        port: u16,
    },
    /// `set server <be>/<srv> state ready`
    Enable { backend: String, server: String },
    /// `set server <be>/<srv> state maint`
    Disable { backend: String, server: String },
    /// `set server <be>/<srv> state drain`
    Drain { backend: String, server: String },
    /// `set weight <be>/<srv> <weight>`: sent before every `Enable`, because a slot
    /// rendered as draining (`weight 0`) keeps weight 0 after `state ready`.
    SetWeight {
        backend: String,
        server: String,
        weight: u16,
    },
    /// A renewed certificate of a TLS Secret, hitless: `set ssl cert <path> <<` with the
    /// file's content (read when sent: the command never holds key material), then
    /// `commit ssl cert <path>`; `abort ssl cert <path>` if either is refused
    /// ([`crate::haproxy_rt::update_cert`]).
    UpdateCert { path: String },
    /// `set map <map> <key> <value>`: a split's share in its listener's splits map
    /// ([`crate::render::split_entries`]), when only weights changed.
    SetMap {
        map: String,
        key: String,
        value: u32,
    },
}

impl RuntimeCommand {
    /// The exact Runtime API line (without the trailing newline).
    pub fn to_cli(&self) -> String {
        match self {
            RuntimeCommand::SetServer {
                backend,
                server,
                addr,
                port,
            } => format!("set server {backend}/{server} addr {addr} port {port}"),
            RuntimeCommand::Enable { backend, server } => {
                format!("set server {backend}/{server} state ready")
            }
            RuntimeCommand::Disable { backend, server } => {
                format!("set server {backend}/{server} state maint")
            }
            RuntimeCommand::Drain { backend, server } => {
                format!("set server {backend}/{server} state drain")
            }
            RuntimeCommand::SetWeight {
                backend,
                server,
                weight,
            } => format!("set weight {backend}/{server} {weight}"),
            RuntimeCommand::UpdateCert { path } => {
                format!("{}{path}", crate::haproxy_rt::UPDATE_CERT)
            }
            RuntimeCommand::SetMap { map, key, value } => format!("set map {map} {key} {value}"),
        }
    }
}

/// A config file of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// keepalived.conf: rendered from `keepalived` alone.
    Keepalived,
    /// haproxy.cfg / nginx.conf (nothing for kubeproxy).
    Proxy,
}

/// Whether `config` differs between the two views beyond the contents of HAProxy server
/// slots (their addresses and ready/drain/empty states): the one place that decides
/// what is structural (a reload) and what is endpoints only (the Runtime API, no
/// reload). The apply's fast path (`RealRenderer::same_outside_proxy` in [`crate::node_renderer`])
/// asks it for keepalived.conf, [`runtime_diff`] for the proxy config.
///
/// For the proxy config: the node, the provider, the skipped ports, any HAProxy field
/// but the slots (the slot *count* is structural), or anything of nginx's.
pub fn is_structural(config: Config, old: &NodeView, new: &NodeView) -> bool {
    match config {
        Config::Keepalived => old.keepalived != new.keepalived,
        Config::Proxy => {
            old.node != new.node
                || old.proxy != new.proxy
                || old.skipped != new.skipped
                || match (&old.haproxy, &new.haproxy) {
                    (Some(o), Some(n)) => {
                        !same_haproxy_structure(o, n) || !same_routes_structure(old, new)
                    }
                    (None, None) => old.nginx != new.nginx || old.http != new.http,
                    _ => true,
                }
        }
    }
}

/// The HAProxy part of [`is_structural`].
fn same_haproxy_structure(a: &HaproxyView, b: &HaproxyView) -> bool {
    a.runtime_socket == b.runtime_socket
        && a.pid_file == b.pid_file
        && a.global == b.global
        && a.default_global == b.default_global
        && a.defaults == b.defaults
        && a.default_timeouts == b.default_timeouts
        && a.tcpfront == b.tcpfront
        && a.httpfront == b.httpfront
        && a.tcpback == b.tcpback
        && a.httpback == b.httpback
        && a.frontends == b.frontends
        && same_backends(&a.backends, &b.backends)
}

/// The routes part of [`is_structural`] for HAProxy: everything but the endpoints of
/// the route backends (their slot contents); the slot count is structural.
fn same_routes_structure(old: &NodeView, new: &NodeView) -> bool {
    match (&old.http, &new.http) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.opts == b.opts
                && listeners_but_cert_versions(&a.routes) == listeners_but_cert_versions(&b.routes)
                && crate::render::streams_but_weights(&a.routes)
                    == crate::render::streams_but_weights(&b.routes)
                && a.routes.backends.len() == b.routes.backends.len()
                && a.routes
                    .backends
                    .iter()
                    .zip(&b.routes.backends)
                    .all(|((ia, sa), (ib, sb))| ia == ib && sa.stickiness == sb.stickiness)
                && same_backends(&a.backends, &b.backends)
        }
        _ => false,
    }
}

/// The listeners with every certificate's version blanked (a renewed certificate, same
/// file, new content, is a Runtime API update for HAProxy, not a new structure) and the
/// weights of every split blanked (they are its splits map's entries, set over the
/// Runtime API); a forward to one backend keeps only whether its weight is 0 (a 500).
fn listeners_but_cert_versions(routes: &HttpRoutes) -> Vec<Listener> {
    let blank = |f: &mut CertFile| {
        if let CertFile::Secret { version, .. } = f {
            version.clear();
        }
    };
    let weights = |a: &mut k8slb_common::routes::RouteAction| {
        if let k8slb_common::routes::RouteAction::Forward { backends, invalid } = a {
            k8slb_common::routes::blank_weights(backends, invalid);
        }
    };
    let mut ls = routes.listeners.clone();
    for l in &mut ls {
        if let Some(t) = &mut l.tls {
            t.certificates.iter_mut().for_each(|c| blank(&mut c.file));
            t.default_certificate.iter_mut().for_each(blank);
        }
        for v in &mut l.virtual_hosts {
            v.rules.iter_mut().for_each(|r| weights(&mut r.action));
        }
        l.default_action.iter_mut().for_each(weights);
    }
    ls
}

/// `set map` commands for the entries of `map` whose value differs from `before` to
/// `after` (same keys, same order: the structure did not change).
fn set_changed_entries(
    map: &str,
    before: &[(String, u32)],
    after: &[(String, u32)],
    cmds: &mut Vec<RuntimeCommand>,
) {
    for ((_, vo), (key, vn)) in before.iter().zip(after) {
        if vo != vn {
            cmds.push(RuntimeCommand::SetMap {
                map: map.to_string(),
                key: key.clone(),
                value: *vn,
            });
        }
    }
}

/// The splits map entries that differ from `old` to `new` (same structure), as `set map`
/// commands.
fn split_updates(old: &NodeView, new: &NodeView) -> Vec<RuntimeCommand> {
    let (Some(o), Some(n)) = (&old.http, &new.http) else {
        return Vec::new();
    };
    let mut cmds = Vec::new();
    let listeners = o.routes.listeners.iter().zip(&n.routes.listeners);
    let maps = listeners.map(|(lo, ln)| {
        (
            SplitsMap::of_listener(lo, &o.opts),
            SplitsMap::of_listener(ln, &n.opts),
        )
    });
    // The streams' splits (TCP and TLS; same structure, so the same listeners).
    let streams = o.routes.streams.iter().zip(&n.routes.streams);
    let stream_maps = streams
        .filter(|(_, sn)| !sn.protocol.is_udp())
        .map(|(so, sn)| {
            (
                SplitsMap::of_stream(so, &o.opts),
                SplitsMap::of_stream(sn, &n.opts),
            )
        });
    for (before, after) in maps.chain(stream_maps) {
        // A directory that is not safe renders nothing: no command either.
        let (Ok(before), Ok(after)) = (before, after) else {
            continue;
        };
        if before.entries != after.entries {
            set_changed_entries(&after.path, &before.entries, &after.entries, &mut cmds);
        }
    }
    cmds
}

/// The certificate updates from `old` to `new` (HAProxy): each Secret certificate both
/// name whose version changed, by the path HAProxy loaded it from.
fn cert_updates(old: &NodeView, new: &NodeView) -> Vec<RuntimeCommand> {
    let (Some(o), Some(n)) = (&old.http, &new.http) else {
        return Vec::new();
    };
    let versions = |r: &HttpRoutes| -> BTreeMap<String, CertFile> {
        k8slb_common::certs::used_by_routes(r)
            .into_iter()
            .map(|f| (f.stem(), f))
            .collect()
    };
    let before = versions(&o.routes);
    versions(&n.routes)
        .into_iter()
        .filter(|(stem, f)| before.get(stem).is_some_and(|b| b.version() != f.version()))
        .filter_map(|(_, f)| {
            let path = crate::render::cert_path(&f, &n.opts).ok()?;
            Some(RuntimeCommand::UpdateCert {
                path: format!("{path}.pem"),
            })
        })
        .collect()
}

/// Same names, modes, options and slot counts.
fn same_backends(a: &[Backend], b: &[Backend]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.name == y.name
                && x.mode == y.mode
                && x.stick_source == y.stick_source
                && x.cookie == y.cookie
                && x.server_opts == y.server_opts
                && x.slots.len() == y.slots.len()
                && x.track == y.track
        })
}

/// Endpoint-only difference between two views that HAProxy's Runtime API can apply
/// without a reload. `None` if anything structural changed in the proxy part (then:
/// reload), or for nginx when anything changed. `Some(vec![])` if nothing changed.
pub fn runtime_diff(old: &NodeView, new: &NodeView) -> Option<Vec<RuntimeCommand>> {
    if is_structural(Config::Proxy, old, new) {
        return None;
    }
    match (&old.haproxy, &new.haproxy) {
        (Some(o), Some(n)) => {
            let mut cmds = Vec::new();
            let routes = |v: &NodeView| {
                v.http
                    .as_ref()
                    .map(|h| h.backends.clone())
                    .unwrap_or_default()
            };
            let (ro, rn) = (routes(old), routes(new));
            let pairs = o.backends.iter().zip(&n.backends).chain(ro.iter().zip(&rn));
            for (bo, bn) in pairs {
                if bo.slots == bn.slots {
                    continue;
                }
                for (i, (so, sn)) in bo.slots.iter().zip(&bn.slots).enumerate() {
                    if so == sn {
                        continue;
                    }
                    let backend = bn.name.clone();
                    let server = format!("s{}", i + 1);
                    match sn.endpoint {
                        None => cmds.push(RuntimeCommand::Disable { backend, server }),
                        Some(ep) => {
                            if so.endpoint != Some(ep) {
                                cmds.push(RuntimeCommand::SetServer {
                                    backend: backend.clone(),
                                    server: server.clone(),
                                    addr: ep.ip(),
                                    port: ep.port(),
                                });
                            }
                            if sn.draining {
                                cmds.push(RuntimeCommand::Drain { backend, server });
                            } else {
                                cmds.push(RuntimeCommand::SetWeight {
                                    backend: backend.clone(),
                                    server: server.clone(),
                                    weight: 1,
                                });
                                cmds.push(RuntimeCommand::Enable { backend, server });
                            }
                        }
                    }
                }
            }
            cmds.extend(cert_updates(old, new));
            cmds.extend(split_updates(old, new));
            Some(cmds)
        }
        // nginx (unchanged, or it would be structural) and kubeproxy: nothing to send.
        _ => Some(Vec::new()),
    }
}
