//! The plan: one pure function from (config, cluster objects, previous state) to the whole
//! desired state. No clock, no I/O, no hash order: the same inputs give the same output.
//!
//! Allocation is a global recompute, sticky and ordered:
//!
//! 1. **Sticky first.** Every claimed Service's existing addresses (from the previous state
//!    and from its `status.loadBalancer.ingress`) are honoured, for all Services, before
//!    anything new is handed out. So a restart, a reordering or an unrelated change never
//!    moves an IP, and a new Service can never take an address that an old one holds.
//! 2. **Static requests** (`spec.loadBalancerIP`, annotation `loadbalancer/ips`), in order of
//!    creation time, then namespace/name.
//! 3. **Dynamic**: the lowest free address of the pool's `range`, same order.
//!
//! Release is implicit: a Service that is gone, no longer of type LoadBalancer, of another
//! class, or whose pool or requested IP changed, simply makes no claim on its old address,
//! and each claim is its own (a co-tenant of a shared IP keeps its claim). A request that
//! is refused (an unknown or invalid pool, an invalid IP, an IP outside its pools) is not
//! a change: the Service keeps what it holds, gets nothing new, and a problem says why.
//!
//! Sharing (k8slb's rule): a Service may use an address already in use only by asking for
//! it statically, in the same pool, and only if no (protocol, port) pair clashes; otherwise
//! the later Service gets a `PortConflict` problem and no address while the earlier keeps its
//! own.
//!
//! VRRP: each VIP sits in one VRRP instance of its pool. An instance has all LB nodes as
//! members in priority order; the first is the owner. New VIPs go to an instance owned by
//! the least-loaded node; a VIP stays in its instance for life, so it moves only when its
//! owner leaves (the next member takes over, as VRRP itself already did). VRIDs are kept
//! in the state and never reused while in use.

use crate::config::{GlobalConfig, Pool};
use crate::ipam::{parse_ip, RangeSet};
use crate::names::{NodeName, PortName, ServiceKey};
use crate::objects::Objects;
use crate::state::{
    CertPath, Endpoint, Family, IpMode, LbNode, Member, Mode, PortState, Problem, Protocol,
    ProxyProtocol, ServiceState, State, Stickiness, VipState, VrrpInstance, STATE_VERSION,
};
use k8s_openapi::api::core::v1::{Node, Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

/// Label that excludes a node from external load balancers (Kubernetes well-known label).
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// Label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Priority of an instance's owner; backups get 100, 99, 98, ...
pub const OWNER_PRIORITY: u8 = 200;
pub const FIRST_BACKUP_PRIORITY: u8 = 100;
/// Members of one VRRP instance at most: the owner and 100 backups (priorities 100..=1
/// are distinct). With more LB nodes, the rest do not run that instance; other
/// instances, owned elsewhere, rotate their backups so every node still serves.
pub const MAX_MEMBERS: usize = 1 + FIRST_BACKUP_PRIORITY as usize;

/// Which proxy carries the traffic; defined with the state, which records it.
pub use crate::state::Provider;

/// An equality-based label selector: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelector(Vec<(String, SelOp)>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum SelOp {
    Eq(String),
    Ne(String),
    Exists,
    NotExists,
}

impl std::str::FromStr for NodeSelector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let term = if let Some((k, v)) = part.split_once("!=") {
                (k.trim().to_string(), SelOp::Ne(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k.trim().to_string(), SelOp::Eq(v.trim().to_string()))
            } else if let Some(k) = part.strip_prefix('!') {
                (k.trim().to_string(), SelOp::NotExists)
            } else {
                (part.to_string(), SelOp::Exists)
            };
            if term.0.is_empty() || term.0.contains(char::is_whitespace) {
                return Err(format!("invalid node selector term {part:?}"));
            }
            out.push(term);
        }
        Ok(NodeSelector(out))
    }
}

impl NodeSelector {
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.0.iter().all(|(k, op)| match op {
            SelOp::Eq(v) => get(k) == Some(v),
            SelOp::Ne(v) => get(k) != Some(v),
            SelOp::Exists => get(k).is_some(),
            SelOp::NotExists => get(k).is_none(),
        })
    }
}

impl Default for NodeSelector {
    fn default() -> Self {
        "type=loadBalancer".parse().expect("valid")
    }
}

/// Settings of the plan that come from the watcher's flags rather than the ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlanOptions {
    pub provider: Provider,
    pub node_selector: NodeSelector,
    pub cert_path: CertPath,
    /// k8slb's `VRID_OFFSET`: VRIDs are `offset + 1 ..= 255`.
    pub vrid_offset: u8,
}

/// Compute the whole desired state.
pub fn plan(
    cfg: &GlobalConfig,
    opts: &PlanOptions,
    objs: &Objects,
    previous: Option<&State>,
) -> State {
    let mut problems: BTreeSet<Problem> = objs.problems.iter().cloned().collect();
    let nodes = lb_nodes(&objs.nodes, &opts.node_selector, &mut problems);

    // EndpointSlices by (namespace, Service name).
    let mut slices: HashMap<(&str, &str), Vec<&EndpointSlice>> = HashMap::new();
    for s in &objs.slices {
        let svc = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL));
        if let Some(svc) = svc.filter(|_| s.address_type != "FQDN") {
            let ns = s.metadata.namespace.as_deref().unwrap_or("default");
            slices.entry((ns, svc.as_str())).or_default().push(s);
        }
    }

    // Claimed Services, in allocation order.
    // A Service listed twice (two files) counts once: the first in input order (files
    // are read sorted by path), whatever the creation times of the copies; the copies'
    // own problems are dropped with them.
    let mut requests: Vec<Request> = Vec::with_capacity(objs.services.len());
    let mut seen: std::collections::HashSet<ServiceKey> = Default::default();
    for s in &objs.services {
        let mut own = BTreeSet::new();
        let Some(r) = Request::from_service(s, cfg, opts, &slices, &mut own) else {
            problems.extend(own);
            continue;
        };
        if seen.insert(r.key.clone()) {
            problems.extend(own);
            requests.push(r);
        } else {
            problems.insert(r.problem(
                "DuplicateService",
                "listed more than once; the first copy read is used, the others are ignored".into(),
            ));
        }
    }
    requests.sort_by(|a, b| (&a.created, &a.key).cmp(&(&b.created, &b.key)));

    let mut alloc = Allocator::default();
    let empty = State::empty(cfg.actor_config(&opts.cert_path));
    let prev = previous.unwrap_or(&empty);

    // 0. Services that exist but did not decode keep exactly what they had, first.
    let mut held: BTreeMap<ServiceKey, ServiceState> = BTreeMap::new();
    for key in &objs.held_services {
        if seen.contains(key) || held.contains_key(key) {
            continue;
        }
        let Some(old) = prev.services.get(key) else {
            continue;
        };
        let r = Request {
            key: key.clone(),
            uid: old.uid.clone(),
            created: None,
            pools: vec![],
            pool_text: old.pool.clone(),
            statics: vec![],
            status_ips: vec![],
            ports: vec![],
            port_keys: old.ports.iter().map(|p| (p.protocol, p.port)).collect(),
            refused: true,
        };
        for ip in &old.ips {
            if let Some(pool) = cfg.pools.values().find(|p| p.network.range().contains(*ip)) {
                let _ = alloc.take(*ip, pool, &r);
            }
        }
        let mut kept = old.clone();
        kept.ips = alloc.of(key);
        kept.ips.sort();
        held.insert(key.clone(), kept);
    }

    // 1. Sticky: existing claims of every Service first; the previous state (what we
    //    published) for every Service before any Service's status (what the API server
    //    shows, which lags behind a release). A status address is adopted only while
    //    free or pinned (asked for by name by a tenant, so shareable): a stale status
    //    must never take an address the state gave to another Service, nor make two
    //    dynamic Services share one.
    //    Refused requests come after all valid ones (they keep what is left, never
    //    evicting a valid co-tenant), and adopt a status address only when the previous
    //    state does not know them (a restart without state), never one it released.
    let (valid, refused): (Vec<&Request>, Vec<&Request>) =
        requests.iter().partition(|r| !r.is_refused(cfg));
    let mut order: Vec<(&Request, Vec<IpAddr>, bool)> = Vec::new();
    for group in [&valid, &refused] {
        for &r in group.iter() {
            let held = prev.services.get(&r.key).map(|s| s.ips.clone());
            order.push((r, held.unwrap_or_default(), false));
        }
        for &r in group.iter() {
            let adopt = !r.is_refused(cfg) || !prev.services.contains_key(&r.key);
            let ips = if adopt { r.status_ips.clone() } else { vec![] };
            order.push((r, ips, true));
        }
    }
    for (r, held, only_free) in order {
        for ip in held {
            let mine = alloc.of(&r.key);
            let unpinned = alloc.tenants.get(&ip).is_some_and(|t| !t.pinned);
            if mine.contains(&ip) || (only_free && unpinned) {
                continue;
            }
            // A refused request keeps its addresses while they lie in a pool (the
            // problem says why nothing else changes); a valid one only in its pools.
            let refused = r.is_refused(cfg);
            let pool = if refused {
                cfg.pools.values().find(|p| p.network.range().contains(ip))
            } else {
                r.pool_for(ip, cfg)
            };
            let Some(pool) = pool else {
                continue; // pool changed or gone, or the IP left the pool's network
            };
            if r.has_ip_in(pool, &mine) {
                continue; // one address per pool
            }
            if !refused && !r.statics.contains(&ip) && !r.dynamic_ok(Family::of(&ip), cfg) {
                continue; // the request changed: the old address is released
            }
            // A dynamic address outside an edited range but still inside the pool's
            // network is kept: editing a range must not move a healthy Service.
            let _ = alloc.take(ip, pool, r);
        }
    }
    let mut conflicts: Vec<(&Request, IpAddr)> = Vec::new();
    // 2. Static requests (all of them first, so that a new dynamic Service never takes
    //    an address a newer Service asks for by name in the same plan), then 3. dynamic
    //    ones: the pools of the families no static address covers.
    for r in requests.iter().filter(|r| !r.pools.is_empty()) {
        let mine: Vec<IpAddr> = alloc.of(&r.key);
        for &ip in &r.statics {
            if mine.contains(&ip) {
                continue;
            }
            let Some(pool) = r.pool_for(ip, cfg) else {
                problems.insert(r.problem(
                    "IpOutsidePool",
                    format!(
                        "requested IP {ip} is not inside the network of pool {}",
                        r.pool_text
                    ),
                ));
                continue;
            };
            if r.has_ip_in(pool, &mine) {
                continue;
            }
            if !pool.network.allocatable().contains(ip) {
                // A CIDR network's own address or its IPv4 broadcast: never a VIP.
                problems.insert(r.problem(
                    "IpNotUsable",
                    format!(
                        "requested IP {ip} is the network or broadcast address of pool {}'s network {}",
                        pool.name, pool.network
                    ),
                ));
                continue;
            }
            if r.is_refused(cfg) {
                continue; // reported above or in the request; nothing new for it
            }
            match alloc.take(ip, pool, r) {
                // Named against the final tenants (below), so that the message does not
                // depend on which co-tenant happened to be placed first.
                Err(TakeError::PortConflict { .. }) => conflicts.push((r, ip)),
                Err(e) => {
                    problems.insert(r.problem(e.reason(), e.message(ip)));
                }
                Ok(()) => {}
            }
        }
    }
    for r in &requests {
        for pool in &r.pools {
            let pool = &cfg.pools[pool];
            if !r.dynamic_ok(pool.family(), cfg) {
                continue;
            }
            let mine = alloc.of(&r.key);
            if r.has_ip_in(pool, &mine) {
                continue;
            }
            let within = pool.range.allocatable();
            match alloc.used.first_free(&within) {
                Some(ip) => {
                    alloc.take(ip, pool, r).expect("a free address is free");
                }
                None => {
                    problems.insert(r.problem(
                        "PoolExhausted",
                        format!(
                            "pool {} has no free address left in its range {}",
                            pool.name, pool.range
                        ),
                    ));
                }
            }
        }
    }

    for (r, ip) in conflicts {
        let clash = alloc.tenants.get(&ip).and_then(|t| {
            r.port_keys
                .iter()
                .find_map(|pp| t.ports.get(pp).filter(|o| **o != r.key).map(|o| (pp, o)))
        });
        if let Some(((proto, port), other)) = clash {
            let e = TakeError::PortConflict {
                other: other.clone(),
                proto: *proto,
                port: *port,
            };
            problems.insert(r.problem(e.reason(), e.message(ip)));
        }
    }

    // Services in the state.
    let ip_mode = if opts.provider == Provider::Kubeproxy {
        IpMode::Vip
    } else {
        IpMode::Proxy
    };
    let mut services = held;
    for r in requests {
        let mut ips = alloc.of(&r.key);
        ips.sort();
        services.insert(
            r.key,
            ServiceState {
                ips,
                pool: r.pool_text,
                ip_mode,
                uid: r.uid,
                ports: r.ports,
            },
        );
    }

    let (instances, vips) = vrrp_plan(cfg, opts, &nodes, &alloc, prev, &mut problems);

    let mut config = cfg.actor_config(&opts.cert_path);
    if opts.provider == Provider::Kubeproxy {
        config.haproxy = Default::default();
        config.nginx = Default::default();
    }
    State {
        version: STATE_VERSION,
        provider: Some(opts.provider),
        config,
        nodes,
        instances,
        vips,
        services,
        problems: capped(problems),
    }
}

/// Problems listed per object at most, those that say why a Service has no address
/// first; the rest are counted in one `TooManyProblems`. A Service can
/// carry thousands of bad annotations (256 KiB of them): each problem is an Event, and
/// the state is published to every node.
pub const MAX_PROBLEMS_PER_OBJECT: usize = 10;

/// Reasons that explain a missing or kept-back address: never hidden by the cap.
const ALLOCATION_REASONS: &[&str] = &[
    "UnknownPool",
    "InvalidIp",
    "IpOutsidePool",
    "IpNotUsable",
    "PoolExhausted",
    "PortConflict",
    "InvalidName",
];

fn blocks_allocation(p: &Problem) -> bool {
    ALLOCATION_REASONS.contains(&p.reason.as_str())
        || (p.reason == "InvalidAnnotation" && {
            let m = p.message.to_ascii_lowercase();
            m.contains("loadbalancer/pool")
                || m.contains("loadbalancer/ips")
                || m.contains("loadbalancerip")
        })
}

fn capped(problems: BTreeSet<Problem>) -> Vec<Problem> {
    // Per object: the ones that explain an address first, then the rest, in order.
    let mut per: BTreeMap<String, (Vec<Problem>, Vec<Problem>)> = BTreeMap::new();
    for p in problems {
        let e = per.entry(p.object.clone()).or_default();
        if blocks_allocation(&p) {
            e.0.push(p);
        } else {
            e.1.push(p);
        }
    }
    let mut out = Vec::new();
    for (object, (first, rest)) in per {
        let total = first.len() + rest.len();
        out.extend(first.into_iter().chain(rest).take(MAX_PROBLEMS_PER_OBJECT));
        if total > MAX_PROBLEMS_PER_OBJECT {
            out.push(Problem {
                object,
                reason: "TooManyProblems".into(),
                message: format!(
                    "{} more problems not listed (the first {MAX_PROBLEMS_PER_OBJECT} are)",
                    total - MAX_PROBLEMS_PER_OBJECT
                ),
            });
        }
    }
    out.sort();
    out
}

#[derive(Default)]
struct Allocator {
    used: RangeSet,
    tenants: BTreeMap<IpAddr, Tenancy>,
    // Lookups only (never iterated): hash order cannot leak into the output.
    by_service: HashMap<ServiceKey, Vec<IpAddr>>,
}

struct Tenancy {
    pool: crate::names::PoolName,
    /// (protocol, port) -> the Service using it.
    ports: BTreeMap<(Protocol, u16), ServiceKey>,
    /// Every Service on it (a Service with no ports still holds its IP).
    services: BTreeSet<ServiceKey>,
    /// A tenant asked for this address by name (so others may share it).
    pinned: bool,
}

#[derive(Debug)]
enum TakeError {
    PortConflict {
        other: ServiceKey,
        proto: Protocol,
        port: u16,
    },
    OtherPool {
        pool: String,
    },
}

impl TakeError {
    fn reason(&self) -> &'static str {
        match self {
            TakeError::PortConflict { .. } => "PortConflict",
            TakeError::OtherPool { .. } => "IpInUse",
        }
    }
    fn message(&self, ip: IpAddr) -> String {
        match self {
            TakeError::PortConflict { other, proto, port } => format!(
                "IP {ip} is already used by Service {other} on {}/{port}; a shared IP needs distinct ports",
                proto_name(*proto)
            ),
            TakeError::OtherPool { pool } => {
                format!("IP {ip} is already used from pool {pool}")
            }
        }
    }
}

impl Allocator {
    fn of(&self, key: &ServiceKey) -> Vec<IpAddr> {
        self.by_service.get(key).cloned().unwrap_or_default()
    }

    fn take(&mut self, ip: IpAddr, pool: &Pool, r: &Request) -> Result<(), TakeError> {
        if let Some(t) = self.tenants.get(&ip) {
            if t.pool != pool.name {
                return Err(TakeError::OtherPool {
                    pool: t.pool.to_string(),
                });
            }
            for pp in &r.port_keys {
                if let Some(other) = t.ports.get(pp) {
                    if other != &r.key {
                        return Err(TakeError::PortConflict {
                            other: other.clone(),
                            proto: pp.0,
                            port: pp.1,
                        });
                    }
                }
            }
        }
        let t = self.tenants.entry(ip).or_insert_with(|| Tenancy {
            pool: pool.name.clone(),
            ports: BTreeMap::new(),
            services: BTreeSet::new(),
            pinned: false,
        });
        t.pinned |= r.statics.contains(&ip);
        t.services.insert(r.key.clone());
        for pp in &r.port_keys {
            t.ports.insert(*pp, r.key.clone());
        }
        self.used.insert(ip);
        self.by_service.entry(r.key.clone()).or_default().push(ip);
        Ok(())
    }

    fn services_on(&self, ip: IpAddr) -> Vec<ServiceKey> {
        self.tenants
            .get(&ip)
            .map(|t| t.services.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// One claimed Service, parsed.
struct Request {
    key: ServiceKey,
    uid: String,
    created: Option<Time>,
    /// Pools that exist, in the order written.
    pools: Vec<crate::names::PoolName>,
    pool_text: String,
    statics: Vec<IpAddr>,
    status_ips: Vec<IpAddr>,
    ports: Vec<PortState>,
    port_keys: BTreeSet<(Protocol, u16)>,
    /// The address request as written was refused (an unknown or invalid pool, an
    /// invalid IP, a static IP outside its pools): nothing new is allocated, and what
    /// the Service already holds stays (bad input never loses an allocation).
    refused: bool,
}

impl Request {
    fn problem(&self, reason: &str, message: String) -> Problem {
        Problem {
            object: format!("Service {}", self.key),
            reason: reason.to_string(),
            message,
        }
    }

    /// The pool of this request whose network holds `ip`.
    fn pool_for<'c>(&self, ip: IpAddr, cfg: &'c GlobalConfig) -> Option<&'c Pool> {
        self.pools
            .iter()
            .map(|p| &cfg.pools[p])
            .find(|p| p.network.range().contains(ip))
    }

    /// May this Service hold a dynamic (not requested by name) address of `family`?
    /// Yes without static requests; with some, only for a family none of them covers
    /// (a dual-stack Service pinning one family), and only if every requested address
    /// lies in one of its pools (a broken request never gets a surprise address).
    fn dynamic_ok(&self, family: Family, cfg: &GlobalConfig) -> bool {
        self.statics.is_empty()
            || (!self.statics.iter().any(|ip| Family::of(ip) == family)
                && self
                    .statics
                    .iter()
                    .all(|ip| self.pool_for(*ip, cfg).is_some()))
    }

    /// Refused as written, or a static IP that lies in none of its pools.
    fn is_refused(&self, cfg: &GlobalConfig) -> bool {
        self.refused
            || self
                .statics
                .iter()
                .any(|ip| self.pool_for(*ip, cfg).is_none())
    }

    fn has_ip_in(&self, pool: &Pool, ips: &[IpAddr]) -> bool {
        ips.iter().any(|ip| pool.network.range().contains(*ip))
    }

    fn from_service(
        svc: &Service,
        cfg: &GlobalConfig,
        opts: &PlanOptions,
        slices: &HashMap<(&str, &str), Vec<&EndpointSlice>>,
        problems: &mut BTreeSet<Problem>,
    ) -> Option<Request> {
        let spec = svc.spec.as_ref()?;
        if spec.type_.as_deref() != Some("LoadBalancer") {
            return None;
        }
        match spec.load_balancer_class.as_deref() {
            Some(c) if c == cfg.class => {}
            None if cfg.claim_unclassed => {}
            _ => return None,
        }
        let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
        let name = svc.metadata.name.as_deref().unwrap_or_default();
        let key = match ServiceKey::new(ns, name) {
            Ok(k) => k,
            Err(e) => {
                problems.insert(Problem {
                    object: format!(
                        "Service {}/{}",
                        ns.escape_debug().take(80).collect::<String>(),
                        name.escape_debug().take(80).collect::<String>()
                    ),
                    reason: "InvalidName".into(),
                    message: format!("skipped: {e}"),
                });
                return None;
            }
        };
        let mut req = Request {
            key,
            uid: svc.metadata.uid.clone().unwrap_or_default(),
            created: svc.metadata.creation_timestamp.clone(),
            pools: vec![],
            pool_text: String::new(),
            statics: vec![],
            status_ips: vec![],
            ports: vec![],
            port_keys: BTreeSet::new(),
            refused: false,
        };
        let ann = Annotations::read(svc, &req, problems);

        // Pools.
        let pool_text = ann.get("pool").unwrap_or("default").trim().to_string();
        req.pool_text = pool_text.clone();
        let mut families = BTreeSet::new();
        for p in pool_text.split(',').map(str::trim) {
            match p.parse::<crate::names::PoolName>() {
                Ok(n) if cfg.pools.contains_key(&n) => {
                    let fam = cfg.pools[&n].family();
                    if !families.insert(fam) {
                        problems.insert(req.problem(
                            "InvalidAnnotation",
                            format!(
                                "loadbalancer/pool {pool_text:?}: at most one pool per address family"
                            ),
                        ));
                    } else if !req.pools.contains(&n) {
                        req.pools.push(n);
                    }
                }
                Ok(n) => {
                    problems.insert(req.problem(
                        "UnknownPool",
                        format!(
                            "pool {n} does not exist (pools: {})",
                            cfg.pools
                                .keys()
                                .map(|k| k.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                Err(e) => {
                    problems.insert(
                        req.problem("InvalidAnnotation", format!("loadbalancer/pool: {e}")),
                    );
                }
            }
        }
        if req.pools.len() < pool_text.split(',').count() || ann.1.contains("pool") {
            // A pool is missing: allocate nothing rather than half of what was asked. A
            // refused pool annotation is not "no annotation": never the default pool.
            req.pools.clear();
            req.refused = true;
        }

        // Static IPs: annotation `loadbalancer/ips`, else `spec.loadBalancerIP`.
        let mut statics_text: Vec<(String, &str)> = vec![];
        if let Some(list) = ann.get("ips") {
            for s in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                statics_text.push((s.to_string(), "loadbalancer/ips"));
            }
        }
        if let Some(ip) = spec
            .load_balancer_ip
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            if statics_text.is_empty() {
                statics_text.push((ip.to_string(), "spec.loadBalancerIP"));
            } else if !statics_text
                .iter()
                .any(|(s, _)| parse_ip(s).is_ok() && parse_ip(s).ok() == parse_ip(ip).ok())
            {
                problems.insert(req.problem(
                    "InvalidAnnotation",
                    format!("spec.loadBalancerIP {ip} is not among loadbalancer/ips; using loadbalancer/ips"),
                ));
            }
        }
        if ann.1.contains("ips") {
            // A refused address list never becomes a dynamic request.
            req.pools.clear();
            req.refused = true;
        }
        let mut static_families = BTreeSet::new();
        for (s, from) in statics_text {
            match parse_ip(&s) {
                Ok(ip) => {
                    if !static_families.insert(Family::of(&ip)) {
                        problems.insert(req.problem(
                            "InvalidAnnotation",
                            format!("{from}: at most one IP per address family ({ip} ignored)"),
                        ));
                    } else {
                        req.statics.push(ip);
                    }
                }
                Err(e) => {
                    problems.insert(req.problem("InvalidIp", format!("{from}: {e}")));
                    // A broken request allocates nothing (never a surprise dynamic IP).
                    req.pools.clear();
                    req.refused = true;
                }
            }
        }

        // Existing status (also k8slb's `<ip>.sslip.io` hostname form).
        if let Some(ingress) = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
        {
            for i in ingress {
                let ip =
                    i.ip.as_deref()
                        .and_then(|s| parse_ip(s).ok())
                        .or_else(|| i.hostname.as_deref().and_then(ip_from_sslip));
                if let Some(ip) = ip {
                    req.status_ips.push(ip);
                }
            }
        }

        // Ports.
        let service_slices: &[&EndpointSlice] = slices
            .get(&(req.key.namespace.as_str(), req.key.name.as_str()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let ports = spec.ports.as_deref().unwrap_or_default();
        let tls_on_some = ann.flag("ssl") == Some(true)
            || ports
                .iter()
                .any(|p| p.port == 443 || name_starts(p, "https"));
        for sp in ports {
            if let Some(ps) = port_state(
                sp,
                spec,
                &ann,
                &req,
                opts,
                tls_on_some,
                service_slices,
                problems,
            ) {
                if !req.port_keys.insert((ps.protocol, ps.port)) {
                    problems.insert(req.problem(
                        "DuplicatePort",
                        format!(
                            "port {}/{} is listed twice",
                            proto_name(ps.protocol),
                            ps.port
                        ),
                    ));
                    continue;
                }
                req.ports.push(ps);
            }
        }
        Some(req)
    }
}

fn name_starts(p: &ServicePort, prefix: &str) -> bool {
    p.name
        .as_deref()
        .map(|n| n.to_ascii_lowercase().starts_with(prefix))
        .unwrap_or(false)
}

fn proto_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}

#[allow(clippy::too_many_arguments)]
fn port_state(
    sp: &ServicePort,
    spec: &k8s_openapi::api::core::v1::ServiceSpec,
    ann: &Annotations,
    req: &Request,
    opts: &PlanOptions,
    tls_on_some: bool,
    slices: &[&EndpointSlice],
    problems: &mut BTreeSet<Problem>,
) -> Option<PortState> {
    let protocol = match sp.protocol.as_deref().unwrap_or("TCP") {
        "TCP" => Protocol::Tcp,
        "UDP" => Protocol::Udp,
        "SCTP" => Protocol::Sctp,
        other => {
            problems.insert(req.problem(
                "UnsupportedProtocol",
                format!(
                    "port {}: protocol {:?} is not TCP, UDP or SCTP",
                    sp.port,
                    other.escape_debug().take(20).collect::<String>()
                ),
            ));
            return None;
        }
    };
    let Ok(port) = u16::try_from(sp.port) else {
        problems.insert(req.problem("InvalidPort", format!("port {} is out of range", sp.port)));
        return None;
    };
    if port == 0 {
        problems.insert(req.problem("InvalidPort", "port 0 is not a port".into()));
        return None;
    }
    let name = match sp.name.as_deref().filter(|n| !n.is_empty()) {
        None => None,
        Some(n) => match n.parse::<PortName>() {
            Ok(n) => Some(n),
            Err(e) => {
                problems.insert(req.problem("InvalidName", format!("port {port}: {e}")));
                None
            }
        },
    };
    let unsupported = match (opts.provider, protocol) {
        (Provider::Haproxy, Protocol::Udp) => {
            Some("HAProxy cannot proxy UDP; use the nginx or kubeproxy provider")
        }
        (Provider::Haproxy | Provider::Nginx, Protocol::Sctp) => {
            Some("SCTP is only carried by the kubeproxy provider")
        }
        _ => None,
    };
    if let Some(why) = unsupported {
        problems.insert(req.problem(
            "UnsupportedProtocol",
            format!("port {}/{port} is not served: {why}", proto_name(protocol)),
        ));
    }
    let target_num = match &sp.target_port {
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)) => Some(*n),
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s)) => {
            s.parse::<i32>().ok()
        }
        None => Some(sp.port),
    };
    let is_tcp = protocol == Protocol::Tcp;

    // Mode (k8slb): http if asked, or port/targetPort 80/443, or a port named http*; tcp
    // if asked (`tcp` or k8slb's `false`).
    let mode = match ann.get_lc("mode").as_deref() {
        _ if !is_tcp => Mode::Tcp,
        Some("http") => Mode::Http,
        Some("tcp") | Some("false") => Mode::Tcp,
        _ if matches!(port, 80 | 443)
            || matches!(target_num, Some(80 | 443))
            || name_starts(sp, "http") =>
        {
            Mode::Http
        }
        _ => Mode::Tcp,
    };
    // TLS termination (k8slb README): public port 443, a port named https*, or ssl=true;
    // ssl=false turns it off.
    let tls = is_tcp
        && match ann.flag("ssl") {
            Some(false) => false,
            Some(true) => true,
            None => port == 443 || name_starts(sp, "https"),
        }
        && opts.provider != Provider::Kubeproxy;
    if opts.provider == Provider::Kubeproxy && ann.flag("ssl") == Some(true) {
        problems.insert(req.problem(
            "UnsupportedAnnotation",
            "loadbalancer/ssl: the kubeproxy provider cannot terminate TLS".into(),
        ));
    }
    let redirect = is_tcp
        && mode == Mode::Http
        && !tls
        && tls_on_some
        && ann.flag("ssl") != Some(false)
        && ann.flag("sslredirect") != Some(false);
    let backend_tls = match ann.flag("sslbackend") {
        Some(b) => b,
        None => target_num == Some(443),
    } && is_tcp;
    let check = ann.flag("nocheck") != Some(true);

    let mut stickiness = Stickiness::None;
    let mut stickiness_timeout_s = 10800;
    if spec.session_affinity.as_deref() == Some("ClientIP") {
        stickiness = Stickiness::Source;
        if let Some(t) = spec
            .session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
        {
            stickiness_timeout_s = t.clamp(1, 86400) as u32;
        }
    }
    match ann.get_lc("stickiness").as_deref() {
        None | Some("") => {}
        Some("none") => stickiness = Stickiness::None,
        Some("source") | Some("clientip") => stickiness = Stickiness::Source,
        Some("cookie") if mode == Mode::Http => stickiness = Stickiness::Cookie,
        Some("cookie") => {
            problems.insert(req.problem(
                "InvalidAnnotation",
                format!("loadbalancer/stickiness: cookie needs http mode; port {port} uses source stickiness"),
            ));
            stickiness = Stickiness::Source;
        }
        Some(other) => {
            problems.insert(req.problem(
                "InvalidAnnotation",
                format!(
                    "loadbalancer/stickiness: {:?} is not none, source or cookie",
                    short(other)
                ),
            ));
        }
    }
    let proxy_protocol = match ann.get_lc("proxy-protocol").as_deref() {
        None | Some("") | Some("none") | Some("false") => None,
        Some("v1") | Some("1") => Some(ProxyProtocol::V1),
        Some("v2") | Some("2") => Some(ProxyProtocol::V2),
        Some(other) => {
            problems.insert(req.problem(
                "InvalidAnnotation",
                format!(
                    "loadbalancer/proxy-protocol: {:?} is not v1 or v2",
                    short(other)
                ),
            ));
            None
        }
    };
    let mut source_ranges = BTreeSet::new();
    for s in spec
        .load_balancer_source_ranges
        .as_deref()
        .unwrap_or_default()
    {
        match parse_cidr(s) {
            Some(n) => {
                source_ranges.insert(n);
            }
            None => {
                problems.insert(req.problem(
                    "InvalidSourceRange",
                    format!(
                        "spec.loadBalancerSourceRanges: {:?} is not a CIDR; the Service accepts no client until it is fixed",
                        short(s)
                    ),
                ));
                // Fail closed: an unparsable allow-list must not open the port to all.
                source_ranges.insert("255.255.255.255/32".parse().expect("valid"));
            }
        }
    }

    Some(PortState {
        name: name.clone(),
        protocol,
        port,
        mode,
        tls,
        cert: tls
            .then(|| req.pools.first().cloned())
            .flatten()
            .or_else(|| {
                if tls {
                    req.pool_text
                        .split(',')
                        .next()
                        .and_then(|p| p.trim().parse().ok())
                } else {
                    None
                }
            }),
        redirect,
        backend_tls,
        check,
        stickiness,
        stickiness_timeout_s,
        proxy_protocol,
        source_ranges: source_ranges.into_iter().collect(),
        endpoints: endpoints(name.as_ref(), protocol, slices),
    })
}

/// Backends of one Service port from its EndpointSlices: the slice port with the Service
/// port's name (how the EndpointSlice controller resolves named and numbered targetPorts),
/// ready endpoints, plus terminating-but-serving ones as draining.
fn endpoints(
    name: Option<&PortName>,
    protocol: Protocol,
    slices: &[&EndpointSlice],
) -> Vec<Endpoint> {
    let want = name.map(PortName::as_str).unwrap_or("");
    let mut best: BTreeMap<(IpAddr, u16), bool> = BTreeMap::new(); // -> draining
    for s in slices {
        let Some(sp) = s.ports.as_deref().unwrap_or_default().iter().find(|p| {
            p.name.as_deref().unwrap_or("") == want
                && p.protocol.as_deref().unwrap_or("TCP") == proto_name(protocol)
        }) else {
            continue;
        };
        let Some(port) = sp
            .port
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
        else {
            continue;
        };
        for ep in &s.endpoints {
            let c = ep.conditions.as_ref();
            let ready = c.and_then(|c| c.ready).unwrap_or(true);
            let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
            let serving = c.and_then(|c| c.serving).unwrap_or(ready);
            let draining = if ready && !terminating {
                false
            } else if terminating && serving {
                true
            } else {
                continue;
            };
            for a in &ep.addresses {
                if let Ok(ip) = a.parse::<IpAddr>() {
                    let e = best.entry((ip, port)).or_insert(draining);
                    *e = *e && draining;
                }
            }
        }
    }
    best.into_iter()
        .map(|((ip, port), draining)| Endpoint { ip, port, draining })
        .collect()
}

fn short(s: &str) -> String {
    s.escape_debug().take(64).collect()
}

/// A CIDR for `loadBalancerSourceRanges`; a bare address is a host route; host bits are
/// cleared (`10.0.0.1/8` -> `10.0.0.0/8`).
fn parse_cidr(s: &str) -> Option<ipnet::IpNet> {
    let s = s.trim();
    if let Ok(n) = s.parse::<ipnet::IpNet>() {
        return Some(n.trunc());
    }
    parse_ip(s).ok().map(ipnet::IpNet::from)
}

/// k8slb's status hostname `<ip>.sslip.io` (IPv6 with '-' for ':').
fn ip_from_sslip(h: &str) -> Option<IpAddr> {
    let stem = h.strip_suffix(".sslip.io")?;
    parse_ip(stem)
        .ok()
        .or_else(|| parse_ip(&stem.replace('-', ":")).ok())
}

/// The `loadbalancer/*` annotations, keys matched case-insensitively (k8slb's README
/// writes `loadBalancer/pool`), values trimmed.
/// The second set holds the options whose value was refused (so ignored).
struct Annotations(BTreeMap<String, String>, BTreeSet<String>);

const KNOWN_ANNOTATIONS: &[&str] = &[
    "pool",
    "ips",
    "ssl",
    "mode",
    "sslbackend",
    "sslredirect",
    "nocheck",
    "stickiness",
    "proxy-protocol",
];

impl Annotations {
    fn read(svc: &Service, req: &Request, problems: &mut BTreeSet<Problem>) -> Annotations {
        let mut out: BTreeMap<String, String> = BTreeMap::new();
        let mut rejected = BTreeSet::new();
        for (k, v) in svc.metadata.annotations.iter().flatten() {
            let lk = k.to_ascii_lowercase();
            let Some(opt) = lk.strip_prefix("loadbalancer/") else {
                continue;
            };
            if !KNOWN_ANNOTATIONS.contains(&opt) {
                problems.insert(req.problem(
                    "UnknownAnnotation",
                    format!(
                        "annotation {:?} is not one of loadbalancer/{{{}}}; ignored",
                        short(k),
                        KNOWN_ANNOTATIONS.join(",")
                    ),
                ));
                continue;
            }
            // Trimmed first: a YAML block scalar (`pool: |`) ends with a newline.
            let v = v.trim();
            if v.len() > 1024 || v.chars().any(char::is_control) {
                problems.insert(req.problem(
                    "InvalidAnnotation",
                    format!("annotation {k}: value {:?} is too long or holds control characters; ignored", short(v)),
                ));
                rejected.insert(opt.to_string());
                continue;
            }
            let v = v.to_string();
            if let Some(prev) = out.get(opt) {
                if prev != &v {
                    problems.insert(req.problem(
                        "InvalidAnnotation",
                        format!("annotation loadbalancer/{opt} is given twice with different case and values; using {prev:?}"),
                    ));
                }
                continue;
            }
            out.insert(opt.to_string(), v);
        }
        let a = Annotations(out, rejected);
        for f in ["ssl", "sslbackend", "sslredirect", "nocheck"] {
            if let Some(v) = a.get(f) {
                if !v.is_empty()
                    && !v.eq_ignore_ascii_case("true")
                    && !v.eq_ignore_ascii_case("false")
                {
                    problems.insert(req.problem(
                        "InvalidAnnotation",
                        format!(
                            "loadbalancer/{f}: {:?} is not true or false; ignored",
                            short(v)
                        ),
                    ));
                }
            }
        }
        if let Some(m) = a.get_lc("mode") {
            if !["", "http", "tcp", "false", "auto"].contains(&m.as_str()) {
                problems.insert(req.problem(
                    "InvalidAnnotation",
                    format!(
                        "loadbalancer/mode: {:?} is not http or tcp; using automatic mode",
                        short(&m)
                    ),
                ));
            }
        }
        a
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    fn get_lc(&self, k: &str) -> Option<String> {
        self.get(k).map(str::to_ascii_lowercase)
    }

    /// true / false (case-insensitive); anything else (blank included) is "automatic".
    fn flag(&self, k: &str) -> Option<bool> {
        match self.get_lc(k).as_deref() {
            Some("true") => Some(true),
            Some("false") => Some(false),
            _ => None,
        }
    }
}

/// LB nodes: selected, Ready, not excluded.
fn lb_nodes(
    nodes: &[Node],
    sel: &NodeSelector,
    problems: &mut BTreeSet<Problem>,
) -> BTreeMap<NodeName, LbNode> {
    let mut out = BTreeMap::new();
    for n in nodes {
        let labels = n.metadata.labels.as_ref();
        if !sel.matches(labels) || labels.is_some_and(|l| l.contains_key(EXCLUDE_LABEL)) {
            continue;
        }
        let raw = n.metadata.name.as_deref().unwrap_or_default();
        let Ok(name) = raw.parse::<NodeName>() else {
            problems.insert(Problem {
                object: format!("Node {}", short(raw)),
                reason: "InvalidName".into(),
                message: "skipped: not a valid node name".into(),
            });
            continue;
        };
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if !ready {
            continue;
        }
        let mut addresses: Vec<IpAddr> = Vec::new();
        for kind in ["InternalIP", "ExternalIP"] {
            for a in n
                .status
                .as_ref()
                .and_then(|s| s.addresses.as_ref())
                .into_iter()
                .flatten()
                .filter(|a| a.type_ == kind)
            {
                if let Ok(ip) = a.address.parse::<IpAddr>() {
                    if !addresses.contains(&ip) {
                        addresses.push(ip);
                    }
                }
            }
        }
        out.insert(name, LbNode { addresses });
    }
    out
}

struct Inst {
    vrid: u8,
    pool: crate::names::PoolName,
    family: Family,
    members: Vec<NodeName>,
    vips: Vec<IpAddr>,
}

fn vrrp_plan(
    cfg: &GlobalConfig,
    opts: &PlanOptions,
    nodes: &BTreeMap<NodeName, LbNode>,
    alloc: &Allocator,
    prev: &State,
    problems: &mut BTreeSet<Problem>,
) -> (Vec<VrrpInstance>, BTreeMap<IpAddr, VipState>) {
    // Keep the previous instances whose pool still exists, with members that are still
    // LB nodes (order kept: when the owner leaves, the next member becomes the owner), and
    // new LB nodes appended as the lowest backups.
    // A previous state is input too (a file, a ConfigMap): a VRID or a member seen twice
    // is kept once, so that VRIDs stay unique and each member has one priority.
    let mut insts: Vec<Inst> = Vec::new();
    let mut prev_vrids = BTreeSet::new();
    for pi in &prev.instances {
        let Some(pool) = cfg.pools.get(&pi.pool) else {
            continue;
        };
        if pool.family() != pi.family || pi.vrid <= opts.vrid_offset {
            continue;
        }
        if !prev_vrids.insert(pi.vrid) {
            continue;
        }
        let mut seen = BTreeSet::new();
        let mut members: Vec<NodeName> = pi
            .members
            .iter()
            .map(|m| m.node.clone())
            .filter(|n| nodes.contains_key(n) && seen.insert(n.clone()))
            .collect();
        if members.is_empty() {
            continue;
        }
        for n in nodes.keys() {
            if !members.contains(n) {
                members.push(n.clone());
            }
        }
        members.truncate(MAX_MEMBERS);
        insts.push(Inst {
            vrid: pi.vrid,
            pool: pi.pool.clone(),
            family: pi.family,
            members,
            vips: vec![],
        });
    }

    let mut vips = BTreeMap::new();
    let mut orphans = Vec::new();
    for (ip, t) in &alloc.tenants {
        let kept = prev
            .vips
            .get(ip)
            .filter(|v| v.pool == t.pool)
            .and_then(|v| {
                insts
                    .iter()
                    .position(|i| i.vrid == v.vrid && i.pool == t.pool)
            });
        match kept {
            Some(i) => insts[i].vips.push(*ip),
            None => orphans.push(*ip),
        }
    }
    if !orphans.is_empty() && nodes.is_empty() {
        problems.insert(Problem {
            object: "Config k8slb".into(),
            reason: "NoLoadBalancerNodes".into(),
            message: format!(
                "{} VIP(s) are allocated but no Ready node matches the node selector: label nodes with it (e.g. kubectl label nodes <name> type=loadBalancer)",
                orphans.len()
            ),
        });
    }
    for ip in orphans {
        let pool = &alloc.tenants[&ip].pool;
        if nodes.is_empty() {
            vips.insert(
                ip,
                VipState {
                    pool: pool.clone(),
                    vrid: 0,
                    owner: None,
                    services: alloc.services_on(ip),
                },
            );
            continue;
        }
        // Least-loaded node: fewest VIPs of this pool, then fewest VIPs, then name.
        let load = |n: &NodeName, same_pool: bool| -> usize {
            insts
                .iter()
                .filter(|i| i.members.first() == Some(n) && (!same_pool || &i.pool == pool))
                .map(|i| i.vips.len())
                .sum()
        };
        let owner = nodes
            .keys()
            .min_by_key(|n| (load(n, true), load(n, false), (*n).clone()))
            .expect("nodes is not empty")
            .clone();
        let existing = insts
            .iter()
            .position(|i| &i.pool == pool && i.members.first() == Some(&owner));
        let idx = match existing {
            Some(i) => i,
            None => {
                let used: BTreeSet<u8> = insts.iter().map(|i| i.vrid).collect();
                let Some(vrid) =
                    (opts.vrid_offset.saturating_add(1)..=255).find(|v| !used.contains(v))
                else {
                    problems.insert(Problem {
                        object: "Config k8slb".into(),
                        reason: "VridExhausted".into(),
                        message: format!(
                            "no free VRRP virtual_router_id in {}..=255 (VRID_OFFSET {}); VIP {ip} is not announced",
                            opts.vrid_offset as u16 + 1,
                            opts.vrid_offset
                        ),
                    });
                    vips.insert(
                        ip,
                        VipState {
                            pool: pool.clone(),
                            vrid: 0,
                            owner: None,
                            services: alloc.services_on(ip),
                        },
                    );
                    continue;
                };
                // Backups rotate after the owner so that failovers spread out.
                let names: Vec<&NodeName> = nodes.keys().collect();
                let at = names
                    .iter()
                    .position(|n| **n == owner)
                    .expect("owner is a node");
                let members = names[at..]
                    .iter()
                    .chain(names[..at].iter())
                    .take(MAX_MEMBERS)
                    .map(|n| (*n).clone())
                    .collect();
                insts.push(Inst {
                    vrid,
                    pool: pool.clone(),
                    family: cfg.pools[pool].family(),
                    members,
                    vips: vec![],
                });
                insts.len() - 1
            }
        };
        insts[idx].vips.push(ip);
    }

    insts.retain(|i| !i.vips.is_empty());
    insts.sort_by_key(|i| i.vrid);
    let mut out = Vec::with_capacity(insts.len());
    for mut i in insts {
        i.vips.sort();
        for ip in &i.vips {
            vips.insert(
                *ip,
                VipState {
                    pool: i.pool.clone(),
                    vrid: i.vrid,
                    owner: i.members.first().cloned(),
                    services: alloc.services_on(*ip),
                },
            );
        }
        out.push(VrrpInstance {
            vrid: i.vrid,
            name: format!("k8slb_{}_{}", i.pool, i.vrid),
            pool: i.pool,
            family: i.family,
            members: i
                .members
                .into_iter()
                .enumerate()
                .map(|(k, node)| Member {
                    node,
                    priority: if k == 0 {
                        OWNER_PRIORITY
                    } else {
                        // k <= MAX_MEMBERS - 1 = FIRST_BACKUP_PRIORITY: 100, 99, .., 1.
                        FIRST_BACKUP_PRIORITY - (k - 1) as u8
                    },
                })
                .collect(),
            vips: i.vips,
        });
    }
    (out, vips)
}
