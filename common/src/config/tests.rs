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
fn ports_per_service_defaults_to_256_and_is_admin_settable() {
    let c = parse_global_config(README_TWO_POOLS).unwrap();
    assert_eq!(c.limits.ports_per_service, 256);
    let with = |limits: &str| {
        let text = README_TWO_POOLS.trim_end().trim_end_matches('}');
        parse_global_config(&format!("{text}, \"limits\": {limits} }}"))
    };
    let c = with(r#"{ "portsPerService": 131070, "retryBackendsPerNamespace": 1 }"#).unwrap();
    assert_eq!(c.limits.ports_per_service, 131_070);
    assert_eq!(c.limits.retry_backends_per_namespace, 1);
    assert_eq!(
        parse_global_config(README_TWO_POOLS)
            .unwrap()
            .limits
            .retry_backends_per_namespace,
        64
    );
    for bad in [
        r#"{ "portsPerService": 0 }"#,
        r#"{ "portsPerService": 131071 }"#,
        r#"{ "portsPerService": 1.5 }"#,
        r#"{ "portsPerService": "many" }"#,
    ] {
        let e = with(bad).unwrap_err();
        assert!(
            e.0.iter().any(|m| m.starts_with("limits.portsPerService")),
            "{bad}: {e}"
        );
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

const BGP_TWO_POOLS: &str = r#"{ "pools": {
        "vrrp": { "network": "198.18.1.0/24", "range": "198.18.1.10-198.18.1.20" },
        "ecmp": { "network": "198.18.10.0/24", "range": "198.18.10.10-198.18.10.20", "mode": "bgp" } },
      "bgp": { "asn": 64512, "peers": [
        { "address": "198.18.3.1", "asn": 64513, "bfd": true },
        { "address": "198.18.4.1", "asn": 64514, "holdTime": 30, "nodes": ["lb-2", "lb-1"],
          "passwordSecret": "bgp-router-2" } ] } }"#;

#[test]
fn a_bgp_pool_beside_a_vrrp_pool_is_accepted_with_typed_peers() {
    use crate::bgp::{PoolMode, DEFAULT_BFD_INTERVAL_MS, DEFAULT_HOLD_TIME_S};
    let c = parse_global_config(BGP_TWO_POOLS).unwrap();
    assert_eq!(c.pools[&"vrrp".parse().unwrap()].mode, PoolMode::Vrrp);
    assert_eq!(c.pools[&"ecmp".parse().unwrap()].mode, PoolMode::Bgp);
    let b = c.bgp.as_ref().unwrap();
    assert_eq!(b.asn.get(), 64512);
    assert_eq!(b.peers.len(), 2);
    assert!(b.peers[0].bfd);
    assert_eq!(b.peers[0].hold_time_s, DEFAULT_HOLD_TIME_S);
    assert!(b.peers[0].nodes.is_empty());
    assert!(!b.peers[1].bfd);
    assert_eq!(b.peers[1].hold_time_s, 30);
    let nodes: Vec<&str> = b.peers[1].nodes.iter().map(|n| n.as_str()).collect();
    assert_eq!(nodes, ["lb-1", "lb-2"]);
    assert_eq!(b.peers[0].password_secret, None);
    assert_eq!(
        b.peers[1].password_secret.as_ref().map(|n| n.as_str()),
        Some("bgp-router-2")
    );
    assert_eq!(b.bfd.receive_interval_ms, DEFAULT_BFD_INTERVAL_MS);
    assert_eq!(b.bfd.detect_multiplier, 3);
    // The actors get the mode of each pool and the peers.
    let a = c.actor_config(&Default::default());
    assert_eq!(a.pools[&"ecmp".parse().unwrap()].mode, PoolMode::Bgp);
    assert_eq!(a.bgp.as_ref(), Some(b));
    let json = serde_json::to_string(&a).unwrap();
    // VRRP pools look as they did (the key is left out), so older actors read them.
    assert_eq!(json.matches("\"mode\"").count(), 1, "{json}");
}

#[test]
fn a_bgp_pool_without_peers_is_refused() {
    let no_bgp = r#"{ "pools": { "ecmp": { "network": "198.18.10.0/24", "range": "198.18.10.10-198.18.10.20", "mode": "BGP" } } }"#;
    let e = parse_global_config(no_bgp).unwrap_err();
    assert!(
        e.0.iter()
            .any(|m| m.starts_with("pools.ecmp.mode: \"bgp\" needs the top-level bgp key")),
        "{e}"
    );
    let empty = no_bgp.trim_end().trim_end_matches('}').to_string()
        + r#", "bgp": { "asn": 64512, "peers": [] } }"#;
    assert!(parse_global_config(&empty).is_err());
}

#[test]
fn hostile_or_wrong_bgp_values_are_refused_with_their_path() {
    let with_bgp = |bgp: &str| {
        parse_global_config(&format!(
            r#"{{ "pools": {{ "p": {{ "network": "198.18.10.0/24", "range": "198.18.10.10-198.18.10.20", "mode": "bgp" }} }}, "bgp": {bgp} }}"#
        ))
    };
    let cases = [
        (
            r#"{ "asn": 0, "peers": [{"address": "198.18.3.1", "asn": 1}] }"#,
            "bgp.asn",
        ),
        (
            r#"{ "asn": 23456, "peers": [{"address": "198.18.3.1", "asn": 1}] }"#,
            "bgp.asn",
        ),
        (
            r#"{ "asn": 64512.5, "peers": [{"address": "198.18.3.1", "asn": 1}] }"#,
            "bgp.asn",
        ),
        (
            r#"{ "asn": 4294967296, "peers": [{"address": "198.18.3.1", "asn": 1}] }"#,
            "bgp.asn",
        ),
        (
            r#"{ "peers": [{"address": "198.18.3.1", "asn": 1}] }"#,
            "bgp.asn: is required",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1\n neighbor 6.6.6.6 remote-as 1", "asn": 1}] }"#,
            "bgp.peers[0].address",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "0.0.0.0", "asn": 1}] }"#,
            "bgp.peers[0].address",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "224.0.0.5", "asn": 1}] }"#,
            "bgp.peers[0].address",
        ),
        (
            r#"{ "asn": 1, "peers": [{"asn": 1}] }"#,
            "bgp.peers[0].address: is required",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1"}] }"#,
            "bgp.peers[0].asn: is required",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1", "asn": 2}, {"address": "198.18.3.1", "asn": 3}] }"#,
            "bgp.peers[1].address: 198.18.3.1 is given more than once",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1", "asn": 2, "holdTime": 2}] }"#,
            "bgp.peers[0].holdTime",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1", "asn": 2, "holdTime": 70000}] }"#,
            "bgp.peers[0].holdTime",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1", "asn": 2, "bfd": "yes"}] }"#,
            "bgp.peers[0].bfd",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1", "asn": 2, "nodes": ["LB;1"]}] }"#,
            "bgp.peers[0].nodes[0]",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1", "asn": 2, "pasword": "x"}] }"#,
            "bgp.peers[0].pasword: unknown key",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1", "asn": 2, "passwordSecret": "../../etc/shadow"}] }"#,
            "bgp.peers[0].passwordSecret",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1", "asn": 2, "passwordSecret": {"name": "x"}}] }"#,
            "bgp.peers[0].passwordSecret: expected the name of a Secret",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1", "asn": 2}], "bfd": {"receiveInterval": 5} }"#,
            "bgp.bfd.receiveInterval",
        ),
        (
            r#"{ "asn": 1, "peers": [{"address": "198.18.3.1", "asn": 2}], "bfd": {"detectMultiplier": 1} }"#,
            "bgp.bfd.detectMultiplier",
        ),
        (r#"{ "asn": 1, "peers": {} }"#, "bgp.peers: expected a list"),
        (r#"[]"#, "bgp: expected an object"),
    ];
    for (bgp, needle) in cases {
        let e = with_bgp(bgp).unwrap_err();
        assert!(e.0.iter().any(|m| m.starts_with(needle)), "{bgp}: {e}");
    }
    let e = parse_global_config(
        r#"{ "pools": { "p": { "network": "198.18.10.0/24", "range": "198.18.10.10-198.18.10.20", "mode": "anycast" } } }"#,
    )
    .unwrap_err();
    assert!(
        e.0.iter()
            .any(|m| m.starts_with("pools.p.mode: expected \"vrrp\" or \"bgp\"")),
        "{e}"
    );
}

#[test]
fn listener_set_listeners_per_gateway_defaults_to_256_and_is_admin_settable() {
    let c = parse_global_config(README_TWO_POOLS).unwrap();
    assert_eq!(c.limits.listener_set_listeners_per_gateway, 256);
    let with = |limits: &str| {
        let text = README_TWO_POOLS.trim_end().trim_end_matches('}');
        parse_global_config(&format!("{text}, \"limits\": {limits} }}"))
    };
    let c = with(r#"{ "listenerSetListenersPerGateway": 8 }"#).unwrap();
    assert_eq!(c.limits.listener_set_listeners_per_gateway, 8);
    for bad in [
        r#"{ "listenerSetListenersPerGateway": 0 }"#,
        r#"{ "listenerSetListenersPerGateway": 100001 }"#,
    ] {
        let e = with(bad).unwrap_err();
        assert!(
            e.0.iter()
                .any(|m| m.starts_with("limits.listenerSetListenersPerGateway")),
            "{bad}: {e}"
        );
    }
}

#[test]
fn mirrors_per_rule_defaults_to_4_and_takes_0_to_16() {
    let c = parse_global_config(README_TWO_POOLS).unwrap();
    assert_eq!(c.limits.mirrors_per_rule, 4);
    let with = |limits: &str| {
        let text = README_TWO_POOLS.trim_end().trim_end_matches('}');
        parse_global_config(&format!("{text}, \"limits\": {limits} }}"))
    };
    for (text, n) in [
        (r#"{ "mirrorsPerRule": 0 }"#, 0),
        (r#"{ "mirrorsPerRule": 16 }"#, 16),
    ] {
        assert_eq!(with(text).unwrap().limits.mirrors_per_rule, n, "{text}");
    }
    for bad in [
        r#"{ "mirrorsPerRule": 17 }"#,
        r#"{ "mirrorsPerRule": -1 }"#,
        r#"{ "mirrorsPerRule": 1.5 }"#,
    ] {
        let e = with(bad).unwrap_err();
        assert!(
            e.0.iter().any(|m| m.starts_with("limits.mirrorsPerRule")),
            "{bad}: {e}"
        );
    }
    let e = with(r#"{ "mirrorsPerRule": 17 }"#).unwrap_err();
    assert!(e.to_string().contains("from 0 to 16"), "{e}");
}
