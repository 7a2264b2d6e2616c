//! Problems: what went wrong, on which object, as data. Part of the published state, the
//! source of the watcher's Events and of its `problems` metric.
//!
//! Both the reason and the object are typed, and each serialises to exactly the string the
//! state has always carried (`"reason": "PortConflict"`, `"object": "Service default/web"`),
//! so the published state is unchanged. Their equality and order are those of that string:
//! problems sort as they always did, and a state read back compares equal to the one
//! written.

use crate::names::{NodeName, ServiceKey};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// One thing that went wrong.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Problem {
    /// `"Service <ns>/<name>"`, `"ConfigMap <ns>/<name>"`, `"Node <name>"`, `"Config k8slb"`.
    pub object: ObjRef,
    /// A CamelCase word, usable as an Event reason and a metric label.
    pub reason: Reason,
    pub message: String,
}

impl Problem {
    /// A problem whose message is made [`printable`]: messages quote user strings (a
    /// Gateway API backendRef's name may hold a newline; the CRD sets no pattern), and a
    /// message reaches log lines, Events and status conditions.
    pub fn new(object: ObjRef, reason: Reason, message: impl Into<String>) -> Self {
        Problem {
            object,
            reason,
            message: printable(message.into()),
        }
    }
}

/// `s` with every character that could forge or hide text in a log line, an Event or a
/// terminal escaped (`\n`, `\u{1b}`, `\u{202e}`): control characters, line and paragraph
/// separators, bidirectional and zero-width formatting. Everything else, quotes and
/// backslashes included, stays as it is, so text that was already escaped is unchanged.
pub fn printable(s: String) -> String {
    fn hidden(c: char) -> bool {
        c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}')
    }
    if !s.chars().any(hidden) {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hidden(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

macro_rules! reasons {
    ($( $(#[$doc:meta])* $variant:ident = $text:literal, )*) => {
        /// Why a problem (or an Event) was raised: a fixed set, so a bounded metric label.
        ///
        /// A reason this build does not know (a state written by a newer watcher) is kept
        /// as [`Reason::Other`] with its text, so that reading and writing it back changes
        /// nothing; the plan itself never makes one.
        #[derive(Debug, Clone)]
        pub enum Reason {
            $( $(#[$doc])* $variant, )*
            /// Read from a state, not one of the above.
            Other(String),
        }

        impl Reason {
            /// Every reason the plan and the watcher make.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)*];

            /// The word in the state, the Event and the metric label.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Reason::$variant => $text, )*
                    Reason::Other(s) => s,
                }
            }
        }

        impl FromStr for Reason {
            type Err = std::convert::Infallible;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Ok(match s {
                    $( $text => Reason::$variant, )*
                    other => Reason::Other(other.to_string()),
                })
            }
        }
    };
}

reasons! {
    // Services: the address request.
    /// `loadbalancer/pool` names a pool that does not exist.
    UnknownPool = "UnknownPool",
    /// A requested address does not parse.
    InvalidIp = "InvalidIp",
    /// A requested address is outside the network of the Service's pools.
    IpOutsidePool = "IpOutsidePool",
    /// A requested address is its network's own address or its broadcast.
    IpNotUsable = "IpNotUsable",
    /// A requested address is held from another pool.
    IpInUse = "IpInUse",
    /// No free address is left in the pool's range.
    PoolExhausted = "PoolExhausted",
    /// A shared address already carries the same (protocol, port).
    PortConflict = "PortConflict",
    /// Beyond the admin's quota of the pool (`maxScale`, `addressesPerNamespace`).
    QuotaExceeded = "QuotaExceeded",
    // Services: everything else.
    InvalidName = "InvalidName",
    InvalidAnnotation = "InvalidAnnotation",
    UnknownAnnotation = "UnknownAnnotation",
    UnsupportedAnnotation = "UnsupportedAnnotation",
    UnsupportedProtocol = "UnsupportedProtocol",
    InvalidPort = "InvalidPort",
    /// A port the LB nodes keep for themselves (global config `reservedPorts`).
    PortReserved = "PortReserved",
    DuplicatePort = "DuplicatePort",
    InvalidSourceRange = "InvalidSourceRange",
    DuplicateService = "DuplicateService",
    /// An object that does not decode as its kind (skipped).
    Undecodable = "Undecodable",
    /// More problems on one object than are listed.
    TooManyProblems = "TooManyProblems",
    // The cluster and the config.
    NoLoadBalancerNodes = "NoLoadBalancerNodes",
    VridExhausted = "VridExhausted",
    InvalidConfig = "InvalidConfig",
    // Ingresses (see `ingress`).
    InvalidHost = "InvalidHost",
    InvalidPath = "InvalidPath",
    PathConflict = "PathConflict",
    DefaultBackendConflict = "DefaultBackendConflict",
    CertificateConflict = "CertificateConflict",
    /// A certificate whose subjectAltName DNS names do not cover a host it is named for.
    CertificateHostMismatch = "CertificateHostMismatch",
    StickinessConflict = "StickinessConflict",
    ServiceNotFound = "ServiceNotFound",
    ServicePortNotFound = "ServicePortNotFound",
    UnsupportedBackend = "UnsupportedBackend",
    SecretNotFound = "SecretNotFound",
    SecretWrongType = "SecretWrongType",
    SecretInvalid = "SecretInvalid",
    InvalidPool = "InvalidPool",
    NothingToServe = "NothingToServe",
    DuplicateIngress = "DuplicateIngress",
    /// A host that another namespace owns (see `tenancy`).
    HostConflict = "HostConflict",
    // What an actor reports.
    /// The proxy's own config checker on an LB node refuses the object's part of the
    /// config: the actor leaves it out there and serves the rest (its quarantine).
    ProxyRefused = "ProxyRefused",
    /// A BGP peer answered the node's session with a NOTIFICATION (a wrong AS, ...).
    BgpPeerRefused = "BGPPeerRefused",
    /// A BGP peer's `passwordSecret` is missing or unusable on the node: the peer is
    /// left out of the node's FRR config.
    BgpPasswordUnusable = "BGPPasswordUnusable",
    /// A BGP session that has not come up for a while, the router sending nothing.
    BgpSessionDown = "BGPSessionDown",
    // Gateway API: the specification's condition reasons, for the conditions that say
    // something is not served (see `gateway`).
    InvalidParameters = "InvalidParameters",
    UnsupportedAddress = "UnsupportedAddress",
    PortUnavailable = "PortUnavailable",
    ProtocolConflict = "ProtocolConflict",
    InvalidCertificateRef = "InvalidCertificateRef",
    RefNotPermitted = "RefNotPermitted",
    InvalidKind = "InvalidKind",
    BackendNotFound = "BackendNotFound",
    NoMatchingParent = "NoMatchingParent",
    NotAllowedByListeners = "NotAllowedByListeners",
    NoMatchingListenerHostname = "NoMatchingListenerHostname",
    UnsupportedValue = "UnsupportedValue",
    HostnameConflict = "HostnameConflict",
    InvalidRouteKinds = "InvalidRouteKinds",
    InvalidRouteNamespaces = "InvalidRouteNamespaces",
    /// A Gateway none of whose listeners is valid.
    ListenersNotValid = "ListenersNotValid",
    /// A ListenerSet whose Gateway does not allow it (`spec.allowedListeners`).
    NotAllowed = "NotAllowed",
    /// A ListenerSet whose Gateway is not accepted.
    ParentNotAccepted = "ParentNotAccepted",
    /// A ListenerSet listener beyond `limits.listenerSetListenersPerGateway`.
    TooManyListeners = "TooManyListeners",
    /// A Gateway address asked for that it did not get.
    AddressNotAssigned = "AddressNotAssigned",
    /// A Gateway address asked for that cannot be used (not in a pool, held by another).
    AddressNotUsable = "AddressNotUsable",
    /// A BackendTLSPolicy with `spec.options` (k8slb defines none): refused.
    UnsupportedPolicyOptions = "UnsupportedPolicyOptions",
    /// A BackendTLSPolicy with `validation.wellKnownCACertificates` (not supported):
    /// refused.
    UnsupportedWellKnownCACertificates = "UnsupportedWellKnownCACertificates",
    /// A BackendTLSPolicy with `validation.subjectAltNames` (neither proxy checks a URI
    /// SAN, and nginx verifies only the name it sends as SNI): refused.
    UnsupportedSubjectAltNames = "UnsupportedSubjectAltNames",
    /// A BackendTLSPolicy whose `validation.hostname` is not a DNS name: refused.
    InvalidValidationHostname = "InvalidValidationHostname",
    /// A BackendTLSPolicy whose target an older policy holds.
    Conflicted = "Conflicted",
    /// A BackendTLSPolicy none of whose CA references gives a usable bundle.
    NoValidCACertificate = "NoValidCACertificate",
    /// A BackendTLSPolicy CA reference to a ConfigMap missing or unusable.
    InvalidCACertificateRef = "InvalidCACertificateRef",
    /// A Gateway's client validation CA reference of another kind than ConfigMap.
    InvalidCACertificateKind = "InvalidCACertificateKind",
    /// A Gateway's backend client certificate reference that is not a usable TLS Secret.
    InvalidClientCertificateRef = "InvalidClientCertificateRef",
    // Events that are not problems.
    IpAllocated = "IPAllocated",
    IpReleased = "IPReleased",
    NodeChanged = "NodeChanged",
}

/// The `type` of a Kubernetes Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

impl Reason {
    /// Explains why a Service has no address, or keeps an old one: listed before any
    /// other problem of its object, never hidden by the per-object cap. (An
    /// `InvalidAnnotation` about the address annotations explains it too; the plan marks
    /// those where it makes them, see `plan::problems`.)
    pub fn blocks_allocation(&self) -> bool {
        matches!(
            self,
            Reason::UnknownPool
                | Reason::InvalidIp
                | Reason::IpOutsidePool
                | Reason::IpNotUsable
                | Reason::PoolExhausted
                | Reason::PortConflict
                | Reason::QuotaExceeded
                | Reason::IpInUse
                | Reason::InvalidName
        )
    }

    /// What happened as planned is `Normal`; every problem is a `Warning`.
    pub fn event_type(&self) -> EventType {
        match self {
            Reason::IpAllocated | Reason::IpReleased | Reason::NodeChanged => EventType::Normal,
            _ => EventType::Warning,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for Reason {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}
impl Eq for Reason {}
impl PartialOrd for Reason {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Reason {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}
impl Hash for Reason {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}
impl PartialEq<str> for Reason {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}
impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}
impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(s.parse().unwrap_or_else(|never| match never {}))
    }
}

/// The kind of an object a problem is about, when its name could not be typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Service,
    Node,
    EndpointSlice,
    ConfigMap,
    Ingress,
    IngressClass,
    Secret,
    GatewayClass,
    Gateway,
    HttpRoute,
    GrpcRoute,
    ReferenceGrant,
    /// BackendTLSPolicy (standard channel since v1.4).
    BackendTlsPolicy,
    /// ListenerSet (standard channel since v1.5).
    ListenerSet,
    Namespace,
    /// TLSRoute, TCPRoute, UDPRoute.
    L4Route(crate::names::L4Kind),
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::Node => "Node",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::ConfigMap => "ConfigMap",
            Kind::Ingress => "Ingress",
            Kind::IngressClass => "IngressClass",
            Kind::Secret => "Secret",
            Kind::GatewayClass => "GatewayClass",
            Kind::Gateway => "Gateway",
            Kind::HttpRoute => "HTTPRoute",
            Kind::GrpcRoute => "GRPCRoute",
            Kind::ReferenceGrant => "ReferenceGrant",
            Kind::BackendTlsPolicy => "BackendTLSPolicy",
            Kind::ListenerSet => "ListenerSet",
            Kind::Namespace => "Namespace",
            Kind::L4Route(k) => k.as_str(),
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        [
            Kind::Service,
            Kind::Node,
            Kind::EndpointSlice,
            Kind::ConfigMap,
            Kind::Ingress,
            Kind::IngressClass,
            Kind::Secret,
            Kind::GatewayClass,
            Kind::Gateway,
            Kind::HttpRoute,
            Kind::GrpcRoute,
            Kind::ReferenceGrant,
            Kind::BackendTlsPolicy,
            Kind::ListenerSet,
            Kind::Namespace,
            Kind::L4Route(crate::names::L4Kind::Tls),
            Kind::L4Route(crate::names::L4Kind::Tcp),
            Kind::L4Route(crate::names::L4Kind::Udp),
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// The object a problem is about.
#[derive(Debug, Clone)]
pub enum ObjRef {
    /// `Service <ns>/<name>`.
    Service(ServiceKey),
    /// `Node <name>`.
    Node(NodeName),
    /// `ConfigMap <ns>/<name>` (the global config).
    ConfigMap { namespace: String, name: String },
    /// `Config k8slb`: the configuration as a whole (no single object).
    Config,
    /// `Ingress <ns>/<name>` (both as Kubernetes accepted them, escaped and cut for display).
    Ingress { namespace: String, name: String },
    /// `Gateway <ns>/<name>`.
    Gateway { namespace: String, name: String },
    /// `HTTPRoute <ns>/<name>`.
    HttpRoute { namespace: String, name: String },
    /// `GRPCRoute <ns>/<name>`.
    GrpcRoute { namespace: String, name: String },
    /// `TLSRoute <ns>/<name>`, `TCPRoute ...`, `UDPRoute ...`.
    L4Route {
        kind: crate::names::L4Kind,
        namespace: String,
        name: String,
    },
    /// `GatewayClass <name>`.
    GatewayClass { name: String },
    /// `BackendTLSPolicy <ns>/<name>`.
    BackendTlsPolicy { namespace: String, name: String },
    /// `ListenerSet <ns>/<name>`.
    ListenerSet { namespace: String, name: String },
    /// An object whose name is not a valid name of its kind (or did not decode): `shown`
    /// is the name as printed, escaped and cut. No Event can be about it.
    Unnamed { kind: Kind, shown: String },
    /// Read from a state, not one of the above.
    Other(String),
}

impl ObjRef {
    /// A Service by its raw namespace and name: typed when they are valid, otherwise
    /// `Unnamed` with both escaped and cut to 80 characters.
    pub fn service(namespace: &str, name: &str) -> ObjRef {
        match ServiceKey::new(namespace, name) {
            Ok(key) => ObjRef::Service(key),
            Err(_) => ObjRef::Unnamed {
                kind: Kind::Service,
                shown: format!("{}/{}", cut(namespace, 80), cut(name, 80)),
            },
        }
    }

    /// An object by its kind and its name as printed (`<ns>/<name>` or `<name>`): typed
    /// when the name is valid for the kind.
    pub fn named(kind: Kind, shown: String) -> ObjRef {
        match kind {
            Kind::Service => {
                if let Ok(key) = shown.parse() {
                    return ObjRef::Service(key);
                }
            }
            Kind::Node => {
                if let Ok(n) = shown.parse() {
                    return ObjRef::Node(n);
                }
            }
            Kind::ConfigMap => {
                if let Some((ns, name)) = shown.split_once('/') {
                    return ObjRef::ConfigMap {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                    };
                }
            }
            Kind::Ingress => {
                if let Some((ns, name)) = shown.split_once('/') {
                    return ObjRef::Ingress {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                    };
                }
            }
            Kind::Gateway | Kind::HttpRoute | Kind::GrpcRoute => {
                if let Some((ns, name)) = shown.split_once('/') {
                    let (namespace, name) = (ns.to_string(), name.to_string());
                    return match kind {
                        Kind::Gateway => ObjRef::Gateway { namespace, name },
                        Kind::GrpcRoute => ObjRef::GrpcRoute { namespace, name },
                        _ => ObjRef::HttpRoute { namespace, name },
                    };
                }
            }
            Kind::L4Route(kind) => {
                if let Some((ns, name)) = shown.split_once('/') {
                    return ObjRef::L4Route {
                        kind,
                        namespace: ns.to_string(),
                        name: name.to_string(),
                    };
                }
            }
            Kind::GatewayClass => return ObjRef::GatewayClass { name: shown },
            Kind::BackendTlsPolicy => {
                if let Some((ns, name)) = shown.split_once('/') {
                    return ObjRef::BackendTlsPolicy {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                    };
                }
            }
            Kind::ListenerSet => {
                if let Some((ns, name)) = shown.split_once('/') {
                    return ObjRef::ListenerSet {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                    };
                }
            }
            Kind::EndpointSlice
            | Kind::IngressClass
            | Kind::Secret
            | Kind::ReferenceGrant
            | Kind::Namespace => {}
        }
        ObjRef::Unnamed { kind, shown }
    }

    /// The text in five pieces (unused ones empty): equality, order and hashing follow the
    /// text without building it.
    fn parts(&self) -> [&str; 5] {
        match self {
            ObjRef::Service(k) => ["Service ", k.namespace.as_str(), "/", k.name.as_str(), ""],
            ObjRef::Node(n) => ["Node ", n.as_str(), "", "", ""],
            ObjRef::ConfigMap { namespace, name } => ["ConfigMap ", namespace, "/", name, ""],
            ObjRef::Ingress { namespace, name } => ["Ingress ", namespace, "/", name, ""],
            ObjRef::Gateway { namespace, name } => ["Gateway ", namespace, "/", name, ""],
            ObjRef::HttpRoute { namespace, name } => ["HTTPRoute ", namespace, "/", name, ""],
            ObjRef::GrpcRoute { namespace, name } => ["GRPCRoute ", namespace, "/", name, ""],
            ObjRef::L4Route {
                kind,
                namespace,
                name,
            } => [kind.as_str(), " ", namespace, "/", name],
            ObjRef::GatewayClass { name } => ["GatewayClass ", name, "", "", ""],
            ObjRef::BackendTlsPolicy { namespace, name } => {
                ["BackendTLSPolicy ", namespace, "/", name, ""]
            }
            ObjRef::ListenerSet { namespace, name } => ["ListenerSet ", namespace, "/", name, ""],
            ObjRef::Config => ["Config k8slb", "", "", "", ""],
            ObjRef::Unnamed { kind, shown } => [kind.as_str(), " ", shown, "", ""],
            ObjRef::Other(s) => [s, "", "", "", ""],
        }
    }

    fn bytes(&self) -> impl Iterator<Item = u8> + '_ {
        self.parts().into_iter().flat_map(str::bytes)
    }
}

/// `s` escaped (no raw control character reaches a log line or an Event) and cut.
pub(crate) fn cut(s: &str, max: usize) -> String {
    s.escape_debug().take(max).collect()
}

impl fmt::Display for ObjRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.parts().iter().try_for_each(|p| f.write_str(p))
    }
}

impl FromStr for ObjRef {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "Config k8slb" {
            return Ok(ObjRef::Config);
        }
        let parsed = s
            .split_once(' ')
            .and_then(|(kind, rest)| Some(ObjRef::named(Kind::parse(kind)?, rest.to_string())));
        Ok(parsed.unwrap_or_else(|| ObjRef::Other(s.to_string())))
    }
}

impl PartialEq for ObjRef {
    fn eq(&self, other: &Self) -> bool {
        self.bytes().eq(other.bytes())
    }
}
impl Eq for ObjRef {}
impl PartialOrd for ObjRef {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ObjRef {
    fn cmp(&self, other: &Self) -> Ordering {
        self.bytes().cmp(other.bytes())
    }
}
impl Hash for ObjRef {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.bytes().for_each(|b| state.write_u8(b));
    }
}

impl Serialize for ObjRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> Deserialize<'de> for ObjRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(s.parse().unwrap_or_else(|never| match never {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_reads_back_as_itself() {
        for r in Reason::ALL {
            let back: Reason = r.as_str().parse().unwrap();
            assert!(!matches!(back, Reason::Other(_)), "{r:?}");
            assert_eq!(&back, r);
        }
        assert_eq!(Reason::IpAllocated.as_str(), "IPAllocated");
        assert!(matches!(
            "Newer".parse::<Reason>().unwrap(),
            Reason::Other(_)
        ));
    }

    #[test]
    fn reasons_sort_as_their_text() {
        let mut typed: Vec<Reason> = Reason::ALL.to_vec();
        typed.sort();
        let mut text: Vec<&str> = Reason::ALL.iter().map(Reason::as_str).collect();
        text.sort();
        assert_eq!(typed.iter().map(Reason::as_str).collect::<Vec<_>>(), text);
    }

    #[test]
    fn only_problems_are_warnings() {
        assert_eq!(Reason::IpReleased.event_type(), EventType::Normal);
        assert_eq!(Reason::PortConflict.event_type(), EventType::Warning);
        assert_eq!(Reason::InvalidConfig.event_type(), EventType::Warning);
    }

    #[test]
    fn object_text_round_trips_exactly() {
        for s in [
            "Service default/web",
            "Service Bad\\nNS/x",
            "Service ?",
            "Node lb1",
            "Node Bad Node",
            "ConfigMap k8slb-system/global",
            "Config k8slb",
            "Config other",
            "EndpointSlice ns/s-1",
            "Ingress ns/web",
            "BackendTLSPolicy ns/p",
            "nospace",
            "",
        ] {
            let o: ObjRef = s.parse().unwrap();
            assert_eq!(o.to_string(), s, "{o:?}");
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, serde_json::to_string(s).unwrap());
        }
        assert!(matches!(
            "Service default/web".parse().unwrap(),
            ObjRef::Service(_)
        ));
        assert!(matches!(
            "Node Bad Node".parse().unwrap(),
            ObjRef::Unnamed {
                kind: Kind::Node,
                ..
            }
        ));
    }

    #[test]
    fn objects_sort_as_their_text() {
        let texts = [
            "Config k8slb",
            "ConfigMap a/b",
            "Node lb1",
            "Service a/b",
            "Service a-b/c",
            "Service a/b-c",
            "Service ab/c",
            "Service Z/y",
            "EndpointSlice x",
            "Config",
        ];
        let mut typed: Vec<ObjRef> = texts.iter().map(|s| s.parse().unwrap()).collect();
        typed.sort();
        let mut sorted = texts.to_vec();
        sorted.sort();
        assert_eq!(
            typed.iter().map(ObjRef::to_string).collect::<Vec<_>>(),
            sorted
        );
    }

    #[test]
    fn an_invalid_service_name_is_escaped_and_unnamed() {
        let o = ObjRef::service("default", "bad\nname");
        assert_eq!(o.to_string(), "Service default/bad\\nname");
        assert!(matches!(o, ObjRef::Unnamed { .. }));
        assert!(matches!(
            ObjRef::service("default", "web"),
            ObjRef::Service(_)
        ));
    }

    #[test]
    fn a_problem_message_never_carries_a_raw_control_or_formatting_character() {
        let forged = "web\n2026-11-26T00:00:00Z ERROR k8slb: admin password reset\r\u{1b}[2J\u{202e}x\u{2028}";
        let p = Problem::new(
            ObjRef::Config,
            Reason::BackendNotFound,
            format!("Service default/{forged} does not exist"),
        );
        assert!(
            !p.message.chars().any(|c| c.is_control()),
            "{:?}",
            p.message
        );
        assert!(!p.message.contains('\u{202e}') && !p.message.contains('\u{2028}'));
        assert!(p.message.contains("web\\n2026"), "{}", p.message);
        // Already escaped text, quotes and backslashes are left as they are.
        let quoted = r#"path "/a\"b" is not valid"#;
        assert_eq!(printable(quoted.to_string()), quoted);
    }
}
