//! Certificates for the LB nodes: how the TLS Secrets that Ingresses name reach the
//! actors, apart from the state (which never holds key material; it names a
//! [`CertFile`] only).
//!
//! The contract between the watcher (the only reader of users' Secrets) and the actors:
//!
//! - **Kubernetes.** For each [`CertFile::Secret`] that the published state uses, the
//!   watcher keeps one Secret in its own namespace, named [`node_secret_name`] of the
//!   file's stem, of type `kubernetes.io/tls` (so the API server itself checks that it has
//!   `tls.crt` and `tls.key`), labelled [`NODE_CERT_LABEL`]`: "true"` and annotated
//!   [`NODE_CERT_STEM_ANNOTATION`]`: <stem>`; `tls.crt` is the chain (leaf first), `tls.key`
//!   the private key, both PEM, copied from the user's Secret after [`inspect`] accepted
//!   them. It deletes the ones no longer used. Actors list/watch only Secrets with that
//!   label in that namespace (RBAC: a Role in the watcher's namespace, nothing
//!   cluster-wide).
//! - **Files mode.** The same content as files `<dir>/<stem>.pem` (chain, then key),
//!   mode 0600, in a directory both sides are given.
//! - **On the node** the actor writes `<secret cert dir>/<stem>.pem` (chain, then key: the
//!   form HAProxy's `crt` takes, and nginx's `ssl_certificate` + `ssl_certificate_key`
//!   naming the same file), mode 0600, on a tmpfs, and removes it when unused.

use crate::routes::CertFile;
use k8s_openapi::api::core::v1::Secret;

/// Label of the node certificate Secrets (value `"true"`).
pub const NODE_CERT_LABEL: &str = "k8slb.io/node-certificate";
/// Annotation of a node certificate Secret: the [`CertFile::stem`] it holds.
pub const NODE_CERT_STEM_ANNOTATION: &str = "k8slb.io/certificate";
/// The Secret type whose certificates are used (and the node Secrets' type).
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

/// The name of the node Secret holding the certificate of `stem`: `k8slb-cert-` and 16
/// hex digits of FNV-1a 64 of the stem (a stem can be longer than a name may be, and
/// holds `_`, which a name may not).
pub fn node_secret_name(stem: &str) -> String {
    format!("k8slb-cert-{}", chain_version(stem))
}

/// A certificate the nodes need: the chain and the key, PEM. `Debug` never prints the key.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeCert {
    pub file: CertFile,
    pub chain_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for NodeCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCert")
            .field("file", &self.file)
            .field("chain_pem", &format_args!("{} bytes", self.chain_pem.len()))
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl NodeCert {
    /// The node file's content: the chain, then the key.
    pub fn pem(&self) -> String {
        let mut s = self.chain_pem.clone();
        if !s.ends_with('\n') {
            s.push('\n');
        }
        s.push_str(&self.key_pem);
        if !s.ends_with('\n') {
            s.push('\n');
        }
        s
    }
}

/// Why a Secret's certificate is not used. The message never quotes key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    #[error("has type {0:?}, not kubernetes.io/tls")]
    WrongType(String),
    #[error("{0}")]
    Invalid(String),
}

/// Check a user's TLS Secret and take what the nodes need from it.
///
/// Accepted: type `kubernetes.io/tls`; `tls.crt` holding one or more PEM `CERTIFICATE`
/// blocks and nothing else that is PEM; `tls.key` holding exactly one PEM private key
/// (PKCS#8, PKCS#1 RSA or SEC1 EC).
pub fn inspect(secret: &Secret) -> Result<NodeCert, CertError> {
    let type_ = secret.type_.as_deref().unwrap_or("Opaque");
    if type_ != TLS_SECRET_TYPE {
        return Err(CertError::WrongType(type_.chars().take(64).collect()));
    }
    let ns = secret.metadata.namespace.as_deref().unwrap_or("default");
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    let mut file = CertFile::Secret {
        namespace: ns
            .parse()
            .map_err(|e| CertError::Invalid(format!("namespace: {e}")))?,
        name: name
            .parse()
            .map_err(|e| CertError::Invalid(format!("name: {e}")))?,
        version: String::new(),
    };
    let field = |k: &str| -> Result<String, CertError> {
        let data = secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .ok_or_else(|| CertError::Invalid(format!("has no {k}")))?;
        String::from_utf8(data.0.clone())
            .map_err(|_| CertError::Invalid(format!("{k} is not PEM text")))
    };
    let chain_pem = field("tls.crt")?;
    let key_pem = field("tls.key")?;
    let certs = pem_labels(&chain_pem);
    if certs.is_empty() || certs.iter().any(|l| l != "CERTIFICATE") {
        return Err(CertError::Invalid(
            "tls.crt must hold PEM CERTIFICATE blocks only".into(),
        ));
    }
    let keys = pem_labels(&key_pem);
    let key_ok = keys.len() == 1
        && ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"].contains(&keys[0].as_str());
    if !key_ok {
        return Err(CertError::Invalid(
            "tls.key must hold exactly one PEM private key".into(),
        ));
    }
    if let CertFile::Secret { version, .. } = &mut file {
        *version = chain_version(&chain_pem);
    }
    Ok(NodeCert {
        file,
        chain_pem,
        key_pem,
    })
}

/// The version of a certificate chain: 16 hex digits of FNV-1a 64 over its PEM text. A
/// change detector over public data (the chain, never the key), not a security check.
pub fn chain_version(chain_pem: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in chain_pem.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The labels of the PEM blocks of `text` (`-----BEGIN <label>-----`).
fn pem_labels(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("-----BEGIN ")
                .and_then(|r| r.strip_suffix("-----"))
        })
        .map(str::to_string)
        .collect()
}

/// The Secret certificates the state's HTTPS listeners name.
pub fn used_by(state: &crate::state::State) -> std::collections::BTreeSet<CertFile> {
    used_by_routes(&state.http)
}

/// The Secret certificates `routes`' HTTPS listeners name.
pub fn used_by_routes(routes: &crate::routes::HttpRoutes) -> std::collections::BTreeSet<CertFile> {
    routes
        .listeners
        .iter()
        .filter_map(|l| l.tls.as_ref())
        .flat_map(|t| {
            t.certificates
                .iter()
                .map(|c| &c.file)
                .chain(t.default_certificate.as_ref())
        })
        .filter(|f| matches!(f, CertFile::Secret { .. }))
        .cloned()
        .collect()
}

/// What the nodes need for `state`: each certificate it names, from the Secret that
/// [`inspect`] accepts, by stem. A named Secret that is missing or refused is left out
/// (the plan reported it, and such a certificate is never named by the state).
pub fn node_certs(
    state: &crate::state::State,
    secrets: &[Secret],
) -> std::collections::BTreeMap<String, NodeCert> {
    let used = used_by(state);
    secrets
        .iter()
        .filter_map(|s| inspect(s).ok())
        .filter(|c| used.contains(&c.file))
        .map(|c| (c.file.stem(), c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_secret_names_are_valid_and_distinct() {
        let a = node_secret_name("default_web-tls");
        let b = node_secret_name("default_web-tls2");
        assert_ne!(a, b);
        assert_eq!(a.len(), "k8slb-cert-".len() + 16);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'));
    }
}
