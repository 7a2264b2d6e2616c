//! Patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and the field sets
//! behind the simplified server-side apply.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// RFC 7386: objects merge recursively, `null` deletes, everything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (k, v) in patch {
            if v.is_null() {
                target.remove(k);
            } else {
                merge_patch(target.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

fn parse_pointer(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| format!("invalid JSON pointer {path:?}"))?;
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn walk_mut<'a>(doc: &'a mut Value, segs: &[String]) -> Result<&'a mut Value, String> {
    let mut cur = doc;
    for seg in segs {
        cur = match cur {
            Value::Object(m) => m.get_mut(seg),
            Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| format!("path segment {seg:?} not found"))?;
    }
    Ok(cur)
}

fn add(doc: &mut Value, segs: &[String], value: Value) -> Result<(), String> {
    let Some((last, parent)) = segs.split_last() else {
        *doc = value;
        return Ok(());
    };
    match walk_mut(doc, parent)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
                return Ok(());
            }
            let i: usize = last
                .parse()
                .map_err(|_| format!("bad array index {last:?}"))?;
            if i > a.len() {
                return Err(format!("array index {i} out of bounds"));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err("parent of the target is not a container".to_string()),
    }
}

fn remove(doc: &mut Value, segs: &[String]) -> Result<Value, String> {
    let (last, parent) = segs
        .split_last()
        .ok_or_else(|| "cannot remove the whole document".to_string())?;
    match walk_mut(doc, parent)? {
        Value::Object(m) => m
            .remove(last)
            .ok_or_else(|| format!("unable to remove nonexistent key: {last}")),
        Value::Array(a) => {
            let i: usize = last
                .parse()
                .map_err(|_| format!("bad array index {last:?}"))?;
            if i >= a.len() {
                return Err(format!("array index {i} out of bounds"));
            }
            Ok(a.remove(i))
        }
        _ => Err("parent of the target is not a container".to_string()),
    }
}

/// RFC 6902: add, remove, replace, move, copy, test.
pub(crate) fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops.as_array().ok_or("a JSON patch must be an array")?;
    for op in ops {
        let name = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or("operation without \"op\"")?;
        let path = parse_pointer(
            op.get("path")
                .and_then(Value::as_str)
                .ok_or("operation without \"path\"")?,
        )?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("{name} without \"value\""))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{name} without \"from\""))
                .and_then(parse_pointer)
        };
        match name {
            "add" => add(doc, &path, value()?)?,
            "remove" => {
                remove(doc, &path)?;
            }
            "replace" => *walk_mut(doc, &path)? = value()?,
            "test" => {
                if *walk_mut(doc, &path)? != value()? {
                    return Err(format!("testing value at {:?} failed", path.join("/")));
                }
            }
            "move" => {
                let v = remove(doc, &from()?)?;
                add(doc, &path, v)?;
            }
            "copy" => {
                let v = walk_mut(doc, &from()?)?.clone();
                add(doc, &path, v)?;
            }
            other => return Err(format!("unknown JSON patch operation {other:?}")),
        }
    }
    Ok(())
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
