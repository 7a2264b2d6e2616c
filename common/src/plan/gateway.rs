//! Gateways in the plan. Each Gateway of one of our GatewayClasses is a tenant of the
//! allocator ([`Tenant::Gateway`]), placed like a Service: sticky first (the previous
//! state, then its `status.addresses`), then the addresses it asks for in
//! `spec.addresses` (type `IPAddress`), then the lowest free address of its pool's range,
//! in the order of creation. Its pool is the annotation `loadbalancer/pool` (on the
//! Gateway or in its `spec.infrastructure.annotations`), `default` without one.
//!
//! It holds the ports of its listeners, and of the listeners of the ListenerSets it
//! takes that get their port and hostname (a set listener on a reserved port, or on a
//! port another tenant of a shared address holds, is `PortUnavailable`). As for Ingresses, **ports are
//! sticky**: an existing Gateway claims the ports it served in the previous state (those
//! it still wants); a listener added later on a port that a Service sharing the address
//! by name already holds is `PortUnavailable`, and the Gateway keeps its address.
//!
//! After allocation, [`crate::gateway::translate`] turns the Gateways and their routes
//! into the route model on those addresses; every condition that says something is not
//! served becomes a problem on its object (and so an Event and a log line).

use super::allocate::Allocator;
use super::options::PlanOptions;
use super::problems::Problems;
use super::request::{Request, Tenant};
use crate::annotations::Annotations;
use crate::config::GlobalConfig;
use crate::features::{Feature, Features};
use crate::gateway::types::Gateway;
use crate::gateway::{self, Condition, ConditionReason, ConditionType, GatewayOutput};
use crate::ingress::SecretMeta;
use crate::ipam::parse_ip;
use crate::names::{ObjectKey, PoolName};
use crate::objects::Objects;
use crate::problem::{ObjRef, Problem, Reason};
use crate::state::{GatewayState, Protocol, State};
use std::collections::{BTreeMap, BTreeSet};

/// The annotation that names a Gateway's pool.
const POOL_ANNOTATION: &str = "loadbalancer/pool";

/// The `loadbalancer/*` options a Gateway takes (on itself or its infrastructure).
const GATEWAY_ANNOTATIONS: &[&str] = &["pool", "allow-shared-ip"];

/// Our Gateways, read before allocation.
pub(super) struct Gateways<'a> {
    objs: &'a Objects,
    /// Each Gateway of an accepted class of ours, with its pool as written.
    ours: Vec<(ObjectKey, String, String)>,
    /// The ports each Gateway's listeners want.
    wanted: BTreeMap<ObjectKey, BTreeSet<(Protocol, u16)>>,
    /// What the provider's proxy serves.
    serves: Serves,
    /// The pools that exist.
    pools: BTreeSet<PoolName>,
    /// The ports the LB nodes keep for themselves: a listener on one is
    /// `PortUnavailable`.
    reserved: crate::config::ReservedPorts,
    /// The admin's limits.
    limits: crate::config::Limits,
}

/// What the provider's proxy serves of the Gateway API, where HAProxy and nginx differ
/// (the [`gateway::GatewayInput`] flags of the same names).
#[derive(Debug, Clone, Copy)]
struct Serves {
    /// UDP listeners (nginx; HAProxy does not proxy UDP).
    udp: bool,
    /// RequestMirror (both: nginx's `mirror`, HAProxy's through a Lua action of the
    /// actor's).
    mirror: bool,
    /// A rule's `retry` (HAProxy's L7 retries; nginx only tries another server).
    retry: bool,
    /// On one host, rules that match on more than the path beside a mirror, a split
    /// with backend header edits or another timeout (HAProxy; nginx serves such a host
    /// from one location: [`crate::routes::OneLocation`]).
    conditional_mixes: bool,
    /// `TLS` listeners of both modes on one port (both proxies: internal frontends on
    /// unix sockets behind the passthrough one), once every LB node's actor renders
    /// them ([`Feature::TlsMixed`]).
    tls_mixed: bool,
    /// The provider serves them but not every LB node's actor does yet (version skew).
    tls_mixed_pending: bool,
}

impl Serves {
    /// What `provider` serves, of the optional features only what every LB node's
    /// actor renders (`fleet`).
    fn of(provider: crate::state::Provider, fleet: &Features) -> Serves {
        let haproxy = provider == crate::state::Provider::Haproxy;
        let tls_mixed = true;
        let fleet_mixed = fleet.contains(Feature::TlsMixed);
        Serves {
            udp: !haproxy,
            mirror: true,
            retry: haproxy,
            conditional_mixes: haproxy,
            tls_mixed: tls_mixed && fleet_mixed,
            tls_mixed_pending: tls_mixed && !fleet_mixed,
        }
    }
}

fn key(g: &Gateway) -> Option<ObjectKey> {
    ObjectKey::new(
        g.metadata.namespace.as_deref().unwrap_or("default"),
        g.metadata.name.as_deref()?,
    )
    .ok()
}

fn object(k: &ObjectKey) -> ObjRef {
    ObjRef::Gateway {
        namespace: k.namespace.to_string(),
        name: k.name.to_string(),
    }
}

/// Ports, as the allocator keys them.
type Ports = BTreeSet<(Protocol, u16)>;

/// The ports `listeners` (a Gateway's own and those of the ListenerSets it takes that
/// get through) serve, valid ones only: TCP for HTTP, HTTPS, TLS and TCP listeners, UDP
/// for UDP ones.
fn listener_ports<'l>(
    listeners: impl IntoIterator<Item = &'l gateway::types::GatewayListener>,
) -> BTreeSet<(Protocol, u16)> {
    listeners
        .into_iter()
        .filter_map(|l| {
            let proto = match l.protocol.as_str() {
                "HTTP" | "HTTPS" | "TLS" | "TCP" => Protocol::Tcp,
                "UDP" => Protocol::Udp,
                _ => return None,
            };
            Some((proto, u16::try_from(l.port).ok().filter(|p| *p > 0)?))
        })
        .collect()
}

impl<'a> Gateways<'a> {
    /// Select our Gateways and make one allocation request for each.
    pub fn read(
        cfg: &GlobalConfig,
        (opts, fleet): (&PlanOptions, &Features),
        (objs, owners): (&'a Objects, &crate::tenancy::HostOwners),
        prev: &State,
        problems: &mut Problems,
    ) -> (Self, Vec<Request>) {
        let mut me = Gateways {
            objs,
            ours: Vec::new(),
            wanted: BTreeMap::new(),
            serves: Serves::of(opts.provider, fleet),
            pools: cfg.pools.keys().cloned().collect(),
            reserved: cfg.reserved_ports.clone(),
            limits: cfg.limits,
        };
        let mut requests = Vec::new();
        if objs.gateways.is_empty() {
            return (me, requests);
        }
        // Our classes, with the pool their parameters name (None: default) or why they
        // are refused.
        let ours: BTreeMap<&str, Result<Option<PoolName>, String>> = objs
            .gateway_classes
            .iter()
            .filter(|c| c.spec.controller_name == gateway::CONTROLLER)
            .filter_map(|c| {
                let pool = gateway::class_pool(c, &objs.configmaps, Some(&me.pools));
                Some((c.metadata.name.as_deref()?, pool))
            })
            .collect();
        // The listeners of the sets each Gateway takes that get their port and
        // hostname: its ports as much as its own listeners'.
        let candidates: Vec<&Gateway> = objs
            .gateways
            .iter()
            .filter(|g| ours.contains_key(g.spec.gateway_class_name.as_str()))
            .collect();
        let set_listeners = gateway::taken_set_listeners(
            &candidates,
            &objs.listener_sets,
            &objs.namespaces,
            Some(owners),
            cfg.limits.listener_set_listeners_per_gateway,
        );
        let mut seen = BTreeSet::new();
        for g in &objs.gateways {
            let Some(class) = ours.get(g.spec.gateway_class_name.as_str()) else {
                continue;
            };
            let Some(k) = key(g) else { continue };
            // A class whose parameters broke (a ConfigMap deleted or mistyped) takes
            // nothing from the Gateways it served: they keep their addresses and are
            // still served, and get nothing new until it is fixed (its problem says why).
            let held = class.is_err() && prev.gateways.contains_key(&k);
            if class.is_err() && !held {
                continue;
            }
            if !seen.insert(k.clone()) {
                continue;
            }
            if !opts.provider.has_proxy() {
                problems.insert(Problem::new(
                    object(&k),
                    Reason::NothingToServe,
                    format!(
                        "Gateways need a proxy (haproxy or nginx); this install runs {}, which serves Services only",
                        opts.provider
                    ),
                ));
                continue;
            }
            let class_pool = class.as_ref().ok().and_then(Option::as_ref);
            let own = listener_ports(&g.spec.listeners);
            let sets = listener_ports(set_listeners.get(&k).into_iter().flatten().copied());
            let mut r = request(cfg, (g, &k, (&own, &sets)), class_pool, prev, problems);
            let wanted = own.union(&sets).copied().collect();
            if held {
                r.refused = true;
                r.pools.clear();
                r.pool_text = prev.gateways[&k].pool.clone();
            }
            me.wanted.insert(k.clone(), wanted);
            me.ours.push((k, r.pool_text.clone(), r.uid.clone()));
            requests.push(r);
        }
        (me, requests)
    }

    /// After allocation: the translation on every Gateway's addresses (the routes and
    /// every status), what each Gateway got, and every condition that refuses something
    /// as a problem.
    pub fn build(
        &self,
        alloc: &Allocator,
        owners: &crate::tenancy::HostOwners,
        problems: &mut Problems,
    ) -> (GatewayOutput, BTreeMap<ObjectKey, GatewayState>) {
        let mut unavailable: BTreeMap<ObjectKey, BTreeMap<(Protocol, u16), String>> =
            BTreeMap::new();
        let mut states = BTreeMap::new();
        for (k, pool, uid) in &self.ours {
            let tenant = Tenant::Gateway(k.clone());
            let mut ips = alloc.of(&tenant);
            ips.sort();
            for p in self.wanted[k]
                .iter()
                .filter(|(_, p)| self.reserved.contains(*p))
            {
                unavailable.entry(k.clone()).or_default().insert(
                    *p,
                    format!(
                        "the LB nodes themselves (global config reservedPorts: {})",
                        self.reserved
                    ),
                );
            }
            for ip in &ips {
                let Some(t) = alloc.tenants.get(ip) else {
                    continue;
                };
                for p in &self.wanted[k] {
                    if let Some(holder) = t.ports.get(p) {
                        if holder != &tenant {
                            unavailable
                                .entry(k.clone())
                                .or_default()
                                .insert(*p, holder.to_string());
                        }
                    }
                }
            }
            let held = unavailable.remove(k).unwrap_or_default();
            let of = |proto: Protocol| -> BTreeMap<u16, String> {
                held.iter()
                    .filter(|((p, _), _)| *p == proto)
                    .map(|((_, port), h)| (*port, h.clone()))
                    .collect()
            };
            states.insert(
                k.clone(),
                GatewayState {
                    ips,
                    pool: pool.clone(),
                    uid: uid.clone(),
                    unavailable: of(Protocol::Tcp),
                    unavailable_udp: of(Protocol::Udp),
                },
            );
        }
        if self.objs.gateways.is_empty() && self.objs.gateway_classes.is_empty() {
            return (GatewayOutput::default(), states);
        }
        let out = translate(
            self.objs,
            &states,
            (self.serves, &self.limits),
            (Some(&self.pools), owners),
        );
        if states.is_empty() {
            // No Gateway to serve: only a class of ours that is refused says why (the
            // statuses still say what each object is told).
            let classes = GatewayOutput {
                classes: out.classes.clone(),
                ..Default::default()
            };
            report(&classes, problems);
        } else {
            report(&out, problems);
        }
        (out, states)
    }
}

/// The translation of `objs` on the addresses (and with the unavailable ports) `gateways`
/// gives.
fn translate(
    objs: &Objects,
    gateways: &BTreeMap<ObjectKey, GatewayState>,
    (serves, limits): (Serves, &crate::config::Limits),
    (pools, owners): (gateway::KnownPools<'_>, &crate::tenancy::HostOwners),
) -> GatewayOutput {
    let addresses = gateways
        .iter()
        .map(|(k, g)| (k.clone(), g.ips.clone()))
        .collect();
    let unavailable = gateways
        .iter()
        .map(|(k, g)| {
            let tcp = g.unavailable.iter().map(|(p, h)| ((*p, false), h.clone()));
            let udp = g
                .unavailable_udp
                .iter()
                .map(|(p, h)| ((*p, true), h.clone()));
            (k.clone(), tcp.chain(udp).collect())
        })
        .collect();
    let secrets: Vec<SecretMeta> = objs.secret_metas();
    let mut input = objs.gateway_input(&secrets, &addresses, &unavailable);
    input.serves_udp = serves.udp;
    input.serves_mirror = serves.mirror;
    input.serves_tls_mixed = serves.tls_mixed;
    input.tls_mixed_pending = serves.tls_mixed_pending;
    input.serves_retry = serves.retry;
    input.mixes_conditional_rules = serves.conditional_mixes;
    input.pools = pools;
    input.conditional_rules_per_host = limits.conditional_rules_per_host;
    input.retry_backends_per_namespace = limits.retry_backends_per_namespace;
    input.listener_set_listeners_per_gateway = limits.listener_set_listeners_per_gateway;
    input.mirrors_per_rule = limits.mirrors_per_rule;
    input.host_owners = Some(owners);
    gateway::translate(&input)
}

/// A Gateway's own `loadbalancer/*` annotations, by the shared reader (what it refuses
/// reported on the Gateway), and the pool it asks for: its own annotation, else its
/// infrastructure's (what it asks its generated resources to carry), else its class's
/// parameters, else `default`; true when the pool annotation was refused (then no other
/// pool is taken instead).
fn annotations(
    g: &Gateway,
    k: &ObjectKey,
    class_pool: Option<&PoolName>,
    problems: &mut Problems,
) -> (Annotations, String, bool) {
    let mut issues = Vec::new();
    let own = Annotations::read(
        g.metadata.annotations.as_ref(),
        GATEWAY_ANNOTATIONS,
        &mut issues,
    );
    let infra_map = g.spec.infrastructure.as_ref().map(|i| &i.annotations);
    let infra = Annotations::read(infra_map, GATEWAY_ANNOTATIONS, &mut issues);
    for i in issues {
        // A pool value refused is an invalid pool, as one that does not parse.
        let reason = match i.reason {
            Reason::InvalidAnnotation if i.option == "pool" => Reason::InvalidPool,
            r => r,
        };
        problems.insert(Problem::new(object(k), reason, i.message));
    }
    let pool_text = own
        .get("pool")
        .or_else(|| infra.get("pool"))
        .map(str::to_string)
        .or_else(|| class_pool.map(|p| p.to_string()))
        .unwrap_or_else(|| "default".into());
    let refused = own.refused("pool") || infra.refused("pool");
    (own, pool_text, refused)
}

/// One Gateway's allocation request, for the ports of its own listeners and of its
/// sets' (`ports`). The sets' claim only those they served before: a tenant's new
/// set listener never costs the Gateway its address (a port another tenant of the
/// address holds makes it `PortUnavailable` instead).
fn request(
    cfg: &GlobalConfig,
    (g, k, ports): (&Gateway, &ObjectKey, (&Ports, &Ports)),
    class_pool: Option<&PoolName>,
    prev: &State,
    problems: &mut Problems,
) -> Request {
    let (own, pool_text, mut refused) = annotations(g, k, class_pool, problems);
    let mut pools = Vec::new();
    let mut problem = |reason: Reason, message: String| {
        problems.insert(Problem::new(object(k), reason, message));
    };
    match pool_text.parse::<PoolName>() {
        _ if refused => {}
        Ok(p) if cfg.pools.contains_key(&p) => pools.push(p),
        Ok(p) => {
            let known: Vec<&str> = cfg.pools.keys().map(|k| k.as_str()).collect();
            problem(
                Reason::UnknownPool,
                format!(
                    "pool {p} does not exist (pools: {}); nothing new is allocated",
                    known.join(", ")
                ),
            );
            refused = true;
        }
        Err(e) => {
            problem(
                Reason::InvalidPool,
                format!("{POOL_ANNOTATION}: {e}; nothing new is allocated"),
            );
            refused = true;
        }
    }
    let (statics, bad_address) = static_addresses(g, &mut problem);
    refused |= bad_address;
    if g.spec
        .infrastructure
        .as_ref()
        .and_then(|i| i.parameters_ref.as_ref())
        .is_some()
    {
        // The status says it (Accepted False InvalidParameters; see `report`).
        refused = true;
    }
    if refused {
        // Nothing new for a request refused as written (never a surprise address);
        // what it holds stays (see `allocate`).
        pools.clear();
    }
    let tenant = Tenant::Gateway(k.clone());
    let (own_ports, set_ports) = ports;
    let mut port_keys = sticky_ports(own_ports.clone(), &tenant, prev);
    if tenant.previous_ips(prev).is_some() {
        port_keys.extend(sticky_ports(set_ports.clone(), &tenant, prev));
    }
    Request {
        key: tenant,
        object: object(k),
        uid: g.metadata.uid.clone().unwrap_or_default(),
        created: g.metadata.creation_timestamp.clone(),
        pools,
        pool_text,
        statics,
        status_ips: g
            .status_addresses()
            .into_iter()
            .filter_map(|a| parse_ip(a).ok())
            .collect(),
        ports: vec![],
        port_keys,
        refused,
        scale: 1,
        share_key: own
            .get("allow-shared-ip")
            .filter(|k| !k.is_empty())
            .map(str::to_string),
    }
}

/// The addresses a Gateway asks for (`spec.addresses` of type `IPAddress`); true when one
/// is refused (said through `problem`), and then nothing new is allocated.
fn static_addresses(
    g: &Gateway,
    problem: &mut impl FnMut(Reason, String),
) -> (Vec<std::net::IpAddr>, bool) {
    let mut statics = Vec::new();
    let mut refused = false;
    for a in &g.spec.addresses {
        match a.type_.as_deref() {
            // No value: any address (the pool's next), as without the entry.
            None | Some("IPAddress") if a.value.is_empty() => {}
            None | Some("IPAddress") => match parse_ip(&a.value) {
                Ok(ip) => statics.push(ip),
                Err(e) => {
                    problem(
                        Reason::InvalidIp,
                        format!("spec.addresses: {e}; nothing new is allocated"),
                    );
                    refused = true;
                }
            },
            Some(t) => {
                problem(
                    Reason::UnsupportedAddress,
                    format!(
                        "spec.addresses: type {:?} is not supported (IPAddress is); nothing new is allocated",
                        crate::problem::cut(t, 40)
                    ),
                );
                refused = true;
            }
        }
    }
    (statics, refused)
}

/// The ports an existing Gateway claims: those it wants that it served in the previous
/// state (ports are sticky); a new Gateway claims all it wants.
fn sticky_ports(
    wanted: BTreeSet<(Protocol, u16)>,
    tenant: &Tenant,
    prev: &State,
) -> BTreeSet<(Protocol, u16)> {
    let Some(ips) = tenant.previous_ips(prev) else {
        return wanted;
    };
    let http = prev
        .http
        .listeners
        .iter()
        .filter(|l| ips.contains(&l.ip))
        .map(|l| (Protocol::Tcp, l.port));
    let streams = prev
        .http
        .streams
        .iter()
        .filter(|s| ips.contains(&s.ip))
        .map(|s| {
            let proto = if s.protocol.is_udp() {
                Protocol::Udp
            } else {
                Protocol::Tcp
            };
            (proto, s.port)
        });
    let before: BTreeSet<(Protocol, u16)> = http.chain(streams).collect();
    wanted.intersection(&before).copied().collect()
}

/// The problem a condition that says something is not served makes on `object`, its
/// message after `what`.
fn refusal(object: ObjRef, what: String, c: &Condition) -> Option<Problem> {
    let refusing = match (c.type_, c.reason) {
        // The allocation request reported it already, with the address.
        (_, ConditionReason::UnsupportedAddress) => false,
        (ConditionType::Conflicted, _) => c.status,
        (ConditionType::Accepted | ConditionType::ResolvedRefs, _) => !c.status,
        (ConditionType::Programmed, _) => false,
        // Served as asked (AllowInsecureFallback): the condition is the warning.
        (ConditionType::InsecureFrontendValidationMode, _) => false,
    };
    let reason = c.reason.problem().filter(|_| refusing)?;
    Some(Problem::new(object, reason, format!("{what}{}", c.message)))
}

/// The problems of each ListenerSet, as many as are kept of one object
/// ([`super::MAX_PROBLEMS_PER_OBJECT`], the first in order: none of them explains an
/// address), chosen here: a set of 64 refused listeners, times the sets a tenant may
/// create, would otherwise fill the round's problems before they are capped.
fn set_problems(out: &GatewayOutput, problems: &mut Problems) {
    for (k, st) in &out.listener_sets {
        let obj = ObjRef::ListenerSet {
            namespace: k.namespace.to_string(),
            name: k.name.to_string(),
        };
        let own = st
            .conditions
            .iter()
            .filter_map(|c| refusal(obj.clone(), String::new(), c));
        let of_listeners = st.listeners.iter().flat_map(|l| {
            let what = format!("listener {}: ", l.name);
            let obj = &obj;
            l.conditions
                .iter()
                .filter_map(move |c| refusal(obj.clone(), what.clone(), c))
        });
        let warnings = st
            .warnings
            .iter()
            .map(|(reason, message)| Problem::new(obj.clone(), reason.clone(), message.clone()));
        let mut all: Vec<Problem> = own.chain(of_listeners).chain(warnings).collect();
        all.sort_by(|a, b| (&a.reason, &a.message).cmp(&(&b.reason, &b.message)));
        all.dedup();
        for p in all.into_iter().take(super::MAX_PROBLEMS_PER_OBJECT) {
            problems.insert(p);
        }
    }
}

/// Every condition that says something is not served, as a problem on its object.
fn report(out: &GatewayOutput, problems: &mut Problems) {
    // What is served with a word: its problem, no condition.
    for (k, st) in &out.gateways {
        for (reason, message) in &st.warnings {
            problems.insert(Problem::new(object(k), reason.clone(), message.clone()));
        }
    }
    set_problems(out, problems);
    let mut add = |object: ObjRef, what: String, c: &Condition| {
        if let Some(p) = refusal(object, what, c) {
            problems.insert(p);
        }
    };
    for (name, conds) in &out.classes {
        for c in conds {
            add(
                ObjRef::GatewayClass { name: name.clone() },
                String::new(),
                c,
            );
        }
    }
    for (k, st) in &out.gateways {
        for c in &st.conditions {
            add(object(k), String::new(), c);
        }

        for l in &st.listeners {
            for c in &l.conditions {
                add(object(k), format!("listener {}: ", l.name), c);
            }
        }
    }
    let l4 = out.l4_routes.iter().map(|((kind, k), parents)| {
        let obj = ObjRef::L4Route {
            kind: *kind,
            namespace: k.namespace.to_string(),
            name: k.name.to_string(),
        };
        (obj, parents)
    });
    let http = out.http_routes.iter().map(|(k, parents)| {
        let obj = ObjRef::HttpRoute {
            namespace: k.namespace.to_string(),
            name: k.name.to_string(),
        };
        (obj, parents)
    });
    let grpc = out.grpc_routes.iter().map(|(k, parents)| {
        let obj = ObjRef::GrpcRoute {
            namespace: k.namespace.to_string(),
            name: k.name.to_string(),
        };
        (obj, parents)
    });
    // A policy's conditions are the same for each of its ancestors: one problem each.
    for (k, ancestors) in &out.backend_tls_policies {
        let obj = ObjRef::BackendTlsPolicy {
            namespace: k.namespace.to_string(),
            name: k.name.to_string(),
        };
        for c in ancestors.iter().flat_map(|a| &a.conditions) {
            add(obj.clone(), String::new(), c);
        }
    }
    for (obj, parents) in http.chain(grpc).chain(l4) {
        for p in parents {
            let section = p
                .section_name
                .as_deref()
                .map(|s| format!("/{s}"))
                .unwrap_or_default();
            for c in &p.conditions {
                add(
                    obj.clone(),
                    format!("on {} {}{section}: ", p.kind.as_str(), p.parent),
                    c,
                );
            }
        }
    }
}
