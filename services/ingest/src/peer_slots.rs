//! Connections per client address: at most `grpc.max_connections_per_peer` from one IP
//! address at once, so that one client cannot take every place under `grpc.max_connections`.
//! A connection holds its place until it closes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

pub(crate) struct PeerSlots {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place among its address's.
pub(crate) struct PeerSlot {
    slots: Arc<PeerSlots>,
    ip: IpAddr,
}

impl PeerSlots {
    pub(crate) fn new(max: usize) -> Arc<PeerSlots> {
        Arc::new(PeerSlots {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// A place for one more connection from `ip`; `None` when it has `max` open already.
    pub(crate) fn take(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        let mut open = self.lock();
        let count = open.entry(ip).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            slots: Arc::clone(self),
            ip,
        })
    }

    /// Each change is one whole update, so a lock poisoned by a panic still holds counts.
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.slots.lock();
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_places_and_no_more_and_others_are_apart() {
        let slots = PeerSlots::new(2);
        let (one, other): (IpAddr, IpAddr) = (
            "10.0.0.1".parse().expect("ip"),
            "10.0.0.2".parse().expect("ip"),
        );
        let first = slots.take(one).expect("a place");
        let _second = slots.take(one).expect("a place");
        assert!(slots.take(one).is_none(), "a third is refused");
        let _elsewhere = slots.take(other).expect("another address has its own");
        drop(first);
        let _again = slots
            .take(one)
            .expect("a closed connection's place is free");
        assert!(slots.take(one).is_none());
    }

    #[test]
    fn an_address_without_connections_is_forgotten() {
        let slots = PeerSlots::new(1);
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        drop(slots.take(ip).expect("a place"));
        assert!(slots.lock().is_empty());
    }
}
