//! Root tests: what a real LB node found (issue 9), with the real `k8slb-actor run`,
//! keepalived and HAProxy in a network namespace of the test's own (`k8slbn-<pid>-<n>`,
//! addresses from 198.18.7.0/24).
//!
//! - readiness tells the truth: while HAProxy cannot start (its port is taken in the
//!   namespace), `/readyz` is 503 and says why, also after the actor's retry, and
//!   `reloads_total{daemon="haproxy",result="failed"}` counts the failures; once the port
//!   is free, HAProxy runs and `/readyz` is 200.
//! - the open-files limit: the actor runs under `prlimit --nofile=4096:4096` with k8slb's
//!   DEFAULT HAProxy sections (`maxconn 20000`, which needs ~40,000 descriptors):
//!   HAProxy starts, a request through the VIP reaches the backend, the log says once
//!   that maxconn was lowered (configured value, limit, value used), and the metrics
//!   `fd_limit` and `proxy_maxconn` show it. The same for nginx with its default
//!   events block (`worker_connections 16384` is lowered to fit, so nginx does not
//!   warn that it exceeds the limit).
//! - interface detection ignores the VIPs: a running node whose pool loses its
//!   `interface` does not find the interface through the VIP keepalived put there (the
//!   apply fails with a clear error, the running configs stay); once the node has a real
//!   address in the pool's network, that interface is chosen and the VIP moves to it.
//!
//! Ignored, with the reason, by plain `cargo test`; `./scripts/test.sh` runs them. Run,
//! they FAIL (never skip) without root or without haproxy / keepalived / ip.
//!
//! Run: `cargo test -p k8slb-actor --test netns_lb_node -- --include-ignored --test-threads=1`.

mod support;

use k8slb_common::state::State;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use support::state_json::StateJson;
use support::{require_root_and, wait_until, ActorProc, Netns, ACTOR};

/// This file's namespaces are `k8slbn-<pid>-<n>`.
const NS_PREFIX: &str = "k8slbn";
const VIP: &str = "198.18.7.10";
const ADMIN: &str = "127.0.0.1:9254";

/// One node `n1` (198.18.7.2 on eth0), one VIP, one TCP Service on port 8080 whose
/// endpoint is `backend` (an address:port in the namespace).
fn state(backend: (&str, u16)) -> State {
    StateJson::pool("198.18.7.0/24", "198.18.7.10", 71)
        .node("n1", "198.18.7.2")
        .service("default/web", VIP, &[8080], backend)
        .state()
}

fn start_actor(ns: &Netns, dir: &Path) -> ActorProc {
    ActorProc::start(ns, dir, "n1", dir.join("work"), dir.join("actor.log"))
}

/// The value of one sample of the actor's `/metrics` (0 when absent).
fn metric(ns: &Netns, sample: &str) -> f64 {
    ns.get(ADMIN, "/metrics")
        .lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// `k8slb-actor run` under `prlimit --nofile=<n>:<n>` (soft and hard), otherwise as
/// [`ActorProc::start`].
fn start_actor_with_nofile(ns: &Netns, dir: &Path, nofile: u64, proxy: &str) -> ActorProc {
    let mut cmd = ns.cmd("prlimit");
    cmd.arg(format!("--nofile={nofile}:{nofile}")).arg(ACTOR);
    run_actor(cmd, dir, ADMIN, proxy)
}

/// `<cmd> run --node n1 --admin-addr <admin> --proxy <proxy>` on `dir`'s state file and
/// work dir, logging to `dir/actor.log` (`cmd` is the actor, or a wrapper naming it).
fn run_actor(mut cmd: std::process::Command, dir: &Path, admin: &str, proxy: &str) -> ActorProc {
    let log = dir.join("actor.log");
    let f = std::fs::File::create(&log).unwrap();
    let work = dir.join("work");
    let child = cmd
        .args(["run", "--node", "n1", "--admin-addr", admin])
        .args(["--min-reload-interval-ms", "100", "--proxy", proxy])
        .arg("--state")
        .arg(format!("file:{}", dir.join("state.json").display()))
        .arg("--work-dir")
        .arg(&work)
        .env("NO_COLOR", "1")
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    ActorProc { child, log, work }
}

/// A process holding `addr` in the namespace (`k8slb-actor debug listen`), killed on
/// drop.
struct Blocker(std::process::Child);

impl Blocker {
    fn start(ns: &Netns, addr: &str) -> Blocker {
        Blocker::answering(ns, addr, None)
    }
    /// With `answer`: a backend answering every request with it.
    fn answering(ns: &Netns, addr: &str, answer: Option<&str>) -> Blocker {
        let mut cmd = ns.cmd(ACTOR);
        cmd.args(["debug", "listen", "--addr", addr]);
        if let Some(a) = answer {
            cmd.args(["--answer", a]);
        }
        let mut c = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(c.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("listening"), "blocker: {line:?}");
        Blocker(c)
    }
}

impl Drop for Blocker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs root: a network namespace with the real actor, keepalived and the proxy; ./scripts/test.sh runs it"]
fn netns_actor_is_not_ready_while_haproxy_cannot_start_and_ready_once_it_runs() {
    require_root_and(&["ip", "haproxy", "keepalived"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("eth0", "peer0", "198.18.7.2/24");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("state.json"),
        state(("198.18.7.2", 9001)).to_json(),
    )
    .unwrap();

    // HAProxy's address is taken: `haproxy -c` passes, the start fails ("cannot bind").
    // The blocker holds the VIP's own address and port (a port held on every address,
    // 0.0.0.0:8080, is caught before the start: the actor leaves that Service out).
    let st = ns
        .cmd("sysctl")
        .args(["-qw", "net.ipv4.ip_nonlocal_bind=1"])
        .status()
        .unwrap();
    assert!(st.success(), "sysctl ip_nonlocal_bind");
    let blocker = Blocker::start(&ns, &format!("{VIP}:8080"));
    let a = start_actor(&ns, dir.path());

    // Wait for the actor's second apply of the same state (its retry after a failure):
    // before issue 9's fix, that retry saw the installed text, called it unchanged, and
    // the node was Ready from then on.
    let applies = |ns: &Netns| {
        ["ok", "failed", "unchanged"]
            .iter()
            .map(|r| metric(ns, &format!("k8slb_actor_applies_total{{result=\"{r}\"}}")))
            .sum::<f64>()
    };
    assert!(
        wait_until(Duration::from_secs(40), || applies(&ns) >= 2.0),
        "no second apply; log:\n{}",
        a.log()
    );
    let ready = ns.get(ADMIN, "/readyz");
    assert!(
        ready.contains(" 503 ") && ready.contains("haproxy not running"),
        "{ready}\nlog:\n{}",
        a.log()
    );
    // The retry was a start of HAProxy (that failed again): no apply succeeded.
    assert!(
        metric(&ns, "k8slb_actor_applies_total{result=\"failed\"}") >= 2.0
            && metric(&ns, "k8slb_actor_applies_total{result=\"ok\"}") == 0.0
            && metric(&ns, "k8slb_actor_applies_total{result=\"unchanged\"}") == 0.0,
        "an apply succeeded while HAProxy could not start; log:\n{}",
        a.log()
    );
    let failed = metric(
        &ns,
        "k8slb_actor_reloads_total{daemon=\"haproxy\",result=\"failed\"}",
    );
    assert!(failed >= 2.0, "failed starts counted: {failed}");
    println!(
        "while the port is taken: {} failed HAProxy starts; /readyz: {}",
        failed,
        ready.lines().last().unwrap_or("")
    );

    // The cause is removed: the supervisor's next restart succeeds, the node is ready
    // and holds the VIP.
    drop(blocker);
    assert!(
        wait_until(Duration::from_secs(30), || ns
            .get(ADMIN, "/readyz")
            .contains(" 200 ")),
        "never ready after the port was freed: {}\nlog:\n{}",
        ns.get(ADMIN, "/readyz"),
        a.log()
    );
    assert!(
        wait_until(Duration::from_secs(10), || ns.has_addr(VIP) == 1),
        "VIP never arrived; log:\n{}",
        a.log()
    );
}

#[test]
#[ignore = "needs root: a network namespace with the real actor, keepalived and the proxy; ./scripts/test.sh runs it"]
fn netns_haproxy_with_the_default_maxconn_serves_under_a_4096_open_files_limit() {
    require_root_and(&["ip", "haproxy", "keepalived", "prlimit"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("eth0", "peer0", "198.18.7.2/24");
    let dir = tempfile::tempdir().unwrap();
    let mut s = state(("198.18.7.2", 9001));
    // k8slb's built-in HAProxy sections, as a config without `haproxy` gets them.
    s.config.haproxy = k8slb_common::config::default_haproxy();
    assert!(s
        .config
        .haproxy
        .global
        .iter()
        .any(|l| l.as_str() == "maxconn 20000"));
    std::fs::write(dir.path().join("state.json"), s.to_json()).unwrap();
    let _backend = Blocker::answering(&ns, "198.18.7.2:9001", Some("backend-9001"));

    let a = start_actor_with_nofile(&ns, dir.path(), 4096, "haproxy");
    assert!(
        wait_until(Duration::from_secs(30), || ns
            .get(ADMIN, "/readyz")
            .contains(" 200 ")),
        "never ready: {}\nlog:\n{}",
        ns.get(ADMIN, "/readyz"),
        a.log()
    );
    assert!(
        wait_until(Duration::from_secs(10), || ns
            .get(&format!("{VIP}:8080"), "/")
            .contains("backend-9001")),
        "no answer through the VIP; log:\n{}",
        a.log()
    );
    let cfg = std::fs::read_to_string(dir.path().join("work/haproxy.cfg")).unwrap();
    let maxconn: u64 = cfg
        .lines()
        .find_map(|l| l.trim().strip_prefix("maxconn "))
        .expect("a maxconn line")
        .parse()
        .unwrap();
    assert!((1000..2048).contains(&maxconn), "maxconn {maxconn}");
    assert_eq!(metric(&ns, "k8slb_actor_fd_limit"), 4096.0);
    assert_eq!(metric(&ns, "k8slb_actor_proxy_maxconn"), maxconn as f64);
    let log = a.log();
    let lowered: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("maxconn 20000 lowered to"))
        .collect();
    assert_eq!(lowered.len(), 1, "said once:\n{log}");
    assert!(
        lowered[0].contains(&format!(
            "lowered to {maxconn}: the open-files limit is 4096"
        )),
        "{}",
        lowered[0]
    );
    assert!(
        !log.contains("Cannot raise FD limit"),
        "HAProxy complained:\n{log}"
    );
    println!("under nofile 4096: maxconn 20000 rendered as {maxconn}; served through {VIP}:8080");
}

/// Replace the state file atomically (the actor re-reads it).
fn write_state(dir: &Path, s: &State) {
    let tmp = dir.join("state.json.tmp");
    std::fs::write(&tmp, s.to_json()).unwrap();
    std::fs::rename(&tmp, dir.join("state.json")).unwrap();
}

#[test]
#[ignore = "needs root: a network namespace with the real actor, keepalived and the proxy; ./scripts/test.sh runs it"]
fn netns_a_pool_without_interface_is_not_detected_through_its_own_vip() {
    require_root_and(&["ip", "haproxy", "keepalived"]);
    let ns = Netns::new(NS_PREFIX);
    // eth0: the node's address outside the pool's network; eth1: none yet.
    ns.veth("eth0", "peer0", "198.18.8.2/24");
    ns.ip("link add eth1 type veth peer name peer1");
    ns.ip("link set eth1 up");
    ns.ip("link set peer1 up");
    let dir = tempfile::tempdir().unwrap();
    let _backend = Blocker::answering(&ns, "198.18.8.2:9001", Some("backend-9001"));
    let mut s = state(("198.18.8.2", 9001));
    let pool: k8slb_common::names::PoolName = "default".parse().unwrap();
    s.config.pools.get_mut(&pool).unwrap().interface = Some("eth0".parse().unwrap());
    write_state(dir.path(), &s);

    // 1. The pool forces eth0: keepalived puts the VIP there.
    let a = start_actor(&ns, dir.path());
    assert!(
        wait_until(Duration::from_secs(20), || ns.held_on(VIP) == ["eth0"]),
        "VIP never on eth0: {:?}; log:\n{}",
        ns.held_on(VIP),
        a.log()
    );

    // 2. The pool loses `interface`. The only address in 198.18.7.0/24 is the VIP on
    //    eth0: no interface (before the fix, the VIP itself made eth0 the choice).
    s.config.pools.get_mut(&pool).unwrap().interface = None;
    write_state(dir.path(), &s);
    assert!(
        wait_until(Duration::from_secs(10), || metric(
            &ns,
            "k8slb_actor_applies_total{result=\"failed\"}"
        ) >= 1.0),
        "the apply did not fail; log:\n{}",
        a.log()
    );
    let log = a.log();
    assert!(
        log.contains("no interface for pool default (VRRP instance 71): no address of this node (VIPs do not count)"),
        "{log}"
    );
    assert_eq!(ns.held_on(VIP), ["eth0"], "the running config stays");

    // 3. A real address in the pool's network on eth1: that interface (at the actor's
    //    retry), and the VIP moves there.
    ns.ip("addr add 198.18.7.2/24 dev eth1");
    assert!(
        wait_until(Duration::from_secs(30), || ns.held_on(VIP) == ["eth1"]),
        "VIP never moved to eth1: {:?}; log:\n{}",
        ns.held_on(VIP),
        a.log()
    );
    let ka = std::fs::read_to_string(dir.path().join("work/keepalived.conf")).unwrap();
    assert!(ka.contains("interface eth1"), "{ka}");
}

#[test]
#[ignore = "needs root: a network namespace with the real actor, keepalived and the proxy; ./scripts/test.sh runs it"]
fn netns_nginx_with_the_default_events_serves_under_a_4096_open_files_limit() {
    require_root_and(&["ip", "nginx", "keepalived", "prlimit"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("eth0", "peer0", "198.18.7.2/24");
    let dir = tempfile::tempdir().unwrap();
    let mut s = state(("198.18.7.2", 9001));
    s.config.nginx = k8slb_common::config::default_nginx();
    // An L7 port: nginx's http block.
    for svc in s.services.values_mut() {
        for p in &mut svc.ports {
            p.mode = k8slb_common::state::Mode::Http;
        }
    }
    std::fs::write(dir.path().join("state.json"), s.to_json()).unwrap();
    let _backend = Blocker::answering(&ns, "198.18.7.2:9001", Some("backend-9001"));

    let a = start_actor_with_nofile(&ns, dir.path(), 4096, "nginx");
    assert!(
        wait_until(Duration::from_secs(30), || ns
            .get(ADMIN, "/readyz")
            .contains(" 200 ")),
        "never ready: {}\nlog:\n{}",
        ns.get(ADMIN, "/readyz"),
        a.log()
    );
    assert!(
        wait_until(Duration::from_secs(10), || ns
            .get(&format!("{VIP}:8080"), "/")
            .contains("backend-9001")),
        "no answer through the VIP; log:\n{}",
        a.log()
    );
    let cfg = std::fs::read_to_string(dir.path().join("work/nginx.conf")).unwrap();
    let wc: u64 = cfg
        .lines()
        .find_map(|l| l.trim().strip_prefix("worker_connections "))
        .expect("a worker_connections line")
        .trim_end_matches(';')
        .parse()
        .unwrap();
    assert!(wc < 4096, "worker_connections {wc}");
    assert_eq!(metric(&ns, "k8slb_actor_proxy_maxconn"), wc as f64);
    let log = a.log();
    assert_eq!(
        log.matches("worker_connections 16384 (the actor's default) lowered to")
            .count(),
        1,
        "{log}"
    );
    assert!(
        !log.contains("exceed open file resource limit"),
        "nginx complained:\n{log}"
    );
    println!("under nofile 4096: nginx worker_connections {wc}; served through {VIP}:8080");
}

/// The admin port never answers on a VIP: the actor listens on `0.0.0.0:9254` of the
/// node's (here: the namespace's) network, where the VIP it holds is a local address
/// too. `/metrics` and `/readyz` answer on the node's own address; a connection to
/// VIP:9254 is closed unanswered, while the Service on VIP:8080 is served.
#[test]
#[ignore = "needs root: a network namespace with the real actor, keepalived and the proxy; ./scripts/test.sh runs it"]
fn netns_the_admin_port_answers_on_the_node_address_and_never_on_a_vip() {
    require_root_and(&["ip", "haproxy", "keepalived"]);
    let ns = Netns::new(NS_PREFIX);
    ns.veth("eth0", "peer0", "198.18.7.2/24");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("state.json"),
        state(("198.18.7.2", 9001)).to_json(),
    )
    .unwrap();
    let _backend = Blocker::answering(&ns, "198.18.7.2:9001", Some("backend-9001"));
    let a = run_actor(ns.cmd(ACTOR), dir.path(), "0.0.0.0:9254", "haproxy");
    let node = "198.18.7.2:9254";
    assert!(
        wait_until(Duration::from_secs(30), || ns
            .get(node, "/readyz")
            .contains(" 200 ")),
        "never ready on the node address: {}\nlog:\n{}",
        ns.get(node, "/readyz"),
        a.log()
    );
    assert!(
        wait_until(Duration::from_secs(10), || ns
            .get(&format!("{VIP}:8080"), "/")
            .contains("backend-9001")),
        "no answer through the VIP; log:\n{}",
        a.log()
    );
    assert!(ns.has_addr(VIP) > 0, "the VIP is a local address");
    assert!(ns
        .get(node, "/metrics")
        .contains("k8slb_actor_applies_total"));
    for path in ["/metrics", "/readyz", "/livez"] {
        let got = ns.get(&format!("{VIP}:9254"), path);
        assert!(
            !got.contains("HTTP/") && !got.contains("k8slb_actor"),
            "answered on the VIP {path}: {got}"
        );
    }
}
