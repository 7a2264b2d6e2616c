//! Helpers shared by the root tests that run in network namespaces (`netns_runtime`,
//! `netns_failover`) and the `runtime` bench: the root / binary check, `sh`, a [`Netns`]
//! that kills everything inside it and deletes itself on drop (also on panic),
//! `wait_until`, a guard for one `k8slb-actor run` process, a keepalived stand-in, and
//! the state documents they hand to the actor ([`state_json::StateJson`]); for the tests that run
//! the actor binary without root, its guard ([`actor_bin::ActorBin`]) and helpers.
//!
//! Each test file compiles this module on its own (`mod support;`), so a helper only one
//! of them uses is dead code in the other: hence the `allow(dead_code)` below.

#![allow(dead_code)]

pub mod actor_bin;
pub mod state_json;
pub mod tenant_routes;

use k8slb_actor::daemons::{Daemon, DaemonError, DaemonKind};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const ACTOR: &str = env!("CARGO_BIN_EXE_k8slb-actor");

/// Why these tests cannot run here: not root, or one of `bins` is not on `PATH`.
pub fn missing_prerequisite(bins: &[&str]) -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (network namespaces, netlink, VRRP); run it as root".into());
    }
    bins.iter()
        .find(|b| {
            !Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {b}"))
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(|b| {
            format!(
                "binary `{b}` is missing: apt-get install -y haproxy keepalived nginx iproute2 procps"
            )
        })
}

/// FAILS (never skips) when not root or when one of `bins` is not on `PATH`.
pub fn require_root_and(bins: &[&str]) {
    if let Some(why) = missing_prerequisite(bins) {
        panic!("{why}");
    }
}

/// Runs `cmd` with `sh -c`; panics with its stderr when it fails; returns its stdout.
pub fn sh(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).output().expect("sh");
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `f` every `every` until it holds or `timeout` has passed; then one last try.
pub fn wait_until_every(timeout: Duration, every: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(every);
    }
    f()
}

/// [`wait_until_every`] 50 ms.
pub fn wait_until(timeout: Duration, f: impl FnMut() -> bool) -> bool {
    wait_until_every(timeout, Duration::from_millis(50), f)
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A network namespace owned by the test (`<prefix>-<pid>-<n>`): on drop every process
/// in it is killed and the namespace deleted.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// A new namespace `<prefix>-<pid>-<n>` with `lo` up.
    pub fn new(prefix: &str) -> Self {
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        sh(&format!("ip netns add {name}"));
        let ns = Netns { name };
        ns.ip("link set lo up");
        ns
    }
    /// `ip -n <ns> <args>`; panics when it fails.
    pub fn ip(&self, args: &str) -> String {
        sh(&format!("ip -n {} {args}", self.name))
    }
    /// A veth pair `a`/`b` inside the namespace, both up, `cidr` on `a`.
    pub fn veth(&self, a: &str, b: &str, cidr: &str) {
        self.ip(&format!("link add {a} type veth peer name {b}"));
        self.ip(&format!("link set {a} up"));
        self.ip(&format!("link set {b} up"));
        self.ip(&format!("addr add {cidr} dev {a}"));
    }
    /// `program` run inside the namespace (`ip netns exec`, which execs it).
    pub fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }
    /// `GET http://<addr><path>` from inside the namespace (the actor's `debug get`); the
    /// body, empty if the request failed.
    pub fn get(&self, addr: &str, path: &str) -> String {
        let out = self
            .cmd(ACTOR)
            .args(["debug", "get", "--addr", addr, "--path", path])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    /// How many addresses `ip/…` the namespace holds.
    pub fn has_addr(&self, ip: &str) -> usize {
        self.held_on(ip).len()
    }
    /// The interfaces that hold `ip/…` in the namespace.
    pub fn held_on(&self, ip: &str) -> Vec<String> {
        self.ip("-o addr show")
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .any(|w| w.starts_with(&format!("{ip}/")))
            })
            .filter_map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .map(|s| s.trim_end_matches(':').to_string())
            })
            .collect()
    }
    /// A script that runs `program` inside the namespace (for daemons driven from the
    /// library).
    pub fn wrapper(&self, dir: &Path, program: &str) -> PathBuf {
        let p = dir.join(format!("{program}-in-ns"));
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\nexec ip netns exec {} {program} \"$@\"\n",
                self.name
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Kill whatever still runs inside, then delete; try everything.
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Whether the namespace `ns` holds `ip` (any interface). For threads that sample: it
/// does not panic, a failed `ip` counts as "not held".
pub fn holds(ns: &str, ip: &str) -> bool {
    Command::new("ip")
        .args(["-n", ns, "-o", "addr", "show"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).lines().any(|l| {
                l.split_whitespace()
                    .any(|w| w.starts_with(&format!("{ip}/")))
            })
        })
        .unwrap_or(false)
}

/// Children of `pid` (all its threads), in pid order.
pub fn children(pid: u32) -> Vec<u32> {
    k8slb_actor::daemons::child_pids(pid).into_iter().collect()
}

/// The process name of `pid` (`/proc/<pid>/comm`).
pub fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim().to_string())
}

/// The pid in a pid file.
pub fn pid_of(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// One `k8slb-actor run` inside a namespace (`ip netns exec` execs it: the child's pid is
/// the actor's), stdout and stderr to `log`; killed on drop.
pub struct ActorProc {
    pub child: Child,
    pub log: PathBuf,
    pub work: PathBuf,
}

impl ActorProc {
    /// `k8slb-actor run --node <node> --admin-addr 127.0.0.1:9254
    /// --min-reload-interval-ms 100 --state file:<dir>/state.json --work-dir <work>`.
    pub fn start(ns: &Netns, dir: &Path, node: &str, work: PathBuf, log: PathBuf) -> ActorProc {
        let f = std::fs::File::create(&log).unwrap();
        let child = ns
            .cmd(ACTOR)
            .args(["run", "--node", node, "--admin-addr", "127.0.0.1:9254"])
            .args(["--min-reload-interval-ms", "100"])
            .arg("--state")
            .arg(format!("file:{}", dir.join("state.json").display()))
            .arg("--work-dir")
            .arg(&work)
            .env("NO_COLOR", "1")
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        ActorProc { child, log, work }
    }
    /// The log so far ("" when it cannot be read).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// The content of `<work>/proxy-health`, written by the actor.
    pub fn health(&self) -> Option<String> {
        std::fs::read_to_string(self.work.join("proxy-health")).ok()
    }
    /// The actor's first child named `name` (e.g. the HAProxy master: `haproxy`).
    pub fn child_named(&self, name: &str) -> Option<u32> {
        children(self.child.id())
            .into_iter()
            .find(|&k| comm(k).as_deref() == Some(name))
    }
}

impl Drop for ActorProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// keepalived stand-in: the seam lets the pipeline run with the proxy only.
pub struct NoKeepalived {
    pub cfg: PathBuf,
    pub up: bool,
}

impl Daemon for NoKeepalived {
    fn kind(&self) -> DaemonKind {
        DaemonKind::Keepalived
    }
    fn config_path(&self) -> &Path {
        &self.cfg
    }
    fn check(&self, _: &Path) -> Result<(), DaemonError> {
        Ok(())
    }
    fn start(&mut self) -> Result<(), DaemonError> {
        self.up = true;
        Ok(())
    }
    fn reload(&mut self) -> Result<(), DaemonError> {
        Ok(())
    }
    fn poll_exit(&mut self) -> Option<String> {
        None
    }
    fn is_running(&self) -> bool {
        self.up
    }
    fn stop(&mut self, _: Duration) {
        self.up = false;
    }
}

/// A kube client as the actor's ServiceAccount of `namespace` on the fake API server
/// (its token): only what the loaded manifests' RBAC grants the actor works.
pub async fn actor_client(api: &k8slb_fakeapi::FakeApi, namespace: &str) -> kube::Client {
    let kc =
        kube::config::Kubeconfig::read_from(api.kubeconfig_for_service_account(namespace, "actor"))
            .unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}
