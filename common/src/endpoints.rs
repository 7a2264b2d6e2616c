//! Backends from EndpointSlices: one rule for a Service's ports and for the Services an
//! Ingress (or, later, a route) names. A leaf module: the plan and the Ingress
//! translation both read it, and it reads neither.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// Label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// One backend address of a Service port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    pub ip: IpAddr,
    pub port: u16,
    /// Terminating but still serving: finish current connections, take no new ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
}

/// EndpointSlices by (namespace, Service name); FQDN slices are not ours to use.
pub type SliceIndex<'o> = HashMap<(&'o str, &'o str), Vec<&'o EndpointSlice>>;

pub fn slice_index(slices: &[EndpointSlice]) -> SliceIndex<'_> {
    let mut index: SliceIndex = HashMap::new();
    for s in slices {
        let svc = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL));
        if let Some(svc) = svc.filter(|_| s.address_type != "FQDN") {
            let ns = s.metadata.namespace.as_deref().unwrap_or("default");
            index.entry((ns, svc.as_str())).or_default().push(s);
        }
    }
    index
}

/// Backends of one Service port from its EndpointSlices: the slice port with the Service
/// port's name (`""` when unnamed; how the EndpointSlice controller resolves named and
/// numbered targetPorts) and `protocol` (`TCP`, `UDP`, `SCTP`), ready endpoints, plus
/// terminating-but-serving ones as draining. Sorted, one per (address, port).
pub fn endpoints(port_name: &str, protocol: &str, slices: &[&EndpointSlice]) -> Vec<Endpoint> {
    let mut best: BTreeMap<(IpAddr, u16), bool> = BTreeMap::new(); // -> draining
    for s in slices {
        let Some(port) = slice_port(s, port_name, protocol) else {
            continue;
        };
        for ep in &s.endpoints {
            let Some(draining) = draining(ep) else {
                continue;
            };
            for a in &ep.addresses {
                if let Ok(ip) = a.parse::<IpAddr>() {
                    let e = best.entry((ip, port)).or_insert(draining);
                    *e = *e && draining;
                }
            }
        }
    }
    best.into_iter()
        .map(|((ip, port), draining)| Endpoint { ip, port, draining })
        .collect()
}

/// The port number of the slice's port named `want` with `protocol`.
fn slice_port(s: &EndpointSlice, want: &str, protocol: &str) -> Option<u16> {
    let sp = s.ports.as_deref().unwrap_or_default().iter().find(|p| {
        p.name.as_deref().unwrap_or("") == want
            && p.protocol.as_deref().unwrap_or("TCP") == protocol
    })?;
    sp.port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
}

/// Some(false): ready; Some(true): terminating but serving; None: not a backend.
fn draining(ep: &k8s_openapi::api::discovery::v1::Endpoint) -> Option<bool> {
    let c = ep.conditions.as_ref();
    let ready = c.and_then(|c| c.ready).unwrap_or(true);
    let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
    let serving = c.and_then(|c| c.serving).unwrap_or(ready);
    if ready && !terminating {
        Some(false)
    } else if terminating && serving {
        Some(true)
    } else {
        None
    }
}
