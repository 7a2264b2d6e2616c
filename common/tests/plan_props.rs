//! Property tests of the allocator's invariants.

mod support;
use k8s_openapi::api::core::v1::Service;
use k8slb_common::state::{Protocol, State};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use support::*;

/// Small pools so that exhaustion, sharing and conflicts happen often.
const POOLS: &str = r#"{ "pools": {
    "default": { "network": "10.0.0.0/28", "range": "10.0.0.0/29" },
    "v6": { "network": "fd00::/120", "range": "fd00::10-fd00::13" } } }"#;

#[derive(Debug, Clone)]
struct Spec {
    pool: usize,           // 0 default, 1 v6, 2 dual, 3 unknown
    static_ip: Option<u8>, // index into the network
    ports: Vec<u16>,
    created: u32,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop_oneof![6 => Just(0usize), 2 => Just(1usize), 1 => Just(2usize), 1 => Just(3usize)],
        proptest::option::weighted(0.3, 0u8..16),
        proptest::collection::vec(
            prop_oneof![Just(80u16), Just(443), Just(22), Just(53)],
            1..3,
        ),
        0u32..50,
    )
        .prop_map(|(pool, static_ip, ports, created)| Spec {
            pool,
            static_ip,
            ports,
            created,
        })
}

fn build(i: usize, s: &Spec) -> Service {
    let mut b = svc("default", &format!("s{i:02}")).created(s.created);
    b = match s.pool {
        1 => b.pool("v6"),
        2 => b.pool("default,v6"),
        3 => b.pool("nope"),
        _ => b,
    };
    if let Some(ix) = s.static_ip {
        b = b.ip(&if s.pool == 1 {
            format!("fd00::{ix:x}")
        } else {
            format!("10.0.0.{ix}")
        });
    }
    let mut seen = BTreeSet::new();
    for p in &s.ports {
        if seen.insert(*p) {
            b = b.port(*p as i32);
        }
    }
    b.build()
}

fn invariants(s: &State) -> Result<(), TestCaseError> {
    let c = cfg(POOLS);
    let mut by_ip: BTreeMap<IpAddr, BTreeSet<(Protocol, u16)>> = BTreeMap::new();
    for (k, v) in &s.services {
        for ip in &v.ips {
            // Every address inside one of its pools' networks.
            let inside = v
                .pool
                .split(',')
                .filter_map(|p| c.pools.get(&p.trim().parse().ok()?))
                .any(|p| p.network.range().contains(*ip));
            prop_assert!(inside, "{k}: {ip} outside {}", v.pool);
            // No two Services whose ports clash on one address.
            let set = by_ip.entry(*ip).or_default();
            for p in &v.ports {
                prop_assert!(
                    set.insert((p.protocol, p.port)),
                    "{ip} {}/{} given twice",
                    p.port,
                    k
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn allocator_invariants(specs in proptest::collection::vec(spec(), 0..24), drop in any::<prop::sample::Index>(), seed in any::<u64>()) {
        let c = cfg(POOLS);
        let services: Vec<Service> = specs.iter().enumerate().map(|(i, s)| build(i, s)).collect();
        let s1 = run(&c, &objs(services.clone(), nodes(3), vec![]), None);
        invariants(&s1)?;

        // plan applied to its own output changes nothing.
        let s2 = run(&c, &objs(services.clone(), nodes(3), vec![]), Some(&s1));
        prop_assert_eq!(s2.to_json(), s1.to_json());

        // Results do not depend on input order.
        let mut shuffled = services.clone();
        let n = shuffled.len();
        if n > 1 {
            let mut x = seed;
            for i in (1..n).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
        }
        let s3 = run(&c, &objs(shuffled, nodes(3), vec![]), None);
        prop_assert_eq!(s3.to_json(), s1.to_json());

        // Removing an unrelated Service moves no other IP.
        if !services.is_empty() {
            let gone = drop.index(services.len());
            let mut fewer = services.clone();
            let removed = fewer.remove(gone);
            let s4 = run(&c, &objs(fewer.clone(), nodes(3), vec![]), Some(&s1));
            invariants(&s4)?;
            for (k, v) in &s4.services {
                if k.name.as_str() == removed.metadata.name.as_deref().unwrap() { continue; }
                let before = &s1.services[k].ips;
                for ip in before {
                    prop_assert!(v.ips.contains(ip), "{k} lost {ip} when another Service was removed");
                }
            }
            // Adding it back moves nobody who kept an IP.
            let s5 = run(&c, &objs(services.clone(), nodes(3), vec![]), Some(&s4));
            invariants(&s5)?;
            for (k, v) in &s4.services {
                for ip in &v.ips {
                    prop_assert!(s5.services[k].ips.contains(ip), "{k} lost {ip} when a Service was added");
                }
            }
        }
    }
}
