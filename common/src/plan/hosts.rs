//! Host ownership in the plan: the claims of our Ingresses, of the HTTPRoutes and
//! GRPCRoutes of our Gateways (and of the ListenerSets they take) and of those sets'
//! listeners, in age order, fed to the ownership index ([`crate::tenancy`]), and the
//! objects without the claims it refuses (each a `HostConflict` problem).

use crate::config::Tenancy;
use crate::gateway::grpc::GrpcRoute;
use crate::gateway::types::{HttpRoute, ListenerSet};
use crate::objects::Objects;
use crate::problem::{ObjRef, Problem, Reason};
use crate::tenancy::{Claim, HostOwners};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use std::borrow::Cow;

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

/// A route's claim: its kind, its metadata and the hostnames it may claim
/// ([`crate::gateway::route_host_claims`]).
pub(super) type RouteClaim<'a> = (&'static str, &'a ObjectMeta, Vec<&'a str>);

/// Decide who owns every host that `ingresses`, `routes` (HTTPRoutes, GRPCRoutes, with
/// the hostnames each may claim) and the listeners of ListenerSets (`sets`, with the
/// hostnames each claims) claim.
pub(super) fn owners<'a>(
    tenancy: &Tenancy,
    ingresses: impl IntoIterator<Item = &'a Ingress>,
    routes: impl IntoIterator<Item = RouteClaim<'a>>,
    sets: &[(&'a ListenerSet, Vec<&'a str>)],
) -> HostOwners {
    let mut me = HostOwners::new(tenancy);
    if me.shared() {
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
        .chain(routes.into_iter().map(|(kind, m, hosts)| Claimant {
            created: m.creation_timestamp.as_ref(),
            kind,
            namespace: m.namespace.as_deref().unwrap_or("default"),
            name: m.name.as_deref().unwrap_or_default(),
            hosts: hosts.into_iter().map(str::to_string).collect(),
        }))
        .chain(sets.iter().map(|(s, hosts)| Claimant {
            created: s.metadata.creation_timestamp.as_ref(),
            kind: "ListenerSet",
            namespace: s.metadata.namespace.as_deref().unwrap_or("default"),
            name: s.metadata.name.as_deref().unwrap_or_default(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
        }))
        .collect();
    // Then kind, then `<namespace>/<name>` as one string (the Gateway API's tie-break,
    // so that a ListenerSet's claims are in its listeners' precedence order).
    claimants.sort_by_cached_key(|c| {
        (
            c.created.map(|t| t.0),
            c.kind,
            format!("{}/{}", c.namespace, c.name),
        )
    });
    for c in claimants {
        for h in &c.hosts {
            me.claim(h, c.namespace, || {
                format!("{} {}/{}", c.kind, c.namespace, c.name)
            });
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
pub(super) fn enforce<'a>(
    owners: &HostOwners,
    objs: &'a Objects,
    problems: &mut Vec<Problem>,
) -> Cow<'a, Objects> {
    if owners.shared() || !owners.any_refused() {
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
    let grpc_refused = |r: &GrpcRoute| {
        let ns = ns_of(&r.metadata);
        r.spec
            .hostnames
            .iter()
            .any(|h| owners.owner_of(h, &ns).is_some())
    };
    if !objs.ingresses.iter().any(ingress_refused)
        && !objs.http_routes.iter().any(route_refused)
        && !objs.grpc_routes.iter().any(grpc_refused)
    {
        return Cow::Borrowed(objs);
    }
    let mut out = objs.clone();
    for i in out.ingresses.iter_mut().filter(|i| ingress_refused(i)) {
        take_out_ingress_hosts(owners, i, problems);
    }
    out.http_routes.retain_mut(|r| {
        !route_refused(r) || {
            let ns = ns_of(&r.metadata);
            let object = ObjRef::HttpRoute {
                namespace: ns.clone(),
                name: r.metadata.name.clone().unwrap_or_default(),
            };
            keep_own_hostnames(
                owners,
                (&ns, object, "HTTPRoute"),
                &mut r.spec.hostnames,
                problems,
            )
        }
    });
    // GRPCRoutes as HTTPRoutes: the hosts another namespace owns are not theirs.
    out.grpc_routes.retain_mut(|r| {
        !grpc_refused(r) || {
            let ns = ns_of(&r.metadata);
            let object = ObjRef::GrpcRoute {
                namespace: ns.clone(),
                name: r.metadata.name.clone().unwrap_or_default(),
            };
            keep_own_hostnames(
                owners,
                (&ns, object, "GRPCRoute"),
                &mut r.spec.hostnames,
                problems,
            )
        }
    });
    Cow::Owned(out)
}

/// An Ingress without the rules and TLS hosts for hosts another namespace owns, each a
/// `HostConflict` problem.
fn take_out_ingress_hosts(owners: &HostOwners, i: &mut Ingress, problems: &mut Vec<Problem>) {
    let ns = i
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let object = crate::ingress::object(i);
    let Some(spec) = i.spec.as_mut() else {
        return;
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

/// A route's hostnames without those another namespace owns, each a `HostConflict`
/// problem. False: none is left of those it had, and the route goes (without hostnames
/// it would match every host).
fn keep_own_hostnames(
    owners: &HostOwners,
    (ns, object, kind): (&str, ObjRef, &str),
    hostnames: &mut Vec<String>,
    problems: &mut Vec<Problem>,
) -> bool {
    let wanted = hostnames.len();
    hostnames.retain(|h| match owners.owner_of(h, ns) {
        Some(owner) => {
            problems.push(Problem::new(
                object.clone(),
                Reason::HostConflict,
                refused(owner, h, &format!("not served for this {kind}")),
            ));
            false
        }
        None => true,
    });
    if wanted > 0 && hostnames.is_empty() {
        problems.push(Problem::new(
            object,
            Reason::HostConflict,
            format!("every hostname of this {kind} belongs to another namespace; it is not served (without hostnames it would match every host)"),
        ));
        return false;
    }
    true
}
