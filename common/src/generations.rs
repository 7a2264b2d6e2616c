//! `metadata.generation` as the API server keeps it, for sources that have no API server
//! (the `files` source): 1 when an object first appears, one more each time its `spec`
//! changes; a change of its metadata or its status changes nothing. The same rule as
//! the fake API server's (`fakeapi`, `finish_update`), so the Gateway API statuses'
//! `observedGeneration` means the same thing in both modes.
//!
//! An object that says its own generation (a file dumped from a cluster) keeps it. An
//! object that goes and comes back starts again at 1, as a new object would; the count
//! lives in memory, so it starts again at 1 when the watcher does (a files source keeps
//! no store).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// An object's identity: API group, kind, namespace, name.
type Id = (String, String, String, String);

/// The generations of the objects read so far (see the module's doc).
#[derive(Debug, Clone, Default)]
pub struct Generations {
    /// Each object's last `spec` and generation.
    known: BTreeMap<Id, (Value, i64)>,
    /// The objects seen in the read under way.
    seen: BTreeSet<Id>,
}

impl Generations {
    /// Give `doc` (one document as read; a `List`'s items each) the generation the API
    /// server would have given it.
    pub fn stamp(&mut self, doc: &mut Value) {
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
        if let Some(item_kind) = kind.strip_suffix("List") {
            let item_kind = item_kind.to_string();
            let version = doc.get("apiVersion").cloned();
            if let Some(Value::Array(items)) = doc.get_mut("items") {
                for item in items {
                    // A typed list's items may leave out their kind and version.
                    if let Value::Object(m) = item {
                        if !item_kind.is_empty() && !m.contains_key("kind") {
                            m.insert("kind".into(), Value::String(item_kind.clone()));
                            if let Some(v) =
                                version.clone().filter(|_| !m.contains_key("apiVersion"))
                            {
                                m.insert("apiVersion".into(), v);
                            }
                        }
                    }
                    self.stamp(item);
                }
            }
            return;
        }
        let text = |p: &str| doc.pointer(p).and_then(Value::as_str).map(str::to_string);
        let (Some(name), Some(kind)) = (text("/metadata/name"), text("/kind")) else {
            return;
        };
        let group = text("/apiVersion")
            .and_then(|v| v.rsplit_once('/').map(|(g, _)| g.to_string()))
            .unwrap_or_default();
        let id = (
            group,
            kind,
            text("/metadata/namespace").unwrap_or_default(),
            name,
        );
        let spec = doc.get("spec").cloned().unwrap_or(Value::Null);
        let given = doc.pointer("/metadata/generation").and_then(Value::as_i64);
        let generation = match (given, self.known.get(&id)) {
            (Some(g), _) => g,
            (None, None) => 1,
            (None, Some((old, g))) if *old == spec => *g,
            (None, Some((_, g))) => g + 1,
        };
        self.seen.insert(id.clone());
        self.known.insert(id, (spec, generation));
        if let Some(Value::Object(meta)) = doc.get_mut("metadata") {
            meta.insert("generation".into(), Value::from(generation));
        }
    }

    /// The read is over: the objects it did not see are gone (one that comes back is
    /// new, generation 1).
    pub fn end_read(&mut self) {
        let seen = std::mem::take(&mut self.seen);
        self.known.retain(|id, _| seen.contains(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateway(listeners: usize, labels: &str, status: &str) -> Value {
        let ls: Vec<Value> = (0..listeners)
            .map(|i| json!({"name": format!("l{i}"), "port": 80 + i, "protocol": "HTTP"}))
            .collect();
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "infra", "labels": {"x": labels}},
            "spec": {"gatewayClassName": "k8slb", "listeners": ls},
            "status": {"note": status},
        })
    }

    fn read(g: &mut Generations, mut doc: Value) -> i64 {
        g.stamp(&mut doc);
        g.end_read();
        doc["metadata"]["generation"].as_i64().unwrap()
    }

    #[test]
    fn the_generation_starts_at_one_and_counts_spec_changes_only() {
        let mut g = Generations::default();
        assert_eq!(read(&mut g, gateway(1, "a", "s")), 1, "a new object");
        assert_eq!(
            read(&mut g, gateway(1, "a", "s")),
            1,
            "read again, unchanged"
        );
        assert_eq!(read(&mut g, gateway(1, "b", "s")), 1, "a label is metadata");
        assert_eq!(read(&mut g, gateway(1, "b", "t")), 1, "a status change");
        assert_eq!(read(&mut g, gateway(2, "b", "t")), 2, "a listener added");
        assert_eq!(read(&mut g, gateway(1, "b", "t")), 3, "and removed");
        assert_eq!(read(&mut g, gateway(1, "b", "t")), 3);
    }

    #[test]
    fn an_object_that_goes_and_comes_back_is_new_and_a_given_generation_is_kept() {
        let mut g = Generations::default();
        read(&mut g, gateway(1, "a", "s"));
        assert_eq!(read(&mut g, gateway(2, "a", "s")), 2);
        g.end_read(); // a read without it: deleted
        assert_eq!(read(&mut g, gateway(2, "a", "s")), 1, "created again");
        let mut told = gateway(3, "a", "s");
        told["metadata"]["generation"] = json!(7);
        assert_eq!(read(&mut g, told), 7, "as the file says");
    }

    #[test]
    fn the_items_of_a_list_are_stamped_each_and_kinds_keep_objects_apart() {
        let mut g = Generations::default();
        let mut route = gateway(1, "a", "s");
        route["kind"] = json!("HTTPRoute");
        let mut list = json!({"apiVersion": "v1", "kind": "List", "items": [gateway(1, "a", "s"), route.clone()]});
        g.stamp(&mut list);
        g.end_read();
        route["spec"]["listeners"] = json!([]);
        let mut list2 =
            json!({"apiVersion": "v1", "kind": "List", "items": [gateway(1, "a", "s"), route]});
        g.stamp(&mut list2);
        g.end_read();
        let gens: Vec<i64> = list2["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["generation"].as_i64().unwrap())
            .collect();
        assert_eq!(gens, [1, 2], "only the HTTPRoute changed");
    }
}
