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

use nix::errno::Errno;
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

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
        eprintln!("k8slb-actor: unblocking signals: {e}");
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
        eprintln!("k8slb-actor: PID 1: blocking signals: {e}");
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
            eprintln!(
                "k8slb-actor: PID 1: starting the actor ({}): {e}",
                exe.display()
            );
            return 1;
        }
    };
    let actor = Pid::from_raw(child.id() as i32);
    eprintln!(
        "k8slb-actor: PID 1 (init: forwards signals, reaps orphans); the actor is pid {actor}"
    );
    loop {
        let sig = match set.wait() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("k8slb-actor: PID 1: sigwait: {e}");
                continue;
            }
        };
        if sig != Signal::SIGCHLD {
            let _ = kill(actor, sig);
            continue;
        }
        // SIGCHLDs coalesce: reap everything that has exited.
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == actor => {
                    return u8::try_from(code).unwrap_or(1);
                }
                Ok(WaitStatus::Signaled(pid, s, _)) if pid == actor => {
                    return 128u8.saturating_add(s as u8);
                }
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                // An orphan reaped (or a stop/continue report): keep going.
                Ok(_) => {}
                Err(Errno::EINTR) => {}
                Err(e) => {
                    eprintln!("k8slb-actor: PID 1: waitpid: {e}");
                    break;
                }
            }
        }
    }
}
