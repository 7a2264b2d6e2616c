//! Table tests of the allocation rules, k8slb's README examples and each k8slb bug we fix.

mod support;
use k8slb_common::plan::{plan, PlanOptions, Provider};
use k8slb_common::state::{Mode, ProxyProtocol, Stickiness};
use serde_json::json;
use support::*;

#[test]
fn readme_examples() {
    let c = cfg(TWO_POOLS);
    let s = run(
        &c,
        &objs(
            vec![
                svc("default", "myapp-loadbalancer")
                    .named_port("http", 80, json!(80))
                    .build(),
                svc("cattle-system", "rancher-loadbalancer")
                    .pool("external")
                    .ip("1.2.3.4")
                    .named_port("https", 443, json!(443))
                    .build(),
                svc("default", "myapp-loadbalancer6")
                    .ann("loadBalancer/pool", "ipv6") // the README's spelling
                    .ip("2001:468:0101:0000:0000:0000:0000:0004")
                    .named_port("http", 80, json!(80))
                    .build(),
            ],
            nodes(2),
            vec![],
        ),
        None,
    );
    // k8slb bug: the first address of a range was never handed out.
    assert_eq!(ips(&s, "default/myapp-loadbalancer"), ["192.168.10.200"]);
    assert_eq!(ips(&s, "cattle-system/rancher-loadbalancer"), ["1.2.3.4"]);
    // k8slb bug: IPv6 stored expanded. RFC 5952 form here.
    assert_eq!(ips(&s, "default/myapp-loadbalancer6"), ["2001:468:101::4"]);
    let rancher = &s.services[&"cattle-system/rancher-loadbalancer".parse().unwrap()];
    assert!(rancher.ports[0].tls, "443 terminates TLS");
    assert_eq!(rancher.ports[0].cert.as_ref().unwrap().as_str(), "external");
    assert!(
        rancher.ports[0].backend_tls,
        "targetPort 443 speaks TLS to the backend (k8slb)"
    );
    assert!(s.problems.is_empty(), "{:?}", s.problems);
}

#[test]
fn ingress_lb_example_redirects_port_80() {
    let c = cfg(r#"{"pools":{"public":{"network":"1.2.3.0/24","range":"1.2.3.10-1.2.3.20"}}}"#);
    let s = run(
        &c,
        &objs(
            vec![svc("ingress-nginx", "ingress-lb")
                .pool("public")
                .ip("1.2.3.4")
                .named_port("http", 80, json!(80))
                .named_port("https", 443, json!(80))
                .build()],
            nodes(1),
            vec![],
        ),
        None,
    );
    let p = &s.services[&"ingress-nginx/ingress-lb".parse().unwrap()].ports;
    assert_eq!(
        (p[0].port, p[0].tls, p[0].redirect, p[0].mode),
        (80, false, true, Mode::Http)
    );
    assert_eq!((p[1].port, p[1].tls, p[1].redirect), (443, true, false));
    assert!(!p[1].backend_tls);
}

#[test]
fn cidr_ranges_skip_network_and_broadcast_but_not_31_or_32() {
    let c = cfg(
        r#"{"pools":{"default":{"network":"10.0.0.0/24","range":"10.0.0.0/30"},
                             "p31":{"network":"10.1.0.0/31","range":"10.1.0.0/31"},
                             "p32":{"network":"10.2.0.0/24","range":"10.2.0.7/32"}}}"#,
    );
    let services: Vec<_> = (0..3)
        .map(|i| svc("default", &format!("s{i}")).port(80).created(i).build())
        .collect();
    let mut all = services.clone();
    all.push(
        svc("default", "t0")
            .pool("p31")
            .port(80)
            .created(10)
            .build(),
    );
    all.push(
        svc("default", "t1")
            .pool("p31")
            .port(80)
            .created(11)
            .build(),
    );
    all.push(
        svc("default", "u0")
            .pool("p32")
            .port(80)
            .created(12)
            .build(),
    );
    let s = run(&c, &objs(all, nodes(1), vec![]), None);
    assert_eq!(ips(&s, "default/s0"), ["10.0.0.1"]);
    assert_eq!(ips(&s, "default/s1"), ["10.0.0.2"]);
    // k8slb bug: a CIDR range handed out its broadcast address.
    assert!(ips(&s, "default/s2").is_empty());
    assert_eq!(problems_of(&s, "default/s2")[0].0, "PoolExhausted");
    assert_eq!(ips(&s, "default/t0"), ["10.1.0.0"]);
    assert_eq!(ips(&s, "default/t1"), ["10.1.0.1"]);
    assert_eq!(ips(&s, "default/u0"), ["10.2.0.7"]);
}

#[test]
fn static_ip_must_lie_in_the_pool_network_not_only_the_range() {
    let c = cfg(TWO_POOLS);
    let s = run(
        &c,
        &objs(
            vec![
                svc("default", "in-net").ip("192.168.10.5").port(80).build(),
                svc("default", "outside")
                    .ip("192.168.11.5")
                    .port(80)
                    .build(),
                svc("default", "garbage")
                    .ip("192.168.10.300")
                    .port(80)
                    .build(),
                svc("default", "octal").ip("010.0.0.1").port(80).build(),
                svc("default", "nopool").pool("nope").port(80).build(),
            ],
            nodes(1),
            vec![],
        ),
        None,
    );
    assert_eq!(ips(&s, "default/in-net"), ["192.168.10.5"]);
    assert!(ips(&s, "default/outside").is_empty());
    assert_eq!(problems_of(&s, "default/outside")[0].0, "IpOutsidePool");
    assert_eq!(problems_of(&s, "default/garbage")[0].0, "InvalidIp");
    assert!(
        ips(&s, "default/garbage").is_empty(),
        "a broken request gets no surprise IP"
    );
    assert_eq!(problems_of(&s, "default/octal")[0].0, "InvalidIp");
    let np = problems_of(&s, "default/nopool");
    assert_eq!(np[0].0, "UnknownPool");
    assert!(np[0].1.contains("pool nope does not exist"), "{np:?}");
}

#[test]
fn sharing_needs_distinct_ports_and_the_earlier_service_wins() {
    let mut c = cfg(TWO_POOLS);
    // k8slb's sharing rule (by name, no key): what this test is about.
    c.tenancy.address_sharing = k8slb_common::config::AddressSharing::Open;
    let a = svc("default", "a")
        .ip("192.168.10.200")
        .port(80)
        .created(1)
        .build();
    let b = svc("default", "b")
        .ip("192.168.10.200")
        .port(443)
        .created(2)
        .build();
    let clash = svc("default", "clash")
        .ip("192.168.10.200")
        .port(80)
        .created(3)
        .build();
    let s = run(
        &c,
        &objs(vec![clash.clone(), b.clone(), a.clone()], nodes(1), vec![]),
        None,
    );
    assert_eq!(ips(&s, "default/a"), ["192.168.10.200"]);
    assert_eq!(ips(&s, "default/b"), ["192.168.10.200"]);
    assert!(ips(&s, "default/clash").is_empty());
    let p = problems_of(&s, "default/clash");
    assert_eq!(p[0].0, "PortConflict");
    // k8slb bug: the message printed HASH(0x...).
    assert!(p[0].1.contains("Service default/a on TCP/80"), "{p:?}");
    let vip = &s.vips[&"192.168.10.200".parse().unwrap()];
    assert_eq!(vip.services.len(), 2);
    // A dynamic Service never lands on the shared IP.
    let d = svc("default", "d").port(80).created(4).build();
    let s2 = run(
        &c,
        &objs(vec![a.clone(), b.clone(), d], nodes(1), vec![]),
        Some(&s),
    );
    assert_eq!(ips(&s2, "default/d"), ["192.168.10.201"]);

    // k8slb bug: unassigning one tenant deleted the co-tenant's claim.
    let s3 = run(&c, &objs(vec![b.clone()], nodes(1), vec![]), Some(&s2));
    assert_eq!(ips(&s3, "default/b"), ["192.168.10.200"]);
    assert_eq!(
        s3.vips[&"192.168.10.200".parse().unwrap()].services,
        vec!["default/b".parse().unwrap()]
    );
}

#[test]
fn release_on_type_change_class_change_pool_change_and_ip_change() {
    let c = cfg(TWO_POOLS);
    let base = || svc("default", "web").port(80).created(1);
    let s0 = run(&c, &objs(vec![base().build()], nodes(1), vec![]), None);
    assert_eq!(ips(&s0, "default/web"), ["192.168.10.200"]);
    // k8slb bug: a type change away from LoadBalancer never released the IP.
    let s1 = run(
        &c,
        &objs(vec![base().type_("ClusterIP").build()], nodes(1), vec![]),
        Some(&s0),
    );
    assert!(!s1.services.contains_key(&"default/web".parse().unwrap()));
    assert!(s1.vips.is_empty());
    let s2 = run(
        &c,
        &objs(vec![base().class("other.io/lb").build()], nodes(1), vec![]),
        Some(&s0),
    );
    assert!(s2.vips.is_empty());
    let s3 = run(
        &c,
        &objs(vec![base().pool("external").build()], nodes(1), vec![]),
        Some(&s0),
    );
    assert_eq!(ips(&s3, "default/web"), ["1.2.3.50"]);
    let s4 = run(
        &c,
        &objs(vec![base().ip("192.168.10.9").build()], nodes(1), vec![]),
        Some(&s0),
    );
    assert_eq!(ips(&s4, "default/web"), ["192.168.10.9"]);
    // Our own class is claimed; no class is claimed by default.
    let s5 = run(
        &c,
        &objs(
            vec![base().class("k8slb.io/loadbalancer").build()],
            nodes(1),
            vec![],
        ),
        None,
    );
    assert_eq!(ips(&s5, "default/web"), ["192.168.10.200"]);
    let mut c2 = c.clone();
    c2.claim_unclassed = false;
    assert!(
        run(&c2, &objs(vec![base().build()], nodes(1), vec![]), None)
            .services
            .is_empty()
    );
}

#[test]
fn status_is_honoured_after_a_restart_without_state() {
    let c = cfg(TWO_POOLS);
    let s = run(
        &c,
        &objs(
            vec![
                svc("default", "new").port(80).created(9).build(),
                svc("default", "old")
                    .port(80)
                    .created(1)
                    .status_ip("192.168.10.210")
                    .build(),
                svc("default", "k8slb").port(80).created(2).build(),
            ],
            nodes(1),
            vec![],
        ),
        None,
    );
    assert_eq!(ips(&s, "default/old"), ["192.168.10.210"]);
    assert_eq!(ips(&s, "default/k8slb"), ["192.168.10.200"]);
    assert_eq!(ips(&s, "default/new"), ["192.168.10.201"]);
    // k8slb's hostname form `<ip>.sslip.io` is adopted too.
    let mut h = svc("default", "legacy").port(80).build();
    h.status = serde_json::from_value(
        json!({"loadBalancer":{"ingress":[{"hostname":"192.168.10.222.sslip.io"}]}}),
    )
    .unwrap();
    let s = run(&c, &objs(vec![h], nodes(1), vec![]), None);
    assert_eq!(ips(&s, "default/legacy"), ["192.168.10.222"]);
}

#[test]
fn dual_stack_with_two_pools_and_the_ips_annotation() {
    let c = cfg(TWO_POOLS);
    let s = run(
        &c,
        &objs(
            vec![
                svc("default", "dyn").pool("default, ipv6").port(80).build(),
                svc("default", "stat")
                    .pool("default,ipv6")
                    .ann("loadbalancer/ips", "192.168.10.7, 2001:468:101::7")
                    .port(80)
                    .build(),
                svc("default", "twice")
                    .pool("default")
                    .ann("loadbalancer/ips", "192.168.10.8,192.168.10.9")
                    .port(80)
                    .build(),
            ],
            nodes(1),
            vec![],
        ),
        None,
    );
    assert_eq!(
        ips(&s, "default/dyn"),
        ["192.168.10.200", "2001:468:101::1"],
        "an IPv6 CIDR range skips its subnet-router anycast address"
    );
    assert_eq!(ips(&s, "default/stat"), ["192.168.10.7", "2001:468:101::7"]);
    assert_eq!(ips(&s, "default/twice"), ["192.168.10.8"]);
    assert_eq!(problems_of(&s, "default/twice")[0].0, "InvalidAnnotation");
}

#[test]
fn frontend_rules_follow_k8slb_annotations_case_insensitively() {
    let c = cfg(TWO_POOLS);
    let s = run(
        &c,
        &objs(
            vec![
                svc("default", "byname")
                    .named_port("https-web", 8443, json!(8080))
                    .build(),
                svc("default", "byann")
                    .ann("loadbalancer/ssl", "TRUE")
                    .port(8080)
                    .build(),
                svc("default", "off")
                    .ann("loadbalancer/ssl", "False")
                    .named_port("https", 443, json!(80))
                    .port(80)
                    .build(),
                svc("default", "noredir")
                    .ann("LoadBalancer/SSLRedirect", "false")
                    .port(80)
                    .port(443)
                    .build(),
                svc("default", "modes")
                    .ann("loadbalancer/mode", "HTTP")
                    .port(9000)
                    .build(),
                svc("default", "tcp")
                    .ann("loadbalancer/mode", "tcp")
                    .port(80)
                    .build(),
                svc("default", "be")
                    .ann("loadbalancer/sslbackend", "true")
                    .ann("loadbalancer/nocheck", "TRUE")
                    .port(9000)
                    .build(),
                svc("default", "sticky")
                    .spec("sessionAffinity", json!("ClientIP"))
                    .spec(
                        "sessionAffinityConfig",
                        json!({"clientIP":{"timeoutSeconds":60}}),
                    )
                    .port(80)
                    .build(),
                svc("default", "cookie")
                    .ann("loadbalancer/stickiness", "Cookie")
                    .ann("loadbalancer/proxy-protocol", "v2")
                    .port(80)
                    .build(),
                svc("default", "bad")
                    .ann("loadbalancer/stickiness", "sticky;\nx")
                    .ann("loadbalancer/proxy-protocol", "v3")
                    .ann("loadbalancer/sslbackend", "yes")
                    .ann("loadbalancer/typo", "x")
                    .port(80)
                    .build(),
                svc("default", "ranges")
                    .spec(
                        "loadBalancerSourceRanges",
                        json!(["10.0.0.0/8", "192.0.2.7", "10.1.2.3/16"]),
                    )
                    .port(2222)
                    .build(),
            ],
            nodes(1),
            vec![],
        ),
        None,
    );
    let port = |k: &str, i: usize| s.services[&k.parse().unwrap()].ports[i].clone();
    assert!(
        port("default/byname", 0).tls,
        "port name https* terminates TLS (k8slb README; k8slb code ignored it)"
    );
    assert!(port("default/byann", 0).tls);
    assert!(
        !port("default/off", 0).tls,
        "ssl=false turns TLS off, any case"
    );
    assert!(!port("default/off", 1).redirect);
    assert!(port("default/noredir", 1).tls);
    assert!(!port("default/noredir", 0).redirect);
    assert_eq!(port("default/modes", 0).mode, Mode::Http);
    assert_eq!(port("default/tcp", 0).mode, Mode::Tcp);
    let be = port("default/be", 0);
    assert!(
        be.backend_tls && !be.check,
        "nocheck is not overridden by sslbackend (k8slb bug)"
    );
    let st = port("default/sticky", 0);
    assert_eq!(
        (st.stickiness, st.stickiness_timeout_s),
        (Stickiness::Source, 60)
    );
    let ck = port("default/cookie", 0);
    assert_eq!(
        (ck.stickiness, ck.proxy_protocol),
        (Stickiness::Cookie, Some(ProxyProtocol::V2))
    );
    let bad = port("default/bad", 0);
    assert_eq!(
        (bad.stickiness, bad.proxy_protocol, bad.backend_tls),
        (Stickiness::None, None, false)
    );
    let reasons: Vec<String> = problems_of(&s, "default/bad")
        .into_iter()
        .map(|p| p.0)
        .collect();
    assert!(
        reasons.iter().filter(|r| *r == "InvalidAnnotation").count() >= 3,
        "{reasons:?}"
    );
    assert!(reasons.contains(&"UnknownAnnotation".to_string()));
    assert_eq!(
        port("default/ranges", 0)
            .source_ranges
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>(),
        ["10.0.0.0/8", "10.1.0.0/16", "192.0.2.7/32"]
    );
    // Problems never carry raw control characters.
    assert!(s.problems.iter().all(|p| !p.message.contains('\n')));
}

#[test]
fn udp_is_reported_for_haproxy_and_served_by_nginx() {
    let c = cfg(TWO_POOLS);
    let o = objs(
        vec![svc("default", "dns").udp(53).build()],
        nodes(1),
        vec![],
    );
    let h = plan(&c, &PlanOptions::default(), &o, None);
    assert_eq!(problems_of(&h, "default/dns")[0].0, "UnsupportedProtocol");
    let n = plan(
        &c,
        &PlanOptions {
            provider: Provider::Nginx,
            ..Default::default()
        },
        &o,
        None,
    );
    assert!(problems_of(&n, "default/dns").is_empty());
    assert_eq!(
        n.services[&"default/dns".parse().unwrap()].ports[0].mode,
        Mode::Tcp
    );
    let k = plan(
        &c,
        &PlanOptions {
            provider: Provider::Kubeproxy,
            ..Default::default()
        },
        &o,
        None,
    );
    assert_eq!(
        k.services[&"default/dns".parse().unwrap()].ip_mode,
        k8slb_common::state::IpMode::Vip
    );
}

#[test]
fn endpoints_come_from_slices_by_port_name_ready_and_draining() {
    let c = cfg(TWO_POOLS);
    let s = run(
        &c,
        &objs(
            vec![
                svc("default", "web")
                    .named_port("http", 80, json!("web"))
                    .named_port("metrics", 9090, json!(9090))
                    .build(),
                svc("default", "manual").port(5432).build(),
            ],
            nodes(1),
            vec![
                slice(
                    "default",
                    "web",
                    "a",
                    Some("http"),
                    8080,
                    &[
                        ("10.0.0.1", true, true, false),
                        ("10.0.0.2", false, true, true),
                        ("10.0.0.3", false, false, false),
                    ],
                ),
                slice(
                    "default",
                    "web",
                    "b",
                    Some("http"),
                    8080,
                    &[
                        ("10.0.0.4", true, true, false),
                        ("10.0.0.2", true, true, false),
                    ],
                ),
                slice(
                    "default",
                    "web",
                    "c",
                    Some("metrics"),
                    9090,
                    &[("10.0.0.1", true, true, false)],
                ),
                slice(
                    "other",
                    "web",
                    "d",
                    Some("http"),
                    8080,
                    &[("10.9.9.9", true, true, false)],
                ),
                slice(
                    "default",
                    "manual",
                    "m",
                    None,
                    5432,
                    &[("192.0.2.10", true, true, false)],
                ),
            ],
        ),
        None,
    );
    let web = &s.services[&"default/web".parse().unwrap()];
    let eps: Vec<String> = web.ports[0]
        .endpoints
        .iter()
        .map(|e| {
            format!(
                "{}:{}{}",
                e.ip,
                e.port,
                if e.draining { " drain" } else { "" }
            )
        })
        .collect();
    // 10.0.0.2 is draining in one slice and ready in another: ready wins. .3 is not ready.
    assert_eq!(eps, ["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.4:8080"]);
    assert_eq!(web.ports[1].endpoints.len(), 1);
    let manual = &s.services[&"default/manual".parse().unwrap()];
    assert_eq!(manual.ports[0].endpoints[0].ip.to_string(), "192.0.2.10");
}

#[test]
fn hostile_names_are_problems_not_crashes() {
    let c = cfg(TWO_POOLS);
    let mut bad = svc("default", "x").port(80).build();
    bad.metadata.name = Some("web\nfrontend evil".into());
    let s = run(
        &c,
        &objs(
            vec![bad, svc("default", "ok").port(80).build()],
            nodes(1),
            vec![],
        ),
        None,
    );
    assert_eq!(s.services.len(), 1);
    let p = &s.problems[0];
    assert_eq!(p.reason, "InvalidName");
    assert!(
        !p.object.to_string().contains('\n') && p.object.to_string().contains("\\n"),
        "{p:?}"
    );
    assert_eq!(ips(&s, "default/ok"), ["192.168.10.200"]);
}

#[test]
fn lb_nodes_are_ready_selected_and_not_excluded() {
    let c = cfg(TWO_POOLS);
    let mut notready = node("lb-b", "198.18.0.2");
    notready
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .status = "False".into();
    let mut excluded = node("lb-c", "198.18.0.3");
    excluded
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(k8slb_common::plan::EXCLUDE_LABEL.into(), "".into());
    let mut other = node("worker", "198.18.0.4");
    other.metadata.labels = None;
    let s = run(
        &c,
        &objs(
            vec![svc("default", "a").port(80).build()],
            vec![node("lb-a", "198.18.0.1"), notready, excluded, other],
            vec![],
        ),
        None,
    );
    assert_eq!(
        s.nodes.keys().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["lb-a"]
    );
}

#[test]
fn no_lb_nodes_keeps_the_ip_and_repairs_when_nodes_come() {
    let c = cfg(TWO_POOLS);
    let s0 = run(
        &c,
        &objs(vec![svc("default", "a").port(80).build()], vec![], vec![]),
        None,
    );
    assert_eq!(ips(&s0, "default/a"), ["192.168.10.200"]);
    assert!(s0
        .problems
        .iter()
        .any(|p| p.reason == "NoLoadBalancerNodes"));
    assert_eq!(s0.vips.values().next().unwrap().owner, None);
    // k8slb bug: an IP created while no LB existed was never hosted.
    let s1 = run(
        &c,
        &objs(vec![svc("default", "a").port(80).build()], nodes(2), vec![]),
        Some(&s0),
    );
    assert_eq!(
        s1.vips
            .values()
            .next()
            .unwrap()
            .owner
            .as_ref()
            .unwrap()
            .as_str(),
        "lb01"
    );
    assert_eq!(s1.instances.len(), 1);
}

#[test]
fn an_undecodable_service_keeps_its_ip_and_nobody_takes_it() {
    let c = cfg(TWO_POOLS);
    let s0 = run(
        &c,
        &objs(
            vec![svc("default", "web").port(80).created(1).build()],
            nodes(1),
            vec![],
        ),
        None,
    );
    assert_eq!(ips(&s0, "default/web"), ["192.168.10.200"]);
    // web now fails to decode (e.g. a broken file); a new Service arrives.
    let mut o = k8slb_common::objects::Objects::default();
    o.add_text("apiVersion: v1\nkind: Service\nmetadata: { name: web, namespace: default }\nspec: { ports: 7 }\n")
        .unwrap();
    assert_eq!(o.held_services.len(), 1);
    o.services
        .push(svc("default", "new").port(80).created(2).build());
    o.nodes = nodes(1);
    let s1 = run(&c, &o, Some(&s0));
    assert_eq!(ips(&s1, "default/web"), ["192.168.10.200"], "kept");
    assert_eq!(
        ips(&s1, "default/new"),
        ["192.168.10.201"],
        "never the held address"
    );
    assert!(s1.problems.iter().any(|p| p.reason == "Undecodable"));
    // Idempotent.
    assert_eq!(run(&c, &o, Some(&s1)).to_json(), s1.to_json());
}

#[test]
fn a_refused_edit_keeps_the_address_the_service_holds() {
    let c = cfg(TWO_POOLS);
    let web = || svc("default", "web").port(80).created(1);
    let other = svc("default", "other").port(80).created(2).build();
    let s0 = run(&c, &objs(vec![web().build()], nodes(1), vec![]), None);
    assert_eq!(ips(&s0, "default/web"), ["192.168.10.200"]);
    // Each edit is refused: web keeps .200 (a Service created meanwhile does not get
    // it), and the problem says why.
    for (edit, reason) in [
        (web().pool("nosuch"), "UnknownPool"),
        (web().pool("bad pool!"), "InvalidAnnotation"),
        (web().ann("loadbalancer/ips", "not-an-ip"), "InvalidIp"),
        (web().ann("loadbalancer/ips", "9.9.9.9"), "IpOutsidePool"),
        (web().ip("192.168.11.1"), "IpOutsidePool"),
    ] {
        let s = run(
            &c,
            &objs(vec![edit.build(), other.clone()], nodes(1), vec![]),
            Some(&s0),
        );
        assert_eq!(ips(&s, "default/web"), ["192.168.10.200"], "{reason}");
        assert_eq!(ips(&s, "default/other"), ["192.168.10.201"], "{reason}");
        assert!(
            problems_of(&s, "default/web")
                .iter()
                .any(|(r, _)| r == reason),
            "{reason}: {:?}",
            problems_of(&s, "default/web")
        );
        // Fixed again: still .200, and the problem is gone.
        let fixed = run(
            &c,
            &objs(vec![web().build(), other.clone()], nodes(1), vec![]),
            Some(&s),
        );
        assert_eq!(ips(&fixed, "default/web"), ["192.168.10.200"], "{reason}");
        assert!(problems_of(&fixed, "default/web").is_empty());
    }
    // A valid edit still moves it (the request changed).
    let moved = run(
        &c,
        &objs(vec![web().pool("external").build()], nodes(1), vec![]),
        Some(&s0),
    );
    assert_eq!(ips(&moved, "default/web"), ["1.2.3.50"]);
}

#[test]
fn removing_one_pool_of_a_dual_stack_service_keeps_the_other_address() {
    let c = cfg(TWO_POOLS);
    let ds = || svc("default", "ds").pool("default,ipv6").port(80).build();
    let s0 = run(&c, &objs(vec![ds()], nodes(1), vec![]), None);
    assert_eq!(
        ips(&s0, "default/ds"),
        ["192.168.10.200", "2001:468:101::1"]
    );
    let mut c1 = c.clone();
    c1.pools.remove(&"ipv6".parse().unwrap());
    let s1 = run(&c1, &objs(vec![ds()], nodes(1), vec![]), Some(&s0));
    assert_eq!(
        ips(&s1, "default/ds"),
        ["192.168.10.200"],
        "the IPv4 address stays; the IPv6 one went with its pool"
    );
    assert_eq!(problems_of(&s1, "default/ds")[0].0, "UnknownPool");
}
