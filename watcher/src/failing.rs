//! Writes that keep failing, logged usefully: once when they start failing (with the API
//! server's message and code, not the whole `Status` dump), then at most once a minute while
//! they keep failing (with a count), and once when they work again. Every failure is counted
//! in `k8slb_watcher_write_failures_total{write, code}` by the caller.
//!
//! [`FailureLog`] decides (a pure state machine fed with the time, unit-tested below);
//! [`FailureLog::failed`] and [`FailureLog::succeeded`] also write the line.

use std::time::Duration;
use tokio::time::Instant;

/// How often a write that keeps failing is logged again.
pub const REPEAT: Duration = Duration::from_secs(60);

/// What to log after a failure or a success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Nothing (still failing, logged less than [`REPEAT`] ago; or still working).
    Quiet,
    /// The first failure after working (or at start).
    Started,
    /// Still failing: `failures` since it started, for `for_s` seconds.
    Still { failures: u64, for_s: u64 },
    /// Working again after `failures` failures over `for_s` seconds.
    Recovered { failures: u64, for_s: u64 },
}

/// The failing/working state of one kind of write.
#[derive(Debug)]
pub struct FailureLog {
    what: &'static str,
    /// Since when it fails, how many failures, when it was last logged.
    failing: Option<(Instant, u64, Instant)>,
}

impl FailureLog {
    /// `what` names the write in the log: "publishing the state", "patching status".
    pub fn new(what: &'static str) -> Self {
        FailureLog {
            what,
            failing: None,
        }
    }

    pub fn is_failing(&self) -> bool {
        self.failing.is_some()
    }

    /// `n` more failures at `now`.
    pub fn on_failure(&mut self, now: Instant, n: u64) -> Report {
        match &mut self.failing {
            None => {
                self.failing = Some((now, n, now));
                Report::Started
            }
            Some((since, count, logged)) => {
                *count += n;
                if now.duration_since(*logged) >= REPEAT {
                    *logged = now;
                    Report::Still {
                        failures: *count,
                        for_s: now.duration_since(*since).as_secs(),
                    }
                } else {
                    Report::Quiet
                }
            }
        }
    }

    /// A success at `now`.
    pub fn on_success(&mut self, now: Instant) -> Report {
        match self.failing.take() {
            None => Report::Quiet,
            Some((since, failures, _)) => Report::Recovered {
                failures,
                for_s: now.duration_since(since).as_secs(),
            },
        }
    }

    /// Records `n` failures, the last with `error`, and logs as [`Self::on_failure`] says.
    pub fn failed(&mut self, n: u64, error: &str) {
        let what = self.what;
        match self.on_failure(Instant::now(), n) {
            Report::Started => tracing::warn!(
                write = what,
                error,
                "{what} failed; retrying (logged again at most once a minute while it fails)"
            ),
            Report::Still { failures, for_s } => {
                tracing::warn!(write = what, error, failures, for_s, "{what} still fails")
            }
            Report::Quiet | Report::Recovered { .. } => {
                tracing::debug!(write = what, error, "{what} failed")
            }
        }
    }

    /// Records a success; logs once if it was failing.
    pub fn succeeded(&mut self) {
        let what = self.what;
        if let Report::Recovered { failures, for_s } = self.on_success(Instant::now()) {
            tracing::info!(write = what, failures, for_s, "{what} works again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_reported_once_then_once_a_minute_with_a_count_then_recovery() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut f = FailureLog::new("publishing the state");
        assert_eq!(f.on_success(t0), Report::Quiet);
        assert_eq!(f.on_failure(t0, 1), Report::Started);
        assert!(f.is_failing());
        for i in 1..60 {
            assert_eq!(f.on_failure(t0 + s(i), 1), Report::Quiet, "at {i} s");
        }
        assert_eq!(
            f.on_failure(t0 + s(60), 1),
            Report::Still {
                failures: 61,
                for_s: 60
            }
        );
        assert_eq!(f.on_failure(t0 + s(119), 3), Report::Quiet);
        assert_eq!(
            f.on_failure(t0 + s(120), 1),
            Report::Still {
                failures: 65,
                for_s: 120
            }
        );
        assert_eq!(
            f.on_success(t0 + s(125)),
            Report::Recovered {
                failures: 65,
                for_s: 125
            }
        );
        assert!(!f.is_failing());
        assert_eq!(f.on_success(t0 + s(126)), Report::Quiet);
        // A new episode starts over.
        assert_eq!(f.on_failure(t0 + s(127), 1), Report::Started);
    }
}
