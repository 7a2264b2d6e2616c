//! The admin port: `/livez`, `/readyz` and `/metrics` (Prometheus text format).
//!
//! `/readyz` answers 200 once the stores are synced and, as the leader, the first state has
//! been published (a follower is ready once synced: it can take over at once).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// A CamelCase word from a fixed set (problem reasons, event reasons): bounded.
    pub reason: String,
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
    pub ready: Arc<AtomicBool>,
    registry: Arc<Registry>,
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
            "Service status patches by result",
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
            ready: Arc::new(AtomicBool::new(false)),
            registry: Arc::new(r),
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
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
                    .get_or_create(&ReasonLabel {
                        reason: (*r).to_string(),
                    })
                    .get()
            })
            .sum()
    }

    pub fn leading(&self) -> bool {
        self.is_leader.get() == 1
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

/// The Event reasons the watcher itself names (problem reasons come on top).
pub const EVENT_REASONS: &[&str] = &["IPAllocated", "IPReleased", "NodeChanged", "InvalidConfig"];

/// Serve the admin port until `shutdown`. Returns the bound address (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let m_ready = metrics.clone();
    let m_metrics = metrics.clone();
    let app = axum::Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let ready = m_ready.is_ready();
                async move {
                    if ready {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let body = m_metrics.encode();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        body,
                    )
                }
            }),
        );
    tokio::spawn(async move {
        let r = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "admin server failed");
        }
    });
    Ok(local)
}
