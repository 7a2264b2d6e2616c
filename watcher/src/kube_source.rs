//! The `kubernetes` source: kube-runtime watchers feeding reflector stores.
//!
//! Services (all namespaces, each wrapped in a [`DeserializeGuard`] so one Service that
//! does not decode is skipped with a problem rather than stopping the stream), EndpointSlices
//! (all namespaces), Nodes, and the ConfigMaps of our namespace (`global` and the state
//! objects); with `--ingress`, also Ingresses (all namespaces, guarded like Services),
//! IngressClasses and the Secrets of type `kubernetes.io/tls` (all namespaces: see
//! [`IngressStores`] for why not fewer). Each watcher retries with kube's default backoff; a reflector swaps its store
//! only when a relist is complete, so a failed or partial list never shows up as missing
//! objects.

use crate::admin::Readiness;
use crate::events::Lookup;
use crate::gateway_api::GatewayResources;
use crate::kube::describe;
use crate::publish_cm::{self, StateLoad};
use crate::reconcile::{self, ConfigRead, Source};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8slb_common::certs::{NODE_CERT_LABEL, TLS_SECRET_TYPE};
use k8slb_common::config::parse_global_config;
use k8slb_common::names::NodeName;
use k8slb_common::objects::Objects;
use k8slb_common::problem::Kind;
use k8slb_common::report::{self, NodeReport, REPORT_KEY, REPORT_LABELS, REPORT_PREFIX};
use k8slb_common::state::{ObjRef, Problem, Reason};
use kube::api::{ApiResource, DynamicObject};
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
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
pub type GuardedIngress = DeserializeGuard<Ingress>;

/// Read handles on every store.
#[derive(Clone)]
pub struct Stores {
    pub services: Store<GuardedService>,
    pub slices: Store<EndpointSlice>,
    pub nodes: Store<Node>,
    pub configmaps: Store<ConfigMap>,
    /// With `--ingress` only.
    pub ingress: Option<IngressStores>,
    /// With `--gateway-api`, when the cluster has the Gateway API CRDs.
    pub gateway: Option<GatewayStores>,
    pub namespace: String,
}

/// The Gateway API stores (see [`GatewayResources`]).
#[derive(Clone)]
pub struct GatewayStores {
    pub resources: GatewayResources,
    pub classes: Store<DynamicObject>,
    pub gateways: Store<DynamicObject>,
    pub routes: Store<DynamicObject>,
    pub grants: Option<Store<DynamicObject>>,
    /// GRPCRoutes, when the cluster serves them.
    pub grpc: Option<Store<DynamicObject>>,
    /// TLSRoutes, TCPRoutes, UDPRoutes: the kinds the cluster serves (see
    /// [`GatewayResources::l4`]), in its order.
    pub l4: Vec<Store<DynamicObject>>,
    /// The Namespaces, whose labels a listener's `allowedRoutes` selector selects.
    pub namespaces: Store<Namespace>,
    /// BackendTLSPolicies (standard channel since v1.4), when the cluster serves them.
    pub backend_tls: Option<Store<DynamicObject>>,
    /// ListenerSets (standard channel since v1.5), when the cluster serves them.
    pub listener_sets: Option<Store<DynamicObject>>,
    /// The ConfigMaps of every namespace: the CA bundles (`ca.crt`) BackendTLSPolicies
    /// and Gateways' client certificate validation name, and a GatewayClass's
    /// parameters. Public data (no Secret is read this way).
    pub configmaps: Store<ConfigMap>,
}

/// What serving Ingresses reads besides the Services' stores.
///
/// The Secrets: every `kubernetes.io/tls` Secret of the cluster (a field selector on
/// `type`, which the API server supports for Secrets), though the plan uses only those our
/// Ingresses name. RBAC cannot grant "the Secrets some Ingress names" (a rule names
/// resources by name, fixed at install), and one watch per referenced Secret would be
/// thousands of watches on a large cluster; so the grant is all TLS Secrets' list/watch,
/// and only in the install variant that serves Ingresses (`k8slb-<proxy>-ingress.yml`).
/// The node certificate Secrets this watcher writes in its own namespace are in this store
/// too (they are `kubernetes.io/tls`): they are told apart by their label and never read as
/// a user's certificate.
#[derive(Clone)]
pub struct IngressStores {
    pub ingresses: Store<GuardedIngress>,
    pub classes: Store<IngressClass>,
    pub secrets: Store<Secret>,
    namespace: String,
}

impl Stores {
    /// Start every watcher; `changed` is notified on every change after the initial lists.
    pub fn spawn(
        client: &Client,
        namespace: &str,
        ingress: bool,
        gateway: Option<GatewayResources>,
        changed: Arc<Notify>,
        readiness: &Readiness,
        shutdown: &CancellationToken,
    ) -> Stores {
        let all = watcher::Config::default();
        let w = Spawner {
            changed: &changed,
            readiness,
            shutdown,
        };
        Stores {
            services: w.spawn(
                Api::<GuardedService>::all(client.clone()),
                all.clone(),
                "services",
            ),
            slices: w.spawn(
                Api::<EndpointSlice>::all(client.clone()),
                all.clone(),
                "endpointslices",
            ),
            nodes: w.spawn(Api::<Node>::all(client.clone()), all.clone(), "nodes"),
            configmaps: w.spawn(
                Api::<ConfigMap>::namespaced(client.clone(), namespace),
                all.clone(),
                "configmaps",
            ),
            ingress: ingress.then(|| IngressStores {
                ingresses: w.spawn(
                    Api::<GuardedIngress>::all(client.clone()),
                    all.clone(),
                    "ingresses",
                ),
                classes: w.spawn(
                    Api::<IngressClass>::all(client.clone()),
                    all.clone(),
                    "ingressclasses",
                ),
                secrets: w.spawn(
                    Api::<Secret>::all(client.clone()),
                    all.fields(&format!("type={TLS_SECRET_TYPE}")),
                    "secrets",
                ),
                namespace: namespace.to_string(),
            }),
            gateway: gateway.map(|r| GatewayStores {
                classes: w.spawn_dynamic(client, &r.classes, "gatewayclasses"),
                gateways: w.spawn_dynamic(client, &r.gateways, "gateways"),
                routes: w.spawn_dynamic(client, &r.routes, "httproutes"),
                grants: r
                    .grants
                    .as_ref()
                    .map(|g| w.spawn_dynamic(client, g, "referencegrants")),
                grpc: r
                    .grpc
                    .as_ref()
                    .map(|g| w.spawn_dynamic(client, g, "grpcroutes")),
                l4: r
                    .l4
                    .iter()
                    .map(|(k, ar)| w.spawn_dynamic(client, ar, k.plural()))
                    .collect(),
                namespaces: w.spawn(
                    Api::<Namespace>::all(client.clone()),
                    watcher::Config::default(),
                    "namespaces",
                ),
                backend_tls: r
                    .backend_tls
                    .as_ref()
                    .map(|g| w.spawn_dynamic(client, g, "backendtlspolicies")),
                listener_sets: r
                    .listener_sets
                    .as_ref()
                    .map(|g| w.spawn_dynamic(client, g, "listenersets")),
                configmaps: w.spawn(
                    Api::<ConfigMap>::all(client.clone()),
                    watcher::Config::default(),
                    "configmaps-all-namespaces",
                ),
                resources: r,
            }),
            namespace: namespace.to_string(),
        }
    }

    /// Until every store has seen its first complete list.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.services.wait_until_ready().await?;
        self.slices.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.configmaps.wait_until_ready().await?;
        if let Some(i) = &self.ingress {
            i.ingresses.wait_until_ready().await?;
            i.classes.wait_until_ready().await?;
            i.secrets.wait_until_ready().await?;
        }
        if let Some(g) = &self.gateway {
            g.classes.wait_until_ready().await?;
            g.gateways.wait_until_ready().await?;
            g.routes.wait_until_ready().await?;
            if let Some(r) = &g.grants {
                r.wait_until_ready().await?;
            }
            if let Some(r) = &g.grpc {
                r.wait_until_ready().await?;
            }
            for s in &g.l4 {
                s.wait_until_ready().await?;
            }
            g.namespaces.wait_until_ready().await?;
            if let Some(r) = &g.backend_tls {
                r.wait_until_ready().await?;
            }
            if let Some(r) = &g.listener_sets {
                r.wait_until_ready().await?;
            }
            g.configmaps.wait_until_ready().await?;
        }
        Ok(())
    }

    /// Where the plan's objects come from: one [`Source`] per store. A new kind (Gateway
    /// API) is one more store here.
    pub fn sources(&self) -> Vec<&dyn Source> {
        let mut v: Vec<&dyn Source> = vec![&self.services, &self.slices, &self.nodes];
        if let Some(i) = &self.ingress {
            v.push(i);
        }
        if let Some(g) = &self.gateway {
            v.push(g);
        }
        v
    }

    /// Where the round's node certificates come from: the Secrets, with `--ingress`.
    pub fn certs(&self) -> crate::node_secrets::Certs<'_> {
        match &self.ingress {
            Some(i) => crate::node_secrets::Certs::From(i),
            None => crate::node_secrets::Certs::Off,
        }
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

    /// The node reports the actors published in our namespace (the ConfigMaps
    /// `k8slb-node-<node>`), each trusted only for the node it is named after; one that
    /// does not decode is skipped (a debug line: it is rewritten by its actor).
    pub fn node_reports(&self) -> BTreeMap<NodeName, NodeReport> {
        let mut out = BTreeMap::new();
        for cm in self.configmaps.state() {
            let name = cm.metadata.name.as_deref().unwrap_or_default();
            let labelled = cm.metadata.labels.as_ref().is_some_and(|l| {
                REPORT_LABELS
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            });
            if !labelled || !name.starts_with(REPORT_PREFIX) {
                continue;
            }
            let json = cm.data.as_ref().and_then(|d| d.get(REPORT_KEY));
            match report::decode(name, json.map(String::as_str)) {
                Ok((node, r)) => {
                    out.insert(node, r);
                }
                Err(e) => {
                    tracing::debug!(configmap = %name.escape_debug(), error = %e, "node report skipped");
                }
            }
        }
        out
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

/// Ingresses as Services are (an undecodable one is held: its pool keeps its VIP),
/// IngressClasses, and the users' TLS Secrets that something names (not our node
/// certificate Secrets): the store keeps every TLS Secret of the cluster, the round copies
/// only those.
impl Source for IngressStores {
    fn add_to(&self, objs: &mut Objects) {
        for g in self.ingresses.state() {
            match &g.0 {
                Ok(i) => objs.ingresses.push(i.clone()),
                Err(bad) => {
                    let ns = bad.metadata.namespace.as_deref().unwrap_or_default();
                    let name = bad.metadata.name.as_deref().unwrap_or_default();
                    tracing::warn!(ingress = %format!("{ns}/{name}"), error = %bad.error, "skipping an Ingress that does not decode");
                    if let Ok(key) = k8slb_common::names::ObjectKey::new(ns, name) {
                        objs.held_ingresses.push(key);
                    }
                    objs.problems.push(Problem::new(
                        ObjRef::named(Kind::Ingress, format!("{ns}/{name}")),
                        Reason::Undecodable,
                        format!("skipped: this Ingress does not decode: {}", bad.error),
                    ));
                }
            }
        }
        objs.ingresses.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        objs.ingress_classes = sorted(self.classes.state());
    }

    fn add_named_secrets(
        &self,
        objs: &mut Objects,
        named: &std::collections::BTreeSet<(String, String)>,
    ) {
        objs.secrets =
            self.user_secrets_named(named.iter().map(|(ns, n)| (ns.as_str(), n.as_str())));
    }
}

impl IngressStores {
    /// The stores of a watcher in `namespace` (its node certificate Secrets are there).
    pub fn new(
        ingresses: Store<GuardedIngress>,
        classes: Store<IngressClass>,
        secrets: Store<Secret>,
        namespace: &str,
    ) -> IngressStores {
        IngressStores {
            ingresses,
            classes,
            secrets,
            namespace: namespace.to_string(),
        }
    }

    /// The users' Secrets the node certificates of `state` are made from: those its
    /// listeners name, and no other.
    pub fn secrets_for_nodes(&self, state: &k8slb_common::state::State) -> Vec<Secret> {
        let used = k8slb_common::certs::used_by(state);
        self.user_secrets_named(used.iter().filter_map(|f| match f {
            k8slb_common::routes::CertFile::Secret {
                namespace, name, ..
            } => Some((namespace.as_str(), name.as_str())),
            _ => None,
        }))
    }

    /// The users' TLS Secrets (not our node certificate Secrets) of `named` (namespace,
    /// name) that exist, sorted: each looked up in the store and copied, and no other.
    pub fn user_secrets_named<'n>(
        &self,
        named: impl IntoIterator<Item = (&'n str, &'n str)>,
    ) -> Vec<Secret> {
        let found: Vec<Arc<Secret>> = named
            .into_iter()
            .filter_map(|(ns, name)| self.secrets.get(&ObjectRef::new(name).within(ns)))
            .filter(|s| !self.is_node_cert(s))
            .collect();
        sorted(found)
    }

    /// One of the node certificate Secrets this watcher writes.
    fn is_node_cert(&self, s: &Secret) -> bool {
        s.metadata.namespace.as_deref() == Some(self.namespace.as_str())
            && s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(NODE_CERT_LABEL))
                .is_some_and(|v| v == "true")
    }
}

/// The node-certificate decision reads the Secrets here.
impl crate::node_secrets::CertSource for IngressStores {
    fn secrets_named_by(&self, state: &k8slb_common::state::State) -> Vec<Secret> {
        self.secrets_for_nodes(state)
    }

    /// The node certificate Secrets that exist now (in our namespace, with our label).
    fn node_cert_secrets(&self) -> std::collections::BTreeMap<String, Arc<Secret>> {
        self.secrets
            .state()
            .into_iter()
            .filter(|s| self.is_node_cert(s))
            .filter_map(|s| Some((s.metadata.name.clone()?, s)))
            .collect()
    }
}

/// Gateway API objects, decoded as the files source decodes them (one that does not
/// decode is skipped with a problem).
impl Source for GatewayStores {
    fn add_to(&self, objs: &mut Objects) {
        let r = &self.resources;
        let stores = [
            (&self.classes, &r.classes),
            (&self.gateways, &r.gateways),
            (&self.routes, &r.routes),
        ]
        .into_iter()
        .chain(self.grants.as_ref().zip(r.grants.as_ref()))
        .chain(self.grpc.as_ref().zip(r.grpc.as_ref()))
        .chain(self.backend_tls.as_ref().zip(r.backend_tls.as_ref()))
        .chain(self.listener_sets.as_ref().zip(r.listener_sets.as_ref()))
        .chain(self.l4.iter().zip(r.l4.iter().map(|(_, ar)| ar)));
        objs.namespaces = sorted(self.namespaces.state());
        objs.configmaps = sorted(self.configmaps.state());
        for (store, ar) in stores {
            let mut items = store.state();
            items.sort_by(|a, b| {
                (&a.metadata.namespace, &a.metadata.name)
                    .cmp(&(&b.metadata.namespace, &b.metadata.name))
            });
            for o in items {
                match serde_json::to_value(&*o) {
                    Ok(mut v) => {
                        // List items of built-in kinds come without them; be sure.
                        v["apiVersion"] = ar.api_version.clone().into();
                        v["kind"] = ar.kind.clone().into();
                        objs.add_value(v)
                    }
                    Err(e) => tracing::warn!(error = %e, "a Gateway API object does not serialise"),
                }
            }
        }
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
    fn ingress_uid(&self, ns: &str, name: &str) -> Option<String> {
        let g = self
            .ingress
            .as_ref()?
            .ingresses
            .get(&ObjectRef::new(name).within(ns))?;
        g.0.as_ref()
            .map(|i| i.metadata.uid.clone())
            .unwrap_or_else(|bad| bad.metadata.uid.clone())
    }

    fn gateway_api_ref(
        &self,
        kind: &str,
        ns: Option<&str>,
        name: &str,
    ) -> Option<(String, String)> {
        let g = self.gateway.as_ref()?;
        let (store, ar) = match kind {
            "GatewayClass" => (&g.classes, &g.resources.classes),
            "Gateway" => (&g.gateways, &g.resources.gateways),
            "HTTPRoute" => (&g.routes, &g.resources.routes),
            "GRPCRoute" => (g.grpc.as_ref()?, g.resources.grpc.as_ref()?),
            "BackendTLSPolicy" => (g.backend_tls.as_ref()?, g.resources.backend_tls.as_ref()?),
            "ListenerSet" => (
                g.listener_sets.as_ref()?,
                g.resources.listener_sets.as_ref()?,
            ),
            other => {
                let i = g
                    .resources
                    .l4
                    .iter()
                    .position(|(k, _)| k.as_str() == other)?;
                (&g.l4[i], &g.resources.l4[i].1)
            }
        };
        let mut r = ObjectRef::new_with(name, ar.clone());
        if let Some(ns) = ns {
            r = r.within(ns);
        }
        let uid = store.get(&r)?.metadata.uid.clone()?;
        Some((uid, ar.api_version.clone()))
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

/// What every watch task shares.
struct Spawner<'a> {
    changed: &'a Arc<Notify>,
    /// Told why, while a watch has not completed its first list (a missing RBAC grant
    /// shows up here, not only in the log).
    readiness: &'a Readiness,
    shutdown: &'a CancellationToken,
}

impl Spawner<'_> {
    /// A store of one Gateway API kind (found by discovery), all namespaces.
    fn spawn_dynamic(
        &self,
        client: &Client,
        ar: &ApiResource,
        what: &'static str,
    ) -> Store<DynamicObject> {
        spawn_with(
            Api::<DynamicObject>::all_with(client.clone(), ar),
            watcher::Config::default(),
            reflector::store::Writer::new(ar.clone()),
            what,
            self.changed,
            self.readiness.clone(),
            self.shutdown,
        )
    }

    fn spawn<K>(&self, api: Api<K>, config: watcher::Config, what: &'static str) -> Store<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        spawn_one(
            api,
            config,
            what,
            self.changed,
            self.readiness.clone(),
            self.shutdown,
        )
    }
}

fn spawn_one<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    changed: &Arc<Notify>,
    readiness: Readiness,
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    spawn_with(
        api,
        config,
        reflector::store::Writer::default(),
        what,
        changed,
        readiness,
        shutdown,
    )
}

fn spawn_with<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    what: &'static str,
    changed: &Arc<Notify>,
    readiness: Readiness,
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let reader = writer.as_reader();
    let stream = reflector::reflector(writer, watcher(api, config).backoff(watch_backoff()));
    let changed = changed.clone();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut failing = false;
        let mut listed = false;
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
                            watcher::Event::InitDone => {
                                listed = true;
                                changed.notify_one();
                            }
                            _ => changed.notify_one(),
                        }
                    }
                    Some(Err(e)) => {
                        // The stream backs off by itself; log the first error of a run.
                        let error = describe_watch_error(&e);
                        if !listed {
                            readiness.not_ready(format!(
                                "waiting for the initial list of {what}: {error}"
                            ));
                        }
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
