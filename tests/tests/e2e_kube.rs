//! The Kubernetes path end to end: the real `k8slb-watcher --source kubernetes` and
//! `k8slb-actor --state configmap` on the fake API server (k8slb-fakeapi), with real
//! keepalived and HAProxy in the lab's namespaces. Each binary runs as its ServiceAccount
//! with the RBAC of `manifests/k8slb-haproxy.yml`, which the fake enforces as
//! kube-apiserver does. Needs root; fails (never skips) without it.

use k8slb_tests::objects::{endpoint_slice, svc, tcp};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::{self, Proto};
use k8slb_tests::wait;
use std::net::SocketAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn kubernetes_source_status_traffic_churn_and_release() {
    let mut sys = System::start(Options::new("kube").kube()).expect("system");
    let s = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply_service(&s).unwrap();

    // The watcher writes the Service's status: its VIP, ipMode Proxy (HAProxy terminates).
    let ip = sys.wait_ips("default/web", T).unwrap()[0];
    assert!(ip.to_string().starts_with("198.18.0."), "{ip}");
    let ingress = sys.kube.as_ref().unwrap().service_ingress("default", "web");
    assert_eq!(ingress, vec![(ip, "Proxy".to_string())], "status ingress");

    // Traffic through the VIP reaches both backends; one LB node holds it.
    let target = SocketAddr::new(ip, 80);
    sys.wait_serving(Proto::Http, target, T).unwrap();
    sys.wait_one_holder(ip, T).unwrap();
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 100, 0.0).unwrap();
    assert_eq!(r.failed, 0, "{r:?}");
    assert_eq!(r.by_backend.len(), 2, "{r:?}");

    // An endpoint-only change (be2 leaves the EndpointSlice) reaches HAProxy without a
    // reload.
    let before = sys
        .settled_haproxy_reloads(Duration::from_millis(1500), T)
        .unwrap();
    let be = sys.backend_ips();
    sys.apply(
        "eps-default-web",
        &endpoint_slice(&s, "web-1", &[(be[0], true)]),
    )
    .unwrap();
    wait::until(T, || {
        let r = traffic::load(&sys.lab, "client", Proto::Http, target, 20, 0.0)?;
        Ok(r.failed == 0 && r.by_backend.keys().collect::<Vec<_>>() == vec!["be1"])
    })
    .expect("be2 still gets requests after leaving the EndpointSlice");
    let after = sys
        .settled_haproxy_reloads(Duration::from_millis(1500), T)
        .unwrap();
    assert_eq!(
        before, after,
        "HAProxy reloaded for an endpoint-only change"
    );

    // Deleting the Service releases its VIP on every LB node.
    sys.delete(&format!("svc-{}-{}", s.namespace, s.name))
        .unwrap();
    wait::until(T, || Ok(sys.holders(ip)?.is_empty())).expect("the VIP was not released");

    // Everything above ran under the manifests' RBAC: the watcher and the actors called
    // the API as their ServiceAccounts, and nothing they did was refused.
    let kube = sys.kube.as_ref().unwrap();
    assert_eq!(kube.refused_requests(), Vec::<String>::new());
    let users: std::collections::BTreeSet<String> =
        kube.api().requests().into_iter().map(|r| r.user).collect();
    assert_eq!(
        users.into_iter().collect::<Vec<_>>(),
        [
            "system:serviceaccount:k8slb-system:actor",
            "system:serviceaccount:k8slb-system:watcher"
        ],
        "only the binaries' ServiceAccounts called the API"
    );
    sys.lab.pass();
}
