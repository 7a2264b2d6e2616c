//! The actor's admin answers: `/livez`, `/readyz`, `/metrics` (the server itself is
//! [`k8slb_common::admin`], shared with the watcher).
//!
//! Default address `0.0.0.0:9254` (`--admin-addr`): the actor runs with hostNetwork, and
//! kubelet's HTTP probes go to the node address, so loopback would fail them. It never
//! answers on a VIP (of the state being applied or of the one before it): such a
//! connection is closed unanswered. Port
//! 10254 is avoided on purpose: ingress-nginx uses it, and both may run on one node.
//!
//! - `/livez`: 200 while the control loop ticks (no tick for 30 s: 503);
//! - `/readyz`: 200 only while the daemons run the applied config (after the first
//!   successful apply, and while no daemon is down or failed its last start or
//!   reload, and while the newest state is for this actor's provider); 503 with the
//!   reason otherwise (`not ready: haproxy not running: ...`, `not ready: the state was
//!   planned for provider nginx, but this actor runs haproxy ...`);
//! - `/metrics`: Prometheus text (prometheus-client), families below.
//!
//! Metric families (all prefixed `k8slb_actor_`):
//! `reloads_total{daemon,result}`, `runtime_api_updates_total`,
//! `config_check_failures_total{daemon}`, `child_restarts_total{daemon}`,
//! `state_refused_total`, `provider_mismatch{planned}` (1 while the newest state was
//! planned for another provider, which is not rendered), `applies_total{result}`, `vips_held{pool,vip}` (1 per VIP of
//! the state that this node holds now), `fd_limit` (the open-files hard limit the proxy
//! runs under), `proxy_maxconn` (HAProxy's global `maxconn` or nginx's
//! `worker_connections` as rendered, after fitting to `fd_limit`; 0 when the admin sets
//! none and HAProxy derives its own), `quarantined_objects` (how many objects the actor
//! leaves out of the proxy config because its checker refuses their part: see
//! [`crate::quarantine`]; no label, the objects are in the log). The `vip` label is bounded: VIPs come only from
//! the admin's pools and the state, never from client traffic.

use crate::daemons::DaemonKind;
use k8slb_common::admin::{self, Admin, Probe};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DaemonResult {
    pub daemon: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DaemonLabel {
    pub daemon: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlannedLabel {
    /// The provider the refused state was planned for.
    pub planned: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VipLabel {
    pub pool: String,
    pub vip: String,
}

/// Every metric of the actor, registered once.
pub struct Metrics {
    registry: Registry,
    pub reloads: Family<DaemonResult, Counter>,
    pub runtime_api_updates: Counter,
    pub config_check_failures: Family<DaemonLabel, Counter>,
    pub child_restarts: Family<DaemonLabel, Counter>,
    pub state_refused: Counter,
    pub provider_mismatch: Family<PlannedLabel, Gauge>,
    pub applies: Family<ResultLabel, Counter>,
    pub vips_held: Family<VipLabel, Gauge>,
    pub fd_limit: Gauge,
    pub proxy_maxconn: Gauge,
    pub quarantined_objects: Gauge,
    /// BGP mode ([`crate::frr`]): this node's peers, established sessions, BFD
    /// sessions up, and host routes announced.
    pub bgp_peers: Gauge,
    pub bgp_sessions_established: Gauge,
    pub bfd_sessions_up: Gauge,
    pub bgp_prefixes_announced: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("k8slb_actor");
        let mut metrics = Metrics {
            registry: Registry::default(),
            reloads: Family::default(),
            runtime_api_updates: Counter::default(),
            config_check_failures: Family::default(),
            child_restarts: Family::default(),
            state_refused: Counter::default(),
            provider_mismatch: Family::default(),
            applies: Family::default(),
            vips_held: Family::default(),
            fd_limit: Gauge::default(),
            proxy_maxconn: Gauge::default(),
            quarantined_objects: Gauge::default(),
            bgp_peers: Gauge::default(),
            bgp_sessions_established: Gauge::default(),
            bfd_sessions_up: Gauge::default(),
            bgp_prefixes_announced: Gauge::default(),
        };
        // Registration order is the order of `/metrics`: BGP's gauges first, as before.
        metrics.register_bgp(&mut registry);
        metrics.register_daemons_and_applies(&mut registry);
        metrics.registry = registry;
        metrics
    }

    /// BGP mode's gauges.
    fn register_bgp(&self, registry: &mut Registry) {
        registry.register(
            "bgp_peers",
            "BGP peers of this node (BGP-mode pools)",
            self.bgp_peers.clone(),
        );
        registry.register(
            "bgp_sessions_established",
            "BGP sessions of this node in state Established",
            self.bgp_sessions_established.clone(),
        );
        registry.register(
            "bfd_sessions_up",
            "BFD sessions of this node that are up",
            self.bfd_sessions_up.clone(),
        );
        registry.register(
            "bgp_prefixes_announced",
            "Host routes (BGP-mode VIPs) this node announces now",
            self.bgp_prefixes_announced.clone(),
        );
    }

    /// The daemons', the applies' and the node's families.
    fn register_daemons_and_applies(&self, registry: &mut Registry) {
        registry.register(
            "reloads",
            "Reloads (and starts) of a daemon, by result (ok, failed)",
            self.reloads.clone(),
        );
        registry.register(
            "runtime_api_updates",
            "Endpoint-only changes applied over the HAProxy Runtime API, without a reload",
            self.runtime_api_updates.clone(),
        );
        registry.register(
            "config_check_failures",
            "Rendered configs refused by the daemon's own checker (never installed)",
            self.config_check_failures.clone(),
        );
        registry.register(
            "child_restarts",
            "Restarts of a daemon that died",
            self.child_restarts.clone(),
        );
        registry.register(
            "state_refused",
            "State documents refused: unreadable, or planned for another provider (the previous one is kept)",
            self.state_refused.clone(),
        );
        registry.register(
            "provider_mismatch",
            "1 while the newest state was planned for another provider than this actor's (labelled with it): not rendered",
            self.provider_mismatch.clone(),
        );
        registry.register(
            "applies",
            "Applies of a new state, by result (ok, failed, unchanged)",
            self.applies.clone(),
        );
        registry.register(
            "vips_held",
            "1 for each VIP of the state that this node holds now",
            self.vips_held.clone(),
        );
        registry.register(
            "fd_limit",
            "Open-files hard limit the proxy runs under (the actor raises its soft limit to it)",
            self.fd_limit.clone(),
        );
        registry.register(
            "proxy_maxconn",
            "HAProxy's global maxconn or nginx's worker_connections as rendered, after fitting to fd_limit",
            self.proxy_maxconn.clone(),
        );
        registry.register(
            "quarantined_objects",
            "Objects whose part of the proxy config its checker refuses: left out, everything else served",
            self.quarantined_objects.clone(),
        );
    }

    /// BGP mode's gauges (see [`crate::frr::Bgp`]).
    pub fn set_bgp(&self, peers: usize, established: usize, bfd_up: usize, announced: usize) {
        let g = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.bgp_peers.set(g(peers));
        self.bgp_sessions_established.set(g(established));
        self.bfd_sessions_up.set(g(bfd_up));
        self.bgp_prefixes_announced.set(g(announced));
    }

    pub fn reload(&self, daemon: DaemonKind, ok: bool) {
        self.reloads
            .get_or_create(&DaemonResult {
                daemon: daemon.as_str().into(),
                result: if ok { "ok" } else { "failed" }.into(),
            })
            .inc();
    }

    pub fn check_failure(&self, daemon: DaemonKind) {
        self.config_check_failures
            .get_or_create(&DaemonLabel {
                daemon: daemon.as_str().into(),
            })
            .inc();
    }

    pub fn child_restart(&self, daemon: DaemonKind) {
        self.child_restarts
            .get_or_create(&DaemonLabel {
                daemon: daemon.as_str().into(),
            })
            .inc();
    }

    pub fn apply(&self, result: &'static str) {
        self.applies
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }

    /// `provider_mismatch`: 1 for `planned` (the provider of a refused state), or
    /// nothing.
    pub fn set_provider_mismatch(&self, planned: Option<k8slb_common::state::Provider>) {
        self.provider_mismatch.clear();
        if let Some(p) = planned {
            self.provider_mismatch
                .get_or_create(&PlannedLabel {
                    planned: p.as_str().into(),
                })
                .set(1);
        }
    }

    /// Replace the whole `vips_held` family with `held` (pool, vip).
    pub fn set_vips_held<'a>(&self, held: impl IntoIterator<Item = (&'a str, String)>) {
        self.vips_held.clear();
        for (pool, vip) in held {
            self.vips_held
                .get_or_create(&VipLabel {
                    pool: pool.into(),
                    vip,
                })
                .set(1);
        }
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// Liveness and readiness, shared between the control loop and the admin server.
#[derive(Debug, Default)]
pub struct Health {
    last_tick_ms: AtomicU64,
    ready: AtomicBool,
    /// Why not ready (`None` while ready, or before anyone said).
    not_ready: Mutex<Option<String>>,
    last_error: Mutex<Option<String>>,
    /// The VIPs of the states being applied (and of the ones before them, which may
    /// still be on an interface): the admin port never answers on them.
    vips: Mutex<std::collections::BTreeSet<std::net::IpAddr>>,
}

/// No tick for this long: `/livez` fails.
pub const LIVENESS_WINDOW: Duration = Duration::from_secs(30);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Health {
    pub fn tick(&self) {
        self.last_tick_ms.store(now_ms(), Ordering::Relaxed);
    }
    pub fn is_live(&self) -> bool {
        let last = self.last_tick_ms.load(Ordering::Relaxed);
        last != 0 && now_ms().saturating_sub(last) < LIVENESS_WINDOW.as_millis() as u64
    }
    pub fn set_ready(&self) {
        self.set_readiness(None);
    }
    /// `None`: ready; `Some(why)`: not ready, and why.
    pub fn set_readiness(&self, not_ready: Option<String>) {
        self.ready.store(not_ready.is_none(), Ordering::Relaxed);
        *self.not_ready.lock().unwrap_or_else(|p| p.into_inner()) = not_ready;
    }
    /// Why not ready, if it was said.
    pub fn not_ready(&self) -> Option<String> {
        self.not_ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
    pub fn set_error(&self, e: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = e;
    }
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    /// The VIPs the admin port must not answer on.
    pub fn set_vips(&self, vips: std::collections::BTreeSet<std::net::IpAddr>) {
        *self.vips.lock().unwrap_or_else(|p| p.into_inner()) = vips;
    }
    pub fn is_vip(&self, ip: std::net::IpAddr) -> bool {
        self.vips
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&ip)
    }
}

#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
}

impl Admin for AdminState {
    fn livez(&self) -> Probe {
        if self.health.is_live() {
            Probe::ok("ok\n")
        } else {
            Probe::failing("control loop stalled\n")
        }
    }

    fn readyz(&self) -> Probe {
        let err = self.health.last_error();
        if self.health.is_ready() {
            return Probe::ok(match err {
                Some(e) => format!("ok (last apply failed: {e})\n"),
                None => "ok\n".into(),
            });
        }
        let why = self.health.not_ready();
        let mut body = format!(
            "not ready: {}\n",
            why.as_deref()
                .or(err.as_deref())
                .unwrap_or("no successful apply yet")
        );
        if let (Some(e), Some(w)) = (&err, &why) {
            if !w.contains(e.as_str()) {
                body.push_str(&format!("last apply failed: {e}\n"));
            }
        }
        Probe::failing(body)
    }

    fn metrics(&self) -> String {
        self.metrics.encode()
    }

    /// Never on a VIP: the actor runs on the host network, where every VIP this node
    /// holds is a local address of the same listener.
    fn answers_on(&self, local: std::net::IpAddr) -> bool {
        !self.health.is_vip(local)
    }
}

/// Bind `addr` and serve until `shutdown` resolves (the server is
/// [`k8slb_common::admin`]'s).
pub async fn serve(
    addr: SocketAddr,
    state: AdminState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (_, task) = admin::start(addr, Arc::new(state), shutdown).await?;
    task.await.map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_has_the_families() {
        let m = Metrics::new();
        m.reload(DaemonKind::Haproxy, true);
        m.check_failure(DaemonKind::Nginx);
        m.runtime_api_updates.inc();
        m.set_vips_held([("default", "198.18.0.10".to_string())]);
        let t = m.encode();
        assert!(
            t.contains("k8slb_actor_reloads_total{daemon=\"haproxy\",result=\"ok\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("k8slb_actor_config_check_failures_total{daemon=\"nginx\"} 1"),
            "{t}"
        );
        assert!(t.contains("k8slb_actor_runtime_api_updates_total 1"), "{t}");
        assert!(
            t.contains("k8slb_actor_vips_held{pool=\"default\",vip=\"198.18.0.10\"} 1"),
            "{t}"
        );
        m.set_vips_held([]);
        assert!(!m.encode().contains("198.18.0.10"));
    }

    #[test]
    fn health() {
        let h = Health::default();
        assert!(!h.is_live());
        h.tick();
        assert!(h.is_live());
        assert!(!h.is_ready());
        h.set_ready();
        assert!(h.is_ready());
    }
}
