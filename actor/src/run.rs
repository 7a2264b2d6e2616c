//! `k8slb-actor run`: follow the state and keep this node's daemons in line with it.

/// Arguments of `k8slb-actor run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {}

pub async fn run(_args: RunArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
