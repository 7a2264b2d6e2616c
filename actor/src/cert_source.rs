//! The node certificate Secrets into files (`--state configmap`): the actor watches the
//! Secrets of its namespace labelled `k8slb.io/node-certificate=true` (the watcher keeps
//! one per certificate the published state uses; the contract is `k8slb_common::certs`'s)
//! and keeps `--certs-dir` holding exactly them: `<stem>.pem` (chain, then key) and
//! `<stem>.version`, mode 0600, written atomically. The control loop notices the
//! directory change and applies again; a certificate the state names but that is not
//! there yet is left out of its listener meanwhile (`view::ViewOptions::secret_certs`).
//!
//! Which files is decided without I/O ([`CertSecrets`], table-tested); [`follow`] is the
//! thin async driver. A Secret is used only if its name is the one the watcher gives its
//! stem, its stem names a valid namespace and Secret (so an annotation can never name a
//! path outside the directory), and `certs::inspect` accepts its content. Never logs key
//! material: names, stems and counts.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8slb_common::certs::{
    self, chain_version, node_secret_name, secret_of_stem, NodeCert, NODE_CERT_LABEL,
    NODE_CERT_STEM_ANNOTATION,
};
use k8slb_common::routes::CertFile;
use kube::runtime::watcher;
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The node certificate Secrets as last seen, complete lists only.
#[derive(Debug, Default)]
pub struct CertSecrets {
    /// By Secret name.
    current: BTreeMap<String, Secret>,
    /// A re-list in progress (`Init` .. `InitDone`).
    listing: Option<BTreeMap<String, Secret>>,
    /// Whether a complete list was seen: before that, nothing is removed.
    listed: bool,
}

impl CertSecrets {
    /// Take one watch event. True: the complete view changed (sync the directory).
    pub fn event(&mut self, ev: watcher::Event<Secret>) -> bool {
        let name = |s: &Secret| s.metadata.name.clone().unwrap_or_default();
        match ev {
            watcher::Event::Init => {
                self.listing = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(s) => {
                self.listing
                    .get_or_insert_with(BTreeMap::new)
                    .insert(name(&s), s);
                false
            }
            watcher::Event::InitDone => {
                self.current = self.listing.take().unwrap_or_default();
                self.listed = true;
                true
            }
            watcher::Event::Apply(s) => {
                self.current.insert(name(&s), s);
                self.listed
            }
            watcher::Event::Delete(s) => {
                self.current.remove(&name(&s));
                self.listed
            }
        }
    }

    /// The Secrets of the last complete view, by name.
    pub fn secrets(&self) -> &BTreeMap<String, Secret> {
        &self.current
    }

    /// The certificates to have (stem → certificate), and why each Secret that is not used
    /// is not (name, reason).
    pub fn certs(&self) -> (BTreeMap<String, NodeCert>, Vec<(String, String)>) {
        let mut ok = BTreeMap::new();
        let mut refused = Vec::new();
        for (name, s) in &self.current {
            match node_cert(s) {
                Ok((stem, c)) => {
                    ok.insert(stem, c);
                }
                Err(why) => refused.push((name.clone(), why)),
            }
        }
        (ok, refused)
    }
}

/// What a node certificate Secret holds, checked.
pub fn node_cert(s: &Secret) -> Result<(String, NodeCert), String> {
    let labelled = s
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(NODE_CERT_LABEL))
        .is_some_and(|v| v == "true");
    if !labelled {
        return Err(format!("not labelled {NODE_CERT_LABEL}=true"));
    }
    let stem = s
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_CERT_STEM_ANNOTATION))
        .ok_or_else(|| format!("no annotation {NODE_CERT_STEM_ANNOTATION}"))?;
    let (namespace, name) = secret_of_stem(stem).ok_or_else(|| {
        format!(
            "annotation {NODE_CERT_STEM_ANNOTATION} is not <namespace>_<secret name>: {:?}",
            stem.chars().take(80).collect::<String>()
        )
    })?;
    if s.metadata.name.as_deref() != Some(node_secret_name(stem).as_str()) {
        return Err(format!(
            "its name is not {} (the name the watcher gives {stem})",
            node_secret_name(stem)
        ));
    }
    let c = certs::inspect(s).map_err(|e| e.to_string())?;
    let version = chain_version(&c.chain_pem);
    Ok((
        stem.clone(),
        NodeCert {
            file: CertFile::Secret {
                namespace,
                name,
                version,
            },
            chain_pem: c.chain_pem,
            key_pem: c.key_pem,
        },
    ))
}

/// Follow the node certificate Secrets of `namespace` into `dir` until the task is
/// dropped. Errors are logged (once per run of failures) and retried with backoff; the
/// files stay as they were meanwhile.
pub async fn follow(client: Client, namespace: String, dir: PathBuf) {
    let api: Api<Secret> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().labels(&format!("{NODE_CERT_LABEL}=true"));
    let stream = watcher::watcher(api, config);
    futures::pin_mut!(stream);
    let mut secrets = CertSecrets::default();
    let mut failing = false;
    let mut backoff = Duration::from_millis(500);
    let mut refused_said: Vec<(String, String)> = Vec::new();
    while let Some(item) = stream.next().await {
        let ev = match item {
            Ok(ev) => ev,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, namespace = %namespace, "node certificate watch failed; keeping the files and retrying");
                    failing = true;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if failing {
            tracing::info!("node certificate watch is back");
            failing = false;
        }
        backoff = Duration::from_millis(500);
        if !secrets.event(ev) {
            continue;
        }
        let (certs, refused) = secrets.certs();
        if refused != refused_said {
            for (name, why) in refused.iter().filter(|r| !refused_said.contains(r)) {
                tracing::warn!(secret = %format!("{namespace}/{name}"), reason = %why, "node certificate Secret not used");
            }
            refused_said = refused;
        }
        match certs::files::sync(&dir, &certs) {
            Ok(s) if s.written.is_empty() && s.removed.is_empty() => {}
            Ok(s) => tracing::info!(
                dir = %dir.display(),
                written = ?s.written,
                removed = ?s.removed,
                "node certificates updated"
            ),
            Err(e) => {
                tracing::error!(dir = %dir.display(), error = %e, "cannot write the node certificates")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::ByteString;

    const CHAIN: &str = include_str!("../../common/tests/fixtures/certs/ec.crt");
    const KEY: &str = include_str!("../../common/tests/fixtures/certs/ec.key");

    fn secret(stem: &str, name: Option<&str>, chain: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.map_or_else(|| node_secret_name(stem), str::to_string)),
                namespace: Some("k8slb-system".into()),
                labels: Some([(NODE_CERT_LABEL.to_string(), "true".to_string())].into()),
                annotations: Some(
                    [(NODE_CERT_STEM_ANNOTATION.to_string(), stem.to_string())].into(),
                ),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(
                [
                    ("tls.crt".to_string(), ByteString(chain.as_bytes().to_vec())),
                    ("tls.key".to_string(), ByteString(KEY.as_bytes().to_vec())),
                ]
                .into(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_node_secret_is_used_only_when_its_name_stem_and_content_check_out() {
        let (stem, c) = node_cert(&secret("default_web-tls", None, CHAIN)).unwrap();
        assert_eq!(stem, "default_web-tls");
        assert_eq!(c.file.stem(), stem);
        assert_eq!(c.file.version(), chain_version(CHAIN));
        assert_eq!(c.pem(), format!("{CHAIN}{KEY}"));
        let refused = [
            secret("../../etc_passwd", None, CHAIN),
            secret("default_web-tls/../x", None, CHAIN),
            secret("default", None, CHAIN),
            secret("default_web-tls", Some("k8slb-cert-other"), CHAIN),
            secret("default_web-tls", None, "not a certificate"),
        ];
        for s in refused {
            let why = node_cert(&s).unwrap_err();
            assert!(!why.contains(KEY.lines().nth(1).unwrap()), "{why}");
        }
        let mut unlabelled = secret("default_web-tls", None, CHAIN);
        unlabelled.metadata.labels = None;
        assert!(node_cert(&unlabelled).is_err());
    }

    #[test]
    fn only_complete_lists_replace_the_view_and_nothing_is_removed_before_one() {
        let a = secret("default_a", None, CHAIN);
        let b = secret("default_b", None, CHAIN);
        let mut s = CertSecrets::default();
        // Before the first complete list: no sync at all.
        assert!(!s.event(watcher::Event::Apply(a.clone())));
        assert!(!s.event(watcher::Event::Init));
        assert!(!s.event(watcher::Event::InitApply(b.clone())));
        assert!(s.event(watcher::Event::InitDone));
        let stems = |s: &CertSecrets| s.certs().0.into_keys().collect::<Vec<_>>();
        assert_eq!(
            stems(&s),
            ["default_b"],
            "the list replaces what came before it"
        );
        assert!(s.event(watcher::Event::Apply(a.clone())));
        assert_eq!(stems(&s), ["default_a", "default_b"]);
        assert!(s.event(watcher::Event::Delete(b.clone())));
        assert_eq!(stems(&s), ["default_a"]);
        // A re-list in progress does not change the view until it is complete.
        assert!(!s.event(watcher::Event::Init));
        assert_eq!(stems(&s), ["default_a"]);
        assert!(s.event(watcher::Event::InitDone));
        assert!(stems(&s).is_empty());
    }
}
