//! The HAProxy Runtime API path of the actor, end to end: an endpoint-only change of one
//! Service applied through the real apply pipeline ([`Applier`] with the production
//! [`RealRenderer`]: view + `runtime_diff` + Runtime API; the config file follows after
//! 1 s quiet)
//! to a real HAProxy, with zero reloads. For 1,000, 5,000, 9,000 and 10,000 Services (2
//! ports, 10 endpoints each, one pool); a size whose listeners do not fit the file
//! descriptor limit is reported as `NOT MEASURED` with the reason.
//!
//! `cargo bench -p k8slb-actor --bench runtime` (as root; haproxy and iproute2 installed).
//! Without them it prints `runtime bench: SKIPPED: <reason>` and exits 0 (a missing
//! prerequisite is reported, never replaced by numbers). Exit code 1 when a change does
//! not go over the Runtime API or HAProxy reloaded. `K8SLB_BENCH_SIZES=1000` picks sizes.
//!
//! HAProxy runs in a network namespace the bench creates (`k8slbb-<pid>`, deleted on
//! drop, even on panic) through a wrapper script (`exec ip netns exec <ns> haproxy "$@"`);
//! every address is in 198.18.0.0/15 (VIPs 198.18.1.0+, bound with `ip_nonlocal_bind`
//! inside the namespace; endpoints 198.19.x.y, unrouted) and no port has health checks,
//! so HAProxy sends nothing anywhere.
//!
//! Per change it prints the apply time, and for comparison the pure parts measured
//! separately on the same states: `view_with_previous`, `runtime_diff`, and the full
//! render + write + fsync + rename that the apply skips on this path (it happens once,
//! when the changes are quiet).

#[path = "../tests/support/mod.rs"]
mod support;

use k8slb_actor::admin::Metrics;
use k8slb_actor::apply::{Applied, Applier, NodeContext, NodeRenderer, SlotOutcome};
use k8slb_actor::daemons::{Haproxy, Paths};
use k8slb_actor::node_renderer::RealRenderer;
use k8slb_actor::render::Renderer;
use k8slb_actor::view::ViewOptions;
use k8slb_common::state::{Provider, State};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{Netns, NoKeepalived};

/// 9,000: the largest size that fits a hard `RLIMIT_NOFILE` of 20,000 (one socket per
/// listener), for machines that cannot raise it.
/// The allocator of the `k8slb-actor` binary (actor/src/main.rs), so the numbers are its.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DEFAULT_SIZES: &[usize] = &[1_000, 5_000, 9_000, 10_000];
const CHANGES: usize = 50;
/// The veth end inside the namespace that carries the pool (198.18.0.1/24).
const IFNAME: &str = "kb0";

fn main() {
    if let Some(why) = support::missing_prerequisite(&["ip", "haproxy"]) {
        eprintln!("runtime bench: SKIPPED: {why}");
        return;
    }
    let sizes: Vec<usize> = match std::env::var("K8SLB_BENCH_SIZES") {
        Ok(s) => s
            .split(',')
            .map(|x| {
                x.trim()
                    .parse()
                    .expect("K8SLB_BENCH_SIZES: comma-separated numbers")
            })
            .collect(),
        Err(_) => DEFAULT_SIZES.to_vec(),
    };
    let mut failed = false;
    for n in sizes {
        match run_size(n) {
            Ok(()) => {}
            Err(Failure::Bug(why)) => {
                eprintln!("runtime bench: FAILED services={n}: {why}");
                failed = true;
            }
            Err(Failure::NotMeasured(why)) => {
                // Reported on stdout with the numbers, so a missing size is visible there.
                println!("runtime_api_endpoint_change services={n} NOT MEASURED: {why}");
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}

enum Failure {
    /// A change that did not take the Runtime API path, a reload, a wrong result.
    Bug(String),
    /// This size could not be set up (HAProxy did not start in time, ...).
    NotMeasured(String),
}

/// The bench's network namespace (`k8slbb-<pid>-0`, deleted on drop after killing what
/// runs inside): a veth with 198.18.0.1/24, and binding to addresses nobody holds allowed
/// (no keepalived holds the VIPs here), as the actor arranges in production.
fn netns() -> Netns {
    let ns = Netns::new("k8slbb");
    ns.veth(IFNAME, "kb1", "198.18.0.1/24");
    let out = ns
        .cmd("sh")
        .args(["-c", "echo 1 > /proc/sys/net/ipv4/ip_nonlocal_bind"])
        .status();
    assert!(
        out.is_ok_and(|s| s.success()),
        "ip_nonlocal_bind in {}",
        ns.name
    );
    ns
}

/// Endpoint `e` of Service `i`: 198.19.0.1 ..= 198.19.249.250 (the third octet 255 is
/// left free for the changes).
fn endpoint_ip(i: usize, e: usize) -> String {
    format!("198.19.{}.{}", (i / 25) % 250, (i % 25) * 10 + e + 1)
}

/// `n` Services with one VIP each (198.18.1.1 ...), ports 80/http and 443/tcp, 10
/// endpoints each, no health checks; one pool, one VRRP instance owned by lb-1.
fn big_state(n: usize) -> State {
    let mut vip_list = Vec::with_capacity(n);
    let mut vips = serde_json::Map::new();
    let mut services = serde_json::Map::new();
    for i in 0..n {
        let ip = format!("198.18.{}.{}", 1 + i / 250, i % 250 + 1);
        let key = format!("ns{}/svc{}", i % 100, i);
        vip_list.push(ip.clone());
        vips.insert(
            ip.clone(),
            json!({"pool": "default", "vrid": 11, "owner": "lb-1", "services": [key]}),
        );
        let ports: Vec<Value> = [(80, "http"), (443, "tcp")]
            .iter()
            .map(|&(port, mode)| {
                let eps: Vec<Value> = (0..10)
                    .map(|e| json!({"ip": endpoint_ip(i, e), "port": 8080}))
                    .collect();
                json!({"protocol": "TCP", "port": port, "mode": mode, "tls": false,
                       "redirect": false, "backendTls": false, "check": false,
                       "stickiness": "none", "stickinessTimeoutS": 10800, "sourceRanges": [],
                       "endpoints": eps})
            })
            .collect();
        services.insert(
            key,
            json!({"ips": [ip], "pool": "default", "ipMode": "Proxy", "ports": ports}),
        );
    }
    vip_list.sort_by_key(|s| s.parse::<std::net::IpAddr>().unwrap());
    let state = json!({
        "version": 1,
        "config": {
            "pools": {"default": {"network": "198.18.0.0/16", "prefixLen": 16, "family": "v4",
                                  "first": "198.18.1.0"}},
            "keepalived": {"advertIntMs": 100, "unicast": false, "preempt": false,
                           "emailServerTimeoutS": 30, "garpRepeat": 5, "garpMasterDelayS": 5},
            "haproxy": {"global": [], "defaults": ["balance leastconn"],
                        "tcpfront": [], "httpfront": [], "tcpback": [], "httpback": []},
            "nginx": {"global": [], "http": [], "proxy": [], "upstream": [], "stream": []},
            "certPath": "/etc/certs",
        },
        "nodes": {"lb-1": {"addresses": ["198.18.0.1"]}, "lb-2": {"addresses": ["198.18.0.2"]}},
        "instances": [{"vrid": 11, "name": "k8slb_default_11", "pool": "default", "family": "v4",
                       "members": [{"node": "lb-1", "priority": 150}, {"node": "lb-2", "priority": 100}],
                       "vips": vip_list}],
        "vips": vips,
        "services": services,
        "problems": [],
    });
    State::from_json(&state.to_string()).expect("bench state is valid")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn p50(samples: &[Duration]) -> f64 {
    let mut s = samples.to_vec();
    s.sort();
    ms(pct(&s, 50.0))
}

/// What the pipeline's `write_live` does with the config text: temporary file in the
/// same directory, write, fsync, rename.
fn write_fsync_rename(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".bench-")
        .tempfile_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// HAProxy holds one socket per listener (2 per Service here) plus its own reserve; it
/// raises `RLIMIT_NOFILE` itself, which fails above the hard limit without
/// `CAP_SYS_RESOURCE` (as in some containers). Probe with the same rights first.
fn fd_limit_ok(n: usize) -> Result<(), String> {
    let needed = 2 * n + 256;
    let sh = |cmd: &str| Command::new("sh").arg("-c").arg(cmd).output();
    let raised = sh(&format!(
        "ulimit -Hn {needed} 2>/dev/null || [ \"$(ulimit -Hn)\" -ge {needed} ]"
    ));
    if raised.is_ok_and(|o| o.status.success()) {
        return Ok(());
    }
    let hard = sh("ulimit -Hn")
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    Err(format!(
        "HAProxy needs about {needed} file descriptors ({} listeners + reserve); the hard limit is {} and cannot be raised here (no CAP_SYS_RESOURCE)",
        2 * n,
        hard.trim()
    ))
}

fn run_size(n: usize) -> Result<(), Failure> {
    let setup = Failure::NotMeasured;
    fd_limit_ok(n).map_err(setup)?;
    let t = Instant::now();
    let mut state = big_state(n);
    eprintln!("services={n}: state built in {:.0} ms", ms(t.elapsed()));

    let ns = netns();
    let dir = tempfile::tempdir().map_err(|e| setup(format!("tempdir: {e}")))?;
    let paths = Paths::new(dir.path());
    let wrapper = ns.wrapper(dir.path(), "haproxy");

    // As `run()` fills it.
    let mut base = ViewOptions::new(Provider::Haproxy);
    base.runtime_socket = paths.haproxy_runtime_socket();
    base.pid_file = paths.haproxy_pid();
    base.track_file = paths.proxy_health();
    base.interfaces
        .insert("default".parse().unwrap(), IFNAME.parse().unwrap());
    let real = RealRenderer::new(
        Renderer::embedded().map_err(|e| setup(format!("templates: {e}")))?,
        "lb-1".parse().unwrap(),
        base,
    );
    let metrics = Arc::new(Metrics::new());
    let mut applier = Applier::new(
        real,
        Box::new(NoKeepalived {
            cfg: paths.keepalived_conf(),
            up: false,
        }),
        Some(Box::new(Haproxy::new(wrapper, paths.clone()))),
        metrics,
    );
    applier.min_reload_interval = Duration::ZERO;
    let ctx = NodeContext::default();

    let t = Instant::now();
    let first = applier.apply(&state, &ctx, Instant::now());
    let first_apply = t.elapsed();
    match &first {
        Ok(Applied::Done {
            proxy: Some(SlotOutcome::Started),
            ..
        }) => {}
        other => {
            applier.stop_proxy(Duration::from_secs(3));
            return Err(setup(format!(
                "first apply (check + start HAProxy) gave {other:?} after {:.0} ms",
                ms(first_apply)
            )));
        }
    }
    let cfg_bytes = std::fs::metadata(paths.haproxy_cfg())
        .map(|m| m.len())
        .unwrap_or(0);
    // Where the first apply goes: the same `haproxy -c` again, alone.
    let t = Instant::now();
    let check = applier
        .proxy()
        .expect("proxy slot")
        .daemon()
        .check(&paths.haproxy_cfg());
    let check_t = t.elapsed();
    eprintln!(
        "services={n}: first apply (view + render + haproxy -c + start) {:.0} ms, of which haproxy -c alone takes {:.0} ms ({check:?}); haproxy.cfg {cfg_bytes} bytes",
        ms(first_apply),
        ms(check_t)
    );

    let result = changes(
        n,
        &mut state,
        &mut applier,
        &ctx,
        &paths,
        first_apply,
        cfg_bytes,
    );
    applier.stop_proxy(Duration::from_secs(3));
    drop(applier);
    drop(ns);
    result
}

fn changes(
    n: usize,
    state: &mut State,
    applier: &mut Applier<RealRenderer>,
    ctx: &NodeContext,
    paths: &Paths,
    first_apply: Duration,
    cfg_bytes: u64,
) -> Result<(), Failure> {
    let bug = Failure::Bug;
    // The pure parts, on a renderer of our own with the same options, following the
    // same chain of views as the applier.
    let pure = RealRenderer::new(
        Renderer::embedded().map_err(|e| bug(format!("templates: {e}")))?,
        applier.renderer().node.clone(),
        applier.renderer().base.clone(),
    );
    let mut prev = pure
        .view(state, ctx, None)
        .map_err(|e| bug(e.to_string()))?;
    let scratch = paths.work_dir.join("bench-write-test.cfg");

    let (mut apply_t, mut view_t, mut diff_t, mut render_t, mut write_t) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut commands = 0;
    let mut last = None;
    for k in 0..CHANGES {
        let idx = k * n / CHANGES;
        let new_ip = format!("198.19.255.{}", k + 1);
        let (key, svc) = state.services.iter_mut().nth(idx).expect("service index");
        svc.ports[0].endpoints[3].ip = new_ip.parse().unwrap();
        let backend = format!("be_{}_{}_{}", key.namespace, key.name, svc.ports[0].port);

        let t = Instant::now();
        let v = pure
            .view(state, ctx, Some(&prev))
            .map_err(|e| bug(e.to_string()))?;
        view_t.push(t.elapsed());
        let t = Instant::now();
        let cmds = pure.runtime_diff(&prev, &v);
        diff_t.push(t.elapsed());
        let Some(cmds) = cmds else {
            return Err(bug(format!(
                "change {k}: runtime_diff says a reload is needed for one endpoint of {backend}"
            )));
        };
        commands = cmds.len();
        let t = Instant::now();
        let desired = pure.render(&v).map_err(|e| bug(e.to_string()))?;
        render_t.push(t.elapsed());
        let text = desired.proxy.unwrap_or_default();
        let t = Instant::now();
        write_fsync_rename(&scratch, &text).map_err(|e| bug(format!("scratch write: {e}")))?;
        write_t.push(t.elapsed());
        prev = v;

        let t = Instant::now();
        let r = applier.apply(state, ctx, Instant::now());
        apply_t.push(t.elapsed());
        match r {
            Ok(Applied::Done {
                proxy: Some(SlotOutcome::Runtime),
                ..
            }) => {}
            other => {
                return Err(bug(format!(
                    "change {k} ({backend} endpoint 4 -> {new_ip}) was not applied over the Runtime API: {other:?}"
                )))
            }
        }
        last = Some((backend, new_ip));
    }
    let _ = std::fs::remove_file(&scratch);

    // The file lags the Runtime API on purpose; the supervisor brings it up to date once
    // the changes are quiet (as the actor's loop does every tick).
    applier.supervise(Instant::now() + k8slb_actor::apply::FILE_SYNC_QUIET);
    // HAProxy serves the last change, and the file on disk follows.
    let (backend, ip) = last.expect("at least one change");
    let servers = k8slb_actor::haproxy_rt::send(
        &paths.haproxy_runtime_socket(),
        &format!("show servers state {backend}"),
    )
    .map_err(|e| bug(format!("show servers state: {e}")))?;
    if !servers.contains(&format!(" {ip} ")) {
        return Err(bug(format!(
            "HAProxy does not have {ip} in {backend}:\n{servers}"
        )));
    }
    let on_disk = std::fs::read_to_string(paths.haproxy_cfg()).unwrap_or_default();
    if !on_disk.contains(&format!("{ip}:8080")) {
        return Err(bug(format!("{ip} is not in the haproxy.cfg on disk")));
    }
    let reloads = k8slb_actor::haproxy_rt::show_proc(&paths.haproxy_master_socket())
        .map_err(|e| bug(format!("show proc: {e}")))?
        .master_reloads();

    let mut sorted = apply_t.clone();
    sorted.sort();
    println!(
        "runtime_api_endpoint_change services={n} changes={CHANGES} p50_ms={:.2} p99_ms={:.2} max_ms={:.2} reloads={reloads} first_apply_ms={:.0}",
        ms(pct(&sorted, 50.0)),
        ms(pct(&sorted, 99.0)),
        ms(sorted[sorted.len() - 1]),
        ms(first_apply),
    );
    println!(
        "runtime_api_breakdown services={n} view_with_previous_p50_ms={:.2} runtime_diff_p50_ms={:.3} (in the apply) full_render_p50_ms={:.2} cfg_write_fsync_p50_ms={:.2} (skipped by the apply, done once after 1 s quiet) cfg_bytes={cfg_bytes} commands_per_change={commands}",
        p50(&view_t),
        p50(&diff_t),
        p50(&render_t),
        p50(&write_t),
    );
    if reloads != 0 {
        return Err(bug(format!(
            "HAProxy reloaded {reloads} times for endpoint-only changes (expected 0)"
        )));
    }
    Ok(())
}
