//! lab-backend: small servers that say who they are, for the lab's backend hosts.
//!
//! ```text
//! lab-backend --name be1 --http 198.18.0.21:8080 --tcp 198.18.0.21:9000 --udp 198.18.0.21:9001 \
//!     --https 198.18.0.21:443 --cert default.pem --key default.key
//! ```
//!
//! - HTTP/1.1 (keep-alive): every request gets `200` with body `backend=<name>\n`, plus one
//!   line per forwarded header it saw (`x-forwarded-for=..`, `x-forwarded-proto=..`), one
//!   per `x-test-*` header, `path=<request target>`, and a `proxy=<PROXY v1 line>` line
//!   when the connection began with a PROXY protocol v1 header.
//!   Headers `X-Backend: <name>` are set on the response too.
//! - HTTPS (`--https`, needs `--cert` and `--key`, PEM): the same HTTP server behind TLS, as a
//!   backend that terminates TLS itself (Rancher on `targetPort: 443`) is.
//! - TCP: writes `backend=<name>\n` on connect, then echoes what it receives.
//! - UDP: answers each datagram with `backend=<name> <datagram>`.
//! - Echo (`--echo ADDR,NAMESPACE,POD`): HTTP/1.1 answered like the Gateway API
//!   conformance suite's echo server: `200` with a JSON body naming the request (`path`
//!   as sent, `host`, `method`, `proto`, `headers` as name → values, names in Go's
//!   canonical form) and who answered (`namespace`, `pod`, `service`: the pod's name up
//!   to `-lab`), and `httpPort`; a request header `X-Echo-Set-Header: Name:value,...`
//!   sets those response headers; a query `delay=<n>s|<n>ms` waits that long first.
//!   Each request is logged on stdout as `<pod> <method> <target>`.
//!   On the same port, like the suite's echo server: h2c with prior knowledge (the same
//!   JSON, `proto` `HTTP/2.0`) and WebSocket (an `Upgrade: websocket` request gets `101`
//!   with its accept key, then every message is sent back: [`k8slb_tests::ws`]).
//!   `--echo-tls ADDR,NAMESPACE,POD` with `--echo-cert` and `--echo-key` (PEM): the
//!   same over TLS when the client opens with a handshake (the suite's `tls-backend`),
//!   the answer naming what the handshake said (`tls.serverName`, ...,
//!   `tls.peerCertificates`: the client certificate it was shown, as PEM); plain
//!   otherwise. With `--echo-client-ca PEM` it asks for a client certificate signed by
//!   that CA and takes a client without one (the suite's `TLS_CLIENT_CACERTS`).
//! - gRPC (`--grpc`, h2c): the conformance suite's GrpcEcho service
//!   ([`k8slb_tests::grpc`]), its pod context naming this backend (`pod` and
//!   `service_name` = `<name>`). `--grpc-echo ADDR,NAMESPACE,POD`: the same service
//!   naming that namespace and pod, as the suite's `GRPC_ECHO_SERVER` Deployments answer.
//! - TCP echo (`--tcp-echo ADDR,NAMESPACE,POD`): the suite's TCP echo protocol
//!   (welcome line; `PING`, `IS_TLS`, `TEST` answered), as its `TCP_ECHO_SERVER`
//!   Deployments answer.
//! - UDP echo (`--udp-echo ADDR,NAMESPACE,POD`): each datagram answered with JSON
//!   (`request`, `namespace`, `service`, `pod`), as the suite's `UDP_ECHO_SERVER`.
//! - DNS (`--dns ADDR,NAMESPACE,POD`, UDP): each query answered with a response that
//!   echoes its id and question, no records (the suite's `coredns` backend, whose
//!   test only needs an answer).
//! - WebSocket (`--ws`): an `Upgrade: websocket` request gets `101`, then every byte is
//!   echoed ([`k8slb_tests::grpc::upgrade_backend`]); another request `200 <name>`.
//!
//! Any number of each listener may be given. Runs until killed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio_rustls::rustls;

struct Args {
    name: String,
    http: Vec<SocketAddr>,
    https: Vec<SocketAddr>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    tcp: Vec<SocketAddr>,
    udp: Vec<SocketAddr>,
    grpc: Vec<SocketAddr>,
    ws: Vec<SocketAddr>,
    echo: Vec<(SocketAddr, Arc<Echo>)>,
    grpc_echo: Vec<(SocketAddr, Arc<Echo>)>,
    tcp_echo: Vec<(SocketAddr, Arc<Echo>)>,
    udp_echo: Vec<(SocketAddr, Arc<Echo>)>,
    dns: Vec<SocketAddr>,
    tcp_echo_tls: Vec<(SocketAddr, Arc<Echo>)>,
    /// The HTTP echo over TLS (or plain, as the client starts), with `--echo-cert` and
    /// `--echo-key`: the suite's `tls-backend`.
    echo_tls: Vec<(SocketAddr, Arc<Echo>)>,
    echo_cert: Option<PathBuf>,
    echo_key: Option<PathBuf>,
    /// `--echo-client-ca`: the TLS echo asks for a client certificate signed by one of
    /// these CAs, and takes a connection without one (the suite's echo with
    /// `TLS_CLIENT_CACERTS`: Go's `VerifyClientCertIfGiven`).
    echo_client_ca: Option<PathBuf>,
}

/// Who an echo listener says it is.
#[derive(Debug)]
struct Echo {
    namespace: String,
    pod: String,
    /// The retry simulation's failed attempts so far, by the request's `uuid`.
    retries: std::sync::Mutex<std::collections::HashMap<String, u32>>,
}

/// What the retry simulation answers a request under `/retry/` (see [`Echo::retry`]).
#[derive(Debug, PartialEq, Eq)]
enum RetryAnswer {
    /// `400` with this body: `uuid` or `succeedAfter` missing.
    Bad(&'static str),
    /// A failed attempt answered with this status.
    Status(u16),
    /// A failed attempt with no answer: the connection is closed.
    Close,
    /// Enough attempts have failed: the usual echo.
    Echo,
}

/// The answer of the suite's `coredns` backend as its test needs it: a DNS response to
/// the query (its id and question, `QR` set, no records: the test only needs an answer
/// that parses). A datagram that is not a query with one question whose name ends
/// gets `FORMERR` with the query's header; one shorter than a header, nothing.
fn dns_reply(q: &[u8]) -> Option<Vec<u8>> {
    if q.len() < 12 || q[2] & 0x80 != 0 {
        return None;
    }
    let qdcount = u16::from_be_bytes([q[4], q[5]]);
    // The question: labels up to the root, then type and class.
    let mut i = 12;
    let question_end = loop {
        if qdcount != 1 {
            break None;
        }
        match q.get(i) {
            Some(0) => break (i + 5 <= q.len()).then_some(i + 5),
            Some(&l) if l < 64 => i += 1 + usize::from(l),
            _ => break None,
        }
    };
    let mut r = q[..12].to_vec();
    r[2] = 0x80 | (q[2] & 0x79); // QR, the opcode and RD as asked, AA/TC clear
    r[6..12].fill(0); // no answer, authority, additional records
    match question_end {
        Some(end) => {
            r[3] = 0; // NOERROR
            r.extend_from_slice(&q[12..end]);
        }
        None => {
            r[3] = 1; // FORMERR
            r[4..6].fill(0);
        }
    }
    Some(r)
}

/// The reason phrase of the statuses the retry simulation answers (any other: none).
fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

/// The value of query parameter `name` in request target `target`.
fn query_param<'a>(target: &'a str, name: &str) -> Option<&'a str> {
    let query = target.split_once('?')?.1;
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

impl Echo {
    /// The retry simulation, as the suite's echo server has it (echo-basic's
    /// `/retry/` handler): requests are told apart by their `uuid`; the first
    /// `succeedAfter` of each fail, with `responseCode` when it is a number (else the
    /// connection is closed: the suite's aborts it with a TCP RST), the next ones get the
    /// echo. `delayRetry` (delaying a failure) is not transcribed: no test of the data
    /// we run uses it.
    fn retry(&self, target: &str) -> RetryAnswer {
        let Some(uuid) = query_param(target, "uuid").filter(|u| !u.is_empty()) else {
            return RetryAnswer::Bad("uuid is required");
        };
        let Some(after) = query_param(target, "succeedAfter").and_then(|v| v.parse::<u32>().ok())
        else {
            return RetryAnswer::Bad("succeedAfter is required");
        };
        let mut seen = self.retries.lock().unwrap_or_else(|e| e.into_inner());
        let n = seen.entry(uuid.to_string()).or_default();
        if *n >= after {
            return RetryAnswer::Echo;
        }
        *n += 1;
        match query_param(target, "responseCode").and_then(|v| v.parse::<u16>().ok()) {
            Some(code) => RetryAnswer::Status(code),
            None => RetryAnswer::Close,
        }
    }
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        name: String::new(),
        http: vec![],
        https: vec![],
        cert: None,
        key: None,
        tcp: vec![],
        udp: vec![],
        echo: vec![],
        grpc_echo: vec![],
        tcp_echo: vec![],
        udp_echo: vec![],
        dns: vec![],
        tcp_echo_tls: vec![],
        echo_tls: vec![],
        echo_cert: None,
        echo_key: None,
        echo_client_ca: None,
        grpc: vec![],
        ws: vec![],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let val = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let addr = || {
            val.parse::<SocketAddr>()
                .map_err(|e| format!("{flag} {val}: {e}"))
        };
        match flag.as_str() {
            "--name" => a.name = val.clone(),
            "--http" => a.http.push(addr()?),
            "--https" => a.https.push(addr()?),
            "--cert" => a.cert = Some(PathBuf::from(&val)),
            "--key" => a.key = Some(PathBuf::from(&val)),
            "--tcp" => a.tcp.push(addr()?),
            "--udp" => a.udp.push(addr()?),
            "--echo-cert" => a.echo_cert = Some(PathBuf::from(&val)),
            "--echo-key" => a.echo_key = Some(PathBuf::from(&val)),
            "--echo-client-ca" => a.echo_client_ca = Some(PathBuf::from(&val)),
            "--echo" | "--echo-tls" | "--grpc-echo" | "--tcp-echo" | "--tcp-echo-tls"
            | "--udp-echo" | "--dns" => {
                let mut parts = val.split(',');
                let (Some(at), Some(namespace), Some(pod), None) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    return Err(format!("{flag} {val}: expected ADDR,NAMESPACE,POD"));
                };
                let at = at
                    .parse::<SocketAddr>()
                    .map_err(|e| format!("{flag} {val}: {e}"))?;
                let echo = Echo {
                    namespace: namespace.to_string(),
                    pod: pod.to_string(),
                    retries: Default::default(),
                };
                match flag.as_str() {
                    "--echo" => a.echo.push((at, Arc::new(echo))),
                    "--echo-tls" => a.echo_tls.push((at, Arc::new(echo))),
                    "--grpc-echo" => a.grpc_echo.push((at, Arc::new(echo))),
                    "--tcp-echo" => a.tcp_echo.push((at, Arc::new(echo))),
                    "--tcp-echo-tls" => a.tcp_echo_tls.push((at, Arc::new(echo))),
                    "--dns" => a.dns.push(at),
                    _ => a.udp_echo.push((at, Arc::new(echo))),
                }
            }
            "--grpc" => a.grpc.push(addr()?),
            "--ws" => a.ws.push(addr()?),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.name.is_empty()
        && a.echo.is_empty()
        && a.echo_tls.is_empty()
        && a.grpc_echo.is_empty()
        && a.tcp_echo.is_empty()
    {
        return Err("--name is required".into());
    }
    if !a.https.is_empty() && (a.cert.is_none() || a.key.is_none()) {
        return Err("--https needs --cert and --key".into());
    }
    Ok(a)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("lab-backend: {e}\nusage: lab-backend --name N [--http ADDR]... [--https ADDR --cert PEM --key PEM]... [--tcp ADDR]... [--udp ADDR]... [--echo ADDR,NAMESPACE,POD]... [--grpc-echo ADDR,NAMESPACE,POD]... [--tcp-echo ADDR,NAMESPACE,POD]... [--udp-echo ADDR,NAMESPACE,POD]... [--dns ADDR,NAMESPACE,POD]... [--tcp-echo-tls ADDR,NAMESPACE,POD --cert PEM --key PEM]... [--echo-tls ADDR,NAMESPACE,POD --echo-cert PEM --echo-key PEM [--echo-client-ca PEM]]... [--grpc ADDR]... [--ws ADDR]...");
            std::process::exit(64);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(run(args)) {
        eprintln!("lab-backend: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> std::io::Result<()> {
    let name: Arc<str> = Arc::from(args.name.as_str());
    let acceptor = if args.https.is_empty() {
        None
    } else {
        Some(tls_acceptor(&args)?)
    };
    let echo_acceptor = if args.echo_tls.is_empty() {
        None
    } else {
        Some(echo_tls_acceptor(&args)?)
    };
    let tcp_tls_acceptor = if args.tcp_echo_tls.is_empty() {
        None
    } else {
        Some(tls_acceptor(&args)?)
    };
    let mut tasks = tokio::task::JoinSet::new();
    for addr in args.http {
        let l = bind(addr).await?;
        let name = name.clone();
        tasks.spawn(async move {
            loop {
                if let Ok((s, _)) = l.accept().await {
                    let name = name.clone();
                    tokio::spawn(async move {
                        if s.set_nodelay(true).is_ok() {
                            let _ = serve_http(s, &name).await;
                        }
                    });
                }
            }
        });
    }
    if let Some(acceptor) = acceptor {
        for addr in args.https {
            let l = bind(addr).await?;
            let name = name.clone();
            let acceptor = acceptor.clone();
            tasks.spawn(async move {
                loop {
                    if let Ok((s, _)) = l.accept().await {
                        let name = name.clone();
                        let acceptor = acceptor.clone();
                        tokio::spawn(async move {
                            if s.set_nodelay(true).is_err() {
                                return;
                            }
                            if let Ok(tls) = acceptor.accept(s).await {
                                let _ = serve_http(tls, &name).await;
                            }
                        });
                    }
                }
            });
        }
    }
    for (addr, echo) in args.echo {
        let l = bind(addr).await?;
        tasks.spawn(async move {
            loop {
                if let Ok((s, _)) = l.accept().await {
                    let echo = echo.clone();
                    tokio::spawn(async move {
                        if s.set_nodelay(true).is_ok() {
                            if starts_h2(&s).await {
                                let _ = serve_echo_h2(s, echo, addr.port()).await;
                            } else {
                                let _ = serve_echo(s, &echo, addr.port(), None).await;
                            }
                        }
                    });
                }
            }
        });
    }
    if let Some(acceptor) = echo_acceptor {
        for (addr, echo) in args.echo_tls {
            let l = bind(addr).await?;
            let acceptor = acceptor.clone();
            tasks.spawn(async move {
                loop {
                    if let Ok((s, _)) = l.accept().await {
                        let echo = echo.clone();
                        let acceptor = acceptor.clone();
                        tokio::spawn(async move {
                            let _ = serve_echo_either(s, &echo, addr.port(), acceptor).await;
                        });
                    }
                }
            });
        }
    }
    for (addr, echo) in args.tcp_echo {
        let l = bind(addr).await?;
        tasks.spawn(async move {
            loop {
                if let Ok((s, _)) = l.accept().await {
                    let echo = echo.clone();
                    tokio::spawn(async move {
                        if s.set_nodelay(true).is_ok() {
                            let _ = serve_tcp_echo(s, &echo, addr.port()).await;
                        }
                    });
                }
            }
        });
    }
    if let Some(acceptor) = tcp_tls_acceptor {
        for (addr, echo) in args.tcp_echo_tls {
            let l = bind(addr).await?;
            let acceptor = acceptor.clone();
            tasks.spawn(async move {
                loop {
                    if let Ok((s, _)) = l.accept().await {
                        let echo = echo.clone();
                        let acceptor = acceptor.clone();
                        tokio::spawn(async move {
                            let _ = s.set_nodelay(true);
                            let _ = serve_tcp_echo_either(s, &echo, addr.port(), acceptor).await;
                        });
                    }
                }
            });
        }
    }
    for addr in args.dns {
        let sock = UdpSocket::bind(addr).await?;
        tasks.spawn(async move {
            let mut buf = vec![0u8; 2048];
            loop {
                if let Ok((n, peer)) = sock.recv_from(&mut buf).await {
                    if let Some(reply) = dns_reply(&buf[..n]) {
                        let _ = sock.send_to(&reply, peer).await;
                    }
                }
            }
        });
    }
    for (addr, echo) in args.udp_echo {
        let sock = UdpSocket::bind(addr).await?;
        tasks.spawn(async move {
            let mut buf = vec![0u8; 2048];
            loop {
                if let Ok((n, peer)) = sock.recv_from(&mut buf).await {
                    let reply = udp_echo_reply(&echo, &buf[..n]);
                    let _ = sock.send_to(reply.as_bytes(), peer).await;
                }
            }
        });
    }
    for addr in args.tcp {
        let l = bind(addr).await?;
        let name = name.clone();
        tasks.spawn(async move {
            loop {
                if let Ok((s, _)) = l.accept().await {
                    let name = name.clone();
                    tokio::spawn(async move {
                        let _ = serve_tcp(s, &name).await;
                    });
                }
            }
        });
    }
    for addr in args.udp {
        let sock = UdpSocket::bind(addr).await?;
        let name = name.clone();
        tasks.spawn(async move {
            let mut buf = vec![0u8; 65536];
            loop {
                if let Ok((n, peer)) = sock.recv_from(&mut buf).await {
                    let mut reply = format!("backend={name} ").into_bytes();
                    reply.extend_from_slice(&buf[..n]);
                    let _ = sock.send_to(&reply, peer).await;
                }
            }
        });
    }
    // The gRPC echo servers run on threads of their own, for the process's life.
    let mut grpc = Vec::new();
    for addr in args.grpc {
        let ctx = k8slb_tests::grpc::PodContext {
            service_name: name.to_string(),
            pod: name.to_string(),
            ..Default::default()
        };
        grpc.push(k8slb_tests::grpc::echo_server(
            std::net::TcpListener::bind(addr)?,
            ctx,
        )?);
    }
    for (addr, echo) in args.grpc_echo {
        let ctx = k8slb_tests::grpc::PodContext {
            namespace: echo.namespace.clone(),
            pod: echo.pod.clone(),
            ..Default::default()
        };
        grpc.push(k8slb_tests::grpc::echo_server(
            std::net::TcpListener::bind(addr)?,
            ctx,
        )?);
    }
    for addr in args.ws {
        k8slb_tests::grpc::upgrade_backend(std::net::TcpListener::bind(addr)?, &name);
    }
    eprintln!("lab-backend {name}: listening");
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// The acceptor of the TLS echo (`--echo-cert`, `--echo-key`).
fn echo_tls_acceptor(args: &Args) -> std::io::Result<tokio_rustls::TlsAcceptor> {
    let (Some(cert), Some(key)) = (&args.echo_cert, &args.echo_key) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "--echo-tls needs --echo-cert and --echo-key",
        ));
    };
    acceptor_with(cert, key, args.echo_client_ca.as_deref())
}

/// The certificates of a handshake's peer (a client certificate, then its chain), each
/// as PEM the way the suite's echo writes them (Go's `pem.Encode`: base64 in lines of
/// 64 characters).
fn peer_pems(certs: Option<&[rustls::pki_types::CertificateDer<'_>]>) -> Vec<String> {
    use base64::Engine as _;
    certs
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let b = base64::engine::general_purpose::STANDARD.encode(c.as_ref());
            let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
            for line in b.as_bytes().chunks(64) {
                pem.push_str(std::str::from_utf8(line).unwrap_or_default());
                pem.push('\n');
            }
            pem.push_str("-----END CERTIFICATE-----\n");
            pem
        })
        .collect()
}

/// The suite's echo server on its TLS port (echo-basic with `TLS_SERVER_CERT`): a
/// client that opens with a TLS handshake (a first byte 0x16) gets TLS, and the answer
/// names what the handshake said (`tls.serverName`, ...); another gets plain HTTP.
async fn serve_echo_either(
    s: TcpStream,
    echo: &Echo,
    port: u16,
    acceptor: tokio_rustls::TlsAcceptor,
) -> std::io::Result<()> {
    let _ = s.set_nodelay(true);
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(std::time::Duration::from_secs(10), s.peek(&mut first)).await;
    if !matches!(peeked, Ok(Ok(1))) || first[0] != 0x16 {
        return serve_echo(s, echo, port, None).await;
    }
    let tls = acceptor.accept(s).await?;
    let (_, conn) = tls.get_ref();
    let info = serde_json::json!({
        "version": format!("{:?}", conn.protocol_version()),
        "serverName": conn.server_name().unwrap_or_default(),
        "negotiatedProtocol": conn.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned()).unwrap_or_default(),
        "cipherSuite": conn.negotiated_cipher_suite().map(|c| format!("{:?}", c.suite())),
        "peerCertificates": peer_pems(conn.peer_certificates()),
    });
    serve_echo(tls, echo, port, Some(info)).await
}

fn tls_acceptor(args: &Args) -> std::io::Result<tokio_rustls::TlsAcceptor> {
    let (Some(cert), Some(key)) = (&args.cert, &args.key) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "--https: needs --cert and --key",
        ));
    };
    acceptor_of(cert, key)
}

fn acceptor_of(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> std::io::Result<tokio_rustls::TlsAcceptor> {
    acceptor_with(cert, key, None)
}

/// [`acceptor_of`]; with `client_ca`, client certificates signed by it are asked for
/// and verified, and a client without one is taken too.
fn acceptor_with(
    cert: &std::path::Path,
    key: &std::path::Path,
    client_ca: Option<&std::path::Path>,
) -> std::io::Result<tokio_rustls::TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let err = |what: &str, e: &dyn std::fmt::Display| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{what}: {e}"))
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| err(&cert.display().to_string(), &e))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| err(&key.display().to_string(), &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| err("TLS versions", &e))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in
                CertificateDer::pem_file_iter(ca).map_err(|e| err(&ca.display().to_string(), &e))?
            {
                roots
                    .add(c.map_err(|e| err(&ca.display().to_string(), &e))?)
                    .map_err(|e| err(&ca.display().to_string(), &e))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| err("client CA", &e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| err("TLS certificate", &e))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.bind(addr)?;
    sock.listen(1024)
}

async fn serve_tcp(mut s: TcpStream, name: &str) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    s.write_all(format!("backend={name}\n").as_bytes()).await?;
    let mut buf = vec![0u8; 16384];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        s.write_all(&buf[..n]).await?;
    }
}

/// The suite's UDP echo (echo-basic's udpechoserver, v1.6.1): each datagram answered
/// with one JSON object, the `request` as received and who answers.
fn udp_echo_reply(echo: &Echo, datagram: &[u8]) -> String {
    let service = echo.pod.strip_suffix("-lab-0").unwrap_or(&echo.pod);
    serde_json::json!({
        "request": String::from_utf8_lossy(datagram),
        "namespace": echo.namespace,
        "ingress": "",
        "service": service,
        "pod": echo.pod,
    })
    .to_string()
}

/// The suite's TCP echo server with its TLS port on the same listener: a client that
/// speaks first with a TLS handshake (a first byte 0x16 within 300 ms) gets TLS with
/// `--cert`/`--key` and `IS_TLS` `true` (and the server name it asked for in `TEST`);
/// one that waits (the plain protocol starts with the server's welcome) gets plain.
async fn serve_tcp_echo_either(
    s: TcpStream,
    echo: &Echo,
    port: u16,
    acceptor: tokio_rustls::TlsAcceptor,
) -> std::io::Result<()> {
    let mut first = [0u8; 1];
    let peeked =
        tokio::time::timeout(std::time::Duration::from_millis(300), s.peek(&mut first)).await;
    if !matches!(peeked, Ok(Ok(1))) || first[0] != 0x16 {
        return serve_tcp_echo(s, echo, port).await;
    }
    let tls = acceptor.accept(s).await?;
    let (_, conn) = tls.get_ref();
    let info = serde_json::json!({
        "version": format!("{:?}", conn.protocol_version()),
        "serverName": conn.server_name().unwrap_or_default(),
        "cipherSuite": conn.negotiated_cipher_suite().map(|c| format!("{:?}", c.suite())),
    });
    echo_dialogue(tls, echo, port, Some(info)).await
}

/// The suite's TCP echo protocol (echo-basic's tcpserver, v1.6.1): a welcome line, then
/// per line `PING` → `PONG`, `IS_TLS` → `false`, `TEST` → one JSON line naming who
/// answers (`namespace`, `service`, `pod`, `tcpport`, `isTLS`); anything else is ignored.
async fn serve_tcp_echo(s: TcpStream, echo: &Echo, port: u16) -> std::io::Result<()> {
    echo_dialogue(s, echo, port, None).await
}

/// The dialogue over `s`; `tls`: the TLS facts of a TLS connection.
async fn echo_dialogue<S: AsyncRead + AsyncWrite + Unpin>(
    s: S,
    echo: &Echo,
    port: u16,
    tls: Option<serde_json::Value>,
) -> std::io::Result<()> {
    use tokio::io::AsyncBufReadExt;
    let (r, mut w) = tokio::io::split(s);
    w.write_all(b"Gateway API Test TCP Server\n").await?;
    w.flush().await?;
    let mut lines = tokio::io::BufReader::new(r).lines();
    while let Some(line) = lines.next_line().await? {
        let answer = match line.trim() {
            "PING" => "PONG".to_string(),
            "IS_TLS" => tls.is_some().to_string(),
            "TEST" => {
                let service = echo.pod.strip_suffix("-lab-0").unwrap_or(&echo.pod);
                let mut v = serde_json::json!({
                    "namespace": echo.namespace,
                    "ingress": "",
                    "service": service,
                    "pod": echo.pod,
                    "tcpport": port.to_string(),
                    "isTLS": tls.is_some(),
                });
                if let Some(t) = &tls {
                    v["tls"] = t.clone();
                }
                v.to_string()
            }
            _ => continue,
        };
        w.write_all(format!("{answer}\n").as_bytes()).await?;
        w.flush().await?;
    }
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Serves HTTP/1.1 on a connection (plain TCP or TLS; the caller sets TCP_NODELAY).
async fn serve_http<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    name: &str,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 8192];
    let mut proxy_line: Option<String> = None;
    let mut first = true;
    loop {
        // Read one request head.
        let head_end = loop {
            if first && buf.len() >= 6 && buf.starts_with(b"PROXY ") {
                if let Some(i) = find(&buf, b"\r\n") {
                    proxy_line = Some(String::from_utf8_lossy(&buf[..i]).into_owned());
                    buf.drain(..i + 2);
                }
            }
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > 65536 {
                return Ok(());
            }
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        first = false;
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or_default().to_string();
        let http10 = request_line.ends_with("HTTP/1.0");
        let mut close = http10;
        let mut body_len = 0usize;
        let mut extra = String::new();
        for l in lines {
            let Some((k, v)) = l.split_once(':') else {
                continue;
            };
            let k = k.trim().to_ascii_lowercase();
            let v = v.trim();
            match k.as_str() {
                "content-length" => body_len = v.parse().unwrap_or(0),
                "connection" if v.eq_ignore_ascii_case("close") => close = true,
                "connection" if v.eq_ignore_ascii_case("keep-alive") => close = false,
                "x-forwarded-for" | "x-forwarded-proto" | "x-forwarded-port" | "x-real-ip"
                | "host" => {
                    extra.push_str(&format!("{k}={v}\n"));
                }
                k if k.starts_with("x-test-") => extra.push_str(&format!("{k}={v}\n")),
                _ => {}
            }
        }
        // Skip the body.
        let mut have = buf.len() - head_end;
        while have < body_len {
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
            have += n;
        }
        buf.drain(..head_end + body_len);
        let mut body = format!("backend={name}\n");
        if let Some(p) = &proxy_line {
            body.push_str(&format!("proxy={p}\n"));
        }
        body.push_str(&extra);
        if let Some(target) = request_line.split(' ').nth(1) {
            body.push_str(&format!("path={target}\n"));
        }
        let is_head = request_line.starts_with("HEAD ");
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Backend: {name}\r\nContent-Length: {}\r\n{}\r\n{}",
            body.len(),
            if close { "Connection: close\r\n" } else { "" },
            if is_head { "" } else { body.as_str() }
        );
        s.write_all(resp.as_bytes()).await?;
        if close {
            let _ = s.shutdown().await;
            return Ok(());
        }
    }
}

/// Go's canonical form of a header name (`x-header-set` → `X-Header-Set`), as the
/// suite's echo server reports names.
fn canonical(name: &str) -> String {
    name.split('-')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// The `delay` query parameter (`1s`, `500ms`), if any.
fn delay_of(target: &str) -> Option<std::time::Duration> {
    let query = target.split_once('?')?.1;
    let v = query.split('&').find_map(|kv| kv.strip_prefix("delay="))?;
    if let Some(ms) = v.strip_suffix("ms") {
        return ms.parse().ok().map(std::time::Duration::from_millis);
    }
    v.strip_suffix('s')?
        .parse::<f64>()
        .ok()
        .map(std::time::Duration::from_secs_f64)
}

/// Serves HTTP/1.x on a connection as the conformance suite's echo server answers.
async fn serve_echo<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    echo: &Echo,
    port: u16,
    tls: Option<serde_json::Value>,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 8192];
    loop {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > 65536 {
                return Ok(());
            }
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or_default().to_string();
        let mut parts = request_line.split(' ');
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let proto = parts.next().unwrap_or("HTTP/1.0").to_string();
        let mut close = proto == "HTTP/1.0";
        let mut body_len = 0usize;
        let mut host = String::new();
        let mut headers: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        let mut set_headers: Vec<(String, String)> = Vec::new();
        for l in lines {
            let Some((k, v)) = l.split_once(':') else {
                continue;
            };
            let v = v.trim().to_string();
            let name = canonical(k.trim());
            match name.as_str() {
                "Host" => {
                    host = v;
                    continue;
                }
                "Content-Length" => body_len = v.parse().unwrap_or(0),
                "Connection" if v.eq_ignore_ascii_case("close") => close = true,
                "Connection" if v.eq_ignore_ascii_case("keep-alive") => close = false,
                "X-Echo-Set-Header" => {
                    for kv in v.split(',') {
                        if let Some((n, val)) = kv.trim().split_once(':') {
                            set_headers.push((n.to_string(), val.trim().to_string()));
                        }
                    }
                }
                _ => {}
            }
            headers.entry(name).or_default().push(v);
        }
        let mut have = buf.len() - head_end;
        while have < body_len {
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
            have += n;
        }
        buf.drain(..head_end + body_len);
        let upgrade = headers
            .get("Upgrade")
            .is_some_and(|v| v.iter().any(|v| v.eq_ignore_ascii_case("websocket")));
        if let (true, Some(key)) = (upgrade, headers.get("Sec-Websocket-Key")) {
            let key = key.first().cloned().unwrap_or_default();
            return serve_ws(s, &key, buf).await;
        }
        // As the suite's echo server logs each request (its mirror tests read the logs).
        println!("{} {method} {target}", echo.pod);
        if target.starts_with("/retry/") {
            let (status, body) = match echo.retry(&target) {
                RetryAnswer::Echo => (200, None),
                RetryAnswer::Bad(why) => (400, Some(why)),
                RetryAnswer::Status(code) => (code, Some("")),
                RetryAnswer::Close => return Ok(()),
            };
            if let Some(body) = body {
                let resp = format!(
                    "HTTP/1.1 {status} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n{body}",
                    reason_phrase(status),
                    body.len(),
                    if close { "Connection: close\r\n" } else { "" },
                );
                s.write_all(resp.as_bytes()).await?;
                if close {
                    let _ = s.shutdown().await;
                    return Ok(());
                }
                continue;
            }
        }
        if let Some(d) = delay_of(&target) {
            tokio::time::sleep(d).await;
        }
        let mut body = echo_json(echo, port, &method, &target, &host, &proto, &headers);
        if let Some(t) = &tls {
            // As the suite's echo server on its TLS port: what the handshake said.
            let mut v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            v["tls"] = t.clone();
            body = v.to_string();
        }
        let mut extra = String::new();
        for (n, v) in &set_headers {
            extra.push_str(&format!("{n}: {v}\r\n"));
        }
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nDate: {}\r\n{extra}Content-Length: {}\r\n{}\r\n{}",
            http_date(std::time::SystemTime::now()),
            body.len(),
            if close { "Connection: close\r\n" } else { "" },
            if method == "HEAD" { "" } else { body.as_str() }
        );
        s.write_all(resp.as_bytes()).await?;
        if close {
            let _ = s.shutdown().await;
            return Ok(());
        }
    }
}

/// The echo server's JSON answer to a request.
fn echo_json(
    echo: &Echo,
    port: u16,
    method: &str,
    target: &str,
    host: &str,
    proto: &str,
    headers: &std::collections::BTreeMap<String, Vec<String>>,
) -> String {
    let service = echo
        .pod
        .rsplit_once("-lab")
        .map(|(s, _)| s)
        .unwrap_or(&echo.pod);
    serde_json::json!({
        "path": target,
        "host": host,
        "method": method,
        "proto": proto,
        "headers": headers,
        "httpPort": port.to_string(),
        "namespace": echo.namespace,
        "ingress": "",
        "service": service,
        "pod": echo.pod,
    })
    .to_string()
}

/// Whether the connection opens with HTTP/2's client preface (h2c with prior
/// knowledge, as the suite's echo server takes on its h2c port).
async fn starts_h2(s: &TcpStream) -> bool {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";
    let mut got = [0u8; 16];
    for _ in 0..100 {
        match s.peek(&mut got).await {
            Ok(0) | Err(_) => return false,
            Ok(n) if n >= PREFACE.len() => return got.starts_with(PREFACE),
            Ok(n) if !PREFACE.starts_with(&got[..n]) => return false,
            Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(1)).await,
        }
    }
    false
}

/// The echo over h2c: each stream answered `200` with the same JSON as over HTTP/1.1
/// (`proto` `HTTP/2.0`, `host` the `:authority`).
async fn serve_echo_h2(s: TcpStream, echo: Arc<Echo>, port: u16) -> Result<(), h2::Error> {
    let mut conn = h2::server::handshake(s).await?;
    while let Some(r) = conn.accept().await {
        let (req, mut respond) = r?;
        let echo = echo.clone();
        tokio::spawn(async move {
            let (parts, mut body) = req.into_parts();
            while let Some(chunk) = body.data().await {
                let Ok(chunk) = chunk else { return };
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            let host = parts
                .uri
                .authority()
                .map(|a| a.to_string())
                .unwrap_or_default();
            let target = parts
                .uri
                .path_and_query()
                .map_or_else(|| "/".to_string(), |p| p.to_string());
            let mut headers: std::collections::BTreeMap<String, Vec<String>> = Default::default();
            for (k, v) in &parts.headers {
                headers
                    .entry(canonical(k.as_str()))
                    .or_default()
                    .push(String::from_utf8_lossy(v.as_bytes()).into_owned());
            }
            let body = echo_json(
                &echo,
                port,
                parts.method.as_str(),
                &target,
                &host,
                "HTTP/2.0",
                &headers,
            );
            let resp = http::Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .header("x-content-type-options", "nosniff")
                .body(())
                .expect("static response head");
            if let Ok(mut send) = respond.send_response(resp, false) {
                let _ = send.send_data(bytes::Bytes::from(body), true);
            }
        });
    }
    Ok(())
}

/// The echo's WebSocket (after an `Upgrade: websocket` request, as the suite's echo
/// server on `/ws`): `101` with the accept key of `key`, then every text and binary
/// message sent back, pings answered, a close returned. `buf`: bytes already read.
async fn serve_ws<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    key: &str,
    mut buf: Vec<u8>,
) -> std::io::Result<()> {
    use k8slb_tests::ws;
    let head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
        ws::accept_key(key)
    );
    s.write_all(head.as_bytes()).await?;
    let mut chunk = vec![0u8; 8192];
    loop {
        while let Some((f, n)) = ws::decode(&buf) {
            buf.drain(..n);
            match f.opcode {
                ws::TEXT | ws::BINARY => {
                    s.write_all(&ws::encode(f.opcode, &f.payload, None)).await?
                }
                ws::PING => s.write_all(&ws::encode(ws::PONG, &f.payload, None)).await?,
                ws::CLOSE => {
                    s.write_all(&ws::encode(ws::CLOSE, &f.payload, None))
                        .await?;
                    return Ok(());
                }
                _ => {}
            }
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// An IMF-fixdate (`Thu, 26 Nov 2026 23:10:00 GMT`): the suites' echo servers are Go's
/// net/http, which sends `Date` on every answer (the Ingress suite checks for it).
fn http_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod date_tests {
    #[test]
    fn the_date_header_is_an_imf_fixdate() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_734_600);
        assert_eq!(super::http_date(t), "Thu, 26 Nov 2026 23:10:00 GMT");
        assert_eq!(
            super::http_date(std::time::UNIX_EPOCH),
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
    }
}

#[cfg(test)]
mod retry_tests {
    use super::{Echo, RetryAnswer};

    fn echo() -> Echo {
        Echo {
            namespace: "ns".into(),
            pod: "infra-backend-v3-lab-0".into(),
            retries: Default::default(),
        }
    }

    #[test]
    fn the_first_succeed_after_attempts_of_a_uuid_fail_then_it_echoes() {
        let e = echo();
        let t = "/retry/code-500-attempts-3?responseCode=500&succeedAfter=2&uuid=a";
        assert_eq!(e.retry(t), RetryAnswer::Status(500));
        assert_eq!(e.retry(t), RetryAnswer::Status(500));
        assert_eq!(e.retry(t), RetryAnswer::Echo);
        assert_eq!(e.retry(t), RetryAnswer::Echo);
        // Another uuid is counted apart.
        let u = "/retry/x?succeedAfter=1&uuid=b&responseCode=503";
        assert_eq!(e.retry(u), RetryAnswer::Status(503));
        assert_eq!(e.retry(u), RetryAnswer::Echo);
    }

    #[test]
    fn without_a_response_code_a_failed_attempt_closes_the_connection() {
        let e = echo();
        assert_eq!(
            e.retry("/retry/x?succeedAfter=1&uuid=c"),
            RetryAnswer::Close
        );
        assert_eq!(e.retry("/retry/x?succeedAfter=1&uuid=c"), RetryAnswer::Echo);
    }

    #[test]
    fn uuid_and_succeed_after_are_required() {
        let e = echo();
        assert_eq!(
            e.retry("/retry/x?succeedAfter=1"),
            RetryAnswer::Bad("uuid is required")
        );
        assert_eq!(
            e.retry("/retry/x?uuid=d&succeedAfter=two"),
            RetryAnswer::Bad("succeedAfter is required")
        );
    }
}

#[cfg(test)]
mod dns_tests {
    use super::dns_reply;

    /// A query for foo.bar.com. A (id 0x1234, RD).
    fn query() -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in ["foo", "bar", "com"] {
            q.push(l.len() as u8);
            q.extend_from_slice(l.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        q
    }

    #[test]
    fn a_query_gets_a_response_with_its_id_and_question() {
        let q = query();
        let r = dns_reply(&q).unwrap();
        assert_eq!(&r[..2], &[0x12, 0x34]);
        assert_eq!(r[2], 0x81, "QR and RD");
        assert_eq!(r[3] & 0x0f, 0, "NOERROR");
        assert_eq!(&r[4..12], &[0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&r[12..], &q[12..]);
    }

    #[test]
    fn a_malformed_query_gets_formerr_and_a_short_or_response_datagram_nothing() {
        let mut q = query();
        q.truncate(q.len() - 2);
        let r = dns_reply(&q).unwrap();
        assert_eq!((r.len(), r[3] & 0x0f), (12, 1));
        assert!(dns_reply(&q[..8]).is_none());
        let mut resp = query();
        resp[2] |= 0x80;
        assert!(dns_reply(&resp).is_none());
    }
}
