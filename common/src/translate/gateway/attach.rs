//! Attachment: which listeners of which of our Gateways a route's parentRefs select,
//! with the conditions the specification names when none does.

use super::*;

/// A route's parent of ours: a Gateway, or a ListenerSet that names one.
pub(super) struct Parent {
    pub(super) kind: ParentKind,
    /// The parent's namespace and name.
    pub(super) key: ObjectKey,
    /// The Gateway it is (or is attached to).
    pub(super) gateway: ObjectKey,
}

impl Parent {
    /// Does listener `l` belong to this parent? A Gateway's own listeners only (a
    /// route that names a Gateway never reaches its ListenerSets' listeners), or the
    /// set's.
    fn owns(&self, l: &Lst<'_>) -> bool {
        l.gateway == self.gateway
            && match self.kind {
                ParentKind::Gateway => l.set.is_none(),
                ParentKind::ListenerSet => l.set.as_ref() == Some(&self.key),
            }
    }
}

/// The Gateway `p` names if it is one of `ours`, or the ListenerSet it names if that
/// names one of ours (attached or not).
pub(super) fn our_parent(
    p: &ParentRef,
    route_ns: &str,
    ours: &[&Gateway],
    sets: &BTreeMap<ObjectKey, ObjectKey>,
) -> Option<Parent> {
    if p.group.as_deref().unwrap_or(types::GROUP) == types::GROUP
        && p.kind.as_deref() == Some("ListenerSet")
    {
        let sk = ObjectKey::new(p.namespace.as_deref().unwrap_or(route_ns), &p.name).ok()?;
        let gateway = sets.get(&sk)?.clone();
        return Some(Parent {
            kind: ParentKind::ListenerSet,
            key: sk,
            gateway,
        });
    }
    let gk = parent_gateway(p, route_ns)?;
    ours.iter()
        .any(|g| key(&g.metadata).as_ref() == Some(&gk))
        .then(|| Parent {
            kind: ParentKind::Gateway,
            key: gk.clone(),
            gateway: gk,
        })
}

pub(super) fn parent_gateway(p: &ParentRef, route_ns: &str) -> Option<ObjectKey> {
    if p.group.as_deref().unwrap_or(types::GROUP) != types::GROUP
        || p.kind.as_deref().unwrap_or("Gateway") != "Gateway"
    {
        return None;
    }
    ObjectKey::new(p.namespace.as_deref().unwrap_or(route_ns), &p.name).ok()
}

/// Attach a route of `kind` with `hostnames` to the listeners `p` selects of `lsts`
/// (the parent's, the first of them at index `first` of all): (the route's
/// conditions for this parent, the (listener, hostname)s it is served on). With `taken`
/// (TLS, TCP and UDP routes), a (listener, hostname) that an older route already holds is
/// not attached again.
#[allow(clippy::type_complexity)]
pub(super) fn attach(
    (lsts, first): (&mut [Lst<'_>], usize),
    parent: &Parent,
    p: &ParentRef,
    (kind, hostnames): (&str, &[String]),
    (rns, namespaces): (&str, &[Namespace]),
    mut taken: Option<(&mut BTreeMap<(usize, Option<Hostname>), String>, String)>,
) -> (Vec<Condition>, Vec<(usize, Option<Hostname>)>) {
    let route_hosts: Vec<Hostname> = hostnames.iter().filter_map(|h| hostname(h)).collect();
    if route_hosts.len() != hostnames.len() {
        return (
            vec![Condition::accepted(
                false,
                ConditionReason::UnsupportedValue,
                "a hostname is not a valid RFC 1123 host name",
            )],
            vec![],
        );
    }
    let mut candidates = 0;
    let mut allowed = 0;
    // Listeners not served (a certificate unresolved, a conflict, ...) that the route
    // attaches to all the same: attachment is parentRefs × allowedRoutes alone (the
    // specification's ListenerStatus.attachedRoutes), serving is the listener's business.
    let mut unserved = 0;
    let mut held_by = None;
    // TCP and UDP listeners it attaches to that an older route holds.
    let mut shadowed = 0;
    let mut at = Vec::new();
    for (i, l) in lsts.iter_mut().enumerate() {
        let i = first + i;
        if !parent.owns(l)
            || p.section_name.as_deref().is_some_and(|s| s != l.spec.name)
            || p.port.is_some_and(|port| port != l.spec.port)
        {
            continue;
        }
        candidates += 1;
        if l.protocol_refused() || !l.kinds.contains(&kind) || !allows_namespace(l, rns, namespaces)
        {
            continue;
        }
        allowed += 1;
        // TCP and UDP listeners have no hostnames to intersect.
        let mut hosts = if matches!(l.stream, Some(StreamProtocol::Tcp | StreamProtocol::Udp)) {
            vec![None]
        } else {
            intersect(l.hostname.as_ref(), &route_hosts)
        };
        if !l.served() {
            // Counted, never served (and holds no server name against other routes).
            if !hosts.is_empty() {
                l.attached += 1;
                unserved += 1;
            }
            continue;
        }
        let wanted = hosts.len();
        if let Some((taken, who)) = taken.as_mut() {
            hosts.retain(|h| match taken.get(&(i, h.clone())) {
                Some(holder) => {
                    held_by = Some(holder.clone());
                    false
                }
                None => {
                    taken.insert((i, h.clone()), who.clone());
                    true
                }
            });
        }
        if hosts.is_empty() {
            // A TCP or UDP listener an older route holds: the newer one is attached
            // (Accepted, counted in attachedRoutes, as the specification's
            // TCPRouteMultipleRoutesAttachment says) and gets no traffic.
            if wanted > 0 && matches!(l.stream, Some(StreamProtocol::Tcp | StreamProtocol::Udp)) {
                l.attached += 1;
                shadowed += 1;
            }
            continue;
        }
        l.attached += 1;
        at.extend(hosts.into_iter().map(|h| (i, h)));
    }
    let found = Found {
        candidates,
        allowed,
        unserved,
        shadowed,
        attached: !at.is_empty(),
    };
    (vec![attach_condition(kind, &found, held_by.as_deref())], at)
}

/// What [`attach`] found among a Gateway's listeners for one parentRef.
struct Found {
    /// Listeners the parentRef names (sectionName, port).
    candidates: usize,
    /// Of them, those that allow the route (kind, namespace).
    allowed: usize,
    /// Listeners not served that the route attaches to all the same.
    unserved: usize,
    /// TCP and UDP listeners it attaches to whose one route is an older one.
    shadowed: usize,
    /// Some served listener takes some of the route's hostnames.
    attached: bool,
}

/// The route's `Accepted` for one parentRef, from what [`attach`] found; `held_by`: an
/// older route holding what it would take.
fn attach_condition(kind: &str, f: &Found, held_by: Option<&str>) -> Condition {
    if f.candidates == 0 {
        Condition::accepted(
            false,
            ConditionReason::NoMatchingParent,
            "no listener of the Gateway matches sectionName/port",
        )
    } else if f.allowed == 0 {
        Condition::accepted(
            false,
            ConditionReason::NotAllowedByListeners,
            format!("no listener allows {kind}s from this namespace"),
        )
    } else if let (false, true, Some(holder)) = (f.attached, f.shadowed > 0, held_by) {
        Condition::accepted(
            true,
            ConditionReason::Accepted,
            format!(
                "attached, but its listeners serve {holder}, which is older (one route per listener): this route gets no traffic while it is there"
            ),
        )
    } else if let (false, Some(holder)) = (f.attached, held_by) {
        Condition::accepted(
            false,
            ConditionReason::UnsupportedValue,
            format!(
                "the listeners it selects already serve {holder}, which is older: one route per {}",
                if kind == "TLSRoute" {
                    "server name"
                } else {
                    "listener"
                }
            ),
        )
    } else if !f.attached && f.unserved > 0 && held_by.is_none() {
        Condition::accepted(
            true,
            ConditionReason::Accepted,
            "attached to listeners that are not programmed: nothing is served until they are",
        )
    } else if !f.attached {
        Condition::accepted(
            false,
            ConditionReason::NoMatchingListenerHostname,
            "no listener hostname intersects the route's hostnames",
        )
    } else {
        Condition::accepted(true, ConditionReason::Accepted, "attached")
    }
}

/// Can `sel` be evaluated (operators and values as `metav1.LabelSelector` defines them)?
pub(super) fn check_selector(sel: &LabelSelector) -> Result<(), String> {
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let ok = match e.operator.as_str() {
            "In" | "NotIn" => !values.is_empty(),
            "Exists" | "DoesNotExist" => values.is_empty(),
            _ => false,
        };
        if !ok {
            return Err(format!(
                "namespace selector: operator {} with {} values is not valid",
                crate::problem::cut(&e.operator, 20),
                values.len()
            ));
        }
    }
    Ok(())
}

/// Does `sel` select these labels (every matchLabels entry and every expression)?
pub fn selects(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    by_labels
        && sel.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let have = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => have.is_some_and(|v| values.contains(v)),
                "NotIn" => have.is_none_or(|v| !values.contains(v)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                _ => false,
            }
        })
}

/// Does the listener allow routes from namespace `rns`?
pub(super) fn allows_namespace(l: &Lst<'_>, rns: &str, namespaces: &[Namespace]) -> bool {
    allows_from(&l.from, rns, namespaces)
}

/// Do `from` (a listener's `allowedRoutes.namespaces`) allow routes from `rns`?
fn allows_from(from: &RoutesFrom<'_>, rns: &str, namespaces: &[Namespace]) -> bool {
    match from {
        RoutesFrom::Same(ns) => ns == rns,
        RoutesFrom::All => true,
        RoutesFrom::Nothing => false,
        RoutesFrom::Selector(sel) => {
            let empty = BTreeMap::new();
            // A namespace that is not known (yet) has no labels to select.
            let Some(ns) = namespaces
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(rns))
            else {
                return false;
            };
            selects(sel, ns.metadata.labels.as_ref().unwrap_or(&empty))
        }
    }
}

/// The hostnames a route may claim for host ownership ([`crate::tenancy`]): those some
/// listener it may attach to could serve. A route of `kind` in namespace `rns` claims a
/// hostname only through a parentRef to one of `gateways` (ours) or to a ListenerSet
/// one of them takes (`sets`), on a listener that the parentRef selects (sectionName,
/// port), that takes the kind from `rns` (`allowedRoutes`) and whose hostname
/// intersects it. So a namespace a Gateway does not let in cannot squat a host on it
/// by naming it: its route is not attached, and claims nothing. A route with a
/// hostname that is not valid is never served, and claims nothing either.
pub fn route_host_claims<'r>(
    (kind, rns): (&str, &str),
    (parent_refs, hostnames): (&[ParentRef], &'r [String]),
    gateways: &[&Gateway],
    sets: &[&ListenerSet],
    namespaces: &[Namespace],
) -> Vec<&'r str> {
    let Some(parsed) = hostnames
        .iter()
        .map(|h| hostname(h))
        .collect::<Option<Vec<Hostname>>>()
    else {
        return vec![];
    };
    let mut claims = vec![false; hostnames.len()];
    for p in parent_refs {
        let Some((owner_ns, listeners)) = parent_listeners(p, rns, gateways, sets) else {
            continue;
        };
        let selected = listeners.iter().filter(|l| {
            p.section_name.as_deref().is_none_or(|s| s == l.name)
                && p.port.is_none_or(|port| port == l.port)
                && route_kinds(l).0.contains(&kind)
                && routes_from(owner_ns, l).is_ok_and(|f| allows_from(&f, rns, namespaces))
        });
        for l in selected {
            let lh = l.hostname.as_deref().and_then(hostname);
            if l.hostname.is_some() && lh.is_none() {
                continue;
            }
            for (claim, h) in claims.iter_mut().zip(&parsed) {
                *claim |= !intersect(lh.as_ref(), std::slice::from_ref(h)).is_empty();
            }
        }
    }
    hostnames
        .iter()
        .zip(claims)
        .filter_map(|(h, c)| c.then_some(h.as_str()))
        .collect()
}

/// The namespace a parentRef's listeners take `Same` routes from, and the listeners:
/// a Gateway of `gateways`' own, or a ListenerSet of `sets`' (which name one of them).
fn parent_listeners<'g>(
    p: &ParentRef,
    rns: &str,
    gateways: &[&'g Gateway],
    sets: &[&'g ListenerSet],
) -> Option<(&'g str, &'g [GatewayListener])> {
    let named = |m: &'g k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, ns: &str| {
        m.name.as_deref() == Some(p.name.as_str())
            && m.namespace.as_deref().unwrap_or("default") == ns
    };
    let ns = p.namespace.as_deref().unwrap_or(rns);
    if p.group.as_deref().unwrap_or(types::GROUP) != types::GROUP {
        return None;
    }
    match p.kind.as_deref().unwrap_or("Gateway") {
        "Gateway" => gateways.iter().find(|g| named(&g.metadata, ns)).map(|g| {
            (
                g.metadata.namespace.as_deref().unwrap_or("default"),
                g.spec.listeners.as_slice(),
            )
        }),
        "ListenerSet" => sets.iter().find(|s| named(&s.metadata, ns)).map(|s| {
            (
                s.metadata.namespace.as_deref().unwrap_or("default"),
                s.spec.listeners.as_slice(),
            )
        }),
        _ => None,
    }
}
