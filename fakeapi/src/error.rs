//! API errors, rendered as real `Status` objects.

use serde_json::{json, Value};

use crate::resources::Resource;

/// `StatusDetails` as the real server serialises it: empty fields are left out.
fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut d = serde_json::Map::new();
    for (k, v) in [("name", name), ("group", group), ("kind", kind)] {
        if !v.is_empty() {
            d.insert(k.into(), json!(v));
        }
    }
    Value::Object(d)
}

/// An error the fake answers with: the HTTP code and the `Status` body the real API server
/// would send.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn not_found(res: &Resource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", res.qualified_plural()),
        )
        .with_details(details(name, res.group, res.plural))
    }

    /// NamespaceLifecycle: a create in a namespace that does not exist.
    pub fn namespace_not_found(namespace: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("namespaces \"{namespace}\" not found"),
        )
        .with_details(details(namespace, "", "namespaces"))
    }

    /// `apierrors.NewForbidden`: 403 with the group/resource and name in the message
    /// and the details (`kind` is the resource, as in the real server).
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let qualified = if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        };
        let message = if qualified.is_empty() {
            format!("forbidden: {why}")
        } else if name.is_empty() {
            format!("{qualified} is forbidden: {why}")
        } else {
            format!("{qualified} \"{name}\" is forbidden: {why}")
        };
        Self::new(403, "Forbidden", message).with_details(details(name, group, resource))
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn path_not_found(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    pub fn already_exists(res: &Resource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", res.qualified_plural()),
        )
        .with_details(details(name, res.group, res.plural))
    }

    pub fn conflict(res: &Resource, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                res.qualified_plural()
            ),
        )
        .with_details(details(name, res.group, res.plural))
    }

    pub fn stale(res: &Resource, name: &str) -> Self {
        Self::conflict(
            res,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn apply_conflict(res: &Resource, name: &str, message: String, causes: Vec<Value>) -> Self {
        Self::new(409, "Conflict", message).with_details(
            json!({"name": name, "group": res.group, "kind": res.plural, "causes": causes}),
        )
    }

    pub fn invalid(res: &Resource, name: &str, field: &str, value: &str, why: &str) -> Self {
        Self::invalid_detail(
            res,
            name,
            field,
            &format!("Invalid value: \"{value}\": {why}"),
            "FieldValueInvalid",
        )
    }

    /// 422 with one cause; `detail` is what follows `<field>: ` (e.g. `Too long: ...`).
    pub fn invalid_detail(
        res: &Resource,
        name: &str,
        field: &str,
        detail: &str,
        cause: &str,
    ) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {field}: {detail}", res.kind),
        )
        .with_details(json!({
            "name": name,
            "group": res.group,
            "kind": res.kind,
            "causes": [{"reason": cause, "message": detail, "field": field}],
        }))
    }

    /// 422 as kube-apiserver answers a custom resource its CRD's schema refuses: the
    /// qualified kind (`Gateway.gateway.networking.k8s.io`) in the message, every cause
    /// listed (in brackets when there are several), each with its reason and field.
    pub fn invalid_causes(res: &Resource, name: &str, causes: &[crate::schema::Cause]) -> Self {
        let qualified = if res.group.is_empty() {
            res.kind.to_string()
        } else {
            format!("{}.{}", res.kind, res.group)
        };
        let lines: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.detail))
            .collect();
        let listed = match lines.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {listed}"),
        )
        .with_details(json!({
            "name": name,
            "group": res.group,
            "kind": res.kind,
            "causes": causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.detail, "field": c.field}))
                .collect::<Vec<_>>(),
        }))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type:?})"),
        )
    }

    /// A strategic merge patch of a custom resource, which a real server refuses.
    pub fn unsupported_media_type_for_custom_resource(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type:?})"),
        )
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}
