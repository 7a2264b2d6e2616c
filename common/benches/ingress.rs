//! `cargo bench -p k8slb-common --bench ingress`: Ingresses → routes of one VIP for
//! 5,000 Ingresses with 20,000 host/path rules over 1,000 Services (10 endpoints each),
//! a fifth of them with TLS; the size of the route model (JSON, gzip); and the whole
//! plan of that cluster (ingress VIP, routes, Secrets inspected) with the published
//! state's largest object.

use criterion::{criterion_group, Criterion};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8slb_common::ingress::{routes_for_vip, select, IngressInput, SecretMeta, VipOptions};
use serde_json::json;
use std::hint::black_box;
use std::io::Write;

struct World {
    ingresses: Vec<Ingress>,
    classes: Vec<IngressClass>,
    services: Vec<Service>,
    slices: Vec<EndpointSlice>,
    secrets: Vec<SecretMeta>,
}

fn world(n: usize, services: usize) -> World {
    let mut w = World {
        ingresses: Vec::new(),
        classes: vec![serde_json::from_value(
            json!({"metadata": {"name": "k8slb"}, "spec": {"controller": "k8slb.io/ingress-controller"}}),
        )
        .unwrap()],
        services: Vec::new(),
        slices: Vec::new(),
        secrets: Vec::new(),
    };
    for s in 0..services {
        let (ns, name) = (format!("ns-{}", s % 50), format!("svc-{s:04}"));
        w.services.push(
            serde_json::from_value(json!({
                "metadata": {"namespace": ns, "name": name},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
            }))
            .unwrap(),
        );
        let eps: Vec<_> = (0..10)
            .map(|e| json!({"addresses": [format!("172.{}.{}.{}", 16 + e, s / 256, s % 256)], "conditions": {"ready": true}}))
            .collect();
        w.slices.push(
            serde_json::from_value(json!({
                "metadata": {"namespace": ns, "name": format!("{name}-x"),
                             "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": eps,
            }))
            .unwrap(),
        );
    }
    for i in 0..n {
        let s = i % services;
        let ns = format!("ns-{}", s % 50);
        let be = |path: &str, ty: &str| {
            json!({"path": path, "pathType": ty,
                   "backend": {"service": {"name": format!("svc-{s:04}"), "port": {"number": 80}}}})
        };
        let host = format!("app-{i:05}.example.com");
        let mut spec = json!({
            "ingressClassName": "k8slb",
            "rules": [{"host": host, "http": {"paths": [
                be("/", "Prefix"), be("/api/v1", "Prefix"), be("/static/", "Prefix"), be("/health", "Exact"),
            ]}}],
        });
        if i % 5 == 0 {
            let secret = format!("tls-{i:05}");
            spec["tls"] = json!([{"hosts": [host], "secretName": secret}]);
            w.secrets.push(SecretMeta {
                namespace: ns.clone(),
                name: secret,
                type_: "kubernetes.io/tls".into(),
                valid: true,
                version: String::new(),
                refusal: String::new(),
                dns_names: vec!["*.example.com".into()],
            });
        }
        w.ingresses.push(
            serde_json::from_value(json!({
                "metadata": {"namespace": ns, "name": format!("ing-{i:05}"),
                             "creationTimestamp": format!("2026-01-01T{:02}:{:02}:{:02}Z", i / 3600, i / 60 % 60, i % 60)},
                "spec": spec,
            }))
            .unwrap(),
        );
    }
    w
}

fn bench(c: &mut Criterion) {
    let w = world(5000, 1000);
    let input = IngressInput {
        ingresses: &w.ingresses,
        classes: &w.classes,
        services: &w.services,
        slices: &w.slices,
        secrets: &w.secrets,
        reserved_ports: None,
        host_owners: None,
    };
    let opts = VipOptions {
        ip: "198.18.0.10".parse().unwrap(),
        pool: "default".parse().unwrap(),
        pool_certificate: true,
    };
    let run = || {
        let sel = select(&w.ingresses, &w.classes);
        let list = sel.by_pool.values().next().unwrap();
        routes_for_vip(list, &input, &opts)
    };
    let out = run();
    assert!(
        out.problems.is_empty(),
        "{:?}",
        &out.problems[..3.min(out.problems.len())]
    );
    let rules: usize = out
        .routes
        .listeners
        .iter()
        .flat_map(|l| &l.virtual_hosts)
        .map(|v| v.rules.len())
        .sum();
    let text = serde_json::to_string(&out.routes).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    println!(
        "ingress routes: 5000 Ingresses, {rules} rules on {} listeners, {} backends: model {} KiB JSON, {} KiB gzip",
        out.routes.listeners.len(),
        out.routes.backends.len(),
        text.len() / 1024,
        gz.len() / 1024
    );
    let mut g = c.benchmark_group("ingress");
    g.sample_size(10);
    g.bench_function("select+routes_for_vip 5000 ingresses 20000 paths", |b| {
        b.iter(|| black_box(run()))
    });
    g.finish();
}

/// A real certificate and key (the plan inspects every Secret).
fn cert_pem() -> (String, String) {
    let d = tempfile::tempdir().unwrap();
    let (crt, key) = (d.path().join("c.pem"), d.path().join("k.pem"));
    let ok = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=bench.example"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .expect("the bench needs the openssl command (apt install openssl)")
        .status
        .success();
    assert!(ok, "openssl req failed");
    (
        std::fs::read_to_string(crt).unwrap(),
        std::fs::read_to_string(key).unwrap(),
    )
}

fn bench_plan(c: &mut Criterion) {
    use base64::Engine;
    use k8slb_common::config::parse_global_config;
    use k8slb_common::plan::{plan, PlanOptions};
    use k8slb_common::publish::{encode, MAX_OBJECT_BYTES};
    let w = world(5000, 1000);
    let (crt, key) = cert_pem();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut objs = k8slb_common::objects::Objects {
        ingresses: w.ingresses.clone(),
        ingress_classes: w.classes.clone(),
        services: w.services.clone(),
        slices: w.slices.clone(),
        ..Default::default()
    };
    for m in &w.secrets {
        objs.secrets.push(
            serde_json::from_value(json!({
                "metadata": {"namespace": m.namespace, "name": m.name},
                "type": "kubernetes.io/tls",
                "data": {"tls.crt": b64(&crt), "tls.key": b64(&key)},
            }))
            .unwrap(),
        );
    }
    for n in 1..=3 {
        objs.nodes.push(
            serde_json::from_value(json!({
                "metadata": { "name": format!("lb{n}"), "labels": { "type": "loadBalancer" } },
                "status": { "conditions": [ { "type": "Ready", "status": "True" } ],
                            "addresses": [ { "type": "InternalIP", "address": format!("198.18.0.{n}") } ] }
            }))
            .unwrap(),
        );
    }
    let cfg = parse_global_config(
        r#"{ "pools": { "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.200" } } }"#,
    )
    .unwrap();
    let opts = PlanOptions::default();
    let cold = plan(&cfg, &opts, &objs, None);
    assert_eq!(cold.ingresses.len(), 5000);
    assert!(
        cold.problems.is_empty(),
        "{:?}",
        &cold.problems[..3.min(cold.problems.len())]
    );
    let parts = encode(&cold, MAX_OBJECT_BYTES);
    let biggest = parts.iter().map(|p| p.gzip.len()).max().unwrap();
    println!(
        "plan of 5000 Ingresses (20000 paths, 1000 TLS Secrets inspected): pretty JSON {} KiB, published as {} object(s), largest {} KiB (limit {} KiB)",
        cold.to_json().len() / 1024,
        parts.len(),
        biggest / 1024,
        MAX_OBJECT_BYTES / 1024
    );
    let mut g = c.benchmark_group("plan_ingress");
    g.sample_size(10);
    g.bench_function("plan 5000 ingresses cold", |b| {
        b.iter(|| plan(&cfg, &opts, black_box(&objs), None))
    });
    g.bench_function("plan 5000 ingresses warm", |b| {
        b.iter(|| plan(&cfg, &opts, black_box(&objs), Some(&cold)))
    });
    g.bench_function("encode state 5000 ingresses", |b| {
        b.iter(|| encode(black_box(&cold), MAX_OBJECT_BYTES))
    });
    g.finish();
}

criterion_group!(benches, bench, bench_plan);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
