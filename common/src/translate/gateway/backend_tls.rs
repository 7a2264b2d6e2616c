//! BackendTLSPolicy (GEP-1897, standard channel since v1.4): TLS from the proxy to the
//! endpoints of the Services a policy targets, the endpoint's certificate verified
//! against the policy's CA bundle and hostname.
//!
//! - **Targets**: Services of the policy's own namespace (the API's target reference has
//!   no namespace: a policy can never reach another namespace's Service), the whole
//!   Service or one port by name (`sectionName`). A port's policy is the one that names
//!   it, else the Service's. Two policies on the same target: the older (creation time,
//!   then name) holds it, the other is `Accepted: False` (`Conflicted`).
//! - **What is served**: `validation.hostname` is the SNI sent and the DNS name the
//!   certificate must carry; `validation.caCertificateRefs` are ConfigMaps of the
//!   policy's namespace whose `ca.crt` is checked like a certificate chain
//!   ([`crate::certs::ca_bundle`]: PEM certificates only, at most 64 KiB) and written to
//!   the nodes as a file.
//! - **Refused** (the policy `Accepted: False`): a CA reference of another kind
//!   (`NoValidCACertificate`, ResolvedRefs `InvalidKind`) or to a ConfigMap that is
//!   missing or whose `ca.crt` is not such a bundle (`NoValidCACertificate`, ResolvedRefs
//!   `InvalidCACertificateRef`); `wellKnownCACertificates`, `subjectAltNames` and
//!   `options` (`Invalid`: neither proxy verifies a name other than the SNI it sends
//!   (nginx's `proxy_ssl_name` is both), nor a URI SAN); a hostname that is not a
//!   precise DNS name (`Invalid`). A refused policy that holds its target still holds it:
//!   the requests to that Service's port get 500, never cleartext its author asked not to
//!   be sent.
//! - **Status**: one `ancestors` entry per Gateway of ours whose routes forward to a
//!   targeted Service port, each with the policy's Accepted and ResolvedRefs.

use super::*;
use crate::gateway::types::BackendTlsPolicy;
use k8s_openapi::api::core::v1::ConfigMap;

/// A policy's status for one ancestor (a Gateway of ours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyAncestor {
    pub gateway: ObjectKey,
    pub conditions: Vec<Condition>,
}

/// What a policy asks, once checked: the TLS to serve, or why it is refused.
type Verdict = Result<(Hostname, String), (Condition, Condition)>;

/// (namespace, Service name, port name or `None` for the whole Service).
type Target = (String, String, Option<String>);

fn refused(
    accepted: ConditionReason,
    refs: ConditionReason,
    why: String,
) -> (Condition, Condition) {
    (
        Condition::accepted(false, accepted, why.clone()),
        Condition::new(ConditionType::ResolvedRefs, false, refs, why),
    )
}

/// Refused for what the policy asks (its references are fine): `Accepted: False` with
/// `reason` (the API's `Invalid`, which the problem names precisely).
fn invalid(reason: ConditionReason, why: impl Into<String>) -> (Condition, Condition) {
    let why = why.into();
    (
        Condition::accepted(false, reason, why),
        Condition::new(
            ConditionType::ResolvedRefs,
            true,
            ConditionReason::ResolvedRefs,
            "every reference resolved",
        ),
    )
}

/// The CA bundle of one `caCertificateRefs` entry, or why not.
fn ca_of(
    ns: &str,
    r: &types::LocalObjectRef,
    configmaps: &[ConfigMap],
) -> Result<String, (ConditionReason, String)> {
    if !r.group.is_empty() || r.kind != "ConfigMap" {
        return Err((
            ConditionReason::InvalidKind,
            format!(
                "caCertificateRefs: {}/{} {} is not a ConfigMap (core group)",
                r.group, r.kind, r.name
            ),
        ));
    }
    let cm = configmaps
        .iter()
        .find(|c| {
            c.metadata.namespace.as_deref() == Some(ns)
                && c.metadata.name.as_deref() == Some(&r.name)
        })
        .ok_or_else(|| {
            (
                ConditionReason::InvalidCACertificateRef,
                format!("ConfigMap {ns}/{} does not exist", r.name),
            )
        })?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .ok_or_else(|| {
            (
                ConditionReason::InvalidCACertificateRef,
                format!("ConfigMap {ns}/{} has no ca.crt", r.name),
            )
        })?;
    crate::certs::ca_bundle(text).map_err(|e| {
        (
            ConditionReason::InvalidCACertificateRef,
            format!("ConfigMap {ns}/{}: {e}", r.name),
        )
    })
}

/// A policy's verdict (targets aside).
fn verdict(p: &BackendTlsPolicy, ns: &str, configmaps: &[ConfigMap]) -> (Verdict, Condition) {
    let ok_refs = Condition::new(
        ConditionType::ResolvedRefs,
        true,
        ConditionReason::ResolvedRefs,
        "every reference resolved",
    );
    let v = &p.spec.validation;
    if !p.spec.options.is_empty() {
        let (a, r) = invalid(
            ConditionReason::UnsupportedPolicyOptions,
            "spec.options: k8slb defines no option",
        );
        return (Err((a, r.clone())), r);
    }
    if v.well_known_ca_certificates.is_some() {
        let (a, r) = invalid(
            ConditionReason::UnsupportedWellKnownCACertificates,
            "validation.wellKnownCACertificates is not supported: name the CA in caCertificateRefs",
        );
        return (Err((a, r.clone())), r);
    }
    if !v.subject_alt_names.is_empty() {
        let (a, r) = invalid(
            ConditionReason::UnsupportedSubjectAltNames,
            "validation.subjectAltNames is not supported: HAProxy and nginx verify the certificate against validation.hostname only",
        );
        return (Err((a, r.clone())), r);
    }
    let host = match v.hostname.parse::<Hostname>() {
        Ok(h) if !h.is_wildcard() => h,
        _ => {
            let (a, r) = invalid(
                ConditionReason::InvalidValidationHostname,
                format!(
                    "validation.hostname {:?} is not a DNS name",
                    crate::problem::printable(v.hostname.chars().take(80).collect::<String>())
                ),
            );
            return (Err((a, r.clone())), r);
        }
    };
    let mut pem = String::new();
    let mut first_err: Option<(ConditionReason, String)> = None;
    for r in &v.ca_certificate_refs {
        match ca_of(ns, r, configmaps) {
            Ok(b) => pem.push_str(&b),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if pem.len() > crate::certs::MAX_CA_BYTES {
        let (a, r) = refused(
            ConditionReason::NoValidCACertificate,
            ConditionReason::InvalidCACertificateRef,
            format!(
                "the CA bundles together are more than the {} bytes k8slb reads",
                crate::certs::MAX_CA_BYTES
            ),
        );
        return (Err((a, r.clone())), r);
    }
    match (pem.is_empty(), first_err) {
        (true, e) => {
            let (reason, why) = e.unwrap_or((
                ConditionReason::InvalidCACertificateRef,
                "no caCertificateRefs".into(),
            ));
            let (a, r) = refused(ConditionReason::NoValidCACertificate, reason, why);
            (Err((a, r.clone())), r)
        }
        // Some references resolved: those are used, and ResolvedRefs says which did not.
        (false, Some((reason, why))) => (
            Ok((host, pem)),
            Condition::new(ConditionType::ResolvedRefs, false, reason, why),
        ),
        (false, None) => (Ok((host, pem)), ok_refs),
    }
}

/// The name of the port `port` (TCP) of Service `ns/name`, if it has that port.
fn port_name(services: &[Service], ns: &str, name: &str, port: u16) -> Option<Option<String>> {
    let svc = services.iter().find(|s| {
        s.metadata.namespace.as_deref().unwrap_or("default") == ns
            && s.metadata.name.as_deref() == Some(name)
    })?;
    svc.spec
        .as_ref()?
        .ports
        .iter()
        .flatten()
        .find(|p| p.port == i32::from(port) && p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .map(|p| p.name.clone())
}

/// Each policy, oldest first, with its verdict and the targets it names; and each
/// target's holder (the oldest policy naming it, by index into the list).
struct Held {
    /// (policy, verdict, its ResolvedRefs condition), oldest first.
    verdicts: Vec<(ObjectKey, Verdict, Condition)>,
    /// The Service targets each policy names (same index as `verdicts`).
    targets_of: Vec<Vec<Target>>,
    holder: BTreeMap<Target, usize>,
}

/// Applies the policies to the HTTP backends of `routes` (the translation's model of
/// the Gateways at `addresses`), and their statuses, by policy.
pub(super) fn apply(
    input: &GatewayInput<'_>,
    routes: &mut HttpRoutes,
) -> BTreeMap<ObjectKey, Vec<PolicyAncestor>> {
    let held = hold(input);
    let (applied, names) = applied(input, routes, &held.holder);
    let gateways_of = gateways_of(input, routes);
    let mut ancestors = ancestors(&held.targets_of, &names, &gateways_of);
    into_model(routes, &applied, &held.verdicts);
    let accepted = Condition::accepted(true, ConditionReason::Accepted, "accepted");
    held.verdicts
        .into_iter()
        .enumerate()
        .map(|(i, (pk, v, refs))| {
            let conditions = match v {
                Ok(_) => vec![accepted.clone(), refs],
                Err((a, r)) => vec![a, r],
            };
            let list = ancestors
                .remove(&i)
                .unwrap_or_default()
                .into_iter()
                .map(|gateway| PolicyAncestor {
                    gateway,
                    conditions: conditions.clone(),
                })
                .collect();
            (pk, list)
        })
        .collect()
}

/// The policies' verdicts, oldest first, and who holds each target.
fn hold(input: &GatewayInput<'_>) -> Held {
    let mut policies: Vec<&BackendTlsPolicy> = input.backend_tls_policies.iter().collect();
    policies.sort_by_cached_key(|p| age(&p.metadata));
    let mut held = Held {
        verdicts: Vec::new(),
        targets_of: Vec::new(),
        holder: BTreeMap::new(),
    };
    for p in policies {
        let Some(pk) = key(&p.metadata) else { continue };
        let ns = pk.namespace.as_str().to_string();
        let (mut v, refs) = verdict(p, &ns, input.configmaps);
        let i = held.verdicts.len();
        let mut conflicted = None;
        let mut mine = Vec::new();
        for t in &p.spec.target_refs {
            if !t.group.is_empty() || t.kind != "Service" {
                continue;
            }
            let target = (ns.clone(), t.name.clone(), t.section_name.clone());
            mine.push(target.clone());
            match held.holder.get(&target) {
                Some(&other) if other != i => conflicted = Some(held.verdicts[other].0.clone()),
                _ => {
                    held.holder.insert(target, i);
                }
            }
        }
        if let Some(other) = conflicted {
            // The older policy holds every target this one shares with it; this one
            // is refused as a whole (and holds what else it named, so that its
            // Service is not served in cleartext against its author's wish).
            v = Err((
                Condition::accepted(
                    false,
                    ConditionReason::Conflicted,
                    format!("the older BackendTLSPolicy {other} targets the same Service port"),
                ),
                refs.clone(),
            ));
        }
        held.verdicts.push((pk, v, refs));
        held.targets_of.push(mine);
    }
    held
}

/// Which policy each HTTP backend gets (its port's by name, else its Service's), and
/// each backend's port name (`None`: the port has no name).
#[allow(clippy::type_complexity)]
fn applied(
    input: &GatewayInput<'_>,
    routes: &HttpRoutes,
    holder: &BTreeMap<Target, usize>,
) -> (
    BTreeMap<BackendId, usize>,
    BTreeMap<BackendId, Option<String>>,
) {
    let mut applied: BTreeMap<BackendId, usize> = BTreeMap::new();
    let mut names: BTreeMap<BackendId, Option<String>> = BTreeMap::new();
    for id in routes.backends.keys() {
        let (ns, name) = (id.service.namespace.as_str(), id.service.name.as_str());
        let Some(pname) = port_name(input.services, ns, name, id.port) else {
            continue;
        };
        names.insert(id.clone(), pname.clone());
        let by_port = pname.and_then(|n| holder.get(&(ns.to_string(), name.to_string(), Some(n))));
        let by_service = holder.get(&(ns.to_string(), name.to_string(), None));
        if let Some(&i) = by_port.or(by_service) {
            applied.insert(id.clone(), i);
        }
    }
    (applied, names)
}

/// The Gateways whose listeners forward to each backend.
fn gateways_of<'r>(
    input: &GatewayInput<'_>,
    routes: &'r HttpRoutes,
) -> BTreeMap<&'r BackendId, BTreeSet<ObjectKey>> {
    let mut gateway_of_ip: BTreeMap<IpAddr, &ObjectKey> = BTreeMap::new();
    for (gk, ips) in input.addresses {
        for ip in ips {
            gateway_of_ip.insert(*ip, gk);
        }
    }
    let mut gateways_of: BTreeMap<&BackendId, BTreeSet<ObjectKey>> = BTreeMap::new();
    for l in &routes.listeners {
        let Some(gk) = gateway_of_ip.get(&l.ip) else {
            continue;
        };
        for r in l.virtual_hosts.iter().flat_map(|v| &v.rules) {
            if let RouteAction::Forward { backends, .. } = &r.action {
                for b in backends {
                    gateways_of.entry(&b.id).or_default().insert((*gk).clone());
                }
            }
        }
    }
    gateways_of
}

/// A policy's ancestors: the Gateways that forward to a Service port it targets
/// (whether it holds that target or an older policy does).
fn ancestors(
    targets_of: &[Vec<Target>],
    names: &BTreeMap<BackendId, Option<String>>,
    gateways_of: &BTreeMap<&BackendId, BTreeSet<ObjectKey>>,
) -> BTreeMap<usize, BTreeSet<ObjectKey>> {
    let mut ancestors: BTreeMap<usize, BTreeSet<ObjectKey>> = BTreeMap::new();
    for (i, targets) in targets_of.iter().enumerate() {
        for (id, pname) in names {
            let hit = targets.iter().any(|(ns, name, section)| {
                id.service.namespace.as_str() == ns
                    && id.service.name.as_str() == name
                    && (section.is_none() || section == pname)
            });
            if hit {
                if let Some(gws) = gateways_of.get(id) {
                    ancestors.entry(i).or_default().extend(gws.iter().cloned());
                }
            }
        }
    }
    ancestors
}

/// Into the model: TLS on the backends of accepted policies; the others' share of
/// each rule is the invalid references' (500).
fn into_model(
    routes: &mut HttpRoutes,
    applied: &BTreeMap<BackendId, usize>,
    verdicts: &[(ObjectKey, Verdict, Condition)],
) {
    let mut refused_ids: BTreeSet<BackendId> = BTreeSet::new();
    for (id, &i) in applied {
        match &verdicts[i].1 {
            Ok((host, pem)) => {
                let ca = crate::routes::CaId::of(pem);
                routes.ca_bundles.insert(ca.clone(), pem.clone());
                if let Some(st) = routes.backends.get_mut(id) {
                    st.tls = Some(crate::routes::BackendTls {
                        server_name: host.clone(),
                        ca,
                    });
                }
            }
            Err(_) => {
                refused_ids.insert(id.clone());
            }
        }
    }
    if refused_ids.is_empty() {
        return;
    }
    for l in &mut routes.listeners {
        for r in l.virtual_hosts.iter_mut().flat_map(|v| &mut v.rules) {
            if let RouteAction::Forward { backends, invalid } = &mut r.action {
                for b in backends.iter().filter(|b| refused_ids.contains(&b.id)) {
                    *invalid = invalid.saturating_add(b.weight.max(1));
                }
                backends.retain(|b| !refused_ids.contains(&b.id));
            }
        }
    }
    for id in &refused_ids {
        let streamed = routes
            .streams
            .iter()
            .flat_map(|s| &s.routes)
            .any(|r| r.backends.iter().any(|b| &b.id == id));
        if !streamed {
            routes.backends.remove(id);
        }
    }
}
