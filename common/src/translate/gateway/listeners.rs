//! A Gateway's listeners: protocol, hostname, the route kinds and namespaces they take,
//! and the certificates of HTTPS listeners and of TLS listeners that terminate.

use super::*;
use crate::translate::refs::{self, SecretRefError, SecretRefs};

impl Lst<'_> {
    pub(super) fn served(&self) -> bool {
        self.protocol.is_some() || self.stream.is_some()
    }

    /// Refused after it was read, for its TLS mode on a port where another Gateway's
    /// listener holds the other (`why`): its outcome conditions replaced.
    pub(super) fn refuse_mode(&mut self, why: String) {
        let reason = ConditionReason::ProtocolConflict;
        self.conditions.retain(|c| {
            !matches!(
                c.type_,
                ConditionType::Accepted | ConditionType::Programmed | ConditionType::Conflicted
            )
        });
        self.conditions
            .push(Condition::accepted(false, reason, why.clone()));
        self.conditions
            .push(Condition::new(ConditionType::Conflicted, true, reason, why));
        self.conditions.push(Condition::new(
            ConditionType::Programmed,
            false,
            reason,
            "the listener is not served",
        ));
        (self.protocol, self.stream, self.tls) = (None, None, None);
    }

    /// Its protocol is refused (`UnsupportedProtocol`), or for TLS its mode (neither
    /// `Passthrough` nor `Terminate`, or both on one port of a Gateway: `Accepted:
    /// False`, `ProtocolConflict`): no route attaches to it at all and it lists no kinds
    /// (the suite's TLSRouteListenerMixedTerminationNotSupported; another reason not to
    /// serve it, a certificate say, still lets routes attach).
    pub(super) fn protocol_refused(&self) -> bool {
        (self.spec.protocol == "TLS" && tls_mode(self.spec).is_none())
            || self.conditions.iter().any(|c| {
                c.type_ == ConditionType::Accepted
                    && !c.status
                    && (c.reason == ConditionReason::UnsupportedProtocol
                        || (self.set.is_none() && c.reason == ConditionReason::ProtocolConflict))
            })
    }
}

/// What a `TLS` listener does with the TLS it takes (`tls.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TlsMode {
    /// Passed through untouched (`Passthrough`).
    Passthrough,
    /// Terminated by the proxy, the backends get plain TCP (`Terminate`, the
    /// specification's default).
    Terminate,
}

/// A listener's `tls.mode` (`Terminate` when not given, as the specification's
/// default); `None` for a mode that is neither.
pub(super) fn tls_mode(l: &GatewayListener) -> Option<TlsMode> {
    match l.tls.as_ref().and_then(|t| t.mode.as_deref()) {
        None | Some("Terminate") => Some(TlsMode::Terminate),
        Some("Passthrough") => Some(TlsMode::Passthrough),
        Some(_) => None,
    }
}

/// What two listeners on one port must share to be served together: the protocol, and
/// for `TLS` the mode unless the provider serves both modes on one port (`mixed`:
/// TLSRouteModeMixed, both proxies); else such listeners are `ProtocolConflict`.
pub(super) fn port_protocol(l: &GatewayListener, mixed: bool) -> String {
    match (l.protocol.as_str(), tls_mode(l)) {
        ("TLS", Some(_)) if mixed => "TLS".to_string(),
        ("TLS", Some(TlsMode::Passthrough)) => "TLS/Passthrough".to_string(),
        ("TLS", Some(TlsMode::Terminate)) => "TLS/Terminate".to_string(),
        (p, _) => p.to_string(),
    }
}

/// The route kind a listener protocol takes.
pub(super) fn kind_for(protocol: &str) -> &'static [&'static str] {
    match protocol {
        "HTTP" | "HTTPS" => &["HTTPRoute", grpc::KIND],
        "TLS" => &["TLSRoute"],
        "TCP" => &["TCPRoute"],
        "UDP" => &["UDPRoute"],
        _ => &[],
    }
}

/// One listener of one Gateway, as far as routes attach to it.
pub(super) struct Lst<'a> {
    /// The Gateway it is served on.
    pub(super) gateway: ObjectKey,
    /// The ListenerSet that declared it (`None`: the Gateway did).
    pub(super) set: Option<ObjectKey>,
    pub(super) spec: &'a GatewayListener,
    pub(super) hostname: Option<Hostname>,
    pub(super) protocol: Option<ListenerProtocol>,
    /// Set for a served TCP, UDP or TLS listener.
    pub(super) stream: Option<StreamProtocol>,
    /// The certificates of an HTTPS listener, or of a TLS listener that terminates.
    pub(super) tls: Option<ListenerTls>,
    /// The CA bundle its clients' certificates are checked against (`spec.tls.frontend`).
    pub(super) client_ca: Option<frontend_tls::ClientCa>,
    /// The route namespaces it allows (`allowedRoutes.namespaces`).
    pub(super) from: RoutesFrom<'a>,
    /// The route kinds it takes: its protocol's, as far as `allowedRoutes.kinds` allows.
    pub(super) kinds: Vec<&'static str>,
    pub(super) attached: u32,
    pub(super) conditions: Vec<Condition>,
    /// What is served but deserves a word (a certificate whose names do not cover the
    /// listener's hostname): problems on the Gateway, no condition changes.
    pub(super) warnings: Vec<String>,
}

/// The namespaces a listener takes routes from.
pub(super) enum RoutesFrom<'a> {
    /// `Same`: the Gateway's.
    Same(String),
    All,
    /// `Selector`: those whose labels it selects.
    Selector(&'a LabelSelector),
    /// A selector that cannot be evaluated, or an unknown `from`: none.
    Nothing,
}

/// Who declared a listener: a Gateway, or a ListenerSet attached to it (whose namespace
/// its `Same` routes, its certificates and its ReferenceGrants are of).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Owner {
    pub(super) gateway: ObjectKey,
    pub(super) set: Option<ObjectKey>,
}

impl Owner {
    /// The namespace its listeners' references are from.
    pub(super) fn namespace(&self) -> &str {
        self.set
            .as_ref()
            .unwrap_or(&self.gateway)
            .namespace
            .as_str()
    }

    /// Its kind, as a ReferenceGrant's `from` names it.
    pub(super) fn kind(&self) -> &'static str {
        if self.set.is_some() {
            "ListenerSet"
        } else {
            "Gateway"
        }
    }

    /// The object its listeners' problems (a certificate) are about.
    pub(super) fn obj_ref(&self) -> ObjRef {
        let k = self.set.as_ref().unwrap_or(&self.gateway);
        let (namespace, name) = (k.namespace.to_string(), k.name.to_string());
        if self.set.is_some() {
            ObjRef::ListenerSet { namespace, name }
        } else {
            ObjRef::Gateway { namespace, name }
        }
    }
}

/// Why a listener is refused before anything else is read of it (its port or
/// hostname taken, the sets' budget spent): `reason`, what its conditions say (`None`:
/// the generic words for a listener that takes precedence), and whether it says so in
/// `Conflicted` as well.
#[derive(Debug, Clone)]
pub(super) struct Conflict {
    pub(super) reason: ConditionReason,
    pub(super) why: Option<String>,
    pub(super) conflicted: bool,
    /// A Gateway's listener says so in `Accepted: False` as well (a set's always does).
    pub(super) accepted: bool,
}

/// One listener of `owner` with its conditions: `conflict` when it shares its port with
/// a listener that takes precedence, `client_ca` the Gateway's client certificate
/// validation for its port.
pub(super) fn listener<'a>(
    (input, secrets): (&GatewayInput<'_>, &SecretRefs<'_>),
    owner: &Owner,
    l: &'a GatewayListener,
    conflict: Option<Conflict>,
    client_ca: Result<Option<frontend_tls::ClientCa>, (ConditionReason, String)>,
) -> Lst<'a> {
    let mut v = Verdict::default();
    (v.protocol, v.stream) = protocols(input, l, &mut v.conditions);
    let hostname = listener_hostname(l, &mut v);
    if let Some(c) = conflict.filter(|_| v.served()) {
        v.conflict(l, c, owner.set.is_some());
    }
    if let Some(c) = port_unavailable(input, &owner.gateway, l) {
        v.refuse(c);
    }
    let terminates = v.protocol == Some(ListenerProtocol::Https)
        || (v.stream == Some(StreamProtocol::Tls) && tls_mode(l) == Some(TlsMode::Terminate));
    if let Some(why) = refused_tls(l, terminates).filter(|_| v.served()) {
        v.refuse(Condition::accepted(
            false,
            ConditionReason::UnsupportedValue,
            why,
        ));
    }
    let ca = if v.protocol == Some(ListenerProtocol::Https) {
        v.client_ca(client_ca)
    } else {
        if v.stream == Some(StreamProtocol::Tls) && terminates {
            // The Gateway's client certificate validation for this port is not served
            // on a TLS listener: refused, never served to clients without certificates.
            if !matches!(client_ca, Ok(None)) {
                v.refuse(Condition::accepted(
                    false,
                    ConditionReason::UnsupportedValue,
                    "the Gateway's client certificate validation (spec.tls.frontend) is not served on a TLS listener with tls.mode Terminate: the listener is refused rather than served to clients without certificates",
                ));
            }
        }
        None
    };
    let mut warnings = Vec::new();
    let mut tls = None;
    if terminates && v.served() {
        match tls_of((input, secrets), owner, l, hostname.as_ref(), &mut warnings) {
            Ok(mut t) => {
                t.client_ca = ca.as_ref().map(|c| c.id.clone());
                t.client_validation = ca.as_ref().map(|c| c.mode).unwrap_or_default();
                tls = Some(t)
            }
            Err((reason, why)) => {
                // Nothing served: nothing to warn about either.
                warnings.clear();
                v.refuse(Condition::new(
                    ConditionType::ResolvedRefs,
                    false,
                    reason,
                    why,
                ))
            }
        }
    }
    let from = routes_from(owner.namespace(), l).unwrap_or_else(|why| {
        v.refs(Condition::new(
            ConditionType::ResolvedRefs,
            false,
            ConditionReason::InvalidRouteNamespaces,
            why,
        ));
        RoutesFrom::Nothing
    });
    let (kinds, invalid_kind) = route_kinds(l);
    if let Some(c) = invalid_kind {
        v.refs(c);
    }
    v.finish();
    Lst {
        gateway: owner.gateway.clone(),
        set: owner.set.clone(),
        spec: l,
        hostname,
        protocol: v.protocol,
        stream: v.stream,
        tls,
        client_ca: ca,
        from,
        kinds,
        attached: 0,
        conditions: v.conditions,
        warnings,
    }
}

/// A listener's hostname, if it has a valid one (an invalid one refuses it).
fn listener_hostname(l: &GatewayListener, v: &mut Verdict) -> Option<Hostname> {
    let h = hostname(l.hostname.as_deref()?);
    if h.is_none() {
        v.refuse(Condition::accepted(
            false,
            ConditionReason::UnsupportedValue,
            "invalid hostname",
        ));
    }
    h
}

/// What a listener serves so far, and its conditions: each refusal serves nothing.
#[derive(Default)]
struct Verdict {
    protocol: Option<ListenerProtocol>,
    stream: Option<StreamProtocol>,
    conditions: Vec<Condition>,
    /// The reason of `Programmed: False` when it is not the generic one (a
    /// ListenerSet's conflicted listener says its conflict there too).
    not_programmed: Option<ConditionReason>,
}

impl Verdict {
    fn served(&self) -> bool {
        self.protocol.is_some() || self.stream.is_some()
    }

    /// The listener shares its port with one that takes precedence (or is refused
    /// before it is read, `c`). A ListenerSet's listener says so in its `Accepted`,
    /// `Programmed` and `Conflicted` (the specification's ListenerSet tests); a
    /// Gateway's in `Conflicted`, and in `Accepted` too when `c.accepted` (TLS
    /// listeners of both modes on one port: the suite's
    /// TLSRouteListenerMixedTerminationNotSupported).
    fn conflict(&mut self, l: &GatewayListener, c: Conflict, in_set: bool) {
        let reason = c.reason;
        if !in_set && c.accepted {
            self.conditions.push(Condition::accepted(
                false,
                reason,
                c.why.clone().unwrap_or_else(|| format!(
                    "another TLS listener uses port {} with the other tls.mode: Passthrough and Terminate on one port are not served by this provider",
                    l.port
                )),
            ));
        }
        if in_set {
            self.conditions.push(Condition::accepted(
                false,
                reason,
                c.why.clone().unwrap_or_else(|| {
                    "another listener of the Gateway, or of an older ListenerSet, takes precedence"
                        .into()
                }),
            ));
            self.not_programmed = Some(reason);
        }
        if c.conflicted {
            let mut conflicted = conflicted(l, reason);
            if let Some(why) = c.why {
                conflicted.message = why;
            }
            self.refuse(conflicted);
        } else {
            (self.protocol, self.stream) = (None, None);
        }
    }

    /// An HTTPS listener's client certificate validation (the Gateway's, for its port),
    /// or the refusal it makes.
    fn client_ca(
        &mut self,
        client_ca: Result<Option<frontend_tls::ClientCa>, (ConditionReason, String)>,
    ) -> Option<frontend_tls::ClientCa> {
        match client_ca {
            Ok(c) => c,
            Err((
                reason @ (ConditionReason::UnsupportedValue | ConditionReason::PortUnavailable),
                why,
            )) => {
                self.refuse(Condition::accepted(false, reason, why));
                None
            }
            Err((reason, why)) => {
                self.refs(Condition::new(
                    ConditionType::ResolvedRefs,
                    false,
                    reason,
                    why.clone(),
                ));
                self.refuse(Condition::accepted(
                    false,
                    ConditionReason::NoValidCACertificate,
                    why,
                ));
                None
            }
        }
    }

    /// `c` says why the listener is not served.
    fn refuse(&mut self, c: Condition) {
        self.conditions.push(c);
        (self.protocol, self.stream) = (None, None);
    }

    /// One ResolvedRefs condition per listener (the API keys conditions by type): the
    /// first problem found says it.
    fn refs(&mut self, c: Condition) {
        if !self
            .conditions
            .iter()
            .any(|c| c.type_ == ConditionType::ResolvedRefs)
        {
            self.conditions.push(c);
        }
    }

    /// The conditions of the outcome: served, ResolvedRefs (unless a problem said it),
    /// Accepted and Programmed; refused, not Programmed either (the spec's listener
    /// conditions come in sets).
    fn finish(&mut self) {
        if self.served() {
            self.refs(Condition::new(
                ConditionType::ResolvedRefs,
                true,
                ConditionReason::ResolvedRefs,
                "every reference resolved",
            ));
            self.conditions.push(Condition::accepted(
                true,
                ConditionReason::Accepted,
                "served",
            ));
            self.conditions.push(Condition::new(
                ConditionType::Programmed,
                true,
                ConditionReason::Programmed,
                "served",
            ));
        } else {
            self.conditions.push(Condition::new(
                ConditionType::Programmed,
                false,
                self.not_programmed
                    .unwrap_or(ConditionReason::ListenerNotServed),
                "the listener is not served",
            ));
        }
    }
}

/// What a listener's protocol serves on this provider (HTTP or HTTPS routes, or a
/// stream), or neither with the condition that says why.
fn protocols(
    input: &GatewayInput<'_>,
    l: &GatewayListener,
    conditions: &mut Vec<Condition>,
) -> (Option<ListenerProtocol>, Option<StreamProtocol>) {
    let mut refuse = |reason: ConditionReason, why: String| {
        conditions.push(Condition::accepted(false, reason, why));
        (None, None)
    };
    let mut unsupported = |why: String| refuse(ConditionReason::UnsupportedProtocol, why);
    match l.protocol.as_str() {
        "HTTP" => (Some(ListenerProtocol::Http), None),
        "HTTPS" => (Some(ListenerProtocol::Https), None),
        "TCP" => (None, Some(StreamProtocol::Tcp)),
        "UDP" if input.serves_udp => (None, Some(StreamProtocol::Udp)),
        "UDP" => {
            unsupported("HAProxy does not proxy UDP: UDP listeners need the nginx provider".into())
        }
        "TLS" if tls_mode(l).is_some() => (None, Some(StreamProtocol::Tls)),
        // The protocol is served, its mode is not: the spec's reason for a TLS mode
        // an implementation does not support.
        "TLS" => refuse(
            ConditionReason::UnsupportedValue,
            "tls.mode must be Passthrough or Terminate".into(),
        ),
        other => unsupported(format!(
            "protocol {} is not served (HTTP, HTTPS, TLS, TCP and UDP are)",
            crate::problem::cut(other, 40)
        )),
    }
}

/// `Conflicted` for a listener that shares its port with another (`reason`).
fn conflicted(l: &GatewayListener, reason: ConditionReason) -> Condition {
    Condition::new(
        ConditionType::Conflicted,
        true,
        reason,
        if reason == ConditionReason::ProtocolConflict {
            format!(
                "another listener uses port {} with another protocol",
                l.port
            )
        } else {
            format!(
                "another {} listener uses port {} (nothing tells their connections apart)",
                l.protocol, l.port
            )
        },
    )
}

/// `PortUnavailable` for a port out of range, or one another tenant of the Gateway's
/// address holds.
fn port_unavailable(
    input: &GatewayInput<'_>,
    gk: &ObjectKey,
    l: &GatewayListener,
) -> Option<Condition> {
    let udp = l.protocol == "UDP";
    if !(1..=65535).contains(&l.port) {
        return Some(Condition::accepted(
            false,
            ConditionReason::PortUnavailable,
            "port out of range",
        ));
    }
    let holder = u16::try_from(l.port)
        .ok()
        .and_then(|p| input.unavailable.get(gk)?.get(&(p, udp)))?;
    Some(Condition::accepted(
        false,
        ConditionReason::PortUnavailable,
        format!(
            "port {}/{} of the Gateway's address is used by {holder}",
            l.port,
            if udp { "UDP" } else { "TCP" }
        ),
    ))
}

/// TLS settings k8slb does not serve: refused, never ignored (a client certificate
/// validation ignored would let in the clients it was written to keep out).
/// `terminates`: an HTTPS listener, or a TLS listener that terminates.
fn refused_tls(l: &GatewayListener, terminates: bool) -> Option<&'static str> {
    let tls_settings = l.tls.as_ref();
    if tls_settings.is_some_and(|t| !t.options.is_empty()) {
        Some("tls.options are not served (k8slb defines none)")
    } else if terminates && tls_settings.is_some_and(|t| t.frontend_validation.is_some()) {
        Some("tls.frontendValidation (the listener's own, before v1.4) is not served: the listener is refused rather than served to clients without certificates; use the Gateway's spec.tls.frontend")
    } else {
        None
    }
}

/// The namespaces a listener takes routes from (`allowedRoutes.namespaces`), or why it
/// takes none.
pub(super) fn routes_from<'a>(
    own_ns: &str,
    l: &'a GatewayListener,
) -> Result<RoutesFrom<'a>, String> {
    let ns = l
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match ns.and_then(|n| n.from.as_deref()).unwrap_or("Same") {
        "Same" => Ok(RoutesFrom::Same(own_ns.to_string())),
        "All" => Ok(RoutesFrom::All),
        "Selector" => match ns.and_then(|n| n.selector.as_ref()) {
            None => Err("allowedRoutes.namespaces.from Selector needs a selector".to_string()),
            Some(sel) => check_selector(sel)
                .map(|()| RoutesFrom::Selector(sel))
                .map_err(|why| format!("{why}: it selects no namespace")),
        },
        other => Err(format!(
            "allowedRoutes.namespaces.from {} is not Same, All or Selector: it allows no namespace",
            crate::problem::cut(other, 40)
        )),
    }
}

/// The route kinds a listener takes (its protocol's, as far as `allowedRoutes.kinds`
/// allows), and `InvalidRouteKinds` for a kind it names that it does not support (the
/// listener still serves the kinds it supports).
pub(super) fn route_kinds(l: &GatewayListener) -> (Vec<&'static str>, Option<Condition>) {
    let allowed_kinds = l.allowed_routes.as_ref().and_then(|a| a.kinds.as_ref());
    let own_kinds = kind_for(&l.protocol);
    let is_own = |k: &types::RouteGroupKind| {
        own_kinds.contains(&k.kind.as_str())
            && k.group.as_deref().unwrap_or(types::GROUP) == types::GROUP
    };
    let kinds: Vec<&'static str> = match allowed_kinds {
        None => own_kinds.to_vec(),
        Some(k) => own_kinds
            .iter()
            .copied()
            .filter(|own| {
                k.iter().any(|k| {
                    k.kind == *own && k.group.as_deref().unwrap_or(types::GROUP) == types::GROUP
                })
            })
            .collect(),
    };
    let invalid = allowed_kinds
        .and_then(|k| k.iter().find(|k| !is_own(k)))
        .map(|other| {
            Condition::new(
                ConditionType::ResolvedRefs,
                false,
                ConditionReason::InvalidRouteKinds,
                format!(
                    "route kind {}/{} is not supported on a {} listener ({} is)",
                    crate::problem::cut(other.group.as_deref().unwrap_or(types::GROUP), 60),
                    crate::problem::cut(&other.kind, 60),
                    crate::problem::cut(&l.protocol, 10),
                    if own_kinds.is_empty() {
                        "none".to_string()
                    } else {
                        own_kinds.join(", ")
                    }
                ),
            )
        });
    (kinds, invalid)
}

/// Adds the TLS of one HTTPS listener to the listener of its address and port, which
/// several Gateway listeners (one per hostname) may share: the certificates are chosen by
/// SNI (one Secret named by two listeners serves both hostnames); the default
/// certificate, for a server name no listener names, is the first of the first listener
/// without a hostname, else of the first listener.
pub(super) fn merge_tls(
    into: &mut Option<ListenerTls>,
    from_any_host: &mut bool,
    t: &ListenerTls,
    any_host: bool,
) {
    let Some(have) = into else {
        *into = Some(t.clone());
        *from_any_host = any_host;
        return;
    };
    for c in &t.certificates {
        match have.certificates.iter_mut().find(|h| h.file == c.file) {
            Some(h) => {
                // A listener without a hostname adds none: it is served as the default.
                h.hosts.extend(c.hosts.iter().cloned());
                h.hosts.sort();
                h.hosts.dedup();
            }
            None => have.certificates.push(c.clone()),
        }
    }
    have.certificates.sort_by(|a, b| a.file.cmp(&b.file));
    if any_host && !*from_any_host {
        have.default_certificate = t.default_certificate.clone();
        *from_any_host = true;
    }
}

/// The TLS of an HTTPS listener (or a TLS listener that terminates): its certificates, chosen by SNI for its `hostname` (any
/// server name when it has none). A certificate whose names do not cover the hostname
/// is served for it all the same, with a word in `warnings` (see [`certificate`]).
pub(super) fn tls_of(
    (input, secrets): (&GatewayInput<'_>, &SecretRefs<'_>),
    owner: &Owner,
    l: &GatewayListener,
    hostname: Option<&Hostname>,
    warnings: &mut Vec<String>,
) -> Result<ListenerTls, (ConditionReason, String)> {
    let needs = || {
        (
            ConditionReason::InvalidCertificateRef,
            format!(
                "{} needs tls.certificateRefs",
                if l.protocol == "TLS" {
                    "a TLS listener with tls.mode Terminate"
                } else {
                    "an HTTPS listener"
                }
            ),
        )
    };
    let Some(t) = &l.tls else {
        return Err(needs());
    };
    if t.mode.as_deref().unwrap_or("Terminate") != "Terminate" {
        return Err((
            ConditionReason::UnsupportedValue,
            "tls.mode Passthrough is served by TLS listeners, not HTTPS".into(),
        ));
    }
    let certificates = t
        .certificate_refs
        .iter()
        .map(|c| certificate(input, secrets, owner, c, hostname, warnings))
        .collect::<Result<Vec<_>, _>>()?;
    if certificates.is_empty() {
        return Err(needs());
    }
    let default_certificate = Some(certificates[0].file.clone());
    Ok(ListenerTls {
        certificates,
        default_certificate,
        client_ca: None,
        client_validation: Default::default(),
        zones: None,
    })
}

/// The certificate of one `certificateRefs` entry of a Gateway's HTTPS listener (its
/// hostname, if it has one), or why it gives none.
///
/// A certificate whose subjectAltName DNS names do not cover the listener's hostname
/// (the suite's `*` and `*.org`, which `certs::covers` never takes as covering) is
/// still served, for exactly that hostname: the specification does not make such a
/// reference invalid, and the SNI filter of the listener's certificate is its hostname
/// (HAProxy's crt-list filter, nginx's `server_name`), never the certificate's names,
/// so it cannot answer another host. The mismatch goes to `warnings` (a
/// `CertificateHostMismatch` problem on the Gateway: an Event and a log line);
/// `ResolvedRefs` stays True. An Ingress's TLS host keeps its stricter rule
/// (`ingress::tls`): there the host is served with the default certificate instead.
fn certificate(
    input: &GatewayInput<'_>,
    secrets: &SecretRefs<'_>,
    owner: &Owner,
    c: &types::ObjectRef,
    hostname: Option<&Hostname>,
    warnings: &mut Vec<String>,
) -> Result<Certificate, (ConditionReason, String)> {
    let own_ns = owner.namespace();
    let ns = c.namespace.as_deref().unwrap_or(own_ns);
    if !c.group.as_deref().unwrap_or("").is_empty()
        || c.kind.as_deref().unwrap_or("Secret") != "Secret"
    {
        return Err((
            ConditionReason::InvalidCertificateRef,
            format!("{} is not a Secret", c.name),
        ));
    }
    // A ListenerSet's references are from its own namespace, granted to ListenerSets
    // (a grant to its Gateway is not inherited).
    if ns != own_ns
        && !refs::granted(
            input.grants,
            (owner.kind(), own_ns),
            ("Secret", ns, &c.name),
        )
    {
        return Err((
            ConditionReason::RefNotPermitted,
            format!(
                "Secret {ns}/{} is in another namespace and no ReferenceGrant allows it",
                c.name
            ),
        ));
    }
    // The same check as an Ingress's (certs::inspect, through SecretMeta): the type,
    // then what both proxies load.
    let invalid = |why: String| (ConditionReason::InvalidCertificateRef, why);
    let (file, s) = secrets.tls(ns, &c.name).map_err(|e| match e {
        // No Secret has an invalid name.
        SecretRefError::InvalidName | SecretRefError::NotFound => {
            invalid(format!("Secret {ns}/{} does not exist", c.name))
        }
        SecretRefError::WrongType(type_) => invalid(format!(
            "Secret {ns}/{} is of type {:?}, not {}",
            c.name,
            type_.chars().take(64).collect::<String>(),
            crate::certs::TLS_SECRET_TYPE
        )),
        SecretRefError::Invalid(refusal) => invalid(format!(
            "Secret {ns}/{} does not hold a certificate and key both proxies load: {refusal}",
            c.name
        )),
    })?;
    // Served for the listener's hostname only, with a warning when its names do not
    // cover it (see above); a listener without a hostname is its port's default.
    if let Some(h) = hostname.filter(|h| !crate::certs::covers(&s.dns_names, h.as_str())) {
        warnings.push(format!(
            "the certificate of Secret {ns}/{} is not for the listener's hostname {h} (its subjectAltName DNS names: {}; the common name is never read)",
            c.name,
            crate::certs::names_list(&s.dns_names)
        ));
    }
    Ok(Certificate {
        file,
        hosts: hostname.into_iter().cloned().collect(),
        owner: Some(owner.obj_ref()),
    })
}
