//! Stream (TCP, UDP, TLS passthrough or terminated) listeners and their routes.

use super::*;

/// An L4 listener's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamProtocol {
    /// Bytes in, bytes out (Gateway API TCPRoute).
    Tcp,
    /// Datagrams (UDPRoute).
    Udp,
    /// TLS routed by the ClientHello's SNI (TLSRoute on a `TLS` listener): passed
    /// through untouched (`tls.mode: Passthrough`), or terminated by the proxy
    /// (`Terminate`: [`StreamListener::terminate`]) and forwarded as plain TCP.
    Tls,
}

impl StreamProtocol {
    /// The transport it holds a port of.
    pub fn is_udp(self) -> bool {
        self == StreamProtocol::Udp
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StreamProtocol::Tcp => "TCP",
            StreamProtocol::Udp => "UDP",
            StreamProtocol::Tls => "TLS",
        }
    }
}

/// An L4 listener: a port of a VIP that forwards connections (or datagrams) whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamListener {
    pub ip: IpAddr,
    pub port: u16,
    pub protocol: StreamProtocol,
    /// TCP and UDP: at most one route, without a host. TLS: in precedence order (exact
    /// server names, then wildcards, longest suffix first, then the one any-name route);
    /// a ClientHello that no route takes (or that is not TLS) is closed.
    pub routes: Vec<StreamRoute>,
    /// TLS only: the proxy terminates TLS with these certificates (chosen by SNI as an
    /// HTTPS listener's are: each for its listener's hostname) and the routes' backends
    /// get plain TCP (`tls.mode: Terminate`). `None`: passed through untouched. A port
    /// of both modes (TLSRouteModeMixed, HAProxy only) terminates and marks the routes
    /// it passes through ([`StreamRoute::passthrough`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate: Option<ListenerTls>,
}

impl StreamListener {
    /// A TLS port of both modes (TLSRouteModeMixed): it terminates, and some of its
    /// routes are passed through ([`StreamRoute::passthrough`]).
    pub fn is_mixed(&self) -> bool {
        self.terminate.is_some() && self.routes.iter().any(|r| r.passthrough)
    }

    /// Two listeners that cannot share one address: the same port on the same transport.
    pub fn clashes(&self, other: &StreamListener) -> bool {
        self.ip == other.ip
            && self.port == other.port
            && self.protocol.is_udp() == other.protocol.is_udp()
    }

    /// See [`HttpRoutes::route_stream`].
    pub fn route_for(&self, server_name: Option<&str>) -> Option<&StreamRoute> {
        if self.protocol != StreamProtocol::Tls {
            return self.routes.first();
        }
        let sn = server_name.map(str::to_ascii_lowercase);
        self.routes.iter().find(|r| match (&r.host, &sn) {
            (None, _) => true,
            (Some(h), Some(sn)) => {
                if h.is_wildcard() {
                    h.matches_any_depth(sn)
                } else {
                    h.as_str() == sn
                }
            }
            (Some(_), None) => false,
        })
    }

    /// Sort the routes by precedence (see [`StreamListener::routes`]).
    pub fn sort_routes(&mut self) {
        self.routes.sort_by(|a, b| {
            let rank = |r: &StreamRoute| match &r.host {
                Some(h) if !h.is_wildcard() => (0, 0),
                Some(h) => (1, usize::MAX - h.as_str().len()),
                None => (2, 0),
            };
            rank(a).cmp(&rank(b)).then_with(|| {
                a.host
                    .as_ref()
                    .map(Hostname::as_str)
                    .cmp(&b.host.as_ref().map(Hostname::as_str))
            })
        });
    }
}

/// Where an L4 listener sends what it takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRoute {
    /// TLS only: the server name (SNI) it takes; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Hostname>,
    /// Weighted backends (in [`HttpRoutes::backends`], or [`HttpRoutes::udp_backends`]
    /// for UDP). Empty: every backend is invalid or has weight 0, the connection is
    /// closed (the L4 analogue of the HTTPRoute's 500).
    pub backends: Vec<WeightedBackend>,
    /// The summed weight of the route's invalid backend references: that share of the
    /// connections is closed; the others reach theirs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub invalid: u16,
    /// The object that produced it (an Ingress, HTTPRoute, TLSRoute, TCPRoute, UDPRoute
    /// or Gateway): what the actor's quarantine removes when the proxy refuses a config
    /// because of it. Absent in states of older watchers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<ObjRef>,
    /// TLS on a listener that terminates ([`StreamListener::terminate`]): this route's
    /// connections are passed through untouched all the same (a `tls.mode: Passthrough`
    /// listener's route on a port that also has `Terminate` listeners:
    /// TLSRouteModeMixed). The port then routes by the ClientHello's server name, and
    /// only the other routes' connections are terminated. Always false on a listener
    /// that does not terminate (all of its routes are passed through).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub passthrough: bool,
}

impl StreamRoute {
    /// Drawn at random among two or more targets (backends, or one backend and the
    /// invalid share).
    pub fn is_split(&self) -> bool {
        is_split(&self.backends, self.invalid)
    }
}

/// Weighted backends and an invalid share are drawn at random among two or more targets.
pub(super) fn is_split(backends: &[WeightedBackend], invalid: u16) -> bool {
    backends.len() >= 2 || (invalid > 0 && !backends.is_empty())
}

/// Blank what of a forward's weights is not structure (a provider that draws a split
/// from a map sets them at run time): a split's weights and its invalid share go to 0; a
/// single backend keeps whether its weight, and the invalid share, are 0 (which decide
/// between a direct forward, a split and a refusal).
pub fn blank_weights(backends: &mut [WeightedBackend], invalid: &mut u16) {
    let split = is_split(backends, *invalid);
    for b in backends.iter_mut() {
        b.weight = if split { 0 } else { b.weight.min(1) };
    }
    *invalid = if backends.len() >= 2 {
        0
    } else {
        (*invalid).min(1)
    };
}
