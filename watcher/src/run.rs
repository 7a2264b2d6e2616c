//! `k8slb-watcher run`: keep the published state current.
//!
//! The decision is the same whatever the source ([`crate::reconcile`]): read every object,
//! recompute the whole plan (sticky on the last published state), publish only when the
//! state changed. A source that cannot be read this round publishes nothing (never an
//! empty state), and an invalid global config keeps the last good one in force, with a
//! problem in the state. Two drivers gather the snapshots and execute the effects:
//! [`crate::files_run`] and [`crate::kube_run`]; this module parses the flags and starts one.

use crate::files_run::FilesArgs;
use crate::kube_run::{KubeArgs, KubeFlags};
use crate::opts::PlanFlags;
use crate::sink::Sink;
use crate::Error;
pub use k8slb_common::logging::{init_logging, LogFormat};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Files(PathBuf),
    Kubernetes,
}

impl std::str::FromStr for Source {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            Some(("files", p)) if !p.is_empty() => Ok(Source::Files(PathBuf::from(p))),
            None if s == "kubernetes" => Ok(Source::Kubernetes),
            _ => Err(format!(
                "unknown source {s:?}: expected files:<dir> or kubernetes"
            )),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Where the objects come from: `files:<dir>` (a directory of Kubernetes YAML, the
    /// standalone mode) or `kubernetes`.
    #[arg(long, env = "K8SLB_SOURCE", default_value = "kubernetes")]
    pub source: Source,
    /// Where the state goes: `file:<path>` (replaced atomically) or `configmap` (the
    /// ConfigMaps `k8slb-state*` in the namespace; the default with `--source kubernetes`).
    #[arg(long = "state-out", env = "K8SLB_STATE_OUT")]
    pub state_out: Option<Sink>,
    /// Files source only: where to write the certificates the state's HTTPS listeners
    /// name (`<dir>/<stem>.pem`, chain then key, mode 0600), for the actors' `--certs-dir`.
    /// Without it, Ingress TLS from Secrets is planned but the nodes get no certificate.
    #[arg(long = "certs-out", env = "K8SLB_CERTS_OUT")]
    pub certs_out: Option<std::path::PathBuf>,
    /// Files source only: where to write, after each round, the status the Kubernetes
    /// mode would write for each GatewayClass, Gateway, route, Service and Ingress
    /// (`<dir>/<Kind>/<namespace>/<name>.json`, the object's `status` as JSON; removed
    /// when the object goes). Without it, no status is written anywhere.
    #[arg(long = "status-out", env = "K8SLB_STATUS_OUT")]
    pub status_out: Option<std::path::PathBuf>,
    /// How often the files source looks for changes, in milliseconds.
    #[arg(long, env = "K8SLB_POLL_MS", default_value_t = 100)]
    pub poll_ms: u64,
    /// Full recompute at least this often, in seconds, even without a change (k8slb's
    /// LOOP_DELAY, now only a safety net).
    #[arg(long, env = "LOOP_DELAY", default_value_t = 30)]
    pub resync_s: u64,
    /// Log format: `plain` (one line per event, colours only on a terminal) or `json`.
    #[arg(long, env = "LOG_FORMAT", default_value = "plain")]
    pub log_format: LogFormat,
    /// Log level: k8slb's 0 (off) to 4 (debug), a level name (error, warn, info, debug,
    /// trace) or a tracing filter (`info,k8slb_watcher=debug`).
    #[arg(long, env = "LOG_LEVEL", default_value = "3")]
    pub log_level: String,
    #[command(flatten)]
    pub flags: PlanFlags,
    #[command(flatten)]
    pub kube: KubeFlags,
}

pub fn main(args: RunArgs) -> Result<(), Error> {
    init_logging(args.log_format, &args.log_level).map_err(|e| Error::Usage(e.to_string()))?;
    match args.source.clone() {
        Source::Files(dir) => match &args.state_out {
            Some(Sink::File(path)) => crate::files_run::run(&files_args(&args), &dir, path),
            _ => Err(Error::Usage(
                "--source files:<dir> needs --state-out file:<path>".into(),
            )),
        },
        Source::Kubernetes => match &args.state_out {
            None | Some(Sink::ConfigMap) => run_kubernetes(&args),
            Some(Sink::File(_)) => Err(Error::Usage(
                "--source kubernetes publishes to --state-out configmap".into(),
            )),
        },
    }
}

/// The files driver's settings from the flags.
pub fn files_args(args: &RunArgs) -> FilesArgs {
    FilesArgs {
        plan: args.flags.plan_options(),
        namespace: args.flags.namespace.clone(),
        poll: Duration::from_millis(args.poll_ms.max(10)),
        resync: Duration::from_secs(args.resync_s),
        admin_addr: args.kube.admin_addr,
        certs_out: args.certs_out.clone(),
        status_out: args.status_out.clone(),
    }
}

/// The Kubernetes loop's settings from the flags.
pub fn kube_args(args: &RunArgs) -> KubeArgs {
    let k = &args.kube;
    let identity = crate::leader::default_identity(k.pod_name.as_deref());
    KubeArgs {
        plan: args.flags.plan_options(),
        namespace: args.flags.namespace.clone(),
        resync: Duration::from_secs(args.resync_s.max(1)),
        debounce: Duration::from_millis(k.debounce_ms.max(1)),
        debounce_max: Duration::from_secs(1).max(Duration::from_millis(k.debounce_ms)),
        status_hostname: k.status_hostname,
        ingress: k.ingress,
        gateway_api: k.gateway_api,
        gateway_api_check: Duration::from_secs(30),
        leader_election: k.leader_elect,
        identity,
        lease_duration: Duration::from_secs(k.lease_duration_s.max(2)),
        lease_renew: Duration::from_millis(k.lease_renew_ms.max(100)),
        admin_addr: Some(k.admin_addr),
        events_per_second: k.events_per_second,
        state_in_progress_grace: Duration::from_secs(10),
    }
}

fn run_kubernetes(args: &RunArgs) -> Result<(), Error> {
    let kargs = kube_args(args);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Runtime(format!("cannot start the runtime: {e}")))?;
    rt.block_on(async move {
        // In-cluster config, else KUBECONFIG / ~/.kube/config.
        let config = kube::Config::infer()
            .await
            .map_err(|e| Error::Usage(format!("no Kubernetes configuration: {e}")))?;
        let shutdown = tokio_util::sync::CancellationToken::new();
        let on_signal = shutdown.clone();
        tokio::spawn(async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot handle SIGTERM");
                        return;
                    }
                };
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM"),
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT"),
            }
            on_signal.cancel();
        });
        crate::kube_run::run(config, kargs, crate::admin::Metrics::new(), shutdown).await
    })
}
