//! The L7 route model: what an HTTP(S) proxy on a VIP must do, independent of where it
//! came from (an Ingress, or a Gateway API HTTPRoute, TLSRoute, TCPRoute or UDPRoute) and
//! of who serves it (HAProxy, nginx). Sources translate into it ([`crate::ingress`],
//! [`crate::gateway`]); the actor renders it.
//!
//! ```text
//! HttpRoutes
//!  ├─ listeners: (ip, port) → HTTP | HTTPS (TLS: certificates chosen by SNI + a default)
//!  │    └─ virtual hosts, in precedence order: exact hosts, then `*.` wildcards, then any
//!  │         └─ rules, in precedence order: matches → action
//!  │              (forward to weighted backends | redirect | fixed status)
//!  │    └─ default action (no virtual host, or no rule of the matched host, matched)
//!  ├─ backends: BackendId (`<namespace>/<service>:<port>`) → endpoints, stickiness
//!  ├─ streams: (ip, port) → TCP | UDP | TLS passthrough (L4: Gateway API TCP, UDP and
//!  │    TLS listeners) → routes (TLS: by SNI, in precedence order) → weighted backends
//!  └─ udp_backends: the backends of UDP streams (a Service's UDP port), as `backends`
//! ```
//!
//! Decisions:
//! - **Backends are a separate table.** Rules name a [`BackendId`]; the endpoints live in
//!   [`HttpRoutes::backends`]. Endpoint churn changes only that table, which a provider
//!   applies without a reload (HAProxy Runtime API); anything in `listeners` is structural.
//! - **Order is part of the model.** Virtual hosts and rules are stored in the order they
//!   are tried; the first match wins ([`HttpRoutes::route`] is the reference). Sources
//!   sort them by their API's precedence ([`VirtualHost::sort_rules`] implements the
//!   Ingress one); providers render them in that order.
//! - **A host that matches but whose rules do not** gets the listener's default action,
//!   never the rules of a less specific host (what ingress-nginx does, and what the Ingress
//!   API's "default backend" means). A Gateway API source that wants fall-through copies
//!   the less specific rules into the more specific host.
//! - **No key material.** A certificate is a [`CertFile`]: which node-side file holds it.
//! - **Every string is a validated newtype** ([`Hostname`], [`HttpPath`], [`HeaderName`],
//!   [`CookieName`], [`SecretName`]), parsed once at the boundary and trusted afterwards:
//!   none of them can hold whitespace, quotes, braces, `;`, `#`, `$`, `\` or control
//!   characters, so a template may paste them into haproxy.cfg or nginx.conf.
//! - **Deterministic.** Maps are `BTreeMap`s, lists are sorted or in precedence order:
//!   the same input serialises byte-identically.
//!
//! Room for Gateway API: [`RouteMatch`] is a struct so that header, query-parameter and
//! method matches are added as fields (`#[serde(default, skip_serializing_if = ..)]`, an
//! additive schema change); [`RouteAction::Forward`] already carries weights; redirects
//! carry scheme, host, port, path and status. URL rewrite and header modifiers are
//! [`RouteRule::filters`], not new actions.

mod action;
mod cors;
mod listener;
mod names;
mod rule;
mod stream;
#[cfg(test)]
mod tests;

pub use crate::app_protocol::BackendProtocol;
use crate::endpoints::Endpoint;
use crate::names::{err, string_newtype, NameError, ObjectName, PoolName, ServiceKey};
use crate::problem::ObjRef;
pub use action::*;
pub use cors::*;
pub use listener::*;
pub use names::*;
pub use rule::*;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
pub use stream::*;

/// Where a certificate (chain + key) lives on the LB nodes. Never the key itself.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum CertFile {
    /// The pool's admin-provided file, `<certPath>/<pool>.pem` (and `.key` for nginx).
    Pool { pool: PoolName },
    /// A `kubernetes.io/tls` Secret, written by the actor (from what the watcher
    /// publishes) to `<secret cert dir>/<namespace>_<name>.pem` (and `.key`).
    Secret {
        namespace: ObjectName,
        name: SecretName,
        /// Which content: a digest of the certificate chain (public data, never of the
        /// key), so a renewed certificate is a change of the state, and of the configs
        /// that name it. Empty when unknown.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        version: String,
    },
}

impl CertFile {
    /// The content version of a Secret's certificate (empty for a pool's).
    pub fn version(&self) -> &str {
        match self {
            CertFile::Pool { .. } => "",
            CertFile::Secret { version, .. } => version,
        }
    }

    /// The file stem under its directory: `<pool>` or `<namespace>_<name>` (neither part
    /// can hold `_` nor `/`, so distinct Secrets never share a stem).
    pub fn stem(&self) -> String {
        match self {
            CertFile::Pool { pool } => pool.to_string(),
            CertFile::Secret {
                namespace, name, ..
            } => format!("{namespace}_{name}"),
        }
    }
}

/// Everything one VIP (or several, with the same listeners) serves over HTTP(S).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoutes {
    /// Sorted by (ip, port); one per (ip, port).
    pub listeners: Vec<Listener>,
    /// Every backend a rule or a TCP/TLS stream names (a Service's TCP port).
    pub backends: BTreeMap<BackendId, BackendState>,
    /// L4 listeners, sorted by (ip, port, protocol); one per (ip, port, protocol family:
    /// TCP and TLS on one port exclude each other, UDP is apart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamListener>,
    /// The backends of UDP streams: a Service's UDP port, whose endpoints are not its TCP
    /// port's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub udp_backends: BTreeMap<BackendId, BackendState>,
    /// The CA bundles backends verify their endpoints' certificates with
    /// ([`BackendTls::ca`]): [`CaId`] → canonical PEM of checked certificates (public
    /// data; [`crate::certs::ca_bundle`]). The actor writes each as a file staged with
    /// the config that names it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ca_bundles: BTreeMap<CaId, String>,
}

impl HttpRoutes {
    pub fn is_empty(&self) -> bool {
        self.listeners.is_empty()
            && self.backends.is_empty()
            && self.streams.is_empty()
            && self.udp_backends.is_empty()
            && self.ca_bundles.is_empty()
    }

    /// Every certificate the proxy terminates TLS with: the HTTPS listeners' and the
    /// TLS listeners' that terminate (`tls.mode: Terminate`).
    pub fn tls_settings(&self) -> impl Iterator<Item = &ListenerTls> {
        self.listeners
            .iter()
            .filter_map(|l| l.tls.as_ref())
            .chain(self.streams.iter().filter_map(|s| s.terminate.as_ref()))
    }

    /// The reference router for L4: the route a connection to `ip:port` over `protocol`
    /// takes (`server_name`: the TLS ClientHello's SNI, for TLS passthrough).
    pub fn route_stream(
        &self,
        ip: IpAddr,
        port: u16,
        protocol: StreamProtocol,
        server_name: Option<&str>,
    ) -> Option<&StreamRoute> {
        self.streams
            .iter()
            .find(|s| s.ip == ip && s.port == port && s.protocol == protocol)?
            .route_for(server_name)
    }

    /// The reference router: what a request for `host` (any case, with or without
    /// `:port`) and `path` (without the query) to `ip:port` gets. Providers render the
    /// same decisions; the table tests pin them down here.
    pub fn route(&self, ip: IpAddr, port: u16, host: &str, path: &str) -> Option<&RouteAction> {
        self.route_request(ip, port, &Request::get(host, path))
    }

    /// The reference router for a whole request (method, headers, query).
    pub fn route_request(&self, ip: IpAddr, port: u16, req: &Request<'_>) -> Option<&RouteAction> {
        let l = self
            .listeners
            .iter()
            .find(|l| l.ip == ip && l.port == port)?;
        l.route_request(req)
    }

    /// Add another source's routes. Listeners are on distinct (ip, port)s (the allocator
    /// gives each tenant its ports); were one not, the one already here is kept. A
    /// backend both name is one backend (same Service, same port, same endpoints).
    pub fn merge(&mut self, other: HttpRoutes) {
        if other.is_empty() {
            return;
        }
        for l in other.listeners {
            if !self
                .listeners
                .iter()
                .any(|m| m.ip == l.ip && m.port == l.port)
            {
                self.listeners.push(l);
            }
        }
        for (id, b) in other.backends {
            let have = self.backends.entry(id).or_insert_with(|| b.clone());
            // A Service port a BackendTLSPolicy covers is reached over TLS by whichever
            // source names it: never in cleartext because another source named it first.
            if have.tls.is_none() && b.tls.is_some() {
                have.tls = b.tls;
            }
        }
        for s in other.streams {
            if !self.streams.iter().any(|m| m.clashes(&s)) {
                self.streams.push(s);
            }
        }
        for (id, b) in other.udp_backends {
            self.udp_backends.entry(id).or_insert(b);
        }
        // Content-addressed: the same id is the same bytes.
        self.ca_bundles.extend(other.ca_bundles);
        self.normalize();
    }

    /// Sort listeners by (ip, port). Sources call it once after building.
    pub fn normalize(&mut self) {
        self.listeners.sort_by_key(|l| (l.ip, l.port));
        self.streams.sort_by_key(|s| (s.ip, s.port, s.protocol));
    }
}

/// A backend: one port of one Service, `<namespace>/<name>:<port>` (the Service port
/// number, named ports resolved). Stable while the Service and port exist.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendId {
    pub service: ServiceKey,
    pub port: u16,
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.service, self.port)
    }
}

impl FromStr for BackendId {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        let (svc, port) = s
            .rsplit_once(':')
            .ok_or_else(|| err("backend", s, "expected <namespace>/<name>:<port>"))?;
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| err("backend", s, "the port must be 1-65535"))?;
        Ok(BackendId {
            service: svc.parse()?,
            port,
        })
    }
}

impl Serialize for BackendId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BackendId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendState {
    /// Ready endpoints, then terminating ones that still serve (draining); sorted.
    pub endpoints: Vec<Endpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stickiness: Option<Sticky>,
    /// What the proxy speaks to the endpoints (the Service port's `appProtocol`).
    #[serde(default, skip_serializing_if = "BackendProtocol::is_http")]
    pub protocol: BackendProtocol,
    /// TLS to the endpoints, verified (a Gateway API BackendTLSPolicy); `None`: cleartext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<BackendTls>,
}

/// TLS from the proxy to a backend's endpoints, their certificate verified: the chain
/// against a CA bundle, the name against `server_name`, which is also the SNI sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTls {
    /// The SNI, and the DNS name the endpoint's certificate must carry (never a wildcard).
    pub server_name: Hostname,
    /// The CA bundle: a key of [`HttpRoutes::ca_bundles`].
    pub ca: CaId,
}

/// A CA bundle's name: 32 hex digits of the SHA-256 of its canonical PEM. Cryptographic
/// on purpose: bundles of different namespaces share the table, and a tenant must not
/// be able to make its bundle collide with another's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct CaId(String);

impl CaId {
    pub fn of(pem: &str) -> CaId {
        let d = ring::digest::digest(&ring::digest::SHA256, pem.as_bytes());
        CaId(
            d.as_ref()[..16]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        )
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for CaId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(CaId(s))
        } else {
            Err(serde::de::Error::custom(
                "a CA bundle id is 32 lowercase hex digits",
            ))
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Sticky {
    /// Same client address, same endpoint.
    Source,
    /// An inserted cookie names the endpoint.
    Cookie { name: CookieName },
}
