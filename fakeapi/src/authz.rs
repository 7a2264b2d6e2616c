//! Authentication and authorization, as kube-apiserver does them with `--authorization-mode=RBAC`
//! (plus the privileged group `system:masters`).
//!
//! - **Who** ([`User`]): a bearer token names an identity the fake handed out (the admin,
//!   a ServiceAccount, a user); no token is `system:anonymous`; an unknown token is 401.
//! - **What** ([`Attributes`]): the request's verb, resource, subresource, namespace and
//!   name, derived from the method, path and query exactly as `RequestInfoFactory`
//!   (k8s.io/apiserver `endpoints/request/requestinfo.go`) does.
//! - **Allowed?** ([`authorize`]): `system:masters` always; otherwise the RBAC rules of the
//!   Role, ClusterRole, RoleBinding and ClusterRoleBinding objects in the store, visited as
//!   `DefaultRuleResolver.VisitRulesFor` does and matched as `RuleAllows`, plus the
//!   bootstrap policy's discovery and health paths.
//! - **Refused**: [`forbidden`] builds the real 403 Status (`ForbiddenStatusError`).

use std::collections::HashMap;

use serde_json::Value;

use crate::error::ApiError;
use crate::query::query_bool;
use crate::resources;
use crate::store::{namespace_of, Store};

/// The authenticated user of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    pub fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        }
    }

    pub fn admin() -> Self {
        Self {
            name: "system:admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        }
    }

    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    pub fn named(name: &str, groups: &[&str]) -> Self {
        let mut groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        Self {
            name: name.into(),
            groups,
        }
    }

    fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// What a token stands for. ServiceAccount tokens are bound to their ServiceAccount: once
/// it is gone (or before it exists) the token is refused (401), as a real bound token is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    User(User),
    ServiceAccount { namespace: String, name: String },
}

/// The request attributes the authorizer sees (`authorizer.AttributesRecord`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Attributes {
    pub verb: String,
    pub resource_request: bool,
    pub path: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// `content.IsPathSegmentName`: a name usable as one path segment.
fn is_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains('/') && !name.contains('%')
}

/// The name a field selector pins exactly (`metadata.name=x` or `==`, ANDed with anything).
fn field_selector_name(selector: &str) -> Option<String> {
    let mut found = None;
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if term.contains("!=") {
            continue;
        }
        let (field, value) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .map(|(f, v)| (f.trim(), v.trim()))?;
        if field == "metadata.name" {
            found = Some(value.to_string());
        }
    }
    found
}

/// The request's attributes, derived as `RequestInfoFactory.NewRequestInfo` derives them.
pub(crate) fn attributes(method: &str, path: &str, params: &HashMap<String, String>) -> Attributes {
    let mut info = Attributes {
        verb: method.to_ascii_lowercase(),
        path: path.to_string(),
        ..Default::default()
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let parts: Vec<&str> = if path.trim_matches('/').is_empty() {
        Vec::new()
    } else {
        parts
    };
    if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
        return info;
    }
    let mut rest = &parts[1..];
    if parts[0] == "apis" {
        if rest.len() < 3 {
            return info;
        }
        info.group = rest[0].to_string();
        rest = &rest[1..];
    }
    info.resource_request = true;
    info.version = rest[0].to_string();
    rest = &rest[1..];

    if matches!(rest[0], "proxy" | "watch") {
        if rest.len() < 2 {
            return info;
        }
        info.verb = rest[0].to_string();
        rest = &rest[1..];
    } else {
        info.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_string();
    }

    if rest[0] == "namespaces" && rest.len() > 1 {
        info.namespace = rest[1].to_string();
        // A Namespace's own subresources (`status`, `finalize`) stay on `namespaces`.
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    if rest.len() >= 3 && info.verb != "proxy" {
        info.subresource = rest[2].to_string();
    }
    if rest.len() >= 2 {
        info.name = rest[1].to_string();
    }
    if !rest.is_empty() {
        info.resource = rest[0].to_string();
    }

    if info.name.is_empty() && info.verb == "get" {
        info.verb = if query_bool(params, "watch") {
            "watch"
        } else {
            "list"
        }
        .to_string();
        if let Some(name) = params
            .get("fieldSelector")
            .and_then(|s| field_selector_name(s))
            .filter(|n| is_path_segment_name(n))
        {
            info.name = name;
        }
    }
    if info.name.is_empty() && info.verb == "delete" {
        info.verb = "deletecollection".into();
    }
    info
}

/// One RBAC rule (`rbacv1.PolicyRule`), read from a role object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

impl Rule {
    pub fn from_json(v: &Value) -> Self {
        Self {
            verbs: strings(v.get("verbs")),
            api_groups: strings(v.get("apiGroups")),
            resources: strings(v.get("resources")),
            resource_names: strings(v.get("resourceNames")),
            non_resource_urls: strings(v.get("nonResourceURLs")),
        }
    }

    /// `RuleAllows`.
    pub fn allows(&self, a: &Attributes) -> bool {
        let verb = self.verbs.iter().any(|v| v == "*" || *v == a.verb);
        if !a.resource_request {
            return verb
                && self.non_resource_urls.iter().any(|u| {
                    u == "*"
                        || *u == a.path
                        || u.strip_suffix('*')
                            .is_some_and(|prefix| a.path.starts_with(prefix))
                });
        }
        let combined = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        let group = self.api_groups.iter().any(|g| g == "*" || *g == a.group);
        let resource = self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!a.subresource.is_empty()
                    && r.strip_prefix("*/") == Some(a.subresource.as_str()))
        });
        let name = self.resource_names.is_empty() || self.resource_names.contains(&a.name);
        verb && group && resource && name
    }
}

fn rbac_res(plural: &str) -> usize {
    resources::find("rbac.authorization.k8s.io", "v1", plural)
        .unwrap_or_else(|| panic!("the resource table serves rbac.authorization.k8s.io {plural}"))
}

/// `appliesToUser` for one binding subject.
fn subject_applies(user: &User, subject: &Value, binding_namespace: &str) -> bool {
    let s = |k: &str| subject.get(k).and_then(Value::as_str).unwrap_or("");
    match s("kind") {
        "User" => user.name == s("name"),
        "Group" => user.in_group(s("name")),
        "ServiceAccount" => {
            let ns = if s("namespace").is_empty() {
                binding_namespace
            } else {
                s("namespace")
            };
            !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{}", s("name"))
        }
        _ => false,
    }
}

/// The rules a binding's `roleRef` points at, or the lister's NotFound message.
fn role_rules(
    store: &Store,
    binding: &Value,
    binding_namespace: &str,
) -> Result<Vec<Rule>, String> {
    let kind = binding
        .pointer("/roleRef/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = binding
        .pointer("/roleRef/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let role = match kind {
        "Role" => store
            .get_ref(rbac_res("roles"), binding_namespace, name)
            .ok_or_else(|| format!("role.rbac.authorization.k8s.io \"{name}\" not found"))?,
        "ClusterRole" => store
            .get_ref(rbac_res("clusterroles"), "", name)
            .ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io \"{name}\" not found"))?,
        other => return Err(format!("unsupported role reference kind: \"{other}\"")),
    };
    Ok(role
        .get("rules")
        .and_then(Value::as_array)
        .map(|rules| rules.iter().map(Rule::from_json).collect())
        .unwrap_or_default())
}

/// The bootstrap policy's non-resource grants: `system:public-info-viewer` (health and
/// version, to everyone) and `system:discovery` (discovery, to authenticated users).
fn bootstrap_allows(user: &User, a: &Attributes) -> bool {
    if a.resource_request || a.verb != "get" {
        return false;
    }
    let public = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    if public.contains(&a.path.as_str())
        || ["/healthz/", "/livez/", "/readyz/"]
            .iter()
            .any(|p| a.path.starts_with(p))
    {
        return true;
    }
    user.in_group("system:authenticated")
        && (a.path == "/api"
            || a.path == "/apis"
            || a.path.starts_with("/api/")
            || a.path.starts_with("/apis/"))
}

/// Why a request was not allowed: the RBAC evaluation errors (a binding to a missing
/// role), which the real server appends to its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Denied {
    pub reason: String,
}

/// `system:masters` is allowed everything; everyone else gets what RBAC grants.
pub(crate) fn authorize(store: &Store, user: &User, a: &Attributes) -> Result<(), Denied> {
    if user.in_group("system:masters") || bootstrap_allows(user, a) {
        return Ok(());
    }
    let mut errors = Vec::new();
    let mut visit = |binding: &Value, binding_namespace: &str| -> bool {
        let applies = binding
            .get("subjects")
            .and_then(Value::as_array)
            .is_some_and(|subjects| {
                subjects
                    .iter()
                    .any(|s| subject_applies(user, s, binding_namespace))
            });
        if !applies {
            return false;
        }
        match role_rules(store, binding, binding_namespace) {
            Ok(rules) => rules.iter().any(|r| r.allows(a)),
            Err(e) => {
                errors.push(e);
                false
            }
        }
    };
    for binding in store.iter(rbac_res("clusterrolebindings")) {
        if visit(binding, "") {
            return Ok(());
        }
    }
    if !a.namespace.is_empty() {
        let bindings = store
            .iter(rbac_res("rolebindings"))
            .filter(|b| namespace_of(b) == a.namespace);
        for binding in bindings {
            if visit(binding, &a.namespace) {
                return Ok(());
            }
        }
    }
    let reason = match errors.len() {
        0 => String::new(),
        1 => format!("RBAC: {}", errors[0]),
        _ => format!("RBAC: [{}]", errors.join(", ")),
    };
    Err(Denied { reason })
}

/// `forbiddenMessage`.
fn forbidden_message(user: &User, a: &Attributes) -> String {
    if !a.resource_request {
        return format!(
            "User \"{}\" cannot {} path \"{}\"",
            user.name, a.verb, a.path
        );
    }
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    if a.namespace.is_empty() {
        format!(
            "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" at the cluster scope",
            user.name, a.verb, a.group
        )
    } else {
        format!(
            "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" in the namespace \"{}\"",
            user.name, a.verb, a.group, a.namespace
        )
    }
}

/// `ForbiddenStatusError`: 403, reason Forbidden, details {name, group, kind: resource}.
pub(crate) fn forbidden(user: &User, a: &Attributes, denied: &Denied) -> ApiError {
    let mut msg = forbidden_message(user, a);
    if !denied.reason.is_empty() {
        msg = format!("{msg}: {}", denied.reason);
    }
    ApiError::forbidden(&a.group, &a.resource, &a.name, &msg)
}

/// The 401 for a token nobody issued (or whose ServiceAccount is gone).
pub(crate) fn unauthorized() -> ApiError {
    ApiError::unauthorized()
}

/// Resolves a bearer token. `None`: no token (anonymous). `Some(Err)`: 401.
pub(crate) fn authenticate(
    store: &Store,
    tokens: &HashMap<String, Identity>,
    header: Option<&str>,
) -> Option<Result<User, ApiError>> {
    // Like the bearer token authenticator: a header that is not `Bearer <token>` does not
    // authenticate (the request is anonymous); a token nobody issued is 401.
    let header = header?.trim();
    let token = match header.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => return None,
    };
    if token.is_empty() {
        return None;
    }
    Some(match tokens.get(token) {
        Some(Identity::User(u)) => Ok(u.clone()),
        Some(Identity::ServiceAccount { namespace, name }) => {
            let sa = resources::find("", "v1", "serviceaccounts")
                .expect("the resource table serves serviceaccounts");
            if store.get_ref(sa, namespace, name).is_some() {
                Ok(User::service_account(namespace, name))
            } else {
                Err(unauthorized())
            }
        }
        None => Err(unauthorized()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::parse_query;
    use serde_json::json;

    fn attrs(method: &str, url: &str) -> Attributes {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        attributes(method, path, &parse_query(query))
    }

    /// (verb, group, resource, subresource, namespace, name)
    type Row<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str, &'a str);

    fn row(a: &Attributes) -> Row<'_> {
        (
            &a.verb,
            &a.group,
            &a.resource,
            &a.subresource,
            &a.namespace,
            &a.name,
        )
    }

    #[test]
    fn verbs_are_derived_as_the_real_server_derives_them() {
        let cases: &[(&str, &str, Row)] = &[
            ("GET", "/api/v1/namespaces/ns/configmaps/cm", ("get", "", "configmaps", "", "ns", "cm")),
            ("HEAD", "/api/v1/namespaces/ns/configmaps/cm", ("get", "", "configmaps", "", "ns", "cm")),
            ("GET", "/api/v1/namespaces/ns/configmaps", ("list", "", "configmaps", "", "ns", "")),
            ("GET", "/api/v1/namespaces/ns/configmaps?watch=true", ("watch", "", "configmaps", "", "ns", "")),
            ("GET", "/api/v1/namespaces/ns/configmaps?watch=1", ("watch", "", "configmaps", "", "ns", "")),
            ("GET", "/api/v1/namespaces/ns/configmaps?watch=", ("watch", "", "configmaps", "", "ns", "")),
            ("GET", "/api/v1/namespaces/ns/configmaps?watch=0", ("list", "", "configmaps", "", "ns", "")),
            ("GET", "/api/v1/namespaces/ns/configmaps?watch=False", ("list", "", "configmaps", "", "ns", "")),
            // A list or watch pinned to one name by a field selector is about that name.
            ("GET", "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dcm", ("list", "", "configmaps", "", "ns", "cm")),
            ("GET", "/api/v1/namespaces/ns/configmaps?watch=1&fieldSelector=metadata.name%3D%3Dcm%2Cx%3Dy", ("watch", "", "configmaps", "", "ns", "cm")),
            ("GET", "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%21%3Dcm", ("list", "", "configmaps", "", "ns", "")),
            ("GET", "/api/v1/services", ("list", "", "services", "", "", "")),
            ("GET", "/api/v1/nodes?watch=true", ("watch", "", "nodes", "", "", "")),
            ("POST", "/api/v1/namespaces/ns/events", ("create", "", "events", "", "ns", "")),
            ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", ("update", "coordination.k8s.io", "leases", "", "ns", "l")),
            ("PATCH", "/api/v1/namespaces/ns/services/web/status", ("patch", "", "services", "status", "ns", "web")),
            ("DELETE", "/api/v1/namespaces/ns/configmaps/cm", ("delete", "", "configmaps", "", "ns", "cm")),
            ("DELETE", "/api/v1/namespaces/ns/configmaps", ("deletecollection", "", "configmaps", "", "ns", "")),
            ("GET", "/apis/discovery.k8s.io/v1/endpointslices", ("list", "discovery.k8s.io", "endpointslices", "", "", "")),
            // A Namespace is in itself; its status stays a subresource of namespaces.
            ("GET", "/api/v1/namespaces/ns", ("get", "", "namespaces", "", "ns", "ns")),
            ("PUT", "/api/v1/namespaces/ns/status", ("update", "", "namespaces", "status", "ns", "ns")),
            ("GET", "/api/v1/namespaces", ("list", "", "namespaces", "", "", "")),
            ("GET", "/api/v1/watch/namespaces/ns/pods", ("watch", "", "pods", "", "ns", "")),
        ];
        for (method, url, want) in cases {
            let a = attrs(method, url);
            assert!(a.resource_request, "{method} {url}");
            assert_eq!(row(&a), *want, "{method} {url}");
        }
        for url in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/version",
            "/healthz",
        ] {
            let a = attrs("GET", url);
            assert!(!a.resource_request, "{url}");
            assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", url));
        }
    }

    fn rule(v: Value) -> Rule {
        Rule::from_json(&v)
    }

    #[test]
    fn rules_match_verbs_groups_resources_subresources_and_names() {
        let a = |method: &str, url: &str| attrs(method, url);
        let cm_list =
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]});
        let named = json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cm"], "verbs": ["*"]});
        let status =
            json!({"apiGroups": [""], "resources": ["services/status"], "verbs": ["patch"]});
        let any_status = json!({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]});
        let all = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
        let cases: &[(&Value, &str, &str, bool)] = &[
            (&cm_list, "GET", "/api/v1/namespaces/ns/configmaps", true),
            (
                &cm_list,
                "GET",
                "/api/v1/namespaces/ns/configmaps?watch=1",
                true,
            ),
            (
                &cm_list,
                "GET",
                "/api/v1/namespaces/ns/configmaps/cm",
                false,
            ),
            (
                &cm_list,
                "GET",
                "/apis/apps/v1/namespaces/ns/configmaps",
                false,
            ),
            (&cm_list, "GET", "/api/v1/namespaces/ns/secrets", false),
            // resourceNames: only requests that name an object.
            (&named, "GET", "/api/v1/namespaces/ns/configmaps/cm", true),
            (&named, "PATCH", "/api/v1/namespaces/ns/configmaps/cm", true),
            (
                &named,
                "GET",
                "/api/v1/namespaces/ns/configmaps/other",
                false,
            ),
            (&named, "POST", "/api/v1/namespaces/ns/configmaps", false),
            (&named, "GET", "/api/v1/namespaces/ns/configmaps", false),
            (
                &named,
                "GET",
                "/api/v1/namespaces/ns/configmaps?watch=true",
                false,
            ),
            (
                &named,
                "GET",
                "/api/v1/namespaces/ns/configmaps?watch=true&fieldSelector=metadata.name%3Dcm",
                true,
            ),
            (&named, "DELETE", "/api/v1/namespaces/ns/configmaps", false),
            // Subresources are separate resources.
            (
                &status,
                "PATCH",
                "/api/v1/namespaces/ns/services/web/status",
                true,
            ),
            (
                &status,
                "PATCH",
                "/api/v1/namespaces/ns/services/web",
                false,
            ),
            (
                &status,
                "PUT",
                "/api/v1/namespaces/ns/services/web/status",
                false,
            ),
            (
                &any_status,
                "GET",
                "/apis/apps/v1/namespaces/ns/deployments/d/status",
                true,
            ),
            (
                &any_status,
                "GET",
                "/apis/apps/v1/namespaces/ns/deployments/d",
                false,
            ),
            (
                &all,
                "DELETE",
                "/apis/apps/v1/namespaces/ns/deployments",
                true,
            ),
            (
                &all,
                "GET",
                "/api/v1/namespaces/ns/services/web/status",
                true,
            ),
        ];
        for (r, method, url, want) in cases {
            assert_eq!(
                rule((*r).clone()).allows(&a(method, url)),
                *want,
                "{r} {method} {url}"
            );
        }
        let nonres = rule(json!({"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]}));
        assert!(nonres.allows(&a("GET", "/metrics")));
        assert!(nonres.allows(&a("GET", "/logs/x")));
        assert!(!nonres.allows(&a("GET", "/metricsz")));
        assert!(!nonres.allows(&a("GET", "/api/v1/namespaces/ns/configmaps")));
    }

    fn store_with(objects: Vec<Value>) -> Store {
        let mut store = Store::new(100);
        for o in objects {
            store.put(o).unwrap();
        }
        store
    }

    fn role(kind: &str, ns: Option<&str>, name: &str, rules: Value) -> Value {
        let mut v = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
            "metadata": {"name": name}, "rules": rules});
        if let Some(ns) = ns {
            v["metadata"]["namespace"] = json!(ns);
        }
        v
    }

    fn binding(
        kind: &str,
        ns: Option<&str>,
        name: &str,
        role_kind: &str,
        role: &str,
        subjects: Value,
    ) -> Value {
        let mut v = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": subjects});
        if let Some(ns) = ns {
            v["metadata"]["namespace"] = json!(ns);
        }
        v
    }

    #[test]
    fn bindings_grant_in_their_scope_only() {
        let sa = json!([{"kind": "ServiceAccount", "name": "app", "namespace": "team-a"}]);
        let store = store_with(vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}}),
            role(
                "Role",
                Some("team-a"),
                "cm",
                json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
            ),
            role(
                "ClusterRole",
                None,
                "svc-reader",
                json!([{"apiGroups": [""], "resources": ["services"], "verbs": ["list"]}]),
            ),
            role(
                "ClusterRole",
                None,
                "node-reader",
                json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]),
            ),
            binding(
                "RoleBinding",
                Some("team-a"),
                "cm",
                "Role",
                "cm",
                sa.clone(),
            ),
            binding(
                "RoleBinding",
                Some("team-a"),
                "svc",
                "ClusterRole",
                "svc-reader",
                sa.clone(),
            ),
            binding(
                "ClusterRoleBinding",
                None,
                "nodes",
                "ClusterRole",
                "node-reader",
                sa.clone(),
            ),
            // A RoleBinding's ServiceAccount subject without a namespace is in the binding's.
            binding(
                "RoleBinding",
                Some("team-b"),
                "local",
                "ClusterRole",
                "svc-reader",
                json!([{"kind": "ServiceAccount", "name": "app"}]),
            ),
            binding(
                "RoleBinding",
                Some("team-b"),
                "group",
                "Role",
                "missing",
                json!([{"kind": "Group", "name": "system:serviceaccounts:team-a"}]),
            ),
        ]);
        let app = User::service_account("team-a", "app");
        let local = User::service_account("team-b", "app");
        let check =
            |u: &User, method: &str, url: &str| authorize(&store, u, &attrs(method, url)).is_ok();
        assert!(check(&app, "GET", "/api/v1/namespaces/team-a/configmaps/x"));
        assert!(
            !check(&app, "GET", "/api/v1/namespaces/team-b/configmaps/x"),
            "a Role only in its namespace"
        );
        assert!(
            check(&app, "GET", "/api/v1/namespaces/team-a/services"),
            "ClusterRole via RoleBinding"
        );
        assert!(
            !check(&app, "GET", "/api/v1/namespaces/team-b/services"),
            "ClusterRole via RoleBinding: that namespace only"
        );
        assert!(
            !check(&app, "GET", "/api/v1/services"),
            "ClusterRole via RoleBinding: not cluster-wide"
        );
        assert!(
            check(&app, "GET", "/api/v1/nodes"),
            "ClusterRoleBinding: cluster scope"
        );
        assert!(
            check(&app, "GET", "/api/v1/namespaces/team-b/nodes"),
            "ClusterRoleBinding: every namespace"
        );
        assert!(check(&local, "GET", "/api/v1/namespaces/team-b/services"));
        assert!(!check(&local, "GET", "/api/v1/nodes"));
        assert!(!check(&User::anonymous(), "GET", "/api/v1/nodes"));
        assert!(check(&User::admin(), "DELETE", "/api/v1/nodes"));
        // Discovery needs authentication; health does not.
        assert!(check(&app, "GET", "/apis"));
        assert!(!check(&User::anonymous(), "GET", "/apis"));
        assert!(check(&User::anonymous(), "GET", "/healthz"));
        // A binding to a missing role is an error the message carries.
        let denied = authorize(
            &store,
            &app,
            &attrs("GET", "/api/v1/namespaces/team-b/secrets"),
        )
        .unwrap_err();
        assert_eq!(
            denied.reason,
            "RBAC: role.rbac.authorization.k8s.io \"missing\" not found"
        );
    }

    #[test]
    fn forbidden_status_is_the_real_one() {
        let u = User::service_account("k8slb-system", "watcher");
        let a = attrs("POST", "/api/v1/namespaces/k8slb-system/configmaps");
        let mut a = a;
        a.name = "k8slb-state".into();
        let status = forbidden(
            &u,
            &a,
            &Denied {
                reason: String::new(),
            },
        )
        .to_status();
        assert_eq!(status["code"], 403);
        assert_eq!(status["reason"], "Forbidden");
        assert_eq!(
            status["message"],
            "configmaps \"k8slb-state\" is forbidden: User \"system:serviceaccount:k8slb-system:watcher\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"k8slb-system\""
        );
        assert_eq!(
            status["details"],
            json!({"name": "k8slb-state", "kind": "configmaps"})
        );
        let a = attrs("GET", "/api/v1/nodes");
        let status = forbidden(
            &u,
            &a,
            &Denied {
                reason: String::new(),
            },
        )
        .to_status();
        assert_eq!(
            status["message"],
            "nodes is forbidden: User \"system:serviceaccount:k8slb-system:watcher\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
        );
        let a = attrs(
            "PATCH",
            "/apis/coordination.k8s.io/v1/namespaces/x/leases/l",
        );
        let status = forbidden(
            &u,
            &a,
            &Denied {
                reason: "RBAC: oops".into(),
            },
        )
        .to_status();
        assert_eq!(
            status["message"],
            "leases.coordination.k8s.io \"l\" is forbidden: User \"system:serviceaccount:k8slb-system:watcher\" cannot patch resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"x\": RBAC: oops"
        );
        assert_eq!(
            status["details"],
            json!({"name": "l", "group": "coordination.k8s.io", "kind": "leases"})
        );
        let a = attrs("GET", "/metrics");
        let status = forbidden(
            &User::anonymous(),
            &a,
            &Denied {
                reason: String::new(),
            },
        )
        .to_status();
        assert_eq!(
            status["message"],
            "forbidden: User \"system:anonymous\" cannot get path \"/metrics\""
        );
    }
}
