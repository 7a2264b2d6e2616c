//! The status the Gateway API objects are told: conditions, listener and Gateway
//! statuses, a route's status per parent.

use super::*;

/// Names written as they are in the Gateway API, one enum each.
/// A variant is written as its name, or as the text after `=` (several variants may
/// share one word of the API and still say apart what they mean to k8slb).
macro_rules! api_names {
    (@text $variant:ident $text:literal) => { $text };
    (@text $variant:ident) => { stringify!($variant) };
    ($(#[$meta:meta])* $name:ident { $($(#[$doc:meta])* $variant:ident $(= $text:literal)?),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $($(#[$doc])* $variant,)*
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// As the API writes it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => api_names!(@text $variant $($text)?),)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

api_names! {
    /// The condition types k8slb writes on Gateway API objects.
    ConditionType {
        Accepted,
        Programmed,
        ResolvedRefs,
        Conflicted,
        /// A Gateway whose client certificate validation lets clients in without a
        /// valid certificate (`AllowInsecureFallback`).
        InsecureFrontendValidationMode,
    }
}

api_names! {
    /// The condition reasons k8slb writes on Gateway API objects (the spec's names).
    ConditionReason {
        Accepted,
        Programmed,
        ResolvedRefs,
        /// A listener's `Programmed: False` beside the condition that refuses it (not a
        /// problem of its own).
        ListenerNotServed = "Invalid",
        /// BackendTLSPolicy `spec.options`: k8slb defines none.
        UnsupportedPolicyOptions = "Invalid",
        /// BackendTLSPolicy `validation.wellKnownCACertificates`: not supported.
        UnsupportedWellKnownCACertificates = "Invalid",
        /// BackendTLSPolicy `validation.subjectAltNames`: not supported.
        UnsupportedSubjectAltNames = "Invalid",
        /// BackendTLSPolicy `validation.hostname` that is not a DNS name.
        InvalidValidationHostname = "Invalid",
        InvalidParameters,
        UnsupportedValue,
        UnsupportedAddress,
        AddressNotAssigned,
        AddressNotUsable,
        ListenersNotValid,
        UnsupportedProtocol,
        PortUnavailable,
        ProtocolConflict,
        HostnameConflict,
        InvalidCertificateRef,
        InvalidRouteKinds,
        InvalidRouteNamespaces,
        RefNotPermitted,
        InvalidKind,
        BackendNotFound,
        NoMatchingParent,
        NotAllowedByListeners,
        NoMatchingListenerHostname,
        /// BackendTLSPolicy: an older policy holds the same target.
        Conflicted,
        /// BackendTLSPolicy: no CA certificate reference gave a usable bundle.
        NoValidCACertificate,
        /// BackendTLSPolicy: a CA reference to a ConfigMap missing or unusable.
        InvalidCACertificateRef,
        /// A listener's client validation CA reference of another kind than ConfigMap.
        InvalidCACertificateKind,
        /// A Gateway's backend client certificate reference (`spec.tls.backend`) that
        /// is not a usable TLS Secret.
        InvalidClientCertificateRef,
        /// A ListenerSet whose Gateway does not allow it.
        NotAllowed,
        /// A ListenerSet whose Gateway is not accepted.
        ParentNotAccepted,
        /// A ListenerSet whose Gateway has no address yet (its `Programmed: False`;
        /// the Gateway's own condition says why).
        ParentNotProgrammed,
        /// A ListenerSet listener beyond `limits.listenerSetListenersPerGateway`.
        TooManyListeners,
        /// `InsecureFrontendValidationMode: True`: a port's client certificate
        /// validation is `AllowInsecureFallback`.
        ConfigurationChanged,
    }
}

impl ConditionReason {
    /// The problem reason of a condition that says something is not served (reported
    /// on its object as an Event); `None` for the success reasons, which are not, and
    /// for [`ConditionReason::ListenerNotServed`], which repeats another.
    pub fn problem(self) -> Option<Reason> {
        use ConditionReason as C;
        Some(match self {
            C::Accepted | C::Programmed | C::ResolvedRefs => return None,
            // Another condition of the listener says why.
            C::ListenerNotServed => return None,
            C::UnsupportedPolicyOptions => Reason::UnsupportedPolicyOptions,
            C::UnsupportedWellKnownCACertificates => Reason::UnsupportedWellKnownCACertificates,
            C::UnsupportedSubjectAltNames => Reason::UnsupportedSubjectAltNames,
            C::InvalidValidationHostname => Reason::InvalidValidationHostname,
            C::InvalidParameters => Reason::InvalidParameters,
            C::UnsupportedValue => Reason::UnsupportedValue,
            C::UnsupportedAddress => Reason::UnsupportedAddress,
            C::AddressNotAssigned => Reason::AddressNotAssigned,
            C::AddressNotUsable => Reason::AddressNotUsable,
            C::ListenersNotValid => Reason::ListenersNotValid,
            C::UnsupportedProtocol => Reason::UnsupportedProtocol,
            C::PortUnavailable => Reason::PortUnavailable,
            C::ProtocolConflict => Reason::ProtocolConflict,
            C::HostnameConflict => Reason::HostnameConflict,
            C::InvalidCertificateRef => Reason::InvalidCertificateRef,
            C::InvalidRouteKinds => Reason::InvalidRouteKinds,
            C::InvalidRouteNamespaces => Reason::InvalidRouteNamespaces,
            C::RefNotPermitted => Reason::RefNotPermitted,
            C::InvalidKind => Reason::InvalidKind,
            C::BackendNotFound => Reason::BackendNotFound,
            C::NoMatchingParent => Reason::NoMatchingParent,
            C::NotAllowedByListeners => Reason::NotAllowedByListeners,
            C::NoMatchingListenerHostname => Reason::NoMatchingListenerHostname,
            C::Conflicted => Reason::Conflicted,
            C::NoValidCACertificate => Reason::NoValidCACertificate,
            C::InvalidCACertificateRef => Reason::InvalidCACertificateRef,
            C::InvalidCACertificateKind => Reason::InvalidCACertificateKind,
            C::InvalidClientCertificateRef => Reason::InvalidClientCertificateRef,
            C::NotAllowed => Reason::NotAllowed,
            C::ParentNotAccepted => Reason::ParentNotAccepted,
            // The Gateway's own condition says why.
            C::ParentNotProgrammed => return None,
            C::TooManyListeners => Reason::TooManyListeners,
            // Served as asked: the condition itself is the warning.
            C::ConfigurationChanged => return None,
        })
    }
}

/// One status condition, as the API writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub type_: ConditionType,
    pub status: bool,
    pub reason: ConditionReason,
    pub message: String,
}

impl Condition {
    /// `Accepted` with `status` and `reason`.
    pub(super) fn accepted(
        status: bool,
        reason: ConditionReason,
        message: impl Into<String>,
    ) -> Self {
        Self::new(ConditionType::Accepted, status, reason, message)
    }

    pub(super) fn new(
        type_: ConditionType,
        status: bool,
        reason: ConditionReason,
        message: impl Into<String>,
    ) -> Self {
        Condition {
            type_,
            status,
            reason,
            message: crate::problem::printable(message.into()),
        }
    }
}

/// A listener's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerStatus {
    pub name: String,
    pub attached_routes: u32,
    pub supported_kinds: Vec<&'static str>,
    pub conditions: Vec<Condition>,
}

/// A Gateway's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayStatus {
    pub addresses: Vec<IpAddr>,
    pub conditions: Vec<Condition>,
    pub listeners: Vec<ListenerStatus>,
    /// `attachedListenerSets`: the ListenerSets attached and accepted; `None` for a
    /// Gateway without `spec.allowedListeners` (so that a cluster whose CRDs predate
    /// the field, and prune it, does not see a write that never sticks).
    pub attached_listener_sets: Option<u32>,
    /// What is served but deserves a word, as problems on the Gateway (Events and log
    /// lines; no condition says them): a listener's certificate whose names do not
    /// cover its hostname (`CertificateHostMismatch`).
    pub warnings: Vec<(Reason, String)>,
}

/// The kind of a route's parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ParentKind {
    Gateway,
    ListenerSet,
}

impl ParentKind {
    /// As the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ParentKind::Gateway => "Gateway",
            ParentKind::ListenerSet => "ListenerSet",
        }
    }
}

/// An HTTPRoute's status for one parent (a Gateway of ours, or a ListenerSet of one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentStatus {
    pub kind: ParentKind,
    /// The parent's namespace and name.
    pub parent: ObjectKey,
    pub section_name: Option<String>,
    pub port: Option<i32>,
    pub conditions: Vec<Condition>,
}

/// A served Gateway's status: its addresses, `Accepted` (unless it asks for an address
/// type we do not assign) and `Programmed` (once it has the addresses it asked for),
/// and its listeners'.
pub(super) fn gateway_status(
    input: &GatewayInput<'_>,
    g: &Gateway,
    gk: &ObjectKey,
    lsts: &[Lst<'_>],
) -> GatewayStatus {
    let addresses = input.addresses.get(gk).cloned().unwrap_or_default();
    let listeners: Vec<ListenerStatus> = lsts
        .iter()
        .filter(|l| &l.gateway == gk && l.set.is_none())
        .map(listener_status)
        .collect();
    let accepted = gateway_accepted(g, &listeners);
    // spec.addresses: an address asked for that the Gateway did not get (not in a
    // pool, held by another) is not usable.
    let unusable: Vec<&str> = g
        .spec
        .addresses
        .iter()
        .filter(|a| a.type_.as_deref().is_none_or(|t| t == "IPAddress"))
        // Without a value: any address, which the pool gives (unless it has none).
        .filter(|a| !a.value.is_empty())
        .filter(|a| crate::ipam::parse_ip(&a.value).map_or(true, |ip| !addresses.contains(&ip)))
        .map(|a| a.value.as_str())
        .collect();
    let programmed = if let Some(first) = unusable.first() {
        Condition::new(
            ConditionType::Programmed,
            false,
            ConditionReason::AddressNotUsable,
            format!(
                "spec.addresses: {} is not assigned to it (not in a pool, or held by another tenant): see its Events",
                crate::problem::cut(first, 45)
            ),
        )
    } else if addresses.is_empty() {
        Condition::new(
            ConditionType::Programmed,
            false,
            ConditionReason::AddressNotAssigned,
            "no address from the pool yet",
        )
    } else {
        Condition::new(
            ConditionType::Programmed,
            true,
            ConditionReason::Programmed,
            "served on its addresses by the LB nodes",
        )
    };
    let warnings = lsts
        .iter()
        .filter(|l| &l.gateway == gk && l.set.is_none())
        .flat_map(|l| {
            l.warnings.iter().map(|w| {
                (
                    Reason::CertificateHostMismatch,
                    format!("listener {}: {w}", l.spec.name),
                )
            })
        })
        .collect();
    GatewayStatus {
        addresses,
        conditions: vec![accepted, programmed],
        listeners,
        attached_listener_sets: None,
        warnings,
    }
}

/// A Gateway's `Accepted`, from its spec and its own listeners' statuses (its sets'
/// are served only while it is accepted).
pub(super) fn gateway_accepted(g: &Gateway, listeners: &[ListenerStatus]) -> Condition {
    // spec.addresses: a type we do not assign is not accepted.
    let unsupported = g
        .spec
        .addresses
        .iter()
        .find(|a| a.type_.as_deref().is_some_and(|t| t != "IPAddress"));
    let params = g
        .spec
        .infrastructure
        .as_ref()
        .and_then(|i| i.parameters_ref.as_ref());
    match (unsupported, params) {
        (_, Some(p)) => Condition::accepted(false, ConditionReason::InvalidParameters, p.refusal()),
        (Some(a), None) => Condition::accepted(
            false,
            ConditionReason::UnsupportedAddress,
            format!(
                "spec.addresses: type {} is not supported (IPAddress is)",
                crate::problem::cut(a.type_.as_deref().unwrap_or_default(), 40)
            ),
        ),
        // The specification: a Gateway with invalid listeners says ListenersNotValid,
        // not accepted when none of them is (GatewayListenerUnsupportedProtocol).
        (None, None) => listeners_accepted(listeners),
    }
}

/// A Gateway's `Accepted` from its listeners': the specification says
/// `ListenersNotValid` for a Gateway with invalid listeners, not accepted when none of
/// them is (GatewayListenerUnsupportedProtocol).
fn listeners_accepted(listeners: &[ListenerStatus]) -> Condition {
    let refused = listeners
        .iter()
        .filter(|l| {
            l.conditions
                .iter()
                .any(|c| c.type_ == ConditionType::Accepted && !c.status)
        })
        .count();
    match refused {
        0 => Condition::accepted(true, ConditionReason::Accepted, "k8slb serves this Gateway"),
        n if n == listeners.len() => Condition::accepted(
            false,
            ConditionReason::ListenersNotValid,
            "no listener of this Gateway is valid",
        ),
        n => Condition::accepted(
            true,
            ConditionReason::ListenersNotValid,
            format!("{n} of its {} listeners are not valid", listeners.len()),
        ),
    }
}

/// A listener's status.
pub(super) fn listener_status(l: &Lst<'_>) -> ListenerStatus {
    ListenerStatus {
        name: l.spec.name.clone(),
        attached_routes: l.attached,
        // The kinds its protocol and allowedRoutes take, also while it is not served for
        // another reason than its protocol (a certificate problem: the suite's
        // GatewayInvalidTLSConfiguration); none for a protocol refused
        // (GatewayListenerUnsupportedProtocol).
        supported_kinds: if l.protocol_refused() {
            vec![]
        } else {
            l.kinds.clone()
        },
        conditions: l.conditions.clone(),
    }
}
