//! The object store: every object, one global resourceVersion, a bounded history of
//! changes for watch resumption, and the open watches.
//!
//! Everything here is synchronous and runs under one mutex; the HTTP layer in `server`
//! only translates requests into these calls.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::crd::Crds;
use crate::error::ApiError;
use crate::patch::{
    from_fields_v1, get_path, json_patch, leaf_paths, merge_patch, remove_path, to_fields_v1,
    FieldPath,
};
use crate::resources::{self, Resource, RESOURCES};
use crate::selector::{FieldSelector, LabelSelector};

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects. Sorting by it
/// gives the order etcd lists in.
pub(crate) type Key = (String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// Which objects a list or watch sees.
#[derive(Debug, Clone)]
pub(crate) struct Filter {
    pub res: usize,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn matches(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| namespace_of(obj) == ns)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subresource {
    Main,
    Status,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    Merge,
    /// Implemented as a merge patch: lists are replaced, never merged by key.
    StrategicMerge,
    Json,
    Apply,
}

/// A PATCH body and how to read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PatchBody<'a> {
    pub ptype: PatchType,
    pub body: &'a [u8],
}

#[derive(Debug, Clone, Default)]
pub(crate) struct WriteOptions {
    pub field_manager: Option<String>,
    pub force: bool,
    pub dry_run: bool,
}

/// One line of a watch stream, with the resourceVersion it carries.
#[derive(Debug, Clone)]
pub(crate) struct WatchItem {
    pub rv: u64,
    pub event: Value,
}

#[derive(Debug, Clone)]
struct Change {
    rv: u64,
    res: usize,
    typ: EventType,
    old: Option<Value>,
    new: Value,
}

impl Change {
    /// What a watch with `filter` sees of this change: label or field changes that move an
    /// object into or out of the selection become ADDED or DELETED, as in the real server.
    fn seen_by(&self, filter: &Filter) -> Option<WatchItem> {
        if resources::storage_row(self.res) != resources::storage_row(filter.res) {
            return None;
        }
        let new_matches = filter.matches(&self.new);
        let typ = match self.typ {
            EventType::Modified => {
                let old_matches = self.old.as_ref().is_some_and(|o| filter.matches(o));
                match (old_matches, new_matches) {
                    (true, true) => EventType::Modified,
                    (false, true) => EventType::Added,
                    (true, false) => EventType::Deleted,
                    (false, false) => return None,
                }
            }
            other if new_matches => other,
            _ => return None,
        };
        Some(WatchItem {
            rv: self.rv,
            event: json!({"type": typ.as_str(), "object": as_version(filter.res, self.new.clone())}),
        })
    }
}

struct Watcher {
    filter: Filter,
    tx: UnboundedSender<WatchItem>,
}

pub(crate) struct Store {
    rv: u64,
    serial: u64,
    /// Services' clusterIPs and nodePorts are handed out in sequence, never reused.
    cluster_ips: u64,
    node_ports: u64,
    objects: Vec<BTreeMap<Key, Value>>,
    history: VecDeque<Change>,
    history_limit: usize,
    /// Every change with a resourceVersion above this one is still in `history`.
    compacted: u64,
    watchers: Vec<Watcher>,
    /// The installed CustomResourceDefinitions: what CRD-defined rows are served, and
    /// their schemas.
    pub crds: Arc<Crds>,
}

/// An object as seen through row `res`: a CRD-defined kind's object read at another
/// version than it was written at differs only by its `apiVersion` (conversion `None`).
fn as_version(res: usize, mut obj: Value) -> Value {
    let r = &RESOURCES[res];
    if r.crd {
        obj["apiVersion"] = json!(r.api_version());
    }
    obj
}

pub(crate) fn namespace_of(obj: &Value) -> &str {
    obj.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn rv_of(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `metadata` as a mutable map, created if missing.
fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

/// RFC 3339 in UTC with second precision, like `metav1.Time`.
pub(crate) fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const LABEL_1123_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str, first_alpha: bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && (!first_alpha || b[0].is_ascii_lowercase())
        && b[b.len() - 1] != b'-'
}

/// The name rule of each kind: Services need DNS-1035 labels, Namespaces RFC 1123 labels,
/// everything else RFC 1123 subdomains.
fn validate_name(res: &Resource, name: &str) -> Result<(), ApiError> {
    let (ok, msg) = match res.plural {
        "services" => (is_label(name, true), LABEL_1035_MSG),
        "namespaces" => (is_label(name, false), LABEL_1123_MSG),
        // RBAC objects only need a path segment name (`k8slb-system:watcher` is fine).
        _ if res.group == "rbac.authorization.k8s.io" => (
            !name.is_empty()
                && name != "."
                && name != ".."
                && !name.contains('/')
                && !name.contains('%'),
            "may not contain '/' or '%' and may not be '.' or '..'",
        ),
        _ => (
            name.len() <= 253 && name.split('.').all(|l| is_label(l, false)),
            SUBDOMAIN_MSG,
        ),
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(res, name, "metadata.name", name, msg))
    }
}

/// Checks `apiVersion`/`kind` if the body has them, then sets them.
fn check_type(res: &Resource, obj: &mut Value, required: bool) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    let api_version = res.api_version();
    let got_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let got_kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if (required || !got_version.is_empty()) && got_version != api_version
        || (required || !got_kind.is_empty()) && got_kind != res.kind
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({got_version}) and kind ({got_kind}) do not match the request ({api_version}, {})",
            res.kind
        )));
    }
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(res.kind);
    Ok(())
}

/// Checks the body's name and namespace against the URL's, filling them in if absent.
fn check_identity(res: &Resource, obj: &mut Value, ns: &str, name: &str) -> Result<(), ApiError> {
    let meta = meta_mut(obj);
    match meta.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() && n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )))
        }
        _ => {
            meta.insert("name".into(), json!(name));
        }
    }
    set_namespace(res, meta, ns)
}

fn set_namespace(res: &Resource, meta: &mut Map<String, Value>, ns: &str) -> Result<(), ApiError> {
    if !res.namespaced {
        meta.remove("namespace");
        return Ok(());
    }
    match meta.get("namespace").and_then(Value::as_str) {
        Some(n) if !n.is_empty() && n != ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => {
            meta.insert("namespace".into(), json!(ns));
            Ok(())
        }
    }
}

/// Metadata the client cannot change with an update.
const IMMUTABLE_META: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "generation",
];

/// The namespaces a new cluster has.
pub(crate) const INITIAL_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// NamespaceLifecycle's immortal namespaces: never deleted.
const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// The most data (`data` values plus decoded `binaryData` values) a ConfigMap may hold.
pub(crate) const MAX_CONFIGMAP_BYTES: usize = 1024 * 1024;

fn namespace_object(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// Whether a Namespace is being deleted.
fn terminating(ns: &Value) -> bool {
    ns.pointer("/metadata/deletionTimestamp").is_some()
        || ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
}

/// The strategy validation the fake does beyond names: a ConfigMap's size, a TLS Secret's
/// two keys, and that a core/v1 Event lives in the namespace of the object it is about.
fn validate_object(
    crds: &Crds,
    res: &Resource,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let creating = old.is_none();
    let name = name_of(obj);
    if let Some(v) = crds.version(res) {
        let causes = crate::schema::validate(crds, &v.schema, obj, old);
        if !causes.is_empty() {
            return Err(ApiError::invalid_causes(res, name, &causes));
        }
    }
    if res.group.is_empty() && res.plural == "configmaps" {
        let text: usize = obj
            .get("data")
            .and_then(Value::as_object)
            .map(|m| m.values().filter_map(Value::as_str).map(str::len).sum())
            .unwrap_or(0);
        let binary: usize = obj
            .get("binaryData")
            .and_then(Value::as_object)
            .map(|m| {
                m.values()
                    .filter_map(Value::as_str)
                    .map(|b| {
                        base64::engine::general_purpose::STANDARD
                            .decode(b)
                            .map_or(b.len(), |d| d.len())
                    })
                    .sum()
            })
            .unwrap_or(0);
        if text + binary > MAX_CONFIGMAP_BYTES {
            return Err(ApiError::invalid_detail(
                res,
                name,
                "[]",
                &format!("Too long: must have at most {MAX_CONFIGMAP_BYTES} bytes"),
                "FieldValueTooLong",
            ));
        }
    }
    // A kubernetes.io/tls Secret must carry both halves (core validation,
    // ValidateSecret): the first missing one is reported.
    if res.group.is_empty()
        && res.plural == "secrets"
        && obj.get("type").and_then(Value::as_str) == Some("kubernetes.io/tls")
    {
        for key in ["tls.crt", "tls.key"] {
            let present = obj
                .pointer(&format!("/data/{}", key.replace('/', "~1")))
                .is_some()
                || obj.get("stringData").and_then(|d| d.get(key)).is_some();
            if !present {
                return Err(ApiError::invalid_detail(
                    res,
                    name,
                    &format!("data[{key}]"),
                    "Required value",
                    "FieldValueRequired",
                ));
            }
        }
    }
    if creating && res.group.is_empty() && res.plural == "events" {
        let ns = namespace_of(obj);
        let involved = obj
            .pointer("/involvedObject/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let ok = if involved.is_empty() {
            ns.is_empty() || ns == "default"
        } else {
            ns == involved
        };
        if !ok {
            return Err(ApiError::invalid(
                res,
                name,
                "involvedObject.namespace",
                involved,
                "does not match event.namespace",
            ));
        }
    }
    Ok(())
}

impl Store {
    pub fn new(history_limit: usize) -> Self {
        let mut store = Self::empty(history_limit);
        // The namespaces of a new cluster exist from the start (outside the history).
        let ns_res = resources::find("", "v1", "namespaces").expect("namespaces are served");
        for name in INITIAL_NAMESPACES {
            let mut ns = namespace_object(name);
            let uid = store.new_uid();
            let meta = meta_mut(&mut ns);
            meta.insert("uid".into(), json!(uid));
            meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
            meta.insert("resourceVersion".into(), json!("1"));
            store.objects[ns_res].insert((String::new(), name.to_string()), ns);
        }
        store
    }

    fn empty(history_limit: usize) -> Self {
        Self {
            rv: 1,
            serial: 0,
            cluster_ips: 0,
            node_ports: 0,
            objects: RESOURCES.iter().map(|_| BTreeMap::new()).collect(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted: 1,
            watchers: Vec::new(),
            crds: Arc::new(Crds::default()),
        }
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        splitmix(self.serial ^ nanos.rotate_left(17))
    }

    fn new_uid(&mut self) -> String {
        let (a, b) = (self.next_serial(), self.next_serial());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    fn generated_name(&mut self, res: usize, ns: &str, prefix: &str) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        loop {
            let mut x = self.next_serial();
            let suffix: String = (0..5)
                .map(|_| {
                    let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
                    x /= ALPHABET.len() as u64;
                    c
                })
                .collect();
            let name = format!("{prefix}{suffix}");
            if !self.objects[resources::storage_row(res)]
                .contains_key(&(ns.to_string(), name.clone()))
            {
                return name;
            }
        }
    }

    /// Records a change: bumps the resourceVersion, stores (or removes) the object, appends
    /// to the history and tells the watches.
    fn commit(&mut self, res: usize, typ: EventType, old: Option<Value>, mut new: Value) -> Value {
        self.rv += 1;
        meta_mut(&mut new).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let key = (namespace_of(&new).to_string(), name_of(&new).to_string());
        if typ == EventType::Deleted {
            self.objects[resources::storage_row(res)].remove(&key);
        } else {
            self.objects[resources::storage_row(res)].insert(key, new.clone());
        }
        let change = Change {
            rv: self.rv,
            res,
            typ,
            old,
            new: new.clone(),
        };
        self.watchers.retain(|w| match change.seen_by(&w.filter) {
            Some(item) => w.tx.send(item).is_ok(),
            None => !w.tx.is_closed(),
        });
        self.history.push_back(change);
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.compacted = dropped.rv;
            }
        }
        new
    }

    /// Installs `crds`, and prunes and defaults the stored objects of the kinds they
    /// define, as a real server shows them once their CRD exists (without events: nothing
    /// was written).
    pub fn install_crds(&mut self, crds: Crds) {
        self.crds = Arc::new(crds);
        for (i, res) in RESOURCES.iter().enumerate() {
            if resources::storage_row(i) != i {
                continue;
            }
            // Objects are stored at the version they were written at.
            for obj in self.objects[i].values_mut() {
                let version = obj
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .and_then(|a| a.rsplit_once('/'))
                    .map_or("", |(_, v)| v)
                    .to_string();
                let row = RESOURCES
                    .iter()
                    .find(|r| r.group == res.group && r.kind == res.kind && r.version == version);
                if let Some(v) = row.and_then(|r| self.crds.version(r)) {
                    crate::schema::prune(&v.schema, obj, true);
                    crate::schema::default(&v.schema, obj);
                }
            }
        }
    }

    /// Forgets the whole history, like an etcd compaction: watches and continue tokens from
    /// any earlier resourceVersion get 410 Expired.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    pub fn get(&self, res: usize, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.objects[resources::storage_row(res)]
            .get(&(ns.to_string(), name.to_string()))
            .map(|o| as_version(res, o.clone()))
            .ok_or_else(|| ApiError::not_found(&RESOURCES[res], name))
    }

    pub fn get_ref(&self, res: usize, ns: &str, name: &str) -> Option<&Value> {
        self.objects[resources::storage_row(res)].get(&(ns.to_string(), name.to_string()))
    }

    pub fn iter(&self, res: usize) -> impl Iterator<Item = &Value> {
        self.objects[resources::storage_row(res)].values()
    }

    /// NamespaceLifecycle for a create in `ns`: 404 if the Namespace does not exist, 403 if
    /// it is being deleted.
    pub fn check_namespace_for_create(
        &self,
        res: &Resource,
        ns: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        if !res.namespaced {
            return Ok(());
        }
        let ns_res = resources::find("", "v1", "namespaces").expect("namespaces are served");
        match self.get_ref(ns_res, "", ns) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(n) if terminating(n) => Err(ApiError::forbidden(
                res.group,
                res.plural,
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// NamespaceLifecycle for a delete: `default`, `kube-system` and `kube-public` stay.
    pub fn check_delete_allowed(res: &Resource, name: &str) -> Result<(), ApiError> {
        if res.group.is_empty() && res.plural == "namespaces" && IMMORTAL_NAMESPACES.contains(&name)
        {
            return Err(ApiError::forbidden(
                "",
                "namespaces",
                name,
                "this namespace may not be deleted",
            ));
        }
        Ok(())
    }

    pub fn objects(&self, res: usize) -> Vec<Value> {
        self.objects[resources::storage_row(res)]
            .values()
            .map(|o| as_version(res, o.clone()))
            .collect()
    }

    pub fn list(
        &self,
        filter: &Filter,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> Result<Value, ApiError> {
        let res = &RESOURCES[filter.res];
        let (list_rv, start) = match cont.filter(|c| !c.is_empty()) {
            Some(token) => {
                let (rv, key) = decode_continue(token).ok_or_else(|| {
                    ApiError::bad_request(format!("invalid continue token {token:?}"))
                })?;
                if rv < self.compacted {
                    return Err(ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."));
                }
                (rv, Bound::Excluded(key))
            }
            None => (self.rv, Bound::Unbounded),
        };
        let mut matching = self.objects[resources::storage_row(filter.res)]
            .range((start, Bound::Unbounded))
            .filter(|(_, o)| filter.matches(o));
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let items: Vec<(&Key, &Value)> = matching.by_ref().take(limit).collect();
        let remaining = matching.count();
        let mut metadata = json!({"resourceVersion": list_rv.to_string()});
        if remaining > 0 {
            if let Some((key, _)) = items.last() {
                metadata["continue"] = json!(encode_continue(list_rv, key));
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
        Ok(json!({
            "kind": format!("{}List", res.kind),
            "apiVersion": res.api_version(),
            "metadata": metadata,
            "items": items.into_iter().map(|(_, o)| as_version(filter.res, o.clone())).collect::<Vec<_>>(),
        }))
    }

    /// Opens a watch. Returns the events to send first (synthetic ADDED for every object when
    /// there is no resourceVersion or it is "0", else the history after it), and registers
    /// `tx` for everything that follows. Expired resourceVersions give 410.
    pub fn watch(
        &mut self,
        filter: Filter,
        from: Option<&str>,
        tx: UnboundedSender<WatchItem>,
    ) -> Result<Vec<WatchItem>, ApiError> {
        let from =
            match from.filter(|s| !s.is_empty() && *s != "0") {
                None => None,
                Some(s) => Some(s.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version: {s:?}"))
                })?),
            };
        let initial = match from {
            None => self.objects[resources::storage_row(filter.res)]
                .values()
                .filter(|o| filter.matches(o))
                .map(|o| WatchItem {
                    rv: rv_of(o).and_then(|r| r.parse().ok()).unwrap_or(0),
                    event: json!({"type": "ADDED", "object": as_version(filter.res, o.clone())}),
                })
                .collect(),
            Some(from) if from < self.compacted => {
                return Err(ApiError::expired(format!(
                    "too old resource version: {from} ({})",
                    self.compacted + 1
                )))
            }
            Some(from) => self
                .history
                .iter()
                .filter(|c| c.rv > from)
                .filter_map(|c| c.seen_by(&filter))
                .collect(),
        };
        self.watchers.push(Watcher { filter, tx });
        Ok(initial)
    }

    pub fn create(
        &mut self,
        res_i: usize,
        ns: &str,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let res = &RESOURCES[res_i];
        check_type(res, &mut obj, false)?;
        let meta = meta_mut(&mut obj);
        set_namespace(res, meta, ns)?;
        let given_name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        self.check_namespace_for_create(res, ns, &given_name)?;
        let meta = meta_mut(&mut obj);
        if meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let mut name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            let prefix = meta
                .get("generateName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    res,
                    "",
                    "metadata.name",
                    "",
                    "name or generateName is required",
                ));
            }
            name = self.generated_name(res_i, ns, &prefix);
        }
        validate_name(res, &name)?;
        let ns = if res.namespaced { ns } else { "" };
        if self.objects[resources::storage_row(res_i)].contains_key(&(ns.to_string(), name.clone()))
        {
            return Err(ApiError::already_exists(res, &name));
        }
        let uid = self.new_uid();
        let meta = meta_mut(&mut obj);
        meta.insert("name".into(), json!(name));
        meta.insert("uid".into(), json!(uid));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        if res.clear_status_on_create {
            if res.crd {
                // The custom resource strategy drops it; defaulting may give it back.
                if let Value::Object(m) = &mut obj {
                    m.remove("status");
                }
            } else {
                obj["status"] = json!({});
            }
        }
        self.apply_defaults(res, None, &mut obj);
        validate_object(&self.crds, res, &obj, None)?;
        if opts.dry_run {
            return Ok(obj);
        }
        Ok(self.commit(res_i, EventType::Added, None, obj))
    }

    /// PUT. A `metadata.resourceVersion` in the body is a precondition; without one the
    /// update is unconditional.
    pub fn update(
        &mut self,
        res_i: usize,
        ns: &str,
        name: &str,
        mut body: Value,
        sub: Subresource,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let res = &RESOURCES[res_i];
        let old = self.get(res_i, ns, name)?;
        check_type(res, &mut body, false)?;
        check_identity(res, &mut body, ns, name)?;
        if rv_of(&body).is_some_and(|rv| Some(rv) != rv_of(&old)) {
            return Err(ApiError::stale(res, name));
        }
        let new = merge_for_update(res, &old, body, sub);
        self.finish_update(res_i, old, new, opts)
    }

    pub fn patch(
        &mut self,
        res_i: usize,
        ns: &str,
        name: &str,
        patch: PatchBody<'_>,
        sub: Subresource,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let res = &RESOURCES[res_i];
        let PatchBody { ptype, body } = patch;
        if ptype == PatchType::Apply {
            return self.apply(res_i, ns, name, body, sub, opts);
        }
        let old = self.get(res_i, ns, name)?;
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
        let mut patched = old.clone();
        match ptype {
            PatchType::Merge | PatchType::StrategicMerge => merge_patch(&mut patched, &patch),
            PatchType::Json => json_patch(&mut patched, &patch).map_err(|e| {
                ApiError::invalid(
                    res,
                    name,
                    "patch",
                    "",
                    &format!("the JSON patch could not be applied: {e}"),
                )
            })?,
            PatchType::Apply => unreachable!("handled above"),
        }
        check_type(res, &mut patched, false)?;
        if name_of(&patched) != name || namespace_of(&patched) != namespace_of(&old) {
            return Err(ApiError::bad_request(
                "a patch cannot change metadata.name or metadata.namespace",
            ));
        }
        if rv_of(&patched) != rv_of(&old) {
            return Err(ApiError::stale(res, name));
        }
        let new = merge_for_update(res, &old, patched, sub);
        self.finish_update(res_i, old, new, opts)
    }

    /// Server-side apply, simplified: see the crate documentation.
    fn apply(
        &mut self,
        res_i: usize,
        ns: &str,
        name: &str,
        body: &[u8],
        sub: Subresource,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let res = &RESOURCES[res_i];
        let manager = opts
            .field_manager
            .clone()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| ApiError::bad_request("fieldManager is required for apply requests"))?;
        let mut cfg: Value = serde_json::from_slice(body)
            .or_else(|_| serde_yaml::from_slice(body))
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        check_type(res, &mut cfg, true)?;
        if name_of(&cfg).is_empty() {
            return Err(ApiError::bad_request(
                "metadata.name is required in an apply configuration",
            ));
        }
        check_identity(res, &mut cfg, ns, name)?;
        let existing = self.objects[resources::storage_row(res_i)]
            .get(&(ns.to_string(), name.to_string()))
            .map(|o| as_version(res_i, o.clone()));
        if let (Some(want), Some(old)) = (rv_of(&cfg), &existing) {
            if Some(want) != rv_of(old) {
                return Err(ApiError::stale(res, name));
            }
        }
        let owned_cfg = owned_part(res, &cfg, sub);
        let cfg_paths = leaf_paths(&owned_cfg);
        let subresource = if sub == Subresource::Status {
            "status"
        } else {
            ""
        };
        let (mut live, old) = match existing {
            Some(old) => (old.clone(), Some(old)),
            None if sub == Subresource::Status => return Err(ApiError::not_found(res, name)),
            None => (
                json!({"apiVersion": res.api_version(), "kind": res.kind, "metadata": cfg["metadata"].clone()}),
                None,
            ),
        };
        let mut entries: Vec<ManagedEntry> = live
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(ManagedEntry::parse).collect())
            .unwrap_or_default();
        let is_mine = |e: &ManagedEntry| {
            e.manager == manager && e.operation == "Apply" && e.subresource == subresource
        };

        // Conflicts: another applier owns a field this configuration sets to another value.
        let mut conflicts: Vec<(String, FieldPath)> = Vec::new();
        for e in entries
            .iter()
            .filter(|e| !is_mine(e) && e.operation == "Apply")
        {
            for p in e.paths.intersection(&cfg_paths) {
                if get_path(&live, p) != get_path(&owned_cfg, p) {
                    conflicts.push((e.manager.clone(), p.clone()));
                }
            }
        }
        if !conflicts.is_empty() {
            if !opts.force {
                let lines: Vec<String> = conflicts
                    .iter()
                    .map(|(m, p)| format!("conflict with \"{m}\": .{}", p.join(".")))
                    .collect();
                let causes = conflicts
                    .iter()
                    .map(|(m, p)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{m}\""), "field": format!(".{}", p.join("."))}))
                    .collect();
                let n = lines.len();
                let message = format!(
                    "Apply failed with {n} conflict{}: {}",
                    if n == 1 { "" } else { "s" },
                    lines.join("\n")
                );
                return Err(ApiError::apply_conflict(res, name, message, causes));
            }
            for e in entries.iter_mut().filter(|e| !is_mine(e)) {
                e.paths.retain(|p| !conflicts.iter().any(|(_, c)| c == p));
            }
        }

        // Fields this manager applied before and dropped now are removed, unless someone
        // else also owns them.
        let previous: BTreeSet<FieldPath> = entries
            .iter()
            .filter(|e| is_mine(e))
            .flat_map(|e| e.paths.iter().cloned())
            .collect();
        for p in previous.difference(&cfg_paths) {
            if !entries.iter().any(|e| !is_mine(e) && e.paths.contains(p)) {
                remove_path(&mut live, p);
            }
        }
        merge_patch(&mut live, &owned_cfg);

        let api_version = res.api_version();
        match entries.iter_mut().find(|e| is_mine(e)) {
            Some(e) if e.paths == cfg_paths => {}
            Some(e) => {
                e.paths = cfg_paths;
                e.time = now_rfc3339();
            }
            None => entries.push(ManagedEntry {
                manager,
                operation: "Apply".into(),
                api_version,
                time: now_rfc3339(),
                subresource: subresource.into(),
                paths: cfg_paths,
            }),
        }
        entries.retain(|e| !e.paths.is_empty());
        meta_mut(&mut live).insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(ManagedEntry::to_json).collect()),
        );
        match old {
            None => {
                meta_mut(&mut live).remove("resourceVersion");
                self.create(res_i, ns, live, opts)
            }
            Some(old) => self.finish_update(res_i, old, live, opts),
        }
    }

    /// The common tail of every update: defaults, generation, no-op detection, finalizers.
    fn finish_update(
        &mut self,
        res_i: usize,
        old: Value,
        mut new: Value,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let res = &RESOURCES[res_i];
        self.apply_defaults(res, Some(&old), &mut new);
        validate_object(&self.crds, res, &new, Some(&old))?;
        let old_generation = old
            .pointer("/metadata/generation")
            .cloned()
            .unwrap_or(json!(1));
        let generation = match (old.get("spec") != new.get("spec"), old_generation.as_i64()) {
            (true, Some(g)) => json!(g + 1),
            _ => old_generation,
        };
        let meta = meta_mut(&mut new);
        meta.insert("generation".into(), generation);
        if let Some(rv) = rv_of(&old) {
            meta.insert("resourceVersion".into(), json!(rv));
        }
        if new == old {
            return Ok(old);
        }
        let deleting = new.pointer("/metadata/deletionTimestamp").is_some()
            && new
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        if opts.dry_run {
            return Ok(new);
        }
        let typ = if deleting {
            EventType::Deleted
        } else {
            EventType::Modified
        };
        Ok(self.commit(res_i, typ, Some(old), new))
    }

    pub fn delete(
        &mut self,
        res_i: usize,
        ns: &str,
        name: &str,
        options: Option<&Value>,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let res = &RESOURCES[res_i];
        let old = self.get(res_i, ns, name)?;
        Self::check_delete_allowed(res, name)?;
        if let Some(pre) = options.and_then(|o| o.get("preconditions")) {
            for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
                let want = pre.get(field).and_then(Value::as_str);
                let have = old
                    .pointer(&format!("/metadata/{field}"))
                    .and_then(Value::as_str);
                if let Some(want) = want.filter(|w| Some(*w) != have) {
                    return Err(ApiError::conflict(
                        res,
                        name,
                        &format!(
                            "Precondition failed: {label} in precondition: {want}, {label} in object meta: {}",
                            have.unwrap_or("")
                        ),
                    ));
                }
            }
        }
        if opts.dry_run {
            return Ok(old);
        }
        let has_finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if old.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(old);
            }
            let mut new = old.clone();
            let meta = meta_mut(&mut new);
            meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            return Ok(self.commit(res_i, EventType::Modified, Some(old), new));
        }
        Ok(self.commit(res_i, EventType::Deleted, Some(old.clone()), old))
    }

    /// DELETE on a collection: deletes every object the filter selects.
    pub fn delete_collection(
        &mut self,
        filter: &Filter,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let keys: Vec<Key> = self.objects[resources::storage_row(filter.res)]
            .iter()
            .filter(|(_, o)| filter.matches(o))
            .map(|(k, _)| k.clone())
            .collect();
        let mut items = Vec::new();
        for (ns, name) in keys {
            items.push(self.delete(filter.res, &ns, &name, None, opts)?);
        }
        let res = &RESOURCES[filter.res];
        Ok(json!({
            "kind": format!("{}List", res.kind),
            "apiVersion": res.api_version(),
            "metadata": {"resourceVersion": self.rv.to_string()},
            "items": items,
        }))
    }

    /// Test helper: stores `obj` as given (status included), creating or replacing it.
    pub fn put(&mut self, mut obj: Value) -> Result<Value, String> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let res_i = resources::find_kind(api_version, kind)
            .ok_or_else(|| format!("the fake API does not serve {api_version} {kind}"))?;
        let res = &RESOURCES[res_i];
        let name = name_of(&obj).to_string();
        if name.is_empty() {
            return Err("put_object needs metadata.name".into());
        }
        let ns = if res.namespaced {
            let ns = namespace_of(&obj);
            if ns.is_empty() { "default" } else { ns }.to_string()
        } else {
            String::new()
        };
        let ns_res = resources::find("", "v1", "namespaces").expect("namespaces are served");
        if res.namespaced && self.get_ref(ns_res, "", &ns).is_none() {
            return Err(format!(
                "{} {ns}/{name}: namespace \"{ns}\" does not exist (as in a real cluster, nothing \
                 lives in a missing namespace): create it first (FakeApi::create_namespace, or \
                 put a Namespace object)",
                res.kind
            ));
        }
        if res.group.is_empty() && res.plural == "namespaces" && obj.get("status").is_none() {
            obj["status"] = json!({"phase": "Active"});
        }
        // A real server reads a custom resource back pruned and defaulted, whatever it
        // was written with.
        if let Some(v) = self.crds.version(res) {
            crate::schema::prune(&v.schema, &mut obj, true);
            crate::schema::default(&v.schema, &mut obj);
        }
        let old = self.objects[resources::storage_row(res_i)]
            .get(&(ns.clone(), name))
            .cloned();
        let uid = self.new_uid();
        let meta = meta_mut(&mut obj);
        if res.namespaced {
            meta.insert("namespace".into(), json!(ns));
        } else {
            meta.remove("namespace");
        }
        meta.remove("resourceVersion");
        for (field, fallback) in [
            ("uid", json!(uid)),
            ("creationTimestamp", json!(now_rfc3339())),
            ("generation", json!(1)),
        ] {
            if !meta.contains_key(field) {
                let value = old
                    .as_ref()
                    .and_then(|o| o.pointer(&format!("/metadata/{field}")).cloned())
                    .unwrap_or(fallback);
                meta.insert(field.into(), value);
            }
        }
        let typ = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        Ok(self.commit(res_i, typ, old, obj))
    }

    /// Test helper: removes an object without any checks.
    pub fn remove(&mut self, res_i: usize, ns: &str, name: &str) -> Option<Value> {
        let old = self.objects[resources::storage_row(res_i)]
            .get(&(ns.to_string(), name.to_string()))
            .cloned()?;
        Some(self.commit(res_i, EventType::Deleted, Some(old.clone()), old))
    }

    /// Defaults the real API server fills in: Services', and a new Namespace is Active.
    fn apply_defaults(&mut self, res: &Resource, old: Option<&Value>, obj: &mut Value) {
        if let Some(v) = self.crds.version(res) {
            crate::schema::prune(&v.schema, obj, true);
            crate::schema::default(&v.schema, obj);
        }
        if res.group.is_empty() && res.plural == "services" {
            self.default_service(old, obj);
        }
        if res.group.is_empty() && res.plural == "namespaces" && old.is_none() {
            obj["status"] = json!({"phase": "Active"});
        }
    }

    fn default_service(&mut self, old: Option<&Value>, obj: &mut Value) {
        let old_spec = old
            .and_then(|o| o.get("spec"))
            .cloned()
            .unwrap_or(json!({}));
        if !obj.get("spec").is_some_and(Value::is_object) {
            obj["spec"] = json!({});
        }
        let mut fresh_ip = || {
            self.cluster_ips += 1;
            let n = self.cluster_ips;
            format!("10.96.{}.{}", (n / 250) % 250, n % 250 + 1)
        };
        let spec = &mut obj["spec"];
        if spec.get("type").is_none_or(Value::is_null) {
            spec["type"] = json!("ClusterIP");
        }
        let typ = spec["type"].as_str().unwrap_or("ClusterIP").to_string();
        if spec.get("sessionAffinity").is_none() {
            spec["sessionAffinity"] = json!("None");
        }
        if typ != "ExternalName"
            && spec
                .get("clusterIP")
                .is_none_or(|v| v.as_str().is_none_or(str::is_empty))
        {
            let ip = match old_spec.get("clusterIP").and_then(Value::as_str) {
                Some(ip) if !ip.is_empty() => ip.to_string(),
                _ => fresh_ip(),
            };
            spec["clusterIP"] = json!(ip);
            spec["clusterIPs"] = json!([ip]);
        }
        let node_ports = (typ == "LoadBalancer"
            && spec
                .get("allocateLoadBalancerNodePorts")
                .and_then(Value::as_bool)
                != Some(false))
            || typ == "NodePort";
        if node_ports && spec.get("externalTrafficPolicy").is_none() {
            spec["externalTrafficPolicy"] = json!("Cluster");
        }
        if typ == "LoadBalancer" && spec.get("allocateLoadBalancerNodePorts").is_none() {
            spec["allocateLoadBalancerNodePorts"] = json!(true);
        }
        let old_ports = old_spec
            .get("ports")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for port in ports.iter_mut().filter(|p| p.is_object()) {
                if port.get("protocol").is_none() {
                    port["protocol"] = json!("TCP");
                }
                if port.get("targetPort").is_none() {
                    port["targetPort"] = port.get("port").cloned().unwrap_or(Value::Null);
                }
                if node_ports && port.get("nodePort").is_none() {
                    let same = old_ports.iter().find(|o| {
                        o.get("port") == port.get("port")
                            && o.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                                == port["protocol"]
                    });
                    let np = same
                        .and_then(|o| o.get("nodePort"))
                        .cloned()
                        .unwrap_or_else(|| {
                            self.node_ports += 1;
                            json!(30_000 + self.node_ports % 2_768)
                        });
                    port["nodePort"] = np;
                }
            }
        }
    }
}

/// The new object of an update: the body, with server-owned metadata kept from `old`, and
/// `status` or everything-but-`status` kept from `old` as the subresource requires.
fn merge_for_update(res: &Resource, old: &Value, body: Value, sub: Subresource) -> Value {
    match sub {
        Subresource::Status => {
            let mut new = old.clone();
            match body.get("status") {
                Some(status) => new["status"] = status.clone(),
                None => {
                    if let Value::Object(m) = &mut new {
                        m.remove("status");
                    }
                }
            }
            new
        }
        Subresource::Main => {
            let mut new = body;
            let old_meta = old
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let meta = meta_mut(&mut new);
            for field in IMMUTABLE_META {
                match old_meta.get(*field) {
                    Some(v) => meta.insert((*field).into(), v.clone()),
                    None => meta.remove(*field),
                };
            }
            if !meta.contains_key("managedFields") {
                if let Some(mf) = old_meta.get("managedFields") {
                    meta.insert("managedFields".into(), mf.clone());
                }
            }
            if res.status_subresource {
                if let Value::Object(m) = &mut new {
                    match old.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
            }
            new
        }
    }
}

/// The part of an apply configuration whose fields a manager owns: no type or identity
/// metadata, and only `status` (for `/status`) or everything but `status` (for kinds with
/// a status subresource).
fn owned_part(res: &Resource, cfg: &Value, sub: Subresource) -> Value {
    let mut c = cfg.clone();
    if let Value::Object(m) = &mut c {
        m.remove("apiVersion");
        m.remove("kind");
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            for f in [
                "name",
                "namespace",
                "resourceVersion",
                "managedFields",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "generation",
                "selfLink",
            ] {
                meta.remove(f);
            }
            if meta.is_empty() {
                m.remove("metadata");
            }
        }
        match sub {
            Subresource::Status => m.retain(|k, _| k == "status"),
            Subresource::Main if res.status_subresource => {
                m.remove("status");
            }
            Subresource::Main => {}
        }
    }
    c
}

/// One `metadata.managedFields` entry, with its field set parsed.
#[derive(Debug, Clone)]
struct ManagedEntry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: String,
    paths: BTreeSet<FieldPath>,
}

impl ManagedEntry {
    fn parse(v: &Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Self {
            manager: s("manager"),
            operation: s("operation"),
            api_version: s("apiVersion"),
            time: s("time"),
            subresource: s("subresource"),
            paths: v.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
        }
    }

    fn to_json(&self) -> Value {
        let mut v = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(&self.paths),
        });
        if !self.subresource.is_empty() {
            v["subresource"] = json!(self.subresource);
        }
        v
    }
}

fn encode_continue(rv: u64, key: &Key) -> String {
    let raw = json!({"rv": rv, "ns": key.0, "name": key.1}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(token: &str) -> Option<(u64, Key)> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    let v: Value = serde_json::from_slice(&raw).ok()?;
    Some((
        v.get("rv")?.as_u64()?,
        (
            v.get("ns")?.as_str()?.to_string(),
            v.get("name")?.as_str()?.to_string(),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    fn svc_res() -> usize {
        resources::find("", "v1", "services").unwrap()
    }

    fn cm_res() -> usize {
        resources::find("", "v1", "configmaps").unwrap()
    }

    fn filter(res: usize, labels: &str) -> Filter {
        Filter {
            res,
            namespace: Some("default".into()),
            labels: LabelSelector::parse(labels).unwrap(),
            fields: FieldSelector::default(),
        }
    }

    fn types(rx: &mut mpsc::UnboundedReceiver<WatchItem>) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while let Ok(item) = rx.try_recv() {
            out.push((
                item.event["type"].as_str().unwrap().to_string(),
                item.event["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            ));
        }
        out
    }

    #[test]
    fn label_changes_move_objects_in_and_out_of_a_watch() {
        let mut store = Store::new(100);
        let opts = WriteOptions::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        assert!(store
            .watch(filter(cm_res(), "app=web"), None, tx)
            .unwrap()
            .is_empty());
        let cm = json!({"metadata": {"name": "a", "labels": {"app": "db"}}});
        store.create(cm_res(), "default", cm, &opts).unwrap();
        let relabel = |app: &str| json!({"metadata": {"name": "a", "labels": {"app": app}}, "data": {"k": app}});
        store
            .update(
                cm_res(),
                "default",
                "a",
                relabel("web"),
                Subresource::Main,
                &opts,
            )
            .unwrap();
        store
            .update(
                cm_res(),
                "default",
                "a",
                relabel("web2"),
                Subresource::Main,
                &opts,
            )
            .unwrap();
        assert_eq!(
            types(&mut rx),
            [
                ("ADDED".to_string(), "a".to_string()),
                ("DELETED".to_string(), "a".to_string())
            ]
        );
    }

    #[test]
    fn history_window_and_expiry() {
        let mut store = Store::new(2);
        let opts = WriteOptions::default();
        for name in ["a", "b", "c"] {
            store
                .create(
                    cm_res(),
                    "default",
                    json!({"metadata": {"name": name}}),
                    &opts,
                )
                .unwrap();
        }
        // rv 2, 3, 4 were the creates; only 3 and 4 are kept.
        let (tx, _rx) = mpsc::unbounded_channel();
        let err = store
            .watch(filter(cm_res(), ""), Some("1"), tx.clone())
            .unwrap_err();
        assert_eq!((err.code, err.reason), (410, "Expired"));
        let replay = store
            .watch(filter(cm_res(), ""), Some("2"), tx.clone())
            .unwrap();
        assert_eq!(replay.iter().map(|i| i.rv).collect::<Vec<_>>(), [3, 4]);
        let all = store.watch(filter(cm_res(), ""), Some("0"), tx).unwrap();
        assert_eq!(
            all.len(),
            3,
            "RV 0 starts with synthetic ADDED for everything"
        );
    }

    #[test]
    fn finalizers_delay_deletion_until_removed() {
        let mut store = Store::new(100);
        let opts = WriteOptions::default();
        let cm = json!({"metadata": {"name": "a", "finalizers": ["k8slb.io/x"]}});
        store.create(cm_res(), "default", cm, &opts).unwrap();
        let marked = store.delete(cm_res(), "default", "a", None, &opts).unwrap();
        assert!(marked.pointer("/metadata/deletionTimestamp").is_some());
        assert!(store.get(cm_res(), "default", "a").is_ok());
        let patch = PatchBody {
            ptype: PatchType::Merge,
            body: br#"{"metadata":{"finalizers":null}}"#,
        };
        store
            .patch(cm_res(), "default", "a", patch, Subresource::Main, &opts)
            .unwrap();
        assert_eq!(store.get(cm_res(), "default", "a").unwrap_err().code, 404);
    }

    #[test]
    fn delete_preconditions_and_noop_updates() {
        let mut store = Store::new(100);
        let opts = WriteOptions::default();
        let created = store
            .create(
                svc_res(),
                "default",
                json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}),
                &opts,
            )
            .unwrap();
        assert_eq!(created["spec"]["type"], "ClusterIP");
        assert_eq!(created["spec"]["ports"][0]["targetPort"], 80);
        assert!(created["spec"].get("ports").unwrap()[0]
            .get("nodePort")
            .is_none());
        let rv = store.resource_version();
        let same = store
            .update(
                svc_res(),
                "default",
                "web",
                created.clone(),
                Subresource::Main,
                &opts,
            )
            .unwrap();
        assert_eq!(
            store.resource_version(),
            rv,
            "an identical PUT changes nothing"
        );
        assert_eq!(same, created);
        let wrong = json!({"preconditions": {"uid": "nope"}});
        let err = store
            .delete(svc_res(), "default", "web", Some(&wrong), &opts)
            .unwrap_err();
        assert_eq!((err.code, err.reason), (409, "Conflict"));
        let deleted = store
            .delete(svc_res(), "default", "web", None, &opts)
            .unwrap();
        assert_eq!(deleted["metadata"]["resourceVersion"], (rv + 1).to_string());
    }

    #[test]
    fn a_tls_secret_needs_both_keys() {
        let mut store = Store::new(100);
        let opts = WriteOptions::default();
        let res = crate::resources::find("", "v1", "secrets").unwrap();
        let secret = |data: Value| json!({"metadata": {"name": "web-tls"}, "type": "kubernetes.io/tls", "data": data});
        let err = store
            .create(
                res,
                "default",
                secret(json!({"tls.crt": "Y2VydA=="})),
                &opts,
            )
            .unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            "Secret \"web-tls\" is invalid: data[tls.key]: Required value"
        );
        let both = json!({"tls.crt": "Y2VydA==", "tls.key": "a2V5"});
        store.create(res, "default", secret(both), &opts).unwrap();
        // Other types need neither.
        let opaque = json!({"metadata": {"name": "o"}, "type": "Opaque", "data": {}});
        store.create(res, "default", opaque, &opts).unwrap();
    }

    #[test]
    fn names_are_validated_per_kind() {
        let mut store = Store::new(100);
        let opts = WriteOptions::default();
        let mk = |name: &str| json!({"metadata": {"name": name}});
        assert_eq!(
            store
                .create(svc_res(), "default", mk("1web"), &opts)
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            store
                .create(svc_res(), "default", mk("web.example"), &opts)
                .unwrap_err()
                .code,
            422
        );
        store
            .create(cm_res(), "default", mk("web.example"), &opts)
            .unwrap();
        assert_eq!(
            store
                .create(cm_res(), "default", mk("Web"), &opts)
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            store
                .create(cm_res(), "default", mk(""), &opts)
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let ts = now_rfc3339();
        assert_eq!(ts.len(), 20, "{ts}");
        assert!(
            ts.starts_with("20") && ts.ends_with('Z') && &ts[10..11] == "T",
            "{ts}"
        );
    }
}
