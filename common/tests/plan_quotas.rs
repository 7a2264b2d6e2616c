//! The admin's quotas per pool: `maxScale` (the most addresses one object may ask for
//! with `loadbalancer/scale`) and `addressesPerNamespace` (the most addresses the
//! Services and Gateways of one namespace hold together). Beyond them: a `QuotaExceeded`
//! problem (an Event) and nothing new (`<pending>`); what is held stays.

mod support;

use k8slb_common::config::GlobalConfig;
use support::*;

fn config(pool_extra: &str) -> GlobalConfig {
    cfg(&format!(
        r#"{{ "pools": {{ "default": {{ "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.109"{pool_extra} }} }} }}"#
    ))
}

fn quota_problem(s: &k8slb_common::state::State, key: &str) -> Option<String> {
    problems_of(s, key)
        .into_iter()
        .find(|(r, _)| r == "QuotaExceeded")
        .map(|(_, m)| m)
}

#[test]
fn a_scale_beyond_the_pools_max_is_refused_and_the_pool_is_not_drained() {
    let c = config(r#", "maxScale": 2"#);
    let services = vec![
        svc("evil", "a")
            .port(80)
            .ann("loadbalancer/scale", "8")
            .created(1)
            .build(),
        svc("evil", "b")
            .port(80)
            .ann("loadbalancer/scale", "8")
            .created(2)
            .build(),
        svc("bank", "web")
            .port(80)
            .ann("loadbalancer/scale", "2")
            .created(3)
            .build(),
    ];
    let s = run(&c, &objs(services, nodes(3), vec![]), None);
    assert!(ips(&s, "evil/a").is_empty());
    assert!(ips(&s, "evil/b").is_empty());
    assert!(quota_problem(&s, "evil/a").unwrap().contains("maxScale"));
    assert_eq!(ips(&s, "bank/web").len(), 2);
    // Without the quota, the two scale-8 Services would have drained the 10 addresses.
    let open = config("");
    let services = vec![
        svc("evil", "a")
            .port(80)
            .ann("loadbalancer/scale", "8")
            .created(1)
            .build(),
        svc("evil", "b")
            .port(80)
            .ann("loadbalancer/scale", "8")
            .created(2)
            .build(),
        svc("bank", "web").port(80).created(3).build(),
    ];
    let s = run(&open, &objs(services, nodes(3), vec![]), None);
    assert!(
        ips(&s, "bank/web").is_empty(),
        "the drain this quota prevents"
    );
}

#[test]
fn a_namespace_holds_at_most_its_quota_and_keeps_what_it_held() {
    let services = |n: u32| -> Vec<_> {
        (0..n)
            .map(|i| {
                svc("evil", &format!("s{i}"))
                    .port(80)
                    .created(i + 1)
                    .build()
            })
            .chain([svc("bank", "web").port(80).created(50).build()])
            .collect()
    };
    let before = run(&config(""), &objs(services(4), nodes(2), vec![]), None);
    for i in 0..4 {
        assert_eq!(ips(&before, &format!("evil/s{i}")).len(), 1);
    }
    // The quota arrives later: the 4 held addresses stay, a fifth is refused.
    let c = config(r#", "addressesPerNamespace": 3"#);
    let s = run(&c, &objs(services(5), nodes(2), vec![]), Some(&before));
    for i in 0..4 {
        assert_eq!(
            ips(&s, &format!("evil/s{i}")).len(),
            1,
            "s{i} keeps its address"
        );
    }
    assert!(ips(&s, "evil/s4").is_empty());
    assert!(quota_problem(&s, "evil/s4")
        .unwrap()
        .contains("addressesPerNamespace: 3"));
    assert_eq!(ips(&s, "bank/web").len(), 1);
    // From scratch, the quota holds: three of five.
    let fresh = run(&c, &objs(services(5), nodes(2), vec![]), None);
    let held = (0..5)
        .filter(|i| !ips(&fresh, &format!("evil/s{i}")).is_empty())
        .count();
    assert_eq!(held, 3);
}

#[test]
fn quota_keys_are_checked() {
    for bad in [
        r#", "maxScale": 0"#,
        r#", "maxScale": 9"#,
        r#", "maxScale": 1.5"#,
        r#", "addressesPerNamespace": -1"#,
        r#", "addressesPerNamespace": "x""#,
    ] {
        let text = format!(
            r#"{{ "pools": {{ "default": {{ "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.109"{bad} }} }} }}"#
        );
        assert!(
            k8slb_common::config::parse_global_config(&text).is_err(),
            "{bad}"
        );
    }
}
