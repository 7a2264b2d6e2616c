use super::*;

const README_TWO_POOLS: &str = r#"{ "pools": {
        "default": { "network": "192.168.10.0/24", "range": "192.168.10.200-192.168.10.254" },
        "external": { "network": "1.2.3.0/22", "range": "1.2.3.50-1.2.3.74", "interface": "em1" } } }"#;

#[test]
fn conditional_rules_per_host_defaults_to_256_and_is_admin_settable() {
    let c = parse_global_config(README_TWO_POOLS).unwrap();
    assert_eq!(c.limits.conditional_rules_per_host, 256);
    let with = |limits: &str| {
        let text = README_TWO_POOLS.trim_end().trim_end_matches('}');
        parse_global_config(&format!("{text}, \"limits\": {limits} }}"))
    };
    let c = with(r#"{ "conditionalRulesPerHost": 8000 }"#).unwrap();
    assert_eq!(c.limits.conditional_rules_per_host, 8000);
    for bad in [
        r#"{ "conditionalRulesPerHost": 0 }"#,
        r#"{ "conditionalRulesPerHost": 2.5 }"#,
        r#"{ "conditionalRulesPerHost": -1 }"#,
        r#"{ "conditionalRulesPerHots": 10 }"#,
        r#"[]"#,
    ] {
        let e = with(bad).unwrap_err();
        assert!(e.0.iter().any(|m| m.starts_with("limits")), "{bad}: {e}");
    }
}

#[test]
fn readme_two_pool_config_is_accepted_with_a_warning() {
    let c = parse_global_config(README_TWO_POOLS).unwrap();
    assert_eq!(c.pools.len(), 2);
    let ext = &c.pools[&"external".parse().unwrap()];
    assert_eq!(ext.network.canonical(), "1.2.0.0/22");
    assert_eq!(ext.interface.as_ref().unwrap().as_str(), "em1");
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(c.warnings[0].contains("1.2.3.0/22"));
    assert_eq!(c.class, DEFAULT_CLASS);
    assert!(c.claim_unclassed);
    assert_eq!(c.keepalived.advert_int_ms, 100);
}

#[test]
fn every_problem_is_listed() {
    let bad = r#"{ "pools": {
            "a": { "network": "10.0.0.0/24", "range": "10.0.1.0-10.0.1.5" },
            "b": { "network": "10.0.0.0/16", "range": "10.0.0.1-10.0.0.2", "interfce": "eth0" },
            "c d": { "network": "10.9.0.0/24", "range": "10.9.0.1" } },
          "haproxy": { "global": ["maxconn 10\nfrontend evil"], "defualts": [] },
          "keepalived": { "advertInt": 0.005 },
          "poolz": {} }"#;
    let e = parse_global_config(bad).unwrap_err();
    let all = e.0.join("\n");
    for needle in [
        "pools.a.range: 10.0.1.0-10.0.1.5 is not inside the pool's network 10.0.0.0/24",
        "pools.b.interfce: unknown key (did you mean \"interface\"?)",
        "pools.c d: invalid pool name",
        "haproxy.global[0]: invalid config line",
        "haproxy.defualts: unknown key (did you mean \"defaults\"?)",
        "keepalived.advertInt",
        "poolz: unknown key (did you mean \"pools\"?)",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
}

#[test]
fn overlapping_pools_are_refused() {
    let e = parse_global_config(
        r#"{"pools":{"a":{"network":"10.0.0.0/24","range":"10.0.0.10-10.0.0.20"},
                         "b":{"network":"10.0.0.128/25","range":"10.0.0.200-10.0.0.210"}}}"#,
    )
    .unwrap_err();
    assert!(e.0[0].contains("overlaps pool \"a\""), "{e}");
}

#[test]
fn ipv6_pool_and_family_mismatch() {
    let ok = parse_global_config(
        r#"{"pools":{"ipv6":{"network":"2001:468::/32","range":"2001:468:101::/96"}}}"#,
    )
    .unwrap();
    assert_eq!(ok.pools.values().next().unwrap().family(), Family::V6);
    let e = parse_global_config(
        r#"{"pools":{"x":{"network":"2001:468::/32","range":"10.0.0.1-10.0.0.2"}}}"#,
    )
    .unwrap_err();
    assert!(e.0[0].contains("different address families"), "{e}");
}

#[test]
fn k8slb_readme_ipv6_example_is_reported_not_accepted() {
    // The seed README's IPv6 pool has its range outside its network.
    let e = parse_global_config(
            r#"{"pools":{"ipv6":{"network":"2001:468::/64","range":"2001:468:101::/96","interface":"eth0"}}}"#,
        )
        .unwrap_err();
    assert!(
        e.0[0].contains("not inside the pool's network 2001:468::/64"),
        "{e}"
    );
}

#[test]
fn keepalived_section_and_strings_as_numbers() {
    let c = parse_global_config(
        r#"{"pools":{},"keepalived":{"email":"ops@example.com","emailFrom":"lb@example.com",
                "emailServer":"smtp.example.com","emailServerTimeout":"30","advertInt":"0.25",
                "unicast":true}}"#,
    )
    .unwrap();
    assert_eq!(c.keepalived.advert_int_ms, 250);
    assert!(c.keepalived.unicast);
    assert_eq!(c.keepalived.email.unwrap().as_str(), "ops@example.com");
    // k8slb's manifest default: all empty strings.
    let c = parse_global_config(
            r#"{"pools":{},"keepalived":{"email":"","emailFrom":"","emailServer":"","emailServerTimeout":"30"}}"#,
        )
        .unwrap();
    assert!(c.keepalived.email.is_none());
}

#[test]
fn missing_pools_and_not_json() {
    assert!(parse_global_config("{}").unwrap_err().0[0].contains("pools: is required"));
    assert!(parse_global_config("pools: {}").unwrap_err().0[0].contains("not valid JSON"));
}

#[test]
fn configmap_yaml_is_read() {
    let y = r#"
apiVersion: v1
kind: ConfigMap
metadata: { name: global, namespace: k8slb-system }
data:
  config: |
    { "pools": { "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" } } }
"#;
    let c = parse_config_file(y).unwrap();
    assert_eq!(c.pools.len(), 1);
}

#[test]
fn reserved_ports_default_to_the_nodes_own_and_a_list_replaces_them() {
    let base =
        r#""pools": {"default": {"network": "198.18.0.0/24", "range": "198.18.0.10-198.18.0.20"}}"#;
    let d = parse_global_config(&format!("{{{base}}}")).unwrap();
    for p in [22, 2379, 2380, 6443, 9253, 9254, 10250, 10256] {
        assert!(d.reserved_ports.contains(p), "{p}");
    }
    for p in [21, 23, 80, 443, 2378, 2381, 9252, 9255, 10251] {
        assert!(!d.reserved_ports.contains(p), "{p}");
    }
    let c = parse_global_config(&format!(
        r#"{{{base}, "reservedPorts": [8080, "30000-32767", "22", "30010-30020"]}}"#
    ))
    .unwrap();
    assert_eq!(c.reserved_ports.to_string(), "22,8080,30000-32767");
    assert!(c.reserved_ports.contains(31000) && !c.reserved_ports.contains(6443));
    let none = parse_global_config(&format!(r#"{{{base}, "reservedPorts": []}}"#)).unwrap();
    assert!(!none.reserved_ports.contains(22));
    for bad in [
        r#""22""#,
        r#"[0]"#,
        r#"[70000]"#,
        r#"["9-3"]"#,
        r#"["a-b"]"#,
        r#"[true]"#,
    ] {
        let e = parse_global_config(&format!(r#"{{{base}, "reservedPorts": {bad}}}"#)).unwrap_err();
        assert!(e.to_string().contains("reservedPorts"), "{bad}: {e}");
    }
}
