//! The table of served resources. Everything else is generic over it, so adding a kind is
//! one row here.

/// One served resource (a plural under one group/version).
#[derive(Debug)]
pub(crate) struct Resource {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Has a `/status` subresource: the main resource ignores `status`, and `/status`
    /// changes nothing else.
    pub status_subresource: bool,
    /// Create resets `status` (Services, Pods, Ingresses); Nodes keep it.
    pub clear_status_on_create: bool,
    pub short_names: &'static [&'static str],
    /// Fields a field selector may name besides `metadata.name` and `metadata.namespace`
    /// (each kind's `AddFieldLabelConversionFunc` in kube-apiserver; the rest are refused).
    pub field_labels: &'static [&'static str],
    /// Defined by a CustomResourceDefinition that a cluster may not have: served only
    /// while an installed CRD file serves this group, version and plural (`crd.rs`; 404
    /// before, as for any path the server does not know).
    pub crd: bool,
}

/// The row whose store holds the objects of row `i`: the first row of the same group and
/// kind. Every version of a CRD-defined kind is a view of the same objects (the Gateway
/// API's CRDs convert with `strategy: None`: only `apiVersion` changes).
pub(crate) fn storage_row(i: usize) -> usize {
    let r = &RESOURCES[i];
    RESOURCES
        .iter()
        .position(|o| o.group == r.group && o.kind == r.kind)
        .unwrap_or(i)
}

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `services` or `ingresses.networking.k8s.io`, as in the API server's messages.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

const fn core(
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
) -> Resource {
    Resource {
        group: "",
        version: "v1",
        plural,
        singular,
        kind,
        namespaced,
        status_subresource: false,
        clear_status_on_create: false,
        short_names,
        field_labels: &[],
        crd: false,
    }
}

/// A Gateway API kind (CRDs the user installs) at one version.
const fn gateway_api(
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    status: bool,
) -> Resource {
    let mut r = grouped(core(plural, singular, kind, namespaced, &[]), GATEWAY_GROUP);
    r.version = version;
    r.status_subresource = status;
    // A CRD's status subresource: create and main-resource writes ignore `status`.
    r.clear_status_on_create = status;
    r.crd = true;
    r
}

const fn short(mut r: Resource, short_names: &'static [&'static str]) -> Resource {
    r.short_names = short_names;
    r
}

const fn x_group(mut r: Resource) -> Resource {
    r.group = "gateway.networking.x-k8s.io";
    r
}

pub(crate) const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

const fn selectable(mut r: Resource, fields: &'static [&'static str]) -> Resource {
    r.field_labels = fields;
    r
}

const fn with_status(mut r: Resource, clear_on_create: bool) -> Resource {
    r.status_subresource = true;
    r.clear_status_on_create = clear_on_create;
    r
}

const fn grouped(mut r: Resource, group: &'static str) -> Resource {
    r.group = group;
    r
}

pub(crate) static RESOURCES: &[Resource] = &[
    with_status(
        selectable(
            core("namespaces", "namespace", "Namespace", false, &["ns"]),
            &["status.phase"],
        ),
        false,
    ),
    with_status(core("services", "service", "Service", true, &["svc"]), true),
    with_status(
        selectable(
            core("nodes", "node", "Node", false, &["no"]),
            &["spec.unschedulable"],
        ),
        false,
    ),
    with_status(
        selectable(
            core("pods", "pod", "Pod", true, &["po"]),
            &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.podIPs",
                "status.nominatedNodeName",
            ],
        ),
        true,
    ),
    core("configmaps", "configmap", "ConfigMap", true, &["cm"]),
    selectable(core("secrets", "secret", "Secret", true, &[]), &["type"]),
    selectable(
        core("events", "event", "Event", true, &["ev"]),
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
    ),
    core("endpoints", "endpoints", "Endpoints", true, &["ep"]),
    grouped(
        core(
            "endpointslices",
            "endpointslice",
            "EndpointSlice",
            true,
            &[],
        ),
        "discovery.k8s.io",
    ),
    grouped(
        core("events", "event", "Event", true, &["ev"]),
        "events.k8s.io",
    ),
    grouped(
        core("leases", "lease", "Lease", true, &[]),
        "coordination.k8s.io",
    ),
    with_status(
        grouped(
            core("ingresses", "ingress", "Ingress", true, &["ing"]),
            "networking.k8s.io",
        ),
        true,
    ),
    grouped(
        core("ingressclasses", "ingressclass", "IngressClass", false, &[]),
        "networking.k8s.io",
    ),
    core(
        "serviceaccounts",
        "serviceaccount",
        "ServiceAccount",
        true,
        &["sa"],
    ),
    with_status(
        grouped(
            core("deployments", "deployment", "Deployment", true, &["deploy"]),
            "apps",
        ),
        false,
    ),
    with_status(
        grouped(
            core("daemonsets", "daemonset", "DaemonSet", true, &["ds"]),
            "apps",
        ),
        false,
    ),
    grouped(
        core("roles", "role", "Role", true, &[]),
        "rbac.authorization.k8s.io",
    ),
    grouped(
        core("rolebindings", "rolebinding", "RoleBinding", true, &[]),
        "rbac.authorization.k8s.io",
    ),
    grouped(
        core("clusterroles", "clusterrole", "ClusterRole", false, &[]),
        "rbac.authorization.k8s.io",
    ),
    // Every kind and version the Gateway API v1.6.1 CRD files (standard and experimental
    // channels) declare, served as the installed files say (`crd.rs`). Discovery lists a
    // group's versions in row order, the first preferred: v1 first.
    short(
        gateway_api(
            "v1",
            "gatewayclasses",
            "gatewayclass",
            "GatewayClass",
            false,
            true,
        ),
        &["gc"],
    ),
    short(
        gateway_api("v1", "gateways", "gateway", "Gateway", true, true),
        &["gtw"],
    ),
    gateway_api("v1", "httproutes", "httproute", "HTTPRoute", true, true),
    gateway_api("v1", "grpcroutes", "grpcroute", "GRPCRoute", true, true),
    short(
        gateway_api(
            "v1",
            "referencegrants",
            "referencegrant",
            "ReferenceGrant",
            true,
            false,
        ),
        &["refgrant"],
    ),
    short(
        gateway_api(
            "v1",
            "backendtlspolicies",
            "backendtlspolicy",
            "BackendTLSPolicy",
            true,
            true,
        ),
        &["btlspolicy"],
    ),
    short(
        gateway_api(
            "v1",
            "listenersets",
            "listenerset",
            "ListenerSet",
            true,
            true,
        ),
        &["lset"],
    ),
    gateway_api("v1", "tlsroutes", "tlsroute", "TLSRoute", true, true),
    gateway_api("v1", "tcproutes", "tcproute", "TCPRoute", true, true),
    gateway_api("v1", "udproutes", "udproute", "UDPRoute", true, true),
    gateway_api(
        "v1beta1",
        "gatewayclasses",
        "gatewayclass",
        "GatewayClass",
        false,
        true,
    ),
    gateway_api("v1beta1", "gateways", "gateway", "Gateway", true, true),
    gateway_api(
        "v1beta1",
        "httproutes",
        "httproute",
        "HTTPRoute",
        true,
        true,
    ),
    gateway_api(
        "v1beta1",
        "referencegrants",
        "referencegrant",
        "ReferenceGrant",
        true,
        false,
    ),
    // Served by the experimental channel only.
    gateway_api(
        "v1alpha3",
        "backendtlspolicies",
        "backendtlspolicy",
        "BackendTLSPolicy",
        true,
        true,
    ),
    gateway_api("v1alpha3", "tlsroutes", "tlsroute", "TLSRoute", true, true),
    gateway_api("v1alpha2", "tlsroutes", "tlsroute", "TLSRoute", true, true),
    gateway_api("v1alpha2", "tcproutes", "tcproute", "TCPRoute", true, true),
    gateway_api("v1alpha2", "udproutes", "udproute", "UDPRoute", true, true),
    short(
        x_group(gateway_api(
            "v1alpha1",
            "xbackends",
            "xbackend",
            "XBackend",
            true,
            true,
        )),
        &["xbackend"],
    ),
    short(
        x_group(gateway_api(
            "v1alpha1",
            "xbackendtrafficpolicies",
            "xbackendtrafficpolicy",
            "XBackendTrafficPolicy",
            true,
            true,
        )),
        &["xbtrafficpolicy"],
    ),
    short(
        x_group(gateway_api(
            "v1alpha1", "xmeshes", "xmesh", "XMesh", false, true,
        )),
        &["mesh"],
    ),
    grouped(
        core(
            "clusterrolebindings",
            "clusterrolebinding",
            "ClusterRoleBinding",
            false,
            &[],
        ),
        "rbac.authorization.k8s.io",
    ),
];

/// The resource served at `group/version/plural`.
pub(crate) fn find(group: &str, version: &str, plural: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource for an object's `apiVersion` and `kind`.
pub(crate) fn find_kind(api_version: &str, kind: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.api_version() == api_version && r.kind == kind)
}

/// A resource named the way a test would: `Service`, `services`, `svc`, or group-qualified
/// `events.events.k8s.io` / `Event.events.k8s.io` (unqualified names prefer core/v1).
pub(crate) fn find_loose(name: &str) -> Option<usize> {
    let (name, group) = match name.split_once('.') {
        Some((n, g)) => (n, Some(g)),
        None => (name, None),
    };
    RESOURCES.iter().position(|r| {
        group.is_none_or(|g| g == r.group)
            && (r.plural == name
                || r.kind == name
                || r.singular == name
                || r.short_names.contains(&name))
    })
}
