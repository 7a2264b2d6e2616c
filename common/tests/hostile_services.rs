//! Hostile Services (huge, malformed, thousands of annotations): never a panic, always a
//! problem, and at most 10 listed per object.

mod support;
use serde_json::json;
use support::*;

#[test]
fn hostile_services_are_problems_not_panics() {
    let c = cfg(TWO_POOLS);
    let mut many = svc("default", "many").port(80);
    for i in 0..10_000 {
        many = many.ann(&format!("loadbalancer/x{i}"), "v");
        many = many.ann(&format!("example.com/k{i}"), "v");
    }
    let services = vec![
        many.build(),
        svc("default", "big")
            .port(70000)
            .port(-1)
            .port(0)
            .port(i32::MAX)
            .build(),
        svc("default", "uni").pool("défaut").port(80).build(),
        svc("default", "empty").pool("").ip("").port(80).build(),
        svc("default", "comma").pool(",,,").port(80).build(),
        svc("default", "ipsjunk")
            .ann("loadbalancer/ips", ",,, ,")
            .port(80)
            .build(),
        svc("default", "mapped")
            .ip("::ffff:192.168.10.5")
            .port(80)
            .build(),
        svc("default", "aff")
            .port(80)
            .spec("sessionAffinity", json!("ClientIP"))
            .spec(
                "sessionAffinityConfig",
                json!({"clientIP": {"timeoutSeconds": -5}}),
            )
            .spec(
                "loadBalancerSourceRanges",
                json!(["", "10.0.0.0/33", "::/0", "10.1.2.3"]),
            )
            .build(),
        svc("ns", "x".repeat(300).as_str()).port(80).build(),
        svc("ns", "Ünï").port(80).build(),
    ];
    let s = run(&c, &objs(services.clone(), nodes(2), vec![]), None);
    let s2 = run(&c, &objs(services, nodes(2), vec![]), Some(&s));
    assert_eq!(s2.to_json(), s.to_json());
    assert!(ips(&s, "default/mapped").is_empty());
    assert!(ips(&s, "default/comma").is_empty());
    // 10,000 unknown annotations: ten listed (each would be an Event), the rest counted.
    let many = problems_of(&s, "default/many");
    let unknown = many.iter().filter(|p| p.0 == "UnknownAnnotation").count();
    assert_eq!(unknown, 10, "{many:?}");
    let more: Vec<_> = many.iter().filter(|p| p.0 == "TooManyProblems").collect();
    assert_eq!(more.len(), 1, "{many:?}");
    assert!(more[0].1.starts_with("9990 more problems"), "{more:?}");
    // Other Services' problems are listed as before.
    assert!(!problems_of(&s, "default/uni").is_empty());
    assert!(s.problems.len() < 100, "{}", s.problems.len());
}

/// Thousands of case variants of `loadbalancer/pool`, each with a refused value: every
/// problem is of the kind that explains a missing address, and still at most 10 are
/// listed (plus the count).
#[test]
fn a_flood_of_refused_pool_annotations_is_capped_too() {
    let c = cfg(TWO_POOLS);
    let mut s = svc("default", "flood").port(80);
    for i in 0..2000u32 {
        let key: String = "loadbalancer/pool"
            .chars()
            .enumerate()
            .map(|(k, ch)| {
                if k >= 13 && (i >> (k - 13)) & 1 == 1 {
                    ch.to_ascii_uppercase()
                } else {
                    ch
                }
            })
            .collect();
        s = s.ann(&format!("{key}{}", " ".repeat((i / 16) as usize)), "a\nb");
    }
    let st = run(&c, &objs(vec![s.build()], nodes(1), vec![]), None);
    let p = problems_of(&st, "default/flood");
    assert!(p.len() <= 11, "{}", p.len());
    assert!(p.iter().any(|(r, _)| r == "TooManyProblems"), "{p:?}");
    assert!(ips(&st, "default/flood").is_empty());
}

/// A Service with 20,000 ports (each a listening socket on every LB node serving it,
/// from an open-files budget all tenants share): its address is allocated and kept, its
/// first `limits.portsPerService` ports (256 by default) are served, and one
/// `QuotaExceeded` problem says how many were listed; another Service is untouched.
#[test]
fn a_service_with_more_ports_than_the_limit_keeps_its_address_and_its_first_ports() {
    let c = cfg(TWO_POOLS);
    let mut wide = svc("tenant-a", "wide");
    for p in 20_001..=40_000 {
        wide = wide.port(p);
    }
    let services = vec![
        wide.build(),
        svc("tenant-b", "web").port(80).port(443).build(),
    ];
    let s = run(&c, &objs(services.clone(), nodes(2), vec![]), None);
    let key = |k: &str| k.parse().unwrap();
    let served: Vec<u16> = s.services[&key("tenant-a/wide")]
        .ports
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(served, (20_001..=20_256).collect::<Vec<u16>>());
    assert_eq!(ips(&s, "tenant-a/wide").len(), 1);
    let p = problems_of(&s, "tenant-a/wide");
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, "QuotaExceeded");
    assert!(
        p[0].1.starts_with("20000 ports: only the first 256"),
        "{p:?}"
    );
    assert_eq!(s.services[&key("tenant-b/web")].ports.len(), 2);
    assert!(problems_of(&s, "tenant-b/web").is_empty());
    // The same again: the allocation is kept.
    let s2 = run(&c, &objs(services, nodes(2), vec![]), Some(&s));
    assert_eq!(ips(&s2, "tenant-a/wide"), ips(&s, "tenant-a/wide"));
}
