//! Claimed Services, parsed into requests: which pools, which addresses by name, which
//! addresses the status shows, which ports. Every refusal is a problem here; nothing after
//! this reads a Service.

use super::annotations::Annotations;
use super::options::PlanOptions;
use super::ports::{port_state, proto_name, tls_on_some, PortContext, SliceIndex};
use super::problems::Problems;
use crate::config::{GlobalConfig, Pool};
use crate::ipam::parse_ip;
use crate::names::{ObjectKey, PoolName, ServiceKey};
use crate::objects::Objects;
use crate::problem::{ObjRef, Problem, Reason};
use crate::state::{Family, PortState, Protocol, State};
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::{BTreeSet, HashSet};
use std::net::IpAddr;

/// Who holds addresses: a Service, or the Ingresses of a pool (which share that pool's
/// ingress VIP and claim its listener ports together).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Tenant {
    Service(ServiceKey),
    Ingress(PoolName),
    /// A Gateway: its listeners' ports.
    Gateway(ObjectKey),
}

impl std::fmt::Display for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tenant::Service(k) => write!(f, "Service {k}"),
            Tenant::Ingress(p) => write!(f, "the Ingresses of pool {p}"),
            Tenant::Gateway(k) => write!(f, "Gateway {k}"),
        }
    }
}

impl Tenant {
    /// The namespace of the tenant (the Ingresses of a pool are the admin's: none).
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Tenant::Service(k) => Some(k.namespace.as_str()),
            Tenant::Gateway(k) => Some(k.namespace.as_str()),
            Tenant::Ingress(_) => None,
        }
    }

    /// The addresses the previous state gave this tenant.
    pub fn previous_ips(&self, prev: &State) -> Option<Vec<IpAddr>> {
        match self {
            Tenant::Service(k) => prev.services.get(k).map(|s| s.ips.clone()),
            Tenant::Ingress(pool) => {
                let ips: Vec<IpAddr> = prev
                    .vips
                    .iter()
                    .filter(|(_, v)| v.ingress && &v.pool == pool)
                    .map(|(ip, _)| *ip)
                    .collect();
                (!ips.is_empty()).then_some(ips)
            }
            Tenant::Gateway(k) => prev.gateways.get(k).map(|g| g.ips.clone()),
        }
    }
}

/// One claimed Service (or the Ingresses of a pool), parsed.
pub(super) struct Request {
    pub key: Tenant,
    /// What problems are about.
    pub object: ObjRef,
    pub uid: String,
    pub created: Option<Time>,
    /// Pools that exist, in the order written.
    pub pools: Vec<PoolName>,
    pub pool_text: String,
    pub statics: Vec<IpAddr>,
    pub status_ips: Vec<IpAddr>,
    pub ports: Vec<PortState>,
    pub port_keys: BTreeSet<(Protocol, u16)>,
    /// The address request as written was refused (an unknown or invalid pool, an
    /// invalid IP, a static IP outside its pools): nothing new is allocated, and what
    /// the Service already holds stays (bad input never loses an allocation).
    pub refused: bool,
    /// How many addresses per pool (`loadbalancer/scale`, dynamic addresses only).
    pub scale: u8,
    /// `loadbalancer/allow-shared-ip`: the tenants that carry the same key may share an
    /// address (see `allocate::Allocator::may_join`).
    pub share_key: Option<String>,
}

/// The claimed Services in allocation order (creation time, then namespace/name), and
/// the keys of all of them.
///
/// A Service listed twice (two files) counts once: the first in input order (files are
/// read sorted by path), whatever the creation times of the copies; the copies' own
/// problems are dropped with them.
pub(super) fn requests(
    objs: &Objects,
    cfg: &GlobalConfig,
    opts: &PlanOptions,
    slices: &SliceIndex,
    problems: &mut Problems,
) -> (Vec<Request>, HashSet<ServiceKey>) {
    let mut requests: Vec<Request> = Vec::with_capacity(objs.services.len());
    let mut seen: HashSet<ServiceKey> = HashSet::new();
    for s in &objs.services {
        let mut own = Problems::default();
        let Some(r) = Request::from_service(s, cfg, opts, slices, &mut own) else {
            problems.absorb(own);
            continue;
        };
        let Tenant::Service(key) = &r.key else {
            unreachable!("a Service's request")
        };
        if seen.insert(key.clone()) {
            problems.absorb(own);
            requests.push(r);
        } else {
            problems.insert(r.problem(
                Reason::DuplicateService,
                "listed more than once; the first copy read is used, the others are ignored".into(),
            ));
        }
    }
    requests.sort_by(|a, b| (&a.created, &a.key).cmp(&(&b.created, &b.key)));
    (requests, seen)
}

/// The spec of a Service this controller claims: type LoadBalancer, and our class (or
/// none, if unclassed Services are ours).
fn claimed<'s>(svc: &'s Service, cfg: &GlobalConfig) -> Option<&'s ServiceSpec> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return None;
    }
    match spec.load_balancer_class.as_deref() {
        Some(c) if c == cfg.class => Some(spec),
        None if cfg.claim_unclassed => Some(spec),
        _ => None,
    }
}

impl Request {
    pub fn problem(&self, reason: Reason, message: String) -> Problem {
        Problem::new(self.object.clone(), reason, message)
    }

    /// The pool of this request whose network holds `ip`.
    pub fn pool_for<'c>(&self, ip: IpAddr, cfg: &'c GlobalConfig) -> Option<&'c Pool> {
        self.pools
            .iter()
            .map(|p| &cfg.pools[p])
            .find(|p| p.network.range().contains(ip))
    }

    /// May this Service hold a dynamic (not requested by name) address of `family`?
    /// Yes without static requests; with some, only for a family none of them covers
    /// (a dual-stack Service pinning one family), and only if every requested address
    /// lies in one of its pools (a broken request never gets a surprise address).
    pub fn dynamic_ok(&self, family: Family, cfg: &GlobalConfig) -> bool {
        self.statics.is_empty()
            || (!self.statics.iter().any(|ip| Family::of(ip) == family)
                && self
                    .statics
                    .iter()
                    .all(|ip| self.pool_for(*ip, cfg).is_some()))
    }

    /// Refused as written, or a static IP that lies in none of its pools.
    pub fn is_refused(&self, cfg: &GlobalConfig) -> bool {
        self.refused
            || self
                .statics
                .iter()
                .any(|ip| self.pool_for(*ip, cfg).is_none())
    }

    pub fn has_ip_in(&self, pool: &Pool, ips: &[IpAddr]) -> bool {
        ips.iter().any(|ip| pool.network.range().contains(*ip))
    }

    /// Holds as many addresses of `pool` as it asks for (one, or its scale).
    pub fn has_all_in(&self, pool: &Pool, ips: &[IpAddr]) -> bool {
        let n = ips
            .iter()
            .filter(|ip| pool.network.range().contains(**ip))
            .count();
        n >= usize::from(self.scale.max(1))
    }

    /// A request that asks for nothing: a Service held as it was.
    pub fn empty(key: ServiceKey, uid: String, created: Option<Time>) -> Request {
        Request {
            object: ObjRef::Service(key.clone()),
            key: Tenant::Service(key),
            uid,
            created,
            pools: vec![],
            pool_text: String::new(),
            statics: vec![],
            status_ips: vec![],
            ports: vec![],
            port_keys: BTreeSet::new(),
            refused: false,
            scale: 1,
            share_key: None,
        }
    }

    /// The request of a Service, if we claim it.
    fn from_service(
        svc: &Service,
        cfg: &GlobalConfig,
        opts: &PlanOptions,
        slices: &SliceIndex,
        problems: &mut Problems,
    ) -> Option<Request> {
        let spec = claimed(svc, cfg)?;
        let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
        let name = svc.metadata.name.as_deref().unwrap_or_default();
        let key = match ServiceKey::new(ns, name) {
            Ok(k) => k,
            Err(e) => {
                problems.insert(Problem::new(
                    ObjRef::service(ns, name),
                    Reason::InvalidName,
                    format!("skipped: {e}"),
                ));
                return None;
            }
        };
        let ann = super::annotations::read(svc, &key, problems);
        let mut req = Request::empty(
            key,
            svc.metadata.uid.clone().unwrap_or_default(),
            svc.metadata.creation_timestamp.clone(),
        );
        req.read_pools(&ann, cfg, problems);
        req.read_statics(&ann, spec, problems);
        req.read_status(svc);
        req.read_scale(&ann, problems);
        req.check_max_scale(cfg, problems);
        req.share_key = ann
            .get("allow-shared-ip")
            .filter(|k| !k.is_empty())
            .map(str::to_string);
        let service_slices: &[&EndpointSlice] = slices
            .get(&(ns, name))
            .map(Vec::as_slice)
            .unwrap_or_default();
        req.read_ports(spec, &ann, cfg, opts, service_slices, problems);
        Some(req)
    }

    /// `loadbalancer/pool` (default `default`): at most one pool per family, all known,
    /// or none at all (never half of what was asked, never the default instead).
    /// `loadbalancer/scale`: N dynamic addresses per pool. Addresses asked for by name
    /// are exactly those; scale does not add to them.
    fn read_scale(&mut self, ann: &Annotations, problems: &mut Problems) {
        let Some(v) = ann.get("scale") else { return };
        match crate::scale::parse(v) {
            Ok(n) if n > 1 && !self.statics.is_empty() => problems.insert(self.problem(
                Reason::InvalidAnnotation,
                format!("loadbalancer/scale: {n} applies to addresses allocated from the pool, not to addresses asked for by name; ignored"),
            )),
            Ok(n) => self.scale = n,
            Err(message) => problems.insert(self.problem(Reason::InvalidAnnotation, message)),
        }
    }

    /// `loadbalancer/scale` beyond a pool's `maxScale`: nothing new for this request
    /// (what it holds stays: a quota lowered later never takes addresses away).
    fn check_max_scale(&mut self, cfg: &GlobalConfig, problems: &mut Problems) {
        let over = self
            .pools
            .iter()
            .map(|p| (p.clone(), cfg.pools[p].max_scale))
            .find(|(_, max)| self.scale > *max);
        if let Some((p, max)) = over {
            problems.insert_blocking(self.problem(
                Reason::QuotaExceeded,
                format!(
                    "loadbalancer/scale: {} is more than pool {p} allows ({max}, its maxScale); nothing new is allocated",
                    self.scale
                ),
            ));
            self.refuse();
        }
    }

    fn read_pools(&mut self, ann: &Annotations, cfg: &GlobalConfig, problems: &mut Problems) {
        let pool_text = ann.get("pool").unwrap_or("default").trim().to_string();
        self.pool_text = pool_text.clone();
        let mut families = BTreeSet::new();
        for p in pool_text.split(',').map(str::trim) {
            match p.parse::<PoolName>() {
                Ok(n) if cfg.pools.contains_key(&n) => {
                    let fam = cfg.pools[&n].family();
                    if !families.insert(fam) {
                        problems.insert_blocking(self.problem(
                            Reason::InvalidAnnotation,
                            format!(
                                "loadbalancer/pool {pool_text:?}: at most one pool per address family"
                            ),
                        ));
                    } else if !self.pools.contains(&n) {
                        self.pools.push(n);
                    }
                }
                Ok(n) => {
                    problems.insert(self.problem(
                        Reason::UnknownPool,
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
                    problems.insert_blocking(
                        self.problem(Reason::InvalidAnnotation, format!("loadbalancer/pool: {e}")),
                    );
                }
            }
        }
        if self.pools.len() < pool_text.split(',').count() || ann.refused("pool") {
            // A pool is missing: allocate nothing rather than half of what was asked. A
            // refused pool annotation is not "no annotation": never the default pool.
            self.refuse();
        }
    }

    /// Static IPs: annotation `loadbalancer/ips`, else `spec.loadBalancerIP`; at most one
    /// per family. One that does not parse refuses the whole request.
    fn read_statics(&mut self, ann: &Annotations, spec: &ServiceSpec, problems: &mut Problems) {
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
                problems.insert_blocking(self.problem(
                    Reason::InvalidAnnotation,
                    format!("spec.loadBalancerIP {ip} is not among loadbalancer/ips; using loadbalancer/ips"),
                ));
            }
        }
        if ann.refused("ips") {
            // A refused address list never becomes a dynamic request.
            self.refuse();
        }
        let mut static_families = BTreeSet::new();
        for (s, from) in statics_text {
            match parse_ip(&s) {
                Ok(ip) => {
                    if !static_families.insert(Family::of(&ip)) {
                        problems.insert_blocking(self.problem(
                            Reason::InvalidAnnotation,
                            format!("{from}: at most one IP per address family ({ip} ignored)"),
                        ));
                    } else {
                        self.statics.push(ip);
                    }
                }
                Err(e) => {
                    problems.insert(self.problem(Reason::InvalidIp, format!("{from}: {e}")));
                    // A broken request allocates nothing (never a surprise dynamic IP).
                    self.refuse();
                }
            }
        }
    }

    fn refuse(&mut self) {
        self.pools.clear();
        self.refused = true;
    }

    /// Existing status (also k8slb's `<ip>.sslip.io` hostname form).
    fn read_status(&mut self, svc: &Service) {
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref());
        for i in ingress.into_iter().flatten() {
            let ip =
                i.ip.as_deref()
                    .and_then(|s| parse_ip(s).ok())
                    .or_else(|| i.hostname.as_deref().and_then(ip_from_sslip));
            self.status_ips.extend(ip);
        }
    }

    /// The ports as frontends; a (protocol, port) listed twice is served once.
    fn read_ports(
        &mut self,
        spec: &ServiceSpec,
        ann: &Annotations,
        cfg: &GlobalConfig,
        opts: &PlanOptions,
        slices: &[&EndpointSlice],
        problems: &mut Problems,
    ) {
        let cx = PortContext {
            spec,
            ann,
            object: self.object.clone(),
            provider: opts.provider,
            reserved: &cfg.reserved_ports,
            tls_on_some: tls_on_some(spec, ann),
            cert_pool: self.pools.first().cloned().or_else(|| {
                self.pool_text
                    .split(',')
                    .next()
                    .and_then(|p| p.trim().parse().ok())
            }),
            slices,
        };
        let all = spec.ports.as_deref().unwrap_or_default();
        let limit = cfg.limits.ports_per_service;
        if all.len() > limit {
            problems.insert(self.problem(
                Reason::QuotaExceeded,
                format!(
                    "{} ports: only the first {limit} are served (the global config's \
                     limits.portsPerService)",
                    all.len()
                ),
            ));
        }
        for sp in all.iter().take(limit) {
            let Some(ps) = port_state(&cx, sp, problems) else {
                continue;
            };
            if !self.port_keys.insert((ps.protocol, ps.port)) {
                problems.insert(self.problem(
                    Reason::DuplicatePort,
                    format!(
                        "port {}/{} is listed twice",
                        proto_name(ps.protocol),
                        ps.port
                    ),
                ));
                continue;
            }
            self.ports.push(ps);
        }
    }
}

/// k8slb's status hostname `<ip>.sslip.io` (IPv6 with '-' for ':').
fn ip_from_sslip(h: &str) -> Option<IpAddr> {
    let stem = h.strip_suffix(".sslip.io")?;
    parse_ip(stem)
        .ok()
        .or_else(|| parse_ip(&stem.replace('-', ":")).ok())
}
