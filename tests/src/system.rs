//! A whole k8slb deployment in a lab: the real `k8slb-watcher` on the files source, the real
//! `k8slb-actor` (with keepalived and HAProxy / nginx) on every LB node, lab-backend on
//! every backend host, and a client.
//!
//! Addresses (all on one bridge):
//!
//! | host | eth0 | extra |
//! |---|---|---|
//! | client | 198.18.0.2/24, fd00:18::2/64 | 198.18.1.2/24, 198.18.2.2/24 |
//! | lbN | 198.18.0.1N/24, fd00:18::1N/64 | 198.18.2.1N/24; `em1`: 198.18.1.1N/24 |
//! | beN | 198.18.0.2N/24, fd00:18::2N/64 | |
//!
//! Pools (the seed README's, moved into the lab's ranges): `default` 198.18.0.0/24
//! (range .100-.120), `external` 198.18.1.0/24 on interface `em1` (range .50-.74),
//! `public` 198.18.2.0/24 (range .50-.74), `ipv6` fd00:18::/64 (range fd00:18::101:0/112).

use crate::bins;
use crate::lab::{Lab, ProcId, Role};
use crate::traffic::{self, Proto};
use crate::wait;
use anyhow::{bail, Context, Result};
use k8slb_common::state::State;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The actor's admin address inside each LB node's namespace.
pub const ADMIN_ADDR: &str = "127.0.0.1:9901";

#[derive(Debug, Clone)]
pub struct Options {
    pub name: String,
    pub lbs: usize,
    pub backends: usize,
    /// `haproxy`, `nginx` or `kubeproxy`.
    pub proxy: String,
    /// keepalived advertisement interval in seconds (`keepalived.advertInt`).
    pub advert_int: f64,
    /// Merged (shallowly, per top-level key) into the default global config.
    pub config_extra: Value,
    /// Start the watcher (and wait for the first state).
    pub start_watcher: bool,
    /// Services (with EndpointSlices on every backend) present before anything starts:
    /// the actors' first state already has them.
    pub preload: Vec<crate::objects::Svc>,
    /// The Kubernetes path: objects go to the fake API server, the watcher runs with
    /// `--source kubernetes` (state published as ConfigMaps) and the actors with
    /// `--state configmap`. Otherwise the files source and a state file.
    pub kube: bool,
    /// With `kube`: install the Ingress variant (`manifests/k8slb-<proxy>-ingress.yml`)
    /// and run the watcher with `--ingress`. (The files source always reads Ingresses.)
    pub ingress: bool,
    /// Run the actors and the watcher from the k8slb image under podman, each with its
    /// workload's security context from the generated manifest (see [`crate::container`]),
    /// instead of as plain processes. Files source only.
    pub containers: Option<crate::container::ContainerSpec>,
    /// The actors' `--templates` (an admin's own templates), instead of the embedded ones.
    pub actor_templates: Option<PathBuf>,
}

impl Options {
    pub fn new(name: &str) -> Options {
        Options {
            name: name.into(),
            lbs: 2,
            backends: 2,
            proxy: "haproxy".into(),
            advert_int: 0.1,
            config_extra: json!({}),
            start_watcher: true,
            preload: Vec::new(),
            kube: false,
            ingress: false,
            containers: None,
            actor_templates: None,
        }
    }
    pub fn actor_templates(mut self, dir: PathBuf) -> Self {
        self.actor_templates = Some(dir);
        self
    }
    pub fn containers(mut self, spec: crate::container::ContainerSpec) -> Self {
        self.containers = Some(spec);
        self
    }
    pub fn kube(mut self) -> Self {
        self.kube = true;
        self
    }
    /// The Kubernetes path serving Ingresses (implies [`Options::kube`]).
    pub fn kube_ingress(mut self) -> Self {
        self.kube = true;
        self.ingress = true;
        self
    }
    pub fn preload(mut self, svc: crate::objects::Svc) -> Self {
        self.preload.push(svc);
        self
    }
    pub fn proxy(mut self, p: &str) -> Self {
        self.proxy = p.into();
        self
    }
    pub fn lbs(mut self, n: usize) -> Self {
        self.lbs = n;
        self
    }
    pub fn backends(mut self, n: usize) -> Self {
        self.backends = n;
        self
    }
    pub fn advert_int(mut self, s: f64) -> Self {
        self.advert_int = s;
        self
    }
}

pub struct System {
    pub lab: Lab,
    /// Containers to remove once the lab (dropped first) has stopped their processes.
    containers: crate::container::Containers,
    /// Container mode: the watcher's state file copied where the actors can read it.
    _state_relay: Option<crate::container::FileRelay>,
    /// The fake API server (kube mode); dropped after the lab, whose processes use it.
    pub kube: Option<crate::kube::KubeApi>,
    /// What `apply` put into the API, by file stem (kube mode), for `delete`.
    applied: std::sync::Mutex<BTreeMap<String, Value>>,
    pub opts: Options,
    pub objects_dir: PathBuf,
    pub state_path: PathBuf,
    pub cert_dir: PathBuf,
    tmp_dir: PathBuf,
    pub watcher: Option<ProcId>,
    pub actors: BTreeMap<String, ProcId>,
    pub backends: BTreeMap<String, ProcId>,
}

/// HAProxy's `maxconn` for this machine: k8slb's default (20000) needs about 40 100 open
/// files, which a pod gets (1048576) but a shell may not (some sandboxes cap the hard limit
/// at 20000 and forbid raising it). Below that, the lab lowers maxconn to fit.
pub fn lab_maxconn() -> Option<u64> {
    use nix::sys::resource::{getrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    (hard < 40_200).then(|| hard.saturating_sub(200) / 2)
}

/// The lab's pools (see the module docs).
pub fn default_config(advert_int: f64) -> Value {
    let mut c = json!({
        "pools": {
            "default": {"network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120"},
            "external": {"network": "198.18.1.0/24", "range": "198.18.1.50-198.18.1.74", "interface": "em1"},
            "public": {"network": "198.18.2.0/24", "range": "198.18.2.50-198.18.2.74"},
            "ipv6": {"network": "fd00:18::/64", "range": "fd00:18::101:0/112"}
        },
        "keepalived": {"advertInt": advert_int}
    });
    if let Some(maxconn) = lab_maxconn() {
        c["haproxy"] = json!({"global": [
            format!("maxconn {maxconn}"),
            "ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets",
            "ssl-default-server-options ssl-min-ver TLSv1.2 no-tls-tickets",
            "tune.ssl.default-dh-param 2048",
        ]});
    }
    c
}

impl System {
    /// Builds the lab and starts everything; returns once the watcher has published a
    /// state and every actor answers `/readyz`.
    pub fn start(opts: Options) -> Result<System> {
        // Fail early, with the fix, when something is missing.
        let watcher_bin = bins::locate("k8slb-watcher")?;
        let actor_bin = bins::locate("k8slb-actor")?;
        bins::locate("lab-backend")?;
        bins::locate("lab-client")?;
        if opts.containers.is_some() {
            if opts.kube {
                bail!("containers in the lab run on the files source only");
            }
            crate::container::ensure_image()?;
        } else {
            bins::system("keepalived")?;
            match opts.proxy.as_str() {
                "haproxy" => drop(bins::system("haproxy")?),
                "nginx" => drop(bins::system("nginx")?),
                _ => {}
            }
        }
        bins::system("curl")?;

        let mut lab = Lab::new(&opts.name)?;
        lab.add_host("client", Role::Client, 2)?;
        lab.add_addr("client", "eth0", "198.18.1.2/24")?;
        lab.add_addr("client", "eth0", "198.18.2.2/24")?;
        for i in 1..=opts.lbs {
            let name = format!("lb{i}");
            let idx = 10 + i as u8;
            lab.add_host(&name, Role::Lb, idx)?;
            lab.add_addr(&name, "eth0", &format!("198.18.2.{idx}/24"))?;
            lab.add_link(&name, "em1", &format!("{name}e"))?;
            lab.add_addr(&name, "em1", &format!("198.18.1.{idx}/24"))?;
        }
        for i in 1..=opts.backends {
            lab.add_host(&format!("be{i}"), Role::Backend, 20 + i as u8)?;
        }
        // Only nginx needs ip_nonlocal_bind (the lab turns it on for LB hosts): HAProxy
        // binds with `transparent` (IP_FREEBIND) and kubeproxy binds nothing. Off, every HAProxy lab test
        // shows that a backup node binds VIPs it does not hold without it.
        if opts.proxy != "nginx" {
            for i in 1..=opts.lbs {
                let ns = lab.host(&format!("lb{i}")).ns.clone();
                lab.sysctl(&ns, "net.ipv4.ip_nonlocal_bind", "0")?;
                lab.sysctl(&ns, "net.ipv6.ip_nonlocal_bind", "0")?;
            }
        }

        let objects_dir = lab.dir.join("objects");
        let tmp_dir = lab.dir.join("tmp");
        let cert_dir = lab.dir.join("certs");
        for d in [&objects_dir, &tmp_dir, &cert_dir] {
            std::fs::create_dir_all(d)?;
        }
        let example = bins::repo_root().join("etc-certs-example");
        for pool in ["default", "external", "public", "ipv6"] {
            for ext in ["pem", "key"] {
                std::fs::copy(
                    example.join(format!("default.{ext}")),
                    cert_dir.join(format!("{pool}.{ext}")),
                )
                .with_context(|| {
                    format!("copying the example certificate from {}", example.display())
                })?;
            }
        }
        let mut state_path = lab.dir.join("state.json");
        if let Some(spec) = &opts.containers {
            // The watcher container writes the state as its Deployment's user.
            let dir = lab.dir.join("state");
            std::fs::create_dir_all(&dir)?;
            nix::unistd::chown(
                &dir,
                spec.watcher.run_as_user.map(nix::unistd::Uid::from_raw),
                spec.watcher.run_as_group.map(nix::unistd::Gid::from_raw),
            )
            .with_context(|| format!("chown {}", dir.display()))?;
            state_path = dir.join("state.json");
        }
        let kube = if opts.kube {
            let variant = if opts.ingress {
                format!("{}-ingress", opts.proxy)
            } else {
                opts.proxy.clone()
            };
            let k = crate::kube::KubeApi::start(&variant)?;
            for h in ["client".to_string()]
                .into_iter()
                .chain((1..=opts.lbs).map(|i| format!("lb{i}")))
            {
                k.relay_into(&lab.host(&h).ns)?;
            }
            Some(k)
        } else {
            None
        };
        let mut sys = System {
            lab,
            containers: Default::default(),
            _state_relay: None,
            kube,
            applied: Default::default(),
            opts: opts.clone(),
            objects_dir,
            state_path,
            cert_dir,
            tmp_dir,
            watcher: None,
            actors: BTreeMap::new(),
            backends: BTreeMap::new(),
        };

        for i in 1..=opts.backends {
            let name = format!("be{i}");
            let p = traffic::start_backend(&mut sys.lab, &name)?;
            sys.backends.insert(name, p);
        }

        let mut config = default_config(opts.advert_int);
        if let Value::Object(extra) = &opts.config_extra {
            for (k, v) in extra {
                config[k] = v.clone();
            }
        }
        sys.apply("configmap-global", &crate::objects::global_config(&config))?;
        for i in 1..=opts.lbs {
            let name = format!("lb{i}");
            let h = sys.lab.host(&name).clone();
            sys.apply(
                &format!("node-{name}"),
                &crate::objects::node(&name, &[h.v4.into(), h.v6.into()], true),
            )?;
        }

        for s in &opts.preload {
            sys.apply_service(s)?;
        }
        if opts.start_watcher {
            let w = watcher_bin.to_string_lossy().into_owned();
            let certs = sys.cert_dir.to_string_lossy().into_owned();
            if let Some(k) = &sys.kube {
                let kubeconfig = k.watcher_kubeconfig().to_string_lossy().into_owned();
                let mut args = vec![
                    w.as_str(),
                    "run",
                    "--source",
                    "kubernetes",
                    "--proxy",
                    &opts.proxy,
                    "--cert-path",
                    &certs,
                    "--leader-elect",
                    "false",
                    "--admin-addr",
                    "127.0.0.1:9253",
                ];
                if opts.ingress {
                    args.push("--ingress");
                }
                let p = sys.lab.spawn_in_env(
                    "client",
                    "watcher",
                    &args,
                    &[("KUBECONFIG", &kubeconfig)],
                )?;
                sys.watcher = Some(p);
                wait::until(Duration::from_secs(20), || {
                    Ok(k.api().list("ConfigMap").iter().any(|c| {
                        c["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with("k8slb-state"))
                    }))
                })
                .context("the watcher published no state ConfigMap")?;
            } else if opts.containers.is_some() {
                let dir = sys.lab.dir.join("actor-state");
                std::fs::create_dir_all(&dir)?;
                sys._state_relay = Some(crate::container::FileRelay::start(
                    sys.state_path.clone(),
                    dir.join("state.json"),
                ));
                sys.start_watcher_container()?;
                let path = sys.state_path.clone();
                wait::until(Duration::from_secs(20), || Ok(path.exists())).with_context(|| {
                    format!(
                        "the watcher container wrote no state to {}:\n{}",
                        path.display(),
                        sys.watcher
                            .map(|p| tail(&sys.lab.log(p), 30))
                            .unwrap_or_default()
                    )
                })?;
            } else {
                let src = format!("files:{}", sys.objects_dir.display());
                let out = format!("file:{}", sys.state_path.display());
                let node_certs = sys.node_certs_dir().to_string_lossy().into_owned();
                let status = sys.status_dir().to_string_lossy().into_owned();
                let p = sys.lab.spawn_in(
                    "client",
                    "watcher",
                    &[
                        &w,
                        "run",
                        "--source",
                        &src,
                        "--state-out",
                        &out,
                        "--certs-out",
                        &node_certs,
                        "--status-out",
                        &status,
                        "--proxy",
                        &opts.proxy,
                        "--cert-path",
                        &certs,
                    ],
                )?;
                sys.watcher = Some(p);
                let path = sys.state_path.clone();
                wait::until(Duration::from_secs(20), || Ok(path.exists()))
                    .with_context(|| format!("the watcher wrote no state to {}", path.display()))?;
            }
        }
        let _ = actor_bin;
        for i in 1..=opts.lbs {
            sys.start_actor(&format!("lb{i}"))?;
        }
        for i in 1..=opts.lbs {
            sys.wait_ready(&format!("lb{i}"), Duration::from_secs(30))?;
        }
        Ok(sys)
    }

    /// Starts (or restarts) the actor on an LB node.
    /// Files mode: where the watcher writes the node certificates (`--certs-out`) that
    /// the actors read.
    pub fn node_certs_dir(&self) -> PathBuf {
        self.lab.dir.join("node-certs")
    }

    /// Files mode: where the watcher writes the objects' statuses (`--status-out`).
    pub fn status_dir(&self) -> PathBuf {
        self.lab.dir.join("status")
    }

    /// Files mode: the status the watcher wrote for `<kind>/<namespace>/<name>`
    /// (`<kind>/<name>` for a cluster-scoped kind), None while there is none.
    pub fn status_of(&self, path: &str) -> Option<Value> {
        let text = std::fs::read(self.status_dir().join(format!("{path}.json"))).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Kube mode: where the actor on `node` writes the node certificates (`--certs-dir`).
    pub fn actor_certs_dir(&self, node: &str) -> PathBuf {
        self.lab.dir.join(format!("{node}-certs"))
    }

    /// Where the actor on `node` finds the BGP peers' password Secrets
    /// (`--bgp-secrets-dir`: `<dir>/<name>/password`).
    pub fn actor_bgp_secrets_dir(&self, node: &str) -> PathBuf {
        self.lab.dir.join(format!("{node}-bgp-secrets"))
    }

    pub fn start_actor(&mut self, node: &str) -> Result<ProcId> {
        if self.opts.containers.is_some() {
            return self.start_actor_container(node);
        }
        let bin = bins::locate("k8slb-actor")?.to_string_lossy().into_owned();
        let state = match &self.kube {
            Some(_) => "configmap".to_string(),
            None => format!("file:{}", self.state_path.display()),
        };
        let kubeconfig = self
            .kube
            .as_ref()
            .map(|k| k.actor_kubeconfig().to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut env = vec![("RUST_LOG", "info")];
        if self.kube.is_some() {
            env.push(("KUBECONFIG", kubeconfig.as_str()));
        }
        let work = self.lab.dir.join(format!("{node}-work"));
        std::fs::create_dir_all(&work)?;
        let work = work.to_string_lossy().into_owned();
        // Files mode: the watcher's --certs-out; kube mode: each actor its own (it writes
        // the node certificate Secrets there itself).
        let certs = match &self.kube {
            Some(_) => self.actor_certs_dir(node),
            None => self.node_certs_dir(),
        }
        .to_string_lossy()
        .into_owned();
        let templates = self
            .opts
            .actor_templates
            .as_ref()
            .map(|d| d.to_string_lossy().into_owned());
        let bgp_secrets = self
            .actor_bgp_secrets_dir(node)
            .to_string_lossy()
            .into_owned();
        let mut args = vec![
            bin.as_str(),
            "run",
            "--state",
            &state,
            "--node",
            node,
            "--proxy",
            &self.opts.proxy,
            "--work-dir",
            &work,
            "--certs-dir",
            &certs,
            "--bgp-secrets-dir",
            &bgp_secrets,
            "--admin-addr",
            ADMIN_ADDR,
        ];
        if let Some(t) = &templates {
            args.extend(["--templates", t.as_str()]);
        }
        let p = self.lab.spawn_in_env(node, "actor", &args, &env)?;
        self.actors.insert(node.to_string(), p);
        Ok(p)
    }

    /// Waits until the actor on `node` answers `/readyz` with 200.
    pub fn wait_ready(&mut self, node: &str, timeout: Duration) -> Result<()> {
        let url = format!("http://{ADMIN_ADDR}/readyz");
        let p = self.actors[node];
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.lab.run_in(node, &["curl", "-sf", "-m", "1", &url])?;
            if out.status.success() {
                return Ok(());
            }
            if !self.lab.running(p) {
                bail!(
                    "the actor on {node} exited:\n{}",
                    tail(&self.lab.log(p), 30)
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "the actor on {node} was not ready after {timeout:?}:\n{}",
                    tail(&self.lab.log(p), 30)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Writes an object file into the watched directory, atomically (rename).
    /// In kube mode, puts the object into the fake API server instead.
    pub fn apply(&self, file_stem: &str, object: &Value) -> Result<()> {
        if let Some(k) = &self.kube {
            k.put(object.clone());
            self.applied
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .insert(file_stem.to_string(), object.clone());
            return Ok(());
        }
        let text = serde_json::to_string_pretty(object)?;
        self.apply_text(&format!("{file_stem}.yaml"), &text)
    }

    /// Writes a file (YAML, possibly several documents) into the watched directory,
    /// atomically.
    pub fn apply_text(&self, file_name: &str, text: &str) -> Result<()> {
        if self.kube.is_some() {
            bail!("apply_text ({file_name}): YAML text is for the files source; use apply in kube mode");
        }
        let tmp = self.tmp_dir.join(file_name);
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, self.objects_dir.join(file_name))?;
        Ok(())
    }

    /// Deletes what `apply` wrote under `file_stem` (the file, or the API object).
    pub fn delete(&self, file_stem: &str) -> Result<()> {
        if let Some(k) = &self.kube {
            let obj = self
                .applied
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .remove(file_stem)
                .with_context(|| format!("nothing applied as {file_stem}"))?;
            return k.delete(&obj);
        }
        std::fs::remove_file(self.objects_dir.join(format!("{file_stem}.yaml")))?;
        Ok(())
    }

    /// Applies a Service and its EndpointSlice (all backends, ready).
    pub fn apply_service(&self, svc: &crate::objects::Svc) -> Result<()> {
        let addrs = self.backend_ips();
        self.apply(
            &format!("eps-{}-{}", svc.namespace, svc.name),
            &svc.endpoints(&format!("{}-1", svc.name), &addrs),
        )?;
        self.apply(
            &format!("svc-{}-{}", svc.namespace, svc.name),
            &svc.to_value(),
        )
    }

    pub fn backend_ips(&self) -> Vec<IpAddr> {
        self.backends
            .keys()
            .map(|b| IpAddr::V4(self.lab.host(b).v4))
            .collect()
    }

    pub fn lb_nodes(&self) -> Vec<String> {
        self.actors.keys().cloned().collect()
    }

    /// The current published state (files source only; in kube mode, read the Services'
    /// status through [`System::kube`]).
    /// The published state: the state file, or in kube mode the state ConfigMaps.
    pub fn state(&self) -> Result<State> {
        if let Some(k) = &self.kube {
            return k.state();
        }
        let text = std::fs::read_to_string(&self.state_path)?;
        Ok(State::from_json(&text)?)
    }

    /// Waits until the state gives `key` (`ns/name`) its IPs; returns them.
    /// In kube mode: the IPs in the Service's `status.loadBalancer.ingress`.
    pub fn wait_ips(&self, key: &str, timeout: Duration) -> Result<Vec<IpAddr>> {
        let mut ips = Vec::new();
        if let Some(k) = &self.kube {
            let (ns, name) = key.split_once('/').context("key is ns/name")?;
            wait::until(timeout, || {
                ips = k
                    .service_ingress(ns, name)
                    .into_iter()
                    .map(|i| i.0)
                    .collect();
                Ok(!ips.is_empty())
            })
            .with_context(|| format!("service {key} got no status.loadBalancer.ingress"))?;
            return Ok(ips);
        }
        wait::until(timeout, || {
            let s = self.state()?;
            match s.services.iter().find(|(k, _)| k.to_string() == key) {
                Some((_, st)) if !st.ips.is_empty() => {
                    ips = st.ips.clone();
                    Ok(true)
                }
                _ => Ok(false),
            }
        })
        .with_context(|| {
            format!(
                "service {key} got no IP; state problems: {:?}",
                self.state().map(|s| s.problems).unwrap_or_default()
            )
        })?;
        Ok(ips)
    }

    /// Waits until one request through `target` succeeds from the client.
    pub fn wait_serving(&self, proto: Proto, target: SocketAddr, timeout: Duration) -> Result<()> {
        let mut last = String::new();
        wait::until(timeout, || {
            let r = traffic::load_args(
                &self.lab,
                "client",
                proto,
                target,
                &["-n", "1", "--timeout-ms", "500"],
            )?;
            last = format!("{:?}", r.errors);
            Ok(r.ok == 1)
        })
        .with_context(|| {
            format!(
                "{target} ({proto:?}) never answered; last errors {last}; the VIP is on {:?} \
                 (see the actors' logs: keepalived FAULT / BACKUP states)",
                self.holders(target.ip()).unwrap_or_default()
            )
        })
    }

    /// The LB nodes that carry `ip` now.
    pub fn holders(&self, ip: IpAddr) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for n in self.actors.keys() {
            if self.lab.addrs(n)?.contains(&ip) {
                out.push(n.clone());
            }
        }
        Ok(out)
    }

    /// Waits until exactly one LB node carries `ip`; returns it.
    pub fn wait_one_holder(&self, ip: IpAddr, timeout: Duration) -> Result<String> {
        let mut holder = String::new();
        let mut seen = Vec::new();
        wait::until(timeout, || {
            seen = self.holders(ip)?;
            if seen.len() == 1 {
                holder = seen[0].clone();
                return Ok(true);
            }
            Ok(false)
        })
        .with_context(|| format!("{ip} is not on exactly one LB node (on {seen:?})"))?;
        Ok(holder)
    }

    /// The actor's Prometheus metrics on `node`.
    pub fn metrics(&self, node: &str) -> Result<String> {
        self.lab.check_in(
            node,
            &[
                "curl",
                "-sf",
                "-m",
                "2",
                &format!("http://{ADMIN_ADDR}/metrics"),
            ],
        )
    }

    /// HAProxy reloads done by the actor on `node` (`k8slb_actor_reloads_total` of
    /// daemon haproxy, every result).
    pub fn haproxy_reloads(&self, node: &str) -> Result<u64> {
        Ok(sum_metric(
            &self.metrics(node)?,
            "k8slb_actor_reloads_total",
            "daemon=\"haproxy\"",
        ))
    }

    /// HAProxy reloads on every LB node, once they stop changing: waits until the sums read
    /// twice, `quiet` apart, are equal (at most `timeout`). A change the actors are still
    /// applying (a reload in flight) is then counted where it belongs.
    pub fn settled_haproxy_reloads(&self, quiet: Duration, timeout: Duration) -> Result<u64> {
        let read = || -> Result<u64> {
            self.lb_nodes()
                .iter()
                .map(|n| self.haproxy_reloads(n))
                .sum()
        };
        let mut last = read()?;
        let deadline = Instant::now() + timeout;
        loop {
            std::thread::sleep(quiet);
            let now = read()?;
            if now == last {
                return Ok(now);
            }
            if Instant::now() >= deadline {
                bail!("HAProxy kept reloading for {timeout:?} ({last} -> {now} reloads)");
            }
            last = now;
        }
    }

    /// PIDs of the processes called `comm` inside a host's namespace.
    pub fn pids_named(&self, host: &str, comm: &str) -> Result<Vec<i32>> {
        let out = crate::lab::sh(&["ip", "netns", "pids", &self.lab.host(host).ns])?;
        Ok(out
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == comm)
            })
            .collect())
    }
}

/// Where the lab's files appear inside the containers.
const IN_CONTAINER_STATE_DIR: &str = "/lab/state";
const IN_CONTAINER_OBJECTS_DIR: &str = "/lab/objects";

/// The actors and the watcher as containers ([`Options::containers`]).
impl System {
    fn spec(&self) -> Result<&crate::container::ContainerSpec> {
        self.opts
            .containers
            .as_ref()
            .context("this lab runs no containers")
    }

    /// The podman name of the actor container on `node` (`watcher` for the watcher).
    pub fn container_name(&self, node: &str) -> String {
        format!("k8slb-{}-{node}", self.lab.id)
    }

    /// `podman run` in a lab host's network namespace; the podman client is a lab process
    /// (its output is the container's, in the host's log).
    fn run_container(
        &mut self,
        host: &str,
        name: &str,
        security: Vec<String>,
        extra_volumes: &[(PathBuf, &str, bool)],
        env: &BTreeMap<String, String>,
        command: Vec<String>,
    ) -> Result<ProcId> {
        let spec = self.spec()?.clone();
        let cname = self.container_name(name);
        // A restart: the previous container of that name goes first.
        let _ = crate::container::podman(&["rm", "--force", "--time", "0", &cname]);
        let mut args: Vec<String> = [
            "podman",
            "run",
            "--name",
            &cname,
            "--pull=never",
            "--network",
            &format!("ns:/run/netns/{}", self.lab.host(host).ns),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(security);
        for (dir, path, ro) in extra_volumes {
            let ro = if *ro { ":ro" } else { "" };
            args.extend(["--volume".into(), format!("{}:{path}{ro}", dir.display())]);
        }
        for (k, v) in env {
            args.extend(["--env".into(), format!("{k}={v}")]);
        }
        args.push(spec.image.clone());
        args.extend(command);
        let penv = crate::container::podman_env();
        let penv: Vec<(&str, &str)> = penv.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let p = self.lab.spawn_outside_env(host, name, &argv, &penv)?;
        self.containers.add(&cname);
        Ok(p)
    }

    fn start_watcher_container(&mut self) -> Result<ProcId> {
        let w = self.spec()?.watcher.clone();
        let security = w.podman_args(&BTreeMap::new())?;
        let mut env = w.env.clone();
        env.insert("POD_NAME".into(), "watcher-0".into());
        env.insert("K8SLB_NAMESPACE".into(), "k8slb-system".into());
        let mut command = w.command.clone();
        command.extend(
            [
                "run",
                "--source",
                &format!("files:{IN_CONTAINER_OBJECTS_DIR}"),
                "--state-out",
                &format!("file:{IN_CONTAINER_STATE_DIR}/state.json"),
                "--proxy",
                &self.opts.proxy,
            ]
            .map(String::from),
        );
        let state_dir = self.state_path.parent().context("state dir")?.to_path_buf();
        let objects = self.objects_dir.clone();
        let p = self.run_container(
            "client",
            "watcher",
            security,
            &[
                (objects, IN_CONTAINER_OBJECTS_DIR, true),
                (state_dir, IN_CONTAINER_STATE_DIR, false),
            ],
            &env,
            command,
        )?;
        self.watcher = Some(p);
        Ok(p)
    }

    fn start_actor_container(&mut self, node: &str) -> Result<ProcId> {
        let a = self.spec()?.actor.clone();
        // hostPath volumes: the certificates, and a work directory per node.
        let mut dirs = BTreeMap::new();
        for m in &a.mounts {
            if let crate::container::Volume::HostPath(p) = &m.volume {
                let dir = if p == "/etc/certs" {
                    self.cert_dir.clone()
                } else {
                    let d = self.lab.dir.join(format!("{node}-{}", m.name));
                    std::fs::create_dir_all(&d)?;
                    d
                };
                dirs.insert(m.name.clone(), dir);
            }
        }
        let security = a.podman_args(&dirs)?;
        let mut env = a.env.clone();
        env.insert("K8SLB_NODE_NAME".into(), node.into());
        env.insert("K8SLB_NAMESPACE".into(), "k8slb-system".into());
        env.insert("RUST_LOG".into(), "info".into());
        let mut command = a.command.clone();
        command.extend(
            [
                "run",
                "--state",
                &format!("file:{IN_CONTAINER_STATE_DIR}/state.json"),
                "--node",
                node,
                "--proxy",
                &self.opts.proxy,
                "--admin-addr",
                ADMIN_ADDR,
            ]
            .map(String::from),
        );
        // The relay's copy of the watcher's state (see FileRelay).
        let state_dir = self.lab.dir.join("actor-state");
        // The BGP password Secrets, where the actor's default --bgp-secrets-dir is (in a
        // cluster the actor writes them there from the Secrets).
        let bgp_secrets = self.actor_bgp_secrets_dir(node);
        std::fs::create_dir_all(&bgp_secrets)?;
        let p = self.run_container(
            node,
            node,
            security,
            &[
                (state_dir, IN_CONTAINER_STATE_DIR, true),
                (bgp_secrets, "/run/k8slb/bgp-secrets", true),
            ],
            &env,
            command,
        )?;
        self.actors.insert(node.to_string(), p);
        Ok(p)
    }

    /// `podman stop -t <terminationGracePeriodSeconds>` on the actor container of `node`:
    /// how long it took, and the container's exit code.
    pub fn stop_actor_container(&mut self, node: &str) -> Result<(Duration, i32)> {
        let grace = self.spec()?.actor.grace_seconds.to_string();
        let name = self.container_name(node);
        let t0 = Instant::now();
        crate::container::podman(&["stop", "--time", &grace, &name])?;
        let took = t0.elapsed();
        if let Some(p) = self.actors.get(node).copied() {
            self.lab.wait(p, Duration::from_secs(10))?;
        }
        Ok((took, crate::container::exit_code(&name)?))
    }
}

/// Sums the samples of `metric` whose labels contain `label_filter`.
pub fn sum_metric(text: &str, metric: &str, label_filter: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(metric) && l.contains(label_filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
