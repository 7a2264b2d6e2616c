//! Root test: VIP failover between two LB "nodes" when the proxy dies.
//!
//! Two network namespaces (`k8slbf-<pid>-<n>`) joined by a veth pair, addresses from
//! 198.18.0.0/24; each runs the real `k8slb-actor run --state file:<state.json>` inside
//! its namespace (`ip netns exec`), with the real keepalived and HAProxy. One VRRP
//! instance (owner node1, backup node2, advert 100 ms, no preempt) with one VIP.
//!
//! 1. node1 holds the VIP, node2 does not;
//! 2. the HAProxy master of node1 is SIGKILLed: node1's actor writes `1` to its
//!    `proxy-health` file, keepalived (track_file, weight 0) faults the instance, and the
//!    VIP moves to node2; node1 restarts HAProxy and writes `0` again;
//! 3. both namespaces' addresses are sampled every 20 ms from before the kill to after
//!    the move: the VIP on both nodes for more than 1 s fails the test (the overlap and
//!    the failover time are printed).
//!
//! Namespaces and every process in them are removed on drop, also on panic. Ignored, with the
//! reason, by plain `cargo test`; `./scripts/test.sh` runs it. Run, it FAILS (never
//! skips) without root or without haproxy / keepalived / ip.
//!
//! Run: `cargo test -p k8slb-actor --test netns_failover -- --include-ignored --nocapture`.

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::state_json::StateJson;
use support::{holds, require_root_and, ActorProc, Netns};

const VIP: &str = "198.18.0.100";
/// This file's namespaces are `k8slbf-<pid>-<n>`.
const NS_PREFIX: &str = "k8slbf";

/// One actor per node: `--work-dir <dir>/<node>`, log `<dir>/<node>.log`.
fn start_actor(ns: &Netns, dir: &Path, node: &str) -> ActorProc {
    ActorProc::start(
        ns,
        dir,
        node,
        dir.join(node),
        dir.join(format!("{node}.log")),
    )
}

/// [`support::wait_until_every`] 20 ms, the sampling period.
fn wait_until(timeout: Duration, f: impl FnMut() -> bool) -> bool {
    support::wait_until_every(timeout, Duration::from_millis(20), f)
}

fn state_json() -> String {
    StateJson::pool("198.18.0.0/24", "198.18.0.100", 60)
        .node("node1", "198.18.0.1")
        .node("node2", "198.18.0.2")
        .service("default/web", VIP, &[8080], ("198.18.0.1", 9001))
        .json()
}

/// (time since the start of sampling, node1 holds the VIP, node2 holds it)
type Sample = (Duration, bool, bool);

/// The longest run of consecutive samples with the VIP on both nodes.
fn longest_overlap(samples: &[Sample]) -> Duration {
    let mut best = Duration::ZERO;
    let mut start: Option<Duration> = None;
    for &(t, a, b) in samples {
        match (a && b, start) {
            (true, None) => start = Some(t),
            (true, Some(s)) => best = best.max(t - s),
            (false, _) => start = None,
        }
    }
    best
}

#[test]
#[ignore = "needs root: two network namespaces with the real actor, keepalived and HAProxy; ./scripts/test.sh runs it"]
fn netns_vip_moves_when_the_proxy_dies() {
    require_root_and(&["ip", "haproxy", "keepalived"]);
    let n1 = Netns::new(NS_PREFIX);
    let n2 = Netns::new(NS_PREFIX);
    n1.ip(&format!(
        "link add eth0 type veth peer name eth0 netns {}",
        n2.name
    ));
    n1.ip("addr add 198.18.0.1/24 dev eth0");
    n2.ip("addr add 198.18.0.2/24 dev eth0");
    n1.ip("link set eth0 up");
    n2.ip("link set eth0 up");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("state.json"), state_json()).unwrap();

    // 1. node1 takes the VIP; then node2 comes up as backup.
    let a1 = start_actor(&n1, dir.path(), "node1");
    assert!(
        wait_until(Duration::from_secs(20), || holds(&n1.name, VIP)),
        "the VIP never arrived on node1; log:\n{}",
        a1.log()
    );
    assert_eq!(a1.health().as_deref(), Some("0\n"), "{}", a1.log());
    let a2 = start_actor(&n2, dir.path(), "node2");
    assert!(
        wait_until(Duration::from_secs(20), || {
            a2.health().as_deref() == Some("0\n")
                && a2.log().contains("daemon=keepalived")
                && a2.log().contains("started")
        }),
        "node2 never started its proxy and keepalived; log:\n{}",
        a2.log()
    );
    // A few advert intervals so node2 settles as BACKUP.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(holds(&n1.name, VIP), "node1 lost the VIP: {}", a1.log());
    assert!(
        !holds(&n2.name, VIP),
        "node2 took the VIP while node1 is healthy; log:\n{}",
        a2.log()
    );

    // The actors observe over netlink which VIPs their node holds (metrics, every 2 s).
    let held_line = format!("k8slb_actor_vips_held{{pool=\"default\",vip=\"{VIP}\"}} 1");
    let reports = |ns: &Netns| ns.get("127.0.0.1:9254", "/metrics").contains(&held_line);
    assert!(
        wait_until(Duration::from_secs(10), || reports(&n1)),
        "node1 holds {VIP} but its metrics do not say so:\n{}",
        n1.get("127.0.0.1:9254", "/metrics")
    );
    assert!(!reports(&n2), "node2 reports a VIP it does not hold");

    // 2. sample both nodes every 20 ms while node1's HAProxy master is SIGKILLed.
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let sampler = {
        let (stop, ns1, ns2) = (stop.clone(), n1.name.clone(), n2.name.clone());
        std::thread::spawn(move || {
            let mut v: Vec<Sample> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                v.push((t0.elapsed(), holds(&ns1, VIP), holds(&ns2, VIP)));
                std::thread::sleep(Duration::from_millis(20));
            }
            v
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let master = a1
        .child_named("haproxy")
        .unwrap_or_else(|| panic!("no haproxy child of node1's actor; log:\n{}", a1.log()));
    let killed_at = t0.elapsed();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(master as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    let moved = wait_until(Duration::from_secs(15), || {
        holds(&n2.name, VIP) && !holds(&n1.name, VIP)
    });
    // node1 restarts its proxy and says so in the health file (no preempt: node2 keeps
    // the VIP).
    let restarted = wait_until(Duration::from_secs(15), || {
        a1.child_named("haproxy").is_some_and(|p| p != master)
            && a1.health().as_deref() == Some("0\n")
    });
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.join().unwrap();

    let overlap = longest_overlap(&samples);
    let on2 = samples
        .iter()
        .find(|(t, _, b)| *t >= killed_at && *b)
        .map(|(t, _, _)| *t - killed_at);
    let off1 = samples
        .iter()
        .find(|(t, a, _)| *t >= killed_at && !*a)
        .map(|(t, _, _)| *t - killed_at);
    eprintln!(
        "failover: {} samples every 20 ms; VIP gone from node1 {off1:?} and on node2 {on2:?} after the SIGKILL; longest time on both nodes: {overlap:?}",
        samples.len()
    );
    assert!(
        moved,
        "the VIP did not move to node2 after node1's proxy died\nnode1 log:\n{}\nnode2 log:\n{}",
        a1.log(),
        a2.log()
    );
    assert!(
        wait_until(Duration::from_secs(10), || reports(&n2) && !reports(&n1)),
        "after the move, node2 must report {VIP} and node1 not;\nnode1 log:\n{}\nnode2 log:\n{}",
        a1.log(),
        a2.log()
    );
    assert!(
        a2.log().contains("VIPs held by this node changed"),
        "node2 logs the VIP it gained: {}",
        a2.log()
    );
    assert!(
        overlap <= Duration::from_secs(1),
        "the VIP was on both nodes for {overlap:?}"
    );
    assert!(
        restarted,
        "node1 did not restart its proxy and write 0 to its health file; log:\n{}",
        a1.log()
    );
    let log1 = a1.log();
    assert!(
        log1.contains("health file says unhealthy") || log1.contains("healthy=false"),
        "node1 never wrote 1 to its health file; log:\n{log1}"
    );
    let (last_t, last1, last2) = *samples.last().unwrap();
    assert!(
        !last1 && last2,
        "at {last_t:?} the VIP should be on node2 only (node1 {last1}, node2 {last2})"
    );
    drop(a2);
    drop(a1);
}
