//! The in-memory layers above sled. `active` takes every new write; during a checkpoint the
//! previous active layer is `frozen` while a background thread writes it into sled. Reads look
//! at active, then frozen, then sled, so they see one consistent state throughout.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::ops::{Bound, Deref};
use std::sync::Arc;

use super::batch::{Batch, Op};

#[derive(Clone, Debug)]
pub struct Dirty {
    /// `None` is a tombstone hiding the key in the layers below.
    pub value: Option<Vec<u8>>,
    /// Whether a layer below may hold the key. When it cannot, a delete drops the entry
    /// instead of leaving a tombstone, and the key never reaches sled.
    pub below: bool,
}

/// One layer's keys, in an ordered map per keyspace (a key's first byte): a search among a
/// queue's counters or the leases does not walk the tree of the events, and a search among
/// the events walks a tree of events alone.
#[derive(Debug)]
pub struct Layer {
    spaces: Box<[Keyspace; 256]>,
}

type Keyspace = BTreeMap<Vec<u8>, Dirty>;

/// The map of `key`'s keyspace; the empty key sorts before every other, so with space 0.
fn space_of(key: &[u8]) -> usize {
    key.first().map_or(0, |&b| usize::from(b))
}

impl Default for Layer {
    fn default() -> Self {
        Layer {
            spaces: Box::new(std::array::from_fn(|_| BTreeMap::new())),
        }
    }
}

impl Layer {
    pub fn get(&self, key: &[u8]) -> Option<&Dirty> {
        self.spaces[space_of(key)].get(key)
    }

    fn entry(&mut self, key: Vec<u8>) -> Entry<'_, Vec<u8>, Dirty> {
        self.spaces[space_of(&key)].entry(key)
    }

    /// The entries in `[start, end)`, in key order; `start` must be below `end`.
    pub fn range<'a>(
        &'a self,
        start: &'a [u8],
        end: &'a [u8],
    ) -> impl Iterator<Item = (&'a Vec<u8>, &'a Dirty)> + 'a {
        let bounds = (Bound::Included(start), Bound::Excluded(end));
        // Every key of a space past `end`'s first byte is past `end`.
        self.spaces[space_of(start)..=space_of(end)]
            .iter()
            .flat_map(move |space| space.range::<[u8], _>(bounds))
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Dirty)> {
        self.spaces.iter().flat_map(BTreeMap::iter)
    }

    pub fn len(&self) -> usize {
        self.spaces.iter().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.spaces.iter().all(BTreeMap::is_empty)
    }
}

const ENTRY_OVERHEAD: usize = 64;

#[derive(Default)]
pub struct Layers {
    pub active: Layer,
    pub frozen: Option<Arc<Layer>>,
    active_bytes: usize,
    /// `active_bytes` of the frozen layer when it was frozen.
    frozen_bytes: usize,
}

/// A value read from memory or from sled.
pub enum Value<'a> {
    Mem(&'a [u8]),
    Disk(sled::IVec),
}

impl Deref for Value<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Value::Mem(v) => v,
            Value::Disk(v) => v,
        }
    }
}

impl Layers {
    /// `Some(None)`: hidden by a tombstone; `None`: not in memory, ask sled.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        if let Some(d) = self.active.get(key) {
            return Some(d.value.as_deref());
        }
        let frozen = self.frozen.as_ref()?;
        frozen.get(key).map(|d| d.value.as_deref())
    }

    /// Applies `batch`, moving its keys and values into the layer (one search per key, no
    /// copy). With `replay`, no put counts as fresh: during recovery sled may hold any key of
    /// an interrupted checkpoint, so a delete must leave a tombstone.
    pub fn apply(&mut self, batch: Batch, replay: bool) {
        for op in batch.into_ops() {
            match op {
                Op::Put { key, value, fresh } => self.put(key, value, fresh && !replay),
                Op::Delete { key } => self.delete(key),
            }
        }
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>, fresh: bool) {
        match self.active.entry(key) {
            Entry::Occupied(mut entry) => {
                let d = entry.get_mut();
                let old = d.value.as_ref().map_or(0, Vec::len);
                self.active_bytes = self.active_bytes.saturating_sub(old) + value.len();
                d.value = Some(value);
            }
            Entry::Vacant(entry) => {
                self.active_bytes += entry.key().len() + value.len() + ENTRY_OVERHEAD;
                // A fresh key is absent in every layer below, frozen included.
                entry.insert(Dirty {
                    value: Some(value),
                    below: !fresh,
                });
            }
        }
    }

    fn delete(&mut self, key: Vec<u8>) {
        match self.active.entry(key) {
            Entry::Occupied(entry) if !entry.get().below => {
                let value = entry.get().value.as_ref().map_or(0, Vec::len);
                let freed = entry.key().len() + value + ENTRY_OVERHEAD;
                entry.remove();
                self.active_bytes = self.active_bytes.saturating_sub(freed);
            }
            Entry::Occupied(mut entry) => {
                let d = entry.get_mut();
                let freed = d.value.as_ref().map_or(0, Vec::len);
                d.value = None;
                self.active_bytes = self.active_bytes.saturating_sub(freed);
            }
            Entry::Vacant(entry) => {
                self.active_bytes += entry.key().len() + ENTRY_OVERHEAD;
                entry.insert(Dirty {
                    value: None,
                    below: true,
                });
            }
        }
    }

    /// Approximate memory held by the active layer: what triggers a checkpoint.
    pub fn active_bytes(&self) -> usize {
        self.active_bytes
    }

    /// Approximate memory held by both layers, the frozen one until its checkpoint lands.
    pub fn bytes(&self) -> usize {
        self.active_bytes + self.frozen_bytes
    }

    /// Moves the active layer to `frozen` for a checkpoint. Panics (a bug) if one is running.
    pub fn freeze(&mut self) -> Arc<Layer> {
        assert!(self.frozen.is_none(), "one checkpoint at a time");
        let layer = Arc::new(std::mem::take(&mut self.active));
        self.frozen_bytes = std::mem::take(&mut self.active_bytes);
        self.frozen = Some(Arc::clone(&layer));
        layer
    }

    /// The frozen layer is in sled now: stop reading it. Returns it, for the caller to free
    /// where that costs no one a wait.
    pub fn thaw(&mut self) -> Option<Arc<Layer>> {
        self.frozen_bytes = 0;
        self.frozen.take()
    }
}
