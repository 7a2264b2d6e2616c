//! `cargo bench -p k8slb-common --bench plan`: the whole plan for 10,000 Services with 10
//! endpoints each over 3 pools (one an IPv6 /64), cold (no previous state) and warm (the
//! steady-state recompute, sticky on the previous state); and the published state's size.

use criterion::{criterion_group, Criterion};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8slb_common::config::parse_global_config;
use k8slb_common::objects::Objects;
use k8slb_common::plan::{plan, PlanOptions};
use k8slb_common::publish::{encode, MAX_OBJECT_BYTES};
use serde_json::json;
use std::hint::black_box;

const CONFIG: &str = r#"{ "pools": {
    "default": { "network": "10.10.0.0/16", "range": "10.10.0.0/16" },
    "external": { "network": "100.64.0.0/20", "range": "100.64.0.0/20" },
    "v6": { "network": "fd00:18::/64", "range": "fd00:18::/64" } } }"#;

pub fn objects(n: usize) -> Objects {
    let mut o = Objects::default();
    for i in 0..n {
        let pool = match i % 10 {
            0..=5 => "default",
            6 => "external",
            _ => "v6",
        };
        let name = format!("svc-{i:05}");
        let mut svc = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": name, "namespace": format!("ns-{}", i % 50), "uid": format!("00000000-0000-0000-0000-{i:012}"),
                          "creationTimestamp": format!("2026-01-{:02}T{:02}:{:02}:{:02}Z", 1 + i / 86400, i / 3600 % 24, i / 60 % 60, i % 60),
                          "annotations": { "loadbalancer/pool": pool } },
            "spec": { "type": "LoadBalancer", "ports": [ { "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" } ] }
        });
        // Some static addresses (each its own: sharing one needs both tenants' consent).
        if i % 7 == 6 && pool == "external" && i < 2000 {
            svc["spec"]["loadBalancerIP"] = json!(format!("100.64.1.{}", i / 70));
            svc["spec"]["ports"][0]["port"] = json!(10000 + i);
        }
        o.services
            .push(serde_json::from_value::<Service>(svc).unwrap());
        let eps: Vec<_> = (0..10)
            .map(|e| json!({ "addresses": [format!("172.{}.{}.{}", 16 + e, i / 256 % 256, i % 256)], "conditions": { "ready": true } }))
            .collect();
        o.slices.push(
            serde_json::from_value::<EndpointSlice>(json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": { "name": format!("{name}-x"), "namespace": format!("ns-{}", i % 50),
                              "labels": { "kubernetes.io/service-name": name } },
                "addressType": "IPv4", "ports": [ { "name": "http", "port": 8080, "protocol": "TCP" } ], "endpoints": eps
            }))
            .unwrap(),
        );
    }
    for n in 1..=3 {
        o.nodes.push(
            serde_json::from_value::<Node>(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": { "name": format!("lb{n}"), "labels": { "type": "loadBalancer" } },
                "status": { "conditions": [ { "type": "Ready", "status": "True" } ],
                            "addresses": [ { "type": "InternalIP", "address": format!("198.18.0.{n}") } ] }
            }))
            .unwrap(),
        );
    }
    o
}

fn bench(c: &mut Criterion) {
    let cfg = parse_global_config(CONFIG).unwrap();
    let opts = PlanOptions::default();
    let objs = objects(10_000);
    let cold = plan(&cfg, &opts, &objs, None);
    assert_eq!(
        cold.services.values().filter(|s| !s.ips.is_empty()).count(),
        10_000
    );
    let compact = serde_json::to_vec(&cold).unwrap().len();
    let pretty = cold.to_json().len();
    let parts = encode(&cold, MAX_OBJECT_BYTES);
    let biggest = parts.iter().map(|p| p.gzip.len()).max().unwrap();
    let total: usize = parts.iter().map(|p| p.gzip.len()).sum();
    println!(
        "state for 10000 services x 10 endpoints: pretty JSON {pretty} B, compact JSON {compact} B, published as {} object(s), gzip total {total} B, largest object {biggest} B (limit {MAX_OBJECT_BYTES} B)",
        parts.len()
    );
    let mut g = c.benchmark_group("plan");
    g.sample_size(20);
    g.bench_function("10k_services_cold", |b| {
        b.iter(|| plan(&cfg, &opts, black_box(&objs), None))
    });
    g.bench_function("10k_services_warm", |b| {
        b.iter(|| plan(&cfg, &opts, black_box(&objs), Some(&cold)))
    });
    g.bench_function("encode_state_10k", |b| {
        b.iter(|| encode(black_box(&cold), MAX_OBJECT_BYTES))
    });
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
