//! The two watcher threads of the apply: the proxy's health file (keepalived's
//! `track_file`), set unhealthy the moment the proxy's process is gone, and keepalived's
//! exit guard, which deletes its VIPs the moment its process is gone. Both run whatever
//! the control loop is doing.

use crate::daemons::DaemonKind;
use crate::vip::AddrOps;
use k8slb_common::fs::write_atomic;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Mutex, Weak};
use std::time::Duration;

use super::ApplyError;

/// The health file keepalived tracks for a daemon: `0\n` healthy, `1\n` not.
#[derive(Debug)]
pub(super) struct HealthFile {
    pub(super) path: PathBuf,
    /// What the file holds (as far as we wrote it); `None`: not written yet.
    pub(super) written: Option<bool>,
    /// The process whose death makes the file say unhealthy at once (the watcher
    /// thread), set while it is confirmed running.
    pub(super) watched: Option<u32>,
    /// How many times the watcher thread has looked (tests wait for it to have looked
    /// rather than sleeping).
    pub(super) looks: u64,
}

/// How often the watcher thread looks at the proxy's process.
pub const HEALTH_WATCH_EVERY: Duration = Duration::from_millis(20);

/// The health file's own watcher: the moment the watched proxy process is gone, the
/// file says unhealthy and keepalived moves the VIPs, even while the control loop is
/// busy (a `haproxy -c` of a 10,000-Service config takes seconds). The control loop
/// still reaps and restarts the daemon. Ends when the slot is dropped.
pub(super) fn watch_health(h: Weak<Mutex<HealthFile>>, kind: DaemonKind) {
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
pub(super) struct ExitGuard {
    /// The keepalived process (the actor's child), while it is confirmed running.
    pub(super) watched: Option<u32>,
    /// The last process found gone: never watched again (the control loop may refresh
    /// the watch before it reaps the dead child).
    pub(super) gone: Option<u32>,
    /// The VIPs of the keepalived config applied last.
    pub(super) vips: BTreeSet<IpAddr>,
}

impl ExitGuard {
    pub(super) fn watch(&mut self, pid: Option<u32>) {
        self.watched = pid.filter(|p| Some(*p) != self.gone);
    }
}

/// keepalived's exit watcher: every [`HEALTH_WATCH_EVERY`], if the watched keepalived
/// process is gone, its VIPs are deleted from this node at once (it could not remove
/// them itself, and a backup takes them over within three advert intervals). Ends when
/// the slot is dropped.
pub(super) fn watch_exit(g: Weak<Mutex<ExitGuard>>, mut ops: Box<dyn AddrOps>) {
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
        let vips = &g.vips;
        let select = |held: &[crate::vip::Addr]| -> Vec<crate::vip::Addr> {
            held.iter()
                .filter(|a| vips.contains(&a.ip()))
                .cloned()
                .collect()
        };
        match crate::vip::delete_selected(ops.as_mut(), select) {
            Ok(done) => {
                tracing::warn!(
                    pid,
                    vips = %done.list(),
                    count = done.removed.len(),
                    "keepalived process gone; removed its VIPs from this node at once"
                );
                for (a, e) in done.failed {
                    tracing::error!(pid, vip = %a.net, error = %e, "keepalived process gone; could not remove a VIP");
                }
            }
            Err(e) => {
                tracing::error!(pid, error = %e, "keepalived process gone; could not list addresses to remove its VIPs")
            }
        }
    }
}

impl HealthFile {
    pub(super) fn set(&mut self, healthy: bool) -> Result<(), ApplyError> {
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
