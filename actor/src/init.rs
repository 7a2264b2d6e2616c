//! PID 1 in a container: `k8slb-actor run` as its container's first process (the
//! DaemonSet's `command: ["k8slb-actor"]`, no init in the image) must do what an init
//! does, or orphans pile up as zombies: when a daemon's parent dies (HAProxy's master
//! SIGKILLed, OOM), its children are re-parented to PID 1, and only PID 1 can reap them.
//!
//! The actor itself waits for its own children by pid (`std::process::Child`), so it must
//! not reap with `waitpid(-1)`: it would steal their exit statuses. Instead, as PID 1 it
//! runs itself again as a child (same arguments, [`CHILD_ENV`] set) and stays a minimal
//! init, like tini: it forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to
//! the actor, reaps every child (the actor and any orphan), and exits with the actor's
//! exit code when the actor exits. Outside a container (pid != 1) nothing changes.
//!
//! When the actor exits, whatever it left running is ended BEFORE PID 1 exits
//! ([`end_orphans`]): keepalived first, with `SIGTERM` (it removes its VIPs and sends
//! priority-0 adverts, so a backup takes over at once), then everything else (the
//! proxy) with `SIGTERM`, then `SIGKILL` for what is left. Without it, the kernel
//! SIGKILLs every process of the PID namespace when PID 1 exits, and a SIGKILLed
//! keepalived leaves its VIPs on the node's interfaces (`hostNetwork`) while a backup
//! has taken them over, until the restarted pod's actor cleans them up. After an
//! orderly shutdown (SIGTERM) the actor has stopped its daemons itself and nothing is
//! left. The container then ends with the actor's exit code and the kubelet restarts it.

use nix::errno::Errno;
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Set in the environment of the actor that PID 1 runs.
pub const CHILD_ENV: &str = "K8SLB_INIT_CHILD";

const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// True when this process is its PID namespace's init and not already the actor that an
/// init started.
pub fn is_init() -> bool {
    std::process::id() == 1 && std::env::var_os(CHILD_ENV).is_none()
}

/// Unblocks the signals [`run_as_init`] blocked: the actor inherits its signal mask
/// through exec and must see SIGTERM. Call it before any thread starts.
pub fn unblock_signals() {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set.add(Signal::SIGCHLD);
    if let Err(e) = set.thread_unblock() {
        crate::say!("k8slb-actor: unblocking signals: {e}");
    }
}

/// Runs the actor as a child and acts as init until it exits; returns its exit code
/// (128 + signal when it was killed by one).
pub fn run_as_init() -> u8 {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set.add(Signal::SIGCHLD);
    // Blocked before the child exists: a SIGTERM that arrives early stays pending (a
    // blocked signal is queued even for a namespace's init) and is forwarded below.
    if let Err(e) = set.thread_block() {
        crate::say!("k8slb-actor: PID 1: blocking signals: {e}");
        return 1;
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    let child = match std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env(CHILD_ENV, "1")
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            crate::say!(
                "k8slb-actor: PID 1: starting the actor ({}): {e}",
                exe.display()
            );
            return 1;
        }
    };
    let actor = Pid::from_raw(child.id() as i32);
    crate::say!(
        "k8slb-actor: PID 1 (init: forwards signals, reaps orphans); the actor is pid {actor}"
    );
    loop {
        let sig = match set.wait() {
            Ok(s) => s,
            Err(e) => {
                crate::say!("k8slb-actor: PID 1: sigwait: {e}");
                continue;
            }
        };
        if sig != Signal::SIGCHLD {
            let _ = kill(actor, sig);
            continue;
        }
        // SIGCHLDs coalesce: reap everything that has exited.
        loop {
            let code = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == actor => {
                    u8::try_from(code).unwrap_or(1)
                }
                Ok(WaitStatus::Signaled(pid, s, _)) if pid == actor => {
                    128u8.saturating_add(s as u8)
                }
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                // An orphan reaped (or a stop/continue report): keep going.
                Ok(_) => continue,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    crate::say!("k8slb-actor: PID 1: waitpid: {e}");
                    break;
                }
            };
            crate::say!(
                "k8slb-actor: PID 1: the actor exited ({code}); ending what it left running"
            );
            end_orphans(ORPHAN_GRACE);
            return code;
        }
    }
}

/// How long keepalived, then the other leftovers, get after `SIGTERM`.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(5);

/// Ends the processes the actor left (re-parented to this init): keepalived first with
/// `SIGTERM`, waiting up to `grace` for it to go, then every other process of the PID
/// namespace with `SIGTERM` (up to `grace`), then `SIGKILL`. Reaps them all. Signals
/// to "everyone" use `kill(-1)`, which the kernel confines to this PID namespace; only
/// this process's own children are looked up by name.
pub fn end_orphans(grace: Duration) {
    let mut termed: BTreeSet<i32> = BTreeSet::new();
    let keepalived_gone = wait_reaping(grace, || {
        let left: Vec<i32> = own_children()
            .into_iter()
            .filter(|&p| comm(p).as_deref() == Some("keepalived"))
            .collect();
        for &p in &left {
            if termed.insert(p) {
                crate::say!(
                    "k8slb-actor: PID 1: SIGTERM to keepalived (pid {p}): it releases its VIPs"
                );
                let _ = kill(Pid::from_raw(p), Signal::SIGTERM);
            }
        }
        left.is_empty()
    });
    if !keepalived_gone {
        crate::say!(
            "k8slb-actor: PID 1: keepalived still running after {grace:?}; killing everything"
        );
    } else {
        // Everyone else of this PID namespace (the proxy), then what is left.
        let _ = kill(Pid::from_raw(-1), Signal::SIGTERM);
        if !wait_reaping(grace, || own_children().is_empty()) {
            crate::say!(
                "k8slb-actor: PID 1: processes still running after {grace:?}; killing them"
            );
        }
    }
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    wait_reaping(Duration::from_secs(2), || own_children().is_empty());
}

/// Reaps exited children every 20 ms until `done` holds (true) or `timeout` passes
/// (false; one last try).
fn wait_reaping(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        while let Ok(st) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            if st == WaitStatus::StillAlive {
                break;
            }
        }
        if done() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// This process's children (zombies not yet reaped included). `/proc/self` is right in
/// any `/proc` mount, also one of another PID namespace.
fn own_children() -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc/self/task") {
        for t in rd.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
            }
        }
    }
    out
}

fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim().to_string())
}
