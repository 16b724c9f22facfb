//! Cascade with a large store, alone (the peers have no per-user queues): an enqueue load on
//! an empty store; then `plan.stored` per-user queues of one template holding one event
//! each and `plan.pending` timers due in an hour; after that load, a SIGKILL and restart
//! (how soon it serves again), the same enqueue load on the full store (its p99 against the
//! empty store's), the delayed scenario among the pending timers (its consumers waiting in
//! a long poll unless `CASCADE_BENCH_POLL=1`, with the shard's own
//! activation lateness from `/metrics` beside the consumers'), and a clean restart after
//! which `plan.backlog` events, all in sled by then, are taken and acked.
//! After each step it prints the server's resident memory, the events stored and the data
//! directory's size per event.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cascade_client::Client;
use cascade_e2e::bench::{disk_usage, events_stored, fill_per_user_queues, histogram_quantile};
use cascade_e2e::process::{cpu_ticks, http_body, rss_bytes};
use cascade_e2e::{Cluster, Mode};
use tokio::runtime::Runtime;

use crate::scenarios::{self, Measured};
use crate::systems::{Cascade, Peer, now_micros, payload};
use crate::{BoxError, Plan};

/// Producers of the enqueue load, on the empty and on the full store.
const PRODUCERS: usize = 16;
/// Consumers of the take+ack load after the clean restart.
const CONSUMERS: usize = 16;
/// The per-user queues are filled by `EnqueueBatch` of this many, this many in flight.
const FILL: (usize, usize) = (1000, 8);
/// The longest a restart or a clean stop may take before the scenario gives up.
const PATIENCE: Duration = Duration::from_secs(600);
/// When the pending timers are due: after the run.
const PENDING_FOR: Duration = Duration::from_secs(3600);

pub fn run(runtime: &Runtime, plan: &Plan) -> Result<(), BoxError> {
    let mut cluster =
        Cluster::start_with(Mode::Standalone, None, &[("CASCADE__CLUSTER__SHARDS", "1")]);
    // How long a restart or a clean stop takes is measured, not bounded: at 10M events it
    // may pass a test's limits.
    cluster.set_patience(PATIENCE);
    let peer = Arc::new(plan.cascade(cluster.gateway()));
    let (producing, delayed) = (scenarios::queues("scale"), scenarios::queues("late"));
    let (pending, backlog) = (scenarios::queues("pending"), scenarios::queues("backlog"));
    for queues in [&producing, &delayed, &pending, &backlog] {
        runtime.block_on(peer.setup(queues))?;
    }
    let empty = runtime.block_on(enqueue(&peer, &cluster, &producing, plan))?;
    print_enqueue("empty store", &empty, None);

    let loading = Instant::now();
    runtime.block_on(async {
        let client = Client::connect(&peer.addr).await?;
        let event = |user| payload(user as u64, 0);
        fill_per_user_queues(&client, "inbox", plan.stored, event, FILL).await?;
        let due = now_micros() + PENDING_FOR.as_micros() as u64;
        scenarios::fill(&peer, &pending, plan.pending, move |_| Some(due)).await
    })?;
    println!(
        "loaded {} per-user queues (one event each) and {} timers in {:.1} s",
        plan.stored,
        plan.pending,
        loading.elapsed().as_secs_f64()
    );
    print_state(&cluster, "after the load", plan.settle)?;

    let crashed = Instant::now();
    cluster.crash_and_restart_dispatcher(0);
    println!("SIGKILL, restart: ready after {:?}", crashed.elapsed());
    print_state(&cluster, "after the SIGKILL restart", plan.settle)?;

    let full = runtime.block_on(enqueue(&peer, &cluster, &producing, plan))?;
    print_enqueue("full store", &full, Some(&empty));
    let late = runtime.block_on(scenarios::delayed(&peer, &delayed, plan))?;
    println!(
        "{} delayed over {:?} among {} pending timers: lateness p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        plan.delayed,
        plan.spread,
        plan.pending,
        late.p50.as_secs_f64() * 1e3,
        late.p99.as_secs_f64() * 1e3,
        late.max.as_secs_f64() * 1e3
    );
    // The shard's own view: from each activation's due time to the shard applying it (the
    // timer's wake-up and the hand-off), which tells that share from the take's.
    let metrics = http_body(cluster.http(), "/metrics").ok_or("no /metrics")?;
    for q in [0.5, 0.99] {
        let lateness = "cascade_activation_lateness_seconds";
        if let Some((bound, count)) = histogram_quantile(&metrics, lateness, q) {
            println!(
                "  {lateness} p{:.0}: ≤ {bound} s ({count} activations)",
                q * 100.0
            );
        }
    }

    // A backlog to drain after the clean restart, when all of it is in sled: takes that read
    // their events through sled's page cache (`store.cache`).
    runtime.block_on(scenarios::fill(&peer, &backlog, plan.backlog, |_| None))?;

    let (terminated, mut stopped) = (Instant::now(), None);
    cluster.restart_standalone_with(|| stopped = Some(Instant::now()));
    let stopped = stopped.expect("stopped before the restart");
    println!(
        "SIGTERM: stopped after {:?} (its last checkpoint); restart: ready after {:?}",
        stopped - terminated,
        stopped.elapsed()
    );
    print_state(&cluster, "after the clean restart", plan.settle)?;

    let drained = runtime.block_on(scenarios::drain(
        &peer,
        &server_ticks(&cluster),
        &backlog,
        CONSUMERS,
        plan.backlog,
        plan.window,
    ))?;
    println!(
        "take+ack, {CONSUMERS} consumers, batches of {}, from a backlog of {} in sled: {:.0} events/s; server {:.1} µs per event",
        scenarios::BATCH,
        plan.backlog,
        drained.rate,
        drained.server_us
    );
    print_state(&cluster, "after that take+ack", plan.settle)?;
    cluster.stop();
    Ok(())
}

/// The enqueue scenario's load, against the process serving now.
async fn enqueue(
    peer: &Arc<Cascade>,
    cluster: &Cluster,
    queues: &[String],
    plan: &Plan,
) -> Result<Measured, BoxError> {
    scenarios::enqueue(peer, &server_ticks(cluster), queues, PRODUCERS, plan).await
}

/// The CPU ticks of the process serving now.
fn server_ticks(cluster: &Cluster) -> impl Fn() -> Vec<(u32, u64)> + use<> {
    let pid = cluster.front_pid();
    move || cpu_ticks(pid).map(|t| (pid, t)).into_iter().collect()
}

fn print_enqueue(store: &str, m: &Measured, empty: Option<&Measured>) {
    let ms = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
    let against = empty.map_or(String::new(), |e| {
        let ratio = ms(m.p99) / ms(e.p99);
        format!(" = {ratio:.2}x the empty store's p99")
    });
    println!(
        "enqueue, {PRODUCERS} producers, {store}: {:.0}/s, p50 {:.2} ms, p99 {:.2} ms{against}",
        m.rate,
        ms(m.p50),
        ms(m.p99)
    );
}

/// After `settle` (the stats round, the allocator): resident memory, events stored (from
/// `/metrics`) and the data directory's size.
fn print_state(cluster: &Cluster, when: &str, settle: Duration) -> Result<(), BoxError> {
    std::thread::sleep(settle);
    let rss = rss_bytes(cluster.front_pid());
    let metrics = http_body(cluster.http(), "/metrics").ok_or("no /metrics")?;
    let events = events_stored(&metrics);
    let (disk, wal) = disk_usage(&cluster.data_dir())?;
    let mib = |bytes: u64| bytes as f64 / 1048576.0;
    println!(
        "{when}: RSS {:.1} MiB; {events} events stored; data directory {:.1} MiB \
         ({:.1} MiB of it logs) = {:.0} bytes per event",
        mib(rss),
        mib(disk),
        mib(wal),
        disk as f64 / events.max(1) as f64
    );
    Ok(())
}
