//! Label and field selectors, as in `?labelSelector=` and `?fieldSelector=`.

use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

/// Split at commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn set_values(key: &str, rest: &str, raw: &str) -> Result<(String, Vec<String>), ApiError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| ApiError::bad_request(format!("unable to parse requirement: {raw:?}")))?;
    let values = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    Ok((key.to_string(), values))
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for raw in split_top_level(s) {
            let part = raw.trim();
            if part.is_empty() {
                continue;
            }
            let bad = || ApiError::bad_request(format!("unable to parse requirement: {part:?}"));
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotIn(k.trim().to_string(), vec![v.trim().to_string()])
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::In(k.trim().to_string(), vec![v.trim().to_string()])
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::In(k.trim().to_string(), vec![v.trim().to_string()])
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                let (k, vs) = set_values(k.trim(), rest, part)?;
                Requirement::NotIn(k, vs)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                let (k, vs) = set_values(k.trim(), rest, part)?;
                Requirement::In(k, vs)
            } else if part.contains(|c: char| c.is_whitespace() || "()<>".contains(c)) {
                return Err(bad());
            } else {
                Requirement::Exists(part.to_string())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|req| match req {
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| vs.iter().all(|x| x != v)),
        })
    }
}

/// A parsed field selector: `path=value`, `path==value`, `path!=value`, comma-separated.
/// As kube-apiserver, only `metadata.name`, `metadata.namespace` and the kind's own
/// selectable fields are accepted ([`FieldSelector::supported_by`]); any other field is
/// `400 field label not supported` (a watch on it would never start on a real cluster).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector(Vec<(Vec<String>, String, bool)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, value, equal) = if let Some((k, v)) = part.split_once("!=") {
                (k, v, false)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, v, true)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            let path = path.trim().split('.').map(str::to_string).collect();
            reqs.push((path, value.trim().to_string(), equal));
        }
        Ok(Self(reqs))
    }

    /// Refuses a field the resource cannot be selected by, as the API server does: the
    /// generic `metadata.name` and `metadata.namespace`, and the kind's `extra` fields.
    pub fn supported_by(self, extra: &[&str]) -> Result<Self, ApiError> {
        for (path, _, _) in &self.0 {
            let label = path.join(".");
            if !["metadata.name", "metadata.namespace"].contains(&label.as_str())
                && !extra.contains(&label.as_str())
            {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {label}"
                )));
            }
        }
        Ok(self)
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, want, equal)| {
            let mut cur = Some(obj);
            for seg in path {
                cur = cur.and_then(|c| c.get(seg));
            }
            let actual = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *want) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj() -> Value {
        json!({"metadata": {"name": "web", "namespace": "prod", "labels": {"app": "web", "tier": "front"}}})
    }

    #[test]
    fn label_selectors() {
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=db", false),
            ("app", true),
            ("!app", false),
            ("missing", false),
            ("!missing", true),
            ("missing!=x", true),
            ("app in (db, web)", true),
            ("app notin (db,web)", false),
            ("app=web,tier in (back)", false),
            ("app=web, tier=front", true),
        ];
        for (sel, want) in cases {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&obj()),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn field_selectors() {
        let cases = [
            ("metadata.name=web", true),
            ("metadata.name==db", false),
            ("metadata.namespace!=prod", false),
            ("metadata.name=web,metadata.namespace=prod", true),
            ("spec.nodeName=", true),
        ];
        for (sel, want) in cases {
            assert_eq!(
                FieldSelector::parse(sel).unwrap().matches(&obj()),
                want,
                "{sel}"
            );
        }
        assert!(FieldSelector::parse("metadata.name").is_err());
    }

    #[test]
    fn only_the_kinds_selectable_fields_are_accepted() {
        let secrets = &["type"][..];
        let ok = |sel: &str, extra: &[&str]| FieldSelector::parse(sel).unwrap().supported_by(extra);
        assert!(ok("metadata.name=a,metadata.namespace!=b", &[]).is_ok());
        assert!(ok("type=kubernetes.io/tls", secrets).is_ok());
        let err = ok("type=kubernetes.io/tls", &[]).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(err.message, "field label not supported: type");
        assert!(ok("data.x=y", secrets).is_err());
        assert!(ok("metadata.labels.app=web", secrets).is_err());
    }
}
