//! The L7 route model: what an HTTP(S) proxy on a VIP must do, independent of where it
//! came from (an Ingress, or a Gateway API HTTPRoute, TLSRoute, TCPRoute or UDPRoute) and
//! of who serves it (HAProxy, nginx). Sources translate into it ([`crate::ingress`],
//! [`crate::gateway`]); the actor renders it.
//!
//! ```text
//! HttpRoutes
//!  ├─ listeners: (ip, port) → HTTP | HTTPS (TLS: certificates chosen by SNI + a default)
//!  │    └─ virtual hosts, in precedence order: exact hosts, then `*.` wildcards, then any
//!  │         └─ rules, in precedence order: matches → action
//!  │              (forward to weighted backends | redirect | fixed status)
//!  │    └─ default action (no virtual host, or no rule of the matched host, matched)
//!  ├─ backends: BackendId (`<namespace>/<service>:<port>`) → endpoints, stickiness
//!  ├─ streams: (ip, port) → TCP | UDP | TLS passthrough (L4: Gateway API TCP, UDP and
//!  │    TLS listeners) → routes (TLS: by SNI, in precedence order) → weighted backends
//!  └─ udp_backends: the backends of UDP streams (a Service's UDP port), as `backends`
//! ```
//!
//! Decisions:
//! - **Backends are a separate table.** Rules name a [`BackendId`]; the endpoints live in
//!   [`HttpRoutes::backends`]. Endpoint churn changes only that table, which a provider
//!   applies without a reload (HAProxy Runtime API); anything in `listeners` is structural.
//! - **Order is part of the model.** Virtual hosts and rules are stored in the order they
//!   are tried; the first match wins ([`HttpRoutes::route`] is the reference). Sources
//!   sort them by their API's precedence ([`VirtualHost::sort_rules`] implements the
//!   Ingress one); providers render them in that order.
//! - **A host that matches but whose rules do not** gets the listener's default action,
//!   never the rules of a less specific host (what ingress-nginx does, and what the Ingress
//!   API's "default backend" means). A Gateway API source that wants fall-through copies
//!   the less specific rules into the more specific host.
//! - **No key material.** A certificate is a [`CertFile`]: which node-side file holds it.
//! - **Every string is a validated newtype** ([`Hostname`], [`HttpPath`], [`HeaderName`],
//!   [`CookieName`], [`SecretName`]), parsed once at the boundary and trusted afterwards:
//!   none of them can hold whitespace, quotes, braces, `;`, `#`, `$`, `\` or control
//!   characters, so a template may paste them into haproxy.cfg or nginx.conf.
//! - **Deterministic.** Maps are `BTreeMap`s, lists are sorted or in precedence order:
//!   the same input serialises byte-identically.
//!
//! Room for Gateway API: [`RouteMatch`] is a struct so that header, query-parameter and
//! method matches are added as fields (`#[serde(default, skip_serializing_if = ..)]`, an
//! additive schema change); [`RouteAction::Forward`] already carries weights; redirects
//! carry scheme, host, port, path and status. URL rewrite and header modifiers are
//! [`RouteRule::filters`], not new actions.

pub use crate::app_protocol::BackendProtocol;
use crate::endpoints::Endpoint;
use crate::names::{err, string_newtype, NameError, ObjectName, PoolName, ServiceKey};
use crate::problem::ObjRef;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_label)
}

string_newtype!(
    /// A host name as the Ingress API and Gateway API accept it: an RFC 1123 subdomain in
    /// lowercase, or `*.` followed by one (a wildcard, which matches exactly one more
    /// label: `*.example.com` matches `a.example.com`, not `example.com` nor
    /// `a.b.example.com`). IPv4 addresses are refused (the Ingress API refuses them too).
    Hostname,
    "host",
    |s| {
        let rest = s.strip_prefix("*.").unwrap_or(s);
        is_subdomain(rest)
            && s.len() <= 253
            && rest.parse::<std::net::Ipv4Addr>().is_err()
    },
    "must be a lowercase RFC 1123 host name (letters, digits, '-', '.'), optionally starting with '*.'"
);

impl Hostname {
    pub fn is_wildcard(&self) -> bool {
        self.0.starts_with("*.")
    }

    /// For a wildcard, the part after `*` (`.example.com`).
    pub fn wildcard_suffix(&self) -> Option<&str> {
        self.0.strip_prefix('*')
    }

    /// Does this host match the (already lowercased, port-less) request host, a wildcard
    /// matching any number of labels (the Gateway API's suffix match)?
    pub fn matches_any_depth(&self, request_host: &str) -> bool {
        match self.wildcard_suffix() {
            Some(suffix) => request_host
                .strip_suffix(suffix)
                .is_some_and(|labels| !labels.is_empty()),
            None => self.0 == request_host,
        }
    }

    /// Does this host match the (already lowercased, port-less) request host?
    pub fn matches(&self, request_host: &str) -> bool {
        match self.wildcard_suffix() {
            Some(suffix) => request_host
                .strip_suffix(suffix)
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
            None => self.0 == request_host,
        }
    }
}

/// Characters of a path segment we accept: RFC 3986 `pchar` without `%` (percent-encoding:
/// HAProxy matches the raw path, nginx the decoded one, so an encoded path would route
/// differently on the two), without the sub-delims that mean something in a proxy config
/// (`'`, `(`, `)`, `;`, `$`), and `/`.
fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!*+,=:@&/".contains(&b)
}

string_newtype!(
    /// A URL path to match or redirect to: starts with `/`, at most 1024 bytes, only
    /// unreserved characters, `/` and `!*+,=:@&`; no empty, `.` or `..` segment (the
    /// Ingress API refuses `//`, `/./` and `/../` too). Percent-encoding, quotes,
    /// spaces, `;`, `#`, `?`, braces and `$` are refused.
    HttpPath,
    "path",
    |s| {
        if !(s.starts_with('/') && s.len() <= 1024 && s.bytes().all(is_path_byte)) {
            return false;
        }
        let segs: Vec<&str> = s[1..].split('/').collect();
        // A trailing '/' gives one empty last segment, which is fine.
        !segs.iter().enumerate().any(|(i, seg)| {
            (seg.is_empty() && i + 1 < segs.len()) || *seg == "." || *seg == ".."
        })
    },
    "must start with '/' and hold only letters, digits, '/' and -._~!*+,=:@& (no empty, '.' or '..' segments, no percent-encoding)"
);

impl HttpPath {
    /// The root path `/`.
    pub fn root() -> HttpPath {
        HttpPath("/".into())
    }

    /// The path without a trailing `/` (`/` stays `/`): the canonical form of a Prefix.
    pub fn trim_trailing_slash(&self) -> HttpPath {
        let t = self.0.trim_end_matches('/');
        if t.is_empty() {
            HttpPath::root()
        } else {
            HttpPath(t.to_string())
        }
    }
}

/// The RFC 7230 `token` characters we accept: letters, digits and `-_.!*+^~`. The other
/// token characters (`#`, `'`, `$`, `%`, `&`, `|`, `` ` ``) mean something in
/// haproxy.cfg or nginx.conf and are refused.
fn is_token(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.!*+^~".contains(&b))
}

string_newtype!(
    /// An HTTP header name (RFC 7230 token, narrowed, see [`is_token`]), at most 256 bytes.
    HeaderName,
    "header name",
    |s| is_token(s, 256),
    "must be an HTTP token of letters, digits and -_.!*+^~"
);

string_newtype!(
    /// A header name to match on or to set: lowercase letters, digits and `-`, at most
    /// 256 bytes (header names are case-insensitive; this is their canonical form).
    /// Narrower than an RFC 7230 token on purpose: nginx reaches a header through the
    /// variable `$http_<name with - as _>` and by default ignores header names with `_`
    /// or other punctuation, so only these names match alike on HAProxy and nginx.
    FieldName,
    "header name",
    |s| !s.is_empty()
        && s.len() <= 256
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
    "must be lowercase letters, digits and '-'"
);

string_newtype!(
    /// A query parameter name to match on: letters, digits and `_`, at most 256 bytes
    /// (nginx reaches it as the variable `$arg_<name>`, which allows nothing else).
    QueryName,
    "query parameter name",
    |s| !s.is_empty()
        && s.len() <= 256
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
    "must be letters, digits and '_'"
);

/// Bytes of a header or query value that a config may carry between double quotes:
/// printable ASCII without the characters that quote, escape, expand or comment in
/// haproxy.cfg or nginx.conf (`"`, `'`, `\`, `$`, `%`, `#`, `{`, `}`, `;`, `` ` ``).
fn is_value_byte(b: u8) -> bool {
    (0x20..0x7f).contains(&b) && !b"\"'\\$%#{};`".contains(&b)
}

string_newtype!(
    /// A header or query parameter value to match on or to set: 1 to 4096 printable
    /// ASCII characters, spaces inside only, none of `"'\$%#{};` and backtick (see
    /// [`is_value_byte`]). Refused, never escaped, like every value that reaches a config.
    FieldValue,
    "header value",
    |s| !s.is_empty()
        && s.len() <= 4096
        && !s.starts_with(' ')
        && !s.ends_with(' ')
        && s.bytes().all(is_value_byte),
    "must be printable ASCII without quotes, backslash, '$', '%', '#', braces, ';' or backtick, and without leading or trailing spaces"
);

string_newtype!(
    /// A cookie name for cookie stickiness (RFC 6265 token, narrowed), at most 64 bytes.
    CookieName,
    "cookie name",
    |s| is_token(s, 64),
    "must be a cookie token of letters, digits and -_.!*+^~"
);

string_newtype!(
    /// A Secret name (RFC 1123 subdomain, lowercase).
    SecretName,
    "secret name",
    is_subdomain,
    "must be a lowercase RFC 1123 subdomain"
);

/// Where a certificate (chain + key) lives on the LB nodes. Never the key itself.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum CertFile {
    /// The pool's admin-provided file, `<certPath>/<pool>.pem` (and `.key` for nginx).
    Pool { pool: PoolName },
    /// A `kubernetes.io/tls` Secret, written by the actor (from what the watcher
    /// publishes) to `<secret cert dir>/<namespace>_<name>.pem` (and `.key`).
    Secret {
        namespace: ObjectName,
        name: SecretName,
        /// Which content: a digest of the certificate chain (public data, never of the
        /// key), so a renewed certificate is a change of the state, and of the configs
        /// that name it. Empty when unknown.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        version: String,
    },
}

impl CertFile {
    /// The content version of a Secret's certificate (empty for a pool's).
    pub fn version(&self) -> &str {
        match self {
            CertFile::Pool { .. } => "",
            CertFile::Secret { version, .. } => version,
        }
    }

    /// The file stem under its directory: `<pool>` or `<namespace>_<name>` (neither part
    /// can hold `_` nor `/`, so distinct Secrets never share a stem).
    pub fn stem(&self) -> String {
        match self {
            CertFile::Pool { pool } => pool.to_string(),
            CertFile::Secret {
                namespace, name, ..
            } => format!("{namespace}_{name}"),
        }
    }
}

/// Everything one VIP (or several, with the same listeners) serves over HTTP(S).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoutes {
    /// Sorted by (ip, port); one per (ip, port).
    pub listeners: Vec<Listener>,
    /// Every backend a rule or a TCP/TLS stream names (a Service's TCP port).
    pub backends: BTreeMap<BackendId, BackendState>,
    /// L4 listeners, sorted by (ip, port, protocol); one per (ip, port, protocol family:
    /// TCP and TLS on one port exclude each other, UDP is apart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamListener>,
    /// The backends of UDP streams: a Service's UDP port, whose endpoints are not its TCP
    /// port's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub udp_backends: BTreeMap<BackendId, BackendState>,
}

impl HttpRoutes {
    pub fn is_empty(&self) -> bool {
        self.listeners.is_empty()
            && self.backends.is_empty()
            && self.streams.is_empty()
            && self.udp_backends.is_empty()
    }

    /// The reference router for L4: the route a connection to `ip:port` over `protocol`
    /// takes (`server_name`: the TLS ClientHello's SNI, for TLS passthrough).
    pub fn route_stream(
        &self,
        ip: IpAddr,
        port: u16,
        protocol: StreamProtocol,
        server_name: Option<&str>,
    ) -> Option<&StreamRoute> {
        self.streams
            .iter()
            .find(|s| s.ip == ip && s.port == port && s.protocol == protocol)?
            .route_for(server_name)
    }

    /// The reference router: what a request for `host` (any case, with or without
    /// `:port`) and `path` (without the query) to `ip:port` gets. Providers render the
    /// same decisions; the table tests pin them down here.
    pub fn route(&self, ip: IpAddr, port: u16, host: &str, path: &str) -> Option<&RouteAction> {
        self.route_request(ip, port, &Request::get(host, path))
    }

    /// The reference router for a whole request (method, headers, query).
    pub fn route_request(&self, ip: IpAddr, port: u16, req: &Request<'_>) -> Option<&RouteAction> {
        let l = self
            .listeners
            .iter()
            .find(|l| l.ip == ip && l.port == port)?;
        l.route_request(req)
    }

    /// Add another source's routes. Listeners are on distinct (ip, port)s (the allocator
    /// gives each tenant its ports); were one not, the one already here is kept. A
    /// backend both name is one backend (same Service, same port, same endpoints).
    pub fn merge(&mut self, other: HttpRoutes) {
        if other.is_empty() {
            return;
        }
        for l in other.listeners {
            if !self
                .listeners
                .iter()
                .any(|m| m.ip == l.ip && m.port == l.port)
            {
                self.listeners.push(l);
            }
        }
        for (id, b) in other.backends {
            self.backends.entry(id).or_insert(b);
        }
        for s in other.streams {
            if !self.streams.iter().any(|m| m.clashes(&s)) {
                self.streams.push(s);
            }
        }
        for (id, b) in other.udp_backends {
            self.udp_backends.entry(id).or_insert(b);
        }
        self.normalize();
    }

    /// Sort listeners by (ip, port). Sources call it once after building.
    pub fn normalize(&mut self) {
        self.listeners.sort_by_key(|l| (l.ip, l.port));
        self.streams.sort_by_key(|s| (s.ip, s.port, s.protocol));
    }
}

/// An L4 listener's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamProtocol {
    /// Bytes in, bytes out (Gateway API TCPRoute).
    Tcp,
    /// Datagrams (UDPRoute).
    Udp,
    /// TLS passed through untouched, routed by the ClientHello's SNI (TLSRoute on a
    /// `TLS` listener with `tls.mode: Passthrough`).
    Tls,
}

impl StreamProtocol {
    /// The transport it holds a port of.
    pub fn is_udp(self) -> bool {
        self == StreamProtocol::Udp
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StreamProtocol::Tcp => "TCP",
            StreamProtocol::Udp => "UDP",
            StreamProtocol::Tls => "TLS",
        }
    }
}

/// An L4 listener: a port of a VIP that forwards connections (or datagrams) whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamListener {
    pub ip: IpAddr,
    pub port: u16,
    pub protocol: StreamProtocol,
    /// TCP and UDP: at most one route, without a host. TLS: in precedence order (exact
    /// server names, then wildcards, longest suffix first, then the one any-name route);
    /// a ClientHello that no route takes (or that is not TLS) is closed.
    pub routes: Vec<StreamRoute>,
}

impl StreamListener {
    /// Two listeners that cannot share one address: the same port on the same transport.
    pub fn clashes(&self, other: &StreamListener) -> bool {
        self.ip == other.ip
            && self.port == other.port
            && self.protocol.is_udp() == other.protocol.is_udp()
    }

    /// See [`HttpRoutes::route_stream`].
    pub fn route_for(&self, server_name: Option<&str>) -> Option<&StreamRoute> {
        if self.protocol != StreamProtocol::Tls {
            return self.routes.first();
        }
        let sn = server_name.map(str::to_ascii_lowercase);
        self.routes.iter().find(|r| match (&r.host, &sn) {
            (None, _) => true,
            (Some(h), Some(sn)) => {
                if h.is_wildcard() {
                    h.matches_any_depth(sn)
                } else {
                    h.as_str() == sn
                }
            }
            (Some(_), None) => false,
        })
    }

    /// Sort the routes by precedence (see [`StreamListener::routes`]).
    pub fn sort_routes(&mut self) {
        self.routes.sort_by(|a, b| {
            let rank = |r: &StreamRoute| match &r.host {
                Some(h) if !h.is_wildcard() => (0, 0),
                Some(h) => (1, usize::MAX - h.as_str().len()),
                None => (2, 0),
            };
            rank(a).cmp(&rank(b)).then_with(|| {
                a.host
                    .as_ref()
                    .map(Hostname::as_str)
                    .cmp(&b.host.as_ref().map(Hostname::as_str))
            })
        });
    }
}

/// Where an L4 listener sends what it takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRoute {
    /// TLS only: the server name (SNI) it takes; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Hostname>,
    /// Weighted backends (in [`HttpRoutes::backends`], or [`HttpRoutes::udp_backends`]
    /// for UDP). Empty: every backend is invalid or has weight 0, the connection is
    /// closed (the L4 analogue of the HTTPRoute's 500).
    pub backends: Vec<WeightedBackend>,
    /// The summed weight of the route's invalid backend references: that share of the
    /// connections is closed; the others reach theirs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub invalid: u16,
    /// The object that produced it (an Ingress, HTTPRoute, TLSRoute, TCPRoute, UDPRoute
    /// or Gateway): what the actor's quarantine removes when the proxy refuses a config
    /// because of it. Absent in states of older watchers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<ObjRef>,
}

impl StreamRoute {
    /// Drawn at random among two or more targets (backends, or one backend and the
    /// invalid share).
    pub fn is_split(&self) -> bool {
        is_split(&self.backends, self.invalid)
    }
}

/// Weighted backends and an invalid share are drawn at random among two or more targets.
fn is_split(backends: &[WeightedBackend], invalid: u16) -> bool {
    backends.len() >= 2 || (invalid > 0 && !backends.is_empty())
}

/// Blank what of a forward's weights is not structure (a provider that draws a split
/// from a map sets them at run time): a split's weights and its invalid share go to 0; a
/// single backend keeps whether its weight, and the invalid share, are 0 (which decide
/// between a direct forward, a split and a refusal).
pub fn blank_weights(backends: &mut [WeightedBackend], invalid: &mut u16) {
    let split = is_split(backends, *invalid);
    for b in backends.iter_mut() {
        b.weight = if split { 0 } else { b.weight.min(1) };
    }
    *invalid = if backends.len() >= 2 {
        0
    } else {
        (*invalid).min(1)
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListenerProtocol {
    Http,
    /// TLS terminated here; `tls` is set.
    Https,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    pub ip: IpAddr,
    pub port: u16,
    pub protocol: ListenerProtocol,
    /// Set iff `protocol` is HTTPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ListenerTls>,
    /// In precedence order: exact hosts, then wildcards, then the one any-host entry
    /// (see [`VirtualHost::precedence`]).
    pub virtual_hosts: Vec<VirtualHost>,
    /// What a request gets when no virtual host, or no rule of its virtual host,
    /// matches. `None`: 404.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_action: Option<RouteAction>,
    /// The object whose default backend `default_action` is (see [`RouteRule::owner`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_owner: Option<ObjRef>,
}

impl Listener {
    /// See [`HttpRoutes::route`].
    pub fn route(&self, host: &str, path: &str) -> Option<&RouteAction> {
        self.route_request(&Request::get(host, path))
    }

    /// See [`HttpRoutes::route_request`].
    pub fn route_request(&self, req: &Request<'_>) -> Option<&RouteAction> {
        match self.rule_for(req) {
            Some(r) => Some(&r.action),
            None => self.default_action.as_ref(),
        }
    }

    /// The rule a request gets (`None`: the listener's default action).
    pub fn rule_for(&self, req: &Request<'_>) -> Option<&RouteRule> {
        let host = host_without_port(req.host).to_ascii_lowercase();
        let vh = self.virtual_hosts.iter().find(|v| v.takes(&host))?;
        vh.rules.iter().find(|r| r.matches.matches_request(req))
    }

    /// Sort the virtual hosts by precedence. Sources call it once after building.
    pub fn sort_virtual_hosts(&mut self) {
        self.virtual_hosts
            .sort_by(|a, b| a.precedence().cmp(&b.precedence()));
    }
}

/// `example.com:8080` → `example.com`; `[2001:db8::1]:80` → `[2001:db8::1]`.
fn host_without_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.split_once(']').map_or(h, |(a, _)| &h[..a.len() + 1]);
    }
    h.split_once(':').map_or(h, |(a, _)| a)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerTls {
    /// Chosen by SNI: the first whose `hosts` match the server name. Sorted by file.
    pub certificates: Vec<Certificate>,
    /// For a server name no certificate names (or no SNI at all). `None`: the first of
    /// `certificates`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_certificate: Option<CertFile>,
}

impl ListenerTls {
    /// The certificate a TLS client asking for `server_name` gets (exact names before
    /// wildcards, then the default).
    pub fn certificate_for(&self, server_name: &str) -> Option<&CertFile> {
        let sn = server_name.to_ascii_lowercase();
        let by = |wild: bool| {
            self.certificates
                .iter()
                .find(|c| {
                    c.hosts
                        .iter()
                        .any(|h| h.is_wildcard() == wild && h.matches(&sn))
                })
                .map(|c| &c.file)
        };
        by(false)
            .or_else(|| by(true))
            .or(self.default_certificate.as_ref())
            .or_else(|| self.certificates.first().map(|c| &c.file))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Certificate {
    pub file: CertFile,
    /// The server names (SNI) this certificate is used for; sorted.
    pub hosts: Vec<Hostname>,
    /// The object that produced it (an Ingress, HTTPRoute, TLSRoute, TCPRoute, UDPRoute
    /// or Gateway): what the actor's quarantine removes when the proxy refuses a config
    /// because of it. Absent in states of older watchers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<ObjRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualHost {
    /// `None`: any host (the rules of Ingress rules without `host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Hostname>,
    /// For a wildcard host: it matches any number of labels before its suffix (the
    /// Gateway API's `*.example.com` matches `a.example.com` and `a.b.example.com`), not
    /// exactly one (the Ingress API's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_depth: bool,
    /// In precedence order; the first that matches wins.
    pub rules: Vec<RouteRule>,
}

impl VirtualHost {
    /// A virtual host whose wildcard (if any) matches one label.
    pub fn new(host: Option<Hostname>, rules: Vec<RouteRule>) -> VirtualHost {
        VirtualHost {
            host,
            any_depth: false,
            rules,
        }
    }

    /// Does it take a request for `host` (lowercase, without its port)?
    pub fn takes(&self, host: &str) -> bool {
        match &self.host {
            None => true,
            Some(h) if self.any_depth => h.matches_any_depth(host),
            Some(h) => h.matches(host),
        }
    }

    /// Sort key: exact hosts (by name), one-label wildcards (by name), any-depth
    /// wildcards (the longest suffix first: `*.b.example.com` before `*.example.com`),
    /// then any.
    pub fn precedence(&self) -> (u8, std::cmp::Reverse<usize>, Option<&str>) {
        use std::cmp::Reverse;
        match &self.host {
            Some(h) if !h.is_wildcard() => (0, Reverse(0), Some(h.as_str())),
            Some(h) if !self.any_depth => (1, Reverse(0), Some(h.as_str())),
            Some(h) => (2, Reverse(h.as_str().len()), Some(h.as_str())),
            None => (3, Reverse(0), None),
        }
    }

    /// Sort the rules by the Ingress API's precedence: Exact paths first, then Prefix
    /// paths longest first (ties by path, for determinism). For the paths one request
    /// can match this is the API's "longest matching path, then Exact over Prefix".
    pub fn sort_rules(&mut self) {
        self.rules
            .sort_by(|a, b| a.matches.precedence().cmp(&b.matches.precedence()));
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteRule {
    pub matches: RouteMatch,
    pub action: RouteAction,
    /// What a forwarded request and its response get changed (Gateway API filters).
    #[serde(default, skip_serializing_if = "RuleFilters::is_empty")]
    pub filters: RuleFilters,
    /// The object that produced it (an Ingress, HTTPRoute, TLSRoute, TCPRoute, UDPRoute
    /// or Gateway): what the actor's quarantine removes when the proxy refuses a config
    /// because of it. Absent in states of older watchers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<ObjRef>,
}

impl RouteRule {
    /// A rule without filters.
    pub fn new(matches: RouteMatch, action: RouteAction) -> RouteRule {
        RouteRule {
            matches,
            action,
            filters: RuleFilters::default(),
            owner: None,
        }
    }

    /// Why nginx could not load this rule, if it could not: one of its values renders
    /// to a token longer than [`NGINX_MAX_TOKEN`] ([`FieldValue::nginx_match_token_len`],
    /// [`FieldValue::nginx_edit_token_len`]). Refused at plan time for both providers
    /// (a route accepted or refused the same whatever the proxy), never rendered:
    /// one such token makes nginx refuse the whole config of every tenant.
    pub fn nginx_token_too_long(&self) -> Option<String> {
        let too_long = |what: String, len: usize| {
            (len > NGINX_MAX_TOKEN).then(|| {
                format!(
                    "{what}: its value renders to {len} bytes, over the {NGINX_MAX_TOKEN} bytes nginx takes in one token (a match value counts each character other than a letter or digit twice)"
                )
            })
        };
        let m = &self.matches;
        let matches = m
            .headers
            .iter()
            .map(|h| (format!("header match {}", h.name), &h.value))
            .chain(
                m.query
                    .iter()
                    .map(|q| (format!("query parameter match {}", q.name), &q.value)),
            );
        for (what, v) in matches {
            if let Some(why) = too_long(what, v.nginx_match_token_len()) {
                return Some(why);
            }
        }
        let f = &self.filters;
        for (dir, e, request) in [
            ("RequestHeaderModifier", &f.request_headers, true),
            ("ResponseHeaderModifier", &f.response_headers, false),
        ] {
            for (h, added) in e
                .set
                .iter()
                .map(|h| (h, false))
                .chain(e.add.iter().map(|h| (h, true)))
            {
                let len = h.value.nginx_edit_token_len(&h.name, added && request);
                if let Some(why) = too_long(format!("{dir} header {}", h.name), len) {
                    return Some(why);
                }
            }
        }
        None
    }
}

/// The longest token (one word, with its quotes) nginx loads wherever it stands in the
/// file: its reader's buffer is 4,096 bytes, and a token of 4,096 is refused ("too long
/// parameter", the whole config with it) at most positions. Checked with nginx 1.22 at
/// every offset: 4,095 always loads, 4,096 mostly not.
pub const NGINX_MAX_TOKEN: usize = 4095;

impl FieldValue {
    /// The length of the nginx token that matches this value exactly (render_http's
    /// `nx_exact_after_one`: `"~^1<value>$"`, every character but letters and digits
    /// escaped with `\`).
    pub fn nginx_match_token_len(&self) -> usize {
        let escaped: usize = self
            .0
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() { 1 } else { 2 })
            .sum();
        "\"~^1$\"".len() + escaped
    }

    /// The length of the longest nginx token that sets header `name` to this value:
    /// `"<value>"`, or for a request header added to the request's own value
    /// `"$http_<name>,<value>"`.
    pub fn nginx_edit_token_len(&self, name: &FieldName, added_to_request: bool) -> usize {
        let quoted = self.0.len() + 2;
        if added_to_request {
            quoted + "$http_,".len() + name.as_str().len()
        } else {
            quoted
        }
    }
}

/// What a rule changes on a request it forwards, and on the response: Gateway API's
/// RequestHeaderModifier, ResponseHeaderModifier and URLRewrite filters. Applied only
/// to [`RouteAction::Forward`] (a redirect or a fixed answer sends nothing on).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleFilters {
    #[serde(default, skip_serializing_if = "HeaderEdits::is_empty")]
    pub request_headers: HeaderEdits,
    #[serde(default, skip_serializing_if = "HeaderEdits::is_empty")]
    pub response_headers: HeaderEdits,
    /// The Host header sent to the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite_host: Option<Hostname>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite_path: Option<PathRewrite>,
}

impl RuleFilters {
    pub fn is_empty(&self) -> bool {
        self == &RuleFilters::default()
    }
}

/// Header changes, applied in this order: remove, set (replace every value), add (one
/// more value). Each name at most once across the three (names are [`FieldName`]s:
/// lowercase).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderEdits {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<HeaderValue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<HeaderValue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<FieldName>,
}

impl HeaderEdits {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }

    /// Every name it touches.
    pub fn names(&self) -> impl Iterator<Item = &FieldName> {
        self.set
            .iter()
            .map(|h| &h.name)
            .chain(self.add.iter().map(|h| &h.name))
            .chain(self.remove.iter())
    }

    /// The request's (or response's) headers after the edits: `headers` as (name, value)
    /// in order, names in any case.
    pub fn apply(&self, headers: &[(String, String)]) -> Vec<(String, String)> {
        let touched = |n: &str| {
            self.remove
                .iter()
                .chain(self.set.iter().map(|h| &h.name))
                .any(|r| r.as_str().eq_ignore_ascii_case(n))
        };
        let mut out: Vec<(String, String)> = headers
            .iter()
            .filter(|(n, _)| !touched(n))
            .cloned()
            .collect();
        for h in self.set.iter().chain(&self.add) {
            out.push((h.name.to_string(), h.value.to_string()));
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderValue {
    pub name: FieldName,
    pub value: FieldValue,
}

/// The path sent to the backend (the query string is kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum PathRewrite {
    /// The whole path becomes `path`.
    Full { path: HttpPath },
    /// The element-wise prefix `from` (the rule's Prefix match, without a trailing `/`)
    /// becomes `to`: `/from/x` → `/to/x`, `/from` → `/to`; with `to` `/`, `/from/x` →
    /// `/x` and `/from` → `/`.
    Prefix { from: HttpPath, to: HttpPath },
}

impl PathRewrite {
    /// The path a request for `path` (which the rule matched) is sent with.
    pub fn apply(&self, path: &str) -> String {
        match self {
            PathRewrite::Full { path } => path.to_string(),
            PathRewrite::Prefix { from, to } => {
                let from = from.as_str().trim_end_matches('/');
                let rest = path.strip_prefix(from).unwrap_or(path);
                let to = to.as_str().trim_end_matches('/');
                match (to.is_empty(), rest.is_empty()) {
                    (true, true) => "/".to_string(),
                    (true, false) => rest.to_string(),
                    (false, _) => format!("{to}{rest}"),
                }
            }
        }
    }
}

/// What a request must look like: its path and, when set, its method, headers and
/// query parameters (Gateway API HTTPRoute matches); all of them must match.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteMatch {
    pub path: PathMatch,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Method>,
    /// Each header (the first occurrence of its name in the request) has exactly this
    /// value. One entry per name, sorted by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderMatch>,
    /// Each query parameter (its first occurrence, as sent: not percent-decoded) has
    /// exactly this value. One entry per name, sorted by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<QueryMatch>,
}

/// An HTTP request as the reference router sees it: enough to decide a route.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The Host header, any case, with or without `:port`.
    pub host: &'a str,
    /// Without the query.
    pub path: &'a str,
    pub method: &'a str,
    /// (name, value) in the order sent; names in any case.
    pub headers: &'a [(&'a str, &'a str)],
    /// (name, value) in the order sent, as sent.
    pub query: &'a [(&'a str, &'a str)],
}

impl<'a> Request<'a> {
    /// A GET of `path` on `host`, without headers or query.
    pub fn get(host: &'a str, path: &'a str) -> Request<'a> {
        Request {
            host,
            path,
            method: "GET",
            headers: &[],
            query: &[],
        }
    }

    fn header(&self, name: &str) -> Option<&'a str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }

    fn query_param(&self, name: &str) -> Option<&'a str> {
        self.query.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}

impl RouteMatch {
    /// A match on the path alone.
    pub fn on_path(path: PathMatch) -> RouteMatch {
        RouteMatch {
            path,
            method: None,
            headers: Vec::new(),
            query: Vec::new(),
        }
    }

    /// Does a GET of `path`, without headers or query, match?
    pub fn matches(&self, path: &str) -> bool {
        self.matches_request(&Request::get("", path))
    }

    pub fn matches_request(&self, req: &Request<'_>) -> bool {
        self.path.matches(req.path)
            && self.method.is_none_or(|m| m.as_str() == req.method)
            && self
                .headers
                .iter()
                .all(|h| req.header(h.name.as_str()) == Some(h.value.as_str()))
            && self
                .query
                .iter()
                .all(|q| req.query_param(q.name.as_str()) == Some(q.value.as_str()))
    }

    /// Does it match on more than the path?
    pub fn is_conditional(&self) -> bool {
        self.method.is_some() || !self.headers.is_empty() || !self.query.is_empty()
    }

    /// 0 for an Exact path, 1 for a Prefix (Exact matches win).
    pub fn path_rank(&self) -> u8 {
        match &self.path {
            PathMatch::Exact(_) => 0,
            PathMatch::Prefix(_) => 1,
        }
    }

    /// The path's length (longer prefixes win).
    pub fn path_len(&self) -> usize {
        match &self.path {
            PathMatch::Exact(p) | PathMatch::Prefix(p) => p.as_str().len(),
        }
    }

    fn precedence(&self) -> (u8, std::cmp::Reverse<usize>, &str) {
        match &self.path {
            PathMatch::Exact(p) => (0, std::cmp::Reverse(p.as_str().len()), p.as_str()),
            PathMatch::Prefix(p) => (1, std::cmp::Reverse(p.as_str().len()), p.as_str()),
        }
    }
}

/// An HTTP method a rule may require.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Connect,
    Options,
    Trace,
    Patch,
}

impl Method {
    pub const ALL: [Method; 9] = [
        Method::Get,
        Method::Head,
        Method::Post,
        Method::Put,
        Method::Delete,
        Method::Connect,
        Method::Options,
        Method::Trace,
        Method::Patch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Connect => "CONNECT",
            Method::Options => "OPTIONS",
            Method::Trace => "TRACE",
            Method::Patch => "PATCH",
        }
    }
}

impl FromStr for Method {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Method, NameError> {
        Method::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                err(
                    "method",
                    s,
                    "must be one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH",
                )
            })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderMatch {
    pub name: FieldName,
    pub value: FieldValue,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryMatch {
    pub name: QueryName,
    pub value: FieldValue,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PathMatch {
    /// The path, byte for byte (case-sensitive).
    Exact(HttpPath),
    /// Element-wise prefix: `/foo` matches `/foo`, `/foo/` and `/foo/bar`, not
    /// `/foobar`. Stored without a trailing `/` (see [`PathMatch::prefix`]).
    Prefix(HttpPath),
}

impl PathMatch {
    /// A Prefix match in canonical form: a trailing `/` is dropped (the Ingress API
    /// ignores it: Prefix `/aaa/bbb/` matches `/aaa/bbb`).
    pub fn prefix(p: &HttpPath) -> PathMatch {
        PathMatch::Prefix(p.trim_trailing_slash())
    }

    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Exact(p) => p.as_str() == path,
            PathMatch::Prefix(p) => {
                let p = p.as_str();
                p == "/"
                    || path
                        .strip_prefix(p)
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum RouteAction {
    /// To the backends, split by weight (a backend of weight 0 gets nothing).
    Forward {
        backends: Vec<WeightedBackend>,
        /// The summed weight of the rule's backend references that are invalid (a
        /// Service that does not exist, a reference not granted): that share of the
        /// requests gets 500, as the Gateway API says; the others still reach theirs.
        #[serde(default, skip_serializing_if = "is_zero")]
        invalid: u16,
    },
    Redirect(Redirect),
    /// Answer with a fixed status: what a rule whose backend does not exist gets.
    Respond {
        status: FixedStatus,
    },
}

impl RouteAction {
    /// Forward everything to one backend.
    pub fn forward(id: BackendId) -> RouteAction {
        RouteAction::Forward {
            backends: vec![WeightedBackend { id, weight: 1 }],
            invalid: 0,
        }
    }

    /// A forward drawn at random among two or more targets (backends, or one backend
    /// and the invalid share's 500).
    pub fn is_split(&self) -> bool {
        matches!(self, RouteAction::Forward { backends, invalid } if is_split(backends, *invalid))
    }
}

fn is_zero(n: &u16) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WeightedBackend {
    pub id: BackendId,
    pub weight: u16,
}

/// A redirect; each absent part is kept from the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Redirect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<Scheme>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Hostname>,
    /// `None`: with a `scheme`, that scheme's well-known port; without, the listener's
    /// (Gateway API `RequestRedirect.port`). See [`Redirect::location_port`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Replaces the whole path (the query is kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpPath>,
    /// Replaces the rule's matched prefix, keeping the rest of the path and the query
    /// (Gateway API `ReplacePrefixMatch`; always [`PathRewrite::Prefix`]). Exclusive
    /// with `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix: Option<PathRewrite>,
    pub status: RedirectStatus,
}

impl Redirect {
    /// The scheme of the Location a request to a listener of `listener` scheme gets.
    pub fn location_scheme(&self, listener: Scheme) -> Scheme {
        self.scheme.unwrap_or(listener)
    }

    /// The port written in the Location (`None`: none, the scheme's well-known one), for
    /// a request to a listener of scheme `listener` on `listener_port`: the redirect's
    /// port, else with a scheme that scheme's well-known port, else the listener's; a
    /// port well known for the Location's scheme (80 for http, 443 for https) is not
    /// written (the Gateway API's rules).
    pub fn location_port(&self, listener: Scheme, listener_port: u16) -> Option<u16> {
        let scheme = self.location_scheme(listener);
        let port = match (self.port, self.scheme) {
            (Some(p), _) => p,
            (None, Some(s)) => s.default_port(),
            (None, None) => listener_port,
        };
        (port != scheme.default_port()).then_some(port)
    }

    /// The reference Location for a request (host without port, raw path, query without
    /// `?`, empty when none) to a listener of `listener` scheme on `listener_port`.
    pub fn location(
        &self,
        listener: Scheme,
        listener_port: u16,
        host: &str,
        path: &str,
        query: &str,
    ) -> String {
        let scheme = self.location_scheme(listener);
        let host = self
            .host
            .as_ref()
            .filter(|h| !h.is_wildcard())
            .map_or(host, Hostname::as_str);
        let port = self
            .location_port(listener, listener_port)
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        let path = match (&self.path, &self.replace_prefix) {
            (Some(p), _) => p.to_string(),
            (None, Some(r)) => r.apply(path),
            (None, None) => path.to_string(),
        };
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!("{}://{host}{port}{path}{query}", scheme.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// A redirect status code (the ones HAProxy's `redirect code` and nginx's `return` take).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub enum RedirectStatus {
    MovedPermanently301,
    Found302,
    SeeOther303,
    TemporaryRedirect307,
    PermanentRedirect308,
}

impl RedirectStatus {
    pub fn code(self) -> u16 {
        match self {
            RedirectStatus::MovedPermanently301 => 301,
            RedirectStatus::Found302 => 302,
            RedirectStatus::SeeOther303 => 303,
            RedirectStatus::TemporaryRedirect307 => 307,
            RedirectStatus::PermanentRedirect308 => 308,
        }
    }
}

impl TryFrom<u16> for RedirectStatus {
    type Error = String;
    fn try_from(c: u16) -> Result<Self, String> {
        Ok(match c {
            301 => RedirectStatus::MovedPermanently301,
            302 => RedirectStatus::Found302,
            303 => RedirectStatus::SeeOther303,
            307 => RedirectStatus::TemporaryRedirect307,
            308 => RedirectStatus::PermanentRedirect308,
            _ => {
                return Err(format!(
                    "redirect status {c} is not 301, 302, 303, 307 or 308"
                ))
            }
        })
    }
}

impl From<RedirectStatus> for u16 {
    fn from(s: RedirectStatus) -> u16 {
        s.code()
    }
}

/// A fixed answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub enum FixedStatus {
    NotFound404,
    InternalServerError500,
    ServiceUnavailable503,
}

impl FixedStatus {
    pub fn code(self) -> u16 {
        match self {
            FixedStatus::NotFound404 => 404,
            FixedStatus::InternalServerError500 => 500,
            FixedStatus::ServiceUnavailable503 => 503,
        }
    }
}

impl TryFrom<u16> for FixedStatus {
    type Error = String;
    fn try_from(c: u16) -> Result<Self, String> {
        Ok(match c {
            404 => FixedStatus::NotFound404,
            500 => FixedStatus::InternalServerError500,
            503 => FixedStatus::ServiceUnavailable503,
            _ => return Err(format!("fixed status {c} is not 404, 500 or 503")),
        })
    }
}

impl From<FixedStatus> for u16 {
    fn from(s: FixedStatus) -> u16 {
        s.code()
    }
}

/// A backend: one port of one Service, `<namespace>/<name>:<port>` (the Service port
/// number, named ports resolved). Stable while the Service and port exist.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendId {
    pub service: ServiceKey,
    pub port: u16,
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.service, self.port)
    }
}

impl FromStr for BackendId {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        let (svc, port) = s
            .rsplit_once(':')
            .ok_or_else(|| err("backend", s, "expected <namespace>/<name>:<port>"))?;
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| err("backend", s, "the port must be 1-65535"))?;
        Ok(BackendId {
            service: svc.parse()?,
            port,
        })
    }
}

impl Serialize for BackendId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BackendId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendState {
    /// Ready endpoints, then terminating ones that still serve (draining); sorted.
    pub endpoints: Vec<Endpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stickiness: Option<Sticky>,
    /// What the proxy speaks to the endpoints (the Service port's `appProtocol`).
    #[serde(default, skip_serializing_if = "BackendProtocol::is_http")]
    pub protocol: BackendProtocol,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Sticky {
    /// Same client address, same endpoint.
    Source,
    /// An inserted cookie names the endpoint.
    Cookie { name: CookieName },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostnames_accept_rfc1123_and_one_leading_wildcard() {
        for ok in [
            "foo.bar.com",
            "localhost",
            "*.example.com",
            "a-1.b2.c",
            "xn--bcher-kva.example",
        ] {
            assert!(ok.parse::<Hostname>().is_ok(), "{ok:?} refused");
        }
        for bad in [
            "",
            "*",
            "*.",
            "Foo.com",
            "foo.*.com",
            "**.foo.com",
            "*foo.com",
            "foo..com",
            "-foo.com",
            "foo.com.",
            "foo_bar.com",
            "10.0.0.1",
            "foo.com:80",
            "foo.com\nbar",
            "foo com",
            "foo\"com",
            "foo{.com",
            "foo;.com",
            "foo#.com",
        ] {
            assert!(bad.parse::<Hostname>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn wildcard_matches_exactly_one_label() {
        let w: Hostname = "*.foo.com".parse().unwrap();
        assert!(w.matches("bar.foo.com"));
        assert!(!w.matches("baz.bar.foo.com"));
        assert!(!w.matches("foo.com"));
        assert!(!w.matches(".foo.com"));
        let e: Hostname = "foo.com".parse().unwrap();
        assert!(e.matches("foo.com"));
        assert!(!e.matches("a.foo.com"));
    }

    #[test]
    fn paths_accept_url_path_characters_only() {
        for ok in [
            "/",
            "/foo",
            "/foo/",
            "/a-b_c.d~e/f!*+,=:@&",
            "/.well-known/acme-challenge/x",
        ] {
            assert!(ok.parse::<HttpPath>().is_ok(), "{ok:?} refused");
        }
        for bad in [
            "", "foo", "//", "/a//b", "/a/./b", "/a/../b", "/..", "/.", "/a b", "/a\nb", "/a\rb",
            "/a\"b", "/a'b", "/a{b", "/a}b", "/a;b", "/a#b", "/a?b", "/a%20b", "/a$b", "/a\\b",
            "/a(b)",
        ] {
            assert!(bad.parse::<HttpPath>().is_err(), "{bad:?} accepted");
        }
        assert!(format!("/{}", "a".repeat(1023)).parse::<HttpPath>().is_ok());
        assert!(format!("/{}", "a".repeat(1024))
            .parse::<HttpPath>()
            .is_err());
    }

    #[test]
    fn tokens_refuse_config_metacharacters() {
        assert!("X-Forwarded-For".parse::<HeaderName>().is_ok());
        assert!("route_id".parse::<CookieName>().is_ok());
        for bad in [
            "", "a b", "a#b", "a'b", "a$b", "a%b", "a|b", "a;b", "a\nb", "a:b",
        ] {
            assert!(bad.parse::<HeaderName>().is_err(), "{bad:?} accepted");
            assert!(bad.parse::<CookieName>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn element_wise_prefix() {
        let p = PathMatch::prefix(&"/foo/".parse().unwrap());
        assert_eq!(p, PathMatch::Prefix("/foo".parse().unwrap()));
        assert!(p.matches("/foo"));
        assert!(p.matches("/foo/"));
        assert!(p.matches("/foo/bar"));
        assert!(!p.matches("/foobar"));
        assert!(PathMatch::prefix(&HttpPath::root()).matches("/anything"));
    }

    #[test]
    fn backend_ids_round_trip() {
        let id: BackendId = "default/web:8080".parse().unwrap();
        assert_eq!(id.to_string(), "default/web:8080");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"default/web:8080\"");
        for bad in [
            "default/web",
            "default/web:0",
            "default/web:x",
            "web:80",
            "a/b:70000",
        ] {
            assert!(bad.parse::<BackendId>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn statuses_refuse_other_codes() {
        assert!(serde_json::from_str::<RedirectStatus>("308").is_ok());
        assert!(serde_json::from_str::<RedirectStatus>("200").is_err());
        assert!(serde_json::from_str::<FixedStatus>("503").is_ok());
        assert!(serde_json::from_str::<FixedStatus>("418").is_err());
    }

    #[test]
    fn hostile_strings_in_a_document_are_refused_on_read() {
        let doc = r#"{"listeners":[{"ip":"198.18.0.1","port":80,"protocol":"http",
            "virtualHosts":[{"host":"a.com\nbind :1","rules":[]}]}],"backends":{}}"#;
        assert!(serde_json::from_str::<HttpRoutes>(doc).is_err());
        let doc = r#"{"listeners":[{"ip":"198.18.0.1","port":80,"protocol":"http",
            "virtualHosts":[{"rules":[{"matches":{"path":{"exact":"/a;b"}},
            "action":{"type":"respond","status":503}}]}]}],"backends":{}}"#;
        assert!(serde_json::from_str::<HttpRoutes>(doc).is_err());
    }
}
