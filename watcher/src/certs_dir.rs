//! The files driver's node certificates: `<dir>/<stem>.pem` (chain, then key), mode 0600,
//! for every certificate the state names (see `k8slb_common::certs`). The actors of the
//! standalone mode read this directory (`k8slb-actor --certs-dir`). Never logs key
//! material, only stems and counts.

use k8slb_common::certs::NodeCert;
use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// What changed in the directory.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Synced {
    pub written: Vec<String>,
    pub removed: Vec<String>,
}

/// Make `dir` hold exactly `certs`: write the new and changed ones (atomically, 0600),
/// remove the `*.pem` files no longer named. The directory is created 0700.
pub fn sync(dir: &Path, certs: &BTreeMap<String, NodeCert>) -> std::io::Result<Synced> {
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut out = Synced::default();
    for (stem, cert) in certs {
        let path = dir.join(format!("{stem}.pem"));
        let pem = cert.pem();
        if std::fs::read(&path).ok().as_deref() == Some(pem.as_bytes()) {
            continue;
        }
        k8slb_common::fs::write_atomic(&path, pem.as_bytes())?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        out.written.push(stem.clone());
    }
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".pem") {
            if !certs.contains_key(stem) {
                std::fs::remove_file(dir.join(&name))?;
                out.removed.push(stem.to_string());
            }
        }
    }
    Ok(out)
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

    #[test]
    fn writes_0600_files_replaces_changed_ones_and_removes_unused_ones() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("certs");
        let first: BTreeMap<_, _> = [cert("a", "1"), cert("b", "1")].into();
        let s = sync(&dir, &first).unwrap();
        assert_eq!(s.written, ["default_a", "default_b"]);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("default_a.pem")), 0o600);
        assert_eq!(
            std::fs::read_to_string(dir.join("default_a.pem")).unwrap(),
            "CHAIN 1\nKEY 1\n"
        );
        // Unchanged: nothing written.
        assert_eq!(sync(&dir, &first).unwrap(), Synced::default());
        // a rotated, b gone.
        let second: BTreeMap<_, _> = [cert("a", "2")].into();
        let s = sync(&dir, &second).unwrap();
        assert_eq!(
            (s.written, s.removed),
            (vec!["default_a".to_string()], vec!["default_b".to_string()])
        );
        assert!(!dir.join("default_b.pem").exists());
        assert_eq!(
            std::fs::read_to_string(dir.join("default_a.pem")).unwrap(),
            "CHAIN 2\nKEY 2\n"
        );
    }
}
