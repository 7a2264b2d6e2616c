//! Root test: nodes that apply a change of a VRRP instance's VIP list at different times
//! never hold the same VIP together (issue 9, the chaos soak's 3.2 s dual holder after an
//! API outage).
//!
//! keepalived drops an advertisement whose address list differs from its own
//! configuration of the instance ("received an unexpected ip number count 2, expected
//! 1!"): a backup that has applied the new list hears no master, takes over after three
//! advert intervals and holds every VIP of the instance, the unchanged ones too, until
//! the master applies the same list. Actors apply a new state on their own schedule
//! (seconds apart after an API outage), so any Service released from or added to a
//! shared instance could do this. The actor therefore renders a fixed per-instance
//! anchor address as the only advertised address (`virtual_ipaddress`) and the VIPs as
//! `virtual_ipaddress_excluded`: the advertisements no longer depend on the VIP list.
//!
//! Two network namespaces (`k8slbl-<pid>-<n>`) joined by a veth pair, 198.18.7.0/24; each
//! runs the real `k8slb-actor run --state file:<its own state.json>` with the real
//! keepalived and HAProxy. One instance (owner n1 at 150, backup n2 at 100, advert 100 ms,
//! no preempt) with two VIPs, 198.18.7.100 and .101.
//!
//! 1. n1 holds both VIPs, n2 none;
//! 2. n2 alone gets the state where `.101`'s Service is gone (n1 lags behind); once n2's
//!    actor has reloaded keepalived with it, both nodes are sampled every 20 ms for 30
//!    advert intervals (ten times keepalived's master-down timer): n2 must never hold
//!    `.100` (it would within 0.4 s if it ignored n1's adverts);
//! 3. n1 gets the same state: it keeps `.100`, drops `.101`, n2 still holds nothing.
//!
//! Fails on a keepalived.conf that lists the VIPs in `virtual_ipaddress`. Namespaces and
//! every process in them are removed on drop, also on panic. FAILS (never skips) without
//! root or without haproxy / keepalived / ip.
//!
//! Run: `cargo test -p k8slb-actor --test netns_vip_list_change -- --nocapture`.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};
use support::state_json::StateJson;
use support::{holds, require_root_and, wait_until, ActorProc, Netns};

const KEPT: &str = "198.18.7.100";
const RELEASED: &str = "198.18.7.101";
const NS_PREFIX: &str = "k8slbl";

fn state_json(vips: &[&str]) -> String {
    let mut s = StateJson::pool("198.18.7.0/24", "198.18.7.100", 62)
        .node("n1", "198.18.7.1")
        .node("n2", "198.18.7.2");
    for (i, v) in vips.iter().enumerate() {
        s = s.service(&format!("default/web{i}"), v, &[8080], ("198.18.7.1", 9001));
    }
    s.json()
}

/// Writes `state` where the actor of `dir` reads it (write + rename: never half a file).
fn publish(dir: &Path, state: &str) {
    let tmp = dir.join("state.json.tmp");
    std::fs::write(&tmp, state).unwrap();
    std::fs::rename(&tmp, dir.join("state.json")).unwrap();
}

/// How many times the actor has reloaded or started keepalived.
fn keepalived_applies(a: &ActorProc) -> usize {
    a.log()
        .lines()
        .filter(|l| {
            l.contains("daemon=keepalived") && (l.contains("reloaded") || l.contains("started"))
        })
        .count()
}

#[test]
#[ignore = "needs root: network namespaces with real keepalived; ./scripts/test.sh runs it"]
fn netns_nodes_applying_a_vip_list_change_at_different_times_never_share_a_vip() {
    require_root_and(&["ip", "haproxy", "keepalived"]);
    let n1 = Netns::new(NS_PREFIX);
    let n2 = Netns::new(NS_PREFIX);
    n1.ip(&format!(
        "link add eth0 type veth peer name eth0 netns {}",
        n2.name
    ));
    n1.ip("addr add 198.18.7.1/24 dev eth0");
    n2.ip("addr add 198.18.7.2/24 dev eth0");
    n1.ip("link set eth0 up");
    n2.ip("link set eth0 up");
    let dir = tempfile::tempdir().unwrap();
    let (d1, d2) = (dir.path().join("n1"), dir.path().join("n2"));
    for d in [&d1, &d2] {
        std::fs::create_dir_all(d).unwrap();
        publish(d, &state_json(&[KEPT, RELEASED]));
    }

    // 1. n1 takes both VIPs; then n2 comes up as its backup.
    let a1 = ActorProc::start(&n1, &d1, "n1", d1.join("work"), d1.join("actor.log"));
    assert!(
        wait_until(Duration::from_secs(20), || holds(&n1.name, KEPT)
            && holds(&n1.name, RELEASED)),
        "n1 never held both VIPs; log:\n{}",
        a1.log()
    );
    let a2 = ActorProc::start(&n2, &d2, "n2", d2.join("work"), d2.join("actor.log"));
    assert!(
        wait_until(Duration::from_secs(20), || keepalived_applies(&a2) >= 1),
        "n2 never started keepalived; log:\n{}",
        a2.log()
    );
    let a2_cfg = std::fs::read_to_string(d2.join("work/keepalived.conf")).unwrap_or_default();

    // 2. Only n2 learns that RELEASED's Service is gone.
    let before = keepalived_applies(&a2);
    publish(&d2, &state_json(&[KEPT]));
    assert!(
        wait_until(Duration::from_secs(20), || keepalived_applies(&a2) > before),
        "n2 never applied the new state; log:\n{}",
        a2.log()
    );
    let t0 = Instant::now();
    let mut both: Option<Duration> = None;
    let mut n2_released = false;
    // 30 advert intervals: a backup that ignored the master's adverts would take over
    // after 3 (plus its skew), i.e. within 0.4 s.
    while t0.elapsed() < Duration::from_secs(3) {
        if holds(&n2.name, KEPT) && holds(&n1.name, KEPT) {
            both.get_or_insert(t0.elapsed());
        }
        n2_released |= holds(&n2.name, RELEASED);
        std::thread::sleep(Duration::from_millis(20));
    }
    let cfg = std::fs::read_to_string(d2.join("work/keepalived.conf")).unwrap_or_default();
    assert!(
        both.is_none(),
        "{KEPT} was on both nodes from {:?} after n2 applied the shorter VIP list (n1 had \
         not): n2 ignored n1's advertisements\nn2 keepalived.conf before:\n{a2_cfg}\nafter:\n{cfg}\nn2 log:\n{}",
        both.unwrap_or_default(),
        a2.log()
    );
    assert!(
        !n2_released,
        "n2 took {RELEASED}, which its state no longer has"
    );
    assert!(
        holds(&n1.name, KEPT) && holds(&n1.name, RELEASED),
        "n1 (still on the old state) lost a VIP; log:\n{}",
        a1.log()
    );

    // 3. n1 catches up: it keeps KEPT and drops RELEASED; n2 still holds nothing.
    publish(&d1, &state_json(&[KEPT]));
    assert!(
        wait_until(Duration::from_secs(20), || !holds(&n1.name, RELEASED)),
        "n1 kept {RELEASED} after its state dropped it; log:\n{}",
        a1.log()
    );
    assert!(holds(&n1.name, KEPT), "n1 lost {KEPT}; log:\n{}", a1.log());
    assert!(
        !holds(&n2.name, KEPT),
        "n2 holds {KEPT} next to n1; log:\n{}",
        a2.log()
    );
    drop(a2);
    drop(a1);
}
