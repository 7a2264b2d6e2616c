//! The node report: what this actor leaves out of its proxy config ([`crate::quarantine`]),
//! published for the watcher as the ConfigMap `k8slb-node-<node>` in k8slb's namespace
//! ([`k8slb_common::report`]). The watcher makes a `ProxyRefused` problem of each entry: an
//! Event on the object and a line in the state.
//!
//! The control loop hands every report to [`Reporter::set`] (cheap, never blocks); a task
//! on the runtime writes the newest one with a server-side apply (field manager
//! [`FIELD_MANAGER`]) when it differs from the last one written, and retries with backoff
//! (0.5 s doubling to 30 s) while the API server refuses or is away, and writes it again
//! every [`REFRESH`] even unchanged. The first report, an
//! empty one unless something is already refused, is written at start: it replaces the
//! report of this node's previous actor, and lists the optional features this build
//! renders ([`k8slb_common::features`]; every report does), without which the watcher
//! plans none of them (version skew: an actor older than a feature would serve it
//! wrongly). RBAC: `configmaps` `patch` in k8slb's namespace.
//! The files mode has no reporter: the quarantine is in the actor's log and metric.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8slb_common::names::NodeName;
use k8slb_common::report::{configmap_name, NodeReport, REPORT_KEY, REPORT_LABELS};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;

/// The field manager of the actor's writes.
pub const FIELD_MANAGER: &str = "k8slb-actor";
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How often the report is written again though it did not change (an apply of the
/// same content changes nothing): a report deleted by someone comes back, so the
/// watcher does not take this node for one without features for long.
pub const REFRESH: Duration = Duration::from_secs(300);

/// The control loop's end: the newest report, for the writer task.
#[derive(Debug, Clone)]
pub struct Reporter {
    tx: watch::Sender<NodeReport>,
}

impl Reporter {
    /// A reporter and the receiving end for [`write_reports`].
    pub fn new(node: &NodeName, proxy: &str) -> (Self, watch::Receiver<NodeReport>) {
        let (tx, rx) = watch::channel(NodeReport::new(node, proxy, []));
        (Reporter { tx }, rx)
    }

    /// The report now; the writer sees it only when it differs from the previous one.
    pub fn set(&self, report: NodeReport) {
        self.tx.send_if_modified(|r| {
            if *r == report {
                return false;
            }
            *r = report;
            true
        });
    }
}

/// The ConfigMap that carries `report`.
pub fn configmap(report: &NodeReport, node: &NodeName) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(configmap_name(node)),
            labels: Some(
                REPORT_LABELS
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(REPORT_KEY.to_string(), report.to_json())])),
        ..Default::default()
    }
}

/// Writes the newest report of `rx` until its sender is gone: the first one at once, then
/// each change, and again every `refresh` (a deleted report comes back); a refused write
/// is retried with backoff (a newer report replaces the one being retried).
pub async fn write_reports(
    client: Client,
    namespace: String,
    node: NodeName,
    mut rx: watch::Receiver<NodeReport>,
    refresh: Duration,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let name = configmap_name(&node);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let mut written: Option<NodeReport> = None;
    let mut backoff = BACKOFF_MIN;
    loop {
        let report = rx.borrow_and_update().clone();
        if written.as_ref() != Some(&report) {
            match api
                .patch(&name, &pp, &Patch::Apply(&configmap(&report, &node)))
                .await
            {
                Ok(_) => {
                    tracing::debug!(configmap = %name, quarantined = report.quarantined.len(), "node report written");
                    written = Some(report);
                    backoff = BACKOFF_MIN;
                }
                Err(e) => {
                    tracing::warn!(configmap = %name, namespace = %namespace, error = %e, retry_in = ?backoff, "could not write the node report");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        r = rx.changed() => if r.is_err() { return },
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            }
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(refresh) => written = None,
        }
    }
}
