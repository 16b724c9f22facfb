//! Opening a shard's store as the settings say.

use std::path::PathBuf;
use std::sync::Arc;

use cascade_core::SystemClock;
use cascade_store::durable::{self, Maintenance};
use cascade_store::kv::Kv;
use cascade_store::{ClusterIdentity, CommitObserver, Durability, Store, StoreError, StoreOptions};

use crate::settings::DurabilityKind;
use crate::{Settings, ShardError};

/// The store directory of `service`'s shard `shard`: `<data.dir>/<service>-<shard>`.
pub fn shard_dir(settings: &Settings, service: &str, shard: u32) -> PathBuf {
    settings.data.dir.join(format!("{service}-{shard}"))
}

pub fn options(settings: &Settings) -> StoreOptions {
    let s = &settings.store;
    StoreOptions {
        durability: match s.durability {
            DurabilityKind::Fsync => Durability::Fsync,
            DurabilityKind::Interval => Durability::Interval(s.sync_interval),
            DurabilityKind::None => Durability::None,
        },
        cache_bytes: s.cache,
        checkpoint_interval: s.checkpoint_interval,
        checkpoint_bytes: usize::try_from(s.checkpoint_bytes).unwrap_or(usize::MAX),
        reopen_bytes: usize::try_from(s.reopen_bytes).unwrap_or(usize::MAX),
        min_free: s.min_free_bytes,
        cluster: Some(ClusterIdentity {
            name: settings.cluster.name.clone(),
            shards: settings.cluster.shards,
            store: None,
        }),
        ..StoreOptions::default()
    }
}

/// Recovers the store of `service`'s shard `shard` (in [`shard_dir`]) and starts its writer;
/// `state` makes the state machine over the recovered keys. Both run on a blocking thread.
/// `commits` is told of every group commit (`observe::observe_commits`).
pub async fn open_shard_store<S: Maintenance>(
    settings: &Settings,
    service: &'static str,
    shard: u32,
    commits: Option<Arc<dyn CommitObserver>>,
    state: impl FnOnce(Kv) -> Result<S, StoreError> + Send + 'static,
) -> Result<Store<S>, ShardError> {
    let dir = shard_dir(settings, service, shard);
    let mut options = StoreOptions {
        commit_observer: commits,
        ..options(settings)
    };
    if let Some(cluster) = &mut options.cluster {
        cluster.store = Some(format!("{service}-{shard}"));
    }
    let open_dir = dir.clone();
    let opened = tokio::task::spawn_blocking(move || {
        let (kv, wal) = durable::recover(&open_dir, &options)?;
        Ok::<_, StoreError>(Store::start(
            state(kv)?,
            wal,
            options,
            Arc::new(SystemClock),
        ))
    })
    .await;
    match opened {
        Ok(Ok(store)) => Ok(store),
        Ok(Err(source)) => Err(ShardError::OpenStore {
            service,
            shard,
            dir,
            source,
        }),
        Err(join) => Err(ShardError::Failed {
            service,
            shard,
            reason: format!("opening the store panicked: {join}"),
        }),
    }
}
