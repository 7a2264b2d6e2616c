//! The k8slb image in the lab: podman runs the actor and the watcher from the image built
//! by `scripts/image.sh`, each with its workload's security context READ FROM THE
//! GENERATED MANIFEST at test time (not restated here), inside a lab host's network
//! namespace (`podman run --network ns:/run/netns/<ns>`).
//!
//! What of a pod spec becomes what podman option:
//!
//! | pod spec | podman |
//! |---|---|
//! | `runAsUser` / `runAsGroup` (container, else pod) | `--user uid[:gid]` |
//! | `runAsNonRoot: true` | refused here when the user is 0 or unset, as the kubelet does |
//! | `readOnlyRootFilesystem: true` | `--read-only --read-only-tmpfs=false` (no extra tmpfs) |
//! | `allowPrivilegeEscalation: false` | `--security-opt no-new-privileges` |
//! | `capabilities.drop` / `.add` | `--cap-drop` / `--cap-add`, in that order |
//! | `seccompProfile: RuntimeDefault` | podman's default seccomp profile |
//! | `privileged: true` | `--privileged` |
//! | volume `hostPath` | a bind mount of a directory of the lab (`:ro` if `readOnly`) |
//! | volume `emptyDir` (any medium) | a tmpfs (`rw,exec,nosuid,nodev,mode=1777`) |
//! | `terminationGracePeriodSeconds` | `podman stop -t` |
//!
//! Any other securityContext key or volume type fails the test (it would be ignored
//! otherwise, and the test would not run what the manifest says).
//!
//! podman reads the project's configuration (`scripts/podman/`) and storage
//! (`K8SLB_IMAGE_DIR`, default /var/tmp/k8slb-images), never the machine's.

use crate::bins;
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The image the tests run: `K8SLB_IMAGE`, default `localhost/k8slb/k8slb:latest`.
pub fn image() -> String {
    std::env::var("K8SLB_IMAGE").unwrap_or_else(|_| "localhost/k8slb/k8slb:latest".into())
}

/// The environment podman runs with (the same as scripts/image.sh's).
pub fn podman_env() -> Vec<(String, String)> {
    let root = bins::repo_root().join("scripts/podman");
    let dir = std::env::var("K8SLB_IMAGE_DIR").unwrap_or_else(|_| "/var/tmp/k8slb-images".into());
    let storage = if dir == "/var/tmp/k8slb-images" {
        root.join("storage.conf")
    } else {
        Path::new(&dir).join("storage.conf")
    };
    vec![
        (
            "CONTAINERS_CONF".into(),
            root.join("containers.conf").display().to_string(),
        ),
        (
            "CONTAINERS_STORAGE_CONF".into(),
            storage.display().to_string(),
        ),
        (
            "CONTAINERS_REGISTRIES_CONF".into(),
            root.join("registries.conf").display().to_string(),
        ),
    ]
}

/// `podman <args>` with [`podman_env`]; podman's stderr in the error.
pub fn podman_command(args: &[&str]) -> Command {
    let mut c = Command::new("podman");
    c.args(args).stdin(Stdio::null());
    for (k, v) in podman_env() {
        c.env(k, v);
    }
    c
}

/// Runs podman to completion; fails with its stderr when it exits non-zero.
pub fn podman(args: &[&str]) -> Result<String> {
    let out = podman_command(args)
        .output()
        .context("cannot run podman; run ./scripts/install-deps.sh (apt-get install podman buildah runc mmdebstrap)")?;
    if !out.status.success() {
        bail!(
            "`podman {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Makes sure the image is there and current: runs `scripts/image.sh` once per test
/// process (a no-op cargo build and cached layers when nothing changed), unless
/// `K8SLB_IMAGE_BUILT=1` says the caller has just built it (scripts/test.sh does).
/// Fails, never skips, when podman is missing.
pub fn ensure_image() -> Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        (|| -> Result<()> {
            for tool in ["podman", "runc"] {
                if crate::lab::which(tool).is_none() {
                    bail!(
                        "`{tool}` is not installed: the image tests need podman and runc \
                         (./scripts/install-deps.sh installs podman buildah runc mmdebstrap)"
                    );
                }
            }
            if std::env::var("K8SLB_IMAGE_BUILT").as_deref() != Ok("1") {
                let script = bins::repo_root().join("scripts/image.sh");
                let mut cmd = Command::new(&script);
                // Not the variables cargo set for this test (CARGO_MANIFEST_DIR, ...): build
                // scripts track some of them (ring reads CARGO_MANIFEST_DIR), and a
                // different value makes image.sh's cargo build rebuild half the tree.
                for (k, _) in std::env::vars_os() {
                    let k = k.to_string_lossy().into_owned();
                    if (k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR")
                        || k == "OUT_DIR"
                    {
                        cmd.env_remove(&k);
                    }
                }
                let out = cmd
                    .stdin(Stdio::null())
                    .output()
                    .with_context(|| format!("running {}", script.display()))?;
                if !out.status.success() {
                    bail!(
                        "{} failed ({}):\n{}{}",
                        script.display(),
                        out.status,
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
            podman(&["image", "exists", &image()])
                .with_context(|| format!("image {} is missing: run ./scripts/image.sh", image()))?;
            Ok(())
        })()
        .map_err(|e| format!("{e:#}"))
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

/// A volume of the pod spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Volume {
    HostPath(String),
    EmptyDir,
}

/// One `volumeMounts` entry with its volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub name: String,
    pub path: String,
    pub read_only: bool,
    pub volume: Volume,
}

/// One container of a workload in the generated manifest, with what podman needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Where it was read from (`manifests/k8slb-haproxy.yml DaemonSet/actor`).
    pub source: String,
    pub command: Vec<String>,
    /// `env` entries with a literal `value` (fieldRefs are the caller's business).
    pub env: BTreeMap<String, String>,
    pub run_as_user: Option<u32>,
    pub run_as_group: Option<u32>,
    pub run_as_non_root: bool,
    pub read_only_root: bool,
    pub allow_privilege_escalation: Option<bool>,
    pub privileged: bool,
    pub cap_drop: Vec<String>,
    pub cap_add: Vec<String>,
    pub mounts: Vec<Mount>,
    pub grace_seconds: u64,
}

/// The generated manifest the image tests read: `K8SLB_MANIFEST`, default
/// `manifests/k8slb-haproxy.yml`.
pub fn manifest_path() -> PathBuf {
    std::env::var("K8SLB_MANIFEST")
        .map(PathBuf::from)
        .unwrap_or_else(|_| bins::repo_root().join("manifests/k8slb-haproxy.yml"))
}

/// Reads `kind/name`'s container `container` from a multi-document manifest.
pub fn workload(manifest: &Path, kind: &str, name: &str, container: &str) -> Result<Workload> {
    let text = std::fs::read_to_string(manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    let source = format!("{} {kind}/{name}", manifest.display());
    let mut found = None;
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc)
            .with_context(|| format!("parsing {}", manifest.display()))?;
        if v["kind"] == kind && v["metadata"]["name"] == name {
            found = Some(v);
        }
    }
    let obj = found.with_context(|| format!("{source}: not in the manifest"))?;
    workload_from(&obj["spec"]["template"]["spec"], container, &source)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The [`Workload`] of `container` in a pod spec (JSON form).
pub fn workload_from(pod: &Value, container: &str, source: &str) -> Result<Workload> {
    let c = pod["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == container)
        .with_context(|| format!("{source}: no container {container}"))?;
    let psc = &pod["securityContext"];
    let sc = &c["securityContext"];
    for key in sc.as_object().into_iter().flatten().map(|(k, _)| k) {
        if ![
            "runAsUser",
            "runAsGroup",
            "runAsNonRoot",
            "allowPrivilegeEscalation",
            "readOnlyRootFilesystem",
            "capabilities",
            "seccompProfile",
            "privileged",
        ]
        .contains(&key.as_str())
        {
            bail!("{source}: container securityContext.{key} is not translated to podman by the image tests (tests/src/container.rs)");
        }
    }
    for key in psc.as_object().into_iter().flatten().map(|(k, _)| k) {
        if !["runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile"].contains(&key.as_str()) {
            bail!("{source}: pod securityContext.{key} is not translated to podman by the image tests (tests/src/container.rs)");
        }
    }
    for s in [psc, sc] {
        let t = &s["seccompProfile"]["type"];
        if !t.is_null() && t != "RuntimeDefault" {
            bail!("{source}: seccompProfile {t} (only RuntimeDefault is translated)");
        }
    }
    let pick = |k: &str| {
        if sc[k].is_null() {
            psc[k].clone()
        } else {
            sc[k].clone()
        }
    };
    let uid = |v: Value| v.as_u64().map(|n| n as u32);
    let volumes: BTreeMap<String, Volume> = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let name = v["name"].as_str().unwrap_or_default().to_string();
            let vol = if let Some(p) = v["hostPath"]["path"].as_str() {
                Volume::HostPath(p.to_string())
            } else if v.get("emptyDir").is_some() {
                Volume::EmptyDir
            } else {
                bail!("{source}: volume {name}: only hostPath and emptyDir are translated")
            };
            Ok((name, vol))
        })
        .collect::<Result<_>>()?;
    let mounts = c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let name = m["name"].as_str().unwrap_or_default().to_string();
            Ok(Mount {
                path: m["mountPath"]
                    .as_str()
                    .with_context(|| format!("{source}: mount {name} has no mountPath"))?
                    .to_string(),
                read_only: m["readOnly"].as_bool().unwrap_or(false),
                volume: volumes
                    .get(&name)
                    .with_context(|| format!("{source}: mount {name} has no volume"))?
                    .clone(),
                name,
            })
        })
        .collect::<Result<_>>()?;
    let env = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .collect();
    Ok(Workload {
        source: source.to_string(),
        command: strings(&c["command"]),
        env,
        run_as_user: uid(pick("runAsUser")),
        run_as_group: uid(pick("runAsGroup")),
        run_as_non_root: pick("runAsNonRoot").as_bool().unwrap_or(false),
        read_only_root: sc["readOnlyRootFilesystem"].as_bool().unwrap_or(false),
        allow_privilege_escalation: sc["allowPrivilegeEscalation"].as_bool(),
        privileged: sc["privileged"].as_bool().unwrap_or(false),
        cap_drop: strings(&sc["capabilities"]["drop"]),
        cap_add: strings(&sc["capabilities"]["add"]),
        mounts,
        grace_seconds: pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30),
    })
}

impl Workload {
    /// The capabilities the container gets (`drop` first, then `add`), upper-case without
    /// the `CAP_` prefix, sorted. `None` for every capability (not dropped, privileged).
    pub fn effective_caps(&self) -> Option<Vec<String>> {
        let norm = |s: &String| s.trim_start_matches("CAP_").to_uppercase();
        if self.privileged || !self.cap_drop.iter().any(|c| norm(c) == "ALL") {
            return None;
        }
        let mut v: Vec<String> = self.cap_add.iter().map(norm).collect();
        v.sort();
        v.dedup();
        Some(v)
    }

    /// The same workload with capability `cap` removed from `add` (for the check that a
    /// missing capability fails the test).
    pub fn without_cap(&self, cap: &str) -> Workload {
        let mut w = self.clone();
        w.cap_add.retain(|c| !c.eq_ignore_ascii_case(cap));
        w.source = format!("{} minus capability {cap}", self.source);
        w
    }

    /// podman run options for this workload; `host_dirs` gives the lab directory that
    /// stands for each hostPath volume (by volume NAME).
    pub fn podman_args(&self, host_dirs: &BTreeMap<String, PathBuf>) -> Result<Vec<String>> {
        let mut a: Vec<String> = Vec::new();
        match (self.run_as_user, self.run_as_group) {
            (Some(u), Some(g)) => a.extend(["--user".into(), format!("{u}:{g}")]),
            (Some(u), None) => a.extend(["--user".into(), u.to_string()]),
            (None, _) => {}
        }
        if self.run_as_non_root && self.run_as_user.unwrap_or(0) == 0 {
            bail!(
                "{}: runAsNonRoot with user {:?}: the kubelet refuses to start it",
                self.source,
                self.run_as_user
            );
        }
        if self.read_only_root {
            a.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
        }
        if self.allow_privilege_escalation == Some(false) {
            a.extend(["--security-opt".into(), "no-new-privileges".into()]);
        }
        if self.privileged {
            a.push("--privileged".into());
        }
        for c in &self.cap_drop {
            a.extend(["--cap-drop".into(), c.clone()]);
        }
        for c in &self.cap_add {
            a.extend(["--cap-add".into(), c.clone()]);
        }
        for m in &self.mounts {
            match &m.volume {
                Volume::HostPath(_) => {
                    let dir = host_dirs.get(&m.name).with_context(|| {
                        format!(
                            "{}: no lab directory for hostPath volume {}",
                            self.source, m.name
                        )
                    })?;
                    let ro = if m.read_only { ":ro" } else { "" };
                    a.extend([
                        "--volume".into(),
                        format!("{}:{}{ro}", dir.display(), m.path),
                    ]);
                }
                Volume::EmptyDir => {
                    let ro = if m.read_only { "ro" } else { "rw" };
                    a.extend([
                        "--tmpfs".into(),
                        format!("{}:{ro},exec,nosuid,nodev,mode=1777", m.path),
                    ]);
                }
            }
        }
        Ok(a)
    }
}

/// Capability names in a `/proc/<pid>/status` `CapEff:` hex mask (upper-case, no
/// `CAP_` prefix), sorted.
pub fn cap_names(mask: u64) -> Vec<String> {
    const NAMES: [&str; 41] = [
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ];
    let mut v: Vec<String> = (0..64)
        .filter(|b| mask & (1u64 << b) != 0)
        .map(|b| {
            NAMES
                .get(b as usize)
                .map(|s| s.to_string())
                .unwrap_or_else(|| format!("CAP_{b}"))
        })
        .collect();
    v.sort();
    v
}

/// What `/proc/<pid>` says about a process: uid, effective capabilities, no_new_privs,
/// and whether its root filesystem is mounted read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcSecurity {
    pub uid: u32,
    pub caps: Vec<String>,
    pub no_new_privs: bool,
    pub root_read_only: bool,
}

pub fn proc_security(pid: i32) -> Result<ProcSecurity> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
            .with_context(|| format!("/proc/{pid}/status has no {k}"))
    };
    let uid = field("Uid:")?
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("Uid: line")?;
    let caps = cap_names(u64::from_str_radix(&field("CapEff:")?, 16).context("CapEff")?);
    let no_new_privs = field("NoNewPrivs:")? == "1";
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
    // "<id> <parent> <maj:min> <root> <mount point> <options> ...": the last line for "/"
    // (the one on top).
    let root_read_only = mountinfo
        .lines()
        .rev()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 5 && f[4] == "/")
        .is_some_and(|f| f[5].split(',').any(|o| o == "ro"));
    Ok(ProcSecurity {
        uid,
        caps,
        no_new_privs,
        root_read_only,
    })
}

/// Host pids of the processes in the same PID namespace as `pid` (the container's
/// init), with their state letter and command name.
pub fn pid_namespace_processes(pid: i32) -> Result<Vec<(i32, char, String)>> {
    let ns = std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .with_context(|| format!("reading /proc/{pid}/ns/pid"))?;
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc")?.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{p}/ns/pid"))
            .ok()
            .as_ref()
            != Some(&ns)
        {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // "pid (comm) S ...": comm may hold spaces and parentheses; the last ')' ends it.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let state = stat[close + 1..].trim_start().chars().next().unwrap_or('?');
        out.push((p, state, comm));
    }
    out.sort();
    Ok(out)
}

/// The host pid of a container's PID 1 (0 when it is not running).
pub fn container_pid(name: &str) -> Result<i32> {
    podman(&["inspect", "--format", "{{.State.Pid}}", name])?
        .trim()
        .parse()
        .context("podman inspect .State.Pid")
}

/// The exit code of a stopped container.
pub fn exit_code(name: &str) -> Result<i32> {
    podman(&["inspect", "--format", "{{.State.ExitCode}}", name])?
        .trim()
        .parse()
        .context("podman inspect .State.ExitCode")
}

/// What the lab runs as containers instead of plain processes
/// ([`crate::system::Options::containers`]).
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub image: String,
    /// The actor DaemonSet's container.
    pub actor: Workload,
    /// The watcher Deployment's container.
    pub watcher: Workload,
}

impl ContainerSpec {
    /// The image and both workloads as the generated manifest ([`manifest_path`]) says.
    pub fn from_manifest() -> Result<ContainerSpec> {
        Self::from_file(&manifest_path())
    }

    /// The image and both workloads as the generated manifest `m` says.
    pub fn from_file(m: &Path) -> Result<ContainerSpec> {
        let m = m.to_path_buf();
        Ok(ContainerSpec {
            image: image(),
            actor: workload(&m, "DaemonSet", "actor", "actor")?,
            watcher: workload(&m, "Deployment", "watcher", "watcher")?,
        })
    }
}

/// Copies a file to another path whenever it changes (atomically: temp file + rename),
/// until dropped. In the container lab it stands in for the API server between the
/// watcher, which writes the state as its user (65532, mode 0600), and the actors, which
/// run as root WITHOUT CAP_DAC_OVERRIDE and so cannot read another user's 0600 file (in a
/// cluster they read ConfigMaps instead).
pub struct FileRelay {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl FileRelay {
    pub fn start(src: PathBuf, dst: PathBuf) -> FileRelay {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut last: Option<Vec<u8>> = None;
            let tmp = dst.with_extension("tmp");
            while !s.load(Ordering::Relaxed) {
                if let Ok(bytes) = std::fs::read(&src) {
                    if last.as_ref() != Some(&bytes) {
                        let copied =
                            std::fs::write(&tmp, &bytes).and_then(|()| std::fs::rename(&tmp, &dst));
                        match copied {
                            Ok(()) => last = Some(bytes),
                            Err(e) => {
                                eprintln!("relay {} -> {}: {e}", src.display(), dst.display())
                            }
                        }
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        FileRelay {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for FileRelay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Removes containers on drop (the lab's teardown has killed their processes already).
#[derive(Debug, Default)]
pub struct Containers(pub std::sync::Mutex<Vec<String>>);

impl Containers {
    pub fn add(&self, name: &str) {
        if let Ok(mut v) = self.0.lock() {
            if !v.iter().any(|n| n == name) {
                v.push(name.to_string());
            }
        }
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        let names = self.0.lock().map(|v| v.clone()).unwrap_or_default();
        for n in names {
            if let Err(e) = podman(&["rm", "--force", "--time", "0", &n]) {
                eprintln!("container {n}: {e:#}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cap_mask_decodes_to_names() {
        // NET_BIND_SERVICE (10), NET_ADMIN (12), NET_RAW (13).
        assert_eq!(
            cap_names(0x3400),
            vec!["NET_ADMIN", "NET_BIND_SERVICE", "NET_RAW"]
        );
        assert!(cap_names(0).is_empty());
    }

    #[test]
    fn unknown_security_context_keys_are_refused() {
        let pod =
            json!({"containers": [{"name": "a", "securityContext": {"procMount": "Unmasked"}}]});
        let e = workload_from(&pod, "a", "test").unwrap_err().to_string();
        assert!(e.contains("procMount"), "{e}");
    }

    #[test]
    fn pod_spec_becomes_podman_options() {
        let pod = json!({
            "terminationGracePeriodSeconds": 20,
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": true},
            "containers": [{
                "name": "w",
                "command": ["k8slb-watcher"],
                "securityContext": {"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"], "add": ["NET_RAW"]}},
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                                 {"name": "certs", "mountPath": "/etc/certs", "readOnly": true}],
            }],
            "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "certs", "hostPath": {"path": "/etc/certs"}}],
        });
        let w = workload_from(&pod, "w", "test").unwrap();
        assert_eq!(w.grace_seconds, 20);
        assert_eq!(w.effective_caps(), Some(vec!["NET_RAW".to_string()]));
        assert_eq!(w.without_cap("NET_RAW").effective_caps(), Some(vec![]));
        let dirs = [("certs".to_string(), PathBuf::from("/lab/certs"))].into();
        let a = w.podman_args(&dirs).unwrap().join(" ");
        assert_eq!(
            a,
            "--user 65532:65532 --read-only --read-only-tmpfs=false --security-opt no-new-privileges \
             --cap-drop ALL --cap-add NET_RAW --tmpfs /tmp:rw,exec,nosuid,nodev,mode=1777 \
             --volume /lab/certs:/etc/certs:ro"
        );
        // runAsNonRoot without a user is refused, as the kubelet would.
        let mut root = w.clone();
        root.run_as_user = None;
        assert!(root.podman_args(&dirs).is_err());
    }
}
