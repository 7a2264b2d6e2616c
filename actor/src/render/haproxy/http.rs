//! The HTTP route frontends of haproxy.cfg and their map and crt-list files: hosts, paths
//! and actions looked up in maps (see `templates/haproxy-routes.cfg.tera` for the chain),
//! rules that match on more than the path in a frontend of their own.

use crate::render::files::{
    cert_path, files_dir, http_frontend_name, ip_slug, listener_scheme, rule_pos, split_key,
    SplitsMap,
};
use crate::render_error::RenderError;
use crate::view::weighted_backend_name;
use crate::view::HttpRenderOptions;
use k8slb_common::routes::{
    Listener, ListenerProtocol, ListenerTls, PathMatch, PathRewrite, Redirect, RouteAction,
    RouteMatch, RuleFilters, Scheme, SniZones, VirtualHost,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;

#[derive(Serialize)]
pub(crate) struct HpFrontend {
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
    /// The ACLs those rules name ([`HpAcls`]).
    acls: Vec<HpAcl>,
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
    /// The zones that answer a misdirected request `421` ([`hp_misdirected`]), after
    /// the Host is read and before anything routes by it.
    misdirected: Option<HpMisdirected>,
}

/// A listener's SNI zones ([`hp_misdirected`]): the default zone, then each zone's
/// name test, the least specific first.
#[derive(Serialize)]
struct HpMisdirected {
    default: String,
    zones: Vec<HpZone>,
}

/// `-m <op> <value>` picks `zone`: `end` with a wildcard's suffix, `str` with an exact
/// name.
#[derive(Serialize)]
struct HpZone {
    zone: String,
    op: &'static str,
    value: String,
}

/// `acl <name> <expr>`
#[derive(Serialize)]
struct HpAcl {
    name: String,
    expr: String,
}

/// HTTPS listeners of the Gateway API sharing a port: the zone of the TLS server name
/// (`txn.k8slb_sz`, set only with SNI) and of the Host (`txn.k8slb_hz`), each the last
/// that matches of: the default zone, the wildcards by shortest suffix first, the exact
/// names (so the most specific wins); a request whose two zones differ is answered
/// `421` ([`SniZones`]). Every value is a validated hostname or a zone name
/// (`[a-z0-9]+`); the template writes the lines.
fn hp_misdirected(zones: &SniZones) -> Option<HpMisdirected> {
    if !zones.splits() {
        return None;
    }
    let mut order = zones.lookup_order();
    order.reverse();
    let zones_in_order = order
        .into_iter()
        .map(|(zone, h)| match h.wildcard_suffix() {
            Some(suffix) => HpZone {
                zone,
                op: "end",
                value: suffix.to_string(),
            },
            None => HpZone {
                zone,
                op: "str",
                value: h.to_string(),
            },
        })
        .collect();
    Some(HpMisdirected {
        default: zones.default_zone().to_string(),
        zones: zones_in_order,
    })
}

/// A virtual host whose rules match on more than the path has a frontend of its own,
/// reached from the listener's through `backend` (one server: the unix socket `socket`
/// in the hop directory, `mode 600`, [`super::hop_socket`], with the PROXY protocol so
/// the client's address stays the source): its rules are ACL lines tried in order,
/// which HAProxy cannot skip within one frontend, so
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
    /// Written with `if { var(txn.k8slb_a) -m str <id> }`.
    request_lines: Vec<HpLine>,
    /// Written with `if { var(txn.k8slb_r) -m str <id> }`.
    response_lines: Vec<HpLine>,
    /// The rule's CORS filter ([`hp_cors`]): its lines follow the request and the
    /// response lines.
    cors: Option<HpCors>,
}

/// A rule's CORS filter, as the template writes it ([`hp_cors`]).
#[derive(Serialize)]
struct HpCors {
    /// Any `Origin` is allowed.
    any_origin: bool,
    /// Else the allowed origins' regexes (lowercase match).
    origins: Vec<String>,
    /// The preflight answer's headers, in order.
    preflight: Vec<HpHeader>,
    credentials: bool,
    /// `Access-Control-Expose-Headers`, if any.
    expose: Option<String>,
}

/// A header of a `return`: `hdr <name> "<value>"`.
#[derive(Serialize)]
struct HpHeader {
    name: &'static str,
    value: String,
}

/// One line of a filter, without its condition (the template writes it after the line,
/// by where the line is). Names are [`FieldName`]s, values [`FieldValue`]s (no `"`,
/// `\\`, `$`, `%`: safe between double quotes in a log-format string), hosts
/// [`Hostname`]s, paths [`HttpPath`]s or [`literal_regex`]es of them.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum HpLine {
    /// `http-<dir> del-header <name>`
    DelHeader { dir: &'static str, name: String },
    /// `http-<dir> <verb> <name> "<value>"` (`set-header`, `add-header`).
    Header {
        dir: &'static str,
        verb: &'static str,
        name: String,
        value: String,
    },
    /// `http-request set-header host <host>`
    Host { host: String },
    /// `http-request set-path <path>`
    SetPath { path: String },
    /// `http-request replace-path <regex> <to>`
    ReplacePath { regex: String, to: String },
    /// `http-request set-var(txn.k8slb_to) int(<ms>)`: the wait for the backend's
    /// answer, which the backend applies.
    Timeout { ms: u64 },
    /// `http-request set-var(txn.k8slb_rt) str(<key>)`: the retrying copy of the
    /// backend drawn (the frontend's `use_backend` adds it).
    Retry { key: String },
    /// `http-request lua.k8slb_mirror <backend> <share>`: a copy of the request to
    /// route backend `backend` (a generated name), for `share` hundredths of a percent
    /// of the requests (10,000: all) ([`MIRROR_LUA`]).
    Mirror { backend: String, share: u16 },
}

/// The Lua action that sends RequestMirror copies (HAProxy has no mirroring of its
/// own): a file next to haproxy.cfg, loaded (`lua-load`) only while some rule mirrors,
/// with the socket of the frontend it sends them to in place of [`MIRROR_SOCKET`]
/// ([`mirror_lua`]).
pub(crate) const MIRROR_LUA: &str = include_str!("mirror.lua");

/// The placeholder of [`MIRROR_LUA`] that [`mirror_lua`] replaces, in a Lua string.
const MIRROR_SOCKET: &str = "\"@K8SLB_MIRROR_SOCKET@\"";

/// [`MIRROR_LUA`] sending to `socket` ([`super::hop_socket`]: `unix@` and a path of
/// `[A-Za-z0-9/._-]` only, nothing a Lua string would take as an escape or its end).
pub(crate) fn mirror_lua(socket: &str) -> String {
    debug_assert_eq!(MIRROR_LUA.matches(MIRROR_SOCKET).count(), 1);
    MIRROR_LUA.replace(MIRROR_SOCKET, &format!("\"{socket}\""))
}

/// The lines of a rule's mirrors: first of its request lines, so each copy is the request
/// as the client sent it (as nginx's `mirror` copies it).
fn hp_mirror_lines(f: &RuleFilters) -> impl Iterator<Item = HpLine> + '_ {
    let all = f.mirrors.iter().map(|b| (b, 10_000));
    let shares = f
        .partial_mirrors
        .iter()
        .map(|m| (&m.backend, u16::from(m.share)));
    all.chain(shares).map(|(b, share)| HpLine::Mirror {
        backend: crate::view::route_backend_name(b),
        share,
    })
}

/// A regex that matches `path` literally: its only regex-special characters (`.`, `*`,
/// `+`; an [`HttpPath`] has no others) as one-character classes.
pub(crate) fn literal_regex(path: &str) -> String {
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
/// host, path, timeout, retry) and response lines.
fn hp_filter_lines(f: &RuleFilters) -> (Vec<HpLine>, Vec<HpLine>) {
    let edits = hp_edit_lines;
    let mut req: Vec<HpLine> = hp_mirror_lines(f).collect();
    req.extend(edits("request", &f.request_headers));
    if let Some(h) = &f.rewrite_host {
        req.push(HpLine::Host {
            host: h.to_string(),
        });
    }
    if let Some(r) = &f.rewrite_path {
        req.extend(hp_path_lines(r));
    }
    // The wait for the backend's answer (ms; when it runs out HAProxy answers 504): the
    // backend sets it (`set-timeout` needs a backend's capability in HAProxy 2.6).
    if let Some(t) = f.timeout {
        req.push(HpLine::Timeout { ms: t.millis() });
    }
    // The retrying copy of the backend drawn (the frontend's `use_backend` adds it).
    if let Some(r) = &f.retry {
        req.push(HpLine::Retry { key: r.key() });
    }
    (req, edits("response", &f.response_headers))
}

/// A rule's CORS filter (the forward with filters `id`), which the template writes: a
/// request of the rule whose `Origin` is allowed sets `txn.k8slb_cors` (and keeps the
/// origin in `txn.k8slb_origin`); a preflight of such a request (an `OPTIONS` with
/// `Access-Control-Request-Method`) is answered `204` there with the preflight headers;
/// the answers to the others get `Access-Control-Allow-Origin` (the origin itself), the
/// credentials and exposed headers, and `Vary: Origin`. Origins are validated patterns
/// ([`k8slb_common::routes::CorsOrigin::regex`]), methods and header names validated
/// tokens; what a client sent is only echoed at run time (`%[...]`), never written into
/// the config.
fn hp_cors(c: &k8slb_common::routes::Cors) -> HpCors {
    let header = |name, value: String| HpHeader { name, value };
    let mut pre = vec![
        header(
            "access-control-allow-origin",
            "%[var(txn.k8slb_origin)]".into(),
        ),
        header(
            "access-control-allow-methods",
            c.methods_value()
                .unwrap_or_else(|| "%[req.fhdr(access-control-request-method)]".into()),
        ),
    ];
    if c.any_header {
        pre.push(header(
            "access-control-allow-headers",
            "%[req.fhdr(access-control-request-headers)]".into(),
        ));
    } else if let Some(h) = c.headers_value() {
        pre.push(header("access-control-allow-headers", h));
    }
    if let Some(e) = c.expose_value() {
        pre.push(header("access-control-expose-headers", e));
    }
    pre.push(header("access-control-max-age", c.max_age.to_string()));
    if c.credentials {
        pre.push(header("access-control-allow-credentials", "true".into()));
    }
    pre.push(header("vary", "Origin".into()));
    HpCors {
        any_origin: c.any_origin,
        origins: c.origins.iter().map(|o| o.regex()).collect(),
        preflight: pre,
        credentials: c.credentials,
        expose: c.expose_value(),
    }
}

/// HAProxy's lines (without their condition) for header edits `e` in direction `dir`
/// (`request` or `response`): remove, set, add.
fn hp_edit_lines(dir: &'static str, e: &k8slb_common::routes::HeaderEdits) -> Vec<HpLine> {
    let mut out = Vec::new();
    for n in &e.remove {
        out.push(HpLine::DelHeader {
            dir,
            name: n.to_string(),
        });
    }
    for (verb, list) in [("set-header", &e.set), ("add-header", &e.add)] {
        for h in list {
            out.push(HpLine::Header {
                dir,
                verb,
                name: h.name.to_string(),
                value: h.value.to_string(),
            });
        }
    }
    out
}

/// HAProxy's lines (without their condition) that rewrite the request's path as `r`
/// says; the query string stays.
fn hp_path_lines(r: &PathRewrite) -> Vec<HpLine> {
    match r {
        PathRewrite::Full { path } => vec![HpLine::SetPath {
            path: path.to_string(),
        }],
        PathRewrite::Prefix { from, to } => {
            let from = literal_regex(from.as_str().trim_end_matches('/'));
            let to = to.as_str().trim_end_matches('/');
            let replace = |regex: String, to: String| HpLine::ReplacePath { regex, to };
            if to.is_empty() {
                vec![
                    replace(format!("^{from}$"), "/".into()),
                    replace(format!("^{from}(/.*)$"), "\\1".into()),
                ]
            } else {
                vec![replace(format!("^{from}(/.*)?$"), format!("{to}\\1"))]
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
    list: Vec<HpAcl>,
}

impl HpAcls {
    /// The name of the ACL `expr` (declared once).
    fn name(&mut self, expr: String) -> String {
        if let Some(n) = self.by_expr.get(&expr) {
            return n.clone();
        }
        let n = format!("k8slb_c{}", self.list.len());
        self.list.push(HpAcl {
            name: n.clone(),
            expr: expr.clone(),
        });
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
pub(crate) struct HpTls {
    default_crt: Option<String>,
    crt_list: Option<String>,
    /// Clients must present a certificate chaining to this CA file (`verify required`).
    ca_file: Option<String>,
    /// `AllowInsecureFallback`: `verify optional ca-ignore-err all crt-ignore-err all`
    /// (options of the bind, which is one address and port: the translation never puts
    /// listeners of two validations on one), every client let in, and the outcome told
    /// to the backend in the client certificate headers (haproxy-routes.cfg.tera).
    fallback: bool,
}

#[derive(Serialize, Default)]
struct HpAction {
    id: String,
    /// split | redirect | respond
    kind: &'static str,
    split: Vec<HpSplit>,
    location: String,
    /// redirect: the lines that rewrite the path first (the Location takes the
    /// rewritten path and the query); written with `if { var(txn.k8slb_a) -m str <id> }`.
    pre_lines: Vec<HpLine>,
    status: u16,
}

#[derive(Serialize)]
struct HpSplit {
    backend: String,
    /// Its backendRef's request header edits, written with the condition that it was
    /// drawn (rendered before the draw is taken).
    lines: Vec<HpLine>,
    /// Its key in the splits map: the cumulative share (of [`SPLIT_SCALE`]) below
    /// which a request goes to `backend`.
    key: String,
}

/// The Location of a redirect from a listener of scheme `listener` on `port` (the
/// Gateway API's rules: [`Redirect::location_port`]), and the lines that rewrite the path
/// before it (without their condition).
fn hp_redirect(
    rd: &Redirect,
    (listener, port): (Scheme, u16),
    notes: &mut Vec<String>,
    what: &str,
) -> (String, Vec<HpLine>) {
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
    fn new(l: &Listener) -> Self {
        Actions {
            ids: HashMap::new(),
            list: Vec::new(),
            filtered: Vec::new(),
            listener: (listener_scheme(l), l.port),
        }
    }

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
        let (request_lines, response_lines) = hp_filter_lines(filters);
        self.filtered.push(HpFiltered {
            id: id.clone(),
            inner,
            request_lines,
            response_lines,
            cors: filters.cors.as_ref().map(hp_cors),
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
                    return weighted_backend_name(one);
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
                            backend: weighted_backend_name(b),
                            lines: hp_edit_lines("request", &b.request_headers),
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
                let (location, pre_lines) = hp_redirect(rd, self.listener, notes, what);
                HpAction {
                    kind: "redirect",
                    location,
                    pre_lines,
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

/// How a TLS listener's certificates reach its bind: the default alone (`crt`), or a
/// crt-list.
enum CrtList {
    Default(String),
    List(String),
}

/// The most SNI filters on one crt-list line: HAProxy 2.6 reads at most 2,048 words
/// per line (the file's name and its options included; `too many args` beyond, and the
/// whole config is refused). A certificate naming more hosts is listed on several lines.
const MAX_FILTERS_PER_LINE: usize = 1000;
/// The most bytes of SNI filters on one crt-list line: HAProxy 2.6 reads a line into a
/// 64 KiB buffer and refuses the config beyond it (a file's path is at most 4 KiB).
const MAX_FILTER_BYTES_PER_LINE: usize = 32 * 1024;
/// A filter no client's server name is (`.invalid` is reserved, RFC 2606).
const NO_NAME_FILTER: &str = "k8slb-no-name.invalid";

/// `filters` (each written ` <filter>`) cut into runs that one crt-list line holds:
/// at most [`MAX_FILTERS_PER_LINE`] of them and [`MAX_FILTER_BYTES_PER_LINE`] bytes.
fn filter_runs<'a>(filters: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut runs = Vec::new();
    let (mut run, mut n) = (String::new(), 0usize);
    for f in filters {
        if n == MAX_FILTERS_PER_LINE || run.len() + 1 + f.len() > MAX_FILTER_BYTES_PER_LINE {
            runs.push(std::mem::take(&mut run));
            n = 0;
        }
        run.push(' ');
        run.push_str(f);
        n += 1;
    }
    if n > 0 {
        runs.push(run);
    }
    runs
}

/// The crt-list of a TLS listener. HAProxy indexes a certificate loaded without an SNI
/// filter (the bind's `crt`, a crt-list line without one) by its own names, and that
/// index takes a server name that another listener of the port (another tenant's)
/// names explicitly: an exact name in a certificate beats a wildcard filter, and the
/// first loaded of two exact ones wins. So the port's default certificate is the
/// list's first line (HAProxy's default: the first loaded), and it and every line
/// without hosts (a listener without a hostname) exclude every hostname the other
/// lines name (`!<host>`); when they do not fit one line ([`filter_runs`]) such lines
/// are filtered by a name no client sends instead (served as the default only). A
/// certificate naming more hosts than a line holds is listed once per run of them.
fn hp_crt_list(t: &ListenerTls, o: &HttpRenderOptions) -> Result<CrtList, RenderError> {
    let default = match &t.default_certificate {
        Some(f) => Some(format!("{}.pem", cert_path(f, o)?)),
        None => None,
    };
    if t.certificates.is_empty() {
        return Ok(match default {
            Some(d) => CrtList::Default(d),
            None => CrtList::List(String::new()),
        });
    }
    let named: BTreeSet<String> = t
        .certificates
        .iter()
        .flat_map(|c| c.hosts.iter().map(|h| format!("!{}", h.as_str())))
        .collect();
    let negatives = match filter_runs(named.iter().map(String::as_str)).as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        _ => format!(" {NO_NAME_FILTER}"),
    };
    let mut text = String::new();
    if let Some(d) = default {
        text.push_str(&d);
        text.push_str(&negatives);
        text.push('\n');
    }
    for c in &t.certificates {
        let file = format!("{}.pem", cert_path(&c.file, o)?);
        if c.hosts.is_empty() {
            text.push_str(&file);
            text.push_str(&negatives);
            text.push('\n');
        }
        for run in filter_runs(c.hosts.iter().map(|h| h.as_str())) {
            text.push_str(&file);
            text.push_str(&run);
            text.push('\n');
        }
    }
    Ok(CrtList::List(text))
}

/// The frontends of listener `l`: its own, then one per virtual host whose rules match
/// on more than the path ([`HpHop`]); none when it cannot be rendered.
pub(crate) fn hp_frontend(
    l: &Listener,
    o: &HttpRenderOptions,
    files: &mut BTreeMap<String, String>,
    notes: &mut Vec<String>,
) -> Result<Vec<HpFrontend>, RenderError> {
    let name = http_frontend_name(l);
    let dir = files_dir(o)?;
    let file = |ext: &str| format!("{dir}/{name}.{ext}");
    if let Some(why) = hp_unrenderable(l) {
        notes.push(format!("{name}: {why}; not rendered"));
        return Ok(Vec::new());
    }
    let tls = match &l.tls {
        Some(t) if matches!(l.protocol, ListenerProtocol::Https) => {
            Some(hp_tls(t, o, &dir, file("crt-list"), files)?)
        }
        _ => None,
    };
    let mut actions = Actions::new(l);
    let mut maps = HostMaps::default();
    let mut hops: Vec<HpFrontend> = Vec::new();
    let default_action = l.default_action.clone().unwrap_or(RouteAction::Respond {
        status: k8slb_common::routes::FixedStatus::NotFound404,
    });
    for (i, v) in l.virtual_hosts.iter().enumerate() {
        let id = format!("v{}", i + 1);
        maps.add_host(v, &id);
        if v.rules.iter().any(|r| r.matches.is_conditional()) {
            // Matches beyond the path: every rule of this host is an ACL line, tried in
            // precedence order (a map key holds one action), in a frontend of its own.
            let backend = format!("rtv_{}_{}_{id}", ip_slug(l.ip), l.port);
            maps.cond.push_str(&format!("{id} {backend}\n"));
            let hop = HpHop {
                socket: super::hop_socket(o, &backend)?,
                backend,
            };
            hops.push(hp_hop(l, v, i, hop, &default_action, notes, &name));
            continue;
        }
        maps.add_paths(v, i, &id, &mut actions, notes, &name);
    }
    let default = actions.value(&default_action, "d", notes, &name);
    let splits_map = SplitsMap::of_listener(l, o)?.write(files);
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
        cond_map: map("cond.map", maps.cond),
        hosts_map: map("hosts.map", maps.hosts),
        wildcards_map: map("wildcards.map", maps.wildcards),
        suffixes_map: map("suffixes.map", longest_first(maps.suffixes)),
        exact_map: map("exact.map", maps.exact),
        prefix_map: map("prefix.map", longest_first(maps.prefixes)),
        any_vh: maps.any_vh,
        splits_map,
        cond_rules: Vec::new(),
        acls: Vec::new(),
        query_names: BTreeSet::new(),
        default,
        actions: actions.list,
        filtered: actions.filtered,
        misdirected: l
            .tls
            .as_ref()
            .and_then(|t| t.zones.as_ref())
            .and_then(hp_misdirected),
        name,
    }];
    out.extend(hops);
    Ok(out)
}

/// Why listener `l` cannot be rendered, if it cannot: an HTTPS listener without TLS
/// settings or without any certificate.
fn hp_unrenderable(l: &Listener) -> Option<&'static str> {
    match (l.protocol, &l.tls) {
        (ListenerProtocol::Http, _) => None,
        (ListenerProtocol::Https, None) => Some("HTTPS without TLS settings"),
        (ListenerProtocol::Https, Some(t))
            if t.certificates.is_empty() && t.default_certificate.is_none() =>
        {
            Some("HTTPS without any certificate")
        }
        (ListenerProtocol::Https, Some(_)) => None,
    }
}

/// The bind's TLS settings of an HTTPS listener's `t`: its one certificate, or its
/// crt-list written to `crt_list` in `files`; the client CA bundle in `dir`.
pub(crate) fn hp_tls(
    t: &ListenerTls,
    o: &HttpRenderOptions,
    dir: &str,
    crt_list: String,
    files: &mut BTreeMap<String, String>,
) -> Result<HpTls, RenderError> {
    let (default_crt, crt_list) = match hp_crt_list(t, o)? {
        CrtList::Default(d) => (Some(d), None),
        CrtList::List(text) => {
            files.insert(crt_list.clone(), text);
            (None, Some(crt_list))
        }
    };
    Ok(HpTls {
        default_crt,
        crt_list,
        ca_file: t.client_ca.as_ref().map(|c| crate::view::ca_file(dir, c)),
        fallback: t.client_ca.is_some() && t.client_validation.is_fallback(),
    })
}

/// The map files' contents of a listener's frontend, filled host by host.
#[derive(Default)]
struct HostMaps {
    /// `<host> <id>` lines.
    hosts: String,
    /// `<suffix> <id>` lines of one-label wildcards.
    wildcards: String,
    /// Any-depth wildcards (Gateway API): `(suffix, id)`.
    suffixes: Vec<(String, String)>,
    /// The id of the any-host virtual host.
    any_vh: Option<String>,
    /// `<id><path> <value>` lines.
    exact: String,
    /// `(<id><path>/, value)`.
    prefixes: Vec<(String, String)>,
    /// `<id> <hop backend>` lines ([`HpHop`]).
    cond: String,
}

impl HostMaps {
    /// Virtual host `v`, of id `id`, in the host maps.
    fn add_host(&mut self, v: &VirtualHost, id: &str) {
        let Some(h) = &v.host else {
            self.any_vh = Some(id.to_string());
            return;
        };
        match h.wildcard_suffix() {
            Some(suffix) if v.any_depth => self.suffixes.push((suffix.to_string(), id.to_string())),
            _ => {
                let (map, key) = match h.wildcard_suffix() {
                    Some(suffix) => (&mut self.wildcards, suffix),
                    None => (&mut self.hosts, h.as_str()),
                };
                map.push_str(key);
                map.push(' ');
                map.push_str(id);
                map.push('\n');
            }
        }
    }

    /// The path rules of virtual host `v` (the `i`th, of id `id`) in the path maps, each
    /// path's first rule only.
    fn add_paths(
        &mut self,
        v: &VirtualHost,
        i: usize,
        id: &str,
        actions: &mut Actions,
        notes: &mut Vec<String>,
        what: &str,
    ) {
        let mut seen_exact: BTreeSet<&str> = BTreeSet::new();
        let mut seen_prefix: BTreeSet<&str> = BTreeSet::new();
        for (j, r) in v.rules.iter().enumerate() {
            let pos = rule_pos(i + 1, j);
            let value = actions.value_with(&r.action, &pos, &r.forward_filters(), notes, what);
            match &r.matches.path {
                PathMatch::Exact(p) => {
                    if seen_exact.insert(p.as_str()) {
                        self.exact.push_str(&format!("{id}{p} {value}\n"));
                    }
                }
                PathMatch::Prefix(p) => {
                    if seen_prefix.insert(p.as_str()) {
                        let key = if p.as_str() == "/" {
                            format!("{id}/")
                        } else {
                            format!("{id}{p}/")
                        };
                        self.prefixes.push((key, value));
                    }
                }
            }
        }
    }
}

/// `<key> <value>` lines, the longest key first: the first match is the longest (the
/// most specific suffix, the longest prefix), whether HAProxy scans the list or looks
/// the key up in a tree.
fn longest_first(mut entries: Vec<(String, String)>) -> String {
    entries.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    entries.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
}

/// The frontend `<what>_v<i+1>` of virtual host `v` (the `i`th of listener `l`, whose
/// frontend is `what`), whose rules match on more than the path: bound on `hop`'s
/// socket, reached through its backend ([`HpHop`]), one ACL line per rule in precedence
/// order, then `default_action`.
fn hp_hop(
    l: &Listener,
    v: &VirtualHost,
    i: usize,
    hop: HpHop,
    default_action: &RouteAction,
    notes: &mut Vec<String>,
    what: &str,
) -> HpFrontend {
    let mut actions = Actions::new(l);
    let mut acls = HpAcls::default();
    let mut query_names = BTreeSet::new();
    let mut cond_rules = Vec::new();
    for (j, r) in v.rules.iter().enumerate() {
        let pos = rule_pos(i + 1, j);
        let value = actions.value_with(&r.action, &pos, &r.forward_filters(), notes, what);
        query_names.extend(r.matches.query.iter().map(|q| q.name.to_string()));
        for acl in hp_cond_acls(None, &r.matches, &mut acls) {
            cond_rules.push(HpCond {
                value: value.clone(),
                acl,
            });
        }
    }
    let default = actions.value(default_action, "d", notes, what);
    HpFrontend {
        name: format!("{what}_v{}", i + 1),
        bind: hop.socket.clone(),
        tls: None,
        hop: Some(hop),
        cond_map: None,
        hosts_map: None,
        wildcards_map: None,
        suffixes_map: None,
        splits_map: None,
        exact_map: None,
        prefix_map: None,
        any_vh: None,
        cond_rules,
        acls: acls.list,
        query_names,
        default,
        actions: actions.list,
        filtered: actions.filtered,
        // Checked in the listener's frontend, before the hop.
        misdirected: None,
    }
}

#[cfg(test)]
mod crt_list_tests {
    use super::*;
    use k8slb_common::routes::{CertFile, Certificate};

    fn cert(name: &str, hosts: &[String]) -> Certificate {
        Certificate {
            file: CertFile::Pool {
                pool: name.parse().unwrap(),
            },
            hosts: hosts.iter().map(|h| h.parse().unwrap()).collect(),
            owner: None,
        }
    }

    fn tls(certificates: Vec<Certificate>, default: Option<&str>) -> ListenerTls {
        ListenerTls {
            certificates,
            default_certificate: default.map(|d| CertFile::Pool {
                pool: d.parse().unwrap(),
            }),
            client_ca: None,
            client_validation: Default::default(),
            zones: None,
        }
    }

    fn list(t: &ListenerTls) -> String {
        match hp_crt_list(t, &HttpRenderOptions::default()).unwrap() {
            CrtList::List(text) => text,
            CrtList::Default(d) => panic!("a crt-list, not the default {d}"),
        }
    }

    #[test]
    fn the_default_and_hostless_lines_exclude_every_named_hostname() {
        let t = tls(
            vec![
                cert("any", &[]),
                cert("bank", &["bank.example".into()]),
                cert("shop", &["*.shop.example".into()]),
            ],
            Some("any"),
        );
        let text = list(&t);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        for l in [lines[0], lines[1]] {
            assert!(
                l.ends_with("any.pem !*.shop.example !bank.example"),
                "{text}"
            );
        }
        assert!(lines[2].ends_with("bank.pem bank.example"), "{text}");
        assert!(lines[3].ends_with("shop.pem *.shop.example"), "{text}");
        // A default alone is the bind's `crt`: no other name to protect.
        let alone = hp_crt_list(&tls(vec![], Some("any")), &HttpRenderOptions::default());
        assert!(matches!(alone, Ok(CrtList::Default(d)) if d.ends_with("any.pem")));
    }

    #[test]
    fn too_many_hostnames_filter_the_default_by_a_name_no_client_sends() {
        // 5,000 hostnames of 60 characters: far beyond one line's 64 KiB; 1,500 short
        // ones: 13 KiB of `!name`, but more words than a line may hold.
        let long: Vec<String> = (0..5000)
            .map(|i| format!("{}-{i:05}.example", "h".repeat(46)))
            .collect();
        let short: Vec<String> = (0..1500).map(|i| format!("h{i}.io")).collect();
        for hosts in [long, short] {
            let t = tls(vec![cert("any", &[]), cert("many", &hosts)], Some("any"));
            let text = list(&t);
            let lines: Vec<&str> = text.lines().collect();
            for l in &lines[..2] {
                assert!(l.ends_with(&format!("any.pem {NO_NAME_FILTER}")), "{l}");
                assert!(l.len() < 1024);
            }
            assert!(!text.contains(" !"), "no negative filter at all");
            within_limits_and_hosts(&text);
        }
    }

    /// Every line of `text` within HAProxy 2.6's crt-list limits: under 2,048 words and
    /// 64 KiB; the hosts each certificate is listed for, in order.
    fn within_limits_and_hosts(text: &str) -> BTreeMap<String, Vec<String>> {
        let mut hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for l in text.lines() {
            let words: Vec<&str> = l.split(' ').collect();
            assert!(words.len() < 2048, "a line of {} words", words.len());
            assert!(l.len() < 64 * 1024, "a line of {} bytes", l.len());
            let file = words[0].rsplit('/').next().unwrap().to_string();
            hosts
                .entry(file)
                .or_default()
                .extend(words[1..].iter().map(|w| w.to_string()));
        }
        hosts
    }

    #[test]
    fn a_certificate_naming_more_hosts_than_a_line_holds_is_listed_once_per_run() {
        // Short names: 2,500 of them fit 32 KiB but not HAProxy's 2,048 words a line.
        let short: Vec<String> = (0..2500).map(|i| format!("h{i}.io")).collect();
        // Long names: 1,000 of 253 characters (the longest DNS name) are 250 KiB.
        let label = "l".repeat(60);
        let long: Vec<String> = (0..1000)
            .map(|i| format!("{label}.{label}.{label}.l{i:04}-{}.example", "l".repeat(56)))
            .collect();
        assert_eq!(long[0].len(), 253);
        for hosts in [short, long] {
            let t = tls(vec![cert("many", &hosts)], None);
            let text = list(&t);
            assert!(
                text.lines().count() > 1,
                "one line for {} hosts",
                hosts.len()
            );
            let listed = within_limits_and_hosts(&text);
            assert_eq!(listed.len(), 1, "{:?}", listed.keys());
            assert_eq!(listed["many.pem"], hosts, "every host, in order, once");
        }
    }

    #[test]
    fn the_default_excludes_each_named_host_while_they_fit_one_line() {
        let hosts: Vec<String> = (0..900).map(|i| format!("h{i}.io")).collect();
        let t = tls(vec![cert("any", &[]), cert("many", &hosts)], Some("any"));
        let text = list(&t);
        assert_eq!(text.lines().next().unwrap().matches(" !").count(), 900);
        within_limits_and_hosts(&text);
    }
}
