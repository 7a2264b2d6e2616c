//! Hostile hosts, paths, Secret names, Service names and annotation values in Ingresses:
//! each is refused with a problem for its own rule and never reaches the route model (so
//! never a rendered config). The other rules of the same Ingress are still served.

use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8slb_common::ingress::{reason, routes_for_vip, select, IngressInput, SecretMeta, VipOptions};
use k8slb_common::problem::Reason;
use serde_json::json;

/// Pieces that would break out of a haproxy.cfg or nginx.conf line or block.
const HOSTILE: &[&str] = &[
    "\n", "\r", " ", "\t", "\"", "'", "{", "}", ";", "#", "$", "\\", "`", "%0a", "\0",
];

fn world(host: &str, path: &str, secret: &str) -> (Vec<Ingress>, Vec<IngressClass>) {
    let i = json!({
        "metadata": {"namespace": "default", "name": "evil",
                     "annotations": {"loadbalancer/stickiness-cookie": format!("c{path}")}},
        "spec": {
            "ingressClassName": "k8slb",
            "tls": [{"hosts": [host], "secretName": secret}],
            "rules": [
                {"host": host, "http": {"paths": [
                    {"pathType": "Prefix", "path": "/ok", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}},
                {"host": "good.com", "http": {"paths": [
                    {"pathType": "Exact", "path": path, "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                    {"pathType": "ImplementationSpecific", "path": path, "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                    {"pathType": "Prefix", "path": "/fine", "backend": {"service": {"name": format!("web{path}"), "port": {"number": 80}}}},
                    {"pathType": "Prefix", "path": "/alsofine", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}},
            ],
        },
    });
    let c = json!({"metadata": {"name": "k8slb"}, "spec": {"controller": "k8slb.io/ingress-controller"}});
    (
        vec![serde_json::from_value(i).unwrap()],
        vec![serde_json::from_value(c).unwrap()],
    )
}

#[test]
fn hostile_hosts_paths_and_names_never_reach_the_model() {
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "web"},
        "spec": {"ports": [{"port": 80}]},
    }))
    .unwrap();
    for piece in HOSTILE {
        let host = format!("a{piece}b.com");
        let path = format!("/x{piece}y");
        let secret = format!("s{piece}");
        let (ings, classes) = world(&host, &path, &secret);
        let secrets = vec![SecretMeta {
            namespace: "default".into(),
            name: secret.clone(),
            type_: "kubernetes.io/tls".into(),
            valid: true,
            version: String::new(),
            refusal: String::new(),
            // The certificate is for the hostile host (what the check would take from it).
            dns_names: vec![host.to_ascii_lowercase()],
        }];
        let services = vec![svc.clone()];
        let input = IngressInput {
            ingresses: &ings,
            classes: &classes,
            services: &services,
            slices: &[],
            secrets: &secrets,
            reserved_ports: None,
            host_owners: None,
        };
        let sel = select(&ings, &classes);
        let list = sel.by_pool.values().next().cloned().unwrap_or_default();
        let out = routes_for_vip(
            &list,
            &input,
            &VipOptions {
                ip: "198.18.0.10".parse().unwrap(),
                pool: "default".parse().unwrap(),
                pool_certificate: false,
            },
        );
        // The owners (`Ingress <ns>/<name>`, names as Kubernetes accepted them) name the
        // object for the actor's quarantine and its log; never rendered into a config.
        let doc =
            serde_json::to_string(&without_owners(serde_json::to_value(&out.routes).unwrap()))
                .unwrap();
        for bad in [&host, &path, &secret] {
            let needle = serde_json::to_string(bad).unwrap();
            let needle = needle.trim_matches('"');
            assert!(
                !doc.contains(needle),
                "{piece:?}: {bad:?} reached the model: {doc}"
            );
        }
        assert!(!doc.contains(&format!("x{}y", piece)), "{piece:?}: {doc}");
        // One problem per refused value, and the good rules still served.
        let has = |r: Reason| out.problems.iter().any(|p| p.reason == r);
        assert!(has(reason::INVALID_HOST), "{piece:?}: {:?}", out.problems);
        assert!(has(reason::INVALID_PATH), "{piece:?}: {:?}", out.problems);
        assert!(
            has(reason::SECRET_NOT_FOUND),
            "{piece:?}: {:?}",
            out.problems
        );
        assert!(
            has(reason::SERVICE_NOT_FOUND),
            "{piece:?}: {:?}",
            out.problems
        );
        assert!(
            has(reason::INVALID_ANNOTATION),
            "{piece:?}: {:?}",
            out.problems
        );
        let r = &out.routes;
        let ip = "198.18.0.10".parse().unwrap();
        assert!(
            r.route(ip, 80, "good.com", "/alsofine").is_some(),
            "{piece:?}"
        );
        // Problem texts are one printable line each (they become Events and log lines).
        for p in &out.problems {
            assert!(
                !p.message.contains('\n') && !p.message.contains('\r'),
                "{p:?}"
            );
            assert!(!p.object.to_string().contains('\n'), "{p:?}");
        }
    }
}

/// `v` without its `owner` fields.
fn without_owners(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, _)| k != "owner" && k != "defaultOwner")
                .map(|(k, v)| (k, without_owners(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_owners).collect()),
        other => other,
    }
}
