//! Readiness tells the truth: a synced follower is ready; a leader only once the current
//! state is published since it became the leader, and not while publishing fails.

mod kube_util;

use k8slb_fakeapi::FakeApi;
use k8slb_watcher::admin::{self, Metrics};
use kube_util::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The path every state write (server-side apply of `k8slb-state`) goes to.
const STATE_CM: &str = "/configmaps/k8slb-state";

/// `(status code, body)` of `GET <path>` on the admin server at `addr`.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    let code = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    (code, body)
}

/// The admin server of `metrics` on a free port.
async fn admin_server(metrics: &Metrics, stop: &CancellationToken) -> std::net::SocketAddr {
    admin::serve(
        "127.0.0.1:0".parse().unwrap(),
        metrics.clone(),
        stop.clone(),
    )
    .await
    .expect("admin server")
}

/// Readiness as seen while `n` injected faults are still pending on the state ConfigMap:
/// no state write can have succeeded before this returns (faults are consumed in order,
/// and every state write goes through that path).
fn readiness_while_failing(api: &FakeApi, m: &Metrics) -> (bool, String) {
    let r = m.readiness.get();
    assert!(
        api.faults().pending_failures() > 0,
        "the injected faults ran out before the check; raise their number"
    );
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_state_writes_fail_is_not_ready_until_one_succeeds() {
    init_logs();
    let api = FakeApi::start().await;
    seed_cluster(&api);
    api.put_object(svc("default", "web"));
    api.faults().fail_next_matching(5, STATE_CM);
    let w = start(&api, "w1");
    let stop = CancellationToken::new();
    let addr = admin_server(&w.metrics, &stop).await;

    wait_for("a failed publish", || {
        (w.metrics.write_failures("publish", "500") >= 2).then_some(())
    })
    .await;
    let (ready, why) = readiness_while_failing(&api, &w.metrics);
    assert!(w.metrics.leading());
    assert!(!ready, "ready although nothing was published: {why}");
    assert!(
        why.contains("leader: publishing the state failed")
            && why.contains("500 InternalError: injected fault (fakeapi)"),
        "{why}"
    );
    let (code, body) = get(addr, "/readyz").await;
    assert!(api.faults().pending_failures() > 0, "faults ran out");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.starts_with("not ready: leader: publishing the state failed: cannot apply ConfigMap k8slb-state: 500 InternalError"),
        "{body}"
    );
    assert!(!body.contains("Status {"), "a debug dump: {body}");
    assert!(state(&api).is_none());
    assert!(w.metrics.encode().contains("k8slb_watcher_ready 0"));

    // The faults run out: the next publish succeeds, and only then is it ready.
    wait_for("ready", || w.metrics.is_ready().then_some(())).await;
    let published = state(&api).expect("the state is published when ready");
    assert!(published
        .services
        .keys()
        .any(|k| k.to_string() == "default/web"));
    assert_eq!(w.metrics.write_failures("publish", "500"), 5);
    let (code, body) = get(addr, "/readyz").await;
    assert_eq!(
        (code, body.as_str()),
        (200, "ready: leader: the current state is published\n")
    );
    assert!(w.metrics.encode().contains("k8slb_watcher_ready 1"));
    stop.cancel();
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_follower_is_ready_and_on_taking_over_waits_for_its_first_publish() {
    init_logs();
    let api = FakeApi::start().await;
    seed_cluster(&api);
    api.put_object(svc("default", "a"));
    let w1 = start(&api, "w1");
    wait_for("w1 leads and is ready", || {
        (w1.metrics.leading() && w1.metrics.is_ready()).then_some(())
    })
    .await;
    let w2 = start(&api, "w2");
    wait_for("w2 is a ready follower", || {
        w2.metrics.is_ready().then_some(())
    })
    .await;
    let (_, why) = w2.metrics.readiness.get();
    assert!(!w2.metrics.leading());
    assert!(why.starts_with("follower: caches synced"), "{why}");

    // The leader dies; a new Service arrives, so w2's first plan as leader must be
    // written, and every write fails for a while.
    api.faults().fail_next_matching(5, STATE_CM);
    w1.kill().await;
    api.put_object(svc("default", "b"));
    wait_for("w2 leads and its publish failed", || {
        (w2.metrics.leading() && w2.metrics.write_failures("publish", "500") >= 1).then_some(())
    })
    .await;
    let (ready, why) = readiness_while_failing(&api, &w2.metrics);
    assert!(
        !ready,
        "the new leader is ready before publishing anything: {why}"
    );
    assert!(
        why.starts_with("leader: publishing the state failed"),
        "{why}"
    );

    wait_for("w2 ready as the leader", || {
        w2.metrics.is_ready().then_some(())
    })
    .await;
    let s = state(&api).expect("state");
    assert!(
        s.services.keys().any(|k| k.to_string() == "default/b"),
        "b is published"
    );
    assert_eq!(
        w2.metrics.readiness.get().1,
        "leader: the current state is published"
    );
    w2.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_a_valid_global_config_is_not_ready_and_says_why() {
    init_logs();
    let api = FakeApi::start().await;
    // Installed from the manifests (the watcher's ServiceAccount and RBAC), then the
    // global ConfigMap they ship is removed: no valid config.
    load_manifests(&api);
    api.delete_object(&format!("/api/v1/namespaces/{NS}/configmaps/global"))
        .expect("the manifests ship the global ConfigMap");
    api.put_object(node("lb1", "192.168.0.1"));
    let w = start(&api, "w1");
    let why = wait_for("the leader's reason", || {
        let (ready, why) = w.metrics.readiness.get();
        (w.metrics.leading() && why.contains("no valid global config")).then_some((ready, why))
    })
    .await;
    assert!(!why.0, "{}", why.1);
    assert_eq!(
        why.1,
        format!("leader: no valid global config (ConfigMap {NS}/global) yet; nothing is published")
    );
    api.put_object(global(pools_default()));
    wait_for("ready once the config exists", || {
        w.metrics.is_ready().then_some(())
    })
    .await;
    assert!(state(&api).is_some());
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_finds_its_state_already_published_is_ready_without_writing() {
    init_logs();
    let api = FakeApi::start().await;
    seed_cluster(&api);
    api.put_object(svc("default", "a"));
    let w1 = start(&api, "w1");
    wait_for("w1 ready", || {
        (w1.metrics.leading() && w1.metrics.is_ready()).then_some(())
    })
    .await;
    wait_for("a's status", || ingress_ip(&api, "default", "a")).await;
    w1.stop().await;
    // Every state write would fail: the new leader must not need one.
    api.faults().fail_next_matching(1000, STATE_CM);
    let w2 = start(&api, "w2");
    wait_for("w2 leads and is ready", || {
        (w2.metrics.leading() && w2.metrics.is_ready()).then_some(())
    })
    .await;
    assert_eq!(w2.metrics.write_failures("publish", "500"), 0);
    assert_eq!(
        w2.metrics.readiness.get().1,
        "leader: the current state is published"
    );
    w2.stop().await;
}
