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
//! Pure: the filtered objects and the problems are computed from the objects alone.

use crate::config::Tenancy;
use crate::gateway::types::HttpRoute;
use crate::objects::Objects;
use crate::problem::{ObjRef, Problem, Reason};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::borrow::Cow;
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

struct Claimant<'a> {
    created: Option<&'a Time>,
    kind: &'static str,
    namespace: &'a str,
    name: &'a str,
    hosts: Vec<String>,
}

fn ingress_hosts(i: &Ingress) -> Vec<String> {
    let spec = i.spec.as_ref();
    let rules = spec
        .and_then(|s| s.rules.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|r| r.host.clone());
    let tls = spec
        .and_then(|s| s.tls.as_ref())
        .into_iter()
        .flatten()
        .flat_map(|t| t.hosts.clone().unwrap_or_default());
    rules.chain(tls).filter(|h| !h.is_empty()).collect()
}

/// Decide who owns every host that `ingresses` and `routes` claim.
pub fn owners<'a>(
    tenancy: &Tenancy,
    ingresses: impl IntoIterator<Item = &'a Ingress>,
    routes: impl IntoIterator<Item = &'a HttpRoute>,
) -> HostOwners {
    let mut me = HostOwners {
        claims: BTreeMap::new(),
        groups: tenancy
            .namespace_groups
            .iter()
            .enumerate()
            .flat_map(|(i, g)| g.iter().map(move |ns| (ns.clone(), i)))
            .collect(),
        shared: tenancy.shared_hosts,
    };
    if me.shared {
        return me;
    }
    let mut claimants: Vec<Claimant> = ingresses
        .into_iter()
        .map(|i| Claimant {
            created: i.metadata.creation_timestamp.as_ref(),
            kind: "Ingress",
            namespace: i.metadata.namespace.as_deref().unwrap_or("default"),
            name: i.metadata.name.as_deref().unwrap_or_default(),
            hosts: ingress_hosts(i),
        })
        .chain(routes.into_iter().map(|r| Claimant {
            created: r.metadata.creation_timestamp.as_ref(),
            kind: "HTTPRoute",
            namespace: r.metadata.namespace.as_deref().unwrap_or("default"),
            name: r.metadata.name.as_deref().unwrap_or_default(),
            hosts: r.spec.hostnames.clone(),
        }))
        .collect();
    claimants.sort_by(|a, b| {
        (a.created.map(|t| t.0), a.kind, a.namespace, a.name).cmp(&(
            b.created.map(|t| t.0),
            b.kind,
            b.namespace,
            b.name,
        ))
    });
    for c in claimants {
        for h in c.hosts.iter().map(|h| normalize(h)) {
            if me.owner_of(&h, c.namespace).is_none() {
                me.claims.entry(key(&h)).or_insert_with(|| Claim {
                    host: h,
                    namespace: c.namespace.to_string(),
                    object: format!("{} {}/{}", c.kind, c.namespace, c.name),
                });
            }
        }
    }
    me
}

fn refused(owner: &Claim, host: &str, what: &str) -> String {
    format!(
        "host {} belongs to namespace {} ({} claimed it first); {what}",
        crate::problem::printable(host.chars().take(253).collect()),
        owner.namespace,
        owner.object
    )
}

/// `objs` with every claim on a host another namespace owns taken out (an owned
/// host's rules and TLS hosts of an Ingress, an HTTPRoute's hostnames), each with a
/// `HostConflict` problem on its object. Borrowed as it is when nothing is refused.
pub fn enforce<'a>(
    owners: &HostOwners,
    objs: &'a Objects,
    problems: &mut Vec<Problem>,
) -> Cow<'a, Objects> {
    if owners.shared {
        return Cow::Borrowed(objs);
    }
    let ns_of = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.namespace.clone().unwrap_or_else(|| "default".into())
    };
    let ingress_refused = |i: &Ingress| {
        let ns = ns_of(&i.metadata);
        ingress_hosts(i)
            .iter()
            .any(|h| owners.owner_of(h, &ns).is_some())
    };
    let route_refused = |r: &HttpRoute| {
        let ns = ns_of(&r.metadata);
        r.spec
            .hostnames
            .iter()
            .any(|h| owners.owner_of(h, &ns).is_some())
    };
    if !objs.ingresses.iter().any(ingress_refused) && !objs.http_routes.iter().any(route_refused) {
        return Cow::Borrowed(objs);
    }
    let mut out = objs.clone();
    for i in out.ingresses.iter_mut().filter(|i| ingress_refused(i)) {
        let ns = ns_of(&i.metadata);
        let object = crate::ingress::object(i);
        let Some(spec) = i.spec.as_mut() else {
            continue;
        };
        if let Some(rules) = spec.rules.as_mut() {
            rules.retain(|r| {
                let Some(owner) = r.host.as_deref().and_then(|h| owners.owner_of(h, &ns)) else {
                    return true;
                };
                problems.push(Problem::new(
                    object.clone(),
                    Reason::HostConflict,
                    refused(
                        owner,
                        r.host.as_deref().unwrap_or_default(),
                        "its rules are not served",
                    ),
                ));
                false
            });
        }
        if let Some(tls) = spec.tls.as_mut() {
            tls.retain_mut(|t| {
                let Some(hosts) = t.hosts.as_mut() else {
                    return true;
                };
                let before = hosts.len();
                hosts.retain(|h| match owners.owner_of(h, &ns) {
                    Some(owner) => {
                        problems.push(Problem::new(
                            object.clone(),
                            Reason::HostConflict,
                            refused(owner, h, "this Ingress's certificate is not served for it"),
                        ));
                        false
                    }
                    None => true,
                });
                // An entry left with no host would become a default-certificate
                // candidate: it goes.
                !(before > 0 && hosts.is_empty())
            });
        }
    }
    out.http_routes.retain_mut(|r| {
        if !route_refused(r) {
            return true;
        }
        let ns = ns_of(&r.metadata);
        let object = ObjRef::HttpRoute {
            namespace: ns.clone(),
            name: r.metadata.name.clone().unwrap_or_default(),
        };
        let wanted = r.spec.hostnames.len();
        r.spec.hostnames.retain(|h| match owners.owner_of(h, &ns) {
            Some(owner) => {
                problems.push(Problem::new(
                    object.clone(),
                    Reason::HostConflict,
                    refused(owner, h, "not served for this HTTPRoute"),
                ));
                false
            }
            None => true,
        });
        if wanted > 0 && r.spec.hostnames.is_empty() {
            problems.push(Problem::new(
                object,
                Reason::HostConflict,
                "every hostname of this HTTPRoute belongs to another namespace; it is not served (without hostnames it would match every host)",
            ));
            return false;
        }
        true
    });
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_index_finds_every_overlap() {
        use k8s_openapi::api::networking::v1::Ingress;
        let ing = |ns: &str, name: &str, sec: u32, host: &str| -> Ingress {
            serde_json::from_value(serde_json::json!({
                "metadata": { "namespace": ns, "name": name,
                    "creationTimestamp": format!("2026-01-01T00:00:{sec:02}Z") },
                "spec": { "rules": [ { "host": host } ] }
            }))
            .unwrap()
        };
        let claims = [
            ing("a", "x", 1, "a.example.com"),
            ing("b", "y", 2, "*.b.example.com"),
            ing("c", "z", 3, "*.example.com"),
            ing("d", "w", 4, "d.b.example.com"),
        ];
        let o = owners(&Tenancy::default(), &claims, []);
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
