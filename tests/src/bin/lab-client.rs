//! lab-client: sends requests to an address and prints one JSON line about what happened.
//!
//! ```text
//! lab-client load  --proto http|https|tcp|udp --target IP:PORT [-n N | --duration-ms D]
//!                  [--rate R] [--concurrency C] [--timeout-ms T] [--path P] [--host H]
//!                  [--stop-file F]
//! lab-client probe --proto http|tcp|udp --target IP:PORT [--interval-ms 10]
//!                  [--duration-ms D] [--stop-file F] [--timeout-ms T]
//! ```
//!
//! `load` sends N requests (or for D ms), `--rate` per second in total (0: as fast as
//! possible) over `--concurrency` workers, each request on a new connection, and prints
//! `{"ok":..,"failed":..,"p50_ms":..,"p99_ms":..,"max_ms":..,"by_backend":{..},"errors":{..}}`.
//!
//! `probe` starts one request every interval (each on its own thread, so a request stuck
//! in SYN retransmission does not stop the next one) and prints the longest time between
//! two successful answers, `max_gap_ms`: how long the target was dark, to within about one
//! interval. It stops after `--duration-ms` or as soon as `--stop-file` exists.
//!
//! A request succeeds when: http: the status is 200 and the body starts `backend=` (https:
//! the same after a TLS handshake with `--host` as SNI; any certificate is accepted, the
//! lab's are self-signed; a failed handshake counts as `tls`); tcp: the
//! server greets with `backend=` and echoes a line back; udp: the answer is `backend=<name>
//! <what we sent>`. The backend's name is counted in `by_backend`.

use serde_json::json;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Proto {
    Http,
    Https,
    Tcp,
    Udp,
}

#[derive(Clone)]
struct Opts {
    mode: String,
    proto: Proto,
    target: SocketAddr,
    n: u64,
    duration: Option<Duration>,
    rate: f64,
    concurrency: usize,
    timeout: Duration,
    interval: Duration,
    path: String,
    host: Option<String>,
    stop_file: Option<PathBuf>,
}

fn parse() -> Result<Opts, String> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().ok_or("missing mode (load|probe)")?;
    if mode != "load" && mode != "probe" {
        return Err(format!("unknown mode {mode}"));
    }
    let mut o = Opts {
        mode: mode.clone(),
        proto: Proto::Http,
        target: "0.0.0.0:0".parse().expect("addr"),
        n: 0,
        duration: None,
        rate: 0.0,
        concurrency: 1,
        timeout: Duration::from_millis(if mode == "probe" { 1000 } else { 2000 }),
        interval: Duration::from_millis(10),
        path: "/".into(),
        host: None,
        stop_file: None,
    };
    let mut have_target = false;
    while let Some(flag) = args.next() {
        let v = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--proto" => {
                o.proto = match v.as_str() {
                    "http" => Proto::Http,
                    "https" => Proto::Https,
                    "tcp" => Proto::Tcp,
                    "udp" => Proto::Udp,
                    _ => return Err(format!("--proto {v}: http, https, tcp or udp")),
                }
            }
            "--target" => {
                o.target = v.parse().map_err(|e| format!("--target {v}: {e}"))?;
                have_target = true;
            }
            "-n" => o.n = num(&v)?,
            "--duration-ms" => o.duration = Some(Duration::from_millis(num(&v)?)),
            "--rate" => o.rate = v.parse().map_err(|e| format!("--rate {v}: {e}"))?,
            "--concurrency" => o.concurrency = num(&v)?.max(1) as usize,
            "--timeout-ms" => o.timeout = Duration::from_millis(num(&v)?),
            "--interval-ms" => o.interval = Duration::from_millis(num(&v)?.max(1)),
            "--path" => o.path = v,
            "--host" => o.host = Some(v),
            "--stop-file" => o.stop_file = Some(PathBuf::from(v)),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if !have_target {
        return Err("--target is required".into());
    }
    if o.mode == "load" && o.n == 0 && o.duration.is_none() {
        o.n = 1;
    }
    if o.mode == "probe" && o.duration.is_none() {
        o.duration = Some(Duration::from_secs(30));
    }
    // Hard upper bound: nothing the lab runs may loop forever.
    let cap = Duration::from_secs(600);
    o.duration = o.duration.map(|d| d.min(cap));
    Ok(o)
}

/// `lab-client grpc <addr> <authority> <method> [<key>=<value>]...`: one unary call of the
/// GrpcEcho service's `<method>` over h2c; prints `grpc=<status|none> http=<status>
/// backend=<serving pod>` (exit 0), or `error=<what>` (exit 1).
fn grpc_call(args: &[String]) -> i32 {
    let [addr, authority, method, md @ ..] = args else {
        eprintln!("lab-client grpc: usage: grpc <addr> <authority> <method> [k=v]...");
        return 64;
    };
    let Ok(addr) = addr.parse::<std::net::SocketAddr>() else {
        eprintln!("lab-client grpc: {addr}: not an address");
        return 64;
    };
    let md: Vec<(&str, &str)> = md.iter().filter_map(|kv| kv.split_once('=')).collect();
    let path = k8slb_tests::grpc::method_path(method);
    match k8slb_tests::grpc::call_blocking(addr, authority, &path, &md, Duration::from_secs(3)) {
        Ok(r) => {
            let grpc = r.grpc_status.map_or("none".to_string(), |s| s.to_string());
            let backend = r.assertions.map(|a| a.context.pod).unwrap_or_default();
            println!("grpc={grpc} http={} backend={backend}", r.http_status);
            0
        }
        Err(e) => {
            println!("error={e}");
            1
        }
    }
}

/// `lab-client grpc-json <count> <addr> <authority> <method> [<key>=<value>]...`: `count`
/// unary calls as `grpc`, each on a new connection, one JSON line each:
/// `{"grpc": <status|null>, "http": <status>, "method": .., "namespace": .., "pod": ..}` or
/// `{"error": "<what>"}` (the conformance runner's gRPC requests).
fn grpc_json(args: &[String]) -> i32 {
    let [count, addr, authority, method, md @ ..] = args else {
        eprintln!(
            "lab-client grpc-json: usage: grpc-json <count> <addr> <authority> <method> [k=v]..."
        );
        return 64;
    };
    let (Ok(count), Ok(addr)) = (count.parse::<usize>(), addr.parse::<std::net::SocketAddr>())
    else {
        eprintln!("lab-client grpc-json: {count} {addr}: not a count and an address");
        return 64;
    };
    let md: Vec<(&str, &str)> = md.iter().filter_map(|kv| kv.split_once('=')).collect();
    let path = k8slb_tests::grpc::method_path(method);
    for _ in 0..count {
        let line = match k8slb_tests::grpc::call_blocking(
            addr,
            authority,
            &path,
            &md,
            Duration::from_secs(3),
        ) {
            Ok(r) => {
                let a = r.assertions.unwrap_or_default();
                serde_json::json!({
                    "grpc": r.grpc_status,
                    "http": r.http_status,
                    "method": a.fully_qualified_method,
                    "namespace": a.context.namespace,
                    "pod": a.context.pod,
                })
            }
            Err(e) => serde_json::json!({"error": e.to_string()}),
        };
        println!("{line}");
    }
    0
}

/// `lab-client tcp-echo <count> <addr> [<server name> [<CA file>]]`: `count`
/// connections speaking the conformance suite's TCP echo protocol (over TLS with that
/// server name when one is given: any certificate taken, or with a CA file only one
/// that chains to it and names the server, as the suite's client with `RootCAs`), one
/// JSON line each: `{"welcome": bool, "pong": bool, "isTLS": "<answer>", "test": <the
/// TEST answer>}` or `{"error": "<what>"}`.
fn tcp_echo(args: &[String]) -> i32 {
    let (count, addr, sni, ca) = match args {
        [c, a] => (c, a, None, None),
        [c, a, n] => (c, a, Some(n.clone()), None),
        [c, a, n, ca] => (c, a, Some(n.clone()), Some(ca.clone())),
        _ => {
            eprintln!(
                "lab-client tcp-echo: usage: tcp-echo <count> <addr> [<server name> [<CA file>]]"
            );
            return 64;
        }
    };
    let config = match ca.as_deref().map(verifying_config).transpose() {
        Ok(c) => c.unwrap_or_else(tls_config),
        Err(e) => {
            eprintln!("lab-client tcp-echo: {e}");
            return 64;
        }
    };
    let (Ok(count), Ok(addr)) = (count.parse::<usize>(), addr.parse::<SocketAddr>()) else {
        eprintln!("lab-client tcp-echo: {count} {addr}: not a count and an address");
        return 64;
    };
    for _ in 0..count {
        let line = match tcp_echo_once(addr, sni.as_deref(), config.clone()) {
            Ok(v) => v,
            Err(e) => json!({"error": e}),
        };
        println!("{line}");
    }
    0
}

/// `lab-client ws-echo <addr> <host> <path>`: the conformance suite's WebSocket test
/// ([`k8slb_tests::ws::echo_round_trip`]) once; prints `{"ok": true}` or
/// `{"error": "<what>"}`.
fn ws_echo(args: &[String]) -> i32 {
    let [addr, host, path] = args else {
        eprintln!("lab-client ws-echo: usage: ws-echo <addr> <host> <path>");
        return 64;
    };
    let Ok(addr) = addr.parse::<SocketAddr>() else {
        eprintln!("lab-client ws-echo: {addr}: not an address");
        return 64;
    };
    match k8slb_tests::ws::echo_round_trip(addr, host, path) {
        Ok(()) => println!("{}", json!({"ok": true})),
        Err(e) => println!("{}", json!({"error": e})),
    }
    0
}

/// `lab-client udp-echo <count> <addr>`: `count` probes of the conformance suite's UDP
/// echo (a datagram from a new socket each, 2 s for the answer), one line each: the
/// answer (JSON) or `{"error": "<what>"}`.
fn udp_echo(args: &[String]) -> i32 {
    let [count, addr] = args else {
        eprintln!("lab-client udp-echo: usage: udp-echo <count> <addr>");
        return 64;
    };
    let (Ok(count), Ok(addr)) = (count.parse::<usize>(), addr.parse::<SocketAddr>()) else {
        eprintln!("lab-client udp-echo: {count} {addr}: not a count and an address");
        return 64;
    };
    for _ in 0..count {
        let once = || -> Result<String, String> {
            let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| format!("bind: {e}"))?;
            s.set_read_timeout(Some(Duration::from_secs(2)))
                .map_err(|e| e.to_string())?;
            s.connect(addr).map_err(|e| format!("connect: {e}"))?;
            s.send(b"gateway-api-conformance-udp-echo")
                .map_err(|e| format!("send: {e}"))?;
            let mut buf = [0u8; 2048];
            let n = s.recv(&mut buf).map_err(|e| format!("recv: {e}"))?;
            let text = String::from_utf8_lossy(&buf[..n]).to_string();
            serde_json::from_str::<serde_json::Value>(&text)
                .map_err(|e| format!("not JSON ({e}): {text}"))?;
            Ok(text)
        };
        match once() {
            Ok(line) => println!("{line}"),
            Err(e) => println!("{}", json!({"error": e})),
        }
    }
    0
}

/// `lab-client dns <addr> <name>`: a DNS query (type A) for `name` over UDP to `addr`,
/// 2 s for the answer (the suite's `dns.Exchange`): `{"ok": true, "rcode": N}` for a
/// response with the query's id, else `{"error": "<what>"}`.
fn dns(args: &[String]) -> i32 {
    let [addr, name] = args else {
        eprintln!("lab-client dns: usage: dns <addr> <name>");
        return 64;
    };
    let Ok(addr) = addr.parse::<SocketAddr>() else {
        eprintln!("lab-client dns: {addr}: not an address");
        return 64;
    };
    let once = || -> Result<u8, String> {
        let id: u16 = (std::process::id() & 0xffff) as u16;
        let mut q = id.to_be_bytes().to_vec();
        q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
        for l in name.trim_end_matches('.').split('.') {
            if l.is_empty() || l.len() > 63 {
                return Err(format!("{name}: not a DNS name"));
            }
            q.push(l.len() as u8);
            q.extend_from_slice(l.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| format!("bind: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        s.connect(addr).map_err(|e| format!("connect: {e}"))?;
        s.send(&q).map_err(|e| format!("send: {e}"))?;
        let mut buf = [0u8; 2048];
        let n = s.recv(&mut buf).map_err(|e| format!("recv: {e}"))?;
        if n < 12 || buf[..2] != q[..2] || buf[2] & 0x80 == 0 {
            return Err(format!("not a response to the query ({n} bytes)"));
        }
        Ok(buf[3] & 0x0f)
    };
    match once() {
        Ok(rcode) => println!("{}", json!({"ok": true, "rcode": rcode})),
        Err(e) => println!("{}", json!({"error": e})),
    }
    0
}

/// A client configuration that takes only a certificate chaining to the CA
/// certificates of PEM file `ca` (and naming the server).
fn verifying_config(ca: &str) -> Result<Arc<tokio_rustls::rustls::ClientConfig>, String> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(ca).map_err(|e| format!("{ca}: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots
            .add(c.map_err(|e| format!("{ca}: {e}"))?)
            .map_err(|e| format!("{ca}: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

fn tcp_echo_once(
    addr: SocketAddr,
    sni: Option<&str>,
    config: Arc<tokio_rustls::rustls::ClientConfig>,
) -> Result<serde_json::Value, String> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| format!("connect: {e}"))?;
    let _ = s.set_nodelay(true);
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    match sni {
        None => echo_dialogue(s),
        Some(host) => {
            let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| format!("server name: {e}"))?;
            let conn = tokio_rustls::rustls::ClientConnection::new(config, name)
                .map_err(|e| format!("tls: {e}"))?;
            echo_dialogue(tokio_rustls::rustls::StreamOwned::new(conn, s))
        }
    }
}

/// The TCP echo dialogue over `s`: welcome, PING, IS_TLS, TEST.
fn echo_dialogue(mut s: impl Read + Write) -> Result<serde_json::Value, String> {
    fn line(s: &mut impl Read) -> Result<String, String> {
        let mut out = Vec::new();
        let mut b = [0u8; 1];
        loop {
            match s.read(&mut b) {
                Ok(0) => return Err("closed".into()),
                Ok(_) if b[0] == b'\n' => break,
                Ok(_) => out.push(b[0]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
        Ok(String::from_utf8_lossy(&out).to_string())
    }
    let welcome = line(&mut s)?;
    let mut ask = |q: &str| -> Result<String, String> {
        s.write_all(format!("{q}\n").as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        s.flush().map_err(|e| format!("write: {e}"))?;
        line(&mut s)
    };
    let pong = ask("PING")?;
    let is_tls = ask("IS_TLS")?;
    let test = ask("TEST")?;
    let test: serde_json::Value =
        serde_json::from_str(&test).map_err(|e| format!("TEST answer {test:?}: {e}"))?;
    Ok(json!({
        "welcome": welcome == "Gateway API Test TCP Server",
        "pong": pong == "PONG",
        "isTLS": is_tls,
        "test": test,
    }))
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("ws-echo") {
        std::process::exit(ws_echo(&argv[1..]));
    }
    if argv.first().map(String::as_str) == Some("dns") {
        std::process::exit(dns(&argv[1..]));
    }
    if argv.first().map(String::as_str) == Some("udp-echo") {
        std::process::exit(udp_echo(&argv[1..]));
    }
    if argv.first().map(String::as_str) == Some("tcp-echo") {
        std::process::exit(tcp_echo(&argv[1..]));
    }
    if argv.first().map(String::as_str) == Some("grpc") {
        std::process::exit(grpc_call(&argv[1..]));
    }
    if argv.first().map(String::as_str) == Some("grpc-json") {
        std::process::exit(grpc_json(&argv[1..]));
    }
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("lab-client: {e}");
            std::process::exit(64);
        }
    };
    let out = if o.mode == "load" {
        load(&o)
    } else {
        probe(&o)
    };
    println!("{out}");
}

/// One request; Ok(backend name) or Err(error kind).
fn request(o: &Opts) -> Result<String, String> {
    match o.proto {
        Proto::Http => http(o),
        Proto::Https => https(o),
        Proto::Tcp => tcp(o),
        Proto::Udp => udp(o),
    }
}

fn kind(e: &std::io::Error) -> String {
    format!("{:?}", e.kind())
}

fn connect(o: &Opts) -> Result<TcpStream, String> {
    let s = TcpStream::connect_timeout(&o.target, o.timeout)
        .map_err(|e| format!("connect:{}", kind(&e)))?;
    s.set_read_timeout(Some(o.timeout)).map_err(|e| kind(&e))?;
    s.set_write_timeout(Some(o.timeout)).map_err(|e| kind(&e))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

fn backend_of(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("backend="))
        .map(|n| n.split_whitespace().next().unwrap_or("").to_string())
}

fn http(o: &Opts) -> Result<String, String> {
    let s = connect(o)?;
    exchange(o, s)
}

/// A verifier that accepts any certificate: the lab's are self-signed, and what is
/// measured is whether the handshake and the request succeed, not who signed.
#[derive(Debug)]
struct AnyCert(Arc<tokio_rustls::rustls::crypto::CryptoProvider>);

impl tokio_rustls::rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        _: &[tokio_rustls::rustls::pki_types::CertificateDer<'_>],
        _: &tokio_rustls::rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: tokio_rustls::rustls::pki_types::UnixTime,
    ) -> Result<tokio_rustls::rustls::client::danger::ServerCertVerified, tokio_rustls::rustls::Error>
    {
        Ok(tokio_rustls::rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        d: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
        tokio_rustls::rustls::crypto::verify_tls12_signature(
            m,
            c,
            d,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
        d: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
        tokio_rustls::rustls::crypto::verify_tls13_signature(
            m,
            c,
            d,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<tokio_rustls::rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_config() -> Arc<tokio_rustls::rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<Arc<tokio_rustls::rustls::ClientConfig>> =
        std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
            let config =
                tokio_rustls::rustls::ClientConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()
                    .expect("protocol versions")
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
                    .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

fn https(o: &Opts) -> Result<String, String> {
    let host = o.host.clone().unwrap_or_else(|| "localhost".to_string());
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host)
        .map_err(|_| "sni".to_string())?;
    let conn = tokio_rustls::rustls::ClientConnection::new(tls_config(), name)
        .map_err(|_| "tls".to_string())?;
    let mut tls = tokio_rustls::rustls::StreamOwned::new(conn, connect(o)?);
    // The handshake, on its own, so a failed one is told apart from a failed request.
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|_| "tls".to_string())?;
    }
    exchange(o, tls)
}

/// One HTTP/1.1 GET over `s` (plain or TLS): Ok(backend name) or Err(error kind).
fn exchange(o: &Opts, mut s: impl Read + Write) -> Result<String, String> {
    let host = o.host.clone().unwrap_or_else(|| o.target.to_string());
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: lab-client\r\nConnection: close\r\n\r\n",
        o.path
    );
    s.write_all(req.as_bytes())
        .map_err(|e| format!("write:{}", kind(&e)))?;
    let mut resp = Vec::new();
    if let Err(e) = s.read_to_end(&mut resp) {
        // A TLS peer that closes without close_notify after a whole answer is fine.
        if resp.is_empty() {
            return Err(format!("read:{}", kind(&e)));
        }
    }
    let text = String::from_utf8_lossy(&resp);
    let status = text.split_whitespace().nth(1).unwrap_or("none");
    if status != "200" {
        return Err(format!("status:{status}"));
    }
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    backend_of(body).ok_or_else(|| "body".to_string())
}

fn tcp(o: &Opts) -> Result<String, String> {
    let mut s = connect(o)?;
    let mut buf = [0u8; 256];
    let mut got = Vec::new();
    while !got.contains(&b'\n') {
        let n = s.read(&mut buf).map_err(|e| format!("read:{}", kind(&e)))?;
        if n == 0 {
            return Err("eof".into());
        }
        got.extend_from_slice(&buf[..n]);
    }
    let greeting = String::from_utf8_lossy(&got).into_owned();
    let name = backend_of(&greeting).ok_or("greeting")?;
    let after: Vec<u8> = got[got.iter().position(|b| *b == b'\n').unwrap_or(0) + 1..].to_vec();
    s.write_all(b"ping\n")
        .map_err(|e| format!("write:{}", kind(&e)))?;
    let mut echo = after;
    while echo.len() < 5 {
        let n = s.read(&mut buf).map_err(|e| format!("read:{}", kind(&e)))?;
        if n == 0 {
            return Err("eof".into());
        }
        echo.extend_from_slice(&buf[..n]);
    }
    if &echo[..5] != b"ping\n" {
        return Err("echo".into());
    }
    Ok(name)
}

static UDP_SEQ: AtomicU64 = AtomicU64::new(0);

fn udp(o: &Opts) -> Result<String, String> {
    let bind = if o.target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let s = UdpSocket::bind(bind).map_err(|e| format!("bind:{}", kind(&e)))?;
    s.connect(o.target)
        .map_err(|e| format!("connect:{}", kind(&e)))?;
    s.set_read_timeout(Some(o.timeout)).map_err(|e| kind(&e))?;
    let msg = format!("ping-{}", UDP_SEQ.fetch_add(1, Ordering::Relaxed));
    s.send(msg.as_bytes())
        .map_err(|e| format!("send:{}", kind(&e)))?;
    let mut buf = [0u8; 2048];
    let n = s.recv(&mut buf).map_err(|e| format!("recv:{}", kind(&e)))?;
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    let name = backend_of(&text).ok_or("reply")?;
    if !text.ends_with(&msg) {
        return Err("reply".into());
    }
    Ok(name)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn stop_requested(o: &Opts, start: Instant) -> bool {
    if let Some(d) = o.duration {
        if start.elapsed() >= d {
            return true;
        }
    }
    o.stop_file.as_ref().is_some_and(|f| f.exists())
}

fn load(o: &Opts) -> serde_json::Value {
    let start = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<(Result<String, String>, f64)>();
    let mut workers = Vec::new();
    for _ in 0..o.concurrency {
        let o = o.clone();
        let next = next.clone();
        let stop = stop.clone();
        let tx = tx.clone();
        workers.push(std::thread::spawn(move || loop {
            if stop.load(Ordering::Relaxed) || stop_requested(&o, start) {
                stop.store(true, Ordering::Relaxed);
                return;
            }
            let i = next.fetch_add(1, Ordering::Relaxed);
            if o.n > 0 && i >= o.n {
                return;
            }
            if o.rate > 0.0 {
                let due = start + Duration::from_secs_f64(i as f64 / o.rate);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            let t = Instant::now();
            let r = request(&o);
            let _ = tx.send((r, t.elapsed().as_secs_f64() * 1000.0));
        }));
    }
    drop(tx);
    let mut ok = 0u64;
    let mut failed = 0u64;
    let mut lat = Vec::new();
    let mut by_backend: BTreeMap<String, u64> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for (r, ms) in rx {
        match r {
            Ok(b) => {
                ok += 1;
                lat.push(ms);
                *by_backend.entry(b).or_default() += 1;
            }
            Err(e) => {
                failed += 1;
                *errors.entry(e).or_default() += 1;
            }
        }
    }
    for w in workers {
        let _ = w.join();
    }
    lat.sort_by(f64::total_cmp);
    json!({
        "ok": ok,
        "failed": failed,
        "p50_ms": percentile(&lat, 0.5),
        "p99_ms": percentile(&lat, 0.99),
        "max_ms": lat.last().copied().unwrap_or(0.0),
        "elapsed_ms": start.elapsed().as_secs_f64() * 1000.0,
        "by_backend": by_backend,
        "errors": errors,
    })
}

fn probe(o: &Opts) -> serde_json::Value {
    let start = Instant::now();
    let (tx, rx) = mpsc::channel::<(Result<String, String>, f64, f64)>();
    let mut handles = Vec::new();
    let mut tick = 0u64;
    while !stop_requested(o, start) {
        let due = start + o.interval * tick as u32;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        tick += 1;
        let o2 = o.clone();
        let tx = tx.clone();
        handles.push(std::thread::spawn(move || {
            let t0 = start.elapsed().as_secs_f64() * 1000.0;
            let r = request(&o2);
            let t1 = start.elapsed().as_secs_f64() * 1000.0;
            let _ = tx.send((r, t0, t1));
        }));
        handles.retain(|h| !h.is_finished());
    }
    let end_ms = start.elapsed().as_secs_f64() * 1000.0;
    drop(tx);
    for h in handles {
        let _ = h.join();
    }
    let mut ok = 0u64;
    let mut failed = 0u64;
    let mut successes: Vec<f64> = Vec::new();
    let mut failures: Vec<f64> = Vec::new();
    let mut by_backend: BTreeMap<String, u64> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    // (start time, backend) of successes, to find when the answering backend changed.
    for (r, t0, t1) in rx {
        match r {
            Ok(b) => {
                ok += 1;
                successes.push(t1);
                *by_backend.entry(b).or_default() += 1;
            }
            Err(e) => {
                failed += 1;
                failures.push(t0);
                *errors.entry(e).or_default() += 1;
            }
        }
    }
    successes.sort_by(f64::total_cmp);
    failures.sort_by(f64::total_cmp);
    let mut max_gap = 0.0f64;
    let mut gap_at = 0.0f64;
    for w in successes.windows(2) {
        if w[1] - w[0] > max_gap {
            max_gap = w[1] - w[0];
            gap_at = w[0];
        }
    }
    let first_ok = successes.first().copied();
    let last_ok = successes.last().copied();
    let tail_gap = last_ok.map(|l| (end_ms - l).max(0.0)).unwrap_or(end_ms);
    json!({
        "ok": ok,
        "failed": failed,
        "max_gap_ms": max_gap,
        "gap_started_at_ms": gap_at,
        "first_ok_ms": first_ok,
        "tail_gap_ms": tail_gap,
        "recovered": ok > 0 && tail_gap < 2.0 * o.interval.as_secs_f64() * 1000.0 + o.timeout.as_secs_f64() * 1000.0,
        "first_failure_ms": failures.first(),
        "last_failure_ms": failures.last(),
        "interval_ms": o.interval.as_secs_f64() * 1000.0,
        "elapsed_ms": end_ms,
        "by_backend": by_backend,
        "errors": errors,
    })
}
