//! The Kubernetes path in the lab: the fake API server (k8slb-fakeapi) in this process, and
//! a relay in each host namespace that needs it, so that the real `k8slb-watcher --source
//! kubernetes` and `k8slb-actor --state configmap` reach it at the same `127.0.0.1:<port>`
//! as the kubeconfig says, from inside their namespaces.
//!
//! The relay's listening socket is created inside the host's namespace (by a short-lived
//! thread that enters it with `setns`); the connections to the API are made from this
//! process's own namespace. Sockets keep the namespace they were created in, so no traffic
//! leaves the lab's namespaces and the host's loopback.
//!
//! The API has k8slb installed from the shipped manifest (`manifests/k8slb-<proxy>.yml`:
//! the k8slb-system Namespace, the ServiceAccounts and their RBAC), and the binaries run as
//! their ServiceAccounts ([`KubeApi::watcher_kubeconfig`], [`KubeApi::actor_kubeconfig`]),
//! so a call the manifests do not grant fails in the lab as on a real cluster. Only the
//! harness's own seeding and inspection is the admin's.

use anyhow::{Context, Result};
use k8slb_fakeapi::FakeApi;
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// The namespace the manifests install k8slb into.
pub const K8SLB_NAMESPACE: &str = "k8slb-system";

pub struct KubeApi {
    api: FakeApi,
    /// Declared (so dropped) after the API: the API and the relays run on it.
    rt: tokio::runtime::Runtime,
}

impl KubeApi {
    /// Starts the fake API server and installs `manifests/k8slb-<proxy>.yml` in it
    /// (`proxy` may name a variant: `haproxy-ingress`).
    pub fn start(proxy: &str) -> Result<KubeApi> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("tokio runtime for the fake API server")?;
        let api = rt
            .block_on(FakeApi::start_with(k8slb_fakeapi::Options::default()))
            .context("starting the fake API server")?;
        let manifest = crate::bins::repo_root().join(format!("manifests/k8slb-{proxy}.yml"));
        api.load_manifests(&manifest)
            .with_context(|| format!("installing {}", manifest.display()))?;
        Ok(KubeApi { api, rt })
    }

    /// The admin's kubeconfig (system:masters): for the harness, never for a binary under
    /// test.
    pub fn admin_kubeconfig(&self) -> &Path {
        self.api.kubeconfig_path()
    }

    /// The watcher's kubeconfig: the token of the ServiceAccount `k8slb-system/watcher`.
    pub fn watcher_kubeconfig(&self) -> PathBuf {
        self.api
            .kubeconfig_for_service_account(K8SLB_NAMESPACE, "watcher")
    }

    /// The actor's kubeconfig: the token of the ServiceAccount `k8slb-system/actor`.
    pub fn actor_kubeconfig(&self) -> PathBuf {
        self.api
            .kubeconfig_for_service_account(K8SLB_NAMESPACE, "actor")
    }

    /// Requests the API refused (401 or 403), as "user METHOD path -> status: message".
    pub fn refused_requests(&self) -> Vec<String> {
        self.api.refused_requests()
    }

    pub fn api(&self) -> &FakeApi {
        &self.api
    }

    /// Makes the API reachable at its own address (`127.0.0.1:<port>`) from inside the
    /// network namespace `ns`.
    pub fn relay_into(&self, ns: &str) -> Result<()> {
        let api_addr = self.api.addr();
        let path = Path::new("/run/netns").join(ns);
        let listener = std::thread::scope(|s| {
            s.spawn(|| -> Result<std::net::TcpListener> {
                let f = std::fs::File::open(&path)
                    .with_context(|| format!("opening {}", path.display()))?;
                nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
                    .with_context(|| format!("entering {ns}"))?;
                let l = std::net::TcpListener::bind(api_addr)
                    .with_context(|| format!("binding {api_addr} in {ns}"))?;
                l.set_nonblocking(true)?;
                Ok(l)
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the relay thread for {ns} panicked"))?
        })?;
        let _guard = self.rt.enter();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        self.rt.spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(api_addr).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Ok(())
    }

    pub fn put(&self, object: Value) {
        self.api.put_object(object);
    }

    /// Deletes the object that `object` names (kind, namespace, name).
    pub fn delete(&self, object: &Value) -> Result<()> {
        let path = api_path(object)?;
        self.api
            .delete_object(&path)
            .with_context(|| format!("{path}: not found"))?;
        Ok(())
    }

    /// The Service's `status.loadBalancer.ingress`: (ip, ipMode) of each entry.
    pub fn service_ingress(&self, namespace: &str, name: &str) -> Vec<(IpAddr, String)> {
        let Some(svc) = self
            .api
            .get_object(&format!("/api/v1/namespaces/{namespace}/services/{name}"))
        else {
            return Vec::new();
        };
        svc["status"]["loadBalancer"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| {
                let ip = i["ip"].as_str()?.parse().ok()?;
                Some((ip, i["ipMode"].as_str().unwrap_or_default().to_string()))
            })
            .collect()
    }

    /// The state the watcher published (the `k8slb-state*` ConfigMaps), decoded as an
    /// actor decodes it.
    pub fn state(&self) -> Result<k8slb_common::state::State> {
        use base64::Engine;
        let payload = |name: &str| -> Option<Vec<u8>> {
            let cm = self.api.get_object(&format!(
                "/api/v1/namespaces/{K8SLB_NAMESPACE}/configmaps/{name}"
            ))?;
            let b = cm.pointer("/binaryData/state.json.gz")?.as_str()?;
            base64::engine::general_purpose::STANDARD.decode(b).ok()
        };
        let index = payload("k8slb-state").context("no state ConfigMap k8slb-state")?;
        k8slb_common::publish::decode(&index, |suffix| payload(&format!("k8slb-state{suffix}")))
            .map_err(|e| anyhow::anyhow!("the published state does not decode: {e}"))
    }

    /// The Ingress's `status.loadBalancer.ingress`: the ip (or hostname) of each entry.
    pub fn ingress_status(&self, namespace: &str, name: &str) -> Vec<String> {
        let path = format!("/apis/networking.k8s.io/v1/namespaces/{namespace}/ingresses/{name}");
        let Some(ing) = self.api.get_object(&path) else {
            return Vec::new();
        };
        ing["status"]["loadBalancer"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| Some(i["ip"].as_str().or(i["hostname"].as_str())?.to_string()))
            .collect()
    }

    pub fn addr(&self) -> SocketAddr {
        self.api.addr()
    }

    /// The API server goes away: it stops listening and closes every connection (the
    /// fake's `faults().go_away()`, on the API's own runtime). The objects are kept.
    pub fn go_away(&self) {
        let faults = self.api.faults();
        self.rt.block_on(faults.go_away());
    }

    /// The API server listens again on the same address after [`KubeApi::go_away`].
    pub fn come_back(&self) -> Result<()> {
        let faults = self.api.faults();
        self.rt
            .block_on(faults.come_back())
            .context("the fake API server could not listen again")
    }
}

/// The API path of an object (`/api/v1/namespaces/<ns>/services/<name>`, ...), for the kinds
/// the lab writes.
pub fn api_path(object: &Value) -> Result<String> {
    let kind = object["kind"].as_str().context("no kind")?;
    let name = object["metadata"]["name"].as_str().context("no name")?;
    let ns = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    Ok(match kind {
        "Service" => format!("/api/v1/namespaces/{ns}/services/{name}"),
        "ConfigMap" => format!("/api/v1/namespaces/{ns}/configmaps/{name}"),
        "EndpointSlice" => {
            format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/{name}")
        }
        "Node" => format!("/api/v1/nodes/{name}"),
        other => anyhow::bail!("the lab does not write {other} objects"),
    })
}
