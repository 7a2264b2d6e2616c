//! `k8slb-watcher plan`: read a config and objects from files, print the state.
//!
//! Problems with Services (unknown pool, conflicts, bad annotations) are data: they are in
//! the state's `problems` and the exit code is 0. A config or object file that cannot be
//! read or parsed is an error: one line on stderr, non-zero exit.

use crate::opts::PlanFlags;
use crate::Error;
use k8slb_common::config::{parse_config_file, GlobalConfig};
use k8slb_common::objects::Objects;
use k8slb_common::plan::plan;
use k8slb_common::state::State;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The global config: k8slb's JSON, or the `global` ConfigMap as YAML or JSON. When
    /// absent, the ConfigMap `<namespace>/global` among the objects is used.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Files or directories of Kubernetes objects (YAML or JSON, multi-document and
    /// `kind: List` allowed): Services, EndpointSlices, Nodes, Ingresses, IngressClasses,
    /// the TLS Secrets they name, Namespaces, and the Gateway API's GatewayClasses,
    /// Gateways, HTTPRoutes, TLSRoutes, TCPRoutes, UDPRoutes and ReferenceGrants.
    #[arg(long, num_args = 1.., required = true)]
    pub objects: Vec<PathBuf>,
    /// A previous state: its allocations are honoured first (sticky).
    #[arg(long)]
    pub previous: Option<PathBuf>,
    #[command(flatten)]
    pub flags: PlanFlags,
}

pub fn run(args: PlanArgs) -> Result<(), Error> {
    let objs = Objects::read_paths(&args.objects).map_err(|e| Error::Input(e.to_string()))?;
    let cfg = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::Input(format!("cannot read config {}: {e}", path.display())))?;
            parse_config_file(&text)
                .map_err(|e| Error::Usage(format!("config {}: {e}", path.display())))?
        }
        None => config_from_objects(&objs, &args.flags.namespace)?,
    };
    for w in &cfg.warnings {
        eprintln!("k8slb-watcher: warning: {w}");
    }
    let previous = match &args.previous {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| Error::Input(format!("cannot read {}: {e}", p.display())))?;
            Some(
                State::from_json(&text)
                    .map_err(|e| Error::Input(format!("{}: {e}", p.display())))?,
            )
        }
        None => None,
    };
    let state = plan(&cfg, &args.flags.plan_options(), &objs, previous.as_ref());
    print!("{}", state.to_json());
    Ok(())
}

/// The global config from the ConfigMap `<namespace>/global` among the objects.
pub fn config_from_objects(objs: &Objects, namespace: &str) -> Result<GlobalConfig, Error> {
    let cm = objs
        .configmaps
        .iter()
        .find(|c| {
            c.metadata.name.as_deref() == Some("global")
                && c.metadata.namespace.as_deref() == Some(namespace)
        })
        .ok_or_else(|| {
            Error::Usage(format!(
                "no --config given and no ConfigMap {namespace}/global among the objects"
            ))
        })?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("config"))
        .ok_or_else(|| Error::Usage(format!("ConfigMap {namespace}/global has no data.config")))?;
    k8slb_common::config::parse_global_config(text)
        .map_err(|e| Error::Usage(format!("ConfigMap {namespace}/global: {e}")))
}
