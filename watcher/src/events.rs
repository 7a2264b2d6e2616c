//! core/v1 Events: what the plan did, on the object it did it to.
//!
//! - Which events: the differences between two published states ([`diff`]): IPAllocated,
//!   IPReleased, NodeChanged, and each Service/Node problem when it first appears or its
//!   message changes (the Event reason is the problem's reason: PoolExhausted,
//!   UnknownPool, IpOutsidePool, PortConflict, InvalidAnnotation, ...). Nothing is emitted
//!   for a state that did not change, so a tight loop cannot make a storm.
//! - Aggregation: the Event name is `<object>.<hash of (uid, reason, message)>`, so the same
//!   event again updates `count` and `lastTimestamp` of the existing object.
//! - Rate: a token bucket ([`Recorder`], governor's GCRA: bursts of twice the rate) bounds
//!   the writes per second; events wait in a queue rather than being dropped (bounded at
//!   [`QUEUE_LIMIT`], then the oldest go).
//!
//! Why not kube-runtime's `events::Recorder`: it writes `events.k8s.io/v1` Events (series,
//! its own cache keyed by reference and reason), while k8slb writes `core/v1` Events with
//! deterministic names and `count` bumps that `kubectl describe` and the seed's users read;
//! switching changes the RBAC (`manifests/base/rbac.yml`), `docs/api-calls.md` and every
//! consumer of the Events, and it has neither the leader gate nor the bounded queue below.
//! A change of Event API is its own decision, not part of a refactoring.

use crate::admin::{Metrics, ReasonLabel};
use crate::failing::FailureLog;
use crate::kube::{api_code, code_label, describe, FIELD_MANAGER};
use governor::{Quota, RateLimiter};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use k8slb_common::names::ServiceKey;
use k8slb_common::publish::fnv1a;
use k8slb_common::state::{ObjRef, Problem, Reason, State};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub const REPORTING_CONTROLLER: &str = "k8slb.io/watcher";
pub const SOURCE_COMPONENT: &str = "k8slb-watcher";
pub const QUEUE_LIMIT: usize = 10_000;

/// The object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub target: Target,
    /// Also decides the Event's type (Normal or Warning).
    pub reason: Reason,
    pub action: &'static str,
    pub message: String,
}

impl Note {
    /// Deterministic name: a repeat of the same event updates the same object.
    pub fn name(&self) -> String {
        let h = fnv1a(
            format!(
                "{}\0{}\0{}\0{}",
                self.target.uid, self.target.name, self.reason, self.message
            )
            .as_bytes(),
        );
        let stem: String = self.target.name.chars().take(200).collect();
        format!("{stem}.{h:016x}")
    }
}

/// Looks up a Service's or Node's uid (None: gone, no event).
pub trait Lookup {
    fn service_uid(&self, ns: &str, name: &str) -> Option<String>;
    fn node_uid(&self, name: &str) -> Option<String>;
    /// None also when Ingresses are not served.
    fn ingress_uid(&self, ns: &str, name: &str) -> Option<String>;
    /// The uid of a Gateway API object (`kind` GatewayClass, Gateway, HTTPRoute, GRPCRoute
    /// or an L4 route; `ns` None for a GatewayClass) and the apiVersion it is watched at
    /// (the version the cluster serves: TLSRoute is v1alpha2 in some releases, v1 from
    /// v1.5). None also when the Gateway API is not served.
    fn gateway_api_ref(
        &self,
        _kind: &str,
        _ns: Option<&str>,
        _name: &str,
    ) -> Option<(String, String)> {
        None
    }
}

/// An Event target for a Gateway API object (a GatewayClass's Events go to `default`,
/// as core Events about cluster-scoped objects do).
fn gateway_api_target(
    look: &dyn Lookup,
    kind: &str,
    ns: Option<&str>,
    name: &str,
) -> Option<Target> {
    let (uid, api_version) = look.gateway_api_ref(kind, ns, name)?;
    Some(Target {
        api_version,
        kind: kind.into(),
        namespace: ns.map(Into::into),
        name: name.into(),
        uid,
    })
}

fn ingress_target(look: &dyn Lookup, ns: &str, name: &str) -> Option<Target> {
    Some(Target {
        api_version: "networking.k8s.io/v1".into(),
        kind: "Ingress".into(),
        namespace: Some(ns.into()),
        name: name.into(),
        uid: look.ingress_uid(ns, name)?,
    })
}

fn service_target(look: &dyn Lookup, key: &ServiceKey) -> Option<Target> {
    let (ns, name) = (key.namespace.as_str(), key.name.as_str());
    Some(Target {
        api_version: "v1".into(),
        kind: "Service".into(),
        namespace: Some(ns.into()),
        name: name.into(),
        uid: look.service_uid(ns, name)?,
    })
}

/// The Event for a problem of the global ConfigMap `<namespace>/global` (uid `uid`): reported
/// when it first appears, even before any plan (see [`crate::reconcile`]).
pub fn config_note(namespace: &str, name: &str, uid: &str, p: &Problem) -> Note {
    Note {
        target: Target {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some(namespace.to_string()),
            name: name.into(),
            uid: uid.to_string(),
        },
        reason: p.reason.clone(),
        action: "LoadConfig",
        message: p.message.clone(),
    }
}

/// The events for going from `prev` to `next`. Config problems are not here (they are
/// reported even before any plan: [`config_note`]).
pub fn diff(prev: &State, next: &State, look: &dyn Lookup) -> Vec<Note> {
    let mut out = Vec::new();
    // Allocations and releases, of Services, then of Ingresses: (target, IPs before,
    // (IPs, pool) now).
    let ips_pool = |ips: &'_ [IpAddr], pool: &'_ str| (ips.to_vec(), pool.to_string());
    let services = next.services.keys().chain(prev.services.keys());
    let service_changes = services.collect::<BTreeSet<_>>().into_iter().map(|k| {
        (
            service_target(look, k),
            prev.services.get(k).map(|s| s.ips.clone()),
            next.services.get(k).map(|s| ips_pool(&s.ips, &s.pool)),
        )
    });
    let ingresses = next.ingresses.keys().chain(prev.ingresses.keys());
    let ingress_changes = ingresses.collect::<BTreeSet<_>>().into_iter().map(|k| {
        (
            ingress_target(look, k.namespace.as_str(), k.name.as_str()),
            prev.ingresses.get(k).map(|s| s.ips.clone()),
            next.ingresses.get(k).map(|s| ips_pool(&s.ips, &s.pool)),
        )
    });
    for (target, before, after) in service_changes.chain(ingress_changes) {
        let Some(t) = target else { continue };
        allocation_notes(
            &mut out,
            &t,
            before.as_deref().unwrap_or_default(),
            after
                .as_ref()
                .map(|(ips, pool)| (ips.as_slice(), pool.as_str())),
            next,
        );
    }
    // VIP owner changes.
    for (ip, v) in &next.vips {
        let Some(old) = prev.vips.get(ip) else {
            continue;
        };
        if old.owner == v.owner {
            continue;
        }
        let now = v
            .owner
            .as_ref()
            .map(|n| format!("served by node {n}"))
            .unwrap_or_else(|| {
                if bgp_mode(next, ip) {
                    BGP_SERVED.into()
                } else {
                    "served by no node (no load-balancer node is ready)".into()
                }
            });
        let was = old
            .owner
            .as_ref()
            .map(|n| n.to_string())
            .unwrap_or_else(|| "none".into());
        let on_ip = next
            .ingresses
            .iter()
            .filter(|(_, i)| i.ips.contains(ip))
            .filter_map(|(k, _)| ingress_target(look, k.namespace.as_str(), k.name.as_str()));
        let targets = v.services.iter().filter_map(|k| service_target(look, k));
        for t in targets.chain(on_ip) {
            out.push(Note {
                target: t,
                reason: Reason::NodeChanged,
                action: "Announce",
                message: format!("VIP {ip} is now {now} (was {was})"),
            });
        }
    }
    // Problems that are new (or whose message changed).
    let old: BTreeSet<&Problem> = prev.problems.iter().collect();
    for p in &next.problems {
        if old.contains(p) {
            continue;
        }
        if let Some(t) = problem_target(p, look) {
            out.push(Note {
                target: t,
                reason: p.reason.clone(),
                action: "Allocate",
                message: p.message.clone(),
            });
        }
    }
    out
}

fn problem_target(p: &Problem, look: &dyn Lookup) -> Option<Target> {
    match &p.object {
        ObjRef::Service(key) => service_target(look, key),
        ObjRef::Node(name) => Some(Target {
            api_version: "v1".into(),
            kind: "Node".into(),
            namespace: None,
            name: name.to_string(),
            uid: look.node_uid(name.as_str())?,
        }),
        ObjRef::Ingress { namespace, name } => ingress_target(look, namespace, name),
        ObjRef::Gateway { namespace, name } => {
            gateway_api_target(look, "Gateway", Some(namespace), name)
        }
        ObjRef::HttpRoute { namespace, name } => {
            gateway_api_target(look, "HTTPRoute", Some(namespace), name)
        }
        ObjRef::GrpcRoute { namespace, name } => {
            gateway_api_target(look, "GRPCRoute", Some(namespace), name)
        }
        ObjRef::L4Route {
            kind,
            namespace,
            name,
        } => gateway_api_target(look, kind.as_str(), Some(namespace), name),
        ObjRef::GatewayClass { name } => gateway_api_target(look, "GatewayClass", None, name),
        ObjRef::BackendTlsPolicy { namespace, name } => {
            gateway_api_target(look, "BackendTLSPolicy", Some(namespace), name)
        }
        ObjRef::ListenerSet { namespace, name } => {
            gateway_api_target(look, "ListenerSet", Some(namespace), name)
        }
        // ConfigMap problems: config_note. An object without a valid name cannot exist
        // in the API.
        _ => None,
    }
}

/// How an address of a BGP-mode pool is served (it has no owner: every LB node
/// announces it).
const BGP_SERVED: &str = "announced by every load-balancer node (BGP mode)";

/// Whether `ip` is an address of a BGP-mode pool in `state`.
fn bgp_mode(state: &State, ip: &IpAddr) -> bool {
    state
        .vips
        .get(ip)
        .and_then(|v| state.config.pools.get(&v.pool))
        .is_some_and(|p| !p.mode.is_vrrp())
}

/// IPAllocated when an object's IPs changed to a non-empty list (`after`: its IPs and
/// pool now), IPReleased for each IP it no longer has.
fn allocation_notes(
    out: &mut Vec<Note>,
    target: &Target,
    before: &[IpAddr],
    after: Option<(&[IpAddr], &str)>,
    next: &State,
) {
    let now = after.map_or(&[][..], |(ips, _)| ips);
    if let Some((ips, pool)) = after.filter(|(ips, _)| !ips.is_empty() && *ips != before) {
        let owners: Vec<String> = ips
            .iter()
            .filter_map(|ip| next.vips.get(ip)?.owner.as_ref().map(|o| o.to_string()))
            .collect();
        let served = if !ips.is_empty() && ips.iter().all(|ip| bgp_mode(next, ip)) {
            BGP_SERVED.to_string()
        } else if owners.is_empty() {
            "no load-balancer node yet".to_string()
        } else {
            format!("served by node {}", owners.join(", "))
        };
        let ips: Vec<String> = ips.iter().map(|i| i.to_string()).collect();
        out.push(Note {
            target: target.clone(),
            reason: Reason::IpAllocated,
            action: "Allocate",
            message: format!("Assigned IP {} from pool {pool} ({served})", ips.join(", ")),
        });
    }
    let gone: Vec<String> = before
        .iter()
        .filter(|ip| !now.contains(ip))
        .map(|i| i.to_string())
        .collect();
    if !gone.is_empty() {
        out.push(Note {
            target: target.clone(),
            reason: Reason::IpReleased,
            action: "Release",
            message: format!("Released IP {}", gone.join(", ")),
        });
    }
}

/// A queue of notes, written by a background task at a bounded rate.
#[derive(Clone)]
pub struct Recorder {
    queue: Arc<Mutex<VecDeque<Note>>>,
    wake: Arc<Notify>,
}

impl Recorder {
    /// Start the writer task. `leader` gates every write (a follower drops its queue).
    pub fn spawn(
        client: Client,
        identity: String,
        per_second: u32,
        leader: Arc<AtomicBool>,
        metrics: Metrics,
        shutdown: CancellationToken,
    ) -> Recorder {
        let r = Recorder {
            queue: Arc::new(Mutex::new(VecDeque::new())),
            wake: Arc::new(Notify::new()),
        };
        let task = r.clone();
        tokio::spawn(async move {
            let mut w = Writer {
                client,
                identity,
                counts: BTreeMap::new(),
            };
            // At least one a second; bursts of twice the rate.
            let rate = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
            let burst = rate.saturating_add(rate.get());
            let limiter = RateLimiter::direct(Quota::per_second(rate).allow_burst(burst));
            let mut failures = FailureLog::new("writing Events");
            loop {
                let next = task.queue.lock().expect("event queue").pop_front();
                let Some(note) = next else {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = task.wake.notified() => continue,
                    }
                };
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = limiter.until_ready() => {}
                }
                if !leader.load(Ordering::SeqCst) {
                    continue;
                }
                match w.write(&note).await {
                    Ok(()) => {
                        failures.succeeded();
                        metrics
                            .events_total
                            .get_or_create(&ReasonLabel {
                                reason: note.reason.clone(),
                            })
                            .inc();
                    }
                    Err(e) => {
                        // The Event is dropped (it said what the log already said).
                        metrics.write_failed("event", code_label(&e));
                        failures.failed(
                            1,
                            &format!(
                                "{} {} {}: {}",
                                note.reason,
                                note.target.kind,
                                note.target.name,
                                describe(&e)
                            ),
                        );
                    }
                }
            }
        });
        r
    }

    pub fn record(&self, note: Note) {
        tracing::info!(
            kind = %note.target.kind,
            object = %note.target.name,
            reason = %note.reason,
            "{}",
            note.message
        );
        let mut q = self.queue.lock().expect("event queue");
        if q.len() >= QUEUE_LIMIT {
            q.pop_front();
        }
        q.push_back(note);
        drop(q);
        self.wake.notify_one();
    }
}

struct Writer {
    client: Client,
    identity: String,
    /// Event name -> the count we last wrote.
    counts: BTreeMap<String, i32>,
}

impl Writer {
    async fn write(&mut self, note: &Note) -> Result<(), kube::Error> {
        let ns = note
            .target
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let name = note.name();
        let now = Time(Timestamp::now());
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        if !self.counts.contains_key(&name) {
            let ev = Event {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(ns.clone()),
                    ..Default::default()
                },
                involved_object: ObjectReference {
                    api_version: Some(note.target.api_version.clone()),
                    kind: Some(note.target.kind.clone()),
                    name: Some(note.target.name.clone()),
                    namespace: note.target.namespace.clone(),
                    uid: Some(note.target.uid.clone()),
                    ..Default::default()
                },
                reason: Some(note.reason.to_string()),
                message: Some(note.message.chars().take(1024).collect()),
                type_: Some(note.reason.event_type().as_str().into()),
                count: Some(1),
                first_timestamp: Some(now.clone()),
                last_timestamp: Some(now.clone()),
                source: Some(EventSource {
                    component: Some(SOURCE_COMPONENT.into()),
                    host: None,
                }),
                reporting_component: Some(REPORTING_CONTROLLER.into()),
                reporting_instance: Some(self.identity.chars().take(128).collect()),
                action: Some(note.action.into()),
                ..Default::default()
            };
            match timed(api.create(&pp, &ev)).await {
                Ok(_) => {
                    self.counts.insert(name, 1);
                    return Ok(());
                }
                Err(e) if api_code(&e) == Some(409) => {} // exists: aggregate below
                Err(e) => return Err(e),
            }
        }
        // Aggregate: bump the count of the existing Event.
        let existing = timed(api.get_opt(&name)).await?;
        let Some(existing) = existing else {
            self.counts.remove(&name);
            return Err(kube::Error::Service(
                format!("Event {ns}/{name} vanished; it will be re-created next time").into(),
            ));
        };
        let count = existing
            .count
            .unwrap_or(1)
            .max(self.counts.get(&name).copied().unwrap_or(1))
            + 1;
        let body = json!({
            "metadata": {"resourceVersion": existing.metadata.resource_version},
            "count": count,
            "lastTimestamp": now,
        });
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        timed(api.patch(&name, &pp, &Patch::Merge(&body))).await?;
        self.counts.insert(name, count);
        Ok(())
    }
}

async fn timed<T>(
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    crate::kube::timed(|| "writing the Event".into(), f).await
}

#[cfg(test)]
mod bgp_tests {
    use super::*;
    use k8slb_common::config::parse_global_config;
    use k8slb_common::objects::Objects;
    use k8slb_common::plan::{plan, PlanOptions};
    use serde_json::json;

    struct Uids;
    impl Lookup for Uids {
        fn service_uid(&self, ns: &str, name: &str) -> Option<String> {
            Some(format!("uid-{ns}-{name}"))
        }
        fn node_uid(&self, name: &str) -> Option<String> {
            Some(format!("uid-{name}"))
        }
        fn ingress_uid(&self, _: &str, _: &str) -> Option<String> {
            None
        }
    }

    fn state(mode: &str) -> State {
        let cfg = parse_global_config(&format!(
            r#"{{ "pools": {{ "default": {{ "network": "198.18.10.0/24", "range": "198.18.10.10-198.18.10.20", "mode": "{mode}" }} }},
                 "bgp": {{ "asn": 64512, "peers": [{{ "address": "198.18.0.5", "asn": 64513 }}] }} }}"#
        ))
        .unwrap();
        let svc = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "web", "namespace": "default", "uid": "uid-default-web" },
            "spec": { "type": "LoadBalancer", "ports": [ { "port": 80, "protocol": "TCP" } ] }
        }))
        .unwrap();
        let node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": { "name": "lb1", "uid": "uid-lb1", "labels": { "type": "loadBalancer" } },
            "status": { "conditions": [ { "type": "Ready", "status": "True" } ],
                        "addresses": [ { "type": "InternalIP", "address": "198.18.0.11" } ] }
        }))
        .unwrap();
        let objects = Objects {
            services: vec![svc],
            nodes: vec![node],
            ..Default::default()
        };
        plan(&cfg, &PlanOptions::default(), &objects, None)
    }

    fn messages(prev: &State, next: &State) -> Vec<String> {
        diff(prev, next, &Uids)
            .into_iter()
            .map(|n| n.message)
            .collect()
    }

    #[test]
    fn a_bgp_pool_address_is_said_to_be_announced_by_every_node_not_by_none() {
        let empty = State::empty(state("bgp").config.clone());
        let bgp = state("bgp");
        let m = messages(&empty, &bgp).join("\n");
        assert!(m.contains(BGP_SERVED), "{m}");
        assert!(!m.contains("no load-balancer node yet"), "{m}");
        // A pool switched from VRRP to BGP: its address loses its owner, and is still served.
        let m = messages(&state("vrrp"), &bgp).join("\n");
        assert!(m.contains(BGP_SERVED), "{m}");
        assert!(!m.contains("served by no node"), "{m}");
    }
}
