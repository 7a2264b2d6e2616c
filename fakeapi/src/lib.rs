//! A fake Kubernetes API server for k8slb's integration tests.
//!
//! [`FakeApi::start`] serves real HTTP/1.1 on `127.0.0.1` (an ephemeral port) and writes an
//! admin kubeconfig for it (plain `http://` URL, a bearer token of `system:admin` in
//! `system:masters`, namespace `default`), so the real `kube` client talks to it exactly as
//! it talks to a cluster:
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let api = k8slb_fakeapi::FakeApi::start().await;
//! // What users apply: Namespace, ServiceAccounts, RBAC, ...
//! api.load_manifests("manifests/k8slb-haproxy.yml")?;
//! // The binary under test runs as its ServiceAccount, with that RBAC.
//! let path = api.kubeconfig_for_service_account("k8slb-system", "watcher");
//! let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
//! let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
//! let client = kube::Client::try_from(config)?;
//! # Ok(()) }
//! ```
//!
//! # Who may do what
//!
//! Like kube-apiserver with `--authorization-mode=RBAC` ([`Authorization::Rbac`], the
//! default): a bearer token names the user (the admin kubeconfig; one per ServiceAccount
//! from [`FakeApi::kubeconfig_for_service_account`], refused with 401 while the
//! ServiceAccount object does not exist; [`FakeApi::kubeconfig_for_user`]); no token is
//! `system:anonymous`; an unknown token is 401 Unauthorized. `system:masters` may do
//! anything; everyone else gets what the Role, ClusterRole, RoleBinding and
//! ClusterRoleBinding objects in the fake grant, evaluated as the real RBAC authorizer does
//! (binding scopes, `resourceNames`, subresources, `*`), for the verb the real server
//! derives (get/list/watch, create, update, patch, delete, deletecollection; a server-side
//! apply that creates its object is authorized as `patch` and then as `create`). The
//! bootstrap policy is built in only for discovery (authenticated users) and
//! `/healthz`, `/livez`, `/readyz`, `/version` (everyone). A refusal is the real 403
//! Status: reason Forbidden, details `{name, group, kind: <resource>}`, and the message
//! `configmaps "x" is forbidden: User "..." cannot create resource "configmaps" in API
//! group "" in the namespace "ns"`. [`FakeApi::requests`] records the user, the verb and
//! the error message of every request.
//!
//! NamespaceLifecycle: a new fake has the namespaces `default`, `kube-system`,
//! `kube-public` and `kube-node-lease`; a create (POST, or an apply that creates) in a
//! namespace that does not exist is 404 `namespaces "x" not found`, in one being deleted
//! 403; `default`, `kube-system` and `kube-public` cannot be deleted.
//! [`FakeApi::put_object`] refuses (panics) to store an object in a missing namespace.
//!
//! Tests seed and inspect objects directly ([`FakeApi::put_object`], [`FakeApi::get_object`],
//! [`FakeApi::list`]), assert on the calls made ([`FakeApi::requests`]), and inject faults
//! ([`FakeApi::faults`]: drop watches, fail the next requests with 500, add latency, compact
//! the watch history, go away and come back on the same port).
//!
//! # What it serves
//!
//! core/v1 Services, Nodes, Pods, ConfigMaps, Secrets, Events, Endpoints, Namespaces;
//! discovery.k8s.io/v1 EndpointSlices; events.k8s.io/v1 Events; coordination.k8s.io/v1 Leases;
//! networking.k8s.io/v1 Ingresses and IngressClasses; the Gateway API kinds at every version
//! the installed CRD files serve, with the status subresource they declare
//! ([`FakeApi::install_gateway_api_crds`]: the upstream v1.6.1 files, standard channel:
//! GatewayClass, Gateway, HTTPRoute v1 and v1beta1, GRPCRoute, ListenerSet,
//! BackendTLSPolicy, TLSRoute, TCPRoute, UDPRoute v1, ReferenceGrant v1 and v1beta1; the
//! experimental channel adds the alpha versions and the `gateway.networking.x-k8s.io`
//! kinds; [`FakeApi::install_crds`] for any directory); core/v1 ServiceAccounts; apps/v1
//! Deployments and DaemonSets (stored, not run); rbac.authorization.k8s.io/v1 Roles,
//! RoleBindings, ClusterRoles and ClusterRoleBindings. Services, Nodes, Pods, Namespaces,
//! Ingresses, Deployments and DaemonSets have a `/status` subresource. Adding a kind is one
//! row in `resources.rs`.
//!
//! Verbs: get, list (label and field selectors, `limit`/`continue`), watch (`watch=true|1`,
//! `resourceVersion`, `allowWatchBookmarks`, `timeoutSeconds`, `sendInitialEvents`), create (`generateName`),
//! update (optimistic concurrency on `metadata.resourceVersion`), patch (merge, strategic
//! merge, JSON patch, server-side apply), delete (preconditions, finalizers),
//! deletecollection, `dryRun=All`. Discovery: `/api`, `/apis`, `/api/v1`,
//! `/apis/<group>[/<version>]`, `/version`, `/healthz`.
//!
//! Errors are real `Status` objects with the real reasons and codes: Unauthorized 401,
//! Forbidden 403, NotFound 404,
//! AlreadyExists 409, Conflict 409, Invalid 422, BadRequest 400, Expired 410,
//! InternalError 500, MethodNotAllowed 405, UnsupportedMediaType 415.
//!
//! # Where it differs from a real kube-apiserver
//!
//! - **Authorization is RBAC only**: no Node authorizer, no webhook, no aggregated
//!   ClusterRoles (`aggregationRule` is ignored), no escalation check on RBAC writes (only
//!   the admin writes RBAC in tests), no impersonation. Tokens are opaque strings handed out
//!   by the fake, not JWTs; no client certificates.
//! - **Admission is NamespaceLifecycle only.** Deleting a Namespace removes it at once and
//!   deletes nothing in it (no Terminating phase of its own; a Namespace marked
//!   Terminating by a test refuses creates).
//! - **Lists are always "most recent".** `resourceVersion`/`resourceVersionMatch` on a list
//!   are ignored. Pages after the first (`continue`) are read from the current state, not from
//!   the snapshot of the first page, although they report the first page's resourceVersion;
//!   a continue token older than the watch history gives 410 Expired, as a compacted one does.
//! - **Watch.** Without a resourceVersion (or with "0") a watch starts with synthetic ADDED
//!   events for every matching object; with `sendInitialEvents=true` these are followed by
//!   the `k8s.io/initial-events-end` bookmark (streaming lists; `resourceVersionMatch` is
//!   not checked). With a resourceVersion, the watch replays the bounded history
//!   ([`Options::history_limit`] changes, across all kinds) after it, or sends one ERROR
//!   event with a 410 Expired Status ("too old resource version") and ends, as the real
//!   server does. Bookmarks come every [`Options::bookmark_interval`] (default 1 s) instead
//!   of about once a minute. Watches without `timeoutSeconds` end after 30 minutes.
//! - **Field selectors** accept any dotted path into the object (`spec.nodeName`,
//!   `involvedObject.name`, …) with `=`, `==`, `!=`; the real server allows only a few per
//!   kind and rejects the rest.
//! - **Strategic merge patch is a JSON merge patch**: lists are replaced, never merged by
//!   their merge key, and `$patch` directives are not understood.
//! - **Server-side apply is simplified.** The body may be JSON or YAML and must carry
//!   `apiVersion`, `kind` and `metadata.name`; `fieldManager` is required (400 otherwise).
//!   Field ownership is tracked per manager as the set of leaf fields the manager applied,
//!   with lists owned atomically (no `k:`/`v:` keys), recorded in `metadata.managedFields`
//!   (operation `Apply`, `fieldsV1`). Applying merges the configuration into the live object
//!   (JSON merge semantics) and removes fields this manager applied before but omits now,
//!   unless another applier also owns them. A conflict (409, reason Conflict) happens only
//!   between *appliers*: when another Apply manager owns a field this configuration sets to a
//!   different value; `force=true` takes the field over. Non-apply writes (PUT, other
//!   patches) are not recorded in `managedFields` and never cause conflicts.
//! - **Status subresource**: for kinds that have one, writes to the main resource keep the
//!   old `status`, and writes to `/status` change only `status`. Create resets `status` for
//!   Services, Pods and Ingresses (as the real strategies do), not for Nodes and Namespaces.
//! - **Generation** is 1 at create and is bumped whenever `spec` changes.
//! - **Defaults and validation**: only Services are defaulted (`type: ClusterIP`,
//!   `sessionAffinity`, a `clusterIP` from 10.96.0.0/16, `nodePort`s from 30000 for NodePort
//!   and LoadBalancer, `externalTrafficPolicy: Cluster`, port `protocol` and `targetPort`).
//!   Validation (422 Invalid): `metadata.name` (DNS-1035 labels for Services, RFC 1123
//!   labels for Namespaces, path segments for RBAC objects, RFC 1123 subdomains for
//!   everything else); a ConfigMap's `data` plus `binaryData` at most 1 MiB (1048576
//!   bytes); a core/v1 Event is created in its `involvedObject`'s namespace (`default` for
//!   cluster-scoped objects). CRD-defined kinds are pruned, defaulted and validated against
//!   their CRD's `openAPIV3Schema` as kube-apiserver does for a structural schema (every
//!   keyword the Gateway API's schemas use; the one CEL rule under `status` transcribed,
//!   the spec's CEL rules not evaluated: see `schema.rs`), with the real 422 shape.
//!   Other object bodies are stored as sent, unknown fields included.
//! - **Versions of a CRD** are views of the same objects that differ only by `apiVersion`
//!   (the Gateway API's conversion is `None`).
//! - **Both Event APIs** (core/v1 and events.k8s.io/v1) are separate stores here; in a real
//!   cluster they are two views of the same objects.
//! - PUT never creates: an update of a missing object is 404 NotFound.
//! - Deletion ignores `gracePeriodSeconds` and `propagationPolicy`; objects with finalizers
//!   get a `deletionTimestamp` and go away when an update empties `finalizers`.
//! - Only JSON is served (no protobuf, no CBOR, no Table output, no aggregated discovery).

mod authz;
mod cel;
mod crd;
mod error;
mod patch;
mod query;
mod resources;
mod schema;
mod selector;
mod server;
mod store;

pub use crate::crd::{gateway_api_crd_dir, CrdError};

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{oneshot, watch};

use crate::authz::{Identity, User};
use crate::server::{lock, parse_api_path, FailRule, FaultState, Running, Shared, Target};
use crate::store::Store;

/// How requests are authorized (kube-apiserver's `--authorization-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Authorization {
    /// RBAC from the Role, ClusterRole, RoleBinding and ClusterRoleBinding objects in the
    /// fake (e.g. loaded with [`FakeApi::load_manifests`]); `system:masters` (the admin
    /// kubeconfig) may do anything. The default.
    #[default]
    Rbac,
    /// Every request is allowed, anonymous ones included (`--authorization-mode=AlwaysAllow`).
    AlwaysAllow,
}

/// Knobs for [`FakeApi::start_with`].
#[derive(Debug, Clone)]
pub struct Options {
    /// How many changes (across all kinds) are kept for watch resumption. Watches from an
    /// older resourceVersion get 410 Expired. Default 1000.
    pub history_limit: usize,
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK. Default 1 s.
    pub bookmark_interval: Duration,
    /// Default [`Authorization::Rbac`].
    pub authorization: Authorization,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            history_limit: 1000,
            bookmark_interval: Duration::from_secs(1),
            authorization: Authorization::Rbac,
        }
    }
}

/// Why [`FakeApi::load_manifests`] failed.
#[derive(Debug)]
pub enum LoadError {
    Read(PathBuf, io::Error),
    Parse(PathBuf, String),
    /// Document `index` (0-based) could not be stored: not a served kind, no name, or its
    /// namespace does not exist (yet).
    Store {
        path: PathBuf,
        index: usize,
        why: String,
    },
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Read(p, e) => write!(f, "reading {}: {e}", p.display()),
            LoadError::Parse(p, e) => write!(f, "parsing {}: {e}", p.display()),
            LoadError::Store { path, index, why } => {
                write!(f, "{} document {index}: {why}", path.display())
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// One request the fake answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    /// The URL path, e.g. `/api/v1/namespaces/default/services`.
    pub path: String,
    /// The raw (still percent-encoded) query string, without `?`.
    pub query: String,
    /// The HTTP status sent (200 for a watch that started, whatever happened later).
    pub status: u16,
    /// The authenticated user (`system:anonymous` without a token, empty for a token
    /// that was refused with 401).
    pub user: String,
    /// The verb the authorizer saw: get, list, watch, create, update, patch, delete,
    /// deletecollection (or the lower-case method for non-resource paths). An apply that
    /// created its object was also authorized as `create`.
    pub verb: String,
    /// The `Status` message of an error answer.
    pub message: Option<String>,
}

impl RequestRecord {
    /// A decoded query parameter.
    pub fn param(&self, name: &str) -> Option<String> {
        query::parse_query(&self.query).remove(name)
    }

    /// Whether this was a watch request.
    pub fn is_watch(&self) -> bool {
        self.verb == "watch"
    }
}

/// A running fake API server. Dropping it stops the server and deletes the kubeconfig.
pub struct FakeApi {
    shared: Arc<Shared>,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

fn spawn_server(shared: &Arc<Shared>, listener: TcpListener) {
    let (stop, stop_rx) = oneshot::channel();
    let task = tokio::spawn(server::serve(listener, shared.clone(), stop_rx));
    *lock(&shared.running) = Some(Running { stop, task });
}

impl FakeApi {
    /// Starts a server with default [`Options`].
    ///
    /// # Panics
    /// If no port can be bound or the kubeconfig cannot be written; use
    /// [`FakeApi::start_with`] to handle that.
    pub async fn start() -> FakeApi {
        Self::start_with(Options::default())
            .await
            .expect("starting the fake API server")
    }

    /// Starts a server on `127.0.0.1:<ephemeral>` and writes its kubeconfig.
    pub async fn start_with(options: Options) -> io::Result<FakeApi> {
        let listener = bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await?;
        let addr = listener.local_addr()?;
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        let admin_token = new_token("admin");
        std::fs::write(
            &kubeconfig,
            kubeconfig_yaml(&format!("http://{addr}"), &admin_token, "default"),
        )?;
        let tokens = [(admin_token, Identity::User(User::admin()))]
            .into_iter()
            .collect();
        let (drop_watches, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            addr,
            store: Mutex::new(Store::new(options.history_limit)),
            log: Mutex::new(Vec::new()),
            faults: Mutex::new(FaultState::default()),
            drop_watches,
            bookmark_interval: options.bookmark_interval,
            running: Mutex::new(None),
            authorization: options.authorization,
            tokens: Mutex::new(tokens),
        });
        spawn_server(&shared, listener);
        Ok(FakeApi {
            shared,
            kubeconfig,
            dir,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The admin kubeconfig: one context (`fakeapi`, namespace `default`) pointing here,
    /// with the token of `system:admin` in the group `system:masters` (allowed everything,
    /// as a cluster's admin credentials). For a test's own seeding and inspection; the
    /// binaries under test get [`FakeApi::kubeconfig_for_service_account`].
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kubeconfig (context namespace `namespace`) with a token of the ServiceAccount
    /// `namespace/name`: requests are made as `system:serviceaccount:<namespace>:<name>`
    /// (groups `system:serviceaccounts`, `system:serviceaccounts:<namespace>`,
    /// `system:authenticated`) and get what RBAC grants it. Like a bound token, it is
    /// refused (401) while the ServiceAccount object does not exist. The same account
    /// always gets the same file and token.
    pub fn kubeconfig_for_service_account(&self, namespace: &str, name: &str) -> PathBuf {
        let identity = Identity::ServiceAccount {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        self.kubeconfig_for(
            &format!("kubeconfig-sa-{namespace}-{name}"),
            identity,
            namespace,
        )
    }

    /// A kubeconfig (namespace `default`) for the user `name` in `groups` (and
    /// `system:authenticated`).
    pub fn kubeconfig_for_user(&self, name: &str, groups: &[&str]) -> PathBuf {
        let identity = Identity::User(User::named(name, groups));
        let file: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        self.kubeconfig_for(&format!("kubeconfig-user-{file}"), identity, "default")
    }

    fn kubeconfig_for(&self, file: &str, identity: Identity, namespace: &str) -> PathBuf {
        let path = self.dir.path().join(file);
        let mut tokens = lock(&self.shared.tokens);
        let existing = tokens
            .iter()
            .find(|(_, i)| **i == identity)
            .map(|(t, _)| t.clone());
        let token = existing.unwrap_or_else(|| {
            let t = new_token("sa");
            tokens.insert(t.clone(), identity);
            t
        });
        std::fs::write(&path, kubeconfig_yaml(&self.url(), &token, namespace))
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// Stores every object of a multi-document YAML file (such as
    /// `manifests/k8slb-haproxy.yml`) as [`FakeApi::put_object`] does, in file order, as
    /// an admin's `kubectl apply -f` would create them. Every kind in the file must be
    /// served (Namespaces, ServiceAccounts, ConfigMaps, RBAC, Deployments, DaemonSets,
    /// ...). Returns the stored objects.
    pub fn load_manifests(&self, path: impl AsRef<Path>) -> Result<Vec<Value>, LoadError> {
        use serde::Deserialize;
        let path = path.as_ref().to_path_buf();
        let text = std::fs::read_to_string(&path).map_err(|e| LoadError::Read(path.clone(), e))?;
        let mut docs = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = Value::deserialize(doc)
                .map_err(|e| LoadError::Parse(path.clone(), e.to_string()))?;
            if !v.is_null() {
                docs.push(v);
            }
        }
        let mut stored = Vec::new();
        for (index, doc) in docs.into_iter().enumerate() {
            let obj = lock(&self.shared.store)
                .put(doc)
                .map_err(|why| LoadError::Store {
                    path: path.clone(),
                    index,
                    why,
                })?;
            stored.push(obj);
        }
        Ok(stored)
    }

    /// Creates the Namespace `name` (Active) if it does not exist yet. A new fake has
    /// `default`, `kube-system`, `kube-public` and `kube-node-lease`.
    pub fn create_namespace(&self, name: &str) -> Value {
        if let Some(ns) = self.get_object(&format!("/api/v1/namespaces/{name}")) {
            return ns;
        }
        self.put_object(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }))
    }

    /// Stores an object as given (status included, no validation, no defaults; only an
    /// installed CRD's kind is pruned and defaulted, as a real server reads it back), creating
    /// or replacing it, and notifies watches. `apiVersion`, `kind` and `metadata.name` are
    /// required; a namespaced object without a namespace goes to `default`. Returns the
    /// stored object (with `resourceVersion`, `uid`, `creationTimestamp`). This is the
    /// test's back door: no authorization, no admission.
    ///
    /// # Panics
    /// If the kind is not served, the name is missing, or the object's namespace does not
    /// exist (nothing can live in a missing namespace on a real cluster; create it first
    /// with [`FakeApi::create_namespace`]).
    pub fn put_object(&self, object: Value) -> Value {
        lock(&self.shared.store)
            .put(object)
            .unwrap_or_else(|e| panic!("FakeApi::put_object: {e}"))
    }

    /// Installs the CustomResourceDefinitions of every `*.yaml` file in `dir`, replacing
    /// the ones installed before: each version a file marks `served` is served (discovery
    /// included) with its status subresource, and writes are pruned, defaulted and
    /// validated against its `openAPIV3Schema` (see `schema.rs`). Objects are kept across
    /// installs (a real server deletes them with their CRD; no test relies on either).
    pub fn install_crds(&self, dir: impl AsRef<Path>) -> Result<(), CrdError> {
        let crds = crd::Crds::load_dir(dir.as_ref())?;
        lock(&self.shared.store).install_crds(crds);
        Ok(())
    }

    /// Installs (or, with `false`, removes) the Gateway API v1.6.1 CRDs of the standard
    /// channel, read from [`gateway_api_crd_dir`]`("standard")`. A new fake has none, as a
    /// new cluster has none: their paths are 404 and discovery does not list
    /// `gateway.networking.k8s.io`.
    ///
    /// # Panics
    /// When the CRD files are not there (the message says where they were looked for and
    /// how to point at them: a test that needs the real schemas never passes without
    /// them), or cannot be installed.
    pub fn install_gateway_api_crds(&self, installed: bool) {
        if installed {
            self.install_channel("standard");
        } else {
            lock(&self.shared.store).crds = Arc::new(crd::Crds::default());
        }
    }

    /// Installs the Gateway API v1.6.1 CRDs of the experimental channel (the standard
    /// kinds and versions, the alpha versions of TLSRoute, TCPRoute, UDPRoute and
    /// BackendTLSPolicy, and the `gateway.networking.x-k8s.io` kinds).
    ///
    /// # Panics
    /// As [`FakeApi::install_gateway_api_crds`].
    pub fn install_gateway_api_experimental_crds(&self) {
        self.install_channel("experimental");
    }

    fn install_channel(&self, channel: &str) {
        let dir = gateway_api_crd_dir(channel).unwrap_or_else(|why| panic!("{why}"));
        self.install_crds(&dir)
            .unwrap_or_else(|e| panic!("installing the Gateway API CRDs: {e}"));
    }

    /// The object at an API path such as `/api/v1/namespaces/default/services/web` or
    /// `/apis/coordination.k8s.io/v1/namespaces/k8slb-system/leases/k8slb`.
    pub fn get_object(&self, api_path: &str) -> Option<Value> {
        match parse_api_path(api_path)? {
            Target::Object {
                res,
                namespace,
                name,
                ..
            } => lock(&self.shared.store).get(res, &namespace, &name).ok(),
            Target::Collection { .. } => None,
        }
    }

    /// Removes the object at an API path without preconditions or finalizers (watches see
    /// DELETED). Returns what was removed.
    pub fn delete_object(&self, api_path: &str) -> Option<Value> {
        match parse_api_path(api_path)? {
            Target::Object {
                res,
                namespace,
                name,
                ..
            } => lock(&self.shared.store).remove(res, &namespace, &name),
            Target::Collection { .. } => None,
        }
    }

    /// Every object of a kind, in (namespace, name) order. The kind may be named as
    /// `Service`, `services`, `svc`, or group-qualified (`events.events.k8s.io`,
    /// `Event.events.k8s.io`); unqualified names prefer core/v1.
    ///
    /// # Panics
    /// If the kind is not served.
    pub fn list(&self, kind: &str) -> Vec<Value> {
        let res = resources::find_loose(kind)
            .unwrap_or_else(|| panic!("FakeApi::list: the fake API does not serve {kind:?}"));
        lock(&self.shared.store).objects(res)
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).resource_version()
    }

    /// Every request answered so far, oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).clone()
    }

    /// The requests refused by authentication or authorization (401, 403), as
    /// "user METHOD path -> status: message": what a test under the shipped RBAC expects
    /// to stay empty, and prints when it is not.
    pub fn refused_requests(&self) -> Vec<String> {
        lock(&self.shared.log)
            .iter()
            .filter(|r| r.status == 401 || r.status == 403)
            .map(|r| {
                format!(
                    "{} {} {} -> {}: {}",
                    r.user,
                    r.method,
                    r.path,
                    r.status,
                    r.message.as_deref().unwrap_or_default()
                )
            })
            .collect()
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
    }

    /// The fault-injection handle (cheap to clone, usable from other tasks).
    pub fn faults(&self) -> Faults {
        Faults {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        if let Some(running) = lock(&self.shared.running).take() {
            let _ = running.stop.send(());
            running.task.abort();
        }
    }
}

impl std::fmt::Debug for FakeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApi")
            .field("addr", &self.shared.addr)
            .field("kubeconfig", &self.kubeconfig)
            .finish()
    }
}

/// Fault injection for a [`FakeApi`].
#[derive(Clone)]
pub struct Faults {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("addr", &self.shared.addr)
            .finish()
    }
}

impl Faults {
    /// Ends every open watch stream now (cleanly, as when the API server's watch times
    /// out); clients re-watch from their last resourceVersion.
    pub fn drop_watches(&self) {
        self.shared.drop_watches.send_modify(|n| *n += 1);
    }

    /// The next `n` requests (any path) get 500 InternalError.
    pub fn fail_next(&self, n: usize) {
        self.push_rule(n, None);
    }

    /// The next `n` requests whose path contains `path_contains` get 500 InternalError.
    pub fn fail_next_matching(&self, n: usize, path_contains: &str) {
        self.push_rule(n, Some(path_contains.to_string()));
    }

    fn push_rule(&self, n: usize, path_contains: Option<String>) {
        if n > 0 {
            lock(&self.shared.faults).fail.push(FailRule {
                remaining: n,
                path_contains,
            });
        }
    }

    /// How many injected failures are still pending.
    pub fn pending_failures(&self) -> usize {
        lock(&self.shared.faults)
            .fail
            .iter()
            .map(|r| r.remaining)
            .sum()
    }

    /// Delays every response by `latency` (zero turns it off).
    pub fn set_latency(&self, latency: Duration) {
        lock(&self.shared.faults).latency = latency;
    }

    /// Forgets the watch history, like an etcd compaction: a watch (or continue token) from
    /// any resourceVersion before now gets 410 Expired.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// Stops listening and closes every connection (open watches included). The objects
    /// are kept. Returns once the port is closed.
    pub async fn go_away(&self) {
        let running = lock(&self.shared.running).take();
        if let Some(running) = running {
            let _ = running.stop.send(());
            let _ = running.task.await;
        }
    }

    /// Listens again on the same address after [`Faults::go_away`]. Does nothing if the
    /// server is already up.
    pub async fn come_back(&self) -> io::Result<()> {
        if lock(&self.shared.running).is_some() {
            return Ok(());
        }
        let mut attempt = 0;
        let listener = loop {
            match bind(self.shared.addr).await {
                Ok(l) => break l,
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && attempt < 50 => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        };
        spawn_server(&self.shared, listener);
        Ok(())
    }

    /// Whether the server is listening (false between `go_away` and `come_back`).
    pub fn is_up(&self) -> bool {
        lock(&self.shared.running).is_some()
    }
}

/// A token nobody can guess across fakes (the time and a process-wide counter, mixed).
fn new_token(kind: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let mut x = nanos ^ n.rotate_left(32) ^ u64::from(std::process::id()).rotate_left(16);
    let mut out = format!("fakeapi-{kind}-");
    for _ in 0..2 {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.push_str(&format!("{:016x}", z ^ (z >> 31)));
    }
    out
}

fn kubeconfig_yaml(server: &str, token: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fakeapi
  cluster:
    server: {server}
users:
- name: fakeapi
  user:
    token: {token}
contexts:
- name: fakeapi
  context:
    cluster: fakeapi
    user: fakeapi
    namespace: {namespace}
current-context: fakeapi
preferences: {{}}
"
    )
}
