//! Edge cases of the allocation core: each test names the behaviour it pins, and its
//! comment says what went wrong without it.

mod support;
use k8slb_common::state::{Protocol, State};
use std::collections::BTreeMap;
use support::*;

/// Invariant: on every VIP, the Services listed in `vips` (with the ports the state
/// publishes for them) never clash on (protocol, port), and every Service's IPs are VIPs
/// that list it.
fn check_no_clash(s: &State) {
    for (ip, v) in &s.vips {
        let mut seen: BTreeMap<(Protocol, u16), String> = BTreeMap::new();
        for k in &v.services {
            let st = &s.services[k];
            assert!(
                st.ips.contains(ip),
                "{k} listed on {ip} but holds {:?}",
                st.ips
            );
            for p in &st.ports {
                if let Some(other) = seen.insert((p.protocol, p.port), k.to_string()) {
                    panic!(
                        "{ip}: {k} and {other} both publish {:?}/{}",
                        p.protocol, p.port
                    );
                }
            }
        }
    }
    for (k, st) in &s.services {
        for ip in &st.ips {
            assert!(
                s.vips[ip].services.contains(k),
                "{k} holds {ip} but is not listed"
            );
        }
    }
}

#[test]
fn stale_status_of_an_older_service_does_not_take_a_newer_services_allocation() {
    // Without it: sticky claims were taken per Service in creation order, status and previous
    // state together, so an older Service whose status still showed an address it had
    // released (status write-back lags) took that address back from the Service the
    // previous state gave it to: an existing allocation moved.
    let c = cfg(TWO_POOLS);
    let b = svc("default", "b").port(80).created(2).build();
    let s0 = run(&c, &objs(vec![b.clone()], nodes(1), vec![]), None);
    assert_eq!(ips(&s0, "default/b"), ["192.168.10.200"]);
    let a = svc("default", "a")
        .port(80)
        .created(1)
        .status_ip("192.168.10.200")
        .build();
    let s1 = run(&c, &objs(vec![a, b], nodes(1), vec![]), Some(&s0));
    assert_eq!(ips(&s1, "default/b"), ["192.168.10.200"], "b's IP moved");
    assert_eq!(ips(&s1, "default/a"), ["192.168.10.201"]);
    check_no_clash(&s1);
}

#[test]
fn stale_status_never_makes_two_dynamic_services_share() {
    // Same root cause: a dynamic Service only shares an address by asking for it.
    let c = cfg(TWO_POOLS);
    let b = svc("default", "b").port(80).created(2).build();
    let s0 = run(&c, &objs(vec![b.clone()], nodes(1), vec![]), None);
    let a = svc("default", "a")
        .port(443)
        .created(1)
        .status_ip("192.168.10.200")
        .build();
    let s1 = run(&c, &objs(vec![a, b], nodes(1), vec![]), Some(&s0));
    assert_eq!(ips(&s1, "default/b"), ["192.168.10.200"]);
    assert_eq!(ips(&s1, "default/a"), ["192.168.10.201"]);
}

#[test]
fn duplicate_services_count_once_even_when_not_adjacent_in_creation_order() {
    // Without it: `dedup_by` after the sort only removed adjacent duplicates; two copies of
    // a Service with different creation times both allocated, the ports published were
    // the last copy's while the conflict check had used the first's, so a co-tenant
    // could share the IP on a clashing port.
    let c = cfg(TWO_POOLS);
    let first = svc("default", "x")
        .ip("192.168.10.5")
        .port(80)
        .created(1)
        .build();
    let other = svc("default", "y").port(80).created(2).build();
    let second = svc("default", "x")
        .ip("192.168.10.5")
        .port(443)
        .created(3)
        .build();
    let tenant = svc("default", "z")
        .ip("192.168.10.5")
        .port(443)
        .created(4)
        .build();
    let s = run(
        &c,
        &objs(vec![first, other, second, tenant], nodes(1), vec![]),
        None,
    );
    check_no_clash(&s);
    assert!(
        s.problems.iter().any(|p| p.reason == "DuplicateService"),
        "{:?}",
        s.problems
    );
}

#[test]
fn a_new_static_request_is_served_before_new_dynamic_ones() {
    // Without it: the module documents "2. static requests, 3. dynamic" but both ran in one pass
    // in creation order, so an older new dynamic Service took the lowest free address
    // that a newer Service asked for by name in the same plan, and the static request
    // failed with a PortConflict although its address was free.
    let c = cfg(TWO_POOLS);
    let s = run(
        &c,
        &objs(
            vec![
                svc("default", "dyn").port(80).created(1).build(),
                svc("default", "stat")
                    .ip("192.168.10.200")
                    .port(80)
                    .created(2)
                    .build(),
            ],
            nodes(1),
            vec![],
        ),
        None,
    );
    assert_eq!(ips(&s, "default/stat"), ["192.168.10.200"]);
    assert_eq!(ips(&s, "default/dyn"), ["192.168.10.201"]);
    assert!(s.problems.is_empty(), "{:?}", s.problems);
}

#[test]
fn a_pool_annotation_from_a_yaml_block_scalar_is_read_not_replaced_by_default() {
    // Without it: values were checked for control characters before trimming, so `pool: |`
    // ("external\n") was ignored and the Service silently got an IP from pool default.
    let c = cfg(TWO_POOLS);
    let s = run(
        &c,
        &objs(
            vec![svc("default", "web").pool("external\n").port(80).build()],
            nodes(1),
            vec![],
        ),
        None,
    );
    assert_eq!(ips(&s, "default/web"), ["1.2.3.50"], "{:?}", s.problems);
}

#[test]
fn an_ignored_pool_or_ips_annotation_allocates_nothing() {
    // Without it: an ignored `loadbalancer/pool` fell back to pool default and an ignored
    // `loadbalancer/ips` to a dynamic address: a surprise IP from the wrong place.
    let c = cfg(TWO_POOLS);
    let s = run(
        &c,
        &objs(
            vec![
                svc("default", "pool")
                    .pool("exter\u{7}nal")
                    .port(80)
                    .build(),
                svc("default", "ips")
                    .ann("loadbalancer/ips", "192.168.10.9\u{0}")
                    .port(80)
                    .build(),
                svc("default", "long")
                    .pool(&format!("external{}", " x".repeat(600)))
                    .port(80)
                    .build(),
            ],
            nodes(1),
            vec![],
        ),
        None,
    );
    for k in ["default/pool", "default/ips", "default/long"] {
        assert!(ips(&s, k).is_empty(), "{k} got {:?}", ips(&s, k));
        assert!(
            problems_of(&s, k)
                .iter()
                .any(|p| p.0 == "InvalidAnnotation"),
            "{k}: {:?}",
            problems_of(&s, k)
        );
    }
}

#[test]
fn backup_priorities_stay_distinct_with_many_lb_nodes() {
    // Without it: backups got 100 - (k-1) saturating at 1 (and `as u8` wrapped at 257), so with
    // more than 101 LB nodes many members of an instance shared priority 1.
    let c = cfg(TWO_POOLS);
    let many: Vec<_> = (1..=130)
        .map(|i| {
            node(
                &format!("lb{i:03}"),
                &format!("198.18.{}.{}", i / 200, i % 200 + 1),
            )
        })
        .collect();
    let s = run(
        &c,
        &objs(vec![svc("default", "a").port(80).build()], many, vec![]),
        None,
    );
    for i in &s.instances {
        let prios: Vec<u8> = i.members.iter().map(|m| m.priority).collect();
        assert!(prios.windows(2).all(|w| w[0] > w[1]), "{prios:?}");
        assert!(prios.iter().all(|p| (1..=254).contains(p)));
        assert!(i.members.len() > 1);
    }
    let again = run(
        &c,
        &objs(
            vec![svc("default", "a").port(80).build()],
            (1..=130)
                .map(|i| {
                    node(
                        &format!("lb{i:03}"),
                        &format!("198.18.{}.{}", i / 200, i % 200 + 1),
                    )
                })
                .collect(),
            vec![],
        ),
        Some(&s),
    );
    assert_eq!(again.to_json(), s.to_json(), "idempotent");
}

#[test]
fn a_previous_state_with_a_duplicated_vrid_never_yields_a_collision() {
    // Without it: previous instances were kept as they were, so a previous state (a file given
    // with --previous, a hand-edited ConfigMap) with two instances on one VRID produced a
    // state with two live instances on that VRID.
    let c = cfg(TWO_POOLS);
    let svcs = vec![
        svc("default", "a").port(80).build(),
        svc("default", "b").pool("external").port(80).build(),
    ];
    let s0 = run(&c, &objs(svcs.clone(), nodes(2), vec![]), None);
    assert_eq!(s0.instances.len(), 2);
    let mut bad = s0.clone();
    let v0 = bad.instances[0].vrid;
    bad.instances[1].vrid = v0;
    for v in bad.vips.values_mut() {
        v.vrid = v0;
    }
    let s1 = run(&c, &objs(svcs, nodes(2), vec![]), Some(&bad));
    let vrids: std::collections::BTreeSet<u8> = s1.instances.iter().map(|i| i.vrid).collect();
    assert_eq!(vrids.len(), s1.instances.len(), "{:?}", s1.instances);
    for (ip, v) in &s1.vips {
        let i = s1.instances.iter().find(|i| i.vrid == v.vrid).unwrap();
        assert!(i.vips.contains(ip) && i.pool == v.pool);
    }
}

#[test]
fn dual_stack_with_one_static_address_is_not_silently_half_served() {
    // Without it: with two pools and `spec.loadBalancerIP` (one family), the other family got
    // no address and no problem said why.
    let c = cfg(TWO_POOLS);
    let s = run(
        &c,
        &objs(
            vec![svc("default", "ds")
                .pool("default,ipv6")
                .ip("192.168.10.7")
                .port(80)
                .build()],
            nodes(1),
            vec![],
        ),
        None,
    );
    // The pinned family is the static address, the other one is dynamic.
    assert_eq!(ips(&s, "default/ds"), ["192.168.10.7", "2001:468:101::1"]);
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    let again = run(
        &c,
        &objs(
            vec![svc("default", "ds")
                .pool("default,ipv6")
                .ip("192.168.10.7")
                .port(80)
                .build()],
            nodes(1),
            vec![],
        ),
        Some(&s),
    );
    assert_eq!(again.to_json(), s.to_json(), "idempotent");
    // A static address outside every pool of the Service: nothing at all, no surprise
    // dynamic address in the other family.
    let s = run(
        &c,
        &objs(
            vec![svc("default", "v6only")
                .pool("default")
                .ann("loadbalancer/ips", "2001:468:101::9")
                .port(80)
                .build()],
            nodes(1),
            vec![],
        ),
        None,
    );
    assert!(ips(&s, "default/v6only").is_empty());
    assert_eq!(problems_of(&s, "default/v6only")[0].0, "IpOutsidePool");
}

#[test]
fn a_dynamic_service_sharing_a_pinned_address_keeps_it_over_a_restart_without_state() {
    // Regression guard for the fix above: status claims onto a used address are refused
    // only when no tenant asked for it by name; a Service sharing an address that
    // another one pins keeps it when only the statuses remain.
    let mut c = cfg(TWO_POOLS);
    // k8slb's sharing rule (by name, no key): what this test is about.
    c.tenancy.address_sharing = k8slb_common::config::AddressSharing::Open;
    let dynamic = svc("default", "dyn")
        .port(53)
        .created(4)
        .status_ip("192.168.10.9")
        .build();
    let pinned = svc("default", "pin")
        .ip("192.168.10.9")
        .port(2222)
        .created(3)
        .build();
    let s0 = run(
        &c,
        &objs(vec![dynamic.clone(), pinned.clone()], nodes(1), vec![]),
        None,
    );
    assert_eq!(ips(&s0, "default/dyn"), ["192.168.10.9"]);
    assert_eq!(ips(&s0, "default/pin"), ["192.168.10.9"]);
    let pinned = svc("default", "pin")
        .ip("192.168.10.9")
        .port(2222)
        .created(3)
        .status_ip("192.168.10.9")
        .build();
    let s1 = run(&c, &objs(vec![dynamic, pinned], nodes(1), vec![]), None);
    assert_eq!(s1.to_json(), s0.to_json());
}

#[test]
fn a_static_request_for_the_network_or_broadcast_address_is_refused() {
    // Without it: the static rule only checked network containment, so `loadBalancerIP:
    // 192.168.10.255` in a /24 network was accepted and the broadcast address became a
    // VIP (the dynamic allocator already skipped it).
    let c = cfg(TWO_POOLS);
    let s = run(
        &c,
        &objs(
            vec![
                svc("default", "bc").ip("192.168.10.255").port(80).build(),
                svc("default", "net").ip("192.168.10.0").port(80).build(),
                svc("default", "ok").ip("192.168.10.254").port(80).build(),
            ],
            nodes(1),
            vec![],
        ),
        None,
    );
    assert!(ips(&s, "default/bc").is_empty());
    assert!(ips(&s, "default/net").is_empty());
    assert_eq!(problems_of(&s, "default/bc")[0].0, "IpNotUsable");
    assert_eq!(ips(&s, "default/ok"), ["192.168.10.254"]);
}
