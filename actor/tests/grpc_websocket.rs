//! gRPC and WebSocket through the real HAProxy and nginx, rendered from the route model
//! (the routes of Ingresses and HTTPRoutes alike): a gRPC backend is a Service port with
//! `appProtocol: kubernetes.io/h2c` ([`BackendProtocol::H2c`]), a WebSocket backend any
//! HTTP/1.1 one. The gRPC echo server and client and the upgrade echo are the `tests`
//! crate's ([`k8slb_tests::grpc`]).
//!
//! Root tests (a network namespace each, the VIP and the endpoints on its loopback);
//! `apt-get install -y haproxy nginx iproute2 curl`.

mod support;

use k8slb_actor::render::{HttpRenderOptions, HttpRenderer};
use k8slb_common::routes::{
    BackendId, BackendProtocol, BackendState, HttpRoutes, Listener, ListenerProtocol, PathMatch,
    RouteAction, RouteMatch, RouteRule, VirtualHost,
};
use k8slb_common::state::Endpoint;
use k8slb_tests::grpc::{self, PodContext, Upgraded};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

const VIP: &str = "198.18.0.10";
const GRPC_EP: &str = "198.18.1.1:9000";
const WS_EP: &str = "198.18.1.2:8080";
const T: Duration = Duration::from_secs(5);

fn backend(key: &str) -> BackendId {
    key.parse().unwrap()
}

fn state(ep: &str, protocol: BackendProtocol) -> BackendState {
    let a: SocketAddr = ep.parse().unwrap();
    BackendState {
        endpoints: vec![Endpoint {
            ip: a.ip(),
            port: a.port(),
            draining: false,
        }],
        stickiness: None,
        protocol,
        tls: None,
    }
}

fn host(name: &str, to: &BackendId) -> VirtualHost {
    VirtualHost::new(
        Some(name.parse().unwrap()),
        vec![RouteRule::new(
            RouteMatch::on_path(PathMatch::prefix(&"/".parse().unwrap())),
            RouteAction::forward(to.clone()),
        )],
    )
}

fn listener(port: u16, hosts: Vec<VirtualHost>) -> Listener {
    Listener {
        ip: VIP.parse().unwrap(),
        port,
        protocol: ListenerProtocol::Http,
        tls: None,
        virtual_hosts: hosts,
        default_action: None,
        default_owner: None,
    }
}

/// Port 80: `grpc.example` (h2c) and `ws.example` (HTTP/1.1) on one listener; port 81:
/// `grpc.example` alone.
fn routes() -> HttpRoutes {
    let (g, w) = (backend("default/grpc:9000"), backend("default/ws:8080"));
    let mut r = HttpRoutes {
        listeners: vec![
            listener(80, vec![host("grpc.example", &g), host("ws.example", &w)]),
            listener(81, vec![host("grpc.example", &g)]),
        ],
        ..HttpRoutes::default()
    };
    r.backends.insert(g, state(GRPC_EP, BackendProtocol::H2c));
    r.backends.insert(w, state(WS_EP, BackendProtocol::Http));
    r.normalize();
    r
}

fn options(dir: &Path) -> HttpRenderOptions {
    // The internal hops' sockets (HAProxy: hosts whose rules match on more than the
    // path), 0700 as the actor makes it.
    let hop_dir = dir.join("hop");
    k8slb_actor::daemons::make_private_dir(&hop_dir).unwrap();
    HttpRenderOptions {
        files_dir: dir.to_path_buf(),
        hop_dir,
        // The pool certificate of tls_routes (certificate).
        pool_cert_dir: dir.to_path_buf(),
        // The shipped lines (proxy_http_version 1.1 among them).
        nginx_proxy: k8slb_common::config::default_nginx().proxy,
        ..HttpRenderOptions::default()
    }
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn enter(ns: &str) {
    let f = std::fs::File::open(Path::new("/run/netns").join(ns)).unwrap();
    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
}

/// Runs `f` on a thread inside `ns`.
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

/// Binds `addr` inside `ns` (the socket stays in it whatever thread serves it).
fn bind_in(ns: &support::Netns, addr: &str) -> TcpListener {
    in_ns(ns, || TcpListener::bind(addr).unwrap())
}

/// The proxy with `routes`, the echo servers on the endpoints; the notes of the render.
fn serve(
    proxy: &str,
    routes: &HttpRoutes,
    dir: &Path,
) -> (support::Netns, Killed, grpc::EchoServer, Vec<String>) {
    let ns = support::Netns::new("k8slbgrpc");
    ns.ip(&format!("addr add {VIP}/32 dev lo"));
    for ep in [GRPC_EP, WS_EP] {
        let a: SocketAddr = ep.parse().unwrap();
        ns.ip(&format!("addr add {}/32 dev lo", a.ip()));
    }
    let echo = grpc::echo_server(
        bind_in(&ns, GRPC_EP),
        PodContext {
            namespace: "default".into(),
            service_name: "grpc".into(),
            pod: "grpc-0".into(),
            ..Default::default()
        },
    )
    .unwrap();
    grpc::upgrade_backend(bind_in(&ns, WS_EP), "ws");
    let o = options(dir);
    let r = HttpRenderer::embedded().unwrap();
    let (child, notes) = if proxy == "haproxy" {
        let hp = r.haproxy(routes, &o, &[]).unwrap();
        for (f, t) in &hp.files {
            std::fs::write(f, t).unwrap();
        }
        let cfg = format!(
            "global\n  expose-experimental-directives\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n  timeout tunnel 1h\n{}",
            hp.text
        );
        let file = dir.join("haproxy.cfg");
        std::fs::write(&file, &cfg).unwrap();
        let c = ns
            .cmd("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .spawn()
            .unwrap();
        (Killed(c), hp.notes)
    } else {
        let nx = r.nginx(routes, &o).unwrap();
        let d = dir.display();
        let mut cfg = format!(
            "pid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n  access_log off;\n"
        );
        for l in k8slb_actor::render::nx_http_base(&[]) {
            cfg.push_str(&format!("  {l}\n"));
        }
        cfg.push_str(&nx.text);
        cfg.push_str("\n}\n");
        let file = dir.join("nginx.conf");
        std::fs::write(&file, &cfg).unwrap();
        let c = ns
            .cmd("nginx")
            .args(["-g", "daemon off;", "-p"])
            .arg(dir)
            .arg("-c")
            .arg(&file)
            .spawn()
            .unwrap();
        (Killed(c), nx.notes)
    };
    let up = support::wait_until(Duration::from_secs(10), || {
        in_ns(&ns, || {
            routes
                .listeners
                .iter()
                .all(|l| std::net::TcpStream::connect((VIP, l.port)).is_ok())
        })
    });
    assert!(up, "{proxy} did not listen on {VIP}");
    (ns, child, echo, notes)
}

fn vip(port: u16) -> SocketAddr {
    SocketAddr::new(VIP.parse().unwrap(), port)
}

#[test]
#[ignore = "needs root: network namespaces, real haproxy and nginx"]
fn grpc_calls_reach_an_h2c_backend_through_both_proxies() {
    support::require_root_and(&["haproxy", "nginx", "ip"]);
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::tempdir().unwrap();
        let (ns, _p, _echo, notes) = serve(proxy, &routes(), dir.path());
        in_ns(&ns, || {
            let echo = grpc::method_path("Echo");
            let r = grpc::call_blocking(vip(81), "grpc.example", &echo, &[("x-k", "v")], T)
                .unwrap_or_else(|e| panic!("{proxy}: {e}"));
            assert_eq!(r.grpc_status, Some(0), "{proxy}: {r:?}");
            let a = r.assertions.unwrap();
            assert_eq!(a.fully_qualified_method, echo, "{proxy}");
            assert_eq!(a.context.pod, "grpc-0", "{proxy}");
            assert_eq!(a.header("x-k"), vec!["v"], "{proxy}: metadata passes");
            assert_eq!(a.authority, "grpc.example", "{proxy}: :authority passes");
            // An unimplemented method's status passes (a trailers-only answer).
            let r = grpc::call_blocking(
                vip(81),
                "grpc.example",
                &grpc::method_path("EchoThree"),
                &[],
                T,
            )
            .unwrap();
            assert_eq!(r.grpc_status, Some(12), "{proxy}: {r:?}");
            // A stream: messages go back and forth on one call.
            let mut s = grpc::GrpcStream::open(vip(81), "grpc.example", T).unwrap();
            for i in 0..3u8 {
                assert_eq!(&s.ping(&[i; 4], T).unwrap()[..], &[i; 4], "{proxy}");
            }
        });
        // Port 80 mixes an h2c and an HTTP/1.1 backend: HAProxy takes h2c there too;
        // nginx (before 1.25.1) cannot take both on one cleartext port and says so.
        let mixed = in_ns(&ns, || {
            grpc::call_blocking(vip(80), "grpc.example", &grpc::method_path("Echo"), &[], T)
        });
        if proxy == "haproxy" {
            assert_eq!(mixed.unwrap().grpc_status, Some(0));
        } else {
            assert!(mixed.is_err(), "nginx: {mixed:?}");
            assert!(
                notes.iter().any(|n| n.contains("198.18.0.10:80")
                    && n.contains("h2c and HTTP/1.1 on one cleartext port")),
                "{notes:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs root: network namespaces, real haproxy and nginx"]
fn websocket_upgrades_pass_both_proxies_and_plain_requests_still_do() {
    support::require_root_and(&["haproxy", "nginx", "ip", "curl"]);
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::tempdir().unwrap();
        let (ns, _p, _echo, _) = serve(proxy, &routes(), dir.path());
        in_ns(&ns, || {
            let mut u = Upgraded::open(vip(80), "ws.example", "/chat")
                .unwrap_or_else(|e| panic!("{proxy}: no 101: {e}"));
            for m in [&b"hello"[..], b"again", b"\x00\x01binary"] {
                assert_eq!(u.ping(m, T).unwrap(), m, "{proxy}");
            }
        });
        let plain = ns
            .cmd("curl")
            .args(["-s", "--max-time", "3", "-H", "Host: ws.example"])
            .arg(format!("http://{VIP}/"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&plain.stdout),
            "backend=ws\n",
            "{proxy}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// GRPCRoute through the real proxies: the GATEWAY-GRPC core tests' routes (Gateway API
// v1.6.1 conformance/tests/grpcroute-*.yaml, transcribed), translated by the real
// Gateway API translation, rendered, and called with gRPC.

const INFRA_BASE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: same-namespace, namespace: gateway-conformance-infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: http, port: 80, protocol: HTTP, allowedRoutes: { namespaces: { from: Same } } }
"#;

/// The three gRPC echo backends: Service `grpc-infra-backend-v<n>` port 8080, its one
/// endpoint `198.18.2.<n>:9000`.
fn grpc_backends_yaml() -> String {
    let mut out = String::new();
    for n in 1..=3 {
        out.push_str(&format!(
            r#"
---
apiVersion: v1
kind: Service
metadata: {{ namespace: gateway-conformance-infra, name: grpc-infra-backend-v{n} }}
spec: {{ type: ClusterIP, ports: [{{ port: 8080, targetPort: 9000 }}] }}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{ namespace: gateway-conformance-infra, name: grpc-infra-backend-v{n}-a, labels: {{ kubernetes.io/service-name: grpc-infra-backend-v{n} }} }}
addressType: IPv4
ports: [{{ port: 9000, protocol: TCP }}]
endpoints: [{{ addresses: [198.18.2.{n}], conditions: {{ ready: true }} }}]
"#
        ));
    }
    out
}

fn grpc_route_model(routes_yaml: &str) -> HttpRoutes {
    let mut objs = k8slb_common::objects::Objects::default();
    for t in [INFRA_BASE, &grpc_backends_yaml(), routes_yaml] {
        objs.add_text(t).unwrap();
    }
    assert!(objs.problems.is_empty(), "{:?}", objs.problems);
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
    let out =
        k8slb_common::gateway::translate(&objs.gateway_input(&[], &addresses, &Default::default()));
    for (route, parents) in &out.grpc_routes {
        for p in parents {
            assert!(
                p.conditions.iter().all(|c| c.status),
                "{route}: {:?}",
                p.conditions
            );
        }
    }
    assert!(!out.grpc_routes.is_empty());
    out.routes
}

/// Runs `proxy` with `routes` (one listener, port 80) and the three echo backends.
fn serve_grpc(
    proxy: &str,
    routes: &HttpRoutes,
    dir: &Path,
) -> (support::Netns, Killed, Vec<grpc::EchoServer>) {
    let ns = support::Netns::new("k8slbgrpcr");
    ns.ip(&format!("addr add {VIP}/32 dev lo"));
    let mut servers = Vec::new();
    for n in 1..=3 {
        ns.ip(&format!("addr add 198.18.2.{n}/32 dev lo"));
        servers.push(
            grpc::echo_server(
                bind_in(&ns, &format!("198.18.2.{n}:9000")),
                PodContext {
                    namespace: "gateway-conformance-infra".into(),
                    service_name: format!("grpc-infra-backend-v{n}"),
                    pod: format!("grpc-infra-backend-v{n}-0"),
                    ..Default::default()
                },
            )
            .unwrap(),
        );
    }
    let o = options(dir);
    let r = HttpRenderer::embedded().unwrap();
    let child = if proxy == "haproxy" {
        let hp = r.haproxy(routes, &o, &[]).unwrap();
        for (f, t) in &hp.files {
            std::fs::write(f, t).unwrap();
        }
        let cfg = format!(
            "global\n  expose-experimental-directives\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n{}",
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
        let nx = r.nginx(routes, &o).unwrap();
        assert!(nx.notes.is_empty(), "{:?}", nx.notes);
        let d = dir.display();
        let mut cfg = format!(
            "pid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n  access_log off;\n"
        );
        for l in k8slb_actor::render::nx_http_base(&[]) {
            cfg.push_str(&format!("  {l}\n"));
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
    let up = support::wait_until(Duration::from_secs(10), || {
        in_ns(&ns, || std::net::TcpStream::connect((VIP, 80)).is_ok())
    });
    assert!(up, "{proxy} did not listen on {VIP}:80");
    (ns, child, servers)
}

/// Who answered a call, as the conformance suite reads it: the serving Service's name, or
/// `Unimplemented` (gRPC status 12, or HTTP 404 with no gRPC status: what gRPC clients
/// map a 404 to).
fn who(r: Result<grpc::Reply, grpc::GrpcError>) -> String {
    match r {
        Ok(r) if r.grpc_status == Some(0) => r
            .assertions
            .map(|a| a.context.service_name)
            .unwrap_or_default(),
        Ok(r) if r.grpc_status == Some(12) || (r.grpc_status.is_none() && r.http_status == 404) => {
            "Unimplemented".into()
        }
        other => format!("{other:?}"),
    }
}

#[test]
#[ignore = "needs root: network namespaces, real haproxy and nginx"]
fn grpcroute_method_and_header_matching_route_real_grpc_calls_on_both_proxies() {
    support::require_root_and(&["haproxy", "nginx", "ip"]);
    let exact = grpc_route_model(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: exact-matching, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: same-namespace }]
  rules:
  - matches: [{ method: { service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: Echo } }]
    backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }]
  - matches: [{ method: { service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho, method: EchoTwo } }]
    backendRefs: [{ name: grpc-infra-backend-v2, port: 8080 }]
"#,
    );
    let headers = grpc_route_model(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: grpc-header-matching, namespace: gateway-conformance-infra }
spec:
  parentRefs: [{ name: same-namespace }]
  rules:
  - matches: [{ headers: [{ name: version, value: one }] }]
    backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }]
  - matches: [{ headers: [{ name: version, value: two }] }]
    backendRefs: [{ name: grpc-infra-backend-v2, port: 8080 }]
  - matches: [{ headers: [{ name: version, value: two }, { name: color, value: orange }] }]
    backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }]
  - matches: [{ headers: [{ name: color, value: blue }] }, { headers: [{ name: color, value: green }] }]
    backendRefs: [{ name: grpc-infra-backend-v1, port: 8080 }]
  - matches: [{ headers: [{ name: color, value: red }] }, { headers: [{ name: color, value: yellow }] }]
    backendRefs: [{ name: grpc-infra-backend-v2, port: 8080 }]
"#,
    );
    let (v1, v2, none) = (
        "grpc-infra-backend-v1",
        "grpc-infra-backend-v2",
        "Unimplemented",
    );
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::tempdir().unwrap();
        let (ns, _p, _servers) = serve_grpc(proxy, &exact, dir.path());
        let got: Vec<String> = in_ns(&ns, || {
            ["Echo", "EchoTwo", "EchoThree"]
                .iter()
                .map(|m| {
                    who(grpc::call_blocking(
                        vip(80),
                        VIP,
                        &grpc::method_path(m),
                        &[],
                        T,
                    ))
                })
                .collect()
        });
        assert_eq!(got, [v1, v2, none], "{proxy}: GRPCExactMethodMatching");
        drop((ns, _p, _servers));

        let dir = tempfile::tempdir().unwrap();
        let (ns, _p, _servers) = serve_grpc(proxy, &headers, dir.path());
        let table: [(&[(&str, &str)], &str); 11] = [
            (&[("version", "one")], v1),
            (&[("version", "two")], v2),
            (&[("version", "two"), ("color", "orange")], v1),
            (&[("version", "two"), ("color", "blue")], v2),
            (&[("color", "orange")], none),
            (&[("some-other-header", "one")], none),
            (&[("color", "blue")], v1),
            (&[("color", "green")], v1),
            (&[("color", "red")], v2),
            (&[("color", "yellow")], v2),
            (&[("color", "purple")], none),
        ];
        for (md, want) in table {
            let got = in_ns(&ns, || {
                who(grpc::call_blocking(
                    vip(80),
                    VIP,
                    &grpc::method_path("Echo"),
                    md,
                    T,
                ))
            });
            assert_eq!(got, want, "{proxy}: GRPCRouteHeaderMatching {md:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// gRPC over TLS: an HTTPS listener offers h2 by ALPN on both proxies.

/// A self-signed certificate for `grpc.example` in `dir`: `default.pem` (chain + key, as
/// HAProxy reads a pool's), `default.key` (nginx); returns the certificate's PEM.
fn certificate(dir: &Path) -> String {
    let (crt, key) = (dir.join("default.crt"), dir.join("default.key"));
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=grpc.example"])
        .args(["-addext", "subjectAltName=DNS:grpc.example"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (c, k) = (
        std::fs::read_to_string(&crt).unwrap(),
        std::fs::read_to_string(&key).unwrap(),
    );
    std::fs::write(dir.join("default.pem"), format!("{c}{k}")).unwrap();
    c
}

/// Port 443 (HTTPS, the pool certificate `default`): `grpc.example` (h2c backend) and
/// `ws.example` (HTTP/1.1 backend).
fn tls_routes() -> HttpRoutes {
    let (g, w) = (backend("default/grpc:9000"), backend("default/ws:8080"));
    let mut l = listener(443, vec![host("grpc.example", &g), host("ws.example", &w)]);
    l.protocol = ListenerProtocol::Https;
    l.tls = Some(k8slb_common::routes::ListenerTls {
        certificates: vec![],
        default_certificate: Some(k8slb_common::routes::CertFile::Pool {
            pool: "default".parse().unwrap(),
        }),
        client_ca: None,
        client_validation: Default::default(),
        zones: None,
    });
    let mut r = HttpRoutes {
        listeners: vec![l],
        ..HttpRoutes::default()
    };
    r.backends.insert(g, state(GRPC_EP, BackendProtocol::H2c));
    r.backends.insert(w, state(WS_EP, BackendProtocol::Http));
    r.normalize();
    r
}

#[test]
#[ignore = "needs root: network namespaces, real haproxy and nginx"]
fn grpc_over_tls_negotiates_h2_by_alpn_on_both_proxies() {
    support::require_root_and(&["haproxy", "nginx", "ip", "openssl"]);
    for proxy in ["haproxy", "nginx"] {
        let dir = tempfile::tempdir().unwrap();
        let ca = certificate(dir.path());
        let (ns, _p, _echo, notes) = serve(proxy, &tls_routes(), dir.path());
        assert!(notes.is_empty(), "{proxy}: {notes:?}");
        let r = in_ns(&ns, || {
            grpc::call_tls_blocking(vip(443), "grpc.example", &grpc::method_path("Echo"), &ca, T)
        })
        .unwrap_or_else(|e| panic!("{proxy}: {e}"));
        assert_eq!(r.grpc_status, Some(0), "{proxy}: {r:?}");
        let a = r.assertions.unwrap();
        assert_eq!(a.context.pod, "grpc-0", "{proxy}");
        assert_eq!(a.authority, "grpc.example", "{proxy}");
    }
}
