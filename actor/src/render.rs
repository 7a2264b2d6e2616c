//! Rendering configs from a [`NodeView`]: pure, no I/O except [`Renderer::from_dir`]
//! reading override templates once at start-up.
//!
//! The templates (`templates/*.tera`, embedded with `include_str!`) are rendered only from
//! the typed contexts below, with autoescape off (these are not HTML). Every value they
//! receive is a validated type (see [`crate::view`]), so the text a template writes is the
//! only structure in the output: no value can add a line, a brace or a `;`.
//!
//! [`is_structural`] is the one definition of what is structural (a reload) and what
//! is an endpoint-only change (applied through the HAProxy Runtime API, no reload);
//! [`runtime_diff`] turns the latter into Runtime API commands. keepalived.conf changes
//! are also detected by comparing its rendered text.

use crate::view::{Backend, HaproxyView, KeepalivedView, NginxView, NodeView, Skipped};
use k8slb_common::names::ConfigLine;
use k8slb_common::names::NodeName;
use k8slb_common::routes::{CertFile, HttpRoutes, Listener};
use k8slb_common::state::Provider;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
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

pub use crate::render_error::RenderError;

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
    /// The routes' templates (Ingresses): always the embedded ones.
    http: crate::render_http::HttpRenderer,
    /// Size of the last proxy config rendered: the next output buffer starts at this
    /// capacity instead of doubling its way up to ~20 MB for 10,000 Services.
    last_len: Arc<AtomicUsize>,
}

/// Rendered config texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub keepalived: String,
    /// haproxy.cfg or nginx.conf; `None` for kubeproxy.
    pub proxy: Option<String>,
    /// Files the proxy config names (the routes' HAProxy map and crt-list files): full
    /// path → content. Staged with the config, checked with it and installed with it
    /// ([`crate::staged`]).
    pub files: BTreeMap<String, String>,
}

impl Rendered {
    /// File name of the proxy config for `proxy`.
    pub fn proxy_file_name(proxy: Provider) -> Option<&'static str> {
        match proxy {
            Provider::Haproxy => Some("haproxy.cfg"),
            Provider::Nginx => Some("nginx.conf"),
            Provider::Kubeproxy => None,
        }
    }
}

#[derive(Serialize)]
struct KeepalivedCtx<'a> {
    ka: &'a KeepalivedView,
}

/// The template context of haproxy.cfg: `{ node, hp, skipped }`, where `hp` is the
/// [`HaproxyView`] with every field. Built by [`haproxy_ctx`]: the head below is
/// serialised in place, the two long lists in parallel chunks.
#[derive(Serialize)]
struct HaproxyHead<'a> {
    runtime_socket: &'a str,
    pid_file: &'a str,
    global: &'a [ConfigLine],
    defaults: &'a [ConfigLine],
    default_global: &'a [&'static str],
    default_timeouts: &'a [&'static str],
    tcpfront: &'a [ConfigLine],
    httpfront: &'a [ConfigLine],
    tcpback: &'a [ConfigLine],
    httpback: &'a [ConfigLine],
}

/// The same for nginx.conf: `{ node, nx, skipped }`.
#[derive(Serialize)]
struct NginxHead<'a> {
    pid_file: &'a str,
    global: &'a [ConfigLine],
    add_events: bool,
    worker_connections: u64,
    stream_module: Option<&'static str>,
    /// [`crate::render_http::nx_http_base`]
    base: Vec<String>,
    http: &'a [ConfigLine],
    proxy: &'a [ConfigLine],
    /// [`crate::view::nginx_upgrade_lines`]
    upgrade: &'a [&'static str],
    /// `proxy` for the h2c ports' `grpc_pass` ([`crate::render_http::nx_grpc_line`]).
    grpc_proxy: Vec<String>,
    upstream: &'a [ConfigLine],
    stream: &'a [ConfigLine],
    has_stream: bool,
}

fn to_value<T: Serialize + ?Sized>(name: &'static str, v: &T) -> Result<Value, RenderError> {
    serde_json::to_value(v).map_err(|e| RenderError::Render {
        name,
        detail: e.to_string(),
    })
}

/// `items` as a JSON array, serialised by up to `threads` threads (a 10,000-Service
/// view has 20,000 frontends and 20,000 backends; serialising them is a third of the
/// render). Same value as `serde_json::to_value(items)`.
fn par_array<T: Serialize + Sync>(
    name: &'static str,
    items: &[T],
    threads: usize,
) -> Result<Value, RenderError> {
    const MIN_CHUNK: usize = 512;
    let chunk = items.len().div_ceil(threads.max(1)).max(MIN_CHUNK);
    if items.len() <= chunk {
        return to_value(name, items);
    }
    let parts: Vec<Result<Value, RenderError>> = std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|c| s.spawn(move || to_value(name, c)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(RenderError::Render {
                        name,
                        detail: "a serialising thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    let mut out = Vec::with_capacity(items.len());
    for p in parts {
        match p? {
            Value::Array(a) => out.extend(a),
            _ => unreachable!("a slice serialises to an array"),
        }
    }
    Ok(Value::Array(out))
}

/// `{ node, <key>: head + lists, skipped }` as a tera context, without a copy.
fn context(
    name: &'static str,
    node: &NodeName,
    key: &str,
    head: Value,
    lists: Vec<(&str, Value)>,
    skipped: &[Skipped],
) -> Result<Context, RenderError> {
    let Value::Object(mut part) = head else {
        unreachable!("a struct serialises to an object")
    };
    for (k, v) in lists {
        part.insert(k.to_string(), v);
    }
    let mut root = serde_json::Map::new();
    root.insert("node".into(), to_value(name, node)?);
    root.insert(key.into(), Value::Object(part));
    root.insert("skipped".into(), to_value(name, skipped)?);
    Context::from_value(Value::Object(root)).map_err(|e| RenderError::Render {
        name,
        detail: chain(&e),
    })
}

/// Free a big context on another thread: for 10,000 Services, freeing its million
/// values takes ~7 ms that the caller (on its way to `haproxy -c`) need not wait for.
fn drop_later(ctx: Context) {
    if let Err(e) = std::thread::Builder::new()
        .name("render-drop".into())
        .spawn(move || drop(ctx))
    {
        tracing::debug!(error = %e, "no thread to free the render context; freed inline");
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

fn haproxy_ctx(
    node: &NodeName,
    hp: &HaproxyView,
    skipped: &[Skipped],
) -> Result<Context, RenderError> {
    // Exhaustive: a field added to HaproxyView does not compile until it is passed on.
    let HaproxyView {
        runtime_socket,
        pid_file,
        global,
        defaults,
        default_global,
        default_timeouts,
        tcpfront,
        httpfront,
        tcpback,
        httpback,
        frontends,
        backends,
        // Already in `global` (the fitted line); kept for metrics.
        maxconn: _,
    } = hp;
    let head = HaproxyHead {
        runtime_socket,
        pid_file,
        global,
        defaults,
        default_global,
        default_timeouts,
        tcpfront,
        httpfront,
        tcpback,
        httpback,
    };
    let n = threads();
    let (fe, be) = (
        par_array(HAPROXY, frontends, n)?,
        par_array(HAPROXY, backends, n)?,
    );
    context(
        HAPROXY,
        node,
        "hp",
        to_value(HAPROXY, &head)?,
        vec![("frontends", fe), ("backends", be)],
        skipped,
    )
}

fn nginx_ctx(
    node: &NodeName,
    nx: &NginxView,
    skipped: &[Skipped],
    routes: String,
    stream_routes: String,
) -> Result<Context, RenderError> {
    let NginxView {
        pid_file,
        global,
        add_events,
        worker_connections,
        stream_module,
        http,
        proxy,
        upgrade,
        upstream,
        stream,
        http_servers,
        stream_servers,
        has_stream,
    } = nx;
    let head = NginxHead {
        pid_file,
        global,
        add_events: *add_events,
        worker_connections: worker_connections.unwrap_or(crate::view::NGINX_WORKER_CONNECTIONS),
        stream_module: *stream_module,
        base: crate::render_http::nx_http_base(http),
        http,
        proxy,
        upgrade,
        grpc_proxy: proxy
            .iter()
            .map(|l| crate::render_http::nx_grpc_line(l.as_str()))
            .collect(),
        upstream,
        stream,
        has_stream: *has_stream,
    };
    let n = threads();
    let (h, st) = (
        par_array(NGINX, http_servers, n)?,
        par_array(NGINX, stream_servers, n)?,
    );
    context(
        NGINX,
        node,
        "nx",
        to_value(NGINX, &head)?,
        vec![
            ("http_servers", h),
            ("stream_servers", st),
            ("routes", Value::String(routes)),
            ("stream_routes", Value::String(stream_routes)),
        ],
        skipped,
    )
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
        Ok(Renderer {
            tera,
            http: crate::render_http::HttpRenderer::embedded()?,
            last_len: Arc::default(),
        })
    }

    fn one(&self, name: &'static str, ctx: &Context) -> Result<String, RenderError> {
        self.tera
            .render(name, ctx)
            .map_err(|e| RenderError::Render {
                name,
                detail: chain(&e),
            })
    }

    /// [`Self::one`] into a buffer sized from the previous proxy config.
    fn one_sized(&self, name: &'static str, ctx: &Context) -> Result<String, RenderError> {
        let hint = self.last_len.load(Ordering::Relaxed);
        let mut out = Vec::with_capacity(hint + hint / 8);
        let failed = |detail| RenderError::Render { name, detail };
        self.tera
            .render_to(name, ctx, &mut out)
            .map_err(|e| failed(chain(&e)))?;
        self.last_len.store(out.len(), Ordering::Relaxed);
        String::from_utf8(out).map_err(|e| failed(e.to_string()))
    }

    pub fn render_keepalived(&self, view: &NodeView) -> Result<String, RenderError> {
        let ctx = Context::from_serialize(KeepalivedCtx {
            ka: &view.keepalived,
        })
        .map_err(|e| RenderError::Render {
            name: KEEPALIVED,
            detail: chain(&e),
        })?;
        self.one(KEEPALIVED, &ctx)
    }

    /// haproxy.cfg / nginx.conf, `None` for kubeproxy.
    pub fn render_proxy(&self, view: &NodeView) -> Result<Option<String>, RenderError> {
        self.render_proxy_and_files(view).map(|(text, _)| text)
    }

    /// The proxy config with the routes in it, and the files it names.
    fn render_proxy_and_files(
        &self,
        view: &NodeView,
    ) -> Result<(Option<String>, BTreeMap<String, String>), RenderError> {
        match view.proxy {
            Provider::Haproxy => {
                let hp = view
                    .haproxy
                    .as_ref()
                    .ok_or(RenderError::MissingPart("haproxy"))?;
                let routes = match &view.http {
                    Some(h) => Some(self.http.haproxy(&h.routes, &h.opts, &h.backends)?),
                    None => None,
                };
                let ctx = haproxy_ctx(&view.node, hp, &view.skipped)?;
                let out = self.one_sized(HAPROXY, &ctx);
                drop_later(ctx);
                let mut text = out?;
                let mut files = BTreeMap::new();
                if let Some(r) = routes {
                    // Frontends and backends are top-level sections: after the rest.
                    text.push('\n');
                    text.push_str(&r.text);
                    text.push_str(&cert_versions(view));
                    // HAProxy reads map and crt-list files only when it loads its
                    // config: a change in them alone must change the config, or a new
                    // host or path would wait for an unrelated reload.
                    text.push_str(&files_version(&r.files));
                    files = r.files;
                }
                Ok((Some(text), files))
            }
            Provider::Nginx => {
                let nx = view
                    .nginx
                    .as_ref()
                    .ok_or(RenderError::MissingPart("nginx"))?;
                let (routes, stream_routes) = match &view.http {
                    Some(h) => {
                        let r = self.http.nginx(&h.routes, &h.opts)?;
                        (r.text + &cert_versions(view), r.stream_text)
                    }
                    None => (String::new(), String::new()),
                };
                let ctx = nginx_ctx(&view.node, nx, &view.skipped, routes, stream_routes)?;
                let out = self.one_sized(NGINX, &ctx);
                drop_later(ctx);
                out.map(|t| (Some(t), BTreeMap::new()))
            }
            Provider::Kubeproxy => Ok((None, BTreeMap::new())),
        }
    }

    /// Both configs; keepalived.conf is rendered on a second thread meanwhile.
    pub fn render(&self, view: &NodeView) -> Result<Rendered, RenderError> {
        let (keepalived, proxy) = std::thread::scope(|s| {
            let ka = s.spawn(|| self.render_keepalived(view));
            let proxy = self.render_proxy_and_files(view);
            let ka = ka.join().unwrap_or_else(|_| {
                Err(RenderError::Render {
                    name: KEEPALIVED,
                    detail: "the rendering thread panicked".into(),
                })
            });
            (ka, proxy)
        });
        let (proxy, files) = proxy?;
        Ok(Rendered {
            keepalived: keepalived?,
            proxy,
            files,
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
    /// A renewed certificate of a TLS Secret, hitless: `set ssl cert <path> <<` with the
    /// file's content (read when sent: the command never holds key material), then
    /// `commit ssl cert <path>`; `abort ssl cert <path>` if either is refused
    /// ([`crate::haproxy_rt::update_cert`]).
    UpdateCert { path: String },
    /// `set map <map> <key> <value>`: a split's share in its listener's splits map
    /// ([`crate::render_http::split_entries`]), when only weights changed.
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

/// A comment line with a digest of the route files' names and contents.
fn files_version(files: &BTreeMap<String, String>) -> String {
    if files.is_empty() {
        return String::new();
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, text) in files {
        for b in name.bytes().chain([0]).chain(text.bytes()).chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("\n# route files version {h:016x}\n")
}

/// One comment line per Secret certificate the routes use, with its content version: a
/// renewed certificate changes the config, so the proxy reloads and serves it (the file
/// name alone does not change).
fn cert_versions(view: &NodeView) -> String {
    let Some(h) = &view.http else {
        return String::new();
    };
    let files: std::collections::BTreeSet<&k8slb_common::routes::CertFile> = h
        .routes
        .listeners
        .iter()
        .filter_map(|l| l.tls.as_ref())
        .flat_map(|t| {
            t.certificates
                .iter()
                .map(|c| &c.file)
                .chain(&t.default_certificate)
        })
        .filter(|f| !f.version().is_empty())
        .collect();
    // A line of its own even if the text before it does not end its last line.
    files
        .iter()
        .map(|f| format!("\n# certificate {} version {}", f.stem(), f.version()))
        .chain((!files.is_empty()).then(|| "\n".to_string()))
        .collect()
}

/// The routes part of [`is_structural`] for HAProxy: everything but the endpoints of
/// the route backends (their slot contents); the slot count is structural.
fn same_routes_structure(old: &NodeView, new: &NodeView) -> bool {
    match (&old.http, &new.http) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.opts == b.opts
                && listeners_but_cert_versions(&a.routes) == listeners_but_cert_versions(&b.routes)
                && crate::render_stream::streams_but_weights(&a.routes)
                    == crate::render_stream::streams_but_weights(&b.routes)
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
    for (lo, ln) in o.routes.listeners.iter().zip(&n.routes.listeners) {
        let before = crate::render_http::split_entries(lo);
        let after = crate::render_http::split_entries(ln);
        if before == after {
            continue;
        }
        let Ok(map) = crate::render_http::splits_map_path(ln, &n.opts) else {
            continue;
        };
        set_changed_entries(&map, &before, &after, &mut cmds);
    }
    // The streams' splits (TCP and TLS; same structure, so the same listeners).
    for (so, sn) in o.routes.streams.iter().zip(&n.routes.streams) {
        if sn.protocol.is_udp() {
            continue;
        }
        let before = crate::render_stream::stream_split_entries(so);
        let after = crate::render_stream::stream_split_entries(sn);
        if before == after {
            continue;
        }
        let Ok(map) = crate::render_stream::stream_splits_map_path(sn, &n.opts) else {
            continue;
        };
        set_changed_entries(&map, &before, &after, &mut cmds);
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
            let path = crate::render_http::cert_path(&f, &n.opts).ok()?;
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
