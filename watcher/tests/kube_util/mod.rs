//! Shared helpers of the `kube_*` tests: fixtures, a watcher started in-process against
//! the fake API server, polling with a deadline. A directory module, so that cargo does
//! not build it as a test target of its own.
//!
//! The watcher always runs as its ServiceAccount (`k8slb-system/watcher`) with the RBAC
//! of the shipped manifests ([`load_manifests`], done by [`seed_cluster`]): a call the
//! manifests do not grant fails here as it fails on a real cluster. The tests' own
//! seeding and inspection (`put_object`, `get_object`) is the admin's.
#![allow(dead_code)]

use k8slb_common::state::State;
use k8slb_fakeapi::FakeApi;
use k8slb_watcher::admin::Metrics;
use k8slb_watcher::kube_run::{self, KubeArgs};
use serde_json::{json, Value};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const NS: &str = "k8slb-system";

pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "k8slb_watcher=info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// A watcher running in this process.
pub struct Watcher {
    pub identity: String,
    pub metrics: Metrics,
    pub stop: CancellationToken,
    pub task: JoinHandle<Result<(), k8slb_watcher::Error>>,
}

impl Watcher {
    /// Stop it cleanly (the leader releases the Lease) and wait.
    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the watcher stops")
            .expect("no panic")
            .expect("clean exit");
    }

    /// Kill it: the task is aborted, nothing is released (like SIGKILL).
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
        // Its background tasks (watchers, lease) stop with the token.
        self.stop.cancel();
    }
}

pub fn args(identity: &str) -> KubeArgs {
    let mut a = KubeArgs::new(NS, identity);
    a.lease_duration = Duration::from_secs(3);
    a.lease_renew = Duration::from_millis(300);
    a.resync = Duration::from_secs(5);
    a.events_per_second = 200;
    a.state_in_progress_grace = Duration::from_secs(2);
    a
}

pub fn start(api: &FakeApi, identity: &str) -> Watcher {
    start_with(api, args(identity))
}

/// The watcher's kubeconfig: its ServiceAccount's token.
pub fn watcher_kubeconfig(api: &FakeApi) -> std::path::PathBuf {
    api.kubeconfig_for_service_account(NS, "watcher")
}

pub async fn kube_config(path: &std::path::Path) -> kube::Config {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("kubeconfig parses");
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig loads")
}

pub fn start_with(api: &FakeApi, args: KubeArgs) -> Watcher {
    let kubeconfig = watcher_kubeconfig(api);
    let metrics = Metrics::new();
    let stop = CancellationToken::new();
    let identity = args.identity.clone();
    let (m, s) = (metrics.clone(), stop.clone());
    let task = tokio::spawn(async move {
        let config = kube_config(&kubeconfig).await;
        kube_run::run(config, args, m, s).await
    });
    Watcher {
        identity,
        metrics,
        stop,
        task,
    }
}

/// Poll `f` every 50 ms until it is `Some`; panic with `what` after 30 s.
pub async fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after 30 s waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn global(pools: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "global", "namespace": NS},
        "data": {"config": json!({"pools": pools}).to_string()},
    })
}

pub fn global_raw(text: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "global", "namespace": NS},
        "data": {"config": text},
    })
}

pub fn pools_default() -> Value {
    json!({
        "default": {"network": "10.0.0.0/24", "range": "10.0.0.10-10.0.0.50"},
        "small": {"network": "10.1.0.0/24", "range": "10.1.0.10-10.1.0.11"},
    })
}

pub fn node(name: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"type": "loadBalancer"}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

/// A LoadBalancer Service with one TCP port 80, to refine with [`SvcFixture`]:
/// `svc("default", "web").pool("small").lb_ip("10.0.0.40")`.
pub fn svc(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
                  "selector": {"app": name}},
    })
}

/// Chainable refinements of a Service fixture (a JSON object, as the fake API server
/// stores it).
pub trait SvcFixture: Sized {
    /// `metadata.annotations[k] = v`.
    fn ann(self, k: &str, v: &str) -> Self;
    /// `spec.loadBalancerIP`.
    fn lb_ip(self, ip: &str) -> Self;
    /// `spec.loadBalancerClass`.
    fn class(self, class: &str) -> Self;
    /// `metadata.creationTimestamp` (RFC 3339).
    fn created(self, at: &str) -> Self;
    /// `status.loadBalancer.ingress`, as another controller or an earlier k8slb wrote it.
    fn status_ingress(self, ingress: Value) -> Self;
    /// The `loadbalancer/pool` annotation.
    fn pool(self, pool: &str) -> Self {
        self.ann("loadbalancer/pool", pool)
    }
}

impl SvcFixture for Value {
    fn ann(mut self, k: &str, v: &str) -> Self {
        self["metadata"]["annotations"][k] = json!(v);
        self
    }
    fn lb_ip(mut self, ip: &str) -> Self {
        self["spec"]["loadBalancerIP"] = json!(ip);
        self
    }
    fn class(mut self, class: &str) -> Self {
        self["spec"]["loadBalancerClass"] = json!(class);
        self
    }
    fn created(mut self, at: &str) -> Self {
        self["metadata"]["creationTimestamp"] = json!(at);
        self
    }
    fn status_ingress(mut self, ingress: Value) -> Self {
        self["status"] = json!({ "loadBalancer": { "ingress": ingress } });
        self
    }
}

pub fn slice(ns: &str, svc: &str, ips: &[&str]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{svc}-abc"), "namespace": ns,
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": ips.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true, "serving": true, "terminating": false}})).collect::<Vec<_>>(),
    })
}

pub fn svc_path(ns: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{ns}/services/{name}")
}

/// `(ip, ipMode)` of every ingress entry; None if the Service is gone.
pub fn ingress(api: &FakeApi, ns: &str, name: &str) -> Option<Vec<(String, String)>> {
    let s = api.get_object(&svc_path(ns, name))?;
    Some(
        s.pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|i| {
                        (
                            i["ip"]
                                .as_str()
                                .or(i["hostname"].as_str())
                                .unwrap_or_default()
                                .to_string(),
                            i["ipMode"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
    )
}

pub fn ingress_ip(api: &FakeApi, ns: &str, name: &str) -> Option<String> {
    ingress(api, ns, name)?.first().map(|i| i.0.clone())
}

fn payload(cm: &Value) -> Option<Vec<u8>> {
    use base64::Engine;
    let b = cm.pointer("/binaryData/state.json.gz")?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(b).ok()
}

/// The published state, decoded as an actor would.
pub fn state(api: &FakeApi) -> Option<State> {
    let get = |name: &str| api.get_object(&format!("/api/v1/namespaces/{NS}/configmaps/{name}"));
    let index = payload(&get("k8slb-state")?)?;
    k8slb_common::publish::decode(&index, |suffix| {
        payload(&get(&format!("k8slb-state{suffix}"))?)
    })
    .ok()
}

/// core/v1 Events about `name` (any kind), as (reason, message, count).
pub fn events_for(api: &FakeApi, name: &str) -> Vec<(String, String, i64)> {
    api.list("events")
        .into_iter()
        .filter(|e| e.pointer("/involvedObject/name").and_then(Value::as_str) == Some(name))
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["message"].as_str().unwrap_or_default().to_string(),
                e["count"].as_i64().unwrap_or_default(),
            )
        })
        .collect()
}

pub fn has_event(api: &FakeApi, name: &str, reason: &str) -> bool {
    events_for(api, name).iter().any(|e| e.0 == reason)
}

/// The shipped install manifest for HAProxy (the RBAC is the same for every proxy).
pub fn manifest() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/k8slb-haproxy.yml")
}

/// What `kubectl apply -f manifests/k8slb-haproxy.yml` creates: the k8slb-system
/// Namespace, the ServiceAccounts and their RBAC, the global ConfigMap, the workloads.
pub fn load_manifests(api: &FakeApi) {
    api.load_manifests(manifest())
        .unwrap_or_else(|e| panic!("loading the manifests: {e}"));
}

/// A cluster with k8slb installed from the manifests, two LB nodes and the default pools.
pub fn seed_cluster(api: &FakeApi) {
    load_manifests(api);
    api.put_object(node("lb1", "192.168.0.1"));
    api.put_object(node("lb2", "192.168.0.2"));
    api.put_object(global(pools_default()));
}

/// The watcher's log lines, captured as JSON.
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    /// Installs a process-wide subscriber writing the watcher's log lines as JSON here:
    /// one per test binary.
    pub fn install() -> Capture {
        let c = Capture::default();
        let w = c.clone();
        tracing_subscriber::fmt()
            .json()
            .with_env_filter("k8slb_watcher=debug")
            .with_writer(move || w.clone())
            .try_init()
            .expect("the only subscriber of this test binary");
        c
    }

    pub fn lines(&self) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// Lines about the write `what` (the `write` field), as (level, message, fields).
    pub fn about(&self, what: &str) -> Vec<(String, String, Value)> {
        self.lines()
            .into_iter()
            .filter(|l| l["fields"]["write"] == what)
            .map(|l| {
                (
                    l["level"].as_str().unwrap_or_default().to_string(),
                    l["fields"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    l["fields"].clone(),
                )
            })
            .collect()
    }

    pub fn has(&self, what: &str, message_part: &str) -> bool {
        self.about(what).iter().any(|l| l.1.contains(message_part))
    }
}

/// The Ingress install variant's manifest (HAProxy; the RBAC is the same for nginx).
pub fn ingress_manifest() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/k8slb-haproxy-ingress.yml")
}

/// k8slb installed from the Ingress variant, two LB nodes, the default pools, and a
/// backend Service `default/web` with two endpoints.
pub fn seed_ingress_variant(api: &FakeApi) {
    api.load_manifests(ingress_manifest())
        .unwrap_or_else(|e| panic!("loading the manifests: {e}"));
    api.put_object(node("lb1", "192.168.0.1"));
    api.put_object(node("lb2", "192.168.0.2"));
    api.put_object(global(pools_default()));
    let mut web = svc("default", "web");
    web["spec"]["type"] = json!("ClusterIP");
    api.put_object(web);
    api.put_object(slice("default", "web", &["10.244.0.5", "10.244.0.6"]));
}
