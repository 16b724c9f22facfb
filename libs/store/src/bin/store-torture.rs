//! Writes to a store until it is killed, printing each acknowledged write on its own line:
//! `E <id>` once an enqueue into queue `a` is durable, `A <id>` once its advance to queue `b`
//! is. The crash test kills it with SIGKILL at random moments and checks, after reopening,
//! that every printed write is there and no transition is half-applied.
//!
//! Usage: `store-torture DIR TAG [--one-log-file]` (TAG keeps the client IDs of each run
//! distinct; `--one-log-file` keeps the whole log in one segment and never checkpoints).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use cascade_core::{EventId, Outcome, QueueConfig, QueueName, SystemClock};
use cascade_store::shard::EnqueueCmd;
use cascade_store::{Durability, Shard, ShardSettings, Store, StoreOptions, durable};

const WRITERS: usize = 16;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (dir, tag, one_log_file) = match args.as_slice() {
        [_, dir, tag] => (dir.clone(), tag.clone(), false),
        [_, dir, tag, flag] if flag == "--one-log-file" => (dir.clone(), tag.clone(), true),
        _ => anyhow::bail!("usage: store-torture DIR TAG [--one-log-file]"),
    };
    let options = if one_log_file {
        // Everything goes to one growing log segment, and sled is left alone: a file-size
        // limit then makes a log write fail, not a checkpoint.
        StoreOptions {
            durability: Durability::Fsync,
            checkpoint_interval: Duration::from_secs(3600),
            checkpoint_bytes: 1 << 30,
            wal_segment_bytes: 1 << 30,
            ..StoreOptions::default()
        }
    } else {
        StoreOptions {
            durability: Durability::Fsync,
            checkpoint_interval: Duration::from_millis(150),
            checkpoint_bytes: 256 << 10,
            // sled reopened after every full checkpoint: kills land around reopens too.
            reopen_bytes: 256 << 10,
            wal_segment_bytes: 64 << 10,
            ..StoreOptions::default()
        }
    };
    let (kv, wal) = durable::recover(dir.as_ref(), &options).context("recover the store")?;
    let shard = Shard::new(kv, ShardSettings::default()).context("open the shard")?;
    let store = Arc::new(Store::start(shard, wal, options, Arc::new(SystemClock)));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run(store, tag))
}

async fn run(store: Arc<Store<Shard>>, tag: String) -> anyhow::Result<()> {
    for name in ["a", "b"] {
        let queue = QueueName::parse(name)?;
        store
            .run(move |s, now| s.create_queue(now, queue, QueueConfig::default()))
            .await?;
    }
    let out = Arc::new(Mutex::new(std::io::stdout()));
    say(&out, "READY");
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (store, out, tag) = (Arc::clone(&store), Arc::clone(&out), tag.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0.. {
                let id = EventId::parse(&format!("{tag}-{w}-{n}"))?;
                let cmd = EnqueueCmd {
                    queue: QueueName::parse("a")?,
                    id: Some(id.clone()),
                    idempotency_key: None,
                    payload: payload_of(&id).into(),
                    headers: BTreeMap::new(),
                    activate_at: None,
                };
                store.run(move |s, now| s.enqueue(now, cmd)).await?;
                say(&out, &format!("E {id}"));
            }
            anyhow::Ok(())
        }));
    }
    let advancer = {
        let (store, out) = (Arc::clone(&store), Arc::clone(&out));
        tokio::spawn(async move {
            loop {
                let a = QueueName::parse("a")?;
                // As the dispatcher's: answered before the take's fsync.
                let taken = store
                    .run_unsynced(move |s, now| s.take(now, &a, 50, None))
                    .await?;
                for leased in taken {
                    let id = leased.event.id.clone();
                    let a = QueueName::parse("a")?;
                    let advance = Outcome::Advance {
                        to: Some("b".into()),
                        payload: None,
                        headers: BTreeMap::new(),
                        delay: None,
                    };
                    let token = leased.token;
                    let key = id.clone();
                    store
                        .run(move |s, now| s.complete(now, &a, key.as_str(), token, advance))
                        .await?;
                    say(&out, &format!("A {id}"));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            #[allow(unreachable_code)]
            anyhow::Ok(())
        })
    };
    tasks.push(advancer);
    // Every task runs until the store fails it; each one's error is reported, so a test can
    // check that every caller was told the cause, not only the first.
    let mut errors = Vec::new();
    for t in tasks {
        if let Err(e) = t.await? {
            errors.push(format!("{e:#}"));
        }
    }
    match errors.as_slice() {
        [] => Ok(()),
        _ => anyhow::bail!("{} tasks failed:\n{}", errors.len(), errors.join("\n")),
    }
}

/// A payload derived from the ID, so the checker knows what each event must carry.
pub fn payload_of(id: &EventId) -> Vec<u8> {
    id.as_str().repeat(4).into_bytes()
}

fn say(out: &Mutex<std::io::Stdout>, line: &str) {
    let mut out = out.lock().expect("stdout lock");
    // A broken pipe means the parent is gone; there is no one left to tell.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}
