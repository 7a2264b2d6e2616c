//! view + render for 10,000 Services (2 ports, 10 endpoints each, 3 pools incl. IPv6)
//! for one node (goal: < 100 ms), and `runtime_diff` for a one-endpoint change.
//!
//! `cargo bench -p k8slb-actor --bench render`

use criterion::{criterion_group, criterion_main, Criterion};
use k8slb_actor::render::{runtime_diff, Renderer};
use k8slb_actor::view::{view, view_with_previous, ViewOptions};
use k8slb_common::state::{Provider, State};
use serde_json::{json, Value};
use std::hint::black_box;

/// The allocator of the `k8slb-actor` binary (actor/src/main.rs), so the numbers are its.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SERVICES: usize = 10_000;

fn big_state() -> State {
    let pools = json!({
        "default": {"network": "10.100.0.0/16", "prefixLen": 16, "family": "v4", "first": "10.100.0.0"},
        "dmz": {"network": "10.200.0.0/16", "prefixLen": 16, "family": "v4", "first": "10.200.0.0", "interface": "eth1"},
        "ipv6": {"network": "fd00:10::/64", "prefixLen": 64, "family": "v6", "first": "fd00:10::"},
    });
    let mut vips_by_inst: [Vec<String>; 3] = Default::default();
    let mut vips = serde_json::Map::new();
    let mut services = serde_json::Map::new();
    for i in 0..SERVICES {
        let (pool, ip, inst) = match i % 3 {
            0 => ("default", format!("10.100.{}.{}", i / 250, i % 250 + 1), 0),
            1 => ("dmz", format!("10.200.{}.{}", i / 250, i % 250 + 1), 1),
            _ => ("ipv6", format!("fd00:10::{:x}", i + 1), 2),
        };
        let key = format!("ns{}/svc{}", i % 100, i);
        vips_by_inst[inst].push(ip.clone());
        vips.insert(
            ip.clone(),
            json!({"pool": pool, "vrid": 11 + inst, "owner": "lb-1", "services": [key]}),
        );
        let ports: Vec<Value> = [(80, "http"), (443, "http")]
            .iter()
            .map(|&(port, mode)| {
                let eps: Vec<Value> = (0..10)
                    .map(|e| json!({"ip": format!("10.{}.{}.{}", 1 + i % 50, (i / 50) % 250, e + 1), "port": 8080}))
                    .collect();
                json!({"protocol": "TCP", "port": port, "mode": mode, "tls": port == 443,
                       "cert": pool, "redirect": port == 80, "backendTls": false, "check": true,
                       "stickiness": "none", "stickinessTimeoutS": 10800, "sourceRanges": [],
                       "endpoints": eps})
            })
            .collect();
        services.insert(
            key,
            json!({"ips": [ip], "pool": pool, "ipMode": "Proxy", "ports": ports}),
        );
    }
    let instances: Vec<Value> = ["default", "dmz", "ipv6"]
        .iter()
        .enumerate()
        .map(|(k, pool)| {
            let mut v = vips_by_inst[k].clone();
            v.sort_by_key(|s| s.parse::<std::net::IpAddr>().unwrap());
            json!({"vrid": 11 + k, "name": format!("k8slb_{pool}_{}", 11 + k), "pool": pool,
                   "family": if k == 2 { "v6" } else { "v4" },
                   "members": [{"node": "lb-1", "priority": 150}, {"node": "lb-2", "priority": 100}],
                   "vips": v})
        })
        .collect();
    let state = json!({
        "version": 1,
        "config": {
            "pools": pools,
            "keepalived": {"advertIntMs": 100, "unicast": false, "preempt": false,
                           "emailServerTimeoutS": 30, "garpRepeat": 5, "garpMasterDelayS": 5},
            "haproxy": {"global": ["maxconn 100000"], "defaults": ["balance leastconn"],
                        "tcpfront": [], "httpfront": [], "tcpback": [], "httpback": []},
            "nginx": {"global": [], "http": [], "proxy": ["proxy_http_version 1.1;"], "upstream": [], "stream": []},
            "certPath": "/etc/certs",
        },
        "nodes": {"lb-1": {"addresses": ["10.0.0.11"]}, "lb-2": {"addresses": ["10.0.0.12"]}},
        "instances": instances,
        "vips": vips,
        "services": services,
        "problems": [],
    });
    State::from_json(&state.to_string()).unwrap()
}

fn bench(c: &mut Criterion) {
    let state = big_state();
    let node = "lb-1".parse().unwrap();
    let renderer = Renderer::embedded().unwrap();
    let t = std::time::Instant::now();
    let json = state.to_json();
    eprintln!(
        "state.to_json (the actor's last-state.json): {} bytes in {:?}",
        json.len(),
        t.elapsed()
    );
    let mut g = c.benchmark_group("render_10k_services");
    g.sample_size(10);
    for proxy in [Provider::Haproxy, Provider::Nginx] {
        let mut o = ViewOptions::new(proxy);
        o.interfaces
            .insert("default".parse().unwrap(), "eth0".parse().unwrap());
        o.interfaces
            .insert("ipv6".parse().unwrap(), "eth0".parse().unwrap());
        let v = view(&state, &node, &o).unwrap();
        let r = renderer.render(&v).unwrap();
        eprintln!(
            "{proxy:?}: keepalived.conf {} bytes, proxy config {} bytes",
            r.keepalived.len(),
            r.proxy.as_ref().map_or(0, |p| p.len())
        );
        // Best of 7 (robust on a busy machine; criterion's numbers follow).
        let best = |f: &dyn Fn()| {
            (0..7)
                .map(|_| {
                    let t = std::time::Instant::now();
                    f();
                    t.elapsed()
                })
                .min()
                .unwrap()
        };
        let view_only = best(&|| {
            black_box(view(&state, &node, &o).unwrap());
        });
        let render_only = best(&|| {
            black_box(renderer.render(&v).unwrap());
        });
        let both = best(&|| {
            black_box(renderer.render(&view(&state, &node, &o).unwrap()).unwrap());
        });
        eprintln!("{proxy:?}: best of 7: view {view_only:?}, render {render_only:?}, view+render {both:?}");
        let name = format!("{proxy:?}").to_lowercase();
        g.bench_function(format!("{name}/view"), |b| {
            b.iter(|| view(black_box(&state), &node, &o).unwrap())
        });
        g.bench_function(format!("{name}/render"), |b| {
            b.iter(|| renderer.render(black_box(&v)).unwrap())
        });
        g.bench_function(format!("{name}/view+render"), |b| {
            b.iter(|| {
                renderer
                    .render(&view(black_box(&state), &node, &o).unwrap())
                    .unwrap()
            })
        });
    }
    g.finish();

    // runtime_diff for a one-endpoint change (and the view that precedes it).
    let mut o = ViewOptions::new(Provider::Haproxy);
    o.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    o.interfaces
        .insert("ipv6".parse().unwrap(), "eth0".parse().unwrap());
    let v1 = view(&state, &node, &o).unwrap();
    let mut s2 = state.clone();
    let svc = s2.services.values_mut().nth(SERVICES / 2).unwrap();
    svc.ports[0].endpoints[3].ip = "10.250.0.1".parse().unwrap();
    let v2 = view_with_previous(&s2, &node, &o, Some(&v1)).unwrap();
    let cmds = runtime_diff(&v1, &v2).unwrap();
    eprintln!(
        "one-endpoint change: {:?}",
        cmds.iter().map(|c| c.to_cli()).collect::<Vec<_>>()
    );
    let mut g = c.benchmark_group("runtime_diff_10k_services");
    g.sample_size(20);
    g.bench_function("one_endpoint", |b| {
        b.iter(|| runtime_diff(black_box(&v1), black_box(&v2)).unwrap())
    });
    g.bench_function("view_with_previous", |b| {
        b.iter(|| view_with_previous(black_box(&s2), &node, &o, Some(&v1)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
