//! `k8slb-watcher run --source files:<dir> --status-out <dir>`, through the real binary:
//! the statuses the Kubernetes mode would write, one JSON file per object, replaced
//! whole, kept while nothing changes (transition times included), removed when the
//! object goes.

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_k8slb-watcher");

const BASE: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: { name: global, namespace: k8slb-system }
data:
  config: '{"pools":{"default":{"network":"198.18.0.0/24","range":"198.18.0.100-198.18.0.120"}}}'
---
apiVersion: v1
kind: Node
metadata: { name: lb1, labels: { type: loadBalancer } }
status:
  addresses: [ { type: InternalIP, address: 198.18.0.2 } ]
  conditions: [ { type: Ready, status: "True" } ]
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: default }
spec: { type: LoadBalancer, ports: [ { port: 80 } ] }
---
apiVersion: v1
kind: Service
metadata: { name: app, namespace: default }
spec: { type: ClusterIP, ports: [ { port: 8080 } ] }
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: default }
spec:
  gatewayClassName: k8slb
  listeners: [ { name: http, port: 80, protocol: HTTP } ]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: theirs, namespace: default }
spec:
  parentRefs: [ { name: somebody-elses } ]
  rules: [ { backendRefs: [ { name: app, port: 8080 } ] } ]
"#;

const ROUTE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: r, namespace: default }
spec:
  parentRefs: [ { name: gw } ]
  rules: [ { backendRefs: [ { name: app, port: 8080 } ] } ]
"#;

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(src: &Path, state: &Path, status: &Path) -> Kill {
    let child = Command::new(BIN)
        .args(["run", "--source", &format!("files:{}", src.display())])
        .args(["--state-out", &format!("file:{}", state.display())])
        .args(["--status-out", &status.display().to_string()])
        .args(["--admin-addr", "127.0.0.1:0", "--poll-ms", "20"])
        .env("LOG_LEVEL", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the watcher");
    Kill(child)
}

fn read(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Waits (30 s at most) until `f` holds for the file at `path` (None: no such file).
fn wait_file(path: &Path, what: &str, f: impl Fn(Option<&Value>) -> bool) -> Option<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = read(path);
        if f(v.as_ref()) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "waiting for {what} in {}: {v:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `(type, status)` of the condition `type_` in a conditions array.
fn cond<'a>(conds: &'a Value, type_: &str) -> Option<&'a Value> {
    conds.as_array()?.iter().find(|c| c["type"] == type_)
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out.sort();
    out
}

#[test]
fn status_out_holds_the_status_of_each_object_ours_and_follows_its_changes() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("objects");
    let out = d.path().join("status");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("base.yaml"), BASE).unwrap();
    std::fs::write(src.join("route.yaml"), ROUTE).unwrap();
    let _w = run(&src, &d.path().join("state.json"), &out);

    let route = out.join("HTTPRoute/default/r.json");
    let r = wait_file(&route, "the route's status", |v| v.is_some()).unwrap();
    let parents = r["parents"].as_array().expect("parents");
    assert_eq!(parents.len(), 1, "{r}");
    assert_eq!(parents[0]["controllerName"], "k8slb.io/gateway-controller");
    assert_eq!(parents[0]["parentRef"]["name"], "gw");
    assert_eq!(
        cond(&parents[0]["conditions"], "Accepted").map(|c| &c["status"]),
        Some(&Value::from("True")),
        "{r}"
    );

    // One round writes the files one after the other: each is waited for.
    let gw = wait_file(
        &out.join("Gateway/default/gw.json"),
        "the Gateway's status",
        |v| v.is_some(),
    )
    .unwrap();
    let ip = gw["addresses"][0]["value"].as_str().expect("an address");
    assert!(ip.starts_with("198.18.0.1"), "{gw}");
    assert_eq!(gw["listeners"][0]["attachedRoutes"], 1, "{gw}");
    assert_eq!(
        cond(&gw["conditions"], "Programmed").map(|c| &c["status"]),
        Some(&Value::from("True")),
        "{gw}"
    );
    let class_path = out.join("GatewayClass/k8slb.json");
    let class = wait_file(&class_path, "the GatewayClass's status", |v| v.is_some()).unwrap();
    assert_eq!(
        cond(&class["conditions"], "Accepted").map(|c| &c["status"]),
        Some(&Value::from("True")),
        "{class}"
    );
    let svc = wait_file(
        &out.join("Service/default/web.json"),
        "the Service's status",
        |v| v.is_some(),
    )
    .unwrap();
    assert_eq!(
        svc["loadBalancer"]["ingress"][0]["ipMode"], "Proxy",
        "{svc}"
    );
    // Another controller's route has no status of ours; a ClusterIP Service none at all.
    assert!(!out.join("HTTPRoute/default/theirs.json").exists());
    assert!(!out.join("Service/default/app.json").exists());

    // An unrelated change: a new Service gets its file, the class's is the same bytes
    // (its condition keeps its lastTransitionTime).
    let class_bytes = std::fs::read(&class_path).unwrap();
    std::thread::sleep(Duration::from_millis(1100)); // the clock moves to another second
    std::fs::write(
        src.join("more.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: { name: web2, namespace: default }\n\
         spec: { type: LoadBalancer, ports: [ { port: 80 } ] }\n",
    )
    .unwrap();
    wait_file(
        &out.join("Service/default/web2.json"),
        "web2's status",
        |v| v.is_some(),
    );
    assert_eq!(std::fs::read(&class_path).unwrap(), class_bytes);

    // The route goes: its file too, and the Gateway counts no route.
    std::fs::remove_file(src.join("route.yaml")).unwrap();
    wait_file(&route, "the route's status removed", |v| v.is_none());
    wait_file(
        &out.join("Gateway/default/gw.json"),
        "no attached route",
        |v| v.is_some_and(|g| g["listeners"][0]["attachedRoutes"] == 0),
    );
    // Whole files only: no temporary is left behind.
    let all = files_under(&out);
    assert!(
        all.iter()
            .all(|f| f.ends_with(".json") && !f.contains("/.k8slb-")),
        "{all:#?}"
    );
}
