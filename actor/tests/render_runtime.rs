//! `runtime_diff`: endpoint-only changes become Runtime API commands, anything else a
//! reload; and the commands are accepted by a real HAProxy (root, network namespace made
//! by the test, `apt-get install -y haproxy`: ignored with that reason under plain `cargo
//! test`, run by `./scripts/test.sh`).

mod support;

use k8slb_actor::render::{is_structural, runtime_diff, Config, Renderer, RuntimeCommand};
use k8slb_actor::view::Slot;
use k8slb_actor::view::{view, view_with_previous, NodeView, ViewOptions};
use k8slb_common::state::{Endpoint, Provider, State};
use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn fixture(name: &str) -> State {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.json"));
    State::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn opts(proxy: Provider) -> ViewOptions {
    let mut o = ViewOptions::new(proxy);
    o.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    o
}

fn web_endpoints(s: &mut State) -> &mut Vec<Endpoint> {
    &mut s
        .services
        .get_mut(&"default/web".parse().unwrap())
        .unwrap()
        .ports[0]
        .endpoints
}

fn ep(s: &str) -> Endpoint {
    let a: std::net::SocketAddr = s.parse().unwrap();
    Endpoint {
        ip: a.ip(),
        port: a.port(),
        draining: false,
    }
}

/// `view` with every HAProxy server slot emptied: what stays when endpoints are taken
/// out (the oracle `is_structural` is checked against).
fn slots_emptied(view: &NodeView) -> NodeView {
    let mut v = view.clone();
    if let Some(hp) = v.haproxy.as_mut() {
        for b in &mut hp.backends {
            b.slots.iter_mut().for_each(|s| *s = Slot::EMPTY);
        }
    }
    v
}

fn views(s1: &State, s2: &State, proxy: Provider) -> (NodeView, NodeView) {
    let node = "lb-1".parse().unwrap();
    let o = opts(proxy);
    let v1 = view(s1, &node, &o).unwrap();
    let v2 = view_with_previous(s2, &node, &o, Some(&v1)).unwrap();
    (v1, v2)
}

#[test]
fn nothing_changed_is_an_empty_diff() {
    let s = fixture("plain-http");
    let (a, b) = views(&s, &s, Provider::Haproxy);
    assert_eq!(runtime_diff(&a, &b), Some(vec![]));
    let (a, b) = views(&s, &s, Provider::Nginx);
    assert_eq!(runtime_diff(&a, &b), Some(vec![]));
}

#[test]
fn endpoint_changes_are_runtime_commands() {
    let s1 = fixture("plain-http");
    let mut s2 = s1.clone();
    {
        let eps = web_endpoints(&mut s2);
        // 10.1.0.1 leaves, 10.1.0.0 (sorts first) arrives, 10.1.0.2 starts draining,
        // 10.1.0.3 (draining) is ready again.
        eps.retain(|e| e.ip.to_string() != "10.1.0.1");
        eps.insert(0, ep("10.1.0.0:8080"));
        for e in eps.iter_mut() {
            e.draining = e.ip.to_string() == "10.1.0.2";
        }
    }
    let (a, b) = views(&s1, &s2, Provider::Haproxy);
    let cmds: Vec<String> = runtime_diff(&a, &b)
        .unwrap()
        .iter()
        .map(|c| c.to_cli())
        .collect();
    assert_eq!(
        cmds,
        [
            // slot 1 (was 10.1.0.1) is reused by the newcomer; 2 and 3 stay where they were.
            "set server be_default_web_80/s1 addr 10.1.0.0 port 8080",
            "set weight be_default_web_80/s1 1",
            "set server be_default_web_80/s1 state ready",
            "set server be_default_web_80/s2 state drain",
            "set weight be_default_web_80/s3 1",
            "set server be_default_web_80/s3 state ready",
        ]
    );
    // Not structural: with the slots emptied, the views and their texts are equal.
    assert!(!is_structural(Config::Proxy, &a, &b));
    assert!(!is_structural(Config::Keepalived, &a, &b));
    assert_eq!(slots_emptied(&a), slots_emptied(&b));
    let r = Renderer::embedded().unwrap();
    assert_ne!(r.render(&a).unwrap(), r.render(&b).unwrap());
    assert_eq!(
        r.render(&slots_emptied(&a)).unwrap(),
        r.render(&slots_emptied(&b)).unwrap()
    );

    // Removing an endpoint disables its slot.
    let mut s3 = s2.clone();
    web_endpoints(&mut s3).retain(|e| e.ip.to_string() != "10.1.0.0");
    let c = runtime_diff(
        &b,
        &view_with_previous(
            &s3,
            &"lb-1".parse().unwrap(),
            &opts(Provider::Haproxy),
            Some(&b),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        c,
        vec![RuntimeCommand::Disable {
            backend: "be_default_web_80".into(),
            server: "s1".into()
        }]
    );
}

#[test]
fn structural_changes_need_a_reload() {
    let s1 = fixture("plain-http");
    // More endpoints than slots.
    let mut s2 = s1.clone();
    *web_endpoints(&mut s2) = (1..=9).map(|i| ep(&format!("10.2.0.{i}:80"))).collect();
    let (a, b) = views(&s1, &s2, Provider::Haproxy);
    assert_eq!(b.haproxy.as_ref().unwrap().backends[2].slots.len(), 16);
    assert_eq!(runtime_diff(&a, &b), None);
    assert!(is_structural(Config::Proxy, &a, &b));
    assert!(!is_structural(Config::Keepalived, &a, &b));
    assert_ne!(slots_emptied(&a), slots_emptied(&b));
    // A new service.
    let s3 = fixture("shared-ip");
    let (a, b) = views(&s1, &s3, Provider::Haproxy);
    assert_eq!(runtime_diff(&a, &b), None);
    assert!(is_structural(Config::Proxy, &a, &b));
    // nginx has no runtime API: any change reloads.
    let mut s4 = s1.clone();
    web_endpoints(&mut s4).push(ep("10.1.0.9:8080"));
    let (a, b) = views(&s1, &s4, Provider::Nginx);
    assert_eq!(runtime_diff(&a, &b), None);
    // Different proxies.
    let (a, _) = views(&s1, &s1, Provider::Haproxy);
    let (_, b) = views(&s1, &s1, Provider::Nginx);
    assert_eq!(runtime_diff(&a, &b), None);
}

// ---------------------------------------------------------------------------------------
// Against a real HAProxy.

struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cli(sock: &Path, line: &str) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
#[ignore = "needs root: runs HAProxy in a network namespace it creates; ./scripts/test.sh runs it"]
fn real_haproxy_applies_the_commands_without_reload() {
    support::require_root_and(&["ip", "haproxy"]);
    let haproxy = ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("haproxy is not installed: run `apt-get install -y haproxy nginx keepalived`");
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(Provider::Haproxy);
    o.runtime_socket = dir.path().join("hap.sock");
    o.pid_file = dir.path().join("hap.pid");
    let node = "lb-1".parse().unwrap();
    let mut s1 = fixture("plain-http");
    // No chroot/user switch in the test process tree.
    s1.config.haproxy.global.retain(|l| {
        !["chroot", "user", "group"]
            .iter()
            .any(|w| l.as_str().starts_with(w))
    });
    let v1 = view(&s1, &node, &o).unwrap();
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(
        &cfg,
        Renderer::embedded()
            .unwrap()
            .render(&v1)
            .unwrap()
            .proxy
            .unwrap(),
    )
    .unwrap();

    let ns = support::Netns::new("k8slbrr");
    assert!(ns
        .cmd("sysctl")
        .args(["-qw", "net.ipv4.ip_nonlocal_bind=0"])
        .status()
        .unwrap()
        .success());
    let child = Child(
        ns.cmd(haproxy)
            .args(["-W", "-db", "-f"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while !o.runtime_socket.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "haproxy did not open its socket"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let workers_before = cli(&o.runtime_socket, "show info");

    let mut s2 = s1.clone();
    {
        let eps = web_endpoints(&mut s2);
        eps.retain(|e| e.ip.to_string() != "10.1.0.1");
        eps.push(ep("[fd00::7]:8080"));
        for e in eps.iter_mut() {
            e.draining = e.ip.to_string() == "10.1.0.2";
        }
    }
    let v2 = view_with_previous(&s2, &node, &o, Some(&v1)).unwrap();
    let cmds = runtime_diff(&v1, &v2).unwrap();
    assert!(!cmds.is_empty());
    for c in &cmds {
        let out = cli(&o.runtime_socket, &c.to_cli());
        assert!(
            !out.contains("rror")
                && !out.contains("No such")
                && !out.contains("Unknown")
                && !out.contains("Require"),
            "{} -> {out}",
            c.to_cli()
        );
    }
    let state = cli(&o.runtime_socket, "show servers state be_default_web_80");
    // srv_name srv_addr ... srv_admin_state(7th) ... srv_uweight(8th) ...; srv_port is the 19th.
    let rows: Vec<Vec<&str>> = state
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()) && l.contains("be_default_web_80 "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let slot = |name: &str| rows.iter().find(|r| r[3] == name).unwrap().clone();
    let v2hp = v2.haproxy.as_ref().unwrap();
    let be = v2hp
        .backends
        .iter()
        .find(|b| b.name == "be_default_web_80")
        .unwrap();
    for (i, sl) in be.slots.iter().enumerate() {
        let r = slot(&format!("s{}", i + 1));
        if let Some(ep) = sl.endpoint {
            assert_eq!(r[4], ep.ip().to_string(), "s{} address", i + 1);
            assert_eq!(r[18], ep.port().to_string(), "s{} port", i + 1);
            // admin state: 0 = ready, 8 = drain (SRV_ADMF_DRAIN), bits 1/2 = maint.
            let admin: u32 = r[6].parse().unwrap();
            assert_eq!(admin & 0x3, 0, "s{} still in maintenance: {r:?}", i + 1);
            assert_eq!(
                admin & 0x8 != 0,
                sl.draining,
                "s{} drain flag: {r:?}",
                i + 1
            );
            if !sl.draining {
                assert_eq!(r[7], "1", "s{} weight: {r:?}", i + 1);
            }
        } else {
            let admin: u32 = r[6].parse().unwrap();
            assert_ne!(admin & 0x3, 0, "empty s{} not in maintenance: {r:?}", i + 1);
        }
    }
    // No reload happened: same process, same worker generation.
    let workers_after = cli(&o.runtime_socket, "show info");
    let pid = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("Pid:"))
            .map(str::to_string)
    };
    assert_eq!(pid(&workers_before), pid(&workers_after));
    drop(child);
}

/// A rolling update of 8 replicas (25% surge: 2 new pods; 2 old ones draining) fits the
/// backend's slots: no reload. Before the slot headroom, 8 endpoints had exactly 8 slots.
#[test]
fn a_rolling_update_of_eight_replicas_needs_no_reload() {
    let mut s1 = fixture("plain-http");
    {
        let eps = web_endpoints(&mut s1);
        eps.clear();
        for i in 1..=8 {
            eps.push(ep(&format!("10.1.0.{i}:8080")));
        }
    }
    let mut s2 = s1.clone();
    {
        let eps = web_endpoints(&mut s2);
        for e in eps.iter_mut().take(2) {
            e.draining = true;
        }
        eps.push(ep("10.1.0.9:8080"));
        eps.push(ep("10.1.0.10:8080"));
    }
    let (a, b) = views(&s1, &s2, Provider::Haproxy);
    let cmds = runtime_diff(&a, &b).expect("endpoint-only: no reload");
    assert!(cmds
        .iter()
        .any(|c| c.to_cli() == "set server be_default_web_80/s9 addr 10.1.0.9 port 8080"));
}
