//! VRRP: each VIP in one instance of its pool; an instance has the LB nodes as members
//! in priority order, the first is the owner. A VIP stays in its instance for life; a
//! new VIP goes to an instance owned by the least-loaded node. VRIDs are kept and never
//! reused while in use.
//!
//! An address keeps its VRID across a release and a new allocation too
//! ([`State::released`]): a node still running an older state may hold it in its old
//! instance, and only within one VRID does VRRP make sure one node holds it.

use super::allocate::Allocator;
use super::options::PlanOptions;
use super::problems::Problems;
use crate::config::GlobalConfig;
use crate::names::{NodeName, PoolName};
use crate::problem::{ObjRef, Problem, Reason};
use crate::state::{Family, LbNode, Member, State, VipState, VrrpInstance};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// Priority of an instance's owner; backups get 100, 99, 98, ...
pub const OWNER_PRIORITY: u8 = 200;
pub const FIRST_BACKUP_PRIORITY: u8 = 100;
/// Members of one VRRP instance at most: the owner and 100 backups (priorities 100..=1
/// are distinct). With more LB nodes, the rest do not run that instance; other
/// instances, owned elsewhere, rotate their backups so every node still serves.
pub const MAX_MEMBERS: usize = 1 + FIRST_BACKUP_PRIORITY as usize;

struct Inst {
    vrid: u8,
    pool: PoolName,
    family: Family,
    members: Vec<NodeName>,
    vips: Vec<IpAddr>,
}

/// The instances and where every allocated VIP sits.
pub(super) fn vrrp_plan(
    cfg: &GlobalConfig,
    opts: &PlanOptions,
    nodes: &BTreeMap<NodeName, LbNode>,
    alloc: &Allocator,
    prev: &State,
    problems: &mut Problems,
) -> (
    Vec<VrrpInstance>,
    BTreeMap<IpAddr, VipState>,
    BTreeMap<IpAddr, u8>,
) {
    let mut insts = previous_instances(cfg, opts, nodes, prev);
    let mut orphans = keep_previous_vips(&mut insts, alloc, prev);
    // A BGP-mode pool's VIPs are in no instance: every LB node announces them.
    let mut vips = BTreeMap::new();
    orphans.retain(|ip| {
        let pool = &alloc.tenants[ip].pool;
        if cfg.pools.get(pool).is_none_or(|p| p.mode.is_vrrp()) {
            return true;
        }
        vips.insert(*ip, unannounced(alloc, pool, *ip));
        false
    });
    let released = released(prev, alloc);
    // An address allocated again goes back to its VRID: into that instance if it is
    // kept (and of the same pool), or into a new instance with that VRID if it is free.
    orphans.retain(|ip| {
        let Some(&vrid) = released.get(ip) else {
            return true;
        };
        let pool = &alloc.tenants[ip].pool;
        // A scaled tenant's VIPs stay on distinct owners: that rule comes first.
        let avoid = sibling_owners(&insts, alloc, *ip);
        if let Some(i) = insts.iter().position(|i| i.vrid == vrid) {
            let owner_free = insts[i].members.first().is_none_or(|o| !avoid.contains(o));
            if &insts[i].pool == pool && owner_free {
                insts[i].vips.push(*ip);
                return false;
            }
            return true;
        }
        if vrid <= opts.vrid_offset {
            return true;
        }
        let Some(owner) = least_loaded(&insts, nodes, pool, &avoid) else {
            return true;
        };
        insts.push(new_instance(cfg, nodes, pool, vrid, &owner));
        insts.last_mut().expect("pushed").vips.push(*ip);
        false
    });
    if !orphans.is_empty() && nodes.is_empty() {
        problems.insert(Problem::new(
            ObjRef::Config,
            Reason::NoLoadBalancerNodes,
            format!(
                "{} VIP(s) are allocated but no Ready node matches the node selector: label nodes with it (e.g. kubectl label nodes <name> type=loadBalancer)",
                orphans.len()
            ),
        ));
    }
    for ip in orphans {
        let pool = &alloc.tenants[&ip].pool;
        let avoid = sibling_owners(&insts, alloc, ip);
        match instance_for(&mut insts, cfg, opts, nodes, pool, ip, &avoid, problems) {
            Some(i) => insts[i].vips.push(ip),
            // Unannounced: no node, or no VRID left.
            None => {
                vips.insert(ip, unannounced(alloc, pool, ip));
            }
        }
    }
    let instances = finish(insts, alloc, &mut vips);
    // Remembered: released addresses not allocated now, whose VRID no other pool's
    // instance took.
    let remembered = released
        .into_iter()
        .filter(|(ip, vrid)| {
            !vips.contains_key(ip)
                && instances
                    .iter()
                    .find(|i| i.vrid == *vrid)
                    .is_none_or(|i| Some(&i.pool) == prev_pool(prev, *ip).as_ref())
        })
        .collect();
    (instances, vips, remembered)
}

/// A VIP in no VRRP instance (no LB node, no VRID left, or a BGP-mode pool).
fn unannounced(alloc: &Allocator, pool: &PoolName, ip: IpAddr) -> VipState {
    VipState {
        pool: pool.clone(),
        vrid: 0,
        owner: None,
        services: alloc.services_on(ip),
        ingress: alloc.has_ingress(ip),
        gateways: alloc.gateways_on(ip),
    }
}

/// The released addresses: those of `prev`'s VIPs that are not allocated now, and those
/// `prev` remembered, with their VRIDs (a VIP's own VRID wins).
fn released(prev: &State, alloc: &Allocator) -> BTreeMap<IpAddr, u8> {
    let mut out: BTreeMap<IpAddr, u8> = prev
        .released
        .iter()
        .filter(|(ip, _)| !prev.vips.contains_key(ip))
        .map(|(ip, v)| (*ip, *v))
        .collect();
    for (ip, v) in &prev.vips {
        if v.vrid != 0 {
            out.insert(*ip, v.vrid);
        }
    }
    out.retain(|ip, _| !alloc.tenants.contains_key(ip) || !prev.vips.contains_key(ip));
    out
}

/// The pool of the instance `prev` had `ip` in (as a VIP or remembered).
fn prev_pool(prev: &State, ip: IpAddr) -> Option<PoolName> {
    let vrid = prev
        .vips
        .get(&ip)
        .map(|v| v.vrid)
        .or_else(|| prev.released.get(&ip).copied())?;
    prev.instances
        .iter()
        .find(|i| i.vrid == vrid)
        .map(|i| i.pool.clone())
}

/// The previous instances whose pool still exists, with members that are still LB nodes
/// (order kept: when the owner leaves, the next member becomes the owner), and new LB
/// nodes appended as the lowest backups.
/// A previous state is input too (a file, a ConfigMap): a VRID or a member seen twice is
/// kept once, so that VRIDs stay unique and each member has one priority.
fn previous_instances(
    cfg: &GlobalConfig,
    opts: &PlanOptions,
    nodes: &BTreeMap<NodeName, LbNode>,
    prev: &State,
) -> Vec<Inst> {
    let mut insts: Vec<Inst> = Vec::new();
    let mut prev_vrids = BTreeSet::new();
    for pi in &prev.instances {
        let Some(pool) = cfg.pools.get(&pi.pool) else {
            continue;
        };
        if !pool.mode.is_vrrp() || pool.family() != pi.family || pi.vrid <= opts.vrid_offset {
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
    insts
}

/// Every allocated VIP back into its previous instance if that is kept; returns the
/// others (new VIPs, or whose instance is gone), in address order.
fn keep_previous_vips(insts: &mut [Inst], alloc: &Allocator, prev: &State) -> Vec<IpAddr> {
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
    orphans
}

/// The owners of the instances that already carry the other VIPs of the tenants of
/// `ip` (a Service or the Ingresses of a pool with `loadbalancer/scale`): a new VIP of
/// theirs goes to another node while one is left, so that all of them serve at once.
fn sibling_owners(insts: &[Inst], alloc: &Allocator, ip: IpAddr) -> BTreeSet<NodeName> {
    let Some(t) = alloc.tenants.get(&ip) else {
        return BTreeSet::new();
    };
    t.services
        .iter()
        .flat_map(|tenant| alloc.of(tenant))
        .filter(|sib| *sib != ip)
        .filter_map(|sib| insts.iter().find(|i| i.vips.contains(&sib)))
        .filter_map(|i| i.members.first().cloned())
        .collect()
}

/// The instance a new VIP of `pool` goes to: the one of `pool` owned by the
/// least-loaded node not in `avoid` (any node when all are), made if there is none.
/// None: no node, or no VRID left (a problem).
#[allow(clippy::too_many_arguments)]
fn instance_for(
    insts: &mut Vec<Inst>,
    cfg: &GlobalConfig,
    opts: &PlanOptions,
    nodes: &BTreeMap<NodeName, LbNode>,
    pool: &PoolName,
    ip: IpAddr,
    avoid: &BTreeSet<NodeName>,
    problems: &mut Problems,
) -> Option<usize> {
    let owner = least_loaded(insts, nodes, pool, avoid)?;
    if let Some(i) = insts
        .iter()
        .position(|i| &i.pool == pool && i.members.first() == Some(&owner))
    {
        return Some(i);
    }
    let used: BTreeSet<u8> = insts.iter().map(|i| i.vrid).collect();
    let Some(vrid) = (opts.vrid_offset.saturating_add(1)..=255).find(|v| !used.contains(v)) else {
        problems.insert(Problem::new(
            ObjRef::Config,
            Reason::VridExhausted,
            format!(
                "no free VRRP virtual_router_id in {}..=255 (VRID_OFFSET {}); VIP {ip} is not announced",
                opts.vrid_offset as u16 + 1,
                opts.vrid_offset
            ),
        ));
        return None;
    };
    insts.push(new_instance(cfg, nodes, pool, vrid, &owner));
    Some(insts.len() - 1)
}

/// A new instance of `pool` with `vrid`, owned by `owner`; the backups rotate after the
/// owner so that failovers spread out.
fn new_instance(
    cfg: &GlobalConfig,
    nodes: &BTreeMap<NodeName, LbNode>,
    pool: &PoolName,
    vrid: u8,
    owner: &NodeName,
) -> Inst {
    let names: Vec<&NodeName> = nodes.keys().collect();
    let at = names
        .iter()
        .position(|n| *n == owner)
        .expect("owner is a node");
    let members = names[at..]
        .iter()
        .chain(names[..at].iter())
        .take(MAX_MEMBERS)
        .map(|n| (*n).clone())
        .collect();
    Inst {
        vrid,
        pool: pool.clone(),
        family: cfg.pools[pool].family(),
        members,
        vips: vec![],
    }
}

/// Least-loaded node: not in `avoid` while another is left, then fewest VIPs of this
/// pool, then fewest VIPs, then name.
fn least_loaded(
    insts: &[Inst],
    nodes: &BTreeMap<NodeName, LbNode>,
    pool: &PoolName,
    avoid: &BTreeSet<NodeName>,
) -> Option<NodeName> {
    let load = |n: &NodeName, same_pool: bool| -> usize {
        insts
            .iter()
            .filter(|i| i.members.first() == Some(n) && (!same_pool || &i.pool == pool))
            .map(|i| i.vips.len())
            .sum()
    };
    nodes
        .keys()
        .min_by_key(|n| {
            (
                avoid.contains(*n),
                load(n, true),
                load(n, false),
                (*n).clone(),
            )
        })
        .cloned()
}

/// The instances that carry VIPs, by VRID, with priorities; every VIP's place.
fn finish(
    mut insts: Vec<Inst>,
    alloc: &Allocator,
    vips: &mut BTreeMap<IpAddr, VipState>,
) -> Vec<VrrpInstance> {
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
                    ingress: alloc.has_ingress(*ip),
                    gateways: alloc.gateways_on(*ip),
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
                    priority: priority(k),
                })
                .collect(),
            preempt: i.vips.iter().any(|ip| is_scaled(alloc, *ip)),
            vips: i.vips,
        });
    }
    out
}

/// `ip` is one of several addresses a tenant holds in its pool (`loadbalancer/scale`).
fn is_scaled(alloc: &Allocator, ip: IpAddr) -> bool {
    let Some(t) = alloc.tenants.get(&ip) else {
        return false;
    };
    t.services.iter().any(|tenant| {
        alloc
            .of(tenant)
            .iter()
            .filter(|other| alloc.tenants.get(other).is_some_and(|o| o.pool == t.pool))
            .count()
            > 1
    })
}

/// The priority of the `k`th member (0: the owner).
fn priority(k: usize) -> u8 {
    if k == 0 {
        OWNER_PRIORITY
    } else {
        // k <= MAX_MEMBERS - 1 = FIRST_BACKUP_PRIORITY: 100, 99, .., 1.
        FIRST_BACKUP_PRIORITY - (k - 1) as u8
    }
}
