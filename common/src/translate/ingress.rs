//! Ingresses → routes: a pure translation from Kubernetes `networking.k8s.io/v1`
//! Ingresses (with their IngressClasses, Services, EndpointSlices and what the watcher
//! learned about the TLS Secrets, never their bytes) to the [`crate::routes`] model of one
//! VIP, plus a [`Problem`] for everything refused.
//!
//! Two steps, so that the plan can allocate a VIP per pool in between:
//!
//! 1. [`select`]: which Ingresses are ours (class) and in which pool
//!    (`loadbalancer/pool`, default `default`);
//! 2. [`routes_for_vip`]: the listeners of one VIP from the Ingresses of its pool.
//!
//! **Class.** An Ingress is ours when `spec.ingressClassName` names an IngressClass whose
//! `spec.controller` is [`CONTROLLER`]; else when its legacy annotation
//! `kubernetes.io/ingress.class` names such a class (or is [`DEFAULT_CLASS_NAME`]); else,
//! with neither (an empty one counts as none), when one of our classes is marked default
//! (`ingressclass.kubernetes.io/is-default-class: "true"`) and no other controller's
//! class is. Ingresses of other classes are never looked at: no route, no problem.
//!
//! **Precedence** (the Ingress API's): Ingresses in order of creation, then
//! namespace/name. Exact hosts before `*.` wildcards (one label) before rules without a
//! host; within a host Exact paths, then Prefix paths longest first, element-wise
//! (`/foo` matches `/foo` and `/foo/bar`, not `/foobar`; a trailing `/` is ignored);
//! `ImplementationSpecific` is Prefix. A request whose host matches but whose path does
//! not gets `defaultBackend` (of the oldest Ingress that has one), else 404.
//!
//! **Conflicts.** Two Ingresses claiming the same host and path (same type, after
//! canonicalisation) on the same port: the older keeps it, the newer gets a
//! [`reason::PATH_CONFLICT`] problem for that path (its other paths still work). The same
//! for `defaultBackend`, for a host's certificate, for a backend's stickiness and for a
//! custom port used as HTTP by one Ingress and HTTPS by another.
//!
//! **Validation.** Hosts and paths are parsed into [`Hostname`] and [`HttpPath`]; a
//! value that does not parse skips its rule (or path, or TLS host) with a problem and
//! never reaches the model. Annotations are validated like the Service ones.

use crate::endpoints::endpoints;
use crate::names::{ObjectKey, PoolName, PortName};
use crate::problem::{ObjRef, Reason};
use crate::routes::{
    BackendId, BackendProtocol, BackendState, CertFile, Certificate, CookieName, FixedStatus,
    Hostname, HttpPath, HttpRoutes, Listener, ListenerProtocol, ListenerTls, PathMatch, Redirect,
    RedirectStatus, RouteAction, RouteMatch, RouteRule, Scheme, Sticky, VirtualHost,
};
use crate::state::Problem;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, IngressClass};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::rc::Rc;

/// Our IngressClass `spec.controller`.
pub const CONTROLLER: &str = "k8slb.io/ingress-controller";
/// The IngressClass name the manifests create; also accepted as the legacy annotation's
/// value when no IngressClass object exists (files mode).
pub const DEFAULT_CLASS_NAME: &str = "k8slb";
/// The legacy class annotation (before `spec.ingressClassName`).
pub const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
/// On an IngressClass: Ingresses without a class belong to it.
pub const DEFAULT_CLASS_MARK: &str = "ingressclass.kubernetes.io/is-default-class";
/// The only Secret type whose certificates are used.
pub use crate::certs::TLS_SECRET_TYPE;
/// Paths under this prefix are never redirected to HTTPS (ACME HTTP-01 challenges, which
/// cert-manager answers before the certificate exists).
pub const ACME_CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";
pub const DEFAULT_HTTP_PORT: u16 = 80;
pub const DEFAULT_HTTPS_PORT: u16 = 443;
/// Cookie name of `loadbalancer/stickiness: cookie` without `loadbalancer/stickiness-cookie`.
pub const DEFAULT_COOKIE: &str = "K8SLB";

/// The problem reasons of this module, in one place, as the typed
/// [`Reason`](crate::problem::Reason) values.
pub mod reason {
    use crate::problem::Reason;
    pub const INVALID_HOST: Reason = Reason::InvalidHost;
    pub const INVALID_PATH: Reason = Reason::InvalidPath;
    pub const PATH_CONFLICT: Reason = Reason::PathConflict;
    pub const DEFAULT_BACKEND_CONFLICT: Reason = Reason::DefaultBackendConflict;
    pub const CERTIFICATE_CONFLICT: Reason = Reason::CertificateConflict;
    pub const CERTIFICATE_HOST_MISMATCH: Reason = Reason::CertificateHostMismatch;
    pub const STICKINESS_CONFLICT: Reason = Reason::StickinessConflict;
    pub const PORT_CONFLICT: Reason = Reason::PortConflict;
    pub const PORT_RESERVED: Reason = Reason::PortReserved;
    pub const SERVICE_NOT_FOUND: Reason = Reason::ServiceNotFound;
    pub const SERVICE_PORT_NOT_FOUND: Reason = Reason::ServicePortNotFound;
    pub const UNSUPPORTED_BACKEND: Reason = Reason::UnsupportedBackend;
    pub const SECRET_NOT_FOUND: Reason = Reason::SecretNotFound;
    pub const SECRET_WRONG_TYPE: Reason = Reason::SecretWrongType;
    pub const SECRET_INVALID: Reason = Reason::SecretInvalid;
    pub const INVALID_ANNOTATION: Reason = Reason::InvalidAnnotation;
    pub const UNKNOWN_ANNOTATION: Reason = Reason::UnknownAnnotation;
    pub const INVALID_POOL: Reason = Reason::InvalidPool;
    pub const NOTHING_TO_SERVE: Reason = Reason::NothingToServe;
    pub const DUPLICATE_INGRESS: Reason = Reason::DuplicateIngress;
}

pub use super::refs::SecretMeta;

/// The objects the translation reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct IngressInput<'a> {
    pub ingresses: &'a [Ingress],
    pub classes: &'a [IngressClass],
    pub services: &'a [Service],
    pub slices: &'a [EndpointSlice],
    pub secrets: &'a [SecretMeta],
    /// The ports the LB nodes keep for themselves: no listener is made on them (None:
    /// none).
    pub reserved_ports: Option<&'a crate::config::ReservedPorts>,
    /// Who owns which host: a default backend never answers for a host that another
    /// namespace owns (None: no ownership).
    pub host_owners: Option<&'a crate::tenancy::HostOwners>,
}

/// The VIP being built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VipOptions {
    pub ip: IpAddr,
    pub pool: PoolName,
    /// The pool's own certificate (`<certPath>/<pool>.pem`) exists on the nodes: it is
    /// the default certificate of the HTTPS listeners.
    pub pool_certificate: bool,
}

/// Our Ingresses, by pool, each list in precedence order (creation, namespace, name).
#[derive(Debug, Clone, Default)]
pub struct Selection<'a> {
    pub by_pool: BTreeMap<PoolName, Vec<&'a Ingress>>,
    pub problems: Vec<Problem>,
}

/// The routes of one VIP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VipRoutes {
    pub routes: HttpRoutes,
    /// Sorted, deduplicated.
    pub problems: Vec<Problem>,
}

/// `<ns>/<name>` of an Ingress, if its names are valid (Kubernetes checks them).
pub fn key_of(ing: &Ingress) -> Option<ObjectKey> {
    ObjectKey::new(ns_of(ing), name_of(ing)).ok()
}

/// `"Ingress <ns>/<name>"`, printable whatever the names hold.
pub fn object(ing: &Ingress) -> ObjRef {
    ObjRef::Ingress {
        namespace: short(ns_of(ing)),
        name: short(name_of(ing)),
    }
}

fn ns_of(ing: &Ingress) -> &str {
    ing.metadata.namespace.as_deref().unwrap_or("default")
}

fn name_of(ing: &Ingress) -> &str {
    ing.metadata.name.as_deref().unwrap_or_default()
}

fn short(s: &str) -> String {
    s.escape_debug().take(64).collect()
}

fn problem(ing: &Ingress, reason: Reason, message: String) -> Problem {
    Problem {
        object: object(ing),
        reason,
        message,
    }
}

/// Is this Ingress ours? See the module documentation.
pub fn is_ours(ing: &Ingress, classes: &[IngressClass]) -> bool {
    let ours = |c: &IngressClass| {
        c.spec.as_ref().and_then(|s| s.controller.as_deref()) == Some(CONTROLLER)
    };
    let named_ours = |name: &str| {
        classes
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(name) && ours(c))
    };
    // An empty class (`ingressClassName: ""`) is no class.
    if let Some(name) = ing
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_deref())
        .filter(|n| !n.is_empty())
    {
        return named_ours(name);
    }
    if let Some(name) = ing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CLASS_ANNOTATION))
        .filter(|n| !n.trim().is_empty())
    {
        return name == DEFAULT_CLASS_NAME || named_ours(name);
    }
    let is_default = |c: &&IngressClass| {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DEFAULT_CLASS_MARK))
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    };
    let defaults: Vec<&IngressClass> = classes.iter().filter(is_default).collect();
    !defaults.is_empty() && defaults.iter().all(|c| ours(c))
}

/// Our Ingresses by pool. An Ingress listed twice (two files) counts once: the first read.
pub fn select<'a>(ingresses: &'a [Ingress], classes: &[IngressClass]) -> Selection<'a> {
    let mut out = Selection::default();
    let mut seen = BTreeSet::new();
    let mut ours: Vec<&Ingress> = Vec::new();
    for ing in ingresses.iter().filter(|i| is_ours(i, classes)) {
        if seen.insert((ns_of(ing), name_of(ing))) {
            ours.push(ing);
        } else {
            out.problems.push(problem(
                ing,
                reason::DUPLICATE_INGRESS,
                "listed more than once; the first copy read is used".into(),
            ));
        }
    }
    ours.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, ns_of(a), name_of(a)).cmp(&(
            &b.metadata.creation_timestamp,
            ns_of(b),
            name_of(b),
        ))
    });
    for ing in ours {
        let pool = annotations(ing)
            .into_iter()
            .find(|(k, _)| k == "pool")
            .map(|(_, v)| v);
        match pool.as_deref().unwrap_or("default").parse::<PoolName>() {
            Ok(p) => out.by_pool.entry(p).or_default().push(ing),
            Err(e) => out.problems.push(problem(
                ing,
                reason::INVALID_POOL,
                format!("loadbalancer/pool: {e}; not served"),
            )),
        }
    }
    out
}

/// `loadbalancer/scale` of an Ingress: how many VIPs its pool's Ingresses get (the
/// largest asked for by one of them); 1 when absent or invalid (reported by the
/// translation).
pub fn scale_of(ing: &Ingress) -> u8 {
    annotations(ing)
        .into_iter()
        .find(|(k, _)| k == "scale")
        .and_then(|(_, v)| crate::scale::parse(&v).ok())
        .unwrap_or(1)
}

/// `loadbalancer/*` annotations: (option lowercased, value trimmed).
fn annotations(ing: &Ingress) -> Vec<(String, String)> {
    ing.metadata
        .annotations
        .iter()
        .flatten()
        .filter_map(|(k, v)| {
            let lk = k.to_ascii_lowercase();
            lk.strip_prefix("loadbalancer/")
                .map(|o| (o.to_string(), v.trim().to_string()))
        })
        .collect()
}

const KNOWN_ANNOTATIONS: &[&str] = &[
    "pool",
    "sslredirect",
    "http",
    "http-port",
    "https-port",
    "stickiness",
    "stickiness-cookie",
    "scale",
];

/// An Ingress's `loadbalancer/*` settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    ssl_redirect: bool,
    http: bool,
    http_port: u16,
    https_port: u16,
    sticky: Option<Sticky>,
}

impl Settings {
    fn read(ing: &Ingress, problems: &mut BTreeSet<Problem>) -> Settings {
        let mut s = Settings {
            ssl_redirect: true,
            http: true,
            http_port: DEFAULT_HTTP_PORT,
            https_port: DEFAULT_HTTPS_PORT,
            sticky: None,
        };
        let bad = |problems: &mut BTreeSet<Problem>, opt: &str, v: &str, what: &str| {
            problems.insert(problem(
                ing,
                reason::INVALID_ANNOTATION,
                format!(
                    "loadbalancer/{opt}: {:?} is not {what}; ignored",
                    v.chars().take(64).collect::<String>()
                ),
            ));
        };
        let mut kind: Option<&str> = None;
        let mut cookie: Option<CookieName> = None;
        let list = annotations(ing);
        for (opt, v) in &list {
            if !KNOWN_ANNOTATIONS.contains(&opt.as_str()) {
                let why = if opt == "config" {
                    " (a raw proxy configuration from tenants is not supported, on purpose: see docs/ingress.md)"
                } else {
                    ""
                };
                problems.insert(problem(
                    ing,
                    reason::UNKNOWN_ANNOTATION,
                    format!(
                        "annotation loadbalancer/{} is not one of loadbalancer/{{{}}}; ignored{why}",
                        short(opt),
                        KNOWN_ANNOTATIONS.join(",")
                    ),
                ));
                continue;
            }
            if v.len() > 256 || v.chars().any(char::is_control) {
                bad(problems, opt, v, "a short single-line value");
                continue;
            }
            let flag = |v: &str| match v.to_ascii_lowercase().as_str() {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            };
            let port = |v: &str| v.parse::<u16>().ok().filter(|p| *p != 0);
            match opt.as_str() {
                "pool" => {} // read by `select`
                "scale" => {
                    if let Err(message) = crate::scale::parse(v) {
                        problems.insert(problem(ing, reason::INVALID_ANNOTATION, message));
                    }
                }
                "sslredirect" => match flag(v) {
                    Some(b) => s.ssl_redirect = b,
                    None => bad(problems, opt, v, "true or false"),
                },
                "http" => match flag(v) {
                    Some(b) => s.http = b,
                    None => bad(problems, opt, v, "true or false"),
                },
                "http-port" => match port(v) {
                    Some(p) => s.http_port = p,
                    None => bad(problems, opt, v, "a port (1-65535)"),
                },
                "https-port" => match port(v) {
                    Some(p) => s.https_port = p,
                    None => bad(problems, opt, v, "a port (1-65535)"),
                },
                "stickiness" => match v.to_ascii_lowercase().as_str() {
                    "none" | "" => kind = Some("none"),
                    "source" => kind = Some("source"),
                    "cookie" => kind = Some("cookie"),
                    _ => bad(problems, opt, v, "none, source or cookie"),
                },
                "stickiness-cookie" => match v.parse::<CookieName>() {
                    Ok(c) => cookie = Some(c),
                    Err(_) => bad(
                        problems,
                        opt,
                        v,
                        "a cookie name (letters, digits, -_.!*+^~)",
                    ),
                },
                _ => unreachable!("unknown options are skipped above"),
            }
        }
        s.sticky = match kind {
            Some("source") => Some(Sticky::Source),
            Some("cookie") => Some(Sticky::Cookie {
                name: cookie.unwrap_or_else(|| DEFAULT_COOKIE.parse().expect("valid")),
            }),
            _ => None,
        };
        if s.http && s.http_port == s.https_port {
            problems.insert(problem(
                ing,
                reason::PORT_CONFLICT,
                format!(
                    "loadbalancer/http-port and https-port are both {}; plain HTTP is off",
                    s.http_port
                ),
            ));
            s.http = false;
        }
        s
    }
}

/// Services and EndpointSlices indexed by (namespace, name).
struct Index<'a> {
    services: super::refs::ServiceRefs<'a>,
    secrets: super::refs::SecretRefs<'a>,
    reserved_ports: Option<&'a crate::config::ReservedPorts>,
    host_owners: Option<&'a crate::tenancy::HostOwners>,
}

impl<'a> Index<'a> {
    fn new(input: &IngressInput<'a>) -> Index<'a> {
        Index {
            services: super::refs::ServiceRefs::new(input.services, input.slices),
            secrets: super::refs::SecretRefs::new(input.secrets),
            reserved_ports: input.reserved_ports,
            host_owners: input.host_owners,
        }
    }

    /// The backend of an Ingress backend reference, with the port name and the slices
    /// its endpoints come from (read only when the backend is new); or why not.
    #[allow(clippy::type_complexity)]
    fn backend<'s>(
        &'s self,
        ns: &'s str,
        b: &'s IngressBackend,
    ) -> Result<
        (
            BackendId,
            Option<PortName>,
            &'s [&'s EndpointSlice],
            BackendProtocol,
        ),
        (Reason, String),
    > {
        use super::refs::{PortRef, ServiceRefError};
        let unsupported = |m: String| (reason::UNSUPPORTED_BACKEND, m);
        if b.resource.is_some() {
            return Err(unsupported(
                "a resource backend is not supported (only Services)".into(),
            ));
        }
        let Some(sb) = &b.service else {
            return Err(unsupported("the backend names no Service".into()));
        };
        let want = sb.port.as_ref();
        let port = want.and_then(|w| match (w.number, w.name.as_deref()) {
            (Some(n), _) => Some(PortRef::Number(n)),
            (None, Some(n)) => Some(PortRef::Name(n)),
            (None, None) => None,
        });
        let (namespace, name) = (ns, sb.name.as_str());
        match self.services.port(ns, &sb.name, port, "TCP") {
            Ok(p) => {
                let protocol = BackendProtocol::from_app_protocol(p.app_protocol).map_err(|e| {
                    unsupported(format!(
                        "Service {namespace}/{name} port {}: {e}; its paths answer 503",
                        p.id.port
                    ))
                })?;
                Ok((p.id, p.port_name, p.slices, protocol))
            }
            Err(ServiceRefError::InvalidName) => Err((
                reason::SERVICE_NOT_FOUND,
                format!(
                    "Service {}/{} is not a valid Service name",
                    short(ns),
                    short(&sb.name)
                ),
            )),
            Err(ServiceRefError::NotFound) => Err((
                reason::SERVICE_NOT_FOUND,
                format!("Service {namespace}/{name} does not exist; its paths answer 503"),
            )),
            Err(ServiceRefError::ExternalName) => Err(unsupported(format!(
                "Service {namespace}/{name} is of type ExternalName, which has no endpoints"
            ))),
            Err(ServiceRefError::NoPort) => {
                let which = match want {
                    Some(w) => w
                        .number
                        .map(|n| n.to_string())
                        .or_else(|| w.name.as_deref().map(short))
                        .unwrap_or_default(),
                    None => String::new(),
                };
                Err((
                    reason::SERVICE_PORT_NOT_FOUND,
                    format!(
                        "Service {namespace}/{name} has no TCP port {which:?}; its paths answer 503"
                    ),
                ))
            }
            Err(ServiceRefError::OutOfRange(p)) => Err((
                reason::SERVICE_PORT_NOT_FOUND,
                format!("Service {namespace}/{name} port {p} is out of range"),
            )),
        }
    }
}

/// A listener being built.
struct Building {
    protocol: ListenerProtocol,
    /// The Ingress that first used the port (owner of its protocol).
    owner: Rc<str>,
    hosts: BTreeMap<Option<Hostname>, Vec<RouteRule>>,
    /// (host, match) → the Ingress that claimed it.
    claims: HashMap<(Option<Hostname>, RouteMatch), Rc<str>>,
    default_action: Option<(RouteAction, Rc<str>)>,
    /// The namespace of the default action's Ingress.
    default_namespace: Option<String>,
    /// SNI host → (certificate, Ingress).
    certs: BTreeMap<Hostname, (CertFile, Rc<str>)>,
    /// First certificate of a `spec.tls` entry without hosts.
    hostless_cert: Option<CertFile>,
    /// The rules redirected to HTTPS whose path covers the ACME challenge directory
    /// (`/`, `/.well-known`, ...), with the action they would have had: see
    /// [`acme_passthrough`].
    acme_covers: HashMap<(Option<Hostname>, RouteMatch), RouteAction>,
}

/// A `spec.tls` certificate of one Ingress that can be served.
struct TlsEntry {
    file: CertFile,
    /// The hosts it is served for (those its certificate's names cover).
    hosts: Vec<Hostname>,
    /// The entry names no hosts: a default certificate candidate.
    hostless: bool,
}

impl TlsEntry {
    fn covers(&self, host: Option<&Hostname>) -> bool {
        match host {
            None => self.hostless,
            Some(h) => self
                .hosts
                .iter()
                .any(|t| t == h || (!h.is_wildcard() && t.is_wildcard() && t.matches(h.as_str()))),
        }
    }
}

/// The listeners of one VIP from `ingresses` (those of its pool, in precedence order,
/// as [`select`] gives them).
pub fn routes_for_vip(
    ingresses: &[&Ingress],
    input: &IngressInput<'_>,
    opts: &VipOptions,
) -> VipRoutes {
    routes_for_vip_except(ingresses, input, opts, &BTreeMap::new())
}

/// [`routes_for_vip`] on a VIP whose `taken` ports (port → who holds it, e.g.
/// `Service ns/name`) belong to others: an Ingress that wants one gets a
/// [`reason::PORT_CONFLICT`] problem and is not served on it.
pub fn routes_for_vip_except(
    ingresses: &[&Ingress],
    input: &IngressInput<'_>,
    opts: &VipOptions,
    taken: &BTreeMap<u16, String>,
) -> VipRoutes {
    let idx = Index::new(input);
    let mut t = Translation {
        idx: &idx,
        opts,
        taken,
        listeners: BTreeMap::new(),
        backends: BTreeMap::new(),
        problems: BTreeSet::new(),
    };
    for ing in ingresses {
        t.add_ingress(ing);
    }
    t.finish()
}

/// The listeners of one VIP, built Ingress after Ingress (in precedence order: the
/// first to claim a port, a host and path, a certificate or a backend's stickiness
/// keeps it).
struct Translation<'t, 'a> {
    idx: &'t Index<'a>,
    opts: &'t VipOptions,
    taken: &'t BTreeMap<u16, String>,
    listeners: BTreeMap<u16, Building>,
    /// Backend → its state and the Ingress that set its stickiness.
    backends: BTreeMap<BackendId, (BackendState, Rc<str>)>,
    problems: BTreeSet<Problem>,
}

/// The Ingress being added.
struct Current<'g> {
    ing: &'g Ingress,
    /// `Ingress <ns>/<name>`, as owners are named in conflict messages.
    me: Rc<str>,
    settings: Settings,
    tls: Vec<TlsEntry>,
    /// The ports it got, with their protocols.
    ports: Vec<(u16, ListenerProtocol)>,
    /// HTTP is redirected only to an HTTPS port this Ingress really got.
    https_served: bool,
}

impl Translation<'_, '_> {
    fn add_ingress(&mut self, ing: &Ingress) {
        let me: Rc<str> = object(ing).to_string().into();
        let settings = Settings::read(ing, &mut self.problems);
        let tls = tls_entries(ing, self.idx, &mut self.problems);
        let ports = self.claim_ports(ing, &me, &settings, &tls);
        if ports.is_empty() {
            self.problems.insert(problem(
                ing,
                reason::NOTHING_TO_SERVE,
                "plain HTTP is off (loadbalancer/http: false) and no TLS certificate can be served; nothing is served".into(),
            ));
            return;
        }
        let cur = Current {
            ing,
            me,
            https_served: ports.iter().any(|&(_, p)| p == ListenerProtocol::Https),
            settings,
            tls,
            ports,
        };
        self.add_certificates(&cur);
        self.add_rules(&cur);
        self.add_default_backend(&cur);
    }

    /// The ports `ing` serves on: HTTP unless turned off, HTTPS when it has a
    /// certificate; a port another tenant holds, or that an older Ingress uses with the
    /// other protocol, is refused with a problem.
    fn claim_ports(
        &mut self,
        ing: &Ingress,
        me: &Rc<str>,
        settings: &Settings,
        tls: &[TlsEntry],
    ) -> Vec<(u16, ListenerProtocol)> {
        let mut ports: Vec<(u16, ListenerProtocol)> = Vec::new();
        if settings.http {
            ports.push((settings.http_port, ListenerProtocol::Http));
        }
        if !tls.is_empty() {
            ports.push((settings.https_port, ListenerProtocol::Https));
        }
        ports.retain(|&(port, protocol)| {
            if let Some(reserved) = self.idx.reserved_ports.filter(|r| r.contains(port)) {
                self.problems.insert(problem(
                    ing,
                    reason::PORT_RESERVED,
                    format!(
                        "port {port} is kept by the LB nodes for themselves (global config reservedPorts: {reserved}); not served on it"
                    ),
                ));
                return false;
            }
            if let Some(holder) = self.taken.get(&port) {
                self.problems.insert(problem(
                    ing,
                    reason::PORT_CONFLICT,
                    format!(
                        "port {port} of IP {} is used by {holder}; not served on it",
                        self.opts.ip
                    ),
                ));
                return false;
            }
            let l = self.listeners.entry(port).or_insert_with(|| Building {
                protocol,
                owner: me.clone(),
                hosts: BTreeMap::new(),
                claims: HashMap::new(),
                default_action: None,
                default_namespace: None,
                certs: BTreeMap::new(),
                hostless_cert: None,
                acme_covers: HashMap::new(),
            });
            if l.protocol != protocol {
                self.problems.insert(problem(
                    ing,
                    reason::PORT_CONFLICT,
                    format!(
                        "port {port} is already {} for {}; not served on it as {}",
                        proto_name(l.protocol),
                        l.owner,
                        proto_name(protocol)
                    ),
                ));
                return false;
            }
            true
        });
        ports
    }

    /// The certificates of `cur`'s TLS hosts on its HTTPS ports, for SNI.
    fn add_certificates(&mut self, cur: &Current<'_>) {
        for &(port, protocol) in &cur.ports {
            if protocol != ListenerProtocol::Https {
                continue;
            }
            let l = self.listeners.get_mut(&port).expect("claimed");
            for t in &cur.tls {
                if t.hostless && l.hostless_cert.is_none() {
                    l.hostless_cert = Some(t.file.clone());
                }
                for h in &t.hosts {
                    match l.certs.get(h) {
                        Some((f, owner)) if f != &t.file => {
                            self.problems.insert(problem(
                                cur.ing,
                                reason::CERTIFICATE_CONFLICT,
                                format!("host {h} already has a certificate on port {port} from {owner}; this Ingress's is not used for it"),
                            ));
                        }
                        Some(_) => {}
                        None => {
                            l.certs.insert(h.clone(), (t.file.clone(), cur.me.clone()));
                        }
                    }
                }
            }
        }
    }

    /// The rules' paths, each on every port of `cur`.
    fn add_rules(&mut self, cur: &Current<'_>) {
        let spec = cur.ing.spec.as_ref();
        for rule in spec.and_then(|s| s.rules.as_ref()).into_iter().flatten() {
            let host = match rule.host.as_deref().unwrap_or("") {
                "" => None,
                h => match h.parse::<Hostname>() {
                    Ok(h) => Some(h),
                    Err(e) => {
                        self.problems.insert(problem(
                            cur.ing,
                            reason::INVALID_HOST,
                            format!("rule skipped: {e}"),
                        ));
                        continue;
                    }
                },
            };
            let Some(http) = &rule.http else { continue };
            for p in &http.paths {
                let Some(m) = self.path_match(cur.ing, p) else {
                    continue;
                };
                let action = self.resolve(cur, &p.backend);
                self.add_route(cur, host.clone(), RouteMatch::on_path(m), action);
            }
        }
    }

    /// A path of a rule as a match, or a problem.
    fn path_match(
        &mut self,
        ing: &Ingress,
        p: &k8s_openapi::api::networking::v1::HTTPIngressPath,
    ) -> Option<PathMatch> {
        let raw = p.path.as_deref().unwrap_or("");
        let raw = if raw.is_empty() && p.path_type == "ImplementationSpecific" {
            "/"
        } else {
            raw
        };
        let path = match raw.parse::<HttpPath>() {
            Ok(p) => p,
            Err(e) => {
                self.problems.insert(problem(
                    ing,
                    reason::INVALID_PATH,
                    format!("path skipped: {e}"),
                ));
                return None;
            }
        };
        match p.path_type.as_str() {
            "Exact" => Some(PathMatch::Exact(path)),
            "Prefix" | "ImplementationSpecific" => Some(PathMatch::prefix(&path)),
            other => {
                self.problems.insert(problem(
                    ing,
                    reason::INVALID_PATH,
                    format!("path skipped: pathType {:?} is not Exact, Prefix or ImplementationSpecific", short(other)),
                ));
                None
            }
        }
    }

    /// One (host, match) of `cur` on each of its ports, unless an older Ingress claimed
    /// it there; on HTTP, a redirect to HTTPS when the host has a certificate.
    fn add_route(
        &mut self,
        cur: &Current<'_>,
        host: Option<Hostname>,
        m: RouteMatch,
        action: RouteAction,
    ) {
        for &(port, protocol) in &cur.ports {
            let l = self.listeners.get_mut(&port).expect("claimed");
            match l.claims.entry((host.clone(), m.clone())) {
                std::collections::hash_map::Entry::Occupied(o) if o.get() != &cur.me => {
                    let owner = o.get();
                    self.problems.insert(problem(
                        cur.ing,
                        reason::PATH_CONFLICT,
                        format!(
                            "host {} path {} on port {port} is already served for {owner} (older); not served for this Ingress",
                            host.as_ref().map_or("*", Hostname::as_str),
                            describe_match(&m)
                        ),
                    ));
                    continue;
                }
                // The same path twice in one Ingress: the first.
                std::collections::hash_map::Entry::Occupied(_) => continue,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(cur.me.clone());
                }
            }
            let s = &cur.settings;
            let redirect = protocol == ListenerProtocol::Http
                && s.ssl_redirect
                && cur.https_served
                && cur.tls.iter().any(|t| t.covers(host.as_ref()))
                && !is_acme(&m);
            if redirect && m.path.matches(ACME_CHALLENGE_PREFIX) {
                l.acme_covers
                    .insert((host.clone(), m.clone()), action.clone());
            }
            let action = if redirect {
                RouteAction::Redirect(Redirect {
                    scheme: Some(Scheme::Https),
                    host: None,
                    port: (s.https_port != DEFAULT_HTTPS_PORT).then_some(s.https_port),
                    path: None,
                    replace_prefix: None,
                    status: RedirectStatus::PermanentRedirect308,
                })
            } else {
                action.clone()
            };
            l.hosts.entry(host.clone()).or_default().push(RouteRule {
                matches: m.clone(),
                action,
                filters: Default::default(),
                owner: Some(object(cur.ing)),
            });
        }
    }

    /// Forward to the backend an Ingress names (recorded in the backend table, with
    /// `cur`'s stickiness unless an older Ingress set it), or 503 with a problem.
    fn resolve(&mut self, cur: &Current<'_>, b: &IngressBackend) -> RouteAction {
        let ns = ns_of(cur.ing);
        match self.idx.backend(ns, b) {
            Ok((id, port_name, slices, protocol)) => {
                match self.backends.get(&id) {
                    Some((st, owner))
                        if st.stickiness != cur.settings.sticky && owner != &cur.me =>
                    {
                        self.problems.insert(problem(
                            cur.ing,
                            reason::STICKINESS_CONFLICT,
                            format!("backend {id} already has the stickiness of {owner} (older); this Ingress's is not applied"),
                        ));
                    }
                    Some(_) => {}
                    None => {
                        self.backends.insert(
                            id.clone(),
                            (
                                BackendState {
                                    endpoints: endpoints(
                                        port_name.as_ref().map_or("", PortName::as_str),
                                        "TCP",
                                        slices,
                                    ),
                                    stickiness: cur.settings.sticky.clone(),
                                    protocol,
                                },
                                cur.me.clone(),
                            ),
                        );
                    }
                }
                RouteAction::forward(id)
            }
            Err((why, message)) => {
                self.problems.insert(problem(cur.ing, why, message));
                RouteAction::Respond {
                    status: FixedStatus::ServiceUnavailable503,
                }
            }
        }
    }

    /// `spec.defaultBackend`: the default action of each of `cur`'s ports that has none.
    fn add_default_backend(&mut self, cur: &Current<'_>) {
        let Some(db) = cur
            .ing
            .spec
            .as_ref()
            .and_then(|s| s.default_backend.as_ref())
        else {
            return;
        };
        let action = self.resolve(cur, db);
        for &(port, _) in &cur.ports {
            let l = self.listeners.get_mut(&port).expect("claimed");
            match &l.default_action {
                Some((_, owner)) if owner != &cur.me => {
                    self.problems.insert(problem(
                        cur.ing,
                        reason::DEFAULT_BACKEND_CONFLICT,
                        format!("port {port} already has the defaultBackend of {owner} (older); this one is not used"),
                    ));
                }
                Some(_) => {}
                None => {
                    l.default_action = Some((action.clone(), cur.me.clone()));
                    l.default_namespace = cur.ing.metadata.namespace.clone();
                }
            }
        }
    }

    fn finish(self) -> VipRoutes {
        let opts = self.opts;
        let mut routes = HttpRoutes {
            listeners: self
                .listeners
                .into_iter()
                .map(|(port, b)| b.into_listener(opts, port, self.idx.host_owners))
                .collect(),
            backends: self
                .backends
                .into_iter()
                .map(|(k, (v, _))| (k, v))
                .collect(),
            ..HttpRoutes::default()
        };
        routes.normalize();
        VipRoutes {
            routes,
            problems: self.problems.into_iter().collect(),
        }
    }
}

impl Building {
    fn into_listener(
        self,
        opts: &VipOptions,
        port: u16,
        owners: Option<&crate::tenancy::HostOwners>,
    ) -> Listener {
        // A default backend never answers for a host that another namespace owns: its
        // unmatched requests get 404 (a rule after all of the host's own).
        let foreign = |host: &Option<Hostname>| -> bool {
            match (owners, host, self.default_namespace.as_deref()) {
                (Some(o), Some(h), Some(ns)) => o.owner_of(h.as_str(), ns).is_some(),
                _ => false,
            }
        };
        let not_found = RouteRule {
            matches: RouteMatch::on_path(PathMatch::prefix(&HttpPath::root())),
            action: RouteAction::Respond {
                status: FixedStatus::NotFound404,
            },
            filters: Default::default(),
            // There in place of the default backend's answer.
            owner: self
                .default_action
                .as_ref()
                .and_then(|(_, owner)| owner.parse().ok()),
        };
        let tls = (self.protocol == ListenerProtocol::Https).then(|| {
            // A file two Ingresses name (the same Secret) is owned by the older.
            let mut by_file: BTreeMap<CertFile, (Vec<Hostname>, Rc<str>)> = BTreeMap::new();
            for (h, (f, owner)) in self.certs {
                by_file
                    .entry(f)
                    .or_insert_with(|| (vec![], owner))
                    .0
                    .push(h);
            }
            ListenerTls {
                certificates: by_file
                    .into_iter()
                    .map(|(file, (hosts, owner))| Certificate {
                        file,
                        hosts,
                        owner: owner.parse().ok(),
                    })
                    .collect(),
                default_certificate: if opts.pool_certificate {
                    Some(CertFile::Pool {
                        pool: opts.pool.clone(),
                    })
                } else {
                    self.hostless_cert
                },
            }
        });
        let mut l = Listener {
            ip: opts.ip,
            port,
            protocol: self.protocol,
            tls,
            virtual_hosts: self
                .hosts
                .into_iter()
                .map(|(host, mut rules)| {
                    let catch_all = rules.iter().any(|r| {
                        r.matches == RouteMatch::on_path(PathMatch::prefix(&HttpPath::root()))
                    });
                    if !catch_all && foreign(&host) {
                        rules.push(not_found.clone());
                    }
                    let mut v = VirtualHost::new(host, rules);
                    v.sort_rules();
                    acme_passthrough(&mut v, &self.acme_covers);
                    v
                })
                .collect(),
            default_owner: self
                .default_action
                .as_ref()
                .and_then(|(_, owner)| owner.parse().ok()),
            default_action: self.default_action.map(|(a, _)| a),
        };
        l.sort_virtual_hosts();
        l
    }
}

/// The `spec.tls` entries of `ing` whose Secret can be served, with problems for the rest.
fn tls_entries(ing: &Ingress, idx: &Index<'_>, problems: &mut BTreeSet<Problem>) -> Vec<TlsEntry> {
    let ns = ns_of(ing);
    let mut out = Vec::new();
    for t in ing.spec.iter().flat_map(|s| s.tls.iter().flatten()) {
        let raw = t.secret_name.as_deref().unwrap_or("");
        let (file, meta) = match idx.secrets.tls(ns, raw) {
            Ok(found) => found,
            Err(e) => {
                use super::refs::SecretRefError;
                let (why, message) = match e {
                    SecretRefError::InvalidName => (
                        reason::SECRET_NOT_FOUND,
                        format!("spec.tls secretName {:?} is not a valid Secret name", short(raw)),
                    ),
                    SecretRefError::NotFound => (
                        reason::SECRET_NOT_FOUND,
                        format!("Secret {ns}/{raw} does not exist"),
                    ),
                    SecretRefError::WrongType(type_) => (
                        reason::SECRET_WRONG_TYPE,
                        format!(
                            "Secret {ns}/{raw} is of type {:?}, not {TLS_SECRET_TYPE}",
                            short(type_)
                        ),
                    ),
                    SecretRefError::Invalid(refusal) => (
                        reason::SECRET_INVALID,
                        format!(
                            "Secret {ns}/{raw} does not hold a certificate and key both proxies load: {refusal}"
                        ),
                    ),
                };
                problems.insert(problem(
                    ing,
                    why,
                    format!("{message}; its hosts get no certificate"),
                ));
                continue;
            }
        };
        let (namespace, name) = (ns, raw);
        let mut hosts = Vec::new();
        let mut uncovered = false;
        for h in t.hosts.iter().flatten() {
            match h.parse::<Hostname>() {
                Ok(h) if !crate::certs::covers(&meta.dns_names, h.as_str()) => {
                    uncovered = true;
                    problems.insert(problem(
                        ing,
                        reason::CERTIFICATE_HOST_MISMATCH,
                        format!(
                            "the certificate of Secret {namespace}/{name} is not for host {h} (its subjectAltName DNS names: {}; the common name is never read); the host gets the default certificate and no redirect to HTTPS",
                            crate::certs::names_list(&meta.dns_names)
                        ),
                    ));
                }
                Ok(h) => hosts.push(h),
                Err(e) => {
                    problems.insert(problem(
                        ing,
                        reason::INVALID_HOST,
                        format!("spec.tls host skipped: {e}"),
                    ));
                }
            }
        }
        let hostless = t.hosts.as_ref().is_none_or(|h| h.is_empty());
        if hosts.is_empty() && !hostless && !uncovered {
            continue; // every host refused: not a default certificate either
        }
        // A host its certificate is not for is still served on HTTPS (the Ingress keeps
        // its HTTPS port), with the listener's default certificate.
        hosts.sort();
        hosts.dedup();
        out.push(TlsEntry {
            file,
            hosts,
            hostless,
        });
    }
    out
}

/// A rule for ACME HTTP-01 challenges (a path in `/.well-known/acme-challenge/`, or that
/// directory itself: a stored prefix has no trailing `/`): never redirected to HTTPS.
fn is_acme(m: &RouteMatch) -> bool {
    let dir = ACME_CHALLENGE_PREFIX.trim_end_matches('/');
    match &m.path {
        PathMatch::Exact(p) => p.as_str().starts_with(ACME_CHALLENGE_PREFIX),
        PathMatch::Prefix(p) => p.as_str() == dir || p.as_str().starts_with(ACME_CHALLENGE_PREFIX),
    }
}

/// ACME HTTP-01 challenges are never redirected, whatever rule covers them: when the
/// rule that takes `/.well-known/acme-challenge/<token>` on `v` (sorted) is a redirect to
/// HTTPS made from a covering rule (`/`, `/.well-known`), a rule for the challenge
/// directory with the action the covering rule had goes before it. (A rule in the
/// directory itself is never redirected: [`is_acme`].)
fn acme_passthrough(
    v: &mut VirtualHost,
    covers: &HashMap<(Option<Hostname>, RouteMatch), RouteAction>,
) {
    let Some(taker) = v
        .rules
        .iter()
        .find(|r| r.matches.matches(ACME_CHALLENGE_PREFIX))
    else {
        return;
    };
    let Some(action) = covers.get(&(v.host.clone(), taker.matches.clone())) else {
        return;
    };
    let dir: HttpPath = ACME_CHALLENGE_PREFIX
        .trim_end_matches('/')
        .parse()
        .expect("a valid path");
    let owner = taker.owner.clone();
    v.rules.push(RouteRule {
        matches: RouteMatch::on_path(PathMatch::prefix(&dir)),
        action: action.clone(),
        filters: Default::default(),
        owner,
    });
    v.sort_rules();
}

fn describe_match(m: &RouteMatch) -> String {
    match &m.path {
        PathMatch::Exact(p) => format!("{p} (Exact)"),
        PathMatch::Prefix(p) => format!("{p} (Prefix)"),
    }
}

fn proto_name(p: ListenerProtocol) -> &'static str {
    match p {
        ListenerProtocol::Http => "HTTP",
        ListenerProtocol::Https => "HTTPS",
    }
}
