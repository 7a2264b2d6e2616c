//! Hostnames: the intersection of a listener's and a route's, listener isolation, and
//! the virtual host a rule goes into.

use super::*;

/// A hostname as the listener or route gives it: validated, lowercase.
pub(super) fn hostname(s: &str) -> Option<Hostname> {
    s.parse().ok()
}

/// The hostnames a route serves on a listener: the intersection of the listener's
/// hostname (`None`: any) with the route's (`[]`: any). `None` in the result is "any";
/// an empty result means no intersection.
pub fn intersect(listener: Option<&Hostname>, route: &[Hostname]) -> Vec<Option<Hostname>> {
    match (listener, route.is_empty()) {
        (None, true) => vec![None],
        (None, false) => route.iter().cloned().map(Some).collect(),
        (Some(l), true) => vec![Some(l.clone())],
        (Some(l), false) => {
            let mut out = BTreeSet::new();
            for r in route {
                if r == l
                    || (l.is_wildcard() && !r.is_wildcard() && l.matches_any_depth(r.as_str()))
                {
                    out.insert(r.clone());
                } else if r.is_wildcard() && !l.is_wildcard() && r.matches_any_depth(l.as_str()) {
                    out.insert(l.clone());
                } else if l.is_wildcard() && r.is_wildcard() {
                    // The more specific of two wildcards, if one contains the other.
                    let (ls, rs) = (&l.as_str()[1..], &r.as_str()[1..]);
                    if rs.ends_with(ls) {
                        out.insert(r.clone());
                    } else if ls.ends_with(rs) {
                        out.insert(l.clone());
                    }
                }
            }
            out.into_iter().map(Some).collect()
        }
    }
}

/// The virtual host of `host` in `l`, added (without rules) if new; `index` is where
/// each of `l`'s virtual hosts is (kept up to date here).
pub(super) fn vhost<'l>(
    (l, index): (&'l mut Listener, &mut BTreeMap<Option<Hostname>, usize>),
    host: Option<Hostname>,
) -> &'l mut VirtualHost {
    let i = match index.get(&host) {
        Some(i) => *i,
        None => {
            index.insert(host.clone(), l.virtual_hosts.len());
            l.virtual_hosts.push(VirtualHost {
                // The Gateway API's wildcards are suffix matches.
                any_depth: host.as_ref().is_some_and(Hostname::is_wildcard),
                host,
                rules: vec![],
            });
            l.virtual_hosts.len() - 1
        }
    };
    &mut l.virtual_hosts[i]
}

/// Is listener hostname `h` more specific than `than` (`None`: any host) and within it?
pub(super) fn narrower_than(h: &Hostname, than: Option<&Hostname>) -> bool {
    match than {
        None => true,
        Some(t) if !t.is_wildcard() => false,
        Some(t) => h != t && t.matches_any_depth(h.as_str()),
    }
}

/// Does listener hostname `h` take every request for `host` (a route's hostname on a
/// less specific listener; `None`: any host, which no hostname covers)?
pub(super) fn covers(h: &Hostname, host: Option<&Hostname>) -> bool {
    match host {
        None => false,
        Some(x) if h.is_wildcard() => x == h || h.matches_any_depth(x.as_str()),
        Some(x) => x == h,
    }
}
