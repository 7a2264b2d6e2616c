//! The quarantine: the backstop for a config the proxy's own checker refuses (issue 20
//! item 2). Every block of a rendered config belongs to an owner (a Service, or the
//! Ingress / HTTPRoute / L4 route / Gateway of a route: [`k8slb_common::owners`]). When
//! `haproxy -c` or `nginx -t` refuses the config of a state, the applier finds the owners
//! responsible by bisection ([`bisect`], pure, here), serves the state without them
//! ([`k8slb_common::owners::without`]) and reports them (a log line each, the
//! `k8slb_actor_quarantined_objects` gauge). The quarantine is recomputed on every new
//! state: an object whose contributions change is checked again, and a fixed one comes
//! back by itself.
//!
//! The bisection searches prefixes of the (sorted) owners: the config with none of them
//! must pass (else the fault is nobody's: the admin's sections, a template; then the
//! last good config stays, as before the quarantine existed); a binary search finds the
//! shortest prefix that fails, whose last owner is a culprit; it is left out, and the
//! search goes on past it until the config with the rest passes. One culprit among `n`
//! owners takes `1 + ceil(log2 n)` checks, plus one to confirm the rest unless it was
//! the last owner; each further culprit `ceil(log2 m)` + 1 more (`m` the owners after
//! the previous one). Two owners that are refused only together (two objects whose
//! blocks clash) are found too: the later one is left out. The number of checks is
//! bounded ([`MAX_CHECKS`]); past it, nothing is applied and the last good config stays.

use k8slb_common::problem::ObjRef;
use std::collections::{BTreeMap, BTreeSet};

/// At most this many checks for one state (one culprit among 1,000 owners takes 12, five
/// among 10,000 about 75).
pub const MAX_CHECKS: usize = 96;

/// What [`bisect`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found<O> {
    /// The config without these owners passes (none of them can be left in).
    Culprits { culprits: Vec<O>, checks: usize },
    /// Even the config with no owner at all is refused: the fault is not an owner's.
    NotAnOwner { checks: usize },
    /// The search needed more than the allowed checks.
    OutOfChecks { checks: usize },
}

/// Find the owners without which the config passes, knowing that the config with all of
/// `owners` is refused. `passes(included)` renders and checks the config with only the
/// owners `included` (a prefix of `owners` with culprits taken out; always in `owners`'
/// order) and says whether the checker accepts it.
pub fn bisect<O: Clone>(
    owners: &[O],
    max_checks: usize,
    mut passes: impl FnMut(&[O]) -> bool,
) -> Found<O> {
    let mut checks = 0;
    let mut check = |included: &[O]| {
        checks += 1;
        passes(included)
    };
    if !check(&[]) {
        return Found::NotAnOwner { checks: 1 };
    }
    let mut included: Vec<O> = owners.to_vec();
    let mut culprits = Vec::new();
    // Invariant: `included[..good]` passes, `included` (whole) is refused.
    let mut good = 0;
    let mut used = 1;
    loop {
        let (mut lo, mut hi) = (good, included.len());
        while hi - lo > 1 {
            if used >= max_checks {
                return Found::OutOfChecks { checks: used };
            }
            let mid = lo + (hi - lo) / 2;
            used += 1;
            if check(&included[..mid]) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        // `included[..hi - 1]` passes and `included[..hi]` is refused.
        culprits.push(included.remove(hi - 1));
        good = hi - 1;
        if good == included.len() {
            break; // what is left is the prefix known to pass
        }
        if used >= max_checks {
            return Found::OutOfChecks { checks: used };
        }
        used += 1;
        if check(&included) {
            break;
        }
    }
    Found::Culprits {
        culprits,
        checks: used,
    }
}

/// `o` as a log field: escaped (names are validated when the state is planned, and this
/// is printed through the escaping anyway).
pub fn shown(o: &ObjRef) -> String {
    o.to_string().escape_debug().take(300).collect()
}

/// The owners of the quarantine now, with what each contributed when it was found: the
/// same contributions are left out again without a new bisection; a change of any of
/// them (the object was fixed, or changed again) re-checks the whole config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quarantine {
    pub culprits: BTreeSet<ObjRef>,
    pub contributions: Vec<String>,
    /// For each culprit, the checker's first error line about its part alone.
    pub errors: BTreeMap<ObjRef, String>,
}

/// The line of a checker's output that says what is wrong: HAProxy's first `[ALERT]`,
/// nginx's first `[emerg]`, else the first line that is not empty.
pub fn first_error_line(output: &str) -> &str {
    let lines = || output.lines().map(str::trim).filter(|l| !l.is_empty());
    lines()
        .find(|l| l.contains("[ALERT]") || l.contains("[emerg]"))
        .or_else(|| lines().next())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checker that refuses a config containing any of `bad` (or both of a `pair`).
    fn run(n: usize, bad: &[usize], pair: Option<(usize, usize)>) -> Found<usize> {
        let owners: Vec<usize> = (0..n).collect();
        bisect(&owners, MAX_CHECKS, |inc| {
            !inc.iter().any(|o| bad.contains(o))
                && !pair.is_some_and(|(a, b)| inc.contains(&a) && inc.contains(&b))
        })
    }

    #[test]
    fn bisection_finds_the_culprits_in_a_bounded_number_of_checks() {
        // (owners, culprits, checks): at most 1 + k * (ceil(log2 n) + 1) for k culprits.
        let table: &[(usize, &[usize], usize)] = &[
            (1, &[0], 1), // the empty config passes: the one owner
            (2, &[1], 2), // empty, [0] passes: owner 1, the last
            (8, &[3], 5),
            (1000, &[0], 11),
            (1000, &[999], 11), // the last: no confirming check
            (1000, &[517], 12),
            (1000, &[10, 900], 23),
            (10_000, &[4242], 15),
        ];
        for &(n, bad, checks) in table {
            let log2 = usize::BITS - (n - 1).leading_zeros();
            assert!(checks <= 1 + bad.len() * (log2 as usize + 1));
            assert_eq!(
                run(n, bad, None),
                Found::Culprits {
                    culprits: bad.to_vec(),
                    checks
                },
                "{bad:?} among {n}"
            );
        }
    }

    #[test]
    fn no_culprit_means_the_fault_is_not_an_owners() {
        let owners: Vec<usize> = (0..100).collect();
        assert_eq!(
            bisect(&owners, MAX_CHECKS, |_| false),
            Found::NotAnOwner { checks: 1 }
        );
    }

    #[test]
    fn two_owners_refused_only_together_lose_the_later_one() {
        match run(64, &[], Some((5, 40))) {
            Found::Culprits { culprits, checks } => {
                assert_eq!(culprits, vec![40]);
                assert!(checks <= 1 + 6 + 1, "{checks}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_number_of_checks_is_bounded() {
        // Every owner refused: the search gives up at the bound.
        let owners: Vec<usize> = (0..1000).collect();
        let mut calls = 0;
        let found = bisect(&owners, 20, |inc| {
            calls += 1;
            inc.is_empty()
        });
        assert_eq!(found, Found::OutOfChecks { checks: 20 });
        assert_eq!(calls, 20);
    }
}
