//! The Gateway API v1.6.1 conformance tests, as data: for each upstream test (its
//! `ShortName`), the manifest it applies, the profile and extended features it belongs
//! to, and its expectations transcribed from `conformance/tests/<file>.go` as facts
//! (which request, which answer, which status condition). No upstream code is here.
//!
//! Adding a test: append a [`case`] to [`cases`] with its manifest file name, then
//! `.ext(&["Feature"])` for an extended test, its checks (`.check(accepted(..))`,
//! `.check(requests(..))`, ...; `.and("file")` for a second manifest), or `.skip("why")` / `.skip_on("nginx", "why")` when
//! k8slb does not claim it (a SKIP is reported, never counted as a pass), or
//! `.expect_fail("", "why")` for a known failure (run, reported as FAIL; the lab test
//! fails only once it passes, so that the entry goes). The runner
//! (`tests/tests/e2e_conformance.rs`) picks it up; nothing else changes.

use crate::conformance::{
    get, nn, rpc, Case, Check, Cond, GrpcReq, Redirect, Req, APP, GRPC_UNIMPLEMENTED, WEB,
};
use serde_json::{json, Value};

mod listener_sets;

const HTTP: &str = "GATEWAY-HTTP";
const TLS: &str = "GATEWAY-TLS";
const TCP: &str = "GATEWAY-TCP";
const UDP: &str = "GATEWAY-UDP";
const GRPC: &str = "GATEWAY-GRPC";
/// Why the retry tests do not run on nginx.
const NO_RETRY: &str = "nginx retries only on another server of the upstream \
                        (proxy_next_upstream), never the same request up to the attempts \
                        asked: k8slb refuses retry under it (Accepted False, \
                        UnsupportedValue); claimed on HAProxy only";
/// Why the test of mixed TLS modes refused checks nothing.
const TLS_MIXED_CLAIMED: &str = "TLSRouteModeMixed is claimed: the suite's test returns \
                                 before any check";
/// Why the UDP tests do not run on HAProxy.
const NO_UDP: &str = "HAProxy does not proxy UDP: k8slb refuses UDP listeners under it \
                      (UnsupportedProtocol); GATEWAY-UDP is claimed on nginx only";

/// A test of `profile` (HTTP by default) applying `tests/<manifest>` (empty: none).
pub fn case(name: &'static str, manifest: &'static str) -> Case {
    Case {
        name,
        manifest: (!manifest.is_empty()).then_some(manifest),
        more_manifests: vec![],
        profile: HTTP,
        features: &[],
        skip: None,
        skip_on: vec![],
        returns_early_on: vec![],
        unclaimed: None,
        expect_fail: vec![],
        checks: vec![],
    }
}

impl Case {
    /// Another manifest the test applies.
    pub fn and(mut self, manifest: &'static str) -> Case {
        self.more_manifests.push(manifest);
        self
    }
    pub fn profile(mut self, p: &'static str) -> Case {
        self.profile = p;
        self
    }
    pub fn ext(mut self, features: &'static [&'static str]) -> Case {
        self.features = features;
        self
    }
    pub fn skip(mut self, why: &'static str) -> Case {
        self.skip = Some(why);
        self
    }
    /// Run and checked, but not counted: see [`Case::unclaimed`].
    pub fn unclaimed(mut self, why: &'static str) -> Case {
        self.unclaimed = Some(why);
        self
    }
    pub fn skip_on(mut self, proxy: &'static str, why: &'static str) -> Case {
        self.skip_on.push((proxy, why));
        self
    }
    /// See [`Case::returns_early_on`].
    pub fn returns_early_on(mut self, proxy: &'static str, why: &'static str) -> Case {
        self.returns_early_on.push((proxy, why));
        self
    }
    /// Known to fail on both proxies (`proxy` empty) or one, and why.
    pub fn expect_fail(mut self, proxy: &'static str, why: &'static str) -> Case {
        self.expect_fail.push((proxy, why));
        self
    }
    pub fn check(mut self, c: Check) -> Case {
        self.checks.push(c);
        self
    }
    pub fn checks(mut self, cs: Vec<Check>) -> Case {
        self.checks.extend(cs);
        self
    }
}

/// `r` answered by infra-backend-v1 with the request headers the mirror tests' header
/// modifier sets, adds, appends to and removes (their `X-Header-*` expectations).
fn modified_headers(r: Req) -> Req {
    r.to("infra-backend-v1")
        .header("X-Header-Remove", "remove-val")
        .header("X-Header-Add-Append", "append-val-1")
        .want_header("X-Header-Add", "header-val-1")
        .want_header("X-Header-Add-Append", "append-val-1,header-val-2")
        .want_header("X-Header-Set", "set-overwrites-values")
        .absent("X-Header-Remove")
}

/// The Gateway and routes are accepted, the routes' references resolved.
pub fn accepted(gateway: &str, routes: &[&str]) -> Check {
    Check::Accepted {
        gateway: nn(gateway),
        routes: routes.iter().map(|r| nn(r)).collect(),
        kind: "HTTPRoute",
    }
}

/// The Gateway and GRPCRoutes are accepted, the routes' references resolved.
pub fn accepted_grpc(gateway: &str, routes: &[&str]) -> Check {
    Check::Accepted {
        gateway: nn(gateway),
        routes: routes.iter().map(|r| nn(r)).collect(),
        kind: "GRPCRoute",
    }
}

/// The Gateway and routes are accepted (references not checked).
pub fn accepted_only(gateway: &str, routes: &[&str]) -> Check {
    accepted_kind("HTTPRoute", gateway, routes)
}

/// The Gateway and routes of `kind` are accepted (references not checked).
pub fn accepted_kind(kind: &'static str, gateway: &str, routes: &[&str]) -> Check {
    Check::AcceptedOnly {
        gateway: nn(gateway),
        routes: routes.iter().map(|r| nn(r)).collect(),
        kind,
    }
}

/// Requests over HTTP to port 80 of the Gateway.
pub fn requests(gateway: &str, reqs: Vec<Req>) -> Check {
    requests_on(gateway, 80, reqs)
}

pub fn requests_on(gateway: &str, port: u16, reqs: Vec<Req>) -> Check {
    Check::Requests {
        gateway: nn(gateway),
        port,
        tls: false,
        reqs,
    }
}

/// Requests over HTTPS to `port` of the Gateway.
pub fn requests_tls_on(gateway: &str, port: u16, reqs: Vec<Req>) -> Check {
    Check::Requests {
        gateway: nn(gateway),
        port,
        tls: true,
        reqs,
    }
}

pub fn https_requests(gateway: &str, reqs: Vec<Req>) -> Check {
    Check::Requests {
        gateway: nn(gateway),
        port: 443,
        tls: true,
        reqs,
    }
}

/// The HTTPRoute's parent entry for the Gateway has condition `type_` = `status`
/// (`reason`).
pub fn route_cond(
    route: &str,
    gateway: &str,
    type_: &'static str,
    status: &'static str,
    reason: &'static str,
) -> Check {
    kind_cond("HTTPRoute", route, gateway, type_, status, reason)
}

/// The same for a route of `kind`.
pub fn kind_cond(
    kind: &'static str,
    route: &str,
    gateway: &str,
    type_: &'static str,
    status: &'static str,
    reason: &'static str,
) -> Check {
    Check::RouteCondition {
        kind,
        route: nn(route),
        gateway: nn(gateway),
        cond: Cond {
            type_,
            status,
            reason,
        },
    }
}

/// The BackendTLSPolicy's ancestor entry for the Gateway has condition `type_` =
/// `status` (`reason`).
pub fn policy_cond(
    policy: &str,
    gateway: &str,
    type_: &'static str,
    status: &'static str,
    reason: &'static str,
) -> Check {
    Check::PolicyCondition {
        policy: nn(policy),
        gateway: nn(gateway),
        cond: Cond {
            type_,
            status,
            reason,
        },
    }
}

/// The policy is Accepted and its references resolved, for the Gateway.
fn policy_ok(policy: &str, gateway: &str) -> Vec<Check> {
    vec![
        policy_cond(policy, gateway, "Accepted", "True", "Accepted"),
        policy_cond(policy, gateway, "ResolvedRefs", "True", "ResolvedRefs"),
    ]
}

pub fn no_accepted_parents(route: &str) -> Check {
    Check::NoAcceptedParents {
        kind: "HTTPRoute",
        route: nn(route),
    }
}

pub fn tls_rejected(gateway: &str, server_name: &'static str) -> Check {
    Check::TlsRejected {
        gateway: nn(gateway),
        port: 443,
        server_name,
    }
}

pub fn zero_routes(gateway: &str) -> Check {
    Check::ZeroRoutes {
        gateway: nn(gateway),
    }
}

pub fn attached(gateway: &str, listeners: &[(&'static str, u64)]) -> Check {
    Check::AttachedRoutes {
        gateway: nn(gateway),
        listeners: listeners.to_vec(),
    }
}

/// A listener's status (see [`Check::Listener`]); conditions as `(type, status, reason)`,
/// an empty reason meaning any.
pub fn listener(
    gateway: &str,
    name: &'static str,
    kinds: &[&'static str],
    conds: &[(&'static str, &'static str, &'static str)],
    attached: u64,
) -> Check {
    Check::Listener {
        gateway: nn(gateway),
        listener: name,
        kinds: kinds.to_vec(),
        conds: conds
            .iter()
            .map(|(type_, status, reason)| Cond {
                type_,
                status,
                reason,
            })
            .collect(),
        attached,
    }
}

pub fn gateway_cond(
    gateway: &str,
    type_: &'static str,
    status: &'static str,
    reason: &'static str,
) -> Check {
    Check::GatewayCondition {
        gateway: nn(gateway),
        cond: Cond {
            type_,
            status,
            reason,
        },
    }
}

/// gRPC calls to port 80 of the Gateway.
pub fn grpc(gateway: &str, reqs: Vec<GrpcReq>) -> Check {
    Check::Grpc {
        gateway: nn(gateway),
        port: 80,
        reqs,
    }
}

/// A TCP echo connection to `port` of the Gateway answered by `backend`
/// (`<namespace>/<name>`, the infra namespace by default).
fn tcp_to(gateway: &str, port: u16, backend: &str) -> Check {
    Check::Tcp {
        gateway: nn(gateway),
        port,
        backend: nn(backend),
        sni: None,
        terminated: false,
    }
}

/// The same over TLS with server name `sni` (port 443), the backend terminating it.
fn tls_to(gateway: &str, sni: &'static str, backend: &str) -> Check {
    Check::Tcp {
        gateway: nn(gateway),
        port: 443,
        backend: nn(backend),
        sni: Some(sni),
        terminated: false,
    }
}

/// The same over TLS that the Gateway terminates on `port`: the client verifies the
/// Gateway's certificate for `sni` with `tls-checks-ca-certificate`, the backend sees
/// plain TCP and no server name.
fn tls_terminated_to(gateway: &str, port: u16, sni: &'static str, backend: &str) -> Check {
    Check::Tcp {
        gateway: nn(gateway),
        port,
        backend: nn(backend),
        sni: Some(sni),
        terminated: true,
    }
}

/// A UDP echo probe to `port` of the Gateway answered by `backend` (its service name,
/// `<namespace>/<name>`, the infra namespace by default).
fn udp_to(gateway: &str, port: u16, backend: &str) -> Check {
    Check::Udp {
        gateway: nn(gateway),
        port,
        backend: Some(nn(backend)),
    }
}

/// An `Echo` call no rule matches: the Gateway's 404, which a gRPC client reports as
/// `Unimplemented`.
fn unmatched() -> GrpcReq {
    rpc("Echo", "").code(GRPC_UNIMPLEMENTED)
}

fn redirect() -> Redirect {
    Redirect::default()
}

fn host_to(host: &str) -> Redirect {
    Redirect {
        host: Some(host.into()),
        ..Redirect::default()
    }
}

const V1: &str = "infra-backend-v1";
const V2: &str = "infra-backend-v2";
const V3: &str = "infra-backend-v3";
const SAME: &str = "same-namespace";
const G1: &str = "grpc-infra-backend-v1";
const G2: &str = "grpc-infra-backend-v2";
const G3: &str = "grpc-infra-backend-v3";

/// Every test the runner knows, in the upstream suite's order of files.
pub fn cases() -> Vec<Case> {
    let mut v = vec![
        // --- GATEWAY-HTTP, core ---
        case(
            "HTTPRouteSimpleSameNamespace",
            "httproute-simple-same-namespace.yaml",
        )
        .check(accepted(SAME, &["gateway-conformance-infra-test"]))
        .check(requests(SAME, vec![get("/").to(V1)])),
        case("HTTPRouteCrossNamespace", "httproute-cross-namespace.yaml")
            .check(accepted(
                "backend-namespaces",
                &[&format!("{WEB}/cross-namespace")],
            ))
            .check(requests(
                "backend-namespaces",
                vec![get("/").to(&format!("{WEB}/web-backend"))],
            )),
        case("HTTPRouteMatching", "httproute-matching.yaml")
            .check(accepted(SAME, &["matching"]))
            .check(requests(
                SAME,
                vec![
                    get("/").to(V1),
                    get("/example").to(V1),
                    get("/").header("Version", "one").to(V1),
                    get("/v2").to(V2),
                    get("/v2/example").to(V2),
                    get("/").header("Version", "two").to(V2),
                    get("/v2/").to(V2),
                    get("/v2example").to(V1),
                    get("/foo/v2/example").to(V1),
                ],
            )),
        case(
            "HTTPRouteExactPathMatching",
            "httproute-exact-path-matching.yaml",
        )
        .check(accepted(SAME, &["exact-matching"]))
        .check(requests(
            SAME,
            vec![
                get("/one").to(V1),
                get("/two").to(V2),
                get("/").status(404),
                get("/one/example").status(404),
                get("/two/").status(404),
                get("/Two").status(404),
            ],
        )),
        case("HTTPRouteHeaderMatching", "httproute-header-matching.yaml")
            .check(accepted(SAME, &["header-matching"]))
            .check(requests(
                SAME,
                vec![
                    get("/").header("Version", "one").to(V1),
                    get("/").header("Version", "two").to(V2),
                    get("/")
                        .header("Version", "two")
                        .header("Color", "orange")
                        .to(V1),
                    get("/")
                        .header("Version", "two")
                        .header("Color", "blue")
                        .to(V2),
                    get("/").header("Color", "orange").status(404),
                    get("/").header("Some-Other-Header", "one").status(404),
                    get("/").header("Color", "blue").to(V1),
                    get("/").header("Color", "green").to(V1),
                    get("/").header("Color", "red").to(V2),
                    get("/").header("Color", "yellow").to(V2),
                    get("/").header("Color", "purple").status(404),
                ],
            )),
        case(
            "HTTPRouteHostnameIntersection",
            "httproute-hostname-intersection.yaml",
        )
        .check(accepted(
            "httproute-hostname-intersection",
            &[
                "specific-host-matches-listener-specific-host",
                "specific-host-matches-listener-wildcard-host",
                "wildcard-host-matches-listener-specific-host",
                "wildcard-host-matches-listener-wildcard-host",
            ],
        ))
        .check(requests(
            "httproute-hostname-intersection",
            vec![
                get("/s1").host("very.specific.com").to(V1),
                get("/s1").host("very.specific.com:1234").to(V1),
                get("/s1").host("non.matching.com").status(404),
                get("/s1").host("foo.nonmatchingwildcard.io").status(404),
                get("/s1").host("foo.wildcard.io").status(404),
                get("/non-matching-prefix")
                    .host("very.specific.com")
                    .status(404),
                get("/s2").host("foo.wildcard.io").to(V2),
                get("/s2").host("bar.wildcard.io").to(V2),
                get("/s2").host("foo.bar.wildcard.io").to(V2),
                get("/s2").host("non.matching.com").status(404),
                get("/s2").host("wildcard.io").status(404),
                get("/s2").host("very.specific.com").status(404),
                get("/non-matching-prefix")
                    .host("foo.wildcard.io")
                    .status(404),
                get("/s3").host("very.specific.com").to(V3),
                get("/s3").host("non.matching.com").status(404),
                get("/s3").host("foo.specific.com").status(404),
                get("/s3").host("foo.wildcard.io").status(404),
                get("/non-matching-prefix")
                    .host("very.specific.com")
                    .status(404),
                get("/s4").host("foo.anotherwildcard.io").to(V1),
                get("/s4").host("bar.anotherwildcard.io").to(V1),
                get("/s4").host("foo.bar.anotherwildcard.io").to(V1),
                get("/s4").host("anotherwildcard.io").status(404),
                get("/s4").host("foo.wildcard.io").status(404),
                get("/s4").host("very.specific.com").status(404),
                get("/non-matching-prefix")
                    .host("foo.anotherwildcard.io")
                    .status(404),
            ],
        ))
        .check(route_cond(
            "no-intersecting-hosts",
            "httproute-hostname-intersection",
            "Accepted",
            "False",
            "NoMatchingListenerHostname",
        ))
        .check(requests(
            "httproute-hostname-intersection",
            vec![
                get("/s5").host("specific.but.wrong.com").status(404),
                get("/s5").host("wildcard.io").status(404),
            ],
        ))
        .check(attached(
            "httproute-hostname-intersection",
            &[("listener-1", 2), ("listener-2", 1), ("listener-3", 1)],
        ))
        .check(accepted(
            "httproute-hostname-intersection-all",
            &["httproute-hostname-intersection-all"],
        ))
        .check(requests(
            "httproute-hostname-intersection-all",
            vec![
                get("/").host("first.com").to(V2),
                get("/").host("sub.first.com").to(V2),
                get("/").host("second.com").to(V2),
                get("/").host("sub.second.com").to(V2),
                get("/").host("third.com").status(404),
                get("/").host("sub.third.com").status(404),
            ],
        )),
        case(
            "HTTPRouteListenerHostnameMatching",
            "httproute-listener-hostname-matching.yaml",
        )
        .check(accepted(
            "httproute-listener-hostname-matching",
            &["backend-v1", "backend-v2", "backend-v3"],
        ))
        .check(requests(
            "httproute-listener-hostname-matching",
            vec![
                get("/").host("bar.com").to(V1),
                get("/").host("foo.bar.com").to(V2),
                get("/").host("baz.bar.com").to(V3),
                get("/").host("boo.bar.com").to(V3),
                get("/").host("multiple.prefixes.bar.com").to(V3),
                get("/").host("multiple.prefixes.foo.com").to(V3),
                get("/").host("foo.com").status(404),
                get("/").host("no.matching.host").status(404),
            ],
        )),
        case(
            "HTTPRouteMatchingAcrossRoutes",
            "httproute-matching-across-routes.yaml",
        )
        .check(accepted(SAME, &["matching-part1", "matching-part2"]))
        .check(requests(
            SAME,
            vec![
                get("/").host("example.com").to(V1),
                get("/example").host("example.com").to(V1),
                get("/example").host("example.net").to(V1),
                get("/example")
                    .host("example.com")
                    .header("Version", "one")
                    .to(V1),
                get("/v2").host("example.com").to(V2),
                get("/v2").host("example.net").to(V1),
                get("/v2/example").host("example.com").to(V2),
                get("/").host("example.com").header("Version", "two").to(V2),
            ],
        )),
        case("HTTPRoutePathMatchOrder", "httproute-path-match-order.yaml")
            .check(accepted(SAME, &["path-matching-order"]))
            .check(requests(
                SAME,
                vec![
                    get("/match/exact/one").to(V3),
                    get("/match/exact").to(V2),
                    get("/match").to(V1),
                    get("/match/prefix/one/any").to(V2),
                    get("/match/prefix/any").to(V1),
                    get("/match/any").to(V3),
                ],
            )),
        case(
            "HTTPRouteRedirectHostAndStatus",
            "httproute-redirect-host-and-status.yaml",
        )
        .check(accepted(SAME, &["redirect-host-and-status"]))
        .check(requests(
            SAME,
            vec![
                get("/hostname-redirect").redirect(302, host_to("example.org")),
                get("/host-and-status").redirect(301, host_to("example.org")),
            ],
        )),
        case(
            "HTTPRouteRequestHeaderModifier",
            "httproute-request-header-modifier.yaml",
        )
        .check(accepted(SAME, &["request-header-modifier"]))
        .check(requests(
            SAME,
            vec![
                get("/set")
                    .header("Some-Other-Header", "val")
                    .want_header("Some-Other-Header", "val")
                    .want_header("X-Header-Set", "set-overwrites-values")
                    .to(V1),
                get("/set")
                    .header("Some-Other-Header", "val")
                    .header("X-Header-Set", "some-other-value")
                    .want_header("Some-Other-Header", "val")
                    .want_header("X-Header-Set", "set-overwrites-values")
                    .to(V1),
                get("/add")
                    .header("Some-Other-Header", "val")
                    .want_header("Some-Other-Header", "val")
                    .want_header("X-Header-Add", "add-appends-values")
                    .to(V1),
                get("/add")
                    .header("Some-Other-Header", "val")
                    .header("X-Header-Add", "some-other-value")
                    .want_header("Some-Other-Header", "val")
                    .want_header("X-Header-Add", "some-other-value,add-appends-values")
                    .to(V1),
                get("/remove")
                    .header("X-Header-Remove", "val")
                    .absent("X-Header-Remove")
                    .to(V1),
                get("/multiple")
                    .header("X-Header-Set-2", "set-val-2")
                    .header("X-Header-Add-2", "add-val-2")
                    .header("X-Header-Remove-2", "remove-val-2")
                    .header("Another-Header", "another-header-val")
                    .want_header("X-Header-Set-1", "header-set-1")
                    .want_header("X-Header-Set-2", "header-set-2")
                    .want_header("X-Header-Add-1", "header-add-1")
                    .want_header("X-Header-Add-2", "add-val-2,header-add-2")
                    .want_header("X-Header-Add-3", "header-add-3")
                    .want_header("Another-Header", "another-header-val")
                    .absent("X-Header-Remove-1")
                    .absent("X-Header-Remove-2")
                    .to(V1),
                get("/case-insensitivity")
                    .header("x-header-set", "original-val-set")
                    .header("x-header-add", "original-val-add")
                    .header("x-header-remove", "original-val-remove")
                    .header("Another-Header", "another-header-val")
                    .want_header("X-Header-Set", "header-set")
                    .want_header("X-Header-Add", "original-val-add,header-add")
                    .want_header("Another-Header", "another-header-val")
                    .absent("X-Header-Remove")
                    .to(V1),
            ],
        )),
        case(
            "HTTPRouteMultipleGateways",
            "httproute-multiple-gateways.yaml",
        )
        .check(accepted_only(
            SAME,
            &[
                "multiple-gateways-shared-route",
                "same-namespace-dedicated-route",
            ],
        ))
        .check(requests(SAME, vec![get("/shared").to(V1), get("/").to(V2)]))
        .check(accepted_only(
            "all-namespaces",
            &[
                "multiple-gateways-shared-route",
                "all-namespaces-dedicated-route",
            ],
        ))
        .check(requests(
            "all-namespaces",
            vec![get("/shared").to(V1), get("/").to(V3)],
        )),
        case(
            "HTTPRouteNoBackendRefs",
            "httproute-omitted-backendrefs.yaml",
        )
        .check(accepted(SAME, &["omitted-backendrefs"]))
        .check(requests(
            SAME,
            vec![
                get("/forward").to(V1),
                get("/omitted-no-forward").status(500),
                get("/empty-no-forward").status(500),
            ],
        )),
        case("HTTPRouteWeight", "httproute-weight.yaml")
            .check(accepted(SAME, &["weighted-backends"]))
            .check(Check::Weights {
                gateway: nn(SAME),
                weights: vec![(V1, 0.7), (V2, 0.3), (V3, 0.0)],
            }),
        case("HTTPRouteServiceTypes", "httproute-service-types.yaml")
            .check(accepted(SAME, &["service-types"]))
            .check(requests(
                SAME,
                vec![
                    get("/manual-endpointslices").to(V1),
                    get("/headless-manual-endpointslices").to(V1),
                    get("/headless").to(V1),
                ],
            )),
        case("HTTPRouteHTTPSListener", "httproute-https-listener.yaml")
            .check(accepted(
                "same-namespace-with-https-listener",
                &["httproute-https-test", "httproute-https-test-no-hostname"],
            ))
            .check(https_requests(
                "same-namespace-with-https-listener",
                vec![
                    get("/").host("example.org").to(V1),
                    get("/").host("unknown-example.org").status(404),
                    get("/").host("second-example.org").to(V2),
                ],
            )),
        case(
            "HTTPRouteHTTPSListenerDetectMisdirectedRequests",
            "httproute-https-listener-detect-misdirected-requests.yaml",
        )
        .ext(&["GatewayHTTPSListenerDetectMisdirectedRequests"])
        .check(accepted(
            "same-namespace-with-https-listener",
            &[
                "https-listener-detect-misdirected-requests-test-1",
                "https-listener-detect-misdirected-requests-test-2",
                "https-listener-detect-misdirected-requests-test-3",
                "https-listener-detect-misdirected-requests-test-4",
            ],
        ))
        .check(https_requests(
            "same-namespace-with-https-listener",
            misdirected(),
        )),
        case(
            "HTTPRouteInvalidNonExistentBackendRef",
            "httproute-invalid-nonexistent-backendref.yaml",
        )
        .check(accepted_only(SAME, &["invalid-nonexistent-backend-ref"]))
        .check(route_cond(
            "invalid-nonexistent-backend-ref",
            SAME,
            "ResolvedRefs",
            "False",
            "BackendNotFound",
        ))
        .check(requests(SAME, vec![get("/").status(500)])),
        case(
            "HTTPRouteInvalidBackendRefUnknownKind",
            "httproute-invalid-backendref-unknown-kind.yaml",
        )
        .check(accepted_only(SAME, &["invalid-backend-ref-unknown-kind"]))
        .check(route_cond(
            "invalid-backend-ref-unknown-kind",
            SAME,
            "ResolvedRefs",
            "False",
            "InvalidKind",
        ))
        .check(requests(SAME, vec![get("/v2").status(500)])),
        case(
            "HTTPRouteInvalidCrossNamespaceBackendRef",
            "httproute-invalid-cross-namespace-backend-ref.yaml",
        )
        .check(accepted_only(
            SAME,
            &["invalid-cross-namespace-backend-ref"],
        ))
        .check(route_cond(
            "invalid-cross-namespace-backend-ref",
            SAME,
            "ResolvedRefs",
            "False",
            "RefNotPermitted",
        ))
        .check(requests(SAME, vec![get("/").status(500)])),
        case(
            "HTTPRouteInvalidCrossNamespaceParentRef",
            "httproute-invalid-cross-namespace-parent-ref.yaml",
        )
        .check(route_cond(
            &format!("{WEB}/invalid-cross-namespace-parent-ref"),
            SAME,
            "ResolvedRefs",
            "True",
            "",
        ))
        .check(route_cond(
            &format!("{WEB}/invalid-cross-namespace-parent-ref"),
            SAME,
            "Accepted",
            "False",
            "NotAllowedByListeners",
        ))
        .check(no_accepted_parents(&format!(
            "{WEB}/invalid-cross-namespace-parent-ref"
        )))
        .check(zero_routes(SAME)),
        case(
            "HTTPRouteInvalidParentRefNotMatchingSectionName",
            "httproute-invalid-parentref-not-matching-section-name.yaml",
        )
        .check(route_cond(
            "httproute-listener-not-matching-section-name",
            SAME,
            "Accepted",
            "False",
            "NoMatchingParent",
        ))
        .check(no_accepted_parents(
            "httproute-listener-not-matching-section-name",
        ))
        .check(zero_routes(SAME)),
        case(
            "HTTPRouteInvalidReferenceGrant",
            "httproute-invalid-reference-grant.yaml",
        )
        .check(accepted_only(SAME, &["reference-grant"]))
        .check(route_cond(
            "reference-grant",
            SAME,
            "ResolvedRefs",
            "False",
            "RefNotPermitted",
        ))
        .check(requests(SAME, vec![get("/").status(500)])),
        case(
            "HTTPRoutePartiallyInvalidViaInvalidReferenceGrant",
            "httproute-partially-invalid-via-invalid-reference-grant.yaml",
        )
        .check(accepted_only(SAME, &["invalid-reference-grant"]))
        .check(route_cond(
            "invalid-reference-grant",
            SAME,
            "ResolvedRefs",
            "False",
            "RefNotPermitted",
        ))
        .check(requests(
            SAME,
            vec![
                get("/v2").status(500),
                get("/").to(&format!("{APP}/app-backend-v1")),
            ],
        )),
        case("HTTPRouteReferenceGrant", "httproute-reference-grant.yaml")
            .check(accepted(SAME, &["reference-grant"]))
            .check(requests(
                SAME,
                vec![get("/").to(&format!("{WEB}/web-backend"))],
            ))
            .check(Check::Delete {
                kind: "ReferenceGrant",
                object: nn(&format!("{WEB}/reference-grant")),
            })
            .check(requests(SAME, vec![get("/").status(500)])),
        case(
            "HTTPRouteListenerPortMatching",
            "httproute-listener-port-matching.yaml",
        )
        .ext(&["HTTPRouteParentRefPort"])
        .check(accepted(
            "httproute-listener-port-matching",
            &["backend-v1", "backend-v2", "backend-v3"],
        ))
        .check(requests(
            "httproute-listener-port-matching",
            vec![get("/").host("foo.com").to(V1)],
        ))
        .check(requests_on(
            "httproute-listener-port-matching",
            8080,
            vec![
                get("/").host("foo.com:8080").to(V2),
                get("/").host("bar.com:8080").to(V2),
            ],
        ))
        .check(requests_on(
            "httproute-listener-port-matching",
            8090,
            vec![
                get("/").host("foo.com:8090").to(V3),
                get("/").host("bar.com:8090").status(404),
            ],
        )),
        // --- Gateway tests (core; counted in GATEWAY-HTTP) ---
        case("GatewayInvalidRouteKind", "gateway-invalid-route-kind.yaml")
            .check(listener(
                "gateway-only-invalid-route-kind",
                "http",
                &[],
                &[("ResolvedRefs", "False", "InvalidRouteKinds")],
                0,
            ))
            .check(listener(
                "gateway-supported-and-invalid-route-kind",
                "http",
                &["HTTPRoute"],
                &[("ResolvedRefs", "False", "InvalidRouteKinds")],
                0,
            )),
        case(
            "GatewayInvalidTLSConfiguration",
            "gateway-invalid-tls-configuration.yaml",
        )
        .check(listener(
            "gateway-certificate-nonexistent-secret",
            "https",
            &["HTTPRoute"],
            &[("ResolvedRefs", "False", "InvalidCertificateRef")],
            0,
        ))
        .check(listener(
            "gateway-certificate-unsupported-group",
            "https",
            &["HTTPRoute"],
            &[("ResolvedRefs", "False", "InvalidCertificateRef")],
            0,
        ))
        .check(listener(
            "gateway-certificate-unsupported-kind",
            "https",
            &["HTTPRoute"],
            &[("ResolvedRefs", "False", "InvalidCertificateRef")],
            0,
        ))
        .check(listener(
            "gateway-certificate-malformed-secret",
            "https",
            &["HTTPRoute"],
            &[("ResolvedRefs", "False", "InvalidCertificateRef")],
            0,
        )),
        case(
            "GatewaySecretInvalidReferenceGrant",
            "gateway-secret-invalid-reference-grant.yaml",
        )
        .check(listener(
            "gateway-secret-invalid-reference-grant",
            "https",
            &["HTTPRoute"],
            &[("ResolvedRefs", "False", "RefNotPermitted")],
            0,
        )),
        case(
            "GatewaySecretMissingReferenceGrant",
            "gateway-secret-missing-reference-grant.yaml",
        )
        .check(listener(
            "gateway-secret-missing-reference-grant",
            "https",
            &["HTTPRoute"],
            &[("ResolvedRefs", "False", "RefNotPermitted")],
            0,
        )),
        case(
            "GatewaySecretReferenceGrantAllInNamespace",
            "gateway-secret-reference-grant-all-in-namespace.yaml",
        )
        .check(listener(
            "gateway-secret-reference-grant-all-in-namespace",
            "https",
            &["HTTPRoute"],
            &[
                ("Programmed", "True", "Programmed"),
                ("ResolvedRefs", "True", ""),
            ],
            0,
        )),
        case(
            "GatewaySecretReferenceGrantSpecific",
            "gateway-secret-reference-grant-specific.yaml",
        )
        .check(listener(
            "gateway-secret-reference-grant-specific",
            "https",
            &["HTTPRoute"],
            &[
                ("Programmed", "True", "Programmed"),
                ("ResolvedRefs", "True", ""),
            ],
            0,
        )),
        case(
            "GatewayWithAttachedRoutes",
            "gateway-with-attached-routes.yaml",
        )
        .check(listener(
            "gateway-with-one-attached-route",
            "http",
            &["HTTPRoute"],
            &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")],
            1,
        ))
        .check(listener(
            "gateway-with-two-attached-routes",
            "http",
            &["HTTPRoute"],
            &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")],
            2,
        ))
        .check(route_cond(
            "http-route-not-accepted",
            "gateway-with-two-attached-routes",
            "Accepted",
            "False",
            "NoMatchingListenerHostname",
        ))
        .check(listener(
            "unresolved-gateway-with-one-attached-unresolved-route",
            "tls",
            &["HTTPRoute"],
            &[("Programmed", "False", ""), ("ResolvedRefs", "False", "")],
            1,
        ))
        .check(route_cond(
            "http-route-4",
            "unresolved-gateway-with-one-attached-unresolved-route",
            "ResolvedRefs",
            "False",
            "",
        )),
        case(
            "GatewayWithAttachedRoutesWithPort8080",
            "gateway-with-attached-routes-with-port-8080.yaml",
        )
        .ext(&["GatewayPort8080"])
        .check(listener(
            "gateway-with-two-listeners-and-one-attached-route",
            "http-unattached",
            &["HTTPRoute"],
            &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")],
            0,
        ))
        .check(listener(
            "gateway-with-two-listeners-and-one-attached-route",
            "http",
            &["HTTPRoute"],
            &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")],
            1,
        )),
        case(
            "GatewayListenerUnsupportedProtocol",
            "gateway-invalid-listeners-unsupported-protocol.yaml",
        )
        .check(gateway_cond(
            "gateway-only-unsupported-protocols",
            "Accepted",
            "False",
            "ListenersNotValid",
        ))
        .check(listener(
            "gateway-only-unsupported-protocols",
            "invalid",
            &[],
            &[("Accepted", "False", "UnsupportedProtocol")],
            0,
        ))
        .check(gateway_cond(
            "gateway-supported-and-unsupported-protocols",
            "Accepted",
            "True",
            "ListenersNotValid",
        ))
        .check(listener(
            "gateway-supported-and-unsupported-protocols",
            "http",
            &["HTTPRoute"],
            &[("Accepted", "True", "Accepted")],
            0,
        ))
        .check(listener(
            "gateway-supported-and-unsupported-protocols",
            "invalid",
            &[],
            &[("Accepted", "False", "UnsupportedProtocol")],
            0,
        )),
        case(
            "GatewayInvalidParametersRef",
            "gateway-invalid-parameters-ref.yaml",
        )
        .check(gateway_cond(
            "gateway-invalid-parameters-ref",
            "Accepted",
            "False",
            "InvalidParameters",
        )),
        // --- GATEWAY-HTTP, extended ---
        case(
            "GatewayHTTPListenerIsolation",
            "gateway-http-listener-isolation.yaml",
        )
        .and("gateway-http-listener-isolation-with-hostname-intersection.yaml")
        .ext(&["GatewayHTTPListenerIsolation"])
        .check(accepted(
            "http-listener-isolation",
            &[
                "attaches-to-empty-hostname",
                "attaches-to-wildcard-example-com",
                "attaches-to-wildcard-foo-example-com",
                "attaches-to-abc-foo-example-com",
            ],
        ))
        .check(requests("http-listener-isolation", isolation()))
        .check(accepted(
            "http-listener-isolation-with-hostname-intersection",
            &[
                "attaches-to-empty-hostname-with-hostname-intersection",
                "attaches-to-wildcard-example-com-with-hostname-intersection",
                "attaches-to-wildcard-foo-example-com-with-hostname-intersection",
                "attaches-to-abc-foo-example-com-with-hostname-intersection",
            ],
        ))
        .check(requests(
            "http-listener-isolation-with-hostname-intersection",
            isolation(),
        )),
        case(
            "HTTPRouteInvalidParentRefNotMatchingListenerPort",
            "httproute-invalid-parentref-not-matching-listener-port.yaml",
        )
        .ext(&["HTTPRouteDestinationPortMatching"])
        .check(route_cond(
            "httproute-listener-not-matching-route-port",
            SAME,
            "ResolvedRefs",
            "True",
            "",
        ))
        .check(route_cond(
            "httproute-listener-not-matching-route-port",
            SAME,
            "Accepted",
            "False",
            "NoMatchingParent",
        ))
        .check(no_accepted_parents(
            "httproute-listener-not-matching-route-port",
        ))
        .check(zero_routes(SAME)),
        case(
            "HTTPRouteInvalidParentRefSectionNameNotMatchingPort",
            "httproute-invalid-parentref-section-name-not-matching-port.yaml",
        )
        .ext(&["HTTPRouteParentRefPort"])
        .check(route_cond(
            "httproute-listener-section-name-not-matching-port",
            "gateway-with-one-not-matching-port-and-section-name-route",
            "Accepted",
            "False",
            "NoMatchingParent",
        ))
        .check(no_accepted_parents(
            "httproute-listener-section-name-not-matching-port",
        ))
        .check(zero_routes(
            "gateway-with-one-not-matching-port-and-section-name-route",
        )),
        case(
            "HTTPRouteQueryParamMatching",
            "httproute-query-param-matching.yaml",
        )
        .ext(&["HTTPRouteQueryParamMatching"])
        .check(accepted(SAME, &["query-param-matching"]))
        .check(requests(
            SAME,
            vec![
                get("/?animal=whale").to(V1),
                get("/?animal=dolphin").to(V2),
                get("/?animal=dolphin&color=blue").to(V3),
                get("/?ANIMAL=Whale").to(V3),
                get("/?animal=whale&otherparam=irrelevant").to(V1),
                get("/?animal=dolphin&color=yellow").to(V2),
                get("/?color=blue").status(404),
                get("/?animal=dog").status(404),
                get("/?animal=whaledolphin").status(404),
                get("/").status(404),
                get("/path1?animal=whale").to(V1),
                get("/?animal=whale").header("version", "one").to(V2),
                get("/path2?animal=whale").header("version", "two").to(V3),
                get("/path3?animal=shark").to(V1),
                get("/path4?animal=kraken")
                    .header("version", "three")
                    .to(V1),
                get("/?animal=shark").status(404),
                get("/path4?animal=kraken").status(404),
                get("/path5?animal=hydra").to(V1),
                get("/?animal=hydra").header("version", "four").to(V3),
            ],
        )),
        case("HTTPRouteMethodMatching", "httproute-method-matching.yaml")
            .ext(&["HTTPRouteMethodMatching"])
            .check(accepted(SAME, &["method-matching"]))
            .check(requests(
                SAME,
                vec![
                    get("/").method("POST").to(V1),
                    get("/").to(V2),
                    get("/").method("HEAD").status(404),
                    get("/path1").to(V1),
                    get("/").method("PUT").header("version", "one").to(V2),
                    get("/path2").method("POST").header("version", "two").to(V3),
                    get("/path3").method("PATCH").to(V1),
                    get("/path4")
                        .method("DELETE")
                        .header("version", "three")
                        .to(V1),
                    get("/").method("PUT").status(404),
                    get("/path4").method("DELETE").status(404),
                    get("/path5").method("PATCH").to(V1),
                    get("/").method("PATCH").header("version", "four").to(V2),
                ],
            )),
        case("HTTPRouteRedirectPath", "httproute-redirect-path.yaml")
            .ext(&["HTTPRoutePathRedirect"])
            .check(accepted(SAME, &["redirect-path"]))
            .check(requests(
                SAME,
                vec![
                    get("/original-prefix/lemon").redirect(
                        302,
                        Redirect {
                            path: Some("/replacement-prefix/lemon".into()),
                            ..redirect()
                        },
                    ),
                    get("/full/path/original").redirect(
                        302,
                        Redirect {
                            path: Some("/full-path-replacement".into()),
                            ..redirect()
                        },
                    ),
                    get("/path-and-host").redirect(
                        302,
                        Redirect {
                            host: Some("example.org".into()),
                            path: Some("/replacement-prefix".into()),
                            ..redirect()
                        },
                    ),
                    get("/path-and-status").redirect(
                        301,
                        Redirect {
                            path: Some("/replacement-prefix".into()),
                            ..redirect()
                        },
                    ),
                    get("/full-path-and-host").redirect(
                        302,
                        Redirect {
                            host: Some("example.org".into()),
                            path: Some("/replacement-full".into()),
                            ..redirect()
                        },
                    ),
                    get("/full-path-and-status").redirect(
                        301,
                        Redirect {
                            path: Some("/replacement-full".into()),
                            ..redirect()
                        },
                    ),
                ],
            )),
        case("HTTPRouteRedirectPort", "httproute-redirect-port.yaml")
            .ext(&["HTTPRoutePortRedirect"])
            .check(accepted(SAME, &["redirect-port"]))
            .check(requests(
                SAME,
                vec![
                    get("/port").redirect(302, port_to(None, "8083")),
                    get("/port-and-host").redirect(302, port_to(Some("example.org"), "8083")),
                    get("/port-and-status").redirect(301, port_to(None, "8083")),
                    get("/port-and-host-and-status")
                        .redirect(302, port_to(Some("example.org"), "8083")),
                ],
            )),
        case("HTTPRouteRedirectScheme", "httproute-redirect-scheme.yaml")
            .ext(&["HTTPRouteSchemeRedirect"])
            .check(accepted(SAME, &["redirect-scheme"]))
            .check(requests(
                SAME,
                vec![
                    get("/scheme").redirect(302, scheme_to(None, "https")),
                    get("/scheme-and-host").redirect(302, scheme_to(Some("example.org"), "https")),
                    get("/scheme-and-status").redirect(301, scheme_to(None, "https")),
                    get("/scheme-and-host-and-status")
                        .redirect(302, scheme_to(Some("example.org"), "https")),
                ],
            )),
        case("HTTPRoute303Redirect", "httproute-303-redirect.yaml")
            .ext(&["HTTPRoute303RedirectStatusCode"])
            .check(accepted(SAME, &["303-redirect"]))
            .check(requests(
                SAME,
                vec![get("/see-other").method("POST").redirect(303, redirect())],
            )),
        case("HTTPRoute307Redirect", "httproute-307-redirect.yaml")
            .ext(&["HTTPRoute307RedirectStatusCode"])
            .check(accepted(SAME, &["307-redirect"]))
            .check(requests(
                SAME,
                vec![get("/temporary").redirect(307, redirect())],
            )),
        case("HTTPRoute308Redirect", "httproute-308-redirect.yaml")
            .ext(&["HTTPRoute308RedirectStatusCode"])
            .check(accepted(SAME, &["308-redirect"]))
            .check(requests(
                SAME,
                vec![get("/permanent").redirect(308, redirect())],
            )),
        case("HTTPRouteRewriteHost", "httproute-rewrite-host.yaml")
            .ext(&["HTTPRouteHostRewrite"])
            .check(accepted(SAME, &["rewrite-host"]))
            .check(requests(
                SAME,
                vec![
                    get("/one")
                        .host("rewrite.example")
                        .want_host("one.example.org")
                        .to(V1),
                    get("/two")
                        .host("rewrite.example")
                        .want_host("example.org")
                        .to(V2),
                    get("/rewrite-host-and-modify-headers")
                        .host("rewrite.example")
                        .header("X-Header-Remove", "remove-val")
                        .header("X-Header-Add-Append", "append-val-1")
                        .want_host("test.example.org")
                        .want_header("X-Header-Add", "header-val-1")
                        .want_header("X-Header-Add-Append", "append-val-1,header-val-2")
                        .want_header("X-Header-Set", "set-overwrites-values")
                        .absent("X-Header-Remove")
                        .to(V2),
                ],
            )),
        case("HTTPRouteRewritePath", "httproute-rewrite-path.yaml")
            .ext(&["HTTPRoutePathRewrite"])
            .check(accepted(SAME, &["rewrite-path"]))
            .check(requests(
                SAME,
                vec![
                    get("/prefix/one/two").want_path("/one/two").to(V1),
                    get("/strip-prefix/three").want_path("/three").to(V1),
                    get("/strip-prefix").want_path("/").to(V1),
                    get("/full/one/two").want_path("/one").to(V1),
                    get("/full/rewrite-path-and-modify-headers/test")
                        .header("X-Header-Remove", "remove-val")
                        .header("X-Header-Add-Append", "append-val-1")
                        .header("X-Header-Set", "set-val")
                        .want_path("/test")
                        .want_header("X-Header-Add", "header-val-1")
                        .want_header("X-Header-Add-Append", "append-val-1,header-val-2")
                        .want_header("X-Header-Set", "set-overwrites-values")
                        .absent("X-Header-Remove")
                        .to(V1),
                    get("/prefix/rewrite-path-and-modify-headers/one")
                        .header("X-Header-Remove", "remove-val")
                        .header("X-Header-Add-Append", "append-val-1")
                        .header("X-Header-Set", "set-val")
                        .want_path("/prefix/one")
                        .want_header("X-Header-Add", "header-val-1")
                        .want_header("X-Header-Add-Append", "append-val-1,header-val-2")
                        .want_header("X-Header-Set", "set-overwrites-values")
                        .absent("X-Header-Remove")
                        .to(V1),
                ],
            )),
        case(
            "HTTPRouteResponseHeaderModifier",
            "httproute-response-header-modifier.yaml",
        )
        .ext(&["HTTPRouteResponseHeaderModification"])
        .check(accepted(SAME, &["response-header-modifier"]))
        .check(requests(
            SAME,
            vec![
                get("/set")
                    .backend_sets("Some-Other-Header", "val")
                    .resp_header("Some-Other-Header", "val")
                    .resp_header("X-Header-Set", "set-overwrites-values")
                    .to(V1),
                get("/set")
                    .backend_sets("Some-Other-Header", "val")
                    .backend_sets("X-Header-Set", "some-other-value")
                    .resp_header("Some-Other-Header", "val")
                    .resp_header("X-Header-Set", "set-overwrites-values")
                    .to(V1),
                get("/add")
                    .backend_sets("Some-Other-Header", "val")
                    .resp_header("Some-Other-Header", "val")
                    .resp_header("X-Header-Add", "add-appends-values")
                    .to(V1),
                get("/add")
                    .backend_sets("Some-Other-Header", "val")
                    .backend_sets("X-Header-Add", "some-other-value")
                    .resp_header("Some-Other-Header", "val")
                    .resp_header("X-Header-Add", "some-other-value,add-appends-values")
                    .to(V1),
                get("/remove")
                    .backend_sets("X-Header-Remove", "val")
                    .resp_absent("X-Header-Remove")
                    .to(V1),
            ],
        )),
        // --- other profiles and features k8slb does not serve (yet) ---
        case("HTTPRouteDisallowedKind", "httproute-disallowed-kind.yaml")
            .profile(TLS)
            .check(route_cond(
                "disallowed-kind",
                "tlsroutes-only",
                "ResolvedRefs",
                "True",
                "",
            ))
            .check(route_cond(
                "disallowed-kind",
                "tlsroutes-only",
                "Accepted",
                "False",
                "NotAllowedByListeners",
            ))
            .check(no_accepted_parents("disallowed-kind"))
            .check(zero_routes("tlsroutes-only")),
        // --- GATEWAY-TLS, core ---
        case(
            "TLSRouteInvalidBackendRefNonexistent",
            "tlsroute-invalid-backendref-nonexistent.yaml",
        )
        .profile(TLS)
        .check(accepted_kind(
            "TLSRoute",
            "gateway-tlsroute-invalid-backend-ref-nonexistent",
            &["invalid-backend-ref-nonexistent"],
        ))
        .check(kind_cond(
            "TLSRoute",
            "invalid-backend-ref-nonexistent",
            "gateway-tlsroute-invalid-backend-ref-nonexistent",
            "ResolvedRefs",
            "False",
            "BackendNotFound",
        ))
        .check(tls_rejected(
            "gateway-tlsroute-invalid-backend-ref-nonexistent",
            "example.com",
        )),
        case(
            "TLSRouteInvalidBackendRefUnknownKind",
            "tlsroute-invalid-backendref-unknown-kind.yaml",
        )
        .profile(TLS)
        .check(accepted_kind(
            "TLSRoute",
            "gateway-tlsroute-invalid-backend-ref-unknown-kind",
            &["invalid-backend-ref-unknown-kind"],
        ))
        .check(kind_cond(
            "TLSRoute",
            "invalid-backend-ref-unknown-kind",
            "gateway-tlsroute-invalid-backend-ref-unknown-kind",
            "ResolvedRefs",
            "False",
            "InvalidKind",
        ))
        .check(tls_rejected(
            "gateway-tlsroute-invalid-backend-ref-unknown-kind",
            "example.com",
        )),
        case(
            "TLSRouteInvalidNoMatchingListenerHostname",
            "tlsroute-invalid-no-matching-listener-hostname.yaml",
        )
        .profile(TLS)
        .check(kind_cond(
            "TLSRoute",
            "tlsroute-hostname-mismatch-1",
            "gateway-tls-exact-hostname",
            "Accepted",
            "False",
            "NoMatchingListenerHostname",
        ))
        .check(kind_cond(
            "TLSRoute",
            "tlsroute-hostname-mismatch-2",
            "gateway-tls-wildcard-hostname",
            "Accepted",
            "False",
            "NoMatchingListenerHostname",
        ))
        .check(Check::NoAcceptedParents {
            kind: "TLSRoute",
            route: nn("tlsroute-hostname-mismatch-1"),
        })
        .check(Check::NoAcceptedParents {
            kind: "TLSRoute",
            route: nn("tlsroute-hostname-mismatch-2"),
        })
        .check(zero_routes("gateway-tls-exact-hostname"))
        .check(zero_routes("gateway-tls-wildcard-hostname")),
        case(
            "TLSRouteInvalidReferenceGrant",
            "tlsroute-invalid-reference-grant.yaml",
        )
        .profile(TLS)
        .check(accepted_kind(
            "TLSRoute",
            "gateway-tlsroute-referencegrant",
            &["gateway-conformance-infra-test"],
        ))
        .check(kind_cond(
            "TLSRoute",
            "gateway-conformance-infra-test",
            "gateway-tlsroute-referencegrant",
            "ResolvedRefs",
            "False",
            "RefNotPermitted",
        )),
        case(
            "TLSRouteSimpleSameNamespace",
            "tlsroute-simple-same-namespace.yaml",
        )
        .profile(TLS)
        .check(Check::Accepted {
            gateway: nn("gateway-tlsroute"),
            routes: vec![nn("gateway-conformance-infra-test")],
            kind: "TLSRoute",
        })
        .check(tls_to("gateway-tlsroute", "abc.example.com", "tcp-backend")),
        tlsroute_hostname_intersection(),
        // The suite returns before any check when the implementation claims
        // TLSRouteModeTerminate, as k8slb does on both proxies: nothing to check.
        case(
            "TLSRouteListenerTerminateNotSupported",
            "tlsroute-listener-terminate-not-supported.yaml",
        )
        .profile(TLS),
        case(
            "TLSRouteListenerTerminateSupportedKinds",
            "tlsroute-listener-terminate-supported-kinds.yaml",
        )
        .profile(TLS)
        .ext(&["TLSRouteModeTerminate"])
        .check(listener(
            "gateway-tlsroute-terminate-supported",
            "tls-terminate",
            &["TLSRoute"],
            &[("Accepted", "True", "Accepted")],
            0,
        )),
        // Both proxies claim TLSRouteModeMixed: the suite returns before any check. The
        // checks are what a proxy that did not would have to pass (both listeners
        // refused, listing no kinds), pinned by common/tests/gateway_l4.rs; it is also
        // what k8slb does while not every LB node's actor renders Mixed (version skew:
        // common/tests/plan_gateway.rs). The runner's standalone mode has no node
        // reports: its actors are the watcher's build, which serves Mixed.
        case(
            "TLSRouteListenerMixedTerminationNotSupported",
            "tlsroute-listener-mixed-termination-not-supported.yaml",
        )
        .profile(TLS)
        .ext(&["TLSRouteModeTerminate"])
        .returns_early_on("haproxy", TLS_MIXED_CLAIMED)
        .returns_early_on("nginx", TLS_MIXED_CLAIMED)
        .check(listener(
            "gateway-tlsroute-mixed-termination-not-supported",
            "tls-terminate",
            &[],
            &[("Accepted", "False", "ProtocolConflict")],
            0,
        ))
        .check(listener(
            "gateway-tlsroute-mixed-termination-not-supported",
            "tls-passthrough",
            &[],
            &[("Accepted", "False", "ProtocolConflict")],
            0,
        )),
        case(
            "TLSRouteTerminateSimpleSameNamespace",
            "tlsroute-terminate-simple-same-namespace.yaml",
        )
        .profile(TLS)
        .ext(&["TLSRouteModeTerminate"])
        .check(Check::Accepted {
            gateway: nn("gateway-tlsroute-terminate"),
            routes: vec![nn("tlsroute-terminated-test")],
            kind: "TLSRoute",
        })
        .check(tls_terminated_to(
            "gateway-tlsroute-terminate",
            8443,
            "tls.example.com",
            "tcp-backend",
        )),
        case(
            "TLSRouteMixedTerminationSameNamespace",
            "tlsroute-mixed-termination-same-namespace.yaml",
        )
        .profile(TLS)
        .ext(&["TLSRouteModeTerminate", "TLSRouteModeMixed"])
        .check(Check::Accepted {
            gateway: nn("gateway-tlsroute-mixed-termination"),
            routes: vec![
                nn("gateway-conformance-mixed-passthroughroute"),
                nn("gateway-conformance-mixed-terminateroute"),
            ],
            kind: "TLSRoute",
        })
        .check(listener(
            "gateway-tlsroute-mixed-termination",
            "tls-terminate",
            &["TLSRoute"],
            &[("Accepted", "True", "Accepted")],
            1,
        ))
        .check(listener(
            "gateway-tlsroute-mixed-termination",
            "tls-passthrough",
            &["TLSRoute"],
            &[("Accepted", "True", "Accepted")],
            1,
        ))
        .check(tls_terminated_to(
            "gateway-tlsroute-mixed-termination",
            8883,
            "tls.example.com",
            "tcp-backend",
        ))
        .check(Check::Tcp {
            gateway: nn("gateway-tlsroute-mixed-termination"),
            port: 8883,
            backend: nn("tcp-backend"),
            sni: Some("abc.example.com"),
            terminated: false,
        }),
        case(
            "TLSRouteInvalidNoMatchingListener",
            "tlsroute-invalid-no-matching-listener.yaml",
        )
        .profile(TLS)
        .check(kind_cond(
            "TLSRoute",
            "tlsroute-not-allowed-protocol-http",
            "gateway-tlsroute-http-only",
            "Accepted",
            "False",
            "NotAllowedByListeners",
        ))
        .check(kind_cond(
            "TLSRoute",
            "tlsroute-not-allowed-protocol-https",
            "gateway-tlsroute-https-only",
            "Accepted",
            "False",
            "NotAllowedByListeners",
        ))
        .check(kind_cond(
            "TLSRoute",
            "tlsroute-no-matching-section-name",
            "gateway-tlsroute-tls-passthrough-only",
            "Accepted",
            "False",
            "NoMatchingParent",
        ))
        .check(Check::NoAcceptedParents {
            kind: "TLSRoute",
            route: nn("tlsroute-not-allowed-protocol-http"),
        })
        .check(Check::NoAcceptedParents {
            kind: "TLSRoute",
            route: nn("tlsroute-not-allowed-protocol-https"),
        })
        .check(Check::NoAcceptedParents {
            kind: "TLSRoute",
            route: nn("tlsroute-no-matching-section-name"),
        })
        .check(zero_routes("gateway-tlsroute-http-only"))
        .check(zero_routes("gateway-tlsroute-https-only")),
        case(
            "TLSRouteListenerPassthroughSupportedKinds",
            "tlsroute-listener-passthrough-supported-kinds.yaml",
        )
        .profile(TLS)
        .check(listener(
            "gateway-tlsroute-passthrough-supported-kind",
            "tls-passthrough",
            &["TLSRoute"],
            &[("ResolvedRefs", "False", "InvalidRouteKinds")],
            0,
        )),
        case(
            "GRPCExactMethodMatching",
            "grpcroute-exact-method-matching.yaml",
        )
        .profile(GRPC)
        .check(accepted_grpc(SAME, &["exact-matching"]))
        .check(grpc(
            SAME,
            vec![
                rpc("Echo", G1),
                rpc("EchoTwo", G2),
                rpc("EchoThree", "").code(GRPC_UNIMPLEMENTED),
            ],
        )),
        case("GRPCRouteHeaderMatching", "grpcroute-header-matching.yaml")
            .profile(GRPC)
            .check(accepted_grpc(SAME, &["grpc-header-matching"]))
            .check(grpc(
                SAME,
                vec![
                    rpc("Echo", G1).md("Version", "one"),
                    rpc("Echo", G2).md("Version", "two"),
                    rpc("Echo", G1).md("Version", "two").md("Color", "orange"),
                    rpc("Echo", G2).md("Version", "two").md("Color", "blue"),
                    unmatched().md("Color", "orange"),
                    unmatched().md("Some-Other-Header", "one"),
                    rpc("Echo", G1).md("Color", "blue"),
                    rpc("Echo", G1).md("Color", "green"),
                    rpc("Echo", G2).md("Color", "red"),
                    rpc("Echo", G2).md("Color", "yellow"),
                    unmatched().md("Color", "purple"),
                ],
            )),
        case(
            "GRPCRouteListenerHostnameMatching",
            "grpcroute-listener-hostname-matching.yaml",
        )
        .profile(GRPC)
        .check(accepted_grpc(
            "grpcroute-listener-hostname-matching",
            &["backend-v1", "backend-v2", "backend-v3"],
        ))
        .check(grpc(
            "grpcroute-listener-hostname-matching",
            vec![
                rpc("Echo", G1).authority("bar.com"),
                rpc("Echo", G2).authority("foo.bar.com"),
                rpc("Echo", G3).authority("baz.bar.com"),
                rpc("Echo", G3).authority("boo.bar.com"),
                rpc("Echo", G3).authority("multiple.prefixes.bar.com"),
                rpc("Echo", G3).authority("multiple.prefixes.foo.com"),
                unmatched().authority("foo.com"),
                unmatched().authority("no.matching.host"),
            ],
        )),
        case("GRPCRouteWeight", "grpcroute-weight.yaml")
            .profile(GRPC)
            .check(accepted_grpc(SAME, &["weighted-backends"]))
            .check(grpc(SAME, vec![rpc("Echo", "")]))
            .check(Check::GrpcWeights {
                gateway: nn(SAME),
                weights: vec![(G1, 0.7), (G2, 0.3), (G3, 0.0)],
            }),
        case("GRPCRouteNamedRule", "grpcroute-named-rule.yaml")
            .profile(GRPC)
            .ext(&["GRPCRouteNamedRouteRule"])
            .check(accepted_grpc(SAME, &["grpc-named-rules"]))
            .check(grpc(SAME, vec![rpc("Echo", G1), rpc("EchoTwo", G2)])),
        case(
            "HTTPRouteBackendProtocolWebSocket",
            "httproute-backend-protocol-websocket.yaml",
        )
        .ext(&["HTTPRouteBackendProtocolWebSocket"])
        .check(accepted(SAME, &["backend-protocol-ws"]))
        .check(Check::WebSocket {
            gateway: nn(SAME),
            path: "/ws",
        }),
        case(
            "HTTPRouteBackendProtocolH2C",
            "httproute-backend-protocol-h2c.yaml",
        )
        .ext(&["HTTPRouteBackendProtocolH2C"])
        .check(accepted(SAME, &["backend-protocol-h2c"]))
        // The suite asks for a 200 from infra-backend-v1 to an h2c prior-knowledge
        // request; `want_proto` (not the suite's) also pins that the proxy spoke h2c to
        // the backend (the port's appProtocol), which the echo reports.
        .check(requests(SAME, vec![get("/").h2c().want_proto("HTTP/2.0")])),
        case("HTTPRouteRequestMirror", "httproute-request-mirror.yaml")
            .ext(&["HTTPRouteRequestMirror"])
            .check(accepted(SAME, &["request-mirror"]))
            .check(requests(
                SAME,
                vec![
                    get("/mirror").to("infra-backend-v1"),
                    modified_headers(get("/mirror-and-modify-headers")),
                ],
            ))
            .check(Check::Mirrored {
                path: "/mirror",
                backends: vec!["infra-backend-v2"],
            })
            .check(Check::Mirrored {
                path: "/mirror-and-modify-headers",
                backends: vec!["infra-backend-v2"],
            }),
        case(
            "HTTPRouteRequestPercentageMirror",
            "httproute-request-percentage-mirror.yaml",
        )
        .ext(&["HTTPRouteRequestPercentageMirror"])
        .check(accepted(SAME, &["request-percentage-mirror"]))
        .check(requests(
            SAME,
            vec![
                get("/percent-mirror").to("infra-backend-v1"),
                get("/percent-mirror-fraction").to("infra-backend-v1"),
                modified_headers(get("/percent-mirror-and-modify-headers")),
            ],
        ))
        .checks(
            [
                ("/percent-mirror", 20.0),
                ("/percent-mirror-fraction", 50.0),
                ("/percent-mirror-and-modify-headers", 35.0),
            ]
            .into_iter()
            .map(|(path, percent)| Check::MirroredShare {
                gateway: nn(SAME),
                path,
                backend: "infra-backend-v2",
                percent,
            })
            .collect(),
        ),
        case("GatewayInfrastructure", "gateway-infrastructure.yaml")
            .ext(&["GatewayInfrastructurePropagation"])
            .skip(
                "k8slb creates no resource per Gateway (the LB nodes' proxies serve every \
                 Gateway), so there is nothing to give spec.infrastructure's labels and \
                 annotations to",
            ),
        case(
            "HTTPRouteRequestMultipleMirrors",
            "httproute-request-multiple-mirrors.yaml",
        )
        .ext(&["HTTPRouteRequestMirror", "HTTPRouteRequestMultipleMirrors"])
        .check(accepted(SAME, &["request-multiple-mirrors"]))
        .check(requests(
            SAME,
            vec![
                get("/multi-mirror").to("infra-backend-v1"),
                get("/multi-mirror-and-modify-request-headers")
                    .to("infra-backend-v1")
                    .header("X-Header-Remove", "remove-val")
                    .header("X-Header-Add-Append", "append-val-1")
                    .want_header("X-Header-Add", "header-val-1")
                    .want_header("X-Header-Add-Append", "append-val-1,header-val-2")
                    .want_header("X-Header-Set", "set-overwrites-values")
                    .absent("X-Header-Remove"),
            ],
        ))
        .check(Check::Mirrored {
            path: "/multi-mirror",
            backends: vec!["infra-backend-v2", "infra-backend-v3"],
        })
        .check(Check::Mirrored {
            path: "/multi-mirror-and-modify-request-headers",
            backends: vec!["infra-backend-v2", "infra-backend-v3"],
        }),
        case("HTTPRouteCORS", "httproute-cors.yaml")
            .ext(&["HTTPRouteCORS"])
            .check(accepted(
                SAME,
                &[
                    "cors-multiple-origins-methods-headers",
                    "cors-wildcard-methods",
                    "cors-wildcard-origin",
                    "cors-wildcard-methods-headers",
                ],
            ))
            .check(requests(SAME, cors())),
        case("HTTPRouteRetry", "httproute-retry.yaml")
            .ext(&["HTTPRouteRetry"])
            .skip_on("nginx", NO_RETRY)
            .check(accepted(SAME, &["retries"]))
            .check(requests(SAME, retries())),
        case("HTTPRouteTimeoutRequest", "httproute-timeout-request.yaml")
            .ext(&["HTTPRouteRequestTimeout"])
            .check(accepted(SAME, &["request-timeout"]))
            .check(requests(
                SAME,
                vec![
                    get("/request-timeout"),
                    get("/request-timeout?delay=1s").status(504),
                    get("/disable-request-timeout?delay=1s"),
                ],
            )),
        case(
            "HTTPRouteTimeoutBackendRequest",
            "httproute-timeout-backend-request.yaml",
        )
        .ext(&["HTTPRouteBackendTimeout"])
        .check(accepted(SAME, &["backend-request-timeout"]))
        .check(requests(
            SAME,
            vec![
                get("/backend-timeout"),
                get("/backend-timeout?delay=1s").status(504),
                get("/disable-backend-timeout?delay=1s"),
            ],
        )),
        case("HTTPRouteNamedRule", "httproute-named-rule.yaml")
            .ext(&["HTTPRouteNamedRouteRule"])
            .check(accepted(SAME, &["http-named-rules"]))
            .check(requests(SAME, vec![get("/named"), get("/unnamed")])),
        case(
            "HTTPRouteRequestHeaderModifierBackendWeights",
            "httproute-request-header-modifier-backend-weights.yaml",
        )
        .ext(&["HTTPRouteBackendRequestHeaderModification"])
        .check(accepted(SAME, &["request-header-modifier-backend-weights"]))
        .check(requests(SAME, vec![get("/")]))
        .check(Check::HeaderNamesPod {
            gateway: nn(SAME),
            header: "Backend",
            count: 100,
        }),
        case(
            "HTTPRouteRedirectPortAndScheme",
            "httproute-redirect-port-and-scheme.yaml",
        )
        .ext(&["HTTPRoutePortRedirect", "GatewayPort8080"])
        .check(accepted(SAME, &["http-route-for-listener-on-port-80"]))
        .check(requests(
            SAME,
            vec![
                get("/scheme-nil-and-port-nil").redirect(302, to("http", None)),
                get("/scheme-nil-and-port-80").redirect(302, to("http", None)),
                get("/scheme-nil-and-port-8080").redirect(302, to("http", Some("8080"))),
                get("/scheme-https-and-port-nil").redirect(302, to("https", None)),
                get("/scheme-https-and-port-443").redirect(302, to("https", None)),
                get("/scheme-https-and-port-8443").redirect(302, to("https", Some("8443"))),
            ],
        ))
        .check(accepted(
            "same-namespace-with-http-listener-on-8080",
            &["http-route-for-listener-on-port-8080"],
        ))
        .check(requests_on(
            "same-namespace-with-http-listener-on-8080",
            8080,
            vec![
                get("/scheme-nil-and-port-nil").redirect(302, to("http", Some("8080"))),
                get("/scheme-nil-and-port-80").redirect(302, to("http", None)),
                get("/scheme-https-and-port-nil").redirect(302, to("https", None)),
            ],
        ))
        .check(accepted(
            "same-namespace-with-https-listener",
            &["http-route-for-listener-on-port-443"],
        ))
        .check(https_requests(
            "same-namespace-with-https-listener",
            vec![
                get("/scheme-nil-and-port-nil")
                    .host("example.org")
                    .redirect(302, to("https", None)),
                get("/scheme-nil-and-port-443")
                    .host("example.org")
                    .redirect(302, to("https", None)),
                get("/scheme-nil-and-port-8443")
                    .host("example.org")
                    .redirect(302, to("https", Some("8443"))),
                get("/scheme-http-and-port-nil")
                    .host("example.org")
                    .redirect(302, to("http", None)),
                get("/scheme-http-and-port-80")
                    .host("example.org")
                    .redirect(302, to("http", None)),
                get("/scheme-http-and-port-8080")
                    .host("example.org")
                    .redirect(302, to("http", Some("8080"))),
            ],
        )),
    ];
    // HTTPRouteBackendRequestHeaderModifier is HTTPRouteRequestHeaderModifier's test on
    // a manifest whose modifiers sit on the backendRefs (same route name, same
    // expectations).
    let core = v
        .iter()
        .find(|c| c.name == "HTTPRouteRequestHeaderModifier")
        .expect("the core header modifier case")
        .checks
        .clone();
    let mut backend = case(
        "HTTPRouteBackendRequestHeaderModifier",
        "httproute-request-header-modifier-backend.yaml",
    )
    .ext(&["HTTPRouteBackendRequestHeaderModification"]);
    backend.checks = core;
    v.push(backend);
    // The generation tests: the runner edits an object mid-test as the suite patches
    // it; the files source gives `metadata.generation` as the API server does (1, then
    // one more per spec change), so observedGeneration 1 then 2 is the suite's "latest
    // conditions" before and after, and its "generation should change".
    v.push(
        case(
            "HTTPRouteObservedGenerationBump",
            "httproute-observed-generation-bump.yaml",
        )
        .check(accepted(SAME, &["observed-generation-bump"]))
        .check(latest("HTTPRoute", "observed-generation-bump", 1))
        .check(edit("HTTPRoute", "observed-generation-bump", route_to_v2))
        .check(route_cond(
            "observed-generation-bump",
            SAME,
            "Accepted",
            "True",
            "",
        ))
        .check(accepted(SAME, &["observed-generation-bump"]))
        .check(latest("HTTPRoute", "observed-generation-bump", 2)),
    );
    v.push(
        case(
            "GatewayObservedGenerationBump",
            "gateway-observed-generation-bump.yaml",
        )
        .check(ready("gateway-observed-generation-bump"))
        .check(ready(SAME))
        .check(latest("Gateway", "gateway-observed-generation-bump", 1))
        .check(edit(
            "Gateway",
            "gateway-observed-generation-bump",
            add_alternate_listener,
        ))
        .check(ready("gateway-observed-generation-bump"))
        .check(latest("Gateway", "gateway-observed-generation-bump", 2)),
    );
    v.push(
        case(
            "GatewayClassObservedGenerationBump",
            "gatewayclass-observed-generation-bump.yaml",
        )
        .check(latest(
            "GatewayClass",
            "gatewayclass-observed-generation-bump",
            1,
        ))
        .check(class_cond(
            "gatewayclass-observed-generation-bump",
            "Accepted",
        ))
        .check(edit(
            "GatewayClass",
            "gatewayclass-observed-generation-bump",
            describe_new,
        ))
        .check(latest(
            "GatewayClass",
            "gatewayclass-observed-generation-bump",
            2,
        ))
        .check(class_cond(
            "gatewayclass-observed-generation-bump",
            "Accepted",
        )),
    );
    // GatewayOptionalAddressValue (provisional): an IPAddress entry without a value is
    // any address; the Gateway is ready, its conditions of its generation, addressed.
    v.push(
        case(
            "GatewayOptionalAddressValue",
            "gateway-optional-address-value.yaml",
        )
        .ext(&["GatewayAddressEmpty"])
        .check(ready("gateway-without-address-value"))
        .check(latest("Gateway", "gateway-without-address-value", 1)),
    );
    // GatewayStaticAddresses: an address type k8slb does not assign refuses the Gateway;
    // without it, an address outside the pools leaves it not Programmed; without that
    // one, the usable address asked for is its one address.
    let gsa = "gateway-static-addresses";
    v.push(
        case("GatewayStaticAddresses", "gateway-static-addresses.yaml")
            .ext(&["GatewayStaticAddresses"])
            .check(latest("Gateway", gsa, 1))
            .check(gateway_cond(gsa, "Accepted", "False", "UnsupportedAddress"))
            .check(edit("Gateway", gsa, drop_invalid_address))
            .check(latest("Gateway", gsa, 2))
            .check(gateway_cond(gsa, "Accepted", "True", "Accepted"))
            .check(gateway_cond(gsa, "Programmed", "False", "AddressNotUsable"))
            .check(edit("Gateway", gsa, drop_unusable_address))
            .check(latest("Gateway", gsa, 3))
            .check(gateway_cond(gsa, "Accepted", "True", "Accepted"))
            .check(gateway_cond(gsa, "Programmed", "True", "Programmed"))
            .check(listener(
                gsa,
                "http",
                &["HTTPRoute"],
                &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")],
                0,
            ))
            .check(Check::ListenerNames {
                gateway: nn(gsa),
                names: vec!["http"],
            })
            .check(Check::GatewayAddresses {
                gateway: nn(gsa),
                addresses: vec![crate::conformance::USABLE_ADDRESS],
            }),
    );
    // GatewayModifyListeners: a listener added serves its routes, one removed leaves the
    // status (its listeners counted exactly), the generation bumped each time. Its
    // HTTPS listener's hostname (secure.test.com) is covered only by the suite
    // certificate's bare `*`: served with a warning (see HTTPRouteHTTPSListener).
    let modified = |gw: &'static str, name: &'static str| {
        listener(
            gw,
            name,
            &["HTTPRoute"],
            &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")],
            1,
        )
    };
    v.push(
        case("GatewayModifyListeners", "gateway-modify-listeners.yaml")
            .check(latest("Gateway", "gateway-add-listener", 1))
            .check(latest("Gateway", "gateway-remove-listener", 1))
            .check(edit("Gateway", "gateway-add-listener", add_data_listener))
            .check(ready("gateway-add-listener"))
            .check(ready("gateway-remove-listener"))
            .check(modified("gateway-add-listener", "https"))
            .check(modified("gateway-add-listener", "http"))
            .check(Check::ListenerNames {
                gateway: nn("gateway-add-listener"),
                names: vec!["https", "http"],
            })
            .check(latest("Gateway", "gateway-add-listener", 2))
            .check(edit(
                "Gateway",
                "gateway-remove-listener",
                keep_http_listener,
            ))
            .check(ready("gateway-add-listener"))
            .check(ready("gateway-remove-listener"))
            .check(modified("gateway-remove-listener", "http"))
            .check(Check::ListenerNames {
                gateway: nn("gateway-remove-listener"),
                names: vec!["http"],
            })
            .check(latest("Gateway", "gateway-remove-listener", 2)),
    );
    // --- GATEWAY-TCP and GATEWAY-UDP (status and traffic: the suite's TCP echo
    // protocol and UDP echo) ---
    v.extend([
        case(
            "TCPRouteInvalidBackendRefNonexistent",
            "tcproute-invalid-backendref-nonexistent.yaml",
        )
        .profile(TCP)
        .check(kind_cond(
            "TCPRoute",
            "tcp-route-invalid-backend-ref-nonexistent",
            "tcp-gateway-invalid-backend",
            "ResolvedRefs",
            "False",
            "BackendNotFound",
        )),
        case(
            "TCPRouteInvalidCrossNamespaceBackendRef",
            "tcproute-invalid-cross-namespace-backend-ref.yaml",
        )
        .profile(TCP)
        .check(accepted_kind(
            "TCPRoute",
            "tcp-invalid-cross-namespace-backend-ref-gateway",
            &["tcp-invalid-cross-namespace-backend-ref"],
        ))
        .check(kind_cond(
            "TCPRoute",
            "tcp-invalid-cross-namespace-backend-ref",
            "tcp-invalid-cross-namespace-backend-ref-gateway",
            "ResolvedRefs",
            "False",
            "RefNotPermitted",
        )),
        case(
            "TCPRouteInvalidNonTCPListener",
            "tcproute-invalid-non-tcp-listener.yaml",
        )
        .profile(TCP)
        .check(kind_cond(
            "TCPRoute",
            "tcp-route",
            "tcp-mixed-protocol-gateway",
            "Accepted",
            "False",
            "NotAllowedByListeners",
        ))
        .check(zero_routes("tcp-mixed-protocol-gateway")),
        case(
            "TCPRouteParentRefAttachAll",
            "tcproute-parentref-attach-all.yaml",
        )
        .profile(TCP)
        .check(accepted_kind(
            "TCPRoute",
            "tcp-attach-all-gateway",
            &["tcp-route-attach-all"],
        ))
        .check(tcp_to(
            "tcp-attach-all-gateway",
            9310,
            "tcp-echo-attach-all",
        ))
        .check(tcp_to(
            "tcp-attach-all-gateway",
            9311,
            "tcp-echo-attach-all",
        ))
        .check(tcp_to(
            "tcp-attach-all-gateway",
            9312,
            "tcp-echo-attach-all",
        ))
        .check(tcp_to(
            "tcp-attach-all-gateway",
            9313,
            "tcp-echo-attach-all",
        )),
        case(
            "TCPRouteParentRefPortAndSectionName",
            "tcproute-parentref-port-and-section-name.yaml",
        )
        .profile(TCP)
        .check(accepted_kind(
            "TCPRoute",
            "tcp-multi-listener-gateway",
            &[
                "tcp-route-by-port",
                "tcp-route-by-section",
                "tcp-route-by-section-and-port",
            ],
        ))
        .check(tcp_to("tcp-multi-listener-gateway", 9300, "tcp-echo-one"))
        .check(tcp_to("tcp-multi-listener-gateway", 9301, "tcp-echo-two"))
        .check(tcp_to("tcp-multi-listener-gateway", 9302, "tcp-echo-three")),
        case("TCPRouteReferenceGrant", "tcproute-reference-grant.yaml")
            .profile(TCP)
            .check(accepted_kind(
                "TCPRoute",
                "tcp-reference-grant-gateway",
                &["tcp-reference-grant"],
            ))
            .check(tcp_to(
                "tcp-reference-grant-gateway",
                9320,
                &format!("{WEB}/tcp-reference-grant-backend"),
            ))
            .check(Check::Delete {
                kind: "ReferenceGrant",
                object: nn(&format!("{WEB}/tcp-reference-grant")),
            })
            .check(kind_cond(
                "TCPRoute",
                "tcp-reference-grant",
                "tcp-reference-grant-gateway",
                "ResolvedRefs",
                "False",
                "RefNotPermitted",
            )),
        // Two TCPRoutes on one listener: both Accepted, both counted, the older one
        // served (the newer is created once the older is accepted, as the suite does).
        {
            const GW: &str = "tcp-multi-route-attach-gateway";
            let mut c = case(
                "TCPRouteMultipleRoutesAttachment",
                "tcproute-multiple-routes-attachment.yaml",
            )
            .profile(TCP)
            .check(accepted_kind("TCPRoute", GW, &["tcproute-attach-older"]))
            .check(Check::Add {
                doc: newer_tcp_route,
            })
            .check(kind_cond(
                "TCPRoute",
                "tcproute-attach-older",
                GW,
                "Accepted",
                "True",
                "Accepted",
            ))
            .check(kind_cond(
                "TCPRoute",
                "tcproute-attach-newer",
                GW,
                "Accepted",
                "True",
                "Accepted",
            ))
            .check(listener(
                GW,
                "tcp",
                &["TCPRoute"],
                &[("Accepted", "True", "Accepted")],
                2,
            ));
            // The suite samples 100 connections; each is answered by the older route's
            // backend.
            for _ in 0..20 {
                c = c.check(tcp_to(GW, 9310, "tcp-attach-backend-1"));
            }
            c
        },
        case("TCPRouteWeightedRouting", "tcproute-weighted-routing.yaml")
            .profile(TCP)
            .check(accepted_kind(
                "TCPRoute",
                "tcp-weighted-gateway",
                &["tcp-weighted-route"],
            ))
            .check(Check::TcpWeights {
                gateway: nn("tcp-weighted-gateway"),
                port: 9300,
                weights: vec![
                    ("tcp-backend-v1", 0.7),
                    ("tcp-backend-v2", 0.3),
                    ("tcp-backend-v3", 0.0),
                ],
            }),
        case(
            "UDPRouteParentRefAttachAllListeners",
            "udproute-parentref-attach-all-listeners.yaml",
        )
        .profile(UDP)
        .skip_on("haproxy", NO_UDP)
        .check(accepted_kind(
            "UDPRoute",
            "udp-attach-all-listeners-gateway",
            &["udp-route-attach-all"],
        ))
        .check(udp_to(
            "udp-attach-all-listeners-gateway",
            5310,
            "udp-echo-attach-all",
        ))
        .check(udp_to(
            "udp-attach-all-listeners-gateway",
            5311,
            "udp-echo-attach-all",
        ))
        .check(udp_to(
            "udp-attach-all-listeners-gateway",
            5312,
            "udp-echo-attach-all",
        )),
        case(
            "UDPRouteParentRefPortAndSectionName",
            "udproute-parentref-port-and-section-name.yaml",
        )
        .profile(UDP)
        .skip_on("haproxy", NO_UDP)
        .check(accepted_kind(
            "UDPRoute",
            "udp-multi-listener-gateway",
            &[
                "udp-route-by-port",
                "udp-route-by-section",
                "udp-route-by-section-and-port",
            ],
        ))
        .check(udp_to(
            "udp-multi-listener-gateway",
            5300,
            "udp-echo-by-port",
        ))
        .check(udp_to(
            "udp-multi-listener-gateway",
            5301,
            "udp-echo-by-section",
        ))
        .check(udp_to(
            "udp-multi-listener-gateway",
            5302,
            "udp-echo-by-section-and-port",
        )),
        case("UDPRouteReferenceGrant", "udproute-reference-grant.yaml")
            .profile(UDP)
            .skip_on("haproxy", NO_UDP)
            .check(Check::Accepted {
                gateway: nn("udp-gateway-reference-grant"),
                routes: vec![nn("udp-route-reference-grant")],
                kind: "UDPRoute",
            })
            .check(udp_to(
                "udp-gateway-reference-grant",
                5300,
                &format!("{APP}/udp-echo-reference-grant"),
            ))
            .check(Check::Delete {
                kind: "ReferenceGrant",
                object: nn(&format!("{APP}/udp-reference-grant")),
            })
            .check(kind_cond(
                "UDPRoute",
                "udp-route-reference-grant",
                "udp-gateway-reference-grant",
                "ResolvedRefs",
                "False",
                "RefNotPermitted",
            )),
        // As TCPRouteMultipleRoutesAttachment, for UDP (provisional upstream).
        {
            const GW: &str = "udp-multi-route-attach-gateway";
            let mut c = case(
                "UDPRouteMultipleRoutesAttachment",
                "udproute-multiple-routes-attachment.yaml",
            )
            .profile(UDP)
            .skip_on("haproxy", NO_UDP)
            .check(accepted_kind("UDPRoute", GW, &["udproute-attach-older"]))
            .check(Check::Add {
                doc: newer_udp_route,
            });
            for route in ["udproute-attach-older", "udproute-attach-newer"] {
                c = c.check(kind_cond(
                    "UDPRoute", route, GW, "Accepted", "True", "Accepted",
                ));
            }
            c = c.check(listener(
                GW,
                "udp",
                &["UDPRoute"],
                &[("Accepted", "True", "Accepted")],
                2,
            ));
            // The suite's 20 probes, each answered by the older route's backend.
            for _ in 0..20 {
                c = c.check(udp_to(GW, 5301, "udp-attach-backend-1"));
            }
            c
        },
        // A DNS query through the UDP listener reaches the suite's coredns (here a DNS
        // answerer) and gets a response (provisional upstream).
        case("UDPRoute", "udproute-simple.yaml")
            .profile(UDP)
            .skip_on("haproxy", NO_UDP)
            .check(accepted_kind("UDPRoute", "udp-gateway", &["udp-coredns"]))
            .check(Check::Dns {
                gateway: nn("udp-gateway"),
                port: 5300,
            }),
        case("UDPRouteWeightedRouting", "udproute-weighted-routing.yaml")
            .profile(UDP)
            .skip_on("haproxy", NO_UDP)
            .check(accepted_kind(
                "UDPRoute",
                "udp-weighted-gateway",
                &["udp-weighted-route"],
            ))
            .check(Check::UdpWeights {
                gateway: nn("udp-weighted-gateway"),
                port: 5300,
                weights: vec![
                    ("udp-backend-v1", 0.7),
                    ("udp-backend-v2", 0.3),
                    ("udp-backend-v3", 0.0),
                ],
            }),
        case(
            "UDPRouteInvalidBackendRefNonexistent",
            "udproute-invalid-backendref-nonexistent.yaml",
        )
        .profile(UDP)
        .skip_on("haproxy", NO_UDP)
        .check(kind_cond(
            "UDPRoute",
            "udp-route-invalid-backend-ref-nonexistent",
            "udp-gateway-invalid-backend",
            "ResolvedRefs",
            "False",
            "BackendNotFound",
        )),
        case(
            "UDPRouteInvalidCrossNamespaceBackendRef",
            "udproute-invalid-cross-namespace-backend-ref.yaml",
        )
        .profile(UDP)
        .skip_on("haproxy", NO_UDP)
        .check(accepted_kind(
            "UDPRoute",
            "udp-gateway-invalid-cross-namespace-backend-ref",
            &["udp-route-invalid-cross-namespace-backend-ref"],
        ))
        .check(kind_cond(
            "UDPRoute",
            "udp-route-invalid-cross-namespace-backend-ref",
            "udp-gateway-invalid-cross-namespace-backend-ref",
            "ResolvedRefs",
            "False",
            "RefNotPermitted",
        )),
        case(
            "UDPRouteNotAllowedByListeners",
            "udproute-not-allowed-by-listeners.yaml",
        )
        .profile(UDP)
        .skip_on("haproxy", NO_UDP)
        .check(kind_cond(
            "UDPRoute",
            "udproute-not-allowed-by-listeners",
            "udproute-tls-only-gateway",
            "Accepted",
            "False",
            "NotAllowedByListeners",
        ))
        .check(zero_routes("udproute-tls-only-gateway")),
    ]);
    v.extend(backend_tls_cases());
    v.extend(client_certificate_cases());
    v.extend(listener_sets::cases());

    v
}

/// HTTPRouteRetry's requests: to the retry simulation of `infra-backend-v3` (one
/// replica), each with a new `uuid`, whose first `succeedAfter` attempts get
/// `responseCode`: rule `/retry/code-500-attempts-3` retries 500 three times (not 503),
/// `/retry/code-all-attempts-2` retries 500, 502, 503 and 504 twice. Past the attempts,
/// the backend's failure is the answer.
fn retries() -> Vec<Req> {
    let r = |path: &str, code: u16, after: u16, status: u16| {
        get(&format!("{path}?responseCode={code}&succeedAfter={after}"))
            .to("infra-backend-v3")
            .status(status)
            .fresh_uuid()
    };
    const THREE: &str = "/retry/code-500-attempts-3";
    const ALL: &str = "/retry/code-all-attempts-2";
    let mut v = vec![
        r(THREE, 500, 2, 200),
        r(THREE, 500, 4, 500),
        r(THREE, 503, 2, 503),
    ];
    for code in [500, 502, 503, 504] {
        v.push(r(ALL, code, 1, 200));
        v.push(r(ALL, code, 3, code));
    }
    v
}

/// GatewayHTTPListenerIsolation's requests: each host reaches only the routes of the
/// most specific listener it matches.
fn isolation() -> Vec<Req> {
    let paths = [
        "/empty-hostname",
        "/wildcard-example-com",
        "/wildcard-foo-example-com",
        "/abc-foo-example-com",
    ];
    let hosts = [
        "bar.com",
        "bar.example.com",
        "bar.foo.example.com",
        "abc.foo.example.com",
    ];
    let mut out = Vec::new();
    for (i, host) in hosts.iter().enumerate() {
        for (j, path) in paths.iter().enumerate() {
            let r = get(path).host(host);
            out.push(if i == j { r.to(V1) } else { r.status(404) });
        }
    }
    out
}

/// A redirect to `example.org` with `scheme` and `port` (None: the scheme's default).
fn to(scheme: &str, port: Option<&str>) -> Redirect {
    Redirect {
        scheme: Some(scheme.into()),
        host: Some("example.org".into()),
        port: port.map(str::to_string),
        path: None,
    }
}

fn port_to(host: Option<&str>, port: &str) -> Redirect {
    Redirect {
        host: host.map(str::to_string),
        port: Some(port.into()),
        ..Redirect::default()
    }
}

fn scheme_to(host: Option<&str>, scheme: &str) -> Redirect {
    Redirect {
        host: host.map(str::to_string),
        scheme: Some(scheme.into()),
        ..Redirect::default()
    }
}

/// The BackendTLSPolicy tests (GATEWAY-HTTP, extended feature BackendTLSPolicy): TLS
/// from the proxy to the suite's `tls-backend` (its certificate signed by
/// `tls-checks-ca-certificate`, for abc.example.com, other.example.com and a SPIFFE
/// URI). Beyond the suite, a 200 also checks the server name the backend was asked
/// for (`want_sni`): that the proxy spoke TLS to it, with the policy's hostname.
fn backend_tls_cases() -> Vec<Case> {
    const BTLS: &[&str] = &["BackendTLSPolicy"];
    const CLIENT_CERT: &[&str] = &["BackendTLSPolicy", "GatewayBackendClientCertificate"];
    const HTTPS_GW: &str = "same-namespace-with-https-listener";
    const FAILS: &[u16] = &[500, 502, 503];
    let abc = |path: &str| get(path).host("abc.example.com");
    let refused = |policy: &str, reason: &'static str| {
        vec![
            policy_cond(policy, SAME, "Accepted", "False", "NoValidCACertificate"),
            policy_cond(policy, SAME, "ResolvedRefs", "False", reason),
        ]
    };
    vec![
        // Transcribed without its last subtest (the policy and its ConfigMap edited while
        // the test runs: the runner applies manifests, it does not patch them); the
        // policy it edits is checked Accepted.
        case("BackendTLSPolicy", "backendtlspolicy.yaml")
            .ext(BTLS)
            .check(accepted(HTTPS_GW, &["backendtlspolicy-reencrypt"]))
            .checks(policy_ok("normative-test", HTTPS_GW))
            .check(https_requests(
                HTTPS_GW,
                vec![get("/backendtlspolicy")
                    .host("https-listener.org")
                    .want_sni("abc.example.com")],
            ))
            .check(accepted(SAME, &["backendtlspolicy"]))
            .checks(policy_ok("normative-test", SAME))
            .checks(policy_ok("host-mismatch", SAME))
            .checks(policy_ok("cert-mismatch", SAME))
            .checks(policy_ok("reconcile-test", SAME))
            .check(requests(
                SAME,
                vec![
                    abc("/backendtlspolicy").want_sni("abc.example.com"),
                    // As the suite sends it (abc.example.org, which the route's
                    // hostname does not take: a 404 is the failure it sees).
                    get("/backendtlspolicy-host-mismatch")
                        .host("abc.example.org")
                        .fails(),
                    // The same path for abc.example.com: the backend's certificate
                    // does not name mismatch.example.com, so it fails too.
                    abc("/backendtlspolicy-host-mismatch").statuses(FAILS),
                    abc("/backendtlspolicy-cert-mismatch").fails(),
                    abc("/backendtlspolicy-reconcile-test").want_sni("abc.example.com"),
                ],
            )),
        case(
            "BackendTLSPolicyConflictResolution",
            "backendtlspolicy-conflict-resolution.yaml",
        )
        .ext(BTLS)
        .check(accepted(SAME, &["backendtlspolicy-conflict-resolution"]))
        .check(policy_cond(
            "conflicted-without-section-name-1",
            SAME,
            "Accepted",
            "True",
            "Accepted",
        ))
        .check(policy_cond(
            "conflicted-without-section-name-2",
            SAME,
            "Accepted",
            "False",
            "Conflicted",
        ))
        .check(policy_cond(
            "conflicted-with-section-name-1",
            SAME,
            "Accepted",
            "True",
            "Accepted",
        ))
        .check(policy_cond(
            "conflicted-with-section-name-2",
            SAME,
            "Accepted",
            "False",
            "Conflicted",
        ))
        .check(policy_cond(
            "not-conflicted-with-section-name",
            SAME,
            "Accepted",
            "True",
            "Accepted",
        ))
        .check(policy_cond(
            "not-conflicted-without-section-name",
            SAME,
            "Accepted",
            "True",
            "Accepted",
        ))
        .check(requests(
            SAME,
            vec![
                abc("/backendtlspolicy-conflicted-without-section-name")
                    .want_sni("other.example.com"),
                abc("/backendtlspolicy-conflicted-with-section-name").want_sni("other.example.com"),
                abc("/backendtlspolicy-not-conflicted-with-section-name")
                    .want_sni("other.example.com"),
                abc("/backendtlspolicy-not-conflicted-without-section-name")
                    .want_sni("abc.example.com"),
            ],
        )),
        case(
            "BackendTLSPolicyInvalidCACertificateRef",
            "backendtlspolicy-invalid-ca-certificate-ref.yaml",
        )
        .ext(BTLS)
        .check(accepted_only(
            SAME,
            &["backendtlspolicy-invalid-ca-certificate-ref"],
        ))
        .checks(refused(
            "nonexistent-ca-certificate-ref",
            "InvalidCACertificateRef",
        ))
        .checks(refused(
            "malformed-ca-certificate-ref",
            "InvalidCACertificateRef",
        ))
        .check(requests(
            SAME,
            vec![
                abc("/backendtlspolicy-nonexistent-ca-certificate-ref").statuses(&[500, 502, 503]),
                abc("/backendtlspolicy-malformed-ca-certificate-ref").statuses(&[500, 502, 503]),
            ],
        )),
        case(
            "BackendTLSPolicyInvalidKind",
            "backendtlspolicy-invalid-kind.yaml",
        )
        .ext(BTLS)
        .check(accepted_only(SAME, &["backendtlspolicy-invalid-kind-test"]))
        .checks(refused("invalid-kind", "InvalidKind"))
        .check(requests(
            SAME,
            vec![abc("/backendtlspolicy-invalid-kind").statuses(&[500, 502, 503])],
        )),
        case("BackendTLSPolicySANValidation", "backendtlspolicy-san.yaml")
            .ext(&["BackendTLSPolicy", "BackendTLSPolicySANValidation"])
            .skip(
                "subjectAltNames are refused (Accepted False, Invalid): neither proxy checks \
                 a URI SAN, and nginx verifies only the name it sends as SNI \
                 (proxy_ssl_name is both)",
            ),
        // The policy's ancestor conditions are of its generation before and after the
        // suite patches its validation hostname; it stays Accepted.
        case(
            "BackendTLSPolicyObservedGenerationBump",
            "backendtlspolicy-observed-generation-bump.yaml",
        )
        .ext(BTLS)
        .check(latest("BackendTLSPolicy", "observed-generation-bump", 1))
        .check(edit(
            "BackendTLSPolicy",
            "observed-generation-bump",
            validate_foo,
        ))
        .check(policy_cond(
            "observed-generation-bump",
            SAME,
            "Accepted",
            "True",
            "",
        ))
        .check(latest("BackendTLSPolicy", "observed-generation-bump", 2)),
        // spec.tls.backend.clientCertificateRef (GatewayBackendClientCertificate): each
        // invalid reference gives the Gateway ResolvedRefs False with the spec's reason
        // (the Gateway Accepted, its conditions of its generation).
        {
            let mut c = case(
                "GatewayInvalidTLSBackendConfiguration",
                "gateway-invalid-tls-backend-configuration.yaml",
            )
            .ext(CLIENT_CERT);
            for (gw, reason) in [
                (
                    "gateway-client-certificate-nonexistent-secret",
                    "InvalidClientCertificateRef",
                ),
                (
                    "gateway-client-certificate-unsupported-group",
                    "InvalidClientCertificateRef",
                ),
                (
                    "gateway-client-certificate-unsupported-kind",
                    "InvalidClientCertificateRef",
                ),
                (
                    "gateway-client-certificate-malformed-secret",
                    "InvalidClientCertificateRef",
                ),
                (
                    "gateway-client-certificate-missing-reference-grant",
                    "RefNotPermitted",
                ),
            ] {
                c = c
                    .check(latest("Gateway", gw, 1))
                    .check(gateway_cond(gw, "ResolvedRefs", "False", reason))
                    .check(gateway_cond(gw, "Accepted", "True", "Accepted"));
            }
            c
        },
        // The Gateway presents tls-checks-client-certificate to the TLS backend of its
        // route (the BackendTLSPolicy's): Gateway and route Accepted, the route's and
        // the Gateway's references resolved, the policy Accepted; a request for
        // abc.example.com gets 200 from the backend, which was asked for
        // abc.example.com (SNI) and shown the client certificate (among its peer
        // certificates, as the suite's echo reports them).
        {
            const GW: &str = "gateway-tls-backend-client-certificate";
            case(
                "GatewayTLSBackendClientCertificate",
                "gateway-tls-backend-client-certificate.yaml",
            )
            .ext(CLIENT_CERT)
            .check(accepted(GW, &[GW]))
            .check(policy_cond(
                "gateway-tls-backend-client-certificate-test",
                GW,
                "Accepted",
                "True",
                "Accepted",
            ))
            .check(gateway_cond(GW, "ResolvedRefs", "True", "ResolvedRefs"))
            .check(requests(
                GW,
                vec![get("/")
                    .host("abc.example.com")
                    .want_sni("abc.example.com")
                    .want_client_cert("tls-checks-client-certificate")],
            ))
        },
    ]
}

/// TLSRouteHostnameIntersection: four Gateways with one passthrough listener on 443
/// each (hostname `abc.example.com`, `*.example.com`, `*.com`, none), two TLSRoutes on
/// each (one on the first); a TLS connection is routed by the intersection of the
/// listener's and the route's hostnames (HTTPS through to the suite's `tls-backend` and
/// `tls-backend-2`), and a server name outside it is refused.
fn tlsroute_hostname_intersection() -> Case {
    let gateways: [(&str, &[&str], &'static str); 4] = [
        (
            "gw-tlsroute-exact-hostname-x-1",
            &["tlsroute-more-specific-wc-hostname-x-1"],
            "non.matching.com",
        ),
        (
            "gw-tlsroute-more-specific-wc-hostname-x-2",
            &[
                "tlsroute-exact-hostname-x-2",
                "tlsroute-less-specific-wc-hostname-x-2",
            ],
            "non.matching.com",
        ),
        (
            "gw-tlsroute-less-specific-wc-hostname-x-3",
            &[
                "tlsroute-exact-hostname-x-3",
                "tlsroute-more-specific-wc-hostname-x-3",
            ],
            "non.matching.com",
        ),
        (
            "gw-tlsroute-empty-hostname-x-4",
            &[
                "tlsroute-exact-hostname-x-4",
                "tlsroute-less-specific-wc-hostname-x-4",
            ],
            "non.matching.org",
        ),
    ];
    let mut c = case(
        "TLSRouteHostnameIntersection",
        "tlsroute-hostname-intersection.yaml",
    )
    .profile(TLS);
    for (i, (gw, routes, outside)) in gateways.into_iter().enumerate() {
        c = c.check(Check::Accepted {
            gateway: nn(gw),
            routes: routes.iter().map(|r| nn(r)).collect(),
            kind: "TLSRoute",
        });
        for r in routes {
            c = c.check(kind_cond(
                "TLSRoute",
                r,
                gw,
                "ResolvedRefs",
                "True",
                "ResolvedRefs",
            ));
        }
        let mut reqs = vec![get("/").host("abc.example.com").to("tls-backend")];
        if i > 0 {
            reqs.push(get("/").host("other.example.com").to("tls-backend-2"));
        }
        c = c
            .check(https_requests(gw, reqs))
            .check(tls_rejected(gw, outside));
    }
    c
}

/// The condition `type_` = `status` (`reason`, empty: any) of a Gateway's listener.
pub fn listener_cond(
    gateway: &str,
    listener: &'static str,
    type_: &'static str,
    status: &'static str,
    reason: &'static str,
) -> Check {
    Check::ListenerCondition {
        gateway: nn(gateway),
        listener,
        cond: Cond {
            type_,
            status,
            reason,
        },
    }
}

/// A listener's ResolvedRefs, Accepted and Programmed as the suite's
/// `GatewayListenerMustHaveConditions` lists them (an empty reason: any).
fn listener_conds(
    gateway: &str,
    listener: &'static str,
    c: [(&'static str, &'static str); 3],
) -> Vec<Check> {
    vec![
        listener_cond(gateway, listener, "ResolvedRefs", c[0].0, c[0].1),
        listener_cond(gateway, listener, "Accepted", c[1].0, c[1].1),
        listener_cond(gateway, listener, "Programmed", c[2].0, c[2].1),
    ]
}

/// The client certificate validation tests (GATEWAY-HTTP, extended feature
/// GatewayFrontendClientCertificateValidation): the suite's CAs
/// `tls-validity-checks-ca-certificate` (default) and
/// `tls-validity-checks-per-port-ca-certificate`, each signing one client certificate.
/// A failure is the suite's: the TLS round trip fails (no HTTP answer). Not transcribed:
/// that the client was asked for its certificate (the suite's hook on the handshake;
/// curl does not say).
fn client_certificate_cases() -> Vec<Case> {
    const FEATURE: &[&str] = &["GatewayFrontendClientCertificateValidation"];
    const GW: &str = "client-validation-default";
    const INVALID: &str = "gateway-with-invalid-client-cert-validation";
    const DEFAULT_GW: &str = "invalid-default-client-validation-config";
    const DEFAULT_CERT: &str = "tls-validity-checks-client-certificate";
    const PORT_CERT: &str = "tls-validity-checks-per-port-client-certificate";
    const FALLBACK_GW: &str = "client-validation-insecure-fallback";
    let ok = [("True", ""), ("True", ""), ("True", "")];
    let refused = |reason: &'static str| {
        [
            ("False", reason),
            ("False", "NoValidCACertificate"),
            ("False", ""),
        ]
    };
    let mut invalid = case(
        "GatewayInvalidFrontendClientCertificateValidation",
        "gateway-with-invalid-clientcertificate-validation.yaml",
    )
    // Upstream it also names ReferenceGrant, a core feature: not an extended one to
    // report.
    .ext(FEATURE);
    invalid.checks = [
        listener_conds(INVALID, "https", ok),
        listener_conds(
            INVALID,
            "https-unresolved",
            refused("InvalidCACertificateRef"),
        ),
        listener_conds(
            INVALID,
            "https-invalid-kind",
            refused("InvalidCACertificateKind"),
        ),
        listener_conds(INVALID, "https-grant-missing", refused("RefNotPermitted")),
    ]
    .concat();
    let mut invalid_default = case(
        "GatewayFrontendInvalidDefaultClientCertificateValidation",
        "gateway-invalid-default-frontend-client-certificate-validation.yaml",
    )
    .ext(FEATURE);
    invalid_default.checks = [
        listener_conds(DEFAULT_GW, "http", ok),
        vec![requests(
            DEFAULT_GW,
            vec![get("/").host("example.org").to(V1)],
        )],
        listener_conds(DEFAULT_GW, "https", refused("InvalidCACertificateRef")),
        vec![https_requests(
            DEFAULT_GW,
            vec![get("/").host("example.org").no_answer()],
        )],
    ]
    .concat();
    vec![
        case(
            "GatewayFrontendClientCertificateValidation",
            "gateway-with-clientcertificate-validation.yaml",
        )
        .ext(FEATURE)
        .check(accepted(
            GW,
            &[
                "client-certificate-validation-https-test",
                "client-certificate-validation-https-test-no-hostname",
            ],
        ))
        .check(https_requests(
            GW,
            vec![
                get("/")
                    .host("example.org")
                    .client_cert(DEFAULT_CERT)
                    .to(V1),
                get("/")
                    .host("example.org")
                    .client_cert(PORT_CERT)
                    .no_answer(),
                get("/").host("example.org").no_answer(),
            ],
        ))
        .check(requests_tls_on(
            GW,
            8443,
            vec![
                get("/")
                    .host("second-example.org")
                    .client_cert(PORT_CERT)
                    .to("infra-backend-v2"),
                get("/")
                    .host("second-example.org")
                    .client_cert(DEFAULT_CERT)
                    .no_answer(),
            ],
        )),
        invalid,
        invalid_default,
        case(
            "GatewayFrontendClientCertificateValidationInsecureFallback",
            "gateway-with-clientcertificate-validation-insecure-fallback.yaml",
        )
        .ext(&[
            "GatewayFrontendClientCertificateValidation",
            "GatewayFrontendClientCertificateValidationInsecureFallback",
        ])
        .check(accepted(
            FALLBACK_GW,
            &[
                "client-cert-validation-insecure-fallback-test",
                "client-cert-validation-insecure-fallback-test-no-hostname",
            ],
        ))
        .check(gateway_cond(
            FALLBACK_GW,
            "InsecureFrontendValidationMode",
            "True",
            "ConfigurationChanged",
        ))
        .check(https_requests(
            FALLBACK_GW,
            vec![
                get("/")
                    .host("example.org")
                    .client_cert(DEFAULT_CERT)
                    .to(V1),
                get("/").host("example.org").client_cert(PORT_CERT).to(V1),
                get("/").host("example.org").to(V1),
            ],
        ))
        .check(requests_tls_on(
            FALLBACK_GW,
            8443,
            vec![
                get("/")
                    .host("second-example.org")
                    .client_cert(PORT_CERT)
                    .to("infra-backend-v2"),
                get("/")
                    .host("second-example.org")
                    .client_cert(DEFAULT_CERT)
                    .to("infra-backend-v2"),
                get("/").host("second-example.org").to("infra-backend-v2"),
            ],
        )),
    ]
}

/// The object's conditions are those of its generation `generation`.
fn latest(kind: &'static str, object: &str, generation: i64) -> Check {
    Check::LatestGeneration {
        kind,
        object: nn(object),
        generation,
    }
}

/// The suite patches the object with `edit`.
fn edit(kind: &'static str, object: &str, edit: fn(&mut Value)) -> Check {
    Check::Edit {
        kind,
        object: nn(object),
        edit,
    }
}

/// The suite's `NamespacesMustBeReady` for one Gateway: Accepted and Programmed.
fn ready(gateway: &str) -> Check {
    Check::GatewayReady {
        gateway: nn(gateway),
    }
}

/// The GatewayClass has the condition `type_` (any status: the suite's
/// `GWCMustHaveAcceptedConditionAny`).
fn class_cond(class: &str, type_: &'static str) -> Check {
    Check::ClassCondition {
        class: class.to_string(),
        type_,
    }
}

/// TCPRouteMultipleRoutesAttachment's second route: `tcproute-attach-newer`, on the
/// same listener, to `tcp-attach-backend-2` port 3000.
fn newer_tcp_route() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "TCPRoute",
        "metadata": {"name": "tcproute-attach-newer", "namespace": "gateway-conformance-infra"},
        "spec": {
            "parentRefs": [{"name": "tcp-multi-route-attach-gateway", "sectionName": "tcp"}],
            "rules": [{"backendRefs": [{"name": "tcp-attach-backend-2", "port": 3000}]}],
        },
    })
}

/// UDPRouteMultipleRoutesAttachment's second route: `udproute-attach-newer`, on the
/// same listener, to `udp-attach-backend-2` port 8080.
fn newer_udp_route() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "UDPRoute",
        "metadata": {"name": "udproute-attach-newer", "namespace": "gateway-conformance-infra"},
        "spec": {
            "parentRefs": [{"name": "udp-multi-route-attach-gateway", "sectionName": "udp"}],
            "rules": [{"backendRefs": [{"name": "udp-attach-backend-2", "port": 8080}]}],
        },
    })
}

/// BackendTLSPolicyObservedGenerationBump's patch: the validation hostname
/// foo.example.com.
fn validate_foo(d: &mut Value) {
    d["spec"]["validation"]["hostname"] = json!("foo.example.com");
}

/// HTTPRouteObservedGenerationBump's patch: the first backendRef to infra-backend-v2.
fn route_to_v2(d: &mut Value) {
    d["spec"]["rules"][0]["backendRefs"][0]["name"] = json!(V2);
}

/// GatewayObservedGenerationBump's patch: a listener `alternate` for foo.com on port 80.
fn add_alternate_listener(d: &mut Value) {
    push_listener(
        d,
        json!({
            "name": "alternate", "hostname": "foo.com", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}},
        }),
    );
}

/// GatewayModifyListeners' first patch: a listener `http` for data.test.com on port 80.
fn add_data_listener(d: &mut Value) {
    push_listener(
        d,
        json!({
            "name": "http", "hostname": "data.test.com", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}},
        }),
    );
}

fn push_listener(d: &mut Value, l: Value) {
    if let Some(ls) = d["spec"]["listeners"].as_array_mut() {
        ls.push(l);
    }
}

/// GatewayModifyListeners' second patch: only the listener `http` is left.
fn keep_http_listener(d: &mut Value) {
    if let Some(ls) = d["spec"]["listeners"].as_array_mut() {
        ls.retain(|l| l["name"] == "http");
    }
}

/// GatewayClassObservedGenerationBump's patch: `spec.description` "new".
fn describe_new(d: &mut Value) {
    d["spec"]["description"] = json!("new");
}

/// HTTPRouteHTTPSListenerDetectMisdirectedRequests' requests: (server name, Host,
/// status, backend), over HTTP/2.
fn misdirected() -> Vec<Req> {
    let (e, s, u) = ("example.org", "second-example.org", "unknown-example.org");
    let (w3, w4, w5) = (
        "third-example.wildcard.org",
        "fourth-example.wildcard.org",
        "fith-example.wildcard.org",
    );
    let rows: &[(&str, &str, u16, &str)] = &[
        (e, e, 200, V1),
        (e, s, 421, ""),
        (e, u, 404, ""),
        (s, s, 200, V2),
        (s, e, 421, ""),
        (s, u, 421, ""),
        (w3, w3, 200, V3),
        (w3, w5, 200, V3),
        (w3, w4, 421, ""),
        (w3, s, 421, ""),
        (w3, u, 421, ""),
        // The suite reuses infra-backend-v1 for the fourth route.
        (w4, w4, 200, V1),
        (w4, w5, 421, ""),
        (u, e, 200, V1),
        (u, u, 404, ""),
    ];
    rows.iter()
        .map(|(sni, host, status, backend)| {
            let r = get("/detect-misdirected-requests").host(host).sni(sni).h2();
            if backend.is_empty() {
                r.status(*status)
            } else {
                r.to(backend)
            }
        })
        .collect()
}

/// HTTPRouteCORS' requests, in the Go test's order: preflights (answered by the Gateway
/// or anyone: only the status and the headers count) and requests the backend answers.
fn cors() -> Vec<Req> {
    const O: &str = "access-control-allow-origin";
    const M: &str = "access-control-allow-methods";
    const H: &str = "access-control-allow-headers";
    const E: &str = "access-control-expose-headers";
    const A: &str = "access-control-max-age";
    const C: &str = "access-control-allow-credentials";
    let preflight = |path: &str, origin: &str, method: &str| {
        get(path)
            .method("OPTIONS")
            .header("Origin", origin)
            .header("access-control-request-method", method)
            .statuses(&[200, 204])
            .any_answer()
    };
    let asked = |r: Req| r.header("access-control-request-headers", "x-header-1, x-header-2");
    let both = |a: &str, b: &str| [format!("{a}, {b}"), format!("{b}, {a}")];
    let [gm1, gm2] = both("GET", "OPTIONS");
    let [h1, h2] = both("x-header-1", "x-header-2");
    let [e1, e2] = both("x-header-3", "x-header-4");
    let full = |origin: &'static str| {
        asked(preflight("/cors-1", origin, "GET"))
            .resp_one_of(O, &[origin])
            .resp_one_of(M, &[&gm1, &gm2])
            .resp_one_of(H, &[&h1, &h2])
            .resp_one_of(E, &[&e1, &e2])
            .resp_one_of(A, &["3600"])
            .resp_one_of(C, &["true"])
    };
    let simple =
        |path: &str, method: &str, origin: &str| get(path).method(method).header("Origin", origin);
    vec![
        full("https://www.foo.com"),
        full("https://www.bar.com"),
        full("https://xpto.www.bar.com"),
        preflight("/cors-1", "https://foobar.com", "GET")
            .statuses(&[200, 204, 403])
            .resp_absent(O),
        asked(simple("/cors-1", "GET", "https://www.foo.com"))
            .header("access-control-request-method", "GET")
            .resp_header(O, "https://www.foo.com"),
        asked(simple("/cors-1", "GET", "https://www.bar.com"))
            .header("access-control-request-method", "GET")
            .resp_header(O, "https://www.bar.com"),
        simple("/cors-1", "GET", "https://foobar.com")
            .header("access-control-request-method", "GET")
            .resp_absent(O),
        preflight("/cors-2", "https://www.foo.com", "POST")
            .resp_one_of(M, &["POST", "*"])
            .resp_header(O, "https://www.foo.com")
            .resp_absent(C),
        preflight("/cors-2", "https://www.foo.com", "POST").resp_absent(C),
        preflight("/cors-wildcard-origin", "https://foobar.com", "PUT")
            .resp_one_of(O, &["https://foobar.com", "*"])
            .resp_one_of(M, &["PUT"])
            .resp_absent(C),
        preflight("/cors-wildcard-origin", "https://foobar.com:12345", "PUT")
            .resp_one_of(O, &["https://foobar.com:12345", "*"])
            .resp_one_of(M, &["PUT"])
            .resp_absent(C),
        simple("/cors-wildcard-origin", "PUT", "https://foobar.com:12345")
            .resp_one_of(O, &["https://foobar.com:12345", "*"]),
        simple("/cors-wildcard-origin", "PUT", "https://foobar.com")
            .resp_one_of(O, &["https://foobar.com", "*"])
            .resp_absent(C),
        asked(preflight(
            "/cors-wildcard-methods-headers",
            "https://other.foo.com",
            "PUT",
        ))
        .resp_one_of(O, &["https://other.foo.com"])
        .resp_one_of(M, &["PUT"])
        .resp_one_of(H, &[&h1, &h2])
        .resp_one_of(C, &["true"]),
        asked(preflight(
            "/cors-wildcard-methods-headers-unauth",
            "https://other.foo.com",
            "PUT",
        ))
        .resp_one_of(O, &["https://other.foo.com", "*"])
        .resp_one_of(M, &["PUT", "*"])
        .resp_one_of(H, &[&h1, &h2, "*"])
        .resp_absent(C),
        simple(
            "/cors-wildcard-methods-headers",
            "GET",
            "https://other.foo.com",
        )
        .resp_one_of(O, &["https://other.foo.com"])
        .resp_one_of(C, &["true"]),
        simple(
            "/cors-wildcard-methods-headers-unauth",
            "GET",
            "https://other.foo.com",
        )
        .resp_one_of(O, &["https://other.foo.com", "*"])
        .resp_absent(C),
    ]
}

/// GatewayStaticAddresses' first patch: the address of the type no one assigns goes.
fn drop_invalid_address(d: &mut Value) {
    if let Some(a) = d["spec"]["addresses"].as_array_mut() {
        a.retain(|a| a["type"] != "test/fake-invalid-type");
    }
}

/// Its second: the unusable address goes.
fn drop_unusable_address(d: &mut Value) {
    if let Some(a) = d["spec"]["addresses"].as_array_mut() {
        a.retain(|a| a["value"] != crate::conformance::UNUSABLE_ADDRESS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{claimed_features, Outcome};
    use std::collections::BTreeSet;

    #[test]
    fn a_feature_is_claimed_when_its_tests_pass_though_a_test_needing_another_is_skipped() {
        let results = [
            (case("A", "").ext(&["BackendTLSPolicy"]), Outcome::Pass),
            (
                case("B", "").ext(&["BackendTLSPolicy", "BackendTLSPolicySANValidation"]),
                Outcome::Skip("no URI SAN".into()),
            ),
            (case("C", "").ext(&["HTTPRouteRetry"]), Outcome::Pass),
            (
                case("D", "").ext(&["HTTPRouteRetry"]),
                Outcome::Fail("500".into()),
            ),
        ];
        let rs: Vec<&(Case, Outcome)> = results.iter().collect();
        let refs: Vec<&&(Case, Outcome)> = rs.iter().collect();
        let (supported, unsupported) = claimed_features(&refs);
        assert_eq!(supported, ["BackendTLSPolicy"]);
        assert_eq!(
            unsupported,
            ["BackendTLSPolicySANValidation", "HTTPRouteRetry"]
        );
    }

    /// The upstream suite runs every test whose features an implementation claims: a
    /// test the runner skips must need a feature that no test run on that proxy claims
    /// (else the report claims what was not tested), and a core test is skipped only in
    /// a profile not claimed on that proxy at all.
    #[test]
    fn every_skipped_test_needs_a_feature_the_report_does_not_claim() {
        let cases = cases();
        for proxy in ["haproxy", "nginx"] {
            let skipped = |c: &Case| {
                c.skip.is_some()
                    || c.unclaimed.is_some()
                    || c.skip_on.iter().any(|(p, _)| *p == proxy)
            };
            let run = || cases.iter().filter(|c| !skipped(c));
            let claimed: BTreeSet<&str> = run()
                .filter(|c| c.known_failure(proxy).is_none())
                .flat_map(|c| c.features.iter().copied())
                .collect();
            let profiles: BTreeSet<&str> = run().map(|c| c.profile).collect();
            for c in cases.iter().filter(|c| skipped(c)) {
                if c.features.is_empty() {
                    assert!(
                        !profiles.contains(c.profile),
                        "{proxy}: core test {} is skipped in a profile claimed",
                        c.name
                    );
                } else {
                    assert!(
                        c.features.iter().any(|f| !claimed.contains(f)),
                        "{proxy}: {} is skipped, but every feature it needs ({:?}) is \
                         claimed by tests that run: the upstream suite would run it",
                        c.name,
                        c.features
                    );
                }
            }
        }
    }
}
