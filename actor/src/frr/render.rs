//! The pure part of BGP mode: which addresses this node announces ([`announced`]), and
//! `frr.conf` from the state ([`FrrView`] through `templates/frr.conf.tera`).
//!
//! What the config says, whatever the state:
//! - each peer of this node (`bgp.peers`, those whose `nodes` name it or name none) in
//!   the address family of its address, with its hold time, and BFD (profile `k8slb`,
//!   the `bgp.bfd` timers) when it asks for it;
//! - one `network` line per announced host route (/32, /128) and nothing redistributed;
//!   `no bgp network import-check`, since the address is on `lo` and not in the RIB as
//!   a route of its own;
//! - outbound, only host routes inside a BGP-mode pool's network (`k8slb-out-v4/-v6`);
//!   inbound, nothing (`k8slb-in` denies all): an LB node never learns routes from the
//!   routers, so zebra changes nothing in the node's routing table, and the node can
//!   never be a transit between its peers.
//!
//! - a peer with a `passwordSecret` gets `neighbor ... password`, its TCP MD5 key, read
//!   from the Secret by the caller and checked ([`BgpPassword`]); while the password is
//!   not there or not usable the peer is left out ([`FrrView::left_out`]), never
//!   configured without it.
//!
//! Every value is typed (addresses, numbers, the node name, a checked password): nothing
//! is free text.

use ipnet::IpNet;
use k8slb_common::bgp::{BfdTimers, BgpPassword, PoolMode, SecretName};
use k8slb_common::names::NodeName;
use k8slb_common::state::State;
use serde::Serialize;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use tera::{Context, Tera};

/// The template, embedded (a `--templates` directory's `frr.conf.tera` overrides it).
pub const TEMPLATE: &str = include_str!("../../../templates/frr.conf.tera");
const NAME: &str = "frr.conf.tera";

/// The VIPs of the state's BGP-mode pools.
pub fn bgp_vips(state: &State) -> BTreeSet<IpAddr> {
    state
        .vips
        .iter()
        .filter(|(_, v)| {
            state
                .config
                .pools
                .get(&v.pool)
                .is_some_and(|p| p.mode == PoolMode::Bgp)
        })
        .map(|(ip, _)| *ip)
        .collect()
}

/// What this node announces: the BGP-mode VIPs that its proxy serves now (`serving`;
/// `None`: no proxy of ours, kube-proxy serves every VIP), and none at all when the node
/// is not an LB node of the state (drained, unlabelled, not Ready).
pub fn announced(
    state: &State,
    node: &NodeName,
    serving: Option<&BTreeSet<IpAddr>>,
) -> BTreeSet<IpAddr> {
    if !state.nodes.contains_key(node) {
        return BTreeSet::new();
    }
    bgp_vips(state)
        .into_iter()
        .filter(|ip| serving.is_none_or(|s| s.contains(ip)))
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerView {
    pub address: IpAddr,
    pub asn: u32,
    pub keepalive_s: u16,
    pub hold_time_s: u16,
    pub bfd: bool,
    /// An IPv4 session (announces the IPv4 routes); otherwise IPv6.
    pub v4: bool,
    /// The TCP MD5 password (`passwordSecret`).
    pub password: Option<BgpPassword>,
}

/// A peer of this node that the config leaves out, and why (its password).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    pub address: IpAddr,
    pub asn: u32,
    pub why: String,
}

/// Where a peer's password comes from: the Secret's name to the password, or why there
/// is none (the caller reads the node's copy of the Secret).
pub type Passwords<'a> = &'a dyn Fn(&SecretName) -> Result<BgpPassword, String>;

/// Everything `frr.conf` says, typed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrrView {
    pub node: NodeName,
    pub asn: u32,
    pub router_id: Option<Ipv4Addr>,
    pub peers: Vec<PeerView>,
    /// Set when a peer runs BFD.
    pub bfd: Option<BfdTimers>,
    pub v4_networks: Vec<IpNet>,
    pub v6_networks: Vec<IpNet>,
    pub v4_announced: Vec<IpNet>,
    pub v6_announced: Vec<IpNet>,
    /// Peers of this node not in the config (their password is missing or unusable).
    #[serde(skip)]
    pub left_out: Vec<LeftOut>,
}

impl FrrView {
    /// The host routes announced.
    pub fn prefixes(&self) -> impl Iterator<Item = &IpNet> {
        self.v4_announced.iter().chain(&self.v6_announced)
    }

    /// `text` with every password of this view replaced (a checker's message can quote
    /// the config line).
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for pw in self.peers.iter().filter_map(|p| p.password.as_ref()) {
            out = out.replace(pw.expose(), "<redacted>");
        }
        out
    }
}

/// The view of this node, or `None` when it runs no BGP: the state has no BGP-mode
/// pool, or no `bgp` peers for this node.
///
/// `node_addresses`: this node's own addresses (the first IPv4 one is the router ID;
/// without one FRR picks its own).
pub fn frr_view(
    state: &State,
    node: &NodeName,
    node_addresses: &[IpAddr],
    announce: &BTreeSet<IpAddr>,
    passwords: Passwords<'_>,
) -> Option<FrrView> {
    let bgp = state.config.bgp.as_ref()?;
    let bgp_pools: Vec<_> = state
        .config
        .pools
        .values()
        .filter(|p| p.mode == PoolMode::Bgp)
        .collect();
    if bgp_pools.is_empty() {
        return None;
    }
    let mut peers = Vec::new();
    let mut left_out = Vec::new();
    for p in bgp.peers.iter().filter(|p| p.applies_to(node)) {
        let password = match p.password_secret.as_ref().map(passwords) {
            None => None,
            Some(Ok(pw)) => Some(pw),
            Some(Err(why)) => {
                left_out.push(LeftOut {
                    address: p.address,
                    asn: p.asn.get(),
                    why,
                });
                continue;
            }
        };
        peers.push(PeerView {
            address: p.address,
            asn: p.asn.get(),
            keepalive_s: p.hold_time_s / 3,
            hold_time_s: p.hold_time_s,
            bfd: p.bfd,
            v4: p.address.is_ipv4(),
            password,
        });
    }
    if peers.is_empty() && left_out.is_empty() {
        return None;
    }
    let mut v4_networks = BTreeSet::new();
    let mut v6_networks = BTreeSet::new();
    for p in &bgp_pools {
        // A range network (`a-b`) is not one prefix: any host route of the family.
        let net = p
            .network
            .parse::<IpNet>()
            .map(|n| n.trunc())
            .unwrap_or(match p.family {
                k8slb_common::state::Family::V4 => "0.0.0.0/0".parse().expect("net"),
                k8slb_common::state::Family::V6 => "::/0".parse().expect("net"),
            });
        if net.addr().is_ipv4() {
            v4_networks.insert(net);
        } else {
            v6_networks.insert(net);
        }
    }
    let host = |ip: &IpAddr| IpNet::from(*ip);
    Some(FrrView {
        node: node.clone(),
        asn: bgp.asn.get(),
        router_id: node_addresses.iter().find_map(|a| match a {
            IpAddr::V4(v) => Some(*v),
            IpAddr::V6(_) => None,
        }),
        bfd: peers.iter().any(|p| p.bfd).then_some(bgp.bfd),
        peers,
        v4_networks: v4_networks.into_iter().collect(),
        v6_networks: v6_networks.into_iter().collect(),
        v4_announced: announce.iter().filter(|a| a.is_ipv4()).map(host).collect(),
        v6_announced: announce.iter().filter(|a| a.is_ipv6()).map(host).collect(),
        left_out,
    })
}

#[derive(Debug, thiserror::Error)]
#[error("frr.conf template: {0}")]
pub struct FrrRenderError(String);

fn tera_error(e: tera::Error) -> FrrRenderError {
    use std::error::Error;
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(&format!(": {c}"));
        src = c.source();
    }
    FrrRenderError(s)
}

/// The `frr.conf` template, parsed once.
pub struct FrrRenderer {
    tera: Tera,
}

impl FrrRenderer {
    pub fn embedded() -> Result<Self, FrrRenderError> {
        Self::from_text(TEMPLATE)
    }

    /// `dir/frr.conf.tera` if it exists (the `--templates` directory), else the embedded one.
    pub fn from_dir(dir: &std::path::Path) -> Result<Self, FrrRenderError> {
        match std::fs::read_to_string(dir.join(NAME)) {
            Ok(t) => Self::from_text(&t),
            Err(_) => Self::embedded(),
        }
    }

    fn from_text(text: &str) -> Result<Self, FrrRenderError> {
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        tera.add_raw_template(NAME, text).map_err(tera_error)?;
        Ok(FrrRenderer { tera })
    }

    pub fn render(&self, view: &FrrView) -> Result<String, FrrRenderError> {
        let ctx = Context::from_serialize(view).map_err(tera_error)?;
        self.tera.render(NAME, &ctx).map_err(tera_error)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8slb_common::config::parse_global_config;
    use k8slb_common::state::{LbNode, VipState};

    pub(crate) const CONFIG: &str = r#"{ "pools": {
        "default": { "network": "198.18.1.0/24", "range": "198.18.1.10-198.18.1.20" },
        "ecmp": { "network": "198.18.10.0/24", "range": "198.18.10.10-198.18.10.20", "mode": "bgp" },
        "ecmp6": { "network": "fd00:10::/64", "range": "fd00:10::10-fd00:10::20", "mode": "bgp" } },
      "bgp": { "asn": 64512, "peers": [
        { "address": "198.18.3.1", "asn": 64513, "bfd": true },
        { "address": "198.18.4.1", "asn": 64514, "holdTime": 30, "nodes": ["lb-2"] },
        { "address": "fd00:3::1", "asn": 64513 } ] } }"#;

    fn n(s: &str) -> NodeName {
        s.parse().unwrap()
    }

    /// No peer of [`CONFIG`] has a password.
    pub(crate) fn no_passwords(name: &SecretName) -> Result<BgpPassword, String> {
        Err(format!("no Secret {name}"))
    }

    pub(crate) fn state() -> State {
        let cfg = parse_global_config(CONFIG).unwrap();
        let mut s = State::empty(cfg.actor_config(&Default::default()));
        for node in ["lb-1", "lb-2"] {
            s.nodes.insert(n(node), LbNode { addresses: vec![] });
        }
        for (ip, pool) in [
            ("198.18.1.10", "default"),
            ("198.18.10.10", "ecmp"),
            ("198.18.10.11", "ecmp"),
            ("fd00:10::10", "ecmp6"),
        ] {
            s.vips.insert(
                ip.parse().unwrap(),
                VipState {
                    pool: pool.parse().unwrap(),
                    vrid: 0,
                    owner: None,
                    services: vec![],
                    ingress: false,
                    gateways: vec![],
                },
            );
        }
        s
    }

    fn ips(v: &[&str]) -> BTreeSet<IpAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn only_bgp_vips_that_the_proxy_serves_are_announced() {
        let s = state();
        let all = announced(&s, &n("lb-1"), None);
        assert_eq!(all, ips(&["198.18.10.10", "198.18.10.11", "fd00:10::10"]));
        let serving = ips(&["198.18.1.10", "198.18.10.11"]);
        assert_eq!(
            announced(&s, &n("lb-1"), Some(&serving)),
            ips(&["198.18.10.11"])
        );
        // The proxy is down: nothing.
        assert!(announced(&s, &n("lb-1"), Some(&BTreeSet::new())).is_empty());
        // A node that left the LB nodes (drained) announces nothing.
        assert!(announced(&s, &n("lb-9"), None).is_empty());
    }

    #[test]
    fn peers_are_chosen_per_node_and_no_bgp_pool_means_no_frr() {
        let s = state();
        let v = frr_view(
            &s,
            &n("lb-1"),
            &["198.18.3.2".parse().unwrap()],
            &BTreeSet::new(),
            &no_passwords,
        )
        .unwrap();
        let addrs: Vec<String> = v.peers.iter().map(|p| p.address.to_string()).collect();
        assert_eq!(addrs, ["198.18.3.1", "fd00:3::1"]);
        assert_eq!(v.router_id, Some("198.18.3.2".parse().unwrap()));
        assert!(v.bfd.is_some());
        let v2 = frr_view(&s, &n("lb-2"), &[], &BTreeSet::new(), &no_passwords).unwrap();
        assert_eq!(v2.peers.len(), 3);
        assert_eq!((v2.peers[1].keepalive_s, v2.peers[1].hold_time_s), (10, 30));
        assert_eq!(v2.router_id, None);
        let mut vrrp_only = s.clone();
        for p in vrrp_only.config.pools.values_mut() {
            p.mode = PoolMode::Vrrp;
        }
        assert!(frr_view(&vrrp_only, &n("lb-1"), &[], &BTreeSet::new(), &no_passwords).is_none());
    }

    #[test]
    fn frr_conf_snapshot() {
        let s = state();
        let a = announced(&s, &n("lb-1"), None);
        let v = frr_view(
            &s,
            &n("lb-1"),
            &["198.18.3.2".parse().unwrap()],
            &a,
            &no_passwords,
        )
        .unwrap();
        let text = FrrRenderer::embedded().unwrap().render(&v).unwrap();
        insta::assert_snapshot!("frr_conf_lb1", text);
    }

    /// A state whose first peer (198.18.3.1) takes its password from Secret `bgp-auth`.
    pub(crate) fn state_with_password() -> State {
        let mut s = state();
        let bgp = s.config.bgp.as_mut().unwrap();
        bgp.peers[0].password_secret = Some("bgp-auth".parse().unwrap());
        s
    }

    #[test]
    fn a_peer_gets_its_password_or_is_left_out_never_configured_without_it() {
        let s = state_with_password();
        let secret = |name: &SecretName| {
            assert_eq!(name.as_str(), "bgp-auth");
            BgpPassword::try_from(&b"s3cret!x"[..]).map_err(|e| e.to_string())
        };
        let v = frr_view(&s, &n("lb-1"), &[], &BTreeSet::new(), &secret).unwrap();
        let text = FrrRenderer::embedded().unwrap().render(&v).unwrap();
        assert!(
            text.contains(" neighbor 198.18.3.1 password s3cret!x\n"),
            "{text}"
        );
        assert_eq!(text.matches(" password ").count(), 1, "{text}");
        assert!(v.left_out.is_empty());
        assert_eq!(
            v.redact("line 30: neighbor 198.18.3.1 password s3cret!x"),
            "line 30: neighbor 198.18.3.1 password <redacted>"
        );
        assert!(!format!("{v:?}").contains("s3cret"));

        let v = frr_view(&s, &n("lb-1"), &[], &BTreeSet::new(), &no_passwords).unwrap();
        let text = FrrRenderer::embedded().unwrap().render(&v).unwrap();
        assert!(!text.contains("198.18.3.1"), "{text}");
        assert!(text.contains("neighbor fd00:3::1 remote-as"), "{text}");
        assert_eq!(
            v.left_out,
            [LeftOut {
                address: "198.18.3.1".parse().unwrap(),
                asn: 64513,
                why: "no Secret bgp-auth".into()
            }]
        );
    }
}
