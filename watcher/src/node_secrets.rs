//! The node certificate Secrets (Kubernetes source with `--ingress`): for each certificate
//! the published state names, one Secret in our namespace that the actors read (the
//! contract is `k8slb_common::certs`'s). The files driver writes the same content as files
//! instead ([`crate::certs_dir`]).
//!
//! Ordering, so that an actor never gets a state naming a certificate it cannot have:
//! the Secrets a new state needs are applied **before** the state is published, and the
//! ones it no longer needs are deleted **after**. A failed apply does not hold the state
//! back (the Services and the other hosts must not wait for one certificate): the actor
//! serves that certificate's hosts with the default certificate until its Secret arrives,
//! and the write is retried on the next round.
//!
//! Which writes is decided without I/O, in the reconcile ([`plan`], [`decide`],
//! table-tested below); [`NodeSecretWriter`] only executes them. Never logs key material: names, stems and counts only.

use crate::failing::FailureLog;
use crate::kube::{api_code, code_label, describe, timed, FIELD_MANAGER};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use k8slb_common::certs::{
    node_certs, node_secret_name, NodeCert, NODE_CERT_LABEL, NODE_CERT_STEM_ANNOTATION,
    TLS_SECRET_TYPE,
};
use k8slb_common::state::State;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What to write: Secrets to apply (name, stem, content) and Secrets to delete (names).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Writes {
    pub apply: Vec<(String, String, NodeCert)>,
    pub delete: Vec<String>,
}

impl Writes {
    pub fn is_empty(&self) -> bool {
        self.apply.is_empty() && self.delete.is_empty()
    }
}

/// Where the node-certificate decision reads Secrets (the Kubernetes driver's stores).
pub trait CertSource {
    /// The users' TLS Secrets that `state` names and that exist, sorted.
    fn secrets_named_by(&self, state: &State) -> Vec<Secret>;
    /// Our node certificate Secrets as last seen, by name.
    fn node_cert_secrets(&self) -> BTreeMap<String, Arc<Secret>>;
}

/// Where the certificates of a round come from (see [`crate::reconcile::Snapshot`]).
#[derive(Clone, Copy, Default)]
pub enum Certs<'a> {
    /// Nobody needs node certificates (no `--ingress`, no `--certs-out`).
    #[default]
    Off,
    /// The snapshot's objects carry the Secrets, and nothing exists yet that a write
    /// would replace (the files driver: its directory is synced from `desired`).
    FromObjects,
    /// A cluster's Secrets, with the node Secrets written before.
    From(&'a dyn CertSource),
}

/// The node-certificate decision of a round: what the nodes need, and (Kubernetes) the
/// Secret writes that make the node Secrets hold exactly that.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NodeCerts {
    /// Stem → certificate: every certificate the state names, from a Secret that
    /// `k8slb_common::certs::inspect` accepts.
    pub desired: BTreeMap<String, NodeCert>,
    pub writes: Writes,
}

/// The node certificates `state` needs, and their writes (none with [`Certs::Off`]).
pub fn plan(state: &State, certs: Certs<'_>, objects: &[Secret]) -> Option<NodeCerts> {
    match certs {
        Certs::Off => None,
        Certs::FromObjects => Some(NodeCerts {
            desired: node_certs(state, objects),
            writes: Writes::default(),
        }),
        Certs::From(src) => {
            let desired = node_certs(state, &src.secrets_named_by(state));
            let writes = decide(&desired, &src.node_cert_secrets());
            Some(NodeCerts { desired, writes })
        }
    }
}

/// The writes that make the node Secrets hold exactly `desired` (stem → certificate), given
/// the ones that `existing` shows (name → Secret, as last seen).
pub fn decide(
    desired: &BTreeMap<String, NodeCert>,
    existing: &BTreeMap<String, Arc<Secret>>,
) -> Writes {
    let mut w = Writes::default();
    let mut wanted = Vec::new();
    for (stem, cert) in desired {
        let name = node_secret_name(stem);
        let same = existing.get(&name).is_some_and(|s| holds(s, stem, cert));
        if !same {
            w.apply.push((name.clone(), stem.clone(), cert.clone()));
        }
        wanted.push(name);
    }
    w.delete = existing
        .keys()
        .filter(|n| !wanted.contains(n))
        .cloned()
        .collect();
    w
}

/// Whether `s` holds exactly `cert` for `stem`.
fn holds(s: &Secret, stem: &str, cert: &NodeCert) -> bool {
    let data = |k: &str| s.data.as_ref().and_then(|d| d.get(k)).map(|b| &b.0[..]);
    let stem_of = s
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_CERT_STEM_ANNOTATION));
    stem_of.map(String::as_str) == Some(stem)
        && s.type_.as_deref() == Some(TLS_SECRET_TYPE)
        && data("tls.crt") == Some(cert.chain_pem.as_bytes())
        && data("tls.key") == Some(cert.key_pem.as_bytes())
}

/// The node Secret for `stem`, as applied.
pub fn secret(namespace: &str, name: &str, stem: &str, cert: &NodeCert) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([
                (NODE_CERT_LABEL.to_string(), "true".to_string()),
                ("app.kubernetes.io/name".to_string(), "k8slb".to_string()),
            ])),
            annotations: Some(BTreeMap::from([(
                NODE_CERT_STEM_ANNOTATION.to_string(),
                stem.to_string(),
            )])),
            ..Default::default()
        },
        type_: Some(TLS_SECRET_TYPE.to_string()),
        data: Some(BTreeMap::from([
            (
                "tls.crt".to_string(),
                ByteString(cert.chain_pem.as_bytes().to_vec()),
            ),
            (
                "tls.key".to_string(),
                ByteString(cert.key_pem.as_bytes().to_vec()),
            ),
        ])),
        ..Default::default()
    }
}

/// Executes [`Writes`].
pub struct NodeSecretWriter {
    api: Api<Secret>,
    namespace: String,
    failures: FailureLog,
}

impl NodeSecretWriter {
    pub fn new(client: Client, namespace: &str) -> Self {
        NodeSecretWriter {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            failures: FailureLog::new("writing the node certificate Secrets"),
        }
    }

    /// Apply the Secrets of `writes` (before the state is published). Returns how many
    /// failed.
    pub async fn apply(
        &mut self,
        writes: &Writes,
        still_leader: impl Fn() -> bool,
        metrics: &crate::admin::Metrics,
    ) -> usize {
        let mut failed = (0u64, String::new());
        let mut done = 0;
        for (name, stem, cert) in &writes.apply {
            if !still_leader() {
                break;
            }
            let s = secret(&self.namespace, name, stem, cert);
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            match timed(
                || format!("applying Secret {}/{name}", self.namespace),
                self.api.patch(name, &pp, &Patch::Apply(&s)),
            )
            .await
            {
                Ok(_) => {
                    done += 1;
                    tracing::info!(secret = %name, certificate = %stem, "node certificate written");
                }
                Err(e) => {
                    metrics.write_failed("node_secret", code_label(&e));
                    failed = (failed.0 + 1, format!("Secret {name}: {}", describe(&e)));
                }
            }
        }
        self.report(done, failed)
    }

    /// Delete the Secrets of `writes` (after the state is published). Returns how many
    /// failed (a Secret already gone is not a failure).
    pub async fn delete(
        &mut self,
        writes: &Writes,
        still_leader: impl Fn() -> bool,
        metrics: &crate::admin::Metrics,
    ) -> usize {
        let mut failed = (0u64, String::new());
        let mut done = 0;
        for name in &writes.delete {
            if !still_leader() {
                break;
            }
            match timed(
                || format!("deleting Secret {}/{name}", self.namespace),
                self.api.delete(name, &DeleteParams::default()),
            )
            .await
            {
                Ok(_) => {
                    done += 1;
                    tracing::info!(secret = %name, "node certificate no longer used; deleted");
                }
                Err(e) if api_code(&e) == Some(404) => {}
                Err(e) => {
                    metrics.write_failed("node_secret", code_label(&e));
                    failed = (failed.0 + 1, format!("Secret {name}: {}", describe(&e)));
                }
            }
        }
        self.report(done, failed)
    }

    fn report(&mut self, done: usize, failed: (u64, String)) -> usize {
        if failed.0 > 0 {
            self.failures.failed(failed.0, &failed.1);
        } else if done > 0 {
            self.failures.succeeded();
        }
        usize::try_from(failed.0).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8slb_common::routes::CertFile;

    fn cert(name: &str, body: &str) -> (String, NodeCert) {
        let file = CertFile::Secret {
            namespace: "default".parse().unwrap(),
            name: name.parse().unwrap(),
            version: String::new(),
        };
        (
            file.stem(),
            NodeCert {
                file,
                chain_pem: format!("CHAIN {body}\n"),
                key_pem: format!("KEY {body}\n"),
            },
        )
    }

    fn existing(certs: &[(String, NodeCert)]) -> BTreeMap<String, Arc<Secret>> {
        certs
            .iter()
            .map(|(stem, c)| {
                let name = node_secret_name(stem);
                let s = secret("k8slb-system", &name, stem, c);
                (name, Arc::new(s))
            })
            .collect()
    }

    #[test]
    fn writes_what_is_missing_or_different_and_deletes_what_is_unused() {
        let (a1, b1, c1) = (cert("a", "1"), cert("b", "1"), cert("c", "1"));
        let a2 = cert("a", "2");
        // (desired, existing) -> (applied stems, deleted stems)
        let cases: Vec<(Vec<_>, Vec<_>, Vec<&str>, Vec<&str>)> = vec![
            (vec![], vec![], vec![], vec![]),
            (vec![a1.clone()], vec![], vec!["default_a"], vec![]),
            (vec![a1.clone()], vec![a1.clone()], vec![], vec![]),
            // A renewed certificate (or key) is written again.
            (
                vec![a2.clone()],
                vec![a1.clone()],
                vec!["default_a"],
                vec![],
            ),
            (
                vec![a1.clone(), c1.clone()],
                vec![a1.clone(), b1.clone()],
                vec!["default_c"],
                vec!["default_b"],
            ),
            (
                vec![],
                vec![a1.clone(), b1.clone()],
                vec![],
                vec!["default_a", "default_b"],
            ),
        ];
        for (i, (want, have, applied, deleted)) in cases.into_iter().enumerate() {
            let desired: BTreeMap<_, _> = want.into_iter().collect();
            let w = decide(&desired, &existing(&have));
            let got: Vec<&str> = w.apply.iter().map(|(_, s, _)| s.as_str()).collect();
            assert_eq!(got, applied, "case {i}: applied");
            let mut names: Vec<String> = deleted.iter().map(|s| node_secret_name(s)).collect();
            names.sort();
            assert_eq!(w.delete, names, "case {i}: deleted");
            for (name, stem, _) in &w.apply {
                assert_eq!(name, &node_secret_name(stem), "case {i}");
            }
        }
    }

    #[test]
    fn a_secret_with_another_stem_or_type_is_rewritten() {
        let (stem, c) = cert("a", "1");
        let name = node_secret_name(&stem);
        let mut s = secret("k8slb-system", &name, &stem, &c);
        s.type_ = Some("Opaque".into());
        let desired = BTreeMap::from([(stem.clone(), c.clone())]);
        let w = decide(&desired, &BTreeMap::from([(name.clone(), Arc::new(s))]));
        assert_eq!(w.apply.len(), 1);
        let mut s = secret("k8slb-system", &name, &stem, &c);
        s.metadata.annotations = None;
        let w = decide(&desired, &BTreeMap::from([(name, Arc::new(s))]));
        assert_eq!(w.apply.len(), 1);
    }

    #[test]
    fn the_node_secret_is_labelled_typed_and_annotated() {
        let (stem, c) = cert("web-tls", "1");
        let name = node_secret_name(&stem);
        let s = secret("k8slb-system", &name, &stem, &c);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "Secret");
        assert_eq!(v["type"], "kubernetes.io/tls");
        assert_eq!(v["metadata"]["labels"][NODE_CERT_LABEL], "true");
        assert_eq!(
            v["metadata"]["annotations"][NODE_CERT_STEM_ANNOTATION],
            "default_web-tls"
        );
        assert!(holds(&s, &stem, &c));
    }
}
