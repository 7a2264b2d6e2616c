//! HTTP and HTTPS listeners: their TLS (certificates by SNI) and virtual hosts.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListenerProtocol {
    Http,
    /// TLS terminated here; `tls` is set.
    Https,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    pub ip: IpAddr,
    pub port: u16,
    pub protocol: ListenerProtocol,
    /// Set iff `protocol` is HTTPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ListenerTls>,
    /// In precedence order: exact hosts, then wildcards, then the one any-host entry
    /// (see [`VirtualHost::precedence`]).
    pub virtual_hosts: Vec<VirtualHost>,
    /// What a request gets when no virtual host, or no rule of its virtual host,
    /// matches. `None`: 404.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_action: Option<RouteAction>,
    /// The object whose default backend `default_action` is (see [`RouteRule::owner`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_owner: Option<ObjRef>,
}

impl Listener {
    /// See [`HttpRoutes::route`].
    pub fn route(&self, host: &str, path: &str) -> Option<&RouteAction> {
        self.route_request(&Request::get(host, path))
    }

    /// See [`HttpRoutes::route_request`].
    pub fn route_request(&self, req: &Request<'_>) -> Option<&RouteAction> {
        match self.rule_for(req) {
            Some(r) => Some(&r.action),
            None => self.default_action.as_ref(),
        }
    }

    /// The rule a request gets (`None`: the listener's default action).
    pub fn rule_for(&self, req: &Request<'_>) -> Option<&RouteRule> {
        let host = host_without_port(req.host).to_ascii_lowercase();
        let vh = self.virtual_hosts.iter().find(|v| v.takes(&host))?;
        vh.rules.iter().find(|r| r.matches.matches_request(req))
    }

    /// Sort the virtual hosts by precedence. Sources call it once after building.
    pub fn sort_virtual_hosts(&mut self) {
        self.virtual_hosts
            .sort_by(|a, b| a.precedence().cmp(&b.precedence()));
    }
}

/// `example.com:8080` → `example.com`; `[2001:db8::1]:80` → `[2001:db8::1]`.
pub(super) fn host_without_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.split_once(']').map_or(h, |(a, _)| &h[..a.len() + 1]);
    }
    h.split_once(':').map_or(h, |(a, _)| a)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerTls {
    /// Chosen by SNI: the first whose `hosts` match the server name. Sorted by file.
    pub certificates: Vec<Certificate>,
    /// For a server name no certificate names (or no SNI at all). `None`: the first of
    /// `certificates`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_certificate: Option<CertFile>,
    /// Clients must present a certificate that chains to this CA bundle (a key of
    /// [`super::HttpRoutes::ca_bundles`]); `None`: no client certificate is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<super::CaId>,
    /// What a client whose certificate is missing or does not chain to `client_ca` gets
    /// (meaningful only with `client_ca`). Left out of the state when it is the default
    /// (`AllowValidOnly`), and read as it when absent: the safe default both ways. A
    /// state of an older watcher has no fallback (it refused the mode); an actor older
    /// than this field ignores it and asks for a valid certificate (`verify required`,
    /// `ssl_verify_client on`): stricter than intended, never more open.
    #[serde(default, skip_serializing_if = "ClientValidationMode::is_default")]
    pub client_validation: ClientValidationMode,
    /// The Gateway API listeners sharing this port, as zones of server names: a request
    /// whose Host is in another zone than the TLS server name it came with is
    /// misdirected (answered `421`). `None` (Ingresses): no such check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<SniZones>,
}

/// How an HTTPS listener with a client CA treats its clients' certificates (a
/// Gateway's `spec.tls.frontend` validation `mode`, GEP-91).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum ClientValidationMode {
    /// Only a client that presents a certificate chaining to the CA is let in.
    #[default]
    AllowValidOnly,
    /// Every client is let in, with a certificate or without, valid or not (as far as
    /// the proxy tolerates: nginx refuses an expired one); the backend is told the
    /// outcome in the [`CLIENT_CERT_VERIFY_HEADER`] and [`CLIENT_CERT_HEADER`] headers.
    AllowInsecureFallback,
}

impl ClientValidationMode {
    pub fn is_default(&self) -> bool {
        *self == Self::AllowValidOnly
    }

    pub fn is_fallback(&self) -> bool {
        *self == Self::AllowInsecureFallback
    }
}

/// The request header that tells a backend reached through an `AllowInsecureFallback`
/// listener what became of the client's certificate: `SUCCESS` (presented and chains to
/// the listener's CA, valid), `NONE` (none presented) or `FAILED` (presented, not valid:
/// another CA, self-signed, expired). Every HTTP listener of both proxies deletes a
/// copy a client sends, so a backend can trust it.
pub const CLIENT_CERT_VERIFY_HEADER: &str = "K8slb-Client-Cert-Verify";

/// The request header that carries the certificate a client presented on an
/// `AllowInsecureFallback` listener (absent when none): its PEM, URL-encoded
/// (percent-encoding; nginx's `$ssl_client_escaped_cert`). Deleted from clients'
/// requests on every HTTP listener, as [`CLIENT_CERT_VERIFY_HEADER`].
pub const CLIENT_CERT_HEADER: &str = "K8slb-Client-Cert";

/// The hostnames of the Gateway API HTTPS listeners that share one port, each a zone of
/// server names: a name is in the zone of the listener whose hostname matches it most
/// specifically (an exact hostname, else the longest wildcard suffix, at any depth, as
/// the Gateway API matches them), else in the zone of a listener without a hostname
/// (`any`), else in none. TLS picks a listener's certificate by the server name (SNI),
/// and an HTTP/2 client reuses a connection for every name its certificate covers
/// (RFC 9113 §9.1.1), so a request may come with a Host of another listener than the
/// one its connection was made for: such a request is misdirected, answered `421`
/// (RFC 9110 §15.5.20), never routed by its Host (the Gateway API's
/// GatewayHTTPSListenerDetectMisdirectedRequests). A request without SNI is not checked.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SniZones {
    /// The listeners' hostnames, sorted, without duplicates.
    pub hostnames: Vec<Hostname>,
    /// A listener without a hostname shares the port.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any: bool,
}

impl SniZones {
    /// The zone of the (lowercase, port-less) `name`: `h<i>` for `hostnames[i]`, `any`,
    /// or `none`. Zone names are `[a-z0-9]+`.
    pub fn zone(&self, name: &str) -> String {
        let name = name.trim_end_matches('.');
        if let Some(i) = self
            .hostnames
            .iter()
            .position(|h| !h.is_wildcard() && h.as_str() == name)
        {
            return format!("h{i}");
        }
        let wildcard = self
            .hostnames
            .iter()
            .enumerate()
            .filter(|(_, h)| h.is_wildcard() && h.matches_any_depth(name))
            .max_by_key(|(_, h)| h.as_str().len());
        match wildcard {
            Some((i, _)) => format!("h{i}"),
            None => self.default_zone().to_string(),
        }
    }

    /// The zone of the names no hostname matches.
    pub fn default_zone(&self) -> &'static str {
        if self.any {
            "any"
        } else {
            "none"
        }
    }

    /// Is a request with TLS server name `sni` (none: no SNI) and Host `host` (any case,
    /// with or without a port) misdirected?
    pub fn misdirected(&self, sni: Option<&str>, host: &str) -> bool {
        let Some(sni) = sni else { return false };
        let host = host_without_port(host).to_ascii_lowercase();
        self.zone(&sni.to_ascii_lowercase()) != self.zone(&host)
    }

    /// Whether any request can be misdirected: more than one zone.
    pub fn splits(&self) -> bool {
        !self.hostnames.is_empty()
    }

    /// The zones' hostnames in the order a first-match lookup must try them: exact
    /// names, then wildcards by longest suffix (each with its zone).
    pub fn lookup_order(&self) -> Vec<(String, &Hostname)> {
        let mut v: Vec<(String, &Hostname)> = self
            .hostnames
            .iter()
            .enumerate()
            .map(|(i, h)| (format!("h{i}"), h))
            .collect();
        v.sort_by_key(|(_, h)| (h.is_wildcard(), std::cmp::Reverse(h.as_str().len())));
        v
    }
}

impl ListenerTls {
    /// The certificate a TLS client asking for `server_name` gets (exact names before
    /// wildcards, then the default).
    pub fn certificate_for(&self, server_name: &str) -> Option<&CertFile> {
        let sn = server_name.to_ascii_lowercase();
        let by = |wild: bool| {
            self.certificates
                .iter()
                .find(|c| {
                    c.hosts
                        .iter()
                        .any(|h| h.is_wildcard() == wild && h.matches(&sn))
                })
                .map(|c| &c.file)
        };
        by(false)
            .or_else(|| by(true))
            .or(self.default_certificate.as_ref())
            .or_else(|| self.certificates.first().map(|c| &c.file))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Certificate {
    pub file: CertFile,
    /// The server names (SNI) this certificate is used for; sorted.
    pub hosts: Vec<Hostname>,
    /// The object that produced it (an Ingress, HTTPRoute, TLSRoute, TCPRoute, UDPRoute
    /// or Gateway): what the actor's quarantine removes when the proxy refuses a config
    /// because of it. Absent in states of older watchers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<ObjRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualHost {
    /// `None`: any host (the rules of Ingress rules without `host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Hostname>,
    /// For a wildcard host: it matches any number of labels before its suffix (the
    /// Gateway API's `*.example.com` matches `a.example.com` and `a.b.example.com`), not
    /// exactly one (the Ingress API's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_depth: bool,
    /// In precedence order; the first that matches wins.
    pub rules: Vec<RouteRule>,
}

impl VirtualHost {
    /// A virtual host whose wildcard (if any) matches one label.
    pub fn new(host: Option<Hostname>, rules: Vec<RouteRule>) -> VirtualHost {
        VirtualHost {
            host,
            any_depth: false,
            rules,
        }
    }

    /// Does it take a request for `host` (lowercase, without its port)?
    pub fn takes(&self, host: &str) -> bool {
        match &self.host {
            None => true,
            Some(h) if self.any_depth => h.matches_any_depth(host),
            Some(h) => h.matches(host),
        }
    }

    /// Sort key: exact hosts (by name), one-label wildcards (by name), any-depth
    /// wildcards (the longest suffix first: `*.b.example.com` before `*.example.com`),
    /// then any.
    pub fn precedence(&self) -> (u8, std::cmp::Reverse<usize>, Option<&str>) {
        use std::cmp::Reverse;
        match &self.host {
            Some(h) if !h.is_wildcard() => (0, Reverse(0), Some(h.as_str())),
            Some(h) if !self.any_depth => (1, Reverse(0), Some(h.as_str())),
            Some(h) => (2, Reverse(h.as_str().len()), Some(h.as_str())),
            None => (3, Reverse(0), None),
        }
    }

    /// Sort the rules by the Ingress API's precedence: Exact paths first, then Prefix
    /// paths longest first (ties by path, for determinism). For the paths one request
    /// can match this is the API's "longest matching path, then Exact over Prefix".
    pub fn sort_rules(&mut self) {
        self.rules
            .sort_by(|a, b| a.matches.precedence().cmp(&b.matches.precedence()));
    }
}
