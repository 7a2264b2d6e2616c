//! Bad input: each problem gives its Event and leaves every other Service untouched.

mod kube_util;

use kube_util::*;
use serde_json::json;
use std::collections::BTreeMap;

fn all_ips(api: &k8slb_fakeapi::FakeApi, names: &[&str]) -> BTreeMap<String, Option<String>> {
    names
        .iter()
        .map(|n| (n.to_string(), ingress_ip(api, "default", n)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_problem_gives_its_event_and_leaves_the_others_alone() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api);
    api.put_object(svc("default", "good"));
    let w = start(&api, "w1");
    let good = wait_for("good gets an IP", || ingress_ip(&api, "default", "good")).await;

    // Unknown pool.
    api.put_object(svc("default", "unknown").pool("nope"));
    // Pool exhausted: `small` has two addresses.
    for n in ["ex1", "ex2", "ex3"] {
        api.put_object(svc("default", n).pool("small"));
        tokio::time::sleep(std::time::Duration::from_millis(300)).await; // creation order
    }
    // Conflicting static IPs (same port on the same address).
    // Both carry one sharing key (loadbalancer/allow-shared-ip): they may share the
    // address, and the clash is their port.
    api.put_object(
        svc("default", "static1")
            .lb_ip("10.0.0.40")
            .ann("loadbalancer/allow-shared-ip", "k"),
    );
    wait_for("static1 gets its IP", || {
        (ingress_ip(&api, "default", "static1").as_deref() == Some("10.0.0.40")).then_some(())
    })
    .await;
    api.put_object(
        svc("default", "static2")
            .lb_ip("10.0.0.40")
            .ann("loadbalancer/allow-shared-ip", "k"),
    );
    // Outside the pool.
    api.put_object(svc("default", "outside").lb_ip("172.16.0.1"));
    // Invalid annotation value.
    api.put_object(svc("default", "badann").ann("loadbalancer/ssl", "perhaps"));
    // A Service that does not decode (the fake stores what it is given).
    let mut bad = svc("default", "malformed");
    bad["spec"]["ports"] = json!(7);
    api.put_object(bad);

    for (name, reason) in [
        ("unknown", "UnknownPool"),
        ("ex3", "PoolExhausted"),
        ("static2", "PortConflict"),
        ("outside", "IpOutsidePool"),
        ("badann", "InvalidAnnotation"),
        ("malformed", "Undecodable"),
    ] {
        wait_for(&format!("{reason} event on {name}"), || {
            has_event(&api, name, reason).then_some(())
        })
        .await;
    }
    let conflict = events_for(&api, "static2");
    assert!(
        conflict.iter().any(|e| e.1.contains("default/static1")),
        "the conflict names the other Service: {conflict:?}"
    );
    let names = [
        "good", "unknown", "ex1", "ex2", "ex3", "static1", "static2", "outside", "badann",
    ];
    let before = all_ips(&api, &names);
    assert_eq!(before["good"].as_deref(), Some(good.as_str()));
    assert!(before["ex1"].is_some() && before["ex2"].is_some());
    assert_eq!(before["ex3"], None);
    assert_eq!(before["unknown"], None);
    assert_eq!(before["static2"], None);
    assert_eq!(before["outside"], None);
    assert_eq!(before["static1"].as_deref(), Some("10.0.0.40"));
    let st = state(&api).unwrap();
    assert!(
        st.problems.iter().any(|p| p.reason == "Undecodable"),
        "{:?}",
        st.problems
    );

    // Invalid global config: the last good one stays in force, and it says why.
    api.put_object(global_raw(
        "{\"pools\": {\"default\": {\"network\": \"not a network\"}}}",
    ));
    wait_for("InvalidConfig event on global", || {
        has_event(&api, "global", "InvalidConfig").then_some(())
    })
    .await;
    wait_for("InvalidConfig in the state", || {
        state(&api)?
            .problems
            .iter()
            .any(|p| p.reason == "InvalidConfig")
            .then_some(())
    })
    .await;
    assert_eq!(w.metrics.config_valid.get(), 0);
    assert!(w.metrics.config_errors_total.get() >= 1);
    // A new Service is still served, from the last good config.
    api.put_object(svc("default", "later"));
    let later = wait_for("later gets an IP", || ingress_ip(&api, "default", "later")).await;
    assert!(later.starts_with("10.0.0."), "{later}");
    assert_eq!(all_ips(&api, &names), before, "nothing else moved");

    // Events are not repeated on every tick: two more plans (a resync at least: `args`
    // resyncs every 5 s), then a probe Service whose UnknownPool Event is written after
    // any Event those plans queued (one queue, in order); the counts stay at 1.
    let plans = w.metrics.plans_total.get();
    wait_for("two more plans", || {
        (w.metrics.plans_total.get() >= plans + 2).then_some(())
    })
    .await;
    api.put_object(svc("default", "probe").pool("nope"));
    wait_for("UnknownPool event on probe", || {
        has_event(&api, "probe", "UnknownPool").then_some(())
    })
    .await;
    for n in ["unknown", "ex3", "static2", "global"] {
        for e in events_for(&api, n) {
            assert_eq!(e.2, 1, "{n}: {e:?}");
        }
    }
    // The config is fixed: the problem goes away.
    api.put_object(global(pools_default()));
    wait_for("InvalidConfig gone", || {
        (!state(&api)?
            .problems
            .iter()
            .any(|p| p.reason == "InvalidConfig"))
        .then_some(())
    })
    .await;
    assert_eq!(all_ips(&api, &names), before);
    w.stop().await;
    assert_eq!(api.refused_requests(), Vec::<String>::new());
}
