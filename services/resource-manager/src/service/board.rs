//! The latest decisions, kept for `cascade rm explain` (`GET /rm/explain` on the admin port
//! of the process that runs the manager).

use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use cascade_core::Timestamp;

use crate::explain::render;
use crate::{Decision, ResourceManagerSettings};

/// The admin path of the explanation table.
pub const EXPLAIN_PATH: &str = "/rm/explain";

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

    /// `GET /rm/explain`: [`Board::render`] as plain text (what `cascade rm explain` prints).
    pub fn router(&self) -> Router {
        let board = self.clone();
        Router::new().route(
            EXPLAIN_PATH,
            get(move || {
                let text = board.render();
                async move { ([(CONTENT_TYPE, "text/plain; charset=utf-8")], text) }
            }),
        )
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
