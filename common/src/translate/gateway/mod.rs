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
mod backends;
mod classes;
mod hostnames;
mod listeners;
mod rules;
mod status;

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
pub use attach::selects;
use attach::*;
use backends::*;
pub use classes::{class_pool, our_classes, KnownPools, POOL_PARAMETER};
pub use hostnames::intersect;
use hostnames::*;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use listeners::*;
use rules::*;
pub use status::{Condition, GatewayStatus, ListenerStatus, ParentStatus};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use types::{
    Gateway, GatewayClass, GatewayListener, HttpRoute, L4Kind, L4Route, ParentRef, ReferenceGrant,
};

/// Our GatewayClass `spec.controllerName`.
pub const CONTROLLER: &str = "k8slb.io/gateway-controller";

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
