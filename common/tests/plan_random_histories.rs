//! Randomised histories (deterministic seeds) keep the plan's invariants: idempotence
//! with status write-back, nodes going to zero and back, pool removal and return,
//! duplicate and hostile input.

mod support;
use k8s_openapi::api::core::v1::Service;
use k8slb_common::state::{Protocol, State};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use support::*;

const POOLS: &str = r#"{ "pools": {
    "default": { "network": "10.0.0.0/28", "range": "10.0.0.0/29" },
    "v6": { "network": "fd00::/120", "range": "fd00::10-fd00::13" } } }"#;
const ONE_POOL: &str = r#"{ "pools": {
    "default": { "network": "10.0.0.0/28", "range": "10.0.0.0/29" } } }"#;

struct Rng(u64);
impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn random_services(r: &mut Rng) -> Vec<Service> {
    let n = r.next(14) as usize;
    (0..n)
        .map(|i| {
            let mut b = svc("default", &format!("s{i:02}")).created(r.next(6) as u32);
            let v6 = match r.next(5) {
                0 => {
                    b = b.pool("v6");
                    true
                }
                1 => {
                    b = b.pool("default,v6");
                    false
                }
                _ => false,
            };
            if r.next(4) == 0 {
                let ix = r.next(16);
                b = b.ip(&if v6 {
                    format!("fd00::{ix:x}")
                } else {
                    format!("10.0.0.{ix}")
                });
            }
            if r.next(3) == 0 {
                let ix = r.next(16);
                b = b.status_ip(&if v6 {
                    format!("fd00::{ix:x}")
                } else {
                    format!("10.0.0.{ix}")
                });
            }
            let mut seen = BTreeSet::new();
            for _ in 0..1 + r.next(2) {
                let p = [80, 443, 22, 53][r.next(4) as usize];
                if seen.insert(p) {
                    b = b.port(p);
                }
            }
            b.build()
        })
        .collect()
}

fn invariants(s: &State) {
    let mut by_ip: BTreeMap<std::net::IpAddr, BTreeSet<(Protocol, u16)>> = BTreeMap::new();
    for (k, v) in &s.services {
        for ip in &v.ips {
            assert!(s.vips[ip].services.contains(k));
            for p in &v.ports {
                assert!(
                    by_ip.entry(*ip).or_default().insert((p.protocol, p.port)),
                    "{ip}: {k} clashes on {}",
                    p.port
                );
            }
        }
    }
    let vrids: BTreeSet<u8> = s.instances.iter().map(|i| i.vrid).collect();
    assert_eq!(vrids.len(), s.instances.len());
}

/// The watcher writes each Service's status from the state.
fn write_back(services: &[Service], s: &State) -> Vec<Service> {
    services
        .iter()
        .map(|svc| {
            let key = format!("default/{}", svc.metadata.name.as_deref().unwrap());
            let ips: Vec<String> = ips(s, &key);
            let mut v = serde_json::to_value(svc).unwrap();
            v["status"] = json!({ "loadBalancer": { "ingress":
                ips.iter().map(|i| json!({"ip": i, "ipMode": "Proxy"})).collect::<Vec<_>>() } });
            serde_json::from_value(v).unwrap()
        })
        .collect()
}

#[test]
fn idempotent_with_status_write_back_nodes_to_zero_and_pool_edits() {
    let c = cfg(POOLS);
    let one = cfg(ONE_POOL);
    for seed in 1..400u64 {
        let mut r = Rng(seed.wrapping_mul(0x9e3779b97f4a7c15));
        let services = random_services(&mut r);
        let s1 = run(&c, &objs(services.clone(), nodes(3), vec![]), None);
        invariants(&s1);
        let s2 = run(&c, &objs(services.clone(), nodes(3), vec![]), Some(&s1));
        assert_eq!(s2.to_json(), s1.to_json(), "seed {seed}: plan(plan(x))");
        let written = write_back(&services, &s1);
        let s3 = run(&c, &objs(written.clone(), nodes(3), vec![]), Some(&s1));
        assert_eq!(
            s3.to_json(),
            s1.to_json(),
            "seed {seed}: after status write-back"
        );
        // Restart without a state: status alone gives the same IPs.
        let s4 = run(&c, &objs(written.clone(), nodes(3), vec![]), None);
        for (k, v) in &s1.services {
            assert_eq!(s4.services[k].ips, v.ips, "seed {seed}: {k} after restart");
        }
        // LB nodes go to zero and back: no IP moves, and it settles.
        let z = run(&c, &objs(written.clone(), vec![], vec![]), Some(&s1));
        invariants(&z);
        let z2 = run(&c, &objs(written.clone(), vec![], vec![]), Some(&z));
        assert_eq!(
            z2.to_json(),
            z.to_json(),
            "seed {seed}: zero nodes idempotent"
        );
        let back = run(&c, &objs(written.clone(), nodes(3), vec![]), Some(&z));
        let back2 = run(&c, &objs(written.clone(), nodes(3), vec![]), Some(&back));
        assert_eq!(
            back2.to_json(),
            back.to_json(),
            "seed {seed}: nodes back idempotent"
        );
        for (k, v) in &s1.services {
            assert_eq!(back.services[k].ips, v.ips, "seed {seed}: {k} moved");
        }
        // Pool v6 removed, then back: v4-only Services keep their IPs throughout.
        let p1 = run(&one, &objs(written.clone(), nodes(3), vec![]), Some(&s1));
        invariants(&p1);
        let p2 = run(&one, &objs(written.clone(), nodes(3), vec![]), Some(&p1));
        assert_eq!(
            p2.to_json(),
            p1.to_json(),
            "seed {seed}: pool removed idempotent"
        );
        let p3 = run(&c, &objs(written.clone(), nodes(3), vec![]), Some(&p1));
        invariants(&p3);
        for (k, v) in &s1.services {
            if v.pool == "default" && !v.ips.is_empty() {
                assert_eq!(p1.services[k].ips, v.ips, "seed {seed}: {k}");
                assert_eq!(p3.services[k].ips, v.ips, "seed {seed}: {k}");
            }
        }
    }
}
