//! What the Gateway API CRDs' OpenAPI schemas (standard channel, v1) refuse in a status
//! write, as kube-apiserver enforces them (422 Invalid): the parts a controller writes.
//! Each status `conditions` list is metav1.Condition (type, status True/False/Unknown,
//! a reason matching `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, a message, an RFC 3339
//! lastTransitionTime, observedGeneration >= 0; at most 8); a Gateway's `addresses`
//! (at most 16, each with a non-empty value) and `listeners` (at most 64, each with name,
//! supportedKinds, attachedRoutes and conditions); a route's (HTTPRoute, and the experimental TLSRoute, TCPRoute, UDPRoute) `parents` (required,
//! at most 32, each with parentRef.name, a domain-prefixed controllerName and 1 to 8
//! conditions). Not modelled: the CEL rules of the spec (they concern `spec`).

use crate::error::ApiError;
use crate::resources::Resource;
use serde_json::Value;

fn reason_ok(r: &str) -> bool {
    let b = r.as_bytes();
    !b.is_empty()
        && r.len() <= 1024
        && b[0].is_ascii_alphabetic()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':'))
        && !matches!(b[b.len() - 1], b',' | b':')
}

/// `2026-11-25T08:00:00Z` (or with fractional seconds, or an offset).
fn rfc3339(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b'T' || b[10] == b't')
        && b[13] == b':'
        && b[16] == b':'
        && [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
            .iter()
            .all(|i| b[*i].is_ascii_digit())
        && (t.ends_with('Z') || t.ends_with('z') || t[19..].contains(['+', '-']))
}

fn controller_name_ok(c: &str) -> bool {
    let Some((domain, path)) = c.split_once('/') else {
        return false;
    };
    !domain.is_empty()
        && domain.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
        && !path.is_empty()
        && c.len() <= 253
}

struct Check<'a> {
    res: &'a Resource,
    name: &'a str,
}

impl Check<'_> {
    fn required(&self, field: &str) -> ApiError {
        ApiError::invalid_detail(
            self.res,
            self.name,
            field,
            "Required value",
            "FieldValueRequired",
        )
    }

    fn invalid(&self, field: &str, value: &str, why: &str) -> ApiError {
        ApiError::invalid(self.res, self.name, field, value, why)
    }

    fn too_many(&self, field: &str, max: usize) -> ApiError {
        ApiError::invalid_detail(
            self.res,
            self.name,
            field,
            &format!("Too many: must have at most {max} items"),
            "FieldValueTooMany",
        )
    }

    fn list<'v>(
        &self,
        v: Option<&'v Value>,
        field: &str,
        max: usize,
    ) -> Result<&'v [Value], ApiError> {
        match v {
            None | Some(Value::Null) => Ok(&[]),
            Some(Value::Array(a)) if a.len() <= max => Ok(a),
            Some(Value::Array(_)) => Err(self.too_many(field, max)),
            Some(other) => Err(self.invalid(field, &other.to_string(), "must be of type array")),
        }
    }

    fn string<'v>(&self, v: &'v Value, key: &str, field: &str) -> Result<&'v str, ApiError> {
        match v.get(key) {
            Some(Value::String(s)) => Ok(s),
            None | Some(Value::Null) => Err(self.required(&format!("{field}.{key}"))),
            Some(other) => Err(self.invalid(
                &format!("{field}.{key}"),
                &other.to_string(),
                "must be of type string",
            )),
        }
    }

    fn conditions(&self, v: Option<&Value>, field: &str, min: usize) -> Result<(), ApiError> {
        let list = self.list(v, field, 8)?;
        if list.len() < min {
            return Err(self.required(field));
        }
        for (i, c) in list.iter().enumerate() {
            let f = format!("{field}[{i}]");
            let t = self.string(c, "type", &f)?;
            if t.is_empty() || t.len() > 316 {
                return Err(self.invalid(&format!("{f}.type"), t, "must be 1 to 316 characters"));
            }
            let s = self.string(c, "status", &f)?;
            if !matches!(s, "True" | "False" | "Unknown") {
                return Err(ApiError::invalid_detail(
                    self.res,
                    self.name,
                    &format!("{f}.status"),
                    &format!("Unsupported value: \"{s}\": supported values: \"True\", \"False\", \"Unknown\""),
                    "FieldValueNotSupported",
                ));
            }
            let r = self.string(c, "reason", &f)?;
            if !reason_ok(r) {
                return Err(self.invalid(
                    &format!("{f}.reason"),
                    r,
                    "should match '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'",
                ));
            }
            let m = self.string(c, "message", &f)?;
            if m.len() > 32768 {
                return Err(self.invalid(
                    &format!("{f}.message"),
                    "...",
                    "must be at most 32768 characters",
                ));
            }
            let t = self.string(c, "lastTransitionTime", &f)?;
            if !rfc3339(t) {
                return Err(self.invalid(
                    &format!("{f}.lastTransitionTime"),
                    t,
                    "must be an RFC 3339 date-time",
                ));
            }
            if let Some(g) = c.get("observedGeneration") {
                if g.as_i64().is_none_or(|g| g < 0) {
                    return Err(self.invalid(
                        &format!("{f}.observedGeneration"),
                        &g.to_string(),
                        "must be an integer greater than or equal to 0",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The status of a Gateway API object `obj` of kind `res`, checked as its CRD's schema
/// checks it.
pub(crate) fn validate_status(res: &Resource, name: &str, obj: &Value) -> Result<(), ApiError> {
    let Some(status) = obj.get("status").filter(|s| !s.is_null()) else {
        return Ok(());
    };
    let c = Check { res, name };
    match res.kind {
        "GatewayClass" => c.conditions(status.get("conditions"), "status.conditions", 0),
        "Gateway" => {
            c.conditions(status.get("conditions"), "status.conditions", 0)?;
            for (i, a) in c
                .list(status.get("addresses"), "status.addresses", 16)?
                .iter()
                .enumerate()
            {
                let f = format!("status.addresses[{i}]");
                let v = c.string(a, "value", &f)?;
                if v.is_empty() || v.len() > 253 {
                    return Err(c.invalid(&format!("{f}.value"), v, "must be 1 to 253 characters"));
                }
            }
            for (i, l) in c
                .list(status.get("listeners"), "status.listeners", 64)?
                .iter()
                .enumerate()
            {
                let f = format!("status.listeners[{i}]");
                c.string(l, "name", &f)?;
                if l.get("attachedRoutes").and_then(Value::as_i64).is_none() {
                    return Err(c.required(&format!("{f}.attachedRoutes")));
                }
                if l.get("supportedKinds").is_none() {
                    return Err(c.required(&format!("{f}.supportedKinds")));
                }
                for (j, k) in c
                    .list(l.get("supportedKinds"), &format!("{f}.supportedKinds"), 8)?
                    .iter()
                    .enumerate()
                {
                    c.string(k, "kind", &format!("{f}.supportedKinds[{j}]"))?;
                }
                if l.get("conditions").is_none() {
                    return Err(c.required(&format!("{f}.conditions")));
                }
                c.conditions(l.get("conditions"), &format!("{f}.conditions"), 0)?;
            }
            Ok(())
        }
        // Every route kind's status is the same RouteStatus.
        "HTTPRoute" | "GRPCRoute" | "TLSRoute" | "TCPRoute" | "UDPRoute" => {
            if status.get("parents").is_none() {
                return Err(c.required("status.parents"));
            }
            for (i, p) in c
                .list(status.get("parents"), "status.parents", 32)?
                .iter()
                .enumerate()
            {
                let f = format!("status.parents[{i}]");
                let Some(pref) = p.get("parentRef") else {
                    return Err(c.required(&format!("{f}.parentRef")));
                };
                c.string(pref, "name", &format!("{f}.parentRef"))?;
                let cn = c.string(p, "controllerName", &f)?;
                if !controller_name_ok(cn) {
                    return Err(c.invalid(
                        &format!("{f}.controllerName"),
                        cn,
                        "must be a domain-prefixed path, e.g. example.com/controller",
                    ));
                }
                c.conditions(p.get("conditions"), &format!("{f}.conditions"), 1)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::RESOURCES;
    use serde_json::json;

    fn res(kind: &str) -> &'static Resource {
        RESOURCES.iter().find(|r| r.kind == kind).unwrap()
    }

    fn cond() -> Value {
        json!({"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
               "lastTransitionTime": "2026-11-25T08:00:00Z", "observedGeneration": 1})
    }

    #[test]
    fn a_conforming_status_is_accepted_and_each_schema_violation_refused() {
        let ok = json!({"status": {"parents": [{"parentRef": {"name": "gw"},
            "controllerName": "k8slb.io/gateway-controller", "conditions": [cond()]}]}});
        validate_status(res("HTTPRoute"), "r", &ok).unwrap();
        let broken = |path: &str, v: Value| {
            let mut o = ok.clone();
            *o.pointer_mut(path).unwrap() = v;
            validate_status(res("HTTPRoute"), "r", &o).unwrap_err()
        };
        let e = broken("/status/parents/0/conditions", json!([]));
        assert_eq!(e.code, 422);
        for (path, v) in [
            (
                "/status/parents/0/conditions/0/reason",
                json!("Not Allowed"),
            ),
            ("/status/parents/0/conditions/0/status", json!("true")),
            (
                "/status/parents/0/conditions/0/lastTransitionTime",
                json!("yesterday"),
            ),
            (
                "/status/parents/0/conditions/0/observedGeneration",
                json!(-1),
            ),
            ("/status/parents/0/controllerName", json!("k8slb")),
            ("/status/parents/0/parentRef", json!({})),
        ] {
            assert_eq!(broken(path, v.clone()).code, 422, "{path} = {v}");
        }
        let mut no_time = ok.clone();
        no_time["status"]["parents"][0]["conditions"][0]
            .as_object_mut()
            .unwrap()
            .remove("lastTransitionTime");
        assert!(validate_status(res("HTTPRoute"), "r", &no_time).is_err());

        let gw = json!({"status": {"addresses": [{"type": "IPAddress", "value": "198.18.0.1"}],
            "conditions": [cond()],
            "listeners": [{"name": "http", "attachedRoutes": 0,
                           "supportedKinds": [{"kind": "HTTPRoute"}], "conditions": [cond()]}]}});
        validate_status(res("Gateway"), "g", &gw).unwrap();
        let mut no_kinds = gw.clone();
        no_kinds["status"]["listeners"][0]
            .as_object_mut()
            .unwrap()
            .remove("supportedKinds");
        assert!(validate_status(res("Gateway"), "g", &no_kinds).is_err());
        let mut nine = gw.clone();
        nine["status"]["conditions"] = json!(vec![cond(); 9]);
        assert!(validate_status(res("Gateway"), "g", &nine).is_err());
    }
}
