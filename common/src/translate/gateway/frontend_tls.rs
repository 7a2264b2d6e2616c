//! Client certificate validation on a Gateway's HTTPS listeners (`spec.tls.frontend`,
//! GEP-91): `default.validation`, or the `perPort` entry of the listener's port, names
//! CA bundles (ConfigMaps, key `ca.crt`, in the Gateway's namespace or in another one
//! whose ReferenceGrant lets Gateways of the Gateway's namespace name it); a client must
//! then present a certificate that chains to one of them (`AllowValidOnly`, the
//! default).
//!
//! Refused, the listener not served: a reference of another kind
//! (`InvalidCACertificateKind`), to a ConfigMap missing or whose `ca.crt` is not a CA
//! bundle ([`crate::certs::ca_bundle`]; `InvalidCACertificateRef`) or not granted
//! (`RefNotPermitted`), each with `Accepted: False` (`NoValidCACertificate`); and mode
//! `AllowInsecureFallback` (`UnsupportedValue`: not served, so that no client is let in
//! on a promise k8slb does not measure).

use super::*;
use crate::routes::CaId;
use serde_json::Value;

/// The CA bundle the listener's clients are checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ClientCa {
    pub(super) id: CaId,
    pub(super) pem: String,
}

/// The validation for a listener of Gateway `g` on `port`: none, a CA bundle, or why
/// it cannot be served (the ResolvedRefs reason or `UnsupportedValue`, and the
/// message).
pub(super) fn client_validation(
    input: &GatewayInput<'_>,
    g: &Gateway,
    gk: &ObjectKey,
    port: i32,
) -> Result<Option<ClientCa>, (ConditionReason, String)> {
    let Some(frontend) = g.spec.tls.as_ref().and_then(|t| t.get("frontend")) else {
        return Ok(None);
    };
    let per_port = frontend["perPort"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_i64() == Some(i64::from(port)));
    let validation = match per_port {
        Some(p) => &p["tls"]["validation"],
        None => &frontend["default"]["validation"],
    };
    if validation.is_null() {
        return Ok(None);
    }
    if let Some(mode) = validation["mode"].as_str() {
        if mode != "AllowValidOnly" {
            return Err((
                ConditionReason::UnsupportedValue,
                format!(
                    "client certificate validation mode {:?} is not served (AllowValidOnly is)",
                    crate::problem::printable(mode.chars().take(40).collect::<String>())
                ),
            ));
        }
    }
    let refs = validation["caCertificateRefs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if refs.is_empty() {
        return Err((
            ConditionReason::InvalidCACertificateRef,
            "client certificate validation names no caCertificateRefs".into(),
        ));
    }
    let mut pem = String::new();
    for r in &refs {
        pem.push_str(&one_ref(input, gk, r)?);
    }
    if pem.len() > crate::certs::MAX_CA_BYTES {
        return Err((
            ConditionReason::InvalidCACertificateRef,
            format!(
                "the CA bundles together are more than the {} bytes k8slb reads",
                crate::certs::MAX_CA_BYTES
            ),
        ));
    }
    Ok(Some(ClientCa {
        id: CaId::of(&pem),
        pem,
    }))
}

/// The checked bundle of one `caCertificateRefs` entry.
fn one_ref(
    input: &GatewayInput<'_>,
    gk: &ObjectKey,
    r: &Value,
) -> Result<String, (ConditionReason, String)> {
    let s = |k: &str| r[k].as_str().unwrap_or_default();
    let name = crate::problem::printable(s("name").chars().take(253).collect::<String>());
    if !s("group").is_empty() || s("kind") != "ConfigMap" {
        return Err((
            ConditionReason::InvalidCACertificateKind,
            format!(
                "caCertificateRefs: {name} is a {:?}, not a ConfigMap (core group)",
                crate::problem::printable(s("kind").chars().take(63).collect::<String>())
            ),
        ));
    }
    let ns = r["namespace"].as_str().unwrap_or(gk.namespace.as_str());
    if ns != gk.namespace.as_str()
        && !crate::translate::refs::granted(
            input.grants,
            ("Gateway", gk.namespace.as_str()),
            ("ConfigMap", ns, s("name")),
        )
    {
        return Err((
            ConditionReason::RefNotPermitted,
            format!(
                "ConfigMap {ns}/{name} is in another namespace and no ReferenceGrant allows it"
            ),
        ));
    }
    let cm = input
        .configmaps
        .iter()
        .find(|c| {
            c.metadata.namespace.as_deref() == Some(ns)
                && c.metadata.name.as_deref() == Some(s("name"))
        })
        .ok_or_else(|| {
            (
                ConditionReason::InvalidCACertificateRef,
                format!("ConfigMap {ns}/{name} does not exist"),
            )
        })?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .ok_or_else(|| {
            (
                ConditionReason::InvalidCACertificateRef,
                format!("ConfigMap {ns}/{name} has no ca.crt"),
            )
        })?;
    crate::certs::ca_bundle(text).map_err(|e| {
        (
            ConditionReason::InvalidCACertificateRef,
            format!("ConfigMap {ns}/{name}: {e}"),
        )
    })
}
