//! `k8slb-watcher plan` and `run --source files:` as a user runs them: the real binary.

use k8slb_common::testing::self_signed;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_k8slb-watcher");

const CONFIG: &str = r#"{ "pools": {
  "default": { "network": "198.18.0.0/24", "range": "198.18.0.100-198.18.0.120" } } }"#;

const OBJECTS: &str = r#"
apiVersion: v1
kind: Node
metadata: { name: lb1, labels: { type: loadBalancer } }
status: { conditions: [ { type: Ready, status: "True" } ], addresses: [ { type: InternalIP, address: 198.18.0.11 } ] }
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: default }
spec: { type: LoadBalancer, ports: [ { name: http, port: 80, targetPort: 8080 } ] }
---
apiVersion: v1
kind: Service
metadata: { name: lost, namespace: default, annotations: { loadbalancer/pool: nope } }
spec: { type: LoadBalancer, ports: [ { port: 80 } ] }
"#;

fn configmap(config: &str) -> String {
    let indented: String = config.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: global, namespace: k8slb-system }}\ndata:\n  config: |\n{indented}"
    )
}

fn plan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).arg("plan").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn plan_prints_the_state_with_problems_as_data() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("config.json"), CONFIG).unwrap();
    std::fs::write(d.path().join("objects.yaml"), OBJECTS).unwrap();
    let cfg = d.path().join("config.json");
    let objs = d.path().join("objects.yaml");
    let (code, out, err) = plan(&[
        "--config",
        cfg.to_str().unwrap(),
        "--objects",
        objs.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["services"]["default/web"]["ips"][0], "198.18.0.100");
    assert_eq!(v["services"]["default/web"]["pool"], "default");
    let p = &v["problems"][0];
    assert_eq!(p["object"], "Service default/lost");
    assert_eq!(p["reason"], "UnknownPool");
    assert!(p["message"].as_str().unwrap().contains("nope"));

    // Sticky on a previous state: a new Service never takes web's address.
    std::fs::write(d.path().join("prev.json"), &out).unwrap();
    let more = d.path().join("more.yaml");
    std::fs::write(
        &more,
        "apiVersion: v1\nkind: Service\nmetadata: { name: aaa, namespace: default, creationTimestamp: '2020-01-01T00:00:00Z' }\nspec: { type: LoadBalancer, ports: [ { port: 80 } ] }\n",
    )
    .unwrap();
    let prev = d.path().join("prev.json");
    let (code, out2, err) = plan(&[
        "--config",
        cfg.to_str().unwrap(),
        "--objects",
        objs.to_str().unwrap(),
        more.to_str().unwrap(),
        "--previous",
        prev.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v2: serde_json::Value = serde_json::from_str(&out2).unwrap();
    assert_eq!(v2["services"]["default/web"]["ips"][0], "198.18.0.100");
    assert_eq!(v2["services"]["default/aaa"]["ips"][0], "198.18.0.101");

    // The config may also come from the ConfigMap among the objects, and a directory.
    std::fs::write(d.path().join("global.yaml"), configmap(CONFIG)).unwrap();
    std::fs::remove_file(&cfg).unwrap();
    std::fs::remove_file(&prev).unwrap();
    let (code, out3, err) = plan(&["--objects", d.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out3.contains("198.18.0.100"));
}

#[test]
fn unreadable_inputs_fail_with_one_line() {
    let d = tempfile::tempdir().unwrap();
    let objs = d.path().join("o.yaml");
    std::fs::write(&objs, OBJECTS).unwrap();
    let missing = d.path().join("missing.json");
    let (code, out, err) = plan(&[
        "--config",
        missing.to_str().unwrap(),
        "--objects",
        objs.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(out.is_empty());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("cannot read config"), "{err}");

    let bad = d.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"pools":{"a":{"network":"10.0.0.0/24","range":"10.0.1.1"}},"haproxi":{}}"#,
    )
    .unwrap();
    let (code, _, err) = plan(&[
        "--config",
        bad.to_str().unwrap(),
        "--objects",
        objs.to_str().unwrap(),
    ]);
    assert_eq!(code, 64);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("2 problem(s)") && err.contains("did you mean \"haproxy\""),
        "{err}"
    );

    let cfg = d.path().join("c.json");
    std::fs::write(&cfg, CONFIG).unwrap();
    let broken = d.path().join("broken.yaml");
    std::fs::write(&broken, "kind: Service\n  metadata: [").unwrap();
    let (code, _, err) = plan(&[
        "--config",
        cfg.to_str().unwrap(),
        "--objects",
        broken.to_str().unwrap(),
    ]);
    assert_eq!(code, 66);
    assert!(
        err.contains("cannot parse") && err.contains("broken.yaml"),
        "{err}"
    );
}

fn wait_for(
    path: &Path,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                if pred(&v) {
                    return v;
                }
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn files_source_follows_the_directory_and_keeps_the_last_good_config() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("objects");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("global.yaml"), configmap(CONFIG)).unwrap();
    std::fs::write(src.join("objects.yaml"), OBJECTS).unwrap();
    let state = d.path().join("state").join("state.json");
    let log = d.path().join("watcher.log");
    let _w = Kill(
        Command::new(BIN)
            .args(["run", "--source", &format!("files:{}", src.display())])
            .args(["--state-out", &format!("file:{}", state.display())])
            .args(["--admin-addr", "127.0.0.1:0"])
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for(&state, "web's IP", |v| {
        v["services"]["default/web"]["ips"][0] == "198.18.0.100"
    });

    // A new Service file appears: it is allocated.
    std::fs::write(
        src.join("api.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: { name: api, namespace: default }\nspec: { type: LoadBalancer, ports: [ { port: 443 } ] }\n",
    )
    .unwrap();
    wait_for(&state, "api's IP", |v| {
        v["services"]["default/api"]["ips"][0] == "198.18.0.101"
    });

    // A broken config: the last good one stays in force, and the state says why.
    std::fs::write(
        src.join("global.yaml"),
        configmap(r#"{"pools":{"default":{"network":"bad"}}}"#),
    )
    .unwrap();
    let v = wait_for(&state, "the InvalidConfig problem", |v| {
        v["problems"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["reason"] == "InvalidConfig"))
    });
    assert_eq!(v["services"]["default/web"]["ips"][0], "198.18.0.100");

    // A file that does not parse: nothing is published (never an empty state). The
    // watcher's warning proves it read the file before the state is looked at.
    std::fs::write(src.join("objects.yaml"), "kind: Service\n  metadata: [").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("cannot read the objects")
    {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for the watcher to read the broken file; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let v = wait_for(&state, "the same state", |_| true);
    assert_eq!(v["services"]["default/web"]["ips"][0], "198.18.0.100");

    // Deleting web releases exactly its IP; api keeps its own.
    std::fs::write(src.join("objects.yaml"), "").unwrap();
    std::fs::write(src.join("global.yaml"), configmap(CONFIG)).unwrap();
    let v = wait_for(&state, "web released", |v| {
        v["services"].get("default/web").is_none()
    });
    assert_eq!(v["services"]["default/api"]["ips"][0], "198.18.0.101");
    assert!(v["vips"].get("198.18.0.100").is_none());
}

#[test]
fn plan_reads_ingresses_classes_and_tls_secrets_from_files() {
    use base64::Engine;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../actor/tests/fixtures/ingress");
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("config.json"), CONFIG).unwrap();
    std::fs::write(d.path().join("objects.yaml"), OBJECTS).unwrap();
    for f in ["services.yaml", "rancher-examples.yaml"] {
        std::fs::copy(fixtures.join(f), d.path().join(f)).unwrap();
    }
    let (crt, key) = self_signed("secure.bar.com");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    std::fs::write(
        d.path().join("tls.yaml"),
        format!(
            r#"apiVersion: v1
kind: Secret
metadata: {{ namespace: default, name: good }}
type: kubernetes.io/tls
data: {{ tls.crt: {}, tls.key: {} }}
---
apiVersion: v1
kind: Secret
metadata: {{ namespace: default, name: broken }}
type: kubernetes.io/tls
data: {{ tls.crt: {}, tls.key: {} }}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{ namespace: default, name: secure, creationTimestamp: "2026-01-01T00:00:09Z" }}
spec:
  ingressClassName: k8slb
  tls:
  - {{ hosts: [secure.bar.com], secretName: good }}
  - {{ hosts: [broken.bar.com], secretName: broken }}
  rules:
  - host: secure.bar.com
    http: {{ paths: [ {{ path: /, pathType: Prefix, backend: {{ service: {{ name: nginx-service, port: {{ number: 80 }} }} }} }} ] }}
"#,
            b64(&crt),
            b64(&key),
            b64(&crt),
            b64(&crt), // a certificate where the key should be
        ),
    )
    .unwrap();
    let (code, out, err) = plan(&[
        "--config",
        d.path().join("config.json").to_str().unwrap(),
        "--objects",
        d.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // web (the oldest Service) keeps .100; the Ingresses share the next address.
    let vip = "198.18.0.101";
    assert_eq!(v["vips"][vip]["ingress"], true, "{}", v["vips"]);
    for name in [
        "ingress-custom-port",
        "ingress-default-service",
        "ingress-host-only",
        "ingress-multiple-svcs",
        "secure",
    ] {
        assert_eq!(v["ingresses"][format!("default/{name}")]["ips"][0], vip);
    }
    let listeners: Vec<(String, u64, String)> = v["http"]["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["ip"].as_str().unwrap().to_string(),
                l["port"].as_u64().unwrap(),
                l["protocol"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        listeners,
        [
            (vip.to_string(), 80, "http".to_string()),
            (vip.to_string(), 99, "http".to_string()),
            (vip.to_string(), 443, "https".to_string()),
        ]
    );
    let problems = v["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p["object"] == "Ingress default/secure"
                && p["reason"] == "SecretInvalid"
                && p["message"].as_str().unwrap().contains("default/broken")),
        "{problems:?}"
    );
    assert!(
        !out.contains("PRIVATE KEY") && !out.contains(&b64(&key)[..40]),
        "no key material in the state"
    );
}

fn tls_secret_doc(name: &str, crt: &str, key: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{ namespace: default, name: {name} }}\ntype: kubernetes.io/tls\ndata: {{ tls.crt: {}, tls.key: {} }}\n",
        b64(crt),
        b64(key)
    )
}

/// Waits until `path` holds `want` (or, with `None`, is gone).
fn wait_file(path: &Path, want: Option<&str>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(path).ok().as_deref() != want {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn files_source_writes_rotates_and_removes_node_certificates_0600() {
    use std::os::unix::fs::PermissionsExt;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../actor/tests/fixtures/ingress");
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("objects");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("global.yaml"), configmap(CONFIG)).unwrap();
    std::fs::write(src.join("objects.yaml"), OBJECTS).unwrap();
    std::fs::copy(fixtures.join("services.yaml"), src.join("services.yaml")).unwrap();
    let (crt, key) = self_signed("secure.bar.com");
    std::fs::write(src.join("secret.yaml"), tls_secret_doc("good", &crt, &key)).unwrap();
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: { namespace: default, name: secure }\nspec:\n  ingressClassName: k8slb\n  tls: [ { hosts: [secure.bar.com], secretName: good } ]\n  rules: [ { host: secure.bar.com, http: { paths: [ { path: /, pathType: Prefix, backend: { service: { name: nginx-service, port: { number: 80 } } } } ] } } ]\n";
    std::fs::write(src.join("ingress.yaml"), ingress).unwrap();
    let state = d.path().join("state.json");
    let certs = d.path().join("certs");
    let log = d.path().join("watcher.log");
    let _w = Kill(
        Command::new(BIN)
            .args(["run", "--source", &format!("files:{}", src.display())])
            .args(["--state-out", &format!("file:{}", state.display())])
            .args(["--certs-out", certs.to_str().unwrap()])
            .args(["--admin-addr", "127.0.0.1:0"])
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let file = certs.join("default_good.pem");
    wait_file(&file, Some(&format!("{crt}{key}")), "the node certificate");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&certs), 0o700);

    // cert-manager renews it: the new pair replaces the file (the state does not change).
    let (crt2, key2) = self_signed("secure.bar.com");
    std::fs::write(
        src.join("secret.yaml"),
        tls_secret_doc("good", &crt2, &key2),
    )
    .unwrap();
    wait_file(
        &file,
        Some(&format!("{crt2}{key2}")),
        "the renewed certificate",
    );

    // The Ingress goes: its certificate leaves the nodes.
    std::fs::remove_file(src.join("ingress.yaml")).unwrap();
    wait_file(&file, None, "the unused certificate to be removed");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("PRIVATE KEY") && !text.contains(&key2[40..80]),
        "key material in the log"
    );
}
