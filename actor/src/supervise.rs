//! Supervision of keepalived and the proxy: a dead child is restarted with exponential
//! backoff (100 ms, doubling, at most 10 s; reset after it has run for 30 s), logged and
//! counted (`k8slb_actor_child_restarts_total{daemon}`).
//!
//! The decisions are pure ([`Backoff`], [`Restarter`]) and take the clock as an
//! argument; the control loop calls [`Restarter::tick`] with the daemon's exit status.
//!
//! Shutdown order (see [`crate::run`]): the VIPs this node holds are kept on `lo`
//! ([`crate::leave`]), keepalived is stopped with `SIGTERM` (it sends priority-0
//! adverts, so a backup takes the VIPs over at once), the actor waits until the new
//! master's advert (bounded), then our VIPs are removed, then the proxy is stopped
//! gracefully (HAProxy `SIGUSR1`, nginx `SIGQUIT`; `SIGKILL` after the grace).
//!
//! A keepalived that exits on its own (SIGKILL, OOM) cannot remove its VIPs, and a
//! backup takes them over after 3 advert intervals: the control loop removes the VIPs
//! of the state in the step that reaps it, before the restart (the restart is never in
//! the same step: [`Restarter::tick`] schedules it one backoff delay later), and logs
//! one line naming them. The restarted keepalived starts as BACKUP and takes them back
//! by VRRP if it has the highest priority. A stop on purpose (shutdown) is not a crash.
//!
//! When the actor itself dies (SIGKILL, OOM, panic that aborts):
//!
//! - In a container the actor is PID 1's child ([`crate::init`]: as PID 1 it
//!   re-executes itself under a tiny init). keepalived and the proxy are re-parented
//!   to that init, which then ends them: keepalived first with `SIGTERM` (it removes its
//!   VIPs and sends priority-0 adverts), then the rest with `SIGTERM`, then `SIGKILL`;
//!   then the init exits with the actor's status (137 after a SIGKILL), the container
//!   ends and the kubelet restarts it. So keepalived dies with the actor and takes its
//!   VIPs along; no stale keepalived keeps serving an old config. (Before, the init
//!   exited at once and the kernel SIGKILLed keepalived, which left its VIPs on the
//!   node's interfaces until the next actor's start-up cleanup.) Should the init itself
//!   be SIGKILLed, the kernel SIGKILLs the whole PID namespace and the VIPs stay until
//!   the restarted actor removes them at start ([`crate::vip`]), before its keepalived
//!   runs.
//! - Outside a container (the lab: `ip netns exec k8slb-actor run`), nothing ends
//!   them (under systemd, the default `KillMode=control-group` SIGTERMs what is left in
//!   the unit's cgroup when the main process dies, like the init above; with
//!   `KillMode=process` nothing does): keepalived and the proxy keep running the old
//!   config and keepalived keeps its VIPs. The next actor with the same work dir stops
//!   them before it starts its own ([`crate::daemons::stop_leftover`]: the pid files in the work
//!   dir, checked against the process's command line; `SIGTERM`, `SIGKILL` after 3 s),
//!   then removes stale VIPs. Until an actor runs again, they serve the last config.

use std::time::{Duration, Instant};

pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// A child that ran this long without dying resets the backoff.
pub const STABLE_AFTER: Duration = Duration::from_secs(30);

/// Exponential backoff: `min`, `2 min`, `4 min`, ... capped at `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(BACKOFF_MIN, BACKOFF_MAX)
    }
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max,
            next: min,
        }
    }
    /// The delay to wait now; the following one doubles.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

/// What the supervisor wants done now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Nothing,
    /// The child just died: log and count it; restart at the given instant.
    Died {
        restart_at: Instant,
        delay: Duration,
    },
    /// Time to start it again.
    Restart,
}

/// Restart state of one child.
#[derive(Debug, Clone, Default)]
pub struct Restarter {
    backoff: Backoff,
    restart_at: Option<Instant>,
    started_at: Option<Instant>,
}

impl Restarter {
    /// The child was (re)started at `now`.
    pub fn started(&mut self, now: Instant) {
        self.started_at = Some(now);
        self.restart_at = None;
    }

    /// A (re)start failed at `now`: try again after the next backoff delay.
    pub fn start_failed(&mut self, now: Instant) -> Duration {
        let d = self.backoff.next_delay();
        self.restart_at = Some(now + d);
        self.started_at = None;
        d
    }

    /// Is a restart pending?
    pub fn waiting(&self) -> bool {
        self.restart_at.is_some()
    }

    /// One supervision step: `exited` is `Some` when the child has just exited.
    pub fn tick(&mut self, now: Instant, exited: bool) -> Action {
        if exited {
            if self
                .started_at
                .is_some_and(|s| now.saturating_duration_since(s) >= STABLE_AFTER)
            {
                self.backoff.reset();
            }
            self.started_at = None;
            let delay = self.backoff.next_delay();
            let restart_at = now + delay;
            self.restart_at = Some(restart_at);
            return Action::Died { restart_at, delay };
        }
        match self.restart_at {
            Some(t) if now >= t => {
                self.restart_at = None;
                Action::Restart
            }
            _ => Action::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let mut b = Backoff::default();
        let got: Vec<u128> = (0..10).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(
            got,
            [100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000]
        );
        b.reset();
        assert_eq!(b.next_delay(), BACKOFF_MIN);
    }

    #[test]
    fn restarter_waits_then_restarts() {
        let t0 = Instant::now();
        let mut r = Restarter::default();
        r.started(t0);
        assert_eq!(r.tick(t0, false), Action::Nothing);
        let died = r.tick(t0 + Duration::from_secs(1), true);
        let Action::Died { delay, .. } = died else {
            panic!("{died:?}")
        };
        assert_eq!(delay, Duration::from_millis(100));
        assert_eq!(
            r.tick(t0 + Duration::from_millis(1050), false),
            Action::Nothing
        );
        assert_eq!(
            r.tick(t0 + Duration::from_millis(1100), false),
            Action::Restart
        );
        r.started(t0 + Duration::from_millis(1100));
        // dies quickly again: the delay doubles
        let Action::Died { delay, .. } = r.tick(t0 + Duration::from_millis(1200), true) else {
            panic!()
        };
        assert_eq!(delay, Duration::from_millis(200));
        // after a long stable run the backoff resets
        r.started(t0 + Duration::from_secs(2));
        let Action::Died { delay, .. } = r.tick(t0 + Duration::from_secs(60), true) else {
            panic!()
        };
        assert_eq!(delay, Duration::from_millis(100));
    }

    #[test]
    fn failed_start_backs_off() {
        let t0 = Instant::now();
        let mut r = Restarter::default();
        assert_eq!(r.start_failed(t0), Duration::from_millis(100));
        assert!(r.waiting());
        assert_eq!(
            r.tick(t0 + Duration::from_millis(100), false),
            Action::Restart
        );
        assert_eq!(r.start_failed(t0), Duration::from_millis(200));
    }
}
