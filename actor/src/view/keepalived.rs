//! The keepalived part of a node's view: one VRRP instance per pool and VRID this node
//! takes part in, its unicast peers, track files and notification mail.

use super::{safe_path, ViewError, ViewOptions};
use k8slb_common::names::{Email, IfName, NodeName, PoolName, SmtpServer};
use k8slb_common::state::{Family, Member, State, VrrpInstance};
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeepalivedView {
    pub router_id: NodeName,
    /// `advert_int` in seconds with up to two decimals (`0.1`, `1`, `1.5`).
    pub advert_int: String,
    pub garp_master_delay: u32,
    pub garp_master_repeat: u32,
    pub email: Option<EmailView>,
    /// `track_file` on the proxy's health file (`None` for kubeproxy).
    pub track_file: Option<TrackFile>,
    pub instances: Vec<InstanceView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EmailView {
    pub to: Email,
    pub from: Option<Email>,
    pub server: Option<SmtpServer>,
    pub timeout_s: u32,
}

/// keepalived's `track_file` block on the proxy's health file, with weight 0: any
/// non-zero value faults every instance, so the VIPs move to the next node. It replaces
/// `vrrp_track_process`, which needs the kernel's process-events connector and so only
/// works in the initial network namespace (in any other, every instance stays in FAULT:
/// "Failed to set/clear process event listen").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrackFile {
    /// Name of the `track_file` block.
    pub name: &'static str,
    /// [`ViewOptions::track_file`], checked by [`safe_path`].
    pub file: String,
    /// `init_file` value if the file does not exist when keepalived starts (never
    /// `overwrite`: the actor owns the file). `1`: no proxy confirmed yet.
    pub init: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceView {
    /// `k8slb_<pool>_<vrid>`.
    pub name: String,
    pub pool: PoolName,
    pub vrid: u8,
    pub family: Family,
    pub interface: IfName,
    pub priority: u8,
    /// True iff this node is the instance's owner.
    pub owner: bool,
    pub nopreempt: bool,
    pub unicast: Option<Unicast>,
    /// The only address in the advertisements (`virtual_ipaddress`, on `lo`): see
    /// [`anchor`].
    pub anchor: String,
    /// `<ip>/<prefix_len>`, rendered as `virtual_ipaddress_excluded` (not advertised).
    pub vips: Vec<String>,
}

/// The address an instance advertises, the same on every node for the instance's whole
/// life: `127.75.76.<vrid>/32` (IPv4) or `fe80::4b4c:<vrid>/128` (IPv6), put on `lo`
/// by the master ("KL", k8slb's letters; unique per VRID, and VRIDs are unique in a state).
///
/// keepalived drops an advertisement whose address list differs from its own
/// configuration of the instance ("received an unexpected ip number count"), so with the
/// VIPs advertised a node that has applied a new VIP list for an instance (a Service
/// released or added) hears no master from a node that has not, takes over after three
/// advert intervals, and both hold every VIP of the instance until they apply the same
/// state (3.2 s in the chaos soak, after an API outage). With this fixed address and the
/// VIPs in `virtual_ipaddress_excluded` (set and removed with the instance's state, with
/// gratuitous ARP / unsolicited NA, but not advertised), nodes agree on the master
/// whatever VIP list each has applied. VRRPv3 needs at least one advertised address of
/// the instance's family, hence one per family; on `lo` it reaches no network (127/8 is
/// local anyway; an IPv6 link-local on `lo` is not routed).
pub fn anchor(family: Family, vrid: u8) -> String {
    match family {
        Family::V4 => format!("{}/32", Ipv4Addr::new(127, 75, 76, vrid)),
        Family::V6 => format!(
            "{}/128",
            std::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0x4b4c, u16::from(vrid))
        ),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unicast {
    pub src: IpAddr,
    pub peers: Vec<IpAddr>,
}

/// `ms` as seconds with the fewest decimals (`100` -> `0.1`, `1000` -> `1`).
pub(super) fn advert_int(ms: u32) -> Result<String, ViewError> {
    if !(10..=40950).contains(&ms) {
        return Err(ViewError::AdvertInt { ms });
    }
    // VRRPv3 has centisecond resolution: round to it.
    let cs = (ms + 5) / 10;
    let (whole, frac) = (cs / 100, cs % 100);
    Ok(match frac {
        0 => whole.to_string(),
        f if f % 10 == 0 => format!("{whole}.{}", f / 10),
        f => format!("{whole}.{f:02}"),
    })
}

pub(super) fn keepalived_view(
    state: &State,
    node: &NodeName,
    opts: &ViewOptions,
    notes: &mut Vec<String>,
) -> Result<KeepalivedView, ViewError> {
    let cfg = &state.config.keepalived;
    for (&n, &priority) in &opts.priority_overrides {
        if !(1..=254).contains(&priority) {
            return Err(ViewError::PriorityOverride { n, priority });
        }
    }
    let email = cfg.email.as_ref().map(|to| EmailView {
        to: to.clone(),
        from: cfg.email_from.clone(),
        server: cfg.email_server.clone(),
        timeout_s: cfg.email_server_timeout_s,
    });
    let track_file = if opts.proxy.has_proxy() {
        Some(TrackFile {
            name: "k8slb_proxy",
            file: safe_path("track file", &opts.track_file)?,
            init: 1,
        })
    } else {
        None
    };
    let instances = instances(state, node, opts, notes)?;
    Ok(KeepalivedView {
        router_id: node.clone(),
        advert_int: advert_int(cfg.advert_int_ms)?,
        garp_master_delay: cfg.garp_master_delay_s,
        garp_master_repeat: cfg.garp_repeat,
        email,
        track_file,
        instances,
    })
}

/// The VRRP instances `node` is a member of, by VRID; those without a VIP are left out
/// with a note.
fn instances(
    state: &State,
    node: &NodeName,
    opts: &ViewOptions,
    notes: &mut Vec<String>,
) -> Result<Vec<InstanceView>, ViewError> {
    let mut ordered: Vec<_> = state.instances.iter().collect();
    ordered.sort_by_key(|i| i.vrid);
    let mut instances = Vec::new();
    for (idx, inst) in ordered.into_iter().enumerate() {
        let Some(me) = inst.members.iter().find(|m| &m.node == node) else {
            continue;
        };
        if inst.vips.is_empty() {
            // keepalived refuses an instance without a VIP; the VRID stays reserved in
            // the state, so leaving the instance out loses nothing.
            notes.push(format!(
                "VRRP instance {} (pool {}) has no VIP; not rendered",
                inst.vrid, inst.pool
            ));
            continue;
        }
        // The `n`th instance (from 1, by VRID) takes `opts.priority_overrides[n]`.
        let n = idx as u32 + 1;
        instances.push(instance(state, node, opts, inst, me, n, notes)?);
    }
    Ok(instances)
}

/// The `n`th instance `inst`, where `node` is member `me`: its pool's interface and
/// prefix length, this node's priority, the VIPs and the unicast peers.
fn instance(
    state: &State,
    node: &NodeName,
    opts: &ViewOptions,
    inst: &VrrpInstance,
    me: &Member,
    n: u32,
    notes: &mut Vec<String>,
) -> Result<InstanceView, ViewError> {
    let cfg = &state.config.keepalived;
    let pool = state
        .config
        .pools
        .get(&inst.pool)
        .ok_or_else(|| ViewError::UnknownPool {
            pool: inst.pool.clone(),
            vrid: inst.vrid,
        })?;
    let interface = opts
        .interfaces
        .get(&inst.pool)
        .or(pool.interface.as_ref())
        .cloned()
        .ok_or_else(|| ViewError::NoInterface {
            pool: inst.pool.clone(),
            vrid: inst.vrid,
        })?;
    let max_prefix = match inst.family {
        Family::V4 => 32,
        Family::V6 => 128,
    };
    if pool.prefix_len > max_prefix {
        return Err(ViewError::PrefixLen {
            pool: inst.pool.clone(),
            prefix_len: pool.prefix_len,
        });
    }
    if !(1..=254).contains(&me.priority) {
        return Err(ViewError::Priority {
            node: node.clone(),
            vrid: inst.vrid,
            priority: me.priority,
        });
    }
    let owner = inst.owner() == Some(node);
    let priority = match opts.priority_overrides.get(&n) {
        Some(&p) if !owner => p,
        _ => me.priority,
    };
    let mut vips = Vec::with_capacity(inst.vips.len());
    for vip in &inst.vips {
        if Family::of(vip) != inst.family {
            return Err(ViewError::VipFamily {
                vip: *vip,
                vrid: inst.vrid,
            });
        }
        vips.push(format!("{vip}/{}", pool.prefix_len));
    }
    let unicast = if cfg.unicast {
        unicast(state, node, opts, inst, notes)
    } else {
        None
    };
    Ok(InstanceView {
        name: format!("k8slb_{}_{}", inst.pool, inst.vrid),
        pool: inst.pool.clone(),
        vrid: inst.vrid,
        family: inst.family,
        interface,
        priority,
        owner,
        nopreempt: !(cfg.preempt || inst.preempt),
        unicast,
        anchor: anchor(inst.family, inst.vrid),
        vips,
    })
}

/// `unicast_src_ip` (this node's first address of the instance's family, from the state
/// or else `opts.node_addresses`) and `unicast_peer` (the other members' addresses of
/// that family); `None` (multicast, with a note) when this node has no such address.
fn unicast(
    state: &State,
    node: &NodeName,
    opts: &ViewOptions,
    inst: &VrrpInstance,
    notes: &mut Vec<String>,
) -> Option<Unicast> {
    let fam = |a: &&IpAddr| Family::of(a) == inst.family;
    let src = state
        .nodes
        .get(node)
        .and_then(|n| n.addresses.iter().find(fam))
        .or_else(|| opts.node_addresses.iter().find(fam))
        .copied();
    let Some(src) = src else {
        notes.push(format!(
            "VRRP instance {}: this node has no {:?} address; using multicast",
            inst.vrid, inst.family
        ));
        return None;
    };
    let mut peers = Vec::new();
    for m in inst.members.iter().filter(|m| &m.node != node) {
        match state
            .nodes
            .get(&m.node)
            .and_then(|n| n.addresses.iter().find(fam))
        {
            Some(a) => peers.push(*a),
            None => notes.push(format!(
                "VRRP instance {}: peer {} has no {:?} address; left out of unicast_peer",
                inst.vrid, m.node, inst.family
            )),
        }
    }
    Some(Unicast { src, peers })
}

pub(super) fn family_suffix(ip: &IpAddr) -> &'static str {
    match ip {
        IpAddr::V4(_) => "v4",
        IpAddr::V6(_) => "v6",
    }
}
