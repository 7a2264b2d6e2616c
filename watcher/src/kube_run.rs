//! `k8slb-watcher run --source kubernetes --state-out configmap`: the Kubernetes loop.
//!
//! 1. Start the watchers ([`crate::kube_source`]) and wait until every store has its first
//!    complete list: nothing is planned before (the previous state and every Service's
//!    status are then known, so allocation is sticky from the first plan).
//! 2. Start the leader election ([`crate::leader`]). Every replica keeps its stores warm;
//!    only the leader plans, publishes, patches status and writes Events.
//! 3. On a debounced tick (after the last change, bounded), a periodic resync, a leadership
//!    change or a retry: read the config (an invalid one keeps the last good one in force),
//!    take the previous state (what this leader published, or what the state ConfigMaps
//!    hold), plan, publish if it changed ([`crate::publish_cm`]), then Events
//!    ([`crate::events`]) for what changed and Service status ([`crate::status`]).
//!
//! Without a valid config ever seen, nothing is published: an empty or partial input
//! never becomes an empty state.

use crate::admin::{self, Metrics, ReasonLabel};
use crate::events::{self, Lookup, Note, Recorder, Target};
use crate::failing::FailureLog;
use crate::kube_source::{ConfigRead, Stores, GLOBAL_CONFIGMAP};
use crate::leader::{self, LeaseConfig};
use crate::publish_cm::{PublishCmError, Publisher, StateLoad};
use crate::status::StatusWriter;
use crate::Error;
use k8s_openapi::api::core::v1::ConfigMap;
use k8slb_common::config::GlobalConfig;
use k8slb_common::plan::{plan, PlanOptions};
use k8slb_common::state::{ObjRef, Problem, Reason, State};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The HTTP status code of an API error, if it is one.
pub fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

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
        let bound = admin::serve(addr, metrics.clone(), shutdown.clone())
            .await
            .map_err(|e| Error::Usage(format!("cannot listen on {addr}: {e}")))?;
        tracing::info!(addr = %bound, "admin server listening");
    }
    let changed = Arc::new(Notify::new());
    let stores_stop = shutdown.child_token();
    let _stores_stop_on_drop = stores_stop.clone().drop_guard();
    let stores = Stores::spawn(&client, &args.namespace, changed.clone(), &stores_stop);
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
    let election = if args.leader_election {
        Some(tokio::spawn(leader::run(
            client.clone(),
            LeaseConfig {
                namespace: args.namespace.clone(),
                identity: args.identity.clone(),
                duration: args.lease_duration,
                renew: args.lease_renew,
            },
            leader_tx,
            leader_flag.clone(),
            election_stop.clone(),
            abandon.clone(),
        )))
    } else {
        leader_flag.store(true, Ordering::SeqCst);
        leader_tx.send_replace(true);
        // Keep the sender alive so `changed()` never fails.
        let stop = election_stop.clone();
        let gone = abandon.clone();
        Some(tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = gone.cancelled() => {}
            }
            drop(leader_tx);
        }))
    };
    let recorder_stop = abandon.child_token();
    let recorder = Recorder::spawn(
        client.clone(),
        args.identity.clone(),
        args.events_per_second,
        leader_flag.clone(),
        metrics.clone(),
        recorder_stop.clone(),
    );
    let mut lp = Loop {
        publisher: Publisher::new(
            Api::<ConfigMap>::namespaced(client.clone(), &args.namespace),
            &args.namespace,
        ),
        status: StatusWriter::new(client.clone(), args.status_hostname),
        stores,
        recorder,
        metrics: metrics.clone(),
        leader: leader_flag.clone(),
        was_leader: false,
        published: None,
        good_cfg: None,
        cfg_error: None,
        cfg_event_sent: false,
        in_progress_since: None,
        waiting_logged: false,
        publish_log: FailureLog::new("publishing the state"),
        args: args.clone(),
    };
    let mut resync = tokio::time::interval(args.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    resync.tick().await;
    let mut retry: Option<Duration> = None;
    'outer: loop {
        retry = lp.tick(retry).await;
        let retry_sleep = async {
            match retry {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = changed.notified() => {
                let first = Instant::now();
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => break 'outer,
                        _ = tokio::time::sleep(args.debounce) => break,
                        _ = changed.notified() => {
                            if first.elapsed() >= args.debounce_max {
                                break;
                            }
                        }
                    }
                }
            }
            _ = resync.tick() => {}
            _ = leader_rx.changed() => {}
            _ = retry_sleep => {}
        }
    }
    tracing::info!("shutting down");
    metrics.readiness.not_ready("shutting down");
    election_stop.cancel();
    if let Some(h) = election {
        let _ = tokio::time::timeout(Duration::from_secs(10), h).await;
    }
    leader_flag.store(false, Ordering::SeqCst);
    metrics.is_leader.set(0);
    recorder_stop.cancel();
    Ok(())
}

struct Loop {
    args: KubeArgs,
    stores: Stores,
    publisher: Publisher,
    status: StatusWriter,
    recorder: Recorder,
    metrics: Metrics,
    leader: Arc<AtomicBool>,
    was_leader: bool,
    /// What this leader published (None: take it from the cluster).
    published: Option<State>,
    good_cfg: Option<GlobalConfig>,
    cfg_error: Option<String>,
    cfg_event_sent: bool,
    in_progress_since: Option<Instant>,
    waiting_logged: bool,
    publish_log: FailureLog,
}

impl Lookup for Stores {
    fn service_uid(&self, ns: &str, name: &str) -> Option<String> {
        let g = self.service(ns, name)?;
        g.0.as_ref()
            .map(|s| s.metadata.uid.clone())
            .unwrap_or_else(|bad| bad.metadata.uid.clone())
    }
    fn node_uid(&self, name: &str) -> Option<String> {
        self.nodes.get(&ObjectRef::new(name))?.metadata.uid.clone()
    }
}

const RETRY: Duration = Duration::from_secs(1);

impl Loop {
    fn is_leader(&self) -> bool {
        self.leader.load(Ordering::SeqCst)
    }

    fn global_name(&self) -> String {
        format!("ConfigMap {}/{GLOBAL_CONFIGMAP}", self.args.namespace)
    }

    fn read_config(&mut self) {
        let why = match self.stores.config() {
            ConfigRead::Valid(c) => {
                if self.cfg_error.take().is_some() {
                    tracing::info!("the global config is valid again");
                }
                for w in &c.warnings {
                    tracing::warn!(warning = %w, "config");
                }
                self.metrics.config_valid.set(1);
                self.good_cfg = Some(*c);
                return;
            }
            ConfigRead::Missing if self.good_cfg.is_none() => {
                if !self.waiting_logged {
                    tracing::warn!(configmap = %self.global_name(), "no global config yet; nothing is allocated until it exists");
                    self.waiting_logged = true;
                }
                self.metrics.config_valid.set(0);
                return;
            }
            ConfigRead::Missing => "the ConfigMap is gone".to_string(),
            ConfigRead::Invalid(why) => why,
        };
        self.metrics.config_valid.set(0);
        if self.cfg_error.as_ref() != Some(&why) {
            tracing::error!(configmap = %self.global_name(), error = %why, "invalid global config; the last good one stays in force");
            self.metrics.config_errors_total.inc();
            self.cfg_error = Some(why);
            self.cfg_event_sent = false;
        }
    }

    fn config_problem(&self) -> Option<Problem> {
        let why = self.cfg_error.as_ref()?;
        Some(Problem {
            object: ObjRef::ConfigMap {
                namespace: self.args.namespace.clone(),
                name: GLOBAL_CONFIGMAP.into(),
            },
            reason: Reason::InvalidConfig,
            message: if self.good_cfg.is_some() {
                format!("{why}; the last good config stays in force")
            } else {
                format!("{why}; nothing is allocated until the config is valid")
            },
        })
    }

    /// One round. Returns when to retry (None: wait for a change).
    async fn tick(&mut self, _last_retry: Option<Duration>) -> Option<Duration> {
        let leader = self.is_leader();
        if leader && !self.was_leader {
            // Another watcher may have published since we last did.
            self.published = None;
            self.publisher.reset_from(&self.stores.configmaps.state());
            self.status.reset();
            self.cfg_event_sent = false;
            // Ready again only once this leader has published (or found published) the
            // current state.
            self.metrics
                .readiness
                .not_ready("leader: the state is not published yet");
        }
        // After the readiness reset: never "leading" with a follower's readiness.
        self.metrics.is_leader.set(i64::from(leader));
        self.was_leader = leader;
        self.read_config();
        if !leader {
            // Only ticks after every store's first list: synced.
            self.metrics
                .readiness
                .ready("follower: caches synced; ready to take over");
            return None;
        }
        if let (Some(p), false) = (self.config_problem(), self.cfg_event_sent) {
            if let Some(cm) = self.stores.configmap(GLOBAL_CONFIGMAP) {
                self.recorder.record(Note {
                    target: Target {
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        namespace: Some(self.args.namespace.clone()),
                        name: GLOBAL_CONFIGMAP.into(),
                        uid: cm.metadata.uid.clone().unwrap_or_default(),
                    },
                    reason: p.reason.clone(),
                    action: "LoadConfig",
                    message: p.message.clone(),
                });
            }
            self.cfg_event_sent = true;
        }
        let Some(cfg) = self.good_cfg.clone() else {
            // Never publish without a config.
            self.metrics.readiness.not_ready(format!(
                "leader: no valid global config ({}) yet; nothing is published",
                self.global_name()
            ));
            return None;
        };

        let previous = match &self.published {
            Some(p) => Some(p.clone()),
            None => match self.stores.previous_state() {
                StateLoad::None => None,
                StateLoad::Loaded(s) => Some(*s),
                StateLoad::InProgress(why) => {
                    let since = *self.in_progress_since.get_or_insert_with(Instant::now);
                    if since.elapsed() < self.args.state_in_progress_grace {
                        tracing::info!(reason = %why, "the published state is being written; waiting");
                        self.metrics.readiness.not_ready(format!(
                            "leader: waiting for the state being written: {why}"
                        ));
                        return Some(RETRY);
                    }
                    tracing::warn!(reason = %why, "the published state stays incomplete; starting from the Services' status");
                    None
                }
                StateLoad::Unreadable(why) => {
                    tracing::warn!(reason = %why, "the published state cannot be read; starting from the Services' status");
                    None
                }
            },
        };
        self.in_progress_since = None;

        let started = std::time::Instant::now();
        let objs = self.stores.objects();
        let mut state = plan(&cfg, &self.args.plan, &objs, previous.as_ref());
        if let Some(p) = self.config_problem() {
            state.problems.push(p);
            state.problems.sort();
            state.problems.dedup();
        }
        self.metrics.plans_total.inc();
        self.metrics
            .plan_duration_seconds
            .observe(started.elapsed().as_secs_f64());
        self.metrics.problems.clear();
        for p in &state.problems {
            self.metrics
                .problems
                .get_or_create(&ReasonLabel {
                    reason: p.reason.clone(),
                })
                .inc();
        }

        let mut retry = None;
        if previous.as_ref() != Some(&state) {
            let leader_flag = self.leader.clone();
            match self
                .publisher
                .publish(&state, move || leader_flag.load(Ordering::SeqCst))
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
                    let empty = State::empty(cfg.actor_config(&self.args.plan.cert_path));
                    let prev = previous.as_ref().unwrap_or(&empty);
                    for note in events::diff(prev, &state, &self.stores) {
                        self.recorder.record(note);
                    }
                    self.status.released(prev, &state);
                    self.published = Some(state);
                }
                Err(PublishCmError::NotLeader) => {
                    self.metrics.publish("not_leader");
                    tracing::info!("no longer the leader; the state is left to the next one");
                    return Some(RETRY);
                }
                Err(e) => {
                    self.metrics.publish(e.category());
                    self.metrics.write_failed("publish", e.code());
                    self.publish_log.failed(1, &e.to_string());
                    self.metrics
                        .readiness
                        .not_ready(format!("leader: publishing the state failed: {e}"));
                    return Some(RETRY);
                }
            }
        } else {
            self.published = Some(state);
        }
        let published = self.published.clone().expect("set above");
        let leader_flag = self.leader.clone();
        let out = self
            .status
            .reconcile(
                &published,
                &self.stores,
                move || leader_flag.load(Ordering::SeqCst),
                &self.metrics,
            )
            .await;
        if out.failed > 0 || self.status.pending() {
            retry = Some(RETRY);
        }
        // Asked again: a lost lease after the publish leaves readiness to the next tick.
        if self.is_leader() {
            self.metrics
                .readiness
                .ready("leader: the current state is published");
        }
        retry
    }
}
