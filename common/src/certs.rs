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
//!   the private key, both canonical PEM re-encoded by [`inspect`] from the user's Secret
//!   once it accepted them (so only the decoded blocks reach a node, never the text around
//!   them). It deletes the ones no longer used. Actors list/watch only Secrets with that
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

/// Why a Secret's certificate is not used. The message never quotes key material, and is
/// bounded (a few hundred bytes whatever the Secret holds).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    #[error("has type {0:?}, not kubernetes.io/tls")]
    WrongType(String),
    #[error("{0}")]
    Invalid(String),
}

/// The most bytes of `tls.crt` read: a chain of eight RSA 8192 certificates is about 24 KB.
pub const MAX_CHAIN_BYTES: usize = 64 * 1024;
/// The most certificates in `tls.crt` (the leaf and its CAs).
pub const MAX_CHAIN_CERTS: usize = 8;
/// The most bytes of `tls.key`: an RSA 8192 PKCS#8 key is about 6.4 KB.
pub const MAX_KEY_BYTES: usize = 16 * 1024;

mod names;
mod openssl;
mod pem;

pub use names::{covers, names_list};

/// What [`inspect_names`] takes from a Secret: the node certificate and the DNS names its
/// leaf is for (see [`covers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    pub cert: NodeCert,
    /// The leaf's subjectAltName DNS names (lowercase, no trailing dot, sorted); never
    /// its common name.
    pub dns_names: Vec<String>,
}

/// [`inspect`], and the DNS names the certificate is for.
pub fn inspect_names(secret: &Secret) -> Result<Inspected, CertError> {
    let mut dns_names = Vec::new();
    let cert = inspect_with(secret, |leaf_der| dns_names = names::dns_names(leaf_der))?;
    Ok(Inspected { cert, dns_names })
}

/// Check a user's TLS Secret as HAProxy and nginx will load it, and take what the nodes
/// need from it.
///
/// Accepted (see `certs/openssl.rs` for what the proxies refuse, found with the real
/// `haproxy -c` and `nginx -t`, and what k8slb refuses beyond that):
///
/// - type `kubernetes.io/tls`;
/// - `tls.crt`: at most [`MAX_CHAIN_BYTES`] of PEM text, 1 to [`MAX_CHAIN_CERTS`]
///   `CERTIFICATE` blocks, the leaf first, and no other block (explanatory text between
///   blocks is dropped); every one an X.509 certificate whose key the proxies load at their
///   security level (RSA 2048 to 8192 bits, ECDSA P-256/P-384/P-521, Ed25519) and, unless
///   self-signed, signed with SHA-224 or stronger (never MD5 or SHA-1);
/// - `tls.key`: at most [`MAX_KEY_BYTES`], exactly one unencrypted PEM private key
///   (PKCS#8, PKCS#1 RSA or SEC1 EC), consistent, whose public key is the leaf's.
///
/// What the nodes get is re-encoded from the decoded blocks (canonical PEM), so nothing of
/// the Secret but the certificates and the key reaches a proxy.
pub fn inspect(secret: &Secret) -> Result<NodeCert, CertError> {
    inspect_with(secret, |_| {})
}

/// [`inspect`], showing the leaf's DER to `leaf` once the whole chain and key passed.
fn inspect_with(secret: &Secret, leaf: impl FnOnce(&[u8])) -> Result<NodeCert, CertError> {
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
    let invalid = CertError::Invalid;
    let field = |k: &str, max: usize| -> Result<&str, CertError> {
        let data = secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .ok_or_else(|| invalid(format!("has no {k}")))?;
        if data.0.len() > max {
            return Err(invalid(format!(
                "{k} is {} bytes, more than the {max} k8slb reads",
                data.0.len()
            )));
        }
        std::str::from_utf8(&data.0).map_err(|_| invalid(format!("{k} is not PEM text")))
    };
    let chain_text = field("tls.crt", MAX_CHAIN_BYTES)?;
    let key_text = field("tls.key", MAX_KEY_BYTES)?;

    let blocks =
        pem::blocks(chain_text, MAX_CHAIN_CERTS).map_err(|e| invalid(format!("tls.crt: {e}")))?;
    if blocks.is_empty() {
        return Err(invalid("tls.crt holds no PEM CERTIFICATE block".into()));
    }
    let mut chain_pem = String::new();
    let mut leaf_key = None;
    for (i, b) in blocks.iter().enumerate() {
        let which = || match i {
            0 => "the leaf certificate (block 1 of tls.crt)".to_string(),
            _ => format!("certificate {} of tls.crt", i + 1),
        };
        if b.label != "CERTIFICATE" {
            // A key's label is not repeated: "PRIVATE KEY" in an Event reads like a leak.
            let what = if b.label.contains("PRIVATE KEY") {
                "private key"
            } else {
                &b.label
            };
            return Err(invalid(format!(
                "block {} of tls.crt is a {what}, not a CERTIFICATE",
                i + 1
            )));
        }
        let key = openssl::certificate(&b.der, i == 0)
            .map_err(|e| invalid(format!("{} {e}", which())))?;
        leaf_key.get_or_insert(key);
        chain_pem.push_str(&pem::encode("CERTIFICATE", &b.der));
    }

    let keys = pem::blocks(key_text, 1).map_err(|e| {
        invalid(format!(
            "tls.key: {e} (it must hold exactly one PEM private key)"
        ))
    })?;
    let [key] = keys.as_slice() else {
        return Err(invalid("tls.key holds no PEM private key".into()));
    };
    let derived = openssl::private_key(&key.label, &key.der).map_err(invalid)?;
    if leaf_key.as_ref() != Some(&derived) {
        return Err(invalid(
            "the key in tls.key does not match the leaf certificate (the first of tls.crt)".into(),
        ));
    }
    let key_pem = pem::encode(&key.label, &key.der);
    leaf(&blocks[0].der);
    if let CertFile::Secret { version, .. } = &mut file {
        *version = chain_version(&chain_pem);
    }
    Ok(NodeCert {
        file,
        chain_pem,
        key_pem,
    })
}

/// The most bytes of a CA bundle (a BackendTLSPolicy's `ca.crt`, a Gateway's client
/// certificate validation CA): sixteen RSA 8192 CA certificates are about 48 KB.
pub const MAX_CA_BYTES: usize = 64 * 1024;
/// The most certificates in a CA bundle.
pub const MAX_CA_CERTS: usize = 16;

/// A user's CA bundle (a ConfigMap's `ca.crt`) checked as HAProxy's `ca-file` and nginx's
/// `proxy_ssl_trusted_certificate` / `ssl_client_certificate` will load it: at most
/// [`MAX_CA_BYTES`] of PEM text holding 1 to [`MAX_CA_CERTS`] `CERTIFICATE` blocks and no
/// other block, each an X.509 certificate the proxies load (as [`inspect`] checks a
/// chain). What the nodes get is the canonical PEM re-encoded from the decoded blocks:
/// nothing else of the user's text reaches a file. The message never quotes the text.
pub fn ca_bundle(text: &str) -> Result<String, CertError> {
    let invalid = CertError::Invalid;
    if text.len() > MAX_CA_BYTES {
        return Err(invalid(format!(
            "ca.crt is {} bytes, more than the {MAX_CA_BYTES} k8slb reads",
            text.len()
        )));
    }
    let blocks = pem::blocks(text, MAX_CA_CERTS).map_err(|e| invalid(format!("ca.crt: {e}")))?;
    if blocks.is_empty() {
        return Err(invalid("ca.crt holds no PEM CERTIFICATE block".into()));
    }
    let mut out = String::new();
    for (i, b) in blocks.iter().enumerate() {
        if b.label != "CERTIFICATE" {
            let what = if b.label.contains("PRIVATE KEY") {
                "private key"
            } else {
                &b.label
            };
            return Err(invalid(format!(
                "block {} of ca.crt is a {what}, not a CERTIFICATE",
                i + 1
            )));
        }
        openssl::certificate(&b.der, false)
            .map_err(|e| invalid(format!("certificate {} of ca.crt {e}", i + 1)))?;
        out.push_str(&pem::encode("CERTIFICATE", &b.der));
    }
    Ok(out)
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

/// The Secret certificates the state's HTTPS listeners name.
pub fn used_by(state: &crate::state::State) -> std::collections::BTreeSet<CertFile> {
    used_by_routes(&state.http)
}

/// The Secret certificates `routes` name: their HTTPS listeners' and terminating TLS
/// listeners', and the client certificates their rules present to TLS backends
/// ([`client_certificates`]).
pub fn used_by_routes(routes: &crate::routes::HttpRoutes) -> std::collections::BTreeSet<CertFile> {
    routes
        .tls_settings()
        .flat_map(|t| {
            t.certificates
                .iter()
                .map(|c| &c.file)
                .chain(t.default_certificate.as_ref())
        })
        .chain(client_certificates(routes))
        .filter(|f| matches!(f, CertFile::Secret { .. }))
        .cloned()
        .collect()
}

/// The client certificates the rules of `routes` present to their TLS backends
/// ([`crate::routes::WeightedBackend::client_certificate`]), each once.
pub fn client_certificates(
    routes: &crate::routes::HttpRoutes,
) -> std::collections::BTreeSet<&CertFile> {
    client_certificates_by_backend(routes)
        .into_iter()
        .map(|(_, c)| c)
        .collect()
}

/// Each (backend, client certificate) that a rule of `routes` presents, once.
pub fn client_certificates_by_backend(
    routes: &crate::routes::HttpRoutes,
) -> std::collections::BTreeSet<(&crate::routes::BackendId, &CertFile)> {
    routes
        .listeners
        .iter()
        .flat_map(|l| {
            l.virtual_hosts
                .iter()
                .flat_map(|v| &v.rules)
                .map(|r| &r.action)
                .chain(&l.default_action)
        })
        .filter_map(|a| match a {
            crate::routes::RouteAction::Forward { backends, .. } => Some(backends),
            _ => None,
        })
        .flatten()
        .filter_map(|b| Some((&b.id, b.client_certificate.as_ref()?)))
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

/// The stem's Secret: `<namespace>_<name>` back into its parts, validated as the state
/// validates them (so a stem from an annotation can name nothing outside a directory).
pub fn secret_of_stem(stem: &str) -> Option<(crate::names::ObjectName, crate::routes::SecretName)> {
    let (ns, name) = stem.split_once('_')?;
    Some((ns.parse().ok()?, name.parse().ok()?))
}

/// What a node certificate directory sync changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Synced {
    pub written: Vec<String>,
    pub removed: Vec<String>,
}

/// The node certificate files: `<dir>/<stem>.pem` (the chain, then the key, mode 0600) and
/// `<dir>/<stem>.version` (the chain's [`chain_version`], so a reader knows which
/// certificate a file holds without parsing it: a renewal is a new version, and a file
/// that is not there yet, or still the old one, is told apart from the one the state
/// names). The `.pem` is replaced before the `.version`, so a `.version` never names
/// content that is not in place. The directory is made 0700. (Feature `fs`.)
#[cfg(feature = "fs")]
pub mod files {
    use super::{NodeCert, Synced};
    use std::collections::BTreeMap;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    use std::path::Path;

    fn ensure_dir(dir: &Path) -> std::io::Result<()> {
        if !dir.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        Ok(())
    }

    fn write_0600(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        crate::fs::write_atomic(path, bytes)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
    }

    /// Write the new and changed certificates of `certs` (stem → certificate); remove
    /// nothing.
    pub fn write(dir: &Path, certs: &BTreeMap<String, NodeCert>) -> std::io::Result<Vec<String>> {
        ensure_dir(dir)?;
        let mut written = Vec::new();
        for (stem, cert) in certs {
            let pem_path = dir.join(format!("{stem}.pem"));
            let version_path = dir.join(format!("{stem}.version"));
            let pem = cert.pem();
            let version = cert.file.version();
            let same = std::fs::read(&pem_path).ok().as_deref() == Some(pem.as_bytes())
                && std::fs::read(&version_path).ok().as_deref() == Some(version.as_bytes());
            if same {
                continue;
            }
            write_0600(&pem_path, pem.as_bytes())?;
            write_0600(&version_path, version.as_bytes())?;
            written.push(stem.clone());
        }
        Ok(written)
    }

    /// Remove the certificate files whose stem is not in `keep`.
    pub fn remove_unused<T>(
        dir: &Path,
        keep: &BTreeMap<String, T>,
    ) -> std::io::Result<Vec<String>> {
        let mut removed = Vec::new();
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
            Err(e) => return Err(e),
        };
        for e in entries {
            let name = e?.file_name().to_string_lossy().into_owned();
            let stem = name
                .strip_suffix(".pem")
                .or_else(|| name.strip_suffix(".version"));
            if let Some(stem) = stem {
                if !keep.contains_key(stem) {
                    std::fs::remove_file(dir.join(&name))?;
                    if name.ends_with(".pem") {
                        removed.push(stem.to_string());
                    }
                }
            }
        }
        removed.sort();
        Ok(removed)
    }

    /// Make `dir` hold exactly `certs`.
    pub fn sync(dir: &Path, certs: &BTreeMap<String, NodeCert>) -> std::io::Result<Synced> {
        let written = write(dir, certs)?;
        let removed = remove_unused(dir, certs)?;
        Ok(Synced { written, removed })
    }

    /// The certificates in `dir`: stem → version, for each `<stem>.pem` with its
    /// `<stem>.version`. A missing or unreadable directory is empty.
    pub fn present(dir: &Path) -> BTreeMap<String, String> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return BTreeMap::new();
        };
        let mut out = BTreeMap::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".version") else {
                continue;
            };
            if !dir.join(format!("{stem}.pem")).is_file() {
                continue;
            }
            if let Ok(v) = std::fs::read_to_string(dir.join(&name)) {
                out.insert(stem.to_string(), v.trim().to_string());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
