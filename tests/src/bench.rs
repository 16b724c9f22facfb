//! What the benchmarks share: picking what to run from the command line, filling per-user
//! queues, a consumer that acks with its next take, and reading what a run left behind
//! (events stored, bytes on disk).

use std::future::Future;
use std::path::Path;

use cascade_client::{Client, api};
use tokio::task::JoinSet;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The `names` the command line (`args`, flags left out) asks for, in `names`' order; all of
/// them when it names none.
pub fn picked(args: &[String], names: &[&'static str]) -> Vec<&'static str> {
    let chosen: Vec<&'static str> = names
        .iter()
        .copied()
        .filter(|name| args.iter().any(|arg| arg == name))
        .collect();
    match chosen.is_empty() {
        true => names.to_vec(),
        false => chosen,
    }
}

/// Runs `request(i)` for `i` in `0..count` with `concurrency` in flight; the first error
/// ends it.
pub async fn in_parallel<F, Fut>(
    count: usize,
    concurrency: usize,
    request: F,
) -> Result<(), BoxError>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    let mut tasks = JoinSet::new();
    for i in 0..count {
        if tasks.len() == concurrency {
            tasks.join_next().await.expect("a task")??;
        }
        tasks.spawn(request(i));
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// Creates the template `<prefix>:*` and puts one event, `payload(u)`, into each of its
/// per-user queues `<prefix>:u0` … `<prefix>:u<count - 1>`, by `EnqueueBatch` of `batch`
/// with `concurrency` batches in flight.
pub async fn fill_per_user_queues(
    c: &Client,
    prefix: &str,
    count: usize,
    payload: impl Fn(usize) -> Vec<u8>,
    (batch, concurrency): (usize, usize),
) -> Result<(), BoxError> {
    let template = api::CreateQueueRequest {
        name: format!("{prefix}:*"),
        config: None,
    };
    c.admin().create_queue(template).await?;
    in_parallel(count.div_ceil(batch), concurrency, |b| {
        let c = c.clone();
        let items = ((b * batch)..((b + 1) * batch).min(count))
            .map(|u| api::EnqueueRequest {
                queue: format!("{prefix}:u{u}"),
                payload: payload(u).into(),
                ..Default::default()
            })
            .collect();
        async move {
            let answer = c
                .ingest()
                .enqueue_batch(api::EnqueueBatchRequest { items })
                .await?;
            match answer.into_inner().results.iter().find(|r| r.code != 0) {
                Some(failed) => Err(failed.message.clone().into()),
                None => Ok(()),
            }
        }
    })
    .await
}

/// The events stored, all states and queues: the sum of `cascade_queue_depth` in a
/// `/metrics` page.
pub fn events_stored(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("cascade_queue_depth{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The upper bound of the bucket of histogram `name` in a `/metrics` page that holds the
/// `q` quantile of its observations (`histogram_quantile` without interpolation), and how
/// many there were; `None` without observations. Series of every label set are summed.
pub fn histogram_quantile(metrics: &str, name: &str, q: f64) -> Option<(f64, u64)> {
    let prefix = format!("{name}_bucket{{");
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    for line in metrics.lines().filter(|l| l.starts_with(&prefix)) {
        let le = line.split("le=\"").nth(1)?.split('"').next()?;
        let bound = match le {
            "+Inf" => f64::INFINITY,
            le => le.parse().ok()?,
        };
        let count = line.rsplit(' ').next()?.parse::<f64>().ok()? as u64;
        match buckets.iter_mut().find(|(b, _)| *b == bound) {
            Some((_, sum)) => *sum += count,
            None => buckets.push((bound, count)),
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    let wanted = (q * total as f64).ceil() as u64;
    let (bound, _) = buckets.iter().find(|(_, count)| *count >= wanted.max(1))?;
    (total > 0).then_some((*bound, total))
}

/// The disk space the files under `dir` take (allocated blocks, as `du` counts them), and
/// the part of it in directories named `wal`.
pub fn disk_usage(dir: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let (mut all, mut wal) = (0, 0);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            let (inner, inner_wal) = disk_usage(&entry.path())?;
            all += inner;
            wal += match entry.file_name() == "wal" {
                true => inner,
                false => inner_wal,
            };
        } else {
            all += meta.blocks() * 512;
        }
    }
    Ok((all, wal))
}

/// A Cascade consumer that acks each batch with its next `Take`, one round trip per batch as
/// the worker SDK makes them, and its last acks in one `Complete` ([`AckingConsumer::finish`]).
pub struct AckingConsumer {
    client: Client,
    acks: Vec<api::Completion>,
}

impl AckingConsumer {
    pub fn new(client: Client) -> AckingConsumer {
        AckingConsumer {
            client,
            acks: Vec::new(),
        }
    }

    /// The payloads of up to `max` events of `queue`, waiting up to `wait` for a first one,
    /// and how many acks of the last batch the take carried (all applied). The new events'
    /// acks are held for the next call.
    pub async fn take(
        &mut self,
        queue: &str,
        max: usize,
        wait: std::time::Duration,
    ) -> Result<(Vec<Vec<u8>>, usize), BoxError> {
        let acks = std::mem::take(&mut self.acks);
        let sent = acks.len();
        let take = api::TakeRequest {
            queue: queue.to_owned(),
            max_events: max as u32,
            wait: (!wait.is_zero()).then(|| wait.try_into()).transpose()?,
            completions: acks,
            ..api::TakeRequest::default()
        };
        let answer = self.client.worker().take(take).await?.into_inner();
        all_acked(sent, &answer.completions)?;
        let mut payloads = Vec::with_capacity(answer.events.len());
        for leased in answer.events {
            let event = leased.event.unwrap_or_default();
            self.acks.push(api::Completion {
                queue: queue.to_owned(),
                id: event.id,
                lease_token: leased.lease_token,
                outcome: Some(api::completion::Outcome::Ack(api::Ack {})),
            });
            payloads.push(Vec::from(event.payload));
        }
        Ok((payloads, sent))
    }

    /// Sends the acks still held; returns how many.
    pub async fn finish(&mut self) -> Result<usize, BoxError> {
        let completions = std::mem::take(&mut self.acks);
        let sent = completions.len();
        if sent > 0 {
            let request = api::CompleteRequest { completions };
            let answer = self.client.worker().complete(request).await?;
            all_acked(sent, &answer.into_inner().results)?;
        }
        Ok(sent)
    }
}

/// Fails unless each of the `sent` acks has its result and none was refused.
fn all_acked(sent: usize, results: &[api::CompletionResult]) -> Result<(), BoxError> {
    if results.len() != sent {
        return Err(format!("{} results for {sent} acks", results.len()).into());
    }
    match results.iter().find(|r| r.code != 0) {
        Some(refused) => Err(format!("an ack was refused: {}", refused.message).into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::{events_stored, histogram_quantile, picked};

    #[test]
    fn histogram_quantile_finds_the_bucket_of_the_quantile_over_every_series() {
        let metrics = "h_bucket{le=\"0.005\",shard=\"0\"} 90\n\
            h_bucket{le=\"0.005\",shard=\"1\"} 5\n\
            h_bucket{le=\"0.5\",shard=\"0\"} 99\n\
            h_bucket{le=\"0.5\",shard=\"1\"} 5\n\
            h_bucket{le=\"+Inf\",shard=\"0\"} 100\n\
            h_bucket{le=\"+Inf\",shard=\"1\"} 5\n\
            h_sum 3.0\nh_count 105\n";
        assert_eq!(histogram_quantile(metrics, "h", 0.9), Some((0.005, 105)));
        assert_eq!(histogram_quantile(metrics, "h", 0.99), Some((0.5, 105)));
        assert_eq!(
            histogram_quantile(metrics, "h", 0.995),
            Some((f64::INFINITY, 105))
        );
        assert_eq!(
            histogram_quantile("h_bucket{le=\"+Inf\"} 0\n", "h", 0.5),
            None
        );
        assert_eq!(histogram_quantile(metrics, "other", 0.5), None);
    }

    #[test]
    fn events_stored_sums_every_depth_series_and_nothing_else() {
        let metrics = "# TYPE cascade_queue_depth gauge\n\
            cascade_queue_depth{queue=\"inbox:*\",state=\"ready\",shard=\"0\"} 1000000\n\
            cascade_queue_depth{queue=\"a\",state=\"delayed\",shard=\"1\"} 25\n\
            cascade_queue_depth_other{queue=\"a\"} 7\n\
            cascade_enqueue_total{queue=\"a\",result=\"ok\"} 99\n";
        assert_eq!(events_stored(metrics), 1_000_025);
    }

    #[test]
    fn named_ones_in_order_or_all() {
        let args = [
            "--bench".to_owned(),
            "redis".to_owned(),
            "cascade".to_owned(),
        ];
        assert_eq!(
            picked(&args, &["cascade", "nats", "redis"]),
            ["cascade", "redis"]
        );
        assert_eq!(picked(&args[..1], &["a", "b"]), ["a", "b"]);
    }
}
