//! A refused edit keeps what the Service holds and gets nothing new (no adopted status
//! address, no half of a dual-stack request, no co-tenant evicted), and the cap of 10
//! problems per object never hides the problem that says why a Service has no address.

mod support;
use support::*;

/// A refused edit gets nothing new, also through status adoption: a refused request does
/// not take a free address from its (stale) status, in any pool, once the published state
/// has released it (a valid request in the same position would not get it either).
#[test]
fn a_refused_edit_does_not_adopt_a_released_status_address() {
    let c = cfg(TWO_POOLS);
    let web = || svc("default", "web").port(80).created(1);
    let s0 = run(&c, &objs(vec![web().build()], nodes(1), vec![]), None);
    assert_eq!(ips(&s0, "default/web"), ["192.168.10.200"]);
    // A valid move to pool external: .200 is released (status still shows it).
    let moved = web().pool("external").status_ip("192.168.10.200");
    let s1 = run(&c, &objs(vec![moved.build()], nodes(1), vec![]), Some(&s0));
    assert_eq!(ips(&s1, "default/web"), ["1.2.3.50"]);
    // Now a typo (refused) before the status caught up; a new Service arrives.
    let typo = web().pool("externall").status_ip("192.168.10.200");
    let other = svc("default", "other").port(80).created(2).build();
    let s2 = run(
        &c,
        &objs(vec![typo.build(), other], nodes(1), vec![]),
        Some(&s1),
    );
    assert_eq!(
        ips(&s2, "default/web"),
        ["1.2.3.50"],
        "a refused edit keeps what it holds and gets nothing new"
    );
    assert_eq!(ips(&s2, "default/other"), ["192.168.10.200"]);
}

/// "IP outside the pool" is a refused edit that gets nothing new: a dual-stack request
/// with one static IP outside its pool does not get the other static IP as a new address
/// (half of what was asked); it keeps what it held.
#[test]
fn a_half_refused_static_request_gets_no_new_address() {
    let c = cfg(TWO_POOLS);
    let web = || svc("default", "web").port(80).created(1);
    let s0 = run(
        &c,
        &objs(vec![web().pool("ipv6").build()], nodes(1), vec![]),
        None,
    );
    assert_eq!(ips(&s0, "default/web"), ["2001:468:101::1"]);
    let edit = web()
        .pool("default,ipv6")
        .ann("loadbalancer/ips", "192.168.10.5,2001:db8::1");
    let s1 = run(&c, &objs(vec![edit.build()], nodes(1), vec![]), Some(&s0));
    assert!(problems_of(&s1, "default/web")
        .iter()
        .any(|p| p.0 == "IpOutsidePool"));
    assert_eq!(
        ips(&s1, "default/web"),
        ["2001:468:101::1"],
        "refused: keeps its IPv6 address, gets nothing new"
    );
}

/// Bad input never loses an allocation already made, its own or another's. Two Services
/// share a static IP on distinct ports. The older one makes a refused edit (unknown pool)
/// that also moves its port onto the younger one's: the younger, unchanged and valid,
/// keeps the shared IP.
#[test]
fn a_refused_edit_does_not_evict_a_valid_co_tenant() {
    let mut c = cfg(TWO_POOLS);
    // k8slb's sharing rule (by name, no key): what this test is about.
    c.tenancy.address_sharing = k8slb_common::config::AddressSharing::Open;
    let a = || svc("default", "a").created(1).ip("192.168.10.10");
    let b = || svc("default", "b").created(2).ip("192.168.10.10").port(443);
    let s0 = run(
        &c,
        &objs(vec![a().port(80).build(), b().build()], nodes(1), vec![]),
        None,
    );
    assert_eq!(ips(&s0, "default/a"), ["192.168.10.10"]);
    assert_eq!(ips(&s0, "default/b"), ["192.168.10.10"]);
    let refused = a().pool("nosuch").port(443);
    let s1 = run(
        &c,
        &objs(vec![refused.build(), b().build()], nodes(1), vec![]),
        Some(&s0),
    );
    assert!(problems_of(&s1, "default/a")
        .iter()
        .any(|p| p.0 == "UnknownPool"));
    assert_eq!(
        ips(&s1, "default/b"),
        ["192.168.10.10"],
        "the valid, unchanged co-tenant keeps the shared IP: {:?}",
        s1.problems
    );
}

/// Idempotence of the refused path with status adoption: plan(plan(x)) == plan(x).
#[test]
fn refused_plans_are_idempotent() {
    let c = cfg(TWO_POOLS);
    let web = svc("default", "web")
        .port(80)
        .created(1)
        .pool("nosuch")
        .status_ip("192.168.10.230")
        .build();
    let o = objs(vec![web], nodes(1), vec![]);
    let s1 = run(&c, &o, None);
    let s2 = run(&c, &o, Some(&s1));
    assert_eq!(s2.to_json(), s1.to_json());
}

/// The cap keeps at most 10 problems per object, and the one that says why the Service
/// has no address is always among them: eleven unknown annotations (or per-port
/// InvalidAnnotation/InvalidName problems) sort before it in (reason, message) order, and
/// a plain first-10 cap would hide it (it would never become an Event).
#[test]
fn the_cap_never_hides_why_a_service_has_no_address() {
    let c = cfg(TWO_POOLS);
    let mut s = svc("default", "web").port(80).created(1).pool("nosuch");
    for i in 0..11 {
        s = s.ann(&format!("loadbalancer/typo{i:02}"), "x");
    }
    let st = run(&c, &objs(vec![s.build()], nodes(1), vec![]), None);
    let p = problems_of(&st, "default/web");
    assert!(ips(&st, "default/web").is_empty());
    assert!(
        p.iter().any(|p| p.0 == "UnknownPool"),
        "why there is no address is listed: {p:?}"
    );
}
