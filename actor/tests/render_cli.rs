//! `k8slb-actor render`: writes exactly the expected files, and a pool without an
//! interface is a clear error naming the pool.

use std::path::Path;
use std::process::Command;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.json"))
}

fn render(args: &[&str]) -> (std::process::Output, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_k8slb-actor"))
        .arg("render")
        .args(args)
        .arg("--out")
        .arg(out.path())
        .env_remove("PROXY")
        .env_remove("K8SLB_NODE_NAME")
        .env("PRIORITY1", "77")
        .output()
        .unwrap();
    (o, out)
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn writes_exactly_the_configs() {
    let state = fixture("two-pools");
    let s = state.to_str().unwrap();
    for (proxy, expected) in [
        ("haproxy", vec!["haproxy.cfg", "keepalived.conf"]),
        ("nginx", vec!["keepalived.conf", "nginx.conf"]),
        ("kubeproxy", vec!["keepalived.conf"]),
    ] {
        let (o, dir) = render(&[
            "--state",
            s,
            "--node",
            "lb-1",
            "--proxy",
            proxy,
            "--interface",
            "default=eth0",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(files(dir.path()), expected, "{proxy}");
        let ka = std::fs::read_to_string(dir.path().join("keepalived.conf")).unwrap();
        // dmz's interface comes from the state, default's from the flag.
        assert!(
            ka.contains("interface eth1") && ka.contains("interface eth0"),
            "{ka}"
        );
        // PRIORITY1 applies to instance 1 (vrid 11) only where lb-1 is not the owner:
        // lb-1 owns vrid 11, so 150 stays; it is a backup of vrid 12 (n = 2): 100 stays.
        assert!(!ka.contains("priority 77"), "{ka}");
    }
    // As lb-2, PRIORITY1=77 replaces its backup priority in instance 1.
    let (o, dir) = render(&[
        "--state",
        s,
        "--node",
        "lb-2",
        "--interface",
        "default=eth0",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ka = std::fs::read_to_string(dir.path().join("keepalived.conf")).unwrap();
    assert!(ka.contains("priority 77"), "{ka}");
}

#[test]
fn missing_interface_names_the_pool() {
    let state = fixture("two-pools");
    let (o, dir) = render(&["--state", state.to_str().unwrap(), "--node", "lb-1"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no interface for pool default"), "{err}");
    assert!(files(dir.path()).is_empty(), "nothing is written on error");
}

#[test]
fn bad_flags_are_refused() {
    let state = fixture("two-pools");
    let (o, _) = render(&[
        "--state",
        state.to_str().unwrap(),
        "--node",
        "lb-1",
        "--interface",
        "default=eth0;x",
    ]);
    assert!(!o.status.success());
    let (o, _) = render(&["--state", "/nonexistent.json", "--node", "lb-1"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent.json"));
}

#[test]
fn a_state_planned_for_another_provider_is_refused_and_nothing_is_written() {
    let mut state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("two-pools")).unwrap()).unwrap();
    state["provider"] = "nginx".into();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    std::fs::write(&path, state.to_string()).unwrap();
    let s = path.to_str().unwrap();
    let args = |proxy| {
        [
            "--state",
            s,
            "--node",
            "lb-1",
            "--proxy",
            proxy,
            "--interface",
            "default=eth0",
        ]
    };
    let (o, out) = render(&args("haproxy"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("the state was planned for provider nginx, but this actor runs haproxy"),
        "{err}"
    );
    assert!(files(out.path()).is_empty());
    let (o, out) = render(&args("nginx"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(files(out.path()), ["keepalived.conf", "nginx.conf"]);
}
