//! A Gateway's `spec.tls.backend.clientCertificateRef` (GatewayBackendClientCertificate):
//! the certificate the proxy presents to the TLS backends (BackendTLSPolicy) it forwards
//! that Gateway's requests to.
//!
//! - **Checked** as a listener's `certificateRefs` are: a core `Secret` (else
//!   ResolvedRefs `False`, `InvalidClientCertificateRef`), of the Gateway's namespace
//!   unless a ReferenceGrant allows it (`RefNotPermitted`), that exists and holds a
//!   certificate and key both proxies load (`InvalidClientCertificateRef`). The Gateway
//!   stays `Accepted` either way, as the specification says.
//! - **Presented** ([`present_client_certificates`]): a valid reference's certificate
//!   goes on the weighted backends of that Gateway's rules that are reached over TLS
//!   ([`crate::routes::WeightedBackend::client_certificate`]), and only there: the same
//!   Service port reached through another Gateway, or an Ingress, presents nothing (the
//!   certificate is the Gateway owner's identity, not the backend's).
//! - **Never ignored**: the requests a Gateway whose reference is invalid forwards to a
//!   TLS backend are answered 500 (as a refused BackendTLSPolicy's are), never sent
//!   without the certificate its owner asked for; its other requests are served.
//! - **Mirrors**: a RequestMirror copy to a TLS backend of a Gateway that presents a
//!   certificate (or whose reference is invalid) is not sent (nginx sends copies from a
//!   location shared by every rule that mirrors to the backend, which cannot present
//!   one Gateway's certificate); the mirrored requests themselves are served.

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

/// Each Gateway's client certificate verdict, by Gateway: the certificate to present,
/// or why its reference is invalid.
pub(super) type ClientCerts = BTreeMap<ObjectKey, Result<CertFile, (ConditionReason, String)>>;

/// Put each Gateway's client certificate on the weighted backends of its rules that
/// are reached over TLS (`routes.backends[id].tls`, after the BackendTLSPolicies).
///
/// A listener is its Gateways' by its address and port (`owners`: the Gateways with a
/// served HTTP or HTTPS listener there). When every owner presents the same
/// certificate, or none asks for one, that is what the listener's TLS backends get.
/// Otherwise (an owner's reference is invalid, or Gateways sharing the listener by
/// consent ask for different certificates, or one asks and another does not) the
/// listener's TLS backends become the invalid references' share (500): a request is
/// never sent without, or with another owner's, certificate.
pub(super) fn present_client_certificates(
    routes: &mut HttpRoutes,
    owners: &BTreeMap<(IpAddr, u16), BTreeSet<ObjectKey>>,
    certs: &ClientCerts,
) {
    if certs.is_empty() {
        return;
    }
    let tls: BTreeSet<BackendId> = routes
        .backends
        .iter()
        .filter(|(_, st)| st.tls.is_some())
        .map(|(id, _)| id.clone())
        .collect();
    if tls.is_empty() {
        return;
    }
    for l in &mut routes.listeners {
        let verdicts: BTreeSet<Option<Option<&CertFile>>> = owners
            .get(&(l.ip, l.port))
            .into_iter()
            .flatten()
            .map(|g| match certs.get(g) {
                None => Some(None),
                Some(Ok(c)) => Some(Some(c)),
                Some(Err(_)) => None,
            })
            .collect();
        // None: refuse the TLS backends; Some(None): nothing to present.
        let present: Option<Option<&CertFile>> = match verdicts.len() {
            0 => Some(None),
            1 => verdicts.into_iter().next().flatten(),
            _ => None,
        };
        if present == Some(None) {
            continue;
        }
        // A mirror's copy goes from a location shared by every rule that mirrors to
        // that backend: it cannot carry this Gateway's certificate, so a copy to a TLS
        // backend is not sent at all (never without the certificate; the requests
        // themselves are served as above).
        for r in l.virtual_hosts.iter_mut().flat_map(|v| &mut v.rules) {
            r.filters.mirrors.retain(|m| !tls.contains(m));
            r.filters
                .partial_mirrors
                .retain(|m| !tls.contains(&m.backend));
        }
        let rules = l
            .virtual_hosts
            .iter_mut()
            .flat_map(|v| &mut v.rules)
            .map(|r| &mut r.action)
            .chain(l.default_action.as_mut());
        for action in rules {
            let RouteAction::Forward { backends, invalid } = action else {
                continue;
            };
            match present {
                Some(Some(cert)) => {
                    for b in backends.iter_mut().filter(|b| tls.contains(&b.id)) {
                        b.client_certificate = Some(cert.clone());
                    }
                }
                _ => {
                    for b in backends.iter().filter(|b| tls.contains(&b.id)) {
                        *invalid = invalid.saturating_add(b.weight.max(1));
                    }
                    backends.retain(|b| !tls.contains(&b.id));
                }
            }
        }
    }
}
