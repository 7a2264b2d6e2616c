//! Snapshot tests of the L7 routes rendered for HAProxy and nginx, from Ingress fixtures
//! (`tests/fixtures/ingress/*.yaml`, each with `services.yaml`) through the real
//! translation (`k8slb_common::ingress`) and the real renderer (`render_http`). Each
//! render is snapshotted (the route model too), then checked by the real daemon:
//!
//! - `haproxy -c` on the actor's haproxy.cfg for the `default-sections` state (k8slb's
//!   default sections and three Services) with the routes part appended, crt-lists and
//!   certificates written to a temp dir;
//! - `nginx -t` on that state's nginx.conf with the routes part inside `http { }`, in a
//!   network namespace made by the test (nginx binds the VIPs; `ip_nonlocal_bind`).
//!
//! Needs root and `apt-get install -y haproxy nginx openssl iproute2`: missing ones FAIL.
//! Update snapshots with `INSTA_UPDATE=always` (or `cargo insta review`).

mod support;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8slb_actor::render::Renderer;
use k8slb_actor::render_http::{HttpRenderOptions, HttpRenderer};
use k8slb_actor::view::{view, ProxyKind, ViewOptions};
use k8slb_common::ingress::{routes_for_vip, select, IngressInput, SecretMeta, VipOptions};
use k8slb_common::routes::{
    BackendId, BackendState, FixedStatus, HttpRoutes, Listener, ListenerProtocol, PathMatch,
    Redirect, RedirectStatus, RouteAction, RouteMatch, RouteRule, Scheme, VirtualHost,
    WeightedBackend,
};
use k8slb_common::state::{Endpoint, State};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const VIP: &str = "198.18.0.10";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

#[derive(Default)]
struct Objects {
    ingresses: Vec<Ingress>,
    classes: Vec<IngressClass>,
    services: Vec<Service>,
    slices: Vec<EndpointSlice>,
    secrets: Vec<SecretMeta>,
}

fn read(objs: &mut Objects, file: &Path) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).unwrap();
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        match kind.as_str() {
            "Ingress" => objs.ingresses.push(serde_json::from_value(v).unwrap()),
            "IngressClass" => objs.classes.push(serde_json::from_value(v).unwrap()),
            "Service" => objs.services.push(serde_json::from_value(v).unwrap()),
            "EndpointSlice" => objs.slices.push(serde_json::from_value(v).unwrap()),
            // What the watcher would learn from a Secret (never its bytes): fixtures carry
            // no data; all of them are valid.
            "Secret" => objs.secrets.push(SecretMeta {
                namespace: v["metadata"]["namespace"].as_str().unwrap().into(),
                name: v["metadata"]["name"].as_str().unwrap().into(),
                type_: v["type"].as_str().unwrap().into(),
                valid: true,
            }),
            other => panic!("{file:?}: unexpected kind {other:?}"),
        }
    }
}

fn routes_of(fixture: &str) -> HttpRoutes {
    let mut objs = Objects::default();
    read(&mut objs, &fixtures().join("ingress/services.yaml"));
    read(&mut objs, &fixtures().join(format!("ingress/{fixture}.yaml")));
    let input = IngressInput {
        ingresses: &objs.ingresses,
        classes: &objs.classes,
        services: &objs.services,
        slices: &objs.slices,
        secrets: &objs.secrets,
    };
    let sel = select(&objs.ingresses, &objs.classes);
    let pool = "default".parse().unwrap();
    let out = routes_for_vip(
        sel.by_pool.get(&pool).map(Vec::as_slice).unwrap_or_default(),
        &input,
        &VipOptions {
            ip: VIP.parse().unwrap(),
            pool,
            pool_certificate: true,
        },
    );
    insta::assert_snapshot!(
        format!("{fixture}.problems"),
        out.problems
            .iter()
            .map(|p| format!("{} {}: {}", p.object, p.reason, p.message))
            .collect::<Vec<_>>()
            .join("\n")
    );
    out.routes
}

fn binary(name: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("{name} is not installed: run `apt-get install -y haproxy nginx openssl iproute2`");
}

/// A temp dir with one self-signed certificate as `<stem>.pem` (chain + key) and
/// `<stem>.key` for every stem the fixtures use.
fn certs() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtcerts")
            .tempdir()
            .unwrap();
        let (crt, key) = (dir.path().join("c.crt"), dir.path().join("c.key"));
        let out = Command::new(binary("openssl"))
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"])
            .args(["-subj", "/CN=k8slb-test", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&crt)
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
        let (c, k) = (
            std::fs::read_to_string(&crt).unwrap(),
            std::fs::read_to_string(&key).unwrap(),
        );
        for n in ["default", "default_foo", "default_wild"] {
            std::fs::write(dir.path().join(format!("{n}.pem")), format!("{c}{k}")).unwrap();
            std::fs::write(dir.path().join(format!("{n}.key")), &k).unwrap();
        }
        dir
    })
    .path()
}

fn base_state() -> State {
    let path = fixtures().join("default-sections.json");
    State::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Options with the admin lines of the `default-sections` state.
fn options(state: &State) -> HttpRenderOptions {
    HttpRenderOptions {
        pool_cert_dir: state.config.cert_path.as_str().into(),
        httpfront: state.config.haproxy.httpfront.clone(),
        httpback: state.config.haproxy.httpback.clone(),
        nginx_proxy: state.config.nginx.proxy.clone(),
        nginx_upstream: state.config.nginx.upstream.clone(),
        ..HttpRenderOptions::default()
    }
}

fn run_check(what: &str, cmd: &mut Command, text: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} refused the config ({}):\n{all}\n--- config ---\n{text}",
        out.status
    );
    assert!(
        !all.contains("WARNING") && !all.contains("[ALERT]"),
        "{what} warned:\n{all}\n--- config ---\n{text}"
    );
}

/// Render `routes` for both proxies, snapshot, and check with the real daemons.
fn check(name: &str, routes: &HttpRoutes) {
    insta::assert_snapshot!(
        format!("{name}.routes"),
        serde_json::to_string_pretty(routes).unwrap()
    );
    let r = HttpRenderer::embedded().unwrap();
    let state = base_state();
    let hp = r.haproxy(routes, &options(&state), &[]).unwrap();
    insta::assert_snapshot!(format!("{name}.haproxy"), hp.text);
    let lists: String = hp
        .crt_lists
        .iter()
        .map(|(f, t)| format!("# {f}\n{t}"))
        .collect();
    insta::assert_snapshot!(format!("{name}.crt-lists"), lists);
    let nx = r.nginx(routes, &options(&state)).unwrap();
    insta::assert_snapshot!(format!("{name}.nginx"), nx.text);
    insta::assert_snapshot!(
        format!("{name}.notes"),
        [hp.notes, nx.notes].concat().join("\n")
    );

    // Through the real daemons: certificates and crt-lists in a temp dir.
    support::require_root_and(&["haproxy", "nginx", "openssl"]);
    let dir = tempfile::Builder::new().prefix("k8slb-rthttp").tempdir().unwrap();
    let mut checked = state.clone();
    checked.config.cert_path = certs().to_str().unwrap().parse().unwrap();
    let mut o = options(&checked);
    o.secret_cert_dir = certs().to_path_buf();
    o.crt_list_dir = dir.path().to_path_buf();
    let node = "lb-1".parse().unwrap();
    let base = Renderer::embedded().unwrap();
    let ns = support::Netns::new("k8slbrh");
    for k in ["net.ipv4.ip_nonlocal_bind=1", "net.ipv6.ip_nonlocal_bind=1"] {
        let st = ns.cmd("sysctl").args(["-qw", k]).status().unwrap();
        assert!(st.success(), "sysctl {k}");
    }

    let mut vo = ViewOptions::new(ProxyKind::Haproxy);
    vo.interfaces.insert("default".parse().unwrap(), "eth0".parse().unwrap());
    vo.pid_file = dir.path().join("haproxy.pid");
    vo.runtime_socket = dir.path().join("haproxy.sock");
    let v = view(&checked, &node, &vo).unwrap();
    let hp = r.haproxy(routes, &o, &[]).unwrap();
    for (f, t) in &hp.crt_lists {
        std::fs::write(f, t).unwrap();
    }
    let text = format!("{}\n{}", base.render_proxy(&v).unwrap().unwrap(), hp.text);
    let file = dir.path().join("haproxy.cfg");
    std::fs::write(&file, &text).unwrap();
    run_check(
        "haproxy -c",
        ns.cmd(binary("haproxy").to_str().unwrap()).arg("-c").arg("-f").arg(&file),
        &text,
    );

    let mut vo = ViewOptions::new(ProxyKind::Nginx);
    vo.interfaces.insert("default".parse().unwrap(), "eth0".parse().unwrap());
    vo.pid_file = dir.path().join("nginx.pid");
    let v = view(&checked, &node, &vo).unwrap();
    let nx = r.nginx(routes, &o).unwrap();
    let base_text = base.render_proxy(&v).unwrap().unwrap();
    let text = insert_into_http(&base_text, &nx.text);
    let file = dir.path().join("nginx.conf");
    std::fs::write(&file, &text).unwrap();
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    run_check(
        "nginx -t",
        ns.cmd(binary("nginx").to_str().unwrap())
            .args(["-t", "-q", "-p"])
            .arg(dir.path())
            .arg("-c")
            .arg(&file),
        &text,
    );
}

/// `part` inserted before the `}` that closes the top-level `http {` block of `conf`.
fn insert_into_http(conf: &str, part: &str) -> String {
    let start = conf.find("\nhttp {").expect("an http block");
    let end = start + conf[start..].find("\n}").expect("http block closed");
    format!("{}\n{}{}", &conf[..end], part, &conf[end..])
}

#[test]
fn rancher_examples() {
    check("rancher-examples", &routes_of("rancher-examples"));
}

#[test]
fn precedence_hosts_paths_and_a_missing_service() {
    check("precedence", &routes_of("precedence"));
}

#[test]
fn tls_sni_redirect_and_stickiness() {
    check("tls-sni", &routes_of("tls-sni"));
}

/// What Ingress never produces but the model holds for Gateway API: a weighted split, a
/// redirect with host, port, path and status, a fixed status, an IPv6 VIP.
#[test]
fn model_only_split_redirect_and_ipv6() {
    let a: BackendId = "default/nginx-service:80".parse().unwrap();
    let b: BackendId = "default/nginx-service1:8080".parse().unwrap();
    let ep = |ip: &str, port| Endpoint {
        ip: ip.parse().unwrap(),
        port,
        draining: false,
    };
    let rule = |m: PathMatch, action| RouteRule {
        matches: RouteMatch { path: m },
        action,
    };
    let routes = HttpRoutes {
        listeners: vec![Listener {
            ip: "fd00:18::10".parse().unwrap(),
            port: 80,
            protocol: ListenerProtocol::Http,
            tls: None,
            virtual_hosts: vec![VirtualHost {
                host: Some("split.example.com".parse().unwrap()),
                rules: vec![
                    rule(
                        PathMatch::Exact("/old".parse().unwrap()),
                        RouteAction::Redirect(Redirect {
                            scheme: Some(Scheme::Https),
                            host: Some("new.example.com".parse().unwrap()),
                            port: Some(8443),
                            path: Some("/new".parse().unwrap()),
                            status: RedirectStatus::Found302,
                        }),
                    ),
                    rule(
                        PathMatch::Prefix("/down".parse().unwrap()),
                        RouteAction::Respond {
                            status: FixedStatus::ServiceUnavailable503,
                        },
                    ),
                    rule(
                        PathMatch::Prefix("/".parse().unwrap()),
                        RouteAction::Forward {
                            backends: vec![
                                WeightedBackend { id: a.clone(), weight: 90 },
                                WeightedBackend { id: b.clone(), weight: 10 },
                            ],
                        },
                    ),
                ],
            }],
            default_action: None,
        }],
        backends: [
            (a, BackendState { endpoints: vec![ep("fd00:244::1", 80)], stickiness: None }),
            (b, BackendState { endpoints: vec![], stickiness: None }),
        ]
        .into_iter()
        .collect(),
    };
    check("model-only", &routes);
}

/// Slots are kept across renders: an endpoint change keeps the other endpoints' slots and
/// the structure of the config, so it is a Runtime API change.
#[test]
fn endpoint_churn_changes_only_server_slots() {
    let mut routes = routes_of("rancher-examples");
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    let first = r.haproxy(&routes, &o, &[]).unwrap();
    let id: BackendId = "default/nginx-service:80".parse().unwrap();
    let be = routes.backends.get_mut(&id).unwrap();
    be.endpoints.remove(0);
    be.endpoints.push(Endpoint {
        ip: "10.244.9.9".parse().unwrap(),
        port: 80,
        draining: false,
    });
    let second = r.haproxy(&routes, &o, &first.backends).unwrap();
    let strip = |t: &str| {
        t.lines()
            .filter(|l| !l.trim_start().starts_with("server "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&first.text), strip(&second.text));
    assert_ne!(first.text, second.text);
    let slots = |b: &[k8slb_actor::view::Backend]| {
        b.iter()
            .find(|b| b.name == "rtb_default_nginx-service_80")
            .unwrap()
            .slots
            .iter()
            .map(|s| s.endpoint.map(|e| e.to_string()))
            .collect::<Vec<_>>()
    };
    let (s1, s2) = (slots(&first.backends), slots(&second.backends));
    assert_eq!(s1.len(), s2.len());
    assert_eq!(s1[1], s2[1], "the unchanged endpoint keeps its slot");
    assert_eq!(s2[0].as_deref(), Some("10.244.9.9:80"), "the new one takes the freed slot");
}
