//! lab-bench: k8slb's benchmark in the lab (run by ./scripts/bench.sh, as root).
//!
//! Prints progress, then LAST one JSON line with: failover_ms_p50, failover_ms_max (link
//! cut, K8SLB_BENCH_TRIALS trials, default 10), proxy_crash_failover_ms_p50,
//! keepalived_default_failover_ms_p50 (the same cut with advert_int 1 s),
//! convergence_ms_p50 (Service file written -> first successful request through its VIP),
//! reload_failed_requests, churn_failed_requests, churn_reloads, l4_throughput_ratio,
//! l7_throughput_ratio (wrk through the VIP / direct to one backend), l4_baseline_ratio,
//! l7_baseline_ratio (the same through a minimal hand-written haproxy.cfg: same binary,
//! same default thread count, same LB node). A measurement that fails is `null` and its
//! error is printed (and listed under "errors").
//!
//! `lab-bench soak`: the chaos soak ([`k8slb_tests::soak`]) for K8SLB_BENCH_SOAK_S seconds
//! (default 600) with a 60 s API outage (K8SLB_SOAK_API_OUTAGE_S); seed K8SLB_SOAK_SEED.
//! Prints soak_faults, soak_violations, soak_max_recovery_ms, soak_failed_outside_faults,
//! recovery and dark maxima per fault kind, and the violations.
//!
//! `lab-bench saturation`: false failovers with every core busy. For each advert_int
//! (0.1 s, the default, and 0.05 s), K8SLB_BENCH_SATURATION_S seconds (default 120) with
//! `nproc` CPU burners in each LB node's namespace; counts VIP holder changes (sampled
//! every 20 ms over netlink) and keepalived's "Entering MASTER STATE" lines, while a probe
//! sends a request every 50 ms. Then the link-cut failover at 0.05 s (K8SLB_BENCH_TRIALS).
//! A third pass repeats 0.05 s with keepalived's processes under SCHED_RR (`chrt`), which
//! is what `vrrp_rt_priority` would give it (K8SLB_BENCH_SATURATION_RT=0 skips it).

use anyhow::{bail, Context, Result};
use k8slb_tests::objects::{endpoint_slice, svc, tcp};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::{self, Proto, Steady};
use nix::sys::signal::Signal;
use serde_json::{json, Map, Value};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn p50(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

fn max(v: &[f64]) -> Option<f64> {
    v.iter().copied().reduce(f64::max)
}

fn round(x: Option<f64>) -> Value {
    x.map(|v| json!((v * 1000.0).round() / 1000.0))
        .unwrap_or(Value::Null)
}

struct Out {
    keys: Map<String, Value>,
    errors: Map<String, Value>,
}

impl Out {
    fn record<T>(&mut self, what: &str, r: Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("bench: {what} FAILED: {e:#}");
                self.errors.insert(what.into(), json!(format!("{e:#}")));
                None
            }
        }
    }
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        None | Some("all") => bench_main(),
        Some("soak") => soak_main(),
        Some("saturation") => saturation_main(),
        Some("ingress") => ingress_main(),
        Some("bgp") => bgp_main(),
        Some(other) => {
            eprintln!("lab-bench: unknown mode {other:?} (none, soak, saturation, ingress or bgp)");
            std::process::exit(64);
        }
    }
}

/// `lab-bench ingress`: only the Ingress convergence (a lab of its own).
fn ingress_main() {
    let mut out = Out {
        keys: Map::new(),
        errors: Map::new(),
    };
    let r = (|| -> Result<()> {
        let mut sys = System::start(Options::new("bench-ing").backends(3))?;
        let client_ns = sys.lab.host("client").ns.clone();
        sys.lab
            .sysctl(&client_ns, "net.ipv4.conf.all.arp_accept", "1")?;
        let conv = ingress_convergence(&mut out, &mut sys)?;
        out.keys
            .insert("ingress_convergence_ms_p50".into(), round(p50(&conv)));
        out.keys
            .insert("ingress_convergence_ms_max".into(), round(max(&conv)));
        sys.lab.pass();
        Ok(())
    })();
    out.record("ingress", r);
    if !out.errors.is_empty() {
        out.keys
            .insert("errors".into(), Value::Object(out.errors.clone()));
    }
    println!("{}", Value::Object(out.keys));
}

/// `lab-bench bgp`: BGP mode (a lab of its own: an FRR router, three LB nodes), on
/// HAProxy: spread, withdrawal on a proxy crash, BFD on a link cut, a rolling restart.
fn bgp_main() {
    let mut out = Out {
        keys: Map::new(),
        errors: Map::new(),
    };
    bgp_into(&mut out);
    if !out.errors.is_empty() {
        out.keys
            .insert("errors".into(), Value::Object(out.errors.clone()));
    }
    println!("{}", Value::Object(out.keys));
}

/// The `bgp_*` keys (see `k8slb_tests::bgp::Numbers`).
fn bgp_into(out: &mut Out) {
    let r = k8slb_tests::bgp::scenario("bench-bgp", "haproxy").and_then(|(mut sys, n)| {
        sys.lab.pass();
        Ok(serde_json::to_value(n)?)
    });
    if let Some(Value::Object(m)) = out.record("bgp", r) {
        out.keys.extend(m);
    }
}

fn bench_main() {
    let mut out = Out {
        keys: Map::new(),
        errors: Map::new(),
    };
    for k in [
        "failover_ms_p50",
        "failover_ms_max",
        "proxy_crash_failover_ms_p50",
        "keepalived_default_failover_ms_p50",
        "convergence_ms_p50",
        "ingress_convergence_ms_p50",
        "reload_failed_requests",
        "churn_failed_requests",
        "churn_reloads",
        "l4_throughput_ratio",
        "l7_throughput_ratio",
        "l4_baseline_ratio",
        "l7_baseline_ratio",
    ] {
        out.keys.insert(k.into(), Value::Null);
    }
    let t0 = Instant::now();
    let fast = run_fast_system(&mut out);
    out.record("fast system", fast);
    let slow = run_default_keepalived(&mut out);
    out.record("keepalived default", slow);
    bgp_into(&mut out);
    out.keys
        .insert("bench_seconds".into(), json!(t0.elapsed().as_secs()));
    out.keys.insert(
        "cpus".into(),
        json!(std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)),
    );
    if !out.errors.is_empty() {
        out.keys
            .insert("errors".into(), Value::Object(out.errors.clone()));
    }
    println!("{}", Value::Object(out.keys));
}

fn say(s: &str) {
    eprintln!("bench: {s}");
}

/// A System with the web Service; returns (ip, target).
fn web(sys: &System) -> Result<(IpAddr, SocketAddr)> {
    let s = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply_service(&s)?;
    let ip = sys.wait_ips("default/web", T)?[0];
    let target = SocketAddr::new(ip, 80);
    sys.wait_serving(Proto::Http, target, T)?;
    sys.wait_one_holder(ip, T)?;
    Ok((ip, target))
}

/// `n` trials of `trial`: each one's dark time (ms) is said and kept, a failure recorded
/// under `"<what> trial <i>"`; returns the dark times.
fn run_trials(
    out: &mut Out,
    n: usize,
    what: &str,
    mut trial: impl FnMut() -> Result<f64>,
) -> Vec<f64> {
    let mut gaps = Vec::new();
    for i in 0..n {
        if let Some(g) = out.record(&format!("{what} trial {i}"), trial()) {
            say(&format!("{what} trial {i}: dark {g:.0} ms"));
            gaps.push(g);
        }
    }
    gaps
}

/// The client's HTTP probe of `target` (every 10 ms, at most 60 s), running for 300 ms
/// before it returns: the trial's fault comes after a few good answers.
fn probe_http(sys: &mut System, target: SocketAddr) -> Result<traffic::Background> {
    let probe = traffic::start_probe(
        &mut sys.lab,
        "client",
        "probe",
        Proto::Http,
        target,
        10,
        Duration::from_secs(60),
    )?;
    std::thread::sleep(Duration::from_millis(300));
    Ok(probe)
}

/// One link-cut trial: the current holder's link is cut; returns the dark time (ms).
fn link_cut_trial(sys: &mut System, ip: IpAddr, target: SocketAddr) -> Result<f64> {
    let master = sys.wait_one_holder(ip, T)?;
    let probe = probe_http(sys, target)?;
    sys.lab.cut_link(&master)?;
    let moved = k8slb_tests::wait::until(T, || Ok(sys.holders(ip)?.iter().any(|h| *h != master)));
    let serving = moved.and_then(|_| sys.wait_serving(Proto::Http, target, T));
    std::thread::sleep(Duration::from_millis(300));
    let p = probe.stop_probe(&mut sys.lab);
    sys.lab.restore_link(&master)?;
    serving?;
    let p = p?;
    if !p.recovered {
        bail!("the probe never recovered: {p:?}");
    }
    // Let the restored node settle as backup before the next trial.
    std::thread::sleep(Duration::from_millis(1500));
    sys.wait_one_holder(ip, T)?;
    Ok(p.max_gap_ms)
}

fn run_fast_system(out: &mut Out) -> Result<()> {
    let trials = env_num("K8SLB_BENCH_TRIALS", 10) as usize;
    say("starting the lab (2 LB nodes, 3 backends, haproxy, advert_int 0.1 s)");
    let mut sys = System::start(Options::new("bench").backends(3))?;
    let (ip, target) = web(&sys)?;

    // 1. Link cut.
    let gaps = run_trials(out, trials, "link cut", || {
        link_cut_trial(&mut sys, ip, target)
    });
    out.keys.insert("failover_ms_p50".into(), round(p50(&gaps)));
    out.keys.insert("failover_ms_max".into(), round(max(&gaps)));
    out.keys.insert("failover_trials".into(), json!(gaps.len()));

    // 2. Proxy crash on the master.
    let gaps = run_trials(out, (trials / 2).max(3), "proxy crash", || {
        let master = sys.wait_one_holder(ip, T)?;
        let probe = probe_http(&mut sys, target)?;
        let pids = sys.pids_named(&master, "haproxy")?;
        if pids.is_empty() {
            bail!("no haproxy on {master}");
        }
        for p in pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(500));
        sys.wait_serving(Proto::Http, target, T)?;
        std::thread::sleep(Duration::from_millis(300));
        let p = probe.stop_probe(&mut sys.lab)?;
        if !p.recovered {
            bail!("the probe never recovered: {p:?}");
        }
        // The actor restarts its proxy; wait until both nodes are whole again.
        std::thread::sleep(Duration::from_secs(3));
        sys.wait_one_holder(ip, T)?;
        Ok(p.max_gap_ms)
    });
    out.keys
        .insert("proxy_crash_failover_ms_p50".into(), round(p50(&gaps)));

    // 3. Convergence: Service file written -> first successful request through its VIP.
    //    Each trial alone (after the actors' 1 s reload interval, so a trial does not wait
    //    for the previous one's), and the client takes gratuitous ARP (`arp_accept`):
    //    without it, the probe's ARP requests for the VIP before it exists leave an
    //    unresolved entry that only the kernel's next ARP retry (up to 1 s) clears, which
    //    measures the client's ARP timer, not k8slb.
    let client_ns = sys.lab.host("client").ns.clone();
    sys.lab
        .sysctl(&client_ns, "net.ipv4.conf.all.arp_accept", "1")?;
    let mut conv = Vec::new();
    for i in 0..5u8 {
        std::thread::sleep(Duration::from_millis(1100));
        let r = (|| -> Result<f64> {
            let vip: IpAddr = format!("198.18.0.{}", 110 + i).parse()?;
            let t = SocketAddr::new(vip, 80);
            let s = svc("default", &format!("conv{i}"))
                .port(tcp("http", 80, 8080))
                .lb_ip(&vip.to_string());
            let spawned = Instant::now();
            let probe = traffic::spawn_client(
                &mut sys.lab,
                "client",
                &format!("conv{i}"),
                &[
                    "probe",
                    "--proto",
                    "http",
                    "--target",
                    &t.to_string(),
                    "--interval-ms",
                    "5",
                    "--timeout-ms",
                    "300",
                    "--duration-ms",
                    "20000",
                ],
            )?;
            std::thread::sleep(Duration::from_millis(200));
            sys.apply(
                &format!("eps-default-conv{i}"),
                &s.endpoints(&format!("conv{i}-1"), &sys.backend_ips()),
            )?;
            let written = spawned.elapsed().as_secs_f64() * 1000.0;
            sys.apply(&format!("svc-default-conv{i}"), &s.to_value())?;
            sys.wait_serving(Proto::Http, t, T)?;
            let p = probe.stop_probe(&mut sys.lab)?;
            let first = p.first_ok_ms.context("the probe saw no answer")?;
            Ok((first - written).max(0.0))
        })();
        if let Some(c) = out.record(&format!("convergence {i}"), r) {
            say(&format!("convergence {i}: {c:.0} ms"));
            conv.push(c);
        }
    }
    out.keys
        .insert("convergence_ms_p50".into(), round(p50(&conv)));

    // 3b. Ingress convergence: an Ingress file written (a new host on the pool's ingress
    //     VIP, which the first trial allocates) -> first 200 for that host through the VIP.
    let conv = ingress_convergence(out, &mut sys)?;
    out.keys
        .insert("ingress_convergence_ms_p50".into(), round(p50(&conv)));

    // 4. Failed requests during reloads (new Services) and during endpoint churn.
    let r = (|| -> Result<(u64, u64, u64)> {
        // Reloads still in flight from an earlier step are counted before the step that
        // follows (a reload takes the actors up to a second).
        let reloads = |sys: &System| -> Result<u64> {
            sys.settled_haproxy_reloads(Duration::from_millis(1500), T)
        };
        let steady = Steady {
            rate: 300.0,
            concurrency: 6,
            max: Duration::from_secs(120),
        };
        let r0 = reloads(&sys)?;
        let load = traffic::start_load(
            &mut sys.lab,
            "client",
            "reload-load",
            Proto::Http,
            target,
            steady,
        )?;
        for i in 0..5 {
            let s = svc("default", &format!("extra{i}")).port(tcp("http", 80, 8080));
            sys.apply_service(&s)?;
            sys.wait_ips(&s.key(), T)?;
            std::thread::sleep(Duration::from_millis(700));
        }
        // The load goes on until the last reload is done.
        let r1 = reloads(&sys)?;
        let lr = load.stop_load(&mut sys.lab)?;
        say(&format!("reloads: {} reloads under load, {lr:?}", r1 - r0));
        if r1 == r0 {
            say("warning: no reload happened while adding Services");
        }
        let load = traffic::start_load(
            &mut sys.lab,
            "client",
            "churn-load",
            Proto::Http,
            target,
            steady,
        )?;
        let s = svc("default", "web").port(tcp("http", 80, 8080));
        let be = sys.backend_ips();
        for i in 0..20 {
            let set: Vec<(IpAddr, bool)> = match i % 4 {
                0 => vec![(be[0], true), (be[1], true)],
                1 => vec![(be[0], true), (be[1], false), (be[2], true)],
                2 => vec![(be[2], true)],
                _ => vec![(be[0], true), (be[1], true), (be[2], true)],
            };
            sys.apply("eps-default-web", &endpoint_slice(&s, "web-1", &set))?;
            std::thread::sleep(Duration::from_millis(250));
        }
        let r2 = reloads(&sys)?;
        let cr = load.stop_load(&mut sys.lab)?;
        say(&format!("churn: {} reloads, {cr:?}", r2 - r1));
        Ok((lr.failed, cr.failed, r2 - r1))
    })();
    if let Some((reload_failed, churn_failed, churn_reloads)) = out.record("reload/churn", r) {
        out.keys
            .insert("reload_failed_requests".into(), json!(reload_failed));
        out.keys
            .insert("churn_failed_requests".into(), json!(churn_failed));
        out.keys
            .insert("churn_reloads".into(), json!(churn_reloads));
    }

    // 5. Throughput.
    let r = throughput(&mut sys, ip);
    if let Some(v) = out.record("throughput", r) {
        for (k, x) in v {
            out.keys.insert(k, x);
        }
    }
    sys.lab.pass();
    Ok(())
}

/// Ingress created -> first answer through its VIP, 5 trials: each a new Ingress with its
/// own host on the same backend Service, so a trial measures the route change (the first
/// one also allocates the pool's ingress VIP).
fn ingress_convergence(out: &mut Out, sys: &mut System) -> Result<Vec<f64>> {
    let app = svc("default", "ingress-app").port(tcp("http", 80, 8080));
    let mut v = app.to_value();
    v["spec"]["type"] = json!("ClusterIP");
    sys.apply("svc-default-ingress-app", &v)?;
    sys.apply(
        "eps-default-ingress-app",
        &app.endpoints("ingress-app-1", &sys.backend_ips()),
    )?;
    sys.apply(
        "ingressclass-k8slb",
        &json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
                "metadata": {"name": "k8slb"},
                "spec": {"controller": "k8slb.io/ingress-controller"}}),
    )?;
    let mut conv = Vec::new();
    let mut vip: Option<IpAddr> = None;
    for i in 0..5u8 {
        std::thread::sleep(Duration::from_millis(1100));
        let host = format!("bench{i}.example");
        let ing = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"namespace": "default", "name": format!("bench{i}"),
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"ingressClassName": "k8slb", "rules": [{"host": host, "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "ingress-app", "port": {"number": 80}}}}]}}]},
        });
        let r = (|| -> Result<f64> {
            let Some(ip) = vip else {
                // The first Ingress: its VIP is not known before the plan; time from the
                // write to the first answer, polling the state for the address.
                let t0 = Instant::now();
                sys.apply(&format!("ing-bench{i}"), &ing)?;
                let mut ips = Vec::new();
                k8slb_tests::wait::until(T, || {
                    ips = sys
                        .state()?
                        .ingresses
                        .values()
                        .flat_map(|s| s.ips.clone())
                        .collect();
                    Ok(!ips.is_empty())
                })?;
                vip = Some(ips[0]);
                let t = SocketAddr::new(ips[0], 80);
                wait_host_answers(sys, t, &host)?;
                return Ok(t0.elapsed().as_secs_f64() * 1000.0);
            };
            let t = SocketAddr::new(ip, 80);
            let spawned = Instant::now();
            let probe = traffic::spawn_client(
                &mut sys.lab,
                "client",
                &format!("ingconv{i}"),
                &[
                    "probe",
                    "--proto",
                    "http",
                    "--target",
                    &t.to_string(),
                    "--host",
                    &host,
                    "--interval-ms",
                    "5",
                    "--timeout-ms",
                    "300",
                    "--duration-ms",
                    "20000",
                ],
            )?;
            std::thread::sleep(Duration::from_millis(200));
            let written = spawned.elapsed().as_secs_f64() * 1000.0;
            sys.apply(&format!("ing-bench{i}"), &ing)?;
            wait_host_answers(sys, t, &host)?;
            let p = probe.stop_probe(&mut sys.lab)?;
            let first = p.first_ok_ms.context("the probe saw no answer")?;
            Ok((first - written).max(0.0))
        })();
        if let Some(c) = out.record(&format!("ingress convergence {i}"), r) {
            say(&format!("ingress convergence {i}: {c:.0} ms"));
            // The first trial includes the VIP's allocation and VRRP election: kept
            // apart from the p50 of route changes.
            if i == 0 {
                out.keys
                    .insert("ingress_first_vip_ms".into(), json!(c.round()));
            } else {
                conv.push(c);
            }
        }
    }
    Ok(conv)
}

/// Waits until one request for `host` through `t` succeeds.
fn wait_host_answers(sys: &System, t: SocketAddr, host: &str) -> Result<()> {
    k8slb_tests::wait::until(T, || {
        let r = traffic::load_args(
            &sys.lab,
            "client",
            Proto::Http,
            t,
            &["-n", "1", "--timeout-ms", "300", "--host", host],
        )?;
        Ok(r.ok == 1)
    })
}

fn wrk(sys: &System, url: &str, secs: u64) -> Result<f64> {
    let d = format!("{secs}s");
    let out = sys
        .lab
        .check_in("client", &["wrk", "-t2", "-c32", "-d", &d, url])?;
    let rps = out
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .with_context(|| format!("no Requests/sec in wrk output: {out}"))?;
    let errors = out
        .lines()
        .find(|l| l.contains("Non-2xx") || l.contains("Socket errors"));
    if let Some(e) = errors {
        say(&format!("wrk {url}: {e}"));
    }
    Ok(rps)
}

fn throughput(sys: &mut System, _web_ip: IpAddr) -> Result<Vec<(String, Value)>> {
    k8slb_tests::bins::system("wrk")?;
    let secs = env_num("K8SLB_BENCH_WRK_SECONDS", 5);
    // Back to two backends on web, and an L4 Service on the same two.
    let be = sys.backend_ips();
    let two = [be[0], be[1]];
    let s7 = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply("eps-default-web", &s7.endpoints("web-1", &two))?;
    let s4 = svc("default", "web4")
        .port(tcp("http", 8081, 8080))
        .annotation("loadbalancer/mode", "tcp");
    sys.apply("eps-default-web4", &s4.endpoints("web4-1", &two))?;
    sys.apply("svc-default-web4", &s4.to_value())?;
    let ip7 = sys.wait_ips("default/web", T)?[0];
    let ip4 = sys.wait_ips("default/web4", T)?[0];
    sys.wait_serving(Proto::Http, SocketAddr::new(ip4, 8081), T)?;
    let master = sys.wait_one_holder(ip7, T)?;
    let master4 = sys.wait_one_holder(ip4, T)?;
    if master4 != master {
        say(&format!("note: web on {master}, web4 on {master4}"));
    }

    // The anchor: a minimal hand-written haproxy.cfg on the same node, same binary,
    // default thread count (as the generated config), same two backends.
    let node_ip = sys.lab.host(&master).v4;
    let maxconn = k8slb_tests::system::lab_maxconn().unwrap_or(20000);
    let cfg = format!(
        "global\n  maxconn {maxconn}\n\ndefaults\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\n\
         frontend f7\n  mode http\n  bind {node_ip}:9080\n  default_backend b7\n\n\
         backend b7\n  mode http\n  server s1 {}:8080\n  server s2 {}:8080\n\n\
         frontend f4\n  mode tcp\n  bind {node_ip}:9081\n  default_backend b4\n\n\
         backend b4\n  mode tcp\n  server s1 {}:8080\n  server s2 {}:8080\n",
        two[0], two[1], two[0], two[1]
    );
    let cfg_path = sys.lab.dir.join("baseline-haproxy.cfg");
    std::fs::write(&cfg_path, cfg)?;
    let cfg_s = cfg_path.to_string_lossy().into_owned();
    let base = sys.lab.spawn_in(
        &master,
        "baseline-haproxy",
        &["haproxy", "-db", "-f", &cfg_s],
    )?;
    sys.wait_serving(Proto::Http, SocketAddr::new(node_ip.into(), 9080), T)?;

    let direct_url = format!("http://{}:8080/", two[0]);
    let l7_url = format!("http://{ip7}/");
    let l4_url = format!("http://{ip4}:8081/");
    let b7_url = format!("http://{node_ip}:9080/");
    let b4_url = format!("http://{node_ip}:9081/");
    // Two rounds, interleaved, best of each (less noise from the shared cores).
    let mut best = [0.0f64; 5];
    for round in 0..2 {
        for (i, url) in [&direct_url, &l7_url, &l4_url, &b7_url, &b4_url]
            .iter()
            .enumerate()
        {
            let rps = wrk(sys, url, secs)?;
            say(&format!("wrk round {round} {url}: {rps:.0} req/s"));
            best[i] = best[i].max(rps);
        }
    }
    sys.lab.kill(base)?;
    let [direct, l7, l4, b7, b4] = best;
    Ok(vec![
        ("direct_rps".into(), json!(direct.round())),
        ("l7_rps".into(), json!(l7.round())),
        ("l4_rps".into(), json!(l4.round())),
        ("l7_baseline_rps".into(), json!(b7.round())),
        ("l4_baseline_rps".into(), json!(b4.round())),
        ("l7_throughput_ratio".into(), round(Some(l7 / direct))),
        ("l4_throughput_ratio".into(), round(Some(l4 / direct))),
        ("l7_baseline_ratio".into(), round(Some(b7 / direct))),
        ("l4_baseline_ratio".into(), round(Some(b4 / direct))),
    ])
}

fn run_default_keepalived(out: &mut Out) -> Result<()> {
    let trials = env_num("K8SLB_BENCH_DEFAULT_TRIALS", 3) as usize;
    say("starting a lab with keepalived's default advert_int (1 s)");
    let mut sys = System::start(Options::new("bench-ka1").advert_int(1.0))?;
    let (ip, target) = web(&sys)?;
    let gaps = run_trials(out, trials, "keepalived default, link cut", || {
        let r = link_cut_trial(&mut sys, ip, target);
        std::thread::sleep(Duration::from_secs(2));
        r
    });
    out.keys.insert(
        "keepalived_default_failover_ms_p50".into(),
        round(p50(&gaps)),
    );
    sys.lab.pass();
    Ok(())
}

fn uptime() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn soak_main() {
    let secs = env_num("K8SLB_BENCH_SOAK_S", 600);
    let opts = k8slb_tests::soak::SoakOptions::from_env(
        "bench-soak",
        Duration::from_secs(secs),
        Duration::from_secs(60),
    );
    let load_before = uptime();
    let mut keys = match k8slb_tests::soak::run(opts) {
        Ok(r) => {
            for f in &r.faults {
                say(&format!(
                    "fault {} on {} ({}): recovery {:?} ms, dark {:?} ms, {} failed in its window ({} while no other fault's window was open)",
                    f.kind.as_str(),
                    f.target,
                    f.note,
                    f.recovery_ms.iter().map(|x| x.round()).collect::<Vec<_>>(),
                    f.dark_ms.iter().map(|x| x.round()).collect::<Vec<_>>(),
                    f.failed,
                    f.unexplained
                ));
            }
            match r.json() {
                Value::Object(m) => m,
                _ => Map::new(),
            }
        }
        Err(e) => {
            eprintln!("bench: soak FAILED to run: {e:#}");
            let mut m = Map::new();
            m.insert("errors".into(), json!({"soak": format!("{e:#}")}));
            m
        }
    };
    keys.insert("loadavg_before".into(), json!(load_before));
    keys.insert("loadavg_after".into(), json!(uptime()));
    println!("{}", Value::Object(keys));
}

fn saturation_main() {
    let mut out = Out {
        keys: Map::new(),
        errors: Map::new(),
    };
    let secs = env_num("K8SLB_BENCH_SATURATION_S", 120);
    let trials = env_num("K8SLB_BENCH_TRIALS", 10) as usize;
    let rt = env_num("K8SLB_BENCH_SATURATION_RT", 1) != 0;
    let mut runs = vec![(0.1, "100ms", false, 0), (0.05, "50ms", false, trials)];
    if rt {
        runs.push((0.05, "50ms_rt", true, 0));
    }
    for (advert, tag, rt, trials) in runs {
        let r = saturation(&mut out, advert, tag, rt, secs, trials);
        out.record(&format!("saturation {tag}"), r);
    }
    out.keys.insert(
        "cpus".into(),
        json!(std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)),
    );
    if !out.errors.is_empty() {
        out.keys
            .insert("errors".into(), Value::Object(out.errors.clone()));
    }
    println!("{}", Value::Object(out.keys));
}

/// keepalived's state-change lines in an actor's log from byte `from` on.
fn master_lines(log: &str, from: usize) -> u64 {
    log.get(from..)
        .unwrap_or("")
        .lines()
        .filter(|l| l.contains("Entering MASTER STATE"))
        .count() as u64
}

/// One saturation pass: a lab at `advert`, three Services (three pools, so several VRRP
/// instances), `nproc` burners per LB node for `secs`, then `trials` link cuts.
fn saturation(
    out: &mut Out,
    advert: f64,
    tag: &str,
    rt: bool,
    secs: u64,
    trials: usize,
) -> Result<()> {
    use k8slb_tests::soak::{Sampler, Traffic};
    say(&format!(
        "saturation {tag}: a lab with advert_int {advert} s, 2 LB nodes{}",
        if rt {
            ", keepalived under SCHED_RR"
        } else {
            ""
        }
    ));
    let mut sys = System::start(
        Options::new(&format!("sat{}", tag.replace('_', "")))
            .advert_int(advert)
            .backends(2),
    )?;
    let services = [
        svc("default", "web").port(tcp("http", 80, 8080)),
        svc("default", "pub")
            .port(tcp("http", 80, 8080))
            .annotation("loadbalancer/pool", "public"),
        svc("default", "ext")
            .port(tcp("http", 80, 8080))
            .annotation("loadbalancer/pool", "external"),
    ];
    for s in &services {
        sys.apply_service(s)?;
    }
    let mut targets = Vec::new();
    let mut vips = Vec::new();
    for s in &services {
        let ip = sys.wait_ips(&s.key(), T)?[0];
        let t = SocketAddr::new(ip, 80);
        sys.wait_serving(Proto::Http, t, T)?;
        sys.wait_one_holder(ip, T)?;
        targets.push(t);
        vips.push(ip);
    }
    let nodes: Vec<(String, String)> = sys
        .lb_nodes()
        .into_iter()
        .map(|n| {
            let ns = sys.lab.host(&n).ns.clone();
            (n, ns)
        })
        .collect();
    let mut policy = Vec::new();
    for (n, _) in &nodes {
        for pid in sys.pids_named(n, "keepalived")? {
            if rt {
                k8slb_tests::lab::sh(&["chrt", "-r", "-p", "10", &pid.to_string()])?;
            }
            let p = k8slb_tests::lab::sh(&["chrt", "-p", &pid.to_string()])?;
            policy.push(format!(
                "{n}/{pid}: {}",
                p.lines().next().unwrap_or("").trim()
            ));
        }
    }
    say(&format!("keepalived scheduling: {policy:?}"));
    // Settle: the sampler's first pass sees the holders as they are.
    std::thread::sleep(Duration::from_secs(2));
    let mut sampler = Sampler::start(nodes.clone(), Duration::from_secs_f64(3.0 * advert));
    sampler.fresh();
    let mut traffic = Traffic::start(
        &sys.lab.host("client").ns,
        &targets,
        Duration::from_millis(50),
    );
    let offsets: Vec<(String, usize)> = sys
        .lb_nodes()
        .iter()
        .map(|n| (n.clone(), sys.lab.log(sys.actors[n]).len()))
        .collect();
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let mut burners = Vec::new();
    for (n, _) in &nodes {
        for i in 0..ncpu {
            burners.push(sys.lab.spawn_in(
                n,
                &format!("burner{i}"),
                &["sh", "-c", "while :; do :; done"],
            )?);
        }
    }
    let load0 = uptime();
    say(&format!(
        "saturation {tag}: {} burners for {secs} s (load {load0})",
        burners.len()
    ));
    std::thread::sleep(Duration::from_secs(secs));
    let load1 = uptime();
    for b in burners {
        sys.lab.kill(b)?;
    }
    traffic.stop();
    sampler.stop();
    let (changes, list, gap) = sampler.with(|s| {
        (
            s.holder_changes,
            s.changes
                .iter()
                .take(10)
                .map(|(_, ip, a, b)| format!("{ip}: {a:?} -> {b:?}"))
                .collect::<Vec<_>>(),
            s.max_pass_gap_ms,
        )
    });
    let masters: u64 = offsets
        .iter()
        .map(|(n, off)| master_lines(&sys.lab.log(sys.actors[n]), *off))
        .sum();
    let failed: u64 = (0..targets.len())
        .map(|i| {
            traffic
                .records(i)
                .iter()
                .filter(|q| q.error.is_some())
                .count() as u64
        })
        .sum();
    say(&format!(
        "saturation {tag}: {changes} VIP holder changes {list:?}, {masters} keepalived MASTER transitions, {failed} failed requests, sampler max gap {gap:.0} ms, load {load0} -> {load1}"
    ));
    out.keys
        .insert(format!("false_failovers_advert_{tag}"), json!(changes));
    out.keys.insert(
        format!("keepalived_master_transitions_advert_{tag}"),
        json!(masters),
    );
    out.keys.insert(
        format!("saturation_failed_requests_advert_{tag}"),
        json!(failed),
    );
    out.keys
        .insert(format!("saturation_loadavg_advert_{tag}"), json!(load1));
    out.keys
        .insert(format!("keepalived_sched_advert_{tag}"), json!(policy));

    if trials > 0 {
        let (ip, target) = (vips[0], targets[0]);
        let mut gaps = Vec::new();
        for i in 0..trials {
            if let Some(g) = out.record(
                &format!("link cut {tag} trial {i}"),
                link_cut_trial(&mut sys, ip, target),
            ) {
                say(&format!(
                    "link cut advert {advert} trial {i}: dark {g:.0} ms"
                ));
                gaps.push(g);
            }
        }
        out.keys
            .insert(format!("failover_ms_p50_advert_{tag}"), round(p50(&gaps)));
        out.keys
            .insert(format!("failover_ms_max_advert_{tag}"), round(max(&gaps)));
    }
    sys.lab.pass();
    Ok(())
}
