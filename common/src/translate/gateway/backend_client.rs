//! A Gateway's `spec.tls.backend.clientCertificateRef` (GatewayBackendClientCertificate):
//! the certificate the proxy would present to the TLS backends (BackendTLSPolicy) it
//! forwards that Gateway's requests to.
//!
//! k8slb does not present client certificates to backends yet, and never ignores one
//! asked for: the requests such a Gateway forwards to a TLS backend are answered 500
//! (as a refused BackendTLSPolicy's are), never sent without the certificate; its other
//! requests are served. Only that Gateway's own traffic is touched: the same backend
//! reached through another Gateway keeps its TLS.
//!
//! - **Checked** as a listener's `certificateRefs` are: a core `Secret` (else
//!   ResolvedRefs `False`, `InvalidClientCertificateRef`), of the Gateway's namespace
//!   unless a ReferenceGrant allows it (`RefNotPermitted`), that exists and holds a
//!   certificate and key both proxies load (`InvalidClientCertificateRef`). The Gateway
//!   stays `Accepted` either way, as the specification says.
//! - **Said**: a valid reference gets ResolvedRefs `True` and a warning Event
//!   (`UnsupportedValue`) saying it is not presented.

use super::*;
use crate::translate::refs::{SecretRefError, SecretRefs};

/// The reference as written: `spec.tls.backend.clientCertificateRef`, if any (a value
/// that is not a reference is one with no name, refused as such).
pub(super) fn client_certificate_ref(g: &Gateway) -> Option<types::ObjectRef> {
    let v = g
        .spec
        .tls
        .as_ref()?
        .get("backend")?
        .get("clientCertificateRef")?;
    Some(serde_json::from_value(v.clone()).unwrap_or_default())
}

/// What a Gateway's client certificate reference resolves to: `None` without one, else
/// the certificate (its file, were it presented) or the ResolvedRefs reason and why not.
pub(super) fn client_certificate(
    input: &GatewayInput<'_>,
    secrets: &SecretRefs<'_>,
    gk: &ObjectKey,
    g: &Gateway,
) -> Option<Result<CertFile, (ConditionReason, String)>> {
    let c = client_certificate_ref(g)?;
    let invalid = |why: String| {
        (
            ConditionReason::InvalidClientCertificateRef,
            format!("spec.tls.backend.clientCertificateRef: {why}"),
        )
    };
    let name = crate::problem::cut(&c.name, 64);
    let ns = c.namespace.as_deref().unwrap_or(gk.namespace.as_str());
    let group = c.group.as_deref().unwrap_or("");
    let kind = c.kind.as_deref().unwrap_or("Secret");
    if !group.is_empty() || kind != "Secret" {
        return Some(Err(invalid(format!(
            "{}/{} {name} is not a Secret (core group)",
            crate::problem::cut(group, 64),
            crate::problem::cut(kind, 64)
        ))));
    }
    if ns != gk.namespace.as_str()
        && !crate::translate::refs::granted(
            input.grants,
            ("Gateway", gk.namespace.as_str()),
            ("Secret", ns, &c.name),
        )
    {
        return Some(Err((
            ConditionReason::RefNotPermitted,
            format!(
                "spec.tls.backend.clientCertificateRef: Secret {}/{name} is in another namespace and no ReferenceGrant allows it",
                crate::problem::cut(ns, 64)
            ),
        )));
    }
    let found = secrets.tls(ns, &c.name);
    let ns = crate::problem::cut(ns, 64);
    Some(found.map(|(file, _)| file).map_err(|e| match e {
        SecretRefError::InvalidName | SecretRefError::NotFound => {
            invalid(format!("Secret {ns}/{name} does not exist"))
        }
        SecretRefError::WrongType(type_) => invalid(format!(
            "Secret {ns}/{name} is of type {:?}, not {}",
            crate::problem::cut(type_, 64),
            crate::certs::TLS_SECRET_TYPE
        )),
        SecretRefError::Invalid(refusal) => invalid(format!(
            "Secret {ns}/{name} does not hold a certificate and key both proxies load: {refusal}"
        )),
    }))
}

/// The share of each rule that the Gateways in `asking` forward to a TLS backend
/// becomes the invalid references' share (500): those Gateways ask for a client
/// certificate k8slb does not present. A listener is its Gateways' by its address and
/// port (`owners`: the Gateways with a served HTTP or HTTPS listener there); when
/// Gateways share one (by consent) and one of them asks, the listener's TLS backends
/// are refused for all of them: a request is never sent without a certificate that
/// was asked for.
pub(super) fn refuse_tls_backends(
    routes: &mut HttpRoutes,
    owners: &BTreeMap<(IpAddr, u16), BTreeSet<ObjectKey>>,
    asking: &BTreeSet<ObjectKey>,
) {
    if asking.is_empty() {
        return;
    }
    let tls: BTreeSet<BackendId> = routes
        .backends
        .iter()
        .filter(|(_, st)| st.tls.is_some())
        .map(|(id, _)| id.clone())
        .collect();
    for l in &mut routes.listeners {
        if !owners
            .get(&(l.ip, l.port))
            .is_some_and(|gs| gs.iter().any(|g| asking.contains(g)))
        {
            continue;
        }
        for r in l.virtual_hosts.iter_mut().flat_map(|v| &mut v.rules) {
            if let RouteAction::Forward { backends, invalid } = &mut r.action {
                for b in backends.iter().filter(|b| tls.contains(&b.id)) {
                    *invalid = invalid.saturating_add(b.weight.max(1));
                }
                backends.retain(|b| !tls.contains(&b.id));
            }
        }
    }
}
