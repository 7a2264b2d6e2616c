//! Gateway API objects (`gateway.networking.k8s.io`, standard channel): the fields k8slb
//! reads, as serde types. Unknown fields are ignored, so newer objects decode.
//!
//! Why not the `gateway-api` crate (kube-rs' generated bindings), as issue 12 asks: its
//! newest release (0.22) is built on kube 4.2 / k8s-openapi 0.28, and k8slb is on kube
//! 5.0 / k8s-openapi 0.29. Its types would bring a second k8s-openapi and kube-core into
//! the build, and they implement the other kube's `Resource`, so our client could not
//! watch them with `Api<T>` anyway (the watcher will use `DynamicObject` and these types).
//! The fields here follow the v1 CRDs' names exactly; when a release on kube 5 exists,
//! switching is local to this module.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};

/// The group of every kind here.
pub const GROUP: &str = "gateway.networking.k8s.io";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClass {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: GatewayClassSpec,
    /// As observed (the status writer keeps its conditions' transition times).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassSpec {
    pub controller_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_ref: Option<ParametersRef>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParametersRef {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gateway {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: GatewaySpec,
    /// As observed: its `addresses` are adopted when the state was lost (like a
    /// Service's `status.loadBalancer`), its conditions keep their transition times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

impl Gateway {
    /// `status.addresses` of type IPAddress (or untyped), as written.
    pub fn status_addresses(&self) -> Vec<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.get("addresses"))
            .and_then(|a| a.as_array())
            .into_iter()
            .flatten()
            .filter(|a| {
                a.get("type")
                    .and_then(|t| t.as_str())
                    .is_none_or(|t| t == "IPAddress")
            })
            .filter_map(|a| a.get("value")?.as_str())
            .collect()
    }
}

/// `spec.infrastructure` (standard since v1.1): its annotations are where a Gateway
/// names its pool (`loadbalancer/pool`), as its metadata annotations may too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayInfrastructure {
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
    /// `parametersRef`: k8slb defines no parameters kind, so a Gateway naming one is
    /// not accepted (`InvalidParameters`, as the specification says for an unsupported
    /// kind) and gets no new address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_ref: Option<LocalParametersRef>,
}

/// A `LocalParametersReference`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LocalParametersRef {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

impl LocalParametersRef {
    /// Why a Gateway naming it is refused (user text cut, for status and Events).
    pub fn refusal(&self) -> String {
        format!(
            "spec.infrastructure.parametersRef: {}/{} {} is not a parameters kind k8slb knows (it has none)",
            crate::problem::cut(&self.group, 60),
            crate::problem::cut(&self.kind, 60),
            crate::problem::cut(&self.name, 60)
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    pub gateway_class_name: String,
    #[serde(default)]
    pub listeners: Vec<GatewayListener>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<GatewayAddress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure: Option<GatewayInfrastructure>,
    /// `spec.allowedListeners`: which namespaces' ListenerSets may attach to it (none
    /// when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_listeners: Option<AllowedListeners>,
    /// `spec.tls` (Gateway-level TLS): `frontend` (client certificate validation of
    /// its HTTPS listeners, by port) is read by `frontend_tls.rs`; `backend` (a client
    /// certificate for TLS backends) is not served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<serde_json::Value>,
}

/// A Gateway's `spec.allowedListeners`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllowedListeners {
    /// `from`: `None` (the default), `Same`, `All` or `Selector` (the same shape as a
    /// listener's `allowedRoutes.namespaces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<RouteNamespaces>,
}

/// A ListenerSet (`gateway.networking.k8s.io/v1`, standard since v1.5): more listeners
/// for a Gateway that allows them (`spec.allowedListeners`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerSet {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: ListenerSetSpec,
    /// As observed (the status writer keeps its conditions' transition times).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerSetSpec {
    pub parent_ref: ParentGatewayRef,
    /// `ListenerEntry`s: a Gateway listener's fields (the CRD allows 1 to 64).
    #[serde(default)]
    pub listeners: Vec<GatewayListener>,
}

/// A ListenerSet's `spec.parentRef` (a `ParentGatewayReference`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentGatewayRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayAddress {
    /// `IPAddress` (the default) or `Hostname`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Optional (the API's GatewayAddressEmpty): an `IPAddress` without a value asks
    /// for any address, which the pool gives.
    #[serde(default)]
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayListener {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    pub port: i32,
    /// `HTTP`, `HTTPS`, `TLS`, `TCP`, `UDP`.
    pub protocol: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<GatewayTls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_routes: Option<AllowedRoutes>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayTls {
    /// `Terminate` (the default) or `Passthrough`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default)]
    pub certificate_refs: Vec<ObjectRef>,
    /// Implementation-specific options: k8slb defines none, so any is refused (never
    /// silently ignored).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub options: std::collections::BTreeMap<String, String>,
    /// The listener's own client certificate validation (experimental, before v1.4):
    /// not served, so refused; ignoring it would accept clients its author meant to
    /// turn away. The Gateway's `spec.tls.frontend` is served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend_validation: Option<serde_json::Value>,
}

/// A reference to an object: group (core is `""`), kind, name, namespace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllowedRoutes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<RouteNamespaces>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<RouteGroupKind>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteNamespaces {
    /// `Same` (the default), `All` or `Selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteGroupKind {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub kind: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoute {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: HttpRouteSpec,
    /// As observed: other controllers' `parents` entries are kept as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ParentRef>,
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<HttpRouteRule>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// A rule's `timeouts`: Gateway API Durations, as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteTimeouts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_request: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRule {
    #[serde(default)]
    pub matches: Vec<HttpRouteMatch>,
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<HttpRouteTimeouts>,
    /// The experimental `retry` (served on HAProxy, refused on nginx).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<HttpRouteRetry>,
    /// A field k8slb does not serve (the experimental `sessionPersistence`): read only to
    /// refuse the rule rather than serve it without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_persistence: Option<serde_json::Value>,
}

/// A rule's `retry`, as written (numbers as the API's int64s: validated by the
/// translation).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRetry {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codes: Vec<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpPathMatch>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<NameValueMatch>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_params: Vec<NameValueMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpPathMatch {
    /// `PathPrefix` (the default), `Exact` or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NameValueMatch {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteFilter {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_redirect: Option<RequestRedirect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_header_modifier: Option<HeaderModifier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_header_modifier: Option<HeaderModifier>,
    #[serde(
        default,
        rename = "urlRewrite",
        skip_serializing_if = "Option::is_none"
    )]
    pub url_rewrite: Option<UrlRewrite>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_mirror: Option<RequestMirror>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<CorsFilter>,
}

/// A CORS filter, as written (checked in the translation).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CorsFilter {
    #[serde(default)]
    pub allow_origins: Vec<String>,
    #[serde(default)]
    pub allow_methods: Vec<String>,
    #[serde(default)]
    pub allow_headers: Vec<String>,
    #[serde(default)]
    pub expose_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_credentials: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<i64>,
}

/// A RequestMirror filter: the backend that gets a copy of each request, and which share
/// of the requests (`percent`, or `fraction` as `{numerator, denominator}`; all when
/// neither is given).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestMirror {
    pub backend_ref: HttpBackendRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<serde_json::Value>,
}

/// RequestHeaderModifier / ResponseHeaderModifier.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderModifier {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<NameValue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<NameValue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NameValue {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UrlRewrite {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpPathModifier>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRedirect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpPathModifier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpPathModifier {
    /// `ReplaceFullPath` or `ReplacePrefixMatch`.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_full_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix_match: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpBackendRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<HttpRouteFilter>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrant {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: ReferenceGrantSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantSpec {
    pub from: Vec<GrantFrom>,
    pub to: Vec<GrantTo>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantFrom {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    pub namespace: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantTo {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

pub use crate::names::L4Kind;

/// A TLSRoute, TCPRoute or UDPRoute (`v1alpha2`; TLSRoute also `v1alpha3`/`v1`): their
/// specs differ only in TLSRoute's `hostnames`, so one type reads the three. `kind` is
/// not part of the decoded object: the reader sets it from the object's kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct L4Route {
    #[serde(skip)]
    pub kind: L4Kind,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: L4RouteSpec,
    /// As observed: other controllers' `parents` entries are kept as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct L4RouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ParentRef>,
    /// TLSRoute only: the server names (SNI) it takes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<L4RouteRule>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct L4RouteRule {
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
}

/// A BackendTLSPolicy (`v1`, standard channel since v1.4): TLS from the proxy to the
/// endpoints of the Services it targets, in its own namespace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTlsPolicy {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: BackendTlsPolicySpec,
    /// As observed: other controllers' `ancestors` entries are kept as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTlsPolicySpec {
    /// `LocalPolicyTargetReferenceWithSectionName`: no namespace field, so a policy can
    /// only ever target Services of its own namespace.
    #[serde(default)]
    pub target_refs: Vec<PolicyTargetRef>,
    #[serde(default)]
    pub validation: BackendTlsValidation,
    /// Implementation-specific options: k8slb defines none, so any is refused.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub options: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTargetRef {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    pub name: String,
    /// A Service port's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTlsValidation {
    /// ConfigMaps (key `ca.crt`) in the policy's namespace.
    #[serde(default)]
    pub ca_certificate_refs: Vec<LocalObjectRef>,
    /// `System`: the platform's trust store.
    #[serde(
        default,
        rename = "wellKnownCACertificates",
        skip_serializing_if = "Option::is_none"
    )]
    pub well_known_ca_certificates: Option<String>,
    /// The SNI sent, and the name the backend's certificate must carry.
    #[serde(default)]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_alt_names: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectRef {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    pub name: String,
}
