//! The `Admin` service.
//!
//! A template's queues live on every shard, so creating or deleting a template goes to every
//! shard (both are idempotent: a partial failure is fixed by retrying), and reading one asks
//! shard 0. A plain queue goes to its owner. `ListQueues` asks every shard and merges. Stats,
//! purge, dead letters and redrive name one queue (a template is refused: its queues are on
//! every shard and it holds no events itself). Pipelines are on every shard too: see
//! `pipelines`.

use cascade_core::QueueName;
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::convert::{
    MAX_PAGE_SIZE, create_queue_from_proto, get_pipeline_from_proto, list_dead_letters_from_proto,
    list_queues_from_proto, pipeline_from_proto, queue_name_from_proto, queue_stats_from_proto,
    queue_stats_to_proto, redrive_from_proto,
};
use cascade_proto::v1::{
    CreateQueueRequest, DeleteQueueRequest, DeleteQueueResponse, GetPipelineRequest,
    GetQueueRequest, ListDeadLettersRequest, ListDeadLettersResponse, ListPipelinesRequest,
    ListPipelinesResponse, ListQueuesRequest, ListQueuesResponse, Pipeline, PurgeQueueRequest,
    PurgeQueueResponse, Queue, QueueStats, QueueStatsRequest, RedriveRequest, RedriveResponse,
    admin_server::Admin,
};
use cascade_security::Permission;
use tonic::{Request, Response, Status};

use crate::IngestError;
use crate::admission::respond;
use crate::auth::caller;
use crate::authorize::allowed;
use crate::gateway::Gateway;
use crate::list::merge_queue_pages;
use crate::peer::Peer;
use crate::pipelines::{apply_on, pipeline_reply, read_any};
use crate::route::{Shards, unexpected};

/// The shard asked about a template: every shard holds it.
const TEMPLATE_READER: u32 = 0;

impl Gateway {
    /// Every shard's answer in shard order; the first failure if any shard failed.
    async fn on_every_shard(&self, op: Op) -> Result<Vec<(u32, Reply)>, IngestError> {
        let answers = self.shards.call_all(op).await;
        (0u32..)
            .zip(answers)
            .map(|(shard, answer)| Ok((shard, answer?)))
            .collect()
    }

    /// One page of every shard's queues under the request's prefix, merged.
    pub(crate) async fn list_queue_page(
        &self,
        request: ListQueuesRequest,
    ) -> Result<ListQueuesResponse, IngestError> {
        let (prefix, page) = list_queues_from_proto(&request)?;
        let ask = ListQueuesRequest {
            prefix,
            page_size: u32::try_from(page.size).unwrap_or(u32::MAX),
            page_token: page.token,
        };
        let mut pages = Vec::new();
        for (shard, reply) in self.on_every_shard(Op::ListQueues(ask)).await? {
            match reply {
                Reply::Queues(listed) => pages.push(listed),
                other => return Err(unexpected(shard, "a list", &other)),
            }
        }
        Ok(merge_queue_pages(pages, page.size))
    }

    fn queue_reply(shard: u32, asked: &'static str, reply: Reply) -> Result<Queue, IngestError> {
        match reply {
            Reply::Queue(queue) => Ok(queue),
            other => Err(unexpected(shard, asked, &other)),
        }
    }
}

/// A page of a dead-letter queue's events (`Admin.ListDeadLetters`, and the status page's).
pub(crate) async fn list_dead_letters(
    shards: &Shards,
    request: ListDeadLettersRequest,
) -> Result<ListDeadLettersResponse, IngestError> {
    let (queue, _) = list_dead_letters_from_proto(&request)?;
    let shard = shards.owner(&events_queue(queue.as_str(), "queue")?);
    match shards.call(shard, Op::ListDeadLetters(request)).await? {
        Reply::DeadLetters(page) => Ok(page),
        other => Err(unexpected(shard, "a dead-letter list", &other)),
    }
}

/// The stage queues of a pipeline message: `<pipeline>.<stage>`.
fn stage_queues(pipeline: &Pipeline) -> impl Iterator<Item = String> + '_ {
    let name = &pipeline.name;
    pipeline
        .stages
        .iter()
        .map(move |stage| cascade_core::Pipeline::queue_of(name, &stage.name))
}

/// Whether `caller` may read `pipeline`: it has a grant on one of its stages.
fn readable(caller: &cascade_security::Caller, pipeline: &Pipeline) -> bool {
    stage_queues(pipeline).any(|queue| caller.allows(Permission::Read, &queue))
}

/// A name that holds events: a queue, not a template.
fn events_queue(name: &str, field: &str) -> Result<QueueName, IngestError> {
    let queue = queue_name_from_proto(name, field)?;
    if queue.is_template() {
        return Err(IngestError::invalid(
            field,
            format!("'{queue}' is a template, whose queues live on every shard; name one queue"),
        ));
    }
    Ok(queue)
}

#[tonic::async_trait]
impl Admin for Gateway {
    async fn create_queue(
        &self,
        request: Request<CreateQueueRequest>,
    ) -> Result<Response<Queue>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let (name, config) = create_queue_from_proto(&request).map_err(IngestError::from)?;
        allowed(&caller, Permission::Administer, name.as_str(), "name")?;
        // Its dead letters are written there: that queue must be the caller's too.
        if let Some(dead_letters) = &config.dead_letter_queue {
            let field = "config.dead_letter_queue";
            allowed(
                &caller,
                Permission::Administer,
                dead_letters.as_str(),
                field,
            )?;
        }
        self.queue_quota(&caller, &[name.to_string()]).await?;
        if !name.is_template() {
            let shard = self.shards.owner(&name);
            let reply = self.shards.call(shard, Op::CreateQueue(request)).await?;
            return Ok(Response::new(Self::queue_reply(shard, "a create", reply)?));
        }
        let mut answers = self.on_every_shard(Op::CreateQueue(request)).await?;
        // Every shard answered with the same template; show the first.
        let (shard, reply) = answers.swap_remove(0);
        Ok(Response::new(Self::queue_reply(shard, "a create", reply)?))
    }

    async fn get_queue(
        &self,
        request: Request<GetQueueRequest>,
    ) -> Result<Response<Queue>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let name = queue_name_from_proto(&request.name, "name").map_err(IngestError::from)?;
        allowed(&caller, Permission::Read, name.as_str(), "name")?;
        let shard = match name.is_template() {
            true => TEMPLATE_READER,
            false => self.shards.owner(&name),
        };
        let reply = self.shards.call(shard, Op::GetQueue(request)).await?;
        Ok(Response::new(Self::queue_reply(shard, "a get", reply)?))
    }

    async fn list_queues(
        &self,
        request: Request<ListQueuesRequest>,
    ) -> Result<Response<ListQueuesResponse>, Status> {
        let caller = caller(&request)?;
        let mut request = request.into_inner();
        let (_, page) = list_queues_from_proto(&request).map_err(IngestError::from)?;
        // Only what the caller may read, and a page token that is one of those names: pages
        // are read on until one holds such a name or the list ends, for a token naming a
        // queue outside the caller's grants would tell it that queue exists. After the
        // first, the largest pages are read, so that a caller whose grants match few queues
        // costs a round per thousand queues, not one per queue.
        loop {
            let listed = self.list_queue_page(request.clone()).await?;
            let mut queues: Vec<Queue> = listed
                .queues
                .into_iter()
                .filter(|queue| caller.allows(Permission::Read, &queue.name))
                .collect();
            let more = !listed.next_page_token.is_empty() || queues.len() > page.size;
            queues.truncate(page.size);
            match (more, queues.last()) {
                (false, _) => {
                    return Ok(Response::new(ListQueuesResponse {
                        queues,
                        next_page_token: String::new(),
                    }));
                }
                (true, Some(last)) => {
                    let next_page_token = last.name.clone();
                    return Ok(Response::new(ListQueuesResponse {
                        queues,
                        next_page_token,
                    }));
                }
                (true, None) => {
                    request.page_token = listed.next_page_token;
                    request.page_size = MAX_PAGE_SIZE as u32;
                }
            }
        }
    }

    async fn delete_queue(
        &self,
        request: Request<DeleteQueueRequest>,
    ) -> Result<Response<DeleteQueueResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let name = queue_name_from_proto(&request.name, "name").map_err(IngestError::from)?;
        allowed(&caller, Permission::Administer, name.as_str(), "name")?;
        let answers: Vec<(u32, _)> = match name.is_template() {
            true => (0u32..)
                .zip(self.shards.call_all(Op::DeleteQueue(request)).await)
                .collect(),
            false => {
                let shard = self.shards.owner(&name);
                vec![(
                    shard,
                    self.shards.call(shard, Op::DeleteQueue(request)).await,
                )]
            }
        };
        // A template already gone from some shards (an earlier delete that failed half-way)
        // is deleted once the rest say done; NOT_FOUND only when no shard had it.
        let mut deleted = false;
        let mut not_found = None;
        for (shard, answer) in answers {
            match answer {
                Ok(Reply::Done(_)) => deleted = true,
                Ok(other) => return Err(unexpected(shard, "a delete", &other).into()),
                Err(err) if err.code() == tonic::Code::NotFound => not_found = Some(err),
                Err(err) => return Err(err.into()),
            }
        }
        match (deleted, not_found) {
            (false, Some(err)) => Err(err.into()),
            _ => Ok(Response::new(DeleteQueueResponse {})),
        }
    }

    async fn purge_queue(
        &self,
        request: Request<PurgeQueueRequest>,
    ) -> Result<Response<PurgeQueueResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let queue = events_queue(&request.name, "name")?;
        allowed(&caller, Permission::Administer, queue.as_str(), "name")?;
        let shard = self.shards.owner(&queue);
        match self.shards.call(shard, Op::PurgeQueue(request)).await? {
            Reply::Purge(purged) => Ok(Response::new(purged)),
            other => Err(unexpected(shard, "a purge", &other).into()),
        }
    }

    async fn queue_stats(
        &self,
        request: Request<QueueStatsRequest>,
    ) -> Result<Response<QueueStats>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let name = queue_name_from_proto(&request.name, "name").map_err(IngestError::from)?;
        allowed(&caller, Permission::Read, name.as_str(), "name")?;
        if !name.is_template() {
            let shard = self.shards.owner(&name);
            return match self.shards.call(shard, Op::QueueStats(request)).await? {
                Reply::Stats(stats) => Ok(Response::new(stats)),
                other => Err(unexpected(shard, "a stats request", &other).into()),
            };
        }
        // A template's queues live on every shard, each of which sums its share.
        let mut sum = cascade_core::QueueStats::default();
        for (shard, reply) in self.on_every_shard(Op::QueueStats(request)).await? {
            let Reply::Stats(stats) = reply else {
                return Err(unexpected(shard, "a stats request", &reply).into());
            };
            let (_, share) =
                queue_stats_from_proto(&stats, "").map_err(|e| IngestError::BadReply {
                    shard,
                    asked: "a stats request",
                    got: format!("stats it could not read ({e})"),
                })?;
            sum.add(&share);
        }
        Ok(Response::new(queue_stats_to_proto(name.as_str(), &sum)))
    }

    async fn apply_pipeline(
        &self,
        request: Request<Pipeline>,
    ) -> Result<Response<Pipeline>, Status> {
        let caller = caller(&request)?;
        let pipeline = pipeline_from_proto(&request.into_inner()).map_err(IngestError::from)?;
        self.check_pipeline(&caller, &pipeline).await?;
        let applied = apply_on(&self.shards, &pipeline).await;
        // Even a partial apply may have changed some shards: look again next time.
        self.pipelines.invalidate();
        Ok(Response::new(applied?))
    }

    async fn get_pipeline(
        &self,
        request: Request<GetPipelineRequest>,
    ) -> Result<Response<Pipeline>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        get_pipeline_from_proto(&request).map_err(IngestError::from)?;
        let (shard, reply) = read_any(&self.shards, Op::GetPipeline(request)).await?;
        let pipeline = pipeline_reply(shard, "a pipeline get", reply)?;
        if !readable(&caller, &pipeline)
            && let Some(first) = stage_queues(&pipeline).next()
        {
            allowed(&caller, Permission::Read, &first, "name")?;
        }
        Ok(Response::new(pipeline))
    }

    async fn list_pipelines(
        &self,
        request: Request<ListPipelinesRequest>,
    ) -> Result<Response<ListPipelinesResponse>, Status> {
        let caller = caller(&request)?;
        let op = Op::ListPipelines(request.into_inner());
        match read_any(&self.shards, op).await? {
            (_, Reply::Pipelines(mut listed)) => {
                listed.pipelines.retain(|p| readable(&caller, p));
                Ok(Response::new(listed))
            }
            (shard, other) => Err(unexpected(shard, "a pipeline list", &other).into()),
        }
    }

    async fn list_dead_letters(
        &self,
        request: Request<ListDeadLettersRequest>,
    ) -> Result<Response<ListDeadLettersResponse>, Status> {
        let caller = caller(&request)?;
        let peer = Peer::of(request.extensions()).cloned();
        let request = request.into_inner();
        let (queue, _) = list_dead_letters_from_proto(&request).map_err(IngestError::from)?;
        allowed(&caller, Permission::Administer, queue.as_str(), "queue")?;
        let page = list_dead_letters(&self.shards, request).await?;
        Ok(respond(&self.admission, peer.as_ref(), page)?)
    }

    async fn redrive(
        &self,
        request: Request<RedriveRequest>,
    ) -> Result<Response<RedriveResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        self.limits.check_items("ids", request.ids.len())?;
        let (queue, _) = redrive_from_proto(&request).map_err(IngestError::from)?;
        allowed(&caller, Permission::Administer, queue.as_str(), "queue")?;
        let shard = self.shards.owner(&events_queue(queue.as_str(), "queue")?);
        match self.shards.call(shard, Op::Redrive(request)).await? {
            Reply::Redrive(moved) => Ok(Response::new(moved)),
            other => Err(unexpected(shard, "a redrive", &other).into()),
        }
    }
}
