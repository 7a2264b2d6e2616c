//! What the L7 lab tests (Ingress, Gateway API) ask the client: an HTTP status with a
//! Host header, which backend answered, the certificate served for a server name, and the
//! TLS Secret documents.

use crate::system::System;
use serde_json::{json, Value};
use std::net::IpAddr;

/// `curl` from the client: the HTTP status of `url` with `Host: host` (empty when curl
/// got no answer).
pub fn status(sys: &System, host: &str, url: &str) -> String {
    curl(sys, host, url, "%{http_code}")
}

/// `curl` from the client: "<status> <Location>" of `url` with `Host: host`.
pub fn status_and_location(sys: &System, host: &str, url: &str) -> String {
    curl(sys, host, url, "%{http_code} %{redirect_url}")
}

fn curl(sys: &System, host: &str, url: &str, format: &str) -> String {
    sys.lab
        .run_in(
            "client",
            &[
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                format,
                "-m",
                "3",
                "-H",
                &format!("Host: {host}"),
                url,
            ],
        )
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// `curl` from the client: the lab backend that answered `url` with `Host: host` (the
/// `backend=<name>` line lab-backend answers with), empty when no backend answered.
pub fn served_by(sys: &System, host: &str, url: &str) -> String {
    backend_of(&body(sys, &["-H", &format!("Host: {host}"), url]))
}

/// `curl` from the client over HTTPS to `ip:port`, `host` as the server name (SNI) and
/// Host, any certificate accepted: the lab backend that answered `path`, empty when none.
pub fn served_by_https(sys: &System, ip: IpAddr, port: u16, host: &str, path: &str) -> String {
    let addr = match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    backend_of(&body(
        sys,
        &[
            "-k",
            "--resolve",
            &format!("{host}:{port}:{addr}"),
            &format!("https://{host}:{port}{path}"),
        ],
    ))
}

/// The `<name>` of lab-backend's `backend=<name>` line in an answer, empty without one.
pub fn backend_of(answer: &str) -> String {
    answer
        .lines()
        .find_map(|l| l.trim_end().strip_prefix("backend="))
        .unwrap_or_default()
        .to_string()
}

/// `curl -s -m 3 <args>` from the client: what it printed (empty when it failed to run).
pub fn body(sys: &System, args: &[&str]) -> String {
    let mut cmd = vec!["curl", "-s", "-m", "3"];
    cmd.extend_from_slice(args);
    sys.lab
        .run_in("client", &cmd)
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// A `kubernetes.io/tls` Secret `<namespace>/<name>`.
pub fn tls_secret(namespace: &str, name: &str, crt: &str, key: &str) -> Value {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"namespace": namespace, "name": name},
        "data": {"tls.crt": b64(crt), "tls.key": b64(key)},
    })
}

/// The SHA-256 fingerprint of the certificate `ip:port` serves for `sni`, from the client.
pub fn served_fingerprint(sys: &System, ip: IpAddr, port: u16, sni: &str) -> String {
    let script = format!(
        "openssl s_client -connect {ip}:{port} -servername {sni} </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256"
    );
    sys.lab
        .run_in("client", &["sh", "-c", &script])
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The SHA-256 fingerprint of a PEM certificate, as `openssl x509 -fingerprint` prints it.
pub fn fingerprint(pem: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(pem.as_bytes())
        .expect("openssl reads");
    let out = child.wait_with_output().expect("openssl exits");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
