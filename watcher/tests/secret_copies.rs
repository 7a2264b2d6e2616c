//! The watcher's Secret store keeps every `kubernetes.io/tls` Secret of the cluster (the
//! RBAC grant cannot be narrower); a round copies out of it only the Secrets that an
//! Ingress or a Gateway listener names, and the node certificates only those the state
//! uses. `cargo bench -p k8slb-watcher --bench secrets` measures what that saves.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8slb_common::objects::Objects;
use k8slb_watcher::kube_source::IngressStores;
use k8slb_watcher::reconcile::{gather, Source};
use kube::core::DeserializeGuard;
use kube::runtime::{reflector, watcher};
use serde_json::json;

fn secret(ns: &str, name: &str, labels: serde_json::Value) -> Secret {
    serde_json::from_value(json!({
        "metadata": { "namespace": ns, "name": name, "labels": labels },
        "type": "kubernetes.io/tls",
        "data": { "tls.crt": "eA==", "tls.key": "eA==" },
    }))
    .unwrap()
}

/// The stores: Secrets `default/site-tls` (an Ingress names it), `certs/gw-tls` (a
/// Gateway names it), `default/unnamed` (nobody), and this watcher's own node certificate
/// Secret `k8slb-system/k8slb-cert-x` (which an Ingress there names: still not a user's).
fn stores() -> IngressStores {
    let (secrets, mut w) = reflector::store::<Secret>();
    for s in [
        secret("default", "site-tls", json!({})),
        secret("certs", "gw-tls", json!({})),
        secret("default", "unnamed", json!({})),
        secret("shop", "shop-tls", json!({})),
        secret("certs", "shop-granted", json!({})),
        secret(
            "k8slb-system",
            "k8slb-cert-x",
            json!({ "k8slb.io/node-certificate": "true" }),
        ),
    ] {
        w.apply_watcher_event(&watcher::Event::Apply(s));
    }
    let (ingresses, mut wi) = reflector::store::<DeserializeGuard<Ingress>>();
    for (ns, name, secret) in [
        ("default", "site", "site-tls"),
        ("k8slb-system", "sneaky", "k8slb-cert-x"),
    ] {
        let ing: Ingress = serde_json::from_value(json!({
            "metadata": { "namespace": ns, "name": name },
            "spec": { "ingressClassName": "k8slb",
                      "tls": [ { "hosts": ["site.example.com"], "secretName": secret } ] },
        }))
        .unwrap();
        wi.apply_watcher_event(&watcher::Event::Apply(DeserializeGuard(Ok(ing))));
    }
    let (classes, _wc) = reflector::store::<IngressClass>();
    IngressStores::new(ingresses, classes, secrets, "k8slb-system")
}

/// A source of one Gateway whose listener names `certs/gw-tls`.
struct Gateways;

impl Source for Gateways {
    fn add_to(&self, objects: &mut Objects) {
        objects
            .add_text(
                r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: https, port: 443, protocol: HTTPS, tls: { certificateRefs: [{ name: gw-tls, namespace: certs }] } }
"#,
            )
            .unwrap();
    }
}

/// A source of one ListenerSet of namespace `shop` whose listeners name `shop-tls` (of
/// its own namespace) and `certs/shop-granted`.
struct ListenerSets;

impl Source for ListenerSets {
    fn add_to(&self, objects: &mut Objects) {
        objects
            .add_text(
                r#"
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: { name: shop, namespace: shop }
spec:
  parentRef: { name: gw, namespace: infra }
  listeners:
  - { name: own, port: 443, protocol: HTTPS, hostname: shop.example.com, tls: { certificateRefs: [{ name: shop-tls }] } }
  - { name: granted, port: 443, protocol: HTTPS, hostname: pay.example.com, tls: { certificateRefs: [{ name: shop-granted, namespace: certs }] } }
"#,
            )
            .unwrap();
    }
}

fn names(secrets: &[Secret]) -> Vec<String> {
    secrets
        .iter()
        .map(|s| {
            format!(
                "{}/{}",
                s.metadata.namespace.as_deref().unwrap_or_default(),
                s.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn a_round_copies_only_the_secrets_that_an_ingress_or_a_gateway_names() {
    let st = stores();
    // Adding the objects copies no Secret at all ...
    let mut o = Objects::default();
    st.add_to(&mut o);
    Gateways.add_to(&mut o);
    assert!(o.secrets.is_empty(), "{:?}", names(&o.secrets));
    // ... the named ones are copied once every source is in (a Gateway of another
    // source names one of the store's), never the node certificate Secret.
    let named = o.referenced_secrets();
    st.add_named_secrets(&mut o, &named);
    assert_eq!(names(&o.secrets), ["certs/gw-tls", "default/site-tls"]);
    let all = gather(&[&st, &Gateways]);
    assert_eq!(names(&all.secrets), ["certs/gw-tls", "default/site-tls"]);
    // Without the Gateway, its Secret is not copied.
    assert_eq!(names(&gather(&[&st]).secrets), ["default/site-tls"]);
}

/// A ListenerSet's listeners name Secrets of their own (the set's namespace by
/// default): a round copies them as a Gateway's, or the set's listeners would say the
/// Secret does not exist.
#[test]
fn a_round_copies_the_secrets_a_listener_set_names() {
    let st = stores();
    let all = gather(&[&st, &Gateways, &ListenerSets]);
    assert_eq!(
        names(&all.secrets),
        [
            "certs/gw-tls",
            "certs/shop-granted",
            "default/site-tls",
            "shop/shop-tls"
        ]
    );
}

#[test]
fn the_node_certificates_are_made_only_from_the_secrets_the_state_uses() {
    let st = stores();
    let cfg = k8slb_common::config::parse_global_config(
        r#"{ "pools": { "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" } } }"#,
    )
    .unwrap();
    let opts = k8slb_common::plan::PlanOptions::default();
    let mut state = k8slb_common::plan::plan(&cfg, &opts, &Objects::default(), None);
    assert!(st.secrets_for_nodes(&state).is_empty());
    use k8slb_common::routes::{CertFile, Certificate, Listener, ListenerProtocol, ListenerTls};
    let cert = |ns: &str, name: &str| Certificate {
        file: CertFile::Secret {
            namespace: ns.parse().unwrap(),
            name: name.parse().unwrap(),
            version: "0".into(),
        },
        hosts: vec![],
        owner: None,
    };
    state.http.listeners.push(Listener {
        ip: "198.18.0.100".parse().unwrap(),
        port: 443,
        protocol: ListenerProtocol::Https,
        tls: Some(ListenerTls {
            certificates: vec![
                cert("default", "site-tls"),
                cert("k8slb-system", "k8slb-cert-x"),
                cert("default", "gone"),
            ],
            default_certificate: None,
            client_ca: None,
            client_validation: Default::default(),
            zones: None,
        }),
        virtual_hosts: vec![],
        default_action: None,
        default_owner: None,
    });
    assert_eq!(names(&st.secrets_for_nodes(&state)), ["default/site-tls"]);
}
