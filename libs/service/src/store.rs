//! Opening a shard's store as the settings say.

use std::path::PathBuf;

use cascade_store::{Durability, StoreOptions};

use crate::Settings;
use crate::settings::DurabilityKind;

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
        ..StoreOptions::default()
    }
}
