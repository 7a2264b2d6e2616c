//! What every write to the API server shares: the field manager, the write timeout (one
//! wrapper, [`timed`]), reading an error's HTTP code ([`api_code`]), describing it in one
//! line ([`describe`]), its bounded metric label ([`code_label`]) and the failed-write
//! counter ([`WriteFailures`]).
//!
//! A leaf: nothing here imports another watcher module, so every module that writes
//! (publish_cm, status, events, leader) can use it without importing each other.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::future::Future;
use std::time::Duration;

/// The one field manager of every write the watcher makes.
pub const FIELD_MANAGER: &str = "k8slb-watcher";
/// Every write has this much time before it counts as failed.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A request that did not answer within its time.
#[derive(Debug, thiserror::Error)]
#[error("{what} timed out")]
pub struct TimedOut {
    pub what: String,
}

/// `f` within [`WRITE_TIMEOUT`]; `what` names the request in the error.
pub async fn timed<T>(
    what: impl FnOnce() -> String,
    f: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    timed_for(WRITE_TIMEOUT, what, f).await
}

/// `f` within `limit`; a timeout is a [`kube::Error::Service`] carrying [`TimedOut`]
/// ([`is_timeout`] tells it apart, [`code_label`] labels it `timeout`).
pub async fn timed_for<T>(
    limit: Duration,
    what: impl FnOnce() -> String,
    f: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(kube::Error::Service(Box::new(TimedOut { what: what() }))),
    }
}

/// Whether `e` is a [`timed`] request that ran out of time.
pub fn is_timeout(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Service(inner) if inner.is::<TimedOut>())
}

/// The HTTP status code of an API error, if it is one.
pub fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// `403 Forbidden: configmaps "k8slb-state" is forbidden: ...` for an API error, the error's
/// own line otherwise (transport errors, timeouts).
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() {
                String::new()
            } else {
                format!(" {}", s.reason)
            };
            if s.message.is_empty() {
                format!("{}{reason}", s.code)
            } else {
                format!("{}{reason}: {}", s.code, s.message)
            }
        }
        kube::Error::Service(inner) if inner.is::<TimedOut>() => inner.to_string(),
        other => other.to_string(),
    }
}

/// A bounded label for the failure metric: the HTTP code, `timeout` or `transport`.
pub fn code_label(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.code.to_string(),
        e if is_timeout(e) => "timeout".into(),
        _ => "transport".into(),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteFailureLabels {
    /// `publish`, `status` or `event`.
    pub write: &'static str,
    /// The HTTP code, `timeout` or `transport`: bounded.
    pub code: String,
}

/// `k8slb_watcher_write_failures_total{write, code}`: every failed write attempt (the log
/// says it once a minute, see `failing`).
#[derive(Clone, Debug, Default)]
pub struct WriteFailures(Family<WriteFailureLabels, Counter>);

impl WriteFailures {
    /// The family, to register.
    pub fn family(&self) -> Family<WriteFailureLabels, Counter> {
        self.0.clone()
    }

    /// One failed write of kind `write` with the label `code` (see [`code_label`]).
    pub fn count(&self, write: &'static str, code: String) {
        self.0
            .get_or_create(&WriteFailureLabels { write, code })
            .inc();
    }

    /// The counter's value.
    pub fn get(&self, write: &'static str, code: &str) -> u64 {
        self.0
            .get_or_create(&WriteFailureLabels {
                write,
                code: code.to_string(),
            })
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_error_is_described_by_code_reason_and_message_only() {
        let e = kube::Error::Api(
            kube::core::Status::failure(
                "configmaps \"k8slb-state\" is forbidden: User \"system:serviceaccount:k8slb-system:k8slb-watcher\" cannot patch resource \"configmaps\"",
                "Forbidden",
            )
            .with_code(403)
            .boxed(),
        );
        let d = describe(&e);
        assert_eq!(
            d,
            "403 Forbidden: configmaps \"k8slb-state\" is forbidden: User \"system:serviceaccount:k8slb-system:k8slb-watcher\" cannot patch resource \"configmaps\""
        );
        assert!(!d.contains("Status {"), "{d}");
        assert_eq!(code_label(&e), "403");
        assert_eq!(api_code(&e), Some(403));
    }

    #[tokio::test]
    async fn a_request_past_its_time_is_a_timeout_labelled_timeout() {
        let never = std::future::pending::<Result<(), kube::Error>>();
        let e = timed_for(
            Duration::from_millis(1),
            || "patching the status of a/b".into(),
            never,
        )
        .await
        .expect_err("times out");
        assert!(is_timeout(&e));
        assert_eq!(code_label(&e), "timeout");
        assert_eq!(describe(&e), "patching the status of a/b timed out");
        assert_eq!(api_code(&e), None);
        let other = kube::Error::Service("connection refused".into());
        assert!(!is_timeout(&other));
        assert_eq!(code_label(&other), "transport");
    }
}
