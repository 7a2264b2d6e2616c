//! BackendTLSPolicy into the route model: which backends get TLS (with which server
//! name and CA bundle), which get the invalid references' 500, and each policy's status
//! per ancestor Gateway. The conformance suite's cases run through the real proxies in
//! `tests/tests/e2e_conformance.rs`; here are the rules, and the hostile policies.

mod support;

use k8slb_common::gateway::{GatewayOutput, PolicyAncestor};
use k8slb_common::objects::Objects;
use k8slb_common::routes::{BackendId, CertFile, ClientValidationMode, HttpRoutes, RouteAction};
use support::*;

const VIP: &str = "198.18.0.60";

/// A CA certificate (PEM) made by the `openssl` command.
fn ca_pem() -> String {
    let d = tempfile::tempdir().unwrap();
    let (crt, key) = (d.path().join("ca.pem"), d.path().join("ca.key"));
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=test-ca"])
        .args(["-addext", "basicConstraints=critical,CA:TRUE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("the openssl command");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(crt).unwrap()
}

/// A Gateway in `shop` taking routes from every namespace, our class, and for each of
/// `services` (namespace, name) a Service with port 443 named `https` and an endpoint,
/// and a route in its namespace sending `/<namespace>-<name>` to it.
fn base(services: &[(&str, &str)]) -> Objects {
    let mut o = Objects::default();
    o.add_text(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: edge, namespace: shop }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: http, port: 80, protocol: HTTP, allowedRoutes: { namespaces: { from: All } } }
"#,
    )
    .unwrap();
    for (i, (ns, name)) in services.iter().enumerate() {
        o.add_text(&format!(
            r#"
apiVersion: v1
kind: Service
metadata: {{ name: {name}, namespace: {ns} }}
spec:
  ports: [{{ name: https, port: 443, protocol: TCP }}, {{ name: other, port: 8443, protocol: TCP }}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: {ns} }}
spec:
  parentRefs: [{{ name: edge, namespace: shop }}]
  rules:
  - matches: [{{ path: {{ type: Exact, value: /{ns}-{name} }} }}]
    backendRefs: [{{ name: {name}, port: 443 }}]
  - matches: [{{ path: {{ type: Exact, value: /{ns}-{name}-other }} }}]
    backendRefs: [{{ name: {name}, port: 8443 }}]
"#
        ))
        .unwrap();
        for port in [443, 8443] {
            let pname = if port == 443 { "https" } else { "other" };
            o.slices.push(slice(
                ns,
                name,
                &format!("{port}"),
                Some(pname),
                port,
                &[(&format!("10.244.1.{}", i + 1), true, true, false)],
            ));
        }
    }
    o
}

fn ca_configmap(ns: &str, name: &str, ca: &str) -> String {
    let indented: String = ca.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: {name}, namespace: {ns} }}\ndata:\n  ca.crt: |\n{indented}"
    )
}

fn policy(
    ns: &str,
    name: &str,
    created: &str,
    target: &str,
    section: Option<&str>,
    host: &str,
) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{ name: {name}, namespace: {ns}, creationTimestamp: "{created}" }}
spec:
  targetRefs: [{{ group: "", kind: Service, name: {target}{section} }}]
  validation:
    caCertificateRefs: [{{ group: "", kind: ConfigMap, name: ca }}]
    hostname: "{host}"
"#
    )
}

fn run(o: &Objects) -> GatewayOutput {
    translate_on(o, &[], VIP)
}

fn id(s: &str) -> BackendId {
    s.parse().unwrap()
}

/// (type, status, reason) of the policy's conditions for Gateway shop/edge.
fn conds(out: &GatewayOutput, policy: &str) -> Vec<(&'static str, bool, &'static str)> {
    let list: &Vec<PolicyAncestor> = out
        .backend_tls_policies
        .get(&policy.parse().unwrap())
        .unwrap_or_else(|| panic!("{policy} has no status"));
    let [a] = list.as_slice() else {
        panic!("{policy}: one ancestor expected: {list:?}")
    };
    assert_eq!(a.gateway.to_string(), "shop/edge");
    a.conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status, c.reason.as_str()))
        .collect()
}

/// The reason of the problem (the Event) the policy's refusal (its first condition)
/// gives.
fn problem_reason(out: &GatewayOutput, policy: &str) -> String {
    let list = &out.backend_tls_policies[&policy.parse().unwrap()];
    let c = &list[0].conditions[0];
    c.reason
        .problem()
        .unwrap_or_else(|| panic!("{policy}: {c:?} is no problem"))
        .to_string()
}

/// What a request for `path` on the Gateway's port 80 gets.
fn action<'a>(r: &'a HttpRoutes, path: &str) -> &'a RouteAction {
    r.route(VIP.parse().unwrap(), 80, "any.example", path)
        .unwrap_or_else(|| panic!("{path} routes nowhere"))
}

fn forwards_to(r: &HttpRoutes, path: &str, want: &str) {
    match action(r, path) {
        RouteAction::Forward { backends, invalid } => {
            assert_eq!(*invalid, 0, "{path}");
            assert_eq!(backends.len(), 1, "{path}");
            assert_eq!(backends[0].id, id(want), "{path}");
        }
        a => panic!("{path}: {a:?}"),
    }
}

fn answers_500(r: &HttpRoutes, path: &str) {
    match action(r, path) {
        RouteAction::Forward { backends, invalid } => {
            assert!(backends.is_empty() && *invalid > 0, "{path}: {backends:?}")
        }
        a => panic!("{path}: {a:?}"),
    }
}

const ACCEPTED: [(&str, bool, &str); 2] = [
    ("Accepted", true, "Accepted"),
    ("ResolvedRefs", true, "ResolvedRefs"),
];

#[test]
fn a_valid_policy_puts_tls_with_its_hostname_and_ca_bundle_on_the_targeted_port_only() {
    let ca = ca_pem();
    let mut o = base(&[("shop", "api")]);
    o.add_text(&ca_configmap("shop", "ca", &ca)).unwrap();
    o.add_text(&policy(
        "shop",
        "p",
        "2026-01-01T00:00:00Z",
        "api",
        Some("https"),
        "api.internal",
    ))
    .unwrap();
    let out = run(&o);
    assert_eq!(conds(&out, "shop/p"), ACCEPTED);
    let r = &out.routes;
    let tls = r.backends[&id("shop/api:443")]
        .tls
        .as_ref()
        .expect("TLS on port https");
    assert_eq!(tls.server_name.as_str(), "api.internal");
    // The bundle is the canonical PEM of the ConfigMap's certificate.
    assert_eq!(r.ca_bundles[&tls.ca].trim(), ca.trim());
    assert_eq!(
        r.backends[&id("shop/api:8443")].tls,
        None,
        "port other is not targeted"
    );
    forwards_to(r, "/shop-api", "shop/api:443");
    forwards_to(r, "/shop-api-other", "shop/api:8443");
}

#[test]
fn the_older_policy_holds_a_target_and_a_ports_policy_wins_over_its_services() {
    let ca = ca_pem();
    let mut o = base(&[("shop", "api")]);
    o.add_text(&ca_configmap("shop", "ca", &ca)).unwrap();
    for p in [
        policy(
            "shop",
            "b-old",
            "2026-01-01T00:00:00Z",
            "api",
            None,
            "old.internal",
        ),
        policy(
            "shop",
            "a-new",
            "2026-01-01T00:00:05Z",
            "api",
            None,
            "new.internal",
        ),
        policy(
            "shop",
            "port",
            "2026-01-01T00:00:09Z",
            "api",
            Some("https"),
            "port.internal",
        ),
    ] {
        o.add_text(&p).unwrap();
    }
    let out = run(&o);
    assert_eq!(conds(&out, "shop/b-old"), ACCEPTED);
    assert_eq!(conds(&out, "shop/port"), ACCEPTED);
    assert_eq!(
        conds(&out, "shop/a-new"),
        [
            ("Accepted", false, "Conflicted"),
            ("ResolvedRefs", true, "ResolvedRefs")
        ]
    );
    let name = |p: u16| {
        out.routes.backends[&id(&format!("shop/api:{p}"))]
            .tls
            .as_ref()
            .map(|t| t.server_name.to_string())
    };
    assert_eq!(name(443).as_deref(), Some("port.internal"));
    assert_eq!(name(8443).as_deref(), Some("old.internal"));
}

#[test]
fn hostile_policies_are_refused_on_their_own_services_and_touch_no_other_namespace() {
    let ca = ca_pem();
    let mut o = base(&[
        ("shop", "api"),
        ("evil", "api"),
        ("evil", "big"),
        ("evil", "junk"),
        ("evil", "ctl"),
    ]);
    o.add_text(&ca_configmap("shop", "ca", &ca)).unwrap();
    // evil's CA ConfigMaps: 1 MiB of certificates, and text that is not PEM.
    let huge: String = ca.repeat(1 + (1 << 20) / ca.len());
    o.add_text(&ca_configmap("evil", "ca", &huge)).unwrap();
    o.add_text(&ca_configmap("evil", "junk", "not a certificate\n"))
        .unwrap();
    o.add_text(&policy(
        "shop",
        "good",
        "2026-01-01T00:00:09Z",
        "api",
        None,
        "api.internal",
    ))
    .unwrap();
    // A policy can name no namespace: an evil policy for "api" is evil/api's.
    o.add_text(&policy(
        "evil",
        "steal",
        "2026-01-01T00:00:00Z",
        "api",
        None,
        "evil.example",
    ))
    .unwrap();
    o.add_text(
        &policy(
            "evil",
            "junk",
            "2026-01-01T00:00:01Z",
            "junk",
            None,
            "junk.example",
        )
        .replace("name: ca }", "name: junk }"),
    )
    .unwrap();
    o.add_text(&policy(
        "evil",
        "ctl",
        "2026-01-01T00:00:02Z",
        "ctl",
        None,
        "a\\x07b.example",
    ))
    .unwrap();
    let out = run(&o);
    let r = &out.routes;
    // shop is served as its own policy says, whatever evil did.
    assert_eq!(conds(&out, "shop/good"), ACCEPTED);
    assert_eq!(
        r.backends[&id("shop/api:443")]
            .tls
            .as_ref()
            .unwrap()
            .server_name
            .as_str(),
        "api.internal"
    );
    forwards_to(r, "/shop-api", "shop/api:443");
    // evil's huge bundle is refused, and so its Service's requests get 500, never
    // cleartext; no file of it is in the model.
    assert_eq!(
        conds(&out, "evil/steal"),
        [
            ("Accepted", false, "NoValidCACertificate"),
            ("ResolvedRefs", false, "InvalidCACertificateRef")
        ]
    );
    answers_500(r, "/evil-api");
    assert_eq!(
        conds(&out, "evil/junk"),
        [
            ("Accepted", false, "NoValidCACertificate"),
            ("ResolvedRefs", false, "InvalidCACertificateRef")
        ]
    );
    answers_500(r, "/evil-junk");
    assert_eq!(conds(&out, "evil/ctl")[0], ("Accepted", false, "Invalid"));
    assert_eq!(
        problem_reason(&out, "evil/ctl"),
        "InvalidValidationHostname"
    );
    answers_500(r, "/evil-ctl");
    // An untargeted Service of evil's is served as before.
    forwards_to(r, "/evil-big", "evil/big:443");
    assert_eq!(r.ca_bundles.len(), 1, "only shop's bundle");
    assert!(!r.backends.contains_key(&id("evil/api:443")));
}

#[test]
fn a_ca_reference_of_another_kind_or_to_nothing_is_refused_with_the_specs_reasons() {
    let mut o = base(&[("shop", "a"), ("shop", "b")]);
    o.add_text(
        &policy(
            "shop",
            "kind",
            "2026-01-01T00:00:00Z",
            "a",
            None,
            "a.internal",
        )
        .replace(
            "group: \"\", kind: ConfigMap",
            "group: invalid.io, kind: InvalidKind",
        ),
    )
    .unwrap();
    o.add_text(&policy(
        "shop",
        "missing",
        "2026-01-01T00:00:01Z",
        "b",
        None,
        "b.internal",
    ))
    .unwrap();
    let out = run(&o);
    assert_eq!(
        conds(&out, "shop/kind"),
        [
            ("Accepted", false, "NoValidCACertificate"),
            ("ResolvedRefs", false, "InvalidKind")
        ]
    );
    assert_eq!(
        conds(&out, "shop/missing"),
        [
            ("Accepted", false, "NoValidCACertificate"),
            ("ResolvedRefs", false, "InvalidCACertificateRef")
        ]
    );
    answers_500(&out.routes, "/shop-a");
    answers_500(&out.routes, "/shop-b-other");
}

#[test]
fn subject_alt_names_well_known_cas_and_options_are_refused_as_invalid_and_named_in_the_problem() {
    let ca = ca_pem();
    let mut o = base(&[("shop", "a"), ("shop", "b"), ("shop", "c")]);
    o.add_text(&ca_configmap("shop", "ca", &ca)).unwrap();
    o.add_text(
        &policy(
            "shop",
            "san",
            "2026-01-01T00:00:00Z",
            "a",
            None,
            "a.internal",
        )
        .replace(
            "    hostname:",
            "    subjectAltNames: [{ type: Hostname, hostname: x.internal }]\n    hostname:",
        ),
    )
    .unwrap();
    o.add_text(
        &policy(
            "shop",
            "system",
            "2026-01-01T00:00:01Z",
            "b",
            None,
            "b.internal",
        )
        .replace(
            "caCertificateRefs: [{ group: \"\", kind: ConfigMap, name: ca }]",
            "wellKnownCACertificates: System",
        ),
    )
    .unwrap();
    o.add_text(
        &policy(
            "shop",
            "opts",
            "2026-01-01T00:00:02Z",
            "c",
            None,
            "c.internal",
        )
        .replace(
            "  validation:",
            "  options: { example.com/x: y }\n  validation:",
        ),
    )
    .unwrap();
    let out = run(&o);
    // The condition says the specification's word; the problem says what was invalid.
    for (policy, problem) in [
        ("shop/san", "UnsupportedSubjectAltNames"),
        ("shop/system", "UnsupportedWellKnownCACertificates"),
        ("shop/opts", "UnsupportedPolicyOptions"),
    ] {
        assert_eq!(conds(&out, policy)[0], ("Accepted", false, "Invalid"));
        assert_eq!(problem_reason(&out, policy), problem);
    }
    answers_500(&out.routes, "/shop-a");
    answers_500(&out.routes, "/shop-b");
    answers_500(&out.routes, "/shop-c");
}

/// A Gateway `edge` in `shop` with one HTTPS listener on 443 (certificate from `pool`
/// for any name) and `spec.tls.frontend` as given (YAML, indented for `spec`).
fn frontend_gateway(frontend: &str) -> Objects {
    let mut o = Objects::default();
    o.add_text(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{ name: k8slb }}
spec: {{ controllerName: k8slb.io/gateway-controller }}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{ name: edge, namespace: shop }}
spec:
  gatewayClassName: k8slb
  tls:
    frontend:
{frontend}
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    tls: {{ certificateRefs: [{{ name: site }}] }}
"#
    ))
    .unwrap();
    o
}

/// The conditions (type, status, reason) of listener `https` of shop/edge.
fn listener_conds(out: &GatewayOutput) -> Vec<(&'static str, bool, &'static str)> {
    let st = &out.gateways[&"shop/edge".parse().unwrap()];
    st.listeners[0]
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status, c.reason.as_str()))
        .collect()
}

fn site_secret() -> k8slb_common::ingress::SecretMeta {
    k8slb_common::ingress::SecretMeta {
        namespace: "shop".into(),
        name: "site".into(),
        type_: "kubernetes.io/tls".into(),
        valid: true,
        version: "v1".into(),
        refusal: String::new(),
        dns_names: vec!["shop.example.com".into()],
    }
}

#[test]
fn a_gateways_client_validation_asks_its_https_listener_for_certificates_of_its_ca() {
    let ca = ca_pem();
    let mut o = frontend_gateway(
        "      default:\n        validation:\n          caCertificateRefs: [{ group: \"\", kind: ConfigMap, name: clients }]",
    );
    o.add_text(&ca_configmap("shop", "clients", &ca)).unwrap();
    let out = translate_on(&o, &[site_secret()], VIP);
    assert!(
        listener_conds(&out).iter().all(|c| c.1),
        "{:?}",
        listener_conds(&out)
    );
    let l = &out.routes.listeners[0];
    let id = l
        .tls
        .as_ref()
        .unwrap()
        .client_ca
        .as_ref()
        .expect("a client CA");
    assert_eq!(out.routes.ca_bundles[id].trim(), ca.trim());
}

#[test]
fn client_validation_refs_across_namespaces_need_a_grant_and_a_huge_bundle_is_refused() {
    let ca = ca_pem();
    let across = "      default:\n        validation:\n          caCertificateRefs: [{ group: \"\", kind: ConfigMap, name: clients, namespace: pki }]";
    let mut o = frontend_gateway(across);
    o.add_text(&ca_configmap("pki", "clients", &ca)).unwrap();
    let out = translate_on(&o, &[site_secret()], VIP);
    assert_eq!(
        listener_conds(&out)[..2],
        [
            ("ResolvedRefs", false, "RefNotPermitted"),
            ("Accepted", false, "NoValidCACertificate")
        ]
    );
    assert!(
        out.routes.listeners.is_empty(),
        "not served without its validation"
    );
    o.add_text(
        r#"
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: gateways, namespace: pki }
spec:
  from: [{ group: gateway.networking.k8s.io, kind: Gateway, namespace: shop }]
  to: [{ group: "", kind: ConfigMap }]
"#,
    )
    .unwrap();
    let out = translate_on(&o, &[site_secret()], VIP);
    assert!(listener_conds(&out).iter().all(|c| c.1));
    // A huge bundle (1 MiB): refused, the listener not served.
    let mut o = frontend_gateway(
        "      default:\n        validation:\n          caCertificateRefs: [{ group: \"\", kind: ConfigMap, name: clients }]",
    );
    o.add_text(&ca_configmap(
        "shop",
        "clients",
        &ca.repeat(1 + (1 << 20) / ca.len()),
    ))
    .unwrap();
    let out = translate_on(&o, &[site_secret()], VIP);
    assert_eq!(
        listener_conds(&out)[0],
        ("ResolvedRefs", false, "InvalidCACertificateRef")
    );
}

/// `validation` (YAML flow mapping) naming the ConfigMap `clients`, with `mode` if given.
fn validation(mode: Option<&str>) -> String {
    let mode = mode.map_or(String::new(), |m| format!("mode: {m}, "));
    format!("{{ {mode}caCertificateRefs: [{{ group: \"\", kind: ConfigMap, name: clients }}] }}")
}

/// The mode served on listener 0 of the model (which must have a client CA).
fn served_mode(out: &GatewayOutput) -> ClientValidationMode {
    let t = out.routes.listeners[0].tls.as_ref().unwrap();
    assert!(t.client_ca.is_some(), "{t:?}");
    t.client_validation
}

/// shop/edge's InsecureFrontendValidationMode condition (status, reason), if any.
fn insecure(out: &GatewayOutput) -> Option<(bool, &'static str)> {
    out.gateways[&"shop/edge".parse().unwrap()]
        .conditions
        .iter()
        .find(|c| c.type_.as_str() == "InsecureFrontendValidationMode")
        .map(|c| (c.status, c.reason.as_str()))
}

#[test]
fn an_insecure_fallback_validation_is_served_with_its_mode_and_said_on_the_gateway() {
    let ca = ca_pem();
    for (frontend, want, condition) in [
        (
            format!("      default:\n        validation: {}", validation(None)),
            Some(ClientValidationMode::AllowValidOnly),
            None,
        ),
        (
            format!(
                "      default:\n        validation: {}",
                validation(Some("AllowValidOnly"))
            ),
            Some(ClientValidationMode::AllowValidOnly),
            None,
        ),
        (
            format!(
                "      default:\n        validation: {}",
                validation(Some("AllowInsecureFallback"))
            ),
            Some(ClientValidationMode::AllowInsecureFallback),
            Some((true, "ConfigurationChanged")),
        ),
        // Another port's fallback: this listener keeps AllowValidOnly; the Gateway
        // says it all the same (one of its ports is in fallback).
        (
            format!(
                "      default:\n        validation: {}\n      perPort:\n      - port: 8443\n        tls:\n          validation: {}",
                validation(None),
                validation(Some("AllowInsecureFallback"))
            ),
            Some(ClientValidationMode::AllowValidOnly),
            Some((true, "ConfigurationChanged")),
        ),
        // This port's fallback, the default strict.
        (
            format!(
                "      default:\n        validation: {}\n      perPort:\n      - port: 443\n        tls:\n          validation: {}",
                validation(None),
                validation(Some("AllowInsecureFallback"))
            ),
            Some(ClientValidationMode::AllowInsecureFallback),
            Some((true, "ConfigurationChanged")),
        ),
        // A mode the API does not name: refused, never served open.
        (
            format!(
                "      default:\n        validation: {}",
                validation(Some("Bogus"))
            ),
            None,
            None,
        ),
    ] {
        let mut o = frontend_gateway(&frontend);
        o.add_text(&ca_configmap("shop", "clients", &ca)).unwrap();
        let out = translate_on(&o, &[site_secret()], VIP);
        match want {
            Some(mode) => {
                assert!(
                    listener_conds(&out).iter().all(|c| c.1),
                    "{frontend}: {:?}",
                    listener_conds(&out)
                );
                assert_eq!(served_mode(&out), mode, "{frontend}");
            }
            None => {
                assert!(
                    listener_conds(&out).contains(&("Accepted", false, "UnsupportedValue")),
                    "{frontend}: {:?}",
                    listener_conds(&out)
                );
                assert!(out.routes.listeners.is_empty(), "{frontend}");
            }
        }
        assert_eq!(insecure(&out), condition, "{frontend}");
    }
}

/// shop/edge and shop/other (newer by name), each with an HTTPS listener on 443 and
/// its `spec.tls.frontend` (`None`: no client validation), on one address.
fn sharing_443(edge: Option<&str>, other: Option<&str>) -> GatewayOutput {
    let ca = ca_pem();
    let gateway = |name: &str, frontend: Option<&str>| {
        let tls = frontend.map_or(String::new(), |f| {
            format!("  tls:\n    frontend:\n      default:\n        validation: {f}\n")
        });
        format!(
            "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{ name: {name}, namespace: shop }}\nspec:\n  gatewayClassName: k8slb\n{tls}  listeners:\n  - {{ name: https, port: 443, protocol: HTTPS, tls: {{ certificateRefs: [{{ name: site }}] }} }}\n"
        )
    };
    let mut o = Objects::default();
    o.add_text(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{ name: k8slb }}\nspec: {{ controllerName: k8slb.io/gateway-controller }}\n{}{}",
        gateway("edge", edge),
        gateway("other", other)
    ))
    .unwrap();
    o.add_text(&ca_configmap("shop", "clients", &ca)).unwrap();
    translate_at(&o, &[site_secret()], VIP, false)
}

/// Listener `https` of `gw`'s conditions (type, status, reason).
fn conds_of(out: &GatewayOutput, gw: &str) -> Vec<(&'static str, bool, &'static str)> {
    out.gateways[&gw.parse().unwrap()].listeners[0]
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status, c.reason.as_str()))
        .collect()
}

/// One TLS bind (address and port) has one CA bundle and one mode (HAProxy's `verify`
/// and `ca-ignore-err` are bind options): of two Gateways sharing an address whose
/// validations on that port differ, the newer's HTTPS listener is refused
/// (`PortUnavailable`), never served with the older's validation, nor the older with
/// the newer's (an AllowValidOnly listener open to clients without certificates).
#[test]
fn gateways_sharing_a_port_with_different_client_validations_refuse_the_newer_listener() {
    let strict = validation(None);
    let fallback = validation(Some("AllowInsecureFallback"));
    for (edge, other, served) in [
        (
            Some(strict.as_str()),
            Some(fallback.as_str()),
            Some(ClientValidationMode::AllowValidOnly),
        ),
        (
            Some(fallback.as_str()),
            Some(strict.as_str()),
            Some(ClientValidationMode::AllowInsecureFallback),
        ),
        // No validation beside one: the newer is refused either way.
        (None, Some(strict.as_str()), None),
        (
            Some(strict.as_str()),
            None,
            Some(ClientValidationMode::AllowValidOnly),
        ),
    ] {
        let out = sharing_443(edge, other);
        let what = format!("edge {edge:?}, other {other:?}");
        assert!(
            conds_of(&out, "shop/edge").iter().all(|c| c.1),
            "{what}: {:?}",
            conds_of(&out, "shop/edge")
        );
        assert!(
            conds_of(&out, "shop/other").contains(&("Accepted", false, "PortUnavailable")),
            "{what}: {:?}",
            conds_of(&out, "shop/other")
        );
        assert_eq!(out.routes.listeners.len(), 1, "{what}");
        let t = out.routes.listeners[0].tls.as_ref().unwrap();
        assert_eq!(
            t.client_ca.as_ref().map(|_| t.client_validation),
            served,
            "{what}"
        );
    }
    // The same validation: both served on the one listener.
    let out = sharing_443(Some(fallback.as_str()), Some(fallback.as_str()));
    assert!(conds_of(&out, "shop/other").iter().all(|c| c.1));
    assert!(conds_of(&out, "shop/edge").iter().all(|c| c.1));
}

/// Shop/edge's `spec.tls.backend.clientCertificateRef` as given (YAML flow mapping), a
/// second Gateway shop/other (its own address) whose route `/other` reaches the same
/// Service port, and a valid policy putting TLS on shop/api's `https` port.
fn client_cert_gateways(client_ref: &str) -> (Objects, GatewayOutputFn) {
    let ca = ca_pem();
    let mut o = base(&[("shop", "api")]);
    o.gateways[0].spec.tls = Some(
        serde_json::from_str::<serde_json::Value>(&format!(
            "{{\"backend\": {{\"clientCertificateRef\": {client_ref}}}}}"
        ))
        .unwrap(),
    );
    o.add_text(&ca_configmap("shop", "ca", &ca)).unwrap();
    o.add_text(&policy(
        "shop",
        "p",
        "2026-01-01T00:00:00Z",
        "api",
        Some("https"),
        "api.shop.example",
    ))
    .unwrap();
    o.add_text(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: other, namespace: shop }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: http, port: 80, protocol: HTTP }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: other, namespace: shop }
spec:
  parentRefs: [{ name: other }]
  rules:
  - matches: [{ path: { type: Exact, value: /other } }]
    backendRefs: [{ name: api, port: 443 }]
"#,
    )
    .unwrap();
    (o, two_addresses)
}

type GatewayOutputFn = fn(&Objects, &[k8slb_common::ingress::SecretMeta]) -> GatewayOutput;

/// The translation with shop/edge on [`VIP`] and shop/other on 198.18.0.61.
fn two_addresses(o: &Objects, secrets: &[k8slb_common::ingress::SecretMeta]) -> GatewayOutput {
    translate_at(o, secrets, OTHER_VIP, false)
}

/// The translation with shop/edge on [`VIP`] and shop/other on `other` (the same
/// address: sharing one listener), on a provider that mirrors or not.
fn translate_at(
    o: &Objects,
    secrets: &[k8slb_common::ingress::SecretMeta],
    other: &str,
    serves_mirror: bool,
) -> GatewayOutput {
    let addresses = [("shop/edge", VIP), ("shop/other", other)]
        .into_iter()
        .map(|(k, ip)| (k.parse().unwrap(), vec![ip.parse().unwrap()]))
        .collect();
    let shares = std::collections::BTreeMap::new();
    let mut input = o.gateway_input(secrets, &addresses, &shares);
    input.serves_mirror = serves_mirror;
    k8slb_common::gateway::translate(&input)
}

const OTHER_VIP: &str = "198.18.0.61";

fn client_secret(ns: &str, type_: &str, valid: bool) -> k8slb_common::ingress::SecretMeta {
    k8slb_common::ingress::SecretMeta {
        namespace: ns.into(),
        name: "client".into(),
        type_: type_.into(),
        valid,
        version: "v1".into(),
        refusal: if valid {
            String::new()
        } else {
            "no key".into()
        },
        dns_names: vec![],
    }
}

/// (type, status, reason) of a Gateway's own conditions.
fn gateway_conds(out: &GatewayOutput, gw: &str) -> Vec<(&'static str, bool, &'static str)> {
    out.gateways[&gw.parse().unwrap()]
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status, c.reason.as_str()))
        .collect()
}

/// The client certificate of Secret shop/client (version v1, [`client_secret`]).
fn shop_client() -> CertFile {
    CertFile::Secret {
        namespace: "shop".parse().unwrap(),
        name: "client".parse().unwrap(),
        version: "v1".into(),
    }
}

/// The backends (id, client certificate) and invalid share a request gets.
fn presented(action: &RouteAction) -> (Vec<(String, Option<CertFile>)>, u16) {
    match action {
        RouteAction::Forward { backends, invalid } => (
            backends
                .iter()
                .map(|b| (b.id.to_string(), b.client_certificate.clone()))
                .collect(),
            *invalid,
        ),
        a => panic!("{a:?}"),
    }
}

/// A Gateway with a valid backend client certificate presents it to the TLS backends
/// of its own rules: not to a cleartext port of the same Service, not on another
/// Gateway's requests to the same TLS backend (the certificate is edge's owner's
/// identity). ResolvedRefs True, no warning, and the Secret is one the nodes get.
#[test]
fn a_gateways_backend_client_certificate_is_presented_to_its_own_tls_backends_only() {
    let (o, run) = client_cert_gateways(r#"{"group": "", "kind": "Secret", "name": "client"}"#);
    let out = run(&o, &[client_secret("shop", "kubernetes.io/tls", true)]);
    let edge = gateway_conds(&out, "shop/edge");
    assert!(edge.contains(&("Accepted", true, "Accepted")), "{edge:?}");
    assert!(
        edge.contains(&("ResolvedRefs", true, "ResolvedRefs")),
        "{edge:?}"
    );
    let st = &out.gateways[&"shop/edge".parse().unwrap()];
    assert!(st.warnings.is_empty(), "{:?}", st.warnings);
    assert_eq!(
        presented(action(&out.routes, "/shop-api")),
        (vec![("shop/api:443".into(), Some(shop_client()))], 0)
    );
    // Not a TLS backend: nothing presented.
    assert_eq!(
        presented(action(&out.routes, "/shop-api-other")),
        (vec![("shop/api:8443".into(), None)], 0)
    );
    // The other Gateway (no client certificate asked) reaches it over TLS, presenting
    // nothing.
    let other = out
        .routes
        .route(OTHER_VIP.parse().unwrap(), 80, "any.example", "/other")
        .expect("/other routes");
    assert_eq!(presented(other), (vec![("shop/api:443".into(), None)], 0));
    assert!(out.routes.backends[&id("shop/api:443")].tls.is_some());
    assert_eq!(
        k8slb_common::certs::used_by_routes(&out.routes),
        [shop_client()].into_iter().collect()
    );
    // Without a client certificate asked: edge's requests reach it over TLS, presenting
    // nothing, and no ResolvedRefs of the Gateway's own.
    let mut plain = o.clone();
    plain.gateways[0].spec.tls = None;
    let out = run(&plain, &[]);
    assert_eq!(
        presented(action(&out.routes, "/shop-api")),
        (vec![("shop/api:443".into(), None)], 0)
    );
    assert!(!gateway_conds(&out, "shop/edge")
        .iter()
        .any(|c| c.0 == "ResolvedRefs"));
    assert!(k8slb_common::certs::used_by_routes(&out.routes).is_empty());
}

/// GatewayInvalidTLSBackendConfiguration's references, and a hostile one at the API's
/// maximum lengths: ResolvedRefs False with the specification's reason, the Gateway
/// Accepted, its TLS-backend requests answered 500, nothing of the reference in the
/// model, the message bounded.
#[test]
fn invalid_backend_client_certificate_refs_say_why_with_the_specs_reasons() {
    let long = |n: usize| "a".repeat(n);
    let hostile = format!(
        r#"{{"group": "{}.example.com", "kind": "K{}", "name": "{}", "namespace": "{}"}}"#,
        long(241),
        long(62),
        long(253),
        long(63)
    );
    let table: [(&str, &str, Vec<k8slb_common::ingress::SecretMeta>); 8] = [
        (
            r#"{"name": "client"}"#,
            "InvalidClientCertificateRef",
            vec![],
        ),
        (
            r#"{"group": "wrong.group.company.io", "kind": "Secret", "name": "client"}"#,
            "InvalidClientCertificateRef",
            vec![client_secret("shop", "kubernetes.io/tls", true)],
        ),
        (
            r#"{"kind": "WrongKind", "name": "client"}"#,
            "InvalidClientCertificateRef",
            vec![client_secret("shop", "kubernetes.io/tls", true)],
        ),
        (
            r#"{"name": "client"}"#,
            "InvalidClientCertificateRef",
            vec![client_secret("shop", "Opaque", true)],
        ),
        (
            r#"{"name": "client"}"#,
            "InvalidClientCertificateRef",
            vec![client_secret("shop", "kubernetes.io/tls", false)],
        ),
        (
            r#"{"name": "client", "namespace": "pki"}"#,
            "RefNotPermitted",
            vec![client_secret("pki", "kubernetes.io/tls", true)],
        ),
        (r#"{"kind": 7}"#, "InvalidClientCertificateRef", vec![]),
        (&hostile, "InvalidClientCertificateRef", vec![]),
    ];
    for (r, reason, secrets) in &table {
        let (o, run) = client_cert_gateways(r);
        let out = run(&o, secrets);
        let conds = gateway_conds(&out, "shop/edge");
        assert!(
            conds.contains(&("Accepted", true, "Accepted")),
            "{r}: {conds:?}"
        );
        assert!(
            conds.contains(&("ResolvedRefs", false, reason)),
            "{r}: {conds:?}"
        );
        let st = &out.gateways[&"shop/edge".parse().unwrap()];
        let msg = &st
            .conditions
            .iter()
            .find(|c| c.type_.as_str() == "ResolvedRefs")
            .unwrap()
            .message;
        assert!(msg.len() <= 400, "{r}: {} bytes", msg.len());
        answers_500(&out.routes, "/shop-api");
        let model = serde_json::to_string(&out.routes).unwrap();
        assert!(
            !model.contains("\"client\"") && !model.contains(&long(62)),
            "{r}"
        );
    }
    // Across namespaces with a ReferenceGrant: resolved.
    let (mut o, run) = client_cert_gateways(r#"{"name": "client", "namespace": "pki"}"#);
    o.add_text(
        r#"
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: gateways, namespace: pki }
spec:
  from: [{ group: gateway.networking.k8s.io, kind: Gateway, namespace: shop }]
  to: [{ group: "", kind: Secret }]
"#,
    )
    .unwrap();
    let out = run(&o, &[client_secret("pki", "kubernetes.io/tls", true)]);
    assert!(gateway_conds(&out, "shop/edge").contains(&("ResolvedRefs", true, "ResolvedRefs")));
}

/// Two Gateways sharing one address (by consent): `edge` with its HTTP listener on port
/// 80, `other` with a UDP listener on port 80. What `edge`'s requests to a TLS backend
/// present depends on `edge`'s own `clientCertificateRef` only: when it asks, its
/// certificate; when only `other` (no HTTP listener) asks, nothing.
#[test]
fn only_the_gateways_serving_a_listeners_http_routes_decide_its_client_certificate() {
    for asking in ["edge", "other"] {
        let mut o = base(&[("shop", "api")]);
        o.add_text(&ca_configmap("shop", "ca", &ca_pem())).unwrap();
        o.add_text(&policy(
            "shop",
            "p",
            "2026-01-01T00:00:00Z",
            "api",
            Some("https"),
            "api.shop.example",
        ))
        .unwrap();
        o.add_text(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: other, namespace: shop }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: dns, port: 80, protocol: UDP }
"#,
        )
        .unwrap();
        let tls: serde_json::Value =
            serde_json::from_str(r#"{"backend": {"clientCertificateRef": {"name": "client"}}}"#)
                .unwrap();
        let i = o
            .gateways
            .iter()
            .position(|g| g.metadata.name.as_deref() == Some(asking))
            .unwrap();
        o.gateways[i].spec.tls = Some(tls);
        let secrets = [client_secret("shop", "kubernetes.io/tls", true)];
        let out = translate_at(&o, &secrets, VIP, false);
        let want = (asking == "edge").then(shop_client);
        assert_eq!(
            presented(action(&out.routes, "/shop-api")),
            (vec![("shop/api:443".into(), want)], 0),
            "{asking}"
        );
    }
}

/// Two Gateways sharing one address and port (by consent), both with an HTTP listener
/// there: their requests to a TLS backend present the certificate when both ask for
/// the same one; when only one asks (the listener cannot tell whose request it is),
/// they are answered 500, never sent without the certificate nor with the other
/// owner's.
#[test]
fn gateways_sharing_a_listener_present_a_client_certificate_only_if_all_ask_for_it() {
    for both in [false, true] {
        let (mut o, _) =
            client_cert_gateways(r#"{"group": "", "kind": "Secret", "name": "client"}"#);
        if both {
            o.gateways[1].spec.tls = o.gateways[0].spec.tls.clone();
        }
        let secrets = [client_secret("shop", "kubernetes.io/tls", true)];
        let out = translate_at(&o, &secrets, VIP, false);
        for path in ["/shop-api", "/other"] {
            let got = presented(action(&out.routes, path));
            if both {
                assert_eq!(
                    got,
                    (vec![("shop/api:443".into(), Some(shop_client()))], 0),
                    "{path}"
                );
            } else {
                assert!(got.0.is_empty() && got.1 > 0, "{path}: {got:?}");
            }
        }
        // A cleartext backend is served either way.
        assert_eq!(
            presented(action(&out.routes, "/shop-api-other")),
            (vec![("shop/api:8443".into(), None)], 0)
        );
    }
}

/// A RequestMirror copy is never sent to a TLS backend without the certificate its
/// Gateway presents: nginx sends copies from a location shared by every rule that
/// mirrors to that backend, which cannot carry one Gateway's certificate, so on a
/// Gateway that presents one (shop/edge) the mirror to its TLS backend is left out of
/// the model (the requests themselves are served); the other Gateway's mirror to the
/// same backend stays (sent over verified TLS), as does a mirror to a cleartext port.
#[test]
fn a_mirror_copy_to_a_tls_backend_is_not_sent_by_a_gateway_that_presents_a_certificate() {
    let (mut o, _) = client_cert_gateways(r#"{"group": "", "kind": "Secret", "name": "client"}"#);
    for (gw, name) in [("edge", "edge-mirror"), ("other", "other-mirror")] {
        o.add_text(&format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: shop }}
spec:
  parentRefs: [{{ name: {gw} }}]
  rules:
  - matches: [{{ path: {{ type: Exact, value: /{name} }} }}]
    filters:
    - {{ type: RequestMirror, requestMirror: {{ backendRef: {{ name: api, port: 443 }} }} }}
    - {{ type: RequestMirror, requestMirror: {{ backendRef: {{ name: api, port: 8443 }}, percent: 50 }} }}
    backendRefs: [{{ name: api, port: 8443 }}]
"#
        ))
        .unwrap();
    }
    let secrets = [client_secret("shop", "kubernetes.io/tls", true)];
    let out = translate_at(&o, &secrets, OTHER_VIP, true);
    let mirrors = |vip: &str, path: &str| -> (Vec<String>, Vec<String>) {
        let ip: std::net::IpAddr = vip.parse().unwrap();
        let rule = out
            .routes
            .listeners
            .iter()
            .filter(|l| l.ip == ip)
            .flat_map(|l| &l.virtual_hosts)
            .flat_map(|v| &v.rules)
            .find(|r| format!("{:?}", r.matches).contains(path))
            .unwrap_or_else(|| panic!("{path}: no rule"));
        (
            rule.filters.mirrors.iter().map(|m| m.to_string()).collect(),
            rule.filters
                .partial_mirrors
                .iter()
                .map(|m| m.backend.to_string())
                .collect(),
        )
    };
    assert_eq!(
        mirrors(VIP, "/edge-mirror"),
        (vec![], vec!["shop/api:8443".to_string()])
    );
    assert_eq!(
        mirrors(OTHER_VIP, "/other-mirror"),
        (
            vec!["shop/api:443".to_string()],
            vec!["shop/api:8443".to_string()]
        )
    );
    for path in ["/edge-mirror", "/other-mirror"] {
        let vip = if path == "/edge-mirror" {
            VIP
        } else {
            OTHER_VIP
        };
        let served = out
            .routes
            .route(vip.parse().unwrap(), 80, "any.example", path);
        assert!(
            matches!(served, Some(RouteAction::Forward { backends, invalid: 0 }) if backends[0].id == id("shop/api:8443")),
            "{path}: {served:?}"
        );
    }
}
