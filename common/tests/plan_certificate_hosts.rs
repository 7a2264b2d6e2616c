//! A certificate serves only the hosts its subjectAltName DNS names cover (RFC 6125, the
//! common name never read; `k8slb_common::certs::covers`): a `tls.hosts` entry it does not
//! cover gets a `CertificateHostMismatch` problem (an Event on the Ingress), and the host
//! is still served on HTTPS with the default certificate (no redirect to HTTPS). Table
//! tests through the whole plan, with real certificates made by `openssl`.

mod support;

use k8s_openapi::api::core::v1::Secret;
use k8slb_common::objects::Objects;
use k8slb_common::routes::{CertFile, RouteAction};
use k8slb_common::state::State;
use serde_json::json;
use support::*;

const POOL: &str = r#"{ "pools": {
    "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" } } }"#;

/// A self-signed P-256 certificate with subject `/CN=cn` and, when given, the
/// subjectAltName `san` (`DNS:a,DNS:b`); and its key.
fn certificate(cn: &str, san: Option<&str>) -> (String, String) {
    let d = tempfile::tempdir().unwrap();
    let (k, c) = (d.path().join("k"), d.path().join("c"));
    let mut cmd = std::process::Command::new("openssl");
    cmd.args([
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
    ])
    .args(["-nodes", "-days", "2", "-subj", &format!("/CN={cn}")]);
    if let Some(san) = san {
        cmd.args(["-addext", &format!("subjectAltName={san}")]);
    }
    let out = cmd
        .arg("-keyout")
        .arg(&k)
        .arg("-out")
        .arg(&c)
        .output()
        .expect("the openssl command");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        std::fs::read_to_string(c).unwrap(),
        std::fs::read_to_string(k).unwrap(),
    )
}

fn tls_secret(ns: &str, name: &str, (crt, key): &(String, String)) -> Secret {
    use base64::Engine;
    let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": { "name": name, "namespace": ns },
        "data": { "tls.crt": b(crt), "tls.key": b(key) }
    }))
    .unwrap()
}

fn world(ingresses: Vec<Ing>, secrets: Vec<Secret>) -> Objects {
    let mut o = objs(vec![], nodes(2), vec![]);
    o.services.push(backend_svc("bank", "app", 80));
    o.secrets = secrets;
    o.ingresses = ingresses.into_iter().map(Ing::build).collect();
    o.ingress_classes = vec![ingress_class()];
    o
}

fn route(s: &State, port: u16, host: &str) -> String {
    let ip = s.http.listeners[0].ip;
    match s.http.route(ip, port, host, "/") {
        Some(RouteAction::Forward { backends, .. }) => backends[0].id.to_string(),
        Some(RouteAction::Redirect(_)) => "redirect".into(),
        Some(RouteAction::Respond { status }) => status.code().to_string(),
        None => "none".into(),
    }
}

/// One Ingress per row, each with its own Secret and host: (the certificate's subject CN,
/// its subjectAltName, the TLS host, whether the certificate serves the host).
#[test]
fn a_certificate_serves_only_the_hosts_its_dns_names_cover_others_get_the_default() {
    type Row = (&'static str, Option<&'static str>, &'static str, bool);
    let rows: &[Row] = &[
        ("x", Some("DNS:bank.example.com"), "bank.example.com", true),
        (
            "x",
            Some("DNS:BANK2.example.com."),
            "bank2.example.com",
            true,
        ),
        (
            "x",
            Some("DNS:a.example.net,DNS:*.example.com"),
            "shop.example.com",
            true,
        ),
        ("x", Some("DNS:*.example.org"), "*.example.org", true),
        // A wildcard covers one label in its place, never the bare domain nor two labels.
        ("x", Some("DNS:*.example.info"), "example.info", false),
        ("x", Some("DNS:*.example.info"), "a.b.example.info", false),
        // A wildcard host needs the wildcard name.
        ("x", Some("DNS:a.example.biz"), "*.example.biz", false),
        // The common name is never read: no subjectAltName covers no host.
        ("cn.example.com", None, "cn.example.com", false),
        (
            "cn2.example.com",
            Some("DNS:other.example.com"),
            "cn2.example.com",
            false,
        ),
        // Another domain's certificate; an IP address SAN is not a DNS name.
        ("x", Some("DNS:evil.example.net"), "pay.example.com", false),
        ("x", Some("IP:198.18.0.1"), "ip.example.com", false),
    ];
    let mut ings = Vec::new();
    let mut secrets = Vec::new();
    for (i, (cn, san, host, _)) in rows.iter().enumerate() {
        let name = format!("c{i}");
        secrets.push(tls_secret("bank", &name, &certificate(cn, *san)));
        let rule_host = host.replace('*', "w");
        ings.push(
            ing("bank", &format!("i{i}"))
                .rule(host, "/", "app", 80)
                .rule(&rule_host, "/", "app", 80)
                .tls(&name, &[host])
                .created(i as u32),
        );
    }
    let s = run(&cfg(POOL), &world(ings, secrets), None);
    let https = s
        .http
        .listeners
        .iter()
        .find(|l| l.port == 443)
        .expect("HTTPS");
    let tls = https.tls.as_ref().unwrap();
    for (i, (cn, san, host, served)) in rows.iter().enumerate() {
        let row = format!("row {i}: CN {cn}, SAN {san:?}, host {host}");
        let key = format!("bank/i{i}");
        let mismatch: Vec<String> = ingress_problems(&s, &key)
            .into_iter()
            .filter(|(r, _)| r == "CertificateHostMismatch")
            .map(|(_, m)| m)
            .collect();
        // A name the host stands for (a wildcard host: one name below it).
        let sni = host.replace('*', "w");
        let named: Vec<String> = tls
            .certificates
            .iter()
            .filter(|c| c.hosts.iter().any(|h| h.as_str() == *host))
            .map(|c| c.file.stem())
            .collect();
        if *served {
            assert!(mismatch.is_empty(), "{row}: {mismatch:?}");
            assert_eq!(named, [format!("bank_c{i}")], "{row}");
            assert!(
                matches!(tls.certificate_for(&sni), Some(CertFile::Secret { name, .. }) if name.as_str() == format!("c{i}")),
                "{row}"
            );
            assert_eq!(route(&s, 80, &sni), "redirect", "{row}");
        } else {
            assert_eq!(mismatch.len(), 1, "{row}: {:?}", ingress_problems(&s, &key));
            assert!(
                mismatch[0].contains(&format!("Secret bank/c{i}"))
                    && mismatch[0].contains(&format!("not for host {host}"))
                    && mismatch[0].contains("common name is never read")
                    && mismatch[0].contains("default certificate"),
                "{row}: {mismatch:?}"
            );
            assert!(
                named.is_empty(),
                "{row}: no certificate names the host: {named:?}"
            );
            // The host is still served on HTTPS, with the default (the pool's) certificate,
            // and plain HTTP is not redirected to a certificate the client would refuse.
            assert!(
                matches!(tls.certificate_for(&sni), Some(CertFile::Pool { .. })),
                "{row}: {:?}",
                tls.certificate_for(&sni)
            );
            assert_eq!(route(&s, 443, &sni), "bank/app:80", "{row}");
            assert_eq!(route(&s, 80, &sni), "bank/app:80", "{row}");
        }
    }
    // The message names the certificate's names, escaped, a few of them only.
    let m = ingress_problems(&s, "bank/i9");
    assert!(
        m.iter()
            .any(|(_, m)| m.contains("DNS names: evil.example.net;")),
        "{m:?}"
    );
    let m = ingress_problems(&s, "bank/i7");
    assert!(
        m.iter().any(|(_, m)| m.contains("DNS names: none;")),
        "{m:?}"
    );
}

/// A certificate with many names is listed in a message by its first four.
#[test]
fn a_mismatch_message_lists_a_few_of_the_certificates_names() {
    let san = (0..40)
        .map(|i| format!("DNS:n{i:02}.example.net"))
        .collect::<Vec<_>>()
        .join(",");
    let s = run(
        &cfg(POOL),
        &world(
            vec![ing("bank", "web")
                .rule("bank.example.com", "/", "app", 80)
                .tls("many", &["bank.example.com"])],
            vec![tls_secret("bank", "many", &certificate("x", Some(&san)))],
        ),
        None,
    );
    let p = ingress_problems(&s, "bank/web");
    let (_, m) = p
        .iter()
        .find(|(r, _)| r == "CertificateHostMismatch")
        .expect("a mismatch");
    assert!(
        m.contains(
            "n00.example.net, n01.example.net, n02.example.net, n03.example.net and 36 more"
        ),
        "{m}"
    );
    assert!(m.len() < 400, "{} bytes: {m}", m.len());
}

/// A Gateway listener is not an Ingress host: its certificate whose names do not cover
/// its hostname (the conformance suite's `*`, `*.org`, `*.wildcard.org` for
/// `second-example.org`) is served for that hostname, and the mismatch is a
/// `CertificateHostMismatch` problem on the Gateway (its Event and log line), with the
/// message the listener's refusal had before; the listener's status is not touched
/// (see `gateway_routes.rs`).
#[test]
fn a_gateway_listeners_certificate_host_mismatch_is_a_problem_on_the_gateway_and_served() {
    let mut o = world(
        vec![],
        vec![tls_secret(
            "infra",
            "suite-tls",
            &certificate("x", Some("DNS:*,DNS:*.org,DNS:*.wildcard.org")),
        )],
    );
    o.add_text(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: second, port: 443, protocol: HTTPS, hostname: second-example.org, tls: { certificateRefs: [{ name: suite-tls }] } }
"#,
    )
    .unwrap();
    let s = run(&cfg(POOL), &o, None);
    let on_gateway: Vec<(String, String)> = s
        .problems
        .iter()
        .filter(|p| p.object.to_string() == "Gateway infra/gw")
        .map(|p| (p.reason.to_string(), p.message.clone()))
        .collect();
    assert_eq!(
        on_gateway,
        [(
            "CertificateHostMismatch".to_string(),
            "listener second: the certificate of Secret infra/suite-tls is not for the \
             listener's hostname second-example.org (its subjectAltName DNS names: *, *.org, \
             *.wildcard.org; the common name is never read)"
                .to_string()
        )]
    );
    let tls = s.http.listeners[0].tls.as_ref().expect("served on HTTPS");
    let served: Vec<(String, Vec<String>)> = tls
        .certificates
        .iter()
        .map(|c| {
            (
                c.file.stem(),
                c.hosts.iter().map(|h| h.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(
        served,
        [(
            "infra_suite-tls".to_string(),
            vec!["second-example.org".to_string()]
        )]
    );
}
