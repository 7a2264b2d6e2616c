//! References between objects, each resolved one way for every kind that makes them:
//!
//! - a backend to a Service's port ([`ServiceRefs::port`]), and that port to the route
//!   model's backend with its endpoints ([`ResolvedPort::backend_state`]): an Ingress
//!   backend (port by number or name), an HTTPRoute's or an L4 route's backendRef (port
//!   by number, of the route's protocol);
//! - a TLS reference to a Secret's certificate ([`SecretRefs::tls`]): an Ingress's
//!   `spec.tls`, a Gateway listener's `certificateRefs`;
//! - a ReferenceGrant that lets one namespace's objects refer to another's
//!   ([`granted`]).
//!
//! Each answers with typed data or a typed error; the caller words the message and
//! picks the reason (an Ingress problem, a Gateway API condition), because they differ.

use crate::app_protocol::BackendProtocol;
use crate::endpoints::{endpoints, slice_index, SliceIndex};
use crate::gateway::types::{self, ReferenceGrant};
use crate::names::{ObjectName, ServiceKey};
use crate::routes::{BackendId, BackendState, CertFile, SecretName, Sticky};
use k8s_openapi::api::core::v1::{Secret, Service, ServicePort as ApiServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::collections::HashMap;

/// What the plan knows about a Secret a TLS reference names: its type and whether its
/// certificate parsed and matched its key. Never the key material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretMeta {
    pub namespace: String,
    pub name: String,
    pub type_: String,
    pub valid: bool,
    /// The certificate chain's version ([`crate::certs::chain_version`]) when valid.
    pub version: String,
    /// Why [`crate::certs::inspect`] refused it, for the problem's message (bounded, never
    /// key material); empty when valid.
    pub refusal: String,
    /// The DNS names (subjectAltName) its certificate is for, when valid: it serves only
    /// the hosts they cover ([`crate::certs::covers`]).
    pub dns_names: Vec<String>,
}

impl SecretMeta {
    /// What the plan may know of a Secret: its type and whether [`crate::certs::inspect`]
    /// accepts it.
    pub fn of(secret: &Secret) -> SecretMeta {
        let inspected = crate::certs::inspect_names(secret);
        SecretMeta {
            namespace: secret
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: secret.metadata.name.clone().unwrap_or_default(),
            type_: secret.type_.clone().unwrap_or_else(|| "Opaque".into()),
            valid: inspected.is_ok(),
            refusal: inspected
                .as_ref()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default(),
            version: inspected
                .as_ref()
                .map(|c| c.cert.file.version().to_string())
                .unwrap_or_default(),
            dns_names: inspected.map(|c| c.dns_names).unwrap_or_default(),
        }
    }
}

/// Why a TLS reference gives no certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretRefError<'s> {
    /// The namespace or the name is not a valid Secret name.
    InvalidName,
    NotFound,
    /// Not of type `kubernetes.io/tls`: the type it has.
    WrongType(&'s str),
    /// Its certificate and key are not what both proxies load: why.
    Invalid(&'s str),
}

/// The Secrets TLS references may name, by namespace and name (the first of a name
/// counts).
pub struct SecretRefs<'s>(HashMap<(&'s str, &'s str), &'s SecretMeta>);

impl<'s> SecretRefs<'s> {
    pub fn new(secrets: &'s [SecretMeta]) -> Self {
        let mut by_name = HashMap::new();
        for s in secrets {
            by_name
                .entry((s.namespace.as_str(), s.name.as_str()))
                .or_insert(s);
        }
        SecretRefs(by_name)
    }

    /// The certificate of the TLS Secret `namespace/name`: its file in the state (the
    /// chain's version in it) and what is known of it (its names, to check the hosts it
    /// serves), or why there is none.
    pub fn tls(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(CertFile, &'s SecretMeta), SecretRefError<'s>> {
        tls_secret(self.0.get(&(namespace, name)).copied(), namespace, name)
    }
}

fn tls_secret<'s>(
    found: Option<&'s SecretMeta>,
    namespace: &str,
    name: &str,
) -> Result<(CertFile, &'s SecretMeta), SecretRefError<'s>> {
    let (Ok(ns), Ok(secret)) = (namespace.parse::<ObjectName>(), name.parse::<SecretName>()) else {
        return Err(SecretRefError::InvalidName);
    };
    let meta = found.ok_or(SecretRefError::NotFound)?;
    if meta.type_ != crate::certs::TLS_SECRET_TYPE {
        return Err(SecretRefError::WrongType(&meta.type_));
    }
    if !meta.valid {
        return Err(SecretRefError::Invalid(&meta.refusal));
    }
    let file = CertFile::Secret {
        namespace: ns,
        name: secret,
        version: meta.version.clone(),
    };
    Ok((file, meta))
}

/// Which port of a Service a backend names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortRef<'r> {
    Number(i32),
    Name(&'r str),
}

/// A Service port a backend resolved to: the backend's id, the port's name (endpoints
/// are found by it in the EndpointSlices) and the Service's slices.
#[derive(Debug, Clone)]
pub struct ResolvedPort<'s> {
    pub id: BackendId,
    /// The port's name as the Service gives it ("" when it has none): endpoints are
    /// found by it in the EndpointSlices.
    pub port_name: &'s str,
    /// The port's protocol (`TCP`, `UDP`): endpoints are found by it too.
    pub protocol: &'s str,
    /// The port's `appProtocol`, as the Service gives it.
    pub app_protocol: Option<&'s str>,
    pub slices: &'s [&'s EndpointSlice],
}

/// Why a backend names no usable Service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceRefError {
    /// The namespace or the name is not a valid Service name.
    InvalidName,
    NotFound,
    /// An ExternalName Service has no endpoints to proxy to.
    ExternalName,
    /// No port of the protocol with that number or name.
    NoPort,
    /// The port the Service gives is not a valid port number.
    OutOfRange(i32),
}

/// The Services and their EndpointSlices, by namespace and name (the first of a name
/// counts).
pub struct ServiceRefs<'a> {
    services: HashMap<(&'a str, &'a str), &'a Service>,
    slices: SliceIndex<'a>,
}

impl ResolvedPort<'_> {
    /// The port as a backend of the route model: its endpoints from the Service's
    /// EndpointSlices ([`endpoints`], the rule a Service's own ports follow too), the
    /// proxy speaking `protocol` to them, with `stickiness`; cleartext (a
    /// BackendTLSPolicy adds TLS later).
    pub fn backend_state(
        &self,
        protocol: BackendProtocol,
        stickiness: Option<Sticky>,
    ) -> BackendState {
        BackendState {
            endpoints: endpoints(self.port_name, self.protocol, self.slices),
            stickiness,
            protocol,
            ..BackendState::default()
        }
    }
}

impl<'a> ServiceRefs<'a> {
    pub fn new(services: &'a [Service], slices: &'a [EndpointSlice]) -> Self {
        let mut by_name = HashMap::new();
        for s in services {
            let ns = s.metadata.namespace.as_deref().unwrap_or("default");
            let name = s.metadata.name.as_deref().unwrap_or_default();
            by_name.entry((ns, name)).or_insert(s);
        }
        ServiceRefs {
            services: by_name,
            slices: slice_index(slices),
        }
    }

    /// The port `port` of `protocol` of Service `namespace/name`, or why not (`None`
    /// names no port: [`ServiceRefError::NoPort`] once the Service is found).
    pub fn port<'s>(
        &'s self,
        namespace: &'s str,
        name: &'s str,
        port: Option<PortRef<'_>>,
        protocol: &str,
    ) -> Result<ResolvedPort<'s>, ServiceRefError> {
        let Ok(service) = ServiceKey::new(namespace, name) else {
            return Err(ServiceRefError::InvalidName);
        };
        let svc = self
            .services
            .get(&(namespace, name))
            .ok_or(ServiceRefError::NotFound)?;
        let spec = svc.spec.as_ref();
        if spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
            return Err(ServiceRefError::ExternalName);
        }
        let wanted = |p: &&ApiServicePort| {
            p.protocol.as_deref().unwrap_or("TCP") == protocol
                && match port {
                    Some(PortRef::Number(n)) => p.port == n,
                    Some(PortRef::Name(n)) => p.name.as_deref() == Some(n),
                    None => false,
                }
        };
        let sp = spec
            .and_then(|s| s.ports.as_deref())
            .unwrap_or_default()
            .iter()
            .find(wanted)
            .ok_or(ServiceRefError::NoPort)?;
        let number = u16::try_from(sp.port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or(ServiceRefError::OutOfRange(sp.port))?;
        let slices = self
            .slices
            .get(&(namespace, name))
            .map(Vec::as_slice)
            .unwrap_or_default();
        Ok(ResolvedPort {
            id: BackendId {
                service,
                port: number,
            },
            port_name: sp.name.as_deref().unwrap_or(""),
            protocol: sp.protocol.as_deref().unwrap_or("TCP"),
            app_protocol: sp.app_protocol.as_deref(),
            slices,
        })
    }
}

/// Whether a ReferenceGrant in `to_ns` lets `from_kind` objects (Gateway API group) of
/// `from_ns` refer to the `to_kind` (core group) object `name`.
pub fn granted(
    grants: &[ReferenceGrant],
    (from_kind, from_ns): (&str, &str),
    (to_kind, to_ns, name): (&str, &str, &str),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoints::Endpoint;
    use serde_json::json;

    fn service_and_slice() -> (Service, EndpointSlice) {
        let svc = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"ports": [
                {"name": "http", "port": 80, "protocol": "TCP"},
                {"name": "dns", "port": 53, "protocol": "UDP"},
            ]},
        }))
        .unwrap();
        let slice = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "shop",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [
                {"name": "http", "port": 8080, "protocol": "TCP"},
                {"name": "dns", "port": 5353, "protocol": "UDP"},
            ],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"],
                 "conditions": {"ready": false, "serving": true, "terminating": true}},
            ],
        }))
        .unwrap();
        (svc, slice)
    }

    fn ep(ip: &str, port: u16, draining: bool) -> Endpoint {
        Endpoint {
            ip: ip.parse().unwrap(),
            port,
            draining,
        }
    }

    #[test]
    fn a_resolved_port_backs_onto_the_endpoints_of_its_own_name_and_protocol() {
        let (svc, slice) = service_and_slice();
        let (services, slices) = ([svc], [slice]);
        let refs = ServiceRefs::new(&services, &slices);
        let http = refs
            .port("shop", "web", Some(PortRef::Name("http")), "TCP")
            .unwrap();
        let st = http.backend_state(BackendProtocol::H2c, Some(Sticky::Source));
        assert_eq!(
            st.endpoints,
            [ep("10.0.0.1", 8080, false), ep("10.0.0.2", 8080, true)]
        );
        assert_eq!(
            (st.protocol, st.stickiness, st.tls),
            (BackendProtocol::H2c, Some(Sticky::Source), None)
        );
        // By number, of the route's protocol: the UDP port's slice port, not the TCP one.
        let dns = refs
            .port("shop", "web", Some(PortRef::Number(53)), "UDP")
            .unwrap();
        assert_eq!(
            dns.backend_state(BackendProtocol::Http, None).endpoints,
            [ep("10.0.0.1", 5353, false), ep("10.0.0.2", 5353, true)]
        );
    }
}
