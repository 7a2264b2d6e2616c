//! The watcher against the fake API server: allocation, status, state, Events, release.

mod kube_util;

use kube_util::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_get_ips_status_state_and_events() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api);
    api.put_object(svc("default", "web"));
    api.put_object(slice("default", "web", &["10.244.0.5", "10.244.0.6"]));
    api.create_namespace("shop");
    api.put_object(svc("shop", "api").pool("small"));
    let w = start(&api, "w1");

    let web = wait_for("web gets an IP", || {
        ingress(&api, "default", "web").filter(|i| !i.is_empty())
    })
    .await;
    assert_eq!(web, vec![("10.0.0.10".to_string(), "Proxy".to_string())]);
    let apis = wait_for("api gets an IP", || {
        ingress(&api, "shop", "api").filter(|i| !i.is_empty())
    })
    .await;
    assert_eq!(apis, vec![("10.1.0.10".to_string(), "Proxy".to_string())]);

    // The state ConfigMap: frontends and endpoints.
    let st = wait_for("state published", || {
        state(&api).filter(|s| s.services.len() == 2)
    })
    .await;
    let web_state = &st.services[&"default/web".parse().unwrap()];
    assert_eq!(
        web_state.ips,
        vec!["10.0.0.10".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(web_state.ports.len(), 1);
    assert_eq!(web_state.ports[0].port, 80);
    let eps: Vec<String> = web_state.ports[0]
        .endpoints
        .iter()
        .map(|e| format!("{}:{}", e.ip, e.port))
        .collect();
    assert_eq!(eps, vec!["10.244.0.5:8080", "10.244.0.6:8080"]);
    assert_eq!(st.nodes.len(), 2);
    let cm = api
        .get_object(&format!("/api/v1/namespaces/{NS}/configmaps/k8slb-state"))
        .unwrap();
    assert_eq!(
        cm["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "k8slb"
    );
    assert_eq!(cm["metadata"]["labels"]["k8slb.io/part"], "state");

    // Events.
    wait_for("IPAllocated on web", || {
        has_event(&api, "web", "IPAllocated").then_some(())
    })
    .await;
    let ev = events_for(&api, "web");
    assert!(ev.iter().any(|e| e.1.contains("10.0.0.10")), "{ev:?}");
    let raw = api
        .list("events")
        .into_iter()
        .find(|e| e["involvedObject"]["name"] == "web")
        .unwrap();
    assert_eq!(raw["source"]["component"], "k8slb-watcher");
    assert_eq!(raw["reportingComponent"], "k8slb.io/watcher");
    assert_eq!(raw["involvedObject"]["kind"], "Service");
    assert!(raw["involvedObject"]["uid"]
        .as_str()
        .is_some_and(|u| !u.is_empty()));

    // Endpoint change: republished, no new IP, no status write.
    // Both status writes are counted once their responses arrive, which can be after the
    // fake shows them: wait for the count before taking it as the baseline.
    wait_for("both status patches counted", || {
        (w.metrics.status_patches("ok") == 2).then_some(())
    })
    .await;
    let patches_before = w.metrics.status_patches("ok");
    api.put_object(slice("default", "web", &["10.244.0.7"]));
    wait_for("endpoints updated", || {
        let s = state(&api)?;
        let p = &s.services[&"default/web".parse().unwrap()].ports[0];
        (p.endpoints.len() == 1 && p.endpoints[0].ip.to_string() == "10.244.0.7").then_some(())
    })
    .await;
    assert_eq!(w.metrics.status_patches("ok"), patches_before);
    assert_eq!(
        ingress_ip(&api, "default", "web").as_deref(),
        Some("10.0.0.10")
    );
    assert!(w.metrics.is_ready());
    let text = w.metrics.encode();
    assert!(text.contains("k8slb_watcher_plans_total"), "{text}");
    assert!(text.contains("k8slb_watcher_is_leader 1"), "{text}");
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_type_change_and_class_change_release_exactly_that_ip() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api);
    for n in ["a", "b", "c", "d"] {
        api.put_object(svc("default", n));
    }
    let w = start(&api, "w1");
    let mut ips = std::collections::BTreeMap::new();
    for n in ["a", "b", "c", "d"] {
        let ip = wait_for("IP", || ingress_ip(&api, "default", n)).await;
        ips.insert(n, ip);
    }
    let distinct: std::collections::BTreeSet<_> = ips.values().collect();
    assert_eq!(distinct.len(), 4);

    api.delete_object(&svc_path("default", "a"));
    let mut b = api.get_object(&svc_path("default", "b")).unwrap();
    b["spec"]["type"] = json!("ClusterIP");
    api.put_object(b);
    let mut c = api.get_object(&svc_path("default", "c")).unwrap();
    c["spec"]["loadBalancerClass"] = json!("other.example/lb");
    api.put_object(c);

    wait_for("b and c statuses cleared", || {
        (ingress(&api, "default", "b")?.is_empty() && ingress(&api, "default", "c")?.is_empty())
            .then_some(())
    })
    .await;
    let st = wait_for("released in the state", || {
        state(&api).filter(|s| s.services.len() == 1)
    })
    .await;
    let d = &st.services[&"default/d".parse().unwrap()];
    assert_eq!(d.ips[0].to_string(), ips["d"]);
    assert_eq!(st.vips.len(), 1);
    assert_eq!(
        ingress_ip(&api, "default", "d").as_deref(),
        Some(ips["d"].as_str())
    );
    for n in ["b", "c"] {
        wait_for("IPReleased", || {
            has_event(&api, n, "IPReleased").then_some(())
        })
        .await;
    }
    assert!(!has_event(&api, "d", "IPReleased"));

    // Another controller's status on a Service of another class is never cleared.
    api.put_object(
        svc("default", "e")
            .class("other.example/lb")
            .status_ingress(json!([{"ip": "10.0.0.99"}])),
    );
    // A new Service reuses the lowest free address: a's.
    api.put_object(svc("default", "f"));
    let f = wait_for("f gets an IP", || ingress_ip(&api, "default", "f")).await;
    assert_ne!(f, ips["d"]);
    assert_eq!(
        ingress_ip(&api, "default", "e").as_deref(),
        Some("10.0.0.99")
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_hostname_writes_the_legacy_form_and_reads_it_back() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api);
    // A Service that k8slb already served: its hostname-form status is honoured.
    api.put_object(
        svc("default", "old").status_ingress(json!([{"hostname": "10.0.0.33.sslip.io"}])),
    );
    api.put_object(svc("default", "new"));
    let mut a = args("w1");
    a.status_hostname = true;
    let w = start_with(&api, a);
    let st = wait_for("both in the state", || {
        state(&api).filter(|s| s.services.values().filter(|s| !s.ips.is_empty()).count() == 2)
    })
    .await;
    assert_eq!(
        st.services[&"default/old".parse().unwrap()].ips[0].to_string(),
        "10.0.0.33"
    );
    let new = wait_for("new gets a hostname", || {
        ingress(&api, "default", "new").filter(|i| !i.is_empty())
    })
    .await;
    assert_eq!(new, vec![("10.0.0.10.sslip.io".to_string(), String::new())]);
    assert_eq!(
        ingress(&api, "default", "old").unwrap(),
        vec![("10.0.0.33.sslip.io".to_string(), String::new())]
    );
    w.stop().await;
}

/// creationTimestamp has whole seconds (RFC 3339, no fraction), so Services created in the
/// same second tie; the plan breaks the tie by namespace/name, not by the order the
/// watcher happened to read them in: with room for two, `a` and `b` get the pool's
/// addresses in name order and `c` none, although `c` was stored first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_created_in_the_same_second_are_ordered_by_name() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api);
    for name in ["c", "b", "a"] {
        let stored = api.put_object(
            svc("default", name)
                .pool("small")
                .created("2026-01-01T00:00:00Z"),
        );
        assert_eq!(
            stored["metadata"]["creationTimestamp"],
            "2026-01-01T00:00:00Z"
        );
    }
    let w = start(&api, "w1");
    // c's PoolExhausted Event proves all three were planned.
    wait_for("c is told the pool is full", || {
        has_event(&api, "c", "PoolExhausted").then_some(())
    })
    .await;
    let st = wait_for("the state", || state(&api)).await;
    let ips = |n: &str| -> Vec<String> {
        st.services
            .get(&format!("default/{n}").parse().unwrap())
            .map(|s| s.ips.iter().map(|i| i.to_string()).collect())
            .unwrap_or_default()
    };
    assert_eq!(ips("a"), ["10.1.0.10"]);
    assert_eq!(ips("b"), ["10.1.0.11"]);
    assert_eq!(
        ips("c"),
        Vec::<String>::new(),
        "the pool is full: c comes last"
    );
    w.stop().await;
}
