//! The chaos soak (issue 9, item 4): a whole k8slb deployment on the Kubernetes path (the
//! fake API server), random faults one after the other while Services are created and
//! deleted and endpoints churn, under steady traffic to a few long-lived Services; the
//! invariants are checked all along, and the run ends with a report of every violation.
//!
//! Also the parts the saturation measurement shares: the VIP [`Sampler`] (who holds which
//! VIP, read over netlink inside each LB node's namespace every 20 ms) and the seeded
//! [`Rng`].
//!
//! # Faults (one at a time, in shuffled cycles so that a short run sees every kind)
//!
//! | kind | what | the window ends |
//! |---|---|---|
//! | `actor-kill` | SIGKILL of an LB node's actor (its daemons stay), restarted 0.5-3 s later | at the restart |
//! | `keepalived-kill` | SIGKILL of every keepalived process of a node (the actor restarts it) | at the kill |
//! | `proxy-kill` | SIGKILL of every haproxy process of a node (the actor restarts it) | at the kill |
//! | `link-cut` | every link of a node down on the switch, up again 1-5 s later | at the restore |
//! | `watcher-restart` | SIGKILL of the watcher, started again 0.5-3 s later | at the start |
//! | `api-outage` | the fake API server stops listening and closes every connection, back after [`SoakOptions::api_outage`] | when it listens again |
//! | `label-flap` | a Node's `type=loadBalancer` label removed (until that node holds no VIP, at most 10 s), then put back | when the label is back |
//! | `node-add` | once: a new LB node (namespace, links, Node object, actor) joins | when its actor is ready |
//!
//! The node a fault hits is, with probability 0.7, the holder of a long-lived Service's
//! VIP (the interesting case), otherwise any LB node.
//!
//! # Invariants
//!
//! - **allocations**: a Service that had IP X in `status.loadBalancer.ingress` keeps X until
//!   it is deleted (checked every 200 ms on every Service in the API);
//! - **one holder**: among the LB nodes that can reach each other (a node whose link is cut
//!   is not counted), a VIP is never on two nodes for longer than three advertisement
//!   intervals (the sampler's episodes);
//! - **recovery**: after each fault ends, every long-lived Service answers again (three
//!   answers in a row) and each of their VIPs is on exactly one reachable node within
//!   [`SoakOptions::recovery_bound`];
//! - **no failure outside a fault window**: a fault's window runs from its start to its
//!   end plus the recovery bound; a failed request whose time span touches no window is a
//!   violation. The API outage and the watcher restart must not fail any request at all
//!   (the data plane does not depend on either): a failure is attributed to every fault
//!   whose window is open when it happens ([`attribute_failures`]), and one of theirs
//!   counts only when no other fault that may fail requests has its window open;
//! - **nothing left behind**: after every actor got SIGTERM, no VIP and no keepalived or
//!   haproxy is left in the LB nodes; after teardown, no namespace of the lab in
//!   /run/netns, no process in one of its namespaces or naming its directory, and neither
//!   the lab's directory nor the fake API's kubeconfig directory.
//!
//! Reproducible: the seed (printed, `K8SLB_SOAK_SEED`) decides the fault sequence, the
//! nodes' roles, durations and the churn actions. The timing of threads and daemons is
//! not: the same seed gives the same plan, not the same interleaving.

use crate::lab::Role;
use crate::objects::{endpoint_slice, node, svc, tcp, Svc};
use crate::system::{Options, System, ADMIN_ADDR};
use crate::traffic::Proto;
use anyhow::{bail, Context, Result};
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// Seeded randomness

/// SplitMix64: small, seeded, good enough to pick faults.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    /// A duration in [lo, hi] milliseconds.
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next_u64() % (hi - lo + 1))
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// The seed in `var`, or one from the clock.
pub fn seed_from_env(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64 % 1_000_000_000)
                .unwrap_or(1)
        })
}

// ---------------------------------------------------------------------------------------
// The VIP sampler

/// Whether `ip` is one the lab's pools give out (see [`crate::system`]).
pub fn is_vip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            o[0] == 198
                && o[1] == 18
                && match o[2] {
                    0 => (100..=120).contains(&o[3]),
                    1 | 2 => (50..=74).contains(&o[3]),
                    _ => false,
                }
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            s[..6] == [0xfd00, 0x18, 0, 0, 0, 0x101]
        }
    }
}

/// A time two reachable nodes held the same VIP.
#[derive(Debug, Clone)]
pub struct DualEpisode {
    pub ip: IpAddr,
    pub nodes: Vec<String>,
    pub start: Instant,
    pub ms: f64,
}

/// What the sampler saw.
#[derive(Debug, Default)]
pub struct SamplerState {
    /// The latest holders of each VIP (reachable or not).
    pub holders: BTreeMap<IpAddr, BTreeSet<String>>,
    /// Sampling passes done.
    pub passes: u64,
    /// Changes of a VIP's holder set that followed a sample where it had a holder
    /// (a move, a second holder appearing or leaving, a release).
    pub holder_changes: u64,
    /// The holder changes, (time, ip, before, after), the first 200.
    pub changes: Vec<(Instant, IpAddr, Vec<String>, Vec<String>)>,
    /// Open dual-holder episodes.
    open: BTreeMap<IpAddr, (Instant, BTreeSet<String>)>,
    /// Closed episodes longer than the limit (and still open ones at [`Sampler::stop`]).
    pub long_duals: Vec<DualEpisode>,
    pub longest_dual_ms: f64,
    /// The longest time between two passes (the sampler starved of CPU).
    pub max_pass_gap_ms: f64,
    pub errors: BTreeMap<String, u64>,
}

struct SamplerShared {
    stop: AtomicBool,
    nodes: Mutex<Vec<(String, String)>>,
    unreachable: Mutex<BTreeSet<String>>,
    state: Mutex<SamplerState>,
    dual_limit: Duration,
}

/// Reads every LB node's addresses every 20 ms from a thread that enters each node's
/// namespace in turn (netlink, no process started), and keeps [`SamplerState`].
pub struct Sampler {
    shared: Arc<SamplerShared>,
    handle: Option<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Moves the calling thread into the network namespace `ns` (`/run/netns/<ns>`).
fn enter_netns(ns: &str) -> Result<()> {
    let path = std::path::Path::new("/run/netns").join(ns);
    let f = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
        .with_context(|| format!("entering {ns}"))
}

fn vips_here() -> Result<BTreeSet<IpAddr>> {
    let mut out = BTreeSet::new();
    for a in nix::ifaddrs::getifaddrs()? {
        if a.interface_name == "lo" {
            continue;
        }
        let Some(addr) = a.address else { continue };
        let ip = if let Some(v4) = addr.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        if is_vip(ip) {
            out.insert(ip);
        }
    }
    Ok(out)
}

impl Sampler {
    /// Starts sampling `nodes` ((name, namespace)); two reachable holders for longer than
    /// `dual_limit` make a [`DualEpisode`] in `long_duals`.
    pub fn start(nodes: Vec<(String, String)>, dual_limit: Duration) -> Sampler {
        let shared = Arc::new(SamplerShared {
            stop: AtomicBool::new(false),
            nodes: Mutex::new(nodes),
            unreachable: Mutex::new(BTreeSet::new()),
            state: Mutex::new(SamplerState::default()),
            dual_limit,
        });
        let s = shared.clone();
        let handle = std::thread::spawn(move || sample_loop(&s));
        Sampler {
            shared,
            handle: Some(handle),
        }
    }

    pub fn add_node(&self, name: &str, ns: &str) {
        lock(&self.shared.nodes).push((name.into(), ns.into()));
    }

    /// Marks a node as cut off (its holdings do not count as duplicates) or back.
    pub fn set_reachable(&self, node: &str, reachable: bool) {
        let mut u = lock(&self.shared.unreachable);
        if reachable {
            u.remove(node);
        } else {
            u.insert(node.into());
        }
    }

    pub fn with<R>(&self, f: impl FnOnce(&SamplerState) -> R) -> R {
        f(&lock(&self.shared.state))
    }

    /// The reachable holders of `ip` now.
    pub fn reachable_holders(&self, ip: IpAddr) -> Vec<String> {
        let u = lock(&self.shared.unreachable).clone();
        self.with(|s| {
            s.holders
                .get(&ip)
                .map(|h| h.iter().filter(|n| !u.contains(*n)).cloned().collect())
                .unwrap_or_default()
        })
    }

    /// Waits for one more full pass (so the state reflects the addresses after now).
    pub fn fresh(&self) {
        let p = self.with(|s| s.passes);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.with(|s| s.passes) < p + 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops the thread (it leaves the namespaces); open episodes longer than the limit
    /// are recorded.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let now = Instant::now();
        let mut st = lock(&self.shared.state);
        let open = std::mem::take(&mut st.open);
        for (ip, (start, nodes)) in open {
            close_episode(&mut st, self.shared.dual_limit, ip, start, &nodes, now);
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop();
    }
}

fn close_episode(
    st: &mut SamplerState,
    limit: Duration,
    ip: IpAddr,
    start: Instant,
    nodes: &BTreeSet<String>,
    now: Instant,
) {
    let d = now - start;
    let ms = d.as_secs_f64() * 1000.0;
    st.longest_dual_ms = st.longest_dual_ms.max(ms);
    if d > limit {
        st.long_duals.push(DualEpisode {
            ip,
            nodes: nodes.iter().cloned().collect(),
            start,
            ms,
        });
    }
}

fn sample_loop(sh: &SamplerShared) {
    let mut last_pass: Option<Instant> = None;
    while !sh.stop.load(Ordering::Relaxed) {
        let nodes = lock(&sh.nodes).clone();
        let mut holders: BTreeMap<IpAddr, BTreeSet<String>> = BTreeMap::new();
        let mut failed = false;
        for (name, ns) in &nodes {
            match enter_netns(ns).and_then(|_| vips_here()) {
                Ok(ips) => {
                    for ip in ips {
                        holders.entry(ip).or_default().insert(name.clone());
                    }
                }
                Err(e) => {
                    failed = true;
                    *lock(&sh.state).errors.entry(format!("{e:#}")).or_default() += 1;
                }
            }
        }
        let now = Instant::now();
        let unreachable = lock(&sh.unreachable).clone();
        let mut st = lock(&sh.state);
        if let Some(l) = last_pass {
            st.max_pass_gap_ms = st.max_pass_gap_ms.max((now - l).as_secs_f64() * 1000.0);
        }
        last_pass = Some(now);
        if failed {
            // A partial pass says nothing about who holds what.
            drop(st);
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let ips: BTreeSet<IpAddr> = holders.keys().chain(st.holders.keys()).copied().collect();
        for ip in ips {
            let before = st.holders.get(&ip).cloned().unwrap_or_default();
            let after = holders.get(&ip).cloned().unwrap_or_default();
            if !before.is_empty() && before != after {
                st.holder_changes += 1;
                if st.changes.len() < 200 {
                    st.changes.push((
                        now,
                        ip,
                        before.into_iter().collect(),
                        after.iter().cloned().collect(),
                    ));
                }
            }
            let reach: BTreeSet<String> = after
                .iter()
                .filter(|n| !unreachable.contains(*n))
                .cloned()
                .collect();
            if reach.len() >= 2 {
                st.open.entry(ip).or_insert((now, reach));
            } else if let Some((start, nodes)) = st.open.remove(&ip) {
                close_episode(&mut st, sh.dual_limit, ip, start, &nodes, now);
            }
        }
        st.holders = holders;
        st.passes += 1;
        drop(st);
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------
// Steady traffic, in this process, with the time of every request

/// One request of the steady traffic.
#[derive(Debug, Clone)]
pub struct Req {
    pub start: Instant,
    pub end: Instant,
    pub error: Option<String>,
}

struct TrafficShared {
    stop: AtomicBool,
    records: Vec<Mutex<Vec<Req>>>,
}

/// One thread per target inside the client's namespace: an HTTP GET every `interval` (a
/// new connection each, 1 s timeout), every result kept with its times.
pub struct Traffic {
    shared: Arc<TrafficShared>,
    handles: Vec<JoinHandle<()>>,
}

fn http_get(target: SocketAddr, timeout: Duration) -> Result<(), String> {
    let kind = |e: std::io::Error| format!("{:?}", e.kind());
    let mut s =
        TcpStream::connect_timeout(&target, timeout).map_err(|e| format!("connect:{}", kind(e)))?;
    s.set_read_timeout(Some(timeout)).map_err(kind)?;
    s.set_write_timeout(Some(timeout)).map_err(kind)?;
    let req = format!("GET / HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes())
        .map_err(|e| format!("write:{}", kind(e)))?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)
        .map_err(|e| format!("read:{}", kind(e)))?;
    let text = String::from_utf8_lossy(&resp);
    let status = text.split_whitespace().nth(1).unwrap_or("none");
    if status != "200" {
        return Err(format!("status:{status}"));
    }
    if !text.contains("backend=") {
        return Err("body".into());
    }
    Ok(())
}

impl Traffic {
    pub fn start(client_ns: &str, targets: &[SocketAddr], interval: Duration) -> Traffic {
        let shared = Arc::new(TrafficShared {
            stop: AtomicBool::new(false),
            records: targets.iter().map(|_| Mutex::new(Vec::new())).collect(),
        });
        let mut handles = Vec::new();
        for (i, target) in targets.iter().copied().enumerate() {
            let sh = shared.clone();
            let ns = client_ns.to_string();
            handles.push(std::thread::spawn(move || {
                if let Err(e) = enter_netns(&ns) {
                    let now = Instant::now();
                    lock(&sh.records[i]).push(Req {
                        start: now,
                        end: now,
                        error: Some(format!("traffic thread: {e:#}")),
                    });
                    return;
                }
                let mut next = Instant::now();
                while !sh.stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    let r = http_get(target, Duration::from_secs(1));
                    let end = Instant::now();
                    lock(&sh.records[i]).push(Req {
                        start,
                        end,
                        error: r.err(),
                    });
                    next += interval;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now;
                    }
                }
            }));
        }
        Traffic { shared, handles }
    }

    /// The requests to target `i` so far.
    pub fn records(&self, i: usize) -> Vec<Req> {
        lock(&self.shared.records[i]).clone()
    }

    /// Whether the last `n` requests to target `i` started after `t` and succeeded.
    pub fn answering_since(&self, i: usize, t: Instant, n: usize) -> bool {
        let r = lock(&self.shared.records[i]);
        r.len() >= n
            && r[r.len() - n..]
                .iter()
                .all(|q| q.start >= t && q.error.is_none())
    }

    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------------------
// The soak

#[derive(Debug, Clone)]
pub struct SoakOptions {
    pub name: String,
    /// No new fault starts after this (the last one finishes).
    pub duration: Duration,
    pub seed: u64,
    /// LB nodes labelled at start; one more joins during the run (`node-add`).
    pub lbs: usize,
    pub api_outage: Duration,
    /// After a fault ends, the long-lived Services answer again within this.
    pub recovery_bound: Duration,
    pub advert_int: f64,
}

impl SoakOptions {
    /// `duration`, seed from `K8SLB_SOAK_SEED` (else the clock), `K8SLB_SOAK_LBS`
    /// (default 3), API outage `api_outage` (`K8SLB_SOAK_API_OUTAGE_S`).
    pub fn from_env(name: &str, duration: Duration, api_outage: Duration) -> SoakOptions {
        let num = |v: &str| {
            std::env::var(v)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
        };
        SoakOptions {
            name: name.into(),
            duration,
            seed: seed_from_env("K8SLB_SOAK_SEED"),
            lbs: num("K8SLB_SOAK_LBS").unwrap_or(3) as usize,
            api_outage: num("K8SLB_SOAK_API_OUTAGE_S")
                .map(Duration::from_secs)
                .unwrap_or(api_outage),
            recovery_bound: Duration::from_secs(num("K8SLB_SOAK_RECOVERY_S").unwrap_or(15)),
            advert_int: 0.1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    ActorKill,
    KeepalivedKill,
    ProxyKill,
    LinkCut,
    WatcherRestart,
    ApiOutage,
    LabelFlap,
    NodeAdd,
}

impl FaultKind {
    pub const ALL: [FaultKind; 8] = [
        FaultKind::ActorKill,
        FaultKind::KeepalivedKill,
        FaultKind::ProxyKill,
        FaultKind::LinkCut,
        FaultKind::WatcherRestart,
        FaultKind::ApiOutage,
        FaultKind::LabelFlap,
        FaultKind::NodeAdd,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::ActorKill => "actor-kill",
            FaultKind::KeepalivedKill => "keepalived-kill",
            FaultKind::ProxyKill => "proxy-kill",
            FaultKind::LinkCut => "link-cut",
            FaultKind::WatcherRestart => "watcher-restart",
            FaultKind::ApiOutage => "api-outage",
            FaultKind::LabelFlap => "label-flap",
            FaultKind::NodeAdd => "node-add",
        }
    }
    /// Faults the data plane must not notice at all.
    fn traffic_must_not_fail(self) -> bool {
        matches!(self, FaultKind::WatcherRestart | FaultKind::ApiOutage)
    }
}

/// One fault, as done.
#[derive(Debug, Clone)]
pub struct FaultRecord {
    pub kind: FaultKind,
    pub target: String,
    pub start: Instant,
    pub end: Instant,
    pub note: String,
    /// Per long-lived Service: ms from the fault's end to its first answer after its
    /// last failure in the window (0: it answered all along or again before the end).
    pub recovery_ms: Vec<f64>,
    /// Per long-lived Service: the longest run of failures in the window (first failure
    /// sent -> next answer).
    pub dark_ms: Vec<f64>,
    /// Failed requests of the long-lived Services in the fault's window (its start to its
    /// end plus the recovery bound), whatever other fault's window is open too.
    pub failed: u64,
    /// Of those, the ones in no window of another fault that may fail requests (see
    /// [`attribute_failures`]): what a fault the data plane must not notice is blamed for.
    pub unexplained: u64,
}

/// A fault as [`attribute_failures`] sees it: its start, its end, and whether it may fail
/// requests (everything but a watcher restart and an API outage).
#[derive(Debug, Clone, Copy)]
pub struct FaultSpan {
    pub start: Instant,
    pub end: Instant,
    pub may_fail_traffic: bool,
}

/// For each fault: how many `failures` ((start, end) of a failed request) touch its
/// window, `[start, end + bound]`, and how many of those touch no window of ANOTHER
/// fault that may fail requests. A failure is attributed to every fault whose window or
/// recovery window is open when it happens, not only to the last one started: a watcher
/// restarted 2 s after a keepalived kill must not be blamed for the kill's recovery.
pub fn attribute_failures(
    faults: &[FaultSpan],
    failures: &[(Instant, Instant)],
    bound: Duration,
) -> Vec<(u64, u64)> {
    let touches = |f: &FaultSpan, q: &(Instant, Instant)| q.1 >= f.start && q.0 <= f.end + bound;
    faults
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mine: Vec<&(Instant, Instant)> =
                failures.iter().filter(|q| touches(f, q)).collect();
            let unexplained = mine
                .iter()
                .filter(|q| {
                    !faults
                        .iter()
                        .enumerate()
                        .any(|(j, g)| j != i && g.may_fail_traffic && touches(g, q))
                })
                .count();
            (mine.len() as u64, unexplained as u64)
        })
        .collect()
}

#[derive(Debug, Default)]
pub struct SoakReport {
    pub seed: u64,
    pub faults: Vec<FaultRecord>,
    pub violations: Vec<String>,
    pub requests_ok: u64,
    pub requests_failed: u64,
    pub failed_outside_faults: u64,
    pub longest_dual_ms: f64,
    pub sampler_max_gap_ms: f64,
    pub holder_changes: u64,
    pub services_created: u64,
    pub services_deleted: u64,
    pub endpoint_changes: u64,
    pub seconds: f64,
}

impl SoakReport {
    /// The bench keys (`soak_*`).
    pub fn json(&self) -> Value {
        let mut rec: BTreeMap<&str, f64> = BTreeMap::new();
        let mut dark: BTreeMap<&str, f64> = BTreeMap::new();
        let mut count: BTreeMap<&str, u64> = BTreeMap::new();
        for f in &self.faults {
            let r = f.recovery_ms.iter().copied().fold(0.0, f64::max);
            let d = f.dark_ms.iter().copied().fold(0.0, f64::max);
            let e = rec.entry(f.kind.as_str()).or_default();
            *e = e.max(r);
            let e = dark.entry(f.kind.as_str()).or_default();
            *e = e.max(d);
            *count.entry(f.kind.as_str()).or_default() += 1;
        }
        let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
        let max_rec = rec.values().copied().fold(0.0, f64::max);
        json!({
            "soak_seed": self.seed,
            "soak_seconds": r3(self.seconds),
            "soak_faults": self.faults.len(),
            "soak_faults_by_kind": count,
            "soak_violations": self.violations.len(),
            "soak_violation_list": self.violations.iter().take(50).collect::<Vec<_>>(),
            "soak_max_recovery_ms": r3(max_rec),
            "soak_recovery_ms_by_kind": rec.iter().map(|(k, v)| (k.to_string(), r3(*v))).collect::<BTreeMap<_, _>>(),
            "soak_dark_ms_by_kind": dark.iter().map(|(k, v)| (k.to_string(), r3(*v))).collect::<BTreeMap<_, _>>(),
            "soak_failed_outside_faults": self.failed_outside_faults,
            "soak_requests_ok": self.requests_ok,
            "soak_requests_failed": self.requests_failed,
            "soak_longest_dual_holder_ms": r3(self.longest_dual_ms),
            "soak_sampler_max_gap_ms": r3(self.sampler_max_gap_ms),
            "soak_holder_changes": self.holder_changes,
            "soak_services_created": self.services_created,
            "soak_services_deleted": self.services_deleted,
            "soak_endpoint_changes": self.endpoint_changes,
        })
    }
}

struct Soak {
    sys: System,
    opts: SoakOptions,
    rng: Rng,
    churn_rng: Rng,
    sampler: Sampler,
    traffic: Traffic,
    long: Vec<(Svc, IpAddr, SocketAddr)>,
    t0: Instant,
    faults: Vec<FaultRecord>,
    violations: Vec<String>,
    /// Service (ns/name) -> the IPs it was first given.
    allocs: BTreeMap<String, Vec<IpAddr>>,
    reported: BTreeSet<String>,
    churn: Vec<Svc>,
    churn_n: u64,
    next_churn: Instant,
    next_alloc: Instant,
    report: SoakReport,
    node_added: bool,
}

fn say(s: &str) {
    eprintln!("soak: {s}");
}

impl Soak {
    fn at(&self, t: Instant) -> String {
        format!(
            "t={:.1}s",
            t.saturating_duration_since(self.t0).as_secs_f64()
        )
    }

    /// Which fault window `t` falls in, for a violation's message.
    fn during(&self, t: Instant) -> String {
        let bound = self.opts.recovery_bound;
        match self
            .faults
            .iter()
            .rev()
            .find(|f| t >= f.start && t <= f.end + bound)
        {
            Some(f) => format!(
                "in the window of {} on {} ({}, {:.1}-{:.1} s)",
                f.kind.as_str(),
                f.target,
                f.note,
                f.start.saturating_duration_since(self.t0).as_secs_f64(),
                f.end.saturating_duration_since(self.t0).as_secs_f64()
            ),
            None => "outside every fault window (Service and endpoint churn only)".into(),
        }
    }

    fn violation(&mut self, v: String) {
        say(&format!("VIOLATION: {v}"));
        self.violations.push(v);
    }

    /// The background work of the control thread: churn and the allocation check.
    fn tick(&mut self) {
        let now = Instant::now();
        if now >= self.next_alloc {
            self.next_alloc = now + Duration::from_millis(200);
            self.check_allocations();
        }
        if now >= self.next_churn {
            let d = self.churn_rng.ms(300, 1500);
            self.next_churn = now + d;
            if let Err(e) = self.churn_step() {
                self.violation(format!("{}: churn step failed: {e:#}", self.at(now)));
            }
        }
    }

    /// Ticks for `d`.
    fn idle(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.tick();
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ticks until `f` holds (true) or `timeout` passes (false).
    fn idle_until(&mut self, timeout: Duration, mut f: impl FnMut(&mut Soak) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if f(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            self.tick();
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn check_allocations(&mut self) {
        let Some(k) = &self.sys.kube else { return };
        let mut seen = BTreeSet::new();
        let mut found = Vec::new();
        for s in k.api().list("Service") {
            let key = format!(
                "{}/{}",
                s["metadata"]["namespace"].as_str().unwrap_or(""),
                s["metadata"]["name"].as_str().unwrap_or("")
            );
            let mut ips: Vec<IpAddr> = s["status"]["loadBalancer"]["ingress"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| i["ip"].as_str()?.parse().ok())
                .collect();
            ips.sort();
            seen.insert(key.clone());
            found.push((key, ips));
        }
        let now = Instant::now();
        for (key, ips) in found {
            match self.allocs.get(&key) {
                None if !ips.is_empty() => {
                    self.allocs.insert(key, ips);
                }
                Some(first) if *first != ips => {
                    let what = if ips.is_empty() {
                        format!("{key} lost its address {first:?}")
                    } else {
                        format!("{key} moved from {first:?} to {ips:?}")
                    };
                    if self.reported.insert(what.clone()) {
                        self.violation(format!("{}: allocation: {what}", self.at(now)));
                    }
                }
                _ => {}
            }
        }
        self.allocs.retain(|k, _| seen.contains(k));
    }

    fn churn_step(&mut self) -> Result<()> {
        let roll = self.churn_rng.below(100);
        if roll < 40 {
            // Endpoints of a long-lived Service: a random non-empty ready subset.
            let i = self.churn_rng.below(self.long.len());
            let s = self.long[i].0.clone();
            let be = self.sys.backend_ips();
            let set: Vec<(IpAddr, bool)> = match self.churn_rng.below(4) {
                0 => vec![(be[0], true)],
                1 => vec![(be[1], true)],
                2 => vec![(be[0], true), (be[1], false)],
                _ => vec![(be[0], true), (be[1], true)],
            };
            let slice = format!("{}-1", s.name);
            self.sys.apply(
                &format!("eps-{}-{}", s.namespace, s.name),
                &endpoint_slice(&s, &slice, &set),
            )?;
            self.report.endpoint_changes += 1;
        } else if roll < 70 && self.churn.len() < 5 {
            self.churn_n += 1;
            let mut s =
                svc("default", &format!("churn{}", self.churn_n)).port(tcp("http", 80, 8080));
            if self.churn_rng.chance(0.3) {
                s = s.annotation("loadbalancer/pool", "public");
            }
            self.sys.apply_service(&s)?;
            self.churn.push(s);
            self.report.services_created += 1;
        } else if !self.churn.is_empty() {
            let s = self.churn.remove(0);
            self.sys
                .delete(&format!("svc-{}-{}", s.namespace, s.name))?;
            self.sys
                .delete(&format!("eps-{}-{}", s.namespace, s.name))?;
            self.report.services_deleted += 1;
        }
        Ok(())
    }

    /// A node for a fault: with probability 0.7 the holder of a long-lived VIP.
    fn pick_node(&mut self) -> String {
        let nodes = self.sys.lb_nodes();
        if self.rng.chance(0.7) {
            let i = self.rng.below(self.long.len());
            let ip = self.long[i].1;
            if let Some(h) = self.sampler.reachable_holders(ip).first() {
                return h.clone();
            }
        }
        nodes[self.rng.below(nodes.len())].clone()
    }

    /// Waits until every long-lived Service answers (3 in a row, sent after `since`) and
    /// each of their VIPs is on exactly one reachable node.
    fn wait_whole(&mut self, since: Instant, bound: Duration) -> Result<(), String> {
        let long: Vec<IpAddr> = self.long.iter().map(|l| l.1).collect();
        let ok = self.idle_until(bound, |s| {
            (0..long.len()).all(|i| s.traffic.answering_since(i, since, 3))
                && long
                    .iter()
                    .all(|ip| s.sampler.reachable_holders(*ip).len() == 1)
        });
        if ok {
            return Ok(());
        }
        let mut why = Vec::new();
        for (i, (s, ip, _)) in self.long.iter().enumerate() {
            let r = self.traffic.records(i);
            let last: Vec<String> = r
                .iter()
                .rev()
                .take(3)
                .map(|q| q.error.clone().unwrap_or_else(|| "ok".into()))
                .collect();
            why.push(format!(
                "{} ({ip}): last answers {last:?}, held by {:?}",
                s.name,
                self.sampler.reachable_holders(*ip)
            ));
        }
        Err(why.join("; "))
    }

    fn wait_actor_ready(&mut self, node: &str, timeout: Duration) -> Result<()> {
        let url = format!("http://{ADMIN_ADDR}/readyz");
        let node = node.to_string();
        let ok = self.idle_until(timeout, |s| {
            s.sys
                .lab
                .run_in(&node, &["curl", "-sf", "-m", "1", &url])
                .is_ok_and(|o| o.status.success())
        });
        if !ok {
            bail!("the actor on {node} was not ready after {timeout:?}");
        }
        Ok(())
    }

    fn kill_named(&mut self, node: &str, comm: &str) -> Result<usize> {
        let pids = self.sys.pids_named(node, comm)?;
        for p in &pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), Signal::SIGKILL);
        }
        Ok(pids.len())
    }

    fn add_node(&mut self) -> Result<String> {
        let i = self.sys.lb_nodes().len() + 1;
        let name = format!("lb{i}");
        let idx = 10 + i as u8;
        let lab = &mut self.sys.lab;
        lab.add_host(&name, Role::Lb, idx)?;
        lab.add_addr(&name, "eth0", &format!("198.18.2.{idx}/24"))?;
        lab.add_link(&name, "em1", &format!("{name}e"))?;
        lab.add_addr(&name, "em1", &format!("198.18.1.{idx}/24"))?;
        let h = lab.host(&name).clone();
        if let Some(k) = &self.sys.kube {
            k.relay_into(&h.ns)?;
        }
        self.sys.apply(
            &format!("node-{name}"),
            &node(&name, &[h.v4.into(), h.v6.into()], true),
        )?;
        self.sys.start_actor(&name)?;
        self.sampler.add_node(&name, &h.ns);
        Ok(name)
    }

    fn set_label(&mut self, name: &str, lb: bool) -> Result<()> {
        let h = self.sys.lab.host(name).clone();
        self.sys.apply(
            &format!("node-{name}"),
            &node(name, &[h.v4.into(), h.v6.into()], lb),
        )
    }

    /// Runs one fault; returns (target, start, end, note).
    fn fault(&mut self, kind: FaultKind) -> Result<(String, Instant, Instant, String)> {
        match kind {
            FaultKind::ActorKill => {
                let n = self.pick_node();
                let p = self.sys.actors[&n];
                let down = self.rng.ms(500, 3000);
                // The daemons outlive their actor (not in Kubernetes, where the
                // container's processes die with it): say which ones did until the restart.
                let daemons: Vec<i32> = ["keepalived", "haproxy"]
                    .iter()
                    .flat_map(|c| self.sys.pids_named(&n, c).unwrap_or_default())
                    .collect();
                let start = Instant::now();
                self.sys.lab.signal_main(p, Signal::SIGKILL)?;
                self.sys.lab.wait(p, Duration::from_secs(5))?;
                self.idle(down);
                let alive = daemons
                    .iter()
                    .filter(|p| {
                        nix::sys::signal::kill(nix::unistd::Pid::from_raw(**p), None).is_ok()
                    })
                    .count();
                self.sys.start_actor(&n)?;
                let end = Instant::now();
                self.wait_actor_ready(&n, T)?;
                Ok((
                    n,
                    start,
                    end,
                    format!(
                        "down {} ms; {alive} of its {} daemon processes still alive at the restart",
                        down.as_millis(),
                        daemons.len()
                    ),
                ))
            }
            FaultKind::KeepalivedKill | FaultKind::ProxyKill => {
                let n = self.pick_node();
                let comm = if kind == FaultKind::KeepalivedKill {
                    "keepalived"
                } else {
                    "haproxy"
                };
                let start = Instant::now();
                let k = self.kill_named(&n, comm)?;
                if k == 0 {
                    bail!("no {comm} process on {n}");
                }
                Ok((n, start, Instant::now(), format!("{k} processes")))
            }
            FaultKind::LinkCut => {
                let n = self.pick_node();
                let d = self.rng.ms(1000, 5000);
                self.sampler.set_reachable(&n, false);
                let start = Instant::now();
                self.sys.lab.cut_link(&n)?;
                self.idle(d);
                self.sys.lab.restore_link(&n)?;
                let end = Instant::now();
                self.sampler.set_reachable(&n, true);
                Ok((n, start, end, format!("cut {} ms", d.as_millis())))
            }
            FaultKind::WatcherRestart => {
                let w = self.sys.watcher.context("no watcher")?;
                let d = self.rng.ms(500, 3000);
                let start = Instant::now();
                self.sys.lab.kill(w)?;
                self.idle(d);
                let w2 = self.sys.lab.respawn(w)?;
                self.sys.watcher = Some(w2);
                Ok((
                    "watcher".into(),
                    start,
                    Instant::now(),
                    format!("down {} ms", d.as_millis()),
                ))
            }
            FaultKind::ApiOutage => {
                let d = self.opts.api_outage;
                let start = Instant::now();
                self.sys.kube.as_ref().context("not kube")?.go_away();
                self.idle(d);
                self.sys.kube.as_ref().context("not kube")?.come_back()?;
                Ok((
                    "apiserver".into(),
                    start,
                    Instant::now(),
                    format!("gone {} s", d.as_secs()),
                ))
            }
            FaultKind::LabelFlap => {
                let n = self.pick_node();
                let start = Instant::now();
                self.set_label(&n, false)?;
                let node = n.clone();
                let released = self.idle_until(Duration::from_secs(10), |s| {
                    s.sampler.fresh();
                    s.sampler
                        .with(|st| st.holders.values().all(|h| !h.contains(&node)))
                });
                let took = start.elapsed();
                self.set_label(&n, true)?;
                let note = if released {
                    format!("VIPs released after {} ms", took.as_millis())
                } else {
                    let v = format!(
                        "{}: label-flap: {n} still held VIPs 10 s after its type=loadBalancer label was removed, {}",
                        self.at(start),
                        self.during(start)
                    );
                    self.violation(v);
                    "VIPs not released within 10 s".into()
                };
                Ok((n, start, Instant::now(), note))
            }
            FaultKind::NodeAdd => {
                let start = Instant::now();
                let n = self.add_node()?;
                self.node_added = true;
                self.wait_actor_ready(&n, T)?;
                Ok((n, start, Instant::now(), String::new()))
            }
        }
    }

    /// Per-fault recovery and dark times, and the failures outside every window.
    fn analyse(&mut self) {
        let bound = self.opts.recovery_bound;
        let records: Vec<Vec<Req>> = (0..self.long.len())
            .map(|i| self.traffic.records(i))
            .collect();
        let n = self.faults.len();
        let mut outside: Vec<(Instant, String, String)> = Vec::new();
        for (si, reqs) in records.iter().enumerate() {
            for q in reqs {
                if let Some(e) = &q.error {
                    self.report.requests_failed += 1;
                    let inside = self
                        .faults
                        .iter()
                        .any(|f| q.end >= f.start && q.start <= f.end + bound);
                    if !inside {
                        outside.push((q.start, self.long[si].0.name.clone(), e.clone()));
                    }
                } else {
                    self.report.requests_ok += 1;
                }
            }
        }
        for fi in 0..n {
            let (start, end) = (self.faults[fi].start, self.faults[fi].end);
            let wend = if fi + 1 < n {
                (end + bound).min(self.faults[fi + 1].start)
            } else {
                end + bound
            };
            let mut recovery = Vec::new();
            let mut dark = Vec::new();
            for reqs in &records {
                let in_win: Vec<&Req> = reqs
                    .iter()
                    .filter(|q| q.end >= start && q.start <= wend)
                    .collect();
                let mut streak: Option<Instant> = None;
                let mut longest = 0.0f64;
                let mut last_fail_end: Option<Instant> = None;
                for q in &in_win {
                    if q.error.is_some() {
                        streak.get_or_insert(q.start);
                        last_fail_end = Some(q.end);
                    } else if let Some(s0) = streak.take() {
                        longest = longest.max((q.end - s0).as_secs_f64() * 1000.0);
                    }
                }
                if let Some(s0) = streak {
                    longest = longest.max((wend - s0).as_secs_f64() * 1000.0);
                }
                dark.push(longest);
                let r = match last_fail_end {
                    None => 0.0,
                    Some(lf) => {
                        let after = reqs
                            .iter()
                            .find(|q| q.start >= lf && q.error.is_none())
                            .map(|q| q.end);
                        match after {
                            Some(a) => a.saturating_duration_since(end).as_secs_f64() * 1000.0,
                            None => f64::INFINITY,
                        }
                    }
                };
                recovery.push(r);
            }
            let f = &mut self.faults[fi];
            f.recovery_ms = recovery;
            f.dark_ms = dark;
        }
        let spans: Vec<FaultSpan> = self
            .faults
            .iter()
            .map(|f| FaultSpan {
                start: f.start,
                end: f.end,
                may_fail_traffic: !f.kind.traffic_must_not_fail(),
            })
            .collect();
        let failures: Vec<(Instant, Instant)> = records
            .iter()
            .flatten()
            .filter(|q| q.error.is_some())
            .map(|q| (q.start, q.end))
            .collect();
        for (f, (failed, unexplained)) in self
            .faults
            .iter_mut()
            .zip(attribute_failures(&spans, &failures, bound))
        {
            (f.failed, f.unexplained) = (failed, unexplained);
        }
        for fi in 0..n {
            let f = self.faults[fi].clone();
            let worst = f.recovery_ms.iter().copied().fold(0.0, f64::max);
            if worst > bound.as_secs_f64() * 1000.0 {
                self.violation(format!(
                    "{}: {} on {}: a long-lived Service answered again only after {worst:.0} ms (bound {} ms)",
                    self.at(f.start),
                    f.kind.as_str(),
                    f.target,
                    bound.as_millis()
                ));
            }
            if f.kind.traffic_must_not_fail() && f.unexplained > 0 {
                self.violation(format!(
                    "{}: {} ({}): {} requests failed while no other fault's window was open ({} in its window); the data plane must not depend on it",
                    self.at(f.start),
                    f.kind.as_str(),
                    f.note,
                    f.unexplained,
                    f.failed
                ));
            }
        }
        self.report.failed_outside_faults = outside.len() as u64;
        let mut by_svc: BTreeMap<String, u64> = BTreeMap::new();
        for (_, s, _) in &outside {
            *by_svc.entry(s.clone()).or_default() += 1;
        }
        for (t, s, e) in outside.iter().take(20) {
            let v = format!(
                "{}: a request to {s} failed outside every fault window ({e})",
                self.at(*t)
            );
            self.violation(v);
        }
        if outside.len() > 20 {
            self.violation(format!(
                "... {} more requests failed outside fault windows ({by_svc:?})",
                outside.len() - 20
            ));
        }
    }
}

/// Runs the soak; an error means it could not run (the lab did not start), a completed
/// run returns its report (violations inside).
pub fn run(opts: SoakOptions) -> Result<SoakReport> {
    say(&format!(
        "seed {} (K8SLB_SOAK_SEED={} reproduces the fault plan), {} s, {} LB nodes + 1 joining, API outage {} s, recovery bound {} s",
        opts.seed,
        opts.seed,
        opts.duration.as_secs(),
        opts.lbs,
        opts.api_outage.as_secs(),
        opts.recovery_bound.as_secs()
    ));
    let sys = System::start(
        Options::new(&opts.name)
            .kube()
            .lbs(opts.lbs)
            .backends(2)
            .advert_int(opts.advert_int),
    )?;
    let long_svcs = vec![
        svc("default", "long-http").port(tcp("http", 80, 8080)),
        svc("default", "long-tcp")
            .port(tcp("tcp", 8081, 8080))
            .annotation("loadbalancer/mode", "tcp"),
        svc("default", "long-public")
            .port(tcp("http", 80, 8080))
            .annotation("loadbalancer/pool", "public"),
    ];
    let mut long = Vec::new();
    for s in &long_svcs {
        sys.apply_service(s)?;
    }
    for s in &long_svcs {
        let ip = sys.wait_ips(&s.key(), T)?[0];
        let target = SocketAddr::new(ip, s.ports[0].port);
        sys.wait_serving(Proto::Http, target, T)?;
        long.push((s.clone(), ip, target));
    }
    let nodes: Vec<(String, String)> = sys
        .lb_nodes()
        .into_iter()
        .map(|n| {
            let ns = sys.lab.host(&n).ns.clone();
            (n, ns)
        })
        .collect();
    let limit = Duration::from_secs_f64(3.0 * opts.advert_int);
    let sampler = Sampler::start(nodes, limit);
    let targets: Vec<SocketAddr> = long.iter().map(|l| l.2).collect();
    let traffic = Traffic::start(
        &sys.lab.host("client").ns,
        &targets,
        Duration::from_millis(50),
    );
    let now = Instant::now();
    let mut soak = Soak {
        rng: Rng::new(opts.seed),
        churn_rng: Rng::new(opts.seed ^ 0x5eed_c4a7),
        sys,
        opts: opts.clone(),
        sampler,
        traffic,
        long,
        t0: now,
        faults: Vec::new(),
        violations: Vec::new(),
        allocs: BTreeMap::new(),
        reported: BTreeSet::new(),
        churn: Vec::new(),
        churn_n: 0,
        next_churn: now,
        next_alloc: now,
        report: SoakReport {
            seed: opts.seed,
            ..Default::default()
        },
        node_added: false,
    };
    say(&format!(
        "t=0 is {} (UTC, as in the actors' logs); lab directory {}",
        utc_now(),
        soak.sys.lab.dir.display()
    ));
    if let Err(why) = soak.wait_whole(now, T) {
        bail!("the long-lived Services were not whole before the first fault: {why}");
    }
    let deadline = soak.t0 + opts.duration;
    let mut cycle: Vec<FaultKind> = Vec::new();
    while Instant::now() < deadline {
        if cycle.is_empty() {
            cycle = FaultKind::ALL
                .iter()
                .copied()
                .filter(|k| *k != FaultKind::NodeAdd || !soak.node_added)
                .collect();
            soak.rng.shuffle(&mut cycle);
        }
        let kind = cycle.remove(0);
        let pause = soak.rng.ms(1000, 3000);
        soak.idle(pause);
        let t = Instant::now();
        say(&format!("{}: {} ...", soak.at(t), kind.as_str()));
        match soak.fault(kind) {
            Ok((target, start, end, note)) => {
                say(&format!(
                    "{}: {} on {target} done ({note}); window {:.1}-{:.1} s",
                    soak.at(end),
                    kind.as_str(),
                    start.saturating_duration_since(soak.t0).as_secs_f64(),
                    end.saturating_duration_since(soak.t0).as_secs_f64()
                ));
                soak.faults.push(FaultRecord {
                    kind,
                    target: target.clone(),
                    start,
                    end,
                    note,
                    recovery_ms: Vec::new(),
                    dark_ms: Vec::new(),
                    failed: 0,
                    unexplained: 0,
                });
                let bound = soak.opts.recovery_bound;
                if let Err(why) = soak.wait_whole(end, bound) {
                    let v = format!(
                        "{}: {} on {target}: not whole {} s after the fault ended: {why}",
                        soak.at(end),
                        kind.as_str(),
                        bound.as_secs()
                    );
                    soak.violation(v);
                    // Give it time, so that one fault does not cascade into the next.
                    let _ = soak.wait_whole(end, T);
                }
            }
            Err(e) => {
                let v = format!("{}: {} could not be done: {e:#}", soak.at(t), kind.as_str());
                soak.violation(v);
                let _ = soak.wait_whole(Instant::now(), T);
            }
        }
    }
    soak.idle(Duration::from_secs(2));
    soak.traffic.stop();
    soak.sampler.stop();
    soak.report.seconds = soak.t0.elapsed().as_secs_f64();
    soak.check_allocations();
    let (duals, longest, gap, changes, errors) = soak.sampler.with(|s| {
        (
            s.long_duals.clone(),
            s.longest_dual_ms,
            s.max_pass_gap_ms,
            s.holder_changes,
            s.errors.clone(),
        )
    });
    for d in duals {
        let v = format!(
            "{}: {} held by {:?} (all reachable) for {:.0} ms (limit {:.0} ms: three advertisements), {}",
            soak.at(d.start),
            d.ip,
            d.nodes,
            d.ms,
            limit.as_secs_f64() * 1000.0,
            soak.during(d.start)
        );
        soak.violation(v);
    }
    if !errors.is_empty() {
        say(&format!("sampler errors: {errors:?}"));
    }
    soak.report.longest_dual_ms = longest;
    soak.report.sampler_max_gap_ms = gap;
    soak.report.holder_changes = changes;
    soak.analyse();
    shutdown_and_check_leftovers(&mut soak);
    let Soak {
        sys,
        violations,
        faults,
        mut report,
        ..
    } = soak;
    report.faults = faults;
    report.violations = violations;
    let leftover = teardown_and_check(sys, report.violations.is_empty());
    report.violations.extend(leftover);
    for v in &report.violations {
        say(&format!("violation: {v}"));
    }
    Ok(report)
}

/// SIGTERM to every actor (and the watcher): each must remove its VIPs and stop its
/// daemons.
fn shutdown_and_check_leftovers(soak: &mut Soak) {
    let nodes = soak.sys.lb_nodes();
    for n in &nodes {
        let p = soak.sys.actors[n];
        let _ = soak.sys.lab.signal_main(p, Signal::SIGTERM);
    }
    for n in &nodes {
        let p = soak.sys.actors[n];
        match soak.sys.lab.wait(p, Duration::from_secs(15)) {
            Ok(Some(_)) => {}
            _ => soak.violation(format!(
                "shutdown: the actor on {n} did not exit 15 s after SIGTERM"
            )),
        }
    }
    if let Some(w) = soak.sys.watcher {
        let _ = soak.sys.lab.signal_main(w, Signal::SIGTERM);
        if !matches!(soak.sys.lab.wait(w, Duration::from_secs(15)), Ok(Some(_))) {
            soak.violation("shutdown: the watcher did not exit 15 s after SIGTERM".into());
        }
    }
    for n in &nodes {
        let vips: Vec<IpAddr> = soak
            .sys
            .lab
            .addrs(n)
            .unwrap_or_default()
            .into_iter()
            .filter(|ip| is_vip(*ip))
            .collect();
        if !vips.is_empty() {
            soak.violation(format!(
                "shutdown: {n} still holds {vips:?} after its actor stopped"
            ));
        }
        for comm in ["keepalived", "haproxy"] {
            let left = soak.sys.pids_named(n, comm).unwrap_or_default();
            if !left.is_empty() {
                soak.violation(format!(
                    "shutdown: {comm} still runs on {n} after its actor stopped (pids {left:?})"
                ));
            }
        }
    }
}

/// The time now as `HH:MM:SS.mmm` UTC.
fn utc_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = d.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        d.subsec_millis()
    )
}

fn netns_inode(link: &str) -> Option<u64> {
    link.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// Tears the lab down and checks that nothing is left: namespaces, processes, files.
fn teardown_and_check(mut sys: System, passed: bool) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut v = Vec::new();
    let namespaces: Vec<String> = sys.lab.namespaces().to_vec();
    let inodes: BTreeSet<u64> = namespaces
        .iter()
        .filter_map(|ns| std::fs::metadata(format!("/run/netns/{ns}")).ok())
        .map(|m| m.ino())
        .collect();
    let dir = sys.lab.dir.clone();
    let kubeconfig_dir = sys
        .kube
        .as_ref()
        .and_then(|k| k.admin_kubeconfig().parent().map(|p| p.to_path_buf()));
    if passed {
        sys.lab.pass();
    }
    drop(sys);
    for ns in &namespaces {
        if std::path::Path::new("/run/netns").join(ns).exists() {
            v.push(format!("teardown: namespace {ns} is left in /run/netns"));
        }
    }
    let dir_s = dir.to_string_lossy().into_owned();
    let me = std::process::id();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let ns = std::fs::read_link(e.path().join("ns/net"))
            .ok()
            .and_then(|l| netns_inode(&l.to_string_lossy()));
        let cmdline = std::fs::read(e.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if ns.is_some_and(|i| inodes.contains(&i)) || cmdline.contains(&dir_s) {
            v.push(format!(
                "teardown: process {pid} is left: {}",
                cmdline.trim()
            ));
        }
    }
    if passed && dir.exists() {
        v.push(format!(
            "teardown: the lab's directory {} is left",
            dir.display()
        ));
    }
    if let Some(d) = kubeconfig_dir {
        if d.exists() {
            v.push(format!(
                "teardown: the fake API's kubeconfig directory {} is left",
                d.display()
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(t0: Instant, from_s: f64, to_s: f64, may_fail_traffic: bool) -> FaultSpan {
        FaultSpan {
            start: t0 + Duration::from_secs_f64(from_s),
            end: t0 + Duration::from_secs_f64(to_s),
            may_fail_traffic,
        }
    }

    fn fail(t0: Instant, at_s: f64) -> (Instant, Instant) {
        let s = t0 + Duration::from_secs_f64(at_s);
        (s, s + Duration::from_millis(50))
    }

    /// The soak's case: keepalived killed at 180.4 s (recovery open until 195.4 s), the
    /// watcher restarted 182.6-185.4 s; requests failing at 183-186 s belong to the kill's
    /// recovery as well, so the watcher restart is not blamed; one failing after 195.4 s
    /// (and inside the watcher's own window) is.
    #[test]
    fn a_failure_inside_another_faults_recovery_window_is_not_blamed_on_the_watcher() {
        let t0 = Instant::now();
        let bound = Duration::from_secs(15);
        let faults = [span(t0, 180.4, 180.4, true), span(t0, 182.6, 185.4, false)];
        let fails: Vec<_> = [183.0, 184.0, 185.0, 186.0]
            .iter()
            .map(|&s| fail(t0, s))
            .collect();
        assert_eq!(
            attribute_failures(&faults, &fails, bound),
            vec![(4, 4), (4, 0)],
            "every failure counts for both faults; the watcher restart explains none of the \
             kill's, the kill explains all of the restart's"
        );
        let late = [fail(t0, 196.0)];
        assert_eq!(
            attribute_failures(&faults, &late, bound),
            vec![(0, 0), (1, 1)],
            "after the kill's recovery window only the watcher restart is open"
        );
    }

    /// Two faults that must not fail requests do not excuse each other, and a failure
    /// outside every window is attributed to none.
    #[test]
    fn faults_that_must_not_fail_requests_do_not_excuse_each_other() {
        let t0 = Instant::now();
        let bound = Duration::from_secs(15);
        let faults = [span(t0, 10.0, 70.0, false), span(t0, 72.0, 74.0, false)];
        let fails = [fail(t0, 73.0), fail(t0, 200.0)];
        assert_eq!(
            attribute_failures(&faults, &fails, bound),
            vec![(1, 1), (1, 1)]
        );
    }
}
