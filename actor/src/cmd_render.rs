//! `k8slb-actor render`: write this node's configs into a directory.

/// Arguments of `k8slb-actor render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {}

pub fn run(_args: RenderArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
