//! Leaving on SIGTERM without dropping a new connection: this node hands every VIP it
//! holds over to a peer before it stops (issue 24 item 3).
//!
//! Why new requests failed: keepalived, stopped with `SIGTERM`, removes its VIPs at once
//! and sends a priority-0 advert; a backup becomes master only after its skew time
//! (`(256 - priority) / 256 × advert_int`: 61 ms at priority 100 and the default 0.1 s)
//! and then sends gratuitous ARP. In between, the VIP is on no node: a client's SYN
//! reaches the old node (its ARP entry still names it), which no longer has the address
//! and drops it, and the client's first retransmission is one second later (a 1 s timeout
//! in the lab). Every request started in that window failed (4 of 401 at 20 ms per
//! request: 60 + 20 ms dark). Lowering the priority instead would not help: with the
//! default `nopreempt`, a backup ignores a lower-priority master, so the only fast
//! hand-over VRRP offers is the priority-0 advert.
//!
//! So the VIP is given up the VRRP way, but this node keeps answering for it until a peer
//! holds it (make before break):
//!
//! 1. [`plan`]: the VIPs this node holds whose instance has another member (a peer that
//!    can take it) linger; with no peer (a single LB node, or an instance of this node
//!    alone) there is nothing to wait for and the actor stops at once, as before;
//! 2. each lingering VIP is added as a host address (`/32`, `/128`) on `lo`: the node
//!    still accepts packets for it, and the proxy (bound with `transparent`) serves them;
//! 3. keepalived gets its `SIGTERM` (priority-0 adverts at once, its copies of the VIPs
//!    go; it exits about a second later, which is waited for after the hand-over);
//! 4. the actor listens for VRRP adverts ([`Waiter`]): an advert with a priority above 0
//!    for an awaited instance, from an address that is not this node's, is a peer that
//!    became master (and sent its gratuitous ARP / unsolicited NA with it). It waits for
//!    every awaited instance, at most `--handover-wait-ms` ([`DEFAULT_WAIT`]);
//! 5. [`LINGER_AFTER_TAKEOVER`] later (packets already on their way, clients whose ARP
//!    entry the gratuitous ARP has not updated yet), the `lo` copies are removed; then
//!    keepalived's exit is waited for, the other VIPs go, and the proxy is stopped
//!    gracefully (HAProxy soft-stop, nginx `SIGQUIT`): connections in flight finish.
//!
//! A copy on `lo` answers ARP too (Linux's default `arp_ignore=0`): a client that asks in
//! the few hundred milliseconds of the hand-over may get this node's MAC after the new
//! master's gratuitous ARP; keepalived repeats that ARP (`vrrp_garp_master_delay`,
//! `vrrp_garp_master_repeat`), which corrects it. IPv6 neighbour discovery answers only
//! for addresses of the receiving interface, so an IPv6 copy on `lo` answers nothing.
//!
//! The decisions here are pure; [`listen`] is the raw-socket seam the driver uses.

use k8slb_common::names::NodeName;
use k8slb_common::state::{Family, State};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long the actor waits at most for peers to take its VIPs over. keepalived's skew
/// time is at most one advert interval, and a backup that missed the priority-0 advert
/// takes over after three (`Master_Down_Interval`): 3 s covers advert intervals up to
/// about 1 s.
pub const DEFAULT_WAIT: Duration = Duration::from_millis(3000);

/// How long the `lo` copies stay after the last awaited instance was taken over.
pub const LINGER_AFTER_TAKEOVER: Duration = Duration::from_millis(300);

/// The longest a SIGTERM'd actor takes to exit: the hand-over `wait` (keepalived's stop,
/// at most `stop_grace`, runs inside it or beyond it), the linger, and the proxy's stop.
/// The pod's `terminationGracePeriodSeconds` must be longer.
pub fn longest_stop(wait: Duration, stop_grace: Duration) -> Duration {
    wait + stop_grace + LINGER_AFTER_TAKEOVER + stop_grace
}

/// The IP protocol number of VRRP.
pub const IPPROTO_VRRP: u8 = 112;

/// A VRRP instance as adverts name it: its family and VRID (VRIDs are unique in a state).
pub type InstanceKey = (Family, u8);

/// What to do on the way out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Instances to wait for: this node holds one of their VIPs and another node is a
    /// member, so a peer will take it over.
    pub awaited: BTreeSet<InstanceKey>,
    /// VIPs this node keeps answering for (on `lo`) until the peers hold them.
    pub linger: Vec<IpAddr>,
    /// VIPs held here whose instance has no other member: nobody can take them; they go
    /// at once.
    pub alone: Vec<IpAddr>,
}

impl Plan {
    /// Nothing to wait for: stop at once.
    pub fn is_empty(&self) -> bool {
        self.awaited.is_empty()
    }
}

/// The hand-over of the VIPs of `state` this node `held` (as observed on its interfaces).
/// A held address the state does not know is not ours to hand over.
pub fn plan(state: &State, node: &NodeName, held: &BTreeSet<IpAddr>) -> Plan {
    let mut p = Plan::default();
    for inst in &state.instances {
        if !inst.members.iter().any(|m| &m.node == node) {
            continue;
        }
        let peers = inst.members.iter().any(|m| &m.node != node);
        for vip in inst.vips.iter().filter(|v| held.contains(v)) {
            if peers {
                p.awaited.insert((inst.family, inst.vrid));
                p.linger.push(*vip);
            } else {
                p.alone.push(*vip);
            }
        }
    }
    p.linger.sort();
    p.alone.sort();
    p
}

/// The part of a VRRP advert the hand-over needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advert {
    pub vrid: u8,
    pub priority: u8,
}

/// A VRRP (v2 or v3) advertisement: version in the high nibble of the first byte, type 1
/// (ADVERTISEMENT) in the low one, then the VRID and the priority. Anything else (too
/// short, another type or version) is `None`.
pub fn parse_advert(vrrp: &[u8]) -> Option<Advert> {
    let (&first, rest) = vrrp.split_first()?;
    let version = first >> 4;
    if !(version == 2 || version == 3) || first & 0x0f != 1 || rest.len() < 2 {
        return None;
    }
    // VRID 0 is reserved.
    (rest[0] != 0).then_some(Advert {
        vrid: rest[0],
        priority: rest[1],
    })
}

/// The VRRP payload of an IPv4 packet as a raw IPv4 socket returns it (with its IP
/// header): `None` unless it is a whole header of protocol 112.
pub fn ipv4_payload(packet: &[u8]) -> Option<&[u8]> {
    let first = *packet.first()?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < 20 || packet.len() < ihl || packet[9] != IPPROTO_VRRP {
        return None;
    }
    Some(&packet[ihl..])
}

/// How a hand-over ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every awaited instance has a new master.
    TakenOver,
    /// The bound passed first: these instances heard no new master.
    TimedOut(BTreeSet<InstanceKey>),
}

/// Waits for peers to become master of the awaited instances, until a deadline.
#[derive(Debug, Clone)]
pub struct Waiter {
    awaited: BTreeSet<InstanceKey>,
    /// When each instance was taken over.
    taken: BTreeMap<InstanceKey, Instant>,
    deadline: Instant,
}

impl Waiter {
    pub fn new(awaited: BTreeSet<InstanceKey>, started: Instant, bound: Duration) -> Self {
        Waiter {
            awaited,
            taken: BTreeMap::new(),
            deadline: started + bound,
        }
    }

    /// An advert from `from` was heard at `now`. It says a peer is master when its
    /// priority is above 0 (0 is a master leaving: this node's own keepalived, or another
    /// one that stops too) and it does not come from one of `own` addresses. Returns
    /// whether it completed an awaited instance.
    pub fn heard(
        &mut self,
        from: IpAddr,
        advert: Advert,
        own: &BTreeSet<IpAddr>,
        now: Instant,
    ) -> bool {
        if advert.priority == 0 || own.contains(&from) {
            return false;
        }
        let key = (Family::of(&from), advert.vrid);
        if self.awaited.remove(&key) {
            self.taken.insert(key, now);
            true
        } else {
            false
        }
    }

    /// `None` while waiting; the outcome once every instance is taken over or the
    /// deadline passed.
    pub fn outcome(&self, now: Instant) -> Option<Outcome> {
        if self.awaited.is_empty() {
            Some(Outcome::TakenOver)
        } else if now >= self.deadline {
            Some(Outcome::TimedOut(self.awaited.clone()))
        } else {
            None
        }
    }

    /// How long to listen before looking at the deadline again (at most `step`).
    pub fn listen_for(&self, now: Instant, step: Duration) -> Duration {
        self.deadline
            .saturating_duration_since(now)
            .min(step)
            .max(Duration::from_millis(1))
    }

    /// The instances no peer has taken over yet.
    pub fn left(&self) -> &BTreeSet<InstanceKey> {
        &self.awaited
    }

    /// When each instance was taken over.
    pub fn taken(&self) -> &BTreeMap<InstanceKey, Instant> {
        &self.taken
    }
}

/// Listening for VRRP adverts: raw sockets of protocol 112 (CAP_NET_RAW, which
/// keepalived needs too), joined to the VRRP multicast groups (224.0.0.18, ff02::12) on
/// the interfaces that carry the VIPs, since keepalived leaves them as it stops. Unicast
/// adverts (`unicast_peer`) reach the raw socket without a group.
pub mod listen {
    use super::{ipv4_payload, parse_advert, Advert};
    use k8slb_common::state::Family;
    use socket2::{Domain, InterfaceIndexOrAddress, Protocol, Socket, Type};
    use std::io::ErrorKind;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
    use std::time::Duration;

    const GROUP_V4: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 18);
    const GROUP_V6: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x12);

    #[derive(Debug, thiserror::Error)]
    pub enum ListenError {
        #[error("opening a raw VRRP socket ({family:?}): {source}")]
        Open {
            family: Family,
            source: std::io::Error,
        },
        #[error("joining the VRRP group on interface {index}: {source}")]
        Join { index: u32, source: std::io::Error },
        #[error("receiving a VRRP advert: {source}")]
        Receive { source: std::io::Error },
    }

    impl ListenError {
        pub fn category(&self) -> &'static str {
            match self {
                ListenError::Open { .. } => "open",
                ListenError::Join { .. } => "join",
                ListenError::Receive { .. } => "receive",
            }
        }
    }

    /// One raw socket per family. (Read through `UdpSocket`, whose safe `recv_from`
    /// works on any datagram-like socket and gives the sender; socket2's own wants
    /// uninitialised buffers.)
    pub struct Listener {
        sockets: Vec<(Family, UdpSocket)>,
        next: usize,
    }

    impl Listener {
        /// Sockets for `families`, joined to the VRRP group on each of `interfaces`
        /// (indexes, with the families of the VIPs they carry).
        pub fn open(interfaces: &[(Family, u32)]) -> Result<Listener, ListenError> {
            let mut sockets = Vec::new();
            for family in [Family::V4, Family::V6] {
                let ifs: Vec<u32> = interfaces
                    .iter()
                    .filter(|(f, _)| *f == family)
                    .map(|(_, i)| *i)
                    .collect();
                if ifs.is_empty() {
                    continue;
                }
                let domain = match family {
                    Family::V4 => Domain::IPV4,
                    Family::V6 => Domain::IPV6,
                };
                let s = Socket::new(
                    domain,
                    Type::RAW,
                    Some(Protocol::from(i32::from(super::IPPROTO_VRRP))),
                )
                .map_err(|source| ListenError::Open { family, source })?;
                for index in ifs {
                    let joined = match family {
                        Family::V4 => {
                            s.join_multicast_v4_n(&GROUP_V4, &InterfaceIndexOrAddress::Index(index))
                        }
                        Family::V6 => s.join_multicast_v6(&GROUP_V6, index),
                    };
                    match joined {
                        // Two VIPs on one interface: joined already.
                        Err(e) if e.raw_os_error() == Some(nix::libc::EADDRINUSE) => {}
                        r => r.map_err(|source| ListenError::Join { index, source })?,
                    }
                }
                sockets.push((family, UdpSocket::from(s)));
            }
            Ok(Listener { sockets, next: 0 })
        }

        /// The next advert within about `wait` (`None`: none came), with its sender.
        /// Packets that are not adverts are skipped.
        pub fn recv(&mut self, wait: Duration) -> Result<Option<(IpAddr, Advert)>, ListenError> {
            if self.sockets.is_empty() {
                std::thread::sleep(wait);
                return Ok(None);
            }
            // Round-robin over the families, each for a share of `wait`.
            let share = (wait / self.sockets.len() as u32).max(Duration::from_millis(1));
            let mut buf = [0u8; 1500];
            for _ in 0..self.sockets.len() {
                let (family, s) = &self.sockets[self.next];
                self.next = (self.next + 1) % self.sockets.len();
                s.set_read_timeout(Some(share))
                    .map_err(|source| ListenError::Receive { source })?;
                match s.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        let data = &buf[..n];
                        let vrrp = match family {
                            Family::V4 => ipv4_payload(data),
                            Family::V6 => Some(data),
                        };
                        if let Some(a) = vrrp.and_then(parse_advert) {
                            return Ok(Some((from.ip(), a)));
                        }
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(source) => return Err(ListenError::Receive { source }),
                }
            }
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8slb_common::state::{Member, VrrpInstance};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn inst(vrid: u8, members: &[&str], vips: &[&str]) -> VrrpInstance {
        let vips: Vec<IpAddr> = vips.iter().map(|v| ip(v)).collect();
        VrrpInstance {
            vrid,
            name: format!("k8slb_default_{vrid}"),
            pool: "default".parse().unwrap(),
            family: Family::of(&vips[0]),
            members: members
                .iter()
                .enumerate()
                .map(|(i, n)| Member {
                    node: n.parse().unwrap(),
                    priority: 200 - i as u8,
                })
                .collect(),
            vips,
            preempt: false,
        }
    }

    fn state(instances: Vec<VrrpInstance>) -> State {
        let mut s = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
        s.instances = instances;
        s
    }

    #[test]
    fn plan_waits_only_for_instances_with_a_peer_whose_vips_this_node_holds() {
        let a: NodeName = "lb-a".parse().unwrap();
        let s = state(vec![
            inst(1, &["lb-a", "lb-b"], &["198.18.0.10", "198.18.0.11"]),
            inst(2, &["lb-a"], &["198.18.0.20"]),
            inst(3, &["lb-b", "lb-a"], &["198.18.0.30"]),
            inst(4, &["lb-b", "lb-c"], &["198.18.0.40"]),
            inst(5, &["lb-a", "lb-c"], &["fd00::50"]),
        ]);
        // (held, awaited VRIDs, linger, alone)
        type Row<'a> = (&'a [&'a str], &'a [u8], &'a [&'a str], &'a [&'a str]);
        let table: &[Row<'_>] = &[
            (&[], &[], &[], &[]),
            // Master of 1 with a peer: wait, linger both of its VIPs held.
            (
                &["198.18.0.10", "198.18.0.11"],
                &[1],
                &["198.18.0.10", "198.18.0.11"],
                &[],
            ),
            // Alone in 2: nobody to wait for.
            (&["198.18.0.20"], &[], &[], &["198.18.0.20"]),
            // 3 lists this node second: it still hands over what it holds.
            (&["198.18.0.30"], &[3], &["198.18.0.30"], &[]),
            // Not a member of 4, and an address the state does not know: not ours.
            (&["198.18.0.40", "198.18.0.99"], &[], &[], &[]),
            (
                &["fd00::50", "198.18.0.20"],
                &[5],
                &["fd00::50"],
                &["198.18.0.20"],
            ),
        ];
        for (held, awaited, linger, alone) in table {
            let held: BTreeSet<IpAddr> = held.iter().map(|h| ip(h)).collect();
            let p = plan(&s, &a, &held);
            let vrids: Vec<u8> = p.awaited.iter().map(|(_, v)| *v).collect();
            assert_eq!(vrids, *awaited, "held {held:?}");
            assert_eq!(p.linger, linger.iter().map(|v| ip(v)).collect::<Vec<_>>());
            assert_eq!(p.alone, alone.iter().map(|v| ip(v)).collect::<Vec<_>>());
            assert_eq!(p.is_empty(), awaited.is_empty());
        }
        assert_eq!(
            plan(&s, &a, &[ip("fd00::50")].into()).awaited,
            [(Family::V6, 5)].into()
        );
    }

    #[test]
    fn parse_advert_reads_vrrp_v2_and_v3_adverts_only() {
        type Row<'a> = (&'a [u8], Option<(u8, u8)>);
        let table: &[Row<'_>] = &[
            (&[0x31, 7, 100, 1, 0, 10], Some((7, 100))),
            (&[0x21, 9, 0, 1, 1, 1], Some((9, 0))),
            (&[0x31, 7], None),
            (&[], None),
            // Another type, another version, the reserved VRID 0.
            (&[0x32, 7, 100, 1], None),
            (&[0x41, 7, 100, 1], None),
            (&[0x31, 0, 100, 1], None),
        ];
        for (bytes, want) in table {
            assert_eq!(
                parse_advert(bytes),
                want.map(|(vrid, priority)| Advert { vrid, priority }),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn ipv4_payload_skips_the_header_of_vrrp_packets_only() {
        let mut p = vec![0x45u8, 0, 0, 28, 0, 0, 0, 0, 255, 112, 0, 0];
        p.extend([198, 18, 0, 2, 224, 0, 0, 18]);
        p.extend([0x31, 7, 100, 1]);
        assert_eq!(ipv4_payload(&p), Some(&[0x31, 7, 100, 1][..]));
        // With options (IHL 6).
        let mut o = p.clone();
        o[0] = 0x46;
        o.splice(20..20, [1, 1, 1, 1]);
        assert_eq!(ipv4_payload(&o), Some(&[0x31, 7, 100, 1][..]));
        let mut udp = p.clone();
        udp[9] = 17;
        assert_eq!(ipv4_payload(&udp), None);
        assert_eq!(ipv4_payload(&p[..12]), None);
        let mut v6 = p.clone();
        v6[0] = 0x65;
        assert_eq!(ipv4_payload(&v6), None);
    }

    #[test]
    fn waiter_is_done_when_a_peer_masters_every_awaited_instance_or_at_the_bound() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let own: BTreeSet<IpAddr> = [ip("198.18.0.1"), ip("fd00::1")].into();
        let adv = |vrid, priority| Advert { vrid, priority };
        let awaited: BTreeSet<InstanceKey> =
            [(Family::V4, 1), (Family::V4, 2), (Family::V6, 1)].into();
        let mut w = Waiter::new(awaited, t0, Duration::from_millis(3000));
        assert_eq!(w.outcome(ms(0)), None);
        // (from, vrid, priority, completes one)
        let table = [
            // This node's own keepalived leaving, then its last master advert.
            ("198.18.0.1", 1, 0, false),
            ("198.18.0.1", 1, 100, false),
            // A peer leaving too: not a master.
            ("198.18.0.2", 1, 0, false),
            // Not awaited.
            ("198.18.0.2", 9, 100, false),
            ("198.18.0.2", 1, 99, true),
            // Heard twice: counted once.
            ("198.18.0.2", 1, 99, false),
            // The same VRID in the other family is another instance.
            ("fd00::2", 1, 99, true),
        ];
        for (i, (from, vrid, prio, done)) in table.into_iter().enumerate() {
            assert_eq!(
                w.heard(ip(from), adv(vrid, prio), &own, ms(10 * i as u64)),
                done,
                "{from} {vrid} {prio}"
            );
        }
        assert_eq!(w.outcome(ms(100)), None);
        assert!(w.heard(ip("198.18.0.3"), adv(2, 50), &own, ms(120)));
        assert_eq!(w.outcome(ms(120)), Some(Outcome::TakenOver));
        assert_eq!(w.taken()[&(Family::V4, 2)], ms(120));

        // Nobody answers: done at the bound, naming what is left.
        let w = Waiter::new([(Family::V4, 1)].into(), t0, Duration::from_millis(3000));
        assert_eq!(w.outcome(ms(2999)), None);
        assert_eq!(
            w.outcome(ms(3000)),
            Some(Outcome::TimedOut([(Family::V4, 1)].into()))
        );
        assert_eq!(
            w.listen_for(ms(2990), Duration::from_millis(100)),
            Duration::from_millis(10)
        );
        assert_eq!(
            w.listen_for(ms(0), Duration::from_millis(100)),
            Duration::from_millis(100)
        );
        assert_eq!(
            w.listen_for(ms(4000), Duration::from_millis(100)),
            Duration::from_millis(1)
        );
    }
}
