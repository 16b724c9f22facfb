//! Publishes the stats of every queue of the shard on `cascade.<cluster>.stats.<shard>`
//! every `dispatcher.stats_interval`, for the resource manager. The queues are read a page
//! at a time (one writer closure each), so other requests run in between; a shard with more
//! queues than one message carries publishes several `ShardStats` for one round, each with
//! the same `at` and the shard's template names (for the status page's families).

use std::sync::Arc;

use bytes::Bytes;
use cascade_bus::subject;
use cascade_core::SystemClock;
use cascade_proto::bus::v1::ShardStats;
use cascade_proto::convert::{queue_stats_to_proto, timestamp_to_proto};
use cascade_proto::v1;
use cascade_store::StoreError;
use prost::Message;

use crate::context::ShardContext;
use crate::metrics::Depth;
use crate::take::repeated_field_cost;

/// Queues read per writer closure.
const PAGE: usize = 256;

pub(crate) async fn publish(ctx: Arc<ShardContext>) {
    let mut depth = Depth::new(ctx.shard, &ctx.metrics);
    let mut ticks = tokio::time::interval(ctx.stats_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = ctx.stopping.wait() => return,
        }
        match collect(&ctx).await {
            Ok((queues, templates)) => {
                depth.update(&queues, &templates);
                send(&ctx, queues, templates).await;
            }
            Err(e) => tracing::warn!(shard = ctx.shard, error = %e, "dispatcher.stats.collect"),
        }
    }
}

/// Every queue's stats, and the templates' names.
async fn collect(ctx: &ShardContext) -> Result<(Vec<v1::QueueStats>, Vec<String>), StoreError> {
    let mut all = Vec::new();
    let mut templates = Vec::new();
    let mut token = String::new();
    loop {
        let after = std::mem::take(&mut token);
        let (page, page_templates, next) = ctx
            .store
            .run(move |shard, now| {
                let listed = shard.list_queues("", PAGE, &after)?;
                let mut stats = Vec::with_capacity(listed.items.len());
                let mut templates = Vec::new();
                for queue in &listed.items {
                    if queue.name.is_template() {
                        templates.push(queue.name.to_string());
                        continue;
                    }
                    let counts = shard.queue_stats(now, &queue.name)?;
                    stats.push(queue_stats_to_proto(&queue.name, &counts));
                }
                Ok((stats, templates, listed.next_page_token))
            })
            .await?;
        all.extend(page);
        templates.extend(page_templates);
        if next.is_empty() {
            return Ok((all, templates));
        }
        token = next;
    }
}

async fn send(ctx: &ShardContext, queues: Vec<v1::QueueStats>, templates: Vec<String>) {
    let subject = subject::stats(&ctx.cluster, ctx.shard);
    let budget = ctx.reply_budget();
    let at = Some(timestamp_to_proto(cascade_core::Clock::now(&SystemClock)));
    let mut message = ShardStats {
        shard: ctx.shard,
        at,
        queues: Vec::new(),
        templates,
    };
    // Templates are few (created one by one by operators); every message carries them.
    let mut bytes = message.encoded_len();
    for stats in queues {
        let cost = repeated_field_cost(stats.encoded_len());
        if !message.queues.is_empty() && bytes + cost > budget {
            publish_one(ctx, &subject, &message).await;
            message.queues.clear();
            bytes = message.encoded_len();
        }
        bytes += cost;
        message.queues.push(stats);
    }
    publish_one(ctx, &subject, &message).await;
}

async fn publish_one(ctx: &ShardContext, subject: &str, message: &ShardStats) {
    let payload = Bytes::from(message.encode_to_vec());
    if let Err(e) = ctx.bus.publish(subject, payload).await {
        tracing::debug!(shard = ctx.shard, error = %e, "dispatcher.stats.publish");
    }
}
