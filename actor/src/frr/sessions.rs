//! What the node's BGP peers do with its sessions, for the node report (Events on the
//! Node, [`k8slb_common::report::PeerProblem`]): from FRR's `show bgp neighbors json`,
//! a peer that sent a NOTIFICATION (it refuses: a wrong AS, a bad hold time, ...), a
//! session that has not come up for [`SESSION_DOWN_AFTER`] with nothing received (the
//! router does not answer: unreachable, not configured for this node, or a TCP MD5
//! password it does not share: a mismatched MD5 signature is dropped without a word),
//! and the peers the config leaves out (their password). Pure: table-tested below.

use super::render::FrrView;
use k8slb_common::report::{PeerProblem, PeerProblemKind};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long a session may stay down, the peer silent, before it is reported.
pub const SESSION_DOWN_AFTER: Duration = Duration::from_secs(60);

/// One neighbor of `show bgp neighbors json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStatus {
    pub address: IpAddr,
    /// FRR's state name (`Established`, `Active`, `Connect`, `OpenSent`, `Idle`, ...).
    pub state: String,
    /// The peer's NOTIFICATION that reset the session last (`lastNotificationReason`),
    /// when that is why the session is down.
    pub notification: Option<String>,
}

impl PeerStatus {
    pub fn established(&self) -> bool {
        self.state == "Established"
    }
}

/// `show bgp neighbors json`: `{ "<address>": { "bgpState": ..., "lastResetDueTo": ...,
/// "lastNotificationReason": ... }, ... }`. Entries whose key is not an address (a peer
/// group, dynamic neighbors' ranges) are skipped.
pub fn parse_neighbors(json: &str) -> Vec<PeerStatus> {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    let text =
        |p: &serde_json::Value, k: &str| p.get(k).and_then(|v| v.as_str()).map(str::to_string);
    m.iter()
        .filter_map(|(addr, p)| {
            let address: IpAddr = addr.parse().ok()?;
            let state = text(p, "bgpState").unwrap_or_default();
            let notified =
                text(p, "lastResetDueTo").as_deref() == Some("BGP Notification received");
            let notification = (state != "Established" && notified)
                .then(|| text(p, "lastNotificationReason"))
                .flatten();
            Some(PeerStatus {
                address,
                state,
                notification,
            })
        })
        .collect()
}

/// The peers as last observed, each with the moment its session was first seen down.
#[derive(Debug, Default)]
pub struct PeerWatch {
    seen: BTreeMap<IpAddr, (PeerStatus, Option<Instant>)>,
}

impl PeerWatch {
    /// A new observation (`None`: FRR does not run; everything is forgotten).
    pub fn observe(&mut self, status: Option<Vec<PeerStatus>>, now: Instant) {
        let Some(status) = status else {
            self.seen.clear();
            return;
        };
        let mut next = BTreeMap::new();
        for s in status {
            let down_since = if s.established() {
                None
            } else {
                Some(
                    self.seen
                        .get(&s.address)
                        .and_then(|(_, since)| *since)
                        .unwrap_or(now),
                )
            };
            next.insert(s.address, (s, down_since));
        }
        self.seen = next;
    }

    /// The problems of the peers of `view` (the config FRR runs) at `now`.
    pub fn problems(&self, view: &FrrView, now: Instant) -> Vec<PeerProblem> {
        let mut out: Vec<PeerProblem> = view
            .left_out
            .iter()
            .map(|l| PeerProblem {
                peer: l.address,
                kind: PeerProblemKind::Password,
                message: format!("left out of this node's FRR config: {}", l.why),
            })
            .collect();
        for p in &view.peers {
            let Some((s, Some(since))) = self.seen.get(&p.address) else {
                continue;
            };
            if let Some(n) = &s.notification {
                out.push(PeerProblem {
                    peer: p.address,
                    kind: PeerProblemKind::Refused,
                    message: format!("refused this node's session with a NOTIFICATION: {n}"),
                });
            } else if now.duration_since(*since) >= SESSION_DOWN_AFTER {
                out.push(PeerProblem {
                    peer: p.address,
                    kind: PeerProblemKind::Down,
                    message: format!(
                        "no session for {} s (state {}), nothing received: the router is unreachable, is not configured for this node, or does not share its TCP MD5 password",
                        now.duration_since(*since).as_secs(),
                        s.state
                    ),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frr::render::{LeftOut, PeerView};

    /// What FRR 8.4 answered in two network namespaces: a router expecting AS 64999
    /// from a node of AS 64512, and a router with a TCP MD5 password the node lacks.
    const NEIGHBORS: &str = r#"{
      "198.18.200.1": {"remoteAs": 64513, "bgpState": "Idle", "lastErrorCodeSubcode": "0202",
        "lastNotificationReason": "OPEN Message Error/Bad Peer AS",
        "lastNotificationHardReset": false, "lastResetDueTo": "BGP Notification received",
        "lastResetCode": 13},
      "198.18.201.1": {"bgpState": "Connect", "connectionsEstablished": 0,
        "lastResetDueTo": "Waiting for peer OPEN", "lastResetCode": 32},
      "fd00:3::1": {"bgpState": "Established", "lastResetDueTo": "BGP Notification received",
        "lastNotificationReason": "Cease/Administrative Reset"},
      "nodes": {"bgpState": "Idle"}
    }"#;

    fn peer(a: &str) -> PeerView {
        PeerView {
            address: a.parse().unwrap(),
            asn: 64513,
            keepalive_s: 3,
            hold_time_s: 9,
            bfd: false,
            v4: !a.contains(':'),
            password: None,
        }
    }

    fn view() -> FrrView {
        FrrView {
            node: "lb-1".parse().unwrap(),
            asn: 64512,
            router_id: None,
            peers: vec![
                peer("198.18.200.1"),
                peer("198.18.201.1"),
                peer("fd00:3::1"),
            ],
            bfd: None,
            v4_networks: vec![],
            v6_networks: vec![],
            v4_announced: vec![],
            v6_announced: vec![],
            left_out: vec![LeftOut {
                address: "198.18.4.1".parse().unwrap(),
                asn: 64514,
                why: "no Secret bgp-auth".into(),
            }],
        }
    }

    #[test]
    fn neighbors_are_read_with_the_notification_only_while_it_keeps_the_session_down() {
        let n = parse_neighbors(NEIGHBORS);
        assert_eq!(n.len(), 3, "{n:?}");
        let by: BTreeMap<String, &PeerStatus> =
            n.iter().map(|p| (p.address.to_string(), p)).collect();
        assert_eq!(
            by["198.18.200.1"].notification.as_deref(),
            Some("OPEN Message Error/Bad Peer AS")
        );
        assert_eq!(by["198.18.201.1"].notification, None);
        assert_eq!(by["198.18.201.1"].state, "Connect");
        assert!(by["fd00:3::1"].established());
        assert_eq!(
            by["fd00:3::1"].notification, None,
            "up again: nothing to report"
        );
        assert!(parse_neighbors("not json").is_empty());
    }

    #[test]
    fn a_refusal_is_reported_at_once_a_silent_peer_after_a_while_a_left_out_peer_always() {
        let t0 = Instant::now();
        let mut w = PeerWatch::default();
        w.observe(Some(parse_neighbors(NEIGHBORS)), t0);
        let kinds = |w: &PeerWatch, at| {
            w.problems(&view(), at)
                .into_iter()
                .map(|p| (p.peer.to_string(), p.kind))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            kinds(&w, t0),
            [
                ("198.18.4.1".to_string(), PeerProblemKind::Password),
                ("198.18.200.1".to_string(), PeerProblemKind::Refused),
            ]
        );
        // Observed again later: the silent peer's clock kept running from t0.
        let later = t0 + SESSION_DOWN_AFTER;
        w.observe(Some(parse_neighbors(NEIGHBORS)), later);
        let p = w.problems(&view(), later);
        assert_eq!(
            kinds(&w, later),
            [
                ("198.18.4.1".to_string(), PeerProblemKind::Password),
                ("198.18.200.1".to_string(), PeerProblemKind::Refused),
                ("198.18.201.1".to_string(), PeerProblemKind::Down),
            ]
        );
        assert!(
            p[2].message.contains("no session for 60 s (state Connect)"),
            "{p:?}"
        );
        // FRR stopped: nothing is known of the sessions any more.
        w.observe(None, later);
        assert_eq!(
            kinds(&w, later),
            [("198.18.4.1".to_string(), PeerProblemKind::Password)]
        );
    }
}
