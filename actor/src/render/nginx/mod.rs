//! nginx.conf: the Services' part (the view's [`crate::view::NginxView`]) and the routes'
//! part ([`NginxRoutes`]: servers and locations in [`http`], the stream module's in
//! [`stream`]).

pub(crate) mod http;
pub(crate) mod stream;

use crate::render::nginx::http::{
    nx_hash_lines, nx_listener_h2, nx_misdirected_maps, nx_server, nx_upstreams, NxSplits,
};
use crate::render::nginx::http::{NxBlock, NxEntry, NxServer, NxUpstream};
use crate::render::{context, par_array, threads, to_value};
use crate::render_error::RenderError;
use crate::view::HttpRenderOptions;
use crate::view::{route_backend_name, NginxView, Skipped};
use k8slb_common::names::{ConfigLine, NodeName};
use k8slb_common::routes::{BackendProtocol, HttpRoutes};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use tera::Context;

pub(crate) const NGINX: &str = "nginx.conf.tera";

/// The same for nginx.conf: `{ node, nx, skipped }`.
#[derive(Serialize)]
struct NginxHead<'a> {
    pid_file: &'a str,
    global: &'a [ConfigLine],
    add_events: bool,
    worker_connections: u64,
    stream_module: Option<&'static str>,
    /// [`crate::render::nx_http_base`]
    base: Vec<String>,
    http: &'a [ConfigLine],
    proxy: &'a [ConfigLine],
    /// [`crate::view::nginx_upgrade_lines`]
    upgrade: &'a [&'static str],
    /// `proxy` for the h2c ports' `grpc_pass` ([`crate::render::nx_grpc_line`]).
    grpc_proxy: Vec<String>,
    /// The client certificate headers a client sent, deleted in every proxied location
    /// ([`http::nx_client_cert_lines`]; `grpc_*` for `grpc_pass`).
    client_cert: Vec<String>,
    grpc_client_cert: Vec<String>,
    upstream: &'a [ConfigLine],
    stream: &'a [ConfigLine],
    has_stream: bool,
}

pub(crate) fn nginx_ctx(
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
        base: crate::render::nx_http_base(http),
        http,
        proxy,
        upgrade,
        grpc_proxy: proxy
            .iter()
            .map(|l| crate::render::nx_grpc_line(l.as_str()))
            .collect(),
        client_cert: http::nx_client_cert_lines(None),
        grpc_client_cert: http::nx_client_cert_lines(None)
            .iter()
            .map(|l| crate::render::nx_grpc_line(l))
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

pub const NGINX_ROUTES: &str = "nginx-routes.conf.tera";

pub const NGINX_STREAMS: &str = "nginx-streams.conf.tera";

/// The nginx part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NginxRoutes {
    /// Upstreams and servers, to put inside `http { }`.
    pub text: String,
    /// The L4 streams' upstreams, maps and servers, to put inside `stream { }` (empty
    /// without streams).
    pub stream_text: String,
    /// The files the text names (the backends' CA bundles): full path → content.
    pub files: BTreeMap<String, String>,
    pub notes: Vec<String>,
}

/// The routes' part of nginx.conf (`nginx-routes.conf.tera`): the template writes the
/// hash sizes, upstreams, `split_clients` and `map` blocks and servers from data (a
/// validated name, path or number, a generated variable or regex, an admin
/// `ConfigLine`); only each server's locations come pre-rendered (see
/// `NxServer::location_lines`: a template loop over them is 3.5 times slower).
#[derive(Serialize)]
pub(crate) struct NxCtx<'a> {
    /// `server_names_hash_*` directives (key) and sizes (value) for these server names
    /// (see [`nx_hash_lines`]).
    hash_lines: Vec<NxEntry>,
    upstreams: Vec<NxUpstream>,
    /// `split_clients` and `map` blocks ([`NxSplits`]).
    split_blocks: Vec<NxBlock>,
    servers: Vec<NxServer>,
    proxy_lines: &'a [ConfigLine],
    upstream_lines: &'a [ConfigLine],
}

/// A `proxy_*` line as the `grpc_*` line that does the same for `grpc_pass` (header
/// edits and the timeouts and retries of the default `nginx.proxy` lines); any other
/// line as it is (nginx accepts a `proxy_*` line beside `grpc_pass`: it does nothing).
pub fn nx_grpc_line(line: &str) -> String {
    const SAME: [&str; 7] = [
        "proxy_set_header",
        "proxy_hide_header",
        "proxy_pass_header",
        "proxy_connect_timeout",
        "proxy_read_timeout",
        "proxy_send_timeout",
        "proxy_next_upstream",
    ];
    let word = line.split_whitespace().next().unwrap_or_default();
    if SAME.contains(&word) {
        format!("grpc_{}", &line[line.find("proxy_").unwrap_or(0) + 6..])
    } else {
        line.to_string()
    }
}

/// The `http { }` lines k8slb writes into every nginx.conf before the admin's
/// (`nginx.http`), for the Services' HTTP servers and the routes alike:
///
/// - `$k8slb_host`, the `Host` a backend gets with the default `nginx.proxy` lines: the
///   client's header as it was sent (with its port, its case, a trailing dot), as HAProxy
///   passes it; the address the request came to when the client sent none (HTTP/1.0;
///   nginx speaks HTTP/1.1 to backends, which needs one); the host nginx routed on when
///   the header names another (a request line with an absolute URI, which HAProxy
///   refuses with 400). nginx's `$host` drops the port (`very.specific.com:1234` reached
///   the backend as `very.specific.com`).
/// - `server_tokens off` (unless the admin's lines set `server_tokens`): nginx's own
///   `Server` header, which it writes on every answer in place of a backend's, says
///   `nginx` without its version (it said `nginx/<version>`). Passing a backend's
///   instead (`proxy_pass_header Server`) would leave answers without one when the
///   backend sends none, as the conformance echo server does.
pub fn nx_http_base(admin_http: &[ConfigLine]) -> Vec<String> {
    let mut out = Vec::new();
    if !admin_http
        .iter()
        .any(|l| l.as_str().split_whitespace().next() == Some("server_tokens"))
    {
        out.push("server_tokens off;".to_string());
    }
    out.push(
        "map $server_addr $k8slb_addr {\n    \"~:\" \"[$server_addr]\";\n    default $server_addr;\n  }"
            .to_string(),
    );
    // The outcome of a client's certificate on an AllowInsecureFallback listener
    // (http::nx_client_cert_lines): nginx's `$ssl_client_verify` is SUCCESS, NONE or
    // FAILED:<reason>.
    out.push(
        "map $ssl_client_verify $k8slb_client_verify {\n    default FAILED;\n    SUCCESS SUCCESS;\n    NONE NONE;\n  }"
            .to_string(),
    );
    // The Connection header of a proxied request (view::nginx_upgrade_lines): `upgrade`
    // for a WebSocket handshake, else `close` (nginx's own default).
    out.push(
        "map $http_upgrade $k8slb_connection {\n    default upgrade;\n    \"\" close;\n  }"
            .to_string(),
    );
    out.push(
        [
            "map \"$host $http_host\" $k8slb_host {",
            "    default $host;",
            "    \"~ $\" $k8slb_addr;",
            "    \"~*^(?<k8slb_h>[^ ]+) (?<k8slb_hh>\\k<k8slb_h>[.]?(:[0-9]+)?)$\" $k8slb_hh;",
            "  }",
        ]
        .join("\n"),
    );
    out
}

impl crate::render::HttpRenderer {
    /// The nginx upstreams and servers of `routes` (inside `http { }`).
    pub fn nginx(
        &self,
        routes: &HttpRoutes,
        o: &HttpRenderOptions,
    ) -> Result<NginxRoutes, RenderError> {
        let mut notes = Vec::new();
        let upstreams = nx_upstreams(routes, &mut notes);
        let mut servers = Vec::new();
        let mut splits = NxSplits {
            h2c: routes
                .backends
                .iter()
                .filter(|(_, b)| b.protocol == BackendProtocol::H2c)
                .map(|(id, _)| route_backend_name(id))
                .chain(
                    k8slb_common::certs::client_certificates_by_backend(routes)
                        .into_iter()
                        .filter(|(id, _)| {
                            routes
                                .backends
                                .get(*id)
                                .is_some_and(|b| b.protocol == BackendProtocol::H2c)
                        })
                        .map(|(id, c)| crate::view::client_cert_backend_name(id, c)),
                )
                .collect(),
            tls: {
                let dir = crate::render::files::files_dir(o)?;
                routes
                    .backends
                    .iter()
                    .filter_map(|(id, b)| {
                        let t = b.tls.as_ref()?;
                        Some((
                            route_backend_name(id),
                            (t.server_name.to_string(), crate::view::ca_file(&dir, &t.ca)),
                        ))
                    })
                    .collect()
            },
            cert_opts: o.clone(),
            ..NxSplits::default()
        };
        for l in &routes.listeners {
            splits.listen_h2 = nx_listener_h2(l, routes, &mut notes);
            splits.misdirected = nx_misdirected_maps(l, &mut splits);
            for v in &l.virtual_hosts {
                servers.extend(nx_server(l, Some(v), o, &mut notes, &mut splits)?);
            }
            if !l.virtual_hosts.iter().any(|v| v.host.is_none()) {
                servers.extend(nx_server(l, None, o, &mut notes, &mut splits)?);
            }
        }
        notes.append(&mut splits.tls_refused);
        let hash_lines = nx_hash_lines(&servers, o, &mut notes);
        let text = self.one(
            NGINX_ROUTES,
            NxCtx {
                hash_lines,
                upstreams,
                split_blocks: splits.blocks,
                servers,
                proxy_lines: &o.nginx_proxy,
                upstream_lines: &o.nginx_upstream,
            },
        )?;
        let streams = crate::render::nginx::stream::nx_streams(routes, o, &mut notes)?;
        let stream_text = if streams.is_empty() {
            String::new()
        } else {
            self.one(NGINX_STREAMS, streams)?
        };
        let mut files = BTreeMap::new();
        crate::render::files::ca_files(routes, o, &mut files)?;
        Ok(NginxRoutes {
            text,
            stream_text,
            files,
            notes,
        })
    }
}
