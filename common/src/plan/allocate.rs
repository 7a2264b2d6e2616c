//! Addresses for requests: sticky first, then static, then dynamic (see the order in
//! [`super`]). The allocator records who holds what; it never reads a Service.

use super::ports::proto_name;
use super::problems::Problems;
use super::request::{Request, Tenant};
use crate::config::{GlobalConfig, Pool};
use crate::ipam::RangeSet;
use crate::names::{ObjectKey, PoolName, ServiceKey};
use crate::problem::Reason;
use crate::state::{Family, Protocol, ServiceState, State};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

#[derive(Default)]
pub(super) struct Allocator {
    pub used: RangeSet,
    pub tenants: BTreeMap<IpAddr, Tenancy>,
    // Lookups only (never iterated): hash order cannot leak into the output.
    by_service: HashMap<Tenant, Vec<IpAddr>>,
    /// How many addresses of each pool the tenants of each namespace hold (an address
    /// shared by two of its tenants counts once).
    per_namespace: HashMap<(PoolName, String), u32>,
}

pub(super) struct Tenancy {
    pub pool: PoolName,
    /// (protocol, port) -> the tenant using it.
    pub ports: BTreeMap<(Protocol, u16), Tenant>,
    /// Every tenant on it (a Service with no ports still holds its IP).
    pub services: BTreeSet<Tenant>,
    /// A tenant asked for this address by name (so others may share it).
    pub pinned: bool,
    /// Each tenant's `loadbalancer/allow-shared-ip` key.
    pub keys: BTreeMap<Tenant, Option<String>>,
}

#[derive(Debug)]
enum TakeError {
    PortConflict {
        other: Tenant,
        proto: Protocol,
        port: u16,
    },
    OtherPool {
        pool: String,
    },
    /// Joining the address needs its tenants' consent (see [`Allocator::may_join`]).
    NotShared {
        why: String,
    },
}

impl TakeError {
    fn reason(&self) -> Reason {
        match self {
            TakeError::PortConflict { .. } => Reason::PortConflict,
            TakeError::OtherPool { .. } | TakeError::NotShared { .. } => Reason::IpInUse,
        }
    }
    fn message(&self, ip: IpAddr) -> String {
        match self {
            TakeError::PortConflict { other, proto, port } => format!(
                "IP {ip} is already used by {other} on {}/{port}; a shared IP needs distinct ports",
                proto_name(*proto)
            ),
            TakeError::OtherPool { pool } => {
                format!("IP {ip} is already used from pool {pool}")
            }
            TakeError::NotShared { why } => format!("IP {ip} is not shared: {why}"),
        }
    }
}

/// Every address of every request (and of the Services held as they were), in order.
/// Returns the allocator and the held Services' states.
pub(super) fn allocate(
    cfg: &GlobalConfig,
    requests: &[Request],
    held_services: &[ServiceKey],
    seen: &HashSet<ServiceKey>,
    prev: &State,
    problems: &mut Problems,
) -> (Allocator, BTreeMap<ServiceKey, ServiceState>) {
    let mut alloc = Allocator::default();
    let held = alloc.hold_undecoded(cfg, held_services, seen, prev);
    alloc.keep_existing(cfg, requests, prev);
    let conflicts = alloc.take_static(cfg, requests, problems);
    alloc.take_dynamic(cfg, requests, problems);
    alloc.report_conflicts(&conflicts, problems);
    (alloc, held)
}

impl Allocator {
    pub fn of(&self, key: &Tenant) -> Vec<IpAddr> {
        self.by_service.get(key).cloned().unwrap_or_default()
    }

    /// The Services on `ip`, sorted.
    pub fn services_on(&self, ip: IpAddr) -> Vec<ServiceKey> {
        self.tenants
            .get(&ip)
            .map(|t| {
                t.services
                    .iter()
                    .filter_map(|k| match k {
                        Tenant::Service(k) => Some(k.clone()),
                        Tenant::Ingress(_) | Tenant::Gateway(_) => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The Gateways on `ip`, sorted.
    pub fn gateways_on(&self, ip: IpAddr) -> Vec<ObjectKey> {
        self.tenants
            .get(&ip)
            .map(|t| {
                t.services
                    .iter()
                    .filter_map(|k| match k {
                        Tenant::Gateway(k) => Some(k.clone()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `ip` serves its pool's Ingresses.
    pub fn has_ingress(&self, ip: IpAddr) -> bool {
        self.tenants
            .get(&ip)
            .is_some_and(|t| t.services.iter().any(|k| matches!(k, Tenant::Ingress(_))))
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
            keys: BTreeMap::new(),
        });
        t.pinned |= r.statics.contains(&ip);
        if let Some(ns) = r.key.namespace() {
            if !t.services.iter().any(|k| k.namespace() == Some(ns)) {
                *self
                    .per_namespace
                    .entry((pool.name.clone(), ns.to_string()))
                    .or_default() += 1;
            }
        }
        t.services.insert(r.key.clone());
        t.keys.insert(r.key.clone(), r.share_key.clone());
        for pp in &r.port_keys {
            t.ports.insert(*pp, r.key.clone());
        }
        self.used.insert(ip);
        self.by_service.entry(r.key.clone()).or_default().push(ip);
        Ok(())
    }

    /// Whether `r` may join `ip`, which other tenants hold: only by consent. Never the
    /// pool's Ingress address (the admin's, shared by Ingresses only), never an address
    /// no tenant asked for by name (allocated dynamically: its tenant agreed to nothing),
    /// and only when every tenant on it carries the same `loadbalancer/allow-shared-ip`
    /// key as `r` and (by default) lives in `r`'s namespace or namespace group. The
    /// admin's `tenancy.addressSharing: Open` is k8slb's rule instead: anyone asking by
    /// name, on other ports. Tenants that already share keep sharing (an
    /// upgrade never takes an address away): only a new join asks.
    fn may_join(&self, cfg: &GlobalConfig, ip: IpAddr, r: &Request) -> Result<(), TakeError> {
        use crate::config::AddressSharing;
        let Some(t) = self.tenants.get(&ip) else {
            return Ok(());
        };
        if t.services.contains(&r.key) {
            return Ok(());
        }
        let sharing = cfg.tenancy.address_sharing;
        if sharing == AddressSharing::Open {
            return Ok(()); // k8slb's rule: by name, on other ports (checked by `take`)
        }
        let refuse = |why: String| Err(TakeError::NotShared { why });
        if let Some(i) = t.services.iter().find(|k| matches!(k, Tenant::Ingress(_))) {
            return refuse(format!("it serves {i}, and only Ingresses share it"));
        }
        if !t.pinned {
            return refuse(format!(
                "{} holds it as a dynamically allocated address",
                t.services
                    .iter()
                    .next()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ));
        }
        let Some(key) = r.share_key.as_deref() else {
            return refuse(format!(
                "{} holds it; sharing needs the same loadbalancer/allow-shared-ip key on both",
                t.services
                    .iter()
                    .next()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ));
        };
        let same_tenant = |other: &Tenant| {
            sharing == AddressSharing::AnyNamespace
                || match (other.namespace(), r.key.namespace()) {
                    (Some(a), Some(b)) => {
                        a == b
                            || cfg
                                .tenancy
                                .namespace_groups
                                .iter()
                                .any(|g| g.contains(a) && g.contains(b))
                    }
                    _ => false,
                }
        };
        for (other, k) in &t.keys {
            if k.as_deref() != Some(key) {
                return refuse(format!(
                    "{other} holds it without the same loadbalancer/allow-shared-ip key"
                ));
            }
            if !same_tenant(other) {
                return refuse(format!(
                    "{other} holds it and is in another namespace (the admin's tenancy.addressSharing allows AnyNamespace)"
                ));
            }
        }
        Ok(())
    }

    /// Would a new address of `pool` for `r` (joining `ip`, if given) go beyond its
    /// namespace's quota (`addressesPerNamespace`)? Then the message that says so.
    fn over_quota(&self, pool: &Pool, r: &Request, ip: Option<IpAddr>) -> Option<String> {
        let max = pool.per_namespace?;
        let ns = r.key.namespace()?;
        let joins_own = ip
            .and_then(|ip| self.tenants.get(&ip))
            .is_some_and(|t| t.services.iter().any(|k| k.namespace() == Some(ns)));
        let held = self
            .per_namespace
            .get(&(pool.name.clone(), ns.to_string()))
            .copied()
            .unwrap_or(0);
        (!joins_own && held >= max).then(|| {
            format!(
                "namespace {ns} holds {held} addresses of pool {}, its quota (addressesPerNamespace: {max}); nothing new is allocated",
                pool.name
            )
        })
    }

    /// 0. Services that exist but did not decode keep exactly what they had, first.
    fn hold_undecoded(
        &mut self,
        cfg: &GlobalConfig,
        held_services: &[ServiceKey],
        seen: &HashSet<ServiceKey>,
        prev: &State,
    ) -> BTreeMap<ServiceKey, ServiceState> {
        let mut held: BTreeMap<ServiceKey, ServiceState> = BTreeMap::new();
        for key in held_services {
            if seen.contains(key) || held.contains_key(key) {
                continue;
            }
            let Some(old) = prev.services.get(key) else {
                continue;
            };
            let mut r = Request::empty(key.clone(), old.uid.clone(), None);
            r.pool_text = old.pool.clone();
            r.port_keys = old.ports.iter().map(|p| (p.protocol, p.port)).collect();
            r.refused = true;
            for ip in &old.ips {
                if let Some(pool) = cfg.pools.values().find(|p| p.network.range().contains(*ip)) {
                    let _ = self.take(*ip, pool, &r);
                }
            }
            let mut kept = old.clone();
            kept.ips = self.of(&Tenant::Service(key.clone()));
            kept.ips.sort();
            held.insert(key.clone(), kept);
        }
        held
    }

    /// 1. Sticky: existing claims of every Service first; the previous state (what we
    ///    published) for every Service before any Service's status (what the API server
    ///    shows, which lags behind a release). A status address is adopted only while
    ///    free or pinned (asked for by name by a tenant, so shareable): a stale status
    ///    must never take an address the state gave to another Service, nor make two
    ///    dynamic Services share one.
    ///    Refused requests come after all valid ones (they keep what is left, never
    ///    evicting a valid co-tenant), and adopt a status address only when the previous
    ///    state does not know them (a restart without state), never one it released.
    fn keep_existing(&mut self, cfg: &GlobalConfig, requests: &[Request], prev: &State) {
        let (valid, refused): (Vec<&Request>, Vec<&Request>) =
            requests.iter().partition(|r| !r.is_refused(cfg));
        let mut order: Vec<(&Request, Vec<IpAddr>, bool)> = Vec::new();
        for group in [&valid, &refused] {
            for &r in group.iter() {
                let held = r.key.previous_ips(prev);
                order.push((r, held.unwrap_or_default(), false));
            }
            for &r in group.iter() {
                let adopt = !r.is_refused(cfg) || r.key.previous_ips(prev).is_none();
                let ips = if adopt { r.status_ips.clone() } else { vec![] };
                order.push((r, ips, true));
            }
        }
        for (r, held, only_free) in order {
            for ip in held {
                self.keep_one(cfg, r, ip, only_free);
            }
        }
    }

    /// Keep `ip` for `r` if it still may hold it.
    fn keep_one(&mut self, cfg: &GlobalConfig, r: &Request, ip: IpAddr, only_free: bool) {
        let mine = self.of(&r.key);
        let unpinned = self.tenants.get(&ip).is_some_and(|t| !t.pinned);
        if mine.contains(&ip) || (only_free && unpinned) {
            return;
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
            return; // pool changed or gone, or the IP left the pool's network
        };
        if r.has_all_in(pool, &mine) {
            return; // one address per pool (or its scale)
        }
        if !refused && !r.statics.contains(&ip) && !r.dynamic_ok(Family::of(&ip), cfg) {
            return; // the request changed: the old address is released
        }
        // A dynamic address outside an edited range but still inside the pool's
        // network is kept: editing a range must not move a healthy Service.
        let _ = self.take(ip, pool, r);
    }

    /// 2. Static requests, all of them before any dynamic one, so that a new dynamic
    ///    Service never takes an address a newer Service asks for by name in the same
    ///    plan. Returns the port conflicts, named once every tenant is placed.
    fn take_static<'r>(
        &mut self,
        cfg: &GlobalConfig,
        requests: &'r [Request],
        problems: &mut Problems,
    ) -> Vec<(&'r Request, IpAddr)> {
        let mut conflicts = Vec::new();
        for r in requests.iter().filter(|r| !r.pools.is_empty()) {
            let mine: Vec<IpAddr> = self.of(&r.key);
            for &ip in &r.statics {
                if mine.contains(&ip) {
                    continue;
                }
                if self.take_one_static(cfg, r, ip, &mine, problems) {
                    conflicts.push((r, ip));
                }
            }
        }
        conflicts
    }

    /// One address asked for by name. true: it clashes on a port with a tenant.
    fn take_one_static(
        &mut self,
        cfg: &GlobalConfig,
        r: &Request,
        ip: IpAddr,
        mine: &[IpAddr],
        problems: &mut Problems,
    ) -> bool {
        let Some(pool) = r.pool_for(ip, cfg) else {
            problems.insert(r.problem(
                Reason::IpOutsidePool,
                format!(
                    "requested IP {ip} is not inside the network of pool {}",
                    r.pool_text
                ),
            ));
            return false;
        };
        if r.has_ip_in(pool, mine) {
            return false;
        }
        if !pool.network.allocatable().contains(ip) {
            // A CIDR network's own address or its IPv4 broadcast: never a VIP.
            problems.insert(r.problem(
                Reason::IpNotUsable,
                format!(
                    "requested IP {ip} is the network or broadcast address of pool {}'s network {}",
                    pool.name, pool.network
                ),
            ));
            return false;
        }
        if r.is_refused(cfg) {
            return false; // reported above or in the request; nothing new for it
        }
        if let Err(e) = self.may_join(cfg, ip, r) {
            problems.insert_blocking(r.problem(e.reason(), e.message(ip)));
            return false;
        }
        if let Some(m) = self.over_quota(pool, r, Some(ip)) {
            problems.insert_blocking(r.problem(Reason::QuotaExceeded, m));
            return false;
        }
        match self.take(ip, pool, r) {
            // Named against the final tenants (see `report_conflicts`), so that the
            // message does not depend on which co-tenant happened to be placed first.
            Err(TakeError::PortConflict { .. }) => return true,
            Err(e) => problems.insert(r.problem(e.reason(), e.message(ip))),
            Ok(()) => {}
        }
        false
    }

    /// 3. Dynamic: the lowest free address of each pool of a family no static address
    ///    covers.
    fn take_dynamic(&mut self, cfg: &GlobalConfig, requests: &[Request], problems: &mut Problems) {
        for r in requests {
            for pool in &r.pools {
                let pool = &cfg.pools[pool];
                if !r.dynamic_ok(pool.family(), cfg) {
                    continue;
                }
                let within = pool.range.allocatable();
                while !r.has_all_in(pool, &self.of(&r.key)) {
                    if let Some(m) = self.over_quota(pool, r, None) {
                        problems.insert_blocking(r.problem(Reason::QuotaExceeded, m));
                        break;
                    }
                    let Some(ip) = self.used.first_free(&within) else {
                        problems.insert(r.problem(
                            Reason::PoolExhausted,
                            format!(
                                "pool {} has no free address left in its range {}",
                                pool.name, pool.range
                            ),
                        ));
                        break;
                    };
                    self.take(ip, pool, r).expect("a free address is free");
                }
            }
        }
    }

    /// A port conflict names the final tenant holding the clashing port.
    fn report_conflicts(&self, conflicts: &[(&Request, IpAddr)], problems: &mut Problems) {
        for &(r, ip) in conflicts {
            let clash = self.tenants.get(&ip).and_then(|t| {
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
    }
}
