//! HAProxy binds VIPs it does not hold without `ip_nonlocal_bind`: with
//! `net.ipv4.ip_nonlocal_bind=0` and `net.ipv6.ip_nonlocal_bind=0` in the namespace, the
//! rendered haproxy.cfg (`bind ... transparent`) starts, listens on an IPv4 and an IPv6
//! VIP that are on no interface, and serves them as soon as the addresses arrive (as on a
//! VRRP backup that becomes master). HAProxy runs with NET_BIND_SERVICE as its only
//! capability (setpriv), so IP_TRANSPARENT is refused and the IP_FREEBIND fallback is
//! what binds: no privilege, no sysctl. The same config without `transparent` fails to
//! start there: the sysctls really are off.
//!
//! Root, haproxy, curl, ss (iproute2) and setpriv (util-linux) are needed: ignored, with
//! the reason, by plain `cargo test`; `./scripts/test.sh` runs it; run without them, the
//! test FAILS.

mod support;

use k8slb_actor::render::Renderer;
use k8slb_actor::view::{view, ViewOptions};
use k8slb_common::state::{Provider, State};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use support::{require_root_and, wait_until, Netns};

const VIP4: &str = "198.18.0.100";
const VIP6: &str = "fd00:18::100";

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn state() -> State {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/freebind.json");
    State::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn sysctl(ns: &Netns, key: &str, value: Option<&str>) -> String {
    let mut c = ns.cmd("sysctl");
    match value {
        Some(v) => c.arg("-qw").arg(format!("{key}={v}")),
        None => c.arg("-n").arg(key),
    };
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "sysctl {key}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn listening(ns: &Netns) -> String {
    let out = ns.cmd("ss").args(["-Hltn"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn curl(ns: &Netns, url: &str) -> String {
    let out = ns
        .cmd("curl")
        .args(["-sf", "-g", "-m", "2", url])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs root: a network namespace with its sysctls off and HAProxy under setpriv; ./scripts/test.sh runs it"]
fn haproxy_serves_vips_not_yet_held_with_nonlocal_bind_off() {
    require_root_and(&["haproxy", "curl", "ss", "sysctl", "setpriv"]);
    let ns = Netns::new("k8slbfb");
    ns.veth("eth0", "peer0", "198.18.0.11/24");
    ns.ip("addr add fd00:18::11/64 dev eth0 nodad");
    for k in ["net.ipv4.ip_nonlocal_bind", "net.ipv6.ip_nonlocal_bind"] {
        sysctl(&ns, k, Some("0"));
        assert_eq!(sysctl(&ns, k, None), "0", "{k} is not off in the namespace");
    }
    let dir = tempfile::tempdir().unwrap();

    // The backend: another HAProxy that answers on the node's own address.
    let be_cfg = dir.path().join("backend.cfg");
    std::fs::write(
        &be_cfg,
        "global\n  maxconn 100\ndefaults\n  mode http\n  timeout connect 1s\n  \
         timeout client 5s\n  timeout server 5s\nfrontend be\n  bind 198.18.0.11:8080\n  \
         bind [fd00:18::11]:8080\n  http-request return status 200 content-type text/plain string backend-ok\n",
    )
    .unwrap();
    let _backend = Proc(
        ns.cmd("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&be_cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );

    // The actor's config for this node.
    let mut o = ViewOptions::new(Provider::Haproxy);
    for pool in ["default", "ipv6"] {
        o.interfaces
            .insert(pool.parse().unwrap(), "eth0".parse().unwrap());
    }
    o.pid_file = dir.path().join("haproxy.pid");
    o.runtime_socket = dir.path().join("haproxy.sock");
    let v = view(&state(), &"lb-1".parse().unwrap(), &o).unwrap();
    let text = Renderer::embedded()
        .unwrap()
        .render(&v)
        .unwrap()
        .proxy
        .unwrap();
    for bind in [
        format!("bind {VIP4}:80 transparent"),
        format!("bind [{VIP6}]:80 transparent"),
    ] {
        assert!(text.contains(&bind), "no `{bind}` in:\n{text}");
    }

    // Control: without `transparent`, HAProxy cannot bind the VIPs here.
    let plain = dir.path().join("plain.cfg");
    std::fs::write(&plain, text.replace(" transparent", "")).unwrap();
    let mut p = Proc(
        ns.cmd("haproxy")
            .args(["-W", "-db", "-f"])
            .arg(&plain)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = p.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "HAProxy bound VIPs it does not hold without `transparent`: ip_nonlocal_bind is not off"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(p.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "haproxy without `transparent`: {status}");
    assert!(
        err.contains("cannot bind socket"),
        "haproxy without `transparent` failed for another reason:\n{err}"
    );

    // The rendered config: listens on both VIPs while no interface has them...
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(&cfg, &text).unwrap();
    let log = dir.path().join("haproxy.log");
    // Only NET_BIND_SERVICE (port 80): no capability that IP_TRANSPARENT would need.
    let mut proxy = Proc(
        ns.cmd("setpriv")
            .args([
                "--inh-caps=-all",
                "--bounding-set=-all,+net_bind_service",
                "haproxy",
                "-W",
                "-db",
                "-f",
            ])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let on_vips =
        |l: &str| l.contains(&format!("{VIP4}:80")) && l.contains(&format!("[{VIP6}]:80"));
    assert!(
        wait_until(Duration::from_secs(10), || on_vips(&listening(&ns))),
        "HAProxy does not listen on both VIPs; ss:\n{}\nlog:\n{}",
        listening(&ns),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(ns.has_addr(VIP4) + ns.has_addr(VIP6), 0);
    assert!(proxy.0.try_wait().unwrap().is_none(), "haproxy exited");
    let caps = std::fs::read_to_string(format!("/proc/{}/status", proxy.0.id())).unwrap();
    let eff = caps.lines().find(|l| l.starts_with("CapEff:")).unwrap();
    // 0x400: CAP_NET_BIND_SERVICE alone.
    assert_eq!(
        eff.split_whitespace().nth(1),
        Some("0000000000000400"),
        "{eff}"
    );

    // ...and serves them once they arrive, without a restart.
    ns.ip(&format!("addr add {VIP4}/32 dev eth0"));
    ns.ip(&format!("addr add {VIP6}/128 dev eth0 nodad"));
    for url in [format!("http://{VIP4}/"), format!("http://[{VIP6}]/")] {
        assert!(
            wait_until(Duration::from_secs(10), || curl(&ns, &url) == "backend-ok"),
            "{url} did not answer through HAProxy; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    assert!(proxy.0.try_wait().unwrap().is_none(), "haproxy exited");
}
