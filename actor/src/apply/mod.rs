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

mod decision;
mod health;
mod slot;
#[cfg(test)]
mod tests;

pub use decision::{decide, next_reload_at, Applied, SlotOutcome, Step};
pub use health::HEALTH_WATCH_EVERY;
use health::{watch_exit, ExitGuard};
pub use slot::Slot;
use slot::{run_step, Prepared};

use crate::admin::Metrics;
use crate::daemons::{Daemon, DaemonError, DaemonKind};
use crate::handover::{self, Instance, Memory, Placement};
use crate::ports::{self, Transport};
use crate::quarantine::{self, Found, Quarantine};
use crate::render_error::RenderError;
use crate::staged::{ConfigFiles, StageError};
use crate::view::ViewError;
use crate::vip::{AddrOps, VipError};
use k8slb_common::names::{IfName, PoolName};
use k8slb_common::owners;
use k8slb_common::problem::ObjRef;
use k8slb_common::state::State;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
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
    ) -> Result<Self::View, ViewError>;
    fn render(&self, view: &Self::View) -> Result<Desired, RenderError>;
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
    /// Why the proxy of `view` could not start under this node's open-files limit (its
    /// checker does not open sockets, so it passes such a config), if it could not
    /// ([`crate::view::NodeView::fd_shortfall`]). The default, `None`, checks nothing.
    fn fd_shortfall(&self, view: &Self::View) -> Option<String> {
        let _ = view;
        None
    }
}

/// How long the proxy config file may lag behind endpoints applied over the Runtime API
/// before [`Applier::supervise`] writes it (sooner if the proxy must restart).
pub const FILE_SYNC_QUIET: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("view: {0}")]
    View(#[from] ViewError),
    #[error("render: {0}")]
    Render(#[from] RenderError),
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
    /// Where the node's listeners are read ([`Self::check_node`]).
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
    /// The VIPs the proxy serves now, which BGP mode announces ([`crate::frr`]): those
    /// its running config listens on, while it runs and no failure of it stands (an
    /// exit, a failed start or reload). `None`: no proxy (kubeproxy: kube-proxy serves
    /// every VIP).
    pub fn serving_vips(&self) -> Option<BTreeSet<IpAddr>> {
        let p = self.proxy.as_ref()?;
        if !p.daemon().is_running() || p.failure.is_some() {
            return Some(BTreeSet::new());
        }
        Some(
            self.running_view
                .as_ref()
                .map(|v| {
                    self.renderer
                        .listens(v)
                        .into_iter()
                        .map(|(a, _)| a.ip())
                        .collect()
                })
                .unwrap_or_default(),
        )
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
        // A culprit that passes alone was refused together with others; when the
        // refusal is the open-files count (which quotes no object), that is its reason.
        let shared = match &refused {
            ApplyError::Daemon(DaemonError::Check { output, .. })
                if output.starts_with(crate::view::FD_SHORTFALL) =>
            {
                quarantine::first_error_line(output).to_string()
            }
            _ => String::new(),
        };
        let errors = culprits
            .iter()
            .map(|c| {
                let e = self.culprit_error(state, ctx, &all, c);
                (c.clone(), if e.is_empty() { shared.clone() } else { e })
            })
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
        if let Err(e) = self.check_node(&view) {
            return Err(match e {
                ApplyError::Daemon(DaemonError::Check { output, .. }) => output,
                e => e.to_string(),
            });
        }
        let d = self.renderer.render(&view).map_err(|e| e.to_string())?;
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

    /// Refuses, as the proxy's checker would if it bound, a view whose proxy could not
    /// start on this node: it needs more open files than the limit allows
    /// ([`NodeRenderer::fd_shortfall`]), or it listens on a port another program of this
    /// node holds on every address ([`crate::ports`]). The reload would fail for the
    /// whole config. A proxy refusal, so the quarantine finds the objects that ask for it.
    fn check_node(&self, view: &R::View) -> Result<(), ApplyError> {
        let Some(slot) = &self.proxy else {
            return Ok(());
        };
        if let Some(why) = self.renderer.fd_shortfall(view) {
            return Err(ApplyError::Daemon(DaemonError::Check {
                daemon: slot.kind(),
                output: why,
            }));
        }
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

    /// Where [`Self::check_node`] reads the node's listeners (default `/proc/net`; a test
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
        let (view, decision) = self.placed_view(state, ctx, now)?;
        if let Some(done) = self.fast_path(&view, now) {
            self.handover_applied(&view, decision, now);
            self.running_view = Some(view);
            return Ok(done);
        }
        let desired = self.renderer.render(&view)?;
        let proxy_step = self.proxy_step(&view, &desired);
        let ka_step = decide(
            self.keepalived.running.as_deref(),
            &desired.keepalived,
            self.keepalived.daemon.is_running(),
            None,
        );
        if let Some(t) = self.reload_deferred(proxy_step.as_ref(), &ka_step, now) {
            return Ok(Applied::Deferred(t));
        }
        // Check everything that will be installed before installing anything.
        let proxy_prep = self.prepare_proxy(&view, &desired, proxy_step.as_ref())?;
        let ka_prep = match ka_step {
            Step::Start | Step::Reload => Some(self.keepalived.prepare(
                &desired.keepalived,
                &ConfigFiles::default(),
                &self.metrics,
            )?),
            _ => None,
        };
        let (ka_outcome, proxy_outcome) =
            self.run_steps(&desired, (proxy_step, proxy_prep), (ka_step, ka_prep), now)?;
        self.handover_applied(&view, decision, now);
        self.running_view = Some(view);
        self.last_good = Some(desired);
        Ok(Applied::Done {
            keepalived: ka_outcome,
            proxy: proxy_outcome,
        })
    }

    /// This node's view of `state`, and the handover decision on it: break before make,
    /// a VIP that changes VRRP instance stays out of keepalived (held out of the view)
    /// until every node has dropped it from the old one.
    fn placed_view(
        &self,
        state: &State,
        ctx: &NodeContext,
        now: Instant,
    ) -> Result<(R::View, handover::Decision), ApplyError> {
        let view = self.renderer.view(state, ctx, self.running_view.as_ref())?;
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
        Ok((view, decision))
    }

    /// What to do with the proxy's rendered config (`None`: no proxy): Runtime API
    /// commands when only endpoints changed (HAProxy), else [`decide`] on the texts.
    fn proxy_step(&self, view: &R::View, desired: &Desired) -> Option<Step> {
        let (Some(slot), Some(text)) = (&self.proxy, &desired.proxy) else {
            return None;
        };
        let runtime = match &self.running_view {
            Some(old) if slot.file_stale || slot.running.as_deref() != Some(text.as_str()) => {
                self.renderer.runtime_diff(old, view)
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

    /// The rate limit on reloads: the latest instant a reload among the steps may come
    /// (`None`: none has to wait).
    fn reload_deferred(
        &self,
        proxy_step: Option<&Step>,
        ka_step: &Step,
        now: Instant,
    ) -> Option<Instant> {
        let wait = |slot: &Slot, step: &Step| {
            if *step != Step::Reload {
                return None;
            }
            next_reload_at(slot.last_reload, self.min_reload_interval).filter(|t| *t > now)
        };
        let proxy = match (&self.proxy, proxy_step) {
            (Some(slot), Some(step)) => wait(slot, step),
            _ => None,
        };
        proxy
            .into_iter()
            .chain(wait(&self.keepalived, ka_step))
            .max()
    }

    /// Stage and check the proxy's config and files when `step` installs them (the ports
    /// it listens on free first).
    fn prepare_proxy(
        &self,
        view: &R::View,
        desired: &Desired,
        step: Option<&Step>,
    ) -> Result<Option<Prepared>, ApplyError> {
        match (&self.proxy, step, &desired.proxy) {
            (Some(slot), Some(Step::Start | Step::Reload), Some(text)) => {
                self.check_node(view)?;
                Ok(Some(slot.prepare(text, &desired.files, &self.metrics)?))
            }
            _ => Ok(None),
        }
    }

    /// Run the checked steps: the proxy's, then keepalived's (its health file exists
    /// before keepalived ever runs). Returns keepalived's and the proxy's outcomes.
    fn run_steps(
        &mut self,
        desired: &Desired,
        (proxy_step, proxy_prep): (Option<Step>, Option<Prepared>),
        (ka_step, ka_prep): (Step, Option<Prepared>),
        now: Instant,
    ) -> Result<(SlotOutcome, Option<SlotOutcome>), ApplyError> {
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
        let ka_outcome = run_step(
            &mut self.keepalived,
            ka_step,
            (&desired.keepalived, &ConfigFiles::default()),
            ka_prep,
            now,
            &metrics,
        )
        .inspect_err(|_| {
            if proxy_outcome.is_some_and(|o| o != SlotOutcome::Unchanged) {
                // The proxy took the new view, the applier keeps the old one: a
                // runtime diff from it would be wrong. Without a view, the next
                // apply compares texts and reloads if they differ.
                self.running_view = None;
            }
        })?;
        Ok((ka_outcome, proxy_outcome))
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

/// The renderer stand-in the integration tests use too (a `#[path]` inside `mod tests`
/// would be looked up under `src/apply/tests/`).
#[cfg(test)]
#[path = "../../tests/support/eps.rs"]
mod test_eps;
