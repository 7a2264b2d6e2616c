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
//!
//! Layout, by what is rendered: [`keepalived`] (keepalived.conf), [`haproxy`] (haproxy.cfg:
//! the Services' part from [`crate::view::HaproxyView`], the routes' HTTP frontends in
//! `haproxy::http`, their L4 frontends in `haproxy::stream`), [`nginx`] (nginx.conf, the
//! same three parts), [`files`] (names and contents of the files a config names: map and
//! crt-list files, the one splits-map writer, slugs), [`runtime`] (what a change needs:
//! a reload or Runtime API commands). The routes' part is rendered by [`HttpRenderer`]
//! from the view's [`crate::view::HttpPart`], whose HAProxy backends and server slots the
//! view computed once ([`crate::view::route_backends`]).
//!
//! Routes safety: every value written is a validated type from the model (`Hostname`,
//! `HttpPath`, `CookieName`, `ObjectName`, `PoolName`, numbers, addresses), a path checked
//! by [`crate::view::safe_path`], an admin `ConfigLine`, or a fixed keyword from this file.
//! HAProxy routes through map files ([`HaproxyRoutes::files`]: hosts, wildcards, Exact
//! and Prefix paths, keyed by validated hosts and paths) so a request costs a few lookups
//! whatever the number of rules; see the template for the lookup chain. nginx server names
//! are pre-rendered here (a wildcard host becomes a regex made only of `^[^.]+`, label
//! characters and `[.]`).

pub(crate) mod files;
pub(crate) mod haproxy;
pub(crate) mod keepalived;
pub(crate) mod nginx;
pub(crate) mod runtime;
#[cfg(test)]
mod tests;

use crate::render::files::{cert_versions, files_version, render_err};
use crate::render::haproxy::{haproxy_ctx, HAPROXY};
use crate::render::keepalived::KEEPALIVED;
use crate::render::nginx::{nginx_ctx, NGINX};
pub use crate::render_error::RenderError;
pub use crate::view::HttpRenderOptions;
use crate::view::{NodeView, Skipped};
pub use files::{cert_path, cumulative_shares, cumulative_shares_with, SplitsMap, SPLIT_SCALE};
pub use haproxy::stream::streams_but_weights;
pub use haproxy::{HaproxyRoutes, HAPROXY_ROUTES};
use k8slb_common::names::NodeName;
use k8slb_common::state::Provider;
pub use nginx::stream::{nx_weights, NGINX_SINK};
pub use nginx::{nx_grpc_line, nx_http_base, NginxRoutes, NGINX_ROUTES, NGINX_STREAMS};
pub use runtime::{is_structural, runtime_diff, Config, RuntimeCommand};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tera::{Context, Tera};

/// The template files, by name, with their embedded defaults.
pub const TEMPLATES: [(&str, &str); 3] = [
    (
        KEEPALIVED,
        include_str!("../../../templates/keepalived.conf.tera"),
    ),
    (HAPROXY, include_str!("../../../templates/haproxy.cfg.tera")),
    (NGINX, include_str!("../../../templates/nginx.conf.tera")),
];

/// The full error chain of a tera error on one line (tera hides the cause in `source`).
pub(crate) fn chain(e: &tera::Error) -> String {
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
    http: crate::render::HttpRenderer,
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
    /// Files the proxy config names (the routes' HAProxy map and crt-list files, the CA
    /// bundles of both proxies' verified backends and client certificates): full
    /// path → content. Staged with the config, checked with it and installed with it
    /// ([`crate::staged`]).
    pub files: BTreeMap<String, String>,
    /// What the routes' render left out or rendered otherwise than modelled, one line
    /// each (the view's own are in [`NodeView::notes`]).
    pub notes: Vec<String>,
}

/// A proxy config, the files it names and the routes' render notes.
type ProxyPart = (Option<String>, BTreeMap<String, String>, Vec<String>);

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

pub(crate) fn to_value<T: Serialize + ?Sized>(
    name: &'static str,
    v: &T,
) -> Result<Value, RenderError> {
    serde_json::to_value(v).map_err(|e| RenderError::Render {
        name,
        detail: e.to_string(),
    })
}

/// `items` as a JSON array, serialised by up to `threads` threads (a 10,000-Service
/// view has 20,000 frontends and 20,000 backends; serialising them is a third of the
/// render). Same value as `serde_json::to_value(items)`.
pub(crate) fn par_array<T: Serialize + Sync>(
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
pub(crate) fn context(
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

pub(crate) fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
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
            http: crate::render::HttpRenderer::embedded()?,
            last_len: Arc::default(),
        })
    }

    pub(crate) fn one(&self, name: &'static str, ctx: &Context) -> Result<String, RenderError> {
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

    /// haproxy.cfg / nginx.conf, `None` for kubeproxy.
    pub fn render_proxy(&self, view: &NodeView) -> Result<Option<String>, RenderError> {
        self.render_proxy_and_files(view).map(|(text, _, _)| text)
    }

    /// The proxy config with the routes in it, and the files it names.
    fn render_proxy_and_files(&self, view: &NodeView) -> Result<ProxyPart, RenderError> {
        match view.proxy {
            Provider::Haproxy => {
                let hp = view
                    .haproxy
                    .as_ref()
                    .ok_or(RenderError::MissingPart("haproxy"))?;
                let routes = match &view.http {
                    Some(h) => Some(self.http.haproxy_with_backends(
                        &h.routes,
                        &h.opts,
                        &h.backends,
                    )?),
                    None => None,
                };
                let ctx = haproxy_ctx(&view.node, hp, &view.skipped)?;
                let out = self.one_sized(HAPROXY, &ctx);
                drop_later(ctx);
                let mut text = out?;
                let mut files = BTreeMap::new();
                let mut notes = Vec::new();
                if let Some(haproxy::RoutesPart {
                    text: routes_text,
                    files: routes_files,
                    notes: routes_notes,
                }) = routes
                {
                    notes = routes_notes;
                    // Frontends and backends are top-level sections: after the rest.
                    text.push('\n');
                    text.push_str(&routes_text);
                    text.push_str(&cert_versions(view));
                    // HAProxy reads map and crt-list files only when it loads its
                    // config: a change in them alone must change the config, or a new
                    // host or path would wait for an unrelated reload.
                    text.push_str(&files_version(&routes_files));
                    files = routes_files;
                }
                Ok((Some(text), files, notes))
            }
            Provider::Nginx => {
                let nx = view
                    .nginx
                    .as_ref()
                    .ok_or(RenderError::MissingPart("nginx"))?;
                let (routes, stream_routes, files, notes) = match &view.http {
                    Some(h) => {
                        let r = self.http.nginx(&h.routes, &h.opts)?;
                        (
                            r.text + &cert_versions(view),
                            r.stream_text,
                            r.files,
                            r.notes,
                        )
                    }
                    None => (String::new(), String::new(), BTreeMap::new(), Vec::new()),
                };
                let ctx = nginx_ctx(&view.node, nx, &view.skipped, routes, stream_routes)?;
                let out = self.one_sized(NGINX, &ctx);
                drop_later(ctx);
                out.map(|t| (Some(t), files, notes))
            }
            Provider::Kubeproxy => Ok((None, BTreeMap::new(), Vec::new())),
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
        let (proxy, files, notes) = proxy?;
        Ok(Rendered {
            keepalived: keepalived?,
            proxy,
            files,
            notes,
        })
    }
}

pub const ROUTE_TEMPLATES: [(&str, &str); 3] = [
    (
        HAPROXY_ROUTES,
        include_str!("../../../templates/haproxy-routes.cfg.tera"),
    ),
    (
        NGINX_ROUTES,
        include_str!("../../../templates/nginx-routes.conf.tera"),
    ),
    (
        NGINX_STREAMS,
        include_str!("../../../templates/nginx-streams.conf.tera"),
    ),
];

/// The parsed route templates.
#[derive(Debug, Clone)]
pub struct HttpRenderer {
    tera: Tera,
}

impl HttpRenderer {
    /// The templates compiled into the binary.
    pub fn embedded() -> Result<Self, RenderError> {
        let mut tera = Tera::default();
        // Config files, not HTML: nothing is escaped (values are validated).
        tera.autoescape_on(vec![]);
        for (name, text) in ROUTE_TEMPLATES {
            tera.add_raw_template(name, text)
                .map_err(|e| RenderError::ParseTemplate {
                    name: name.to_string(),
                    detail: e.to_string(),
                })?;
        }
        Ok(HttpRenderer { tera })
    }

    pub(crate) fn one(
        &self,
        name: &'static str,
        ctx: impl Serialize,
    ) -> Result<String, RenderError> {
        let ctx = Context::from_serialize(ctx).map_err(|e| render_err(name, e))?;
        self.tera.render(name, &ctx).map_err(|e| {
            let mut s = e.to_string();
            let mut cur = std::error::Error::source(&e);
            while let Some(c) = cur {
                s.push_str(": ");
                s.push_str(&c.to_string());
                cur = c.source();
            }
            render_err(name, s)
        })
    }
}
