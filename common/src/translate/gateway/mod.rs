//! Gateway API (issue 12) into the route model: our GatewayClasses, their Gateways'
//! HTTP and HTTPS listeners on the addresses the plan gives each Gateway, and the
//! HTTPRoutes attached to them, with the status conditions the specification defines.
//! Pure: the plan (allocation) and the watcher (watches, status writes) call it.
//!
//! What is translated today, and what is refused with a condition rather than served
//! wrongly:
//!
//! - **GatewayClass** with `controllerName: k8slb.io/gateway-controller`: `Accepted`.
//! - **Gateway** of such a class: `Accepted`; `Programmed` once it has an address.
//!   Listeners `HTTP` and `HTTPS` (`tls.mode` Terminate, `certificateRefs` to Secrets of
//!   type `kubernetes.io/tls`, across namespaces only with a ReferenceGrant). `TLS`, `TCP`
//!   and `UDP` listeners are `Accepted: False` (`UnsupportedProtocol`) for now. Two
//!   listeners on one port with different protocols are `Conflicted` (`ProtocolConflict`).
//! - **HTTPRoute**: `parentRefs` (with `sectionName` and `port`), `allowedRoutes`
//!   (namespaces `Same` and `All`; `Selector` needs Namespace labels, which the plan does
//!   not read yet, so it allows nothing: `NotAllowedByListeners`), hostname intersection
//!   with the listener's, path matches `Exact` and `PathPrefix`, `Exact` matches on the
//!   method, headers and query parameters (names and values that can reach a config
//!   safely: see [`crate::routes::FieldName`], [`crate::routes::QueryName`],
//!   [`crate::routes::FieldValue`]), `backendRefs` to Services with weights
//!   (`RefNotPermitted` across namespaces without a ReferenceGrant, `BackendNotFound`),
//!   the filters `RequestRedirect`, `RequestHeaderModifier`, `ResponseHeaderModifier` and
//!   `URLRewrite` (hostname, `ReplaceFullPath`, `ReplacePrefixMatch`). A
//!   `RegularExpression` match, a value outside those sets, another filter (on a rule or
//!   a backendRef), a filter given twice, `RequestRedirect` with another filter, or a
//!   header a filter may not change (Host, framing) makes the route `Accepted: False`
//!   (`UnsupportedValue`): a route served without one of its matches or filters would
//!   send traffic where its author did not mean it to go.
//! - **Precedence** (HTTPRoute spec): Exact path before Prefix, longer prefixes first,
//!   a method match, more header matches, more query parameter matches; then the older
//!   route, then `<namespace>/<name>`, then rule and match order. The most
//!   specific hostname wins; a request whose host matches a hostname but none of its rules
//!   gets 404 (no fall-through to a wildcard's rules).

mod attach;
mod backend_client;
mod backend_tls;
mod backends;
mod classes;
mod filters;
mod frontend_tls;
mod hostnames;
mod listener_sets;
mod listeners;
mod model;
mod rules;
mod status;

pub mod grpc;
pub mod types;

use crate::ingress::SecretMeta;
use crate::names::ObjectKey;
use crate::problem::{ObjRef, Reason};
use crate::routes::{
    BackendId, BackendState, CertFile, Certificate, FieldName, FieldValue, FixedStatus,
    HeaderEdits, HeaderMatch, HeaderValue, Hostname, HttpPath, HttpRoutes, Listener,
    ListenerProtocol, ListenerTls, Method, PathMatch, PathRewrite, QueryMatch, QueryName, Redirect,
    RedirectStatus, Retry, RetryAttempts, RetryCode, RouteAction, RouteMatch, RouteRule,
    RuleFilters, Scheme, StreamListener, StreamProtocol, StreamRoute, TimeoutMs, VirtualHost,
    WeightedBackend,
};
use attach::*;
pub use attach::{route_host_claims, selects};
pub use backend_tls::PolicyAncestor;
use backends::*;
pub use classes::{class_pool, our_classes, KnownPools, POOL_PARAMETER};
use filters::*;
pub use hostnames::intersect;
use hostnames::*;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use listener_sets::*;
pub use listener_sets::{host_claims, taken_set_listeners, ListenerSetStatus};
use listeners::*;
use rules::*;
pub use status::{
    Condition, ConditionReason, ConditionType, GatewayStatus, ListenerStatus, ParentKind,
    ParentStatus,
};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use types::{
    BackendTlsPolicy, Gateway, GatewayClass, GatewayListener, HttpRoute, L4Kind, L4Route,
    ListenerSet, ParentRef, ReferenceGrant,
};

/// Our GatewayClass `spec.controllerName`.
pub const CONTROLLER: &str = "k8slb.io/gateway-controller";

/// The objects and the addresses the plan gave each Gateway.
#[derive(Debug, Clone, Copy)]
pub struct GatewayInput<'a> {
    pub classes: &'a [GatewayClass],
    pub gateways: &'a [Gateway],
    pub routes: &'a [HttpRoute],
    /// GRPCRoutes ([`grpc`]).
    pub grpc_routes: &'a [grpc::GrpcRoute],
    /// TLSRoutes, TCPRoutes and UDPRoutes.
    pub l4_routes: &'a [L4Route],
    pub grants: &'a [ReferenceGrant],
    /// BackendTLSPolicies ([`backend_tls`]).
    pub backend_tls_policies: &'a [BackendTlsPolicy],
    /// ListenerSets ([`listener_sets`]).
    pub listener_sets: &'a [ListenerSet],
    pub services: &'a [Service],
    pub slices: &'a [EndpointSlice],
    pub secrets: &'a [SecretMeta],
    pub addresses: &'a BTreeMap<ObjectKey, Vec<IpAddr>>,
    /// The ports of a Gateway's addresses that another tenant (a Service sharing an
    /// address by name) holds, with who holds them: those listeners are
    /// `PortUnavailable`.
    /// Keyed by (port, UDP?).
    pub unavailable: &'a BTreeMap<ObjectKey, BTreeMap<(u16, bool), String>>,
    /// The provider proxies UDP (nginx does, HAProxy does not): else `UDP` listeners are
    /// `UnsupportedProtocol`.
    pub serves_udp: bool,
    /// The provider mirrors requests (nginx's `mirror`, HAProxy through the actor's Lua
    /// action): else a RequestMirror filter refuses its route.
    pub serves_mirror: bool,
    /// The provider serves `TLS` listeners of both modes on one port
    /// (TLSRouteModeMixed: HAProxy and nginx, whose passthrough frontend hands the
    /// terminating listeners' server names to an internal terminating one over a unix
    /// socket): else such listeners are `ProtocolConflict`.
    pub serves_tls_mixed: bool,
    /// `serves_tls_mixed` is false only because not every LB node's actor renders such
    /// ports yet (version skew, [`crate::features`]): their conditions say so, and to
    /// upgrade the actors.
    pub tls_mixed_pending: bool,
    /// The provider retries a request on an answer of a given status (HAProxy's L7
    /// retries; nginx's `proxy_next_upstream` only moves to another server): else a
    /// rule's `retry` refuses its route.
    pub serves_retry: bool,
    /// The provider serves, on one host, rules that match on method, headers or query
    /// beside a RequestMirror, a split whose backends edit request headers, or rules of
    /// another timeout (HAProxy picks per rule; nginx serves such a host from one
    /// location, which has one mirror, one timeout, one set of edits:
    /// [`crate::routes::OneLocation`]). Else the route that would make such a mix on a
    /// host is not Accepted (`UnsupportedValue`); older routes keep theirs.
    pub mixes_conditional_rules: bool,
    /// The ConfigMaps a GatewayClass's `parametersRef` may name, and those a
    /// BackendTLSPolicy's `caCertificateRefs` may (its own namespace's).
    pub configmaps: &'a [k8s_openapi::api::core::v1::ConfigMap],
    /// The pools that exist.
    pub pools: KnownPools<'a>,
    /// The Namespaces, for listeners that allow routes by a namespace selector.
    pub namespaces: &'a [Namespace],
    /// `limits.conditionalRulesPerHost`: on one host of one address and port, the
    /// rules that match on more than the path beyond it are refused (the route that
    /// would go beyond it is not Accepted; older routes keep theirs).
    pub conditional_rules_per_host: usize,
    /// `limits.retryBackendsPerNamespace`: the most (backend, retry policy) pairs one
    /// namespace's routes may make (HAProxy serves each on a copy of the backend).
    pub retry_backends_per_namespace: usize,
    /// `limits.listenerSetListenersPerGateway`: the most listeners the ListenerSets of
    /// one Gateway add, all together (older sets first).
    pub listener_set_listeners_per_gateway: usize,
    /// `limits.mirrorsPerRule`: the most RequestMirror filters of one rule (each copies
    /// every request the rule takes); a rule with more is refused.
    pub mirrors_per_rule: usize,
    /// Who owns which host ([`crate::tenancy`]; the plan's): a ListenerSet's listener
    /// whose hostname another namespace owns is refused (`HostnameConflict`). `None`:
    /// no ownership (the translation alone, as in tests).
    pub host_owners: Option<&'a crate::tenancy::HostOwners>,
}

/// What the Gateway API objects make: the routes to serve and every status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayOutput {
    pub routes: HttpRoutes,
    /// Our GatewayClasses' conditions, by name.
    pub classes: BTreeMap<String, Vec<Condition>>,
    pub gateways: BTreeMap<ObjectKey, GatewayStatus>,
    pub http_routes: BTreeMap<ObjectKey, Vec<ParentStatus>>,
    /// GRPCRoutes, by name.
    pub grpc_routes: BTreeMap<ObjectKey, Vec<ParentStatus>>,
    /// TLSRoutes, TCPRoutes and UDPRoutes, by kind and name.
    pub l4_routes: BTreeMap<(L4Kind, ObjectKey), Vec<ParentStatus>>,
    /// BackendTLSPolicies, by name: their status per ancestor Gateway of ours.
    pub backend_tls_policies: BTreeMap<ObjectKey, Vec<PolicyAncestor>>,
    /// ListenerSets that name a Gateway of ours, by name.
    pub listener_sets: BTreeMap<ObjectKey, ListenerSetStatus>,
}

fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<ObjectKey> {
    ObjectKey::new(
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref()?,
    )
    .ok()
}

/// Oldest first, then `<namespace>/<name>` as one string (the spec's tie-break:
/// `team-b/x` before `team/x`).
fn age(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> (Option<String>, String) {
    (
        meta.creation_timestamp.as_ref().map(|t| t.0.to_string()),
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        ),
    )
}

/// Translate (see the module's doc).
pub fn translate(input: &GatewayInput<'_>) -> GatewayOutput {
    let classes = our_classes(input.classes, input.configmaps, input.pools);
    let gateways = served_gateways(input, &classes);
    let mut t = Translation::new(input, &gateways);
    let (placed, http_routes, grpc_routes) = t.http_routes();
    let (streams_placed, l4_routes) = t.l4_routes();
    let streams = t.stream_listeners(&streams_placed);
    let mut routes = t.model(placed, streams);
    let backend_tls_policies = backend_tls::apply(input, &mut routes);
    // spec.tls.backend: each Gateway's client certificate, checked, and presented to
    // the TLS backends of its rules (those of an invalid reference get 500).
    let secrets = crate::translate::refs::SecretRefs::new(input.secrets);
    let client_certs: backend_client::ClientCerts = gateways
        .iter()
        .filter_map(|g| {
            let gk = key(&g.metadata)?;
            let c = backend_client::client_certificate(input, &secrets, &gk, g)?;
            Some((gk, c))
        })
        .collect();
    // The Gateways whose served HTTP(S) listeners are on each address and port (a UDP
    // or refused listener of another Gateway on the same port number carries none of
    // these routes).
    let mut owners: BTreeMap<(IpAddr, u16), BTreeSet<ObjectKey>> = BTreeMap::new();
    for l in t.lsts.iter().filter(|l| l.protocol.is_some()) {
        let Ok(port) = u16::try_from(l.spec.port) else {
            continue;
        };
        for ip in input.addresses.get(&l.gateway).into_iter().flatten() {
            owners
                .entry((*ip, port))
                .or_default()
                .insert(l.gateway.clone());
        }
    }
    backend_client::present_client_certificates(&mut routes, &owners, &client_certs);
    let mut statuses: BTreeMap<ObjectKey, GatewayStatus> = gateways
        .iter()
        .filter_map(|g| {
            let gk = key(&g.metadata)?;
            let mut st = status::gateway_status(input, g, &gk, &t.lsts);
            st.conditions.extend(frontend_tls::insecure_condition(g));
            match client_certs.get(&gk) {
                None => {}
                Some(Ok(_)) => st.conditions.push(Condition::new(
                    ConditionType::ResolvedRefs,
                    true,
                    ConditionReason::ResolvedRefs,
                    "every reference resolved",
                )),
                Some(Err((reason, why))) => st.conditions.push(Condition::new(
                    ConditionType::ResolvedRefs,
                    false,
                    *reason,
                    why.clone(),
                )),
            }
            Some((gk, st))
        })
        .collect();
    let (listener_sets, attached) = listener_sets::statuses(&t.sets, &t.lsts, &statuses);
    for g in gateways
        .iter()
        .filter(|g| g.spec.allowed_listeners.is_some())
    {
        if let Some(st) = key(&g.metadata).and_then(|k| statuses.get_mut(&k)) {
            st.attached_listener_sets = Some(
                key(&g.metadata)
                    .and_then(|k| attached.get(&k).copied())
                    .unwrap_or(0),
            );
        }
    }
    GatewayOutput {
        routes,
        classes,
        gateways: statuses,
        http_routes,
        grpc_routes,
        l4_routes,
        backend_tls_policies,
        listener_sets,
    }
}

/// The Gateways of our accepted classes, and those of a refused class of ours that the
/// plan still gives addresses (they held them before the class broke), oldest first.
fn served_gateways<'a>(
    input: &GatewayInput<'a>,
    classes: &BTreeMap<String, Vec<Condition>>,
) -> Vec<&'a Gateway> {
    let accepted: BTreeSet<&str> = classes
        .iter()
        .filter(|(_, c)| c.iter().all(|c| c.status))
        .map(|(n, _)| n.as_str())
        .collect();
    let mut gateways: Vec<&Gateway> = input
        .gateways
        .iter()
        .filter(|g| {
            let class = g.spec.gateway_class_name.as_str();
            accepted.contains(class)
                || (classes.contains_key(class)
                    && key(&g.metadata).is_some_and(|k| input.addresses.contains_key(&k)))
        })
        .collect();
    gateways.sort_by_cached_key(|g| age(&g.metadata));
    gateways
}

/// One translation under way: the served Gateways' listeners, with the routes attached
/// to them so far, and the backends the routes resolved.
struct Translation<'i, 'a> {
    input: &'i GatewayInput<'a>,
    gateways: &'i [&'a Gateway],
    /// The ListenerSets that name a Gateway of ours.
    sets: Vec<SetOf<'a>>,
    /// Every listener: each Gateway's own, then its sets' (in precedence order).
    lsts: Vec<Lst<'a>>,
    /// Each set's Gateway.
    set_gateways: BTreeMap<ObjectKey, ObjectKey>,
    /// Where each parent's listeners are in `lsts` (a Gateway's own: no set; a set's),
    /// by (Gateway, set).
    ranges: BTreeMap<(ObjectKey, Option<ObjectKey>), std::ops::Range<usize>>,
    services: crate::translate::refs::ServiceRefs<'a>,
    backends: BTreeMap<BackendId, BackendState>,
    udp_backends: BTreeMap<BackendId, BackendState>,
    /// The (backend, retry policy) pairs the routes placed so far make, and the
    /// namespace whose route made each first (`limits.retryBackendsPerNamespace`).
    retry_pairs: BTreeMap<(BackendId, crate::routes::Retry), String>,
}

/// A stream route on one listener: (listener index, server name, (backends, the weight
/// of invalid ones), owner).
type StreamPlaced = (usize, Option<Hostname>, (Vec<WeightedBackend>, u16), ObjRef);

impl<'i, 'a> Translation<'i, 'a> {
    fn new(input: &'i GatewayInput<'a>, gateways: &'i [&'a Gateway]) -> Self {
        let sets = sets_of(input, gateways);
        let secrets = crate::translate::refs::SecretRefs::new(input.secrets);
        // Each Gateway's sets (those it allows), in precedence order.
        let mut sets_of_gateway: BTreeMap<&ObjectKey, Vec<&SetOf<'a>>> = BTreeMap::new();
        for s in sets.iter().filter(|s| s.allowed) {
            sets_of_gateway.entry(&s.gateway).or_default().push(s);
        }
        // The client certificate validation of each (address, port) the HTTPS listeners
        // of the Gateways so far hold (oldest first).
        let mut bound = frontend_tls::Bound::default();
        let lsts = gateways
            .iter()
            .flat_map(|g| {
                let mut own = gateway_listeners((input, &secrets), g, &bound);
                let gk = key(&g.metadata);
                // The sets of a Gateway that is not accepted are not served (each says
                // ParentNotAccepted).
                let its = gk.as_ref().and_then(|k| sets_of_gateway.get(k));
                if let Some(its) = its.filter(|_| {
                    let statuses: Vec<ListenerStatus> =
                        own.iter().map(status::listener_status).collect();
                    status::gateway_accepted(g, &statuses).status
                }) {
                    own.extend(set_listeners((input, &secrets), g, its, &bound));
                }
                let addresses = gk.as_ref().and_then(|k| input.addresses.get(k));
                for l in own
                    .iter()
                    .filter(|l| l.protocol == Some(ListenerProtocol::Https))
                {
                    let addresses = addresses.map_or(&[][..], Vec::as_slice);
                    bound.hold(&l.gateway, addresses, l.spec.port, l.client_ca.as_ref());
                }
                own
            })
            .collect::<Vec<Lst<'a>>>();
        let mut lsts = lsts;
        if !input.serves_tls_mixed {
            one_tls_mode_per_shared_port(input, &mut lsts);
        }
        let set_gateways = sets
            .iter()
            .map(|s| (s.key.clone(), s.gateway.clone()))
            .collect();
        let mut ranges: BTreeMap<(ObjectKey, Option<ObjectKey>), std::ops::Range<usize>> =
            BTreeMap::new();
        for (i, l) in lsts.iter().enumerate() {
            ranges
                .entry((l.gateway.clone(), l.set.clone()))
                .and_modify(|r| r.end = i + 1)
                .or_insert(i..i + 1);
        }
        Translation {
            input,
            gateways,
            sets,
            lsts,
            set_gateways,
            ranges,
            services: crate::translate::refs::ServiceRefs::new(input.services, input.slices),
            backends: BTreeMap::new(),
            udp_backends: BTreeMap::new(),
            retry_pairs: BTreeMap::new(),
        }
    }

    /// The listeners of `parent` (a Gateway's own, or a set's), and the index in
    /// `lsts` of the first.
    fn parent_lsts(&mut self, parent: &Parent) -> (&mut [Lst<'a>], usize) {
        let set = (parent.kind == ParentKind::ListenerSet).then(|| parent.key.clone());
        match self.ranges.get(&(parent.gateway.clone(), set)) {
            Some(r) => (&mut self.lsts[r.clone()], r.start),
            None => (&mut [], 0),
        }
    }

    /// The HTTPRoutes and GRPCRoutes (as the HTTPRoutes they mean, [`grpc::to_http`]),
    /// oldest first: each attached to the listeners its parentRefs select, its rules
    /// placed there; and each route's status per parent of ours (HTTPRoutes', then
    /// GRPCRoutes').
    #[allow(clippy::type_complexity)]
    fn http_routes(
        &mut self,
    ) -> (
        Vec<Placed>,
        BTreeMap<ObjectKey, Vec<ParentStatus>>,
        BTreeMap<ObjectKey, Vec<ParentStatus>>,
    ) {
        let input = self.input;
        let mut placed: Vec<Placed> = Vec::new();
        let mut statuses = BTreeMap::new();
        let mut grpc_statuses = BTreeMap::new();
        // What the routes placed so far hold on each (address, port, host): the cap on
        // conditional rules, and what nginx's one location for them must serve.
        let mut conditional: BTreeMap<HostKey, HostTally> = BTreeMap::new();
        // A GRPCRoute that cannot be served attaches without its rules and is refused on
        // each of its parents.
        let grpc: Vec<(HttpRoute, Option<String>)> = input
            .grpc_routes
            .iter()
            .map(|g| match grpc::to_http(g) {
                Ok(h) => (h, None),
                Err(why) => (grpc::without_rules(g), Some(why)),
            })
            .collect();
        let mut routes: Vec<(&HttpRoute, &'static str, Option<&String>)> = input
            .routes
            .iter()
            .map(|r| (r, "HTTPRoute", None))
            .chain(grpc.iter().map(|(r, why)| (r, grpc::KIND, why.as_ref())))
            .collect();
        routes.sort_by_cached_key(|r| age(&r.0.metadata));
        for (r, kind, refused) in routes {
            let Some(rk) = key(&r.metadata) else { continue };
            let rns = rk.namespace.as_str().to_string();
            let mut parents = Vec::new();
            for p in &r.spec.parent_refs {
                // Not one of ours: another controller's to report.
                let Some(parent) = our_parent(p, &rns, self.gateways, &self.set_gateways) else {
                    continue;
                };
                let (conds, attach) = attach(
                    self.parent_lsts(&parent),
                    &parent,
                    p,
                    (kind, &r.spec.hostnames),
                    (&rns, input.namespaces),
                    None,
                );
                let conditions = if attach.is_empty() {
                    // Not attached, but its references are still resolved and said to
                    // be: the conformance suite (HTTPRouteInvalidCrossNamespaceParentRef,
                    // HTTPRouteInvalidParentRefNotMatchingListenerPort,
                    // HTTPRouteDisallowedKind) expects ResolvedRefs beside Accepted:
                    // False. Nothing enters the model.
                    let mut c = conds;
                    c.push(http_route_refs(input, (r, kind), &rns, &self.services));
                    c
                } else {
                    self.place_http_route(
                        (r, kind, refused),
                        &rk,
                        &attach,
                        conds,
                        (&mut conditional, &mut placed),
                    )
                };
                parents.push(ParentStatus {
                    kind: parent.kind,
                    parent: parent.key,
                    section_name: p.section_name.clone(),
                    port: p.port,
                    conditions,
                });
            }
            if !parents.is_empty() {
                if kind == grpc::KIND {
                    grpc_statuses.insert(rk, parents);
                } else {
                    statuses.insert(rk, parents);
                }
            }
        }
        (placed, statuses, grpc_statuses)
    }

    /// The (backend, retry policy) pairs `rules` would add, or why namespace `rns` may
    /// not make them: beyond `limits.retryBackendsPerNamespace` with the pairs its older
    /// routes made (a pair another namespace made first costs it nothing; HAProxy
    /// serves each pair on a copy of the backend, whatever the namespace).
    fn retry_refusal(
        &self,
        rns: &str,
        rules: &[(usize, usize, RouteRule)],
    ) -> Result<Vec<(BackendId, crate::routes::Retry)>, String> {
        let mut new = BTreeSet::new();
        for (_, _, rule) in rules {
            let (Some(retry), RouteAction::Forward { backends, .. }) =
                (&rule.filters.retry, &rule.action)
            else {
                continue;
            };
            for b in backends {
                let pair = (b.id.clone(), retry.clone());
                if !self.retry_pairs.contains_key(&pair) {
                    new.insert(pair);
                }
            }
        }
        if new.is_empty() {
            return Ok(Vec::new());
        }
        let cap = self.input.retry_backends_per_namespace;
        let have = self.retry_pairs.values().filter(|ns| *ns == rns).count();
        if have + new.len() > cap {
            return Err(format!(
                "retry: namespace {rns}'s routes would make {} distinct (backend, retry policy) pairs, each a copy of the backend in HAProxy's config; the limit is {cap} per namespace (limits.retryBackendsPerNamespace), older routes hold {have}",
                have + new.len()
            ));
        }
        Ok(new.into_iter().collect())
    }

    /// An HTTPRoute attached at `attach`: its rules, once per attached (listener,
    /// hostname), unless one of them is refused or the host's cap would be passed (then
    /// the route is not Accepted and leaves the listeners' attachedRoutes). Its
    /// conditions for this parent.
    /// `kind`: HTTPRoute or GRPCRoute; `refused`: why a GRPCRoute cannot be served.
    #[allow(clippy::type_complexity)]
    fn place_http_route(
        &mut self,
        (r, kind, refused): (&HttpRoute, &str, Option<&String>),
        rk: &ObjectKey,
        attach: &[(usize, Option<Hostname>)],
        mut conditions: Vec<Condition>,
        (conditional, placed): (&mut BTreeMap<HostKey, HostTally>, &mut Vec<Placed>),
    ) -> Vec<Condition> {
        let rns = rk.namespace.as_str();
        let (mut rules, refs, mut unsupported) = rules_of(
            self.input,
            (r, kind),
            rns,
            &self.services,
            &mut self.backends,
        );
        if let Some(why) = refused {
            unsupported = Some(why.clone());
        }
        let owner = if kind == grpc::KIND {
            ObjRef::GrpcRoute {
                namespace: rk.namespace.to_string(),
                name: rk.name.to_string(),
            }
        } else {
            ObjRef::HttpRoute {
                namespace: rk.namespace.to_string(),
                name: rk.name.to_string(),
            }
        };
        for (_, _, rule) in &mut rules {
            rule.owner = Some(owner.clone());
        }
        if unsupported.is_none() {
            unsupported = host_refusal(self.input, &self.lsts, attach, &rules, conditional);
        }
        let new_retry_pairs = match unsupported {
            None => match self.retry_refusal(rns, &rules) {
                Ok(pairs) => pairs,
                Err(why) => {
                    unsupported = Some(why);
                    Vec::new()
                }
            },
            Some(_) => Vec::new(),
        };
        if let Some(why) = unsupported {
            conditions = vec![Condition::accepted(
                false,
                ConditionReason::UnsupportedValue,
                why,
            )];
            // Not accepted: not one of the listeners' attachedRoutes either.
            let listeners: BTreeSet<usize> = attach.iter().map(|a| a.0).collect();
            for li in listeners {
                self.lsts[li].attached -= 1;
            }
        } else {
            for p in new_retry_pairs {
                self.retry_pairs.insert(p, rns.to_string());
            }
            for at in attach {
                for (ri, mi, rule) in &rules {
                    placed.push(Placed {
                        at: at.clone(),
                        key: (match_precedence(&rule.matches), age(&r.metadata), *ri, *mi),
                        rule: rule.clone(),
                    });
                }
            }
        }
        conditions.push(refs);
        conditions
    }

    /// TLSRoutes, TCPRoutes and UDPRoutes, oldest first: on each (listener, server name)
    /// the oldest route wins. What each placed, and each route's status per parent.
    #[allow(clippy::type_complexity)]
    fn l4_routes(
        &mut self,
    ) -> (
        Vec<StreamPlaced>,
        BTreeMap<(L4Kind, ObjectKey), Vec<ParentStatus>>,
    ) {
        let input = self.input;
        let mut statuses = BTreeMap::new();
        let mut taken: BTreeMap<(usize, Option<Hostname>), String> = BTreeMap::new();
        let mut placed: Vec<StreamPlaced> = Vec::new();
        let mut l4: Vec<&L4Route> = input.l4_routes.iter().collect();
        l4.sort_by_cached_key(|r| age(&r.metadata));
        for r in l4 {
            let Some(rk) = key(&r.metadata) else { continue };
            let rns = rk.namespace.as_str().to_string();
            let mut parents = Vec::new();
            for p in &r.spec.parent_refs {
                // Not one of ours: another controller's to report.
                let Some(parent) = our_parent(p, &rns, self.gateways, &self.set_gateways) else {
                    continue;
                };
                let who = format!("{} {rk}", r.kind.as_str());
                let (mut conditions, at) = attach(
                    self.parent_lsts(&parent),
                    &parent,
                    p,
                    (r.kind.as_str(), &r.spec.hostnames),
                    (&rns, input.namespaces),
                    Some((&mut taken, who)),
                );
                // Unattached, the backends are resolved aside (ResolvedRefs beside
                // Accepted: False, as for an HTTPRoute), not in the model.
                let mut aside = BTreeMap::new();
                let into = if at.is_empty() {
                    &mut aside
                } else if r.kind == L4Kind::Udp {
                    &mut self.udp_backends
                } else {
                    &mut self.backends
                };
                let (weighted, invalid, refs) = l4_backends(input, r, &rns, &self.services, into);
                for (li, host) in at {
                    let owner = ObjRef::L4Route {
                        kind: r.kind,
                        namespace: rk.namespace.to_string(),
                        name: rk.name.to_string(),
                    };
                    placed.push((li, host, (weighted.clone(), invalid), owner));
                }
                conditions.push(refs);
                parents.push(ParentStatus {
                    kind: parent.kind,
                    parent: parent.key,
                    section_name: p.section_name.clone(),
                    port: p.port,
                    conditions,
                });
            }
            if !parents.is_empty() {
                statuses.insert((r.kind, rk), parents);
            }
        }
        (placed, statuses)
    }
}

/// Why TLS listeners of both modes on `port` are refused while the provider serves them:
/// an LB node's actor is older than that (version skew).
pub const MIXED_PENDING: &str = "not every load-balancer node's actor supports TLS listeners of both modes on one port yet: upgrade the DaemonSet";

fn mixed_pending(port: i32) -> String {
    format!("another TLS listener uses port {port} with the other tls.mode: {MIXED_PENDING}")
}

/// Where TLS of both modes is not served on one port: on an address Gateways share, a
/// served `TLS` listener of the other mode than the first (oldest Gateway first) on the
/// same port is refused (`ProtocolConflict`, saying why), not left out silently; its
/// routes attach to none of it.
fn one_tls_mode_per_shared_port(input: &GatewayInput<'_>, lsts: &mut [Lst<'_>]) {
    // Whether the first served TLS listener on each address and port terminates, and
    // its Gateway.
    let mut first: BTreeMap<(IpAddr, i32), (bool, ObjectKey)> = BTreeMap::new();
    for l in lsts.iter_mut() {
        if l.stream != Some(StreamProtocol::Tls) {
            continue;
        }
        let terminates = l.tls.is_some();
        let ips = input.addresses.get(&l.gateway).into_iter().flatten();
        let other = ips.clone().find_map(|ip| {
            let (t, g) = first.get(&(*ip, l.spec.port))?;
            (*t != terminates).then(|| g.clone())
        });
        let Some(other) = other else {
            for ip in ips {
                first
                    .entry((*ip, l.spec.port))
                    .or_insert_with(|| (terminates, l.gateway.clone()));
            }
            continue;
        };
        let why = if input.tls_mixed_pending {
            MIXED_PENDING
        } else {
            "Passthrough and Terminate on one port are not served by this provider"
        };
        l.refuse_mode(format!(
            "Gateway {other}, older on a shared address, has a TLS listener on port {} with the other tls.mode: {why}",
            l.spec.port
        ));
    }
}

/// A Gateway's listeners. Listeners on one port of one transport: all of one protocol
/// (TCP and UDP on one port are apart; TLS of one mode unless the provider serves both
/// on one port), and a TCP or UDP listener alone (nothing tells two apart).
fn gateway_listeners<'a>(
    (input, secrets): (&GatewayInput<'a>, &crate::translate::refs::SecretRefs<'_>),
    g: &'a Gateway,
    bound: &frontend_tls::Bound,
) -> Vec<Lst<'a>> {
    let Some(gk) = key(&g.metadata) else {
        return Vec::new();
    };
    let transport = |l: &GatewayListener| (l.port, l.protocol == "UDP");
    // TLS listeners by mode: passthrough and termination on one port conflict.
    let mut protocols: BTreeMap<(i32, bool), Vec<String>> = BTreeMap::new();
    for l in &g.spec.listeners {
        protocols
            .entry(transport(l))
            .or_default()
            .push(port_protocol(l, input.serves_tls_mixed));
    }
    // The Gateway's client certificate validation, read once per port.
    let mut client_cas = BTreeMap::new();
    g.spec
        .listeners
        .iter()
        .map(|l| {
            let on_port = &protocols[&transport(l)];
            let protocol = port_protocol(l, input.serves_tls_mixed);
            let conflict = if on_port.iter().any(|p| *p != protocol) {
                Some(ConditionReason::ProtocolConflict)
            } else if matches!(l.protocol.as_str(), "TCP" | "UDP") && on_port.len() > 1 {
                Some(ConditionReason::HostnameConflict)
            } else {
                None
            };
            // TLS listeners of both modes (and nothing else) on one port: said in
            // Accepted too, as TLSRouteListenerMixedTerminationNotSupported expects.
            let tls_modes = on_port.iter().all(|p| p.starts_with("TLS/"));
            let why = (tls_modes && input.tls_mixed_pending).then(|| mixed_pending(l.port));
            let conflict = conflict.map(|reason| Conflict {
                reason,
                why,
                conflicted: true,
                accepted: tls_modes,
            });
            let client_ca = client_cas
                .entry(l.port)
                .or_insert_with(|| frontend_tls::client_validation(input, g, &gk, l.port))
                .clone();
            let client_ca = bound.check(input, &gk, l, client_ca);
            let owner = Owner {
                gateway: gk.clone(),
                set: None,
            };
            listener((input, secrets), &owner, l, conflict, client_ca)
        })
        .collect()
}
