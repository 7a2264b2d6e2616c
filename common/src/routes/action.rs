//! What a matched rule does: forward to weighted backends, redirect, or answer a fixed
//! status.

use super::*;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum RouteAction {
    /// To the backends, split by weight (a backend of weight 0 gets nothing).
    Forward {
        backends: Vec<WeightedBackend>,
        /// The summed weight of the rule's backend references that are invalid (a
        /// Service that does not exist, a reference not granted): that share of the
        /// requests gets 500, as the Gateway API says; the others still reach theirs.
        #[serde(default, skip_serializing_if = "is_zero")]
        invalid: u16,
    },
    Redirect(Redirect),
    /// Answer with a fixed status: what a rule whose backend does not exist gets.
    Respond {
        status: FixedStatus,
    },
}

impl RouteAction {
    /// Forward everything to one backend.
    pub fn forward(id: BackendId) -> RouteAction {
        RouteAction::Forward {
            backends: vec![WeightedBackend {
                id,
                weight: 1,
                request_headers: HeaderEdits::default(),
                client_certificate: None,
            }],
            invalid: 0,
        }
    }

    /// A forward drawn at random among two or more targets (backends, or one backend
    /// and the invalid share's 500).
    pub fn is_split(&self) -> bool {
        matches!(self, RouteAction::Forward { backends, invalid } if is_split(backends, *invalid))
    }
}

pub(super) fn is_zero(n: &u16) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WeightedBackend {
    pub id: BackendId,
    pub weight: u16,
    /// What a request forwarded to this backend gets changed, after the rule's own
    /// edits (Gateway API `backendRefs[].filters` RequestHeaderModifier). The
    /// translation keeps its names apart from the rule's, and a backend at most once per
    /// rule when it has edits.
    #[serde(default, skip_serializing_if = "HeaderEdits::is_empty")]
    pub request_headers: HeaderEdits,
    /// The certificate (and key) the proxy presents to this backend's endpoints in its
    /// TLS handshake: the Gateway's `spec.tls.backend.clientCertificateRef`, on the
    /// backends of its rules that are reached over TLS ([`BackendState::tls`]) and only
    /// there. Per rule, not per backend: the same Service port reached through another
    /// Gateway, or an Ingress, presents nothing (the certificate is that Gateway's
    /// owner's identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<CertFile>,
}

/// A redirect; each absent part is kept from the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Redirect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<Scheme>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Hostname>,
    /// `None`: with a `scheme`, that scheme's well-known port; without, the listener's
    /// (Gateway API `RequestRedirect.port`). See [`Redirect::location_port`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Replaces the whole path (the query is kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpPath>,
    /// Replaces the rule's matched prefix, keeping the rest of the path and the query
    /// (Gateway API `ReplacePrefixMatch`; always [`PathRewrite::Prefix`]). Exclusive
    /// with `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix: Option<PathRewrite>,
    pub status: RedirectStatus,
}

impl Redirect {
    /// The scheme of the Location a request to a listener of `listener` scheme gets.
    pub fn location_scheme(&self, listener: Scheme) -> Scheme {
        self.scheme.unwrap_or(listener)
    }

    /// The port written in the Location (`None`: none, the scheme's well-known one), for
    /// a request to a listener of scheme `listener` on `listener_port`: the redirect's
    /// port, else with a scheme that scheme's well-known port, else the listener's; a
    /// port well known for the Location's scheme (80 for http, 443 for https) is not
    /// written (the Gateway API's rules).
    pub fn location_port(&self, listener: Scheme, listener_port: u16) -> Option<u16> {
        let scheme = self.location_scheme(listener);
        let port = match (self.port, self.scheme) {
            (Some(p), _) => p,
            (None, Some(s)) => s.default_port(),
            (None, None) => listener_port,
        };
        (port != scheme.default_port()).then_some(port)
    }

    /// The reference Location for a request (host without port, raw path, query without
    /// `?`, empty when none) to a listener of `listener` scheme on `listener_port`.
    pub fn location(
        &self,
        listener: Scheme,
        listener_port: u16,
        host: &str,
        path: &str,
        query: &str,
    ) -> String {
        let scheme = self.location_scheme(listener);
        let host = self
            .host
            .as_ref()
            .filter(|h| !h.is_wildcard())
            .map_or(host, Hostname::as_str);
        let port = self
            .location_port(listener, listener_port)
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        let path = match (&self.path, &self.replace_prefix) {
            (Some(p), _) => p.to_string(),
            (None, Some(r)) => r.apply(path),
            (None, None) => path.to_string(),
        };
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!("{}://{host}{port}{path}{query}", scheme.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// A redirect status code (the ones HAProxy's `redirect code` and nginx's `return` take).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub enum RedirectStatus {
    MovedPermanently301,
    Found302,
    SeeOther303,
    TemporaryRedirect307,
    PermanentRedirect308,
}

impl RedirectStatus {
    pub fn code(self) -> u16 {
        match self {
            RedirectStatus::MovedPermanently301 => 301,
            RedirectStatus::Found302 => 302,
            RedirectStatus::SeeOther303 => 303,
            RedirectStatus::TemporaryRedirect307 => 307,
            RedirectStatus::PermanentRedirect308 => 308,
        }
    }
}

impl TryFrom<u16> for RedirectStatus {
    type Error = String;
    fn try_from(c: u16) -> Result<Self, String> {
        Ok(match c {
            301 => RedirectStatus::MovedPermanently301,
            302 => RedirectStatus::Found302,
            303 => RedirectStatus::SeeOther303,
            307 => RedirectStatus::TemporaryRedirect307,
            308 => RedirectStatus::PermanentRedirect308,
            _ => {
                return Err(format!(
                    "redirect status {c} is not 301, 302, 303, 307 or 308"
                ))
            }
        })
    }
}

impl From<RedirectStatus> for u16 {
    fn from(s: RedirectStatus) -> u16 {
        s.code()
    }
}

/// A fixed answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub enum FixedStatus {
    NotFound404,
    InternalServerError500,
    ServiceUnavailable503,
}

impl FixedStatus {
    pub fn code(self) -> u16 {
        match self {
            FixedStatus::NotFound404 => 404,
            FixedStatus::InternalServerError500 => 500,
            FixedStatus::ServiceUnavailable503 => 503,
        }
    }
}

impl TryFrom<u16> for FixedStatus {
    type Error = String;
    fn try_from(c: u16) -> Result<Self, String> {
        Ok(match c {
            404 => FixedStatus::NotFound404,
            500 => FixedStatus::InternalServerError500,
            503 => FixedStatus::ServiceUnavailable503,
            _ => return Err(format!("fixed status {c} is not 404, 500 or 503")),
        })
    }
}

impl From<FixedStatus> for u16 {
    fn from(s: FixedStatus) -> u16 {
        s.code()
    }
}
