//! Failing writes are logged usefully: once when they start failing (code and message, not
//! the whole Status dump), then not again within the minute, and once when they work again
//! with the count; every failure is counted in `write_failures_total`.
//!
//! One test in this file: it installs a process-wide subscriber that captures the
//! watcher's log lines as JSON.

mod kube_util;

use k8slb_fakeapi::FakeApi;
use kube_util::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_writes_are_logged_when_they_start_and_recover_and_counted_each_time() {
    let logs = Capture::install();
    let api = FakeApi::start().await;
    seed_cluster(&api);
    api.put_object(svc("default", "s0"));
    api.faults()
        .fail_next_matching(3, "/configmaps/k8slb-state");
    api.faults().fail_next_matching(4, "/services/s0/status");
    api.faults().fail_next_matching(1, "/events");
    let w = start(&api, "w1");

    wait_for("publishing recovered", || {
        logs.has("publishing the state", "works again")
            .then_some(())
    })
    .await;
    wait_for("status recovered", || {
        logs.has("patching status", "works again").then_some(())
    })
    .await;
    assert!(ingress_ip(&api, "default", "s0").is_some());
    // The first Event (s0's IPAllocated) failed; the next one proves recovery.
    wait_for("an Event write failed", || {
        (w.metrics.write_failures("event", "500") == 1).then_some(())
    })
    .await;
    api.put_object(svc("default", "s1"));
    wait_for("Events recovered", || {
        logs.has("writing Events", "works again").then_some(())
    })
    .await;

    for (what, failures, kind) in [
        ("publishing the state", 3, "publish"),
        ("patching status", 4, "status"),
        ("writing Events", 1, "event"),
    ] {
        let lines = logs.about(what);
        let warns: Vec<_> = lines.iter().filter(|l| l.0 == "WARN").collect();
        assert_eq!(
            warns.len(),
            1,
            "{what}: one warning, not one per attempt: {lines:#?}"
        );
        let (_, msg, fields) = warns[0];
        assert!(
            msg.starts_with(&format!("{what} failed; retrying")),
            "{msg}"
        );
        let error = fields["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("500 InternalError: injected fault (fakeapi)"),
            "{what}: {error}"
        );
        assert!(
            !error.contains("Status {") && !error.contains("ErrorResponse"),
            "{what}: a debug dump: {error}"
        );
        let recovered: Vec<_> = lines
            .iter()
            .filter(|l| l.1.contains("works again"))
            .collect();
        assert_eq!(recovered.len(), 1, "{what}: {lines:#?}");
        assert_eq!(recovered[0].0, "INFO");
        assert_eq!(recovered[0].2["failures"], failures, "{what}: {lines:#?}");
        assert_eq!(
            w.metrics.write_failures(kind, "500"),
            failures,
            "{what}: every failure is counted"
        );
    }
    assert!(w
        .metrics
        .encode()
        .contains("k8slb_watcher_write_failures_total{write=\"publish\",code=\"500\"} 3"));
    w.stop().await;
}
