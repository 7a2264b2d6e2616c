//! ListenerSets (`gateway.networking.k8s.io/v1`): more listeners for a Gateway of ours,
//! from its namespace or another, when the Gateway allows them
//! (`spec.allowedListeners.namespaces.from`: `None`, the default, allows none; `Same`,
//! `All`, `Selector`).
//!
//! Tenancy: a set's listeners come after the Gateway's own and after every older set's
//! (the specification's precedence: the Gateway, then sets oldest first, then by
//! `<namespace>/<name>`). A set listener that would take a port with another protocol,
//! or a (port, hostname) that one before it holds, is refused (`Conflicted`) and the one
//! before keeps serving; so is a listener beyond `limits.listenerSetListenersPerGateway`
//! (`TooManyListeners`). Host ownership ([`crate::tenancy`]) covers set listeners: each
//! hostname is a claim of the set's namespace ([`host_claims`]), and a listener whose
//! hostname another namespace owns is refused (`HostnameConflict`). A set's listeners take routes from its own namespace (`Same`),
//! and its certificates are read from its namespace (another one's only with a
//! ReferenceGrant from ListenerSets of its namespace).

use super::*;

/// A ListenerSet's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSetStatus {
    pub conditions: Vec<Condition>,
    /// Its listeners' (none while it is not attached).
    pub listeners: Vec<ListenerStatus>,
    /// What is served but deserves a word (a listener's certificate that does not
    /// cover its hostname): problems (Events) on the set, no condition changes.
    pub warnings: Vec<(Reason, String)>,
}

/// A ListenerSet that names a Gateway of ours, and whether that Gateway takes it.
pub(super) struct SetOf<'a> {
    pub(super) key: ObjectKey,
    pub(super) set: &'a ListenerSet,
    pub(super) gateway: ObjectKey,
    /// The Gateway allows it (`spec.allowedListeners`).
    pub(super) allowed: bool,
}

/// The Gateway a set's `parentRef` names (a Gateway of the group; its namespace by
/// default the set's).
fn parent_of(set: &ListenerSet, set_key: &ObjectKey) -> Option<ObjectKey> {
    let p = &set.spec.parent_ref;
    if p.group.as_deref().unwrap_or(types::GROUP) != types::GROUP
        || p.kind.as_deref().unwrap_or("Gateway") != "Gateway"
    {
        return None;
    }
    ObjectKey::new(
        p.namespace.as_deref().unwrap_or(set_key.namespace.as_str()),
        &p.name,
    )
    .ok()
}

/// Does Gateway `g` take ListenerSets from namespace `ns`?
fn allows(g: &Gateway, gk: &ObjectKey, ns: &str, namespaces: &[Namespace]) -> bool {
    let Some(from) = g
        .spec
        .allowed_listeners
        .as_ref()
        .and_then(|a| a.namespaces.as_ref())
    else {
        return false;
    };
    match from.from.as_deref().unwrap_or("None") {
        "Same" => gk.namespace.as_str() == ns,
        "All" => true,
        "Selector" => from.selector.as_ref().is_some_and(|sel| {
            check_selector(sel).is_ok()
                && namespaces
                    .iter()
                    .find(|n| n.metadata.name.as_deref() == Some(ns))
                    .is_some_and(|n| {
                        selects(sel, n.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
                    })
        }),
        _ => false,
    }
}

/// The ListenerSets that name one of `gateways`, in the specification's precedence
/// (oldest first, then `<namespace>/<name>`).
pub(super) fn sets_of<'a>(input: &GatewayInput<'a>, gateways: &[&'a Gateway]) -> Vec<SetOf<'a>> {
    let mut sets: Vec<&ListenerSet> = input.listener_sets.iter().collect();
    sets.sort_by_cached_key(|s| age(&s.metadata));
    sets.into_iter()
        .filter_map(|set| {
            let sk = key(&set.metadata)?;
            let gk = parent_of(set, &sk)?;
            let g = gateways
                .iter()
                .find(|g| key(&g.metadata).as_ref() == Some(&gk))?;
            let allowed = allows(g, &gk, sk.namespace.as_str(), input.namespaces);
            Some(SetOf {
                key: sk,
                set,
                gateway: gk,
                allowed,
            })
        })
        .collect()
}

/// The hostnames each ListenerSet claims for host ownership ([`crate::tenancy`]): its
/// listeners', when a Gateway of `gateways` (ours) takes the set, except a hostname
/// that Gateway's own listeners name on the same port (the Gateway keeps it: the set's
/// listener is refused, and claims nothing).
pub fn host_claims<'a>(
    gateways: &[&Gateway],
    sets: &'a [ListenerSet],
    namespaces: &[Namespace],
) -> Vec<(&'a ListenerSet, Vec<&'a str>)> {
    let by_key: BTreeMap<ObjectKey, &Gateway> = gateways
        .iter()
        .filter_map(|g| Some((key(&g.metadata)?, *g)))
        .collect();
    sets.iter()
        .filter_map(|set| {
            let sk = key(&set.metadata)?;
            let gk = parent_of(set, &sk)?;
            let g = by_key.get(&gk)?;
            if !allows(g, &gk, sk.namespace.as_str(), namespaces) {
                return None;
            }
            let own = |l: &GatewayListener| {
                g.spec
                    .listeners
                    .iter()
                    .any(|o| o.port == l.port && o.hostname == l.hostname)
            };
            let hosts = set
                .spec
                .listeners
                .iter()
                .filter(|l| !own(l))
                .filter_map(|l| l.hostname.as_deref())
                .collect();
            Some((set, hosts))
        })
        .collect()
}

/// Why set listener `l` of namespace `ns` may not have its hostname: another
/// namespace owns it, or a host under it, or a wildcard over it ([`crate::tenancy`]);
/// or, for HTTPS and TLS Terminate, it has none (its certificate would be the port's
/// default, for every server name no other listener names).
fn not_its_host(
    owners: Option<&crate::tenancy::HostOwners>,
    ns: &str,
    l: &GatewayListener,
) -> Option<Conflict> {
    let Some(h) = l.hostname.as_deref() else {
        let terminates = l.protocol == "HTTPS" || port_protocol(l, false) == "TLS/Terminate";
        return terminates.then(|| Conflict {
            reason: ConditionReason::UnsupportedValue,
            why: Some(format!("{} listener of a ListenerSet needs a hostname: without one its certificate would answer every server name no other listener of the port names", if l.protocol == "HTTPS" { "an HTTPS" } else { "a TLS (tls.mode Terminate)" })),
            conflicted: false,
            accepted: false,
        });
    };
    let owner = owners?.owner_of(h, ns)?;
    Some(Conflict {
        reason: ConditionReason::HostnameConflict,
        why: Some(format!(
            "host {} belongs to namespace {} ({} claimed it first)",
            crate::problem::cut(h, 253),
            owner.namespace,
            owner.object
        )),
        conflicted: true,
        accepted: false,
    })
}

/// Whether each listener of `sets` (those Gateway `g` takes, in precedence order) gets
/// its port and hostname, decided before anything costly is read of it (no
/// certificate, no CA bundle): `None` when it does (it may still be refused for
/// itself, its protocol or its certificate, say), else why not: a listener before it
/// (the Gateway's or an older set's) holds them, another namespace owns its hostname,
/// or the sets' listeners before it reach `limit`.
fn admit<'s>(
    g: &Gateway,
    sets: impl IntoIterator<Item = (&'s ObjectKey, &'s ListenerSet)>,
    owners: Option<&crate::tenancy::HostOwners>,
    limit: usize,
) -> Vec<Option<Conflict>> {
    let mut held = Held::default();
    g.spec.listeners.iter().for_each(|l| held.hold(l));
    let mut budget = limit;
    let mut out = Vec::new();
    for (sk, set) in sets {
        for l in &set.spec.listeners {
            let refused = held
                .conflict(l)
                .map(|reason| Conflict {
                    reason,
                    why: None,
                    conflicted: true,
                    accepted: false,
                })
                .or_else(|| not_its_host(owners, sk.namespace.as_str(), l));
            out.push(if refused.is_some() {
                refused
            } else if budget == 0 {
                Some(Conflict {
                    reason: ConditionReason::TooManyListeners,
                    why: Some(format!(
                        "the Gateway's ListenerSets have {limit} listeners before this one (limits.listenerSetListenersPerGateway)"
                    )),
                    conflicted: false,
                    accepted: false,
                })
            } else {
                budget -= 1;
                held.hold(l);
                None
            });
        }
    }
    out
}

/// The listeners of the ListenerSets each Gateway of `gateways` (ours) takes that get
/// their port and hostname (see [`admit`]): what the plan counts among the Gateway's
/// ports (its address, `reservedPorts`, the ports another tenant of a shared address
/// holds).
pub fn taken_set_listeners<'a>(
    gateways: &[&Gateway],
    sets: &'a [ListenerSet],
    namespaces: &[Namespace],
    owners: Option<&crate::tenancy::HostOwners>,
    limit: usize,
) -> BTreeMap<ObjectKey, Vec<&'a GatewayListener>> {
    let by_key: BTreeMap<ObjectKey, &Gateway> = gateways
        .iter()
        .filter_map(|g| Some((key(&g.metadata)?, *g)))
        .collect();
    let mut ordered: Vec<&ListenerSet> = sets.iter().collect();
    ordered.sort_by_cached_key(|s| age(&s.metadata));
    let mut of: BTreeMap<ObjectKey, Vec<(ObjectKey, &ListenerSet)>> = BTreeMap::new();
    for set in ordered {
        let Some(sk) = key(&set.metadata) else {
            continue;
        };
        let Some(gk) = parent_of(set, &sk) else {
            continue;
        };
        let Some(g) = by_key.get(&gk) else { continue };
        if allows(g, &gk, sk.namespace.as_str(), namespaces) {
            of.entry(gk).or_default().push((sk, set));
        }
    }
    of.into_iter()
        .map(|(gk, sets)| {
            let admitted = admit(
                by_key[&gk],
                sets.iter().map(|(k, s)| (k, *s)),
                owners,
                limit,
            );
            let listeners = sets.iter().flat_map(|(_, s)| &s.spec.listeners);
            let taken = listeners
                .zip(admitted)
                .filter(|(_, a)| a.is_none())
                .map(|(l, _)| l)
                .collect();
            (gk, taken)
        })
        .collect()
}

/// What the listeners before a set's hold on one (port, UDP?): the protocols (TLS by
/// mode: [`port_protocol`]), and the hostnames (`None`: any) of each.
#[derive(Default)]
pub(super) struct Held(BTreeMap<(i32, bool), ByProtocol>);

/// On one port: each protocol's hostnames (`None`: any).
type ByProtocol = BTreeMap<String, BTreeSet<Option<String>>>;

impl Held {
    /// `l` holds its port and hostname from now on.
    pub(super) fn hold(&mut self, l: &GatewayListener) {
        self.0
            .entry((l.port, l.protocol == "UDP"))
            .or_default()
            .entry(port_protocol(l, false))
            .or_default()
            .insert(l.hostname.clone());
    }

    /// Why `l` cannot have its port and hostname: another protocol holds the port, or
    /// its protocol with its hostname (any hostname for TCP and UDP: nothing tells
    /// their connections apart).
    pub(super) fn conflict(&self, l: &GatewayListener) -> Option<ConditionReason> {
        let on_port = self.0.get(&(l.port, l.protocol == "UDP"))?;
        let protocol = port_protocol(l, false);
        if on_port.keys().any(|p| *p != protocol) {
            return Some(ConditionReason::ProtocolConflict);
        }
        let hosts = on_port.get(&protocol)?;
        (matches!(l.protocol.as_str(), "TCP" | "UDP") || hosts.contains(&l.hostname))
            .then_some(ConditionReason::HostnameConflict)
    }
}

/// The listeners of the sets attached to Gateway `g` (after its own), in precedence
/// order: those [`admit`] refuses are refused without reading their certificates or
/// the Gateway's client CA bundle.
pub(super) fn set_listeners<'a>(
    (input, secrets): (&GatewayInput<'a>, &crate::translate::refs::SecretRefs<'_>),
    g: &'a Gateway,
    sets: &[&SetOf<'a>],
    bound: &frontend_tls::Bound,
) -> Vec<Lst<'a>> {
    let Some(gk) = key(&g.metadata) else {
        return Vec::new();
    };
    let admitted = admit(
        g,
        sets.iter().map(|s| (&s.key, s.set)),
        input.host_owners,
        input.listener_set_listeners_per_gateway,
    );
    let listeners = sets
        .iter()
        .flat_map(|s| s.set.spec.listeners.iter().map(move |l| (s, l)));
    // The Gateway's client certificate validation, read once per port.
    let mut client_cas = BTreeMap::new();
    listeners
        .zip(admitted)
        .map(|((s, l), refused)| {
            let owner = Owner {
                gateway: gk.clone(),
                set: Some(s.key.clone()),
            };
            let client_ca = if refused.is_some() {
                Ok(None)
            } else {
                client_cas
                    .entry(l.port)
                    .or_insert_with(|| {
                        // What is wrong with the Gateway's references is the Gateway
                        // owner's to read (its Events), not the set's namespace's.
                        frontend_tls::client_validation(input, g, &gk, l.port).map_err(
                            |(reason, _)| {
                                (reason, format!("the Gateway's client certificate validation (spec.tls.frontend) for port {} cannot be served: see the Gateway's status", l.port))
                            },
                        )
                    })
                    .clone()
            };
            // Said without naming the other Gateway (another tenant's).
            let client_ca = bound
                .check(input, &gk, l, client_ca)
                .map_err(|(reason, why)| match reason {
                    ConditionReason::PortUnavailable => (reason, format!("another Gateway sharing the Gateway's address serves HTTPS on port {} with another client certificate validation", l.port)),
                    _ => (reason, why),
                });
            listener((input, secrets), &owner, l, refused, client_ca)
        })
        .collect()
}

/// Every ListenerSet's status (those naming a Gateway of ours), and how many of each
/// Gateway's are attached and accepted.
pub(super) fn statuses(
    sets: &[SetOf<'_>],
    lsts: &[Lst<'_>],
    gateways: &BTreeMap<ObjectKey, GatewayStatus>,
) -> (
    BTreeMap<ObjectKey, ListenerSetStatus>,
    BTreeMap<ObjectKey, u32>,
) {
    let mut out = BTreeMap::new();
    let mut attached: BTreeMap<ObjectKey, u32> = BTreeMap::new();
    let mut of_set: BTreeMap<&ObjectKey, Vec<ListenerStatus>> = BTreeMap::new();
    let mut warnings_of: BTreeMap<&ObjectKey, Vec<(Reason, String)>> = BTreeMap::new();
    for l in lsts {
        if let Some(k) = &l.set {
            of_set
                .entry(k)
                .or_default()
                .push(status::listener_status(l));
            warnings_of
                .entry(k)
                .or_default()
                .extend(l.warnings.iter().map(|w| {
                    (
                        Reason::CertificateHostMismatch,
                        format!("listener {}: {w}", l.spec.name),
                    )
                }));
        }
    }
    for s in sets {
        let listeners = of_set.remove(&s.key).unwrap_or_default();
        let warnings = warnings_of.remove(&s.key).unwrap_or_default();
        let gw = gateways.get(&s.gateway);
        let conditions = set_conditions(s.allowed, &listeners, gw);
        if conditions
            .iter()
            .any(|c| c.type_ == ConditionType::Accepted && c.status)
        {
            *attached.entry(s.gateway.clone()).or_default() += 1;
        }
        out.insert(
            s.key.clone(),
            ListenerSetStatus {
                conditions,
                listeners,
                warnings,
            },
        );
    }
    (out, attached)
}

/// A set's `Accepted` and `Programmed`.
fn set_conditions(
    allowed: bool,
    listeners: &[ListenerStatus],
    gw: Option<&GatewayStatus>,
) -> Vec<Condition> {
    let both = |reason: ConditionReason, why: &str| {
        vec![
            Condition::accepted(false, reason, why),
            Condition::new(ConditionType::Programmed, false, reason, why),
        ]
    };
    let gw_condition = |t: ConditionType| {
        gw.and_then(|g| g.conditions.iter().find(|c| c.type_ == t))
            .is_some_and(|c| c.status)
    };
    if !allowed {
        return both(
            ConditionReason::NotAllowed,
            "its Gateway's spec.allowedListeners does not allow ListenerSets of this namespace",
        );
    }
    if !gw_condition(ConditionType::Accepted) {
        return both(
            ConditionReason::ParentNotAccepted,
            "its Gateway is not accepted",
        );
    }
    // Valid: served (a listener refused for its certificate has no `Accepted: False`,
    // but is not programmed either).
    let valid = |l: &&ListenerStatus| {
        l.conditions
            .iter()
            .any(|c| c.type_ == ConditionType::Programmed && c.status)
    };
    let accepted = match listeners.iter().filter(valid).count() {
        0 => {
            return both(
                ConditionReason::ListenersNotValid,
                "none of its listeners is valid",
            )
        }
        n if n == listeners.len() => {
            Condition::accepted(true, ConditionReason::Accepted, "attached to its Gateway")
        }
        n => Condition::accepted(
            true,
            ConditionReason::ListenersNotValid,
            format!(
                "{} of its {} listeners are not valid",
                listeners.len() - n,
                listeners.len()
            ),
        ),
    };
    let programmed = if gw_condition(ConditionType::Programmed) {
        Condition::new(
            ConditionType::Programmed,
            true,
            ConditionReason::Programmed,
            "served on its Gateway's addresses by the LB nodes",
        )
    } else {
        Condition::new(
            ConditionType::Programmed,
            false,
            ConditionReason::ParentNotProgrammed,
            "its Gateway is not programmed",
        )
    };
    vec![accepted, programmed]
}
