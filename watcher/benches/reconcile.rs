//! `cargo bench -p k8slb-watcher --bench reconcile`: one leader round's decision for 10,000
//! Services (each with its status already showing its IP), against the plan alone: what the
//! reconcile adds to the plan (config memory, the change check, Events, the status
//! decision). `warm` is the steady-state round (nothing changed: no effects).

use criterion::{criterion_group, Criterion};
use k8s_openapi::api::core::v1::{Node, Service};
use k8slb_common::config::parse_global_config;
use k8slb_common::objects::Objects;
use k8slb_common::plan::{plan, PlanOptions};
use k8slb_watcher::events::Lookup;
use k8slb_watcher::reconcile::{
    reconcile, ConfigRead, Previous, Published, Role, Settings, Snapshot, Step,
};
use serde_json::json;
use std::hint::black_box;

const N: usize = 10_000;
const CONFIG: &str =
    r#"{ "pools": { "default": { "network": "10.10.0.0/16", "range": "10.10.0.0/16" } } }"#;

struct Uids;

impl Lookup for Uids {
    fn service_uid(&self, _: &str, name: &str) -> Option<String> {
        Some(format!("uid-{name}"))
    }
    fn node_uid(&self, name: &str) -> Option<String> {
        Some(format!("uid-{name}"))
    }
    fn ingress_uid(&self, _: &str, name: &str) -> Option<String> {
        Some(format!("uid-{name}"))
    }
}

fn objects(ips: Option<&k8slb_common::state::State>) -> Objects {
    let mut o = Objects::default();
    for i in 0..N {
        let (ns, name) = (format!("ns-{}", i % 50), format!("svc-{i:05}"));
        let ingress: Vec<_> = ips
            .and_then(|s| s.services.get(&format!("{ns}/{name}").parse().ok()?))
            .map(|ss| {
                ss.ips
                    .iter()
                    .map(|ip| json!({"ip": ip.to_string(), "ipMode": "Proxy"}))
                    .collect()
            })
            .unwrap_or_default();
        o.services.push(
            serde_json::from_value::<Service>(json!({
                "metadata": { "name": name, "namespace": ns, "uid": format!("uid-{name}"), "resourceVersion": "7",
                              "creationTimestamp": format!("2026-01-01T{:02}:{:02}:{:02}Z", i / 3600 % 24, i / 60 % 60, i % 60) },
                "spec": { "type": "LoadBalancer", "ports": [ { "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" } ] },
                "status": { "loadBalancer": { "ingress": ingress } },
            }))
            .expect("a Service"),
        );
    }
    for n in 1..=3 {
        o.nodes.push(
            serde_json::from_value::<Node>(json!({
                "metadata": { "name": format!("lb{n}"), "uid": format!("uid-lb{n}"), "labels": { "type": "loadBalancer" } },
                "status": { "conditions": [ { "type": "Ready", "status": "True" } ],
                            "addresses": [ { "type": "InternalIP", "address": format!("192.168.0.{n}") } ] },
            }))
            .expect("a Node"),
        );
    }
    o
}

fn bench(c: &mut Criterion) {
    let cfg = parse_global_config(CONFIG).expect("config");
    let settings = Settings {
        plan: PlanOptions::default(),
        namespace: "k8slb-system".into(),
        status_hostname: false,
    };
    let opts = PlanOptions::default();
    let first = plan(&cfg, &opts, &objects(None), None);
    let objs = objects(Some(&first));
    let snapshot = || Snapshot {
        settings: &settings,
        role: Role::Leader,
        config: ConfigRead::Valid(Box::new(cfg.clone())),
        config_uid: Some("uid-global".into()),
        objects: objs.clone(),
        published: Published::None,
        uids: &Uids,
        now: None,
        reports: None,
        certs: Default::default(),
    };
    let warm = Previous {
        state: Some(first.clone()),
        ..Previous::default()
    };
    // The round is what it should be: nothing to do.
    match reconcile(&snapshot(), &warm).step {
        Step::Plan(p) => assert!(!p.changed && p.patches.is_empty() && p.events.is_empty()),
        other => panic!("{other:?}"),
    }
    let mut g = c.benchmark_group("watcher_round_10k");
    g.sample_size(10);
    g.bench_function("plan_only_warm", |b| {
        b.iter(|| black_box(plan(&cfg, &opts, &objs, Some(&first))))
    });
    g.bench_function("reconcile_warm", |b| {
        b.iter_batched(
            snapshot,
            |s| black_box(reconcile(&s, &warm)),
            criterion::BatchSize::LargeInput,
        )
    });
    g.bench_function("reconcile_first", |b| {
        b.iter_batched(
            snapshot,
            |s| black_box(reconcile(&s, &Previous::default())),
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
