//! Client certificate validation on a Gateway's HTTPS listeners (`spec.tls.frontend`,
//! GEP-91): `default.validation`, or the `perPort` entry of the listener's port, names
//! CA bundles (ConfigMaps, key `ca.crt`, in the Gateway's namespace or in another one
//! whose ReferenceGrant lets Gateways of the Gateway's namespace name it); a client must
//! then present a certificate that chains to one of them (`AllowValidOnly`, the
//! default), or, in mode `AllowInsecureFallback`, any client is let in and the backend
//! is told what became of its certificate ([`ClientValidationMode`]; the Gateway then
//! says `InsecureFrontendValidationMode`, [`insecure_condition`]).
//!
//! Refused, the listener not served: a reference of another kind
//! (`InvalidCACertificateKind`), to a ConfigMap missing or whose `ca.crt` is not a CA
//! bundle ([`crate::certs::ca_bundle`]; `InvalidCACertificateRef`) or not granted
//! (`RefNotPermitted`), each with `Accepted: False` (`NoValidCACertificate`); a mode
//! the API does not name (`UnsupportedValue`); and a validation that differs from the
//! one an older Gateway sharing the address serves on that port (`PortUnavailable`:
//! one TLS bind has one CA and one mode; [`Bound`]).

use super::*;
use crate::routes::{CaId, ClientValidationMode};
use serde_json::Value;

/// The CA bundle the listener's clients are checked against, and what a client without
/// a valid certificate gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ClientCa {
    pub(super) id: CaId,
    pub(super) pem: String,
    pub(super) mode: ClientValidationMode,
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
    let mode = match validation["mode"].as_str() {
        None | Some("AllowValidOnly") => ClientValidationMode::AllowValidOnly,
        Some("AllowInsecureFallback") => ClientValidationMode::AllowInsecureFallback,
        Some(other) => {
            return Err((
                ConditionReason::UnsupportedValue,
                format!(
                    "client certificate validation mode {:?} is not served (AllowValidOnly and AllowInsecureFallback are)",
                    crate::problem::printable(other.chars().take(40).collect::<String>())
                ),
            ));
        }
    };
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
        mode,
    }))
}

/// The Gateway's `InsecureFrontendValidationMode` condition: `True`
/// (`ConfigurationChanged`) while the validation of any of its ports
/// (`spec.tls.frontend`, default or `perPort`) is `AllowInsecureFallback`; `None` (the
/// condition removed) otherwise. Said from the spec, whether or not a listener of that
/// port is served: the owner is warned of what they asked for.
pub(super) fn insecure_condition(g: &Gateway) -> Option<Condition> {
    let frontend = g.spec.tls.as_ref().and_then(|t| t.get("frontend"))?;
    let fallback = |v: &Value| v["mode"].as_str() == Some("AllowInsecureFallback");
    let mut ports: Vec<String> = frontend["perPort"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| fallback(&p["tls"]["validation"]))
        .filter_map(|p| p["port"].as_i64())
        .map(|p| p.to_string())
        .collect();
    let default = fallback(&frontend["default"]["validation"]);
    if !default && ports.is_empty() {
        return None;
    }
    ports.sort();
    ports.dedup();
    let which = match (default, ports.is_empty()) {
        (true, true) => "by default".to_string(),
        (true, false) => format!("by default and on port(s) {}", ports.join(", ")),
        _ => format!("on port(s) {}", ports.join(", ")),
    };
    Some(Condition::new(
        ConditionType::InsecureFrontendValidationMode,
        true,
        ConditionReason::ConfigurationChanged,
        format!(
            "client certificate validation is AllowInsecureFallback {which}: clients without a valid certificate are let in, and their backends are told in the {} and {} request headers",
            crate::routes::CLIENT_CERT_VERIFY_HEADER,
            crate::routes::CLIENT_CERT_HEADER
        ),
    ))
}

/// The client certificate validation each (address, port) serves: that of the first
/// (oldest) Gateway whose HTTPS listener is served there. HAProxy's `ca-file`,
/// `verify` and `ca-ignore-err` / `crt-ignore-err` are options of the bind (one address
/// and port), nginx's of the handshake: a later Gateway on the same address and port
/// whose validation for that port differs (another CA bundle, another mode, or none)
/// cannot be served there, else one of them would be served with the other's (an
/// `AllowValidOnly` listener open to clients without certificates). The allocation
/// keeps two Gateways off one port of an address (`PortConflict`); this does not rely
/// on it.
#[derive(Default)]
pub(super) struct Bound(BTreeMap<(IpAddr, i32), Holder>);

/// The Gateway that holds a bind, and its validation there (CA bundle and mode).
type Holder = (ObjectKey, Option<(CaId, ClientValidationMode)>);

/// A listener's client certificate validation, as [`client_validation`] gives it.
pub(super) type Validation = Result<Option<ClientCa>, (ConditionReason, String)>;

impl Bound {
    /// `client_ca`, Gateway `gk`'s validation for HTTPS listener `l`'s port, or the
    /// refusal (`PortUnavailable`) when an older Gateway holds that port of one of its
    /// addresses with another validation. Other protocols' listeners as they are.
    pub(super) fn check(
        &self,
        input: &GatewayInput<'_>,
        gk: &ObjectKey,
        l: &GatewayListener,
        client_ca: Validation,
    ) -> Validation {
        let addresses = input.addresses.get(gk).map_or(&[][..], Vec::as_slice);
        match client_ca {
            Ok(ca) if l.protocol == "HTTPS" => {
                match self.refusal(gk, addresses, l.port, ca.as_ref()) {
                    Some(refused) => Err(refused),
                    None => Ok(ca),
                }
            }
            other => other,
        }
    }

    /// Why Gateway `gk`'s HTTPS listeners on `port` of `addresses` cannot be served with
    /// `ca`: another Gateway's listener holds one of those binds with another validation.
    fn refusal(
        &self,
        gk: &ObjectKey,
        addresses: &[IpAddr],
        port: i32,
        ca: Option<&ClientCa>,
    ) -> Option<(ConditionReason, String)> {
        let want = ca.map(|c| (c.id.clone(), c.mode));
        addresses.iter().find_map(|ip| {
            let (holder, have) = self.0.get(&(*ip, port))?;
            (holder != gk && *have != want).then(|| {
                (
                    ConditionReason::PortUnavailable,
                    format!(
                        "Gateway {holder}, which shares address {ip}, serves HTTPS on port {port} with another client certificate validation (spec.tls.frontend: CA bundles or mode); one port of an address has one"
                    ),
                )
            })
        })
    }

    /// Gateway `gk`'s served HTTPS listener holds `port` of `addresses` with `ca`, unless
    /// an older one holds it.
    pub(super) fn hold(
        &mut self,
        gk: &ObjectKey,
        addresses: &[IpAddr],
        port: i32,
        ca: Option<&ClientCa>,
    ) {
        for ip in addresses {
            self.0
                .entry((*ip, port))
                .or_insert_with(|| (gk.clone(), ca.map(|c| (c.id.clone(), c.mode))));
        }
    }
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
