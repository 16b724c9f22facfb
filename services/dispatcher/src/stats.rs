//! Publishes the shard's stats on `cascade.<cluster>.stats.<shard>` every
//! `dispatcher.stats_interval`, for the resource manager and the status page: each queue no
//! template covers and each pipeline stage by name, and the other queues each template
//! covers summed into one family entry (the store keeps those sums), so a round costs the
//! same with millions of per-user queues as with none. The queues are read a page at a time (one writer closure each), so other
//! requests run in between; a shard with more queues than one message carries publishes
//! several `ShardStats` for one round, each with the same `at`, the families and the
//! activation lateness of each family since the previous round in the first.

use std::sync::Arc;

use bytes::Bytes;
use cascade_bus::subject;
use cascade_core::SystemClock;
use cascade_proto::bus::v1::{FamilyLateness, FamilyStats, ShardStats};
use cascade_proto::convert::{family_stats_to_proto, queue_stats_to_proto, timestamp_to_proto};
use cascade_proto::v1;
use cascade_store::StoreError;
use prost::Message;

use crate::context::ShardContext;
use crate::take::repeated_field_cost;

/// Queues read per writer closure.
const PAGE: usize = 256;

pub(crate) async fn publish(ctx: Arc<ShardContext>) {
    let mut ticks = tokio::time::interval(ctx.stats_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = ctx.stopping.wait() => return,
        }
        match collect(&ctx).await {
            Ok((queues, families)) => {
                ctx.metrics.update_depth(&queues, &families);
                let lateness = ctx.metrics.take_lateness();
                send(&ctx, queues, families, lateness).await;
            }
            Err(e) => tracing::warn!(shard = ctx.shard, error = %e, "dispatcher.stats.collect"),
        }
    }
}

/// The stats of every queue no template covers and of every stage, and of every family.
async fn collect(
    ctx: &ShardContext,
) -> Result<(Vec<v1::QueueStats>, Vec<FamilyStats>), StoreError> {
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let after = std::mem::take(&mut token);
        let (page, next) = ctx
            .store
            .run(move |shard, now| {
                let listed = shard.list_uncovered_queues(PAGE, &after)?;
                let mut stats = Vec::with_capacity(listed.items.len());
                for name in &listed.items {
                    let counts = shard.queue_stats(now, name)?;
                    stats.push(queue_stats_to_proto(name.as_str(), &counts));
                }
                Ok((stats, listed.next_page_token))
            })
            .await?;
        all.extend(page);
        if next.is_empty() {
            break;
        }
        token = next;
    }
    // Stages are published by name even when a template's range covers them (`*`): the
    // resource manager scales them one by one.
    let (stages, families) = ctx
        .store
        .run(|shard, now| {
            let mut stages = Vec::new();
            for name in shard.covered_stage_queues()? {
                let counts = shard.queue_stats(now, &name)?;
                stages.push(queue_stats_to_proto(name.as_str(), &counts));
            }
            let families = shard.family_stats();
            Ok((stages, families.iter().map(family_stats_to_proto).collect()))
        })
        .await?;
    all.extend(stages);
    Ok((all, families))
}

async fn send(
    ctx: &ShardContext,
    queues: Vec<v1::QueueStats>,
    families: Vec<FamilyStats>,
    lateness: Vec<FamilyLateness>,
) {
    let subject = subject::stats(&ctx.cluster, ctx.shard);
    let budget = ctx.reply_budget();
    let at = Some(timestamp_to_proto(cascade_core::Clock::now(&SystemClock)));
    // Families are few (one or two per template, created one by one by operators), and
    // so are those with activations in one round.
    let mut message = ShardStats {
        shard: ctx.shard,
        at,
        queues: Vec::new(),
        families,
        lateness,
    };
    let mut bytes = message.encoded_len();
    for stats in queues {
        let cost = repeated_field_cost(stats.encoded_len());
        if !message.queues.is_empty() && bytes + cost > budget {
            publish_one(ctx, &subject, &message).await;
            message.queues.clear();
            message.families.clear();
            message.lateness.clear();
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
