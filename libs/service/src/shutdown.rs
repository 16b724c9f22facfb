//! Graceful shutdown: one trigger, any number of waiters. SIGTERM and ctrl-c pull the trigger;
//! `cascade standalone` shares one signal between all the services it runs.

use tokio::sync::watch;

/// Pulls the signal. Dropping it pulls it too, so a dead owner never leaves tasks waiting.
pub struct ShutdownTrigger(watch::Sender<bool>);

/// Waits for the signal. Cheap to clone.
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

pub fn shutdown_channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), Shutdown(rx))
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    /// Triggers on the first SIGTERM or ctrl-c.
    pub async fn on_signal(self) {
        wait_for_signal().await;
        tracing::info!("shutdown.signal");
        self.trigger();
    }
}

impl Shutdown {
    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    /// Returns once the signal is pulled (at once if it already was).
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        // An error means the trigger was dropped: that counts as the signal.
        let _ = rx.wait_for(|&down| down).await;
    }
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; ctrl-c only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_wake_on_trigger_and_on_drop() {
        let (trigger, shutdown) = shutdown_channel();
        assert!(!shutdown.is_triggered());
        let waiter = tokio::spawn({
            let s = shutdown.clone();
            async move { s.wait().await }
        });
        trigger.trigger();
        waiter.await.expect("waiter");
        assert!(shutdown.is_triggered());

        let (trigger, shutdown) = shutdown_channel();
        drop(trigger);
        shutdown.wait().await;
    }
}
