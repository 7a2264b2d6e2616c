//! The real `k8slb-actor run --state configmap` binary against the fake API server,
//! without root: proxy `kubeproxy` (no proxy process), a state without VIPs (no address
//! is touched), and a stand-in for keepalived (a shell script that stays up; `-t`
//! succeeds). What is checked is the state path end to end: the actor follows the
//! ConfigMaps, saves what it applied as `last-state.json`, and, restarted while the API
//! server is away, starts from that file and becomes ready; when the API server is back
//! it follows again.
//!
//! Waits are bounded ([`WAIT`]); nothing asserts on durations.

use base64::Engine;
use k8slb_common::publish;
use k8slb_common::state::State;
use k8slb_fakeapi::FakeApi;
use serde_json::json;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod support;

use support::actor_bin::{free_addr, http_get, keepalived_stub, state_without_vips, ActorBin};

const NS: &str = "k8slb-system";
const WAIT: Duration = Duration::from_secs(60);

fn publish(api: &FakeApi, s: &State) {
    let parts = publish::encode(s, publish::MAX_OBJECT_BYTES);
    for p in parts.iter().skip(1).chain(parts.first()) {
        api.put_object(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("k8slb-state{}", p.suffix), "namespace": NS,
                "labels": {"app.kubernetes.io/managed-by": "k8slb", "k8slb.io/part": "state"}},
            "binaryData": {"state.json.gz": base64::engine::general_purpose::STANDARD.encode(&p.gzip)},
        }));
    }
}

/// One `k8slb-actor run --state configmap` on node `lb-1` with the actor's ServiceAccount
/// and RBAC, its admin port on `admin`, its log in `<name>.log`.
fn start_actor(api: &FakeApi, dir: &Path, admin: SocketAddr, name: &str) -> ActorBin {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_k8slb-actor"));
    cmd.args([
        "run",
        "--state",
        "configmap",
        "--node",
        "lb-1",
        "--proxy",
        "kubeproxy",
    ])
    .arg("--work-dir")
    .arg(dir.join("work"))
    .arg("--admin-addr")
    .arg(admin.to_string())
    .arg("--keepalived-bin")
    .arg(keepalived_stub(dir))
    // The actor runs as its ServiceAccount, with the manifests' RBAC.
    .env(
        "KUBECONFIG",
        api.kubeconfig_for_service_account(NS, "actor"),
    )
    .env("K8SLB_NAMESPACE", NS)
    .env("LOG_LEVEL", "info")
    .env_remove("K8SLB_STATE");
    ActorBin::spawn(cmd, dir.join(format!("{name}.log")))
}

fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    http_get(addr, path).map(|(status, _)| status)
}

fn saved(dir: &Path) -> Option<State> {
    let text = std::fs::read_to_string(dir.join("work/last-state.json")).ok()?;
    State::from_json(&text).ok()
}

async fn wait_until(what: &str, actor: &ActorBin, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached; actor log:\n{}",
            actor.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The fake API server with what the shipped manifests create (the actor's
/// ServiceAccount and RBAC among them).
async fn api_with_manifests() -> FakeApi {
    let api = FakeApi::start().await;
    let manifest =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/k8slb-haproxy.yml");
    api.load_manifests(&manifest)
        .unwrap_or_else(|e| panic!("loading the manifests: {e}"));
    api
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actor_follows_configmaps_and_restarts_from_last_state_without_the_api() {
    let api = api_with_manifests().await;
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        state_without_vips("a@example.com"),
        state_without_vips("b@example.com"),
        state_without_vips("c@example.com"),
    );
    assert!(a != b && b != c);
    publish(&api, &a);

    let admin = free_addr();
    let mut actor = start_actor(&api, dir.path(), admin, "first");
    wait_until("state a applied", &actor, || {
        saved(dir.path()) == Some(a.clone())
    })
    .await;
    wait_until("ready", &actor, || {
        http_status(admin, "/readyz") == Some(200)
    })
    .await;

    publish(&api, &b);
    wait_until("state b applied", &actor, || {
        saved(dir.path()) == Some(b.clone())
    })
    .await;

    // The API server goes away; the actor is restarted meanwhile.
    let faults = api.faults();
    faults.go_away().await;
    assert!(actor.stop().success(), "exit status; log:\n{}", actor.log());
    drop(actor);

    let admin = free_addr();
    let actor = start_actor(&api, dir.path(), admin, "second");
    wait_until("ready from last-state.json", &actor, || {
        http_status(admin, "/readyz") == Some(200)
    })
    .await;
    assert!(
        actor.log().contains("starting from the last applied state"),
        "{}",
        actor.log()
    );
    assert_eq!(saved(dir.path()), Some(b.clone()));

    // Back: the actor follows again.
    faults.come_back().await.unwrap();
    publish(&api, &c);
    wait_until("state c applied", &actor, || {
        saved(dir.path()) == Some(c.clone())
    })
    .await;
}

/// Whether `pid` runs (exists and is not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// What becomes of the actor's daemons when the actor itself is SIGKILLed outside a
/// container (no init of the actor's above it): nothing ends them, keepalived keeps
/// running; the next actor of the same work dir stops it before it starts its own
/// (`daemons::stop_leftover`) and says so. In a container the actor's PID 1 init ends
/// them instead (`netns_keepalived_crash`, root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keepalived_left_by_a_killed_actor_is_stopped_by_the_next_actor() {
    let api = api_with_manifests().await;
    let dir = tempfile::tempdir().unwrap();
    publish(&api, &state_without_vips("a@example.com"));
    let pid_file = k8slb_actor::daemons::Paths::new(dir.path().join("work")).keepalived_pid();

    let mut first = start_actor(&api, dir.path(), free_addr(), "first");
    wait_until("the first actor's keepalived runs", &first, || {
        read_pid(&pid_file).is_some_and(running)
    })
    .await;
    let left = read_pid(&pid_file).unwrap();
    // SIGKILL the actor alone (not its process group).
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert!(
        running(left),
        "keepalived {left} ended with its actor; log:\n{}",
        first.log()
    );

    let second = start_actor(&api, dir.path(), free_addr(), "second");
    wait_until("the leftover keepalived is stopped", &second, || {
        !running(left)
    })
    .await;
    wait_until("the second actor's own keepalived runs", &second, || {
        read_pid(&pid_file).is_some_and(|p| p != left && running(p))
    })
    .await;
    assert!(
        second
            .log()
            .contains("stopped a daemon left behind by an earlier actor"),
        "{}",
        second.log()
    );
}
