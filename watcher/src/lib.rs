//! k8slb watcher: from cluster objects (or files) to the published state.
//!
//! - [`cmd_plan`]: `k8slb-watcher plan`, one plan from files, printed;
//! - [`run`]: `k8slb-watcher run`, the long-running loop;
//! - [`files`]: the `files:<dir>` source (a directory of Kubernetes YAML);
//! - [`sink`]: where the state goes (`file:<path>`, atomically replaced, or `configmap`);
//! - [`kube_run`]: the Kubernetes source's loop, with [`kube_source`] (watchers and stores),
//!   [`publish_cm`] (the state ConfigMaps), [`status`] (Service status), [`events`],
//!   [`leader`] (the Lease), [`admin`] (`/livez`, `/readyz`, `/metrics`) and [`failing`]
//!   (writes that keep failing, logged once a minute).

pub mod admin;
pub mod cmd_plan;
pub mod events;
pub mod failing;
pub mod files;
pub mod files_run;
pub mod kube_run;
pub mod kube_source;
pub mod leader;
pub mod kube;
pub mod opts;
pub mod publish_cm;
pub mod reconcile;
pub mod run;
pub mod sink;
pub mod status;

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
