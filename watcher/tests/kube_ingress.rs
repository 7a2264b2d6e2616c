//! The watcher serving Ingresses (`--ingress`) against the fake API server, as its
//! ServiceAccount with the RBAC of the Ingress install variant
//! (`manifests/k8slb-haproxy-ingress.yml`): Ingress status and Events, Ingresses of other
//! classes left alone, and the node certificate Secrets.

mod kube_util;

use k8slb_common::certs::{node_secret_name, NODE_CERT_LABEL, NODE_CERT_STEM_ANNOTATION};
use k8slb_common::testing::self_signed;
use kube_util::*;
use serde_json::{json, Value};

fn start_ingress(api: &k8slb_fakeapi::FakeApi) -> Watcher {
    let mut a = args("w1");
    a.ingress = true;
    start_with(api, a)
}

/// An Ingress of `class` (None: no class) routing `host`/ to `default/web:80`.
fn ing(name: &str, class: Option<&str>, host: &str) -> Value {
    let mut v = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"rules": [{"host": host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]},
    });
    if let Some(c) = class {
        v["spec"]["ingressClassName"] = json!(c);
    }
    v
}

fn ing_path(name: &str) -> String {
    format!("/apis/networking.k8s.io/v1/namespaces/default/ingresses/{name}")
}

/// The IPs (or hostnames) of an Ingress's `status.loadBalancer.ingress`.
fn ing_status(api: &k8slb_fakeapi::FakeApi, name: &str) -> Option<Vec<String>> {
    let i = api.get_object(&ing_path(name))?;
    Some(
        i.pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|e| e["ip"].as_str().or(e["hostname"].as_str()))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingresses_of_our_class_get_the_pool_vip_in_status_and_others_are_left_alone() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_ingress_variant(&api);
    api.put_object(ing("site", Some("k8slb"), "site.example.com"));
    // Another controller's Ingress, with the status that controller wrote.
    let mut theirs = ing("theirs", Some("nginx"), "theirs.example.com");
    theirs["status"] = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.5"}]}});
    api.put_object(theirs);
    let w = start_ingress(&api);

    let ips = wait_for("site gets the ingress VIP in its status", || {
        ing_status(&api, "site").filter(|s| !s.is_empty())
    })
    .await;
    assert_eq!(ips, ["10.0.0.10"]);
    let st = state(&api).expect("a published state");
    let key = "default/site".parse().unwrap();
    assert_eq!(
        st.ingresses[&key].ips,
        ["10.0.0.10".parse::<std::net::IpAddr>().unwrap()]
    );
    assert!(st.vips[&"10.0.0.10".parse().unwrap()].ingress);
    assert!(!st.http.listeners.is_empty(), "the routes are in the state");
    wait_for("IPAllocated on the Ingress", || {
        has_event(&api, "site", "IPAllocated").then_some(())
    })
    .await;
    let theirs_status = ing_status(&api, "theirs").unwrap();
    assert_eq!(
        theirs_status,
        ["203.0.113.5"],
        "another class's status is never touched"
    );
    assert!(events_for(&api, "theirs").is_empty());

    // A second Ingress of the pool shares the VIP.
    api.put_object(ing("shop", Some("k8slb"), "shop.example.com"));
    let shop = wait_for("shop gets the same VIP", || {
        ing_status(&api, "shop").filter(|s| !s.is_empty())
    })
    .await;
    assert_eq!(shop, ["10.0.0.10"]);

    // Leaving our class: its status is cleared (it showed our IP), the other keeps it.
    let mut moved = api.get_object(&ing_path("site")).unwrap();
    moved["spec"]["ingressClassName"] = json!("nginx");
    api.put_object(moved);
    wait_for("site's status cleared", || {
        ing_status(&api, "site").filter(|s| s.is_empty())
    })
    .await;
    assert_eq!(ing_status(&api, "shop").unwrap(), ["10.0.0.10"]);
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_problem_of_an_ingress_is_an_event_on_it() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_ingress_variant(&api);
    let mut bad = ing("bad-pool", Some("k8slb"), "bad.example.com");
    bad["metadata"]["annotations"] = json!({"loadbalancer/pool": "nope"});
    api.put_object(bad);
    let w = start_ingress(&api);
    let (reason, message, _) = wait_for("an Event on the Ingress", || {
        events_for(&api, "bad-pool")
            .into_iter()
            .find(|e| e.0 != "IPAllocated")
    })
    .await;
    assert_eq!(reason, "UnknownPool", "{message}");
    assert!(message.contains("nope"), "{message}");
    let ev = api
        .list("events")
        .into_iter()
        .find(|e| e.pointer("/involvedObject/name").and_then(Value::as_str) == Some("bad-pool"))
        .unwrap();
    assert_eq!(ev["involvedObject"]["kind"], "Ingress");
    assert_eq!(ev["involvedObject"]["apiVersion"], "networking.k8s.io/v1");
    assert_eq!(ev["metadata"]["namespace"], "default");
    assert_eq!(ing_status(&api, "bad-pool").unwrap(), Vec::<String>::new());
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_ingresses_claiming_a_host_and_path_the_older_wins_and_the_newer_gets_an_event() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_ingress_variant(&api);
    let mut old = ing("zz-old", Some("k8slb"), "shop.example.com");
    old["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    let mut new = ing("aa-new", Some("k8slb"), "shop.example.com");
    new["metadata"]["creationTimestamp"] = json!("2026-06-01T00:00:00Z");
    api.put_object(old);
    api.put_object(new);
    let w = start_ingress(&api);
    let (_, message, _) = wait_for("PathConflict on the newer Ingress", || {
        events_for(&api, "aa-new")
            .into_iter()
            .find(|e| e.0 == "PathConflict")
    })
    .await;
    assert!(message.contains("zz-old"), "{message}");
    wait_for("the older one is served", || {
        has_event(&api, "zz-old", "IPAllocated").then_some(())
    })
    .await;
    let older: Vec<_> = events_for(&api, "zz-old")
        .into_iter()
        .filter(|e| e.0 == "PathConflict")
        .collect();
    assert!(older.is_empty(), "{older:?}");
    w.stop().await;
}

/// `--ingress` under the RBAC of a variant without it: the Ingress watches are refused,
/// and /readyz says so (not only the log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_ingresses_without_their_rbac_is_not_ready_and_says_why() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api); // manifests/k8slb-haproxy.yml: no Ingress grants
    let w = start_ingress(&api);
    let why = wait_for("readiness names the refused list", || {
        let (ready, why) = w.metrics.readiness.get();
        assert!(!ready, "ready without being able to list Ingresses: {why}");
        why.contains("initial list of").then_some(why)
    })
    .await;
    assert!(why.contains("403") || why.contains("forbidden"), "{why}");
    w.kill().await;
}

fn tls_secret(name: &str, crt: &str, key: &str) -> Value {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": b64(crt), "tls.key": b64(key)},
    })
}

fn node_secret(api: &k8slb_fakeapi::FakeApi, name: &str) -> Option<Value> {
    api.get_object(&format!("/api/v1/namespaces/{NS}/secrets/{name}"))
}

fn decoded(secret: &Value, key: &str) -> String {
    use base64::Engine;
    let b = secret["data"][key].as_str().unwrap();
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_secret_reaches_the_nodes_as_a_node_secret_renewed_and_removed_when_unused() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_ingress_variant(&api);
    let (crt, key) = self_signed("site.example.com");
    api.put_object(tls_secret("site-tls", &crt, &key));
    let mut site = ing("site", Some("k8slb"), "site.example.com");
    site["spec"]["tls"] = json!([{"hosts": ["site.example.com"], "secretName": "site-tls"}]);
    api.put_object(site.clone());
    let w = start_ingress(&api);

    let name = node_secret_name("default_site-tls");
    let s = wait_for("the node certificate Secret", || node_secret(&api, &name)).await;
    assert_eq!(s["type"], "kubernetes.io/tls");
    assert_eq!(s["metadata"]["labels"][NODE_CERT_LABEL], "true");
    assert_eq!(
        s["metadata"]["annotations"][NODE_CERT_STEM_ANNOTATION],
        "default_site-tls"
    );
    assert_eq!(decoded(&s, "tls.crt"), crt);
    assert_eq!(decoded(&s, "tls.key"), key);
    // The state names it (by version), and never holds the key.
    let st = wait_for("the state names the certificate", || {
        state(&api).filter(|s| !k8slb_common::certs::used_by(s).is_empty())
    })
    .await;
    let json = st.to_json();
    assert!(!json.contains("PRIVATE KEY") && !json.contains(key.lines().nth(1).unwrap()));

    // Renewed (cert-manager replaces the Secret's data): the node Secret follows.
    let (crt2, key2) = self_signed("site.example.com");
    api.put_object(tls_secret("site-tls", &crt2, &key2));
    wait_for("the node Secret renewed", || {
        node_secret(&api, &name).filter(|s| decoded(s, "tls.crt") == crt2)
    })
    .await;

    // No Ingress uses it any more: deleted (after a state without it is published).
    site["spec"]["tls"] = json!(null);
    let mut current = api.get_object(&ing_path("site")).unwrap();
    current["spec"] = site["spec"].clone();
    api.put_object(current);
    wait_for("the node Secret deleted", || {
        node_secret(&api, &name).is_none().then_some(())
    })
    .await;
    let st = state(&api).unwrap();
    assert!(k8slb_common::certs::used_by(&st).is_empty());
    // The user's Secret is never written.
    let users = api
        .get_object("/api/v1/namespaces/default/secrets/site-tls")
        .unwrap();
    assert_eq!(decoded(&users, "tls.crt"), crt2);
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_that_is_not_a_certificate_is_an_event_and_nothing_reaches_the_nodes() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_ingress_variant(&api);
    let mut bad = tls_secret("site-tls", "not a certificate\n", "not a key\n");
    bad["metadata"]["name"] = json!("site-tls");
    api.put_object(bad);
    let mut site = ing("site", Some("k8slb"), "site.example.com");
    site["spec"]["tls"] = json!([{"hosts": ["site.example.com"], "secretName": "site-tls"}]);
    api.put_object(site);
    let w = start_ingress(&api);
    let (reason, message, _) = wait_for("an Event about the Secret on the Ingress", || {
        events_for(&api, "site")
            .into_iter()
            .find(|e| e.0 != "IPAllocated")
    })
    .await;
    assert_eq!(reason, "SecretInvalid", "{message}");
    assert!(message.contains("site-tls"), "{message}");
    assert!(!message.contains("not a key"), "{message}");
    // The Ingress is still served (plain HTTP), and no node Secret exists.
    wait_for("site still gets its VIP", || {
        ing_status(&api, "site").filter(|s| !s.is_empty())
    })
    .await;
    let ours: Vec<Value> = api
        .list("secrets")
        .into_iter()
        .filter(|s| s["metadata"]["namespace"] == NS)
        .collect();
    assert!(ours.is_empty(), "{ours:?}");
    w.stop().await;
}
