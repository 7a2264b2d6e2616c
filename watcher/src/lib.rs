//! k8slb watcher: from cluster objects (or files) to the published state.
//!
//! - [`cmd_plan`]: `k8slb-watcher plan`, one plan from files, printed;
//! - [`run`]: `k8slb-watcher run`, the long-running loop;
//! - [`files`]: the `files:<dir>` source (a directory of Kubernetes YAML);
//! - [`sink`]: where the state goes (`file:<path>`, atomically replaced).

pub mod cmd_plan;
pub mod files;
pub mod opts;
pub mod run;
pub mod sink;

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
