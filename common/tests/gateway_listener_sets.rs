//! ListenerSets in the Gateway API translation: which Gateways take them
//! (`spec.allowedListeners`), the precedence of their listeners against the Gateway's
//! and each other's (conflicts refuse the newer listener, never the older), routes
//! attached to a set, the statuses the v1.6.1 conformance suite reads
//! (`conformance/tests/listenerset-*.go`: the facts each states, on objects transcribed
//! from its YAML, shortened), and the tenancy rules around them.

mod support;

use k8slb_common::gateway::{Condition, GatewayOutput, ListenerSetStatus, ParentKind};
use k8slb_common::ingress::SecretMeta;
use k8slb_common::objects::Objects;
use k8slb_common::routes::PathMatch;
use support::*;

const VIP: &str = "198.18.0.61";
const INFRA: &str = "gateway-conformance-infra";

const BASE: &str = r#"
apiVersion: v1
kind: Namespace
metadata: { name: gateway-conformance-infra }
---
apiVersion: v1
kind: Namespace
metadata: { name: selected, labels: { allowed: ns } }
---
apiVersion: v1
kind: Namespace
metadata: { name: other }
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
"#;

/// The base objects, the documents `docs` and the infra backends.
fn objects(docs: &[String]) -> Objects {
    let mut o = Objects::default();
    o.add_text(BASE).unwrap();
    o.add_text(&docs.concat()).unwrap();
    assert!(o.problems.is_empty(), "{:?}", o.problems);
    for (name, ip) in [
        ("infra-backend-v1", "10.244.1.1"),
        ("infra-backend-v2", "10.244.1.2"),
        ("infra-backend-v3", "10.244.1.3"),
    ] {
        o.services.push(backend_svc(INFRA, name, 8080));
        o.slices.push(slice(
            INFRA,
            name,
            "x",
            None,
            8080,
            &[(ip, true, true, false)],
        ));
    }
    o
}

/// A Gateway `name` of the infra namespace: one HTTP listener on port 80 per hostname
/// `<listener>.com` (routes from every namespace), and `allowed` its
/// `spec.allowedListeners.namespaces` (flow YAML) if any.
fn gateway(name: &str, allowed: Option<&str>, listeners: &[&str]) -> String {
    let mut s = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{ name: {name}, namespace: {INFRA} }}\nspec:\n  gatewayClassName: k8slb\n"
    );
    if let Some(a) = allowed {
        s += &format!("  allowedListeners: {{ namespaces: {a} }}\n");
    }
    s += "  listeners:\n";
    for l in listeners {
        s += &format!("  - {{ name: {l}, port: 80, protocol: HTTP, hostname: {l}.com, allowedRoutes: {{ namespaces: {{ from: All }} }} }}\n");
    }
    s + "---\n"
}

/// A ListenerSet `ns/name` of Gateway `gw` (infra) with these listener entries (flow
/// YAML each), created at `created` (RFC 3339) if given.
fn set(ns: &str, name: &str, gw: &str, created: Option<&str>, listeners: &[String]) -> String {
    let created = created
        .map(|c| format!(", creationTimestamp: \"{c}\""))
        .unwrap_or_default();
    let mut s = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ListenerSet\nmetadata: {{ name: {name}, namespace: {ns}{created} }}\nspec:\n  parentRef: {{ kind: Gateway, group: gateway.networking.k8s.io, name: {gw}, namespace: {INFRA} }}\n  listeners:\n"
    );
    for l in listeners {
        s += &format!("  - {l}\n");
    }
    s + "---\n"
}

/// An HTTP listener entry on port 80 for `<name>.com`, routes from `from`.
fn http(name: &str, from: &str) -> String {
    format!("{{ name: {name}, port: 80, protocol: HTTP, hostname: {name}.com, allowedRoutes: {{ namespaces: {{ from: {from} }} }} }}")
}

/// An HTTPRoute `ns/name` for path `/<name>` to `backend`, with these parentRefs (flow
/// YAML each).
fn route(ns: &str, name: &str, backend: &str, parents: &[&str]) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{ name: {name}, namespace: {ns} }}\nspec:\n  parentRefs: [{}]\n  rules:\n  - matches: [{{ path: {{ type: PathPrefix, value: /{name} }} }}]\n    backendRefs: [{{ name: {backend}, namespace: {INFRA}, port: 8080 }}]\n---\n",
        parents.join(", ")
    )
}

/// Routes of namespaces `selected` and `other` may name the infra Services.
const GRANT_SERVICES: &str = "apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: g, namespace: gateway-conformance-infra }
spec:
  from:
  - { group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: selected }
  - { group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: other }
  to: [{ group: \"\", kind: Service }]
";

/// A parentRef to ListenerSet `ns/name`.
fn ls_ref_in(ns: &str, name: &str) -> String {
    format!(
        "{{ kind: ListenerSet, group: gateway.networking.k8s.io, name: {name}, namespace: {ns} }}"
    )
}

fn ls_ref(name: &str, section: Option<&str>) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    format!("{{ kind: ListenerSet, group: gateway.networking.k8s.io, name: {name}, namespace: {INFRA}{section} }}")
}

fn gw_ref(name: &str, section: Option<&str>) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    format!("{{ name: {name}, namespace: {INFRA}{section} }}")
}

fn run(o: &Objects) -> GatewayOutput {
    translate_on(o, &[], VIP)
}

fn triples(c: &[Condition]) -> Vec<(&'static str, bool, &'static str)> {
    c.iter()
        .map(|c| (c.type_.as_str(), c.status, c.reason.as_str()))
        .collect()
}

fn set_status<'a>(out: &'a GatewayOutput, ns: &str, name: &str) -> &'a ListenerSetStatus {
    &out.listener_sets[&format!("{ns}/{name}").parse().unwrap()]
}

/// `ListenerSetMustHaveCondition` for Accepted and Programmed, with these reasons.
fn set_conditions(
    out: &GatewayOutput,
    ns: &str,
    name: &str,
) -> Vec<(&'static str, bool, &'static str)> {
    triples(&set_status(out, ns, name).conditions)
}

/// The conditions of listener `l` of a set.
fn set_listener(
    out: &GatewayOutput,
    ns: &str,
    name: &str,
    l: &str,
) -> (u32, Vec<(&'static str, bool, &'static str)>) {
    let st = set_status(out, ns, name);
    let l = st.listeners.iter().find(|x| x.name == l).unwrap();
    (l.attached_routes, triples(&l.conditions))
}

const ACCEPTED_LISTENER: [(&str, bool, &str); 3] = [
    ("ResolvedRefs", true, "ResolvedRefs"),
    ("Accepted", true, "Accepted"),
    ("Programmed", true, "Programmed"),
];

fn attached_sets(out: &GatewayOutput, gw: &str) -> Option<u32> {
    out.gateways[&format!("{INFRA}/{gw}").parse().unwrap()].attached_listener_sets
}

/// The hosts served on the VIP's port 80, and the path prefixes of each.
fn served_hosts(out: &GatewayOutput) -> Vec<String> {
    let mut v: Vec<String> = out
        .routes
        .listeners
        .iter()
        .filter(|l| l.port == 80)
        .flat_map(|l| &l.virtual_hosts)
        .filter_map(|v| v.host.as_ref().map(|h| h.to_string()))
        .collect();
    v.sort();
    v
}

#[test]
fn a_gateway_takes_no_listener_set_by_default_nor_with_from_none() {
    let o = objects(&[
        gateway("gw-default", None, &["gateway-listener"]),
        gateway("gw-none", Some("{ from: None }"), &["gateway-listener-2"]),
        set(
            INFRA,
            "ls-default",
            "gw-default",
            None,
            &[http("ls-default-listener", "All")],
        ),
        set(
            INFRA,
            "ls-none",
            "gw-none",
            None,
            &[http("ls-none-listener", "All")],
        ),
    ]);
    let out = run(&o);
    for ls in ["ls-default", "ls-none"] {
        assert_eq!(
            set_conditions(&out, INFRA, ls),
            [
                ("Accepted", false, "NotAllowed"),
                ("Programmed", false, "NotAllowed")
            ]
        );
        assert!(set_status(&out, INFRA, ls).listeners.is_empty());
    }
    // Not written without spec.allowedListeners (older CRDs prune it); 0 with it.
    assert_eq!(attached_sets(&out, "gw-default"), None);
    assert_eq!(attached_sets(&out, "gw-none"), Some(0));
    assert_eq!(
        served_hosts(&out),
        ["gateway-listener-2.com", "gateway-listener.com"]
    );
}

#[test]
fn same_takes_sets_of_the_gateways_namespace_and_selector_those_it_selects() {
    let o = objects(&[
        gateway("gw-same", Some("{ from: Same }"), &["gw-same-listener"]),
        gateway(
            "gw-selector",
            Some("{ from: Selector, selector: { matchLabels: { allowed: ns } } }"),
            &["gw-selector-listener"],
        ),
        set(
            INFRA,
            "same-ns",
            "gw-same",
            None,
            &[http("same-ns-listener", "All")],
        ),
        set(
            "other",
            "other-ns",
            "gw-same",
            None,
            &[http("other-ns-listener", "All")],
        ),
        set(
            "selected",
            "selected-ns",
            "gw-selector",
            None,
            &[http("selected-listener", "All")],
        ),
        set(
            "other",
            "not-selected-ns",
            "gw-selector",
            None,
            &[http("not-selected-listener", "All")],
        ),
    ]);
    let out = run(&o);
    for (ns, ls, l) in [
        (INFRA, "same-ns", "same-ns-listener"),
        ("selected", "selected-ns", "selected-listener"),
    ] {
        assert_eq!(
            set_conditions(&out, ns, ls),
            [
                ("Accepted", true, "Accepted"),
                ("Programmed", true, "Programmed")
            ]
        );
        assert_eq!(
            set_listener(&out, ns, ls, l),
            (0, ACCEPTED_LISTENER.to_vec())
        );
        assert_eq!(
            set_status(&out, ns, ls).listeners[0].supported_kinds,
            ["HTTPRoute", "GRPCRoute"]
        );
    }
    for ls in ["other-ns", "not-selected-ns"] {
        assert_eq!(
            set_conditions(&out, "other", ls),
            [
                ("Accepted", false, "NotAllowed"),
                ("Programmed", false, "NotAllowed")
            ]
        );
    }
    assert_eq!(attached_sets(&out, "gw-same"), Some(1));
    assert_eq!(attached_sets(&out, "gw-selector"), Some(1));
    assert_eq!(
        served_hosts(&out),
        [
            "gw-same-listener.com",
            "gw-selector-listener.com",
            "same-ns-listener.com",
            "selected-listener.com"
        ]
    );
}

/// listenerset-hostname-conflict and listenerset-protocol-conflict: the Gateway's
/// listeners first, then sets by `<namespace>/<name>` (same creation time); a set
/// listener that takes what one before it holds is refused, the set is accepted while
/// one of its listeners is.
#[test]
fn a_conflicting_set_listener_is_refused_never_the_gateways_nor_an_older_sets() {
    for (conflicting, reason) in [
        (
            "{ name: conflict, port: 80, protocol: HTTP, hostname: conflict.com }",
            "HostnameConflict",
        ),
        (
            "{ name: conflict, port: 80, protocol: TCP }",
            "ProtocolConflict",
        ),
    ] {
        let sibling = conflicting
            .replace("conflict,", "sibling,")
            .replace("conflict.com", "sibling.com");
        let c = conflicting.to_string();
        let o = objects(&[
            gateway(
                "gw",
                Some("{ from: Same }"),
                &["gateway-listener", "conflict"],
            ),
            set(
                INFRA,
                "ls-gateway-1",
                "gw",
                None,
                &[http("ls-1", "All"), c.clone(), http("sibling", "All")],
            ),
            set(INFRA, "ls-gateway-2", "gw", None, &[c]),
            set(
                INFRA,
                "ls-set-1",
                "gw",
                None,
                &[http("ls-2", "All"), sibling.clone()],
            ),
            set(INFRA, "ls-set-2", "gw", None, &[sibling]),
        ]);
        let out = run(&o);
        let gw = &out.gateways[&format!("{INFRA}/gw").parse().unwrap()];
        assert_eq!(
            gw.listeners.len(),
            2,
            "the sets' listeners are not the Gateway's"
        );
        for l in &gw.listeners {
            assert_eq!(triples(&l.conditions), ACCEPTED_LISTENER, "{}", l.name);
        }
        let refused = [
            ("Accepted", false, reason),
            ("Conflicted", true, reason),
            ("Programmed", false, reason),
        ];
        assert_eq!(
            set_listener(&out, INFRA, "ls-gateway-1", "conflict").1,
            refused
        );
        assert_eq!(
            set_listener(&out, INFRA, "ls-gateway-1", "ls-1").1,
            ACCEPTED_LISTENER
        );
        assert_eq!(
            set_listener(&out, INFRA, "ls-gateway-1", "sibling").1,
            ACCEPTED_LISTENER
        );
        assert_eq!(
            set_listener(&out, INFRA, "ls-gateway-2", "conflict").1,
            refused
        );
        assert_eq!(
            set_listener(&out, INFRA, "ls-set-1", "ls-2").1,
            ACCEPTED_LISTENER
        );
        assert_eq!(set_listener(&out, INFRA, "ls-set-1", "sibling").1, refused);
        for ls in ["ls-gateway-1", "ls-set-1"] {
            assert_eq!(
                set_conditions(&out, INFRA, ls),
                [
                    ("Accepted", true, "ListenersNotValid"),
                    ("Programmed", true, "Programmed")
                ]
            );
        }
        for ls in ["ls-gateway-2", "ls-set-2"] {
            assert_eq!(
                set_conditions(&out, INFRA, ls),
                [
                    ("Accepted", false, "ListenersNotValid"),
                    ("Programmed", false, "ListenersNotValid")
                ]
            );
        }
        assert_eq!(attached_sets(&out, "gw"), Some(2));
        // Nothing of the refused listeners is served: port 80 stays HTTP.
        assert!(out.routes.streams.is_empty(), "{:?}", out.routes.streams);
    }
}

/// Tenancy: a newer set of another namespace cannot take a hostname an older set
/// holds, whatever their names; the older keeps serving it with its routes.
#[test]
fn an_older_set_keeps_its_hostname_against_a_newer_set_of_another_namespace() {
    let o = objects(&[
        gateway("gw", Some("{ from: All }"), &["gateway-listener"]),
        set(
            "other",
            "a-newer",
            "gw",
            Some("2026-01-02T00:00:00Z"),
            &[http("shop", "Same")],
        ),
        set(
            "selected",
            "z-older",
            "gw",
            Some("2026-01-01T00:00:00Z"),
            &[http("shop", "Same")],
        ),
        route(
            "selected",
            "owner",
            "infra-backend-v1",
            &[&ls_ref_in("selected", "z-older")],
        ),
        route(
            "other",
            "squatter",
            "infra-backend-v2",
            &[&ls_ref_in("other", "a-newer")],
        ),
        GRANT_SERVICES.to_string(),
    ]);
    let out = run(&o);
    assert_eq!(
        set_listener(&out, "selected", "z-older", "shop"),
        (1, ACCEPTED_LISTENER.to_vec())
    );
    let (_, newer) = set_listener(&out, "other", "a-newer", "shop");
    assert!(
        newer.contains(&("Conflicted", true, "HostnameConflict")),
        "{newer:?}"
    );
    let l80 = out.routes.listeners.iter().find(|l| l.port == 80).unwrap();
    let shop = l80
        .virtual_hosts
        .iter()
        .find(|v| v.host.as_ref().is_some_and(|h| h.as_str() == "shop.com"))
        .unwrap();
    let owners: Vec<String> = shop
        .rules
        .iter()
        .filter_map(|r| r.owner.as_ref().map(|o| o.to_string()))
        .collect();
    assert_eq!(owners, ["HTTPRoute selected/owner"]);
    // The squatter's route names a set whose only listener is refused: attached to
    // nothing served.
    let squatter = &out.http_routes[&"other/squatter".parse().unwrap()][0];
    assert_eq!(squatter.kind, ParentKind::ListenerSet);
}

/// listenerset-http-routing: routes attach to a set's listeners only through a
/// ListenerSet parentRef (sectionName selects one of them); a Gateway parentRef
/// reaches the Gateway's own listeners only.
#[test]
fn routes_reach_a_sets_listeners_through_the_set_only() {
    let o = objects(&[gateway(
        "gw",
        Some("{ from: All }"),
        &["gateway-listener-1", "gateway-listener-2"],
    ) + &set(
        INFRA,
        "ls-1",
        "gw",
        None,
        &[
            http("ls-1-listener-1", "All"),
            http("ls-1-listener-2", "All"),
        ],
    ) + &set(
        INFRA,
        "ls-2",
        "gw",
        None,
        &[
            http("ls-2-listener-1", "All"),
            http("ls-2-listener-2", "All"),
        ],
    ) + &route(
        INFRA,
        "route",
        "infra-backend-v1",
        &[
            &gw_ref("gw", None),
            &ls_ref("ls-1", None),
            &ls_ref("ls-2", None),
        ],
    ) + &route(
        INFRA,
        "gateway-route",
        "infra-backend-v2",
        &[&gw_ref("gw", None)],
    ) + &route(
        INFRA,
        "gateway-section-route",
        "infra-backend-v3",
        &[&gw_ref("gw", Some("gateway-listener-1"))],
    ) + &route(
        INFRA,
        "ls-1-route",
        "infra-backend-v2",
        &[&ls_ref("ls-1", None)],
    ) + &route(
        INFRA,
        "ls-1-section-route",
        "infra-backend-v3",
        &[&ls_ref("ls-1", Some("ls-1-listener-1"))],
    ) + &route(
        INFRA,
        "ls-2-route",
        "infra-backend-v2",
        &[&ls_ref("ls-2", None)],
    )]);
    let out = run(&o);
    assert_eq!(attached_sets(&out, "gw"), Some(2));
    for (ls, l, n) in [
        ("ls-1", "ls-1-listener-1", 3),
        ("ls-1", "ls-1-listener-2", 2),
        ("ls-2", "ls-2-listener-1", 2),
        ("ls-2", "ls-2-listener-2", 2),
    ] {
        assert_eq!(
            set_listener(&out, INFRA, ls, l),
            (n, ACCEPTED_LISTENER.to_vec()),
            "{l}"
        );
    }
    let gw = &out.gateways[&format!("{INFRA}/gw").parse().unwrap()];
    let gw_attached: Vec<u32> = gw.listeners.iter().map(|l| l.attached_routes).collect();
    assert_eq!(gw_attached, [3, 2]);
    // The parent entries: kind ListenerSet for the sets, Accepted on each.
    let parents = &out.http_routes[&format!("{INFRA}/route").parse().unwrap()];
    let kinds: Vec<(ParentKind, &str, bool)> = parents
        .iter()
        .map(|p| (p.kind, p.parent.name.as_str(), p.conditions[0].status))
        .collect();
    assert_eq!(
        kinds,
        [
            (ParentKind::Gateway, "gw", true),
            (ParentKind::ListenerSet, "ls-1", true),
            (ParentKind::ListenerSet, "ls-2", true)
        ]
    );
    // The paths each host serves.
    let l80 = out.routes.listeners.iter().find(|l| l.port == 80).unwrap();
    let paths = |host: &str| -> Vec<String> {
        let v = l80
            .virtual_hosts
            .iter()
            .find(|v| v.host.as_ref().is_some_and(|h| h.as_str() == host))
            .unwrap();
        let mut p: Vec<String> = v
            .rules
            .iter()
            .map(|r| match &r.matches.path {
                PathMatch::Prefix(p) | PathMatch::Exact(p) => p.as_str().to_string(),
            })
            .collect();
        p.sort();
        p
    };
    assert_eq!(
        paths("gateway-listener-1.com"),
        ["/gateway-route", "/gateway-section-route", "/route"]
    );
    assert_eq!(
        paths("gateway-listener-2.com"),
        ["/gateway-route", "/route"]
    );
    assert_eq!(
        paths("ls-1-listener-1.com"),
        ["/ls-1-route", "/ls-1-section-route", "/route"]
    );
    assert_eq!(paths("ls-1-listener-2.com"), ["/ls-1-route", "/route"]);
    assert_eq!(paths("ls-2-listener-1.com"), ["/ls-2-route", "/route"]);
}

/// listenerset-dual-parentref-independence and
/// listenerset-gateway-parent-section-name-not-found: a set's listener name is not a
/// sectionName of its Gateway.
#[test]
fn a_sets_listener_is_no_section_of_its_gateway() {
    let o = objects(&[
        gateway("gw", Some("{ from: Same }"), &["gw-listener"]),
        set(INFRA, "ls", "gw", None, &[http("ls-listener", "Same")]),
        route(
            INFRA,
            "both",
            "infra-backend-v1",
            &[&gw_ref("gw", None), &ls_ref("ls", None)],
        ),
        route(
            INFRA,
            "one",
            "infra-backend-v2",
            &[
                &gw_ref("gw", Some("ls-listener")),
                &ls_ref("ls", Some("ls-listener")),
            ],
        ),
    ]);
    let out = run(&o);
    let accepted = |r: &str| -> Vec<(ParentKind, bool, &'static str)> {
        out.http_routes[&format!("{INFRA}/{r}").parse().unwrap()]
            .iter()
            .map(|p| {
                (
                    p.kind,
                    p.conditions[0].status,
                    p.conditions[0].reason.as_str(),
                )
            })
            .collect()
    };
    assert_eq!(
        accepted("both"),
        [
            (ParentKind::Gateway, true, "Accepted"),
            (ParentKind::ListenerSet, true, "Accepted")
        ]
    );
    assert_eq!(
        accepted("one"),
        [
            (ParentKind::Gateway, false, "NoMatchingParent"),
            (ParentKind::ListenerSet, true, "Accepted")
        ]
    );
    assert_eq!(set_listener(&out, INFRA, "ls", "ls-listener").0, 2);
}

/// listenerset-allowed-routes-namespaces: a set listener's `Same` is the set's
/// namespace, not the Gateway's; Selector selects route namespaces as a Gateway's does.
#[test]
fn a_set_listeners_same_is_the_sets_namespace() {
    let o = objects(
        &[gateway("gw", Some("{ from: All }"), &["gateway-listener"])
            ,set(INFRA, "ls", "gw", None, &[
                http("all", "All"),
                http("same", "Same"),
                "{ name: sel, port: 80, protocol: HTTP, hostname: sel.com, allowedRoutes: { namespaces: { from: Selector, selector: { matchLabels: { allowed: ns } } } } }".into(),
            ])
            ,set("other", "ls-cross", "gw", None, &[http("cross-same", "Same")])
            ,route(INFRA, "r-infra", "infra-backend-v1", &[&ls_ref("ls", None)])
            ,route("selected", "r-selected", "infra-backend-v2", &[&ls_ref("ls", None)])
            ,route("other", "r-other", "infra-backend-v3", &[&ls_ref("ls", None)])
            ,route("other", "r-in-set-ns", "infra-backend-v1", &[&ls_ref_in("other", "ls-cross")])
            ,route(INFRA, "r-in-gw-ns", "infra-backend-v2", &[&ls_ref_in("other", "ls-cross")])],
    );
    let out = run(&o);
    assert_eq!(attached_sets(&out, "gw"), Some(2));
    assert_eq!(set_listener(&out, INFRA, "ls", "all").0, 3);
    assert_eq!(set_listener(&out, INFRA, "ls", "same").0, 1);
    assert_eq!(set_listener(&out, INFRA, "ls", "sel").0, 1);
    assert_eq!(set_listener(&out, "other", "ls-cross", "cross-same").0, 1);
    let p = &out.http_routes[&format!("{INFRA}/r-in-gw-ns").parse().unwrap()][0];
    assert_eq!(
        (p.conditions[0].status, p.conditions[0].reason.as_str()),
        (false, "NotAllowedByListeners")
    );
}

/// listenerset-allowed-routes-supported-kinds: a TLS listener of a set that names
/// HTTPRoute only.
#[test]
fn a_set_listener_with_kinds_it_cannot_take_says_invalid_route_kinds() {
    let o = objects(
        &[gateway("gw", Some("{ from: All }"), &["gateway-listener"])
            ,set(INFRA, "ls", "gw", None, &["{ name: tls-only, port: 443, protocol: TLS, hostname: tls-only.com, tls: { mode: Passthrough }, allowedRoutes: { namespaces: { from: All }, kinds: [{ kind: HTTPRoute }] } }".into()])],
    );
    let out = run(&o);
    let (_, c) = set_listener(&out, INFRA, "ls", "tls-only");
    assert!(
        c.contains(&("ResolvedRefs", false, "InvalidRouteKinds")),
        "{c:?}"
    );
}

/// listenerset-reference-grant: a set's certificate in another namespace needs a grant
/// from ListenerSets of the set's namespace; the Gateway's grant is not inherited.
#[test]
fn a_sets_certificates_need_a_grant_to_listener_sets_of_its_namespace() {
    let https = |name: &str| {
        format!("{{ name: {name}, port: 443, protocol: HTTPS, hostname: {name}.com, tls: {{ certificateRefs: [{{ group: \"\", kind: Secret, name: certificate, namespace: web }}] }} }}")
    };
    let grant = |name: &str, kind: &str| {
        format!("apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {{ name: {name}, namespace: web }}\nspec:\n  from: [{{ group: gateway.networking.k8s.io, kind: {kind}, namespace: {INFRA} }}]\n  to: [{{ group: \"\", kind: Secret }}]\n---\n")
    };
    let gw = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{ name: gw, namespace: {INFRA} }}\nspec:\n  gatewayClassName: k8slb\n  allowedListeners: {{ namespaces: {{ from: All }} }}\n  listeners:\n  - {}\n---\n",
        https("gateway-listener")
    );
    let secret = SecretMeta {
        namespace: "web".into(),
        name: "certificate".into(),
        type_: "kubernetes.io/tls".into(),
        valid: true,
        version: "0123456789abcdef".into(),
        refusal: String::new(),
        dns_names: vec!["*.com".into()],
    };
    let mut docs = vec![
        gw,
        grant("for-gateway", "Gateway"),
        set(INFRA, "with-grant", "gw", None, &[https("with-grant")]),
        set(
            "other",
            "without-grant",
            "gw",
            None,
            &[https("without-grant")],
        ),
    ];
    // Without the grant to ListenerSets, the Gateway's grant does not serve the set.
    let out = translate_on(&objects(&docs), std::slice::from_ref(&secret), VIP);
    let (_, c) = set_listener(&out, INFRA, "with-grant", "with-grant");
    assert!(
        c.contains(&("ResolvedRefs", false, "RefNotPermitted")),
        "{c:?}"
    );
    docs.push(grant("for-sets", "ListenerSet"));
    let out = translate_on(&objects(&docs), std::slice::from_ref(&secret), VIP);
    let gw_l = &out.gateways[&format!("{INFRA}/gw").parse().unwrap()].listeners[0];
    assert_eq!(triples(&gw_l.conditions), ACCEPTED_LISTENER);
    assert_eq!(
        set_listener(&out, INFRA, "with-grant", "with-grant").1,
        ACCEPTED_LISTENER
    );
    assert_eq!(
        set_conditions(&out, INFRA, "with-grant"),
        [
            ("Accepted", true, "Accepted"),
            ("Programmed", true, "Programmed")
        ]
    );
    let (_, c) = set_listener(&out, "other", "without-grant", "without-grant");
    assert!(
        c.contains(&("ResolvedRefs", false, "RefNotPermitted")),
        "{c:?}"
    );
    assert_eq!(
        set_conditions(&out, "other", "without-grant"),
        [
            ("Accepted", false, "ListenersNotValid"),
            ("Programmed", false, "ListenersNotValid")
        ]
    );
    // The one Secret serves the Gateway's hostname and the granted set's, never the
    // refused set's.
    let l443 = out.routes.listeners.iter().find(|l| l.port == 443).unwrap();
    let hosts: Vec<String> = l443
        .tls
        .as_ref()
        .unwrap()
        .certificates
        .iter()
        .flat_map(|c| c.hosts.iter().map(|h| h.to_string()))
        .collect();
    assert_eq!(hosts, ["gateway-listener.com", "with-grant.com"]);
}

/// `limits.listenerSetListenersPerGateway`: the listeners beyond it, in precedence
/// order, are refused (`TooManyListeners`); the older keep serving.
#[test]
fn set_listeners_beyond_the_per_gateway_limit_are_too_many() {
    let o = objects(&[
        gateway("gw", Some("{ from: All }"), &["gateway-listener"]),
        set(
            INFRA,
            "a-newer",
            "gw",
            Some("2026-01-02T00:00:00Z"),
            &[http("n1", "All")],
        ),
        set(
            INFRA,
            "z-older",
            "gw",
            Some("2026-01-01T00:00:00Z"),
            &[http("o1", "All"), http("o2", "All")],
        ),
    ]);
    let out = translate_tuned(&o, &[], VIP, |i| i.listener_set_listeners_per_gateway = 2);
    assert_eq!(
        set_listener(&out, INFRA, "z-older", "o1").1,
        ACCEPTED_LISTENER
    );
    assert_eq!(
        set_listener(&out, INFRA, "z-older", "o2").1,
        ACCEPTED_LISTENER
    );
    let (_, c) = set_listener(&out, INFRA, "a-newer", "n1");
    assert!(
        c.contains(&("Accepted", false, "TooManyListeners")),
        "{c:?}"
    );
    assert!(
        c.contains(&("Programmed", false, "TooManyListeners")),
        "{c:?}"
    );
    assert_eq!(
        served_hosts(&out),
        ["gateway-listener.com", "o1.com", "o2.com"]
    );
    assert_eq!(attached_sets(&out, "gw"), Some(1));
}

/// A set whose Gateway is not ours (or does not exist) gets no status from us; a
/// route naming it no parent entry of ours.
#[test]
fn a_set_of_another_controllers_gateway_is_left_alone() {
    let o = objects(&[
        set(INFRA, "ls", "not-ours", None, &[http("x", "All")]),
        route(INFRA, "r", "infra-backend-v1", &[&ls_ref("ls", None)]),
    ]);
    let out = run(&o);
    assert!(out.listener_sets.is_empty());
    assert!(out.http_routes.is_empty());
}

// Tenancy through the whole plan: host ownership (docs/multi-tenancy.md) decides between
// the namespaces of routes, Ingresses and set listeners alike.

const POOL: &str = r#"{ "pools": {
    "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" } } }"#;

/// A `kubernetes.io/tls` Secret `ns/name` (the fixture's RSA certificate, for
/// `*.example.com`).
fn tls_secret(ns: &str, name: &str) -> k8s_openapi::api::core::v1::Secret {
    use base64::Engine;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/certs");
    let b = |f: &str| {
        base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(format!("{dir}/{f}")).unwrap())
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": { "name": name, "namespace": ns },
        "data": { "tls.crt": b("rsa.crt"), "tls.key": b("rsa.key") }
    }))
    .unwrap()
}

/// Gateway infra/web: sets of every namespace, routes of every namespace on its
/// `*.example.com` listeners (HTTPS 443 with the infra certificate, HTTP 80).
fn web_gateway() -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{ name: web, namespace: {INFRA}, creationTimestamp: \"2026-01-01T00:00:00Z\" }}\nspec:\n  gatewayClassName: k8slb\n  allowedListeners: {{ namespaces: {{ from: All }} }}\n  listeners:\n  - {{ name: https, port: 443, protocol: HTTPS, hostname: \"*.example.com\", tls: {{ certificateRefs: [{{ name: cert }}] }}, allowedRoutes: {{ namespaces: {{ from: All }} }} }}\n  - {{ name: http, port: 80, protocol: HTTP, hostname: \"*.example.com\", allowedRoutes: {{ namespaces: {{ from: All }} }} }}\n---\n"
    )
}

/// An HTTPS set listener entry `name` on `port` with the set's own certificate.
fn https_entry(name: &str, port: u16, hostname: Option<&str>) -> String {
    let hostname = hostname
        .map(|h| format!(", hostname: \"{h}\""))
        .unwrap_or_default();
    format!("{{ name: {name}, port: {port}, protocol: HTTPS{hostname}, tls: {{ certificateRefs: [{{ name: cert }}] }} }}")
}

/// An HTTPRoute `ns/name` created at second `created` of the day, to Service `ns/app`,
/// with these hostnames and parentRefs (flow YAML each).
fn tenant_route(
    ns: &str,
    name: &str,
    created: u32,
    hostnames: &[&str],
    parents: &[String],
) -> String {
    let kind = "HTTPRoute";
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{ name: {name}, namespace: {ns}, creationTimestamp: \"2026-01-01T00:00:{created:02}Z\" }}\nspec:\n  parentRefs: [{}]\n  hostnames: [{}]\n  rules:\n  - backendRefs: [{{ name: app, port: 80 }}]\n---\n",
        parents.join(", "),
        hostnames.iter().map(|h| format!("\"{h}\"")).collect::<Vec<_>>().join(", ")
    )
}

/// The time of second `s` of the day the tenancy fixtures are made.
fn at(s: u32) -> String {
    format!("2026-01-01T00:00:{s:02}Z")
}

/// The plan of the tenancy fixtures `docs`: namespaces `a` and `b`, each with Service
/// `app` and TLS Secret `cert` (infra has one too), on two LB nodes.
fn tenancy_plan(docs: &[String]) -> k8slb_common::plan::Plan {
    let mut o = objects(docs);
    o.nodes = nodes(2);
    for ns in ["a", "b"] {
        o.services.push(backend_svc(ns, "app", 80));
        o.secrets.push(tls_secret(ns, "cert"));
    }
    o.secrets.push(tls_secret(INFRA, "cert"));
    k8slb_common::plan::plan_round(
        &cfg(POOL),
        &k8slb_common::plan::PlanOptions::default(),
        &o,
        None,
    )
}

/// Where a request to the Gateway's address goes: the namespace of its backend, a
/// status code, or `none`.
fn goes(p: &k8slb_common::plan::Plan, port: u16, host: &str) -> String {
    use k8slb_common::routes::RouteAction;
    let ip = p.state.gateways[&format!("{INFRA}/web").parse().unwrap()].ips[0];
    match p.state.http.route(ip, port, host, "/") {
        Some(RouteAction::Forward { backends, .. }) => {
            backends[0].id.to_string().split('/').next().unwrap().into()
        }
        Some(RouteAction::Respond { status }) => status.code().to_string(),
        Some(other) => format!("{other:?}"),
        None => "none".into(),
    }
}

/// The namespace of the certificate a TLS client asking for `sni` on `port` gets.
fn certificate_of(p: &k8slb_common::plan::Plan, port: u16, sni: &str) -> String {
    use k8slb_common::routes::CertFile;
    let l = p.state.http.listeners.iter().find(|l| l.port == port);
    match l.and_then(|l| l.tls.as_ref()?.certificate_for(sni)) {
        Some(CertFile::Secret { namespace, .. }) => namespace.to_string(),
        Some(other) => format!("{other:?}"),
        None => "none".into(),
    }
}

/// The reasons of the problems (Events) on ListenerSet `ns/name`.
fn set_problems(p: &k8slb_common::plan::Plan, ns: &str, name: &str) -> Vec<String> {
    let obj = format!("ListenerSet {ns}/{name}");
    p.state
        .problems
        .iter()
        .filter(|x| x.object.to_string() == obj)
        .map(|x| x.reason.to_string())
        .collect()
}

/// One hostile (or harmless) case: the documents, the set listeners refused for a
/// host another namespace owns, those served, where requests go and whose certificate
/// answers.
struct OwnershipCase {
    name: &'static str,
    docs: Vec<String>,
    refused: &'static [(&'static str, &'static str, &'static str)],
    served: &'static [(&'static str, &'static str, &'static str)],
    goes: &'static [(u16, &'static str, &'static str)],
    certificates: &'static [(u16, &'static str, &'static str)],
}

fn ownership_cases() -> Vec<OwnershipCase> {
    let web = || gw_ref("web", None);
    let set_x = || ls_ref_in("b", "x");
    vec![
        OwnershipCase {
            name: "a newer set of b takes no host a's older route owns under the Gateway's wildcard",
            docs: vec![
                web_gateway(),
                tenant_route("a", "bank", 1, &["bank.example.com"], &[web()]),
                set("b", "x", "web", Some(&at(2)), &[https_entry("bank", 443, Some("bank.example.com"))]),
                tenant_route("b", "grab", 3, &[], &[set_x()]),
            ],
            refused: &[("b", "x", "bank")],
            served: &[],
            goes: &[(443, "bank.example.com", "a")],
            certificates: &[(443, "bank.example.com", INFRA)],
        },
        OwnershipCase {
            name: "a newer set of b takes no name under an older set's wildcard of a",
            docs: vec![
                web_gateway(),
                set("a", "shop", "web", Some(&at(1)), &[https_entry("shop", 8443, Some("*.shop.example.com"))]),
                tenant_route("a", "shop", 2, &[], &[ls_ref_in("a", "shop")]),
                set("b", "x", "web", Some(&at(3)), &[https_entry("api", 8443, Some("api.shop.example.com"))]),
                tenant_route("b", "grab", 4, &[], &[set_x()]),
            ],
            refused: &[("b", "x", "api")],
            served: &[("a", "shop", "shop")],
            goes: &[(8443, "api.shop.example.com", "a")],
            certificates: &[(8443, "api.shop.example.com", "a")],
        },
        OwnershipCase {
            name: "a newer wildcard set listener is refused over an older set's name of another namespace",
            docs: vec![
                web_gateway(),
                set("a", "pay", "web", Some(&at(1)), &[https_entry("pay", 8443, Some("pay.shop.example.com"))]),
                tenant_route("a", "pay", 2, &[], &[ls_ref_in("a", "pay")]),
                set("b", "x", "web", Some(&at(3)), &[https_entry("all", 8443, Some("*.shop.example.com"))]),
                tenant_route("b", "grab", 4, &[], &[set_x()]),
            ],
            refused: &[("b", "x", "all")],
            served: &[("a", "pay", "pay")],
            goes: &[(8443, "pay.shop.example.com", "a"), (8443, "www.shop.example.com", "none")],
            certificates: &[(8443, "pay.shop.example.com", "a")],
        },
        OwnershipCase {
            name: "a TLS passthrough set listener gets no SNI another namespace owns",
            docs: vec![
                web_gateway(),
                tenant_route("a", "bank", 1, &["bank.example.com"], &[web()]),
                set("b", "x", "web", Some(&at(2)), &["{ name: tls, port: 9443, protocol: TLS, hostname: bank.example.com, tls: { mode: Passthrough } }".to_string()]),
                "apiVersion: gateway.networking.k8s.io/v1\nkind: TLSRoute\nmetadata: { name: grab, namespace: b }\nspec:\n  parentRefs: [{ kind: ListenerSet, group: gateway.networking.k8s.io, name: x }]\n  hostnames: [bank.example.com]\n  rules: [{ backendRefs: [{ name: app, port: 80 }] }]\n---\n".to_string(),
            ],
            refused: &[("b", "x", "tls")],
            served: &[],
            goes: &[(80, "bank.example.com", "a")],
            certificates: &[],
        },
        OwnershipCase {
            name: "an older set listener's hostname is its namespace's: a newer route of another is refused",
            docs: vec![
                web_gateway(),
                set("b", "x", "web", Some(&at(1)), &[https_entry("own", 443, Some("own.example.com"))]),
                tenant_route("b", "own", 2, &[], &[set_x()]),
                tenant_route("a", "late", 3, &["own.example.com"], &[web()]),
            ],
            refused: &[],
            served: &[("b", "x", "own")],
            goes: &[(443, "own.example.com", "b"), (80, "own.example.com", "none")],
            certificates: &[(443, "own.example.com", "b")],
        },
        OwnershipCase {
            name: "an HTTPS set listener without a hostname never becomes the port's default certificate",
            docs: vec![
                web_gateway(),
                set("b", "x", "web", Some(&at(1)), &[https_entry("any", 443, None)]),
                tenant_route("b", "grab", 2, &[], &[set_x()]),
            ],
            refused: &[],
            served: &[],
            goes: &[(443, "other.org", "none")],
            certificates: &[(443, "other.org", INFRA), (443, "bank.example.com", INFRA)],
        },
    ]
}

/// Host ownership covers set listeners: a set listener whose hostname another
/// namespace owns, or overlaps (a wildcard either way), is refused (HostnameConflict,
/// an Event on the set) and serves nothing, neither routes nor its certificate; an
/// accepted one owns its hostname for its namespace; no set listener supplies a port's
/// default certificate.
#[test]
fn a_set_listener_never_takes_a_host_another_namespace_owns() {
    for case in ownership_cases() {
        let p = tenancy_plan(&case.docs);
        let out = &p.gateway;
        for (ns, set, l) in case.refused {
            let (_, c) = set_listener(out, ns, set, l);
            assert!(
                c.contains(&("Accepted", false, "HostnameConflict")),
                "{}: {ns}/{set}/{l}: {c:?}",
                case.name
            );
            assert!(
                set_problems(&p, ns, set)
                    .iter()
                    .any(|r| r == "HostnameConflict"),
                "{}: {:?}",
                case.name,
                p.state.problems
            );
        }
        for (ns, set, l) in case.served {
            let (_, c) = set_listener(out, ns, set, l);
            assert_eq!(c, ACCEPTED_LISTENER, "{}: {ns}/{set}/{l}", case.name);
        }
        for (port, host, want) in case.goes {
            assert_eq!(goes(&p, *port, host), *want, "{}: {host}:{port}", case.name);
        }
        for (port, sni, want) in case.certificates {
            assert_eq!(
                certificate_of(&p, *port, sni),
                *want,
                "{}: {sni}:{port}",
                case.name
            );
        }
    }
}

/// Set listeners count among their Gateway's ports: one on a port the LB nodes keep
/// (`reservedPorts`), or on a port another tenant of the Gateway's shared address holds
/// (a Service sharing it by consent), is `PortUnavailable` (an Event on the set) and
/// reaches no LB node's config; the Gateway keeps its address.
#[test]
fn a_set_listener_on_a_port_the_gateway_may_not_have_is_port_unavailable() {
    let shared = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{ name: web, namespace: {INFRA}, creationTimestamp: \"2026-01-01T00:00:00Z\", annotations: {{ loadbalancer/allow-shared-ip: k }} }}\nspec:\n  gatewayClassName: k8slb\n  addresses: [{{ value: 198.18.0.110 }}]\n  allowedListeners: {{ namespaces: {{ from: All }} }}\n  listeners:\n  - {{ name: http, port: 80, protocol: HTTP, hostname: \"*.example.com\" }}\n---\n"
    );
    let mut o = objects(&[
        shared,
        set(
            "b",
            "x",
            "web",
            Some(&at(2)),
            &[
                "{ name: ssh, port: 22, protocol: TCP }".into(),
                "{ name: kubelet, port: 10250, protocol: HTTP, hostname: k.example.org }".into(),
                "{ name: db, port: 5432, protocol: TCP }".into(),
                "{ name: fine, port: 8080, protocol: HTTP, hostname: fine.example.org }".into(),
            ],
        ),
    ]);
    o.nodes = nodes(2);
    o.services.push(
        svc(INFRA, "db")
            .port(5432)
            .ip("198.18.0.110")
            .ann("loadbalancer/allow-shared-ip", "k")
            .created(1)
            .build(),
    );
    let p = k8slb_common::plan::plan_round(
        &cfg(POOL),
        &k8slb_common::plan::PlanOptions::default(),
        &o,
        None,
    );
    let gw = &p.state.gateways[&format!("{INFRA}/web").parse().unwrap()];
    assert_eq!(gw.ips.len(), 1, "{:?}", p.state.problems);
    for l in ["ssh", "kubelet", "db"] {
        let (_, c) = set_listener(&p.gateway, "b", "x", l);
        assert!(
            c.contains(&("Accepted", false, "PortUnavailable")),
            "{l}: {c:?}"
        );
    }
    assert_eq!(
        set_listener(&p.gateway, "b", "x", "fine").1,
        ACCEPTED_LISTENER
    );
    assert!(set_problems(&p, "b", "x")
        .iter()
        .any(|r| r == "PortUnavailable"));
    let http: Vec<u16> = p.state.http.listeners.iter().map(|l| l.port).collect();
    let streams: Vec<u16> = p.state.http.streams.iter().map(|s| s.port).collect();
    assert_eq!((http, streams), (vec![80, 8080], vec![]));
}

/// A set of a Gateway that is not accepted (its parameters refused, or none of its own
/// listeners valid) says `ParentNotAccepted` and serves nothing: no listener of it is
/// programmed, no route attached to it is served.
#[test]
fn the_sets_of_a_gateway_that_is_not_accepted_are_not_served() {
    let not_accepted = [
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{ name: gw, namespace: {INFRA} }}\nspec:\n  gatewayClassName: k8slb\n  infrastructure: {{ parametersRef: {{ group: \"\", kind: ConfigMap, name: nope }} }}\n  allowedListeners: {{ namespaces: {{ from: All }} }}\n  listeners:\n  - {{ name: http, port: 80, protocol: HTTP, hostname: gateway-listener.com }}\n---\n"
        ),
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{ name: gw, namespace: {INFRA} }}\nspec:\n  gatewayClassName: k8slb\n  allowedListeners: {{ namespaces: {{ from: All }} }}\n  listeners:\n  - {{ name: odd, port: 80, protocol: SCTP }}\n---\n"
        ),
    ];
    for gw in not_accepted {
        let o = objects(&[
            gw,
            set(INFRA, "ls", "gw", None, &[http("tenant", "Same")]),
            route(INFRA, "r", "infra-backend-v1", &[&ls_ref("ls", None)]),
        ]);
        let out = run(&o);
        let st = set_status(&out, INFRA, "ls");
        assert_eq!(
            triples(&st.conditions),
            [
                ("Accepted", false, "ParentNotAccepted"),
                ("Programmed", false, "ParentNotAccepted")
            ]
        );
        assert!(
            st.listeners.iter().all(|l| !l
                .conditions
                .iter()
                .any(|c| c.type_.as_str() == "Programmed" && c.status)),
            "{st:?}"
        );
        assert!(
            !served_hosts(&out).contains(&"tenant.com".to_string()),
            "{:?}",
            served_hosts(&out)
        );
    }
}

/// A set listener served with a certificate that does not cover its hostname says so
/// as an Event on the set (`CertificateHostMismatch`), as a Gateway's does on the
/// Gateway.
#[test]
fn a_set_listeners_certificate_not_for_its_hostname_is_an_event_on_the_set() {
    let p = tenancy_plan(&[
        web_gateway(),
        set(
            "b",
            "x",
            "web",
            Some(&at(1)),
            &[https_entry("shop", 443, Some("shop.example.org"))],
        ),
    ]);
    assert_eq!(
        set_listener(&p.gateway, "b", "x", "shop").1,
        ACCEPTED_LISTENER
    );
    assert!(
        set_problems(&p, "b", "x")
            .iter()
            .any(|r| r == "CertificateHostMismatch"),
        "{:?}",
        p.state.problems
    );
}

/// What is wrong with the Gateway's client certificate validation (a ConfigMap of its
/// namespace that does not exist) is not told to a set's namespace: the set listener
/// is refused with a generic message.
#[test]
fn a_set_listener_is_not_told_what_the_gateways_frontend_validation_names() {
    let gw = web_gateway().replace(
        "  allowedListeners:",
        "  tls: { frontend: { default: { validation: { caCertificateRefs: [{ group: \"\", kind: ConfigMap, name: secret-ca-name }] } } } }\n  allowedListeners:",
    );
    let p = tenancy_plan(&[
        gw,
        set(
            "b",
            "x",
            "web",
            Some(&at(1)),
            &[https_entry("shop", 443, Some("shop.example.org"))],
        ),
    ]);
    let st = set_status(&p.gateway, "b", "x");
    let text = format!("{st:?}");
    assert!(text.contains("ResolvedRefs"), "{text}");
    assert!(!text.contains("secret-ca-name"), "{text}");
    let events: Vec<&String> = p
        .state
        .problems
        .iter()
        .filter(|x| x.object.to_string() == "ListenerSet b/x")
        .map(|x| &x.message)
        .collect();
    assert!(!events.is_empty());
    assert!(
        events.iter().all(|m| !m.contains("secret-ca-name")),
        "{events:?}"
    );
}

/// Sets created at the same second take precedence by `<namespace>/<name>` as one
/// string (the specification's tie-break: `team-b/x` before `team/x`, as `-` sorts
/// before `/`), and host ownership breaks the tie the same way: the earlier set's
/// listener is served, the later's refused, never both.
#[test]
fn sets_of_the_same_age_take_precedence_by_namespace_slash_name() {
    let docs = [
        web_gateway(),
        set("team", "x", "web", Some(&at(1)), &[http("shop", "Same")]),
        set("team-b", "x", "web", Some(&at(1)), &[http("shop", "Same")]),
    ];
    let translated = run(&objects(&docs));
    let planned = tenancy_plan(&docs);
    for out in [&translated, &planned.gateway] {
        assert_eq!(
            set_listener(out, "team-b", "x", "shop").1,
            ACCEPTED_LISTENER
        );
        let (_, later) = set_listener(out, "team", "x", "shop");
        assert!(
            later.contains(&("Accepted", false, "HostnameConflict")),
            "{later:?}"
        );
    }
}

/// A set's TLS listener that terminates needs a hostname, as an HTTPS one does (its
/// certificate would otherwise answer every server name no other listener of the port
/// names); with one it is served, and a passthrough set listener on the port of the
/// Gateway's terminating one is a protocol conflict.
#[test]
fn a_sets_terminating_tls_listener_needs_a_hostname_and_its_ports_mode() {
    let gw = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: { name: gw, namespace: gateway-conformance-infra }\nspec:\n  gatewayClassName: k8slb\n  allowedListeners: { namespaces: { from: All } }\n  listeners:\n  - { name: term, port: 8443, protocol: TLS, hostname: gw.example, tls: { mode: Terminate, certificateRefs: [{ name: c }] } }\n---\n".to_string();
    let o = objects(&[
        gw,
        set(
            INFRA,
            "ls",
            "gw",
            None,
            &[
                "{ name: any, port: 9443, protocol: TLS, tls: { mode: Terminate, certificateRefs: [{ name: c }] } }".into(),
                "{ name: pass, port: 8443, protocol: TLS, hostname: p.example, tls: { mode: Passthrough } }".into(),
                "{ name: named, port: 9444, protocol: TLS, hostname: n.example, tls: { mode: Terminate, certificateRefs: [{ name: c }] } }".into(),
            ],
        ),
    ]);
    let secret = k8slb_common::ingress::SecretMeta {
        namespace: INFRA.into(),
        name: "c".into(),
        type_: "kubernetes.io/tls".into(),
        valid: true,
        version: "0123456789abcdef".into(),
        refusal: String::new(),
        dns_names: vec!["*.example".into()],
    };
    let out = translate_on(&o, &[secret], VIP);
    let (_, c) = set_listener(&out, INFRA, "ls", "any");
    assert!(
        c.contains(&("Accepted", false, "UnsupportedValue")),
        "{c:?}"
    );
    let (_, c) = set_listener(&out, INFRA, "ls", "pass");
    assert!(
        c.contains(&("Conflicted", true, "ProtocolConflict")),
        "{c:?}"
    );
    let (_, c) = set_listener(&out, INFRA, "ls", "named");
    assert_eq!(c, ACCEPTED_LISTENER, "{c:?}");
    let mut ports: Vec<(u16, bool)> = out
        .routes
        .streams
        .iter()
        .map(|s| (s.port, s.terminate.is_some()))
        .collect();
    ports.sort();
    assert_eq!(ports, [(8443, true), (9444, true)]);
}
