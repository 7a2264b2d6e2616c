//! BGP mode (issue 25): pools whose addresses every LB node announces to the routers as
//! host routes, so the routers spread flows over all of them (ECMP), instead of one node
//! holding each address (VRRP, the default).
//!
//! The types here are what the global config's `bgp` key and a pool's `"mode": "bgp"`
//! become once checked ([`crate::config`]), and what the state carries to the actors
//! ([`crate::state::ActorConfig::bgp`]). Every value is typed (addresses, numbers, node
//! names): nothing of it is free text, so rendering it into `frr.conf` pastes nothing a
//! user wrote.

use crate::names::NodeName;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::IpAddr;

/// How a pool's addresses reach the network.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    /// keepalived holds each address on one node at a time (the default).
    #[default]
    Vrrp,
    /// Every LB node binds the addresses on `lo` and announces them through FRR.
    Bgp,
}

impl PoolMode {
    pub fn is_vrrp(&self) -> bool {
        *self == PoolMode::Vrrp
    }
    pub fn as_str(self) -> &'static str {
        match self {
            PoolMode::Vrrp => "vrrp",
            PoolMode::Bgp => "bgp",
        }
    }
}

impl fmt::Display for PoolMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An autonomous system number: 1..=4294967294, not 23456 (`AS_TRANS`, RFC 6793).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Asn(u32);

impl Asn {
    pub fn get(self) -> u32 {
        self.0
    }
}

impl TryFrom<u64> for Asn {
    type Error = &'static str;
    fn try_from(n: u64) -> Result<Self, Self::Error> {
        match n {
            0 => Err("0 is reserved"),
            23456 => Err("23456 is AS_TRANS (RFC 6793), not an AS of its own"),
            4294967295 => Err("4294967295 is reserved"),
            n => u32::try_from(n)
                .map(Asn)
                .map_err(|_| "an AS number is at most 4294967294"),
        }
    }
}

impl<'de> Deserialize<'de> for Asn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Asn::try_from(u64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Asn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Our default BFD timers: 50 ms both ways, 3 missed packets. BFD runs at the slower
/// side's rate, so a router configured for 50 ms x 3 declares a dead node down within
/// 150 ms (FRR's own default, 300 ms x 3, gives about 850 ms).
pub const DEFAULT_BFD_INTERVAL_MS: u32 = 50;
pub const DEFAULT_BFD_MULTIPLIER: u8 = 3;
/// FRR's limits: intervals 10..=60000 ms, multiplier 2..=255.
pub const BFD_INTERVAL_MS: std::ops::RangeInclusive<u32> = 10..=60000;
pub const BFD_MULTIPLIER: std::ops::RangeInclusive<u8> = 2..=255;

/// The BFD timers of this node's side (`bgp.bfd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BfdTimers {
    pub receive_interval_ms: u32,
    pub transmit_interval_ms: u32,
    pub detect_multiplier: u8,
}

impl Default for BfdTimers {
    fn default() -> Self {
        BfdTimers {
            receive_interval_ms: DEFAULT_BFD_INTERVAL_MS,
            transmit_interval_ms: DEFAULT_BFD_INTERVAL_MS,
            detect_multiplier: DEFAULT_BFD_MULTIPLIER,
        }
    }
}

/// A BGP hold time in seconds: 0 (no keepalives) or 3..=65535 (RFC 4271).
pub const HOLD_TIME_S: std::ops::RangeInclusive<u16> = 3..=65535;
/// FRR's `frr defaults datacenter` timers (keepalive 3 s, hold 9 s).
pub const DEFAULT_HOLD_TIME_S: u16 = 9;

/// One router this node peers with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpPeer {
    pub address: IpAddr,
    pub asn: Asn,
    /// Run BFD on this session (with [`BgpSettings::bfd`]'s timers).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bfd: bool,
    /// Hold time in seconds (the keepalive is a third of it).
    pub hold_time_s: u16,
    /// Only these LB nodes peer with this router; empty: every LB node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeName>,
}

impl BgpPeer {
    /// Whether `node` has a session with this peer.
    pub fn applies_to(&self, node: &NodeName) -> bool {
        self.nodes.is_empty() || self.nodes.contains(node)
    }
}

/// The global config's `bgp` key, checked: this cluster's AS, the routers, BFD timers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpSettings {
    pub asn: Asn,
    /// Sorted by address, no address twice.
    pub peers: Vec<BgpPeer>,
    #[serde(default)]
    pub bfd: BfdTimers,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asn_refuses_reserved_numbers() {
        for bad in [0u64, 23456, 4294967295, 1 << 32] {
            assert!(Asn::try_from(bad).is_err(), "{bad}");
        }
        assert_eq!(Asn::try_from(64512).unwrap().get(), 64512);
        assert_eq!(Asn::try_from(4200000000).unwrap().get(), 4200000000);
        assert!(serde_json::from_str::<Asn>("0").is_err());
        assert!(serde_json::from_str::<Asn>("\"64512\"").is_err());
    }

    #[test]
    fn pool_mode_defaults_to_vrrp_and_reads_lowercase() {
        assert_eq!(PoolMode::default(), PoolMode::Vrrp);
        assert_eq!(
            serde_json::from_str::<PoolMode>("\"bgp\"").unwrap(),
            PoolMode::Bgp
        );
        assert!(serde_json::from_str::<PoolMode>("\"BGP; evil\"").is_err());
    }

    #[test]
    fn a_peer_without_nodes_applies_to_every_node() {
        let n = |s: &str| s.parse::<NodeName>().unwrap();
        let mut p = BgpPeer {
            address: "198.18.3.1".parse().unwrap(),
            asn: Asn::try_from(64513).unwrap(),
            bfd: true,
            hold_time_s: DEFAULT_HOLD_TIME_S,
            nodes: vec![],
        };
        assert!(p.applies_to(&n("lb-1")));
        p.nodes = vec![n("lb-2")];
        assert!(!p.applies_to(&n("lb-1")));
        assert!(p.applies_to(&n("lb-2")));
    }
}
