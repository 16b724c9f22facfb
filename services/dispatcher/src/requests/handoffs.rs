//! Hand-offs from other owners: activations from this shard's timer, deliveries from other
//! dispatcher shards' outboxes. Both are applied durably before the answer, and both are
//! idempotent (an activation of a stale version changes nothing; a delivery at or below
//! the last sequence applied from its source is skipped), so a resend after a lost answer is
//! harmless. With trace export on, each activation is a `dispatcher.activate` span in its
//! event's trace (docs/tracing.md).

use cascade_core::{Event, QueueName};
use cascade_proto::bus::v1::{ActivateBatch, DeliveryBatch, Empty};
use cascade_proto::convert::{activation_from_proto, delivery_from_proto};

use crate::DispatcherError;
use crate::context::ShardContext;

pub(super) async fn activate(
    ctx: &ShardContext,
    batch: ActivateBatch,
) -> Result<Empty, DispatcherError> {
    let mut activations = Vec::with_capacity(batch.activations.len());
    for (index, activation) in batch.activations.iter().enumerate() {
        match activation_from_proto(activation, &format!("activations[{index}]")) {
            Ok(valid) => activations.push(valid),
            // It can name no event: answering an error would make the timer resend it forever.
            Err(e) => tracing::warn!(shard = ctx.shard, error = %e, "dispatcher.activate.invalid"),
        }
    }
    // Reading each activated event's headers costs; only for a span that is exported.
    let recording = cascade_telemetry::is_recording();
    let (activated, traced) = ctx
        .store
        .run(move |shard, _| {
            let mut activated: Vec<QueueName> = Vec::new();
            let mut traced = Vec::new();
            for (queue, id, version) in activations {
                if !shard.activate(&queue, id.as_str(), version)? {
                    continue;
                }
                if recording && let Ok(event) = shard.get(&queue, id.as_str()) {
                    traced.push(event);
                }
                if activated.last() != Some(&queue) {
                    activated.push(queue);
                }
            }
            Ok((activated, traced))
        })
        .await?;
    for queue in &activated {
        ctx.wakeups.wake(queue);
    }
    for event in &traced {
        activation_span(ctx.shard, event);
    }
    Ok(Empty {})
}

/// `dispatcher.activate`: the delayed event became ready (durably). A child of the context
/// the event carries, so it shows in the event's trace between its enqueue and its take.
fn activation_span(shard: u32, event: &Event) {
    let span = tracing::info_span!(
        "dispatcher.activate",
        cascade.queue = event.queue.as_str(),
        cascade.event_id = event.id.as_str(),
        cascade.shard = shard,
    );
    if let Err(err) = cascade_telemetry::set_parent_from_headers(&span, &event.headers) {
        tracing::debug!(error = %err, "dispatcher.trace.parent_not_set");
    }
}

pub(super) async fn deliver(
    ctx: &ShardContext,
    batch: DeliveryBatch,
) -> Result<Empty, DispatcherError> {
    // Refused, the deliveries wait in the sender's outbox until this disk has room again.
    ctx.check_space()?;
    let source = batch.source_shard;
    let mut deliveries = Vec::with_capacity(batch.deliveries.len());
    for (index, delivery) in batch.deliveries.into_iter().enumerate() {
        let (seq, delivery) = delivery_from_proto(delivery, &format!("deliveries[{index}]"))?;
        ctx.check_owned(&delivery.queue)?;
        deliveries.push((seq, delivery));
    }
    let mut queues: Vec<QueueName> = deliveries.iter().map(|(_, d)| d.queue.clone()).collect();
    queues.dedup();
    let applied = ctx
        .store
        .run(move |shard, now| shard.receive(now, source, deliveries))
        .await?;
    if applied > 0 {
        for queue in &queues {
            ctx.wakeups.wake(queue);
        }
        // A delivery for later is scheduled through the outbox.
        ctx.wake_outbox();
    }
    Ok(Empty {})
}
