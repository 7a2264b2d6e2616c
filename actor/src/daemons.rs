//! keepalived, HAProxy and nginx as child processes of the actor, behind the [`Daemon`]
//! trait: the I/O seam of the apply pipeline ([`crate::apply`]) and the supervisor
//! ([`crate::supervise`]). Tests of the pipeline use their own `Daemon`s; these are the
//! real ones.
//!
//! Every path (config, pid files, sockets) is under the actor's work dir
//! ([`Paths`]), so several actors can run on one machine in different network
//! namespaces.
//!
//! - keepalived: `keepalived -n -l -D -G -P -f <cfg> -p <pid> -r <vrrp pid>` (foreground,
//!   log to the console, VRRP only); check `keepalived -t -f <file>`; reload `SIGHUP`,
//!   confirmed by the parent and the VRRP child being alive afterwards.
//! - HAProxy: master-worker, `haproxy -W -db -S <master sock> -f <cfg>`; the
//!   master is our child; check `haproxy -c -q -f <file>`; reload `SIGUSR2` to the master
//!   (listening sockets are handed to the new worker), confirmed on the master CLI by
//!   `show proc`: a new current worker. Endpoint changes go to the Runtime API socket
//!   (`stats socket` in the rendered config) with no reload.
//! - nginx: `nginx -e stderr -p <prefix> -c <cfg> -g 'daemon off;'`; check
//!   `nginx -t` with the same flags; reload `SIGHUP` to the master, confirmed by new
//!   worker pids.

use crate::haproxy_rt;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::{BTreeSet, VecDeque};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which daemon: a process the actor runs (keepalived for every provider, plus the
/// proxy of `haproxy` and `nginx`), not a provider; `as_str` is the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DaemonKind {
    Keepalived,
    Haproxy,
    Nginx,
    /// FRR (zebra, bfdd, bgpd) for BGP-mode pools ([`crate::frr`]).
    Frr,
}

impl DaemonKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DaemonKind::Keepalived => "keepalived",
            DaemonKind::Haproxy => "haproxy",
            DaemonKind::Nginx => "nginx",
            DaemonKind::Frr => "frr",
        }
    }
}

impl std::fmt::Display for DaemonKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{daemon}: run {program}: {source}")]
    Spawn {
        daemon: DaemonKind,
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{daemon}: config check failed: {output}")]
    Check { daemon: DaemonKind, output: String },
    #[error("{daemon}: did not come up: {why}")]
    Start { daemon: DaemonKind, why: String },
    #[error("{daemon}: reload did not take: {why}")]
    Reload { daemon: DaemonKind, why: String },
    #[error("{daemon}: runtime API: {source}")]
    Runtime {
        daemon: DaemonKind,
        #[source]
        source: haproxy_rt::RuntimeError,
    },
    #[error("{daemon}: runtime updates are not supported")]
    RuntimeUnsupported { daemon: DaemonKind },
    #[error("{daemon}: not running")]
    NotRunning { daemon: DaemonKind },
    #[error("{daemon}: signal: {source}")]
    Signal {
        daemon: DaemonKind,
        #[source]
        source: nix::Error,
    },
}

impl DaemonError {
    /// Fixed strings for metric labels and logs.
    pub fn category(&self) -> &'static str {
        match self {
            DaemonError::Spawn { .. } => "spawn",
            DaemonError::Check { .. } => "check",
            DaemonError::Start { .. } => "start",
            DaemonError::Reload { .. } => "reload",
            DaemonError::Runtime { .. } => "runtime",
            DaemonError::RuntimeUnsupported { .. } => "runtime_unsupported",
            DaemonError::NotRunning { .. } => "not_running",
            DaemonError::Signal { .. } => "signal",
        }
    }
}

/// A daemon run as a child of the actor. The config file at [`Daemon::config_path`] is
/// what `start` and `reload` load; the pipeline puts it there (checked, atomically).
pub trait Daemon: Send {
    fn kind(&self) -> DaemonKind;
    fn config_path(&self) -> &Path;
    /// Validate a candidate config file with the daemon's own checker.
    fn check(&self, candidate: &Path) -> Result<(), DaemonError>;
    /// Start the daemon on the config at `config_path` and wait until it is up.
    fn start(&mut self) -> Result<(), DaemonError>;
    /// Reload the running daemon on the config at `config_path`; confirm it took.
    fn reload(&mut self) -> Result<(), DaemonError>;
    /// Apply endpoint changes without a reload (HAProxy Runtime API).
    fn runtime(&mut self, commands: &[String]) -> Result<(), DaemonError> {
        let _ = commands;
        Err(DaemonError::RuntimeUnsupported {
            daemon: self.kind(),
        })
    }
    /// If the child has exited since the last call, reap it and describe how.
    fn poll_exit(&mut self) -> Option<String>;
    fn is_running(&self) -> bool;
    /// The process to watch: the proxy's master (its health file), keepalived's parent
    /// (its exit watcher); `None` if not running.
    fn pid(&self) -> Option<u32> {
        None
    }
    /// The health file keepalived tracks for this daemon (the proxy's
    /// [`Paths::proxy_health`]); the pipeline writes `0` once a start is confirmed and
    /// `1` when the supervisor sees the child exit. `None`: not tracked.
    fn track_file(&self) -> Option<&Path> {
        None
    }
    /// Stop: `SIGTERM`, then `SIGKILL` after `grace`.
    fn stop(&mut self, grace: Duration);
}

/// Where everything of one actor lives, under its work dir.
#[derive(Debug, Clone)]
pub struct Paths {
    pub work_dir: PathBuf,
}

impl Paths {
    pub fn new(work_dir: impl Into<PathBuf>) -> Self {
        Paths {
            work_dir: work_dir.into(),
        }
    }
    fn p(&self, name: &str) -> PathBuf {
        self.work_dir.join(name)
    }
    pub fn keepalived_conf(&self) -> PathBuf {
        self.p("keepalived.conf")
    }
    pub fn keepalived_pid(&self) -> PathBuf {
        self.p("keepalived.pid")
    }
    pub fn keepalived_vrrp_pid(&self) -> PathBuf {
        self.p("keepalived-vrrp.pid")
    }
    pub fn haproxy_cfg(&self) -> PathBuf {
        self.p("haproxy.cfg")
    }
    pub fn haproxy_pid(&self) -> PathBuf {
        self.p("haproxy.pid")
    }
    pub fn haproxy_master_socket(&self) -> PathBuf {
        self.p("haproxy-master.sock")
    }
    /// The Runtime API (`stats socket ... level admin expose-fd listeners`).
    pub fn haproxy_runtime_socket(&self) -> PathBuf {
        self.p("haproxy.sock")
    }
    pub fn nginx_conf(&self) -> PathBuf {
        self.p("nginx.conf")
    }
    pub fn nginx_pid(&self) -> PathBuf {
        self.p("nginx.pid")
    }
    pub fn nginx_prefix(&self) -> PathBuf {
        self.p("nginx")
    }
    /// The unix sockets of the proxy's internal hops ([`crate::view::HttpRenderOptions::hop_dir`]).
    pub fn hop_dir(&self) -> PathBuf {
        self.p("hop")
    }
    pub fn last_state(&self) -> PathBuf {
        self.p("last-state.json")
    }
    /// The proxy's health file that keepalived tracks (`track_file`): `0` while the
    /// proxy runs, `1` after it exited (written by [`crate::apply`]).
    pub fn proxy_health(&self) -> PathBuf {
        self.p("proxy-health")
    }
}

/// Make `dir` (and its parents) and leave it 0700: a directory only the proxy's user
/// (the actor's: root) may enter, for sockets that take PROXY protocol headers (whoever
/// connects to one may claim any client address).
pub fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// The group nginx's workers run as (they connect to the hop sockets): the config's
/// `user <user> [<group>]` directive's (without a group, the group named as the user,
/// as nginx does), else nginx's default for a master started as root, `nogroup`
/// (Debian's build; user `nobody`).
pub fn nginx_worker_group(config_text: &str) -> String {
    config_text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("user "))
        .map(|rest| {
            let words: Vec<&str> = rest
                .split([' ', '\t', ';'])
                .filter(|w| !w.is_empty())
                .collect();
            words.get(1).or(words.first()).copied().unwrap_or("nogroup")
        })
        .next()
        .unwrap_or("nogroup")
        .to_string()
}

/// Before a fresh start of nginx (none of ours runs: never on a reload, where nginx
/// keeps its sockets): the hop directory of its internal servers (TLS ports of both
/// modes) made 0710, the actor's (root: the master binds there, without
/// CAP_DAC_OVERRIDE, which the DaemonSet drops), of group `worker_group`, whose
/// workers connect to its sockets (nginx makes them 0666; nothing else may enter the
/// directory, only root writes it); and the socket files a killed nginx left there
/// removed (nginx would fail to bind them: "Address already in use"). Only `rts_*.sock`
/// sockets are removed.
pub fn prepare_nginx_hop_dir(dir: &Path, worker_group: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    std::fs::create_dir_all(dir)?;
    let group = nix::unistd::Group::from_name(worker_group)
        .map_err(std::io::Error::from)?
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no group {worker_group} for nginx's workers"),
            )
        })?;
    nix::unistd::chown(dir, None, Some(group.gid)).map_err(std::io::Error::from)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o710))?;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("rts_") && name.ends_with(".sock") && e.file_type()?.is_socket() {
            std::fs::remove_file(e.path())?;
        }
    }
    Ok(())
}

fn run_check(daemon: DaemonKind, cmd: &mut Command) -> Result<(), DaemonError> {
    let program = format!("{:?}", cmd.get_program());
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| DaemonError::Spawn {
            daemon,
            program,
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        let mut output = String::from_utf8_lossy(&out.stderr).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stdout));
        let output: String = output.trim().chars().take(4000).collect();
        Err(DaemonError::Check {
            daemon,
            output: format!("{} ({})", output, out.status),
        })
    }
}

/// How long a new nginx master waits for the workers of a killed one to stop.
const ORPHAN_WAIT: Duration = Duration::from_secs(2);

/// True while `pid` runs and is one of nginx's processes (its title `nginx: ...`: the
/// master, a worker, the cache manager).
fn is_nginx_process(pid: u32) -> bool {
    pid_alive(pid)
        && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"nginx: "))
}

/// True while `pid` exists and is not a zombie (an exited child not yet reaped).
pub(crate) fn pid_alive(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|p| kill(Pid::from_raw(p), None).is_ok())
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true)
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn signal(daemon: DaemonKind, pid: u32, sig: Signal) -> Result<(), DaemonError> {
    let p = i32::try_from(pid).map_err(|_| DaemonError::NotRunning { daemon })?;
    kill(Pid::from_raw(p), sig).map_err(|source| DaemonError::Signal { daemon, source })
}

/// Children of `pid` (Linux `/proc/<pid>/task/*/children`).
pub fn child_pids(pid: u32) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
            }
        }
    }
    out
}

/// Poll `f` every 20 ms until it gives `Some`, or `timeout`.
fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` runs a daemon of ours: a live process (not this one) whose command line
/// names `config`, the daemon's config in our work dir.
fn runs_config(pid: u32, config: &Path) -> bool {
    pid != std::process::id()
        && pid_alive(pid)
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&*config.to_string_lossy()))
}

/// Remove `pid_file` unless it names a running daemon of ours (see [`runs_config`]).
/// The work dir outlives the actor's container (a hostPath), and PIDs are reused: a pid
/// file left by an earlier container can name any live process (this container's own
/// threads, a host process, a kernel thread), and keepalived then refuses to start
/// ("daemon is already running") for as long as that process lives. Returns whether it
/// removed a file.
pub fn remove_stale_pid_file(pid_file: &Path, config: &Path) -> bool {
    match read_pid(pid_file) {
        Some(pid) if runs_config(pid, config) => false,
        _ => std::fs::remove_file(pid_file).is_ok(),
    }
}

/// A process left behind by an earlier actor (killed uncleanly) whose pid file is in
/// our work dir and whose command line names our config: stop it, so it neither holds
/// VIPs nor blocks our listeners. Returns the pid it stopped. A pid file that names no
/// daemon of ours is removed ([`remove_stale_pid_file`]).
pub fn stop_leftover(pid_file: &Path, config: &Path, grace: Duration) -> Option<u32> {
    let pid = read_pid(pid_file)?;
    if !runs_config(pid, config) {
        remove_stale_pid_file(pid_file, config);
        return None;
    }
    let p = Pid::from_raw(i32::try_from(pid).ok()?);
    let _ = kill(p, Signal::SIGTERM);
    if wait_for(grace, || (!pid_alive(pid)).then_some(())).is_none() {
        let _ = kill(p, Signal::SIGKILL);
        wait_for(Duration::from_secs(2), || (!pid_alive(pid)).then_some(()));
    }
    let _ = std::fs::remove_file(pid_file);
    Some(pid)
}

/// Raise this process's soft limit of open files to its hard limit, so that the
/// children inherit it: HAProxy and nginx hold one descriptor per listener (2 per
/// Service port on every VIP) plus 2 per proxied connection, and a container's soft limit
/// is often 1024. Returns (before, after).
pub fn raise_open_files_limit() -> Result<(u64, u64), nix::errno::Errno> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok((soft, hard))
}

/// How many of a child's last stderr lines are kept for error messages.
const STDERR_TAIL: usize = 20;

/// The child process part shared by the three daemons.
#[derive(Debug, Default)]
struct ChildProc {
    child: Option<Child>,
    /// The child's last stderr lines (it goes on to the actor's stderr as well): why a
    /// start failed is then in the error, not only somewhere in the log.
    tail: Arc<Mutex<VecDeque<String>>>,
}

impl ChildProc {
    fn spawn(&mut self, daemon: DaemonKind, cmd: &mut Command) -> Result<u32, DaemonError> {
        let program = format!("{:?}", cmd.get_program());
        let mut child = cmd
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| DaemonError::Spawn {
                daemon,
                program,
                source,
            })?;
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        if let Some(err) = child.stderr.take() {
            let keep = tail.clone();
            // Ends when the child (and every process it forked that holds the pipe) exits.
            let _ = std::thread::Builder::new()
                .name(format!("{daemon}-stderr"))
                .spawn(move || {
                    // Bytes, not `lines()`: one line that is not UTF-8 (nginx logs raw
                    // request lines) must not end the reader and close the pipe.
                    let mut r = BufReader::new(err);
                    let mut buf = Vec::new();
                    loop {
                        buf.clear();
                        match r.read_until(b'\n', &mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                        let line = String::from_utf8_lossy(&buf)
                            .trim_end_matches(['\n', '\r'])
                            .to_string();
                        crate::say!("{line}");
                        let mut t = keep.lock().unwrap_or_else(|p| p.into_inner());
                        if t.len() == STDERR_TAIL {
                            t.pop_front();
                        }
                        t.push_back(line);
                    }
                });
        }
        self.tail = tail;
        let pid = child.id();
        self.child = Some(child);
        Ok(pid)
    }
    /// The last stderr lines that say what went wrong (HAProxy `[ALERT]`, nginx
    /// `[emerg]`, keepalived errors), else the last three; one line, `" | "`-joined.
    ///
    /// `settle`: give the pipe a moment for the last lines after the exit (not on the
    /// supervisor's path, where every millisecond delays the VIP's move).
    fn stderr_reason(&self, settle: bool) -> String {
        if settle {
            std::thread::sleep(Duration::from_millis(50));
        }
        let t = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        let bad: Vec<&str> = t
            .iter()
            .map(|l| l.trim())
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                ["alert", "emerg", "error", "fatal", "cannot", "failed"]
                    .iter()
                    .any(|w| l.contains(w))
            })
            .collect();
        let lines: Vec<&str> = if bad.is_empty() {
            t.iter().rev().take(3).rev().map(|l| l.trim()).collect()
        } else {
            bad.into_iter().rev().take(5).rev().collect()
        };
        lines.join(" | ").chars().take(1000).collect()
    }
    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
    fn poll_exit(&mut self) -> Option<String> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(match self.stderr_reason(false) {
                    r if r.is_empty() => status.to_string(),
                    r => format!("{status}: {r}"),
                })
            }
            Ok(None) => None,
            Err(e) => {
                self.child = None;
                Some(format!("wait failed: {e}"))
            }
        }
    }
    fn alive(&mut self) -> bool {
        self.poll_exit_keep().is_none() && self.child.is_some()
    }
    /// Like `poll_exit` but keeps the exit for the supervisor: only looks.
    fn poll_exit_keep(&mut self) -> Option<String> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }
    /// Poll every 20 ms until `up` holds (`Some(true)`), the child exits first
    /// (`Some(false)`), or `timeout` passes (`None`).
    fn wait_up(&mut self, timeout: Duration, mut up: impl FnMut() -> bool) -> Option<bool> {
        wait_for(timeout, || {
            if !self.alive() {
                return Some(false);
            }
            up().then_some(true)
        })
    }
    /// Spawn `cmd` and wait up to [`CONFIRM_TIMEOUT`] until `up(pid)` confirms the daemon
    /// serves. A child that exits first is `Start { why: "exited at start" }`; no
    /// confirmation in time is `Start { why: timeout_why }` (the child is left running).
    fn start_confirmed(
        &mut self,
        daemon: DaemonKind,
        cmd: &mut Command,
        timeout_why: &str,
        mut up: impl FnMut(u32) -> bool,
    ) -> Result<(), DaemonError> {
        let pid = self.spawn(daemon, cmd)?;
        let why = match self.wait_up(CONFIRM_TIMEOUT, || up(pid)) {
            Some(true) => return Ok(()),
            Some(false) => match self.stderr_reason(true) {
                r if r.is_empty() => "exited at start".to_string(),
                r => format!("exited at start: {r}"),
            },
            None => timeout_why.to_string(),
        };
        Err(DaemonError::Start { daemon, why })
    }
    fn stop(&mut self, grace: Duration) {
        self.stop_with(Signal::SIGTERM, grace);
    }
    /// Stop with `sig` (a graceful stop: HAProxy's soft-stop `SIGUSR1`, nginx's
    /// `SIGQUIT`), then `SIGKILL` after `grace`.
    fn stop_with(&mut self, sig: Signal, grace: Duration) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        if let Ok(p) = i32::try_from(c.id()) {
            let _ = kill(Pid::from_raw(p), sig);
        }
        let end = Instant::now() + grace;
        while Instant::now() < end {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Binary locations (overridable for odd installs).
#[derive(Debug, Clone)]
pub struct Binaries {
    pub keepalived: PathBuf,
    pub haproxy: PathBuf,
    pub nginx: PathBuf,
}

impl Default for Binaries {
    fn default() -> Self {
        Binaries {
            keepalived: "keepalived".into(),
            haproxy: "haproxy".into(),
            nginx: "nginx".into(),
        }
    }
}

/// How long a start or reload may take before it counts as failed.
pub const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------
// keepalived

pub struct Keepalived {
    bin: PathBuf,
    paths: Paths,
    cfg: PathBuf,
    child: ChildProc,
}

impl Keepalived {
    pub fn new(bin: impl Into<PathBuf>, paths: Paths) -> Self {
        let cfg = paths.keepalived_conf();
        Keepalived {
            bin: bin.into(),
            paths,
            cfg,
            child: ChildProc::default(),
        }
    }
}

impl Keepalived {
    /// Whether the installed config has any VRRP instance (keepalived starts no VRRP
    /// child without one).
    fn has_instances(&self) -> bool {
        std::fs::read_to_string(&self.cfg)
            .map(|t| {
                t.lines()
                    .any(|l| l.trim_start().starts_with("vrrp_instance "))
            })
            .unwrap_or(true)
    }
}

impl Daemon for Keepalived {
    fn kind(&self) -> DaemonKind {
        DaemonKind::Keepalived
    }
    fn config_path(&self) -> &Path {
        &self.cfg
    }
    fn check(&self, candidate: &Path) -> Result<(), DaemonError> {
        run_check(
            DaemonKind::Keepalived,
            Command::new(&self.bin).arg("-t").arg("-f").arg(candidate),
        )
    }
    fn start(&mut self) -> Result<(), DaemonError> {
        let (pid_file, vrrp_pid) = (
            self.paths.keepalived_pid(),
            self.paths.keepalived_vrrp_pid(),
        );
        let _ = std::fs::remove_file(&vrrp_pid);
        // keepalived refuses to start while its pid file names any live process.
        remove_stale_pid_file(&pid_file, &self.cfg);
        let mut cmd = Command::new(&self.bin);
        cmd.args(["-n", "-l", "-D", "-G", "-P", "-f"])
            .arg(&self.cfg)
            .arg("-p")
            .arg(&pid_file)
            .arg("-r")
            .arg(&vrrp_pid);
        self.child.spawn(DaemonKind::Keepalived, &mut cmd)?;
        // With no vrrp_instance keepalived runs without a VRRP child: then the parent
        // staying up is all there is to confirm.
        let instances = self.has_instances();
        let up = if instances {
            self.child.wait_up(CONFIRM_TIMEOUT, || {
                read_pid(&vrrp_pid).is_some_and(pid_alive)
            })
        } else {
            std::thread::sleep(Duration::from_millis(300));
            Some(self.child.alive())
        };
        let why = match up {
            Some(true) => return Ok(()),
            Some(false) => "exited at start",
            None => "no VRRP child after 10 s",
        };
        // Never leave a half-started keepalived behind: the next start would refuse
        // with "daemon is already running".
        self.child.stop(Duration::from_secs(2));
        Err(DaemonError::Start {
            daemon: DaemonKind::Keepalived,
            why: why.into(),
        })
    }
    /// The keepalived parent (its exit watcher: see `Applier::watch_keepalived_exit`).
    fn pid(&self) -> Option<u32> {
        self.child.pid()
    }
    fn reload(&mut self) -> Result<(), DaemonError> {
        let daemon = DaemonKind::Keepalived;
        let pid = self.child.pid().ok_or(DaemonError::NotRunning { daemon })?;
        signal(daemon, pid, Signal::SIGHUP)?;
        // keepalived reloads in place; it confirms nothing. The reload took when the
        // parent and (if the config has instances) its VRRP child are alive a moment
        // later.
        std::thread::sleep(Duration::from_millis(200));
        let instances = self.has_instances();
        let vrrp = read_pid(&self.paths.keepalived_vrrp_pid());
        if self.child.alive() && (!instances || vrrp.is_some_and(pid_alive)) {
            return Ok(());
        }
        if self.child.alive() {
            // A keepalived that started with no instance has no VRRP child, and a HUP
            // does not create one: restart it with the new config.
            tracing::info!("keepalived has no VRRP child after reload; restarting it");
            self.child.stop(Duration::from_secs(2));
            return self.start().map_err(|e| DaemonError::Reload {
                daemon,
                why: format!("restart after reload: {e}"),
            });
        }
        Err(DaemonError::Reload {
            daemon,
            why: "keepalived died after SIGHUP".into(),
        })
    }
    fn poll_exit(&mut self) -> Option<String> {
        self.child.poll_exit()
    }
    fn is_running(&self) -> bool {
        self.child.child.is_some()
    }
    fn stop(&mut self, grace: Duration) {
        self.child.stop(grace);
    }
}

// ---------------------------------------------------------------------------------
// HAProxy

pub struct Haproxy {
    bin: PathBuf,
    paths: Paths,
    cfg: PathBuf,
    health: PathBuf,
    child: ChildProc,
}

impl Haproxy {
    pub fn new(bin: impl Into<PathBuf>, paths: Paths) -> Self {
        let cfg = paths.haproxy_cfg();
        let health = paths.proxy_health();
        Haproxy {
            bin: bin.into(),
            paths,
            cfg,
            health,
            child: ChildProc::default(),
        }
    }
    pub fn master_socket(&self) -> PathBuf {
        self.paths.haproxy_master_socket()
    }
    /// `show proc` on the master CLI.
    pub fn show_proc(&self) -> Result<haproxy_rt::ProcList, DaemonError> {
        haproxy_rt::show_proc(&self.master_socket()).map_err(|source| DaemonError::Runtime {
            daemon: DaemonKind::Haproxy,
            source,
        })
    }
}

impl Daemon for Haproxy {
    fn kind(&self) -> DaemonKind {
        DaemonKind::Haproxy
    }
    fn track_file(&self) -> Option<&Path> {
        Some(&self.health)
    }
    fn config_path(&self) -> &Path {
        &self.cfg
    }
    fn check(&self, candidate: &Path) -> Result<(), DaemonError> {
        run_check(
            DaemonKind::Haproxy,
            // Not `-q`: HAProxy 2.6 then prints nothing, not even the ALERT that says
            // why the config is refused.
            Command::new(&self.bin).arg("-c").arg("-f").arg(candidate),
        )
    }
    fn start(&mut self) -> Result<(), DaemonError> {
        let sock = self.master_socket();
        let _ = std::fs::remove_file(&sock);
        remove_stale_pid_file(&self.paths.haproxy_pid(), &self.cfg);
        let mut cmd = Command::new(&self.bin);
        cmd.args(["-W", "-db", "-S"])
            .arg(&sock)
            .arg("-f")
            .arg(&self.cfg);
        // The pid file is the config's `pidfile` (rendered as `Paths::haproxy_pid`).
        self.child.start_confirmed(
            DaemonKind::Haproxy,
            &mut cmd,
            "no worker on the master CLI after 10 s",
            |_| {
                haproxy_rt::show_proc(&sock)
                    .ok()
                    .and_then(|p| p.current_worker())
                    .is_some()
            },
        )
    }
    fn reload(&mut self) -> Result<(), DaemonError> {
        let daemon = DaemonKind::Haproxy;
        let pid = self.child.pid().ok_or(DaemonError::NotRunning { daemon })?;
        let before = self.show_proc()?;
        let old_worker = before.current_worker();
        signal(daemon, pid, Signal::SIGUSR2)?;
        let sock = self.master_socket();
        let ok = wait_for(CONFIRM_TIMEOUT, || {
            let p = haproxy_rt::show_proc(&sock).ok()?;
            (p.master_reloads() > before.master_reloads()
                && p.current_worker().is_some()
                && p.current_worker() != old_worker)
                .then_some(())
        });
        match ok {
            Some(()) => Ok(()),
            None => Err(DaemonError::Reload {
                daemon,
                why: "no new worker generation on the master CLI within 10 s".into(),
            }),
        }
    }
    fn runtime(&mut self, commands: &[String]) -> Result<(), DaemonError> {
        haproxy_rt::apply_commands(&self.paths.haproxy_runtime_socket(), commands)
            .map(|_| ())
            .map_err(|source| DaemonError::Runtime {
                daemon: DaemonKind::Haproxy,
                source,
            })
    }
    fn poll_exit(&mut self) -> Option<String> {
        self.child.poll_exit()
    }
    fn is_running(&self) -> bool {
        self.child.child.is_some()
    }
    fn pid(&self) -> Option<u32> {
        self.child.pid()
    }
    fn stop(&mut self, grace: Duration) {
        // SIGUSR1: the master-worker soft stop: listeners close, connections in flight
        // finish (SIGTERM would cut them); SIGKILL after `grace`.
        self.child.stop_with(Signal::SIGUSR1, grace);
    }
}

// ---------------------------------------------------------------------------------
// nginx

pub struct Nginx {
    bin: PathBuf,
    paths: Paths,
    cfg: PathBuf,
    health: PathBuf,
    child: ChildProc,
    /// The master's worker processes seen so far (refreshed at every start, reload and
    /// poll; dead ones pruned). nginx's workers outlive a master killed by SIGKILL
    /// (HAProxy's exit with theirs) and keep its listening sockets: a new master could
    /// then never bind them ("Address already in use") while they served the old config.
    workers: BTreeSet<u32>,
}

impl Nginx {
    pub fn new(bin: impl Into<PathBuf>, paths: Paths) -> Self {
        let cfg = paths.nginx_conf();
        let health = paths.proxy_health();
        Nginx {
            bin: bin.into(),
            paths,
            cfg,
            health,
            child: ChildProc::default(),
            workers: BTreeSet::new(),
        }
    }
    /// Add the running master's children to [`Nginx::workers`]; forget those gone.
    fn track_workers(&mut self) {
        self.workers.retain(|p| is_nginx_process(*p));
        if let Some(pid) = self.child.pid() {
            self.workers.extend(child_pids(pid));
        }
    }
    /// The workers of a master that is gone (killed: nothing told them to stop): asked
    /// to stop as at a graceful stop (SIGQUIT: each closes its listening sockets at once
    /// and ends when its connections have), waited for up to `wait`, then SIGKILLed if
    /// `kill` (what is left of a stop whose grace has passed). Only processes that are
    /// still nginx's are signalled (a PID may have been reused).
    fn end_orphaned_workers(&mut self, wait: Duration, kill: bool) {
        self.workers.retain(|p| is_nginx_process(*p));
        if self.workers.is_empty() {
            return;
        }
        tracing::warn!(
            workers = ?self.workers,
            "nginx: workers of a master that is gone; stopping them"
        );
        for p in &self.workers {
            let _ = signal(DaemonKind::Nginx, *p, Signal::SIGQUIT);
        }
        let _ = wait_for(wait, || {
            self.workers
                .iter()
                .all(|p| !is_nginx_process(*p))
                .then_some(())
        });
        if kill {
            for p in self.workers.iter().filter(|p| is_nginx_process(**p)) {
                let _ = signal(DaemonKind::Nginx, *p, Signal::SIGKILL);
            }
        }
        self.workers.retain(|p| is_nginx_process(*p));
    }
    fn base(&self, cfg: &Path) -> Command {
        let _ = std::fs::create_dir_all(self.paths.nginx_prefix().join("logs"));
        let mut cmd = Command::new(&self.bin);
        cmd.arg("-e")
            .arg("stderr")
            .arg("-p")
            .arg(self.paths.nginx_prefix())
            .arg("-c")
            .arg(cfg);
        // `daemon off;` unless the config already says so (nginx refuses duplicates).
        let text = std::fs::read_to_string(cfg).unwrap_or_default();
        if !text.lines().any(|l| l.trim_start().starts_with("daemon ")) {
            cmd.arg("-g").arg("daemon off;");
        }
        cmd
    }
}

impl Daemon for Nginx {
    fn kind(&self) -> DaemonKind {
        DaemonKind::Nginx
    }
    fn track_file(&self) -> Option<&Path> {
        Some(&self.health)
    }
    fn config_path(&self) -> &Path {
        &self.cfg
    }
    fn check(&self, candidate: &Path) -> Result<(), DaemonError> {
        let mut cmd = self.base(candidate);
        cmd.arg("-t").arg("-q");
        run_check(DaemonKind::Nginx, &mut cmd)
    }
    fn start(&mut self) -> Result<(), DaemonError> {
        let running = read_pid(&self.paths.nginx_pid()).is_some_and(|p| runs_config(p, &self.cfg))
            || self.child.alive();
        remove_stale_pid_file(&self.paths.nginx_pid(), &self.cfg);
        if !running {
            // Their listening sockets closed before the new master binds them.
            self.end_orphaned_workers(ORPHAN_WAIT, false);
            let text = std::fs::read_to_string(&self.cfg).unwrap_or_default();
            let hop = self.paths.hop_dir();
            if let Err(e) = prepare_nginx_hop_dir(&hop, &nginx_worker_group(&text)) {
                // Only TLS ports of both modes need it: they fail to connect, and say so.
                tracing::warn!(dir = %hop.display(), error = %e, "nginx hop directory not prepared");
            }
        }
        let mut cmd = self.base(&self.cfg.clone());
        let started = self.child.start_confirmed(
            DaemonKind::Nginx,
            &mut cmd,
            "no worker after 10 s",
            |pid| !child_pids(pid).is_empty(),
        );
        self.track_workers();
        started
    }
    fn reload(&mut self) -> Result<(), DaemonError> {
        let daemon = DaemonKind::Nginx;
        let pid = self.child.pid().ok_or(DaemonError::NotRunning { daemon })?;
        let before = child_pids(pid);
        signal(daemon, pid, Signal::SIGHUP)?;
        let ok = wait_for(CONFIRM_TIMEOUT, || {
            (self.child.alive() && child_pids(pid).iter().any(|p| !before.contains(p)))
                .then_some(())
        });
        self.track_workers();
        ok.ok_or(DaemonError::Reload {
            daemon,
            why: "no new nginx worker within 10 s".into(),
        })
    }
    fn poll_exit(&mut self) -> Option<String> {
        self.track_workers();
        let exit = self.child.poll_exit();
        if exit.is_some() {
            self.end_orphaned_workers(ORPHAN_WAIT, false);
        }
        exit
    }
    fn is_running(&self) -> bool {
        self.child.child.is_some()
    }
    fn pid(&self) -> Option<u32> {
        self.child.pid()
    }
    fn stop(&mut self, grace: Duration) {
        // SIGQUIT: graceful (connections in flight finish), SIGKILL after `grace`. (It
        // was followed by SIGTERM at once, nginx's fast shutdown, which cut them.)
        self.track_workers();
        self.child.stop_with(Signal::SIGQUIT, grace);
        // A master SIGKILLed after the grace leaves its workers: their grace is over too.
        self.end_orphaned_workers(Duration::ZERO, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in binary: a script that writes to stderr and exits.
    fn script(dir: &Path, body: &str) -> PathBuf {
        let p = dir.join("fake-haproxy");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn nginx_workers_run_in_the_configs_group_or_nogroup() {
        assert_eq!(nginx_worker_group("pid /x.pid;\nevents {}\n"), "nogroup");
        assert_eq!(
            nginx_worker_group("pid /x.pid;\n  user  www-data adm;\nevents {}\n"),
            "adm"
        );
        assert_eq!(nginx_worker_group("user k8slb;\n"), "k8slb");
    }

    #[test]
    fn a_start_failure_says_why_from_the_daemons_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let bin = script(
            dir.path(),
            "echo '[NOTICE]   (7) : haproxy version is 2.6.12' >&2\n\
             echo '[ALERT]    (7) : Cannot raise FD limit to 20239, limit is 20000.' >&2\n\
             exit 1",
        );
        let mut h = Haproxy::new(bin, Paths::new(dir.path()));
        let e = h.start().unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("exited at start")
                && text.contains("Cannot raise FD limit to 20239, limit is 20000."),
            "{text}"
        );
        assert!(
            !text.contains("NOTICE"),
            "only the lines that say what failed: {text}"
        );
    }

    #[test]
    fn open_files_limit_is_raised_to_the_hard_limit() {
        let (_, hard) = raise_open_files_limit().unwrap();
        let (soft, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(soft, hard);
    }

    #[test]
    fn a_silent_exit_is_still_reported() {
        let dir = tempfile::tempdir().unwrap();
        let bin = script(dir.path(), "exit 3");
        let mut h = Haproxy::new(bin, Paths::new(dir.path()));
        let text = h.start().unwrap_err().to_string();
        assert!(text.contains("exited at start"), "{text}");
    }

    /// The real `haproxy -c` refusing a config (a certificate file that does not exist,
    /// as a TLS listener without its pool's certificate did): the error says why, not only
    /// the exit status.
    #[test]
    #[ignore = "needs haproxy installed, like the root tests; ./scripts/test.sh runs it"]
    fn a_refused_haproxy_config_says_why() {
        let bin = [
            "/usr/sbin/haproxy",
            "/usr/bin/haproxy",
            "/usr/local/sbin/haproxy",
        ]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("haproxy is not installed: apt-get install -y haproxy");
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(
            &cfg,
            "defaults\n  mode http\n  timeout client 1s\n  timeout server 1s\n  timeout connect 1s\n\
             frontend f\n  bind 127.0.0.1:8443 ssl crt /nonexistent/k8slb-pool.pem\n",
        )
        .unwrap();
        let h = Haproxy::new(bin, Paths::new(dir.path()));
        let text = h.check(&cfg).unwrap_err().to_string();
        assert!(
            text.contains("config check failed") && text.contains("/nonexistent/k8slb-pool.pem"),
            "{text}"
        );
    }
}
