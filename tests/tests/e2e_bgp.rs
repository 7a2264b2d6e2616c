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

use anyhow::{bail, Context, Result};
use k8slb_tests::lab::Role;
use k8slb_tests::objects::{svc, tcp};
use k8slb_tests::system::{default_config, Options, System};
use k8slb_tests::traffic::{self, Proto};
use k8slb_tests::wait;
use nix::sys::signal::Signal;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
/// The router, on the lab's switch (198.18.0.5).
const ROUTER: &str = "router";
const ROUTER_INDEX: u8 = 5;
const ROUTER_ASN: u32 = 64513;
const ECMP_NET: &str = "198.18.10.0/24";

/// The router's FRR: every LB node of the switch's subnet may peer (a listen range),
/// multipath over different ASes' paths (all nodes are AS 64512, so plain multipath),
/// BFD at 50 ms x 3.
fn router_conf() -> String {
    format!(
        "frr defaults datacenter
hostname router
log stdout warnings
!
router bgp {ROUTER_ASN}
 bgp router-id 198.18.0.{ROUTER_INDEX}
 no bgp ebgp-requires-policy
 neighbor nodes peer-group
 neighbor nodes remote-as external
 neighbor nodes bfd
 neighbor nodes bfd profile fast
 bgp listen range 198.18.0.0/24 peer-group nodes
 address-family ipv4 unicast
  maximum-paths 16
 exit-address-family
exit
!
bfd
 profile fast
  detect-multiplier 3
  receive-interval 50
  transmit-interval 50
 exit
exit
"
    )
}

/// Starts zebra, bfdd and bgpd in the router's namespace (killed at teardown) and loads
/// [`router_conf`].
fn start_router(sys: &mut System) -> Result<()> {
    let h = sys.lab.add_host(ROUTER, Role::Client, ROUTER_INDEX)?;
    for (k, v) in [
        ("net.ipv4.ip_forward", "1"),
        ("net.ipv4.conf.all.send_redirects", "0"),
        ("net.ipv4.conf.default.send_redirects", "0"),
        ("net.ipv4.conf.eth0.send_redirects", "0"),
        // Spread flows by ports too (L4 hash), not only by addresses.
        ("net.ipv4.fib_multipath_hash_policy", "1"),
    ] {
        sys.lab.sysctl(&h.ns, k, v)?;
    }
    let dir = sys.lab.dir.join("router-frr");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("empty.conf"), "")?;
    std::fs::write(dir.join("frr.conf"), router_conf())?;
    let frr = nix::unistd::User::from_name("frr")?.context("no user frr: apt-get install frr")?;
    for p in [dir.clone(), dir.join("empty.conf"), dir.join("frr.conf")] {
        nix::unistd::chown(&p, Some(frr.uid), Some(frr.gid))?;
    }
    let d = dir.to_string_lossy().into_owned();
    let zserv = format!("{d}/zserv.api");
    for name in ["zebra", "bfdd", "bgpd"] {
        let bin = format!("/usr/lib/frr/{name}");
        let pid = format!("{d}/{name}.pid");
        let empty = format!("{d}/empty.conf");
        let ctl = format!("{d}/bfdd.sock");
        let mut cmd = vec![
            bin.as_str(),
            "--vty_socket",
            &d,
            "-z",
            &zserv,
            "-i",
            &pid,
            "-f",
            &empty,
            "-P",
            "0",
            "--log",
            "stdout",
        ];
        if name == "bfdd" {
            cmd.extend(["--bfdctl", ctl.as_str()]);
        }
        sys.lab.spawn_in(ROUTER, &format!("router-{name}"), &cmd)?;
        let sock = if name == "zebra" {
            zserv.clone()
        } else {
            format!("{d}/{name}.vty")
        };
        wait::until(Duration::from_secs(10), || {
            Ok(std::path::Path::new(&sock).exists())
        })
        .with_context(|| format!("router {name} did not come up"))?;
    }
    wait::until(Duration::from_secs(10), || {
        Ok(std::path::Path::new(&format!("{d}/zebra.vty")).exists())
    })?;
    let conf = format!("{d}/frr.conf");
    sys.lab
        .check_in(ROUTER, &["vtysh", "--vty_socket", &d, "-f", &conf])
        .context("loading the router's config")?;
    // The client reaches the BGP pool through the router only.
    let gw = h.v4.to_string();
    sys.lab.sysctl(
        &sys.lab.host("client").ns.clone(),
        "net.ipv4.conf.all.accept_redirects",
        "0",
    )?;
    sys.lab.ip(
        &sys.lab.host("client").ns.clone(),
        &["route", "add", ECMP_NET, "via", &gw],
    )?;
    Ok(())
}

/// The router's next hops for `vip` (the LB nodes' addresses), from the kernel.
fn next_hops(sys: &System, vip: IpAddr) -> Result<Vec<String>> {
    let out = sys.lab.ip(
        &sys.lab.host(ROUTER).ns.clone(),
        &["-j", "route", "show", &format!("{vip}/32")],
    )?;
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or(json!([]));
    let mut hops = Vec::new();
    for r in v.as_array().into_iter().flatten() {
        if let Some(g) = r.get("gateway").and_then(|g| g.as_str()) {
            hops.push(g.to_string());
        }
        for n in r
            .get("nexthops")
            .and_then(|n| n.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(g) = n.get("gateway").and_then(|g| g.as_str()) {
                hops.push(g.to_string());
            }
        }
    }
    hops.sort();
    Ok(hops)
}

fn wait_hops(sys: &System, vip: IpAddr, n: usize) -> Result<Duration> {
    let t0 = Instant::now();
    wait::until(T, || Ok(next_hops(sys, vip)?.len() == n)).with_context(|| {
        format!(
            "router: {vip} never had {n} next hops ({:?})",
            next_hops(sys, vip)
        )
    })?;
    Ok(t0.elapsed())
}

/// TCP connections accepted by each LB node's namespace so far (`/proc/net/snmp`).
fn passive_opens(sys: &System) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for n in sys.lb_nodes() {
        let snmp = sys.lab.check_in(&n, &["cat", "/proc/net/snmp"])?;
        let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
        let (Some(h), Some(v)) = (tcp.next(), tcp.next()) else {
            bail!("no Tcp lines in {n}'s /proc/net/snmp");
        };
        let i = h
            .split_whitespace()
            .position(|k| k == "PassiveOpens")
            .context("PassiveOpens")?;
        out.insert(n, v.split_whitespace().nth(i).context("value")?.parse()?);
    }
    Ok(out)
}

fn config() -> serde_json::Value {
    let mut pools = default_config(0.1)["pools"].clone();
    pools["ecmp"] = json!({
        "network": ECMP_NET, "range": "198.18.10.10-198.18.10.20", "mode": "bgp"
    });
    json!({
        "pools": pools,
        "bgp": { "asn": 64512, "peers": [
            { "address": format!("198.18.0.{ROUTER_INDEX}"), "asn": ROUTER_ASN, "bfd": true }
        ] }
    })
}

#[test]
#[ignore = "needs root: the lab's network namespaces with FRR, the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn bgp_pool_spreads_over_three_nodes_and_withdraws_on_failure() {
    k8slb_tests::bins::system("vtysh").expect("FRR (apt-get install frr)");
    let mut opts = Options::new("bgp").lbs(3);
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
    eprintln!("bgp_spread: {per:?} of {total} accepted connections (1000 requests)");
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
    for p in sys.pids_named(lb1, "haproxy").unwrap() {
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
