//! The install manifests `manifests/k8slb-<proxy>.yml` against their kustomize sources
//! and the user guide:
//!
//! - each file is its header plus exactly `kubectl kustomize manifests/overlays/<proxy>`
//!   (kubectl is required: without it these tests fail and say so, they never skip);
//! - every workload's selector matches its pod template's labels;
//! - the capabilities and privileged containers per variant are those of the README's
//!   security table, and only the nginx variant has a privileged container;
//! - every image is tagged with the crate version (`[workspace.package] version`).
//!
//! The RBAC against docs/api-calls.md and the wiring of args, env and probes are in
//! cm_manifests.rs.

use serde::Deserialize;
use serde_yaml::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The variants checked here: one per proxy, and the BGP variant (haproxy plus
/// components/bgp).
const PROXIES: [&str; 4] = ["haproxy", "nginx", "kubeproxy", "haproxy-bgp"];
const WORKLOADS: [&str; 2] = ["Deployment", "DaemonSet"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn checked_in(proxy: &str) -> String {
    let path = root().join(format!("manifests/k8slb-{proxy}.yml"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn docs(proxy: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(&checked_in(proxy))
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("k8slb-{proxy}.yml: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string in {v:?}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| s.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// Every container of a pod spec, init containers included, with a label for messages.
fn containers(pod: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    for field in ["initContainers", "containers"] {
        for c in pod[field].as_sequence().into_iter().flatten() {
            out.push((format!("{field}/{}", s(c, "name")), c));
        }
    }
    out
}

fn workloads(docs: &[Value]) -> Vec<&Value> {
    let w: Vec<&Value> = docs
        .iter()
        .filter(|d| WORKLOADS.contains(&s(d, "kind")))
        .collect();
    assert_eq!(w.len(), 2, "a watcher Deployment and an actor DaemonSet");
    w
}

fn name_of(d: &Value) -> String {
    format!("{} {}", s(d, "kind"), s(&d["metadata"], "name"))
}

fn crate_version() -> String {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[workspace.package]";
        } else if in_package {
            if let Some(v) = line.strip_prefix("version") {
                let v = v.trim().trim_start_matches('=').trim().trim_matches('"');
                return v.to_string();
            }
        }
    }
    panic!("no [workspace.package] version in Cargo.toml");
}

/// `kubectl kustomize manifests/overlays/<proxy>`, or a panic that says what is missing.
fn kustomize(proxy: &str) -> String {
    let dir = root().join(format!("manifests/overlays/{proxy}"));
    let out = match Command::new("kubectl").arg("kustomize").arg(&dir).output() {
        Ok(out) => out,
        Err(e) => panic!(
            "cannot run kubectl ({e}): the manifests are rendered with `kubectl kustomize`; \
             install kubectl (v1.32 or later), it is required for this test"
        ),
    };
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn checked_in_manifests_are_the_kustomize_output() {
    for proxy in PROXIES {
        let file = checked_in(proxy);
        let body: String = file
            .split_inclusive('\n')
            .skip_while(|l| l.starts_with('#'))
            .collect();
        let header_lines = file.lines().take_while(|l| l.starts_with('#')).count();
        assert_eq!(header_lines, 3, "k8slb-{proxy}.yml: the build.sh header");
        assert!(
            body == kustomize(proxy),
            "manifests/k8slb-{proxy}.yml differs from `kubectl kustomize manifests/overlays/{proxy}`: \
             run manifests/build.sh"
        );
    }
}

#[test]
fn build_sh_check_accepts_the_checked_in_files() {
    let out = Command::new("sh")
        .arg(root().join("manifests/build.sh"))
        .arg("--check")
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "manifests/build.sh --check: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_selector_matches_its_pod_template_labels() {
    for proxy in PROXIES {
        for w in workloads(&docs(proxy)) {
            let selector = w["spec"]["selector"]["matchLabels"]
                .as_mapping()
                .unwrap_or_else(|| panic!("{proxy}: {} has no matchLabels", name_of(w)));
            assert!(
                !selector.is_empty(),
                "{proxy}: {} selects everything",
                name_of(w)
            );
            assert!(
                w["spec"]["selector"]["matchExpressions"].is_null(),
                "{proxy}: {}",
                name_of(w)
            );
            let labels = &w["spec"]["template"]["metadata"]["labels"];
            for (k, v) in selector {
                assert_eq!(
                    &labels[k.as_str().unwrap()],
                    v,
                    "{proxy}: {} selects {k:?}={v:?}, its pods have {labels:?}",
                    name_of(w)
                );
            }
        }
        // The two selectors are distinct: neither workload adopts the other's pods.
        let sel: BTreeSet<String> = workloads(&docs(proxy))
            .iter()
            .map(|w| format!("{:?}", w["spec"]["selector"]))
            .collect();
        assert_eq!(sel.len(), 2, "{proxy}: {sel:?}");
    }
}

/// A row of the README's security table: the variant, the actor's added capabilities,
/// and the names of its privileged containers (empty for "none").
struct Documented {
    caps: Vec<String>,
    privileged: BTreeSet<String>,
}

/// The README table `| variant | capabilities ... | privileged container |`: rows whose
/// first cell is a backticked variant name.
fn documented(proxy: &str) -> Documented {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("| `{proxy}` |")))
        .unwrap_or_else(|| panic!("README.md has no security table row for `{proxy}`"));
    let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
    assert_eq!(cells.len(), 3, "README.md: {row}");
    let caps = cells[1]
        .split(',')
        .map(|c| c.trim().trim_matches('`').to_string())
        .collect();
    let privileged = if cells[2].starts_with("none") {
        BTreeSet::new()
    } else {
        // Backticked words are container names: "init container `sysctl` (...)".
        cells[2]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    Documented { caps, privileged }
}

#[test]
fn capabilities_and_privileged_containers_are_as_the_readme_says() {
    for proxy in PROXIES {
        let docs = docs(proxy);
        let want = documented(proxy);
        let mut privileged = BTreeSet::new();
        for w in workloads(&docs) {
            let pod = &w["spec"]["template"]["spec"];
            for (name, c) in containers(pod) {
                let sc = &c["securityContext"];
                if sc["privileged"].as_bool() == Some(true) {
                    assert!(
                        name.starts_with("initContainers/"),
                        "{proxy}: {} {name} is privileged and long-running",
                        name_of(w)
                    );
                    privileged.insert(name.trim_start_matches("initContainers/").to_string());
                    continue;
                }
                assert_eq!(
                    strings(&sc["capabilities"]["drop"]),
                    ["ALL"],
                    "{proxy}: {} {name} drops every capability",
                    name_of(w)
                );
                assert_eq!(
                    sc["allowPrivilegeEscalation"].as_bool(),
                    Some(false),
                    "{proxy}: {} {name}",
                    name_of(w)
                );
                let added = strings(&sc["capabilities"]["add"]);
                if s(w, "kind") == "DaemonSet" && name == "containers/actor" {
                    assert_eq!(added, want.caps, "{proxy}: the actor's capabilities");
                } else {
                    assert!(
                        added.is_empty(),
                        "{proxy}: {} {name}: {added:?}",
                        name_of(w)
                    );
                }
            }
            assert!(
                pod["hostPID"].is_null() && pod["hostIPC"].is_null(),
                "{proxy}: {}",
                name_of(w)
            );
        }
        assert_eq!(
            privileged, want.privileged,
            "{proxy}: privileged containers"
        );
        if proxy == "nginx" {
            assert_eq!(privileged, BTreeSet::from(["sysctl".to_string()]));
        } else {
            assert!(privileged.is_empty(), "{proxy}: {privileged:?}");
        }
    }
}

#[test]
fn the_nginx_init_container_sets_ip_nonlocal_bind_and_nothing_else() {
    let docs = docs("nginx");
    let actor = docs
        .iter()
        .find(|d| s(d, "kind") == "DaemonSet")
        .expect("the actor DaemonSet");
    let inits = actor["spec"]["template"]["spec"]["initContainers"]
        .as_sequence()
        .expect("nginx: init containers");
    assert_eq!(inits.len(), 1);
    let script = strings(&inits[0]["command"]).join(" ");
    // Exactly two writes of "1", to the two ip_nonlocal_bind files.
    let writes: Vec<&str> = script
        .split("> ")
        .skip(1)
        .map(|rest| {
            rest.split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches(';')
        })
        .collect();
    assert_eq!(
        writes,
        [
            "/proc/sys/net/ipv4/ip_nonlocal_bind",
            "/proc/sys/net/ipv6/ip_nonlocal_bind"
        ],
        "{script}"
    );
    assert_eq!(script.matches("echo 1").count(), 2, "{script}");
}

#[test]
fn every_image_is_tagged_with_the_crate_version() {
    let tag = format!(":v{}", crate_version());
    for proxy in PROXIES {
        let docs = docs(proxy);
        let mut n = 0;
        for w in workloads(&docs) {
            for (name, c) in containers(&w["spec"]["template"]["spec"]) {
                let image = s(c, "image");
                assert_eq!(
                    image,
                    format!("k8slb/k8slb{tag}"),
                    "{proxy}: {} {name}",
                    name_of(w)
                );
                n += 1;
            }
        }
        assert!(n >= 2, "{proxy}: {n} containers");
    }
}
