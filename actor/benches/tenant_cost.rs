//! `cargo bench -p k8slb-actor --bench tenant_cost`: what one tenant's routes cost the
//! others (issue 20). Prints one line per measure.
//!
//! - Render time and size of 64, 128 and 256 nested conditional Prefix rules with a
//!   header match and a filter each (`tests/support/tenant_routes.rs`), nginx and HAProxy
//!   (goal: linear, <= 100 ms at 256). Before the fix: 17.5 MB of nginx.conf at 128 rules,
//!   136 MB and 4.4 s at 256.
//! - As root: the latency of requests to one host (`quiet.example.com`, one Prefix `/`
//!   rule) through a real HAProxy when another host of the same listener has 0 and then
//!   8,000 rules that match a header (goal: within 10%), and of that busy host's own last
//!   rule, over one keep-alive connection, in a network namespace the bench creates
//!   (198.18.0.10 on its loopback; backends on 127.0.0.1). 8,000 is above the default
//!   `limits.conditionalRulesPerHost` (256): an admin who raised it. Before the fix:
//!   57 µs without, 404 µs with them.
//!   Without root, this part is skipped with a line that says so.
//! - As root: HAProxy's CPU time per request of a route that mirrors every request to 0,
//!   1, 4 and 16 backends (a tenant's RequestMirror costs the proxy every tenant shares),
//!   and the copies that arrived. Skipped without root, with a line that says so.

#[path = "../tests/support/tenant_routes.rs"]
mod tenant_routes;

use k8slb_actor::render::{HttpRenderOptions, HttpRenderer};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = None;
    for _ in 0..runs {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed());
        out = Some(v);
    }
    (best, out.expect("at least one run"))
}

fn render_part() {
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    for n in [64, 128, 256] {
        let routes = tenant_routes::nested_conditional(n);
        let (nx_t, nx) = best_of(5, || r.nginx(&routes, &o).unwrap());
        let (hp_t, hp) = best_of(5, || r.haproxy(&routes, &o, &[]).unwrap());
        let hp_files: usize = hp.files.values().map(String::len).sum();
        println!(
            "nested conditional rules {n:>3}: nginx {:>8.2} ms {:>9} bytes | haproxy {:>8.2} ms {:>9} bytes (+{hp_files} bytes of maps)",
            nx_t.as_secs_f64() * 1e3,
            nx.text.len(),
            hp_t.as_secs_f64() * 1e3,
            hp.text.len(),
        );
    }
}

// ---------------------------------------------------------------------------------------
// Latency through a real HAProxy (root).

struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = format!("k8slbtc{}", std::process::id());
        let ip = |args: &[&str]| {
            let st = Command::new("ip").args(args).status().expect("ip");
            assert!(st.success(), "ip {args:?}");
        };
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        ip(&["-n", &name, "addr", "add", "198.18.0.10/32", "dev", "lo"]);
        Netns(name)
    }
}

/// Move the calling thread into the namespace `name`.
fn enter(name: &str) {
    let f = std::fs::File::open(Path::new("/run/netns").join(name)).unwrap();
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A backend answering every request `200` with a one-byte body, on a thread of the
/// namespace (each connection on a thread of its own); counts the requests it answered.
fn backend(ns: &Netns, port: u16) -> Arc<AtomicU64> {
    let name = ns.0.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let answered = Arc::new(AtomicU64::new(0));
    let count = answered.clone();
    std::thread::spawn(move || {
        enter(&name);
        let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
        tx.send(()).unwrap();
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let count = count.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                let mut pending = Vec::new();
                loop {
                    let n = match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    pending.extend_from_slice(&buf[..n]);
                    while let Some(end) = find(&pending, b"\r\n\r\n") {
                        pending.drain(..end + 4);
                        if c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na")
                            .is_err()
                        {
                            return;
                        }
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    rx.recv().unwrap();
    answered
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Send `count` requests for `host` with `headers` over one keep-alive connection to
/// `vip`; the time of each.
fn requests(vip: &str, host: &str, headers: &str, count: usize) -> Vec<Duration> {
    let mut c = TcpStream::connect((vip, 80)).unwrap();
    c.set_nodelay(true).unwrap();
    let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n");
    let mut buf = vec![0u8; 4096];
    let mut times = Vec::with_capacity(count);
    for _ in 0..count {
        let t = Instant::now();
        c.write_all(req.as_bytes()).unwrap();
        let mut got = Vec::new();
        loop {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0, "connection closed");
            got.extend_from_slice(&buf[..n]);
            if let Some(end) = find(&got, b"\r\n\r\n") {
                // Content-Length: 1 from the backend.
                if got.len() > end + 4 {
                    break;
                }
            }
        }
        times.push(t.elapsed());
        assert!(
            got.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&got)
        );
    }
    times
}

fn median_us(mut times: Vec<Duration>) -> f64 {
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1e6
}

/// The median of `v`.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A HAProxy in `ns` serving `routes` on `vip` (files in `dir`).
fn haproxy(ns: &Netns, dir: &Path, routes: &k8slb_common::routes::HttpRoutes) -> Killed {
    let o = HttpRenderOptions {
        files_dir: dir.to_path_buf(),
        // The internal hops' sockets (conditional hosts, RequestMirror).
        hop_dir: dir.join("hop"),
        ..HttpRenderOptions::default()
    };
    k8slb_actor::daemons::make_private_dir(&o.hop_dir).unwrap();
    let hp = HttpRenderer::embedded()
        .unwrap()
        .haproxy(routes, &o, &[])
        .unwrap();
    for (f, t) in &hp.files {
        std::fs::write(f, t).unwrap();
    }
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  maxconn 1000\n  expose-experimental-directives\n\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n{}\n",
            hp.text
        ),
    )
    .unwrap();
    Killed(
        Command::new("ip")
            .args(["netns", "exec", &ns.0, "haproxy", "-db", "-f"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .spawn()
            .expect("haproxy (apt-get install -y haproxy)"),
    )
}

const ROUNDS: usize = 15;
const PER_ROUND: usize = 3000;

fn latency_part() {
    if !nix::unistd::Uid::effective().is_root() {
        println!("haproxy latency: skipped (needs root: a network namespace)");
        return;
    }
    let ns = Netns::new();
    let st = Command::new("ip")
        .args(["-n", &ns.0, "addr", "add", "198.18.0.11/32", "dev", "lo"])
        .status()
        .unwrap();
    assert!(st.success());
    backend(&ns, 18081);
    backend(&ns, 18082);
    // Two HAProxys side by side, measured in alternating rounds (the machine's load
    // moves; both see the same): 198.18.0.10 without conditional rules, 198.18.0.11
    // with 8,000 on the busy host.
    let (d0, d1) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let eps = (("127.0.0.1", 18081), ("127.0.0.1", 18082));
    let none = tenant_routes::busy_neighbour(0, eps.0, eps.1);
    let mut busy = tenant_routes::busy_neighbour(8000, eps.0, eps.1);
    busy.listeners[0].ip = "198.18.0.11".parse().unwrap();
    let _h0 = haproxy(&ns, d0.path(), &none);
    let _h1 = haproxy(&ns, d1.path(), &busy);
    let name = ns.0.clone();
    let (q0, q1, own) = std::thread::spawn(move || {
        enter(&name);
        let deadline = Instant::now() + Duration::from_secs(60);
        for vip in ["198.18.0.10", "198.18.0.11"] {
            while TcpStream::connect((vip, 80)).is_err() {
                assert!(Instant::now() < deadline, "haproxy did not listen on {vip}");
                std::thread::sleep(Duration::from_millis(50));
            }
            requests(vip, "quiet.example.com", "", 1000); // warm up
        }
        let (mut q0, mut q1) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            q0.push(median_us(requests(
                "198.18.0.10",
                "quiet.example.com",
                "",
                PER_ROUND,
            )));
            q1.push(median_us(requests(
                "198.18.0.11",
                "quiet.example.com",
                "",
                PER_ROUND,
            )));
        }
        let own = median_us(requests(
            "198.18.0.11",
            "busy.example.com",
            "x-h: v7999\r\n",
            1000,
        ));
        (q0, q1, own)
    })
    .join()
    .unwrap();
    let (m0, m1) = (median(q0.clone()), median(q1.clone()));
    let best = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min);
    println!(
        "haproxy, quiet host, 0 conditional rules on its neighbour:     median of {ROUNDS} round medians {m0:>6.1} µs (best round {:>6.1} µs)",
        best(&q0)
    );
    println!(
        "haproxy, quiet host, 8,000 conditional rules on its neighbour: median of {ROUNDS} round medians {m1:>6.1} µs (best round {:>6.1} µs): {:+.1}%",
        best(&q1),
        (m1 / m0 - 1.0) * 100.0
    );
    println!("haproxy, the busy host's own 8,000th rule:                    median {own:>6.1} µs");
}

/// The CPU time (user + system) a process has used so far, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name (in parentheses, which may hold spaces): fields 3 on.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .unwrap()
        .unwrap() as u64;
    // utime and stime are fields 14 and 15 of the stat line: 11 and 12 after the name.
    Duration::from_micros((f[11] + f[12]) * 1_000_000 / ticks)
}

const MIRROR_REQUESTS: usize = 4000;

/// What a tenant's RequestMirror costs the proxy everybody shares: HAProxy's CPU time per
/// request of a route that copies every request to 0, 1, 4 and 16 backends (16 is the
/// API's most filters on one rule), over one keep-alive connection; and how many copies
/// arrived (copies beyond 1,024 under way are dropped, as are bodies not held whole).
fn mirror_part() {
    if !nix::unistd::Uid::effective().is_root() {
        println!("haproxy mirror cost: skipped (needs root: a network namespace)");
        return;
    }
    let ns = Netns::new();
    let main = backend(&ns, 18090);
    let copies: Vec<(u16, Arc<AtomicU64>)> = (0..16u16)
        .map(|i| (18100 + i, backend(&ns, 18100 + i)))
        .collect();
    let mut base = None;
    for n in [0usize, 1, 4, 16] {
        let dir = tempfile::tempdir().unwrap();
        let eps: Vec<(&str, u16)> = copies[..n].iter().map(|(p, _)| ("127.0.0.1", *p)).collect();
        let routes = tenant_routes::mirroring(("127.0.0.1", 18090), &eps);
        let h = haproxy(&ns, dir.path(), &routes);
        let pid = h.0.id();
        let name = ns.0.clone();
        let before_copies: u64 = copies.iter().map(|(_, c)| c.load(Ordering::Relaxed)).sum();
        let before_main = main.load(Ordering::Relaxed);
        let (cpu, wall) = std::thread::spawn(move || {
            enter(&name);
            let deadline = Instant::now() + Duration::from_secs(60);
            while TcpStream::connect((tenant_routes::TENANT_VIP, 80)).is_err() {
                assert!(Instant::now() < deadline, "haproxy did not listen");
                std::thread::sleep(Duration::from_millis(50));
            }
            requests(tenant_routes::TENANT_VIP, "mirror.example.com", "", 200); // warm up
            std::thread::sleep(Duration::from_millis(300));
            let (c0, t0) = (cpu_time(pid), Instant::now());
            requests(
                tenant_routes::TENANT_VIP,
                "mirror.example.com",
                "",
                MIRROR_REQUESTS,
            );
            let wall = t0.elapsed();
            // The copies are sent after their requests: let them finish.
            std::thread::sleep(Duration::from_millis(500));
            (cpu_time(pid) - c0, wall)
        })
        .join()
        .unwrap();
        drop(h);
        let got: u64 = copies
            .iter()
            .map(|(_, c)| c.load(Ordering::Relaxed))
            .sum::<u64>()
            - before_copies;
        let served = main.load(Ordering::Relaxed) - before_main;
        let per = cpu.as_secs_f64() * 1e6 / MIRROR_REQUESTS as f64;
        let b = *base.get_or_insert(per);
        println!(
            "haproxy, a rule mirroring every request to {n:>2} backends: {per:>7.1} µs of CPU per request ({:>5.1}x none), {:>7.0} requests/s on one connection, {got} copies of {} requests ({served} served with the warm-up)",
            per / b,
            MIRROR_REQUESTS as f64 / wall.as_secs_f64(),
            MIRROR_REQUESTS * n + 200 * n,
        );
    }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs it too: only the cheap
    // render part then.
    render_part();
    if std::env::args().any(|a| a == "--bench") {
        latency_part();
        mirror_part();
    }
}
