//! BGP mode in the lab (issue 25): an upstream router namespace running FRR with
//! multipath and BFD (its config written here), in front of the lab's LB nodes; the
//! client reaches BGP-mode pools through it. Used by `tests/tests/e2e_bgp.rs` and by
//! `lab-bench bgp` (the `bgp_*` numbers of `./scripts/bench.sh`).

use crate::lab::Role;
use crate::system::{default_config, System};
use crate::wait;
use anyhow::{bail, Context, Result};
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

/// The router's FRR: every LB node of the switch's subnet may peer (a listen range),
/// multipath over different ASes' paths (all nodes are AS 64512, so plain multipath),
/// BFD at 50 ms x 3.
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
pub fn start_router(sys: &mut System) -> Result<()> {
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
pub fn next_hops(sys: &System, vip: IpAddr) -> Result<Vec<String>> {
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
    json!({
        "pools": pools,
        "bgp": { "asn": 64512, "peers": [
            { "address": format!("198.18.0.{ROUTER_INDEX}"), "asn": ROUTER_ASN, "bfd": true }
        ] }
    })
}

