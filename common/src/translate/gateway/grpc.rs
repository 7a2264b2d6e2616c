//! GRPCRoute (Gateway API standard channel since v1.1) as an HTTPRoute of the same
//! meaning, which [`super::translate`] then places like any other, under the kind
//! `GRPCRoute` (listener kinds, ReferenceGrants, statuses).
//!
//! A gRPC call is an HTTP/2 `POST /<service>/<method>`, so:
//!
//! - a method match `Exact` with `service` and `method` is the path `Exact
//!   /<service>/<method>`; with `service` alone, the path prefix `/<service>` (element-wise:
//!   `/<service>/<any method>`); with neither (no method match), every path. A `method`
//!   without `service` ("this method of any service") has no path form in the route
//!   model: refused. `RegularExpression` is served only when its values are literal
//!   names (no regex operator, `\.` for a dot): then it is the `Exact` match of those
//!   names; any other regex is refused (the rule would match what its author did not
//!   mean, or nothing).
//! - header matches are an HTTPRoute's (`Exact`; `RegularExpression` is refused there);
//! - filters `RequestHeaderModifier` and `ResponseHeaderModifier` are an HTTPRoute's;
//!   any other (`RequestMirror`, `ExtensionRef`) is refused by the HTTPRoute translation;
//! - backends speak HTTP/2 in cleartext (h2c) whatever their Service port's
//!   `appProtocol` says: a gRPC server does (k8slb has no backend TLS for routes).
//!
//! A refusal is `Accepted: False`, reason `UnsupportedValue`, with the message
//! [`to_http`] gives: the route is not served rather than served wrongly.

use super::types::{HttpBackendRef, HttpPathMatch, HttpRoute, HttpRouteFilter, HttpRouteMatch};
use super::types::{HttpRouteRule, HttpRouteSpec, NameValueMatch, ParentRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// The kind, as the API names it (listener `supportedKinds`, ReferenceGrant `from`).
pub const KIND: &str = "GRPCRoute";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRoute {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: GrpcRouteSpec,
    /// As observed: other controllers' `parents` entries are kept as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ParentRef>,
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<GrpcRouteRule>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteRule {
    /// The rule's name (named rules, GEP-995): no effect on routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub matches: Vec<GrpcRouteMatch>,
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
    /// Not served (experimental): read only to refuse the rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_persistence: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<GrpcMethodMatch>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<NameValueMatch>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcMethodMatch {
    /// `Exact` (the default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// A service name as the CRD allows it (`pkg.sub.Service`): dot-separated identifiers.
fn valid_service(s: &str) -> bool {
    let s = s.strip_prefix('.').unwrap_or(s);
    !s.is_empty() && s.len() <= 1024 && s.split('.').all(valid_ident)
}

/// A method name as the CRD allows it: an identifier.
fn valid_method(s: &str) -> bool {
    s.len() <= 1024 && valid_ident(s)
}

fn valid_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// A `RegularExpression` value that is a literal name (`\.` for a dot, nothing else
/// escaped, no operator): the name; else `None`.
fn literal(regex: &str) -> Option<String> {
    let unescaped = regex.replace("\\.", ".");
    unescaped
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        .then_some(unescaped)
        // A bare `.` in the regex matches any character: not a literal dot.
        .filter(|_| !regex.replace("\\.", "").contains('.'))
}

/// The path match of one method match, or why it cannot be served.
fn path_of(m: &GrpcMethodMatch) -> Result<Option<HttpPathMatch>, String> {
    let regex = match m.type_.as_deref().unwrap_or("Exact") {
        "Exact" => false,
        "RegularExpression" => true,
        other => {
            return Err(format!(
                "method match type {:?} is not Exact or RegularExpression",
                crate::problem::cut(other, 30)
            ))
        }
    };
    let name = |v: &Option<String>, what: &str| -> Result<Option<String>, String> {
        match v {
            None => Ok(None),
            Some(v) if !regex => Ok(Some(v.clone())),
            Some(v) => literal(v).map(Some).ok_or_else(|| {
                format!(
                    "method match {what} {:?}: only a literal name is served as a RegularExpression (the route model has no regular expressions on paths)",
                    crate::problem::cut(v, 60)
                )
            }),
        }
    };
    let (service, method) = (name(&m.service, "service")?, name(&m.method, "method")?);
    if let Some(s) = &service {
        if !valid_service(s) {
            return Err(format!(
                "method match service {:?} is not a valid gRPC service name",
                crate::problem::cut(s, 60)
            ));
        }
    }
    if let Some(x) = &method {
        if !valid_method(x) {
            return Err(format!(
                "method match method {:?} is not a valid gRPC method name",
                crate::problem::cut(x, 60)
            ));
        }
    }
    Ok(match (service, method) {
        (Some(s), Some(x)) => Some(HttpPathMatch {
            type_: Some("Exact".into()),
            value: Some(format!("/{}/{x}", s.trim_start_matches('.'))),
        }),
        (Some(s), None) => Some(HttpPathMatch {
            type_: Some("PathPrefix".into()),
            value: Some(format!("/{}", s.trim_start_matches('.'))),
        }),
        (None, Some(x)) => {
            return Err(format!(
                "method match {x:?} without a service (any service's method) cannot be served: the route model matches paths by exact value or prefix only"
            ))
        }
        (None, None) => None,
    })
}

/// The HTTPRoute that means what `r` means (see the module documentation), or why `r`
/// cannot be served.
pub fn to_http(r: &GrpcRoute) -> Result<HttpRoute, String> {
    let mut rules = Vec::with_capacity(r.spec.rules.len());
    for rule in &r.spec.rules {
        // A mirror copy goes as HTTP/1.1 (nginx's mirror location): not to a gRPC
        // server; refused rather than sent in the wrong protocol.
        if rule.filters.iter().any(|f| f.type_ == "RequestMirror") {
            return Err("RequestMirror on a GRPCRoute is not served".to_string());
        }
        let mut matches = Vec::with_capacity(rule.matches.len());
        for m in &rule.matches {
            let path = match &m.method {
                Some(mm) => path_of(mm)?,
                None => None,
            };
            matches.push(HttpRouteMatch {
                path,
                headers: m.headers.clone(),
                query_params: Vec::new(),
                method: None,
            });
        }
        rules.push(HttpRouteRule {
            matches,
            filters: rule.filters.clone(),
            backend_refs: rule.backend_refs.clone(),
            timeouts: None,
            retry: None,
            session_persistence: rule.session_persistence.clone(),
        });
    }
    Ok(HttpRoute {
        metadata: r.metadata.clone(),
        spec: HttpRouteSpec {
            parent_refs: r.spec.parent_refs.clone(),
            hostnames: r.spec.hostnames.clone(),
            rules,
        },
        status: None,
    })
}

/// `r`'s parents and hostnames without its rules: how a refused GRPCRoute still
/// attaches (and gets its `Accepted: False` on each parent).
pub fn without_rules(r: &GrpcRoute) -> HttpRoute {
    HttpRoute {
        metadata: r.metadata.clone(),
        spec: HttpRouteSpec {
            parent_refs: r.spec.parent_refs.clone(),
            hostnames: r.spec.hostnames.clone(),
            rules: Vec::new(),
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mm(t: Option<&str>, s: Option<&str>, m: Option<&str>) -> GrpcMethodMatch {
        GrpcMethodMatch {
            type_: t.map(Into::into),
            service: s.map(Into::into),
            method: m.map(Into::into),
        }
    }

    fn path(p: Result<Option<HttpPathMatch>, String>) -> String {
        match p {
            Ok(Some(p)) => format!("{} {}", p.type_.unwrap(), p.value.unwrap()),
            Ok(None) => "any".into(),
            Err(_) => "refused".into(),
        }
    }

    #[test]
    fn method_matches_become_paths_or_are_refused() {
        let svc = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";
        let esc = "gateway_api_conformance\\.echo_basic\\.grpcecho\\.GrpcEcho";
        // (type, service, method, the path match, why)
        let table = [
            (
                None,
                Some(svc),
                Some("Echo"),
                format!("Exact /{svc}/Echo"),
                "service and method",
            ),
            (
                None,
                Some(svc),
                None,
                format!("PathPrefix /{svc}"),
                "a whole service",
            ),
            (
                None,
                None,
                Some("Echo"),
                "refused".into(),
                "any service's method",
            ),
            (
                Some("RegularExpression"),
                Some(esc),
                Some("Echo"),
                format!("Exact /{svc}/Echo"),
                "literal regexes",
            ),
            (
                Some("RegularExpression"),
                Some(svc),
                Some("Echo"),
                "refused".into(),
                "an unescaped dot matches any character",
            ),
            (
                Some("RegularExpression"),
                Some(esc),
                Some("Echo.*"),
                "refused".into(),
                "an operator",
            ),
            (
                None,
                Some("a/b"),
                Some("Echo"),
                "refused".into(),
                "not a service name",
            ),
            (
                None,
                Some(svc),
                Some("Echo Two"),
                "refused".into(),
                "not a method name",
            ),
            (
                Some("Prefix"),
                Some(svc),
                None,
                "refused".into(),
                "no such type",
            ),
        ];
        for (t, s, m, want, why) in table {
            assert_eq!(path(path_of(&mm(t, s, m))), want, "{why}");
        }
    }
}
