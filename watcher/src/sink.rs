//! Where the state goes. `file:<path>`: replaced atomically (write a temporary file in the
//! same directory, fsync, rename), so a reader never sees half a state. `configmap`: the
//! ConfigMaps `k8slb-state*` in the watcher's namespace, written by the Kubernetes loop
//! ([`crate::publish_cm`]); only with `--source kubernetes`.

use k8slb_common::state::State;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    File(PathBuf),
    ConfigMap,
}

impl std::str::FromStr for Sink {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            Some(("file", p)) if !p.is_empty() => Ok(Sink::File(PathBuf::from(p))),
            None if s == "configmap" => Ok(Sink::ConfigMap),
            _ => Err(format!(
                "unknown state destination {s:?}: expected file:<path> or configmap"
            )),
        }
    }
}

impl Sink {
    /// The state published last time, if any and if it parses.
    pub fn load(&self) -> Option<State> {
        match self {
            Sink::File(p) => {
                let text = std::fs::read_to_string(p).ok()?;
                match State::from_json(&text) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        tracing::warn!(path = %p.display(), error = %e, "ignoring the existing state file");
                        None
                    }
                }
            }
            Sink::ConfigMap => None,
        }
    }

    pub fn write(&self, state: &State) -> std::io::Result<()> {
        match self {
            Sink::File(p) => write_atomic(p, state.to_json().as_bytes()),
            Sink::ConfigMap => Err(std::io::Error::other(
                "the configmap destination is written by the Kubernetes loop",
            )),
        }
    }
}

pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".k8slb-state-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
