//! backendRefs: Services (across namespaces only with a ReferenceGrant) into weighted
//! backends, and the ResolvedRefs condition.

use super::*;
use crate::translate::refs::{self, PortRef, ServiceRefError, ServiceRefs};

/// The backends of a TLSRoute, TCPRoute or UDPRoute (every rule's, together: they have no
/// matches to choose between them), the summed weight of its invalid references (their
/// share of the connections is closed, as an HTTPRoute's gets 500), and its ResolvedRefs
/// condition.
pub(super) fn l4_backends(
    input: &GatewayInput<'_>,
    r: &L4Route,
    rns: &str,
    services: &ServiceRefs<'_>,
    backends: &mut BTreeMap<BackendId, BackendState>,
) -> (Vec<WeightedBackend>, u16, Condition) {
    let protocol = if r.kind == L4Kind::Udp { "UDP" } else { "TCP" };
    let mut refs = Condition::new(
        ConditionType::ResolvedRefs,
        true,
        ConditionReason::ResolvedRefs,
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
                    refs = Condition::new(ConditionType::ResolvedRefs, false, reason, why);
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
    services: &ServiceRefs<'_>,
) -> Condition {
    let mut aside = BTreeMap::new();
    for b in r.spec.rules.iter().flat_map(|rule| &rule.backend_refs) {
        if let Err((reason, why)) = backend(input, b, (kind, rns, "TCP"), services, &mut aside) {
            return Condition::new(ConditionType::ResolvedRefs, false, reason, why);
        }
    }
    Condition::new(
        ConditionType::ResolvedRefs,
        true,
        ConditionReason::ResolvedRefs,
        "every reference resolved",
    )
}

/// A backendRef as a weighted backend (`Ok(None)`: weight 0), or why it is invalid.
pub(super) fn backend(
    input: &GatewayInput<'_>,
    b: &types::HttpBackendRef,
    (from_kind, rns, protocol): (&str, &str, &str),
    services: &ServiceRefs<'_>,
    backends: &mut BTreeMap<BackendId, BackendState>,
) -> Result<Option<WeightedBackend>, (ConditionReason, String)> {
    if !b.group.as_deref().unwrap_or("").is_empty()
        || b.kind.as_deref().unwrap_or("Service") != "Service"
    {
        return Err((
            ConditionReason::InvalidKind,
            format!("backend {} is not a Service", b.name),
        ));
    }
    let ns = b.namespace.as_deref().unwrap_or(rns);
    if ns != rns && !refs::granted(input.grants, (from_kind, rns), ("Service", ns, &b.name)) {
        return Err((
            ConditionReason::RefNotPermitted,
            format!(
                "Service {ns}/{} is in another namespace and no ReferenceGrant allows it",
                b.name
            ),
        ));
    }
    let Some(port) = b.port else {
        // A Service that does not exist says so first.
        if let Err(ServiceRefError::NotFound | ServiceRefError::InvalidName) =
            services.port(ns, &b.name, None, protocol)
        {
            return Err((
                ConditionReason::BackendNotFound,
                format!("Service {ns}/{} does not exist", b.name),
            ));
        }
        return Err((
            ConditionReason::UnsupportedValue,
            format!("backend {ns}/{} has no port", b.name),
        ));
    };
    let found = services
        .port(ns, &b.name, Some(PortRef::Number(port)), protocol)
        .map_err(|e| match e {
            // No Service has an invalid name.
            ServiceRefError::InvalidName | ServiceRefError::NotFound => (
                ConditionReason::BackendNotFound,
                format!("Service {ns}/{} does not exist", b.name),
            ),
            ServiceRefError::ExternalName => (
                ConditionReason::BackendNotFound,
                format!(
                    "Service {ns}/{} is of type ExternalName, which has no endpoints",
                    b.name
                ),
            ),
            ServiceRefError::NoPort => (
                ConditionReason::BackendNotFound,
                format!("Service {ns}/{} has no {protocol} port {port}", b.name),
            ),
            ServiceRefError::OutOfRange(_) => (
                ConditionReason::UnsupportedValue,
                "port out of range".into(),
            ),
        })?;
    // A GRPCRoute's backends are gRPC servers: h2c whatever the port says.
    let backend_protocol = if from_kind == grpc::KIND {
        crate::app_protocol::BackendProtocol::H2c
    } else {
        crate::app_protocol::BackendProtocol::from_app_protocol(found.app_protocol).map_err(
            |e| {
                (
                    ConditionReason::UnsupportedProtocol,
                    format!("backend {ns}/{}: {e}", b.name),
                )
            },
        )?
    };
    let weight = b.weight.unwrap_or(1);
    if weight == 0 {
        return Ok(None);
    }
    backends
        .entry(found.id.clone())
        .or_insert_with(|| found.backend_state(backend_protocol, None));
    Ok(Some(WeightedBackend {
        id: found.id,
        weight: u16::try_from(weight.clamp(1, 1_000_000)).unwrap_or(u16::MAX),
        request_headers: HeaderEdits::default(),
        client_certificate: None,
    }))
}
