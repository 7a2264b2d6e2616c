//! Gateway API status, as the specification defines it: our GatewayClasses' conditions;
//! each Gateway's `addresses`, conditions and listeners (`attachedRoutes`,
//! `supportedKinds`, conditions); each HTTPRoute's (GRPCRoute's, ...) `parents` entry for every Gateway of
//! ours it names (other controllers' entries are kept as they are, ours are removed when
//! the route no longer names a Gateway of ours).
//!
//! What to write is decided without I/O ([`decide`]): the desired status fields are built
//! from the plan's translation ([`k8slb_common::plan::gateway_status`]) and compared with
//! what the object shows; a condition whose status did not change keeps its
//! `lastTransitionTime`, so a steady state writes nothing. Every condition carries the
//! object's `metadata.generation` as `observedGeneration`. [`GatewayStatusWriter`]
//! executes the writes as JSON merge patches of the status subresource, with the
//! observed `resourceVersion` as a precondition (409: the next tick retries on fresh
//! data; another controller's `parents` entries are never overwritten unseen).

use crate::failing::FailureLog;
use crate::gateway_api::GatewayResources;
use crate::kube::{api_code, code_label, describe};
use k8slb_common::gateway::types::{L4Kind, GROUP};
use k8slb_common::gateway::{Condition, GatewayOutput, ListenerStatus, ParentStatus, CONTROLLER};
use k8slb_common::names::ObjectKey;
use k8slb_common::objects::Objects;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use std::collections::HashMap;

/// An object whose Gateway API status we write.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GwTarget {
    GatewayClass(String),
    Gateway(ObjectKey),
    HttpRoute(ObjectKey),
    GrpcRoute(ObjectKey),
    /// A TLSRoute, TCPRoute or UDPRoute.
    L4Route(L4Kind, ObjectKey),
    BackendTlsPolicy(ObjectKey),
    ListenerSet(ObjectKey),
}

impl std::fmt::Display for GwTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GwTarget::GatewayClass(n) => write!(f, "GatewayClass {n}"),
            GwTarget::Gateway(k) => write!(f, "Gateway {k}"),
            GwTarget::HttpRoute(k) => write!(f, "HTTPRoute {k}"),
            GwTarget::GrpcRoute(k) => write!(f, "GRPCRoute {k}"),
            GwTarget::L4Route(kind, k) => write!(f, "{} {k}", kind.as_str()),
            GwTarget::BackendTlsPolicy(k) => write!(f, "BackendTLSPolicy {k}"),
            GwTarget::ListenerSet(k) => write!(f, "ListenerSet {k}"),
        }
    }
}

/// One status write: set these fields of `status` on the condition that the object is
/// still at `resource_version`.
#[derive(Debug, Clone, PartialEq)]
pub struct GwWrite {
    pub target: GwTarget,
    pub resource_version: String,
    pub status: Value,
}

/// What was written and not yet seen (target → the resourceVersion it was written
/// from): while the store still shows that resourceVersion, the write is simply not
/// visible yet (and another write from it could only be refused: its precondition is
/// stale).
#[derive(Debug, Default, Clone)]
pub struct GwMemory(HashMap<GwTarget, String>);

impl GwMemory {
    /// `w` was written.
    pub fn written(&mut self, w: &GwWrite) {
        self.0.insert(w.target.clone(), w.resource_version.clone());
    }
}

/// The conditions as the API writes them, keeping the observed `lastTransitionTime` of a
/// condition whose status did not change.
fn conditions(conds: &[Condition], generation: i64, observed: Option<&Value>, now: &str) -> Value {
    let observed: &[Value] = observed
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let status = |b: bool| if b { "True" } else { "False" };
    Value::Array(
        conds
            .iter()
            .map(|c| {
                let since = observed
                    .iter()
                    .find(|o| {
                        o.get("type").and_then(Value::as_str) == Some(c.type_.as_str())
                            && o.get("status").and_then(Value::as_str) == Some(status(c.status))
                    })
                    .and_then(|o| o.get("lastTransitionTime").cloned())
                    .unwrap_or_else(|| json!(now));
                json!({
                    "type": c.type_.as_str(),
                    "status": status(c.status),
                    "reason": c.reason.as_str(),
                    "message": c.message,
                    "observedGeneration": generation,
                    "lastTransitionTime": since,
                })
            })
            .collect(),
    )
}

fn generation(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> i64 {
    meta.generation.unwrap_or(0)
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<ObjectKey> {
    ObjectKey::new(meta.namespace.as_deref()?, meta.name.as_deref()?).ok()
}

/// `status.<field>` of an observed status, if any.
fn field<'a>(status: Option<&'a Value>, name: &str) -> Option<&'a Value> {
    status.and_then(|s| s.get(name))
}

fn listeners(ls: &[ListenerStatus], generation: i64, observed: Option<&Value>, now: &str) -> Value {
    let observed: &[Value] = observed
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    Value::Array(
        ls.iter()
            .map(|l| {
                let seen = observed
                    .iter()
                    .find(|o| o.get("name").and_then(Value::as_str) == Some(l.name.as_str()));
                json!({
                    "name": l.name,
                    "attachedRoutes": l.attached_routes,
                    "supportedKinds": l.supported_kinds.iter()
                        .map(|k| json!({"group": GROUP, "kind": k}))
                        .collect::<Vec<_>>(),
                    "conditions": conditions(&l.conditions, generation, seen.and_then(|s| s.get("conditions")), now),
                })
            })
            .collect(),
    )
}

fn parent_ref(p: &ParentStatus) -> Value {
    let mut r = json!({
        "group": GROUP,
        "kind": p.kind.as_str(),
        "namespace": p.parent.namespace.as_str(),
        "name": p.parent.name.as_str(),
    });
    if let Some(s) = &p.section_name {
        r["sectionName"] = json!(s);
    }
    if let Some(port) = p.port {
        r["port"] = json!(port);
    }
    r
}

fn is_ours(entry: &Value) -> bool {
    entry.get("controllerName").and_then(Value::as_str) == Some(CONTROLLER)
}

/// A wanted status: (target, the observed object's resourceVersion, the wanted status
/// fields, the same fields as observed).
type Wanted = (GwTarget, String, Value, Value);

/// The status every object of ours should show, as `out` says: (target, the observed
/// object's resourceVersion, the wanted status fields, the same fields as observed). A
/// route that never named a Gateway of ours is left out. `now` is the time a changed
/// condition transitioned (RFC 3339); an unchanged one keeps its observed time.
pub fn desired(out: &GatewayOutput, objs: &Objects, now: &str) -> Vec<Wanted> {
    let mut wanted: Vec<Wanted> = Vec::new();
    classes(out, objs, now, &mut wanted);
    gateways(out, objs, now, &mut wanted);
    listener_sets(out, objs, now, &mut wanted);
    routes(out, objs, now, &mut wanted);
    policies(out, objs, now, &mut wanted);
    wanted
}

/// Our GatewayClasses' conditions.
fn classes(out: &GatewayOutput, objs: &Objects, now: &str, wanted: &mut Vec<Wanted>) {
    for c in &objs.gateway_classes {
        let Some(name) = c.metadata.name.clone() else {
            continue;
        };
        let Some(conds) = out.classes.get(&name) else {
            continue; // another controller's class
        };
        let obs = c.status.as_ref();
        let want = json!({
            "conditions": conditions(conds, generation(&c.metadata), field(obs, "conditions"), now),
        });
        let seen =
            json!({ "conditions": field(obs, "conditions").cloned().unwrap_or(Value::Null) });
        let rv = c.metadata.resource_version.clone().unwrap_or_default();
        wanted.push((GwTarget::GatewayClass(name), rv, want, seen));
    }
}

/// Our Gateways' addresses, conditions, listeners and `attachedListenerSets` (only for
/// those with `spec.allowedListeners`: see [`k8slb_common::gateway::GatewayStatus`]).
fn gateways(out: &GatewayOutput, objs: &Objects, now: &str, wanted: &mut Vec<Wanted>) {
    for g in &objs.gateways {
        let Some(k) = key_of(&g.metadata) else {
            continue;
        };
        let Some(st) = out.gateways.get(&k) else {
            continue;
        };
        let obs = g.status.as_ref();
        let gen = generation(&g.metadata);
        let mut want = json!({
            "addresses": st.addresses.iter()
                .map(|ip| json!({"type": "IPAddress", "value": ip.to_string()}))
                .collect::<Vec<_>>(),
            "conditions": conditions(&st.conditions, gen, field(obs, "conditions"), now),
            "listeners": listeners(&st.listeners, gen, field(obs, "listeners"), now),
        });
        let mut seen = json!({
            "addresses": field(obs, "addresses").cloned().unwrap_or(Value::Null),
            "conditions": field(obs, "conditions").cloned().unwrap_or(Value::Null),
            "listeners": field(obs, "listeners").cloned().unwrap_or(Value::Null),
        });
        if let Some(n) = st.attached_listener_sets {
            want["attachedListenerSets"] = json!(n);
            seen["attachedListenerSets"] = field(obs, "attachedListenerSets")
                .cloned()
                .unwrap_or(Value::Null);
        }
        let rv = g.metadata.resource_version.clone().unwrap_or_default();
        wanted.push((GwTarget::Gateway(k), rv, want, seen));
    }
}

/// The ListenerSets that name a Gateway of ours: conditions and listeners.
fn listener_sets(out: &GatewayOutput, objs: &Objects, now: &str, wanted: &mut Vec<Wanted>) {
    for s in &objs.listener_sets {
        let Some(k) = key_of(&s.metadata) else {
            continue;
        };
        let Some(st) = out.listener_sets.get(&k) else {
            continue; // another controller's Gateway, or none
        };
        let obs = s.status.as_ref();
        let gen = generation(&s.metadata);
        let want = json!({
            "conditions": conditions(&st.conditions, gen, field(obs, "conditions"), now),
            "listeners": listeners(&st.listeners, gen, field(obs, "listeners"), now),
        });
        let seen = json!({
            "conditions": field(obs, "conditions").cloned().unwrap_or(Value::Null),
            "listeners": field(obs, "listeners").cloned().unwrap_or(Value::Null),
        });
        let rv = s.metadata.resource_version.clone().unwrap_or_default();
        wanted.push((GwTarget::ListenerSet(k), rv, want, seen));
    }
}

/// Every route's `parents` entries of ours (other controllers' kept as they are).
fn routes(out: &GatewayOutput, objs: &Objects, now: &str, wanted: &mut Vec<Wanted>) {
    let http = objs.http_routes.iter().map(|r| {
        let k = key_of(&r.metadata);
        let ours = k.as_ref().and_then(|k| out.http_routes.get(k));
        (
            k.map(GwTarget::HttpRoute),
            &r.metadata,
            r.status.as_ref(),
            ours,
        )
    });
    let l4 = objs.l4_routes.iter().map(|r| {
        let k = key_of(&r.metadata);
        let ours = k
            .as_ref()
            .and_then(|k| out.l4_routes.get(&(r.kind, k.clone())));
        (
            k.map(|k| GwTarget::L4Route(r.kind, k)),
            &r.metadata,
            r.status.as_ref(),
            ours,
        )
    });
    let grpc = objs.grpc_routes.iter().map(|r| {
        let k = key_of(&r.metadata);
        let ours = k.as_ref().and_then(|k| out.grpc_routes.get(k));
        (
            k.map(GwTarget::GrpcRoute),
            &r.metadata,
            r.status.as_ref(),
            ours,
        )
    });
    for (target, meta, obs, ours) in http.chain(grpc).chain(l4) {
        let Some(target) = target else {
            continue;
        };
        let observed: Vec<Value> = field(obs, "parents")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if ours.is_none() && !observed.iter().any(is_ours) {
            continue; // never ours
        }
        let gen = generation(meta);
        let mut parents: Vec<Value> = observed.iter().filter(|e| !is_ours(e)).cloned().collect();
        for p in ours.into_iter().flatten() {
            let pref = parent_ref(p);
            let seen = observed
                .iter()
                .find(|e| is_ours(e) && e.get("parentRef") == Some(&pref));
            parents.push(json!({
                "parentRef": pref,
                "controllerName": CONTROLLER,
                "conditions": conditions(&p.conditions, gen, seen.and_then(|s| s.get("conditions")), now),
            }));
        }
        let want = json!({ "parents": parents });
        let seen = json!({ "parents": observed });
        let rv = meta.resource_version.clone().unwrap_or_default();
        wanted.push((target, rv, want, seen));
    }
}

/// Every BackendTLSPolicy's `ancestors` entries of ours.
fn policies(out: &GatewayOutput, objs: &Objects, now: &str, wanted: &mut Vec<Wanted>) {
    for p in &objs.backend_tls_policies {
        let Some(k) = key_of(&p.metadata) else {
            continue;
        };
        let ours = out.backend_tls_policies.get(&k);
        let observed: Vec<Value> = field(p.status.as_ref(), "ancestors")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if ours.is_none_or(Vec::is_empty) && !observed.iter().any(is_ours) {
            continue; // nothing of ours to say
        }
        let gen = generation(&p.metadata);
        let mut ancestors: Vec<Value> = observed.iter().filter(|e| !is_ours(e)).cloned().collect();
        for a in ours.into_iter().flatten() {
            let aref = json!({
                "group": GROUP,
                "kind": "Gateway",
                "namespace": a.gateway.namespace.as_str(),
                "name": a.gateway.name.as_str(),
            });
            let seen = observed
                .iter()
                .find(|e| is_ours(e) && e.get("ancestorRef") == Some(&aref));
            ancestors.push(json!({
                "ancestorRef": aref,
                "controllerName": CONTROLLER,
                "conditions": conditions(&a.conditions, gen, seen.and_then(|s| s.get("conditions")), now),
            }));
        }
        let want = json!({ "ancestors": ancestors });
        let seen = json!({ "ancestors": observed });
        let rv = p.metadata.resource_version.clone().unwrap_or_default();
        wanted.push((GwTarget::BackendTlsPolicy(k), rv, want, seen));
    }
}

/// The writes that bring every status to what `out` says (see the module's doc). `now`
/// is the time a changed condition transitioned (RFC 3339).
pub fn decide(
    out: &GatewayOutput,
    objs: &Objects,
    now: &str,
    memory: &mut GwMemory,
) -> Vec<GwWrite> {
    let wanted = desired(out, objs, now);
    let mut writes = Vec::new();
    let mut kept = Vec::new();
    for (target, rv, want, seen) in wanted {
        kept.push(target.clone());
        if want == seen {
            memory.0.remove(&target);
            continue;
        }
        if memory.0.get(&target) == Some(&rv) {
            continue; // written, not yet seen by the watch
        }
        writes.push(GwWrite {
            target,
            resource_version: rv,
            status: want,
        });
    }
    memory.0.retain(|k, _| kept.contains(k));
    writes
}

/// Executes the Gateway API status writes.
pub struct GatewayStatusWriter {
    client: Client,
    resources: GatewayResources,
    failures: FailureLog,
}

impl GatewayStatusWriter {
    pub fn new(client: Client, resources: GatewayResources) -> Self {
        GatewayStatusWriter {
            client,
            resources,
            failures: FailureLog::new("patching Gateway API status"),
        }
    }

    /// The API of `target`'s kind and its name there; `None` when its kind is not
    /// served (its CRD is gone).
    fn api_for(&self, target: &GwTarget) -> Option<(Api<DynamicObject>, String)> {
        let c = || self.client.clone();
        let namespaced = |k: &ObjectKey, ar| {
            (
                Api::<DynamicObject>::namespaced_with(c(), k.namespace.as_str(), ar),
                k.name.to_string(),
            )
        };
        Some(match target {
            GwTarget::GatewayClass(n) => (
                Api::<DynamicObject>::all_with(c(), &self.resources.classes),
                n.clone(),
            ),
            GwTarget::Gateway(k) => namespaced(k, &self.resources.gateways),
            GwTarget::HttpRoute(k) => namespaced(k, &self.resources.routes),
            GwTarget::GrpcRoute(k) => namespaced(k, self.resources.grpc.as_ref()?),
            GwTarget::BackendTlsPolicy(k) => namespaced(k, self.resources.backend_tls.as_ref()?),
            GwTarget::ListenerSet(k) => namespaced(k, self.resources.listener_sets.as_ref()?),
            GwTarget::L4Route(kind, k) => namespaced(k, self.resources.l4(*kind)?),
        })
    }

    /// Write `writes`, asking `still_leader` before each; returns how many failed.
    pub async fn execute(
        &mut self,
        writes: &[GwWrite],
        memory: &mut GwMemory,
        still_leader: impl Fn() -> bool,
        metrics: &crate::admin::Metrics,
    ) -> usize {
        let mut failed = 0;
        let mut errors = (0u64, String::new());
        for w in writes {
            if !still_leader() {
                break;
            }
            let Some((api, name)) = self.api_for(&w.target) else {
                continue; // its CRD is gone: nothing to write to
            };
            let body = json!({
                "metadata": {"resourceVersion": w.resource_version},
                "status": w.status,
            });
            let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
            let call = api.patch_status(&name, &params, &patch);
            match crate::kube::timed(|| format!("patching the status of {}", w.target), call).await
            {
                Ok(_) => {
                    tracing::info!(object = %w.target, "Gateway API status updated");
                    metrics.status_patch("ok");
                    memory.written(w);
                }
                Err(e) if api_code(&e) == Some(409) => {
                    failed += 1;
                    metrics.status_patch("conflict");
                    tracing::debug!(object = %w.target, "status changed since we looked; retrying");
                }
                Err(e) if api_code(&e) == Some(404) => {
                    // Deleted since: nothing to write.
                }
                Err(e) => {
                    failed += 1;
                    metrics.status_patch("error");
                    metrics.write_failed("status", code_label(&e));
                    errors = (errors.0 + 1, format!("{}: {}", w.target, describe(&e)));
                }
            }
        }
        if errors.0 > 0 {
            self.failures.failed(errors.0, &errors.1);
        } else if !writes.is_empty() && failed == 0 {
            self.failures.succeeded();
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8slb_common::gateway::{ConditionReason, ConditionType};

    fn objects(texts: &[&str]) -> Objects {
        let mut o = Objects::default();
        for t in texts {
            o.add_text(t).unwrap();
        }
        o
    }

    const CLASS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb, generation: 3, resourceVersion: "7" }
spec: { controllerName: k8slb.io/gateway-controller }
"#;

    fn accepted(status: bool) -> GatewayOutput {
        let mut out = GatewayOutput::default();
        out.classes.insert(
            "k8slb".into(),
            vec![Condition {
                type_: ConditionType::Accepted,
                status,
                reason: if status {
                    ConditionReason::Accepted
                } else {
                    ConditionReason::InvalidParameters
                },
                message: "m".into(),
            }],
        );
        out
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let mut mem = GwMemory::default();
        let o = objects(&[CLASS]);
        let w = decide(&accepted(true), &o, "2026-11-24T08:00:00Z", &mut mem);
        assert_eq!(w.len(), 1);
        let c = &w[0].status["conditions"][0];
        assert_eq!(c["lastTransitionTime"], "2026-11-24T08:00:00Z");
        assert_eq!(c["observedGeneration"], 3);
        assert_eq!(w[0].resource_version, "7");
        mem.written(&w[0]);
        // Not seen yet (same resourceVersion): not written again.
        assert!(decide(&accepted(true), &o, "2026-11-24T08:00:05Z", &mut mem).is_empty());

        // Seen: nothing to write, whatever the clock says.
        let seen = CLASS.replace("\"7\" }", "\"8\" }")
            + &format!("status: {}\n", serde_json::json!({"conditions": [c]}));
        let o = objects(&[&seen]);
        assert!(decide(&accepted(true), &o, "2026-11-24T09:00:00Z", &mut mem).is_empty());
        // The status flips: a new transition time.
        let w = decide(&accepted(false), &o, "2026-11-24T09:00:00Z", &mut mem);
        assert_eq!(
            w[0].status["conditions"][0]["lastTransitionTime"],
            "2026-11-24T09:00:00Z"
        );
        assert_eq!(w[0].status["conditions"][0]["status"], "False");
    }

    #[test]
    fn a_route_that_never_named_a_gateway_of_ours_is_never_written() {
        let route = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: r, namespace: default, resourceVersion: "1" }
spec: { parentRefs: [ { name: theirs } ] }
status: { parents: [ { parentRef: { name: theirs }, controllerName: example.com/x, conditions: [] } ] }
"#;
        let mut mem = GwMemory::default();
        assert!(decide(&GatewayOutput::default(), &objects(&[route]), "t", &mut mem).is_empty());
    }

    /// Written only for a Gateway with `spec.allowedListeners`: a cluster whose CRDs
    /// predate the field prunes it, and a write that never sticks would repeat forever.
    #[test]
    fn attached_listener_sets_is_written_only_when_the_gateway_allows_sets() {
        let gw = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: default, resourceVersion: "1" }
spec: { gatewayClassName: k8slb, listeners: [] }
"#;
        let k: ObjectKey = "default/gw".parse().unwrap();
        let mut out = GatewayOutput::default();
        let st = |n: Option<u32>| k8slb_common::gateway::GatewayStatus {
            addresses: vec![],
            conditions: vec![],
            listeners: vec![],
            attached_listener_sets: n,
            warnings: vec![],
        };
        out.gateways.insert(k.clone(), st(None));
        let mut mem = GwMemory::default();
        let w = decide(&out, &objects(&[gw]), "t", &mut mem);
        assert!(
            w[0].status.get("attachedListenerSets").is_none(),
            "{:?}",
            w[0]
        );
        out.gateways.insert(k, st(Some(2)));
        let w = decide(&out, &objects(&[gw]), "t", &mut GwMemory::default());
        assert_eq!(w[0].status["attachedListenerSets"], 2);
    }
}
