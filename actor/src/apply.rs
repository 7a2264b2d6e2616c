//! The apply pipeline: state -> view -> configs -> check -> atomic swap -> reload ->
//! confirm, with the decisions pure and the I/O behind [`Daemon`] and [`NodeRenderer`].
//!
//! For each daemon (the proxy first, then keepalived, so a VIP never arrives before its
//! listeners):
//!
//! 1. identical to what is running: nothing ([`decide`] gives [`Step::Unchanged`]);
//! 2. HAProxy and only endpoints changed (the renderer's `runtime_diff` is `Some`): the
//!    commands go to the Runtime API, then the new config file is written (atomically,
//!    no reload), so a later reload or restart starts from current endpoints; if the
//!    Runtime API refuses, fall through to 3;
//! 3. otherwise the config is written to a temporary file in the same directory, checked
//!    with the daemon's own checker, renamed over the live one, and the daemon is
//!    reloaded (or started) and the reload confirmed. All checks of one apply run before
//!    anything is installed: a config that fails its check never replaces the running
//!    one, and neither does its sibling. The failure is logged, counted
//!    (`config_check_failures_total`) and kept as [`Applier::last_error`]. The files the
//!    proxy config names (maps, crt-lists) are staged, checked and installed with it
//!    ([`crate::staged`]);
//! 4. when the proxy's checker refuses the config, the owners whose blocks it refuses are
//!    found by bisection and the state is applied without them ([`crate::quarantine`]);
//!    if even the config without any owner is refused, 3 stands: nothing is installed.
//!
//! The proxy's health file ([`Daemon::track_file`], keepalived's `track_file` with weight
//! 0) holds `0` once a start of the proxy is confirmed, `1` the moment its process is gone
//! (a watcher thread looks every 20 ms, whatever the control loop is doing) or a start
//! fails, and `0` again after a confirmed restart. It is
//! written (temporary file + rename in the same directory; keepalived watches the
//! directory with inotify and handles both a rename and a truncating write) before
//! keepalived is first started, so a node whose proxy never came up never takes a VIP.
//!
//! keepalived's own process is watched the same way once [`Applier::watch_keepalived_exit`]
//! is called: the moment it is gone (SIGKILL, OOM), the VIPs of the keepalived config it
//! ran are deleted from this node's interfaces at once, not when the control loop next
//! reaps it (it may be busy for seconds), because a backup takes them over within three
//! advert intervals of the last advertisement. The reaper's removal that follows finds
//! them gone ("already gone" is success).
//!
//! Reloads are rate-limited per daemon ([`Applier::min_reload_interval`], default 1 s):
//! an apply that would reload too early returns [`Applied::Deferred`] and the caller
//! tries again later. Bursts are debounced by the caller with [`Debouncer`].

use crate::admin::Metrics;
use crate::daemons::{Daemon, DaemonError, DaemonKind};
use crate::handover::{self, Instance, Memory, Placement};
use crate::ports::{self, Transport};
use crate::quarantine::{self, Found, Quarantine};
use crate::staged::{ConfigFiles, StageError, Staged};
use crate::supervise::{Action, Restarter};
use crate::vip::{AddrOps, VipError};
use k8slb_common::fs::write_atomic;
use k8slb_common::names::{IfName, PoolName};
use k8slb_common::owners;
use k8slb_common::problem::ObjRef;
use k8slb_common::state::State;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Rendered configs of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub keepalived: String,
    /// `None` for the kubeproxy provider.
    pub proxy: Option<String>,
    /// The files the proxy config names: staged, checked and installed with it
    /// ([`crate::staged`]).
    pub files: ConfigFiles,
}

/// What the control loop knows about this node besides the state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeContext {
    /// The interface of every pool (forced, from `--interface`, or detected).
    pub interfaces: BTreeMap<PoolName, IfName>,
    pub node_addresses: Vec<IpAddr>,
}

/// The seam to `view` + `render`: the real one wraps [`crate::view`] and
/// [`crate::render`]; tests use small stand-ins.
pub trait NodeRenderer {
    type View: Clone + Send;
    /// `previous` is the view applied now (so endpoints can keep their server slots).
    fn view(
        &self,
        state: &State,
        ctx: &NodeContext,
        previous: Option<&Self::View>,
    ) -> Result<Self::View, String>;
    fn render(&self, view: &Self::View) -> Result<Desired, String>;
    /// `Some(commands)`: only endpoints changed, apply these over the Runtime API;
    /// `None`: a reload is needed.
    fn runtime_diff(&self, old: &Self::View, new: &Self::View) -> Option<Vec<String>>;
    /// True if everything the two views render besides the proxy config is the same
    /// (keepalived.conf, and the proxy config up to what [`Self::runtime_diff`] covers).
    /// Then an endpoint-only change is applied without rendering at all (the fast
    /// path); the default, `false`, always renders.
    fn same_outside_proxy(&self, old: &Self::View, new: &Self::View) -> bool {
        let _ = (old, new);
        false
    }
    /// The VRRP instance of every VIP in `view`'s keepalived config, for the hand-over
    /// hold-down ([`crate::handover`]). The default, none, means no hold-down.
    fn placement(&self, view: &Self::View) -> Placement {
        let _ = view;
        Placement::new()
    }
    /// `view` with `vips` in no keepalived instance (everything else as it is).
    fn hold_out(&self, view: Self::View, vips: &BTreeSet<IpAddr>) -> Self::View {
        let _ = vips;
        view
    }
    /// The addresses the proxy config of `view` listens on, checked against the ports
    /// other programs hold ([`crate::ports`]). The default, none, checks nothing.
    fn listens(&self, view: &Self::View) -> BTreeSet<(SocketAddr, Transport)> {
        let _ = view;
        BTreeSet::new()
    }
}

/// How long the proxy config file may lag behind endpoints applied over the Runtime API
/// before [`Applier::supervise`] writes it (sooner if the proxy must restart).
pub const FILE_SYNC_QUIET: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("view: {0}")]
    View(String),
    #[error("render: {0}")]
    Render(String),
    #[error("write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    #[error("files the proxy config names: {0}")]
    Files(#[from] StageError),
}

impl ApplyError {
    pub fn category(&self) -> &'static str {
        match self {
            ApplyError::View(_) => "view",
            ApplyError::Render(_) => "render",
            ApplyError::Write { .. } => "write",
            ApplyError::Daemon(e) => e.category(),
            ApplyError::Files(_) => "files",
        }
    }
}

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

/// One daemon under the pipeline and the supervisor.
pub struct Slot {
    daemon: Box<dyn Daemon>,
    /// The config text the daemon runs now (the file at `config_path`).
    running: Option<String>,
    last_reload: Option<Instant>,
    restarter: Restarter,
    /// Shared with a watcher thread (see [`watch_health`]).
    health: Option<Arc<Mutex<HealthFile>>>,
    /// keepalived only, once [`Applier::watch_keepalived_exit`] ran: shared with the
    /// thread that removes its VIPs the moment its process is gone (see [`watch_exit`]).
    exit_guard: Option<Arc<Mutex<ExitGuard>>>,
    /// The daemon runs endpoints newer than `running` and the file on disk (set by the
    /// fast path): `running` may not be compared with a candidate until the file is
    /// written again ([`Applier::supervise`], or the next apply that renders).
    file_stale: bool,
    last_runtime: Option<Instant>,
    /// Why the daemon does not run the installed config (a failed start or reload, an
    /// exit), until a start, reload or Runtime API update succeeds. Readiness says it.
    failure: Option<String>,
    /// The files `running` names, as installed with it.
    running_files: ConfigFiles,
}

/// The health file keepalived tracks for a daemon: `0\n` healthy, `1\n` not.
#[derive(Debug)]
struct HealthFile {
    path: PathBuf,
    /// What the file holds (as far as we wrote it); `None`: not written yet.
    written: Option<bool>,
    /// The process whose death makes the file say unhealthy at once (the watcher
    /// thread), set while it is confirmed running.
    watched: Option<u32>,
    /// How many times the watcher thread has looked (tests wait for it to have looked
    /// rather than sleeping).
    looks: u64,
}

/// How often the watcher thread looks at the proxy's process.
pub const HEALTH_WATCH_EVERY: Duration = Duration::from_millis(20);

/// The health file's own watcher: the moment the watched proxy process is gone, the
/// file says unhealthy and keepalived moves the VIPs, even while the control loop is
/// busy (a `haproxy -c` of a 10,000-Service config takes seconds). The control loop
/// still reaps and restarts the daemon. Ends when the slot is dropped.
fn watch_health(h: Weak<Mutex<HealthFile>>, kind: DaemonKind) {
    loop {
        std::thread::sleep(HEALTH_WATCH_EVERY);
        let Some(h) = h.upgrade() else {
            return;
        };
        let mut g = h.lock().unwrap_or_else(|p| p.into_inner());
        g.looks += 1;
        let Some(pid) = g.watched else {
            continue;
        };
        if g.written != Some(true) || crate::daemons::pid_alive(pid) {
            continue;
        }
        g.watched = None;
        match g.set(false) {
            Ok(()) => {
                tracing::warn!(daemon = %kind, pid, "process gone; health file says unhealthy (keepalived moves the VIPs)")
            }
            Err(e) => {
                tracing::error!(daemon = %kind, pid, error = %e, "process gone, and the health file could not be written")
            }
        }
    }
}

/// What the exit watcher of keepalived knows: the process to watch and the VIPs of the
/// config it runs.
struct ExitGuard {
    /// The keepalived process (the actor's child), while it is confirmed running.
    watched: Option<u32>,
    /// The last process found gone: never watched again (the control loop may refresh
    /// the watch before it reaps the dead child).
    gone: Option<u32>,
    /// The VIPs of the keepalived config applied last.
    vips: BTreeSet<IpAddr>,
}

impl ExitGuard {
    fn watch(&mut self, pid: Option<u32>) {
        self.watched = pid.filter(|p| Some(*p) != self.gone);
    }
}

/// Deletes every address of `ops` whose IP is in `vips` ("already gone" is success);
/// returns them as `<ip>@<interface>`, and the errors.
fn delete_addresses(
    ops: &mut dyn AddrOps,
    vips: &BTreeSet<IpAddr>,
) -> Result<(Vec<String>, Vec<VipError>), VipError> {
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    for a in ops.addresses()? {
        if !vips.contains(&a.ip()) {
            continue;
        }
        match ops.delete(&a) {
            Ok(()) => removed.push(format!("{}@{}", a.ip(), a.ifname)),
            Err(e) => errors.push(e),
        }
    }
    Ok((removed, errors))
}

/// keepalived's exit watcher: every [`HEALTH_WATCH_EVERY`], if the watched keepalived
/// process is gone, its VIPs are deleted from this node at once (it could not remove
/// them itself, and a backup takes them over within three advert intervals). Ends when
/// the slot is dropped.
fn watch_exit(g: Weak<Mutex<ExitGuard>>, mut ops: Box<dyn AddrOps>) {
    loop {
        std::thread::sleep(HEALTH_WATCH_EVERY);
        let Some(g) = g.upgrade() else {
            return;
        };
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        let Some(pid) = g.watched else {
            continue;
        };
        if crate::daemons::pid_alive(pid) {
            continue;
        }
        (g.watched, g.gone) = (None, Some(pid));
        match delete_addresses(ops.as_mut(), &g.vips) {
            Ok((removed, errors)) => {
                tracing::warn!(
                    pid,
                    vips = %removed.join(","),
                    count = removed.len(),
                    "keepalived process gone; removed its VIPs from this node at once"
                );
                for e in errors {
                    tracing::error!(pid, error = %e, "keepalived process gone; could not remove a VIP");
                }
            }
            Err(e) => {
                tracing::error!(pid, error = %e, "keepalived process gone; could not list addresses to remove its VIPs")
            }
        }
    }
}

impl HealthFile {
    fn set(&mut self, healthy: bool) -> Result<(), ApplyError> {
        if self.written == Some(healthy) {
            return Ok(());
        }
        write_atomic(&self.path, if healthy { b"0\n" } else { b"1\n" }).map_err(|source| {
            ApplyError::Write {
                path: self.path.display().to_string(),
                source,
            }
        })?;
        self.written = Some(healthy);
        Ok(())
    }
}

/// A candidate checked in a temporary file next to the live one, with the files it
/// names staged.
struct Prepared {
    tmp: tempfile::NamedTempFile,
    staged: Option<Staged>,
}

impl Slot {
    pub fn new(daemon: Box<dyn Daemon>) -> Self {
        let health = daemon.track_file().map(|p| {
            let h = Arc::new(Mutex::new(HealthFile {
                path: p.to_path_buf(),
                written: None,
                watched: None,
                looks: 0,
            }));
            let (weak, kind) = (Arc::downgrade(&h), daemon.kind());
            if let Err(e) = std::thread::Builder::new()
                .name(format!("{kind}-health"))
                .spawn(move || watch_health(weak, kind))
            {
                tracing::warn!(daemon = %kind, error = %e, "no health watcher thread; the control loop alone updates the health file");
            }
            h
        });
        Slot {
            daemon,
            running: None,
            last_reload: None,
            restarter: Restarter::default(),
            health,
            exit_guard: None,
            file_stale: false,
            last_runtime: None,
            failure: None,
            running_files: ConfigFiles::default(),
        }
    }

    /// Point the exit watcher (if any) at the daemon's process now.
    fn watch_exit(&self) {
        if let Some(g) = self.exit_guard.as_ref() {
            let pid = self
                .daemon
                .is_running()
                .then(|| self.daemon.pid())
                .flatten();
            g.lock().unwrap_or_else(|p| p.into_inner()).watch(pid);
        }
    }

    /// Why this daemon does not run its applied config, if it does not: not started
    /// yet, not running (with the last start failure or exit), or a failed reload.
    pub fn not_ready(&self) -> Option<String> {
        let kind = self.kind();
        match (&self.running, self.daemon.is_running(), &self.failure) {
            (None, _, _) => Some(format!("{kind} not started yet")),
            (Some(_), false, why) => Some(format!(
                "{kind} not running: {}",
                why.as_deref().unwrap_or("not started")
            )),
            (Some(_), true, Some(why)) => Some(format!("{kind}: {why}")),
            (Some(_), true, None) => None,
        }
    }

    /// `e` without its leading `"<daemon>: "`.
    fn reason(&self, e: &DaemonError) -> String {
        let text = e.to_string();
        let prefix = format!("{}: ", self.kind());
        text.strip_prefix(&prefix).unwrap_or(&text).to_string()
    }
    /// True while endpoints applied over the Runtime API are not yet in the file.
    pub fn file_stale(&self) -> bool {
        self.file_stale
    }
    /// What the health file holds (`Some(true)`: `0`, healthy); `None` if the daemon has
    /// none or it was not written yet.
    pub fn health_written(&self) -> Option<bool> {
        self.health
            .as_ref()
            .and_then(|h| h.lock().unwrap_or_else(|p| p.into_inner()).written)
    }

    /// How many times the health file's watcher thread has looked (0 without one).
    #[cfg(test)]
    fn health_looks(&self) -> u64 {
        self.health
            .as_ref()
            .map_or(0, |h| h.lock().unwrap_or_else(|p| p.into_inner()).looks)
    }

    /// Write the health file (if any); an error is logged and returned. Healthy: the
    /// daemon's process is watched from now on; unhealthy: no longer.
    fn set_health(&mut self, healthy: bool) -> Result<(), ApplyError> {
        let kind = self.kind();
        let pid = self.daemon.pid();
        let Some(h) = self.health.as_ref() else {
            return Ok(());
        };
        let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
        h.watched = if healthy { pid } else { None };
        let changed = h.written != Some(healthy);
        match h.set(healthy) {
            Ok(()) => {
                if changed {
                    tracing::info!(daemon = %kind, file = %h.path.display(), healthy, "health file for keepalived written");
                }
                Ok(())
            }
            Err(e) => {
                tracing::error!(daemon = %kind, error = %e, healthy, "could not write the health file keepalived tracks");
                Err(e)
            }
        }
    }

    /// `None`: no health file; `Some(written)` otherwise.
    fn health_state(&self) -> Option<Option<bool>> {
        self.health
            .as_ref()
            .map(|h| h.lock().unwrap_or_else(|p| p.into_inner()).written)
    }

    /// Before keepalived starts: the health file exists and says whether the daemon runs.
    fn ensure_health(&mut self) -> Result<(), ApplyError> {
        match self.health_state() {
            Some(None) => {
                let running = self.daemon.is_running();
                self.set_health(running)
            }
            _ => Ok(()),
        }
    }
    pub fn kind(&self) -> DaemonKind {
        self.daemon.kind()
    }
    pub fn daemon(&self) -> &dyn Daemon {
        self.daemon.as_ref()
    }

    fn write_tmp(&self, text: &str) -> Result<tempfile::NamedTempFile, ApplyError> {
        let path = self.daemon.config_path();
        let dir = path.parent().unwrap_or(Path::new("."));
        let werr = |source| ApplyError::Write {
            path: path.display().to_string(),
            source,
        };
        let mut tmp = tempfile::Builder::new()
            .prefix(".k8slb-")
            .tempfile_in(dir)
            .map_err(werr)?;
        tmp.write_all(text.as_bytes()).map_err(werr)?;
        tmp.as_file().sync_all().map_err(werr)?;
        Ok(tmp)
    }

    /// Stage `files`, write `text` to a temporary file and check it with them (the
    /// checker reads a copy naming the staging directory: see [`crate::staged`]). A
    /// refusal is logged and counted.
    fn prepare(
        &self,
        text: &str,
        files: &ConfigFiles,
        metrics: &Metrics,
    ) -> Result<Prepared, ApplyError> {
        let r = self.stage_and_check(text, files);
        if let Err(ApplyError::Daemon(e @ DaemonError::Check { .. })) = &r {
            metrics.check_failure(self.kind());
            tracing::error!(daemon = %self.kind(), error = %e, "rendered config refused by the checker; the running config stays");
        }
        r
    }

    /// [`Self::prepare`] without the log line and the count (the quarantine's checks).
    fn stage_and_check(&self, text: &str, files: &ConfigFiles) -> Result<Prepared, ApplyError> {
        let tmp = self.write_tmp(text)?;
        let staged = files.stage()?;
        let checked = files.for_check(text);
        if checked == text {
            self.daemon.check(tmp.path())?;
        } else {
            let copy = self.write_tmp(&checked)?;
            self.daemon.check(copy.path())?;
        }
        Ok(Prepared {
            tmp,
            staged: Some(staged),
        })
    }

    /// Move the staged files into place, then the config.
    fn install(&mut self, p: Prepared, files: &ConfigFiles) -> Result<(), ApplyError> {
        if let Some(staged) = p.staged {
            staged.install()?;
        }
        self.running_files = files.clone();
        let path = self.daemon.config_path();
        p.tmp.persist(path).map_err(|e| ApplyError::Write {
            path: path.display().to_string(),
            source: e.error,
        })?;
        self.file_stale = false;
        Ok(())
    }

    /// Write `text` and its files as the live ones without a check (runtime path,
    /// restore).
    fn write_live(&mut self, text: &str, files: &ConfigFiles) -> Result<(), ApplyError> {
        files.write_live()?;
        let tmp = self.write_tmp(text)?;
        self.install(Prepared { tmp, staged: None }, files)
    }

    fn start(&mut self, now: Instant, metrics: &Metrics) -> Result<(), DaemonError> {
        match self.daemon.start() {
            Ok(()) => {
                metrics.reload(self.kind(), true);
                self.restarter.started(now);
                self.last_reload = Some(now);
                self.failure = None;
                tracing::info!(daemon = %self.kind(), "started");
                self.watch_exit();
                // Confirmed: keepalived may hold VIPs again. (A failed write is logged;
                // the file then still says unhealthy, which is the safe side.)
                let _ = self.set_health(true);
                Ok(())
            }
            Err(e) => {
                metrics.reload(self.kind(), false);
                self.failure = Some(format!("start failed: {}", self.reason(&e)));
                let _ = self.set_health(false);
                let delay = self.restarter.start_failed(now);
                tracing::error!(daemon = %self.kind(), error = %e, retry_in_ms = delay.as_millis() as u64, "start failed");
                Err(e)
            }
        }
    }

    /// One supervision step: restart a dead child with backoff.
    /// Returns true when it restarted the daemon (from the config file on disk).
    pub fn supervise(&mut self, now: Instant, metrics: &Metrics) -> bool {
        if self.running.is_none() {
            return false; // never installed a config: nothing to supervise yet
        }
        let exited = self.daemon.poll_exit();
        match self.restarter.tick(now, exited.is_some()) {
            Action::Nothing => false,
            Action::Died { delay, .. } => {
                // First: keepalived faults its instances and the VIPs move.
                let _ = self.set_health(false);
                self.failure = Some(format!("exited ({})", exited.as_deref().unwrap_or("?")));
                metrics.child_restart(self.kind());
                tracing::warn!(daemon = %self.kind(), status = exited.as_deref().unwrap_or("?"), restart_in_ms = delay.as_millis() as u64, "daemon exited; restarting");
                false
            }
            Action::Restart => self.start(now, metrics).is_ok(),
        }
    }

    pub fn stop(&mut self, grace: Duration) {
        self.unwatch();
        self.daemon.stop(grace);
    }

    /// A stop is not a crash: the watchers must not report it (nor remove VIPs for it).
    fn unwatch(&mut self) {
        if let Some(h) = self.health.as_ref() {
            h.lock().unwrap_or_else(|p| p.into_inner()).watched = None;
        }
        if let Some(g) = self.exit_guard.as_ref() {
            g.lock().unwrap_or_else(|p| p.into_inner()).watched = None;
        }
    }

    /// Begin a stop without waiting for it: `SIGTERM` to the watched process (keepalived
    /// sends its priority-0 adverts at once, then takes about a second to exit);
    /// [`Slot::stop`] waits for the exit later.
    pub fn begin_stop(&mut self) {
        self.unwatch();
        if let Some(pid) = self.daemon.pid().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

/// The pipeline for this node: the proxy (if any) and keepalived.
pub struct Applier<R: NodeRenderer> {
    renderer: R,
    keepalived: Slot,
    proxy: Option<Slot>,
    running_view: Option<R::View>,
    pub min_reload_interval: Duration,
    metrics: Arc<Metrics>,
    last_error: Option<String>,
    last_good: Option<Desired>,
    /// No new attempt to bring a stale proxy file up to date before this (after a
    /// failed one).
    sync_retry_at: Option<Instant>,
    /// The daemons may not run what `running_view` says (a restart from a stale file):
    /// the caller should apply again even without a new state ([`Self::wants_apply`]).
    wants_apply: bool,
    /// The hand-over hold-down ([`crate::handover`]): a VIP that changes VRRP instance
    /// is in no instance for this long. Zero disables it.
    pub vip_handover: Duration,
    /// Where each VIP was in the keepalived config last applied, and which VIPs left
    /// an instance when.
    handover: Memory,
    /// The VIPs held out of the running keepalived config, with their move.
    held: BTreeMap<IpAddr, (Instance, Instance)>,
    /// When the first of them may join its new instance: apply again then.
    handover_until: Option<Instant>,
    /// The owners left out of the proxy config ([`crate::quarantine`]).
    quarantine: Quarantine,
    /// Where the node's listeners are read ([`Self::check_ports`]).
    net_proc: PathBuf,
    /// Checks of the last bisection.
    bisection_checks: usize,
}

impl<R: NodeRenderer> Applier<R> {
    pub fn new(
        renderer: R,
        keepalived: Box<dyn Daemon>,
        proxy: Option<Box<dyn Daemon>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Applier {
            renderer,
            keepalived: Slot::new(keepalived),
            proxy: proxy.map(Slot::new),
            running_view: None,
            min_reload_interval: Duration::from_secs(1),
            metrics,
            last_error: None,
            last_good: None,
            sync_retry_at: None,
            wants_apply: false,
            vip_handover: handover::DEFAULT_HOLD,
            handover: Memory::default(),
            held: BTreeMap::new(),
            handover_until: None,
            quarantine: Quarantine::default(),
            net_proc: PathBuf::from("/proc/net"),
            bisection_checks: 0,
        }
    }

    /// When a VIP held out of keepalived by the hand-over hold-down may join its new
    /// instance: the caller applies again at that instant (even without a new state).
    pub fn handover_until(&self) -> Option<Instant> {
        self.handover_until
    }

    /// Watch keepalived's process from a thread of its own (every
    /// [`HEALTH_WATCH_EVERY`]): when it is gone, the VIPs of the keepalived config
    /// applied last are deleted through the [`AddrOps`] that `ops` makes (in that thread,
    /// once) at once, whatever the control loop is doing. The supervisor still reaps and
    /// restarts keepalived. Without this call, the VIPs go only when the supervisor
    /// reaps it.
    pub fn watch_keepalived_exit<F>(&mut self, ops: F)
    where
        F: FnOnce() -> Result<Box<dyn AddrOps>, VipError> + Send + 'static,
    {
        let g = Arc::new(Mutex::new(ExitGuard {
            watched: None,
            gone: None,
            vips: self
                .running_view
                .as_ref()
                .map(|v| self.renderer.placement(v).into_keys().collect())
                .unwrap_or_default(),
        }));
        let weak = Arc::downgrade(&g);
        let spawned = std::thread::Builder::new()
            .name("keepalived-exit".into())
            .spawn(move || match ops() {
                Ok(ops) => watch_exit(weak, ops),
                Err(e) => tracing::error!(error = %e, "no netlink for keepalived's exit watcher; its VIPs go when the control loop reaps it"),
            });
        match spawned {
            Ok(_) => {
                self.keepalived.exit_guard = Some(g);
                self.keepalived.watch_exit();
            }
            Err(e) => {
                tracing::warn!(error = %e, "no keepalived exit watcher thread; its VIPs go when the control loop reaps it")
            }
        }
    }

    /// The VIPs held out of the running keepalived config: VIP -> (the instance it
    /// left, the instance it will join).
    pub fn held_vips(&self) -> &BTreeMap<IpAddr, (Instance, Instance)> {
        &self.held
    }

    /// keepalived runs `view` since `now` (with `d`'s VIPs held out): remember where
    /// each VIP is, say which VIPs are newly held or have joined, and when to look again.
    fn handover_applied(&mut self, view: &R::View, d: handover::Decision, now: Instant) {
        let placed = self.renderer.placement(view);
        self.handover.record(&placed, self.vip_handover, now);
        if let Some(g) = self.keepalived.exit_guard.as_ref() {
            g.lock().unwrap_or_else(|p| p.into_inner()).vips = placed.keys().copied().collect();
        }
        // A reload may have restarted keepalived (a new process).
        self.keepalived.watch_exit();
        let mut held = BTreeMap::new();
        for h in d.held {
            let mv = (h.from, h.to);
            if self.held.get(&h.vip) != Some(&mv) {
                let held_ms = h.until.saturating_duration_since(now).as_millis();
                tracing::info!(
                    vip = %h.vip, from = %mv.0, to = %mv.1, held_ms,
                    "VIP {} moves from instance {} to {}: held out for {held_ms} ms so no two nodes hold it",
                    h.vip, mv.0, mv.1
                );
            }
            held.insert(h.vip, mv);
        }
        for (vip, (_, to)) in &self.held {
            if !held.contains_key(vip) && placed.get(vip) == Some(to) {
                tracing::info!(vip = %vip, to = %to, "VIP {vip} joined instance {to} after its hand-over hold-down");
            }
        }
        self.held = held;
        self.handover_until = d.until;
    }

    /// True (once) when the daemons may have drifted from the applied view, e.g. the
    /// proxy was restarted from a config file older than the endpoints it had: apply the
    /// current state again, even if it did not change (it will reload).
    pub fn wants_apply(&mut self) -> bool {
        std::mem::take(&mut self.wants_apply)
    }

    pub fn renderer(&self) -> &R {
        &self.renderer
    }
    pub fn keepalived(&self) -> &Slot {
        &self.keepalived
    }
    pub fn proxy(&self) -> Option<&Slot> {
        self.proxy.as_ref()
    }
    /// The last error of an apply (cleared by a successful one).
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
    /// The configs of the last successful apply.
    pub fn last_good(&self) -> Option<&Desired> {
        self.last_good.as_ref()
    }

    /// `None` while every daemon runs the applied config (ready); otherwise why not,
    /// e.g. `haproxy not running: start failed: ...`. A daemon that died, failed to
    /// start or failed to reload keeps the node not ready until a start or reload of it
    /// succeeds (the apply retries it as a Start, the supervisor restarts it).
    pub fn not_ready(&self) -> Option<String> {
        let slots = || self.proxy.iter().chain(std::iter::once(&self.keepalived));
        let why: Vec<String> = slots().filter_map(Slot::not_ready).collect();
        if self.last_good.is_none() {
            // Before the first successful apply, a daemon's failure says more than
            // "not started yet", and the apply's error more than nothing.
            return Some(match &self.last_error {
                _ if slots().any(|s| s.failure.is_some()) => why.join("; "),
                Some(e) => e.clone(),
                None => "no successful apply yet".into(),
            });
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// Apply `state`. On error nothing that failed its check was installed.
    pub fn apply(
        &mut self,
        state: &State,
        ctx: &NodeContext,
        now: Instant,
    ) -> Result<Applied, ApplyError> {
        let r = self.apply_inner(state, ctx, now);
        match &r {
            Ok(a @ Applied::Done { .. }) => {
                self.metrics
                    .apply(if a.changed() { "ok" } else { "unchanged" });
                self.last_error = None;
            }
            Ok(Applied::Deferred(_)) => {}
            Err(e) => {
                self.metrics.apply("failed");
                tracing::error!(error = %e, category = e.category(), "apply failed; the running configs stay");
                self.last_error = Some(e.to_string());
            }
        }
        r
    }

    /// Apply `state`; when the proxy's checker refuses its config, find the owners
    /// responsible, leave them out and apply the rest ([`crate::quarantine`]).
    fn apply_inner(
        &mut self,
        state: &State,
        ctx: &NodeContext,
        now: Instant,
    ) -> Result<Applied, ApplyError> {
        // The same refused contributions as when they were found: left out again, with
        // no new bisection (endpoint changes of everyone else stay on the fast path).
        if !self.quarantine.culprits.is_empty()
            && owners::contributions(state, &self.quarantine.culprits)
                == self.quarantine.contributions
        {
            let served = owners::without(state, &self.quarantine.culprits);
            match self.apply_state(&served, ctx, now) {
                // Something else is refused too: the whole state is searched again.
                Err(e) if self.is_proxy_refusal(&e) => {}
                r => return r,
            }
        }
        match self.apply_state(state, ctx, now) {
            Err(e) if self.is_proxy_refusal(&e) => self.quarantine_and_apply(state, ctx, now, e),
            Ok(a) => {
                if matches!(a, Applied::Done { .. }) {
                    self.set_quarantine(Quarantine::default(), 0);
                }
                Ok(a)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether `e` is the proxy's checker refusing a rendered config.
    fn is_proxy_refusal(&self, e: &ApplyError) -> bool {
        matches!(
            (e, &self.proxy),
            (ApplyError::Daemon(DaemonError::Check { daemon, .. }), Some(p)) if *daemon == p.kind()
        )
    }

    /// The objects left out of the proxy config now (their part of it is refused by the
    /// proxy's checker), for the log, the metric and the report.
    pub fn quarantined(&self) -> &BTreeSet<ObjRef> {
        &self.quarantine.culprits
    }

    /// The objects left out of the proxy config now, with the checker's first error line
    /// for each one's part alone (empty when it is refused only together with others).
    pub fn quarantine_errors(&self) -> &BTreeMap<ObjRef, String> {
        &self.quarantine.errors
    }

    /// How many checks the last bisection took (0: none since the last apply without a
    /// quarantine).
    pub fn last_bisection_checks(&self) -> usize {
        self.bisection_checks
    }

    /// The proxy refused `state`'s config (`refused`): bisect by owner, apply the state
    /// without the culprits, report them. If even the config with no owner is refused,
    /// or the search runs out of checks, nothing is applied (the last good config stays)
    /// and `refused` is the error.
    fn quarantine_and_apply(
        &mut self,
        state: &State,
        ctx: &NodeContext,
        now: Instant,
        refused: ApplyError,
    ) -> Result<Applied, ApplyError> {
        let all: Vec<ObjRef> = owners::owners(state).into_iter().collect();
        let found = quarantine::bisect(&all, quarantine::MAX_CHECKS, |included| {
            self.check_with_only(state, ctx, &all, included).is_ok()
        });
        let (culprits, checks) = match found {
            Found::Culprits { culprits, checks } => (culprits, checks),
            Found::NotAnOwner { checks } => {
                tracing::error!(checks, error = %refused, "the proxy refuses the config even without any Service or route: the fault is no object's; the running config stays");
                return Err(refused);
            }
            Found::OutOfChecks { checks } => {
                tracing::error!(checks, owners = all.len(), error = %refused, "the objects whose config the proxy refuses were not found within the bound of checks; the running config stays");
                return Err(refused);
            }
        };
        let culprits: BTreeSet<ObjRef> = culprits.into_iter().collect();
        let errors = culprits
            .iter()
            .map(|c| (c.clone(), self.culprit_error(state, ctx, &all, c)))
            .collect();
        let q = Quarantine {
            contributions: owners::contributions(state, &culprits),
            culprits,
            errors,
        };
        for o in q.culprits.difference(&self.quarantine.culprits) {
            tracing::error!(object = %quarantine::shown(o), checks, error = %refused, "left out of the proxy config: the proxy's checker refuses its part; everything else is served");
        }
        for o in self.quarantine.culprits.difference(&q.culprits) {
            tracing::info!(object = %quarantine::shown(o), "served again: the proxy's checker accepts its part of the config");
        }
        let served = owners::without(state, &q.culprits);
        self.set_quarantine(q, checks);
        self.apply_state(&served, ctx, now)
    }

    fn set_quarantine(&mut self, q: Quarantine, checks: usize) {
        if q.culprits.is_empty() {
            for o in &self.quarantine.culprits {
                tracing::info!(object = %quarantine::shown(o), "served again: the proxy's checker accepts the whole config");
            }
        }
        self.metrics
            .quarantined_objects
            .set(i64::try_from(q.culprits.len()).unwrap_or(i64::MAX));
        self.quarantine = q;
        self.bisection_checks = checks;
    }

    /// One check of the bisection: the proxy config of `state` with only the owners
    /// `included` of `all`, rendered and checked (files staged) like a real apply; the
    /// reason when it is refused (the checker's output, or why it could not be rendered).
    fn check_with_only(
        &self,
        state: &State,
        ctx: &NodeContext,
        all: &[ObjRef],
        included: &[ObjRef],
    ) -> Result<(), String> {
        let keep: BTreeSet<&ObjRef> = included.iter().collect();
        let remove: BTreeSet<ObjRef> = all.iter().filter(|o| !keep.contains(o)).cloned().collect();
        let s = owners::without(state, &remove);
        let view = self
            .renderer
            .view(&s, ctx, self.running_view.as_ref())
            .map_err(|e| e.to_string())?;
        if let Err(e) = self.check_ports(&view) {
            return Err(match e {
                ApplyError::Daemon(DaemonError::Check { output, .. }) => output,
                e => e.to_string(),
            });
        }
        let d = self.renderer.render(&view)?;
        match (&self.proxy, &d.proxy) {
            (Some(slot), Some(text)) => {
                slot.stage_and_check(text, &d.files)
                    .map(drop)
                    .map_err(|e| match e {
                        ApplyError::Daemon(DaemonError::Check { output, .. }) => output,
                        e => e.to_string(),
                    })
            }
            _ => Ok(()),
        }
    }

    /// What the checker says about `culprit`'s part alone: its first error line for a
    /// config holding only that owner's part (so it quotes nothing of another object's),
    /// empty when that config passes (the culprit is refused only together with others).
    fn culprit_error(
        &self,
        state: &State,
        ctx: &NodeContext,
        all: &[ObjRef],
        culprit: &ObjRef,
    ) -> String {
        match self.check_with_only(state, ctx, all, std::slice::from_ref(culprit)) {
            Ok(()) => String::new(),
            Err(output) => quarantine::first_error_line(&output).to_string(),
        }
    }

    /// Refuses, as the proxy's checker would if it bound, a view whose proxy listens on a
    /// port another program of this node holds on every address ([`crate::ports`]): the
    /// reload would fail for the whole config. A proxy refusal, so the quarantine finds
    /// the object that asks for it.
    fn check_ports(&self, view: &R::View) -> Result<(), ApplyError> {
        let Some(slot) = &self.proxy else {
            return Ok(());
        };
        let listens = self.renderer.listens(view);
        if listens.is_empty() {
            return Ok(());
        }
        let conflicts = ports::read(&self.net_proc).conflicts(&listens);
        if conflicts.is_empty() {
            return Ok(());
        }
        Err(ApplyError::Daemon(DaemonError::Check {
            daemon: slot.kind(),
            output: ports::refusal(&conflicts),
        }))
    }

    /// Where [`Self::check_ports`] reads the node's listeners (default `/proc/net`; a test
    /// names `/proc/<pid>/net` of a process in its network namespace).
    pub fn set_net_proc(&mut self, dir: PathBuf) {
        self.net_proc = dir;
    }

    fn apply_state(
        &mut self,
        state: &State,
        ctx: &NodeContext,
        now: Instant,
    ) -> Result<Applied, ApplyError> {
        let view = self
            .renderer
            .view(state, ctx, self.running_view.as_ref())
            .map_err(ApplyError::View)?;
        // Break before make: a VIP that changes VRRP instance stays out of keepalived
        // until every node has dropped it from the old one.
        let decision = handover::decide(
            &self.handover,
            &self.renderer.placement(&view),
            self.vip_handover,
            now,
        );
        let view = if decision.held.is_empty() {
            view
        } else {
            self.renderer.hold_out(view, &decision.vips())
        };
        if let Some(done) = self.fast_path(&view, now) {
            self.handover_applied(&view, decision, now);
            self.running_view = Some(view);
            return Ok(done);
        }
        let desired = self.renderer.render(&view).map_err(ApplyError::Render)?;

        let proxy_step = match (&self.proxy, &desired.proxy) {
            (Some(slot), Some(text)) => {
                let runtime = match &self.running_view {
                    Some(old)
                        if slot.file_stale || slot.running.as_deref() != Some(text.as_str()) =>
                    {
                        self.renderer.runtime_diff(old, &view)
                    }
                    _ => None,
                };
                let runtime = runtime.filter(|_| slot.kind() == DaemonKind::Haproxy);
                let alive = slot.daemon.is_running();
                Some(if slot.file_stale && alive && slot.running.is_some() {
                    // HAProxy runs newer endpoints than `running`: text equality says
                    // nothing; the views do.
                    match runtime {
                        Some(cmds) => Step::Runtime(cmds),
                        None => Step::Reload,
                    }
                } else {
                    decide(slot.running.as_deref(), text, alive, runtime)
                })
            }
            _ => None,
        };
        let ka_step = decide(
            self.keepalived.running.as_deref(),
            &desired.keepalived,
            self.keepalived.daemon.is_running(),
            None,
        );

        // Rate limit reloads.
        let mut defer_until: Option<Instant> = None;
        let mut limit = |slot: &Slot, step: &Step| {
            if *step == Step::Reload {
                if let Some(t) = next_reload_at(slot.last_reload, self.min_reload_interval) {
                    if t > now {
                        defer_until = Some(defer_until.map_or(t, |d| d.max(t)));
                    }
                }
            }
        };
        if let (Some(slot), Some(step)) = (&self.proxy, &proxy_step) {
            limit(slot, step);
        }
        limit(&self.keepalived, &ka_step);
        if let Some(t) = defer_until {
            return Ok(Applied::Deferred(t));
        }

        // Check everything that will be installed before installing anything.
        let proxy_prep = match (&self.proxy, &proxy_step, &desired.proxy) {
            (Some(slot), Some(Step::Start | Step::Reload), Some(text)) => {
                self.check_ports(&view)?;
                Some(slot.prepare(text, &desired.files, &self.metrics)?)
            }
            _ => None,
        };
        let ka_prep = match ka_step {
            Step::Start | Step::Reload => Some(self.keepalived.prepare(
                &desired.keepalived,
                &ConfigFiles::default(),
                &self.metrics,
            )?),
            _ => None,
        };

        let metrics = self.metrics.clone();
        let mut proxy_outcome = None;
        if let (Some(slot), Some(step), Some(text)) =
            (self.proxy.as_mut(), proxy_step, desired.proxy.as_ref())
        {
            proxy_outcome = Some(run_step(
                slot,
                step,
                (text, &desired.files),
                proxy_prep,
                now,
                &metrics,
            )?);
        }
        // The health file keepalived tracks exists before keepalived ever runs.
        if let Some(slot) = self.proxy.as_mut() {
            slot.ensure_health()?;
        }
        let ka_outcome = match run_step(
            &mut self.keepalived,
            ka_step,
            (&desired.keepalived, &ConfigFiles::default()),
            ka_prep,
            now,
            &metrics,
        ) {
            Ok(o) => o,
            Err(e) => {
                if proxy_outcome.is_some_and(|o| o != SlotOutcome::Unchanged) {
                    // The proxy took the new view, the applier keeps the old one: a
                    // runtime diff from it would be wrong. Without a view, the next
                    // apply compares texts and reloads if they differ.
                    self.running_view = None;
                }
                return Err(e);
            }
        };
        self.handover_applied(&view, decision, now);
        self.running_view = Some(view);
        self.last_good = Some(desired);
        Ok(Applied::Done {
            keepalived: ka_outcome,
            proxy: proxy_outcome,
        })
    }

    /// The fast path: both daemons run, nothing but endpoints changed (or nothing at
    /// all), and the proxy is HAProxy: send the Runtime API commands and stop there,
    /// without rendering, comparing or writing ~20 MB of config for a 10,000-Service
    /// node. The file follows later ([`Self::sync_proxy_file`]). `None`: take the full
    /// path (which also retries a Runtime API failure and falls back to a reload).
    fn fast_path(&mut self, view: &R::View, now: Instant) -> Option<Applied> {
        let old = self.running_view.as_ref()?;
        let proxy = self.proxy.as_mut()?;
        let ready = |s: &Slot| s.running.is_some() && s.daemon.is_running();
        if proxy.kind() != DaemonKind::Haproxy
            || !ready(proxy)
            || !ready(&self.keepalived)
            || !self.renderer.same_outside_proxy(old, view)
        {
            return None;
        }
        let cmds = self.renderer.runtime_diff(old, view)?;
        let outcome = if cmds.is_empty() {
            SlotOutcome::Unchanged
        } else {
            if let Err(e) = proxy.daemon.runtime(&cmds) {
                tracing::warn!(daemon = %proxy.kind(), error = %e, "Runtime API update failed; taking the full path");
                return None;
            }
            self.metrics.runtime_api_updates.inc();
            proxy.failure = None;
            proxy.file_stale = true;
            proxy.last_runtime = Some(now);
            tracing::info!(daemon = %proxy.kind(), commands = cmds.len(), "endpoints updated over the Runtime API, no reload");
            SlotOutcome::Runtime
        };
        Some(Applied::Done {
            keepalived: SlotOutcome::Unchanged,
            proxy: Some(outcome),
        })
    }

    /// Write the proxy config file from the running view if the fast path left it
    /// behind, once `quiet` has passed since the last Runtime API update, or at once if
    /// the proxy is down (a restart must start from current endpoints). Returns whether
    /// it wrote. Errors are logged; the next call tries again.
    pub fn sync_proxy_file(&mut self, now: Instant, quiet: Duration) -> bool {
        let Some(proxy) = self.proxy.as_mut() else {
            return false;
        };
        let due = proxy
            .last_runtime
            .is_none_or(|t| now.saturating_duration_since(t) >= quiet);
        if !proxy.file_stale
            || (!due && proxy.daemon.is_running())
            || self.sync_retry_at.is_some_and(|t| now < t)
        {
            return false;
        }
        // A failure below is retried in a second, not on every tick.
        self.sync_retry_at = Some(now + FILE_SYNC_QUIET);
        let Some(view) = self.running_view.as_ref() else {
            return false;
        };
        let desired = match self.renderer.render(view) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "could not render the proxy config to bring its file up to date");
                return false;
            }
        };
        let Some(text) = desired.proxy.as_deref() else {
            return false;
        };
        if let Err(e) = proxy.write_live(text, &desired.files) {
            tracing::error!(error = %e, "could not write the proxy config file after Runtime API updates");
            return false;
        }
        proxy.running = Some(text.to_string());
        tracing::debug!(daemon = %proxy.kind(), "proxy config file brought up to date with the Runtime API updates");
        self.last_good = Some(desired);
        self.sync_retry_at = None;
        true
    }

    /// Supervise both children (after bringing a stale proxy config file up to date).
    pub fn supervise(&mut self, now: Instant) {
        self.sync_proxy_file(now, FILE_SYNC_QUIET);
        let m = self.metrics.clone();
        if let Some(p) = self.proxy.as_mut() {
            let stale = p.file_stale;
            let restarted = p.supervise(now, &m);
            if restarted && self.last_error.is_some() {
                // The last apply failed (e.g. on this daemon's start): now that it runs,
                // apply again at once rather than at the caller's next retry.
                self.wants_apply = true;
            }
            if restarted && stale {
                // The file could not be brought up to date first: the proxy now runs
                // the file's older endpoints. Forget the view (the file's text is what
                // runs) and have the caller apply again, which reloads.
                tracing::warn!(daemon = %p.kind(), "proxy restarted from a config file older than its endpoints; applying again");
                p.file_stale = false;
                self.running_view = None;
                self.wants_apply = true;
            }
        }
        if self.keepalived.supervise(now, &m) && self.last_error.is_some() {
            self.wants_apply = true;
        }
    }

    /// Stop keepalived (first, at shutdown).
    pub fn stop_keepalived(&mut self, grace: Duration) {
        self.keepalived.stop(grace);
    }
    /// Send keepalived its `SIGTERM` now ([`Slot::begin_stop`]); [`Applier::stop_keepalived`]
    /// waits for it to exit.
    pub fn begin_stop_keepalived(&mut self) {
        self.keepalived.begin_stop();
    }
    /// Stop the proxy (after the VIPs are gone).
    pub fn stop_proxy(&mut self, grace: Duration) {
        if let Some(p) = self.proxy.as_mut() {
            p.stop(grace);
        }
    }
}

fn run_step(
    slot: &mut Slot,
    step: Step,
    (text, files): (&str, &ConfigFiles),
    prep: Option<Prepared>,
    now: Instant,
    metrics: &Metrics,
) -> Result<SlotOutcome, ApplyError> {
    let kind = slot.kind();
    match step {
        // Alive and installed with this very text (see `decide`): it runs it.
        Step::Unchanged => {
            slot.failure = None;
            Ok(SlotOutcome::Unchanged)
        }
        // No commands: HAProxy already runs these endpoints (fast path); only the file
        // lags, and sending nothing is a no-op.
        Step::Runtime(cmds) => match slot.daemon.runtime(&cmds) {
            Ok(()) => {
                if !cmds.is_empty() {
                    metrics.runtime_api_updates.inc();
                }
                slot.write_live(text, files)?;
                slot.running = Some(text.to_string());
                slot.failure = None;
                tracing::info!(daemon = %kind, commands = cmds.len(), "endpoints updated over the Runtime API, no reload");
                Ok(SlotOutcome::Runtime)
            }
            Err(e) => {
                tracing::warn!(daemon = %kind, error = %e, "Runtime API update failed; reloading instead");
                let prep = slot.prepare(text, files, metrics)?;
                reload_with(slot, (text, files), prep, now, metrics)
            }
        },
        Step::Start => {
            let prep = prep.expect("prepared");
            slot.install(prep, files)?;
            slot.running = Some(text.to_string());
            slot.start(now, metrics)?;
            Ok(SlotOutcome::Started)
        }
        Step::Reload => reload_with(slot, (text, files), prep.expect("prepared"), now, metrics),
    }
}

fn reload_with(
    slot: &mut Slot,
    (text, files): (&str, &ConfigFiles),
    prep: Prepared,
    now: Instant,
    metrics: &Metrics,
) -> Result<SlotOutcome, ApplyError> {
    let kind = slot.kind();
    let was_stale = slot.file_stale;
    let good_files = slot.running_files.clone();
    slot.install(prep, files)?;
    slot.last_reload = Some(now);
    match slot.daemon.reload() {
        Ok(()) => {
            metrics.reload(kind, true);
            slot.running = Some(text.to_string());
            slot.failure = None;
            tracing::info!(daemon = %kind, "reloaded");
            Ok(SlotOutcome::Reloaded)
        }
        Err(e) => {
            metrics.reload(kind, false);
            slot.failure = Some(format!("reload failed: {}", slot.reason(&e)));
            // Put the last good config back on disk so a restart starts from it.
            if let Some(good) = slot.running.clone() {
                let _ = slot.write_live(&good, &good_files);
                // The old worker still serves the Runtime API updates `good` lacks.
                slot.file_stale = was_stale;
            }
            Err(e.into())
        }
    }
}

/// The renderer stand-in the integration tests use too (a `#[path]` inside `mod tests`
/// would be looked up under `src/apply/tests/`).
#[cfg(test)]
#[path = "../tests/support/eps.rs"]
mod test_eps;

#[cfg(test)]
mod tests {
    use super::*;

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
        fn view(&self, s: &State, _: &NodeContext, _: Option<&String>) -> Result<String, String> {
            Ok(s.to_json())
        }
        fn render(&self, v: &String) -> Result<Desired, String> {
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
        let state = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
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
        let state = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
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
        let state = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
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
        let state = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
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
        ) -> Result<Placement, String> {
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
        fn render(&self, v: &Placement) -> Result<Desired, String> {
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
        let state = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
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
}
