//! Root test: a keepalived that dies takes its VIPs with it (issue 9, chaos soak).
//!
//! One network namespace (`k8slbk-<pid>-<n>`) with a veth pair, 198.18.6.2/24 on
//! `eth0`; the real `k8slb-actor run --state file:<state.json>` inside it, with the real
//! keepalived and HAProxy. One VRRP instance (n1 its only member, priority 150) with
//! the VIP 198.18.6.10.
//!
//! 1. the actor's keepalived holds the VIP;
//! 2. every keepalived process is SIGKILLed (the VRRP child first: it would release the
//!    VIPs itself when its parent dies), as the soak's `keepalived-kill` does; a thread
//!    samples the namespace all along: the keepalived processes under the actor and
//!    whether the VIP is on the interface;
//! 3. the VIP must be gone from the interface BEFORE any new keepalived runs (order of
//!    the samples, and order of the actor's log lines), and the restarted keepalived
//!    takes it back by VRRP.
//!
//! Without the removal on exit, the VIP stays until the restarted keepalived runs (while
//! a backup node has taken it over): this test fails.
//!
//! And when the actor itself is SIGKILLed:
//! - as PID 1's child (a container; here `unshare --pid --fork --mount-proc`): the init
//!   SIGTERMs keepalived (which releases the VIP) and the proxy, then exits with the
//!   actor's status (137); no VIP and no daemon is left;
//! - outside a container: keepalived and HAProxy keep running with the VIP; the next
//!   actor of the same work dir stops them before starting its own.
//!
//! Namespaces and every process in them are removed on drop, also on panic. Ignored, with the
//! reason, by plain `cargo test`; `./scripts/test.sh` runs them. Run, they FAIL (never
//! skip) without root or without haproxy / keepalived / ip.
//!
//! Run: `cargo test -p k8slb-actor --test netns_keepalived_crash -- --include-ignored --nocapture`.

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::state_json::StateJson;
use support::{children, comm, holds, require_root_and, wait_until, ActorProc, Netns};

const VIP: &str = "198.18.6.10";
const NS_PREFIX: &str = "k8slbk";

fn state_json() -> String {
    state_json_ports(&[8080])
}

/// The state with `default/web` listening on `ports`.
fn state_json_ports(ports: &[u16]) -> String {
    StateJson::pool("198.18.6.0/24", "198.18.6.0", 61)
        .node("n1", "198.18.6.2")
        .service("default/web", VIP, ports, ("198.18.6.2", 9001))
        .json()
}

fn is_keepalived(pid: u32) -> bool {
    comm(pid).as_deref() == Some("keepalived")
}

/// The keepalived parents under the actor (`ip netns exec` execs: the child's pid is
/// the actor's). A killed one stays listed (a zombie) until the actor reaps it.
fn keepalived_parents(actor: u32) -> BTreeSet<u32> {
    children(actor)
        .into_iter()
        .filter(|&k| is_keepalived(k))
        .collect()
}

/// (time since sampling started, keepalived parents under the actor, VIP on eth0)
type Sample = (Duration, BTreeSet<u32>, bool);

/// Byte offset of the first line at or after `from` containing every one of `words`.
fn line_at(log: &str, from: usize, words: &[&str]) -> Option<usize> {
    let mut off = 0;
    for l in log.split_inclusive('\n') {
        if off >= from && words.iter().all(|w| l.contains(w)) {
            return Some(off);
        }
        off += l.len();
    }
    None
}

#[test]
#[ignore = "needs root: a network namespace with the real actor, keepalived and HAProxy; ./scripts/test.sh runs it"]
fn netns_killed_keepalived_vips_leave_before_restart_and_come_back() {
    require_root_and(&["ip", "haproxy", "keepalived"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("eth0", "peer0", "198.18.6.2/24");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("state.json"), state_json()).unwrap();

    // 1. the actor's keepalived becomes MASTER and holds the VIP.
    let a = ActorProc::start(
        &ns,
        dir.path(),
        "n1",
        dir.path().join("work"),
        dir.path().join("actor.log"),
    );
    let actor = a.child.id();
    assert!(
        wait_until(Duration::from_secs(20), || holds(&ns.name, VIP)),
        "the VIP never arrived; log:\n{}",
        a.log()
    );
    let old = keepalived_parents(actor);
    assert_eq!(
        old.len(),
        1,
        "one keepalived under the actor; log:\n{}",
        a.log()
    );
    let old_parent = *old.iter().next().unwrap();
    let vrrp_children: Vec<u32> = children(old_parent)
        .into_iter()
        .filter(|&k| is_keepalived(k))
        .collect();
    assert!(
        !vrrp_children.is_empty(),
        "keepalived has no VRRP child; log:\n{}",
        a.log()
    );

    // 2. sample from before the kill until a new keepalived runs and holds the VIP.
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let sampler = {
        let (stop, name) = (stop.clone(), ns.name.clone());
        std::thread::spawn(move || {
            let mut v: Vec<Sample> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // Processes first, then the address: a VIP seen absent in a sample was
                // absent after that sample's process list was taken.
                let ka = keepalived_parents(actor);
                let held = holds(&name, VIP);
                v.push((t0.elapsed(), ka, held));
                std::thread::sleep(Duration::from_millis(5));
            }
            v
        })
    };
    // A few samples with keepalived alive first.
    std::thread::sleep(Duration::from_millis(100));
    let log_before = a.log().len();
    let killed_at = t0.elapsed();
    let kill = |pid: u32| {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    };
    // The VRRP child first: it would release the VIPs itself when its parent dies.
    for &c in &vrrp_children {
        kill(c);
    }
    kill(old_parent);

    // 3. a new keepalived runs and the VIP is back.
    let back = wait_until(Duration::from_secs(30), || {
        keepalived_parents(actor)
            .iter()
            .any(|&p| p != old_parent && !old.contains(&p))
            && holds(&ns.name, VIP)
    });
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.join().unwrap();
    let log = a.log();
    assert!(
        back,
        "no new keepalived holding the VIP after the kill; log:\n{log}"
    );

    let restarted = samples
        .iter()
        .position(|(t, ka, _)| *t > killed_at && ka.iter().any(|p| !old.contains(p)))
        .unwrap_or_else(|| panic!("the sampler never saw the new keepalived; log:\n{log}"));
    let gone = samples[..restarted]
        .iter()
        .position(|(t, _, held)| *t > killed_at && !*held);
    let back_at = samples[restarted..]
        .iter()
        .find(|(_, _, held)| *held)
        .map(|(t, _, _)| *t - killed_at);
    eprintln!(
        "keepalived SIGKILLed: {} samples; VIP gone after {:?}, new keepalived after {:?}, VIP back after {back_at:?}",
        samples.len(),
        gone.map(|i| samples[i].0 - killed_at),
        samples[restarted].0 - killed_at,
    );
    assert!(
        gone.is_some(),
        "the VIP was still on the interface when keepalived ran again (it must go the \
         moment keepalived is found dead); log:\n{log}"
    );

    // The actor says so, in one line with the VIP, before it restarts keepalived: its
    // exit watcher ("keepalived process gone"), or the supervisor that reaps it
    // ("keepalived exited") if the watcher did not get there first.
    let removed = line_at(&log, log_before, &["keepalived process gone", VIP])
        .or_else(|| line_at(&log, log_before, &["keepalived exited", VIP]))
        .unwrap_or_else(|| {
            panic!("no line naming the VIP removed after keepalived exited; log:\n{log}")
        });
    let started = line_at(&log, log_before, &["daemon=keepalived", "started"])
        .unwrap_or_else(|| panic!("no keepalived restart logged; log:\n{log}"));
    assert!(
        removed < started,
        "the VIPs must go before keepalived is restarted; log:\n{log}"
    );
    drop(a);
}

/// keepalived SIGKILLed while the control loop is busy (in a 4 s `haproxy -c` of a new
/// state, as a 10,000-Service config takes seconds): the VIP leaves at once, from the
/// actor's keepalived exit watcher, not when the loop gets round to reaping keepalived
/// (a backup takes the VIP over after three advert intervals). The haproxy binary is a
/// wrapper whose check sleeps while `<dir>/slow` exists, with `<dir>/checking` present
/// meanwhile. The VIP is seen gone BEFORE `checking` is seen gone (in that order of
/// reads), so it left while the loop was still in the check. Fails without the watcher
/// (the VIP goes only after the check).
#[test]
#[ignore = "needs root: a network namespace with the real actor, keepalived and HAProxy; ./scripts/test.sh runs it"]
fn netns_keepalived_killed_while_the_loop_is_busy_loses_its_vip_at_once() {
    require_root_and(&["ip", "haproxy", "keepalived"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("eth0", "peer0", "198.18.6.2/24");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("state.json"), state_json()).unwrap();
    let (slow, checking) = (d.join("slow"), d.join("checking"));
    let wrapper = d.join("haproxy-slow");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" -c \"*) if [ -e {slow} ]; then touch {checking}; sleep 4; rm -f {checking}; fi;; esac\nexec haproxy \"$@\"\n",
            slow = slow.display(),
            checking = checking.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let log_path = d.join("actor.log");
    let f = std::fs::File::create(&log_path).unwrap();
    let child = ns
        .cmd(support::ACTOR)
        .args(["run", "--node", "n1", "--admin-addr", "127.0.0.1:9254"])
        .args(["--min-reload-interval-ms", "100"])
        .arg("--state")
        .arg(format!("file:{}", d.join("state.json").display()))
        .arg("--work-dir")
        .arg(d.join("work"))
        .env("NO_COLOR", "1")
        .env("K8SLB_HAPROXY", &wrapper)
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    let a = ActorProc {
        child,
        log: log_path,
        work: d.join("work"),
    };
    let actor = a.child.id();
    assert!(
        wait_until(Duration::from_secs(20), || holds(&ns.name, VIP)),
        "the VIP never arrived; log:\n{}",
        a.log()
    );

    // The loop goes into a slow check of a new state (a new port: no Runtime API path).
    std::fs::write(&slow, "").unwrap();
    let tmp = d.join("state.json.tmp");
    std::fs::write(&tmp, state_json_ports(&[8080, 8081])).unwrap();
    std::fs::rename(&tmp, d.join("state.json")).unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || checking.exists()),
        "the actor never ran the slow check of the new state; log:\n{}",
        a.log()
    );
    let log_before = a.log().len();
    let parents = keepalived_parents(actor);
    assert_eq!(parents.len(), 1, "one keepalived; log:\n{}", a.log());
    let parent = *parents.iter().next().unwrap();
    let kill = |pid: u32| {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    };
    for c in children(parent).into_iter().filter(|&k| is_keepalived(k)) {
        kill(c);
    }
    kill(parent);

    // The VIP first, then the check: a VIP gone while the check still runs.
    let mut gone_while_busy = false;
    let settled = wait_until(Duration::from_secs(10), || {
        let held = holds(&ns.name, VIP);
        let busy = checking.exists();
        gone_while_busy = !held && busy;
        !held || !busy
    });
    std::fs::remove_file(&slow).unwrap();
    let log = a.log();
    assert!(
        settled,
        "neither the VIP left nor the check ended; log:\n{log}"
    );
    assert!(
        gone_while_busy,
        "the VIP stayed on the interface while the control loop was busy in a check \
         (it must go the moment keepalived dies); log:\n{log}"
    );
    assert!(
        line_at(&log, log_before, &["keepalived process gone", VIP]).is_some(),
        "no line naming the VIP removed when keepalived died; log:\n{log}"
    );

    // The loop reaps and restarts keepalived, which takes the VIP back.
    assert!(
        wait_until(Duration::from_secs(30), || {
            keepalived_parents(actor).iter().any(|&p| p != parent) && holds(&ns.name, VIP)
        }),
        "no new keepalived holding the VIP after the kill; log:\n{}",
        a.log()
    );
    drop(a);
}

/// The processes of the namespace `ns` (`ip netns pids`) named keepalived or haproxy.
fn daemons_in(ns: &str) -> Vec<(u32, String)> {
    let out = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .expect("ip netns pids");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .filter_map(|p| {
            let c = comm(p)?;
            (c == "keepalived" || c == "haproxy").then_some((p, c))
        })
        .collect()
}

/// In a container the actor is PID 1's child (it re-executes itself under a tiny init).
/// Here: `unshare --pid --fork --mount-proc k8slb-actor run` makes it PID 1 of a new PID
/// namespace. The actor (not the init) is SIGKILLed: the init must end keepalived with
/// SIGTERM (which releases the VIP) and the proxy before it exits itself, so that the
/// container ends (the kubelet restarts it) with no VIP left behind and no stale
/// keepalived serving an old config.
#[test]
#[ignore = "needs root: a network namespace with the real actor, keepalived and HAProxy; ./scripts/test.sh runs it"]
fn netns_actor_killed_under_pid1_init_takes_keepalived_and_its_vips_along() {
    require_root_and(&["ip", "haproxy", "keepalived", "unshare"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("eth0", "peer0", "198.18.6.2/24");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("state.json"), state_json()).unwrap();
    let log_path = dir.path().join("init.log");
    let f = std::fs::File::create(&log_path).unwrap();
    let mut unshare = ns
        .cmd("unshare")
        .args(["--pid", "--fork", "--mount-proc", support::ACTOR])
        .args(["run", "--node", "n1", "--admin-addr", "127.0.0.1:9254"])
        .arg("--state")
        .arg(format!("file:{}", dir.path().join("state.json").display()))
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .env("NO_COLOR", "1")
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || holds(&ns.name, VIP)),
        "the VIP never arrived; log:\n{}",
        log()
    );
    // unshare -> init (PID 1 inside) -> actor -> keepalived, haproxy.
    let init = children(unshare.id());
    assert_eq!(
        init.len(),
        1,
        "unshare has one child, the init; log:\n{}",
        log()
    );
    let actor: Vec<u32> = children(init[0]);
    assert_eq!(actor.len(), 1, "the init runs one actor; log:\n{}", log());
    assert!(
        !keepalived_parents(actor[0]).is_empty(),
        "keepalived runs under the actor; log:\n{}",
        log()
    );
    assert!(log().contains("PID 1 (init"), "{}", log());

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(actor[0] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let mut status = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            status = unshare.try_wait().unwrap();
            status.is_some()
        }),
        "the init did not exit after the actor died; log:\n{}",
        log()
    );
    let status = status.unwrap();
    let log = log();
    eprintln!("init exited with {status:?} after the actor was SIGKILLed");
    assert_eq!(
        status.code(),
        Some(128 + 9),
        "the container ends with the actor's status; log:\n{log}"
    );
    assert!(
        !holds(&ns.name, VIP),
        "the VIP stayed on the node after the actor and its init were gone; log:\n{log}"
    );
    assert!(
        log.contains("SIGTERM to keepalived"),
        "keepalived was not stopped by the init; log:\n{log}"
    );
    // Nothing of the actor is left running in the network namespace (the kernel kills
    // the rest of the PID namespace after its init; wait for that, not for a time).
    assert!(
        wait_until(Duration::from_secs(10), || daemons_in(&ns.name).is_empty()),
        "daemons left running: {:?}; log:\n{log}",
        daemons_in(&ns.name)
    );
}

/// Outside a container (the lab, a systemd unit) nothing ends the daemons when the actor
/// is SIGKILLed: keepalived and HAProxy are re-parented and keep running the old config,
/// keepalived keeps the VIP. The next actor of the same work dir stops them (pid files,
/// checked against the command line) before it starts its own, and its keepalived takes
/// the VIP again.
#[test]
#[ignore = "needs root: a network namespace with the real actor, keepalived and HAProxy; ./scripts/test.sh runs it"]
fn netns_restarted_actor_stops_the_daemons_a_killed_actor_left_running() {
    require_root_and(&["ip", "haproxy", "keepalived"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("eth0", "peer0", "198.18.6.2/24");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("state.json"), state_json()).unwrap();
    let work = dir.path().join("work");
    let mut a = ActorProc::start(
        &ns,
        dir.path(),
        "n1",
        work.clone(),
        dir.path().join("a.log"),
    );
    assert!(
        wait_until(Duration::from_secs(20), || holds(&ns.name, VIP)
            && daemons_in(&ns.name).iter().any(|(_, c)| c == "haproxy")),
        "the VIP and HAProxy never came up; log:\n{}",
        a.log()
    );
    let before = daemons_in(&ns.name);
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    // What is left: the same daemons, still running, the VIP still held.
    let orphans = daemons_in(&ns.name);
    assert!(
        orphans.iter().any(|(_, c)| c == "keepalived")
            && orphans.iter().any(|(_, c)| c == "haproxy"),
        "keepalived and HAProxy outlive a SIGKILLed actor outside a container: {orphans:?}"
    );
    assert!(
        holds(&ns.name, VIP),
        "the orphaned keepalived keeps the VIP"
    );

    let b = ActorProc::start(&ns, dir.path(), "n1", work, dir.path().join("b.log"));
    assert!(
        wait_until(Duration::from_secs(30), || {
            let now = daemons_in(&ns.name);
            b.log().contains("daemon=keepalived")
                && !now.is_empty()
                && now.iter().all(|d| !before.contains(d))
                && holds(&ns.name, VIP)
        }),
        "the old daemons {before:?} were not replaced (now {:?}); log:\n{}",
        daemons_in(&ns.name),
        b.log()
    );
    let log = b.log();
    for conf in ["keepalived.conf", "haproxy.cfg"] {
        assert!(
            log.lines()
                .any(|l| l.contains("left behind by an earlier actor") && l.contains(conf)),
            "the leftover of {conf} was not stopped; log:\n{log}"
        );
    }

    // The restarted actor, stopped with SIGTERM, stops its own daemons and releases the VIP.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(b.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut b = b;
    let exited = wait_until(Duration::from_secs(15), || {
        b.child.try_wait().is_ok_and(|s| s.is_some())
    });
    assert!(
        exited,
        "the restarted actor did not exit after SIGTERM; log:
{}",
        b.log()
    );
    assert!(
        wait_until(Duration::from_secs(5), || daemons_in(&ns.name).is_empty()),
        "daemons left after the restarted actor stopped: {:?}; log:\n{}",
        daemons_in(&ns.name),
        b.log()
    );
    assert!(
        !holds(&ns.name, VIP),
        "the VIP is left after the restarted actor stopped; log:\n{}",
        b.log()
    );
}
