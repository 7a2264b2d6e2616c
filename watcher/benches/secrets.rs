//! `cargo bench -p k8slb-watcher --bench secrets`: what the cluster's TLS Secrets cost one
//! leader round when the Ingresses name one of them. The watcher's Secret store (the
//! reflector's cache, as `--ingress` keeps every `kubernetes.io/tls` Secret) holds 200
//! Secrets of 1 MB that nothing names and the one an Ingress names; a round is
//! `reconcile::gather` (the plan's objects) and the Secrets the node certificates are made
//! from (`IngressStores::secrets_for_nodes`, then `certs::node_certs`).
//!
//! Printed first: the peak RSS growth of one round (`VmHWM` after resetting it through
//! `/proc/self/clear_refs`), then criterion's time per round.

use criterion::{criterion_group, Criterion};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8slb_common::config::parse_global_config;
use k8slb_common::objects::Objects;
use k8slb_common::plan::{plan, PlanOptions};
use k8slb_watcher::kube_source::IngressStores;
use k8slb_watcher::reconcile;
use kube::core::DeserializeGuard;
use kube::runtime::{reflector, watcher};
use serde_json::json;
use std::hint::black_box;

const UNREFERENCED: usize = 200;
const SECRET_BYTES: usize = 1 << 20;

fn tls_secret(ns: &str, name: &str, crt: &str, key: &str) -> Secret {
    use base64::Engine;
    let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    serde_json::from_value(json!({
        "metadata": { "namespace": ns, "name": name },
        "type": "kubernetes.io/tls",
        "data": { "tls.crt": b(crt), "tls.key": b(key) },
    }))
    .expect("a Secret")
}

fn stores() -> IngressStores {
    let (secrets, mut w) = reflector::store::<Secret>();
    let junk = "x".repeat(SECRET_BYTES);
    for i in 0..UNREFERENCED {
        let s = tls_secret(
            &format!("ns-{}", i % 20),
            &format!("big-{i:03}"),
            &junk,
            "k",
        );
        w.apply_watcher_event(&watcher::Event::Apply(s));
    }
    let (crt, key) = k8slb_common::testing::self_signed("site.example.com");
    w.apply_watcher_event(&watcher::Event::Apply(tls_secret(
        "default", "site-tls", &crt, &key,
    )));
    let (ingresses, mut wi) = reflector::store::<DeserializeGuard<Ingress>>();
    let ing: Ingress = serde_json::from_value(json!({
        "metadata": { "namespace": "default", "name": "site", "creationTimestamp": "2026-01-01T00:00:00Z" },
        "spec": { "ingressClassName": "k8slb",
                  "tls": [ { "hosts": ["site.example.com"], "secretName": "site-tls" } ],
                  "rules": [ { "host": "site.example.com", "http": { "paths": [ { "path": "/", "pathType": "Prefix",
                      "backend": { "service": { "name": "web", "port": { "number": 80 } } } } ] } } ] },
    }))
    .expect("an Ingress");
    wi.apply_watcher_event(&watcher::Event::Apply(DeserializeGuard(Ok(ing))));
    let (classes, mut wc) = reflector::store::<IngressClass>();
    wc.apply_watcher_event(&watcher::Event::Apply(
        serde_json::from_value(json!({
            "metadata": { "name": "k8slb" },
            "spec": { "controller": "k8slb.io/ingress-controller" },
        }))
        .expect("an IngressClass"),
    ));
    IngressStores::new(ingresses, classes, secrets, "k8slb-system")
}

/// One round: the plan's objects, and the node certificates of `state`.
fn round(st: &IngressStores, state: &k8slb_common::state::State) -> usize {
    let objs: Objects = reconcile::gather(&[st]);
    let certs = k8slb_common::certs::node_certs(state, &st.secrets_for_nodes(state));
    objs.secrets.len() + certs.len()
}

fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn bench(c: &mut Criterion) {
    let st = stores();
    let mut objs = reconcile::gather(&[&st]);
    objs.nodes.push(
        serde_json::from_value(json!({
            "metadata": { "name": "lb1", "labels": { "type": "loadBalancer" } },
            "status": { "conditions": [ { "type": "Ready", "status": "True" } ],
                        "addresses": [ { "type": "InternalIP", "address": "192.168.0.1" } ] },
        }))
        .expect("a Node"),
    );
    let cfg = parse_global_config(
        r#"{ "pools": { "default": { "network": "10.10.0.0/16", "range": "10.10.0.0/16" } } }"#,
    )
    .expect("config");
    let state = plan(&cfg, &PlanOptions::default(), &objs, None);
    assert_eq!(
        k8slb_common::certs::used_by(&state).len(),
        1,
        "the Ingress's certificate is used"
    );
    assert_eq!(
        round(&st, &state),
        2,
        "one Secret planned, one node certificate"
    );

    // Peak RSS of one round above what the stores already hold.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = status_kb("VmRSS:");
    black_box(round(&st, &state));
    let peak = status_kb("VmHWM:");
    println!(
        "secrets/round: {UNREFERENCED} unreferenced Secrets of {} MiB in the store: peak RSS +{} MiB in one round",
        SECRET_BYTES >> 20,
        peak.saturating_sub(before) / 1024
    );

    let mut g = c.benchmark_group("secrets");
    g.sample_size(10);
    g.bench_function("round_200_unreferenced_1MiB", |b| {
        b.iter(|| black_box(round(&st, &state)))
    });
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
