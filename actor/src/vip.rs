//! Addresses over netlink, behind [`AddrOps`], and the pure decisions on them.
//!
//! - [`detect_interface`]: the interface of a pool without `interface`, by LONGEST-prefix
//!   match of the pool's first address against this node's address prefixes (k8slb
//!   took the first matching route in list order);
//! - [`observe`]: which VIPs of the state this node holds right now (metrics, status);
//! - [`stale_vips`]: addresses inside our pools' networks that nobody should hold now.
//!   At start, before keepalived runs, the actor deletes them: an unclean exit (SIGKILL,
//!   OOM, node reboot of the container only) leaves keepalived's VIPs on the interface,
//!   and a VIP must never be on two nodes. This node's own addresses (the state's
//!   `nodes[node].addresses`) are never touched, even inside a pool network.
//! - [`allow_nonlocal_bind`]: nginx binds every VIP, also on a node that does not hold
//!   it (yet), and has no per-socket option for it: `net.ipv4.ip_nonlocal_bind=1` and
//!   `net.ipv6.ip_nonlocal_bind=1`, written under `/proc/sys` in the actor's network
//!   namespace (the host's, with hostNetwork). HAProxy does not need it: its `bind` lines
//!   carry `transparent` (`IP_TRANSPARENT` on the listening socket, or `IP_FREEBIND`,
//!   which needs no privilege, when that is not permitted: no sysctl either); kubeproxy
//!   binds nothing.
//!
//! ARP hygiene (documented, not enforced): with kube-proxy in IPVS mode, or any other
//! agent that puts addresses on a dummy interface, set `net.ipv4.conf.all.arp_ignore=1`
//! and `net.ipv4.conf.all.arp_announce=2` on LB nodes, otherwise every node may answer
//! ARP for a VIP it holds on a non-VRRP interface (PureLB's warning, peers.md §0.1).
//!
//! "Already exists" on add and "already gone" on delete are success.

use ipnet::IpNet;
use k8slb_common::names::PoolName;
use k8slb_common::state::{PoolInfo, VipState};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// One address on an interface.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Addr {
    pub ifname: String,
    pub index: u32,
    /// Address and prefix length.
    pub net: IpNet,
}

impl Addr {
    pub fn ip(&self) -> IpAddr {
        self.net.addr()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VipError {
    #[error("netlink connection: {0}")]
    Connect(#[source] std::io::Error),
    #[error("list {what}: {source}")]
    List {
        what: &'static str,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("add {addr} on {ifname}: {source}")]
    Add {
        addr: IpNet,
        ifname: String,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("delete {addr} from {ifname}: {source}")]
    Delete {
        addr: IpNet,
        ifname: String,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("no interface named {0}")]
    NoInterface(String),
    #[error("write sysctl {path}: {source}")]
    Sysctl {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl VipError {
    pub fn category(&self) -> &'static str {
        match self {
            VipError::Connect(_) => "connect",
            VipError::List { .. } => "list",
            VipError::Add { .. } => "add",
            VipError::Delete { .. } => "delete",
            VipError::NoInterface(_) => "no_interface",
            VipError::Sysctl { .. } => "sysctl",
        }
    }
}

/// The netlink operations the actor needs.
pub trait AddrOps {
    /// Every address of every interface, with the interface's name.
    fn addresses(&mut self) -> Result<Vec<Addr>, VipError>;
    /// `(index, name)` of every interface.
    fn interfaces(&mut self) -> Result<Vec<(u32, String)>, VipError>;
    /// Add `net` on `ifname`; already there is success.
    fn add(&mut self, ifname: &str, net: IpNet) -> Result<(), VipError>;
    /// Delete `addr`; already gone is success.
    fn delete(&mut self, addr: &Addr) -> Result<(), VipError>;
}

// ---------------------------------------------------------------------------------
// pure

/// A pool's network as the state writes it: a CIDR or `a-b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolNetwork {
    Net(IpNet),
    Range(IpAddr, IpAddr),
}

impl PoolNetwork {
    pub fn parse(s: &str) -> Option<Self> {
        if let Some((a, b)) = s.split_once('-') {
            let (a, b): (IpAddr, IpAddr) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            return (a.is_ipv4() == b.is_ipv4() && a <= b).then_some(PoolNetwork::Range(a, b));
        }
        if let Ok(n) = s.parse::<IpNet>() {
            return Some(PoolNetwork::Net(n));
        }
        s.parse::<IpAddr>()
            .ok()
            .map(|a| PoolNetwork::Net(IpNet::from(a)))
    }
    pub fn contains(&self, ip: IpAddr) -> bool {
        match *self {
            PoolNetwork::Net(n) => n.contains(&ip),
            PoolNetwork::Range(a, b) => a.is_ipv4() == ip.is_ipv4() && a <= ip && ip <= b,
        }
    }
}

/// The networks of the pools (unparseable ones are skipped: the state validated them).
pub fn pool_networks(pools: &BTreeMap<PoolName, PoolInfo>) -> Vec<(PoolName, PoolNetwork)> {
    pools
        .iter()
        .filter_map(|(n, p)| PoolNetwork::parse(&p.network).map(|net| (n.clone(), net)))
        .collect()
}

/// The interface whose address prefix contains `first` with the LONGEST prefix. Ties:
/// the first in `node_addrs` order. Host routes (/32, /128) count only for an exact
/// match. Loopback is never chosen.
pub fn detect_interface(first: IpAddr, node_addrs: &[(String, IpNet)]) -> Option<String> {
    let mut best: Option<(u8, &str)> = None;
    for (ifname, net) in node_addrs {
        if ifname == "lo" || net.addr().is_loopback() {
            continue;
        }
        if net.trunc().contains(&first) && best.is_none_or(|(len, _)| net.prefix_len() > len) {
            best = Some((net.prefix_len(), ifname));
        }
    }
    best.map(|(_, n)| n.to_string())
}

/// The state's VIPs that this node holds now: VIP -> (pool, interface).
pub fn observe(
    held: &[Addr],
    vips: &BTreeMap<IpAddr, VipState>,
) -> BTreeMap<IpAddr, (PoolName, String)> {
    held.iter()
        .filter_map(|a| {
            vips.get(&a.ip())
                .map(|v| (a.ip(), (v.pool.clone(), a.ifname.clone())))
        })
        .collect()
}

/// Addresses in `held` that lie inside one of `pools`, are VIPs we know of (`known`:
/// the VIPs of the current state and of the last applied one), and are not in `keep`
/// (this node's own addresses). Link-local and loopback addresses are never stale.
///
/// Requiring a known VIP, not only "inside a pool network", protects a node address that
/// happens to lie in a pool's network (pools are often carved from the node subnet) when
/// the state does not list it (a node that is no longer an LB node).
pub fn stale_vips(
    pools: &[PoolNetwork],
    held: &[Addr],
    known: &BTreeSet<IpAddr>,
    keep: &BTreeSet<IpAddr>,
) -> Vec<Addr> {
    held.iter()
        .filter(|a| {
            let ip = a.ip();
            let special = match ip {
                IpAddr::V4(v) => v.is_loopback() || v.is_link_local(),
                IpAddr::V6(v) => v.is_loopback() || (v.segments()[0] & 0xffc0) == 0xfe80,
            };
            !special
                && known.contains(&ip)
                && !keep.contains(&ip)
                && pools.iter().any(|p| p.contains(ip))
        })
        .cloned()
        .collect()
}

/// What [`delete_selected`] did: the addresses deleted ("already gone" counts as
/// deleted), and each that could not be, with why.
#[derive(Debug, Default)]
pub struct Deleted {
    pub removed: Vec<Addr>,
    pub failed: Vec<(Addr, VipError)>,
}

impl Deleted {
    /// `<ip>@<interface>,...`, for one log line.
    pub fn list(&self) -> String {
        self.removed
            .iter()
            .map(|a| format!("{}@{}", a.ip(), a.ifname))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The one way VIPs leave this node: every address `select` picks from those the node
/// holds now is deleted. Err: the addresses could not be listed (nothing deleted).
pub fn delete_selected(
    ops: &mut dyn AddrOps,
    select: impl FnOnce(&[Addr]) -> Vec<Addr>,
) -> Result<Deleted, VipError> {
    let held = ops.addresses()?;
    let mut done = Deleted::default();
    for a in select(&held) {
        match ops.delete(&a) {
            Ok(()) => done.removed.push(a),
            Err(e) => done.failed.push((a, e)),
        }
    }
    Ok(done)
}

/// Allow binding to addresses this node does not hold (yet), for nginx. See the module
/// docs.
pub fn allow_nonlocal_bind() -> Result<(), VipError> {
    for path in [
        "/proc/sys/net/ipv4/ip_nonlocal_bind",
        "/proc/sys/net/ipv6/ip_nonlocal_bind",
    ] {
        std::fs::write(path, "1\n").map_err(|source| VipError::Sysctl { path, source })?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// real: rtnetlink

/// [`AddrOps`] over rtnetlink, with its own single-thread runtime: call it from a plain
/// thread (the actor's control loop), not from inside an async task.
pub struct Netlink {
    rt: tokio::runtime::Runtime,
    handle: rtnetlink::Handle,
}

const EEXIST: i32 = 17;
const ENOENT: i32 = 2;
const EADDRNOTAVAIL: i32 = 99;
const ENODEV: i32 = 19;

fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.code.map(|c| -c.get()),
        _ => None,
    }
}

impl Netlink {
    pub fn new() -> Result<Self, VipError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(VipError::Connect)?;
        let handle = rt.block_on(async {
            let (conn, handle, _) = rtnetlink::new_connection()?;
            tokio::spawn(conn);
            Ok::<_, std::io::Error>(handle)
        });
        let handle = handle.map_err(VipError::Connect)?;
        Ok(Netlink { rt, handle })
    }

    async fn links(handle: &rtnetlink::Handle) -> Result<Vec<(u32, String)>, VipError> {
        use futures::TryStreamExt;
        use netlink_packet_route::link::LinkAttribute;
        let mut out = Vec::new();
        let mut s = handle.link().get().execute();
        while let Some(m) = s.try_next().await.map_err(|source| VipError::List {
            what: "links",
            source,
        })? {
            let name = m.attributes.iter().find_map(|a| match a {
                LinkAttribute::IfName(n) => Some(n.clone()),
                _ => None,
            });
            if let Some(name) = name {
                out.push((m.header.index, name));
            }
        }
        Ok(out)
    }
}

impl AddrOps for Netlink {
    fn addresses(&mut self) -> Result<Vec<Addr>, VipError> {
        use futures::TryStreamExt;
        use netlink_packet_route::address::AddressAttribute;
        let handle = self.handle.clone();
        self.rt.block_on(async move {
            let links: BTreeMap<u32, String> = Self::links(&handle).await?.into_iter().collect();
            let mut out = Vec::new();
            let mut s = handle.address().get().execute();
            while let Some(m) = s.try_next().await.map_err(|source| VipError::List {
                what: "addresses",
                source,
            })? {
                // IFA_LOCAL is the address for point-to-point links; IFA_ADDRESS otherwise.
                let local = m.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Local(ip) => Some(*ip),
                    _ => None,
                });
                let addr = local.or_else(|| {
                    m.attributes.iter().find_map(|a| match a {
                        AddressAttribute::Address(ip) => Some(*ip),
                        _ => None,
                    })
                });
                let (Some(ip), Some(ifname)) = (addr, links.get(&m.header.index)) else {
                    continue;
                };
                let Ok(net) = IpNet::new(ip, m.header.prefix_len) else {
                    continue;
                };
                out.push(Addr {
                    ifname: ifname.clone(),
                    index: m.header.index,
                    net,
                });
            }
            out.sort();
            Ok(out)
        })
    }

    fn interfaces(&mut self) -> Result<Vec<(u32, String)>, VipError> {
        let handle = self.handle.clone();
        self.rt.block_on(async move { Self::links(&handle).await })
    }

    fn add(&mut self, ifname: &str, net: IpNet) -> Result<(), VipError> {
        let index = self
            .interfaces()?
            .into_iter()
            .find(|(_, n)| n == ifname)
            .map(|(i, _)| i)
            .ok_or_else(|| VipError::NoInterface(ifname.to_string()))?;
        let handle = self.handle.clone();
        self.rt.block_on(async move {
            match handle
                .address()
                .add(index, net.addr(), net.prefix_len())
                .execute()
                .await
            {
                Ok(()) => Ok(()),
                Err(e) if errno(&e) == Some(EEXIST) => Ok(()),
                Err(source) => Err(VipError::Add {
                    addr: net,
                    ifname: ifname.to_string(),
                    source,
                }),
            }
        })
    }

    fn delete(&mut self, addr: &Addr) -> Result<(), VipError> {
        use futures::TryStreamExt;
        let handle = self.handle.clone();
        let a = addr.clone();
        self.rt.block_on(async move {
            let mut s = handle
                .address()
                .get()
                .set_link_index_filter(a.index)
                .set_address_filter(a.ip())
                .set_prefix_length_filter(a.net.prefix_len())
                .execute();
            let msg = match s.try_next().await {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()), // already gone
                Err(e) if matches!(errno(&e), Some(ENOENT | ENODEV | EADDRNOTAVAIL)) => {
                    return Ok(())
                }
                Err(source) => {
                    return Err(VipError::List {
                        what: "addresses",
                        source,
                    })
                }
            };
            drop(s);
            match handle.address().del(msg).execute().await {
                Ok(()) => Ok(()),
                Err(e) if matches!(errno(&e), Some(ENOENT | ENODEV | EADDRNOTAVAIL)) => Ok(()),
                Err(source) => Err(VipError::Delete {
                    addr: a.net,
                    ifname: a.ifname.clone(),
                    source,
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(ifname: &str, net: &str) -> Addr {
        Addr {
            ifname: ifname.into(),
            index: 1,
            net: net.parse().unwrap(),
        }
    }

    #[test]
    fn longest_prefix_wins() {
        let addrs = vec![
            ("lo".to_string(), "127.0.0.1/8".parse().unwrap()),
            ("eth0".to_string(), "198.18.0.5/16".parse().unwrap()),
            ("eth1".to_string(), "198.18.3.5/24".parse().unwrap()),
            ("eth2".to_string(), "198.19.0.5/24".parse().unwrap()),
            ("eth3".to_string(), "fd00:1::5/64".parse().unwrap()),
        ];
        let d = |ip: &str| detect_interface(ip.parse().unwrap(), &addrs);
        assert_eq!(d("198.18.3.100").as_deref(), Some("eth1"));
        assert_eq!(d("198.18.4.100").as_deref(), Some("eth0"));
        assert_eq!(d("198.19.0.200").as_deref(), Some("eth2"));
        assert_eq!(d("fd00:1::100").as_deref(), Some("eth3"));
        assert_eq!(d("203.0.113.1"), None);
        assert_eq!(d("127.0.0.2"), None);
        // order of the list does not matter
        let mut rev = addrs.clone();
        rev.reverse();
        assert_eq!(
            detect_interface("198.18.3.100".parse().unwrap(), &rev).as_deref(),
            Some("eth1")
        );
    }

    #[test]
    fn pool_network_parsing() {
        let r = PoolNetwork::parse("198.18.1.10-198.18.1.20").unwrap();
        assert!(r.contains("198.18.1.10".parse().unwrap()));
        assert!(r.contains("198.18.1.20".parse().unwrap()));
        assert!(!r.contains("198.18.1.21".parse().unwrap()));
        assert!(!r.contains("::1".parse().unwrap()));
        let n = PoolNetwork::parse("fd00:2::/64").unwrap();
        assert!(n.contains("fd00:2::9".parse().unwrap()));
        assert!(PoolNetwork::parse("198.18.1.20-198.18.1.10").is_none());
        assert!(PoolNetwork::parse("x").is_none());
        assert!(PoolNetwork::parse("198.18.1.7")
            .unwrap()
            .contains("198.18.1.7".parse().unwrap()));
    }

    #[test]
    fn stale_respects_pools_and_keep() {
        let pools = vec![
            PoolNetwork::parse("198.18.1.0/24").unwrap(),
            PoolNetwork::parse("fd00:2::/64").unwrap(),
        ];
        let held = vec![
            a("eth0", "198.18.1.5/24"), // the node's own address, inside the pool network
            a("eth0", "198.18.1.10/32"), // a VIP left behind
            a("eth0", "198.18.2.10/32"), // not ours
            a("eth1", "fd00:2::10/128"),
            a("eth1", "fe80::1/64"),
            a("eth0", "198.18.1.6/24"), // in the pool network, not a known VIP: left alone
        ];
        let keep: BTreeSet<IpAddr> = ["198.18.1.5".parse().unwrap()].into();
        let known: BTreeSet<IpAddr> = [
            "198.18.1.5",
            "198.18.1.10",
            "198.18.2.10",
            "fd00:2::10",
            "fe80::1",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let s = stale_vips(&pools, &held, &known, &keep);
        assert_eq!(
            s,
            vec![a("eth0", "198.18.1.10/32"), a("eth1", "fd00:2::10/128")]
        );
    }

    #[test]
    fn observe_reports_held_vips_with_pool() {
        let pool: PoolName = "default".parse().unwrap();
        let vip = |p: &PoolName| VipState {
            pool: p.clone(),
            vrid: 1,
            owner: None,
            services: vec![],
            ingress: false,
            gateways: vec![],
        };
        let vips: BTreeMap<IpAddr, VipState> = [
            ("198.18.1.10".parse().unwrap(), vip(&pool)),
            ("198.18.1.11".parse().unwrap(), vip(&pool)),
        ]
        .into();
        let held = vec![a("eth0", "198.18.1.10/24"), a("eth0", "198.18.1.5/24")];
        let o = observe(&held, &vips);
        assert_eq!(o.len(), 1);
        assert_eq!(
            o[&"198.18.1.10".parse::<IpAddr>().unwrap()],
            (pool, "eth0".to_string())
        );
    }
}
