//! The real `kube` client against the fake API server.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use k8slb_fakeapi::{FakeApi, Options};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Client, Config, ResourceExt};
use serde_json::{json, Value};

async fn client(api: &FakeApi) -> Client {
    let kubeconfig = Kubeconfig::read_from(api.kubeconfig_path()).expect("kubeconfig parses");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    assert_eq!(config.default_namespace, "default");
    Client::try_from(config).expect("client")
}

fn svc(name: &str, labels: Value) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }))
    .unwrap()
}

fn api_code(err: kube::Error) -> (u16, String) {
    match err {
        kube::Error::Api(status) => (status.code, status.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Waits for the next item of a stream, failing the test after 10 s.
async fn next<S: futures::Stream + Unpin>(stream: &mut S) -> S::Item {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("stream item within 10 s")
        .expect("stream not ended")
}

#[tokio::test]
async fn crud_list_and_errors() {
    let fake = FakeApi::start().await;
    let client = client(&fake).await;
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();

    let created = services
        .create(&pp, &svc("web", json!({"app": "web"})))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let spec = created.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    assert!(spec.cluster_ip.is_some());
    assert!(spec.ports.as_ref().unwrap()[0].node_port.is_some());

    let mut plain = svc("db", json!({"app": "db"}));
    plain.spec.as_mut().unwrap().type_ = None;
    let db = services.create(&pp, &plain).await.unwrap();
    assert_eq!(db.spec.unwrap().type_.as_deref(), Some("ClusterIP"));

    // NamespaceLifecycle: nothing is created in a namespace that does not exist.
    let other_ns: Api<Service> = Api::namespaced(client.clone(), "prod");
    let err = other_ns
        .create(&pp, &svc("web", json!({"app": "web"})))
        .await
        .unwrap_err();
    assert_eq!(api_code(err), (404, "NotFound".to_string()));
    fake.create_namespace("prod");
    other_ns
        .create(&pp, &svc("web", json!({"app": "web"})))
        .await
        .unwrap();

    let (code, reason) = api_code(
        services
            .create(&pp, &svc("web", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    let (code, reason) = api_code(
        services
            .create(&pp, &svc("Bad_Name", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));

    let mut generated = svc("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let generated = services.create(&pp, &generated).await.unwrap();
    assert!(generated.name_any().starts_with("gen-") && generated.name_any().len() == 9);

    let got = services.get("web").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);

    let labelled = services
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(labelled.items.len(), 1);
    let all: Api<Service> = Api::all(client.clone());
    let everywhere = all
        .list(&ListParams::default().labels("app in (web,db)"))
        .await
        .unwrap();
    let names: Vec<_> = everywhere
        .iter()
        .map(|s| (s.namespace().unwrap(), s.name_any()))
        .collect();
    assert_eq!(
        names,
        [
            ("default".into(), "db".into()),
            ("default".into(), "web".into()),
            ("prod".into(), "web".into())
        ]
    );
    let by_field = all
        .list(&ListParams::default().fields("metadata.namespace=prod"))
        .await
        .unwrap();
    assert_eq!(by_field.items.len(), 1);
    let not_web = services
        .list(&ListParams::default().labels("app!=web"))
        .await
        .unwrap();
    assert_eq!(
        not_web.items.len(),
        2,
        "db and the unlabelled generated one"
    );
    assert_eq!(
        everywhere.metadata.resource_version,
        Some(fake.resource_version().to_string())
    );

    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let (code, reason) = api_code(services.get("web").await.unwrap_err());
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    let (code, _) = api_code(
        services
            .delete("web", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 404);
    assert!(fake
        .get_object("/api/v1/namespaces/prod/services/web")
        .is_some());
    assert!(fake
        .get_object("/api/v1/namespaces/default/services/web")
        .is_none());
}

#[tokio::test]
async fn pagination_with_limit_and_continue() {
    let fake = FakeApi::start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client(&fake).await);
    for i in 0..5 {
        fake.put_object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")}}));
    }
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(2);
    let mut pages = 0;
    loop {
        let page = cms.list(&lp).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 2);
        names.extend(page.items.iter().map(|c| c.name_any()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
}

#[tokio::test]
async fn status_subresource_is_separate_from_spec() {
    let fake = FakeApi::start().await;
    let services: Api<Service> = Api::default_namespaced(client(&fake).await);
    let created = services
        .create(&PostParams::default(), &svc("web", json!({})))
        .await
        .unwrap();
    let generation = created.metadata.generation;

    // A status patch that also tries to change the spec: only the status sticks.
    let patch = json!({
        "spec": {"type": "NodePort"},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10", "ipMode": "Proxy"}]}},
    });
    let patched = services
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        patched.spec.as_ref().unwrap().type_.as_deref(),
        Some("LoadBalancer")
    );
    let ingress = patched
        .status
        .as_ref()
        .unwrap()
        .load_balancer
        .as_ref()
        .unwrap()
        .ingress
        .clone()
        .unwrap();
    assert_eq!(ingress[0].ip.as_deref(), Some("192.0.2.10"));
    assert_eq!(ingress[0].ip_mode.as_deref(), Some("Proxy"));
    assert_eq!(patched.metadata.generation, generation);

    // A main-resource patch that tries to change the status: only the spec sticks.
    let patch = json!({"spec": {"externalTrafficPolicy": "Local"}, "status": {"loadBalancer": {}}});
    let patched = services
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        patched
            .spec
            .as_ref()
            .unwrap()
            .external_traffic_policy
            .as_deref(),
        Some("Local")
    );
    assert_eq!(
        patched
            .status
            .unwrap()
            .load_balancer
            .unwrap()
            .ingress
            .unwrap()[0]
            .ip
            .as_deref(),
        Some("192.0.2.10")
    );
    assert_eq!(patched.metadata.generation, generation.map(|g| g + 1));

    // Server-side apply on /status, as the watcher does.
    let status = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.11", "ipMode": "Proxy"}]}},
    });
    let applied = services
        .patch_status(
            "web",
            &PatchParams::apply("k8slb-test"),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    assert_eq!(
        applied
            .status
            .unwrap()
            .load_balancer
            .unwrap()
            .ingress
            .unwrap()[0]
            .ip
            .as_deref(),
        Some("192.0.2.11")
    );
    assert_eq!(
        applied.spec.unwrap().external_traffic_policy.as_deref(),
        Some("Local")
    );
}

#[tokio::test]
async fn put_with_stale_resource_version_conflicts() {
    let fake = FakeApi::start().await;
    let services: Api<Service> = Api::default_namespaced(client(&fake).await);
    let pp = PostParams::default();
    services.create(&pp, &svc("web", json!({}))).await.unwrap();
    let first = services.get("web").await.unwrap();

    let mut update = first.clone();
    update.labels_mut().insert("a".into(), "1".into());
    let updated = services.replace("web", &pp, &update).await.unwrap();
    assert_ne!(updated.resource_version(), first.resource_version());

    let mut stale = first.clone();
    stale.labels_mut().insert("b".into(), "2".into());
    let (code, reason) = api_code(services.replace("web", &pp, &stale).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (409, "Conflict"));

    // Without a resourceVersion the update is unconditional.
    stale.metadata.resource_version = None;
    let forced = services.replace("web", &pp, &stale).await.unwrap();
    assert_eq!(forced.labels().get("b").map(String::as_str), Some("2"));
    assert!(forced.labels().get("a").is_none());
}

#[tokio::test]
async fn server_side_apply_creates_updates_and_conflicts() {
    let fake = FakeApi::start().await;
    fake.create_namespace("k8slb-system");
    let cms: Api<ConfigMap> = Api::namespaced(client(&fake).await, "k8slb-system");
    let ssa = PatchParams::apply("k8slb-test");
    let cm = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "k8slb-state"}, "data": data});

    let created = cms
        .patch(
            "k8slb-state",
            &ssa,
            &Patch::Apply(&cm(json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(created.data.as_ref().unwrap().len(), 2);
    let managers: Vec<_> = created
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["k8slb-test"]);
    let first = fake
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .unwrap();
    assert_eq!(first.status, 201, "an apply that creates answers 201");
    assert_eq!(first.param("fieldManager").as_deref(), Some("k8slb-test"));

    // Re-applying without `b` removes it (the manager owned it); `a` changes.
    let updated = cms
        .patch("k8slb-state", &ssa, &Patch::Apply(&cm(json!({"a": "3"}))))
        .await
        .unwrap();
    assert_eq!(
        updated.data.unwrap().into_iter().collect::<Vec<_>>(),
        [("a".to_string(), "3".to_string())]
    );
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );

    // The same apply again is a no-op: no new resourceVersion.
    let again = cms
        .patch("k8slb-state", &ssa, &Patch::Apply(&cm(json!({"a": "3"}))))
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        updated.metadata.resource_version
    );

    // Another manager setting `a` differently conflicts, unless it forces.
    let other = PatchParams::apply("someone-else");
    let (code, reason) = api_code(
        cms.patch("k8slb-state", &other, &Patch::Apply(&cm(json!({"a": "9"}))))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    let forced = cms
        .patch(
            "k8slb-state",
            &other.force(),
            &Patch::Apply(&cm(json!({"a": "9"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["a"], "9");

    // fieldManager is required for apply.
    let (code, _) = api_code(
        cms.patch(
            "k8slb-state",
            &PatchParams::default(),
            &Patch::Apply(&cm(json!({}))),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, 400);
}

#[tokio::test]
async fn json_patch_cluster_scoped_and_grouped_kinds() {
    let fake = FakeApi::start().await;
    let client = client(&fake).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "lb-1", "labels": {"type": "loadBalancer"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
    }))
    .unwrap();
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    assert!(created.metadata.namespace.is_none());
    assert_eq!(
        created.status.unwrap().addresses.unwrap()[0].address,
        "10.0.0.1"
    );

    let request = http::Request::patch("/api/v1/nodes/lb-1")
        .header("content-type", "application/json-patch+json")
        .body(
            serde_json::to_vec(&json!([
                {"op": "test", "path": "/metadata/labels/type", "value": "loadBalancer"},
                {"op": "add", "path": "/metadata/labels/zone", "value": "a"},
            ]))
            .unwrap(),
        )
        .unwrap();
    let patched: Value = client.request(request).await.unwrap();
    assert_eq!(patched["metadata"]["labels"]["zone"], "a");

    fake.create_namespace("k8slb-system");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "k8slb-system");
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "k8slb-watcher"}, "spec": {"holderIdentity": "pod-a"},
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let stored = fake
        .get_object("/apis/coordination.k8s.io/v1/namespaces/k8slb-system/leases/k8slb-watcher")
        .unwrap();
    assert_eq!(stored["spec"]["holderIdentity"], "pod-a");
    assert_eq!(fake.list("Lease").len(), 1);
    assert_eq!(fake.list("nodes").len(), 1);

    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.minor, "33");
}

#[tokio::test]
async fn raw_watch_replays_bookmarks_and_drops() {
    let fake = FakeApi::start_with(Options {
        bookmark_interval: Duration::from_millis(200),
        ..Options::default()
    })
    .await
    .unwrap();
    let services: Api<Service> = Api::default_namespaced(client(&fake).await);
    let a = services
        .create(&PostParams::default(), &svc("a", json!({})))
        .await
        .unwrap();
    let from = a.resource_version().unwrap();
    services
        .create(&PostParams::default(), &svc("b", json!({})))
        .await
        .unwrap();

    let wp = WatchParams::default().timeout(30);
    assert!(wp.bookmarks, "bookmarks are on by default");
    let mut stream = services.watch(&wp, &from).await.unwrap().boxed();
    // Replay: only `b` happened after `a`'s resourceVersion.
    match next(&mut stream).await.unwrap() {
        WatchEvent::Added(s) => assert_eq!(s.name_any(), "b"),
        other => panic!("expected ADDED b, got {other:?}"),
    }
    match next(&mut stream).await.unwrap() {
        WatchEvent::Bookmark(bm) => assert_eq!(
            bm.metadata.resource_version,
            fake.resource_version().to_string()
        ),
        other => panic!("expected a bookmark, got {other:?}"),
    }
    fake.faults().drop_watches();
    let rest: Vec<_> = tokio::time::timeout(Duration::from_secs(5), stream.collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(
        rest.iter()
            .all(|e| matches!(e, Ok(WatchEvent::Bookmark(_)))),
        "{rest:?}"
    );

    // From a compacted resourceVersion: one ERROR 410 Expired, then the stream ends.
    fake.faults().compact();
    let mut stream = services.watch(&wp, &from).await.unwrap().boxed();
    match next(&mut stream).await.unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.contains("too old resource version"),
                "{}",
                e.message
            );
        }
        other => panic!("expected ERROR 410, got {other:?}"),
    }
    assert!(tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn watcher_sees_added_modified_deleted() {
    let fake = FakeApi::start().await;
    let services: Api<Service> = Api::default_namespaced(client(&fake).await);
    let mut events = watcher(services.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    assert!(matches!(next(&mut events).await.unwrap(), Event::Init));
    assert!(matches!(next(&mut events).await.unwrap(), Event::InitDone));

    services
        .create(&PostParams::default(), &svc("web", json!({})))
        .await
        .unwrap();
    match next(&mut events).await.unwrap() {
        Event::Apply(s) => assert!(s.labels().is_empty()),
        other => panic!("expected Apply, got {other:?}"),
    }
    let patch = json!({"metadata": {"labels": {"x": "y"}}});
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    match next(&mut events).await.unwrap() {
        Event::Apply(s) => assert_eq!(s.labels().get("x").map(String::as_str), Some("y")),
        other => panic!("expected Apply, got {other:?}"),
    }
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    match next(&mut events).await.unwrap() {
        Event::Delete(s) => assert_eq!(s.name_any(), "web"),
        other => panic!("expected Delete, got {other:?}"),
    }
}

fn list_requests(fake: &FakeApi) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/services") && !r.is_watch())
        .count()
}

#[tokio::test]
async fn watcher_relists_after_410_expired() {
    let fake = FakeApi::start().await;
    let services: Api<Service> = Api::default_namespaced(client(&fake).await);
    let mut events = watcher(
        services.clone(),
        watcher::Config::default().disable_bookmarks(),
    )
    .default_backoff()
    .boxed();
    assert!(matches!(next(&mut events).await.unwrap(), Event::Init));
    assert!(matches!(next(&mut events).await.unwrap(), Event::InitDone));
    assert_eq!(list_requests(&fake), 1);

    // While the watcher is cut off, `late` is created and the history compacted: its
    // re-watch gets 410 and it has to relist to see `late`.
    fake.faults().go_away().await;
    fake.put_object(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "late"}}));
    fake.faults().compact();
    fake.faults().come_back().await.unwrap();

    let mut saw_late = false;
    while !saw_late {
        match next(&mut events).await {
            Ok(Event::InitApply(s)) => saw_late = s.name_any() == "late",
            Ok(Event::Apply(s)) => panic!("{} arrived by watch, not by relist", s.name_any()),
            Ok(_) | Err(_) => {}
        }
    }
    assert_eq!(list_requests(&fake), 2);
    assert!(fake
        .requests()
        .iter()
        .any(|r| r.is_watch() && r.status == 200));
}

#[tokio::test]
async fn injected_500_fails_once_then_succeeds() {
    let fake = FakeApi::start().await;
    let services: Api<Service> = Api::default_namespaced(client(&fake).await);
    services
        .create(&PostParams::default(), &svc("web", json!({})))
        .await
        .unwrap();
    fake.clear_requests();

    fake.faults().fail_next_matching(1, "/services/web");
    let (code, reason) = api_code(services.get("web").await.unwrap_err());
    assert_eq!((code, reason.as_str()), (500, "InternalError"));
    assert_eq!(fake.faults().pending_failures(), 0);
    assert_eq!(services.get("web").await.unwrap().name_any(), "web");
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [500, 200]);

    // A path filter leaves other requests alone.
    fake.faults().fail_next_matching(1, "/configmaps");
    services.get("web").await.unwrap();
    assert_eq!(fake.faults().pending_failures(), 1);
}

#[tokio::test]
async fn latency_delays_responses() {
    let fake = FakeApi::start().await;
    let services: Api<Service> = Api::default_namespaced(client(&fake).await);
    fake.faults().set_latency(Duration::from_millis(300));
    let start = std::time::Instant::now();
    services.list(&ListParams::default()).await.unwrap();
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn watcher_resumes_after_server_goes_away_and_comes_back() {
    let fake = FakeApi::start().await;
    let services: Api<Service> = Api::default_namespaced(client(&fake).await);
    let mut events = watcher(services.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    services
        .create(&PostParams::default(), &svc("before", json!({})))
        .await
        .unwrap();
    assert_eq!(next(&mut events).await.unwrap().name_any(), "before");

    let addr = fake.addr();
    fake.faults().go_away().await;
    assert!(!fake.faults().is_up());
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "port is closed"
    );
    assert!(services.get("before").await.is_err());
    fake.put_object(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "during"}}));
    fake.faults().come_back().await.unwrap();
    assert_eq!(fake.addr(), addr);

    // The watcher resumes from its resourceVersion: `during` comes from the history.
    assert_eq!(next(&mut events).await.unwrap().name_any(), "during");
    services
        .create(&PostParams::default(), &svc("after", json!({})))
        .await
        .unwrap();
    assert_eq!(next(&mut events).await.unwrap().name_any(), "after");
    let lists = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/services") && r.method == "GET" && !r.is_watch())
        .count();
    assert_eq!(lists, 1, "resumed without relisting");
}

#[tokio::test]
async fn streaming_list_watcher_gets_initial_events_end() {
    let fake = FakeApi::start().await;
    let services: Api<Service> = Api::default_namespaced(client(&fake).await);
    services
        .create(&PostParams::default(), &svc("existing", json!({})))
        .await
        .unwrap();
    let config = watcher::Config::default().streaming_lists();
    let mut events = watcher(services.clone(), config).default_backoff().boxed();
    assert!(matches!(next(&mut events).await.unwrap(), Event::Init));
    match next(&mut events).await.unwrap() {
        Event::InitApply(s) => assert_eq!(s.name_any(), "existing"),
        other => panic!("expected InitApply, got {other:?}"),
    }
    assert!(matches!(next(&mut events).await.unwrap(), Event::InitDone));
    services
        .create(&PostParams::default(), &svc("new", json!({})))
        .await
        .unwrap();
    match next(&mut events).await.unwrap() {
        Event::Apply(s) => assert_eq!(s.name_any(), "new"),
        other => panic!("expected Apply, got {other:?}"),
    }
    assert_eq!(list_requests(&fake), 0, "no list call in streaming mode");
}

/// Gateway API objects are custom resources: served only once their CRDs are installed,
/// a strategic merge patch is refused (415) as a real server refuses it for any custom
/// resource, a merge patch of `/status` works, and a status the CRD's schema refuses is
/// 422.
#[tokio::test]
async fn gateway_api_kinds_behave_as_custom_resources() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let fake = FakeApi::start().await;
    let client = client(&fake).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "Gateway"),
        "gateways",
    );
    let gateways: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let gw: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw"},
        "spec": {"gatewayClassName": "k8slb", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
    }))
    .unwrap();
    let pp = PostParams::default();
    assert_eq!(
        api_code(gateways.create(&pp, &gw).await.unwrap_err()).0,
        404
    );

    fake.install_gateway_api_crds(true);
    gateways
        .create(&pp, &gw)
        .await
        .expect("created once the CRDs exist");
    let cond = json!({"type": "Accepted", "status": "True", "reason": "Accepted",
        "message": "", "lastTransitionTime": "2026-11-25T08:00:00Z", "observedGeneration": 1});
    let status = json!({"status": {"conditions": [cond]}});
    let refused = gateways
        .patch_status("gw", &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .unwrap_err();
    assert_eq!(api_code(refused).0, 415);
    let patched = gateways
        .patch_status("gw", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("a merge patch of the status");
    assert_eq!(
        patched.data["status"]["conditions"][0]["reason"],
        "Accepted"
    );
    let bad = json!({"status": {"conditions": [{"type": "Accepted", "status": "Yes",
        "reason": "Accepted", "message": "", "lastTransitionTime": "2026-11-25T08:00:00Z"}]}});
    let invalid = gateways
        .patch_status("gw", &PatchParams::default(), &Patch::Merge(&bad))
        .await
        .unwrap_err();
    assert_eq!(api_code(invalid).0, 422);
}
