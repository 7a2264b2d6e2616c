//! The checker of `bgp` and of a pool's `mode` (see [`crate::bgp`]).

use super::*;
use crate::bgp::{
    Asn, BfdTimers, BgpPeer, BgpSettings, PoolMode, SecretName, BFD_INTERVAL_MS, BFD_MULTIPLIER,
    DEFAULT_HOLD_TIME_S, HOLD_TIME_S,
};
use crate::names::NodeName;
use std::collections::BTreeSet;
use std::net::IpAddr;

pub(in crate::config) const BGP_KEYS: &[&str] = &["asn", "peers", "bfd"];
pub(in crate::config) const BGP_PEER_KEYS: &[&str] = &[
    "address",
    "asn",
    "bfd",
    "holdTime",
    "nodes",
    "passwordSecret",
];
pub(in crate::config) const BFD_KEYS: &[&str] =
    &["receiveInterval", "transmitInterval", "detectMultiplier"];

impl Checker {
    /// `pools.<name>.mode`: `"vrrp"` (default) or `"bgp"`, any case.
    pub(super) fn pool_mode(&mut self, path: &str, pm: &Map<String, Value>) -> PoolMode {
        let Some(v) = pm.get("mode") else {
            return PoolMode::Vrrp;
        };
        match v.as_str().map(str::to_ascii_lowercase).as_deref() {
            Some("vrrp") => PoolMode::Vrrp,
            Some("bgp") => PoolMode::Bgp,
            _ => {
                self.err(
                    &join(path, "mode"),
                    format!("expected \"vrrp\" or \"bgp\", found {v}"),
                );
                PoolMode::Vrrp
            }
        }
    }

    /// A pool in BGP mode needs routers to announce to.
    pub(super) fn bgp_pools_have_peers(&mut self, cfg: &GlobalConfig) {
        let has_peers = cfg.bgp.as_ref().is_some_and(|b| !b.peers.is_empty());
        for (name, pool) in &cfg.pools {
            if pool.mode == PoolMode::Bgp && !has_peers {
                self.err(
                    &join(&join("pools", name.as_str()), "mode"),
                    "\"bgp\" needs the top-level bgp key with an asn and at least one peer \
                     (e.g. \"bgp\": {\"asn\": 64512, \"peers\": [{\"address\": \"198.18.3.1\", \"asn\": 64513}]})",
                );
            }
        }
    }

    /// `bgp`: `{ "asn": N, "peers": [...], "bfd": {...} }`.
    pub(super) fn bgp(&mut self, v: &Value) -> Option<BgpSettings> {
        let m = self.object("bgp", v)?;
        self.unknown_keys("bgp", m, BGP_KEYS);
        let asn = match m.get("asn") {
            Some(a) => self.asn("bgp.asn", a),
            None => {
                self.err(
                    "bgp.asn",
                    "is required (this cluster's AS number, e.g. 64512)",
                );
                None
            }
        };
        let mut peers = Vec::new();
        match m.get("peers") {
            Some(Value::Array(list)) => {
                let mut seen = BTreeSet::new();
                for (i, pv) in list.iter().enumerate() {
                    let path = format!("bgp.peers[{i}]");
                    if let Some(p) = self.bgp_peer(&path, pv) {
                        if seen.insert(p.address) {
                            peers.push(p);
                        } else {
                            self.err(
                                &join(&path, "address"),
                                format!("{} is given more than once", p.address),
                            );
                        }
                    }
                }
            }
            Some(other) => self.err(
                "bgp.peers",
                format!("expected a list of peers, found {}", kind(other)),
            ),
            None => self.err(
                "bgp.peers",
                "is required (a list of {\"address\": ..., \"asn\": ...})",
            ),
        }
        peers.sort_by_key(|p| p.address);
        let bfd = match m.get("bfd") {
            Some(b) => self.bfd_timers(b),
            None => BfdTimers::default(),
        };
        Some(BgpSettings {
            asn: asn?,
            peers,
            bfd,
        })
    }

    fn asn(&mut self, path: &str, v: &Value) -> Option<Asn> {
        let n = self.number(path, v)?;
        if n.fract() != 0.0 {
            self.err(path, format!("expected a whole AS number, found {v}"));
            return None;
        }
        match Asn::try_from(n as u64) {
            Ok(a) => Some(a),
            Err(why) => {
                self.err(path, format!("{v}: {why}"));
                None
            }
        }
    }

    fn whole(&mut self, path: &str, v: &Value, lo: u64, hi: u64) -> Option<u64> {
        match self.number(path, v) {
            Some(n) if n.fract() == 0.0 && n >= lo as f64 && n <= hi as f64 => Some(n as u64),
            Some(_) => {
                self.err(path, format!("expected a whole number from {lo} to {hi}"));
                None
            }
            None => None,
        }
    }

    fn bgp_peer(&mut self, path: &str, v: &Value) -> Option<BgpPeer> {
        let m = self.object(path, v)?;
        self.unknown_keys(path, m, BGP_PEER_KEYS);
        let address = self.peer_address(path, m);
        let asn = match m.get("asn") {
            Some(a) => self.asn(&join(path, "asn"), a),
            None => {
                self.err(&join(path, "asn"), "is required (the router's AS number)");
                None
            }
        };
        let bfd = match m.get("bfd") {
            Some(b) => self.boolean(&join(path, "bfd"), b).unwrap_or(false),
            None => false,
        };
        let mut hold_time_s = DEFAULT_HOLD_TIME_S;
        if let Some(h) = m.get("holdTime") {
            let p = join(path, "holdTime");
            match self.whole(&p, h, 0, u64::from(*HOLD_TIME_S.end())) {
                Some(0) => hold_time_s = 0,
                Some(n) if n >= u64::from(*HOLD_TIME_S.start()) => hold_time_s = n as u16,
                Some(_) => self.err(&p, "expected 0 (no keepalives) or 3 to 65535 seconds"),
                None => {}
            }
        }
        let nodes = self.peer_nodes(path, m);
        let password_secret = self.peer_password(path, m);
        Some(BgpPeer {
            address: address?,
            asn: asn?,
            bfd,
            hold_time_s,
            nodes,
            password_secret,
        })
    }

    /// A peer's `address`: a router's unicast address.
    fn peer_address(&mut self, path: &str, m: &Map<String, Value>) -> Option<IpAddr> {
        match m.get("address") {
            Some(Value::String(s)) => match s.trim().parse::<IpAddr>() {
                Ok(a) if a.is_unspecified() || a.is_multicast() || a.is_loopback() => {
                    self.err(
                        &join(path, "address"),
                        format!("{a} is not a router's unicast address"),
                    );
                    None
                }
                Ok(a) => Some(a),
                Err(_) => {
                    self.err(
                        &join(path, "address"),
                        format!("expected an IP address, found {s:?}"),
                    );
                    None
                }
            },
            Some(other) => {
                self.err(
                    &join(path, "address"),
                    format!("expected an IP address, found {}", kind(other)),
                );
                None
            }
            None => {
                self.err(&join(path, "address"), "is required");
                None
            }
        }
    }

    /// A peer's `nodes`: the nodes that peer with it (sorted, once each).
    fn peer_nodes(&mut self, path: &str, m: &Map<String, Value>) -> Vec<NodeName> {
        let mut nodes = Vec::new();
        match m.get("nodes") {
            None => {}
            Some(Value::Array(list)) => {
                for (i, n) in list.iter().enumerate() {
                    let p = format!("{}[{i}]", join(path, "nodes"));
                    match n.as_str().map(str::parse::<NodeName>) {
                        Some(Ok(n)) => nodes.push(n),
                        Some(Err(e)) => self.err(&p, e),
                        None => self.err(&p, format!("expected a node name, found {n}")),
                    }
                }
                nodes.sort();
                nodes.dedup();
            }
            Some(other) => self.err(
                &join(path, "nodes"),
                format!("expected a list of node names, found {}", kind(other)),
            ),
        }
        nodes
    }

    /// A peer's `passwordSecret`: a Secret's name in k8slb's namespace.
    fn peer_password(&mut self, path: &str, m: &Map<String, Value>) -> Option<SecretName> {
        match m.get("passwordSecret") {
            None => None,
            Some(Value::String(n)) => match n.parse::<SecretName>() {
                Ok(n) => Some(n),
                Err(e) => {
                    self.err(&join(path, "passwordSecret"), e);
                    None
                }
            },
            Some(other) => {
                self.err(
                    &join(path, "passwordSecret"),
                    format!(
                        "expected the name of a Secret in k8slb's namespace, found {}",
                        kind(other)
                    ),
                );
                None
            }
        }
    }

    fn bfd_timers(&mut self, v: &Value) -> BfdTimers {
        let mut t = BfdTimers::default();
        let Some(m) = self.object("bgp.bfd", v) else {
            return t;
        };
        self.unknown_keys("bgp.bfd", m, BFD_KEYS);
        let (lo, hi) = (
            u64::from(*BFD_INTERVAL_MS.start()),
            u64::from(*BFD_INTERVAL_MS.end()),
        );
        if let Some(x) = m.get("receiveInterval") {
            if let Some(n) = self.whole("bgp.bfd.receiveInterval", x, lo, hi) {
                t.receive_interval_ms = n as u32;
            }
        }
        if let Some(x) = m.get("transmitInterval") {
            if let Some(n) = self.whole("bgp.bfd.transmitInterval", x, lo, hi) {
                t.transmit_interval_ms = n as u32;
            }
        }
        if let Some(x) = m.get("detectMultiplier") {
            let (lo, hi) = (
                u64::from(*BFD_MULTIPLIER.start()),
                u64::from(*BFD_MULTIPLIER.end()),
            );
            if let Some(n) = self.whole("bgp.bfd.detectMultiplier", x, lo, hi) {
                t.detect_multiplier = n as u8;
            }
        }
        t
    }
}
