//! FRR as children of the actor: zebra, bfdd and bgpd (Debian's `frr`, 8.4), behind the
//! same [`Daemon`] trait as keepalived and the proxy.
//!
//! Everything is under one directory ([`super::runtime_dir`], owned by the `frr` user the
//! daemons drop to):
//! the vty sockets (`--vty_socket`), zebra's API socket (`-z`), the pid files, and
//! `frr.conf`. The daemons start on an empty config, with no TCP vty (`-P 0`), and the
//! config is pushed to them with `vtysh -f`; later changes go through
//! `frr-reload.py --reload`, which applies only the difference (no session is reset).
//! The checker is `vtysh --dryrun -f <file>` (every line parsed by FRR's own CLI).
//!
//! Several actors can run on one machine in different network namespaces: nothing is
//! shared but the binaries.

use crate::daemons::{Daemon, DaemonError, DaemonKind};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where FRR's binaries are (Debian).
#[derive(Debug, Clone)]
pub struct FrrBinaries {
    /// `zebra`, `bgpd`, `bfdd`, `frr-reload.py`.
    pub sbin: PathBuf,
    pub vtysh: PathBuf,
}

impl Default for FrrBinaries {
    fn default() -> Self {
        FrrBinaries {
            sbin: PathBuf::from("/usr/lib/frr"),
            vtysh: PathBuf::from("/usr/bin/vtysh"),
        }
    }
}

/// The order they start in (zebra first: the others connect to it) and stop in (reverse).
const DAEMONS: [&str; 3] = ["zebra", "bfdd", "bgpd"];
/// How long a start may take (each daemon's vty socket, then the config pushed).
const START_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Frr {
    dir: PathBuf,
    config: PathBuf,
    bin: FrrBinaries,
    children: Vec<(&'static str, Child)>,
}

impl Frr {
    /// FRR with its files under `dir` (created at start).
    pub fn new(dir: impl Into<PathBuf>, bin: FrrBinaries) -> Self {
        let dir = dir.into();
        Frr {
            config: dir.join("frr.conf"),
            dir,
            bin,
            children: Vec::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn zserv(&self) -> PathBuf {
        self.dir.join("zserv.api")
    }

    /// `vtysh` talking to our daemons.
    pub fn vtysh(&self) -> Command {
        let mut c = Command::new(&self.bin.vtysh);
        c.arg("--vty_socket").arg(&self.dir);
        c.stdin(Stdio::null());
        vty_group(&mut c);
        c
    }

    /// `vtysh -c <cmd>`'s output, e.g. `show bgp summary json`.
    pub fn show(&self, cmd: &str) -> Result<String, DaemonError> {
        let out = self
            .vtysh()
            .arg("-c")
            .arg(cmd)
            .output()
            .map_err(|source| spawn_error("vtysh", source))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(DaemonError::Reload {
                daemon: DaemonKind::Frr,
                why: format!(
                    "vtysh -c {cmd:?}: {} {}",
                    String::from_utf8_lossy(&out.stderr).trim(),
                    out.status
                ),
            })
        }
    }

    /// The work dir for FRR: created, owned by the `frr` user (the daemons drop to it and
    /// create their sockets there) and the root group (the actor writes the config).
    fn prepare_dir(&self) -> Result<(), DaemonError> {
        let err = |why: String| DaemonError::Start {
            daemon: DaemonKind::Frr,
            why,
        };
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| err(format!("create {}: {e}", self.dir.display())))?;
        // The daemons (user frr) must reach the directory: every parent traversable.
        if let Some(parent) = self.dir.parent() {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755));
        }
        let user = nix::unistd::User::from_name("frr")
            .ok()
            .flatten()
            .ok_or_else(|| err("no user \"frr\" (is the frr package installed?)".into()))?;
        // The directory: the daemons' (their sockets and pid files), and writable by the
        // root group, so that an actor whose root has no CAP_DAC_OVERRIDE (the BGP
        // variant's container) still writes frr.conf there; nobody else.
        // Root's first (CAP_CHOWN), so that the mode can be set without CAP_FOWNER even
        // when an earlier actor left the directory the daemons'; then the daemons'.
        let root = nix::unistd::Uid::from_raw(0);
        let root_group = nix::unistd::Gid::from_raw(0);
        nix::unistd::chown(&self.dir, Some(root), Some(root_group))
            .map_err(|e| err(format!("chown {}: {e}", self.dir.display())))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o770))
                .map_err(|e| err(format!("chmod {}: {e}", self.dir.display())))?;
        }
        nix::unistd::chown(&self.dir, Some(user.uid), Some(root_group))
            .map_err(|e| err(format!("chown {}: {e}", self.dir.display())))?;
        // A new file (an earlier one may be the daemons', which root cannot truncate).
        let empty = self.dir.join("empty.conf");
        let _ = std::fs::remove_file(&empty);
        std::fs::write(&empty, "").map_err(|e| err(format!("{}: {e}", empty.display())))?;
        nix::unistd::chown(&empty, Some(user.uid), Some(user.gid))
            .map_err(|e| err(format!("chown {}: {e}", empty.display())))?;
        // Daemons of an earlier actor of this work dir (killed uncleanly): their
        // command line names our empty.conf.
        for d in DAEMONS.iter().rev() {
            let pid_file = self.dir.join(format!("{d}.pid"));
            if let Some(p) =
                crate::daemons::stop_leftover(&pid_file, &empty, Duration::from_secs(3))
            {
                tracing::warn!(
                    pid = p,
                    daemon = d,
                    "stopped an FRR daemon left behind by an earlier actor"
                );
            }
        }
        // Sockets of a daemon that did not stop cleanly.
        for d in DAEMONS {
            let _ = std::fs::remove_file(self.dir.join(format!("{d}.vty")));
        }
        let _ = std::fs::remove_file(self.zserv());
        let _ = std::fs::remove_file(self.dir.join("bfdd.sock"));
        Ok(())
    }

    fn spawn(&mut self, name: &'static str) -> Result<(), DaemonError> {
        let program = self.bin.sbin.join(name);
        let mut cmd = Command::new(&program);
        cmd.arg("--vty_socket")
            .arg(&self.dir)
            .arg("-z")
            .arg(self.zserv())
            .arg("-i")
            .arg(self.dir.join(format!("{name}.pid")))
            .arg("-f")
            .arg(self.dir.join("empty.conf"))
            .args(["-P", "0", "--log", "stdout", "--log-level", "warnings"])
            .stdin(Stdio::null());
        if name == "bfdd" {
            // Its control socket defaults to /var/run/frr/bfdd.sock: one per machine.
            cmd.arg("--bfdctl").arg(self.dir.join("bfdd.sock"));
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        let child = cmd
            .spawn()
            .map_err(|source| spawn_error(&program.display().to_string(), source))?;
        self.children.push((name, child));
        Ok(())
    }

    fn wait_socket(&mut self, path: &Path, deadline: Instant) -> Result<(), DaemonError> {
        while !path.exists() {
            if let Some(why) = self.poll_exit() {
                return Err(DaemonError::Start {
                    daemon: DaemonKind::Frr,
                    why,
                });
            }
            if Instant::now() >= deadline {
                return Err(DaemonError::Start {
                    daemon: DaemonKind::Frr,
                    why: format!("{} did not appear", path.display()),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn kill_all(&mut self, grace: Duration) {
        for (_, c) in self.children.iter().rev() {
            if let Ok(p) = i32::try_from(c.id()) {
                let _ = kill(Pid::from_raw(p), Signal::SIGTERM);
            }
        }
        let end = Instant::now() + grace;
        for (_, c) in self.children.iter_mut().rev() {
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= end => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        self.children.clear();
    }
}

fn spawn_error(program: &str, source: std::io::Error) -> DaemonError {
    DaemonError::Spawn {
        daemon: DaemonKind::Frr,
        program: program.to_string(),
        source,
    }
}

fn output_text(out: &std::process::Output) -> String {
    let mut s = String::from_utf8_lossy(&out.stderr).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stdout));
    let s: String = s.trim().chars().take(4000).collect();
    format!("{s} ({})", out.status)
}

impl Daemon for Frr {
    fn kind(&self) -> DaemonKind {
        DaemonKind::Frr
    }

    fn config_path(&self) -> &Path {
        &self.config
    }

    /// `vtysh --dryrun -f <file>`: every line through FRR's own parser.
    fn check(&self, candidate: &Path) -> Result<(), DaemonError> {
        let out = Command::new(&self.bin.vtysh)
            .arg("--dryrun")
            .arg("-f")
            .arg(candidate)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| spawn_error("vtysh", source))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(DaemonError::Check {
                daemon: DaemonKind::Frr,
                output: output_text(&out),
            })
        }
    }

    fn start(&mut self) -> Result<(), DaemonError> {
        self.kill_all(Duration::from_secs(1));
        self.prepare_dir()?;
        let deadline = Instant::now() + START_TIMEOUT;
        let r = (|| {
            for name in DAEMONS {
                self.spawn(name)?;
                let sock = if name == "zebra" {
                    self.zserv()
                } else {
                    self.dir.join(format!("{name}.vty"))
                };
                self.wait_socket(&sock, deadline)?;
            }
            for name in DAEMONS {
                self.wait_socket(&self.dir.join(format!("{name}.vty")), deadline)?;
            }
            let out = self
                .vtysh()
                .arg("-f")
                .arg(&self.config)
                .output()
                .map_err(|source| spawn_error("vtysh", source))?;
            if !out.status.success() {
                return Err(DaemonError::Start {
                    daemon: DaemonKind::Frr,
                    why: format!("vtysh -f {}: {}", self.config.display(), output_text(&out)),
                });
            }
            Ok(())
        })();
        if r.is_err() {
            self.kill_all(Duration::from_secs(1));
        }
        r
    }

    /// `frr-reload.py --reload`: the difference between the running config and the file.
    fn reload(&mut self) -> Result<(), DaemonError> {
        if !self.is_running() {
            return Err(DaemonError::NotRunning {
                daemon: DaemonKind::Frr,
            });
        }
        let mut cmd = Command::new(self.bin.sbin.join("frr-reload.py"));
        cmd.arg("--reload")
            .arg("--vty_socket")
            .arg(&self.dir)
            .arg("--bindir")
            .arg(self.bin.vtysh.parent().unwrap_or(Path::new("/usr/bin")))
            .arg("--rundir")
            .arg(&self.dir)
            .arg("--confdir")
            .arg(&self.dir)
            .args(["--log-level", "error", "--stdout"])
            .arg(&self.config)
            .stdin(Stdio::null());
        vty_group(&mut cmd);
        let out = cmd
            .output()
            .map_err(|source| spawn_error("frr-reload.py", source))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(DaemonError::Reload {
                daemon: DaemonKind::Frr,
                why: output_text(&out),
            })
        }
    }

    /// Any of the three gone: all of them are stopped (they run as one; the
    /// supervisor restarts them together) and the first exit is described.
    fn poll_exit(&mut self) -> Option<String> {
        let mut why = None;
        for (name, c) in &mut self.children {
            if let Ok(Some(status)) = c.try_wait() {
                why.get_or_insert_with(|| format!("{name}: {status}"));
            }
        }
        if why.is_some() {
            self.kill_all(Duration::from_secs(1));
        }
        why
    }

    fn is_running(&self) -> bool {
        !self.children.is_empty()
    }

    fn pid(&self) -> Option<u32> {
        self.children
            .iter()
            .find(|(n, _)| *n == "bgpd")
            .map(|(_, c)| c.id())
    }

    fn stop(&mut self, grace: Duration) {
        self.kill_all(grace);
    }
}

/// FRR's daemons make their vty sockets `frr:frrvty`, mode 0770. Where the actor's root
/// has no CAP_DAC_OVERRIDE (the BGP variant's container: its capabilities are listed),
/// `vtysh` reaches them only as a member of `frrvty`: it runs with that group (setgid:
/// CAP_SETGID, which FRR's daemons need anyway). Without the group, as it is.
fn vty_group(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    if let Ok(Some(g)) = nix::unistd::Group::from_name("frrvty") {
        cmd.gid(g.gid.as_raw());
    }
}
