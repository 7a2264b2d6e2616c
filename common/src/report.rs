//! What an actor tells the watcher about its node: the objects whose part of the proxy
//! config the proxy's own checker refuses there, and which the actor therefore leaves out
//! (its quarantine, issue 20). The watcher turns each into a `ProxyRefused` problem on the
//! object: an Event and a line in the state, like every problem the plan finds itself.
//! And the node's BGP peers that refuse its session, or that it cannot configure
//! ([`PeerProblem`]): problems on the Node. And the optional features its build renders
//! (`features`, [`crate::features`]): the watcher plans one only when every LB node
//! lists it (version skew).
//!
//! The actor publishes its report as the ConfigMap [`configmap_name`] in k8slb's
//! namespace, with the labels [`REPORT_LABELS`] and the JSON in `data[`[`REPORT_KEY`]`]`.
//! Only names and a bounded, escaped excerpt of the checker's message travel: at most
//! [`MAX_ENTRIES`] objects, messages cut to [`MAX_ERROR_CHARS`]. A report is trusted only
//! for the node its ConfigMap is named after ([`decode`]).

use crate::names::NodeName;
use crate::problem::{printable, ObjRef};
use crate::publish::fnv1a;
use serde::{Deserialize, Serialize};

/// The labels of every node report: who manages it, what it is (not the state's).
pub const REPORT_LABELS: [(&str, &str); 2] = [
    ("app.kubernetes.io/managed-by", "k8slb"),
    ("k8slb.io/part", "node-report"),
];
/// [`REPORT_LABELS`] as a label selector (a test keeps the two in step).
pub const REPORT_SELECTOR: &str = "app.kubernetes.io/managed-by=k8slb,k8slb.io/part=node-report";
/// The `data` key of the JSON.
pub const REPORT_KEY: &str = "report.json";
/// The name prefix of the ConfigMaps.
pub const REPORT_PREFIX: &str = "k8slb-node-";
/// At most this many objects in one report (the rest are counted in `more`).
pub const MAX_ENTRIES: usize = 64;
/// The checker's message is cut to this many characters.
pub const MAX_ERROR_CHARS: usize = 300;

/// One node's report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    pub node: String,
    /// The proxy whose checker refused (`haproxy`, `nginx`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub proxy: String,
    #[serde(default)]
    pub quarantined: Vec<Refused>,
    /// Objects left out beyond [`MAX_ENTRIES`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more: usize,
    /// BGP peers with a problem (at most [`MAX_ENTRIES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bgp: Vec<PeerProblem>,
    /// The optional features this actor's build renders ([`crate::features`]): the
    /// watcher plans one only when every LB node lists it. A report without the key
    /// (an actor older than it) lists none.
    #[serde(default)]
    pub features: Vec<String>,
}

/// A BGP peer of the node whose session is refused, down, or not configured.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PeerProblem {
    pub peer: std::net::IpAddr,
    pub kind: PeerProblemKind,
    /// What the node saw (escaped, cut to [`MAX_ERROR_CHARS`]).
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PeerProblemKind {
    /// The peer sent a NOTIFICATION.
    Refused,
    /// The peer's password is missing or unusable: not configured.
    Password,
    /// Not established for a while, nothing received.
    Down,
}

impl PeerProblemKind {
    pub fn reason(self) -> crate::problem::Reason {
        use crate::problem::Reason;
        match self {
            PeerProblemKind::Refused => Reason::BgpPeerRefused,
            PeerProblemKind::Password => Reason::BgpPasswordUnusable,
            PeerProblemKind::Down => Reason::BgpSessionDown,
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// An object left out of the proxy config on the node, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Refused {
    pub object: ObjRef,
    /// The checker's first error line for a config holding only this object's part
    /// (escaped, cut), or empty when there was none to quote.
    #[serde(default)]
    pub error: String,
}

impl NodeReport {
    /// The report of `node`: `refused` sorted, cut to [`MAX_ENTRIES`], messages escaped
    /// and cut; the features of this build (a report speaks for the actor that writes it).
    pub fn new(node: &NodeName, proxy: &str, refused: impl IntoIterator<Item = Refused>) -> Self {
        let mut all: Vec<Refused> = refused
            .into_iter()
            .map(|r| Refused {
                error: cut(&r.error),
                object: r.object,
            })
            .collect();
        all.sort();
        all.dedup_by(|a, b| a.object == b.object);
        let more = all.len().saturating_sub(MAX_ENTRIES);
        all.truncate(MAX_ENTRIES);
        NodeReport {
            node: node.to_string(),
            proxy: proxy.to_string(),
            quarantined: all,
            more,
            bgp: Vec::new(),
            features: crate::features::Features::this_build().names(),
        }
    }

    /// The features it lists that this build knows.
    pub fn features(&self) -> crate::features::Features {
        crate::features::Features::from_names(&self.features)
    }

    /// The report with `problems` as its BGP part: sorted, one per peer, at most
    /// [`MAX_ENTRIES`], messages escaped and cut.
    pub fn with_bgp(mut self, problems: impl IntoIterator<Item = PeerProblem>) -> Self {
        let mut all: Vec<PeerProblem> = problems
            .into_iter()
            .map(|p| PeerProblem {
                message: cut(&p.message),
                ..p
            })
            .collect();
        all.sort();
        all.dedup_by(|a, b| a.peer == b.peer);
        all.truncate(MAX_ENTRIES);
        self.bgp = all;
        self
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }
}

fn cut(s: &str) -> String {
    let s: String = s.chars().take(MAX_ERROR_CHARS).collect();
    printable(s)
}

/// The ConfigMap a node's report lives in: `k8slb-node-<node>`, or, for a node name too
/// long for that (ConfigMap names are at most 253 characters), its first part and a hash
/// of the whole name.
pub fn configmap_name(node: &NodeName) -> String {
    let node = node.as_str();
    let max = 253 - REPORT_PREFIX.len();
    if node.len() <= max {
        return format!("{REPORT_PREFIX}{node}");
    }
    let hash = format!("{:016x}", fnv1a(node.as_bytes()));
    // Node names are lowercase ASCII: any byte index is a character boundary. The cut
    // keeps a DNS subdomain: no trailing '.' or '-' before the hash's '-'.
    let head = node[..max - hash.len() - 1].trim_end_matches(['.', '-']);
    format!("{REPORT_PREFIX}{head}-{hash}")
}

/// Why a report was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("no {REPORT_KEY} key")]
    NoData,
    #[error("undecodable: {0}")]
    Undecodable(String),
    #[error("names node {node:?}, which is not the node its ConfigMap is for")]
    WrongNode { node: String },
}

/// The report in ConfigMap `name`'s `json`: used only when the node it names is the one
/// the ConfigMap is named for (an actor can speak only for its own node).
pub fn decode(name: &str, json: Option<&str>) -> Result<(NodeName, NodeReport), ReportError> {
    let json = json.ok_or(ReportError::NoData)?;
    let r: NodeReport = serde_json::from_str(json)
        .map_err(|e| ReportError::Undecodable(printable(e.to_string())))?;
    let node: NodeName = r
        .node
        .parse()
        .map_err(|_| ReportError::WrongNode { node: cut(&r.node) })?;
    if configmap_name(&node) != name {
        return Err(ReportError::WrongNode { node: cut(&r.node) });
    }
    Ok((node, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(s: &str) -> NodeName {
        s.parse().unwrap()
    }

    #[test]
    fn labels_and_selector_agree() {
        let labels: Vec<String> = REPORT_LABELS
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(REPORT_SELECTOR, labels.join(","));
        assert_ne!(REPORT_SELECTOR, crate::publish::STATE_SELECTOR);
    }

    #[test]
    fn a_report_reads_back_for_its_own_node_only() {
        let r = NodeReport::new(
            &node("lb-1"),
            "haproxy",
            [Refused {
                object: "Ingress bank/web".parse().unwrap(),
                error: "line 1\nFORGED".into(),
            }],
        );
        let json = r.to_json();
        let (n, back) = decode("k8slb-node-lb-1", Some(&json)).unwrap();
        assert_eq!((n, &back), (node("lb-1"), &r));
        assert_eq!(back.quarantined[0].error, "line 1\\nFORGED");
        assert_eq!(
            decode("k8slb-node-lb-2", Some(&json)),
            Err(ReportError::WrongNode {
                node: "lb-1".into()
            })
        );
        assert_eq!(decode("k8slb-node-lb-1", None), Err(ReportError::NoData));
        assert!(matches!(
            decode("k8slb-node-lb-1", Some("{")),
            Err(ReportError::Undecodable(_))
        ));
    }

    #[test]
    fn bgp_peer_problems_are_bounded_escaped_and_read_back() {
        let many = (0..200u32).map(|i| PeerProblem {
            peer: std::net::IpAddr::from([198, 18, (i / 250) as u8, (i % 250) as u8]),
            kind: PeerProblemKind::Refused,
            message: format!("OPEN Message Error/Bad Peer AS\n{}", "x".repeat(1000)),
        });
        let r = NodeReport::new(&node("lb-1"), "haproxy", []).with_bgp(many);
        assert_eq!(r.bgp.len(), MAX_ENTRIES);
        assert!(r.bgp[0]
            .message
            .starts_with("OPEN Message Error/Bad Peer AS\\n"));
        assert_eq!(r.bgp[0].message.chars().count(), MAX_ERROR_CHARS + 1);
        let (_, back) = decode("k8slb-node-lb-1", Some(&r.to_json())).unwrap();
        assert_eq!(back, r);
        // Older reports (no bgp key) still read; an empty list is not written.
        let plain = NodeReport::new(&node("lb-1"), "haproxy", []);
        assert!(!plain.to_json().contains("bgp"));
    }

    #[test]
    fn a_report_lists_this_builds_features_and_one_without_the_key_lists_none() {
        let r = NodeReport::new(&node("lb-1"), "haproxy", []);
        assert!(
            r.to_json().contains(r#""features":["tlsMixed"]"#),
            "{}",
            r.to_json()
        );
        let (_, back) = decode("k8slb-node-lb-1", Some(&r.to_json())).unwrap();
        assert_eq!(back.features(), crate::features::Features::this_build());
        // The report of an actor older than the key.
        let old = r#"{"node":"lb-1","proxy":"haproxy","quarantined":[]}"#;
        let (_, back) = decode("k8slb-node-lb-1", Some(old)).unwrap();
        assert_eq!(back.features(), crate::features::Features::none());
        // A newer actor's feature this build does not know is left out.
        let newer = r#"{"node":"lb-1","quarantined":[],"features":["tlsMixed","later"]}"#;
        let (_, back) = decode("k8slb-node-lb-1", Some(newer)).unwrap();
        assert_eq!(back.features(), crate::features::Features::this_build());
    }

    #[test]
    fn a_report_is_bounded() {
        let many = (0..200).map(|i| Refused {
            object: format!("Service ns/s{i:03}").parse().unwrap(),
            error: "x".repeat(10_000),
        });
        let r = NodeReport::new(&node("lb-1"), "nginx", many);
        assert_eq!(
            (r.quarantined.len(), r.more),
            (MAX_ENTRIES, 200 - MAX_ENTRIES)
        );
        assert!(r
            .quarantined
            .iter()
            .all(|q| q.error.len() == MAX_ERROR_CHARS));
        assert!(r.to_json().len() < 64 * 1024);
    }

    #[test]
    fn the_configmap_name_is_a_valid_name_for_any_node_name() {
        assert_eq!(configmap_name(&node("lb-1")), "k8slb-node-lb-1");
        let long = format!(
            "{}.{}.{}",
            "a".repeat(63),
            vec!["b".repeat(63); 2].join("."),
            "c".repeat(61)
        );
        assert_eq!(long.len(), 253);
        let n = node(&long);
        let name = configmap_name(&n);
        assert!(name.len() <= 253, "{}", name.len());
        assert!(name.starts_with(REPORT_PREFIX));
        assert!(name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'));
        assert_ne!(name, configmap_name(&node(&long.replacen('c', "d", 1))));
        let r = NodeReport::new(&n, "haproxy", []);
        assert_eq!(decode(&name, Some(&r.to_json())).unwrap().0, n);
    }
}
