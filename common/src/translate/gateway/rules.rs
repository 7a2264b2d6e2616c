//! An HTTPRoute's rules into the route model: matches, filters, precedence, and the cap
//! on conditional rules per host.

use super::*;

/// The spec's precedence: path rank (Exact first), longer paths first, a method match
/// first, more header matches first, more query parameter matches first, then the
/// route's age and name, the rule's and the match's index.
pub(super) type PrecedenceKey = (
    (
        u8,
        std::cmp::Reverse<usize>,
        bool,
        std::cmp::Reverse<usize>,
        std::cmp::Reverse<usize>,
    ),
    (Option<String>, String),
    usize,
    usize,
);

/// The match part of [`PrecedenceKey`].
pub(super) fn match_precedence(
    m: &RouteMatch,
) -> (
    u8,
    std::cmp::Reverse<usize>,
    bool,
    std::cmp::Reverse<usize>,
    std::cmp::Reverse<usize>,
) {
    use std::cmp::Reverse;
    (
        m.path_rank(),
        Reverse(m.path_len()),
        m.method.is_none(),
        Reverse(m.headers.len()),
        Reverse(m.query.len()),
    )
}

/// A rule ready to go into a virtual host, with its sort key.
pub(super) struct Placed {
    /// (listener index, hostname)
    pub(super) at: (usize, Option<Hostname>),
    pub(super) key: PrecedenceKey,
    pub(super) rule: RouteRule,
}

/// What the routes accepted so far placed on one host of one address and port.
#[derive(Debug, Clone, Default)]
pub(super) struct HostTally {
    /// Rules that match on more than the path.
    conditional: usize,
    /// What nginx's one location for them would have to serve.
    one_location: crate::routes::OneLocation,
}

/// The hosts (address, port, host name) a route's rules go to.
pub(super) type HostKey = (IpAddr, i32, Option<Hostname>);

/// Why the rules of a route attached at `attach` cannot join the hosts they would go to,
/// if they cannot: they would take a host beyond
/// [`GatewayInput::conditional_rules_per_host`], or (on a provider that does not serve
/// such a mix, [`GatewayInput::mixes_conditional_rules`]) make a host nginx would have
/// to leave out ([`crate::routes::OneLocation`]). Else they are counted in `placed` (by
/// address, port and host: Gateways may share an address). Routes come oldest first, so
/// the oldest keep theirs.
pub(super) fn host_refusal(
    input: &GatewayInput<'_>,
    lsts: &[Lst<'_>],
    attach: &[(usize, Option<Hostname>)],
    rules: &[(usize, usize, RouteRule)],
    placed: &mut BTreeMap<HostKey, HostTally>,
) -> Option<String> {
    let n = rules
        .iter()
        .filter(|(_, _, r)| r.matches.is_conditional())
        .count();
    let cap = input.conditional_rules_per_host;
    let mut keys = BTreeSet::new();
    for (li, host) in attach {
        let l = &lsts[*li];
        for ip in input.addresses.get(&l.gateway).into_iter().flatten() {
            keys.insert((*ip, l.spec.port, host.clone()));
        }
    }
    let mut after = Vec::new();
    for k in &keys {
        let host = k.2.as_ref().map_or("*", |h| h.as_str());
        let tally = placed.get(k).cloned().unwrap_or_default();
        let have = tally.conditional;
        if n > 0 && have + n > cap {
            return Some(format!(
                "host {host} on {}:{} would have {} rules that match on more than the path (method, headers, query parameters); the limit is {cap} per host (limits.conditionalRulesPerHost), older routes hold {have}",
                k.0,
                k.1,
                have + n
            ));
        }
        let mut one = tally.one_location.clone();
        for (_, _, r) in rules {
            one.add(r);
        }
        if !input.mixes_conditional_rules {
            if let Some(why) = one.refusal() {
                return Some(format!(
                    "host {host} on {}:{}: {why}; nginx cannot serve this route's rules with {} (the haproxy provider can)",
                    k.0,
                    k.1,
                    if tally.one_location == Default::default() {
                        "each other"
                    } else {
                        "the rules older routes hold there"
                    }
                ));
            }
        }
        after.push((
            k.clone(),
            HostTally {
                conditional: have + n,
                one_location: one,
            },
        ));
    }
    placed.extend(after);
    None
}

/// The rules of a route: (rule index, match index, rule), the ResolvedRefs condition, and
/// why the route cannot be served, if it cannot.
#[allow(clippy::type_complexity)]
pub(super) fn rules_of(
    input: &GatewayInput<'_>,
    (r, kind): (&HttpRoute, &str),
    rns: &str,
    services: &crate::translate::refs::ServiceRefs<'_>,
    backends: &mut BTreeMap<BackendId, BackendState>,
) -> (Vec<(usize, usize, RouteRule)>, Condition, Option<String>) {
    let mut out = Vec::new();
    let mut refs = Condition::new(
        ConditionType::ResolvedRefs,
        true,
        ConditionReason::ResolvedRefs,
        "every reference resolved",
    );
    for (ri, rule) in r.spec.rules.iter().enumerate() {
        let mut settings = match RuleSettings::of(rule) {
            Ok(s) => s,
            Err(why) => return (vec![], refs, Some(why)),
        };
        if settings.filters.retry.is_some() && !input.serves_retry {
            let why = "retry: nginx retries only on another server of the backend \
                       (proxy_next_upstream), not the same request up to the attempts asked \
                       (the HAProxy provider serves it)";
            return (vec![], refs, Some(why.to_string()));
        }
        if !settings.mirror_refs.is_empty() && !input.serves_mirror {
            let why = "RequestMirror: this provider does not mirror requests";
            return (vec![], refs, Some(why.to_string()));
        }
        if settings.mirror_refs.len() > input.mirrors_per_rule {
            let why = format!(
                "RequestMirror: rule {ri} has {} mirrors, each a copy of every request it takes on the proxy every tenant shares; the limit is {} per rule (limits.mirrorsPerRule)",
                settings.mirror_refs.len(),
                input.mirrors_per_rule
            );
            return (vec![], refs, Some(why));
        }
        for (b, share) in std::mem::take(&mut settings.mirror_refs) {
            match backend(input, &b, (kind, rns, "TCP"), services, backends) {
                Ok(Some(w)) => {
                    // The copy goes as HTTP/1.1: not to an h2c port.
                    let h2c = backends
                        .get(&w.id)
                        .is_some_and(|s| s.protocol == crate::app_protocol::BackendProtocol::H2c);
                    if h2c {
                        let why = format!(
                            "RequestMirror: backend {} speaks h2c; mirror copies are HTTP/1.1",
                            w.id
                        );
                        return (vec![], refs, Some(why));
                    }
                    match share {
                        None => settings.filters.mirrors.push(w.id),
                        Some(share) => {
                            settings
                                .filters
                                .partial_mirrors
                                .push(crate::routes::PartialMirror {
                                    backend: w.id,
                                    share,
                                })
                        }
                    }
                }
                Ok(None) => {}
                Err((reason, why)) => {
                    if refs.status {
                        refs = Condition::new(ConditionType::ResolvedRefs, false, reason, why);
                    }
                }
            }
        }
        let action = match &settings.action {
            Some(a) => a.clone(),
            None => forward(
                input,
                rule,
                &settings.backend_headers,
                (kind, rns, services),
                backends,
                &mut refs,
            ),
        };
        let matches = if rule.matches.is_empty() {
            vec![types::HttpRouteMatch::default()]
        } else {
            rule.matches.clone()
        };
        for (mi, m) in matches.iter().enumerate() {
            match settings.rule_for(m, &action) {
                Ok(rule) => out.push((ri, mi, rule)),
                Err(why) => return (vec![], refs, Some(why)),
            }
            // What nginx could not load would stop every tenant's config: refused for
            // both providers, so a route's acceptance does not depend on the proxy.
            if let Some(why) = out
                .last()
                .and_then(|(_, _, rule)| rule.nginx_token_too_long())
            {
                return (vec![], refs, Some(format!("rule {ri} match {mi}: {why}")));
            }
        }
    }
    (out, refs, None)
}

/// The one timeout the proxies apply for a rule's `timeouts` (see
/// [`RuleFilters::timeout`]): the smaller of `request` and `backendRequest` (zero: none).
/// Refused: a value that is not a Duration, and a `backendRequest` longer than
/// `request` (the API's own validation: a try cannot outlast the request).
fn timeout(t: &types::HttpRouteTimeouts) -> Result<Option<TimeoutMs>, String> {
    let parse = |field: &str, v: &Option<String>| {
        v.as_deref()
            .map(TimeoutMs::parse_duration)
            .transpose()
            .map(Option::flatten)
            .map_err(|e| format!("timeouts.{field}: {e}"))
    };
    let request = parse("request", &t.request)?;
    let backend = parse("backendRequest", &t.backend_request)?;
    if let (Some(r), Some(b)) = (request, backend) {
        if b > r {
            return Err(format!(
                "timeouts.backendRequest ({b}) is longer than timeouts.request ({r})"
            ));
        }
    }
    // A zero request timeout disables only itself: a backendRequest still applies.
    Ok(match (request, backend) {
        (Some(r), Some(b)) => Some(r.min(b)),
        (r, b) => r.or(b),
    })
}

/// A rule's `retry` as the proxies serve it. Refused: `backoff` (HAProxy waits no
/// minimum between L7 retries: a retry sooner than the author's minimum would not be
/// what they asked), attempts beyond [`RetryAttempts::MAX`], and a code HAProxy's
/// `retry-on` does not take ([`RetryCode::SUPPORTED`]).
fn retry(r: &types::HttpRouteRetry) -> Result<Retry, String> {
    if let Some(b) = &r.backoff {
        return Err(format!(
            "retry.backoff {b:?} is not served: HAProxy waits no minimum between retries"
        ));
    }
    let attempts = r
        .attempts
        .map(|a| {
            u32::try_from(a)
                .map_err(|_| {
                    format!(
                        "retry.attempts {a} is not within 1..={}",
                        RetryAttempts::MAX
                    )
                })
                .and_then(RetryAttempts::try_from)
        })
        .transpose()?;
    let codes = r
        .codes
        .iter()
        .map(|c| {
            u16::try_from(*c)
                .map_err(|_| format!("retry code {c} is not an HTTP status"))
                .and_then(RetryCode::try_from)
        })
        .collect::<Result<_, _>>()?;
    Ok(Retry { attempts, codes })
}

/// What a rule's fields and filters ask for, before its matches: a redirect (the
/// action), header and host rewrites, a path rewrite (resolved per match), or why the
/// rule cannot be served as its author asked.
struct RuleSettings {
    action: Option<RouteAction>,
    filters: RuleFilters,
    path_rewrite: Option<types::HttpPathModifier>,
    /// A redirect's ReplacePrefixMatch: resolved per match (it replaces the matched
    /// prefix).
    redirect_prefix: Option<types::HttpPathModifier>,
    /// Each backendRef's RequestHeaderModifier (empty when it has none), in order.
    backend_headers: Vec<HeaderEdits>,
    /// The RequestMirror filters' backends, resolved with the rule's references.
    mirror_refs: Vec<(types::HttpBackendRef, Option<crate::routes::MirrorShare>)>,
}

impl RuleSettings {
    fn of(rule: &types::HttpRouteRule) -> Result<RuleSettings, String> {
        // Served without it, a rule would not do what its author asked: refused.
        if rule.session_persistence.is_some() {
            return Err("rule field sessionPersistence is not served yet".to_string());
        }
        let mut me = RuleSettings {
            action: None,
            filters: RuleFilters::default(),
            path_rewrite: None,
            redirect_prefix: None,
            backend_headers: Vec::new(),
            mirror_refs: Vec::new(),
        };
        let mut seen: Vec<&str> = Vec::new();
        for f in &rule.filters {
            // RequestMirror may be given more than once (one per mirror).
            if seen.contains(&f.type_.as_str()) && f.type_ != "RequestMirror" {
                return Err(format!("filter {} is given twice in one rule", f.type_));
            }
            seen.push(&f.type_);
            me.filter(f)?;
        }
        if me.action.is_some()
            && (!me.filters.is_empty() || me.path_rewrite.is_some() || !me.mirror_refs.is_empty())
        {
            // The spec forbids RequestRedirect with URLRewrite; header modifiers of a
            // redirect would have nothing to modify that is forwarded.
            return Err("RequestRedirect with another filter is not served".to_string());
        }
        // After that check: a redirect's timeouts have nothing to wait for, not a
        // filter beside the redirect.
        if let Some(t) = &rule.timeouts {
            me.filters.timeout = timeout(t)?;
        }
        if let Some(r) = &rule.retry {
            me.filters.retry = Some(retry(r)?);
            // The proxy's timeout is per try: a request timeout must bound the tries
            // together, which neither proxy can (backendRequest alone is per try).
            let request = rule
                .timeouts
                .as_ref()
                .and_then(|t| t.request.as_deref())
                .map(TimeoutMs::parse_duration);
            if let Some(Ok(Some(_))) = request {
                return Err(
                    "retry with timeouts.request is not served: the proxy's timeout bounds each try, not the request and its retries together (timeouts.backendRequest is per try)"
                        .to_string(),
                );
            }
        }
        me.backend_filters(rule)?;
        Ok(me)
    }

    /// The rule's backends' own filters: RequestHeaderModifier is served, after the
    /// rule's edits and on names of its own; any other is refused, never ignored.
    fn backend_filters(&mut self, rule: &types::HttpRouteRule) -> Result<(), String> {
        // A backend's own filters: RequestHeaderModifier is served; any other is
        // refused, never ignored (the request would reach the backend without it).
        for (i, b) in rule.backend_refs.iter().enumerate() {
            let mut edits = HeaderEdits::default();
            for (k, f) in b.filters.iter().enumerate() {
                let what = format!("backendRefs[{i}] RequestHeaderModifier");
                match (f.type_.as_str(), &f.request_header_modifier) {
                    ("RequestHeaderModifier", Some(m)) if k == 0 => {
                        edits = header_edits(m, &what)?;
                    }
                    ("RequestHeaderModifier", Some(_)) => {
                        return Err(format!(
                            "backendRefs[{i}]: filter {} is given twice",
                            f.type_
                        ))
                    }
                    ("RequestHeaderModifier", None) => {
                        return Err(format!("{what}: requestHeaderModifier is missing"))
                    }
                    (t, _) => return Err(format!("backendRefs filter {t} is not served yet")),
                }
            }
            // Served exactly: after the rule's edits, on names of its own (nginx would
            // send a header both change twice).
            if let Some(n) = edits
                .names()
                .find(|n| self.filters.request_headers.names().any(|r| r == *n))
            {
                return Err(format!(
                    "backendRefs[{i}] RequestHeaderModifier: header {n} is changed by the rule's RequestHeaderModifier too"
                ));
            }
            self.backend_headers.push(edits);
        }
        // A backend with edits once per rule: the proxies pick the edits by the backend
        // drawn.
        let with_edits: Vec<_> = rule
            .backend_refs
            .iter()
            .zip(&self.backend_headers)
            .filter(|(_, e)| !e.is_empty())
            .map(|(b, _)| (&b.namespace, &b.name, b.port))
            .collect();
        for (i, b) in rule.backend_refs.iter().enumerate() {
            let key = (&b.namespace, &b.name, b.port);
            let n = rule
                .backend_refs
                .iter()
                .filter(|o| (&o.namespace, &o.name, o.port) == key)
                .count();
            if n > 1 && with_edits.contains(&key) {
                return Err(format!(
                    "backendRefs[{i}]: backend {} is referenced more than once in the rule, with a RequestHeaderModifier",
                    b.name
                ));
            }
        }
        Ok(())
    }

    /// One filter of the rule.
    fn filter(&mut self, f: &types::HttpRouteFilter) -> Result<(), String> {
        let done = match f.type_.as_str() {
            "RequestRedirect" => f.request_redirect.as_ref().map(|rd| {
                self.redirect_prefix = rd.path.clone().filter(|p| p.type_ == "ReplacePrefixMatch");
                redirect(rd).map(|a| {
                    self.action = Some(a);
                })
            }),
            "RequestHeaderModifier" => f.request_header_modifier.as_ref().map(|m| {
                header_edits(m, "RequestHeaderModifier").map(|e| self.filters.request_headers = e)
            }),
            "ResponseHeaderModifier" => f.response_header_modifier.as_ref().map(|m| {
                header_edits(m, "ResponseHeaderModifier").map(|e| self.filters.response_headers = e)
            }),
            "URLRewrite" => f.url_rewrite.as_ref().map(|u| {
                let host = match &u.hostname {
                    None => None,
                    Some(h) => match hostname(h).filter(|h| !h.is_wildcard()) {
                        Some(h) => Some(h),
                        None => return Err("URLRewrite: invalid hostname".to_string()),
                    },
                };
                self.filters.rewrite_host = host;
                self.path_rewrite = u.path.clone();
                Ok(())
            }),
            "RequestMirror" => f.request_mirror.as_ref().map(|m| {
                // A share of the requests (`percent`, or `fraction` whose denominator is
                // 100 unless given), each request drawn at random; none is no mirror.
                let (numerator, denominator) = match (m.percent, &m.fraction) {
                    (None, None) => (1, 1),
                    (Some(p), None) => (i64::from(p), 100),
                    (None, Some(f)) => (
                        f.get("numerator").and_then(|n| n.as_i64()).unwrap_or(-1),
                        f.get("denominator").and_then(|d| d.as_i64()).unwrap_or(100),
                    ),
                    (Some(_), Some(_)) => {
                        return Err("RequestMirror: percent and fraction are exclusive".to_string())
                    }
                };
                if numerator == 0 && denominator > 0 {
                    return Ok(());
                }
                let share = crate::routes::MirrorShare::of(numerator, denominator)
                    .map_err(|why| format!("RequestMirror: {why}"))?;
                self.mirror_refs.push((m.backend_ref.clone(), share));
                Ok(())
            }),
            "CORS" => f
                .cors
                .as_ref()
                .map(|c| cors(c).map(|c| self.filters.cors = Some(c))),
            t => Some(Err(format!("filter {t} is not served yet"))),
        };
        done.unwrap_or_else(|| Err(format!("filter {} lacks its settings", f.type_)))
    }

    /// The rule for one of its matches.
    fn rule_for(
        &self,
        m: &types::HttpRouteMatch,
        action: &RouteAction,
    ) -> Result<RouteRule, String> {
        let (method, headers, query) = conditions(m)?;
        let path = m.path.clone().unwrap_or_default();
        let value = path.value.as_deref().unwrap_or("/");
        let Ok(p) = value.parse::<HttpPath>() else {
            return Err(format!(
                "path {:?} is not a valid URL path",
                value.chars().take(80).collect::<String>()
            ));
        };
        let pm = match path.type_.as_deref().unwrap_or("PathPrefix") {
            "PathPrefix" => PathMatch::prefix(&p),
            "Exact" => PathMatch::Exact(p),
            t => return Err(format!("path match type {t} is not served")),
        };
        let mut filters = self.filters.clone();
        if let Some(m) = &self.path_rewrite {
            filters.rewrite_path = Some(path_rewrite_for(m, &pm, "URLRewrite")?);
        }
        let mut action = action.clone();
        if let (Some(m), RouteAction::Redirect(rd)) = (&self.redirect_prefix, &mut action) {
            rd.replace_prefix = Some(path_rewrite_for(m, &pm, "RequestRedirect")?);
        }
        Ok(RouteRule {
            matches: RouteMatch {
                path: pm,
                method,
                headers,
                query,
            },
            action,
            filters,
            owner: None,
        })
    }
}

/// A rule without a redirect forwards to its backends: each resolved (the first that
/// does not resolve says why in `refs`). The share of requests an invalid backend would
/// have had gets 500 (the spec), and so does a rule with no valid backend, or whose every
/// backend has weight 0.
fn forward(
    input: &GatewayInput<'_>,
    rule: &types::HttpRouteRule,
    backend_headers: &[HeaderEdits],
    (kind, rns, services): (&str, &str, &crate::translate::refs::ServiceRefs<'_>),
    backends: &mut BTreeMap<BackendId, BackendState>,
    refs: &mut Condition,
) -> RouteAction {
    let mut weighted = Vec::new();
    let mut invalid: u16 = 0;
    for (i, b) in rule.backend_refs.iter().enumerate() {
        match backend(input, b, (kind, rns, "TCP"), services, backends) {
            Ok(Some(mut w)) => {
                w.request_headers = backend_headers.get(i).cloned().unwrap_or_default();
                weighted.push(w)
            }
            Ok(None) => {}
            Err((reason, why)) => {
                let w = b.weight.unwrap_or(1).clamp(0, i32::from(u16::MAX));
                invalid = invalid.saturating_add(u16::try_from(w).unwrap_or(0));
                if refs.status {
                    *refs = Condition::new(ConditionType::ResolvedRefs, false, reason, why);
                }
            }
        }
    }
    if weighted.is_empty() {
        RouteAction::Respond {
            status: FixedStatus::InternalServerError500,
        }
    } else {
        RouteAction::Forward {
            backends: weighted,
            invalid,
        }
    }
}
