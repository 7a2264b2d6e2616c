//! BGP mode (issue 25): pools whose addresses every LB node announces to the routers as
//! host routes, so the routers spread flows over all of them (ECMP), instead of one node
//! holding each address (VRRP, the default).
//!
//! The types here are what the global config's `bgp` key and a pool's `"mode": "bgp"`
//! become once checked ([`crate::config`]), and what the state carries to the actors
//! ([`crate::state::ActorConfig::bgp`]). Every value is typed (addresses, numbers, node
//! names): nothing of it is free text, so rendering it into `frr.conf` pastes nothing a
//! user wrote.

use crate::names::{string_newtype, NameError, NodeName};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

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
    /// The Secret of k8slb's namespace whose key [`PASSWORD_KEY`] is the session's TCP
    /// MD5 password (RFC 2385). Only the name travels in the state: the actors read the
    /// Secret themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<SecretName>,
}

string_newtype!(
    /// The name of a Secret (RFC 1123 subdomain): also a directory name on the nodes
    /// (`<bgp secrets dir>/<name>/password`), which a subdomain always is.
    SecretName,
    "Secret name",
    crate::names::is_dns_subdomain,
    "a Secret name is an RFC 1123 subdomain (lowercase letters, digits, '-' and '.')"
);

/// The key of a BGP password Secret that holds the password (the `password` of a
/// `kubernetes.io/basic-auth` Secret, as MetalLB's BGP peers use).
pub const PASSWORD_KEY: &str = "password";
/// The type of a BGP password Secret.
pub const PASSWORD_SECRET_TYPE: &str = "kubernetes.io/basic-auth";
/// The kernel's longest TCP MD5 key (`TCP_MD5SIG_MAXKEYLEN`).
pub const PASSWORD_MAX_BYTES: usize = 80;

/// A session's TCP MD5 password, checked: 1 to [`PASSWORD_MAX_BYTES`] printable ASCII
/// characters, no whitespace (one word of `frr.conf`; a trailing newline of the Secret's
/// value is dropped). `Debug` never prints it; only [`BgpPassword::expose`] does, for the
/// config file.
#[derive(Clone, PartialEq, Eq)]
pub struct BgpPassword(String);

impl BgpPassword {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for BgpPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BgpPassword(<redacted>)")
    }
}

impl Serialize for BgpPassword {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// Why a Secret's value is not a password. Says nothing of the value but its length.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    #[error("is empty")]
    Empty,
    #[error("is {0} bytes long; TCP MD5 takes at most {PASSWORD_MAX_BYTES}")]
    TooLong(usize),
    #[error("holds a character that is not printable ASCII, or whitespace")]
    Character,
}

impl TryFrom<&[u8]> for BgpPassword {
    type Error = PasswordError;
    fn try_from(b: &[u8]) -> Result<Self, PasswordError> {
        let b = b
            .strip_suffix(b"\r\n")
            .or_else(|| b.strip_suffix(b"\n"))
            .unwrap_or(b);
        if b.is_empty() {
            return Err(PasswordError::Empty);
        }
        if b.len() > PASSWORD_MAX_BYTES {
            return Err(PasswordError::TooLong(b.len()));
        }
        if !b.iter().all(|c| c.is_ascii_graphic()) {
            return Err(PasswordError::Character);
        }
        Ok(BgpPassword(String::from_utf8_lossy(b).into_owned()))
    }
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
            password_secret: None,
        };
        assert!(p.applies_to(&n("lb-1")));
        p.nodes = vec![n("lb-2")];
        assert!(!p.applies_to(&n("lb-1")));
        assert!(p.applies_to(&n("lb-2")));
    }

    #[test]
    fn a_password_is_one_word_of_printable_ascii_the_kernel_takes() {
        let ok = |b: &[u8]| BgpPassword::try_from(b).map(|p| p.expose().to_string());
        assert_eq!(ok(b"s3cret!x\n").as_deref(), Ok("s3cret!x"));
        assert_eq!(ok(b"a\r\n").as_deref(), Ok("a"));
        let all: Vec<u8> = (0x21..=0x7e).collect();
        assert!(ok(&all[..80]).is_ok());
        assert_eq!(ok(b""), Err(PasswordError::Empty));
        assert_eq!(ok(b"\n"), Err(PasswordError::Empty));
        assert_eq!(ok(&[b'a'; 81]), Err(PasswordError::TooLong(81)));
        for bad in [
            &b"two words"[..],
            b"tab\tx",
            b"line\nbreak",
            b"nul\0",
            "é".as_bytes(),
        ] {
            assert_eq!(ok(bad), Err(PasswordError::Character), "{bad:?}");
        }
        let p = BgpPassword::try_from(&b"hunter2"[..]).unwrap();
        assert!(!format!("{p:?}").contains("hunter2"));
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"hunter2\"");
    }

    #[test]
    fn a_password_secret_name_is_a_subdomain() {
        assert!("bgp-peer.auth".parse::<SecretName>().is_ok());
        for bad in ["", "../x", "a/b", "UPPER", "a b"] {
            assert!(bad.parse::<SecretName>().is_err(), "{bad:?}");
        }
    }
}
