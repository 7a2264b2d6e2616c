//! The plan: one pure function from (config, cluster objects, previous state) to the whole
//! desired state. No clock, no I/O, no hash order: the same inputs give the same output.
//!
//! Allocation is a global recompute, sticky and ordered:
//!
//! 1. **Sticky first.** Every claimed Service's existing addresses (from the previous state
//!    and from its `status.loadBalancer.ingress`) are honoured, for all Services, before
//!    anything new is handed out. So a restart, a reordering or an unrelated change never
//!    moves an IP, and a new Service can never take an address that an old one holds.
//! 2. **Static requests** (`spec.loadBalancerIP`, annotation `loadbalancer/ips`), in order of
//!    creation time, then namespace/name.
//! 3. **Dynamic**: the lowest free address of the pool's `range`, same order.
//!
//! Release is implicit: a Service that is gone, no longer of type LoadBalancer, of another
//! class, or whose pool or requested IP changed, simply makes no claim on its old address,
//! and each claim is its own (a co-tenant of a shared IP keeps its claim). A request that
//! is refused (an unknown or invalid pool, an invalid IP, an IP outside its pools) is not
//! a change: the Service keeps what it holds, gets nothing new, and a problem says why.
//!
//! Sharing (k8slb's rule): a Service may use an address already in use only by asking for
//! it statically, in the same pool, and only if no (protocol, port) pair clashes; otherwise
//! the later Service gets a `PortConflict` problem and no address while the earlier keeps its
//! own.
//!
//! VRRP: each VIP sits in one VRRP instance of its pool. An instance has all LB nodes as
//! members in priority order; the first is the owner. New VIPs go to an instance owned by
//! the least-loaded node; a VIP stays in its instance for life, so it moves only when its
//! owner leaves (the next member takes over, as VRRP itself already did). VRIDs are kept
//! in the state and never reused while in use.

//!
//! The steps, one module each: [`options`] (the flags' settings), `request` (Services
//! and their annotations into typed requests; `annotations`, `ports`), `nodes` (the LB
//! nodes), `allocate` (addresses), `vrrp` (instances and VIPs), `problems` (collected,
//! capped, ordered). [`plan`] composes them.

mod allocate;
mod annotations;
mod gateway;
mod hosts;
mod ingress;
mod nodes;
pub mod options;
mod ports;
mod problems;
mod request;
mod vrrp;

pub use crate::endpoints::SERVICE_NAME_LABEL;
pub use nodes::EXCLUDE_LABEL;
pub use options::{NodeSelector, PlanOptions, Provider};
pub use problems::MAX_PROBLEMS_PER_OBJECT;
pub use vrrp::{FIRST_BACKUP_PRIORITY, MAX_MEMBERS, OWNER_PRIORITY};

use crate::config::GlobalConfig;
use crate::gateway::types::ParentRef;
use crate::gateway::GatewayOutput;
use crate::names::ServiceKey;
use crate::objects::Objects;
use crate::state::{IpMode, ServiceState, State, STATE_VERSION};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use request::Request;
use std::collections::BTreeMap;

/// `objs` without the claims on hosts that another namespace owns ([`crate::tenancy`]:
/// our Ingresses and the HTTPRoutes of our Gateways claim), each refusal a problem; and
/// who owns which host.
fn owned_hosts<'o>(
    cfg: &GlobalConfig,
    objs: &'o Objects,
    problems: &mut problems::Problems,
) -> (std::borrow::Cow<'o, Objects>, crate::tenancy::HostOwners) {
    let ours = objs
        .ingresses
        .iter()
        .filter(|i| crate::ingress::is_ours(i, &objs.ingress_classes));
    let gateways: Vec<&crate::gateway::types::Gateway> = objs
        .gateways
        .iter()
        .filter(|g| {
            objs.gateway_classes.iter().any(|c| {
                c.metadata.name.as_deref() == Some(g.spec.gateway_class_name.as_str())
                    && c.spec.controller_name == crate::gateway::CONTROLLER
            })
        })
        .collect();
    // The sets our Gateways take claim their listeners' hostnames; a route claims the
    // hostnames a listener it may attach to (a Gateway's or a set's) could serve.
    let sets = crate::gateway::host_claims(&gateways, &objs.listener_sets, &objs.namespaces);
    let taken: Vec<&crate::gateway::types::ListenerSet> = sets.iter().map(|(s, _)| *s).collect();
    let claims = |kind, m: &'o ObjectMeta, parents: &'o [ParentRef], hostnames: &'o [String]| {
        let ns = m.namespace.as_deref().unwrap_or("default");
        let hosts = crate::gateway::route_host_claims(
            (kind, ns),
            (parents, hostnames),
            &gateways,
            &taken,
            &objs.namespaces,
        );
        (kind, m, hosts)
    };
    let routes = objs
        .http_routes
        .iter()
        .map(|r| {
            claims(
                "HTTPRoute",
                &r.metadata,
                &r.spec.parent_refs,
                &r.spec.hostnames,
            )
        })
        .chain(objs.grpc_routes.iter().map(|r| {
            claims(
                crate::gateway::grpc::KIND,
                &r.metadata,
                &r.spec.parent_refs,
                &r.spec.hostnames,
            )
        }))
        .filter(|(_, _, hosts)| !hosts.is_empty());
    let owners = hosts::owners(&cfg.tenancy, ours, routes, &sets);
    let mut refused = Vec::new();
    let objs = hosts::enforce(&owners, objs, &mut refused);
    for p in refused {
        problems.insert(p);
    }
    (objs, owners)
}

/// A round's plan: the whole desired state, and every Gateway API status its one
/// translation decided (what the watcher writes to GatewayClasses, Gateways and routes;
/// Services' and Ingresses' statuses follow from the state alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub state: State,
    /// The statuses; its `routes` are empty (they are in `state.http`).
    pub gateway: GatewayOutput,
}

/// Compute the whole desired state (see [`plan_round`] for the statuses as well).
pub fn plan(
    cfg: &GlobalConfig,
    opts: &PlanOptions,
    objs: &Objects,
    previous: Option<&State>,
) -> State {
    plan_round(cfg, opts, objs, previous).state
}

/// Compute the whole desired state and the statuses it implies.
pub fn plan_round(
    cfg: &GlobalConfig,
    opts: &PlanOptions,
    objs: &Objects,
    previous: Option<&State>,
) -> Plan {
    let mut problems: problems::Problems = objs.problems.iter().cloned().collect();
    // Hosts belong to namespaces: other namespaces' claims on them are taken out first.
    let (objs, owners) = owned_hosts(cfg, objs, &mut problems);
    let objs: &Objects = &objs;
    let nodes = nodes::lb_nodes(&objs.nodes, &opts.node_selector, &mut problems);
    let slices = ports::slice_index(&objs.slices);
    let (mut requests, seen) = request::requests(objs, cfg, opts, &slices, &mut problems);
    let empty = State::empty(cfg.actor_config(&opts.cert_path));
    let prev = previous.unwrap_or(&empty);
    let (mut ingresses, ingress_requests) =
        ingress::Ingresses::read(cfg, opts, objs, &owners, prev, &mut problems);
    // The optional features every LB node's actor renders (version skew).
    let features = opts.fleet.of(nodes.keys());
    let (gateways, gateway_requests) =
        gateway::Gateways::read(cfg, (opts, &features), (objs, &owners), prev, &mut problems);
    if !ingress_requests.is_empty() || !gateway_requests.is_empty() {
        requests.extend(ingress_requests);
        requests.extend(gateway_requests);
        requests.sort_by(|a, b| (&a.created, &a.key).cmp(&(&b.created, &b.key)));
    }

    let (alloc, held) = allocate::allocate(
        cfg,
        &requests,
        &objs.held_services,
        &seen,
        prev,
        &mut problems,
    );
    let (mut http, ingresses) = ingresses.build(cfg, &alloc, &mut problems);
    let (gateway, gateways) = gateways.build(&alloc, &owners, &mut problems);
    let GatewayOutput {
        routes: gateway_http,
        classes,
        gateways: gateway_statuses,
        http_routes,
        grpc_routes,
        l4_routes,
        backend_tls_policies,
        listener_sets,
    } = gateway;
    http.merge(gateway_http);
    let services = service_states(held, requests, &alloc, opts.provider);
    let (instances, vips, released) =
        vrrp::vrrp_plan(cfg, opts, &nodes, &alloc, prev, &mut problems);

    let mut config = cfg.actor_config(&opts.cert_path);
    if opts.provider == Provider::Kubeproxy {
        config.haproxy = Default::default();
        config.nginx = Default::default();
    }
    let state = State {
        version: STATE_VERSION,
        provider: Some(opts.provider),
        config,
        nodes,
        instances,
        vips,
        services,
        http,
        ingresses,
        gateways,
        released,
        problems: problems.capped(),
    };
    Plan {
        state,
        gateway: GatewayOutput {
            routes: Default::default(),
            classes,
            gateways: gateway_statuses,
            http_routes,
            grpc_routes,
            l4_routes,
            backend_tls_policies,
            listener_sets,
        },
    }
}

/// Every claimed Service with its addresses (sorted), after the Services held as they
/// were.
fn service_states(
    held: BTreeMap<ServiceKey, ServiceState>,
    requests: Vec<Request>,
    alloc: &allocate::Allocator,
    provider: Provider,
) -> BTreeMap<ServiceKey, ServiceState> {
    let ip_mode = if provider == Provider::Kubeproxy {
        IpMode::Vip
    } else {
        IpMode::Proxy
    };
    let mut services = held;
    for r in requests {
        let request::Tenant::Service(key) = &r.key else {
            continue;
        };
        let mut ips = alloc.of(&r.key);
        ips.sort();
        services.insert(
            key.clone(),
            ServiceState {
                ips,
                pool: r.pool_text,
                ip_mode,
                uid: r.uid,
                ports: r.ports,
            },
        );
    }
    services
}
