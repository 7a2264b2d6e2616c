//! Break-before-make for a VIP that changes VRRP instance (issue 9, from the chaos soak).
//!
//! The watcher groups the VIPs of one pool by serving node: each group is one VRRP
//! instance (pool + VRID). When a VIP's serving node changes, or a released IP goes to a
//! Service served by another node, the VIP moves from instance A to instance B. Every
//! actor applies the new state on its own schedule (watch delay, debounce, the reload
//! rate limit, keepalived's own reload): a node that has applied it is master of B with
//! the VIP while a node that has not is still master of A with the same VIP, and two
//! nodes answer ARP for it (seen from 318 ms to 10 s in the soak).
//!
//! Make-before-break would need coordination across nodes; break-before-make needs
//! none: a VIP that leaves an instance joins its new instance only after a hold-down
//! `H` ([`DEFAULT_HOLD`], `--vip-handover-ms`), by which time every node has dropped it
//! from the old one. During `H` no node holds it. Each actor remembers, for every VIP,
//! the instance it was in in the keepalived config this node last applied, and when it
//! left it ([`Memory`]); [`decide`] leaves out a VIP whose new instance differs from the
//! one it left less than `H` ago and says when to look again. A VIP this node has not
//! had in any instance within `H` (a new Service) joins at once; a VIP that stays in its
//! instance, or comes back to the instance it left, is unaffected. Only keepalived's
//! `virtual_ipaddress` lists change; the proxy config does not.
//!
//! Everything here is pure: the clock is passed in.

use crate::view::KeepalivedView;
use k8slb_common::names::PoolName;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The default hold-down: longer than the actor's debounce (100 ms) + the minimum reload
/// interval (1 s) + keepalived's own reload, so a node that received the state at the
/// same time has dropped the VIP from its old instance before any node adds it to the
/// new one.
pub const DEFAULT_HOLD: Duration = Duration::from_millis(2000);

/// A VRRP instance as keepalived.conf names it: `k8slb_<pool>_<vrid>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instance {
    pub pool: PoolName,
    pub vrid: u8,
}

impl fmt::Display for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "k8slb_{}_{}", self.pool, self.vrid)
    }
}

/// The instance of every VIP in one keepalived config.
pub type Placement = BTreeMap<IpAddr, Instance>;

/// What this node last applied: the instance of every VIP in its keepalived config, and
/// for VIPs that left an instance less than the hold-down ago, which one and when.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    placed: Placement,
    left: BTreeMap<IpAddr, (Instance, Instant)>,
}

impl Memory {
    /// The instance `vip` is in in the last applied config.
    pub fn placed(&self, vip: &IpAddr) -> Option<&Instance> {
        self.placed.get(vip)
    }

    /// The instance `vip` left (and when), if it left one less than the hold-down ago.
    pub fn left(&self, vip: &IpAddr) -> Option<&(Instance, Instant)> {
        self.left.get(vip)
    }

    /// `applied` now runs (keepalived took it at `now`): a VIP no longer in the instance
    /// it was in left it at `now`; one that is in an instance now has left nothing.
    /// Departures older than `hold` are forgotten.
    pub fn record(&mut self, applied: &Placement, hold: Duration, now: Instant) {
        for (vip, inst) in &self.placed {
            if applied.get(vip) != Some(inst) {
                self.left.insert(*vip, (inst.clone(), now));
            }
        }
        for vip in applied.keys() {
            self.left.remove(vip);
        }
        self.left
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < hold);
        self.placed.clone_from(applied);
    }
}

/// A VIP left out of keepalived for now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub vip: IpAddr,
    /// The instance it is leaving (or left).
    pub from: Instance,
    /// The instance the state puts it in.
    pub to: Instance,
    /// When it may join `to`.
    pub until: Instant,
}

/// What [`decide`] found: the VIPs to leave out, and when to render again (the earliest
/// end of their hold-downs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    pub held: Vec<Held>,
    pub until: Option<Instant>,
}

impl Decision {
    pub fn vips(&self) -> BTreeSet<IpAddr> {
        self.held.iter().map(|h| h.vip).collect()
    }
}

/// Which VIPs of `next` (the instances the state gives them) must stay out of every
/// instance at `now`, given what this node last applied (`prev`) and the hold-down
/// `hold` (zero: none).
///
/// - in the same instance as applied: joins (unchanged);
/// - in another instance than applied: held until `now + hold` (it leaves its old
///   instance with this apply);
/// - in no instance as applied, but left one less than `hold` ago: held until that
///   departure + `hold`, unless the new instance is the one it left;
/// - unknown (new, or left long ago): joins at once.
pub fn decide(prev: &Memory, next: &Placement, hold: Duration, now: Instant) -> Decision {
    if hold.is_zero() {
        return Decision::default();
    }
    let mut held = Vec::new();
    for (vip, to) in next {
        let (from, since) = match (prev.placed.get(vip), prev.left.get(vip)) {
            (Some(from), _) => (from, now),
            (None, Some((from, at))) => (from, *at),
            (None, None) => continue,
        };
        let until = since + hold;
        if from == to || now >= until {
            continue;
        }
        held.push(Held {
            vip: *vip,
            from: from.clone(),
            to: to.clone(),
            until,
        });
    }
    let until = held.iter().map(|h| h.until).min();
    Decision { held, until }
}

/// The instance of every VIP in `ka` (VIPs are rendered as `<ip>/<prefix_len>`).
pub fn placement(ka: &KeepalivedView) -> Placement {
    let mut out = Placement::new();
    for i in &ka.instances {
        for v in &i.vips {
            let ip = v.split_once('/').map_or(v.as_str(), |(ip, _)| ip);
            if let Ok(ip) = ip.parse::<IpAddr>() {
                out.insert(
                    ip,
                    Instance {
                        pool: i.pool.clone(),
                        vrid: i.vrid,
                    },
                );
            }
        }
    }
    out
}

/// `ka` without `vips` in any instance. An instance left without a VIP is left out
/// (keepalived refuses one: "No VIP specified"); it comes back when its VIPs join.
pub fn hold_out(ka: &mut KeepalivedView, vips: &BTreeSet<IpAddr>) {
    if vips.is_empty() {
        return;
    }
    for i in &mut ka.instances {
        i.vips.retain(|v| {
            let ip = v.split_once('/').map_or(v.as_str(), |(ip, _)| ip);
            !ip.parse::<IpAddr>().is_ok_and(|ip| vips.contains(&ip))
        });
    }
    ka.instances.retain(|i| !i.vips.is_empty());
}

/// [`decide`] and [`hold_out`] on a keepalived view: the view to apply and the decision.
pub fn handover(
    prev: &Memory,
    mut next: KeepalivedView,
    hold: Duration,
    now: Instant,
) -> (KeepalivedView, Decision) {
    let d = decide(prev, &placement(&next), hold, now);
    hold_out(&mut next, &d.vips());
    (next, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::InstanceView;
    use k8slb_common::state::Family;

    fn inst(vrid: u8) -> Instance {
        Instance {
            pool: "default".parse().unwrap(),
            vrid,
        }
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    fn placed(pairs: &[(&str, u8)]) -> Placement {
        pairs.iter().map(|(v, i)| (ip(v), inst(*i))).collect()
    }
    const H: Duration = Duration::from_millis(2000);
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The table: what this node applied, the state's next placement, the time; which
    /// VIPs are held (and until when).
    #[test]
    fn decide_table() {
        let t0 = Instant::now();
        let mut applied = Memory::default();
        applied.record(&placed(&[("198.18.0.102", 3), ("198.18.0.104", 5)]), H, t0);
        // .102 left instance 4 at t0 + 500 ms (this node applied a state without it).
        let mut left = applied.clone();
        left.record(&placed(&[("198.18.0.104", 5)]), H, t0 + ms(500));

        struct Row {
            what: &'static str,
            prev: Memory,
            next: Placement,
            hold: Duration,
            at: Instant,
            held: Vec<(&'static str, u8, u8, Instant)>,
        }
        let rows = [
            Row {
                what: "unchanged VIPs are unaffected",
                prev: applied.clone(),
                next: placed(&[("198.18.0.102", 3), ("198.18.0.104", 5)]),
                hold: H,
                at: t0 + ms(100),
                held: vec![],
            },
            Row {
                what: "a VIP moving from instance 3 to 5 is held for H from now",
                prev: applied.clone(),
                next: placed(&[("198.18.0.102", 5), ("198.18.0.104", 5)]),
                hold: H,
                at: t0 + ms(100),
                held: vec![("198.18.0.102", 3, 5, t0 + ms(2100))],
            },
            Row {
                what: "a new VIP joins at once",
                prev: applied.clone(),
                next: placed(&[("198.18.0.102", 3), ("198.18.0.104", 5), ("198.18.0.9", 5)]),
                hold: H,
                at: t0 + ms(100),
                held: vec![],
            },
            Row {
                what: "H = 0 disables the hold-down",
                prev: applied.clone(),
                next: placed(&[("198.18.0.102", 5), ("198.18.0.104", 3)]),
                hold: Duration::ZERO,
                at: t0 + ms(100),
                held: vec![],
            },
            Row {
                what: "a released IP given to a Service of another instance within H is held \
                       until H after it left",
                prev: left.clone(),
                next: placed(&[("198.18.0.102", 5), ("198.18.0.104", 5)]),
                hold: H,
                at: t0 + ms(1500),
                held: vec![("198.18.0.102", 3, 5, t0 + ms(2500))],
            },
            Row {
                what: "... and joins once H has passed",
                prev: left.clone(),
                next: placed(&[("198.18.0.102", 5), ("198.18.0.104", 5)]),
                hold: H,
                at: t0 + ms(2500),
                held: vec![],
            },
            Row {
                what: "a VIP back in the instance it left joins at once",
                prev: left.clone(),
                next: placed(&[("198.18.0.102", 3), ("198.18.0.104", 5)]),
                hold: H,
                at: t0 + ms(600),
                held: vec![],
            },
            Row {
                what: "two VIPs swap instances: both held, the re-render is the earliest end",
                prev: left.clone(),
                next: placed(&[("198.18.0.102", 5), ("198.18.0.104", 3)]),
                hold: H,
                at: t0 + ms(1000),
                held: vec![
                    ("198.18.0.102", 3, 5, t0 + ms(2500)),
                    ("198.18.0.104", 5, 3, t0 + ms(3000)),
                ],
            },
        ];
        for r in rows {
            let d = decide(&r.prev, &r.next, r.hold, r.at);
            let want: Vec<Held> = r
                .held
                .iter()
                .map(|(v, from, to, until)| Held {
                    vip: ip(v),
                    from: inst(*from),
                    to: inst(*to),
                    until: *until,
                })
                .collect();
            assert_eq!(d.held, want, "{}", r.what);
            assert_eq!(
                d.until,
                want.iter().map(|h| h.until).min(),
                "re-render time: {}",
                r.what
            );
        }
    }

    #[test]
    fn memory_remembers_departures_for_the_hold_down_only() {
        let t0 = Instant::now();
        let mut m = Memory::default();
        m.record(&placed(&[("198.18.0.1", 1), ("198.18.0.2", 1)]), H, t0);
        // .1 is held out (applied nowhere) at t0 + 100 ms.
        m.record(&placed(&[("198.18.0.2", 1)]), H, t0 + ms(100));
        assert_eq!(m.left(&ip("198.18.0.1")), Some(&(inst(1), t0 + ms(100))));
        // Applying again while it is still out keeps the first departure time.
        m.record(&placed(&[("198.18.0.2", 1)]), H, t0 + ms(900));
        assert_eq!(m.left(&ip("198.18.0.1")), Some(&(inst(1), t0 + ms(100))));
        // It joins instance 2: nothing left any more.
        m.record(
            &placed(&[("198.18.0.1", 2), ("198.18.0.2", 1)]),
            H,
            t0 + ms(2200),
        );
        assert_eq!(m.left(&ip("198.18.0.1")), None);
        assert_eq!(m.placed(&ip("198.18.0.1")), Some(&inst(2)));
        // A departure older than H is forgotten.
        m.record(&placed(&[("198.18.0.1", 2)]), H, t0 + ms(3000));
        assert!(m.left(&ip("198.18.0.2")).is_some());
        m.record(&placed(&[("198.18.0.1", 2)]), H, t0 + ms(5000));
        assert_eq!(m.left(&ip("198.18.0.2")), None);
    }

    fn ka(instances: &[(u8, &[&str])]) -> KeepalivedView {
        KeepalivedView {
            router_id: "lb1".parse().unwrap(),
            advert_int: "1".into(),
            garp_master_delay: 1,
            garp_master_repeat: 1,
            email: None,
            track_file: None,
            instances: instances
                .iter()
                .map(|(vrid, vips)| InstanceView {
                    name: format!("k8slb_default_{vrid}"),
                    pool: "default".parse().unwrap(),
                    vrid: *vrid,
                    family: Family::V4,
                    interface: "eth0".parse().unwrap(),
                    priority: 100,
                    owner: false,
                    nopreempt: false,
                    unicast: None,
                    anchor: crate::view::anchor(Family::V4, *vrid),
                    vips: vips.iter().map(|v| format!("{v}/24")).collect(),
                })
                .collect(),
        }
    }

    /// The moved VIP is out of both instances during the hold-down, then joins the new
    /// one; an instance left empty by it is not rendered until then.
    #[test]
    fn a_moved_vip_is_in_no_instance_until_the_hold_down_ends() {
        let t0 = Instant::now();
        let mut m = Memory::default();
        let before = ka(&[
            (3, &["198.18.0.102", "198.18.0.103"]),
            (5, &["198.18.0.104"]),
        ]);
        assert_eq!(
            placement(&before),
            placed(&[
                ("198.18.0.102", 3),
                ("198.18.0.103", 3),
                ("198.18.0.104", 5)
            ])
        );
        let (v, d) = handover(&m, before.clone(), H, t0);
        assert_eq!((v.clone(), d), (before.clone(), Decision::default()));
        m.record(&placement(&v), H, t0);

        // .102 and .103 move to instance 5; instance 3 is gone from the state.
        let next = ka(&[(5, &["198.18.0.102", "198.18.0.103", "198.18.0.104"])]);
        let at = t0 + ms(300);
        let (v, d) = handover(&m, next.clone(), H, at);
        assert_eq!(v, ka(&[(5, &["198.18.0.104"])]));
        assert_eq!(d.until, Some(at + H));
        assert_eq!(
            d.vips(),
            [ip("198.18.0.102"), ip("198.18.0.103")]
                .into_iter()
                .collect()
        );
        m.record(&placement(&v), H, at);

        // A re-render before the end changes nothing.
        let (v2, d2) = handover(&m, next.clone(), H, at + ms(1000));
        assert_eq!((v2, d2.until), (v.clone(), Some(at + H)));
        // At the end, they join.
        let (v3, d3) = handover(&m, next.clone(), H, at + H);
        assert_eq!((v3, d3), (next.clone(), Decision::default()));

        // An instance whose only VIP is held is left out.
        let (v4, _) = handover(&m, ka(&[(7, &["198.18.0.102"])]), H, at + ms(10));
        assert!(v4.instances.is_empty());
        // H = 0: as the state says.
        let (v5, d5) = handover(&m, next.clone(), Duration::ZERO, at);
        assert_eq!((v5, d5), (next, Decision::default()));
    }
}
