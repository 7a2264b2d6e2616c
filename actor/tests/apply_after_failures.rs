//! The applier after failures (apply.rs): once things settle, the proxy serves the view
//! the applier believes it runs, after a restart from a stale file or a failed keepalived
//! reload; and a daemon's stderr pipe (daemons.rs) survives a line that is not UTF-8.
//! Each test states the invariant it checks.

use k8slb_actor::admin::Metrics;
use k8slb_actor::apply::{Applied, Applier, ApplyError, Desired, NodeContext, NodeRenderer};
use k8slb_actor::daemons::{Daemon, DaemonError, DaemonKind, Haproxy, Paths};
use k8slb_actor::render_error::RenderError;
use k8slb_actor::view::ViewError;
use k8slb_common::state::State;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "support/eps.rs"]
mod eps;
use eps::Eps;

/// A daemon that models what it serves: on start/reload it loads its config file; the
/// Runtime API changes single slots. `serves` is the truth the test compares with.
struct Model {
    kind: DaemonKind,
    cfg: PathBuf,
    up: bool,
    died: Arc<AtomicBool>,
    serves: Arc<Mutex<Option<[u16; 2]>>>,
    fail_reload: Arc<AtomicBool>,
}

impl Model {
    fn load(&self) {
        let text = std::fs::read_to_string(&self.cfg).unwrap_or_default();
        if let Some(rest) = text.strip_prefix("eps [") {
            let v: Vec<u16> = rest
                .trim_end_matches(']')
                .split(", ")
                .map(|x| x.parse().unwrap())
                .collect();
            *self.serves.lock().unwrap() = Some([v[0], v[1]]);
        }
    }
}

impl Daemon for Model {
    fn kind(&self) -> DaemonKind {
        self.kind
    }
    fn config_path(&self) -> &Path {
        &self.cfg
    }
    fn check(&self, _: &Path) -> Result<(), DaemonError> {
        Ok(())
    }
    fn start(&mut self) -> Result<(), DaemonError> {
        self.load();
        self.up = true;
        self.died.store(false, Ordering::SeqCst);
        Ok(())
    }
    fn reload(&mut self) -> Result<(), DaemonError> {
        if self.fail_reload.load(Ordering::SeqCst) {
            return Err(DaemonError::Reload {
                daemon: self.kind,
                why: "test".into(),
            });
        }
        self.load();
        Ok(())
    }
    fn runtime(&mut self, commands: &[String]) -> Result<(), DaemonError> {
        let mut s = self.serves.lock().unwrap();
        let s = s.as_mut().unwrap();
        for c in commands {
            let w: Vec<&str> = c.split(' ').collect();
            let slot = w[1].trim_start_matches('s'); // `set s<i> <value>`
            s[slot.parse::<usize>().unwrap()] = w[2].parse().unwrap();
        }
        Ok(())
    }
    fn poll_exit(&mut self) -> Option<String> {
        if self.up && self.died.load(Ordering::SeqCst) {
            self.up = false;
            return Some("signal: 9 (SIGKILL)".into());
        }
        None
    }
    fn is_running(&self) -> bool {
        self.up // like ChildProc: true until poll_exit has reaped the child
    }
    fn stop(&mut self, _: Duration) {
        self.up = false;
    }
}

/// An applier over [`Eps`] and two [`Model`] daemons, with the switches the tests flip.
struct Rig {
    applier: Applier<Eps>,
    /// What HAProxy serves (the truth the tests compare with).
    serves: Arc<Mutex<Option<[u16; 2]>>>,
    /// Set: HAProxy dies (seen at the next supervision).
    proxy_died: Arc<AtomicBool>,
    /// Set: keepalived's reloads fail.
    keepalived_fails: Arc<AtomicBool>,
    t0: Instant,
    _dir: tempfile::TempDir,
}

impl Rig {
    /// Both daemons down, the view (0, [1, 2]), no reload rate limit.
    fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let serves = Arc::new(Mutex::new(None));
        let proxy_died = Arc::new(AtomicBool::new(false));
        let keepalived_fails = Arc::new(AtomicBool::new(false));
        let model = |kind: DaemonKind| Model {
            kind,
            cfg: dir.path().join(format!("{kind}.conf")),
            up: false,
            died: match kind {
                DaemonKind::Haproxy => proxy_died.clone(),
                _ => Arc::new(AtomicBool::new(false)),
            },
            serves: match kind {
                DaemonKind::Haproxy => serves.clone(),
                _ => Arc::new(Mutex::new(None)),
            },
            fail_reload: match kind {
                DaemonKind::Keepalived => keepalived_fails.clone(),
                _ => Arc::new(AtomicBool::new(false)),
            },
        };
        let mut applier = Applier::new(
            Eps::new((0, [1, 2])),
            Box::new(model(DaemonKind::Keepalived)),
            Some(Box::new(model(DaemonKind::Haproxy))),
            Arc::new(Metrics::new()),
        );
        applier.min_reload_interval = Duration::ZERO;
        Rig {
            applier,
            serves,
            proxy_died,
            keepalived_fails,
            t0: Instant::now(),
            _dir: dir,
        }
    }
}

/// Applies the (empty) state at `t` with the renderer's view set to `v`.
fn rig_apply(a: &mut Applier<Eps>, v: (u8, [u16; 2]), t: Instant) -> Result<Applied, ApplyError> {
    let state = State::from_json(include_str!("fixtures/empty.json")).unwrap();
    a.renderer().view.set(v);
    a.apply(&state, &NodeContext::default(), t)
}

/// Invariant: whatever happens, once things settle HAProxy serves the endpoints of the
/// view the applier believes it runs (else a later unchanged apply is a no-op forever).
///
/// Sequence: endpoints change over the Runtime API (file lags), HAProxy dies, the
/// pre-restart sync of the file fails (here: render; in production a failed write, e.g.
/// ENOSPC with 2 x 20 MB configs), the supervisor restarts HAProxy anyway from the stale
/// file, the next sync succeeds and marks the file fresh without telling HAProxy.
#[test]
fn a_restart_from_a_stale_file_is_not_forgotten() {
    let mut rig = Rig::new();
    let (a, at) = (&mut rig.applier, |ms| rig.t0 + Duration::from_millis(ms));
    let apply = |a: &mut Applier<Eps>, v, t| rig_apply(a, v, t).unwrap();
    let (serves, died) = (&rig.serves, &rig.proxy_died);

    apply(a, (0, [1, 2]), at(0));
    apply(a, (0, [1, 3]), at(100)); // fast path: HAProxy [1, 3], file [1, 2]
    assert_eq!(*serves.lock().unwrap(), Some([1, 3]));

    died.store(true, Ordering::SeqCst);
    a.renderer().fail_render.set(true);
    for ms in (200..=700).step_by(50) {
        a.supervise(at(ms)); // sync fails every tick; the restart goes ahead
    }
    // The applier knows the proxy runs an older file than its view, and asks (once)
    // for an apply; the actor's loop does it without waiting for a new state.
    assert!(
        a.wants_apply(),
        "a restart from a stale file must ask for an apply"
    );
    assert!(!a.wants_apply(), "asked once");
    a.renderer().fail_render.set(false);
    a.supervise(at(1300));
    assert!(!a.proxy().unwrap().file_stale());
    // The same state again: believed unchanged.
    let r = apply(a, (0, [1, 3]), at(1400));
    assert!(matches!(r, Applied::Done { .. }));
    assert_eq!(
        *serves.lock().unwrap(),
        Some([1, 3]),
        "HAProxy was restarted from the stale file and still serves the old endpoint; \
         the applier believes it serves [1, 3]"
    );
}

/// Invariant: every stderr line of a daemon reaches the log and the error tail. One line
/// that is not UTF-8 (nginx writes a client's raw request line into its error log, e.g.
/// `no live upstreams ... request: "GET /\xff HTTP/1.1"`) must not end the reader.
#[test]
fn daemon_stderr_survives_a_line_that_is_not_utf8() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("fake-haproxy");
    std::fs::write(
        &bin,
        "#!/bin/sh\n\
         printf 'request: \"GET /\\377 HTTP/1.1\"\\n' >&2\n\
         sleep 0.1\n\
         echo '[ALERT]    (7) : Cannot bind socket [10.0.0.1:80]' >&2\n\
         exit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut h = Haproxy::new(bin, Paths::new(dir.path()));
    let text = h.start().unwrap_err().to_string();
    assert!(
        text.contains("Cannot bind socket"),
        "the reader thread stopped at the non-UTF-8 line (lines().map_while(Result::ok)) \
         and closed the pipe; later stderr is lost: {text}"
    );
}

/// Invariant as above, for a partial apply: the proxy takes new endpoints over the
/// Runtime API, then keepalived's reload fails (the apply is an error). If the state
/// then goes back to the old endpoints, HAProxy must be brought back too (the applier
/// must not diff from a view the proxy no longer runs).
#[test]
fn a_failed_keepalived_reload_does_not_leave_the_proxy_view_behind() {
    let mut rig = Rig::new();
    let (a, at) = (&mut rig.applier, |ms| rig.t0 + Duration::from_millis(ms));
    let apply = rig_apply;
    let (serves, ka_fails) = (&rig.serves, &rig.keepalived_fails);
    apply(a, (0, [1, 2]), at(0)).unwrap();
    ka_fails.store(true, Ordering::SeqCst);
    // keepalived's part and an endpoint change: the proxy goes first (runtime), then
    // keepalived's reload fails.
    assert!(apply(a, (1, [1, 3]), at(100)).is_err());
    assert_eq!(*serves.lock().unwrap(), Some([1, 3]));
    // A failed reload keeps the node not ready (and says why), also when the same
    // state is applied again and fails again.
    let why = a.not_ready().unwrap_or_default();
    assert!(why.starts_with("keepalived: reload failed: "), "{why:?}");
    assert!(apply(a, (1, [1, 3]), at(150)).is_err());
    assert!(a.not_ready().is_some());
    ka_fails.store(false, Ordering::SeqCst);
    // Back to the old state.
    apply(a, (0, [1, 2]), at(200)).unwrap();
    assert_eq!(a.not_ready(), None, "the reload succeeded: ready again");
    assert_eq!(
        *serves.lock().unwrap(),
        Some([1, 2]),
        "HAProxy kept the endpoints of the failed apply"
    );
}
