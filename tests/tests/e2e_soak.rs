//! The chaos soak, two minutes of it (the bench's `soak` mode runs ten): random faults
//! (actor, keepalived and proxy SIGKILLed, a link cut, the watcher restarted, the API server
//! gone for 15 s instead of the bench's 60 s, a Node's label removed and put back, an LB
//! node joining) while Services come and go and endpoints churn, under steady traffic to
//! three long-lived Services, on the Kubernetes path. See `k8slb_tests::soak` for the
//! invariants. Fails with every violation listed and the seed that reproduces the plan
//! (`K8SLB_SOAK_SEED`). Needs root; fails (never skips) without it. `./scripts/test.sh` runs it
//! in its lab step (one lab test at a time, `--test-threads=1`).

use k8slb_tests::soak::{self, FaultKind, SoakOptions};
use std::collections::BTreeSet;
use std::time::Duration;

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn chaos_soak_keeps_allocations_one_holder_recovery_and_no_leftovers() {
    let opts = SoakOptions::from_env("soak", Duration::from_secs(120), Duration::from_secs(15));
    let seed = opts.seed;
    let report = soak::run(opts).expect("the soak could not run");
    eprintln!("soak report: {}", report.json());
    let kinds: BTreeSet<FaultKind> = report.faults.iter().map(|f| f.kind).collect();
    let missing: Vec<&str> = FaultKind::ALL
        .iter()
        .filter(|k| !kinds.contains(k))
        .map(|k| k.as_str())
        .collect();
    assert!(
        report.violations.is_empty(),
        "{} violations (K8SLB_SOAK_SEED={seed} replays the fault plan):\n{}",
        report.violations.len(),
        report.violations.join("\n")
    );
    assert!(
        missing.is_empty(),
        "fault kinds never done in the run: {missing:?}"
    );
    assert!(
        report.requests_ok > 1000,
        "too little traffic went through: {} ok",
        report.requests_ok
    );
}
