//! The quarantine's cost: one poison among `n` Services (default 1,000; `K8SLB_BENCH_N`),
//! found by bisection through the real `haproxy -c`: the number of checks and the wall
//! time of the apply that finds it, next to one apply of the same state without the
//! poison (one check). HAProxy must be installed; no root needed (`haproxy -c` binds
//! nothing). Run: `cargo bench -p k8slb-actor --bench quarantine`.

#[path = "../tests/support/poison.rs"]
mod poison;

use k8slb_actor::admin::Metrics;
use k8slb_actor::apply::{Applier, NodeContext};
use k8slb_actor::daemons::{DaemonError, DaemonKind, Paths};
use k8slb_actor::node_renderer::RealRenderer;
use k8slb_actor::render::Renderer;
use k8slb_actor::view::ViewOptions;
use k8slb_common::state::{Provider, State};
use poison::{any_keepalived, tenants, Checked, PoisonRenderer};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn applier(work: &Path, checks: Arc<Mutex<usize>>) -> Applier<PoisonRenderer> {
    let paths = Paths::new(work);
    let mut opts = ViewOptions::new(Provider::Haproxy);
    opts.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    opts.pid_file = paths.haproxy_pid();
    opts.runtime_socket = paths.haproxy_runtime_socket();
    opts.routes_dir = work.join("routes");
    let daemon = Checked {
        kind: DaemonKind::Haproxy,
        cfg: paths.haproxy_cfg(),
        check: Box::new(|f: &Path| {
            let out = Command::new("haproxy")
                .arg("-c")
                .arg("-f")
                .arg(f)
                .output()
                .expect("haproxy is installed");
            if out.status.success() {
                Ok(())
            } else {
                Err(DaemonError::Check {
                    daemon: DaemonKind::Haproxy,
                    output: String::from_utf8_lossy(&out.stderr).into_owned(),
                })
            }
        }),
        up: false,
        serving: Default::default(),
        checks,
    };
    let renderer = PoisonRenderer {
        real: RealRenderer::new(Renderer::embedded().unwrap(), "lb-1".parse().unwrap(), opts),
        proxy: Provider::Haproxy,
    };
    let mut a = Applier::new(
        renderer,
        Box::new(any_keepalived(work.join("keepalived.conf"))),
        Some(Box::new(daemon)),
        Arc::new(Metrics::new()),
    );
    a.min_reload_interval = Duration::ZERO;
    a
}

/// Apply `state` on a fresh node, then `next` (another tenant's new Service): the wall
/// time and checks of each, and how many objects are left out.
fn timed(state: &State, next: &State) -> [(Duration, usize, usize); 2] {
    let work = tempfile::tempdir().unwrap();
    let checks = Arc::new(Mutex::new(0));
    let mut a = applier(work.path(), checks.clone());
    let mut out = [(Duration::ZERO, 0, 0); 2];
    for (i, s) in [state, next].into_iter().enumerate() {
        *checks.lock().unwrap() = 0;
        let t = Instant::now();
        a.apply(s, &NodeContext::default(), Instant::now())
            .expect("applied");
        out[i] = (t.elapsed(), *checks.lock().unwrap(), a.quarantined().len());
    }
    out
}

fn main() {
    let n: usize = std::env::var("K8SLB_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let poisoned = tenants(n);
    let mut clean = poisoned.clone();
    clean.services.remove(&"tp/poison".parse().unwrap());
    let next = |s: &State| {
        let mut s = s.clone();
        poison::add_service(&mut s, "tnew/svc", 30000, "10.9.0.1");
        s
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for round in 1..=3 {
        let [(t_clean, c_clean, _), (t_clean2, c_clean2, _)] = timed(&clean, &next(&clean));
        let [(t_poison, c_poison, q), (t_next, c_next, q2)] = timed(&poisoned, &next(&poisoned));
        println!(
            "round {round}: {} Services ({} owners): without poison {c_clean} check(s) {:.0} ms, \
             then a new Service {c_clean2} check(s) {:.0} ms; with one poison {c_poison} checks \
             {:.0} ms ({q} quarantined, {:.0} ms per check), then a new Service {c_next} \
             check(s) {:.0} ms ({q2} quarantined)",
            poisoned.services.len(),
            k8slb_common::owners::owners(&poisoned).len(),
            ms(t_clean),
            ms(t_clean2),
            ms(t_poison),
            ms(t_poison) / c_poison as f64,
            ms(t_next),
        );
    }
}
