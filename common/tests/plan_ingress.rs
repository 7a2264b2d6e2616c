//! Ingresses in the plan: the pool's ingress VIP is a tenant like a Service (sticky, port
//! clashes checked against Services on it), and every Ingress of ours is in the state.

mod support;

use k8s_openapi::api::core::v1::Secret;
use k8slb_common::plan::{plan, PlanOptions, Provider};
use k8slb_common::state::State;
use serde_json::json;
use support::*;

const ONE_POOL: &str = r#"{ "pools": {
    "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" } } }"#;

fn with_ingresses(
    services: Vec<k8s_openapi::api::core::v1::Service>,
    ingresses: Vec<Ing>,
) -> k8slb_common::objects::Objects {
    let mut o = objs(services, nodes(2), vec![]);
    o.services.push(backend_svc("default", "app", 80));
    o.ingresses = ingresses.into_iter().map(Ing::build).collect();
    o.ingress_classes = vec![ingress_class()];
    o
}

fn vip_of(s: &State) -> String {
    let v: Vec<_> = s.vips.iter().filter(|(_, v)| v.ingress).collect();
    assert_eq!(v.len(), 1, "one ingress VIP: {:?}", s.vips);
    v[0].0.to_string()
}

fn ports_on(s: &State, ip: &str) -> Vec<u16> {
    s.http
        .listeners
        .iter()
        .filter(|l| l.ip.to_string() == ip)
        .map(|l| l.port)
        .collect()
}

#[test]
fn the_ingresses_of_a_pool_share_one_vip_that_no_service_gets() {
    let c = cfg(ONE_POOL);
    let o = with_ingresses(
        vec![svc("default", "web").port(80).created(1).build()],
        vec![
            ing("default", "a")
                .rule("a.example", "/", "app", 80)
                .created(2),
            ing("shop", "b.v2")
                .rule("b.example", "/", "app", 80)
                .created(3),
        ],
    );
    let s = run(&c, &o, None);
    assert_eq!(ips(&s, "default/web"), ["198.18.0.100"]);
    assert_eq!(vip_of(&s), "198.18.0.101");
    let v = &s.vips[&"198.18.0.101".parse().unwrap()];
    assert!(v.services.is_empty(), "{v:?}");
    assert!(v.owner.is_some(), "an ingress VIP has an owner: {v:?}");
    assert_eq!(ingress_ips(&s, "default/a"), ["198.18.0.101"]);
    assert_eq!(
        ingress_ips(&s, "shop/b.v2"),
        ["198.18.0.101"],
        "a dotted Ingress name is a valid key"
    );
    assert_eq!(ports_on(&s, "198.18.0.101"), [80]);
    assert!(
        s.instances
            .iter()
            .any(|i| i.vips.contains(&"198.18.0.101".parse().unwrap())),
        "the ingress VIP is in a VRRP instance: {:?}",
        s.instances
    );
}

#[test]
fn the_ingress_vip_stays_when_an_older_service_appears_and_across_restarts() {
    let c = cfg(ONE_POOL);
    let first = run(
        &c,
        &with_ingresses(
            vec![],
            vec![ing("default", "a").rule("", "/", "app", 80).created(5)],
        ),
        None,
    );
    assert_eq!(vip_of(&first), "198.18.0.100");
    let o = with_ingresses(
        vec![svc("default", "web").port(80).created(1).build()],
        vec![ing("default", "a").rule("", "/", "app", 80).created(5)],
    );
    let second = run(&c, &o, Some(&first));
    assert_eq!(vip_of(&second), "198.18.0.100");
    assert_eq!(ips(&second, "default/web"), ["198.18.0.101"]);
    // A restart from the state as published gives the same state.
    let again = run(&c, &o, Some(&State::from_json(&second.to_json()).unwrap()));
    assert_eq!(again, second);
}

#[test]
fn a_lost_state_adopts_the_address_the_ingress_status_shows() {
    let c = cfg(ONE_POOL);
    let o = with_ingresses(
        vec![svc("default", "web").port(80).created(1).build()],
        vec![ing("default", "a")
            .rule("", "/", "app", 80)
            .created(5)
            .status_ip("198.18.0.110")],
    );
    let s = run(&c, &o, None);
    assert_eq!(vip_of(&s), "198.18.0.110");
    assert_eq!(ips(&s, "default/web"), ["198.18.0.100"]);
}

#[test]
fn a_service_shares_the_ingress_vip_on_other_ports_only() {
    let mut c = cfg(ONE_POOL);
    // k8slb's sharing rule (by name, no key): what this test is about.
    c.tenancy.address_sharing = k8slb_common::config::AddressSharing::Open;
    let first = run(
        &c,
        &with_ingresses(
            vec![],
            vec![ing("default", "a").rule("", "/", "app", 80).created(1)],
        ),
        None,
    );
    let vip = vip_of(&first);
    let o = with_ingresses(
        vec![
            svc("default", "ssh").port(2222).ip(&vip).created(2).build(),
            svc("default", "web").port(80).ip(&vip).created(3).build(),
        ],
        vec![ing("default", "a").rule("", "/", "app", 80).created(1)],
    );
    let s = run(&c, &o, Some(&first));
    assert_eq!(vip_of(&s), vip);
    assert_eq!(ips(&s, "default/ssh"), vec![vip.clone()]);
    let v = &s.vips[&vip.parse().unwrap()];
    assert_eq!(v.services, ["default/ssh".parse().unwrap()]);
    assert!(ips(&s, "default/web").is_empty());
    let p = problems_of(&s, "default/web");
    assert!(
        p.iter().any(|(r, m)| r == "PortConflict"
            && m.contains("the Ingresses of pool default")
            && m.contains("TCP/80")),
        "{p:?}"
    );
}

#[test]
fn a_port_an_ingress_adds_that_a_service_holds_is_refused_for_that_ingress_alone() {
    let mut c = cfg(ONE_POOL);
    // k8slb's sharing rule (by name, no key): what this test is about.
    c.tenancy.address_sharing = k8slb_common::config::AddressSharing::Open;
    let a = || ing("default", "a").rule("", "/", "app", 80).created(1);
    let first = run(&c, &with_ingresses(vec![], vec![a()]), None);
    let vip = vip_of(&first);
    let pinned = || svc("default", "alt").port(8080).ip(&vip).created(2).build();
    let second = run(&c, &with_ingresses(vec![pinned()], vec![a()]), Some(&first));
    assert_eq!(ips(&second, "default/alt"), vec![vip.clone()]);

    let b = ing("default", "b")
        .rule("b.example", "/", "app", 80)
        .ann("loadbalancer/http-port", "8080")
        .created(3);
    let third = run(
        &c,
        &with_ingresses(vec![pinned()], vec![a(), b]),
        Some(&second),
    );
    assert_eq!(vip_of(&third), vip, "the ingress VIP did not move");
    assert_eq!(
        ips(&third, "default/alt"),
        vec![vip.clone()],
        "the Service kept it"
    );
    assert_eq!(ports_on(&third, &vip), [80]);
    let p = ingress_problems(&third, "default/b");
    assert!(
        p.iter().any(|(r, m)| r == "PortConflict"
            && m.contains("port 8080")
            && m.contains("Service default/alt")),
        "{p:?}"
    );
    assert!(ingress_problems(&third, "default/a").is_empty());
}

#[test]
fn a_custom_port_served_before_stays_claimed_against_a_newer_service() {
    let mut c = cfg(ONE_POOL);
    // k8slb's sharing rule (by name, no key): what this test is about.
    c.tenancy.address_sharing = k8slb_common::config::AddressSharing::Open;
    let b = || {
        ing("default", "b")
            .rule("", "/", "app", 80)
            .ann("loadbalancer/http-port", "8080")
            .created(1)
    };
    let first = run(&c, &with_ingresses(vec![], vec![b()]), None);
    let vip = vip_of(&first);
    assert_eq!(ports_on(&first, &vip), [8080]);
    let late = svc("default", "late")
        .port(8080)
        .ip(&vip)
        .created(9)
        .build();
    let s = run(&c, &with_ingresses(vec![late], vec![b()]), Some(&first));
    assert_eq!(ports_on(&s, &vip), [8080]);
    assert!(ips(&s, "default/late").is_empty());
    assert!(problems_of(&s, "default/late")
        .iter()
        .any(|(r, _)| r == "PortConflict"));
}

#[test]
fn an_unknown_pool_is_a_problem_on_each_of_its_ingresses() {
    let c = cfg(ONE_POOL);
    let o = with_ingresses(
        vec![],
        vec![
            ing("default", "a").rule("", "/", "app", 80).pool("nope"),
            ing("default", "b").rule("", "/", "app", 80).pool("nope"),
        ],
    );
    let s = run(&c, &o, None);
    assert!(s.vips.is_empty());
    assert!(s.http.is_empty());
    for key in ["default/a", "default/b"] {
        assert!(ingress_ips(&s, key).is_empty());
        assert!(s.ingresses.contains_key(&key.parse().unwrap()));
        let p = ingress_problems(&s, key);
        assert!(
            p.iter()
                .any(|(r, m)| r == "UnknownPool" && m.contains("pool nope does not exist")),
            "{key}: {p:?}"
        );
    }
}

#[test]
fn an_exhausted_pool_is_a_problem_on_every_ingress_and_their_other_problems_still_show() {
    let c = cfg(
        r#"{ "pools": { "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.100" } } }"#,
    );
    let o = with_ingresses(
        vec![svc("default", "web").port(80).created(1).build()],
        vec![
            ing("default", "a").rule("", "/", "app", 80).created(2),
            ing("default", "b")
                .rule("Bad Host", "/", "app", 80)
                .created(3),
        ],
    );
    let s = run(&c, &o, None);
    assert_eq!(ips(&s, "default/web"), ["198.18.0.100"]);
    for key in ["default/a", "default/b"] {
        assert!(ingress_ips(&s, key).is_empty());
        assert!(
            ingress_problems(&s, key)
                .iter()
                .any(|(r, _)| r == "PoolExhausted"),
            "{key}: {:?}",
            s.problems
        );
    }
    assert!(ingress_problems(&s, "default/b")
        .iter()
        .any(|(r, _)| r == "InvalidHost"));
}

#[test]
fn ingresses_of_another_class_are_neither_planned_nor_reported() {
    let c = cfg(ONE_POOL);
    let o = with_ingresses(
        vec![],
        vec![ing("default", "theirs")
            .rule("Bad Host", "/", "app", 80)
            .class("nginx")],
    );
    let s = run(&c, &o, None);
    assert!(s.ingresses.is_empty());
    assert!(s.vips.is_empty());
    assert!(s.problems.is_empty(), "{:?}", s.problems);
}

#[test]
fn the_kubeproxy_variant_refuses_ingresses_with_a_problem() {
    let c = cfg(ONE_POOL);
    let o = with_ingresses(vec![], vec![ing("default", "a").rule("", "/", "app", 80)]);
    let opts = PlanOptions {
        provider: Provider::Kubeproxy,
        ..PlanOptions::default()
    };
    let s = plan(&c, &opts, &o, None);
    assert!(s.vips.is_empty() && s.http.is_empty());
    assert!(ingress_problems(&s, "default/a")
        .iter()
        .any(|(r, m)| r == "NothingToServe" && m.contains("kubeproxy")));
}

#[test]
fn the_ingress_vip_is_released_with_the_last_ingress() {
    let c = cfg(ONE_POOL);
    let first = run(
        &c,
        &with_ingresses(vec![], vec![ing("default", "a").rule("", "/", "app", 80)]),
        None,
    );
    assert_eq!(first.vips.len(), 1);
    let s = run(&c, &with_ingresses(vec![], vec![]), Some(&first));
    assert!(s.vips.is_empty(), "{:?}", s.vips);
    assert!(s.http.is_empty() && s.ingresses.is_empty());
}

fn tls_secret(name: &str, crt: &str, key: &str) -> Secret {
    use base64::Engine;
    let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": { "name": name, "namespace": "default" },
        "data": { "tls.crt": b(crt), "tls.key": b(key) }
    }))
    .unwrap()
}

#[test]
fn a_secret_that_is_not_a_certificate_is_a_problem_and_serves_no_https() {
    let c = cfg(ONE_POOL);
    let mut o = with_ingresses(
        vec![],
        vec![ing("default", "a")
            .rule("a.example", "/", "app", 80)
            .tls("broken", &["a.example"])],
    );
    o.secrets = vec![tls_secret("broken", "not a certificate", "nor a key")];
    let s = run(&c, &o, None);
    let p = ingress_problems(&s, "default/a");
    assert!(
        p.iter()
            .any(|(r, m)| r == "SecretInvalid" && m.contains("default/broken")),
        "{p:?}"
    );
    let vip = vip_of(&s);
    assert_eq!(
        ports_on(&s, &vip),
        [80],
        "no HTTPS listener without a certificate"
    );
    assert!(
        !s.to_json().contains("not a certificate"),
        "no Secret bytes in the state"
    );
}

fn cert_fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/certs")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The Secret names each host's certificate comes from, on every listener of `s`.
fn certificates(s: &State) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for l in &s.http.listeners {
        for c in l.tls.iter().flat_map(|t| &t.certificates) {
            for h in &c.hosts {
                out.push((h.to_string(), c.file.stem()));
            }
        }
    }
    out.sort();
    out
}

/// A Secret the proxies would refuse (a leaf signed with SHA-1, the issue 20 case) or of
/// another type costs its own hosts their certificate, with a problem (an Event) on the
/// Ingress that names it and says why; the Ingress's other hosts, and other Ingresses,
/// keep theirs.
#[test]
fn a_secret_the_proxies_would_refuse_costs_only_its_own_hosts_their_certificate() {
    let c = cfg(ONE_POOL);
    let mut o = with_ingresses(
        vec![],
        vec![
            ing("default", "a")
                .rule("a.example.com", "/", "app", 80)
                .rule("b.example.com", "/", "app", 80)
                .rule("c.example.com", "/", "app", 80)
                .tls("good", &["a.example.com"])
                .tls("sha1", &["b.example.com"])
                .tls("opaque", &["c.example.com"])
                .created(1),
            ing("default", "other")
                .rule("d.example.com", "/", "app", 80)
                .tls("p521", &["d.example.com"])
                .created(2),
        ],
    );
    let f = cert_fixture;
    let mut opaque = tls_secret("opaque", &f("ec.crt"), &f("ec.key"));
    opaque.type_ = Some("Opaque".into());
    o.secrets = vec![
        tls_secret("good", &(f("leaf.crt") + &f("int.crt")), &f("leaf.key")),
        tls_secret("sha1", &f("sha1-leaf.crt"), &f("leaf.key")),
        opaque,
        tls_secret("p521", &f("p521.crt"), &f("p521.key")),
    ];
    let s = run(&c, &o, None);
    let p = ingress_problems(&s, "default/a");
    assert!(
        p.iter().any(|(r, m)| r == "SecretInvalid"
            && m.contains("default/sha1")
            && m.contains("signed with SHA-1")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|(r, m)| r == "SecretWrongType"
            && m.contains("default/opaque")
            && m.contains("\"Opaque\"")),
        "{p:?}"
    );
    assert!(ingress_problems(&s, "default/other").is_empty());
    assert_eq!(
        certificates(&s),
        [
            ("a.example.com".to_string(), "default_good".to_string()),
            ("d.example.com".to_string(), "default_p521".to_string()),
        ]
    );
    let json = s.to_json();
    assert!(!json.contains("PRIVATE KEY") && !json.contains("BEGIN"));
}

fn owners_of(s: &State, ips: &[String]) -> Vec<String> {
    ips.iter()
        .map(|ip| {
            s.vips[&ip.parse().unwrap()]
                .owner
                .as_ref()
                .map(|o| o.to_string())
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn scale_gives_an_ingress_pool_n_vips_owned_by_n_nodes_all_routed() {
    let c = cfg(ONE_POOL);
    let mut o = with_ingresses(
        vec![],
        vec![
            ing("default", "a").rule("a.example", "/", "app", 80),
            ing("default", "b")
                .rule("b.example", "/", "app", 80)
                .ann("loadbalancer/scale", "2"),
        ],
    );
    o.nodes = nodes(3);
    let s = run(&c, &o, None);
    let vips = ingress_ips(&s, "default/a");
    assert_eq!(vips, ["198.18.0.100", "198.18.0.101"]);
    assert_eq!(ingress_ips(&s, "default/b"), vips);
    let owners = owners_of(&s, &vips);
    assert_ne!(owners[0], owners[1], "two VIPs, two owners: {owners:?}");
    for ip in &vips {
        assert_eq!(ports_on(&s, ip), [80], "{ip} serves the routes");
    }
    // Each owner takes its VIP back (preemption), or the first node to start both
    // instances would keep both addresses.
    for i in &s.instances {
        assert!(i.preempt, "instance {} of a scaled VIP preempts", i.vrid);
    }
    let unscaled = run(
        &c,
        &with_ingresses(vec![], vec![ing("default", "a").rule("", "/", "app", 80)]),
        None,
    );
    assert!(unscaled.instances.iter().all(|i| !i.preempt));
    // Sticky, owners included.
    let again = run(&c, &o, Some(&s));
    assert_eq!(again, s);
}

#[test]
fn scale_gives_a_service_n_addresses_on_distinct_nodes_and_shrinks_to_the_lowest() {
    let c = cfg(ONE_POOL);
    let mut o = objs(
        vec![svc("default", "web")
            .port(80)
            .ann("loadbalancer/scale", "3")
            .build()],
        nodes(3),
        vec![],
    );
    let s = run(&c, &o, None);
    let got = ips(&s, "default/web");
    assert_eq!(got, ["198.18.0.100", "198.18.0.101", "198.18.0.102"]);
    let mut owners = owners_of(&s, &got);
    owners.sort();
    owners.dedup();
    assert_eq!(owners.len(), 3, "{owners:?}");

    o.services = vec![svc("default", "web")
        .port(80)
        .ann("loadbalancer/scale", "1")
        .build()];
    let shrunk = run(&c, &o, Some(&s));
    assert_eq!(ips(&shrunk, "default/web"), ["198.18.0.100"]);
}

#[test]
fn scale_is_refused_when_invalid_or_when_addresses_are_asked_for_by_name() {
    let c = cfg(ONE_POOL);
    let o = objs(
        vec![
            svc("default", "bad")
                .port(80)
                .ann("loadbalancer/scale", "99")
                .build(),
            svc("default", "pinned")
                .port(80)
                .ip("198.18.0.110")
                .ann("loadbalancer/scale", "2")
                .build(),
        ],
        nodes(2),
        vec![],
    );
    let s = run(&c, &o, None);
    assert_eq!(ips(&s, "default/bad").len(), 1);
    assert_eq!(ips(&s, "default/pinned"), ["198.18.0.110"]);
    for key in ["default/bad", "default/pinned"] {
        assert!(
            problems_of(&s, key)
                .iter()
                .any(|(r, m)| r == "InvalidAnnotation" && m.contains("loadbalancer/scale")),
            "{key}: {:?}",
            s.problems
        );
    }
}

#[test]
fn scaled_addresses_go_to_distinct_nodes_even_when_one_node_is_much_less_loaded() {
    let c = cfg(ONE_POOL);
    let old = |n: &str| svc("default", n).port(80).build();
    let before = run(
        &c,
        &objs(vec![old("a"), old("b"), old("c")], nodes(1), vec![]),
        None,
    );
    let o = objs(
        vec![
            old("a"),
            old("b"),
            old("c"),
            svc("default", "web")
                .port(80)
                .ann("loadbalancer/scale", "2")
                .build(),
        ],
        nodes(2),
        vec![],
    );
    let s = run(&c, &o, Some(&before));
    let got = ips(&s, "default/web");
    assert_eq!(got.len(), 2);
    let owners = owners_of(&s, &got);
    assert_ne!(owners[0], owners[1], "{owners:?}");
}

#[test]
fn an_ingress_that_no_longer_decodes_keeps_its_pools_vip() {
    let c = cfg(ONE_POOL);
    let first = run(
        &c,
        &with_ingresses(
            vec![],
            vec![ing("default", "a").rule("a.example", "/", "app", 80)],
        ),
        None,
    );
    let vip = vip_of(&first);
    // The same Ingress, now broken (rules is not a list), and a newer Service.
    let mut o = with_ingresses(vec![svc("default", "web").port(80).build()], vec![]);
    o.add_text(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: { name: a, namespace: default }\nspec: { rules: 7 }\n",
    )
    .unwrap();
    assert!(o.ingresses.is_empty());
    let s = run(&c, &o, Some(&first));
    assert_eq!(vip_of(&s), vip, "the ingress VIP is kept");
    assert_eq!(ingress_ips(&s, "default/a"), vec![vip.clone()]);
    assert_ne!(ips(&s, "default/web"), vec![vip.clone()], "not given away");
    assert!(
        s.problems
            .iter()
            .any(|p| p.reason == "Undecodable" && p.object.to_string().contains("default/a")),
        "{:?}",
        s.problems
    );
    // Fixed again: served as before, on the same address.
    let fixed = run(
        &c,
        &with_ingresses(
            vec![svc("default", "web").port(80).build()],
            vec![ing("default", "a").rule("a.example", "/", "app", 80)],
        ),
        Some(&s),
    );
    assert_eq!(vip_of(&fixed), vip);
    assert_eq!(ports_on(&fixed, &vip), [80]);
}
