//! The actor's logging environment, through the real binary: `LOG_FORMAT` (and the
//! deprecated `K8SLB_LOG_FORMAT`, with a line saying so), `LOG_LEVEL=0` turning logs off
//! (the Perl actor could not), no ANSI colours without a terminal.
//!
//! The actor is started with a work directory that cannot exist (`/dev/null/...`): it
//! sets up logging, logs what it has to say about the flags, and stops at the next step
//! with its one error line. No root, no daemons.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_k8slb-actor");

/// `(exit code, stderr lines)` of `k8slb-actor run` with `env` (and nothing else of ours).
fn run(env: &[(&str, &str)]) -> (Option<i32>, Vec<String>) {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "run",
        "--node",
        "lb1",
        "--state",
        "file:/dev/null/state.json",
    ])
    .args([
        "--work-dir",
        "/dev/null/k8slb",
        "--admin-addr",
        "127.0.0.1:0",
    ]);
    for k in ["LOG_FORMAT", "K8SLB_LOG_FORMAT", "LOG_LEVEL"] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run k8slb-actor");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err.lines().map(str::to_string).collect())
}

/// The actor's own last line (printed by main, not a log line).
fn is_exit_line(l: &str) -> bool {
    l.starts_with("k8slb-actor: ") && l.contains("/dev/null/k8slb")
}

#[test]
fn the_deprecated_k8slb_log_format_still_works_and_says_it_is_deprecated() {
    let (code, lines) = run(&[("K8SLB_LOG_FORMAT", "json")]);
    assert_eq!(code, Some(1), "{lines:#?}");
    assert!(lines.last().is_some_and(|l| is_exit_line(l)), "{lines:#?}");
    let logs: Vec<serde_json::Value> = lines[..lines.len() - 1]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        logs.iter().any(|v| v["level"] == "WARN"
            && v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("K8SLB_LOG_FORMAT is deprecated: set LOG_FORMAT"))),
        "{lines:#?}"
    );
}

#[test]
fn log_format_wins_over_the_deprecated_name_and_plain_has_no_colours() {
    let (_, lines) = run(&[("LOG_FORMAT", "plain"), ("K8SLB_LOG_FORMAT", "json")]);
    let warn = lines
        .iter()
        .find(|l| l.contains("K8SLB_LOG_FORMAT is deprecated and ignored"))
        .unwrap_or_else(|| panic!("no deprecation line: {lines:#?}"));
    assert!(warn.contains(" WARN "), "{warn}");
    assert!(
        serde_json::from_str::<serde_json::Value>(warn).is_err(),
        "plain, not JSON: {warn}"
    );
    for l in &lines {
        assert!(
            !l.contains('\u{1b}'),
            "ANSI escape without a terminal: {l:?}"
        );
    }
}

#[test]
fn log_level_zero_turns_the_actor_s_logs_off() {
    // With level 3 the same run logs the deprecation warning...
    let (_, lines) = run(&[("K8SLB_LOG_FORMAT", "plain"), ("LOG_LEVEL", "3")]);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("K8SLB_LOG_FORMAT is deprecated")),
        "{lines:#?}"
    );
    // ...with 0, only the exit line (not a log line) is left.
    let (code, lines) = run(&[("K8SLB_LOG_FORMAT", "plain"), ("LOG_LEVEL", "0")]);
    assert_eq!(code, Some(1));
    assert_eq!(lines.len(), 1, "LOG_LEVEL=0 still logs: {lines:#?}");
    assert!(is_exit_line(&lines[0]), "{lines:#?}");
}

#[test]
fn an_invalid_log_level_stops_the_actor_with_a_clear_line() {
    let (code, lines) = run(&[("LOG_LEVEL", "verbose")]);
    assert_eq!(code, Some(1));
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].starts_with("k8slb-actor: invalid log level \"verbose\""),
        "{lines:#?}"
    );
}

/// On a full disk stderr cannot be written: the actor still ends with its own error (exit
/// 1), not with a panic (101) in a log or error line, which in `run` would skip stopping
/// the daemons and removing the VIPs.
#[test]
fn an_unwritable_stderr_is_not_a_panic() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full");
    let status = Command::new(BIN)
        .args([
            "run",
            "--node",
            "lb1",
            "--state",
            "file:/dev/null/state.json",
        ])
        .args([
            "--work-dir",
            "/dev/null/k8slb",
            "--admin-addr",
            "127.0.0.1:0",
        ])
        .env("LOG_LEVEL", "4")
        .stderr(full)
        .status()
        .expect("run k8slb-actor");
    assert_eq!(status.code(), Some(1), "{status}");
}
