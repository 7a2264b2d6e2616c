//! The ConfigMap state source against the fake API server (real HTTP, the real kube
//! client): no root needed.
//!
//! Waits are bounded (a missing update fails after [`WAIT`]), never timed assertions.
//! "Nothing was delivered for X" is shown by ordering: the next update after X is the one
//! written after it.

use base64::Engine;
use k8slb_actor::state_source::{
    self, ConfigMapOptions, ConfigMapSource, Polled, Source, Update, STATE_KEY, STATE_NAME,
};
use k8slb_common::config::parse_global_config;
use k8slb_common::publish::{self, Part};
use k8slb_common::state::{IpMode, ServiceState, State};
mod support;

use k8slb_fakeapi::FakeApi;
use serde_json::json;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

const NS: &str = "k8slb-system";
const WAIT: Duration = Duration::from_secs(60);

fn state(net_octet: u8, services: usize) -> State {
    let cfg = parse_global_config(&format!(
        r#"{{"pools":{{"default":{{"network":"10.{net_octet}.0.0/16","range":"10.{net_octet}.0.1-10.{net_octet}.255.254"}}}}}}"#
    ))
    .unwrap();
    let mut s = State::empty(cfg.actor_config(&Default::default()));
    for i in 0..services {
        s.services.insert(
            format!("ns{}/svc{i}", i % 7).parse().unwrap(),
            ServiceState {
                ips: vec![
                    format!("10.{net_octet}.{}.{}", ((i + 1) >> 8) & 255, (i + 1) & 255)
                        .parse()
                        .unwrap(),
                ],
                pool: "default".into(),
                ip_mode: IpMode::Proxy,
                uid: format!("{i:032x}"),
                ports: vec![],
            },
        );
    }
    s
}

fn cm_json(name: &str, gzip: &[u8]) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "k8slb", "k8slb.io/part": "state"},
        },
        "binaryData": {STATE_KEY: base64::engine::general_purpose::STANDARD.encode(gzip)},
    })
}

fn put(api: &FakeApi, part: &Part) {
    api.put_object(cm_json(&format!("{STATE_NAME}{}", part.suffix), &part.gzip));
}

/// Writers' order: shards first, the index last.
fn publish_all(api: &FakeApi, parts: &[Part]) {
    for p in parts.iter().skip(1) {
        put(api, p);
    }
    put(api, &parts[0]);
}

/// A fake API server with k8slb installed from the shipped manifest (the k8slb-system
/// Namespace, the ServiceAccounts and their RBAC).
async fn fake() -> FakeApi {
    let api = FakeApi::start().await;
    let manifest =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/k8slb-haproxy.yml");
    api.load_manifests(&manifest)
        .unwrap_or_else(|e| panic!("loading the manifests: {e}"));
    api
}

/// The actor's client: its ServiceAccount's token, so only what the manifests' RBAC
/// grants the actor works.
async fn client(api: &FakeApi) -> kube::Client {
    support::actor_client(api, NS).await
}

fn opts() -> ConfigMapOptions {
    let mut o = ConfigMapOptions::new(NS);
    o.min_backoff = Duration::from_millis(100);
    o.max_backoff = Duration::from_secs(1);
    o
}

fn start(client: kube::Client, opts: ConfigMapOptions) -> UnboundedReceiver<Update> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(state_source::follow(client, opts, tx));
    rx
}

async fn next(rx: &mut UnboundedReceiver<Update>) -> Update {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("no update from the source in time")
        .expect("the source stopped")
}

async fn next_state(rx: &mut UnboundedReceiver<Update>) -> State {
    match next(rx).await {
        Update::State(s) => *s,
        other => panic!("expected a state, got {other:?}"),
    }
}

#[tokio::test]
async fn single_object_state_is_followed() {
    let api = fake().await;
    let a = state(1, 3);
    let pa = publish::encode(&a, publish::MAX_OBJECT_BYTES);
    assert_eq!(pa.len(), 1);
    publish_all(&api, &pa);
    // An unrelated ConfigMap in the namespace without our labels is not looked at.
    api.put_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "global", "namespace": NS}, "data": {"config": "{}"}}));
    let mut rx = start(client(&api).await, opts());
    assert_eq!(next_state(&mut rx).await, a);

    let b = state(2, 4);
    publish_all(&api, &publish::encode(&b, publish::MAX_OBJECT_BYTES));
    assert_eq!(next_state(&mut rx).await, b);

    // Every request was a label-selected list or watch of ConfigMaps in our namespace
    // (what the actor's Role grants), made as the actor, and allowed.
    for r in api.requests() {
        assert_eq!(r.method, "GET", "{r:?}");
        assert_eq!(r.user, "system:serviceaccount:k8slb-system:actor", "{r:?}");
        assert_eq!(r.status, 200, "{r:?}");
        assert!(["list", "watch"].contains(&r.verb.as_str()), "{r:?}");
        assert_eq!(
            r.path,
            format!("/api/v1/namespaces/{NS}/configmaps"),
            "{r:?}"
        );
        assert_eq!(
            r.param("labelSelector").as_deref(),
            Some(state_source::STATE_SELECTOR),
            "{r:?}"
        );
    }
}

#[tokio::test]
async fn sharded_state_shard_then_index_and_stale_shards() {
    let api = fake().await;
    const MAX: usize = 8 * 1024;
    let a = state(1, 2000);
    let pa = publish::encode(&a, MAX);
    assert!(
        pa.len() > 2,
        "the state must be sharded: {} parts",
        pa.len()
    );
    publish_all(&api, &pa);
    let mut rx = start(client(&api).await, opts());
    assert_eq!(next_state(&mut rx).await, a);

    // One Service changed: its shard first, then the index.
    let mut b = a.clone();
    b.services.remove(&"ns0/svc0".parse().unwrap());
    let pb = publish::encode(&b, MAX);
    assert_eq!(pb.len(), pa.len());
    let changed: Vec<usize> = (1..pb.len()).filter(|i| pa[*i] != pb[*i]).collect();
    assert_eq!(changed.len(), 1, "exactly one shard changes");
    put(&api, &pb[changed[0]]);
    put(&api, &pb[0]);
    // The shard alone (old index, new shard: digest mismatch) delivered nothing: the next
    // update is the new state.
    assert_eq!(next_state(&mut rx).await, b);

    // An index whose shard is stale (a writer died between the two writes): refused
    // silently, the current state (b) stays.
    let mut c = b.clone();
    c.services.remove(&"ns1/svc1".parse().unwrap());
    let pc = publish::encode(&c, MAX);
    let c_shard = (1..pc.len()).find(|i| pc[*i] != pb[*i]).unwrap();
    put(&api, &pc[0]);
    // Back to b's index: consistent again, same state as delivered: nothing.
    put(&api, &pb[0]);
    // A missing shard: nothing either.
    let last = pb.len() - 1;
    api.delete_object(&format!(
        "/api/v1/namespaces/{NS}/configmaps/{STATE_NAME}-{}",
        last - 1
    ));
    put(&api, &pb[last - 1]);
    // Now c, written properly: the next update is c, so nothing came in between.
    put(&api, &pc[c_shard]);
    put(&api, &pc[0]);
    assert_eq!(next_state(&mut rx).await, c);
}

#[tokio::test]
async fn garbage_index_is_refused_and_the_next_good_one_is_taken() {
    let api = fake().await;
    let a = state(1, 3);
    publish_all(&api, &publish::encode(&a, publish::MAX_OBJECT_BYTES));
    let mut rx = start(client(&api).await, opts());
    assert_eq!(next_state(&mut rx).await, a);

    api.put_object(cm_json(STATE_NAME, b"not gzip"));
    match next(&mut rx).await {
        Update::Refused(why) => assert!(why.contains(STATE_NAME), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Deleting the index never yields an empty state.
    api.delete_object(&format!("/api/v1/namespaces/{NS}/configmaps/{STATE_NAME}"));
    let b = state(3, 1);
    publish_all(&api, &publish::encode(&b, publish::MAX_OBJECT_BYTES));
    assert_eq!(next_state(&mut rx).await, b);
}

#[tokio::test]
async fn api_gone_keeps_the_state_and_recovers() {
    let api = fake().await;
    let a = state(1, 3);
    publish_all(&api, &publish::encode(&a, publish::MAX_OBJECT_BYTES));
    let mut rx = start(client(&api).await, opts());
    assert_eq!(next_state(&mut rx).await, a);

    let faults = api.faults();
    faults.go_away().await;
    // While the API server is away the state changes behind it; the source reports
    // nothing (no Unavailable after a first state: the current one stays in force).
    let b = state(2, 5);
    publish_all(&api, &publish::encode(&b, publish::MAX_OBJECT_BYTES));
    // Let the source hit a few connection errors (this sleep only makes the outage
    // real; nothing is asserted about durations).
    tokio::time::sleep(Duration::from_secs(2)).await;
    api.clear_requests();
    faults.come_back().await.unwrap();
    // Recovery: the first update after the outage is the new state.
    assert_eq!(next_state(&mut rx).await, b);
    assert!(!api.requests().is_empty());
}

#[tokio::test]
async fn api_down_at_start_reports_unavailable_then_follows() {
    let api = fake().await;
    let faults = api.faults();
    faults.go_away().await;
    let a = state(1, 3);
    publish_all(&api, &publish::encode(&a, publish::MAX_OBJECT_BYTES));
    let mut rx = start(client(&api).await, opts());
    // The control loop starts from last-state.json on this.
    match next(&mut rx).await {
        Update::Unavailable(why) => assert!(!why.is_empty()),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    faults.come_back().await.unwrap();
    loop {
        match next(&mut rx).await {
            Update::Unavailable(_) => continue,
            Update::State(s) => {
                assert_eq!(*s, a);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn no_index_yet_reports_unavailable() {
    let api = fake().await;
    let mut rx = start(client(&api).await, opts());
    match next(&mut rx).await {
        Update::Unavailable(why) => assert!(why.contains(STATE_NAME), "{why}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let a = state(1, 3);
    publish_all(&api, &publish::encode(&a, publish::MAX_OBJECT_BYTES));
    assert_eq!(next_state(&mut rx).await, a);
}

/// The control loop's side: [`ConfigMapSource`] polled without blocking, as `run` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polled_source_as_the_control_loop_sees_it() {
    let api = fake().await;
    let a = state(1, 3);
    publish_all(&api, &publish::encode(&a, publish::MAX_OBJECT_BYTES));
    let mut src = ConfigMapSource::spawn(
        client(&api).await,
        opts(),
        &tokio::runtime::Handle::current(),
    );
    assert_eq!(src.describe(), format!("configmap {NS}/{STATE_NAME}"));
    let got = tokio::time::timeout(WAIT, async {
        loop {
            match src.poll() {
                Polled::Decoded(s) => return *s,
                Polled::Unchanged => tokio::time::sleep(Duration::from_millis(50)).await,
                other => panic!("unexpected {other:?}"),
            }
        }
    })
    .await
    .expect("no state in time");
    assert_eq!(got, a);
}

/// The actor's token reads the state ConfigMaps and nothing else.
#[tokio::test]
async fn the_actor_identity_reads_nothing_but_the_state() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
    use kube::api::{Api, ListParams};
    let api = fake().await;
    let client = client(&api).await;
    let code = |e: kube::Error| match e {
        kube::Error::Api(s) => (s.code, s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    };
    let (status, message) = code(
        Api::<Secret>::namespaced(client.clone(), NS)
            .get("k8slb-certs")
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 403, "{message}");
    assert!(
        message.contains("cannot get resource \"secrets\""),
        "{message}"
    );
    let (status, message) = code(
        Api::<Service>::all(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 403, "{message}");
    assert!(
        message.contains("cannot list resource \"services\""),
        "{message}"
    );
    let (status, _) = code(
        Api::<ConfigMap>::namespaced(client.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 403, "ConfigMaps outside k8slb-system");
    Api::<ConfigMap>::namespaced(client, NS)
        .list(&ListParams::default().labels(state_source::STATE_SELECTOR))
        .await
        .expect("the state ConfigMaps");
}
