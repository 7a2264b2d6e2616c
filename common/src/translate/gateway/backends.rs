//! backendRefs: Services (across namespaces only with a ReferenceGrant) into weighted
//! backends, and the ResolvedRefs condition.

use super::*;

/// Whether a ReferenceGrant in `to_ns` lets `from_kind` objects of `from_ns` refer to the
/// `to_kind` (core group) object `name`.
pub(super) fn granted(
    grants: &[ReferenceGrant],
    from_kind: &str,
    from_ns: &str,
    to_kind: &str,
    to_ns: &str,
    name: &str,
) -> bool {
    grants.iter().any(|g| {
        g.metadata.namespace.as_deref() == Some(to_ns)
            && g.spec
                .from
                .iter()
                .any(|f| f.group == types::GROUP && f.kind == from_kind && f.namespace == from_ns)
            && g.spec.to.iter().any(|t| {
                t.group.is_empty()
                    && t.kind == to_kind
                    && t.name.as_deref().is_none_or(|n| n == name)
            })
    })
}

/// The backends of a TLSRoute, TCPRoute or UDPRoute (every rule's, together: they have no
/// matches to choose between them), the summed weight of its invalid references (their
/// share of the connections is closed, as an HTTPRoute's gets 500), and its ResolvedRefs
/// condition.
pub(super) fn l4_backends(
    input: &GatewayInput<'_>,
    r: &L4Route,
    rns: &str,
    services: &BTreeMap<(String, String), &Service>,
    slices: &crate::endpoints::SliceIndex<'_>,
    backends: &mut BTreeMap<BackendId, BackendState>,
) -> (Vec<WeightedBackend>, u16, Condition) {
    let protocol = if r.kind == L4Kind::Udp { "UDP" } else { "TCP" };
    let mut refs = Condition::new(
        "ResolvedRefs",
        true,
        "ResolvedRefs",
        "every reference resolved",
    );
    let mut weighted: Vec<WeightedBackend> = Vec::new();
    let mut invalid: u16 = 0;
    for b in r.spec.rules.iter().flat_map(|rule| &rule.backend_refs) {
        match backend(
            input,
            b,
            (r.kind.as_str(), rns, protocol),
            services,
            slices,
            backends,
        ) {
            Ok(Some(w)) => match weighted.iter_mut().find(|have| have.id == w.id) {
                Some(have) => have.weight = have.weight.saturating_add(w.weight),
                None => weighted.push(w),
            },
            Ok(None) => {}
            Err((reason, why)) => {
                let w = b.weight.unwrap_or(1).clamp(0, i32::from(u16::MAX));
                invalid = invalid.saturating_add(u16::try_from(w).unwrap_or(0));
                if refs.status {
                    refs = Condition::new("ResolvedRefs", false, reason, why);
                }
            }
        }
    }
    (weighted, invalid, refs)
}

/// The ResolvedRefs condition of an HTTPRoute that attaches to no listener of a parent:
/// every rule's backendRefs resolved as [`rules_of`] resolves them (the first failure
/// says why), into a map of its own, so that nothing of the route enters the model.
pub(super) fn http_route_refs(
    input: &GatewayInput<'_>,
    (r, kind): (&HttpRoute, &str),
    rns: &str,
    services: &BTreeMap<(String, String), &Service>,
    slices: &crate::endpoints::SliceIndex<'_>,
) -> Condition {
    let mut aside = BTreeMap::new();
    for b in r.spec.rules.iter().flat_map(|rule| &rule.backend_refs) {
        if let Err((reason, why)) =
            backend(input, b, (kind, rns, "TCP"), services, slices, &mut aside)
        {
            return Condition::new("ResolvedRefs", false, reason, why);
        }
    }
    Condition::new(
        "ResolvedRefs",
        true,
        "ResolvedRefs",
        "every reference resolved",
    )
}

pub(super) fn service_index(services: &[Service]) -> BTreeMap<(String, String), &Service> {
    services
        .iter()
        .filter_map(|s| Some(((s.metadata.namespace.clone()?, s.metadata.name.clone()?), s)))
        .collect()
}

/// A backendRef as a weighted backend (`Ok(None)`: weight 0), or why it is invalid.
pub(super) fn backend(
    input: &GatewayInput<'_>,
    b: &types::HttpBackendRef,
    (from_kind, rns, protocol): (&str, &str, &str),
    services: &BTreeMap<(String, String), &Service>,
    slices: &crate::endpoints::SliceIndex<'_>,
    backends: &mut BTreeMap<BackendId, BackendState>,
) -> Result<Option<WeightedBackend>, (&'static str, String)> {
    if !b.group.as_deref().unwrap_or("").is_empty()
        || b.kind.as_deref().unwrap_or("Service") != "Service"
    {
        return Err((
            "InvalidKind",
            format!("backend {} is not a Service", b.name),
        ));
    }
    let ns = b.namespace.as_deref().unwrap_or(rns);
    if ns != rns && !granted(input.grants, from_kind, rns, "Service", ns, &b.name) {
        return Err((
            "RefNotPermitted",
            format!(
                "Service {ns}/{} is in another namespace and no ReferenceGrant allows it",
                b.name
            ),
        ));
    }
    let Some(svc) = services.get(&(ns.to_string(), b.name.clone())) else {
        return Err((
            "BackendNotFound",
            format!("Service {ns}/{} does not exist", b.name),
        ));
    };
    let Some(port) = b.port else {
        return Err((
            "UnsupportedValue",
            format!("backend {ns}/{} has no port", b.name),
        ));
    };
    let sp = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ps| {
            ps.iter()
                .find(|p| p.port == port && p.protocol.as_deref().unwrap_or("TCP") == protocol)
        });
    let Some(sp) = sp else {
        return Err((
            "BackendNotFound",
            format!("Service {ns}/{} has no {protocol} port {port}", b.name),
        ));
    };
    // A GRPCRoute's backends are gRPC servers: h2c whatever the port says.
    let backend_protocol = if from_kind == grpc::KIND {
        crate::app_protocol::BackendProtocol::H2c
    } else {
        crate::app_protocol::BackendProtocol::from_app_protocol(sp.app_protocol.as_deref())
            .map_err(|e| {
                (
                    "UnsupportedProtocol",
                    format!("backend {ns}/{}: {e}", b.name),
                )
            })?
    };
    let weight = b.weight.unwrap_or(1);
    if weight == 0 {
        return Ok(None);
    }
    let Ok(service) = ServiceKey::new(ns, &b.name) else {
        return Err(("BackendNotFound", "invalid Service name".into()));
    };
    let Ok(port16) = u16::try_from(port) else {
        return Err(("UnsupportedValue", "port out of range".into()));
    };
    let id = BackendId {
        service,
        port: port16,
    };
    backends.entry(id.clone()).or_insert_with(|| {
        let eps: Vec<Endpoint> = endpoints(
            sp.name.as_deref().unwrap_or(""),
            protocol,
            slices
                .get(&(ns, b.name.as_str()))
                .map(Vec::as_slice)
                .unwrap_or_default(),
        );
        BackendState {
            endpoints: eps,
            stickiness: None,
            protocol: backend_protocol,
        }
    });
    Ok(Some(WeightedBackend {
        id,
        weight: u16::try_from(weight.clamp(1, 1_000_000)).unwrap_or(u16::MAX),
    }))
}
