//! Hosts belong to namespaces (`k8slb_common::tenancy`): the namespace of the oldest
//! Ingress or HTTPRoute that claims a host owns it; another namespace's rules, TLS hosts
//! and default backend never serve it (`HostConflict`), until the owner lets go. Table
//! tests through the whole plan, as a hostile namespace `evil` would try it on `bank`.

mod support;

use k8s_openapi::api::core::v1::Secret;
use k8slb_common::objects::Objects;
use k8slb_common::routes::{CertFile, RouteAction};
use k8slb_common::state::State;
use serde_json::json;
use support::*;

const POOL: &str = r#"{ "pools": {
    "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" } }"#;

fn config(tenancy: &str) -> k8slb_common::config::GlobalConfig {
    cfg(&format!("{POOL}{tenancy} }}"))
}

fn tls_secret(ns: &str, name: &str) -> Secret {
    use base64::Engine;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/certs");
    let b = |f: &str| {
        base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(format!("{dir}/{f}")).unwrap())
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": { "name": name, "namespace": ns },
        "data": { "tls.crt": b("rsa.crt"), "tls.key": b("rsa.key") }
    }))
    .unwrap()
}

fn world(ingresses: Vec<Ing>) -> Objects {
    let mut o = objs(vec![], nodes(2), vec![]);
    for ns in ["bank", "evil"] {
        o.services.push(backend_svc(ns, "app", 80));
        o.services.push(backend_svc(ns, "login", 80));
        o.secrets.push(tls_secret(ns, "cert"));
    }
    o.ingresses = ingresses.into_iter().map(Ing::build).collect();
    o.ingress_classes = vec![ingress_class()];
    o
}

/// Where a request to the ingress VIP goes: `ns/svc` or `redirect`, `404`, `none`.
fn go(s: &State, port: u16, host: &str, path: &str) -> String {
    let ip = s.http.listeners.first().map(|l| l.ip).expect("a listener");
    match s.http.route(ip, port, host, path) {
        Some(RouteAction::Forward { backends, .. }) => {
            let id = backends[0].id.to_string();
            id.split(':').next().unwrap().to_string()
        }
        Some(RouteAction::Redirect(_)) => "redirect".into(),
        Some(RouteAction::Respond { status }) => status.code().to_string(),
        None => "none".into(),
    }
}

fn conflicts(s: &State, key: &str) -> Vec<String> {
    ingress_problems(s, key)
        .into_iter()
        .filter(|(r, _)| r == "HostConflict")
        .map(|(_, m)| m)
        .collect()
}

fn bank() -> Ing {
    ing("bank", "web")
        .rule("bank.example.com", "/", "app", 80)
        .created(1)
}

/// A newer Ingress of `evil` for bank's host: `/login` (Prefix), `/` (Exact) and the
/// ACME challenge directory. None of it is served; bank's routes answer; evil's own host
/// is served.
fn evil_paths() -> Ing {
    let mut e = ing("evil", "grab")
        .rule("bank.example.com", "/login", "login", 80)
        .rule("bank.example.com", "/.well-known/acme-challenge", "app", 80)
        .rule("evil.example.com", "/", "app", 80)
        .created(2);
    e.0["spec"]["rules"].as_array_mut().unwrap().push(
        json!({ "host": "bank.example.com", "http": { "paths": [ { "path": "/", "pathType": "Exact",
            "backend": { "service": { "name": "app", "port": { "number": 80 } } } } ] } }),
    );
    e
}

#[test]
fn a_newer_namespace_gets_nothing_of_an_owned_host() {
    let s = run(&config(""), &world(vec![evil_paths(), bank()]), None);
    for path in ["/login", "/", "/.well-known/acme-challenge/tok", "/x"] {
        assert_eq!(go(&s, 80, "bank.example.com", path), "bank/app", "{path}");
    }
    assert_eq!(go(&s, 80, "evil.example.com", "/"), "evil/app");
    // One problem (and Event) per host taken out.
    let c = conflicts(&s, "evil/grab");
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(
        c[0].contains("belongs to namespace bank") && c[0].contains("Ingress bank/web"),
        "{c:?}"
    );
    assert!(conflicts(&s, "bank/web").is_empty());
}

#[test]
fn the_oldest_claim_owns_and_the_next_takes_over_when_it_lets_go() {
    // evil is older here: it owns the host, bank's rules are refused.
    let first = run(
        &config(""),
        &world(vec![bank().created(5), evil_paths().created(1)]),
        None,
    );
    assert_eq!(go(&first, 80, "bank.example.com", "/x"), "none");
    assert_eq!(go(&first, 80, "bank.example.com", "/login"), "evil/login");
    assert_eq!(conflicts(&first, "bank/web").len(), 1);
    // evil's Ingress goes: bank takes the host over, in the next plan.
    let s = run(&config(""), &world(vec![bank().created(5)]), Some(&first));
    assert_eq!(go(&s, 80, "bank.example.com", "/login"), "bank/app");
    assert!(conflicts(&s, "bank/web").is_empty());
    // The same inputs plan the same (a restart changes nothing).
    let again = run(&config(""), &world(vec![bank().created(5)]), Some(&s));
    assert_eq!(again.to_json(), s.to_json());
}

#[test]
fn a_wildcard_neither_takes_an_owned_host_nor_is_cut_into() {
    // An older exact host: evil's newer wildcard is refused whole.
    let s = run(
        &config(""),
        &world(vec![
            bank(),
            ing("evil", "wild")
                .rule("*.example.com", "/", "app", 80)
                .created(2),
        ]),
        None,
    );
    assert_eq!(go(&s, 80, "bank.example.com", "/"), "bank/app");
    assert_eq!(go(&s, 80, "other.example.com", "/"), "none");
    assert_eq!(conflicts(&s, "evil/wild").len(), 1);
    // An older wildcard: a newer exact host below it in another namespace is refused.
    let s = run(
        &config(""),
        &world(vec![
            bank().created(2),
            ing("evil", "wild")
                .rule("*.example.com", "/", "app", 80)
                .created(1),
        ]),
        None,
    );
    assert_eq!(go(&s, 80, "other.example.com", "/"), "evil/app");
    assert_eq!(conflicts(&s, "bank/web").len(), 1);
}

#[test]
fn a_tls_host_of_another_namespace_never_gets_this_certificate() {
    let s = run(
        &config(""),
        &world(vec![
            bank().tls("cert", &["bank.example.com"]),
            ing("evil", "portal")
                .rule("portal.example.com", "/", "app", 80)
                .tls("cert", &["portal.example.com", "bank.example.com"])
                .created(2),
        ]),
        None,
    );
    let https = s.http.listeners.iter().find(|l| l.port == 443).unwrap();
    let tls = https.tls.as_ref().unwrap();
    let ns_of = |sn: &str| match tls.certificate_for(sn) {
        Some(CertFile::Secret { namespace, .. }) => namespace.to_string(),
        other => format!("{other:?}"),
    };
    assert_eq!(ns_of("bank.example.com"), "bank");
    assert_eq!(ns_of("portal.example.com"), "evil");
    let c = conflicts(&s, "evil/portal");
    assert!(
        c.iter().any(|m| m.contains("certificate is not served")),
        "{c:?}"
    );
}

#[test]
fn a_default_backend_never_answers_for_another_namespaces_host() {
    let mut e = ing("evil", "default").created(1);
    e.0["spec"]["defaultBackend"] =
        json!({ "service": { "name": "app", "port": { "number": 80 } } });
    let s = run(
        &config(""),
        &world(vec![
            e,
            ing("bank", "web")
                .rule("bank.example.com", "/login", "login", 80)
                .created(2),
        ]),
        None,
    );
    assert_eq!(go(&s, 80, "bank.example.com", "/login"), "bank/login");
    assert_eq!(go(&s, 80, "bank.example.com", "/other"), "404");
    assert_eq!(go(&s, 80, "nobody.example.com", "/"), "evil/app");
}

#[test]
fn the_admin_may_let_namespaces_share_hosts() {
    let shared = config(r#", "tenancy": { "hostOwnership": "Shared" }"#);
    let s = run(&shared, &world(vec![bank(), evil_paths()]), None);
    assert_eq!(go(&s, 80, "bank.example.com", "/login"), "evil/login");
    assert!(conflicts(&s, "evil/grab").is_empty());
    let grouped = config(r#", "tenancy": { "namespaceGroups": [["bank", "evil"]] }"#);
    let s = run(&grouped, &world(vec![bank(), evil_paths()]), None);
    assert_eq!(go(&s, 80, "bank.example.com", "/login"), "evil/login");
    let other_group = config(r#", "tenancy": { "namespaceGroups": [["bank", "ops"]] }"#);
    let s = run(&other_group, &world(vec![bank(), evil_paths()]), None);
    assert_eq!(go(&s, 80, "bank.example.com", "/login"), "bank/app");
    for bad in [
        r#", "tenancy": { "hostOwnership": "Loose" }"#,
        r#", "tenancy": { "namespaceGroups": ["bank"] }"#,
        r#", "tenancy": { "namespaceGroups": [["Not A Namespace"]] }"#,
        r#", "tenancy": { "hostOwner": "Strict" }"#,
    ] {
        let e = k8slb_common::config::parse_global_config(&format!("{POOL}{bad} }}")).unwrap_err();
        assert!(e.to_string().contains("tenancy"), "{bad}: {e}");
    }
}

#[test]
fn an_older_httproute_owns_its_hostnames_against_ingresses() {
    let mut o = world(vec![ing("evil", "grab")
        .rule("bank.example.com", "/", "app", 80)
        .created(5)]);
    for t in [
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
"#,
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra, uid: uid-gw, creationTimestamp: "2026-01-01T00:00:01Z" }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: http, port: 80, protocol: HTTP, allowedRoutes: { namespaces: { from: All } } }
"#,
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: web, namespace: bank, creationTimestamp: "2026-01-01T00:00:02Z" }
spec:
  parentRefs: [ { name: gw, namespace: infra } ]
  hostnames: [ bank.example.com ]
  rules:
  - backendRefs: [ { name: app, port: 80 } ]
"#,
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: steal, namespace: evil, creationTimestamp: "2026-01-01T00:00:03Z" }
spec:
  parentRefs: [ { name: gw, namespace: infra } ]
  hostnames: [ bank.example.com ]
  rules:
  - matches: [ { path: { type: PathPrefix, value: /login } } ]
    backendRefs: [ { name: login, port: 80 } ]
"#,
    ] {
        o.add_text(t).unwrap();
    }
    let s = run(&config(""), &o, None);
    assert_eq!(conflicts(&s, "evil/grab").len(), 1);
    let steal: Vec<_> = s
        .problems
        .iter()
        .filter(|p| p.object.to_string() == "HTTPRoute evil/steal")
        .map(|p| p.reason.to_string())
        .collect();
    assert!(steal.iter().any(|r| r == "HostConflict"), "{steal:?}");
    // On the Gateway's address, bank's route answers /login; evil's route is not served.
    let gw_ip = s.gateways[&"infra/gw".parse().unwrap()].ips[0];
    match s.http.route(gw_ip, 80, "bank.example.com", "/login") {
        Some(RouteAction::Forward { backends, .. }) => {
            assert!(
                backends[0].id.to_string().starts_with("bank/app"),
                "{backends:?}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// The Gateway of `an_httproute_claims_only_hostnames_a_listener_lets_it_serve`: one
/// listener for its own namespace, one for namespaces labelled `team: bank` under
/// `*.example.com`, one for everyone under `*.shop.com`.
const SHARED_GATEWAY: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra, uid: uid-gw, creationTimestamp: "2026-01-01T00:00:01Z" }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: own, port: 80, protocol: HTTP, hostname: "*.infra.example.org" }
  - name: bank
    port: 80
    protocol: HTTP
    hostname: "*.example.com"
    allowedRoutes: { namespaces: { from: Selector, selector: { matchLabels: { team: bank } } } }
  - { name: shop, port: 80, protocol: HTTP, hostname: "*.shop.com", allowedRoutes: { namespaces: { from: All } } }
"#;

fn route(ns: &str, name: &str, created: u32, parent: &str, hostnames: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: {ns}, creationTimestamp: "2026-01-01T00:00:0{created}Z" }}
spec:
  parentRefs: [ {parent} ]
  hostnames: {hostnames}
  rules:
  - backendRefs: [ {{ name: app, port: 80 }} ]
"#
    )
}

/// A namespace that a Gateway's listeners do not let in cannot squat a host on it by
/// naming the Gateway first: a route claims only the hostnames that a listener it may
/// attach to (its parentRef's section, its kind and namespace allowed, the hostnames
/// intersecting) could serve. Before, `evil`'s older route took `bank.example.com` from
/// `bank`, whose own route the Gateway's owner had let in.
#[test]
fn an_httproute_claims_only_hostnames_a_listener_lets_it_serve() {
    let squats = [
        // Names the Gateway; no listener lets `evil` in under `*.example.com`.
        route(
            "evil",
            "squat",
            2,
            "{ name: gw, namespace: infra }",
            "[ bank.example.com ]",
        ),
        // A section that lets `evil` in, whose hostname does not cover the host.
        route(
            "evil",
            "squat",
            2,
            "{ name: gw, namespace: infra, sectionName: shop }",
            "[ bank.example.com, evil.shop.com ]",
        ),
        // A section `evil` may not use.
        route(
            "evil",
            "squat",
            2,
            "{ name: gw, namespace: infra, sectionName: bank }",
            "[ bank.example.com ]",
        ),
        // A Gateway that is not ours (or does not exist).
        route(
            "evil",
            "squat",
            2,
            "{ name: other, namespace: infra }",
            "[ bank.example.com ]",
        ),
    ];
    // The class, the Gateway, namespace `bank` labelled for it, and `routes`.
    let shared = |routes: [&str; 2]| {
        let mut o = world(vec![]);
        for t in [
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
"#,
            SHARED_GATEWAY,
            "apiVersion: v1\nkind: Namespace\nmetadata: { name: bank, labels: { team: bank } }\n",
            "apiVersion: v1\nkind: Namespace\nmetadata: { name: evil }\n",
        ]
        .into_iter()
        .chain(routes)
        {
            o.add_text(t).unwrap();
        }
        run(&config(""), &o, None)
    };
    for squat in &squats {
        let bank = route(
            "bank",
            "web",
            3,
            "{ name: gw, namespace: infra }",
            "[ bank.example.com ]",
        );
        let s = shared([squat, &bank]);
        let of = |object: &str| -> Vec<String> {
            s.problems
                .iter()
                .filter(|p| {
                    p.object.to_string() == object
                        && p.reason == k8slb_common::problem::Reason::HostConflict
                })
                .map(|p| p.message.clone())
                .collect()
        };
        assert_eq!(of("HTTPRoute bank/web"), Vec::<String>::new(), "{squat}");
        let gw_ip = s.gateways[&"infra/gw".parse().unwrap()].ips[0];
        match s.http.route(gw_ip, 80, "bank.example.com", "/") {
            Some(RouteAction::Forward { backends, .. }) => assert!(
                backends[0].id.to_string().starts_with("bank/app"),
                "{squat}: {backends:?}"
            ),
            other => panic!("{squat}: {other:?}"),
        }
    }
    // The hostname a listener does let `evil` serve is still its claim: `bank`'s newer
    // route for it is refused.
    let bank = route(
        "bank",
        "shop",
        3,
        "{ name: gw, namespace: infra }",
        "[ evil.shop.com ]",
    );
    let s = shared([&squats[1], &bank]);
    assert!(
        s.problems
            .iter()
            .any(|p| p.object.to_string() == "HTTPRoute bank/shop"
                && p.reason == k8slb_common::problem::Reason::HostConflict),
        "{:?}",
        s.problems
    );
}
