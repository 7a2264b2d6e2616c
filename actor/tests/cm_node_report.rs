//! The node report writer against the fake API server (real HTTP, the real kube client,
//! the actor's ServiceAccount under the shipped RBAC): the report is written at start
//! with nothing quarantined, listing the optional features of this build (without them
//! the watcher plans none: version skew), and written again when deleted. No root
//! needed. Waits are bounded.

mod support;

use k8slb_fakeapi::FakeApi;
use std::path::Path;
use std::time::{Duration, Instant};

const NS: &str = "k8slb-system";
const WAIT: Duration = Duration::from_secs(60);
const PATH: &str = "/api/v1/namespaces/k8slb-system/configmaps/k8slb-node-lb1";

async fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < WAIT, "{what}: not after {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_report_is_written_at_start_with_this_builds_features_and_again_once_deleted() {
    let api = FakeApi::start().await;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/k8slb-haproxy.yml");
    api.load_manifests(&manifest)
        .unwrap_or_else(|e| panic!("loading the manifests: {e}"));
    let client = support::actor_client(&api, NS).await;
    let node: k8slb_common::names::NodeName = "lb1".parse().unwrap();
    let (_reporter, rx) = k8slb_actor::report::Reporter::new(&node, "haproxy");
    tokio::spawn(k8slb_actor::report::write_reports(
        client,
        NS.to_string(),
        node,
        rx,
        Duration::from_millis(300),
    ));
    let report = || {
        let cm = api.get_object(PATH)?;
        let json = cm["data"]["report.json"].as_str()?.to_string();
        k8slb_common::report::decode("k8slb-node-lb1", Some(&json)).ok()
    };
    let (_, r) = wait_for("the report written at start", report).await;
    assert!(r.quarantined.is_empty(), "{r:?}");
    assert_eq!(
        r.features(),
        k8slb_common::features::Features::this_build(),
        "{r:?}"
    );
    api.delete_object(PATH);
    assert!(api.get_object(PATH).is_none());
    wait_for("the report written again", report).await;
    assert_eq!(api.refused_requests(), Vec::<String>::new());
}
