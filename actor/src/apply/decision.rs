//! The pure decision for one daemon: what an apply does with a candidate config
//! ([`decide`]), when the next reload may come ([`next_reload_at`]), and what came of it.

use std::time::{Duration, Instant};

/// The pure decision for one daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Unchanged,
    /// Endpoint-only change: Runtime API commands, then write the file (no reload).
    Runtime(Vec<String>),
    /// Not running: check, install, start.
    Start,
    /// Check, install, reload, confirm.
    Reload,
}

/// Decide what to do with `candidate`, given the config installed for the daemon
/// (`running`), whether it is alive, and the renderer's runtime diff.
///
/// A daemon that is not alive is always a [`Step::Start`], even when `candidate` is the
/// text already installed: the text being on disk says nothing about a daemon that
/// failed to start or died (a failed start used to look "unchanged", and the node was
/// Ready with no proxy).
pub fn decide(
    running: Option<&str>,
    candidate: &str,
    alive: bool,
    runtime: Option<Vec<String>>,
) -> Step {
    if !alive || running.is_none() {
        return Step::Start;
    }
    if running == Some(candidate) {
        return Step::Unchanged;
    }
    match runtime {
        Some(cmds) => Step::Runtime(cmds),
        None => Step::Reload,
    }
}

/// Rate limit: when may the next reload happen?
pub fn next_reload_at(last: Option<Instant>, min_interval: Duration) -> Option<Instant> {
    last.map(|t| t + min_interval)
}

/// What happened to one daemon in an apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotOutcome {
    Unchanged,
    Runtime,
    Started,
    Reloaded,
}

/// Result of [`Applier::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    Done {
        keepalived: SlotOutcome,
        proxy: Option<SlotOutcome>,
    },
    /// A reload would come sooner than the rate limit allows: try again at this instant.
    Deferred(Instant),
}

impl Applied {
    pub fn changed(&self) -> bool {
        match self {
            Applied::Done { keepalived, proxy } => {
                *keepalived != SlotOutcome::Unchanged
                    || proxy.is_some_and(|p| p != SlotOutcome::Unchanged)
            }
            Applied::Deferred(_) => false,
        }
    }
}
