//! `k8slb-actor run`: follow the state and keep this node's daemons in line with it.
//!
//! ```text
//! k8slb-actor run [--state configmap|file:<path>] [--namespace k8slb-system] --node <name>
//!     [--proxy haproxy|nginx|kubeproxy]
//!     [--interface <pool>=<ifname>]... [--templates <dir>] [--work-dir /var/lib/k8slb]
//!     [--admin-addr 0.0.0.0:9254] [--min-reload-interval-ms 1000] [--vip-handover-ms 2000]
//!     [--handover-wait-ms 3000]
//!     [--log-format plain|json] [--log-level 0-4]
//! ```
//!
//! The control loop is a plain thread (daemons and netlink are driven synchronously);
//! the admin server and signal handling run on tokio. Its decisions are the pure
//! [`crate::control::Control::step`]; [`control_loop`] is the driver that feeds it and
//! carries out its actions. Each tick (50 ms):
//!
//! - the state source is polled every 50 ms ([`crate::state_source`]): a file (inode,
//!   size, mtime, then contents, so an atomically replaced file is picked up), or the
//!   state ConfigMaps, followed by a kube watch on the tokio runtime; a state that fails
//!   to parse or decode is refused, and the previous one keeps running;
//! - a change is debounced (100 ms quiet, at most 1 s) and applied ([`crate::apply`]);
//!   after a successful apply the state is saved as `<work-dir>/last-state.json` (the
//!   first at once, later ones after [`crate::control::LAST_STATE_QUIET`] without changes, at most
//!   [`crate::control::LAST_STATE_MAX`] late), and at
//!   start, when the source is unavailable, the actor starts from it;
//! - dead children are restarted with backoff; every 2 s the held VIPs are observed;
//! - a state planned for another provider than `--proxy` is refused (logged once,
//!   `provider_mismatch` metric, `/readyz` 503 with the reason); what was applied last
//!   keeps running;
//! - when keepalived exits on its own (SIGKILL, OOM), the VIPs of the state are removed
//!   from this node at once, in the step that reaps it, before it is restarted: a
//!   backup takes them over, and they must not stay here too (issue 9).
//!
//! At start, before keepalived runs: leftovers of an earlier actor (pid files in the work
//! dir) are stopped, and stale VIPs are removed ([`crate::vip`]). On SIGTERM/SIGINT:
//! the VIPs this node holds are handed over ([`crate::leave`]: kept on `lo` while
//! keepalived stops with priority-0 adverts, until a peer's advert says it is master, at
//! most `--handover-wait-ms`; at once with no peer), our VIPs are removed, then the
//! proxy is stopped gracefully; exit 0.
//!
//! Everything (configs, pid files, sockets, last state) is under `--work-dir`, so several
//! actors can run on one machine in different network namespaces (`ip netns exec`).

use crate::admin::{self, AdminState, Health, Metrics};
use crate::apply::{Applied, Applier, NodeContext, NodeRenderer};
use crate::control::{self, Action, ApplyOutcome, Control, Input, Note, Poll, Supervised, Timing};
use crate::daemons::{self, Binaries, Daemon, Paths};
use crate::leave;
use crate::node_renderer::RealRenderer;
use crate::render::Renderer;
use crate::state_source::{self, ConfigMapOptions, ConfigMapSource, Source};
pub use crate::state_source::{FileSource, Polled};
use crate::view::{self, ViewOptions};
use crate::vip::{self, AddrOps, PoolNetwork};
use anyhow::Context;
use k8slb_common::fs::write_atomic;
use k8slb_common::names::{parse_interface, IfName, NodeName, PoolName};
use k8slb_common::report::{NodeReport, Refused};
use k8slb_common::state::{Provider, State};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where the state comes from: `file:<path>`, or `configmap` (the watcher's state
/// ConfigMaps in `--namespace`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateSource {
    File(PathBuf),
    ConfigMap,
}

impl std::str::FromStr for StateSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "configmap" {
            return Ok(StateSource::ConfigMap);
        }
        match s.split_once(':') {
            Some(("file", p)) if !p.is_empty() => Ok(StateSource::File(PathBuf::from(p))),
            _ => Err(format!(
                "unsupported state source {s:?}: expected configmap or file:<path>"
            )),
        }
    }
}

pub use k8slb_common::logging::LogFormat;

/// Arguments of `k8slb-actor run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Where the state comes from: `configmap` (the ConfigMaps `k8slb-state*` that the
    /// watcher publishes in `--namespace`; in-cluster config or KUBECONFIG) or
    /// `file:<path>` (re-read when the file changes or is atomically replaced).
    #[arg(long, env = "K8SLB_STATE", default_value = "configmap")]
    pub state: StateSource,
    /// Namespace of the state ConfigMaps (`--state configmap`).
    #[arg(long, env = "K8SLB_NAMESPACE", default_value = state_source::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// This node's name (the Node's metadata.name), as in the state's `nodes`.
    #[arg(long, env = "K8SLB_NODE_NAME")]
    pub node: NodeName,
    /// Which proxy serves the VIPs; must match the watcher's (a state planned for
    /// another proxy is refused: not rendered, and /readyz says why).
    #[arg(long, env = "PROXY", default_value = "haproxy", value_parser = view::provider_arg())]
    pub proxy: Provider,
    /// Interface of a pool without `interface` in the config, instead of detection by
    /// longest-prefix match. Repeatable: `--interface default=eth1`.
    #[arg(long = "interface", value_parser = parse_interface)]
    pub interfaces: Vec<(PoolName, IfName)>,
    /// Directory of templates overriding the embedded ones.
    #[arg(long, env = "K8SLB_TEMPLATES")]
    pub templates: Option<PathBuf>,
    /// Where configs, pid files, sockets and the last applied state live.
    #[arg(long, env = "K8SLB_WORK_DIR", default_value = "/var/lib/k8slb")]
    pub work_dir: PathBuf,
    /// Where the certificates of TLS Secrets are for the routes' HTTPS listeners
    /// (`<dir>/<stem>.pem`, chain then key, 0600): the standalone watcher's
    /// `--certs-out`. Keep it on a tmpfs.
    #[arg(long, env = "K8SLB_CERTS_DIR", default_value = "/run/k8slb/certs")]
    pub certs_dir: PathBuf,
    /// Where the BGP peers' password Secrets are, one directory per Secret holding its
    /// `password` file (a Secret volume's layout): with `--state configmap` the actor
    /// keeps it in step with the `kubernetes.io/basic-auth` Secrets of its namespace.
    /// Keep it on a tmpfs.
    #[arg(
        long,
        env = "K8SLB_BGP_SECRETS_DIR",
        default_value = "/run/k8slb/bgp-secrets"
    )]
    pub bgp_secrets_dir: PathBuf,
    /// Address of /livez, /readyz and /metrics.
    #[arg(long, env = "K8SLB_ADMIN_ADDR", default_value = "0.0.0.0:9254")]
    pub admin_addr: SocketAddr,
    /// Minimum time between two reloads of one daemon, in milliseconds.
    #[arg(long, env = "K8SLB_MIN_RELOAD_INTERVAL_MS", default_value_t = 1000)]
    pub min_reload_interval_ms: u64,
    /// Hand-over hold-down, in milliseconds: a VIP that moves to another VRRP instance
    /// (its serving node changed, or a released IP went to a Service served elsewhere)
    /// is in no instance for this long first, so the node that still has it in the old
    /// instance drops it before any node adds it to the new one. 0 disables it.
    #[arg(long, env = "K8SLB_VIP_HANDOVER_MS", default_value_t = 2000)]
    pub vip_handover_ms: u64,
    /// On SIGTERM, how long to wait at most, in milliseconds, for peers to take over the
    /// VIPs this node holds (a peer's VRRP advert as master) before the daemons stop;
    /// meanwhile this node still serves them. With no peer in an instance it does not
    /// wait. 0: stop at once. Keep it, plus twice the stop grace (5 s), below the pod's
    /// terminationGracePeriodSeconds (30).
    #[arg(long, env = "K8SLB_HANDOVER_WAIT_MS", default_value_t = leave::DEFAULT_WAIT.as_millis() as u64)]
    pub handover_wait_ms: u64,
    /// On SIGTERM, how long to wait at most, in milliseconds, for this node's BGP routes
    /// (BGP-mode pools) to be withdrawn from every peer before the proxy stops.
    #[arg(long, env = "K8SLB_BGP_WITHDRAW_WAIT_MS", default_value_t = crate::frr::DEFAULT_WITHDRAW_WAIT.as_millis() as u64)]
    pub bgp_withdraw_wait_ms: u64,
    /// Log level: k8slb's 0 (off) to 4 (debug), a level name (error, warn, info, debug,
    /// trace) or a tracing filter (`info,k8slb_actor=debug`).
    #[arg(long, env = "LOG_LEVEL", default_value = "3")]
    pub log_level: String,
    /// Log format: `plain` (one line per event, colours only on a terminal) or `json`
    /// [default: plain].
    #[arg(long, env = "LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// The actor's former name of `LOG_FORMAT` (deprecated; `LOG_FORMAT` wins).
    #[arg(long = "k8slb-log-format", env = "K8SLB_LOG_FORMAT", hide = true)]
    pub deprecated_log_format: Option<LogFormat>,
    /// keepalived binary.
    #[arg(long, env = "K8SLB_KEEPALIVED", default_value = "keepalived")]
    pub keepalived_bin: PathBuf,
    /// haproxy binary.
    #[arg(long, env = "K8SLB_HAPROXY", default_value = "haproxy")]
    pub haproxy_bin: PathBuf,
    /// nginx binary.
    #[arg(long, env = "K8SLB_NGINX", default_value = "nginx")]
    pub nginx_bin: PathBuf,
}

/// `LOG_FORMAT`, else the deprecated `K8SLB_LOG_FORMAT`, else plain; then the shared
/// [`k8slb_common::logging::init_logging`], and a line if the deprecated name was used.
fn init_logging(args: &RunArgs) -> anyhow::Result<()> {
    let format = args
        .log_format
        .or(args.deprecated_log_format)
        .unwrap_or_default();
    k8slb_common::logging::init_logging(format, &args.log_level)?;
    if let Some(old) = args.deprecated_log_format {
        if args.log_format.is_some() {
            tracing::warn!(ignored = %old, "K8SLB_LOG_FORMAT is deprecated and ignored: LOG_FORMAT is set");
        } else {
            tracing::warn!(format = %old, "K8SLB_LOG_FORMAT is deprecated: set LOG_FORMAT instead");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// state source

// ---------------------------------------------------------------------------------
// the control loop

/// Everything the control loop needs besides the applier.
/// How long keepalived and the proxy get to stop before `SIGKILL`.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

pub struct LoopConfig {
    pub node: NodeName,
    /// The provider this actor serves (`--proxy`): a state planned for another is refused.
    pub provider: Provider,
    pub paths: Paths,
    pub source: StateSource,
    pub forced_interfaces: BTreeMap<PoolName, IfName>,
    /// One iteration of the loop.
    pub tick: Duration,
    /// The periods and delays of [`Control`].
    pub timing: Timing,
    pub stop_grace: Duration,
    /// On SIGTERM, how long to wait at most for peers to take over this node's VIPs
    /// ([`crate::leave`]); zero: no hand-over.
    pub handover_wait: Duration,
    /// The TLS Secrets' certificate directory (`--certs-dir`): a change there (a
    /// certificate arrived, was renewed or removed) is applied like a new state.
    pub certs_dir: Option<PathBuf>,
    /// Told (once) when a state that names a TLS Secret's certificate is applied: the
    /// node certificate Secrets are watched only from then on, so an actor of an install
    /// variant without Ingresses (and without the RBAC to read Secrets) never asks.
    pub certs_wanted: Option<Arc<tokio::sync::Notify>>,
    /// Where the quarantined objects go after each apply (the Kubernetes mode with a
    /// proxy): the node report the watcher reads ([`crate::report`]).
    pub report: Option<crate::report::Reporter>,
    /// The `--templates` directory (its `frr.conf.tera`, if any, for BGP mode).
    pub templates: Option<PathBuf>,
    /// On SIGTERM, how long to wait at most for BGP routes to be withdrawn before the
    /// proxy stops ([`crate::frr::Bgp::withdraw`]).
    pub bgp_withdraw_wait: Duration,
    /// The BGP peers' password Secrets (`--bgp-secrets-dir`).
    pub bgp_secrets_dir: Option<PathBuf>,
    /// Told (once) when a state with a BGP peer's `passwordSecret` is applied: the
    /// password Secrets are watched only from then on (only the BGP variant may read them).
    pub bgp_secrets_wanted: Option<Arc<tokio::sync::Notify>>,
}

impl LoopConfig {
    pub fn new(node: NodeName, provider: Provider, paths: Paths, source: StateSource) -> Self {
        LoopConfig {
            node,
            provider,
            paths,
            source,
            forced_interfaces: BTreeMap::new(),
            tick: Duration::from_millis(50),
            timing: Timing::default(),
            stop_grace: STOP_GRACE,
            handover_wait: leave::DEFAULT_WAIT,
            certs_dir: None,
            certs_wanted: None,
            report: None,
            templates: None,
            bgp_withdraw_wait: crate::frr::DEFAULT_WITHDRAW_WAIT,
            bgp_secrets_dir: None,
            bgp_secrets_wanted: None,
        }
    }
}

/// This node's interfaces per pool and addresses, from netlink and the state.
///
/// Only the node's own addresses count: a VIP (of `state`, or in `vips`: those of the
/// last applied and the last saved state) and a host address inside a pool network are
/// never the reason an interface is chosen, nor a node address. Otherwise a running
/// node whose pool lost its `interface` kept finding the interface through the VIP
/// keepalived had put there, and after a restart (VIPs cleaned up) found none (issue 9).
/// keepalived 2.2 marks its addresses in no way netlink shows (no `IFA_PROTO`, no
/// label), so the state's VIPs are the marker.
pub fn node_context(
    state: &State,
    node: &NodeName,
    forced: &BTreeMap<PoolName, IfName>,
    addrs: &[vip::Addr],
    vips: &BTreeSet<IpAddr>,
) -> NodeContext {
    let pools = vip::pool_networks(&state.config.pools);
    let own: Vec<(String, ipnet::IpNet)> = addrs
        .iter()
        .filter(|a| {
            let ip = a.ip();
            !state.vips.contains_key(&ip)
                && !vips.contains(&ip)
                && !pools
                    .iter()
                    .any(|(_, p)| p.contains(ip) && a.net.prefix_len() == a.net.max_prefix_len())
        })
        .map(|a| (a.ifname.clone(), a.net))
        .collect();
    let mut interfaces = BTreeMap::new();
    for (name, pool) in &state.config.pools {
        let chosen = pool
            .interface
            .clone()
            .or_else(|| forced.get(name).cloned())
            .or_else(|| vip::detect_interface(pool.first, &own).and_then(|i| i.parse().ok()));
        if let Some(i) = chosen {
            interfaces.insert(name.clone(), i);
        }
    }
    let node_addresses = match state.nodes.get(node) {
        Some(n) if !n.addresses.is_empty() => n.addresses.clone(),
        _ => {
            let mut v: Vec<IpAddr> = own
                .iter()
                .map(|(_, n)| n.addr())
                .filter(|ip| !ip.is_loopback() && !pools.iter().any(|(_, p)| p.contains(*ip)))
                .filter(|ip| match ip {
                    IpAddr::V4(v) => !v.is_link_local(),
                    IpAddr::V6(v) => (v.segments()[0] & 0xffc0) != 0xfe80,
                })
                .collect();
            v.sort();
            v.dedup();
            v
        }
    };
    NodeContext {
        interfaces,
        node_addresses,
    }
}

/// Known VIPs (of the state and of the last applied state) and the node's own
/// addresses: the inputs of stale-VIP removal.
fn vip_sets(
    states: &[&State],
    node: &NodeName,
) -> (Vec<PoolNetwork>, BTreeSet<IpAddr>, BTreeSet<IpAddr>) {
    let mut pools = Vec::new();
    let mut known = BTreeSet::new();
    let mut keep = BTreeSet::new();
    for s in states {
        pools.extend(
            vip::pool_networks(&s.config.pools)
                .into_iter()
                .map(|(_, p)| p),
        );
        // A BGP-mode VIP is on `lo` of every LB node, not keepalived's: crate::frr
        // binds and unbinds it.
        known.extend(
            s.vips
                .iter()
                .filter(|(_, v)| s.config.pools.get(&v.pool).is_none_or(|p| p.mode.is_vrrp()))
                .map(|(ip, _)| *ip),
        );
        if let Some(n) = s.nodes.get(node) {
            keep.extend(n.addresses.iter().copied());
        }
    }
    (pools, known, keep)
}

fn remove_vips(ops: &mut dyn AddrOps, states: &[&State], node: &NodeName) {
    for a in delete_vips(ops, states, node).removed {
        tracing::info!(vip = %a.net, interface = %a.ifname, "removed VIP");
    }
}

/// Deletes the VIPs of `states` this node holds ([`vip::stale_vips`]); returns what was
/// done. Errors are logged.
fn delete_vips(ops: &mut dyn AddrOps, states: &[&State], node: &NodeName) -> vip::Deleted {
    let (pools, known, keep) = vip_sets(states, node);
    match vip::delete_selected(ops, |held| vip::stale_vips(&pools, held, &known, &keep)) {
        Ok(done) => {
            for (a, e) in &done.failed {
                tracing::error!(vip = %a.net, error = %e, "could not remove VIP");
            }
            done
        }
        Err(e) => {
            tracing::error!(error = %e, "could not list addresses");
            vip::Deleted::default()
        }
    }
}

/// keepalived exited on its own (SIGKILL, OOM, crash): it could not remove its VIPs,
/// and a backup stops hearing its adverts and takes them over, so they would be on two
/// nodes until the restarted keepalived drops them. They go now, before the restart
/// (the supervisor restarts it no sooner than the next tick, after its backoff); the
/// restarted keepalived starts as BACKUP and takes them back by VRRP if it should.
/// One line says which VIPs were removed (an empty list when none was held).
fn remove_vips_of_dead_keepalived(ops: &mut dyn AddrOps, states: &[&State], node: &NodeName) {
    let done = delete_vips(ops, states, node);
    tracing::warn!(
        vips = %done.list(),
        count = done.removed.len(),
        "keepalived exited; removed its VIPs from this node before restarting it"
    );
}

/// Did keepalived exit during this supervision step? It ran before and was reaped in
/// it. A stop on purpose (shutdown) happens outside the supervision step, and a restart
/// is never in the same step as the exit (the [`crate::supervise::Restarter`] waits
/// at least one backoff delay), so neither counts.
pub fn keepalived_exited(running_before: bool, running_after: bool) -> bool {
    running_before && !running_after
}

fn load_state(text: &str) -> Result<State, String> {
    State::from_json(text).map_err(|e| e.to_string())
}

/// The source of `cfg.source`. A ConfigMap source starts following at once on
/// `runtime` (the caller's tokio runtime).
pub fn open_source(
    source: &StateSource,
    client: Option<kube::Client>,
    opts: ConfigMapOptions,
    runtime: &tokio::runtime::Handle,
) -> anyhow::Result<Box<dyn Source>> {
    Ok(match source {
        StateSource::File(p) => Box::new(FileSource::new(p.clone())),
        StateSource::ConfigMap => {
            let client = client.context("a Kubernetes client is needed for --state configmap")?;
            Box::new(ConfigMapSource::spawn(client, opts, runtime))
        }
    })
}

fn save_last(path: &Path, s: &State) {
    if let Err(e) = write_atomic(path, s.to_json().as_bytes()) {
        tracing::error!(error = %e, path = %path.display(), "could not save the last applied state");
    }
}

/// The control loop; returns at shutdown, after keepalived, the VIPs and the proxy are
/// gone. A driver: every decision is [`Control::step`]'s; this feeds it the ticks, the
/// shutdown flag and the results of its actions, and carries the actions out.
pub fn control_loop<R: NodeRenderer>(
    cfg: LoopConfig,
    source: Box<dyn Source>,
    mut applier: Applier<R>,
    ops: &mut dyn AddrOps,
    shutdown: Arc<AtomicBool>,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) {
    let _span = tracing::info_span!("control", node = %cfg.node).entered();
    stop_leftovers(&cfg.paths);
    let last_saved: Option<State> = std::fs::read_to_string(cfg.paths.last_state())
        .ok()
        .and_then(|t| load_state(&t).ok());
    let mut control = Control::new(cfg.provider, cfg.timing.clone(), last_saved);
    let mut bgp = crate::frr::Bgp::new(
        cfg.node.clone(),
        crate::frr::runtime_dir(&cfg.paths.work_dir),
        cfg.templates.as_deref(),
        metrics.clone(),
    );
    if let Some(d) = &cfg.bgp_secrets_dir {
        bgp.set_secrets_dir(d.clone());
    }
    let mut driver = Driver {
        bgp,
        described: source.describe(),
        source,
        applier: &mut applier,
        ops,
        health,
        metrics,
        cfg: &cfg,
        certs_seen: cfg.certs_dir.as_deref().and_then(dir_modified),
    };
    loop {
        let now = Instant::now();
        let input = if shutdown.load(Ordering::Relaxed) {
            Input::Shutdown
        } else {
            driver.health.tick();
            Input::Tick
        };
        if driver.iterate(&mut control, input, now) == Flow::Exit {
            return;
        }
        std::thread::sleep(cfg.tick);
    }
}

/// When `dir` was last modified (None: it does not exist).
fn dir_modified(dir: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(dir).and_then(|m| m.modified()).ok()
}

/// Leftovers of an earlier actor of this work dir.
fn stop_leftovers(paths: &Paths) {
    let leftovers = [
        (paths.keepalived_pid(), paths.keepalived_conf()),
        (paths.haproxy_pid(), paths.haproxy_cfg()),
        (paths.nginx_pid(), paths.nginx_conf()),
    ];
    for (pid, conf) in &leftovers {
        if let Some(p) = daemons::stop_leftover(pid, conf, Duration::from_secs(3)) {
            tracing::warn!(pid = p, config = %conf.display(), "stopped a daemon left behind by an earlier actor");
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Exit,
}

/// Carries out [`Action`]s: the I/O side of the control loop.
struct Driver<'a, R: NodeRenderer> {
    /// BGP-mode pools ([`crate::frr`]): after every apply and supervision step.
    bgp: crate::frr::Bgp,
    source: Box<dyn Source>,
    described: String,
    applier: &'a mut Applier<R>,
    ops: &'a mut dyn AddrOps,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    cfg: &'a LoopConfig,
    /// The certificate directory's modification time when last looked at (it changes
    /// when a file is renamed into it or removed).
    certs_seen: Option<std::time::SystemTime>,
}

impl<R: NodeRenderer> Driver<'_, R> {
    /// One iteration: `input`, then the answer of each action that has one, until an
    /// action has none.
    fn iterate(&mut self, control: &mut Control, input: Input, now: Instant) -> Flow {
        let mut next = Some(input);
        while let Some(input) = next.take() {
            for action in control.step(input, now) {
                if action == Action::Exit {
                    return Flow::Exit;
                }
                if let Some(answer) = self.exec(action, now) {
                    debug_assert!(next.is_none(), "one answer per step");
                    next = Some(answer);
                }
            }
        }
        Flow::Continue
    }

    /// The node report for the watcher: what the proxy's checker refuses, and the BGP
    /// peers with a problem (sent only when it changed).
    fn report(&self, now: Instant) {
        let Some(r) = &self.cfg.report else {
            return;
        };
        let refused = self
            .applier
            .quarantine_errors()
            .iter()
            .map(|(object, error)| Refused {
                object: object.clone(),
                error: error.clone(),
            });
        r.set(
            NodeReport::new(&self.cfg.node, &self.cfg.provider.to_string(), refused)
                .with_bgp(self.bgp.problems(now)),
        );
    }

    /// Whether the certificate directory changed since the last look.
    fn certs_changed(&mut self) -> bool {
        let Some(dir) = self.cfg.certs_dir.as_deref() else {
            return false;
        };
        let now = dir_modified(dir);
        if now == self.certs_seen {
            return false;
        }
        self.certs_seen = now;
        tracing::debug!(dir = %dir.display(), "the certificate directory changed; applying again");
        true
    }

    /// Carry out `action`; its answer, if it has one.
    fn exec(&mut self, action: Action, now: Instant) -> Option<Input> {
        match action {
            Action::PollSource => return Some(Input::Polled(self.poll())),
            Action::RemoveStaleVips(states) => {
                remove_vips(self.ops, &refs(&states), &self.cfg.node);
            }
            Action::Apply { state, known_vips } => {
                return Some(Input::Applied(self.apply(state, known_vips, now)));
            }
            Action::Supervise => return Some(Input::Supervised(self.supervise(now))),
            Action::RemoveVipsOfDeadKeepalived(states) => {
                remove_vips_of_dead_keepalived(self.ops, &refs(&states), &self.cfg.node);
            }
            Action::SetReadiness(r) => self.health.set_readiness(r),
            Action::SetError(e) => self.health.set_error(e),
            Action::CountRefused => {
                self.metrics.state_refused.inc();
            }
            Action::SetProviderMismatch(p) => self.metrics.set_provider_mismatch(p),
            Action::SaveLastState(s) => save_last(&self.cfg.paths.last_state(), &s),
            Action::ObserveVips(s) => return self.observe_vips(&s).map(Input::Observed),
            Action::Log(note) => self.log(note),
            Action::HandOver(state) => {
                // BGP routes go first, while the proxy still serves: the routers move
                // new flows to the other nodes before anything here stops.
                self.bgp.withdraw(self.cfg.bgp_withdraw_wait);
                self.hand_over(&state)
            }
            Action::StopKeepalived => self.applier.stop_keepalived(self.cfg.stop_grace),
            Action::RemoveVips(states) => {
                remove_vips(self.ops, &refs(&states), &self.cfg.node);
                self.metrics.set_vips_held([]);
            }
            Action::StopProxy => {
                self.applier.stop_proxy(self.cfg.stop_grace);
                self.bgp.stop(self.ops, self.cfg.stop_grace);
            }
            Action::Exit => {}
        }
        None
    }

    /// [`Action::Apply`]: the health check learns the VIPs, the Secret fetchers wake if
    /// the state names Secrets, the applier applies the state with this node's context,
    /// then BGP follows what is served.
    fn apply(
        &mut self,
        state: Arc<State>,
        known_vips: BTreeSet<IpAddr>,
        now: Instant,
    ) -> ApplyOutcome {
        self.health.set_vips(
            known_vips
                .iter()
                .chain(state.vips.keys())
                .copied()
                .collect(),
        );
        self.wake_secret_fetchers(&state);
        let addrs = self.ops.addresses().unwrap_or_else(|e| {
            tracing::error!(error = %e, "could not list addresses");
            Vec::new()
        });
        let cfg = self.cfg;
        let ctx = node_context(
            &state,
            &cfg.node,
            &cfg.forced_interfaces,
            &addrs,
            &known_vips,
        );
        let outcome = match self.applier.apply(&state, &ctx, now) {
            Ok(Applied::Deferred(t)) => ApplyOutcome::Deferred(t),
            Ok(a) => ApplyOutcome::Done {
                changed: a.changed(),
                handover_until: self.applier.handover_until(),
            },
            Err(e) => ApplyOutcome::Failed(e.to_string()),
        };
        let serving = self.applier.serving_vips();
        self.bgp.update(
            state.clone(),
            ctx.node_addresses.clone(),
            serving.as_ref(),
            self.ops,
            now,
        );
        self.report(now);
        outcome
    }

    /// Wake the certificate fetcher when `state` uses certificates, the BGP Secret
    /// fetcher when a BGP peer names a password Secret.
    fn wake_secret_fetchers(&self, state: &State) {
        if let Some(w) = &self.cfg.certs_wanted {
            if !k8slb_common::certs::used_by(state).is_empty() {
                w.notify_one();
            }
        }
        if let Some(w) = &self.cfg.bgp_secrets_wanted {
            let named = state
                .config
                .bgp
                .as_ref()
                .is_some_and(|b| b.peers.iter().any(|p| p.password_secret.is_some()));
            if named {
                w.notify_one();
            }
        }
    }

    /// [`Action::Supervise`]: restart what died, report, and tell the control loop what
    /// changed.
    fn supervise(&mut self, now: Instant) -> Supervised {
        let keepalived_ran = self.applier.keepalived().daemon().is_running();
        self.applier.supervise(now);
        self.bgp
            .supervise(self.applier.serving_vips().as_ref(), self.ops, now);
        self.report(now);
        let keepalived_runs = self.applier.keepalived().daemon().is_running();
        let certs_changed = self.certs_changed();
        Supervised {
            keepalived_exited: keepalived_exited(keepalived_ran, keepalived_runs),
            wants_apply: self.applier.wants_apply() || certs_changed,
            not_ready: match (self.applier.not_ready(), self.bgp.not_ready()) {
                (Some(a), Some(b)) => Some(format!("{a}; {b}")),
                (a, b) => a.or(b),
            },
        }
    }

    /// [`Action::ObserveVips`]: the VIPs of `state` this node holds (`None` if the
    /// addresses cannot be listed), also as a metric.
    fn observe_vips(&mut self, state: &State) -> Option<BTreeSet<IpAddr>> {
        let held = self.ops.addresses().ok()?;
        let o = vip::observe(&held, &state.vips);
        self.metrics.set_vips_held(
            o.iter()
                .map(|(ip, (pool, _))| (pool.as_str(), ip.to_string())),
        );
        Some(o.keys().copied().collect())
    }

    /// [`Action::HandOver`]: see [`crate::leave`]. Every failure is logged and ends the
    /// hand-over early; the shutdown goes on.
    fn hand_over(&mut self, state: &State) {
        if self.cfg.handover_wait.is_zero() || !self.applier.keepalived().daemon().is_running() {
            return;
        }
        let addrs = match self.ops.addresses() {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "could not list addresses; no hand-over");
                return;
            }
        };
        let held = vip::observe(&addrs, &state.vips);
        let plan = leave::plan(state, &self.cfg.node, &held.keys().copied().collect());
        if !plan.alone.is_empty() {
            tracing::info!(vips = ?plan.alone, "no peer can take these VIPs over; they go at once");
        }
        if plan.is_empty() {
            return;
        }
        // The interfaces that carry the VIPs, for the VRRP multicast groups.
        let interfaces: Vec<(k8slb_common::state::Family, u32)> = addrs
            .iter()
            .filter(|a| plan.linger.contains(&a.ip()))
            .map(|a| (k8slb_common::state::Family::of(&a.ip()), a.index))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut listener = match leave::listen::Listener::open(&interfaces) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, category = e.category(), "cannot hear VRRP adverts; no hand-over");
                return;
            }
        };
        let own: BTreeSet<IpAddr> = addrs.iter().map(|a| a.ip()).collect();
        for ip in &plan.linger {
            let net = ipnet::IpNet::from(*ip);
            if let Err(e) = self.ops.add("lo", net) {
                tracing::error!(vip = %ip, error = %e, "could not keep the VIP on lo");
            }
        }
        let start = Instant::now();
        tracing::info!(
            vips = ?plan.linger,
            instances = plan.awaited.len(),
            bound_ms = self.cfg.handover_wait.as_millis() as u64,
            "handing the VIPs over: still serving them, waiting for a peer to become master"
        );
        // keepalived's priority-0 adverts go out at once; its exit (about a second later)
        // is waited for by StopKeepalived, after the hand-over.
        self.applier.begin_stop_keepalived();
        let waiter = leave::Waiter::new(plan.awaited.clone(), start, self.cfg.handover_wait);
        match wait_for_peers(&mut listener, waiter, &own) {
            leave::Outcome::TakenOver => {
                tracing::info!(
                    after_ms = start.elapsed().as_millis() as u64,
                    "VIPs handed over; serving late packets a little longer"
                );
                std::thread::sleep(leave::LINGER_AFTER_TAKEOVER);
            }
            leave::Outcome::TimedOut(left) => tracing::warn!(
                instances = ?left,
                after_ms = start.elapsed().as_millis() as u64,
                "no peer became master of these instances in time; stopping anyway"
            ),
        }
        // The copies go now, not after keepalived's exit (a second later): while they
        // exist this node answers ARP for the VIPs too.
        self.remove_from_lo(&plan.linger);
    }

    /// Remove the copies on `lo` of `vips` (kept there for the hand-over), each failure
    /// logged.
    fn remove_from_lo(&mut self, vips: &[IpAddr]) {
        match self.ops.addresses() {
            Ok(addrs) => {
                for a in addrs
                    .iter()
                    .filter(|a| a.ifname == "lo" && vips.contains(&a.ip()))
                {
                    match self.ops.delete(a) {
                        Ok(()) => tracing::info!(vip = %a.net, "no longer serving the VIP"),
                        Err(e) => {
                            tracing::error!(vip = %a.net, error = %e, "could not remove the VIP from lo")
                        }
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "could not list addresses; the VIPs go with the others")
            }
        }
    }

    fn poll(&mut self) -> Poll {
        match self.source.poll() {
            Polled::Unchanged => Poll::Unchanged,
            Polled::Changed(text) => match load_state(&text) {
                Ok(s) => Poll::State(Arc::new(s)),
                Err(error) => Poll::Refused {
                    text: Some(text),
                    error,
                },
            },
            Polled::Decoded(s) => Poll::State(Arc::new(*s)),
            Polled::Refused(error) => Poll::Refused { text: None, error },
            Polled::Unavailable(e) => Poll::Unavailable(e.to_string()),
        }
    }

    fn log(&self, note: Note) {
        let source = &self.described;
        match note {
            Note::NewState { vips, services } => {
                tracing::info!(vips, services, "new state");
            }
            Note::StateRefused { error } => {
                tracing::error!(error = %error, source = %source, "state refused; keeping the previous one");
            }
            Note::StartingFromLastSaved { error } => {
                tracing::warn!(error = %error, source = %source, "state source unavailable; starting from the last applied state");
            }
            Note::ProviderMismatch {
                planned,
                actor,
                applied,
            } => {
                tracing::error!(
                    planned = %planned, actor = %actor, source = %source,
                    "state refused: {}", control::refusal(planned, actor, applied)
                );
            }
            Note::ProviderMatchesAgain { provider } => {
                tracing::info!(provider = %provider, source = %source, "the state is planned for this actor's provider again");
            }
            Note::HeldChanged { held, gained, lost } => {
                // Which VIPs this node holds, when that changes (the metric has it too).
                let list = |s: &BTreeSet<IpAddr>| {
                    s.iter()
                        .map(|ip| ip.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                };
                tracing::info!(
                    held = %list(&held),
                    gained = %list(&gained),
                    lost = %list(&lost),
                    "VIPs held by this node changed"
                );
            }
            Note::ShuttingDown => {
                tracing::info!("shutting down: keepalived first, then our VIPs, then the proxy");
            }
            Note::Stopped => tracing::info!("stopped"),
        }
    }
}

fn refs(states: &[Arc<State>]) -> Vec<&State> {
    states.iter().map(|s| &**s).collect()
}

/// Whether binding to non-local addresses is already allowed (IPv6 off counts as on).
fn nonlocal_bind_already_on() -> bool {
    let on = |p: &str| std::fs::read_to_string(p).map(|v| v.trim() == "1");
    on("/proc/sys/net/ipv4/ip_nonlocal_bind").unwrap_or(false)
        && on("/proc/sys/net/ipv6/ip_nonlocal_bind")
            .unwrap_or(!Path::new("/proc/sys/net/ipv6").exists())
}

/// `k8slb-actor run`.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logging(&args)?;
    std::fs::create_dir_all(&args.work_dir)
        .with_context(|| format!("create work dir {}", args.work_dir.display()))?;
    let renderer = match &args.templates {
        Some(d) => Renderer::from_dir(d),
        None => Renderer::embedded(),
    }
    .context("templates")?;
    let paths = Paths::new(&args.work_dir);
    let metrics = Arc::new(Metrics::new());
    let base = view_options(&args, &paths, &metrics)?;
    let mut real = RealRenderer::new(renderer, args.node.clone(), base);
    real.metrics = Some(metrics.clone());
    if args.proxy == Provider::Nginx {
        check_nonlocal_bind();
    }
    let applier = applier(&args, &paths, real, metrics.clone());
    let health = Arc::new(Health::default());

    let mut cfg = LoopConfig::new(args.node.clone(), args.proxy, paths, args.state.clone());
    cfg.forced_interfaces = args.interfaces.iter().cloned().collect();
    cfg.handover_wait = Duration::from_millis(args.handover_wait_ms);
    cfg.templates = args.templates.clone();
    cfg.bgp_withdraw_wait = Duration::from_millis(args.bgp_withdraw_wait_ms);
    let certs_dir = std::path::absolute(&args.certs_dir)
        .with_context(|| format!("--certs-dir {}", args.certs_dir.display()))?;
    cfg.certs_dir = Some(certs_dir.clone());
    let bgp_secrets_dir = std::path::absolute(&args.bgp_secrets_dir)
        .with_context(|| format!("--bgp-secrets-dir {}", args.bgp_secrets_dir.display()))?;
    cfg.bgp_secrets_dir = Some(bgp_secrets_dir.clone());

    // The Kubernetes client only for the ConfigMap source. Building it reads the
    // in-cluster config (or KUBECONFIG) and makes no request: an unreachable API server
    // does not stop the actor, which then starts from its last applied state.
    let client = match &args.state {
        StateSource::ConfigMap => Some(state_source::client_from_env().await.context(
            "Kubernetes client for --state configmap (in-cluster config or KUBECONFIG)",
        )?),
        StateSource::File(_) => None,
    };
    if let Some(c) = &client {
        spawn_node_tasks(c, &args, &mut cfg, certs_dir, bgp_secrets_dir);
    }
    let source = open_source(
        &args.state,
        client,
        ConfigMapOptions::new(args.namespace.clone()),
        &tokio::runtime::Handle::current(),
    )?;

    let shutdown = Arc::new(AtomicBool::new(false));
    let (sd, h, m) = (shutdown.clone(), health.clone(), metrics.clone());
    let control = std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            let mut ops = match vip::Netlink::new() {
                Ok(o) => o,
                Err(e) => {
                    tracing::error!(error = %e, "netlink unavailable");
                    return Err(e);
                }
            };
            control_loop(cfg, source, applier, &mut ops, sd, h, m);
            Ok(())
        })
        .context("spawn the control loop")?;

    let (admin_stop_tx, admin_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let admin_state = AdminState { metrics, health };
    let admin_addr = args.admin_addr;
    let admin = tokio::spawn(async move {
        if let Err(e) = admin::serve(admin_addr, admin_state, async {
            let _ = admin_stop_rx.await;
        })
        .await
        {
            tracing::error!(error = %e, addr = %admin_addr, "admin server failed");
        }
    });

    let result = until_stopped(control, shutdown).await?;
    let _ = admin_stop_tx.send(());
    let _ = admin.await;
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e).context("control loop"),
        Err(_) => anyhow::bail!("control loop panicked"),
    }
}

/// The tasks of the ConfigMap source's client: the node certificate Secrets into
/// `certs_dir` and the BGP peers' password Secrets into `bgp_secrets_dir`, each once a
/// state names one (woken through `cfg`), and the node report for the watcher (with a
/// proxy). They stop with the runtime.
fn spawn_node_tasks(
    c: &kube::Client,
    args: &RunArgs,
    cfg: &mut LoopConfig,
    certs_dir: PathBuf,
    bgp_secrets_dir: PathBuf,
) {
    // The node certificate Secrets into --certs-dir (in the files mode the watcher's
    // --certs-out writes that directory).
    {
        let wanted = Arc::new(tokio::sync::Notify::new());
        cfg.certs_wanted = Some(wanted.clone());
        let (c, ns) = (c.clone(), args.namespace.clone());
        tokio::spawn(async move {
            wanted.notified().await;
            tracing::info!(namespace = %ns, "the state names TLS Secrets' certificates: watching the node certificate Secrets");
            crate::cert_source::follow(c, ns, certs_dir).await;
        });
    }
    // The BGP peers' password Secrets into --bgp-secrets-dir, once a state names one.
    {
        let wanted = Arc::new(tokio::sync::Notify::new());
        cfg.bgp_secrets_wanted = Some(wanted.clone());
        let (c, ns) = (c.clone(), args.namespace.clone());
        tokio::spawn(async move {
            wanted.notified().await;
            tracing::info!(namespace = %ns, "a BGP peer has a passwordSecret: watching the kubernetes.io/basic-auth Secrets");
            crate::bgp_secrets::follow(c, ns, bgp_secrets_dir).await;
        });
    }
    // The node report (the objects this node's proxy checker refuses) for the watcher.
    if args.proxy != Provider::Kubeproxy {
        let (reporter, rx) = crate::report::Reporter::new(&args.node, &args.proxy.to_string());
        cfg.report = Some(reporter);
        tokio::spawn(crate::report::write_reports(
            c.clone(),
            args.namespace.clone(),
            args.node.clone(),
            rx,
            crate::report::REFRESH,
        ));
    }
}

/// The view options of this actor: paths in the work dir, `--interface`, k8slb's
/// `PRIORITY<n>` (a bad value exits 64 with one line, as `render` does), and the proxy's
/// connection limits fitted to the open-files limit (raised here; the proxy inherits it).
fn view_options(args: &RunArgs, paths: &Paths, metrics: &Metrics) -> anyhow::Result<ViewOptions> {
    let mut base = ViewOptions::new(args.proxy);
    base.runtime_socket = paths.haproxy_runtime_socket();
    base.pid_file = match args.proxy {
        Provider::Nginx => paths.nginx_pid(),
        _ => paths.haproxy_pid(),
    };
    base.interfaces = args.interfaces.iter().cloned().collect();
    base.track_file = paths.proxy_health();
    base.secret_cert_dir = std::path::absolute(&args.certs_dir)
        .with_context(|| format!("--certs-dir {}", args.certs_dir.display()))?;
    base.routes_dir = std::path::absolute(paths.work_dir.join("routes"))
        .context("the routes directory under --work-dir")?;
    base.hop_dir = std::path::absolute(paths.hop_dir())
        .context("the hop sockets directory under --work-dir")?;
    daemons::make_private_dir(&base.hop_dir)
        .with_context(|| format!("creating {}", base.hop_dir.display()))?;
    base.priority_overrides = crate::cmd_render::priority_overrides(std::env::vars())
        .context("PRIORITY<n> environment")?;
    match daemons::raise_open_files_limit() {
        Ok((before, after)) if before < after => {
            tracing::info!(before, after, "open-files limit raised for the proxy");
        }
        Ok((_, after)) => tracing::debug!(limit = after, "open-files limit"),
        Err(e) => tracing::warn!(error = %e, "could not raise the open-files limit"),
    }
    match crate::fdlimit::FdBudget::of_this_process() {
        Ok(b) => {
            metrics
                .fd_limit
                .set(i64::try_from(b.limit).unwrap_or(i64::MAX));
            base.fd_budget = Some(b);
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not read the open-files limit; proxy limits rendered as configured")
        }
    }
    Ok(base)
}

/// Only nginx needs ip_nonlocal_bind: HAProxy binds with `transparent` (IP_TRANSPARENT,
/// or IP_FREEBIND without privilege; no sysctl) and kubeproxy binds nothing. In a Pod,
/// /proc/sys is read-only: the nginx manifest's init container (or the node's sysctl.d)
/// sets it, and writing it again would only fail with a false alarm.
fn check_nonlocal_bind() {
    if nonlocal_bind_already_on() {
        tracing::debug!("ip_nonlocal_bind is already on");
    } else if let Err(e) = vip::allow_nonlocal_bind() {
        tracing::error!(
            error = %e,
            "nginx needs net.ipv4.ip_nonlocal_bind=1 and net.ipv6.ip_nonlocal_bind=1 \
             and they are off; nginx cannot listen on VIPs this node does not hold \
             (set both on the node, e.g. with sysctl.d or the nginx manifest's init \
             container, or use --proxy haproxy)"
        );
    }
}

/// keepalived and the provider's proxy (none for kubeproxy) under one [`Applier`].
fn applier(
    args: &RunArgs,
    paths: &Paths,
    real: RealRenderer,
    metrics: Arc<Metrics>,
) -> Applier<RealRenderer> {
    let bins = Binaries {
        keepalived: args.keepalived_bin.clone(),
        haproxy: args.haproxy_bin.clone(),
        nginx: args.nginx_bin.clone(),
    };
    let keepalived: Box<dyn Daemon> =
        Box::new(daemons::Keepalived::new(&bins.keepalived, paths.clone()));
    let proxy: Option<Box<dyn Daemon>> = match args.proxy {
        Provider::Haproxy => Some(Box::new(daemons::Haproxy::new(
            &bins.haproxy,
            paths.clone(),
        ))),
        Provider::Nginx => Some(Box::new(daemons::Nginx::new(&bins.nginx, paths.clone()))),
        Provider::Kubeproxy => None,
    };
    let mut applier = Applier::new(real, keepalived, proxy, metrics);
    applier.min_reload_interval = Duration::from_millis(args.min_reload_interval_ms);
    applier.vip_handover = Duration::from_millis(args.vip_handover_ms);
    // A keepalived that dies takes its VIPs with it at once, not when the loop reaps it.
    applier.watch_keepalived_exit(|| Ok(Box::new(vip::Netlink::new()?) as Box<dyn AddrOps>));
    applier
}

/// Waits for the control loop to end, on its own or after SIGTERM / SIGINT (which set
/// `shutdown`: the loop then stops keepalived, our VIPs and the proxy, in that order).
async fn until_stopped<T: Send + 'static>(
    control: std::thread::JoinHandle<T>,
    shutdown: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::Result<T>> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let control_done = {
        let sd = shutdown.clone();
        async move {
            loop {
                if control.is_finished() {
                    return control.join();
                }
                if sd.load(Ordering::Relaxed) {
                    return tokio::task::spawn_blocking(move || control.join())
                        .await
                        .expect("join task");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    tokio::pin!(control_done);
    Ok(tokio::select! {
        _ = term.recv() => { tracing::info!(signal = "SIGTERM", "stopping"); shutdown.store(true, Ordering::Relaxed); control_done.await }
        _ = int.recv() => { tracing::info!(signal = "SIGINT", "stopping"); shutdown.store(true, Ordering::Relaxed); control_done.await }
        r = &mut control_done => r,
    })
}

/// Listen for VRRP adverts until `waiter` has its outcome: every awaited instance has a
/// peer as master (`own`: this node's addresses, whose adverts do not count), the time
/// is up, or listening fails (then the instances left are timed out).
fn wait_for_peers(
    listener: &mut leave::listen::Listener,
    mut waiter: leave::Waiter,
    own: &BTreeSet<IpAddr>,
) -> leave::Outcome {
    loop {
        let now = Instant::now();
        if let Some(o) = waiter.outcome(now) {
            return o;
        }
        match listener.recv(waiter.listen_for(now, Duration::from_millis(100))) {
            Ok(Some((from, advert))) => {
                if waiter.heard(from, advert, own, Instant::now()) {
                    tracing::info!(peer = %from, vrid = advert.vrid, priority = advert.priority, "a peer is master");
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %e, category = e.category(), "listening for VRRP adverts failed; stopping");
                return leave::Outcome::TimedOut(waiter.left().clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(ifname: &str, net: &str) -> vip::Addr {
        vip::Addr {
            ifname: ifname.into(),
            index: 1,
            net: net.parse().unwrap(),
        }
    }

    /// A state whose pool `default` (198.18.7.0/24, no `interface`) has the VIP
    /// 198.18.7.10.
    fn state() -> State {
        let mut s = State::from_json(include_str!("../tests/fixtures/empty.json")).unwrap();
        let pool = s
            .config
            .pools
            .get_mut(&"default".parse::<PoolName>().unwrap())
            .unwrap();
        pool.network = "198.18.7.0/24".into();
        pool.first = "198.18.7.0".parse().unwrap();
        pool.interface = None;
        s.vips.insert(
            "198.18.7.10".parse().unwrap(),
            k8slb_common::state::VipState {
                pool: "default".parse().unwrap(),
                vrid: 71,
                owner: None,
                services: vec![],
                ingress: false,
                gateways: vec![],
            },
        );
        s
    }

    #[test]
    fn interface_detection_ignores_vips() {
        let s = state();
        let node: NodeName = "n1".parse().unwrap();
        let pool: PoolName = "default".parse().unwrap();
        let none = BTreeSet::new();
        let detect = |addrs: &[vip::Addr], vips: &BTreeSet<IpAddr>| {
            node_context(&s, &node, &BTreeMap::new(), addrs, vips)
                .interfaces
                .get(&pool)
                .map(|i| i.to_string())
        };
        // The VIP keepalived put on eth0, with the pool's prefix, is the only address
        // in the pool's network: no interface (and no node address from it).
        let vip_only = [
            addr("eth0", "198.18.8.2/24"),
            addr("eth0", "198.18.7.10/24"),
        ];
        assert_eq!(detect(&vip_only, &none), None);
        let ctx = node_context(&s, &node, &BTreeMap::new(), &vip_only, &none);
        assert_eq!(
            ctx.node_addresses,
            vec!["198.18.8.2".parse::<IpAddr>().unwrap()]
        );
        // A VIP only the last applied state knows counts as a VIP too.
        let old_vip = [addr("eth0", "198.18.7.11/24")];
        assert_eq!(detect(&old_vip, &none).as_deref(), Some("eth0"));
        let known: BTreeSet<IpAddr> = ["198.18.7.11".parse().unwrap()].into();
        assert_eq!(detect(&old_vip, &known), None);
        // A real address of the node in the pool's network: that interface.
        let real = [
            addr("eth0", "198.18.7.10/24"),
            addr("eth1", "198.18.7.2/24"),
        ];
        assert_eq!(detect(&real, &none).as_deref(), Some("eth1"));
    }
}
