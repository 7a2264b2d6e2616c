//! The real `k8slb-actor run --state file:<path> --proxy kubeproxy` binary, without root
//! (no proxy process, states without VIPs, a stand-in for keepalived), fed states that
//! record the provider they were planned for. One planned for another provider is
//! refused: `/readyz` answers 503 with the reason, `provider_mismatch{planned}` is 1,
//! the log says it once (not for every such state, nor every tick), and what was
//! applied before keeps running. A state for this actor's provider is applied.
//!
//! Waits are bounded ([`WAIT`]); nothing asserts on durations.

use k8slb_common::config::parse_global_config;
use k8slb_common::state::{Provider, State};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// A state without VIPs, planned for `provider`; `email` makes states differ.
fn state(provider: Provider, email: &str) -> State {
    let cfg = parse_global_config(&format!(
        r#"{{"pools":{{"default":{{"network":"198.51.100.0/24","range":"198.51.100.240-198.51.100.249","interface":"lo"}}}},
            "keepalived":{{"email":"{email}","emailFrom":"lb@example.com","emailServer":"smtp.example.com"}}}}"#
    ))
    .unwrap();
    let mut s = State::empty(cfg.actor_config(&Default::default()));
    s.provider = Some(provider);
    s
}

/// Replaces the state file atomically (as the watcher's file publisher does).
fn publish(path: &Path, s: &State) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, s.to_json()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// keepalived stand-in: `-t` succeeds; otherwise writes its pid file and stays up.
fn keepalived_stub(dir: &Path) -> PathBuf {
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
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

struct Actor {
    child: Child,
    log: PathBuf,
}

impl Actor {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        // SIGTERM first: the actor stops its keepalived stand-in on the way out.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `(status, body)` of `GET path`.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
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

fn wait_until(what: &str, actor: &Actor, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached; actor log:\n{}",
            actor.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn metric(admin: SocketAddr, line: &str) -> bool {
    get(admin, "/metrics").is_some_and(|(_, m)| m.lines().any(|l| l == line))
}

const REFUSED: &str = "the state was planned for provider";

#[test]
fn a_state_planned_for_another_provider_is_refused_on_readyz_in_the_log_and_in_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    publish(&path, &state(Provider::Haproxy, "a@example.com"));
    let admin = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let log = dir.path().join("actor.log");
    let child = Command::new(env!("CARGO_BIN_EXE_k8slb-actor"))
        .args(["run", "--node", "lb-1", "--proxy", "kubeproxy", "--state"])
        .arg(format!("file:{}", path.display()))
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .arg("--admin-addr")
        .arg(admin.to_string())
        .arg("--keepalived-bin")
        .arg(keepalived_stub(dir.path()))
        .env("LOG_LEVEL", "info")
        .env_remove("PROXY")
        .env_remove("LOG_FORMAT")
        .env_remove("K8SLB_STATE")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let actor = Actor { child, log };
    let keepalived_conf = dir.path().join("work/keepalived.conf");

    // Never applied: 503 with the reason; nothing rendered.
    wait_until("refused on /readyz", &actor, || {
        get(admin, "/readyz").is_some_and(|(status, body)| {
            status == 503
                && body.contains(
                    "the state was planned for provider haproxy, but this actor runs kubeproxy",
                )
                && body.contains("nothing was applied yet")
        })
    });
    assert!(metric(
        admin,
        r#"k8slb_actor_provider_mismatch{planned="haproxy"} 1"#
    ));
    // A second one: counted, not logged again.
    publish(&path, &state(Provider::Haproxy, "b@example.com"));
    wait_until("the second refused state counted", &actor, || {
        metric(admin, "k8slb_actor_state_refused_total 2")
    });
    assert_eq!(actor.log().matches(REFUSED).count(), 1, "{}", actor.log());
    assert!(!keepalived_conf.exists(), "nothing is rendered");

    // One for kubeproxy: applied, ready, the refusal over.
    let good = state(Provider::Kubeproxy, "c@example.com");
    publish(&path, &good);
    wait_until("ready", &actor, || {
        get(admin, "/readyz").is_some_and(|(status, _)| status == 200)
    });
    assert!(!metric(
        admin,
        r#"k8slb_actor_provider_mismatch{planned="haproxy"} 1"#
    ));
    let applied = std::fs::read_to_string(&keepalived_conf).unwrap();
    assert!(applied.contains("c@example.com"), "{applied}");

    // Applied, then one planned for nginx: refused, and what runs stays.
    publish(&path, &state(Provider::Nginx, "d@example.com"));
    wait_until("refused again on /readyz", &actor, || {
        get(admin, "/readyz").is_some_and(|(status, body)| {
            status == 503
                && body.contains(
                    "the state was planned for provider nginx, but this actor runs kubeproxy",
                )
                && body.contains("the last applied state keeps running")
        })
    });
    assert!(metric(
        admin,
        r#"k8slb_actor_provider_mismatch{planned="nginx"} 1"#
    ));
    assert_eq!(std::fs::read_to_string(&keepalived_conf).unwrap(), applied);
    let saved = std::fs::read_to_string(dir.path().join("work/last-state.json")).unwrap();
    assert_eq!(State::from_json(&saved).unwrap(), good);
    let log = actor.log();
    assert_eq!(
        log.matches(REFUSED).count(),
        2,
        "one line per refusal:\n{log}"
    );
    assert!(
        log.contains("the state is planned for this actor's provider again"),
        "{log}"
    );
}
