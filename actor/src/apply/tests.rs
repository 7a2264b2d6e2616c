//! The apply's tests: the pipeline with stand-in daemons and renderers.

use super::decision::*;
use super::health::*;
use super::slot::*;
use super::*;
use std::io::Write;
use std::path::Path;

/// Addresses in memory, shared with the test.
struct MemAddrs(Arc<Mutex<Vec<crate::vip::Addr>>>);

impl AddrOps for MemAddrs {
    fn addresses(&mut self) -> Result<Vec<crate::vip::Addr>, VipError> {
        Ok(self.0.lock().unwrap().clone())
    }
    fn interfaces(&mut self) -> Result<Vec<(u32, String)>, VipError> {
        Ok(vec![(2, "eth0".into())])
    }
    fn add(&mut self, ifname: &str, net: ipnet::IpNet) -> Result<(), VipError> {
        self.0.lock().unwrap().push(crate::vip::Addr {
            ifname: ifname.into(),
            index: 2,
            net,
        });
        Ok(())
    }
    fn delete(&mut self, addr: &crate::vip::Addr) -> Result<(), VipError> {
        self.0.lock().unwrap().retain(|a| a.net != addr.net);
        Ok(())
    }
}

/// The watched keepalived process is gone (here: a child that exited and was
/// reaped): the watcher thread deletes the guard's VIPs and nothing else, and does not
/// watch that process again.
#[test]
fn keepalived_exit_watcher_removes_its_vips_when_the_process_is_gone() {
    let addr = |net: &str| crate::vip::Addr {
        ifname: "eth0".into(),
        index: 2,
        net: net.parse().unwrap(),
    };
    let held = Arc::new(Mutex::new(vec![
        addr("198.18.0.2/24"),
        addr("198.18.0.100/24"),
        addr("198.18.0.101/24"),
    ]));
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let g = Arc::new(Mutex::new(ExitGuard {
        watched: None,
        gone: None,
        vips: ["198.18.0.100", "198.18.0.101"]
            .iter()
            .map(|v| v.parse().unwrap())
            .collect(),
    }));
    let (weak, ops) = (Arc::downgrade(&g), MemAddrs(held.clone()));
    let t = std::thread::spawn(move || watch_exit(weak, Box::new(ops)));
    g.lock().unwrap().watch(Some(pid));
    let deadline = Instant::now() + Duration::from_secs(10);
    while g.lock().unwrap().gone.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    {
        let g = g.lock().unwrap();
        assert_eq!(
            (g.watched, g.gone),
            (None, Some(pid)),
            "the watcher saw the process gone"
        );
    }
    let left: Vec<String> = held
        .lock()
        .unwrap()
        .iter()
        .map(|a| a.net.to_string())
        .collect();
    assert_eq!(left, vec!["198.18.0.2/24"], "only the VIPs were deleted");
    // The same (dead) process is never watched again.
    g.lock().unwrap().watch(Some(pid));
    assert_eq!(g.lock().unwrap().watched, None);
    drop(g);
    t.join().unwrap();
}

#[test]
fn decide_table() {
    let cmds = || Some(vec!["set server b/s1 addr 198.18.0.5 port 80".to_string()]);
    assert_eq!(decide(Some("a"), "a", true, None), Step::Unchanged);
    // Installed but not running (a failed start, an exit): the same text is no
    // reason to leave it down.
    assert_eq!(decide(Some("a"), "a", false, None), Step::Start);
    assert_eq!(decide(Some("a"), "a", false, cmds()), Step::Start);
    assert_eq!(decide(None, "a", false, None), Step::Start);
    assert_eq!(decide(None, "a", true, None), Step::Start);
    assert_eq!(decide(Some("a"), "b", false, cmds()), Step::Start);
    assert_eq!(decide(Some("a"), "b", true, None), Step::Reload);
    assert_eq!(
        decide(Some("a"), "b", true, cmds()),
        Step::Runtime(cmds().unwrap())
    );
}

/// A daemon stand-in sharing its log with the test: `start` records what the
/// proxy's health file holds at that moment (keepalived must never start before it
/// exists).
struct Fake {
    kind: DaemonKind,
    cfg: PathBuf,
    track: Option<PathBuf>,
    watch: PathBuf,
    up: bool,
    fail_start: std::sync::Arc<std::sync::atomic::AtomicBool>,
    died: std::sync::Arc<std::sync::atomic::AtomicBool>,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Daemon for Fake {
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
        let health = std::fs::read_to_string(&self.watch).unwrap_or_else(|_| "none".into());
        let cfg = std::fs::read_to_string(&self.cfg).unwrap_or_default();
        self.log.lock().unwrap().push(format!(
            "{} start, health {:?}, config {cfg}",
            self.kind,
            health.trim()
        ));
        if self.fail_start.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(DaemonError::Start {
                daemon: self.kind,
                why: "test".into(),
            });
        }
        self.up = true;
        Ok(())
    }
    fn reload(&mut self) -> Result<(), DaemonError> {
        let cfg = std::fs::read_to_string(&self.cfg).unwrap_or_default();
        self.log
            .lock()
            .unwrap()
            .push(format!("{} reload {cfg}", self.kind));
        Ok(())
    }
    fn runtime(&mut self, commands: &[String]) -> Result<(), DaemonError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("{} runtime {}", self.kind, commands.join("; ")));
        Ok(())
    }
    fn poll_exit(&mut self) -> Option<String> {
        if self.died.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.up = false;
            return Some("killed".into());
        }
        None
    }
    fn is_running(&self) -> bool {
        self.up
    }
    fn stop(&mut self, _: Duration) {
        self.up = false;
    }
    fn track_file(&self) -> Option<&Path> {
        self.track.as_deref()
    }
}

struct Echo;
impl NodeRenderer for Echo {
    type View = String;
    fn view(
        &self,
        s: &State,
        _: &NodeContext,
        _: Option<&String>,
    ) -> Result<String, crate::view::ViewError> {
        Ok(s.to_json())
    }
    fn render(&self, v: &String) -> Result<Desired, crate::render_error::RenderError> {
        Ok(Desired {
            keepalived: format!("ka {}", v.len()),
            proxy: Some(format!("proxy {}", v.len())),
            files: Default::default(),
        })
    }
    fn runtime_diff(&self, _: &String, _: &String) -> Option<Vec<String>> {
        None
    }
}

#[test]
fn health_file_before_keepalived_down_on_exit_up_after_restart() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let health = dir.path().join("proxy-health");
    let read = || std::fs::read_to_string(&health).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let fail = Arc::new(AtomicBool::new(true));
    let died = Arc::new(AtomicBool::new(false));
    let fake = |kind, track: Option<PathBuf>| Fake {
        kind,
        cfg: dir.path().join(format!("{kind}.conf")),
        track,
        watch: health.clone(),
        up: false,
        fail_start: if kind == DaemonKind::Haproxy {
            fail.clone()
        } else {
            Arc::new(AtomicBool::new(false))
        },
        died: if kind == DaemonKind::Haproxy {
            died.clone()
        } else {
            Arc::new(AtomicBool::new(false))
        },
        log: log.clone(),
    };
    let mut a = Applier::new(
        Echo,
        Box::new(fake(DaemonKind::Keepalived, None)),
        Some(Box::new(fake(DaemonKind::Haproxy, Some(health.clone())))),
        Arc::new(Metrics::new()),
    );
    let state = State::from_json(include_str!("../../tests/fixtures/empty.json")).unwrap();
    let t0 = Instant::now();
    let ctx = NodeContext::default();

    // The proxy fails to start: unhealthy, and keepalived is not started at all.
    assert!(a.apply(&state, &ctx, t0).is_err());
    assert_eq!(read(), "1\n");
    assert!(!a.keepalived().daemon().is_running());

    // The supervisor restarts it (confirmed): 0, on disk before keepalived starts.
    fail.store(false, Ordering::SeqCst);
    let t1 = t0 + Duration::from_secs(1);
    a.supervise(t1);
    assert_eq!(read(), "0\n");
    assert!(a.apply(&state, &ctx, t1).is_ok());
    assert_eq!(read(), "0\n");
    assert!(log
        .lock()
        .unwrap()
        .last()
        .unwrap()
        .starts_with("keepalived start, health \"0\""));

    // The supervisor sees the proxy exit: 1 at once; after the restart: 0.
    died.store(true, Ordering::SeqCst);
    a.supervise(t1 + Duration::from_millis(10));
    assert_eq!(read(), "1\n");
    assert_eq!(a.proxy().unwrap().health_written(), Some(false));
    a.supervise(t1 + Duration::from_secs(11));
    assert_eq!(read(), "0\n");
    assert_eq!(a.proxy().unwrap().health_written(), Some(true));
}

/// Issue 9: a failed start left the text installed, the retry saw "unchanged" and
/// the node was Ready with no proxy. Now every apply retries the start, and the node
/// is not ready (and says why) until a start succeeds.
#[test]
fn a_failed_start_is_retried_as_a_start_and_keeps_the_node_not_ready() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let fail = Arc::new(AtomicBool::new(true));
    let fake = |kind, fail_start| Fake {
        kind,
        cfg: dir.path().join(format!("{kind}.conf")),
        track: None,
        watch: dir.path().join("none"),
        up: false,
        fail_start,
        died: Arc::new(AtomicBool::new(false)),
        log: log.clone(),
    };
    let metrics = Arc::new(Metrics::new());
    let mut a = Applier::new(
        Echo,
        Box::new(fake(
            DaemonKind::Keepalived,
            Arc::new(AtomicBool::new(false)),
        )),
        Some(Box::new(fake(DaemonKind::Haproxy, fail.clone()))),
        metrics.clone(),
    );
    let state = State::from_json(include_str!("../../tests/fixtures/empty.json")).unwrap();
    let ctx = NodeContext::default();
    let t0 = Instant::now();
    let starts = || {
        log.lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with("haproxy start"))
            .count()
    };
    assert_eq!(a.not_ready().as_deref(), Some("no successful apply yet"));

    assert!(a.apply(&state, &ctx, t0).is_err());
    assert_eq!(starts(), 1);
    let why = a.not_ready().unwrap();
    assert!(
        why.starts_with("haproxy not running: start failed: did not come up: test"),
        "{why}"
    );
    // The same state again (the caller's retry): a Start again, not "unchanged".
    let e = a.apply(&state, &ctx, t0 + Duration::from_secs(10));
    assert!(e.is_err(), "{e:?}");
    assert_eq!(starts(), 2);
    assert!(a.not_ready().unwrap().contains("haproxy not running"));
    let failed = metrics.encode();
    assert!(
        failed.contains("k8slb_actor_reloads_total{daemon=\"haproxy\",result=\"failed\"} 2"),
        "{failed}"
    );

    // The cause is gone: the next apply starts both, and the node is ready.
    fail.store(false, Ordering::SeqCst);
    let done = a.apply(&state, &ctx, t0 + Duration::from_secs(20)).unwrap();
    assert_eq!(
        done,
        Applied::Done {
            keepalived: SlotOutcome::Started,
            proxy: Some(SlotOutcome::Started)
        }
    );
    assert_eq!(a.not_ready(), None);
    assert_eq!(
        a.apply(&state, &ctx, t0 + Duration::from_secs(21)).unwrap(),
        Applied::Done {
            keepalived: SlotOutcome::Unchanged,
            proxy: Some(SlotOutcome::Unchanged)
        }
    );
}

/// A daemon that exits makes the node not ready until it runs again.
#[test]
fn an_exited_daemon_keeps_the_node_not_ready_until_it_runs_again() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let died = Arc::new(AtomicBool::new(false));
    let fail = Arc::new(AtomicBool::new(false));
    let fake = |kind, died, fail_start| Fake {
        kind,
        cfg: dir.path().join(format!("{kind}.conf")),
        track: None,
        watch: dir.path().join("none"),
        up: false,
        fail_start,
        died,
        log: log.clone(),
    };
    let no = || Arc::new(AtomicBool::new(false));
    let mut a = Applier::new(
        Echo,
        Box::new(fake(DaemonKind::Keepalived, no(), no())),
        Some(Box::new(fake(
            DaemonKind::Haproxy,
            died.clone(),
            fail.clone(),
        ))),
        Arc::new(Metrics::new()),
    );
    let state = State::from_json(include_str!("../../tests/fixtures/empty.json")).unwrap();
    let ctx = NodeContext::default();
    let t0 = Instant::now();
    a.apply(&state, &ctx, t0).unwrap();
    assert_eq!(a.not_ready(), None);

    died.store(true, Ordering::SeqCst);
    fail.store(true, Ordering::SeqCst);
    a.supervise(t0 + Duration::from_secs(1));
    assert_eq!(
        a.not_ready().as_deref(),
        Some("haproxy not running: exited (killed)")
    );
    // The restart fails: still not ready, now with the start's reason; an apply
    // of the unchanged state tries a start too, and fails the same way.
    a.supervise(t0 + Duration::from_secs(2));
    assert!(a.not_ready().unwrap().contains("start failed"));
    assert!(a.apply(&state, &ctx, t0 + Duration::from_secs(3)).is_err());
    assert!(a.not_ready().unwrap().contains("start failed"));

    fail.store(false, Ordering::SeqCst);
    a.supervise(t0 + Duration::from_secs(60));
    assert_eq!(a.not_ready(), None);
    // The failed apply asked for another one, which finds everything running.
    assert!(a.wants_apply());
}

use super::test_eps::Eps;

#[test]
fn endpoint_changes_skip_render_and_the_file_follows_before_any_restart() {
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let died = Arc::new(AtomicBool::new(false));
    let fake = |kind: DaemonKind, died: Arc<AtomicBool>| Fake {
        kind,
        cfg: dir.path().join(format!("{kind}.conf")),
        track: None,
        watch: dir.path().join("none"),
        up: false,
        fail_start: Arc::new(AtomicBool::new(false)),
        died,
        log: log.clone(),
    };
    let mut a = Applier::new(
        Eps::new((0, [1, 2])),
        Box::new(fake(
            DaemonKind::Keepalived,
            Arc::new(AtomicBool::new(false)),
        )),
        Some(Box::new(fake(DaemonKind::Haproxy, died.clone()))),
        Arc::new(Metrics::new()),
    );
    a.min_reload_interval = Duration::ZERO;
    let state = State::from_json(include_str!("../../tests/fixtures/empty.json")).unwrap();
    let ctx = NodeContext::default();
    let file = dir.path().join("haproxy.conf");
    let on_disk = || std::fs::read_to_string(&file).unwrap();
    let last = || log.lock().unwrap().last().cloned().unwrap();
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let apply = |a: &mut Applier<Eps>, v: (u8, [u16; 2]), t: Instant| {
        a.renderer().view.set(v);
        a.apply(&state, &ctx, t).unwrap()
    };
    let done = |ka, proxy| Applied::Done {
        keepalived: ka,
        proxy: Some(proxy),
    };
    use SlotOutcome::*;

    assert_eq!(apply(&mut a, (0, [1, 2]), at(0)), done(Started, Started));
    // Endpoints only: Runtime API, no render, the file lags (on purpose).
    assert_eq!(
        apply(&mut a, (0, [1, 3]), at(100)),
        done(Unchanged, Runtime)
    );
    assert_eq!(last(), "haproxy runtime set s1 3");
    assert_eq!(on_disk(), "eps [1, 2]");
    assert!(a.proxy().unwrap().file_stale());
    // Back to the endpoints the file has: HAProxy runs [1, 3], so this is a change
    // (a text comparison with the file would call it unchanged).
    assert_eq!(
        apply(&mut a, (0, [1, 2]), at(200)),
        done(Unchanged, Runtime)
    );
    assert_eq!(last(), "haproxy runtime set s1 2");
    assert_eq!(
        apply(&mut a, (0, [1, 2]), at(250)),
        done(Unchanged, Unchanged)
    );
    assert_eq!(
        apply(&mut a, (0, [5, 2]), at(300)),
        done(Unchanged, Runtime)
    );
    // The file follows once the changes are quiet for FILE_SYNC_QUIET.
    a.supervise(at(900));
    assert!(a.proxy().unwrap().file_stale());
    a.supervise(at(1300));
    assert_eq!(on_disk(), "eps [5, 2]");
    assert!(!a.proxy().unwrap().file_stale());
    // keepalived changes too: the full path (runtime for the proxy, keepalived reload).
    assert_eq!(
        apply(&mut a, (1, [6, 2]), at(1400)),
        done(Reloaded, Runtime)
    );
    assert_eq!(on_disk(), "eps [6, 2]");
    // A runtime change, then the proxy dies at once: the restart starts from a file
    // with the current endpoints, not the lagging one.
    assert_eq!(
        apply(&mut a, (1, [7, 2]), at(1500)),
        done(Unchanged, Runtime)
    );
    died.store(true, std::sync::atomic::Ordering::SeqCst);
    a.supervise(at(1510));
    a.supervise(at(1700));
    assert_eq!(last(), "haproxy start, health \"none\", config eps [7, 2]");
    // Nothing was ever reloaded but keepalived's one change.
    let reloads: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("reload"))
        .cloned()
        .collect();
    assert_eq!(reloads, ["keepalived reload ka 1"]);
}

/// A daemon that is a real process (`sleep`), to kill behind the control loop's back.
struct Sleeper {
    cfg: PathBuf,
    track: PathBuf,
    child: Option<std::process::Child>,
}

impl Daemon for Sleeper {
    fn kind(&self) -> DaemonKind {
        DaemonKind::Haproxy
    }
    fn config_path(&self) -> &Path {
        &self.cfg
    }
    fn check(&self, _: &Path) -> Result<(), DaemonError> {
        Ok(())
    }
    fn start(&mut self) -> Result<(), DaemonError> {
        self.child = Some(
            std::process::Command::new("sleep")
                .arg("60")
                .spawn()
                .unwrap(),
        );
        Ok(())
    }
    fn reload(&mut self) -> Result<(), DaemonError> {
        Ok(())
    }
    fn poll_exit(&mut self) -> Option<String> {
        None // the control loop is "busy": it never looks
    }
    fn is_running(&self) -> bool {
        self.child.is_some()
    }
    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
    fn stop(&mut self, _: Duration) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    fn track_file(&self) -> Option<&Path> {
        Some(&self.track)
    }
}

#[test]
fn the_health_file_turns_unhealthy_without_the_control_loop() {
    let dir = tempfile::tempdir().unwrap();
    let track = dir.path().join("proxy-health");
    let mut slot = Slot::new(Box::new(Sleeper {
        cfg: dir.path().join("haproxy.cfg"),
        track: track.clone(),
        child: None,
    }));
    let m = Metrics::new();
    slot.start(Instant::now(), &m).unwrap();
    assert_eq!(std::fs::read_to_string(&track).unwrap(), "0\n");
    let pid = slot.daemon().pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Nobody calls supervise: the watcher alone notices (a zombie counts as gone).
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(&track).unwrap() != "1\n" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(std::fs::read_to_string(&track).unwrap(), "1\n");
    assert_eq!(slot.health_written(), Some(false));
    // A restart is healthy again; a stop is not a crash.
    slot.start(Instant::now(), &m).unwrap();
    assert_eq!(std::fs::read_to_string(&track).unwrap(), "0\n");
    slot.stop(Duration::from_secs(1));
    // Two looks of the watcher thread after the stop (each under the lock the stop
    // took), then the file still says healthy.
    let looks = slot.health_looks();
    let deadline = Instant::now() + Duration::from_secs(5);
    while slot.health_looks() < looks + 2 && Instant::now() < deadline {
        std::thread::sleep(HEALTH_WATCH_EVERY);
    }
    assert!(
        slot.health_looks() >= looks + 2,
        "the watcher thread stopped looking"
    );
    assert_eq!(std::fs::read_to_string(&track).unwrap(), "0\n");
}

/// keepalived's view is a placement set by the test (VIP -> VRID of pool
/// `default`); the config text lists it.
struct Moves(Mutex<BTreeMap<&'static str, u8>>);
impl NodeRenderer for Moves {
    type View = Placement;
    fn view(
        &self,
        _: &State,
        _: &NodeContext,
        _: Option<&Placement>,
    ) -> Result<Placement, crate::view::ViewError> {
        let pool: PoolName = "default".parse().unwrap();
        Ok(self
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(ip, vrid)| {
                let instance = Instance {
                    pool: pool.clone(),
                    vrid: *vrid,
                };
                (ip.parse().unwrap(), instance)
            })
            .collect())
    }
    fn render(&self, v: &Placement) -> Result<Desired, crate::render_error::RenderError> {
        let lines: Vec<String> = v.iter().map(|(ip, i)| format!("{i} {ip}")).collect();
        Ok(Desired {
            keepalived: lines.join("\n"),
            proxy: None,
            files: Default::default(),
        })
    }
    fn runtime_diff(&self, _: &Placement, _: &Placement) -> Option<Vec<String>> {
        None
    }
    fn placement(&self, v: &Placement) -> Placement {
        v.clone()
    }
    fn hold_out(&self, mut v: Placement, vips: &BTreeSet<IpAddr>) -> Placement {
        v.retain(|ip, _| !vips.contains(ip));
        v
    }
}

/// What `f` logs (at info and above), and its result.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let w = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || w.clone())
        .finish();
    let out = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

/// The applier leaves a moved VIP out of keepalived for the hold-down, says when to
/// apply again, and puts it in its new instance then; new VIPs and a zero hold-down
/// join at once.
#[test]
fn a_vip_changing_instance_is_held_out_of_keepalived_then_joins() {
    use std::sync::atomic::AtomicBool;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("keepalived.conf");
    let ka = Fake {
        kind: DaemonKind::Keepalived,
        cfg: cfg.clone(),
        track: None,
        watch: dir.path().join("none"),
        up: false,
        fail_start: Arc::new(AtomicBool::new(false)),
        died: Arc::new(AtomicBool::new(false)),
        log: Arc::new(Mutex::new(Vec::new())),
    };
    let placed = Moves(Mutex::new(
        [("198.18.0.102", 3), ("198.18.0.104", 5)].into(),
    ));
    let mut a = Applier::new(placed, Box::new(ka), None, Arc::new(Metrics::new()));
    assert_eq!(a.vip_handover, handover::DEFAULT_HOLD);
    let state = State::from_json(include_str!("../../tests/fixtures/empty.json")).unwrap();
    let ctx = NodeContext::default();
    let conf = || std::fs::read_to_string(&cfg).unwrap();
    let set = |a: &Applier<Moves>, ip: &'static str, vrid: u8| {
        a.renderer().0.lock().unwrap().insert(ip, vrid);
    };
    let secs = Duration::from_millis;
    let t0 = Instant::now();

    a.apply(&state, &ctx, t0).unwrap();
    assert_eq!(
        conf(),
        "k8slb_default_3 198.18.0.102\nk8slb_default_5 198.18.0.104"
    );
    assert_eq!(a.handover_until(), None);

    // .102 moves from instance 3 to 5: in no instance, and apply again in 2 s.
    set(&a, "198.18.0.102", 5);
    let t1 = t0 + secs(1500);
    let (done, log) = logged(|| a.apply(&state, &ctx, t1).unwrap());
    assert!(done.changed());
    assert!(
        log.contains(
            "VIP 198.18.0.102 moves from instance k8slb_default_3 to k8slb_default_5: \
             held out for 2000 ms so no two nodes hold it"
        ),
        "{log}"
    );
    assert_eq!(conf(), "k8slb_default_5 198.18.0.104");
    assert_eq!(a.handover_until(), Some(t1 + handover::DEFAULT_HOLD));
    let (from, to) = &a.held_vips()[&"198.18.0.102".parse::<IpAddr>().unwrap()];
    assert_eq!(
        (from.to_string(), to.to_string()),
        ("k8slb_default_3".into(), "k8slb_default_5".into())
    );

    // An apply during the hold-down keeps it out (and says nothing new).
    let (_, log) = logged(|| a.apply(&state, &ctx, t1 + secs(1000)).unwrap());
    assert!(!log.contains("moves from instance"), "{log}");
    assert_eq!(conf(), "k8slb_default_5 198.18.0.104");
    assert_eq!(a.handover_until(), Some(t1 + handover::DEFAULT_HOLD));

    // At its end it joins instance 5.
    let t2 = a.handover_until().unwrap();
    let (done, log) = logged(|| a.apply(&state, &ctx, t2).unwrap());
    assert!(done.changed());
    assert!(
        log.contains("VIP 198.18.0.102 joined instance k8slb_default_5"),
        "{log}"
    );
    assert_eq!(
        conf(),
        "k8slb_default_5 198.18.0.102\nk8slb_default_5 198.18.0.104"
    );
    assert_eq!(a.handover_until(), None);
    assert!(a.held_vips().is_empty());

    // A new VIP joins at once.
    set(&a, "198.18.0.9", 3);
    let t3 = t2 + secs(1500);
    a.apply(&state, &ctx, t3).unwrap();
    assert!(conf().contains("k8slb_default_3 198.18.0.9"), "{}", conf());
    assert_eq!(a.handover_until(), None);

    // A zero hold-down: a move is applied as the state says.
    a.vip_handover = Duration::ZERO;
    set(&a, "198.18.0.104", 3);
    a.apply(&state, &ctx, t3 + secs(1500)).unwrap();
    assert!(
        conf().contains("k8slb_default_3 198.18.0.104"),
        "{}",
        conf()
    );
    assert_eq!(a.handover_until(), None);
}

#[test]
fn rate_limit() {
    let t0 = Instant::now();
    assert_eq!(next_reload_at(None, Duration::from_secs(1)), None);
    assert_eq!(
        next_reload_at(Some(t0), Duration::from_secs(1)),
        Some(t0 + Duration::from_secs(1))
    );
}
