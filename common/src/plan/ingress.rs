//! Ingresses in the plan. The Ingresses of a pool share that pool's **ingress VIP**: one
//! tenant of the allocator ([`Tenant::Ingress`]), placed like a Service (sticky first,
//! then the lowest free address of the pool's range), in the order of its oldest
//! Ingress's creation. It holds the TCP ports its listeners use, so a Service that asks
//! for the same address by name shares it only on other ports, as two Services would.
//!
//! **Ports are sticky too.** At allocation the tenant claims the default ports (80, 443)
//! and the ports it served in the previous state (those its Ingresses still want); a port
//! an Ingress adds later is served only if no Service holds it on that address, else that
//! Ingress gets a `PortConflict` problem for it. So adding an Ingress never moves the VIP
//! and never evicts a Service.
//!
//! A pool that does not exist, or that has no free address, is a problem on every
//! Ingress of it; the routes of the others are built all the same.

use super::allocate::Allocator;
use super::options::PlanOptions;
use super::problems::Problems;
use super::request::{Request, Tenant};
use crate::config::GlobalConfig;
use crate::ingress::{
    self, IngressInput, SecretMeta, Selection, VipOptions, VipRoutes, DEFAULT_HTTPS_PORT,
    DEFAULT_HTTP_PORT,
};
use crate::ipam::parse_ip;
use crate::names::{ObjectKey, PoolName};
use crate::objects::Objects;
use crate::problem::{Problem, Reason};
use crate::routes::HttpRoutes;
use crate::state::{Family, IngressState, Protocol, State};
use k8s_openapi::api::networking::v1::Ingress;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Our Ingresses, read before allocation.
pub(super) struct Ingresses<'a> {
    objs: &'a Objects,
    selection: Selection<'a>,
    secrets: Vec<SecretMeta>,
    /// The routes of each existing pool's Ingresses, drafted on an unspecified address;
    /// the final ones when no port is taken on the VIP (the usual case).
    drafts: BTreeMap<PoolName, VipRoutes>,
    /// The ports the Ingresses of each existing pool want.
    wanted: BTreeMap<PoolName, BTreeSet<u16>>,
    /// Ingresses that exist but did not decode, with what the previous state gave them.
    held: BTreeMap<ObjectKey, IngressState>,
    reserved_ports: crate::config::ReservedPorts,
    /// Who owns which host (see [`crate::tenancy`]).
    host_owners: &'a crate::tenancy::HostOwners,
}

impl<'a> Ingresses<'a> {
    /// Select our Ingresses and make one allocation request per pool that has some.
    pub fn read(
        cfg: &GlobalConfig,
        opts: &PlanOptions,
        objs: &'a Objects,
        host_owners: &'a crate::tenancy::HostOwners,
        prev: &State,
        problems: &mut Problems,
    ) -> (Self, Vec<Request>) {
        let selection = ingress::select(&objs.ingresses, &objs.ingress_classes);
        for p in &selection.problems {
            problems.insert(p.clone());
        }
        let mut me = Ingresses {
            objs,
            selection,
            secrets: objs.secret_metas(),
            drafts: BTreeMap::new(),
            wanted: BTreeMap::new(),
            held: BTreeMap::new(),
            reserved_ports: cfg.reserved_ports.clone(),
            host_owners,
        };
        let mut requests = Vec::new();
        if !opts.provider.has_proxy() {
            let all: Vec<&Ingress> = me.selection.by_pool.values().flatten().copied().collect();
            on_each(
                problems,
                &all,
                Reason::NothingToServe,
                &format!(
                    "Ingresses need a proxy (haproxy or nginx); this install runs {}, which serves Services only",
                    opts.provider
                ),
            );
            me.selection.by_pool.clear();
            return (me, requests);
        }
        for (pool, ings) in &me.selection.by_pool {
            let Some(p) = cfg.pools.get(pool) else {
                let known: Vec<&str> = cfg.pools.keys().map(|k| k.as_str()).collect();
                on_each(
                    problems,
                    ings,
                    Reason::UnknownPool,
                    &format!(
                        "pool {pool} does not exist (pools: {}); not served",
                        known.join(", ")
                    ),
                );
                continue;
            };
            let draft = ingress::routes_for_vip(
                ings,
                &me.input(),
                &me.vip_options(placeholder(p.family()), pool),
            );
            let wanted: BTreeSet<u16> = draft.routes.listeners.iter().map(|l| l.port).collect();
            let tenant = Tenant::Ingress(pool.clone());
            let before: BTreeSet<u16> = match tenant.previous_ips(prev) {
                Some(ips) => prev
                    .http
                    .listeners
                    .iter()
                    .filter(|l| ips.contains(&l.ip))
                    .map(|l| l.port)
                    .chain([DEFAULT_HTTP_PORT, DEFAULT_HTTPS_PORT])
                    .collect(),
                None => wanted.clone(), // a new VIP: every port is free on it
            };
            let oldest = ings[0];
            requests.push(Request {
                key: tenant,
                object: ingress::object(oldest),
                uid: String::new(),
                created: oldest.metadata.creation_timestamp.clone(),
                pools: vec![pool.clone()],
                pool_text: pool.to_string(),
                statics: vec![],
                status_ips: status_ips(ings),
                ports: vec![],
                port_keys: wanted
                    .intersection(&before)
                    .map(|p| (Protocol::Tcp, *p))
                    .collect(),
                refused: false,
                scale: ingress_scale(ings, p, problems),
                share_key: None,
            });
            me.wanted.insert(pool.clone(), wanted);
            me.drafts.insert(pool.clone(), draft);
        }
        me.hold_undecoded(cfg, prev, &mut requests);
        (me, requests)
    }

    /// An Ingress that exists but did not decode keeps what the previous state gave it,
    /// and its pool keeps its ingress VIP (with no routes of its own) even when it was the
    /// pool's last Ingress: bad input never loses an allocation.
    fn hold_undecoded(&mut self, cfg: &GlobalConfig, prev: &State, requests: &mut Vec<Request>) {
        let decoded: BTreeSet<ObjectKey> = self
            .objs
            .ingresses
            .iter()
            .filter_map(ingress::key_of)
            .collect();
        for key in &self.objs.held_ingresses {
            let Some(old) = prev.ingresses.get(key) else {
                continue;
            };
            if decoded.contains(key) {
                continue;
            }
            self.held.insert(key.clone(), old.clone());
            let Ok(pool) = old.pool.parse::<PoolName>() else {
                continue;
            };
            let tenant = Tenant::Ingress(pool.clone());
            if !cfg.pools.contains_key(&pool) || requests.iter().any(|r| r.key == tenant) {
                continue;
            }
            let ports: BTreeSet<u16> = prev
                .http
                .listeners
                .iter()
                .filter(|l| old.ips.contains(&l.ip))
                .map(|l| l.port)
                .collect();
            requests.push(Request {
                key: tenant,
                object: crate::problem::ObjRef::Ingress {
                    namespace: key.namespace.to_string(),
                    name: key.name.to_string(),
                },
                uid: old.uid.clone(),
                created: None,
                pools: vec![pool.clone()],
                pool_text: pool.to_string(),
                statics: vec![],
                status_ips: vec![],
                ports: vec![],
                port_keys: ports.iter().map(|p| (Protocol::Tcp, *p)).collect(),
                refused: false,
                scale: u8::try_from(old.ips.len()).unwrap_or(1).max(1),
                share_key: None,
            });
            self.wanted.entry(pool).or_default();
        }
    }

    fn input(&self) -> IngressInput<'_> {
        IngressInput {
            ingresses: &self.objs.ingresses,
            classes: &self.objs.ingress_classes,
            services: &self.objs.services,
            slices: &self.objs.slices,
            secrets: &self.secrets,
            reserved_ports: Some(&self.reserved_ports),
            host_owners: Some(self.host_owners),
        }
    }

    fn vip_options(&self, ip: IpAddr, pool: &PoolName) -> VipOptions {
        VipOptions {
            ip,
            pool: pool.clone(),
            // The pool's certificate is the default one; an actor on whose node the
            // file does not exist serves the listener's first certificate instead.
            pool_certificate: true,
        }
    }

    /// After allocation: the routes of every ingress VIP and what each Ingress got.
    pub fn build(
        &mut self,
        cfg: &GlobalConfig,
        alloc: &Allocator,
        problems: &mut Problems,
    ) -> (HttpRoutes, BTreeMap<ObjectKey, IngressState>) {
        let mut http = HttpRoutes::default();
        let mut states = BTreeMap::new();
        let mut drafts = std::mem::take(&mut self.drafts);
        for (pool, ings) in &self.selection.by_pool {
            let tenant = Tenant::Ingress(pool.clone());
            let mut ips = alloc.of(&tenant);
            ips.sort();
            for ing in ings {
                if let Some(key) = ingress::key_of(ing) {
                    states.insert(
                        key,
                        IngressState {
                            ips: ips.clone(),
                            pool: pool.to_string(),
                            uid: ing.metadata.uid.clone().unwrap_or_default(),
                        },
                    );
                }
            }
            let Some(p) = cfg.pools.get(pool) else {
                continue; // reported in `read`
            };
            let mut draft = drafts.remove(pool);
            if ips.is_empty() {
                // No address: the translation's own problems are still worth telling.
                absorb(problems, draft.map(|d| d.problems).unwrap_or_default());
                on_each(
                    problems,
                    ings,
                    Reason::PoolExhausted,
                    &format!(
                        "pool {pool} has no free address left in its range {}",
                        p.range
                    ),
                );
                continue;
            }
            for (i, ip) in ips.iter().enumerate() {
                let taken = self.taken(alloc, &tenant, pool, *ip);
                let built = if taken.is_empty() {
                    // The draft is the answer: only its address changes (taken whole
                    // for the last address, the usual single one).
                    let mut b = if i + 1 == ips.len() {
                        draft.take().unwrap_or_default()
                    } else {
                        draft.clone().unwrap_or_default()
                    };
                    for l in &mut b.routes.listeners {
                        l.ip = *ip;
                    }
                    b
                } else {
                    ingress::routes_for_vip_except(
                        ings,
                        &self.input(),
                        &self.vip_options(*ip, pool),
                        &taken,
                    )
                };
                if i == 0 {
                    absorb(problems, built.problems);
                }
                http.listeners.extend(built.routes.listeners);
                for (id, b) in built.routes.backends {
                    http.backends.entry(id).or_insert(b);
                }
            }
        }
        for (key, old) in &self.held {
            let mut kept = old.clone();
            if let Ok(pool) = old.pool.parse::<PoolName>() {
                kept.ips = alloc.of(&Tenant::Ingress(pool));
                kept.ips.sort();
            }
            states.insert(key.clone(), kept);
        }
        http.normalize();
        (http, states)
    }

    /// The ports the Ingresses of `pool` want on `ip` that another tenant holds.
    fn taken(
        &self,
        alloc: &Allocator,
        tenant: &Tenant,
        pool: &PoolName,
        ip: IpAddr,
    ) -> BTreeMap<u16, String> {
        let Some(t) = alloc.tenants.get(&ip) else {
            return BTreeMap::new();
        };
        self.wanted[pool]
            .iter()
            .filter_map(|p| {
                t.ports
                    .get(&(Protocol::Tcp, *p))
                    .filter(|holder| *holder != tenant)
                    .map(|holder| (*p, holder.to_string()))
            })
            .collect()
    }
}

/// The scale of a pool's Ingress addresses: the largest `loadbalancer/scale` among its
/// Ingresses, at most the pool's `maxScale` (an Ingress asking for more gets a
/// `QuotaExceeded` problem; the others keep the pool's addresses as they were).
fn ingress_scale(ings: &[&Ingress], pool: &crate::config::Pool, problems: &mut Problems) -> u8 {
    let mut scale = 1;
    for i in ings {
        let asked = ingress::scale_of(i);
        if asked > pool.max_scale {
            problems.insert(Problem::new(
                ingress::object(i),
                Reason::QuotaExceeded,
                format!(
                    "loadbalancer/scale: {asked} is more than pool {} allows ({}, its maxScale); its Ingresses get {}",
                    pool.name, pool.max_scale, pool.max_scale
                ),
            ));
        }
        scale = scale.max(asked.min(pool.max_scale));
    }
    scale
}

/// The same problem on each of `ings`.
fn on_each(problems: &mut Problems, ings: &[&Ingress], reason: Reason, message: &str) {
    for ing in ings {
        problems.insert(Problem::new(
            ingress::object(ing),
            reason.clone(),
            message.to_string(),
        ));
    }
}

fn absorb(problems: &mut Problems, found: Vec<Problem>) {
    for p in found {
        problems.insert(p);
    }
}

/// The address routes are drafted on before the VIP is known.
fn placeholder(family: Family) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        Family::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// The addresses the status of the pool's Ingresses shows (oldest first): adopted when
/// the state was lost, like a Service's.
fn status_ips(ings: &[&Ingress]) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for ing in ings {
        let shown = ing
            .status
            .iter()
            .filter_map(|s| s.load_balancer.as_ref())
            .flat_map(|lb| lb.ingress.iter().flatten())
            .filter_map(|i| i.ip.as_deref())
            .filter_map(|ip| parse_ip(ip).ok());
        for ip in shown {
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
    }
    out
}
