//! Pipelines: `apply FILE` (one pipeline in the shape of a `[[pipelines]]` entry of the
//! settings, TOML or JSON, or the protobuf JSON of `cascade.v1.Pipeline`), `apply --config SETTINGS` (every pipeline of a settings file, as
//! `cascade standalone` does at start; the chart's install hook runs it), `get`, `list`.
//! Applying again is idempotent (queues and events stay; a changed stage config takes
//! effect). `apply` waits for the gateway (connection refused, UNAVAILABLE) up to `--wait`,
//! so it can start while the cluster is still coming up; any other refusal fails at once.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cascade_client::{Client, api};
use cascade_core::Pipeline;
use cascade_proto::convert::{pipeline_from_proto, pipeline_to_proto};
use cascade_service::Settings;

use super::output::Value;
use super::proto_json;
use super::{CliError, ClientOpts};

#[derive(clap::Subcommand)]
pub enum PipelineCommand {
    /// Apply a pipeline from FILE (TOML like a `[[pipelines]]` entry of the settings, e.g.
    /// what `cascade pipeline get` prints, or the same in JSON for a name ending in .json,
    /// where the protobuf JSON of cascade.v1.Pipeline is read too; a file of several `[[pipelines]]` applies each), or every pipeline of a settings file
    /// with --config.
    #[command(group(clap::ArgGroup::new("source").required(true).args(["file", "config"])))]
    Apply {
        file: Option<PathBuf>,
        /// A settings file: apply all of its `[[pipelines]]`.
        #[arg(long, value_name = "SETTINGS", conflicts_with = "file")]
        config: Option<PathBuf>,
        /// How long to wait for the gateway to answer.
        #[arg(long, allow_hyphen_values = true, default_value = "0s")]
        wait: String,
    },
    /// Show a pipeline in the TOML `cascade pipeline apply` reads (JSON with --json).
    Get { name: String },
    /// List pipelines and their stages.
    List,
}

/// Pause between tries while the gateway is not there yet.
const RETRY_PAUSE: Duration = Duration::from_secs(2);

pub async fn pipeline(command: PipelineCommand, opts: ClientOpts) -> Result<(), CliError> {
    match command {
        PipelineCommand::Apply { file, config, wait } => {
            let pipelines = match (file, config) {
                (Some(file), _) => read_pipelines(&file)?,
                (None, Some(settings)) => {
                    Settings::load(Some(&settings), &[])
                        .map_err(|e| {
                            CliError::usage(format!("cannot load {}", settings.display()), e)
                        })?
                        .pipelines
                }
                (None, None) => unreachable!("clap requires FILE or --config"),
            };
            let wait = super::duration("wait", &wait)?;
            apply(&opts, &pipelines, Instant::now() + wait).await
        }
        PipelineCommand::Get { name } => {
            let s = opts.session().await?;
            let pipeline = s
                .client
                .admin()
                .get_pipeline(api::GetPipelineRequest { name: name.clone() })
                .await
                .map_err(s.refused(format!("cannot get pipeline {name}")))?
                .into_inner();
            let pipeline = pipeline_from_proto(&pipeline)
                .map_err(|e| CliError::failed(format!("cannot show pipeline {name}"), e))?;
            match s.out.is_json() {
                true => outln!("{}", to_json(&pipeline)),
                false => out!("{}", to_toml(&pipeline)),
            }
            Ok(())
        }
        PipelineCommand::List => {
            let s = opts.session().await?;
            let list = s
                .client
                .admin()
                .list_pipelines(api::ListPipelinesRequest {})
                .await
                .map_err(s.refused("cannot list pipelines"))?
                .into_inner();
            if s.out.is_json() {
                for p in &list.pipelines {
                    let pipeline = pipeline_from_proto(p).map_err(|e| {
                        CliError::failed(format!("cannot show pipeline {}", p.name), e)
                    })?;
                    outln!("{}", to_json(&pipeline));
                }
                return Ok(());
            }
            let rows: Vec<_> = list
                .pipelines
                .iter()
                .map(|p| {
                    let stages: Vec<&str> = p.stages.iter().map(|s| s.name.as_str()).collect();
                    vec![
                        ("name", Value::Text(p.name.clone())),
                        ("stages", Value::Text(stages.join(" → "))),
                    ]
                })
                .collect();
            s.out.table(&rows, "no pipelines");
            Ok(())
        }
    }
}

fn to_json(pipeline: &Pipeline) -> String {
    serde_json::to_string(pipeline).expect("a pipeline serializes")
}

fn to_toml(pipeline: &Pipeline) -> String {
    toml::to_string(pipeline).expect("a pipeline serializes")
}

/// One pipeline, or a file with `[[pipelines]]` (a settings file's, say): each of them.
fn read_pipelines(path: &Path) -> Result<Vec<Pipeline>, CliError> {
    let what = || format!("cannot read the pipeline in {}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| CliError::usage(what(), e))?;
    let is_json = path.extension().is_some_and(|e| e == "json");
    let value: serde_json::Value = match is_json {
        true => serde_json::from_str(&text).map_err(|e| CliError::usage(what(), e))?,
        false => toml::from_str(&text).map_err(|e| CliError::usage(what(), e))?,
    };
    let pipelines = match value.get("pipelines") {
        Some(list) => serde_json::from_value(list.clone()),
        None => serde_json::from_value(value.clone()).map(|p| vec![p]),
    };
    match pipelines {
        Ok(pipelines) => Ok(pipelines),
        // Not the settings' shape: JSON may be the message's own mapping.
        Err(settings_shape) if is_json => {
            let proto = proto_json::pipeline_from_json(value).map_err(|proto_shape| {
                CliError::usage(
                    what(),
                    format!(
                        "neither a pipeline in the settings' shape ({settings_shape}) nor the protobuf JSON of cascade.v1.Pipeline ({proto_shape})"
                    ),
                )
            })?;
            let pipeline = pipeline_from_proto(&proto).map_err(|e| CliError::usage(what(), e))?;
            Ok(vec![pipeline])
        }
        Err(e) => Err(CliError::usage(what(), e)),
    }
}

async fn apply(
    opts: &ClientOpts,
    pipelines: &[Pipeline],
    deadline: Instant,
) -> Result<(), CliError> {
    let s = loop {
        match opts.session().await {
            Ok(session) => break session,
            Err(e) if e.exit == super::error::Exit::Connect && Instant::now() < deadline => {
                eprintln!("{e}; trying again");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return Err(e),
        }
    };
    for pipeline in pipelines {
        let request = pipeline_to_proto(pipeline);
        let applied = loop {
            match apply_once(&s.client, request.clone()).await {
                Ok(applied) => break applied,
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
                    return Err(s
                        .refused(format!("cannot apply pipeline {}", pipeline.name))(
                        status,
                    ));
                }
            }
        };
        s.out.done(
            format!(
                "applied pipeline {} ({} stage{})",
                applied.name,
                applied.stages.len(),
                if applied.stages.len() == 1 { "" } else { "s" }
            ),
            vec![
                ("applied", Value::Text(applied.name)),
                ("stages", Value::Count(applied.stages.len() as u64)),
            ],
        );
    }
    Ok(())
}

async fn apply_once(
    client: &Client,
    request: api::Pipeline,
) -> Result<api::Pipeline, tonic::Status> {
    Ok(client.admin().apply_pipeline(request).await?.into_inner())
}
