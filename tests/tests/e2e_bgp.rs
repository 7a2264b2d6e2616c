//! BGP mode (issue 25) in the lab: an upstream router namespace running FRR with
//! multipath (its config written here), the client behind it, three LB nodes running the
//! actor, which announces a BGP-mode pool's VIP through its own FRR, with BFD.
//!
//! Shown: the VIP is answered by all three nodes (each >= 20% of 1,000 new connections);
//! a proxy killed on one node: its route is withdrawn, then 0 failed new connections; a
//! node's link cut: BFD removes its route (how long new connections fail is printed, not
//! asserted), then 0 failed; a VRRP pool's Service beside it keeps serving throughout.
//! Needs root, FRR, keepalived, haproxy and the built binaries; fails (never skips)
//! without them.

use k8slb_tests::bgp::*;
use k8slb_tests::objects::{svc, tcp};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::{self, Proto};
use k8slb_tests::wait;
use nix::sys::signal::Signal;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[test]
#[ignore = "needs root: the lab's network namespaces with FRR, the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn bgp_pool_spreads_over_three_nodes_and_withdraws_on_failure_haproxy() {
    spread_and_withdraw("haproxy");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with FRR, the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn bgp_pool_spreads_over_three_nodes_and_withdraws_on_failure_nginx() {
    spread_and_withdraw("nginx");
}

fn spread_and_withdraw(proxy: &str) {
    k8slb_tests::bins::system("vtysh").expect("FRR (apt-get install frr)");
    let mut opts = Options::new(&format!("bgp-{proxy}")).lbs(3).proxy(proxy);
    opts.config_extra = config();
    let mut sys = System::start(opts).expect("system");
    start_router(&mut sys).expect("router");

    // A VRRP pool's Service beside the BGP one.
    let web = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply_service(&web).unwrap();
    let web_ip = sys.wait_ips("default/web", T).unwrap()[0];
    let web_target = SocketAddr::new(web_ip, 80);
    sys.wait_serving(Proto::Http, web_target, T).unwrap();

    let fast = svc("default", "fast")
        .port(tcp("http", 80, 8080))
        .annotation("loadbalancer/pool", "ecmp");
    sys.apply_service(&fast).unwrap();
    let ip = sys.wait_ips("default/fast", T).unwrap()[0];
    assert!(ip.to_string().starts_with("198.18.10."), "{ip}");
    let target = SocketAddr::new(ip, 80);
    let took = wait_hops(&sys, ip, 3).expect("three next hops");
    eprintln!(
        "bgp: {ip} announced by 3 nodes ({} ms after its address)",
        took.as_millis()
    );
    sys.wait_serving(Proto::Http, target, T).unwrap();
    for n in sys.lb_nodes() {
        sys.wait_ready(&n, T).unwrap();
        let m = sys.metrics(&n).unwrap();
        assert!(
            m.contains("k8slb_actor_bgp_sessions_established 1"),
            "{n}: {m}"
        );
        assert!(
            m.contains("k8slb_actor_bgp_prefixes_announced 1"),
            "{n}: {m}"
        );
    }

    // Spread: 1,000 new connections, counted where they were accepted.
    let before = passive_opens(&sys).unwrap();
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 1000, 0.0).unwrap();
    let after = passive_opens(&sys).unwrap();
    assert_eq!(r.failed, 0, "{r:?}");
    let per: BTreeMap<&String, u64> = after.iter().map(|(n, a)| (n, a - before[n])).collect();
    let total: u64 = per.values().sum();
    eprintln!("bgp_spread ({proxy}): {per:?} of {total} accepted connections (1000 requests)");
    for (n, c) in &per {
        assert!(
            *c * 5 >= 1000,
            "{n} accepted {c} of 1000 connections: {per:?}"
        );
    }

    // A proxy killed on lb1: its route goes, then nothing fails.
    let probe = traffic::start_probe(
        &mut sys.lab,
        "client",
        "probe-kill",
        Proto::Http,
        target,
        10,
        T,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let lb1 = "lb1";
    let t0 = Instant::now();
    let pids = sys.pids_named(lb1, proxy).unwrap();
    assert!(!pids.is_empty(), "no {proxy} on {lb1}");
    for p in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), Signal::SIGKILL);
    }
    wait::until(T, || Ok(next_hops(&sys, ip)?.len() < 3)).expect("lb1's route withdrawn");
    let withdrawn_ms = t0.elapsed().as_millis();
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 300, 0.0).unwrap();
    let p = probe.stop_probe(&mut sys.lab).unwrap();
    eprintln!(
        "bgp_proxy_kill: route withdrawn after {withdrawn_ms} ms; probe failed {} (max gap {:.0} ms); after: {} ok {} failed",
        p.failed, p.max_gap_ms, r.ok, r.failed
    );
    assert_eq!(
        r.failed, 0,
        "new connections failed after the withdrawal: {r:?}"
    );
    // The actor restarts the proxy, and the route comes back.
    wait_hops(&sys, ip, 3).expect("lb1 announces again after its proxy restarted");

    // A node's link cut: BFD takes its route down at the router.
    let probe = traffic::start_probe(
        &mut sys.lab,
        "client",
        "probe-cut",
        Proto::Http,
        target,
        10,
        T,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    sys.lab.cut_link("lb2").unwrap();
    wait::until(T, || Ok(next_hops(&sys, ip)?.len() < 3)).expect("lb2's route removed by BFD");
    let removed_ms = t0.elapsed().as_millis();
    std::thread::sleep(Duration::from_millis(500));
    let p = probe.stop_probe(&mut sys.lab).unwrap();
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 300, 0.0).unwrap();
    eprintln!(
        "bgp_link_cut: route removed after {removed_ms} ms (polled); probe: {} failed, failures from {:?} to {:?} ms, max gap {:.0} ms; after: {} ok {} failed",
        p.failed, p.first_failure_ms, p.last_failure_ms, p.max_gap_ms, r.ok, r.failed
    );
    assert_eq!(r.failed, 0, "new connections failed after BFD: {r:?}");
    sys.lab.restore_link("lb2").unwrap();
    wait_hops(&sys, ip, 3).expect("lb2 back");

    // A rolling restart of every actor (SIGTERM: withdraw, wait for the routes to go,
    // then stop the proxy), with new connections all along.
    let probe = traffic::start_probe(
        &mut sys.lab,
        "client",
        "probe-roll",
        Proto::Http,
        target,
        10,
        Duration::from_secs(300),
    )
    .unwrap();
    for n in sys.lb_nodes() {
        let p = sys.actors[&n];
        let t0 = Instant::now();
        sys.lab.signal_main(p, Signal::SIGTERM).unwrap();
        sys.lab.wait(p, T).unwrap();
        let stopped_ms = t0.elapsed().as_millis();
        assert!(
            next_hops(&sys, ip).unwrap().len() <= 2,
            "{n} stopped, its route stays"
        );
        sys.start_actor(&n).unwrap();
        sys.wait_ready(&n, T).unwrap();
        wait_hops(&sys, ip, 3).expect("the restarted node announces again");
        eprintln!(
            "bgp_rolling_restart: {n} stopped in {stopped_ms} ms, back after {} ms",
            t0.elapsed().as_millis()
        );
    }
    let p = probe.stop_probe(&mut sys.lab).unwrap();
    eprintln!(
        "bgp_rolling_restart: probe {} ok {} failed (max gap {:.0} ms) {:?}",
        p.ok, p.failed, p.max_gap_ms, p.errors
    );
    assert_eq!(
        p.failed, 0,
        "new connections failed during the rolling restart: {p:?}"
    );

    // The VRRP pool's Service was never touched.
    let r = traffic::load(&sys.lab, "client", Proto::Http, web_target, 100, 0.0).unwrap();
    assert_eq!(r.failed, 0, "VRRP pool: {r:?}");
    sys.lab.pass();
}
