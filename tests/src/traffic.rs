//! Driving lab-client and lab-backend from tests: typed results, background probes.

use crate::bins;
use crate::lab::{Lab, ProcId};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// What `lab-client load` prints.
#[derive(Debug, Clone, Deserialize)]
pub struct LoadResult {
    pub ok: u64,
    pub failed: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub elapsed_ms: f64,
    pub by_backend: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
}

/// What `lab-client probe` prints.
#[derive(Debug, Clone, Deserialize)]
pub struct ProbeResult {
    pub ok: u64,
    pub failed: u64,
    pub max_gap_ms: f64,
    pub gap_started_at_ms: f64,
    pub first_ok_ms: Option<f64>,
    pub tail_gap_ms: f64,
    pub recovered: bool,
    pub first_failure_ms: Option<f64>,
    pub last_failure_ms: Option<f64>,
    pub interval_ms: f64,
    pub elapsed_ms: f64,
    pub by_backend: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Http,
    /// HTTP over TLS (any certificate accepted; `--host` is the SNI).
    Https,
    Tcp,
    Udp,
}

impl Proto {
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Http => "http",
            Proto::Https => "https",
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// Sends `n` requests from `host` to `target` (one connection each), `rate` per second in
/// total (0: as fast as possible), and returns what happened.
pub fn load(
    lab: &Lab,
    host: &str,
    proto: Proto,
    target: SocketAddr,
    n: u64,
    rate: f64,
) -> Result<LoadResult> {
    load_args(
        lab,
        host,
        proto,
        target,
        &["-n", &n.to_string(), "--rate", &rate.to_string()],
    )
}

pub fn load_args(
    lab: &Lab,
    host: &str,
    proto: Proto,
    target: SocketAddr,
    extra: &[&str],
) -> Result<LoadResult> {
    let client = bins::locate("lab-client")?;
    let client = client.to_string_lossy().into_owned();
    let target = target.to_string();
    let mut cmd = vec![
        client.as_str(),
        "load",
        "--proto",
        proto.as_str(),
        "--target",
        &target,
    ];
    cmd.extend_from_slice(extra);
    let out = lab.check_in(host, &cmd)?;
    serde_json::from_str(out.trim()).with_context(|| format!("parsing lab-client output {out:?}"))
}

/// A lab-client running in the background (a probe or a steady load), stopped through its
/// stop file.
pub struct Background {
    pub proc: ProcId,
    stop_file: PathBuf,
}

/// Starts lab-client with any arguments in the background (`--stop-file` is added).
pub fn spawn_client(lab: &mut Lab, host: &str, name: &str, args: &[&str]) -> Result<Background> {
    let client = bins::locate("lab-client")?;
    let client = client.to_string_lossy().into_owned();
    let stop_file = lab.dir.join(format!("{name}.stop"));
    let _ = std::fs::remove_file(&stop_file);
    let stop = stop_file.to_string_lossy().into_owned();
    let mut cmd = vec![client.as_str()];
    cmd.extend_from_slice(args);
    cmd.extend_from_slice(&["--stop-file", &stop]);
    // stdout must be clean JSON: use a dedicated log for this process.
    let proc = lab.spawn_in(host, name, &cmd)?;
    Ok(Background { proc, stop_file })
}

/// Starts a probe: one request every `interval_ms`, for at most `max` (stop it earlier
/// with [`Background::stop_probe`]).
pub fn start_probe(
    lab: &mut Lab,
    host: &str,
    name: &str,
    proto: Proto,
    target: SocketAddr,
    interval_ms: u64,
    max: Duration,
) -> Result<Background> {
    let t = target.to_string();
    let i = interval_ms.to_string();
    let d = max.as_millis().to_string();
    spawn_client(
        lab,
        host,
        name,
        &[
            "probe",
            "--proto",
            proto.as_str(),
            "--target",
            &t,
            "--interval-ms",
            &i,
            "--duration-ms",
            &d,
        ],
    )
}

/// A steady load: `rate` requests per second in total over `concurrency` workers, for at
/// most `max`.
#[derive(Debug, Clone, Copy)]
pub struct Steady {
    pub rate: f64,
    pub concurrency: usize,
    pub max: Duration,
}

/// Starts a steady load in the background (stop it with [`Background::stop_load`]).
pub fn start_load(
    lab: &mut Lab,
    host: &str,
    name: &str,
    proto: Proto,
    target: SocketAddr,
    steady: Steady,
) -> Result<Background> {
    start_load_args(lab, host, name, proto, target, steady, &[])
}

/// [`start_load`] with more lab-client flags (`--host`, `--path`).
pub fn start_load_args(
    lab: &mut Lab,
    host: &str,
    name: &str,
    proto: Proto,
    target: SocketAddr,
    steady: Steady,
    extra: &[&str],
) -> Result<Background> {
    let t = target.to_string();
    let r = steady.rate.to_string();
    let c = steady.concurrency.to_string();
    let d = steady.max.as_millis().to_string();
    let mut args = vec![
        "load",
        "--proto",
        proto.as_str(),
        "--target",
        &t,
        "--rate",
        &r,
        "--concurrency",
        &c,
        "--duration-ms",
        &d,
    ];
    args.extend_from_slice(extra);
    spawn_client(lab, host, name, &args)
}

impl Background {
    fn finish(&self, lab: &mut Lab) -> Result<String> {
        std::fs::write(&self.stop_file, b"stop")?;
        match lab.wait(self.proc, Duration::from_secs(15))? {
            Some(st) if st.success() => {}
            Some(st) => bail!("lab-client exited with {st}: {}", lab.log(self.proc)),
            None => {
                lab.kill(self.proc)?;
                bail!("lab-client did not stop within 15 s");
            }
        }
        let log = lab.log(self.proc);
        log.lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .map(str::to_string)
            .with_context(|| format!("no JSON from lab-client: {log}"))
    }

    pub fn stop_probe(self, lab: &mut Lab) -> Result<ProbeResult> {
        let line = self.finish(lab)?;
        serde_json::from_str(&line).with_context(|| format!("parsing {line}"))
    }

    pub fn stop_load(self, lab: &mut Lab) -> Result<LoadResult> {
        let line = self.finish(lab)?;
        serde_json::from_str(&line).with_context(|| format!("parsing {line}"))
    }
}

/// Ports every lab backend listens on (on its own address, v4 and v6).
pub const HTTP_PORT: u16 = 8080;
/// Also served as plain HTTP, so the seed README's `targetPort: 80` works as written.
pub const HTTP_EXTRA_PORTS: [u16; 1] = [80];
/// Served as HTTPS (the example certificate): a backend on `targetPort: 443` speaks TLS (the
/// seed README's Rancher example), and k8slb connects to it with TLS, as the seed did.
pub const HTTPS_PORT: u16 = 443;
pub const TCP_PORT: u16 = 9000;
pub const UDP_PORT: u16 = 9001;
/// gRPC (h2c) echo ([`crate::grpc`]).
pub const GRPC_PORT: u16 = 9002;
/// WebSocket-style upgrade echo ([`crate::grpc::upgrade_backend`]).
pub const WS_PORT: u16 = 9003;

/// Starts lab-backend on a backend host: HTTP on 8080 (and 80), HTTPS on 443, TCP echo on
/// 9000, UDP echo on 9001, gRPC echo on 9002, WebSocket echo on 9003, on its v4 and v6
/// addresses, answering with the host's name.
pub fn start_backend(lab: &mut Lab, host: &str) -> Result<ProcId> {
    let bin = bins::locate("lab-backend")?;
    let bin = bin.to_string_lossy().into_owned();
    let h = lab.host(host).clone();
    let certs = bins::repo_root().join("etc-certs-example");
    let mut args: Vec<String> = vec![
        bin,
        "--name".into(),
        host.into(),
        "--cert".into(),
        certs.join("default.pem").to_string_lossy().into_owned(),
        "--key".into(),
        certs.join("default.key").to_string_lossy().into_owned(),
    ];
    for ip in [h.v4.to_string(), format!("[{}]", h.v6)] {
        args.extend(["--http".into(), format!("{ip}:{HTTP_PORT}")]);
        for p in HTTP_EXTRA_PORTS {
            args.extend(["--http".into(), format!("{ip}:{p}")]);
        }
        args.extend(["--https".into(), format!("{ip}:{HTTPS_PORT}")]);
        args.extend(["--tcp".into(), format!("{ip}:{TCP_PORT}")]);
        args.extend(["--udp".into(), format!("{ip}:{UDP_PORT}")]);
        args.extend(["--grpc".into(), format!("{ip}:{GRPC_PORT}")]);
        args.extend(["--ws".into(), format!("{ip}:{WS_PORT}")]);
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let p = lab.spawn_in(host, "backend", &argv)?;
    let target = SocketAddr::new(h.v4.into(), HTTP_PORT);
    crate::wait::until(Duration::from_secs(10), || {
        Ok(lab
            .run_in(host, &["ss", "-Hltn", &format!("src {target}")])?
            .stdout
            .len()
            > 1)
    })
    .with_context(|| format!("backend on {host} did not start listening"))?;
    Ok(p)
}
