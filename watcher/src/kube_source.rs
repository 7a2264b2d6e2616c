//! The `kubernetes` source: kube-runtime watchers feeding reflector stores.
//!
//! Services (all namespaces, each wrapped in a [`DeserializeGuard`] so one Service that
//! does not decode is skipped with a problem rather than stopping the stream), EndpointSlices
//! (all namespaces), Nodes, and the ConfigMaps of our namespace (`global` and the state
//! objects). Each watcher retries with kube's default backoff; a reflector swaps its store
//! only when a relist is complete, so a failed or partial list never shows up as missing
//! objects.

use crate::events::Lookup;
use crate::kube::describe;
use crate::publish_cm::{self, StateLoad};
use crate::reconcile::{self, ConfigRead, Source};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8slb_common::config::parse_global_config;
use k8slb_common::objects::Objects;
use k8slb_common::state::{ObjRef, Problem, Reason};
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The name of the global ConfigMap and its key.
pub use crate::reconcile::GLOBAL_CONFIGMAP;
pub const GLOBAL_KEY: &str = "config";

pub type GuardedService = DeserializeGuard<Service>;

/// Read handles on every store.
#[derive(Clone)]
pub struct Stores {
    pub services: Store<GuardedService>,
    pub slices: Store<EndpointSlice>,
    pub nodes: Store<Node>,
    pub configmaps: Store<ConfigMap>,
    pub namespace: String,
}

impl Stores {
    /// Start every watcher; `changed` is notified on every change after the initial lists.
    pub fn spawn(
        client: &Client,
        namespace: &str,
        changed: Arc<Notify>,
        shutdown: &CancellationToken,
    ) -> Stores {
        Stores {
            services: spawn_one(
                Api::<GuardedService>::all(client.clone()),
                "services",
                &changed,
                shutdown,
            ),
            slices: spawn_one(
                Api::<EndpointSlice>::all(client.clone()),
                "endpointslices",
                &changed,
                shutdown,
            ),
            nodes: spawn_one(
                Api::<Node>::all(client.clone()),
                "nodes",
                &changed,
                shutdown,
            ),
            configmaps: spawn_one(
                Api::<ConfigMap>::namespaced(client.clone(), namespace),
                "configmaps",
                &changed,
                shutdown,
            ),
            namespace: namespace.to_string(),
        }
    }

    /// Until every store has seen its first complete list.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.services.wait_until_ready().await?;
        self.slices.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.configmaps.wait_until_ready().await?;
        Ok(())
    }

    /// Where the plan's objects come from: one [`Source`] per store. A new kind (Ingress,
    /// Gateway API) is one more store here.
    pub fn sources(&self) -> Vec<&dyn Source> {
        vec![&self.services, &self.slices, &self.nodes]
    }

    /// The objects the plan reads, sorted by (namespace, name) so the input does not depend
    /// on store order. Undecodable Services become problems. (The plan reads the config
    /// separately; it does not need the ConfigMaps.)
    pub fn objects(&self) -> Objects {
        reconcile::gather(&self.sources())
    }

    /// The uid of the global ConfigMap, if it exists.
    pub fn config_uid(&self) -> Option<String> {
        self.configmap(GLOBAL_CONFIGMAP)
            .map(|cm| cm.metadata.uid.clone().unwrap_or_default())
    }

    pub fn config(&self) -> ConfigRead {
        let Some(cm) = self
            .configmaps
            .get(&ObjectRef::new(GLOBAL_CONFIGMAP).within(&self.namespace))
        else {
            return ConfigRead::Missing;
        };
        let Some(text) = cm.data.as_ref().and_then(|d| d.get(GLOBAL_KEY)) else {
            return ConfigRead::Invalid(format!("it has no data.{GLOBAL_KEY}"));
        };
        match parse_global_config(text) {
            Ok(c) => ConfigRead::Valid(Box::new(c)),
            Err(e) => ConfigRead::Invalid(e.to_string()),
        }
    }

    /// The state published last (by any watcher), from the state ConfigMaps.
    pub fn previous_state(&self) -> StateLoad {
        let get = |name: &str| {
            self.configmaps
                .get(&ObjectRef::new(name).within(&self.namespace))
        };
        publish_cm::load(get)
    }

    pub fn service(&self, ns: &str, name: &str) -> Option<Arc<GuardedService>> {
        self.services.get(&ObjectRef::new(name).within(ns))
    }

    pub fn configmap(&self, name: &str) -> Option<Arc<ConfigMap>> {
        self.configmaps
            .get(&ObjectRef::new(name).within(&self.namespace))
    }
}

/// Services, each decodable one as it is; one that does not decode is held (it keeps what
/// the previous state gave it) and becomes a problem.
impl Source for Store<GuardedService> {
    fn add_to(&self, objs: &mut Objects) {
        for g in self.state() {
            match &g.0 {
                Ok(s) => objs.services.push(s.clone()),
                Err(bad) => {
                    let ns = bad.metadata.namespace.as_deref().unwrap_or_default();
                    let name = bad.metadata.name.as_deref().unwrap_or_default();
                    tracing::warn!(service = %format!("{ns}/{name}"), error = %bad.error, "skipping a Service that does not decode");
                    // It keeps what the previous state gave it.
                    if let Ok(key) = k8slb_common::names::ServiceKey::new(ns, name) {
                        objs.held_services.push(key);
                    }
                    objs.problems.push(Problem {
                        object: ObjRef::service(ns, name),
                        reason: Reason::Undecodable,
                        message: format!("skipped: this Service does not decode: {}", bad.error),
                    });
                }
            }
        }
        objs.services.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
    }
}

impl Source for Store<EndpointSlice> {
    fn add_to(&self, objs: &mut Objects) {
        objs.slices = sorted(self.state());
    }
}

impl Source for Store<Node> {
    fn add_to(&self, objs: &mut Objects) {
        objs.nodes = sorted(self.state());
    }
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

fn sorted<K: Resource + Clone>(items: Vec<Arc<K>>) -> Vec<K> {
    let mut v: Vec<K> = items.into_iter().map(|a| (*a).clone()).collect();
    v.sort_by(|a, b| {
        (&a.meta().namespace, &a.meta().name).cmp(&(&b.meta().namespace, &b.meta().name))
    });
    v
}

/// The longest wait between two attempts of a failing watch. kube-runtime's default (as
/// client-go's) grows to 30 s, so after a 60 s API outage the watches came back up to 30 s
/// after the API server did (9-27 s in the chaos soak), and a Service created then waited
/// for it. 5 s, with jitter, is a few requests a second for the whole cluster.
pub const WATCH_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Exponential from 0.5 s to [`WATCH_MAX_BACKOFF`], with jitter. As kube-runtime's default,
/// it is reset only after 120 s without an error: the stream resets its backoff on any
/// event, and `Init` comes before every re-list, also those that then fail.
fn watch_backoff() -> ResetTimerBackoff<watcher::ExponentialBackoff> {
    let exponential: watcher::ExponentialBackoff = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(WATCH_MAX_BACKOFF)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into();
    ResetTimerBackoff::new(exponential, Duration::from_secs(120))
}

/// A watch error in one line: the API server's code, reason and message (not the whole
/// `Status` debug dump), as [`describe`] does for writes.
fn describe_watch_error(e: &watcher::Error) -> String {
    match e {
        watcher::Error::InitialListFailed(e) => format!("list failed: {}", describe(e)),
        watcher::Error::WatchStartFailed(e) => {
            format!("watch start failed: {}", describe(e))
        }
        watcher::Error::WatchFailed(e) => format!("watch failed: {}", describe(e)),
        watcher::Error::WatchError(s) => {
            format!("watch error: {} {}: {}", s.code, s.reason, s.message)
        }
        other => other.to_string(),
    }
}

fn spawn_one<K>(
    api: Api<K>,
    what: &'static str,
    changed: &Arc<Notify>,
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).backoff(watch_backoff()),
    );
    let changed = changed.clone();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                item = stream.next() => match item {
                    Some(Ok(ev)) => {
                        // `Init` comes before every (re-)list attempt, also those that then
                        // fail: only an event that carries data proves the watch works.
                        if failing && !matches!(ev, watcher::Event::Init) {
                            tracing::info!(resource = what, "watch recovered");
                            failing = false;
                        }
                        match ev {
                            watcher::Event::Init | watcher::Event::InitApply(_) => {}
                            _ => changed.notify_one(),
                        }
                    }
                    Some(Err(e)) => {
                        // The stream backs off by itself; log the first error of a run.
                        let error = describe_watch_error(&e);
                        if !failing {
                            tracing::warn!(resource = what, %error, "watch failed; retrying with backoff, the store keeps its last complete view");
                        } else {
                            tracing::debug!(resource = what, %error, "watch still failing");
                        }
                        failing = true;
                    }
                    None => break,
                },
            }
        }
    });
    reader
}
