//! The Gateway API conformance runner (issue 23): the upstream v1.6.1 suite's data
//! (`K8SLB_CONFORMANCE_DIR`, default `<repo>/../shared/conformance`) through the
//! standalone mode on HAProxy and on nginx, each in a lab of its own (one LB node, one
//! backend host running the suite's echo identities). Prints one line per test per
//! proxy (PASS, FAIL or SKIP with the reason) and writes a `ConformanceReport` per proxy
//! to `docs/conformance/` (what passed, what was skipped and why). Fails when any test
//! FAILs, and when the data is missing (never a silent pass).
//!
//! The tests are data: `tests/src/conformance_cases.rs` (its header says how to add
//! one); the machinery is `tests/src/conformance.rs`. `K8SLB_CONFORMANCE_ONLY=<text>`
//! runs only the tests whose name contains it (no report written);
//! `K8SLB_CONFORMANCE_PROXIES=nginx` only that proxy.

use k8slb_common::testing::{ca, self_signed_for, signed_by};
use k8slb_tests::conformance::{
    self, nn, read_manifest, Outcome, Runner, CLASS, CONTROLLER, INFRA,
};
use k8slb_tests::conformance_cases::cases;
use k8slb_tests::l7::tls_secret;
use k8slb_tests::system::{Options, System};
use k8slb_tests::wait;
use serde_json::json;
use std::time::{Duration, Instant};

/// A ConfigMap holding a CA certificate as the suite makes them (`ca.crt`).
fn ca_configmap(ns: &str, name: &str, ca_pem: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {"ca.crt": ca_pem},
    })
}

/// What the suite creates at its start: the certificates (names and SANs as it gives
/// them), its CA ConfigMaps and the certificates they sign; and the passthrough and
/// TLS echo certificates (certificate, key), the client certificates by Secret, and
/// `tls-checks-ca-certificate` (PEM): the CA whose client certificates the TLS echo
/// takes, and that signs the TLSRoute termination tests' Gateway certificate.
#[allow(clippy::type_complexity)]
fn secrets() -> (
    Vec<serde_json::Value>,
    (String, String),
    (String, String),
    std::collections::BTreeMap<String, (String, String)>,
    String,
) {
    let mut out = Vec::new();
    let mut passthrough = None;
    // tls-checks-ca-certificate signs the TLS echo's certificate (tls-backend's).
    let checks_ca = ca("gatewayapi");
    let echo = signed_by(
        &checks_ca,
        &["abc.example.com", "other.example.com"],
        &["spiffe://abc.example.com/test-identity"],
    );
    out.push(tls_secret(
        INFRA,
        "tls-checks-certificate",
        &echo.0,
        &echo.1,
    ));
    out.push(ca_configmap(
        INFRA,
        "tls-checks-ca-certificate",
        &checks_ca.0,
    ));
    // A Gateway's backend client certificate (GatewayTLSBackendClientCertificate): the
    // TLS echo takes the certificates of tls-checks-ca-certificate.
    // The Gateway's certificate of the TLSRoute termination tests, which their
    // clients verify with tls-checks-ca-certificate.
    let terminate = signed_by(&checks_ca, &["tls.example.com"], &[]);
    out.push(tls_secret(
        INFRA,
        "tls-terminate-checks-certificate",
        &terminate.0,
        &terminate.1,
    ));
    let client = signed_by(&checks_ca, &[], &[]);
    out.push(tls_secret(
        INFRA,
        "tls-checks-client-certificate",
        &client.0,
        &client.1,
    ));
    // A CA that signs nothing the suite serves.
    out.push(ca_configmap(
        INFRA,
        "mismatch-ca-certificate",
        &ca("gatewayapi").0,
    ));
    // The client certificate validation CAs, each signing one client certificate.
    let mut clients = std::collections::BTreeMap::new();
    for (cm, secret) in [
        (
            "tls-validity-checks-ca-certificate",
            "tls-validity-checks-client-certificate",
        ),
        (
            "tls-validity-checks-per-port-ca-certificate",
            "tls-validity-checks-per-port-client-certificate",
        ),
    ] {
        let ca = ca("gatewayapi");
        out.push(ca_configmap(INFRA, cm, &ca.0));
        let c = signed_by(&ca, &[], &[]);
        out.push(tls_secret(INFRA, secret, &c.0, &c.1));
        clients.insert(secret.to_string(), c);
    }
    clients.insert("tls-checks-client-certificate".to_string(), client);
    out.push(ca_configmap(
        conformance::WEB,
        "web-backend-cm",
        &ca("gatewayapi").0,
    ));
    for (ns, name, sans) in [
        (conformance::WEB, "certificate", vec!["*"]),
        (
            INFRA,
            "tls-validity-checks-certificate",
            vec!["*", "*.org", "*.wildcard.org"],
        ),
        (
            INFRA,
            "tls-passthrough-checks-certificate",
            vec!["abc.example.com"],
        ),
        (
            conformance::APP,
            "tls-passthrough-checks-certificate",
            vec!["abc.example.com"],
        ),
    ] {
        let (crt, key) = self_signed_for(&sans);
        if (ns, name) == (INFRA, "tls-passthrough-checks-certificate") {
            passthrough = Some((crt.clone(), key.clone()));
        }
        out.push(tls_secret(ns, name, &crt, &key));
    }
    (
        out,
        passthrough.expect("the passthrough certificate"),
        echo,
        clients,
        checks_ca.0,
    )
}

fn run_on(
    proxy: &str,
    data: &std::path::Path,
    only: Option<&str>,
) -> Vec<(conformance::Case, Outcome)> {
    let mut opts = Options::new(&format!("conf-{proxy}"))
        .proxy(proxy)
        .lbs(1)
        .backends(1);
    // Room for every Gateway of the suite's manifests (one address each).
    let mut config = k8slb_tests::system::default_config(opts.advert_int);
    config["pools"]["default"]["range"] = json!("198.18.0.100-198.18.0.250");
    // The default reserved ports but 6443 (the API server's on a control-plane node):
    // GatewayInvalidFrontendClientCertificateValidation puts a listener on 6443, and the
    // lab's LB node runs no API server. An admin of a conformance cluster would do the
    // same.
    opts.config_extra = json!({
        "pools": config["pools"],
        "reservedPorts": [22, "2379-2380", 9253, 9254, 10250, 10256],
    });
    let mut sys = System::start(opts).expect("the lab starts");

    let base = read_manifest(&data.join("gateway-api/conformance/base/manifests.yaml"))
        .expect("the base manifests");
    let mut all = cases();
    if let Some(o) = only {
        all.retain(|c| c.name.contains(o));
    }
    // Every Deployment the base and the cases' manifests name gets an echo identity.
    let mut deployments = conformance::deployments(&base);
    // Those that run the suite's gRPC or TCP echo server (GRPC_ECHO_SERVER,
    // TCP_ECHO_SERVER) answer gRPC or its TCP protocol.
    // The suite mounts the passthrough certificate into its TLS echo (tcp-backend).
    let (secrets, passthrough, echo, clients, checks_ca) = secrets();
    let mut kinds = conformance::EchoKinds {
        tls_pem: Some(passthrough),
        echo_pem: Some(echo),
        echo_client_ca: Some(checks_ca.clone()),
        client_pems: clients,
        checks_ca: Some(checks_ca),
        ..Default::default()
    };
    kinds.extend(&base);
    for c in &all {
        if c.skip.is_some() {
            continue;
        }
        for m in c.manifest.iter().chain(&c.more_manifests) {
            let docs = read_manifest(&data.join("gateway-api/conformance/tests").join(m))
                .unwrap_or_else(|e| panic!("{}: {e:#}", c.name));
            deployments.extend(conformance::deployments(&docs));
            kinds.extend(&docs);
        }
    }
    let results;
    {
        let mut runner = Runner::start(&mut sys, data.to_path_buf(), &deployments, &kinds)
            .expect("the echo backend");
        let class = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": CLASS},
            "spec": {"controllerName": CONTROLLER},
        });
        let mut docs = vec![class];
        docs.extend(base);
        docs.extend(secrets);
        let docs = runner.prepare(&docs);
        runner
            .apply("base", &docs)
            .expect("the base manifests applied");
        wait::until(Duration::from_secs(60), || {
            Ok(["same-namespace", "all-namespaces", "backend-namespaces"]
                .iter()
                .all(|g| runner.address(&nn(g)).is_ok()))
        })
        .expect("the base Gateways get their addresses");

        let started = Instant::now();
        let mut out = Vec::new();
        for c in all {
            let t = Instant::now();
            let o = runner.run_case(&c, proxy);
            let why = match (&o, c.known_failure(proxy)) {
                (Outcome::Pass, _) => String::new(),
                (Outcome::Fail(w), Some(known)) => format!(": known failure ({known}): {w}"),
                (Outcome::Fail(w) | Outcome::Skip(w), _) => format!(": {w}"),
            };
            println!(
                "conformance {proxy} {} {} ({:.1} s){why}",
                o.word(),
                c.name,
                t.elapsed().as_secs_f64()
            );
            out.push((c, o));
        }
        println!(
            "conformance {proxy}: {} tests in {:.0} s",
            out.len(),
            started.elapsed().as_secs_f64()
        );
        results = out;
    }
    if results
        .iter()
        .all(|(c, o)| o.word() != "FAIL" || c.known_failure(proxy).is_some())
    {
        sys.lab.pass();
    }
    results
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived, HAProxy and nginx; ./scripts/test.sh runs it"]
fn gateway_api_conformance_suite_on_haproxy_and_nginx() {
    let data = conformance::data_dir().unwrap_or_else(|e| panic!("{e:#}"));
    let only = std::env::var("K8SLB_CONFORMANCE_ONLY").ok();
    let proxies = std::env::var("K8SLB_CONFORMANCE_PROXIES").unwrap_or("haproxy,nginx".into());
    let mut failed = Vec::new();
    let mut fixed = Vec::new();
    for proxy in proxies.split(',') {
        let results = run_on(proxy, &data, only.as_deref());
        for (c, o) in &results {
            match (o, c.known_failure(proxy)) {
                (Outcome::Fail(why), None) => failed.push(format!("{proxy} {}: {why}", c.name)),
                (Outcome::Pass, Some(_)) => fixed.push(format!("{proxy} {}", c.name)),
                _ => {}
            }
        }
        if only.is_none() {
            let dir = k8slb_tests::bins::repo_root().join("docs/conformance");
            std::fs::create_dir_all(&dir).unwrap();
            let text = conformance::report(proxy, env!("CARGO_PKG_VERSION"), &results);
            let path = dir.join(format!("k8slb-{proxy}-report.yaml"));
            let old = std::fs::read_to_string(&path).unwrap_or_default();
            if conformance::same_report(&old, &text) {
                println!("conformance {proxy}: {} unchanged", path.display());
            } else {
                std::fs::write(&path, text).unwrap();
                println!("conformance {proxy}: report written to {}", path.display());
            }
        }
    }
    assert!(
        failed.is_empty(),
        "conformance failures:\n{}",
        failed.join("\n")
    );
    assert!(
        fixed.is_empty(),
        "known failures that pass now (remove their expect_fail in conformance_cases.rs):\n{}",
        fixed.join("\n")
    );
}

/// One proxy's Ingress suite: one line per scenario, and the results.
fn ingress_on(
    proxy: &str,
    features: &[(String, k8slb_tests::gherkin::Feature)],
) -> Vec<(String, String, Result<(), String>)> {
    use k8slb_tests::ingress_conformance::{echo_needs, IngressRunner};
    let opts = Options::new(&format!("ing-{proxy}"))
        .proxy(proxy)
        .lbs(1)
        .backends(1);
    let mut sys = System::start(opts).expect("the lab starts");
    let needs = echo_needs(features).expect("the features' manifests");
    let started = Instant::now();
    let mut out = Vec::new();
    {
        let mut runner = IngressRunner::start(&mut sys, &needs).expect("the echo backend");
        for (stem, f) in features {
            let known = |name: &str| ingress_known_failure(proxy, stem, name).is_some();
            for (name, r) in runner.run_feature(stem, f, known) {
                let known = ingress_known_failure(proxy, stem, &name);
                let line = match (&r, known) {
                    (Ok(()), _) => "PASS".to_string(),
                    (Err(e), Some(k)) => format!("FAIL: known failure ({k}): {e}"),
                    (Err(e), None) => format!("FAIL: {e}"),
                };
                let (word, why) = line.split_once(": ").unwrap_or((&line, ""));
                let why = if why.is_empty() {
                    String::new()
                } else {
                    format!(": {why}")
                };
                println!("ingress-conformance {proxy} {word} {stem}: {name}{why}");
                out.push((stem.clone(), name, r));
            }
        }
    }
    println!(
        "ingress-conformance {proxy}: {} scenarios in {:.0} s",
        out.len(),
        started.elapsed().as_secs_f64()
    );
    if out
        .iter()
        .all(|(stem, name, r)| r.is_ok() || ingress_known_failure(proxy, stem, name).is_some())
    {
        sys.lab.pass();
    }
    out
}

/// Scenarios known to fail on a proxy (empty proxy: both), and why: reported as FAIL, and
/// the test fails only if one passes (then its entry must go).
const INGRESS_KNOWN_FAILURES: &[(&str, &str, &str, &str)] = &[];

fn ingress_known_failure(proxy: &str, stem: &str, scenario: &str) -> Option<&'static str> {
    INGRESS_KNOWN_FAILURES
        .iter()
        .find(|(p, f, s, _)| (p.is_empty() || *p == proxy) && *f == stem && scenario.starts_with(s))
        .map(|(_, _, _, why)| *why)
}

/// The report of one proxy's Ingress run: per feature, what passed and what failed and why.
fn ingress_report(proxy: &str, results: &[(String, String, Result<(), String>)]) -> String {
    let mut text = format!(
        "# The Ingress conformance features (kubernetes-sigs/ingress-controller-conformance\n\
         # at f91a799, features/*.feature) through k8slb's standalone mode on {proxy}, one\n\
         # result per scenario (an outline's example rows each count):\n\
         # tests/tests/e2e_conformance.rs (ingress_conformance_features_on_haproxy_and_nginx).\n\
         implementation: k8slb ({proxy})\nversion: {}\nfeatures:\n",
        env!("CARGO_PKG_VERSION")
    );
    for stem in k8slb_tests::ingress_conformance::FEATURES {
        let of: Vec<_> = results.iter().filter(|(s, _, _)| s == stem).collect();
        let passed = of.iter().filter(|(_, _, r)| r.is_ok()).count();
        text.push_str(&format!(
            "  {stem}:\n    scenarios: {}\n    passed: {passed}\n    failed: {}\n",
            of.len(),
            of.len() - passed
        ));
        let failed: Vec<_> = of.iter().filter(|(_, _, r)| r.is_err()).collect();
        if !failed.is_empty() {
            text.push_str("    failures:\n");
            for (_, name, r) in failed {
                let why = r.as_ref().err().cloned().unwrap_or_default();
                text.push_str(&format!("    - scenario: {name:?}\n      why: {why:?}\n"));
            }
        }
    }
    text
}

#[test]
#[ignore = "needs root: the lab's network namespaces with the real actors, keepalived, HAProxy and nginx; ./scripts/test.sh runs it"]
fn ingress_conformance_features_on_haproxy_and_nginx() {
    use k8slb_tests::ingress_conformance::{read_features, unknown_steps};
    let data = conformance::data_dir().unwrap_or_else(|e| panic!("{e:#}"));
    let features = read_features(&data).unwrap_or_else(|e| panic!("{e:#}"));
    let unknown = unknown_steps(&features);
    assert!(
        unknown.is_empty(),
        "steps the interpreter does not know:\n{}",
        unknown.join("\n")
    );
    let proxies = std::env::var("K8SLB_CONFORMANCE_PROXIES").unwrap_or("haproxy,nginx".into());
    let mut failed = Vec::new();
    let mut fixed = Vec::new();
    for proxy in proxies.split(',') {
        let results = ingress_on(proxy, &features);
        for (stem, name, r) in &results {
            match (r, ingress_known_failure(proxy, stem, name)) {
                (Err(why), None) => failed.push(format!("{proxy} {stem}: {name}: {why}")),
                (Ok(()), Some(_)) => fixed.push(format!("{proxy} {stem}: {name}")),
                _ => {}
            }
        }
        let dir = k8slb_tests::bins::repo_root().join("docs/conformance");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("k8slb-{proxy}-ingress-report.yaml"));
        std::fs::write(&path, ingress_report(proxy, &results)).unwrap();
        println!(
            "ingress-conformance {proxy}: report written to {}",
            path.display()
        );
    }
    assert!(
        failed.is_empty(),
        "Ingress conformance failures:\n{}",
        failed.join("\n")
    );
    assert!(
        fixed.is_empty(),
        "known failures that pass now (remove them from INGRESS_KNOWN_FAILURES):\n{}",
        fixed.join("\n")
    );
}
