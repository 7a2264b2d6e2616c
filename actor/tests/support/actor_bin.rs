//! The real `k8slb-actor run` binary without root (`cm_actor_bin`, `provider_refused`):
//! a keepalived stand-in, a free admin address, a plain HTTP GET, states without VIPs, and
//! a guard that leaves no process behind.

use k8slb_common::config::parse_global_config;
use k8slb_common::state::State;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A keepalived stand-in in `dir`: `-t` (the config check) succeeds; otherwise it writes
/// its pid file and stays up until SIGTERM / SIGINT (SIGHUP, a reload, is ignored).
pub fn keepalived_stub(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("keepalived-stub");
    std::fs::write(
        &path,
        r#"#!/bin/sh
for a in "$@"; do [ "$a" = "-t" ] && exit 0; done
while [ $# -gt 0 ]; do
  case "$1" in -p) shift; echo $$ > "$1";; -r) shift; echo $$ > "$1";; esac
  shift
done
trap '' HUP
trap 'exit 0' TERM INT
while :; do sleep 1 & wait $!; done
"#,
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A loopback address with a port that was free a moment ago (for `--admin-addr`).
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `(status, body)` of `GET path` at `addr`; `None` while nothing answers.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// A state without VIPs whose rendered keepalived.conf differs per `email` (the actor
/// saves `last-state.json` when an apply changes a config). No provider recorded.
pub fn state_without_vips(email: &str) -> State {
    let cfg = parse_global_config(&format!(
        r#"{{"pools":{{"default":{{"network":"198.51.100.0/24","range":"198.51.100.240-198.51.100.249","interface":"lo"}}}},
            "keepalived":{{"email":"{email}","emailFrom":"lb@example.com","emailServer":"smtp.example.com"}}}}"#
    ))
    .unwrap();
    State::empty(cfg.actor_config(&Default::default()))
}

/// One `k8slb-actor run`, in a process group of its own (its daemons inherit it). On
/// drop it is stopped as the kubelet stops it (SIGTERM: it stops its daemons itself),
/// then whatever is left of the group is SIGKILLed, so no test (not even one that
/// panics, nor one that SIGKILLs the actor on purpose) leaves a keepalived stand-in
/// behind.
pub struct ActorBin {
    pub child: Child,
    pub log: PathBuf,
}

impl ActorBin {
    /// Spawns `cmd` (the actor with its arguments) with its stderr in `log`.
    pub fn spawn(mut cmd: Command, log: PathBuf) -> ActorBin {
        let child = cmd
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        ActorBin { child, log }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, and its exit status.
    pub fn stop(&mut self) -> ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for ActorBin {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
