//! The HTTP routes of nginx.conf: one `server` per listener and virtual host, locations
//! for Exact and Prefix paths, `map` blocks for rules that match on more than the path,
//! `split_clients` for weighted splits.

use crate::render::files::{cert_path, listener_scheme, one_label_regex};
use crate::render::haproxy::http::literal_regex;
use crate::render::nginx::nx_grpc_line;
use crate::render_error::RenderError;
use crate::view::HttpRenderOptions;
use crate::view::{route_backend_name, weighted_backend_name, PLACEHOLDER};
use k8slb_common::names::ConfigLine;
use k8slb_common::routes::{
    BackendId, BackendProtocol, CertFile, FieldName, FieldValue, Hostname, HttpRoutes, Listener,
    ListenerProtocol, MirrorShare, PathMatch, PathRewrite, Request, RouteAction, RouteMatch,
    RuleFilters, Scheme, Sticky, VirtualHost,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;

#[derive(Serialize)]
pub(crate) struct NxUpstream {
    name: String,
    hash_source: bool,
    /// Pre-rendered: a template loop over 10,000 servers made the routes render 14%
    /// slower (issue 22's budget is 10%).
    server_lines: String,
}

/// The files of a server's certificate: a pool's are `<pool>.pem` and `<pool>.key` (as
/// for Services); a Secret's is one `<stem>.pem` holding the chain and then the key
/// (nginx reads the key from the same file).
#[derive(Serialize)]
struct NxTls {
    cert: String,
    key: String,
    /// Clients must present a certificate chaining to this CA file
    /// (`ssl_verify_client on`; one that does not is closed, as HAProxy's handshake
    /// failure closes it).
    client_ca: Option<String>,
    /// `AllowInsecureFallback`: `ssl_verify_client optional_no_ca` (a client without a
    /// certificate, or with one of another CA or self-signed, is let in; nginx still
    /// refuses an expired one, closed as above), the outcome told to the backend
    /// ([`nx_client_cert_lines`]).
    fallback: bool,
}

/// The `proxy_set_header` lines of every location that proxies a request of listener
/// `l` (a location with any `proxy_set_header` inherits none of its server's, so they
/// are written in each): on an `AllowInsecureFallback` listener, the outcome of the
/// client's certificate (`$k8slb_client_verify`, [`super::nx_http_base`]) and the
/// certificate (URL-encoded PEM); on any other, both headers sent empty, which nginx
/// leaves out: a copy a client sent never reaches a backend.
pub(crate) fn nx_client_cert_lines(l: Option<&Listener>) -> Vec<String> {
    use k8slb_common::routes::{CLIENT_CERT_HEADER, CLIENT_CERT_VERIFY_HEADER};
    let fallback = l
        .and_then(|l| l.tls.as_ref())
        .is_some_and(|t| t.client_ca.is_some() && t.client_validation.is_fallback());
    if fallback {
        vec![
            format!("proxy_set_header {CLIENT_CERT_VERIFY_HEADER} $k8slb_client_verify;"),
            format!("proxy_set_header {CLIENT_CERT_HEADER} $ssl_client_escaped_cert;"),
        ]
    } else {
        vec![
            format!("proxy_set_header {CLIENT_CERT_VERIFY_HEADER} \"\";"),
            format!("proxy_set_header {CLIENT_CERT_HEADER} \"\";"),
        ]
    }
}

/// Is `l` (a `proxy_set_header` line) one of the client certificate headers, which
/// [`nx_client_cert_lines`] set in every location?
fn nx_sets_client_cert_header(l: &str) -> bool {
    use k8slb_common::routes::{CLIENT_CERT_HEADER, CLIENT_CERT_VERIFY_HEADER};
    let mut words = l.split_whitespace();
    words.next() == Some("proxy_set_header")
        && words.next().is_some_and(|h| {
            h.eq_ignore_ascii_case(CLIENT_CERT_HEADER)
                || h.eq_ignore_ascii_case(CLIENT_CERT_VERIFY_HEADER)
        })
}

#[derive(Serialize)]
pub(crate) struct NxServer {
    listen: String,
    default: bool,
    server_name: String,
    tls: Option<NxTls>,
    /// `http2` on the listen ([`nx_listener_h2`]).
    h2: bool,
    /// The `map` variable that is `1` for a misdirected request on this listener
    /// ([`nx_misdirected_maps`]): the server answers it `421`.
    misdirected: Option<String>,
    /// The locations, pre-rendered by [`nx_location_lines`] (a template loop over them
    /// made the render 3.5 times slower).
    location_lines: String,
}

/// The value a split variable takes for the invalid references' share: a location that
/// proxies through a variable returns 500 for it.
const NX_INVALID_SHARE: &str = "k8slb_500";

/// Does nginx put `http2` on the listener's `listen`? On TLS, when some location of it
/// forwards to an h2c backend (ALPN then offers h2 and http/1.1). On cleartext, only when
/// every backend it forwards to speaks h2c: nginx before 1.25.1 takes only HTTP/2 on a
/// cleartext `http2` port, so one HTTP/1.1 backend beside them keeps the port HTTP/1.1
/// (and its h2c backends reachable by HTTP/1.1 clients only: a note says so).
pub(crate) fn nx_listener_h2(l: &Listener, routes: &HttpRoutes, notes: &mut Vec<String>) -> bool {
    // Gateway API HTTPS listeners (they answer misdirected requests 421: HTTP/2's
    // connection reuse is safe there) offer h2 as HAProxy's do.
    if l.tls.as_ref().is_some_and(|t| t.zones.is_some()) {
        return true;
    }
    let mut ids = BTreeSet::new();
    let actions = l
        .virtual_hosts
        .iter()
        .flat_map(|v| v.rules.iter().map(|r| &r.action))
        .chain(l.default_action.as_ref());
    for a in actions {
        if let RouteAction::Forward { backends, .. } = a {
            ids.extend(backends.iter().filter(|b| b.weight > 0).map(|b| &b.id));
        }
    }
    let h2c = |id: &&BackendId| {
        routes
            .backends
            .get(*id)
            .is_some_and(|b| b.protocol == BackendProtocol::H2c)
    };
    let some = ids.iter().any(h2c);
    match l.protocol {
        ListenerProtocol::Https => some,
        ListenerProtocol::Http => {
            let all = some && ids.iter().all(h2c);
            if some && !all {
                notes.push(format!(
                    "{}: nginx cannot take h2c and HTTP/1.1 on one cleartext port; its h2c backends are reached by HTTP/1.1 clients only",
                    SocketAddr::new(l.ip, l.port)
                ));
            }
            all
        }
    }
}

/// The `location` blocks of one server, as nginx.conf lists them: pre-rendered here
/// rather than walked by the template, which made the nginx routes render 3.5 times
/// slower (issue 22: 5,000 hosts, 30,000 locations, 60 ms -> 200-290 ms).
fn nx_location_lines(
    locations: &[NxLocation],
    (proxy_lines, client_cert_lines): (&[ConfigLine], &[String]),
    invalid_shares: bool,
) -> String {
    let upgrade_lines = crate::view::nginx_upgrade_lines(proxy_lines);
    let mut out = String::with_capacity(locations.len() * 96);
    for loc in locations {
        out.push_str("\n    location ");
        out.push_str(&loc.path);
        out.push_str(" {");
        match loc.kind {
            "forward" | "pick" => {
                if invalid_shares && loc.upstream.starts_with('$') {
                    out.push_str(&format!(
                        "\n      if ({} = {NX_INVALID_SHARE}) {{ return 500; }}",
                        loc.upstream
                    ));
                }
                let on = if loc.returns_on.is_empty() {
                    &loc.upstream
                } else {
                    &loc.returns_on
                };
                for (value, r) in &loc.returns {
                    out.push_str(&format!(
                        "\n      if ({on} = {value}) {{ {} }}",
                        nx_return(r)
                    ));
                }
                for l in proxy_lines {
                    let mut words = l.as_str().split_whitespace();
                    if words.next() == Some("proxy_set_header")
                        && words.next().is_some_and(|h| {
                            loc.skip_headers.iter().any(|s| s.eq_ignore_ascii_case(h))
                        })
                    {
                        continue; // a filter of this location sets it
                    }
                    if nx_sets_client_cert_header(l.as_str()) {
                        continue; // k8slb's own, below
                    }
                    out.push_str("\n      ");
                    if loc.h2c {
                        out.push_str(&nx_grpc_line(l.as_str()));
                    } else {
                        out.push_str(l.as_str());
                    }
                }
                for l in client_cert_lines {
                    out.push_str("\n      ");
                    if loc.h2c {
                        out.push_str(&nx_grpc_line(l));
                    } else {
                        out.push_str(l);
                    }
                }
                for l in &loc.filter_lines {
                    out.push_str("\n      ");
                    if loc.h2c {
                        out.push_str(&nx_grpc_line(l));
                    } else {
                        out.push_str(l);
                    }
                }
                // TLS to the backend (a BackendTLSPolicy): verified, the SNI sent being
                // the name checked.
                let module = if loc.h2c { "grpc" } else { "proxy" };
                if let Some((name, ca, client)) = &loc.tls {
                    out.push_str(&format!(
                        "\n      {module}_ssl_server_name on;\n      {module}_ssl_name {name};\n      {module}_ssl_verify on;\n      {module}_ssl_verify_depth 8;\n      {module}_ssl_trusted_certificate {ca};"
                    ));
                    // The Gateway's client certificate (spec.tls.backend): its PEM
                    // holds the chain, then the key.
                    if let Some(c) = client {
                        out.push_str(&format!(
                            "\n      {module}_ssl_certificate {c};\n      {module}_ssl_certificate_key {c};"
                        ));
                    }
                }
                let s = if loc.tls.is_some() { "s" } else { "" };
                if loc.h2c {
                    out.push_str(&format!("\n      grpc_pass grpc{s}://"));
                } else {
                    for l in &upgrade_lines {
                        out.push_str("\n      ");
                        out.push_str(l);
                    }
                    out.push_str(&format!("\n      proxy_pass http{s}://"));
                }
                out.push_str(&loc.upstream);
                out.push(';');
            }
            _ => {
                out.push_str("\n      ");
                out.push_str(&nx_return(loc));
            }
        }
        out.push_str("\n    }");
    }
    out
}

#[derive(Default, Clone)]
struct NxLocation {
    /// `= /p`, `^~ /p/` or `/`.
    path: String,
    /// forward | redirect | respond | pick (see [`nx_conditional_locations`])
    kind: &'static str,
    /// forward: the upstream or split variable; pick: the picking variable.
    upstream: String,
    location: String,
    status: u16,
    /// pick: the values of `returns_on` (else of `upstream`) that return (a redirect or
    /// a status).
    returns: Vec<(String, NxLocation)>,
    /// pick: the variable `returns` are values of.
    returns_on: String,
    /// The filters' lines (after the admin's proxy lines).
    filter_lines: Vec<String>,
    /// Request headers the filters set: the admin's `proxy_set_header` lines for them
    /// are left out of this location (nginx would send both).
    skip_headers: Vec<String>,
    /// forward / pick: every upstream speaks h2c: `grpc_pass grpc://`, and the header
    /// lines as `grpc_*` ([`nx_grpc_line`]).
    h2c: bool,
    /// forward / pick: every upstream is reached over TLS with these settings:
    /// `proxy_pass https://` and the `proxy_ssl_*` lines.
    tls: Option<NxUpTls>,
}

/// How a location reaches its upstreams over TLS (a BackendTLSPolicy): the server name
/// (SNI, and the name verified), the CA bundle's file, and the client certificate's file
/// (chain, then key) it presents, if its rule's Gateway asks for one.
pub(crate) type NxUpTls = (String, String, Option<String>);

/// nginx's variable for request header `n`: `$http_<n with - as _>`.
fn nx_http_var(n: &FieldName) -> String {
    format!("$http_{}", n.as_str().replace('-', "_"))
}

/// The lines of a location whose one rule has filters `f` (see [`nx_pick_filters`] for
/// a location that picks among rules), and the request headers they set.
fn nx_filter_lines(f: &RuleFilters, splits: &mut NxSplits) -> (Vec<String>, Vec<String>) {
    let mut lines = match &f.cors {
        Some(c) => nx_cors_lines(c, splits),
        None => Vec::new(),
    };
    let mut skip = Vec::new();
    let rq = &f.request_headers;
    for n in &rq.remove {
        lines.push(format!("proxy_set_header {n} \"\";"));
        skip.push(n.to_string());
    }
    for h in &rq.set {
        lines.push(format!("proxy_set_header {} \"{}\";", h.name, h.value));
        skip.push(h.name.to_string());
    }
    for h in &rq.add {
        let var = splits.added(&h.name, &h.value);
        lines.push(format!("proxy_set_header {} {var};", h.name));
        skip.push(h.name.to_string());
    }
    if let Some(h) = &f.rewrite_host {
        lines.push(format!("proxy_set_header Host {h};"));
        skip.push("host".into());
    }
    let rs = &f.response_headers;
    for n in rs.remove.iter().chain(rs.set.iter().map(|h| &h.name)) {
        lines.push(format!("proxy_hide_header {n};"));
    }
    for h in rs.set.iter().chain(&rs.add) {
        lines.push(format!("add_header {} \"{}\" always;", h.name, h.value));
    }
    lines.extend(nx_timeout_lines(f.timeout));
    for m in &f.mirrors {
        lines.push(format!(
            "mirror {};",
            nx_mirror_uri(&route_backend_name(m), None)
        ));
    }
    for m in &f.partial_mirrors {
        let uri = nx_mirror_uri(&route_backend_name(&m.backend), Some(m.share));
        lines.push(format!("mirror {uri};"));
    }
    lines.extend(nx_rewrite_lines(f));
    (lines, skip)
}

/// The wait for the backend's answer (nginx answers 504 when it runs out): between two
/// reads and two writes, as nginx measures it.
fn nx_timeout_lines(t: Option<k8slb_common::routes::TimeoutMs>) -> Vec<String> {
    t.map(|t| {
        vec![
            format!("proxy_read_timeout {t};"),
            format!("proxy_send_timeout {t};"),
        ]
    })
    .unwrap_or_default()
}

/// `rewrite ... break;` lines of a URL rewrite (the path is the decoded `$uri`; the
/// query string is kept).
fn nx_rewrite_lines(f: &RuleFilters) -> Vec<String> {
    match &f.rewrite_path {
        None => vec![],
        Some(PathRewrite::Full { path }) => vec![format!("rewrite ^ {path} break;")],
        Some(PathRewrite::Prefix { from, to }) => {
            let from = literal_regex(from.as_str().trim_end_matches('/'));
            let to = to.as_str().trim_end_matches('/');
            if to.is_empty() {
                vec![
                    format!("rewrite ^{from}$ / break;"),
                    format!("rewrite ^{from}(/.*)$ $1 break;"),
                ]
            } else {
                vec![format!("rewrite ^{from}(/.*)?$ {to}$1 break;")]
            }
        }
    }
}

/// The filter lines of a location that picks among rules (`rules`: the rule id each
/// value of `rid` stands for, with its filters): each header any of them changes is
/// set from a `map` on `rid` (the request's own value for the rules that leave it), a
/// response header is hidden and added back from two `map`s (the backend's value, then
/// the rule's), a path rewrite is an `if ($rid = <id>) { rewrite ... break; }`.
fn nx_pick_filters(
    rid: &str,
    rules: &[(String, &RuleFilters)],
    host_default: &str,
    splits: &mut NxSplits,
) -> (Vec<String>, Vec<String>) {
    let mut lines = Vec::new();
    let mut skip = Vec::new();
    // Each map has entries only for the rules that change its value (the others take
    // the default): its size is linear in the filters, not in rules x names.
    let mut names: Vec<&FieldName> = rules
        .iter()
        .flat_map(|(_, f)| f.request_headers.names())
        .collect();
    names.sort();
    names.dedup();
    for n in names {
        let own = nx_http_var(n);
        let mut entries: Vec<(String, String)> = Vec::new();
        for (id, f) in rules {
            let e = &f.request_headers;
            let v = if e.remove.contains(n) {
                "\"\"".to_string()
            } else if let Some(h) = e.set.iter().find(|h| &h.name == n) {
                format!("\"{}\"", h.value)
            } else if let Some(h) = e.add.iter().find(|h| &h.name == n) {
                splits.added(&h.name, &h.value)
            } else {
                continue;
            };
            entries.push((id.clone(), v));
        }
        let var = splits.map_on(rid, &entries, &own);
        lines.push(format!("proxy_set_header {n} {var};"));
        skip.push(n.to_string());
    }
    if rules.iter().any(|(_, f)| f.rewrite_host.is_some()) {
        let entries: Vec<(String, String)> = rules
            .iter()
            .filter_map(|(id, f)| f.rewrite_host.as_ref().map(|h| (id.clone(), h.to_string())))
            .collect();
        let var = splits.map_on(rid, &entries, host_default);
        lines.push(format!("proxy_set_header Host {var};"));
        skip.push("host".into());
    }
    let mut names: Vec<&FieldName> = rules
        .iter()
        .flat_map(|(_, f)| f.response_headers.names())
        .collect();
    names.sort();
    names.dedup();
    for n in names {
        let upstream = format!("$upstream_http_{}", n.as_str().replace('-', "_"));
        let keep: Vec<(String, String)> = rules
            .iter()
            .filter(|(_, f)| {
                let e = &f.response_headers;
                e.remove.contains(n) || e.set.iter().any(|h| &h.name == n)
            })
            .map(|(id, _)| (id.clone(), "\"\"".to_string()))
            .collect();
        let new: Vec<(String, String)> = rules
            .iter()
            .filter_map(|(id, f)| {
                let e = &f.response_headers;
                e.set
                    .iter()
                    .chain(&e.add)
                    .find(|h| &h.name == n)
                    .map(|h| (id.clone(), format!("\"{}\"", h.value)))
            })
            .collect();
        let keep = splits.map_on(rid, &keep, &upstream);
        let new = splits.map_on(rid, &new, "\"\"");
        lines.push(format!("proxy_hide_header {n};"));
        lines.push(format!("add_header {n} {keep} always;"));
        lines.push(format!("add_header {n} {new} always;"));
    }
    for (id, f) in rules {
        for l in nx_rewrite_lines(f) {
            lines.push(format!("if ({rid} = {id}) {{ {l} }}"));
        }
    }
    (lines, skip)
}

/// `return <status>[ <url>];` of a redirect or respond location.
fn nx_return(loc: &NxLocation) -> String {
    match loc.kind {
        "redirect" => format!("return {} {};", loc.status, loc.location),
        _ => format!("return {};", loc.status),
    }
}

/// A block of the `http { }` part before the servers, as the template writes it.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum NxBlock {
    /// `split_clients "<source>" <var> { <share> <upstream>; ... }`, one share a line
    /// (`12.34%`, the last one `*`); `source` is `${request_id}` (random per request),
    /// or a string made of it.
    Split {
        source: &'static str,
        var: String,
        shares: Vec<NxEntry>,
    },
    /// `map <source> <var> { <key> <value>; ... default <default>; }`, an entry a line.
    Map {
        source: String,
        var: String,
        entries: Vec<NxEntry>,
        default: String,
    },
    /// `map <source> <var> { default <default>; <key> <value>; ... }` on one line.
    Line {
        source: String,
        var: String,
        default: String,
        entries: Vec<NxEntry>,
    },
}

/// A `map` entry (key, value) or a split's (share, upstream), each a validated name,
/// a number, a generated variable or a regex built by this module.
#[derive(Debug, Serialize)]
pub(crate) struct NxEntry {
    pub(crate) key: String,
    pub(crate) value: String,
}

fn entry(key: impl Into<String>, value: impl Into<String>) -> NxEntry {
    NxEntry {
        key: key.into(),
        value: value.into(),
    }
}

/// A one-line `map` ([`NxBlock::Line`]).
fn line_map(source: String, var: String, default: String, entries: Vec<NxEntry>) -> NxBlock {
    NxBlock::Line {
        source,
        var,
        default,
        entries,
    }
}

/// The traffic splits of a render: one `split_clients` block per distinct set of
/// (upstream, weight), shared by every location that splits the same way.
#[derive(Default)]
pub(crate) struct NxSplits {
    pub(crate) by_backends: BTreeMap<Vec<(String, u16)>, String>,
    /// The `split_clients` and `map` blocks, in the order their variables were named.
    pub(crate) blocks: Vec<NxBlock>,
    /// Conditions (method, headers, query of a [`RouteMatch`]) → the `map` variable that
    /// is `1` when a request meets them, else `0`.
    pub(crate) conds: HashMap<String, String>,
    /// (condition variables, values) → the `map` variable that picks a location's value.
    pub(crate) picks: HashMap<String, String>,
    /// The scheme and port of the listener whose server is being rendered (redirects
    /// derive their Location's from them).
    pub(crate) listener: Option<(Scheme, u16)>,
    /// Some split has an invalid references' share ([`NX_INVALID_SHARE`]).
    pub(crate) invalid_shares: bool,
    /// Conditional hosts rendered so far (each names its rule chain after its number).
    pub(crate) hosts: usize,
    /// The upstreams whose backends speak h2c ([`BackendProtocol::H2c`]): a location
    /// that forwards only to them uses `grpc_pass`.
    pub(crate) h2c: BTreeSet<String>,
    /// A mirror's share → the variable that is `1` for that share of the requests.
    pub(crate) mirror_shares: BTreeMap<MirrorShare, String>,
    /// The listener being rendered gets `http2` on its `listen` ([`nx_listener_h2`]).
    pub(crate) listen_h2: bool,
    /// The upstreams reached over TLS (a BackendTLSPolicy): (server name, CA file).
    pub(crate) tls: BTreeMap<String, (String, String)>,
    /// Where the client certificates are ([`crate::view::client_cert_file`]).
    pub(crate) cert_opts: HttpRenderOptions,
    /// Locations that would split among upstreams reached differently (TLS or not, or
    /// another name or CA): nginx's `proxy_ssl_*` take no variable, so they answer 500
    /// and a note says why.
    pub(crate) tls_refused: Vec<String>,
    /// The listener being rendered answers misdirected requests `421` when this
    /// variable is `1` ([`nx_misdirected_maps`]).
    pub(crate) misdirected: Option<String>,
    /// CORS filters rendered so far (each names its `map` variables after its number).
    pub(crate) cors: usize,
}

/// The lines of a location whose rule has a CORS filter `c` (first in the location:
/// the preflight returns before anything else), and its `map`s in `splits.blocks`:
/// `$k8slb_cors_o<n>` is the request's `Origin` when allowed (else empty, and nginx
/// adds no header whose value is empty), `$k8slb_cors_p<n>` is `1` for a preflight
/// (`OPTIONS`, an allowed origin, `Access-Control-Request-Method`), which is answered
/// `204` with the preflight headers; the other answers get the origin, credentials,
/// exposed headers and `Vary: Origin`. Origins are validated patterns (regex keys),
/// methods and header names validated tokens; what a client sent is only echoed
/// through variables.
fn nx_cors_lines(c: &k8slb_common::routes::Cors, splits: &mut NxSplits) -> Vec<String> {
    splits.cors += 1;
    let n = splits.cors;
    let var = |k: &str| format!("$k8slb_cors_{k}{n}");
    let (default, origins) = if c.any_origin {
        ("$http_origin", Vec::new())
    } else {
        let allowed = c
            .origins
            .iter()
            .map(|o| entry(format!("\"~*{}\"", o.regex()), "$http_origin"));
        ("\"\"", allowed.collect())
    };
    let b = &mut splits.blocks;
    b.push(line_map(
        "$http_origin".into(),
        var("o"),
        default.into(),
        origins,
    ));
    b.push(line_map(
        format!(
            "\"$request_method {} $http_access_control_request_method\"",
            var("o")
        ),
        var("p"),
        "0".into(),
        vec![entry("\"~^OPTIONS [^ ]+ [^ ]\"", "1")],
    ));
    let on_preflight = |b: &mut Vec<NxBlock>, k: &str, v: String| {
        b.push(line_map(
            var("p"),
            var(k),
            "\"\"".into(),
            vec![entry("1", v)],
        ));
    };
    on_preflight(
        b,
        "m",
        c.methods_value()
            .map(|m| format!("\"{m}\""))
            .unwrap_or_else(|| "$http_access_control_request_method".into()),
    );
    if c.any_header {
        on_preflight(b, "h", "$http_access_control_request_headers".into());
    } else if let Some(h) = c.headers_value() {
        on_preflight(b, "h", format!("\"{h}\""));
    }
    on_preflight(b, "a", format!("\"{}\"", c.max_age));
    let on_allowed = |b: &mut Vec<NxBlock>, k: &str, v: &str| {
        b.push(line_map(
            var("o"),
            var(k),
            format!("\"{v}\""),
            vec![entry("\"\"", "\"\"")],
        ));
    };
    on_allowed(b, "v", "Origin");
    let mut lines = vec![
        "proxy_hide_header Access-Control-Allow-Origin;".to_string(),
        format!(
            "add_header Access-Control-Allow-Origin {} always;",
            var("o")
        ),
        format!(
            "add_header Access-Control-Allow-Methods {} always;",
            var("m")
        ),
        format!("add_header Access-Control-Max-Age {} always;", var("a")),
        format!("add_header Vary {} always;", var("v")),
    ];
    if c.any_header || c.headers_value().is_some() {
        lines.push(format!(
            "add_header Access-Control-Allow-Headers {} always;",
            var("h")
        ));
    }
    if c.credentials {
        on_allowed(b, "c", "true");
        lines.push("proxy_hide_header Access-Control-Allow-Credentials;".into());
        lines.push(format!(
            "add_header Access-Control-Allow-Credentials {} always;",
            var("c")
        ));
    }
    if let Some(e) = c.expose_value() {
        on_allowed(b, "e", &e);
        lines.push("proxy_hide_header Access-Control-Expose-Headers;".into());
        lines.push(format!(
            "add_header Access-Control-Expose-Headers {} always;",
            var("e")
        ));
    }
    lines.push(format!("if ({}) {{ return 204; }}", var("p")));
    lines
}

/// HTTPS listeners of the Gateway API sharing a port
/// ([`k8slb_common::routes::SniZones`]): the `map`s that set
/// `$k8slb_mis_<ip>_<port>` to `1` for a request whose TLS server name and Host are in
/// different zones (no SNI: `0`), added to `splits.blocks`; the variable, which every
/// server of the listener tests to answer `421`. The zones: exact names, then the
/// wildcards by longest suffix (regex keys, first match wins; a hostname is a
/// validated name, escaped in the regex), else the default zone.
pub(crate) fn nx_misdirected_maps(l: &Listener, splits: &mut NxSplits) -> Option<String> {
    let zones = l.tls.as_ref()?.zones.as_ref().filter(|z| z.splits())?;
    let slug = format!("{}_{}", crate::render::files::ip_slug(l.ip), l.port);
    let (sz, hz, mis) = (
        format!("$k8slb_sz_{slug}"),
        format!("$k8slb_hz_{slug}"),
        format!("$k8slb_mis_{slug}"),
    );
    let entries = || {
        zones.lookup_order().into_iter().map(|(zone, h)| {
            let re = match h.wildcard_suffix() {
                Some(suffix) => format!("~^.+{}$", literal_regex(suffix)),
                None => format!("~^{}$", literal_regex(h.as_str())),
            };
            entry(format!("\"{re}\""), zone)
        })
    };
    let default = zones.default_zone().to_string();
    let no_sni = std::iter::once(entry("\"\"", "\"\""));
    let b = &mut splits.blocks;
    b.push(line_map(
        "$ssl_server_name".into(),
        sz.clone(),
        default.clone(),
        no_sni.chain(entries()).collect(),
    ));
    b.push(line_map(
        "$host".into(),
        hz.clone(),
        default,
        entries().collect(),
    ));
    b.push(line_map(
        format!("\"{sz}:{hz}\""),
        mis.clone(),
        "1".into(),
        vec![entry("\"~^:\"", "0"), entry("\"~^([a-z0-9]+):\\1$\"", "0")],
    ));
    Some(mis)
}

/// `value` as a case-sensitive nginx regex source that matches exactly `1<value>`: every
/// character but letters and digits is escaped with `\` (PCRE takes an escaped
/// non-alphanumeric character literally; nginx keeps such a `\` inside double quotes).
/// A `FieldValue` holds no `"`, `'` nor `\`, so the quoted string stays closed.
pub(crate) fn nx_exact_after_one(value: &str) -> String {
    let mut out = String::from("~^1");
    for c in value.chars() {
        if !c.is_ascii_alphanumeric() {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('$');
    out
}

impl NxSplits {
    /// How weighted backend `b` is reached over TLS, if it is: its upstream's server
    /// name and CA file, and the client certificate it presents.
    fn up_tls(&self, b: &k8slb_common::routes::WeightedBackend) -> Option<NxUpTls> {
        let (name, ca) = self.tls.get(&route_backend_name(&b.id))?;
        let client = b
            .client_certificate
            .as_ref()
            .map(|c| crate::view::client_cert_file(c, &self.cert_opts));
        Some((name.clone(), ca.clone(), client))
    }
}

impl NxSplits {
    /// The variable that names the upstream of one request split by `weights` (each
    /// weight > 0, at least two): `split_clients` on `$request_id` (random per request),
    /// each upstream's share in hundredths of a percent, the last one `*` (the rest).
    fn variable(&mut self, weights: Vec<(String, u16)>) -> String {
        if let Some(v) = self.by_backends.get(&weights) {
            return v.clone();
        }
        let var = format!("$k8slb_split_{}", self.blocks.len());
        let total: u64 = weights.iter().map(|(_, w)| u64::from(*w)).sum();
        let last = weights.len() - 1;
        let shares = weights
            .iter()
            .enumerate()
            .map(|(i, (upstream, w))| {
                let share = if i == last {
                    "*".to_string()
                } else {
                    let hundredths = u64::from(*w) * 10_000 / total;
                    format!("{}.{:02}%", hundredths / 100, hundredths % 100)
                };
                entry(share, upstream.clone())
            })
            .collect();
        self.blocks.push(NxBlock::Split {
            source: "${request_id}",
            var: var.clone(),
            shares,
        });
        self.by_backends.insert(weights, var.clone());
        var
    }
}

impl NxSplits {
    /// The variable that is `1` for a share of the requests (drawn at random per
    /// request: `split_clients` on `$request_id`), else empty: one block per share.
    fn mirror_share(&mut self, share: MirrorShare) -> String {
        if let Some(v) = self.mirror_shares.get(&share) {
            return v.clone();
        }
        let h = share.hundredths();
        let var = format!("$k8slb_mirror_{h}");
        // Drawn on another string than the weighted splits' (`m` before the id), so that
        // which requests are copied does not follow which backend a split picks.
        self.blocks.push(NxBlock::Split {
            source: "m${request_id}",
            var: var.clone(),
            shares: vec![
                entry(format!("{}.{:02}%", h / 100, h % 100), "1"),
                entry("*", "\"\""),
            ],
        });
        self.mirror_shares.insert(share, var.clone());
        var
    }
}

impl NxSplits {
    /// The variable that is `1` when a request meets the method, header and query
    /// conditions of `m` (its path is the location's), else `0`: a chain of `map`s, one
    /// per condition, each matching `<previous 0 or 1><the request's value>` against
    /// `1<wanted value>` (case-sensitive regex: nginx matches map strings ignoring case).
    fn condition(&mut self, m: &RouteMatch) -> String {
        let key = serde_json::to_string(&(&m.method, &m.headers, &m.query))
            .expect("conditions serialise");
        if let Some(v) = self.conds.get(&key) {
            return v.clone();
        }
        let n = self.conds.len();
        let mut links: Vec<(String, String)> = Vec::new();
        if let Some(method) = m.method {
            links.push(("$request_method".into(), method.as_str().into()));
        }
        for h in &m.headers {
            links.push((
                format!("$http_{}", h.name.as_str().replace('-', "_")),
                h.value.to_string(),
            ));
        }
        for q in &m.query {
            links.push((format!("$arg_{}", q.name), q.value.to_string()));
        }
        let mut prev = "1".to_string();
        let last = links.len() - 1;
        for (i, (source, want)) in links.iter().enumerate() {
            let var = if i == last {
                format!("$k8slb_m{n}")
            } else {
                format!("$k8slb_m{n}_{i}")
            };
            self.blocks.push(NxBlock::Map {
                source: format!("\"{prev}{source}\""),
                var: var.clone(),
                entries: vec![entry(format!("\"{}\"", nx_exact_after_one(want)), "1")],
                default: "0".into(),
            });
            prev = var;
        }
        self.conds.insert(key, prev.clone());
        prev
    }

    /// The value of request header `n` with `v` added (Gateway API `add`): `v` when the
    /// request has none, else its value, a comma and `v` (one header of a list).
    pub(crate) fn added(&mut self, n: &FieldName, v: &FieldValue) -> String {
        let src = nx_http_var(n);
        self.map_on(
            &src,
            &[("''".into(), format!("\"{v}\""))],
            &format!("\"{src},{v}\""),
        )
    }

    /// A `map` of `source` (exact keys, as written) to values (as written), with
    /// `default`; the same map is made once.
    /// The variable that holds the path and query a `ReplacePrefixMatch` redirect goes
    /// to: a regex `map` on the raw `$request_uri` (never the decoded `$uri`, which
    /// could put a decoded CR or LF into the Location). A request whose raw path does not
    /// start with the literal prefix (the location matched it percent-encoded, or with
    /// `//`) goes to the replacement prefix itself.
    fn prefix_redirect(&mut self, r: &PathRewrite) -> String {
        let PathRewrite::Prefix { from, to } = r else {
            return "$request_uri".to_string();
        };
        let from = literal_regex(from.as_str().trim_end_matches('/'));
        let to = to.as_str().trim_end_matches('/');
        let entries = if to.is_empty() {
            vec![
                (format!("\"~^{from}([?].*)?$\""), "\"/$1\"".to_string()),
                (
                    format!("\"~^{from}(/[^?]*)([?].*)?$\""),
                    "\"$1$2\"".to_string(),
                ),
            ]
        } else {
            vec![(
                format!("\"~^{from}(/[^?]*)?([?].*)?$\""),
                format!("\"{to}$1$2\""),
            )]
        };
        let root = if to.is_empty() { "/" } else { to };
        self.map_on(
            "$request_uri",
            &entries,
            &format!("\"{root}$is_args$args\""),
        )
    }

    fn map_on(&mut self, source: &str, entries: &[(String, String)], default: &str) -> String {
        let key = serde_json::to_string(&(source, entries, default)).expect("maps serialise");
        if let Some(v) = self.picks.get(&key) {
            return v.clone();
        }
        let var = format!("$k8slb_v{}", self.picks.len());
        self.blocks.push(NxBlock::Map {
            source: source.to_string(),
            var: var.clone(),
            entries: entries
                .iter()
                .map(|(k, v)| entry(k.as_str(), v.as_str()))
                .collect(),
            default: default.to_string(),
        });
        self.picks.insert(key, var.clone());
        var
    }
}

/// The path part of a rule's link in a conditional host's chain (see
/// [`nx_conditional_locations`]): a regex on nginx's normalised `$uri` that matches as
/// the model does (Exact: the path itself; element-wise Prefix: the path, or below it);
/// `\z` is the very end (`$` would also match before a final newline, which a decoded
/// `%0A` can put there).
fn nx_path_regex(p: &PathMatch) -> String {
    match p {
        PathMatch::Exact(p) => format!("{}\\z", literal_regex(p.as_str())),
        PathMatch::Prefix(p) if p.as_str() == "/" => String::new(),
        PathMatch::Prefix(p) => format!("{}(/|\\z)", literal_regex(p.as_str())),
    }
}

/// The locations of a virtual host whose rules match on more than the path: one
/// `location /`, its size and the maps it uses linear in the rules (issue 20: copying
/// every covering rule into each location grew as n^2.8).
///
/// A chain of `map`s, one link per rule in precedence order, names the first rule a
/// request meets: link `i` keeps the rule named by the link before it, else is `r<i>`
/// when the request meets the rule's conditions (its [`NxSplits::condition`] variable)
/// and its path (a regex on `$uri`, [`nx_path_regex`]); the last link falls back to `rd`
/// (the listener's default). Maps of that name then pick the upstream (or split
/// variable), the redirect or fixed answer to return (an `if (...) { return ...; }`,
/// what nginx documents as safe inside `if`), and the filters' values (entries only
/// for the rules that change them). The chain stops at the first rule that matches
/// every request (a Prefix `/` without conditions).
fn nx_conditional_locations(
    rules: &[k8slb_common::routes::RouteRule],
    default: &RouteAction,
    host_default: &str,
    splits: &mut NxSplits,
) -> Vec<NxLocation> {
    let no_filters = RuleFilters::default();
    let h = splits.hosts;
    splits.hosts += 1;
    let effective: Vec<_> = rules.iter().map(|r| r.forward_filters()).collect();
    let (links, catch_all) = nx_chain_links(rules, splits);
    // (id, action, filters) of the rules a request can get, in precedence order.
    let mut chosen: Vec<(String, &RouteAction, &RuleFilters)> = rules
        .iter()
        .zip(&effective)
        .take(links.len())
        .enumerate()
        .map(|(i, (r, f))| (format!("r{i}"), &r.action, &**f))
        .collect();
    if !catch_all {
        chosen.push(("rd".into(), default, &no_filters));
    }
    let sel = nx_chain_maps(h, &links, catch_all, splits);
    let picks = nx_picks(&chosen, splits);
    // A request that returns never reaches proxy_pass: any upstream will do as default.
    let up_default = picks
        .upstreams
        .last()
        .map(|(_, u)| u.clone())
        .unwrap_or_else(|| NX_INVALID_SHARE.to_string());
    let upstream = splits.map_on(&sel, &picks.upstreams, &up_default);
    let returns_on = if picks.returns.is_empty() {
        String::new()
    } else {
        splits.map_on(&sel, &picks.acts, "\"\"")
    };
    let forwards = |a: &RouteAction| matches!(a, RouteAction::Forward { .. });
    let filtered: Vec<(String, &RuleFilters)> = chosen
        .iter()
        .map(|(id, a, f)| (id.clone(), if forwards(a) { *f } else { &no_filters }))
        .collect();
    let (mut filter_lines, skip_headers) = if filtered.iter().all(|(_, f)| f.is_empty()) {
        (Vec::new(), Vec::new())
    } else {
        nx_pick_filters(&sel, &filtered, host_default, splits)
    };
    // nginx's timeouts take no variable: the one location that picks among the rules
    // has one timeout, rendered when they agree ([`nx_pick_timeout`]: nx_server renders
    // nothing for a host whose rules do not).
    if let Ok(t) = nx_pick_timeout(&chosen) {
        filter_lines.extend(nx_timeout_lines(t));
    }
    if picks.tls.len() > 1 {
        splits.tls_refused.push(
            "a host whose rules match on more than the path answers 500: nginx cannot pick among backends reached with different TLS settings in one location".to_string(),
        );
        return vec![NxLocation {
            path: "/".into(),
            kind: "respond",
            status: 500,
            ..Default::default()
        }];
    }
    vec![NxLocation {
        path: "/".into(),
        kind: "pick",
        upstream,
        h2c: picks.h2c.unwrap_or(false),
        tls: picks.tls.into_iter().next().flatten(),
        returns_on,
        returns: picks.returns,
        filter_lines,
        skip_headers,
        ..Default::default()
    }]
}

/// The links of a conditional host's chain (see [`nx_conditional_locations`]), one per
/// rule in precedence order: (the key that matches the rule's path when its conditions
/// hold, the variable of its conditions); and whether the last one is a catch-all (a
/// Prefix `/` without conditions: the chain stops there).
fn nx_chain_links(
    rules: &[k8slb_common::routes::RouteRule],
    splits: &mut NxSplits,
) -> (Vec<(String, String)>, bool) {
    let mut links: Vec<(String, String)> = Vec::new();
    for r in rules {
        let m = &r.matches;
        let cond = if m.is_conditional() {
            splits.condition(m)
        } else {
            String::new()
        };
        let want = if m.is_conditional() { "1" } else { "" };
        links.push((format!("\"~^:{want}{}\"", nx_path_regex(&m.path)), cond));
        if !m.is_conditional() && matches!(&m.path, PathMatch::Prefix(p) if p.as_str() == "/") {
            return (links, true);
        }
    }
    (links, false)
}

/// The chain's `map`s of conditional host `h`, one per link: link `i` keeps the rule
/// named by the link before it, else is `r<i>` when the request meets the link; the
/// last falls back to `rd` unless the chain ends in a catch-all. Returns the last
/// link's variable, which names the rule a request meets.
fn nx_chain_maps(
    h: usize,
    links: &[(String, String)],
    catch_all: bool,
    splits: &mut NxSplits,
) -> String {
    let mut prev = String::new();
    let last = links.len() - 1;
    for (i, (key, cond)) in links.iter().enumerate() {
        let var = if i == last {
            format!("$k8slb_h{h}")
        } else {
            format!("$k8slb_h{h}_{i}")
        };
        let mut entries = Vec::with_capacity(2);
        if i > 0 {
            entries.push(entry("\"~^(r[0-9]+):\"", "$1"));
        }
        entries.push(entry(key.as_str(), format!("r{i}")));
        let fallback = if i == last && !catch_all {
            "rd"
        } else {
            "\"\""
        };
        splits.blocks.push(NxBlock::Map {
            source: format!("\"{prev}:{cond}$uri\""),
            var: var.clone(),
            entries,
            default: fallback.into(),
        });
        prev = var;
    }
    prev
}

/// What the rules a conditional host picks among do ([`nx_picks`]).
struct NxPicks {
    /// The returns (redirects and fixed answers), distinct ones once, as `act<i>`.
    returns: Vec<(String, NxLocation)>,
    /// (rule id, upstream or split variable) of the forwarding rules.
    upstreams: Vec<(String, String)>,
    /// (rule id, `act<i>`) of the returning rules.
    acts: Vec<(String, String)>,
    /// Every forward speaks h2c (`None`: no forward).
    h2c: Option<bool>,
    /// The forwards' TLS settings.
    tls: BTreeSet<Option<NxUpTls>>,
}

/// What each rule among `chosen` does: its upstream (or split variable), or `act<i>` for
/// a redirect or a fixed answer (distinct ones once).
fn nx_picks(chosen: &[(String, &RouteAction, &RuleFilters)], splits: &mut NxSplits) -> NxPicks {
    let mut p = NxPicks {
        returns: Vec::new(),
        upstreams: Vec::new(),
        acts: Vec::new(),
        h2c: None,
        tls: BTreeSet::new(),
    };
    for (id, action, _) in chosen {
        let loc = nx_action(action, splits);
        if loc.kind == "forward" {
            *p.h2c.get_or_insert(true) &= loc.h2c;
            p.tls.insert(loc.tls.clone());
            p.upstreams.push((id.clone(), loc.upstream));
            continue;
        }
        let v = match p.returns.iter().find(|(_, l)| {
            l.kind == loc.kind && l.status == loc.status && l.location == loc.location
        }) {
            Some((v, _)) => v.clone(),
            None => {
                let v = format!("act{}", p.returns.len());
                p.returns.push((v.clone(), loc));
                v
            }
        };
        p.acts.push((id.clone(), v));
    }
    p
}

/// A split's per-backend request header edits: each header any backend changes is set
/// from a `map` on the split's variable `upstream` (its value names the upstream
/// drawn; the request's own value for the others), and the names set.
fn nx_split_edit_lines(
    action: &RouteAction,
    upstream: &str,
    splits: &mut NxSplits,
) -> (Vec<String>, Vec<String>) {
    let RouteAction::Forward { backends, .. } = action else {
        return (vec![], vec![]);
    };
    let mut names: Vec<&FieldName> = backends
        .iter()
        .flat_map(|b| b.request_headers.names())
        .collect();
    names.sort();
    names.dedup();
    let (mut lines, mut skip) = (Vec::new(), Vec::new());
    for n in names {
        let mut entries: Vec<(String, String)> = Vec::new();
        for b in backends.iter().filter(|b| b.weight > 0) {
            let e = &b.request_headers;
            let v = if e.remove.contains(n) {
                "\"\"".to_string()
            } else if let Some(h) = e.set.iter().find(|h| &h.name == n) {
                format!("\"{}\"", h.value)
            } else if let Some(h) = e.add.iter().find(|h| &h.name == n) {
                splits.added(&h.name, &h.value)
            } else {
                continue;
            };
            // A regex key: upstream names outgrow nginx's default map_hash_bucket_size
            // (64), which exact keys must fit in.
            let key = format!("\"~^{}$\"", literal_regex(&weighted_backend_name(b)));
            entries.push((key, v));
        }
        let var = splits.map_on(upstream, &entries, &nx_http_var(n));
        lines.push(format!("proxy_set_header {n} {var};"));
        skip.push(n.to_string());
    }
    (lines, skip)
}

/// The one timeout of the forwarding rules among `chosen` (a location that picks among
/// rules); Err when they ask for different ones.
fn nx_pick_timeout(
    chosen: &[(String, &RouteAction, &RuleFilters)],
) -> Result<Option<k8slb_common::routes::TimeoutMs>, ()> {
    let all: BTreeSet<_> = chosen
        .iter()
        .filter(|(_, a, _)| matches!(a, RouteAction::Forward { .. }))
        .map(|(_, _, f)| f.timeout)
        .collect();
    match all.len() {
        0 => Ok(None),
        1 => Ok(all.into_iter().next().flatten()),
        _ => Err(()),
    }
}

fn nx_action(action: &RouteAction, splits: &mut NxSplits) -> NxLocation {
    match action {
        RouteAction::Forward { backends, invalid } => {
            let live: Vec<_> = backends.iter().filter(|b| b.weight > 0).collect();
            match live.as_slice() {
                [one] if *invalid == 0 => {
                    let upstream = weighted_backend_name(one);
                    NxLocation {
                        kind: "forward",
                        h2c: splits.h2c.contains(&upstream),
                        tls: splits.up_tls(one),
                        upstream,
                        ..Default::default()
                    }
                }
                [] => NxLocation {
                    kind: "respond",
                    status: 500,
                    ..Default::default()
                },
                several => {
                    let mut weights: Vec<(String, u16)> = several
                        .iter()
                        .map(|b| (weighted_backend_name(b), b.weight))
                        .collect();
                    let h2c = weights.iter().all(|(u, _)| splits.h2c.contains(u));
                    let tls: BTreeSet<Option<NxUpTls>> =
                        several.iter().map(|b| splits.up_tls(b)).collect();
                    if tls.len() > 1 {
                        let names: Vec<&str> = weights.iter().map(|(u, _)| u.as_str()).collect();
                        splits.tls_refused.push(format!(
                            "a split among {} answers 500: nginx cannot reach them with different TLS settings from one location",
                            names.join(", ")
                        ));
                        return NxLocation {
                            kind: "respond",
                            status: 500,
                            ..Default::default()
                        };
                    }
                    let tls = tls.into_iter().next().flatten();
                    if *invalid > 0 {
                        weights.push((NX_INVALID_SHARE.to_string(), *invalid));
                        splits.invalid_shares = true;
                    }
                    NxLocation {
                        kind: "forward",
                        // proxy_pass through a variable naming an upstream group.
                        upstream: splits.variable(weights),
                        h2c,
                        tls,
                        ..Default::default()
                    }
                }
            }
        }
        RouteAction::Redirect(rd) => {
            let listener = splits.listener.unwrap_or((Scheme::Http, 80));
            let scheme = rd.location_scheme(listener.0).as_str();
            let host = match &rd.host {
                Some(h) if !h.is_wildcard() => h.to_string(),
                _ => "$host".to_string(),
            };
            let port = rd
                .location_port(listener.0, listener.1)
                .map(|p| format!(":{p}"))
                .unwrap_or_default();
            let path = match (&rd.path, &rd.replace_prefix) {
                (Some(p), _) => format!("{p}$is_args$args"),
                (None, Some(r)) => splits.prefix_redirect(r),
                (None, None) => "$request_uri".to_string(),
            };
            NxLocation {
                kind: "redirect",
                location: format!("{scheme}://{host}{port}{path}"),
                status: rd.status.code(),
                ..Default::default()
            }
        }
        RouteAction::Respond { status } => NxLocation {
            kind: "respond",
            status: status.code(),
            ..Default::default()
        },
    }
}

pub(crate) fn nx_server(
    l: &Listener,
    v: Option<&VirtualHost>,
    o: &HttpRenderOptions,
    notes: &mut Vec<String>,
    splits: &mut NxSplits,
) -> Result<Option<NxServer>, RenderError> {
    let listen = SocketAddr::new(l.ip, l.port).to_string();
    splits.listener = Some((listener_scheme(l), l.port));
    let h2 = splits.listen_h2;
    let host = v.and_then(|v| v.host.as_ref());
    let what = format!("{listen} host {}", host.map_or("*", |h| h.as_str()));
    let server_name = nx_server_name(host, v.is_some_and(|v| v.any_depth));
    let tls = match l.protocol {
        ListenerProtocol::Http => None,
        ListenerProtocol::Https => match nx_certificate(l, host) {
            Some(f) => Some(nx_tls(f, l, o)?),
            None => {
                notes.push(format!("{what}: HTTPS without a certificate; not rendered"));
                return Ok(None);
            }
        },
    };
    let client_cert_lines = nx_client_cert_lines(Some(l));
    let default_action = l.default_action.clone().unwrap_or(RouteAction::Respond {
        status: k8slb_common::routes::FixedStatus::NotFound404,
    });
    // The plan refuses a rule's retry under nginx (GatewayInput::serves_retry); kept as
    // a backstop: nginx only tries another server, never the attempts asked.
    if v.is_some_and(|v| v.rules.iter().any(|r| r.filters.retry.is_some())) {
        notes.push(format!(
            "{what}: a rule's retry (nginx only moves a request to another server); not rendered"
        ));
        return Ok(None);
    }
    let location_lines = if let Some(v) =
        v.filter(|v| v.rules.iter().any(|r| r.matches.is_conditional()))
    {
        // The plan refuses the route that would make such a host (GatewayInput::
        // mixes_conditional_rules is false for nginx); kept as a backstop.
        if let Some(why) = k8slb_common::routes::OneLocation::of(&v.rules).refusal() {
            // Refused (said in a note), never served approximately.
            notes.push(format!("{what}: {why}; not rendered"));
            return Ok(None);
        }
        let host_default = nx_host_header(&o.nginx_proxy);
        let locations = nx_conditional_locations(&v.rules, &default_action, &host_default, splits);
        nx_location_lines(
            &locations,
            (&o.nginx_proxy, &client_cert_lines),
            splits.invalid_shares,
        )
    } else {
        let rules = v.map(|v| v.rules.as_slice()).unwrap_or_default();
        let locations = nx_path_locations(rules, &default_action, splits);
        let mut lines = nx_location_lines(
            &locations,
            (&o.nginx_proxy, &client_cert_lines),
            splits.invalid_shares,
        );
        lines.push_str(&nx_mirror_locations(
            rules,
            (&o.nginx_proxy, &client_cert_lines),
            splits,
        ));
        lines
    };
    Ok(Some(NxServer {
        listen,
        default: host.is_none(),
        server_name,
        tls,
        h2,
        misdirected: splits.misdirected.clone(),
        location_lines,
    }))
}

/// `server_name` of a virtual host of `host` (`_` for any host): the name, or a regex
/// for a wildcard (`any_depth`: any number of labels before its suffix, else one).
fn nx_server_name(host: Option<&Hostname>, any_depth: bool) -> String {
    match host {
        None => "_".to_string(),
        Some(h) => match h.wildcard_suffix() {
            Some(suffix) if any_depth => format!("~^.+{}$", suffix.replace('.', "[.]")),
            Some(suffix) => format!("~{}", one_label_regex(suffix)),
            None => h.to_string(),
        },
    }
}

/// The certificate HTTPS listener `l` serves for `host`: the one covering it, or for
/// any host the default one, else the first.
fn nx_certificate<'a>(l: &'a Listener, host: Option<&Hostname>) -> Option<&'a CertFile> {
    l.tls.as_ref().and_then(|t| match host {
        Some(h) => t.certificate_for(h.as_str()),
        None => t
            .default_certificate
            .as_ref()
            .or_else(|| t.certificates.first().map(|c| &c.file)),
    })
}

/// `ssl_certificate` `f` (its key beside it) and the client CA bundle of listener `l`.
fn nx_tls(f: &CertFile, l: &Listener, o: &HttpRenderOptions) -> Result<NxTls, RenderError> {
    let base = cert_path(f, o)?;
    let key = match f {
        CertFile::Pool { .. } => format!("{base}.key"),
        CertFile::Secret { .. } => format!("{base}.pem"),
    };
    Ok(NxTls {
        cert: format!("{base}.pem"),
        key,
        client_ca: match l.tls.as_ref().and_then(|t| t.client_ca.as_ref()) {
            Some(c) => Some(crate::view::ca_file(
                &crate::render::files::files_dir(o)?,
                c,
            )),
            None => None,
        },
        fallback: l
            .tls
            .as_ref()
            .is_some_and(|t| t.client_ca.is_some() && t.client_validation.is_fallback()),
    })
}

/// The Host header the admin's `nginx.proxy` lines send upstream (`proxy_set_header
/// Host <v>`), else nginx's `$proxy_host`.
fn nx_host_header(proxy: &[ConfigLine]) -> String {
    proxy
        .iter()
        .find_map(|l| {
            let mut w = l.as_str().split_whitespace();
            (w.next() == Some("proxy_set_header")
                && w.next().is_some_and(|h| h.eq_ignore_ascii_case("host")))
            .then(|| w.next().map(|v| v.trim_end_matches(';').to_string()))
            .flatten()
        })
        .unwrap_or_else(|| "$proxy_host".to_string())
}

/// The locations of a virtual host whose rules match on the path only: one per path
/// (`= /p` for an Exact, `= /p` and `^~ /p/` for a Prefix, `/` for Prefix `/`), the
/// first rule of a path winning, then the slashed Exact paths' twins
/// ([`nx_slashed_locations`]), then `/` with `default_action` if no rule has it.
fn nx_path_locations(
    rules: &[k8slb_common::routes::RouteRule],
    default_action: &RouteAction,
    splits: &mut NxSplits,
) -> Vec<NxLocation> {
    let mut locations = Vec::new();
    let mut exact: BTreeSet<String> = BTreeSet::new();
    let mut root = false;
    // Each rule's location, without its path.
    let mut by_rule: Vec<NxLocation> = Vec::with_capacity(rules.len());
    for r in rules {
        let base = nx_rule_location(r, splits);
        let loc = |path: String| NxLocation {
            path,
            ..base.clone()
        };
        match &r.matches.path {
            PathMatch::Exact(p) => {
                if exact.insert(p.to_string()) {
                    locations.push(loc(format!("= {p}")));
                }
            }
            PathMatch::Prefix(p) if p.as_str() == "/" => {
                if !root {
                    root = true;
                    locations.push(loc("/".into()));
                }
            }
            PathMatch::Prefix(p) => {
                if exact.insert(p.to_string()) {
                    locations.push(loc(format!("= {p}")));
                }
                locations.push(loc(format!("^~ {p}/")));
            }
        }
        by_rule.push(base);
    }
    nx_slashed_locations(
        &exact,
        rules,
        &by_rule,
        default_action,
        splits,
        &mut locations,
    );
    if !root {
        let mut d = nx_action(default_action, splits);
        d.path = "/".into();
        locations.push(d);
    }
    locations
}

/// Rule `r`'s location without its path: its action, and for a forward its filters'
/// lines (a split's per-backend header edits included).
fn nx_rule_location(r: &k8slb_common::routes::RouteRule, splits: &mut NxSplits) -> NxLocation {
    let act = nx_action(&r.action, splits);
    let (filter_lines, skip_headers) = if act.kind == "forward" {
        let (mut lines, mut skip) = nx_filter_lines(&r.forward_filters(), splits);
        if r.splits_with_backend_edits() {
            let (l, k) = nx_split_edit_lines(&r.action, &act.upstream, splits);
            lines.extend(l);
            skip.extend(k);
        }
        (lines, skip)
    } else {
        (Vec::new(), Vec::new())
    };
    NxLocation {
        path: String::new(),
        kind: act.kind,
        h2c: act.h2c,
        tls: act.tls,
        upstream: act.upstream,
        location: act.location,
        status: act.status,
        returns: Vec::new(),
        returns_on: String::new(),
        filter_lines,
        skip_headers,
    }
}

/// nginx answers `/p` with a 301 to `/p/` when a location named `/p/` proxies and no
/// location `= /p` exists (its auto_redirect): an Exact `/p/` would redirect `/p`,
/// which it does not match (the Ingress conformance's path_rules: 404). So `/p` gets
/// a location of its own, with what the model gives it: the first rule that matches
/// it (`by_rule`: each rule's location), else the default.
fn nx_slashed_locations(
    exact: &BTreeSet<String>,
    rules: &[k8slb_common::routes::RouteRule],
    by_rule: &[NxLocation],
    default_action: &RouteAction,
    splits: &mut NxSplits,
    locations: &mut Vec<NxLocation>,
) {
    let slashed = exact
        .iter()
        .filter_map(|p| p.strip_suffix('/').filter(|q| !q.is_empty()))
        .filter(|q| !exact.contains(*q));
    for q in slashed {
        let req = Request::get("", q);
        let mut loc = match rules.iter().position(|r| r.matches.matches_request(&req)) {
            Some(i) => by_rule[i].clone(),
            None => nx_action(default_action, splits),
        };
        loc.path = format!("= {q}");
        locations.push(loc);
    }
}

/// The URI of the internal location that sends a mirror copy to upstream `u`: of
/// every request, or of a share of them (`/<hundredths of a percent>` after it).
fn nx_mirror_uri(u: &str, share: Option<MirrorShare>) -> String {
    match share {
        None => format!("/_k8slb_mirror/{u}"),
        Some(s) => format!("/_k8slb_mirror/{u}/{}", s.hundredths()),
    }
}

/// The internal locations the rules' `mirror` lines name: one per mirrored upstream
/// and share, passing the request as the client sent it (`$request_uri`) with the
/// admin's `nginx.proxy` lines and the client certificate headers as the routes'
/// locations have them (the `Host` they send, else nginx's default would name the
/// upstream), over verified TLS to an upstream
/// reached over TLS; its answer is dropped. A share's location sends the copy only when
/// the request's draw ([`NxSplits::mirror_share`]) says so, else answers the mirror
/// itself (`204`, nothing sent).
fn nx_mirror_locations(
    rules: &[k8slb_common::routes::RouteRule],
    (proxy_lines, client_cert_lines): (&[ConfigLine], &[String]),
    splits: &mut NxSplits,
) -> String {
    // As in the routes' locations (nx_location_lines): k8slb's own client certificate
    // headers, never an admin line naming them.
    let proxy: String = proxy_lines
        .iter()
        .map(|l| l.as_str())
        .filter(|l| !nx_sets_client_cert_header(l))
        .chain(client_cert_lines.iter().map(String::as_str))
        .map(|l| format!("\n      {l}"))
        .collect();
    let ups: BTreeSet<(String, Option<MirrorShare>)> = rules
        .iter()
        .filter(|r| matches!(r.action, RouteAction::Forward { .. }))
        .flat_map(|r| {
            let f = &r.filters;
            let all = f.mirrors.iter().map(|m| (route_backend_name(m), None));
            let some = f
                .partial_mirrors
                .iter()
                .map(|m| (route_backend_name(&m.backend), Some(m.share)));
            all.chain(some)
        })
        .collect();
    let mut out = String::new();
    for (u, share) in ups {
        let draw = match share {
            None => String::new(),
            Some(s) => format!(
                "\n      if ({} = \"\") {{ return 204; }}",
                splits.mirror_share(s)
            ),
        };
        // A backend reached over TLS (a BackendTLSPolicy) gets its copy over TLS too,
        // verified as its requests are (the translation sends no copy to a TLS backend
        // of a Gateway that presents a client certificate).
        let (tls, s) = match splits.tls.get(&u) {
            Some((name, ca)) => (
                format!("\n      proxy_ssl_server_name on;\n      proxy_ssl_name {name};\n      proxy_ssl_verify on;\n      proxy_ssl_verify_depth 8;\n      proxy_ssl_trusted_certificate {ca};"),
                "s",
            ),
            None => (String::new(), ""),
        };
        out.push_str(&format!(
            "\n    location = {} {{\n      internal;{draw}{proxy}{tls}\n      proxy_pass http{s}://{u}$request_uri;\n    }}",
            nx_mirror_uri(&u, share)
        ));
    }
    out
}

/// The upstreams: one per route backend, and one per (backend, client certificate) that
/// a rule presents ([`crate::view::client_cert_backend_name`]), the same servers: nginx
/// keeps its idle upstream connections and TLS sessions per upstream, so a connection
/// (or session) made with one Gateway's client certificate is never reused for another
/// Gateway's requests, nor for requests that present none.
pub(crate) fn nx_upstreams(routes: &HttpRoutes, notes: &mut Vec<String>) -> Vec<NxUpstream> {
    let copies: Vec<(String, &k8slb_common::routes::BackendState)> =
        k8slb_common::certs::client_certificates_by_backend(routes)
            .into_iter()
            .filter_map(|(id, c)| {
                Some((
                    crate::view::client_cert_backend_name(id, c),
                    routes.backends.get(id)?,
                ))
            })
            .collect();
    for (id, st) in &routes.backends {
        if matches!(st.stickiness, Some(Sticky::Cookie { .. })) {
            notes.push(format!(
                "{id}: nginx has no cookie stickiness; using the client address"
            ));
        }
    }
    routes
        .backends
        .iter()
        .map(|(id, st)| (route_backend_name(id), st))
        .chain(copies)
        .map(|(name, st)| {
            let mut lines = String::new();
            let mut push = |addr: SocketAddr, down: bool| {
                lines.push_str("\n    server ");
                lines.push_str(&addr.to_string());
                if down {
                    lines.push_str(" down");
                }
                lines.push_str(" max_fails=3 fail_timeout=5s;");
            };
            for e in &st.endpoints {
                push(SocketAddr::new(e.ip, e.port), e.draining);
            }
            if st.endpoints.is_empty() {
                // An empty upstream is a config error; a down placeholder is valid (502).
                push(PLACEHOLDER, true);
            }
            NxUpstream {
                name,
                hash_source: st.stickiness.is_some(),
                server_lines: lines,
            }
        })
        .collect()
}

/// nginx refuses the whole config when a server name does not fit its hash bucket (64
/// bytes by default: a valid 200-character host name would block every other route) or
/// when there are more names than its default hash size allows (hundreds). So the
/// routes size the hash for their own names, unless the admin's `nginx.http` lines do.
pub(crate) fn nx_hash_lines(
    servers: &[NxServer],
    o: &HttpRenderOptions,
    notes: &mut Vec<String>,
) -> Vec<NxEntry> {
    let names: Vec<&str> = servers
        .iter()
        .map(|s| s.server_name.as_str())
        .filter(|n| *n != "_" && !n.starts_with('~'))
        .collect();
    let Some(longest) = names.iter().map(|n| n.len()).max() else {
        return Vec::new();
    };
    let admin = |word: &str| {
        o.nginx_http
            .iter()
            .any(|l| l.as_str().split_whitespace().next() == Some(word))
    };
    let mut out = Vec::new();
    // An entry is the name, a pointer and 2 bytes, rounded up to a pointer; nginx wants
    // a bucket to hold one entry and a terminating pointer (a 47- to 54-byte name does
    // not fit in 64).
    let bucket = ((longest + 2 + 8).next_multiple_of(8) + 8)
        .next_power_of_two()
        .max(64);
    let size = (names.len() * 4).next_power_of_two().max(512);
    for (word, value) in [
        ("server_names_hash_bucket_size", bucket),
        ("server_names_hash_max_size", size),
    ] {
        if admin(word) {
            notes.push(format!(
                "nginx.http sets {word}; the routes need at least {value}"
            ));
        } else {
            out.push(entry(word, value.to_string()));
        }
    }
    out
}
