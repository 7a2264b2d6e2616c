//! Where the state goes. `file:<path>`: replaced atomically (write a temporary file in the
//! same directory, fsync, rename), so a reader never sees half a state. `configmap`: the
//! ConfigMaps `k8slb-state*` in the watcher's namespace, written by the Kubernetes loop
//! ([`crate::publish_cm`]); only with `--source kubernetes`.

use k8slb_common::fs::write_atomic;
use k8slb_common::state::State;
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
            Sink::File(p) => write_state_file(p, state),
            Sink::ConfigMap => Err(std::io::Error::other(
                "the configmap destination is written by the Kubernetes loop",
            )),
        }
    }
}

/// The state file, its directory made if missing.
fn write_state_file(path: &Path, state: &State) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    write_atomic(path, state.to_json().as_bytes())
}
