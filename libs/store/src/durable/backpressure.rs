//! How much new work the store's writer lets in while a checkpoint runs. The in-memory layers,
//! the checkpoint's frozen one included, stay within twice `checkpoint_bytes` (what the memory
//! sizing in the docs counts on), and only a checkpoint's end frees memory. Holding all new
//! work at that bound until the checkpoint lands made a burst larger than the layers stall its
//! shard for most of a checkpoint: 5 s of a 13-s checkpoint of 1.6 million keys on the
//! benchmark machine, long enough for requests to time out. So the active layer gets half of
//! what the frozen layer leaves of the bound at once, which an ordinary burst fills at full
//! speed, and the other half as the checkpoint writes its keys into sled: past the first half
//! a burst goes at the rate sled takes it, a little wait at a time.

/// The bytes the active layer may hold while a checkpoint of a `frozen`-byte layer runs that
/// has written `written` of its `keys` into sled, with `limit` bytes for both layers.
pub(super) fn active_allowance(limit: usize, frozen: usize, written: usize, keys: usize) -> usize {
    let room = limit.saturating_sub(frozen);
    let at_once = room / 2;
    let paced = room - at_once;
    let opened = match keys {
        0 => paced,
        keys => (paced as u128 * written.min(keys) as u128 / keys as u128) as usize,
    };
    at_once + opened
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_the_room_is_free_at_once_and_the_rest_opens_with_the_checkpoint() {
        // A checkpoint of 100 bytes and 10 keys under a bound of 300: room for 200.
        assert_eq!(active_allowance(300, 100, 0, 10), 100);
        assert_eq!(active_allowance(300, 100, 5, 10), 150);
        assert_eq!(active_allowance(300, 100, 10, 10), 200);
        // A count past the layer's keys (it never is) opens no more than all of it.
        assert_eq!(active_allowance(300, 100, 11, 10), 200);
    }

    #[test]
    fn an_empty_checkpoint_leaves_the_whole_room() {
        assert_eq!(active_allowance(300, 0, 0, 0), 300);
    }

    #[test]
    fn a_frozen_layer_at_the_bound_leaves_nothing() {
        assert_eq!(active_allowance(300, 300, 5, 10), 0);
        assert_eq!(active_allowance(300, 400, 10, 10), 0);
    }

    #[test]
    fn large_sizes_do_not_overflow() {
        // Half the keys written, with a room of `usize::MAX - 1` split in two equal halves.
        let half = (usize::MAX - 1) / 2;
        assert_eq!(
            active_allowance(usize::MAX, 1, usize::MAX / 2, usize::MAX - 1),
            half + half / 2
        );
    }
}
