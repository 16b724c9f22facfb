//! The audit log of the gateway (`cascade_telemetry::audit`): one line for every
//! administrative change that reaches it — a queue created, deleted or purged, a pipeline
//! applied (by a client, or from the settings file at start-up), dead letters redriven —
//! with who asked (the caller's identity and address, or `operator` from `settings`), what
//! (the action, the queue or pipeline, what it changed) and the outcome (`ok`, or the status
//! code and message the client got), refusals included. Reads are not audited.
//! With `log.format = "json"` each line is one JSON object a log pipeline can select by its
//! `target`.

use std::sync::Arc;

use cascade_proto::v1::admin_server::Admin;
use cascade_proto::v1::{
    CreateQueueRequest, DeleteQueueRequest, DeleteQueueResponse, GetPipelineRequest,
    GetQueueRequest, ListDeadLettersRequest, ListDeadLettersResponse, ListPipelinesRequest,
    ListPipelinesResponse, ListQueuesRequest, ListQueuesResponse, Pipeline, PurgeQueueRequest,
    PurgeQueueResponse, Queue, QueueStats, QueueStatsRequest, RedriveRequest, RedriveResponse,
};
use cascade_security::Caller;
use cascade_telemetry::audit;
use tonic::{Request, Response, Status};

use crate::gateway::Gateway;
use crate::peer::Peer;

/// `Admin`, auditing the calls that change something.
pub(crate) struct AuditedAdmin {
    gateway: Arc<Gateway>,
}

impl AuditedAdmin {
    pub fn new(gateway: Arc<Gateway>) -> AuditedAdmin {
        AuditedAdmin { gateway }
    }
}

/// The audited changes: each RPC's path and the action its lines name.
const CHANGES: [(&str, &str); 5] = [
    ("/cascade.v1.Admin/CreateQueue", "queue.create"),
    ("/cascade.v1.Admin/DeleteQueue", "queue.delete"),
    ("/cascade.v1.Admin/PurgeQueue", "queue.purge"),
    ("/cascade.v1.Admin/ApplyPipeline", "pipeline.apply"),
    ("/cascade.v1.Admin/Redrive", "dead_letters.redrive"),
];

/// The action of an RPC by its path, if it is an audited change.
pub(crate) fn action_of(path: &str) -> Option<&'static str> {
    CHANGES
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, action)| *action)
}

/// The action of `method` of `Admin`.
fn action(method: &str) -> &'static str {
    action_of(&format!("/cascade.v1.Admin/{method}")).expect("an audited method")
}

/// Who made a call: the caller's identity (`anonymous` with authentication off,
/// `in-process` for the process's own clients) and its connection's address.
fn who<T>(request: &Request<T>) -> (String, String) {
    let peer = Peer::of(request.extensions());
    let identity = match request
        .extensions()
        .get::<Caller>()
        .and_then(Caller::identity)
    {
        Some(identity) => identity.name.clone(),
        None if peer.is_some_and(Peer::is_in_process) => "in-process".to_owned(),
        None => "anonymous".to_owned(),
    };
    (identity, Peer::describe_of(request.extensions()))
}

/// Writes the audit line of an RPC's answer; `change` says what an accepted call changed.
fn record_call<T>(
    (identity, peer): (String, String),
    action: &'static str,
    resource: &str,
    answer: &Result<Response<T>, Status>,
    change: impl FnOnce(&T) -> String,
) {
    let outcome = match answer {
        Ok(response) => Ok(change(response.get_ref())),
        Err(status) => Err((status.code(), status.message().to_owned())),
    };
    audit::record(&identity, &peer, action, resource, outcome);
}

#[tonic::async_trait]
impl Admin for AuditedAdmin {
    async fn create_queue(
        &self,
        request: Request<CreateQueueRequest>,
    ) -> Result<Response<Queue>, Status> {
        let (who, name) = (who(&request), request.get_ref().name.clone());
        let answer = self.gateway.create_queue(request).await;
        record_call(who, action("CreateQueue"), &name, &answer, |_| {
            "created".into()
        });
        answer
    }

    async fn delete_queue(
        &self,
        request: Request<DeleteQueueRequest>,
    ) -> Result<Response<DeleteQueueResponse>, Status> {
        let (who, name) = (who(&request), request.get_ref().name.clone());
        let force = request.get_ref().force;
        let answer = self.gateway.delete_queue(request).await;
        record_call(
            who,
            action("DeleteQueue"),
            &name,
            &answer,
            |_| match force {
                true => "deleted (forced, with its events)".into(),
                false => "deleted".into(),
            },
        );
        answer
    }

    async fn purge_queue(
        &self,
        request: Request<PurgeQueueRequest>,
    ) -> Result<Response<PurgeQueueResponse>, Status> {
        let (who, name) = (who(&request), request.get_ref().name.clone());
        let answer = self.gateway.purge_queue(request).await;
        record_call(who, action("PurgeQueue"), &name, &answer, |purged| {
            format!("{} events removed", purged.purged)
        });
        answer
    }

    async fn apply_pipeline(
        &self,
        request: Request<Pipeline>,
    ) -> Result<Response<Pipeline>, Status> {
        let (who, name) = (who(&request), request.get_ref().name.clone());
        let answer = self.gateway.apply_pipeline(request).await;
        record_call(who, action("ApplyPipeline"), &name, &answer, |applied| {
            let stages: Vec<&str> = applied.stages.iter().map(|s| s.name.as_str()).collect();
            format!("applied with stages {}", stages.join(", "))
        });
        answer
    }

    async fn redrive(
        &self,
        request: Request<RedriveRequest>,
    ) -> Result<Response<RedriveResponse>, Status> {
        let (who, name) = (who(&request), request.get_ref().queue.clone());
        let answer = self.gateway.redrive(request).await;
        record_call(who, action("Redrive"), &name, &answer, |moved| {
            format!("{} events sent back", moved.moved)
        });
        answer
    }

    async fn get_queue(
        &self,
        request: Request<GetQueueRequest>,
    ) -> Result<Response<Queue>, Status> {
        self.gateway.get_queue(request).await
    }

    async fn list_queues(
        &self,
        request: Request<ListQueuesRequest>,
    ) -> Result<Response<ListQueuesResponse>, Status> {
        self.gateway.list_queues(request).await
    }

    async fn queue_stats(
        &self,
        request: Request<QueueStatsRequest>,
    ) -> Result<Response<QueueStats>, Status> {
        self.gateway.queue_stats(request).await
    }

    async fn get_pipeline(
        &self,
        request: Request<GetPipelineRequest>,
    ) -> Result<Response<Pipeline>, Status> {
        self.gateway.get_pipeline(request).await
    }

    async fn list_pipelines(
        &self,
        request: Request<ListPipelinesRequest>,
    ) -> Result<Response<ListPipelinesResponse>, Status> {
        self.gateway.list_pipelines(request).await
    }

    async fn list_dead_letters(
        &self,
        request: Request<ListDeadLettersRequest>,
    ) -> Result<Response<ListDeadLettersResponse>, Status> {
        self.gateway.list_dead_letters(request).await
    }
}
