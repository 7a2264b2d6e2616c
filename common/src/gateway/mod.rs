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

pub mod types;

use crate::endpoints::{endpoints, slice_index, Endpoint};
use crate::ingress::SecretMeta;
use crate::names::{ObjectKey, ServiceKey};
use crate::problem::ObjRef;
use crate::routes::{
    BackendId, BackendState, CertFile, Certificate, FieldName, FieldValue, FixedStatus,
    HeaderEdits, HeaderMatch, HeaderValue, Hostname, HttpPath, HttpRoutes, Listener,
    ListenerProtocol, ListenerTls, Method, PathMatch, PathRewrite, QueryMatch, QueryName, Redirect,
    RedirectStatus, RouteAction, RouteMatch, RouteRule, RuleFilters, Scheme, StreamListener,
    StreamProtocol, StreamRoute, VirtualHost, WeightedBackend,
};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use types::{
    Gateway, GatewayClass, GatewayListener, HttpRoute, L4Kind, L4Route, ParentRef, ReferenceGrant,
};

/// Our GatewayClass `spec.controllerName`.
pub const CONTROLLER: &str = "k8slb.io/gateway-controller";

/// One status condition, as the API writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub type_: &'static str,
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Lst<'_> {
    fn served(&self) -> bool {
        self.protocol.is_some() || self.stream.is_some()
    }
}

/// The route kind a listener protocol takes.
fn kind_for(protocol: &str) -> Option<&'static str> {
    match protocol {
        "HTTP" | "HTTPS" => Some("HTTPRoute"),
        "TLS" => Some("TLSRoute"),
        "TCP" => Some("TCPRoute"),
        "UDP" => Some("UDPRoute"),
        _ => None,
    }
}

impl Condition {
    fn new(
        type_: &'static str,
        status: bool,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Condition {
            type_,
            status,
            reason,
            message: crate::problem::printable(message.into()),
        }
    }
}

/// A listener's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerStatus {
    pub name: String,
    pub attached_routes: u32,
    pub supported_kinds: Vec<&'static str>,
    pub conditions: Vec<Condition>,
}

/// A Gateway's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayStatus {
    pub addresses: Vec<IpAddr>,
    pub conditions: Vec<Condition>,
    pub listeners: Vec<ListenerStatus>,
}

/// An HTTPRoute's status for one parent (a Gateway of ours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentStatus {
    pub gateway: ObjectKey,
    pub section_name: Option<String>,
    pub port: Option<i32>,
    pub conditions: Vec<Condition>,
}

/// The objects and the addresses the plan gave each Gateway.
#[derive(Debug, Clone, Copy)]
pub struct GatewayInput<'a> {
    pub classes: &'a [GatewayClass],
    pub gateways: &'a [Gateway],
    pub routes: &'a [HttpRoute],
    /// TLSRoutes, TCPRoutes and UDPRoutes.
    pub l4_routes: &'a [L4Route],
    pub grants: &'a [ReferenceGrant],
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
    /// The ConfigMaps a GatewayClass's `parametersRef` may name.
    pub configmaps: &'a [k8s_openapi::api::core::v1::ConfigMap],
    /// The pools that exist.
    pub pools: KnownPools<'a>,
    /// The Namespaces, for listeners that allow routes by a namespace selector.
    pub namespaces: &'a [Namespace],
    /// `limits.conditionalRulesPerHost`: on one host of one address and port, the
    /// rules that match on more than the path beyond it are refused (the route that
    /// would go beyond it is not Accepted; older routes keep theirs).
    pub conditional_rules_per_host: usize,
}

/// What the Gateway API objects make: the routes to serve and every status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayOutput {
    pub routes: HttpRoutes,
    /// Our GatewayClasses' conditions, by name.
    pub classes: BTreeMap<String, Vec<Condition>>,
    pub gateways: BTreeMap<ObjectKey, GatewayStatus>,
    pub http_routes: BTreeMap<ObjectKey, Vec<ParentStatus>>,
    /// TLSRoutes, TCPRoutes and UDPRoutes, by kind and name.
    pub l4_routes: BTreeMap<(L4Kind, ObjectKey), Vec<ParentStatus>>,
}

fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<ObjectKey> {
    ObjectKey::new(
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref()?,
    )
    .ok()
}

/// Oldest first, then `<namespace>/<name>` (the spec's tie-breaks).
fn age(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> (Option<String>, String, String) {
    (
        meta.creation_timestamp.as_ref().map(|t| t.0.to_string()),
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The key of a `parametersRef` ConfigMap that names the pool of a class's Gateways.
pub const POOL_PARAMETER: &str = "pool";

/// The pools that exist (to check a class's parameters against), or `None` to take any
/// valid pool name.
pub type KnownPools<'a> = Option<&'a BTreeSet<crate::names::PoolName>>;

/// The pool a GatewayClass of ours gives its Gateways (`Ok(None)`: no `parametersRef`,
/// the default pool), or why its parameters are invalid. The parameters are a ConfigMap
/// (core group) in k8slb's namespace (the watcher reads ConfigMaps there only) whose
/// `data.pool` names a pool.
pub fn class_pool(
    c: &GatewayClass,
    configmaps: &[k8s_openapi::api::core::v1::ConfigMap],
    pools: KnownPools<'_>,
) -> Result<Option<crate::names::PoolName>, String> {
    let Some(p) = &c.spec.parameters_ref else {
        return Ok(None);
    };
    let shown = |s: &str| crate::problem::cut(s, 63);
    if !p.group.is_empty() || p.kind != "ConfigMap" {
        return Err(format!(
            "parametersRef {}/{} is not a ConfigMap (group \"\"), the only parameters k8slb reads",
            shown(&p.group),
            shown(&p.kind)
        ));
    }
    let Some(ns) = p.namespace.as_deref() else {
        return Err(
            "parametersRef needs the namespace of its ConfigMap (k8slb's namespace)".into(),
        );
    };
    let Some(cm) = configmaps.iter().find(|m| {
        m.metadata.namespace.as_deref() == Some(ns)
            && m.metadata.name.as_deref() == Some(p.name.as_str())
    }) else {
        return Err(format!(
            "ConfigMap {}/{} does not exist, or is not in k8slb's namespace (the only one it reads)",
            shown(ns),
            shown(&p.name)
        ));
    };
    let Some(text) = cm.data.as_ref().and_then(|d| d.get(POOL_PARAMETER)) else {
        return Err(format!(
            "ConfigMap {}/{} has no data.{POOL_PARAMETER}",
            shown(ns),
            shown(&p.name)
        ));
    };
    let pool: crate::names::PoolName = text.parse().map_err(|e| {
        format!(
            "ConfigMap {}/{}: data.{POOL_PARAMETER}: {e}",
            shown(ns),
            shown(&p.name)
        )
    })?;
    if pools.is_some_and(|known| !known.contains(&pool)) {
        return Err(format!(
            "ConfigMap {}/{}: pool {pool} does not exist",
            shown(ns),
            shown(&p.name)
        ));
    }
    Ok(Some(pool))
}

/// The names of our GatewayClasses, with their conditions.
pub fn our_classes(
    classes: &[GatewayClass],
    configmaps: &[k8s_openapi::api::core::v1::ConfigMap],
    pools: KnownPools<'_>,
) -> BTreeMap<String, Vec<Condition>> {
    classes
        .iter()
        .filter(|c| c.spec.controller_name == CONTROLLER)
        .filter_map(|c| {
            let name = c.metadata.name.clone()?;
            let cond = match class_pool(c, configmaps, pools) {
                Ok(None) => Condition::new(
                    "Accepted",
                    true,
                    "Accepted",
                    "k8slb serves this class; its Gateways use the default pool unless they name one",
                ),
                Ok(Some(pool)) => Condition::new(
                    "Accepted",
                    true,
                    "Accepted",
                    format!("k8slb serves this class; its Gateways use pool {pool} unless they name one"),
                ),
                Err(why) => Condition::new("Accepted", false, "InvalidParameters", why),
            };
            Some((name, vec![cond]))
        })
        .collect()
}

/// A hostname as the listener or route gives it: validated, lowercase.
fn hostname(s: &str) -> Option<Hostname> {
    s.parse().ok()
}

/// The hostnames a route serves on a listener: the intersection of the listener's
/// hostname (`None`: any) with the route's (`[]`: any). `None` in the result is "any";
/// an empty result means no intersection.
pub fn intersect(listener: Option<&Hostname>, route: &[Hostname]) -> Vec<Option<Hostname>> {
    match (listener, route.is_empty()) {
        (None, true) => vec![None],
        (None, false) => route.iter().cloned().map(Some).collect(),
        (Some(l), true) => vec![Some(l.clone())],
        (Some(l), false) => {
            let mut out = BTreeSet::new();
            for r in route {
                if r == l
                    || (l.is_wildcard() && !r.is_wildcard() && l.matches_any_depth(r.as_str()))
                {
                    out.insert(r.clone());
                } else if r.is_wildcard() && !l.is_wildcard() && r.matches_any_depth(l.as_str()) {
                    out.insert(l.clone());
                } else if l.is_wildcard() && r.is_wildcard() {
                    // The more specific of two wildcards, if one contains the other.
                    let (ls, rs) = (&l.as_str()[1..], &r.as_str()[1..]);
                    if rs.ends_with(ls) {
                        out.insert(r.clone());
                    } else if ls.ends_with(rs) {
                        out.insert(l.clone());
                    }
                }
            }
            out.into_iter().map(Some).collect()
        }
    }
}

/// Whether a ReferenceGrant in `to_ns` lets `from_kind` objects of `from_ns` refer to the
/// `to_kind` (core group) object `name`.
fn granted(
    grants: &[ReferenceGrant],
    from_kind: &str,
    from_ns: &str,
    to_kind: &str,
    to_ns: &str,
    name: &str,
) -> bool {
    grants.iter().any(|g| {
        g.metadata.namespace.as_deref() == Some(to_ns)
            && g.spec
                .from
                .iter()
                .any(|f| f.group == types::GROUP && f.kind == from_kind && f.namespace == from_ns)
            && g.spec.to.iter().any(|t| {
                t.group.is_empty()
                    && t.kind == to_kind
                    && t.name.as_deref().is_none_or(|n| n == name)
            })
    })
}

/// One listener of one Gateway, as far as routes attach to it.
struct Lst<'a> {
    gateway: ObjectKey,
    spec: &'a GatewayListener,
    hostname: Option<Hostname>,
    protocol: Option<ListenerProtocol>,
    /// Set for a served TCP, UDP or TLS (passthrough) listener.
    stream: Option<StreamProtocol>,
    tls: Option<ListenerTls>,
    /// The route namespaces it allows (`allowedRoutes.namespaces`).
    from: RoutesFrom<'a>,
    /// The route kinds it takes: its protocol's, as far as `allowedRoutes.kinds` allows.
    kinds: Vec<&'static str>,
    attached: u32,
    conditions: Vec<Condition>,
}

/// The namespaces a listener takes routes from.
enum RoutesFrom<'a> {
    /// `Same`: the Gateway's.
    Same(String),
    All,
    /// `Selector`: those whose labels it selects.
    Selector(&'a LabelSelector),
    /// A selector that cannot be evaluated, or an unknown `from`: none.
    Nothing,
}

/// The spec's precedence: path rank (Exact first), longer paths first, a method match
/// first, more header matches first, more query parameter matches first, then the
/// route's age and name, the rule's and the match's index.
type PrecedenceKey = (
    (
        u8,
        std::cmp::Reverse<usize>,
        bool,
        std::cmp::Reverse<usize>,
        std::cmp::Reverse<usize>,
    ),
    (Option<String>, String, String),
    usize,
    usize,
);

/// The match part of [`PrecedenceKey`].
fn match_precedence(
    m: &RouteMatch,
) -> (
    u8,
    std::cmp::Reverse<usize>,
    bool,
    std::cmp::Reverse<usize>,
    std::cmp::Reverse<usize>,
) {
    use std::cmp::Reverse;
    (
        m.path_rank(),
        Reverse(m.path_len()),
        m.method.is_none(),
        Reverse(m.headers.len()),
        Reverse(m.query.len()),
    )
}

/// A rule ready to go into a virtual host, with its sort key.
struct Placed {
    /// (listener index, hostname)
    at: (usize, Option<Hostname>),
    key: PrecedenceKey,
    rule: RouteRule,
}

/// Translate (see the module's doc).
pub fn translate(input: &GatewayInput<'_>) -> GatewayOutput {
    let mut out = GatewayOutput {
        classes: our_classes(input.classes, input.configmaps, input.pools),
        ..Default::default()
    };
    let accepted: BTreeSet<&str> = out
        .classes
        .iter()
        .filter(|(_, c)| c.iter().all(|c| c.status))
        .map(|(n, _)| n.as_str())
        .collect();
    // The Gateways of our accepted classes, and those of a refused class of ours that the
    // plan still gives addresses (they held them before the class broke).
    let mut gateways: Vec<&Gateway> = input
        .gateways
        .iter()
        .filter(|g| {
            let class = g.spec.gateway_class_name.as_str();
            accepted.contains(class)
                || (out.classes.contains_key(class)
                    && key(&g.metadata).is_some_and(|k| input.addresses.contains_key(&k)))
        })
        .collect();
    gateways.sort_by_key(|g| age(&g.metadata));

    // Listeners.
    let mut lsts: Vec<Lst<'_>> = Vec::new();
    for g in &gateways {
        let Some(gk) = key(&g.metadata) else { continue };
        // Listeners on one port of one transport: all of one protocol (TCP and UDP on
        // one port are apart), and a TCP or UDP listener alone (nothing tells two apart).
        let transport = |l: &GatewayListener| (l.port, l.protocol == "UDP");
        let mut protocols: BTreeMap<(i32, bool), Vec<&str>> = BTreeMap::new();
        for l in &g.spec.listeners {
            protocols
                .entry(transport(l))
                .or_default()
                .push(l.protocol.as_str());
        }
        for l in &g.spec.listeners {
            let on_port = &protocols[&transport(l)];
            let conflict = if on_port.iter().any(|p| *p != l.protocol) {
                Some("ProtocolConflict")
            } else if matches!(l.protocol.as_str(), "TCP" | "UDP") && on_port.len() > 1 {
                Some("HostnameConflict")
            } else {
                None
            };
            let frontend_tls = g
                .spec
                .tls
                .as_ref()
                .is_some_and(|t| t.get("frontend").is_some());
            lsts.push(listener(input, &gk, l, conflict, frontend_tls));
        }
    }

    // Routes.
    let services = service_index(input.services);
    let slices = slice_index(input.slices);
    let mut backends: BTreeMap<BackendId, BackendState> = BTreeMap::new();
    let mut placed: Vec<Placed> = Vec::new();
    // Conditional rules placed so far on each (address, port, host): the cap.
    let mut conditional: BTreeMap<(IpAddr, i32, Option<Hostname>), usize> = BTreeMap::new();
    let mut routes: Vec<&HttpRoute> = input.routes.iter().collect();
    routes.sort_by_key(|r| age(&r.metadata));
    for r in routes {
        let Some(rk) = key(&r.metadata) else { continue };
        let rns = rk.namespace.as_str().to_string();
        let mut parents = Vec::new();
        for p in &r.spec.parent_refs {
            // Not one of ours: another controller's to report.
            let Some(gk) = our_parent(p, &rns, &gateways) else {
                continue;
            };
            let (conds, attach) = attach(
                &mut lsts,
                &gk,
                p,
                ("HTTPRoute", &r.spec.hostnames),
                (&rns, input.namespaces),
                None,
            );
            let mut conditions = conds;
            if !attach.is_empty() {
                // The rules, once per attached (listener, hostname).
                let (mut rules, refs, mut unsupported) =
                    rules_of(input, r, &rns, &services, &slices, &mut backends);
                let owner = ObjRef::HttpRoute {
                    namespace: rk.namespace.to_string(),
                    name: rk.name.to_string(),
                };
                for (_, _, rule) in &mut rules {
                    rule.owner = Some(owner.clone());
                }
                if unsupported.is_none() {
                    unsupported =
                        over_conditional_cap(input, &lsts, &attach, &rules, &mut conditional);
                }
                if let Some(why) = unsupported {
                    conditions = vec![Condition::new("Accepted", false, "UnsupportedValue", why)];
                    // Not accepted: not one of the listeners' attachedRoutes either.
                    let listeners: BTreeSet<usize> = attach.iter().map(|a| a.0).collect();
                    for li in listeners {
                        lsts[li].attached -= 1;
                    }
                } else {
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
            } else {
                // Not attached, but its references are still resolved and said to be:
                // the conformance suite (HTTPRouteInvalidCrossNamespaceParentRef,
                // HTTPRouteInvalidParentRefNotMatchingListenerPort, HTTPRouteDisallowedKind)
                // expects ResolvedRefs beside Accepted: False. Nothing enters the model.
                conditions.push(http_route_refs(input, r, &rns, &services, &slices));
            }
            parents.push(ParentStatus {
                gateway: gk,
                section_name: p.section_name.clone(),
                port: p.port,
                conditions,
            });
        }
        if !parents.is_empty() {
            out.http_routes.insert(rk, parents);
        }
    }

    // TLSRoutes, TCPRoutes and UDPRoutes: on each (listener, server name) the oldest
    // route wins.
    let mut udp_backends: BTreeMap<BackendId, BackendState> = BTreeMap::new();
    let mut taken: BTreeMap<(usize, Option<Hostname>), String> = BTreeMap::new();
    #[allow(clippy::type_complexity)]
    let mut streams_placed: Vec<(
        usize,
        Option<Hostname>,
        (Vec<WeightedBackend>, u16),
        ObjRef,
    )> = Vec::new();
    let mut l4: Vec<&L4Route> = input.l4_routes.iter().collect();
    l4.sort_by_key(|r| age(&r.metadata));
    for r in l4 {
        let Some(rk) = key(&r.metadata) else { continue };
        let rns = rk.namespace.as_str().to_string();
        let mut parents = Vec::new();
        for p in &r.spec.parent_refs {
            // Not one of ours: another controller's to report.
            let Some(gk) = our_parent(p, &rns, &gateways) else {
                continue;
            };
            let who = format!("{} {rk}", r.kind.as_str());
            let (mut conditions, at) = attach(
                &mut lsts,
                &gk,
                p,
                (r.kind.as_str(), &r.spec.hostnames),
                (&rns, input.namespaces),
                Some((&mut taken, who)),
            );
            if !at.is_empty() {
                let (weighted, invalid, refs) = l4_backends(
                    input,
                    r,
                    &rns,
                    &services,
                    &slices,
                    if r.kind == L4Kind::Udp {
                        &mut udp_backends
                    } else {
                        &mut backends
                    },
                );
                for (li, host) in at {
                    let owner = ObjRef::L4Route {
                        kind: r.kind,
                        namespace: rk.namespace.to_string(),
                        name: rk.name.to_string(),
                    };
                    streams_placed.push((li, host, (weighted.clone(), invalid), owner));
                }
                conditions.push(refs);
            } else {
                // As for an HTTPRoute: ResolvedRefs beside Accepted: False, and the
                // backends resolved aside (not in the model).
                let (_, _, refs) =
                    l4_backends(input, r, &rns, &services, &slices, &mut BTreeMap::new());
                conditions.push(refs);
            }
            parents.push(ParentStatus {
                gateway: gk,
                section_name: p.section_name.clone(),
                port: p.port,
                conditions,
            });
        }
        if !parents.is_empty() {
            out.l4_routes.insert((r.kind, rk), parents);
        }
    }
    let mut streams: BTreeMap<(IpAddr, u16, bool), StreamListener> = BTreeMap::new();
    for (li, l) in lsts.iter().enumerate() {
        let Some(protocol) = l.stream else { continue };
        let Ok(port) = u16::try_from(l.spec.port) else {
            continue;
        };
        for ip in input.addresses.get(&l.gateway).cloned().unwrap_or_default() {
            let entry = streams
                .entry((ip, port, protocol.is_udp()))
                .or_insert_with(|| StreamListener {
                    ip,
                    port,
                    protocol,
                    routes: Vec::new(),
                });
            if entry.protocol != protocol {
                continue; // another Gateway's listener on a shared address holds it
            }
            for (_, host, (weighted, invalid), owner) in streams_placed.iter().filter(|p| p.0 == li)
            {
                if !entry.routes.iter().any(|r| &r.host == host) {
                    entry.routes.push(StreamRoute {
                        host: host.clone(),
                        backends: weighted.clone(),
                        invalid: *invalid,
                        owner: Some(owner.clone()),
                    });
                }
            }
        }
    }

    // The model: every address of each Gateway × each of its usable listeners.
    placed.sort_by(|a, b| a.key.cmp(&b.key));
    let mut listeners: BTreeMap<(IpAddr, u16), Listener> = BTreeMap::new();
    let mut default_from_any_host: BTreeMap<(IpAddr, u16), bool> = BTreeMap::new();
    for (li, l) in lsts.iter().enumerate() {
        let Some(protocol) = l.protocol else { continue };
        let Ok(port) = u16::try_from(l.spec.port) else {
            continue;
        };
        let ips = input.addresses.get(&l.gateway).cloned().unwrap_or_default();
        for ip in ips {
            let entry = listeners.entry((ip, port)).or_insert_with(|| Listener {
                ip,
                port,
                protocol,
                tls: None,
                virtual_hosts: Vec::new(),
                default_action: None,
                default_owner: None,
            });
            if let Some(t) = &l.tls {
                let any = default_from_any_host.entry((ip, port)).or_default();
                merge_tls(&mut entry.tls, any, t, l.hostname.is_none());
            }
            // Listener isolation: a request goes to the routes of the most specific
            // listener whose hostname it matches, never to a less specific one's.
            let narrower: Vec<&Hostname> = lsts
                .iter()
                .filter(|o| {
                    o.gateway == l.gateway && o.spec.port == l.spec.port && o.protocol.is_some()
                })
                .filter_map(|o| o.hostname.as_ref())
                .filter(|h| narrower_than(h, l.hostname.as_ref()))
                .collect();
            for p in placed.iter().filter(|p| p.at.0 == li) {
                let host = p.at.1.clone();
                if narrower.iter().any(|n| covers(n, host.as_ref())) {
                    continue; // a more specific listener takes these requests
                }
                vhost(entry, host).rules.push(p.rule.clone());
            }
            // Its hostname is its own even without a route (404), so that a less
            // specific listener's wildcard routes do not take its requests.
            if let Some(h) = &l.hostname {
                vhost(entry, Some(h.clone()));
            }
        }
    }
    let mut routes = HttpRoutes {
        listeners: listeners.into_values().collect(),
        backends,
        streams: streams.into_values().collect(),
        udp_backends,
    };
    for l in &mut routes.listeners {
        l.sort_virtual_hosts();
    }
    for s in &mut routes.streams {
        s.sort_routes();
    }
    let streamed = |udp: bool, id: &BackendId| {
        routes.streams.iter().any(|s| {
            s.protocol.is_udp() == udp
                && s.routes
                    .iter()
                    .any(|r| r.backends.iter().any(|b| &b.id == id))
        })
    };
    let used_by_http: BTreeSet<BackendId> = routes
        .backends
        .keys()
        .filter(|id| {
            streamed(false, id)
                || routes.listeners.iter().any(|l| {
                    l.virtual_hosts.iter().any(|v| {
                        v.rules.iter().any(|r| {
                            matches!(&r.action, RouteAction::Forward { backends, .. } if backends.iter().any(|b| &b.id == *id))
                        })
                    })
                })
        })
        .cloned()
        .collect();
    let used_by_udp: BTreeSet<BackendId> = routes
        .udp_backends
        .keys()
        .filter(|id| streamed(true, id))
        .cloned()
        .collect();
    routes.backends.retain(|id, _| used_by_http.contains(id));
    routes.udp_backends.retain(|id, _| used_by_udp.contains(id));
    out.routes = routes;

    // Gateway statuses.
    for g in &gateways {
        let Some(gk) = key(&g.metadata) else { continue };
        let addresses = input.addresses.get(&gk).cloned().unwrap_or_default();
        let ls: Vec<ListenerStatus> = lsts
            .iter()
            .filter(|l| l.gateway == gk)
            .map(|l| ListenerStatus {
                name: l.spec.name.clone(),
                attached_routes: l.attached,
                supported_kinds: if l.served() { l.kinds.clone() } else { vec![] },
                conditions: l.conditions.clone(),
            })
            .collect();
        // spec.addresses: a type we do not assign is not accepted; an address asked for
        // that the Gateway did not get (not in a pool, held by another) is not usable.
        let unsupported = g
            .spec
            .addresses
            .iter()
            .find(|a| a.type_.as_deref().is_some_and(|t| t != "IPAddress"));
        let unusable: Vec<&str> = g
            .spec
            .addresses
            .iter()
            .filter(|a| a.type_.as_deref().is_none_or(|t| t == "IPAddress"))
            .filter(|a| crate::ipam::parse_ip(&a.value).map_or(true, |ip| !addresses.contains(&ip)))
            .map(|a| a.value.as_str())
            .collect();
        let accepted = match unsupported {
            Some(a) => Condition::new(
                "Accepted",
                false,
                "UnsupportedAddress",
                format!(
                    "spec.addresses: type {} is not supported (IPAddress is)",
                    crate::problem::cut(a.type_.as_deref().unwrap_or_default(), 40)
                ),
            ),
            None => Condition::new("Accepted", true, "Accepted", "k8slb serves this Gateway"),
        };
        let programmed = if let Some(first) = unusable.first() {
            Condition::new(
                "Programmed",
                false,
                "AddressNotUsable",
                format!(
                    "spec.addresses: {} is not assigned to it (not in a pool, or held by another tenant): see its Events",
                    crate::problem::cut(first, 45)
                ),
            )
        } else if addresses.is_empty() {
            Condition::new(
                "Programmed",
                false,
                "AddressNotAssigned",
                "no address from the pool yet",
            )
        } else {
            Condition::new(
                "Programmed",
                true,
                "Programmed",
                "served on its addresses by the LB nodes",
            )
        };
        out.gateways.insert(
            gk,
            GatewayStatus {
                addresses,
                conditions: vec![accepted, programmed],
                listeners: ls,
            },
        );
    }
    out
}

/// Why the rules of a route attached at `attach` would take a host beyond
/// [`GatewayInput::conditional_rules_per_host`], if they would; else they are counted
/// in `placed` (by address, port and host: Gateways may share an address). Routes come
/// oldest first, so the oldest keep theirs.
fn over_conditional_cap(
    input: &GatewayInput<'_>,
    lsts: &[Lst<'_>],
    attach: &[(usize, Option<Hostname>)],
    rules: &[(usize, usize, RouteRule)],
    placed: &mut BTreeMap<(IpAddr, i32, Option<Hostname>), usize>,
) -> Option<String> {
    let n = rules
        .iter()
        .filter(|(_, _, r)| r.matches.is_conditional())
        .count();
    if n == 0 {
        return None;
    }
    let cap = input.conditional_rules_per_host;
    let mut keys = BTreeSet::new();
    for (li, host) in attach {
        let l = &lsts[*li];
        for ip in input.addresses.get(&l.gateway).into_iter().flatten() {
            keys.insert((*ip, l.spec.port, host.clone()));
        }
    }
    for k in &keys {
        let have = placed.get(k).copied().unwrap_or(0);
        if have + n > cap {
            return Some(format!(
                "host {} on {}:{} would have {} rules that match on more than the path (method, headers, query parameters); the limit is {cap} per host (limits.conditionalRulesPerHost), older routes hold {have}",
                k.2.as_ref().map_or("*", |h| h.as_str()),
                k.0,
                k.1,
                have + n
            ));
        }
    }
    for k in keys {
        *placed.entry(k).or_default() += n;
    }
    None
}

/// The virtual host of `host` in `l`, added (without rules) if new.
fn vhost(l: &mut Listener, host: Option<Hostname>) -> &mut VirtualHost {
    let i = match l.virtual_hosts.iter().position(|v| v.host == host) {
        Some(i) => i,
        None => {
            l.virtual_hosts.push(VirtualHost {
                // The Gateway API's wildcards are suffix matches.
                any_depth: host.as_ref().is_some_and(Hostname::is_wildcard),
                host,
                rules: vec![],
            });
            l.virtual_hosts.len() - 1
        }
    };
    &mut l.virtual_hosts[i]
}

/// Is listener hostname `h` more specific than `than` (`None`: any host) and within it?
fn narrower_than(h: &Hostname, than: Option<&Hostname>) -> bool {
    match than {
        None => true,
        Some(t) if !t.is_wildcard() => false,
        Some(t) => h != t && t.matches_any_depth(h.as_str()),
    }
}

/// Does listener hostname `h` take every request for `host` (a route's hostname on a
/// less specific listener; `None`: any host, which no hostname covers)?
fn covers(h: &Hostname, host: Option<&Hostname>) -> bool {
    match host {
        None => false,
        Some(x) if h.is_wildcard() => x == h || h.matches_any_depth(x.as_str()),
        Some(x) => x == h,
    }
}

/// The Gateway `p` names, if it is one of `ours`.
fn our_parent(p: &ParentRef, route_ns: &str, ours: &[&Gateway]) -> Option<ObjectKey> {
    let gk = parent_gateway(p, route_ns)?;
    ours.iter()
        .any(|g| key(&g.metadata).as_ref() == Some(&gk))
        .then_some(gk)
}

fn parent_gateway(p: &ParentRef, route_ns: &str) -> Option<ObjectKey> {
    if p.group.as_deref().unwrap_or(types::GROUP) != types::GROUP
        || p.kind.as_deref().unwrap_or("Gateway") != "Gateway"
    {
        return None;
    }
    ObjectKey::new(p.namespace.as_deref().unwrap_or(route_ns), &p.name).ok()
}

fn listener<'a>(
    input: &GatewayInput<'_>,
    gk: &ObjectKey,
    l: &'a GatewayListener,
    conflict: Option<&'static str>,
    frontend_tls: bool,
) -> Lst<'a> {
    let mut conditions = Vec::new();
    let mut unsupported = |why: String| {
        conditions.push(Condition::new(
            "Accepted",
            false,
            "UnsupportedProtocol",
            why,
        ));
    };
    let passthrough = l
        .tls
        .as_ref()
        .and_then(|t| t.mode.as_deref())
        .is_some_and(|m| m == "Passthrough");
    let (mut protocol, mut stream) = match l.protocol.as_str() {
        "HTTP" => (Some(ListenerProtocol::Http), None),
        "HTTPS" => (Some(ListenerProtocol::Https), None),
        "TCP" => (None, Some(StreamProtocol::Tcp)),
        "UDP" if input.serves_udp => (None, Some(StreamProtocol::Udp)),
        "UDP" => {
            unsupported("HAProxy does not proxy UDP: UDP listeners need the nginx provider".into());
            (None, None)
        }
        "TLS" if passthrough => (None, Some(StreamProtocol::Tls)),
        "TLS" => {
            unsupported(
                "a TLS listener is served with tls.mode Passthrough (to terminate TLS, use HTTPS)"
                    .into(),
            );
            (None, None)
        }
        other => {
            unsupported(format!(
                "protocol {} is not served (HTTP, HTTPS, TLS, TCP and UDP are)",
                crate::problem::cut(other, 40)
            ));
            (None, None)
        }
    };
    let hostname = match &l.hostname {
        None => None,
        Some(h) => match hostname(h) {
            Some(h) => Some(h),
            None => {
                conditions.push(Condition::new(
                    "Accepted",
                    false,
                    "UnsupportedValue",
                    "invalid hostname",
                ));
                (protocol, stream) = (None, None);
                None
            }
        },
    };
    let served =
        |p: &Option<ListenerProtocol>, s: &Option<StreamProtocol>| p.is_some() || s.is_some();
    if let Some(reason) = conflict.filter(|_| served(&protocol, &stream)) {
        conditions.push(Condition::new(
            "Conflicted",
            true,
            reason,
            if reason == "ProtocolConflict" {
                format!(
                    "another listener uses port {} with another protocol",
                    l.port
                )
            } else {
                format!(
                    "another {} listener uses port {} (nothing tells their connections apart)",
                    l.protocol, l.port
                )
            },
        ));
        (protocol, stream) = (None, None);
    }
    let udp = l.protocol == "UDP";
    if !(1..=65535).contains(&l.port) {
        conditions.push(Condition::new(
            "Accepted",
            false,
            "PortUnavailable",
            "port out of range",
        ));
        (protocol, stream) = (None, None);
    } else if let Some(holder) = u16::try_from(l.port)
        .ok()
        .and_then(|p| input.unavailable.get(gk)?.get(&(p, udp)))
    {
        conditions.push(Condition::new(
            "Accepted",
            false,
            "PortUnavailable",
            format!(
                "port {}/{} of the Gateway's address is used by {holder}",
                l.port,
                if udp { "UDP" } else { "TCP" }
            ),
        ));
        (protocol, stream) = (None, None);
    }
    // TLS settings k8slb does not serve: refused, never ignored (a client certificate
    // validation ignored would let in the clients it was written to keep out).
    let tls_settings = l.tls.as_ref();
    let refused_tls = if tls_settings.is_some_and(|t| !t.options.is_empty()) {
        Some("tls.options are not served (k8slb defines none)")
    } else if protocol == Some(ListenerProtocol::Https)
        && (frontend_tls || tls_settings.is_some_and(|t| t.frontend_validation.is_some()))
    {
        Some("client certificate validation (tls.frontendValidation, spec.tls.frontend) is not served: the listener is refused rather than served to clients without certificates")
    } else {
        None
    };
    if let (Some(why), true) = (refused_tls, served(&protocol, &stream)) {
        conditions.push(Condition::new("Accepted", false, "UnsupportedValue", why));
        (protocol, stream) = (None, None);
    }
    let mut tls = None;
    if protocol == Some(ListenerProtocol::Https) {
        match tls_of(input, gk, l, hostname.as_ref()) {
            Ok(t) => tls = Some(t),
            Err((reason, why)) => {
                conditions.push(Condition::new("ResolvedRefs", false, reason, why));
                (protocol, stream) = (None, None);
            }
        }
    }
    let ns = l
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    let from_text = ns.and_then(|n| n.from.as_deref()).unwrap_or("Same");
    let from = match from_text {
        "Same" => Ok(RoutesFrom::Same(gk.namespace.to_string())),
        "All" => Ok(RoutesFrom::All),
        "Selector" => match ns.and_then(|n| n.selector.as_ref()) {
            None => Err("allowedRoutes.namespaces.from Selector needs a selector".to_string()),
            Some(sel) => check_selector(sel)
                .map(|()| RoutesFrom::Selector(sel))
                .map_err(|why| format!("{why}: it selects no namespace")),
        },
        other => Err(format!(
            "allowedRoutes.namespaces.from {} is not Same, All or Selector: it allows no namespace",
            crate::problem::cut(other, 40)
        )),
    };
    // One ResolvedRefs condition per listener (the API keys conditions by type): the
    // first problem found says it.
    let has_refs = |c: &[Condition]| c.iter().any(|c| c.type_ == "ResolvedRefs");
    let from = match from {
        Ok(f) => f,
        Err(why) => {
            if !has_refs(&conditions) {
                conditions.push(Condition::new(
                    "ResolvedRefs",
                    false,
                    "InvalidRouteNamespaces",
                    why,
                ));
            }
            RoutesFrom::Nothing
        }
    };
    let allowed_kinds = l.allowed_routes.as_ref().and_then(|a| a.kinds.as_ref());
    let own_kind = kind_for(&l.protocol);
    let is_own = |k: &types::RouteGroupKind| {
        Some(k.kind.as_str()) == own_kind
            && k.group.as_deref().unwrap_or(types::GROUP) == types::GROUP
    };
    let kinds: Vec<&'static str> = match allowed_kinds {
        None => own_kind.into_iter().collect(),
        Some(k) => own_kind
            .filter(|_| k.iter().any(is_own))
            .into_iter()
            .collect(),
    };
    let invalid_kind = allowed_kinds.and_then(|k| k.iter().find(|k| !is_own(k)));
    if let (Some(other), false) = (invalid_kind, has_refs(&conditions)) {
        // The spec: a kind the implementation does not support on this listener is
        // InvalidRouteKinds (the listener still serves the kinds it supports).
        conditions.push(Condition::new(
            "ResolvedRefs",
            false,
            "InvalidRouteKinds",
            format!(
                "route kind {}/{} is not supported on a {} listener ({} is)",
                crate::problem::cut(other.group.as_deref().unwrap_or(types::GROUP), 60),
                crate::problem::cut(&other.kind, 60),
                crate::problem::cut(&l.protocol, 10),
                own_kind.unwrap_or("none")
            ),
        ));
    }
    let served = served(&protocol, &stream);
    if served {
        if !conditions.iter().any(|c| c.type_ == "ResolvedRefs") {
            conditions.push(Condition::new(
                "ResolvedRefs",
                true,
                "ResolvedRefs",
                "every reference resolved",
            ));
        }
        conditions.push(Condition::new("Accepted", true, "Accepted", "served"));
        conditions.push(Condition::new("Programmed", true, "Programmed", "served"));
    } else {
        // Refused: not programmed either (the spec's listener conditions come in sets).
        conditions.push(Condition::new(
            "Programmed",
            false,
            "Invalid",
            "the listener is not served",
        ));
    }
    Lst {
        gateway: gk.clone(),
        spec: l,
        hostname,
        protocol,
        stream,
        tls,
        from,
        kinds,
        attached: 0,
        conditions,
    }
}

/// Adds the TLS of one HTTPS listener to the listener of its address and port, which
/// several Gateway listeners (one per hostname) may share: the certificates are chosen by
/// SNI (one Secret named by two listeners serves both hostnames); the default
/// certificate, for a server name no listener names, is the first of the first listener
/// without a hostname, else of the first listener.
fn merge_tls(
    into: &mut Option<ListenerTls>,
    from_any_host: &mut bool,
    t: &ListenerTls,
    any_host: bool,
) {
    let Some(have) = into else {
        *into = Some(t.clone());
        *from_any_host = any_host;
        return;
    };
    for c in &t.certificates {
        match have.certificates.iter_mut().find(|h| h.file == c.file) {
            Some(h) => {
                // A listener without a hostname adds none: it is served as the default.
                h.hosts.extend(c.hosts.iter().cloned());
                h.hosts.sort();
                h.hosts.dedup();
            }
            None => have.certificates.push(c.clone()),
        }
    }
    have.certificates.sort_by(|a, b| a.file.cmp(&b.file));
    if any_host && !*from_any_host {
        have.default_certificate = t.default_certificate.clone();
        *from_any_host = true;
    }
}

/// The TLS of an HTTPS listener: its certificates, chosen by SNI for its `hostname` (any
/// server name when it has none).
fn tls_of(
    input: &GatewayInput<'_>,
    gk: &ObjectKey,
    l: &GatewayListener,
    hostname: Option<&Hostname>,
) -> Result<ListenerTls, (&'static str, String)> {
    let Some(t) = &l.tls else {
        return Err((
            "InvalidCertificateRef",
            "an HTTPS listener needs tls.certificateRefs".into(),
        ));
    };
    if t.mode.as_deref().unwrap_or("Terminate") != "Terminate" {
        return Err((
            "UnsupportedValue",
            "tls.mode Passthrough is served by TLS listeners, not HTTPS".into(),
        ));
    }
    let mut certificates = Vec::new();
    for c in &t.certificate_refs {
        let ns = c.namespace.as_deref().unwrap_or(gk.namespace.as_str());
        if !c.group.as_deref().unwrap_or("").is_empty()
            || c.kind.as_deref().unwrap_or("Secret") != "Secret"
        {
            return Err((
                "InvalidCertificateRef",
                format!("{} is not a Secret", c.name),
            ));
        }
        if ns != gk.namespace.as_str()
            && !granted(
                input.grants,
                "Gateway",
                gk.namespace.as_str(),
                "Secret",
                ns,
                &c.name,
            )
        {
            return Err((
                "RefNotPermitted",
                format!(
                    "Secret {ns}/{} is in another namespace and no ReferenceGrant allows it",
                    c.name
                ),
            ));
        }
        let Some(s) = input
            .secrets
            .iter()
            .find(|s| s.namespace == ns && s.name == c.name)
        else {
            return Err((
                "InvalidCertificateRef",
                format!("Secret {ns}/{} does not exist", c.name),
            ));
        };
        // The same check as an Ingress's (certs::inspect, through SecretMeta): the type,
        // then what both proxies load.
        if s.type_ != crate::certs::TLS_SECRET_TYPE {
            return Err((
                "InvalidCertificateRef",
                format!(
                    "Secret {ns}/{} is of type {:?}, not {}",
                    c.name,
                    s.type_.chars().take(64).collect::<String>(),
                    crate::certs::TLS_SECRET_TYPE
                ),
            ));
        }
        if !s.valid {
            return Err((
                "InvalidCertificateRef",
                format!(
                    "Secret {ns}/{} does not hold a certificate and key both proxies load: {}",
                    c.name, s.refusal
                ),
            ));
        }
        // A certificate serves only the hostname its names cover (the same rule as an
        // Ingress's TLS host; a listener without a hostname is its Gateway's default).
        if let Some(h) = hostname.filter(|h| !crate::certs::covers(&s.dns_names, h.as_str())) {
            return Err((
                "InvalidCertificateRef",
                format!(
                    "the certificate of Secret {ns}/{} is not for the listener's hostname {h} (its subjectAltName DNS names: {}; the common name is never read)",
                    c.name,
                    crate::certs::names_list(&s.dns_names)
                ),
            ));
        }
        let (Ok(namespace), Ok(name)) = (ns.parse(), c.name.parse()) else {
            return Err(("InvalidCertificateRef", "invalid Secret name".into()));
        };
        certificates.push(Certificate {
            file: CertFile::Secret {
                namespace,
                name,
                version: s.version.clone(),
            },
            hosts: hostname.into_iter().cloned().collect(),
            owner: Some(ObjRef::Gateway {
                namespace: gk.namespace.to_string(),
                name: gk.name.to_string(),
            }),
        });
    }
    if certificates.is_empty() {
        return Err((
            "InvalidCertificateRef",
            "an HTTPS listener needs tls.certificateRefs".into(),
        ));
    }
    let default_certificate = Some(certificates[0].file.clone());
    Ok(ListenerTls {
        certificates,
        default_certificate,
    })
}

/// Attach a route of `kind` with `hostnames` to the listeners `p` selects: (the route's
/// conditions for this parent, the (listener, hostname)s it is served on). With `taken`
/// (TLS, TCP and UDP routes), a (listener, hostname) that an older route already holds is
/// not attached again.
#[allow(clippy::type_complexity)]
fn attach(
    lsts: &mut [Lst<'_>],
    gk: &ObjectKey,
    p: &ParentRef,
    (kind, hostnames): (&str, &[String]),
    (rns, namespaces): (&str, &[Namespace]),
    mut taken: Option<(&mut BTreeMap<(usize, Option<Hostname>), String>, String)>,
) -> (Vec<Condition>, Vec<(usize, Option<Hostname>)>) {
    let route_hosts: Vec<Hostname> = hostnames.iter().filter_map(|h| hostname(h)).collect();
    if route_hosts.len() != hostnames.len() {
        return (
            vec![Condition::new(
                "Accepted",
                false,
                "UnsupportedValue",
                "a hostname is not a valid RFC 1123 host name",
            )],
            vec![],
        );
    }
    let mut candidates = 0;
    let mut allowed = 0;
    let mut held_by = None;
    let mut at = Vec::new();
    for (i, l) in lsts.iter_mut().enumerate() {
        if &l.gateway != gk
            || p.section_name.as_deref().is_some_and(|s| s != l.spec.name)
            || p.port.is_some_and(|port| port != l.spec.port)
        {
            continue;
        }
        candidates += 1;
        if !l.served() || !l.kinds.contains(&kind) || !allows_namespace(l, rns, namespaces) {
            continue;
        }
        allowed += 1;
        // TCP and UDP listeners have no hostnames to intersect.
        let mut hosts = if matches!(l.stream, Some(StreamProtocol::Tcp | StreamProtocol::Udp)) {
            vec![None]
        } else {
            intersect(l.hostname.as_ref(), &route_hosts)
        };
        if let Some((taken, who)) = taken.as_mut() {
            hosts.retain(|h| match taken.get(&(i, h.clone())) {
                Some(holder) => {
                    held_by = Some(holder.clone());
                    false
                }
                None => {
                    taken.insert((i, h.clone()), who.clone());
                    true
                }
            });
        }
        if hosts.is_empty() {
            continue;
        }
        l.attached += 1;
        at.extend(hosts.into_iter().map(|h| (i, h)));
    }
    let cond = if candidates == 0 {
        Condition::new(
            "Accepted",
            false,
            "NoMatchingParent",
            "no listener of the Gateway matches sectionName/port",
        )
    } else if allowed == 0 {
        Condition::new(
            "Accepted",
            false,
            "NotAllowedByListeners",
            format!("no listener allows {kind}s from this namespace"),
        )
    } else if let (true, Some(holder)) = (at.is_empty(), &held_by) {
        Condition::new(
            "Accepted",
            false,
            "UnsupportedValue",
            format!(
                "the listeners it selects already serve {holder}, which is older: one route per {}",
                if kind == "TLSRoute" {
                    "server name"
                } else {
                    "listener"
                }
            ),
        )
    } else if at.is_empty() {
        Condition::new(
            "Accepted",
            false,
            "NoMatchingListenerHostname",
            "no listener hostname intersects the route's hostnames",
        )
    } else {
        Condition::new("Accepted", true, "Accepted", "attached")
    };
    (vec![cond], at)
}

/// The backends of a TLSRoute, TCPRoute or UDPRoute (every rule's, together: they have no
/// matches to choose between them), the summed weight of its invalid references (their
/// share of the connections is closed, as an HTTPRoute's gets 500), and its ResolvedRefs
/// condition.
fn l4_backends(
    input: &GatewayInput<'_>,
    r: &L4Route,
    rns: &str,
    services: &BTreeMap<(String, String), &Service>,
    slices: &crate::endpoints::SliceIndex<'_>,
    backends: &mut BTreeMap<BackendId, BackendState>,
) -> (Vec<WeightedBackend>, u16, Condition) {
    let protocol = if r.kind == L4Kind::Udp { "UDP" } else { "TCP" };
    let mut refs = Condition::new(
        "ResolvedRefs",
        true,
        "ResolvedRefs",
        "every reference resolved",
    );
    let mut weighted: Vec<WeightedBackend> = Vec::new();
    let mut invalid: u16 = 0;
    for b in r.spec.rules.iter().flat_map(|rule| &rule.backend_refs) {
        match backend(
            input,
            b,
            (r.kind.as_str(), rns, protocol),
            services,
            slices,
            backends,
        ) {
            Ok(Some(w)) => match weighted.iter_mut().find(|have| have.id == w.id) {
                Some(have) => have.weight = have.weight.saturating_add(w.weight),
                None => weighted.push(w),
            },
            Ok(None) => {}
            Err((reason, why)) => {
                let w = b.weight.unwrap_or(1).clamp(0, i32::from(u16::MAX));
                invalid = invalid.saturating_add(u16::try_from(w).unwrap_or(0));
                if refs.status {
                    refs = Condition::new("ResolvedRefs", false, reason, why);
                }
            }
        }
    }
    (weighted, invalid, refs)
}

/// The ResolvedRefs condition of an HTTPRoute that attaches to no listener of a parent:
/// every rule's backendRefs resolved as [`rules_of`] resolves them (the first failure
/// says why), into a map of its own, so that nothing of the route enters the model.
fn http_route_refs(
    input: &GatewayInput<'_>,
    r: &HttpRoute,
    rns: &str,
    services: &BTreeMap<(String, String), &Service>,
    slices: &crate::endpoints::SliceIndex<'_>,
) -> Condition {
    let mut aside = BTreeMap::new();
    for b in r.spec.rules.iter().flat_map(|rule| &rule.backend_refs) {
        if let Err((reason, why)) = backend(
            input,
            b,
            ("HTTPRoute", rns, "TCP"),
            services,
            slices,
            &mut aside,
        ) {
            return Condition::new("ResolvedRefs", false, reason, why);
        }
    }
    Condition::new(
        "ResolvedRefs",
        true,
        "ResolvedRefs",
        "every reference resolved",
    )
}

/// Can `sel` be evaluated (operators and values as `metav1.LabelSelector` defines them)?
fn check_selector(sel: &LabelSelector) -> Result<(), String> {
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let ok = match e.operator.as_str() {
            "In" | "NotIn" => !values.is_empty(),
            "Exists" | "DoesNotExist" => values.is_empty(),
            _ => false,
        };
        if !ok {
            return Err(format!(
                "namespace selector: operator {} with {} values is not valid",
                crate::problem::cut(&e.operator, 20),
                values.len()
            ));
        }
    }
    Ok(())
}

/// Does `sel` select these labels (every matchLabels entry and every expression)?
pub fn selects(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    by_labels
        && sel.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let have = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => have.is_some_and(|v| values.contains(v)),
                "NotIn" => have.is_none_or(|v| !values.contains(v)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                _ => false,
            }
        })
}

/// Does the listener allow routes from namespace `rns`?
fn allows_namespace(l: &Lst<'_>, rns: &str, namespaces: &[Namespace]) -> bool {
    match &l.from {
        RoutesFrom::Same(ns) => ns == rns,
        RoutesFrom::All => true,
        RoutesFrom::Nothing => false,
        RoutesFrom::Selector(sel) => {
            let empty = BTreeMap::new();
            // A namespace that is not known (yet) has no labels to select.
            let Some(ns) = namespaces
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(rns))
            else {
                return false;
            };
            selects(sel, ns.metadata.labels.as_ref().unwrap_or(&empty))
        }
    }
}

fn service_index(services: &[Service]) -> BTreeMap<(String, String), &Service> {
    services
        .iter()
        .filter_map(|s| Some(((s.metadata.namespace.clone()?, s.metadata.name.clone()?), s)))
        .collect()
}

/// The rules of a route: (rule index, match index, rule), the ResolvedRefs condition, and
/// why the route cannot be served, if it cannot.
#[allow(clippy::type_complexity)]
fn rules_of(
    input: &GatewayInput<'_>,
    r: &HttpRoute,
    rns: &str,
    services: &BTreeMap<(String, String), &Service>,
    slices: &crate::endpoints::SliceIndex<'_>,
    backends: &mut BTreeMap<BackendId, BackendState>,
) -> (Vec<(usize, usize, RouteRule)>, Condition, Option<String>) {
    let mut out = Vec::new();
    let mut refs = Condition::new(
        "ResolvedRefs",
        true,
        "ResolvedRefs",
        "every reference resolved",
    );
    for (ri, rule) in r.spec.rules.iter().enumerate() {
        // Served without them, a rule would not do what its author asked: refused.
        for (field, set) in [
            ("timeouts", rule.timeouts.is_some()),
            ("retry", rule.retry.is_some()),
            ("sessionPersistence", rule.session_persistence.is_some()),
        ] {
            if set {
                let why = format!("rule field {field} is not served yet");
                return (vec![], refs, Some(why));
            }
        }
        // The action and the filters.
        let mut action = None;
        let mut filters = RuleFilters::default();
        let mut path_rewrite = None;
        // A redirect's ReplacePrefixMatch: resolved per match (it replaces the matched
        // prefix).
        let mut redirect_prefix = None;
        let mut seen: Vec<&str> = Vec::new();
        for f in &rule.filters {
            if seen.contains(&f.type_.as_str()) {
                let why = format!("filter {} is given twice in one rule", f.type_);
                return (vec![], refs, Some(why));
            }
            seen.push(&f.type_);
            let done = match f.type_.as_str() {
                "RequestRedirect" => f.request_redirect.as_ref().map(|rd| {
                    redirect_prefix = rd.path.clone().filter(|p| p.type_ == "ReplacePrefixMatch");
                    redirect(rd).map(|a| {
                        action = Some(a);
                    })
                }),
                "RequestHeaderModifier" => f.request_header_modifier.as_ref().map(|m| {
                    header_edits(m, "RequestHeaderModifier").map(|e| filters.request_headers = e)
                }),
                "ResponseHeaderModifier" => f.response_header_modifier.as_ref().map(|m| {
                    header_edits(m, "ResponseHeaderModifier").map(|e| filters.response_headers = e)
                }),
                "URLRewrite" => f.url_rewrite.as_ref().map(|u| {
                    let host = match &u.hostname {
                        None => None,
                        Some(h) => match hostname(h).filter(|h| !h.is_wildcard()) {
                            Some(h) => Some(h),
                            None => return Err("URLRewrite: invalid hostname".to_string()),
                        },
                    };
                    filters.rewrite_host = host;
                    path_rewrite = u.path.clone();
                    Ok(())
                }),
                t => Some(Err(format!("filter {t} is not served yet"))),
            };
            match done {
                Some(Ok(())) => {}
                Some(Err(why)) => return (vec![], refs, Some(why)),
                None => {
                    let why = format!("filter {} lacks its settings", f.type_);
                    return (vec![], refs, Some(why));
                }
            }
        }
        if action.is_some() && (!filters.is_empty() || path_rewrite.is_some()) {
            // The spec forbids RequestRedirect with URLRewrite; header modifiers of a
            // redirect would have nothing to modify that is forwarded.
            let why = "RequestRedirect with another filter is not served".to_string();
            return (vec![], refs, Some(why));
        }
        // A backend's own filters are not served either: refused, never ignored (the
        // request would reach the backend without them).
        if let Some(f) = rule.backend_refs.iter().flat_map(|b| &b.filters).next() {
            return (
                vec![],
                refs,
                Some(format!("backendRefs filter {} is not served yet", f.type_)),
            );
        }
        let action = match action {
            Some(a) => a,
            None => {
                let mut weighted = Vec::new();
                // The weight of the invalid references: their share gets 500.
                let mut invalid: u16 = 0;
                for b in &rule.backend_refs {
                    match backend(
                        input,
                        b,
                        ("HTTPRoute", rns, "TCP"),
                        services,
                        slices,
                        backends,
                    ) {
                        Ok(Some(w)) => weighted.push(w),
                        Ok(None) => {}
                        Err((reason, why)) => {
                            let w = b.weight.unwrap_or(1).clamp(0, i32::from(u16::MAX));
                            invalid = invalid.saturating_add(u16::try_from(w).unwrap_or(0));
                            if refs.status {
                                refs = Condition::new("ResolvedRefs", false, reason, why);
                            }
                        }
                    }
                }
                if weighted.is_empty() {
                    // The spec: requests to an invalid backend get 500 (and a rule
                    // whose every backend has weight 0 too).
                    RouteAction::Respond {
                        status: FixedStatus::InternalServerError500,
                    }
                } else {
                    // The spec: the share of requests an invalid backend would have had
                    // gets 500; the others reach theirs.
                    RouteAction::Forward {
                        backends: weighted,
                        invalid,
                    }
                }
            }
        };
        let matches = if rule.matches.is_empty() {
            vec![types::HttpRouteMatch::default()]
        } else {
            rule.matches.clone()
        };
        for (mi, m) in matches.iter().enumerate() {
            let (method, headers, query) = match conditions(m) {
                Ok(c) => c,
                Err(why) => return (vec![], refs, Some(why)),
            };
            let path = m.path.clone().unwrap_or_default();
            let value = path.value.as_deref().unwrap_or("/");
            let Ok(p) = value.parse::<HttpPath>() else {
                return (
                    vec![],
                    refs,
                    Some(format!(
                        "path {:?} is not a valid URL path",
                        value.chars().take(80).collect::<String>()
                    )),
                );
            };
            let pm = match path.type_.as_deref().unwrap_or("PathPrefix") {
                "PathPrefix" => PathMatch::prefix(&p),
                "Exact" => PathMatch::Exact(p),
                t => {
                    return (
                        vec![],
                        refs,
                        Some(format!("path match type {t} is not served")),
                    )
                }
            };
            let mut filters = filters.clone();
            if let Some(m) = &path_rewrite {
                match path_rewrite_for(m, &pm, "URLRewrite") {
                    Ok(r) => filters.rewrite_path = Some(r),
                    Err(why) => return (vec![], refs, Some(why)),
                }
            }
            let mut action = action.clone();
            if let (Some(m), RouteAction::Redirect(rd)) = (&redirect_prefix, &mut action) {
                match path_rewrite_for(m, &pm, "RequestRedirect") {
                    Ok(r) => rd.replace_prefix = Some(r),
                    Err(why) => return (vec![], refs, Some(why)),
                }
            }
            let rule = RouteRule {
                matches: RouteMatch {
                    path: pm,
                    method,
                    headers,
                    query,
                },
                action,
                filters,
                owner: None,
            };
            // What nginx could not load would stop every tenant's config: refused for
            // both providers, so a route's acceptance does not depend on the proxy.
            if let Some(why) = rule.nginx_token_too_long() {
                return (vec![], refs, Some(format!("rule {ri} match {mi}: {why}")));
            }
            out.push((ri, mi, rule));
        }
    }
    (out, refs, None)
}

/// Headers a filter may not change: Host has URLRewrite's `hostname`; the framing and
/// connection headers belong to the proxy.
const UNMODIFIABLE_HEADERS: [&str; 5] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
];

/// A RequestHeaderModifier's or ResponseHeaderModifier's edits, validated: names and
/// values that can reach a config ([`FieldName`], [`FieldValue`]), each name once across
/// set, add and remove, none of [`UNMODIFIABLE_HEADERS`].
fn header_edits(m: &types::HeaderModifier, what: &str) -> Result<HeaderEdits, String> {
    let mut seen: Vec<FieldName> = Vec::new();
    let mut name = |n: &str| -> Result<FieldName, String> {
        let name: FieldName = n
            .to_ascii_lowercase()
            .parse()
            .map_err(|e| format!("{what}: {e}"))?;
        if UNMODIFIABLE_HEADERS.contains(&name.as_str()) {
            return Err(format!("{what}: header {name} cannot be modified"));
        }
        if seen.contains(&name) {
            return Err(format!("{what}: header {name} is named twice"));
        }
        seen.push(name.clone());
        Ok(name)
    };
    let mut pair = |nv: &types::NameValue| -> Result<HeaderValue, String> {
        Ok(HeaderValue {
            name: name(&nv.name)?,
            value: nv
                .value
                .parse()
                .map_err(|e| format!("{what}: value: {e}"))?,
        })
    };
    let set = m.set.iter().map(&mut pair).collect::<Result<Vec<_>, _>>()?;
    let add = m.add.iter().map(&mut pair).collect::<Result<Vec<_>, _>>()?;
    let remove = m
        .remove
        .iter()
        .map(|n| name(n))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(HeaderEdits { set, add, remove })
}

/// A URLRewrite's path for a rule matching `pm`: ReplacePrefixMatch needs a PathPrefix
/// match (the spec), whose prefix it replaces.
fn path_rewrite_for(
    m: &types::HttpPathModifier,
    pm: &PathMatch,
    filter: &str,
) -> Result<PathRewrite, String> {
    let path = |v: &Option<String>| {
        v.as_deref()
            .unwrap_or("/")
            .parse::<HttpPath>()
            .map_err(|_| format!("{filter}: invalid path"))
    };
    match (m.type_.as_str(), pm) {
        ("ReplaceFullPath", _) => Ok(PathRewrite::Full {
            path: path(&m.replace_full_path)?,
        }),
        ("ReplacePrefixMatch", PathMatch::Prefix(from)) => Ok(PathRewrite::Prefix {
            from: from.clone(),
            to: path(&m.replace_prefix_match)?,
        }),
        ("ReplacePrefixMatch", _) => Err(format!(
            "{filter} ReplacePrefixMatch needs a PathPrefix match"
        )),
        (t, _) => Err(format!(
            "{filter} path type {} is not served",
            crate::problem::cut(t, 40)
        )),
    }
}

/// A match's method, header and query parameter conditions, validated: Exact matches
/// only (RegularExpression is refused), names and values that can reach a config
/// (see [`FieldName`], [`QueryName`], [`FieldValue`]); of several entries for one name,
/// the first counts (the spec: later ones are ignored).
#[allow(clippy::type_complexity)]
fn conditions(
    m: &types::HttpRouteMatch,
) -> Result<(Option<Method>, Vec<HeaderMatch>, Vec<QueryMatch>), String> {
    let short = |s: &str| s.chars().take(80).collect::<String>();
    let method = match &m.method {
        None => None,
        Some(s) => Some(
            s.parse::<Method>()
                .map_err(|_| format!("method {:?} is not an HTTP method", short(s)))?,
        ),
    };
    let exact = |t: &Option<String>, what: &str| match t.as_deref().unwrap_or("Exact") {
        "Exact" => Ok(()),
        t => Err(format!("{what} match type {} is not served", short(t))),
    };
    let value = |v: &str, what: &str| {
        v.parse::<FieldValue>()
            .map_err(|e| format!("{what} value: {e}"))
    };
    let mut headers: Vec<HeaderMatch> = Vec::new();
    for h in &m.headers {
        exact(&h.type_, "header")?;
        let name: FieldName = h
            .name
            .to_ascii_lowercase()
            .parse()
            .map_err(|e| format!("header {e}"))?;
        let value = value(&h.value, "header")?;
        if !headers.iter().any(|x| x.name == name) {
            headers.push(HeaderMatch { name, value });
        }
    }
    headers.sort();
    let mut query: Vec<QueryMatch> = Vec::new();
    for q in &m.query_params {
        exact(&q.type_, "query parameter")?;
        let name: QueryName = q.name.parse().map_err(|e| format!("query {e}"))?;
        let value = value(&q.value, "query parameter")?;
        if !query.iter().any(|x| x.name == name) {
            query.push(QueryMatch { name, value });
        }
    }
    query.sort();
    Ok((method, headers, query))
}

fn redirect(rd: &types::RequestRedirect) -> Result<RouteAction, String> {
    let scheme = match rd.scheme.as_deref() {
        None => None,
        Some("http") => Some(Scheme::Http),
        Some("https") => Some(Scheme::Https),
        Some(s) => return Err(format!("redirect scheme {s:?} is not http or https")),
    };
    let host = match &rd.hostname {
        None => None,
        Some(h) => Some(
            hostname(h)
                .filter(|h| !h.is_wildcard())
                .ok_or("invalid redirect hostname")?,
        ),
    };
    let port = match rd.port {
        None => None,
        Some(p) => Some(
            u16::try_from(p)
                .ok()
                .filter(|p| *p > 0)
                .ok_or("invalid redirect port")?,
        ),
    };
    let path = match &rd.path {
        None => None,
        Some(m) if m.type_ == "ReplaceFullPath" => Some(
            m.replace_full_path
                .as_deref()
                .unwrap_or("/")
                .parse::<HttpPath>()
                .map_err(|_| "invalid redirect path".to_string())?,
        ),
        // Resolved per match by the caller (it replaces the matched prefix).
        Some(m) if m.type_ == "ReplacePrefixMatch" => None,
        Some(m) => {
            return Err(format!(
                "redirect path type {} is not served",
                crate::problem::cut(&m.type_, 40)
            ))
        }
    };
    let status = match rd.status_code.unwrap_or(302) {
        301 => RedirectStatus::MovedPermanently301,
        302 => RedirectStatus::Found302,
        c => return Err(format!("redirect status {c} is not 301 or 302")),
    };
    Ok(RouteAction::Redirect(Redirect {
        scheme,
        host,
        port,
        path,
        replace_prefix: None,
        status,
    }))
}

/// A backendRef as a weighted backend (`Ok(None)`: weight 0), or why it is invalid.
fn backend(
    input: &GatewayInput<'_>,
    b: &types::HttpBackendRef,
    (from_kind, rns, protocol): (&str, &str, &str),
    services: &BTreeMap<(String, String), &Service>,
    slices: &crate::endpoints::SliceIndex<'_>,
    backends: &mut BTreeMap<BackendId, BackendState>,
) -> Result<Option<WeightedBackend>, (&'static str, String)> {
    if !b.group.as_deref().unwrap_or("").is_empty()
        || b.kind.as_deref().unwrap_or("Service") != "Service"
    {
        return Err((
            "InvalidKind",
            format!("backend {} is not a Service", b.name),
        ));
    }
    let ns = b.namespace.as_deref().unwrap_or(rns);
    if ns != rns && !granted(input.grants, from_kind, rns, "Service", ns, &b.name) {
        return Err((
            "RefNotPermitted",
            format!(
                "Service {ns}/{} is in another namespace and no ReferenceGrant allows it",
                b.name
            ),
        ));
    }
    let Some(svc) = services.get(&(ns.to_string(), b.name.clone())) else {
        return Err((
            "BackendNotFound",
            format!("Service {ns}/{} does not exist", b.name),
        ));
    };
    let Some(port) = b.port else {
        return Err((
            "UnsupportedValue",
            format!("backend {ns}/{} has no port", b.name),
        ));
    };
    let sp = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ps| {
            ps.iter()
                .find(|p| p.port == port && p.protocol.as_deref().unwrap_or("TCP") == protocol)
        });
    let Some(sp) = sp else {
        return Err((
            "BackendNotFound",
            format!("Service {ns}/{} has no {protocol} port {port}", b.name),
        ));
    };
    let weight = b.weight.unwrap_or(1);
    if weight == 0 {
        return Ok(None);
    }
    let Ok(service) = ServiceKey::new(ns, &b.name) else {
        return Err(("BackendNotFound", "invalid Service name".into()));
    };
    let Ok(port16) = u16::try_from(port) else {
        return Err(("UnsupportedValue", "port out of range".into()));
    };
    let id = BackendId {
        service,
        port: port16,
    };
    backends.entry(id.clone()).or_insert_with(|| {
        let eps: Vec<Endpoint> = endpoints(
            sp.name.as_deref().unwrap_or(""),
            protocol,
            slices
                .get(&(ns, b.name.as_str()))
                .map(Vec::as_slice)
                .unwrap_or_default(),
        );
        BackendState {
            endpoints: eps,
            stickiness: None,
        }
    });
    Ok(Some(WeightedBackend {
        id,
        weight: u16::try_from(weight.clamp(1, 1_000_000)).unwrap_or(u16::MAX),
    }))
}
