//! Snapshot tests of the rendered configs over the fixture states in `tests/fixtures/`,
//! each snapshot also checked by the real daemon:
//!
//! - `haproxy -c -f <file>`;
//! - `nginx -t -p <tmp> -c <file>`;
//! - `keepalived --config-test -f <file>`, inside a network namespace created by the test
//!   with a bridge per interface the config names (keepalived 2.2 fails the test, exit 5,
//!   when an interface does not exist; the `dummy` link type is not available everywhere,
//!   `bridge` is).
//!
//! Certificates: the snapshots are rendered with the fixture's `certPath` (`/etc/certs`);
//! for the daemon check the same state is rendered again with `certPath` set to a temp
//! directory holding a self-signed certificate made with `openssl` at test time
//! (`<pool>.pem` = certificate + key, `<pool>.key` = key). Both renders differ only in
//! that directory.
//!
//! Needs root (network namespaces) and `apt-get install -y haproxy nginx keepalived
//! libnginx-mod-stream openssl iproute2`; a missing binary or missing root FAILS.
//!
//! Update snapshots with `cargo insta review` (or `INSTA_UPDATE=always`).

use k8slb_actor::render::Renderer;
use k8slb_actor::view::{view, ViewOptions};
use k8slb_common::state::{Provider, State};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

const INSTALL: &str =
    "run `apt-get install -y haproxy nginx keepalived libnginx-mod-stream openssl iproute2`";
/// Certificate names the fixtures use (a cert per pool).
const CERT_NAMES: [&str; 3] = ["default", "ipv6", "dmz"];

fn fixture(name: &str) -> State {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    State::from_json(&text).unwrap_or_else(|e| panic!("{path:?}: {e:#}"))
}

fn binary(name: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("{name} is not installed: {INSTALL}");
}

fn require_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "the keepalived check creates a network namespace and needs root; run the tests as root"
    );
}

fn certs() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-certs")
            .tempdir()
            .unwrap();
        let (crt, key) = (dir.path().join("c.crt"), dir.path().join("c.key"));
        let out = Command::new(binary("openssl"))
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args(["-subj", "/CN=k8slb-test", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&crt)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (c, k) = (
            std::fs::read_to_string(&crt).unwrap(),
            std::fs::read_to_string(&key).unwrap(),
        );
        for n in CERT_NAMES {
            std::fs::write(dir.path().join(format!("{n}.pem")), format!("{c}{k}")).unwrap();
            std::fs::write(dir.path().join(format!("{n}.key")), &k).unwrap();
        }
        dir
    })
    .path()
}

fn opts(proxy: Provider) -> ViewOptions {
    let mut o = ViewOptions::new(proxy);
    o.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    o.interfaces
        .insert("ipv6".parse().unwrap(), "eth0".parse().unwrap());
    o
}

fn run_check(what: &str, cmd: &mut Command, text: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what} refused the config ({}):\n{stdout}\n{stderr}\n--- config ---\n{text}",
        out.status
    );
    // Warnings count as failures too: a config the daemon complains about is a bug.
    let all = format!("{stdout}{stderr}");
    assert!(
        !all.contains("WARNING") && !all.contains("[WARNING]") && !all.contains("[ALERT]"),
        "{what} warned:\n{all}\n--- config ---\n{text}"
    );
}

/// A network namespace made by the test (deleted on drop) with a bridge per interface
/// the keepalived config names, `lo` up, and `ip_nonlocal_bind` on: `nginx -t` binds its
/// listen addresses, which are VIPs this namespace does not hold (as on a backup node).
struct Netns(String);

impl Netns {
    fn new(interfaces: &[String]) -> Netns {
        require_root();
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "k8slbrt{}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let ip = binary("ip");
        let st = Command::new(&ip)
            .args(["netns", "add", &name])
            .status()
            .unwrap();
        assert!(st.success(), "ip netns add {name} failed");
        let ns = Netns(name);
        let mut cmds: Vec<Vec<String>> =
            vec![vec!["link".into(), "set".into(), "lo".into(), "up".into()]];
        for i in interfaces {
            cmds.push(
                ["link", "add", i, "type", "bridge"]
                    .map(String::from)
                    .to_vec(),
            );
        }
        for c in cmds {
            let st = Command::new(&ip)
                .args(["-n", &ns.0])
                .args(&c)
                .status()
                .unwrap();
            assert!(st.success(), "ip -n {} {c:?} failed", ns.0);
        }
        for k in ["net.ipv4.ip_nonlocal_bind=1", "net.ipv6.ip_nonlocal_bind=1"] {
            let out = ns
                .exec(&binary("sysctl"))
                .arg("-qw")
                .arg(k)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "sysctl {k}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        ns
    }

    fn exec(&self, bin: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]).arg(bin);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn check_keepalived(ns: &Netns, text: &str, dir: &Path) {
    let file = dir.join("keepalived.conf");
    std::fs::write(&file, text).unwrap();
    run_check(
        "keepalived --config-test",
        ns.exec(&binary("keepalived"))
            .arg("--config-test")
            .arg("-f")
            .arg(&file),
        text,
    );
}

fn check_haproxy(ns: &Netns, text: &str, dir: &Path) {
    let file = dir.join("haproxy.cfg");
    std::fs::write(&file, text).unwrap();
    run_check(
        "haproxy -c",
        ns.exec(&binary("haproxy")).arg("-c").arg("-f").arg(&file),
        text,
    );
}

fn check_nginx(ns: &Netns, text: &str, dir: &Path) {
    let file = dir.join("nginx.conf");
    std::fs::write(&file, text).unwrap();
    run_check(
        "nginx -t",
        ns.exec(&binary("nginx"))
            .arg("-t")
            .arg("-q")
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&file),
        text,
    );
}

/// Render `fixture` for `node` with each proxy, snapshot every file, check every file.
fn check(fixture_name: &str, node: &str, proxies: &[Provider]) {
    let state = fixture(fixture_name);
    let node = node.parse().unwrap();
    let renderer = Renderer::embedded().unwrap();
    let mut checked_state = state.clone();
    checked_state.config.cert_path = certs().to_str().unwrap().parse().unwrap();
    for &proxy in proxies {
        let o = opts(proxy);
        let v = view(&state, &node, &o).unwrap();
        let r = renderer.render(&v).unwrap();
        let p = format!("{proxy:?}").to_lowercase();
        insta::assert_snapshot!(format!("{fixture_name}.{p}.keepalived.conf"), r.keepalived);
        if let Some(text) = &r.proxy {
            insta::assert_snapshot!(format!("{fixture_name}.{p}.proxy"), text);
        }
        assert_eq!(r.proxy.is_some(), proxy != Provider::Kubeproxy);

        // The same state with the certificates in a temp dir, through the real daemons.
        // pid file and runtime socket inside the temp dir: `nginx -t` opens the pid file.
        let dir = tempfile::Builder::new()
            .prefix("k8slb-render")
            .tempdir()
            .unwrap();
        let mut co = o.clone();
        co.pid_file = dir.path().join("proxy.pid");
        co.runtime_socket = dir.path().join("haproxy.sock");
        let cv = view(&checked_state, &node, &co).unwrap();
        let cr = renderer.render(&cv).unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let ifs: std::collections::BTreeSet<String> = cv
            .keepalived
            .instances
            .iter()
            .map(|i| i.interface.to_string())
            .collect();
        let ns = Netns::new(&ifs.into_iter().collect::<Vec<_>>());
        check_keepalived(&ns, &cr.keepalived, dir.path());
        match proxy {
            Provider::Haproxy => check_haproxy(&ns, cr.proxy.as_deref().unwrap(), dir.path()),
            Provider::Nginx => check_nginx(&ns, cr.proxy.as_deref().unwrap(), dir.path()),
            Provider::Kubeproxy => {}
        }
    }
}

use Provider::{Haproxy, Kubeproxy, Nginx};

#[test]
fn plain_http() {
    check("plain-http", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn tls_port_443_redirect() {
    check("tls-port-443-redirect", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn tls_port_name_no_redirect() {
    check("tls-port-name-no-redirect", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn tls_annotation() {
    check("tls-annotation", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn backend_tls_nocheck() {
    check("backend-tls-nocheck", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn shared_ip() {
    check("shared-ip", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn ipv6() {
    check("ipv6", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn two_pools_two_interfaces() {
    check("two-pools", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn stickiness_source_and_cookie() {
    check("stickiness", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn udp_and_sctp() {
    check("udp", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn proxy_protocol() {
    check("proxy-protocol", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn source_ranges() {
    check("source-ranges", "lb-1", &[Haproxy, Nginx]);
}

#[test]
fn kubeproxy() {
    check("kubeproxy", "lb-1", &[Kubeproxy]);
}

#[test]
fn unicast_two_nodes() {
    check("unicast-2node", "lb-2", &[Haproxy]);
}

#[test]
fn empty_state_keeps_vrid() {
    check("empty", "lb-1", &[Haproxy, Nginx]);
}

/// The sections k8slb's defaults give (common::config::default_haproxy/default_nginx):
/// nginx gets the actor's own `events` block.
#[test]
fn default_sections() {
    check("default-sections", "lb-1", &[Haproxy, Nginx]);
}
