//! The files source's `/readyz` (ready once the state file holds the current state, not
//! while writing it fails) and the binary's logging environment (`LOG_FORMAT`,
//! `LOG_LEVEL`, no ANSI colours without a terminal), through the real binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_k8slb-watcher");

const OBJECTS: &str = r#"
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
"#;

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `k8slb-watcher run` on `src`, writing to `state`, admin port picked by the OS;
/// stderr lines arrive on the returned channel.
fn run(src: &Path, state: &Path, env: &[(&str, &str)]) -> (Kill, mpsc::Receiver<String>) {
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--source", &format!("files:{}", src.display())])
        .args(["--state-out", &format!("file:{}", state.display())])
        .args(["--admin-addr", "127.0.0.1:0", "--poll-ms", "20"])
        .env_remove("LOG_FORMAT")
        .env_remove("LOG_LEVEL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn the watcher");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (Kill(child), rx)
}

/// The next stderr line for which `f` is Some (30 s at most); every line seen goes to `seen`.
fn wait_line<T>(
    rx: &mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    what: &str,
    f: impl Fn(&str) -> Option<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let r = f(&line);
                seen.push(line);
                if let Some(v) = r {
                    return v;
                }
            }
            Err(e) => panic!("waiting for {what}: {e}; stderr so far: {seen:#?}"),
        }
    }
}

fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        code,
        out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string(),
    )
}

fn wait_http(addr: &str, what: &str, f: impl Fn(u16, &str) -> bool) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, body) = get(addr, "/readyz");
        if f(code, &body) {
            return (code, body);
        }
        assert!(
            Instant::now() < deadline,
            "waiting for {what}; last /readyz: {code} {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn files_source_is_ready_only_once_the_state_file_is_written() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("objects");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("objects.yaml"), OBJECTS).unwrap();
    // A file where the state's directory should be: every write fails until it goes.
    let blocker = d.path().join("out");
    std::fs::write(&blocker, "not a directory").unwrap();
    let state = blocker.join("state.json");
    let (_w, rx) = run(&src, &state, &[("LOG_FORMAT", "json")]);
    let mut seen = Vec::new();
    let addr = wait_line(&rx, &mut seen, "the admin address", |l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        (v["fields"]["message"] == "admin server listening")
            .then(|| v["fields"]["addr"].as_str().map(str::to_string))?
    });
    let (code, body) = wait_http(&addr, "the failed write on /readyz", |_, b| {
        b.contains("cannot write")
    });
    assert_eq!(code, 503, "{body}");
    assert!(
        body.starts_with(&format!(
            "not ready: files: cannot write {}: ",
            state.display()
        )),
        "{body}"
    );
    assert!(!state.exists());

    // The way is free: the retry writes the state, and only then is it ready.
    std::fs::remove_file(&blocker).unwrap();
    let (_, body) = wait_http(&addr, "ready", |c, _| c == 200);
    assert!(state.exists(), "ready before the state was written: {body}");
    assert_eq!(
        body,
        format!(
            "ready: files: the current state is written to {}\n",
            state.display()
        )
    );
    // The failure was logged once, then its recovery; every line is JSON, none coloured.
    wait_line(&rx, &mut seen, "the recovery line", |l| {
        l.contains("writing the state file works again")
            .then_some(())
    });
    let failed = seen
        .iter()
        .filter(|l| l.contains("writing the state file failed"))
        .count();
    assert_eq!(failed, 1, "{seen:#?}");
    for l in &seen {
        assert!(
            !l.contains('\u{1b}'),
            "ANSI escape without a terminal: {l:?}"
        );
        serde_json::from_str::<serde_json::Value>(l)
            .unwrap_or_else(|e| panic!("LOG_FORMAT=json gave a non-JSON line ({e}): {l}"));
    }
}

#[test]
fn log_level_zero_turns_the_watcher_s_logs_off_and_plain_has_no_colours() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("objects");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("objects.yaml"), OBJECTS).unwrap();

    // Plain (the default) without a terminal: no ANSI escapes.
    let state = d.path().join("plain.json");
    let (w, rx) = run(&src, &state, &[("LOG_LEVEL", "3")]);
    let mut seen = Vec::new();
    wait_line(&rx, &mut seen, "state published", |l| {
        l.contains("state published").then_some(())
    });
    drop(w);
    for l in &seen {
        assert!(
            !l.contains('\u{1b}'),
            "ANSI escape without a terminal: {l:?}"
        );
        assert!(l.contains(" INFO ") || l.contains(" WARN "), "{l}");
    }

    // LOG_LEVEL=0: the state is written (so the "state published" line was due), and
    // stderr holds nothing once the process is gone.
    let state = d.path().join("off.json");
    let (mut w, rx) = run(&src, &state, &[("LOG_LEVEL", "0")]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !state.exists() {
        assert!(Instant::now() < deadline, "no state written");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = w.0.kill();
    let _ = w.0.wait();
    let lines: Vec<String> = rx.iter().collect();
    assert!(lines.is_empty(), "LOG_LEVEL=0 still logs: {lines:#?}");
}

#[test]
fn an_unknown_log_level_or_format_stops_the_watcher_with_one_line_and_exit_64() {
    let d = tempfile::tempdir().unwrap();
    // LOG_LEVEL is checked by the watcher (exit 64, EX_USAGE, one line); LOG_FORMAT by the
    // flag parser (clap's usage error, exit 2, with its hint line).
    for (k, v, want, code, lines) in [
        (
            "LOG_LEVEL",
            "verbose",
            "invalid log level \"verbose\"",
            64,
            1,
        ),
        ("LOG_FORMAT", "xml", "unknown log format \"xml\"", 2, 3),
    ] {
        let out = Command::new(BIN)
            .args(["run", "--source", &format!("files:{}", d.path().display())])
            .args([
                "--state-out",
                &format!("file:{}/s.json", d.path().display()),
            ])
            .args(["--admin-addr", "127.0.0.1:0"])
            .env_remove("LOG_FORMAT")
            .env_remove("LOG_LEVEL")
            .env(k, v)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{k}={v}: {err}");
        assert_eq!(err.trim().lines().count(), lines, "{k}={v}: {err}");
        assert_eq!(out.status.code(), Some(code), "{k}={v}: {err}");
    }
}
