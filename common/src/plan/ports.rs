//! A Service's ports as frontends: protocol, mode, TLS, stickiness, PROXY protocol,
//! source ranges, and the backends from its EndpointSlices.

use super::annotations::Annotations;
use super::options::Provider;
use super::problems::{short, Problems};
use crate::app_protocol::BackendProtocol;
use crate::endpoints::endpoints;
use crate::ipam::parse_ip;
use crate::names::{PoolName, PortName};
use crate::problem::{cut, ObjRef, Problem, Reason};
use crate::state::{Mode, PortState, Protocol, ProxyProtocol, Stickiness};
use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeSet;

pub(super) use crate::endpoints::{slice_index, SliceIndex};

/// What every port of one Service shares.
pub(super) struct PortContext<'a> {
    pub spec: &'a ServiceSpec,
    pub ann: &'a Annotations,
    pub object: ObjRef,
    pub provider: Provider,
    /// The ports the LB nodes keep for themselves (a proxy could not bind them).
    pub reserved: &'a crate::config::ReservedPorts,
    /// Some port of the Service terminates TLS (so plain http ports redirect).
    pub tls_on_some: bool,
    /// The pool whose certificate a TLS port serves.
    pub cert_pool: Option<PoolName>,
    pub slices: &'a [&'a EndpointSlice],
}

impl PortContext<'_> {
    fn problem(&self, reason: Reason, message: String) -> Problem {
        Problem::new(self.object.clone(), reason, message)
    }
}

/// Does some port of `spec` terminate TLS by k8slb's rules (see [`tls`])?
pub(super) fn tls_on_some(spec: &ServiceSpec, ann: &Annotations) -> bool {
    ann.flag("ssl") == Some(true)
        || spec
            .ports
            .iter()
            .flatten()
            .any(|p| p.port == 443 || name_starts(p, "https"))
}

/// One Service port as a frontend; None (and a problem) if it cannot be one.
pub(super) fn port_state(
    cx: &PortContext,
    sp: &ServicePort,
    problems: &mut Problems,
) -> Option<PortState> {
    let protocol = protocol(cx, sp, problems)?;
    let port = port_number(cx, sp, problems)?;
    if cx.provider.has_proxy() && cx.reserved.contains(port) {
        problems.insert(cx.problem(
            Reason::PortReserved,
            format!(
                "port {}/{port} is not served: the LB nodes keep it for themselves (global config reservedPorts: {})",
                proto_name(protocol),
                cx.reserved
            ),
        ));
        return None;
    }
    let name = port_name(cx, sp, port, problems);
    check_provider_serves(cx, protocol, port, problems);
    let target_num = match &sp.target_port {
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(s)) => s.parse::<i32>().ok(),
        None => Some(sp.port),
    };
    let is_tcp = protocol == Protocol::Tcp;
    let mode = mode(cx.ann, sp, port, target_num, is_tcp);
    let tls = tls(cx, sp, port, is_tcp, problems);
    let ann = cx.ann;
    let redirect = is_tcp
        && mode == Mode::Http
        && !tls
        && cx.tls_on_some
        && ann.flag("ssl") != Some(false)
        && ann.flag("sslredirect") != Some(false);
    let backend_tls = match ann.flag("sslbackend") {
        Some(b) => b,
        None => target_num == Some(443),
    } && is_tcp;
    let (stickiness, stickiness_timeout_s) = stickiness(cx, mode, port, problems);
    Some(PortState {
        name: name.clone(),
        protocol,
        port,
        mode,
        tls,
        cert: tls.then(|| cx.cert_pool.clone()).flatten(),
        redirect,
        backend_tls,
        check: ann.flag("nocheck") != Some(true),
        stickiness,
        stickiness_timeout_s,
        proxy_protocol: proxy_protocol(cx, problems),
        // h2c only in http mode (a tcp port passes any protocol through); wss is
        // WebSocket over TLS, which `backend_tls` (annotation sslbackend, targetPort
        // 443) governs as for any http-mode port.
        app_protocol: match mode {
            Mode::Http => {
                BackendProtocol::from_app_protocol(sp.app_protocol.as_deref()).unwrap_or_default()
            }
            Mode::Tcp => BackendProtocol::Http,
        },
        source_ranges: source_ranges(cx, problems),
        endpoints: endpoints(
            name.as_ref().map_or("", PortName::as_str),
            proto_name(protocol),
            cx.slices,
        ),
    })
}

fn protocol(cx: &PortContext, sp: &ServicePort, problems: &mut Problems) -> Option<Protocol> {
    match sp.protocol.as_deref().unwrap_or("TCP") {
        "TCP" => Some(Protocol::Tcp),
        "UDP" => Some(Protocol::Udp),
        "SCTP" => Some(Protocol::Sctp),
        other => {
            problems.insert(cx.problem(
                Reason::UnsupportedProtocol,
                format!(
                    "port {}: protocol {:?} is not TCP, UDP or SCTP",
                    sp.port,
                    cut(other, 20)
                ),
            ));
            None
        }
    }
}

fn port_number(cx: &PortContext, sp: &ServicePort, problems: &mut Problems) -> Option<u16> {
    let Ok(port) = u16::try_from(sp.port) else {
        problems.insert(cx.problem(
            Reason::InvalidPort,
            format!("port {} is out of range", sp.port),
        ));
        return None;
    };
    if port == 0 {
        problems.insert(cx.problem(Reason::InvalidPort, "port 0 is not a port".into()));
        return None;
    }
    Some(port)
}

/// The port's name; an invalid one is reported and dropped (the port is still served).
fn port_name(
    cx: &PortContext,
    sp: &ServicePort,
    port: u16,
    problems: &mut Problems,
) -> Option<PortName> {
    let n = sp.name.as_deref().filter(|n| !n.is_empty())?;
    match n.parse::<PortName>() {
        Ok(n) => Some(n),
        Err(e) => {
            problems.insert(cx.problem(Reason::InvalidName, format!("port {port}: {e}")));
            None
        }
    }
}

/// A protocol the provider cannot carry is in the state (kubeproxy-ready) but reported.
fn check_provider_serves(cx: &PortContext, protocol: Protocol, port: u16, problems: &mut Problems) {
    let unsupported = match (cx.provider, protocol) {
        (Provider::Haproxy, Protocol::Udp) => {
            Some("HAProxy cannot proxy UDP; use the nginx or kubeproxy provider")
        }
        (Provider::Haproxy | Provider::Nginx, Protocol::Sctp) => {
            Some("SCTP is only carried by the kubeproxy provider")
        }
        _ => None,
    };
    if let Some(why) = unsupported {
        problems.insert(cx.problem(
            Reason::UnsupportedProtocol,
            format!("port {}/{port} is not served: {why}", proto_name(protocol)),
        ));
    }
}

/// Mode (k8slb): http if asked, or port/targetPort 80/443, or a port named http*; tcp
/// if asked (`tcp` or k8slb's `false`).
fn mode(
    ann: &Annotations,
    sp: &ServicePort,
    port: u16,
    target_num: Option<i32>,
    is_tcp: bool,
) -> Mode {
    match ann.get_lc("mode").as_deref() {
        _ if !is_tcp => Mode::Tcp,
        Some("http") => Mode::Http,
        Some("tcp") | Some("false") => Mode::Tcp,
        _ if matches!(port, 80 | 443)
            || matches!(target_num, Some(80 | 443))
            || name_starts(sp, "http") =>
        {
            Mode::Http
        }
        _ => Mode::Tcp,
    }
}

/// TLS termination (k8slb README): public port 443, a port named https*, or ssl=true;
/// ssl=false turns it off. Never with kubeproxy (asking for it is a problem).
fn tls(
    cx: &PortContext,
    sp: &ServicePort,
    port: u16,
    is_tcp: bool,
    problems: &mut Problems,
) -> bool {
    let ssl = cx.ann.flag("ssl");
    if cx.provider == Provider::Kubeproxy && ssl == Some(true) {
        problems.insert(cx.problem(
            Reason::UnsupportedAnnotation,
            "loadbalancer/ssl: the kubeproxy provider cannot terminate TLS".into(),
        ));
    }
    is_tcp
        && match ssl {
            Some(false) => false,
            Some(true) => true,
            None => port == 443 || name_starts(sp, "https"),
        }
        && cx.provider != Provider::Kubeproxy
}

/// `sessionAffinity: ClientIP` (with its timeout), overridden by `loadbalancer/stickiness`.
fn stickiness(
    cx: &PortContext,
    mode: Mode,
    port: u16,
    problems: &mut Problems,
) -> (Stickiness, u32) {
    let spec = cx.spec;
    let mut stickiness = Stickiness::None;
    let mut timeout_s = 10800;
    if spec.session_affinity.as_deref() == Some("ClientIP") {
        stickiness = Stickiness::Source;
        if let Some(t) = spec
            .session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
        {
            timeout_s = t.clamp(1, 86400) as u32;
        }
    }
    match cx.ann.get_lc("stickiness").as_deref() {
        None | Some("") => {}
        Some("none") => stickiness = Stickiness::None,
        Some("source") | Some("clientip") => stickiness = Stickiness::Source,
        Some("cookie") if mode == Mode::Http => stickiness = Stickiness::Cookie,
        Some("cookie") => {
            problems.insert(cx.problem(
                Reason::InvalidAnnotation,
                format!("loadbalancer/stickiness: cookie needs http mode; port {port} uses source stickiness"),
            ));
            stickiness = Stickiness::Source;
        }
        Some(other) => {
            problems.insert(cx.problem(
                Reason::InvalidAnnotation,
                format!(
                    "loadbalancer/stickiness: {:?} is not none, source or cookie",
                    short(other)
                ),
            ));
        }
    }
    (stickiness, timeout_s)
}

fn proxy_protocol(cx: &PortContext, problems: &mut Problems) -> Option<ProxyProtocol> {
    match cx.ann.get_lc("proxy-protocol").as_deref() {
        None | Some("") | Some("none") | Some("false") => None,
        Some("v1") | Some("1") => Some(ProxyProtocol::V1),
        Some("v2") | Some("2") => Some(ProxyProtocol::V2),
        Some(other) => {
            problems.insert(cx.problem(
                Reason::InvalidAnnotation,
                format!(
                    "loadbalancer/proxy-protocol: {:?} is not v1 or v2",
                    short(other)
                ),
            ));
            None
        }
    }
}

/// `spec.loadBalancerSourceRanges`, sorted; one that does not parse closes the port.
fn source_ranges(cx: &PortContext, problems: &mut Problems) -> Vec<ipnet::IpNet> {
    let mut out = BTreeSet::new();
    for s in cx
        .spec
        .load_balancer_source_ranges
        .as_deref()
        .unwrap_or_default()
    {
        match parse_cidr(s) {
            Some(n) => {
                out.insert(n);
            }
            None => {
                problems.insert(cx.problem(
                    Reason::InvalidSourceRange,
                    format!(
                        "spec.loadBalancerSourceRanges: {:?} is not a CIDR; the Service accepts no client until it is fixed",
                        short(s)
                    ),
                ));
                // Fail closed: an unparsable allow-list must not open the port to all.
                out.insert(
                    crate::state::FAIL_CLOSED_SOURCE_RANGE
                        .parse()
                        .expect("valid"),
                );
            }
        }
    }
    out.into_iter().collect()
}

pub(super) fn name_starts(p: &ServicePort, prefix: &str) -> bool {
    p.name
        .as_deref()
        .map(|n| n.to_ascii_lowercase().starts_with(prefix))
        .unwrap_or(false)
}

pub(super) fn proto_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}

/// A CIDR for `loadBalancerSourceRanges`; a bare address is a host route; host bits are
/// cleared (`10.0.0.1/8` -> `10.0.0.0/8`).
fn parse_cidr(s: &str) -> Option<ipnet::IpNet> {
    let s = s.trim();
    if let Ok(n) = s.parse::<ipnet::IpNet>() {
        return Some(n.trunc());
    }
    parse_ip(s).ok().map(ipnet::IpNet::from)
}
