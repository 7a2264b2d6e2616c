//! Ingress → routes: class selection, the Ingress API's matching and precedence rules (the
//! path table of the Kubernetes documentation, "Ingress > Examples"), conflicts between
//! Ingresses, TLS by SNI and redirects, annotations, backends and their endpoints.
//!
//! Every routing test asks the model's reference router ([`HttpRoutes::route`]) where a
//! request goes, so a test pins the behaviour, not the data structure.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8slb_common::ingress::{
    reason, routes_for_vip, select, IngressInput, SecretMeta, VipOptions, VipRoutes,
};
use k8slb_common::problem::Reason;
use k8slb_common::routes::{
    CertFile, FixedStatus, HttpRoutes, ListenerProtocol, RedirectStatus, RouteAction, Scheme,
    Sticky,
};
use serde_json::{json, Value};
use std::net::IpAddr;

const VIP: &str = "198.18.0.10";

fn vip() -> IpAddr {
    VIP.parse().unwrap()
}

/// An Ingress of class `k8slb`, created `created` seconds after 2026-01-01.
fn ing(ns: &str, name: &str, created: u32, spec: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {
            "namespace": ns, "name": name,
            "creationTimestamp": format!("2026-01-01T00:{:02}:{:02}Z", created / 60, created % 60),
        },
        "spec": merge(json!({"ingressClassName": "k8slb"}), spec),
    })
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Value::Object(a), Value::Object(b)) = (&mut a, b) {
        a.extend(b);
    }
    a
}

fn annotate(mut i: Value, k: &str, v: &str) -> Value {
    i["metadata"]["annotations"][k] = json!(v);
    i
}

fn path(ty: &str, p: &str, svc: &str) -> Value {
    json!({"pathType": ty, "path": p, "backend": {"service": {"name": svc, "port": {"number": 80}}}})
}

fn rule(host: Option<&str>, paths: Vec<Value>) -> Value {
    let mut r = json!({"http": {"paths": paths}});
    if let Some(h) = host {
        r["host"] = json!(h);
    }
    r
}

fn backend(svc: &str) -> Value {
    json!({"service": {"name": svc, "port": {"number": 80}}})
}

/// A Service with one port 80 named `http`, and an EndpointSlice with one endpoint.
fn svc(ns: &str, name: &str, ip: &str) -> (Service, EndpointSlice) {
    let s = serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }))
    .unwrap();
    let e = serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": format!("{name}-x"),
                     "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
    }))
    .unwrap();
    (s, e)
}

fn class(name: &str, controller: &str, default: bool) -> IngressClass {
    let mut c = json!({"metadata": {"name": name}, "spec": {"controller": controller}});
    if default {
        c["metadata"]["annotations"] =
            json!({"ingressclass.kubernetes.io/is-default-class": "true"});
    }
    serde_json::from_value(c).unwrap()
}

struct World {
    ingresses: Vec<Ingress>,
    classes: Vec<IngressClass>,
    services: Vec<Service>,
    slices: Vec<EndpointSlice>,
    secrets: Vec<SecretMeta>,
    pool_certificate: bool,
}

impl World {
    /// Services `s0`..`s9`, `web`, `api`, `dflt`, `other` in `default` (endpoint 10.0.0.<i>),
    /// our class `k8slb` (not default), the tls Secrets `good`, `good2`, `bad` (invalid)
    /// and `opaque` (wrong type).
    fn new(ingresses: Vec<Value>) -> World {
        let mut services = Vec::new();
        let mut slices = Vec::new();
        let names: Vec<String> = (0..10)
            .map(|i| format!("s{i}"))
            .chain(["web", "api", "dflt", "other"].map(String::from))
            .collect();
        for (i, n) in names.iter().enumerate() {
            let (s, e) = svc("default", n, &format!("10.0.0.{}", i + 1));
            services.push(s);
            slices.push(e);
        }
        let secret = |name: &str, type_: &str, valid: bool, names: &[&str]| SecretMeta {
            namespace: "default".into(),
            name: name.into(),
            type_: type_.into(),
            valid,
            version: String::new(),
            refusal: String::new(),
            dns_names: names.iter().map(|n| n.to_string()).collect(),
        };
        World {
            ingresses: ingresses
                .into_iter()
                .map(|v| serde_json::from_value(v).unwrap())
                .collect(),
            classes: vec![class("k8slb", "k8slb.io/ingress-controller", false)],
            services,
            slices,
            secrets: vec![
                secret(
                    "good",
                    "kubernetes.io/tls",
                    true,
                    &["a.com", "b.com", "c.com", "ok.com"],
                ),
                secret("good2", "kubernetes.io/tls", true, &["*.b.com"]),
                secret("bad", "kubernetes.io/tls", false, &[]),
                secret("opaque", "Opaque", true, &["opaque.com"]),
            ],
            pool_certificate: false,
        }
    }

    fn run(&self) -> VipRoutes {
        let input = IngressInput {
            ingresses: &self.ingresses,
            classes: &self.classes,
            services: &self.services,
            slices: &self.slices,
            secrets: &self.secrets,
            reserved_ports: None,
            host_owners: None,
        };
        let sel = select(&self.ingresses, &self.classes);
        let pool = "default".parse().unwrap();
        let list = sel.by_pool.get(&pool).cloned().unwrap_or_default();
        let mut out = routes_for_vip(
            &list,
            &input,
            &VipOptions {
                ip: vip(),
                pool,
                pool_certificate: self.pool_certificate,
            },
        );
        out.problems.extend(sel.problems);
        out
    }
}

/// Where a request goes, as a short string: the Service name, `redirect <url parts>`,
/// `503`, or `404` (no route).
fn go(r: &HttpRoutes, port: u16, host: &str, path: &str) -> String {
    match r.route(vip(), port, host, path) {
        None => "404".into(),
        Some(RouteAction::Forward { backends, .. }) => {
            assert_eq!(backends.len(), 1);
            backends[0].id.service.name.to_string()
        }
        Some(RouteAction::Redirect(rd)) => format!(
            "redirect {}:{}/{}",
            rd.scheme.map_or("-", Scheme::as_str),
            rd.port.map_or("-".into(), |p| p.to_string()),
            rd.status.code()
        ),
        Some(RouteAction::Respond { status }) => status.code().to_string(),
    }
}

fn reasons(out: &VipRoutes) -> Vec<(String, Reason)> {
    out.problems
        .iter()
        .map(|p| (p.object.to_string(), p.reason.clone()))
        .collect()
}

/// The table of the Kubernetes documentation (Ingress > Examples), row by row: the paths
/// of one Ingress (each to its own Service `s<i>`), a request, and which path (or the
/// default backend) must serve it.
#[test]
fn path_matching_table_of_the_ingress_documentation() {
    type Row = (
        &'static [(&'static str, &'static str)],
        &'static str,
        &'static str,
    );
    let rows: &[Row] = &[
        (&[("Prefix", "/")], "/anything/at/all", "s0"),
        (&[("Exact", "/foo")], "/foo", "s0"),
        (&[("Exact", "/foo")], "/bar", "dflt"),
        (&[("Exact", "/foo")], "/foo/", "dflt"),
        (&[("Exact", "/foo/")], "/foo", "dflt"),
        (&[("Prefix", "/foo")], "/foo", "s0"),
        (&[("Prefix", "/foo")], "/foo/", "s0"),
        (&[("Prefix", "/foo/")], "/foo", "s0"),
        (&[("Prefix", "/foo/")], "/foo/", "s0"),
        (&[("Prefix", "/aaa/bb")], "/aaa/bbb", "dflt"),
        (&[("Prefix", "/aaa/bbb")], "/aaa/bbb", "s0"),
        (&[("Prefix", "/aaa/bbb/")], "/aaa/bbb", "s0"),
        (&[("Prefix", "/aaa/bbb")], "/aaa/bbb/", "s0"),
        (&[("Prefix", "/aaa/bbb")], "/aaa/bbb/ccc", "s0"),
        (&[("Prefix", "/aaa/bbb")], "/aaa/bbbxyz", "dflt"),
        (&[("Prefix", "/"), ("Prefix", "/aaa")], "/aaa/ccc", "s1"),
        (
            &[("Prefix", "/"), ("Prefix", "/aaa"), ("Prefix", "/aaa/bbb")],
            "/aaa/bbb",
            "s2",
        ),
        (
            &[("Prefix", "/"), ("Prefix", "/aaa"), ("Prefix", "/aaa/bbb")],
            "/ccc",
            "s0",
        ),
        (&[("Prefix", "/aaa")], "/ccc", "dflt"),
        (&[("Prefix", "/foo"), ("Exact", "/foo")], "/foo", "s1"),
        // Not in the table, same rules: ImplementationSpecific is Prefix, and the longest
        // matching prefix wins whatever the order of the paths.
        (&[("ImplementationSpecific", "/foo")], "/foo/bar", "s0"),
        (&[("ImplementationSpecific", "/foo")], "/foobar", "dflt"),
        (
            &[("Prefix", "/aaa/bbb"), ("Prefix", "/aaa")],
            "/aaa/bbb/c",
            "s0",
        ),
        (
            &[("Exact", "/aaa"), ("Prefix", "/aaa/bbb")],
            "/aaa/bbb",
            "s1",
        ),
    ];
    for (paths, request, want) in rows {
        let ps = paths
            .iter()
            .enumerate()
            .map(|(i, (ty, p))| path(ty, p, &format!("s{i}")))
            .collect();
        let w = World::new(vec![ing(
            "default",
            "t",
            0,
            json!({"defaultBackend": backend("dflt"), "rules": [rule(Some("foo.com"), ps)]}),
        )]);
        let out = w.run();
        assert!(out.problems.is_empty(), "{:?}", out.problems);
        assert_eq!(
            go(&out.routes, 80, "foo.com", request),
            *want,
            "paths {paths:?}, request {request}"
        );
    }
}

#[test]
fn exact_host_before_wildcard_before_any_and_wildcard_is_one_label() {
    let w = World::new(vec![ing(
        "default",
        "hosts",
        0,
        json!({"rules": [
            rule(None, vec![path("Prefix", "/", "s0")]),
            rule(Some("*.foo.com"), vec![path("Prefix", "/", "s1")]),
            rule(Some("bar.foo.com"), vec![path("Prefix", "/", "s2")]),
        ]}),
    )]);
    let r = w.run().routes;
    assert_eq!(go(&r, 80, "bar.foo.com", "/"), "s2");
    assert_eq!(
        go(&r, 80, "BAR.foo.com:80", "/"),
        "s2",
        "host is case-insensitive, port ignored"
    );
    assert_eq!(go(&r, 80, "baz.foo.com", "/x"), "s1");
    assert_eq!(
        go(&r, 80, "a.baz.foo.com", "/"),
        "s0",
        "a wildcard matches one label only"
    );
    assert_eq!(go(&r, 80, "foo.com", "/"), "s0");
    assert_eq!(go(&r, 80, "other.org", "/"), "s0");
    let hosts: Vec<Option<String>> = r.listeners[0]
        .virtual_hosts
        .iter()
        .map(|v| v.host.as_ref().map(|h| h.to_string()))
        .collect();
    assert_eq!(
        hosts,
        [Some("bar.foo.com".into()), Some("*.foo.com".into()), None]
    );
}

#[test]
fn a_host_that_matches_without_a_matching_path_gets_the_default_backend_not_the_any_host_rules() {
    let w = World::new(vec![ing(
        "default",
        "fall",
        0,
        json!({"defaultBackend": backend("dflt"), "rules": [
            rule(Some("foo.com"), vec![path("Prefix", "/api", "api")]),
            rule(None, vec![path("Prefix", "/", "web")]),
        ]}),
    )]);
    let r = w.run().routes;
    assert_eq!(go(&r, 80, "foo.com", "/api/v1"), "api");
    assert_eq!(go(&r, 80, "foo.com", "/"), "dflt");
    assert_eq!(go(&r, 80, "bar.com", "/"), "web");
    // Without a defaultBackend: 404 (no route).
    let w = World::new(vec![ing(
        "default",
        "fall",
        0,
        json!({"rules": [rule(Some("foo.com"), vec![path("Exact", "/a", "s0")])]}),
    )]);
    assert_eq!(go(&w.run().routes, 80, "foo.com", "/b"), "404");
}

#[test]
fn the_older_ingress_keeps_a_host_and_path_and_the_newer_gets_a_problem() {
    let older = ing(
        "default",
        "older",
        10,
        json!({"rules": [rule(Some("foo.com"), vec![path("Prefix", "/app", "s0")])]}),
    );
    // Listed first, but created later; `/app/` is the same Prefix as `/app`.
    let newer = ing(
        "default",
        "newer",
        20,
        json!({"rules": [rule(Some("foo.com"), vec![
            path("Prefix", "/app/", "s1"),
            path("Exact", "/app", "s2"),
            path("Prefix", "/other", "s3"),
        ])]}),
    );
    let out = World::new(vec![newer, older]).run();
    let r = &out.routes;
    assert_eq!(go(r, 80, "foo.com", "/app/x"), "s0");
    assert_eq!(
        go(r, 80, "foo.com", "/app"),
        "s2",
        "Exact is a different path: kept"
    );
    assert_eq!(
        go(r, 80, "foo.com", "/other"),
        "s3",
        "the newer's other paths still work"
    );
    assert_eq!(
        reasons(&out),
        [("Ingress default/newer".into(), reason::PATH_CONFLICT)]
    );
    assert!(
        out.problems[0].message.contains("default/older"),
        "{:?}",
        out.problems
    );

    // Same creation time: namespace/name decides.
    let a = ing(
        "default",
        "a",
        5,
        json!({"rules": [rule(Some("x.com"), vec![path("Prefix", "/", "s0")])]}),
    );
    let b = ing(
        "default",
        "b",
        5,
        json!({"rules": [rule(Some("x.com"), vec![path("Prefix", "/", "s1")])]}),
    );
    let out = World::new(vec![b, a]).run();
    assert_eq!(go(&out.routes, 80, "x.com", "/"), "s0");
    assert_eq!(
        reasons(&out),
        [("Ingress default/b".into(), reason::PATH_CONFLICT)]
    );
}

#[test]
fn the_oldest_default_backend_wins() {
    let a = ing("default", "a", 1, json!({"defaultBackend": backend("s0")}));
    let b = ing("default", "b", 2, json!({"defaultBackend": backend("s1")}));
    let out = World::new(vec![b, a]).run();
    assert_eq!(go(&out.routes, 80, "any.host", "/"), "s0");
    assert_eq!(
        reasons(&out),
        [("Ingress default/b".into(), reason::DEFAULT_BACKEND_CONFLICT)]
    );
}

#[test]
fn class_selection() {
    let mk = |name: &str, class_name: Option<&str>, legacy: Option<&str>| {
        let mut i = ing(
            "default",
            name,
            0,
            json!({"rules": [rule(Some(&format!("{name}.com")), vec![path("Prefix", "/", "s0")])]}),
        );
        i["spec"]
            .as_object_mut()
            .unwrap()
            .remove("ingressClassName");
        if let Some(c) = class_name {
            i["spec"]["ingressClassName"] = json!(c);
        }
        if let Some(l) = legacy {
            i = annotate(i, "kubernetes.io/ingress.class", l);
        }
        i
    };
    let ingresses = vec![
        mk("byname", Some("k8slb"), None),
        mk("custom", Some("ours-too"), None),
        mk("nginx", Some("nginx"), None),
        mk("missingclass", Some("nosuchclass"), None),
        mk("legacy", None, Some("k8slb")),
        mk("legacyother", None, Some("nginx")),
        mk("noclass", None, None),
        mk("emptyclass", Some(""), Some("")),
        // spec.ingressClassName wins over the annotation.
        mk("both", Some("nginx"), Some("k8slb")),
    ];
    let mut w = World::new(ingresses);
    w.classes = vec![
        class("k8slb", "k8slb.io/ingress-controller", false),
        class("ours-too", "k8slb.io/ingress-controller", false),
        class("nginx", "k8s.io/ingress-nginx", false),
    ];
    let served = |w: &World| {
        let r = w.run().routes;
        let mut hosts: Vec<String> = r
            .listeners
            .iter()
            .flat_map(|l| &l.virtual_hosts)
            .filter_map(|v| v.host.as_ref().map(|h| h.to_string()))
            .collect();
        hosts.sort();
        hosts
    };
    assert_eq!(served(&w), ["byname.com", "custom.com", "legacy.com"]);
    // Ours marked default: the class-less one too.
    w.classes[0] = class("k8slb", "k8slb.io/ingress-controller", true);
    assert_eq!(
        served(&w),
        [
            "byname.com",
            "custom.com",
            "emptyclass.com",
            "legacy.com",
            "noclass.com"
        ]
    );
    // Another controller's class is default as well: ambiguous, class-less not ours.
    w.classes[2] = class("nginx", "k8s.io/ingress-nginx", true);
    assert_eq!(served(&w), ["byname.com", "custom.com", "legacy.com"]);
    // Other classes' Ingresses never produce a problem, even when broken.
    let mut broken = mk("broken", Some("nginx"), None);
    broken["spec"]["rules"] = json!([rule(Some("BAD HOST"), vec![path("Prefix", "x", "nosuch")])]);
    let w = World::new(vec![broken]);
    let out = w.run();
    assert!(out.problems.is_empty() && out.routes.is_empty(), "{out:?}");
}

/// ACME HTTP-01 challenges are answered over plain HTTP, whatever rule covers them: a
/// token rule, the challenge directory as a Prefix (`/.well-known/acme-challenge/`, whose
/// stored prefix loses its trailing `/`), `/.well-known`, or `/`. Everything else on a
/// TLS host is redirected.
#[test]
fn acme_challenges_are_never_redirected_whatever_rule_covers_them() {
    let tok = "/.well-known/acme-challenge/tok-2";
    /// (pathType, path, Service) rules of host a.com, and who takes the token.
    type Case<'a> = (&'a [(&'a str, &'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (&[("Prefix", "/", "s0")], "s0"),
        (
            &[("Prefix", "/.well-known", "s1"), ("Prefix", "/", "s0")],
            "s1",
        ),
        (
            &[
                ("Prefix", "/.well-known/acme-challenge/", "s2"),
                ("Prefix", "/", "s0"),
            ],
            "s2",
        ),
        (
            &[
                ("Prefix", "/.well-known/acme-challenge", "s2"),
                ("Prefix", "/", "s0"),
            ],
            "s2",
        ),
        (
            &[
                ("Exact", "/.well-known/acme-challenge/tok-2", "s3"),
                ("Prefix", "/", "s0"),
            ],
            "s3",
        ),
        (
            &[
                ("Prefix", "/.well-known/acme-challenge/tok", "s4"),
                ("Prefix", "/", "s0"),
            ],
            "s0",
        ),
        (
            &[
                ("Prefix", "/.well-known/acme-challenge/tok-2", "s4"),
                ("Prefix", "/", "s0"),
            ],
            "s4",
        ),
        (&[("Exact", "/", "s5")], "default"),
    ];
    for (i, (paths, want)) in cases.iter().enumerate() {
        let i_ = ing(
            "default",
            "tls",
            0,
            json!({
                "tls": [ {"hosts": ["a.com"], "secretName": "good"} ],
                "rules": [ rule(Some("a.com"), paths.iter().map(|(t, p, s)| path(t, p, s)).collect()) ]
            }),
        );
        let mut w = World::new(vec![i_]);
        w.pool_certificate = true;
        let out = w.run();
        assert!(out.problems.is_empty(), "case {i}: {:?}", out.problems);
        let got = go(&out.routes, 80, "a.com", tok);
        if *want == "default" {
            assert!(!got.starts_with("redirect"), "case {i}: {got}");
        } else {
            assert_eq!(got, *want, "case {i}");
        }
        // The rest of the host is still redirected, and HTTPS routes as written.
        if paths.iter().any(|(t, p, _)| *t == "Prefix" && *p == "/") {
            assert_eq!(
                go(&out.routes, 80, "a.com", "/x"),
                "redirect https:-/308",
                "case {i}"
            );
            assert_eq!(
                go(&out.routes, 80, "a.com", "/.well-known/other"),
                "redirect https:-/308",
                "case {i}"
            );
            assert_eq!(go(&out.routes, 443, "a.com", tok), *want, "case {i}: HTTPS");
        }
    }
}

#[test]
fn tls_hosts_get_their_certificate_by_sni_and_http_redirects_to_https() {
    let i = ing(
        "default",
        "tls",
        0,
        json!({
            "tls": [
                {"hosts": ["a.com"], "secretName": "good"},
                {"hosts": ["*.b.com"], "secretName": "good2"},
            ],
            "rules": [
                rule(Some("a.com"), vec![path("Prefix", "/", "s0"),
                                         path("Prefix", "/.well-known/acme-challenge/tok", "s9")]),
                rule(Some("x.b.com"), vec![path("Prefix", "/", "s1")]),
                rule(Some("plain.com"), vec![path("Prefix", "/", "s2")]),
            ]
        }),
    );
    let mut w = World::new(vec![i]);
    w.pool_certificate = true;
    let out = w.run();
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    let r = &out.routes;
    assert_eq!(go(r, 80, "a.com", "/x"), "redirect https:-/308");
    assert_eq!(go(r, 80, "x.b.com", "/"), "redirect https:-/308");
    assert_eq!(
        go(r, 80, "a.com", "/.well-known/acme-challenge/tok"),
        "s9",
        "ACME challenges are never redirected"
    );
    assert_eq!(
        go(r, 80, "plain.com", "/"),
        "s2",
        "a host without TLS is not redirected"
    );
    assert_eq!(go(r, 443, "a.com", "/x"), "s0");
    assert_eq!(go(r, 443, "x.b.com", "/"), "s1");
    assert_eq!(go(r, 443, "plain.com", "/"), "s2");
    let https = r.listeners.iter().find(|l| l.port == 443).unwrap();
    assert_eq!(https.protocol, ListenerProtocol::Https);
    let tls = https.tls.as_ref().unwrap();
    let stem = |sn: &str| tls.certificate_for(sn).map(CertFile::stem);
    assert_eq!(stem("a.com").as_deref(), Some("default_good"));
    assert_eq!(stem("y.b.com").as_deref(), Some("default_good2"));
    assert_eq!(
        stem("plain.com").as_deref(),
        Some("default"),
        "the pool's certificate"
    );
    assert_eq!(
        r.listeners.iter().find(|l| l.port == 80).unwrap().protocol,
        ListenerProtocol::Http
    );
}

#[test]
fn bad_secrets_affect_only_their_own_hosts() {
    let i = ing(
        "default",
        "tls",
        0,
        json!({
            "tls": [
                {"hosts": ["ok.com"], "secretName": "good"},
                {"hosts": ["broken.com"], "secretName": "bad"},
                {"hosts": ["opaque.com"], "secretName": "opaque"},
                {"hosts": ["gone.com"], "secretName": "nosuch"},
            ],
            "rules": [
                rule(Some("ok.com"), vec![path("Prefix", "/", "s0")]),
                rule(Some("broken.com"), vec![path("Prefix", "/", "s1")]),
            ]
        }),
    );
    let out = World::new(vec![i]).run();
    let mut rs: Vec<Reason> = out.problems.iter().map(|p| p.reason.clone()).collect();
    rs.sort();
    assert_eq!(
        rs,
        [
            reason::SECRET_INVALID,
            reason::SECRET_NOT_FOUND,
            reason::SECRET_WRONG_TYPE
        ]
    );
    let r = &out.routes;
    assert_eq!(go(r, 80, "ok.com", "/"), "redirect https:-/308");
    assert_eq!(
        go(r, 80, "broken.com", "/"),
        "s1",
        "no certificate: served over HTTP, not redirected"
    );
    let tls = r
        .listeners
        .iter()
        .find(|l| l.port == 443)
        .unwrap()
        .tls
        .clone()
        .unwrap();
    assert_eq!(tls.certificates.len(), 1);
    assert_eq!(tls.certificates[0].file.stem(), "default_good");
    assert!(out.problems.iter().all(|p| !p.message.contains("BEGIN")));
}

#[test]
fn annotations_ports_plain_http_off_redirect_opt_out_and_stickiness() {
    let mut i = ing(
        "default",
        "custom",
        0,
        json!({
            "tls": [{"hosts": ["a.com"], "secretName": "good"}],
            "rules": [rule(Some("a.com"), vec![path("Prefix", "/", "s0")])],
        }),
    );
    i = annotate(i, "loadbalancer/http-port", "8080");
    i = annotate(i, "loadBalancer/HTTPS-port", "8443");
    i = annotate(i, "loadbalancer/stickiness", "Cookie");
    i = annotate(i, "loadbalancer/stickiness-cookie", "route");
    let out = World::new(vec![i.clone()]).run();
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    let r = &out.routes;
    let ports: Vec<u16> = r.listeners.iter().map(|l| l.port).collect();
    assert_eq!(ports, [8080, 8443]);
    assert_eq!(go(r, 8080, "a.com", "/"), "redirect https:8443/308");
    assert_eq!(go(r, 8443, "a.com", "/"), "s0");
    let be = r.backends.values().next().unwrap();
    assert_eq!(
        be.stickiness,
        Some(Sticky::Cookie {
            name: "route".parse().unwrap()
        })
    );

    let j = annotate(i.clone(), "loadbalancer/sslredirect", "false");
    assert_eq!(
        go(&World::new(vec![j]).run().routes, 8080, "a.com", "/"),
        "s0"
    );

    let k = annotate(i, "loadbalancer/http", "FALSE");
    let r = World::new(vec![k]).run().routes;
    let ports: Vec<u16> = r.listeners.iter().map(|l| l.port).collect();
    assert_eq!(ports, [8443], "plain HTTP off");

    // Invalid values: a problem each, defaults used; unknown options: a problem.
    let mut bad = ing(
        "default",
        "bad",
        0,
        json!({"rules": [rule(Some("a.com"), vec![path("Prefix", "/", "s0")])]}),
    );
    for (k, v) in [
        ("loadbalancer/http-port", "0"),
        ("loadbalancer/https-port", "80 ; listen 1"),
        ("loadbalancer/stickiness", "sometimes"),
        ("loadbalancer/stickiness-cookie", "a b"),
        ("loadbalancer/sslredirect", "yes\nno"),
        ("loadbalancer/config", "global\nmaxconn 1"),
    ] {
        bad = annotate(bad, k, v);
    }
    let out = World::new(vec![bad]).run();
    let mut rs: Vec<Reason> = out.problems.iter().map(|p| p.reason.clone()).collect();
    rs.sort();
    let mut want = vec![reason::INVALID_ANNOTATION; 5];
    want.push(reason::UNKNOWN_ANNOTATION);
    assert_eq!(rs, want, "{:?}", out.problems);
    assert_eq!(go(&out.routes, 80, "a.com", "/"), "s0");
    assert!(out.routes.backends.values().all(|b| b.stickiness.is_none()));
}

#[test]
fn custom_port_used_as_http_and_https_by_two_ingresses_is_a_conflict() {
    let a = annotate(
        ing(
            "default",
            "a",
            1,
            json!({"rules": [rule(Some("a.com"), vec![path("Prefix", "/", "s0")])]}),
        ),
        "loadbalancer/http-port",
        "8443",
    );
    let b = ing(
        "default",
        "b",
        2,
        json!({"tls": [{"hosts": ["b.com"], "secretName": "good"}],
               "rules": [rule(Some("b.com"), vec![path("Prefix", "/", "s1")])]}),
    );
    let b = annotate(b, "loadbalancer/https-port", "8443");
    let out = World::new(vec![a, b]).run();
    assert_eq!(
        reasons(&out),
        [("Ingress default/b".into(), reason::PORT_CONFLICT)]
    );
    let l = out
        .routes
        .listeners
        .iter()
        .find(|l| l.port == 8443)
        .unwrap();
    assert_eq!(l.protocol, ListenerProtocol::Http);
    assert_eq!(
        go(&out.routes, 80, "b.com", "/"),
        "s1",
        "b still served on its HTTP port"
    );
}

#[test]
fn backends_named_and_numbered_ports_endpoints_and_missing_services() {
    let named = json!({"pathType": "Prefix", "path": "/named",
        "backend": {"service": {"name": "web", "port": {"name": "http"}}}});
    let i = ing(
        "default",
        "be",
        0,
        json!({"rules": [rule(Some("a.com"), vec![
            path("Prefix", "/num", "web"),
            named,
            path("Prefix", "/gone", "nosuch"),
            json!({"pathType": "Prefix", "path": "/badport",
                   "backend": {"service": {"name": "web", "port": {"number": 81}}}}),
        ])]}),
    );
    let out = World::new(vec![i]).run();
    let r = &out.routes;
    assert_eq!(go(r, 80, "a.com", "/num"), "web");
    assert_eq!(go(r, 80, "a.com", "/named"), "web");
    assert_eq!(go(r, 80, "a.com", "/gone"), "503");
    assert_eq!(go(r, 80, "a.com", "/badport"), "503");
    assert_eq!(r.backends.len(), 1, "named and numbered port: one backend");
    let (id, be) = r.backends.iter().next().unwrap();
    assert_eq!(id.to_string(), "default/web:80");
    // The pod endpoint (targetPort 8080), not the Service port.
    assert_eq!(be.endpoints.len(), 1);
    assert_eq!(be.endpoints[0].port, 8080);
    assert_eq!(be.endpoints[0].ip.to_string(), "10.0.0.11");
    let mut rs: Vec<Reason> = out.problems.iter().map(|p| p.reason.clone()).collect();
    rs.sort();
    assert_eq!(
        rs,
        [reason::SERVICE_NOT_FOUND, reason::SERVICE_PORT_NOT_FOUND]
    );
    let _ = FixedStatus::ServiceUnavailable503;
}

#[test]
fn same_input_serialises_byte_identically_whatever_the_input_order() {
    let list = vec![
        ing(
            "default",
            "a",
            3,
            json!({"rules": [rule(Some("a.com"), vec![path("Prefix", "/x", "s0"), path("Exact", "/y", "s1")])]}),
        ),
        ing(
            "default",
            "b",
            1,
            json!({"tls": [{"hosts": ["b.com", "c.com"], "secretName": "good"}],
            "rules": [rule(Some("b.com"), vec![path("Prefix", "/", "s2")]), rule(Some("c.com"), vec![path("Prefix", "/", "s3")])]}),
        ),
        ing("other", "c", 2, json!({"defaultBackend": backend("s4")})),
    ];
    let one = serde_json::to_string(&World::new(list.clone()).run().routes).unwrap();
    let mut rev = list;
    rev.reverse();
    let two = serde_json::to_string(&World::new(rev).run().routes).unwrap();
    assert_eq!(one, two);
    // And it reads back to the same model.
    let back: HttpRoutes = serde_json::from_str(&one).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), one);
    let _ = RedirectStatus::PermanentRedirect308;
}

#[test]
fn ingresses_of_other_pools_are_not_on_this_vip() {
    let a = annotate(
        ing(
            "default",
            "a",
            0,
            json!({"rules": [rule(Some("a.com"), vec![path("Prefix", "/", "s0")])]}),
        ),
        "loadbalancer/pool",
        "dmz",
    );
    let b = annotate(
        ing(
            "default",
            "b",
            0,
            json!({"rules": [rule(Some("b.com"), vec![path("Prefix", "/", "s0")])]}),
        ),
        "loadbalancer/pool",
        "no/such pool",
    );
    let w = World::new(vec![a, b]);
    let sel = select(&w.ingresses, &w.classes);
    assert_eq!(
        sel.by_pool
            .keys()
            .map(|p| p.to_string())
            .collect::<Vec<_>>(),
        ["dmz"]
    );
    assert_eq!(sel.problems.len(), 1);
    assert_eq!(sel.problems[0].reason, reason::INVALID_POOL);
    let out = w.run();
    assert!(out.routes.is_empty());
}

mod precedence_property {
    use super::*;
    use proptest::prelude::*;

    fn seg() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec!["a", "b", "ab", "a-b"])
    }

    fn rule_path() -> impl Strategy<Value = (bool, String)> {
        (
            any::<bool>(),
            prop::collection::vec(seg(), 0..4),
            any::<bool>(),
        )
            .prop_map(|(exact, segs, slash)| {
                let mut p = format!("/{}", segs.join("/"));
                if slash && !segs.is_empty() {
                    p.push('/');
                }
                (exact, p)
            })
    }

    /// The Ingress API's rule, written directly: among the paths that match, the longest
    /// wins, Exact before Prefix on a tie; a path listed twice (same type, same path up to
    /// a Prefix's trailing `/`) counts once, the first.
    fn spec(paths: &[(bool, String)], request: &str) -> Option<usize> {
        let canon = |(exact, p): &(bool, String)| {
            let p = if *exact {
                p.clone()
            } else {
                let t = p.trim_end_matches('/');
                if t.is_empty() {
                    "/".to_string()
                } else {
                    t.to_string()
                }
            };
            (*exact, p)
        };
        let mut seen = Vec::new();
        let mut best: Option<(usize, bool, usize)> = None; // (len, exact, index)
        for (i, rp) in paths.iter().enumerate() {
            let (exact, p) = canon(rp);
            if seen.contains(&(exact, p.clone())) {
                continue;
            }
            seen.push((exact, p.clone()));
            let matches = if exact {
                request == p
            } else {
                p == "/" || request == p || request.starts_with(&format!("{p}/"))
            };
            if matches {
                let cand = (p.len(), exact, i);
                if best.is_none_or(|b| (cand.0, cand.1) > (b.0, b.1)) {
                    best = Some(cand);
                }
            }
        }
        best.map(|b| b.2)
    }

    proptest! {
        #[test]
        fn routing_follows_longest_match_then_exact(
            paths in prop::collection::vec(rule_path(), 1..7),
            request in (prop::collection::vec(seg(), 0..5), any::<bool>()).prop_map(|(s, slash)| {
                let mut p = format!("/{}", s.join("/"));
                if slash && !s.is_empty() { p.push('/'); }
                p
            }),
        ) {
            let ps: Vec<Value> = paths
                .iter()
                .enumerate()
                .map(|(i, (exact, p))| path(if *exact { "Exact" } else { "Prefix" }, p, &format!("s{i}")))
                .collect();
            let w = World::new(vec![ing("default", "p", 0, json!({"rules": [rule(Some("h.com"), ps)]}))]);
            let got = go(&w.run().routes, 80, "h.com", &request);
            let want = spec(&paths, &request).map_or("404".to_string(), |i| format!("s{i}"));
            prop_assert_eq!(got, want, "paths {:?} request {}", paths, request);
        }
    }
}
