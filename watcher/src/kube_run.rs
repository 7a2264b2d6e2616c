//! `k8slb-watcher run --source kubernetes --state-out configmap`: the Kubernetes loop.
//!
//! 1. Start the watchers ([`crate::kube_source`]) and wait until every store has its first
//!    complete list: nothing is planned before (the previous state and every Service's
//!    status are then known, so allocation is sticky from the first plan).
//! 2. Start the leader election ([`crate::leader`]). Every replica keeps its stores warm;
//!    only the leader plans, publishes, patches status and writes Events.
//! 3. On a debounced tick (after the last change, bounded), a periodic resync, a leadership
//!    change or a retry: gather a snapshot (the config, the objects, and for a new leader
//!    what the state ConfigMaps hold), let [`crate::reconcile`] decide, then execute: publish
//!    if the state changed ([`crate::publish_cm`]), then Events ([`crate::events`]) for what
//!    changed and Service and Ingress status ([`crate::status`]); with `--ingress`, the
//!    node certificate Secrets ([`crate::node_secrets`]) around the publish.
//!
//! Without a valid config ever seen, nothing is published: an empty or partial input
//! never becomes an empty state.

use crate::admin::{self, Metrics, ReasonLabel};
use crate::events::Recorder;
use crate::failing::FailureLog;
use crate::gateway_api::{GatewayDiscovery, GatewayResources};
use crate::gateway_status::GatewayStatusWriter;
use crate::kube_source::Stores;
use crate::leader::{self, LeaseConfig};
use crate::node_secrets::NodeSecretWriter;
use crate::publish_cm::{PublishCmError, Publisher, StateLoad};
use crate::reconcile::{
    reconcile, ConfigNews, ConfigRead, Fresh, Planned, Previous, Published, Role, Settings,
    Snapshot, Step,
};
use crate::status::StatusWriter;
use crate::Error;
use k8s_openapi::api::core::v1::ConfigMap;
use k8slb_common::debounce::Debouncer;
use k8slb_common::plan::PlanOptions;
use kube::{Api, Client};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Everything the Kubernetes loop needs besides the client.
#[derive(Debug, Clone)]
pub struct KubeArgs {
    pub plan: PlanOptions,
    /// Our namespace: the global ConfigMap, the state ConfigMaps, the Lease.
    pub namespace: String,
    pub resync: Duration,
    /// Quiet time after the last change before a plan...
    pub debounce: Duration,
    /// ...but never longer than this after the first change.
    pub debounce_max: Duration,
    /// Write k8slb's `<ip>.sslip.io` hostname form instead of `{ip, ipMode}`.
    pub status_hostname: bool,
    /// Serve Ingresses: watch Ingresses, IngressClasses and TLS Secrets, write Ingress
    /// status and the node certificate Secrets.
    pub ingress: bool,
    /// Serve the Gateway API too (with `ingress`): when the cluster has its CRDs, watch
    /// GatewayClasses, Gateways, HTTPRoutes and ReferenceGrants and write their status.
    pub gateway_api: bool,
    /// How often a watcher started without the Gateway API CRDs looks for them (30 s).
    pub gateway_api_check: Duration,
    pub leader_election: bool,
    pub identity: String,
    pub lease_duration: Duration,
    pub lease_renew: Duration,
    /// `None`: no admin server (tests).
    pub admin_addr: Option<SocketAddr>,
    pub events_per_second: u32,
    /// How long a state write in progress (a shard not matching the index) is waited for
    /// before the new leader starts from the Services' status alone.
    pub state_in_progress_grace: Duration,
}

impl KubeArgs {
    /// Defaults as the flags have them (admin server off).
    pub fn new(namespace: &str, identity: &str) -> Self {
        KubeArgs {
            plan: PlanOptions::default(),
            namespace: namespace.to_string(),
            resync: Duration::from_secs(30),
            debounce: Duration::from_millis(100),
            debounce_max: Duration::from_secs(1),
            status_hostname: false,
            ingress: false,
            gateway_api: false,
            gateway_api_check: Duration::from_secs(30),
            leader_election: true,
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
            lease_renew: Duration::from_secs(2),
            admin_addr: None,
            events_per_second: 20,
            state_in_progress_grace: Duration::from_secs(10),
        }
    }
}

/// Flags of the Kubernetes source (flattened into `run`).
#[derive(Debug, Clone, clap::Args)]
pub struct KubeFlags {
    /// Write status.loadBalancer.ingress in k8slb's legacy form `{hostname: <ip>.sslip.io}`
    /// instead of `{ip, ipMode}` (for clusters older than 1.30).
    #[arg(long, env = "K8SLB_STATUS_HOSTNAME", default_value_t = false)]
    pub status_hostname: bool,
    /// Serve the Ingresses of our IngressClass: watch Ingresses, IngressClasses and the
    /// Secrets of type kubernetes.io/tls, write Ingress status, and give the LB nodes the
    /// certificates (Secrets in our namespace). Needs the RBAC of the `-ingress` install
    /// variant (manifests/k8slb-<proxy>-ingress.yml); the others grant no Secret access.
    #[arg(long, env = "K8SLB_INGRESS", default_value_t = false)]
    pub ingress: bool,
    /// Serve the Gateway API (gateway.networking.k8s.io: GatewayClasses of controller
    /// k8slb.io/gateway-controller, their Gateways, HTTPRoutes and ReferenceGrants) on
    /// the same floating IPs, and write their status. Needs `--ingress` (the Secrets of
    /// HTTPS listeners) and that install variant's RBAC. Without the Gateway API CRDs in
    /// the cluster, it says so in the log and serves the rest; when they are installed
    /// later, the watcher exits to be restarted and serve them.
    #[arg(
        long,
        env = "K8SLB_GATEWAY_API",
        default_value_t = false,
        requires = "ingress"
    )]
    pub gateway_api: bool,
    /// Elect a leader with the Lease `k8slb-watcher` (turn off only with one replica).
    #[arg(long, env = "K8SLB_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Lease duration in seconds: a follower takes over this long after the leader stopped
    /// renewing.
    #[arg(long, env = "K8SLB_LEASE_DURATION_S", default_value_t = 15)]
    pub lease_duration_s: u64,
    /// How often the leader renews (and a follower checks) the Lease, in milliseconds.
    #[arg(long, env = "K8SLB_LEASE_RENEW_MS", default_value_t = 2000)]
    pub lease_renew_ms: u64,
    /// This replica's name in the Lease (default: POD_NAME or the hostname, plus a random
    /// suffix).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// Where `/livez`, `/readyz` and `/metrics` are served (with either source).
    #[arg(long, env = "K8SLB_ADMIN_ADDR", default_value = "0.0.0.0:9253")]
    pub admin_addr: SocketAddr,
    /// Quiet time after a change before recomputing, in milliseconds (at most 1 s later
    /// than the first change).
    #[arg(long, env = "K8SLB_DEBOUNCE_MS", default_value_t = 100)]
    pub debounce_ms: u64,
    /// Most Events written per second (more wait in a queue).
    #[arg(long, env = "K8SLB_EVENTS_PER_SECOND", default_value_t = 20)]
    pub events_per_second: u32,
}

/// Run until `shutdown` is cancelled. The leader releases its Lease on the way out.
pub async fn run(
    config: kube::Config,
    args: KubeArgs,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let client = Client::try_from(config)
        .map_err(|e| Error::Runtime(format!("cannot build the Kubernetes client: {e}")))?;
    if let Some(addr) = args.admin_addr {
        admin::serve(addr, metrics.clone(), shutdown.clone())
            .await
            .map_err(|e| Error::Usage(format!("cannot listen on {addr}: {e}")))?;
    }
    let changed = Arc::new(Notify::new());
    let stores_stop = shutdown.child_token();
    let _stores_stop_on_drop = stores_stop.clone().drop_guard();
    metrics.readiness.not_ready("waiting for the initial lists");
    let gateway = if args.gateway_api {
        match gateway_resources(&client, &args, &metrics, &shutdown).await {
            Some(r) => r,
            None => return Ok(()), // shut down meanwhile
        }
    } else {
        None
    };
    let stores = Stores::spawn(
        &client,
        &args.namespace,
        args.ingress,
        gateway,
        changed.clone(),
        &metrics.readiness,
        &stores_stop,
    );
    tracing::info!(namespace = %args.namespace, identity = %args.identity, "waiting for the initial lists");
    tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        r = stores.wait_until_ready() => r.map_err(|e| Error::Runtime(format!("a watcher stopped: {e}")))?,
    }
    tracing::info!("every store is synced");

    let leader_flag = Arc::new(AtomicBool::new(false));
    let (leader_tx, mut leader_rx) = watch::channel(false);
    // The election stops with its own token, after the loop, so the Lease is released
    // only once nothing writes any more.
    let election_stop = CancellationToken::new();
    // If this future is dropped (aborted) rather than finishing, the background writers
    // stop at once without releasing anything, like a crashed process.
    let abandon = CancellationToken::new();
    let _abandon_on_drop = abandon.clone().drop_guard();
    let election = spawn_election(
        &client,
        &args,
        leader_tx,
        leader_flag.clone(),
        &election_stop,
        &abandon,
    );
    let recorder_stop = abandon.child_token();
    let recorder = Recorder::spawn(
        client.clone(),
        args.identity.clone(),
        args.events_per_second,
        leader_flag.clone(),
        metrics.clone(),
        recorder_stop.clone(),
    );
    let mut lp = Loop::new(
        &client,
        &args,
        stores,
        recorder,
        &metrics,
        leader_flag.clone(),
    );
    ticks(&mut lp, &args, &changed, &mut leader_rx, &shutdown).await;
    tracing::info!("shutting down");
    metrics.readiness.not_ready("shutting down");
    election_stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), election).await;
    leader_flag.store(false, Ordering::SeqCst);
    metrics.is_leader.set(0);
    recorder_stop.cancel();
    Ok(())
}

/// Discovery of the Gateway API, retried (not ready meanwhile) while the API server
/// cannot answer. None: shut down meanwhile.
async fn discover_gateway_api(
    client: &Client,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> Option<GatewayDiscovery> {
    let mut log = FailureLog::new("discovering the Gateway API");
    loop {
        match GatewayResources::discover(client).await {
            Ok(d) => {
                log.succeeded();
                return Some(d);
            }
            Err(e) => {
                let why = crate::kube::describe(&e);
                metrics
                    .readiness
                    .not_ready(format!("discovering the Gateway API: {why}"));
                log.failed(1, &why);
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}

/// The loop: a tick after every debounced change, resync, change of leadership or
/// retry, until shut down.
async fn ticks(
    lp: &mut Loop,
    args: &KubeArgs,
    changed: &Notify,
    leader_rx: &mut watch::Receiver<bool>,
    shutdown: &CancellationToken,
) {
    let mut resync = tokio::time::interval(args.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    resync.tick().await;
    loop {
        let retry = lp.tick().await;
        let retry_sleep = async {
            match retry {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            more = debounced(changed, args, shutdown) => if !more { break },
            _ = resync.tick() => {}
            _ = leader_rx.changed() => {}
            _ = retry_sleep => {}
        }
    }
}

/// The Gateway API kinds this cluster serves (`None`: its CRDs are absent, a check
/// restarts the watcher once they are installed), or `None` outside when shut down
/// meanwhile.
async fn gateway_resources(
    client: &Client,
    args: &KubeArgs,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> Option<Option<GatewayResources>> {
    match discover_gateway_api(client, metrics, shutdown).await? {
        GatewayDiscovery::Found(r) => {
            tracing::info!(
                gatewayclasses = %r.classes.api_version,
                gateways = %r.gateways.api_version,
                httproutes = %r.routes.api_version,
                referencegrants = %r.grants.as_ref().map_or("not served".into(), |g| g.api_version.clone()),
                listenersets = %r.listener_sets.as_ref().map_or("not served".into(), |g| g.api_version.clone()),
                l4routes = %r.l4.iter().map(|(k, ar)| format!("{} {}", k.as_str(), ar.api_version)).collect::<Vec<_>>().join(", "),
                "serving the Gateway API"
            );
            if r.l4.len() < k8slb_common::names::L4Kind::ALL.len() {
                // The experimental channel's route kinds may be installed later.
                let have = r.l4.iter().map(|(k, _)| *k).collect();
                spawn_gateway_api_check(client, args.gateway_api_check, Some(have), shutdown);
            }
            Some(Some(*r))
        }
        GatewayDiscovery::Absent(why) => {
            tracing::warn!(reason = %why, "the Gateway API CRDs (gateway.networking.k8s.io) are not installed: Gateways are not served; Services and Ingresses are. Once they are installed, this watcher restarts to serve them");
            spawn_gateway_api_check(client, args.gateway_api_check, None, shutdown);
            Some(None)
        }
    }
}

/// While the Gateway API CRDs are absent (`have` None), or some of the experimental
/// channel's route kinds are (`have`: the L4 kinds served): look every `every`; once more
/// are installed, say so and shut down, to be restarted (by the Deployment) watching
/// them. Planning without them is not an option meanwhile: their objects would be
/// unknown, not absent.
fn spawn_gateway_api_check(
    client: &Client,
    every: Duration,
    have: Option<Vec<k8slb_common::names::L4Kind>>,
    shutdown: &CancellationToken,
) {
    let client = client.clone();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let Ok(GatewayDiscovery::Found(r)) = GatewayResources::discover(&client).await else {
                continue;
            };
            let new: Vec<&str> =
                r.l4.iter()
                    .filter(|(k, _)| have.as_ref().is_some_and(|h| !h.contains(k)))
                    .map(|(k, _)| k.as_str())
                    .collect();
            match &have {
                None => tracing::warn!(
                    "the Gateway API CRDs are installed now: exiting to be restarted and serve them"
                ),
                Some(_) if !new.is_empty() => tracing::warn!(
                    kinds = %new.join(", "),
                    "more Gateway API route kinds are installed now: exiting to be restarted and serve them"
                ),
                Some(_) => continue,
            }
            shutdown.cancel();
            return;
        }
    });
}

/// A change, then quiet for `debounce` (but no longer than `debounce_max` after the
/// change), as decided by the shared [`Debouncer`]. False: shut down meanwhile. A burst
/// interrupted by another wake-up (resync, leadership, retry) is forgotten: that tick
/// plans with everything the burst brought.
async fn debounced(changed: &Notify, args: &KubeArgs, shutdown: &CancellationToken) -> bool {
    changed.notified().await;
    let mut burst = Debouncer::new(args.debounce, args.debounce_max);
    burst.changed(std::time::Instant::now());
    while let Some(due) = burst.due() {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep_until(Instant::from_std(due)) => {
                if burst.fire(std::time::Instant::now()) {
                    return true;
                }
            }
            _ = changed.notified() => burst.changed(std::time::Instant::now()),
        }
    }
    true
}

/// The leader election (or, without it, a task that says "leader" until stopped and keeps
/// the sender alive so `changed()` never fails).
fn spawn_election(
    client: &Client,
    args: &KubeArgs,
    leader_tx: watch::Sender<bool>,
    leader_flag: Arc<AtomicBool>,
    stop: &CancellationToken,
    abandon: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    if args.leader_election {
        return tokio::spawn(leader::run(
            client.clone(),
            LeaseConfig {
                namespace: args.namespace.clone(),
                identity: args.identity.clone(),
                duration: args.lease_duration,
                renew: args.lease_renew,
            },
            leader_tx,
            leader_flag,
            stop.clone(),
            abandon.clone(),
        ));
    }
    leader_flag.store(true, Ordering::SeqCst);
    leader_tx.send_replace(true);
    let stop = stop.clone();
    let gone = abandon.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = gone.cancelled() => {}
        }
        drop(leader_tx);
    })
}

/// The driver's side of each round: gathers a [`Snapshot`], calls [`reconcile`], executes
/// the [`Effects`].
struct Loop {
    args: KubeArgs,
    settings: Settings,
    stores: Stores,
    publisher: Publisher,
    status: StatusWriter,
    gateway_status: Option<GatewayStatusWriter>,
    node_secrets: NodeSecretWriter,
    recorder: Recorder,
    metrics: Metrics,
    leader: Arc<AtomicBool>,
    was_leader: bool,
    /// The reconcile's memory.
    previous: Previous,
    /// Since when the published state is seen being written (the wait's clock).
    in_progress_since: Option<Instant>,
    publish_log: FailureLog,
}

const RETRY: Duration = Duration::from_secs(1);

impl Loop {
    fn new(
        client: &Client,
        args: &KubeArgs,
        stores: Stores,
        recorder: Recorder,
        metrics: &Metrics,
        leader: Arc<AtomicBool>,
    ) -> Loop {
        Loop {
            publisher: Publisher::new(
                Api::<ConfigMap>::namespaced(client.clone(), &args.namespace),
                &args.namespace,
            ),
            status: StatusWriter::new(client.clone()),
            gateway_status: stores
                .gateway
                .as_ref()
                .map(|g| GatewayStatusWriter::new(client.clone(), g.resources.clone())),
            node_secrets: NodeSecretWriter::new(client.clone(), &args.namespace),
            stores,
            recorder,
            metrics: metrics.clone(),
            leader,
            was_leader: false,
            previous: Previous::default(),
            in_progress_since: None,
            publish_log: FailureLog::new("publishing the state"),
            settings: Settings {
                plan: args.plan.clone(),
                namespace: args.namespace.clone(),
                status_hostname: args.status_hostname,
            },
            args: args.clone(),
        }
    }

    fn is_leader(&self) -> bool {
        self.leader.load(Ordering::SeqCst)
    }

    /// The snapshot: the published state is read (decoded) only when the reconcile will
    /// look at it, i.e. for a leader that does not remember what it published.
    fn gather(&self, role: Role) -> Snapshot<'_> {
        let config = self.stores.config();
        if let ConfigRead::Valid(c) = &config {
            for w in &c.warnings {
                tracing::warn!(warning = %w, "config");
            }
        }
        let published = if role == Role::Leader && self.previous.state.is_none() {
            match self.stores.previous_state() {
                StateLoad::None => Published::None,
                StateLoad::Loaded(s) => Published::Loaded(s),
                StateLoad::InProgress(why) => Published::InProgress {
                    why,
                    waited_enough: match self.in_progress_since {
                        None => self.args.state_in_progress_grace.is_zero(),
                        Some(t) => t.elapsed() >= self.args.state_in_progress_grace,
                    },
                },
                StateLoad::Unreadable(why) => Published::Unreadable(why),
            }
        } else {
            Published::None
        };
        Snapshot {
            settings: &self.settings,
            role,
            config,
            config_uid: self.stores.config_uid(),
            objects: if role == Role::Leader {
                self.stores.objects()
            } else {
                Default::default()
            },
            published,
            uids: &self.stores,
            now: self.stores.gateway.as_ref().map(|_| {
                k8s_openapi::jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%SZ")
                    .to_string()
            }),
            // The reports are in the ConfigMaps store, synced before the first plan:
            // a plan never mistakes reports not listed yet for nodes without features.
            reports: (role == Role::Leader).then(|| self.stores.node_reports()),
            certs: self.stores.certs(),
        }
    }

    /// One round. Returns when to retry (None: wait for a change).
    async fn tick(&mut self) -> Option<Duration> {
        let leader = self.is_leader();
        if leader && !self.was_leader {
            self.previous.new_leadership();
            self.publisher.reset_from(&self.stores.configmaps.state());
            // Ready again only once this leader has published (or found published) the
            // current state.
            self.metrics
                .readiness
                .not_ready("leader: the state is not published yet");
        }
        // After the readiness reset: never "leading" with a follower's readiness.
        self.metrics.is_leader.set(i64::from(leader));
        self.was_leader = leader;
        let role = if leader { Role::Leader } else { Role::Follower };

        let started = std::time::Instant::now();
        let fx = {
            let snapshot = self.gather(role);
            reconcile(&snapshot, &self.previous)
        };
        self.previous.config = fx.config;
        if let Some(news) = &fx.config_news {
            news.log(&self.settings.config_name());
        }
        self.metrics.config(
            fx.config_valid,
            matches!(fx.config_news, Some(ConfigNews::Invalid(_))),
        );
        if let Some(note) = fx.config_event {
            self.recorder.record(note);
        }
        match fx.step {
            Step::Follow => {
                // Only ticks after every store's first list: synced.
                self.metrics
                    .readiness
                    .ready("follower: caches synced; ready to take over");
                None
            }
            Step::NoConfig => {
                // Never publish without a config.
                self.metrics.readiness.not_ready(format!(
                    "leader: no valid global config ({}) yet; nothing is published",
                    self.settings.config_name()
                ));
                None
            }
            Step::WaitForState(why) => {
                self.in_progress_since.get_or_insert_with(Instant::now);
                tracing::info!(reason = %why, "the published state is being written; waiting");
                self.metrics.readiness.not_ready(format!(
                    "leader: waiting for the state being written: {why}"
                ));
                Some(RETRY)
            }
            Step::Plan(planned) => {
                self.in_progress_since = None;
                self.execute(*planned, started).await
            }
        }
    }

    /// Publish (if the state changed), then Events and Service status.
    async fn execute(&mut self, p: Planned, started: std::time::Instant) -> Option<Duration> {
        match &p.fresh {
            Some(Fresh::Incomplete(why)) => {
                tracing::warn!(reason = %why, "the published state stays incomplete; starting from the Services' status")
            }
            Some(Fresh::Unreadable(why)) => {
                tracing::warn!(reason = %why, "the published state cannot be read; starting from the Services' status")
            }
            None => {}
        }
        let state = p.state;
        self.count_plan(&state, started);

        // The certificates the state names reach the nodes before the state does.
        let cert_writes = p.node_certs.map(|c| c.writes).unwrap_or_default();
        let mut failed = 0;
        if !cert_writes.apply.is_empty() {
            let leader_flag = self.leader.clone();
            failed += self
                .node_secrets
                .apply(
                    &cert_writes,
                    move || leader_flag.load(Ordering::SeqCst),
                    &self.metrics,
                )
                .await;
        }
        self.metrics.set_vips(state.vips.keys().copied().collect());
        if p.changed {
            if let Err(retry) = self.publish(&state, p.events, started).await {
                return Some(retry);
            }
        }
        // ... and those it no longer names leave after it.
        if !cert_writes.delete.is_empty() {
            let leader_flag = self.leader.clone();
            failed += self
                .node_secrets
                .delete(
                    &cert_writes,
                    move || leader_flag.load(Ordering::SeqCst),
                    &self.metrics,
                )
                .await;
        }
        self.previous.state = Some(state);
        self.previous.status = p.status;
        self.previous.gateway_status = p.gateway_status;
        failed += self
            .write_statuses(&p.patches, &p.clears, &p.gateway_writes)
            .await;
        // Asked again: a lost lease after the publish leaves readiness to the next tick.
        if self.is_leader() {
            self.metrics
                .readiness
                .ready("leader: the current state is published");
        }
        (failed > 0 || self.previous.status.pending()).then_some(RETRY)
    }

    /// The plan's metrics: one more plan, how long it took, its problems by reason.
    fn count_plan(&self, state: &k8slb_common::state::State, started: std::time::Instant) {
        self.metrics.plans_total.inc();
        self.metrics
            .plan_duration_seconds
            .observe(started.elapsed().as_secs_f64());
        self.metrics.problems.clear();
        for problem in &state.problems {
            self.metrics
                .problems
                .get_or_create(&ReasonLabel {
                    reason: problem.reason.clone(),
                })
                .inc();
        }
    }

    /// Publish `state`, then record its Events. Err: when to try again (no longer the
    /// leader, or the write failed).
    async fn publish(
        &mut self,
        state: &k8slb_common::state::State,
        events: Vec<crate::events::Note>,
        started: std::time::Instant,
    ) -> Result<(), Duration> {
        let leader_flag = self.leader.clone();
        match self
            .publisher
            .publish(state, move || leader_flag.load(Ordering::SeqCst))
            .await
        {
            Ok(writes) => {
                self.metrics.publish("ok");
                self.publish_log.succeeded();
                tracing::info!(
                    services = state.services.len(),
                    vips = state.vips.len(),
                    problems = state.problems.len(),
                    writes,
                    took_ms = started.elapsed().as_millis() as u64,
                    "state published"
                );
                for note in events {
                    self.recorder.record(note);
                }
                Ok(())
            }
            Err(PublishCmError::NotLeader) => {
                self.metrics.publish("not_leader");
                tracing::info!("no longer the leader; the state is left to the next one");
                Err(RETRY)
            }
            Err(e) => {
                self.metrics.publish(e.category());
                self.metrics.write_failed("publish", e.code());
                self.publish_log.failed(1, &e.to_string());
                self.metrics
                    .readiness
                    .not_ready(format!("leader: publishing the state failed: {e}"));
                Err(RETRY)
            }
        }
    }

    /// The Service and Ingress status writes, then the Gateway API ones: how many
    /// failed.
    async fn write_statuses(
        &mut self,
        patches: &[crate::status::StatusPatch],
        clears: &[crate::status::StatusClear],
        gateway_writes: &[crate::gateway_status::GwWrite],
    ) -> usize {
        let leader_flag = self.leader.clone();
        let out = self
            .status
            .execute(
                patches,
                clears,
                &mut self.previous.status,
                move || leader_flag.load(Ordering::SeqCst),
                &self.metrics,
            )
            .await;
        let mut failed = out.failed;
        if let Some(w) = &mut self.gateway_status {
            let leader_flag = self.leader.clone();
            failed += w
                .execute(
                    gateway_writes,
                    &mut self.previous.gateway_status,
                    move || leader_flag.load(Ordering::SeqCst),
                    &self.metrics,
                )
                .await;
        }
        failed
    }
}
