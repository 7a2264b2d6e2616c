//! Restarts, two replicas, and the API server going away.

mod kube_util;

use kube_util::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every (uid -> IPs ever shown in its status) and every IP -> uids, recorded by polling.
#[derive(Default)]
struct Seen {
    by_uid: BTreeMap<String, BTreeSet<String>>,
    names: BTreeMap<String, String>,
}

fn record(api: &k8slb_fakeapi::FakeApi, seen: &Mutex<Seen>) {
    let mut s = seen.lock().unwrap();
    for svc in api.list("services") {
        let uid = svc["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = format!(
            "{}/{}",
            svc["metadata"]["namespace"].as_str().unwrap_or_default(),
            svc["metadata"]["name"].as_str().unwrap_or_default()
        );
        if let Some(ing) = svc
            .pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
        {
            for i in ing {
                if let Some(ip) = i["ip"].as_str() {
                    s.by_uid
                        .entry(uid.clone())
                        .or_default()
                        .insert(ip.to_string());
                }
            }
        }
        s.names.insert(uid, name);
    }
}

/// No two live Services show the same IP.
fn assert_no_double_allocation(api: &k8slb_fakeapi::FakeApi) {
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for svc in api.list("services") {
        let name = svc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Some(ing) = svc
            .pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
        {
            for i in ing {
                if let Some(ip) = i["ip"].as_str() {
                    if let Some(other) = owner.insert(ip.to_string(), name.clone()) {
                        panic!("{ip} shown by both {other} and {name}");
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_20_times_during_churn_no_claimed_service_changes_ip() {
    init_logs();
    let api = Arc::new(k8slb_fakeapi::FakeApi::start().await);
    seed_cluster(&api);
    for i in 0..10 {
        api.put_object(svc("default", &format!("base{i}")));
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = tokio_util::sync::CancellationToken::new();
    // Recorder: every status ever observed.
    let rec = {
        let (api, seen, stop) = (api.clone(), seen.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                record(&api, &seen);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // Churn: creates, deletes, pool range edits.
    let churn = {
        let (api, stop) = (api.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 0u32;
            while !stop.is_cancelled() {
                let name = format!("churn{}", i % 12);
                if api.get_object(&svc_path("default", &name)).is_some() {
                    api.delete_object(&svc_path("default", &name));
                } else {
                    api.put_object(svc("default", &name));
                }
                if i.is_multiple_of(7) {
                    let range = if (i / 7).is_multiple_of(2) {
                        "10.0.0.10-10.0.0.50"
                    } else {
                        "10.0.0.20-10.0.0.60"
                    };
                    api.put_object(global(json!({
                        "default": {"network": "10.0.0.0/24", "range": range},
                        "small": {"network": "10.1.0.0/24", "range": "10.1.0.10-10.1.0.11"},
                    })));
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
        })
    };
    for round in 0..20 {
        let w = start(&api, &format!("w{round}"));
        wait_for("the watcher leads and publishes", || {
            (w.metrics.leading() && w.metrics.is_ready()).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        if round % 5 == 4 {
            w.kill().await; // no Lease release: the next one waits for expiry
        } else {
            w.stop().await;
        }
    }
    stop.cancel();
    let _ = churn.await;
    // A last watcher settles everything.
    let w = start(&api, "final");
    wait_for("every base Service has an IP", || {
        (0..10)
            .all(|i| ingress_ip(&api, "default", &format!("base{i}")).is_some())
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    record(&api, &seen);
    rec.abort();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let mut moved = Vec::new();
    for (uid, ips) in &seen.by_uid {
        if ips.len() > 1 {
            moved.push(format!("{} ({uid}): {ips:?}", seen.names[uid]));
        }
    }
    assert!(moved.is_empty(), "Services whose IP changed: {moved:?}");
    assert!(
        seen.by_uid.len() > 10,
        "the churn created Services: {}",
        seen.by_uid.len()
    );
    assert_no_double_allocation(&api);
    w.stop().await;
    // Twenty watchers took over under the shipped RBAC: every Lease take-over and
    // release was allowed (the Event aggregation path is kube_rbac's).
    assert_eq!(api.refused_requests(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_watchers_only_the_leader_writes_and_a_kill_hands_over() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api);
    let w1 = start(&api, "w1");
    wait_for("w1 leads", || w1.metrics.leading().then_some(())).await;
    let w2 = start(&api, "w2");
    wait_for("w2 synced", || w2.metrics.is_ready().then_some(())).await;
    for i in 0..5 {
        api.put_object(svc("default", &format!("s{i}")));
    }
    let mut ips = BTreeMap::new();
    for i in 0..5 {
        let n = format!("s{i}");
        ips.insert(
            n.clone(),
            wait_for("IP", || ingress_ip(&api, "default", &n)).await,
        );
    }
    wait_for("events written", || {
        has_event(&api, "s4", "IPAllocated").then_some(())
    })
    .await;
    // Only the leader wrote.
    assert!(!w2.metrics.leading());
    assert_eq!(w2.metrics.publishes("ok"), 0);
    assert_eq!(w2.metrics.status_patches("ok"), 0);
    assert_eq!(w2.metrics.events_written(), 0);
    assert!(w1.metrics.publishes("ok") > 0);
    let lease = api
        .get_object(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/k8slb-watcher"
        ))
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "w1");
    // Every Event was reported by the leader.
    for e in api.list("events") {
        assert_eq!(e["reportingInstance"], "w1", "{e}");
    }
    // The state ConfigMaps have one field manager.
    for cm in api.list("configmaps") {
        if cm["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("k8slb-state"))
        {
            let managers: Vec<&str> = cm["metadata"]["managedFields"]
                .as_array()
                .map(|a| a.iter().filter_map(|m| m["manager"].as_str()).collect())
                .unwrap_or_default();
            assert_eq!(managers, vec!["k8slb-watcher"]);
        }
    }
    // Writes to Services and ConfigMaps: only SSA/merge patches, all with our field manager.
    for r in api.requests() {
        if r.method == "PATCH" || r.method == "POST" || r.method == "PUT" {
            assert_eq!(
                r.param("fieldManager").as_deref(),
                Some("k8slb-watcher"),
                "{r:?}"
            );
        }
    }

    // Kill the leader: w2 takes over within the lease time and serves new Services.
    w1.kill().await;
    wait_for("w2 leads", || w2.metrics.leading().then_some(())).await;
    api.put_object(svc("default", "after"));
    let after = wait_for("after gets an IP", || ingress_ip(&api, "default", "after")).await;
    assert!(
        !ips.values().any(|ip| *ip == after),
        "{after} was already taken"
    );
    for (n, ip) in &ips {
        assert_eq!(
            ingress_ip(&api, "default", n).as_ref(),
            Some(ip),
            "{n} kept its IP"
        );
    }
    assert_no_double_allocation(&api);
    assert!(w2.metrics.publishes("ok") > 0);
    let lease = api
        .get_object(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/k8slb-watcher"
        ))
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "w2");

    // A clean stop releases the Lease at once.
    w2.stop().await;
    let lease = api
        .get_object(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/k8slb-watcher"
        ))
        .unwrap();
    assert!(
        lease["spec"]["holderIdentity"]
            .as_str()
            .is_none_or(str::is_empty),
        "{lease}"
    );
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
}

/// The outage lasts `K8SLB_TEST_OUTAGE_S` seconds (default 10 to keep `cargo test` short;
/// set it to 60 for the full check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_gone_and_back_nothing_is_reallocated() {
    init_logs();
    let outage: u64 = std::env::var("K8SLB_TEST_OUTAGE_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api);
    for i in 0..6 {
        api.put_object(svc("default", &format!("s{i}")));
    }
    let w = start(&api, "w1");
    let mut ips = BTreeMap::new();
    for i in 0..6 {
        let n = format!("s{i}");
        ips.insert(
            n.clone(),
            wait_for("IP", || ingress_ip(&api, "default", &n)).await,
        );
    }
    let before = wait_for("state", || state(&api).filter(|s| s.services.len() == 6)).await;
    let events_before = api.list("events").len();

    api.faults().go_away().await;
    tokio::time::sleep(Duration::from_secs(outage)).await;
    api.faults().come_back().await.unwrap();

    api.put_object(svc("default", "after"));
    let after = wait_for("after gets an IP", || ingress_ip(&api, "default", "after")).await;
    assert!(!ips.values().any(|ip| *ip == after));
    for (n, ip) in &ips {
        assert_eq!(
            ingress_ip(&api, "default", n).as_ref(),
            Some(ip),
            "{n} kept its IP"
        );
    }
    // The leader republished after the outage: the state holds the new Service too (its
    // status is written only after the state that allocates it is published).
    let now = state(&api).unwrap();
    let after_ip: std::net::IpAddr = after.parse().unwrap();
    assert_eq!(
        now.services
            .iter()
            .find(|(k, _)| k.to_string() == "default/after")
            .map(|(_, s)| s.ips.clone()),
        Some(vec![after_ip]),
        "the republished state allocates the new Service"
    );
    wait_for("the leader is ready again", || {
        (w.metrics.leading() && w.metrics.is_ready()).then_some(())
    })
    .await;
    for (k, s) in &before.services {
        assert_eq!(now.services[k].ips, s.ips, "{k}");
    }
    assert_eq!(
        before.instances.iter().map(|i| i.vrid).collect::<Vec<_>>(),
        now.instances.iter().map(|i| i.vrid).collect::<Vec<_>>()
    );
    let released: Vec<Value> = api
        .list("events")
        .into_iter()
        .filter(|e| e["reason"] == "IPReleased")
        .collect();
    assert!(released.is_empty(), "{released:?}");
    assert!(api.list("events").len() > events_before);
    w.stop().await;
    assert_eq!(api.refused_requests(), Vec::<String>::new());
}
