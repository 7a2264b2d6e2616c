//! Snapshot tests of the L7 routes rendered for HAProxy and nginx, from Ingress fixtures
//! (`tests/fixtures/ingress/*.yaml`, each with `services.yaml`) through the real
//! translation (`k8slb_common::ingress`) and the real renderer (`render_http`). Each
//! render is snapshotted (the route model too), then checked by the real daemon:
//!
//! - `haproxy -c` on the actor's haproxy.cfg for the `default-sections` state (k8slb's
//!   default sections and three Services) with the routes part appended, crt-lists, maps and
//!   certificates written to a temp dir;
//! - `nginx -t` on that state's nginx.conf with the routes part inside `http { }`, in a
//!   network namespace made by the test (nginx binds the VIPs; `ip_nonlocal_bind`).
//!
//! The daemon checks and the traffic tests need root (listed as ignored, with the reason, by
//! plain `cargo test`; `./scripts/test.sh` runs them) and `apt-get install -y haproxy nginx
//! openssl iproute2 curl`: missing ones FAIL.
//! Update snapshots with `INSTA_UPDATE=always` (or `cargo insta review`).

mod support;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8slb_actor::render::Renderer;
use k8slb_actor::render::{HttpRenderOptions, HttpRenderer};
use k8slb_actor::view::{view, ViewOptions};
use k8slb_common::gateway::GatewayOutput;
use k8slb_common::ingress::{routes_for_vip, select, IngressInput, SecretMeta, VipOptions};
use k8slb_common::routes::{
    BackendId, BackendState, FixedStatus, HttpRoutes, Listener, ListenerProtocol, MirrorShare,
    PartialMirror, PathMatch, Redirect, RedirectStatus, Request, RouteAction, RouteMatch,
    RouteRule, Scheme, VirtualHost, WeightedBackend,
};
use k8slb_common::state::Provider;
use k8slb_common::state::{Endpoint, State};
use serde::Deserialize;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

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
            // no data; all of them are valid, for the DNS names their annotation
            // `test/dns-names` lists (comma-separated).
            "Secret" => objs.secrets.push(SecretMeta {
                namespace: v["metadata"]["namespace"].as_str().unwrap().into(),
                name: v["metadata"]["name"].as_str().unwrap().into(),
                type_: v["type"].as_str().unwrap().into(),
                valid: true,
                version: String::new(),
                refusal: String::new(),
                dns_names: v["metadata"]["annotations"]["test/dns-names"]
                    .as_str()
                    .unwrap_or_default()
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(|n| n.trim().to_string())
                    .collect(),
            }),
            other => panic!("{file:?}: unexpected kind {other:?}"),
        }
    }
}

fn routes_of(fixture: &str) -> HttpRoutes {
    let mut objs = Objects::default();
    read(&mut objs, &fixtures().join("ingress/services.yaml"));
    read(
        &mut objs,
        &fixtures().join(format!("ingress/{fixture}.yaml")),
    );
    let (routes, problems) = ingress_routes(&objs);
    insta::assert_snapshot!(format!("{fixture}.problems"), problems);
    routes
}

/// The routes of `objs`' Ingresses on the VIP (pool `default`), and their problems, one
/// line each.
fn ingress_routes(objs: &Objects) -> (HttpRoutes, String) {
    let input = IngressInput {
        ingresses: &objs.ingresses,
        classes: &objs.classes,
        services: &objs.services,
        slices: &objs.slices,
        secrets: &objs.secrets,
        reserved_ports: None,
        host_owners: None,
    };
    let sel = select(&objs.ingresses, &objs.classes);
    let pool = "default".parse().unwrap();
    let out = routes_for_vip(
        sel.by_pool
            .get(&pool)
            .map(Vec::as_slice)
            .unwrap_or_default(),
        &input,
        &VipOptions {
            ip: VIP.parse().unwrap(),
            pool,
            pool_certificate: true,
        },
    );
    let problems = out
        .problems
        .iter()
        .map(|p| format!("{} {}: {}", p.object, p.reason, p.message))
        .collect::<Vec<_>>()
        .join("\n");
    (out.routes, problems)
}

/// The routes of a Gateway API fixture (`tests/fixtures/gateway/<fixture>.yaml`, with the
/// Services of `ingress/services.yaml`) on the VIP, through the Gateway translation; its
/// problems are a snapshot too, and every route must be Accepted.
fn gateway_routes_of(fixture: &str) -> HttpRoutes {
    gateway_translation(fixture, &[]).routes
}

/// The Gateway API translation of a fixture (see [`gateway_routes_of`]) with the Secrets
/// `secrets` known; every route must be Accepted.
fn gateway_translation(fixture: &str, secrets: &[SecretMeta]) -> GatewayOutput {
    let mut objs = k8slb_common::objects::Objects::default();
    for f in [
        fixtures().join("ingress/services.yaml"),
        fixtures().join(format!("gateway/{fixture}.yaml")),
    ] {
        objs.add_text(&std::fs::read_to_string(&f).unwrap())
            .unwrap_or_else(|e| panic!("{f:?}: {e}"));
    }
    let addresses = objs
        .gateways
        .iter()
        .map(|g| {
            let key = k8slb_common::names::ObjectKey::new(
                g.metadata.namespace.as_deref().unwrap(),
                g.metadata.name.as_deref().unwrap(),
            )
            .unwrap();
            (key, vec![VIP.parse().unwrap()])
        })
        .collect();
    let out = k8slb_common::gateway::translate(&objs.gateway_input(
        secrets,
        &addresses,
        &Default::default(),
    ));
    for (route, parents) in &out.http_routes {
        for p in parents {
            assert!(
                p.conditions.iter().all(|c| c.status),
                "{route}: {:?}",
                p.conditions
            );
        }
    }
    out
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

/// A self-signed certificate per stem the fixtures use, made in `dir` (the test's temp
/// dir, removed with it), its CN the stem (so a TLS client can tell which one it got):
/// `<stem>.pem` (chain + key) and `<stem>.key`.
fn certs(dir: &Path) -> PathBuf {
    let dir = dir.join("certs");
    std::fs::create_dir_all(&dir).unwrap();
    for n in ["default", "default_foo", "default_wild", "default_client"] {
        self_signed(&dir, n);
    }
    dir
}

/// A self-signed certificate with CN `n` in `dir`: `<n>.crt`, `<n>.key` and `<n>.pem`
/// (chain + key).
fn self_signed(dir: &Path, n: &str) {
    self_signed_with(dir, n, None)
}

/// [`self_signed`] with the subjectAltName `san` (`DNS:a,DNS:b`) when given.
/// A valid `kubernetes.io/tls` Secret of namespace `default` whose certificate has the
/// subjectAltName DNS `names`.
fn tls_secret(name: &str, names: &[&str]) -> SecretMeta {
    SecretMeta {
        namespace: "default".into(),
        name: name.into(),
        type_: "kubernetes.io/tls".into(),
        valid: true,
        version: "0123456789abcdef".into(),
        refusal: String::new(),
        dns_names: names.iter().map(|n| n.to_string()).collect(),
    }
}

fn self_signed_with(dir: &Path, n: &str, san: Option<&str>) {
    let (crt, key) = (dir.join(format!("{n}.crt")), dir.join(format!("{n}.key")));
    let mut cmd = Command::new(binary("openssl"));
    cmd.args([
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
    ]);
    if let Some(san) = san {
        cmd.args(["-addext", &format!("subjectAltName={san}")]);
    }
    let out = cmd
        .args([
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={n}"),
            "-keyout",
        ])
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
    std::fs::write(dir.join(format!("{n}.pem")), format!("{c}{k}")).unwrap();
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
        nginx_http: state.config.nginx.http.clone(),
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
/// The route model and both renders of `routes`, against their snapshots `<name>.*`.
fn snapshots(name: &str, routes: &HttpRoutes) {
    insta::assert_snapshot!(
        format!("{name}.routes"),
        serde_json::to_string_pretty(routes).unwrap()
    );
    let r = HttpRenderer::embedded().unwrap();
    let state = base_state();
    let hp = r.haproxy(routes, &options(&state), &[]).unwrap();
    insta::assert_snapshot!(format!("{name}.haproxy"), hp.text);
    let lists: String = hp
        .files
        .iter()
        .map(|(f, t)| format!("# {f}\n{t}"))
        .collect();
    insta::assert_snapshot!(format!("{name}.files"), lists);
    let nx = r.nginx(routes, &options(&state)).unwrap();
    let mut nx_text = nx.text.clone();
    if !nx.stream_text.is_empty() {
        nx_text.push_str("\n# --- inside stream { } ---\n");
        nx_text.push_str(&nx.stream_text);
    }
    insta::assert_snapshot!(format!("{name}.nginx"), nx_text);
    insta::assert_snapshot!(
        format!("{name}.notes"),
        [hp.notes, nx.notes].concat().join("\n")
    );
}

/// The renders of `routes` through the real daemons' own checks: `haproxy -c` and
/// `nginx -t`, with certificates and crt-lists in a temp dir (root: a network namespace).
fn daemon_checks(routes: &HttpRoutes) {
    support::require_root_and(&["haproxy", "nginx", "openssl"]);
    let r = HttpRenderer::embedded().unwrap();
    let state = base_state();
    let dir = tempfile::Builder::new()
        .prefix("k8slb-rthttp")
        .tempdir()
        .unwrap();
    let certs = certs(dir.path());
    let mut checked = state.clone();
    checked.config.cert_path = certs.to_str().unwrap().parse().unwrap();
    let mut o = options(&checked);
    o.secret_cert_dir = certs.clone();
    o.files_dir = dir.path().to_path_buf();
    // `nginx -t` binds (and removes) the unix sockets of a TLS port of both modes.
    o.hop_dir = dir.path().join("hop");
    std::fs::create_dir_all(&o.hop_dir).unwrap();
    let node = "lb-1".parse().unwrap();
    let base = Renderer::embedded().unwrap();
    let ns = support::Netns::new("k8slbrh");
    for k in ["net.ipv4.ip_nonlocal_bind=1", "net.ipv6.ip_nonlocal_bind=1"] {
        let st = ns.cmd("sysctl").args(["-qw", k]).status().unwrap();
        assert!(st.success(), "sysctl {k}");
    }

    let mut vo = ViewOptions::new(Provider::Haproxy);
    vo.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    vo.pid_file = dir.path().join("haproxy.pid");
    vo.runtime_socket = dir.path().join("haproxy.sock");
    let v = view(&checked, &node, &vo).unwrap();
    let hp = r.haproxy(routes, &o, &[]).unwrap();
    for (f, t) in &hp.files {
        std::fs::write(f, t).unwrap();
    }
    let text = format!("{}\n{}", base.render_proxy(&v).unwrap().unwrap(), hp.text);
    let file = dir.path().join("haproxy.cfg");
    std::fs::write(&file, &text).unwrap();
    run_check(
        "haproxy -c",
        ns.cmd(binary("haproxy").to_str().unwrap())
            .arg("-c")
            .arg("-f")
            .arg(&file),
        &text,
    );

    let mut vo = ViewOptions::new(Provider::Nginx);
    vo.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    vo.pid_file = dir.path().join("nginx.pid");
    let v = view(&checked, &node, &vo).unwrap();
    let nx = r.nginx(routes, &o).unwrap();
    let base_text = base.render_proxy(&v).unwrap().unwrap();
    let mut text = insert_into_http(&base_text, &nx.text);
    if !nx.stream_text.is_empty() {
        text = insert_into_stream(&text, &nx.stream_text);
    }
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

/// `part` inserted at the end of the top-level `stream {` block of `conf`, or in a new
/// one (with the stream module loaded) if it has none.
fn insert_into_stream(conf: &str, part: &str) -> String {
    match conf.find("\nstream {") {
        Some(start) => {
            let end = start + conf[start..].find("\n}").expect("stream block closed");
            format!("{}\n{}{}", &conf[..end], part, &conf[end..])
        }
        None => format!(
            "load_module {};\n{conf}\nstream {{\n{part}\n}}\n",
            k8slb_actor::view::NGINX_STREAM_MODULE
        ),
    }
}

/// Two tests per case: `<case>::renders_as_its_snapshots` (no root) and
/// `<case>::passes_the_daemons_own_checks` (root: listed as ignored, with the reason, by
/// plain `cargo test`; `./scripts/test.sh` runs it).
macro_rules! cases {
    ($($(#[$doc:meta])* $case:ident: $name:literal from $routes:expr;)*) => {$(
        $(#[$doc])*
        mod $case {
            use super::*;

            #[test]
            fn renders_as_its_snapshots() {
                snapshots($name, &$routes);
            }

            #[test]
            #[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
            fn passes_the_daemons_own_checks() {
                daemon_checks(&$routes);
            }
        }
    )*};
}

cases! {
    rancher_examples: "rancher-examples" from routes_of("rancher-examples");
    /// A valid 243-character host name: nginx's default hash bucket (64 bytes) would refuse
    /// the whole config; the routes size the hash themselves.
    long_host_names_do_not_break_nginx: "long-host" from routes_of("long-host");
    precedence_hosts_paths_and_a_missing_service: "precedence" from routes_of("precedence");
    tls_sni_redirect_and_stickiness: "tls-sni" from routes_of("tls-sni");
    /// What Ingress never produces but the model holds for Gateway API: a weighted split, a
    /// redirect with host, port, path and status, a fixed status, an IPv6 VIP.
    model_only_split_redirect_and_ipv6: "model-only" from model_only_routes();
    /// Hosts and paths crafted to break out of the config (see `hostile_..._never_reach`).
    hostile_hosts_paths_and_annotations: "hostile" from routes_of("hostile");
    /// Gateway API matches on method, headers and query parameters (HAProxy: ACL lines
    /// for those hosts, maps for the others; nginx: `map` variables per location).
    gateway_method_header_and_query_matches: "gateway-conditions" from gateway_routes_of("conditions");
    /// Gateway API filters: header modifiers and URL rewrites.
    gateway_filters: "gateway-filters" from gateway_routes_of("filters");
    /// Gateway API CORS filters: listed origins, methods, headers, credentials and a max
    /// age; any origin, echoing what a preflight asks (HAProxy: request and response
    /// lines per filtered forward; nginx: `map`s per filter).
    gateway_cors: "gateway-cors" from gateway_routes_of("cors");
    /// Gateway API redirects: scheme, host, port, full path and prefix replacement.
    gateway_redirects: "gateway-redirects" from gateway_routes_of("redirects");
    /// L4 streams (issue 12): TCP (a 90/10 split, one backend, none), UDP (nginx only;
    /// HAProxy skips it), TLS passthrough by SNI (exact, wildcards of any depth, an
    /// any-name split, a name without a backend), beside an HTTP listener whose Service
    /// port a TCP stream also names.
    l4_streams_tcp_udp_and_tls_passthrough: "streams" from stream_routes();
}

/// The `model-only` routes with mirrors on the split rule: every request to one of its
/// backends, 20% and 33.33% of them to a backend reached over TLS (Gateway API
/// RequestMirror with a `percent` or `fraction`, nginx only; a BackendTLSPolicy).
fn mirrored_routes() -> HttpRoutes {
    let mut routes = model_only_routes();
    let pem = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../common/tests/fixtures/certs/ca.crt"
    ))
    .unwrap();
    let ca = k8slb_common::routes::CaId::of(&pem);
    routes.ca_bundles.insert(ca.clone(), pem);
    // The shares go to a backend of their own, reached over TLS.
    let mirror: BackendId = "default/mirror-tls:8443".parse().unwrap();
    routes.backends.insert(
        mirror.clone(),
        BackendState {
            endpoints: vec![Endpoint {
                ip: "fd00:244::2".parse().unwrap(),
                port: 8443,
                draining: false,
            }],
            stickiness: None,
            protocol: Default::default(),
            tls: Some(k8slb_common::routes::BackendTls {
                server_name: "api.internal".parse().unwrap(),
                ca,
            }),
        },
    );
    let a: BackendId = "default/nginx-service:80".parse().unwrap();
    let share = |h: u16| MirrorShare::try_from(h).unwrap();
    let rule = routes.listeners[0].virtual_hosts[0]
        .rules
        .iter_mut()
        .find(|r| matches!(r.action, RouteAction::Forward { .. }))
        .unwrap();
    rule.filters.mirrors = vec![a];
    rule.filters.partial_mirrors = vec![
        PartialMirror {
            backend: mirror.clone(),
            share: share(2000),
        },
        PartialMirror {
            backend: mirror,
            share: share(3333),
        },
    ];
    routes
}

/// A mirror of a share of the requests is its own internal location, which sends the
/// copy only for the requests its `split_clients` draws (on `m$request_id`, apart from
/// the weighted split's draw), and answers the others itself; a full mirror's location
/// sends every copy; a copy to a backend reached over TLS goes over verified TLS (never
/// in cleartext to its TLS port); each copy gets the admin's proxy lines (its `Host`).
#[test]
fn a_mirror_share_sends_copies_only_for_the_requests_it_draws() {
    let r = HttpRenderer::embedded().unwrap();
    let state = base_state();
    let text = r.nginx(&mirrored_routes(), &options(&state)).unwrap().text;
    for want in [
        "split_clients \"m${request_id}\" $k8slb_mirror_2000 {\n    20.00% 1;\n    * \"\";\n  }",
        "split_clients \"m${request_id}\" $k8slb_mirror_3333 {\n    33.33% 1;\n    * \"\";\n  }",
        "split_clients \"${request_id}\" $k8slb_split_",
        "mirror /_k8slb_mirror/rtb_default_nginx-service_80;",
        "mirror /_k8slb_mirror/rtb_default_mirror-tls_8443/2000;",
        "mirror /_k8slb_mirror/rtb_default_mirror-tls_8443/3333;",
        // The admin's proxy lines, as the routes' locations have them (the Host).
        "location = /_k8slb_mirror/rtb_default_mirror-tls_8443/2000 {\n      internal;\n      if ($k8slb_mirror_2000 = \"\") { return 204; }\n      proxy_set_header Host $host;\n",
        "proxy_set_header K8slb-Client-Cert \"\";\n      proxy_ssl_server_name on;\n      proxy_ssl_name api.internal;\n      proxy_ssl_verify on;\n      proxy_ssl_verify_depth 8;\n      proxy_ssl_trusted_certificate ",
        "proxy_pass https://rtb_default_mirror-tls_8443$request_uri;\n    }",
        "location = /_k8slb_mirror/rtb_default_nginx-service_80 {\n      internal;\n      proxy_set_header Host $host;\n",
        // A client's copy of the client certificate headers is not copied either.
        "proxy_next_upstream error timeout;\n      proxy_set_header K8slb-Client-Cert-Verify \"\";\n      proxy_set_header K8slb-Client-Cert \"\";\n      proxy_pass http://rtb_default_nginx-service_80$request_uri;\n    }",
    ] {
        assert!(text.contains(want), "{want}\nnot in:\n{text}");
    }
}

#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn mirror_shares_pass_the_daemons_own_checks() {
    daemon_checks(&mirrored_routes());
}

/// The routes of the `model-only` case, built by hand.
fn model_only_routes() -> HttpRoutes {
    let a: BackendId = "default/nginx-service:80".parse().unwrap();
    let b: BackendId = "default/nginx-service1:8080".parse().unwrap();
    let ep = |ip: &str, port| Endpoint {
        ip: ip.parse().unwrap(),
        port,
        draining: false,
    };
    let rule = |m: PathMatch, action| RouteRule {
        matches: RouteMatch::on_path(m),
        action,
        filters: Default::default(),
        owner: None,
    };
    HttpRoutes {
        listeners: vec![Listener {
            ip: "fd00:18::10".parse().unwrap(),
            port: 80,
            protocol: ListenerProtocol::Http,
            tls: None,
            virtual_hosts: vec![VirtualHost {
                host: Some("split.example.com".parse().unwrap()),
                any_depth: false,
                rules: vec![
                    rule(
                        PathMatch::Exact("/old".parse().unwrap()),
                        RouteAction::Redirect(Redirect {
                            scheme: Some(Scheme::Https),
                            host: Some("new.example.com".parse().unwrap()),
                            port: Some(8443),
                            path: Some("/new".parse().unwrap()),
                            replace_prefix: None,
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
                                WeightedBackend {
                                    id: a.clone(),
                                    weight: 90,
                                    request_headers: Default::default(),
                                    client_certificate: None,
                                },
                                WeightedBackend {
                                    id: b.clone(),
                                    weight: 10,
                                    request_headers: Default::default(),
                                    client_certificate: None,
                                },
                            ],
                            invalid: 0,
                        },
                    ),
                ],
            }],
            default_action: None,
            default_owner: None,
        }],
        backends: [
            (
                a,
                BackendState {
                    endpoints: vec![ep("fd00:244::1", 80)],
                    stickiness: None,
                    protocol: Default::default(),
                    tls: None,
                },
            ),
            (
                b,
                BackendState {
                    endpoints: vec![],
                    stickiness: None,
                    protocol: Default::default(),
                    tls: None,
                },
            ),
        ]
        .into_iter()
        .collect(),
        ..HttpRoutes::default()
    }
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
    assert_eq!(
        s2[0].as_deref(),
        Some("10.244.9.9:80"),
        "the new one takes the freed slot"
    );
}

// ---------------------------------------------------------------------------------------
// Real traffic: the rendered routes, run by the real HAProxy and nginx in a network
// namespace, answer every request as the model's reference router says.

/// What a request got: `200 <service>` (the endpoint answers with its Service's name),
/// `<code> <location>` for a redirect, `<code>` otherwise; plus the certificate's CN for
/// HTTPS.
fn expected(routes: &HttpRoutes, port: u16, https: bool, host: &str, path: &str) -> String {
    // Routed on the path alone; a query in `path` stays in a redirect's Location.
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    expected_with(routes, port, https, &Request::get(host, path), query)
}

/// [`expected`] for a whole request.
fn expected_for(routes: &HttpRoutes, port: u16, https: bool, req: &Request<'_>) -> String {
    expected_with(routes, port, https, req, "")
}

/// [`expected_for`], `raw_query` being the request's query when `req.query` is empty.
fn expected_with(
    routes: &HttpRoutes,
    port: u16,
    https: bool,
    req: &Request<'_>,
    raw_query: &str,
) -> String {
    let (host, path) = (req.host, req.path);
    let l = routes
        .listeners
        .iter()
        .find(|l| l.port == port)
        .expect("a listener on the port");
    let got = match l.route_request(req) {
        None => "404".to_string(),
        Some(RouteAction::Respond { status }) => status.code().to_string(),
        Some(RouteAction::Redirect(rd)) => {
            let query: Vec<String> = req.query.iter().map(|(n, v)| format!("{n}={v}")).collect();
            let q = if query.is_empty() {
                raw_query.to_string()
            } else {
                query.join("&")
            };
            let scheme = match l.protocol {
                ListenerProtocol::Https => Scheme::Https,
                ListenerProtocol::Http => Scheme::Http,
            };
            format!(
                "{} {}",
                rd.status.code(),
                rd.location(scheme, port, host, path, &q)
            )
        }
        Some(RouteAction::Forward { backends, .. }) => {
            let be = &routes.backends[&backends[0].id];
            if be.endpoints.iter().any(|e| !e.draining) {
                format!("200 {}", backends[0].id.service.name)
            } else {
                "5xx".into() // no endpoint: HAProxy says 503, nginx 502
            }
        }
    };
    match l.tls.as_ref().filter(|_| https) {
        Some(t) => format!("{got} cn={}", t.certificate_for(host).unwrap().stem()),
        None => got,
    }
}

/// `curl` from inside the namespace, in the shape of [`expected`].
fn request(ns: &support::Netns, port: u16, https: bool, host: &str, path: &str) -> String {
    request_for(ns, port, https, &Request::get(host, path))
}

/// [`request`] for a whole request (method, headers, query).
fn request_for(ns: &support::Netns, port: u16, https: bool, req: &Request<'_>) -> String {
    let (host, path) = (req.host, req.path);
    let scheme = if https { "https" } else { "http" };
    let query: Vec<String> = req.query.iter().map(|(n, v)| format!("{n}={v}")).collect();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    let mut cmd = ns.cmd("curl");
    cmd.args([
        "-sv",
        "-k",
        "--max-time",
        "5",
        "-w",
        "\n%{http_code} %{redirect_url}",
        "-X",
        req.method,
    ]);
    for (n, v) in req.headers {
        cmd.arg("-H").arg(format!("{n}: {v}"));
    }
    let out = cmd
        .arg("--resolve")
        .arg(format!("{host}:{port}:{VIP}"))
        .arg(format!("{scheme}://{host}:{port}{path}{query}"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (body, last) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    let (code, location) = last.split_once(' ').unwrap_or((last, ""));
    let got = match code {
        "200" => format!("200 {}", body.trim()),
        // No endpoint: nginx's 502, HAProxy's own 503 page (a rule's `return` has no body).
        "502" => "5xx".into(),
        "503" if body.contains("No server is available") => "5xx".into(),
        c if c.starts_with('3') => format!("{c} {location}"),
        c => c.to_string(),
    };
    if https {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let cn = stderr
            .lines()
            .find_map(|l| {
                l.split_once("subject: CN=")
                    .map(|(_, cn)| cn.trim().to_string())
            })
            .unwrap_or_default();
        format!("{got} cn={cn}")
    } else {
        got
    }
}

/// Endpoint stand-ins: every endpoint address of `routes` on `lo`, answered by the proxy
/// itself with its Service's name.
fn endpoints(routes: &HttpRoutes) -> Vec<(SocketAddr, String)> {
    let mut out = Vec::new();
    for (id, be) in &routes.backends {
        for e in &be.endpoints {
            out.push((SocketAddr::new(e.ip, e.port), id.service.name.to_string()));
        }
    }
    out
}

/// Waits until the proxy answers on `l` (over TLS, any certificate, for HTTPS).
fn wait_for(ns: &support::Netns, l: &Listener) {
    let (port, scheme) = match l.protocol {
        ListenerProtocol::Http => (l.port, "http"),
        ListenerProtocol::Https => (l.port, "https"),
    };
    let ok = support::wait_until(std::time::Duration::from_secs(10), || {
        ns.cmd("curl")
            .args(["-s", "-k", "-o", "/dev/null", "--max-time", "1"])
            .arg(format!("{scheme}://{VIP}:{port}/"))
            .status()
            .is_ok_and(|s| s.success())
    });
    assert!(ok, "the proxy did not answer on {VIP}:{port}");
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

type Req = (u16, bool, &'static str, &'static str);

/// The options the real-traffic tests render with: certificates and route files in `dir`.
fn traffic_options(dir: &Path) -> HttpRenderOptions {
    let certs = certs(dir);
    let mut o = HttpRenderOptions {
        pool_cert_dir: certs.clone(),
        secret_cert_dir: certs,
        files_dir: dir.to_path_buf(),
        hop_dir: dir.join("hop"),
        ..HttpRenderOptions::default()
    };
    o.nginx_proxy = vec!["proxy_set_header Host $host;".parse().unwrap()];
    o
}

/// Runs `proxy` ("haproxy" or "nginx") with `routes` in a new network namespace that has
/// the VIP and every endpoint on its loopback (each endpoint answers its Service's name),
/// and waits until it answers on the first listener.
fn serve(
    proxy: &str,
    routes: &HttpRoutes,
    o: &HttpRenderOptions,
    dir: &Path,
) -> (support::Netns, Killed) {
    serve_as(proxy, routes, o, dir, false)
}

/// [`serve`]; with `echo`, each endpoint answers `<service> <path> a=<x-a> b=<x-b>
/// c=<x-c> host=<host>` (what it received) with the response header
/// `x-resp: from-backend`.
fn serve_as(
    proxy: &str,
    routes: &HttpRoutes,
    o: &HttpRenderOptions,
    dir: &Path,
    echo: bool,
) -> (support::Netns, Killed) {
    let ns = support::Netns::new("k8slbrt");
    let child = serve_in(&ns, proxy, routes, o, dir, Some(echo));
    (ns, child)
}

/// Runs `proxy` as [`serve_as`] does in `ns`; with `echo: None`, nothing is put on the
/// endpoint addresses: the test's own backends are there.
fn serve_in(
    ns: &support::Netns,
    proxy: &str,
    routes: &HttpRoutes,
    o: &HttpRenderOptions,
    dir: &Path,
    echo: Option<bool>,
) -> Killed {
    let r = HttpRenderer::embedded().unwrap();
    let eps = if echo.is_some() {
        endpoints(routes)
    } else {
        vec![]
    };
    let echo = echo.unwrap_or(false);
    // The internal hops' sockets (HAProxy: conditional hosts, RequestMirror).
    k8slb_actor::daemons::make_private_dir(&o.hop_dir).unwrap();
    ns.ip(&format!("addr add {VIP}/32 dev lo"));
    for (a, _) in &eps {
        ns.ip(&format!("addr add {}/32 dev lo", a.ip()));
    }
    let child = if proxy == "haproxy" {
        let hp = r.haproxy(routes, o, &[]).unwrap();
        for (f, t) in &hp.files {
            std::fs::write(f, t).unwrap();
        }
        let mut cfg = format!(
            "global\n  log stderr format short local0 err\n  stats socket {}/rt.sock level admin\n  expose-experimental-directives\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 5s\n  timeout server 5s\n",
            dir.display()
        );
        for (a, name) in &eps {
            let slug = a.to_string().replace(['.', ':'], "_");
            let answer = if echo {
                format!("lf-string \"{name} %[path] a=%[req.hdr(x-a)] b=%[req.hdr(x-b)] c=%[req.hdr(x-c)] host=%[req.hdr(host)]\" hdr x-resp from-backend")
            } else {
                format!("string {name}")
            };
            cfg.push_str(&format!(
                "\nfrontend ep_{slug}\n  bind {a}\n  http-request return status 200 content-type text/plain {answer}\n"
            ));
        }
        cfg.push_str(&hp.text);
        let file = dir.join("haproxy.cfg");
        std::fs::write(&file, &cfg).unwrap();
        Killed(
            ns.cmd("haproxy")
                .arg("-db")
                .arg("-f")
                .arg(&file)
                .spawn()
                .unwrap(),
        )
    } else {
        let nx = r.nginx(routes, o).unwrap();
        for (f, t) in &nx.files {
            std::fs::write(f, t).unwrap();
        }
        let d = dir.display();
        let mut cfg = format!(
            "pid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n  access_log off;\n"
        );
        // What nginx.conf.tera writes first in every http block.
        for l in k8slb_actor::render::nx_http_base(&o.nginx_http) {
            cfg.push_str(&format!("  {l}\n"));
        }
        for (a, name) in &eps {
            let answer = if echo {
                format!("add_header x-resp from-backend; return 200 \"{name} $uri a=$http_x_a b=$http_x_b c=$http_x_c host=$http_host\";")
            } else {
                format!("return 200 \"{name}\";")
            };
            cfg.push_str(&format!(
                "  server {{ listen {a}; location / {{ {answer} }} }}\n"
            ));
        }
        cfg.push_str(&nx.text);
        cfg.push_str("\n}\n");
        let file = dir.join("nginx.conf");
        std::fs::write(&file, &cfg).unwrap();
        Killed(
            ns.cmd("nginx")
                .args(["-g", "daemon off;", "-p"])
                .arg(dir)
                .arg("-c")
                .arg(&file)
                .spawn()
                .unwrap(),
        )
    };
    wait_for(ns, &routes.listeners[0]);
    child
}

fn traffic(fixture: &str, requests: &[Req]) {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let routes = routes_of(fixture);
    let want: Vec<String> = requests
        .iter()
        .map(|&(p, s, h, path)| expected(&routes, p, s, h, path))
        .collect();
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rttraffic")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let (ns, _child) = serve(proxy, &routes, &o, dir.path());
        let got: Vec<String> = requests
            .iter()
            .map(|&(p, s, h, path)| request(&ns, p, s, h, path))
            .collect();
        for (i, req) in requests.iter().enumerate() {
            assert_eq!(got[i], want[i], "{proxy}: request {req:?}");
        }
    }
}

/// A 90/10 split between two Services, measured over 1,000 requests through each proxy
/// (HAProxy: a random draw per request; nginx: `split_clients` on `$request_id`). With
/// p = 0.9 the count of the first is 900 ± 9.5 (one standard deviation): 850..=950 holds
/// unless something is wrong (5 sigma).
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_split_traffic_by_weight() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let routes = split_routes(90, 10);
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtsplit")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let (ns, _child) = serve(proxy, &routes, &o, dir.path());
        let heavy = count_heavy(&ns, proxy);
        assert!(
            (850..=950).contains(&heavy),
            "{proxy}: {heavy} of 1000 went to the 90% backend"
        );
        println!(
            "{proxy}: 90/10 split over 1000 requests: {heavy} / {}",
            1000 - heavy
        );
        if proxy == "haproxy" {
            // 90/10 -> 10/90 as the actor does it: the Runtime API's `set map`, no reload.
            let new = split_routes(10, 90);
            let splits =
                k8slb_actor::render::SplitsMap::of_listener(&new.listeners[0], &o).unwrap();
            let cmds: Vec<String> = splits
                .entries
                .into_iter()
                .map(|(key, value)| {
                    k8slb_actor::render::RuntimeCommand::SetMap {
                        map: splits.path.clone(),
                        key,
                        value,
                    }
                    .to_cli()
                })
                .collect();
            k8slb_actor::haproxy_rt::apply_commands(&dir.path().join("rt.sock"), &cmds)
                .expect("HAProxy takes the new shares");
            let heavy = count_heavy(&ns, proxy);
            assert!(
                (50..=150).contains(&heavy),
                "{proxy}: after set map, {heavy} of 1000 went to the now 10% backend"
            );
            println!(
                "{proxy}: 10/90 after set map, no reload: {heavy} / {}",
                1000 - heavy
            );
        }
    }
}

/// The Gateway API: a rule with a valid backend (weight 1) and invalid references (weight
/// 1 in all) answers 500 to the invalid share of its requests only, through both proxies
/// (1,000 requests; p = 0.5 gives 500 ± 16: 420..=580 is 5 sigma). HAProxy draws the
/// share from its splits map; nginx from a `split_clients` value that returns 500.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_answer_500_to_the_invalid_references_share_only() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let mut routes = split_routes(1, 1);
    if let RouteAction::Forward { backends, invalid } =
        &mut routes.listeners[0].virtual_hosts[0].rules[0].action
    {
        backends.truncate(1);
        *invalid = 1;
    }
    routes
        .backends
        .retain(|id, _| id.service.name.as_str() == "heavy");
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtinvalid")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let (ns, _child) = serve(proxy, &routes, &o, dir.path());
        let url = "http://split.example.com/x".to_string();
        let out = ns
            .cmd("curl")
            .args(["-s", "--max-time", "60", "-w", "\n%{http_code}\n"])
            .arg("--resolve")
            .arg(format!("split.example.com:80:{VIP}"))
            .args(std::iter::repeat_n(&url, 1000))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let ok = text.lines().filter(|l| *l == "200").count();
        let errors = text.lines().filter(|l| *l == "500").count();
        assert_eq!(ok + errors, 1000, "{proxy}: only 200 and 500: {text:.300}");
        assert!(
            (420..=580).contains(&errors),
            "{proxy}: {errors} of 1000 got 500"
        );
        println!("{proxy}: valid/invalid 1/1 over 1000 requests: {ok} x 200, {errors} x 500");
    }
}

/// Of 1,000 requests to split.example.com, how many `heavy` answered (all answered).
fn count_heavy(ns: &support::Netns, proxy: &str) -> usize {
    let url = "http://split.example.com/x".to_string();
    let out = ns
        .cmd("curl")
        .args(["-s", "--max-time", "60", "-w", "\n", "--resolve"])
        .arg(format!("split.example.com:80:{VIP}"))
        .args(std::iter::repeat_n(&url, 1000))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let heavy = text.lines().filter(|l| *l == "heavy").count();
    let light = text.lines().filter(|l| *l == "light").count();
    assert_eq!(
        heavy + light,
        1000,
        "{proxy}: every request answered: {text:.300}"
    );
    heavy
}

/// split.example.com split between Services `heavy` and `light` by these weights.
fn split_routes(heavy: u16, light: u16) -> HttpRoutes {
    let a: BackendId = "default/heavy:80".parse().unwrap();
    let b: BackendId = "default/light:80".parse().unwrap();
    let state = |ip: &str| BackendState {
        endpoints: vec![Endpoint {
            ip: ip.parse().unwrap(),
            port: 8080,
            draining: false,
        }],
        stickiness: None,
        protocol: Default::default(),
        tls: None,
    };
    HttpRoutes {
        listeners: vec![Listener {
            ip: VIP.parse().unwrap(),
            port: 80,
            protocol: ListenerProtocol::Http,
            tls: None,
            virtual_hosts: vec![VirtualHost {
                host: Some("split.example.com".parse().unwrap()),
                any_depth: false,
                rules: vec![RouteRule {
                    matches: RouteMatch::on_path(PathMatch::Prefix("/".parse().unwrap())),
                    action: RouteAction::Forward {
                        backends: vec![
                            WeightedBackend {
                                id: a.clone(),
                                weight: heavy,
                                request_headers: Default::default(),
                                client_certificate: None,
                            },
                            WeightedBackend {
                                id: b.clone(),
                                weight: light,
                                request_headers: Default::default(),
                                client_certificate: None,
                            },
                        ],
                        invalid: 0,
                    },
                    filters: Default::default(),
                    owner: None,
                }],
            }],
            default_action: None,
            default_owner: None,
        }],
        backends: [(a, state("198.18.5.1")), (b, state("198.18.5.2"))]
            .into_iter()
            .collect(),
        ..HttpRoutes::default()
    }
}

/// A change of a split's weights is a `set map` for HAProxy (the splits map's changed
/// entries, nothing else) and a reload for nginx; a single backend going to weight 0
/// (a 500) and a new backend in a split are structural.
#[test]
fn a_change_of_split_weights_is_a_set_map_for_haproxy_and_a_reload_for_nginx() {
    use k8slb_actor::render::{is_structural, runtime_diff, Config, RuntimeCommand};
    let views = |proxy, a: HttpRoutes, b: HttpRoutes| {
        let mut sa = base_state();
        sa.http = a;
        let mut sb = sa.clone();
        sb.http = b;
        let mut vo = ViewOptions::new(proxy);
        vo.interfaces
            .insert("default".parse().unwrap(), "eth0".parse().unwrap());
        let node = "lb-1".parse().unwrap();
        (
            view(&sa, &node, &vo).unwrap(),
            view(&sb, &node, &vo).unwrap(),
        )
    };
    let (a, b) = views(
        Provider::Haproxy,
        split_routes(90, 10),
        split_routes(10, 90),
    );
    assert!(!is_structural(Config::Proxy, &a, &b));
    let cmds = runtime_diff(&a, &b).expect("a Runtime API change");
    let lines: Vec<String> = cmds.iter().map(RuntimeCommand::to_cli).collect();
    assert_eq!(
        lines,
        ["set map /run/k8slb/routes/rtf_198_18_0_10_80.splits.map r1_0_b0 1000"],
        "the second share stays 10000"
    );
    // All to one side and back: still the map.
    let (a, b) = views(Provider::Haproxy, split_routes(90, 10), split_routes(0, 1));
    assert!(!is_structural(Config::Proxy, &a, &b));
    assert_eq!(runtime_diff(&a, &b).unwrap().len(), 1);
    let (a, b) = views(Provider::Nginx, split_routes(90, 10), split_routes(10, 90));
    assert!(is_structural(Config::Proxy, &a, &b), "nginx reloads");
    // One backend from weight 1 to 0 (500): structural.
    let one = |w: u16| {
        let mut r = split_routes(1, 1);
        if let RouteAction::Forward { backends, .. } =
            &mut r.listeners[0].virtual_hosts[0].rules[0].action
        {
            backends.truncate(1);
            backends[0].weight = w;
        }
        r
    };
    let (a, b) = views(Provider::Haproxy, one(1), one(0));
    assert!(is_structural(Config::Proxy, &a, &b));
    let (a, b) = views(Provider::Haproxy, one(1), one(5));
    assert!(
        !is_structural(Config::Proxy, &a, &b),
        "one backend: its weight is moot"
    );
}

#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_route_precedence_as_the_model_says() {
    traffic(
        "precedence",
        &[
            (80, false, "shop.example.com", "/"),
            (80, false, "shop.example.com", "/api"),
            (80, false, "shop.example.com", "/api/"),
            (80, false, "shop.example.com", "/api/v1"),
            (80, false, "shop.example.com", "/api/v1/x"),
            (80, false, "shop.example.com", "/api/v1x"),
            (80, false, "shop.example.com", "/gone/x"),
            (80, false, "cdn.example.com", "/static/a.css"),
            (80, false, "cdn.example.com", "/staticx"),
            (80, false, "a.cdn.example.com", "/health"),
            (80, false, "other.org", "/health"),
            (80, false, "other.org", "/health/"),
        ],
    );
}

/// The Gateway API's listener isolation through the real HAProxy and nginx: a request
/// reaches only the routes of the most specific listener it matches (a listener's
/// hostname without a route answers 404, never a less specific listener's route).
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_isolate_listeners_by_their_hostnames() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let routes = gateway_routes_of("isolation");
    let cases: &[(&str, &str, &str)] = &[
        ("bar.com", "/empty", "200 nginx-service"),
        ("bar.com", "/wild", "404"),
        ("x.example.com", "/wild", "200 nginx-service1"),
        ("x.example.com", "/empty", "404"),
        ("x.foo.example.com", "/wild-foo", "200 nginx-service"),
        ("x.foo.example.com", "/wild", "404"),
        ("abc.foo.example.com", "/abc-foo", "200 nginx-service1"),
        ("abc.foo.example.com", "/empty", "404"),
        ("x.bar.example.com", "/wild", "404"),
        ("x.bar.example.com", "/", "404"),
    ];
    for (host, path, want) in cases {
        assert_eq!(
            &expected(&routes, 80, false, host, path),
            want,
            "model: {host}{path}"
        );
    }
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtisol")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let (ns, _child) = serve(proxy, &routes, &o, dir.path());
        for (host, path, want) in cases {
            assert_eq!(
                &request(&ns, 80, false, host, path),
                want,
                "{proxy}: {host}{path}"
            );
        }
    }
}

/// Requests with methods, headers and query strings through the real HAProxy and nginx
/// answer as the reference router says (and the test's expectations pin a few of them,
/// so a router that ignored the conditions would fail too).
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_route_method_header_and_query_matches_as_the_model_says() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let routes = gateway_routes_of("conditions");
    let app = "app.example.com";
    let canary: &[(&str, &str)] = &[("X-Env", "canary")];
    let both: &[(&str, &str)] = &[("x-env", "canary"), ("X-User", "id:7 (beta)")];
    let r = |method, host, path, headers, query| Request {
        host,
        path,
        method,
        headers,
        query,
    };
    let requests: Vec<(Request<'_>, Option<&str>)> = vec![
        (
            r("GET", app, "/api", canary, &[]),
            Some("200 nginx-service1"),
        ),
        (r("GET", app, "/api/x", both, &[]), Some("200 api")),
        (r("POST", app, "/api/x", canary, &[]), Some("200 api")),
        (
            r("GET", app, "/api", &[("x-env", "Canary")], &[]),
            Some("200 nginx-service"),
        ),
        (
            r("GET", app, "/api", &[], &[("v", "2")]),
            Some("200 nginx-service1"),
        ),
        (
            r("GET", app, "/api", &[], &[("v", "1"), ("v", "2")]),
            Some("200 nginx-service"),
        ),
        (r("GET", app, "/api/y", &[("x-move", "-now")], &[]), None),
        (
            r("GET", app, "/apix", canary, &[]),
            Some("200 nginx-service"),
        ),
        (
            r("GET", app, "/login", &[], &[("sso", "on")]),
            Some("200 api"),
        ),
        (
            r("POST", app, "/login", &[], &[("sso", "on")]),
            Some("200 nginx-service"),
        ),
        (
            r("GET", app, "/login/x", &[], &[("sso", "on")]),
            Some("200 nginx-service"),
        ),
        (r("GET", app, "/", canary, &[]), Some("200 nginx-service")),
        (
            r("GET", "plain.example.com", "/api/z", canary, &[]),
            Some("200 api"),
        ),
        (
            r("GET", "plain.example.com", "/other", &[], &[]),
            Some("404"),
        ),
        (
            r("GET", "cond.example.com", "/x", &[("x-team", "a")], &[]),
            Some("200 nginx-service"),
        ),
        (
            r("GET", "cond.example.com", "/x", &[("x-team", "b")], &[]),
            Some("404"),
        ),
        // Wildcards of any depth, the longest suffix first.
        (
            r("GET", "x.example.org", "/", &[], &[]),
            Some("200 nginx-service"),
        ),
        (
            r("GET", "x.y.example.org", "/", &[], &[]),
            Some("200 nginx-service"),
        ),
        (r("GET", "x.b.example.org", "/", &[], &[]), Some("200 api")),
        (
            r("GET", "z.x.b.example.org", "/", &[], &[]),
            Some("200 api"),
        ),
        (r("GET", "example.org", "/", &[], &[]), Some("404")),
        // The first occurrence of a header counts.
        (
            r(
                "GET",
                app,
                "/api",
                &[("x-env", "x"), ("x-env", "canary")],
                &[],
            ),
            Some("200 nginx-service"),
        ),
    ];
    let want: Vec<String> = requests
        .iter()
        .map(|(req, _)| expected_for(&routes, 80, false, req))
        .collect();
    for ((req, pinned), want) in requests.iter().zip(&want) {
        if let Some(p) = pinned {
            assert_eq!(want, p, "the model: {req:?}");
        }
    }
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtcond")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let (ns, _child) = serve(proxy, &routes, &o, dir.path());
        for ((req, _), want) in requests.iter().zip(&want) {
            assert_eq!(&request_for(&ns, 80, false, req), want, "{proxy}: {req:?}");
        }
    }
}

/// `curl -i` through the VIP with `headers`: `<status> <body>` and the response's
/// `x-resp` and `x-extra` headers (comma-joined when repeated), as `resp=<..> extra=<..>`.
fn echo_request(ns: &support::Netns, host: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut cmd = ns.cmd("curl");
    cmd.args(["-s", "-i", "--max-time", "5"]);
    for (n, v) in headers {
        cmd.arg("-H").arg(format!("{n}: {v}"));
    }
    let out = cmd
        .arg("--resolve")
        .arg(format!("{host}:80:{VIP}"))
        .arg(format!("http://{host}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).unwrap_or("none");
    let header = |name: &str| {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "{status} {} resp={} extra={}",
        body.trim(),
        header("x-resp"),
        header("x-extra")
    )
}

/// HTTPRoute filters through the real HAProxy and nginx: request headers set, added and
/// removed, response headers set, removed and added, paths rewritten (a prefix, a
/// prefix to `/`, the full path) and the Host rewritten; on a host whose rules match on
/// a header, only the rule a request gets applies its filters.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_apply_header_modifiers_and_url_rewrites() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let routes = gateway_routes_of("filters");
    let f = "f.example.com";
    let c = "c.example.com";
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case<'_>] = &[
        (
            f,
            "/set/x",
            &[("x-a", "orig"), ("x-c", "gone")],
            "200 nginx-service /set/x a=one two b=added c= host=f.example.com resp=changed extra=",
        ),
        (
            f,
            "/old/page",
            &[],
            "200 nginx-service /new/page a= b= c= host=f.example.com resp=from-backend extra=",
        ),
        (
            f,
            "/old",
            &[],
            "200 nginx-service /new a= b= c= host=f.example.com resp=from-backend extra=",
        ),
        (
            f,
            "/strip/a/b",
            &[],
            "200 nginx-service /a/b a= b= c= host=f.example.com resp=from-backend extra=",
        ),
        (
            f,
            "/strip",
            &[],
            "200 nginx-service / a= b= c= host=f.example.com resp=from-backend extra=",
        ),
        (
            f,
            "/full",
            &[],
            "200 nginx-service /replaced a= b= c= host=rewritten.example.com resp=from-backend extra=",
        ),
        (
            f,
            "/other",
            &[("x-a", "kept")],
            "200 nginx-service /other a=kept b= c= host=f.example.com resp= extra=",
        ),
        (
            c,
            "/x",
            &[("x-team", "a"), ("x-a", "orig")],
            "200 nginx-service /team-a/x a=team-a b= c= host=c.example.com resp=from-backend extra=yes",
        ),
        (
            c,
            "/x",
            &[("x-team", "b"), ("x-a", "orig")],
            "200 nginx-service /x a=orig b= c= host=c.example.com resp=from-backend extra=",
        ),
    ];
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtfilters")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let (ns, _child) = serve_as(proxy, &routes, &o, dir.path(), true);
        for (host, path, headers, want) in cases {
            assert_eq!(
                echo_request(&ns, host, path, headers),
                *want,
                "{proxy}: {host}{path} {headers:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_route_the_rancher_examples_as_the_model_says() {
    traffic(
        "rancher-examples",
        &[
            (99, false, "foo.bar.com", "/foo"),
            (99, false, "foo.bar.com", "/foo/x"),
            (99, false, "foo.bar.com", "/bar"),
            (80, false, "foo.bar.com", "/foo/x"),
            (80, false, "bar.foo.com", "/bar/baz"),
            (80, false, "bar.foo.com", "/barbaz"),
            (80, false, "host.only.com", "/anything"),
            (80, false, "unknown.com", "/"),
        ],
    );
}

/// The Gateway API's redirect rules through both proxies, against the model's
/// [`k8slb_common::routes::Redirect::location`] and the Locations the specification's
/// own examples give.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_redirect_with_the_gateway_apis_port_scheme_and_path_rules() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let routes = gateway_routes_of("redirects");
    let r = "r.example.com";
    let cases: &[(u16, &str, &str)] = &[
        (80, "/host-only/x", "302 http://example.org/host-only/x"),
        (
            8080,
            "/host-only/x",
            "302 http://example.org:8080/host-only/x",
        ),
        (8080, "/port-80", "302 http://example.org/port-80"),
        (
            80,
            "/port-8083?a=b",
            "301 http://r.example.com:8083/port-8083?a=b",
        ),
        (8080, "/https", "302 https://r.example.com/https"),
        (80, "/https-443", "302 https://r.example.com/https-443"),
        (
            8080,
            "/https-8443",
            "302 https://r.example.com:8443/https-8443",
        ),
        (
            80,
            "/full/deep?q=1",
            "302 http://r.example.com/replaced?q=1",
        ),
        (80, "/prefix", "302 http://r.example.com/replacement"),
        (
            80,
            "/prefix/a/b?q=1&r=2",
            "302 http://r.example.com/replacement/a/b?q=1&r=2",
        ),
        (80, "/strip/a", "302 http://r.example.com/a"),
        (80, "/strip", "302 http://r.example.com/"),
        (80, "/strip?x=y", "302 http://r.example.com/?x=y"),
        (
            8080,
            "/moved/here",
            "302 http://example.net:8080/new/place/here",
        ),
    ];
    // The model says what the specification says.
    for (port, path, want) in cases {
        assert_eq!(
            &expected(&routes, *port, false, r, path),
            want,
            "model: {port} {path}"
        );
    }
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtredirect")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let (ns, _child) = serve(proxy, &routes, &o, dir.path());
        for (port, path, want) in cases {
            assert_eq!(
                &request(&ns, *port, false, r, path),
                want,
                "{proxy}: {port} {path}"
            );
        }
    }
}

#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_serve_tls_by_sni_and_redirect_as_the_model_says() {
    traffic(
        "tls-sni",
        &[
            (80, false, "foo.bar.com", "/x?q=1"),
            (
                80,
                false,
                "foo.bar.com",
                "/.well-known/acme-challenge/token1",
            ),
            // Covered by `/` only: served on HTTP too (never redirected).
            (
                80,
                false,
                "foo.bar.com",
                "/.well-known/acme-challenge/tok-2",
            ),
            (80, false, "a.apps.bar.com", "/.well-known/acme-challenge/x"),
            (80, false, "foo.bar.com", "/.well-known/other"),
            (80, false, "plain.bar.com", "/"),
            (80, false, "a.apps.bar.com", "/y"),
            (443, true, "foo.bar.com", "/"),
            (443, true, "a.apps.bar.com", "/"),
            (443, true, "plain.bar.com", "/"),
            (443, true, "nomatch.org", "/"),
        ],
    );
}

/// A Gateway listener's certificate whose names do not cover its hostname (here `*`,
/// which covers no host) is served for that hostname only: HAProxy's crt-list filters it
/// by the listener's hostname and nginx names it in that hostname's `server` only, so a
/// client asking for another listener's hostname (b.example) gets that listener's
/// certificate, and a name no listener has (c.example) the port's default (the
/// listener without a hostname), never the `*` one. Real HAProxy and nginx, real TLS
/// handshakes (curl), the certificates' subjects told apart by their CN.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_serve_a_listeners_mismatched_certificate_only_for_its_hostname() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let meta = tls_secret;
    let out = gateway_translation(
        "sni",
        &[
            meta("star-tls", &["*"]),
            meta("b-tls", &["b.example"]),
            meta("any-tls", &["any.example"]),
        ],
    );
    let st = out.gateways.values().next().unwrap();
    assert!(
        st.listeners.iter().all(|l| l
            .conditions
            .iter()
            .all(|c| c.status || c.type_.as_str() == "Conflicted")),
        "{:?}",
        st.listeners
    );
    assert_eq!(st.warnings.len(), 1, "{:?}", st.warnings);
    let routes = out.routes;
    let cases: &[(&str, &str)] = &[
        ("a.example", "200 nginx-service cn=default_star-tls"),
        ("b.example", "200 nginx-service1 cn=default_b-tls"),
        ("c.example", "404 cn=default_any-tls"),
    ];
    for (host, want) in cases {
        assert_eq!(
            &expected(&routes, 443, true, host, "/"),
            want,
            "model: {host}"
        );
    }
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtsni")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        // The Secrets' files, each with its name as CN; `*` as the star's only name.
        let certs = dir.path().join("certs");
        self_signed_with(&certs, "default_star-tls", Some("DNS:*"));
        self_signed_with(&certs, "default_b-tls", Some("DNS:b.example"));
        self_signed_with(&certs, "default_any-tls", Some("DNS:any.example"));
        let (ns, _child) = serve(proxy, &routes, &o, dir.path());
        if proxy == "haproxy" {
            let list = std::fs::read_dir(dir.path())
                .unwrap()
                .filter_map(|e| e.ok())
                .find(|e| e.path().extension().is_some_and(|x| x == "crt-list"))
                .map(|e| std::fs::read_to_string(e.path()).unwrap())
                .expect("a crt-list");
            let line = list
                .lines()
                .find(|l| l.contains("default_star-tls"))
                .expect("the star certificate's line");
            assert!(
                line.ends_with(".pem a.example"),
                "filtered by the listener's hostname: {list}"
            );
        }
        for (host, want) in cases {
            assert_eq!(&request(&ns, 443, true, host, "/"), want, "{proxy}: {host}");
        }
    }
}

/// Another tenant's certificate never answers for a hostname a listener of the port
/// names: the listener without a hostname (the port's default) has a certificate that
/// also names `b.example` and `a.example`, the hostnames of the other two listeners.
/// HAProxy would index such a certificate by its own names and serve it for them (the
/// bind's `crt`, or a crt-list line without a filter, taking an exact name before
/// another line's filter); the default is the crt-list's first line, excluding the
/// named hostnames. Real HAProxy and nginx, real TLS handshakes (curl).
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_never_serve_the_default_certificate_for_another_listeners_hostname() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let meta = tls_secret;
    let out = gateway_translation(
        "sni",
        &[
            meta("star-tls", &["a.example"]),
            meta("b-tls", &["b.example"]),
            meta("any-tls", &["any.example", "a.example", "b.example"]),
        ],
    );
    let routes = out.routes;
    let cases: &[(&str, &str)] = &[
        ("a.example", "200 nginx-service cn=default_star-tls"),
        ("b.example", "200 nginx-service1 cn=default_b-tls"),
        ("c.example", "404 cn=default_any-tls"),
    ];
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtdef")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let certs = dir.path().join("certs");
        self_signed_with(&certs, "default_star-tls", Some("DNS:a.example"));
        self_signed_with(&certs, "default_b-tls", Some("DNS:b.example"));
        self_signed_with(
            &certs,
            "default_any-tls",
            Some("DNS:any.example,DNS:a.example,DNS:b.example"),
        );
        let (ns, _child) = serve(proxy, &routes, &o, dir.path());
        for (host, want) in cases {
            assert_eq!(&request(&ns, 443, true, host, "/"), want, "{proxy}: {host}");
        }
    }
}

/// One Ingress whose TLS entry names more hosts than a HAProxy crt-list line holds
/// (2,048 words, 64 KiB): 2,500 short names and 300 of 253 characters (the longest DNS
/// name), each with a rule. HAProxy refused the whole node config (`too many args`),
/// freezing every tenant's changes; the certificate is now listed once per run of hosts.
/// Both proxies accept the config, and serve the certificate by SNI for a host of every
/// run, the first and the last.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_serve_a_certificate_for_more_hosts_than_a_crt_list_line_holds() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let mut hosts: Vec<String> = (0..2500).map(|i| format!("h{i}.many.example")).collect();
    let label = "l".repeat(60);
    hosts.extend((0..300).map(|i| {
        format!(
            "{label}.{label}.{label}.l{i:03}-{}.many.example",
            "l".repeat(52)
        )
    }));
    assert_eq!(hosts[2799].len(), 253);
    let dir = tempfile::Builder::new()
        .prefix("k8slb-rtmany")
        .tempdir()
        .unwrap();
    let yaml = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{namespace: default, name: many, \
         annotations: {{test/dns-names: \"{}\"}}}}\ntype: kubernetes.io/tls\n---\n\
         apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{namespace: default, \
         name: many-hosts, creationTimestamp: \"2026-01-01T00:00:01Z\"}}\nspec:\n  \
         ingressClassName: k8slb\n  tls:\n  - {{hosts: [{}], secretName: many}}\n  rules:\n{}",
        hosts.join(","),
        hosts.join(", "),
        hosts
            .iter()
            .map(|h| format!(
                "  - {{host: {h}, http: {{paths: [{{path: /, pathType: Prefix, \
                 backend: {{service: {{name: nginx-service, port: {{number: 80}}}}}}}}]}}}}\n"
            ))
            .collect::<String>()
    );
    let file = dir.path().join("many.yaml");
    std::fs::write(&file, yaml).unwrap();
    let mut objs = Objects::default();
    read(&mut objs, &fixtures().join("ingress/services.yaml"));
    read(&mut objs, &file);
    let (routes, problems) = ingress_routes(&objs);
    assert_eq!(problems, "", "the Ingress is served whole");
    let probes = [
        &hosts[0],
        &hosts[1999],
        &hosts[2499],
        &hosts[2500],
        &hosts[2799],
    ];
    for proxy in ["haproxy", "nginx"] {
        let pd = dir.path().join(proxy);
        let o = traffic_options(&pd);
        self_signed_with(
            &pd.join("certs"),
            "default_many",
            Some("DNS:*.many.example"),
        );
        let (ns, _child) = serve(proxy, &routes, &o, &pd);
        for host in probes {
            assert_eq!(
                request(&ns, 443, true, host, "/"),
                "200 nginx-service cn=default_many",
                "{proxy}: {host}"
            );
        }
    }
}

/// Gateway API HTTPS listeners sharing a port answer `421` to a request whose Host is
/// another listener's (zone) than the TLS server name its connection was made for
/// (HTTP/2's connection reuse), route it when they agree, and do not check a request
/// without SNI; both proxies offer h2 there. Real HAProxy and nginx, curl over HTTP/2.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_answer_421_to_a_request_for_another_listeners_host_than_its_sni() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let meta = |name: &str| SecretMeta {
        namespace: "default".into(),
        name: name.into(),
        type_: "kubernetes.io/tls".into(),
        valid: true,
        version: "0123456789abcdef".into(),
        refusal: String::new(),
        dns_names: vec!["*.example".into()],
    };
    let out = gateway_translation("sni", &[meta("star-tls"), meta("b-tls"), meta("any-tls")]);
    let routes = out.routes;
    // (server name, Host, answer); None: no SNI (the address itself).
    let cases: &[(Option<&str>, &str, &str)] = &[
        (Some("a.example"), "a.example", "200 nginx-service"),
        (Some("a.example"), "b.example", "421"),
        (Some("b.example"), "a.example", "421"),
        (Some("b.example"), "b.example", "200 nginx-service1"),
        (Some("c.example"), "c.example", "404"),
        (Some("c.example"), "b.example", "421"),
        (Some("a.example"), "c.example", "421"),
        (None, "b.example", "200 nginx-service1"),
    ];
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rt421")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let certs = dir.path().join("certs");
        for n in ["default_star-tls", "default_b-tls", "default_any-tls"] {
            self_signed_with(&certs, n, Some("DNS:*.example"));
        }
        let (ns, _child) = serve(proxy, &routes, &o, dir.path());
        for (sni, host, want) in cases {
            let name = sni.unwrap_or(VIP);
            let out = ns
                .cmd("curl")
                .args(["-s", "-k", "--http2", "--max-time", "5"])
                .args(["-w", "\n%{http_version} %{http_code}"])
                .arg("--resolve")
                .arg(format!("{name}:443:{VIP}"))
                .args(["-H", &format!("Host: {host}")])
                .arg(format!("https://{name}/"))
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let (body, last) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
            let got = match last.split_once(' ') {
                Some(("2", "200")) => format!("200 {}", body.trim()),
                Some(("2", code)) => code.to_string(),
                _ => format!("not HTTP/2: {last}"),
            };
            assert_eq!(&got, want, "{proxy}: SNI {sni:?}, Host {host}");
        }
    }
}

/// CORS through the real HAProxy and nginx: a preflight from an allowed origin is
/// answered `204` by the proxy with the preflight headers (the listed methods and
/// headers, or those asked for under `*`; the max age; the credentials), a request
/// from an allowed origin reaches its backend and its answer gets the origin (itself,
/// never `*`), the credentials and exposed headers; another origin gets none of it (its
/// preflight goes to the backend as any OPTIONS).
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_answer_cors_preflights_and_mark_answers_for_allowed_origins_only() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let routes = gateway_routes_of("cors");
    // (method, path, origin, asked method, asked headers) → status, then the headers
    // that must be there (name, value) and those that must not.
    type Case<'a> = (
        (&'a str, &'a str, &'a str, &'a str, &'a str),
        &'a str,
        Vec<(&'a str, &'a str)>,
        Vec<&'a str>,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            (
                "OPTIONS",
                "/exact",
                "https://www.foo.com",
                "GET",
                "x-header-1",
            ),
            "204",
            vec![
                ("access-control-allow-origin", "https://www.foo.com"),
                ("access-control-allow-methods", "GET, OPTIONS"),
                ("access-control-allow-headers", "x-header-1, x-header-2"),
                ("access-control-max-age", "3600"),
                ("access-control-allow-credentials", "true"),
                ("access-control-expose-headers", "x-header-3"),
            ],
            vec![],
        ),
        (
            ("OPTIONS", "/exact", "https://a.b.bar.com", "GET", ""),
            "204",
            vec![("access-control-allow-origin", "https://a.b.bar.com")],
            vec![],
        ),
        (
            ("GET", "/exact", "https://www.foo.com", "", ""),
            "200 nginx-service",
            vec![
                ("access-control-allow-origin", "https://www.foo.com"),
                ("access-control-allow-credentials", "true"),
                ("access-control-expose-headers", "x-header-3"),
            ],
            vec!["access-control-allow-methods", "access-control-max-age"],
        ),
        (
            (
                "OPTIONS",
                "/exact",
                "https://www.bar.com.evil.com",
                "GET",
                "",
            ),
            "200 nginx-service",
            vec![],
            vec![
                "access-control-allow-origin",
                "access-control-allow-credentials",
            ],
        ),
        (
            ("GET", "/exact", "https://evil.com", "", ""),
            "200 nginx-service",
            vec![],
            vec![
                "access-control-allow-origin",
                "access-control-allow-credentials",
            ],
        ),
        (
            (
                "OPTIONS",
                "/any",
                "https://x.example:8443",
                "PUT",
                "x-a, x-b",
            ),
            "204",
            vec![
                ("access-control-allow-origin", "https://x.example:8443"),
                ("access-control-allow-methods", "PUT"),
                ("access-control-allow-headers", "x-a, x-b"),
                ("access-control-max-age", "5"),
            ],
            vec!["access-control-allow-credentials"],
        ),
        (
            ("PUT", "/any", "https://x.example", "", ""),
            "200 nginx-service1",
            vec![("access-control-allow-origin", "https://x.example")],
            vec!["access-control-allow-credentials"],
        ),
    ];
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtcors")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let (ns, _child) = serve(proxy, &routes, &o, dir.path());
        for ((method, path, origin, asked, headers), status, present, absent) in &cases {
            let mut cmd = ns.cmd("curl");
            cmd.args(["-s", "-i", "--max-time", "5", "-X", method])
                .args(["-H", &format!("Origin: {origin}")])
                .arg("--resolve")
                .arg(format!("cors.example.com:80:{VIP}"));
            if !asked.is_empty() {
                cmd.args(["-H", &format!("Access-Control-Request-Method: {asked}")]);
            }
            if !headers.is_empty() {
                cmd.args(["-H", &format!("Access-Control-Request-Headers: {headers}")]);
            }
            let out = cmd
                .arg(format!("http://cors.example.com{path}"))
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
            let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
            let mut lines = head.lines();
            let code = lines
                .next()
                .and_then(|l| l.split(' ').nth(1))
                .unwrap_or_default()
                .to_string();
            let got: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            let what = format!("{proxy}: {method} {path} from {origin}");
            let answer = if code == "200" {
                format!("200 {}", body.trim())
            } else {
                code
            };
            assert_eq!(&answer, status, "{what}: {head}");
            for (k, v) in present {
                let vals: Vec<&str> = got
                    .iter()
                    .filter(|(n, _)| n == k)
                    .map(|(_, v)| v.as_str())
                    .collect();
                assert_eq!(vals, [*v], "{what}: {k} in {head}");
            }
            for k in absent {
                assert!(got.iter().all(|(n, _)| n != k), "{what}: {k} in {head}");
            }
        }
    }
}

/// The nginx refusal of a host whose conditional rules ask one location for different
/// timeouts is made at plan time: translated for nginx, the newer route is refused
/// (`UnsupportedValue`) and the older one's host renders without a note and is served
/// by the real nginx; translated without the refusal (HAProxy's translation), the
/// nginx render would have had to leave the whole host out (its backstop, a note).
#[test]
#[ignore = "needs root: real nginx in a network namespace; ./scripts/test.sh runs it"]
fn nginx_never_meets_a_conditional_host_it_would_leave_out_the_plan_refuses_its_route() {
    support::require_root_and(&["nginx", "openssl", "curl"]);
    let translate = |mixes: bool| {
        let mut objs = k8slb_common::objects::Objects::default();
        for f in ["ingress/services.yaml", "gateway/one-location.yaml"] {
            objs.add_text(&std::fs::read_to_string(fixtures().join(f)).unwrap())
                .unwrap();
        }
        let addresses = [("default/gw".parse().unwrap(), vec![VIP.parse().unwrap()])]
            .into_iter()
            .collect();
        let none = Default::default();
        let mut input = objs.gateway_input(&[], &addresses, &none);
        input.mixes_conditional_rules = mixes;
        k8slb_common::gateway::translate(&input)
    };
    let accepted = |out: &GatewayOutput, route: &str| {
        out.http_routes[&route.parse().unwrap()][0]
            .conditions
            .iter()
            .find(|c| c.type_.as_str() == "Accepted")
            .map(|c| (c.status, c.reason.as_str()))
    };
    let dir = tempfile::Builder::new()
        .prefix("k8slb-rtoneloc")
        .tempdir()
        .unwrap();
    let o = traffic_options(dir.path());
    let r = HttpRenderer::embedded().unwrap();
    // Without the plan's refusal: the render's backstop leaves the host out.
    let mixed = translate(true);
    assert_eq!(accepted(&mixed, "default/slow"), Some((true, "Accepted")));
    let notes = r.nginx(&mixed.routes, &o).unwrap().notes;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("mix.example.com") && n.contains("not rendered")),
        "{notes:?}"
    );
    // With it: the newer route refused, the host rendered and served.
    let out = translate(false);
    assert_eq!(
        accepted(&out, "default/slow"),
        Some((false, "UnsupportedValue"))
    );
    assert_eq!(accepted(&out, "default/cond"), Some((true, "Accepted")));
    let notes = r.nginx(&out.routes, &o).unwrap().notes;
    assert!(notes.is_empty(), "{notes:?}");
    let (ns, _child) = serve("nginx", &out.routes, &o, dir.path());
    let host = "mix.example.com";
    let one: &[(&str, &str)] = &[("x-v", "one")];
    for (req, want) in [
        (
            Request {
                headers: one,
                ..Request::get(host, "/c")
            },
            "200 nginx-service",
        ),
        (Request::get(host, "/c"), "404"),
        (Request::get(host, "/s"), "404"),
    ] {
        assert_eq!(
            expected_for(&out.routes, 80, false, &req),
            want,
            "model: {req:?}"
        );
        assert_eq!(request_for(&ns, 80, false, &req), want, "nginx: {req:?}");
    }
}

#[test]
fn hostile_hosts_paths_and_annotations_never_reach_a_rendered_file() {
    let routes = routes_of("hostile");
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    let nx = r.nginx(&routes, &o).unwrap();
    let lists: String = hp.files.values().cloned().collect();
    for text in [&hp.text, &nx.text, &lists] {
        for bad in [
            "evil", "owned", "shadow", "lua", ";return", "/a", "$host;\n", "1.2.3.4", ":1\n",
        ] {
            assert!(!text.contains(bad), "{bad:?} reached a config:\n{text}");
        }
    }
    assert!(lists.contains("good.example.com") && nx.text.contains("location ^~ /ok/"));
}

/// The tls-sni routes as the actor's view sees them when only `present` (stem → version)
/// is in its certificate directory.
fn viewed_with_certs(present: &[(&str, &str)]) -> (HttpRoutes, Vec<String>) {
    let mut state = base_state();
    state.http = versioned_tls_sni();
    let v = haproxy_view_with_certs(&state, present);
    (v.http.unwrap().routes, v.notes)
}

/// The HAProxy view of `state` on lb-1 when the node's certificate directory holds the
/// Secret certificates `present` (Secret, version).
fn haproxy_view_with_certs(state: &State, present: &[(&str, &str)]) -> k8slb_actor::view::NodeView {
    let mut vo = ViewOptions::new(Provider::Haproxy);
    vo.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    vo.secret_certs = Some(
        present
            .iter()
            .map(|(s, v)| (s.to_string(), v.to_string()))
            .collect(),
    );
    view(state, &"lb-1".parse().unwrap(), &vo).unwrap()
}

/// The tls-sni routes with a version on each Secret certificate (as the plan gives them
/// from real Secrets).
fn versioned_tls_sni() -> HttpRoutes {
    let mut routes = routes_of("tls-sni");
    set_secret_versions(&mut routes, |_| true, "1111111111111111");
    routes
}

/// Set the version of every Secret certificate of `routes` whose stem `which` accepts.
fn set_secret_versions(routes: &mut HttpRoutes, which: impl Fn(&str) -> bool, to: &str) {
    for l in &mut routes.listeners {
        if let Some(t) = &mut l.tls {
            let files = t
                .certificates
                .iter_mut()
                .map(|c| &mut c.file)
                .chain(t.default_certificate.as_mut());
            for f in files {
                let stem = f.stem();
                if let k8slb_common::routes::CertFile::Secret { version, .. } = f {
                    if which(&stem) {
                        *version = to.into();
                    }
                }
            }
        }
    }
}

fn secret_certs(routes: &HttpRoutes) -> Vec<(String, String)> {
    k8slb_common::certs::used_by_routes(routes)
        .into_iter()
        .map(|f| (f.stem(), f.version().to_string()))
        .collect()
}

/// A certificate the state names that is not on the node (its Secret has not arrived), or
/// not in the version named (a renewal on its way), is left out of its listener with a
/// note; the others stay. Never a config naming a file the proxy cannot load.
#[test]
fn a_certificate_not_on_the_node_in_its_version_is_left_out_with_a_note() {
    let all = secret_certs(&versioned_tls_sni());
    assert!(
        all.len() >= 2,
        "the fixture names two Secret certificates: {all:?}"
    );
    let as_named: Vec<(&str, &str)> = all.iter().map(|(s, v)| (s.as_str(), v.as_str())).collect();
    let (routes, notes) = viewed_with_certs(&as_named);
    assert_eq!(
        secret_certs(&routes),
        all,
        "every certificate present: all kept"
    );
    assert!(
        notes.iter().all(|n| !n.contains("certificate of Secret")),
        "{notes:?}"
    );

    let (first, second) = (&all[0], &all[1]);
    let (routes, notes) = viewed_with_certs(&[(second.0.as_str(), second.1.as_str())]);
    assert_eq!(secret_certs(&routes), std::slice::from_ref(second));
    let missing = notes
        .iter()
        .find(|n| n.contains(&first.0.replacen('_', "/", 1)))
        .unwrap_or_else(|| panic!("no note about {}: {notes:?}", first.0));
    assert!(missing.contains("is not on this node yet"), "{missing}");

    let (routes, notes) = viewed_with_certs(&[
        (first.0.as_str(), "0000000000000000"),
        (second.0.as_str(), second.1.as_str()),
    ]);
    assert_eq!(secret_certs(&routes), std::slice::from_ref(second));
    assert!(
        notes
            .iter()
            .any(|n| n.contains("in version 0000000000000000")),
        "{notes:?}"
    );
}

/// The same through the real daemons: the config without the absent certificate is one
/// HAProxy and nginx accept.
#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn a_config_without_an_absent_certificate_passes_the_daemons_own_checks() {
    let all = secret_certs(&versioned_tls_sni());
    let (routes, _) = viewed_with_certs(&[(all[1].0.as_str(), all[1].1.as_str())]);
    let r = HttpRenderer::embedded().unwrap();
    let hp = r
        .haproxy(&routes, &HttpRenderOptions::default(), &[])
        .unwrap();
    let lists: String = hp.files.values().cloned().collect();
    assert!(!lists.contains(&format!("{}.pem", all[0].0)), "{lists}");
    daemon_checks(&routes);
}

/// Two views of the tls-sni routes for `proxy`, the second with `change` applied to the
/// state's routes.
fn tls_views(
    proxy: Provider,
    change: impl Fn(&mut HttpRoutes),
) -> (k8slb_actor::view::NodeView, k8slb_actor::view::NodeView) {
    let mut a = base_state();
    a.http = versioned_tls_sni();
    let mut b = a.clone();
    change(&mut b.http);
    let mut vo = ViewOptions::new(proxy);
    vo.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    let node = "lb-1".parse().unwrap();
    (view(&a, &node, &vo).unwrap(), view(&b, &node, &vo).unwrap())
}

fn renew(stem: &'static str) -> impl Fn(&mut HttpRoutes) {
    move |r: &mut HttpRoutes| set_secret_versions(r, |s| s == stem, "2222222222222222")
}

/// A renewed certificate (same file, new version) is a Runtime API update for HAProxy
/// (`UpdateCert` of the path its config loaded), a reload for nginx; anything else about
/// the certificates (one more, one less) is a reload for both.
#[test]
fn a_renewed_certificate_is_a_runtime_update_for_haproxy_and_a_reload_for_nginx() {
    use k8slb_actor::render::{is_structural, runtime_diff, Config, RuntimeCommand};
    let stem = "default_foo";
    let (a, b) = tls_views(Provider::Haproxy, renew(stem));
    assert!(!is_structural(Config::Proxy, &a, &b));
    let cmds = runtime_diff(&a, &b).expect("a Runtime API change");
    assert_eq!(
        cmds,
        [RuntimeCommand::UpdateCert {
            path: format!("/run/k8slb/certs/{stem}.pem")
        }]
    );
    // The command line names the file, never its content.
    assert_eq!(
        cmds[0].to_cli(),
        format!(
            "{}/run/k8slb/certs/{stem}.pem",
            k8slb_actor::haproxy_rt::UPDATE_CERT
        )
    );

    let (a, b) = tls_views(Provider::Nginx, renew(stem));
    assert!(
        is_structural(Config::Proxy, &a, &b),
        "nginx reloads for a renewal"
    );

    let drop_one = |r: &mut HttpRoutes| {
        for l in &mut r.listeners {
            if let Some(t) = &mut l.tls {
                t.certificates.retain(|c| c.file.stem() != "default_foo");
            }
        }
    };
    let (a, b) = tls_views(Provider::Haproxy, drop_one);
    assert!(is_structural(Config::Proxy, &a, &b));
    assert_eq!(runtime_diff(&a, &b), None);
    // Unchanged: nothing to send.
    let (a, b) = tls_views(Provider::Haproxy, |_| {});
    assert_eq!(runtime_diff(&a, &b), Some(vec![]));
}

// ---------------------------------------------------------------------------------------
// L4 streams (TCP, UDP, TLS passthrough): the model, its renders, the daemons' own checks
// through the actor's whole view and render, and real traffic through real HAProxy and
// nginx from clients and backends this test runs in the namespace (std sockets, and
// `openssl s_server` / `s_client` for TLS).

use k8slb_common::routes::{StreamListener, StreamProtocol, StreamRoute};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Where the stream test's backends listen (on the namespace's `lo`).
const HEAVY: &str = "198.18.5.1:8080";
const LIGHT: &str = "198.18.5.2:8080";
const ECHO: &str = "198.18.5.3:7007";
const TLS_A: &str = "198.18.5.4:8443";
const TLS_B: &str = "198.18.5.5:8443";
const UDP_ECHO: &str = "198.18.5.6:5353";

/// The `streams` case: on the VIP, TCP 5000 (heavy 90 / light 10), TCP 5001 (echo),
/// TCP 5002 (a route without a backend), UDP 5353 (echo), TLS 8443 (a.example.com ->
/// tls-a, *.example.com -> tls-b, *.b.example.com -> tls-a; nothing else), TLS 8444
/// (closed.example.com without a backend; any other name split tls-a 1 / tls-b 3), and
/// HTTP 80 to heavy, whose Service port TCP 5000 names too.
fn stream_routes() -> HttpRoutes {
    let id = |s: &str| -> BackendId { s.parse().unwrap() };
    let state = |addr: &str| {
        let a: SocketAddr = addr.parse().unwrap();
        BackendState {
            endpoints: vec![Endpoint {
                ip: a.ip(),
                port: a.port(),
                draining: false,
            }],
            stickiness: None,
            protocol: Default::default(),
            tls: None,
        }
    };
    let wb = |s: &str, weight| WeightedBackend {
        id: id(s),
        weight,
        request_headers: Default::default(),
        client_certificate: None,
    };
    let route = |host: Option<&str>, backends| StreamRoute {
        host: host.map(|h| h.parse().unwrap()),
        backends,
        invalid: 0,
        owner: None,
        passthrough: false,
    };
    let listener = |port, protocol, routes| {
        let mut l = StreamListener {
            ip: VIP.parse().unwrap(),
            port,
            protocol,
            routes,
            terminate: None,
        };
        l.sort_routes();
        l
    };
    let mut routes = HttpRoutes {
        listeners: vec![Listener {
            ip: VIP.parse().unwrap(),
            port: 80,
            protocol: ListenerProtocol::Http,
            tls: None,
            virtual_hosts: vec![VirtualHost {
                host: None,
                any_depth: false,
                rules: vec![RouteRule {
                    matches: RouteMatch::on_path(PathMatch::Prefix("/".parse().unwrap())),
                    action: RouteAction::forward(id("default/heavy:80")),
                    filters: Default::default(),
                    owner: None,
                }],
            }],
            default_action: None,
            default_owner: None,
        }],
        backends: [
            ("default/heavy:80", HEAVY),
            ("default/light:80", LIGHT),
            ("default/echo:7", ECHO),
            ("default/tls-a:443", TLS_A),
            ("default/tls-b:443", TLS_B),
        ]
        .into_iter()
        .map(|(i, a)| (id(i), state(a)))
        .collect(),
        streams: vec![
            listener(
                5000,
                StreamProtocol::Tcp,
                vec![route(
                    None,
                    vec![wb("default/heavy:80", 90), wb("default/light:80", 10)],
                )],
            ),
            listener(
                5001,
                StreamProtocol::Tcp,
                vec![route(None, vec![wb("default/echo:7", 1)])],
            ),
            listener(5002, StreamProtocol::Tcp, vec![route(None, vec![])]),
            listener(
                5353,
                StreamProtocol::Udp,
                vec![route(None, vec![wb("default/dns:53", 1)])],
            ),
            // Invalid references' shares: closed (TCP), dropped (UDP; nginx only).
            listener(5003, StreamProtocol::Tcp, {
                let mut r = route(None, vec![wb("default/echo:7", 3)]);
                r.invalid = 1;
                vec![r]
            }),
            listener(5354, StreamProtocol::Udp, {
                let mut r = route(None, vec![wb("default/dns:53", 1)]);
                r.invalid = 1;
                vec![r]
            }),
            listener(
                8443,
                StreamProtocol::Tls,
                vec![
                    route(Some("*.example.com"), vec![wb("default/tls-b:443", 1)]),
                    route(Some("a.example.com"), vec![wb("default/tls-a:443", 1)]),
                    route(Some("*.b.example.com"), vec![wb("default/tls-a:443", 1)]),
                ],
            ),
            listener(
                8444,
                StreamProtocol::Tls,
                vec![
                    route(
                        None,
                        vec![wb("default/tls-a:443", 1), wb("default/tls-b:443", 3)],
                    ),
                    route(Some("closed.example.com"), vec![]),
                ],
            ),
        ],
        ca_bundles: Default::default(),
        udp_backends: [(id("default/dns:53"), state(UDP_ECHO))]
            .into_iter()
            .collect(),
    };
    routes.normalize();
    routes
}

/// The whole actor path with streams in the state: view (the nginx `stream { }` block and
/// its module, the `mode tcp` backends with slots), render (files written where the view
/// says), and the real daemons' checks of the result.
#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn a_state_with_streams_renders_configs_the_daemons_accept() {
    support::require_root_and(&["haproxy", "nginx", "openssl"]);
    let dir = tempfile::Builder::new()
        .prefix("k8slb-rtstream")
        .tempdir()
        .unwrap();
    let mut state = base_state();
    state.http = stream_routes();
    let node = "lb-1".parse().unwrap();
    let ns = support::Netns::new("k8slbrs");
    for k in ["net.ipv4.ip_nonlocal_bind=1", "net.ipv6.ip_nonlocal_bind=1"] {
        let st = ns.cmd("sysctl").args(["-qw", k]).status().unwrap();
        assert!(st.success(), "sysctl {k}");
    }
    for proxy in [Provider::Haproxy, Provider::Nginx] {
        let mut vo = ViewOptions::new(proxy);
        vo.interfaces
            .insert("default".parse().unwrap(), "eth0".parse().unwrap());
        vo.pid_file = dir.path().join("proxy.pid");
        vo.runtime_socket = dir.path().join("haproxy.sock");
        vo.routes_dir = dir.path().join("routes");
        let v = view(&state, &node, &vo).unwrap();
        let r = Renderer::embedded().unwrap().render(&v).unwrap();
        std::fs::create_dir_all(&vo.routes_dir).unwrap();
        for (f, t) in &r.files {
            std::fs::write(f, t).unwrap();
        }
        let text = r.proxy.unwrap();
        let file = dir.path().join("proxy.cfg");
        std::fs::write(&file, &text).unwrap();
        if proxy == Provider::Haproxy {
            assert!(
                v.notes
                    .iter()
                    .any(|n| n.contains("5353/UDP skipped: HAProxy does not proxy UDP")),
                "{:?}",
                v.notes
            );
            assert!(text.contains("# skipped route stream 198.18.0.10:5353/UDP"));
            assert!(text.contains("backend rtb_default_heavy_80\n  mode http"));
            assert!(text.contains("backend rtt_default_heavy_80\n  mode tcp"));
            run_check(
                "haproxy -c",
                ns.cmd(binary("haproxy").to_str().unwrap())
                    .arg("-c")
                    .arg("-f")
                    .arg(&file),
                &text,
            );
        } else {
            assert!(text.contains("load_module"), "the stream module is loaded");
            assert!(text.contains("listen 198.18.0.10:5353 udp;"));
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
    }
}

/// An endpoint change of a Service port a TCP stream forwards to is a Runtime API change
/// of its `mode tcp` backend (no reload), and a change of a stream split's weights is a
/// `set map`; a new route is structural. nginx reloads for either.
#[test]
fn stream_endpoint_and_weight_changes_are_runtime_api_changes_for_haproxy() {
    use k8slb_actor::render::{is_structural, runtime_diff, Config, RuntimeCommand};
    let views = |proxy, b: &dyn Fn(&mut HttpRoutes)| {
        let mut sa = base_state();
        sa.http = stream_routes();
        let mut sb = sa.clone();
        b(&mut sb.http);
        let mut vo = ViewOptions::new(proxy);
        vo.interfaces
            .insert("default".parse().unwrap(), "eth0".parse().unwrap());
        let node = "lb-1".parse().unwrap();
        let a = view(&sa, &node, &vo).unwrap();
        let b = k8slb_actor::view::view_with_previous(&sb, &node, &vo, Some(&a)).unwrap();
        (a, b)
    };
    let echo: BackendId = "default/echo:7".parse().unwrap();
    let churn = |r: &mut HttpRoutes| {
        r.backends
            .get_mut(&"default/echo:7".parse::<BackendId>().unwrap())
            .unwrap()
            .endpoints[0]
            .ip = "198.18.5.9".parse().unwrap();
    };
    let (a, b) = views(Provider::Haproxy, &churn);
    assert!(!is_structural(Config::Proxy, &a, &b));
    let lines: Vec<String> = runtime_diff(&a, &b)
        .unwrap()
        .iter()
        .map(RuntimeCommand::to_cli)
        .collect();
    let be = k8slb_actor::view::stream_backend_name(&echo);
    assert!(
        lines.contains(&format!("set server {be}/s1 addr 198.18.5.9 port 7007")),
        "{lines:?}"
    );
    let reweigh = |r: &mut HttpRoutes| {
        let s = r.streams.iter_mut().find(|s| s.port == 5000).unwrap();
        s.routes[0].backends[0].weight = 10;
        s.routes[0].backends[1].weight = 90;
    };
    let (a, b) = views(Provider::Haproxy, &reweigh);
    assert!(!is_structural(Config::Proxy, &a, &b));
    let lines: Vec<String> = runtime_diff(&a, &b)
        .unwrap()
        .iter()
        .map(RuntimeCommand::to_cli)
        .collect();
    assert_eq!(
        lines,
        ["set map /run/k8slb/routes/rts_198_18_0_10_5000.splits.map r0_b0 1000"]
    );
    let more = |r: &mut HttpRoutes| {
        let s = r.streams.iter_mut().find(|s| s.port == 8443).unwrap();
        s.routes.push(StreamRoute {
            host: Some("c.example.org".parse().unwrap()),
            backends: vec![WeightedBackend {
                id: "default/tls-b:443".parse().unwrap(),
                weight: 1,
                request_headers: Default::default(),
                client_certificate: None,
            }],
            invalid: 0,
            owner: None,
            passthrough: false,
        });
        s.sort_routes();
    };
    let (a, b) = views(Provider::Haproxy, &more);
    assert!(is_structural(Config::Proxy, &a, &b));
    let (a, b) = views(Provider::Nginx, &reweigh);
    assert!(is_structural(Config::Proxy, &a, &b), "nginx reloads");
}

/// Runs `f` on a thread inside the network namespace `ns`; sockets it makes stay there.
fn in_ns<T: Send>(ns: &support::Netns, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(&ns.name);
            f()
        })
        .join()
        .unwrap()
    })
}

fn enter(ns: &str) {
    let f = std::fs::File::open(Path::new("/run/netns").join(ns)).unwrap();
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
}

/// The test's backends in the namespace, stopped on drop.
struct StreamBackends {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The `openssl s_server`s, killed on drop.
    _tls: Vec<Killed>,
}

impl Drop for StreamBackends {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A TCP backend on `addr`: each connection is handled by `serve` on a thread of its own.
fn tcp_backend(
    ns: &str,
    addr: &'static str,
    stop: Arc<AtomicBool>,
    serve: fn(TcpStream, &str),
    name: &'static str,
) -> std::thread::JoinHandle<()> {
    let ns = ns.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        enter(&ns);
        let l = TcpListener::bind(addr).unwrap();
        l.set_nonblocking(true).unwrap();
        tx.send(()).unwrap();
        while !stop.load(Ordering::SeqCst) {
            match l.accept() {
                Ok((c, _)) => {
                    c.set_nonblocking(false).unwrap();
                    std::thread::spawn(move || serve(c, name));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    rx.recv().unwrap();
    t
}

/// Answers an HTTP/1.0-shaped request (read up to its blank line) with its name as the
/// body: what a TCP client of the test sends, and what HAProxy's and nginx's HTTP
/// listener forwards.
fn answer_name(mut c: TcpStream, name: &str) {
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let _ = write!(
        c,
        "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{name}",
        name.len()
    );
}

fn echo(mut c: TcpStream, _: &str) {
    let mut r = c.try_clone().unwrap();
    let _ = std::io::copy(&mut r, &mut c);
}

fn start_stream_backends(ns: &support::Netns, dir: &Path) -> StreamBackends {
    for a in [HEAVY, LIGHT, ECHO, TLS_A, TLS_B, UDP_ECHO] {
        let a: SocketAddr = a.parse().unwrap();
        ns.ip(&format!("addr add {}/32 dev lo", a.ip()));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = vec![
        tcp_backend(&ns.name, HEAVY, stop.clone(), answer_name, "heavy"),
        tcp_backend(&ns.name, LIGHT, stop.clone(), answer_name, "light"),
        tcp_backend(&ns.name, ECHO, stop.clone(), echo, "echo"),
    ];
    let (tx, rx) = std::sync::mpsc::channel();
    let (name, stop2) = (ns.name.clone(), stop.clone());
    threads.push(std::thread::spawn(move || {
        enter(&name);
        let s = UdpSocket::bind(UDP_ECHO).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        tx.send(()).unwrap();
        let mut buf = [0u8; 1500];
        while !stop2.load(Ordering::SeqCst) {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                let _ = s.send_to(&buf[..n], from);
            }
        }
    }));
    rx.recv().unwrap();
    // TLS backends: `openssl s_server`, each with a certificate whose CN is its name.
    let certs = dir.join("tls-backends");
    std::fs::create_dir_all(&certs).unwrap();
    let mut tls = Vec::new();
    for (name, addr) in [("tls-a", TLS_A), ("tls-b", TLS_B)] {
        self_signed(&certs, name);
        tls.push(Killed(
            ns.cmd("openssl")
                .args(["s_server", "-quiet", "-www", "-accept", addr, "-cert"])
                .arg(certs.join(format!("{name}.crt")))
                .arg("-key")
                .arg(certs.join(format!("{name}.key")))
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        ));
    }
    StreamBackends {
        stop,
        threads,
        _tls: tls,
    }
}

/// Runs `proxy` with the stream routes in `ns` and waits until it accepts on TCP 5001.
fn serve_streams(
    proxy: &str,
    routes: &HttpRoutes,
    o: &HttpRenderOptions,
    dir: &Path,
    ns: &support::Netns,
) -> Killed {
    let r = HttpRenderer::embedded().unwrap();
    let child = if proxy == "haproxy" {
        let hp = r.haproxy(routes, o, &[]).unwrap();
        for (f, t) in &hp.files {
            std::fs::write(f, t).unwrap();
        }
        assert!(hp
            .text
            .contains("# skipped route stream 198.18.0.10:5353/UDP"));
        let cfg = format!(
            "global\n  log stderr format short local0 err\n  stats socket {}/rt.sock level admin\n  expose-experimental-directives\ndefaults\n  timeout connect 2s\n  timeout client 5s\n  timeout server 5s\n{}",
            dir.display(),
            hp.text
        );
        let file = dir.join("haproxy.cfg");
        std::fs::write(&file, &cfg).unwrap();
        Killed(
            ns.cmd("haproxy")
                .arg("-db")
                .arg("-f")
                .arg(&file)
                .spawn()
                .unwrap(),
        )
    } else {
        let nx = r.nginx(routes, o).unwrap();
        let d = dir.display();
        // What nginx.conf.tera writes first in every http block ($k8slb_connection of
        // the locations' WebSocket lines among it).
        let base: String = k8slb_actor::render::nx_http_base(&[])
            .iter()
            .map(|l| format!("  {l}\n"))
            .collect();
        let cfg = format!(
            "load_module {};\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n  access_log off;\n{base}{}\n}}\nstream {{\n{}\n}}\n",
            k8slb_actor::view::NGINX_STREAM_MODULE,
            nx.text,
            nx.stream_text
        );
        let file = dir.join("nginx.conf");
        std::fs::write(&file, &cfg).unwrap();
        Killed(
            ns.cmd("nginx")
                .args(["-g", "daemon off;", "-p"])
                .arg(dir)
                .arg("-c")
                .arg(&file)
                .spawn()
                .unwrap(),
        )
    };
    let up = in_ns(ns, || {
        support::wait_until(Duration::from_secs(10), || {
            TcpStream::connect((VIP, 5001)).is_ok()
        })
    });
    assert!(up, "{proxy} did not accept on {VIP}:5001");
    child
}

/// A request through `VIP:port` and the body that came back (empty: closed).
fn tcp_request(port: u16, payload: &[u8], shutdown: bool) -> String {
    let Ok(mut c) = TcpStream::connect((VIP, port)) else {
        return String::new();
    };
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if c.write_all(payload).is_err() {
        return String::new();
    }
    if shutdown {
        let _ = c.shutdown(std::net::Shutdown::Write);
    }
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The body of an HTTP/1.0 answer, or what came back.
fn body(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or(answer, |(_, b)| b)
}

/// The CN of the certificate a TLS client got through `VIP:port` with SNI `sni` (no
/// SNI: `None`), or `closed`.
/// A certificate serves only the hosts its subjectAltName DNS names cover: through the
/// real HAProxy and nginx (TLS by SNI, `curl` reading the certificate's CN), the hosts
/// of a tls entry that its certificate is not for (`other.bar.com`, the bare `bar.com`,
/// two labels under `*.apps.bar.com`) get the default (pool) certificate and are still
/// served on HTTPS; plain HTTP redirects only the covered hosts.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_serve_a_host_its_certificate_does_not_cover_with_the_default_certificate() {
    let routes = routes_of("tls-mismatch");
    // What the model says, spelled out: the traffic below must match it on both proxies.
    let model = |port, https, host| expected(&routes, port, https, host, "/");
    assert_eq!(
        model(443, true, "foo.bar.com"),
        "200 nginx-service cn=default_foo"
    );
    assert_eq!(
        model(443, true, "x.apps.bar.com"),
        "200 nginx-service1 cn=default_wild"
    );
    for host in ["other.bar.com", "bar.com"] {
        assert_eq!(
            model(443, true, host),
            "200 nginx-service cn=default",
            "{host}"
        );
        assert_eq!(model(80, false, host), "200 nginx-service", "{host}");
    }
    assert_eq!(
        model(443, true, "deep.x.apps.bar.com"),
        "200 nginx-service1 cn=default"
    );
    assert_eq!(model(80, false, "foo.bar.com"), "308 https://foo.bar.com/");
    traffic(
        "tls-mismatch",
        &[
            (443, true, "foo.bar.com", "/"),
            (443, true, "other.bar.com", "/"),
            (443, true, "bar.com", "/"),
            (443, true, "x.apps.bar.com", "/"),
            (443, true, "deep.x.apps.bar.com", "/"),
            (80, false, "foo.bar.com", "/"),
            (80, false, "other.bar.com", "/"),
            (80, false, "deep.x.apps.bar.com", "/"),
        ],
    );
}

fn tls_cn(ns: &support::Netns, port: u16, sni: Option<&str>) -> String {
    let mut cmd = ns.cmd("timeout");
    cmd.args(["10", "openssl", "s_client", "-connect"])
        .arg(format!("{VIP}:{port}"));
    match sni {
        Some(s) => cmd.args(["-servername", s]),
        None => cmd.arg("-noservername"),
    };
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .find_map(|l| l.strip_prefix("subject=")) // OpenSSL 3: "subject=CN = tls-a"
        .and_then(|s| s.split_once("CN"))
        .map(|(_, cn)| cn.trim_start_matches([' ', '=']).trim().to_string())
        .filter(|_| out.status.success())
        .unwrap_or_else(|| "closed".into())
}

/// What the reference router says a TLS client gets: the CN of its route's backend
/// (tls-a / tls-b: the Service's name), or `closed`.
fn expected_cn(routes: &HttpRoutes, port: u16, sni: Option<&str>) -> String {
    routes
        .route_stream(VIP.parse().unwrap(), port, StreamProtocol::Tls, sni)
        .and_then(|r| r.backends.first())
        .map_or("closed".into(), |b| b.id.service.name.to_string())
}

/// TCP to an echo backend, TLS passthrough by SNI (exact, wildcards of any depth, the
/// longer suffix first, case-insensitive) to two TLS servers told apart by their
/// certificates, unknown names, no SNI and non-TLS bytes closed, a listener without a
/// backend closed, UDP through nginx to an echo backend, and a Service port both an HTTP
/// listener and a TCP stream forward to, through the real HAProxy and nginx.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_forward_tcp_udp_and_tls_passthrough_as_the_model_says() {
    support::require_root_and(&["haproxy", "nginx", "openssl"]);
    let routes = stream_routes();
    let snis: [Option<&str>; 8] = [
        Some("a.example.com"),
        Some("A.Example.COM"),
        Some("x.example.com"),
        Some("x.y.example.com"),
        Some("z.b.example.com"),
        Some("example.com"),
        Some("nope.example.net"),
        None,
    ];
    let want: Vec<String> = snis
        .iter()
        .map(|s| expected_cn(&routes, 8443, *s))
        .collect();
    // The test's expectations pin the reference router too.
    assert_eq!(
        want,
        ["tls-a", "tls-a", "tls-b", "tls-b", "tls-a", "closed", "closed", "closed"]
    );
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtl4")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let ns = support::Netns::new("k8slbl4");
        ns.ip(&format!("addr add {VIP}/32 dev lo"));
        let _backends = start_stream_backends(&ns, dir.path());
        let _child = serve_streams(proxy, &routes, &o, dir.path(), &ns);

        let (echoed, none, non_tls, http, tcp_same_port, udp) = in_ns(&ns, || {
            let udp = if proxy == "nginx" {
                let s = UdpSocket::bind((std::net::Ipv4Addr::UNSPECIFIED, 0)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                s.send_to(b"ping-udp", (VIP, 5353)).unwrap();
                let mut buf = [0u8; 64];
                s.recv(&mut buf)
                    .map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
                    .unwrap_or_default()
            } else {
                String::new()
            };
            (
                tcp_request(5001, b"hello-tcp\n", true),
                tcp_request(5002, b"anyone?\n", true),
                tcp_request(8443, b"GET / HTTP/1.0\r\n\r\n", false),
                tcp_request(80, b"GET / HTTP/1.0\r\nHost: any\r\n\r\n", false),
                tcp_request(5000, b"GET / HTTP/1.0\r\n\r\n", false),
                udp,
            )
        });
        assert_eq!(echoed, "hello-tcp\n", "{proxy}: TCP echo");
        assert_eq!(none, "", "{proxy}: a route without a backend closes");
        assert_eq!(non_tls, "", "{proxy}: what is not TLS is closed");
        assert_eq!(
            body(&http),
            "heavy",
            "{proxy}: HTTP to the shared Service port"
        );
        assert!(
            ["heavy", "light"].contains(&body(&tcp_same_port)),
            "{proxy}: TCP to the same Service port: {tcp_same_port:?}"
        );
        if proxy == "nginx" {
            assert_eq!(udp, "ping-udp", "{proxy}: UDP echo");
        }
        let got: Vec<String> = snis.iter().map(|s| tls_cn(&ns, 8443, *s)).collect();
        for ((sni, w), g) in snis.iter().zip(&want).zip(&got) {
            assert_eq!(g, w, "{proxy}: TLS with SNI {sni:?}");
        }
        println!("{proxy}: TLS passthrough by SNI {snis:?} -> {got:?}");
    }
}

/// A 90/10 TCP split between two Services, over 1,000 connections through each proxy
/// (HAProxy: a random draw per connection, so 900 ± 9.5 (one standard deviation):
/// 850..=950 holds unless something is wrong; nginx: weighted round-robin, exact); then
/// HAProxy's turned into 10/90 by the Runtime API's `set map`, without a reload.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_split_tcp_connections_by_weight() {
    support::require_root_and(&["haproxy", "nginx", "openssl"]);
    let routes = stream_routes();
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtl4split")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let ns = support::Netns::new("k8slbl4s");
        ns.ip(&format!("addr add {VIP}/32 dev lo"));
        let _backends = start_stream_backends(&ns, dir.path());
        let _child = serve_streams(proxy, &routes, &o, dir.path(), &ns);
        let answers: Vec<String> = in_ns(&ns, || {
            (0..1000)
                .map(|_| body(&tcp_request(5000, b"GET / HTTP/1.0\r\n\r\n", false)).to_string())
                .collect()
        });
        let heavy = answers.iter().filter(|a| *a == "heavy").count();
        let light = answers.iter().filter(|a| *a == "light").count();
        assert_eq!(heavy + light, 1000, "{proxy}: every connection answered");
        assert!(
            (850..=950).contains(&heavy),
            "{proxy}: {heavy} of 1000 connections went to the 90% backend"
        );
        println!("{proxy}: 90/10 TCP split over 1000 connections: {heavy} / {light}");
        if proxy == "haproxy" {
            // 90/10 -> 10/90 as the actor does it: `set map` over the Runtime API.
            let mut new = routes.clone();
            let s = new.streams.iter_mut().find(|s| s.port == 5000).unwrap();
            s.routes[0].backends[0].weight = 10;
            s.routes[0].backends[1].weight = 90;
            let splits = k8slb_actor::render::SplitsMap::of_stream(s, &o).unwrap();
            let map = splits.path;
            let cmds: Vec<String> = splits
                .entries
                .into_iter()
                .map(|(key, value)| {
                    k8slb_actor::render::RuntimeCommand::SetMap {
                        map: map.clone(),
                        key,
                        value,
                    }
                    .to_cli()
                })
                .collect();
            k8slb_actor::haproxy_rt::apply_commands(&dir.path().join("rt.sock"), &cmds)
                .expect("HAProxy takes the new shares");
            let answers: Vec<String> = in_ns(&ns, || {
                (0..1000)
                    .map(|_| body(&tcp_request(5000, b"GET / HTTP/1.0\r\n\r\n", false)).to_string())
                    .collect()
            });
            let heavy = answers.iter().filter(|a| *a == "heavy").count();
            assert!(
                (50..=150).contains(&heavy),
                "{proxy}: after set map, {heavy} of 1000 went to the now 10% backend"
            );
            println!(
                "{proxy}: 10/90 after set map, no reload: {heavy} / {}",
                1000 - heavy
            );
        }
    }
}

/// A TCP route with one valid backend (weight 1) and invalid references (weight 1):
/// half of its connections are closed, the others answered, through both proxies (1,000
/// connections; 420..=580 is 5 sigma around 500). HAProxy's draw above the backend's
/// share falls to `reject`; nginx weighs its closing sink like a backend.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_close_the_invalid_references_share_of_tcp_connections_only() {
    support::require_root_and(&["haproxy", "nginx", "openssl"]);
    let mut routes = stream_routes();
    let s = routes.streams.iter_mut().find(|s| s.port == 5000).unwrap();
    s.routes[0].backends.truncate(1);
    s.routes[0].backends[0].weight = 1;
    s.routes[0].invalid = 1;
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtl4inv")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let ns = support::Netns::new("k8slbl4i");
        ns.ip(&format!("addr add {VIP}/32 dev lo"));
        let _backends = start_stream_backends(&ns, dir.path());
        let _child = serve_streams(proxy, &routes, &o, dir.path(), &ns);
        let answers: Vec<String> = in_ns(&ns, || {
            (0..1000)
                .map(|_| body(&tcp_request(5000, b"GET / HTTP/1.0\r\n\r\n", false)).to_string())
                .collect()
        });
        let answered = answers.iter().filter(|a| *a == "heavy").count();
        let other: Vec<&String> = answers
            .iter()
            .filter(|a| *a != "heavy" && !a.is_empty())
            .collect();
        assert!(
            other.is_empty(),
            "{proxy}: only heavy or nothing: {other:?}"
        );
        assert!(
            (420..=580).contains(&answered),
            "{proxy}: {answered} of 1000 connections answered"
        );
        println!(
            "{proxy}: valid/invalid 1/1 over 1000 TCP connections: {answered} answered, {} closed",
            1000 - answered
        );
    }
}

// ---------------------------------------------------------------------------------------
// What one tenant's routes may cost the others (issue 20).

/// The longest line of HAProxy's routes part, in words (HAProxy refuses more than 64).
fn most_words(text: &str) -> usize {
    text.lines()
        .map(|l| l.split_whitespace().count())
        .max()
        .unwrap_or(0)
}

/// The longest word of nginx's routes part (nginx refuses a token over 4,096 bytes; the
/// values here hold no space, so a word is at least as long as its token).
fn longest_word(text: &str) -> usize {
    text.split_whitespace().map(str::len).max().unwrap_or(0)
}

/// At the Gateway API's maxima (a method, 16 headers and 16 query parameters per match,
/// 256 such rules on one host: the plan's default cap), with the longest values the plan
/// accepts, every HAProxy line stays within 64 words (each condition is a named `acl`)
/// and every nginx token within 4,095 bytes (no map source concatenates conditions).
#[test]
fn crd_maxima_keep_haproxy_lines_and_nginx_tokens_within_the_proxies_limits() {
    let routes = support::tenant_routes::crd_maxima(256);
    let r = HttpRenderer::embedded().unwrap();
    let state = base_state();
    let hp = r.haproxy(&routes, &options(&state), &[]).unwrap();
    let words = most_words(&hp.text);
    assert!(words <= 64, "a HAProxy line of {words} words");
    let nx = r.nginx(&routes, &options(&state)).unwrap();
    let longest = longest_word(&nx.text);
    // The longest values the plan accepts do reach the config, and fit.
    assert!((4000..=4095 + 1).contains(&longest), "{longest}");
    let tokens_over: Vec<&str> = nx
        .text
        .split_whitespace()
        .map(|w| w.trim_end_matches(';'))
        .filter(|w| w.len() > k8slb_common::routes::NGINX_MAX_TOKEN)
        .collect();
    assert!(
        tokens_over.is_empty(),
        "{} tokens over 4095",
        tokens_over.len()
    );
}

#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn crd_maxima_pass_the_daemons_own_checks() {
    daemon_checks(&support::tenant_routes::crd_maxima(256));
}

/// nginx's render of nested conditional rules with filters is linear in its input (it
/// grew as n^2.8: 17.5 MB at 128 rules, 136 MB at 256, as every location copied each
/// rule that covers it): the rendered text per byte of route model (whose nested paths
/// grow with the depth) stays flat as the rules double; HAProxy's too.
#[test]
fn nested_conditional_rules_render_linearly_in_size() {
    let r = HttpRenderer::embedded().unwrap();
    let state = base_state();
    let per_model_byte = |n: usize| {
        let routes = support::tenant_routes::nested_conditional(n);
        let model = serde_json::to_string(&routes).unwrap().len() as f64;
        let nx = r.nginx(&routes, &options(&state)).unwrap().text.len();
        let hp = r
            .haproxy(&routes, &options(&state), &[])
            .unwrap()
            .text
            .len();
        (nx as f64 / model, hp as f64 / model, nx)
    };
    let (nx64, hp64, _) = per_model_byte(64);
    let (nx256, hp256, nx_bytes) = per_model_byte(256);
    assert!(
        nx256 <= nx64 * 1.25,
        "nginx: {nx64:.2} then {nx256:.2} bytes per model byte"
    );
    assert!(
        hp256 <= hp64 * 1.25,
        "haproxy: {hp64:.2} then {hp256:.2} bytes per model byte"
    );
    assert!(
        nx_bytes < 1_000_000,
        "{nx_bytes} bytes of nginx.conf for 256 rules"
    );
}

#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn nested_conditional_rules_pass_the_daemons_own_checks() {
    daemon_checks(&support::tenant_routes::nested_conditional(256));
}

/// `GET <path>` sent as is (no client-side normalisation) with `Host: <host>` to the VIP
/// on port 80: the answer as [`request_for`] sums it up.
fn raw_request(ns: &support::Netns, host: &str, path: &str) -> String {
    let out = ns
        .cmd("curl")
        .args([
            "-s",
            "--path-as-is",
            "--max-time",
            "5",
            "-w",
            "\n%{http_code}",
        ])
        .arg("-H")
        .arg(format!("Host: {host}"))
        .arg(format!("http://{VIP}:80{path}"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    match code {
        "200" => format!("200 {}", body.trim()),
        "502" => "5xx".into(),
        "503" if body.contains("No server is available") => "5xx".into(),
        c => c.to_string(),
    }
}

/// A route's prefix is the boundary its author meant, on both proxies: dot segments
/// (also percent-encoded) are resolved and slashes merged before routing (nginx does it
/// before its locations; HAProxy with `normalize-uri`), and a Host with one trailing dot
/// is the host without it. `/gone/../api/v1/x` is `/api/v1/x` (Service api), never the
/// `/gone` route (a missing Service).
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_normalize_dot_segments_and_a_trailing_dot_in_the_host() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let routes = routes_of("precedence");
    let cases = [
        (
            "shop.example.com",
            "/gone/../api/v1/x",
            "shop.example.com",
            "/api/v1/x",
        ),
        (
            "shop.example.com",
            "/gone/%2e%2e/api/v1/x",
            "shop.example.com",
            "/api/v1/x",
        ),
        (
            "shop.example.com",
            "/gone/./../api//v1/x",
            "shop.example.com",
            "/api/v1/x",
        ),
        (
            "shop.example.com.",
            "/api/v1/x",
            "shop.example.com",
            "/api/v1/x",
        ),
        (
            "SHOP.example.com.",
            "/gone/x",
            "shop.example.com",
            "/gone/x",
        ),
        ("a.example.com.", "/static/x", "a.example.com", "/static/x"),
    ];
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtnorm")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let (ns, _child) = serve(proxy, &routes, &o, dir.path());
        for (host, path, clean_host, clean_path) in cases {
            let want = expected(&routes, 80, false, clean_host, clean_path);
            assert_eq!(
                raw_request(&ns, host, path),
                want,
                "{proxy}: {host} {path} must route as {clean_host} {clean_path}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Facts of the upstream conformance suites (issue 23): the Host a backend gets, nginx's
// trailing-slash redirect, the Server response header. Fixture `ingress/conformance`.

/// The options with the shipped `nginx.proxy` lines (`traffic_options` pins `$host`).
fn shipped_options(dir: &Path) -> HttpRenderOptions {
    let mut o = traffic_options(dir);
    o.nginx_proxy = k8slb_common::config::default_nginx().proxy;
    o
}

/// Answers a request (read up to its blank line) the way the conformance echo server
/// does in what matters here: no `Server` header; the body is `<name> <request line>
/// host=<Host header, or - when none>`.
fn answer_head(mut c: TcpStream, name: &str) {
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&got).to_string();
    let line = head.lines().next().unwrap_or_default();
    let host = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map_or("-".to_string(), |(_, v)| v.trim().to_string());
    let body = format!("{name} {line} host={host}");
    let server = if name == "nginx-service1" {
        "Server: echo-1\r\n"
    } else {
        ""
    };
    let _ = write!(
        c,
        "HTTP/1.1 200 OK\r\n{server}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// `proxy` serving the conformance fixture with the shipped proxy lines, in front of
/// [`answer_head`] backends on every endpoint address.
fn serve_conformance(
    proxy: &str,
    dir: &Path,
) -> (support::Netns, StreamBackends, Killed, HttpRoutes) {
    let routes = routes_of("conformance");
    let ns = support::Netns::new("k8slbcf");
    let stop = Arc::new(AtomicBool::new(false));
    // Leaked: tcp_backend binds a &'static address (a few per test run).
    let threads = endpoints(&routes)
        .into_iter()
        .map(|(a, name)| {
            ns.ip(&format!("addr add {}/32 dev lo", a.ip()));
            let addr: &'static str = Box::leak(a.to_string().into_boxed_str());
            let name: &'static str = Box::leak(name.into_boxed_str());
            tcp_backend(&ns.name, addr, stop.clone(), answer_head, name)
        })
        .collect();
    let backends = StreamBackends {
        stop,
        threads,
        _tls: vec![],
    };
    let child = serve_in(&ns, proxy, &routes, &shipped_options(dir), dir, None);
    (ns, backends, child, routes)
}

/// A raw request sent from inside the namespace to VIP:80; the whole answer.
fn raw_http(ns: &support::Netns, request: &str) -> String {
    in_ns(ns, || {
        let mut c = TcpStream::connect((VIP, 80)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(request.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        String::from_utf8_lossy(&out).replace('\r', "")
    })
}

/// `<status> <body>` of an answer.
fn status_body(answer: &str) -> String {
    let (head, body) = answer.split_once("\n\n").unwrap_or((answer, ""));
    let status = head.split_whitespace().nth(1).unwrap_or("none");
    format!("{status} {}", body.trim())
}

/// The values of response header `name` (any case) in an answer.
fn header_values(answer: &str, name: &str) -> Vec<String> {
    let head = answer.split_once("\n\n").map_or(answer, |(h, _)| h);
    head.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

fn get(path: &str, host: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

/// The backend gets the client's `Host` as it was sent, port and case included, on both
/// proxies with the shipped settings (the Gateway API's HTTPRouteHostnameIntersection and
/// HTTPRouteListenerPortMatching send `very.specific.com:1234`; nginx's `$host` dropped
/// the port). A client that sends no Host (HTTP/1.0): HAProxy forwards the request as
/// HTTP/1.0 without one; nginx, which speaks HTTP/1.1 to backends, sends the address the
/// request came to. A request line with an absolute URI naming another host than its
/// Host header: HAProxy refuses it (400), nginx routes on the URI's host and sends that.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_pass_the_clients_host_header_to_the_backend_as_sent() {
    support::require_root_and(&["haproxy", "nginx", "openssl"]);
    let vhost = |h: &str| format!("200 nginx-service GET / HTTP/1.1 host={h}");
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rthost")
            .tempdir()
            .unwrap();
        let (ns, _backends, _child, _) = serve_conformance(proxy, dir.path());
        for host in [
            "very.specific.com:1234",
            "Very.Specific.COM",
            "very.specific.com.",
            "very.specific.com:80",
        ] {
            assert_eq!(
                status_body(&raw_http(&ns, &get("/", host))),
                vhost(host),
                "{proxy}: Host {host}"
            );
        }
        let no_host = status_body(&raw_http(&ns, "GET /any HTTP/1.0\r\n\r\n"));
        let absolute = status_body(&raw_http(
            &ns,
            "GET http://very.specific.com/ HTTP/1.1\r\nHost: other.example:81\r\nConnection: close\r\n\r\n",
        ));
        if proxy == "haproxy" {
            assert_eq!(no_host, "200 nginx-service GET /any HTTP/1.0 host=-");
            assert!(absolute.starts_with("400 "), "{proxy}: {absolute}");
        } else {
            assert_eq!(
                no_host,
                format!("200 nginx-service GET /any HTTP/1.1 host={VIP}")
            );
            assert_eq!(absolute, vhost("very.specific.com"), "{proxy}");
        }
    }
}

/// Paths with a trailing slash as the Ingress specification and the conformance
/// features (path_rules, "trailing-slash-path-rules") say, on both proxies: Exact `/foo/`
/// does not match `/foo` (404: nginx's automatic trailing-slash redirect answered 301),
/// and Prefix `/aaa/bbb/` matches `/aaa/bbb`, `/aaa/bbb/` and below, element-wise. The
/// same for HTTPRoutes (PathPrefix is the Ingress's Prefix), on a host routed on paths
/// alone (nginx: `location = /foo/`, which redirected) and on one whose rules also match
/// a header (nginx: one `location /`, which never did).
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_match_paths_with_a_trailing_slash_as_the_ingress_spec_says() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    for (routes, host) in [
        (routes_of("conformance"), "trailing-slash-path-rules"),
        (gateway_routes_of("trailing-slash"), "plain.example.com"),
        (gateway_routes_of("trailing-slash"), "cond.example.com"),
    ] {
        trailing_slash_cases(&routes, host);
    }
}

fn trailing_slash_cases(routes: &HttpRoutes, h: &str) {
    let cases = [
        ("/foo", "404"),
        ("/foo/", "200 nginx-service1"),
        ("/foo/x", "404"),
        ("/aaa/bbb", "200 nginx-service"),
        ("/aaa/bbb/", "200 nginx-service"),
        ("/aaa/bbb/c", "200 nginx-service"),
        ("/aaa/bbbc", "404"),
        ("/aaa", "404"),
    ];
    for (path, want) in cases {
        assert_eq!(
            expected(routes, 80, false, h, path),
            want,
            "model: {h}{path}"
        );
    }
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtslash")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let (ns, _child) = serve(proxy, routes, &o, dir.path());
        for (path, want) in cases {
            assert_eq!(request(&ns, 80, false, h, path), want, "{proxy}: {h}{path}");
        }
    }
}

/// Every answer has one `Server` header without a version (the Ingress conformance's
/// default_backend scenarios require one; the conformance echo server sends none), also
/// the proxy's own answers (404): HAProxy passes a backend's own (`echo-1`) and writes
/// `haproxy` when there is none (it wrote none); nginx writes `nginx` in place of any
/// (it wrote `nginx/<version>`).
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_answer_with_a_server_header_without_a_version() {
    support::require_root_and(&["haproxy", "nginx", "openssl"]);
    let h = "trailing-slash-path-rules";
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtserver")
            .tempdir()
            .unwrap();
        let (ns, _backends, _child, _) = serve_conformance(proxy, dir.path());
        for (path, status, server) in [
            ("/aaa/bbb", "200", proxy),
            (
                "/foo/",
                "200",
                if proxy == "haproxy" {
                    "echo-1"
                } else {
                    "nginx"
                },
            ),
            ("/nothing", "404", proxy),
        ] {
            let answer = raw_http(&ns, &get(path, h));
            assert_eq!(
                status_body(&answer).split_whitespace().next(),
                Some(status),
                "{proxy}: {path}: {answer}"
            );
            assert_eq!(
                header_values(&answer, "server"),
                [server],
                "{proxy}: {path}: {answer}"
            );
        }
    }
}

/// The shipped Host line with nginx.conf's base lines alone (no routes): a client that
/// sends no Host gets the address it connected to as the backend's Host, an IPv6 one in
/// brackets (a Host of `fd00::10` would not parse); a client's Host passes as sent.
#[test]
#[ignore = "needs root: real nginx in a network namespace; ./scripts/test.sh runs it"]
fn nginx_sends_the_address_a_host_less_request_came_to_as_its_host() {
    support::require_root_and(&["nginx"]);
    let ns = support::Netns::new("k8slbh6");
    ns.ip("addr add 198.18.0.11/32 dev lo");
    ns.ip("addr add fd00::10/128 dev lo nodad");
    let dir = tempfile::Builder::new()
        .prefix("k8slb-rthost6")
        .tempdir()
        .unwrap();
    let d = dir.path().display();
    let mut cfg = format!("pid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n");
    for l in k8slb_actor::render::nx_http_base(&[]) {
        cfg.push_str(&format!("  {l}\n"));
    }
    let proxy: String = k8slb_common::config::default_nginx()
        .proxy
        .iter()
        .map(|l| format!(" {}", l.as_str()))
        .collect();
    cfg.push_str(&format!(
        "  server {{ listen 127.0.0.1:8080; location / {{ return 200 \"host=$http_host\"; }} }}\n  server {{ listen 198.18.0.11:80; listen [fd00::10]:80; location / {{{proxy} proxy_pass http://127.0.0.1:8080; }} }}\n}}\n"
    ));
    let file = dir.path().join("nginx.conf");
    std::fs::write(&file, &cfg).unwrap();
    let _nginx = Killed(
        ns.cmd("nginx")
            .args(["-g", "daemon off;", "-p"])
            .arg(dir.path())
            .arg("-c")
            .arg(&file)
            .spawn()
            .unwrap(),
    );
    let ask = |addr: SocketAddr, req: &'static str| {
        in_ns(&ns, move || {
            let mut c = None;
            for _ in 0..100 {
                match TcpStream::connect(addr) {
                    Ok(s) => {
                        c = Some(s);
                        break;
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
            let mut c = c.expect("nginx listens");
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            c.write_all(req.as_bytes()).unwrap();
            let mut out = Vec::new();
            let _ = c.read_to_end(&mut out);
            status_body(&String::from_utf8_lossy(&out).replace('\r', ""))
        })
    };
    let v4: SocketAddr = "198.18.0.11:80".parse().unwrap();
    let v6: SocketAddr = "[fd00::10]:80".parse().unwrap();
    let no_host = "GET / HTTP/1.0\r\n\r\n";
    assert_eq!(ask(v4, no_host), "200 host=198.18.0.11");
    assert_eq!(ask(v6, no_host), "200 host=[fd00::10]");
    assert_eq!(
        ask(
            v6,
            "GET / HTTP/1.1\r\nHost: [fd00::10]:80\r\nConnection: close\r\n\r\n"
        ),
        "200 host=[fd00::10]:80"
    );
    assert_eq!(
        ask(
            v4,
            "GET / HTTP/1.1\r\nHost: Very.Specific.com:1234\r\nConnection: close\r\n\r\n"
        ),
        "200 host=Very.Specific.com:1234"
    );
}

/// split.example.com's split with a 500 ms timeout and each backend setting `backend`
/// to its own name (Gateway API rule `timeouts` and backendRef RequestHeaderModifier).
fn timeout_and_backend_edits_routes() -> HttpRoutes {
    use k8slb_common::routes::{HeaderEdits, HeaderValue, TimeoutMs};
    let mut routes = split_routes(1, 1);
    let rule = &mut routes.listeners[0].virtual_hosts[0].rules[0];
    rule.filters.timeout = Some(TimeoutMs::try_from(500).unwrap());
    if let RouteAction::Forward { backends, .. } = &mut rule.action {
        for b in backends {
            b.request_headers = HeaderEdits {
                set: vec![HeaderValue {
                    name: "backend".parse().unwrap(),
                    value: b.id.service.name.as_str().parse().unwrap(),
                }],
                ..Default::default()
            };
        }
    }
    routes
}

#[test]
fn rule_timeouts_and_backend_header_edits_render_on_both_proxies() {
    let routes = timeout_and_backend_edits_routes();
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    // The frontend names the timeout, the backend applies it (2.6: set-timeout only
    // there); each backend's edit on the draw that picks it.
    assert!(
        hp.text.contains(
            "http-request set-var(txn.k8slb_to) int(500) if { var(txn.k8slb_a) -m str f1 }"
        ),
        "{}",
        hp.text
    );
    assert!(hp.text.contains(
        "http-request set-timeout server var(txn.k8slb_to) if { var(txn.k8slb_to) -m found }"
    ));
    assert!(hp
        .text
        .contains("http-request set-header backend \"heavy\" if { var(txn.k8slb_a) -m str s"));
    assert!(hp
        .text
        .contains("http-request set-header backend \"light\" if { var(txn.k8slb_a) -m str s"));
    let nx = r.nginx(&routes, &o).unwrap();
    assert!(nx.text.contains("proxy_read_timeout 500ms;"), "{}", nx.text);
    assert!(nx.text.contains("proxy_set_header backend $k8slb_v"));
    assert!(nx.text.contains("\"heavy\";") && nx.text.contains("\"light\";"));
    assert!(nx.notes.is_empty(), "{:?}", nx.notes);

    // Without a timeout in any rule, HAProxy's backends do not apply one.
    let plain = split_routes(1, 1);
    assert!(!r
        .haproxy(&plain, &o, &[])
        .unwrap()
        .text
        .contains("set-timeout"));
}

/// split.example.com's split with retry policy `retry` (Gateway API rule `retry`).
fn retry_routes(attempts: Option<u32>, codes: &[u16]) -> HttpRoutes {
    use k8slb_common::routes::{Retry, RetryAttempts, RetryCode};
    let mut routes = split_routes(1, 1);
    routes.listeners[0].virtual_hosts[0].rules[0].filters.retry = Some(Retry {
        attempts: attempts.map(|a| RetryAttempts::try_from(a).unwrap()),
        codes: codes
            .iter()
            .map(|c| RetryCode::try_from(*c).unwrap())
            .collect(),
    });
    routes
}

/// HAProxy's `retries` and `retry-on` are backend keywords: a rule with a retry names
/// its policy (`txn.k8slb_rt`), and the frontend sends its requests to the retrying
/// copy of the backend drawn, whose servers track the backend's (same slots, no checks
/// of their own).
#[test]
fn rule_retries_send_to_a_retrying_copy_of_each_backend_that_tracks_its_servers() {
    let routes = retry_routes(Some(3), &[500, 503]);
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    let t = &hp.text;
    assert!(
        t.contains(
            "http-request set-var(txn.k8slb_rt) str(r3_500_503) if { var(txn.k8slb_a) -m str f1 }"
        ),
        "{t}"
    );
    assert!(t.contains(
        "use_backend %[var(txn.k8slb_a)]_%[var(txn.k8slb_rt)] if { var(txn.k8slb_a) -m beg rtb_ } { var(txn.k8slb_rt) -m found }"
    ));
    for b in ["heavy", "light"] {
        let copy = format!("\nbackend rtb_default_{b}_80_r3_500_503\n");
        let at = t.find(&copy).unwrap_or_else(|| panic!("no {copy} in {t}"));
        let section = &t[at + 1..];
        let section = &section[..section.find("\n\n").unwrap_or(section.len())];
        assert!(section.contains("\n  retries 3\n"), "{section}");
        assert!(
            section.contains("\n  retry-on conn-failure 500 503\n"),
            "{section}"
        );
        assert!(
            section.contains(&format!(" track rtb_default_{b}_80/s1")),
            "{section}"
        );
        assert!(!section.contains(" check"), "{section}");
        let base = hp
            .backends
            .iter()
            .find(|x| x.name == format!("rtb_default_{b}_80"))
            .unwrap();
        let copy = hp
            .backends
            .iter()
            .find(|x| x.name == format!("rtb_default_{b}_80_r3_500_503"))
            .unwrap();
        assert_eq!(copy.slots, base.slots, "{b}: the same slots");
        assert!(base.track.is_none());
        // The backend itself (what other rules, of other routes and namespaces, send
        // to) keeps HAProxy's defaults: the policy is the copy's only.
        let base_at = t
            .find(&format!("\nbackend rtb_default_{b}_80\n"))
            .expect("the backend");
        let base_section = &t[base_at + 1..];
        let base_section = &base_section[..base_section.find("\n\n").unwrap_or(base_section.len())];
        assert!(!base_section.contains("retr"), "{base_section}");
    }
    // The proxy's default attempts: no `retries` line; connection failures still retried.
    let t = r.haproxy(&retry_routes(None, &[]), &o, &[]).unwrap().text;
    let at = t
        .find("\nbackend rtb_default_heavy_80_rd\n")
        .expect("the copy");
    assert!(
        t[at..].starts_with(
            "\nbackend rtb_default_heavy_80_rd\n  mode http\n  retry-on conn-failure\n"
        ),
        "{}",
        &t[at..]
    );
    // Without a retry in any rule: no copy, no k8slb_rt.
    let plain = r.haproxy(&split_routes(1, 1), &o, &[]).unwrap();
    assert!(!plain.text.contains("k8slb_rt"));
    assert_eq!(plain.backends.len(), 2);
    // nginx is never given one (the plan refuses it there); met all the same, the host
    // is left out with a note, never served without its retries.
    let nx = r.nginx(&routes, &o).unwrap();
    assert!(!nx.text.contains("split.example.com"), "{}", nx.text);
    assert!(
        nx.notes.iter().any(|n| n.contains("retry")),
        "{:?}",
        nx.notes
    );
    let nx = r.nginx(&split_routes(1, 1), &o).unwrap();
    assert!(nx.text.contains("split.example.com"));
}

/// An endpoint change reaches the retrying copies through the Runtime API with the
/// backend's (their slots are the backend's): no reload.
#[test]
fn an_endpoint_change_sets_the_retrying_copies_servers_too() {
    use k8slb_actor::render::{is_structural, runtime_diff, Config, RuntimeCommand};
    let mut sa = base_state();
    sa.http = retry_routes(Some(2), &[502]);
    let mut sb = sa.clone();
    let heavy: BackendId = "default/heavy:80".parse().unwrap();
    sb.http.backends.get_mut(&heavy).unwrap().endpoints[0].ip = "198.18.5.9".parse().unwrap();
    let mut vo = ViewOptions::new(Provider::Haproxy);
    vo.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    let node = "lb-1".parse().unwrap();
    let a = view(&sa, &node, &vo).unwrap();
    let b = view(&sb, &node, &vo).unwrap();
    assert!(!is_structural(Config::Proxy, &a, &b));
    let lines: Vec<String> = runtime_diff(&a, &b)
        .expect("a Runtime API change")
        .iter()
        .map(RuntimeCommand::to_cli)
        .collect();
    for be in ["rtb_default_heavy_80", "rtb_default_heavy_80_r2_502"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("set server {be}/s1 addr 198.18.5.9 "))),
            "{be}: {lines:?}"
        );
    }
    // Another policy is another copy: a reload.
    let mut sc = sa.clone();
    sc.http = retry_routes(Some(3), &[502]);
    let c = view(&sc, &node, &vo).unwrap();
    assert!(is_structural(Config::Proxy, &a, &c));
}

/// Hostile: the widest policy the plan lets through (ten attempts, every code HAProxy's
/// `retry-on` takes) on a split with cookie stickiness, and the
/// proxy's default, both on one listener: `haproxy -c` takes them (nginx is never given
/// a retry: the plan refuses it there; its render leaves such a host out).
#[test]
#[ignore = "needs root: a network namespace for nginx -t and haproxy -c; ./scripts/test.sh runs it"]
fn the_widest_retry_policies_pass_the_daemons_own_checks() {
    use k8slb_common::routes::{RetryCode, Sticky};
    let mut routes = retry_routes(
        Some(k8slb_common::routes::RetryAttempts::MAX),
        &RetryCode::SUPPORTED,
    );
    let mut other = routes.listeners[0].virtual_hosts[0].clone();
    other.host = Some("default.example.com".parse().unwrap());
    other.rules[0].filters.retry = Some(Default::default());
    routes.listeners[0].virtual_hosts.push(other);
    for st in routes.backends.values_mut() {
        st.stickiness = Some(Sticky::Cookie {
            name: "K8SLB".parse().unwrap(),
        });
    }
    let hp = HttpRenderer::embedded()
        .unwrap()
        .haproxy(&routes, &HttpRenderOptions::default(), &[])
        .unwrap();
    assert!(hp
        .text
        .contains("retry-on conn-failure 401 403 404 408 425 500 501 502 503 504"));
    assert_eq!(hp.backends.len(), 6, "two backends, two copies each");
    daemon_checks(&routes);
}

/// nginx picks among a host's rules that match on method, headers or query in one
/// location, which takes one timeout: rules asking for different ones leave the host
/// unserved on nginx (a note), never served with another timeout; the same timeout
/// renders. HAProxy serves both.
#[test]
fn nginx_refuses_a_conditional_host_whose_rules_ask_for_different_timeouts() {
    use k8slb_common::routes::{HeaderMatch, TimeoutMs};
    let with = |second_ms: u64| {
        let mut routes = split_routes(1, 0);
        let rules = &mut routes.listeners[0].virtual_hosts[0].rules;
        rules[0].filters.timeout = Some(TimeoutMs::try_from(500).unwrap());
        let mut conditional = rules[0].clone();
        conditional.matches.headers = vec![HeaderMatch {
            name: "x-canary".parse().unwrap(),
            value: "1".parse().unwrap(),
        }];
        conditional.filters.timeout = Some(TimeoutMs::try_from(second_ms).unwrap());
        rules.insert(0, conditional);
        routes
    };
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    let nx = r.nginx(&with(1000), &o).unwrap();
    assert!(!nx.text.contains("split.example.com"), "{}", nx.text);
    assert!(
        nx.notes
            .iter()
            .any(|n| n.contains("split.example.com") && n.contains("different")),
        "{:?}",
        nx.notes
    );
    let nx = r.nginx(&with(500), &o).unwrap();
    assert!(nx.text.contains("split.example.com"));
    assert!(nx.text.contains("proxy_read_timeout 500ms;"), "{}", nx.text);
    let hp = r.haproxy(&with(1000), &o, &[]).unwrap();
    assert!(hp.text.contains("int(1000)") && hp.text.contains("int(500)"));
}

#[test]
#[ignore = "needs root: haproxy -c and nginx -t in a network namespace; ./scripts/test.sh runs it"]
fn rule_timeouts_and_backend_header_edits_pass_the_proxies_checkers() {
    daemon_checks(&timeout_and_backend_edits_routes());
}

/// The tls-sni routes with TLS to every backend (a BackendTLSPolicy's: server name,
/// CA bundle) and client certificate validation on every HTTPS listener, the bundle a
/// real CA certificate.
fn verified_tls_routes(dir: &Path) -> HttpRoutes {
    let mut routes = routes_of("tls-sni");
    self_signed(dir, "test-ca");
    let pem = std::fs::read_to_string(dir.join("test-ca.crt")).unwrap();
    let ca = k8slb_common::routes::CaId::of(&pem);
    routes.ca_bundles.insert(ca.clone(), pem);
    for b in routes.backends.values_mut() {
        b.tls = Some(k8slb_common::routes::BackendTls {
            server_name: "api.internal".parse().unwrap(),
            ca: ca.clone(),
        });
    }
    for t in routes.listeners.iter_mut().filter_map(|l| l.tls.as_mut()) {
        t.client_ca = Some(ca.clone());
    }
    routes
}

/// The file the render writes the first CA bundle of `routes` to.
fn first_ca_file(routes: &HttpRoutes, o: &HttpRenderOptions) -> String {
    format!(
        "{}/ca-{}.pem",
        o.files_dir.display(),
        routes.ca_bundles.keys().next().unwrap()
    )
}

/// Backend TLS (BackendTLSPolicy) and client certificate validation (a Gateway's
/// spec.tls.frontend) render as the proxies' verifying keywords, name the CA bundle
/// file that the render hands to the staging, and pass haproxy -c and nginx -t.
#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn verified_backend_tls_and_client_certificates_pass_the_daemons_own_checks() {
    let dir = tempfile::tempdir().unwrap();
    let routes = verified_tls_routes(dir.path());
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    let ca_file = first_ca_file(&routes, &o);
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    assert!(hp.files.contains_key(&ca_file), "{:?}", hp.files.keys());
    assert!(
        hp.text.contains(&format!(
            "ssl verify required ca-file {ca_file} sni str(api.internal) verifyhost api.internal"
        )),
        "{}",
        hp.text
    );
    assert!(
        hp.text
            .contains(&format!("ca-file {ca_file} verify required")),
        "{}",
        hp.text
    );
    let nx = r.nginx(&routes, &o).unwrap();
    assert!(nx.files.contains_key(&ca_file));
    for line in [
        "proxy_ssl_name api.internal;",
        "proxy_ssl_verify on;",
        &format!("proxy_ssl_trusted_certificate {ca_file};"),
        "proxy_pass https://",
        &format!("ssl_client_certificate {ca_file};"),
        "ssl_verify_client on;",
    ] {
        assert!(nx.text.contains(line), "{line}\n{}", nx.text);
    }
    daemon_checks(&routes);
}

/// nginx's `proxy_ssl_*` take no variable: a split between a backend reached over TLS
/// and one in cleartext is answered 500 with a note on nginx, never sent to either
/// with the other's settings; HAProxy, whose TLS is per server, serves the split. Both
/// backends over TLS with the same settings: nginx splits them over TLS.
#[test]
fn nginx_answers_500_for_a_split_between_backends_reached_with_different_tls() {
    let mut routes = split_routes(90, 10);
    let pem = "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n".to_string();
    let ca = k8slb_common::routes::CaId::of(&pem);
    routes.ca_bundles.insert(ca.clone(), pem);
    let tls = k8slb_common::routes::BackendTls {
        server_name: "heavy.internal".parse().unwrap(),
        ca,
    };
    routes
        .backends
        .get_mut(&"default/heavy:80".parse().unwrap())
        .unwrap()
        .tls = Some(tls.clone());
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    let nx = r.nginx(&routes, &o).unwrap();
    assert!(nx.text.contains("return 500;"), "{}", nx.text);
    assert!(!nx.text.contains("proxy_pass https://"), "{}", nx.text);
    assert!(
        nx.notes
            .iter()
            .any(|n| n.contains("different TLS settings")),
        "{:?}",
        nx.notes
    );
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    assert_eq!(
        hp.text.matches("verifyhost heavy.internal").count(),
        hp.text.matches("\n  server s").count() / 2,
        "the heavy backend's servers only:\n{}",
        hp.text
    );
    // The same TLS on both: one location, over TLS.
    routes
        .backends
        .get_mut(&"default/light:80".parse().unwrap())
        .unwrap()
        .tls = Some(tls);
    let nx = r.nginx(&routes, &o).unwrap();
    assert!(
        nx.text.contains("proxy_pass https://$k8slb_split_0;"),
        "{}",
        nx.text
    );
    assert!(
        nx.notes.iter().all(|n| !n.contains("TLS")),
        "{:?}",
        nx.notes
    );
}

/// ListenerSets at the CRD maxima on one Gateway: 8 sets of 64 listeners (the CRD's
/// `maxItems`), each with a 253-character hostname (the longest DNS name), half of the
/// sets on port 80, half on a port per listener, one route per set attached to all its
/// listeners. `limits.listenerSetListenersPerGateway` (256 by default) serves the oldest
/// 256 and refuses the rest (`TooManyListeners`).
fn listener_set_maxima() -> GatewayOutput {
    use std::fmt::Write as _;
    let mut y = String::from(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: k8slb}\nspec: {controllerName: k8slb.io/gateway-controller}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {namespace: default, name: gw}\nspec:\n  gatewayClassName: k8slb\n  allowedListeners: {namespaces: {from: All}}\n  listeners:\n  - {name: http, port: 80, protocol: HTTP}\n",
    );
    // 63 + 63 + 63 + 61 characters and three dots: 253.
    let host = |s: usize, l: usize| {
        let first = format!("s{s}l{l}-{}", "a".repeat(63));
        format!(
            "{}.{}.{}.{}",
            &first[..63],
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        )
    };
    for s in 0..8usize {
        let _ = write!(
            y,
            "---\napiVersion: gateway.networking.k8s.io/v1\nkind: ListenerSet\nmetadata: {{namespace: tenant-{s}, name: set, creationTimestamp: \"2026-01-01T00:00:0{s}Z\"}}\nspec:\n  parentRef: {{name: gw, namespace: default}}\n  listeners:\n"
        );
        for l in 0..64usize {
            let port = if s % 2 == 0 { 80 } else { 10000 + s * 64 + l };
            let h = host(s, l);
            assert_eq!(h.len(), 253);
            let _ = writeln!(
                y,
                "  - {{name: l{l}, port: {port}, protocol: HTTP, hostname: {h}, allowedRoutes: {{namespaces: {{from: Same}}}}}}"
            );
        }
        let _ = write!(
            y,
            "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{namespace: tenant-{s}, name: r}}\nspec:\n  parentRefs: [{{kind: ListenerSet, group: gateway.networking.k8s.io, name: set}}]\n  rules:\n  - matches: [{{path: {{value: /t{s}}}}}]\n    backendRefs: [{{name: nginx-service, namespace: default, port: 80}}]\n---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{namespace: default, name: from-tenant-{s}}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: tenant-{s}}}]\n  to: [{{group: \"\", kind: Service}}]\n"
        );
    }
    let mut objs = k8slb_common::objects::Objects::default();
    objs.add_text(&std::fs::read_to_string(fixtures().join("ingress/services.yaml")).unwrap())
        .unwrap();
    objs.add_text(&y).unwrap();
    assert!(objs.problems.is_empty(), "{:?}", objs.problems);
    let addresses = [("default/gw".parse().unwrap(), vec![VIP.parse().unwrap()])]
        .into_iter()
        .collect();
    k8slb_common::gateway::translate(&objs.gateway_input(&[], &addresses, &Default::default()))
}

#[test]
fn listener_sets_at_the_crd_maxima_are_bounded_per_gateway() {
    let out = listener_set_maxima();
    let sets: Vec<(String, usize, usize)> = out
        .listener_sets
        .iter()
        .map(|(k, st)| {
            let served = st
                .listeners
                .iter()
                .filter(|l| {
                    l.conditions
                        .iter()
                        .any(|c| c.type_.as_str() == "Programmed" && c.status)
                })
                .count();
            let too_many = st
                .listeners
                .iter()
                .filter(|l| {
                    l.conditions
                        .iter()
                        .any(|c| c.reason.as_str() == "TooManyListeners")
                })
                .count();
            (k.to_string(), served, too_many)
        })
        .collect();
    // The four oldest sets are served whole, the four newest not at all.
    let want: Vec<(String, usize, usize)> = (0..8)
        .map(|s| {
            (
                format!("tenant-{s}/set"),
                if s < 4 { 64 } else { 0 },
                if s < 4 { 0 } else { 64 },
            )
        })
        .collect();
    assert_eq!(sets, want);
    let gw = &out.gateways[&"default/gw".parse().unwrap()];
    assert_eq!(gw.attached_listener_sets, Some(4));
    // Served: the Gateway's listener and 2 sets' hostnames on port 80, and 128 ports.
    let hosts: usize = out
        .routes
        .listeners
        .iter()
        .map(|l| l.virtual_hosts.iter().filter(|v| v.host.is_some()).count())
        .sum();
    assert_eq!((out.routes.listeners.len(), hosts), (1 + 128, 256));
}

#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn listener_sets_at_the_crd_maxima_pass_the_daemons_own_checks() {
    daemon_checks(&listener_set_maxima().routes);
}

/// A Gateway with one HTTP listener per host name of each length in 44..=54 (the
/// longest, 47 to 54 bytes, do not fit nginx's 64-byte server name bucket with its
/// terminating pointer) and a route on each.
fn host_lengths_routes() -> HttpRoutes {
    let mut y = String::from(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: k8slb}\nspec: {controllerName: k8slb.io/gateway-controller}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {namespace: default, name: gw}\nspec:\n  gatewayClassName: k8slb\n  listeners:\n",
    );
    let hosts: Vec<String> = (44..=54usize)
        .map(|n| format!("{}.com", "h".repeat(n - 4)))
        .collect();
    for (i, h) in hosts.iter().enumerate() {
        y.push_str(&format!(
            "  - {{name: l{i}, port: 80, protocol: HTTP, hostname: {h}}}\n"
        ));
    }
    y.push_str("---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {namespace: default, name: r}\nspec:\n  parentRefs: [{name: gw}]\n  rules:\n  - backendRefs: [{name: nginx-service, port: 80}]\n");
    let mut objs = k8slb_common::objects::Objects::default();
    objs.add_text(&std::fs::read_to_string(fixtures().join("ingress/services.yaml")).unwrap())
        .unwrap();
    objs.add_text(&y).unwrap();
    let addresses = [("default/gw".parse().unwrap(), vec![VIP.parse().unwrap()])]
        .into_iter()
        .collect();
    let out =
        k8slb_common::gateway::translate(&objs.gateway_input(&[], &addresses, &Default::default()));
    assert_eq!(out.routes.listeners[0].virtual_hosts.len(), hosts.len());
    out.routes
}

#[test]
fn nginx_server_name_buckets_hold_names_of_47_to_54_bytes() {
    let r = HttpRenderer::embedded().unwrap();
    let nx = r
        .nginx(&host_lengths_routes(), &options(&base_state()))
        .unwrap();
    assert!(
        nx.text.contains("server_names_hash_bucket_size 128;"),
        "{}",
        nx.text
    );
}

#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn host_names_of_44_to_54_bytes_pass_the_daemons_own_checks() {
    daemon_checks(&host_lengths_routes());
}

/// The client certificate of Secret default/client ([`certs`] makes its file,
/// `default_client.pem`, self-signed with CN `default_client`).
fn client_cert() -> k8slb_common::routes::CertFile {
    k8slb_common::routes::CertFile::Secret {
        namespace: "default".parse().unwrap(),
        name: "client".parse().unwrap(),
        version: "v1".into(),
    }
}

/// A TLS backend default/api:443 (endpoint 198.18.5.9:8443, verified against the CA
/// bundle `ca_pem` as `api.internal`) reached from two Gateways' listeners: port 80
/// presents [`client_cert`], port 8080 presents nothing. With `retry`, a third listener
/// (port 8081) presents it from a rule that retries.
fn client_cert_routes(ca_pem: &str, retry: bool) -> HttpRoutes {
    let api: BackendId = "default/api:443".parse().unwrap();
    let ca = k8slb_common::routes::CaId::of(ca_pem);
    let listener = |port: u16, cert: Option<k8slb_common::routes::CertFile>, retry: bool| {
        let mut rule = RouteRule::new(
            RouteMatch::on_path(PathMatch::Prefix("/".parse().unwrap())),
            RouteAction::Forward {
                backends: vec![WeightedBackend {
                    id: api.clone(),
                    weight: 1,
                    request_headers: Default::default(),
                    client_certificate: cert,
                }],
                invalid: 0,
            },
        );
        if retry {
            rule.filters.retry = Some(k8slb_common::routes::Retry {
                attempts: Some(serde_json::from_value(serde_json::json!(3)).unwrap()),
                codes: Default::default(),
            });
        }
        Listener {
            ip: VIP.parse().unwrap(),
            port,
            protocol: ListenerProtocol::Http,
            tls: None,
            virtual_hosts: vec![VirtualHost {
                host: None,
                any_depth: false,
                rules: vec![rule],
            }],
            default_action: None,
            default_owner: None,
        }
    };
    let mut listeners = vec![
        listener(80, Some(client_cert()), false),
        listener(8080, None, false),
    ];
    if retry {
        listeners.push(listener(8081, Some(client_cert()), true));
    }
    HttpRoutes {
        listeners,
        backends: [(
            api,
            BackendState {
                endpoints: vec![Endpoint {
                    ip: "198.18.5.9".parse().unwrap(),
                    port: 8443,
                    draining: false,
                }],
                stickiness: None,
                protocol: Default::default(),
                tls: Some(k8slb_common::routes::BackendTls {
                    server_name: "api.internal".parse().unwrap(),
                    ca: ca.clone(),
                }),
            },
        )]
        .into_iter()
        .collect(),
        ca_bundles: [(ca, ca_pem.to_string())].into_iter().collect(),
        ..HttpRoutes::default()
    }
}

/// The text of HAProxy backend `name` in `text` (up to the next blank line).
fn hp_backend<'a>(text: &'a str, name: &str) -> &'a str {
    let start = text
        .find(&format!("\nbackend {name}\n"))
        .unwrap_or_else(|| panic!("no backend {name}:\n{text}"));
    let rest = &text[start + 1..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

/// A Gateway's backend client certificate (spec.tls.backend.clientCertificateRef):
/// HAProxy sends its rules to a copy of the TLS backend whose servers add `crt <pem>`
/// and track the route backend's (no health checks of their own, so the open-files
/// budget counts the backend's checks once; the backend's own checks are a TCP
/// connect, as a handshake without the certificate may be refused), a retrying rule to
/// that copy's retrying copy; nginx puts `proxy_ssl_certificate` and `_key` in that
/// Gateway's location only. Another Gateway's rules to the same backend present
/// nothing. Both configs pass haproxy -c and nginx -t.
#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn a_gateways_client_certificate_is_presented_on_its_rules_only_and_passes_the_daemons_checks() {
    let dir = tempfile::tempdir().unwrap();
    self_signed_with(dir.path(), "api-internal", Some("DNS:api.internal"));
    let ca_pem = std::fs::read_to_string(dir.path().join("api-internal.crt")).unwrap();
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    let pem = format!("{}/default_client.pem", o.secret_cert_dir.display());

    let routes = client_cert_routes(&ca_pem, true);
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    let base = hp_backend(&hp.text, "rtb_default_api_443");
    assert!(!base.contains(" crt "), "{base}");
    assert!(
        base.contains(" check ") && base.contains(" no-check-ssl"),
        "{base}"
    );
    for copy in [
        "rtb_default_api_443_cdefault_client",
        "rtb_default_api_443_cdefault_client_r3",
    ] {
        let b = hp_backend(&hp.text, copy);
        let servers: Vec<&str> = b.lines().filter(|l| l.contains("server s")).collect();
        assert!(!servers.is_empty(), "{b}");
        for (i, l) in servers.iter().enumerate() {
            assert!(
                l.contains(&format!(" crt {pem}"))
                    && l.contains(&format!(" track rtb_default_api_443/s{}", i + 1))
                    && l.contains("verifyhost api.internal")
                    && !l.contains(" check "),
                "{l}"
            );
        }
    }
    assert!(hp.text.contains("retries 3"), "{}", hp.text);
    // Which backend each listener's rule goes to: port 80 the copy, port 8080 the route
    // backend itself (directly in the path map), port 8081 the copy (retrying).
    let maps: String = hp.files.values().cloned().collect();
    assert!(
        maps.contains("rtb_default_api_443_cdefault_client\n")
            && maps.contains("rtb_default_api_443\n"),
        "{maps}"
    );
    // Copies track: the checks counted for the open-files budget are the route
    // backend's only.
    let backends = k8slb_actor::view::route_backends(&routes, &[], "/run/k8slb/routes", &|c| {
        k8slb_actor::view::client_cert_file(c, &o)
    });
    let checked: Vec<&str> = backends
        .iter()
        .filter(|b| b.track.is_none())
        .map(|b| b.name.as_str())
        .collect();
    assert_eq!(checked, ["rtb_default_api_443"]);
    assert_eq!(backends.len(), 3);

    // nginx (no retries: the translation refuses them there).
    let routes = client_cert_routes(&ca_pem, false);
    let nx = r.nginx(&routes, &o).unwrap();
    for line in [
        format!("proxy_ssl_certificate {pem};"),
        format!("proxy_ssl_certificate_key {pem};"),
    ] {
        assert_eq!(nx.text.matches(&line).count(), 1, "{line}\n{}", nx.text);
    }
    assert_eq!(
        nx.text.matches("proxy_pass https://").count(),
        2,
        "{}",
        nx.text
    );
    // Its own upstream (the same servers): nginx keeps idle connections and TLS
    // sessions per upstream, so none made with the certificate serves port 8080.
    for line in [
        "proxy_pass https://rtb_default_api_443_cdefault_client;",
        "proxy_pass https://rtb_default_api_443;",
        "upstream rtb_default_api_443_cdefault_client {",
    ] {
        assert_eq!(nx.text.matches(line).count(), 1, "{line}\n{}", nx.text);
    }
    daemon_checks(&routes);
    daemon_checks(&client_cert_routes(&ca_pem, true));
}

/// A TLS backend that requires a client certificate (a HAProxy frontend with `verify
/// required`, trusting only default_client's certificate, answering the CN of the
/// certificate it was shown), through both real proxies: the Gateway that presents
/// default_client's certificate (port 80) reaches it; the other Gateway's listener to
/// the same backend (port 8080) presents nothing, and the backend refuses it (the
/// proxy answers 502 or 503, never the backend's answer).
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_present_a_gateways_client_certificate_only_through_its_own_listener() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtclient")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        self_signed_with(dir.path(), "api-internal", Some("DNS:api.internal"));
        let ca_pem = std::fs::read_to_string(dir.path().join("api-internal.crt")).unwrap();
        let routes = client_cert_routes(&ca_pem, false);
        let ns = support::Netns::new("k8slbcc");
        ns.ip("link set lo up");
        ns.ip("addr add 198.18.5.9/32 dev lo");
        let d = dir.path().display();
        let backend_cfg = format!(
            "global\n  log stderr format short local0 err\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 5s\n  timeout server 5s\nfrontend tls_backend\n  bind 198.18.5.9:8443 ssl crt {d}/api-internal.pem ca-file {d}/certs/default_client.crt verify required\n  http-request return status 200 content-type text/plain lf-string \"client=%[ssl_c_s_dn(CN)]\"\n"
        );
        let file = dir.path().join("backend.cfg");
        std::fs::write(&file, &backend_cfg).unwrap();
        let _backend = Killed(
            ns.cmd("haproxy")
                .arg("-db")
                .arg("-f")
                .arg(&file)
                .spawn()
                .unwrap(),
        );
        let _proxy = serve_in(&ns, proxy, &routes, &o, dir.path(), None);
        let get = |port: u16| {
            let out = ns
                .cmd("curl")
                .args(["-s", "--max-time", "5", "-w", "\n%{http_code}"])
                .arg(format!("http://{VIP}:{port}/"))
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        // The backend may take a moment to listen: the presenting Gateway is answered.
        let mut got = String::new();
        let ok = support::wait_until(std::time::Duration::from_secs(10), || {
            got = get(80);
            got.ends_with("\n200")
        });
        assert!(ok, "{proxy}: port 80 got {got:?}");
        assert_eq!(got, "client=default_client\n200", "{proxy}");
        let other = get(8080);
        assert!(
            !other.contains("client=") && (other.ends_with("\n502") || other.ends_with("\n503")),
            "{proxy}: port 8080 got {other:?}"
        );
    }
}

/// A client certificate that is not on the node in the version the state names (not
/// yet copied, or an older one): the requests that would present it get 500 (never
/// sent without it, nor with another version), with a note; HAProxy has no copy of the
/// backend for it; the other Gateway's requests are served. Once there, it is used.
#[test]
fn a_client_certificate_not_on_the_node_in_its_version_answers_500_with_a_note() {
    let viewed = |present: &[(&str, &str)]| {
        let mut state = base_state();
        state.http = client_cert_routes(
            "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n",
            false,
        );
        let v = haproxy_view_with_certs(&state, present);
        let http = v.http.unwrap();
        let names: Vec<String> = http.backends.iter().map(|b| b.name.clone()).collect();
        (http.routes, names, v.notes)
    };
    let first = |routes: &HttpRoutes, port: u16| {
        let l = routes.listeners.iter().find(|l| l.port == port).unwrap();
        l.virtual_hosts[0].rules[0].action.clone()
    };
    for present in [&[][..], &[("default_client", "v0")][..]] {
        let (routes, backends, notes) = viewed(present);
        match first(&routes, 80) {
            RouteAction::Forward { backends, invalid } => {
                assert!(
                    backends.is_empty() && invalid > 0,
                    "{present:?}: {backends:?}"
                )
            }
            a => panic!("{a:?}"),
        }
        assert!(
            matches!(first(&routes, 8080), RouteAction::Forward { ref backends, invalid: 0 } if backends.len() == 1),
            "{present:?}"
        );
        assert_eq!(backends, ["rtb_default_api_443"], "{present:?}");
        assert!(
            notes
                .iter()
                .any(|n| n.contains("client certificate of Secret default/client")),
            "{present:?}: {notes:?}"
        );
    }
    let (routes, backends, _) = viewed(&[("default_client", "v1")]);
    assert!(
        matches!(first(&routes, 80), RouteAction::Forward { ref backends, invalid: 0 } if backends[0].client_certificate.is_some())
    );
    assert_eq!(
        backends,
        ["rtb_default_api_443", "rtb_default_api_443_cdefault_client"]
    );
}

// ---------------------------------------------------------------------------------------
// TLS listeners with `tls.mode: Terminate` (TLSRouteModeTerminate).

use k8slb_common::routes::{CertFile, Certificate, ListenerTls};

/// A Secret certificate of namespace `default` for `hosts` (its file `default_<name>`).
fn secret_cert(name: &str, hosts: &[&str]) -> Certificate {
    Certificate {
        file: CertFile::Secret {
            namespace: "default".parse().unwrap(),
            name: name.parse().unwrap(),
            version: String::new(),
        },
        hosts: hosts.iter().map(|h| h.parse().unwrap()).collect(),
        owner: None,
    }
}

/// A terminating TLS listener on the VIP's `port` with `certificates` (the first the
/// default) and `routes` (host, backends).
fn terminating(
    port: u16,
    certificates: Vec<Certificate>,
    routes: Vec<(Option<&str>, Vec<&str>)>,
) -> StreamListener {
    let default_certificate = Some(certificates[0].file.clone());
    let mut l = StreamListener {
        ip: VIP.parse().unwrap(),
        port,
        protocol: StreamProtocol::Tls,
        routes: routes
            .into_iter()
            .map(|(host, backends)| StreamRoute {
                host: host.map(|h| h.parse().unwrap()),
                backends: backends
                    .into_iter()
                    .map(|b| WeightedBackend {
                        id: b.parse().unwrap(),
                        weight: 1,
                        request_headers: Default::default(),
                        client_certificate: None,
                    })
                    .collect(),
                invalid: 0,
                owner: None,
                passthrough: false,
            })
            .collect(),
        terminate: Some(ListenerTls {
            certificates,
            default_certificate,
            client_ca: None,
            client_validation: Default::default(),
            zones: None,
        }),
    };
    l.sort_routes();
    l
}

/// The `streams` case with two terminating TLS listeners: 9443 (certificate term-a for
/// a.example.com, term-wild for *.example.com; a.example.com -> heavy, *.example.com
/// -> light, closed.example.com without a backend) and 9444 (one certificate for any
/// name, every name -> heavy).
fn terminate_routes() -> HttpRoutes {
    let mut routes = stream_routes();
    routes.streams.push(terminating(
        9443,
        vec![
            secret_cert("term-a", &["a.example.com"]),
            secret_cert("term-wild", &["*.example.com"]),
        ],
        vec![
            (Some("a.example.com"), vec!["default/heavy:80"]),
            (Some("*.example.com"), vec!["default/light:80"]),
            (Some("closed.example.com"), vec![]),
        ],
    ));
    routes.streams.push(terminating(
        9444,
        vec![secret_cert("term-any", &[])],
        vec![(None, vec!["default/heavy:80"])],
    ));
    routes.normalize();
    routes
}

#[test]
fn a_terminating_tls_listener_binds_its_certificates_and_routes_by_the_handshakes_server_name() {
    let routes = terminate_routes();
    let r = HttpRenderer::embedded().unwrap();
    let o = options(&base_state());
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    let front = |port: u16| {
        let start = hp
            .text
            .find(&format!("frontend rts_198_18_0_10_{port}\n"))
            .unwrap();
        let end = hp.text[start + 1..]
            .find("\nfrontend ")
            .or_else(|| hp.text[start + 1..].find("\nbackend "))
            .map_or(hp.text.len(), |e| start + 1 + e);
        hp.text[start..end].to_string()
    };
    let (f9443, f9444, f8443) = (front(9443), front(9444), front(8443));
    assert!(
        f9443.contains("transparent ssl crt-list ") && f9443.contains("ssl_fc_sni,lower"),
        "{f9443}"
    );
    assert!(!f9443.contains("inspect-delay"), "{f9443}");
    assert!(f9443.contains("map_str(/run/k8slb/routes/rts_198_18_0_10_9443.sni.map)"));
    assert!(f9443.contains("map_end(/run/k8slb/routes/rts_198_18_0_10_9443.suffixes.map)"));
    assert!(f9444.contains(" ssl crt-list "), "{f9444}");
    // Passthrough stays as it was.
    assert!(f8443.contains("req.ssl_sni,lower") && !f8443.contains(" ssl "));
    let list = hp
        .files
        .iter()
        .find(|(f, _)| f.ends_with("rts_198_18_0_10_9443.crt-list"))
        .map(|(_, t)| t.as_str())
        .expect("a crt-list");
    // Each certificate filtered by its listener's hostname, the default first.
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    assert!(lines[0].ends_with("default_term-a.pem !*.example.com !a.example.com"));
    assert!(lines[1].ends_with("default_term-a.pem a.example.com"));
    assert!(lines[2].ends_with("default_term-wild.pem *.example.com"));

    let nx = r.nginx(&routes, &o).unwrap();
    let t = &nx.stream_text;
    assert!(t.contains("listen 198.18.0.10:9443 ssl;"), "{t}");
    assert!(t.contains("ssl_certificate $k8slb_crt_198_18_0_10_9443_tls;"));
    assert!(t.contains("map $ssl_server_name $k8slb_sni_198_18_0_10_9443_tls {"));
    assert!(t.contains("\n    *.example.com ") && t.contains("default_term-wild.pem;"));
    // One certificate: named as it is, so that nginx -t loads it.
    assert!(t.contains("listen 198.18.0.10:9444 ssl;"));
    assert!(t.contains("default_term-any.pem;"));
    assert!(!t.contains("$k8slb_crt_198_18_0_10_9444_tls"));
}

/// A terminating listener whose certificates the quarantine took out refuses every
/// connection on both proxies (never a bind without a certificate, which the checkers
/// refuse for every tenant).
#[test]
fn a_terminating_listener_without_certificates_refuses_its_connections() {
    let mut routes = terminate_routes();
    for s in &mut routes.streams {
        if let Some(t) = &mut s.terminate {
            t.certificates.clear();
            t.default_certificate = None;
        }
    }
    let r = HttpRenderer::embedded().unwrap();
    let o = options(&base_state());
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    assert!(!hp.text.contains(" ssl "), "{}", hp.text);
    assert!(hp.text.contains(
        "frontend rts_198_18_0_10_9443\n  bind 198.18.0.10:9443 transparent\n  mode tcp\n  tcp-request connection reject"
    ));
    assert!(hp
        .notes
        .iter()
        .any(|n| n.contains("without any certificate")));
    let nx = r.nginx(&routes, &o).unwrap();
    assert!(!nx.stream_text.contains(" ssl;"), "{}", nx.stream_text);
    assert!(nx
        .stream_text
        .contains("listen 198.18.0.10:9443;\n    deny all;"));
}

#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn terminating_tls_listeners_pass_the_daemons_own_checks() {
    // daemon_checks' certificate directory has default_foo and default_wild.
    let mut routes = terminate_routes();
    for s in &mut routes.streams {
        if let Some(t) = &mut s.terminate {
            for c in &mut t.certificates {
                c.file = secret_cert(if c.hosts.is_empty() { "foo" } else { "wild" }, &[]).file;
            }
            t.default_certificate = Some(t.certificates[0].file.clone());
        }
    }
    daemon_checks(&routes);
}

/// At the CRD maxima: 64 terminating listeners on one port (a Gateway's most), each
/// with a hostname of 253 characters (a wildcard for half of them), and 16 TLSRoutes of
/// 16 hostnames under each wildcard: HAProxy's crt-list lines and nginx's map entries
/// stay within the proxies' limits, and both checkers accept the config.
fn terminate_maxima() -> HttpRoutes {
    let long = |i: usize, wildcard: bool| {
        // 253 characters: labels of 63 under a short suffix.
        let tail = format!("l{i:03}.example.com");
        let mut labels = Vec::new();
        let mut len = tail.len();
        while len + 64 <= 253 - usize::from(wildcard) * 2 {
            labels.push("a".repeat(63));
            len += 64;
        }
        let pad = 253 - usize::from(wildcard) * 2 - len - 1;
        let mut name = format!("{}.{}", "b".repeat(pad), labels.join("."));
        name = format!("{name}.{tail}");
        if wildcard {
            format!("*.{name}")
        } else {
            name
        }
    };
    let mut certs = Vec::new();
    let mut routes: Vec<(String, Vec<&str>)> = Vec::new();
    for i in 0..64 {
        let h = long(i, i % 2 == 1);
        assert_eq!(h.len(), 253, "{h}");
        certs.push(secret_cert(
            if i % 2 == 1 { "wild" } else { "foo" },
            &[h.as_str()],
        ));
        if i % 2 == 1 {
            for j in 0..256 {
                let sub = format!("r{j:03}{}", &h[1..]);
                let sub = if sub.len() > 253 {
                    format!("r{j:03}.{}", &h[2 + 5..])
                } else {
                    sub
                };
                routes.push((sub, vec!["default/heavy:80"]));
            }
        }
        routes.push((h, vec!["default/light:80"]));
    }
    let mut out = stream_routes();
    out.streams.push(terminating(
        9443,
        certs,
        routes
            .iter()
            .map(|(h, b)| (Some(h.as_str()), b.clone()))
            .collect(),
    ));
    out.normalize();
    out
}

#[test]
fn terminating_listeners_at_the_crd_maxima_stay_within_the_proxies_limits() {
    let routes = terminate_maxima();
    let s = routes.streams.iter().find(|s| s.port == 9443).unwrap();
    assert_eq!(s.terminate.as_ref().unwrap().certificates.len(), 64);
    assert!(s.routes.len() > 64 * 16);
    let r = HttpRenderer::embedded().unwrap();
    let o = options(&base_state());
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    assert!(most_words(&hp.text) <= 64);
    for (f, t) in &hp.files {
        for l in t.lines() {
            assert!(
                l.split_whitespace().count() < 2048 && l.len() < 64 * 1024,
                "{f}: a line of {} words",
                l.split_whitespace().count()
            );
        }
    }
    let nx = r.nginx(&routes, &o).unwrap();
    assert!(longest_word(&nx.stream_text) <= k8slb_common::routes::NGINX_MAX_TOKEN);
}

#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn terminating_listeners_at_the_crd_maxima_pass_the_daemons_own_checks() {
    daemon_checks(&terminate_maxima());
}

/// What a TLS client sending an HTTP/1.0 request through `VIP:port` with server name
/// `sni` gets: the CN of the certificate and the body of the answer (`-`: none).
fn tls_exchange(ns: &support::Netns, port: u16, sni: Option<&str>) -> (String, String) {
    use std::process::Stdio;
    let mut cmd = ns.cmd("timeout");
    cmd.args(["10", "openssl", "s_client", "-ign_eof", "-connect"])
        .arg(format!("{VIP}:{port}"));
    match sni {
        Some(s) => cmd.args(["-servername", s]),
        None => cmd.arg("-noservername"),
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"GET / HTTP/1.0\r\n\r\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if std::env::var_os("K8SLB_TEST_DEBUG").is_some() {
        eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    }
    let cn = text
        .lines()
        .find_map(|l| l.strip_prefix("subject="))
        .and_then(|s| s.split_once("CN"))
        .map_or("none".into(), |(_, cn)| {
            cn.trim_start_matches([' ', '=']).trim().to_string()
        });
    let body = text
        .split_once("HTTP/1.0 200 OK")
        .and_then(|(_, rest)| rest.split_once("\r\n\r\n"))
        .map_or("-".into(), |(_, b)| {
            b.chars().take_while(|c| c.is_ascii_lowercase()).collect()
        });
    (cn, body)
}

/// TLS terminated by the real HAProxy and nginx: each server name gets its listener's
/// certificate (exact before wildcard, any depth), the backend gets the plain request
/// (an HTTP/1.0 answerer, which would not understand a TLS handshake), names no route
/// takes and routes without a backend are closed after the handshake, and a listener
/// with one certificate for any name serves a client without SNI.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_terminate_tls_with_each_listeners_certificate_and_forward_plain_tcp() {
    support::require_root_and(&["haproxy", "nginx", "openssl"]);
    let routes = terminate_routes();
    let cases: [(u16, Option<&str>, &str, &str); 7] = [
        (9443, Some("a.example.com"), "default_term-a", "heavy"),
        (9443, Some("A.Example.COM"), "default_term-a", "heavy"),
        (9443, Some("x.example.com"), "default_term-wild", "light"),
        (9443, Some("x.y.example.com"), "", "light"),
        (9443, Some("closed.example.com"), "default_term-wild", "-"),
        (9443, Some("nope.example.net"), "", "-"),
        (9444, None, "default_term-any", "heavy"),
    ];
    // The model says the same (a route with a backend, or none).
    for (port, sni, _, body) in cases {
        let r = routes.route_stream(VIP.parse().unwrap(), port, StreamProtocol::Tls, sni);
        let to = r
            .and_then(|r| r.backends.first())
            .map_or("-".to_string(), |b| b.id.service.name.to_string());
        assert_eq!(to, body, "{port} {sni:?}");
    }
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtterm")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        for n in ["default_term-a", "default_term-wild", "default_term-any"] {
            self_signed(&o.secret_cert_dir, n);
        }
        let ns = support::Netns::new("k8slbtt");
        ns.ip(&format!("addr add {VIP}/32 dev lo"));
        let _backends = start_stream_backends(&ns, dir.path());
        let _child = serve_streams(proxy, &routes, &o, dir.path(), &ns);
        for (port, sni, cn, body) in cases {
            let (got_cn, got_body) = tls_exchange(&ns, port, sni);
            assert_eq!(got_body, body, "{proxy}: {port} {sni:?}");
            // A name no certificate is for gets the port's default (either proxy's
            // choice among the listener's own certificates): not checked.
            if !cn.is_empty() {
                assert_eq!(got_cn, cn, "{proxy}: {port} {sni:?}");
            }
            println!("{proxy}: {port} {sni:?} -> cn={got_cn} body={got_body}");
        }
    }
}

/// A terminating listener's certificate that is not on the node (yet) is left out of
/// the view as an HTTPS listener's is (else the checkers would refuse every tenant's
/// config); left without any, the listener refuses its connections.
#[test]
fn a_terminating_listeners_certificate_not_on_the_node_is_left_out() {
    let mut state = base_state();
    state.http = terminate_routes();
    let mut vo = ViewOptions::new(Provider::Haproxy);
    vo.interfaces
        .insert("default".parse().unwrap(), "eth0".parse().unwrap());
    vo.secret_certs = Some(
        [("default_term-wild".to_string(), String::new())]
            .into_iter()
            .collect(),
    );
    let v = view(&state, &"lb-1".parse().unwrap(), &vo).unwrap();
    let routes = &v.http.as_ref().unwrap().routes;
    let terminate = |port: u16| {
        routes
            .streams
            .iter()
            .find(|s| s.port == port)
            .and_then(|s| s.terminate.clone())
            .unwrap()
    };
    let t = terminate(9443);
    let stems: Vec<String> = t.certificates.iter().map(|c| c.file.stem()).collect();
    assert_eq!(stems, ["default_term-wild"]);
    assert_eq!(t.default_certificate, None);
    assert!(terminate(9444).certificates.is_empty());
    assert!(
        v.notes
            .iter()
            .any(|n| n.contains("default/term-a") && n.contains("is not on this node yet")),
        "{:?}",
        v.notes
    );
    let hp = HttpRenderer::embedded()
        .unwrap()
        .haproxy(routes, &options(&base_state()), &[])
        .unwrap();
    assert!(hp.text.contains(
        "bind 198.18.0.10:9444 transparent\n  mode tcp\n  tcp-request connection reject"
    ));
}

/// A renewed certificate of a terminating TLS listener (same file, new version) makes
/// both proxies reload (HAProxy's Runtime API update covers HTTPS listeners only), so
/// the new certificate is served; its version is in the config's certificate lines.
#[test]
fn a_terminating_listeners_renewed_certificate_is_a_reload() {
    use k8slb_actor::render::{is_structural, Config};
    let views = |proxy, version: &str| {
        let mut s = base_state();
        s.http = terminate_routes();
        for st in &mut s.http.streams {
            for c in st
                .terminate
                .iter_mut()
                .flat_map(|t| t.certificates.iter_mut())
            {
                if let CertFile::Secret { version: v, .. } = &mut c.file {
                    *v = version.to_string();
                }
            }
        }
        let mut vo = ViewOptions::new(proxy);
        vo.interfaces
            .insert("default".parse().unwrap(), "eth0".parse().unwrap());
        view(&s, &"lb-1".parse().unwrap(), &vo).unwrap()
    };
    for proxy in [Provider::Haproxy, Provider::Nginx] {
        let (a, b) = (
            views(proxy, "1111111111111111"),
            views(proxy, "2222222222222222"),
        );
        assert!(is_structural(Config::Proxy, &a, &b), "{proxy:?}");
        let text = Renderer::embedded()
            .unwrap()
            .render(&b)
            .unwrap()
            .proxy
            .unwrap();
        assert!(
            text.contains("# certificate default_term-wild version 2222222222222222"),
            "{proxy:?}"
        );
    }
}

/// What the mirror backend of [`real_proxies_mirror_copies_of_requests_as_the_client_sent_them`]
/// received: one entry per request, `<request line>\n<lowercase headers, sorted>\n<body>`.
static MIRRORED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Reads one HTTP/1 request whole (its `Content-Length` body), then answers its name.
fn read_request(c: &mut TcpStream) -> Option<String> {
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 16384];
    let head_end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_string();
    let mut lines = head.lines();
    let request_line = lines.next().unwrap_or_default().to_string();
    let mut headers: Vec<String> = lines.map(|l| l.to_ascii_lowercase()).collect();
    headers.sort();
    let len: usize = headers
        .iter()
        .find_map(|h| h.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = got[head_end + 4..].to_vec();
    while body.len() < len {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    Some(format!(
        "{request_line}\n{}\n{}",
        headers.join("\n"),
        String::from_utf8_lossy(&body)
    ))
}

fn answer_whole(mut c: TcpStream, name: &str) {
    if read_request(&mut c).is_some() {
        reply_name(c, name);
    }
}

fn record_mirrored(mut c: TcpStream, name: &str) {
    if let Some(r) = read_request(&mut c) {
        MIRRORED.lock().unwrap().push(r);
        reply_name(c, name);
    }
}

fn reply_name(mut c: TcpStream, name: &str) {
    let _ = write!(
        c,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{name}",
        name.len()
    );
}

/// RequestMirror through the real proxies: each request is answered by its backend, and
/// a copy of it as the client sent it (method, path and query, headers, body) reaches the
/// mirror backend; a `k8slb-mirror` header a client sends (HAProxy's internal routing of
/// copies) never picks where a copy goes, nor reaches a backend. A body the proxy does
/// not hold whole when the route is chosen (100 kB here) is copied by nginx (which reads
/// the whole body first) and not by HAProxy (which never makes the request wait for its
/// copy): the request itself is served all the same.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_mirror_copies_of_requests_as_the_client_sent_them() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let mut routes = split_routes(1, 0);
    let light: BackendId = "default/light:80".parse().unwrap();
    if let RouteAction::Forward { backends, .. } =
        &mut routes.listeners[0].virtual_hosts[0].rules[0].action
    {
        backends.truncate(1);
    }
    routes.listeners[0].virtual_hosts[0].rules[0]
        .filters
        .mirrors = vec![light];
    let big = "b".repeat(100_000);
    for proxy in ["haproxy", "nginx"] {
        MIRRORED.lock().unwrap().clear();
        let dir = tempfile::tempdir().unwrap();
        let o = traffic_options(dir.path());
        let ns = support::Netns::new("k8slbmr");
        for a in [HEAVY, LIGHT] {
            let a: SocketAddr = a.parse().unwrap();
            ns.ip(&format!("addr add {}/32 dev lo", a.ip()));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let _backends = StreamBackends {
            stop: stop.clone(),
            threads: vec![
                tcp_backend(&ns.name, HEAVY, stop.clone(), answer_whole, "heavy"),
                tcp_backend(&ns.name, LIGHT, stop.clone(), record_mirrored, "light"),
            ],
            _tls: vec![],
        };
        let _proxy = serve_in(&ns, proxy, &routes, &o, dir.path(), None);
        let curl = |args: &[&str], path: &str| {
            let out = ns
                .cmd("curl")
                .args(["-s", "--max-time", "5", "--resolve"])
                .arg(format!("split.example.com:80:{VIP}"))
                .args(args)
                .arg(format!("http://split.example.com{path}"))
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).to_string()
        };
        let body_file = dir.path().join("big");
        std::fs::write(&body_file, &big).unwrap();
        let big_arg = format!("@{}", body_file.display());
        let answers = [
            curl(
                &["-H", "x-a: one", "-H", "k8slb-mirror: rtb_default_heavy_80"],
                "/get?q=1",
            ),
            curl(&["-X", "POST", "--data-binary", "hello"], "/small"),
            curl(&["-X", "POST", "--data-binary", &big_arg], "/big"),
        ];
        assert_eq!(
            answers,
            ["heavy", "heavy", "heavy"],
            "{proxy}: the requests"
        );
        // The copies are sent on their own: wait for them.
        let want = if proxy == "haproxy" { 2 } else { 3 };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while MIRRORED.lock().unwrap().len() < want && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(300));
        let mut got = MIRRORED.lock().unwrap().clone();
        got.sort();
        let line = |p: &str| {
            got.iter()
                .find(|r| r.lines().next().is_some_and(|l| l.contains(p)))
                .cloned()
                .unwrap_or_else(|| panic!("{proxy}: no copy of {p} in {got:#?}"))
        };
        let get = line(" /get?q=1 ");
        assert!(get.starts_with("GET /get?q=1 HTTP/1."), "{proxy}: {get}");
        assert!(get.contains("\nx-a: one\n"), "{proxy}: {get}");
        assert!(
            get.contains("\nhost: split.example.com\n"),
            "{proxy}: {get}"
        );
        if proxy == "haproxy" {
            // As `option forwardfor` adds to the request (nginx: the admin's proxy
            // lines, only Host here).
            assert!(get.contains("\nx-forwarded-for: "), "{proxy}: {get}");
            // Its internal routing of copies: never the client's to set or to see.
            assert!(!get.contains("k8slb-mirror"), "{proxy}: {get}");
        }
        let small = line(" /small ");
        assert!(small.starts_with("POST /small HTTP/1."), "{proxy}: {small}");
        assert!(small.ends_with("\nhello"), "{proxy}: {small}");
        let copies_of_big = got.iter().filter(|r| r.contains(" /big ")).count();
        match proxy {
            "haproxy" => assert_eq!(copies_of_big, 0, "HAProxy never waits for a body"),
            _ => {
                assert_eq!(copies_of_big, 1, "nginx reads the body first");
                assert!(line(" /big ").ends_with(&big));
            }
        }
        assert_eq!(got.len(), want, "{proxy}: one copy per request: {got:#?}");
    }
}

/// [`verified_tls_routes`] with every HTTPS listener's client validation
/// `AllowInsecureFallback`.
fn fallback_tls_routes(dir: &Path) -> HttpRoutes {
    let mut routes = verified_tls_routes(dir);
    for t in routes.listeners.iter_mut().filter_map(|l| l.tls.as_mut()) {
        t.client_validation = k8slb_common::routes::ClientValidationMode::AllowInsecureFallback;
    }
    routes
}

/// AllowInsecureFallback renders as each proxy's optional verification (HAProxy's bind
/// options `verify optional ca-ignore-err all crt-ignore-err all`, nginx's
/// `ssl_verify_client optional_no_ca`) with the outcome told to the backends, and
/// passes haproxy -c and nginx -t; AllowValidOnly stays `verify required` / `on`.
#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn insecure_fallback_client_validation_renders_optional_verification_and_passes_the_daemons_checks()
{
    let dir = tempfile::tempdir().unwrap();
    let routes = fallback_tls_routes(dir.path());
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    let ca_file = first_ca_file(&routes, &o);
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    for line in [
        format!("ca-file {ca_file} verify optional ca-ignore-err all crt-ignore-err all alpn"),
        "http-request set-header K8slb-Client-Cert-Verify NONE unless { ssl_c_used }".into(),
        "http-request set-header K8slb-Client-Cert-Verify SUCCESS if { ssl_c_used } { ssl_c_verify 0 } { ssl_c_ca_err 0 } { ssl_c_err 0 }".into(),
        "http-request set-header K8slb-Client-Cert %[var(txn.k8slb_cc)] if { ssl_c_used }".into(),
    ] {
        assert!(hp.text.contains(&line), "{line}\n{}", hp.text);
    }
    assert!(
        !hp.text
            .contains(&format!("ca-file {ca_file} verify required alpn")),
        "{}",
        hp.text
    );
    let nx = r.nginx(&routes, &o).unwrap();
    for line in [
        "ssl_verify_client optional_no_ca;",
        "proxy_set_header K8slb-Client-Cert-Verify $k8slb_client_verify;",
        "proxy_set_header K8slb-Client-Cert $ssl_client_escaped_cert;",
    ] {
        assert!(nx.text.contains(line), "{line}\n{}", nx.text);
    }
    assert!(!nx.text.contains("ssl_verify_client on;"), "{}", nx.text);
    daemon_checks(&routes);
}

/// Every route frontend (HAProxy) and every location that proxies (nginx) deletes the
/// client certificate headers a client sends, whatever its listener: HTTP, HTTPS
/// without client validation, AllowValidOnly (which sets neither).
#[test]
fn every_listener_deletes_the_client_certificate_headers_a_client_sends() {
    let dir = tempfile::tempdir().unwrap();
    let r = HttpRenderer::embedded().unwrap();
    let o = HttpRenderOptions::default();
    for routes in [routes_of("tls-sni"), verified_tls_routes(dir.path())] {
        let hp = r.haproxy(&routes, &o, &[]).unwrap();
        for f in hp.text.split("\nfrontend ").skip(1) {
            if f.contains("accept-proxy") {
                continue; // a hop: its requests come from a frontend below
            }
            assert!(
                f.contains("http-request del-header K8slb-Client-Cert-Verify\n")
                    && f.contains("http-request del-header K8slb-Client-Cert\n"),
                "{f}"
            );
            assert!(!f.contains("set-header K8slb-Client-Cert"), "{f}");
        }
        let nx = r.nginx(&routes, &o).unwrap();
        for loc in nx.text.split("location ").skip(1) {
            if !loc.contains("proxy_pass") {
                continue;
            }
            assert!(
                loc.contains("proxy_set_header K8slb-Client-Cert-Verify \"\";")
                    && loc.contains("proxy_set_header K8slb-Client-Cert \"\";"),
                "{loc}"
            );
        }
        assert!(nx.text.contains("proxy_pass"), "{}", nx.text);
    }
}

/// `openssl` in `dir`, asserted to succeed.
fn openssl_in(dir: &Path, args: &[&str]) {
    let out = Command::new(binary("openssl"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA `<ca>.crt` / `<ca>.key` in `dir`.
fn make_ca(dir: &Path, ca: &str) {
    openssl_in(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={ca}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.crt"),
        ],
    );
}

/// A client certificate `<n>.crt` / `<n>.key` in `dir` signed by CA `ca`, valid from
/// `start` to `end` (`YYYYMMDDHHMMSSZ`; `openssl ca`, which takes any dates).
fn signed_client_cert(dir: &Path, n: &str, ca: &str, (start, end): (&str, &str)) {
    openssl_in(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={n}"),
            "-keyout",
            &format!("{n}.key"),
            "-out",
            &format!("{n}.csr"),
        ],
    );
    let db = dir.join(format!("{ca}-db"));
    std::fs::create_dir_all(&db).unwrap();
    std::fs::write(db.join("index.txt"), "").unwrap();
    if !db.join("serial").exists() {
        std::fs::write(db.join("serial"), "1000\n").unwrap();
    }
    let cfg = format!(
        "[ca]\ndefault_ca = c\n[c]\ndatabase = {d}/index.txt\nnew_certs_dir = {d}\nserial = {d}/serial\ndefault_md = sha256\npolicy = p\nunique_subject = no\n[p]\ncommonName = supplied\n",
        d = db.display()
    );
    std::fs::write(dir.join(format!("{ca}-ca.cnf")), cfg).unwrap();
    openssl_in(
        dir,
        &[
            "ca",
            "-batch",
            "-notext",
            "-config",
            &format!("{ca}-ca.cnf"),
            "-cert",
            &format!("{ca}.crt"),
            "-keyfile",
            &format!("{ca}.key"),
            "-in",
            &format!("{n}.csr"),
            "-out",
            &format!("{n}.crt"),
            "-startdate",
            start,
            "-enddate",
            end,
        ],
    );
}

/// RFC 3986 percent-decoding.
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// The base64 body of a PEM certificate, without its armour and line breaks.
fn pem_body(pem: &str) -> String {
    pem.lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<String>()
}

/// AllowInsecureFallback through the real HAProxy and nginx, real TLS handshakes
/// (curl): on a fallback listener a client without a certificate, with one of the
/// listener's CA, of another CA, self-signed, is let in, and the backend is told
/// `K8slb-Client-Cert-Verify` NONE / SUCCESS / FAILED / FAILED with the certificate
/// (URL-encoded PEM: the client's own, decoded); an expired one of the listener's CA
/// is let in by HAProxy (FAILED) and refused by nginx (the connection closed: nginx
/// refuses expired certificates even with optional_no_ca). A client's own copies of
/// both headers (a forged SUCCESS) never reach a backend: not through the fallback
/// listener, nor an AllowValidOnly one, nor plain HTTP.
#[test]
#[ignore = "needs root: real HAProxy and nginx in a network namespace; ./scripts/test.sh runs it"]
fn real_proxies_let_every_client_in_on_a_fallback_listener_and_tell_the_backend_unforgeably() {
    support::require_root_and(&["haproxy", "nginx", "openssl", "curl"]);
    let pki = tempfile::Builder::new()
        .prefix("k8slb-rtfallback-pki")
        .tempdir()
        .unwrap();
    let p = pki.path();
    make_ca(p, "right-ca");
    make_ca(p, "other-ca");
    let valid = ("20200101000000Z", "20991231000000Z");
    signed_client_cert(p, "good", "right-ca", valid);
    signed_client_cert(p, "stranger", "other-ca", valid);
    signed_client_cert(
        p,
        "expired",
        "right-ca",
        ("20200101000000Z", "20200102000000Z"),
    );
    self_signed(p, "selfie");
    let ca_pem = std::fs::read_to_string(p.join("right-ca.crt")).unwrap();
    // tls-sni's listeners (80, 443), and 443's copied to 8443 (AllowValidOnly) and
    // 9443 (AllowInsecureFallback), both with the right CA.
    let mut routes = routes_of("tls-sni");
    let ca = k8slb_common::routes::CaId::of(&ca_pem);
    routes.ca_bundles.insert(ca.clone(), ca_pem);
    let https = routes
        .listeners
        .iter()
        .find(|l| l.port == 443)
        .unwrap()
        .clone();
    for (port, mode) in [
        (
            8443,
            k8slb_common::routes::ClientValidationMode::AllowValidOnly,
        ),
        (
            9443,
            k8slb_common::routes::ClientValidationMode::AllowInsecureFallback,
        ),
    ] {
        let mut l = https.clone();
        l.port = port;
        let t = l.tls.as_mut().unwrap();
        t.client_ca = Some(ca.clone());
        t.client_validation = mode;
        routes.listeners.push(l);
    }
    routes.listeners.sort_by_key(|l| l.port);
    assert_eq!(routes.listeners[0].port, 80);
    let forged = [
        ("K8slb-Client-Cert-Verify", "SUCCESS"),
        ("K8slb-Client-Cert", "forged"),
    ];
    // (port, client certificate, what the backend saw: verify, and whose certificate).
    let cases: Vec<(u16, Option<&str>, &str, Option<&str>)> = vec![
        (80, None, "verify= cert=", None),
        (443, None, "verify= cert=", None),
        (8443, Some("good"), "verify= cert=", None),
        (9443, None, "verify=NONE cert=", None),
        (9443, Some("good"), "verify=SUCCESS cert=", Some("good")),
        (
            9443,
            Some("stranger"),
            "verify=FAILED cert=",
            Some("stranger"),
        ),
        (9443, Some("selfie"), "verify=FAILED cert=", Some("selfie")),
    ];
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::Builder::new()
            .prefix("k8slb-rtfallback")
            .tempdir()
            .unwrap();
        let o = traffic_options(dir.path());
        let ns = support::Netns::new("k8slbfb");
        ns.ip("link set lo up");
        // One echo backend on every endpoint address: what it got of both headers.
        let mut binds = String::new();
        let mut seen = std::collections::BTreeSet::new();
        for (a, _) in endpoints(&routes) {
            if seen.insert(a) {
                ns.ip(&format!("addr add {}/32 dev lo", a.ip()));
                binds.push_str(&format!("  bind {a}\n"));
            }
        }
        let echo = format!(
            "global\n  log stderr format short local0 err\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 5s\n  timeout server 5s\nfrontend echo\n{binds}  http-request return status 200 content-type text/plain lf-string \"verify=%[req.fhdr(k8slb-client-cert-verify)] cert=%[req.fhdr(k8slb-client-cert)]\"\n"
        );
        let file = dir.path().join("echo.cfg");
        std::fs::write(&file, echo).unwrap();
        let _echo = Killed(
            ns.cmd("haproxy")
                .arg("-db")
                .arg("-f")
                .arg(&file)
                .spawn()
                .unwrap(),
        );
        let _proxy = serve_in(&ns, proxy, &routes, &o, dir.path(), None);
        let get = |port: u16, cert: Option<&str>| {
            let scheme = if port == 80 { "http" } else { "https" };
            let mut cmd = ns.cmd("curl");
            cmd.args(["-s", "-k", "--max-time", "5", "-w", "\n%{http_code}"]);
            for (n, v) in forged {
                cmd.arg("-H").arg(format!("{n}: {v}"));
            }
            if let Some(c) = cert {
                cmd.arg("--cert")
                    .arg(p.join(format!("{c}.crt")))
                    .arg("--key")
                    .arg(p.join(format!("{c}.key")));
            }
            let out = cmd
                .arg("--resolve")
                .arg(format!("plain.bar.com:{port}:{VIP}"))
                .arg(format!("{scheme}://plain.bar.com:{port}/"))
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        // The echo backend may take a moment to listen.
        let mut got = String::new();
        let ok = support::wait_until(std::time::Duration::from_secs(10), || {
            got = get(80, None);
            got.ends_with("\n200")
        });
        assert!(ok, "{proxy}: port 80 got {got:?}");
        for (port, cert, want, whose) in &cases {
            let got = get(*port, *cert);
            let (body, status) = got.rsplit_once('\n').unwrap();
            assert_eq!(status, "200", "{proxy}: {port} {cert:?}: {got:?}");
            let (verify, sent) = body.split_once(" cert=").unwrap();
            assert_eq!(
                format!("{verify} cert="),
                *want,
                "{proxy}: {port} {cert:?}: {body}"
            );
            match whose {
                None => assert_eq!(sent, "", "{proxy}: {port} {cert:?}"),
                Some(c) => {
                    let pem = percent_decoded(sent);
                    assert!(
                        pem.starts_with("-----BEGIN CERTIFICATE-----\n")
                            && pem.ends_with("\n-----END CERTIFICATE-----\n"),
                        "{proxy}: {pem:?}"
                    );
                    let own = std::fs::read_to_string(p.join(format!("{c}.crt"))).unwrap();
                    assert_eq!(pem_body(&pem), pem_body(&own), "{proxy}: {c}");
                    assert!(
                        pem.lines().all(|l| l.len() <= 64),
                        "{proxy}: PEM lines of 64: {pem:?}"
                    );
                }
            }
        }
        // An expired certificate of the listener's CA: HAProxy lets it in (FAILED);
        // nginx refuses it (495, which the listener's error_page closes: no answer).
        let got = get(9443, Some("expired"));
        if proxy == "haproxy" {
            let (body, status) = got.rsplit_once('\n').unwrap();
            assert_eq!(status, "200", "{proxy}: expired: {got:?}");
            assert!(
                body.starts_with("verify=FAILED cert=-----BEGIN%20CERTIFICATE"),
                "{body}"
            );
        } else {
            assert!(got.ends_with("\n000"), "{proxy}: expired: {got:?}");
        }
        // AllowValidOnly still refuses what the fallback lets in.
        for cert in [None, Some("stranger"), Some("selfie"), Some("expired")] {
            let got = get(8443, cert);
            assert!(got.ends_with("\n000"), "{proxy}: 8443 {cert:?}: {got:?}");
        }
        // Nor does a TLS session made on the fallback listener without a certificate
        // resume on the AllowValidOnly one (TLS 1.2 session ids, TLS 1.3 tickets;
        // nginx 1.22's default ssl_protocols stop at TLSv1.2).
        let versions: &[&str] = if proxy == "haproxy" {
            &["-tls1_2", "-tls1_3"]
        } else {
            &["-tls1_2"]
        };
        for version in versions {
            let sess = dir.path().join(format!("sess{version}.pem"));
            let s_client = |port: u16, sess_arg: &str| {
                let mut c = ns.cmd(binary("openssl"));
                c.args([
                    "s_client",
                    version,
                    "-ign_eof",
                    "-servername",
                    "plain.bar.com",
                ])
                .arg("-connect")
                .arg(format!("{VIP}:{port}"))
                .arg(sess_arg)
                .arg(&sess)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null());
                let mut child = c.spawn().unwrap();
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(b"GET / HTTP/1.0\r\nHost: plain.bar.com\r\n\r\n")
                    .unwrap();
                let out = child.wait_with_output().unwrap();
                String::from_utf8_lossy(&out.stdout).into_owned()
            };
            let made = s_client(9443, "-sess_out");
            assert!(made.contains("verify=NONE"), "{proxy} {version}: {made}");
            // The session does resume where it was made (the check can see one).
            let again = s_client(9443, "-sess_in");
            assert!(again.contains("Reused,"), "{proxy} {version}: {again}");
            let resumed = s_client(8443, "-sess_in");
            assert!(
                !resumed.contains("200 OK") && !resumed.contains("Reused,"),
                "{proxy} {version}: resumed on AllowValidOnly: {resumed}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// TLS listeners of both modes on one port (TLSRouteModeMixed; served on both proxies).

/// The `streams` case with a port of both TLS modes, 9445: t.example.com (certificate
/// term-a) and *.w.example.com (term-wild) terminated to heavy and light (HTTP/1.0
/// answerers, which would not understand a TLS handshake), closed.example.com
/// terminated without a backend; p.example.com passed through to tls-a and
/// *.q.example.com to tls-b (`openssl s_server`s told apart by their certificates).
fn mixed_routes() -> HttpRoutes {
    let mut routes = stream_routes();
    let mut l = terminating(
        9445,
        vec![
            secret_cert("term-a", &["t.example.com"]),
            secret_cert("term-wild", &["*.w.example.com"]),
        ],
        vec![
            (Some("t.example.com"), vec!["default/heavy:80"]),
            (Some("*.w.example.com"), vec!["default/light:80"]),
            (Some("closed.example.com"), vec![]),
            (Some("p.example.com"), vec!["default/tls-a:443"]),
            (Some("*.q.example.com"), vec!["default/tls-b:443"]),
        ],
    );
    for r in &mut l.routes {
        let h = r.host.as_ref().unwrap().as_str();
        r.passthrough = h == "p.example.com" || h == "*.q.example.com";
    }
    routes.streams.push(l);
    routes.normalize();
    routes
}

/// The text of HAProxy section `header` (up to the next section).
fn section(text: &str, header: &str) -> String {
    let start = text
        .find(&format!("\n{header}\n"))
        .unwrap_or_else(|| panic!("no {header} in\n{text}"))
        + 1;
    let end = ["\nfrontend ", "\nbackend "]
        .iter()
        .filter_map(|k| text[start..].find(k))
        .min()
        .map_or(text.len(), |e| start + e);
    text[start..end].to_string()
}

#[test]
fn a_tls_port_of_both_modes_passes_through_and_hands_the_terminated_names_to_a_unix_socket_hop() {
    let routes = mixed_routes();
    let r = HttpRenderer::embedded().unwrap();
    let o = options(&base_state());
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    let front = section(&hp.text, "frontend rts_198_18_0_10_9445");
    // The port's frontend passes through: the ClientHello read, no TLS on its bind.
    assert!(
        front.contains("bind 198.18.0.10:9445 transparent\n")
            && front.contains("req.ssl_sni,lower")
            && !front.contains(" ssl "),
        "{front}"
    );
    assert!(front.contains("reject unless { var(txn.k8slb_a) -m beg rtt_ rth_ }"));
    let file = |name: &str| {
        hp.files
            .get(&format!("/run/k8slb/routes/{name}"))
            .unwrap_or_else(|| panic!("no {name} in {:?}", hp.files.keys()))
            .as_str()
    };
    assert_eq!(
        file("rts_198_18_0_10_9445.sni.map"),
        "closed.example.com x\np.example.com rtt_default_tls-a_443\nt.example.com rth_198_18_0_10_9445\n"
    );
    assert_eq!(
        file("rts_198_18_0_10_9445.suffixes.map"),
        ".q.example.com rtt_default_tls-b_443\n.w.example.com rth_198_18_0_10_9445\n"
    );
    // The hop: a unix socket in the hop directory (never the routes directory), the
    // PROXY header of the port's frontend taken, TLS terminated there.
    assert_eq!(
        section(&hp.text, "backend rth_198_18_0_10_9445").trim_end(),
        "backend rth_198_18_0_10_9445\n  mode tcp\n  server s unix@/run/k8slb/hop/rts_198_18_0_10_9445.sock send-proxy-v2"
    );
    let hop = section(&hp.text, "frontend rts_198_18_0_10_9445_t");
    assert!(
        hop.contains("\n  bind unix@/run/k8slb/hop/rts_198_18_0_10_9445.sock mode 600 accept-proxy ssl crt-list /run/k8slb/routes/rts_198_18_0_10_9445.crt-list\n"),
        "{hop}"
    );
    assert!(hop.contains("ssl_fc_sni,lower") && !hop.contains("inspect-delay"));
    // Only the terminated routes there.
    assert_eq!(
        file("rts_198_18_0_10_9445_t.sni.map"),
        "t.example.com rtt_default_heavy_80\n"
    );
    assert_eq!(
        file("rts_198_18_0_10_9445_t.suffixes.map"),
        ".w.example.com rtt_default_light_80\n"
    );
    // Ports of one mode have no hop.
    assert_eq!(hp.text.matches("send-proxy-v2").count(), 1);
    assert!(!section(&hp.text, "frontend rts_198_18_0_10_8443").contains("rth_"));

    // Its certificates not on the node (the view left them out): the terminated names
    // are closed at the ClientHello, no hop; the passed-through ones still served.
    let mut bare = routes.clone();
    for s in bare.streams.iter_mut().filter(|s| s.port == 9445) {
        let t = s.terminate.as_mut().unwrap();
        t.certificates.clear();
        t.default_certificate = None;
    }
    let hp_bare = r.haproxy(&bare, &o, &[]).unwrap();
    assert!(!hp_bare.text.contains("rts_198_18_0_10_9445_t"));
    assert!(!hp_bare.text.contains("send-proxy-v2"));
    assert_eq!(
        hp_bare.files["/run/k8slb/routes/rts_198_18_0_10_9445.sni.map"],
        "closed.example.com x\np.example.com rtt_default_tls-a_443\nt.example.com x\n"
    );

    // nginx: the port's server reads the ClientHello and proxies every connection with
    // a PROXY header to one of two servers on unix sockets in the hop directory, which
    // take the client's address from it.
    let nx = r.nginx(&routes, &o).unwrap();
    let t = &nx.stream_text;
    let sock = "/run/k8slb/hop/rts_198_18_0_10_9445_tls";
    assert!(
        t.contains(&format!(
            "upstream k8slb_hop_198_18_0_10_9445_tls_p {{\n    server unix:{sock}_p.sock;\n  }}"
        )),
        "{t}"
    );
    assert!(t.contains(&format!(
        "upstream k8slb_hop_198_18_0_10_9445_tls_t {{\n    server unix:{sock}_t.sock;\n  }}"
    )));
    assert!(t.contains("map $ssl_preread_server_name $k8slb_sni_198_18_0_10_9445_tls {\n    hostnames;\n    closed.example.com k8slb_sink;\n    p.example.com k8slb_hop_198_18_0_10_9445_tls_p;\n    t.example.com k8slb_hop_198_18_0_10_9445_tls_t;\n    *.q.example.com k8slb_hop_198_18_0_10_9445_tls_p;\n    *.w.example.com k8slb_hop_198_18_0_10_9445_tls_t;\n    default k8slb_sink;\n  }"), "{t}");
    assert!(t.contains("    listen 198.18.0.10:9445;\n    ssl_preread on;\n    proxy_half_close on;\n    proxy_protocol on;\n"), "{t}");
    assert!(t.contains(&format!(
        "    listen unix:{sock}_p.sock proxy_protocol;\n    set_real_ip_from unix:;\n    ssl_preread on;\n"
    )));
    assert!(t.contains(&format!(
        "    listen unix:{sock}_t.sock ssl proxy_protocol;\n    set_real_ip_from unix:;\n"
    )));
    // Only the terminated routes behind the terminating server, the passed-through
    // ones behind the other; ports of one mode send no header.
    assert!(t.contains("map $ssl_server_name $k8slb_sni_198_18_0_10_9445_tls_t {\n    hostnames;\n    t.example.com rts_198_18_0_10_9445_tls_r"), "{t}");
    assert!(!t.contains("$k8slb_sni_198_18_0_10_9445_tls_t {\n    hostnames;\n    p.example.com"));
    assert_eq!(t.matches("proxy_protocol on;").count(), 1);
}

/// `mixed_routes` with daemon_checks' certificates (default_foo, default_wild).
fn mixed_routes_checked() -> HttpRoutes {
    let mut routes = mixed_routes();
    for s in &mut routes.streams {
        if let Some(t) = &mut s.terminate {
            for c in &mut t.certificates {
                let wild = c.hosts.iter().any(|h| h.is_wildcard());
                c.file = secret_cert(if wild { "wild" } else { "foo" }, &[]).file;
            }
            t.default_certificate = Some(t.certificates[0].file.clone());
        }
    }
    routes
}

#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn a_tls_port_of_both_modes_passes_the_daemons_own_checks() {
    daemon_checks(&mixed_routes_checked());
}

/// `terminate_maxima` (64 listeners with hostnames of 253 characters on one port, 16
/// routes under each wildcard), with the routes of the exact-name listeners passed
/// through: half the listeners pass through, half terminate.
fn mixed_maxima() -> HttpRoutes {
    let mut routes = terminate_maxima();
    let s = routes.streams.iter_mut().find(|s| s.port == 9443).unwrap();
    let exact: Vec<String> = s
        .terminate
        .as_ref()
        .unwrap()
        .certificates
        .iter()
        .flat_map(|c| &c.hosts)
        .filter(|h| !h.is_wildcard())
        .map(|h| h.to_string())
        .collect();
    assert_eq!(exact.len(), 32);
    for r in &mut s.routes {
        r.passthrough = r
            .host
            .as_ref()
            .is_some_and(|h| exact.contains(&h.to_string()));
    }
    assert!(s.is_mixed());
    routes
}

#[test]
fn tls_ports_of_both_modes_at_the_crd_maxima_stay_within_the_proxies_limits() {
    let routes = mixed_maxima();
    let r = HttpRenderer::embedded().unwrap();
    let o = options(&base_state());
    let hp = r.haproxy(&routes, &o, &[]).unwrap();
    assert!(hp.text.contains("frontend rts_198_18_0_10_9443_t\n"));
    assert!(most_words(&hp.text) <= 64);
    let nx = r.nginx(&routes, &o).unwrap();
    assert!(nx
        .stream_text
        .contains("_9443_tls_t.sock ssl proxy_protocol;"));
    assert!(longest_word(&nx.stream_text) <= k8slb_common::routes::NGINX_MAX_TOKEN);
    for (f, t) in &hp.files {
        for l in t.lines() {
            assert!(
                l.split_whitespace().count() < 2048 && l.len() < 64 * 1024,
                "{f}: a line of {} words",
                l.split_whitespace().count()
            );
        }
    }
}

#[test]
#[ignore = "needs root: a network namespace for nginx -t (it binds the VIPs); ./scripts/test.sh runs it"]
fn tls_ports_of_both_modes_at_the_crd_maxima_pass_the_daemons_own_checks() {
    daemon_checks(&mixed_maxima());
}

/// What a proxy does with the port of both modes of `mixed_routes`, run as the actor
/// runs it: each terminated name gets its certificate and its backend the plain
/// request; each passed-through name reaches its TLS backend untouched (the backend's
/// own certificate); names no route takes, and a route without a backend, closed. The
/// callers' configs refuse any source but the client's in the internal frontends too
/// (HAProxy: a `tcpfront` line; nginx: `allow`), so the hop must keep the client's
/// address.
fn check_mixed_port(ns: &support::Netns, when: &str) {
    for (sni, cn, body) in [
        ("t.example.com", "default_term-a", "heavy"),
        ("T.Example.COM", "default_term-a", "heavy"),
        ("x.w.example.com", "default_term-wild", "light"),
        ("x.y.w.example.com", "", "light"),
    ] {
        let (got_cn, got_body) = tls_exchange(ns, 9445, Some(sni));
        assert_eq!((got_body.as_str(), when), (body, when), "{sni}");
        if !cn.is_empty() {
            assert_eq!(got_cn, cn, "{when}: {sni}");
        }
    }
    for (sni, cn) in [
        ("p.example.com", "tls-a"),
        ("x.q.example.com", "tls-b"),
        ("closed.example.com", "closed"),
        ("nope.example.net", "closed"),
    ] {
        assert_eq!(tls_cn(ns, 9445, Some(sni)), cn, "{when}: {sni}");
    }
    assert_eq!(tls_cn(ns, 9445, None), "closed", "{when}: no SNI");
}

/// A crash of HAProxy as the actor runs it: its master, workers and old workers
/// SIGKILLed (what they bound is left behind); returns once the actor has seen the
/// master exit.
fn crash_haproxy(h: &mut k8slb_actor::daemons::Haproxy) {
    use k8slb_actor::daemons::Daemon;
    let procs = h.show_proc().unwrap();
    for p in procs
        .master
        .iter()
        .chain(&procs.workers)
        .chain(&procs.old_workers)
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        support::wait_until(Duration::from_secs(5), || h.poll_exit().is_some()),
        "HAProxy still runs after SIGKILL"
    );
}

/// A wrapper that runs `program` in `ns` with the capabilities the DaemonSet's actor
/// container of that proxy has (`manifests/k8slb-<program>.yml`: ALL dropped, then
/// NET_ADMIN, NET_RAW, NET_BIND_SERVICE added, and for nginx SETUID, SETGID, CHOWN):
/// root without CAP_DAC_OVERRIDE, which enters only the directories its permissions
/// let it.
fn capped_wrapper(ns: &support::Netns, dir: &Path, program: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let caps = match program {
        "nginx" => "-all,+net_admin,+net_raw,+net_bind_service,+setuid,+setgid,+chown",
        _ => "-all,+net_admin,+net_raw,+net_bind_service",
    };
    let p = dir.join(format!("{program}-capped"));
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nexec ip netns exec {} setpriv --bounding-set={caps} {program} \"$@\"\n",
            ns.name
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
#[ignore = "needs root: real HAProxy in a network namespace; ./scripts/test.sh runs it"]
fn haproxy_serves_a_tls_port_of_both_modes_across_a_reload_and_a_restart_after_sigkill() {
    use k8slb_actor::daemons::{Daemon, Haproxy, Paths};
    support::require_root_and(&["haproxy", "openssl", "setpriv"]);
    let routes = mixed_routes();
    // The reference router agrees on where each name goes.
    for (sni, to) in [
        ("t.example.com", "heavy"),
        ("x.w.example.com", "light"),
        ("p.example.com", "tls-a"),
        ("x.q.example.com", "tls-b"),
    ] {
        let r = routes
            .route_stream(VIP.parse().unwrap(), 9445, StreamProtocol::Tls, Some(sni))
            .unwrap();
        assert_eq!(r.backends[0].id.service.name.as_str(), to);
    }
    let dir = tempfile::Builder::new()
        .prefix("k8slb-rtmix")
        .tempdir()
        .unwrap();
    let mut o = traffic_options(dir.path());
    o.tcpfront = vec!["tcp-request content reject unless { src 198.18.0.10 }"
        .parse()
        .unwrap()];
    for n in ["default_term-a", "default_term-wild"] {
        self_signed(&o.secret_cert_dir, n);
    }
    let work = dir.path().join("work");
    let paths = Paths::new(&work);
    k8slb_actor::daemons::make_private_dir(&o.hop_dir).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let ns = support::Netns::new("k8slbmx");
    ns.ip(&format!("addr add {VIP}/32 dev lo"));
    let _backends = start_stream_backends(&ns, dir.path());
    let hp = HttpRenderer::embedded()
        .unwrap()
        .haproxy(&routes, &o, &[])
        .unwrap();
    for (f, t) in &hp.files {
        std::fs::write(f, t).unwrap();
    }
    std::fs::write(
        paths.haproxy_cfg(),
        format!(
            "global\n  pidfile {}\n  stats socket {} mode 600 level admin expose-fd listeners\n  expose-experimental-directives\ndefaults\n  timeout connect 2s\n  timeout client 5s\n  timeout server 5s\n{}",
            paths.haproxy_pid().display(),
            paths.haproxy_runtime_socket().display(),
            hp.text
        ),
    )
    .unwrap();
    let mut h = Haproxy::new(capped_wrapper(&ns, dir.path(), "haproxy"), paths.clone());
    h.start().unwrap();
    let socket = o.hop_dir.join("rts_198_18_0_10_9445.sock");
    let mode = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(&o.hop_dir), 0o700);
    check_mixed_port(&ns, "after a start");

    h.reload().unwrap();
    check_mixed_port(&ns, "after a reload");

    // A crash: master and workers killed, the socket file left behind.
    crash_haproxy(&mut h);
    assert!(socket.exists(), "the crash leaves the socket file");
    h.start().unwrap();
    check_mixed_port(&ns, "after a restart after SIGKILL");
    h.stop(Duration::from_secs(2));
}

/// nginx with the port of both modes of `mixed_routes`, as the actor runs it
/// (`k8slb_actor::daemons::Nginx`, with the DaemonSet's capabilities): served after a
/// start, a reload, and a start after
/// SIGKILL (whose socket files the fresh start removes: nginx would not bind them). The
/// stream block allows the client's address only, so the internal servers, which take
/// it from the PROXY header, refuse a connection that lost it.
#[test]
#[ignore = "needs root: real nginx in a network namespace; ./scripts/test.sh runs it"]
fn nginx_serves_a_tls_port_of_both_modes_across_a_reload_and_a_restart_after_sigkill() {
    use k8slb_actor::daemons::{Daemon, Nginx, Paths};
    use std::os::unix::fs::MetadataExt;
    support::require_root_and(&["nginx", "openssl", "setpriv"]);
    let routes = mixed_routes();
    let dir = tempfile::Builder::new()
        .prefix("k8slb-nxmix")
        .tempdir()
        .unwrap();
    let work = dir.path().join("work");
    let paths = Paths::new(&work);
    std::fs::create_dir_all(&work).unwrap();
    let mut o = traffic_options(dir.path());
    o.hop_dir = paths.hop_dir();
    for n in ["default_term-a", "default_term-wild"] {
        self_signed(&o.secret_cert_dir, n);
    }
    let ns = support::Netns::new("k8slbnm");
    ns.ip(&format!("addr add {VIP}/32 dev lo"));
    let _backends = start_stream_backends(&ns, dir.path());
    let nx = HttpRenderer::embedded()
        .unwrap()
        .nginx(&routes, &o)
        .unwrap();
    std::fs::write(
        paths.nginx_conf(),
        format!(
            "load_module {};\npid {};\nerror_log {}/error.log;\nevents {{}}\nstream {{\n  allow {VIP};\n  deny all;\n{}\n}}\n",
            k8slb_actor::view::NGINX_STREAM_MODULE,
            paths.nginx_pid().display(),
            dir.path().display(),
            nx.stream_text
        ),
    )
    .unwrap();
    let mut h = Nginx::new(capped_wrapper(&ns, dir.path(), "nginx"), paths.clone());
    h.start().unwrap();
    let sockets = [
        paths.hop_dir().join("rts_198_18_0_10_9445_tls_p.sock"),
        paths.hop_dir().join("rts_198_18_0_10_9445_tls_t.sock"),
    ];
    // root's, the workers' group may enter it (and connect to the 0666 sockets), no one
    // else.
    let meta = std::fs::metadata(paths.hop_dir()).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o710);
    assert_eq!(meta.uid(), 0);
    let nogroup = nix::unistd::Group::from_name("nogroup").unwrap().unwrap();
    assert_eq!(meta.gid(), nogroup.gid.as_raw());
    assert!(sockets.iter().all(|s| s.exists()));
    check_mixed_port(&ns, "nginx after a start");
    // The pipeline's check (`nginx -t`, which binds) beside the running nginx leaves
    // its sockets alone.
    h.check(&paths.nginx_conf()).unwrap();
    assert!(sockets.iter().all(|s| s.exists()));
    check_mixed_port(&ns, "nginx after a check");

    h.reload().unwrap();
    check_mixed_port(&ns, "nginx after a reload");

    // A crash: master and workers killed, the socket files left behind.
    let master = h.pid().unwrap();
    let kids = Command::new("pgrep")
        .args(["-P", &master.to_string()])
        .output()
        .unwrap();
    let mut pids: Vec<i32> = String::from_utf8_lossy(&kids.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    pids.push(master as i32);
    for p in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        support::wait_until(Duration::from_secs(5), || h.poll_exit().is_some()),
        "nginx still runs after SIGKILL"
    );
    assert!(sockets.iter().all(|s| s.exists()), "the crash leaves them");
    h.start().unwrap();
    check_mixed_port(&ns, "nginx after a restart after SIGKILL");
    h.stop(Duration::from_secs(2));
}

/// The client address of [`hop_request`], apart from the VIP.
const HOP_CLIENT: &str = "198.18.0.20";

/// A `GET` of `host``path` with `header` (`name: value`) through the VIP from
/// [`HOP_CLIENT`]: `<status> <backend>` (the model's shape, [`expected_for`]) and the
/// echo backend's `xff=<X-Forwarded-For> verify=<K8slb-Client-Cert-Verify>`
/// ([`hop_haproxy_cfg`]).
fn hop_request(ns: &support::Netns, host: &str, path: &str, header: &str) -> (String, String) {
    let out = ns
        .cmd("curl")
        .args([
            "-s",
            "--max-time",
            "5",
            "-w",
            "\n%{http_code}",
            "--interface",
        ])
        .arg(HOP_CLIENT)
        .args(["-H", header, "-H", "K8slb-Client-Cert-Verify: SUCCESS"])
        .arg("--resolve")
        .arg(format!("{host}:80:{VIP}"))
        .arg(format!("http://{host}{path}"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    match (code, body.split_once(' ')) {
        ("200", Some((name, rest))) => (format!("200 {name}"), rest.trim().to_string()),
        _ => (code.to_string(), String::new()),
    }
}

/// haproxy.cfg as the actor runs it (master-worker, a runtime socket that hands the
/// listeners over on a reload) with `routes` and their endpoints: HAProxy frontends on
/// the endpoints' addresses (put on `ns`'s loopback) that answer `<service>
/// xff=<X-Forwarded-For> verify=<K8slb-Client-Cert-Verify>`, what reached them.
fn hop_haproxy_cfg(
    ns: &support::Netns,
    paths: &k8slb_actor::daemons::Paths,
    routes: &HttpRoutes,
    o: &HttpRenderOptions,
) {
    let hp = HttpRenderer::embedded()
        .unwrap()
        .haproxy(routes, o, &[])
        .unwrap();
    for (f, t) in &hp.files {
        std::fs::write(f, t).unwrap();
    }
    let mut cfg = format!(
        "global\n  pidfile {}\n  stats socket {} mode 600 level admin expose-fd listeners\n  expose-experimental-directives\ndefaults\n  timeout connect 2s\n  timeout client 5s\n  timeout server 5s\n",
        paths.haproxy_pid().display(),
        paths.haproxy_runtime_socket().display(),
    );
    for (a, name) in endpoints(routes) {
        let _ = ns
            .cmd("ip")
            .args(["addr", "add", &format!("{}/32", a.ip()), "dev", "lo"])
            .output();
        let slug = a.to_string().replace(['.', ':'], "_");
        cfg.push_str(&format!(
            "\nfrontend ep_{slug}\n  bind {a}\n  mode http\n  http-request return status 200 content-type text/plain lf-string \"{name} xff=%[req.hdr(x-forwarded-for)] verify=%[req.hdr(k8slb-client-cert-verify)]\"\n"
        ));
    }
    cfg.push_str(&hp.text);
    std::fs::write(paths.haproxy_cfg(), cfg).unwrap();
}

/// A connection to the internal socket `target` (a path, or `@<name>` for an abstract
/// one) from `ns`, as root or, with `nobody`, as uid and gid 65534 without supplementary
/// groups, sending what a hostile local process would: a PROXY v2 header that claims
/// the client 198.19.255.7, then a request to `host``path` (with `header`) that claims
/// the same in X-Forwarded-For and a verified client certificate. `answered <body>` or
/// `refused <errno>`.
fn forge_through_hop(
    ns: &support::Netns,
    target: &str,
    nobody: bool,
    host: &str,
    path: &str,
    header: &str,
) -> String {
    const SCRIPT: &str = r#"
import socket, sys
target, host, path, header = sys.argv[1:5]
# HAProxy's abns@ names fill the whole sun_path, NUL-padded.
addr = ("\0" + target[1:]).encode().ljust(108, b"\0") if target.startswith("@") else target
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
try:
    s.connect(addr)
except OSError as e:
    print("refused", e.errno)
    sys.exit(0)
forged = socket.inet_aton("198.19.255.7")
proxy = b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c" + forged + socket.inet_aton("198.18.0.10") + (4444).to_bytes(2, "big") + (80).to_bytes(2, "big")
req = ("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\nX-Forwarded-For: 198.19.255.7\r\nK8slb-Client-Cert-Verify: SUCCESS\r\nConnection: close\r\n\r\n" % (path, host, header)).encode()
s.sendall(proxy + req)
data = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    data += d
print("answered", data.decode(errors="replace").split("\r\n\r\n", 1)[-1].strip())
"#;
    let mut cmd = ns.cmd("setpriv");
    if nobody {
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    }
    let out = cmd
        .args([
            "env",
            "PATH=/usr/bin:/bin",
            "python3",
            "-c",
            SCRIPT,
            target,
            host,
            path,
            header,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The unix permissions of `p`.
fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The routes of the `conditions` fixture without what the route `ns/name` contributed,
/// as the actor's quarantine serves them when that route's part is refused
/// ([`k8slb_common::owners::without`]).
fn routes_without(routes: &HttpRoutes, ns: &str, name: &str) -> HttpRoutes {
    let mut state = base_state();
    state.http = routes.clone();
    let owner = routes
        .listeners
        .iter()
        .flat_map(|l| &l.virtual_hosts)
        .flat_map(|v| &v.rules)
        .filter_map(|r| r.owner.clone())
        .find(|o| o.to_string().ends_with(&format!("{ns}/{name}")))
        .unwrap_or_else(|| panic!("no rule of {ns}/{name}"));
    k8slb_common::owners::without(&state, &std::collections::BTreeSet::from([owner])).http
}

/// The conditional hosts' hops of HAProxy (a virtual host whose rules match on more than
/// the path has a frontend of its own, reached through a unix socket with a PROXY v2
/// header) through the whole life of the proxy, as the actor runs it
/// (`k8slb_actor::daemons::Haproxy`, with the DaemonSet's capabilities): a first start;
/// a reload where a hop goes (the quarantine's config without one route's part: its
/// socket takes no connection any more); a reload where a socket changes host (renamed:
/// `_v1` is another host's) and one where a hop comes back; a start after SIGKILL over
/// the socket files left behind. At each step every request answers as the model says,
/// the client's address reaches the backend in X-Forwarded-For, and every live hop is a
/// `mode 600` socket in the 0700 hop directory.
#[test]
#[ignore = "needs root: real HAProxy in a network namespace; ./scripts/test.sh runs it"]
fn haproxy_host_hops_are_private_unix_sockets_across_reloads_a_quarantine_and_a_restart_after_sigkill(
) {
    use k8slb_actor::daemons::{Daemon, Haproxy, Paths};
    support::require_root_and(&["haproxy", "openssl", "setpriv", "curl", "python3"]);
    let full = gateway_routes_of("conditions");
    let dir = tempfile::Builder::new()
        .prefix("k8slb-rthop")
        .tempdir()
        .unwrap();
    let work = dir.path().join("work");
    let paths = Paths::new(&work);
    std::fs::create_dir_all(&work).unwrap();
    let mut o = traffic_options(dir.path());
    o.hop_dir = paths.hop_dir();
    k8slb_actor::daemons::make_private_dir(&o.hop_dir).unwrap();
    let ns = support::Netns::new("k8slbhp");
    ns.ip(&format!("addr add {VIP}/32 dev lo"));
    ns.ip(&format!("addr add {HOP_CLIENT}/32 dev lo"));
    let v1 = paths.hop_dir().join("rtv_198_18_0_10_80_v1.sock");
    let v2 = paths.hop_dir().join("rtv_198_18_0_10_80_v2.sock");
    let app = ("app.example.com", "/api", "X-Env: canary");
    let cond = ("cond.example.com", "/x", "x-team: a");
    let check = |routes: &HttpRoutes, live: &[&Path], dead: &[&Path], when: &str| {
        assert_eq!(mode_of(&paths.hop_dir()), 0o700, "{when}");
        for s in live {
            assert_eq!(mode_of(s), 0o600, "{when}: {}", s.display());
        }
        for (host, path, header) in [app, cond] {
            let (name, value) = header.split_once(": ").unwrap();
            let headers = [(name, value)];
            let req = Request {
                host,
                path,
                method: "GET",
                headers: &headers,
                query: &[],
            };
            let want = expected_for(routes, 80, false, &req);
            let (got, echoed) = hop_request(&ns, host, path, header);
            assert_eq!(got, want, "{when}: {host}{path}");
            if got.starts_with("200 ") {
                // The listener's frontend added the client's address and dropped the
                // client's K8slb-Client-Cert-Verify before the hop.
                assert_eq!(
                    echoed,
                    format!("xff={HOP_CLIENT} verify="),
                    "{when}: {host}"
                );
            }
        }
        // A hop gone: HAProxy leaves its socket file, where nothing listens any more
        // (ECONNREFUSED, even for root; ENOENT were the file removed).
        for s in dead {
            let ok = support::wait_until(Duration::from_secs(5), || {
                let got = forge_through_hop(&ns, s.to_str().unwrap(), false, app.0, app.1, app.2);
                got == "refused 111" || got == "refused 2"
            });
            assert!(ok, "{when}: {} still takes connections", s.display());
        }
    };

    hop_haproxy_cfg(&ns, &paths, &full, &o);
    let mut h = Haproxy::new(capped_wrapper(&ns, dir.path(), "haproxy"), paths.clone());
    h.start().unwrap();
    check(&full, &[&v1, &v2], &[], "after a start");

    // The quarantine leaves the route of cond.example.com out: its hop goes.
    let quarantined = routes_without(&full, "default", "only-conditional");
    hop_haproxy_cfg(&ns, &paths, &quarantined, &o);
    h.reload().unwrap();
    check(&quarantined, &[&v1], &[&v2], "after a reload without a hop");

    // Without app.example.com's route, cond.example.com's host is the first: `_v1`.
    let renamed = routes_without(&full, "default", "canary");
    hop_haproxy_cfg(&ns, &paths, &renamed, &o);
    h.reload().unwrap();
    check(
        &renamed,
        &[&v1],
        &[&v2],
        "after a reload that renames a hop",
    );

    hop_haproxy_cfg(&ns, &paths, &full, &o);
    h.reload().unwrap();
    check(&full, &[&v1, &v2], &[], "after a reload that adds a hop");

    // A crash: master and workers killed, the socket files left behind.
    crash_haproxy(&mut h);
    assert!(
        v1.exists() && v2.exists(),
        "the crash leaves the socket files"
    );
    h.start().unwrap();
    check(&full, &[&v1, &v2], &[], "after a restart after SIGKILL");
    h.stop(Duration::from_secs(2));
}

/// What a hostile local process could do to a conditional host's hop, were it reachable:
/// claim any client address (a PROXY v2 header) and headers the listener's frontend
/// drops (X-Forwarded-For, K8slb-Client-Cert-Verify), past its checks; through
/// RequestMirror's frontend, send any request to any route backend it names. Both are
/// unix sockets, `mode 600` in the 0700 hop directory (its parents open to all here),
/// never abstract sockets (which have no permissions and which any process of the
/// node's network namespace reaches): a process of another uid cannot connect, while a
/// real client through the listener gets its own address in X-Forwarded-For. (As root,
/// the test's control, the same bytes are answered: what the permissions keep out.)
#[test]
#[ignore = "needs root: real HAProxy in a network namespace; ./scripts/test.sh runs it"]
fn an_unprivileged_local_process_cannot_forge_a_client_address_through_a_host_hop() {
    use k8slb_actor::daemons::{Daemon, Haproxy, Paths};
    support::require_root_and(&["haproxy", "openssl", "setpriv", "curl", "python3"]);
    let mut routes = gateway_routes_of("conditions");
    // And RequestMirror's internal frontend, which routes by a request header.
    let plain = routes.listeners[0]
        .virtual_hosts
        .iter_mut()
        .find(|v| {
            v.host
                .as_ref()
                .is_some_and(|h| h.as_str() == "plain.example.com")
        })
        .unwrap();
    plain.rules[0].filters.mirrors = vec!["default/nginx-service:80".parse().unwrap()];
    let dir = tempfile::Builder::new()
        .prefix("k8slb-rthopx")
        .tempdir()
        .unwrap();
    {
        // Only the hop directory's and the sockets' own permissions keep others out.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let work = dir.path().join("work");
    let paths = Paths::new(&work);
    std::fs::create_dir_all(&work).unwrap();
    let mut o = traffic_options(dir.path());
    o.hop_dir = paths.hop_dir();
    k8slb_actor::daemons::make_private_dir(&o.hop_dir).unwrap();
    let ns = support::Netns::new("k8slbhx");
    ns.ip(&format!("addr add {VIP}/32 dev lo"));
    ns.ip(&format!("addr add {HOP_CLIENT}/32 dev lo"));
    hop_haproxy_cfg(&ns, &paths, &routes, &o);
    let mut h = Haproxy::new(capped_wrapper(&ns, dir.path(), "haproxy"), paths.clone());
    h.start().unwrap();
    let (host, path, header) = ("app.example.com", "/api", "X-Env: canary");

    // A real client: its own address, never what it claims.
    assert_eq!(
        hop_request(&ns, host, path, header),
        (
            "200 nginx-service1".to_string(),
            format!("xff={HOP_CLIENT} verify=")
        )
    );
    // Nothing to reach without a path: no abstract socket of ours in the namespace.
    for name in ["@k8slb_rtv_198_18_0_10_80_v1", "@k8slb_mirror"] {
        assert_eq!(
            forge_through_hop(&ns, name, true, host, path, header),
            "refused 111",
            "{name}: ECONNREFUSED"
        );
    }
    let unix = ns.cmd("cat").arg("/proc/net/unix").output().unwrap();
    let unix = String::from_utf8_lossy(&unix.stdout);
    assert!(!unix.contains("@k8slb"), "{unix}");
    // The sockets: `mode 600` in the 0700 directory, whose parents anyone may enter.
    let hop = paths.hop_dir().join("rtv_198_18_0_10_80_v1.sock");
    let mirror = paths.hop_dir().join("k8slb_mirror.sock");
    assert_eq!(mode_of(&paths.hop_dir()), 0o700);
    assert_eq!(mode_of(&work), 0o755);
    for s in [&hop, &mirror] {
        assert_eq!(mode_of(s), 0o600, "{}", s.display());
        assert!(unix.contains(s.to_str().unwrap()), "{unix}");
        assert_eq!(
            forge_through_hop(&ns, s.to_str().unwrap(), true, host, path, header),
            "refused 13",
            "{}: EACCES",
            s.display()
        );
    }
    // The control: the same bytes from root, which may enter the directory.
    assert_eq!(
        forge_through_hop(&ns, hop.to_str().unwrap(), false, host, path, header),
        "answered nginx-service1 xff=198.19.255.7 verify=SUCCESS"
    );
    h.stop(Duration::from_secs(2));
}

/// Every internal hop of HAProxy (the conditional hosts' frontends, RequestMirror's, a
/// TLS port of both modes' terminating one) is a unix socket in the hop directory,
/// bound `mode 600`, never an abstract socket (`abns@`, which any process of the node's
/// network namespace may connect to); each has its own name; the hops that take a
/// PROXY header are reached with one, and the mirror's Lua action sends its copies to
/// the mirror frontend's socket.
#[test]
fn haproxy_binds_every_internal_hop_on_a_mode_600_unix_socket_in_the_hop_dir() {
    let o = options(&base_state());
    let hop = "unix@/run/k8slb/hop/";
    let mut binds = std::collections::BTreeSet::new();
    for (what, routes) in [
        ("conditions", gateway_routes_of("conditions")),
        ("mirror", mirrored_routes()),
        ("mixed", mixed_routes()),
    ] {
        let hp = HttpRenderer::embedded()
            .unwrap()
            .haproxy(&routes, &o, &[])
            .unwrap();
        assert!(!hp.text.contains("abns@"), "{what}: {}", hp.text);
        let mut servers = Vec::new();
        for l in hp.text.lines().map(str::trim) {
            if let Some(rest) = l.strip_prefix("bind unix@") {
                let (socket, opts) = rest.split_once(' ').unwrap();
                assert!(l.starts_with(&format!("bind {hop}")), "{what}: {l}");
                assert!(socket.ends_with(".sock"), "{what}: {l}");
                assert!(opts.starts_with("mode 600"), "{what}: {l}");
                assert!(binds.insert(socket.to_string()), "{what}: {socket} twice");
            } else if let Some(rest) = l.strip_prefix("server s unix@") {
                assert!(l.starts_with(&format!("server s {hop}")), "{what}: {l}");
                assert!(rest.ends_with(".sock send-proxy-v2"), "{what}: {l}");
                servers.push(rest.split_once(' ').unwrap().0.to_string());
            }
        }
        // Each PROXY hop: a bind `accept-proxy` and one server on it.
        for s in &servers {
            assert!(
                hp.text
                    .contains(&format!("bind unix@{s} mode 600 accept-proxy")),
                "{what}: {s}"
            );
        }
        let want = match what {
            "conditions" => 2,
            "mirror" => 0,
            _ => 1,
        };
        let proxied = hp.text.matches("accept-proxy").count();
        assert_eq!(proxied, want, "{what}: {}", hp.text);
        assert_eq!(servers.len(), want, "{what}: {}", hp.text);
        if what == "mirror" {
            let lua = &hp.files["/run/k8slb/routes/k8slb-mirror.lua"];
            assert!(
                lua.contains("\nlocal SOCKET = \"unix@/run/k8slb/hop/k8slb_mirror.sock\"\n"),
                "{lua}"
            );
            assert!(
                hp.text.contains(
                    "\nfrontend k8slb_mirror\n  bind unix@/run/k8slb/hop/k8slb_mirror.sock mode 600\n"
                ),
                "{}",
                hp.text
            );
        }
    }
    assert_eq!(binds.len(), 4, "{binds:?}");
}

/// A hop directory whose sockets' paths would not fit a unix socket address (107 bytes)
/// is refused with a render error that says so, whichever hop needs it: never a config
/// HAProxy would refuse (or bind elsewhere).
#[test]
fn a_hop_dir_too_long_for_a_unix_socket_path_is_a_render_error() {
    let mut o = options(&base_state());
    o.hop_dir = PathBuf::from(format!("/{}", "d".repeat(90)));
    for (what, routes) in [
        ("conditions", gateway_routes_of("conditions")),
        ("mirror", mirrored_routes()),
        ("mixed", mixed_routes()),
    ] {
        let err = HttpRenderer::embedded()
            .unwrap()
            .haproxy(&routes, &o, &[])
            .err()
            .unwrap_or_else(|| panic!("{what}: rendered"));
        assert!(
            err.to_string()
                .contains("is longer than a unix socket path may be (107 bytes)"),
            "{what}: {err}"
        );
    }
}
