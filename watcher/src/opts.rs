//! Flags shared by `plan` and `run`: everything the plan takes besides the ConfigMap.

use k8slb_common::plan::{NodeSelector, PlanOptions, Provider};
use k8slb_common::state::CertPath;

#[derive(Debug, Clone, clap::Args)]
pub struct PlanFlags {
    /// Which proxy carries the traffic: haproxy, nginx or kubeproxy (k8slb's PROXY).
    #[arg(long, env = "PROXY", default_value = "haproxy", value_parser = parse_provider)]
    pub proxy: Provider,
    /// Label selector of the load-balancer nodes (k8slb's NODE_SELECTOR).
    #[arg(long, env = "NODE_SELECTOR", default_value = "type=loadBalancer", value_parser = parse_selector)]
    pub node_selector: NodeSelector,
    /// Where the certificates are on the LB nodes (k8slb's CERT_PATH).
    #[arg(long, env = "CERT_PATH", default_value = "/etc/certs", value_parser = parse_cert_path)]
    pub cert_path: CertPath,
    /// Added to every VRRP virtual_router_id, so several VRRP users can share a segment;
    /// our VRIDs are then offset+1..=255 (k8slb's VRID_OFFSET).
    #[arg(long, env = "VRID_OFFSET", default_value_t = 0)]
    pub vrid_offset: u8,
    /// Namespace of the global ConfigMap `global` (key `config`).
    #[arg(long, env = "K8SLB_NAMESPACE", default_value = "k8slb-system")]
    pub namespace: String,
}

impl PlanFlags {
    pub fn plan_options(&self) -> PlanOptions {
        PlanOptions {
            provider: self.proxy,
            node_selector: self.node_selector.clone(),
            cert_path: self.cert_path.clone(),
            vrid_offset: self.vrid_offset,
            // The Kubernetes source replaces it with the actors' reports each round
            // (`reconcile`); the files mode and `plan` have no reports: this build.
            fleet: Default::default(),
        }
    }
}

fn parse_provider(s: &str) -> Result<Provider, String> {
    s.parse()
}

fn parse_selector(s: &str) -> Result<NodeSelector, String> {
    s.parse()
}

fn parse_cert_path(s: &str) -> Result<CertPath, String> {
    s.parse()
        .map_err(|e: k8slb_common::names::NameError| e.to_string())
}
