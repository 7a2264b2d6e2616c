//! Root tests of the actor's runtime, each in a network namespace it creates
//! (`k8slbt-<pid>-<n>`, deleted on drop even on panic), with addresses from 198.18.0.0/15
//! only. Ignored, with the reason, by plain `cargo test`; `./scripts/test.sh` runs them.
//! Run, they FAIL (never skip) when not root or when a binary is missing.
//!
//! Run: `cargo test -p k8slb-actor --test netns_runtime -- --include-ignored` (as root;
//! haproxy, keepalived, iproute2 installed).
//!
//! Processes run inside the namespace through `ip netns exec`; the test process itself
//! never changes namespace. Daemons driven from the library get a wrapper script
//! (`exec ip netns exec <ns> haproxy "$@"`) as their binary.

mod support;

use k8slb_actor::admin::Metrics;
use k8slb_actor::apply::{Applied, Applier, Desired, NodeContext, NodeRenderer, SlotOutcome};
use k8slb_actor::daemons::{Haproxy, Paths};
use k8slb_common::state::State;
use std::cell::Cell;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::state_json::StateJson;
use support::{pid_of, require_root_and, wait_until, ActorProc, Netns, NoKeepalived, ACTOR};

/// This file's namespaces are `k8slbt-<pid>-<n>`.
const NS_PREFIX: &str = "k8slbt";

// ---------------------------------------------------------------------------------
// interface detection over real netlink

#[test]
#[ignore = "needs root: a network namespace with netlink and the real daemons; ./scripts/test.sh runs it"]
fn netns_interface_detection_longest_prefix() {
    require_root_and(&["ip"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("wide0", "wide1", "198.18.0.1/16");
    ns.veth("narrow0", "narrow1", "198.18.3.1/24");
    let detect = |ip: &str| {
        let out = ns
            .cmd(ACTOR)
            .args(["debug", "detect", ip])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        detect("198.18.3.77"),
        "narrow0",
        "the /24 must win over the /16"
    );
    assert_eq!(detect("198.18.200.1"), "wide0");
    assert_eq!(detect("198.19.0.1"), "", "no interface contains it");
    let addrs = String::from_utf8(
        ns.cmd(ACTOR)
            .args(["debug", "addrs"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(addrs.contains("narrow0 198.18.3.1/24"), "{addrs}");
    assert!(addrs.contains("wide0 198.18.0.1/16"), "{addrs}");
}

// ---------------------------------------------------------------------------------
// HAProxy through the apply pipeline, with stand-ins for render and keepalived

/// View = (generation, backend port of s1). Render writes an HAProxy config whose
/// frontend answers itself (`/` on 8080 returns "gen N") and a backend `be` with one
/// server `s1`; the runtime diff moves `s1` when only its port changed.
struct TestRenderer {
    next: Cell<(u32, u16)>,
    paths: Paths,
}

impl NodeRenderer for TestRenderer {
    type View = (u32, u16);
    fn view(
        &self,
        _: &State,
        _: &NodeContext,
        _: Option<&Self::View>,
    ) -> Result<Self::View, k8slb_actor::view::ViewError> {
        Ok(self.next.get())
    }
    fn render(&self, v: &Self::View) -> Result<Desired, k8slb_actor::render_error::RenderError> {
        let (gen, port) = *v;
        let proxy = format!(
            "global\n  stats socket {rt} mode 600 level admin expose-fd listeners\n  pidfile {pid}\n\
defaults\n  mode http\n  timeout connect 1s\n  timeout client 5s\n  timeout server 5s\n\
frontend fe\n  bind 198.18.0.1:8080\n  http-request return status 200 content-type text/plain string \"gen {gen}\" if {{ path / }}\n  default_backend be\n\
backend be\n  server s1 198.18.0.1:{port}\n\
frontend b1\n  bind 198.18.0.1:9001\n  http-request return status 200 content-type text/plain string one\n\
frontend b2\n  bind 198.18.0.1:9002\n  http-request return status 200 content-type text/plain string two\n",
            rt = self.paths.haproxy_runtime_socket().display(),
            pid = self.paths.haproxy_pid().display(),
        );
        let broken = if gen == 999 {
            "frontend broken\n  no-such-keyword 1\n"
        } else {
            ""
        };
        Ok(Desired {
            keepalived: "# none\n".into(),
            proxy: Some(format!("{proxy}{broken}")),
            files: Default::default(),
        })
    }
    fn runtime_diff(&self, old: &Self::View, new: &Self::View) -> Option<Vec<String>> {
        (old.0 == new.0).then(|| vec![format!("set server be/s1 addr 198.18.0.1 port {}", new.1)])
    }
}

fn any_state() -> State {
    State::from_json(include_str!("fixtures/plain-http.json")).expect("fixture state")
}

fn haproxy_applier(ns: &Netns, dir: &Path) -> (Applier<TestRenderer>, Arc<Metrics>, Paths) {
    let paths = Paths::new(dir);
    let wrapper = ns.wrapper(dir, "haproxy");
    let metrics = Arc::new(Metrics::new());
    let mut a = Applier::new(
        TestRenderer {
            next: Cell::new((0, 9001)),
            paths: paths.clone(),
        },
        Box::new(NoKeepalived {
            cfg: dir.join("keepalived.conf"),
            up: false,
        }),
        Some(Box::new(Haproxy::new(wrapper, paths.clone()))),
        metrics.clone(),
    );
    a.min_reload_interval = Duration::ZERO;
    (a, metrics, paths)
}

fn get_in(ns: &Netns, addr: &str, path: &str) -> String {
    ns.get(addr, path)
}

#[test]
#[ignore = "needs root: a network namespace with netlink and the real daemons; ./scripts/test.sh runs it"]
fn netns_haproxy_seamless_reload_refuses_nothing() {
    require_root_and(&["ip", "haproxy"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("v0", "v1", "198.18.0.1/24");
    let dir = tempfile::tempdir().unwrap();
    let (mut applier, metrics, paths) = haproxy_applier(&ns, dir.path());
    let state = any_state();
    let ctx = NodeContext::default();

    let first = applier
        .apply(&state, &ctx, Instant::now())
        .expect("first apply");
    assert!(
        matches!(
            first,
            Applied::Done {
                proxy: Some(SlotOutcome::Started),
                ..
            }
        ),
        "{first:?}"
    );
    assert!(get_in(&ns, "198.18.0.1:8080", "/").contains("gen 0"));

    let stop = dir.path().join("stop");
    let client = ns
        .cmd(ACTOR)
        .args(["debug", "connect", "--addr", "198.18.0.1:8080", "--until"])
        .arg(&stop)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for gen in 1..=20u32 {
        applier.render_next((gen, 9001));
        let t = Instant::now();
        let r = applier
            .apply(&state, &ctx, Instant::now())
            .expect("reload apply");
        eprintln!(
            "full apply (check + swap + reload + confirm): {:?}",
            t.elapsed()
        );
        assert!(
            matches!(
                r,
                Applied::Done {
                    proxy: Some(SlotOutcome::Reloaded),
                    ..
                }
            ),
            "{r:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(&stop, "").unwrap();
    let out = client.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    let counts: Vec<u64> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|kv| kv.split_once('=').and_then(|(_, v)| v.parse().ok()))
        .collect();
    assert_eq!(counts.len(), 2, "client output: {out}");
    assert!(counts[0] > 100, "too few successful connections: {out}");
    assert_eq!(counts[1], 0, "connections failed during reloads: {out}");
    assert!(get_in(&ns, "198.18.0.1:8080", "/").contains("gen 20"));

    let procs = k8slb_actor::haproxy_rt::show_proc(&paths.haproxy_master_socket()).unwrap();
    assert_eq!(procs.master_reloads(), 20, "{procs:?}");
    let text = metrics.encode();
    assert!(
        text.contains("k8slb_actor_reloads_total{daemon=\"haproxy\",result=\"ok\"} 21"),
        "{text}"
    );
    applier.stop_proxy(Duration::from_secs(3));
}

#[test]
#[ignore = "needs root: a network namespace with netlink and the real daemons; ./scripts/test.sh runs it"]
fn netns_haproxy_endpoint_change_over_runtime_api_without_reload() {
    require_root_and(&["ip", "haproxy"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("v0", "v1", "198.18.0.1/24");
    let dir = tempfile::tempdir().unwrap();
    let (mut applier, metrics, paths) = haproxy_applier(&ns, dir.path());
    let state = any_state();
    let ctx = NodeContext::default();
    applier
        .apply(&state, &ctx, Instant::now())
        .expect("first apply");
    assert!(get_in(&ns, "198.18.0.1:8080", "/x").contains("one"));

    applier.render_next((0, 9002));
    let t = Instant::now();
    let r = applier
        .apply(&state, &ctx, Instant::now())
        .expect("runtime apply");
    // A number for the notes, not an assertion (speed is for benchmarks).
    eprintln!("endpoint change over the Runtime API: {:?}", t.elapsed());
    assert!(
        matches!(
            r,
            Applied::Done {
                proxy: Some(SlotOutcome::Runtime),
                ..
            }
        ),
        "{r:?}"
    );
    assert!(
        get_in(&ns, "198.18.0.1:8080", "/x").contains("two"),
        "the server moved"
    );
    let procs = k8slb_actor::haproxy_rt::show_proc(&paths.haproxy_master_socket()).unwrap();
    assert_eq!(procs.master_reloads(), 0, "no reload: {procs:?}");
    let on_disk = std::fs::read_to_string(paths.haproxy_cfg()).unwrap();
    assert!(
        on_disk.contains("server s1 198.18.0.1:9002"),
        "the file follows: {on_disk}"
    );
    assert!(metrics
        .encode()
        .contains("k8slb_actor_runtime_api_updates_total 1"));

    // An invalid config never replaces the running one.
    applier.render_next((999, 9001));
    let err = applier.apply(&state, &ctx, Instant::now());
    assert!(err.is_err(), "an unknown keyword must fail haproxy -c");
    assert!(std::fs::read_to_string(paths.haproxy_cfg())
        .unwrap()
        .contains(":9002"));
    assert!(metrics
        .encode()
        .contains("k8slb_actor_config_check_failures_total{daemon=\"haproxy\"} 1"));
    assert!(applier.last_error().is_some());
    assert!(
        get_in(&ns, "198.18.0.1:8080", "/x").contains("two"),
        "still serving"
    );
    applier.stop_proxy(Duration::from_secs(3));
}

/// Lets the tests choose the next view of [`TestRenderer`].
trait RenderNext {
    fn render_next(&mut self, v: (u32, u16));
}

impl RenderNext for Applier<TestRenderer> {
    fn render_next(&mut self, v: (u32, u16)) {
        self.renderer().next.set(v);
    }
}

// ---------------------------------------------------------------------------------
// the whole actor: stale VIP cleanup before keepalived, restart after SIGKILL, SIGTERM

fn actor_state() -> String {
    StateJson::pool("198.18.5.0/24", "198.18.5.0", 51)
        .node("n1", "198.18.5.2")
        .service("default/web", "198.18.5.10", &[8080], ("198.18.5.2", 9001))
        .json()
}

fn start_actor(ns: &Netns, dir: &Path, log_name: &str) -> ActorProc {
    ActorProc::start(ns, dir, "n1", dir.join("work"), dir.join(log_name))
}

#[test]
#[ignore = "needs root: a network namespace with netlink and the real daemons; ./scripts/test.sh runs it"]
fn netns_actor_cleans_stale_vip_before_keepalived_and_releases_on_sigterm() {
    require_root_and(&["ip", "haproxy", "keepalived"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("eth0", "peer0", "198.18.5.2/24");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("state.json"), actor_state()).unwrap();

    // 1. first run: keepalived becomes MASTER and holds the VIP; ready.
    let mut a = start_actor(&ns, dir.path(), "actor1.log");
    assert!(
        wait_until(Duration::from_secs(20), || ns.has_addr("198.18.5.10") == 1),
        "VIP never arrived; actor log:\n{}",
        a.log()
    );
    assert!(
        wait_until(Duration::from_secs(5), || get_in(
            &ns,
            "127.0.0.1:9254",
            "/readyz"
        )
        .contains(" 200 ")),
        "not ready; log:\n{}",
        a.log()
    );
    let metrics = get_in(&ns, "127.0.0.1:9254", "/metrics");
    assert!(metrics.contains("k8slb_actor_reloads_total"), "{metrics}");
    assert!(dir.path().join("work/last-state.json").exists());

    // 2. unclean exit: the actor and keepalived are SIGKILLed, the VIP stays behind.
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let work = dir.path().join("work");
    // The VRRP child first: it would release the VIPs when its parent dies.
    for f in ["keepalived-vrrp.pid", "keepalived.pid"] {
        if let Some(pid) = pid_of(&work.join(f)) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        ns.has_addr("198.18.5.10"),
        1,
        "precondition: the VIP is left behind"
    );

    // 3. restart with the source unavailable: it starts from last-state.json, removes the
    //    stale VIP BEFORE keepalived starts, and keepalived takes it again (exactly once).
    std::fs::remove_file(dir.path().join("state.json")).unwrap();
    let mut b = start_actor(&ns, dir.path(), "actor2.log");
    assert!(
        wait_until(Duration::from_secs(20), || {
            let l = b.log();
            l.contains("daemon=keepalived")
                && l.contains("started")
                && ns.has_addr("198.18.5.10") == 1
        }),
        "no keepalived start / VIP after restart; log:\n{}",
        b.log()
    );
    let log = b.log();
    let removed = log
        .find("removed VIP")
        .unwrap_or_else(|| panic!("stale VIP not removed; log:\n{log}"));
    let ka_started = log
        .lines()
        .scan(0usize, |off, l| {
            let here = *off;
            *off += l.len() + 1;
            Some((here, l))
        })
        .find(|(_, l)| l.contains("keepalived") && l.contains("started"))
        .map(|(o, _)| o)
        .unwrap();
    assert!(
        removed < ka_started,
        "the stale VIP must go before keepalived starts; log:\n{log}"
    );
    assert!(
        log.contains("starting from the last applied state"),
        "{log}"
    );
    assert_eq!(
        ns.has_addr("198.18.5.2"),
        1,
        "the node's own address inside the pool network is kept"
    );

    // 4. SIGTERM: exit 0, the VIP is released.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(b.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut status = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            status = b.child.try_wait().unwrap();
            status.is_some()
        }),
        "actor did not exit on SIGTERM; log:\n{}",
        b.log()
    );
    assert!(
        status.unwrap().success(),
        "exit status {status:?}; log:\n{}",
        b.log()
    );
    assert_eq!(
        ns.has_addr("198.18.5.10"),
        0,
        "VIP released at shutdown; log:\n{}",
        b.log()
    );
}
