//! One daemon's lifecycle under the pipeline and the supervisor: its config staged,
//! checked and installed with the files it names, started, reloaded, supervised and
//! stopped ([`Slot`]), and one decided [`Step`] carried out on it ([`run_step`]).

use crate::admin::Metrics;
use crate::daemons::{Daemon, DaemonError, DaemonKind};
use crate::staged::{ConfigFiles, Staged};
use crate::supervise::{Action, Restarter};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::decision::*;
use super::health::*;
use super::ApplyError;

/// One daemon under the pipeline and the supervisor.
pub struct Slot {
    pub(super) daemon: Box<dyn Daemon>,
    /// The config text the daemon runs now (the file at `config_path`).
    pub(super) running: Option<String>,
    pub(super) last_reload: Option<Instant>,
    pub(super) restarter: Restarter,
    /// Shared with a watcher thread (see [`watch_health`]).
    pub(super) health: Option<Arc<Mutex<HealthFile>>>,
    /// keepalived only, once [`Applier::watch_keepalived_exit`] ran: shared with the
    /// thread that removes its VIPs the moment its process is gone (see [`watch_exit`]).
    pub(super) exit_guard: Option<Arc<Mutex<ExitGuard>>>,
    /// The daemon runs endpoints newer than `running` and the file on disk (set by the
    /// fast path): `running` may not be compared with a candidate until the file is
    /// written again ([`Applier::supervise`], or the next apply that renders).
    pub(super) file_stale: bool,
    pub(super) last_runtime: Option<Instant>,
    /// Why the daemon does not run the installed config (a failed start or reload, an
    /// exit), until a start, reload or Runtime API update succeeds. Readiness says it.
    pub(super) failure: Option<String>,
    /// The files `running` names, as installed with it.
    pub(super) running_files: ConfigFiles,
}

/// A candidate checked in a temporary file next to the live one, with the files it
/// names staged.
pub(super) struct Prepared {
    pub(super) tmp: tempfile::NamedTempFile,
    pub(super) staged: Option<Staged>,
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
    pub(super) fn watch_exit(&self) {
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
    pub(super) fn reason(&self, e: &DaemonError) -> String {
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
    pub(super) fn health_looks(&self) -> u64 {
        self.health
            .as_ref()
            .map_or(0, |h| h.lock().unwrap_or_else(|p| p.into_inner()).looks)
    }

    /// Write the health file (if any); an error is logged and returned. Healthy: the
    /// daemon's process is watched from now on; unhealthy: no longer.
    pub(super) fn set_health(&mut self, healthy: bool) -> Result<(), ApplyError> {
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
    pub(super) fn health_state(&self) -> Option<Option<bool>> {
        self.health
            .as_ref()
            .map(|h| h.lock().unwrap_or_else(|p| p.into_inner()).written)
    }

    /// Before keepalived starts: the health file exists and says whether the daemon runs.
    pub(super) fn ensure_health(&mut self) -> Result<(), ApplyError> {
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

    pub(super) fn write_tmp(&self, text: &str) -> Result<tempfile::NamedTempFile, ApplyError> {
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
    pub(super) fn prepare(
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
    pub(super) fn stage_and_check(
        &self,
        text: &str,
        files: &ConfigFiles,
    ) -> Result<Prepared, ApplyError> {
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
    pub(super) fn install(&mut self, p: Prepared, files: &ConfigFiles) -> Result<(), ApplyError> {
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
    pub(super) fn write_live(&mut self, text: &str, files: &ConfigFiles) -> Result<(), ApplyError> {
        files.write_live()?;
        let tmp = self.write_tmp(text)?;
        self.install(Prepared { tmp, staged: None }, files)
    }

    pub(super) fn start(&mut self, now: Instant, metrics: &Metrics) -> Result<(), DaemonError> {
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
    pub(super) fn unwatch(&mut self) {
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

pub(super) fn run_step(
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

pub(super) fn reload_with(
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
