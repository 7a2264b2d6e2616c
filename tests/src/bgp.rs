//! BGP mode in the lab (issue 25): an upstream router namespace running FRR with
//! multipath and BFD (its config written here), in front of the lab's LB nodes; the
//! client reaches BGP-mode pools through it. Used by `tests/tests/e2e_bgp.rs` and by
//! `lab-bench bgp` (the `bgp_*` numbers of `./scripts/bench.sh`).

use crate::lab::Role;
use crate::system::{default_config, System};
use crate::wait;
use anyhow::{bail, Context, Result};
use ipnet::IpNet;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

pub const T: Duration = Duration::from_secs(60);
/// The router, on the lab's switch (198.18.0.5).
pub const ROUTER: &str = "router";
pub const ROUTER_INDEX: u8 = 5;
pub const ROUTER_ASN: u32 = 64513;
pub const ECMP_NET: &str = "198.18.10.0/24";
pub const ECMP6_NET: &str = "fd00:10::/64";

/// The TCP MD5 password of the IPv4 sessions (the router's and the actors' Secret
/// `bgp-auth`); the IPv6 sessions have none.
pub const PASSWORD: &str = "s3cret!x";
pub const PASSWORD_SECRET: &str = "bgp-auth";

/// The router's FRR: every LB node of the switch's subnet may peer (a listen range),
/// multipath over different ASes' paths (all nodes are AS 64512, so plain multipath),
/// BFD at 50 ms x 3; the IPv4 sessions with the TCP MD5 password [`PASSWORD`].
pub fn router_conf() -> String {
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
 neighbor nodes password {PASSWORD}
 neighbor nodes6 peer-group
 neighbor nodes6 remote-as external
 neighbor nodes6 bfd
 neighbor nodes6 bfd profile fast
 bgp listen range 198.18.0.0/24 peer-group nodes
 bgp listen range fd00:18::/64 peer-group nodes6
 address-family ipv4 unicast
  maximum-paths 16
 exit-address-family
 address-family ipv6 unicast
  neighbor nodes6 activate
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
pub fn start_router(sys: &mut System) -> Result<()> {
    let h = sys.lab.add_host(ROUTER, Role::Client, ROUTER_INDEX)?;
    for (k, v) in [
        ("net.ipv4.ip_forward", "1"),
        ("net.ipv4.conf.all.send_redirects", "0"),
        ("net.ipv4.conf.default.send_redirects", "0"),
        ("net.ipv4.conf.eth0.send_redirects", "0"),
        // Spread flows by ports too (L4 hash), not only by addresses.
        ("net.ipv4.fib_multipath_hash_policy", "1"),
        ("net.ipv6.conf.all.forwarding", "1"),
        ("net.ipv6.fib_multipath_hash_policy", "1"),
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
    // The router must stay in the path: no redirect to the node it hashed a flow to.
    let client_ns = sys.lab.host("client").ns.clone();
    for k in [
        "net.ipv4.conf.all.accept_redirects",
        "net.ipv4.conf.eth0.accept_redirects",
        "net.ipv6.conf.all.accept_redirects",
        "net.ipv6.conf.eth0.accept_redirects",
    ] {
        sys.lab.sysctl(&client_ns, k, "0")?;
    }
    sys.lab.ip(
        &sys.lab.host("client").ns.clone(),
        &["route", "add", ECMP_NET, "via", &gw],
    )?;
    let gw6 = h.v6.to_string();
    sys.lab.ip(
        &sys.lab.host("client").ns.clone(),
        &["-6", "route", "add", ECMP6_NET, "via", &gw6],
    )?;
    Ok(())
}

/// The router's next hops for `vip` (the LB nodes' addresses), from the kernel.
pub fn next_hops(sys: &System, vip: IpAddr) -> Result<Vec<String>> {
    let out = sys.lab.ip(
        &sys.lab.host(ROUTER).ns.clone(),
        &[
            if vip.is_ipv4() { "-4" } else { "-6" },
            "-j",
            "route",
            "show",
            &IpNet::from(vip).to_string(),
        ],
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

pub fn wait_hops(sys: &System, vip: IpAddr, n: usize) -> Result<Duration> {
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
pub fn passive_opens(sys: &System) -> Result<BTreeMap<String, u64>> {
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

pub fn config() -> serde_json::Value {
    let mut pools = default_config(0.1)["pools"].clone();
    pools["ecmp"] = json!({
        "network": ECMP_NET, "range": "198.18.10.10-198.18.10.20", "mode": "bgp"
    });
    pools["ecmp6"] = json!({
        "network": ECMP6_NET, "range": "fd00:10::10-fd00:10::20", "mode": "bgp"
    });
    json!({
        "pools": pools,
        "bgp": { "asn": 64512, "peers": [
            { "address": format!("198.18.0.{ROUTER_INDEX}"), "asn": ROUTER_ASN, "bfd": true,
              "passwordSecret": PASSWORD_SECRET },
            { "address": format!("fd00:18::{ROUTER_INDEX}"), "asn": ROUTER_ASN, "bfd": true }
        ] }
    })
}

/// The failures of `p` that a change of the router's next hops explains, whatever the
/// nodes do: a connection the router sent to one node, whose next packets it sent to
/// another after the change (the withdrawn node's flows all move; with plain ECMP some
/// flows of the others too, see docs/bgp.md), is reset by that other node after it was
/// made (`read:` or `write:`, `ConnectionReset` or `BrokenPipe`). A new connection
/// refused, or one timed out, is never this: a node announces only while its proxy
/// listens, and withdraws before its proxy stops.
pub fn in_flight_resets(p: &crate::traffic::ProbeResult) -> u64 {
    p.errors
        .iter()
        .filter(|(e, _)| {
            matches!(
                e.as_str(),
                "read:ConnectionReset"
                    | "write:ConnectionReset"
                    | "read:BrokenPipe"
                    | "write:BrokenPipe"
            )
        })
        .map(|(_, n)| n)
        .sum()
}

/// What [`scenario`] measured. The `bgp_*` fields of `./scripts/bench.sh`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Numbers {
    /// New connections accepted by each LB node, of 1,000 (counted by PassiveOpens).
    pub bgp_spread: BTreeMap<String, u64>,
    /// The smallest node's share of them, in percent.
    pub bgp_spread_min_pct: f64,
    pub bgp_spread_failed: u64,
    /// The same over IPv6 (an IPv6 BGP-mode pool, IPv6 sessions): of 300.
    pub bgp_v6_spread: BTreeMap<String, u64>,
    pub bgp_v6_failed: u64,
    /// A proxy SIGKILLed: until its route was gone at the router (polled every 20 ms).
    pub bgp_proxy_kill_withdrawn_ms: u64,
    /// ... new connections of a 10 ms probe that failed meanwhile, and of 300 after.
    pub bgp_proxy_kill_probe_failed: u64,
    pub bgp_proxy_kill_failed_after: u64,
    /// A node's link cut: until BFD had its route gone at the router (polled).
    pub bgp_link_cut_route_removed_ms: u64,
    /// ... from the first to the last failed new connection of a 10 ms probe (plus one
    /// interval), and failures of 300 new connections after.
    pub bgp_link_cut_failed_ms: f64,
    pub bgp_link_cut_failed_after: u64,
    /// Every actor restarted in turn (SIGTERM, then started again), under a 10 ms probe:
    /// new connections that failed other than by [`in_flight_resets`] (refused, timed
    /// out, a wrong answer), and those reset in flight by one of the router's six
    /// next-hop changes (each node withdrawn, then announced again).
    pub bgp_rolling_restart_failed: u64,
    pub bgp_rolling_restart_reset_in_flight: u64,
    pub bgp_rolling_restart_probes: u64,
    /// A node drained (its `type=loadBalancer` label removed): until its route was gone
    /// at the router (polled), and new connections of a 10 ms probe that failed from the
    /// drain until 500 ms after the route was gone.
    pub bgp_drain_withdrawn_ms: u64,
    pub bgp_drain_failed: u64,
    /// ... and those reset in flight by the router's one next-hop change.
    pub bgp_drain_reset_in_flight: u64,
    pub bgp_drain_probes: u64,
    /// A VRRP pool's Service beside, at the end: failed of 100.
    pub bgp_vrrp_pool_failed: u64,
}

/// The whole BGP scenario on `proxy` (three LB nodes, the router, a BGP-mode Service and
/// a VRRP pool's Service): see `tests/tests/e2e_bgp.rs`. Errors when something never
/// happens (no route, a node never ready); the numbers are the caller's to judge.
pub fn scenario(name: &str, proxy: &str) -> Result<(System, Numbers)> {
    use crate::objects::{svc, tcp};
    use crate::system::Options;
    use crate::traffic::{self, Proto};
    use nix::sys::signal::Signal;
    use std::net::SocketAddr;
    crate::bins::system("vtysh").context("FRR (apt-get install frr frr-pythontools)")?;
    let mut opts = Options::new(name).lbs(3).proxy(proxy);
    opts.config_extra = config();
    let mut sys = System::start(opts)?;
    // The password Secret as the actors' --bgp-secrets-dir holds it (in Kubernetes the
    // actor writes it there from the Secret): after the start, so each actor first
    // leaves the IPv4 peer out, then takes it when the file comes.
    for n in sys.lb_nodes() {
        let d = sys.actor_bgp_secrets_dir(&n).join(PASSWORD_SECRET);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("password"), format!("{PASSWORD}\n"))?;
    }
    start_router(&mut sys)?;
    let mut out = Numbers::default();

    // A VRRP pool's Service beside the BGP one.
    let web = svc("default", "web").port(tcp("http", 80, 8080));
    sys.apply_service(&web)?;
    let web_target = SocketAddr::new(sys.wait_ips("default/web", T)?[0], 80);
    sys.wait_serving(Proto::Http, web_target, T)?;

    let fast = svc("default", "fast")
        .port(tcp("http", 80, 8080))
        .annotation("loadbalancer/pool", "ecmp");
    sys.apply_service(&fast)?;
    let ip = sys.wait_ips("default/fast", T)?[0];
    if !ip.to_string().starts_with("198.18.10.") {
        bail!("default/fast got {ip}, not an address of the BGP-mode pool");
    }
    let target = SocketAddr::new(ip, 80);
    let took = wait_hops(&sys, ip, 3)?;
    eprintln!(
        "bgp: {ip} announced by 3 nodes ({} ms after its address)",
        took.as_millis()
    );
    sys.wait_serving(Proto::Http, target, T)?;
    for n in sys.lb_nodes() {
        sys.wait_ready(&n, T)?;
        let m = sys.metrics(&n)?;
        for want in [
            "k8slb_actor_bgp_peers 2",
            "k8slb_actor_bgp_sessions_established 2",
            "k8slb_actor_bfd_sessions_up 2",
            "k8slb_actor_bgp_prefixes_announced 1",
        ] {
            wait::until(T, || Ok(sys.metrics(&n)?.contains(want)))
                .with_context(|| format!("{n}: no {want:?} in its metrics: {m}"))?;
        }
    }

    // Spread: 1,000 new connections, counted where they were accepted.
    let before = passive_opens(&sys)?;
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 1000, 0.0)?;
    let after = passive_opens(&sys)?;
    out.bgp_spread_failed = r.failed;
    out.bgp_spread = after
        .iter()
        .map(|(n, a)| (n.clone(), a - before[n]))
        .collect();
    let min = out.bgp_spread.values().copied().min().unwrap_or(0);
    out.bgp_spread_min_pct = min as f64 / 10.0;
    eprintln!(
        "bgp_spread ({proxy}): {:?} of 1000 new connections",
        out.bgp_spread
    );

    // IPv6: an address of an IPv6 BGP-mode pool, over the IPv6 sessions.
    let fast6 = svc("default", "fast6")
        .port(tcp("http", 80, 8080))
        .annotation("loadbalancer/pool", "ecmp6");
    sys.apply_service(&fast6)?;
    let ip6 = sys.wait_ips("default/fast6", T)?[0];
    let target6 = SocketAddr::new(ip6, 80);
    wait_hops(&sys, ip6, 3)?;
    sys.wait_serving(Proto::Http, target6, T)?;
    let before = passive_opens(&sys)?;
    let r = traffic::load(&sys.lab, "client", Proto::Http, target6, 300, 0.0)?;
    let after = passive_opens(&sys)?;
    out.bgp_v6_failed = r.failed;
    out.bgp_v6_spread = after
        .iter()
        .map(|(n, a)| (n.clone(), a - before[n]))
        .collect();
    eprintln!(
        "bgp_v6_spread ({proxy}): {:?} of 300 new connections to {ip6}",
        out.bgp_v6_spread
    );

    // A proxy killed on lb1: its route goes.
    let probe = traffic::start_probe(
        &mut sys.lab,
        "client",
        "probe-kill",
        Proto::Http,
        target,
        10,
        T,
    )?;
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let pids = sys.pids_named("lb1", proxy)?;
    if pids.is_empty() {
        bail!("no {proxy} on lb1");
    }
    for p in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), Signal::SIGKILL);
    }
    wait::until(T, || Ok(next_hops(&sys, ip)?.len() < 3)).context("lb1's route withdrawn")?;
    out.bgp_proxy_kill_withdrawn_ms = t0.elapsed().as_millis() as u64;
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 300, 0.0)?;
    let p = probe.stop_probe(&mut sys.lab)?;
    out.bgp_proxy_kill_probe_failed = p.failed;
    out.bgp_proxy_kill_failed_after = r.failed;
    eprintln!(
        "bgp_proxy_kill ({proxy}): route withdrawn after {} ms; probe failed {}; after: {} ok {} failed",
        out.bgp_proxy_kill_withdrawn_ms, p.failed, r.ok, r.failed
    );
    // The actor restarts the proxy, and the route comes back.
    wait_hops(&sys, ip, 3).context("lb1 announces again after its proxy restarted")?;

    // A node's link cut: BFD takes its route down at the router.
    let probe = traffic::start_probe(
        &mut sys.lab,
        "client",
        "probe-cut",
        Proto::Http,
        target,
        10,
        T,
    )?;
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    sys.lab.cut_link("lb2")?;
    wait::until(T, || Ok(next_hops(&sys, ip)?.len() < 3)).context("lb2's route removed by BFD")?;
    out.bgp_link_cut_route_removed_ms = t0.elapsed().as_millis() as u64;
    std::thread::sleep(Duration::from_millis(500));
    let p = probe.stop_probe(&mut sys.lab)?;
    let r = traffic::load(&sys.lab, "client", Proto::Http, target, 300, 0.0)?;
    out.bgp_link_cut_failed_ms = match (p.first_failure_ms, p.last_failure_ms) {
        (Some(a), Some(b)) => (b - a + p.interval_ms).round(),
        _ => 0.0,
    };
    out.bgp_link_cut_failed_after = r.failed;
    eprintln!(
        "bgp_link_cut ({proxy}): route removed after {} ms (polled); new connections failed for {} ms ({} failed); after: {} ok {} failed",
        out.bgp_link_cut_route_removed_ms, out.bgp_link_cut_failed_ms, p.failed, r.ok, r.failed
    );
    sys.lab.restore_link("lb2")?;
    wait_hops(&sys, ip, 3).context("lb2 back")?;

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
    )?;
    for n in sys.lb_nodes() {
        let p = sys.actors[&n];
        let t0 = Instant::now();
        sys.lab.signal_main(p, Signal::SIGTERM)?;
        sys.lab.wait(p, T)?;
        if next_hops(&sys, ip)?.len() > 2 {
            bail!("{n} stopped, and its route stays");
        }
        let stopped_ms = t0.elapsed().as_millis();
        sys.start_actor(&n)?;
        sys.wait_ready(&n, T)?;
        wait_hops(&sys, ip, 3).context("the restarted node announces again")?;
        eprintln!(
            "bgp_rolling_restart ({proxy}): {n} stopped in {stopped_ms} ms, back after {} ms",
            t0.elapsed().as_millis()
        );
    }
    let p = probe.stop_probe(&mut sys.lab)?;
    out.bgp_rolling_restart_reset_in_flight = in_flight_resets(&p);
    out.bgp_rolling_restart_failed = p.failed - out.bgp_rolling_restart_reset_in_flight;
    out.bgp_rolling_restart_probes = p.ok + p.failed;
    eprintln!(
        "bgp_rolling_restart ({proxy}): {} ok {} failed {:?} ({} reset in flight by a next-hop change)",
        p.ok, p.failed, p.errors, out.bgp_rolling_restart_reset_in_flight
    );

    // A node drained (unlabelled): it leaves the LB nodes, withdraws its route, and only
    // then takes the address off lo; no new connection fails meanwhile.
    let probe = traffic::start_probe(
        &mut sys.lab,
        "client",
        "probe-drain",
        Proto::Http,
        target,
        10,
        T,
    )?;
    std::thread::sleep(Duration::from_millis(300));
    let lb3 = sys.lab.host("lb3").clone();
    let t0 = Instant::now();
    sys.apply(
        "node-lb3",
        &crate::objects::node("lb3", &[lb3.v4.into(), lb3.v6.into()], false),
    )?;
    wait::until(T, || Ok(next_hops(&sys, ip)?.len() < 3))
        .context("the drained lb3's route withdrawn")?;
    out.bgp_drain_withdrawn_ms = t0.elapsed().as_millis() as u64;
    std::thread::sleep(Duration::from_millis(500));
    let p = probe.stop_probe(&mut sys.lab)?;
    out.bgp_drain_reset_in_flight = in_flight_resets(&p);
    out.bgp_drain_failed = p.failed - out.bgp_drain_reset_in_flight;
    out.bgp_drain_probes = p.ok + p.failed;
    eprintln!(
        "bgp_drain ({proxy}): route withdrawn after {} ms; probe {} ok {} failed {:?}",
        out.bgp_drain_withdrawn_ms, p.ok, p.failed, p.errors
    );
    sys.apply(
        "node-lb3",
        &crate::objects::node("lb3", &[lb3.v4.into(), lb3.v6.into()], true),
    )?;
    wait_hops(&sys, ip, 3).context("lb3 announces again once labelled")?;

    // The VRRP pool's Service.
    let r = traffic::load(&sys.lab, "client", Proto::Http, web_target, 100, 0.0)?;
    out.bgp_vrrp_pool_failed = r.failed;
    Ok((sys, out))
}
