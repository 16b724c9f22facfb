//! `cascade`: `cascade standalone` runs ingest, dispatcher and activation-timer shards in one
//! process over the in-process bus; the client commands (`cli`) cover the gateway's whole API
//! (`enqueue`, `take`, `ack`, `queue create`, `dlq redrive`, `pipeline apply`…);
//! `cascade top` is a live terminal view, `cascade config check` checks a settings file,
//! `cascade rm explain` shows the resource manager's decisions, and `cascade data verify`
//! checks a store directory.
//!
//! Exit codes: 0 done, 1 refused by the server (or failed), 2 bad usage, 3 cannot connect.
//! A failure is one line on standard error, never a backtrace; a reader that closes the
//! output early (`| head`) ends the command quietly with 141.

#[macro_use]
mod stdout;
mod cli;
mod config_check;
mod data;
mod external;
mod local_executor;
mod rm;
mod rm_client;
#[cfg(test)]
mod rm_local_tests;
mod stages;
mod standalone;
mod top;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "cascade",
    version,
    about = "Durable delayed events flowing through chains of queues",
    after_help = "Exit codes: 0 done, 1 refused by the server, 2 bad usage, 3 cannot connect."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every service in this process (in-process bus, data under --data-dir).
    Standalone(standalone::Flags),
    #[command(flatten)]
    Client(Box<cli::Command>),
    /// A live view of pipelines, queues and shards: depth, rates, handlers (Ctrl-C quits).
    Top(top::TopArgs),
    /// Ask the resource manager of a running `cascade standalone`.
    Rm {
        #[command(subcommand)]
        command: rm_client::RmCommand,
    },
    /// Check settings files as the services load them at start.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Check, repair, export or import a stopped shard's store directory.
    Data(data::DataArgs),
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

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            error.exit_code()
        }
    }
}

fn run(command: Command) -> Result<(), cli::CliError> {
    // The other commands' errors say everything themselves, with their causes; those that
    // are a client command's kind of error (bad usage, nothing to connect to) keep its code.
    let told = |result: anyhow::Result<()>| {
        result.map_err(|e| {
            e.downcast::<cli::CliError>().unwrap_or_else(|e| {
                cli::CliError::message(cascade_core::error::describe(e.as_ref()))
            })
        })
    };
    match command {
        Command::Client(command) => runtime()?.block_on(cli::run(*command)),
        Command::Service(args) => external::exec(args),
        Command::Standalone(flags) => told(runtime()?.block_on(standalone::main(flags))),
        Command::Rm { command } => told(runtime()?.block_on(rm_client::rm(command))),
        Command::Top(args) => told(runtime()?.block_on(top::top(args))),
        Command::Config {
            command: ConfigCommand::Check(args),
        } => told(config_check::check(args)),
        Command::Data(args) => told(data::run(args)),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, cli::CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli::CliError::failed("cannot start the async runtime", e))
}

#[cfg(test)]
mod tests {
    /// clap checks a command line's definition (names used twice, say) only when it is
    /// parsed; this checks every subcommand's at once.
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
