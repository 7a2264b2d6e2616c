//! Hostile object files and config documents: non-object list items are skipped, never a
//! panic; duplicate keys in the global config (JSON or inside YAML) are refused.

use k8slb_common::objects::Objects;

#[test]
fn a_list_with_non_object_items_is_not_a_panic() {
    // Without it: `item["kind"] = ...` panics when an item is not an object.
    let mut o = Objects::default();
    o.add_text("kind: List\nitems: [5, \"x\", [1], true]\n")
        .unwrap();
    o.add_text("{\"kind\":\"ServiceList\",\"items\":[7]}")
        .unwrap();
    assert!(o.services.is_empty());
}

#[test]
fn duplicate_keys_in_the_config_are_refused() {
    use k8slb_common::config::parse_global_config;
    // Without it: serde_json keeps the last of duplicate keys silently: a copy-pasted pool that
    // was not renamed made the first pool vanish (and its Services lose their IPs).
    let e = parse_global_config(
        r#"{"pools":{
            "default":{"network":"10.0.0.0/24","range":"10.0.0.10-10.0.0.20"},
            "default":{"network":"10.1.0.0/24","range":"10.1.0.10-10.1.0.20"}}}"#,
    )
    .unwrap_err();
    assert!(
        e.0.iter()
            .any(|m| m.contains("pools.default") && m.contains("duplicate")),
        "{e}"
    );
    let e = parse_global_config(r#"{"pools":{},"pools":{}}"#).unwrap_err();
    assert!(e.0.iter().any(|m| m.contains("duplicate")), "{e}");
}

#[test]
fn duplicate_keys_in_a_yaml_config_file_are_refused_too() {
    use k8slb_common::config::parse_config_file;
    assert!(parse_config_file("pools: {}\npools: {}\n").is_err());
    // Inside the ConfigMap's JSON string.
    let cm = "kind: ConfigMap\ndata:\n  config: '{\"pools\":{},\"haproxy\":{\"global\":[],\"global\":[\"x\"]}}'\n";
    let e = parse_config_file(cm).unwrap_err();
    assert!(
        e.0.iter()
            .any(|m| m.starts_with("haproxy.global: duplicate key")),
        "{e}"
    );
}
