//! The plan's settings that come from the watcher's flags rather than the ConfigMap: the
//! provider, the node selector, the certificate path, the VRID offset.

use crate::state::CertPath;
use std::collections::BTreeMap;

/// Which proxy carries the traffic; defined with the state, which records it.
pub use crate::state::Provider;

/// An equality-based label selector: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelector(Vec<(String, SelOp)>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum SelOp {
    Eq(String),
    Ne(String),
    Exists,
    NotExists,
}

impl std::str::FromStr for NodeSelector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let term = if let Some((k, v)) = part.split_once("!=") {
                (k.trim().to_string(), SelOp::Ne(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k.trim().to_string(), SelOp::Eq(v.trim().to_string()))
            } else if let Some(k) = part.strip_prefix('!') {
                (k.trim().to_string(), SelOp::NotExists)
            } else {
                (part.to_string(), SelOp::Exists)
            };
            if term.0.is_empty() || term.0.contains(char::is_whitespace) {
                return Err(format!("invalid node selector term {part:?}"));
            }
            out.push(term);
        }
        Ok(NodeSelector(out))
    }
}

impl NodeSelector {
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.0.iter().all(|(k, op)| match op {
            SelOp::Eq(v) => get(k) == Some(v),
            SelOp::Ne(v) => get(k) != Some(v),
            SelOp::Exists => get(k).is_some(),
            SelOp::NotExists => get(k).is_none(),
        })
    }
}

impl Default for NodeSelector {
    fn default() -> Self {
        "type=loadBalancer".parse().expect("valid")
    }
}

/// Settings of the plan that come from the watcher's flags rather than the ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlanOptions {
    pub provider: Provider,
    pub node_selector: NodeSelector,
    pub cert_path: CertPath,
    /// k8slb's `VRID_OFFSET`: VRIDs are `offset + 1 ..= 255`.
    pub vrid_offset: u8,
    /// What the LB nodes' actors render ([`crate::features`]): an optional feature is
    /// planned only when every LB node of the plan renders it. The default, for modes
    /// where no actor reports: every actor is this build.
    pub fleet: crate::features::Fleet,
}
