//! `cascade config check FILE`: loads a settings file exactly as the services do at start
//! (defaults < file < `CASCADE__…` environment) and prints what it describes, or fails with
//! the error a service would stop with. With `--service NAME` it also reads the files that
//! service reads at start (identities, the gRPC port's TLS files, the bus's credentials and
//! TLS files), where it runs: one settings file may serve several services, each with only
//! its own files at hand. `--stage-worker` checks a stage worker's file the same way.
//! Deployment tooling (the Helm chart's tests) reads the printed names instead of copying the
//! rules that make them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cascade_service::Settings;
use cascade_stage_worker::StageWorkerConfig;
use serde_json::json;

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The settings file (TOML, or JSON for a name ending in `.json`).
    file: PathBuf,
    /// The file configures a `cascade-stage-worker`, not a cluster's services.
    #[arg(long, conflicts_with = "service")]
    stage_worker: bool,
    /// Also read the files this service reads at start, as it would here.
    #[arg(long, value_enum)]
    service: Option<Service>,
}

/// A service that reads files its settings name.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Service {
    Standalone,
    Ingest,
    Dispatcher,
    ActivationTimer,
    ResourceManager,
}

/// The files the settings name that `service` reads at start: the identities (every
/// service), the gRPC port's certificate, key and client CA (the gateway's), and what the
/// bus connects with (every service of the distributed mode).
fn check_files(settings: &Settings, service: Service) -> anyhow::Result<()> {
    cascade_service::auth::load(&settings.auth)?;
    if matches!(service, Service::Standalone | Service::Ingest) {
        cascade_ingest::Tls::check(&settings.grpc.tls)?;
    }
    if service == Service::Standalone {
        return Ok(());
    }
    let bus = &settings.bus;
    let named = [
        ("bus.credentials_file", &bus.credentials_file),
        ("bus.tls.ca_file", &bus.tls.ca_file),
        ("bus.tls.cert_file", &bus.tls.cert_file),
        ("bus.tls.key_file", &bus.tls.key_file),
    ];
    for (key, path) in named {
        if let Some(path) = path {
            std::fs::read(path).map_err(|e| {
                cascade_service::ServiceError::setting(key, format!("{}: {e}", path.display()))
            })?;
        }
    }
    Ok(())
}

pub fn check(args: CheckArgs) -> anyhow::Result<()> {
    let summary = match args.stage_worker {
        true => {
            let config = StageWorkerConfig::load(Some(&args.file), &[])?;
            cascade_telemetry::check(&config.telemetry)?;
            json!({
                "valid": true,
                "queue": config.queue_name()?.as_str(),
                "gateway": config.gateway,
            })
        }
        false => {
            let settings = Settings::load(Some(&args.file), &[])?;
            cascade_telemetry::check(&settings.telemetry)?;
            if let Some(service) = args.service {
                check_files(&settings, service)?;
            }
            let kubernetes = &settings.resource_manager.kubernetes;
            let stage_deployments: BTreeMap<String, String> = settings
                .pipelines
                .iter()
                .flat_map(|pipeline| {
                    pipeline
                        .stages
                        .iter()
                        .map(|stage| pipeline.stage_queue(&stage.name).to_string())
                })
                .map(|queue| {
                    let deployment = kubernetes.deployment_of(&queue);
                    (queue, deployment)
                })
                .collect();
            json!({
                "valid": true,
                "cluster": { "name": settings.cluster.name, "shards": settings.cluster.shards },
                "pipelines": settings.pipelines.iter().map(|p| &p.name).collect::<Vec<_>>(),
                "stage_deployments": stage_deployments,
            })
        }
    };
    outln!("{summary}");
    Ok(())
}
