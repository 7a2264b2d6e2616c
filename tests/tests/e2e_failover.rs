//! VIP failover on real keepalived: link cut, proxy killed, actor SIGKILLed.
//! Needs root, keepalived, haproxy and the built binaries; fails (never skips) without them.
//! How fast failover is, is measured by scripts/bench.sh, not asserted here: the tests
//! check that the service comes back (within a deadline) and where the VIP is.

use k8slb_tests::objects::{svc, tcp};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::{self, Proto};
use k8slb_tests::wait;
use nix::sys::signal::Signal;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

fn web(sys: &System) -> (IpAddr, SocketAddr) {
    let s = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply_service(&s).unwrap();
    let ip = sys.wait_ips("default/web", T).unwrap()[0];
    let target = SocketAddr::new(ip, 80);
    sys.wait_serving(Proto::Http, target, T).unwrap();
    (ip, target)
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn master_link_cut_backup_answers() {
    let mut sys = System::start(Options::new("linkcut")).expect("system");
    let (ip, target) = web(&sys);
    let master = sys.wait_one_holder(ip, T).unwrap();
    let probe = traffic::start_probe(
        &mut sys.lab,
        "client",
        "probe",
        Proto::Http,
        target,
        10,
        Duration::from_secs(60),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    sys.lab.cut_link(&master).unwrap();
    // The backup takes over...
    wait::until(T, || Ok(sys.holders(ip)?.iter().any(|h| *h != master)))
        .expect("no backup took the VIP");
    sys.wait_serving(Proto::Http, target, T).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let p = probe.stop_probe(&mut sys.lab).unwrap();
    eprintln!("link cut: dark for {:.0} ms ({p:?})", p.max_gap_ms);
    assert!(p.recovered, "{p:?}");
    assert!(p.by_backend.len() == 2, "{p:?}");
    // ...and when the link comes back, the VIP is on exactly one node.
    sys.lab.restore_link(&master).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    sys.wait_one_holder(ip, T).unwrap();
    sys.wait_serving(Proto::Http, target, T).unwrap();
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 100, 0.0).unwrap();
    assert_eq!(r.failed, 0, "{r:?}");
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn proxy_killed_on_master_service_recovers() {
    let mut sys = System::start(Options::new("proxykill")).expect("system");
    let (ip, target) = web(&sys);
    let master = sys.wait_one_holder(ip, T).unwrap();
    let probe = traffic::start_probe(
        &mut sys.lab,
        "client",
        "probe",
        Proto::Http,
        target,
        10,
        Duration::from_secs(60),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let pids = sys.pids_named(&master, "haproxy").unwrap();
    assert!(!pids.is_empty(), "no haproxy on {master}");
    for p in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), Signal::SIGKILL);
    }
    std::thread::sleep(Duration::from_secs(3));
    sys.wait_serving(Proto::Http, target, T).unwrap();
    let p = probe.stop_probe(&mut sys.lab).unwrap();
    let holder = sys.wait_one_holder(ip, T).unwrap();
    eprintln!(
        "proxy killed on {master}: dark for {:.0} ms, VIP now on {holder} ({p:?})",
        p.max_gap_ms
    );
    assert!(p.recovered, "{p:?}");
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn actor_sigkill_and_restart_never_two_holders() {
    let mut sys = System::start(Options::new("actorkill")).expect("system");
    let (ip, target) = web(&sys);
    let master = sys.wait_one_holder(ip, T).unwrap();
    let probe = traffic::start_probe(
        &mut sys.lab,
        "client",
        "probe",
        Proto::Http,
        target,
        10,
        Duration::from_secs(60),
    )
    .unwrap();
    let mut worst = 1usize;
    let mut check = |sys: &System| -> Vec<String> {
        let h = sys.holders(ip).unwrap();
        worst = worst.max(h.len());
        assert!(h.len() <= 1, "VIP {ip} on two nodes: {h:?}");
        h
    };
    for round in 0..2 {
        let p = sys.actors[&master];
        sys.lab.signal_main(p, Signal::SIGKILL).unwrap();
        sys.lab.wait(p, Duration::from_secs(5)).unwrap();
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            check(&sys);
            std::thread::sleep(Duration::from_millis(20));
        }
        sys.start_actor(&master).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            check(&sys);
            std::thread::sleep(Duration::from_millis(20));
        }
        sys.wait_ready(&master, T)
            .unwrap_or_else(|e| panic!("round {round}: {e:#}"));
        sys.wait_one_holder(ip, T).unwrap();
    }
    sys.wait_serving(Proto::Http, target, T).unwrap();
    let p = probe.stop_probe(&mut sys.lab).unwrap();
    eprintln!(
        "actor killed twice on {master}: worst holders {worst}, dark {:.0} ms",
        p.max_gap_ms
    );
    assert!(p.recovered, "{p:?}");
    // Everything the old actor left behind is gone or adopted: one keepalived per node.
    for n in sys.lb_nodes() {
        let k = sys.pids_named(&n, "keepalived").unwrap();
        assert!(!k.is_empty(), "no keepalived on {n}");
    }
    sys.lab.pass();
}
