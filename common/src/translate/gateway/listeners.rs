//! A Gateway's listeners: protocol, hostname, the route kinds and namespaces they take,
//! and the certificates of HTTPS listeners.

use super::*;

impl Lst<'_> {
    pub(super) fn served(&self) -> bool {
        self.protocol.is_some() || self.stream.is_some()
    }
}

/// The route kind a listener protocol takes.
pub(super) fn kind_for(protocol: &str) -> Option<&'static str> {
    match protocol {
        "HTTP" | "HTTPS" => Some("HTTPRoute"),
        "TLS" => Some("TLSRoute"),
        "TCP" => Some("TCPRoute"),
        "UDP" => Some("UDPRoute"),
        _ => None,
    }
}

/// One listener of one Gateway, as far as routes attach to it.
pub(super) struct Lst<'a> {
    pub(super) gateway: ObjectKey,
    pub(super) spec: &'a GatewayListener,
    pub(super) hostname: Option<Hostname>,
    pub(super) protocol: Option<ListenerProtocol>,
    /// Set for a served TCP, UDP or TLS (passthrough) listener.
    pub(super) stream: Option<StreamProtocol>,
    pub(super) tls: Option<ListenerTls>,
    /// The route namespaces it allows (`allowedRoutes.namespaces`).
    pub(super) from: RoutesFrom<'a>,
    /// The route kinds it takes: its protocol's, as far as `allowedRoutes.kinds` allows.
    pub(super) kinds: Vec<&'static str>,
    pub(super) attached: u32,
    pub(super) conditions: Vec<Condition>,
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

pub(super) fn listener<'a>(
    input: &GatewayInput<'_>,
    gk: &ObjectKey,
    l: &'a GatewayListener,
    conflict: Option<&'static str>,
    frontend_tls: bool,
) -> Lst<'a> {
    let mut conditions = Vec::new();
    let mut unsupported = |why: String| {
        conditions.push(Condition::new(
            "Accepted",
            false,
            "UnsupportedProtocol",
            why,
        ));
    };
    let passthrough = l
        .tls
        .as_ref()
        .and_then(|t| t.mode.as_deref())
        .is_some_and(|m| m == "Passthrough");
    let (mut protocol, mut stream) = match l.protocol.as_str() {
        "HTTP" => (Some(ListenerProtocol::Http), None),
        "HTTPS" => (Some(ListenerProtocol::Https), None),
        "TCP" => (None, Some(StreamProtocol::Tcp)),
        "UDP" if input.serves_udp => (None, Some(StreamProtocol::Udp)),
        "UDP" => {
            unsupported("HAProxy does not proxy UDP: UDP listeners need the nginx provider".into());
            (None, None)
        }
        "TLS" if passthrough => (None, Some(StreamProtocol::Tls)),
        "TLS" => {
            unsupported(
                "a TLS listener is served with tls.mode Passthrough (to terminate TLS, use HTTPS)"
                    .into(),
            );
            (None, None)
        }
        other => {
            unsupported(format!(
                "protocol {} is not served (HTTP, HTTPS, TLS, TCP and UDP are)",
                crate::problem::cut(other, 40)
            ));
            (None, None)
        }
    };
    let hostname = match &l.hostname {
        None => None,
        Some(h) => match hostname(h) {
            Some(h) => Some(h),
            None => {
                conditions.push(Condition::new(
                    "Accepted",
                    false,
                    "UnsupportedValue",
                    "invalid hostname",
                ));
                (protocol, stream) = (None, None);
                None
            }
        },
    };
    let served =
        |p: &Option<ListenerProtocol>, s: &Option<StreamProtocol>| p.is_some() || s.is_some();
    if let Some(reason) = conflict.filter(|_| served(&protocol, &stream)) {
        conditions.push(Condition::new(
            "Conflicted",
            true,
            reason,
            if reason == "ProtocolConflict" {
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
        ));
        (protocol, stream) = (None, None);
    }
    let udp = l.protocol == "UDP";
    if !(1..=65535).contains(&l.port) {
        conditions.push(Condition::new(
            "Accepted",
            false,
            "PortUnavailable",
            "port out of range",
        ));
        (protocol, stream) = (None, None);
    } else if let Some(holder) = u16::try_from(l.port)
        .ok()
        .and_then(|p| input.unavailable.get(gk)?.get(&(p, udp)))
    {
        conditions.push(Condition::new(
            "Accepted",
            false,
            "PortUnavailable",
            format!(
                "port {}/{} of the Gateway's address is used by {holder}",
                l.port,
                if udp { "UDP" } else { "TCP" }
            ),
        ));
        (protocol, stream) = (None, None);
    }
    // TLS settings k8slb does not serve: refused, never ignored (a client certificate
    // validation ignored would let in the clients it was written to keep out).
    let tls_settings = l.tls.as_ref();
    let refused_tls = if tls_settings.is_some_and(|t| !t.options.is_empty()) {
        Some("tls.options are not served (k8slb defines none)")
    } else if protocol == Some(ListenerProtocol::Https)
        && (frontend_tls || tls_settings.is_some_and(|t| t.frontend_validation.is_some()))
    {
        Some("client certificate validation (tls.frontendValidation, spec.tls.frontend) is not served: the listener is refused rather than served to clients without certificates")
    } else {
        None
    };
    if let (Some(why), true) = (refused_tls, served(&protocol, &stream)) {
        conditions.push(Condition::new("Accepted", false, "UnsupportedValue", why));
        (protocol, stream) = (None, None);
    }
    let mut tls = None;
    if protocol == Some(ListenerProtocol::Https) {
        match tls_of(input, gk, l, hostname.as_ref()) {
            Ok(t) => tls = Some(t),
            Err((reason, why)) => {
                conditions.push(Condition::new("ResolvedRefs", false, reason, why));
                (protocol, stream) = (None, None);
            }
        }
    }
    let ns = l
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    let from_text = ns.and_then(|n| n.from.as_deref()).unwrap_or("Same");
    let from = match from_text {
        "Same" => Ok(RoutesFrom::Same(gk.namespace.to_string())),
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
    };
    // One ResolvedRefs condition per listener (the API keys conditions by type): the
    // first problem found says it.
    let has_refs = |c: &[Condition]| c.iter().any(|c| c.type_ == "ResolvedRefs");
    let from = match from {
        Ok(f) => f,
        Err(why) => {
            if !has_refs(&conditions) {
                conditions.push(Condition::new(
                    "ResolvedRefs",
                    false,
                    "InvalidRouteNamespaces",
                    why,
                ));
            }
            RoutesFrom::Nothing
        }
    };
    let allowed_kinds = l.allowed_routes.as_ref().and_then(|a| a.kinds.as_ref());
    let own_kind = kind_for(&l.protocol);
    let is_own = |k: &types::RouteGroupKind| {
        Some(k.kind.as_str()) == own_kind
            && k.group.as_deref().unwrap_or(types::GROUP) == types::GROUP
    };
    let kinds: Vec<&'static str> = match allowed_kinds {
        None => own_kind.into_iter().collect(),
        Some(k) => own_kind
            .filter(|_| k.iter().any(is_own))
            .into_iter()
            .collect(),
    };
    let invalid_kind = allowed_kinds.and_then(|k| k.iter().find(|k| !is_own(k)));
    if let (Some(other), false) = (invalid_kind, has_refs(&conditions)) {
        // The spec: a kind the implementation does not support on this listener is
        // InvalidRouteKinds (the listener still serves the kinds it supports).
        conditions.push(Condition::new(
            "ResolvedRefs",
            false,
            "InvalidRouteKinds",
            format!(
                "route kind {}/{} is not supported on a {} listener ({} is)",
                crate::problem::cut(other.group.as_deref().unwrap_or(types::GROUP), 60),
                crate::problem::cut(&other.kind, 60),
                crate::problem::cut(&l.protocol, 10),
                own_kind.unwrap_or("none")
            ),
        ));
    }
    let served = served(&protocol, &stream);
    if served {
        if !conditions.iter().any(|c| c.type_ == "ResolvedRefs") {
            conditions.push(Condition::new(
                "ResolvedRefs",
                true,
                "ResolvedRefs",
                "every reference resolved",
            ));
        }
        conditions.push(Condition::new("Accepted", true, "Accepted", "served"));
        conditions.push(Condition::new("Programmed", true, "Programmed", "served"));
    } else {
        // Refused: not programmed either (the spec's listener conditions come in sets).
        conditions.push(Condition::new(
            "Programmed",
            false,
            "Invalid",
            "the listener is not served",
        ));
    }
    Lst {
        gateway: gk.clone(),
        spec: l,
        hostname,
        protocol,
        stream,
        tls,
        from,
        kinds,
        attached: 0,
        conditions,
    }
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

/// The TLS of an HTTPS listener: its certificates, chosen by SNI for its `hostname` (any
/// server name when it has none).
pub(super) fn tls_of(
    input: &GatewayInput<'_>,
    gk: &ObjectKey,
    l: &GatewayListener,
    hostname: Option<&Hostname>,
) -> Result<ListenerTls, (&'static str, String)> {
    let Some(t) = &l.tls else {
        return Err((
            "InvalidCertificateRef",
            "an HTTPS listener needs tls.certificateRefs".into(),
        ));
    };
    if t.mode.as_deref().unwrap_or("Terminate") != "Terminate" {
        return Err((
            "UnsupportedValue",
            "tls.mode Passthrough is served by TLS listeners, not HTTPS".into(),
        ));
    }
    let mut certificates = Vec::new();
    for c in &t.certificate_refs {
        let ns = c.namespace.as_deref().unwrap_or(gk.namespace.as_str());
        if !c.group.as_deref().unwrap_or("").is_empty()
            || c.kind.as_deref().unwrap_or("Secret") != "Secret"
        {
            return Err((
                "InvalidCertificateRef",
                format!("{} is not a Secret", c.name),
            ));
        }
        if ns != gk.namespace.as_str()
            && !granted(
                input.grants,
                "Gateway",
                gk.namespace.as_str(),
                "Secret",
                ns,
                &c.name,
            )
        {
            return Err((
                "RefNotPermitted",
                format!(
                    "Secret {ns}/{} is in another namespace and no ReferenceGrant allows it",
                    c.name
                ),
            ));
        }
        let Some(s) = input
            .secrets
            .iter()
            .find(|s| s.namespace == ns && s.name == c.name)
        else {
            return Err((
                "InvalidCertificateRef",
                format!("Secret {ns}/{} does not exist", c.name),
            ));
        };
        // The same check as an Ingress's (certs::inspect, through SecretMeta): the type,
        // then what both proxies load.
        if s.type_ != crate::certs::TLS_SECRET_TYPE {
            return Err((
                "InvalidCertificateRef",
                format!(
                    "Secret {ns}/{} is of type {:?}, not {}",
                    c.name,
                    s.type_.chars().take(64).collect::<String>(),
                    crate::certs::TLS_SECRET_TYPE
                ),
            ));
        }
        if !s.valid {
            return Err((
                "InvalidCertificateRef",
                format!(
                    "Secret {ns}/{} does not hold a certificate and key both proxies load: {}",
                    c.name, s.refusal
                ),
            ));
        }
        // A certificate serves only the hostname its names cover (the same rule as an
        // Ingress's TLS host; a listener without a hostname is its Gateway's default).
        if let Some(h) = hostname.filter(|h| !crate::certs::covers(&s.dns_names, h.as_str())) {
            return Err((
                "InvalidCertificateRef",
                format!(
                    "the certificate of Secret {ns}/{} is not for the listener's hostname {h} (its subjectAltName DNS names: {}; the common name is never read)",
                    c.name,
                    crate::certs::names_list(&s.dns_names)
                ),
            ));
        }
        let (Ok(namespace), Ok(name)) = (ns.parse(), c.name.parse()) else {
            return Err(("InvalidCertificateRef", "invalid Secret name".into()));
        };
        certificates.push(Certificate {
            file: CertFile::Secret {
                namespace,
                name,
                version: s.version.clone(),
            },
            hosts: hostname.into_iter().cloned().collect(),
            owner: Some(ObjRef::Gateway {
                namespace: gk.namespace.to_string(),
                name: gk.name.to_string(),
            }),
        });
    }
    if certificates.is_empty() {
        return Err((
            "InvalidCertificateRef",
            "an HTTPS listener needs tls.certificateRefs".into(),
        ));
    }
    let default_certificate = Some(certificates[0].file.clone());
    Ok(ListenerTls {
        certificates,
        default_certificate,
    })
}
