//! Rendering configs from a [`NodeView`]: pure, no I/O except [`Renderer::from_dir`]
//! reading override templates once at start-up.
//!
//! The templates (`templates/*.tera`, embedded with `include_str!`) are rendered only from
//! the typed contexts below, with autoescape off (these are not HTML). Every value they
//! receive is a validated type (see [`crate::view`]), so the text a template writes is the
//! only structure in the output: no value can add a line, a brace or a `;`.
//!
//! [`runtime_diff`] tells an endpoint-only change (applied through the HAProxy Runtime
//! API, no reload) from a structural one (reload). It looks only at the proxy part of the
//! views; keepalived.conf changes are detected by comparing its rendered text.

use crate::view::{HaproxyView, KeepalivedView, NginxView, NodeView, ProxyKind, Skipped, Slot};
use k8slb_common::names::NodeName;
use serde::Serialize;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use tera::{Context, Tera};

/// The template files, by name, with their embedded defaults.
pub const TEMPLATES: [(&str, &str); 3] = [
    (
        KEEPALIVED,
        include_str!("../../templates/keepalived.conf.tera"),
    ),
    (HAPROXY, include_str!("../../templates/haproxy.cfg.tera")),
    (NGINX, include_str!("../../templates/nginx.conf.tera")),
];
const KEEPALIVED: &str = "keepalived.conf.tera";
const HAPROXY: &str = "haproxy.cfg.tera";
const NGINX: &str = "nginx.conf.tera";

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("reading template {path:?}")]
    ReadTemplate {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing template {name}: {detail}")]
    ParseTemplate { name: String, detail: String },
    #[error("rendering {name}: {detail}")]
    Render { name: &'static str, detail: String },
    #[error("the view has no {0} part (proxy kind mismatch)")]
    MissingPart(&'static str),
}

impl RenderError {
    pub fn category(&self) -> &'static str {
        match self {
            RenderError::ReadTemplate { .. } => "ReadTemplate",
            RenderError::ParseTemplate { .. } => "ParseTemplate",
            RenderError::Render { .. } => "Render",
            RenderError::MissingPart(_) => "MissingPart",
        }
    }
}

/// The full error chain of a tera error on one line (tera hides the cause in `source`).
fn chain(e: &tera::Error) -> String {
    let mut s = e.to_string();
    let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(e);
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The parsed templates.
#[derive(Debug, Clone)]
pub struct Renderer {
    tera: Tera,
}

/// Rendered config texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub keepalived: String,
    /// haproxy.cfg or nginx.conf; `None` for kubeproxy.
    pub proxy: Option<String>,
}

impl Rendered {
    /// File name of the proxy config for `proxy`.
    pub fn proxy_file_name(proxy: ProxyKind) -> Option<&'static str> {
        match proxy {
            ProxyKind::Haproxy => Some("haproxy.cfg"),
            ProxyKind::Nginx => Some("nginx.conf"),
            ProxyKind::Kubeproxy => None,
        }
    }
}

#[derive(Serialize)]
struct KeepalivedCtx<'a> {
    ka: &'a KeepalivedView,
}

#[derive(Serialize)]
struct HaproxyCtx<'a> {
    node: &'a NodeName,
    hp: &'a HaproxyView,
    skipped: &'a [Skipped],
}

#[derive(Serialize)]
struct NginxCtx<'a> {
    node: &'a NodeName,
    nx: &'a NginxView,
    skipped: &'a [Skipped],
}

impl Renderer {
    /// The templates compiled into the binary.
    pub fn embedded() -> Result<Self, RenderError> {
        Self::build(
            TEMPLATES
                .iter()
                .map(|(n, t)| (n.to_string(), t.to_string())),
        )
    }

    /// Templates from `dir` (`keepalived.conf.tera`, `haproxy.cfg.tera`,
    /// `nginx.conf.tera`); a missing file falls back to the embedded one. Read and parse
    /// errors fail here, at start-up.
    pub fn from_dir(dir: &Path) -> Result<Self, RenderError> {
        let mut list = Vec::new();
        for (name, embedded) in TEMPLATES {
            let path = dir.join(name);
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => embedded.to_string(),
                Err(source) => return Err(RenderError::ReadTemplate { path, source }),
            };
            list.push((name.to_string(), text));
        }
        Self::build(list.into_iter())
    }

    fn build(list: impl Iterator<Item = (String, String)>) -> Result<Self, RenderError> {
        let mut tera = Tera::default();
        // These are config files, not HTML: nothing is escaped (values are validated).
        tera.autoescape_on(vec![]);
        for (name, text) in list {
            tera.add_raw_template(&name, &text)
                .map_err(|e| RenderError::ParseTemplate {
                    name: name.clone(),
                    detail: chain(&e),
                })?;
        }
        Ok(Renderer { tera })
    }

    fn one<T: Serialize>(&self, name: &'static str, ctx: &T) -> Result<String, RenderError> {
        let ctx = Context::from_serialize(ctx).map_err(|e| RenderError::Render {
            name,
            detail: chain(&e),
        })?;
        self.tera
            .render(name, &ctx)
            .map_err(|e| RenderError::Render {
                name,
                detail: chain(&e),
            })
    }

    pub fn render_keepalived(&self, view: &NodeView) -> Result<String, RenderError> {
        self.one(
            KEEPALIVED,
            &KeepalivedCtx {
                ka: &view.keepalived,
            },
        )
    }

    /// haproxy.cfg / nginx.conf, `None` for kubeproxy.
    pub fn render_proxy(&self, view: &NodeView) -> Result<Option<String>, RenderError> {
        match view.proxy {
            ProxyKind::Haproxy => {
                let hp = view
                    .haproxy
                    .as_ref()
                    .ok_or(RenderError::MissingPart("haproxy"))?;
                let ctx = HaproxyCtx {
                    node: &view.node,
                    hp,
                    skipped: &view.skipped,
                };
                self.one(HAPROXY, &ctx).map(Some)
            }
            ProxyKind::Nginx => {
                let nx = view
                    .nginx
                    .as_ref()
                    .ok_or(RenderError::MissingPart("nginx"))?;
                let ctx = NginxCtx {
                    node: &view.node,
                    nx,
                    skipped: &view.skipped,
                };
                self.one(NGINX, &ctx).map(Some)
            }
            ProxyKind::Kubeproxy => Ok(None),
        }
    }

    pub fn render(&self, view: &NodeView) -> Result<Rendered, RenderError> {
        Ok(Rendered {
            keepalived: self.render_keepalived(view)?,
            proxy: self.render_proxy(view)?,
        })
    }
}

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
        }
    }
}

/// True iff the two HAProxy views render the same config up to the contents of server
/// slots (addresses and ready/drain/empty states). The slot *count* is structural.
pub fn same_haproxy_structure(a: &HaproxyView, b: &HaproxyView) -> bool {
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
        && a.backends.len() == b.backends.len()
        && a.backends.iter().zip(&b.backends).all(|(x, y)| {
            x.name == y.name
                && x.mode == y.mode
                && x.stick_source == y.stick_source
                && x.cookie == y.cookie
                && x.server_opts == y.server_opts
                && x.slots.len() == y.slots.len()
        })
}

/// The structural part of a view: every HAProxy server slot emptied. Two views that
/// differ only in endpoints (within the same slot counts) have equal structural parts,
/// and so render to the same text. For nginx and kubeproxy it is the view itself.
pub fn structural(view: &NodeView) -> NodeView {
    let mut v = view.clone();
    if let Some(hp) = v.haproxy.as_mut() {
        for b in &mut hp.backends {
            b.slots.iter_mut().for_each(|s| *s = Slot::EMPTY);
        }
    }
    v
}

/// Endpoint-only difference between two views that HAProxy's Runtime API can apply
/// without a reload. `None` if anything structural changed in the proxy part (then:
/// reload), or for nginx when anything changed. `Some(vec![])` if nothing changed.
pub fn runtime_diff(old: &NodeView, new: &NodeView) -> Option<Vec<RuntimeCommand>> {
    if old.proxy != new.proxy || old.skipped != new.skipped {
        return None;
    }
    match (&old.haproxy, &new.haproxy) {
        (Some(o), Some(n)) => {
            if !same_haproxy_structure(o, n) {
                return None;
            }
            let mut cmds = Vec::new();
            for (bo, bn) in o.backends.iter().zip(&n.backends) {
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
            Some(cmds)
        }
        (None, None) => (old.nginx == new.nginx).then(Vec::new),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_templates_parse() {
        Renderer::embedded().unwrap();
    }

    #[test]
    fn override_dir_parse_error_fails_at_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(HAPROXY), "{% if %}").unwrap();
        let e = Renderer::from_dir(dir.path()).unwrap_err();
        assert!(matches!(e, RenderError::ParseTemplate { .. }), "{e}");
        // Missing files fall back to the embedded ones.
        let empty = tempfile::tempdir().unwrap();
        Renderer::from_dir(empty.path()).unwrap();
    }

    #[test]
    fn cli_lines() {
        let c = RuntimeCommand::SetServer {
            backend: "be_a_b_80".into(),
            server: "s3".into(),
            addr: "2001:db8::1".parse().unwrap(),
            port: 80,
        };
        assert_eq!(
            c.to_cli(),
            "set server be_a_b_80/s3 addr 2001:db8::1 port 80"
        );
        let d = RuntimeCommand::Drain {
            backend: "be".into(),
            server: "s1".into(),
        };
        assert_eq!(d.to_cli(), "set server be/s1 state drain");
    }
}
