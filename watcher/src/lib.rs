//! k8slb watcher: from cluster objects (or files) to the published state.
//!
//! - [`cmd_plan`]: `k8slb-watcher plan`, one plan from files, printed;
//! - [`run`]: `k8slb-watcher run`: parses the flags and starts one of the two drivers;
//! - [`reconcile`]: the one decision, pure: a snapshot and what was done before in, the
//!   effects out (publish, Service status writes and clears, Events);
//! - [`files_run`]: the files driver, with [`files`] (the `files:<dir>` source, a directory
//!   of Kubernetes YAML), [`sink`] (the state file, atomically replaced) and
//!   [`status_files`] (`--status-out`: the statuses as files);
//! - [`kube_run`]: the Kubernetes driver, with [`kube_source`] (watchers and stores),
//!   [`publish_cm`] (the state ConfigMaps), [`status`] (Service status), [`events`],
//!   [`leader`] (the Lease);
//! - [`cleanup`]: `k8slb-watcher cleanup`, before an uninstall: our status entries and
//!   the state ConfigMaps removed, never another controller's;
//! - shared by the drivers: [`admin`] (`/livez`, `/readyz`, `/metrics`), [`failing`] (writes
//!   that keep failing, logged once a minute) and the leaf [`kube`] (field manager, write
//!   timeout, API error codes, the failed-write counter).
//!
//! No module imports one that imports it back (`watcher/tests/module_graph.rs`).

pub mod admin;
pub mod cleanup;
pub mod cmd_plan;
pub mod events;
pub mod failing;
pub mod files;
pub mod files_run;
pub mod gateway_api;
pub mod gateway_status;
pub mod kube;
pub mod kube_run;
pub mod kube_source;
pub mod leader;
pub mod node_secrets;
pub mod opts;
pub mod publish_cm;
pub mod reconcile;
pub mod run;
pub mod sink;
pub mod status;
pub mod status_files;

/// Errors of the watcher's commands, each with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad flags or configuration (exit 64, EX_USAGE).
    #[error("{0}")]
    Usage(String),
    /// Input that cannot be read (exit 66, EX_NOINPUT).
    #[error("{0}")]
    Input(String),
    /// Anything else at run time (exit 1).
    #[error("{0}")]
    Runtime(String),
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 64,
            Error::Input(_) => 66,
            Error::Runtime(_) => 1,
        }
    }
}
