//! BGP mode (issue 25) in the lab: an upstream router namespace running FRR with
//! multipath (its config written here), the client behind it, three LB nodes running the
//! actor, which announces a BGP-mode pool's VIP through its own FRR, with BFD.
//!
//! Shown: the VIP is answered by all three nodes (each >= 20% of 1,000 new connections);
//! the same over IPv6 (an IPv6 pool, IPv6 sessions: every node gets some of 300);
//! a proxy killed on one node: its route is withdrawn, then 0 failed new connections; a
//! node's link cut: BFD removes its route (how long new connections fail is printed, not
//! asserted: `./scripts/bench.sh bgp` measures it), then 0 failed; a rolling restart of
//! every actor: 0 failed new connections; a node drained (unlabelled): its route
//! withdrawn before its address leaves lo, 0 failed new connections; a VRRP pool's
//! Service beside it keeps serving. The IPv4 sessions use a TCP MD5 password.
//! On HAProxy and nginx. The scenario is `k8slb_tests::bgp::scenario`.
//! Needs root, FRR, keepalived, the proxies and the built binaries; fails (never skips)
//! without them.

use k8slb_tests::bgp::scenario;

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
    let (mut sys, n) = scenario(&format!("bgp-{proxy}"), proxy).expect("the BGP scenario");
    eprintln!("{}", serde_json::to_string(&n).unwrap());
    assert_eq!(n.bgp_spread.len(), 3, "{n:?}");
    assert_eq!(n.bgp_spread_failed, 0, "{n:?}");
    for (node, c) in &n.bgp_spread {
        assert!(
            *c * 5 >= 1000,
            "{node} accepted {c} of 1000 new connections: {n:?}"
        );
    }
    assert_eq!(n.bgp_v6_failed, 0, "IPv6: {n:?}");
    assert_eq!(n.bgp_v6_spread.len(), 3, "{n:?}");
    for (node, c) in &n.bgp_v6_spread {
        assert!(
            *c > 0,
            "IPv6: {node} accepted none of 300 new connections: {n:?}"
        );
    }
    assert_eq!(
        n.bgp_proxy_kill_failed_after, 0,
        "after the withdrawal: {n:?}"
    );
    assert_eq!(n.bgp_link_cut_failed_after, 0, "after BFD: {n:?}");
    // No new connection is refused or lost while each node leaves and comes back; one
    // that is under way when the router changes its next hops may be reset (the node
    // that gets its next packets does not have it): at most one per change and 10 ms
    // probe (each lasts a few ms), six changes in a rolling restart of three nodes.
    assert_eq!(n.bgp_rolling_restart_failed, 0, "rolling restart: {n:?}");
    assert!(
        n.bgp_rolling_restart_reset_in_flight <= 6,
        "rolling restart: {n:?}"
    );
    assert!(n.bgp_rolling_restart_probes > 0, "{n:?}");
    assert_eq!(n.bgp_drain_failed, 0, "drain: {n:?}");
    assert!(n.bgp_drain_reset_in_flight <= 1, "drain: {n:?}");
    assert!(n.bgp_drain_probes > 0, "{n:?}");
    assert_eq!(n.bgp_vrrp_pool_failed, 0, "the VRRP pool's Service: {n:?}");
    sys.lab.pass();
}
