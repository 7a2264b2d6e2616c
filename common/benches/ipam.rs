//! IPAM speed: `first_free` on an IPv6 /64 holding 10,000 allocations must cost the same as
//! on an IPv4 /28 (it never enumerates the range). Run:
//!
//!     cargo bench -p k8slb-common --bench ipam
//!
//! Criterion prints each case; a short side-by-side summary is printed at the end.

use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use k8slb_common::ipam::{IpRange, PoolExpr, RangeSet};

/// An IPv4 /28 with 13 of its 14 allocatable addresses in use (the last one free).
fn slash28() -> (RangeSet, IpRange) {
    let within = PoolExpr::parse("198.18.0.0/28").unwrap().allocatable();
    let mut set = RangeSet::new();
    for _ in 0..13 {
        let ip = set.first_free(&within).unwrap();
        set.insert(ip);
    }
    (set, within)
}

/// An IPv6 /64 with 10,000 addresses in use: `dense` from the start (one merged range), or
/// `sparse`, every other address (10,000 stored ranges).
fn slash64(sparse: bool) -> (RangeSet, IpRange) {
    let within = PoolExpr::parse("fd00:1:2:3::/64").unwrap().allocatable();
    let base = match within.start() {
        IpAddr::V6(a) => u128::from(a),
        IpAddr::V4(_) => unreachable!(),
    };
    let step = if sparse { 2 } else { 1 };
    let mut set = RangeSet::new();
    for i in 0..10_000u128 {
        set.insert(IpAddr::V6(Ipv6Addr::from(base + step * i)));
    }
    (set, within)
}

/// `within` starting at the 5,000th allocation of a sparse /64: the answer is in the middle.
fn middle(within: &IpRange) -> IpRange {
    let base = match within.start() {
        IpAddr::V6(a) => u128::from(a),
        IpAddr::V4(_) => unreachable!(),
    };
    IpRange::new(IpAddr::V6(Ipv6Addr::from(base + 10_000)), within.end()).unwrap()
}

fn bench(c: &mut Criterion) {
    let (s28, w28) = slash28();
    let (dense, w64) = slash64(false);
    let (sparse, _) = slash64(true);
    let mid = middle(&w64);

    let mut g = c.benchmark_group("first_free");
    g.bench_function("v4_slash28_13_used", |b| {
        b.iter(|| black_box(&s28).first_free(black_box(&w28)))
    });
    g.bench_function("v6_slash64_10k_used_dense", |b| {
        b.iter(|| black_box(&dense).first_free(black_box(&w64)))
    });
    g.bench_function("v6_slash64_10k_used_sparse", |b| {
        b.iter(|| black_box(&sparse).first_free(black_box(&w64)))
    });
    g.bench_function("v6_slash64_10k_used_sparse_from_middle", |b| {
        b.iter(|| black_box(&sparse).first_free(black_box(&mid)))
    });
    g.finish();

    let mut g = c.benchmark_group("free_in");
    g.bench_function("v4_slash28_13_used", |b| {
        b.iter(|| black_box(&s28).free_in(black_box(&w28)))
    });
    g.bench_function("v6_slash64_10k_used_dense", |b| {
        b.iter(|| black_box(&dense).free_in(black_box(&w64)))
    });
    // O(k): walks the 10,000 stored ranges.
    g.bench_function("v6_slash64_10k_used_sparse", |b| {
        b.iter(|| black_box(&sparse).free_in(black_box(&w64)))
    });
    g.finish();

    // The allocator's loop: first_free then insert, n times from an empty set.
    let mut g = c.benchmark_group("allocate_n");
    g.sample_size(20);
    for (name, pool) in [("v4_slash16", "198.18.0.0/16"), ("v6_slash64", "fd00::/64")] {
        let within = PoolExpr::parse(pool).unwrap().allocatable();
        let n = 10_000u64;
        g.throughput(Throughput::Elements(n));
        g.bench_with_input(BenchmarkId::new(name, n), &within, |b, w| {
            b.iter(|| {
                let mut set = RangeSet::new();
                for _ in 0..n {
                    let ip = set.first_free(w).unwrap();
                    set.insert(ip);
                }
                set
            })
        });
    }
    g.finish();

    c.bench_function("pool_expr_parse_v6_cidr", |b| {
        b.iter(|| PoolExpr::parse(black_box("2001:0468:0101::5/96")).unwrap())
    });

    // Side by side, for the report.
    println!("\nsummary (mean of many calls, ns per first_free):");
    for (label, set, within) in [
        ("IPv4 /28, 13 used", &s28, &w28),
        ("IPv6 /64, 10,000 used (dense)", &dense, &w64),
        ("IPv6 /64, 10,000 used (sparse)", &sparse, &w64),
        ("IPv6 /64, 10,000 used (sparse, mid)", &sparse, &mid),
    ] {
        println!(
            "  {label:<38} {:>8.1} ns",
            per_call(|| set.first_free(within))
        );
    }
}

fn per_call<T>(mut f: impl FnMut() -> T) -> f64 {
    let n = 2_000_000u32;
    let t = Instant::now();
    for _ in 0..n {
        black_box(f());
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

fn main() {
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    bench(&mut c);
    c.final_summary();
}
