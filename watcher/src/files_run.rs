//! `k8slb-watcher run --source files:<dir> --state-out file:<path>`: the files driver.
//!
//! Polls the directory's fingerprint ([`crate::files`]); on a change, a periodic resync or a
//! retry it reads every object, lets [`crate::reconcile`] decide, and writes the state file
//! when the state changed. There is no leader and no Event here; with `--status-out`, the
//! statuses the Kubernetes mode would write go to files ([`crate::status_files`]).
//! `/readyz` says whether the file holds the current state.

use crate::admin::Metrics;
use crate::cmd_plan::config_from_objects;
use crate::events::Lookup;
use crate::failing::FailureLog;
use crate::files;
use crate::node_secrets::Certs;
use crate::reconcile::{
    reconcile, ConfigNews, ConfigRead, Planned, Previous, Published, Role, Settings, Snapshot, Step,
};
use crate::sink::Sink;
use crate::status_files::{Changes, StatusDir};
use crate::Error;
use k8slb_common::plan::PlanOptions;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// Everything the files driver needs (from `run`'s flags).
#[derive(Debug, Clone)]
pub struct FilesArgs {
    pub plan: PlanOptions,
    /// The namespace of the global ConfigMap among the files.
    pub namespace: String,
    /// How often the directory is looked at.
    pub poll: Duration,
    /// A full round at least this often, even without a change.
    pub resync: Duration,
    pub admin_addr: SocketAddr,
    /// Where node certificates go (`--certs-out`), if anywhere.
    pub certs_out: Option<std::path::PathBuf>,
    /// Where the objects' statuses go (`--status-out`), if anywhere.
    pub status_out: Option<std::path::PathBuf>,
}

/// Files carry no uids the watcher could write Events about (it writes none here).
struct NoUids;

impl Lookup for NoUids {
    fn service_uid(&self, _: &str, _: &str) -> Option<String> {
        None
    }
    fn node_uid(&self, _: &str) -> Option<String> {
        None
    }
    fn ingress_uid(&self, _: &str, _: &str) -> Option<String> {
        None
    }
}

/// Run until the process ends.
pub fn run(args: &FilesArgs, dir: &Path, state_path: &Path) -> Result<(), Error> {
    if !dir.is_dir() {
        return Err(Error::Input(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    // The admin port on a small runtime of its own; the loop stays a plain thread.
    let metrics = Metrics::new();
    metrics
        .readiness
        .not_ready("files: the state is not written yet");
    let admin_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("admin")
        .enable_all()
        .build()
        .map_err(|e| Error::Runtime(format!("cannot start the runtime: {e}")))?;
    let addr = args.admin_addr;
    admin_rt
        .block_on(crate::admin::serve(
            addr,
            metrics.clone(),
            tokio_util::sync::CancellationToken::new(),
        ))
        .map_err(|e| Error::Usage(format!("cannot listen on {addr}: {e}")))?;
    let status = match &args.status_out {
        Some(d) => Some(StatusDir::open(d).map_err(|e| {
            Error::Usage(format!("cannot use {} for --status-out: {e}", d.display()))
        })?),
        None => None,
    };
    let sink = Sink::File(state_path.to_path_buf());
    let mut driver = Driver {
        settings: Settings {
            plan: args.plan.clone(),
            namespace: args.namespace.clone(),
            status_hostname: false,
        },
        previous: Previous {
            state: sink.load(),
            ..Previous::default()
        },
        state_path: state_path.display().to_string(),
        sink,
        metrics,
        write_log: FailureLog::new("writing the state file"),
        certs_out: args.certs_out.clone(),
        certs_log: FailureLog::new("writing the node certificates"),
        status,
        status_log: FailureLog::new("writing the status files"),
        generations: Default::default(),
    };
    // A failed write is retried this soon, even without a change.
    let mut retry_at: Option<Instant> = None;
    let mut last_fp = None;
    let mut last_run = Instant::now();
    tracing::info!(dir = %dir.display(), sticky = driver.previous.state.is_some(), "watching files");
    loop {
        let fp = match files::fingerprint(dir) {
            Ok(fp) => Some(fp),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the source directory; keeping the last state");
                None
            }
        };
        let due =
            last_run.elapsed() >= args.resync || retry_at.is_some_and(|t| Instant::now() >= t);
        if fp.is_some() && (fp != last_fp || due) {
            last_fp = fp;
            last_run = Instant::now();
            retry_at = driver
                .round(dir)
                .then(|| Instant::now() + Duration::from_secs(1));
        }
        std::thread::sleep(args.poll);
    }
}

struct Driver {
    settings: Settings,
    previous: Previous,
    sink: Sink,
    state_path: String,
    metrics: Metrics,
    write_log: FailureLog,
    certs_out: Option<std::path::PathBuf>,
    certs_log: FailureLog,
    status: Option<StatusDir>,
    status_log: FailureLog,
    /// The objects' `metadata.generation` so far ([`files::read`]).
    generations: k8slb_common::generations::Generations,
}

impl Driver {
    /// One round. True: the write failed, retry soon.
    fn round(&mut self, dir: &Path) -> bool {
        let started = Instant::now();
        let readiness = &self.metrics.readiness;
        let objects = match files::read(dir, &mut self.generations) {
            Ok(objects) => objects,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the objects; keeping the last state");
                if !readiness.is_ready() {
                    readiness.not_ready(format!("files: cannot read the objects: {e}"));
                }
                return false;
            }
        };
        let config = match config_from_objects(&objects, &self.settings.namespace) {
            Ok(c) => {
                for w in &c.warnings {
                    tracing::warn!(warning = %w, "config");
                }
                ConfigRead::Valid(Box::new(c))
            }
            Err(e) => ConfigRead::Invalid(e.to_string()),
        };
        let mut snapshot = Snapshot {
            settings: &self.settings,
            role: Role::Leader,
            config,
            config_uid: None,
            objects,
            published: Published::None,
            uids: &NoUids,
            now: None,
            // No actor reports here: the actors are taken to be this build.
            reports: None,
            certs: match self.certs_out {
                Some(_) => Certs::FromObjects,
                None => Certs::Off,
            },
        };
        let fx = reconcile(&snapshot, &self.previous);
        let objects = std::mem::take(&mut snapshot.objects);
        self.previous.config = fx.config;
        if let Some(news) = &fx.config_news {
            news.log(&self.settings.config_name());
        }
        self.metrics.config(
            fx.config_valid,
            matches!(fx.config_news, Some(ConfigNews::Invalid(_))),
        );
        match fx.step {
            Step::NoConfig => {
                readiness.not_ready("files: no valid global config yet; nothing is written");
                false
            }
            Step::Plan(mut p) => {
                // The certificates the new state names are in place before it is, and
                // those it no longer names leave after it.
                let certs = p
                    .node_certs
                    .take()
                    .and_then(|c| self.write_certs(c.desired));
                let certs_failed = self.certs_out.is_some() && certs.is_none();
                let gateway = std::mem::take(&mut p.gateway);
                let failed = self.write(*p, started);
                // The statuses follow the state they describe, as on a cluster.
                let status_failed = !failed && self.write_status(&gateway, &objects);
                self.remove_unused_certs(certs.as_ref()) || failed || certs_failed || status_failed
            }
            // A leader with nothing published elsewhere neither follows nor waits.
            Step::Follow | Step::WaitForState(_) => false,
        }
    }

    /// The status files for `objects` planned into the state just written
    /// (`--status-out`). True: a write failed (said in the log; retried soon). The state
    /// is not held back for it.
    fn write_status(
        &mut self,
        gateway: &k8slb_common::gateway::GatewayOutput,
        objects: &k8slb_common::objects::Objects,
    ) -> bool {
        let (Some(dir), Some(state)) = (&mut self.status, &self.previous.state) else {
            return false;
        };
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        match dir.round(gateway, objects, state, &now) {
            Ok(c) => {
                self.status_log.succeeded();
                if c != Changes::default() {
                    tracing::debug!(written = c.written, removed = c.removed, "status files");
                }
                false
            }
            Err(e) => {
                self.status_log
                    .failed(1, &format!("cannot write the status files: {e}"));
                true
            }
        }
    }

    /// The node certificates `state` names, written into `--certs-out` (new and renewed
    /// ones; nothing removed). None: the write failed (said in the log and `/readyz`).
    fn write_certs(
        &mut self,
        certs: BTreeMap<String, k8slb_common::certs::NodeCert>,
    ) -> Option<BTreeMap<String, k8slb_common::certs::NodeCert>> {
        let dir = self.certs_out.clone()?;
        match k8slb_common::certs::files::write(&dir, &certs) {
            Ok(written) => {
                if !written.is_empty() {
                    tracing::info!(dir = %dir.display(), ?written, "node certificates written");
                }
                Some(certs)
            }
            Err(e) => {
                self.certs_failed(&dir, &e);
                None
            }
        }
    }

    /// Remove the node certificates no longer named (after the state is written). True:
    /// it failed.
    fn remove_unused_certs(
        &mut self,
        certs: Option<&BTreeMap<String, k8slb_common::certs::NodeCert>>,
    ) -> bool {
        let (Some(dir), Some(certs)) = (self.certs_out.clone(), certs) else {
            return false;
        };
        match k8slb_common::certs::files::remove_unused(&dir, certs) {
            Ok(removed) => {
                self.certs_log.succeeded();
                if !removed.is_empty() {
                    tracing::info!(dir = %dir.display(), ?removed, "node certificates removed");
                }
                false
            }
            Err(e) => {
                self.certs_failed(&dir, &e);
                true
            }
        }
    }

    fn certs_failed(&mut self, dir: &Path, e: &std::io::Error) {
        let e = format!(
            "cannot write the node certificates to {}: {e}",
            dir.display()
        );
        self.certs_log.failed(1, &e);
        self.metrics.readiness.not_ready(format!("files: {e}"));
    }

    /// Write the state if it changed. True: the write failed.
    fn write(&mut self, p: Planned, started: Instant) -> bool {
        let readiness = &self.metrics.readiness;
        let path = &self.state_path;
        self.metrics
            .set_vips(p.state.vips.keys().copied().collect());
        if p.changed {
            if let Err(e) = self.sink.write(&p.state) {
                let e = format!("cannot write {path}: {e}");
                self.metrics.publish("error");
                self.write_log.failed(1, &e);
                readiness.not_ready(format!("files: {e}"));
                return true;
            }
            self.write_log.succeeded();
            self.metrics.publish("ok");
            let state = &p.state;
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
        }
        readiness.ready(format!("files: the current state is written to {path}"));
        self.previous.state = Some(p.state);
        false
    }
}
