//! The real `k8slb-actor run --state file:<path> --proxy kubeproxy` binary, without root
//! (no proxy process, states without VIPs, a stand-in for keepalived), fed states that
//! record the provider they were planned for. One planned for another provider is
//! refused: `/readyz` answers 503 with the reason, `provider_mismatch{planned}` is 1,
//! the log says it once (not for every such state, nor every tick), and what was
//! applied before keeps running. A state for this actor's provider is applied.
//!
//! Waits are bounded ([`WAIT`]); nothing asserts on durations.

mod support;

use k8slb_common::state::{Provider, State};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::actor_bin::{free_addr, http_get, keepalived_stub, state_without_vips, ActorBin};

const WAIT: Duration = Duration::from_secs(60);

/// A state without VIPs, planned for `provider`; `email` makes states differ.
fn state(provider: Provider, email: &str) -> State {
    let mut s = state_without_vips(email);
    s.provider = Some(provider);
    s
}

/// Replaces the state file atomically (as the watcher's file publisher does).
fn publish(path: &Path, s: &State) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, s.to_json()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn wait_until(what: &str, actor: &ActorBin, mut f: impl FnMut() -> bool) {
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
    http_get(admin, "/metrics").is_some_and(|(_, m)| m.lines().any(|l| l == line))
}

const REFUSED: &str = "the state was planned for provider";

#[test]
fn a_state_planned_for_another_provider_is_refused_on_readyz_in_the_log_and_in_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    publish(&path, &state(Provider::Haproxy, "a@example.com"));
    let admin = free_addr();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_k8slb-actor"));
    cmd.args(["run", "--node", "lb-1", "--proxy", "kubeproxy", "--state"])
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
        .env_remove("K8SLB_STATE");
    let actor = ActorBin::spawn(cmd, dir.path().join("actor.log"));
    let keepalived_conf = dir.path().join("work/keepalived.conf");

    // Never applied: 503 with the reason; nothing rendered.
    wait_until("refused on /readyz", &actor, || {
        http_get(admin, "/readyz").is_some_and(|(status, body)| {
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
        http_get(admin, "/readyz").is_some_and(|(status, _)| status == 200)
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
        http_get(admin, "/readyz").is_some_and(|(status, body)| {
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
