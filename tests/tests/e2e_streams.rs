//! Long-lived streams through the real actors and proxies (issue 23 item 4): a WebSocket
//! (HTTP/1.1 upgrade, an http-mode Service port) and a gRPC bidirectional stream (h2c, a
//! Service port with `appProtocol: kubernetes.io/h2c`), held open from the lab's client
//! with a message each way every 100 ms while
//!
//! - (a) an endpoint is added to both Services: HAProxy takes it over the Runtime API
//!   (no reload: asserted), nginx reloads; both streams must survive (asserted);
//! - (b) a reload happens (a new Service): the streams stay on the old HAProxy process /
//!   nginx worker, which drains them until `hard-stop-after` / `worker_shutdown_timeout`.
//!   With the shipped settings (HAProxy `hard-stop-after 30m`, nginx without
//!   `worker_shutdown_timeout`) they must survive the reload (asserted a few seconds
//!   after it); with both set to 8 s, the time from the reload to the cut is printed
//!   (`survived ... after the reload`), which is what docs/configuration.md reports.
//!
//! Needs root, keepalived, haproxy, nginx and the built binaries; fails (never skips)
//! without them.

use k8slb_tests::grpc::{GrpcStream, Upgraded};
use k8slb_tests::objects::{svc, tcp, Svc};
use k8slb_tests::system::{default_config, sum_metric, Options, System};
use k8slb_tests::traffic::{Proto, GRPC_PORT, WS_PORT};
use serde_json::json;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);
const PING: Duration = Duration::from_secs(2);

/// `default/ws`: port 80 (http mode) to the backends' WebSocket echo; `default/rpc`: port
/// 8080 named `http-grpc` (http mode), appProtocol h2c, to their gRPC echo.
fn services() -> (Svc, Svc) {
    (
        svc("default", "ws").port(tcp("http", 80, WS_PORT)),
        svc("default", "rpc").port(tcp("http-grpc", 8080, GRPC_PORT)),
    )
}

/// Applies `s` (with `appProtocol` when given) and its endpoints on the backends `which`.
fn apply(sys: &System, s: &Svc, app_protocol: Option<&str>, which: &[usize]) {
    let mut v = s.to_value();
    if let Some(a) = app_protocol {
        v["spec"]["ports"][0]["appProtocol"] = json!(a);
    }
    sys.apply(&format!("svc-{}", s.name), &v).unwrap();
    let all = sys.backend_ips();
    let ips: Vec<IpAddr> = which.iter().map(|i| all[*i]).collect();
    sys.apply(
        &format!("eps-{}", s.name),
        &s.endpoints(&format!("{}-1", s.name), &ips),
    )
    .unwrap();
}

/// When each stream broke (None: still alive), and why.
#[derive(Debug, Default, Clone)]
struct Broken {
    ws: Option<(Instant, String)>,
    grpc: Option<(Instant, String)>,
}

/// Holds a WebSocket to `ws` and a gRPC stream to `rpc` from the client's namespace,
/// a message each way on each every 100 ms, until `stop`; records when each breaks.
fn hold(
    ns: &str,
    ws: SocketAddr,
    rpc: SocketAddr,
    stop: Arc<AtomicBool>,
    broken: Arc<Mutex<Broken>>,
) -> std::thread::JoinHandle<()> {
    let ns = ns.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let f = std::fs::File::open(Path::new("/run/netns").join(&ns)).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let mut u = Some(Upgraded::open(ws, "ws.example", "/chat").expect("WebSocket 101"));
        let mut g = Some(GrpcStream::open(rpc, "rpc.example", PING).expect("gRPC stream"));
        tx.send(()).unwrap();
        let mut i: u32 = 0;
        while !stop.load(Ordering::SeqCst) {
            i = i.wrapping_add(1);
            let msg = i.to_be_bytes();
            if let Some(c) = u.as_mut() {
                match c.ping(&msg, PING) {
                    Ok(back) if back == msg => {}
                    other => {
                        broken.lock().unwrap().ws = Some((Instant::now(), format!("{other:?}")));
                        u = None;
                    }
                }
            }
            if let Some(c) = g.as_mut() {
                match c.ping(&msg, PING) {
                    Ok(back) if back[..] == msg => {}
                    other => {
                        broken.lock().unwrap().grpc = Some((Instant::now(), format!("{other:?}")));
                        g = None;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the streams opened");
    t
}

fn reloads(sys: &System, proxy: &str) -> u64 {
    let label = format!("daemon=\"{proxy}\"");
    sys.lb_nodes()
        .iter()
        .map(|n| {
            sum_metric(
                &sys.metrics(n).unwrap(),
                "k8slb_actor_reloads_total",
                &label,
            )
        })
        .sum()
}

/// Starts the lab with the two Services on backend 0 and holds the streams; `extra`: the
/// global config's `haproxy` / `nginx` keys.
fn start(proxy: &str, name: &str, extra: serde_json::Value) -> (System, [SocketAddr; 2]) {
    let mut o = Options::new(name).proxy(proxy);
    o.config_extra = extra;
    let sys = System::start(o).expect("system");
    let (ws, rpc) = services();
    apply(&sys, &ws, None, &[0]);
    apply(&sys, &rpc, Some("kubernetes.io/h2c"), &[0]);
    let ws_ip = sys.wait_ips("default/ws", T).unwrap()[0];
    let rpc_ip = sys.wait_ips("default/rpc", T).unwrap()[0];
    sys.wait_serving(Proto::Http, SocketAddr::new(ws_ip, 80), T)
        .unwrap();
    sys.wait_one_holder(rpc_ip, T).unwrap();
    (
        sys,
        [SocketAddr::new(ws_ip, 80), SocketAddr::new(rpc_ip, 8080)],
    )
}

/// A new Service (a reload on both proxies), waited for until it serves.
fn reload_with_a_new_service(sys: &System, name: &str) -> Instant {
    let s = svc("default", name).port(tcp("http", 80, 8080));
    sys.apply_service(&s).unwrap();
    let ip = sys.wait_ips(&s.key(), T).unwrap()[0];
    sys.wait_serving(Proto::Http, SocketAddr::new(ip, 80), T)
        .unwrap();
    Instant::now()
}

fn streams_survive_an_endpoint_change_and_a_reload(proxy: &str) {
    let (mut sys, [ws, rpc]) = start(proxy, &format!("streams-{proxy}"), json!({}));
    // Reloads of the Services' creation are done before counting.
    let before = sys
        .settled_haproxy_reloads(Duration::from_millis(1500), T)
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let broken = Arc::new(Mutex::new(Broken::default()));
    let client_ns = sys.lab.host("client").ns.clone();
    let t = hold(&client_ns, ws, rpc, stop.clone(), broken.clone());
    std::thread::sleep(Duration::from_secs(1));

    // (a) An endpoint added to both Services.
    let reloads_a = reloads(&sys, proxy);
    let (s_ws, s_rpc) = services();
    apply(&sys, &s_ws, None, &[0, 1]);
    apply(&sys, &s_rpc, Some("kubernetes.io/h2c"), &[0, 1]);
    std::thread::sleep(Duration::from_secs(3));
    let after_a = sys
        .settled_haproxy_reloads(Duration::from_millis(1500), T)
        .unwrap();
    let b = broken.lock().unwrap().clone();
    assert!(
        b.ws.is_none() && b.grpc.is_none(),
        "{proxy}: a stream broke on an endpoint change: {b:?}"
    );
    if proxy == "haproxy" {
        assert_eq!(
            before, after_a,
            "HAProxy reloaded for an endpoint-only change"
        );
    }
    eprintln!(
        "{proxy}: endpoint added: {} reload(s); both streams alive",
        reloads(&sys, proxy) - reloads_a
    );

    // (b) A reload (a new Service), with the shipped hard-stop-after / no
    // worker_shutdown_timeout: the streams stay on the old process or worker.
    let reloads_b = reloads(&sys, proxy);
    let _ = reload_with_a_new_service(&sys, "other");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        reloads(&sys, proxy) > reloads_b,
        "{proxy}: no reload happened"
    );
    let b = broken.lock().unwrap().clone();
    assert!(
        b.ws.is_none() && b.grpc.is_none(),
        "{proxy}: a stream broke on a reload: {b:?}"
    );
    eprintln!("{proxy}: reloaded: both streams alive 3 s later");
    stop.store(true, Ordering::SeqCst);
    t.join().unwrap();
    let _ = &mut sys;
}

/// The drain bound, measured: with `hard-stop-after 8s` (HAProxy) and
/// `worker_shutdown_timeout 8s;` (nginx), the time from the reload to each stream's cut.
fn streams_are_cut_when_the_old_process_is_stopped(proxy: &str) {
    let mut hp = default_config(0.1)["haproxy"]["global"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| {
            vec![
                json!("maxconn 20000"),
                json!("ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets"),
            ]
        });
    hp.push(json!("hard-stop-after 8s"));
    let extra = json!({
        "haproxy": {"global": hp},
        "nginx": {"global": ["worker_processes auto;", "worker_shutdown_timeout 8s;"]},
    });
    let (sys, [ws, rpc]) = start(proxy, &format!("drain-{proxy}"), extra);
    let stop = Arc::new(AtomicBool::new(false));
    let broken = Arc::new(Mutex::new(Broken::default()));
    let client_ns = sys.lab.host("client").ns.clone();
    let t = hold(&client_ns, ws, rpc, stop.clone(), broken.clone());
    std::thread::sleep(Duration::from_secs(1));
    let reloaded = reload_with_a_new_service(&sys, "other");
    let ok = k8slb_tests::wait::until(Duration::from_secs(40), || {
        let b = broken.lock().unwrap();
        Ok(b.ws.is_some() && b.grpc.is_some())
    });
    stop.store(true, Ordering::SeqCst);
    t.join().unwrap();
    let b = broken.lock().unwrap().clone();
    let since = |x: &Option<(Instant, String)>| {
        x.as_ref()
            .map(|(at, why)| {
                format!(
                    "{:.1} s ({why})",
                    at.saturating_duration_since(reloaded).as_secs_f64()
                )
            })
            .unwrap_or_else(|| "not cut within 40 s".into())
    };
    eprintln!(
        "{proxy}: drain bound 8 s: WebSocket survived {} after the reload; gRPC stream {}",
        since(&b.ws),
        since(&b.grpc)
    );
    assert!(
        ok.is_ok(),
        "{proxy}: the old process kept the streams past its bound: {b:?}"
    );
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn haproxy_keeps_websocket_and_grpc_streams_through_an_endpoint_change_and_a_reload() {
    streams_survive_an_endpoint_change_and_a_reload("haproxy");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn nginx_keeps_websocket_and_grpc_streams_through_an_endpoint_change_and_a_reload() {
    streams_survive_an_endpoint_change_and_a_reload("nginx");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn haproxy_cuts_streams_at_hard_stop_after() {
    streams_are_cut_when_the_old_process_is_stopped("haproxy");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn nginx_cuts_streams_at_worker_shutdown_timeout() {
    streams_are_cut_when_the_old_process_is_stopped("nginx");
}
