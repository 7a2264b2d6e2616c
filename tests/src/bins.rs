//! Finding the binaries the lab runs: k8slb's own, the lab helpers, and the daemons.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The workspace's target directory (`CARGO_TARGET_DIR` or `<repo>/target`).
pub fn target_dir() -> PathBuf {
    if let Ok(d) = std::env::var("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .join("target")
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Locates a binary built by this workspace: `K8SLB_<NAME>_BIN` (name upper-cased,
/// `-` → `_`, `k8slb-` prefix dropped: `K8SLB_ACTOR_BIN`, `K8SLB_LAB_BACKEND_BIN`), else
/// next to the running executable (`target/<profile>/` or its `deps/` parent), else
/// `target/debug`, then `target/release`. Fails with a message that says how to build it.
pub fn locate(name: &str) -> Result<PathBuf> {
    let var = format!(
        "K8SLB_{}_BIN",
        name.trim_start_matches("k8slb-")
            .to_uppercase()
            .replace('-', "_")
    );
    if let Ok(p) = std::env::var(&var) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("{var}={} does not exist", p.display());
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join(name));
            if dir.ends_with("deps") {
                if let Some(up) = dir.parent() {
                    candidates.push(up.join(name));
                }
            }
        }
    }
    let target = target_dir();
    candidates.push(target.join("debug").join(name));
    candidates.push(target.join("release").join(name));
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    bail!(
        "binary `{name}` not found (looked in {}); build it with `cargo build --workspace --bins` \
         (or `--release`), or point {var} at it",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Locates a system daemon (haproxy, keepalived, nginx, wrk, curl, openssl), failing with
/// the package to install.
pub fn system(name: &str) -> Result<PathBuf> {
    crate::lab::which(name).ok_or_else(|| {
        anyhow::anyhow!(
            "`{name}` is not installed; run ./scripts/install-deps.sh (apt-get install {name})"
        )
    })
}
