//! Which Gateway API kinds this cluster serves (discovery of `gateway.networking.k8s.io`,
//! whose CRDs a user installs, or not): what the Gateway stores watch and the status
//! writer patches. A leaf: it imports no other watcher module but `kube`.

use crate::kube::describe;
use k8slb_common::gateway::types::{L4Kind, GROUP as GATEWAY_GROUP};
use kube::api::ApiResource;
use kube::Client;

/// The Gateway API kinds (group `gateway.networking.k8s.io`) as this cluster serves
/// them: found by discovery, each at its most stable version (ReferenceGrant is v1beta1
/// in the standard channel before v1.6, v1 after).
#[derive(Debug, Clone)]
pub struct GatewayResources {
    pub classes: ApiResource,
    pub gateways: ApiResource,
    pub routes: ApiResource,
    /// None when the cluster serves no ReferenceGrant (every cross-namespace reference
    /// is then refused, as the spec says for a reference without a grant).
    pub grants: Option<ApiResource>,
    /// GRPCRoute (standard channel since v1.1), when the cluster serves it.
    pub grpc: Option<ApiResource>,
    /// The experimental channel's TLSRoute, TCPRoute and UDPRoute, those the cluster
    /// serves (each at its most stable version: TLSRoute is v1alpha2, v1alpha3 or v1 by
    /// release).
    pub l4: Vec<(L4Kind, ApiResource)>,
    /// BackendTLSPolicy (standard channel since v1.4), when the cluster serves it.
    pub backend_tls: Option<ApiResource>,
    /// ListenerSet (standard channel since v1.5), when the cluster serves it.
    pub listener_sets: Option<ApiResource>,
}

impl GatewayResources {
    /// The resource of an L4 route kind, if the cluster serves it.
    pub fn l4(&self, kind: L4Kind) -> Option<&ApiResource> {
        self.l4.iter().find(|(k, _)| *k == kind).map(|(_, ar)| ar)
    }
}

/// What discovery found of the Gateway API.
#[derive(Debug)]
pub enum GatewayDiscovery {
    Found(Box<GatewayResources>),
    /// The group is not served, or lacks a kind we need: the CRDs are not installed.
    Absent(String),
}

impl GatewayResources {
    /// Ask the API server (discovery). Err: it could not be asked (retry).
    pub async fn discover(client: &Client) -> Result<GatewayDiscovery, kube::Error> {
        use kube::discovery;
        let group = match discovery::group(client, GATEWAY_GROUP).await {
            Ok(g) => g,
            Err(kube::Error::Discovery(e)) => {
                return Ok(GatewayDiscovery::Absent(e.to_string()));
            }
            Err(e) if crate::kube::api_code(&e) == Some(404) => {
                return Ok(GatewayDiscovery::Absent(describe(&e)));
            }
            Err(e) => return Err(e),
        };
        let all = group.resources_by_stability();
        let find = |kind: &str| {
            all.iter()
                .find(|(ar, _)| ar.kind == kind)
                .map(|(ar, _)| ar.clone())
        };
        let (Some(classes), Some(gateways), Some(routes)) =
            (find("GatewayClass"), find("Gateway"), find("HTTPRoute"))
        else {
            return Ok(GatewayDiscovery::Absent(format!(
                "{GATEWAY_GROUP} does not serve GatewayClass, Gateway and HTTPRoute"
            )));
        };
        Ok(GatewayDiscovery::Found(Box::new(GatewayResources {
            classes,
            gateways,
            routes,
            grants: find("ReferenceGrant"),
            grpc: find("GRPCRoute"),
            backend_tls: find("BackendTLSPolicy"),
            listener_sets: find("ListenerSet"),
            l4: L4Kind::ALL
                .into_iter()
                .filter_map(|k| Some((k, find(k.as_str())?)))
                .collect(),
        })))
    }
}
