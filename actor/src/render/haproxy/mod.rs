//! haproxy.cfg: the Services' part (the view's [`crate::view::HaproxyView`], serialised in
//! parallel chunks) and the routes' part ([`HaproxyRoutes`]: HTTP frontends in
//! [`http`], L4 stream frontends in [`stream`], the routes' backends from the view).

pub(crate) mod http;
pub(crate) mod stream;

use crate::render::haproxy::http::hp_frontend;
use crate::render::haproxy::http::HpFrontend;
use crate::render::haproxy::stream::{hp_streams, HpStream};
use crate::render::{context, par_array, threads, to_value};
use crate::render_error::RenderError;
use crate::view::HttpRenderOptions;
use crate::view::{
    backend_copies, route_backend_name, route_backends, Backend, BackendCopy, HaproxyView, Skipped,
    StickSource,
};
use k8slb_common::names::{ConfigLine, NodeName};
use k8slb_common::routes::{HttpRoutes, Retry, Sticky};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use tera::Context;

pub(crate) const HAPROXY: &str = "haproxy.cfg.tera";

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

pub(crate) fn haproxy_ctx(
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

/// The HAProxy part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaproxyRoutes {
    /// Frontends and backends, to append to haproxy.cfg.
    pub text: String,
    /// The crt-list and map files the text names: full path → content. The actor
    /// writes them before checking the config. (Map entries can later be changed over
    /// the Runtime API, `set map` / `add map`, for route changes without a reload.)
    pub files: BTreeMap<String, String>,
    /// The backends with their slots: pass them as `prev` next time.
    pub backends: Vec<Backend>,
    /// What was not rendered as modelled, one line each.
    pub notes: Vec<String>,
}

/// The routes' part of haproxy.cfg as the actor renders it: [`HaproxyRoutes`] without the
/// backends, which the view holds.
pub(crate) struct RoutesPart {
    pub(crate) text: String,
    pub(crate) files: BTreeMap<String, String>,
    /// What was not rendered as modelled ([`HaproxyRoutes::notes`]).
    pub(crate) notes: Vec<String>,
}

#[derive(Serialize)]
pub(crate) struct HpCtx<'a> {
    frontends: Vec<HpFrontend>,
    /// The L4 streams' frontends ([`crate::render::haproxy::stream`]).
    streams: Vec<HpStream>,
    /// Streams not rendered, one comment line each.
    skipped_streams: Vec<String>,
    backends: Vec<HpBackend<'a>>,
    httpfront: &'a [ConfigLine],
    httpback: &'a [ConfigLine],
    tcpfront: &'a [ConfigLine],
    tcpback: &'a [ConfigLine],
    /// Some rule has a timeout: the HTTP backends apply `txn.k8slb_to` (HAProxy 2.6
    /// takes `set-timeout` only in a section with a backend's capability).
    timeouts: bool,
    /// Some rule has a retry: a request whose rule set `txn.k8slb_rt` goes to its
    /// backend's retrying copy ([`crate::view::BackendCopy`]).
    retries: bool,
    /// Some rule mirrors: the Lua file of the action that copies requests, which a
    /// `global` section of the routes' part loads before the frontends use it, and the
    /// frontend that sends the copies on to their backends ([`http::MIRROR_LUA`]).
    mirror: Option<HpMirror>,
}

/// RequestMirror's Lua file, and the unix socket ([`hop_socket`]) where its copies go:
/// the frontend `k8slb_mirror` binds it, the Lua action connects to it.
#[derive(Serialize)]
pub(crate) struct HpMirror {
    lua: String,
    socket: String,
}

#[derive(Serialize)]
pub(crate) struct HpBackend<'a> {
    name: &'a str,
    mode: k8slb_common::state::Mode,
    stick_source: &'a Option<StickSource>,
    cookie: Option<String>,
    /// A retrying copy's `retries` and `retry-on` lines (fixed keywords and validated
    /// numbers only).
    retry: Vec<String>,
    server_lines: String,
}

/// HAProxy's lines of retry policy `r`: `retries <attempts>` (unless the default is
/// asked), and `retry-on` with a connection failure (HAProxy's default, kept) and each
/// code ([`k8slb_common::routes::RetryCode`]: one `retry-on` takes).
pub(crate) fn hp_retry_lines(r: &Retry) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(a) = r.attempts {
        lines.push(format!("retries {}", a.get()));
    }
    let mut on = String::from("retry-on conn-failure");
    for c in &r.codes {
        on.push(' ');
        on.push_str(&c.get().to_string());
    }
    lines.push(on);
    lines
}

/// The unix socket of HAProxy's internal hop `name`: `unix@<hop_dir>/<name>.sock`,
/// bound `mode 600` (in the actor's 0700 directory) by the internal frontend, which the
/// listener's frontend reaches through a backend of one server on it. Every internal
/// hop is one: a TLS port of both modes' terminating frontend ([`stream`], `name` its
/// frontend's, `rts_<address>_<port>`), a virtual host's frontend of conditional rules
/// ([`http`], its backend's, `rtv_<address>_<port>_v<N>`), RequestMirror's frontend
/// (`k8slb_mirror`). Never `abns@`: an abstract socket lives in the network namespace
/// (the host's: hostNetwork), with no permissions, so any process of the node could
/// connect and, where the hop takes a PROXY header, claim any client address past the
/// listener's checks. The names come from addresses, ports and indexes alone; a path
/// too long for a unix socket (107 bytes) is the admin's work dir, refused whole.
pub(crate) fn hop_socket(o: &HttpRenderOptions, name: &str) -> Result<String, RenderError> {
    use crate::render::files::{path_err, render_err};
    let dir = crate::view::safe_path("hop sockets directory", &o.hop_dir).map_err(path_err)?;
    let path = format!("{}/{name}.sock", dir.trim_end_matches('/'));
    if path.len() > 107 {
        return Err(render_err(
            HAPROXY_ROUTES,
            format!("the hop socket path {path} is longer than a unix socket path may be (107 bytes): use a shorter --work-dir"),
        ));
    }
    Ok(format!("unix@{path}"))
}

/// The template of the L7 routes and L4 streams part of haproxy.cfg.
pub const HAPROXY_ROUTES: &str = "haproxy-routes.cfg.tera";

impl crate::render::HttpRenderer {
    /// The HAProxy frontends and backends of `routes`. `prev`: the backends of the
    /// previous render, so endpoints keep their slots. (The actor's render takes the
    /// slots the view assigned instead: [`Self::haproxy_with_backends`].)
    pub fn haproxy(
        &self,
        routes: &HttpRoutes,
        o: &HttpRenderOptions,
        prev: &[Backend],
    ) -> Result<HaproxyRoutes, RenderError> {
        let backends = route_backends(routes, prev, &crate::render::files::files_dir(o)?, &|c| {
            crate::view::client_cert_file(c, o)
        });
        let RoutesPart { text, files, notes } = self.haproxy_with_backends(routes, o, &backends)?;
        Ok(HaproxyRoutes {
            text,
            files,
            backends,
            notes,
        })
    }

    /// The text, files and notes of the routes' part, with `backends` (the view's
    /// [`crate::view::HttpPart::backends`], whose server slots it assigned) as they are.
    pub(crate) fn haproxy_with_backends(
        &self,
        routes: &HttpRoutes,
        o: &HttpRenderOptions,
        backends: &[Backend],
    ) -> Result<RoutesPart, RenderError> {
        let mut notes = Vec::new();
        let mut files = BTreeMap::new();
        let mut frontends = Vec::new();
        for l in &routes.listeners {
            frontends.extend(hp_frontend(l, o, &mut files, &mut notes)?);
        }
        let (streams, skipped_streams) = hp_streams(routes, o, &mut files, &mut notes)?;
        crate::render::files::ca_files(routes, o, &mut files)?;
        let mirror = routes
            .listeners
            .iter()
            .flat_map(|l| &l.virtual_hosts)
            .flat_map(|v| &v.rules)
            .any(|r| !r.filters.mirrors.is_empty() || !r.filters.partial_mirrors.is_empty());
        let mirror = match mirror {
            true => {
                let lua = format!("{}/k8slb-mirror.lua", crate::render::files::files_dir(o)?);
                let socket = hop_socket(o, "k8slb_mirror")?;
                files.insert(lua.clone(), http::mirror_lua(&socket));
                Some(HpMirror { lua, socket })
            }
            false => None,
        };
        let copies = backend_copies(routes);
        let retry_lines: HashMap<String, Vec<String>> = copies
            .iter()
            .filter_map(|c| Some((c.name(), hp_retry_lines(c.retry?))))
            .collect();
        let names = |id| {
            std::iter::once(route_backend_name(id)).chain(
                copies
                    .iter()
                    .filter(move |c| c.id == id)
                    .map(BackendCopy::name),
            )
        };
        let cookie_names: HashMap<String, String> = routes
            .backends
            .iter()
            .filter_map(|(id, st)| match &st.stickiness {
                Some(Sticky::Cookie { name }) => Some(names(id).map(|n| (n, name.to_string()))),
                _ => None,
            })
            .flatten()
            .collect();
        let ctx = HpCtx {
            frontends,
            streams,
            skipped_streams,
            backends: backends
                .iter()
                .map(|b| HpBackend {
                    name: &b.name,
                    mode: b.mode,
                    stick_source: &b.stick_source,
                    cookie: cookie_names.get(&b.name).cloned(),
                    retry: retry_lines.get(&b.name).cloned().unwrap_or_default(),
                    server_lines: b.server_lines(),
                })
                .collect(),
            httpfront: &o.httpfront,
            httpback: &o.httpback,
            tcpfront: &o.tcpfront,
            tcpback: &o.tcpback,
            timeouts: routes
                .listeners
                .iter()
                .flat_map(|l| &l.virtual_hosts)
                .flat_map(|v| &v.rules)
                .any(|r| r.filters.timeout.is_some()),
            retries: copies.iter().any(|c| c.retry.is_some()),
            mirror,
        };
        let text = self.one(HAPROXY_ROUTES, ctx)?;
        Ok(RoutesPart { text, files, notes })
    }
}
