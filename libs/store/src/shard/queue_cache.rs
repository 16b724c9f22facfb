//! Decoded queue records by name. Every enqueue and every completion resolves its queue, and
//! reading and decoding the record (its config validated field by field) was a tenth of the
//! writer's time in the engine's steady flow. The cache holds only committed records: a
//! transaction that writes a queue record reads its own write, and `State::commit` forgets
//! every name a committed batch writes.

use std::collections::HashMap;

use cascade_core::QueueName;

use crate::codec::keys;
use crate::codec::records::QueueRecord;
use crate::kv::Batch;

/// Past this many names the cache starts again empty: a shard of millions of per-user queues
/// keeps the ones in use now, not all of them.
const MAX_QUEUES: usize = 4096;

#[derive(Default)]
pub(super) struct QueueCache {
    records: HashMap<String, QueueRecord>,
}

impl QueueCache {
    pub fn get(&self, name: &QueueName) -> Option<&QueueRecord> {
        self.records.get(name.as_str())
    }

    /// `rec`, stored now under `name`'s key.
    pub fn insert(&mut self, name: &QueueName, rec: QueueRecord) {
        if self.records.len() >= MAX_QUEUES {
            self.records.clear();
        }
        self.records.insert(name.as_str().to_owned(), rec);
    }

    /// Forgets the queues whose records `batch` writes or deletes.
    pub fn forget_written(&mut self, batch: &Batch) {
        if self.records.is_empty() {
            return;
        }
        for key in batch.keys() {
            if let Some(name) = keys::queue_name_of(key) {
                // A name the cache holds is valid UTF-8; other keys cannot match one.
                if let Ok(name) = std::str::from_utf8(name) {
                    self.records.remove(name);
                }
            }
        }
    }
}
