//! Snapshot tests of the rendered configs over the fixture states in `tests/fixtures/`
//! (`<case>::renders_as_its_snapshots`, no root), each also checked by the real daemon
//! (`<case>::passes_the_daemons_own_checks`, root):
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
//! The daemon checks need root (network namespaces) and `apt-get install -y haproxy nginx
//! keepalived libnginx-mod-stream openssl iproute2`: plain `cargo test` lists them as
//! ignored with that reason, `./scripts/test.sh` runs them (`--include-ignored`); run
//! explicitly without root or without a binary, they FAIL, never pass.
//!
//! Update snapshots with `cargo insta review` (or `INSTA_UPDATE=always`).

mod support;

use k8slb_actor::render::Renderer;
use k8slb_actor::view::{view, ViewOptions};
use k8slb_common::state::{Provider, State};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use support::Netns;

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

/// A network namespace made by the test (`support::Netns`: deleted on drop) with a bridge
/// per interface the keepalived config names, `lo` up, and `ip_nonlocal_bind` on: `nginx
/// -t` binds its listen addresses, which are VIPs this namespace does not hold (as on a
/// backup node).
fn check_netns(interfaces: &[String]) -> Netns {
    require_root();
    let ns = Netns::new("k8slbrs");
    for i in interfaces {
        ns.ip(&format!("link add {i} type bridge"));
    }
    for k in ["net.ipv4.ip_nonlocal_bind=1", "net.ipv6.ip_nonlocal_bind=1"] {
        let out = ns.cmd(binary("sysctl")).arg("-qw").arg(k).output().unwrap();
        assert!(
            out.status.success(),
            "sysctl {k}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ns
}

fn check_keepalived(ns: &Netns, text: &str, dir: &Path) {
    let file = dir.join("keepalived.conf");
    std::fs::write(&file, text).unwrap();
    run_check(
        "keepalived --config-test",
        ns.cmd(binary("keepalived"))
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
        ns.cmd(binary("haproxy")).arg("-c").arg("-f").arg(&file),
        text,
    );
}

fn check_nginx(ns: &Netns, text: &str, dir: &Path) {
    let file = dir.join("nginx.conf");
    std::fs::write(&file, text).unwrap();
    run_check(
        "nginx -t",
        ns.cmd(binary("nginx"))
            .arg("-t")
            .arg("-q")
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&file),
        text,
    );
}

/// Render `fixture` for `node` with each proxy and compare every file with its snapshot.
fn snapshots(fixture_name: &str, node: &str, proxies: &[Provider]) {
    let state = fixture(fixture_name);
    let node = node.parse().unwrap();
    let renderer = Renderer::embedded().unwrap();
    for &proxy in proxies {
        let v = view(&state, &node, &opts(proxy)).unwrap();
        let r = renderer.render(&v).unwrap();
        let p = format!("{proxy:?}").to_lowercase();
        insta::assert_snapshot!(format!("{fixture_name}.{p}.keepalived.conf"), r.keepalived);
        if let Some(text) = &r.proxy {
            insta::assert_snapshot!(format!("{fixture_name}.{p}.proxy"), text);
        }
        assert_eq!(r.proxy.is_some(), proxy != Provider::Kubeproxy);
    }
}

/// Render `fixture` for `node` with each proxy, with the certificates in a temp dir, and
/// run every file through the real daemon's own check.
fn daemon_checks(fixture_name: &str, node: &str, proxies: &[Provider]) {
    require_root();
    let node = node.parse().unwrap();
    let renderer = Renderer::embedded().unwrap();
    let mut checked_state = fixture(fixture_name);
    checked_state.config.cert_path = certs().to_str().unwrap().parse().unwrap();
    for &proxy in proxies {
        // pid file and runtime socket inside the temp dir: `nginx -t` opens the pid file.
        let dir = tempfile::Builder::new()
            .prefix("k8slb-render")
            .tempdir()
            .unwrap();
        let mut co = opts(proxy);
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
        let ns = check_netns(&ifs.into_iter().collect::<Vec<_>>());
        check_keepalived(&ns, &cr.keepalived, dir.path());
        match proxy {
            Provider::Haproxy => check_haproxy(&ns, cr.proxy.as_deref().unwrap(), dir.path()),
            Provider::Nginx => check_nginx(&ns, cr.proxy.as_deref().unwrap(), dir.path()),
            Provider::Kubeproxy => {}
        }
    }
}

/// Two tests per fixture: `<case>::renders_as_its_snapshots` (no root) and
/// `<case>::passes_the_daemons_own_checks` (root: listed as ignored, with the reason, by
/// plain `cargo test`; `./scripts/test.sh` runs it).
macro_rules! fixtures {
    ($($(#[$doc:meta])* $case:ident: $fixture:literal on $node:literal with [$($proxy:ident),*];)*) => {$(
        $(#[$doc])*
        mod $case {
            use super::*;

            #[test]
            fn renders_as_its_snapshots() {
                snapshots($fixture, $node, &[$($proxy),*]);
            }

            #[test]
            #[ignore = "needs root: a network namespace with the interfaces keepalived names, for keepalived --config-test, haproxy -c and nginx -t; ./scripts/test.sh runs it"]
            fn passes_the_daemons_own_checks() {
                daemon_checks($fixture, $node, &[$($proxy),*]);
            }
        }
    )*};
}

use Provider::{Haproxy, Kubeproxy, Nginx};

fixtures! {
    plain_http: "plain-http" on "lb-1" with [Haproxy, Nginx];
    tls_port_443_redirect: "tls-port-443-redirect" on "lb-1" with [Haproxy, Nginx];
    tls_port_name_no_redirect: "tls-port-name-no-redirect" on "lb-1" with [Haproxy, Nginx];
    tls_annotation: "tls-annotation" on "lb-1" with [Haproxy, Nginx];
    backend_tls_nocheck: "backend-tls-nocheck" on "lb-1" with [Haproxy, Nginx];
    shared_ip: "shared-ip" on "lb-1" with [Haproxy, Nginx];
    ipv6: "ipv6" on "lb-1" with [Haproxy, Nginx];
    two_pools_two_interfaces: "two-pools" on "lb-1" with [Haproxy, Nginx];
    stickiness_source_and_cookie: "stickiness" on "lb-1" with [Haproxy, Nginx];
    udp_and_sctp: "udp" on "lb-1" with [Haproxy, Nginx];
    proxy_protocol: "proxy-protocol" on "lb-1" with [Haproxy, Nginx];
    source_ranges: "source-ranges" on "lb-1" with [Haproxy, Nginx];
    /// Ranges the plan refused fail closed: `deny all;` without the unparsable `allow`
    /// for nginx, a `src` no client has for HAProxy (both accepted by their checkers).
    refused_source_ranges_fail_closed: "source-ranges-refused" on "lb-1" with [Haproxy, Nginx];
    kubeproxy: "kubeproxy" on "lb-1" with [Kubeproxy];
    unicast_two_nodes: "unicast-2node" on "lb-2" with [Haproxy];
    empty_state_keeps_vrid: "empty" on "lb-1" with [Haproxy, Nginx];
    /// The sections k8slb's defaults give (common::config::default_haproxy/default_nginx):
    /// nginx gets the actor's own `events` block.
    default_sections: "default-sections" on "lb-1" with [Haproxy, Nginx];
    /// A Service port whose `appProtocol` is `kubernetes.io/h2c` (gRPC): HAProxy's
    /// servers speak HTTP/2 (`proto h2`), its TLS bind offers h2 by ALPN; nginx listens
    /// with `http2` and forwards with `grpc_pass`.
    h2c_service_ports: "h2c" on "lb-1" with [Haproxy, Nginx];
}
