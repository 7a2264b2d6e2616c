//! The load-balancer nodes: selected by the node selector, Ready, not excluded.

use super::options::NodeSelector;
use super::problems::{short, Problems};
use crate::names::NodeName;
use crate::problem::{Kind, ObjRef, Problem, Reason};
use crate::state::LbNode;
use k8s_openapi::api::core::v1::Node;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Label that excludes a node from external load balancers (Kubernetes well-known label).
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// LB nodes: selected, Ready, not excluded; each with its addresses, InternalIP first.
pub(super) fn lb_nodes(
    nodes: &[Node],
    sel: &NodeSelector,
    problems: &mut Problems,
) -> BTreeMap<NodeName, LbNode> {
    let mut out = BTreeMap::new();
    for n in nodes {
        let labels = n.metadata.labels.as_ref();
        if !sel.matches(labels) || labels.is_some_and(|l| l.contains_key(EXCLUDE_LABEL)) {
            continue;
        }
        let raw = n.metadata.name.as_deref().unwrap_or_default();
        let Ok(name) = raw.parse::<NodeName>() else {
            problems.insert(Problem::new(
                ObjRef::Unnamed {
                    kind: Kind::Node,
                    shown: short(raw),
                },
                Reason::InvalidName,
                "skipped: not a valid node name",
            ));
            continue;
        };
        if is_ready(n) {
            out.insert(
                name,
                LbNode {
                    addresses: addresses(n),
                },
            );
        }
    }
    out
}

fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// InternalIP addresses, then ExternalIP ones, each once.
fn addresses(n: &Node) -> Vec<IpAddr> {
    let mut addresses: Vec<IpAddr> = Vec::new();
    for kind in ["InternalIP", "ExternalIP"] {
        for a in n
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == kind)
        {
            if let Ok(ip) = a.address.parse::<IpAddr>() {
                if !addresses.contains(&ip) {
                    addresses.push(ip);
                }
            }
        }
    }
    addresses
}
