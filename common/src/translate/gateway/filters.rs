//! An HTTPRoute rule's filters into the route model: header edits, path rewrites,
//! redirects, CORS, and the conditions of a match.

use super::*;

/// Headers a filter may not change: Host has URLRewrite's `hostname`; the framing and
/// connection headers belong to the proxy; the client certificate headers are k8slb's
/// word to a backend (an AllowInsecureFallback listener's outcome,
/// [`crate::routes::CLIENT_CERT_VERIFY_HEADER`]): a route may reach another
/// namespace's backend (a ReferenceGrant), which must be able to trust them.
pub(super) const UNMODIFIABLE_HEADERS: [&str; 7] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "k8slb-client-cert-verify",
    "k8slb-client-cert",
];

/// A RequestHeaderModifier's or ResponseHeaderModifier's edits, validated: names and
/// values that can reach a config ([`FieldName`], [`FieldValue`]), each name once across
/// set, add and remove, none of [`UNMODIFIABLE_HEADERS`].
pub(super) fn header_edits(m: &types::HeaderModifier, what: &str) -> Result<HeaderEdits, String> {
    let mut seen: Vec<FieldName> = Vec::new();
    let mut name = |n: &str| -> Result<FieldName, String> {
        let name: FieldName = n
            .to_ascii_lowercase()
            .parse()
            .map_err(|e| format!("{what}: {e}"))?;
        if UNMODIFIABLE_HEADERS.contains(&name.as_str()) {
            return Err(format!("{what}: header {name} cannot be modified"));
        }
        if seen.contains(&name) {
            return Err(format!("{what}: header {name} is named twice"));
        }
        seen.push(name.clone());
        Ok(name)
    };
    let mut pair = |nv: &types::NameValue| -> Result<HeaderValue, String> {
        Ok(HeaderValue {
            name: name(&nv.name)?,
            value: nv
                .value
                .parse()
                .map_err(|e| format!("{what}: value: {e}"))?,
        })
    };
    let set = m.set.iter().map(&mut pair).collect::<Result<Vec<_>, _>>()?;
    let add = m.add.iter().map(&mut pair).collect::<Result<Vec<_>, _>>()?;
    let remove = m
        .remove
        .iter()
        .map(|n| name(n))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(HeaderEdits { set, add, remove })
}

/// A URLRewrite's path for a rule matching `pm`: ReplacePrefixMatch needs a PathPrefix
/// match (the spec), whose prefix it replaces.
pub(super) fn path_rewrite_for(
    m: &types::HttpPathModifier,
    pm: &PathMatch,
    filter: &str,
) -> Result<PathRewrite, String> {
    let path = |v: &Option<String>| {
        v.as_deref()
            .unwrap_or("/")
            .parse::<HttpPath>()
            .map_err(|_| format!("{filter}: invalid path"))
    };
    match (m.type_.as_str(), pm) {
        ("ReplaceFullPath", _) => Ok(PathRewrite::Full {
            path: path(&m.replace_full_path)?,
        }),
        ("ReplacePrefixMatch", PathMatch::Prefix(from)) => Ok(PathRewrite::Prefix {
            from: from.clone(),
            to: path(&m.replace_prefix_match)?,
        }),
        ("ReplacePrefixMatch", _) => Err(format!(
            "{filter} ReplacePrefixMatch needs a PathPrefix match"
        )),
        (t, _) => Err(format!(
            "{filter} path type {} is not served",
            crate::problem::cut(t, 40)
        )),
    }
}

/// A match's method, header and query parameter conditions, validated: Exact matches
/// only (RegularExpression is refused), names and values that can reach a config
/// (see [`FieldName`], [`QueryName`], [`FieldValue`]); of several entries for one name,
/// the first counts (the spec: later ones are ignored).
#[allow(clippy::type_complexity)]
pub(super) fn conditions(
    m: &types::HttpRouteMatch,
) -> Result<(Option<Method>, Vec<HeaderMatch>, Vec<QueryMatch>), String> {
    let short = |s: &str| s.chars().take(80).collect::<String>();
    let method = match &m.method {
        None => None,
        Some(s) => Some(
            s.parse::<Method>()
                .map_err(|_| format!("method {:?} is not an HTTP method", short(s)))?,
        ),
    };
    let exact = |t: &Option<String>, what: &str| match t.as_deref().unwrap_or("Exact") {
        "Exact" => Ok(()),
        t => Err(format!("{what} match type {} is not served", short(t))),
    };
    let value = |v: &str, what: &str| {
        v.parse::<FieldValue>()
            .map_err(|e| format!("{what} value: {e}"))
    };
    let mut headers: Vec<HeaderMatch> = Vec::new();
    for h in &m.headers {
        exact(&h.type_, "header")?;
        let name: FieldName = h
            .name
            .to_ascii_lowercase()
            .parse()
            .map_err(|e| format!("header {e}"))?;
        let value = value(&h.value, "header")?;
        if !headers.iter().any(|x| x.name == name) {
            headers.push(HeaderMatch { name, value });
        }
    }
    headers.sort();
    let mut query: Vec<QueryMatch> = Vec::new();
    for q in &m.query_params {
        exact(&q.type_, "query parameter")?;
        let name: QueryName = q.name.parse().map_err(|e| format!("query {e}"))?;
        let value = value(&q.value, "query parameter")?;
        if !query.iter().any(|x| x.name == name) {
            query.push(QueryMatch { name, value });
        }
    }
    query.sort();
    Ok((method, headers, query))
}

pub(super) fn redirect(rd: &types::RequestRedirect) -> Result<RouteAction, String> {
    let scheme = match rd.scheme.as_deref() {
        None => None,
        Some("http") => Some(Scheme::Http),
        Some("https") => Some(Scheme::Https),
        Some(s) => return Err(format!("redirect scheme {s:?} is not http or https")),
    };
    let host = match &rd.hostname {
        None => None,
        Some(h) => Some(
            hostname(h)
                .filter(|h| !h.is_wildcard())
                .ok_or("invalid redirect hostname")?,
        ),
    };
    let port = match rd.port {
        None => None,
        Some(p) => Some(
            u16::try_from(p)
                .ok()
                .filter(|p| *p > 0)
                .ok_or("invalid redirect port")?,
        ),
    };
    let path = match &rd.path {
        None => None,
        Some(m) if m.type_ == "ReplaceFullPath" => Some(
            m.replace_full_path
                .as_deref()
                .unwrap_or("/")
                .parse::<HttpPath>()
                .map_err(|_| "invalid redirect path".to_string())?,
        ),
        // Resolved per match by the caller (it replaces the matched prefix).
        Some(m) if m.type_ == "ReplacePrefixMatch" => None,
        Some(m) => {
            return Err(format!(
                "redirect path type {} is not served",
                crate::problem::cut(&m.type_, 40)
            ))
        }
    };
    // 301 and 302 are core, 303, 307 and 308 extended; both proxies answer each as is.
    let code = rd.status_code.unwrap_or(302);
    let status = u16::try_from(code)
        .map_err(|_| format!("redirect status {code} is not 301, 302, 303, 307 or 308"))
        .and_then(RedirectStatus::try_from)?;
    Ok(RouteAction::Redirect(Redirect {
        scheme,
        host,
        port,
        path,
        replace_prefix: None,
        status,
    }))
}

/// A CORS filter, checked: origins `scheme://host[:port]` (a host may start with `*.`)
/// or `*`, methods the API names or `*`, header names as a header modifier takes them
/// or `*`, `maxAge` from 1 (the API's default 5). Anything else refuses the route.
pub(super) fn cors(c: &types::CorsFilter) -> Result<crate::routes::Cors, String> {
    let mut out = crate::routes::Cors {
        max_age: 5,
        ..Default::default()
    };
    for o in &c.allow_origins {
        if o == "*" {
            out.any_origin = true;
        } else {
            let o = o.parse().map_err(|e: String| e)?;
            if !out.origins.contains(&o) {
                out.origins.push(o);
            }
        }
    }
    for m in &c.allow_methods {
        if m == "*" {
            out.any_method = true;
        } else {
            let m: Method = m.parse().map_err(|e| format!("CORS allowMethods: {e}"))?;
            if !out.methods.contains(&m) {
                out.methods.push(m);
            }
        }
    }
    let names = |list: &[String], what: &str| -> Result<(bool, Vec<FieldName>), String> {
        let mut any = false;
        let mut v: Vec<FieldName> = Vec::new();
        for n in list {
            if n == "*" {
                any = true;
                continue;
            }
            let n: FieldName = n
                .to_ascii_lowercase()
                .parse()
                .map_err(|e| format!("CORS {what}: {e}"))?;
            if !v.contains(&n) {
                v.push(n);
            }
        }
        Ok((any, v))
    };
    (out.any_header, out.headers) = names(&c.allow_headers, "allowHeaders")?;
    (out.expose_any, out.expose) = names(&c.expose_headers, "exposeHeaders")?;
    out.credentials = c.allow_credentials.unwrap_or(false);
    if let Some(age) = c.max_age {
        out.max_age = u32::try_from(age)
            .ok()
            .filter(|a| *a >= 1)
            .ok_or_else(|| format!("CORS maxAge {age}: must be at least 1"))?;
    }
    Ok(out)
}

#[cfg(test)]
mod reserved_tests {
    use super::UNMODIFIABLE_HEADERS;
    use crate::routes::{CLIENT_CERT_HEADER, CLIENT_CERT_VERIFY_HEADER};

    #[test]
    fn the_client_certificate_headers_are_unmodifiable_by_name() {
        for h in [CLIENT_CERT_VERIFY_HEADER, CLIENT_CERT_HEADER] {
            assert!(UNMODIFIABLE_HEADERS.contains(&h.to_ascii_lowercase().as_str()));
        }
    }
}
