//! The HTTP side: connection handling, routing, discovery, watch streams, faults and the
//! request log. All object semantics live in `store`.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, Interval};

use crate::authz::{self, Attributes, Identity, User};
use crate::crd::Crds;
use crate::error::ApiError;
use crate::query::{self, parse_query};
use crate::resources::{self, RESOURCES};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Filter, PatchBody, PatchType, Store, Subresource, WatchItem, WriteOptions};
use crate::{Authorization, RequestRecord};

/// Largest request body accepted (the real limit is about 3 MiB for objects).
const MAX_BODY: usize = 16 << 20;
/// Watches without `timeoutSeconds` end after this long (the real server picks 30–60 min).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
pub(crate) struct FailRule {
    pub remaining: usize,
    pub path_contains: Option<String>,
}

#[derive(Debug, Default)]
pub(crate) struct FaultState {
    pub fail: Vec<FailRule>,
    pub latency: Duration,
}

impl FaultState {
    /// Consumes one injected failure that applies to `path`, if any.
    fn take(&mut self, path: &str) -> bool {
        let hit = self.fail.iter_mut().find(|r| {
            r.remaining > 0 && r.path_contains.as_deref().is_none_or(|p| path.contains(p))
        });
        let Some(rule) = hit else { return false };
        rule.remaining -= 1;
        self.fail.retain(|r| r.remaining > 0);
        true
    }
}

/// A listening server: dropping `stop` ends the accept loop and closes every connection.
pub(crate) struct Running {
    pub stop: oneshot::Sender<()>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Everything the server and the handles share.
pub(crate) struct Shared {
    pub addr: SocketAddr,
    pub store: Mutex<Store>,
    pub log: Mutex<Vec<RequestRecord>>,
    pub faults: Mutex<FaultState>,
    pub drop_watches: watch::Sender<u64>,
    pub bookmark_interval: Duration,
    pub running: Mutex<Option<Running>>,
    pub authorization: Authorization,
    /// Bearer token -> who it stands for.
    pub tokens: Mutex<HashMap<String, Identity>>,
}

/// Who is asking, and what for.
pub(crate) struct Caller {
    pub user: User,
    pub attrs: Attributes,
}

impl Shared {
    /// The authorizer's decision for `attrs` (always yes with [`Authorization::AlwaysAllow`]).
    fn authorize(&self, store: &Store, user: &User, attrs: &Attributes) -> Result<(), ApiError> {
        if self.authorization == Authorization::AlwaysAllow {
            return Ok(());
        }
        authz::authorize(store, user, attrs)
            .map_err(|denied| authz::forbidden(user, attrs, &denied))
    }

    /// Authentication, then authorization of the request as a whole.
    fn admit(
        &self,
        auth_header: Option<&str>,
        method: &str,
        path: &str,
        params: &HashMap<String, String>,
    ) -> (Caller, Result<(), ApiError>) {
        let attrs = authz::attributes(method, path, params);
        let store = lock(&self.store);
        let user = match authz::authenticate(&store, &lock(&self.tokens), auth_header) {
            None => User::anonymous(),
            Some(Ok(user)) => user,
            Some(Err(e)) => {
                let caller = Caller {
                    user: User {
                        name: String::new(),
                        groups: Vec::new(),
                    },
                    attrs,
                };
                return (caller, Err(e));
            }
        };
        let decision = self.authorize(&store, &user, &attrs);
        (Caller { user, attrs }, decision)
    }
}

/// The message of an error response, kept for the request log.
#[derive(Debug, Clone)]
struct ErrorMessage(String);

/// Accepts connections until `stop` fires (or its sender is dropped), then closes them all.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let shared = shared.clone();
                    conns.spawn(async move {
                        let svc = service_fn(move |req| {
                            let shared = shared.clone();
                            async move { Ok::<_, Infallible>(handle(shared, req).await) }
                        });
                        let conn = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(None)
                            .serve_connection(TokioIo::new(stream), svc);
                        if let Err(error) = conn.await {
                            tracing::debug!(%error, "fakeapi connection ended with an error");
                        }
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "fakeapi accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    conns.shutdown().await;
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let (latency, fail) = {
        let mut faults = lock(&shared.faults);
        (faults.latency, faults.take(&path))
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let auth_header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (caller, admitted) = shared.admit(
        auth_header.as_deref(),
        method.as_str(),
        &path,
        &parse_query(&query),
    );
    let response = if fail {
        error_response(&ApiError::internal("injected fault (fakeapi)"))
    } else {
        match admitted {
            Ok(()) => route(&shared, req, &path, &query, &caller).await,
            Err(e) => error_response(&e),
        }
    };
    let status = response.status().as_u16();
    let message = response
        .extensions()
        .get::<ErrorMessage>()
        .map(|m| m.0.clone());
    tracing::debug!(%method, %path, %query, status, user = %caller.user.name, ?message, "fakeapi request");
    lock(&shared.log).push(RequestRecord {
        method: method.to_string(),
        path,
        query,
        status,
        user: caller.user.name,
        verb: caller.attrs.verb,
        message,
    });
    response
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    let mut body = serde_json::to_vec(v).unwrap_or_default();
    body.push(b'\n');
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap_or_default()
}

fn error_response(e: &ApiError) -> Response<Body> {
    let mut response = json_response(e.code, &e.to_status());
    response
        .extensions_mut()
        .insert(ErrorMessage(e.message.clone()));
    response
}

fn respond(result: Result<Value, ApiError>, ok: u16) -> Response<Body> {
    match result {
        Ok(v) => json_response(ok, &v),
        Err(e) => error_response(&e),
    }
}

/// A boolean query parameter, read as the real server reads it (so the verb the
/// authorizer saw, `watch` or `list`, is what is served).
fn flag(params: &HashMap<String, String>, name: &str) -> bool {
    query::query_bool(params, name)
}

/// Where a resource request points.
#[derive(Debug, PartialEq)]
pub(crate) enum Target {
    Collection {
        res: usize,
        namespace: Option<String>,
    },
    Object {
        res: usize,
        namespace: String,
        name: String,
        sub: Option<String>,
    },
}

impl Target {
    /// The resource (row of `RESOURCES`) it is about.
    pub(crate) fn res(&self) -> usize {
        match self {
            Target::Collection { res, .. } | Target::Object { res, .. } => *res,
        }
    }
}

/// Parses the part of a path after `/api/v1` or `/apis/<group>/<version>`.
pub(crate) fn parse_target(group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    if let ["namespaces", ns, plural, tail @ ..] = rest {
        if let Some(res) =
            resources::find(group, version, plural).filter(|r| RESOURCES[*r].namespaced)
        {
            let namespace = ns.to_string();
            return match tail {
                [] => Some(Target::Collection {
                    res,
                    namespace: Some(namespace),
                }),
                [name] => Some(Target::Object {
                    res,
                    namespace,
                    name: name.to_string(),
                    sub: None,
                }),
                [name, sub] => Some(Target::Object {
                    res,
                    namespace,
                    name: name.to_string(),
                    sub: Some(sub.to_string()),
                }),
                _ => None,
            };
        }
    }
    let (plural, tail) = rest.split_first()?;
    let res = resources::find(group, version, plural)?;
    let cluster_object = |name: &str, sub: Option<&str>| {
        (!RESOURCES[res].namespaced).then(|| Target::Object {
            res,
            namespace: String::new(),
            name: name.to_string(),
            sub: sub.map(str::to_string),
        })
    };
    match tail {
        [] => Some(Target::Collection {
            res,
            namespace: None,
        }),
        [name] => cluster_object(name, None),
        [name, sub] => cluster_object(name, Some(sub)),
        _ => None,
    }
}

/// Turns an API path like `/api/v1/namespaces/default/services/web` into a target.
pub(crate) fn parse_api_path(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["api", "v1", rest @ ..] => parse_target("", "v1", rest),
        ["apis", group, version, rest @ ..] => parse_target(group, version, rest),
        _ => None,
    }
}

async fn route(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    path: &str,
    query: &str,
    caller: &Caller,
) -> Response<Body> {
    let params = parse_query(query);
    let crds = lock(&shared.store).crds.clone();
    let crds = crds.as_ref();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let get = req.method() == Method::GET;
    match segs.as_slice() {
        ["version"] if get => json_response(200, &version_info()),
        ["healthz" | "livez" | "readyz"] if get => Response::new(Body::from("ok")),
        ["api"] if get => json_response(
            200,
            &json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.addr.to_string()}],
            }),
        ),
        ["apis"] if get => json_response(200, &group_list(crds)),
        ["apis", group] if get => match group_info(group, crds) {
            Some(v) => json_response(200, &v),
            None => error_response(&ApiError::path_not_found(path)),
        },
        ["api", "v1"] if get => json_response(200, &resource_list("", "v1", crds)),
        ["apis", group, version] if get && crds.groups().contains(&(*group, *version)) => {
            json_response(200, &resource_list(group, version, crds))
        }
        _ => match parse_api_path(path).filter(|t| crds.serves(&RESOURCES[t.res()])) {
            Some(target) => resource_request(shared, req, target, &params, caller).await,
            None => error_response(&ApiError::path_not_found(path)),
        },
    }
}

fn patch_type(content_type: &str) -> Option<PatchType> {
    let media = content_type.split(';').next().unwrap_or("").trim();
    match media {
        "application/merge-patch+json" => Some(PatchType::Merge),
        "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
        "application/json-patch+json" => Some(PatchType::Json),
        "application/apply-patch+yaml" => Some(PatchType::Apply),
        _ => None,
    }
}

fn filter_from(
    res: usize,
    namespace: Option<String>,
    params: &HashMap<String, String>,
) -> Result<Filter, ApiError> {
    Ok(Filter {
        res,
        namespace,
        labels: LabelSelector::parse(params.get("labelSelector").map_or("", String::as_str))?,
        fields: FieldSelector::parse(params.get("fieldSelector").map_or("", String::as_str))?
            .supported_by(crate::resources::RESOURCES[res].field_labels)?,
    })
}

async fn resource_request(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    target: Target,
    params: &HashMap<String, String>,
    caller: &Caller,
) -> Response<Body> {
    let method = req.method().clone();
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = match axum::body::to_bytes(Body::new(req.into_body()), MAX_BODY).await {
        Ok(b) => b,
        Err(e) => {
            return error_response(&ApiError::bad_request(format!(
                "reading the request body: {e}"
            )))
        }
    };
    let opts = WriteOptions {
        field_manager: params.get("fieldManager").cloned(),
        force: flag(params, "force"),
        dry_run: params.get("dryRun").is_some_and(|v| v == "All"),
    };
    let parse_body = || -> Result<Value, ApiError> {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("error decoding the request body: {e}")))
    };
    match target {
        Target::Collection { res, namespace } => {
            let filter = match filter_from(res, namespace.clone(), params) {
                Ok(f) => f,
                Err(e) => return error_response(&e),
            };
            match method {
                Method::GET if flag(params, "watch") => watch_response(shared, filter, params),
                Method::GET => {
                    let limit = params.get("limit").and_then(|l| l.parse().ok());
                    let result = lock(&shared.store).list(
                        &filter,
                        limit,
                        params.get("continue").map(String::as_str),
                    );
                    respond(result, 200)
                }
                Method::POST => match namespace {
                    Some(ns) => respond(
                        parse_body()
                            .and_then(|obj| lock(&shared.store).create(res, &ns, obj, &opts)),
                        201,
                    ),
                    None if !RESOURCES[res].namespaced => respond(
                        parse_body()
                            .and_then(|obj| lock(&shared.store).create(res, "", obj, &opts)),
                        201,
                    ),
                    None => error_response(&ApiError::method_not_allowed()),
                },
                Method::DELETE => {
                    respond(lock(&shared.store).delete_collection(&filter, &opts), 200)
                }
                _ => error_response(&ApiError::method_not_allowed()),
            }
        }
        Target::Object {
            res,
            namespace,
            name,
            sub,
        } => {
            let sub = match sub.as_deref() {
                None => Subresource::Main,
                Some("status") if RESOURCES[res].status_subresource => Subresource::Status,
                Some(other) => {
                    return error_response(&ApiError::path_not_found(&format!(
                        "{}/{name}/{other}",
                        RESOURCES[res].plural
                    )))
                }
            };
            match method {
                Method::GET => respond(lock(&shared.store).get(res, &namespace, &name), 200),
                Method::PUT => respond(
                    parse_body().and_then(|obj| {
                        lock(&shared.store).update(res, &namespace, &name, obj, sub, &opts)
                    }),
                    200,
                ),
                Method::PATCH => match patch_type(&content_type) {
                    // Custom resources have no strategic merge patch (patch.go: 415 with
                    // the media types a CR accepts).
                    Some(PatchType::StrategicMerge) if RESOURCES[res].crd => error_response(
                        &ApiError::unsupported_media_type_for_custom_resource(&content_type),
                    ),
                    Some(ptype) => {
                        let mut store = lock(&shared.store);
                        // An apply that creates the object answers 201, like the real one.
                        let existed = store.get_ref(res, &namespace, &name).is_some();
                        // ... and is a create too: authorized as `create` as well as `patch`
                        // (patch.go's createValidation). Subresources never create.
                        if ptype == PatchType::Apply && !existed && sub == Subresource::Main {
                            let mut create = caller.attrs.clone();
                            create.verb = "create".into();
                            if let Err(e) = shared.authorize(&store, &caller.user, &create) {
                                return error_response(&e);
                            }
                        }
                        let patch = PatchBody { ptype, body: &body };
                        let result = store.patch(res, &namespace, &name, patch, sub, &opts);
                        respond(result, if existed { 200 } else { 201 })
                    }
                    None => error_response(&ApiError::unsupported_media_type(&content_type)),
                },
                Method::DELETE if sub == Subresource::Main => {
                    let options = if body.is_empty() {
                        None
                    } else {
                        parse_body().ok()
                    };
                    respond(
                        lock(&shared.store).delete(res, &namespace, &name, options.as_ref(), &opts),
                        200,
                    )
                }
                _ => error_response(&ApiError::method_not_allowed()),
            }
        }
    }
}

/// What a watch stream sends next.
enum Pending {
    Item(WatchItem),
    Bookmark(u64),
    /// The bookmark that ends the initial events of a streaming list.
    InitialEventsEnd(u64),
    Error(Value),
}

struct WatchStream {
    shared: Arc<Shared>,
    res: usize,
    pending: VecDeque<Pending>,
    rx: Option<mpsc::UnboundedReceiver<WatchItem>>,
    deadline: Instant,
    bookmarks: Option<Interval>,
    dropped: watch::Receiver<u64>,
    last_rv: u64,
}

enum Wake {
    Item(Option<WatchItem>),
    End,
    Bookmark,
}

async fn tick(interval: &mut Option<Interval>) {
    match interval {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

impl WatchStream {
    async fn next_line(mut self) -> Option<(Result<Bytes, Infallible>, Self)> {
        loop {
            if let Some(next) = self.pending.pop_front() {
                let event = match next {
                    Pending::Item(item) => {
                        self.last_rv = self.last_rv.max(item.rv);
                        item.event
                    }
                    Pending::Bookmark(rv) => {
                        let res = &RESOURCES[self.res];
                        json!({"type": "BOOKMARK", "object": {
                            "kind": res.kind,
                            "apiVersion": res.api_version(),
                            "metadata": {"resourceVersion": rv.max(self.last_rv).to_string()},
                        }})
                    }
                    Pending::InitialEventsEnd(rv) => {
                        let res = &RESOURCES[self.res];
                        json!({"type": "BOOKMARK", "object": {
                            "kind": res.kind,
                            "apiVersion": res.api_version(),
                            "metadata": {
                                "resourceVersion": rv.to_string(),
                                "annotations": {"k8s.io/initial-events-end": "true"},
                            },
                        }})
                    }
                    Pending::Error(status) => json!({"type": "ERROR", "object": status}),
                };
                let mut line = serde_json::to_vec(&event).unwrap_or_default();
                line.push(b'\n');
                return Some((Ok(Bytes::from(line)), self));
            }
            let rx = self.rx.as_mut()?;
            let wake = tokio::select! {
                item = rx.recv() => Wake::Item(item),
                _ = tokio::time::sleep_until(self.deadline) => Wake::End,
                _ = self.dropped.changed() => Wake::End,
                _ = tick(&mut self.bookmarks) => Wake::Bookmark,
            };
            match wake {
                Wake::Item(Some(item)) => self.pending.push_back(Pending::Item(item)),
                Wake::Item(None) | Wake::End => return None,
                Wake::Bookmark => {
                    // Everything up to `rv` is already queued (changes are queued under
                    // the store lock), so after draining the queue the bookmark is exact.
                    let rv = lock(&self.shared.store).resource_version();
                    while let Ok(item) = rx.try_recv() {
                        self.pending.push_back(Pending::Item(item));
                    }
                    self.pending.push_back(Pending::Bookmark(rv));
                }
            }
        }
    }
}

fn watch_response(
    shared: &Arc<Shared>,
    filter: Filter,
    params: &HashMap<String, String>,
) -> Response<Body> {
    let res = filter.res;
    let (tx, rx) = mpsc::unbounded_channel();
    let from = params.get("resourceVersion").map(String::as_str);
    let initial_sync = from.is_none_or(|rv| rv.is_empty() || rv == "0");
    let (opened, current_rv) = {
        let mut store = lock(&shared.store);
        let opened = store.watch(filter, from, tx);
        (opened, store.resource_version())
    };
    let (pending, rx) = match opened {
        Ok(items) => {
            let mut pending: VecDeque<Pending> = items.into_iter().map(Pending::Item).collect();
            // Streaming lists (KEP-3157): the synthetic ADDED events end with a bookmark
            // annotated `k8s.io/initial-events-end` at the resourceVersion they reflect.
            if initial_sync && flag(params, "sendInitialEvents") {
                pending.push_back(Pending::InitialEventsEnd(current_rv));
            }
            (pending, Some(rx))
        }
        // Like the real server: 200, one ERROR event carrying the 410 Status, then EOF.
        Err(e) if e.code == 410 => (VecDeque::from([Pending::Error(e.to_status())]), None),
        Err(e) => return error_response(&e),
    };
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
    let bookmarks = flag(params, "allowWatchBookmarks").then(|| {
        let period = shared.bookmark_interval;
        tokio::time::interval_at(Instant::now() + period, period)
    });
    let stream = WatchStream {
        shared: shared.clone(),
        res,
        pending,
        rx,
        deadline: Instant::now() + timeout,
        bookmarks,
        dropped: shared.drop_watches.subscribe(),
        last_rv: 0,
    };
    let body = futures::stream::unfold(stream, WatchStream::next_line);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(body))
        .unwrap_or_default()
}

fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-k8slb-fakeapi",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// A group with every version it serves, the first listed preferred (as the real
/// discovery lists them).
fn group_json(group: &str, crds: &Crds) -> Value {
    let versions: Vec<Value> = crds
        .groups()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(_, v)| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "preferredVersion": versions[0].clone(), "versions": versions})
}

fn group_list(crds: &Crds) -> Value {
    let mut names: Vec<&str> = Vec::new();
    for (g, _) in crds.groups() {
        if !g.is_empty() && !names.contains(&g) {
            names.push(g);
        }
    }
    let groups: Vec<Value> = names.into_iter().map(|g| group_json(g, crds)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn group_info(group: &str, crds: &Crds) -> Option<Value> {
    if group.is_empty() || !crds.groups().iter().any(|(g, _)| *g == group) {
        return None;
    }
    let mut info = group_json(group, crds);
    info["kind"] = json!("APIGroup");
    info["apiVersion"] = json!("v1");
    Some(info)
}

fn resource_list(group: &str, version: &str, crds: &Crds) -> Value {
    let mut list = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version && crds.serves(r))
    {
        list.push(json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "shortNames": r.short_names,
        }));
        if r.status_subresource {
            list.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let svc = resources::find("", "v1", "services").unwrap();
        let node = resources::find("", "v1", "nodes").unwrap();
        let ns = resources::find("", "v1", "namespaces").unwrap();
        assert_eq!(
            parse_api_path("/api/v1/namespaces/default/services/web/status"),
            Some(Target::Object {
                res: svc,
                namespace: "default".into(),
                name: "web".into(),
                sub: Some("status".into())
            })
        );
        assert_eq!(
            parse_api_path("/api/v1/services"),
            Some(Target::Collection {
                res: svc,
                namespace: None
            })
        );
        assert_eq!(parse_api_path("/api/v1/services/web"), None);
        assert_eq!(
            parse_api_path("/api/v1/nodes/n1"),
            Some(Target::Object {
                res: node,
                namespace: String::new(),
                name: "n1".into(),
                sub: None
            })
        );
        assert_eq!(
            parse_api_path("/api/v1/namespaces/kube-system"),
            Some(Target::Object {
                res: ns,
                namespace: String::new(),
                name: "kube-system".into(),
                sub: None
            })
        );
        let lease = resources::find("coordination.k8s.io", "v1", "leases").unwrap();
        assert_eq!(
            parse_api_path("/apis/coordination.k8s.io/v1/namespaces/k8slb-system/leases"),
            Some(Target::Collection {
                res: lease,
                namespace: Some("k8slb-system".into())
            })
        );
        assert_eq!(parse_api_path("/apis/nope.io/v1/things"), None);
    }
}
