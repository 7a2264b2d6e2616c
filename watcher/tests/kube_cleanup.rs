//! `k8slb-watcher cleanup` against the fake API server, as the watcher's ServiceAccount
//! with the RBAC of the Ingress install variant (`manifests/k8slb-haproxy-ingress.yml`):
//! after a watcher wrote Service, Ingress, Gateway, ListenerSet and HTTPRoute status, the cleanup
//! removes exactly that and the state ConfigMaps; what another controller wrote
//! survives; `--dry-run` changes nothing; a second run has nothing to do; and in the
//! plain install (no Ingress or Gateway API RBAC) it cleans the Services and says what
//! it skipped.

mod kube_util;

use k8slb_watcher::cleanup::{self, CleanupArgs};
use kube_util::*;
use serde_json::{json, Value};

const GW: &str = "gateway.networking.k8s.io";

fn ing(name: &str, class: Option<&str>) -> Value {
    let mut v = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"rules": [{"host": "web.example.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]},
    });
    if let Some(c) = class {
        v["spec"]["ingressClassName"] = json!(c);
    }
    v
}

fn gw_get(api: &k8slb_fakeapi::FakeApi, path: &str) -> Value {
    api.get_object(&format!("/apis/{GW}/v1/{path}"))
        .unwrap_or_else(|| panic!("{path} exists"))
}

fn ing_get(api: &k8slb_fakeapi::FakeApi, name: &str) -> Value {
    api.get_object(&format!(
        "/apis/networking.k8s.io/v1/namespaces/default/ingresses/{name}"
    ))
    .unwrap()
}

fn state_cms(api: &k8slb_fakeapi::FakeApi) -> Vec<String> {
    api.list("configmaps")
        .iter()
        .filter(|c| c["metadata"]["namespace"] == NS)
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
        .filter(|n| n.starts_with("k8slb-state"))
        .collect()
}

async fn watcher_client(api: &k8slb_fakeapi::FakeApi) -> kube::Client {
    let config = kube_config(&watcher_kubeconfig(api)).await;
    kube::Client::try_from(config).unwrap()
}

async fn run_cleanup(api: &k8slb_fakeapi::FakeApi, dry_run: bool) -> (cleanup::Report, String) {
    let mut out = Vec::new();
    let args = CleanupArgs {
        dry_run,
        namespace: NS.into(),
    };
    let r = cleanup::run(watcher_client(api).await, &args, &mut out)
        .await
        .expect("cleanup runs");
    (r, String::from_utf8(out).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_removes_our_status_and_state_and_keeps_other_controllers_entries() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    api.install_gateway_api_crds(true);
    seed_ingress_variant(&api);
    api.put_object(svc("default", "lb"));
    // Another controller's Service, with its own status.
    let other_svc = svc("default", "theirs")
        .class("example.com/other-lb")
        .status_ingress(json!([{"ip": "10.0.0.11"}]));
    api.put_object(other_svc);
    api.put_object(ing("web", Some("k8slb")));
    api.put_object(
        json!({"apiVersion": format!("{GW}/v1"), "kind": "GatewayClass",
        "metadata": {"name": "k8slb"}, "spec": {"controllerName": "k8slb.io/gateway-controller"}}),
    );
    api.put_object(
        json!({"apiVersion": format!("{GW}/v1"), "kind": "GatewayClass",
        "metadata": {"name": "other"}, "spec": {"controllerName": "example.com/other"}}),
    );
    api.put_object(json!({"apiVersion": format!("{GW}/v1"), "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "default"},
        "spec": {"gatewayClassName": "k8slb", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}],
                 "allowedListeners": {"namespaces": {"from": "Same"}}}}));
    api.put_object(json!({"apiVersion": format!("{GW}/v1"), "kind": "ListenerSet",
        "metadata": {"name": "set", "namespace": "default"},
        "spec": {"parentRef": {"name": "gw"},
                 "listeners": [{"name": "extra", "port": 8080, "protocol": "HTTP", "hostname": "set.example.com"}]}}));
    // Another controller's Gateway, with the status it wrote.
    let their_gw_status = json!({"addresses": [{"type": "IPAddress", "value": "203.0.113.9"}],
        "conditions": [{"type": "Programmed", "status": "True", "reason": "Programmed",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    api.put_object(json!({"apiVersion": format!("{GW}/v1"), "kind": "Gateway",
        "metadata": {"name": "their-gw", "namespace": "default"},
        "spec": {"gatewayClassName": "other", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
        "status": their_gw_status.clone()}));
    // As a real server holds it: the CRD defaults parentRef's group and kind.
    let theirs = json!({"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "their-gw"},
        "controllerName": "example.com/other",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    api.put_object(json!({"apiVersion": format!("{GW}/v1"), "kind": "HTTPRoute",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"parentRefs": [{"name": "gw"}, {"name": "their-gw"}], "hostnames": ["gw.example.com"],
                 "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]},
        "status": {"parents": [theirs.clone()]}}));

    let mut a = args("w1");
    a.ingress = true;
    a.gateway_api = true;
    let w = start_with(&api, a);
    wait_for("everything of ours has its status", || {
        let svc_ok = ingress_ip(&api, "default", "lb").is_some();
        let ing_ok = ing_get(&api, "web")
            .pointer("/status/loadBalancer/ingress/0/ip")
            .is_some();
        let gw_ok = gw_get(&api, "namespaces/default/gateways/gw")
            .pointer("/status/addresses/0")
            .is_some();
        let route_ok = gw_get(&api, "namespaces/default/httproutes/web")["status"]["parents"]
            .as_array()
            .is_some_and(|p| p.len() == 2);
        let set_ok = gw_get(&api, "namespaces/default/listenersets/set")
            .pointer("/status/listeners/0")
            .is_some();
        (svc_ok && ing_ok && gw_ok && route_ok && set_ok && !state_cms(&api).is_empty())
            .then_some(())
    })
    .await;
    // The watcher is stopped first (the uninstall scales it to 0), or it writes back.
    w.stop().await;
    let lb_ip = ingress_ip(&api, "default", "lb").unwrap();

    // --dry-run: says what it would do, changes nothing.
    let before = api.resource_version();
    let (dry, text) = run_cleanup(&api, true).await;
    assert_eq!(api.resource_version(), before, "a dry run wrote:\n{text}");
    assert!(
        text.contains(&format!(
            "would clear the status of Service default/lb: {lb_ip}"
        )),
        "{text}"
    );
    assert!(
        text.contains("would clear the status of Ingress default/web"),
        "{text}"
    );
    assert!(
        text.contains(
            "would clear the status of Gateway default/gw: addresses, listeners, conditions, attachedListenerSets"
        ),
        "{text}"
    );
    assert!(
        text.contains("would clear the status of ListenerSet default/set: listeners, conditions"),
        "{text}"
    );
    assert!(
        text.contains("would clear the status of HTTPRoute default/web: parent gw"),
        "{text}"
    );
    assert!(
        text.contains("would delete the state ConfigMap k8slb-system/k8slb-state"),
        "{text}"
    );
    assert_eq!(dry.cleaned.len(), 5, "{text}");

    let (done, text) = run_cleanup(&api, false).await;
    assert_eq!(done.cleaned, dry.cleaned, "{text}");
    assert!(done.failed.is_empty(), "{text}");
    assert_eq!(api.refused_requests(), Vec::<String>::new(), "{text}");

    // Ours: gone.
    assert_eq!(ingress(&api, "default", "lb"), Some(vec![]), "{text}");
    assert!(ing_get(&api, "web")
        .pointer("/status/loadBalancer/ingress/0")
        .is_none());
    let gw = gw_get(&api, "namespaces/default/gateways/gw");
    assert!(gw.pointer("/status/addresses/0").is_none(), "{gw:#}");
    assert!(gw.pointer("/status/listeners/0").is_none(), "{gw:#}");
    assert_eq!(
        gw["status"]["conditions"],
        cleanup::pending_gateway_conditions()
    );
    assert!(gw["status"].get("attachedListenerSets").is_none(), "{gw:#}");
    let set = gw_get(&api, "namespaces/default/listenersets/set");
    assert!(set.pointer("/status/listeners/0").is_none(), "{set:#}");
    assert_eq!(
        set["status"]["conditions"],
        cleanup::pending_gateway_conditions()
    );
    assert_eq!(state_cms(&api), Vec::<String>::new());
    // Theirs: as they were.
    assert_eq!(
        ingress(&api, "default", "theirs"),
        Some(vec![("10.0.0.11".to_string(), String::new())])
    );
    assert_eq!(
        gw_get(&api, "namespaces/default/gateways/their-gw")["status"],
        their_gw_status
    );
    assert_eq!(
        gw_get(&api, "namespaces/default/httproutes/web")["status"]["parents"],
        json!([theirs])
    );
    // Every write the cleanup made passes the v1.6.1 CRDs' schemas.
    let invalid: Vec<String> = api
        .requests()
        .into_iter()
        .filter(|r| r.status == 422)
        .map(|r| format!("{} {}: {}", r.method, r.path, r.message.unwrap_or_default()))
        .collect();
    assert_eq!(invalid, Vec::<String>::new());
    // The global config stays (the uninstall deletes it with the namespace).
    assert!(api
        .get_object(&format!("/api/v1/namespaces/{NS}/configmaps/global"))
        .is_some());

    // Idempotent.
    let before = api.resource_version();
    let (again, text) = run_cleanup(&api, false).await;
    assert_eq!(
        again,
        cleanup::Report {
            skipped: again.skipped.clone(),
            ..Default::default()
        }
    );
    assert!(text.contains("nothing to clean up"), "{text}");
    assert_eq!(api.resource_version(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_in_the_plain_install_clears_services_and_says_what_it_skipped() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api);
    api.put_object(svc("default", "lb"));
    api.put_object(
        svc("default", "theirs")
            .class("example.com/other-lb")
            .status_ingress(json!([{"ip": "10.0.0.12"}])),
    );
    let w = start(&api, "w1");
    wait_for("the Service gets its IP", || {
        ingress_ip(&api, "default", "lb")
    })
    .await;
    w.stop().await;
    let (r, text) = run_cleanup(&api, false).await;
    assert_eq!(ingress(&api, "default", "lb"), Some(vec![]), "{text}");
    assert_eq!(r.cleaned.len(), 1, "{text}");
    assert!(text.contains("skipped"), "{text}");
    assert!(state_cms(&api).is_empty(), "{text}");
    assert_eq!(
        ingress(&api, "default", "theirs"),
        Some(vec![("10.0.0.12".to_string(), String::new())])
    );
}
