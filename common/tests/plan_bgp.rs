//! BGP-mode pools (issue 25) in the plan: their VIPs are in no VRRP instance (every LB
//! node announces them), and a VRRP pool beside them is planned as before.

mod support;

use support::*;

const CONFIG: &str = r#"{ "pools": {
        "default": { "network": "198.18.1.0/24", "range": "198.18.1.10-198.18.1.20" },
        "ecmp": { "network": "198.18.10.0/24", "range": "198.18.10.10-198.18.10.20", "mode": "bgp" } },
      "bgp": { "asn": 64512, "peers": [{ "address": "198.18.3.1", "asn": 64513, "bfd": true }] } }"#;

#[test]
fn bgp_pool_vips_are_in_no_vrrp_instance_and_vrrp_pools_are_unchanged() {
    let c = cfg(CONFIG);
    let services = || {
        vec![
            svc("a", "web").port(80).created(1).build(),
            svc("a", "fast")
                .port(80)
                .ann("loadbalancer/pool", "ecmp")
                .created(2)
                .build(),
        ]
    };
    let s = run(&c, &objs(services(), nodes(3), vec![]), None);
    let web = ips(&s, "a/web");
    let fast = ips(&s, "a/fast");
    assert_eq!(web.len(), 1);
    assert_eq!(fast.len(), 1);
    assert!(fast[0].starts_with("198.18.10."), "{fast:?}");
    let fast_ip = fast[0].parse().unwrap();
    let v = &s.vips[&fast_ip];
    assert_eq!((v.vrid, v.owner.as_ref()), (0, None));
    assert!(s.instances.iter().all(|i| !i.vips.contains(&fast_ip)));
    assert!(s.instances.iter().all(|i| i.pool.as_str() == "default"));
    let web_ip = web[0].parse().unwrap();
    assert_ne!(s.vips[&web_ip].vrid, 0);
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    // Stable: a second round over the same objects gives the same state.
    let again = run(&c, &objs(services(), nodes(3), vec![]), Some(&s));
    assert_eq!(again, s);
}

#[test]
fn a_pool_switched_from_vrrp_to_bgp_leaves_its_instances_and_keeps_its_addresses() {
    let vrrp = CONFIG.replace(r#", "mode": "bgp""#, "");
    let services = || {
        vec![svc("a", "fast")
            .port(80)
            .ann("loadbalancer/pool", "ecmp")
            .created(2)
            .build()]
    };
    let before = run(&cfg(&vrrp), &objs(services(), nodes(2), vec![]), None);
    let ip = ips(&before, "a/fast");
    assert_ne!(before.vips[&ip[0].parse().unwrap()].vrid, 0);
    let after = run(
        &cfg(CONFIG),
        &objs(services(), nodes(2), vec![]),
        Some(&before),
    );
    assert_eq!(ips(&after, "a/fast"), ip, "the address stays");
    assert!(after.instances.is_empty(), "{:?}", after.instances);
    assert_eq!(after.vips[&ip[0].parse().unwrap()].vrid, 0);
}
