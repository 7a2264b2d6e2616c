//! `k8slb-watcher run`: keep the published state current.
//!
//! The loop is the same whatever the source: read every object, recompute the whole plan
//! (sticky on the last published state), publish only when the state changed. A source
//! that cannot be read this round publishes nothing (never an empty state), and an invalid
//! global config keeps the last good one in force, with a problem in the state.

use crate::cmd_plan::config_from_objects;
use crate::kube_run::{KubeArgs, KubeFlags};
use crate::opts::PlanFlags;
use crate::sink::Sink;
use crate::{files, Error};
use k8slb_common::config::GlobalConfig;
pub use k8slb_common::logging::{init_logging, LogFormat};
use k8slb_common::plan::plan;
use k8slb_common::state::{ObjRef, Problem, Reason, State};
use std::path::PathBuf;
use std::time::{Duration, Instant};

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
            Some(Sink::File(_)) => run_files(&args, &dir),
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

fn run_files(args: &RunArgs, dir: &std::path::Path) -> Result<(), Error> {
    if !dir.is_dir() {
        return Err(Error::Input(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let opts = args.flags.plan_options();
    let Some(sink) = args.state_out.as_ref() else {
        return Err(Error::Usage("--state-out file:<path> is required".into()));
    };
    let Sink::File(state_path) = sink else {
        return Err(Error::Usage(
            "--source files:<dir> needs --state-out file:<path>".into(),
        ));
    };
    let state_path = state_path.display().to_string();
    // The admin port on a small runtime of its own; the loop stays a plain thread.
    let metrics = crate::admin::Metrics::new();
    let readiness = metrics.readiness.clone();
    readiness.not_ready("files: the state is not written yet");
    let admin_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("admin")
        .enable_all()
        .build()
        .map_err(|e| Error::Runtime(format!("cannot start the runtime: {e}")))?;
    let addr = args.kube.admin_addr;
    let bound = admin_rt
        .block_on(crate::admin::serve(
            addr,
            metrics.clone(),
            tokio_util::sync::CancellationToken::new(),
        ))
        .map_err(|e| Error::Usage(format!("cannot listen on {addr}: {e}")))?;
    tracing::info!(addr = %bound, "admin server listening");
    let mut write_log = crate::failing::FailureLog::new("writing the state file");
    // A failed write is retried this soon, even without a change.
    let mut retry_at: Option<Instant> = None;
    let mut published: Option<State> = sink.load();
    let mut good_cfg: Option<GlobalConfig> = None;
    let mut last_fp = None;
    let mut last_run = Instant::now();
    tracing::info!(dir = %dir.display(), sticky = published.is_some(), "watching files");
    loop {
        let fp = match files::fingerprint(dir) {
            Ok(fp) => Some(fp),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the source directory; keeping the last state");
                None
            }
        };
        let due = last_run.elapsed() >= Duration::from_secs(args.resync_s)
            || retry_at.is_some_and(|t| Instant::now() >= t);
        if fp.is_some() && (fp != last_fp || due) {
            retry_at = None;
            last_fp = fp;
            last_run = Instant::now();
            let started = Instant::now();
            match files::read(dir) {
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the objects; keeping the last state");
                    if !readiness.is_ready() {
                        readiness.not_ready(format!("files: cannot read the objects: {e}"));
                    }
                }
                Ok(objs) => {
                    let mut cfg_problem = None;
                    match config_from_objects(&objs, &args.flags.namespace) {
                        Ok(cfg) => {
                            for w in &cfg.warnings {
                                tracing::warn!(warning = %w, "config");
                            }
                            good_cfg = Some(cfg);
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "invalid global config; the last good one stays in force");
                            cfg_problem = Some(Problem {
                                object: ObjRef::ConfigMap {
                                    namespace: args.flags.namespace.clone(),
                                    name: "global".into(),
                                },
                                reason: Reason::InvalidConfig,
                                message: format!("{e}; the last good config stays in force"),
                            });
                        }
                    }
                    if good_cfg.is_none() {
                        readiness
                            .not_ready("files: no valid global config yet; nothing is written");
                    }
                    if let Some(cfg) = &good_cfg {
                        let mut state = plan(cfg, &opts, &objs, published.as_ref());
                        if let Some(p) = cfg_problem {
                            state.problems.push(p);
                            state.problems.sort();
                        }
                        if published.as_ref() != Some(&state) {
                            match sink.write(&state) {
                                Ok(()) => {
                                    write_log.succeeded();
                                    metrics.publish("ok");
                                    readiness.ready(format!(
                                        "files: the current state is written to {state_path}"
                                    ));
                                    tracing::info!(
                                        services = state.services.len(),
                                        vips = state.vips.len(),
                                        problems = state.problems.len(),
                                        took_ms = started.elapsed().as_millis() as u64,
                                        "state published"
                                    );
                                    for p in &state.problems {
                                        tracing::warn!(object = %p.object, reason = %p.reason, "{}", p.message);
                                    }
                                    published = Some(state);
                                }
                                Err(e) => {
                                    let e = format!("cannot write {state_path}: {e}");
                                    metrics.publish("error");
                                    write_log.failed(1, &e);
                                    readiness.not_ready(format!("files: {e}"));
                                    retry_at = Some(Instant::now() + Duration::from_secs(1));
                                }
                            }
                        } else {
                            readiness.ready(format!(
                                "files: the current state is written to {state_path}"
                            ));
                        }
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(args.poll_ms.max(10)));
    }
}
