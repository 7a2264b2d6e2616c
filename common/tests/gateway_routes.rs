//! Gateway API into the route model (`k8slb_common::gateway`), as the specification
//! documents it: class acceptance, listener conditions, route attachment
//! (`parentRefs`, `allowedRoutes`, hostname intersection), matching precedence,
//! weighted backends, redirects, ReferenceGrant, and the refusals that keep a route the
//! proxies cannot serve exactly from being served wrongly. Objects are YAML, decoded as
//! the files source decodes them. The reference router (`HttpRoutes::route`) answers
//! "where does this request go".

mod support;

use k8slb_common::gateway::{intersect, translate, Condition, GatewayOutput};
use k8slb_common::ingress::SecretMeta;
use k8slb_common::objects::Objects;
use k8slb_common::routes::{Hostname, Request, RouteAction};
use std::collections::BTreeMap;
use std::net::IpAddr;
use support::*;

const VIP: &str = "198.18.0.50";

const CLASS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: other }
spec: { controllerName: example.com/other }
"#;

const GATEWAY: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: http, port: 80, protocol: HTTP, allowedRoutes: { namespaces: { from: All } } }
  - { name: apps, port: 8080, protocol: HTTP, hostname: "*.example.com" }
"#;

/// Objects from YAML texts (each may hold several documents).
fn objects(texts: &[&str]) -> Objects {
    let mut o = Objects::default();
    for t in texts {
        o.add_text(t).unwrap();
    }
    assert!(o.problems.is_empty(), "{:?}", o.problems);
    o.services = ["a", "b", "c"]
        .iter()
        .flat_map(|n| ["default", "infra"].map(|ns| backend_svc(ns, n, 80)))
        .collect();
    o.slices = ["a", "b", "c"]
        .iter()
        .enumerate()
        .flat_map(|(i, n)| {
            let ip = format!("10.244.0.{}", i + 1);
            ["default", "infra"]
                .map(|ns| slice(ns, n, "x", None, 8080, &[(ip.as_str(), true, true, false)]))
        })
        .collect();
    o
}

fn run(o: &Objects, secrets: &[SecretMeta]) -> GatewayOutput {
    translate_on(o, secrets, VIP)
}

/// Where a request goes: the backend Services by name (weights dropped), `redirect`, or
/// the fixed status.
fn goes(out: &GatewayOutput, port: u16, host: &str, path: &str) -> String {
    describe(out.routes.route(VIP.parse().unwrap(), port, host, path))
}

fn describe(action: Option<&RouteAction>) -> String {
    match action {
        None => "404".into(),
        Some(RouteAction::Forward { backends, .. }) => backends
            .iter()
            .map(|b| format!("{}", b.id.service.name))
            .collect::<Vec<_>>()
            .join("+"),
        Some(RouteAction::Redirect(r)) => format!(
            "redirect {} {}",
            r.status.code(),
            r.host.as_ref().map_or("", |h| h.as_str())
        ),
        Some(RouteAction::Respond { status }) => status.code().to_string(),
    }
}

fn cond<'a>(conds: &'a [Condition], t: &str) -> &'a Condition {
    conds
        .iter()
        .find(|c| c.type_.as_str() == t)
        .unwrap_or_else(|| panic!("no {t} in {conds:?}"))
}

fn route_cond(out: &GatewayOutput, route: &str, t: &str) -> (bool, &'static str) {
    let parents = &out.http_routes[&route.parse().unwrap()];
    let c = cond(&parents[0].conditions, t);
    (c.status, c.reason.as_str())
}

#[test]
fn only_our_classes_are_accepted_and_their_gateways_programmed() {
    let o = objects(&[CLASS, GATEWAY]);
    let out = run(&o, &[]);
    assert_eq!(out.classes.keys().collect::<Vec<_>>(), ["k8slb"]);
    assert!(cond(&out.classes["k8slb"], "Accepted").status);
    let gw = &out.gateways[&"infra/gw".parse().unwrap()];
    assert!(cond(&gw.conditions, "Accepted").status);
    assert_eq!(
        cond(&gw.conditions, "Programmed").reason.as_str(),
        "Programmed"
    );
    assert_eq!(gw.listeners.len(), 2);
    assert!(gw
        .listeners
        .iter()
        .all(|l| l.supported_kinds == ["HTTPRoute", "GRPCRoute"]));
    // Another controller's Gateway gets nothing from us.
    let mut o2 = objects(&[CLASS, GATEWAY]);
    o2.gateways[0].spec.gateway_class_name = "other".into();
    assert!(run(&o2, &[]).gateways.is_empty());
}

#[test]
fn precedence_exact_then_longest_prefix_then_oldest_route_then_rule_order() {
    let routes = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: old, namespace: default, creationTimestamp: "2026-01-01T00:00:00Z" }
spec:
  parentRefs: [{ name: gw, namespace: infra, sectionName: http }]
  rules:
  - matches: [{ path: { type: PathPrefix, value: /api } }]
    backendRefs: [{ name: a, port: 80 }]
  - matches: [{ path: { type: PathPrefix, value: / } }]
    backendRefs: [{ name: a, port: 80 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: new, namespace: default, creationTimestamp: "2026-06-01T00:00:00Z" }
spec:
  parentRefs: [{ name: gw, namespace: infra, sectionName: http }]
  rules:
  - matches: [{ path: { type: PathPrefix, value: /api } }]
    backendRefs: [{ name: b, port: 80 }]
  - matches: [{ path: { type: Exact, value: /api } }, { path: { type: PathPrefix, value: /api/v2 } }]
    backendRefs: [{ name: c, port: 80 }]
"#;
    let out = run(&objects(&[CLASS, GATEWAY, routes]), &[]);
    // (path, where it goes, why)
    let table = [
        (
            "/api",
            "c",
            "Exact beats any prefix, even of an older route",
        ),
        ("/api/v2/x", "c", "the longest prefix wins"),
        ("/api/v1", "a", "same prefix: the older route wins"),
        (
            "/apix",
            "a",
            "element-wise prefix: /api does not match /apix; / does",
        ),
        ("/", "a", "the catch-all"),
    ];
    for (path, want, why) in table {
        assert_eq!(goes(&out, 80, "any.host", path), want, "{path}: {why}");
    }
    for r in ["default/old", "default/new"] {
        assert_eq!(route_cond(&out, r, "Accepted"), (true, "Accepted"));
        assert_eq!(route_cond(&out, r, "ResolvedRefs"), (true, "ResolvedRefs"));
    }
    let gw = &out.gateways[&"infra/gw".parse().unwrap()];
    assert_eq!(gw.listeners[0].attached_routes, 2);
    assert_eq!(gw.listeners[1].attached_routes, 0, "sectionName: http only");
}

#[test]
fn hostnames_intersect_as_the_spec_says() {
    let h = |s: &str| s.parse::<Hostname>().unwrap();
    let show = |v: Vec<Option<Hostname>>| {
        v.into_iter()
            .map(|h| h.map_or("*any*".to_string(), |h| h.to_string()))
            .collect::<Vec<_>>()
    };
    // (listener, route hostnames, result)
    let table: Vec<(Option<&str>, Vec<&str>, Vec<&str>)> = vec![
        (None, vec![], vec!["*any*"]),
        (None, vec!["foo.example.com"], vec!["foo.example.com"]),
        (Some("foo.example.com"), vec![], vec!["foo.example.com"]),
        (
            Some("*.example.com"),
            vec!["foo.example.com"],
            vec!["foo.example.com"],
        ),
        (
            Some("foo.example.com"),
            vec!["*.example.com"],
            vec!["foo.example.com"],
        ),
        (
            Some("*.example.com"),
            vec!["*.foo.example.com"],
            vec!["*.foo.example.com"],
        ),
        (Some("*.example.com"), vec!["bar.other.com"], vec![]),
        // A wildcard is a suffix match of any depth (the spec; not Ingress's one label).
        (
            Some("*.example.com"),
            vec!["a.b.example.com"],
            vec!["a.b.example.com"],
        ),
        (Some("*.b.example.com"), vec!["a.example.com"], vec![]),
        (Some("*.example.com"), vec!["example.com"], vec![]),
        (
            Some("*.example.com"),
            vec!["a.example.com", "b.example.com", "x.org"],
            vec!["a.example.com", "b.example.com"],
        ),
    ];
    for (l, r, want) in table {
        let rh: Vec<Hostname> = r.iter().map(|s| h(s)).collect();
        assert_eq!(
            show(intersect(l.map(h).as_ref(), &rh)),
            want,
            "{l:?} x {r:?}"
        );
    }
}

#[test]
fn attachment_honours_allowed_routes_section_names_and_hostnames() {
    let routes = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: same-ns-only, namespace: default }
spec:
  parentRefs: [{ name: gw, namespace: infra, sectionName: apps }]
  hostnames: [shop.example.com]
  rules: [{ backendRefs: [{ name: a, port: 80 }] }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: apps, namespace: infra }
spec:
  parentRefs: [{ name: gw, sectionName: apps }]
  hostnames: [shop.example.com, shop.other.org]
  rules: [{ backendRefs: [{ name: b, port: 80 }] }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: elsewhere, namespace: infra }
spec:
  parentRefs: [{ name: gw, sectionName: apps }]
  hostnames: [x.other.org]
  rules: [{ backendRefs: [{ name: b, port: 80 }] }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: no-section, namespace: infra }
spec:
  parentRefs: [{ name: gw, sectionName: nope }]
  rules: [{ backendRefs: [{ name: b, port: 80 }] }]
"#;
    let out = run(&objects(&[CLASS, GATEWAY, routes]), &[]);
    assert_eq!(
        route_cond(&out, "default/same-ns-only", "Accepted"),
        (false, "NotAllowedByListeners"),
        "apps allows routes of its own namespace only (the default)"
    );
    assert_eq!(
        route_cond(&out, "infra/apps", "Accepted"),
        (true, "Accepted")
    );
    assert_eq!(
        route_cond(&out, "infra/elsewhere", "Accepted"),
        (false, "NoMatchingListenerHostname")
    );
    assert_eq!(
        route_cond(&out, "infra/no-section", "Accepted"),
        (false, "NoMatchingParent")
    );
    assert_eq!(goes(&out, 8080, "shop.example.com", "/"), "b");
    assert_eq!(
        goes(&out, 8080, "shop.other.org", "/"),
        "404",
        "outside the listener's hostname"
    );
    assert_eq!(
        goes(&out, 80, "shop.example.com", "/"),
        "404",
        "not attached to http"
    );
}

/// The conformance suite's HTTPRoute303Redirect, HTTPRoute307Redirect and
/// HTTPRoute308Redirect: those codes are served as given; a code the specification does
/// not name is refused, never answered as another.
#[test]
fn redirect_status_codes_303_307_and_308_are_served_and_others_refused() {
    for (code, served) in [
        (301, true),
        (302, true),
        (303, true),
        (307, true),
        (308, true),
        (300, false),
        (304, false),
        (70000, false),
    ] {
        let routes = format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: r, namespace: default }}
spec:
  parentRefs: [{{ name: gw, namespace: infra, port: 80 }}]
  rules:
  - matches: [{{ path: {{ value: /old }} }}]
    filters: [{{ type: RequestRedirect, requestRedirect: {{ hostname: new.example.com, statusCode: {code} }} }}]
"#
        );
        let out = run(&objects(&[CLASS, GATEWAY, &routes]), &[]);
        let (accepted, reason) = route_cond(&out, "default/r", "Accepted");
        if served {
            assert!(accepted, "{code}: {reason}");
            assert_eq!(
                goes(&out, 80, "h", "/old"),
                format!("redirect {code} new.example.com")
            );
        } else {
            assert!(!accepted, "{code}");
            assert_eq!(reason, "UnsupportedValue", "{code}");
            assert_eq!(goes(&out, 80, "h", "/old"), "404", "{code}: not served");
        }
    }
}

#[test]
fn weights_redirects_and_backend_references() {
    let routes = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: r, namespace: default }
spec:
  parentRefs: [{ name: gw, namespace: infra, port: 80 }]
  rules:
  - matches: [{ path: { value: /split } }]
    backendRefs: [{ name: a, port: 80, weight: 90 }, { name: b, port: 80, weight: 10 }, { name: c, port: 80, weight: 0 }]
  - matches: [{ path: { value: /old } }]
    filters: [{ type: RequestRedirect, requestRedirect: { hostname: new.example.com, statusCode: 301 } }]
  - matches: [{ path: { value: /cross } }]
    backendRefs: [{ name: a, namespace: infra, port: 80 }]
  - matches: [{ path: { value: /missing } }]
    backendRefs: [{ name: nope, port: 80 }]
  - matches: [{ path: { value: /partly } }]
    backendRefs: [{ name: a, port: 80, weight: 3 }, { name: nope, port: 80 }, { name: gone, port: 80, weight: 2 }]
"#;
    let out = run(&objects(&[CLASS, GATEWAY, routes]), &[]);
    // The spec: only the invalid references' share of the requests gets 500 (here 3 in
    // 6); the valid backend keeps its share.
    match out.routes.route(VIP.parse().unwrap(), 80, "h", "/partly") {
        Some(RouteAction::Forward { backends, invalid }) => {
            let w: Vec<(String, u16)> = backends
                .iter()
                .map(|b| (b.id.to_string(), b.weight))
                .collect();
            assert_eq!(w, [("default/a:80".to_string(), 3)]);
            assert_eq!(*invalid, 3);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        goes(&out, 80, "h", "/split/x"),
        "a+b",
        "weight 0 gets nothing"
    );
    match out.routes.route(VIP.parse().unwrap(), 80, "h", "/split") {
        Some(RouteAction::Forward { backends, .. }) => {
            let w: Vec<u16> = backends.iter().map(|b| b.weight).collect();
            assert_eq!(w, [90, 10]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(goes(&out, 80, "h", "/old"), "redirect 301 new.example.com");
    assert_eq!(
        goes(&out, 80, "h", "/cross"),
        "500",
        "cross-namespace without a grant"
    );
    assert_eq!(
        goes(&out, 80, "h", "/missing"),
        "500",
        "the spec: an invalid backend is 500"
    );
    let (ok, reason) = route_cond(&out, "default/r", "ResolvedRefs");
    assert!(!ok);
    assert_eq!(reason, "RefNotPermitted", "the first refused reference");
    // The backends carry their endpoints.
    let a = out
        .routes
        .backends
        .iter()
        .find(|(id, _)| id.to_string() == "default/a:80")
        .unwrap()
        .1;
    assert_eq!(a.endpoints.len(), 1);
    assert_eq!(a.endpoints[0].port, 8080);

    // With a ReferenceGrant in infra for HTTPRoutes of default: served.
    let grant = r#"
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: allow-default, namespace: infra }
spec:
  from: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default }]
  to: [{ group: "", kind: Service }]
"#;
    let out = run(&objects(&[CLASS, GATEWAY, routes, grant]), &[]);
    assert_eq!(goes(&out, 80, "h", "/cross"), "a");
    assert_eq!(
        route_cond(&out, "default/r", "ResolvedRefs"),
        (false, "BackendNotFound"),
        "now only the missing Service is refused"
    );
}

#[test]
fn https_listeners_take_certificates_from_secrets_within_reference_grants() {
    let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    tls: { certificateRefs: [{ name: site-tls }] }
  - name: other-ns
    port: 8443
    protocol: HTTPS
    tls: { certificateRefs: [{ name: site-tls, namespace: certs }] }
  - name: missing
    port: 9443
    protocol: HTTPS
    tls: { certificateRefs: [{ name: nope }] }
  - name: tls-terminate
    port: 5432
    protocol: TLS
    tls: { mode: Terminate, certificateRefs: [{ name: site-tls }] }
  - { name: clash, port: 443, protocol: HTTP }
  - name: kinds
    port: 8080
    protocol: HTTP
    allowedRoutes: { kinds: [{ kind: HTTPRoute }, { kind: GRPCRoute }, { kind: TLSRoute }] }
  - name: only-tcp-routes
    port: 8081
    protocol: HTTP
    allowedRoutes: { kinds: [{ kind: TCPRoute }] }
"#;
    let secret = |ns: &str| SecretMeta {
        namespace: ns.into(),
        name: "site-tls".into(),
        type_: "kubernetes.io/tls".into(),
        valid: true,
        version: "0123456789abcdef".into(),
        refusal: String::new(),
        dns_names: vec!["*.example.com".into()],
    };
    let out = run(&objects(&[CLASS, gw]), &[secret("infra"), secret("certs")]);
    let st = &out.gateways[&"infra/gw".parse().unwrap()];
    let l = |name: &str| st.listeners.iter().find(|l| l.name == name).unwrap();
    assert_eq!(
        cond(&l("other-ns").conditions, "ResolvedRefs")
            .reason
            .as_str(),
        "RefNotPermitted"
    );
    assert_eq!(
        cond(&l("missing").conditions, "ResolvedRefs")
            .reason
            .as_str(),
        "InvalidCertificateRef"
    );
    // A TLS listener terminates with its Secret's certificate too (for TLSRoutes).
    assert!(cond(&l("tls-terminate").conditions, "Programmed").status);
    assert_eq!(l("tls-terminate").supported_kinds, ["TLSRoute"]);
    assert!(out
        .routes
        .streams
        .iter()
        .any(|s| s.port == 5432 && s.terminate.is_some()));
    // A route kind an HTTP listener does not serve: InvalidRouteKinds; HTTPRoute and
    // GRPCRoute still served.
    let kinds = l("kinds");
    assert_eq!(
        cond(&kinds.conditions, "ResolvedRefs").reason.as_str(),
        "InvalidRouteKinds"
    );
    assert!(cond(&kinds.conditions, "Programmed").status);
    assert_eq!(kinds.supported_kinds, vec!["HTTPRoute", "GRPCRoute"]);
    assert!(l("only-tcp-routes").supported_kinds.is_empty());
    assert_eq!(
        cond(&l("only-tcp-routes").conditions, "ResolvedRefs")
            .reason
            .as_str(),
        "InvalidRouteKinds"
    );
    // Port 443 has HTTPS and HTTP listeners: both conflicted, neither served.
    assert_eq!(
        cond(&l("clash").conditions, "Conflicted").reason.as_str(),
        "ProtocolConflict"
    );
    assert_eq!(
        cond(&l("https").conditions, "Conflicted").reason.as_str(),
        "ProtocolConflict"
    );
    assert!(
        !out.routes.listeners.iter().any(|l| l.port == 443),
        "{:?}",
        out.routes.listeners
    );

    // Without the clash, the HTTPS listener is served with its Secret's certificate.
    let gw2 = gw.replace("  - { name: clash, port: 443, protocol: HTTP }\n", "");
    let out = run(&objects(&[CLASS, &gw2]), &[secret("infra")]);
    let https = out
        .routes
        .listeners
        .iter()
        .find(|l| l.port == 443)
        .expect("the HTTPS listener");
    let tls = https.tls.as_ref().unwrap();
    assert_eq!(tls.certificates[0].file.stem(), "infra_site-tls");
    assert_eq!(tls.certificates[0].file.version(), "0123456789abcdef");
}

/// HTTPS listeners of one Gateway that share a port, one per hostname, each with its own
/// Secret: a client gets the certificate of the listener its server name matches (SNI),
/// the hostname-less listener's for any other name; one Secret named by two listeners
/// serves both hostnames.
#[test]
fn https_listeners_sharing_a_port_choose_their_certificates_by_sni() {
    let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: a
    port: 443
    protocol: HTTPS
    hostname: a.example.com
    tls: { certificateRefs: [{ name: a-tls }] }
  - name: wild
    port: 443
    protocol: HTTPS
    hostname: "*.example.org"
    tls: { certificateRefs: [{ name: b-tls }] }
  - name: any
    port: 443
    protocol: HTTPS
    tls: { certificateRefs: [{ name: any-tls }] }
  - name: c
    port: 443
    protocol: HTTPS
    hostname: c.example.com
    tls: { certificateRefs: [{ name: a-tls }] }
"#;
    let secret = |name: &str| SecretMeta {
        namespace: "infra".into(),
        name: name.into(),
        type_: "kubernetes.io/tls".into(),
        valid: true,
        version: "0123456789abcdef".into(),
        refusal: String::new(),
        dns_names: match name {
            "a-tls" => vec!["a.example.com".into(), "c.example.com".into()],
            "b-tls" => vec!["*.example.org".into()],
            _ => vec!["any.example.net".into()],
        },
    };
    let out = run(
        &objects(&[CLASS, gw]),
        &[secret("a-tls"), secret("b-tls"), secret("any-tls")],
    );
    let st = &out.gateways[&"infra/gw".parse().unwrap()];
    for l in &st.listeners {
        assert!(
            cond(&l.conditions, "Programmed").status,
            "{}: {:?}",
            l.name,
            l.conditions
        );
    }
    let https: Vec<_> = out
        .routes
        .listeners
        .iter()
        .filter(|l| l.port == 443)
        .collect();
    assert_eq!(https.len(), 1, "one listener per address and port");
    let tls = https[0].tls.as_ref().unwrap();
    let stem = |sn: &str| tls.certificate_for(sn).map(|f| f.stem().to_string());
    assert_eq!(stem("a.example.com").as_deref(), Some("infra_a-tls"));
    assert_eq!(stem("c.example.com").as_deref(), Some("infra_a-tls"));
    assert_eq!(stem("x.example.org").as_deref(), Some("infra_b-tls"));
    assert_eq!(stem("other.example.net").as_deref(), Some("infra_any-tls"));
    assert_eq!(stem("").as_deref(), Some("infra_any-tls"));
    assert_eq!(tls.certificates.len(), 3, "{:?}", tls.certificates);
}

/// A listener's certificate whose subjectAltName DNS names do not cover its hostname
/// (RFC 6125: a wildcard one label, the common name never read) is served all the same,
/// for exactly that hostname (its SNI filter is the listener's hostname, never the
/// certificate's names): `ResolvedRefs` stays True, and the mismatch is a warning on the
/// Gateway (`CertificateHostMismatch`, saying which names the certificate has), which
/// changes no condition. A listener without a hostname takes any certificate, unwarned.
#[test]
fn a_certificate_not_for_its_listeners_hostname_is_served_for_that_hostname_with_a_warning() {
    let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: exact, port: 443, protocol: HTTPS, hostname: a.example.com, tls: { certificateRefs: [{ name: a-tls }] } }
  - { name: under-wildcard, port: 443, protocol: HTTPS, hostname: b.example.com, tls: { certificateRefs: [{ name: wild-tls }] } }
  - { name: wildcard, port: 443, protocol: HTTPS, hostname: "*.example.com", tls: { certificateRefs: [{ name: wild-tls }] } }
  - { name: other-name, port: 443, protocol: HTTPS, hostname: c.example.com, tls: { certificateRefs: [{ name: a-tls }] } }
  - { name: two-labels, port: 443, protocol: HTTPS, hostname: x.y.example.com, tls: { certificateRefs: [{ name: wild-tls }] } }
  - { name: wildcard-by-name, port: 443, protocol: HTTPS, hostname: "*.example.org", tls: { certificateRefs: [{ name: org-tls }] } }
  - { name: second-ref, port: 443, protocol: HTTPS, hostname: d.example.org, tls: { certificateRefs: [{ name: org-tls }, { name: a-tls }] } }
  - { name: no-names, port: 443, protocol: HTTPS, hostname: e.example.com, tls: { certificateRefs: [{ name: cn-only }] } }
  - { name: any, port: 8443, protocol: HTTPS, tls: { certificateRefs: [{ name: cn-only }] } }
"#;
    let secret = |name: &str, names: &[&str]| SecretMeta {
        namespace: "infra".into(),
        name: name.into(),
        type_: "kubernetes.io/tls".into(),
        valid: true,
        version: "0123456789abcdef".into(),
        refusal: String::new(),
        dns_names: names.iter().map(|n| n.to_string()).collect(),
    };
    let out = run(
        &objects(&[CLASS, gw]),
        &[
            secret("a-tls", &["a.example.com"]),
            secret("wild-tls", &["*.example.com"]),
            secret("org-tls", &["d.example.org", "f.example.org"]),
            secret("cn-only", &[]),
        ],
    );
    let st = &out.gateways[&"infra/gw".parse().unwrap()];
    for l in &st.listeners {
        let c = cond(&l.conditions, "ResolvedRefs");
        assert!(c.status, "{}: {c:?}", l.name);
        assert!(cond(&l.conditions, "Programmed").status, "{}", l.name);
    }
    let mut warned: Vec<&str> = Vec::new();
    for (reason, message) in &st.warnings {
        assert_eq!(reason.as_str(), "CertificateHostMismatch", "{message}");
        warned.push(message.split(':').next().unwrap());
    }
    assert_eq!(
        warned,
        [
            "listener other-name",
            "listener two-labels",
            "listener wildcard-by-name",
            "listener second-ref",
            "listener no-names",
        ]
    );
    for (listener, names) in [
        ("other-name", "a.example.com"),
        ("two-labels", "*.example.com"),
        ("wildcard-by-name", "d.example.org, f.example.org"),
        ("second-ref", "a.example.com"),
        ("no-names", "none"),
    ] {
        assert!(
            st.warnings
                .iter()
                .any(|(_, m)| m.starts_with(&format!("listener {listener}: "))
                    && m.contains("is not for the listener's hostname")
                    && m.contains(&format!("DNS names: {names};"))),
            "{listener}: {:?}",
            st.warnings
        );
    }
    // What is served: each listener's certificates for its hostname, and only for it.
    let tls = out
        .routes
        .listeners
        .iter()
        .find(|l| l.port == 443)
        .and_then(|l| l.tls.as_ref())
        .unwrap();
    let mut served: Vec<(String, String)> = tls
        .certificates
        .iter()
        .flat_map(|c| c.hosts.iter().map(|h| (h.to_string(), c.file.stem())))
        .collect();
    served.sort();
    let pairs = [
        ("*.example.com", "infra_wild-tls"),
        ("*.example.org", "infra_org-tls"),
        ("a.example.com", "infra_a-tls"),
        ("b.example.com", "infra_wild-tls"),
        ("c.example.com", "infra_a-tls"),
        ("d.example.org", "infra_a-tls"),
        ("d.example.org", "infra_org-tls"),
        ("e.example.com", "infra_cn-only"),
        ("x.y.example.com", "infra_wild-tls"),
    ];
    assert_eq!(
        served,
        pairs
            .iter()
            .map(|(h, s)| (h.to_string(), s.to_string()))
            .collect::<Vec<_>>()
    );
    // By SNI: a name no listener has gets the port's default (the first listener's
    // certificate), never one chosen by a certificate's own names.
    let stem = |sn: &str| tls.certificate_for(sn).map(|f| f.stem().to_string());
    assert_eq!(stem("c.example.com").as_deref(), Some("infra_a-tls"));
    assert_eq!(stem("e.example.com").as_deref(), Some("infra_cn-only"));
    assert_eq!(stem("f.example.org").as_deref(), Some("infra_org-tls"));
}

/// Method, header and query parameter matches, with the spec's precedence: at one path,
/// a method match beats header matches, more header matches beat fewer, more query
/// matches beat fewer, and a match on the path alone comes last; header names match in
/// any case and the first occurrence counts, values exactly; a request that fits no
/// conditional match falls to the next rule that fits (here the Prefix `/`).
#[test]
fn method_header_and_query_matches_follow_the_specifications_precedence() {
    let routes = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: cond, namespace: infra, creationTimestamp: "2026-01-01T00:00:02Z" }
spec:
  parentRefs: [{ name: gw }]
  hostnames: [cond.example.com]
  rules:
  - matches: [{ path: { value: /api }, headers: [{ name: X-Env, value: canary }] }]
    backendRefs: [{ name: b, port: 80 }]
  - matches: [{ path: { value: /api }, headers: [{ name: x-env, value: canary }, { name: x-user, value: "id 7" }] }]
    backendRefs: [{ name: c, port: 80 }]
  - matches: [{ path: { value: /api }, method: POST }]
    backendRefs: [{ name: a, port: 80 }]
  - matches: [{ path: { value: /api }, queryParams: [{ name: v, value: "2" }] }]
    backendRefs: [{ name: c, port: 80 }]
  - matches:
    - { path: { value: /api }, headers: [{ name: x-env, value: first }, { name: X-ENV, value: ignored }] }
    filters: [{ type: RequestRedirect, requestRedirect: { hostname: first.example.com, statusCode: 302 } }]
  - matches: [{ path: { value: / } }]
    backendRefs: [{ name: a, port: 80 }]
"#;
    let out = run(&objects(&[CLASS, GATEWAY, routes]), &[]);
    assert_eq!(
        route_cond(&out, "infra/cond", "Accepted"),
        (true, "Accepted")
    );
    let go = |method: &str, path: &str, headers: &[(&str, &str)], query: &[(&str, &str)]| {
        let req = Request {
            host: "cond.example.com",
            path,
            method,
            headers,
            query,
        };
        describe(out.routes.route_request(VIP.parse().unwrap(), 80, &req))
    };
    // Two header matches beat one; one header beats none.
    assert_eq!(
        go(
            "GET",
            "/api/x",
            &[("x-env", "canary"), ("x-user", "id 7")],
            &[]
        ),
        "c"
    );
    assert_eq!(go("GET", "/api", &[("X-Env", "canary")], &[]), "b");
    // The method match beats the header matches.
    assert_eq!(
        go(
            "POST",
            "/api",
            &[("x-env", "canary"), ("x-user", "id 7")],
            &[]
        ),
        "a"
    );
    // Values are exact and case-sensitive; the first occurrence of a header counts.
    assert_eq!(go("GET", "/api", &[("x-env", "Canary")], &[]), "a");
    assert_eq!(
        go(
            "GET",
            "/api",
            &[("x-env", "other"), ("x-env", "canary")],
            &[]
        ),
        "a"
    );
    // Query parameters: exact, first occurrence.
    assert_eq!(go("GET", "/api", &[], &[("v", "2")]), "c");
    assert_eq!(go("GET", "/api", &[], &[("v", "1"), ("v", "2")]), "a");
    // Of two entries for one header name, the first counts.
    assert_eq!(
        go("GET", "/api", &[("x-env", "first")], &[]),
        "redirect 302 first.example.com"
    );
    assert_eq!(go("GET", "/api", &[("x-env", "ignored")], &[]), "a");
    // Outside /api, the Prefix / rule.
    assert_eq!(go("GET", "/other", &[("x-env", "canary")], &[]), "a");
}

/// URLRewrite's ReplacePrefixMatch, as the specification's table gives it (matched
/// prefix, request path, replacement → the path sent on), and filters the spec or the
/// proxies do not allow are refused with a reason.
#[test]
fn url_rewrites_follow_the_specifications_table_and_invalid_filters_are_refused() {
    use k8slb_common::routes::PathRewrite;
    let table = [
        ("/foo", "/foo/bar", "/xyz", "/xyz/bar"),
        ("/foo/", "/foo/bar", "/xyz", "/xyz/bar"),
        ("/foo", "/foo/bar", "/xyz/", "/xyz/bar"),
        ("/foo", "/foo", "/xyz", "/xyz"),
        ("/foo/", "/foo", "/xyz", "/xyz"),
        ("/foo", "/foo/", "/xyz", "/xyz/"),
        ("/foo/", "/foo/", "/xyz/", "/xyz/"),
        ("/foo", "/foo", "/", "/"),
        ("/foo/", "/foo", "/", "/"),
        ("/foo", "/foo/", "/", "/"),
        ("/foo", "/foo/bar", "/", "/bar"),
    ];
    for (prefix, path, to, want) in table {
        let prefix: k8slb_common::routes::HttpPath = prefix.parse().unwrap();
        let r = PathRewrite::Prefix {
            from: prefix.trim_trailing_slash(),
            to: to.parse().unwrap(),
        };
        assert_eq!(r.apply(path), want, "{prefix} {path} {to}");
    }

    let routes = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: redirect-and-rewrite, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { value: /r1 } }]
    filters:
    - { type: RequestRedirect, requestRedirect: { hostname: x.example.com } }
    - { type: URLRewrite, urlRewrite: { hostname: y.example.com } }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: prefix-on-exact, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { type: Exact, value: /r2 } }]
    filters: [{ type: URLRewrite, urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: /x } } }]
    backendRefs: [{ name: b, port: 80 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: host-header, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { value: /r3 } }]
    filters: [{ type: RequestHeaderModifier, requestHeaderModifier: { set: [{ name: Host, value: evil.com }] } }]
    backendRefs: [{ name: b, port: 80 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: named-twice, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { value: /r4 } }]
    filters: [{ type: ResponseHeaderModifier, responseHeaderModifier: { set: [{ name: x-a, value: "1" }], remove: [X-A] } }]
    backendRefs: [{ name: b, port: 80 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: hostile-value, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { value: /r5 } }]
    filters: [{ type: RequestHeaderModifier, requestHeaderModifier: { add: [{ name: x-a, value: "%[env(SECRET)]" }] } }]
    backendRefs: [{ name: b, port: 80 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: fine, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { value: /ok } }]
    filters:
    - { type: RequestHeaderModifier, requestHeaderModifier: { set: [{ name: X-Env, value: prod }], remove: [x-debug] } }
    - { type: URLRewrite, urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: /v2 } } }
    backendRefs: [{ name: b, port: 80 }]
"#;
    let out = run(&objects(&[CLASS, GATEWAY, routes]), &[]);
    for r in [
        "infra/redirect-and-rewrite",
        "infra/prefix-on-exact",
        "infra/host-header",
        "infra/named-twice",
        "infra/hostile-value",
    ] {
        assert_eq!(
            route_cond(&out, r, "Accepted"),
            (false, "UnsupportedValue"),
            "{r}"
        );
    }
    assert_eq!(
        route_cond(&out, "infra/fine", "Accepted"),
        (true, "Accepted")
    );
    let json = serde_json::to_string(&out.routes).unwrap();
    assert!(!json.contains("SECRET") && !json.contains("evil"), "{json}");
    let l = &out.routes.listeners[0];
    let rule = l
        .rule_for(&Request::get("any.example.com", "/ok/x"))
        .unwrap();
    assert_eq!(rule.filters.request_headers.set[0].name.as_str(), "x-env");
    assert_eq!(
        rule.filters.rewrite_path.as_ref().unwrap().apply("/ok/x"),
        "/v2/x"
    );
}

/// What the proxies cannot serve exactly is refused, never served without it: a
/// regular-expression header match, a backendRef filter k8slb does not serve
/// (ResponseHeaderModifier), and hostile hostnames, paths, header values, query names
/// and methods.
#[test]
fn unsupported_and_hostile_routes_are_refused_with_a_reason() {
    let routes = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: headers, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { value: /h }, headers: [{ type: RegularExpression, name: x-canary, value: "1.*" }] }]
    backendRefs: [{ name: b, port: 80 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: evil-header, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { value: /eh }, headers: [{ name: x-a, value: "1\"; deny" }] }]
    backendRefs: [{ name: b, port: 80 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: evil-query, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { value: /eq }, queryParams: [{ name: "a b", value: "1" }] }]
    backendRefs: [{ name: b, port: 80 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: evil-method, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { value: /em }, method: "GET\nX" }]
    backendRefs: [{ name: b, port: 80 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: backend-filter, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { value: /bf } }]
    backendRefs:
    - name: b
      port: 80
      filters: [{ type: ResponseHeaderModifier, responseHeaderModifier: { set: [{ name: x-bf, value: "1" }] } }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: evil-host, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  hostnames: ["evil.com;\n  return 200 owned"]
  rules: [{ backendRefs: [{ name: b, port: 80 }] }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: evil-path, namespace: infra }
spec:
  parentRefs: [{ name: gw }]
  rules:
  - matches: [{ path: { value: "/a b{lua}" } }]
    backendRefs: [{ name: b, port: 80 }]
"#;
    let out = run(&objects(&[CLASS, GATEWAY, routes]), &[]);
    for r in [
        "infra/headers",
        "infra/evil-header",
        "infra/evil-query",
        "infra/evil-method",
        "infra/backend-filter",
        "infra/evil-host",
        "infra/evil-path",
    ] {
        assert_eq!(
            route_cond(&out, r, "Accepted"),
            (false, "UnsupportedValue"),
            "{r}"
        );
    }
    let json = serde_json::to_string(&out.routes).unwrap();
    for bad in [
        "evil", "owned", "lua", "/h", "/bf", "/eh", "/eq", "/em", "a b", "deny",
    ] {
        assert!(!json.contains(bad), "{bad} reached the model: {json}");
    }
}

/// The files source reads the Gateway API kinds from their group only; one that does not
/// decode is a problem, never fatal, and names from another group are not ours.
#[test]
fn gateway_kinds_decode_from_their_group_and_a_bad_one_is_a_problem() {
    let mut o = Objects::default();
    o.add_text(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: broken, namespace: infra }
spec: { gatewayClassName: 42, listeners: "nope" }
---
apiVersion: example.com/v1
kind: Gateway
metadata: { name: someone-elses }
spec: {}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRouteList
items:
- metadata: { name: r, namespace: default }
  spec: { parentRefs: [{ name: gw }] }
"#,
    )
    .unwrap();
    assert!(o.gateways.is_empty());
    assert_eq!(o.http_routes.len(), 1);
    assert_eq!(o.problems.len(), 1, "{:?}", o.problems);
    assert_eq!(o.problems[0].reason, "Undecodable");
    assert!(
        o.problems[0].message.contains("Gateway"),
        "{:?}",
        o.problems[0]
    );
}

#[test]
fn a_namespace_selector_allows_routes_from_the_namespaces_whose_labels_it_selects() {
    let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: shared
    port: 80
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: Selector
        selector:
          matchLabels: { team: web }
          matchExpressions: [{ key: env, operator: NotIn, values: [prod] }]
  - name: broken
    port: 81
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: Selector
        selector: { matchExpressions: [{ key: env, operator: Exists, values: [x] }] }
"#;
    let ns = |name: &str, labels: &str| {
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{ name: {name}, labels: {labels} }}\n")
    };
    let route = |ns: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: r, namespace: {ns} }}
spec:
  parentRefs: [{{ name: gw, namespace: infra }}]
  hostnames: [{ns}.example.com]
  rules: [{{ backendRefs: [{{ name: a, port: 80 }}] }}]
"#
        )
    };
    let mut o = objects(&[
        CLASS,
        gw,
        &ns("default", "{ team: web, env: dev }"),
        &ns("infra", "{ team: web, env: prod }"),
        &ns("other", "{ team: db }"),
        &route("default"),
        &route("infra"),
        &route("other"),
    ]);
    // A route in a namespace the server has not shown us: no labels, not selected.
    o.add_text(&route("unknown")).unwrap();
    let out = run(&o, &[]);
    let accepted = |ns: &str| {
        let c = cond(
            &out.http_routes[&format!("{ns}/r").parse().unwrap()][0].conditions,
            "Accepted",
        );
        (c.status, c.reason.as_str())
    };
    assert_eq!(accepted("default"), (true, "Accepted"));
    assert_eq!(
        accepted("infra"),
        (false, "NotAllowedByListeners"),
        "env=prod"
    );
    assert_eq!(accepted("other"), (false, "NotAllowedByListeners"));
    assert_eq!(accepted("unknown"), (false, "NotAllowedByListeners"));
    assert_eq!(goes(&out, 80, "default.example.com", "/"), "a");
    assert_eq!(goes(&out, 80, "infra.example.com", "/"), "404");
    // A selector that cannot be evaluated selects nothing, and the listener says why.
    let st = &out.gateways[&"infra/gw".parse().unwrap()];
    let broken = st.listeners.iter().find(|l| l.name == "broken").unwrap();
    let c = cond(&broken.conditions, "ResolvedRefs");
    assert_eq!(
        (c.status, c.reason.as_str()),
        (false, "InvalidRouteNamespaces")
    );
    assert_eq!(broken.attached_routes, 0);
    let shared = st.listeners.iter().find(|l| l.name == "shared").unwrap();
    assert_eq!(shared.attached_routes, 1);
}

#[test]
fn a_request_goes_to_the_routes_of_the_most_specific_listener_it_matches() {
    // The Gateway API's listener isolation: listeners on one port with hostnames any,
    // *.example.com, *.foo.example.com and abc.foo.example.com, one route on each (a
    // path of its own), the one on the any-host listener naming all those hosts.
    let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: empty, port: 80, protocol: HTTP }
  - { name: wild, port: 80, protocol: HTTP, hostname: "*.example.com" }
  - { name: wild-foo, port: 80, protocol: HTTP, hostname: "*.foo.example.com" }
  - { name: abc-foo, port: 80, protocol: HTTP, hostname: abc.foo.example.com }
  - { name: lonely, port: 80, protocol: HTTP, hostname: "*.bar.example.com" }
"#;
    let route = |name: &str, section: &str, backend: &str, hostnames: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: infra }}
spec:
  parentRefs: [{{ name: gw, sectionName: {section} }}]
  hostnames: {hostnames}
  rules: [{{ matches: [{{ path: {{ value: /{name} }} }}], backendRefs: [{{ name: {backend}, port: 80 }}] }}]
"#
        )
    };
    let all = "[bar.com, \"*.example.com\", \"*.foo.example.com\", abc.foo.example.com]";
    let texts = [
        route("empty", "empty", "a", all),
        route("wild", "wild", "b", "[]"),
        route("wild-foo", "wild-foo", "c", "[]"),
        route("abc-foo", "abc-foo", "a", "[]"),
    ];
    let mut docs: Vec<&str> = vec![CLASS, gw];
    docs.extend(texts.iter().map(String::as_str));
    let out = run(&objects(&docs), &[]);
    let cases = [
        ("bar.com", "/empty", "a"),
        ("bar.com", "/wild", "404"),
        ("x.example.com", "/wild", "b"),
        ("x.example.com", "/empty", "404"),
        ("x.foo.example.com", "/wild-foo", "c"),
        ("x.foo.example.com", "/wild", "404"),
        ("x.foo.example.com", "/empty", "404"),
        ("abc.foo.example.com", "/abc-foo", "a"),
        ("abc.foo.example.com", "/empty", "404"),
        ("abc.foo.example.com", "/wild-foo", "404"),
        // A listener without a route still owns its hosts.
        ("x.bar.example.com", "/wild", "404"),
        ("x.bar.example.com", "/empty", "404"),
    ];
    for (host, path, want) in cases {
        assert_eq!(goes(&out, 80, host, path), want, "{host}{path}");
    }
    // Every route is still attached (isolation is about requests, not attachment).
    for name in ["empty", "wild", "wild-foo", "abc-foo"] {
        let c = cond(
            &out.http_routes[&format!("infra/{name}").parse().unwrap()][0].conditions,
            "Accepted",
        );
        assert!(c.status, "{name}: {c:?}");
    }
}

#[test]
fn a_route_that_is_not_accepted_is_not_counted_in_attached_routes() {
    let ok = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ok, namespace: default }
spec:
  parentRefs: [{ name: gw, namespace: infra, sectionName: http }]
  rules: [{ backendRefs: [{ name: a, port: 80 }] }]
"#;
    // A filter k8slb does not serve: Accepted False (UnsupportedValue), not attached.
    let mirror = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: mirror, namespace: default }
spec:
  parentRefs: [{ name: gw, namespace: infra, sectionName: http }]
  rules:
  - filters: [{ type: ExtensionRef, extensionRef: { group: example.com, kind: Auth, name: a } }]
    backendRefs: [{ name: a, port: 80 }]
"#;
    // Rule fields k8slb does not serve: refused the same way, never ignored.
    let timeouts = mirror.replace("name: mirror", "name: timeouts").replace(
        "  - filters: [{ type: ExtensionRef, extensionRef: { group: example.com, kind: Auth, name: a } }]\n",
        "  - sessionPersistence: { type: Cookie }\n",
    );
    let out = run(&objects(&[CLASS, GATEWAY, ok, mirror, &timeouts]), &[]);
    assert_eq!(
        route_cond(&out, "default/mirror", "Accepted"),
        (false, "UnsupportedValue")
    );
    assert_eq!(
        route_cond(&out, "default/timeouts", "Accepted"),
        (false, "UnsupportedValue")
    );
    let gw = &out.gateways[&"infra/gw".parse().unwrap()];
    let http = gw.listeners.iter().find(|l| l.name == "http").unwrap();
    assert_eq!(http.attached_routes, 1);
}

#[test]
fn tls_settings_k8slb_does_not_serve_refuse_the_listener_instead_of_being_ignored() {
    let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - name: plain
    port: 443
    protocol: HTTPS
    tls: { certificateRefs: [{ name: site-tls }] }
  - name: mtls
    port: 8443
    protocol: HTTPS
    tls:
      certificateRefs: [{ name: site-tls }]
      frontendValidation: { caCertificateRefs: [{ kind: ConfigMap, name: ca }] }
  - name: options
    port: 9443
    protocol: HTTPS
    tls: { certificateRefs: [{ name: site-tls }], options: { example.com/cipher: x } }
"#;
    let secret = SecretMeta {
        namespace: "infra".into(),
        name: "site-tls".into(),
        type_: "kubernetes.io/tls".into(),
        valid: true,
        version: "0123456789abcdef".into(),
        refusal: String::new(),
        dns_names: vec!["*.example.com".into()],
    };
    let check = |out: &GatewayOutput, served: &[&str], refused: &[&str]| {
        let st = &out.gateways[&"infra/gw".parse().unwrap()];
        for l in &st.listeners {
            let c = cond(&l.conditions, "Accepted");
            if served.contains(&l.name.as_str()) {
                assert!(c.status, "{}: {c:?}", l.name);
            } else {
                assert!(refused.contains(&l.name.as_str()));
                assert_eq!(
                    (c.status, c.reason.as_str()),
                    (false, "UnsupportedValue"),
                    "{}",
                    l.name
                );
            }
        }
        let ports: Vec<u16> = out.routes.listeners.iter().map(|l| l.port).collect();
        ports
    };
    let out = run(&objects(&[CLASS, gw]), std::slice::from_ref(&secret));
    assert_eq!(check(&out, &["plain"], &["mtls", "options"]), [443]);
    // Client certificate validation for the whole Gateway (spec.tls.frontend) is
    // served (common/tests/gateway_backend_tls.rs); with its CA ConfigMap missing, the
    // listener it would apply to is refused (NoValidCACertificate), never served
    // without it.
    let whole = gw.replace(
        "  gatewayClassName: k8slb\n",
        "  gatewayClassName: k8slb\n  tls: { frontend: { default: { validation: { caCertificateRefs: [{ kind: ConfigMap, name: ca }] } } } }\n",
    );
    let out = run(&objects(&[CLASS, &whole]), &[secret]);
    let st = &out.gateways[&"infra/gw".parse().unwrap()];
    let plain = cond(&st.listeners[0].conditions, "Accepted");
    assert_eq!(
        (plain.status, plain.reason.as_str()),
        (false, "NoValidCACertificate")
    );
    assert!(out.routes.listeners.is_empty());
}

/// An HTTPRoute with `n` rules on host `host`, each matching header `x-h` = `v<i>`
/// (created at `ts`).
fn conditional_route(name: &str, host: &str, n: usize, ts: &str) -> String {
    let rules: String = (0..n)
        .map(|i| {
            format!(
                "  - matches: [{{ path: {{ value: /r{i} }}, headers: [{{ name: x-h, value: v{i} }}] }}]\n    backendRefs: [{{ name: b, port: 80 }}]\n"
            )
        })
        .collect();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{ name: {name}, namespace: infra, creationTimestamp: \"{ts}\" }}\nspec:\n  parentRefs: [{{ name: gw }}]\n  hostnames: [\"{host}\"]\n  rules:\n{rules}"
    )
}

/// `limits.conditionalRulesPerHost` (issue 20): rules that match on more than the path
/// are tried in order for every request of their host, so one host takes at most that
/// many; the route that would go beyond is not Accepted (UnsupportedValue) and none of
/// its rules is served, while the older routes keep theirs and another host is not
/// counted with them.
#[test]
fn conditional_rules_beyond_the_per_host_cap_refuse_the_newer_route_only() {
    let old = conditional_route("old", "a.example.com", 200, "2024-01-01T00:00:00Z");
    let new = conditional_route("new", "a.example.com", 57, "2024-02-01T00:00:00Z");
    let fits = conditional_route("fits", "a.example.com", 56, "2024-03-01T00:00:00Z");
    let other = conditional_route("other", "b.example.com", 256, "2024-04-01T00:00:00Z");
    let o = objects(&[CLASS, GATEWAY, &old, &new, &fits, &other]);
    let out = run(&o, &[]);
    assert_eq!(
        route_cond(&out, "infra/old", "Accepted"),
        (true, "Accepted")
    );
    assert_eq!(
        route_cond(&out, "infra/new", "Accepted"),
        (false, "UnsupportedValue")
    );
    let why = &cond(
        &out.http_routes[&"infra/new".parse().unwrap()][0].conditions,
        "Accepted",
    )
    .message;
    assert!(why.contains("conditionalRulesPerHost"), "{why}");
    assert_eq!(
        route_cond(&out, "infra/fits", "Accepted"),
        (true, "Accepted")
    );
    assert_eq!(
        route_cond(&out, "infra/other", "Accepted"),
        (true, "Accepted")
    );
    let rules = |host: &str| {
        out.routes.listeners[0]
            .virtual_hosts
            .iter()
            .find(|v| v.host.as_ref().is_some_and(|h| h.as_str() == host))
            .map_or(0, |v| v.rules.len())
    };
    assert_eq!(rules("a.example.com"), 256);
    assert_eq!(rules("b.example.com"), 256);

    // The admin may raise it.
    let mut input_objects = o;
    input_objects
        .http_routes
        .retain(|r| r.metadata.name.as_deref() != Some("fits"));
    let addresses: BTreeMap<_, _> = [(
        "infra/gw".parse().unwrap(),
        vec![VIP.parse::<IpAddr>().unwrap()],
    )]
    .into_iter()
    .collect();
    let none = BTreeMap::new();
    let mut input = input_objects.gateway_input(&[], &addresses, &none);
    input.conditional_rules_per_host = 257;
    let out = translate(&input);
    assert_eq!(
        route_cond(&out, "infra/new", "Accepted"),
        (true, "Accepted")
    );
}

/// nginx takes at most 4,095 bytes in one token: a header match value is escaped in a
/// regex (twice its length for punctuation), a header modifier value is quoted (and an
/// added request header follows the request's own value). A route whose value would
/// not fit is not Accepted (UnsupportedValue) and nothing of it reaches the model; the
/// longest values that fit are served.
#[test]
fn values_nginx_could_not_load_in_one_token_refuse_their_route() {
    let route = |name: &str, rule: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{ name: {name}, namespace: infra }}\nspec:\n  parentRefs: [{{ name: gw }}]\n  hostnames: [\"{name}.example.com\"]\n  rules:\n  - {rule}\n    backendRefs: [{{ name: b, port: 80 }}]\n"
        )
    };
    let dashes = |n: usize| "-".repeat(n);
    let xs = |n: usize| "x".repeat(n);
    let set = |v: String| {
        format!("filters: [{{ type: RequestHeaderModifier, requestHeaderModifier: {{ set: [{{ name: x-s, value: \"{v}\" }}] }} }}]")
    };
    let add = |v: String| {
        format!("filters: [{{ type: RequestHeaderModifier, requestHeaderModifier: {{ add: [{{ name: x-a, value: \"{v}\" }}] }} }}]")
    };
    let resp = |v: String| {
        format!("filters: [{{ type: ResponseHeaderModifier, responseHeaderModifier: {{ set: [{{ name: x-r, value: \"{v}\" }}] }} }}]")
    };
    let header = |v: String| format!("matches: [{{ headers: [{{ name: x-m, value: \"{v}\" }}] }}]");
    let query =
        |v: String| format!("matches: [{{ queryParams: [{{ name: q, value: \"{v}\" }}] }}]");
    let cases = [
        ("set-long", set(xs(4094)), false),
        ("set-fits", set(xs(4093)), true),
        ("add-long", add(xs(4095 - 2 - 7 - 3 + 1)), false),
        ("add-fits", add(xs(4095 - 2 - 7 - 3)), true),
        ("resp-long", resp(xs(4096)), false),
        ("header-long", header(dashes(2100)), false),
        ("header-fits", header(dashes(2044)), true),
        ("header-plain", header(xs(4089)), true),
        ("query-long", query(dashes(2045)), false),
    ];
    let texts: Vec<String> = cases.iter().map(|(n, r, _)| route(n, r)).collect();
    let mut all: Vec<&str> = vec![CLASS, GATEWAY];
    all.extend(texts.iter().map(String::as_str));
    let out = run(&objects(&all), &[]);
    for (name, _, accepted) in &cases {
        let (ok, reason) = route_cond(&out, &format!("infra/{name}"), "Accepted");
        assert_eq!(ok, *accepted, "{name}: {reason}");
        let served = out.routes.listeners[0].virtual_hosts.iter().any(|v| {
            v.host
                .as_ref()
                .is_some_and(|h| h.as_str() == format!("{name}.example.com"))
                && !v.rules.is_empty()
        });
        assert_eq!(served, *accepted, "{name}");
        if !accepted {
            assert_eq!(reason, "UnsupportedValue", "{name}");
        }
    }
}

/// A route cannot set, add or remove the client certificate headers k8slb tells a
/// backend on an AllowInsecureFallback listener (any case): refused (UnsupportedValue),
/// not served, so a backend, maybe another namespace's by a ReferenceGrant, can trust
/// them; another header is served.
#[test]
fn a_route_cannot_modify_the_client_certificate_headers() {
    let route = |name: &str, edit: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{ name: {name}, namespace: infra }}\nspec:\n  parentRefs: [{{ name: gw }}]\n  hostnames: [\"{name}.example.com\"]\n  rules:\n  - filters: [{{ type: RequestHeaderModifier, requestHeaderModifier: {edit} }}]\n    backendRefs: [{{ name: b, port: 80 }}]\n"
        )
    };
    let cases = [
        (
            "set-verify",
            "{ set: [{ name: K8slb-Client-Cert-Verify, value: SUCCESS }] }",
            false,
        ),
        (
            "add-cert",
            "{ add: [{ name: k8slb-client-cert, value: x }] }",
            false,
        ),
        (
            "remove-verify",
            "{ remove: [k8slb-client-cert-verify] }",
            false,
        ),
        ("other", "{ set: [{ name: x-client, value: y }] }", true),
    ];
    let texts: Vec<String> = cases.iter().map(|(n, e, _)| route(n, e)).collect();
    let mut all: Vec<&str> = vec![CLASS, GATEWAY];
    all.extend(texts.iter().map(String::as_str));
    let out = run(&objects(&all), &[]);
    for (name, _, accepted) in &cases {
        let (ok, reason) = route_cond(&out, &format!("infra/{name}"), "Accepted");
        assert_eq!(ok, *accepted, "{name}: {reason}");
        if !accepted {
            assert_eq!(reason, "UnsupportedValue", "{name}");
        }
    }
}

#[test]
fn rule_timeouts_are_the_smaller_of_request_and_backend_request_and_invalid_ones_refuse_the_route()
{
    use k8slb_common::routes::TimeoutMs;
    let route = |name: &str, timeouts: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: default }}
spec:
  parentRefs: [{{ name: gw, namespace: infra, sectionName: http }}]
  hostnames: [{name}.example.com]
  rules: [{{ backendRefs: [{{ name: a, port: 80 }}], timeouts: {timeouts} }}]
"#
        )
    };
    let table = [
        ("request", "{ request: 500ms }", Ok(Some(500))),
        ("backend", "{ backendRequest: 1m2s }", Ok(Some(62_000))),
        (
            "both",
            "{ request: 2s, backendRequest: 1500ms }",
            Ok(Some(1_500)),
        ),
        ("zero", "{ request: 0s }", Ok(None)),
        // A zero request timeout disables only itself.
        (
            "zero-request",
            "{ request: 0s, backendRequest: 1s }",
            Ok(Some(1_000)),
        ),
        ("hours", "{ request: 1h }", Ok(Some(3_600_000))),
        // The API's own validation: a try cannot outlast the request.
        (
            "longer",
            "{ request: 1s, backendRequest: 2s }",
            Err("UnsupportedValue"),
        ),
        ("bad-unit", "{ request: 5d }", Err("UnsupportedValue")),
        (
            "six-digits",
            "{ request: 100000s }",
            Err("UnsupportedValue"),
        ),
        ("fraction", "{ request: 1.5s }", Err("UnsupportedValue")),
    ];
    // A redirect rule may carry timeouts (nothing to wait for): still served.
    let redirect = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: redirect, namespace: default }
spec:
  parentRefs: [{ name: gw, namespace: infra, sectionName: http }]
  hostnames: [redirect.example.com]
  rules:
  - filters: [{ type: RequestRedirect, requestRedirect: { hostname: x.example.com } }]
    timeouts: { request: 1s }
"#;
    let texts: Vec<String> = table.iter().map(|(n, t, _)| route(n, t)).collect();
    let mut all = vec![CLASS, GATEWAY, redirect];
    all.extend(texts.iter().map(String::as_str));
    let out = run(&objects(&all), &[]);
    assert_eq!(
        route_cond(&out, "default/redirect", "Accepted"),
        (true, "Accepted")
    );
    let l = out
        .routes
        .listeners
        .iter()
        .find(|l| l.port == 80)
        .expect("the port 80 listener");
    for (name, _, want) in table {
        let key = format!("default/{name}");
        match want {
            Ok(ms) => {
                assert_eq!(
                    route_cond(&out, &key, "Accepted"),
                    (true, "Accepted"),
                    "{name}"
                );
                let host = format!("{name}.example.com");
                let v = l
                    .virtual_hosts
                    .iter()
                    .find(|v| v.host.as_ref().is_some_and(|h| h.as_str() == host))
                    .unwrap_or_else(|| panic!("{name}: no virtual host"));
                assert_eq!(
                    v.rules[0].filters.timeout.map(TimeoutMs::millis),
                    ms,
                    "{name}"
                );
            }
            Err(reason) => {
                assert_eq!(
                    route_cond(&out, &key, "Accepted"),
                    (false, reason),
                    "{name}"
                )
            }
        }
    }
}

#[test]
fn backend_ref_request_header_modifiers_are_served_per_backend_and_the_rest_refused() {
    let route = |name: &str, rule: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: default }}
spec:
  parentRefs: [{{ name: gw, namespace: infra, sectionName: http }}]
  hostnames: [{name}.example.com]
  rules: [{rule}]
"#
        )
    };
    let set = |v: &str| {
        format!("{{ type: RequestHeaderModifier, requestHeaderModifier: {{ set: [{{ name: Backend, value: {v} }}] }} }}")
    };
    let texts = [
        route(
            "split",
            &format!(
                "{{ backendRefs: [{{ name: a, port: 80, filters: [{}] }}, {{ name: b, port: 80, filters: [{}] }}] }}",
                set("a"),
                set("b")
            ),
        ),
        // One backend: its edits come after the rule's, on other names.
        route(
            "one",
            &format!(
                "{{ filters: [{{ type: RequestHeaderModifier, requestHeaderModifier: {{ add: [{{ name: X-Rule, value: r }}] }} }}], backendRefs: [{{ name: a, port: 80, filters: [{}] }}] }}",
                set("a")
            ),
        ),
        // Refused, never served without them:
        route(
            "other-type",
            "{ backendRefs: [{ name: a, port: 80, filters: [{ type: ResponseHeaderModifier, responseHeaderModifier: { set: [{ name: X, value: y }] } }] }] }",
        ),
        route(
            "same-name",
            &format!(
                "{{ filters: [{}], backendRefs: [{{ name: a, port: 80, filters: [{}] }}] }}",
                set("rule"),
                set("a")
            ),
        ),
        route(
            "twice",
            &format!(
                "{{ backendRefs: [{{ name: a, port: 80, weight: 1, filters: [{}] }}, {{ name: a, port: 80, weight: 2 }}] }}",
                set("a")
            ),
        ),
        route(
            "host",
            "{ backendRefs: [{ name: a, port: 80, filters: [{ type: RequestHeaderModifier, requestHeaderModifier: { set: [{ name: Host, value: x }] } }] }] }",
        ),
    ];
    let mut all = vec![CLASS, GATEWAY];
    all.extend(texts.iter().map(String::as_str));
    let out = run(&objects(&all), &[]);
    for refused in ["other-type", "same-name", "twice", "host"] {
        assert_eq!(
            route_cond(&out, &format!("default/{refused}"), "Accepted"),
            (false, "UnsupportedValue"),
            "{refused}"
        );
    }
    let l = out.routes.listeners.iter().find(|l| l.port == 80).unwrap();
    let rule = |host: &str| {
        let v = l
            .virtual_hosts
            .iter()
            .find(|v| v.host.as_ref().is_some_and(|h| h.as_str() == host))
            .unwrap_or_else(|| panic!("{host}: not served"));
        v.rules[0].clone()
    };
    let split = rule("split.example.com");
    let RouteAction::Forward { backends, .. } = &split.action else {
        panic!("split: {:?}", split.action)
    };
    let edits: Vec<(String, String)> = backends
        .iter()
        .map(|b| {
            let h = &b.request_headers.set[0];
            (
                b.id.service.name.to_string(),
                format!("{}={}", h.name, h.value),
            )
        })
        .collect();
    assert_eq!(
        edits,
        [
            ("a".into(), "backend=a".into()),
            ("b".into(), "backend=b".into())
        ]
    );
    // A split keeps them per backend; the rule's own filters stay empty.
    assert!(split.forward_filters().request_headers.is_empty());
    let one = rule("one.example.com");
    let f = one.forward_filters();
    let names: Vec<&str> = f.request_headers.names().map(|n| n.as_str()).collect();
    assert_eq!(names, ["backend", "x-rule"]);
    assert_eq!(
        one.filters.request_headers.names().count(),
        1,
        "the model keeps them apart"
    );
}

#[test]
fn request_mirrors_and_their_shares_are_served_where_the_proxy_mirrors_and_refused_where_it_does_not(
) {
    let route = |name: &str, filters: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: default }}
spec:
  parentRefs: [{{ name: gw, namespace: infra, sectionName: http }}]
  hostnames: [{name}.example.com]
  rules: [{{ filters: [{filters}], backendRefs: [{{ name: a, port: 80 }}] }}]
"#
        )
    };
    let mirror = |to: &str, share: &str| {
        format!("{{ type: RequestMirror, requestMirror: {{ backendRef: {{ name: {to}, port: 80 }}{share} }} }}")
    };
    let texts = [
        route("one", &mirror("b", "")),
        route("two", &format!("{}, {}", mirror("b", ""), mirror("c", ""))),
        route("all", &mirror("b", ", percent: 100")),
        route(
            "whole",
            &mirror("b", ", fraction: { numerator: 3, denominator: 3 }"),
        ),
        // A share: each request drawn at random, to the hundredth of a percent.
        route("half", &mirror("b", ", percent: 50")),
        route(
            "fraction",
            &mirror("b", ", fraction: { numerator: 1, denominator: 3 }"),
        ),
        // None: no copy at all (the route is served).
        route("none", &mirror("b", ", percent: 0")),
        // Below the finest share nginx draws: refused, never rounded to none or more.
        route(
            "tiny",
            &mirror("b", ", fraction: { numerator: 1, denominator: 1000000 }"),
        ),
    ];
    let mut all = vec![CLASS, GATEWAY];
    all.extend(texts.iter().map(String::as_str));
    let o = objects(&all);
    let run_with = |serves_mirror: bool| {
        translate_tuned(&o, &[], VIP, |i| {
            i.serves_mirror = serves_mirror;
        })
    };
    let nginx = run_with(true);
    assert_eq!(
        route_cond(&nginx, "default/tiny", "Accepted"),
        (false, "UnsupportedValue")
    );
    let l = nginx
        .routes
        .listeners
        .iter()
        .find(|l| l.port == 80)
        .unwrap();
    let mirrors = |host: &str| -> Vec<String> {
        let v = l
            .virtual_hosts
            .iter()
            .find(|v| v.host.as_ref().is_some_and(|h| h.as_str() == host))
            .unwrap_or_else(|| panic!("{host}: not served"));
        v.rules[0]
            .filters
            .mirrors
            .iter()
            .map(|m| m.service.name.to_string())
            .collect()
    };
    assert_eq!(mirrors("one.example.com"), ["b"]);
    assert_eq!(mirrors("two.example.com"), ["b", "c"]);
    assert_eq!(mirrors("all.example.com"), ["b"]);
    assert_eq!(mirrors("whole.example.com"), ["b"]);
    let shares = |host: &str| -> (Vec<String>, Vec<(String, u16)>) {
        let v = l
            .virtual_hosts
            .iter()
            .find(|v| v.host.as_ref().is_some_and(|h| h.as_str() == host))
            .unwrap_or_else(|| panic!("{host}: not served"));
        let f = &v.rules[0].filters;
        (
            f.mirrors
                .iter()
                .map(|m| m.service.name.to_string())
                .collect(),
            f.partial_mirrors
                .iter()
                .map(|m| (m.backend.service.name.to_string(), m.share.hundredths()))
                .collect(),
        )
    };
    // A share is apart from the full mirrors (an older actor copies none of it).
    assert_eq!(
        shares("half.example.com"),
        (vec![], vec![("b".into(), 5000)])
    );
    assert_eq!(
        shares("fraction.example.com"),
        (vec![], vec![("b".into(), 3333)])
    );
    assert_eq!(shares("none.example.com"), (vec![], vec![]));
    // The mirrored backends stay in the model (the proxies need their endpoints).
    for s in ["b", "c"] {
        assert!(
            nginx
                .routes
                .backends
                .keys()
                .any(|id| id.service.name.as_str() == s),
            "{s}"
        );
    }
    // A provider that does not mirror (none does today: nginx's `mirror`, HAProxy's
    // through the actor's Lua action): every route with one is refused.
    let refused = run_with(false);
    for r in ["one", "two", "all", "whole", "half", "fraction"] {
        assert_eq!(
            route_cond(&refused, &format!("default/{r}"), "Accepted"),
            (false, "UnsupportedValue"),
            "{r}"
        );
    }
}

/// Each mirror copies every request its rule takes, on the proxy every tenant shares
/// (the `tenant_cost` bench: HAProxy spends about 4x a request's CPU per copy, 55x with
/// 16 mirrors): a rule may have `limits.mirrorsPerRule` of them (4 by default, 0 forbids
/// them). A route with a rule beyond it is not accepted, and says why; every other route
/// is served.
#[test]
fn a_rule_with_more_mirrors_than_the_limit_refuses_its_route_only() {
    let route = |name: &str, mirrors: usize| {
        let filters: Vec<String> = (0..mirrors)
            .map(|i| {
                format!("{{ type: RequestMirror, requestMirror: {{ backendRef: {{ name: m{i}, port: 80 }} }} }}")
            })
            .collect();
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: default }}
spec:
  parentRefs: [{{ name: gw, namespace: infra, sectionName: http }}]
  hostnames: [{name}.example.com]
  rules:
  - backendRefs: [{{ name: a, port: 80 }}]
  - matches: [{{ path: {{ type: PathPrefix, value: /copy }} }}]
    filters: [{}]
    backendRefs: [{{ name: a, port: 80 }}]
"#,
            filters.join(", ")
        )
    };
    let texts = [
        route("plain", 0),
        route("one", 1),
        route("four", 4),
        route("five", 5),
        route("sixteen", 16),
    ];
    let mut all = vec![CLASS, GATEWAY];
    all.extend(texts.iter().map(String::as_str));
    let o = objects(&all);
    let served = |out: &GatewayOutput| -> Vec<String> {
        let mut hosts: Vec<String> = out
            .routes
            .listeners
            .iter()
            .flat_map(|l| &l.virtual_hosts)
            .filter_map(|v| v.host.as_ref().map(|h| h.to_string()))
            .filter(|h| !h.starts_with('*')) // the listener's own hostname
            .collect();
        hosts.sort();
        hosts
    };
    let message = |out: &GatewayOutput, r: &str| -> String {
        let parents = &out.http_routes[&format!("default/{r}").parse().unwrap()];
        cond(&parents[0].conditions, "Accepted").message.clone()
    };

    let default = translate_tuned(&o, &[], VIP, |_| {});
    assert_eq!(
        served(&default),
        ["four.example.com", "one.example.com", "plain.example.com"]
    );
    for r in ["five", "sixteen"] {
        assert_eq!(
            route_cond(&default, &format!("default/{r}"), "Accepted"),
            (false, "UnsupportedValue"),
            "{r}"
        );
    }
    assert_eq!(
        message(&default, "five"),
        "RequestMirror: rule 1 has 5 mirrors, each a copy of every request it takes on the proxy every tenant shares; the limit is 4 per rule (limits.mirrorsPerRule)"
    );

    // An admin's limit: 0 forbids mirrors, 16 allows the API's most.
    let none = translate_tuned(&o, &[], VIP, |i| i.mirrors_per_rule = 0);
    assert_eq!(served(&none), ["plain.example.com"]);
    assert!(message(&none, "one").contains("the limit is 0 per rule"));
    let most = translate_tuned(&o, &[], VIP, |i| i.mirrors_per_rule = 16);
    assert_eq!(served(&most).len(), 5);
}

/// On nginx, a host whose rules match on more than the path is served from one
/// `location` (nginx picks among the rules by `map`s), which has one mirror, one
/// timeout and one set of request header edits (`routes::OneLocation`). The route that
/// would make such a host mix rules with a RequestMirror, a split whose backends edit
/// headers, or another timeout is refused at plan time (`Accepted: False`,
/// `UnsupportedValue`, saying why), and only it: the older routes of the host keep
/// theirs, other hosts are not concerned, and a route that mixes them within itself is
/// refused alone. HAProxy picks per rule and serves every mix.
#[test]
fn on_nginx_a_route_that_would_mix_conditional_rules_nginx_cannot_pick_among_is_refused_alone() {
    let route = |name: &str, host: &str, ts: &str, rules: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{ name: {name}, namespace: infra, creationTimestamp: \"{ts}\" }}\nspec:\n  parentRefs: [{{ name: gw }}]\n  hostnames: [\"{host}\"]\n  rules:\n{rules}"
        )
    };
    let when = |path: &str| {
        format!("  - matches: [{{ path: {{ value: {path} }}, headers: [{{ name: x-v, value: one }}] }}]\n    backendRefs: [{{ name: a, port: 80 }}]\n")
    };
    let timed = |path: &str, t: &str| {
        format!("  - matches: [{{ path: {{ value: {path} }} }}]\n    timeouts: {{ request: {t} }}\n    backendRefs: [{{ name: b, port: 80 }}]\n")
    };
    let mirrored = |path: &str| {
        format!("  - matches: [{{ path: {{ value: {path} }} }}]\n    filters: [{{ type: RequestMirror, requestMirror: {{ backendRef: {{ name: c, port: 80 }} }} }}]\n    backendRefs: [{{ name: b, port: 80 }}]\n")
    };
    let split_edits = |path: &str| {
        format!("  - matches: [{{ path: {{ value: {path} }} }}]\n    backendRefs:\n    - {{ name: a, port: 80, filters: [{{ type: RequestHeaderModifier, requestHeaderModifier: {{ set: [{{ name: x-b, value: a }}] }} }}] }}\n    - {{ name: b, port: 80 }}\n")
    };
    let texts = [
        // Another timeout joins a host of conditional rules: the newer is refused.
        route(
            "t-cond",
            "t.example.com",
            "2024-01-01T00:00:00Z",
            &when("/c"),
        ),
        route(
            "t-slow",
            "t.example.com",
            "2024-01-02T00:00:00Z",
            &timed("/s", "5s"),
        ),
        // The same, the other way round (a conditional rule joins a timed host).
        route(
            "u-slow",
            "u.example.com",
            "2024-01-01T00:00:00Z",
            &timed("/s", "5s"),
        ),
        route(
            "u-cond",
            "u.example.com",
            "2024-01-02T00:00:00Z",
            &when("/c"),
        ),
        // A mirror, then a conditional rule.
        route(
            "m-mirror",
            "m.example.com",
            "2024-01-01T00:00:00Z",
            &mirrored("/m"),
        ),
        route(
            "m-cond",
            "m.example.com",
            "2024-01-02T00:00:00Z",
            &when("/c"),
        ),
        // A split whose backends edit headers, beside a conditional rule.
        route(
            "s-cond",
            "s.example.com",
            "2024-01-01T00:00:00Z",
            &when("/c"),
        ),
        route(
            "s-split",
            "s.example.com",
            "2024-01-02T00:00:00Z",
            &split_edits("/s"),
        ),
        // One route that mixes them within itself.
        route(
            "self",
            "self.example.com",
            "2024-01-01T00:00:00Z",
            &format!("{}{}", when("/c"), timed("/s", "5s")),
        ),
        // What nginx serves: equal timeouts beside conditional rules, and a mirror or
        // another timeout on a host without conditional rules.
        route(
            "same",
            "same.example.com",
            "2024-01-01T00:00:00Z",
            &format!(
                "{}{}",
                when("/c").replace(
                    "    backendRefs",
                    "    timeouts: { request: 5s }\n    backendRefs"
                ),
                timed("/s", "5s")
            ),
        ),
        route(
            "plain",
            "plain.example.com",
            "2024-01-01T00:00:00Z",
            &format!("{}{}", mirrored("/m"), timed("/s", "3s")),
        ),
    ];
    let mut all = vec![CLASS, GATEWAY];
    all.extend(texts.iter().map(String::as_str));
    let o = objects(&all);
    let addresses: BTreeMap<_, _> = [(
        "infra/gw".parse().unwrap(),
        vec![VIP.parse::<IpAddr>().unwrap()],
    )]
    .into_iter()
    .collect();
    let none = BTreeMap::new();
    let run_with = |mixes: bool| {
        let mut input = o.gateway_input(&[], &addresses, &none);
        input.mixes_conditional_rules = mixes;
        translate(&input)
    };
    let refused = ["t-slow", "u-cond", "m-cond", "s-split", "self"];
    let served = ["t-cond", "u-slow", "m-mirror", "s-cond", "same", "plain"];
    let nginx = run_with(false);
    for (name, why) in [
        ("t-slow", "one timeout"),
        ("u-cond", "one timeout"),
        ("m-cond", "RequestMirror"),
        ("s-split", "split whose backends"),
        ("self", "one timeout"),
    ] {
        let key = format!("infra/{name}");
        assert_eq!(
            route_cond(&nginx, &key, "Accepted"),
            (false, "UnsupportedValue"),
            "nginx: {name}"
        );
        let msg = &cond(
            &nginx.http_routes[&key.parse().unwrap()][0].conditions,
            "Accepted",
        )
        .message;
        assert!(msg.contains(why) && msg.contains("nginx"), "{name}: {msg}");
    }
    for name in served {
        assert_eq!(
            route_cond(&nginx, &format!("infra/{name}"), "Accepted"),
            (true, "Accepted"),
            "nginx: {name}"
        );
    }
    // Nothing of a refused route is in the model; every host nginx gets it can serve.
    let l = nginx
        .routes
        .listeners
        .iter()
        .find(|l| l.port == 80)
        .unwrap();
    for v in &l.virtual_hosts {
        assert_eq!(
            k8slb_common::routes::OneLocation::of(&v.rules).refusal(),
            None,
            "{:?}",
            v.host
        );
        for r in &v.rules {
            let owner = r.owner.as_ref().map(|o| o.to_string()).unwrap_or_default();
            assert!(
                refused.iter().all(|n| !owner.ends_with(&format!("/{n}"))),
                "{owner} in the model"
            );
        }
    }
    assert_eq!(goes(&nginx, 80, "t.example.com", "/s"), "404");
    assert_eq!(goes(&nginx, 80, "u.example.com", "/s"), "b");
    // HAProxy serves every one of them.
    let haproxy = run_with(true);
    for name in refused.iter().chain(&served) {
        assert_eq!(
            route_cond(&haproxy, &format!("infra/{name}"), "Accepted"),
            (true, "Accepted"),
            "haproxy: {name}"
        );
    }
    assert_eq!(goes(&haproxy, 80, "t.example.com", "/s"), "b");
}

/// HTTPS listeners sharing a port are zones of server names (the most specific
/// listener hostname matching a name, wildcards at any depth, else the listener without
/// a hostname): a request whose Host is in another zone than its TLS server name is
/// misdirected (the suite's HTTPRouteHTTPSListenerDetectMisdirectedRequests, on its
/// Gateway's listeners), one without SNI never is, and HTTP listeners have no zones.
#[test]
fn https_listeners_sharing_a_port_are_zones_and_a_host_of_another_zone_than_the_sni_is_misdirected()
{
    let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: https, port: 443, protocol: HTTPS, tls: { certificateRefs: [{ name: t }] } }
  - { name: second, port: 443, protocol: HTTPS, hostname: second-example.org, tls: { certificateRefs: [{ name: t }] } }
  - { name: wild, port: 443, protocol: HTTPS, hostname: "*.wildcard.org", tls: { certificateRefs: [{ name: t }] } }
  - { name: fourth, port: 443, protocol: HTTPS, hostname: fourth-example.wildcard.org, tls: { certificateRefs: [{ name: t }] } }
  - { name: alone, port: 8443, protocol: HTTPS, hostname: a.example.com, tls: { certificateRefs: [{ name: t }] } }
  - { name: http, port: 80, protocol: HTTP }
"#;
    let secret = SecretMeta {
        namespace: "infra".into(),
        name: "t".into(),
        type_: "kubernetes.io/tls".into(),
        valid: true,
        version: "0123456789abcdef".into(),
        refusal: String::new(),
        dns_names: vec!["*".into(), "*.org".into(), "*.wildcard.org".into()],
    };
    let out = run(&objects(&[CLASS, gw]), std::slice::from_ref(&secret));
    let zones = |port: u16| {
        out.routes
            .listeners
            .iter()
            .find(|l| l.port == port)
            .and_then(|l| l.tls.as_ref())
            .and_then(|t| t.zones.clone())
    };
    assert_eq!(zones(80), None, "no TLS, no zones");
    let z = zones(443).expect("zones on 443");
    assert!(z.any);
    let (e, s, u) = ("example.org", "second-example.org", "unknown-example.org");
    let (w3, w4, w5) = (
        "third-example.wildcard.org",
        "fourth-example.wildcard.org",
        "fith-example.wildcard.org",
    );
    for (sni, host, misdirected) in [
        (e, e, false),
        (e, s, true),
        (e, u, false),
        (s, "Second-Example.org:443", false),
        (s, e, true),
        (s, u, true),
        (w3, w3, false),
        (w3, w5, false),
        (w3, "a.b.wildcard.org", false),
        (w3, w4, true),
        (w3, s, true),
        (w3, "wildcard.org", true),
        (w4, w4, false),
        (w4, w5, true),
        (u, e, false),
        (u, u, false),
    ] {
        assert_eq!(
            z.misdirected(Some(sni), host),
            misdirected,
            "SNI {sni}, Host {host}"
        );
    }
    assert!(!z.misdirected(None, s), "no SNI: not checked");
    // A port with one listener that has a hostname: a name of no listener is in none.
    let alone = zones(8443).expect("zones on 8443");
    assert!(!alone.any);
    assert!(alone.misdirected(Some("b.example.com"), "a.example.com"));
    assert!(!alone.misdirected(Some("a.example.com"), "A.example.com"));
}

/// The CORS filter (HTTPRouteCORS): origins `scheme://host[:port]` (a host may start
/// with `*.`) or `*`, methods or `*`, header names or `*`, credentials and `maxAge`
/// reach the model checked; an origin, method or header name that is not one of those
/// refuses its route (`UnsupportedValue`), nothing of it served.
#[test]
fn cors_filters_reach_the_model_checked_and_a_bad_value_refuses_the_route() {
    let route = |name: &str, cors: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{ name: {name}, namespace: infra }}\nspec:\n  parentRefs: [{{ name: gw }}]\n  hostnames: [\"{name}.example.com\"]\n  rules:\n  - filters: [{{ type: CORS, cors: {cors} }}]\n    backendRefs: [{{ name: b, port: 80 }}]\n"
        )
    };
    let texts = [
        route(
            "full",
            "{ allowOrigins: [\"https://www.foo.com\", \"https://*.bar.com:8443\"], allowMethods: [GET, OPTIONS], allowHeaders: [X-Header-1], exposeHeaders: [x-header-3], allowCredentials: true, maxAge: 3600 }",
        ),
        route(
            "any",
            "{ allowOrigins: [\"*\"], allowMethods: [\"*\"], allowHeaders: [\"*\"] }",
        ),
        route("path", "{ allowOrigins: [\"https://foo.com/x\"] }"),
        route("quote", "{ allowOrigins: [\"https://fo\\\"o.com\"] }"),
        route("method", "{ allowOrigins: [\"*\"], allowMethods: [\"GET;\"] }"),
        route("header", "{ allowOrigins: [\"*\"], allowHeaders: [\"x header\"] }"),
        route("age", "{ allowOrigins: [\"*\"], maxAge: 0 }"),
    ];
    let mut all = vec![CLASS, GATEWAY];
    all.extend(texts.iter().map(String::as_str));
    let out = run(&objects(&all), &[]);
    for refused in ["path", "quote", "method", "header", "age"] {
        assert_eq!(
            route_cond(&out, &format!("infra/{refused}"), "Accepted"),
            (false, "UnsupportedValue"),
            "{refused}"
        );
    }
    let cors = |host: &str| {
        out.routes.listeners[0]
            .virtual_hosts
            .iter()
            .find(|v| v.host.as_ref().is_some_and(|h| h.as_str() == host))
            .and_then(|v| v.rules[0].filters.cors.clone())
            .unwrap_or_else(|| panic!("{host}: no CORS"))
    };
    let full = cors("full.example.com");
    assert!(full.allows("https://www.foo.com"));
    assert!(full.allows("https://a.b.bar.com:8443"));
    assert!(!full.allows("https://a.bar.com"));
    assert!(!full.allows("https://evil.com"));
    assert_eq!(full.methods_value().as_deref(), Some("GET, OPTIONS"));
    assert_eq!(full.headers_value().as_deref(), Some("x-header-1"));
    assert_eq!(full.expose_value().as_deref(), Some("x-header-3"));
    assert!(full.credentials);
    assert_eq!(full.max_age, 3600);
    let any = cors("any.example.com");
    assert!(any.allows("https://anything.example:1"));
    assert_eq!(any.methods_value(), None, "the method asked for is told");
    assert!(any.any_header && !any.credentials);
    assert_eq!(any.max_age, 5, "the API's default");
    for host in ["path", "quote", "method", "header", "age"] {
        assert!(
            out.routes.listeners[0].virtual_hosts.iter().all(|v| v
                .host
                .as_ref()
                .is_none_or(|h| h.as_str() != format!("{host}.example.com"))),
            "{host} served"
        );
    }
}

#[test]
fn rule_retries_are_served_on_haproxy_and_refused_on_nginx_and_out_of_range_ones_refuse_the_route()
{
    use k8slb_common::routes::{Retry, RetryAttempts, RetryCode};
    let route = |name: &str, retry: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: default }}
spec:
  parentRefs: [{{ name: gw, namespace: infra, sectionName: http }}]
  hostnames: [{name}.example.com]
  rules: [{{ backendRefs: [{{ name: a, port: 80 }}], retry: {retry} }}]
"#
        )
    };
    let policy = |attempts: Option<u32>, codes: &[u16]| Retry {
        attempts: attempts.map(|a| RetryAttempts::try_from(a).unwrap()),
        codes: codes
            .iter()
            .map(|c| RetryCode::try_from(*c).unwrap())
            .collect(),
    };
    let table = [
        (
            "spec",
            "{ codes: [500], attempts: 3 }",
            Ok(policy(Some(3), &[500])),
        ),
        (
            "all",
            "{ codes: [504, 500, 503, 502], attempts: 2 }",
            Ok(policy(Some(2), &[500, 502, 503, 504])),
        ),
        // Unspecified attempts: the proxy's default; no codes: connection failures only.
        ("default", "{}", Ok(policy(None, &[]))),
        // The largest served: every code HAProxy's retry-on takes, ten attempts.
        (
            "widest",
            "{ codes: [401, 403, 404, 408, 425, 500, 501, 502, 503, 504], attempts: 10 }",
            Ok(policy(
                Some(10),
                &[401, 403, 404, 408, 425, 500, 501, 502, 503, 504],
            )),
        ),
        ("backoff", "{ codes: [500], backoff: 100ms }", Err(())),
        // The request timeout must bound every try together: refused with a retry.
        (
            "request-timeout",
            "{ codes: [500] }, timeouts: { request: 1s }",
            Err(()),
        ),
        // A per-try timeout is served with one; a disabled request timeout too.
        (
            "backend-timeout",
            "{ codes: [500] }, timeouts: { backendRequest: 1s, request: 0s }",
            Ok(policy(None, &[500])),
        ),
        ("too-many", "{ attempts: 11 }", Err(())),
        // The API's maximum (int64): refused, never capped.
        ("api-max", "{ attempts: 9223372036854775807 }", Err(())),
        ("zero", "{ attempts: 0 }", Err(())),
        // In the API's range (400-599) but not one HAProxy's retry-on takes.
        ("code-429", "{ codes: [500, 429] }", Err(())),
        ("code-599", "{ codes: [599] }", Err(())),
    ];
    let texts: Vec<String> = table.iter().map(|(n, r, _)| route(n, r)).collect();
    let mut all = vec![CLASS, GATEWAY];
    all.extend(texts.iter().map(String::as_str));
    let o = objects(&all);
    let run_with = |serves_retry: bool| {
        translate_tuned(&o, &[], VIP, |i| {
            i.serves_retry = serves_retry;
        })
    };
    let haproxy = run_with(true);
    let l = haproxy
        .routes
        .listeners
        .iter()
        .find(|l| l.port == 80)
        .expect("the port 80 listener");
    for (name, _, want) in &table {
        let key = format!("default/{name}");
        let host = format!("{name}.example.com");
        let served = l
            .virtual_hosts
            .iter()
            .find(|v| v.host.as_ref().is_some_and(|h| h.as_str() == host));
        match want {
            Ok(p) => {
                assert_eq!(
                    route_cond(&haproxy, &key, "Accepted"),
                    (true, "Accepted"),
                    "{name}"
                );
                let v = served.unwrap_or_else(|| panic!("{name}: no virtual host"));
                assert_eq!(v.rules[0].filters.retry.as_ref(), Some(p), "{name}");
            }
            Err(()) => {
                assert_eq!(
                    route_cond(&haproxy, &key, "Accepted"),
                    (false, "UnsupportedValue"),
                    "{name}"
                );
                assert!(served.is_none(), "{name}: served");
            }
        }
    }
    // nginx: every route with a retry is refused, none served without it.
    let nginx = run_with(false);
    for (name, _, _) in &table {
        assert_eq!(
            route_cond(&nginx, &format!("default/{name}"), "Accepted"),
            (false, "UnsupportedValue"),
            "{name}"
        );
    }
    assert!(nginx
        .routes
        .listeners
        .iter()
        .flat_map(|l| &l.virtual_hosts)
        .all(|v| v.rules.iter().all(|r| r.filters.retry.is_none())));
}

/// HAProxy serves each (backend, retry policy) pair on a copy of the backend: one
/// namespace's routes make at most `limits.retryBackendsPerNamespace` of them. With a
/// limit of 4, the four oldest routes (each a policy of its own) are served, the newer
/// ones refused (Accepted False, UnsupportedValue, naming the limit), and a newer route
/// that repeats a policy already made costs nothing and is served.
#[test]
fn retry_policies_beyond_a_namespaces_limit_refuse_the_newer_routes_only() {
    let route = |name: &str, attempts: u32| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: {name}, namespace: default }}
spec:
  parentRefs: [{{ name: gw, namespace: infra, sectionName: http }}]
  hostnames: [{name}.example.com]
  rules: [{{ backendRefs: [{{ name: a, port: 80 }}], retry: {{ codes: [503], attempts: {attempts} }} }}]
"#
        )
    };
    let mut texts: Vec<String> = (1..=8).map(|a| route(&format!("r{a:02}"), a)).collect();
    // Newer than all of them, the policy of the oldest.
    texts.push(route("r99", 1));
    let mut all = vec![CLASS, GATEWAY];
    all.extend(texts.iter().map(String::as_str));
    let o = objects(&all);
    let out = translate_tuned(&o, &[], VIP, |i| {
        i.serves_retry = true;
        i.retry_backends_per_namespace = 4;
    });
    for a in 1..=8 {
        let name = format!("default/r{a:02}");
        let got = route_cond(&out, &name, "Accepted");
        if a <= 4 {
            assert_eq!(got, (true, "Accepted"), "{name}");
        } else {
            assert_eq!(got, (false, "UnsupportedValue"), "{name}");
        }
    }
    assert_eq!(
        route_cond(&out, "default/r99", "Accepted"),
        (true, "Accepted")
    );
    let refused = &cond(
        &out.http_routes[&"default/r05".parse().unwrap()][0].conditions,
        "Accepted",
    )
    .message;
    assert!(
        refused.contains("limits.retryBackendsPerNamespace"),
        "{refused}"
    );
}
