//! Rendering the L7 route model ([`k8slb_common::routes`]) for HAProxy and nginx: pure,
//! from the model + options to config text, through `templates/haproxy-routes.cfg.tera`
//! and `templates/nginx-routes.conf.tera`.
//!
//! The output is the routes *part* of a config: HAProxy frontends and backends to append
//! to haproxy.cfg, nginx upstreams and servers to put inside `http { }`.
//! [`crate::render::Renderer`] renders it from the view's routes ([`crate::view::HttpPart`])
//! and joins it to the Services' config; [`HttpRenderer`] is also its own entry point, for
//! the snapshot tests.
//!
//! Safety: every value written is a validated type from the model (`Hostname`,
//! `HttpPath`, `CookieName`, `ObjectName`, `PoolName`, numbers, addresses), a path checked
//! by [`crate::view::safe_path`], an admin `ConfigLine`, or a fixed keyword from this file.
//! HAProxy routes through map files ([`HaproxyRoutes::files`]: hosts, wildcards, Exact
//! and Prefix paths, keyed by validated hosts and paths) so a request costs a few lookups
//! whatever the number of rules; see the template for the lookup chain. nginx server names
//! are pre-rendered here (a wildcard host becomes a regex made only of `^[^.]+`, label
//! characters and `[.]`).
//!
//! HAProxy backends are [`crate::view::Backend`]s with the same server slots as a
//! Service's ([`crate::view::assign_slots`], previous slots kept), so an endpoint change
//! that fits is a Runtime API change ([`crate::render::runtime_diff`] compares them the
//! same way once they are part of the view), not a reload.

use crate::render_error::RenderError;
use crate::view::{
    route_backend_name, route_backends, safe_path, Backend, StickSource, PLACEHOLDER,
};
use k8slb_common::names::ConfigLine;
use k8slb_common::routes::{
    BackendId, BackendProtocol, CertFile, FieldName, FieldValue, HttpRoutes, Listener,
    ListenerProtocol, PathMatch, PathRewrite, Redirect, Request, RouteAction, RouteMatch,
    RuleFilters, Scheme, Sticky, VirtualHost,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use tera::{Context, Tera};

pub use crate::render_stream::{HAPROXY_ROUTES, SPLIT_SCALE};
pub const NGINX_ROUTES: &str = "nginx-routes.conf.tera";
pub const NGINX_STREAMS: &str = "nginx-streams.conf.tera";
pub const TEMPLATES: [(&str, &str); 3] = [
    (
        HAPROXY_ROUTES,
        include_str!("../../templates/haproxy-routes.cfg.tera"),
    ),
    (
        NGINX_ROUTES,
        include_str!("../../templates/nginx-routes.conf.tera"),
    ),
    (
        NGINX_STREAMS,
        include_str!("../../templates/nginx-streams.conf.tera"),
    ),
];

pub use crate::view::HttpRenderOptions;

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

/// The nginx part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NginxRoutes {
    /// Upstreams and servers, to put inside `http { }`.
    pub text: String,
    /// The L4 streams' upstreams, maps and servers, to put inside `stream { }` (empty
    /// without streams).
    pub stream_text: String,
    pub notes: Vec<String>,
}

/// The parsed route templates.
#[derive(Debug, Clone)]
pub struct HttpRenderer {
    tera: Tera,
}

fn render_err(name: &'static str, e: impl std::fmt::Display) -> RenderError {
    RenderError::Render {
        name,
        detail: e.to_string(),
    }
}

fn path_err(e: crate::view::ViewError) -> RenderError {
    render_err(HAPROXY_ROUTES, e)
}

/// `198.18.0.10` → `198_18_0_10`, `fd00::1` → `fd00__1`.
/// The scheme of a listener's requests.
fn listener_scheme(l: &Listener) -> Scheme {
    match l.protocol {
        ListenerProtocol::Http => Scheme::Http,
        ListenerProtocol::Https => Scheme::Https,
    }
}

fn ip_slug(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "_")
}

/// `*.foo-bar.com` → `^[^.]+[.]foo-bar[.]com$` (labels hold only `[a-z0-9-]`).
fn one_label_regex(suffix: &str) -> String {
    format!("^[^.]+{}$", suffix.replace('.', "[.]"))
}

/// Where `f` is on the node, without the extension (`.pem`; nginx also `.key` for a
/// pool's): the path HAProxy's `crt` / crt-list names, and so the name of its certificate
/// in HAProxy's store (`set ssl cert <path>.pem`).
pub fn cert_path(f: &CertFile, o: &HttpRenderOptions) -> Result<String, RenderError> {
    let dir = match f {
        CertFile::Pool { .. } => &o.pool_cert_dir,
        CertFile::Secret { .. } => &o.secret_cert_dir,
    };
    let dir = safe_path("certificate directory", dir).map_err(path_err)?;
    Ok(format!("{}/{}", dir.trim_end_matches('/'), f.stem()))
}

// ---------------------------------------------------------------------------------------
// HAProxy

#[derive(Serialize)]
struct HpCtx<'a> {
    frontends: Vec<HpFrontend>,
    /// The L4 streams' frontends ([`crate::render_stream`]).
    streams: Vec<crate::render_stream::HpStream>,
    /// Streams not rendered, one comment line each.
    skipped_streams: Vec<String>,
    backends: Vec<HpBackend<'a>>,
    httpfront: &'a [ConfigLine],
    httpback: &'a [ConfigLine],
    tcpfront: &'a [ConfigLine],
    tcpback: &'a [ConfigLine],
}

#[derive(Serialize)]
struct HpFrontend {
    name: String,
    bind: String,
    tls: Option<HpTls>,
    /// Map files (full paths), `None` when empty.
    hosts_map: Option<String>,
    wildcards_map: Option<String>,
    /// Any-depth wildcards (Gateway API): `.<suffix>` keys, longest first, for map_end.
    suffixes_map: Option<String>,
    /// The splits' shares ([`split_entries`]), when there are splits.
    splits_map: Option<String>,
    exact_map: Option<String>,
    prefix_map: Option<String>,
    /// The id of the any-host virtual host.
    any_vh: Option<String>,
    /// Set on the frontend of one virtual host whose rules match on more than the path
    /// (method, headers, query): see [`HpHop`].
    hop: Option<HpHop>,
    /// The map from those virtual hosts to their [`HpHop::backend`].
    cond_map: Option<String>,
    /// A hop's frontend: its host's rules, in precedence order: one ACL line each, tried
    /// in order.
    cond_rules: Vec<HpCond>,
    /// The `acl` lines those rules name ([`HpAcls`]).
    acls: Vec<String>,
    /// The query parameters those rules match on: each one's first occurrence is set
    /// to `txn.k8slb_q_<name>` before them.
    query_names: BTreeSet<String>,
    /// The default action's value (a backend name or an action id).
    default: String,
    /// The distinct non-forward actions.
    actions: Vec<HpAction>,
    /// The forwards with filters: their lines, before the actions (a split they forward
    /// to is one of `actions`).
    filtered: Vec<HpFiltered>,
}

/// A virtual host whose rules match on more than the path has a frontend of its own,
/// reached from the listener's through `backend` (one server: the abstract socket
/// `socket`, with the PROXY protocol so the client's address stays the source): its
/// rules are ACL lines tried in order, which HAProxy cannot skip within one frontend, so
/// in the listener's they would cost every request of every host (8,000 rules: 404 µs
/// instead of 57 µs for another tenant's requests). The listener's frontend spends one
/// map lookup to send such a host's requests there.
#[derive(Serialize)]
struct HpHop {
    backend: String,
    socket: String,
}

/// A forward with filters (`id`): its request lines, then the value it forwards to
/// (`inner`: a backend name or a split's action id); its response lines apply to the
/// responses of the requests it took (`txn.k8slb_r`).
#[derive(Serialize)]
struct HpFiltered {
    id: String,
    inner: String,
    request_lines: Vec<String>,
    response_lines: Vec<String>,
}

/// A regex that matches `path` literally: its only regex-special characters (`.`, `*`,
/// `+`; an [`HttpPath`] has no others) as one-character classes.
fn literal_regex(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    for c in path.chars() {
        if matches!(c, '.' | '*' | '+') {
            out.push('[');
            out.push(c);
            out.push(']');
        } else {
            out.push(c);
        }
    }
    out
}

/// HAProxy's lines for `f` (without their condition): request lines (remove, set, add,
/// host, path) and response lines. Names are [`FieldName`]s, values [`FieldValue`]s
/// (no `"`, `\\`, `$`, `%`: safe between double quotes in a log-format string).
fn hp_filter_lines(f: &RuleFilters) -> (Vec<String>, Vec<String>) {
    let edits = |dir: &str, e: &k8slb_common::routes::HeaderEdits| {
        let mut out = Vec::new();
        for n in &e.remove {
            out.push(format!("http-{dir} del-header {n}"));
        }
        for h in &e.set {
            out.push(format!("http-{dir} set-header {} \"{}\"", h.name, h.value));
        }
        for h in &e.add {
            out.push(format!("http-{dir} add-header {} \"{}\"", h.name, h.value));
        }
        out
    };
    let mut req = edits("request", &f.request_headers);
    if let Some(h) = &f.rewrite_host {
        req.push(format!("http-request set-header host {h}"));
    }
    if let Some(r) = &f.rewrite_path {
        req.extend(hp_path_lines(r));
    }
    (req, edits("response", &f.response_headers))
}

/// HAProxy's lines (without their condition) that rewrite the request's path as `r`
/// says; the query string stays.
fn hp_path_lines(r: &PathRewrite) -> Vec<String> {
    match r {
        PathRewrite::Full { path } => vec![format!("http-request set-path {path}")],
        PathRewrite::Prefix { from, to } => {
            let from = literal_regex(from.as_str().trim_end_matches('/'));
            let to = to.as_str().trim_end_matches('/');
            if to.is_empty() {
                vec![
                    format!("http-request replace-path ^{from}$ /"),
                    format!("http-request replace-path ^{from}(/.*)$ \\1"),
                ]
            } else {
                vec![format!("http-request replace-path ^{from}(/.*)?$ {to}\\1")]
            }
        }
    }
}

/// One line of a conditional virtual host: `value` (see [`HpFrontend::default`]) if every
/// ACL of `acl` (names of [`HpAcls`]) holds.
#[derive(Serialize)]
struct HpCond {
    value: String,
    acl: String,
}

/// The named ACLs of a frontend's conditional rules: one `acl` line per distinct
/// condition, so a rule's line names its conditions in one word each (HAProxy refuses
/// lines over 64 words; a match may hold a method, 16 headers and 16 query parameters).
#[derive(Default)]
struct HpAcls {
    by_expr: HashMap<String, String>,
    lines: Vec<String>,
}

impl HpAcls {
    /// The name of the ACL `expr` (declared once).
    fn name(&mut self, expr: String) -> String {
        if let Some(n) = self.by_expr.get(&expr) {
            return n.clone();
        }
        let n = format!("k8slb_c{}", self.lines.len());
        self.lines.push(format!("acl {n} {expr}"));
        self.by_expr.insert(expr, n.clone());
        n
    }
}

/// The ACLs of a rule of virtual host `vh` that matches on more than the path: one
/// string of ACL names per alternative (an element-wise Prefix is "the path itself, or
/// below it"). Every piece is a validated name or value: a `FieldValue` holds no quote,
/// backslash, `$` or `%`, so it may stand between double quotes; `--` ends the flags, so
/// a value that begins with `-` is a value.
fn hp_cond_acls(vh: Option<&str>, m: &RouteMatch, acls: &mut HpAcls) -> Vec<String> {
    let mut rest = String::new();
    let mut and = |expr: String, acls: &mut HpAcls| {
        rest.push(' ');
        rest.push_str(&acls.name(expr));
    };
    if let Some(method) = m.method {
        and(format!("method {}", method.as_str()), acls);
    }
    for h in &m.headers {
        and(
            format!("req.fhdr({},1) -m str -- \"{}\"", h.name, h.value),
            acls,
        );
    }
    for q in &m.query {
        // The first occurrence (set by the frontend: an ACL on url_param would match any).
        and(
            format!("var(txn.k8slb_q_{}) -m str -- \"{}\"", q.name, q.value),
            acls,
        );
    }
    let vh = vh
        .map(|vh| format!(" {}", acls.name(format!("var(txn.k8slb_vh) -m str {vh}"))))
        .unwrap_or_default();
    let mut path = |op: &str, p: String| acls.name(format!("var(txn.k8slb_path) -m {op} {p}"));
    let all = match &m.path {
        PathMatch::Exact(p) => vec![format!("{vh} {}{rest}", path("str", p.to_string()))],
        PathMatch::Prefix(p) if p.as_str() == "/" => vec![format!("{vh}{rest}")],
        PathMatch::Prefix(p) => vec![
            format!("{vh} {}{rest}", path("str", p.to_string())),
            format!("{vh} {}{rest}", path("beg", format!("{p}/"))),
        ],
    };
    all.into_iter()
        .map(|a| a.trim_start().to_string())
        .collect()
}

#[derive(Serialize)]
struct HpTls {
    default_crt: Option<String>,
    crt_list: Option<String>,
}

#[derive(Serialize, Default)]
struct HpAction {
    id: String,
    /// split | redirect | respond
    kind: &'static str,
    split: Vec<HpSplit>,
    location: String,
    /// redirect: the lines that rewrite the path first (the Location takes the
    /// rewritten path and the query), with their condition.
    pre_lines: Vec<String>,
    status: u16,
}

#[derive(Serialize)]
struct HpSplit {
    backend: String,
    /// Its key in the splits map: the cumulative share (of [`SPLIT_SCALE`]) below
    /// which a request goes to `backend`.
    key: String,
}

/// The splits map key of backend `i` of the split at `pos`.
fn split_key(pos: &str, i: usize) -> String {
    format!("{pos}_b{i}")
}

/// Where a rule is, for the splits map: `r<virtual host>_<rule>`, or `d` for the
/// listener's default action.
fn rule_pos(vh: usize, rule: usize) -> String {
    format!("r{vh}_{rule}")
}

/// Every split of a listener (a forward to two or more backends) as splits-map entries
/// (key, cumulative share of [`SPLIT_SCALE`]), in render order: the content of its
/// splits map, and what a change of weights sets over the Runtime API. A backend of
/// weight 0 has no share; the invalid references' share (above the last backend's) and,
/// when every weight is 0, every request gets 500.
pub fn split_entries(l: &Listener) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut add = |pos: String, a: &RouteAction| {
        if let (true, RouteAction::Forward { backends, invalid }) = (a.is_split(), a) {
            {
                let shares = crate::render_stream::cumulative_shares_with(backends, *invalid);
                for (i, share) in shares.into_iter().enumerate() {
                    out.push((split_key(&pos, i), share));
                }
            }
        }
    };
    for (i, v) in l.virtual_hosts.iter().enumerate() {
        for (j, r) in v.rules.iter().enumerate() {
            add(rule_pos(i + 1, j), &r.action);
        }
    }
    if let Some(d) = &l.default_action {
        add("d".into(), d);
    }
    out
}

/// The splits map of the listener `l` (a file under `files_dir`).
pub fn splits_map_path(l: &Listener, o: &HttpRenderOptions) -> Result<String, RenderError> {
    let dir = safe_path("routes files directory", &o.files_dir).map_err(path_err)?;
    Ok(format!(
        "{}/rtf_{}_{}.splits.map",
        dir.trim_end_matches('/'),
        ip_slug(l.ip),
        l.port
    ))
}

#[derive(Serialize)]
struct HpBackend<'a> {
    name: &'a str,
    mode: k8slb_common::state::Mode,
    stick_source: &'a Option<StickSource>,
    cookie: Option<String>,
    server_lines: String,
}

/// The Location of a redirect from a listener of scheme `listener` on `port` (the
/// Gateway API's rules: [`Redirect::location_port`]), and the lines that rewrite the path
/// before it (without their condition).
fn hp_redirect(
    rd: &Redirect,
    (listener, port): (Scheme, u16),
    notes: &mut Vec<String>,
    what: &str,
) -> (String, Vec<String>) {
    let scheme = rd.location_scheme(listener).as_str();
    let host = match &rd.host {
        Some(h) if h.is_wildcard() => {
            notes.push(format!(
                "{what}: a redirect to a wildcard host keeps the request's host"
            ));
            "%[var(txn.k8slb_host)]".to_string()
        }
        Some(h) => h.to_string(),
        None => "%[var(txn.k8slb_host)]".to_string(),
    };
    let port = rd
        .location_port(listener, port)
        .map(|p| format!(":{p}"))
        .unwrap_or_default();
    let rewrite = match (&rd.path, &rd.replace_prefix) {
        (Some(path), _) => hp_path_lines(&PathRewrite::Full { path: path.clone() }),
        (None, Some(r)) => hp_path_lines(r),
        (None, None) => vec![],
    };
    (format!("{scheme}://{host}{port}%[pathq]"), rewrite)
}

/// The actions of one frontend: a forward to one backend is the backend's name; every
/// other distinct action gets an id `a<N>` and a few lines in the frontend.
struct Actions {
    ids: HashMap<String, String>,
    list: Vec<HpAction>,
    filtered: Vec<HpFiltered>,
    /// The listener's scheme and port (redirects derive their Location's from them).
    listener: (Scheme, u16),
}

impl Actions {
    /// [`Actions::value`] of a rule's action with its filters: a forward with filters is
    /// an action of its own (see [`HpFiltered`]).
    fn value_with(
        &mut self,
        action: &RouteAction,
        pos: &str,
        filters: &RuleFilters,
        notes: &mut Vec<String>,
        what: &str,
    ) -> String {
        let inner = self.value(action, pos, notes, what);
        if filters.is_empty() || !matches!(action, RouteAction::Forward { .. }) {
            return inner;
        }
        // By what it forwards to (a split is its position's own), not by the weights.
        let key = serde_json::to_string(&(&inner, filters)).expect("filters serialise");
        if let Some(id) = self.ids.get(&key) {
            return id.clone();
        }
        let id = format!("f{}", self.filtered.len() + 1);
        let cond = |var: &str| format!(" if {{ var(txn.{var}) -m str {id} }}");
        let (request, response) = hp_filter_lines(filters);
        self.filtered.push(HpFiltered {
            id: id.clone(),
            inner,
            request_lines: request.into_iter().map(|l| l + &cond("k8slb_a")).collect(),
            response_lines: response.into_iter().map(|l| l + &cond("k8slb_r")).collect(),
        });
        self.ids.insert(key, id.clone());
        id
    }

    fn value(
        &mut self,
        action: &RouteAction,
        pos: &str,
        notes: &mut Vec<String>,
        what: &str,
    ) -> String {
        if let RouteAction::Forward { backends, invalid } = action {
            if let ([one], 0) = (backends.as_slice(), invalid) {
                if one.weight > 0 {
                    return route_backend_name(&one.id);
                }
            } else if action.is_split() {
                // A split of its own, its shares in the splits map (keys from `pos`), so
                // a change of weights is a `set map`, not a reload.
                let id = format!("s{pos}");
                self.list.push(HpAction {
                    id: id.clone(),
                    kind: "split",
                    split: backends
                        .iter()
                        .enumerate()
                        .map(|(i, b)| HpSplit {
                            backend: route_backend_name(&b.id),
                            key: split_key(pos, i),
                        })
                        .collect(),
                    ..Default::default()
                });
                return id;
            }
        }
        let key = serde_json::to_string(action).expect("an action serialises");
        if let Some(id) = self.ids.get(&key) {
            return id.clone();
        }
        let plain = self.list.iter().filter(|a| a.kind != "split").count();
        let id = format!("a{}", plain + 1);
        let a = match action {
            // No backend, or one of weight 0.
            RouteAction::Forward { .. } => HpAction {
                kind: "respond",
                status: 500,
                ..Default::default()
            },
            RouteAction::Redirect(rd) => {
                let (location, rewrite) = hp_redirect(rd, self.listener, notes, what);
                let cond = format!(" if {{ var(txn.k8slb_a) -m str {id} }}");
                HpAction {
                    kind: "redirect",
                    location,
                    pre_lines: rewrite.into_iter().map(|l| l + &cond).collect(),
                    status: rd.status.code(),
                    ..Default::default()
                }
            }
            RouteAction::Respond { status } => HpAction {
                kind: "respond",
                status: status.code(),
                ..Default::default()
            },
        };
        self.list.push(HpAction {
            id: id.clone(),
            ..a
        });
        self.ids.insert(key, id.clone());
        id
    }
}

/// The frontends of listener `l`: its own, then one per virtual host whose rules match
/// on more than the path ([`HpHop`]); none when it cannot be rendered.
fn hp_frontend(
    l: &Listener,
    o: &HttpRenderOptions,
    files: &mut BTreeMap<String, String>,
    notes: &mut Vec<String>,
) -> Result<Vec<HpFrontend>, RenderError> {
    let name = format!("rtf_{}_{}", ip_slug(l.ip), l.port);
    let dir = safe_path("routes files directory", &o.files_dir).map_err(path_err)?;
    let file = |ext: &str| format!("{}/{name}.{ext}", dir.trim_end_matches('/'));
    let tls = match (l.protocol, &l.tls) {
        (ListenerProtocol::Http, _) => None,
        (ListenerProtocol::Https, None) => {
            notes.push(format!("{name}: HTTPS without TLS settings; not rendered"));
            return Ok(Vec::new());
        }
        (ListenerProtocol::Https, Some(t)) => {
            if t.certificates.is_empty() && t.default_certificate.is_none() {
                notes.push(format!(
                    "{name}: HTTPS without any certificate; not rendered"
                ));
                return Ok(Vec::new());
            }
            let default_crt = match &t.default_certificate {
                Some(f) => Some(format!("{}.pem", cert_path(f, o)?)),
                None => None,
            };
            let crt_list = if t.certificates.is_empty() {
                None
            } else {
                let mut text = String::new();
                for c in &t.certificates {
                    text.push_str(&cert_path(&c.file, o)?);
                    text.push_str(".pem");
                    for h in &c.hosts {
                        text.push(' ');
                        text.push_str(h.as_str());
                    }
                    text.push('\n');
                }
                let f = file("crt-list");
                files.insert(f.clone(), text);
                Some(f)
            };
            Some(HpTls {
                default_crt,
                crt_list,
            })
        }
    };
    let mut actions = Actions {
        ids: HashMap::new(),
        list: Vec::new(),
        filtered: Vec::new(),
        listener: (listener_scheme(l), l.port),
    };
    let (mut hosts, mut wildcards, mut exact) = (String::new(), String::new(), String::new());
    let mut prefixes: Vec<(String, String)> = Vec::new();
    let mut any_vh = None;
    let mut suffixes: Vec<(String, String)> = Vec::new();
    let mut cond_map = String::new();
    let mut hops: Vec<HpFrontend> = Vec::new();
    let default_action = l.default_action.clone().unwrap_or(RouteAction::Respond {
        status: k8slb_common::routes::FixedStatus::NotFound404,
    });
    for (i, v) in l.virtual_hosts.iter().enumerate() {
        let id = format!("v{}", i + 1);
        match &v.host {
            None => any_vh = Some(id.clone()),
            Some(h) => match h.wildcard_suffix() {
                Some(suffix) if v.any_depth => suffixes.push((suffix.to_string(), id.clone())),
                _ => {
                    let (map, key) = match h.wildcard_suffix() {
                        Some(suffix) => (&mut wildcards, suffix),
                        None => (&mut hosts, h.as_str()),
                    };
                    map.push_str(key);
                    map.push(' ');
                    map.push_str(&id);
                    map.push('\n');
                }
            },
        }
        if v.rules.iter().any(|r| r.matches.is_conditional()) {
            // Matches beyond the path: every rule of this host is an ACL line, tried in
            // precedence order (a map key holds one action), in a frontend of its own.
            let hop_name = format!("{name}_{id}");
            let backend = format!("rtv_{}_{}_{id}", ip_slug(l.ip), l.port);
            cond_map.push_str(&format!("{id} {backend}\n"));
            let mut hop_actions = Actions {
                ids: HashMap::new(),
                list: Vec::new(),
                filtered: Vec::new(),
                listener: (listener_scheme(l), l.port),
            };
            let mut acls = HpAcls::default();
            let mut query_names = BTreeSet::new();
            let mut cond_rules = Vec::new();
            for (j, r) in v.rules.iter().enumerate() {
                let pos = rule_pos(i + 1, j);
                let value = hop_actions.value_with(&r.action, &pos, &r.filters, notes, &name);
                query_names.extend(r.matches.query.iter().map(|q| q.name.to_string()));
                for acl in hp_cond_acls(None, &r.matches, &mut acls) {
                    cond_rules.push(HpCond {
                        value: value.clone(),
                        acl,
                    });
                }
            }
            let default = hop_actions.value(&default_action, "d", notes, &name);
            hops.push(HpFrontend {
                name: hop_name,
                bind: format!("abns@k8slb_{backend}"),
                tls: None,
                hop: Some(HpHop {
                    socket: format!("abns@k8slb_{backend}"),
                    backend,
                }),
                cond_map: None,
                hosts_map: None,
                wildcards_map: None,
                suffixes_map: None,
                splits_map: None,
                exact_map: None,
                prefix_map: None,
                any_vh: None,
                cond_rules,
                acls: acls.lines,
                query_names,
                default,
                actions: hop_actions.list,
                filtered: hop_actions.filtered,
            });
            continue;
        }
        let mut seen_exact: BTreeSet<&str> = BTreeSet::new();
        let mut seen_prefix: BTreeSet<&str> = BTreeSet::new();
        for (j, r) in v.rules.iter().enumerate() {
            let pos = rule_pos(i + 1, j);
            let value = actions.value_with(&r.action, &pos, &r.filters, notes, &name);
            match &r.matches.path {
                PathMatch::Exact(p) => {
                    if seen_exact.insert(p.as_str()) {
                        exact.push_str(&format!("{id}{p} {value}\n"));
                    }
                }
                PathMatch::Prefix(p) => {
                    if seen_prefix.insert(p.as_str()) {
                        let key = if p.as_str() == "/" {
                            format!("{id}/")
                        } else {
                            format!("{id}{p}/")
                        };
                        prefixes.push((key, value));
                    }
                }
            }
        }
    }
    // Longest first: the first match is the longest, whether HAProxy scans the list or
    // looks the prefix up in a tree.
    prefixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    let prefix: String = prefixes.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
    let default = actions.value(&default_action, "d", notes, &name);
    let splits: String = split_entries(l)
        .iter()
        .map(|(k, v)| format!("{k} {v}\n"))
        .collect();
    let splits_map = if splits.is_empty() {
        None
    } else {
        let f = splits_map_path(l, o)?;
        files.insert(f.clone(), splits);
        Some(f)
    };
    for h in &mut hops {
        h.splits_map.clone_from(&splits_map);
    }
    let mut map = |ext: &str, text: String| {
        (!text.is_empty()).then(|| {
            let f = file(ext);
            files.insert(f.clone(), text);
            f
        })
    };
    let mut out = vec![HpFrontend {
        bind: SocketAddr::new(l.ip, l.port).to_string(),
        tls,
        hop: None,
        cond_map: map("cond.map", cond_map),
        hosts_map: map("hosts.map", hosts),
        wildcards_map: map("wildcards.map", wildcards),
        suffixes_map: map("suffixes.map", {
            // The longest suffix first: the first that matches is the most specific.
            suffixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
            suffixes.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
        }),
        exact_map: map("exact.map", exact),
        prefix_map: map("prefix.map", prefix),
        any_vh,
        splits_map,
        cond_rules: Vec::new(),
        acls: Vec::new(),
        query_names: BTreeSet::new(),
        default,
        actions: actions.list,
        filtered: actions.filtered,
        name,
    }];
    out.extend(hops);
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// nginx

#[derive(Serialize)]
struct NxCtx<'a> {
    /// `server_names_hash_*` lines sized for these server names (see [`nx_hash_lines`]).
    hash_lines: Vec<String>,
    upstreams: Vec<NxUpstream>,
    /// `split_clients` blocks ([`NxSplits`]).
    split_blocks: Vec<String>,
    servers: Vec<NxServer>,
    proxy_lines: &'a [ConfigLine],
    upstream_lines: &'a [ConfigLine],
}

#[derive(Serialize)]
struct NxUpstream {
    name: String,
    hash_source: bool,
    server_lines: String,
}

/// The files of a server's certificate: a pool's are `<pool>.pem` and `<pool>.key` (as
/// for Services); a Secret's is one `<stem>.pem` holding the chain and then the key
/// (nginx reads the key from the same file).
#[derive(Serialize)]
struct NxTls {
    cert: String,
    key: String,
}

#[derive(Serialize)]
struct NxServer {
    listen: String,
    default: bool,
    server_name: String,
    tls: Option<NxTls>,
    /// `http2` on the listen ([`nx_listener_h2`]).
    h2: bool,
    /// The locations, pre-rendered by [`nx_location_lines`] (a 5,000-host render spent
    /// most of its time in a template loop over them).
    location_lines: String,
}

/// The `location` blocks of one server, as the template would write them.
/// The value a split variable takes for the invalid references' share: a location that
/// proxies through a variable returns 500 for it.
const NX_INVALID_SHARE: &str = "k8slb_500";

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

/// Does nginx put `http2` on the listener's `listen`? On TLS, when some location of it
/// forwards to an h2c backend (ALPN then offers h2 and http/1.1). On cleartext, only when
/// every backend it forwards to speaks h2c: nginx before 1.25.1 takes only HTTP/2 on a
/// cleartext `http2` port, so one HTTP/1.1 backend beside them keeps the port HTTP/1.1
/// (and its h2c backends reachable by HTTP/1.1 clients only: a note says so).
fn nx_listener_h2(l: &Listener, routes: &HttpRoutes, notes: &mut Vec<String>) -> bool {
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

fn nx_location_lines(
    locations: &[NxLocation],
    proxy_lines: &[ConfigLine],
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
                    out.push_str("\n      ");
                    if loc.h2c {
                        out.push_str(&nx_grpc_line(l.as_str()));
                    } else {
                        out.push_str(l.as_str());
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
                if loc.h2c {
                    out.push_str("\n      grpc_pass grpc://");
                } else {
                    for l in &upgrade_lines {
                        out.push_str("\n      ");
                        out.push_str(l);
                    }
                    out.push_str("\n      proxy_pass http://");
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
}

/// nginx's variable for request header `n`: `$http_<n with - as _>`.
fn nx_http_var(n: &FieldName) -> String {
    format!("$http_{}", n.as_str().replace('-', "_"))
}

/// The lines of a location whose one rule has filters `f` (see [`nx_pick_filters`] for
/// a location that picks among rules), and the request headers they set.
fn nx_filter_lines(f: &RuleFilters, splits: &mut NxSplits) -> (Vec<String>, Vec<String>) {
    let mut lines = Vec::new();
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
    lines.extend(nx_rewrite_lines(f));
    (lines, skip)
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

/// The traffic splits of a render: one `split_clients` block per distinct set of
/// (upstream, weight), shared by every location that splits the same way.
#[derive(Default)]
struct NxSplits {
    by_backends: BTreeMap<Vec<(String, u16)>, String>,
    /// The `split_clients` and `map` blocks, in the order their variables were named.
    blocks: Vec<String>,
    /// Conditions (method, headers, query of a [`RouteMatch`]) → the `map` variable that
    /// is `1` when a request meets them, else `0`.
    conds: HashMap<String, String>,
    /// (condition variables, values) → the `map` variable that picks a location's value.
    picks: HashMap<String, String>,
    /// The scheme and port of the listener whose server is being rendered (redirects
    /// derive their Location's from them).
    listener: Option<(Scheme, u16)>,
    /// Some split has an invalid references' share ([`NX_INVALID_SHARE`]).
    invalid_shares: bool,
    /// Conditional hosts rendered so far (each names its rule chain after its number).
    hosts: usize,
    /// The upstreams whose backends speak h2c ([`BackendProtocol::H2c`]): a location
    /// that forwards only to them uses `grpc_pass`.
    h2c: BTreeSet<String>,
    /// The listener being rendered gets `http2` on its `listen` ([`nx_listener_h2`]).
    listen_h2: bool,
}

/// `value` as a case-sensitive nginx regex source that matches exactly `1<value>`: every
/// character but letters and digits is escaped with `\` (PCRE takes an escaped
/// non-alphanumeric character literally; nginx keeps such a `\` inside double quotes).
/// A `FieldValue` holds no `"`, `'` nor `\`, so the quoted string stays closed.
fn nx_exact_after_one(value: &str) -> String {
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
    /// The variable that names the upstream of one request split by `weights` (each
    /// weight > 0, at least two): `split_clients` on `$request_id` (random per request),
    /// each upstream's share in hundredths of a percent, the last one `*` (the rest).
    fn variable(&mut self, weights: Vec<(String, u16)>) -> String {
        if let Some(v) = self.by_backends.get(&weights) {
            return v.clone();
        }
        let var = format!("$k8slb_split_{}", self.blocks.len());
        let total: u64 = weights.iter().map(|(_, w)| u64::from(*w)).sum();
        let mut block = format!("split_clients \"${{request_id}}\" {var} {{");
        let last = weights.len() - 1;
        for (i, (upstream, w)) in weights.iter().enumerate() {
            if i == last {
                block.push_str(&format!("\n    * {upstream};"));
            } else {
                let hundredths = u64::from(*w) * 10_000 / total;
                block.push_str(&format!(
                    "\n    {}.{:02}% {upstream};",
                    hundredths / 100,
                    hundredths % 100
                ));
            }
        }
        block.push_str("\n  }");
        self.blocks.push(block);
        self.by_backends.insert(weights, var.clone());
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
            self.blocks.push(format!(
                "map \"{prev}{source}\" {var} {{\n    \"{}\" 1;\n    default 0;\n  }}",
                nx_exact_after_one(want)
            ));
            prev = var;
        }
        self.conds.insert(key, prev.clone());
        prev
    }

    /// The value of request header `n` with `v` added (Gateway API `add`): `v` when the
    /// request has none, else its value, a comma and `v` (one header of a list).
    fn added(&mut self, n: &FieldName, v: &FieldValue) -> String {
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
        let mut block = format!("map {source} {var} {{");
        for (k, v) in entries {
            block.push_str(&format!("\n    {k} {v};"));
        }
        block.push_str(&format!("\n    default {default};\n  }}"));
        self.blocks.push(block);
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
    // (id, action, filters) of the rules a request can get, in precedence order.
    let mut chosen: Vec<(String, &RouteAction, &RuleFilters)> = Vec::new();
    let mut links: Vec<(String, String)> = Vec::new();
    let mut catch_all = None;
    for (i, r) in rules.iter().enumerate() {
        let m = &r.matches;
        let cond = if m.is_conditional() {
            splits.condition(m)
        } else {
            String::new()
        };
        let want = if m.is_conditional() { "1" } else { "" };
        links.push((format!("\"~^:{want}{}\"", nx_path_regex(&m.path)), cond));
        chosen.push((format!("r{i}"), &r.action, &r.filters));
        if !m.is_conditional() && matches!(&m.path, PathMatch::Prefix(p) if p.as_str() == "/") {
            catch_all = Some(i);
            break;
        }
    }
    if catch_all.is_none() {
        chosen.push(("rd".into(), default, &no_filters));
    }
    let mut prev = String::new();
    let last = links.len() - 1;
    for (i, (key, cond)) in links.iter().enumerate() {
        let var = if i == last {
            format!("$k8slb_h{h}")
        } else {
            format!("$k8slb_h{h}_{i}")
        };
        let mut block = format!("map \"{prev}:{cond}$uri\" {var} {{");
        if i > 0 {
            block.push_str("\n    \"~^(r[0-9]+):\" $1;");
        }
        block.push_str(&format!("\n    {key} r{i};"));
        let fallback = if i == last && catch_all.is_none() {
            "rd"
        } else {
            "\"\""
        };
        block.push_str(&format!("\n    default {fallback};\n  }}"));
        splits.blocks.push(block);
        prev = var;
    }
    let sel = prev;
    // What each rule does: its upstream (or split variable), or `act<i>` for a redirect
    // or a fixed answer (distinct ones once).
    let mut returns: Vec<(String, NxLocation)> = Vec::new();
    let mut upstreams: Vec<(String, String)> = Vec::new();
    let mut acts: Vec<(String, String)> = Vec::new();
    let mut h2c = None;
    for (id, action, _) in &chosen {
        let loc = nx_action(action, splits);
        if loc.kind == "forward" {
            *h2c.get_or_insert(true) &= loc.h2c;
            upstreams.push((id.clone(), loc.upstream));
            continue;
        }
        let v = match returns.iter().find(|(_, l)| {
            l.kind == loc.kind && l.status == loc.status && l.location == loc.location
        }) {
            Some((v, _)) => v.clone(),
            None => {
                let v = format!("act{}", returns.len());
                returns.push((v.clone(), loc));
                v
            }
        };
        acts.push((id.clone(), v));
    }
    // A request that returns never reaches proxy_pass: any upstream will do as default.
    let up_default = upstreams
        .last()
        .map(|(_, u)| u.clone())
        .unwrap_or_else(|| NX_INVALID_SHARE.to_string());
    let upstream = splits.map_on(&sel, &upstreams, &up_default);
    let returns_on = if returns.is_empty() {
        String::new()
    } else {
        splits.map_on(&sel, &acts, "\"\"")
    };
    let forwards = |a: &RouteAction| matches!(a, RouteAction::Forward { .. });
    let filtered: Vec<(String, &RuleFilters)> = chosen
        .iter()
        .map(|(id, a, f)| (id.clone(), if forwards(a) { *f } else { &no_filters }))
        .collect();
    let (filter_lines, skip_headers) = if filtered.iter().all(|(_, f)| f.is_empty()) {
        (Vec::new(), Vec::new())
    } else {
        nx_pick_filters(&sel, &filtered, host_default, splits)
    };
    vec![NxLocation {
        path: "/".into(),
        kind: "pick",
        upstream,
        h2c: h2c.unwrap_or(false),
        returns_on,
        returns,
        filter_lines,
        skip_headers,
        ..Default::default()
    }]
}

fn nx_action(action: &RouteAction, splits: &mut NxSplits) -> NxLocation {
    match action {
        RouteAction::Forward { backends, invalid } => {
            let live: Vec<_> = backends.iter().filter(|b| b.weight > 0).collect();
            match live.as_slice() {
                [one] if *invalid == 0 => {
                    let upstream = route_backend_name(&one.id);
                    NxLocation {
                        kind: "forward",
                        h2c: splits.h2c.contains(&upstream),
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
                        .map(|b| (route_backend_name(&b.id), b.weight))
                        .collect();
                    let h2c = weights.iter().all(|(u, _)| splits.h2c.contains(u));
                    if *invalid > 0 {
                        weights.push((NX_INVALID_SHARE.to_string(), *invalid));
                        splits.invalid_shares = true;
                    }
                    NxLocation {
                        kind: "forward",
                        // proxy_pass through a variable naming an upstream group.
                        upstream: splits.variable(weights),
                        h2c,
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

fn nx_server(
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
    let server_name = match host {
        None => "_".to_string(),
        Some(h) => match h.wildcard_suffix() {
            Some(suffix) if v.is_some_and(|v| v.any_depth) => {
                format!("~^.+{}$", suffix.replace('.', "[.]"))
            }
            Some(suffix) => format!("~{}", one_label_regex(suffix)),
            None => h.to_string(),
        },
    };
    let tls = match (l.protocol, &l.tls) {
        (ListenerProtocol::Http, _) => None,
        (ListenerProtocol::Https, t) => {
            let cert = t.as_ref().and_then(|t| match host {
                Some(h) => t.certificate_for(h.as_str()),
                None => t
                    .default_certificate
                    .as_ref()
                    .or_else(|| t.certificates.first().map(|c| &c.file)),
            });
            match cert {
                Some(f) => {
                    let base = cert_path(f, o)?;
                    let key = match f {
                        CertFile::Pool { .. } => format!("{base}.key"),
                        CertFile::Secret { .. } => format!("{base}.pem"),
                    };
                    Some(NxTls {
                        cert: format!("{base}.pem"),
                        key,
                    })
                }
                None => {
                    notes.push(format!("{what}: HTTPS without a certificate; not rendered"));
                    return Ok(None);
                }
            }
        }
    };
    let default_action = l.default_action.clone().unwrap_or(RouteAction::Respond {
        status: k8slb_common::routes::FixedStatus::NotFound404,
    });
    if let Some(v) = v.filter(|v| v.rules.iter().any(|r| r.matches.is_conditional())) {
        let host_default = o
            .nginx_proxy
            .iter()
            .find_map(|l| {
                let mut w = l.as_str().split_whitespace();
                (w.next() == Some("proxy_set_header")
                    && w.next().is_some_and(|h| h.eq_ignore_ascii_case("host")))
                .then(|| w.next().map(|v| v.trim_end_matches(';').to_string()))
                .flatten()
            })
            .unwrap_or_else(|| "$proxy_host".to_string());
        let locations = nx_conditional_locations(&v.rules, &default_action, &host_default, splits);
        return Ok(Some(NxServer {
            listen,
            default: host.is_none(),
            server_name,
            tls,
            h2,
            location_lines: nx_location_lines(&locations, &o.nginx_proxy, splits.invalid_shares),
        }));
    }
    let mut locations = Vec::new();
    let mut exact: BTreeSet<String> = BTreeSet::new();
    let mut root = false;
    let rules = v.map(|v| v.rules.as_slice()).unwrap_or_default();
    // Each rule's location, without its path.
    let mut by_rule: Vec<NxLocation> = Vec::with_capacity(rules.len());
    for r in rules {
        let act = nx_action(&r.action, splits);
        let (filter_lines, skip_headers) = if act.kind == "forward" {
            nx_filter_lines(&r.filters, splits)
        } else {
            (Vec::new(), Vec::new())
        };
        let loc = |path: String| NxLocation {
            path,
            kind: act.kind,
            h2c: act.h2c,
            upstream: act.upstream.clone(),
            location: act.location.clone(),
            status: act.status,
            returns: Vec::new(),
            returns_on: String::new(),
            filter_lines: filter_lines.clone(),
            skip_headers: skip_headers.clone(),
        };
        by_rule.push(loc(String::new()));
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
    }
    // nginx answers `/p` with a 301 to `/p/` when a location named `/p/` proxies and no
    // location `= /p` exists (its auto_redirect): an Exact `/p/` would redirect `/p`,
    // which it does not match (the Ingress conformance's path_rules: 404). So `/p` gets
    // a location of its own, with what the model gives it: the first rule that matches
    // it, else the default.
    let slashed: Vec<String> = exact
        .iter()
        .filter_map(|p| p.strip_suffix('/').filter(|q| !q.is_empty()))
        .filter(|q| !exact.contains(*q))
        .map(str::to_string)
        .collect();
    for q in slashed {
        let req = Request::get("", &q);
        let mut loc = match rules.iter().position(|r| r.matches.matches_request(&req)) {
            Some(i) => by_rule[i].clone(),
            None => nx_action(&default_action, splits),
        };
        loc.path = format!("= {q}");
        locations.push(loc);
    }
    if !root {
        let mut d = nx_action(&default_action, splits);
        d.path = "/".into();
        locations.push(d);
    }
    Ok(Some(NxServer {
        listen,
        default: host.is_none(),
        server_name,
        tls,
        h2,
        location_lines: nx_location_lines(&locations, &o.nginx_proxy, splits.invalid_shares),
    }))
}

fn nx_upstreams(routes: &HttpRoutes, notes: &mut Vec<String>) -> Vec<NxUpstream> {
    routes
        .backends
        .iter()
        .map(|(id, st)| {
            let name = route_backend_name(id);
            if matches!(st.stickiness, Some(Sticky::Cookie { .. })) {
                notes.push(format!(
                    "{id}: nginx has no cookie stickiness; using the client address"
                ));
            }
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

/// nginx refuses the whole config when a server name does not fit its hash bucket (64
/// bytes by default: a valid 200-character host name would block every other route) or
/// when there are more names than its default hash size allows (hundreds). So the
/// routes size the hash for their own names, unless the admin's `nginx.http` lines do.
fn nx_hash_lines(
    servers: &[NxServer],
    o: &HttpRenderOptions,
    notes: &mut Vec<String>,
) -> Vec<String> {
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
    // An entry is the name, a pointer and 2 bytes, rounded up to a pointer.
    let bucket = (longest + 2 + 8).next_power_of_two().max(64);
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
            out.push(format!("{word} {value};"));
        }
    }
    out
}

impl HttpRenderer {
    /// The templates compiled into the binary.
    pub fn embedded() -> Result<Self, RenderError> {
        let mut tera = Tera::default();
        // Config files, not HTML: nothing is escaped (values are validated).
        tera.autoescape_on(vec![]);
        for (name, text) in TEMPLATES {
            tera.add_raw_template(name, text)
                .map_err(|e| RenderError::ParseTemplate {
                    name: name.to_string(),
                    detail: e.to_string(),
                })?;
        }
        Ok(HttpRenderer { tera })
    }

    fn one(&self, name: &'static str, ctx: impl Serialize) -> Result<String, RenderError> {
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

    /// The HAProxy frontends and backends of `routes`. `prev`: the backends of the
    /// previous render, so endpoints keep their slots.
    pub fn haproxy(
        &self,
        routes: &HttpRoutes,
        o: &HttpRenderOptions,
        prev: &[Backend],
    ) -> Result<HaproxyRoutes, RenderError> {
        let mut notes = Vec::new();
        let mut files = BTreeMap::new();
        let mut frontends = Vec::new();
        for l in &routes.listeners {
            frontends.extend(hp_frontend(l, o, &mut files, &mut notes)?);
        }
        let (streams, skipped_streams) =
            crate::render_stream::hp_streams(routes, o, &mut files, &mut notes)?;
        let backends = route_backends(routes, prev);
        let cookie_names: HashMap<String, String> = routes
            .backends
            .iter()
            .filter_map(|(id, st)| match &st.stickiness {
                Some(Sticky::Cookie { name }) => Some((route_backend_name(id), name.to_string())),
                _ => None,
            })
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
                    server_lines: b.server_lines(),
                })
                .collect(),
            httpfront: &o.httpfront,
            httpback: &o.httpback,
            tcpfront: &o.tcpfront,
            tcpback: &o.tcpback,
        };
        let text = self.one(HAPROXY_ROUTES, ctx)?;
        Ok(HaproxyRoutes {
            text,
            files,
            backends,
            notes,
        })
    }

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
                .collect(),
            ..NxSplits::default()
        };
        for l in &routes.listeners {
            splits.listen_h2 = nx_listener_h2(l, routes, &mut notes);
            for v in &l.virtual_hosts {
                servers.extend(nx_server(l, Some(v), o, &mut notes, &mut splits)?);
            }
            if !l.virtual_hosts.iter().any(|v| v.host.is_none()) {
                servers.extend(nx_server(l, None, o, &mut notes, &mut splits)?);
            }
        }
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
        let streams = crate::render_stream::nx_streams(routes, &mut notes);
        let stream_text = if streams.is_empty() {
            String::new()
        } else {
            self.one(NGINX_STREAMS, streams)?
        };
        Ok(NginxRoutes {
            text,
            stream_text,
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_route_templates_parse() {
        HttpRenderer::embedded().unwrap();
    }

    /// The plan refuses a value by the length of the token this renderer makes of it
    /// (`k8slb_common::routes::NGINX_MAX_TOKEN`): both must measure alike.
    #[test]
    fn the_plans_token_measures_are_the_rendered_lengths() {
        let v: FieldValue = "id:7 (beta)-x".parse().unwrap();
        let quoted = |t: &str| t.len() + 2;
        assert_eq!(
            v.nginx_match_token_len(),
            quoted(&nx_exact_after_one(v.as_str()))
        );
        let name: FieldName = "x-add".parse().unwrap();
        let mut splits = NxSplits::default();
        let var = splits.added(&name, &v);
        let block = splits.blocks.last().unwrap();
        assert!(block.contains(&var));
        let default = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("default "))
            .unwrap()
            .trim_end_matches(';');
        assert_eq!(v.nginx_edit_token_len(&name, true), default.len());
        assert_eq!(v.nginx_edit_token_len(&name, false), quoted(v.as_str()));
    }

    #[test]
    fn wildcard_regex_is_one_label_and_has_no_backslash() {
        assert_eq!(one_label_regex(".foo-bar.com"), "^[^.]+[.]foo-bar[.]com$");
    }
}
