//! A watch that keeps failing (here: the watcher's token is not accepted, 401) is logged
//! once per resource with the API server's code and message, not once per retry and not as
//! a `Status` debug dump. The watches back off and retry by themselves.
//!
//! One test in this file: it installs a process-wide subscriber that captures the
//! watcher's log lines as JSON.

mod kube_util;

use k8slb_fakeapi::FakeApi;
use kube_util::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_keeps_failing_is_logged_once_per_resource_in_one_line() {
    let logs = Capture::install();
    let api = FakeApi::start().await;
    // The manifests are not installed: the watcher's ServiceAccount does not exist, so its
    // token is refused (401) on every list, as on a cluster where its Secret was rotated.
    let w = start(&api, "w1");
    // Proof that the failure was seen and retried: at least three refused lists of Services.
    wait_for("three refused lists of services", || {
        let lists = api
            .requests()
            .into_iter()
            .filter(|r| r.status == 401 && r.path == "/api/v1/services")
            .count();
        (lists >= 3).then_some(())
    })
    .await;
    let warnings: Vec<serde_json::Value> = logs
        .lines()
        .into_iter()
        .filter(|l| l["level"] == "WARN" && l["fields"]["resource"] == "services")
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one warning for the failing services watch, not one per retry: {warnings:#?}"
    );
    let error = warnings[0]["fields"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("401") && error.contains("Unauthorized"),
        "the code and reason are in the line: {error}"
    );
    assert!(
        !error.contains("Status {"),
        "no Status debug dump in the line: {error}"
    );
    let recovered = logs
        .lines()
        .into_iter()
        .filter(|l| l["fields"]["message"] == "watch recovered")
        .count();
    assert_eq!(recovered, 0, "nothing recovered: every list was refused");
    w.kill().await;
}
