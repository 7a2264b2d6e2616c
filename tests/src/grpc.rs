//! A gRPC echo server and client for the tests, and a WebSocket-style upgrade echo.
//!
//! The server answers like the Gateway API conformance suite's gRPC echo server
//! (v1.6.1, `conformance/echo-basic`): the service
//! `gateway_api_conformance.echo_basic.grpcecho.GrpcEcho`, whose `Echo` and `EchoTwo`
//! answer an `EchoResponse` with the request's metadata (every header but the
//! pseudo-headers, one entry per value), its `:authority` and the serving pod's
//! namespace / ingress / service / pod names; `EchoThree` is unimplemented (gRPC status
//! 12). The messages are encoded by hand below with the field numbers of the upstream
//! `grpcecho.proto`:
//!
//! ```text
//! Header        { key = 1; value = 2 }
//! Context       { namespace = 1; ingress = 2; service_name = 3; pod = 4 }
//! Assertions    { fully_qualified_method = 1; repeated Header headers = 2;
//!                 authority = 3; Context context = 4; TLSAssertions tls_assertions = 5 }
//! EchoRequest   { }
//! EchoResponse  { Assertions assertions = 1; EchoRequest request = 2 }
//! ```
//!
//! One method is k8slb's own, for the long-lived stream tests: [`STREAM_METHOD`], a
//! bidirectional stream that sends every message back as it arrives.
//!
//! HTTP/2 comes from the `h2` crate, in cleartext with prior knowledge (h2c), as a gRPC
//! client dials a plaintext port. [`upgrade_backend`] and [`Upgraded`] are the
//! WebSocket pair: an HTTP/1.1 `Upgrade: websocket` handshake answered `101`, then raw
//! bytes echoed both ways (a proxy tunnels whatever follows a 101; the frames are not
//! WebSocket-framed, which no proxy checks).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// The upstream echo service's full name.
pub const SERVICE: &str = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";
/// k8slb's streaming echo (not upstream): every message comes back as it arrives.
pub const STREAM_METHOD: &str = "/k8slb.test.Streamer/Echo";

/// `/<SERVICE>/<method>`.
pub fn method_path(method: &str) -> String {
    format!("/{SERVICE}/{method}")
}

/// The serving pod, as the upstream server reads it from its environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodContext {
    pub namespace: String,
    pub ingress: String,
    pub service_name: String,
    pub pod: String,
}

/// What the echo server saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assertions {
    pub fully_qualified_method: String,
    /// Header name (lowercase) and value, one entry per value, in arrival order.
    pub headers: Vec<(String, String)>,
    pub authority: String,
    pub context: PodContext,
}

impl Assertions {
    /// The values of header `name`.
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// A unary call's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status of the response (200 for any gRPC answer).
    pub http_status: u16,
    /// `grpc-status` (from the trailers, or the headers of a trailers-only answer);
    /// `None` when the answer had none (not a gRPC answer: a proxy's own error page).
    pub grpc_status: Option<u32>,
    /// The decoded `EchoResponse.assertions`, when a message came.
    pub assertions: Option<Assertions>,
}

#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP/2: {0}")]
    H2(#[from] h2::Error),
    #[error("the answer does not decode: {0}")]
    Decode(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("TLS: {0}")]
    Tls(String),
}

// ---------------------------------------------------------------------------------------
// protobuf, the few wire types these messages use: varint (tag) and length-delimited.

fn put_varint(b: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn put_bytes(b: &mut BytesMut, field: u32, v: &[u8]) {
    if v.is_empty() {
        return; // proto3: a default value is not written
    }
    put_varint(b, u64::from(field << 3 | 2));
    put_varint(b, v.len() as u64);
    b.put_slice(v);
}

fn put_message(b: &mut BytesMut, field: u32, m: &BytesMut) {
    put_varint(b, u64::from(field << 3 | 2));
    put_varint(b, m.len() as u64);
    b.put_slice(m);
}

fn get_varint(b: &mut &[u8]) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        if b.is_empty() {
            return Err("truncated varint".into());
        }
        let byte = b.get_u8();
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint too long".into())
}

/// The fields of one message: (field number, bytes) for length-delimited ones; varint
/// fields are skipped (none of these messages has one).
fn fields(mut b: &[u8]) -> Result<Vec<(u32, &[u8])>, String> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let tag = get_varint(&mut b)?;
        let field = u32::try_from(tag >> 3).map_err(|_| "field number too big")?;
        match tag & 7 {
            0 => {
                get_varint(&mut b)?;
            }
            2 => {
                let len = usize::try_from(get_varint(&mut b)?).map_err(|_| "length")?;
                if len > b.len() {
                    return Err(format!("field {field}: {len} bytes, {} left", b.len()));
                }
                out.push((field, &b[..len]));
                b.advance(len);
            }
            w => return Err(format!("field {field}: wire type {w} not expected")),
        }
    }
    Ok(out)
}

fn text(v: &[u8]) -> Result<String, String> {
    String::from_utf8(v.to_vec()).map_err(|e| e.to_string())
}

impl PodContext {
    fn encode(&self) -> BytesMut {
        let mut b = BytesMut::new();
        put_bytes(&mut b, 1, self.namespace.as_bytes());
        put_bytes(&mut b, 2, self.ingress.as_bytes());
        put_bytes(&mut b, 3, self.service_name.as_bytes());
        put_bytes(&mut b, 4, self.pod.as_bytes());
        b
    }
    fn decode(b: &[u8]) -> Result<PodContext, String> {
        let mut c = PodContext::default();
        for (f, v) in fields(b)? {
            match f {
                1 => c.namespace = text(v)?,
                2 => c.ingress = text(v)?,
                3 => c.service_name = text(v)?,
                4 => c.pod = text(v)?,
                _ => {}
            }
        }
        Ok(c)
    }
}

impl Assertions {
    /// The `EchoResponse` carrying these assertions (and an empty `EchoRequest`).
    pub fn encode_response(&self) -> Bytes {
        let mut a = BytesMut::new();
        put_bytes(&mut a, 1, self.fully_qualified_method.as_bytes());
        for (k, v) in &self.headers {
            let mut h = BytesMut::new();
            put_bytes(&mut h, 1, k.as_bytes());
            put_bytes(&mut h, 2, v.as_bytes());
            put_message(&mut a, 2, &h);
        }
        put_bytes(&mut a, 3, self.authority.as_bytes());
        put_message(&mut a, 4, &self.context.encode());
        let mut r = BytesMut::new();
        put_message(&mut r, 1, &a);
        put_message(&mut r, 2, &BytesMut::new());
        r.freeze()
    }

    /// The assertions of an `EchoResponse`.
    pub fn decode_response(b: &[u8]) -> Result<Assertions, String> {
        let mut out = Assertions::default();
        for (f, v) in fields(b)? {
            if f != 1 {
                continue;
            }
            for (f, v) in fields(v)? {
                match f {
                    1 => out.fully_qualified_method = text(v)?,
                    2 => {
                        let (mut k, mut val) = (String::new(), String::new());
                        for (f, v) in fields(v)? {
                            match f {
                                1 => k = text(v)?,
                                2 => val = text(v)?,
                                _ => {}
                            }
                        }
                        out.headers.push((k, val));
                    }
                    3 => out.authority = text(v)?,
                    4 => out.context = PodContext::decode(v)?,
                    _ => {}
                }
            }
        }
        Ok(out)
    }
}

/// One gRPC length-prefixed message: flag 0 (not compressed), 4-byte length, bytes.
pub fn frame(msg: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + msg.len());
    b.put_u8(0);
    b.put_u32(msg.len() as u32);
    b.put_slice(msg);
    b.freeze()
}

/// Takes the complete messages at the front of `buf`.
fn take_messages(buf: &mut BytesMut) -> Vec<Bytes> {
    let mut out = Vec::new();
    while buf.len() >= 5 {
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if buf.len() < 5 + len {
            break;
        }
        buf.advance(5);
        out.push(buf.split_to(len).freeze());
    }
    out
}

// ---------------------------------------------------------------------------------------
// server

/// A running echo server; stopped on drop.
pub struct EchoServer {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub addr: SocketAddr,
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves gRPC (h2c) on `listener` (bound by the caller, in whatever network namespace)
/// on a thread of its own.
pub fn echo_server(listener: TcpListener, ctx: PodContext) -> std::io::Result<EchoServer> {
    let addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).expect("listener");
            let accept = async {
                loop {
                    let Ok((sock, _)) = l.accept().await else {
                        continue;
                    };
                    // As gRPC servers do (Go's default): no Nagle delay between frames.
                    let _ = sock.set_nodelay(true);
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        let Ok(mut conn) = h2::server::handshake(sock).await else {
                            return;
                        };
                        while let Some(Ok((req, respond))) = conn.accept().await {
                            let ctx = ctx.clone();
                            tokio::spawn(async move {
                                let _ = answer(req, respond, &ctx).await;
                            });
                        }
                    });
                }
            };
            tokio::select! {
                _ = accept => {}
                _ = rx => {}
            }
        });
    });
    Ok(EchoServer {
        stop: Some(tx),
        thread: Some(thread),
        addr,
    })
}

fn grpc_headers(status: Option<u32>) -> http::Response<()> {
    let mut b = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc");
    if let Some(s) = status {
        b = b.header("grpc-status", s.to_string());
    }
    b.body(()).expect("response")
}

async fn answer(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    ctx: &PodContext,
) -> Result<(), h2::Error> {
    let path = req.uri().path().to_string();
    let mut headers = Vec::new();
    for (k, v) in req.headers() {
        headers.push((k.as_str().to_string(), v.to_str().unwrap_or("").to_string()));
    }
    // grpc-go's rule (RFC 9113 8.3.1): without `:authority`, `host` is the authority
    // (and no longer a header); nginx's grpc_pass sends `host`.
    let authority = match req.uri().authority() {
        Some(a) => a.to_string(),
        None => match headers.iter().position(|(k, _)| k == "host") {
            Some(i) => headers.remove(i).1,
            None => String::new(),
        },
    };
    let mut body = req.into_body();
    if path == STREAM_METHOD {
        let mut send = respond.send_response(grpc_headers(None), false)?;
        let mut buf = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            buf.extend_from_slice(&chunk);
            for m in take_messages(&mut buf) {
                send.send_data(frame(&m), false)?;
            }
        }
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", http::HeaderValue::from_static("0"));
        return send.send_trailers(t);
    }
    // Read the request (an empty EchoRequest) to its end.
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let method = path.strip_prefix(&format!("/{SERVICE}/"));
    if !matches!(method, Some("Echo" | "EchoTwo")) {
        // UNIMPLEMENTED, trailers-only.
        respond.send_response(grpc_headers(Some(12)), true)?;
        return Ok(());
    }
    let a = Assertions {
        fully_qualified_method: path.clone(),
        headers,
        authority,
        context: ctx.clone(),
    };
    let mut send = respond.send_response(grpc_headers(None), false)?;
    send.send_data(frame(&a.encode_response()), false)?;
    let mut t = http::HeaderMap::new();
    t.insert("grpc-status", http::HeaderValue::from_static("0"));
    send.send_trailers(t)
}

// ---------------------------------------------------------------------------------------
// client

async fn connect(addr: SocketAddr) -> Result<h2::client::SendRequest<Bytes>, GrpcError> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|source| GrpcError::Connect { addr, source })?;
    // As gRPC clients do (Go's default): HEADERS and DATA are not held back by Nagle
    // waiting for the peer's delayed ACK (40 ms a call through nginx otherwise).
    let _ = tcp.set_nodelay(true);
    over(tcp).await
}

/// HTTP/2 over `io` (a TCP or TLS stream).
async fn over<T>(io: T) -> Result<h2::client::SendRequest<Bytes>, GrpcError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (client, conn) = h2::client::handshake(io).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client.ready().await?)
}

/// TLS to `addr` for `server_name`, offering ALPN `h2` only, the server's certificate
/// verified against `ca_pem`; an error when the server did not choose h2.
async fn connect_tls(
    addr: SocketAddr,
    server_name: &str,
    ca_pem: &str,
) -> Result<h2::client::SendRequest<Bytes>, GrpcError> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let tls_err = |e: String| GrpcError::Tls(e);
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(c.map_err(|e| tls_err(e.to_string()))?)
            .map_err(|e| tls_err(e.to_string()))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
        .map_err(|e| tls_err(e.to_string()))?;
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|source| GrpcError::Connect { addr, source })?;
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| tls_err(e.to_string()))?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err(tls_err("the server did not choose ALPN h2".into()));
    }
    over(tls).await
}

fn grpc_request(
    authority: &str,
    path: &str,
    metadata: &[(&str, &str)],
) -> Result<http::Request<()>, GrpcError> {
    let mut b = http::Request::builder()
        .method("POST")
        .uri(format!("http://{authority}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in metadata {
        b = b.header(*k, *v);
    }
    b.body(()).map_err(|e| GrpcError::Decode(e.to_string()))
}

fn status_of(h: &http::HeaderMap) -> Option<u32> {
    h.get("grpc-status")?.to_str().ok()?.parse().ok()
}

/// One unary call of `path` (e.g. [`method_path`]`("Echo")`) on `addr` with `:authority`
/// `authority` and the given metadata, over a new h2c connection.
pub async fn call(
    addr: SocketAddr,
    authority: &str,
    path: &str,
    metadata: &[(&str, &str)],
) -> Result<Reply, GrpcError> {
    unary(connect(addr).await?, authority, path, metadata).await
}

/// [`call`] over TLS (ALPN h2, SNI = `authority`, the certificate verified against
/// `ca_pem`), blocking as [`call_blocking`].
pub fn call_tls_blocking(
    addr: SocketAddr,
    authority: &str,
    path: &str,
    ca_pem: &str,
    timeout: Duration,
) -> Result<Reply, GrpcError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        tokio::time::timeout(timeout, async {
            let client = connect_tls(addr, authority, ca_pem).await?;
            unary(client, authority, path, &[]).await
        })
        .await
        .map_err(|_| GrpcError::Timeout(timeout))?
    })
}

async fn unary(
    mut client: h2::client::SendRequest<Bytes>,
    authority: &str,
    path: &str,
    metadata: &[(&str, &str)],
) -> Result<Reply, GrpcError> {
    let (resp, mut send) = client.send_request(grpc_request(authority, path, metadata)?, false)?;
    send.send_data(frame(&[]), true)?;
    let resp = resp.await?;
    let http_status = resp.status().as_u16();
    let head_status = status_of(resp.headers());
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        buf.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await?;
    let grpc_status = trailers.as_ref().and_then(status_of).or(head_status);
    let assertions = match take_messages(&mut buf).first() {
        Some(m) => Some(Assertions::decode_response(m).map_err(GrpcError::Decode)?),
        None => None,
    };
    Ok(Reply {
        http_status,
        grpc_status,
        assertions,
    })
}

/// [`call`] from a blocking caller (on its own current-thread runtime, so the socket is
/// made in the calling thread's network namespace), given up after `timeout`.
pub fn call_blocking(
    addr: SocketAddr,
    authority: &str,
    path: &str,
    metadata: &[(&str, &str)],
    timeout: Duration,
) -> Result<Reply, GrpcError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        tokio::time::timeout(timeout, call(addr, authority, path, metadata))
            .await
            .map_err(|_| GrpcError::Timeout(timeout))?
    })
}

/// A long-lived [`STREAM_METHOD`] call: each [`GrpcStream::ping`] sends one message and
/// waits for it to come back. Blocking, on a runtime of its own (made in the calling
/// thread, so in its network namespace).
pub struct GrpcStream {
    rt: tokio::runtime::Runtime,
    send: h2::SendStream<Bytes>,
    recv: h2::RecvStream,
    buf: BytesMut,
}

impl GrpcStream {
    pub fn open(addr: SocketAddr, authority: &str, timeout: Duration) -> Result<Self, GrpcError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (send, recv) = rt.block_on(async {
            tokio::time::timeout(timeout, async {
                let mut client = connect(addr).await?;
                let (resp, send) =
                    client.send_request(grpc_request(authority, STREAM_METHOD, &[])?, false)?;
                let resp = resp.await?;
                if resp.status() != 200 {
                    return Err(GrpcError::Decode(format!("HTTP status {}", resp.status())));
                }
                Ok((send, resp.into_body()))
            })
            .await
            .map_err(|_| GrpcError::Timeout(timeout))?
        })?;
        Ok(GrpcStream {
            rt,
            send,
            recv,
            buf: BytesMut::new(),
        })
    }

    /// Sends `msg` and returns what came back (an error when the stream ended or broke,
    /// or nothing came within `timeout`).
    pub fn ping(&mut self, msg: &[u8], timeout: Duration) -> Result<Bytes, GrpcError> {
        self.send.send_data(frame(msg), false)?;
        let (recv, buf) = (&mut self.recv, &mut self.buf);
        self.rt.block_on(async {
            tokio::time::timeout(timeout, async {
                loop {
                    if let Some(m) = take_messages(buf).into_iter().next() {
                        return Ok(m);
                    }
                    match recv.data().await {
                        Some(chunk) => {
                            let chunk = chunk?;
                            let _ = recv.flow_control().release_capacity(chunk.len());
                            buf.extend_from_slice(&chunk);
                        }
                        None => return Err(GrpcError::Decode("the stream ended".into())),
                    }
                }
            })
            .await
            .map_err(|_| GrpcError::Timeout(timeout))?
        })
    }
}

// ---------------------------------------------------------------------------------------
// WebSocket-style upgrade

/// Answers on `listener` (bound by the caller) on threads of its own until the process
/// ends: an `Upgrade: websocket` request gets `101 Switching Protocols` and then every byte
/// echoed; any other request `200` with `backend=<name>\n` as the body.
pub fn upgrade_backend(listener: TcpListener, name: &str) {
    let name: std::sync::Arc<str> = name.into();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(c) = c else { continue };
            let name = name.clone();
            std::thread::spawn(move || {
                let _ = upgrade_conn(c, &name);
            });
        }
    });
}

fn read_head(c: &mut TcpStream) -> std::io::Result<String> {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        if c.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&got).into_owned())
}

fn upgrade_conn(mut c: TcpStream, name: &str) -> std::io::Result<()> {
    let head = read_head(&mut c)?;
    let upgrade = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("upgrade:") && l.contains("websocket")
    });
    if !upgrade {
        // As lab-backend's HTTP answers (what the lab's client reads).
        let body = format!("backend={name}\n");
        return write!(
            c,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
    // The accept key is not computed (no proxy checks it).
    write!(
        c,
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
    )?;
    let mut r = c.try_clone()?;
    std::io::copy(&mut r, &mut c)?;
    Ok(())
}

/// A client connection after a `101`: bytes written come back.
pub struct Upgraded {
    c: TcpStream,
}

impl Upgraded {
    /// Connects to `addr` (in the calling thread's network namespace), sends a WebSocket
    /// handshake for `host` and `path`, and returns the connection if the answer is `101`
    /// (else the answer's status line as the error).
    pub fn open(addr: SocketAddr, host: &str, path: &str) -> Result<Upgraded, String> {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .map_err(|e| e.to_string())?;
        let head = read_head(&mut c).map_err(|e| format!("no answer: {e}"))?;
        let status = head.lines().next().unwrap_or_default().to_string();
        if status.split_whitespace().nth(1) != Some("101") {
            return Err(status);
        }
        Ok(Upgraded { c })
    }

    /// Sends `msg` and reads as many bytes back.
    pub fn ping(&mut self, msg: &[u8], timeout: Duration) -> Result<Vec<u8>, String> {
        self.c
            .set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        self.c.write_all(msg).map_err(|e| e.to_string())?;
        let mut back = vec![0u8; msg.len()];
        self.c.read_exact(&mut back).map_err(|e| e.to_string())?;
        Ok(back)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_response_round_trips_through_the_wire_format() {
        let a = Assertions {
            fully_qualified_method: method_path("Echo"),
            headers: vec![("x-a".into(), "1".into()), ("x-a".into(), "2".into())],
            authority: "grpc.example.com".into(),
            context: PodContext {
                namespace: "gateway-conformance-infra".into(),
                ingress: String::new(),
                service_name: "grpc-infra-backend-v1".into(),
                pod: "grpc-infra-backend-v1-0".into(),
            },
        };
        let b = a.encode_response();
        assert_eq!(Assertions::decode_response(&b).unwrap(), a);
        // Field 1 (assertions), length-delimited: tag 0x0a.
        assert_eq!(b[0], 0x0a);
    }

    #[test]
    fn frames_split_at_message_boundaries() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&frame(b"ab"));
        buf.extend_from_slice(&frame(b""));
        buf.extend_from_slice(&frame(b"xyz")[..4]);
        let got = take_messages(&mut buf);
        assert_eq!(got, vec![Bytes::from_static(b"ab"), Bytes::new()]);
        assert_eq!(buf.len(), 4);
    }

    #[test]
    fn a_call_reaches_the_echo_server_and_echothree_is_unimplemented() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ctx = PodContext {
            pod: "p1".into(),
            ..Default::default()
        };
        let s = echo_server(l, ctx).unwrap();
        let t = Duration::from_secs(5);
        let r = call_blocking(
            s.addr,
            "a.example",
            &method_path("Echo"),
            &[("x-k", "v")],
            t,
        )
        .unwrap();
        assert_eq!(r.grpc_status, Some(0));
        let a = r.assertions.unwrap();
        assert_eq!(a.fully_qualified_method, method_path("Echo"));
        assert_eq!(a.authority, "a.example");
        assert_eq!(a.header("x-k"), vec!["v"]);
        assert_eq!(a.context.pod, "p1");
        let r = call_blocking(s.addr, "a.example", &method_path("EchoThree"), &[], t).unwrap();
        assert_eq!(r.grpc_status, Some(12));
        let mut st = GrpcStream::open(s.addr, "a.example", t).unwrap();
        for i in 0..3u8 {
            assert_eq!(&st.ping(&[i; 3], t).unwrap()[..], &[i; 3]);
        }
    }
}
