//! The Kubernetes objects the plan reads, and how they are read from files (the `files`
//! source and `k8slb-watcher plan`): YAML or JSON, multi-document files, `kind: List`.
//!
//! One document that does not decode as its kind is skipped with a problem, never fatal:
//! a malformed Service must not stop every other Service from being served.

use crate::problem::{Kind, ObjRef, Problem, Reason};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Everything the plan needs from the cluster.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    pub nodes: Vec<Node>,
    pub configmaps: Vec<ConfigMap>,
    pub ingresses: Vec<Ingress>,
    pub ingress_classes: Vec<IngressClass>,
    /// TLS Secrets that Ingresses reference. The plan reads only what
    /// [`crate::ingress::SecretMeta`] says of them (type, validity), never the bytes;
    /// the publisher hands the certificates to the nodes apart from the state.
    pub secrets: Vec<Secret>,
    /// Documents that were skipped (unknown kind is not a problem; undecodable is).
    pub problems: Vec<Problem>,
    /// Services that exist but could not be decoded this time: they keep what the previous
    /// state gave them (a malformed object must never lose, or give away, an allocation).
    pub held_services: Vec<crate::names::ServiceKey>,
    /// The same for Ingresses: their pool keeps its ingress VIP.
    pub held_ingresses: Vec<crate::names::ObjectKey>,
    /// Gateway API (`gateway.networking.k8s.io`, standard channel).
    pub gateway_classes: Vec<crate::gateway::types::GatewayClass>,
    pub gateways: Vec<crate::gateway::types::Gateway>,
    pub http_routes: Vec<crate::gateway::types::HttpRoute>,
    pub grpc_routes: Vec<crate::gateway::grpc::GrpcRoute>,
    pub reference_grants: Vec<crate::gateway::types::ReferenceGrant>,
    /// BackendTLSPolicies (TLS from the proxy to a Service's endpoints).
    pub backend_tls_policies: Vec<crate::gateway::types::BackendTlsPolicy>,
    /// ListenerSets (more listeners for the Gateways that allow them).
    pub listener_sets: Vec<crate::gateway::types::ListenerSet>,
    /// TLSRoutes, TCPRoutes and UDPRoutes (experimental channel), each with its kind.
    pub l4_routes: Vec<crate::gateway::types::L4Route>,
    /// Namespaces (their labels), which a Gateway listener's `allowedRoutes` may select.
    pub namespaces: Vec<k8s_openapi::api::core::v1::Namespace>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse {path}: {message}")]
    Parse { path: PathBuf, message: String },
}

impl Objects {
    /// Read files and directories (recursively, `*.yaml`, `*.yml`, `*.json`, sorted by
    /// path so the result does not depend on directory order).
    pub fn read_paths(paths: &[PathBuf]) -> Result<Objects, ReadError> {
        Self::read_paths_with(paths, &mut |_| {})
    }

    /// [`Objects::read_paths`], `each` seeing every document as read before it is
    /// decoded (the files source gives them their `metadata.generation` there:
    /// [`crate::generations`]).
    pub fn read_paths_with(
        paths: &[PathBuf],
        each: &mut dyn FnMut(&mut Value),
    ) -> Result<Objects, ReadError> {
        let mut files = Vec::new();
        for p in paths {
            collect_files(p, &mut files)?;
        }
        files.sort();
        let mut out = Objects::default();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|source| ReadError::Io {
                path: f.clone(),
                source,
            })?;
            out.add_text_with(&text, each)
                .map_err(|message| ReadError::Parse { path: f, message })?;
        }
        Ok(out)
    }

    /// Add every document of a YAML or JSON text. Err only if the text is not YAML.
    pub fn add_text(&mut self, text: &str) -> Result<(), String> {
        self.add_text_with(text, &mut |_| {})
    }

    /// [`Objects::add_text`], `each` seeing every document before it is decoded.
    pub fn add_text_with(
        &mut self,
        text: &str,
        each: &mut dyn FnMut(&mut Value),
    ) -> Result<(), String> {
        use serde::Deserialize;
        for doc in serde_yaml::Deserializer::from_str(text) {
            let mut v = Value::deserialize(doc).map_err(|e| e.to_string())?;
            each(&mut v);
            self.add_value(v);
        }
        Ok(())
    }

    /// Add one decoded document (or a `List` of them).
    pub fn add_value(&mut self, v: Value) {
        if v.is_null() {
            return;
        }
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "List"
            | "ServiceList"
            | "EndpointSliceList"
            | "NodeList"
            | "ConfigMapList"
            | "IngressList"
            | "IngressClassList"
            | "SecretList"
            | "GatewayClassList"
            | "GatewayList"
            | "HTTPRouteList"
            | "GRPCRouteList"
            | "ReferenceGrantList"
            | "BackendTLSPolicyList" => {
                self.add_list(kind, &v);
            }
            "Service" => {
                let key = v
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .zip(v.pointer("/metadata/name").and_then(Value::as_str))
                    .and_then(|(ns, name)| crate::names::ServiceKey::new(ns, name).ok());
                let before = self.services.len();
                push(&mut self.services, &mut self.problems, v, Kind::Service);
                if self.services.len() == before {
                    self.held_services.extend(key);
                }
            }
            "EndpointSlice" => push(&mut self.slices, &mut self.problems, v, Kind::EndpointSlice),
            "Node" => push(&mut self.nodes, &mut self.problems, v, Kind::Node),
            "ConfigMap" => push(&mut self.configmaps, &mut self.problems, v, Kind::ConfigMap),
            "Ingress" => {
                let key = v
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .zip(v.pointer("/metadata/name").and_then(Value::as_str))
                    .and_then(|(ns, name)| crate::names::ObjectKey::new(ns, name).ok());
                let before = self.ingresses.len();
                push(&mut self.ingresses, &mut self.problems, v, Kind::Ingress);
                if self.ingresses.len() == before {
                    self.held_ingresses.extend(key);
                }
            }
            "IngressClass" => push(
                &mut self.ingress_classes,
                &mut self.problems,
                v,
                Kind::IngressClass,
            ),
            "Secret" => push(&mut self.secrets, &mut self.problems, v, Kind::Secret),
            "Namespace" => push(&mut self.namespaces, &mut self.problems, v, Kind::Namespace),
            // Gateway API kinds only from their group (other groups reuse the names).
            "GatewayClass" | "Gateway" | "HTTPRoute" | "GRPCRoute" | "ReferenceGrant"
            | "TLSRoute" | "TCPRoute" | "UDPRoute" | "BackendTLSPolicy" | "ListenerSet"
                if v.get("apiVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|a| a.starts_with("gateway.networking.k8s.io/")) =>
            {
                let kind = kind.to_owned();
                self.add_gateway_api(&kind, v)
            }
            _ => {} // other kinds (Deployments, ...) are not ours to read
        }
    }

    /// The items of a `List` (or a typed list), each with the list's kind and version
    /// when it has none. Only an object can take a default kind (`item["kind"] = ..`
    /// panics on a number or a string); anything else is skipped.
    fn add_list(&mut self, kind: &str, v: &Value) {
        let item_kind = kind.strip_suffix("List").unwrap_or_default().to_string();
        let Some(Value::Array(items)) = v.get("items").cloned() else {
            return;
        };
        for mut item in items {
            if let Value::Object(m) = &mut item {
                if !item_kind.is_empty() && !m.contains_key("kind") {
                    m.insert("kind".into(), Value::String(item_kind.clone()));
                    // A typed list's items are of its group and version.
                    if let Some(av) = v
                        .get("apiVersion")
                        .filter(|_| !m.contains_key("apiVersion"))
                    {
                        m.insert("apiVersion".into(), av.clone());
                    }
                }
                self.add_value(item);
            }
        }
    }

    /// One Gateway API object (of the Gateway API group).
    fn add_gateway_api(&mut self, kind: &str, v: Value) {
        match kind {
            "GatewayClass" => push(
                &mut self.gateway_classes,
                &mut self.problems,
                v,
                Kind::GatewayClass,
            ),
            "Gateway" => push(&mut self.gateways, &mut self.problems, v, Kind::Gateway),
            "HTTPRoute" => push(
                &mut self.http_routes,
                &mut self.problems,
                v,
                Kind::HttpRoute,
            ),
            "GRPCRoute" => push(
                &mut self.grpc_routes,
                &mut self.problems,
                v,
                Kind::GrpcRoute,
            ),
            "TLSRoute" | "TCPRoute" | "UDPRoute" => {
                let l4 = crate::gateway::types::L4Kind::parse(kind)
                    .unwrap_or_else(|| unreachable!("matched above"));
                let before = self.l4_routes.len();
                push(
                    &mut self.l4_routes,
                    &mut self.problems,
                    v,
                    Kind::L4Route(l4),
                );
                if let Some(r) = self.l4_routes.get_mut(before) {
                    r.kind = l4;
                }
            }
            "BackendTLSPolicy" => push(
                &mut self.backend_tls_policies,
                &mut self.problems,
                v,
                Kind::BackendTlsPolicy,
            ),
            "ListenerSet" => push(
                &mut self.listener_sets,
                &mut self.problems,
                v,
                Kind::ListenerSet,
            ),
            _ => push(
                &mut self.reference_grants,
                &mut self.problems,
                v,
                Kind::ReferenceGrant,
            ),
        }
    }
}

fn push<T: DeserializeOwned>(into: &mut Vec<T>, problems: &mut Vec<Problem>, v: Value, kind: Kind) {
    let name = describe(&v);
    match serde_json::from_value::<T>(v) {
        Ok(o) => into.push(o),
        Err(e) => problems.push(Problem::new(
            ObjRef::named(kind, name),
            Reason::Undecodable,
            format!("skipped: this {} does not decode: {e}", kind.as_str()),
        )),
    }
}

/// `<ns>/<name>` of a raw object, printable even when hostile.
fn describe(v: &Value) -> String {
    let get = |k: &str| {
        v.pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .escape_debug()
            .take(120)
            .collect::<String>()
    };
    if v.pointer("/metadata/namespace").is_some() {
        format!("{}/{}", get("namespace"), get("name"))
    } else {
        get("name")
    }
}

fn collect_files(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), ReadError> {
    let meta = std::fs::metadata(p).map_err(|source| ReadError::Io {
        path: p.to_path_buf(),
        source,
    })?;
    if meta.is_dir() {
        let rd = std::fs::read_dir(p).map_err(|source| ReadError::Io {
            path: p.to_path_buf(),
            source,
        })?;
        for e in rd {
            let e = e.map_err(|source| ReadError::Io {
                path: p.to_path_buf(),
                source,
            })?;
            let path = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') {
                continue; // editors' swap files, atomic-write temporaries
            }
            if path.is_dir() {
                collect_files(&path, out)?;
            } else if [".yaml", ".yml", ".json"].iter().any(|s| name.ends_with(s)) {
                out.push(path);
            }
        }
    } else {
        out.push(p.to_path_buf());
    }
    Ok(())
}

/// The inspections of the last round, by (namespace, name), each with a digest of what it
/// was computed from: a memo of [`crate::ingress::SecretMeta::of`], a pure function, so
/// the plan's output never depends on it (a Secret whose digest differs is inspected
/// again; entries not used in a round are dropped).
static INSPECTED: std::sync::Mutex<
    std::collections::BTreeMap<(String, String), (u64, crate::ingress::SecretMeta)>,
> = std::sync::Mutex::new(std::collections::BTreeMap::new());

/// A digest of everything [`crate::ingress::SecretMeta::of`] reads of `s`.
fn digest(s: &Secret) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.type_.hash(&mut h);
    for (k, v) in s.data.iter().flatten() {
        k.hash(&mut h);
        v.0.hash(&mut h);
    }
    h.finish()
}

/// [`crate::ingress::SecretMeta::of`] of each of `secrets`, through [`INSPECTED`].
fn inspected(secrets: &[&Secret]) -> Vec<crate::ingress::SecretMeta> {
    let mut memo = INSPECTED.lock().unwrap_or_else(|p| p.into_inner());
    let mut next = std::collections::BTreeMap::new();
    let out = secrets
        .iter()
        .map(|s| {
            let id = (
                s.metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
                s.metadata.name.clone().unwrap_or_default(),
            );
            let d = digest(s);
            let meta = match memo.remove(&id) {
                Some((old, m)) if old == d => m,
                _ => crate::ingress::SecretMeta::of(s),
            };
            next.insert(id, (d, meta.clone()));
            meta
        })
        .collect();
    *memo = next;
    out
}

impl Objects {
    /// The (namespace, name) of every Secret that an Ingress's `tls`, a Gateway's or a
    /// ListenerSet's listener `certificateRefs` or a Gateway's `spec.tls.backend` names:
    /// the only Secrets k8slb reads.
    pub fn referenced_secrets(&self) -> std::collections::BTreeSet<(String, String)> {
        let ingresses = self.ingresses.iter().flat_map(|i| {
            let ns = i.metadata.namespace.as_deref().unwrap_or("default");
            i.spec
                .as_ref()
                .and_then(|s| s.tls.as_ref())
                .into_iter()
                .flatten()
                .filter_map(move |t| Some((ns.to_string(), t.secret_name.clone()?)))
        });
        // A listener's certificateRefs name Secrets of its Gateway's (or ListenerSet's)
        // namespace by default.
        let certificate_refs =
            |ns: Option<&str>, listeners: &'_ [crate::gateway::types::GatewayListener]| {
                let ns = ns.unwrap_or("default").to_string();
                listeners
                    .iter()
                    .filter_map(|l| l.tls.as_ref())
                    .flat_map(|t| &t.certificate_refs)
                    .map(move |r| {
                        let ns = r.namespace.clone().unwrap_or_else(|| ns.clone());
                        (ns, r.name.clone())
                    })
                    .collect::<Vec<_>>()
            };
        let gateways = self
            .gateways
            .iter()
            .flat_map(|g| certificate_refs(g.metadata.namespace.as_deref(), &g.spec.listeners));
        let sets = self
            .listener_sets
            .iter()
            .flat_map(|s| certificate_refs(s.metadata.namespace.as_deref(), &s.spec.listeners));
        // A Gateway's backend client certificate (spec.tls.backend): checked, and
        // presented to its TLS backends (see `gateway::backend_client`).
        let clients = self.gateways.iter().filter_map(|g| {
            let ns = g.metadata.namespace.as_deref().unwrap_or("default");
            let r = g
                .spec
                .tls
                .as_ref()?
                .get("backend")?
                .get("clientCertificateRef")?;
            let name = r.get("name")?.as_str()?;
            let ns = r.get("namespace").and_then(|n| n.as_str()).unwrap_or(ns);
            Some((ns.to_string(), name.to_string()))
        });
        ingresses
            .chain(gateways)
            .chain(sets)
            .chain(clients)
            .collect()
    }

    /// Only the Secrets that something names ([`Self::referenced_secrets`]): a Secret
    /// nobody names is never parsed, whatever its size, and not kept.
    pub fn retain_referenced_secrets(&mut self) {
        let named = self.referenced_secrets();
        self.secrets.retain(|s| {
            named.contains(&(
                s.metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
                s.metadata.name.clone().unwrap_or_default(),
            ))
        });
    }

    /// What the plan knows of each named Secret (type, whether its certificate is
    /// usable). Inspecting a certificate costs tens of microseconds (every block parsed,
    /// the key matched), so the answer for a Secret is kept while its content stays the
    /// same ([`inspected`]): a round over 1,000 unchanged Secrets inspects none.
    pub fn secret_metas(&self) -> Vec<crate::ingress::SecretMeta> {
        let named = self.referenced_secrets();
        let used: Vec<&Secret> = self
            .secrets
            .iter()
            .filter(|s| {
                named.contains(&(
                    s.metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into()),
                    s.metadata.name.clone().unwrap_or_default(),
                ))
            })
            .collect();
        inspected(&used)
    }

    /// The Gateway API translation's input from these objects (their Gateway API kinds,
    /// Services and slices) with the rest given.
    pub fn gateway_input<'a>(
        &'a self,
        secrets: &'a [crate::ingress::SecretMeta],
        addresses: &'a std::collections::BTreeMap<crate::names::ObjectKey, Vec<std::net::IpAddr>>,
        unavailable: &'a std::collections::BTreeMap<
            crate::names::ObjectKey,
            std::collections::BTreeMap<(u16, bool), String>,
        >,
    ) -> crate::gateway::GatewayInput<'a> {
        crate::gateway::GatewayInput {
            classes: &self.gateway_classes,
            gateways: &self.gateways,
            routes: &self.http_routes,
            grpc_routes: &self.grpc_routes,
            l4_routes: &self.l4_routes,
            grants: &self.reference_grants,
            backend_tls_policies: &self.backend_tls_policies,
            listener_sets: &self.listener_sets,
            services: &self.services,
            slices: &self.slices,
            secrets,
            addresses,
            unavailable,
            serves_udp: true,
            serves_mirror: true,
            serves_tls_mixed: true,
            tls_mixed_pending: false,
            serves_retry: true,
            mixes_conditional_rules: true,
            configmaps: &self.configmaps,
            pools: None,
            namespaces: &self.namespaces,
            conditional_rules_per_host: crate::config::DEFAULT_CONDITIONAL_RULES_PER_HOST,
            retry_backends_per_namespace: crate::config::DEFAULT_RETRY_BACKENDS_PER_NAMESPACE,
            listener_set_listeners_per_gateway:
                crate::config::DEFAULT_LISTENER_SET_LISTENERS_PER_GATEWAY,
            mirrors_per_rule: crate::config::DEFAULT_MIRRORS_PER_RULE,
            host_owners: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_and_lists() {
        let mut o = Objects::default();
        o.add_text(
            r#"
apiVersion: v1
kind: Service
metadata: { name: a, namespace: default }
spec: { type: LoadBalancer, ports: [ { port: 80 } ] }
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: { name: lb1, labels: { type: loadBalancer } }
- apiVersion: apps/v1
  kind: Deployment
  metadata: { name: x }
---
"#,
        )
        .unwrap();
        assert_eq!(o.services.len(), 1);
        assert_eq!(o.nodes.len(), 1);
        assert!(o.problems.is_empty());
    }

    #[test]
    fn undecodable_service_is_a_problem_not_an_error() {
        let mut o = Objects::default();
        o.add_text(
            "kind: Service\nmetadata: { name: \"bad\\nname\", namespace: default }\nspec: { ports: 7 }\n",
        )
        .unwrap();
        assert!(o.services.is_empty());
        assert_eq!(o.problems.len(), 1);
        assert_eq!(o.problems[0].reason, "Undecodable");
        assert!(
            o.problems[0].object.to_string().contains("bad\\nname"),
            "{:?}",
            o.problems
        );
    }

    #[test]
    fn broken_yaml_is_an_error() {
        let mut o = Objects::default();
        assert!(o.add_text("kind: Service\n  metadata: [").is_err());
    }

    #[test]
    fn only_the_secrets_an_ingress_or_a_gateway_names_are_read() {
        let mut o = Objects::default();
        for t in [
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: i, namespace: a}\nspec: {tls: [{secretName: used}]}\n",
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g, namespace: infra}\nspec:\n  gatewayClassName: k8slb\n  listeners:\n  - {name: https, port: 443, protocol: HTTPS, tls: {certificateRefs: [{name: gw-cert}, {name: other, namespace: b}]}}\n",
        ] {
            o.add_text(t).unwrap();
        }
        for (ns, name) in [
            ("a", "used"),
            ("a", "unused"),
            ("infra", "gw-cert"),
            ("b", "other"),
            ("b", "used"),
        ] {
            o.secrets.push(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"namespace": ns, "name": name}, "type": "kubernetes.io/tls"
                }))
                .unwrap(),
            );
        }
        let metas: Vec<String> = o
            .secret_metas()
            .iter()
            .map(|m| format!("{}/{}", m.namespace, m.name))
            .collect();
        assert_eq!(metas, ["a/used", "infra/gw-cert", "b/other"]);
        o.retain_referenced_secrets();
        assert_eq!(o.secrets.len(), 3);
    }

    /// The inspection memo never answers for content it did not see: a Secret whose
    /// certificate is replaced by junk under the same name is refused at once, and a
    /// fixed one accepted again.
    #[test]
    fn a_changed_secret_is_inspected_again() {
        use base64::Engine;
        let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let secret = |crt: &str| -> Secret {
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "memo", "name": "cert"}, "type": "kubernetes.io/tls",
                "data": {"tls.crt": b(crt), "tls.key": b(include_str!("../tests/fixtures/certs/rsa.key"))}
            }))
            .unwrap()
        };
        let good = secret(include_str!("../tests/fixtures/certs/rsa.crt"));
        let junk = secret("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
        for (s, valid) in [(&good, true), (&good, true), (&junk, false), (&good, true)] {
            let m = inspected(&[s]);
            assert_eq!(m[0].valid, valid, "{:?}", m[0].refusal);
        }
    }
}
