//! A rule: its match (path, method, headers, query), its filters, and how a request is
//! matched against it.

use super::*;

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

    /// The rule's filters as a request it forwards gets them: for a forward to one
    /// backend (no split), that backend's request header edits after the rule's (their
    /// names are apart: see [`WeightedBackend::request_headers`]). A split's backends
    /// keep theirs: the renders apply them per drawn backend.
    pub fn forward_filters(&self) -> std::borrow::Cow<'_, RuleFilters> {
        let RouteAction::Forward { backends, invalid } = &self.action else {
            return std::borrow::Cow::Borrowed(&self.filters);
        };
        let mut live = backends.iter().filter(|b| b.weight > 0);
        match (live.next(), live.next(), invalid) {
            (Some(one), None, 0) if !one.request_headers.is_empty() => {
                let mut f = self.filters.clone();
                let (r, b) = (&mut f.request_headers, &one.request_headers);
                r.remove.extend(b.remove.iter().cloned());
                r.set.extend(b.set.iter().cloned());
                r.add.extend(b.add.iter().cloned());
                std::borrow::Cow::Owned(f)
            }
            _ => std::borrow::Cow::Borrowed(&self.filters),
        }
    }

    /// It splits among backends of which one has request header edits of its own (one
    /// backend's are the rule's: [`RouteRule::forward_filters`]).
    pub fn splits_with_backend_edits(&self) -> bool {
        matches!(&self.action, RouteAction::Forward { backends, invalid }
            if backends.iter().filter(|b| b.weight > 0).count() + usize::from(*invalid > 0) > 1
                && backends.iter().any(|b| !b.request_headers.is_empty()))
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
        let backend_edits: Vec<&HeaderEdits> = match &self.action {
            RouteAction::Forward { backends, .. } => {
                backends.iter().map(|b| &b.request_headers).collect()
            }
            _ => vec![],
        };
        let edits = [
            ("RequestHeaderModifier", &f.request_headers, true),
            ("ResponseHeaderModifier", &f.response_headers, false),
        ]
        .into_iter()
        .chain(
            backend_edits
                .into_iter()
                .map(|e| ("backendRefs RequestHeaderModifier", e, true)),
        );
        for (dir, e, request) in edits {
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

/// What the rules of one host ask of the one nginx `location` that serves them all when
/// one of them matches on more than the path (method, headers, query: nginx picks among
/// them there, by `map`s on the request): a mirror (nginx's `mirror` takes no variable),
/// a split whose backends edit request headers of their own, or different timeouts
/// (nginx's take no variable either) cannot be served there. The plan refuses the route
/// that would make such a mix on nginx ([`crate::gateway::GatewayInput::mixes_conditional_rules`]);
/// the nginx render keeps the same rule as a backstop (it leaves such a host out).
/// HAProxy picks per rule and serves any mix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OneLocation {
    conditional: bool,
    mirror: bool,
    split_edits: bool,
    cors: bool,
    /// The timeouts of the rules that forward.
    timeouts: std::collections::BTreeSet<Option<TimeoutMs>>,
}

impl OneLocation {
    /// The summary of `rules`.
    pub fn of<'a>(rules: impl IntoIterator<Item = &'a RouteRule>) -> OneLocation {
        let mut o = OneLocation::default();
        for r in rules {
            o.add(r);
        }
        o
    }

    /// `r` joins the host.
    pub fn add(&mut self, r: &RouteRule) {
        self.conditional |= r.matches.is_conditional();
        self.mirror |= !r.filters.mirrors.is_empty() || !r.filters.partial_mirrors.is_empty();
        self.split_edits |= r.splits_with_backend_edits();
        self.cors |= r.filters.cors.is_some();
        if matches!(r.action, RouteAction::Forward { .. }) {
            self.timeouts.insert(r.filters.timeout);
        }
    }

    /// Why nginx cannot serve these rules on one host, if it cannot.
    pub fn refusal(&self) -> Option<&'static str> {
        if !self.conditional {
            None
        } else if self.mirror {
            Some("a RequestMirror among rules that match on method, headers or query (one nginx location for all, and nginx's mirror takes no variable)")
        } else if self.cors {
            Some("a CORS filter among rules that match on method, headers or query (one nginx location for all)")
        } else if self.split_edits {
            Some("a split whose backends have their own request header edits, among rules that match on method, headers or query (one nginx location for all)")
        } else if self.timeouts.len() > 1 {
            Some("rules that match on method, headers or query share one nginx location, which takes one timeout; these ask for different ones")
        } else {
            None
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
    /// The longest the proxy waits for the backend's answer before it answers `504`
    /// (Gateway API `timeouts.request` and `timeouts.backendRequest`, the smaller: with
    /// no retries one try is the whole request). None: the proxy's default (the
    /// admin's `timeout server` / `proxy_read_timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<TimeoutMs>,
    /// Backends that get a copy of every request the rule forwards (Gateway API
    /// RequestMirror); their answers are dropped. Only on a provider that mirrors
    /// (nginx): the translation refuses it on HAProxy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<BackendId>,
    /// Backends that get a copy of a share of the requests (a RequestMirror's `percent`
    /// or `fraction` below all), each request drawn at random. Apart from `mirrors` so
    /// that an actor older than this field mirrors none of them, never every request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partial_mirrors: Vec<PartialMirror>,
    /// Gateway API CORS: the proxy answers preflight requests from allowed origins
    /// itself and adds the CORS headers to the answers to the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<Cors>,
    /// Gateway API `retry`: a try that fails (a connection failure, or an answer of one
    /// of the codes) is tried again, up to `attempts` more times. Only on a provider
    /// that retries on an answer (HAProxy's L7 retries): the translation refuses it on
    /// nginx, whose `proxy_next_upstream` only tries another server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
}

/// A rule's retry policy (Gateway API `HTTPRouteRetry` without `backoff`, which k8slb
/// refuses: HAProxy waits no minimum between L7 retries).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    /// The most retries of one request (None: the proxy's default, HAProxy's `retries`
    /// of the admin's `defaults`, else 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<RetryAttempts>,
    /// The answers that are retried (a connection failure always is).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub codes: std::collections::BTreeSet<RetryCode>,
}

impl Retry {
    /// A short name of the policy, `r<attempts or d>` then `_<code>` per code
    /// (`r3_500_502`): ASCII letters, digits and `_` only, at most 44 characters. The
    /// HAProxy render names a backend's retrying copy by it.
    pub fn key(&self) -> String {
        let mut k = match self.attempts {
            Some(a) => format!("r{}", a.get()),
            None => "rd".to_string(),
        };
        for c in &self.codes {
            k.push('_');
            k.push_str(&c.get().to_string());
        }
        k
    }
}

/// How many times a request may be retried: 1..=[`RetryAttempts::MAX`]. The API sets
/// no maximum; a request that fans out into more tries than this on the shared proxy
/// is refused, not capped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct RetryAttempts(u32);

impl RetryAttempts {
    pub const MAX: u32 = 10;

    pub fn get(self) -> u32 {
        self.0
    }
}

impl TryFrom<u32> for RetryAttempts {
    type Error = String;
    fn try_from(n: u32) -> Result<Self, String> {
        if (1..=RetryAttempts::MAX).contains(&n) {
            Ok(RetryAttempts(n))
        } else {
            Err(format!(
                "retry.attempts {n} is not within 1..={}",
                RetryAttempts::MAX
            ))
        }
    }
}

impl From<RetryAttempts> for u32 {
    fn from(a: RetryAttempts) -> u32 {
        a.0
    }
}

/// An answer status that is retried: one HAProxy 2.6's `retry-on` takes (the four the
/// Gateway API requires, 500, 502, 503, 504, and 401, 403, 404, 408, 425, 501).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct RetryCode(u16);

impl RetryCode {
    /// Every status HAProxy 2.6's `retry-on` takes (`haproxy -c` refuses the others).
    pub const SUPPORTED: [u16; 10] = [401, 403, 404, 408, 425, 500, 501, 502, 503, 504];

    pub fn get(self) -> u16 {
        self.0
    }
}

impl TryFrom<u16> for RetryCode {
    type Error = String;
    fn try_from(c: u16) -> Result<Self, String> {
        if RetryCode::SUPPORTED.contains(&c) {
            Ok(RetryCode(c))
        } else {
            Err(format!(
                "retry code {c} is not one the proxy retries on ({})",
                RetryCode::SUPPORTED.map(|c| c.to_string()).join(", ")
            ))
        }
    }
}

impl From<RetryCode> for u16 {
    fn from(c: RetryCode) -> u16 {
        c.0
    }
}

/// A timeout in milliseconds, at least 1 (a Gateway API Duration: at most four parts
/// of up to five digits; `0s` means no timeout and is never one of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct TimeoutMs(u64);

impl TimeoutMs {
    /// The largest: four parts of `99999h`.
    pub const MAX: u64 = 4 * 99_999 * 3_600_000;

    pub fn millis(self) -> u64 {
        self.0
    }

    /// A Gateway API Duration (`^([0-9]{1,5}(h|m|s|ms)){1,4}$`): Ok(None) for a zero
    /// one (the timeout disabled).
    pub fn parse_duration(s: &str) -> Result<Option<TimeoutMs>, String> {
        let bad = || format!("{s:?} is not a Gateway API Duration (like 500ms, 1m30s)");
        let mut rest = s;
        let mut total: u64 = 0;
        let mut parts = 0;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 || digits > 5 {
                return Err(bad());
            }
            let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let (unit, len) = if rest.starts_with("ms") {
                (1, 2)
            } else if rest.starts_with('h') {
                (3_600_000, 1)
            } else if rest.starts_with('m') {
                (60_000, 1)
            } else if rest.starts_with('s') {
                (1_000, 1)
            } else {
                return Err(bad());
            };
            rest = &rest[len..];
            total += n * unit;
            parts += 1;
        }
        if parts == 0 || parts > 4 {
            return Err(bad());
        }
        Ok((total > 0).then_some(TimeoutMs(total)))
    }
}

impl TryFrom<u64> for TimeoutMs {
    type Error = String;
    fn try_from(ms: u64) -> Result<Self, String> {
        if (1..=TimeoutMs::MAX).contains(&ms) {
            Ok(TimeoutMs(ms))
        } else {
            Err(format!(
                "timeout {ms} ms is not within 1..={}",
                TimeoutMs::MAX
            ))
        }
    }
}

impl From<TimeoutMs> for u64 {
    fn from(t: TimeoutMs) -> u64 {
        t.0
    }
}

impl std::fmt::Display for TimeoutMs {
    /// `<n>ms`, as HAProxy and nginx both read it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

impl RuleFilters {
    pub fn is_empty(&self) -> bool {
        self == &RuleFilters::default()
    }
}

/// A mirror of a share of the requests ([`RuleFilters::partial_mirrors`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartialMirror {
    pub backend: BackendId,
    pub share: MirrorShare,
}

/// The share of the requests a mirror copies, in hundredths of a percent (the
/// precision nginx's `split_clients` takes): 1 to 9,999 (none is no mirror, all is a
/// [`RuleFilters::mirrors`] entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct MirrorShare(u16);

impl MirrorShare {
    /// Every request, in hundredths of a percent.
    pub const ALL: u16 = 10_000;

    /// The share `numerator / denominator` (the Gateway API's `fraction`; `percent` is
    /// over 100) to the nearest hundredth of a percent: `Ok(None)` for every request,
    /// `Ok(Some)` for a share below it, or why it is not a share (a denominator not
    /// above 0, a numerator below 0 or above it, or a share that rounds to none: a
    /// numerator of 0 is no mirror at all, for the caller to drop).
    pub fn of(numerator: i64, denominator: i64) -> Result<Option<MirrorShare>, String> {
        if denominator <= 0 || numerator < 0 || numerator > denominator {
            return Err(format!(
                "{numerator}/{denominator} is not a share of the requests (0 <= numerator <= denominator, denominator > 0)"
            ));
        }
        let (n, d) = (i128::from(numerator), i128::from(denominator));
        let hundredths = (n * i128::from(Self::ALL) + d / 2) / d;
        match u16::try_from(hundredths) {
            Ok(Self::ALL) => Ok(None),
            Ok(0) => Err(format!(
                "{numerator}/{denominator} is below 0.01% of the requests, the finest share the proxy draws"
            )),
            Ok(h) => Ok(Some(MirrorShare(h))),
            Err(_) => Err(format!("{numerator}/{denominator} is not a share")),
        }
    }

    /// In hundredths of a percent (1 to 9,999).
    pub fn hundredths(self) -> u16 {
        self.0
    }
}

impl TryFrom<u16> for MirrorShare {
    type Error = String;
    fn try_from(h: u16) -> Result<Self, String> {
        if (1..Self::ALL).contains(&h) {
            Ok(MirrorShare(h))
        } else {
            Err(format!(
                "a mirror share of {h} hundredths of a percent is not between none and all"
            ))
        }
    }
}

impl From<MirrorShare> for u16 {
    fn from(s: MirrorShare) -> u16 {
        s.0
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

    pub(super) fn precedence(&self) -> (u8, std::cmp::Reverse<usize>, &str) {
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
