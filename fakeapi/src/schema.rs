//! A write to a CRD-defined kind, checked as kube-apiserver checks a custom resource whose
//! CRD has a structural `openAPIV3Schema`:
//!
//! 1. **pruning**: fields the schema does not declare are dropped (`metadata`, `apiVersion`
//!    and `kind` excepted), and so are `null` values of fields that are not `nullable`;
//! 2. **defaulting**: a missing property with a `default` gets it (at any depth, inside list
//!    items too); create drops the body's `status` first, as the status subresource's
//!    strategy does, so a new Gateway reads back with its CRD's `Pending` conditions;
//! 3. **validation**, every error collected (a 422 Invalid lists them all, as the real
//!    server does): `type`, `required`, `enum`, `minLength`/`maxLength` (in characters),
//!    `pattern`, `minimum`/`maximum`, `minItems`/`maxItems`, `maxProperties`, `format`
//!    (`date-time`, `ipv4`, `ipv6`; `int32`/`int64` are not checked by the real server
//!    either), `x-kubernetes-list-type` `set` and `map` (duplicate keys), `oneOf`,
//!    `anyOf`, `not`, `nullable`;
//! 4. **ratcheting**, coarsely: a top-level field (`spec`, `status`) that the write leaves
//!    as it was is not validated again, so a status write is checked on its `status`.
//!
//! CEL (`x-kubernetes-validations`): the v1.6.1 CRDs hold 214 distinct rules; exactly one
//! is under `status`, and it is transcribed here ([`crate::cel::status_rule`]); loading a CRD with any
//! other rule under `status` fails (`crd.rs`), so a new release cannot slip one past. The
//! other 213 are about `spec` and are not evaluated: a status write cannot break them, and
//! the fake does not stand in for the API server's refusal of bad specs.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::crd::Crds;

/// One `StatusCause` of a 422.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cause {
    pub reason: &'static str,
    pub field: String,
    /// What follows `<field>: ` in the message (e.g. `Required value`).
    pub detail: String,
}

/// Drops what the schema does not declare, and non-nullable nulls.
pub(crate) fn prune(s: &Value, v: &mut Value, root: bool) {
    match v {
        Value::Object(m) => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                m.retain(|k, val| {
                    (root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                        || props.get(k).is_some_and(|p| {
                            !val.is_null()
                                || p.get("nullable").and_then(Value::as_bool) == Some(true)
                        })
                });
                for (k, val) in m.iter_mut() {
                    if let Some(p) = props.get(k) {
                        if !(root && k == "metadata") {
                            prune(p, val, false);
                        }
                    }
                }
            } else if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                m.retain(|_, val| {
                    !val.is_null() || ap.get("nullable").and_then(Value::as_bool) == Some(true)
                });
                for val in m.values_mut() {
                    prune(ap, val, false);
                }
            } else if s
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                != Some(true)
                && s.get("type").and_then(Value::as_str) == Some("object")
            {
                m.clear();
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.get("items") {
                for item in a {
                    prune(items, item, false);
                }
            }
        }
        _ => {}
    }
}

/// Fills in every missing property that has a `default`.
pub(crate) fn default(s: &Value, v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, p) in props {
                    if !m.contains_key(k) {
                        if let Some(d) = p.get("default") {
                            m.insert(k.clone(), d.clone());
                        }
                    }
                    if let Some(child) = m.get_mut(k) {
                        default(p, child);
                    }
                }
            } else if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                for val in m.values_mut() {
                    default(ap, val);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.get("items") {
                for item in a {
                    default(items, item);
                }
            }
        }
        _ => {}
    }
}

/// Validates `new` (the whole object) against the root schema; top-level fields equal in
/// `old` are skipped (ratcheting).
pub(crate) fn validate(crds: &Crds, root: &Value, new: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut v = Validator {
        crds,
        causes: Vec::new(),
    };
    let props = root.get("properties").and_then(Value::as_object);
    for req in root
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let req = req.as_str().unwrap_or_default();
        if new.get(req).is_none() {
            v.push("FieldValueRequired", req, "Required value".into());
        }
    }
    for (k, p) in props.into_iter().flatten() {
        if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let Some(val) = new.get(k) else { continue };
        if old.is_some_and(|o| o.get(k) == Some(val)) {
            continue;
        }
        v.node(p, val, k);
    }
    v.causes
}

struct Validator<'a> {
    crds: &'a Crds,
    causes: Vec<Cause>,
}

/// A value as kube-openapi prints it after `Invalid value: `.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        Value::Null => "\"null\"".into(),
        other => other.to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_ok(want: &str, v: &Value) -> bool {
    match (want, v) {
        ("number", Value::Number(_)) => true,
        (w, v) => w == type_name(v),
    }
}

/// Go's `%#v` of a map key set, as in `Duplicate value: map[string]interface {}{...}`.
fn go_map(keys: &[(&str, &Value)]) -> String {
    let inner: Vec<String> = keys
        .iter()
        .map(|(k, v)| {
            let val = match v {
                Value::String(s) => format!("{s:?}"),
                other => other.to_string(),
            };
            format!("{k:?}:{val}")
        })
        .collect();
    format!("map[string]interface {{}}{{{}}}", inner.join(", "))
}

impl Validator<'_> {
    fn push(&mut self, reason: &'static str, field: &str, detail: String) {
        self.causes.push(Cause {
            reason,
            field: field.to_string(),
            detail,
        });
    }

    fn invalid(&mut self, field: &str, v: &Value, why: String) {
        let detail = format!("Invalid value: {}: {why}", shown(v));
        self.push("FieldValueInvalid", field, detail);
    }

    /// Whether `v` satisfies `s` (for oneOf/anyOf/not), without recording anything.
    fn satisfies(&self, s: &Value, v: &Value, path: &str) -> bool {
        let mut probe = Validator {
            crds: self.crds,
            causes: Vec::new(),
        };
        probe.node(s, v, path);
        probe.causes.is_empty()
    }

    fn node(&mut self, s: &Value, v: &Value, path: &str) {
        if v.is_null() {
            if s.get("nullable").and_then(Value::as_bool) != Some(true) {
                if let Some(t) = s.get("type").and_then(Value::as_str) {
                    self.invalid(
                        path,
                        v,
                        format!("{path} in body must be of type {t}: \"null\""),
                    );
                }
            }
            return;
        }
        if let Some(t) = s.get("type").and_then(Value::as_str) {
            if !type_ok(t, v) {
                let got = type_name(v);
                self.invalid(
                    path,
                    v,
                    format!("{path} in body must be of type {t}: {got:?}"),
                );
                return;
            }
        }
        if let Some(e) = s.get("enum").and_then(Value::as_array) {
            if !e.contains(v) {
                let allowed: Vec<String> = e.iter().map(shown).collect();
                let detail = format!(
                    "Unsupported value: {}: supported values: {}",
                    shown(v),
                    allowed.join(", ")
                );
                self.push("FieldValueNotSupported", path, detail);
            }
        }
        match v {
            Value::String(st) => self.string(s, st, v, path),
            Value::Number(_) => self.number(s, v, path),
            Value::Array(a) => self.array(s, a, v, path),
            Value::Object(m) => self.object(s, m, path),
            _ => {}
        }
        self.combinators(s, v, path);
        if path.starts_with("status") {
            for rule in s
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let text = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
                // crd.rs refused to load a status rule that is not transcribed.
                if let Some(check) = crate::cel::status_rule(text) {
                    if !check(v) {
                        let message = rule
                            .get("message")
                            .and_then(Value::as_str)
                            .map_or_else(|| format!("failed rule: {text}"), str::to_string);
                        self.invalid(path, v, message);
                    }
                }
            }
        }
    }

    fn combinators(&mut self, s: &Value, v: &Value, path: &str) {
        if let Some(one) = s.get("oneOf").and_then(Value::as_array) {
            let n = one.iter().filter(|o| self.satisfies(o, v, path)).count();
            if n != 1 {
                self.invalid(
                    path,
                    v,
                    format!("{path} in body must validate one and only one schema (oneOf)"),
                );
            }
        }
        if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
            if !any.iter().any(|o| self.satisfies(o, v, path)) {
                self.invalid(
                    path,
                    v,
                    format!("{path} in body must validate at least one schema (anyOf)"),
                );
            }
        }
        if let Some(not) = s.get("not") {
            if self.satisfies(not, v, path) {
                self.invalid(
                    path,
                    v,
                    format!("{path} in body should not validate the given schema"),
                );
            }
        }
    }

    fn string(&mut self, s: &Value, st: &str, v: &Value, path: &str) {
        let chars = st.chars().count() as u64;
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64) {
            if chars > max {
                self.push(
                    "FieldValueTooLong",
                    path,
                    format!("Too long: may not be more than {max} bytes"),
                );
            }
        }
        if let Some(min) = s.get("minLength").and_then(Value::as_u64) {
            if chars < min {
                self.invalid(
                    path,
                    v,
                    format!("{path} in body should be at least {min} chars long"),
                );
            }
        }
        if let Some(p) = s.get("pattern").and_then(Value::as_str) {
            // crd.rs compiled every pattern of the installed schemas.
            if self.crds.patterns.get(p).is_some_and(|re| !re.is_match(st)) {
                self.invalid(path, v, format!("{path} in body should match '{p}'"));
            }
        }
        if let Some(f) = s.get("format").and_then(Value::as_str) {
            let ok = match f {
                "date-time" => rfc3339(st),
                "ipv4" => st.parse::<std::net::Ipv4Addr>().is_ok(),
                "ipv6" => st.parse::<std::net::Ipv6Addr>().is_ok(),
                _ => true,
            };
            if !ok {
                self.invalid(
                    path,
                    v,
                    format!("{path} in body must be of type {f}: {st:?}"),
                );
            }
        }
    }

    fn number(&mut self, s: &Value, v: &Value, path: &str) {
        let n = v.as_f64().unwrap_or_default();
        if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
            if n < min {
                self.invalid(
                    path,
                    v,
                    format!("{path} in body should be greater than or equal to {min}"),
                );
            }
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
            if n > max {
                self.invalid(
                    path,
                    v,
                    format!("{path} in body should be less than or equal to {max}"),
                );
            }
        }
    }

    fn array(&mut self, s: &Value, a: &[Value], v: &Value, path: &str) {
        let _ = v;
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64) {
            if a.len() as u64 > max {
                self.push(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {}: must have at most {max} items", a.len()),
                );
            }
        }
        if let Some(min) = s.get("minItems").and_then(Value::as_u64) {
            if (a.len() as u64) < min {
                self.invalid(
                    path,
                    &Value::from(a.len()),
                    format!("{path} in body should have at least {min} items"),
                );
            }
        }
        match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => {
                let mut seen = BTreeSet::new();
                for (i, item) in a.iter().enumerate() {
                    if !seen.insert(item.to_string()) {
                        self.push(
                            "FieldValueDuplicate",
                            &format!("{path}[{i}]"),
                            format!("Duplicate value: {}", shown(item)),
                        );
                    }
                }
            }
            Some("map") => {
                let keys: Vec<&str> = s
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let mut seen = BTreeSet::new();
                for (i, item) in a.iter().enumerate() {
                    let k: Vec<(&str, &Value)> = keys
                        .iter()
                        .filter_map(|k| item.get(*k).map(|v| (*k, v)))
                        .collect();
                    if !seen.insert(format!("{k:?}")) {
                        self.push(
                            "FieldValueDuplicate",
                            &format!("{path}[{i}]"),
                            format!("Duplicate value: {}", go_map(&k)),
                        );
                    }
                }
            }
            _ => {}
        }
        if let Some(items) = s.get("items") {
            for (i, item) in a.iter().enumerate() {
                self.node(items, item, &format!("{path}[{i}]"));
            }
        }
    }

    fn object(&mut self, s: &Value, m: &Map<String, Value>, path: &str) {
        for req in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let req = req.as_str().unwrap_or_default();
            if m.get(req).is_none_or(Value::is_null) {
                self.push(
                    "FieldValueRequired",
                    &format!("{path}.{req}"),
                    "Required value".into(),
                );
            }
        }
        if let Some(max) = s.get("maxProperties").and_then(Value::as_u64) {
            if m.len() as u64 > max {
                self.push(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {}: must have at most {max} items", m.len()),
                );
            }
        }
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            for (k, p) in props {
                if let Some(val) = m.get(k) {
                    self.node(p, val, &format!("{path}.{k}"));
                }
            }
        } else if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
            for (k, val) in m {
                self.node(ap, val, &format!("{path}[{k}]"));
            }
        }
    }
}

/// RFC 3339 `date-time`: `2026-11-25T08:00:00Z`, fractional seconds and offsets allowed.
fn rfc3339(t: &str) -> bool {
    let b = t.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        r.into_iter()
            .all(|i| b.get(i).is_some_and(u8::is_ascii_digit))
    };
    if b.len() < 20
        || !(digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10))
        || !matches!(b[10], b'T' | b't' | b' ')
        || !(digits(11..13) && b[13] == b':' && digits(14..16) && b[16] == b':' && digits(17..19))
    {
        return false;
    }
    let mut rest = &t[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    let rb = rest.as_bytes();
    let in_range = |s: &str, max: u32| s.parse::<u32>().is_ok_and(|n| n <= max);
    let (mo, d, h, mi, se) = (&t[5..7], &t[8..10], &t[11..13], &t[14..16], &t[17..19]);
    in_range(mo, 12)
        && mo != "00"
        && in_range(d, 31)
        && d != "00"
        && in_range(h, 23)
        && in_range(mi, 59)
        && in_range(se, 60)
        && (rest == "Z"
            || rest == "z"
            || (rb.len() == 6
                && matches!(rb[0], b'+' | b'-')
                && rb[3] == b':'
                && [1, 2, 4, 5].iter().all(|i| rb[*i].is_ascii_digit())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_accepts_what_the_apiserver_accepts() {
        for ok in [
            "2026-11-25T08:00:00Z",
            "1970-01-01T00:00:00Z",
            "2026-11-25T08:00:00.123+01:00",
        ] {
            assert!(rfc3339(ok), "{ok}");
        }
        for bad in [
            "yesterday",
            "2026-11-25",
            "2026-13-25T08:00:00Z",
            "2026-11-25T08:00:00",
            "2026-11-25T08:00:00.Z",
        ] {
            assert!(!rfc3339(bad), "{bad}");
        }
    }

    fn causes(schema: &Value, status: Value) -> Vec<(&'static str, String)> {
        let root = serde_json::json!({"type": "object", "properties": {"status": schema}});
        let obj = serde_json::json!({"status": status});
        validate(&Crds::default(), &root, &obj, None)
            .into_iter()
            .map(|c| (c.reason, c.field))
            .collect()
    }

    #[test]
    fn sets_maps_and_nullable_are_checked_as_the_apiserver_checks_them() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "names": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            "labels": {"type": "object", "maxProperties": 2, "additionalProperties": {"type": "string", "maxLength": 3}},
            "note": {"type": "string", "nullable": true},
        }});
        assert_eq!(
            causes(
                &schema,
                serde_json::json!({"names": ["a", "b"], "note": null})
            ),
            []
        );
        assert_eq!(
            causes(&schema, serde_json::json!({"names": ["a", "a"]})),
            [("FieldValueDuplicate", "status.names[1]".to_string())]
        );
        assert_eq!(
            causes(
                &schema,
                serde_json::json!({"labels": {"a": "1", "b": "2", "c": "3"}})
            ),
            [("FieldValueTooMany", "status.labels".to_string())]
        );
        assert_eq!(
            causes(&schema, serde_json::json!({"labels": {"a": "long"}})),
            [("FieldValueTooLong", "status.labels[a]".to_string())]
        );
        assert_eq!(
            causes(&schema, serde_json::json!({"names": null})),
            [("FieldValueInvalid", "status.names".to_string())]
        );
        // Pruning: unknown fields (nested too) and non-nullable nulls go; a nullable null stays.
        let root = serde_json::json!({"type": "object", "properties": {"status": schema}});
        let mut obj = serde_json::json!({"apiVersion": "x/v1", "metadata": {"name": "n", "any": 1},
            "status": {"names": null, "note": null, "other": 1, "labels": {"a": "1"}}});
        prune(&root, &mut obj, true);
        assert_eq!(
            obj,
            serde_json::json!({"apiVersion": "x/v1", "metadata": {"name": "n", "any": 1},
                "status": {"note": null, "labels": {"a": "1"}}})
        );
    }

    #[test]
    fn the_status_hostname_rule_is_transcribed() {
        let check = crate::cel::status_rule(r#"self.type == 'Hostname' ? self.value.matches(r"""^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"""): true"#).unwrap();
        let addr = |t: &str, v: &str| serde_json::json!({"type": t, "value": v});
        assert!(check(&addr("Hostname", "lb.example.com")));
        assert!(check(&addr("Hostname", "*.example.com")));
        assert!(check(&addr("IPAddress", "Not A Host")));
        assert!(!check(&addr("Hostname", "LB.example.com")));
        assert!(!check(&addr("Hostname", "lb..example.com")));
        assert!(!check(&addr("Hostname", "-lb.example.com")));
        assert!(crate::cel::status_rule("self.size() > 0").is_none());
    }
}
