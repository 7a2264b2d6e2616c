//! The rendered `frr.conf` passes FRR's own checker (`vtysh --dryrun`, what the actor
//! runs before installing it), for IPv4 and IPv6 peers, BFD and per-node peers; and the
//! checker does refuse a config FRR would not take, so the acceptance means something.
//! Passwords: every character a `passwordSecret` may hold passes the checker.
//! Needs FRR (`apt-get install frr`; ./scripts/install-deps.sh installs it).

use k8slb_actor::daemons::Daemon;
use k8slb_actor::frr::daemon::{Frr, FrrBinaries};
use k8slb_actor::frr::render::{announced, frr_view, FrrRenderer};
use k8slb_common::bgp::{BgpPassword, SecretName};
use k8slb_common::config::parse_global_config;
use k8slb_common::names::NodeName;
use k8slb_common::state::{LbNode, State, VipState};
use std::collections::BTreeSet;

const CONFIG: &str = r#"{ "pools": {
    "default": { "network": "198.18.1.0/24", "range": "198.18.1.10-198.18.1.20" },
    "ecmp": { "network": "198.18.10.0/24", "range": "198.18.10.10-198.18.10.20", "mode": "bgp" },
    "ecmp6": { "network": "fd00:10::/64", "range": "fd00:10::10-fd00:10::20", "mode": "bgp" },
    "ranged": { "network": "198.18.11.5-198.18.11.9", "range": "198.18.11.5-198.18.11.9", "mode": "bgp" } },
  "bgp": { "asn": 4200000000, "peers": [
    { "address": "198.18.3.1", "asn": 64513, "bfd": true },
    { "address": "198.18.4.1", "asn": 64514, "holdTime": 0, "nodes": ["lb-1"], "passwordSecret": "bgp-auth" },
    { "address": "fd00:3::1", "asn": 64513, "bfd": true, "holdTime": 90 } ],
    "bfd": { "receiveInterval": 20, "transmitInterval": 30, "detectMultiplier": 5 } } }"#;

fn state() -> State {
    let cfg = parse_global_config(CONFIG).unwrap();
    let mut s = State::empty(cfg.actor_config(&Default::default()));
    s.nodes
        .insert("lb-1".parse().unwrap(), LbNode { addresses: vec![] });
    for (ip, pool) in [
        ("198.18.1.10", "default"),
        ("198.18.10.10", "ecmp"),
        ("198.18.10.11", "ecmp"),
        ("fd00:10::10", "ecmp6"),
        ("198.18.11.5", "ranged"),
    ] {
        s.vips.insert(
            ip.parse().unwrap(),
            VipState {
                pool: pool.parse().unwrap(),
                vrid: 0,
                owner: None,
                services: vec![],
                ingress: false,
                gateways: vec![],
            },
        );
    }
    s
}

fn rendered(announce_all: bool) -> String {
    rendered_with(announce_all, "s3cret")
}

fn rendered_with(announce_all: bool, password: &str) -> String {
    let s = state();
    let node: NodeName = "lb-1".parse().unwrap();
    let a = if announce_all {
        announced(&s, &node, None)
    } else {
        BTreeSet::new()
    };
    let pw = |_: &SecretName| BgpPassword::try_from(password.as_bytes()).map_err(|e| e.to_string());
    let v = frr_view(&s, &node, &["198.18.3.2".parse().unwrap()], &a, &pw).unwrap();
    assert_eq!(v.peers.len(), 3);
    FrrRenderer::embedded().unwrap().render(&v).unwrap()
}

fn check(text: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("frr.conf");
    std::fs::write(&f, text).unwrap();
    Frr::new(dir.path(), FrrBinaries::default())
        .check(&f)
        .map_err(|e| e.to_string())
}

#[test]
fn rendered_frr_conf_passes_vtysh_dryrun_with_and_without_routes() {
    for all in [true, false] {
        let text = rendered(all);
        check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(text.contains("network 198.18.10.10/32"), all);
    }
}

#[test]
fn the_checker_refuses_what_frr_would_not_take() {
    let text = rendered(true).replace("remote-as 64513", "remote-as 64513; neighbor evil");
    let e = check(&text).unwrap_err();
    assert!(e.contains("frr: config check failed"), "{e}");
}

#[test]
fn every_character_a_password_may_hold_passes_the_checker() {
    let all: String = (0x21u8..=0x7e).map(char::from).collect();
    for chunk in [&all[..80], &all[80..]] {
        let text = rendered_with(true, chunk);
        assert!(text.contains(&format!("password {chunk}\n")), "{text}");
        check(&text).unwrap_or_else(|e| panic!("{chunk:?}: {e}\n{text}"));
    }
}
