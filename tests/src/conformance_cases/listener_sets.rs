//! The Gateway API v1.6.1 ListenerSet conformance tests (feature `ListenerSet`, an
//! extended feature of the Gateway: `pkg/features/gateway.go`), as data: each upstream
//! test's manifest and the facts its Go file (`conformance/tests/listenerset-*.go`)
//! states, in the order it states them. See [`crate::conformance_cases`] for the shape.

use super::{case, requests, route_cond};
use crate::conformance::{get, nn, Case, Check, Cond, Req};

const FEATURE: &[&str] = &["ListenerSet"];
const V1: &str = "infra-backend-v1";
const V2: &str = "infra-backend-v2";
const V3: &str = "infra-backend-v3";

fn cond(type_: &'static str, status: &'static str, reason: &'static str) -> Cond {
    Cond {
        type_,
        status,
        reason,
    }
}

/// The suite's `generateAcceptedListenerConditions`.
fn accepted_listener() -> Vec<Cond> {
    vec![
        cond("ResolvedRefs", "True", ""),
        cond("Accepted", "True", ""),
        cond("Programmed", "True", ""),
    ]
}

/// A listener conflicted for `reason` (the suite's `...ConflictedListenerConditions`).
fn conflicted(reason: &'static str) -> Vec<Cond> {
    vec![
        cond("Accepted", "False", reason),
        cond("Programmed", "False", reason),
        cond("Conflicted", "True", reason),
    ]
}

fn attached_sets(gateway: &str, count: u64) -> Check {
    Check::AttachedSets {
        gateway: nn(gateway),
        count,
    }
}

fn gateway_accepted(gateway: &str) -> Check {
    Check::GatewayCondition {
        gateway: nn(gateway),
        cond: cond("Accepted", "True", ""),
    }
}

fn set_cond(set: &str, type_: &'static str, status: &'static str, reason: &'static str) -> Check {
    Check::SetCondition {
        set: nn(set),
        cond: cond(type_, status, reason),
    }
}

/// The set's Accepted and Programmed both `status` with `reason`.
fn set_both(set: &str, status: &'static str, reason: &'static str) -> Vec<Check> {
    vec![
        set_cond(set, "Accepted", status, reason),
        set_cond(set, "Programmed", status, reason),
    ]
}

fn set_listener(set: &str, listener: &'static str, conds: Vec<Cond>) -> Check {
    Check::SetListenerConds {
        set: nn(set),
        listeners: vec![listener],
        conds,
    }
}

fn set_listeners(set: &str, listeners: &[(&'static str, u64)]) -> Check {
    Check::SetListeners {
        set: nn(set),
        listeners: listeners.to_vec(),
    }
}

/// `RoutesAndParentMustBeAccepted` for a ListenerSet.
fn routes_on_set(set: &str, routes: &[&str]) -> Check {
    Check::ParentAccepted {
        parent_kind: "ListenerSet",
        parent: nn(set),
        routes: routes.iter().map(|r| nn(r)).collect(),
        listeners: true,
    }
}

/// `GatewayAndHTTPRoutesMustBeAccepted` (the parent entries compared with their group
/// and kind).
fn routes_on_gateway(gateway: &str, routes: &[&str]) -> Check {
    Check::ParentAccepted {
        parent_kind: "Gateway",
        parent: nn(gateway),
        routes: routes.iter().map(|r| nn(r)).collect(),
        listeners: true,
    }
}

/// The suite's `HTTPRouteMustHaveParents` for one parent.
fn only_parent(kind: &'static str, parent: &str, route: &str) -> Check {
    Check::ParentAccepted {
        parent_kind: kind,
        parent: nn(parent),
        routes: vec![nn(route)],
        listeners: false,
    }
}

/// A request for `path` on `host`, answered by `backend` (infra), or 404 without one.
fn on(host: &str, path: &str, backend: Option<&str>) -> Req {
    let r = get(path).host(host);
    match backend {
        Some(b) => r.to(b),
        None => r.status(404),
    }
}

pub fn cases() -> Vec<Case> {
    let mut v =
        vec![
        case("ListenerSetAllowedNamespaceNone", "listenerset-allowed-namespace-none.yaml")
            .ext(FEATURE)
            .check(gateway_accepted("gateway-does-not-allow-listenerset"))
            .check(attached_sets("gateway-does-not-allow-listenerset", 0))
            .checks(set_both("listenerset-not-allowed", "False", "NotAllowed")),
        case("ListenerSetDefaultNotAllowed", "listenerset-default-not-allowed.yaml")
            .ext(FEATURE)
            .check(gateway_accepted("gateway-default-does-not-allow-listenerset"))
            .check(attached_sets("gateway-default-does-not-allow-listenerset", 0))
            .checks(set_both("listenerset-default-not-allowed", "False", "NotAllowed")),
        case("ListenerSetAllowedNamespaceSame", "listenerset-allowed-namespace-same.yaml")
            .ext(FEATURE)
            .check(gateway_accepted("gateway-allows-listenerset-in-same-namespace"))
            .check(attached_sets("gateway-allows-listenerset-in-same-namespace", 1))
            .check(set_cond("listenerset-in-same-namespace", "Accepted", "True", "Accepted"))
            .check(set_cond("listenerset-in-same-namespace", "Programmed", "True", "Programmed"))
            .check(set_listener(
                "listenerset-in-same-namespace",
                "listenerset-in-same-namespace-listener",
                accepted_listener(),
            ))
            .checks(set_both(
                "gateway-api-listenerset-not-allowed-ns/listenerset-in-different-namespace",
                "False",
                "NotAllowed",
            )),
        case(
            "ListenerSetAllowedNamespaceSelector",
            "listenerset-allowed-namespace-selector.yaml",
        )
        .ext(FEATURE)
        .check(gateway_accepted("gateway-allows-listenerset-in-selected-namespace"))
        .check(attached_sets("gateway-allows-listenerset-in-selected-namespace", 1))
        .check(set_cond(
            "gateway-api-listenerset-selector-allowed-ns/listenerset-in-selected-namespace",
            "Accepted",
            "True",
            "Accepted",
        ))
        .check(set_cond(
            "gateway-api-listenerset-selector-allowed-ns/listenerset-in-selected-namespace",
            "Programmed",
            "True",
            "Programmed",
        ))
        .check(set_listener(
            "gateway-api-listenerset-selector-allowed-ns/listenerset-in-selected-namespace",
            "listenerset-in-selected-namespace-listener",
            accepted_listener(),
        ))
        .checks(set_both(
            "gateway-api-listenerset-selector-not-allowed-ns/listenerset-not-in-selected-namespace",
            "False",
            "NotAllowed",
        )),
        case(
            "ListenerSetAllowedRoutesSupportedKinds",
            "listenerset-allowed-routes-supported-kinds.yaml",
        )
        .ext(FEATURE)
        .check(gateway_accepted("gateway-with-listener-sets-test-supported-route-kinds"))
        .check(set_listener(
            "listenerset-test-allowed-routes-supported-kinds",
            "listener-set-listener-allowed-routes-tls-only",
            vec![cond("ResolvedRefs", "False", "InvalidRouteKinds")],
        )),
    ];
    v.extend([
        allowed_routes_namespaces(),
        http_routing(),
        conflicts(
            "ListenerSetHostnameConflict",
            "hostname",
            "HostnameConflict",
        ),
        conflicts(
            "ListenerSetProtocolConflict",
            "protocol",
            "ProtocolConflict",
        ),
        dual_parent_ref(),
        section_name_not_found(),
        reference_grant(),
        route_status_scoped(),
    ]);
    v
}

fn allowed_routes_namespaces() -> Case {
    const GW: &str = "gateway-with-listener-sets-test-allowed-routes";
    const LS: &str = "listenerset-test-allowed-routes-namespaces";
    const CROSS: &str = "gateway-api-ls-cross-ns/listenerset-test-allowed-routes-cross-ns";
    let all = "listener-set-listener-allowed-routes-all.com";
    let same = "listener-set-listener-allowed-routes-same.com";
    let sel = "listener-set-listener-allowed-routes-selector.com";
    let cross = "listener-set-listener-allowed-routes-cross-ns-same.com";
    case(
        "ListenerSetAllowedRoutesNamespaces",
        "listenerset-allowed-routes-namespaces.yaml",
    )
    .ext(FEATURE)
    .check(gateway_accepted(GW))
    .check(attached_sets(GW, 2))
    .check(routes_on_set(
        LS,
        &[
            "route-in-same-namespace",
            "gateway-api-routes-allowed-ns/route-in-selected-namespace",
            "gateway-api-routes-not-allowed-ns/route-not-in-selected-namespace",
        ],
    ))
    .check(set_listeners(
        LS,
        &[
            ("listener-set-listener-allowed-routes-all", 3),
            ("listener-set-listener-allowed-routes-same", 1),
            ("listener-set-listener-allowed-routes-selector", 1),
        ],
    ))
    .check(requests(
        GW,
        vec![
            on(all, "/route-in-same-namespace", Some(V1)),
            on(all, "/route-in-selected-namespace", Some(V2)),
            on(all, "/route-not-in-selected-namespace", Some(V3)),
            on(same, "/route-in-same-namespace", Some(V1)),
            on(same, "/route-in-selected-namespace", None),
            on(same, "/route-not-in-selected-namespace", None),
            on(sel, "/route-in-same-namespace", None),
            on(sel, "/route-in-selected-namespace", Some(V2)),
            on(sel, "/route-not-in-selected-namespace", None),
        ],
    ))
    .check(routes_on_set(
        CROSS,
        &["gateway-api-ls-cross-ns/route-in-listenerset-namespace"],
    ))
    .check(route_cond(
        "route-in-gateway-namespace",
        CROSS,
        "Accepted",
        "False",
        "NotAllowedByListeners",
    ))
    .check(set_listeners(
        CROSS,
        &[("listener-set-listener-allowed-routes-cross-ns-same", 1)],
    ))
    .check(requests(
        GW,
        vec![
            on(cross, "/route-in-listenerset-namespace", Some(V1)),
            on(cross, "/route-in-gateway-namespace", None),
        ],
    ))
}

fn http_routing() -> Case {
    const GW: &str = "gateway-with-listener-sets-http-routing";
    let hosts = [
        "gateway-listener-1.com",
        "gateway-listener-2.com",
        "listener-set-http-routing-1-listener-1.com",
        "listener-set-http-routing-1-listener-2.com",
        "listener-set-http-routing-2-listener-1.com",
        "listener-set-http-routing-2-listener-2.com",
    ];
    // (path, the backend of each host in `hosts`' order; None: 404).
    let table: [(&str, [Option<&str>; 6]); 6] = [
        ("/route", [Some(V1); 6]),
        (
            "/gateway-route",
            [Some(V2), Some(V2), None, None, None, None],
        ),
        (
            "/gateway-section-route",
            [Some(V3), None, None, None, None, None],
        ),
        (
            "/listener-set-http-routing-1-route",
            [None, None, Some(V2), Some(V2), None, None],
        ),
        (
            "/listener-set-http-routing-1-section-route",
            [None, None, Some(V3), None, None, None],
        ),
        (
            "/listener-set-http-routing-2-route",
            [None, None, None, None, Some(V2), Some(V2)],
        ),
    ];
    let reqs = table
        .iter()
        .flat_map(|(path, backends)| {
            hosts
                .iter()
                .zip(backends)
                .map(move |(h, b)| on(h, path, *b))
        })
        .collect();
    case("ListenerSetHTTPRouting", "listenerset-http-routing.yaml")
        .ext(FEATURE)
        .check(routes_on_gateway(
            GW,
            &[
                "attaches-to-all-listeners",
                "gateway-route",
                "gateway-section-route",
            ],
        ))
        .check(attached_sets(GW, 2))
        .check(routes_on_set(
            "listener-set-http-routing-1",
            &[
                "attaches-to-all-listeners",
                "listener-set-http-routing-1-route",
                "listener-set-http-routing-1-section-route",
            ],
        ))
        .check(set_listeners(
            "listener-set-http-routing-1",
            &[
                ("listener-set-http-routing-1-listener-1", 3),
                ("listener-set-http-routing-1-listener-2", 2),
            ],
        ))
        .check(routes_on_set(
            "listener-set-http-routing-2",
            &[
                "attaches-to-all-listeners",
                "listener-set-http-routing-2-route",
            ],
        ))
        .check(set_listeners(
            "listener-set-http-routing-2",
            &[
                ("listener-set-http-routing-2-listener-1", 2),
                ("listener-set-http-routing-2-listener-2", 2),
            ],
        ))
        .check(requests(GW, reqs))
}

/// ListenerSetHostnameConflict and ListenerSetProtocolConflict: the same facts, `what`
/// in the names.
fn conflicts(name: &'static str, what: &'static str, reason: &'static str) -> Case {
    let gw = format!("gateway-with-listenerset-{what}-conflict");
    let ls = |s: &str| format!("listenerset-with-{what}-conflict-with-{s}");
    let with_gw: &'static str = if what == "hostname" {
        "hostname-conflict-with-gateway-listener"
    } else {
        "protocol-conflict-with-gateway-listener"
    };
    let with_ls: &'static str = if what == "hostname" {
        "hostname-conflict-with-listener-set-listener"
    } else {
        "protocol-conflict-with-listener-set-listener"
    };
    let file = if what == "hostname" {
        "listenerset-hostname-conflict.yaml"
    } else {
        "listenerset-protocol-conflict.yaml"
    };
    let mut c = case(name, file).ext(FEATURE).check(gateway_accepted(&gw));
    for l in ["gateway-listener", with_gw] {
        for cd in accepted_listener() {
            c = c.check(Check::ListenerCondition {
                gateway: nn(&gw),
                listener: l,
                cond: cd,
            });
        }
    }
    c.check(attached_sets(&gw, 2))
        .check(set_cond(&ls("gateway-1"), "Accepted", "True", ""))
        .check(set_cond(
            &ls("gateway-1"),
            "Programmed",
            "True",
            "Programmed",
        ))
        .check(set_listener(
            &ls("gateway-1"),
            "listener-set-1-listener",
            accepted_listener(),
        ))
        .check(set_listener(&ls("gateway-1"), with_gw, conflicted(reason)))
        .check(set_listener(&ls("gateway-1"), with_ls, accepted_listener()))
        .checks(set_both(&ls("gateway-2"), "False", "ListenersNotValid"))
        .check(set_listener(&ls("gateway-2"), with_gw, conflicted(reason)))
        .check(set_cond(&ls("listener-set-1"), "Accepted", "True", ""))
        .check(set_cond(
            &ls("listener-set-1"),
            "Programmed",
            "True",
            "Programmed",
        ))
        .check(set_listener(
            &ls("listener-set-1"),
            "listener-set-2-listener",
            accepted_listener(),
        ))
        .check(set_listener(
            &ls("listener-set-1"),
            with_ls,
            conflicted(reason),
        ))
        .checks(set_both(
            &ls("listener-set-2"),
            "False",
            "ListenersNotValid",
        ))
        .check(set_listener(
            &ls("listener-set-2"),
            with_ls,
            conflicted(reason),
        ))
}

fn dual_parent_ref() -> Case {
    const GW: &str = "gateway-dual-parentref";
    const LS: &str = "ls-dual-parentref";
    case(
        "ListenerSetDualParentRefIndependence",
        "listenerset-dual-parentref-independence.yaml",
    )
    .ext(FEATURE)
    .check(gateway_accepted(GW))
    .check(attached_sets(GW, 1))
    .check(set_listeners(LS, &[("ls-dual-parentref-listener", 2)]))
    .check(route_cond(
        "route-dual-parentref-both",
        GW,
        "Accepted",
        "True",
        "",
    ))
    .check(route_cond(
        "route-dual-parentref-both",
        LS,
        "Accepted",
        "True",
        "",
    ))
    .check(requests(
        GW,
        vec![
            on("gw-dual.com", "/dualboth", Some(V1)),
            on("ls-dual.com", "/dualboth", Some(V1)),
        ],
    ))
    .check(route_cond(
        "route-dual-parentref-one",
        GW,
        "Accepted",
        "False",
        "NoMatchingParent",
    ))
    .check(route_cond(
        "route-dual-parentref-one",
        LS,
        "Accepted",
        "True",
        "",
    ))
    .check(routes_on_set(LS, &["route-dual-parentref-one"]))
    .check(requests(
        GW,
        vec![
            on("ls-dual.com", "/dualone", Some(V2)),
            on("gw-dual.com", "/dualone", None),
        ],
    ))
}

fn section_name_not_found() -> Case {
    const GW: &str = "gateway-section-name";
    case(
        "ListenerSetGatewayParentSectionNameNotFound",
        "listenerset-gateway-parent-section-name-not-found.yaml",
    )
    .ext(FEATURE)
    .check(gateway_accepted(GW))
    .check(attached_sets(GW, 1))
    .check(routes_on_set(
        "listenerset-section-name",
        &["route-via-listenerset"],
    ))
    .check(route_cond(
        "route-via-gateway",
        GW,
        "Accepted",
        "False",
        "NoMatchingParent",
    ))
    .check(requests(
        GW,
        vec![
            on("ls-section-name.com", "/goodsection", Some(V1)),
            on("gw-section.com", "/badsection", None),
        ],
    ))
}

fn reference_grant() -> Case {
    const WITHOUT: &str =
        "gateway-api-listener-sets-test-reference-grant-ns/listenerset-without-reference-grant";
    case(
        "ListenerSetReferenceGrant",
        "listenerset-reference-grant.yaml",
    )
    .ext(FEATURE)
    .check(gateway_accepted(
        "gateway-with-listener-sets-test-reference-grant",
    ))
    .check(set_cond(
        "listenerset-with-reference-grant",
        "Accepted",
        "True",
        "",
    ))
    .check(set_cond(
        "listenerset-with-reference-grant",
        "Programmed",
        "True",
        "",
    ))
    .check(set_listener(
        "listenerset-with-reference-grant",
        "listenerset-with-reference-grant-listener",
        vec![cond("ResolvedRefs", "True", "")],
    ))
    .checks(set_both(WITHOUT, "False", "ListenersNotValid"))
    .check(set_listener(
        WITHOUT,
        "listenerset-without-reference-grant-listener",
        vec![cond("ResolvedRefs", "False", "RefNotPermitted")],
    ))
}

fn route_status_scoped() -> Case {
    const GW: &str = "gateway-parentref";
    const LS: &str = "listenerset-parentref";
    case(
        "ListenerSetRouteStatusScopedToParentRef",
        "listenerset-route-status-scoped-to-parentref.yaml",
    )
    .ext(FEATURE)
    .check(gateway_accepted(GW))
    .check(attached_sets(GW, 1))
    .check(set_listeners(LS, &[("listenerset-parentref-listener", 1)]))
    .check(route_cond(
        "route-parentref-gwonly",
        GW,
        "Accepted",
        "True",
        "",
    ))
    .check(only_parent("Gateway", GW, "route-parentref-gwonly"))
    .check(routes_on_set(LS, &["route-parentref-lsonly"]))
    .check(only_parent("ListenerSet", LS, "route-parentref-lsonly"))
}
