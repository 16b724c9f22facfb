//! Wakes long-poll `Take`s when events may have become ready in their queue.
//!
//! Only queues with a waiter have an entry, so millions of idle queues cost nothing. A writer
//! calls [`Wakeups::wake`] after a request that may have made events ready (enqueue, activate,
//! release, retry, delivery); what it cannot see — a lease expired by the store's own tick,
//! a redrive to an unknown origin — the waiter's periodic re-check catches, or `wake_all`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use cascade_core::QueueName;
use tokio::sync::Notify;

#[derive(Default)]
pub(crate) struct Wakeups {
    waiting: Mutex<HashMap<QueueName, Arc<Notify>>>,
}

/// One long poll waiting on a queue; dropping it unregisters.
pub(crate) struct Waiter<'a> {
    wakeups: &'a Wakeups,
    queue: QueueName,
    notify: Arc<Notify>,
}

impl Wakeups {
    pub fn register(&self, queue: &QueueName) -> Waiter<'_> {
        let notify = Arc::clone(self.lock().entry(queue.clone()).or_default());
        Waiter {
            wakeups: self,
            queue: queue.clone(),
            notify,
        }
    }

    /// Wakes every waiter of `queue`, if any.
    pub fn wake(&self, queue: &QueueName) {
        if let Some(notify) = self.lock().get(queue) {
            notify.notify_waiters();
        }
    }

    pub fn wake_all(&self) {
        for notify in self.lock().values() {
            notify.notify_waiters();
        }
    }

    /// Queues with a waiter.
    #[cfg(test)]
    pub fn waiting_queues(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<QueueName, Arc<Notify>>> {
        // A panic elsewhere while holding the lock leaves a map that is still consistent.
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Waiter<'_> {
    /// The notifier to wait on. Create (and `enable`) its `notified()` future before
    /// checking the store, so that a wake between the check and the wait is not lost.
    pub fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let mut waiting = self.wakeups.lock();
        // The map holds one reference and each waiter one; clones happen only under the lock.
        if Arc::strong_count(&self.notify) == 2 {
            waiting.remove(&self.queue);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn q(name: &str) -> QueueName {
        QueueName::parse(name).expect("queue")
    }

    #[tokio::test]
    async fn a_wake_reaches_the_waiters_of_that_queue_only() {
        let wakeups = Wakeups::default();
        let jobs = wakeups.register(&q("jobs"));
        let other = wakeups.register(&q("other"));
        let jobs_woken = jobs.notify().notified();
        let other_woken = other.notify().notified();
        tokio::pin!(jobs_woken, other_woken);
        jobs_woken.as_mut().enable();
        other_woken.as_mut().enable();
        wakeups.wake(&q("jobs"));
        tokio::time::timeout(Duration::from_secs(1), jobs_woken)
            .await
            .expect("woken");
        let quiet = tokio::time::timeout(Duration::from_millis(20), other_woken).await;
        assert!(quiet.is_err(), "another queue's waiter was woken");
    }

    #[test]
    fn entries_go_with_their_last_waiter() {
        let wakeups = Wakeups::default();
        let first = wakeups.register(&q("jobs"));
        let second = wakeups.register(&q("jobs"));
        assert_eq!(wakeups.waiting_queues(), 1);
        drop(first);
        assert_eq!(wakeups.waiting_queues(), 1);
        drop(second);
        assert_eq!(wakeups.waiting_queues(), 0);
        wakeups.wake(&q("jobs"));
    }
}
