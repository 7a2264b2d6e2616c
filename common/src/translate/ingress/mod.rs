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

mod build;
mod settings;
mod tls;

/// The only Secret type whose certificates are used.
pub use crate::certs::TLS_SECRET_TYPE;
use crate::names::{ObjectKey, PoolName};
use crate::problem::{ObjRef, Reason};
use crate::routes::{
    BackendId, BackendProtocol, BackendState, CertFile, Certificate, CookieName, FixedStatus,
    Hostname, HttpPath, HttpRoutes, Listener, ListenerProtocol, ListenerTls, PathMatch, Redirect,
    RedirectStatus, RouteAction, RouteMatch, RouteRule, Scheme, Sticky, VirtualHost,
};
use crate::state::Problem;
use crate::translate::refs::ResolvedPort;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, IngressClass};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::rc::Rc;

pub use crate::translate::refs::SecretMeta;
use build::*;
use settings::*;
use tls::*;

/// Our IngressClass `spec.controller`.
pub const CONTROLLER: &str = "k8slb.io/ingress-controller";
/// The IngressClass name the manifests create; also accepted as the legacy annotation's
/// value when no IngressClass object exists (files mode).
pub const DEFAULT_CLASS_NAME: &str = "k8slb";
/// The legacy class annotation (before `spec.ingressClassName`).
pub const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
/// On an IngressClass: Ingresses without a class belong to it.
pub const DEFAULT_CLASS_MARK: &str = "ingressclass.kubernetes.io/is-default-class";
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
        // What the reader refuses is reported by the translation (Settings::read).
        let a = read_annotations(ing, &mut Vec::new());
        if a.refused("pool") {
            out.problems.push(problem(
                ing,
                reason::INVALID_POOL,
                "loadbalancer/pool: too long or holds control characters; not served".into(),
            ));
            continue;
        }
        match a.get("pool").unwrap_or("default").parse::<PoolName>() {
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
    read_annotations(ing, &mut Vec::new())
        .get("scale")
        .and_then(|v| crate::scale::parse(v).ok())
        .unwrap_or(1)
}

/// Services and EndpointSlices indexed by (namespace, name).
struct Index<'a> {
    services: crate::translate::refs::ServiceRefs<'a>,
    secrets: crate::translate::refs::SecretRefs<'a>,
    reserved_ports: Option<&'a crate::config::ReservedPorts>,
    host_owners: Option<&'a crate::tenancy::HostOwners>,
}

impl<'a> Index<'a> {
    fn new(input: &IngressInput<'a>) -> Index<'a> {
        Index {
            services: crate::translate::refs::ServiceRefs::new(input.services, input.slices),
            secrets: crate::translate::refs::SecretRefs::new(input.secrets),
            reserved_ports: input.reserved_ports,
            host_owners: input.host_owners,
        }
    }

    /// The Service port an Ingress backend reference names, and what the proxy speaks to
    /// it (its `appProtocol`); or why not.
    fn backend<'s>(
        &'s self,
        ns: &'s str,
        b: &'s IngressBackend,
    ) -> Result<(ResolvedPort<'s>, BackendProtocol), (Reason, String)> {
        use crate::translate::refs::{PortRef, ServiceRefError};
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
                Ok((p, protocol))
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
