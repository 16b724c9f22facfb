//! One running shard: the context its tasks share (which owns the store), subscribed to the
//! shard's subject, and its named tasks.

use std::future::Future;
use std::sync::Arc;

use cascade_bus::{Bus, Subscription};
use cascade_store::Store;
use cascade_store::durable::{DiskState, Maintenance};
use tokio::task::JoinHandle;

use super::{SupervisedShard, presence};
use crate::{ShardError, Shutdown};

/// What running a shard needs from the context its tasks share.
pub trait ShardCore: Sized + Send + Sync + 'static {
    type State: Maintenance;

    fn bus(&self) -> &Bus;

    fn store(&self) -> &Store<Self::State>;

    /// Pulled when the shard stops: its tasks end.
    fn stopping(&self) -> &Shutdown;

    /// The store, to close it once nothing else holds the context.
    fn into_store(self) -> Store<Self::State>;
}

/// A shard whose tasks run; [`SupervisedShard`] for [`ShardSupervisor`](super::ShardSupervisor).
pub struct RunningShard<C> {
    ctx: Arc<C>,
    tasks: ShardTasks,
}

impl<C: ShardCore> RunningShard<C> {
    /// Subscribes `service`'s shard `shard` to `subject`, then starts its tasks with
    /// `spawn(tasks, ctx, requests_in)`, and its presence (`presence`): first, it refuses to
    /// start if another process answers that it serves the shard. If it cannot start, it
    /// closes the store.
    pub async fn start(
        service: &'static str,
        shard: u32,
        ctx: Arc<C>,
        subject: String,
        spawn: impl FnOnce(&mut ShardTasks, &Arc<C>, Subscription),
    ) -> Result<RunningShard<C>, ShardError> {
        let me = presence::Server::this_process();
        let presence_subject = presence::subject_of(&subject);
        if let Err(reason) = presence::ask(ctx.bus(), &presence_subject, &me).await {
            close(service, shard, ctx).await?;
            return Err(ShardError::Failed {
                service,
                shard,
                reason,
            });
        }
        let subscribed = match ctx.bus().subscribe(&presence_subject).await {
            Ok(presence_in) => match ctx.bus().subscribe(&subject).await {
                Ok(requests_in) => Ok((presence_in, requests_in)),
                Err(source) => Err((subject.clone(), source)),
            },
            Err(source) => Err((presence_subject.clone(), source)),
        };
        let (presence_in, requests_in) = match subscribed {
            Ok(both) => both,
            Err((subject, source)) => {
                close(service, shard, ctx).await?;
                return Err(ShardError::Subscribe {
                    service,
                    shard,
                    subject,
                    source,
                });
            }
        };
        let mut tasks = ShardTasks::new(service, shard);
        spawn(&mut tasks, &ctx, requests_in);
        let serving = presence::Presence {
            bus: ctx.bus().clone(),
            subject: presence_subject,
            subscription: presence_in,
            me,
            service,
            shard,
        };
        tasks.push(
            "presence",
            "its presence on the bus ended: another process that has served it longer serves it on the same bus (the log names it; two processes must never serve one shard), or the bus subscription closed".into(),
            presence::serve(serving, presence::ANNOUNCE_EVERY, ctx.stopping().clone()),
        );
        tracing::info!(shard, %subject, "{service}.shard.started");
        Ok(RunningShard { ctx, tasks })
    }
}

impl<C: ShardCore> SupervisedShard for RunningShard<C> {
    type Error = ShardError;

    /// Why the shard cannot go on, if it cannot: its store failed, or a task ended early.
    fn failure(&self) -> Option<ShardError> {
        self.tasks
            .failure(self.ctx.store().fatal(), self.ctx.stopping())
    }

    fn disk(&self) -> Option<(u32, DiskState)> {
        Some((self.tasks.shard, self.ctx.store().disk().state()))
    }

    /// Waits for the tasks (the supervisor has pulled `stopping`), then closes the store.
    async fn stop(self) -> Result<(), ShardError> {
        let RunningShard { ctx, tasks } = self;
        let (service, shard) = (tasks.service, tasks.shard);
        tasks.join().await;
        close(service, shard, ctx).await?;
        tracing::info!(shard, "{service}.shard.stopped");
        Ok(())
    }
}

/// Closes the store of a shard whose tasks are all done: it finishes what it holds and
/// checkpoints, on a blocking thread.
async fn close<C: ShardCore>(
    service: &'static str,
    shard: u32,
    ctx: Arc<C>,
) -> Result<(), ShardError> {
    let Some(ctx) = Arc::into_inner(ctx) else {
        return Err(ShardError::Failed {
            service,
            shard,
            reason: "its store is still in use at shutdown".into(),
        });
    };
    let store = ctx.into_store();
    match tokio::task::spawn_blocking(move || store.shutdown()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(ShardError::CloseStore {
            service,
            shard,
            source,
        }),
        Err(join) => Err(ShardError::Failed {
            service,
            shard,
            reason: format!("closing the store panicked: {join}"),
        }),
    }
}

/// The tasks of one shard, in the order they were spawned and are joined.
pub struct ShardTasks {
    service: &'static str,
    shard: u32,
    tasks: Vec<ShardTask>,
}

struct ShardTask {
    /// Names the task in logs: `request loop`, `outbox pump`, …
    name: &'static str,
    /// The shard's failure should the task end before the shard stops.
    ended: String,
    handle: JoinHandle<()>,
}

impl ShardTasks {
    pub(super) fn new(service: &'static str, shard: u32) -> ShardTasks {
        ShardTasks {
            service,
            shard,
            tasks: Vec::new(),
        }
    }

    /// Spawns the shard's request loop, which ends early only when its subscription closes.
    pub fn spawn_request_loop(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.push(
            "request loop",
            "its request loop ended (the bus subscription closed)".into(),
            task,
        );
    }

    /// Spawns the task `name` (`outbox pump`), which runs until the shard stops.
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        self.push(name, format!("its {name} ended"), task);
    }

    fn push(
        &mut self,
        name: &'static str,
        ended: String,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        self.tasks.push(ShardTask {
            name,
            ended,
            handle: tokio::spawn(task),
        });
    }

    /// Why the shard cannot go on, if it cannot: its store failed (`store_fatal`), or a task
    /// ended before `stopping` was pulled.
    pub(super) fn failure(
        &self,
        store_fatal: Option<String>,
        stopping: &Shutdown,
    ) -> Option<ShardError> {
        let failed = |reason| ShardError::Failed {
            service: self.service,
            shard: self.shard,
            reason,
        };
        if let Some(reason) = store_fatal {
            return Some(failed(reason));
        }
        if stopping.is_triggered() {
            return None;
        }
        self.tasks
            .iter()
            .find(|task| task.handle.is_finished())
            .map(|task| failed(task.ended.clone()))
    }

    /// Waits for every task (the caller has pulled `stopping`); a panic is logged.
    pub(super) async fn join(self) {
        let shard = self.shard;
        for task in self.tasks {
            if let Err(e) = task.handle.await {
                tracing::error!(
                    shard,
                    task = task.name,
                    error = %e,
                    "{}.task.panicked",
                    self.service
                );
            }
        }
    }
}
