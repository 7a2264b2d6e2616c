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
    keys_match(&chain_pem, &key_pem)?;
    if let CertFile::Secret { version, .. } = &mut file {
        *version = chain_version(&chain_pem);
    }
    Ok(NodeCert {
        file,
        chain_pem,
        key_pem,
    })
}

/// That the first certificate of `chain_pem` parses as X.509 and carries the public key
/// of `key_pem` (rustls' `CertifiedKey::keys_match`, over the ring provider: RSA, ECDSA
/// P-256 and P-384, Ed25519). An EC P-521 key, which HAProxy and nginx serve but ring
/// cannot load, is accepted unchecked (the proxy's own check is then the only one); any
/// other key ring cannot load is refused. Messages never quote key material.
fn keys_match(chain_pem: &str, key_pem: &str) -> Result<(), CertError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|_| CertError::Invalid("tls.crt is not valid PEM".into()))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|_| CertError::Invalid("tls.key is not a valid PEM private key".into()))?;
    let signing = match rustls::crypto::ring::sign::any_supported_type(&key) {
        Ok(k) => k,
        Err(_) if is_p521(key.secret_der()) => return Ok(()),
        Err(_) => {
            return Err(CertError::Invalid(
                "tls.key is not an RSA, ECDSA (P-256, P-384, P-521) or Ed25519 private key".into(),
            ))
        }
    };
    let certified = rustls::sign::CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(CertError::Invalid(
                "the key in tls.key does not match the certificate in tls.crt".into(),
            ))
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(_) => Err(CertError::Invalid(
            "the first certificate of tls.crt does not parse as X.509".into(),
        )),
    }
}

/// Whether a private key's DER names the curve secp521r1 (OID 1.3.132.0.35).
fn is_p521(der: &[u8]) -> bool {
    const OID: [u8; 7] = [0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23];
    der.windows(OID.len()).any(|w| w == OID)
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

    /// (certificate, key, accepted?) with real keys: matching pairs of every key form are
    /// accepted, a swapped key or garbage is refused, and no message quotes the key.
    #[test]
    fn the_key_must_match_the_certificate() {
        let garbage_cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let garbage_key = "-----BEGIN PRIVATE KEY-----\nBBBB\n-----END PRIVATE KEY-----\n";
        let cases: Vec<(String, String, Result<(), &str>)> = vec![
            (fixture("ec.crt"), fixture("ec.key"), Ok(())),
            (fixture("ec.crt"), fixture("ec-sec1.key"), Ok(())),
            (fixture("rsa.crt"), fixture("rsa.key"), Ok(())),
            (fixture("rsa.crt"), fixture("rsa-pkcs1.key"), Ok(())),
            // A chain: the leaf first (the key is the leaf's).
            (
                fixture("ec.crt") + &fixture("other-ec.crt"),
                fixture("ec.key"),
                Ok(()),
            ),
            // P-521: ring cannot compare it; the proxies serve it.
            (fixture("p521.crt"), fixture("p521.key"), Ok(())),
            (
                fixture("ec.crt"),
                fixture("other-ec.key"),
                Err("does not match"),
            ),
            (fixture("rsa.crt"), fixture("ec.key"), Err("does not match")),
            (
                fixture("other-ec.crt") + &fixture("ec.crt"),
                fixture("ec.key"),
                Err("does not match"),
            ),
            (
                garbage_cert.to_string(),
                fixture("ec.key"),
                Err("does not parse as X.509"),
            ),
            (
                fixture("ec.crt"),
                garbage_key.to_string(),
                Err("is not an RSA, ECDSA"),
            ),
        ];
        for (i, (crt, key, want)) in cases.iter().enumerate() {
            let got = inspect(&tls_secret(crt, key));
            match (want, &got) {
                (Ok(()), Ok(c)) => assert_eq!(c.chain_pem, *crt, "case {i}"),
                (Err(part), Err(e)) => {
                    let msg = e.to_string();
                    assert!(msg.contains(part), "case {i}: {msg}");
                    let body = key.lines().nth(1).unwrap_or_default();
                    assert!(!msg.contains(body), "case {i} quotes the key: {msg}");
                }
                _ => panic!("case {i}: want {want:?}, got {got:?}"),
            }
        }
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
