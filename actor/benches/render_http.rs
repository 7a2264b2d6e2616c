//! `cargo bench -p k8slb-actor --bench render_http`: the L7 routes part of haproxy.cfg
//! (text + map files) and nginx.conf for one VIP with 5,000 hosts and 20,000 paths over
//! 1,000 backends of 10 endpoints; prints the output sizes.

use criterion::{criterion_group, Criterion};
use k8slb_actor::render::{HttpRenderOptions, HttpRenderer};
use k8slb_common::routes::{
    BackendId, BackendState, HttpRoutes, Listener, ListenerProtocol, PathMatch, RouteAction,
    RouteMatch, RouteRule, VirtualHost,
};
use k8slb_common::state::Endpoint;
use std::hint::black_box;

fn routes() -> HttpRoutes {
    let mut backends = std::collections::BTreeMap::new();
    for s in 0..1000u32 {
        let id: BackendId = format!("ns-{}/svc-{s:04}:80", s % 50).parse().unwrap();
        let endpoints = (0..10u32)
            .map(|e| Endpoint {
                ip: format!("172.{}.{}.{}", 16 + e, s / 256, s % 256)
                    .parse()
                    .unwrap(),
                port: 8080,
                draining: false,
            })
            .collect();
        backends.insert(
            id,
            BackendState {
                endpoints,
                stickiness: None,
                protocol: Default::default(),
                tls: None,
            },
        );
    }
    let ids: Vec<BackendId> = backends.keys().cloned().collect();
    let virtual_hosts = (0..5000usize)
        .map(|i| {
            let rule = |m: PathMatch| RouteRule {
                matches: RouteMatch::on_path(m),
                action: RouteAction::forward(ids[i % ids.len()].clone()),
                filters: Default::default(),
                owner: None,
            };
            let mut v = VirtualHost {
                host: Some(format!("app-{i:05}.example.com").parse().unwrap()),
                any_depth: false,
                rules: vec![
                    rule(PathMatch::Prefix("/".parse().unwrap())),
                    rule(PathMatch::Prefix("/api/v1".parse().unwrap())),
                    rule(PathMatch::Prefix("/static".parse().unwrap())),
                    rule(PathMatch::Exact("/health".parse().unwrap())),
                ],
            };
            v.sort_rules();
            v
        })
        .collect();
    HttpRoutes {
        listeners: vec![Listener {
            ip: "198.18.0.10".parse().unwrap(),
            port: 80,
            protocol: ListenerProtocol::Http,
            tls: None,
            virtual_hosts,
            default_action: None,
            default_owner: None,
        }],
        backends,
        ..HttpRoutes::default()
    }
}

fn bench(c: &mut Criterion) {
    let routes = routes();
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    let nx = r.nginx(&routes, &o).unwrap();
    let files: usize = hp.files.values().map(String::len).sum();
    println!(
        "render_http: 5000 hosts, 20000 paths, 1000 backends: haproxy {} KiB + {} KiB of map files, nginx {} KiB",
        hp.text.len() / 1024,
        files / 1024,
        nx.text.len() / 1024
    );
    let mut g = c.benchmark_group("render_http");
    g.sample_size(10);
    g.bench_function("haproxy 5000 hosts 20000 paths", |b| {
        b.iter(|| black_box(r.haproxy(&routes, &o, &hp.backends).unwrap()))
    });
    g.bench_function("nginx 5000 hosts 20000 paths", |b| {
        b.iter(|| black_box(r.nginx(&routes, &o).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
