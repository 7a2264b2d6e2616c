//! Where `k8slb-actor run` gets its state: a file ([`FileSource`], `--state file:<path>`)
//! or the ConfigMaps the watcher publishes ([`ConfigMapSource`], `--state configmap`, the
//! default in-cluster).
//!
//! Both are polled by the control loop (a plain thread) through [`Source::poll`], which
//! never blocks.
//!
//! # The ConfigMap source
//!
//! The watcher publishes the state in its namespace (`--namespace`, default
//! `k8slb-system`) as an index ConfigMap `k8slb-state` and, for big states, shards
//! `k8slb-state-<i>`, each with the gzip payload in `binaryData["state.json.gz"]` and
//! the labels [`STATE_SELECTOR`] (see [`k8slb_common::publish`]). The source runs a
//! kube-runtime watcher on those ConfigMaps (one label-selected list+watch in one
//! namespace: `configmaps` get/list/watch is all the RBAC it needs) on the tokio runtime
//! of `run`, keeps the objects in a small store ([`StateObjects`], sans-IO) and, after
//! every change, decodes index + shards:
//!
//! - a complete, consistent set that differs from the last one delivered is handed to
//!   the control loop ([`Update::State`]);
//! - a shard that does not match the index's digest, or a missing shard, means the
//!   watcher is between its shard writes and its index write: the last good state stays
//!   in force and the source waits for the next change (no error, a debug line);
//! - an index that cannot be decoded at all (corrupt, a state version this actor does not
//!   know) is refused once per distinct payload ([`Update::Refused`]: metric, log,
//!   `/readyz` detail); the last good state stays in force;
//! - a deleted index never yields an empty state: the last good state stays in force.
//!
//! While the API server is unreachable the watcher stream errors and is retried with
//! exponential backoff (0.5 s doubling to 5 s, with jitter so a fleet of actors does not
//! reconnect in step); nothing changes on this node meanwhile: keepalived and the proxy
//! keep running on the current state. Until a first state has been delivered, API
//! errors, a missing index, and [`ConfigMapOptions::startup_grace`] without a state each
//! report [`Update::Unavailable`], on which the control loop starts from its on-disk
//! `last-state.json` (the state it last applied), so a restarted actor serves again
//! without the API server. When the API server returns, the watcher re-lists; an
//! unchanged state is not re-applied.
//!
//! Watches are asked to end after [`WATCH_TIMEOUT_S`] and the client's per-read timeout
//! is [`READ_TIMEOUT`]: a watch connection silently dropped by the network (a partition
//! that loses the FIN) is noticed and replaced, instead of waiting forever on a dead
//! socket.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8slb_common::publish::{self, PublishError};
use k8slb_common::state::State;
use kube::runtime::watcher;
use kube::{Api, Client};
use std::collections::{BTreeMap, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

/// The state objects' index name, payload key and label selector: the watcher's
/// constants, from [`k8slb_common::publish`].
pub use k8slb_common::publish::{STATE_KEY, STATE_NAME, STATE_SELECTOR};
/// The watcher's namespace unless `--namespace` says otherwise.
pub const DEFAULT_NAMESPACE: &str = "k8slb-system";
/// `timeoutSeconds` of each watch request.
pub const WATCH_TIMEOUT_S: u32 = 240;
/// Per-read timeout of the client: longer than a watch lasts, so only a dead connection
/// trips it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(300);

/// What a poll found.
#[derive(Debug)]
pub enum Polled {
    Unchanged,
    /// New state text (the file source): parsed by the control loop.
    Changed(String),
    /// A new state, already decoded (the ConfigMap source).
    Decoded(Box<State>),
    /// A state document that cannot be used; the previous state stays in force.
    Refused(String),
    /// The source has nothing to give (yet): at start, the control loop falls back to
    /// `last-state.json`.
    Unavailable(std::io::Error),
}

/// A state source polled by the control loop. `poll` never blocks.
pub trait Source: Send {
    fn poll(&mut self) -> Polled;
    /// For log lines: `file /path` or `configmap k8slb-system/k8slb-state`.
    fn describe(&self) -> String;
}

// ---------------------------------------------------------------------------------
// file

/// Polls a state file: cheap metadata first, then the contents.
pub struct FileSource {
    path: PathBuf,
    sig: Option<(u64, u64, i64, i64)>,
    last: Option<String>,
}

impl FileSource {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileSource {
            path: path.into(),
            sig: None,
            last: None,
        }
    }
}

impl Source for FileSource {
    fn poll(&mut self) -> Polled {
        let md = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) => return Polled::Unavailable(e),
        };
        let sig = (md.ino(), md.len(), md.mtime(), md.mtime_nsec());
        if self.sig == Some(sig) {
            return Polled::Unchanged;
        }
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) => return Polled::Unavailable(e),
        };
        self.sig = Some(sig);
        if self.last.as_deref() == Some(text.as_str()) {
            return Polled::Unchanged;
        }
        self.last = Some(text.clone());
        Polled::Changed(text)
    }
    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

// ---------------------------------------------------------------------------------
// ConfigMaps: the sans-IO store

/// What the ConfigMap source tells its consumer.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// A complete, consistent state, different from the previous one delivered.
    State(Box<State>),
    /// The published index cannot be decoded (reported once per distinct payload).
    Refused(String),
    /// No state could be had (API errors, no index, nothing within the startup grace).
    /// Only sent before the first state.
    Unavailable(String),
}

/// What [`StateObjects::evaluate`] concluded.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A new state.
    New(Box<State>),
    /// Nothing new (same objects, or they decode to the state already delivered).
    Unchanged,
    /// A write is in progress (digest mismatch, missing shard): keep the last state.
    InProgress(String),
    /// No index object.
    NoIndex,
    /// The index cannot be decoded.
    Invalid(String),
}

/// Object name -> payload (`None`: the object has no `binaryData` payload).
type Objects = BTreeMap<String, Option<Vec<u8>>>;

/// The state objects seen by the watch, and the last good state. Pure: fed watch
/// events, asked for an [`Outcome`].
#[derive(Debug, Default)]
pub struct StateObjects {
    objects: Objects,
    /// Objects listed since the last `Init`, swapped in at `InitDone`.
    relist: Option<Objects>,
    /// The objects of the last good decode, and its state.
    good: Option<(Objects, State)>,
    /// The objects of the last refused decode (refuse once).
    refused: Option<Objects>,
}

/// Whether a ConfigMap name is one of the state objects (`k8slb-state`,
/// `k8slb-state-<digits>`).
pub fn is_state_name(name: &str) -> bool {
    match name.strip_prefix(STATE_NAME) {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix('-')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

fn payload(cm: &ConfigMap) -> Option<Vec<u8>> {
    cm.binary_data
        .as_ref()
        .and_then(|b| b.get(STATE_KEY))
        .map(|b| b.0.clone())
}

impl StateObjects {
    pub fn new() -> Self {
        Self::default()
    }

    /// The last state delivered, if any.
    pub fn current(&self) -> Option<&State> {
        self.good.as_ref().map(|(_, s)| s)
    }

    /// Feed one watch event. Returns whether the visible objects changed (so that
    /// [`Self::evaluate`] is worth calling).
    pub fn event(&mut self, ev: watcher::Event<ConfigMap>) -> bool {
        use watcher::Event;
        let name_of = |cm: &ConfigMap| cm.metadata.name.clone().unwrap_or_default();
        match ev {
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            Event::InitApply(cm) => {
                let name = name_of(&cm);
                if is_state_name(&name) {
                    self.relist
                        .get_or_insert_with(BTreeMap::new)
                        .insert(name, payload(&cm));
                }
                false
            }
            Event::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                let changed = fresh != self.objects;
                self.objects = fresh;
                // Evaluate after every (re)list even when nothing changed: it is what
                // tells "no index" at start.
                changed || self.good.is_none()
            }
            Event::Apply(cm) => {
                let name = name_of(&cm);
                if !is_state_name(&name) {
                    return false;
                }
                let p = payload(&cm);
                self.objects.insert(name, p.clone()) != Some(p)
            }
            Event::Delete(cm) => {
                let name = name_of(&cm);
                is_state_name(&name) && self.objects.remove(&name).is_some()
            }
        }
    }

    /// Decode the current objects.
    pub fn evaluate(&mut self) -> Outcome {
        if self.good.as_ref().is_some_and(|(o, _)| *o == self.objects) {
            return Outcome::Unchanged;
        }
        let Some(index) = self.objects.get(STATE_NAME) else {
            return Outcome::NoIndex;
        };
        let Some(index) = index.as_deref() else {
            return self.refuse(format!("{STATE_NAME} has no binaryData.{STATE_KEY}"));
        };
        let objects = &self.objects;
        let decoded = publish::decode(index, |suffix| {
            objects
                .get(&format!("{STATE_NAME}{suffix}"))
                .cloned()
                .flatten()
        });
        match decoded {
            Ok(state) => {
                let same = self.current() == Some(&state);
                self.good = Some((self.objects.clone(), state.clone()));
                self.refused = None;
                if same {
                    Outcome::Unchanged
                } else {
                    Outcome::New(Box::new(state))
                }
            }
            Err(e @ (PublishError::Digest { .. } | PublishError::MissingPart { .. })) => {
                Outcome::InProgress(e.to_string())
            }
            Err(e) => self.refuse(e.to_string()),
        }
    }

    fn refuse(&mut self, why: String) -> Outcome {
        if self.refused.as_ref() == Some(&self.objects) {
            return Outcome::Unchanged;
        }
        self.refused = Some(self.objects.clone());
        Outcome::Invalid(why)
    }
}

// ---------------------------------------------------------------------------------
// ConfigMaps: the watch

/// Knobs of the ConfigMap source.
#[derive(Debug, Clone)]
pub struct ConfigMapOptions {
    pub namespace: String,
    /// Without a state after this long, report [`Update::Unavailable`] (the control loop
    /// then starts from `last-state.json`).
    pub startup_grace: Duration,
    /// First and longest wait between two attempts after an API error.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
}

impl ConfigMapOptions {
    pub fn new(namespace: impl Into<String>) -> Self {
        ConfigMapOptions {
            namespace: namespace.into(),
            startup_grace: Duration::from_secs(5),
            min_backoff: Duration::from_millis(500),
            // Not client-go's 30 s: after an API outage the state watch came back up to
            // 30 s after the API server did (9-27 s in the chaos soak). With jitter, 5 s is
            // a fraction of a request per second per LB node.
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// A client from the in-cluster config or `KUBECONFIG` (as kubectl), with the read
/// timeout above.
pub async fn client_from_env() -> anyhow::Result<Client> {
    let mut config = kube::Config::infer().await?;
    config.read_timeout = Some(READ_TIMEOUT);
    Ok(Client::try_from(config)?)
}

/// A cheap jitter source: no RNG dependency for a backoff spread.
fn jitter(max: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let max_ms = u32::try_from(max.as_millis()).unwrap_or(u32::MAX).max(1);
    Duration::from_millis(u64::from(nanos % max_ms))
}

/// Follow the state ConfigMaps until `tx` is closed. Each [`Update`] goes to `tx`.
pub async fn follow(
    client: Client,
    opts: ConfigMapOptions,
    tx: tokio::sync::mpsc::UnboundedSender<Update>,
) {
    let ns = opts.namespace.clone();
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let config = watcher::Config::default()
        .labels(STATE_SELECTOR)
        .timeout(WATCH_TIMEOUT_S);
    let stream = watcher::watcher(api, config);
    futures::pin_mut!(stream);
    let mut objects = StateObjects::new();
    let mut delivered = false;
    let mut backoff = opts.min_backoff;
    let mut failing = false;
    let grace = tokio::time::sleep(opts.startup_grace);
    tokio::pin!(grace);
    let mut grace_done = false;

    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            () = &mut grace, if !grace_done => {
                grace_done = true;
                if !delivered {
                    tracing::warn!(after = ?opts.startup_grace, "no state from the API server yet");
                    let msg = format!("no state from ConfigMap {ns}/{STATE_NAME} after {:?}", opts.startup_grace);
                    if tx.send(Update::Unavailable(msg)).is_err() { return; }
                }
                continue;
            }
            () = tx.closed() => return,
        };
        let Some(item) = item else {
            // The watcher stream never ends; if it ever did, there is nothing to follow.
            tracing::error!("the ConfigMap watch ended");
            return;
        };
        let ev = match item {
            Ok(ev) => ev,
            Err(e) => {
                if failing {
                    tracing::debug!(error = %e, "state watch failed again");
                } else {
                    tracing::warn!(error = %e, "state watch failed; keeping the current state and retrying");
                    failing = true;
                }
                if !delivered
                    && tx
                        .send(Update::Unavailable(format!("state watch: {e}")))
                        .is_err()
                {
                    return;
                }
                let wait = backoff + jitter(backoff / 2);
                backoff = (backoff * 2).min(opts.max_backoff);
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = tx.closed() => return,
                }
                continue;
            }
        };
        if failing {
            tracing::info!("state watch is back");
            failing = false;
        }
        backoff = opts.min_backoff;
        if !objects.event(ev) {
            continue;
        }
        let Some(update) = update_of(objects.evaluate(), &ns, &mut delivered) else {
            continue;
        };
        if tx.send(update).is_err() {
            return;
        }
    }
}

/// What [`follow`] sends for an evaluation of the state objects, if anything
/// (`delivered`: a state was sent before; set when this one is).
fn update_of(outcome: Outcome, ns: &str, delivered: &mut bool) -> Option<Update> {
    match outcome {
        Outcome::New(state) => {
            tracing::info!(
                vips = state.vips.len(),
                services = state.services.len(),
                "new state from the API server"
            );
            *delivered = true;
            Some(Update::State(state))
        }
        Outcome::Unchanged => None,
        Outcome::InProgress(why) => {
            tracing::debug!(reason = %why, "state objects are being written; keeping the last state");
            None
        }
        Outcome::NoIndex => {
            if *delivered {
                tracing::warn!("ConfigMap {ns}/{STATE_NAME} is gone; keeping the last state");
                return None;
            }
            tracing::warn!("no ConfigMap {ns}/{STATE_NAME} yet (is the watcher running?)");
            Some(Update::Unavailable(format!(
                "no ConfigMap {ns}/{STATE_NAME}"
            )))
        }
        Outcome::Invalid(why) => Some(Update::Refused(format!(
            "ConfigMap {ns}/{STATE_NAME}: {why}"
        ))),
    }
}

/// The ConfigMap source as the control loop sees it: [`follow`] on a tokio runtime,
/// drained without blocking. Dropping it stops the watch.
pub struct ConfigMapSource {
    rx: tokio::sync::mpsc::UnboundedReceiver<Update>,
    pending: VecDeque<Update>,
    task: tokio::task::JoinHandle<()>,
    desc: String,
}

impl ConfigMapSource {
    /// Start following on `runtime`.
    pub fn spawn(
        client: Client,
        opts: ConfigMapOptions,
        runtime: &tokio::runtime::Handle,
    ) -> ConfigMapSource {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let desc = format!("configmap {}/{STATE_NAME}", opts.namespace);
        let span = tracing::info_span!("state-source", namespace = %opts.namespace);
        let task = runtime.spawn(tracing::Instrument::instrument(
            follow(client, opts, tx),
            span,
        ));
        ConfigMapSource {
            rx,
            pending: VecDeque::new(),
            task,
            desc,
        }
    }

    /// The next update, in order, except that a state makes everything queued before
    /// it obsolete.
    pub fn next_update(&mut self) -> Option<Update> {
        while let Ok(u) = self.rx.try_recv() {
            if matches!(u, Update::State(_)) {
                self.pending.clear();
            }
            self.pending.push_back(u);
        }
        self.pending.pop_front()
    }
}

impl Drop for ConfigMapSource {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Source for ConfigMapSource {
    fn poll(&mut self) -> Polled {
        match self.next_update() {
            None => Polled::Unchanged,
            Some(Update::State(s)) => Polled::Decoded(s),
            Some(Update::Refused(why)) => Polled::Refused(why),
            Some(Update::Unavailable(why)) => Polled::Unavailable(std::io::Error::other(why)),
        }
    }
    fn describe(&self) -> String {
        self.desc.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8slb_common::config::parse_global_config;

    fn cm(name: &str, bytes: Option<&[u8]>) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            binary_data: bytes
                .map(|b| BTreeMap::from([(STATE_KEY.to_string(), ByteString(b.to_vec()))])),
            ..Default::default()
        }
    }

    fn state(net: &str) -> State {
        let cfg = parse_global_config(&format!(
            r#"{{"pools":{{"default":{{"network":"{net}/24","range":"{net}"}}}}}}"#
        ))
        .unwrap();
        State::empty(cfg.actor_config(&Default::default()))
    }

    #[test]
    fn names() {
        assert!(is_state_name("k8slb-state"));
        assert!(is_state_name("k8slb-state-0"));
        assert!(is_state_name("k8slb-state-17"));
        assert!(!is_state_name("k8slb-state-"));
        assert!(!is_state_name("k8slb-state-x"));
        assert!(!is_state_name("k8slb-statex"));
        assert!(!is_state_name("global"));
    }

    #[test]
    fn relist_then_changes() {
        let a = state("10.0.1.0");
        let b = state("10.0.2.0");
        assert_ne!(a, b);
        let pa = publish::encode(&a, publish::MAX_OBJECT_BYTES);
        let pb = publish::encode(&b, publish::MAX_OBJECT_BYTES);
        let mut o = StateObjects::new();
        assert!(!o.event(watcher::Event::Init));
        assert!(!o.event(watcher::Event::InitApply(cm(STATE_NAME, Some(&pa[0].gzip)))));
        assert!(!o.event(watcher::Event::InitApply(cm("unrelated", Some(b"x")))));
        assert!(o.event(watcher::Event::InitDone));
        assert_eq!(o.evaluate(), Outcome::New(Box::new(a.clone())));
        assert_eq!(o.evaluate(), Outcome::Unchanged);
        // Same bytes again: no change at all.
        assert!(!o.event(watcher::Event::Apply(cm(STATE_NAME, Some(&pa[0].gzip)))));
        assert!(o.event(watcher::Event::Apply(cm(STATE_NAME, Some(&pb[0].gzip)))));
        assert_eq!(o.evaluate(), Outcome::New(Box::new(b.clone())));
        // Index deleted: NoIndex, never an empty state; the last good one is kept.
        assert!(o.event(watcher::Event::Delete(cm(STATE_NAME, None))));
        assert_eq!(o.evaluate(), Outcome::NoIndex);
        assert_eq!(o.current(), Some(&b));
        // Garbage: refused once.
        assert!(o.event(watcher::Event::Apply(cm(STATE_NAME, Some(b"junk")))));
        assert!(matches!(o.evaluate(), Outcome::Invalid(_)));
        assert_eq!(o.evaluate(), Outcome::Unchanged);
        assert_eq!(o.current(), Some(&b));
        // A relist that brings back the good object: same state as delivered, unchanged.
        o.event(watcher::Event::Init);
        o.event(watcher::Event::InitApply(cm(STATE_NAME, Some(&pb[0].gzip))));
        assert!(o.event(watcher::Event::InitDone));
        assert_eq!(o.evaluate(), Outcome::Unchanged);
    }

    #[test]
    fn index_without_payload_is_refused() {
        let mut o = StateObjects::new();
        o.event(watcher::Event::Apply(cm(STATE_NAME, None)));
        assert!(matches!(o.evaluate(), Outcome::Invalid(_)));
    }
}
