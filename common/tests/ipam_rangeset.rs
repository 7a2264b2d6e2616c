//! RangeSet: examples at the edges, a model-based property test, and IPv6 scale.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use k8slb_common::ipam::{IpRange, PoolExpr, RangeSet};
use proptest::prelude::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn r(a: &str, b: &str) -> IpRange {
    IpRange::new(ip(a), ip(b)).unwrap()
}

const V6_MAX: &str = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";

/// Sorted, disjoint, non-adjacent, one family per range.
fn assert_canonical(set: &RangeSet) {
    let rs: Vec<IpRange> = set.ranges().collect();
    for w in rs.windows(2) {
        if w[0].family_is_v4() == w[1].family_is_v4() {
            let gap_start = num(w[0].end()) + 1;
            assert!(
                gap_start < num(w[1].start()),
                "not merged: {} then {}",
                w[0],
                w[1]
            );
        } else {
            assert!(w[0].family_is_v4(), "IPv4 ranges come first");
        }
    }
}

fn num(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u32::from(a).into(),
        IpAddr::V6(a) => a.into(),
    }
}

#[test]
fn empty_set() {
    let set = RangeSet::new();
    assert!(set.is_empty());
    assert_eq!(set.len(), 0);
    assert_eq!(set.ranges().count(), 0);
    let p = r("10.0.0.1", "10.0.0.5");
    assert_eq!(set.first_free(&p), Some(ip("10.0.0.1")));
    assert_eq!(set.free_in(&p), 5);
    let all6 = r("::", V6_MAX);
    assert_eq!(set.first_free(&all6), Some(ip("::")));
    assert_eq!(set.free_in(&all6), u128::MAX);
    assert!(!set.contains(ip("10.0.0.1")));
}

#[test]
fn full_set() {
    let mut set = RangeSet::new();
    let p = r("10.0.0.1", "10.0.0.5");
    set.insert_range(p);
    assert_eq!(set.first_free(&p), None);
    assert_eq!(set.free_in(&p), 0);
    assert_eq!(set.len(), 5);
    // A sub-range of a used range is full too; a wider one is not.
    assert_eq!(set.first_free(&r("10.0.0.2", "10.0.0.3")), None);
    assert_eq!(
        set.first_free(&r("10.0.0.0", "10.0.0.5")),
        Some(ip("10.0.0.0"))
    );
    assert_eq!(
        set.first_free(&r("10.0.0.2", "10.0.0.6")),
        Some(ip("10.0.0.6"))
    );

    // Whole families, at both ends of the number space.
    let mut full = RangeSet::new();
    let all4 = r("0.0.0.0", "255.255.255.255");
    let all6 = r("::", V6_MAX);
    full.insert_range(all4);
    full.insert_range(all6);
    assert_eq!(full.first_free(&all4), None);
    assert_eq!(full.first_free(&all6), None);
    assert_eq!(full.free_in(&all6), 0);
    assert_eq!(full.len(), u128::MAX); // 2^32 + 2^128, saturated
    assert!(full.contains(ip(V6_MAX)) && full.contains(ip("255.255.255.255")));
    full.remove(ip(V6_MAX));
    assert_eq!(full.first_free(&all6), Some(ip(V6_MAX)));
    full.remove(ip("::"));
    assert_eq!(full.first_free(&all6), Some(ip("::")));
    assert_eq!(full.free_in(&all6), 2);
    assert_canonical(&full);
}

#[test]
fn gaps_and_ends() {
    let mut set = RangeSet::new();
    for a in ["10.0.0.1", "10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.9"] {
        set.insert(ip(a));
    }
    assert_eq!(set.ranges().count(), 3);
    assert_canonical(&set);
    let p = r("10.0.0.1", "10.0.0.9");
    assert_eq!(set.first_free(&p), Some(ip("10.0.0.3")));
    assert_eq!(set.free_in(&p), 4); // .3 .6 .7 .8
    assert_eq!(set.used_in(&p), 5);
    let free: Vec<String> = set.free_ranges(&p).map(|r| r.to_string()).collect();
    assert_eq!(free, ["10.0.0.3", "10.0.0.6-10.0.0.8"]);
    // Filling the gap merges the neighbours.
    set.insert(ip("10.0.0.3"));
    assert_eq!(set.ranges().next(), Some(r("10.0.0.1", "10.0.0.5")));
    assert_eq!(set.first_free(&p), Some(ip("10.0.0.6")));
    // `within` starting inside a used range, at its end, after it.
    assert_eq!(
        set.first_free(&r("10.0.0.5", "10.0.0.9")),
        Some(ip("10.0.0.6"))
    );
    assert_eq!(set.first_free(&r("10.0.0.9", "10.0.0.9")), None);
    assert_eq!(
        set.first_free(&r("10.0.0.9", "10.0.0.10")),
        Some(ip("10.0.0.10"))
    );
    // Removing splits.
    set.remove(ip("10.0.0.2"));
    assert_eq!(set.first_free(&p), Some(ip("10.0.0.2")));
    assert_eq!(
        set.ranges().collect::<Vec<_>>(),
        [
            IpRange::single(ip("10.0.0.1")),
            r("10.0.0.3", "10.0.0.5"),
            IpRange::single(ip("10.0.0.9"))
        ]
    );
    // Removing what is absent is a no-op.
    let before = set.clone();
    set.remove(ip("10.0.0.200"));
    set.remove(ip("2001:db8::1"));
    assert_eq!(set, before);
    assert_canonical(&set);
}

#[test]
fn edges_of_the_number_spaces() {
    // IPv4 top and bottom.
    let mut set = RangeSet::new();
    set.insert(ip("255.255.255.255"));
    set.insert(ip("0.0.0.0"));
    let all4 = r("0.0.0.0", "255.255.255.255");
    assert_eq!(set.first_free(&all4), Some(ip("0.0.0.1")));
    assert_eq!(
        set.first_free(&r("255.255.255.254", "255.255.255.255")),
        Some(ip("255.255.255.254"))
    );
    set.insert(ip("255.255.255.254"));
    assert_eq!(
        set.first_free(&r("255.255.255.254", "255.255.255.255")),
        None
    );
    assert_eq!(set.free_in(&all4), (1u128 << 32) - 3);

    // IPv6 around u128::MAX and around 2^64 and 2^32 (the IPv4 top, which must not leak).
    set.insert_range(r("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0", V6_MAX));
    let top = r("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00", V6_MAX);
    assert_eq!(set.first_free(&top), Some(top.start()));
    assert_eq!(set.free_in(&top), 0xf0);
    assert_eq!(
        set.first_free(&r("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff8", V6_MAX)),
        None
    );
    set.insert_range(r("::ffff:ffff", "::1:0:0")); // across 2^32 in the v6 space
    set.insert_range(r("::ffff:ffff:ffff:ffff", "::1:0:0:0:1")); // across 2^64
    assert_eq!(
        set.first_free(&r("::ffff:ffff", "::2:0:0")),
        Some(ip("::1:0:1"))
    );
    assert_eq!(
        set.first_free(&r("::ffff:ffff:ffff:fff0", "::2:0:0:0:0")),
        Some(ip("::ffff:ffff:ffff:fff0"))
    );
    assert_eq!(
        set.first_free(&r("::ffff:ffff:ffff:ffff", "::2:0:0:0:0")),
        Some(ip("::1:0:0:0:2"))
    );
    // The v6 range ::ffff:ffff does not touch IPv4 255.255.255.255.
    assert!(set.contains(ip("255.255.255.255")));
    assert!(!set.contains(ip("0.0.0.1")));
    assert!(!set.contains(ip("::1")));
    assert!(!set.contains(ip("::")));
    assert_canonical(&set);
}

#[test]
fn families_stay_apart() {
    let mut set = RangeSet::new();
    set.insert_range(r("0.0.0.0", "0.0.0.9"));
    set.insert_range(r("::a", "::14"));
    // 0.0.0.9 and ::a are "adjacent" as numbers but must not merge.
    assert_eq!(set.ranges().count(), 2);
    assert_eq!(set.first_free(&r("::", "::ff")), Some(ip("::")));
    assert_eq!(set.first_free(&r("::a", "::ff")), Some(ip("::15")));
    assert_eq!(
        set.first_free(&r("0.0.0.0", "0.0.0.255")),
        Some(ip("0.0.0.10"))
    );
    assert_eq!(set.len(), 10 + 11);
    assert_eq!(set.ranges().next().unwrap(), r("0.0.0.0", "0.0.0.9"));
}

#[test]
fn insert_range_merges_many() {
    let mut set = RangeSet::new();
    for i in (0u32..100).step_by(2) {
        set.insert(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)));
    }
    assert_eq!(set.ranges().count(), 50);
    set.insert_range(r("10.0.0.1", "10.0.0.97"));
    assert_eq!(
        set.ranges().collect::<Vec<_>>(),
        [r("10.0.0.0", "10.0.0.98")]
    );
    set.remove_range(r("10.0.0.10", "10.0.0.19"));
    assert_eq!(set.len(), 89);
    assert_eq!(
        set.first_free(&r("10.0.0.0", "10.0.0.255")),
        Some(ip("10.0.0.10"))
    );
    assert_canonical(&set);
}

/// A /64 with 10,000 allocated addresses answers first_free and free_in without
/// enumerating the range. (Speed is measured in `benches/ipam.rs`, not asserted here.)
#[test]
fn first_free_on_a_slash_64_with_10000_allocations() {
    let pool = PoolExpr::parse("2001:db8:1:2::/64").unwrap();
    let alloc = pool.allocatable();
    let base = num(alloc.start());

    // Dense: the allocator's own pattern, lowest free first.
    let mut dense = RangeSet::new();
    for _ in 0..10_000 {
        let next = dense.first_free(&alloc).expect("a /64 is never full here");
        dense.insert(next);
    }
    assert_eq!(dense.len(), 10_000);
    assert_eq!(dense.ranges().count(), 1);
    assert_eq!(
        dense.first_free(&alloc),
        Some(IpAddr::V6(Ipv6Addr::from(base + 10_000)))
    );
    assert_eq!(dense.free_in(&alloc), (1u128 << 64) - 1 - 10_000);

    // Fragmented: every other address, plus a hole far away; 10,000 stored ranges.
    let mut sparse = RangeSet::new();
    for i in 0..10_000u128 {
        sparse.insert(IpAddr::V6(Ipv6Addr::from(base + 2 * i)));
    }
    assert_eq!(sparse.ranges().count(), 10_000);
    assert_eq!(
        sparse.first_free(&alloc),
        Some(IpAddr::V6(Ipv6Addr::from(base + 1)))
    );
    let tail = IpRange::new(IpAddr::V6(Ipv6Addr::from(base + 2 * 9_999)), alloc.end()).unwrap();
    assert_eq!(
        sparse.first_free(&tail),
        Some(IpAddr::V6(Ipv6Addr::from(base + 2 * 9_999 + 1)))
    );
    assert_eq!(sparse.free_in(&alloc), (1u128 << 64) - 1 - 10_000);

    // Fill the whole /64 but its last address: still one stored range, still instant.
    let mut full = RangeSet::new();
    full.insert_range(IpRange::new(alloc.start(), ip("2001:db8:1:2:ffff:ffff:ffff:fffe")).unwrap());
    assert_eq!(full.first_free(&alloc), Some(alloc.end()));
    full.insert(alloc.end());
    assert_eq!(full.first_free(&alloc), None);
    assert_eq!(full.free_in(&alloc), 0);
}

// ---------------------------------------------------------------------------------------
// Model-based property test
// ---------------------------------------------------------------------------------------

/// Addresses are `base + off` with `off < SPAN`, in one of a few windows chosen to sit at
/// the edges of the number spaces (0, 2^32-1 for IPv4; 0, 2^32, 2^64, 2^128-1 for IPv6).
const SPAN: u128 = 48;

#[derive(Debug, Clone, Copy)]
struct Window {
    v4: bool,
    base: u128,
}

const WINDOWS: [Window; 6] = [
    Window { v4: true, base: 0 },
    Window {
        v4: true,
        base: u32::MAX as u128 + 1 - SPAN,
    },
    Window { v4: false, base: 0 },
    Window {
        v4: false,
        base: (1 << 32) - SPAN / 2,
    },
    Window {
        v4: false,
        base: (1 << 64) - SPAN / 2,
    },
    Window {
        v4: false,
        base: u128::MAX - SPAN + 1,
    },
];

impl Window {
    fn addr(&self, off: u128) -> IpAddr {
        let n = self.base + off;
        if self.v4 {
            IpAddr::V4(Ipv4Addr::from(n as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(n))
        }
    }
    fn range(&self, a: u128, b: u128) -> IpRange {
        IpRange::new(self.addr(a.min(b)), self.addr(a.max(b))).unwrap()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u128),
    InsertRange(u128, u128),
    Remove(u128),
    RemoveRange(u128, u128),
    /// Allocate like the plan does: first_free, then insert.
    Allocate(u128, u128),
}

fn op() -> impl Strategy<Value = Op> {
    let off = 0..SPAN;
    prop_oneof![
        4 => off.clone().prop_map(Op::Insert),
        2 => (off.clone(), off.clone()).prop_map(|(a, b)| Op::InsertRange(a, b)),
        3 => off.clone().prop_map(Op::Remove),
        1 => (off.clone(), off.clone()).prop_map(|(a, b)| Op::RemoveRange(a, b)),
        3 => (off.clone(), off).prop_map(|(a, b)| Op::Allocate(a, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn range_set_matches_a_btreeset_model(
        w in 0..WINDOWS.len(),
        ops in prop::collection::vec(op(), 0..60),
        queries in prop::collection::vec((0..SPAN, 0..SPAN), 1..8),
    ) {
        let w = WINDOWS[w];
        let other = if w.v4 { WINDOWS[2] } else { WINDOWS[0] };
        let mut set = RangeSet::new();
        let mut model: BTreeSet<u128> = BTreeSet::new();
        // An address of the other family, always present: it must never interfere.
        set.insert(other.addr(7));

        for op in &ops {
            match *op {
                Op::Insert(x) => { set.insert(w.addr(x)); model.insert(x); }
                Op::InsertRange(a, b) => {
                    set.insert_range(w.range(a, b));
                    model.extend(a.min(b)..=a.max(b));
                }
                Op::Remove(x) => { set.remove(w.addr(x)); model.remove(&x); }
                Op::RemoveRange(a, b) => {
                    set.remove_range(w.range(a, b));
                    for x in a.min(b)..=a.max(b) { model.remove(&x); }
                }
                Op::Allocate(a, b) => {
                    let within = w.range(a, b);
                    let want = (a.min(b)..=a.max(b)).find(|x| !model.contains(x));
                    let got = set.first_free(&within);
                    prop_assert_eq!(got, want.map(|x| w.addr(x)));
                    if let Some(x) = want { set.insert(w.addr(x)); model.insert(x); }
                }
            }
            assert_canonical(&set);
        }

        for x in 0..SPAN {
            prop_assert_eq!(set.contains(w.addr(x)), model.contains(&x), "contains {}", x);
        }
        prop_assert_eq!(set.len(), model.len() as u128 + 1);
        prop_assert!(set.contains(other.addr(7)));
        prop_assert!(!set.is_empty());
        for &(a, b) in &queries {
            let within = w.range(a, b);
            let (lo, hi) = (a.min(b), a.max(b));
            let want_first = (lo..=hi).find(|x| !model.contains(x)).map(|x| w.addr(x));
            let want_free = (lo..=hi).filter(|x| !model.contains(x)).count() as u128;
            prop_assert_eq!(set.first_free(&within), want_first);
            prop_assert_eq!(set.free_in(&within), want_free);
            prop_assert_eq!(set.used_in(&within), (hi - lo + 1) - want_free);
            let gaps: u128 = set.free_ranges(&within).map(|r| r.size()).sum();
            prop_assert_eq!(gaps, want_free);
        }
        // The model rebuilt from the ranges is the model.
        let rebuilt: BTreeSet<u128> = set
            .ranges()
            .filter(|r| r.family_is_v4() == w.v4)
            .flat_map(|r| (num(r.start()) - w.base)..=(num(r.end()) - w.base))
            .collect();
        prop_assert_eq!(rebuilt, model);
    }
}
