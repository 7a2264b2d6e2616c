//! The problems one plan finds: collected once each, then capped per object and ordered.

use crate::problem::{cut, ObjRef, Problem, Reason};
use std::collections::BTreeMap;

/// Problems listed per object at most, those that say why a Service has no address
/// first; the rest are counted in one `TooManyProblems`. A Service can
/// carry thousands of bad annotations (256 KiB of them): each problem is an Event, and
/// the state is published to every node.
pub const MAX_PROBLEMS_PER_OBJECT: usize = 10;

/// Printable and short: how a user's value appears in a problem.
pub(super) fn short(s: &str) -> String {
    cut(s, 64)
}

/// The problems found so far, each once, each with whether it explains a missing or
/// kept-back address (never hidden by the cap).
#[derive(Debug, Default)]
pub(super) struct Problems(BTreeMap<Problem, bool>);

impl Problems {
    /// A problem; it explains an address if its reason does.
    pub fn insert(&mut self, p: Problem) {
        let blocks = p.reason.blocks_allocation();
        self.mark(p, blocks);
    }

    /// A problem that explains an address whatever its reason: an `InvalidAnnotation` of
    /// the address annotations (`loadbalancer/pool`, `loadbalancer/ips`,
    /// `spec.loadBalancerIP`).
    pub fn insert_blocking(&mut self, p: Problem) {
        self.mark(p, true);
    }

    fn mark(&mut self, p: Problem, blocks: bool) {
        *self.0.entry(p).or_insert(blocks) |= blocks;
    }

    /// Take over every problem of `other`.
    pub fn absorb(&mut self, other: Problems) {
        for (p, blocks) in other.0 {
            self.mark(p, blocks);
        }
    }

    /// Per object at most [`MAX_PROBLEMS_PER_OBJECT`], the ones that explain an address
    /// first, then the rest, in order; sorted.
    pub fn capped(self) -> Vec<Problem> {
        let mut per: BTreeMap<ObjRef, (Vec<Problem>, Vec<Problem>)> = BTreeMap::new();
        for (p, blocks) in self.0 {
            let e = per.entry(p.object.clone()).or_default();
            if blocks {
                e.0.push(p);
            } else {
                e.1.push(p);
            }
        }
        let mut out = Vec::new();
        for (object, (first, rest)) in per {
            let total = first.len() + rest.len();
            out.extend(first.into_iter().chain(rest).take(MAX_PROBLEMS_PER_OBJECT));
            if total > MAX_PROBLEMS_PER_OBJECT {
                out.push(Problem {
                    object,
                    reason: Reason::TooManyProblems,
                    message: format!(
                        "{} more problems not listed (the first {MAX_PROBLEMS_PER_OBJECT} are)",
                        total - MAX_PROBLEMS_PER_OBJECT
                    ),
                });
            }
        }
        out.sort();
        out
    }
}

impl FromIterator<Problem> for Problems {
    fn from_iter<I: IntoIterator<Item = Problem>>(iter: I) -> Self {
        let mut out = Problems::default();
        for p in iter {
            out.insert(p);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(reason: Reason, message: &str) -> Problem {
        Problem::new(
            "Service default/web".parse().unwrap(),
            reason,
            message.to_string(),
        )
    }

    #[test]
    fn problems_that_explain_an_address_survive_the_cap() {
        let mut ps: Problems = (0..20)
            .map(|i| p(Reason::UnknownAnnotation, &format!("a{i:02}")))
            .collect();
        ps.insert(p(Reason::PoolExhausted, "z"));
        ps.insert_blocking(p(Reason::InvalidAnnotation, "zz"));
        let out = ps.capped();
        assert_eq!(out.len(), MAX_PROBLEMS_PER_OBJECT + 1);
        assert!(out.iter().any(|p| p.reason == Reason::PoolExhausted));
        assert!(out.iter().any(|p| p.message == "zz"));
        let more = out.iter().find(|p| p.reason == Reason::TooManyProblems);
        assert!(more.unwrap().message.starts_with("12 more problems"));
    }

    #[test]
    fn an_annotation_problem_blocks_only_when_marked() {
        let mut ps: Problems = (0..10)
            .map(|i| p(Reason::InvalidAnnotation, &format!("a{i:02}")))
            .collect();
        // Its text names the pool annotation, but it was not made as an address problem.
        ps.insert(p(Reason::InvalidAnnotation, "zz loadbalancer/pool"));
        let out = ps.capped();
        assert!(!out.iter().any(|p| p.message.starts_with("zz")));
    }
}
