//! The admin HTTP server of both binaries (feature `admin`): `/livez`, `/readyz` and
//! `/metrics` on one port, with graceful shutdown.
//!
//! The server part lives here once: listener, routing, status codes, content types, the
//! shutdown and the log lines. What the answers say is each binary's own: it implements
//! [`Admin`] (the watcher's readiness is about publishing, the actor's about its daemons;
//! each has its own metric families).
//!
//! - `/livez`, `/readyz`: `200 OK` or `503 Service Unavailable`, `text/plain;
//!   charset=utf-8`, the body ends with a newline;
//! - `/metrics`: `200 OK`, OpenMetrics text ([`OPENMETRICS`]);
//! - any other path: `404 Not Found`.
//!
//! **Never on a VIP.** Both binaries may listen on `0.0.0.0` of an LB node's host network,
//! where the VIPs are local addresses too: a connection made to an address that
//! [`Admin::answers_on`] refuses (a VIP) is closed unanswered, so no tenant's client
//! reaches `/metrics` through a Service's address.

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The content type of `/metrics` (prometheus-client's text encoding).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The answer of a probe: `200` when `ok`, else `503`, with `body` as plain text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub ok: bool,
    pub body: String,
}

impl Probe {
    pub fn ok(body: impl Into<String>) -> Self {
        Probe {
            ok: true,
            body: body.into(),
        }
    }

    pub fn failing(body: impl Into<String>) -> Self {
        Probe {
            ok: false,
            body: body.into(),
        }
    }
}

impl IntoResponse for Probe {
    fn into_response(self) -> axum::response::Response {
        let code = if self.ok {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (code, self.body).into_response()
    }
}

/// What one binary answers on its admin port.
pub trait Admin: Send + Sync + 'static {
    /// `/livez`: is the process doing its work at all (a failing answer restarts it).
    fn livez(&self) -> Probe;
    /// `/readyz`: does it do its job now, and why (not).
    fn readyz(&self) -> Probe;
    /// `/metrics`: the OpenMetrics text of its registry.
    fn metrics(&self) -> String;
    /// Whether a connection made to the local address `local` is answered at all (a VIP
    /// is not: the connection is closed). Default: every address.
    fn answers_on(&self, local: IpAddr) -> bool {
        let _ = local;
        true
    }
}

/// The admin listener: connections to an address the [`Admin`] refuses are closed as
/// they are accepted.
struct Guarded {
    inner: tokio::net::TcpListener,
    admin: Arc<dyn Admin>,
}

impl axum::serve::Listener for Guarded {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (io, peer) = axum::serve::Listener::accept(&mut self.inner).await;
            match io.local_addr() {
                Ok(local) if self.admin.answers_on(canonical(local.ip())) => return (io, peer),
                _ => drop(io),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// `::ffff:a.b.c.d` (an IPv4 client of a dual-stack listener) as `a.b.c.d`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The routes of the admin port, answered by `admin`.
pub fn router(admin: Arc<dyn Admin>) -> Router {
    let (live, ready, metrics) = (admin.clone(), admin.clone(), admin);
    Router::new()
        .route("/livez", get(move || async move { live.livez() }))
        .route("/readyz", get(move || async move { ready.readyz() }))
        .route(
            "/metrics",
            get(move || async move { ([(header::CONTENT_TYPE, OPENMETRICS)], metrics.metrics()) }),
        )
}

/// Bind `addr` (port 0 picks one) and serve `admin` on it in a task until `shutdown`
/// resolves; open connections then finish their request. Returns the bound address and
/// the task, which logs it if the server fails.
pub async fn start(
    addr: SocketAddr,
    admin: Arc<dyn Admin>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tracing::info!(addr = %local, "admin server listening");
    let listener = Guarded {
        inner: listener,
        admin: admin.clone(),
    };
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, router(admin))
            .with_graceful_shutdown(shutdown)
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, addr = %local, "admin server failed");
        }
    });
    Ok((local, task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Fixed {
        ready: bool,
    }

    /// Answers on every local address but `refused`.
    struct NotOn(IpAddr);

    impl Admin for NotOn {
        fn livez(&self) -> Probe {
            Probe::ok("ok\n")
        }
        fn readyz(&self) -> Probe {
            Probe::ok("ok\n")
        }
        fn metrics(&self) -> String {
            "# EOF\n".into()
        }
        fn answers_on(&self, local: IpAddr) -> bool {
            local != self.0
        }
    }

    /// A connection to a refused local address (a VIP) is closed unanswered; the
    /// others are served, on the same listener.
    #[tokio::test]
    async fn a_refused_local_address_gets_no_answer_and_the_others_do() {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (addr, task) = start(
            "0.0.0.0:0".parse().unwrap(),
            Arc::new(NotOn("127.0.0.2".parse().unwrap())),
            async {
                let _ = stop_rx.await;
            },
        )
        .await
        .expect("bind");
        let on = |ip: &str| SocketAddr::new(ip.parse().unwrap(), addr.port());
        let (head, body) = get(on("127.0.0.1"), "/metrics").await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert_eq!(body, "# EOF\n");
        let mut s = tokio::net::TcpStream::connect(on("127.0.0.2"))
            .await
            .expect("the kernel accepts the connection");
        let _ = s
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        assert!(
            out.is_empty(),
            "answered on a refused address: {:?}",
            String::from_utf8_lossy(&out)
        );
        stop_tx.send(()).unwrap();
        task.await.unwrap();
    }

    impl Admin for Fixed {
        fn livez(&self) -> Probe {
            Probe::ok("ok\n")
        }
        fn readyz(&self) -> Probe {
            if self.ready {
                Probe::ok("ready\n")
            } else {
                Probe::failing("not ready: because\n")
            }
        }
        fn metrics(&self) -> String {
            "# EOF\n".into()
        }
    }

    /// The raw response head and body of `GET path`.
    async fn get(addr: SocketAddr, path: &str) -> (String, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        let (head, body) = out.split_once("\r\n\r\n").expect("a response");
        (head.to_ascii_lowercase(), body.to_string())
    }

    #[tokio::test]
    async fn routes_codes_and_content_types_then_a_graceful_stop() {
        for ready in [true, false] {
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let (addr, task) = start(
                "127.0.0.1:0".parse().unwrap(),
                Arc::new(Fixed { ready }),
                async {
                    let _ = stop_rx.await;
                },
            )
            .await
            .expect("bind");

            let (head, body) = get(addr, "/livez").await;
            assert!(head.starts_with("http/1.1 200"), "{head}");
            assert!(
                head.contains("content-type: text/plain; charset=utf-8"),
                "{head}"
            );
            assert_eq!(body, "ok\n");

            let (head, body) = get(addr, "/readyz").await;
            let code = if ready { "200" } else { "503" };
            assert!(head.starts_with(&format!("http/1.1 {code}")), "{head}");
            assert!(
                head.contains("content-type: text/plain; charset=utf-8"),
                "{head}"
            );
            assert_eq!(
                body,
                if ready {
                    "ready\n"
                } else {
                    "not ready: because\n"
                }
            );

            let (head, body) = get(addr, "/metrics").await;
            assert!(head.starts_with("http/1.1 200"), "{head}");
            assert!(
                head.contains(&format!("content-type: {OPENMETRICS}")),
                "{head}"
            );
            assert_eq!(body, "# EOF\n");

            let (head, _) = get(addr, "/nothing").await;
            assert!(head.starts_with("http/1.1 404"), "{head}");

            stop_tx.send(()).expect("the server waits for its stop");
            task.await.expect("the server task ends after the stop");
            // A child another test forks (openssl) holds a copy of every descriptor
            // until its exec closes them: the listening socket may outlive the server
            // for that long. It must be gone soon after.
            let mut closed = false;
            for _ in 0..200 {
                if tokio::net::TcpStream::connect(addr).await.is_err() {
                    closed = true;
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(closed, "still listening 2 s after the stop");
        }
    }
}
