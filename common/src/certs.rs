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
mod tests {
    use super::*;

    #[cfg(feature = "fs")]
    fn cert(name: &str, body: &str) -> (String, NodeCert) {
        let file = CertFile::Secret {
            namespace: "default".parse().unwrap(),
            name: name.parse().unwrap(),
            version: chain_version(&format!("CHAIN {body}\n")),
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

    #[test]
    #[cfg(feature = "fs")]
    fn node_files_are_0600_replaced_when_changed_removed_when_unused_and_versioned() {
        use std::collections::BTreeMap;
        use std::os::unix::fs::PermissionsExt;
        use std::path::Path;
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("certs");
        let first: BTreeMap<_, _> = [cert("a", "1"), cert("b", "1")].into();
        let s = files::sync(&dir, &first).unwrap();
        assert_eq!(s.written, ["default_a", "default_b"]);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("default_a.pem")), 0o600);
        assert_eq!(mode(&dir.join("default_a.version")), 0o600);
        assert_eq!(
            std::fs::read_to_string(dir.join("default_a.pem")).unwrap(),
            "CHAIN 1\nKEY 1\n"
        );
        let present = files::present(&dir);
        assert_eq!(present["default_a"], first["default_a"].file.version());
        assert_eq!(present.len(), 2);
        // Unchanged: nothing written.
        assert_eq!(files::sync(&dir, &first).unwrap(), Synced::default());
        // a renewed, b gone.
        let second: BTreeMap<_, _> = [cert("a", "2")].into();
        let s = files::sync(&dir, &second).unwrap();
        assert_eq!(
            (s.written, s.removed),
            (vec!["default_a".to_string()], vec!["default_b".to_string()])
        );
        assert!(!dir.join("default_b.pem").exists() && !dir.join("default_b.version").exists());
        assert_eq!(
            files::present(&dir)["default_a"],
            second["default_a"].file.version()
        );
        // A .pem without its .version is not a certificate the state can use.
        std::fs::remove_file(dir.join("default_a.version")).unwrap();
        assert!(files::present(&dir).is_empty());
        assert!(files::present(&d.path().join("missing")).is_empty());
    }

    fn fixture(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/certs")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn tls_secret(crt: &str, key: &str) -> Secret {
        use k8s_openapi::ByteString;
        Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("web-tls".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            type_: Some(TLS_SECRET_TYPE.into()),
            data: Some(
                [
                    ("tls.crt".to_string(), ByteString(crt.as_bytes().to_vec())),
                    ("tls.key".to_string(), ByteString(key.as_bytes().to_vec())),
                ]
                .into(),
            ),
            ..Default::default()
        }
    }

    /// The fixtures' PEM `f` with its base64 body replaced by the base64 of `der`.
    fn pem_of(label: &str, der: &[u8]) -> String {
        super::pem::encode(label, der)
    }

    /// The first PEM block's DER of fixture `f`.
    fn der_of(f: &str) -> Vec<u8> {
        super::pem::blocks(&fixture(f), 8).unwrap().remove(0).der
    }

    /// One row per class: what OpenSSL (under HAProxy 2.6 and nginx, security level 2)
    /// refuses, what k8slb refuses beyond it, and what both load. `actor/tests/
    /// cert_acceptance.rs` shows each class against the real `haproxy -c` and `nginx -t`.
    /// No message quotes the key, and every message is short.
    #[test]
    fn a_secret_is_accepted_only_if_both_proxies_load_it() {
        let f = fixture;
        // A P-521 point's OID bytes (secp521r1) inside a block that is no key at all.
        let p521_oid_junk = pem_of(
            "PRIVATE KEY",
            &[
                0x30, 0x09, 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23, 0x05, 0x00,
            ],
        );
        let junk_cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let mut leaf_der_plus = der_of("leaf.crt");
        leaf_der_plus.extend_from_slice(b"XYZW");
        let mut rsa_der_plus = der_of("rsa.key");
        rsa_der_plus.push(0);
        let chain = f("leaf.crt") + &f("int.crt");
        type Case = (&'static str, String, String, Result<(), &'static str>);
        let cases: Vec<Case> = vec![
            // Both proxies load these.
            ("RSA 2048, PKCS#8", f("rsa.crt"), f("rsa.key"), Ok(())),
            ("RSA 2048, PKCS#1", f("rsa.crt"), f("rsa-pkcs1.key"), Ok(())),
            ("P-256, PKCS#8", f("ec.crt"), f("ec.key"), Ok(())),
            ("P-256, SEC1", f("ec.crt"), f("ec-sec1.key"), Ok(())),
            ("P-384", f("p384.crt"), f("p384.key"), Ok(())),
            ("P-521", f("p521.crt"), f("p521.key"), Ok(())),
            ("Ed25519", f("ed25519.crt"), f("ed25519.key"), Ok(())),
            ("leaf + intermediate", chain.clone(), f("leaf.key"), Ok(())),
            (
                "leaf + intermediate + root",
                chain.clone() + &f("ca.crt"),
                f("leaf.key"),
                Ok(()),
            ),
            (
                "text around the blocks",
                format!("subject=CN = x\n{}\nissuer=...\n{}", f("leaf.crt"), f("int.crt")),
                f("leaf.key"),
                Ok(()),
            ),
            (
                "self-signed with SHA-1 (its own signature is not checked)",
                f("sha1-self.crt"),
                f("ec.key"),
                Ok(()),
            ),
            // The proxies refuse these.
            (
                "a junk CERTIFICATE block after a valid one",
                f("ec.crt") + junk_cert,
                f("ec.key"),
                Err("certificate 2 of tls.crt does not decode as X.509"),
            ),
            (
                "a junk leaf",
                junk_cert.to_string(),
                f("ec.key"),
                Err("leaf certificate (block 1 of tls.crt) does not decode"),
            ),
            (
                "bytes after the leaf's DER",
                pem_of("CERTIFICATE", &leaf_der_plus),
                f("leaf.key"),
                Err("has bytes after its X.509 structure"),
            ),
            (
                "a leaf signed with SHA-1",
                f("sha1-leaf.crt"),
                f("leaf.key"),
                Err("is signed with SHA-1, which the proxies refuse on a leaf"),
            ),
            (
                "a leaf signed with MD5",
                f("md5-leaf.crt"),
                f("leaf.key"),
                Err("is signed with MD5"),
            ),
            (
                "a 1024-bit RSA intermediate",
                f("weak-int-leaf.crt") + &f("weak-int.crt"),
                f("leaf.key"),
                Err("certificate 2 of tls.crt has an RSA key of 1024 bits, which the proxies refuse"),
            ),
            (
                "an intermediate signed with SHA-1",
                f("sha1-int-leaf.crt") + &f("sha1-int.crt"),
                f("leaf.key"),
                Err("certificate 2 of tls.crt is signed with SHA-1, which the proxies refuse on a CA"),
            ),
            (
                "a 1024-bit RSA leaf",
                f("rsa1024.crt"),
                f("rsa1024.key"),
                Err("RSA key of 1024 bits, which the proxies refuse"),
            ),
            (
                "a P-192 leaf",
                f("p192.crt"),
                f("p192.key"),
                Err("P-192, which the proxies refuse"),
            ),
            (
                "junk PRIVATE KEY holding the P-521 OID",
                f("p521.crt"),
                p521_oid_junk,
                Err("tls.key is not a valid PKCS#8 private key"),
            ),
            (
                "a real P-521 key of another certificate",
                f("p521.crt"),
                f("other-p521.key"),
                Err("does not match the leaf certificate"),
            ),
            (
                "another P-256 key",
                f("ec.crt"),
                f("other-ec.key"),
                Err("does not match"),
            ),
            ("an EC key for an RSA certificate", f("rsa.crt"), f("ec.key"), Err("does not match")),
            (
                "the chain in the wrong order",
                f("int.crt") + &f("leaf.crt"),
                f("leaf.key"),
                Err("does not match the leaf certificate"),
            ),
            (
                "an encrypted key",
                f("ec.crt"),
                "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n".into(),
                Err("tls.key is encrypted"),
            ),
            // k8slb refuses these, which the proxies load.
            (
                "an Ed448 key",
                f("ed448.crt"),
                f("ed448.key"),
                Err("has an Ed448 key; k8slb serves RSA (2048 to 8192 bits), ECDSA (P-256, P-384, P-521) and Ed25519 keys"),
            ),
            (
                "a secp256k1 key",
                f("k256.crt"),
                f("k256.key"),
                Err("on the curve secp256k1; k8slb serves"),
            ),
            (
                "a private key in tls.crt",
                f("ec.crt") + &f("ec.key"),
                f("ec.key"),
                Err("block 2 of tls.crt is a private key, not a CERTIFICATE"),
            ),
            (
                "two keys",
                f("ec.crt"),
                f("ec.key") + &f("ec.key"),
                Err("more than 1 PEM blocks"),
            ),
            (
                "bytes after the key's DER",
                f("rsa.crt"),
                pem_of("PRIVATE KEY", &rsa_der_plus),
                Err("tls.key is not a valid PKCS#8 private key"),
            ),
            (
                "more certificates than the cap",
                f("ec.crt").repeat(MAX_CHAIN_CERTS + 1),
                f("ec.key"),
                Err("more than 8 PEM blocks"),
            ),
            (
                "more bytes than the cap",
                f("ec.crt") + &"x".repeat(MAX_CHAIN_BYTES),
                f("ec.key"),
                Err("more than the 65536 k8slb reads"),
            ),
            ("no certificate", "text".into(), f("ec.key"), Err("holds no PEM CERTIFICATE")),
            ("no key", f("ec.crt"), "".into(), Err("holds no PEM private key")),
            (
                "a certificate where the key should be",
                f("ec.crt"),
                f("ec.crt"),
                Err("tls.key holds a PEM block that is not an unencrypted private key"),
            ),
        ];
        for (what, crt, key, want) in &cases {
            let got = inspect(&tls_secret(crt, key));
            match (want, &got) {
                (Ok(()), Ok(c)) => {
                    // What the nodes get is the canonical PEM of the same blocks.
                    let blocks = |t: &str| super::pem::blocks(t, 8).unwrap();
                    assert_eq!(blocks(&c.chain_pem), blocks(crt), "{what}");
                    assert_eq!(blocks(&c.key_pem), blocks(key), "{what}");
                    assert!(!c.chain_pem.contains("subject="), "{what}");
                }
                (Err(part), Err(e)) => {
                    let msg = e.to_string();
                    assert!(msg.contains(part), "{what}: {msg}");
                    assert!(msg.len() < 300, "{what}: {} bytes: {msg}", msg.len());
                    assert!(
                        !msg.contains("PRIVATE KEY"),
                        "{what}: reads like a leak: {msg}"
                    );
                    for line in key.lines().filter(|l| !l.starts_with("-----")) {
                        assert!(!msg.contains(line), "{what} quotes the key: {msg}");
                    }
                }
                _ => panic!("{what}: want {want:?}, got {got:?}"),
            }
        }
    }

    /// OpenSSL compares only the public half of a key with the certificate; k8slb also
    /// checks that the private half is the public half's, so a key that "matches" also
    /// signs: an RSA key with the certificate's n and e but another d, an EC key with the
    /// certificate's public point but another scalar, are refused.
    #[test]
    fn a_key_that_only_claims_the_certificates_public_key_is_refused() {
        use pkcs1::der::{Decode, Encode};
        let rsa = der_of("rsa-pkcs1.key");
        let mut k = pkcs1::RsaPrivateKeyRef::from_der(&rsa).unwrap();
        let other = der_of("rsa1024.key");
        let other_info = pkcs8::PrivateKeyInfoRef::from_der(&other).unwrap();
        let o = pkcs1::RsaPrivateKeyRef::from_der(other_info.private_key.as_bytes()).unwrap();
        k.private_exponent = o.private_exponent;
        let forged = pem_of("RSA PRIVATE KEY", &k.to_der().unwrap());
        let e = inspect(&tls_secret(&fixture("rsa.crt"), &forged)).unwrap_err();
        assert_eq!(e.to_string(), "tls.key is not a consistent RSA private key");

        let mine = der_of("ec-sec1.key");
        let theirs = der_of("other-ec.key");
        let theirs = pkcs8::PrivateKeyInfoRef::from_der(&theirs).unwrap();
        let theirs = sec1::EcPrivateKey::from_der(theirs.private_key.as_bytes()).unwrap();
        let mut k = sec1::EcPrivateKey::from_der(&mine).unwrap();
        k.private_key = theirs.private_key;
        let forged = pem_of("EC PRIVATE KEY", &k.to_der().unwrap());
        let e = inspect(&tls_secret(&fixture("ec.crt"), &forged)).unwrap_err();
        assert!(
            e.to_string().contains("its public point is not its own"),
            "{e}"
        );
    }

    #[test]
    fn a_secret_of_another_type_is_refused_whatever_it_holds() {
        let mut s = tls_secret(&fixture("ec.crt"), &fixture("ec.key"));
        s.type_ = Some("Opaque".into());
        assert_eq!(inspect(&s), Err(CertError::WrongType("Opaque".into())));
        s.type_ = None;
        assert_eq!(inspect(&s), Err(CertError::WrongType("Opaque".into())));
        s.type_ = Some("x".repeat(1000));
        let Err(CertError::WrongType(t)) = inspect(&s) else {
            panic!("accepted")
        };
        assert_eq!(t.len(), 64, "bounded");
    }

    /// The canonical chain is what the version is taken of: text around the blocks, CRLF
    /// line ends or another line width do not make a new version.
    #[test]
    fn the_version_is_the_canonical_chains() {
        let (crt, key) = (
            fixture("leaf.crt") + &fixture("int.crt"),
            fixture("leaf.key"),
        );
        let a = inspect(&tls_secret(&crt, &key)).unwrap();
        let noisy = format!("# bundle\r\n{}", crt.replace('\n', "\r\n"));
        let b = inspect(&tls_secret(&noisy, &key)).unwrap();
        assert_eq!(a.file, b.file);
        assert_eq!(a.chain_pem, crt, "openssl's output is already canonical");
    }

    #[test]
    fn a_stem_is_a_namespace_and_a_secret_name_or_nothing() {
        let (ns, name) = secret_of_stem("default_web-tls").unwrap();
        assert_eq!((ns.as_str(), name.as_str()), ("default", "web-tls"));
        for bad in [
            "",
            "default",
            "_web",
            "default_",
            "../x_y",
            "a_b/c",
            "a_../../etc",
            "A_b",
            "a_b c",
            "a_b\n",
        ] {
            assert!(secret_of_stem(bad).is_none(), "{bad:?}");
        }
    }

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
