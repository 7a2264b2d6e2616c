//! The BGP password Secrets follower against the fake API server (real HTTP, the real
//! kube client, the actor's ServiceAccount under the BGP variant's RBAC): the
//! `kubernetes.io/basic-auth` Secrets of k8slb-system become `<dir>/<name>/password`
//! files, follow changes, and go when their Secret goes; other Secrets never reach the
//! directory. No root needed. Waits are bounded (a missing change fails after [`WAIT`]).

use base64::Engine;
mod support;

use k8slb_fakeapi::FakeApi;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const NS: &str = "k8slb-system";
const WAIT: Duration = Duration::from_secs(60);

fn secret(name: &str, type_: &str, password: &str) -> serde_json::Value {
    let b64 = base64::engine::general_purpose::STANDARD.encode(password);
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "type": type_,
        "data": {"password": b64, "username": "eA=="},
    })
}

async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < WAIT, "{what}: not after {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn read(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name).join("password")).ok()
}

#[tokio::test]
async fn password_secrets_of_the_namespace_follow_into_the_directory_and_nothing_else() {
    let api = FakeApi::start().await;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/k8slb-haproxy-bgp.yml");
    api.load_manifests(&manifest)
        .unwrap_or_else(|e| panic!("loading the manifests: {e}"));
    let client = support::actor_client(&api, NS).await;

    api.put_object(secret("bgp-a", "kubernetes.io/basic-auth", "s3cret!x"));
    api.put_object(secret("web-tls", "kubernetes.io/tls", "not-a-password"));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("bgp-secrets");
    tokio::spawn(k8slb_actor::bgp_secrets::follow(
        client,
        NS.to_string(),
        d.clone(),
    ));
    wait_for("bgp-a's password", || {
        read(&d, "bgp-a").as_deref() == Some("s3cret!x")
    })
    .await;
    api.put_object(secret("bgp-b", "kubernetes.io/basic-auth", "other"));
    wait_for("bgp-b's password", || {
        read(&d, "bgp-b").as_deref() == Some("other")
    })
    .await;
    api.put_object(secret("bgp-a", "kubernetes.io/basic-auth", "rotated"));
    wait_for("bgp-a's new password", || {
        read(&d, "bgp-a").as_deref() == Some("rotated")
    })
    .await;
    api.delete_object(&format!("/api/v1/namespaces/{NS}/secrets/bgp-b"));
    wait_for("bgp-b gone", || !d.join("bgp-b").exists()).await;
    // The TLS Secret never came (it was there before every change above).
    let names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["bgp-a"]);
    let pw = k8slb_actor::frr::read_password(Some(&d), &"bgp-a".parse().unwrap()).unwrap();
    assert_eq!(pw.expose(), "rotated");
}
