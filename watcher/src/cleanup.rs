//! `k8slb-watcher cleanup [--dry-run]`: removes what k8slb wrote into other objects, for
//! the uninstall (issue 24 item 4). Without it, Services and Ingresses keep showing a VIP
//! nobody serves and Gateways stay `Programmed: True`.
//!
//! What it removes, and only that:
//!
//! - **Services** this controller claims (type LoadBalancer, `spec.loadBalancerClass` our
//!   class, or none while unclassed Services are ours: the global config's
//!   `loadBalancerClass` / `claimUnclassed`, as the plan reads them): the
//!   `status.loadBalancer.ingress` entries whose IP (or `<ip>.sslip.io` hostname) lies in
//!   one of our pools or is a VIP of the published state. Other entries stay.
//! - **Ingresses** of our IngressClass (the class rule of [`k8slb_common::ingress::is_ours`]):
//!   the same entries of `status.loadBalancer.ingress`.
//! - **Gateways** of a GatewayClass whose `controllerName` is ours: `status.addresses` and
//!   `status.listeners` go, and `status.conditions` go back to what the Gateway API CRD
//!   gives a Gateway no controller has seen (`Accepted` and `Programmed` `Unknown`,
//!   reason `Pending`, "Waiting for controller").
//!   Their `status.attachedListenerSets` goes too.
//! - **ListenerSets** whose `parentRef` names such a Gateway: `status.listeners` go and
//!   `status.conditions` go back to the CRD's default, as a Gateway's.
//! - **Routes** (HTTPRoute, GRPCRoute, TLSRoute, TCPRoute, UDPRoute): the `status.parents` entries
//!   whose `controllerName` is ours; another controller's entries stay as they are.
//!   The same for the `status.ancestors` entries of BackendTLSPolicies.
//! - the published **state ConfigMaps** (`k8slb-state`, `k8slb-state-<i>`) in the
//!   watcher's namespace.
//!
//! Each write is a JSON merge patch of the status subresource carrying the observed
//! `resourceVersion` (a 409 means the object changed since it was read: the pass is run
//! again on fresh data, at most [`PASSES`] times). Running it again finds nothing to do
//! (idempotent). A kind the API does not serve or the ServiceAccount may not list (the
//! Ingress and Gateway API kinds in an install without them) is skipped with a line that
//! says so. Stop the watcher first (scale its Deployment to 0), or it writes the status
//! back.
//!
//! What to write is decided by pure functions over the objects as JSON ([`service`],
//! [`ingress`], [`gateway`], [`route`]); [`run`] lists, decides, prints and writes.

use crate::gateway_api::{GatewayDiscovery, GatewayResources};
use crate::kube::{api_code, describe};
use crate::status::sslip;
use crate::Error;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8slb_common::config::{parse_global_config, GlobalConfig};
use k8slb_common::gateway::CONTROLLER as GATEWAY_CONTROLLER;
use k8slb_common::state::State;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

/// How many times a pass is run when writes meet conflicts (409).
pub const PASSES: usize = 3;

#[derive(Debug, Clone, clap::Args)]
pub struct CleanupArgs {
    /// Print what would be removed, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The watcher's namespace: the global ConfigMap `global` and the state ConfigMaps.
    #[arg(long, env = "K8SLB_NAMESPACE", default_value = "k8slb-system")]
    pub namespace: String,
}

/// What is ours: the global config (class, pools) and the VIPs of the published state.
#[derive(Debug, Clone)]
pub struct Ours {
    pub class: String,
    pub claim_unclassed: bool,
    pub config: Option<GlobalConfig>,
    pub state_vips: BTreeSet<IpAddr>,
}

impl Ours {
    /// Ours from the global config (None: it is missing or unreadable; then only the
    /// default class and the state's VIPs say what is ours).
    pub fn new(config: Option<GlobalConfig>, state: Option<&State>) -> Ours {
        let (class, claim_unclassed) = match &config {
            Some(c) => (c.class.clone(), c.claim_unclassed),
            // The config's defaults.
            None => (k8slb_common::config::DEFAULT_CLASS.to_string(), true),
        };
        Ours {
            class,
            claim_unclassed,
            state_vips: state
                .map(|s| s.vips.keys().copied().collect())
                .unwrap_or_default(),
            config,
        }
    }

    fn ip(&self, ip: IpAddr) -> bool {
        self.state_vips.contains(&ip)
            || self.config.as_ref().is_some_and(|c| {
                c.pools
                    .values()
                    .any(|p| p.network.range().contains(ip) || p.range.range().contains(ip))
            })
    }

    /// Is this `status.loadBalancer.ingress` entry one k8slb writes: `{ip}` or
    /// `{hostname: <ip>.sslip.io}` with an IP of ours.
    fn entry(&self, e: &Value) -> bool {
        if let Some(ip) = e.get("ip").and_then(Value::as_str) {
            return ip.parse().is_ok_and(|ip| self.ip(ip));
        }
        let Some(h) = e.get("hostname").and_then(Value::as_str) else {
            return false;
        };
        let Some(host_ip) = h.strip_suffix(".sslip.io") else {
            return false;
        };
        [host_ip.to_string(), host_ip.replace('-', ":")]
            .iter()
            .filter_map(|s| s.parse::<IpAddr>().ok())
            .any(|ip| self.ip(ip) && sslip(&ip) == h)
    }

    /// Does this controller claim the Service (see [`k8slb_common::plan`]'s claim)?
    fn claims(&self, svc: &Value) -> bool {
        let spec = &svc["spec"];
        if spec["type"].as_str() != Some("LoadBalancer") {
            return false;
        }
        match spec["loadBalancerClass"].as_str() {
            Some(c) => c == self.class,
            None => self.claim_unclassed,
        }
    }
}

/// An object whose status is cleaned.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    Service {
        namespace: String,
        name: String,
    },
    Ingress {
        namespace: String,
        name: String,
    },
    Gateway {
        namespace: String,
        name: String,
    },
    /// `kind` is HTTPRoute, GRPCRoute, TLSRoute, TCPRoute or UDPRoute.
    Route {
        kind: String,
        namespace: String,
        name: String,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Service { namespace, name } => write!(f, "Service {namespace}/{name}"),
            Target::Ingress { namespace, name } => write!(f, "Ingress {namespace}/{name}"),
            Target::Gateway { namespace, name } => write!(f, "Gateway {namespace}/{name}"),
            Target::Route {
                kind,
                namespace,
                name,
            } => write!(f, "{kind} {namespace}/{name}"),
        }
    }
}

/// One status write: a merge patch of the status subresource, on the condition that the
/// object is still at `resource_version`.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub target: Target,
    pub resource_version: String,
    pub status: Value,
    /// What is removed, for the user: IPs, hostnames, "addresses", a parent's name.
    pub removed: Vec<String>,
}

impl Write {
    fn body(&self) -> Value {
        json!({
            "metadata": {"resourceVersion": self.resource_version},
            "status": self.status,
        })
    }
}

fn meta(obj: &Value) -> Option<(String, String, String)> {
    let m = &obj["metadata"];
    Some((
        m["namespace"].as_str()?.to_string(),
        m["name"].as_str()?.to_string(),
        m["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    ))
}

fn entry_label(e: &Value) -> String {
    e.get("ip")
        .or_else(|| e.get("hostname"))
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string()
}

/// The `status.loadBalancer.ingress` write that removes our entries (None: none there).
fn load_balancer(obj: &Value, ours: &Ours) -> Option<(Value, Vec<String>)> {
    let entries = obj["status"]["loadBalancer"]["ingress"].as_array()?;
    let (mine, theirs): (Vec<&Value>, Vec<&Value>) = entries.iter().partition(|e| ours.entry(e));
    if mine.is_empty() {
        return None;
    }
    let keep = if theirs.is_empty() {
        Value::Null
    } else {
        Value::Array(theirs.into_iter().cloned().collect())
    };
    Some((
        json!({"loadBalancer": {"ingress": keep}}),
        mine.into_iter().map(entry_label).collect(),
    ))
}

/// A Service this controller claims that shows an address of ours.
pub fn service(svc: &Value, ours: &Ours) -> Option<Write> {
    if !ours.claims(svc) {
        return None;
    }
    let (namespace, name, rv) = meta(svc)?;
    let (status, removed) = load_balancer(svc, ours)?;
    Some(Write {
        target: Target::Service { namespace, name },
        resource_version: rv,
        status,
        removed,
    })
}

/// An Ingress of our class that shows an address of ours.
pub fn ingress(ing: &Value, classes: &[IngressClass], ours: &Ours) -> Option<Write> {
    let typed: Ingress = serde_json::from_value(ing.clone()).ok()?;
    if !k8slb_common::ingress::is_ours(&typed, classes) {
        return None;
    }
    let (namespace, name, rv) = meta(ing)?;
    let (status, removed) = load_balancer(ing, ours)?;
    Some(Write {
        target: Target::Ingress { namespace, name },
        resource_version: rv,
        status,
        removed,
    })
}

/// The conditions the Gateway API CRD defaults a new Gateway's status to.
pub fn pending_gateway_conditions() -> Value {
    let c = |t: &str| {
        json!({
            "type": t,
            "status": "Unknown",
            "reason": "Pending",
            "message": "Waiting for controller",
            "lastTransitionTime": "1970-01-01T00:00:00Z",
        })
    };
    json!([c("Accepted"), c("Programmed")])
}

/// A Gateway of one of `classes` (ours) whose status is not back to "no controller".
pub fn gateway(gw: &Value, classes: &BTreeSet<String>) -> Option<Write> {
    let class = gw["spec"]["gatewayClassName"].as_str()?;
    if !classes.contains(class) {
        return None;
    }
    let st = &gw["status"];
    let present = |f: &str| st[f].as_array().is_some_and(|a| !a.is_empty());
    let pending = pending_gateway_conditions();
    let mut removed = Vec::new();
    if present("addresses") {
        removed.push("addresses".to_string());
    }
    if present("listeners") {
        removed.push("listeners".to_string());
    }
    if present("conditions") && st["conditions"] != pending {
        removed.push("conditions".to_string());
    }
    let attached_sets = !st["attachedListenerSets"].is_null();
    if attached_sets {
        removed.push("attachedListenerSets".to_string());
    }
    if removed.is_empty() {
        return None;
    }
    let (namespace, name, rv) = meta(gw)?;
    let mut status = json!({"addresses": null, "listeners": null, "conditions": pending});
    if attached_sets {
        status["attachedListenerSets"] = Value::Null;
    }
    Some(Write {
        target: Target::Gateway { namespace, name },
        resource_version: rv,
        status,
        removed,
    })
}

/// A ListenerSet whose `parentRef` names one of `gateways` (ours, as
/// `(namespace, name)`) and whose status is not back to "no controller": its
/// `listeners` go and its `conditions` go back to what the CRD defaults them to (the
/// Gateway's pending conditions).
pub fn listener_set(set: &Value, gateways: &BTreeSet<(String, String)>) -> Option<Write> {
    let (namespace, name, rv) = meta(set)?;
    let parent = &set["spec"]["parentRef"];
    let group = parent["group"].as_str().unwrap_or(GATEWAY_GROUP);
    let kind = parent["kind"].as_str().unwrap_or("Gateway");
    let parent_ns = parent["namespace"].as_str().unwrap_or(&namespace);
    let parent_name = parent["name"].as_str()?;
    if group != GATEWAY_GROUP
        || kind != "Gateway"
        || !gateways.contains(&(parent_ns.to_string(), parent_name.to_string()))
    {
        return None;
    }
    let st = &set["status"];
    let pending = pending_gateway_conditions();
    let mut removed = Vec::new();
    if st["listeners"].as_array().is_some_and(|a| !a.is_empty()) {
        removed.push("listeners".to_string());
    }
    if st["conditions"].as_array().is_some_and(|a| !a.is_empty()) && st["conditions"] != pending {
        removed.push("conditions".to_string());
    }
    if removed.is_empty() {
        return None;
    }
    Some(Write {
        target: Target::Route {
            kind: "ListenerSet".to_string(),
            namespace,
            name,
        },
        resource_version: rv,
        status: json!({"listeners": null, "conditions": pending}),
        removed,
    })
}

/// The Gateway API's group.
const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// A route (`kind`) with `status.parents` entries of our controller: they go, others stay.
pub fn route(kind: &str, r: &Value) -> Option<Write> {
    entries_of_ours(kind, r, ("parents", "parentRef", "parent"))
}

/// A BackendTLSPolicy with `status.ancestors` entries of our controller: they go,
/// others stay.
pub fn policy(p: &Value) -> Option<Write> {
    entries_of_ours(
        "BackendTLSPolicy",
        p,
        ("ancestors", "ancestorRef", "ancestor"),
    )
}

/// `status.<list>` without our controller's entries (each naming its Gateway in
/// `<reference>`), if it had any.
fn entries_of_ours(
    kind: &str,
    o: &Value,
    (list, reference, what): (&str, &str, &str),
) -> Option<Write> {
    let entries = o["status"][list].as_array()?;
    let is_ours = |e: &&Value| e["controllerName"].as_str() == Some(GATEWAY_CONTROLLER);
    let (mine, theirs): (Vec<&Value>, Vec<&Value>) = entries.iter().partition(is_ours);
    if mine.is_empty() {
        return None;
    }
    let (namespace, name, rv) = meta(o)?;
    Some(Write {
        target: Target::Route {
            kind: kind.to_string(),
            namespace,
            name,
        },
        resource_version: rv,
        status: json!({ list: theirs }),
        removed: mine
            .iter()
            .map(|e| format!("{what} {}", e[reference]["name"].as_str().unwrap_or("?")))
            .collect(),
    })
}

/// The published state's ConfigMaps among `names`.
pub fn state_configmaps<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    names
        .into_iter()
        .filter(|n| crate::publish_cm::is_state_name(n))
        .map(str::to_string)
        .collect()
}

/// What a run did (or, with `--dry-run`, would do).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Status writes made (or due).
    pub cleaned: Vec<Target>,
    /// State ConfigMaps deleted (or due).
    pub deleted: Vec<String>,
    /// Kinds not looked at, and why.
    pub skipped: Vec<String>,
    /// Writes that failed for another reason than a conflict.
    pub failed: Vec<String>,
}

fn err(what: &str, e: &kube::Error) -> Error {
    Error::Runtime(format!("{what}: {}", describe(e)))
}

/// A list that may be refused (403) or not served (404): skipped, with the reason.
async fn list_or_skip<K>(
    api: Api<K>,
    what: &str,
    skipped: &mut Vec<String>,
) -> Result<Vec<Value>, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + fmt::Debug,
{
    match api.list(&ListParams::default()).await {
        Ok(l) => Ok(l
            .items
            .iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .collect()),
        Err(e) if matches!(api_code(&e), Some(403) | Some(404)) => {
            skipped.push(format!("{what}: {}", describe(&e)));
            Ok(Vec::new())
        }
        Err(e) => Err(err(&format!("listing {what}"), &e)),
    }
}

/// The global config and the published state, from the ConfigMaps of `namespace`.
async fn read_ours(client: &Client, namespace: &str) -> Result<(Ours, Vec<String>), Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cms = api
        .list(&ListParams::default())
        .await
        .map_err(|e| err(&format!("listing the ConfigMaps of {namespace}"), &e))?;
    let config = cms
        .items
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(crate::kube_source::GLOBAL_CONFIGMAP))
        .and_then(|c| c.data.as_ref()?.get(crate::kube_source::GLOBAL_KEY))
        .and_then(|t| parse_global_config(t).ok());
    let by_name: std::collections::BTreeMap<&str, std::sync::Arc<ConfigMap>> = cms
        .items
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, std::sync::Arc::new(c.clone()))))
        .collect();
    let state = match crate::publish_cm::load(|n| by_name.get(n).cloned()) {
        crate::publish_cm::StateLoad::Loaded(s) => Some(*s),
        _ => None,
    };
    let names = state_configmaps(cms.items.iter().filter_map(|c| c.metadata.name.as_deref()));
    Ok((Ours::new(config, state.as_ref()), names))
}

/// One pass: list, decide, and (unless `dry_run`) write. Returns the report and whether a
/// write met a conflict (then run another pass).
async fn pass(
    client: &Client,
    args: &CleanupArgs,
    out: &mut dyn std::io::Write,
) -> Result<(Report, bool), Error> {
    let mut report = Report::default();
    let (ours, state_cms) = read_ours(client, &args.namespace).await?;
    if ours.config.is_none() && ours.state_vips.is_empty() {
        report.skipped.push(format!(
            "Service and Ingress addresses: no readable global config and no state in {}, so \
             no address is known to be ours (was k8slb-system deleted already?)",
            args.namespace
        ));
    }
    let mut writes = core_writes(client, &ours, &mut report.skipped).await?;
    let mut resources: Vec<(Target, ApiResource)> = Vec::new();
    let gw = match GatewayResources::discover(client).await {
        Ok(GatewayDiscovery::Found(r)) => Some(*r),
        Ok(GatewayDiscovery::Absent(why)) => {
            report.skipped.push(format!("Gateway API: {why}"));
            None
        }
        Err(e) => return Err(err("discovering the Gateway API", &e)),
    };
    if let Some(r) = &gw {
        let found = gateway_writes(client, r, &mut report.skipped).await?;
        for (w, ar) in found {
            if let Some(ar) = ar {
                resources.push((w.target.clone(), ar));
            }
            writes.push(w);
        }
    }
    let conflict = clear_statuses(
        client,
        args,
        gw.as_ref(),
        &resources,
        &writes,
        &mut report,
        out,
    )
    .await;
    delete_state(client, args, state_cms, &mut report, out).await;
    Ok((report, conflict))
}

/// The status writes of Services and Ingresses.
async fn core_writes(
    client: &Client,
    ours: &Ours,
    skipped: &mut Vec<String>,
) -> Result<Vec<Write>, Error> {
    let mut writes = Vec::new();
    for s in list_or_skip(Api::<Service>::all(client.clone()), "Services", skipped).await? {
        writes.extend(service(&s, ours));
    }
    let classes: Vec<IngressClass> = list_or_skip(
        Api::<IngressClass>::all(client.clone()),
        "IngressClasses",
        skipped,
    )
    .await?
    .into_iter()
    .filter_map(|v| serde_json::from_value(v).ok())
    .collect();
    if !classes.is_empty() {
        for i in list_or_skip(Api::<Ingress>::all(client.clone()), "Ingresses", skipped).await? {
            writes.extend(ingress(&i, &classes, ours));
        }
    }
    Ok(writes)
}

/// The status writes of the Gateway API's objects, in order: Gateways (no resource:
/// their kind is known), then routes and BackendTLSPolicies with the resource they
/// are written through.
async fn gateway_writes(
    client: &Client,
    r: &GatewayResources,
    skipped: &mut Vec<String>,
) -> Result<Vec<(Write, Option<ApiResource>)>, Error> {
    let mut writes = Vec::new();
    let dynamic = |ar: &ApiResource| Api::<DynamicObject>::all_with(client.clone(), ar);
    let ours_classes: BTreeSet<String> =
        list_or_skip(dynamic(&r.classes), "GatewayClasses", skipped)
            .await?
            .iter()
            .filter(|c| c["spec"]["controllerName"].as_str() == Some(GATEWAY_CONTROLLER))
            .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
            .collect();
    let mut our_gateways = BTreeSet::new();
    for g in list_or_skip(dynamic(&r.gateways), "Gateways", skipped).await? {
        if g["spec"]["gatewayClassName"]
            .as_str()
            .is_some_and(|c| ours_classes.contains(c))
        {
            if let Some((namespace, name, _)) = meta(&g) {
                our_gateways.insert((namespace, name));
            }
        }
        writes.extend(gateway(&g, &ours_classes).map(|w| (w, None)));
    }
    if let Some(ar) = &r.listener_sets {
        for o in list_or_skip(dynamic(ar), "ListenerSets", skipped).await? {
            if let Some(w) = listener_set(&o, &our_gateways) {
                writes.push((w, Some(ar.clone())));
            }
        }
    }
    let mut kinds = vec![r.routes.clone()];
    kinds.extend(r.grpc.clone());
    kinds.extend(r.l4.iter().map(|(_, ar)| ar.clone()));
    for ar in kinds {
        let what = format!("{}s", ar.kind);
        for o in list_or_skip(dynamic(&ar), &what, skipped).await? {
            if let Some(w) = route(&ar.kind, &o) {
                writes.push((w, Some(ar.clone())));
            }
        }
    }
    if let Some(ar) = &r.backend_tls {
        for o in list_or_skip(dynamic(ar), "BackendTLSPolicies", skipped).await? {
            if let Some(w) = policy(&o) {
                writes.push((w, Some(ar.clone())));
            }
        }
    }
    Ok(writes)
}

/// Clears (or, dry, reports) each status; true if a write met a conflict.
async fn clear_statuses(
    client: &Client,
    args: &CleanupArgs,
    gw: Option<&GatewayResources>,
    resources: &[(Target, ApiResource)],
    writes: &[Write],
    report: &mut Report,
    out: &mut dyn std::io::Write,
) -> bool {
    let verb = if args.dry_run {
        "would clear"
    } else {
        "cleared"
    };
    let mut conflict = false;
    for w in writes {
        if !args.dry_run {
            match write(client, gw, resources, w).await {
                Ok(()) => {}
                Err(e) if api_code(&e) == Some(409) => {
                    conflict = true;
                    continue;
                }
                Err(e) if api_code(&e) == Some(404) => continue,
                Err(e) => {
                    let line = format!("{}: {}", w.target, describe(&e));
                    let _ = writeln!(out, "failed to clear the status of {line}");
                    report.failed.push(line);
                    continue;
                }
            }
        }
        let _ = writeln!(
            out,
            "{verb} the status of {}: {}",
            w.target,
            w.removed.join(", ")
        );
        report.cleaned.push(w.target.clone());
    }
    conflict
}

/// Deletes (or, dry, reports) the state ConfigMaps.
async fn delete_state(
    client: &Client,
    args: &CleanupArgs,
    state_cms: Vec<String>,
    report: &mut Report,
    out: &mut dyn std::io::Write,
) {
    let verb = if args.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &args.namespace);
    for name in state_cms {
        if !args.dry_run {
            match cms.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if api_code(&e) == Some(404) => continue,
                Err(e) => {
                    let line = format!("ConfigMap {}/{name}: {}", args.namespace, describe(&e));
                    let _ = writeln!(out, "failed to delete {line}");
                    report.failed.push(line);
                    continue;
                }
            }
        }
        let _ = writeln!(out, "{verb} the state ConfigMap {}/{name}", args.namespace);
        report.deleted.push(name);
    }
}

async fn write(
    client: &Client,
    gw: Option<&GatewayResources>,
    routes: &[(Target, ApiResource)],
    w: &Write,
) -> Result<(), kube::Error> {
    let pp = PatchParams {
        field_manager: Some(crate::kube::FIELD_MANAGER.into()),
        ..Default::default()
    };
    let body = w.body();
    let patch = Patch::Merge(&body);
    match &w.target {
        Target::Service { namespace, name } => {
            Api::<Service>::namespaced(client.clone(), namespace)
                .patch_status(name, &pp, &patch)
                .await?;
        }
        Target::Ingress { namespace, name } => {
            Api::<Ingress>::namespaced(client.clone(), namespace)
                .patch_status(name, &pp, &patch)
                .await?;
        }
        Target::Gateway { namespace, name } => {
            let Some(r) = gw else { return Ok(()) };
            Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &r.gateways)
                .patch_status(name, &pp, &patch)
                .await?;
        }
        Target::Route {
            namespace, name, ..
        } => {
            let Some((_, ar)) = routes.iter().find(|(t, _)| t == &w.target) else {
                return Ok(());
            };
            Api::<DynamicObject>::namespaced_with(client.clone(), namespace, ar)
                .patch_status(name, &pp, &patch)
                .await?;
        }
    }
    Ok(())
}

/// Cleans up through `client`, printing one line per object to `out`; passes are run
/// again while writes meet conflicts (at most [`PASSES`]).
pub async fn run(
    client: Client,
    args: &CleanupArgs,
    out: &mut dyn std::io::Write,
) -> Result<Report, Error> {
    let mut total = Report::default();
    for _ in 0..PASSES {
        let (r, conflict) = pass(&client, args, out).await?;
        total.cleaned.extend(r.cleaned);
        total.deleted.extend(r.deleted);
        total.failed.extend(r.failed);
        total.skipped = r.skipped;
        if !conflict || args.dry_run {
            break;
        }
    }
    for s in &total.skipped {
        let _ = writeln!(out, "skipped {s}");
    }
    if total.cleaned.is_empty() && total.deleted.is_empty() && total.failed.is_empty() {
        let _ = writeln!(out, "nothing to clean up");
    }
    if !total.failed.is_empty() {
        return Err(Error::Runtime(format!(
            "{} object(s) could not be cleaned up: {}",
            total.failed.len(),
            total.failed.join("; ")
        )));
    }
    Ok(total)
}

/// `k8slb-watcher cleanup`: in-cluster config, else KUBECONFIG / ~/.kube/config.
pub fn main(args: CleanupArgs) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Runtime(format!("cannot start the runtime: {e}")))?;
    rt.block_on(async move {
        let config = kube::Config::infer()
            .await
            .map_err(|e| Error::Usage(format!("no Kubernetes configuration: {e}")))?;
        let client = Client::try_from(config)
            .map_err(|e| Error::Runtime(format!("cannot make a Kubernetes client: {e}")))?;
        run(client, &args, &mut std::io::stdout()).await.map(|_| ())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours() -> Ours {
        let cfg = parse_global_config(
            r#"{"pools": {"default": {"network": "198.18.10.0/24", "range": "198.18.10.10-198.18.10.20"}},
                "loadBalancerClass": "k8slb.io/lb"}"#,
        )
        .unwrap();
        Ours::new(Some(cfg), None)
    }

    fn svc(class: Option<&str>, ty: &str, ingress: Value) -> Value {
        json!({
            "metadata": {"namespace": "default", "name": "web", "resourceVersion": "7"},
            "spec": {"type": ty, "loadBalancerClass": class},
            "status": {"loadBalancer": {"ingress": ingress}},
        })
    }

    #[test]
    fn service_status_is_cleared_only_of_our_entries_on_services_we_claim() {
        let o = ours();
        let mine = json!([{"ip": "198.18.10.10", "ipMode": "Proxy"}]);
        let mixed = json!([{"ip": "198.18.10.10"}, {"ip": "203.0.113.5"}]);
        let host = json!([{"hostname": "198.18.10.11.sslip.io"}]);
        let theirs = json!([{"ip": "203.0.113.5"}, {"hostname": "lb.example.com"}]);
        // (class, type, ingress, want ingress after (None: no write), removed)
        type Row<'a> = (
            Option<&'a str>,
            &'a str,
            Value,
            Option<Value>,
            &'a [&'a str],
        );
        let table: Vec<Row<'_>> = vec![
            (
                None,
                "LoadBalancer",
                mine.clone(),
                Some(Value::Null),
                &["198.18.10.10"],
            ),
            (
                Some("k8slb.io/lb"),
                "LoadBalancer",
                mine.clone(),
                Some(Value::Null),
                &["198.18.10.10"],
            ),
            (
                None,
                "LoadBalancer",
                mixed,
                Some(json!([{"ip": "203.0.113.5"}])),
                &["198.18.10.10"],
            ),
            (
                None,
                "LoadBalancer",
                host,
                Some(Value::Null),
                &["198.18.10.11.sslip.io"],
            ),
            // Another controller's class, or not a LoadBalancer: never touched.
            (
                Some("example.com/other"),
                "LoadBalancer",
                mine.clone(),
                None,
                &[],
            ),
            (None, "ClusterIP", mine.clone(), None, &[]),
            // Nothing of ours (again: idempotent).
            (None, "LoadBalancer", theirs, None, &[]),
            (None, "LoadBalancer", Value::Null, None, &[]),
        ];
        for (class, ty, ing, want, removed) in table {
            let w = service(&svc(class, ty, ing.clone()), &o);
            assert_eq!(
                w.as_ref()
                    .map(|w| w.status["loadBalancer"]["ingress"].clone()),
                want,
                "{class:?} {ty} {ing}"
            );
            if let Some(w) = w {
                assert_eq!(w.removed, removed);
                assert_eq!(w.resource_version, "7");
                assert_eq!(w.body()["metadata"]["resourceVersion"], "7");
            }
        }
    }

    #[test]
    fn unclassed_services_are_left_alone_when_they_are_not_claimed() {
        let cfg = parse_global_config(
            r#"{"pools": {"default": {"network": "198.18.10.0/24", "range": "198.18.10.10-198.18.10.20"}},
                "claimUnclassed": false}"#,
        );
        let Ok(cfg) = cfg else {
            // The config has no such key: nothing to check here.
            return;
        };
        let o = Ours::new(Some(cfg), None);
        let s = svc(None, "LoadBalancer", json!([{"ip": "198.18.10.10"}]));
        assert_eq!(service(&s, &o), None);
    }

    #[test]
    fn a_state_vip_outside_the_pools_is_ours_too() {
        let mut o = Ours::new(None, None);
        let s = svc(None, "LoadBalancer", json!([{"ip": "198.19.0.9"}]));
        assert_eq!(service(&s, &o), None);
        o.state_vips.insert("198.19.0.9".parse().unwrap());
        assert!(service(&s, &o).is_some());
    }

    #[test]
    fn gateways_of_our_classes_go_back_to_pending() {
        let classes: BTreeSet<String> = ["k8slb".to_string()].into();
        let gw = |class: &str, status: Value| {
            json!({
                "metadata": {"namespace": "default", "name": "gw", "resourceVersion": "3"},
                "spec": {"gatewayClassName": class},
                "status": status,
            })
        };
        let programmed = json!({
            "addresses": [{"type": "IPAddress", "value": "198.18.10.10"}],
            "listeners": [{"name": "http", "attachedRoutes": 1}],
            "conditions": [{"type": "Programmed", "status": "True"}],
        });
        let w = gateway(&gw("k8slb", programmed.clone()), &classes).unwrap();
        assert_eq!(w.removed, ["addresses", "listeners", "conditions"]);
        assert_eq!(w.status["addresses"], Value::Null);
        assert_eq!(w.status["listeners"], Value::Null);
        assert_eq!(w.status["conditions"], pending_gateway_conditions());
        // Another class: untouched. Already pending: nothing to do.
        assert_eq!(gateway(&gw("other", programmed), &classes), None);
        let pending = json!({"conditions": pending_gateway_conditions()});
        assert_eq!(gateway(&gw("k8slb", pending), &classes), None);
        assert_eq!(gateway(&gw("k8slb", json!({})), &classes), None);
    }

    #[test]
    fn listener_sets_of_our_gateways_go_back_to_pending() {
        let ours: BTreeSet<(String, String)> = [("infra".to_string(), "gw".to_string())].into();
        let set = |parent: Value, status: Value| {
            json!({
                "metadata": {"namespace": "team", "name": "set", "resourceVersion": "4"},
                "spec": {"parentRef": parent, "listeners": []},
                "status": status,
            })
        };
        let served = json!({
            "listeners": [{"name": "https", "attachedRoutes": 1}],
            "conditions": [{"type": "Accepted", "status": "True"}],
        });
        let w = listener_set(
            &set(json!({"name": "gw", "namespace": "infra"}), served.clone()),
            &ours,
        )
        .unwrap();
        assert_eq!(w.removed, ["listeners", "conditions"]);
        assert_eq!(w.status["listeners"], Value::Null);
        assert_eq!(w.status["conditions"], pending_gateway_conditions());
        assert_eq!(w.target.to_string(), "ListenerSet team/set");
        // Another controller's Gateway (the parent's namespace defaults to the set's),
        // another kind: untouched. Already pending: nothing to do.
        for parent in [
            json!({"name": "gw"}),
            json!({"name": "other", "namespace": "infra"}),
            json!({"name": "gw", "namespace": "infra", "kind": "XListenerSet"}),
        ] {
            assert_eq!(listener_set(&set(parent, served.clone()), &ours), None);
        }
        let pending = json!({"conditions": pending_gateway_conditions()});
        let parent = json!({"name": "gw", "namespace": "infra"});
        assert_eq!(listener_set(&set(parent, pending), &ours), None);
    }

    #[test]
    fn a_gateways_attached_listener_sets_count_goes() {
        let classes: BTreeSet<String> = ["k8slb".to_string()].into();
        let gw = json!({
            "metadata": {"namespace": "infra", "name": "gw", "resourceVersion": "3"},
            "spec": {"gatewayClassName": "k8slb"},
            "status": {"conditions": pending_gateway_conditions(), "attachedListenerSets": 2},
        });
        let w = gateway(&gw, &classes).unwrap();
        assert_eq!(w.removed, ["attachedListenerSets"]);
        assert!(w
            .status
            .get("attachedListenerSets")
            .is_some_and(Value::is_null));
    }

    #[test]
    fn route_parents_of_other_controllers_survive() {
        let r = |parents: Value| {
            json!({
                "metadata": {"namespace": "default", "name": "r", "resourceVersion": "5"},
                "status": {"parents": parents},
            })
        };
        let ours = json!({"parentRef": {"name": "gw"}, "controllerName": GATEWAY_CONTROLLER, "conditions": []});
        let theirs = json!({"parentRef": {"name": "other"}, "controllerName": "example.com/gw", "conditions": []});
        let w = route("HTTPRoute", &r(json!([ours, theirs]))).unwrap();
        assert_eq!(w.status, json!({"parents": [theirs]}));
        assert_eq!(w.removed, ["parent gw"]);
        assert_eq!(w.target.to_string(), "HTTPRoute default/r");
        assert_eq!(route("HTTPRoute", &r(json!([theirs]))), None);
        assert_eq!(
            route("TCPRoute", &r(json!([ours]))).unwrap().status,
            json!({"parents": []})
        );
    }

    #[test]
    fn policy_ancestors_of_other_controllers_survive() {
        let theirs =
            json!({"ancestorRef": {"name": "their-gw"}, "controllerName": "example.com/other"});
        let ours = json!({"ancestorRef": {"name": "gw"}, "controllerName": GATEWAY_CONTROLLER});
        let p = json!({
            "metadata": {"namespace": "default", "name": "p", "resourceVersion": "7"},
            "status": {"ancestors": [theirs.clone(), ours]},
        });
        let w = policy(&p).expect("our entry goes");
        assert_eq!(w.status, json!({"ancestors": [theirs.clone()]}));
        assert_eq!(w.removed, ["ancestor gw"]);
        let only_theirs = json!({
            "metadata": {"namespace": "default", "name": "p", "resourceVersion": "7"},
            "status": {"ancestors": [theirs]},
        });
        assert!(policy(&only_theirs).is_none());
    }

    #[test]
    fn only_state_configmaps_are_deleted() {
        assert_eq!(
            state_configmaps([
                "global",
                "k8slb-state",
                "k8slb-state-3",
                "k8slb-statex",
                "other"
            ]),
            ["k8slb-state", "k8slb-state-3"]
        );
    }
}
