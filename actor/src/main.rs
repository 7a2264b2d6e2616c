//! `k8slb-actor`: thin main; everything is in the library.

use clap::{Parser, Subcommand};
use k8slb_actor::{cmd_render, debug, init, run};

/// mimalloc: a render of 10,000 Services builds and frees millions of small values
/// (the template context); with glibc's malloc a third of the render time went to
/// malloc/free (`perf` on the `render` bench).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "k8slb-actor",
    version,
    about = "k8slb actor: keepalived + HAProxy/nginx on a load-balancer node"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Follow the published state and run keepalived and the proxy on this node.
    Run(run::RunArgs),
    /// Render this node's configs from a state file into a directory, and exit.
    Render(cmd_render::RenderArgs),
    /// Probes for the root tests (netlink, connection loops).
    #[command(hide = true)]
    Debug(debug::DebugArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Render(args) => cmd_render::run(args),
        Command::Debug(args) => debug::run(args),
        // PID 1 of a container: stay a minimal init and run the actor as its child.
        Command::Run(_) if init::is_init() => {
            return std::process::ExitCode::from(init::run_as_init());
        }
        Command::Run(args) => {
            init::unblock_signals();
            tokio::runtime::Runtime::new()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(run::run(args)))
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            k8slb_actor::say!("k8slb-actor: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
