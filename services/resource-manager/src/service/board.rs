//! The latest decisions, kept for `cascade rm explain` (`GET /rm/explain` on the admin port
//! of the process that runs the manager).

use std::sync::{Arc, Mutex, PoisonError};

use cascade_core::Timestamp;

use crate::explain::render;
use crate::{Decision, ResourceManagerSettings};

/// Where the service loop posts each round of decisions. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Board(Arc<Mutex<Option<Posted>>>);

#[derive(Clone, Debug)]
struct Posted {
    at: Timestamp,
    decisions: Vec<Decision>,
    settings: ResourceManagerSettings,
}

impl Board {
    pub fn new() -> Board {
        Board::default()
    }

    /// The latest decisions as the table of [`render`], or a line saying none came yet.
    pub fn render(&self) -> String {
        match &*self.lock() {
            Some(posted) => render(&posted.decisions, &posted.settings, posted.at),
            None => "no decision yet: the first comes one resource_manager.interval after start\n"
                .to_owned(),
        }
    }

    /// The latest decisions and when they were made.
    pub fn latest(&self) -> Option<(Timestamp, Vec<Decision>)> {
        self.lock()
            .as_ref()
            .map(|posted| (posted.at, posted.decisions.clone()))
    }

    pub(crate) fn post(
        &self,
        at: Timestamp,
        decisions: Vec<Decision>,
        settings: &ResourceManagerSettings,
    ) {
        *self.lock() = Some(Posted {
            at,
            decisions,
            settings: settings.clone(),
        });
    }

    /// A panic while holding the lock left whole values behind (each write is one
    /// assignment), so a poisoned lock is still good to read.
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Posted>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
