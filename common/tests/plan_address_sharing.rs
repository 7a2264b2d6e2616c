//! Addresses are shared only by consent (MetalLB's `allow-shared-ip` as the anchor): a
//! tenant joins an address another holds only when every tenant on it carries the same
//! `loadbalancer/allow-shared-ip` key and lives in the same namespace (or namespace
//! group; `tenancy.addressSharing: AnyNamespace` drops that), never a dynamically
//! allocated address, never the pool's Ingress address. Tenants that already share keep
//! their addresses through the upgrade; `tenancy.addressSharing: Open` is k8slb's rule.

mod support;

use k8slb_common::config::GlobalConfig;
use k8slb_common::state::State;
use support::*;

const VIP: &str = "198.18.0.105";

fn config(tenancy: &str) -> GlobalConfig {
    cfg(&format!(
        r#"{{ "pools": {{ "default": {{ "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" }} }}{tenancy} }}"#
    ))
}

/// `ns/name` asking for VIP by name on `port`, with the sharing key `key`.
fn asking(ns: &str, name: &str, port: i32, created: u32, key: Option<&str>) -> Svc {
    let s = svc(ns, name).ip(VIP).port(port).created(created);
    match key {
        Some(k) => s.ann("loadbalancer/allow-shared-ip", k),
        None => s,
    }
}

fn plan_of(c: &GlobalConfig, services: Vec<Svc>, prev: Option<&State>) -> State {
    run(
        c,
        &objs(
            services.into_iter().map(Svc::build).collect(),
            nodes(2),
            vec![],
        ),
        prev,
    )
}

fn refusal(s: &State, key: &str) -> Option<String> {
    problems_of(s, key)
        .into_iter()
        .find(|(r, _)| r == "IpInUse")
        .map(|(_, m)| m)
}

#[test]
fn two_services_of_one_namespace_with_the_same_key_share_an_address() {
    let s = plan_of(
        &config(""),
        vec![
            asking("bank", "web", 80, 1, Some("front")),
            asking("bank", "api", 8080, 2, Some("front")),
        ],
        None,
    );
    assert_eq!(ips(&s, "bank/web"), [VIP]);
    assert_eq!(ips(&s, "bank/api"), [VIP]);
}

#[test]
fn an_address_is_not_joined_without_the_same_key_or_from_another_namespace() {
    let cases: &[(&str, Svc, &str)] = &[
        (
            "no key",
            asking("bank", "api", 8080, 2, None),
            "allow-shared-ip",
        ),
        (
            "another key",
            asking("bank", "api", 8080, 2, Some("back")),
            "same loadbalancer/allow-shared-ip",
        ),
        (
            "another namespace",
            asking("evil", "api", 8080, 2, Some("front")),
            "another namespace",
        ),
    ];
    for (what, joiner, says) in cases {
        let key = format!(
            "{}/api",
            joiner.0["metadata"]["namespace"].as_str().unwrap()
        );
        let s = plan_of(
            &config(""),
            vec![
                asking("bank", "web", 80, 1, Some("front")),
                joiner.clone_svc(),
            ],
            None,
        );
        assert_eq!(ips(&s, "bank/web"), [VIP], "{what}");
        assert!(ips(&s, &key).is_empty(), "{what}: {:?}", ips(&s, &key));
        let m = refusal(&s, &key).unwrap_or_else(|| panic!("{what}: {:?}", problems_of(&s, &key)));
        assert!(
            m.contains(says) && m.contains("Service bank/web"),
            "{what}: {m}"
        );
    }
}

#[test]
fn the_admin_may_let_a_namespace_group_or_any_namespace_share() {
    let services = || {
        vec![
            asking("bank", "web", 80, 1, Some("front")),
            asking("bank-canary", "api", 8080, 2, Some("front")),
        ]
    };
    let s = plan_of(&config(""), services(), None);
    assert!(ips(&s, "bank-canary/api").is_empty());
    let grouped = config(r#", "tenancy": { "namespaceGroups": [["bank", "bank-canary"]] }"#);
    let s = plan_of(&grouped, services(), None);
    assert_eq!(ips(&s, "bank-canary/api"), [VIP]);
    let any = config(r#", "tenancy": { "addressSharing": "AnyNamespace" }"#);
    let s = plan_of(&any, services(), None);
    assert_eq!(ips(&s, "bank-canary/api"), [VIP]);
    // The key is still needed.
    let s = plan_of(
        &any,
        vec![
            asking("bank", "web", 80, 1, Some("front")),
            asking("evil", "api", 8080, 2, None),
        ],
        None,
    );
    assert!(ips(&s, "evil/api").is_empty());
}

#[test]
fn nobody_joins_a_dynamic_address_or_the_ingress_address() {
    // bank's address was allocated dynamically (the lowest of the range); a Service
    // asks for it by name later, with the same key.
    let web = || {
        svc("bank", "web")
            .port(80)
            .created(1)
            .ann("loadbalancer/allow-shared-ip", "k")
    };
    let first = plan_of(&config(""), vec![web()], None);
    assert_eq!(ips(&first, "bank/web"), ["198.18.0.100"]);
    let s = plan_of(
        &config(""),
        vec![
            web(),
            svc("bank", "api")
                .ip("198.18.0.100")
                .port(8080)
                .created(2)
                .ann("loadbalancer/allow-shared-ip", "k"),
        ],
        Some(&first),
    );
    assert_eq!(ips(&s, "bank/web"), ["198.18.0.100"]);
    assert!(ips(&s, "bank/api").is_empty());
    assert!(refusal(&s, "bank/api")
        .unwrap()
        .contains("dynamically allocated"));

    // The pool's Ingress address is the admin's: no Service joins it.
    let c = config("");
    let mut o = objs(vec![], nodes(2), vec![]);
    o.ingress_classes.push(ingress_class());
    o.services.push(backend_svc("bank", "app", 80));
    o.ingresses.push(
        ing("bank", "web")
            .rule("bank.example.com", "/", "app", 80)
            .created(1)
            .build(),
    );
    let first = run(&c, &o, None);
    let vip = first
        .vips
        .iter()
        .find(|(_, v)| v.ingress)
        .unwrap()
        .0
        .to_string();
    o.services.push(
        svc("evil", "ssh")
            .ip(&vip)
            .port(2222)
            .created(2)
            .ann("loadbalancer/allow-shared-ip", "k")
            .build(),
    );
    let s = run(&c, &o, Some(&first));
    assert!(ips(&s, "evil/ssh").is_empty());
    assert!(refusal(&s, "evil/ssh")
        .unwrap()
        .contains("only Ingresses share it"));
}

#[test]
fn tenants_that_already_share_keep_their_address_through_the_upgrade() {
    // Shared under k8slb's rule (no key, two namespaces), then planned with consent.
    let services = || {
        vec![
            asking("bank", "web", 80, 1, None),
            asking("other", "api", 8080, 2, None),
        ]
    };
    let open = config(r#", "tenancy": { "addressSharing": "Open" }"#);
    let before = plan_of(&open, services(), None);
    assert_eq!(ips(&before, "other/api"), [VIP]);
    let after = plan_of(&config(""), services(), Some(&before));
    assert_eq!(ips(&after, "bank/web"), [VIP]);
    assert_eq!(ips(&after, "other/api"), [VIP]);
    assert!(refusal(&after, "other/api").is_none());
}

/// A fixture cloned (the table above reuses its joiners).
trait CloneSvc {
    fn clone_svc(&self) -> Svc;
}

impl CloneSvc for Svc {
    fn clone_svc(&self) -> Svc {
        Svc(self.0.clone())
    }
}
