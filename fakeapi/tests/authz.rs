//! Authentication, RBAC and NamespaceLifecycle in the fake, through the real `kube` client
//! over HTTP, with the RBAC of the shipped manifests (`manifests/k8slb-haproxy.yml`): the
//! fake refuses what a real kube-apiserver refuses, with the same Status.

use std::path::PathBuf;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node, Secret, Service};
use k8slb_fakeapi::{Authorization, FakeApi, Options};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};

const NS: &str = "k8slb-system";
const WATCHER: &str = "system:serviceaccount:k8slb-system:watcher";
const ACTOR: &str = "system:serviceaccount:k8slb-system:actor";

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/k8slb-haproxy.yml")
}

async fn client_from(path: &std::path::Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).expect("kubeconfig parses");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    Client::try_from(config).expect("client")
}

async fn admin(api: &FakeApi) -> Client {
    client_from(api.kubeconfig_path()).await
}

async fn sa(api: &FakeApi, name: &str) -> Client {
    client_from(&api.kubeconfig_for_service_account(NS, name)).await
}

/// A fake with the shipped manifests loaded.
async fn cluster() -> FakeApi {
    let api = FakeApi::start().await;
    let loaded = api.load_manifests(manifest()).expect("the manifests load");
    let kinds: Vec<&str> = loaded.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "DaemonSet",
    ] {
        assert!(kinds.contains(&kind), "{kind} not loaded: {kinds:?}");
    }
    api
}

fn status(err: kube::Error) -> (u16, String, String) {
    match err {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn forbidden(err: kube::Error) -> String {
    let (code, reason, message) = status(err);
    assert_eq!((code, reason.as_str()), (403, "Forbidden"), "{message}");
    message
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

#[tokio::test]
async fn server_side_apply_that_creates_needs_create_as_well_as_patch() {
    let api = cluster().await;
    let cms: Api<ConfigMap> = Api::namespaced(sa(&api, "watcher").await, NS);
    let ssa = PatchParams::apply("k8slb-watcher").force();
    // The shipped Role grants create and patch: the apply creates, then updates.
    cms.patch("k8slb-state", &ssa, &Patch::Apply(cm("k8slb-state")))
        .await
        .expect("the watcher publishes its state");
    let mut again = cm("k8slb-state");
    again["data"]["k"] = json!("w");
    cms.patch("k8slb-state", &ssa, &Patch::Apply(again))
        .await
        .unwrap();

    // The same Role without `create` (the RBAC that shipped before): the update of the
    // existing object still works, the apply that would create is refused with the real
    // message, and the fake logs the 403 with the verb it checked.
    let role_path = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles/watcher");
    let mut role = api.get_object(&role_path).unwrap();
    for rule in role["rules"].as_array_mut().unwrap() {
        if rule["resources"] == json!(["configmaps"]) {
            rule["verbs"] = json!(["list", "watch", "patch", "delete"]);
        }
    }
    api.put_object(role);
    cms.patch("k8slb-state", &ssa, &Patch::Apply(cm("k8slb-state")))
        .await
        .expect("patch of an existing object needs only patch");
    api.clear_requests();
    let err = cms
        .patch("k8slb-state-0", &ssa, &Patch::Apply(cm("k8slb-state-0")))
        .await
        .unwrap_err();
    let message = forbidden(err);
    assert_eq!(
        message,
        format!("configmaps \"k8slb-state-0\" is forbidden: User \"{WATCHER}\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"{NS}\"")
    );
    let log = api.requests();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(
        (log[0].method.as_str(), log[0].status, log[0].user.as_str()),
        ("PATCH", 403, WATCHER)
    );
    assert_eq!(log[0].message.as_deref(), Some(message.as_str()));
    assert!(api
        .get_object(&format!("/api/v1/namespaces/{NS}/configmaps/k8slb-state-0"))
        .is_none());

    // A plain POST is a create as well.
    let err = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(cm("other")).unwrap(),
        )
        .await
        .unwrap_err();
    // A POST has no name in its URL: the message names none.
    assert_eq!(
        forbidden(err),
        format!("configmaps is forbidden: User \"{WATCHER}\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"{NS}\"")
    );
}

#[tokio::test]
async fn the_watcher_gets_what_its_roles_grant_and_nothing_else() {
    let api = cluster().await;
    let client = sa(&api, "watcher").await;
    let lp = ListParams::default();

    // ClusterRole through a ClusterRoleBinding: every namespace and cluster scope.
    Api::<Service>::all(client.clone()).list(&lp).await.unwrap();
    Api::<Node>::all(client.clone()).list(&lp).await.unwrap();
    let _watch = Api::<Node>::all(client.clone())
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .expect("watch nodes");
    // ... but not get (only list and watch are granted).
    let err = Api::<Node>::all(client.clone())
        .get("lb1")
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(err),
        format!("nodes \"lb1\" is forbidden: User \"{WATCHER}\" cannot get resource \"nodes\" in API group \"\" at the cluster scope")
    );

    // services/status is patchable, the Service itself is not.
    let admin = admin(&api).await;
    let svc: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}))
    .unwrap();
    Api::<Service>::default_namespaced(admin.clone())
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let body = json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}});
    services
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&body))
        .await
        .expect("status patch");
    let err = services
        .patch("web", &PatchParams::default(), &Patch::Merge(&body))
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(err),
        format!("services \"web\" is forbidden: User \"{WATCHER}\" cannot patch resource \"services\" in API group \"\" in the namespace \"default\"")
    );

    // The Role is only in k8slb-system: ConfigMaps elsewhere are out of reach.
    let err = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .list(&lp)
        .await
        .unwrap_err();
    forbidden(err);
    // No Secrets anywhere.
    let err = Api::<Secret>::namespaced(client.clone(), NS)
        .get("any")
        .await
        .unwrap_err();
    forbidden(err);

    // The Lease: create on any name (a POST carries none), get/update only k8slb-watcher.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    assert!(leases.get_opt("k8slb-watcher").await.unwrap().is_none());
    let lease = |name: &str| -> Lease {
        serde_json::from_value(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name}, "spec": {"holderIdentity": "w1"}}),
        )
        .unwrap()
    };
    let created = leases
        .create(&PostParams::default(), &lease("k8slb-watcher"))
        .await
        .unwrap();
    leases
        .replace("k8slb-watcher", &PostParams::default(), &created)
        .await
        .unwrap();
    leases
        .create(&PostParams::default(), &lease("other"))
        .await
        .unwrap();
    let err = leases.get("other").await.unwrap_err();
    assert_eq!(
        forbidden(err),
        format!("leases.coordination.k8s.io \"other\" is forbidden: User \"{WATCHER}\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"{NS}\"")
    );
    // resourceNames never match a list.
    let err = leases.list(&lp).await.unwrap_err();
    forbidden(err);
}

#[tokio::test]
async fn the_actor_reads_the_state_configmaps_and_writes_only_configmaps_of_its_namespace() {
    let api = cluster().await;
    let client = sa(&api, "actor").await;
    let lp = ListParams::default().labels("k8slb.io/part=state");
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .list(&lp)
        .await
        .expect("list the state");
    let err = Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(err),
        format!("services is forbidden: User \"{ACTOR}\" cannot list resource \"services\" in API group \"\" at the cluster scope")
    );
    let err = Api::<Secret>::namespaced(client.clone(), NS)
        .get("k8slb-certs")
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(err),
        format!("secrets \"k8slb-certs\" is forbidden: User \"{ACTOR}\" cannot get resource \"secrets\" in API group \"\" in the namespace \"{NS}\"")
    );
    // No get of one ConfigMap; its one write is its node report (a server-side apply that
    // creates it: RBAC cannot name it, see docs/api-calls.md); no delete.
    forbidden(
        Api::<ConfigMap>::namespaced(client.clone(), NS)
            .get("global")
            .await
            .unwrap_err(),
    );
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .patch(
            "k8slb-node-lb-1",
            &PatchParams::apply("k8slb-actor").force(),
            &Patch::Apply(cm("k8slb-node-lb-1")),
        )
        .await
        .expect("the actor writes its node report");
    forbidden(
        Api::<ConfigMap>::namespaced(client.clone(), NS)
            .delete("k8slb-node-lb-1", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    forbidden(
        Api::<ConfigMap>::namespaced(client.clone(), NS)
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap_err(),
    );
}

#[tokio::test]
async fn tokens_anonymous_and_unknown() {
    let api = cluster().await;
    // No token: system:anonymous, 403 (health and version stay public).
    let anon = Client::try_from(Config::new(api.url().parse().unwrap())).unwrap();
    let err = Api::<ConfigMap>::namespaced(anon.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        forbidden(err),
        format!("configmaps is forbidden: User \"system:anonymous\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"{NS}\"")
    );
    anon.apiserver_version().await.expect("/version is public");

    // A token the server never issued: 401.
    let mut config = Config::new(api.url().parse().unwrap());
    config.headers.push((
        http::header::AUTHORIZATION,
        http::HeaderValue::from_static("Bearer nope"),
    ));
    let stranger = Client::try_from(config).unwrap();
    let (code, reason, _) = status(
        Api::<ConfigMap>::namespaced(stranger, NS)
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (401, "Unauthorized"));

    // A ServiceAccount token works only while its ServiceAccount exists.
    let ghost = client_from(&api.kubeconfig_for_service_account(NS, "ghost")).await;
    let (code, _, _) = status(
        Api::<ConfigMap>::namespaced(ghost, NS)
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 401);
    api.delete_object(&format!("/api/v1/namespaces/{NS}/serviceaccounts/actor"));
    let (code, _, _) = status(
        Api::<ConfigMap>::namespaced(sa(&api, "actor").await, NS)
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 401);

    // Authorization off (`AlwaysAllow`): anonymous may do anything.
    let open = FakeApi::start_with(Options {
        authorization: Authorization::AlwaysAllow,
        ..Options::default()
    })
    .await
    .unwrap();
    let anon = Client::try_from(Config::new(open.url().parse().unwrap())).unwrap();
    Api::<Secret>::namespaced(anon, "default")
        .list(&ListParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn creates_need_an_existing_namespace() {
    let api = FakeApi::start().await;
    let client = admin(&api).await;
    // A new cluster's namespaces.
    let names: Vec<String> = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    let want = (
        404,
        "NotFound".to_string(),
        "namespaces \"team-a\" not found".to_string(),
    );
    let post = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(cm("a")).unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(status(post), want);
    let apply = cms
        .patch("a", &PatchParams::apply("t"), &Patch::Apply(cm("a")))
        .await
        .unwrap_err();
    assert_eq!(status(apply), want);

    // Created through the API, a Namespace is Active and takes objects.
    let ns: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
    )
    .unwrap();
    let ns = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    cms.patch("a", &PatchParams::apply("t"), &Patch::Apply(cm("a")))
        .await
        .unwrap();

    // A terminating namespace takes nothing new.
    let mut t = api.get_object("/api/v1/namespaces/team-a").unwrap();
    t["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    t["status"]["phase"] = json!("Terminating");
    api.put_object(t);
    let (code, reason, message) = status(
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(cm("b")).unwrap(),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert!(
        message.ends_with(
            "unable to create new content in namespace team-a because it is being terminated"
        ),
        "{message}"
    );

    // The immortal namespaces cannot be deleted.
    let err = Api::<Namespace>::all(client.clone())
        .delete("default", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        status(err),
        (
            403,
            "Forbidden".into(),
            "namespaces \"default\" is forbidden: this namespace may not be deleted".into()
        )
    );
}

#[tokio::test]
async fn oversized_configmaps_and_misplaced_events_are_invalid() {
    let api = FakeApi::start().await;
    let client = admin(&api).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let big = |n: usize| -> ConfigMap {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "big"}, "data": {"a": "x".repeat(n - 10), "b": "y".repeat(10)}}))
        .unwrap()
    };
    cms.create(&PostParams::default(), &big(1024 * 1024))
        .await
        .expect("exactly 1 MiB of data is allowed");
    let (code, reason, message) = status(
        cms.replace("big", &PostParams::default(), &big(1024 * 1024 + 1))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(
        message,
        "ConfigMap \"big\" is invalid: []: Too long: must have at most 1048576 bytes"
    );

    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let ev = |ns: &str| -> Event {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("e-{ns}")},
            "involvedObject": {"kind": "Service", "name": "web", "namespace": ns},
            "reason": "Test", "message": "m"}))
        .unwrap()
    };
    events
        .create(&PostParams::default(), &ev("default"))
        .await
        .unwrap();
    let (code, _, message) = status(
        events
            .create(&PostParams::default(), &ev("kube-system"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert_eq!(
        message,
        "Event \"e-kube-system\" is invalid: involvedObject.namespace: Invalid value: \"kube-system\": does not match event.namespace"
    );
}
