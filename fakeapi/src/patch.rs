//! Patch formats: JSON merge patch (RFC 7386) and JSON patch (RFC 6902) through the
//! `json-patch` crate (the one kube-rs itself uses for `Patch::Json`), and the field sets
//! behind the simplified server-side apply.
//!
//! What stays hand-written here, and why:
//! - **strategic merge patch** is served as a plain merge patch (see `store.rs`): a real
//!   one merges lists by their `patchMergeKey` from the OpenAPI schema, which neither
//!   `json-patch` nor this fake has. k8slb never sends one (it writes with server-side
//!   apply and merge patches), so a client that relies on list merging is not served
//!   truthfully here. Of a custom resource (the Gateway API kinds) it is refused with
//!   415, as a real server refuses it;
//! - **server-side apply's managed fields** ([`leaf_paths`], [`to_fields_v1`],
//!   [`from_fields_v1`], [`remove_path`]): `json-patch` knows documents, not field
//!   ownership. These model `fieldsV1` with atomic lists, enough for the conflicts and
//!   field removals k8slb's writes meet.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// RFC 7386: objects merge recursively, `null` deletes, everything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    ::json_patch::merge(target, patch);
}

/// RFC 6902: add, remove, replace, move, copy, test. All or nothing: on an error `doc` is
/// as it was. The error says which operation failed and why.
pub(crate) fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    if !ops.is_array() {
        return Err("a JSON patch must be an array".into());
    }
    let ops: ::json_patch::Patch =
        serde_json::from_value(ops.clone()).map_err(|e| format!("invalid operation: {e}"))?;
    ::json_patch::patch(doc, &ops).map_err(|e| e.to_string())
}

/// A field path: object keys from the root. Lists are atomic (owned as a whole).
pub(crate) type FieldPath = Vec<String>;

/// The leaf fields set by `v`: scalars, lists and empty objects.
pub(crate) fn leaf_paths(v: &Value) -> BTreeSet<FieldPath> {
    fn walk(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    prefix.push(k.clone());
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            _ => {
                if !prefix.is_empty() {
                    out.insert(prefix.clone());
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

pub(crate) fn get_path<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, seg| cur.get(seg))
}

/// Remove the field at `path`, then any objects it leaves empty.
pub(crate) fn remove_path(v: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Value::Object(m) = v else { return };
    if rest.is_empty() {
        m.remove(first);
        return;
    }
    if let Some(child) = m.get_mut(first) {
        remove_path(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            m.remove(first);
        }
    }
}

/// The `fieldsV1` form of a set of paths: `{"f:spec":{"f:type":{}}}`.
pub(crate) fn to_fields_v1(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Value::Object(Map::new());
    for path in paths {
        let mut cur = &mut root;
        for seg in path {
            let Value::Object(m) = cur else { break };
            cur = m
                .entry(format!("f:{seg}"))
                .or_insert_with(|| Value::Object(Map::new()));
        }
    }
    root
}

/// The paths in a `fieldsV1` tree written by [`to_fields_v1`].
pub(crate) fn from_fields_v1(v: &Value) -> BTreeSet<FieldPath> {
    fn walk(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        let children: Vec<(&String, &Value)> = v
            .as_object()
            .map(|m| m.iter().filter(|(k, _)| k.starts_with("f:")).collect())
            .unwrap_or_default();
        if children.is_empty() {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
            return;
        }
        for (k, child) in children {
            prefix.push(k["f:".len()..].to_string());
            walk(child, prefix, out);
            prefix.pop();
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn json_patch_ops() {
        let mut doc =
            json!({"spec": {"ports": [{"port": 80}]}, "metadata": {"labels": {"a/b": "x"}}});
        json_patch(
            &mut doc,
            &json!([
                {"op": "test", "path": "/metadata/labels/a~1b", "value": "x"},
                {"op": "add", "path": "/spec/ports/-", "value": {"port": 443}},
                {"op": "replace", "path": "/spec/ports/0/port", "value": 8080},
                {"op": "remove", "path": "/metadata/labels/a~1b"},
                {"op": "copy", "from": "/spec/ports/1", "path": "/spec/first"},
            ]),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"spec": {"ports": [{"port": 8080}, {"port": 443}], "first": {"port": 443}}, "metadata": {"labels": {}}})
        );
        assert!(json_patch(
            &mut doc,
            &json!([{"op": "test", "path": "/spec/first/port", "value": 1}])
        )
        .is_err());
        assert!(json_patch(
            &mut doc,
            &json!([{"op": "replace", "path": "/nope", "value": 1}])
        )
        .is_err());
    }

    #[test]
    fn a_json_patch_that_fails_is_refused_whole_and_says_why() {
        let before = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"ports": [80]}});
        let cases = [
            (json!({"op": "add"}), "must be an array"),
            (
                json!([{"op": "frobnicate", "path": "/spec"}]),
                "invalid operation",
            ),
            (json!([{"op": "add", "value": 1}]), "invalid operation"),
            (
                json!([{"op": "add", "path": "/spec/x"}]),
                "invalid operation",
            ),
            (
                json!([{"op": "move", "path": "/spec/x"}]),
                "invalid operation",
            ),
            (
                json!([
                    {"op": "add", "path": "/metadata/labels/b", "value": "2"},
                    {"op": "test", "path": "/metadata/labels/a", "value": "9"},
                ]),
                "value did not match",
            ),
            (
                json!([
                    {"op": "remove", "path": "/metadata/labels/a"},
                    {"op": "remove", "path": "/metadata/labels/a"},
                ]),
                "path is invalid",
            ),
            (
                json!([{"op": "add", "path": "/spec/ports/5", "value": 1}]),
                "path is invalid",
            ),
            (
                json!([{"op": "move", "from": "/spec", "path": "/spec/inner"}]),
                "inside itself",
            ),
        ];
        for (ops, why) in cases {
            let mut doc = before.clone();
            let e = json_patch(&mut doc, &ops).expect_err(&ops.to_string());
            assert!(e.contains(why), "{ops}: {e}");
            assert_eq!(doc, before, "{ops} left a half-patched document");
        }
    }

    #[test]
    fn json_patch_moves_and_appends() {
        let mut doc = json!({"a": {"x": 1}, "l": [1]});
        json_patch(
            &mut doc,
            &json!([
                {"op": "move", "from": "/a/x", "path": "/b"},
                {"op": "add", "path": "/l/0", "value": 0},
                {"op": "add", "path": "/l/-", "value": 2},
            ]),
        )
        .unwrap();
        assert_eq!(doc, json!({"a": {}, "b": 1, "l": [0, 1, 2]}));
    }

    #[test]
    fn fields_v1_round_trip() {
        let paths =
            leaf_paths(&json!({"data": {"a": "1", "b": "2"}, "spec": {"ports": [1], "x": {}}}));
        let fields = to_fields_v1(&paths);
        assert_eq!(
            fields,
            json!({"f:data": {"f:a": {}, "f:b": {}}, "f:spec": {"f:ports": {}, "f:x": {}}})
        );
        assert_eq!(from_fields_v1(&fields), paths);
        let mut doc = json!({"data": {"a": "1"}, "keep": 1});
        remove_path(&mut doc, &["data".to_string(), "a".to_string()]);
        assert_eq!(doc, json!({"keep": 1}));
    }
}
