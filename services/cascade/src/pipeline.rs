//! `cascade pipeline apply --config FILE`: applies every `[[pipelines]]` of a settings file
//! through the gateway, as `cascade standalone` does at start. Applying a pipeline again is
//! idempotent (its queues and events stay; a changed stage config takes effect), so an
//! install or upgrade hook can run it every time. It waits for the gateway (connection
//! refused, UNAVAILABLE) up to `--wait`, so it can start while the cluster is still coming up;
//! any other refusal fails at once.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use cascade_client::Client;
use cascade_core::parse_duration;
use cascade_proto::convert::pipeline_to_proto;
use cascade_service::Settings;
use serde_json::json;

#[derive(clap::Subcommand)]
pub enum PipelineCommand {
    /// Apply the pipelines of a settings file (all of its `[[pipelines]]`).
    Apply(ApplyArgs),
}

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// The settings file whose pipelines to apply.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The gateway's gRPC address.
    #[arg(long, env = "CASCADE_ADDR", default_value = "http://127.0.0.1:7700")]
    addr: String,
    /// How long to wait for the gateway to answer.
    #[arg(long, default_value = "2m")]
    wait: String,
}

/// Pause between tries while the gateway is not there yet.
const RETRY_PAUSE: Duration = Duration::from_secs(2);

pub async fn pipeline(command: PipelineCommand) -> anyhow::Result<()> {
    let PipelineCommand::Apply(args) = command;
    let settings = Settings::load(Some(&args.config), &[])?;
    let wait = parse_duration(&args.wait).context("--wait")?;
    let deadline = Instant::now() + wait;
    let client = loop {
        match Client::connect(&args.addr).await {
            Ok(client) => break client,
            Err(e) if Instant::now() < deadline => {
                eprintln!("{e}; trying again");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    for pipeline in &settings.pipelines {
        let request = pipeline_to_proto(pipeline);
        let applied = loop {
            match client.admin().apply_pipeline(request.clone()).await {
                Ok(reply) => break reply.into_inner(),
                Err(status)
                    if status.code() == tonic::Code::Unavailable && Instant::now() < deadline =>
                {
                    eprintln!(
                        "pipeline {}: {}; trying again",
                        pipeline.name,
                        status.message()
                    );
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(status) => {
                    return Err(status)
                        .with_context(|| format!("apply pipeline {}", pipeline.name));
                }
            }
        };
        println!(
            "{}",
            json!({ "applied": applied.name, "stages": applied.stages.len() })
        );
    }
    Ok(())
}
