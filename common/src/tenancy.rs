//! Hosts belong to namespaces (OpenShift router's `namespaceOwnership: Strict` as the
//! anchor): the namespace of the oldest Ingress or HTTPRoute that claims a host owns it,
//! and the claims of other namespaces on that host are refused (`HostConflict`) until the
//! owner lets go.
//!
//! - A **claim** is a host an object names: an Ingress's rule hosts and `tls[].hosts`, an
//!   HTTPRoute's `spec.hostnames`. Hosts are compared in lowercase after removing one
//!   trailing dot. A wildcard claims every name below it (`*.example.com` and
//!   `a.example.com`, or `*.a.example.com`, are the same claim for ownership), so a
//!   wildcard can never be used to take another namespace's host, nor a host to cut into
//!   another namespace's wildcard.
//! - **Order** is the objects' creation time, then kind, namespace and name: the oldest
//!   claim wins, as for paths and ports. A refused claim takes over by itself once the
//!   owner's objects no longer claim the host (nothing is remembered between plans).
//! - **Sharing** is the admin's: `tenancy.hostOwnership: "Shared"` turns the rule off (any
//!   namespace may serve any host, the behaviour before), and `tenancy.namespaceGroups`
//!   lists groups of namespaces that share their hosts (a team's namespaces).
//!
//! What is refused: an Ingress rule for a host another namespace owns, and that host in
//! its `tls[].hosts` (so its certificate never terminates TLS for the host); an HTTPRoute
//! hostname another namespace owns (a route left with none of its hostnames is not served
//! at all: without hostnames it would match every host). A default backend never takes
//! the unmatched requests of a host that another namespace owns
//! ([`HostOwners::owner_of`] is asked by the Ingress translation).
//!
//! Pure. This module is the ownership index; the plan (`plan::hosts`) feeds it the
//! claims of the objects, in order, and takes the refused ones out.

use crate::config::Tenancy;
use std::collections::BTreeMap;

/// A host as ownership compares it: lowercase, one trailing dot removed.
pub fn normalize(host: &str) -> String {
    let h = host.strip_suffix('.').unwrap_or(host);
    h.to_ascii_lowercase()
}

/// Whether two (normalized) host claims are one for ownership: equal, or one a wildcard
/// over the other (at any depth).
pub fn overlap(a: &str, b: &str) -> bool {
    fn covers(w: &str, h: &str) -> bool {
        w.strip_prefix("*.")
            .is_some_and(|suffix| h.len() > suffix.len() + 1 && h.ends_with(&format!(".{suffix}")))
    }
    a == b || covers(a, b) || covers(b, a)
}

/// Who claimed a host first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub host: String,
    pub namespace: String,
    /// `Ingress ns/name`, `HTTPRoute ns/name`.
    pub object: String,
}

/// The owners of every claimed host, and the admin's sharing rules.
#[derive(Debug, Clone, Default)]
pub struct HostOwners {
    /// The accepted claims by [`key`]: labels reversed, so that every name below a
    /// domain is one range of keys.
    claims: BTreeMap<String, Claim>,
    /// Namespace → its sharing group (namespaces in no group are their own).
    groups: BTreeMap<String, usize>,
    shared: bool,
}

/// `a.example.com` → `com.example.a`; `*.example.com` → `com.example.*`.
fn key(host: &str) -> String {
    host.rsplit('.').collect::<Vec<_>>().join(".")
}

impl HostOwners {
    /// No claim yet, with the admin's sharing rules.
    pub fn new(tenancy: &Tenancy) -> HostOwners {
        HostOwners {
            claims: BTreeMap::new(),
            groups: tenancy
                .namespace_groups
                .iter()
                .enumerate()
                .flat_map(|(i, g)| g.iter().map(move |ns| (ns.clone(), i)))
                .collect(),
            shared: tenancy.shared_hosts,
        }
    }

    /// Whether the admin turned ownership off (`hostOwnership: Shared`).
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// `namespace`'s claim on `host` (made by `object`, e.g. `Ingress ns/name`), in claim
    /// order: accepted unless another tenant's accepted claim overlaps it. Returns
    /// whether it was accepted.
    pub fn claim(&mut self, host: &str, namespace: &str, object: impl FnOnce() -> String) -> bool {
        if self.shared {
            return true;
        }
        let h = normalize(host);
        if self.owner_of(&h, namespace).is_some() {
            return false;
        }
        self.claims.entry(key(&h)).or_insert_with(|| Claim {
            host: h,
            namespace: namespace.to_string(),
            object: object(),
        });
        true
    }

    fn same_tenant(&self, a: &str, b: &str) -> bool {
        self.shared
            || a == b
            || matches!((self.groups.get(a), self.groups.get(b)), (Some(x), Some(y)) if x == y)
    }

    /// The accepted claim of another tenant than `namespace` that `host` overlaps, if
    /// any: `namespace` may not serve `host`.
    pub fn owner_of(&self, host: &str, namespace: &str) -> Option<&Claim> {
        if self.shared || self.claims.is_empty() {
            return None;
        }
        let h = normalize(host);
        let other = |c: &&Claim| !self.same_tenant(&c.namespace, namespace);
        // The same name, and every wildcard above it.
        let mut above = vec![key(&h)];
        let mut rest = h.strip_prefix("*.").unwrap_or(&h);
        while let Some((_, parent)) = rest.split_once('.') {
            above.push(key(&format!("*.{parent}")));
            rest = parent;
        }
        if let Some(c) = above.iter().filter_map(|k| self.claims.get(k)).find(other) {
            return Some(c);
        }
        // A wildcard: every name below it.
        let suffix = h.strip_prefix("*.")?;
        let prefix = format!("{}.", key(suffix));
        self.claims
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(_, c)| c)
            .find(other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_index_finds_every_overlap() {
        let mut o = HostOwners::new(&Tenancy::default());
        for (host, ns) in [
            ("a.example.com", "a"),
            ("*.b.example.com", "b"),
            ("*.example.com", "c"),
            ("d.b.example.com", "d"),
        ] {
            o.claim(host, ns, || format!("Ingress {ns}/x"));
        }
        // c's wildcard overlaps a's and b's older claims: refused; d's host is under b's.
        let hosts: Vec<&str> = o.claims.values().map(|c| c.host.as_str()).collect();
        assert_eq!(hosts, ["a.example.com", "*.b.example.com"]);
        for (host, ns, owner) in [
            ("a.example.com", "z", Some("a")),
            ("A.Example.com.", "z", Some("a")),
            ("a.example.com", "a", None),
            ("q.b.example.com", "z", Some("b")),
            ("q.r.b.example.com", "z", Some("b")),
            ("b.example.com", "z", None),
            ("*.example.com", "z", Some("a")),
            ("*.example.com", "a", Some("b")),
            ("*.q.b.example.com", "z", Some("b")),
            ("other.com", "z", None),
        ] {
            assert_eq!(
                o.owner_of(host, ns).map(|c| c.namespace.as_str()),
                owner,
                "{host} for {ns}"
            );
        }
    }

    #[test]
    fn hosts_overlap_when_equal_or_under_a_wildcard_at_any_depth() {
        assert!(overlap("a.example.com", "a.example.com"));
        assert!(overlap("*.example.com", "a.example.com"));
        assert!(overlap("a.b.example.com", "*.example.com"));
        assert!(overlap("*.example.com", "*.a.example.com"));
        assert!(!overlap("*.example.com", "example.com"));
        assert!(!overlap("a.example.com", "b.example.com"));
        assert!(!overlap("*.example.com", "aexample.com"));
        assert_eq!(normalize("Bank.Example.COM."), "bank.example.com");
        assert_eq!(normalize("bank.example.com.."), "bank.example.com.");
    }
}
