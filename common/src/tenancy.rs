//! Hosts belong to namespaces (OpenShift router's `namespaceOwnership: Strict` as the
//! anchor): the namespace of the oldest Ingress or HTTPRoute that claims a host owns it,
//! and the claims of other namespaces on that host are refused (`HostConflict`) until the
//! owner lets go.
//!
//! - A **claim** is a host an object names: an Ingress's rule hosts and `tls[].hosts`, an
//!   HTTPRoute's (or GRPCRoute's) `spec.hostnames` that a listener it may attach to
//!   could serve ([`crate::gateway::route_host_claims`]), a ListenerSet's listener
//!   `hostname`. Hosts are compared in lowercase after removing one
//!   trailing dot. A wildcard claims every name below it (`*.example.com` and
//!   `a.example.com`, or `*.a.example.com`, are the same claim for ownership), so a
//!   wildcard can never be used to take another namespace's host, nor a host to cut into
//!   another namespace's wildcard.
//! - **Order** is the objects' creation time, then kind, then `<namespace>/<name>`: the oldest
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

/// A host as ownership compares it: lowercase, one trailing dot removed (borrowed when
/// it already is).
pub fn normalize(host: &str) -> std::borrow::Cow<'_, str> {
    let h = host.strip_suffix('.').unwrap_or(host);
    if h.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(h.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(h)
    }
}

/// Who claimed a host first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub host: String,
    pub namespace: String,
    /// `Ingress ns/name`, `HTTPRoute ns/name`.
    pub object: String,
}

/// The owners of every claimed host, and the admin's sharing rules. Lookups of a name
/// and of the wildcards above it allocate nothing (they run for every claim of every
/// plan); only a wildcard's question (every name below it) is a range of [`key`]s.
#[derive(Debug, Clone, Default)]
pub struct HostOwners {
    /// Accepted claims of a name (`a.example.com`), by the name.
    names: BTreeMap<String, Claim>,
    /// Accepted claims of a wildcard (`*.example.com`), by its suffix (`example.com`).
    wildcards: BTreeMap<String, Claim>,
    /// Every accepted claim's [`key`] → its host: the names below a domain are one range.
    reversed: BTreeMap<String, String>,
    /// Namespace → its sharing group (namespaces in no group are their own).
    groups: BTreeMap<String, usize>,
    shared: bool,
    /// Some claim was refused (else nothing is to take out of the objects).
    any_refused: bool,
}

/// `a.example.com` → `com.example.a`; `*.example.com` → `com.example.*`.
fn key(host: &str) -> String {
    host.rsplit('.').collect::<Vec<_>>().join(".")
}

impl HostOwners {
    /// No claim yet, with the admin's sharing rules.
    pub fn new(tenancy: &Tenancy) -> HostOwners {
        HostOwners {
            groups: tenancy
                .namespace_groups
                .iter()
                .enumerate()
                .flat_map(|(i, g)| g.iter().map(move |ns| (ns.clone(), i)))
                .collect(),
            shared: tenancy.shared_hosts,
            ..Default::default()
        }
    }

    /// Whether the admin turned ownership off (`hostOwnership: Shared`).
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// Whether some claim was refused: only then do objects lose anything.
    pub fn any_refused(&self) -> bool {
        self.any_refused
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
            self.any_refused = true;
            return false;
        }
        let (map, k) = match h.strip_prefix("*.") {
            Some(suffix) => (&mut self.wildcards, suffix),
            None => (&mut self.names, &*h),
        };
        if !map.contains_key(k) {
            map.insert(
                k.to_string(),
                Claim {
                    host: h.to_string(),
                    namespace: namespace.to_string(),
                    object: object(),
                },
            );
            self.reversed.insert(key(&h), h.to_string());
        }
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
        if self.shared || (self.names.is_empty() && self.wildcards.is_empty()) {
            return None;
        }
        let h = normalize(host);
        let other = |c: &&Claim| !self.same_tenant(&c.namespace, namespace);
        let wildcard = h.strip_prefix("*.");
        // The same name (or wildcard), then every wildcard above it.
        let same = match wildcard {
            Some(suffix) => self.wildcards.get(suffix),
            None => self.names.get(&*h),
        };
        if let Some(c) = same.filter(other) {
            return Some(c);
        }
        let mut rest = wildcard.unwrap_or(&h);
        while let Some((_, parent)) = rest.split_once('.') {
            if let Some(c) = self.wildcards.get(parent).filter(other) {
                return Some(c);
            }
            rest = parent;
        }
        // A wildcard: every name below it.
        let prefix = format!("{}.", key(wildcard?));
        self.reversed
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(_, host)| match host.strip_prefix("*.") {
                Some(suffix) => self.wildcards.get(suffix),
                None => self.names.get(host),
            })
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
        let hosts: Vec<&str> = o.reversed.values().map(String::as_str).collect();
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
        // Two claims are one for ownership when equal, or one is a wildcard over the
        // other at any depth; in both orders of claiming.
        for (a, b, one) in [
            ("a.example.com", "a.example.com", true),
            ("*.example.com", "a.example.com", true),
            ("a.b.example.com", "*.example.com", true),
            ("*.example.com", "*.a.example.com", true),
            ("*.example.com", "example.com", false),
            ("a.example.com", "b.example.com", false),
            ("*.example.com", "aexample.com", false),
        ] {
            for (first, second) in [(a, b), (b, a)] {
                let mut o = HostOwners::new(&Tenancy::default());
                o.claim(first, "x", || "Ingress x/i".into());
                assert_eq!(
                    o.owner_of(second, "y").is_some(),
                    one,
                    "{first} then {second}"
                );
            }
        }
        assert_eq!(normalize("Bank.Example.COM."), "bank.example.com");
        assert_eq!(normalize("bank.example.com.."), "bank.example.com.");
    }
}
