//! What the L7 lab tests (Ingress, Gateway API) ask the client: an HTTP status with a
//! Host header, the certificate served for a server name, and the TLS Secret documents.

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
