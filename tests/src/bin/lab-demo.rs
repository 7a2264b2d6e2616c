//! lab-demo: k8slb end to end in a throw-away lab (run by ./scripts/demo.sh, as root).
//!
//! Two LB nodes and two backends in network namespaces, the real watcher on a directory of
//! YAML, the real actors with keepalived and HAProxy; applies the seed README's
//! `myapp-loadbalancer`, prints it like `kubectl get services`, sends requests through the
//! VIP, cuts the master's link and prints how long the VIP was dark, then cleans up.

use anyhow::{Context, Result};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::{self, Proto};
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);

fn main() {
    if let Err(e) = run() {
        eprintln!("\ndemo FAILED: {e:#}");
        std::process::exit(1);
    }
}

fn step(s: &str) {
    println!("\n\x1b[1m==> {s}\x1b[0m");
}

fn run() -> Result<()> {
    let proxy = std::env::var("K8SLB_DEMO_PROXY").unwrap_or_else(|_| "haproxy".into());
    step(&format!(
        "Starting a lab: 2 LB nodes (k8slb-actor + keepalived + {proxy}), 2 backends, 1 client"
    ));
    let t0 = Instant::now();
    let mut sys = System::start(Options::new("demo").proxy(&proxy))?;
    for h in sys.lab.hosts() {
        println!("  {:<7} {:<24} {} / {}", h.name, h.ns, h.v4, h.v6);
    }
    println!(
        "  watcher: k8slb-watcher run --source files:{} --state-out file:{}",
        sys.objects_dir.display(),
        sys.state_path.display()
    );
    println!("  ready in {:.1} s", t0.elapsed().as_secs_f64());

    step("kubectl apply -f myapp-loadbalancer.yml  (the seed README's first example)");
    print!("{}", indent(k8slb_tests::seed::MYAPP_HTTP));
    let endpoints: Vec<_> = sys
        .backend_ips()
        .iter()
        .map(|a| json!({"addresses": [a.to_string()], "conditions": {"ready": true}}))
        .collect();
    sys.apply(
        "myapp-endpointslice",
        &json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "myapp-loadbalancer-x1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "myapp-loadbalancer"}},
            "addressType": "IPv4", "endpoints": endpoints,
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        }),
    )?;
    let applied = Instant::now();
    sys.apply_text("myapp-loadbalancer.yml", k8slb_tests::seed::MYAPP_HTTP)?;
    let ip = sys.wait_ips("default/myapp-loadbalancer", T)?[0];
    let target = SocketAddr::new(ip, 80);
    sys.wait_serving(Proto::Http, target, T)?;
    println!(
        "  serving through {ip} {:.0} ms after the file was written",
        applied.elapsed().as_secs_f64() * 1000.0
    );

    step("kubectl get services -n default");
    print_services(&sys)?;

    step(&format!("curl http://{ip}/  (10 times, from the client)"));
    for i in 1..=10 {
        let body = sys.lab.check_in(
            "client",
            &["curl", "-sf", "-m", "5", &format!("http://{ip}/")],
        )?;
        let backend = body.lines().next().unwrap_or("");
        println!("  request {i:>2}: {backend}");
    }

    let master = sys.wait_one_holder(ip, T)?;
    step(&format!(
        "Cutting {master}'s link (it holds {ip}); probing the VIP every 10 ms"
    ));
    let probe = traffic::start_probe(&mut sys.lab, "client", "probe", Proto::Http, target, 10, T)?;
    std::thread::sleep(Duration::from_millis(500));
    sys.lab.cut_link(&master)?;
    let mut new_master = String::new();
    k8slb_tests::wait::until(T, || {
        let h = sys.holders(ip)?;
        if let Some(n) = h.iter().find(|n| **n != master) {
            new_master = n.clone();
            return Ok(true);
        }
        Ok(false)
    })
    .context("no backup took the VIP")?;
    sys.wait_serving(Proto::Http, target, T)?;
    std::thread::sleep(Duration::from_millis(500));
    let p = probe.stop_probe(&mut sys.lab)?;
    println!("  {ip} moved {master} -> {new_master}");
    println!(
        "  the VIP was dark for {:.0} ms ({} probes ok, {} failed; keepalived's defaults take about 3500 ms)",
        p.max_gap_ms, p.ok, p.failed
    );
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 20, 0.0)?;
    println!(
        "  after the cut: {} ok, {} failed, answered by {:?}",
        r.ok, r.failed, r.by_backend
    );

    step("Cleaning up (processes and namespaces)");
    sys.lab.restore_link(&master)?;
    sys.lab.pass();
    let errors = sys.lab.teardown();
    if !errors.is_empty() {
        anyhow::bail!("teardown: {errors:?}");
    }
    println!("  done in {:.1} s total", t0.elapsed().as_secs_f64());
    Ok(())
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}

fn print_services(sys: &System) -> Result<()> {
    let st = sys.state()?;
    println!(
        "  {:<22} {:<14} {:<12} {:<28} PORT(S)",
        "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP"
    );
    for (key, s) in &st.services {
        let key = key.to_string();
        let name = key.split_once('/').map(|(_, n)| n).unwrap_or(&key);
        let ext = if s.ips.is_empty() {
            "<pending>".to_string()
        } else {
            s.ips
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let ports = s
            .ports
            .iter()
            .map(|p| format!("{}/{:?}", p.port, p.protocol).to_uppercase())
            .collect::<Vec<_>>()
            .join(",");
        println!(
            "  {:<22} {:<14} {:<12} {:<28} {}",
            name, "LoadBalancer", "<none>", ext, ports
        );
    }
    Ok(())
}
