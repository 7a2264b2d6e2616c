//! The watcher's admin answers: `/livez`, `/readyz` and `/metrics` (Prometheus text
//! format; the server itself is [`k8slb_common::admin`], shared with the actor).
//!
//! `/readyz` tells the truth about the watcher's job ([`Readiness`]): a follower is ready
//! once its caches are synced (it can take over at once); a leader only once the current
//! state is published since it became the leader, and not while its last attempt to
//! publish failed; the files source once the state file holds the current state. The body
//! says why, e.g. `not ready: leader: publishing the state failed: cannot apply ConfigMap
//! k8slb-state: 403 Forbidden: ...`.

use crate::kube::WriteFailures;
use k8slb_common::admin::{self, Admin, Probe};
use k8slb_common::problem::Reason;
use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// Whether the watcher does its job, and why (not): shared by the loop and `/readyz`.
#[derive(Clone, Debug)]
pub struct Readiness {
    inner: Arc<Mutex<(bool, String)>>,
    gauge: Gauge,
}

impl Readiness {
    fn new(gauge: Gauge) -> Self {
        Readiness {
            inner: Arc::new(Mutex::new((false, "starting".into()))),
            gauge,
        }
    }

    fn set(&self, ready: bool, why: String) {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if g.0 != ready || g.1 != why {
            if ready != g.0 {
                tracing::info!(ready, why = %why, "readiness changed");
            }
            *g = (ready, why);
        }
        self.gauge.set(i64::from(ready));
    }

    pub fn ready(&self, why: impl Into<String>) {
        self.set(true, why.into());
    }

    pub fn not_ready(&self, why: impl Into<String>) {
        self.set(false, why.into());
    }

    pub fn is_ready(&self) -> bool {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).0
    }

    /// `(ready, why)`.
    pub fn get(&self) -> (bool, String) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ReasonLabel {
    /// A problem or event reason: a fixed set, so a bounded label.
    pub reason: Reason,
}

impl EncodeLabelSet for ReasonLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabel::encode(&("reason", self.reason.as_str()), encoder.encode_label())
    }
}

/// Every metric of the watcher. Cheap to clone (the families are `Arc`s inside).
#[derive(Clone)]
pub struct Metrics {
    pub plans_total: Counter,
    pub plan_duration_seconds: Histogram,
    pub publishes_total: Family<ResultLabel, Counter>,
    pub status_patches_total: Family<ResultLabel, Counter>,
    pub events_total: Family<ReasonLabel, Counter>,
    pub is_leader: Gauge,
    pub problems: Family<ReasonLabel, Gauge>,
    /// 1 while the global ConfigMap in the cluster is valid, 0 while an invalid one is
    /// ignored (the last good config stays in force).
    pub config_valid: Gauge,
    pub config_errors_total: Counter,
    /// Failed writes by kind and code (every attempt; the log says it once a minute).
    pub write_failures_total: WriteFailures,
    pub readiness: Readiness,
    registry: Arc<Registry>,
    /// The VIPs of the last planned state: the admin port never answers on them (in the
    /// standalone mode the watcher may run on an LB node's host network).
    vips: Arc<std::sync::Mutex<std::collections::BTreeSet<std::net::IpAddr>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("k8slb_watcher");
        let plans_total = Counter::default();
        let plan_duration_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        let publishes_total = Family::<ResultLabel, Counter>::default();
        let status_patches_total = Family::<ResultLabel, Counter>::default();
        let events_total = Family::<ReasonLabel, Counter>::default();
        let is_leader = Gauge::default();
        let problems = Family::<ReasonLabel, Gauge>::default();
        let config_valid = Gauge::default();
        let config_errors_total = Counter::default();
        let write_failures_total = WriteFailures::default();
        let ready = Gauge::default();
        r.register("plans", "Plans computed", plans_total.clone());
        r.register(
            "plan_duration_seconds",
            "Time to build the objects and compute one plan",
            plan_duration_seconds.clone(),
        );
        r.register(
            "publishes",
            "State ConfigMap writes by result",
            publishes_total.clone(),
        );
        r.register(
            "status_patches",
            "Status writes by result: Service and Ingress status patches, and the Gateway API status (GatewayClass, Gateway, routes)",
            status_patches_total.clone(),
        );
        r.register("events", "Events written by reason", events_total.clone());
        r.register(
            "is_leader",
            "1 while this watcher holds the Lease",
            is_leader.clone(),
        );
        r.register(
            "problems",
            "Problems in the current state by reason",
            problems.clone(),
        );
        r.register(
            "config_valid",
            "1 while the global ConfigMap is valid",
            config_valid.clone(),
        );
        r.register(
            "config_errors",
            "Invalid global configs seen",
            config_errors_total.clone(),
        );
        r.register(
            "write_failures",
            "Failed API writes by kind (publish, status, event) and HTTP code",
            write_failures_total.family(),
        );
        r.register(
            "ready",
            "1 while /readyz answers 200 (synced follower, or leader whose state is published)",
            ready.clone(),
        );
        Metrics {
            plans_total,
            plan_duration_seconds,
            publishes_total,
            status_patches_total,
            events_total,
            is_leader,
            problems,
            config_valid,
            config_errors_total,
            write_failures_total,
            readiness: Readiness::new(ready),
            registry: Arc::new(r),
            vips: Default::default(),
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }

    /// The VIPs the admin port must not answer on.
    pub fn set_vips(&self, vips: std::collections::BTreeSet<std::net::IpAddr>) {
        *self.vips.lock().unwrap_or_else(|p| p.into_inner()) = vips;
    }

    pub fn publish(&self, result: &'static str) {
        self.publishes_total
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub fn status_patch(&self, result: &'static str) {
        self.status_patches_total
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// Counter value of `publishes_total{result}` (tests and logs).
    pub fn publishes(&self, result: &'static str) -> u64 {
        self.publishes_total
            .get_or_create(&ResultLabel { result })
            .get()
    }

    pub fn status_patches(&self, result: &'static str) -> u64 {
        self.status_patches_total
            .get_or_create(&ResultLabel { result })
            .get()
    }

    pub fn events_written(&self) -> u64 {
        // Families cannot be iterated; the reasons we emit are a fixed set plus problem
        // reasons, so tests ask per reason through `events_total` directly. This sums the
        // common ones.
        EVENT_REASONS
            .iter()
            .map(|r| {
                self.events_total
                    .get_or_create(&ReasonLabel { reason: r.clone() })
                    .get()
            })
            .sum()
    }

    pub fn leading(&self) -> bool {
        self.is_leader.get() == 1
    }

    pub fn is_ready(&self) -> bool {
        self.readiness.is_ready()
    }

    /// 1 while the global config is valid; one more config error when `new_error`.
    pub fn config(&self, valid: bool, new_error: bool) {
        self.config_valid.set(i64::from(valid));
        if new_error {
            self.config_errors_total.inc();
        }
    }

    /// Counts one failed write of kind `write` (`publish`, `status`, `event`).
    pub fn write_failed(&self, write: &'static str, code: String) {
        self.write_failures_total.count(write, code);
    }

    /// Counter value of `write_failures_total{write, code}` (tests).
    pub fn write_failures(&self, write: &'static str, code: &str) -> u64 {
        self.write_failures_total.get(write, code)
    }
}

/// The Event reasons the watcher itself names (problem reasons come on top).
pub const EVENT_REASONS: &[Reason] = &[
    Reason::IpAllocated,
    Reason::IpReleased,
    Reason::NodeChanged,
    Reason::InvalidConfig,
];

impl Admin for Metrics {
    /// The watcher is live while it answers at all.
    fn livez(&self) -> Probe {
        Probe::ok("ok\n")
    }

    fn readyz(&self) -> Probe {
        match self.readiness.get() {
            (true, why) => Probe::ok(format!("ready: {why}\n")),
            (false, why) => Probe::failing(format!("not ready: {why}\n")),
        }
    }

    fn metrics(&self) -> String {
        self.encode()
    }

    fn answers_on(&self, local: std::net::IpAddr) -> bool {
        !self
            .vips
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&local)
    }
}

/// Serve the admin port until `shutdown` (the server is [`k8slb_common::admin`]'s).
/// Returns the bound address (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let (local, _task) = admin::start(addr, Arc::new(metrics), shutdown.cancelled_owned()).await?;
    Ok(local)
}
