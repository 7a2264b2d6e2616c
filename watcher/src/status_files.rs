//! `--status-out <dir>` (files source): the status the Kubernetes mode would write, as
//! files. After each round, one JSON file per object that has a status of ours:
//!
//! ```text
//! <dir>/GatewayClass/<name>.json
//! <dir>/{Gateway,HTTPRoute,TLSRoute,TCPRoute,UDPRoute,BackendTLSPolicy}/<namespace>/<name>.json
//! <dir>/{Service,Ingress}/<namespace>/<name>.json
//! ```
//!
//! Each file holds the object's `status` exactly as the Kubernetes mode writes it (the
//! same [`crate::gateway_status`] code builds the Gateway API ones; Services and
//! Ingresses get `{"loadBalancer": {"ingress": [...]}}`). A condition keeps its
//! `lastTransitionTime` while its status does not change, as on a cluster, because the
//! status last written is what the next round observes. Files are replaced atomically
//! (temporary file and rename), only when their content changes, and removed when the
//! object goes or stops having a status of ours (a route that names no Gateway of ours).
//! Files already in the directory at start are read as the previous round's.

use crate::gateway_status::GwTarget;
use k8slb_common::gateway::GatewayOutput;
use k8slb_common::objects::Objects;
use k8slb_common::state::State;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The kinds of object a status file is written for (the directories under `--status-out`).
pub const KINDS: [&str; 11] = [
    "GatewayClass",
    "Gateway",
    "HTTPRoute",
    "GRPCRoute",
    "TLSRoute",
    "TCPRoute",
    "UDPRoute",
    "BackendTLSPolicy",
    "ListenerSet",
    "Service",
    "Ingress",
];

/// The path (relative to the status directory) of the status file of `target`.
fn gateway_path(target: &GwTarget) -> PathBuf {
    match target {
        GwTarget::GatewayClass(n) => PathBuf::from(format!("GatewayClass/{n}.json")),
        GwTarget::Gateway(k) => namespaced("Gateway", k.namespace.as_str(), k.name.as_str()),
        GwTarget::HttpRoute(k) => namespaced("HTTPRoute", k.namespace.as_str(), k.name.as_str()),
        GwTarget::GrpcRoute(k) => namespaced("GRPCRoute", k.namespace.as_str(), k.name.as_str()),
        GwTarget::L4Route(kind, k) => {
            namespaced(kind.as_str(), k.namespace.as_str(), k.name.as_str())
        }
        GwTarget::BackendTlsPolicy(k) => {
            namespaced("BackendTLSPolicy", k.namespace.as_str(), k.name.as_str())
        }
        GwTarget::ListenerSet(k) => {
            namespaced("ListenerSet", k.namespace.as_str(), k.name.as_str())
        }
    }
}

fn namespaced(kind: &str, namespace: &str, name: &str) -> PathBuf {
    PathBuf::from(format!("{kind}/{namespace}/{name}.json"))
}

/// Every status k8slb would write for `objs` planned into `state` with the Gateway API
/// statuses `out` (relative path → `status`), conditions that changed since what `objs`
/// show transitioning at `now`. The one call into the status code.
pub fn statuses(
    out: &GatewayOutput,
    objs: &Objects,
    state: &State,
    now: &str,
) -> BTreeMap<PathBuf, Value> {
    let mut files = BTreeMap::new();
    for (target, _, want, _) in crate::gateway_status::desired(out, objs, now) {
        // A route whose parents are all another controller's (or none): nothing of ours.
        let ours = match &target {
            GwTarget::HttpRoute(_) | GwTarget::L4Route(..) => {
                want["parents"].as_array().is_some_and(|ps| {
                    ps.iter()
                        .any(|p| p["controllerName"] == json!(k8slb_common::gateway::CONTROLLER))
                })
            }
            _ => true,
        };
        if ours {
            files.insert(gateway_path(&target), want);
        }
    }
    let lb = |ingress: Vec<crate::status::Ingress>| {
        let entries: Vec<Value> = ingress.iter().map(|i| i.to_json()).collect();
        json!({"loadBalancer": {"ingress": entries}})
    };
    for (k, s) in &state.services {
        if !s.ips.is_empty() {
            let want = crate::status::desired(&s.ips, Some(s.ip_mode), false);
            files.insert(
                namespaced("Service", k.namespace.as_str(), k.name.as_str()),
                lb(want),
            );
        }
    }
    for (k, i) in &state.ingresses {
        if !i.ips.is_empty() {
            let want = crate::status::desired(&i.ips, None, false);
            files.insert(
                namespaced("Ingress", k.namespace.as_str(), k.name.as_str()),
                lb(want),
            );
        }
    }
    files
}

/// The status directory and what it holds.
#[derive(Debug)]
pub struct StatusDir {
    dir: PathBuf,
    written: BTreeMap<PathBuf, Value>,
}

/// What one round changed in the directory.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub written: usize,
    pub removed: usize,
}

impl StatusDir {
    /// The directory (created if missing), with the status files already in it.
    pub fn open(dir: &Path) -> std::io::Result<StatusDir> {
        std::fs::create_dir_all(dir)?;
        let mut written = BTreeMap::new();
        for kind in KINDS {
            let top = dir.join(kind);
            if !top.is_dir() {
                continue;
            }
            for entry in walk(&top)? {
                let Ok(rel) = entry.strip_prefix(dir) else {
                    continue;
                };
                // An unreadable or foreign file is rewritten (or removed) by the next round.
                let v = std::fs::read(&entry)
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or(Value::Null);
                written.insert(rel.to_path_buf(), v);
            }
        }
        Ok(StatusDir {
            dir: dir.to_path_buf(),
            written,
        })
    }

    /// Bring the directory to the statuses of `objs` planned into `state` with the
    /// Gateway API statuses `out` (see the module's doc). On error the files not yet
    /// handled are tried again next round.
    pub fn round(
        &mut self,
        out: &GatewayOutput,
        objs: &Objects,
        state: &State,
        now: &str,
    ) -> std::io::Result<Changes> {
        let observed = self.observed(objs);
        let want = statuses(out, &observed, state, now);
        let mut changes = Changes::default();
        for (rel, v) in &want {
            if self.written.get(rel) == Some(v) {
                continue;
            }
            let path = self.dir.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mut bytes = serde_json::to_vec_pretty(v).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            k8slb_common::fs::write_atomic(&path, &bytes)?;
            self.written.insert(rel.clone(), v.clone());
            changes.written += 1;
        }
        let gone: Vec<PathBuf> = self
            .written
            .keys()
            .filter(|rel| !want.contains_key(*rel))
            .cloned()
            .collect();
        for rel in gone {
            match std::fs::remove_file(self.dir.join(&rel)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            self.written.remove(&rel);
            changes.removed += 1;
        }
        Ok(changes)
    }

    /// The Gateway API objects of `objs` showing the status last written for them (what
    /// a cluster would show the next round), so that unchanged conditions keep their
    /// transition time.
    fn observed(&self, objs: &Objects) -> Objects {
        let status = |kind: &str, ns: Option<&str>, name: Option<&str>| -> Option<Value> {
            let name = name?;
            let rel = match ns {
                Some(ns) => namespaced(kind, ns, name),
                None => PathBuf::from(format!("{kind}/{name}.json")),
            };
            self.written.get(&rel).filter(|v| !v.is_null()).cloned()
        };
        let mut o = objs.clone();
        for c in &mut o.gateway_classes {
            c.status = status("GatewayClass", None, c.metadata.name.as_deref());
        }
        for g in &mut o.gateways {
            let m = &g.metadata;
            g.status = status("Gateway", m.namespace.as_deref(), m.name.as_deref());
        }
        for r in &mut o.http_routes {
            let m = &r.metadata;
            r.status = status("HTTPRoute", m.namespace.as_deref(), m.name.as_deref());
        }
        for r in &mut o.l4_routes {
            let m = &r.metadata;
            r.status = status(r.kind.as_str(), m.namespace.as_deref(), m.name.as_deref());
        }
        for s in &mut o.listener_sets {
            let m = &s.metadata;
            s.status = status("ListenerSet", m.namespace.as_deref(), m.name.as_deref());
        }
        o
    }
}

/// Every file under `dir` (recursively; the temporaries of an interrupted write left out).
fn walk(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let p = entry.path();
        if entry.file_type()?.is_dir() {
            out.extend(walk(&p)?);
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
    Ok(out)
}
