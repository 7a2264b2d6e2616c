//! Network namespaces, links and processes: the lab's topology.
//!
//! One lab is a set of network namespaces named `k8slb-<id>-<role>`: a "switch" namespace
//! holding a Linux bridge, and one namespace per host (LB nodes, backends, a client), each
//! joined to the bridge by a veth pair (`eth0` inside the host, `<role>` on the switch).
//! Every address comes from 198.18.0.0/15 and fd00::/8, so nothing the lab sends can leave
//! it: the namespaces have no link to the outside world at all.
//!
//! Teardown (on `Drop`, also while a test panics) kills every process this lab started,
//! then every process still inside its namespaces, then deletes the namespaces. It tries
//! everything and collects the errors rather than stopping at the first one.

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Where labs keep their working directories (logs, configs, state files).
/// `lab-run/` at the repository root is git-ignored.
pub fn runs_root() -> PathBuf {
    if let Ok(d) = std::env::var("K8SLB_LAB_DIR") {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .join("lab-run")
}

/// What a host is for; decides its sysctls and its address block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A load-balancer node: runs the actor, keepalived and the proxy.
    Lb,
    /// A backend ("pod") host: runs lab-backend servers.
    Backend,
    /// The client: sends traffic to VIPs.
    Client,
}

/// One host of the lab.
#[derive(Debug, Clone)]
pub struct Host {
    /// Short name, unique in the lab (`lb1`, `be2`, `client`); also the switch-side veth.
    pub name: String,
    pub role: Role,
    /// Network namespace name.
    pub ns: String,
    /// Main IPv4 address (198.18.0.x/24 on `eth0`).
    pub v4: Ipv4Addr,
    /// Main IPv6 address (fd00:18::x/64 on `eth0`).
    pub v6: Ipv6Addr,
    /// Extra links (`em1`, ...) as (inside name, switch-side name).
    pub extra_links: Vec<(String, String)>,
}

/// A process started by the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProcId(pub usize);

struct Proc {
    host: String,
    name: String,
    child: Child,
    log: PathBuf,
    done: bool,
    /// How it was started, for [`Lab::respawn`].
    cmd: Vec<String>,
    env: Vec<(String, String)>,
}

pub struct Lab {
    pub id: String,
    pub name: String,
    /// Working directory of this lab (logs, configs).
    pub dir: PathBuf,
    pub switch_ns: String,
    hosts: BTreeMap<String, Host>,
    namespaces: Vec<String>,
    procs: Vec<Proc>,
    torn_down: bool,
    passed: bool,
}

/// Runs a command, failing with its stderr when it exits non-zero.
pub fn sh(cmd: &[&str]) -> Result<String> {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", cmd[0]))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            cmd.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn short_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    format!("{:06x}", h.finish() & 0xff_ffff)
}

/// Fails with a clear message unless we are root and the tools the lab needs exist.
pub fn preflight() -> Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        bail!(
            "the k8slb lab needs root (it creates network namespaces and runs keepalived); \
             run the tests as root, e.g. `sudo ./scripts/test.sh`"
        );
    }
    for tool in ["ip", "sysctl"] {
        if which(tool).is_none() {
            bail!("the k8slb lab needs `{tool}` (apt-get install iproute2 procps); run ./scripts/install-deps.sh");
        }
    }
    Ok(())
}

/// Finds an executable on PATH (and in /usr/sbin, /sbin, which non-login PATHs may lack).
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file());
    found
}

fn pid_alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

/// Deletes labs whose owning process is gone (a test run that was SIGKILLed cannot run
/// its `Drop`). Only namespaces named `k8slb-<id>-*` with a dead owner are touched.
pub fn cleanup_stale() -> Vec<String> {
    let mut errors = Vec::new();
    let root = runs_root();
    let Ok(entries) = fs::read_dir(&root) else {
        return errors;
    };
    for e in entries.flatten() {
        let owner = e.path().join("owner");
        let Ok(text) = fs::read_to_string(&owner) else {
            continue;
        };
        let mut lines = text.lines();
        let pid: i32 = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0);
        if pid > 0 && pid_alive(pid) {
            continue;
        }
        let namespaces: Vec<String> = lines.map(str::to_string).collect();
        for ns in &namespaces {
            kill_netns_pids(ns, &mut errors);
        }
        for ns in &namespaces {
            if let Err(e) = delete_netns(ns) {
                errors.push(e.to_string());
            }
        }
        let _ = fs::remove_file(owner);
    }
    errors
}

/// Raises this process's open-files limit (inherited by everything the lab starts) to
/// what container runtimes give pods (1048576), so the daemons see the limits they would
/// see in a DaemonSet rather than this shell's. Best effort.
fn raise_nofile() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    const POD_NOFILE: u64 = 1_048_576;
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < POD_NOFILE || hard < POD_NOFILE {
            let nr_open = fs::read_to_string("/proc/sys/fs/nr_open")
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(POD_NOFILE);
            let target = POD_NOFILE.min(nr_open).max(hard);
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, target, target) {
                eprintln!("lab: open-files limit stays at {hard} (raising it: {e}); the lab lowers HAProxy's maxconn to fit");
            }
        }
    }
}

fn netns_exists(ns: &str) -> bool {
    Path::new("/run/netns").join(ns).exists()
}

fn delete_netns(ns: &str) -> Result<()> {
    if netns_exists(ns) {
        sh(&["ip", "netns", "del", ns])?;
    }
    Ok(())
}

/// Kills every process still inside a namespace of ours (TERM, then KILL).
fn kill_netns_pids(ns: &str, errors: &mut Vec<String>) {
    if !netns_exists(ns) {
        return;
    }
    for sig in [Signal::SIGTERM, Signal::SIGKILL] {
        let pids: Vec<i32> = match sh(&["ip", "netns", "pids", ns]) {
            Ok(s) => s
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect(),
            Err(e) => {
                errors.push(e.to_string());
                return;
            }
        };
        if pids.is_empty() {
            return;
        }
        for p in &pids {
            let _ = kill(Pid::from_raw(*p), sig);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && pids.iter().any(|p| pid_alive(*p)) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Lab {
    /// Creates an empty lab: the switch namespace with its bridge. Refuses to start when
    /// not root.
    pub fn new(name: &str) -> Result<Lab> {
        preflight()?;
        for e in cleanup_stale() {
            eprintln!("lab: stale cleanup: {e}");
        }
        raise_nofile();
        let id = short_id();
        let dir = runs_root().join(format!("{name}-{id}"));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut lab = Lab {
            switch_ns: format!("k8slb-{id}-sw"),
            id,
            name: name.to_string(),
            dir,
            hosts: BTreeMap::new(),
            namespaces: Vec::new(),
            procs: Vec::new(),
            torn_down: false,
            passed: false,
        };
        let sw = lab.switch_ns.clone();
        lab.add_netns(&sw)?;
        lab.ip(
            &sw,
            &[
                "link",
                "add",
                "br0",
                "type",
                "bridge",
                "stp_state",
                "0",
                "mcast_snooping",
                "0",
            ],
        )?;
        lab.ip(&sw, &["link", "set", "br0", "up"])?;
        lab.sysctl(&sw, "net.ipv6.conf.all.disable_ipv6", "1")?;
        Ok(lab)
    }

    fn write_owner(&self) -> Result<()> {
        let mut s = format!("{}\n", std::process::id());
        for ns in &self.namespaces {
            s.push_str(ns);
            s.push('\n');
        }
        fs::write(self.dir.join("owner"), s)?;
        Ok(())
    }

    fn add_netns(&mut self, ns: &str) -> Result<()> {
        if netns_exists(ns) {
            bail!("network namespace {ns} already exists");
        }
        // Record it before creating it, so a crash in between still cleans it up.
        self.namespaces.push(ns.to_string());
        self.write_owner()?;
        sh(&["ip", "netns", "add", ns])?;
        self.ip(ns, &["link", "set", "lo", "up"])?;
        Ok(())
    }

    /// `ip -n <ns> <args>`.
    pub fn ip(&self, ns: &str, args: &[&str]) -> Result<String> {
        let mut cmd = vec!["ip", "-n", ns];
        cmd.extend_from_slice(args);
        sh(&cmd)
    }

    pub fn sysctl(&self, ns: &str, key: &str, value: &str) -> Result<()> {
        let kv = format!("{key}={value}");
        sh(&["ip", "netns", "exec", ns, "sysctl", "-qw", &kv])?;
        Ok(())
    }

    /// Adds a host with `index` deciding its addresses: 198.18.0.<index>/24 and
    /// fd00:18::<index>/64 on `eth0`.
    pub fn add_host(&mut self, name: &str, role: Role, index: u8) -> Result<Host> {
        if self.hosts.contains_key(name) || name.len() > 12 {
            bail!("bad or duplicate host name {name:?}");
        }
        let ns = format!("k8slb-{}-{}", self.id, name);
        self.add_netns(&ns)?;
        for (k, v) in [
            ("net.ipv6.conf.all.accept_dad", "0"),
            ("net.ipv6.conf.default.accept_dad", "0"),
            ("net.ipv6.conf.all.dad_transmits", "0"),
            ("net.ipv6.conf.default.dad_transmits", "0"),
        ] {
            self.sysctl(&ns, k, v)?;
        }
        if role == Role::Lb {
            self.sysctl(&ns, "net.ipv4.ip_nonlocal_bind", "1")?;
            self.sysctl(&ns, "net.ipv6.ip_nonlocal_bind", "1")?;
        }
        if role != Role::Lb {
            // Plenty of ephemeral ports for benchmark clients.
            self.sysctl(&ns, "net.ipv4.ip_local_port_range", "10000 65000")?;
        }
        let v4 = Ipv4Addr::new(198, 18, 0, index);
        let v6 = Ipv6Addr::new(0xfd00, 0x18, 0, 0, 0, 0, 0, index as u16);
        let host = Host {
            name: name.to_string(),
            role,
            ns: ns.clone(),
            v4,
            v6,
            extra_links: Vec::new(),
        };
        self.hosts.insert(name.to_string(), host);
        self.add_link(name, "eth0", name)?;
        self.add_addr(name, "eth0", &format!("{v4}/24"))?;
        self.add_addr(name, "eth0", &format!("{v6}/64"))?;
        Ok(self.host(name).clone())
    }

    /// Adds a veth from the host (`inside` name) to the switch (`outside` name, < 15
    /// chars), both up.
    pub fn add_link(&mut self, host: &str, inside: &str, outside: &str) -> Result<()> {
        let ns = self.host(host).ns.clone();
        let sw = self.switch_ns.clone();
        sh(&[
            "ip", "link", "add", "name", inside, "netns", &ns, "type", "veth", "peer", "name",
            outside, "netns", &sw,
        ])?;
        for (k, v) in [("accept_dad", "0"), ("dad_transmits", "0")] {
            self.sysctl(&ns, &format!("net.ipv6.conf.{inside}.{k}"), v)?;
        }
        self.ip(&sw, &["link", "set", outside, "master", "br0", "up"])?;
        self.ip(&ns, &["link", "set", inside, "up"])?;
        if inside != "eth0" {
            self.hosts
                .get_mut(host)
                .expect("host exists")
                .extra_links
                .push((inside.to_string(), outside.to_string()));
        }
        Ok(())
    }

    /// Adds an address (`ip/prefix`) to a host's interface, without DAD.
    pub fn add_addr(&self, host: &str, ifname: &str, cidr: &str) -> Result<()> {
        let ns = &self.host(host).ns;
        if cidr.contains(':') {
            self.ip(ns, &["addr", "add", cidr, "dev", ifname, "nodad"])?;
        } else {
            self.ip(ns, &["addr", "add", cidr, "dev", ifname])?;
        }
        Ok(())
    }

    pub fn host(&self, name: &str) -> &Host {
        self.hosts
            .get(name)
            .unwrap_or_else(|| panic!("no host {name:?} in lab {}", self.name))
    }

    pub fn hosts(&self) -> impl Iterator<Item = &Host> {
        self.hosts.values()
    }

    pub fn hosts_with(&self, role: Role) -> Vec<Host> {
        self.hosts
            .values()
            .filter(|h| h.role == role)
            .cloned()
            .collect()
    }

    /// A command that runs `cmd` inside the host's namespace.
    pub fn command_in(&self, host: &str, cmd: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.host(host).ns]).args(cmd);
        c
    }

    /// Runs a command to completion inside a host (stdin closed) and returns its output,
    /// whatever its exit status.
    pub fn run_in(&self, host: &str, cmd: &[&str]) -> Result<Output> {
        self.command_in(host, cmd)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {cmd:?} in {host}"))
    }

    /// Like `run_in` but fails when the command exits non-zero; returns stdout.
    pub fn check_in(&self, host: &str, cmd: &[&str]) -> Result<String> {
        let out = self.run_in(host, cmd)?;
        if !out.status.success() {
            bail!(
                "`{}` in {host} failed ({}): {}{}",
                cmd.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts a long-running process inside a host, in its own process group, with stdout
    /// and stderr going to `<lab dir>/<host>-<name>.log`.
    pub fn spawn_in(&mut self, host: &str, name: &str, cmd: &[&str]) -> Result<ProcId> {
        self.spawn_in_env(host, name, cmd, &[])
    }

    pub fn spawn_in_env(
        &mut self,
        host: &str,
        name: &str,
        cmd: &[&str],
        env: &[(&str, &str)],
    ) -> Result<ProcId> {
        let c = self.command_in(host, cmd);
        self.spawn_command(host, name, c, cmd, env)
    }

    /// Like [`Lab::spawn_in_env`] but in this machine's namespaces, not a host's: for
    /// `podman run --network ns:/run/netns/<ns>`, which `ip netns exec` breaks (it
    /// remounts /sys and hides the cgroup mounts). `host` names the log file only.
    pub fn spawn_outside_env(
        &mut self,
        host: &str,
        name: &str,
        cmd: &[&str],
        env: &[(&str, &str)],
    ) -> Result<ProcId> {
        let mut c = Command::new(cmd[0]);
        c.args(&cmd[1..]);
        self.spawn_command(host, name, c, cmd, env)
    }

    fn spawn_command(
        &mut self,
        host: &str,
        name: &str,
        mut c: Command,
        cmd: &[&str],
        env: &[(&str, &str)],
    ) -> Result<ProcId> {
        let log = self.dir.join(format!("{host}-{name}.log"));
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        c.stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0);
        for (k, v) in env {
            c.env(k, v);
        }
        let child = c
            .spawn()
            .with_context(|| format!("starting {cmd:?} in {host}"))?;
        self.procs.push(Proc {
            host: host.to_string(),
            name: name.to_string(),
            child,
            log,
            done: false,
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        });
        Ok(ProcId(self.procs.len() - 1))
    }

    /// Starts a process again exactly as `p` was started (host, name, command, environment;
    /// the log is appended to). `p` should have exited (see [`Lab::kill`]).
    pub fn respawn(&mut self, p: ProcId) -> Result<ProcId> {
        let proc = &self.procs[p.0];
        let (host, name) = (proc.host.clone(), proc.name.clone());
        let cmd = proc.cmd.clone();
        let env = proc.env.clone();
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.spawn_in_env(&host, &name, &cmd, &env)
    }

    /// The names of the network namespaces this lab created (switch first).
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    pub fn pid(&self, p: ProcId) -> i32 {
        self.procs[p.0].child.id() as i32
    }

    pub fn log_path(&self, p: ProcId) -> &Path {
        &self.procs[p.0].log
    }

    /// The process's log so far.
    pub fn log(&self, p: ProcId) -> String {
        fs::read_to_string(&self.procs[p.0].log).unwrap_or_default()
    }

    /// Sends a signal to the process group of a process started by the lab.
    pub fn signal(&mut self, p: ProcId, sig: Signal) -> Result<()> {
        let proc = &mut self.procs[p.0];
        if proc.done {
            return Ok(());
        }
        killpg(Pid::from_raw(proc.child.id() as i32), sig)
            .with_context(|| format!("signalling {} on {}", proc.name, proc.host))?;
        Ok(())
    }

    /// Sends a signal to the main process only (not its children).
    pub fn signal_main(&mut self, p: ProcId, sig: Signal) -> Result<()> {
        let proc = &self.procs[p.0];
        if proc.done {
            return Ok(());
        }
        kill(Pid::from_raw(proc.child.id() as i32), sig)
            .with_context(|| format!("signalling {} on {}", proc.name, proc.host))?;
        Ok(())
    }

    /// Kills a process group (SIGKILL) and reaps the leader.
    pub fn kill(&mut self, p: ProcId) -> Result<()> {
        self.signal(p, Signal::SIGKILL)?;
        self.wait(p, Duration::from_secs(5))?;
        Ok(())
    }

    /// Waits for a process to exit; returns its exit status (None if it was still running
    /// at the deadline).
    pub fn wait(
        &mut self,
        p: ProcId,
        timeout: Duration,
    ) -> Result<Option<std::process::ExitStatus>> {
        let deadline = Instant::now() + timeout;
        let proc = &mut self.procs[p.0];
        loop {
            if let Some(st) = proc.child.try_wait()? {
                proc.done = true;
                return Ok(Some(st));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether a process started by the lab is still running.
    pub fn running(&mut self, p: ProcId) -> bool {
        let proc = &mut self.procs[p.0];
        if proc.done {
            return false;
        }
        match proc.child.try_wait() {
            Ok(Some(_)) => {
                proc.done = true;
                false
            }
            _ => true,
        }
    }

    /// Cuts a host off the switch: its switch-side veth goes down (the host sees carrier
    /// loss), for every link of the host.
    pub fn cut_link(&self, host: &str) -> Result<()> {
        self.set_links(host, "down")
    }

    pub fn restore_link(&self, host: &str) -> Result<()> {
        self.set_links(host, "up")
    }

    fn set_links(&self, host: &str, state: &str) -> Result<()> {
        let h = self.host(host);
        let mut outs = vec![h.name.clone()];
        outs.extend(h.extra_links.iter().map(|(_, o)| o.clone()));
        for o in outs {
            self.ip(&self.switch_ns, &["link", "set", &o, state])?;
        }
        Ok(())
    }

    /// Every address configured on the host (all interfaces but lo).
    pub fn addrs(&self, host: &str) -> Result<Vec<IpAddr>> {
        let out = self.ip(&self.host(host).ns, &["-j", "addr", "show"])?;
        let v: serde_json::Value = serde_json::from_str(&out).context("parsing ip -j addr")?;
        let mut addrs = Vec::new();
        for link in v.as_array().into_iter().flatten() {
            if link["ifname"] == "lo" {
                continue;
            }
            for a in link["addr_info"].as_array().into_iter().flatten() {
                if let Some(ip) = a["local"].as_str().and_then(|s| s.parse().ok()) {
                    addrs.push(ip);
                }
            }
        }
        Ok(addrs)
    }

    /// The hosts that currently carry `ip`.
    pub fn holders(&self, ip: IpAddr) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for h in self.hosts.values() {
            if self.addrs(&h.name)?.contains(&ip) {
                out.push(h.name.clone());
            }
        }
        Ok(out)
    }

    /// Tears everything down: processes (TERM to each group, then KILL), anything left in
    /// our namespaces, then the namespaces. Returns every error met on the way.
    pub fn teardown(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.torn_down {
            return errors;
        }
        self.torn_down = true;
        for p in self.procs.iter_mut().filter(|p| !p.done) {
            let _ = killpg(Pid::from_raw(p.child.id() as i32), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for p in self.procs.iter_mut().filter(|p| !p.done) {
            loop {
                match p.child.try_wait() {
                    Ok(Some(_)) => {
                        p.done = true;
                        break;
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Ok(None) => {
                        let _ = killpg(Pid::from_raw(p.child.id() as i32), Signal::SIGKILL);
                        if let Err(e) = p.child.wait() {
                            errors.push(format!("reaping {} on {}: {e}", p.name, p.host));
                        }
                        p.done = true;
                        break;
                    }
                    Err(e) => {
                        errors.push(format!("waiting for {} on {}: {e}", p.name, p.host));
                        break;
                    }
                }
            }
        }
        let namespaces = self.namespaces.clone();
        for ns in &namespaces {
            kill_netns_pids(ns, &mut errors);
        }
        for ns in namespaces.iter().rev() {
            if let Err(e) = delete_netns(ns) {
                errors.push(e.to_string());
            }
        }
        let _ = fs::remove_file(self.dir.join("owner"));
        errors
    }
}

impl Lab {
    /// Marks the lab's run as successful: its logs are deleted at teardown. Without it
    /// (a failed or panicking test), the logs are kept and their tails printed.
    pub fn pass(&mut self) {
        self.passed = true;
    }

    fn print_log_tails(&self) {
        for p in &self.procs {
            let text = fs::read_to_string(&p.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(15)..];
            eprintln!(
                "---- {} on {} ({}), last {} lines:",
                p.name,
                p.host,
                p.log.display(),
                tail.len()
            );
            for l in tail {
                eprintln!("  {l}");
            }
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let errors = self.teardown();
        for e in &errors {
            eprintln!("lab {}: teardown: {e}", self.name);
        }
        if !self.passed || std::env::var_os("K8SLB_LAB_KEEP").is_some() {
            if !self.passed {
                self.print_log_tails();
            }
            eprintln!("lab {}: logs kept in {}", self.name, self.dir.display());
        } else if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("lab {}: removing {}: {e}", self.name, self.dir.display());
        }
    }
}
