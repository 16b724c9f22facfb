//! `cascade`: `cascade standalone` runs ingest, dispatcher and activation-timer shards in one
//! process over the in-process bus; the other subcommands are a small client for trying it
//! out (`cascade queue create`, `cascade enqueue`, `cascade take`, `cascade ack`,
//! `cascade stats`), `cascade pipeline apply` for the pipelines of a settings file,
//! `cascade config check` for a settings file, `cascade rm explain` for the resource
//! manager's decisions, and `cascade data verify` for a store directory.

mod client;
mod config_check;
mod external;
mod local_executor;
mod pipeline;
mod rm;
mod rm_client;
#[cfg(test)]
mod rm_local_tests;
mod stages;
mod standalone;
mod verify;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "cascade",
    version,
    about = "Durable delayed events flowing through chains of queues"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every service in this process (in-process bus, data under --data-dir).
    Standalone(standalone::Flags),
    /// Create, show, list or delete queues and templates.
    Queue {
        #[command(subcommand)]
        command: client::QueueCommand,
        #[command(flatten)]
        conn: client::Conn,
    },
    /// Enqueue one event; the payload is the argument, or standard input without one.
    Enqueue(client::EnqueueArgs),
    /// Take ready events under a lease; prints one JSON object per event.
    Take(client::TakeArgs),
    /// Acknowledge a taken event with its lease token.
    Ack(client::AckArgs),
    /// Show a queue's counts and totals; for a template, its queues' summed.
    Stats(client::StatsArgs),
    /// Ask the resource manager of a running `cascade standalone`.
    Rm {
        #[command(subcommand)]
        command: rm_client::RmCommand,
    },
    /// Apply pipelines through the gateway.
    Pipeline {
        #[command(subcommand)]
        command: pipeline::PipelineCommand,
    },
    /// Check settings files as the services load them at start.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Inspect a shard's store directory.
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
    /// `cascade ingest|dispatcher|activation-timer|stage-worker|resource-manager ARGS`:
    /// runs that service's binary (`cascade-<service>`, installed beside this one).
    #[command(external_subcommand)]
    Service(Vec<String>),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Load FILE as a service would (defaults < file < environment) and print what it
    /// describes as JSON, or fail with the error a service would stop with.
    Check(config_check::CheckArgs),
}

#[derive(Subcommand)]
enum DataCommand {
    /// Check a store (log frames and continuity, every stored value) without changing it.
    Verify { dir: PathBuf },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Service(args) = cli.command {
        return external::exec(args);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Standalone(flags) => runtime.block_on(standalone::main(flags)),
        Command::Queue { command, conn } => runtime.block_on(client::queue(conn, command)),
        Command::Enqueue(args) => runtime.block_on(client::enqueue(args)),
        Command::Take(args) => runtime.block_on(client::take(args)),
        Command::Ack(args) => runtime.block_on(client::ack(args)),
        Command::Stats(args) => runtime.block_on(client::stats(args)),
        Command::Rm { command } => runtime.block_on(rm_client::rm(command)),
        Command::Pipeline { command } => runtime.block_on(pipeline::pipeline(command)),
        Command::Config {
            command: ConfigCommand::Check(args),
        } => config_check::check(args),
        Command::Data {
            command: DataCommand::Verify { dir },
        } => verify::run(&dir),
        Command::Service(_) => unreachable!("handed over before the runtime starts"),
    }
}
