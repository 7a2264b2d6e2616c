//! The watcher's one decision: [`reconcile`] takes a [`Snapshot`] of the world (the global
//! config, the objects, this replica's role) and what was done before ([`Previous`]), and
//! says what to do now ([`Effects`]): the state to publish, the Service status writes and
//! clears, the Events. It is the only place that decides; it has no clock, no client and
//! no I/O, so it is tested as a table (below).
//!
//! The two drivers gather snapshots and execute effects: [`crate::files_run`] (a directory
//! of YAML, a state file) and [`crate::kube_run`] (watches, the state ConfigMaps, leader
//! election, debounce, resync, write timeouts, readiness).
//!
//! # Sources
//!
//! The objects of a snapshot come from [`Source`]s: each fills its part of [`Objects`]. The
//! Kubernetes driver's sources are its reflector stores (Services, EndpointSlices, Nodes:
//! `kube_source::Stores::sources`); the files driver reads its whole directory at once
//! (`Objects::read_paths`, which decodes every kind). Ingress, IngressClass and Secret
//! (issue 11) and the Gateway API kinds (issue 12) plug in here: a new field of `Objects`
//! that the plan reads, decoded from files by `Objects`, and a store that implements
//! [`Source`] listed in `Stores::sources`; neither driver's call of [`reconcile`] changes.
//! Events about those objects need their uids: add a method to [`Lookup`].

use crate::events::{self, Lookup, Note};
use crate::gateway_status::{self, GwMemory, GwWrite};
use crate::node_secrets::{self, Certs, NodeCerts};
use crate::status::{Seen, StatusClear, StatusMemory, StatusPatch, Target};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8slb_common::config::GlobalConfig;
use k8slb_common::features::Fleet;
use k8slb_common::names::NodeName;
use k8slb_common::objects::Objects;
use k8slb_common::plan::{plan_round, Plan, PlanOptions};
use k8slb_common::report::NodeReport;
use k8slb_common::state::{ObjRef, Problem, Reason, State};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The name of the global ConfigMap.
pub const GLOBAL_CONFIGMAP: &str = "global";

/// One source of the objects the plan reads (see the module's doc).
pub trait Source {
    /// Adds what this source holds to `objects` (a source that cannot be read this round
    /// keeps its last complete view, or fails the whole snapshot: never a partial one).
    fn add_to(&self, objects: &mut Objects);

    /// Adds the Secrets it holds that are `named` ((namespace, name): what the objects
    /// of every source reference), once every source added its objects: a source that
    /// keeps Secrets copies only those (one nobody names is never copied, whatever its
    /// size).
    fn add_named_secrets(&self, _objects: &mut Objects, _named: &BTreeSet<(String, String)>) {}
}

/// The objects of every source, in a stable order (the plan must not depend on the order
/// sources list things in).
pub fn gather(sources: &[&dyn Source]) -> Objects {
    let mut objects = Objects::default();
    for s in sources {
        s.add_to(&mut objects);
    }
    // Only the Secrets our objects name are copied (from a store) and read further
    // (parsed, kept, planned with).
    let named = objects.referenced_secrets();
    for s in sources {
        s.add_named_secrets(&mut objects, &named);
    }
    objects.retain_referenced_secrets();
    objects.problems.sort();
    objects
}

/// What does not change during a run.
#[derive(Debug, Clone)]
pub struct Settings {
    pub plan: PlanOptions,
    /// Our namespace: the global ConfigMap's.
    pub namespace: String,
    /// Service status in k8slb's `<ip>.sslip.io` hostname form instead of `{ip, ipMode}`.
    pub status_hostname: bool,
}

impl Settings {
    /// `ConfigMap <namespace>/global`, as problems and logs name it.
    pub fn config_name(&self) -> String {
        format!("ConfigMap {}/{GLOBAL_CONFIGMAP}", self.namespace)
    }
}

/// What the global config says right now.
#[derive(Debug, Clone)]
pub enum ConfigRead {
    Valid(Box<GlobalConfig>),
    /// Present but invalid (or without the `config` key): why.
    Invalid(String),
    Missing,
}

/// This replica's part: only the leader writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
}

/// The state published before, as found where it is published. Read only when
/// [`Previous::state`] is `None` (a new leader, or nothing published yet).
#[derive(Debug, Clone, Default)]
pub enum Published {
    /// Nothing was ever published.
    #[default]
    None,
    Loaded(Box<State>),
    /// Being written (a shard does not match the index): why, and whether the driver has
    /// waited long enough for it.
    InProgress {
        why: String,
        waited_enough: bool,
    },
    /// Present but unreadable: start from the Services' status.
    Unreadable(String),
}

/// Everything the reconcile looks at, gathered by a driver.
pub struct Snapshot<'a> {
    pub settings: &'a Settings,
    pub role: Role,
    pub config: ConfigRead,
    /// The uid of the global ConfigMap when it exists (its Events' target).
    pub config_uid: Option<String>,
    pub objects: Objects,
    pub published: Published,
    /// uids of the objects Events are about.
    pub uids: &'a dyn Lookup,
    /// The time, for the `lastTransitionTime` of Gateway API conditions that change
    /// (RFC 3339); `None`: no Gateway API status is written (the files source, or the
    /// cluster has no Gateway API). The only clock reading the reconcile sees, as data.
    pub now: Option<String>,
    /// What the LB nodes' actors report ([`k8slb_common::report`]): what they leave out
    /// of their proxy configs (their quarantine; each becomes a `ProxyRefused`
    /// problem), and the optional features they render (an LB node without a report
    /// yet is not waited for, unless none has reported: [`k8slb_common::features`]).
    /// `None` where no actor reports (the files
    /// mode): the actors are taken to be this build.
    pub reports: Option<BTreeMap<NodeName, NodeReport>>,
    /// Where the node certificates come from, if any node needs them.
    pub certs: Certs<'a>,
}

/// What the global config was, as far as the next round needs to know.
#[derive(Debug, Clone, Default)]
pub struct ConfigMemory {
    /// The last valid config: it stays in force while the ConfigMap is invalid.
    pub good: Option<GlobalConfig>,
    /// Why the ConfigMap is not valid now.
    pub error: Option<String>,
    /// Whether this leader reported `error` with an Event.
    pub event_sent: bool,
    /// Whether "no global config yet" was said.
    pub missing_said: bool,
}

/// What was done before: the reconcile's memory between rounds, kept by the driver.
#[derive(Debug, Clone, Default)]
pub struct Previous {
    /// The state this leader published (None: take it from [`Snapshot::published`]).
    pub state: Option<State>,
    pub config: ConfigMemory,
    pub status: StatusMemory,
    pub gateway_status: GwMemory,
}

impl Previous {
    /// On becoming the leader: another watcher may have published since we last did, and
    /// the Event for a bad config is this leader's to send.
    pub fn new_leadership(&mut self) {
        self.state = None;
        self.status = StatusMemory::default();
        self.gateway_status = GwMemory::default();
        self.config.event_sent = false;
    }
}

/// What changed about the global config this round (for the log and the metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigNews {
    /// No config has been seen yet (said once).
    Missing,
    /// A new reason why it is invalid.
    Invalid(String),
    /// Valid again after being invalid.
    ValidAgain,
}

/// What the reconcile decided.
#[derive(Debug)]
pub struct Effects {
    /// The config memory from now on (adopt it whatever happens).
    pub config: ConfigMemory,
    pub config_valid: bool,
    pub config_news: Option<ConfigNews>,
    /// An Event about the global ConfigMap, to record now.
    pub config_event: Option<Note>,
    pub step: Step,
}

/// The rest of the round.
#[derive(Debug)]
pub enum Step {
    /// A follower: nothing to write; ready to take over.
    Follow,
    /// No valid config was ever seen: nothing is published (never an empty state).
    NoConfig,
    /// The published state is being written by someone: wait for it (retry soon).
    WaitForState(String),
    /// A plan.
    Plan(Box<Planned>),
}

/// A planned round.
#[derive(Debug)]
pub struct Planned {
    pub state: State,
    /// Whether `state` differs from the previous one: publish it.
    pub changed: bool,
    /// Why the previous state was not used, if it was not (for the log).
    pub fresh: Option<Fresh>,
    /// Events for what changed: record them once `state` is published.
    pub events: Vec<Note>,
    /// The status memory once `state` is published (before the writes below).
    pub status: StatusMemory,
    /// Status writes and clears: once `state` is published (or found unchanged).
    pub patches: Vec<StatusPatch>,
    pub clears: Vec<StatusClear>,
    /// Gateway API status writes (with [`Snapshot::now`] only), after the others, and
    /// the memory of them once done.
    pub gateway_writes: Vec<GwWrite>,
    pub gateway_status: GwMemory,
    /// The Gateway API statuses the plan gave (the files driver's `--status-out`).
    pub gateway: k8slb_common::gateway::GatewayOutput,
    /// The node certificates the state needs (with [`Snapshot::certs`] only): their
    /// Secrets applied before `state` is published and deleted after, or the files
    /// driver's directory synced the same way.
    pub node_certs: Option<NodeCerts>,
}

/// Why a plan starts from the Services' status alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fresh {
    /// The published state stayed incomplete past the wait.
    Incomplete(String),
    Unreadable(String),
}

/// The decision (see the module's doc).
pub fn reconcile(snap: &Snapshot<'_>, prev: &Previous) -> Effects {
    let settings = snap.settings;
    let (mut config, config_news) = read_config(&snap.config, &prev.config);
    let config_valid = matches!(snap.config, ConfigRead::Valid(_));
    let fx = |config, config_event, step| Effects {
        config,
        config_valid,
        config_news: config_news.clone(),
        config_event,
        step,
    };
    if snap.role == Role::Follower {
        return fx(config, None, Step::Follow);
    }
    let problem = config_problem(&config, settings);
    let mut config_event = None;
    if let (Some(p), false) = (&problem, config.event_sent) {
        if let Some(uid) = &snap.config_uid {
            config_event = Some(events::config_note(
                &settings.namespace,
                GLOBAL_CONFIGMAP,
                uid,
                p,
            ));
        }
        config.event_sent = true;
    }
    let Some(cfg) = &config.good else {
        return fx(config, config_event, Step::NoConfig);
    };

    let (previous, fresh) = match previous_state(prev, &snap.published) {
        Ok(found) => found,
        Err(why) => return fx(config, config_event, Step::WaitForState(why)),
    };

    let plan_opts = match &snap.reports {
        None => std::borrow::Cow::Borrowed(&settings.plan),
        Some(reports) => std::borrow::Cow::Owned(PlanOptions {
            fleet: fleet(reports),
            ..settings.plan.clone()
        }),
    };
    let Plan { mut state, gateway } = plan_round(cfg, &plan_opts, &snap.objects, previous);
    let no_reports = BTreeMap::new();
    let reports = snap.reports.as_ref().unwrap_or(&no_reports);
    let mut refused = refused_problems(reports, &state);
    refused.extend(bgp_problems(reports, &state));
    if problem.is_some() || !refused.is_empty() {
        state.problems.extend(problem.into_iter().chain(refused));
        state.problems.sort();
        state.problems.dedup();
    }
    let changed = previous != Some(&state);
    let empty;
    let before = match previous {
        Some(p) => p,
        None => {
            empty = State::empty(cfg.actor_config(&settings.plan.cert_path));
            &empty
        }
    };
    let mut status = prev.status.clone();
    let events = if changed {
        status.released(before, &state);
        events::diff(before, &state, snap.uids)
    } else {
        Vec::new()
    };
    let (patches, clears) = decide_status(&mut status, &state, snap);
    let mut gateway_status = prev.gateway_status.clone();
    let gateway_writes = match &snap.now {
        Some(now) => gateway_status::decide(&gateway, &snap.objects, now, &mut gateway_status),
        None => Vec::new(),
    };
    let node_certs = node_secrets::plan(&state, snap.certs, &snap.objects.secrets);
    let planned = Planned {
        state,
        changed,
        fresh,
        events,
        status,
        patches,
        clears,
        gateway_writes,
        gateway_status,
        gateway,
        node_certs,
    };
    fx(config, config_event, Step::Plan(Box::new(planned)))
}

/// What each node's actor reported rendering (version skew: an optional feature is
/// planned only when every LB node of the plan lists it).
fn fleet(reports: &BTreeMap<NodeName, NodeReport>) -> Fleet {
    Fleet::Reported(
        reports
            .iter()
            .map(|(n, r)| (n.clone(), r.features()))
            .collect(),
    )
}

/// The state to plan on: what this leader published, else what is published. Err: a
/// state is being written; wait for it (why).
fn previous_state<'a>(
    prev: &'a Previous,
    published: &'a Published,
) -> Result<(Option<&'a State>, Option<Fresh>), String> {
    Ok(match (&prev.state, published) {
        (Some(s), _) => (Some(s), None),
        (None, Published::None) => (None, None),
        (None, Published::Loaded(s)) => (Some(&**s), None),
        (None, Published::InProgress { why, waited_enough }) => {
            if !waited_enough {
                return Err(why.clone());
            }
            (None, Some(Fresh::Incomplete(why.clone())))
        }
        (None, Published::Unreadable(why)) => (None, Some(Fresh::Unreadable(why.clone()))),
    })
}

/// The status writes and clears for `state`, against the Services as the snapshot has them.
fn meta_key(m: &ObjectMeta) -> Option<(&str, &str)> {
    Some((m.namespace.as_deref()?, m.name.as_deref()?))
}

fn decide_status(
    memory: &mut StatusMemory,
    state: &State,
    snap: &Snapshot<'_>,
) -> (Vec<StatusPatch>, Vec<StatusClear>) {
    let services: HashMap<(&str, &str), &Service> = snap
        .objects
        .services
        .iter()
        .filter_map(|s| Some((meta_key(&s.metadata)?, s)))
        .collect();
    let ingresses: HashMap<(&str, &str), &Ingress> = snap
        .objects
        .ingresses
        .iter()
        .filter_map(|i| Some((meta_key(&i.metadata)?, i)))
        .collect();
    memory.decide(
        state,
        |t| match t {
            Target::Service(k) => services
                .get(&(k.namespace.as_str(), k.name.as_str()))
                .map(|s| Seen::service(s)),
            Target::Ingress(k) => ingresses
                .get(&(k.namespace.as_str(), k.name.as_str()))
                .map(|i| Seen::ingress(i)),
        },
        snap.settings.status_hostname,
    )
}

fn read_config(read: &ConfigRead, before: &ConfigMemory) -> (ConfigMemory, Option<ConfigNews>) {
    let mut m = before.clone();
    let why = match read {
        ConfigRead::Valid(c) => {
            let news = m.error.take().map(|_| ConfigNews::ValidAgain);
            m.good = Some((**c).clone());
            return (m, news);
        }
        ConfigRead::Missing if m.good.is_none() => {
            let news = (!m.missing_said).then_some(ConfigNews::Missing);
            m.missing_said = true;
            return (m, news);
        }
        ConfigRead::Missing => "the ConfigMap is gone".to_string(),
        ConfigRead::Invalid(why) => why.clone(),
    };
    if m.error.as_ref() == Some(&why) {
        return (m, None);
    }
    m.error = Some(why.clone());
    m.event_sent = false;
    (m, Some(ConfigNews::Invalid(why)))
}

/// The problem of an invalid global config, in the state and in its Event.
/// A `ProxyRefused` problem for each object that the actor of an LB node of `state`
/// reports leaving out of its proxy config, while the object still contributes to the
/// state (a report about an object since deleted or changed away says nothing of it
/// now; the actor reports afresh once it has applied the new state). One problem per
/// object: the nodes that refuse it, and the first checker line reported.
fn refused_problems(reports: &BTreeMap<NodeName, NodeReport>, state: &State) -> Vec<Problem> {
    let mut by_object: BTreeMap<&ObjRef, (Vec<&NodeName>, &str, &str)> = BTreeMap::new();
    for (node, report) in reports {
        if !state.nodes.contains_key(node) {
            continue;
        }
        for r in &report.quarantined {
            let e = by_object.entry(&r.object).or_insert((
                Vec::new(),
                report.proxy.as_str(),
                r.error.as_str(),
            ));
            e.0.push(node);
            if e.2.is_empty() {
                e.2 = r.error.as_str();
            }
        }
    }
    if by_object.is_empty() {
        return Vec::new();
    }
    let owners = k8slb_common::owners::owners(state);
    by_object
        .into_iter()
        .filter(|(o, _)| owners.contains(*o))
        .map(|(object, (nodes, proxy, error))| {
            let shown: Vec<String> = nodes.iter().take(3).map(|n| n.to_string()).collect();
            let more = match nodes.len().saturating_sub(shown.len()) {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            let proxy = if proxy.is_empty() { "proxy" } else { proxy };
            let why = if error.is_empty() {
                "only together with other objects' parts".to_string()
            } else {
                format!("\"{error}\"")
            };
            Problem::new(
                object.clone(),
                Reason::ProxyRefused,
                format!(
                    "the {proxy} config checker on node {}{more} refuses this object's part of the config ({why}); it is left out there and everything else is served",
                    shown.join(", ")
                ),
            )
        })
        .collect()
}

/// A problem on the Node for each BGP peer that an LB node of `state` reports refusing
/// its session, down, or left out of its FRR config (a password it cannot use). The
/// watcher's Events about a Node go to the Node's Events (`kubectl describe node`).
fn bgp_problems(reports: &BTreeMap<NodeName, NodeReport>, state: &State) -> Vec<Problem> {
    let asn = |peer: &std::net::IpAddr| {
        state
            .config
            .bgp
            .as_ref()
            .and_then(|b| b.peers.iter().find(|p| p.address == *peer))
            .map(|p| p.asn.get())
    };
    reports
        .iter()
        .filter(|(node, _)| state.nodes.contains_key(*node))
        .flat_map(|(node, report)| {
            report.bgp.iter().filter_map(move |p| {
                let asn = asn(&p.peer)?;
                Some(Problem::new(
                    ObjRef::Node(node.clone()),
                    p.kind.reason(),
                    format!("BGP peer {} (AS {asn}): {}", p.peer, p.message),
                ))
            })
        })
        .collect()
}

fn config_problem(config: &ConfigMemory, settings: &Settings) -> Option<Problem> {
    let why = config.error.as_ref()?;
    Some(Problem {
        object: ObjRef::ConfigMap {
            namespace: settings.namespace.clone(),
            name: GLOBAL_CONFIGMAP.into(),
        },
        reason: Reason::InvalidConfig,
        message: if config.good.is_some() {
            format!("{why}; the last good config stays in force")
        } else {
            format!("{why}; nothing is allocated until the config is valid")
        },
    })
}

impl ConfigNews {
    /// The log line (drivers call this; the reconcile itself does not log).
    pub fn log(&self, configmap: &str) {
        match self {
            ConfigNews::Missing => {
                tracing::warn!(%configmap, "no global config yet; nothing is allocated until it exists")
            }
            ConfigNews::Invalid(why) => {
                tracing::error!(%configmap, error = %why, "invalid global config; the last good one stays in force")
            }
            ConfigNews::ValidAgain => tracing::info!("the global config is valid again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;
    use std::collections::BTreeMap;

    const NS: &str = "k8slb-system";

    /// uids by `Service ns/name` or `Node name`.
    struct Uids(BTreeMap<String, String>);

    impl Lookup for Uids {
        fn service_uid(&self, ns: &str, name: &str) -> Option<String> {
            self.0.get(&format!("Service {ns}/{name}")).cloned()
        }
        fn node_uid(&self, name: &str) -> Option<String> {
            self.0.get(&format!("Node {name}")).cloned()
        }
        fn ingress_uid(&self, ns: &str, name: &str) -> Option<String> {
            self.0.get(&format!("Ingress {ns}/{name}")).cloned()
        }
    }

    fn uids() -> Uids {
        Uids(BTreeMap::from([
            ("Service default/web".into(), "uid-web".into()),
            ("Node lb1".into(), "uid-lb1".into()),
        ]))
    }

    fn settings() -> Settings {
        Settings {
            plan: PlanOptions::default(),
            namespace: NS.into(),
            status_hostname: false,
        }
    }

    fn config() -> ConfigRead {
        let text = json!({"pools": {"default": {"network": "10.0.0.0/24", "range": "10.0.0.10-10.0.0.50"}}});
        ConfigRead::Valid(Box::new(
            k8slb_common::config::parse_global_config(&text.to_string()).expect("valid"),
        ))
    }

    /// The LoadBalancer Service default/web at resourceVersion `rv`, its status showing
    /// `ips`.
    fn web(rv: &str, ips: &[&str]) -> Service {
        let ingress: Vec<_> = ips
            .iter()
            .map(|ip| json!({"ip": ip, "ipMode": "Proxy"}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "uid-web", "resourceVersion": rv},
            "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]},
            "status": {"loadBalancer": {"ingress": ingress}},
        }))
        .expect("a Service")
    }

    fn lb1() -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "lb1", "uid": "uid-lb1", "labels": {"type": "loadBalancer"}},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "192.168.0.11"}],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }))
        .expect("a Node")
    }

    fn objects(services: Vec<Service>) -> Objects {
        Objects {
            services,
            nodes: vec![lb1()],
            ..Objects::default()
        }
    }

    fn snapshot<'a>(
        settings: &'a Settings,
        uids: &'a Uids,
        config: ConfigRead,
        objects: Objects,
    ) -> Snapshot<'a> {
        Snapshot {
            settings,
            role: Role::Leader,
            config,
            config_uid: Some("uid-global".into()),
            objects,
            published: Published::None,
            uids,
            now: None,
            reports: None,
            certs: Default::default(),
        }
    }

    fn planned(fx: Effects) -> Planned {
        match fx.step {
            Step::Plan(p) => *p,
            other => panic!("expected a plan, got {other:?}"),
        }
    }

    /// The first plan of web, and the memory after it was published and its status written.
    fn first(settings: &Settings, uids: &Uids) -> (Planned, Previous) {
        let snap = snapshot(settings, uids, config(), objects(vec![web("1", &[])]));
        let fx = reconcile(&snap, &Previous::default());
        let mut prev = Previous {
            config: fx.config.clone(),
            ..Previous::default()
        };
        let p = planned(fx);
        prev.state = Some(p.state.clone());
        prev.status = p.status.clone();
        for patch in &p.patches {
            prev.status.memo.insert(
                patch.key.clone(),
                (patch.resource_version.clone(), patch.ingress.clone()),
            );
        }
        (p, prev)
    }

    fn ip(s: &str) -> std::net::IpAddr {
        s.parse().expect("an IP")
    }

    #[test]
    fn the_first_plan_publishes_allocates_writes_status_and_says_so() {
        let (s, u) = (settings(), uids());
        let (p, _) = first(&s, &u);
        assert!(p.changed);
        assert_eq!(p.fresh, None);
        let key = "default/web".parse().expect("a key");
        assert_eq!(p.state.services[&key].ips, [ip("10.0.0.10")]);
        let reasons: Vec<(&str, &str)> = p
            .events
            .iter()
            .map(|n| (n.reason.as_str(), n.target.uid.as_str()))
            .collect();
        assert_eq!(reasons, [("IPAllocated", "uid-web")]);
        assert_eq!(p.patches.len(), 1);
        assert_eq!(p.patches[0].resource_version, "1");
        assert_eq!(p.patches[0].ingress[0].ip.as_deref(), Some("10.0.0.10"));
        assert_eq!(p.patches[0].ingress[0].ip_mode.as_deref(), Some("Proxy"));
        assert!(p.clears.is_empty());
    }

    /// A node report of `node` that leaves out `objects` (with a checker line each).
    fn report(node: &str, objects: &[&str]) -> (NodeName, NodeReport) {
        let n: NodeName = node.parse().expect("a node name");
        let refused = objects.iter().map(|o| k8slb_common::report::Refused {
            object: o.parse().expect("an object"),
            error: format!("[ALERT] bad line of {o}"),
        });
        let r = NodeReport::new(&n, "haproxy", refused);
        (n, r)
    }

    fn refused(p: &Planned) -> Vec<(String, String)> {
        p.state
            .problems
            .iter()
            .filter(|p| p.reason == Reason::ProxyRefused)
            .map(|p| (p.object.to_string(), p.message.clone()))
            .collect()
    }

    #[test]
    fn what_an_lb_node_reports_refused_becomes_a_problem_and_an_event_on_the_object() {
        let (s, u) = (settings(), uids());
        let (_, prev) = first(&s, &u);
        let mut snap = snapshot(&s, &u, config(), objects(vec![web("2", &["10.0.0.10"])]));
        snap.reports = Some(BTreeMap::from([
            report("lb1", &["Service default/web"]),
            // Not an LB node of the state: an old actor's report, or a forged one.
            report("lb9", &["Service default/web"]),
        ]));
        let p = planned(reconcile(&snap, &prev));
        assert!(p.changed, "the problem changes the state");
        let got = refused(&p);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "Service default/web");
        assert!(
            got[0]
                .1
                .contains("haproxy config checker on node lb1 refuses"),
            "{}",
            got[0].1
        );
        assert!(
            got[0].1.contains("[ALERT] bad line of Service default/web"),
            "{}",
            got[0].1
        );
        assert!(!got[0].1.contains("lb9"), "{}", got[0].1);
        let events: Vec<(&str, &str)> = p
            .events
            .iter()
            .map(|n| (n.reason.as_str(), n.target.uid.as_str()))
            .collect();
        assert_eq!(events, [("ProxyRefused", "uid-web")]);

        // The same report again: nothing new. The report cleared: the problem goes.
        let prev = Previous {
            state: Some(p.state.clone()),
            ..prev
        };
        let p2 = planned(reconcile(&snap, &prev));
        assert!(!p2.changed && p2.events.is_empty());
        snap.reports = Some(BTreeMap::from([report("lb1", &[])]));
        let p3 = planned(reconcile(&snap, &prev));
        assert!(p3.changed && refused(&p3).is_empty());
    }

    #[test]
    fn a_bgp_peer_an_lb_node_reports_refusing_is_a_problem_and_an_event_on_the_node() {
        use k8slb_common::report::{PeerProblem, PeerProblemKind};
        let (s, u) = (settings(), uids());
        let (_, prev) = first(&s, &u);
        let bgp = json!({"pools": {
            "default": {"network": "10.0.0.0/24", "range": "10.0.0.10-10.0.0.50"},
            "ecmp": {"network": "198.18.10.0/24", "range": "198.18.10.10-198.18.10.20", "mode": "bgp"}},
            "bgp": {"asn": 64512, "peers": [{"address": "198.18.3.1", "asn": 64513}]}});
        let cfg = ConfigRead::Valid(Box::new(
            k8slb_common::config::parse_global_config(&bgp.to_string()).expect("valid"),
        ));
        let mut snap = snapshot(&s, &u, cfg, objects(vec![web("2", &["10.0.0.10"])]));
        let problem = |peer: &str, kind| PeerProblem {
            peer: ip(peer),
            kind,
            message: "refused this node's session: OPEN Message Error/Bad Peer AS".into(),
        };
        let with_bgp = |node: &str, problems: Vec<PeerProblem>| {
            let (n, r) = report(node, &[]);
            (n, r.with_bgp(problems))
        };
        snap.reports = Some(BTreeMap::from([
            with_bgp(
                "lb1",
                vec![
                    problem("198.18.3.1", PeerProblemKind::Refused),
                    // Not a peer of the config: a forged or stale entry says nothing.
                    problem("198.18.9.9", PeerProblemKind::Refused),
                ],
            ),
            // Not an LB node of the state.
            with_bgp("lb9", vec![problem("198.18.3.1", PeerProblemKind::Down)]),
        ]));
        let p = planned(reconcile(&snap, &prev));
        let got: Vec<(String, Reason, String)> = p
            .state
            .problems
            .iter()
            .filter(|p| p.object.to_string().starts_with("Node "))
            .map(|p| (p.object.to_string(), p.reason.clone(), p.message.clone()))
            .collect();
        assert_eq!(
            got,
            [(
                "Node lb1".to_string(),
                Reason::BgpPeerRefused,
                "BGP peer 198.18.3.1 (AS 64513): refused this node's session: OPEN Message Error/Bad Peer AS".to_string()
            )]
        );
        let events: Vec<(&str, &str)> = p
            .events
            .iter()
            .map(|n| (n.reason.as_str(), n.target.kind.as_str()))
            .collect();
        assert!(events.contains(&("BGPPeerRefused", "Node")), "{events:?}");
    }

    #[test]
    fn a_report_about_an_object_that_no_longer_contributes_is_not_a_problem() {
        let (s, u) = (settings(), uids());
        let (_, prev) = first(&s, &u);
        let mut snap = snapshot(&s, &u, config(), objects(vec![web("2", &["10.0.0.10"])]));
        snap.reports = Some(BTreeMap::from([report(
            "lb1",
            &["Service default/gone", "Ingress x/y"],
        )]));
        let p = planned(reconcile(&snap, &prev));
        assert_eq!(refused(&p), Vec::<(String, String)>::new());
    }

    #[test]
    fn the_same_world_again_has_no_effects() {
        let (s, u) = (settings(), uids());
        let (_, prev) = first(&s, &u);
        // Our status write is not visible yet (same resourceVersion): not repeated.
        let again = snapshot(&s, &u, config(), objects(vec![web("1", &[])]));
        let p = planned(reconcile(&again, &prev));
        assert!(!p.changed);
        assert!(p.events.is_empty() && p.patches.is_empty() && p.clears.is_empty());
        // Now visible: still nothing, and the memo forgets the write.
        let seen = snapshot(&s, &u, config(), objects(vec![web("2", &["10.0.0.10"])]));
        let p = planned(reconcile(&seen, &prev));
        assert!(!p.changed);
        assert!(p.events.is_empty() && p.patches.is_empty() && p.clears.is_empty());
        assert!(p.status.memo.is_empty());
    }

    #[test]
    fn a_service_that_leaves_the_claim_has_its_status_cleared() {
        let (s, u) = (settings(), uids());
        let (_, prev) = first(&s, &u);
        let mut left = web("3", &["10.0.0.10"]);
        left.spec.as_mut().expect("spec").type_ = Some("ClusterIP".into());
        let snap = snapshot(&s, &u, config(), objects(vec![left]));
        let p = planned(reconcile(&snap, &prev));
        assert!(p.changed);
        let reasons: Vec<&str> = p.events.iter().map(|n| n.reason.as_str()).collect();
        assert_eq!(reasons, ["IPReleased"]);
        assert!(p.patches.is_empty());
        assert_eq!(p.clears.len(), 1);
        assert_eq!(p.clears[0].resource_version, "3");
        assert_eq!(p.clears[0].ips, [ip("10.0.0.10")]);
        assert!(p.status.pending());

        // Deleted rather than changed: nothing to clear, nothing pending.
        let gone = snapshot(&s, &u, config(), objects(vec![]));
        let p = planned(reconcile(&gone, &prev));
        assert!(p.changed);
        assert!(p.clears.is_empty());
        assert!(!p.status.pending());
    }

    #[test]
    fn an_invalid_config_keeps_the_last_good_one_and_reports_the_problem_once() {
        let (s, u) = (settings(), uids());
        let (_, mut prev) = first(&s, &u);
        let bad = || ConfigRead::Invalid("pools: expected a map".into());
        let snap = snapshot(&s, &u, bad(), objects(vec![web("2", &["10.0.0.10"])]));
        let fx = reconcile(&snap, &prev);
        assert!(!fx.config_valid);
        assert_eq!(
            fx.config_news,
            Some(ConfigNews::Invalid("pools: expected a map".into()))
        );
        let note = fx.config_event.clone().expect("an Event on the ConfigMap");
        assert_eq!(
            (note.reason.as_str(), note.target.kind.as_str()),
            ("InvalidConfig", "ConfigMap")
        );
        assert_eq!(note.target.uid, "uid-global");
        prev.config = fx.config.clone();
        let p = planned(fx);
        let key = "default/web".parse().expect("a key");
        assert_eq!(
            p.state.services[&key].ips,
            [ip("10.0.0.10")],
            "planned with the last good config"
        );
        // As published (whatever type a problem has inside).
        assert_eq!(
            serde_json::to_value(&p.state.problems).expect("JSON"),
            json!([{
                "object": format!("ConfigMap {NS}/global"),
                "reason": "InvalidConfig",
                "message": "pools: expected a map; the last good config stays in force",
            }])
        );
        assert!(p.changed, "the problem is in the state");

        // The same error again: no news, no second Event.
        prev.state = Some(p.state);
        let fx = reconcile(&snap, &prev);
        assert_eq!(fx.config_news, None);
        assert!(fx.config_event.is_none());
        assert!(!planned(fx).changed);

        // Valid again: said once, the problem leaves the state.
        let fixed = snapshot(&s, &u, config(), objects(vec![web("2", &["10.0.0.10"])]));
        let fx = reconcile(&fixed, &prev);
        assert_eq!(fx.config_news, Some(ConfigNews::ValidAgain));
        let p = planned(fx);
        assert!(p.changed && p.state.problems.is_empty());
    }

    #[test]
    fn without_any_valid_config_nothing_is_planned() {
        let (s, u) = (settings(), uids());
        let snap = snapshot(&s, &u, ConfigRead::Missing, objects(vec![web("1", &[])]));
        let fx = reconcile(&snap, &Previous::default());
        assert_eq!(fx.config_news, Some(ConfigNews::Missing));
        assert!(fx.config_event.is_none());
        assert!(matches!(fx.step, Step::NoConfig));
        // Said once.
        let fx = reconcile(
            &snap,
            &Previous {
                config: fx.config,
                ..Previous::default()
            },
        );
        assert_eq!(fx.config_news, None);

        let bad = snapshot(
            &s,
            &u,
            ConfigRead::Invalid("not JSON".into()),
            objects(vec![]),
        );
        let fx = reconcile(&bad, &Previous::default());
        assert!(matches!(fx.step, Step::NoConfig));
        let note = fx.config_event.expect("an Event on the ConfigMap");
        assert_eq!(
            note.message,
            "not JSON; nothing is allocated until the config is valid"
        );
    }

    #[test]
    fn a_follower_decides_nothing_but_remembers_the_config() {
        let (s, u) = (settings(), uids());
        let mut snap = snapshot(&s, &u, ConfigRead::Invalid("bad".into()), objects(vec![]));
        snap.role = Role::Follower;
        let fx = reconcile(&snap, &Previous::default());
        assert!(matches!(fx.step, Step::Follow));
        assert!(fx.config_event.is_none());
        assert_eq!(fx.config.error.as_deref(), Some("bad"));
        // On becoming the leader the Event is this leader's to send.
        let mut prev = Previous {
            config: fx.config,
            ..Previous::default()
        };
        prev.new_leadership();
        snap.role = Role::Leader;
        let fx = reconcile(&snap, &prev);
        assert!(fx.config_event.is_some());
    }

    #[test]
    fn a_state_being_written_is_waited_for_then_planned_from_scratch() {
        let (s, u) = (settings(), uids());
        let mut snap = snapshot(&s, &u, config(), objects(vec![web("1", &[])]));
        snap.published = Published::InProgress {
            why: "shard 1 missing".into(),
            waited_enough: false,
        };
        let fx = reconcile(&snap, &Previous::default());
        assert!(matches!(fx.step, Step::WaitForState(ref w) if w == "shard 1 missing"));
        snap.published = Published::InProgress {
            why: "shard 1 missing".into(),
            waited_enough: true,
        };
        let p = planned(reconcile(&snap, &Previous::default()));
        assert_eq!(p.fresh, Some(Fresh::Incomplete("shard 1 missing".into())));
        assert!(p.changed);
    }

    #[test]
    fn a_new_leader_starts_from_what_is_published() {
        let (s, u) = (settings(), uids());
        let (first_plan, mut prev) = first(&s, &u);
        prev.new_leadership();
        assert!(prev.state.is_none() && prev.status == StatusMemory::default());
        let mut snap = snapshot(&s, &u, config(), objects(vec![web("2", &["10.0.0.10"])]));
        snap.published = Published::Loaded(Box::new(first_plan.state));
        let p = planned(reconcile(&snap, &prev));
        assert!(!p.changed, "the published state is current");
        assert!(p.events.is_empty() && p.patches.is_empty());
    }

    /// A Gateway with TLS listeners of both modes on port 8443 (TLSRouteModeMixed).
    const MIXED_GATEWAY: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: k8slb }
spec: { controllerName: k8slb.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: infra }
spec:
  gatewayClassName: k8slb
  listeners:
  - { name: term, port: 8443, protocol: TLS, hostname: a.example, tls: { mode: Terminate, certificateRefs: [{ name: a-tls }] } }
  - { name: pass, port: 8443, protocol: TLS, hostname: b.example, tls: { mode: Passthrough } }
"#;

    #[test]
    fn tls_of_both_modes_on_one_port_is_planned_only_when_every_lb_nodes_report_lists_it() {
        let (s, u) = (settings(), uids());
        let mut objects = objects(vec![]);
        objects
            .add_text(MIXED_GATEWAY)
            .expect("the Gateway decodes");
        let conflicts = |reports: Option<BTreeMap<NodeName, NodeReport>>| -> Vec<String> {
            let mut snap = snapshot(&s, &u, config(), objects.clone());
            snap.reports = reports;
            let p = planned(reconcile(&snap, &Previous::default()));
            p.state
                .problems
                .iter()
                .filter(|p| p.reason == Reason::ProtocolConflict)
                .map(|p| p.message.clone())
                .collect()
        };
        // lb1's actor is older than the `features` key of its report, or has not
        // reported yet: both listeners of the port are refused, saying why.
        let (lb1, mut old) = report("lb1", &[]);
        old.features.clear();
        for reports in [BTreeMap::from([(lb1, old)]), BTreeMap::new()] {
            let got = conflicts(Some(reports));
            assert_eq!(got.len(), 2, "{got:?}");
            assert!(
                got.iter().all(|m| m.ends_with(
                    "not every load-balancer node's actor supports TLS listeners of both modes on one port yet: upgrade the DaemonSet"
                )),
                "{got:?}"
            );
        }
        // Its report lists the feature; or no actor reports (files mode): served.
        assert_eq!(
            conflicts(Some(BTreeMap::from([report("lb1", &[])]))),
            Vec::<String>::new()
        );
        assert_eq!(conflicts(None), Vec::<String>::new());
    }
}
