//! The watcher under the RBAC it ships with: the fake API server authorizes every call as
//! kube-apiserver does (a server-side apply that creates its object needs `create` as well
//! as `patch`). With the manifests' RBAC it publishes and no call is refused; with the RBAC
//! that shipped before (no `create` on ConfigMaps) it never publishes, and the refusal names
//! the missing verb, as it did on the first real cluster.

mod kube_util;

use kube_util::*;
use serde_json::{json, Value};

const WATCHER: &str = "system:serviceaccount:k8slb-system:watcher";

fn role_path() -> String {
    format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles/watcher")
}

/// The watcher's Role with `verb` removed from its ConfigMap rule.
fn without_verb(role: &Value, verb: &str) -> Value {
    let mut role = role.clone();
    let rules = role["rules"].as_array_mut().expect("rules");
    let rule = rules
        .iter_mut()
        .find(|r| r["resources"] == json!(["configmaps"]))
        .expect("the Role has a ConfigMap rule");
    let verbs = rule["verbs"].as_array_mut().expect("verbs");
    let before = verbs.len();
    verbs.retain(|v| v != verb);
    assert_eq!(verbs.len(), before - 1, "the shipped rule grants {verb}");
    role
}

fn refused(api: &k8slb_fakeapi::FakeApi) -> Vec<k8slb_fakeapi::RequestRecord> {
    api.requests()
        .into_iter()
        .filter(|r| r.user == WATCHER && (r.status == 401 || r.status == 403))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_shipped_rbac_the_watcher_publishes_and_nothing_is_refused() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api);
    api.put_object(svc("default", "web"));
    api.put_object(slice("default", "web", &["10.244.0.5"]));
    let w = start(&api, "w1");
    wait_for("web gets an IP", || {
        ingress_ip(&api, "default", "web").filter(|ip| !ip.is_empty())
    })
    .await;
    wait_for("state published", || state(&api)).await;
    wait_for("an Event is written", || {
        has_event(&api, "web", "IPAllocated").then_some(())
    })
    .await;
    // Everything the watcher did was done as its ServiceAccount and allowed: the
    // lease (created, then renewed), the state (created by apply), status, Events.
    let calls = api.requests();
    let mine: Vec<_> = calls.iter().filter(|r| r.user == WATCHER).collect();
    assert!(
        mine.iter().any(|r| r.method == "PATCH"
            && r.path.ends_with("/configmaps/k8slb-state")
            && r.status == 201),
        "the state was created by a server-side apply: {mine:#?}"
    );
    assert!(
        mine.iter()
            .any(|r| r.method == "POST" && r.path.ends_with("/leases") && r.status == 201),
        "the Lease was created: {mine:#?}"
    );
    assert!(
        mine.iter()
            .any(|r| r.method == "PATCH" && r.path.ends_with("/services/web/status")),
        "status was patched: {mine:#?}"
    );
    assert_eq!(
        calls.iter().filter(|r| r.user != WATCHER).count(),
        0,
        "no other identity called the API: {calls:#?}"
    );
    assert_eq!(refused(&api), vec![], "refused calls");
    w.stop().await;
    assert_eq!(refused(&api), vec![], "refused calls at shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_create_on_configmaps_the_watcher_never_publishes() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api);
    let shipped = api.get_object(&role_path()).expect("the watcher's Role");
    // The RBAC as it shipped before: patch, but no create, on ConfigMaps.
    api.put_object(without_verb(&shipped, "create"));
    api.put_object(svc("default", "web"));
    let w = start(&api, "w1");

    // The watcher tries (twice: the refusal is not a one-off) and is refused with the
    // real message, naming the verb it lacks.
    let denials = wait_for("two refused publishes", || {
        let r: Vec<_> = refused(&api)
            .into_iter()
            .filter(|r| r.path.ends_with("/configmaps/k8slb-state"))
            .collect();
        (r.len() >= 2).then_some(r)
    })
    .await;
    for d in &denials {
        assert_eq!((d.method.as_str(), d.status), ("PATCH", 403), "{d:?}");
        assert_eq!(
            d.message.as_deref(),
            Some(
                "configmaps \"k8slb-state\" is forbidden: User \"system:serviceaccount:k8slb-system:watcher\" \
                 cannot create resource \"configmaps\" in API group \"\" in the namespace \"k8slb-system\""
            ),
            "{d:?}"
        );
    }
    // Nothing was published, so no Service got an IP (status follows the published state).
    assert!(state(&api).is_none(), "a state was published");
    assert!(api
        .get_object(&format!("/api/v1/namespaces/{NS}/configmaps/k8slb-state"))
        .is_none());
    assert_eq!(ingress_ip(&api, "default", "web"), None);
    assert!(w.metrics.publishes("ok") == 0, "{}", w.metrics.encode());

    // Granting create again is enough: the same watcher publishes.
    api.put_object(shipped);
    wait_for("web gets an IP once create is granted", || {
        ingress_ip(&api, "default", "web")
    })
    .await;
    assert!(state(&api).is_some());
    w.stop().await;
}

/// Event aggregation under the shipped RBAC: a second watcher (an empty Event cache) meets
/// the Event the first one wrote, gets 409 AlreadyExists on create, reads it and bumps its
/// count with a merge patch. Every step is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_aggregation_is_allowed() {
    init_logs();
    let api = k8slb_fakeapi::FakeApi::start().await;
    seed_cluster(&api);
    api.put_object(svc("default", "lost").pool("nope"));
    let w1 = start(&api, "w1");
    wait_for("the UnknownPool Event", || {
        has_event(&api, "lost", "UnknownPool").then_some(())
    })
    .await;
    w1.stop().await;
    // w2 does not repeat a problem the published state already has: repair the Service,
    // then break it the same way again, so w2 reports the same problem (same Event name).
    let w2 = start(&api, "w2");
    wait_for("w2 leads", || w2.metrics.leading().then_some(())).await;
    api.put_object(svc("default", "lost").pool("default"));
    wait_for("repaired", || ingress_ip(&api, "default", "lost")).await;
    api.put_object(svc("default", "lost").pool("nope"));
    let counts = wait_for("the Event aggregated", || {
        let e: Vec<_> = events_for(&api, "lost")
            .into_iter()
            .filter(|e| e.0 == "UnknownPool" && e.2 >= 2)
            .collect();
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(counts.len(), 1, "{counts:?}");
    let calls = api.requests();
    let event_calls: Vec<(String, u16, String)> = calls
        .iter()
        .filter(|r| r.user == WATCHER && r.path.contains("/events"))
        .map(|r| (r.verb.clone(), r.status, r.path.clone()))
        .collect();
    for want in [("create", 409), ("get", 200), ("patch", 200)] {
        assert!(
            event_calls.iter().any(|c| (c.0.as_str(), c.1) == want),
            "{want:?} not among {event_calls:#?}"
        );
    }
    assert_eq!(refused(&api), Vec::<k8slb_fakeapi::RequestRecord>::new());
    w2.stop().await;
}
