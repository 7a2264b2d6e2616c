//! `k8slb-actor render`: writes exactly the expected files, and a pool without an
//! interface is a clear error naming the pool; a state with Ingress routes (planned by the
//! real `plan` from the Rancher examples and a TLS Ingress) gives haproxy.cfg with the map
//! and crt-list files it names, and nginx.conf with a server per host, both accepted by
//! `haproxy -c` and `nginx -t` (root).

mod support;

use k8slb_common::state::State;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.json"))
}

fn render(args: &[&str]) -> (std::process::Output, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_k8slb-actor"))
        .arg("render")
        .args(args)
        .arg("--out")
        .arg(out.path())
        .env_remove("PROXY")
        .env_remove("K8SLB_NODE_NAME")
        .env("PRIORITY1", "77")
        .output()
        .unwrap();
    (o, out)
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn writes_exactly_the_configs() {
    let state = fixture("two-pools");
    let s = state.to_str().unwrap();
    for (proxy, expected) in [
        ("haproxy", vec!["haproxy.cfg", "keepalived.conf"]),
        ("nginx", vec!["keepalived.conf", "nginx.conf"]),
        ("kubeproxy", vec!["keepalived.conf"]),
    ] {
        let (o, dir) = render(&[
            "--state",
            s,
            "--node",
            "lb-1",
            "--proxy",
            proxy,
            "--interface",
            "default=eth0",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(files(dir.path()), expected, "{proxy}");
        let ka = std::fs::read_to_string(dir.path().join("keepalived.conf")).unwrap();
        // dmz's interface comes from the state, default's from the flag.
        assert!(
            ka.contains("interface eth1") && ka.contains("interface eth0"),
            "{ka}"
        );
        // PRIORITY1 applies to instance 1 (vrid 11) only where lb-1 is not the owner:
        // lb-1 owns vrid 11, so 150 stays; it is a backup of vrid 12 (n = 2): 100 stays.
        assert!(!ka.contains("priority 77"), "{ka}");
    }
    // As lb-2, PRIORITY1=77 replaces its backup priority in instance 1.
    let (o, dir) = render(&[
        "--state",
        s,
        "--node",
        "lb-2",
        "--interface",
        "default=eth0",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ka = std::fs::read_to_string(dir.path().join("keepalived.conf")).unwrap();
    assert!(ka.contains("priority 77"), "{ka}");
}

#[test]
fn missing_interface_names_the_pool() {
    let state = fixture("two-pools");
    let (o, dir) = render(&["--state", state.to_str().unwrap(), "--node", "lb-1"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no interface for pool default"), "{err}");
    assert!(files(dir.path()).is_empty(), "nothing is written on error");
}

#[test]
fn bad_flags_are_refused() {
    let state = fixture("two-pools");
    let (o, _) = render(&[
        "--state",
        state.to_str().unwrap(),
        "--node",
        "lb-1",
        "--interface",
        "default=eth0;x",
    ]);
    assert!(!o.status.success());
    let (o, _) = render(&["--state", "/nonexistent.json", "--node", "lb-1"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent.json"));
}

#[test]
fn a_state_planned_for_another_provider_is_refused_and_nothing_is_written() {
    let mut state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("two-pools")).unwrap()).unwrap();
    state["provider"] = "nginx".into();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    std::fs::write(&path, state.to_string()).unwrap();
    let s = path.to_str().unwrap();
    let args = |proxy| {
        [
            "--state",
            s,
            "--node",
            "lb-1",
            "--proxy",
            proxy,
            "--interface",
            "default=eth0",
        ]
    };
    let (o, out) = render(&args("haproxy"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("the state was planned for provider nginx, but this actor runs haproxy"),
        "{err}"
    );
    assert!(files(out.path()).is_empty());
    let (o, out) = render(&args("nginx"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(files(out.path()), ["keepalived.conf", "nginx.conf"]);
}

// ---------------------------------------------------------------------------------------
// A state with Ingress routes, as the watcher plans it.

/// The Rancher examples (`fixtures/ingress/rancher-examples.yaml`: a custom HTTP port 99,
/// a default backend, a host-only rule, two services) plus a TLS Ingress for
/// `secure.example` whose Secret `default/secure` holds a real self-signed certificate,
/// planned by the real `plan` (what `k8slb-watcher plan` prints) for `provider`. Writes into
/// `dir`: `state.json`, the pool certificate `pool/default.{pem,key}` (the state's
/// `certPath`) and the node certificate `certs/default_secure.pem`; returns the state.
fn ingress_state(dir: &Path, provider: &str) -> State {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let (pool_dir, certs_dir) = (dir.join("pool"), dir.join("certs"));
    std::fs::create_dir_all(&pool_dir).unwrap();
    std::fs::create_dir_all(&certs_dir).unwrap();
    let (pool_crt, pool_key) = k8slb_common::testing::self_signed("pool.default");
    std::fs::write(
        pool_dir.join("default.pem"),
        format!("{pool_crt}{pool_key}"),
    )
    .unwrap();
    std::fs::write(pool_dir.join("default.key"), &pool_key).unwrap();
    let (crt, key) = k8slb_common::testing::self_signed("secure.example");
    std::fs::write(certs_dir.join("default_secure.pem"), format!("{crt}{key}")).unwrap();
    let node = |name: &str, ip: &str| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"type": "loadBalancer"}},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}],
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })
    };
    let extra = [
        node("lb-1", "10.0.0.11"),
        node("lb-2", "10.0.0.12"),
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"namespace": "default", "name": "secure"},
            "data": {"tls.crt": b64(&crt), "tls.key": b64(&key)},
        }),
        serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"namespace": "default", "name": "secure",
                         "creationTimestamp": "2026-01-01T00:00:05Z"},
            "spec": {"ingressClassName": "k8slb",
                     "tls": [{"hosts": ["secure.example"], "secretName": "secure"}],
                     "rules": [{"host": "secure.example", "http": {"paths": [
                         {"path": "/", "pathType": "Prefix", "backend": {"service":
                             {"name": "nginx-service", "port": {"number": 80}}}}]}}]},
        }),
    ];
    let extra_file = dir.join("extra.yaml");
    let docs: Vec<String> = extra.iter().map(|v| v.to_string()).collect();
    std::fs::write(&extra_file, docs.join("\n---\n")).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ingress");
    let objs = k8slb_common::objects::Objects::read_paths(&[
        fixtures.join("services.yaml"),
        fixtures.join("rancher-examples.yaml"),
        extra_file,
    ])
    .unwrap();
    let cfg = k8slb_common::config::parse_global_config(
        r#"{"pools": {"default": {"network": "192.168.10.0/24",
                                  "range": "192.168.10.100-192.168.10.110"}}}"#,
    )
    .unwrap();
    let opts = k8slb_common::plan::PlanOptions {
        provider: provider.parse().unwrap(),
        cert_path: pool_dir.to_str().unwrap().parse().unwrap(),
        ..Default::default()
    };
    let state = k8slb_common::plan::plan(&cfg, &opts, &objs, None);
    assert!(
        state.problems.is_empty(),
        "the examples plan without problems: {:?}",
        state.problems
    );
    std::fs::write(dir.join("state.json"), state.to_json()).unwrap();
    state
}

/// `k8slb-actor render` of the [`ingress_state`] in `dir` for `proxy`, into `dir/out`,
/// with the node certificates of `dir/certs` and the pid file and socket inside `dir`.
fn render_ingress(dir: &Path, proxy: &str) -> PathBuf {
    let out = dir.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_k8slb-actor"))
        .arg("render")
        .args(["--node", "lb-1", "--proxy", proxy])
        .args(["--interface", "default=eth0"])
        .arg("--state")
        .arg(dir.join("state.json"))
        .arg("--certs-dir")
        .arg(dir.join("certs"))
        .arg("--runtime-socket")
        .arg(dir.join("haproxy.sock"))
        .arg("--pid-file")
        .arg(dir.join(format!("{proxy}.pid")))
        .arg("--out")
        .arg(&out)
        .env_remove("PROXY")
        .env_remove("K8SLB_NODE_NAME")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "render {proxy}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// The ingress VIP of the planned state (one: no scale annotation).
fn ingress_vip(state: &State) -> String {
    let ips: std::collections::BTreeSet<String> = state
        .ingresses
        .values()
        .flat_map(|i| i.ips.iter().map(|ip| ip.to_string()))
        .collect();
    assert_eq!(ips.len(), 1, "one ingress VIP: {ips:?}");
    ips.into_iter().next().unwrap()
}

/// The paths under `routes` that `text` names (up to a `)`, a space or a line end).
fn named_route_files(text: &str, routes: &Path) -> Vec<String> {
    let prefix = format!("{}/", routes.display());
    let mut v: Vec<String> = text
        .match_indices(&prefix)
        .map(|(i, _)| {
            text[i + prefix.len()..]
                .split([')', ' ', '\n'])
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn render_writes_the_ingress_route_files_haproxy_cfg_names_and_nginx_servers() {
    // HAProxy: haproxy.cfg names map files and a crt-list under out/routes, all written
    // (and nothing else there), holding the examples' hosts and paths.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let state = ingress_state(dir, "haproxy");
    let vip = ingress_vip(&state);
    let out = render_ingress(dir, "haproxy");
    assert_eq!(files(&out), ["haproxy.cfg", "keepalived.conf", "routes"]);
    let cfg = read(&out.join("haproxy.cfg"));
    let routes = std::path::absolute(out.join("routes")).unwrap();
    let named = named_route_files(&cfg, &routes);
    assert_eq!(
        named,
        files(&routes),
        "haproxy.cfg names exactly the files written"
    );
    let slug = vip.replace('.', "_");
    for port in [80, 99, 443] {
        assert!(
            cfg.contains(&format!("frontend rtf_{slug}_{port}\n  bind {vip}:{port} ")),
            "a frontend on {vip}:{port}:\n{cfg}"
        );
    }
    for f in [
        format!("rtf_{slug}_80.hosts.map"),
        format!("rtf_{slug}_80.prefix.map"),
        format!("rtf_{slug}_99.hosts.map"),
        format!("rtf_{slug}_99.prefix.map"),
        format!("rtf_{slug}_443.crt-list"),
    ] {
        assert!(named.contains(&f), "{f} among {named:?}");
    }
    let file = |f: String| read(&routes.join(f));
    // Map values are virtual-host ids (v1, v2, ...): the prefix map keys are `<id><path>/`.
    let vh = |map: &str, host: &str| -> String {
        map.lines()
            .find_map(|l| l.strip_prefix(&format!("{host} ")))
            .unwrap_or_else(|| panic!("{host} not in the hosts map:\n{map}"))
            .to_string()
    };
    let hosts80 = file(format!("rtf_{slug}_80.hosts.map"));
    let prefix80 = file(format!("rtf_{slug}_80.prefix.map"));
    for (host, path, backend) in [
        ("foo.bar.com", "/foo/", "rtb_default_nginx-service_80"),
        ("bar.foo.com", "/bar/", "rtb_default_nginx-service1_8080"),
        ("host.only.com", "/", "rtb_default_nginx-service_80"),
    ] {
        let line = format!("{}{path} {backend}", vh(&hosts80, host));
        assert!(
            prefix80.lines().any(|l| l == line),
            "{line} in the :80 prefix map:\n{prefix80}"
        );
    }
    // The default backend is port 80's default action; port 99 has none (404).
    assert!(
        cfg.contains("str(rtb_default_nginx-service_80) if !{ var(txn.k8slb_a) -m found }"),
        "{cfg}"
    );
    let hosts99 = file(format!("rtf_{slug}_99.hosts.map"));
    assert_eq!(hosts99.lines().count(), 1, "{hosts99}");
    let prefix99 = file(format!("rtf_{slug}_99.prefix.map"));
    assert!(
        prefix99.lines().any(|l| l
            == format!(
                "{}/foo/ rtb_default_nginx-service_80",
                vh(&hosts99, "foo.bar.com")
            )),
        "{prefix99}"
    );
    // The TLS host's certificate by SNI; the pool's as the default: the crt-list's
    // first line, never for a hostname another line names.
    let certs = dir.join("certs");
    assert_eq!(
        file(format!("rtf_{slug}_443.crt-list")).trim(),
        format!(
            "{}/default.pem !secure.example\n{}/default_secure.pem secure.example",
            dir.join("pool").display(),
            certs.display()
        )
    );
    assert!(cfg.contains("ssl crt-list "), "{cfg}");
    assert!(!cfg.contains(" ssl crt /"), "no bind-line default: {cfg}");
    // Backends: both Services' endpoints, the terminating one at weight 0.
    for server in [
        "server s1 10.244.1.10:80 check",
        "server s2 10.244.2.10:80 check",
        "server s1 10.244.1.11:8000 check",
        "server s2 10.244.3.11:8000 check weight 0",
    ] {
        assert!(cfg.contains(server), "{server}:\n{cfg}");
    }

    // nginx: one server per listener and host, the locations of the examples; no files.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ingress_state(dir, "nginx");
    let out = render_ingress(dir, "nginx");
    assert_eq!(files(&out), ["keepalived.conf", "nginx.conf"]);
    let conf = read(&out.join("nginx.conf"));
    let server = |listen: &str, name: &str| -> String {
        let head = format!("    listen {listen};\n    server_name {name};\n");
        let i = conf
            .find(&head)
            .unwrap_or_else(|| panic!("no server {name} on {listen}:\n{conf}"));
        let end = conf[i..].find("\n  }\n").map_or(conf.len(), |e| i + e);
        conf[i..end].to_string()
    };
    let foo = server(&format!("{vip}:80"), "foo.bar.com");
    assert!(
        foo.contains("location = /foo {") && foo.contains("location ^~ /foo/ {"),
        "{foo}"
    );
    let bar = server(&format!("{vip}:80"), "bar.foo.com");
    assert!(bar.contains("location ^~ /bar/ {"), "{bar}");
    let host_only = server(&format!("{vip}:80"), "host.only.com");
    assert!(host_only.contains("location / {"), "{host_only}");
    let foo99 = server(&format!("{vip}:99"), "foo.bar.com");
    assert!(foo99.contains("location ^~ /foo/ {"), "{foo99}");
    let default80 = server(&format!("{vip}:80 default_server"), "_");
    assert!(default80.contains("location / {"), "{default80}");
    let secure = server(&format!("{vip}:443 ssl"), "secure.example");
    assert!(
        secure.contains(&format!(
            "ssl_certificate {}/default_secure.pem;",
            dir.join("certs").display()
        )),
        "{secure}"
    );
    let default443 = server(&format!("{vip}:443 ssl default_server"), "_");
    assert!(
        default443.contains(&format!(
            "ssl_certificate {}/default.pem;",
            dir.join("pool").display()
        )),
        "{default443}"
    );
    for upstream_server in ["10.244.1.10:80", "10.244.2.10:80", "10.244.1.11:8000"] {
        assert!(
            conf.contains(&format!("server {upstream_server}")),
            "{conf}"
        );
    }
}

#[test]
#[ignore = "needs root: a network namespace for nginx -t and haproxy -c (they bind the VIPs); ./scripts/test.sh runs it"]
fn rendered_ingress_configs_pass_haproxy_c_and_nginx_t() {
    support::require_root_and(&["haproxy", "nginx", "openssl"]);
    let check = |what: &str, cmd: &mut Command, conf: &Path| {
        let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            o.status.success() && !all.contains("[ALERT]") && !all.contains("WARNING"),
            "{what} refused or warned ({}):\n{all}\n--- {} ---\n{}",
            o.status,
            conf.display(),
            read(conf)
        );
    };
    let ns = support::Netns::new("k8slbrc");
    for k in ["net.ipv4.ip_nonlocal_bind=1", "net.ipv6.ip_nonlocal_bind=1"] {
        assert!(ns
            .cmd("sysctl")
            .args(["-qw", k])
            .status()
            .unwrap()
            .success());
    }
    let tmp = tempfile::tempdir().unwrap();
    ingress_state(tmp.path(), "haproxy");
    let out = render_ingress(tmp.path(), "haproxy");
    let cfg = out.join("haproxy.cfg");
    check(
        "haproxy -c",
        ns.cmd("haproxy").arg("-c").arg("-f").arg(&cfg),
        &cfg,
    );
    let tmp = tempfile::tempdir().unwrap();
    ingress_state(tmp.path(), "nginx");
    let out = render_ingress(tmp.path(), "nginx");
    let conf = out.join("nginx.conf");
    std::fs::create_dir_all(tmp.path().join("logs")).unwrap();
    check(
        "nginx -t",
        ns.cmd("nginx")
            .args(["-t", "-q", "-p"])
            .arg(tmp.path())
            .arg("-c")
            .arg(&conf),
        &conf,
    );
}
