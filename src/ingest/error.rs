//! Why an event was not applied. Whatever the reason, nothing of it
//! committed, so its retry starts clean. The HTTP layer maps each to a
//! status; nothing here knows of HTTP.

use std::sync::Arc;

use crate::db::{self, Failure};
use crate::effects;
use crate::providers::Event;

/// Cheap to clone: a failed batch answers each of its events with it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The database failed the transaction, refused its data, or cannot be
    /// reached ([`Error::is_transient`] says whether a retry can succeed).
    #[error(transparent)]
    Database(Arc<sqlx::Error>),
    /// The process is shutting down: the batch dispatcher is gone, or
    /// stopped before this event's batch ran.
    #[error("webhookd is shutting down")]
    ShuttingDown,
    /// The event's request gave up before its batch committed; the event
    /// was taken out of the batch and nobody reads this answer.
    #[error("the request gave up before its batch committed")]
    Abandoned,
    /// What cannot happen did: a bug in webhookd, never the input's fault.
    #[error("invariant broken: {0}")]
    Invariant(&'static str),
}

/// Every database error of ingest comes through here, and is looked at
/// once for a transaction pooler nobody configured (`db::detection`).
impl From<sqlx::Error> for Error {
    fn from(error: sqlx::Error) -> Self {
        db::detection::notice(&error);
        Error::Database(Arc::new(error))
    }
}

impl From<effects::Error> for Error {
    fn from(error: effects::Error) -> Self {
        match error {
            effects::Error::Database(error) => error.into(),
            effects::Error::Invariant(what) => Error::Invariant(what),
        }
    }
}

impl Error {
    /// Whether a retry of the same delivery can succeed: the database is
    /// briefly unavailable or lost a race, or this process is stopping and
    /// another (or this one, restarted) will take it.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Database(error) => db::classify(error) == Failure::Transient,
            Error::ShuttingDown | Error::Abandoned => true,
            Error::Invariant(_) => false,
        }
    }

    /// The database's refusal of this event's data, when that is the error:
    /// it would fail the same way on every retry.
    pub fn poison(&self) -> Option<db::Poison> {
        match self {
            Error::Database(error) => db::Poison::of(error),
            _ => None,
        }
    }

    /// Whether the database cannot be reached at all (rather than that one
    /// transaction failed): applying the events one by one is futile.
    pub fn is_connection_failure(&self) -> bool {
        match self {
            Error::Database(error) => db::is_connection_failure(error),
            Error::ShuttingDown => true,
            Error::Abandoned | Error::Invariant(_) => false,
        }
    }
}

/// Logs that the database refuses `event`'s data (`poison`), and what
/// became of it.
pub(super) fn warn_refused(event: &Event, poison: &db::Poison, what: &str) {
    tracing::warn!(
        provider = event.provider(),
        event_id = event.event_id(),
        sqlstate = %poison.sqlstate,
        constraint = poison.constraint.as_deref(),
        "the database refuses {what}"
    );
}
