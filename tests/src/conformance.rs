//! The Gateway API conformance runner's machinery (the tests themselves are data, in
//! [`crate::conformance_cases`]; the lab test is `tests/tests/e2e_conformance.rs`).
//!
//! It reads the upstream suite's data files (`K8SLB_CONFORMANCE_DIR`, default
//! `<repo>/../shared/conformance`: `gateway-api/conformance/base/manifests.yaml` and
//! `gateway-api/conformance/tests/<file>.yaml`), applies them to the standalone (files)
//! mode of a [`System`] with the suite's class name replaced by `k8slb` (a GatewayClass of
//! our controller is added), gives every Deployment of the manifests an echo identity
//! (lab-backend `--echo` on `be1`, one port each, answering like the suite's echo
//! server) and every Service selecting it an EndpointSlice to it, then checks each
//! case's expectations: statuses read from the watcher's `--status-out`, requests sent
//! with curl from the client.
//!
//! One case at a time: its manifests are written as one file, its checks polled until
//! they all hold on [`SWEEPS`] sweeps in a row (or [`CASE_TIMEOUT`] passes: FAIL with the
//! last mismatch), then the file is removed and the next case waits until its objects'
//! statuses are gone.

use crate::bins;
use crate::system::System;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const INFRA: &str = "gateway-conformance-infra";
pub const APP: &str = "gateway-conformance-app-backend";
pub const WEB: &str = "gateway-conformance-web-backend";
/// Our controller, as the GatewayClass names it.
pub const CONTROLLER: &str = "k8slb.io/gateway-controller";
/// The class the suite's `{GATEWAY_CLASS_NAME}` becomes.
pub const CLASS: &str = "k8slb";
/// The Gateway API group.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// The address the suite's `PLACEHOLDER_USABLE_ADDRS` becomes (its flag
/// `--usable-network-addresses`): in the runner's pool, above what the suite's Gateways
/// take.
pub const USABLE_ADDRESS: &str = "198.18.0.240";
/// The same for `PLACEHOLDER_UNUSABLE_ADDRS`: outside every pool (TEST-NET-3).
pub const UNUSABLE_ADDRESS: &str = "203.0.113.9";
/// How long a case may take to converge before it FAILs.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(25);
/// The same for a case known to fail (see [`Case::expect_fail`]).
pub const KNOWN_FAIL_TIMEOUT: Duration = Duration::from_secs(6);
/// How many full sweeps in a row must pass (the suite asks for consecutive successes).
pub const SWEEPS: usize = 3;
/// The first port of the echo listeners on `be1`.
const ECHO_PORT: u16 = 20000;

/// Where the upstream data is: `K8SLB_CONFORMANCE_DIR`, else `<repo>/../shared/conformance`.
/// Err (with the fix) when it is not there: the runner never passes without its data.
pub fn data_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("K8SLB_CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => bins::repo_root().join("../shared/conformance"),
    };
    let base = dir.join("gateway-api/conformance/base/manifests.yaml");
    if !base.is_file() {
        bail!(
            "the Gateway API conformance data is not at {} (no {}): put the upstream v1.6.1 \
             data files there or set K8SLB_CONFORMANCE_DIR to their directory",
            dir.display(),
            base.display()
        );
    }
    Ok(dir)
}

/// The documents of a manifest file of the suite, `{GATEWAY_CLASS_NAME}` → `k8slb`.
pub fn read_manifest(path: &Path) -> Result<Vec<Value>> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .replace("{GATEWAY_CLASS_NAME}", CLASS)
        .replace("{GATEWAY_CONTROLLER_NAME}", CONTROLLER)
        .replace("PLACEHOLDER_USABLE_ADDRS", USABLE_ADDRESS)
        .replace("PLACEHOLDER_UNUSABLE_ADDRS", UNUSABLE_ADDRESS);
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).with_context(|| format!("parsing {}", path.display()))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// A namespaced name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Nn {
    pub namespace: String,
    pub name: String,
}

/// `<namespace>/<name>` in the infra namespace unless it says otherwise.
pub fn nn(s: &str) -> Nn {
    match s.split_once('/') {
        Some((ns, name)) => Nn {
            namespace: ns.into(),
            name: name.into(),
        },
        None => Nn {
            namespace: INFRA.into(),
            name: s.into(),
        },
    }
}

impl std::fmt::Display for Nn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Where a redirect must point (None: the suite's default, see [`Req::redirect`]).
#[derive(Debug, Clone, Default)]
pub struct Redirect {
    pub scheme: Option<String>,
    pub host: Option<String>,
    pub port: Option<String>,
    pub path: Option<String>,
}

/// One request and what must come of it (the suite's `ExpectedResponse`).
#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    pub host: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// Acceptable status codes (default 200).
    pub status: Vec<u16>,
    /// The backend (pod name prefix) and namespace that must answer a 200.
    pub backend: Option<String>,
    pub namespace: String,
    /// The request as the backend must see it (default: as sent).
    pub want_path: Option<String>,
    pub want_host: Option<String>,
    pub want_headers: Vec<(String, String)>,
    pub absent_headers: Vec<String>,
    /// Response headers that must be there (and with that value) / must not.
    pub resp_headers: Vec<(String, String)>,
    pub resp_absent: Vec<String>,
    /// `X-Echo-Set-Header`: what the backend sets on its response.
    pub backend_sets: Vec<(String, String)>,
    pub redirect: Option<Redirect>,
    /// Sent as HTTP/2 with prior knowledge (h2c), as the suite's
    /// `H2CPriorKnowledgeProtocol`.
    pub h2c: bool,
    /// The protocol the backend must have seen (the echo's `proto`), when given.
    pub want_proto: Option<String>,
    /// The TLS server name (SNI) the backend must have been asked for (the suite's
    /// `ExpectedRequest.SNI`: the proxy spoke TLS to it), when given.
    pub want_sni: Option<String>,
    /// Any answer but a 200 or a timeout will do (the suite's
    /// `MakeRequestAndExpectFailure`).
    pub fails: bool,
    /// Over TLS, present the client certificate of this Secret (the suite's
    /// `tls-validity-checks-client-certificate`, ...): [`EchoKinds::client_pems`].
    pub client_cert: Option<&'static str>,
    /// The request must get no HTTP answer at all (the suite's
    /// `MakeTLSRequestAndExpectFailureResponse`: the round trip fails).
    pub no_answer: bool,
    /// Over TLS: the server name (SNI) the connection is made for, when it is not the
    /// Host (the suite's `serverName`).
    pub sni: Option<String>,
    /// Over TLS: HTTP/2 negotiated by ALPN, as the suite's `H2Protocol` requires (an
    /// HTTP/1.1 answer fails).
    pub h2: bool,
    /// A 200 or 204 need not be the echo's (the suite's preflight cases: an empty
    /// expected request and namespace): only the status and response headers count.
    pub any_answer: bool,
    /// Response headers that must be there with one of these values (spaces ignored:
    /// the suite's `ValidHeaderValues` with `IgnoreWhitespace`).
    pub resp_one_of: Vec<(String, Vec<String>)>,
    /// Each time it is sent, `&uuid=<new>` is added to the path (the suite's retry
    /// tests: the echo's retry simulation counts the attempts of each uuid apart).
    pub fresh_uuid: bool,
    /// The backend must have been shown the certificate of this Secret (the suite's
    /// `ClientCert`: among the echo's `tls.peerCertificates`; the proxy presented it),
    /// one of [`EchoKinds::client_pems`].
    pub want_client_cert: Option<&'static str>,
}

/// A GET of `path` that must reach `infra-backend-v1` in the infra namespace unless
/// told otherwise.
pub fn get(path: &str) -> Req {
    Req {
        method: "GET".into(),
        host: String::new(),
        path: path.into(),
        headers: vec![],
        status: vec![200],
        backend: None,
        namespace: INFRA.into(),
        want_path: None,
        want_host: None,
        want_headers: vec![],
        absent_headers: vec![],
        resp_headers: vec![],
        resp_absent: vec![],
        backend_sets: vec![],
        redirect: None,
        h2c: false,
        want_proto: None,
        want_sni: None,
        fails: false,
        client_cert: None,
        want_client_cert: None,
        no_answer: false,
        sni: None,
        h2: false,
        any_answer: false,
        resp_one_of: vec![],
        fresh_uuid: false,
    }
}

impl Req {
    /// A new `uuid` query parameter each time it is sent ([`Req::fresh_uuid`]).
    pub fn fresh_uuid(mut self) -> Req {
        self.fresh_uuid = true;
        self
    }

    /// The request as it is sent this time: with a `uuid` never sent before when
    /// [`Req::fresh_uuid`].
    fn this_time(&self) -> std::borrow::Cow<'_, Req> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static SENT: AtomicU64 = AtomicU64::new(0);
        if !self.fresh_uuid {
            return std::borrow::Cow::Borrowed(self);
        }
        let n = SENT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let sep = if self.path.contains('?') { '&' } else { '?' };
        let mut r = self.clone();
        r.path = format!("{}{sep}uuid={}-{nanos}-{n}", self.path, std::process::id());
        std::borrow::Cow::Owned(r)
    }

    /// Answered by `backend` (`<namespace>/<name>`, the infra namespace by default).
    pub fn to(mut self, backend: &str) -> Req {
        let b = nn(backend);
        self.backend = Some(b.name);
        self.namespace = b.namespace;
        self
    }
    /// Over TLS for server name `sni` (the Host stays as given).
    pub fn sni(mut self, sni: &str) -> Req {
        self.sni = Some(sni.into());
        self
    }
    /// Over HTTP/2 negotiated by ALPN (TLS).
    pub fn h2(mut self) -> Req {
        self.h2 = true;
        self
    }
    /// Over h2c with prior knowledge.
    pub fn h2c(mut self) -> Req {
        self.h2c = true;
        self
    }
    /// The backend must see this protocol (`HTTP/2.0`: the proxy spoke h2c to it).
    pub fn want_proto(mut self, p: &str) -> Req {
        self.want_proto = Some(p.into());
        self
    }
    /// Present the client certificate of Secret `name` (TLS only).
    pub fn client_cert(mut self, name: &'static str) -> Req {
        self.client_cert = Some(name);
        self
    }
    /// Must get no HTTP answer (the TLS handshake or the connection fails).
    pub fn no_answer(mut self) -> Req {
        self.no_answer = true;
        self
    }
    /// Must not be answered 200 (nor time out): the suite's failure expectation.
    pub fn fails(mut self) -> Req {
        self.fails = true;
        self
    }
    /// The backend must have been shown the client certificate of Secret `name`.
    pub fn want_client_cert(mut self, name: &'static str) -> Req {
        self.want_client_cert = Some(name);
        self
    }
    /// The backend must have been reached over TLS with this server name.
    pub fn want_sni(mut self, n: &str) -> Req {
        self.want_sni = Some(n.into());
        self
    }
    pub fn host(mut self, h: &str) -> Req {
        self.host = h.into();
        self
    }
    pub fn method(mut self, m: &str) -> Req {
        self.method = m.into();
        self
    }
    pub fn header(mut self, k: &str, v: &str) -> Req {
        self.headers.push((k.into(), v.into()));
        self
    }
    pub fn status(mut self, s: u16) -> Req {
        self.status = vec![s];
        self
    }
    pub fn statuses(mut self, s: &[u16]) -> Req {
        self.status = s.to_vec();
        self
    }
    pub fn want_path(mut self, p: &str) -> Req {
        self.want_path = Some(p.into());
        self
    }
    pub fn want_host(mut self, h: &str) -> Req {
        self.want_host = Some(h.into());
        self
    }
    pub fn want_header(mut self, k: &str, v: &str) -> Req {
        self.want_headers.push((k.into(), v.into()));
        self
    }
    pub fn absent(mut self, k: &str) -> Req {
        self.absent_headers.push(k.into());
        self
    }
    pub fn resp_header(mut self, k: &str, v: &str) -> Req {
        self.resp_headers.push((k.into(), v.into()));
        self
    }
    /// The response header `k` has one of `values` (spaces ignored).
    pub fn resp_one_of(mut self, k: &str, values: &[&str]) -> Req {
        self.resp_one_of
            .push((k.into(), values.iter().map(|v| v.to_string()).collect()));
        self
    }
    /// Answered by the Gateway itself, or by any backend: the answer's body is not
    /// checked (see [`Req::any_answer`]).
    pub fn any_answer(mut self) -> Req {
        self.any_answer = true;
        self
    }
    pub fn resp_absent(mut self, k: &str) -> Req {
        self.resp_absent.push(k.into());
        self
    }
    pub fn backend_sets(mut self, k: &str, v: &str) -> Req {
        self.backend_sets.push((k.into(), v.into()));
        self
    }
    /// A redirect with `status`; what is not given is the suite's default (scheme and
    /// path as requested, any host, the scheme's default port).
    pub fn redirect(mut self, status: u16, r: Redirect) -> Req {
        self.status = vec![status];
        self.redirect = Some(r);
        self
    }
    fn describe(&self) -> String {
        let mut s = format!("{} {}{}", self.method, self.host, self.path);
        if let Some(sni) = &self.sni {
            s.push_str(&format!(" (SNI {sni})"));
        }
        if !self.headers.is_empty() {
            s.push_str(&format!(" {:?}", self.headers));
        }
        s
    }
}

/// gRPC status codes the suite's GRPCRoute tests name.
pub const GRPC_OK: u32 = 0;
pub const GRPC_UNIMPLEMENTED: u32 = 12;

/// One unary call of the suite's `GrpcEcho` service and what must come of it (the
/// suite's gRPC `ExpectedResponse`): `Echo`, `EchoTwo` or `EchoThree`, with an
/// `:authority` (empty: the Gateway's address, as a gRPC client dials it) and metadata;
/// the gRPC status code (an HTTP answer without `grpc-status` counts as gRPC's HTTP
/// mapping gives it: 404 is `Unimplemented`), and for `OK` the method the backend saw
/// and who answered (pod name prefix, namespace).
#[derive(Debug, Clone)]
pub struct GrpcReq {
    pub method: &'static str,
    pub authority: String,
    pub metadata: Vec<(String, String)>,
    pub code: u32,
    pub backend: Option<String>,
    pub namespace: String,
}

/// A call of `method` that must be answered `OK` by `backend` in the infra namespace.
pub fn rpc(method: &'static str, backend: &str) -> GrpcReq {
    GrpcReq {
        method,
        authority: String::new(),
        metadata: vec![],
        code: GRPC_OK,
        backend: Some(backend.into()),
        namespace: INFRA.into(),
    }
}

impl GrpcReq {
    /// No backend answers: the call ends with gRPC status `code`.
    pub fn code(mut self, code: u32) -> GrpcReq {
        self.code = code;
        self.backend = None;
        self
    }
    pub fn authority(mut self, a: &str) -> GrpcReq {
        self.authority = a.into();
        self
    }
    /// Metadata, as the suite's client sends it (gRPC lowercases the keys).
    pub fn md(mut self, k: &str, v: &str) -> GrpcReq {
        self.metadata.push((k.to_ascii_lowercase(), v.into()));
        self
    }
    fn describe(&self) -> String {
        format!("{} {} {:?}", self.method, self.authority, self.metadata)
    }
}

/// What one call got (`lab-client grpc-json`'s line).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrpcAnswer {
    pub grpc: Option<u32>,
    pub http: u16,
    pub method: String,
    pub namespace: String,
    pub pod: String,
}

/// The gRPC status a client reports for an answer with no `grpc-status` (the HTTP to
/// gRPC status mapping of gRPC's `http-grpc-status-mapping.md`).
pub fn grpc_code_of_http(status: u16) -> u32 {
    match status {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => GRPC_UNIMPLEMENTED,
        429 | 502 | 503 | 504 => 14,
        _ => 2,
    }
}

/// The suite's gRPC `compareResponse`, as facts: the status code; for `OK` the fully
/// qualified method the backend saw, the namespace and the pod name prefix.
pub fn compare_grpc(r: &GrpcReq, a: &GrpcAnswer) -> std::result::Result<(), String> {
    let code = a.grpc.unwrap_or_else(|| grpc_code_of_http(a.http));
    if code != r.code {
        return Err(format!(
            "gRPC status {code} (HTTP {}), want {}",
            a.http, r.code
        ));
    }
    if code != GRPC_OK {
        return Ok(());
    }
    let want = crate::grpc::method_path(r.method);
    if a.method != want {
        return Err(format!("the backend saw {}, want {want}", a.method));
    }
    if !r.namespace.is_empty() && a.namespace != r.namespace {
        return Err(format!(
            "answered from namespace {}, want {}",
            a.namespace, r.namespace
        ));
    }
    if let Some(b) = &r.backend {
        if !a.pod.starts_with(b.as_str()) {
            return Err(format!("answered by pod {}, want {b}*", a.pod));
        }
    }
    Ok(())
}

/// The suite's TCP echo check, as facts: the welcome line, `PONG`, `IS_TLS` (`true`
/// with the server name asked for when over TLS passed through, else `false`: plain,
/// or TLS the Gateway `terminated`, whose backend sees neither TLS nor a server name),
/// the namespace, and a pod named `<backend>-...`.
pub fn compare_tcp(
    backend: &Nn,
    sni: Option<&str>,
    terminated: bool,
    v: &Value,
) -> std::result::Result<(), String> {
    if let Some(e) = v["error"].as_str() {
        return Err(format!("TCP echo: {e}"));
    }
    if v["welcome"] != true || v["pong"] != true {
        return Err(format!("not the suite's TCP echo dialogue: {v}"));
    }
    let sni = sni.filter(|_| !terminated);
    let want_tls = if sni.is_some() { "true" } else { "false" };
    if v["isTLS"] != want_tls {
        return Err(format!("IS_TLS answered {}, want {want_tls}", v["isTLS"]));
    }
    if terminated && !v["test"]["tls"].is_null() {
        return Err(format!(
            "the backend saw TLS {} (the Gateway terminates it)",
            v["test"]["tls"]
        ));
    }
    if let Some(n) = sni {
        if v["test"]["tls"]["serverName"] != n {
            return Err(format!(
                "the backend saw server name {}, want {n}",
                v["test"]["tls"]["serverName"]
            ));
        }
    }
    let t = &v["test"];
    if t["namespace"] != backend.namespace.as_str() {
        return Err(format!(
            "answered from namespace {}, want {}",
            t["namespace"], backend.namespace
        ));
    }
    let pod = t["pod"].as_str().unwrap_or_default();
    if !pod.starts_with(&format!("{}-", backend.name)) {
        return Err(format!("answered by pod {pod}, want {}-*", backend.name));
    }
    Ok(())
}

/// The suite's UDP echo check: an answer; with `backend`, its service and namespace.
pub fn compare_udp(backend: Option<&Nn>, v: &Value) -> std::result::Result<(), String> {
    if let Some(e) = v["error"].as_str() {
        return Err(format!("UDP echo: {e}"));
    }
    if let Some(b) = backend {
        if v["service"] != b.name.as_str() || v["namespace"] != b.namespace.as_str() {
            return Err(format!(
                "answered by {}/{}, want {b}",
                v["namespace"], v["service"]
            ));
        }
    }
    Ok(())
}

/// The share of each backend among the answering `pods` (`<backend>-lab-0`) is
/// within 5 points of its weight (the suite's weighted distribution test).
pub fn spread(pods: &[String], weights: &[(&'static str, f64)]) -> std::result::Result<(), String> {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for p in pods {
        let b = p.strip_suffix("-lab-0").unwrap_or(p).to_string();
        *by.entry(b).or_default() += 1;
    }
    for (b, want) in weights {
        let share = *by.get(*b).unwrap_or(&0) as f64 / pods.len().max(1) as f64;
        if (share - want).abs() > 0.05 {
            return Err(format!(
                "backend {b}: {share:.3} of the answers, want {want} (±0.05): {by:?}"
            ));
        }
    }
    Ok(())
}

/// One line of `lab-client grpc-json`.
pub fn parse_grpc_answer(line: &str) -> std::result::Result<GrpcAnswer, String> {
    let v: Value =
        serde_json::from_str(line).map_err(|e| format!("not a grpc-json line ({e}): {line}"))?;
    if let Some(e) = v["error"].as_str() {
        return Err(format!("gRPC call: {e}"));
    }
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    Ok(GrpcAnswer {
        grpc: v["grpc"].as_u64().map(|c| c as u32),
        http: v["http"].as_u64().unwrap_or_default() as u16,
        method: s("method"),
        namespace: s("namespace"),
        pod: s("pod"),
    })
}

/// One condition of a route's parent entry for a Gateway, as the suite checks it.
#[derive(Debug, Clone)]
pub struct Cond {
    pub type_: &'static str,
    pub status: &'static str,
    /// Empty: any reason.
    pub reason: &'static str,
}

/// What a case checks.
#[derive(Debug, Clone)]
pub enum Check {
    /// The Gateway has an address, and each route a parent entry of ours for it with
    /// Accepted and ResolvedRefs True (`GatewayAndHTTPRoutesMustBeAccepted` +
    /// `HTTPRouteMustHaveResolvedRefsConditionsTrue`).
    Accepted {
        gateway: Nn,
        routes: Vec<Nn>,
        kind: &'static str,
    },
    /// Accepted only (no ResolvedRefs check), routes of `kind`.
    AcceptedOnly {
        gateway: Nn,
        routes: Vec<Nn>,
        kind: &'static str,
    },
    /// The parent entry of the route (of `kind`) for the Gateway has this condition.
    RouteCondition {
        kind: &'static str,
        route: Nn,
        gateway: Nn,
        cond: Cond,
    },
    /// The route (of `kind`) has no parent entry Accepted (one entry at most, Accepted
    /// False).
    NoAcceptedParents { kind: &'static str, route: Nn },
    /// A TLS handshake with this server name to the Gateway's `port` is refused (the
    /// suite's `MakeTLSConnectionAndExpectEventuallyConnectionRejection`).
    TlsRejected {
        gateway: Nn,
        port: u16,
        server_name: &'static str,
    },
    /// Every listener of the Gateway counts zero routes.
    ZeroRoutes { gateway: Nn },
    /// Listener (name → attachedRoutes) of the Gateway.
    AttachedRoutes {
        gateway: Nn,
        listeners: Vec<(&'static str, u64)>,
    },
    /// A Gateway condition.
    GatewayCondition { gateway: Nn, cond: Cond },
    /// A listener's status as the suite's `GatewayStatusMustHaveListeners` compares it:
    /// its supported kinds (none when none is given, else at least these), these
    /// conditions, its attached routes.
    Listener {
        gateway: Nn,
        listener: &'static str,
        kinds: Vec<&'static str>,
        conds: Vec<Cond>,
        attached: u64,
    },
    /// A listener condition.
    ListenerCondition {
        gateway: Nn,
        listener: &'static str,
        cond: Cond,
    },
    /// Requests to the Gateway's address on `port` (HTTPS when `tls`).
    Requests {
        gateway: Nn,
        port: u16,
        tls: bool,
        reqs: Vec<Req>,
    },
    /// Requests to `/` (answered 200 from the namespace of `gateway`) spread over the
    /// backends as `weights` say (500 requests, within 5 points: the suite's measure).
    Weights {
        gateway: Nn,
        weights: Vec<(&'static str, f64)>,
    },
    /// gRPC calls to the Gateway's address on `port` (h2c).
    Grpc {
        gateway: Nn,
        port: u16,
        reqs: Vec<GrpcReq>,
    },
    /// `Echo` calls (each on a new connection, the suite's entropy header on each) spread
    /// over the backends as `weights` say (500 calls, within 5 points, as [`Check::Weights`]).
    GrpcWeights {
        gateway: Nn,
        weights: Vec<(&'static str, f64)>,
    },
    /// A connection to the Gateway's address on `port` speaking the suite's TCP echo
    /// protocol (welcome, `PONG`, `IS_TLS` false) answered by `backend` (pod name
    /// prefix `<backend>-`) in `namespace` (the suite's `MakeTCPRequest...`).
    Tcp {
        gateway: Nn,
        port: u16,
        backend: Nn,
        /// Over TLS with this server name: the backend must see TLS and the name (a
        /// passthrough listener hands the handshake to it).
        sni: Option<&'static str>,
        /// The Gateway terminates that TLS: the client takes only a certificate of
        /// `tls-checks-ca-certificate` for the name (the suite's `RootCAs`), and the
        /// backend sees plain TCP without a server name.
        terminated: bool,
    },
    /// TCP echo connections to `port` spread over the backends as `weights` say (500
    /// connections, within 5 points, as [`Check::Weights`]).
    TcpWeights {
        gateway: Nn,
        port: u16,
        weights: Vec<(&'static str, f64)>,
    },
    /// A DNS query (foo.bar.com, type A) over UDP to the Gateway's address on `port`
    /// gets a response (the suite's UDPRoute test: `dns.Exchange` without an error).
    Dns { gateway: Nn, port: u16 },
    /// UDP echo probes to the Gateway's address on `port` (the suite's
    /// `ExpectEchoResponseFromBackend`): answered, by `backend` (its service name and
    /// namespace) when given.
    Udp {
        gateway: Nn,
        port: u16,
        backend: Option<Nn>,
    },
    /// UDP echo probes to `port` spread over the backends as `weights` say (500 probes,
    /// within 5 points).
    UdpWeights {
        gateway: Nn,
        port: u16,
        weights: Vec<(&'static str, f64)>,
    },
    /// A WebSocket to `ws://<address>:80<path>` echoes a text and a binary message (the
    /// suite's `HTTPRouteBackendProtocolWebSocket`; lab-client `ws-echo`).
    WebSocket { gateway: Nn, path: &'static str },
    /// `count` GETs of `/` each answered 200 by a pod whose name starts with the one
    /// value of request header `header` the backend saw (the suite's
    /// HTTPRouteRequestHeaderModifierBackendWeights: each backendRef sets it to its own
    /// name).
    HeaderNamesPod {
        gateway: Nn,
        header: &'static str,
        count: usize,
    },
    /// The echo of each of `backends` (infra namespace) answered a copy of a request
    /// for `path` (the suite's `ExpectMirroredRequest`, which reads the mirror pods'
    /// logs; here the echo's log).
    Mirrored {
        path: &'static str,
        backends: Vec<&'static str>,
    },
    /// 500 GETs of `path` (with a `request-id` query of its own, as the suite adds) to
    /// `gateway`, each answered 200; the echo of `backend` (infra namespace) got a copy
    /// of `percent`% of them, within 3 standard deviations of the binomial count (the
    /// suite's HTTPRouteRequestPercentageMirror measure, 5 tries).
    MirroredShare {
        gateway: Nn,
        path: &'static str,
        backend: &'static str,
        percent: f64,
    },
    /// The BackendTLSPolicy's ancestor entry of ours for the Gateway has this condition
    /// (the suite's `BackendTLSPolicyMustHaveCondition`).
    PolicyCondition { policy: Nn, gateway: Nn, cond: Cond },
    /// Remove a document of the case (kind, namespace/name) before the next checks.
    Delete { kind: &'static str, object: Nn },
    /// Change a document of the case (kind, namespace/name; a GatewayClass's namespace
    /// is ignored) with `edit` before the next checks, as the suite patches an object
    /// mid-test.
    Edit {
        kind: &'static str,
        object: Nn,
        edit: fn(&mut Value),
    },
    /// Create another document (`doc()`) before the next checks, as the suite creates
    /// an object mid-test: applied after the case's documents, it is stamped newer
    /// (`creationTimestamp`, as the API server does).
    Add { doc: fn() -> Value },
    /// The object's conditions (a GatewayClass's or a Gateway's own, each parent's of a
    /// route) all have `observedGeneration` = `generation`: the suite's
    /// `<Kind>MustHaveLatestConditions`, the object's `metadata.generation` being what
    /// the API server gives it (1 at creation, one more per change of its spec; the
    /// files source counts the same way).
    LatestGeneration {
        kind: &'static str,
        object: Nn,
        generation: i64,
    },
    /// The Gateway has an address, `Accepted` and `Programmed` True (the suite's
    /// `NamespacesMustBeReady`, for one Gateway).
    GatewayReady { gateway: Nn },
    /// The GatewayClass has a condition of this type, any status.
    ClassCondition { class: String, type_: &'static str },
    /// The Gateway's `status.addresses` are exactly these, each of type `IPAddress`.
    GatewayAddresses {
        gateway: Nn,
        addresses: Vec<&'static str>,
    },
    /// The Gateway's status lists exactly these listeners (the suite's
    /// `GatewayStatusMustHaveListeners` compares the count too).
    ListenerNames {
        gateway: Nn,
        names: Vec<&'static str>,
    },
    /// The Gateway's `status.attachedListenerSets` (absent: 0), the suite's
    /// `GatewayMustHaveAttachedListeners`.
    AttachedSets { gateway: Nn, count: u64 },
    /// A ListenerSet's condition (`ListenerSetMustHaveCondition`).
    SetCondition { set: Nn, cond: Cond },
    /// The named listeners of a ListenerSet (every one when none is named) each have
    /// these conditions, and every one named is in its status
    /// (`ListenerSetListenersMustHaveConditions`).
    SetListenerConds {
        set: Nn,
        listeners: Vec<&'static str>,
        conds: Vec<Cond>,
    },
    /// The ListenerSet's status lists exactly these listeners, each with HTTPRoute among
    /// its supported kinds, ResolvedRefs, Accepted and Programmed True, and this many
    /// attached routes (`ListenerSetStatusMustHaveListeners` with the suite's
    /// `generateSupportedRouteKinds` and `generateAcceptedListenerConditions`).
    SetListeners {
        set: Nn,
        listeners: Vec<(&'static str, u64)>,
    },
    /// Each route has a parent entry of ours whose `parentRef` is this parent exactly
    /// (group, kind, namespace, name: the suite compares them as pointers, so they must
    /// be written) with `Accepted: True` (`HTTPRouteMustHaveParents`); with `listeners`,
    /// reason `Accepted` and every listener of the parent ResolvedRefs, Accepted and
    /// Programmed True too (`RoutesAndParentMustBeAccepted`).
    ParentAccepted {
        parent_kind: &'static str,
        parent: Nn,
        routes: Vec<Nn>,
        listeners: bool,
    },
}

/// One upstream test.
#[derive(Debug, Clone)]
pub struct Case {
    /// The upstream `ShortName`.
    pub name: &'static str,
    /// `tests/<manifest>` of the suite's data (None: the base manifests alone).
    pub manifest: Option<&'static str>,
    /// More manifests the test applies after it.
    pub more_manifests: Vec<&'static str>,
    /// The profile it counts in.
    pub profile: &'static str,
    /// The extended features it needs (empty: a core test).
    pub features: &'static [&'static str],
    /// Not run, and why (a feature k8slb does not claim; not a failure).
    pub skip: Option<&'static str>,
    /// Not run on one proxy, and why.
    pub skip_on: Vec<(&'static str, &'static str)>,
    /// On one proxy the upstream test returns before any check (it tests the absence
    /// of a feature that proxy claims), and why: PASS there with nothing checked.
    pub returns_early_on: Vec<(&'static str, &'static str)>,
    /// Run, and must pass, but reported SKIP (not counted): it needs a feature that is
    /// not claimed, so the upstream suite would not run it; why.
    pub unclaimed: Option<&'static str>,
    /// Known to FAIL (on the proxies named; empty: both), and why: run and reported as
    /// FAIL, the lab test fails only if it passes (then the entry must go).
    pub expect_fail: Vec<(&'static str, &'static str)>,
    pub checks: Vec<Check>,
}

impl Case {
    /// Why this case is known to fail on `proxy`, if it is.
    pub fn known_failure(&self, proxy: &str) -> Option<&'static str> {
        self.expect_fail
            .iter()
            .find(|(p, _)| p.is_empty() || *p == proxy)
            .map(|(_, why)| *why)
    }
}

/// PASS, FAIL or SKIP, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

impl Outcome {
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail(_) => "FAIL",
            Outcome::Skip(_) => "SKIP",
        }
    }
}

/// The echo identities: Deployment (namespace/name) → its port on `be1`.
pub type Echoes = BTreeMap<Nn, u16>;

/// The runner on one [`System`].
pub struct Runner<'a> {
    pub sys: &'a System,
    pub data: PathBuf,
    echoes: Echoes,
    be: IpAddr,
    stamp: u64,
    /// Where the TLS echo's certificate files are (removed with the runner).
    tmp: Option<PathBuf>,
    /// The echo's log: a line `<pod> <method> <target>` per HTTP request it answered.
    echo_log: PathBuf,
    /// The client certificates requests may present: Secret name → (certificate, key)
    /// files.
    client_certs: BTreeMap<String, (PathBuf, PathBuf)>,
    /// [`EchoKinds::apps`].
    apps: BTreeMap<Nn, Nn>,
    /// The file of [`EchoKinds::checks_ca`].
    checks_ca: Option<PathBuf>,
}

impl Drop for Runner<'_> {
    fn drop(&mut self) {
        if let Some(dir) = &self.tmp {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// kind/namespace/name of a document.
fn doc_id(d: &Value) -> (String, Nn) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&d["kind"]),
        Nn {
            namespace: s(&d["metadata"]["namespace"]),
            name: s(&d["metadata"]["name"]),
        },
    )
}

/// Every Deployment of `docs`.
pub fn deployments(docs: &[Value]) -> Vec<Nn> {
    docs.iter()
        .filter(|d| d["kind"] == "Deployment")
        .map(|d| doc_id(d).1)
        .collect()
}

/// The Deployments of `docs` that run the suite's gRPC echo server (a container with
/// the environment variable `GRPC_ECHO_SERVER`).
pub fn grpc_deployments(docs: &[Value]) -> BTreeSet<Nn> {
    deployments_with_env(docs, "GRPC_ECHO_SERVER")
}

/// The same for its TCP echo server (`TCP_ECHO_SERVER`).
pub fn tcp_deployments(docs: &[Value]) -> BTreeSet<Nn> {
    deployments_with_env(docs, "TCP_ECHO_SERVER")
}

fn deployments_with_env(docs: &[Value], var: &str) -> BTreeSet<Nn> {
    docs.iter()
        .filter(|d| d["kind"] == "Deployment")
        .filter(|d| {
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["env"].as_array().into_iter().flatten())
                .any(|e| e["name"] == var)
        })
        .map(|d| doc_id(d).1)
        .collect()
}

/// Which echo a Deployment gets: HTTP unless the runner found it in one of these.
#[derive(Debug, Clone, Default)]
pub struct EchoKinds {
    pub grpc: BTreeSet<Nn>,
    pub tcp: BTreeSet<Nn>,
    pub udp: BTreeSet<Nn>,
    /// TCP echoes with a TLS port too (`TLS_SERVER_CERT`): TLS when the client starts it.
    pub tcp_tls: BTreeSet<Nn>,
    /// The certificate and key (PEM) they serve: the suite mounts
    /// `tls-passthrough-checks-certificate` (abc.example.com) into them.
    pub tls_pem: Option<(String, String)>,
    /// HTTP echoes with a TLS port (`TLS_SERVER_CERT`, not a TCP echo: the suite's
    /// `tls-backend`): TLS when the client starts it.
    pub http_tls: BTreeSet<Nn>,
    /// The certificate and key (PEM) they serve: the suite mounts
    /// `tls-checks-certificate` (signed by `tls-checks-ca-certificate`) into them.
    pub echo_pem: Option<(String, String)>,
    /// The CA (PEM) whose client certificates they ask for and take (a client without
    /// one is taken too): the suite's `TLS_CLIENT_CACERTS`, `tls-checks-ca-certificate`.
    pub echo_client_ca: Option<String>,
    /// The suite's client certificates (Secret name → certificate, key PEM), which
    /// requests present with [`Req::client_cert`].
    pub client_pems: BTreeMap<String, (String, String)>,
    /// `tls-checks-ca-certificate` (PEM): what the suite's TLS clients verify the
    /// Gateway's certificate with when it terminates TLS for a TLSRoute.
    pub checks_ca: Option<String>,
    /// Deployments running the suite's `coredns` (an image of that name): a DNS
    /// answerer (`lab-backend --dns`).
    pub dns: BTreeSet<Nn>,
    /// Deployments whose pods' `app` label is not their name: (namespace, app) → the
    /// Deployment, so that a Service selecting that label gets its echo (the suite's
    /// `coredns` Service selects `app: udp`).
    pub apps: BTreeMap<Nn, Nn>,
}

impl EchoKinds {
    /// Those of `docs`.
    pub fn extend(&mut self, docs: &[Value]) {
        self.grpc.extend(grpc_deployments(docs));
        self.tcp.extend(tcp_deployments(docs));
        self.udp
            .extend(deployments_with_env(docs, "UDP_ECHO_SERVER"));
        let tls = deployments_with_env(docs, "TLS_SERVER_CERT");
        let tcp = tcp_deployments(docs);
        self.http_tls.extend(
            tls.iter()
                .filter(|d| !tcp.contains(*d))
                .filter(|d| !self.grpc.contains(*d))
                .cloned(),
        );
        self.tcp_tls
            .extend(tcp.into_iter().filter(|d| tls.contains(d)));
        for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
            let (_, id) = doc_id(d);
            let spec = &d["spec"]["template"]["spec"];
            let coredns = spec["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["image"].as_str().is_some_and(|i| i.contains("/coredns/")));
            if coredns {
                self.dns.insert(id.clone());
            }
            if let Some(app) = d["spec"]["template"]["metadata"]["labels"]["app"].as_str() {
                if app != id.name {
                    self.apps.insert(
                        Nn {
                            namespace: id.namespace.clone(),
                            name: app.to_string(),
                        },
                        id,
                    );
                }
            }
        }
    }
    fn flag(&self, d: &Nn) -> &'static str {
        if self.grpc.contains(d) {
            "--grpc-echo"
        } else if self.tcp_tls.contains(d) && self.tls_pem.is_some() {
            "--tcp-echo-tls"
        } else if self.tcp.contains(d) {
            "--tcp-echo"
        } else if self.udp.contains(d) {
            "--udp-echo"
        } else if self.dns.contains(d) {
            "--dns"
        } else if self.http_tls.contains(d) && self.echo_pem.is_some() {
            "--echo-tls"
        } else {
            "--echo"
        }
    }
}

impl<'a> Runner<'a> {
    /// Starts the echo listeners on `be1` for `deployments` (their pods are named
    /// `<deployment>-lab-0`); `sys` must have been started with a backend.
    pub fn start(
        sys: &'a mut System,
        data: PathBuf,
        deployments: &[Nn],
        kinds: &EchoKinds,
    ) -> Result<Runner<'a>> {
        let be = IpAddr::V4(sys.lab.host("be1").v4);
        let bin = bins::locate("lab-backend")?.to_string_lossy().into_owned();
        let mut echoes = Echoes::new();
        let mut args = vec![bin];
        for (i, d) in deployments.iter().enumerate() {
            if echoes.contains_key(d) {
                continue;
            }
            let port = ECHO_PORT + i as u16;
            echoes.insert(d.clone(), port);
            args.push(kinds.flag(d).into());
            args.push(format!("{be}:{port},{},{}-lab-0", d.namespace, d.name));
        }
        let mut tmp = None;
        if let Some((crt, key)) = &kinds.tls_pem {
            let dir =
                std::env::temp_dir().join(format!("k8slb-conformance-{}", std::process::id()));
            tmp = Some(dir.clone());
            std::fs::create_dir_all(&dir)?;
            let (c, k) = (dir.join("tcp-echo.crt"), dir.join("tcp-echo.key"));
            std::fs::write(&c, crt)?;
            std::fs::write(&k, key)?;
            args.extend([
                "--cert".into(),
                c.display().to_string(),
                "--key".into(),
                k.display().to_string(),
            ]);
        }
        if let Some((crt, key)) = &kinds.echo_pem {
            let dir =
                std::env::temp_dir().join(format!("k8slb-conformance-{}", std::process::id()));
            tmp = Some(dir.clone());
            std::fs::create_dir_all(&dir)?;
            let (c, k) = (dir.join("echo.crt"), dir.join("echo.key"));
            std::fs::write(&c, crt)?;
            std::fs::write(&k, key)?;
            args.extend([
                "--echo-cert".into(),
                c.display().to_string(),
                "--echo-key".into(),
                k.display().to_string(),
            ]);
            if let Some(ca) = &kinds.echo_client_ca {
                let f = dir.join("echo-client-ca.crt");
                std::fs::write(&f, ca)?;
                args.extend(["--echo-client-ca".into(), f.display().to_string()]);
            }
        }
        let mut client_certs = BTreeMap::new();
        if !kinds.client_pems.is_empty() {
            let dir =
                std::env::temp_dir().join(format!("k8slb-conformance-{}", std::process::id()));
            tmp = Some(dir.clone());
            std::fs::create_dir_all(&dir)?;
            for (name, (crt, key)) in &kinds.client_pems {
                let (c, k) = (
                    dir.join(format!("{name}.crt")),
                    dir.join(format!("{name}.key")),
                );
                std::fs::write(&c, crt)?;
                std::fs::write(&k, key)?;
                client_certs.insert(name.clone(), (c, k));
            }
        }
        let mut checks_ca = None;
        if let Some(pem) = &kinds.checks_ca {
            let dir =
                std::env::temp_dir().join(format!("k8slb-conformance-{}", std::process::id()));
            tmp = Some(dir.clone());
            std::fs::create_dir_all(&dir)?;
            let f = dir.join("tls-checks-ca.crt");
            std::fs::write(&f, pem)?;
            checks_ca = Some(f);
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let id = sys.lab.spawn_in("be1", "echo", &argv)?;
        let echo_log = sys.lab.log_path(id).to_path_buf();
        let runner = Runner {
            checks_ca,
            client_certs,
            apps: kinds.apps.clone(),
            echo_log,
            sys,
            data,
            echoes,
            be,
            stamp: 0,
            tmp,
        };
        // Listening: the first HTTP echo answers.
        let (_, port) = runner
            .echoes
            .iter()
            .find(|(d, _)| kinds.flag(d) == "--echo")
            .context("no Deployment to echo")?;
        let url = format!("http://{be}:{port}/");
        crate::wait::until(Duration::from_secs(10), || {
            Ok(runner
                .sys
                .lab
                .run_in("client", &["curl", "-sf", "-m", "1", &url])?
                .status
                .success())
        })
        .context("the echo backend does not answer")?;
        Ok(runner)
    }

    /// The documents of `docs` made ready for the files source: creation times in
    /// document order (the suite applies them in that order; precedence between
    /// routes follows it), namespaces labelled with their name (as the API server
    /// does), and an EndpointSlice to its echo for each Service whose
    /// selector's `app` is a Deployment we echo (manifests' own EndpointSlices are
    /// pointed at infra-backend-v1's echo, as the suite fills them with its pods).
    pub fn prepare(&mut self, docs: &[Value]) -> Vec<Value> {
        let mut out = Vec::new();
        for d in docs {
            let mut d = d.clone();
            let (kind, id) = doc_id(&d);
            if d["metadata"].is_object() && d["metadata"]["creationTimestamp"].is_null() {
                self.stamp += 1;
                let t = format!(
                    "2026-01-01T{:02}:{:02}:{:02}Z",
                    self.stamp / 3600 % 24,
                    self.stamp / 60 % 60,
                    self.stamp % 60
                );
                d["metadata"]["creationTimestamp"] = json!(t);
            }
            match kind.as_str() {
                // The API server labels every namespace with its name (Kubernetes 1.22+);
                // the suite's selectors rely on it.
                "Namespace" => {
                    d["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(id.name);
                }
                "Service" => {
                    let app = d["spec"]["selector"]["app"].as_str().unwrap_or_default();
                    let target = Nn {
                        namespace: id.namespace.clone(),
                        name: app.to_string(),
                    };
                    let target = self.apps.get(&target).cloned().unwrap_or(target);
                    if let Some(port) = self.echoes.get(&target) {
                        out.push(self.slice_for(&d, &id, *port));
                    }
                }
                "EndpointSlice" => {
                    let infra = self.echoes.get(&nn("infra-backend-v1")).copied();
                    let v4 = d["addressType"] == "IPv4";
                    if let (Some(port), true) = (infra, v4) {
                        d["endpoints"] = json!([{
                            "addresses": [self.be.to_string()],
                            "conditions": {"ready": true, "serving": true, "terminating": false},
                        }]);
                        if let Some(ports) = d["ports"].as_array_mut() {
                            for p in ports {
                                p["port"] = json!(port);
                            }
                        }
                    } else {
                        d["endpoints"] = json!([]);
                    }
                }
                _ => {}
            }
            out.push(d);
        }
        out
    }

    fn slice_for(&self, svc: &Value, id: &Nn, port: u16) -> Value {
        let ports: Vec<Value> = svc["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let mut e =
                    json!({"port": port, "protocol": p["protocol"].as_str().unwrap_or("TCP")});
                if let Some(n) = p["name"].as_str() {
                    e["name"] = json!(n);
                }
                e
            })
            .collect();
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": format!("{}-lab", id.name),
                "namespace": id.namespace,
                "labels": {"kubernetes.io/service-name": id.name},
            },
            "addressType": "IPv4",
            "endpoints": [{
                "addresses": [self.be.to_string()],
                "conditions": {"ready": true, "serving": true, "terminating": false},
            }],
            "ports": ports,
        })
    }

    /// Writes `docs` as the file `<stem>.yaml` of the watched directory (a List).
    pub fn apply(&self, stem: &str, docs: &[Value]) -> Result<()> {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
        self.sys.apply(stem, &list)
    }

    /// Runs one case (its manifests already prepared as `docs`).
    pub fn run_case(&mut self, case: &Case, proxy: &str) -> Outcome {
        if let Some(why) = case.skip {
            return Outcome::Skip(why.to_string());
        }
        if let Some((_, why)) = case.skip_on.iter().find(|(p, _)| *p == proxy) {
            return Outcome::Skip(why.to_string());
        }
        if case.returns_early_on.iter().any(|(p, _)| *p == proxy) {
            return Outcome::Pass;
        }
        let mut docs = Vec::new();
        for m in case.manifest.iter().chain(&case.more_manifests) {
            let path = self.data.join("gateway-api/conformance/tests").join(m);
            match read_manifest(&path) {
                Ok(d) => docs.extend(self.prepare(&d)),
                Err(e) => return Outcome::Fail(format!("{e:#}")),
            }
        }
        let stem = format!("case-{}", case.name);
        if !docs.is_empty() {
            if let Err(e) = self.apply(&stem, &docs) {
                return Outcome::Fail(format!("applying: {e:#}"));
            }
        }
        let mut outcome = Outcome::Pass;
        let timeout = if case.known_failure(proxy).is_some() {
            KNOWN_FAIL_TIMEOUT
        } else {
            CASE_TIMEOUT
        };
        let mut i = 0;
        let checks = &case.checks;
        while i < checks.len() {
            // A run of checks up to the next Delete or Edit converges together.
            let end = checks[i..]
                .iter()
                .position(|c| {
                    matches!(
                        c,
                        Check::Delete { .. } | Check::Edit { .. } | Check::Add { .. }
                    )
                })
                .map(|p| i + p)
                .unwrap_or(checks.len());
            if let Err(e) = self.converge(&checks[i..end], timeout) {
                outcome = Outcome::Fail(e);
                break;
            }
            let changed = match checks.get(end) {
                Some(Check::Delete { kind, object }) => {
                    docs.retain(|d| doc_id(d) != (kind.to_string(), object.clone()));
                    Some(format!("deleting {kind} {object}"))
                }
                Some(Check::Edit { kind, object, edit }) => {
                    let found = docs.iter_mut().find(|d| {
                        let (k, id) = doc_id(d);
                        k == *kind
                            && id.name == object.name
                            && (id.namespace.is_empty() || id.namespace == object.namespace)
                    });
                    match found {
                        Some(d) => edit(d),
                        None => {
                            outcome = Outcome::Fail(format!("no {kind} {object} to edit"));
                            break;
                        }
                    }
                    Some(format!("editing {kind} {object}"))
                }
                Some(Check::Add { doc }) => {
                    let d = doc();
                    let (kind, id) = doc_id(&d);
                    docs.extend(self.prepare(&[d]));
                    Some(format!("adding {kind} {id}"))
                }
                _ => None,
            };
            if let Some(what) = changed {
                if let Err(e) = self.apply(&stem, &docs) {
                    outcome = Outcome::Fail(format!("{what}: {e:#}"));
                    break;
                }
            }
            i = end + 1;
        }
        if !docs.is_empty() {
            let _ = self.sys.delete(&stem);
            self.wait_gone(&docs);
        }
        match (outcome, case.unclaimed) {
            (Outcome::Pass, Some(why)) => Outcome::Skip(format!("passed, not counted: {why}")),
            (o, _) => o,
        }
    }

    /// Waits (10 s at most) until no status file of `docs`' routes is left.
    fn wait_gone(&self, docs: &[Value]) {
        let routes: Vec<String> = docs
            .iter()
            .filter_map(|d| {
                let (kind, id) = doc_id(d);
                kind.ends_with("Route")
                    .then(|| format!("{kind}/{}/{}", id.namespace, id.name))
            })
            .collect();
        let _ = crate::wait::until(Duration::from_secs(10), || {
            Ok(routes.iter().all(|r| self.sys.status_of(r).is_none()))
        });
    }

    /// Polls `checks` until they all hold [`SWEEPS`] times in a row. Err: the last mismatch.
    fn converge(&self, checks: &[Check], timeout: Duration) -> std::result::Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut streak = 0;
        loop {
            let failed = checks.iter().find_map(|c| self.check(c).err());
            match failed {
                None => {
                    streak += 1;
                    if streak >= SWEEPS {
                        return Ok(());
                    }
                    continue;
                }
                Some(e) => {
                    streak = 0;
                    if Instant::now() >= deadline {
                        return Err(e);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn status(&self, kind: &str, n: &Nn) -> std::result::Result<Value, String> {
        self.sys
            .status_of(&format!("{kind}/{}/{}", n.namespace, n.name))
            .ok_or_else(|| format!("{kind} {n} has no status"))
    }

    /// Our parent entry of `route` (a `kind`) for `gateway`.
    fn parent(&self, kind: &str, route: &Nn, gateway: &Nn) -> std::result::Result<Value, String> {
        let st = self.status(kind, route)?;
        st["parents"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| {
                p["controllerName"] == CONTROLLER
                    && p["parentRef"]["name"] == gateway.name.as_str()
                    && p["parentRef"]["namespace"]
                        .as_str()
                        .unwrap_or(route.namespace.as_str())
                        == gateway.namespace
            })
            .cloned()
            .ok_or_else(|| {
                format!("{kind} {route} has no parent entry for Gateway {gateway}: {st}")
            })
    }

    fn has_cond(conds: &Value, c: &Cond) -> bool {
        conds.as_array().into_iter().flatten().any(|x| {
            x["type"] == c.type_
                && x["status"] == c.status
                && (c.reason.is_empty() || x["reason"] == c.reason)
        })
    }

    /// The ListenerSet checks (see [`Check::SetCondition`] and the next ones).
    fn check_listener_sets(&self, c: &Check) -> std::result::Result<(), String> {
        match c {
            Check::AttachedSets { gateway, count } => {
                let st = self.status("Gateway", gateway)?;
                let got = st["attachedListenerSets"].as_u64().unwrap_or(0);
                (got == *count).then_some(()).ok_or_else(|| {
                    format!("Gateway {gateway}: {got} ListenerSets attached, want {count}")
                })
            }
            Check::SetCondition { set, cond } => {
                let st = self.status("ListenerSet", set)?;
                conds_hold(
                    &format!("ListenerSet {set}"),
                    &st["conditions"],
                    std::slice::from_ref(cond),
                )
            }
            Check::SetListenerConds {
                set,
                listeners,
                conds,
            } => {
                let got = self.set_listeners(set)?;
                for name in listeners {
                    if !got.iter().any(|l| l["name"] == *name) {
                        return Err(format!("ListenerSet {set}: no listener {name}"));
                    }
                }
                let named =
                    |l: &&Value| listeners.is_empty() || listeners.iter().any(|n| l["name"] == *n);
                for l in got.iter().filter(named) {
                    let what = format!("ListenerSet {set} listener {}", l["name"]);
                    conds_hold(&what, &l["conditions"], conds)?;
                }
                Ok(())
            }
            Check::SetListeners { set, listeners } => self.check_set_listeners(set, listeners),
            Check::ParentAccepted {
                parent_kind,
                parent,
                routes,
                listeners,
            } => self.check_parent_accepted(parent_kind, parent, routes, *listeners),
            _ => unreachable!("only ListenerSet checks come here"),
        }
    }

    /// A ListenerSet's listeners in its status.
    fn set_listeners(&self, set: &Nn) -> std::result::Result<Vec<Value>, String> {
        let st = self.status("ListenerSet", set)?;
        Ok(st["listeners"].as_array().cloned().unwrap_or_default())
    }

    /// [`Check::SetListeners`].
    fn check_set_listeners(
        &self,
        set: &Nn,
        listeners: &[(&'static str, u64)],
    ) -> std::result::Result<(), String> {
        let got = self.set_listeners(set)?;
        if got.len() != listeners.len() {
            return Err(format!(
                "ListenerSet {set}: {} listeners in its status, want {}",
                got.len(),
                listeners.len()
            ));
        }
        for (name, attached) in listeners {
            let l = got
                .iter()
                .find(|l| l["name"] == *name)
                .ok_or_else(|| format!("ListenerSet {set}: no listener {name}"))?;
            let what = format!("ListenerSet {set} listener {name}");
            let http = l["supportedKinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| {
                    k["kind"] == "HTTPRoute"
                        && k["group"].as_str().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
                });
            if !http {
                return Err(format!(
                    "{what}: no HTTPRoute among {}",
                    l["supportedKinds"]
                ));
            }
            if l["attachedRoutes"] != *attached {
                return Err(format!(
                    "{what}: {} routes attached, want {attached}",
                    l["attachedRoutes"]
                ));
            }
            conds_hold(&what, &l["conditions"], &accepted_listener())?;
        }
        Ok(())
    }

    /// [`Check::ParentAccepted`].
    fn check_parent_accepted(
        &self,
        parent_kind: &str,
        parent: &Nn,
        routes: &[Nn],
        listeners: bool,
    ) -> std::result::Result<(), String> {
        let want = json!({"group": GATEWAY_GROUP, "kind": parent_kind,
                          "namespace": parent.namespace, "name": parent.name});
        let accepted = Cond {
            type_: "Accepted",
            status: "True",
            reason: if listeners { "Accepted" } else { "" },
        };
        for r in routes {
            let st = self.status("HTTPRoute", r)?;
            let ok = st["parents"].as_array().into_iter().flatten().any(|p| {
                let pr = &p["parentRef"];
                p["controllerName"] == CONTROLLER
                    && ["group", "kind", "namespace", "name"]
                        .iter()
                        .all(|k| pr[k] == want[k])
                    && Self::has_cond(&p["conditions"], &accepted)
            });
            if !ok {
                return Err(format!(
                    "HTTPRoute {r}: no Accepted parent entry of ours for {parent_kind} {parent}: {st}"
                ));
            }
        }
        if listeners {
            let st = self.status(parent_kind, parent)?;
            for l in st["listeners"].as_array().into_iter().flatten() {
                let what = format!("{parent_kind} {parent} listener {}", l["name"]);
                conds_hold(&what, &l["conditions"], &accepted_listener())?;
            }
        }
        Ok(())
    }

    /// The Gateway's first address.
    pub fn address(&self, gateway: &Nn) -> std::result::Result<String, String> {
        let st = self.status("Gateway", gateway)?;
        st["addresses"][0]["value"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("Gateway {gateway} has no address: {st}"))
    }

    fn check(&self, c: &Check) -> std::result::Result<(), String> {
        let cond = |t, s| Cond {
            type_: t,
            status: s,
            reason: "",
        };
        match c {
            Check::AttachedSets { .. }
            | Check::SetCondition { .. }
            | Check::SetListenerConds { .. }
            | Check::SetListeners { .. }
            | Check::ParentAccepted { .. } => self.check_listener_sets(c),
            Check::Accepted {
                gateway,
                routes,
                kind,
            }
            | Check::AcceptedOnly {
                gateway,
                routes,
                kind,
            } => {
                self.address(gateway)?;
                for r in routes {
                    let p = self.parent(kind, r, gateway)?;
                    let mut want = vec![cond("Accepted", "True")];
                    if matches!(c, Check::Accepted { .. }) {
                        want.push(cond("ResolvedRefs", "True"));
                    }
                    for w in want {
                        if !Self::has_cond(&p["conditions"], &w) {
                            return Err(format!(
                                "{kind} {r}: no {} {} for {gateway}: {}",
                                w.type_, w.status, p["conditions"]
                            ));
                        }
                    }
                }
                Ok(())
            }
            Check::RouteCondition {
                kind,
                route,
                gateway,
                cond,
            } => {
                let p = self.parent(kind, route, gateway)?;
                if Self::has_cond(&p["conditions"], cond) {
                    Ok(())
                } else {
                    Err(format!(
                        "{kind} {route}: want {} {} {} for {gateway}, got {}",
                        cond.type_, cond.status, cond.reason, p["conditions"]
                    ))
                }
            }
            Check::PolicyCondition {
                policy,
                gateway,
                cond,
            } => {
                let st = self.status("BackendTLSPolicy", policy)?;
                let a = st["ancestors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| {
                        a["controllerName"] == CONTROLLER
                            && a["ancestorRef"]["name"] == gateway.name.as_str()
                            && a["ancestorRef"]["namespace"] == gateway.namespace.as_str()
                    })
                    .ok_or_else(|| {
                        format!(
                            "BackendTLSPolicy {policy} has no ancestor entry for {gateway}: {st}"
                        )
                    })?;
                if Self::has_cond(&a["conditions"], cond) {
                    Ok(())
                } else {
                    Err(format!(
                        "BackendTLSPolicy {policy}: want {} {} {} for {gateway}, got {}",
                        cond.type_, cond.status, cond.reason, a["conditions"]
                    ))
                }
            }
            Check::TlsRejected {
                gateway,
                port,
                server_name,
            } => {
                let ip = self.address(gateway)?;
                let out = self
                    .sys
                    .lab
                    .run_in(
                        "client",
                        &[
                            "timeout",
                            "3",
                            "openssl",
                            "s_client",
                            "-connect",
                            &format!("{ip}:{port}"),
                            "-servername",
                            server_name,
                        ],
                    )
                    .map_err(|e| format!("openssl: {e:#}"))?;
                if out.status.success() {
                    Err(format!(
                        "a TLS handshake for {server_name} to {ip}:{port} succeeded"
                    ))
                } else {
                    Ok(())
                }
            }
            Check::NoAcceptedParents { kind, route } => {
                let st = self.status(kind, route).unwrap_or(json!({}));
                let parents: Vec<&Value> = st["parents"].as_array().into_iter().flatten().collect();
                match parents.as_slice() {
                    [] => Ok(()),
                    [p] if Self::has_cond(&p["conditions"], &cond("Accepted", "False")) => Ok(()),
                    _ => Err(format!("{kind} {route}: want no accepted parent, got {st}")),
                }
            }
            Check::ZeroRoutes { gateway } => {
                let st = self.status("Gateway", gateway)?;
                let ls = st["listeners"].as_array().cloned().unwrap_or_default();
                if ls.iter().all(|l| l["attachedRoutes"] == 0) {
                    Ok(())
                } else {
                    Err(format!(
                        "Gateway {gateway}: want zero routes, got {}",
                        st["listeners"]
                    ))
                }
            }
            Check::AttachedRoutes { gateway, listeners } => {
                let st = self.status("Gateway", gateway)?;
                for (name, n) in listeners {
                    let l = st["listeners"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|l| l["name"] == *name)
                        .ok_or_else(|| format!("Gateway {gateway}: no listener {name}"))?;
                    if l["attachedRoutes"] != *n {
                        return Err(format!(
                            "Gateway {gateway} listener {name}: want {n} routes, got {}",
                            l["attachedRoutes"]
                        ));
                    }
                }
                Ok(())
            }
            Check::GatewayCondition { gateway, cond } => {
                let st = self.status("Gateway", gateway)?;
                if Self::has_cond(&st["conditions"], cond) {
                    Ok(())
                } else {
                    Err(format!(
                        "Gateway {gateway}: want {} {} {}, got {}",
                        cond.type_, cond.status, cond.reason, st["conditions"]
                    ))
                }
            }
            Check::Listener {
                gateway,
                listener,
                kinds,
                conds,
                attached,
            } => {
                let st = self.status("Gateway", gateway)?;
                let l = st["listeners"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|l| l["name"] == *listener)
                    .ok_or_else(|| format!("Gateway {gateway}: no listener {listener}"))?;
                let got: Vec<&str> = l["supportedKinds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|k| k["kind"].as_str())
                    .collect();
                // The suite: none expected means none; otherwise each expected is listed.
                let kinds_ok = if kinds.is_empty() {
                    got.is_empty()
                } else {
                    kinds.iter().all(|k| got.contains(k))
                };
                if !kinds_ok {
                    return Err(format!(
                        "Gateway {gateway} listener {listener}: supported kinds {got:?}, want {kinds:?}"
                    ));
                }
                for c in conds {
                    if !Self::has_cond(&l["conditions"], c) {
                        return Err(format!(
                            "Gateway {gateway} listener {listener}: want {} {} {}, got {}",
                            c.type_, c.status, c.reason, l["conditions"]
                        ));
                    }
                }
                if l["attachedRoutes"] != *attached {
                    return Err(format!(
                        "Gateway {gateway} listener {listener}: {} routes, want {attached}",
                        l["attachedRoutes"]
                    ));
                }
                Ok(())
            }
            Check::ListenerCondition {
                gateway,
                listener,
                cond,
            } => {
                let st = self.status("Gateway", gateway)?;
                let l = st["listeners"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|l| l["name"] == *listener)
                    .ok_or_else(|| format!("Gateway {gateway}: no listener {listener}"))?;
                if Self::has_cond(&l["conditions"], cond) {
                    Ok(())
                } else {
                    Err(format!(
                        "Gateway {gateway} listener {listener}: want {} {} {}, got {}",
                        cond.type_, cond.status, cond.reason, l["conditions"]
                    ))
                }
            }
            Check::Requests {
                gateway,
                port,
                tls,
                reqs,
            } => {
                let ip = self.address(gateway)?;
                for r in reqs {
                    let r = &*r.this_time();
                    let got = self.send(&ip, *port, *tls, r);
                    if r.no_answer {
                        match got {
                            Err(_) => continue,
                            Ok(a) => {
                                return Err(format!(
                                    "{}: answered {}, want no answer (the round trip fails)",
                                    r.describe(),
                                    a.status
                                ))
                            }
                        }
                    }
                    let a = got?;
                    compare(r, &a, *tls).map_err(|e| format!("{}: {e}", r.describe()))?;
                    if let Some(name) = r.want_client_cert {
                        self.saw_client_cert(name, &a)
                            .map_err(|e| format!("{}: {e}", r.describe()))?;
                    }
                }
                Ok(())
            }
            Check::HeaderNamesPod {
                gateway,
                header,
                count,
            } => {
                let ip = self.address(gateway)?;
                let r = get("/");
                for _ in 0..*count {
                    let a = self.send(&ip, 80, false, &r)?;
                    compare(&r, &a, false)?;
                    let echo: Value = serde_json::from_str(&a.body).map_err(|e| e.to_string())?;
                    let seen: Vec<&str> = echo["headers"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .filter(|(k, _)| k.eq_ignore_ascii_case(header))
                        .flat_map(|(_, v)| v.as_array().into_iter().flatten())
                        .filter_map(Value::as_str)
                        .collect();
                    let pod = echo["pod"].as_str().unwrap_or_default();
                    match seen.as_slice() {
                        [one] if pod.starts_with(one) => {}
                        _ => {
                            return Err(format!(
                                "answered by {pod}, whose backend saw {header}: {seen:?}"
                            ))
                        }
                    }
                }
                Ok(())
            }
            Check::Mirrored { path, backends } => {
                let log = std::fs::read_to_string(&self.echo_log)
                    .map_err(|e| format!("{}: {e}", self.echo_log.display()))?;
                for b in backends {
                    let want = format!("{b}-lab-0 GET {path}");
                    if !log.lines().any(|l| l.trim() == want) {
                        return Err(format!("no mirrored request for {path} at {b}"));
                    }
                }
                Ok(())
            }
            Check::WebSocket { gateway, path } => {
                let ip = self.address(gateway)?;
                self.websocket(&ip, path)
            }
            Check::MirroredShare {
                gateway,
                path,
                backend,
                percent,
            } => {
                let ip = self.address(gateway)?;
                let mut last = String::new();
                for _ in 0..5 {
                    match self.mirrored_share(&ip, path, backend, *percent) {
                        Ok(()) => return Ok(()),
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
            Check::Weights { gateway, weights } => {
                let ip = self.address(gateway)?;
                self.weights(&ip, &gateway.namespace, weights)
            }
            Check::Grpc {
                gateway,
                port,
                reqs,
            } => {
                let ip = self.address(gateway)?;
                for r in reqs {
                    let got = self.grpc(&ip, *port, r, 1)?;
                    compare_grpc(r, &got[0]).map_err(|e| format!("{}: {e}", r.describe()))?;
                }
                Ok(())
            }
            Check::GrpcWeights { gateway, weights } => {
                let ip = self.address(gateway)?;
                self.grpc_weights(&ip, &gateway.namespace, weights)
            }
            Check::Tcp {
                gateway,
                port,
                backend,
                sni,
                terminated,
            } => {
                let ip = self.address(gateway)?;
                let ca = match (&self.checks_ca, terminated) {
                    (Some(f), true) => Some(f.to_string_lossy().into_owned()),
                    (None, true) => {
                        return Err("no tls-checks-ca-certificate to verify with".into())
                    }
                    _ => None,
                };
                let got = match (sni, &ca) {
                    (None, _) => self.tcp_echo(&ip, *port, 1)?,
                    (Some(n), None) => self.echo_lines_with("tcp-echo", &ip, *port, 1, &[n])?,
                    (Some(n), Some(ca)) => {
                        self.echo_lines_with("tcp-echo", &ip, *port, 1, &[n, ca])?
                    }
                };
                compare_tcp(backend, *sni, *terminated, &got[0])
            }
            Check::TcpWeights {
                gateway,
                port,
                weights,
            } => {
                const TOTAL: usize = 500;
                let ip = self.address(gateway)?;
                let got = self.tcp_echo(&ip, *port, TOTAL)?;
                let mut pods = Vec::new();
                for v in &got {
                    if let Some(e) = v["error"].as_str() {
                        return Err(format!("TCP echo: {e}"));
                    }
                    pods.push(v["test"]["pod"].as_str().unwrap_or_default().to_string());
                }
                spread(&pods, weights)
            }
            Check::Dns { gateway, port } => {
                let ip = self.address(gateway)?;
                let bin = bins::locate("lab-client")
                    .map_err(|e| format!("{e:#}"))?
                    .to_string_lossy()
                    .into_owned();
                let addr = format!("{ip}:{port}");
                let out = self
                    .sys
                    .lab
                    .run_in("client", &[bin.as_str(), "dns", &addr, "foo.bar.com."])
                    .map_err(|e| format!("lab-client: {e:#}"))?;
                let text = String::from_utf8_lossy(&out.stdout);
                let v: Value =
                    serde_json::from_str(text.trim()).map_err(|e| format!("{e}: {text}"))?;
                if v["ok"] == true {
                    Ok(())
                } else {
                    Err(format!("no DNS answer from {addr}: {v}"))
                }
            }
            Check::Udp {
                gateway,
                port,
                backend,
            } => {
                let ip = self.address(gateway)?;
                let got = self.echo_lines("udp-echo", &ip, *port, 1)?;
                compare_udp(backend.as_ref(), &got[0])
            }
            Check::UdpWeights {
                gateway,
                port,
                weights,
            } => {
                let ip = self.address(gateway)?;
                let got = self.echo_lines("udp-echo", &ip, *port, 500)?;
                let mut pods = Vec::new();
                for v in &got {
                    compare_udp(None, v)?;
                    pods.push(v["pod"].as_str().unwrap_or_default().to_string());
                }
                spread(&pods, weights)
            }
            Check::LatestGeneration {
                kind,
                object,
                generation,
            } => {
                let st = if *kind == "GatewayClass" {
                    self.sys
                        .status_of(&format!("GatewayClass/{}", object.name))
                        .ok_or_else(|| format!("GatewayClass {} has no status", object.name))?
                } else {
                    self.status(kind, object)?
                };
                let lists: Vec<&Value> = if kind.ends_with("Route") || *kind == "BackendTLSPolicy" {
                    let field = if kind.ends_with("Route") {
                        "parents"
                    } else {
                        "ancestors"
                    };
                    st[field]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|p| &p["conditions"])
                        .collect()
                } else {
                    vec![&st["conditions"]]
                };
                let conds: Vec<&Value> = lists
                    .into_iter()
                    .flat_map(|c| c.as_array().into_iter().flatten())
                    .collect();
                if conds.is_empty() {
                    return Err(format!("{kind} {object}: no conditions: {st}"));
                }
                let stale: Vec<String> = conds
                    .iter()
                    .filter(|c| c["observedGeneration"] != *generation)
                    .map(|c| format!("{} (generation {})", c["type"], c["observedGeneration"]))
                    .collect();
                if stale.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "{kind} {object}: want observedGeneration {generation} on every condition; stale: {}",
                        stale.join(", ")
                    ))
                }
            }
            Check::GatewayReady { gateway } => {
                self.address(gateway)?;
                let st = self.status("Gateway", gateway)?;
                for t in ["Accepted", "Programmed"] {
                    if !Self::has_cond(&st["conditions"], &cond(t, "True")) {
                        return Err(format!("Gateway {gateway}: not {t}: {}", st["conditions"]));
                    }
                }
                Ok(())
            }
            Check::ClassCondition { class, type_ } => {
                let st = self
                    .sys
                    .status_of(&format!("GatewayClass/{class}"))
                    .ok_or_else(|| format!("GatewayClass {class} has no status"))?;
                let any = st["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == *type_);
                if any {
                    Ok(())
                } else {
                    Err(format!("GatewayClass {class}: no {type_}: {st}"))
                }
            }
            Check::GatewayAddresses { gateway, addresses } => {
                let st = self.status("Gateway", gateway)?;
                let got: Vec<(String, String)> = st["addresses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        let s = |k: &str| a[k].as_str().unwrap_or_default().to_string();
                        (s("type"), s("value"))
                    })
                    .collect();
                let want: Vec<(String, String)> = addresses
                    .iter()
                    .map(|a| ("IPAddress".to_string(), a.to_string()))
                    .collect();
                if got == want {
                    Ok(())
                } else {
                    Err(format!(
                        "Gateway {gateway}: status addresses {got:?}, want {want:?}"
                    ))
                }
            }
            Check::ListenerNames { gateway, names } => {
                let st = self.status("Gateway", gateway)?;
                let got: Vec<&str> = st["listeners"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|l| l["name"].as_str())
                    .collect();
                let (mut a, mut b) = (got.clone(), names.clone());
                a.sort();
                b.sort();
                if a == b {
                    Ok(())
                } else {
                    Err(format!(
                        "Gateway {gateway}: listeners {got:?} in its status, want {names:?}"
                    ))
                }
            }
            Check::Delete { .. } | Check::Edit { .. } | Check::Add { .. } => Ok(()),
        }
    }

    /// `count` connections with `lab-client tcp-echo` from the client, one JSON each.
    fn tcp_echo(
        &self,
        ip: &str,
        port: u16,
        count: usize,
    ) -> std::result::Result<Vec<Value>, String> {
        self.echo_lines("tcp-echo", ip, port, count)
    }

    /// `count` probes with `lab-client <sub>` (tcp-echo, udp-echo), one JSON each.
    fn echo_lines(
        &self,
        sub: &str,
        ip: &str,
        port: u16,
        count: usize,
    ) -> std::result::Result<Vec<Value>, String> {
        self.echo_lines_with(sub, ip, port, count, &[])
    }

    /// The same with more arguments after the address.
    fn echo_lines_with(
        &self,
        sub: &str,
        ip: &str,
        port: u16,
        count: usize,
        more: &[&str],
    ) -> std::result::Result<Vec<Value>, String> {
        let bin = bins::locate("lab-client")
            .map_err(|e| format!("{e:#}"))?
            .to_string_lossy()
            .into_owned();
        let addr = format!("{ip}:{port}");
        let n = count.to_string();
        let out = self
            .sys
            .lab
            .run_in(
                "client",
                &[&[bin.as_str(), sub, n.as_str(), addr.as_str()], more].concat(),
            )
            .map_err(|e| format!("lab-client: {e:#}"))?;
        let got: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(|e| format!("{e}: {l}")))
            .collect::<std::result::Result<_, _>>()?;
        if got.len() != count {
            return Err(format!("{} of {count} {sub} probes reported", got.len()));
        }
        Ok(got)
    }

    /// `count` calls of `r` with `lab-client grpc-json` from the client.
    fn grpc(
        &self,
        ip: &str,
        port: u16,
        r: &GrpcReq,
        count: usize,
    ) -> std::result::Result<Vec<GrpcAnswer>, String> {
        let bin = bins::locate("lab-client")
            .map_err(|e| format!("{e:#}"))?
            .to_string_lossy()
            .into_owned();
        let addr = format!("{ip}:{port}");
        let authority = if r.authority.is_empty() {
            addr.clone()
        } else {
            r.authority.clone()
        };
        let mut args = vec![
            bin,
            "grpc-json".into(),
            count.to_string(),
            addr,
            authority,
            r.method.into(),
        ];
        args.extend(r.metadata.iter().map(|(k, v)| format!("{k}={v}")));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self
            .sys
            .lab
            .run_in("client", &argv)
            .map_err(|e| format!("lab-client: {e:#}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let answers = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(parse_grpc_answer)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if answers.len() != count {
            return Err(format!(
                "{} of {count} gRPC calls answered (lab-client exit {:?})",
                answers.len(),
                out.status.code()
            ));
        }
        Ok(answers)
    }

    fn grpc_weights(
        &self,
        ip: &str,
        namespace: &str,
        weights: &[(&'static str, f64)],
    ) -> std::result::Result<(), String> {
        const TOTAL: usize = 500;
        // The suite adds random metadata to each call (its entropy); one fixed key is
        // enough here, as no route matches on it and every call is a new connection.
        let r = rpc("Echo", "").md("x-jitter", "k8slb");
        let answers = self.grpc(ip, 80, &r, TOTAL)?;
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for a in &answers {
            compare_grpc(&r, a)?;
            if a.namespace != namespace {
                return Err(format!("answered from {}", a.namespace));
            }
            let b = a.pod.strip_suffix("-lab-0").unwrap_or(&a.pod).to_string();
            *by.entry(b).or_default() += 1;
        }
        for (b, want) in weights {
            let got = *by.get(*b).unwrap_or(&0) as f64 / TOTAL as f64;
            if (got - want).abs() > 0.05 {
                return Err(format!(
                    "backend {b}: {got:.3} of the calls, want {want} (±0.05): {by:?}"
                ));
            }
        }
        Ok(())
    }

    /// The suite's WebSocket round trip with `lab-client ws-echo` from the client.
    fn websocket(&self, ip: &str, path: &str) -> std::result::Result<(), String> {
        let bin = bins::locate("lab-client")
            .map_err(|e| format!("{e:#}"))?
            .to_string_lossy()
            .into_owned();
        let addr = format!("{ip}:80");
        let out = self
            .sys
            .lab
            .run_in("client", &[&bin, "ws-echo", &addr, &addr, path])
            .map_err(|e| format!("lab-client: {e:#}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Value = serde_json::from_str(text.trim())
            .map_err(|e| format!("lab-client ws-echo: {e}: {text}"))?;
        if v["ok"] == true {
            Ok(())
        } else {
            Err(format!("WebSocket {path}: {}", v["error"]))
        }
    }

    /// One request with curl from the client.
    /// Whether the echo that answered `a` was shown the certificate of Secret `name`
    /// (its `tls.peerCertificates`, PEM; compared without whitespace).
    fn saw_client_cert(&self, name: &str, a: &Answer) -> std::result::Result<(), String> {
        let (crt, _) = self
            .client_certs
            .get(name)
            .ok_or_else(|| format!("no client certificate {name} in the runner"))?;
        let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
        let want = squash(&std::fs::read_to_string(crt).map_err(|e| e.to_string())?);
        let echo: Value = serde_json::from_str(&a.body).map_err(|e| e.to_string())?;
        let seen = echo["tls"]["peerCertificates"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if seen
            .iter()
            .filter_map(Value::as_str)
            .any(|p| want.contains(&squash(p)))
        {
            Ok(())
        } else {
            Err(format!(
                "the backend was not shown the client certificate of {name} ({} certificates: {})",
                seen.len(),
                if echo["tls"].is_null() {
                    "no TLS"
                } else {
                    "TLS"
                }
            ))
        }
    }

    fn send(&self, ip: &str, port: u16, tls: bool, r: &Req) -> std::result::Result<Answer, String> {
        let mut args: Vec<String> = vec![
            "curl".into(),
            "-s".into(),
            "-i".into(),
            "--path-as-is".into(),
            "-m".into(),
            "3".into(),
            "-X".into(),
            r.method.clone(),
        ];
        let url = if tls {
            let host = if r.host.is_empty() {
                ip
            } else {
                r.host.as_str()
            };
            // The connection is for the server name; the Host may be another one's.
            let name = r.sni.as_deref().unwrap_or(host);
            args.extend([
                "-k".into(),
                "--resolve".into(),
                format!("{name}:{port}:{ip}"),
            ]);
            if let Some(name) = r.client_cert {
                let (c, k) = self
                    .client_certs
                    .get(name)
                    .ok_or_else(|| format!("no client certificate {name} in the runner"))?;
                args.extend([
                    "--cert".into(),
                    c.display().to_string(),
                    "--key".into(),
                    k.display().to_string(),
                ]);
            }
            // The Host as the suite's client sends it: the name alone, never with the
            // port (curl would add `:<port>` to a URL's host on another port than 443).
            args.extend(["-H".into(), format!("Host: {host}")]);
            if r.h2 {
                args.push("--http2".into());
            }
            format!("https://{name}:{port}{}", r.path)
        } else {
            if !r.host.is_empty() {
                args.extend(["-H".into(), format!("Host: {}", r.host)]);
            }
            format!("http://{ip}:{port}{}", r.path)
        };
        for (k, v) in &r.headers {
            args.extend(["-H".into(), format!("{k}: {v}")]);
        }
        let sets: Vec<String> = r
            .backend_sets
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        args.extend([
            "-H".into(),
            format!("X-Echo-Set-Header: {}", sets.join(",")),
        ]);
        if r.method == "HEAD" {
            args.push("-I".into());
        }
        if r.h2c {
            args.push("--http2-prior-knowledge".into());
        }
        args.push(url);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self
            .sys
            .lab
            .run_in("client", &argv)
            .map_err(|e| format!("curl: {e:#}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if r.h2 && tls && !text.starts_with("HTTP/2 ") {
            return Err(format!(
                "not answered over HTTP/2 (ALPN): {}",
                text.lines().next().unwrap_or("no answer")
            ));
        }
        parse_answer(&text)
            .ok_or_else(|| format!("no HTTP answer (curl exit {:?})", out.status.code()))
    }

    /// `url` GET `times` times by one curl in the client (one connection), each answer
    /// followed by `write_out` (curl's `-w`): what it printed.
    fn curl_times(
        &self,
        url: &str,
        times: usize,
        write_out: &str,
    ) -> std::result::Result<String, String> {
        let mut args = vec!["curl", "-s", "-m", "20", "-w", write_out];
        args.extend(std::iter::repeat_n(url, times));
        let out = self
            .sys
            .lab
            .run_in("client", &args)
            .map_err(|e| format!("curl: {e:#}"))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// One try of [`Check::MirroredShare`].
    fn mirrored_share(
        &self,
        ip: &str,
        path: &str,
        backend: &str,
        percent: f64,
    ) -> std::result::Result<(), String> {
        const TOTAL: usize = 500;
        let id = format!(
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        // Each answer's body (one line of JSON), then its status on a line of its own.
        let text = self.curl_times(
            &format!("http://{ip}{path}?request-id={id}"),
            TOTAL,
            "\\n%{http_code}\\n",
        )?;
        let ok = text.lines().filter(|l| l.trim() == "200").count();
        if ok != TOTAL {
            return Err(format!("{ok} of {TOTAL} requests answered 200"));
        }
        // The copies are sent beside the answers: count until the count holds still.
        let want_line = format!("{backend}-lab-0 GET {path}?request-id={id}");
        let count = || -> std::result::Result<usize, String> {
            let log = std::fs::read_to_string(&self.echo_log)
                .map_err(|e| format!("{}: {e}", self.echo_log.display()))?;
            Ok(log.lines().filter(|l| l.trim() == want_line).count())
        };
        let mut got = count()?;
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(250));
            let now = count()?;
            if now == got {
                break;
            }
            got = now;
        }
        let p = percent / 100.0;
        let n = TOTAL as f64;
        let margin = 3.0 * (n * p * (1.0 - p)).sqrt();
        let (lo, hi) = (n * p - margin, n * p + margin);
        if (got as f64) < lo || (got as f64) > hi {
            return Err(format!(
                "{backend} got {got} copies of {TOTAL} requests for {path}, want {percent}% ({lo:.1} to {hi:.1})"
            ));
        }
        Ok(())
    }

    fn weights(
        &self,
        ip: &str,
        namespace: &str,
        weights: &[(&'static str, f64)],
    ) -> std::result::Result<(), String> {
        const TOTAL: usize = 500;
        let text = self.curl_times(&format!("http://{ip}/"), TOTAL, "\\n")?;
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        let mut n = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line)
                .map_err(|e| format!("not an echo answer ({e}): {line}"))?;
            if v["namespace"] != namespace {
                return Err(format!("answered from {}", v["namespace"]));
            }
            let pod = v["pod"].as_str().unwrap_or_default();
            let b = pod.strip_suffix("-lab-0").unwrap_or(pod).to_string();
            *by.entry(b).or_default() += 1;
            n += 1;
        }
        if n != TOTAL {
            return Err(format!("{n} of {TOTAL} requests answered"));
        }
        for (b, want) in weights {
            let got = *by.get(*b).unwrap_or(&0) as f64 / TOTAL as f64;
            if (got - want).abs() > 0.05 {
                return Err(format!(
                    "backend {b}: {got:.3} of the traffic, want {want} (±0.05): {by:?}"
                ));
            }
        }
        Ok(())
    }
}

/// An HTTP answer as curl -i printed it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// Lowercase names.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<String> {
        let vals: Vec<&str> = self
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect();
        (!vals.is_empty()).then(|| vals.join(","))
    }
}

/// The final response head (and its body) of curl -i's output (1xx heads skipped).
pub fn parse_answer(out: &str) -> Option<Answer> {
    let mut rest = out;
    loop {
        let (head, body) = rest.split_once("\r\n\r\n").unwrap_or((rest, ""));
        let mut lines = head.split("\r\n");
        let status: u16 = lines.next()?.split(' ').nth(1)?.trim().parse().ok()?;
        if (100..200).contains(&status) && body.starts_with("HTTP/") {
            rest = body;
            continue;
        }
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        return Some(Answer {
            status,
            headers,
            body: body.to_string(),
        });
    }
}

fn is_redirect(s: u16) -> bool {
    matches!(s, 300 | 301 | 302 | 303 | 304 | 305 | 307 | 308)
}

/// The suite's comparison of an answer with what a request expects (its
/// `CompareRoundTrip`, as facts: status; for 200 the request the backend saw, who
/// answered and the response headers; for a redirect where it points).
pub fn compare(r: &Req, a: &Answer, tls: bool) -> std::result::Result<(), String> {
    let timeout = |s: u16| s == 408 || s == 504;
    if r.fails {
        return if a.status == 200 || timeout(a.status) {
            Err(format!(
                "status {}, want a failure (not 200, not a timeout)",
                a.status
            ))
        } else {
            Ok(())
        };
    }
    if timeout(a.status) && r.status.iter().any(|s| timeout(*s)) {
        return Ok(());
    }
    if !r.status.contains(&a.status) {
        return Err(format!("status {}, want {:?}", a.status, r.status));
    }
    if a.status == 200 || a.status == 204 {
        for (k, v) in &r.resp_headers {
            match a.header(k) {
                Some(got) if got == *v => {}
                got => return Err(format!("response {k}: {got:?}, want {v}")),
            }
        }
        for k in &r.resp_absent {
            if let Some(got) = a.header(k) {
                return Err(format!("response {k}: {got}, want none"));
            }
        }
        for (k, vals) in &r.resp_one_of {
            let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            match a.header(k) {
                Some(got) if vals.iter().any(|v| squash(v) == squash(&got)) => {}
                got => return Err(format!("response {k}: {got:?}, want one of {vals:?}")),
            }
        }
        if r.any_answer {
            return Ok(());
        }
        let echo: Value = serde_json::from_str(&a.body)
            .map_err(|e| format!("the answer is not the echo's JSON ({e}): {}", a.body))?;
        let want_host = r.want_host.clone().unwrap_or_else(|| r.host.clone());
        if !want_host.is_empty() && echo["host"] != want_host.as_str() {
            return Err(format!(
                "backend saw host {}, want {want_host}",
                echo["host"]
            ));
        }
        let want_path = r.want_path.clone().unwrap_or_else(|| r.path.clone());
        if echo["path"] != want_path.as_str() {
            return Err(format!(
                "backend saw path {}, want {want_path}",
                echo["path"]
            ));
        }
        if let Some(n) = &r.want_sni {
            if echo["tls"]["serverName"] != n.as_str() {
                return Err(format!(
                    "backend saw TLS server name {}, want {n} (no tls: the proxy spoke cleartext)",
                    echo["tls"]["serverName"]
                ));
            }
        }
        if let Some(p) = &r.want_proto {
            if echo["proto"] != p.as_str() {
                return Err(format!("backend saw proto {}, want {p}", echo["proto"]));
            }
        }
        if echo["method"] != r.method.as_str() {
            return Err(format!(
                "backend saw method {}, want {}",
                echo["method"], r.method
            ));
        }
        if echo["namespace"] != r.namespace.as_str() {
            return Err(format!(
                "answered from namespace {}, want {}",
                echo["namespace"], r.namespace
            ));
        }
        let seen = |name: &str| -> Option<String> {
            let m = echo["headers"].as_object()?;
            let vals: Vec<String> = m
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                .flat_map(|(_, v)| v.as_array().cloned().unwrap_or_default())
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            (!vals.is_empty()).then(|| vals.join(","))
        };
        for (k, v) in &r.want_headers {
            match seen(k) {
                Some(got) if got == *v => {}
                got => return Err(format!("backend saw {k}: {got:?}, want {v}")),
            }
        }
        for k in &r.absent_headers {
            if let Some(got) = seen(k) {
                return Err(format!("backend saw {k}: {got}, want none"));
            }
        }
        let pod = echo["pod"].as_str().unwrap_or_default();
        if let Some(b) = &r.backend {
            if !pod.starts_with(b.as_str()) {
                return Err(format!("answered by {pod}, want {b}"));
            }
        }
    } else if is_redirect(a.status) {
        let Some(want) = &r.redirect else {
            return Ok(());
        };
        let loc = a
            .header("location")
            .ok_or_else(|| format!("{} without Location", a.status))?;
        let (scheme, rest) = loc
            .split_once("://")
            .ok_or_else(|| format!("Location {loc} is not absolute"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let path = path.split('?').next().unwrap_or_default();
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (h, p),
            _ => (authority, ""),
        };
        let req_scheme = if tls { "https" } else { "http" };
        let want_scheme = want.scheme.as_deref().unwrap_or(req_scheme);
        if scheme != want_scheme {
            return Err(format!(
                "redirect scheme {scheme}, want {want_scheme} ({loc})"
            ));
        }
        if let Some(h) = &want.host {
            if host != h {
                return Err(format!("redirect host {host}, want {h} ({loc})"));
            }
        }
        match &want.port {
            Some(p) if port != p => {
                return Err(format!("redirect port {port:?}, want {p} ({loc})"))
            }
            Some(_) => {}
            None => {
                let default = if scheme.eq_ignore_ascii_case("https") {
                    "443"
                } else {
                    "80"
                };
                if !port.is_empty() && port != default {
                    return Err(format!(
                        "redirect port {port}, want none or {default} ({loc})"
                    ));
                }
            }
        }
        let req_path = r.path.split('?').next().unwrap_or_default();
        let want_path = want.path.as_deref().unwrap_or(req_path);
        if path != want_path {
            return Err(format!("redirect path {path}, want {want_path} ({loc})"));
        }
    }
    Ok(())
}

/// The features claimed (supported) and not (unsupported) by `results`, as the upstream
/// suite reads a claim: a test runs when all its features are claimed, so a feature is
/// supported when some test naming it passed and none failed; a skipped test needs at
/// least one feature that is not claimed, and its features that no passing test claims
/// are the unsupported ones (a test of `BackendTLSPolicy` and
/// `BackendTLSPolicySANValidation`, skipped, leaves `BackendTLSPolicy` claimed when its
/// other tests pass).
pub(crate) fn claimed_features<'a>(rs: &[&&'a (Case, Outcome)]) -> (Vec<&'a str>, Vec<&'a str>) {
    use std::collections::BTreeSet;
    let of = |w: &str| -> BTreeSet<&'a str> {
        rs.iter()
            .filter(|r| r.1.word() == w)
            .flat_map(|r| r.0.features.iter().copied())
            .collect()
    };
    let (passed, failed, skipped) = (of("PASS"), of("FAIL"), of("SKIP"));
    let supported: BTreeSet<&str> = passed.difference(&failed).copied().collect();
    let unsupported = skipped
        .union(&failed)
        .filter(|f| !supported.contains(*f))
        .copied()
        .collect();
    (supported.into_iter().collect(), unsupported)
}

/// The upstream `ConformanceReport` (YAML) of `results` on `proxy`: per profile with a
/// passing test, core and extended counts, the features claimed and not
/// ([`claimed_features`]), skipped and failed tests listed.
pub fn report(proxy: &str, version: &str, results: &[(Case, Outcome)]) -> String {
    let mut profiles: BTreeMap<&str, Vec<&(Case, Outcome)>> = BTreeMap::new();
    for r in results {
        profiles.entry(r.0.profile).or_default().push(r);
    }
    let mut out = Vec::new();
    for (name, rs) in profiles {
        let part = |ext: bool| {
            let rs: Vec<_> = rs
                .iter()
                .filter(|r| r.0.features.is_empty() != ext)
                .collect();
            let count = |w: &str| rs.iter().filter(|r| r.1.word() == w).count();
            let (p, f, s) = (count("PASS"), count("FAIL"), count("SKIP"));
            let result = if f > 0 {
                "failure"
            } else if s > 0 {
                "partial"
            } else {
                "success"
            };
            let mut v = json!({
                "result": result,
                "statistics": {"Passed": p, "Failed": f, "Skipped": s},
            });
            let skipped: Vec<&str> = rs
                .iter()
                .filter(|r| r.1.word() == "SKIP")
                .map(|r| r.0.name)
                .collect();
            if !skipped.is_empty() {
                v["skippedTests"] = json!(skipped);
            }
            let failed: Vec<&str> = rs
                .iter()
                .filter(|r| r.1.word() == "FAIL")
                .map(|r| r.0.name)
                .collect();
            if !failed.is_empty() {
                v["failedTests"] = json!(failed);
            }
            if ext {
                let (supported, unsupported) = claimed_features(&rs);
                v["supportedFeatures"] = json!(supported);
                v["unsupportedFeatures"] = json!(unsupported);
            }
            (v, p + f + s)
        };
        // A profile none of whose tests passed is not claimed at all.
        if !rs.iter().any(|r| r.1 == Outcome::Pass) {
            continue;
        }
        let (core, _) = part(false);
        let (ext, n_ext) = part(true);
        let mut p = json!({"name": name, "core": core});
        if n_ext > 0 {
            p["extended"] = ext;
        }
        let summary = format!(
            "Core tests: {} passed, {} failed, {} skipped.",
            p["core"]["statistics"]["Passed"],
            p["core"]["statistics"]["Failed"],
            p["core"]["statistics"]["Skipped"]
        );
        p["summary"] = json!(summary);
        out.push(p);
    }
    let doc = json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "ConformanceReport",
        "date": chrono_like_now(),
        "gatewayAPIChannel": "experimental",
        "gatewayAPIVersion": "v1.6.1",
        "implementation": {
            "organization": "k8slb",
            "project": format!("k8slb-{proxy}"),
            "url": "https://github.com/k8slb/k8slb",
            "version": version,
            "contact": ["k8slb maintainers"],
        },
        "mode": "default",
        "profiles": out,
    });
    serde_yaml::to_string(&doc).unwrap_or_default()
}

/// Whether two reports say the same but for their `date`: a run that measured nothing new
/// leaves the committed report as it is.
pub fn same_report(old: &str, new: &str) -> bool {
    let body = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with("date:"))
            .map(str::to_string)
            .collect()
    };
    body(old) == body(new)
}

/// The date of a report: the day it ran (UTC, from `date`; no clock dependency here).
fn chrono_like_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The suite's `generateAcceptedListenerConditions`: ResolvedRefs, Accepted and
/// Programmed True, any reason.
fn accepted_listener() -> [Cond; 3] {
    [
        ("ResolvedRefs", "True"),
        ("Accepted", "True"),
        ("Programmed", "True"),
    ]
    .map(|(type_, status)| Cond {
        type_,
        status,
        reason: "",
    })
}

/// Every condition of `want` is among `conds` (`what`: whose, for the error).
fn conds_hold(what: &str, conds: &Value, want: &[Cond]) -> std::result::Result<(), String> {
    match want.iter().find(|w| !Runner::has_cond(conds, w)) {
        None => Ok(()),
        Some(w) => Err(format!(
            "{what}: want {} {} {}, got {conds}",
            w.type_, w.status, w.reason
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_that_differs_only_by_its_date_is_the_same_report() {
        let a = "apiVersion: v1\ndate: 2026-11-26T10:00:00Z\nprofiles: []\n";
        let b = "apiVersion: v1\ndate: 2026-11-27T11:00:00Z\nprofiles: []\n";
        let c = "apiVersion: v1\ndate: 2026-11-26T10:00:00Z\nprofiles: [x]\n";
        assert!(same_report(a, b));
        assert!(!same_report(a, c));
    }

    fn answer(status: u16, headers: &[(&str, &str)], body: Value) -> Answer {
        Answer {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
                .collect(),
            body: body.to_string(),
        }
    }

    fn echo(path: &str, pod: &str) -> Value {
        json!({"path": path, "host": "h", "method": "GET", "namespace": INFRA, "pod": pod,
               "headers": {"X-Header-Add": ["a", "b"]}})
    }

    #[test]
    fn an_answer_is_judged_by_status_backend_path_and_headers() {
        let r = get("/p").to("infra-backend-v1");
        assert!(compare(
            &r,
            &answer(200, &[], echo("/p", "infra-backend-v1-lab-0")),
            false
        )
        .is_ok());
        assert!(compare(
            &r,
            &answer(200, &[], echo("/p", "infra-backend-v2-lab-0")),
            false
        )
        .is_err());
        assert!(compare(
            &r,
            &answer(200, &[], echo("/q", "infra-backend-v1-lab-0")),
            false
        )
        .is_err());
        assert!(compare(&r, &answer(404, &[], json!({})), false).is_err());
        // Values of one header seen on several lines join with commas, as the suite's.
        let r = get("/p")
            .want_header("x-header-add", "a,b")
            .absent("X-Gone");
        assert!(compare(&r, &answer(200, &[], echo("/p", "x")), false).is_ok());
        let r = get("/p").want_header("X-Header-Add", "a");
        assert!(compare(&r, &answer(200, &[], echo("/p", "x")), false).is_err());
        let r = get("/p").absent("X-Header-Add");
        assert!(compare(&r, &answer(200, &[], echo("/p", "x")), false).is_err());
        // Not the echo's JSON (a proxy's own page) is no pass.
        let a = Answer {
            status: 200,
            headers: vec![],
            body: "<html>".into(),
        };
        assert!(compare(&get("/p"), &a, false).is_err());
    }

    #[test]
    fn a_redirect_is_judged_by_scheme_host_port_and_path_with_the_suites_defaults() {
        let loc = |l: &str| answer(302, &[("Location", l)], json!(null));
        let r = get("/a").redirect(
            302,
            Redirect {
                host: Some("example.org".into()),
                ..Redirect::default()
            },
        );
        assert!(compare(&r, &loc("http://example.org/a"), false).is_ok());
        assert!(compare(&r, &loc("http://example.org:80/a"), false).is_ok());
        assert!(
            compare(&r, &loc("http://example.org:8080/a"), false).is_err(),
            "port"
        );
        assert!(
            compare(&r, &loc("https://example.org/a"), false).is_err(),
            "scheme"
        );
        assert!(
            compare(&r, &loc("http://example.com/a"), false).is_err(),
            "host"
        );
        assert!(
            compare(&r, &loc("http://example.org/b"), false).is_err(),
            "path"
        );
        assert!(compare(
            &r,
            &answer(301, &[("Location", "http://example.org/a")], json!(null)),
            false
        )
        .is_err());
        let r = get("/a").redirect(
            302,
            Redirect {
                scheme: Some("https".into()),
                port: Some("8443".into()),
                ..Redirect::default()
            },
        );
        assert!(compare(&r, &loc("https://x:8443/a?q=1"), false).is_ok());
        assert!(compare(&r, &loc("https://x/a"), false).is_err());
    }

    #[test]
    fn curls_output_gives_the_final_answer_after_an_interim_one() {
        let out =
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nServer: x\r\nA: 1\r\n\r\nbody";
        let a = parse_answer(out).unwrap();
        assert_eq!(a.status, 404);
        assert_eq!(a.header("a").as_deref(), Some("1"));
        assert_eq!(a.body, "body");
        assert!(parse_answer("").is_none());
    }

    fn grpc_answer(grpc: Option<u32>, http: u16, method: &str, pod: &str) -> GrpcAnswer {
        GrpcAnswer {
            grpc,
            http,
            method: crate::grpc::method_path(method),
            namespace: INFRA.into(),
            pod: pod.into(),
        }
    }

    #[test]
    fn a_grpc_answer_is_judged_by_code_method_namespace_and_pod() {
        let r = rpc("EchoTwo", "grpc-infra-backend-v2");
        let good = grpc_answer(Some(0), 200, "EchoTwo", "grpc-infra-backend-v2-lab-0");
        assert_eq!(compare_grpc(&r, &good), Ok(()));
        // Another backend, another method, another namespace, a failed call.
        let other = grpc_answer(Some(0), 200, "EchoTwo", "grpc-infra-backend-v1-lab-0");
        assert!(compare_grpc(&r, &other).unwrap_err().contains("pod"));
        let method = grpc_answer(Some(0), 200, "Echo", "grpc-infra-backend-v2-lab-0");
        assert!(compare_grpc(&r, &method).unwrap_err().contains("saw"));
        let ns = GrpcAnswer {
            namespace: APP.into(),
            ..good.clone()
        };
        assert!(compare_grpc(&r, &ns).unwrap_err().contains("namespace"));
        let failed = grpc_answer(Some(14), 200, "", "");
        assert!(compare_grpc(&r, &failed).is_err());
    }

    #[test]
    fn a_proxy_404_without_grpc_status_counts_as_unimplemented() {
        let r = rpc("Echo", "").code(GRPC_UNIMPLEMENTED);
        assert_eq!(compare_grpc(&r, &grpc_answer(None, 404, "", "")), Ok(()));
        // The backend's own Unimplemented (EchoThree) too.
        assert_eq!(
            compare_grpc(&r, &grpc_answer(Some(12), 200, "", "")),
            Ok(())
        );
        // A 503 is Unavailable, an answered call OK: neither is Unimplemented.
        assert!(compare_grpc(&r, &grpc_answer(None, 503, "", "")).is_err());
        let ok = grpc_answer(Some(0), 200, "Echo", "grpc-infra-backend-v1-lab-0");
        assert!(compare_grpc(&r, &ok).is_err());
    }

    #[test]
    fn grpc_json_lines_parse_and_a_failed_call_is_an_error() {
        let a = parse_grpc_answer(
            r#"{"grpc":0,"http":200,"method":"/m","namespace":"ns","pod":"p-lab-0"}"#,
        )
        .unwrap();
        assert_eq!((a.grpc, a.http, a.pod.as_str()), (Some(0), 200, "p-lab-0"));
        let none = parse_grpc_answer(r#"{"grpc":null,"http":404}"#).unwrap();
        assert_eq!((none.grpc, none.http), (None, 404));
        assert!(parse_grpc_answer(r#"{"error":"connect refused"}"#).is_err());
    }

    #[test]
    fn a_tcp_echo_answer_is_judged_by_dialogue_namespace_and_pod_prefix() {
        let b = nn("tcp-backend-v1");
        let good = json!({"welcome": true, "pong": true, "isTLS": "false",
            "test": {"namespace": INFRA, "pod": "tcp-backend-v1-lab-0"}});
        assert_eq!(compare_tcp(&b, None, false, &good), Ok(()));
        let mut other = good.clone();
        other["test"]["pod"] = json!("tcp-backend-v10-lab-0");
        assert!(compare_tcp(&b, None, false, &other)
            .unwrap_err()
            .contains("pod"));
        let mut ns = good.clone();
        ns["test"]["namespace"] = json!(WEB);
        assert!(compare_tcp(&b, None, false, &ns)
            .unwrap_err()
            .contains("namespace"));
        let mut tls = good.clone();
        tls["isTLS"] = json!("true");
        assert!(compare_tcp(&b, None, false, &tls).is_err());
        let mut no_welcome = good.clone();
        no_welcome["welcome"] = json!(false);
        assert!(compare_tcp(&b, None, false, &no_welcome).is_err());
        assert!(compare_tcp(&b, None, false, &json!({"error": "connect: refused"})).is_err());
        // Over TLS: IS_TLS true and the server name the client asked for.
        let mut tls = good.clone();
        tls["isTLS"] = json!("true");
        tls["test"]["tls"] = json!({"serverName": "abc.example.com"});
        assert_eq!(
            compare_tcp(&b, Some("abc.example.com"), false, &tls),
            Ok(())
        );
        assert!(compare_tcp(&b, Some("other.example.com"), false, &tls).is_err());
        assert!(compare_tcp(&b, Some("abc.example.com"), false, &good).is_err());
        // Terminated by the Gateway: the backend sees neither TLS nor the name.
        assert_eq!(
            compare_tcp(&b, Some("tls.example.com"), true, &good),
            Ok(())
        );
        assert!(compare_tcp(&b, Some("abc.example.com"), true, &tls).is_err());
        let mut named = good.clone();
        named["test"]["tls"] = json!({"serverName": "tls.example.com"});
        assert!(compare_tcp(&b, Some("tls.example.com"), true, &named).is_err());
    }

    #[test]
    fn udp_answers_are_judged_by_service_and_namespace_and_weights_by_share() {
        let b = nn("udp-echo-by-port");
        let good = json!({"request": "x", "namespace": INFRA, "service": "udp-echo-by-port",
            "pod": "udp-echo-by-port-lab-0"});
        assert_eq!(compare_udp(Some(&b), &good), Ok(()));
        let mut other = good.clone();
        other["service"] = json!("udp-echo-by-section");
        assert!(compare_udp(Some(&b), &other).is_err());
        assert_eq!(compare_udp(None, &other), Ok(()));
        assert!(compare_udp(None, &json!({"error": "recv: timed out"})).is_err());
        let pods: Vec<String> = (0..100)
            .map(|i| if i < 70 { "v1-lab-0" } else { "v2-lab-0" }.to_string())
            .collect();
        assert_eq!(
            spread(&pods, &[("v1", 0.7), ("v2", 0.3), ("v3", 0.0)]),
            Ok(())
        );
        assert!(spread(&pods, &[("v1", 0.5)]).is_err());
    }
}
