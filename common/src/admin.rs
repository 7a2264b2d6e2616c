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

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::future::Future;
use std::net::SocketAddr;
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
            assert!(
                tokio::net::TcpStream::connect(addr).await.is_err(),
                "still listening after the stop"
            );
        }
    }
}
