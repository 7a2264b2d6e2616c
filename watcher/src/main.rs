//! `k8slb-watcher`: thin main; everything is in the library.

use clap::{Parser, Subcommand};
use k8slb_watcher::{cleanup, cmd_plan, run};

#[derive(Debug, Parser)]
#[command(
    name = "k8slb-watcher",
    version,
    about = "k8slb watcher: allocates floating IPs to LoadBalancer Services and publishes the state"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compute the state once from files and print it (offline debugging of a config).
    Plan(cmd_plan::PlanArgs),
    /// Watch a source and keep the published state current.
    Run(run::RunArgs),
    /// Before an uninstall: remove the status k8slb wrote (Service and Ingress
    /// addresses, Gateway and route status of our classes) and the published state
    /// ConfigMaps; never another controller's. Idempotent; `--dry-run` changes nothing.
    Cleanup(cleanup::CleanupArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Plan(args) => cmd_plan::run(args),
        Command::Run(args) => run::main(args),
        Command::Cleanup(args) => cleanup::main(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("k8slb-watcher: {e:#}");
            std::process::ExitCode::from(e.exit_code())
        }
    }
}
