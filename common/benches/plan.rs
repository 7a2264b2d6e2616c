//! `cargo bench -p k8slb-common --bench plan`: the whole plan for 10,000 Services with 10
//! endpoints each over 3 pools (one an IPv6 /64), cold (no previous state) and warm (the
//! steady-state recompute, sticky on the previous state); and the published state's size.
//! And one Gateway that takes 1,000 ListenerSets of 64 HTTPS listeners each (the API's
//! maximum per set; no bound on the number of sets), with client certificate
//! validation (`spec.tls.frontend`) on its port: what a tenant who creates sets costs
//! every round, with the default `limits.listenerSetListenersPerGateway` (256) and with
//! a limit that takes them all. And 5,000 HTTPRoutes on one Gateway of 64 listeners
//! (host ownership weighs each route's hostnames against the listeners it may use).

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

/// A certificate fixture of the common crate's tests, base64.
fn fixture(f: &str) -> String {
    use base64::Engine;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/certs");
    base64::engine::general_purpose::STANDARD.encode(std::fs::read(format!("{dir}/{f}")).unwrap())
}

/// Gateway infra/web (HTTPS 443, client certificates checked against ConfigMap
/// infra/ca) taking every namespace's ListenerSets: `sets` sets of `per_set` HTTPS
/// listeners on port 443, each with its own hostname and its namespace's certificate.
pub fn listener_set_objects(sets: usize, per_set: usize) -> Objects {
    let mut o = objects(0);
    let ca = String::from_utf8(
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/certs/ca.crt"
        ))
        .unwrap(),
    )
    .unwrap();
    let (crt, key) = (fixture("rsa.crt"), fixture("rsa.key"));
    let mut docs = vec![
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass", "metadata": {"name": "k8slb"},
               "spec": {"controllerName": "k8slb.io/gateway-controller"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ca", "namespace": "infra"}, "data": {"ca.crt": ca}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "web", "namespace": "infra", "creationTimestamp": "2026-01-01T00:00:00Z"},
               "spec": {"gatewayClassName": "k8slb",
                        "allowedListeners": {"namespaces": {"from": "All"}},
                        "tls": {"frontend": {"default": {"validation": {"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}]}}}},
                        "listeners": [{"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "*.example.com",
                                       "tls": {"certificateRefs": [{"name": "cert"}]}}]}}),
    ];
    for ns in (0..50)
        .map(|n| format!("ns-{n}"))
        .chain(["infra".to_string()])
    {
        docs.push(json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                         "metadata": {"name": "cert", "namespace": ns}, "data": {"tls.crt": crt, "tls.key": key}}));
    }
    for i in 0..sets {
        let listeners: Vec<_> = (0..per_set)
            .map(|j| {
                json!({"name": format!("l{j}"), "port": 443, "protocol": "HTTPS",
                            "hostname": format!("h{j}.s{i}.example.org"),
                            "tls": {"certificateRefs": [{"name": "cert"}]}})
            })
            .collect();
        docs.push(json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
                         "metadata": {"name": format!("set-{i:04}"), "namespace": format!("ns-{}", i % 50),
                                      "creationTimestamp": format!("2026-01-02T{:02}:{:02}:{:02}Z", i / 3600 % 24, i / 60 % 60, i % 60)},
                         "spec": {"parentRef": {"name": "web", "namespace": "infra"}, "listeners": listeners}}));
    }
    let text: Vec<String> = docs
        .iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect();
    o.add_text(&text.join("\n---\n")).unwrap();
    o.retain_referenced_secrets();
    o
}

/// The plan of 1,000 sets x 64 listeners, once timed per limit (printed, for a quick
/// before/after), then measured.
fn bench_listener_sets(c: &mut Criterion) {
    let objs = listener_set_objects(1000, 64);
    let opts = PlanOptions::default();
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    for (name, limit) in [
        ("1000_sets_x_64_listeners", 256),
        ("1000_sets_x_64_listeners_all_taken", 64_000),
    ] {
        let cfg = parse_global_config(&CONFIG.replacen(
            "{ \"pools\"",
            &format!("{{ \"limits\": {{ \"listenerSetListenersPerGateway\": {limit} }}, \"pools\""),
            1,
        ))
        .unwrap();
        let t = std::time::Instant::now();
        let round = k8slb_common::plan::plan_round(&cfg, &opts, &objs, None);
        let served = round
            .gateway
            .listener_sets
            .values()
            .flat_map(|s| &s.listeners)
            .filter(|l| {
                l.conditions
                    .iter()
                    .any(|c| c.type_.as_str() == "Programmed" && c.status)
            })
            .count();
        println!(
            "{name}: one plan round {:?}, {served} set listeners served",
            t.elapsed()
        );
        g.bench_function(name, |b| {
            b.iter(|| plan(&cfg, &opts, black_box(&objs), None))
        });
    }
    g.finish();
}

/// Gateway infra/shared with `listeners` HTTP listeners on port 80 (`*.t<j>.example.org`,
/// routes from every namespace) and `routes` HTTPRoutes over 50 namespaces, two hostnames
/// each, naming the Gateway without a section: each route's host claims are weighed
/// against every listener (a route claims only what a listener it may attach to serves).
pub fn shared_gateway_objects(listeners: usize, routes: usize) -> Objects {
    let mut o = objects(0);
    let ls: Vec<_> = (0..listeners)
        .map(|j| {
            json!({"name": format!("l{j}"), "port": 80, "protocol": "HTTP",
                   "hostname": format!("*.t{j}.example.org"),
                   "allowedRoutes": {"namespaces": {"from": "All"}}})
        })
        .collect();
    let mut docs = vec![
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass", "metadata": {"name": "k8slb"},
               "spec": {"controllerName": "k8slb.io/gateway-controller"}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "shared", "namespace": "infra", "creationTimestamp": "2026-01-01T00:00:00Z"},
               "spec": {"gatewayClassName": "k8slb", "listeners": ls}}),
    ];
    for i in 0..routes {
        let j = i % listeners;
        docs.push(json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                         "metadata": {"name": format!("r{i}"), "namespace": format!("ns-{}", i % 50),
                                      "creationTimestamp": format!("2026-01-02T{:02}:{:02}:{:02}Z", i / 3600 % 24, i / 60 % 60, i % 60)},
                         "spec": {"parentRefs": [{"name": "shared", "namespace": "infra"}],
                                  "hostnames": [format!("a{i}.t{j}.example.org"), format!("b{i}.t{j}.example.org")],
                                  "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}));
    }
    let text: Vec<String> = docs
        .iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect();
    o.add_text(&text.join("\n---\n")).unwrap();
    o
}

/// The plan of 5,000 HTTPRoutes on a Gateway of 64 listeners, once timed (printed),
/// then measured.
fn bench_shared_gateway(c: &mut Criterion) {
    let objs = shared_gateway_objects(64, 5000);
    let cfg = parse_global_config(CONFIG).unwrap();
    let opts = PlanOptions::default();
    let t = std::time::Instant::now();
    let round = k8slb_common::plan::plan_round(&cfg, &opts, &objs, None);
    println!(
        "5000_httproutes_on_64_listeners: one plan round {:?}, {} virtual hosts",
        t.elapsed(),
        round
            .state
            .http
            .listeners
            .iter()
            .map(|l| l.virtual_hosts.len())
            .sum::<usize>()
    );
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    g.bench_function("5000_httproutes_on_64_listeners", |b| {
        b.iter(|| plan(&cfg, &opts, black_box(&objs), None))
    });
    g.finish();
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

criterion_group!(benches, bench, bench_listener_sets, bench_shared_gateway);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
