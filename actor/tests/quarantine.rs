//! The quarantine (issue 20 item 2): a poison the plan does not know about (a Service
//! whose rendered block the proxy refuses, planted by a test renderer) is found by
//! bisection through the real `haproxy -c` and `nginx -t`, left out, and reported;
//! every other tenant's changes still apply (a new Service appears in the installed
//! config, another tenant's endpoints change); a fixed poison comes back by itself.
//!
//! Root-gated like the other daemon checks (`-- --include-ignored`): nginx -t runs in a
//! network namespace the test makes (it binds the VIPs). haproxy and nginx must be
//! installed (a missing one FAILS).

mod support;

#[path = "support/poison.rs"]
mod poison;

use k8slb_actor::admin::Metrics;
use k8slb_actor::apply::{Applied, Applier, NodeContext};
use k8slb_actor::daemons::{DaemonError, DaemonKind, Paths};
use k8slb_actor::fdlimit::FdBudget;
use k8slb_actor::node_renderer::RealRenderer;
use k8slb_actor::render::Renderer;
use k8slb_actor::view::ViewOptions;
use k8slb_common::problem::ObjRef;
use k8slb_common::state::{Endpoint, Provider, State};
use poison::{add_service, any_keepalived, tenants, Checked, Checker, PoisonRenderer};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn run_checker(kind: DaemonKind, mut cmd: Command) -> Result<(), DaemonError> {
    let out = cmd.output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(DaemonError::Check {
            daemon: kind,
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ),
        })
    }
}

struct Rig {
    applier: Applier<PoisonRenderer>,
    serving: Arc<Mutex<String>>,
    metrics: Arc<Metrics>,
    _work: tempfile::TempDir,
}

fn rig(proxy: Provider, ns: &support::Netns) -> Rig {
    rig_with_budget(proxy, ns, None)
}

/// [`rig`] for a node whose open-files limit is `budget`.
fn rig_with_budget(proxy: Provider, ns: &support::Netns, budget: Option<FdBudget>) -> Rig {
    let work = tempfile::Builder::new()
        .prefix("k8slb-quarantine")
        .tempdir()
        .unwrap();
    let paths = Paths::new(work.path());
    let mut opts = ViewOptions::new(proxy);
    opts.fd_budget = budget;
    opts.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    opts.pid_file = match proxy {
        Provider::Nginx => paths.nginx_pid(),
        _ => paths.haproxy_pid(),
    };
    opts.runtime_socket = paths.haproxy_runtime_socket();
    opts.routes_dir = work.path().join("routes");
    let (kind, cfg, check): (DaemonKind, _, Checker) = match proxy {
        Provider::Nginx => {
            let prefix = paths.nginx_prefix();
            std::fs::create_dir_all(prefix.join("logs")).unwrap();
            let ns = ns.name.clone();
            (
                DaemonKind::Nginx,
                paths.nginx_conf(),
                Box::new(move |f: &Path| {
                    let mut c = Command::new("ip");
                    c.args([
                        "netns", "exec", &ns, "nginx", "-e", "stderr", "-t", "-q", "-p",
                    ])
                    .arg(&prefix)
                    .arg("-c")
                    .arg(f);
                    run_checker(DaemonKind::Nginx, c)
                }),
            )
        }
        _ => (
            DaemonKind::Haproxy,
            paths.haproxy_cfg(),
            Box::new(|f: &Path| {
                let mut c = Command::new("haproxy");
                c.arg("-c").arg("-f").arg(f);
                run_checker(DaemonKind::Haproxy, c)
            }),
        ),
    };
    let serving = Arc::new(Mutex::new(String::new()));
    let daemon = Checked {
        kind,
        cfg,
        check,
        up: false,
        serving: serving.clone(),
        checks: Default::default(),
    };
    let renderer = PoisonRenderer {
        real: RealRenderer::new(Renderer::embedded().unwrap(), "lb-1".parse().unwrap(), opts),
        proxy,
    };
    let metrics = Arc::new(Metrics::new());
    let mut applier = Applier::new(
        renderer,
        Box::new(any_keepalived(work.path().join("keepalived.conf"))),
        Some(Box::new(daemon)),
        metrics.clone(),
    );
    applier.min_reload_interval = Duration::ZERO;
    Rig {
        applier,
        serving,
        metrics,
        _work: work,
    }
}

fn netns() -> support::Netns {
    let ns = support::Netns::new("k8slbq");
    for k in ["net.ipv4.ip_nonlocal_bind=1", "net.ipv6.ip_nonlocal_bind=1"] {
        let st = ns.cmd("sysctl").args(["-qw", k]).status().unwrap();
        assert!(st.success(), "sysctl {k}");
    }
    ns
}

fn service(key: &str) -> ObjRef {
    ObjRef::Service(key.parse().unwrap())
}

/// A frontend (HAProxy) or upstream (nginx) of `<ns>_<name>_<port>` in `text`.
fn serves(text: &str, ns_name_port: &str) -> bool {
    text.contains(&format!("fe_{ns_name_port}_")) || text.contains(&format!("up_{ns_name_port}"))
}

fn poisoned_tenant_is_quarantined_and_everyone_else_applies(proxy: Provider) {
    let ns = netns();
    let mut r = rig(proxy, &ns);
    let ctx = NodeContext::default();
    let t = Instant::now();

    // The poison arrives with 16 other tenants: found, left out, the rest served.
    let mut state = tenants(16);
    let applied = r.applier.apply(&state, &ctx, t).unwrap();
    assert!(matches!(applied, Applied::Done { .. }), "{applied:?}");
    assert_eq!(
        r.applier.quarantined(),
        &BTreeSet::from([service("tp/poison")])
    );
    // What the node report carries: the checker's line about the poison's part alone.
    let error = &r.applier.quarantine_errors()[&service("tp/poison")];
    let marker = match proxy {
        Provider::Nginx => "[emerg]",
        _ => "[ALERT]",
    };
    assert!(
        error.contains(marker) && error.contains("poison"),
        "{proxy:?}: {error}"
    );
    assert!(!error.contains('\n'), "one line: {error}");
    let checks = r.applier.last_bisection_checks();
    assert!(
        (2..=8).contains(&checks),
        "{checks} checks for 1 of 20 owners"
    );
    let text = r.serving.lock().unwrap().clone();
    assert!(serves(&text, "t3_svc_20003"), "{proxy:?}: {text}");
    assert!(serves(&text, "default_web_80"));
    assert!(!text.contains("poison"), "the poison's block is left out");
    assert!(
        r.applier.not_ready().is_none(),
        "ready: everything else is served"
    );
    let metrics = r.metrics.encode();
    assert!(
        metrics.contains("k8slb_actor_quarantined_objects 1"),
        "{metrics}"
    );

    // Another tenant's new Service and endpoint change apply while the poison stays.
    add_service(&mut state, "tnew/svc", 30000, "10.9.0.1");
    let eps = &mut state
        .services
        .get_mut(&"t5/svc".parse().unwrap())
        .unwrap()
        .ports[0]
        .endpoints;
    eps[0] = Endpoint {
        ip: "10.9.9.9".parse().unwrap(),
        port: 8080,
        draining: false,
    };
    r.applier.apply(&state, &ctx, t).unwrap();
    let text = r.serving.lock().unwrap().clone();
    assert!(serves(&text, "tnew_svc_30000"), "the new Service is served");
    assert!(text.contains("10.9.9.9:8080"), "the new endpoint is served");
    assert!(!text.contains("poison"));
    assert_eq!(
        r.applier.quarantined(),
        &BTreeSet::from([service("tp/poison")])
    );

    // Fixed (its port changed): served again, by itself; nothing left out.
    state
        .services
        .get_mut(&"tp/poison".parse().unwrap())
        .unwrap()
        .ports[0]
        .port = 6667;
    r.applier.apply(&state, &ctx, t).unwrap();
    assert!(r.applier.quarantined().is_empty());
    let text = r.serving.lock().unwrap().clone();
    assert!(serves(&text, "tp_poison_6667"), "{text}");
    assert!(r
        .metrics
        .encode()
        .contains("k8slb_actor_quarantined_objects 0"));
}

#[test]
#[ignore = "needs root: nginx -t in a network namespace it creates, haproxy -c; ./scripts/test.sh runs it"]
fn haproxy_a_poisoned_tenant_is_quarantined_and_every_other_change_applies() {
    support::require_root_and(&["ip", "haproxy"]);
    poisoned_tenant_is_quarantined_and_everyone_else_applies(Provider::Haproxy);
}

#[test]
#[ignore = "needs root: nginx -t in a network namespace it creates, haproxy -c; ./scripts/test.sh runs it"]
fn nginx_a_poisoned_tenant_is_quarantined_and_every_other_change_applies() {
    support::require_root_and(&["ip", "nginx"]);
    poisoned_tenant_is_quarantined_and_everyone_else_applies(Provider::Nginx);
}

/// A fault that is no object's (here: every config refused, as a broken admin section
/// would be): nothing is left out, the apply fails, the last good config stays.
#[test]
#[ignore = "needs root: nginx -t in a network namespace it creates, haproxy -c; ./scripts/test.sh runs it"]
fn a_config_refused_without_any_object_keeps_the_last_good_one() {
    support::require_root_and(&["ip", "haproxy"]);
    let ns = netns();
    let mut r = rig(Provider::Haproxy, &ns);
    let ctx = NodeContext::default();
    let mut good = tenants(2);
    good.services.remove(&"tp/poison".parse().unwrap());
    r.applier.apply(&good, &ctx, Instant::now()).unwrap();
    let before = r.serving.lock().unwrap().clone();
    let mut bad = good.clone();
    bad.config
        .haproxy
        .global
        .push("not-a-global-keyword".parse().unwrap());
    let err = r.applier.apply(&bad, &ctx, Instant::now()).unwrap_err();
    assert!(err.to_string().contains("not-a-global-keyword"), "{err}");
    assert!(r.applier.quarantined().is_empty());
    assert_eq!(*r.serving.lock().unwrap(), before);
}

/// A Service port that another program of the node holds on every address: neither
/// `haproxy -c` nor `nginx -t` binds, so the config would pass its check and fail at the
/// reload, for every tenant. The actor refuses it with the check (from the node's
/// listeners): the quarantine leaves that Service out and serves the rest.
fn a_port_held_by_another_program_is_left_out_and_the_rest_served(proxy: Provider) {
    let ns = netns();
    let mut holder = ns
        .cmd("python3")
        .args([
            "-c",
            "import socket,time\ns=socket.socket()\ns.bind(('0.0.0.0',7111))\ns.listen()\ntime.sleep(300)",
        ])
        .spawn()
        .unwrap();
    let net = std::path::PathBuf::from(format!("/proc/{}/net", holder.id()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(net.join("tcp"))
        .is_ok_and(|t| t.contains(":1BC7 00000000:0000 0A"))
    {
        assert!(Instant::now() < deadline, "the holder never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut r = rig(proxy, &ns);
    r.applier.set_net_proc(net);
    let mut state = tenants(6);
    add_service(&mut state, "tq/busy", 7111, "10.4.0.1");
    let applied = r
        .applier
        .apply(&state, &NodeContext::default(), Instant::now());
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(matches!(applied, Ok(Applied::Done { .. })), "{applied:?}");
    assert_eq!(
        r.applier.quarantined(),
        &BTreeSet::from([service("tp/poison"), service("tq/busy")])
    );
    let error = &r.applier.quarantine_errors()[&service("tq/busy")];
    assert!(
        error.contains("192.168.10.240:7111/tcp") && error.contains("another program"),
        "{error}"
    );
    let text = r.serving.lock().unwrap().clone();
    assert!(serves(&text, "t5_svc_20005"), "{proxy:?}: {text}");
    assert!(!serves(&text, "tq_busy_7111"), "{proxy:?}: {text}");
}

#[test]
#[ignore = "needs root: nginx -t in a network namespace it creates, haproxy -c; ./scripts/test.sh runs it"]
fn haproxy_a_port_held_by_another_program_is_left_out_and_the_rest_served() {
    support::require_root_and(&["ip", "haproxy", "python3"]);
    a_port_held_by_another_program_is_left_out_and_the_rest_served(Provider::Haproxy);
}

#[test]
#[ignore = "needs root: nginx -t in a network namespace it creates, haproxy -c; ./scripts/test.sh runs it"]
fn nginx_a_port_held_by_another_program_is_left_out_and_the_rest_served() {
    support::require_root_and(&["ip", "nginx", "python3"]);
    a_port_held_by_another_program_is_left_out_and_the_rest_served(Provider::Nginx);
}

/// A Service with `n` ports from `first` (a copy of default/web's first port each), on
/// 192.168.10.240.
fn add_wide_service(s: &mut State, key: &str, first: u16, n: u16) {
    add_service(s, key, first, "10.5.0.1");
    let k: k8slb_common::names::ServiceKey = key.parse().unwrap();
    let svc = s.services.get_mut(&k).unwrap();
    let port = svc.ports[0].clone();
    svc.ports = (0..n)
        .map(|i| {
            let mut p = port.clone();
            p.port = first + i;
            p
        })
        .collect();
}

/// The smallest open-files limit under which `state`'s proxy config can start (as the
/// view counts it), found by bisection over [`k8slb_actor::view::NodeView::fd_shortfall`].
fn least_limit(proxy: Provider, state: &State) -> u64 {
    let fits = |limit| {
        let budget = Some(FdBudget { limit, cpus: 1 });
        let mut opts = ViewOptions::new(proxy);
        opts.fd_budget = budget;
        opts.interfaces
            .insert("default".parse().unwrap(), "eth0".parse().unwrap());
        let v = k8slb_actor::view::view(state, &"lb-1".parse().unwrap(), &opts).unwrap();
        v.fd_shortfall(budget).is_none()
    };
    let (mut lo, mut hi) = (1u64, 1 << 20);
    assert!(fits(hi) && !fits(lo));
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid) {
            hi = mid
        } else {
            lo = mid
        }
    }
    hi
}

/// Neither `haproxy -c` nor `nginx -t` opens a socket: a config with more listening
/// sockets than the proxy may hold files passes its check, and the proxy then fails to
/// start or reload, which froze every tenant. Two Services of 150 ports each fit the
/// node's open-files limit alone but not together: the later one is left out (with the
/// count as its reason), the earlier one and every other tenant are served, and the
/// poison is still found.
fn services_beyond_the_open_files_limit_are_left_out_and_the_rest_served(proxy: Provider) {
    let ns = netns();
    let mut state = tenants(6);
    add_wide_service(&mut state, "ta/wide", 9000, 150);
    let one = least_limit(proxy, &state);
    add_wide_service(&mut state, "tb/wide", 9500, 150);
    let both = least_limit(proxy, &state);
    assert!(both >= one + 150, "{proxy:?}: {one} {both}");
    let budget = FdBudget {
        limit: one,
        cpus: 1,
    };
    let mut r = rig_with_budget(proxy, &ns, Some(budget));
    let applied = r
        .applier
        .apply(&state, &NodeContext::default(), Instant::now());
    assert!(matches!(applied, Ok(Applied::Done { .. })), "{applied:?}");
    assert_eq!(
        r.applier.quarantined(),
        &BTreeSet::from([service("tb/wide"), service("tp/poison")])
    );
    let error = &r.applier.quarantine_errors()[&service("tb/wide")];
    assert!(
        error.starts_with("open files: ") && error.contains(&format!("limit {one} ")),
        "{proxy:?}: {error}"
    );
    let text = r.serving.lock().unwrap().clone();
    assert!(serves(&text, "ta_wide_9149"), "{proxy:?}");
    assert!(serves(&text, "t5_svc_20005"), "{proxy:?}");
    assert!(!serves(&text, "tb_wide_9500"), "{proxy:?}");

    // The limit raised (the admin's fix): everything but the poison is served again.
    let mut r = rig_with_budget(
        proxy,
        &ns,
        Some(FdBudget {
            limit: both,
            cpus: 1,
        }),
    );
    r.applier
        .apply(&state, &NodeContext::default(), Instant::now())
        .unwrap();
    assert_eq!(
        r.applier.quarantined(),
        &BTreeSet::from([service("tp/poison")])
    );
    assert!(serves(&r.serving.lock().unwrap(), "tb_wide_9649"));
}

#[test]
#[ignore = "needs root: nginx -t in a network namespace it creates, haproxy -c; ./scripts/test.sh runs it"]
fn haproxy_services_beyond_the_open_files_limit_are_left_out_and_the_rest_served() {
    support::require_root_and(&["ip", "haproxy"]);
    services_beyond_the_open_files_limit_are_left_out_and_the_rest_served(Provider::Haproxy);
}

#[test]
#[ignore = "needs root: nginx -t in a network namespace it creates, haproxy -c; ./scripts/test.sh runs it"]
fn nginx_services_beyond_the_open_files_limit_are_left_out_and_the_rest_served() {
    support::require_root_and(&["ip", "nginx"]);
    services_beyond_the_open_files_limit_are_left_out_and_the_rest_served(Provider::Nginx);
}
