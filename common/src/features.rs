//! Version skew: the optional features an actor renders, and which of them the planner
//! may use.
//!
//! During a rolling upgrade (or a rollback) the leader watcher plans states that actors
//! of another release render. serde ignores fields it does not know, so an actor older
//! than a feature silently drops the field that asks for it. For most features that is
//! safe; for those listed in [`Feature`] it is not (an older actor would serve the
//! object wrongly), so the planner uses such a feature only once every LB node's actor
//! says it renders it, as Kubernetes does for version skew. The object that asks for it
//! too early is told so in its status (and an Event); nothing else is affected.
//!
//! Each actor lists what its build renders ([`Feature::ALL`]) in its node report
//! ([`crate::report::NodeReport::features`]); the watcher intersects the reports of the
//! plan's LB nodes ([`Fleet::of`]). A report from an actor older than this mechanism (no
//! `features` key) counts as having none. A node with no report yet (a node just
//! labelled, whose actor is starting: every actor writes its report at start) takes
//! nothing away, unless no LB node has reported at all: else every node added to the LB
//! set would withdraw every gated object, fleet-wide, until its actor reported. Where no
//! actor reports (the files source, `k8slb-watcher plan`), the fleet is assumed to be
//! this build ([`Fleet::ThisBuild`]).

use crate::names::NodeName;
use std::collections::{BTreeMap, BTreeSet};

/// An optional feature: one that an actor older than it would serve wrongly. The one
/// place they are defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// `TLS` listeners of both modes on one port (TLSRouteModeMixed,
    /// `StreamRoute::passthrough`): an older actor would terminate the passthrough
    /// names with the other listener's certificate.
    TlsMixed,
}

impl Feature {
    /// Every feature this build renders.
    pub const ALL: [Feature; 1] = [Feature::TlsMixed];

    /// Its name in a node report.
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::TlsMixed => "tlsMixed",
        }
    }

    /// The feature of this name; `None` for a name this build does not know (a newer
    /// actor's: nothing this build plans can use it).
    pub fn parse(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of features.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features(BTreeSet<Feature>);

impl Features {
    /// What this build renders.
    pub fn this_build() -> Features {
        Features(Feature::ALL.into_iter().collect())
    }

    /// No optional feature.
    pub fn none() -> Features {
        Features::default()
    }

    /// The features a report names (names this build does not know are left out).
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Features {
        Features(
            names
                .iter()
                .filter_map(|n| Feature::parse(n.as_ref()))
                .collect(),
        )
    }

    /// Their names, sorted, as a report lists them.
    pub fn names(&self) -> Vec<String> {
        self.0.iter().map(|f| f.as_str().to_string()).collect()
    }

    pub fn contains(&self, f: Feature) -> bool {
        self.0.contains(&f)
    }

    fn intersect(&mut self, other: &Features) {
        self.0.retain(|f| other.0.contains(f));
    }
}

/// What the LB nodes' actors render, as the planner learns it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Fleet {
    /// No actor reports in this mode (the files source, `plan`): every actor is taken
    /// to be this build.
    #[default]
    ThisBuild,
    /// What each node's actor reported (the Kubernetes source); a node not listed has
    /// no report yet.
    Reported(BTreeMap<NodeName, Features>),
}

impl Fleet {
    /// The features every one of `lb_nodes` that has reported renders; none while no
    /// LB node has reported (with no LB node: this build's; nothing is served then
    /// anyway).
    ///
    /// A node without a report yet is left out: its actor writes one at start, so it is
    /// a node just added (or whose report was deleted: the actor writes it again within
    /// minutes). Counting it as featureless would withdraw every gated object on every
    /// node each time a node joins. The cost: an actor older than a feature on a node
    /// that just joined may render a state that uses it for the seconds before its
    /// report (without the feature) arrives.
    pub fn of<'n>(&self, lb_nodes: impl IntoIterator<Item = &'n NodeName>) -> Features {
        let mut all = Features::this_build();
        let Fleet::Reported(by_node) = self else {
            return all;
        };
        let (mut nodes, mut reported) = (0, 0);
        for n in lb_nodes {
            nodes += 1;
            if let Some(f) = by_node.get(n) {
                all.intersect(f);
                reported += 1;
            }
        }
        if nodes > 0 && reported == 0 {
            return Features::none();
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(s: &str) -> NodeName {
        s.parse().unwrap()
    }

    #[test]
    fn every_feature_has_a_distinct_name_that_parses_back() {
        let names = Features::this_build().names();
        assert_eq!(names, ["tlsMixed"]);
        for f in Feature::ALL {
            assert_eq!(Feature::parse(f.as_str()), Some(f));
        }
        assert_eq!(Feature::parse("tlsmixed"), None);
        assert_eq!(
            Features::from_names(&["futureThing", "tlsMixed"]),
            Features::this_build()
        );
    }

    #[test]
    fn the_fleet_has_a_feature_only_when_every_lb_node_reports_it() {
        let all = Features::this_build();
        let both = Fleet::Reported(BTreeMap::from([
            (node("lb1"), all.clone()),
            (node("lb2"), all.clone()),
            // Not an LB node of the plan: it does not count.
            (node("old"), Features::none()),
        ]));
        let lbs = [node("lb1"), node("lb2")];
        assert!(both.of(&lbs).contains(Feature::TlsMixed));
        let one_old = Fleet::Reported(BTreeMap::from([
            (node("lb1"), all.clone()),
            (node("lb2"), Features::none()),
        ]));
        assert!(!one_old.of(&lbs).contains(Feature::TlsMixed));
        assert!(one_old.of(&lbs[..1]).contains(Feature::TlsMixed));
    }

    #[test]
    fn an_lb_node_without_a_report_yet_takes_nothing_away_unless_no_node_has_reported() {
        // lb2 was just labelled: its actor has not written its report yet. The others'
        // features stay (else each node added would withdraw them on every node).
        let only_lb1 = Fleet::Reported(BTreeMap::from([(node("lb1"), Features::this_build())]));
        assert_eq!(
            only_lb1.of(&[node("lb1"), node("lb2")]),
            Features::this_build()
        );
        // Once it reports, its report counts.
        let lb2_old = Fleet::Reported(BTreeMap::from([
            (node("lb1"), Features::this_build()),
            (node("lb2"), Features::none()),
        ]));
        assert_eq!(lb2_old.of(&[node("lb1"), node("lb2")]), Features::none());
        // No LB node has reported (a fresh install, reports not written yet): none.
        assert_eq!(
            Fleet::Reported(BTreeMap::new()).of(&[node("lb1")]),
            Features::none()
        );
        assert_eq!(
            Fleet::Reported(BTreeMap::from([(node("other"), Features::this_build())]))
                .of(&[node("lb1"), node("lb2")]),
            Features::none()
        );
    }

    #[test]
    fn without_reports_the_fleet_is_this_build() {
        assert_eq!(
            Fleet::ThisBuild.of(&[node("lb1"), node("lb2")]),
            Features::this_build()
        );
        assert_eq!(Fleet::default(), Fleet::ThisBuild);
    }
}
