//! The protocol a proxy speaks to a backend, from a Service port's `appProtocol`.
//!
//! Kubernetes names three standard values (KEP-3726, and the Gateway API's backend
//! protocol feature, GEP-1911): `kubernetes.io/h2c` (HTTP/2 over cleartext, prior
//! knowledge: what gRPC servers listen with), `kubernetes.io/ws` (WebSocket over
//! cleartext) and `kubernetes.io/wss` (WebSocket over TLS). Other values are
//! implementation-specific names (`http`, `grpc`, `tcp`, ...): k8slb reads them as it
//! always did, HTTP/1.1, and so does an absent `appProtocol`.
//!
//! - [`BackendProtocol::Http`]: HTTP/1.1 (a WebSocket upgrade passes through it on both
//!   proxies, so `kubernetes.io/ws` is the same);
//! - [`BackendProtocol::H2c`]: HAProxy's servers get `proto h2`; nginx forwards with
//!   `grpc_pass grpc://`.
//!
//! `kubernetes.io/wss` needs TLS to the backend, which the route model has no setting
//! for: it is refused ([`AppProtocolError`]), never served as cleartext.

use serde::{Deserialize, Serialize};

pub const H2C: &str = "kubernetes.io/h2c";
pub const WS: &str = "kubernetes.io/ws";
pub const WSS: &str = "kubernetes.io/wss";

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendProtocol {
    /// HTTP/1.1 (and WebSocket upgrades on it).
    #[default]
    Http,
    /// HTTP/2 in cleartext, prior knowledge (gRPC).
    H2c,
}

impl BackendProtocol {
    pub fn is_http(&self) -> bool {
        *self == BackendProtocol::Http
    }

    /// What a Service port's `appProtocol` asks for.
    pub fn from_app_protocol(app: Option<&str>) -> Result<BackendProtocol, AppProtocolError> {
        match app {
            Some(H2C) => Ok(BackendProtocol::H2c),
            Some(WSS) => Err(AppProtocolError::Wss),
            // kubernetes.io/ws, implementation-specific names, none.
            _ => Ok(BackendProtocol::Http),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppProtocolError {
    #[error("appProtocol {WSS} (WebSocket over TLS to the backend) is not supported: k8slb speaks cleartext to route backends")]
    Wss,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_h2c_changes_the_backend_protocol_and_wss_is_refused() {
        let p = BackendProtocol::from_app_protocol;
        assert_eq!(p(Some(H2C)), Ok(BackendProtocol::H2c));
        for http in [None, Some(WS), Some("http"), Some("grpc"), Some("h2c")] {
            assert_eq!(p(http), Ok(BackendProtocol::Http), "{http:?}");
        }
        assert_eq!(p(Some(WSS)), Err(AppProtocolError::Wss));
    }

    #[test]
    fn http_is_the_default_and_h2c_serialises_lowercase() {
        assert_eq!(BackendProtocol::default(), BackendProtocol::Http);
        assert_eq!(
            serde_json::to_string(&BackendProtocol::H2c).unwrap(),
            "\"h2c\""
        );
    }
}
