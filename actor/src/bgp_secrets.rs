//! The BGP password Secrets into files (`--state configmap` with BGP-mode pools): the
//! actor watches the Secrets of its namespace of type `kubernetes.io/basic-auth` (what a
//! peer's `passwordSecret` names; MetalLB's BGP peers use the same type) and keeps
//! `--bgp-secrets-dir` holding exactly them, one directory per Secret with its
//! `password` file (the layout of a Secret volume), mode 0600, written atomically. The
//! BGP driver reads `<dir>/<name>/password` when it renders `frr.conf`
//! ([`crate::frr::read_password`], which checks it); in the files mode that directory is
//! written by whoever runs the actor. Which files is decided without I/O
//! ([`wanted`], table-tested); [`follow`] is the thin async driver. Never logs a
//! password: names and counts only.

use crate::cert_source::CertSecrets;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8slb_common::bgp::{SecretName, PASSWORD_KEY, PASSWORD_MAX_BYTES, PASSWORD_SECRET_TYPE};
use kube::runtime::watcher;
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The password files to have: Secret name → its `password` bytes. A Secret whose name
/// is not a valid directory name, or without a `password` key, has none; a value far
/// beyond any password is not copied (the reader says why the peer is left out).
pub fn wanted(secrets: &BTreeMap<String, Secret>) -> BTreeMap<SecretName, Vec<u8>> {
    secrets
        .iter()
        .filter(|(_, s)| s.type_.as_deref() == Some(PASSWORD_SECRET_TYPE))
        .filter_map(|(name, s)| {
            let name: SecretName = name.parse().ok()?;
            let value = s.data.as_ref()?.get(PASSWORD_KEY)?;
            (value.0.len() <= 4 * PASSWORD_MAX_BYTES).then(|| (name, value.0.clone()))
        })
        .collect()
}

/// Make `dir` hold exactly `wanted`: `<dir>/<name>/password` each; other directories
/// removed. Returns the names written and removed.
pub fn sync(
    dir: &Path,
    wanted: &BTreeMap<SecretName, Vec<u8>>,
) -> std::io::Result<(Vec<String>, Vec<String>)> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let mut written = Vec::new();
    for (name, value) in wanted {
        let d = dir.join(name.as_str());
        let f = d.join(PASSWORD_KEY);
        if std::fs::read(&f).ok().as_deref() == Some(value.as_slice()) {
            continue;
        }
        std::fs::create_dir_all(&d)?;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700))?;
        k8slb_common::fs::write_atomic(&f, value)?;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600))?;
        written.push(name.to_string());
    }
    let mut removed = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let keep = name
            .parse::<SecretName>()
            .is_ok_and(|n| wanted.contains_key(&n));
        if !keep && e.file_type()?.is_dir() {
            std::fs::remove_dir_all(e.path())?;
            removed.push(name);
        }
    }
    Ok((written, removed))
}

/// Follow the password Secrets of `namespace` into `dir` until the task is dropped.
/// Errors are logged (once per run of failures) and retried with backoff; the files stay
/// as they were meanwhile.
pub async fn follow(client: Client, namespace: String, dir: PathBuf) {
    let api: Api<Secret> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("type={PASSWORD_SECRET_TYPE}"));
    let stream = watcher::watcher(api, config);
    futures::pin_mut!(stream);
    let mut secrets = CertSecrets::default();
    let mut failing = false;
    let mut backoff = Duration::from_millis(500);
    while let Some(item) = stream.next().await {
        let ev = match item {
            Ok(ev) => ev,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, namespace = %namespace, "BGP password Secret watch failed; keeping the files and retrying");
                    failing = true;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if failing {
            tracing::info!("BGP password Secret watch is back");
            failing = false;
        }
        backoff = Duration::from_millis(500);
        if !secrets.event(ev) {
            continue;
        }
        match sync(&dir, &wanted(secrets.secrets())) {
            Ok((w, r)) if w.is_empty() && r.is_empty() => {}
            Ok((written, removed)) => tracing::info!(
                dir = %dir.display(),
                written = ?written,
                removed = ?removed,
                "BGP password Secrets updated"
            ),
            Err(e) => {
                tracing::error!(dir = %dir.display(), error = %e, "cannot write the BGP password Secrets")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::ByteString;

    fn secret(name: &str, type_: &str, key: &str, value: &[u8]) -> (String, Secret) {
        (
            name.to_string(),
            Secret {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                type_: Some(type_.into()),
                data: Some([(key.to_string(), ByteString(value.to_vec()))].into()),
                ..Default::default()
            },
        )
    }

    #[test]
    fn only_basic_auth_secrets_passwords_become_files_and_the_rest_goes() {
        let all = BTreeMap::from([
            secret("bgp-a", PASSWORD_SECRET_TYPE, "password", b"s3cret"),
            secret("bgp-b", PASSWORD_SECRET_TYPE, "password", b"other"),
            secret("tls", "kubernetes.io/tls", "password", b"no"),
            secret("nokey", PASSWORD_SECRET_TYPE, "username", b"x"),
            secret("huge", PASSWORD_SECRET_TYPE, "password", &[b'a'; 100_000]),
        ]);
        let w = wanted(&all);
        let names: Vec<&str> = w.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["bgp-a", "bgp-b"]);

        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("bgp");
        std::fs::create_dir_all(d.join("stale")).unwrap();
        let (written, removed) = sync(&d, &w).unwrap();
        assert_eq!((written.len(), removed), (2, vec!["stale".to_string()]));
        let f = d.join("bgp-a").join("password");
        assert_eq!(std::fs::read(&f).unwrap(), b"s3cret");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // Again: nothing to do. One Secret gone: its directory goes.
        assert_eq!(sync(&d, &w).unwrap(), (vec![], vec![]));
        let one: BTreeMap<_, _> = w.into_iter().take(1).collect();
        assert_eq!(sync(&d, &one).unwrap(), (vec![], vec!["bgp-b".to_string()]));
        let p = crate::frr::read_password(Some(&d), &"bgp-a".parse().unwrap()).unwrap();
        assert_eq!(p.expose(), "s3cret");
    }
}
