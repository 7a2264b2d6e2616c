//! Ingresses end to end: Ingress documents in the files source → the watcher's plan (the
//! pool's ingress VIP, the routes) → the actors render them into real HAProxy and nginx
//! → requests from the client through the VIP reach the pods.
//! Needs root, keepalived, haproxy, nginx and the built binaries; fails (never skips)
//! without them.

use k8slb_common::testing::{self_signed, self_signed_for};
use k8slb_tests::l7::{
    backend_of, body, fingerprint, served_by, served_by_https, served_fingerprint, status,
    tls_secret,
};
use k8slb_tests::objects::{svc, tcp};
use k8slb_tests::system::{Options, System};
use k8slb_tests::traffic::{self, Proto};
use k8slb_tests::wait;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn ingress_class() -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "k8slb"},
        "spec": {"controller": "k8slb.io/ingress-controller"}
    })
}

/// A backend Service `app` (ClusterIP, port 80 → the backends' 8080) and its slice.
fn apply_backend(sys: &System) {
    let s = svc("default", "app").port(tcp("http", 80, 8080));
    let mut v = s.to_value();
    v["spec"]["type"] = json!("ClusterIP");
    sys.apply("svc-default-app", &v).unwrap();
    sys.apply("eps-default-app", &s.endpoints("app-1", &sys.backend_ips()))
        .unwrap();
    sys.apply("ingressclass-k8slb", &ingress_class()).unwrap();
}

fn ingress(name: &str, annotations: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"namespace": "default", "name": name, "annotations": annotations,
                     "creationTimestamp": "2026-01-01T00:00:01Z"},
        "spec": spec,
    })
}

fn prefix(path: &str) -> Value {
    json!({"path": path, "pathType": "Prefix",
           "backend": {"service": {"name": "app", "port": {"number": 80}}}})
}

/// The addresses the state gives Ingress `key`.
fn wait_ingress_ips(sys: &System, key: &str, n: usize) -> Vec<IpAddr> {
    let mut ips = Vec::new();
    wait::until(T, || {
        let s = sys.state()?;
        ips = s
            .ingresses
            .iter()
            .find(|(k, _)| k.to_string() == key)
            .map(|(_, i)| i.ips.clone())
            .unwrap_or_default();
        Ok(ips.len() == n)
    })
    .unwrap_or_else(|e| {
        panic!(
            "Ingress {key} got no {n} address(es): {e:#}; problems: {:?}",
            sys.state().map(|s| s.problems).unwrap_or_default()
        )
    });
    ips
}

fn host_and_path_routing(proxy: &str) {
    host_and_path_routing_with(Options::new(&format!("ing-{proxy}")).proxy(proxy));
}

fn host_and_path_routing_with(opts: Options) {
    let proxy = opts.proxy.clone();
    let mut sys = System::start(opts).expect("system");
    apply_backend(&sys);
    sys.apply(
        "ing-shop",
        &ingress(
            "shop",
            json!({}),
            json!({"ingressClassName": "k8slb", "rules": [
                {"host": "shop.example", "http": {"paths": [prefix("/api")]}},
            ]}),
        ),
    )
    .unwrap();
    sys.apply(
        "ing-custom",
        &ingress(
            "custom",
            json!({"loadbalancer/http-port": "99"}),
            json!({"ingressClassName": "k8slb", "rules": [
                {"host": "foo.bar.com", "http": {"paths": [prefix("/foo")]}},
            ]}),
        ),
    )
    .unwrap();
    let ip = wait_ingress_ips(&sys, "default/shop", 1)[0];
    assert_eq!(wait_ingress_ips(&sys, "default/custom", 1), [ip]);
    sys.wait_one_holder(ip, T).unwrap();
    let base = format!("http://{ip}");
    wait::until(T, || {
        Ok(status(&sys, "shop.example", &format!("{base}/api/v1")) == "200")
    })
    .unwrap_or_else(|e| panic!("{proxy}: shop.example/api/v1 never answered 200: {e:#}"));
    // Element-wise prefix, other hosts, the custom port.
    assert_eq!(status(&sys, "shop.example", &format!("{base}/api")), "200");
    assert_eq!(status(&sys, "shop.example", &format!("{base}/apix")), "404");
    assert_eq!(status(&sys, "other.example", &format!("{base}/api")), "404");
    assert_eq!(
        status(&sys, "foo.bar.com", &format!("{base}:99/foo/x")),
        "200"
    );
    assert_eq!(status(&sys, "foo.bar.com", &format!("{base}/foo/x")), "404");
    // Both pods serve it.
    let r = traffic::load_args(
        &sys.lab,
        "client",
        Proto::Http,
        SocketAddr::new(ip, 80),
        &["-n", "100", "--host", "shop.example", "--path", "/api/x"],
    )
    .unwrap();
    assert_eq!(r.failed, 0, "{proxy}: {r:?}");
    assert!(
        r.by_backend.len() == 2,
        "{proxy}: both backends serve: {r:?}"
    );
    if let Some(kube) = &sys.kube {
        // What `kubectl get ingress` shows, and every call within the variant's RBAC.
        assert_eq!(kube.ingress_status("default", "shop"), [ip.to_string()]);
        assert_eq!(kube.ingress_status("default", "custom"), [ip.to_string()]);
        assert_eq!(kube.refused_requests(), Vec::<String>::new());
    }
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn kubernetes_path_routes_ingresses_through_haproxy_and_writes_their_status() {
    host_and_path_routing_with(Options::new("ing-kube").kube_ingress());
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn haproxy_routes_ingress_hosts_paths_and_a_custom_port_to_the_pods() {
    host_and_path_routing("haproxy");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn nginx_routes_ingress_hosts_paths_and_a_custom_port_to_the_pods() {
    host_and_path_routing("nginx");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn scale_two_serves_on_two_nodes_at_once_and_survives_one_nodes_loss() {
    let mut sys = System::start(Options::new("ing-scale").lbs(3)).expect("system");
    apply_backend(&sys);
    sys.apply(
        "ing-web",
        &ingress(
            "web",
            json!({"loadbalancer/scale": "2"}),
            json!({"ingressClassName": "k8slb", "defaultBackend":
                {"service": {"name": "app", "port": {"number": 80}}}}),
        ),
    )
    .unwrap();
    let ips = wait_ingress_ips(&sys, "default/web", 2);
    // The plan gives the two VIPs two owners; VRRP puts each on its owner.
    let state = sys.state().unwrap();
    let owners: Vec<String> = ips
        .iter()
        .map(|ip| state.vips[ip].owner.as_ref().unwrap().to_string())
        .collect();
    assert_ne!(owners[0], owners[1], "two owners: {owners:?}");
    let mut holders: Vec<String> = Vec::new();
    wait::until(T, || {
        holders = ips
            .iter()
            .map(|ip| sys.wait_one_holder(*ip, T))
            .collect::<Result<_, _>>()?;
        Ok(holders == owners)
    })
    .unwrap_or_else(|e| {
        panic!("the VIPs are not on their owners {owners:?} but on {holders:?}: {e:#}")
    });
    for ip in &ips {
        let url = format!("http://{ip}/any");
        wait::until(T, || Ok(status(&sys, "x.example", &url) == "200"))
            .unwrap_or_else(|e| panic!("{ip} never answered: {e:#}"));
    }
    // One node lost: its VIP moves to a survivor; both addresses still answer.
    sys.lab.cut_link(&holders[0]).unwrap();
    wait::until(T, || {
        Ok(sys.holders(ips[0])?.iter().any(|h| *h != holders[0]))
    })
    .unwrap();
    for ip in &ips {
        let url = format!("http://{ip}/any");
        wait::until(T, || Ok(status(&sys, "x.example", &url) == "200"))
            .unwrap_or_else(|e| panic!("{ip} does not answer after the loss: {e:#}"));
    }
    sys.lab.restore_link(&holders[0]).unwrap();
    sys.lab.pass();
}

/// The backend, a TLS Secret `secure` (a new self-signed certificate for
/// `secure.example`) and an Ingress serving `secure.example` with it; waits until its VIP
/// has one holder. Returns the VIP and the certificate.
fn secure_ingress(sys: &System) -> (IpAddr, String) {
    apply_backend(sys);
    let (crt, key) = self_signed("secure.example");
    sys.apply(
        "secret-secure",
        &tls_secret("default", "secure", &crt, &key),
    )
    .unwrap();
    sys.apply(
        "ing-secure",
        &ingress(
            "secure",
            json!({}),
            json!({"ingressClassName": "k8slb",
                   "tls": [{"hosts": ["secure.example"], "secretName": "secure"}],
                   "rules": [{"host": "secure.example", "http": {"paths": [prefix("/")]}}]}),
        ),
    )
    .unwrap();
    let ip = wait_ingress_ips(sys, "default/secure", 1)[0];
    sys.wait_one_holder(ip, T).unwrap();
    (ip, crt)
}

fn tls_from_a_secret_redirect_and_renewal(proxy: &str) {
    tls_from_a_secret_redirect_and_renewal_with(
        Options::new(&format!("ing-tls-{proxy}")).proxy(proxy),
    );
}

fn tls_from_a_secret_redirect_and_renewal_with(opts: Options) {
    let proxy = opts.proxy.clone();
    let mut sys = System::start(opts).expect("system");
    let (ip, crt) = secure_ingress(&sys);
    let https = |path: &str| {
        sys.lab
            .run_in(
                "client",
                &[
                    "curl",
                    "-sk",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "-m",
                    "3",
                    "--resolve",
                    &format!("secure.example:443:{ip}"),
                    &format!("https://secure.example{path}"),
                ],
            )
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    wait::until(T, || Ok(https("/x") == "200"))
        .unwrap_or_else(|e| panic!("{proxy}: https://secure.example/x never answered 200: {e:#}"));
    assert_eq!(
        served_fingerprint(&sys, ip, 443, "secure.example"),
        fingerprint(&crt)
    );
    // Plain HTTP for a TLS host is redirected to HTTPS.
    assert_eq!(
        status(&sys, "secure.example", &format!("http://{ip}/x")),
        "308"
    );

    // cert-manager renews the Secret: the new certificate is served.
    let (crt2, key2) = self_signed("secure.example");
    sys.apply(
        "secret-secure",
        &tls_secret("default", "secure", &crt2, &key2),
    )
    .unwrap();
    let want = fingerprint(&crt2);
    let mut got = String::new();
    wait::until(T, || {
        got = served_fingerprint(&sys, ip, 443, "secure.example");
        Ok(got == want)
    })
    .unwrap_or_else(|e| panic!("{proxy}: the renewed certificate is not served ({got}): {e:#}"));
    assert_eq!(https("/y"), "200");
    if let Some(kube) = &sys.kube {
        // Each actor wrote the node certificate 0600 (from the watcher's node Secret),
        // and nothing any binary did was refused by the variant's RBAC.
        use std::os::unix::fs::PermissionsExt;
        for node in ["lb1", "lb2"] {
            let f = sys.actor_certs_dir(node).join("default_secure.pem");
            let mode = std::fs::metadata(&f)
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{}", f.display());
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(text.starts_with(&crt2), "{node} holds the renewed chain");
        }
        assert_eq!(kube.refused_requests(), Vec::<String>::new());
    } else {
        // The same lab, the same VIP: two tenants (docs/multi-tenancy.md).
        two_tenants_claim_one_host(&sys, ip, &proxy);
    }
    sys.lab.pass();
}

/// An Ingress of namespace `ns` created at second `created` of the lab's day.
fn tenant_ingress(ns: &str, name: &str, created: u32, spec: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"namespace": ns, "name": name,
                     "creationTimestamp": format!("2026-01-01T00:00:{created:02}Z")},
        "spec": spec,
    })
}

/// `curl -k` from the client over HTTPS to `ip`, `host` as SNI and Host: the status.
fn https_status(sys: &System, ip: IpAddr, host: &str, path: &str) -> String {
    body(
        sys,
        &[
            "-k",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--resolve",
            &format!("{host}:443:{ip}"),
            &format!("https://{host}{path}"),
        ],
    )
}

/// Issue 21, through the real proxy: namespace `bank` (older) serves bank.example.com
/// (`/login`, `/app`, its certificate, and a newer ACME solver Ingress); `evil` (newer)
/// claims the same host with `/login` (Prefix), `/` (Exact), the ACME challenge directory
/// (Prefix), a `defaultBackend`, and `tls.hosts` with its own certificate for bank's host
/// (whose SANs do name it) and for `shop.example.com` (whose SANs do not). Bank's pods are
/// be1, evil's be2. Then bank deletes its Ingresses and evil takes the host over.
fn two_tenants_claim_one_host(sys: &System, ip: IpAddr, proxy: &str) {
    let be = |b: &str| IpAddr::V4(sys.lab.host(b).v4);
    for (ns, pod) in [("bank", "be1"), ("evil", "be2")] {
        let s = svc(ns, "app").port(tcp("http", 80, 8080));
        let mut v = s.to_value();
        v["spec"]["type"] = json!("ClusterIP");
        sys.apply(&format!("svc-{ns}-app"), &v).unwrap();
        sys.apply(&format!("eps-{ns}-app"), &s.endpoints("app-1", &[be(pod)]))
            .unwrap();
    }
    let (bank_crt, bank_key) = self_signed("bank.example.com");
    let (evil_crt, evil_key) = self_signed_for(&["portal.example.com", "bank.example.com"]);
    sys.apply(
        "secret-bank",
        &tls_secret("bank", "bank-tls", &bank_crt, &bank_key),
    )
    .unwrap();
    sys.apply(
        "secret-evil",
        &tls_secret("evil", "evil-tls", &evil_crt, &evil_key),
    )
    .unwrap();
    let app = || json!({"service": {"name": "app", "port": {"number": 80}}});
    let path = |p: &str, t: &str| json!({"path": p, "pathType": t, "backend": app()});
    sys.apply(
        "ing-bank-web",
        &tenant_ingress(
            "bank",
            "web",
            2,
            json!({"ingressClassName": "k8slb",
                   "tls": [{"hosts": ["bank.example.com"], "secretName": "bank-tls"}],
                   "rules": [{"host": "bank.example.com", "http": {"paths": [
                       path("/login", "Prefix"), path("/app", "Prefix")]}}]}),
        ),
    )
    .unwrap();
    sys.apply(
        "ing-evil-grab",
        &tenant_ingress(
            "evil",
            "grab",
            3,
            json!({"ingressClassName": "k8slb", "defaultBackend": app(),
                   "tls": [{"hosts": ["portal.example.com", "bank.example.com", "shop.example.com"],
                            "secretName": "evil-tls"}],
                   "rules": [
                       {"host": "bank.example.com", "http": {"paths": [
                           path("/login", "Prefix"), path("/", "Exact"),
                           path("/.well-known/acme-challenge", "Prefix")]}},
                       {"host": "portal.example.com", "http": {"paths": [path("/", "Prefix")]}},
                       {"host": "shop.example.com", "http": {"paths": [path("/", "Prefix")]}}]}),
        ),
    )
    .unwrap();
    // cert-manager's HTTP-01 solver for bank: an Ingress newer than evil's, still bank's.
    sys.apply(
        "ing-bank-acme",
        &tenant_ingress(
            "bank",
            "acme-solver",
            4,
            json!({"ingressClassName": "k8slb",
                   "rules": [{"host": "bank.example.com", "http": {"paths": [
                       path("/.well-known/acme-challenge/tok-bank", "Exact")]}}]}),
        ),
    )
    .unwrap();
    wait::until(T, || {
        Ok(served_by(
            sys,
            "bank.example.com",
            &format!("http://{ip}/.well-known/acme-challenge/tok-bank"),
        ) == "be1"
            && served_by_https(sys, ip, 443, "portal.example.com", "/") == "be2")
    })
    .unwrap_or_else(|e| panic!("{proxy}: the tenants' Ingresses are not served: {e:#}"));
    let http = |host: &str, p: &str| served_by(sys, host, &format!("http://{ip}{p}"));
    let http_status = |host: &str, p: &str| status(sys, host, &format!("http://{ip}{p}"));
    let (bank_fp, evil_fp) = (fingerprint(&bank_crt), fingerprint(&evil_crt));
    let pool_fp = fingerprint(&std::fs::read_to_string(sys.cert_dir.join("default.pem")).unwrap());

    // bank's routes, bank's certificate; nothing of evil's for bank's host.
    for p in ["/login", "/login/x", "/app/y"] {
        assert_eq!(
            served_by_https(sys, ip, 443, "bank.example.com", p),
            "be1",
            "{proxy}: {p}"
        );
        assert_eq!(
            http_status("bank.example.com", p),
            "308",
            "{proxy}: {p} (bank's redirect)"
        );
    }
    assert_eq!(
        served_fingerprint(sys, ip, 443, "bank.example.com"),
        bank_fp,
        "{proxy}"
    );
    // evil's `/` (Exact) and its default backend do not answer for bank's host: 404.
    for p in ["/", "/other"] {
        assert_eq!(
            https_status(sys, ip, "bank.example.com", p),
            "404",
            "{proxy}: {p}"
        );
    }
    // ACME challenges for bank's host reach bank's solver (with a trailing dot too), never
    // evil's pods.
    let acme = "/.well-known/acme-challenge/tok-bank";
    assert_eq!(http("bank.example.com", acme), "be1", "{proxy}");
    assert_eq!(http("bank.example.com.", acme), "be1", "{proxy}");
    assert_eq!(
        http_status("bank.example.com", "/.well-known/acme-challenge/tok-evil"),
        "404",
        "{proxy}"
    );
    // evil keeps its own host and certificate; its certificate is not for shop.example.com:
    // the default (the pool's) certificate is served there; hosts no one owns still reach
    // evil's default backend.
    assert_eq!(
        served_fingerprint(sys, ip, 443, "portal.example.com"),
        evil_fp,
        "{proxy}"
    );
    assert_eq!(
        served_fingerprint(sys, ip, 443, "shop.example.com"),
        pool_fp,
        "{proxy}"
    );
    assert_eq!(
        served_by_https(sys, ip, 443, "shop.example.com", "/"),
        "be2",
        "{proxy}"
    );
    assert_eq!(
        http_status("shop.example.com", "/"),
        "200",
        "{proxy}: not redirected"
    );
    assert_eq!(http("nobody.example.com", "/x"), "be2", "{proxy}");
    let problems = sys.state().unwrap().problems;
    let on_evil = |reason: &str| {
        problems
            .iter()
            .filter(|p| p.object.to_string() == "Ingress evil/grab" && p.reason.as_str() == reason)
            .count()
    };
    assert!(on_evil("HostConflict") >= 1, "{proxy}: {problems:?}");
    assert_eq!(
        on_evil("CertificateHostMismatch"),
        1,
        "{proxy}: {problems:?}"
    );

    // bank lets go: evil takes the host over, its routes, default backend and certificate.
    sys.delete("ing-bank-web").unwrap();
    sys.delete("ing-bank-acme").unwrap();
    wait::until(T, || {
        Ok(served_by_https(sys, ip, 443, "bank.example.com", "/login") == "be2")
    })
    .unwrap_or_else(|e| panic!("{proxy}: evil never took bank.example.com over: {e:#}"));
    // The certificate converges too: a CI run once saw evil's routes answer while the
    // next handshake still got another certificate, on nginx (cause not found yet: see
    // issue 22's note). It must be evil's within the same bound; what was served before
    // it is printed, to tell a reload race (bank's) from a two-round convergence (the
    // pool's).
    let mut seen = Vec::new();
    wait::until(T, || {
        let fp = served_fingerprint(sys, ip, 443, "bank.example.com");
        if fp != evil_fp && !seen.contains(&fp) {
            seen.push(fp.clone());
        }
        Ok(fp == evil_fp)
    })
    .unwrap_or_else(|e| panic!("{proxy}: bank.example.com never got evil's certificate: {e:#}"));
    for fp in &seen {
        let whose = if *fp == bank_fp {
            "bank's"
        } else if *fp == pool_fp {
            "the pool's"
        } else {
            "another"
        };
        println!("{proxy}: before evil's certificate, bank.example.com served {whose}: {fp}");
    }
    for p in ["/", "/other"] {
        assert_eq!(
            served_by_https(sys, ip, 443, "bank.example.com", p),
            "be2",
            "{proxy}: {p}"
        );
    }
    assert_eq!(http("bank.example.com", acme), "be2", "{proxy}");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn kubernetes_path_serves_an_ingress_certificate_from_its_secret_redirects_and_the_renewed_one() {
    tls_from_a_secret_redirect_and_renewal_with(Options::new("ing-tls-kube").kube_ingress());
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn haproxy_serves_an_ingress_certificate_the_renewed_one_and_keeps_one_tenants_host_from_another() {
    tls_from_a_secret_redirect_and_renewal("haproxy");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn nginx_serves_an_ingress_certificate_the_renewed_one_and_keeps_one_tenants_host_from_another() {
    tls_from_a_secret_redirect_and_renewal("nginx");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn ingress_backend_endpoint_churn_under_load_is_zero_reloads_and_zero_failures() {
    use k8slb_tests::objects::endpoint_slice;
    use k8slb_tests::traffic::Steady;
    let mut sys = System::start(Options::new("ing-churn").backends(3)).expect("system");
    apply_backend(&sys);
    sys.apply(
        "ing-web",
        &ingress(
            "web",
            json!({}),
            json!({"ingressClassName": "k8slb", "defaultBackend":
                {"service": {"name": "app", "port": {"number": 80}}}}),
        ),
    )
    .unwrap();
    let ip = wait_ingress_ips(&sys, "default/web", 1)[0];
    let target = SocketAddr::new(ip, 80);
    sys.wait_serving(Proto::Http, target, T).unwrap();
    sys.wait_one_holder(ip, T).unwrap();
    let reloads_before = sys
        .settled_haproxy_reloads(Duration::from_millis(1500), T)
        .unwrap();
    let load = traffic::start_load(
        &mut sys.lab,
        "client",
        "load",
        Proto::Http,
        target,
        Steady {
            rate: 200.0,
            concurrency: 4,
            max: Duration::from_secs(60),
        },
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let app = svc("default", "app").port(tcp("http", 80, 8080));
    let be: Vec<IpAddr> = sys.backend_ips();
    let sets: Vec<Vec<(IpAddr, bool)>> = vec![
        vec![(be[0], true), (be[1], true)],
        vec![(be[0], true), (be[1], false), (be[2], true)],
        vec![(be[2], true)],
        vec![(be[0], true), (be[1], true), (be[2], true)],
    ];
    for set in &sets {
        sys.apply("eps-default-app", &endpoint_slice(&app, "app-1", set))
            .unwrap();
        std::thread::sleep(Duration::from_millis(400));
    }
    let reloads_after = sys
        .settled_haproxy_reloads(Duration::from_millis(1500), T)
        .unwrap();
    let r = load.stop_load(&mut sys.lab).unwrap();
    eprintln!(
        "load during Ingress backend churn: {r:?}; reloads {reloads_before} -> {reloads_after}"
    );
    assert!(r.ok > 300, "too little load went through: {r:?}");
    assert_eq!(r.failed, 0, "requests failed during the churn: {r:?}");
    assert_eq!(
        reloads_after, reloads_before,
        "an endpoint change of an Ingress backend reloaded HAProxy"
    );
    sys.lab.pass();
}

/// cert-manager renews a certificate while HTTPS requests keep coming: HAProxy takes the
/// new one over its Runtime API (`set ssl cert` + `commit ssl cert`), without a reload and
/// without a failed handshake or request, and new handshakes get the new certificate.
#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn a_renewed_certificate_reaches_haproxy_under_load_without_a_reload_or_a_failed_request() {
    use k8slb_tests::traffic::Steady;
    let mut sys = System::start(Options::new("ing-renew")).expect("system");
    let (ip, crt) = secure_ingress(&sys);
    let first = fingerprint(&crt);
    wait::until(T, || {
        Ok(served_fingerprint(&sys, ip, 443, "secure.example") == first)
    })
    .expect("the first certificate is served");
    let before = sys
        .settled_haproxy_reloads(Duration::from_millis(1500), T)
        .unwrap();
    let load = traffic::start_load_args(
        &mut sys.lab,
        "client",
        "renew-load",
        Proto::Https,
        SocketAddr::new(ip, 443),
        Steady {
            rate: 200.0,
            concurrency: 4,
            max: Duration::from_secs(60),
        },
        &["--host", "secure.example", "--path", "/x"],
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let (crt2, key2) = self_signed("secure.example");
    sys.apply(
        "secret-secure",
        &tls_secret("default", "secure", &crt2, &key2),
    )
    .unwrap();
    let second = fingerprint(&crt2);
    let mut got = String::new();
    wait::until(T, || {
        got = served_fingerprint(&sys, ip, 443, "secure.example");
        Ok(got == second)
    })
    .unwrap_or_else(|e| panic!("the renewed certificate is not served ({got}): {e:#}"));
    std::thread::sleep(Duration::from_millis(700));
    let r = load.stop_load(&mut sys.lab).unwrap();
    let after = sys
        .settled_haproxy_reloads(Duration::from_millis(1500), T)
        .unwrap();
    eprintln!("HTTPS load during a certificate renewal: {r:?}; reloads {before} -> {after}");
    assert!(r.ok > 200, "too little load went through: {r:?}");
    assert_eq!(
        r.failed, 0,
        "handshakes or requests failed during the renewal: {r:?}"
    );
    assert_eq!(after, before, "the renewal reloaded HAProxy");
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn an_ingress_added_later_is_served_on_the_same_vip() {
    let mut sys = System::start(Options::new("ing-later")).expect("system");
    apply_backend(&sys);
    let one = |name: &str, host: &str| {
        ingress(
            name,
            json!({}),
            json!({"ingressClassName": "k8slb", "rules": [
                {"host": host, "http": {"paths": [prefix("/")]}}]}),
        )
    };
    sys.apply("ing-a", &one("a", "a.example")).unwrap();
    let ip = wait_ingress_ips(&sys, "default/a", 1)[0];
    sys.wait_one_holder(ip, T).unwrap();
    let url = format!("http://{ip}/");
    wait::until(T, || Ok(status(&sys, "a.example", &url) == "200")).unwrap();
    assert_eq!(status(&sys, "b.example", &url), "404");
    sys.apply("ing-b", &one("b", "b.example")).unwrap();
    assert_eq!(wait_ingress_ips(&sys, "default/b", 1), [ip]);
    wait::until(T, || Ok(status(&sys, "b.example", &url) == "200"))
        .unwrap_or_else(|e| panic!("the later Ingress is not served: {e:#}"));
    assert_eq!(status(&sys, "a.example", &url), "200");
    sys.lab.pass();
}

/// A ClusterIP Service `name` (port `port_name` `port` → the backends' 8080) whose only
/// endpoints are `backends` (lab host names), so an answer says which Service served it.
fn apply_service_on(sys: &System, name: &str, port_name: &str, port: u16, backends: &[&str]) {
    let s = svc("default", name).port(tcp(port_name, port, 8080));
    let mut v = s.to_value();
    v["spec"]["type"] = json!("ClusterIP");
    sys.apply(&format!("svc-default-{name}"), &v).unwrap();
    let ips: Vec<IpAddr> = backends
        .iter()
        .map(|b| IpAddr::V4(sys.lab.host(b).v4))
        .collect();
    sys.apply(
        &format!("eps-default-{name}"),
        &s.endpoints(&format!("{name}-1"), &ips),
    )
    .unwrap();
}

fn backend(service: &str, port: Value) -> Value {
    json!({"service": {"name": service, "port": port}})
}

/// The Rancher ingress-controller examples (the seed's, as in
/// `actor/tests/fixtures/ingress/rancher-examples.yaml`) through the lab, plus its
/// certificate example as two Ingresses with two TLS Secrets on the same VIP, and its
/// `scale: "2"`: `nginx-service` (port 80) is served by be1 only, `nginx-service1` (port
/// 8080) by be2 only, so each answer says which Service a route reached.
fn rancher_examples_two_certificates_and_scale(proxy: &str) {
    let mut sys =
        System::start(Options::new(&format!("ing-ex-{proxy}")).proxy(proxy)).expect("system");
    sys.apply("ingressclass-k8slb", &ingress_class()).unwrap();
    apply_service_on(&sys, "nginx-service", "http", 80, &["be1"]);
    apply_service_on(&sys, "nginx-service1", "web", 8080, &["be2"]);
    let svc80 = || backend("nginx-service", json!({"number": 80}));
    let svc8080 = || backend("nginx-service1", json!({"number": 8080}));
    let path = |p: &str, b: Value| json!({"path": p, "pathType": "Prefix", "backend": b});
    sys.apply(
        "ing-custom-port",
        &ingress(
            "ingress-custom-port",
            json!({"loadbalancer/http-port": "99"}),
            json!({"ingressClassName": "k8slb", "rules": [
                {"host": "foo.bar.com", "http": {"paths": [path("/foo", svc80())]}}]}),
        ),
    )
    .unwrap();
    sys.apply(
        "ing-default-service",
        &ingress(
            "ingress-default-service",
            json!({"loadbalancer/scale": "2"}),
            json!({"ingressClassName": "k8slb", "defaultBackend": svc80()}),
        ),
    )
    .unwrap();
    sys.apply(
        "ing-host-only",
        &ingress(
            "ingress-host-only",
            json!({"kubernetes.io/ingress.class": "k8slb"}),
            json!({"rules": [{"host": "host.only.com", "http": {"paths": [
                {"pathType": "ImplementationSpecific",
                 "backend": backend("nginx-service", json!({"name": "http"}))}]}}]}),
        ),
    )
    .unwrap();
    sys.apply(
        "ing-multiple-svcs",
        &ingress(
            "ingress-multiple-svcs",
            json!({}),
            json!({"ingressClassName": "k8slb", "rules": [
                {"host": "foo.bar.com", "http": {"paths": [path("/foo", svc80())]}},
                {"host": "bar.foo.com", "http": {"paths": [path("/bar", svc8080())]}}]}),
        ),
    )
    .unwrap();
    // Two Ingresses, two Secrets, one VIP: each host its own certificate by SNI.
    let mut fps = Vec::new();
    for (name, b) in [("alpha", svc80()), ("beta", svc8080())] {
        let host = format!("{name}.example");
        let (crt, key) = self_signed(&host);
        fps.push(fingerprint(&crt));
        sys.apply(
            &format!("secret-{name}"),
            &tls_secret("default", name, &crt, &key),
        )
        .unwrap();
        sys.apply(
            &format!("ing-{name}"),
            &ingress(
                name,
                json!({}),
                json!({"ingressClassName": "k8slb",
                       "tls": [{"hosts": [host], "secretName": name}],
                       "rules": [{"host": host, "http": {"paths": [path("/", b)]}}]}),
            ),
        )
        .unwrap();
    }

    // Scale 2: every Ingress of the pool shows the same two VIPs, owned by two nodes,
    // each on its owner.
    let ips = wait_ingress_ips(&sys, "default/ingress-default-service", 2);
    for name in [
        "ingress-custom-port",
        "ingress-host-only",
        "ingress-multiple-svcs",
        "alpha",
        "beta",
    ] {
        assert_eq!(
            wait_ingress_ips(&sys, &format!("default/{name}"), 2),
            ips,
            "{proxy}: {name}"
        );
    }
    let state = sys.state().unwrap();
    let owners: Vec<String> = ips
        .iter()
        .map(|ip| state.vips[ip].owner.as_ref().unwrap().to_string())
        .collect();
    assert_ne!(owners[0], owners[1], "{proxy}: two owners: {owners:?}");
    let mut holders = Vec::new();
    wait::until(T, || {
        holders = ips
            .iter()
            .map(|ip| sys.wait_one_holder(*ip, T))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(holders == owners)
    })
    .unwrap_or_else(|e| panic!("{proxy}: VIPs on {holders:?}, not on {owners:?}: {e:#}"));

    let pool_fp = fingerprint(
        &std::fs::read_to_string(sys.cert_dir.join("default.pem")).expect("the pool certificate"),
    );
    for ip in &ips {
        let ip = *ip;
        let http = |port: u16, path: &str| format!("http://{ip}:{port}{path}");
        wait::until(T, || {
            Ok(served_by(&sys, "foo.bar.com", &http(80, "/foo/x")) == "be1"
                && served_by_https(&sys, ip, 443, "beta.example", "/") == "be2")
        })
        .unwrap_or_else(|e| {
            panic!("{proxy}: {ip} never served foo.bar.com and beta.example: {e:#}")
        });
        let routed = [
            // host+path on the custom HTTP port (the Rancher http.port example)
            ("foo.bar.com", http(99, "/foo"), "be1"),
            ("foo.bar.com", http(99, "/foo/y"), "be1"),
            // two services, by host and path
            ("foo.bar.com", http(80, "/foo"), "be1"),
            ("bar.foo.com", http(80, "/bar/z"), "be2"),
            // a host-only rule, by port name
            ("host.only.com", http(80, "/anything"), "be1"),
            // the default service: unknown hosts, and a known host's other paths
            ("unknown.example", http(80, "/x"), "be1"),
            ("bar.foo.com", http(80, "/other"), "be1"),
        ];
        for (host, url, want) in &routed {
            assert_eq!(
                served_by(&sys, host, url),
                *want,
                "{proxy}: {host} {url} is served by {want}"
            );
        }
        // The custom port serves only its Ingress: no default service there.
        assert_eq!(status(&sys, "foo.bar.com", &http(99, "/bar")), "404");
        assert_eq!(status(&sys, "unknown.example", &http(99, "/foo")), "404");
        // SNI: each host its own certificate; a name without one gets the pool's
        // default certificate (docs/ingress.md: the pool's `<certPath>/<pool>.pem` when
        // it exists on the nodes, as in the lab).
        for (sni, want) in [
            ("alpha.example", &fps[0]),
            ("beta.example", &fps[1]),
            ("nocert.example", &pool_fp),
            ("foo.bar.com", &pool_fp),
        ] {
            assert_eq!(
                &served_fingerprint(&sys, ip, 443, sni),
                want,
                "{proxy}: the certificate served at {ip}:443 for {sni}"
            );
        }
        assert_ne!(fps[0], fps[1]);
        assert_eq!(served_by_https(&sys, ip, 443, "alpha.example", "/a"), "be1");
        assert_eq!(served_by_https(&sys, ip, 443, "beta.example", "/b"), "be2");
        // TLS hosts are redirected to HTTPS; the others are not.
        assert_eq!(status(&sys, "alpha.example", &http(80, "/a")), "308");
        assert_eq!(status(&sys, "beta.example", &http(80, "/b")), "308");
    }

    // Endpoint churn: nginx-service moves from be1 to be2; every VIP follows.
    apply_service_on(&sys, "nginx-service", "http", 80, &["be2"]);
    for ip in &ips {
        let url = format!("http://{ip}/foo/x");
        wait::until(T, || Ok(served_by(&sys, "foo.bar.com", &url) == "be2"))
            .unwrap_or_else(|e| panic!("{proxy}: {ip} did not follow the endpoint change: {e:#}"));
        let url = format!("http://{ip}:99/foo");
        assert_eq!(served_by(&sys, "foo.bar.com", &url), "be2", "{proxy}");
    }
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn haproxy_serves_the_rancher_examples_two_certificates_by_sni_and_scale_two() {
    rancher_examples_two_certificates_and_scale("haproxy");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn nginx_serves_the_rancher_examples_two_certificates_by_sni_and_scale_two() {
    rancher_examples_two_certificates_and_scale("nginx");
}

/// A lab on `proxy` with Ingress `sticky` (`loadbalancer/stickiness: cookie`, cookie
/// `SRV`) for `sticky.example` → `app` and Ingress `plain` (no stickiness) for
/// `plain.example` → `plain-app`, both Services on both backends, both answering;
/// returns the lab and the URL of the VIP.
fn sticky_and_plain_ingresses(proxy: &str) -> (System, String) {
    let sys =
        System::start(Options::new(&format!("ing-sticky-{proxy}")).proxy(proxy)).expect("system");
    apply_backend(&sys);
    apply_service_on(&sys, "plain-app", "http", 80, &["be1", "be2"]);
    sys.apply(
        "ing-sticky",
        &ingress(
            "sticky",
            json!({"loadbalancer/stickiness": "cookie", "loadbalancer/stickiness-cookie": "SRV"}),
            json!({"ingressClassName": "k8slb", "rules": [
                {"host": "sticky.example", "http": {"paths": [prefix("/")]}}]}),
        ),
    )
    .unwrap();
    sys.apply(
        "ing-plain",
        &ingress(
            "plain",
            json!({}),
            json!({"ingressClassName": "k8slb", "rules": [
                {"host": "plain.example", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": backend("plain-app", json!({"number": 80}))}]}}]}),
        ),
    )
    .unwrap();
    let ip = wait_ingress_ips(&sys, "default/sticky", 1)[0];
    sys.wait_one_holder(ip, T).unwrap();
    let url = format!("http://{ip}/s");
    wait::until(T, || {
        Ok(status(&sys, "sticky.example", &url) == "200"
            && status(&sys, "plain.example", &url) == "200")
    })
    .unwrap_or_else(|e| panic!("{proxy}: sticky.example and plain.example never answered: {e:#}"));
    // The control: without stickiness both pods answer one client.
    let seen: std::collections::BTreeSet<String> = (0..20)
        .map(|_| served_by(&sys, "plain.example", &url))
        .collect();
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["be1", "be2"],
        "{proxy}: without stickiness both pods answer"
    );
    (sys, url)
}

/// `loadbalancer/stickiness: cookie` on HAProxy, with real traffic: each answer without a
/// cookie sets one naming its pod, both pods answer such requests, a request carrying a
/// pod's cookie reaches that pod 20 times out of 20, and so does a client keeping its
/// cookie jar.
#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn haproxy_cookie_stickiness_keeps_a_client_on_one_pod_and_without_the_cookie_both_answer() {
    let (mut sys, url) = sticky_and_plain_ingresses("haproxy");
    let host = "Host: sticky.example";
    // Without a cookie: both pods answer, each answer sets SRV naming its pod.
    let mut cookie_of: std::collections::BTreeMap<String, String> = Default::default();
    for _ in 0..20 {
        let answer = body(&sys, &["-i", "-H", host, &url]);
        let be = backend_of(&answer);
        let cookie = answer
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("set-cookie").then(|| {
                    value
                        .trim()
                        .split(';')
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
            })
            .unwrap_or_else(|| panic!("no Set-Cookie in an answer without a cookie:\n{answer}"));
        assert!(
            cookie.starts_with("SRV="),
            "the cookie is named SRV: {cookie}"
        );
        if let Some(seen) = cookie_of.insert(be.clone(), cookie.clone()) {
            assert_eq!(seen, cookie, "{be} always gets the same cookie");
        }
    }
    assert_eq!(
        cookie_of.keys().collect::<Vec<_>>(),
        ["be1", "be2"],
        "without the cookie both pods answer: {cookie_of:?}"
    );
    // With a pod's cookie: that pod, every time; no new cookie is set.
    for (be, cookie) in &cookie_of {
        for i in 0..20 {
            let answer = body(
                &sys,
                &["-i", "-H", host, "-H", &format!("Cookie: {cookie}"), &url],
            );
            assert_eq!(
                &backend_of(&answer),
                be,
                "request {i} with {cookie}:\n{answer}"
            );
            assert!(
                !answer.to_ascii_lowercase().contains("set-cookie"),
                "a valid cookie is not set again:\n{answer}"
            );
        }
    }
    // A client keeping its cookie jar stays on the pod of its first answer.
    let jar = sys.lab.dir.join("sticky.jar");
    let jar = jar.to_str().unwrap();
    let seen: Vec<String> = (0..20)
        .map(|_| backend_of(&body(&sys, &["-b", jar, "-c", jar, "-H", host, &url])))
        .collect();
    assert!(
        !seen[0].is_empty() && seen.iter().all(|b| *b == seen[0]),
        "one pod for a client with its cookie jar: {seen:?}"
    );
    sys.lab.pass();
}

/// nginx has no cookie stickiness: `cookie` is the client address there (docs/ingress.md,
/// Annotations): no cookie is set, and one client reaches one pod 20 times out of 20
/// (while the same client reaches both pods of an Ingress without stickiness).
#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn nginx_cookie_stickiness_is_the_client_address_one_client_one_pod() {
    let (mut sys, url) = sticky_and_plain_ingresses("nginx");
    let mut seen = Vec::new();
    for _ in 0..20 {
        let answer = body(&sys, &["-i", "-H", "Host: sticky.example", &url]);
        assert!(
            !answer.to_ascii_lowercase().contains("set-cookie"),
            "nginx sets no cookie:\n{answer}"
        );
        seen.push(backend_of(&answer));
    }
    assert!(
        !seen[0].is_empty() && seen.iter().all(|b| *b == seen[0]),
        "one pod for one client address: {seen:?}"
    );
    sys.lab.pass();
}

/// docs/ingress.md: the pool's certificate is the default one only when it exists on the
/// nodes. Without it (no `<certPath>/<pool>.pem`, `.key`), a TLS Ingress is served with its
/// own certificate, which is also the default; before, every node's whole config was
/// refused by the proxy's check (the VIP never came up).
fn a_missing_pool_certificate(proxy: &str) {
    let mut sys =
        System::start(Options::new(&format!("ing-nopool-{proxy}")).proxy(proxy)).expect("system");
    for pool in ["default", "external", "public", "ipv6"] {
        for ext in ["pem", "key"] {
            std::fs::remove_file(sys.cert_dir.join(format!("{pool}.{ext}"))).unwrap();
        }
    }
    let (ip, crt) = secure_ingress(&sys);
    let want = fingerprint(&crt);
    let mut got = String::new();
    wait::until(T, || {
        got = served_fingerprint(&sys, ip, 443, "secure.example");
        Ok(got == want)
    })
    .unwrap_or_else(|e| {
        panic!("{proxy}: secure.example's certificate is not served ({got}): {e:#}")
    });
    assert_eq!(
        served_fingerprint(&sys, ip, 443, "nocert.example"),
        want,
        "{proxy}: the only certificate is the default"
    );
    let be = served_by_https(&sys, ip, 443, "secure.example", "/x");
    assert!(
        ["be1", "be2"].contains(&be.as_str()),
        "{proxy}: https://secure.example/x reaches a pod ({be:?})"
    );
    assert_eq!(
        status(&sys, "secure.example", &format!("http://{ip}/x")),
        "308"
    );
    sys.lab.pass();
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn haproxy_without_the_pool_certificate_serves_an_ingress_with_its_own_as_the_default() {
    a_missing_pool_certificate("haproxy");
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived and proxies; ./scripts/test.sh runs it"]
fn nginx_without_the_pool_certificate_serves_an_ingress_with_its_own_as_the_default() {
    a_missing_pool_certificate("nginx");
}
