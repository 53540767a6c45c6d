//! Which event does what: the effects tables of DESIGN.md, one module per
//! provider. Effects run inside the ingest transaction and take
//! `&mut PgConnection`; they never open, commit or roll back a transaction.

pub mod stripe;

use serde::Serialize;
use serde_json::{Value, json};
use sqlx::PgConnection;

use crate::providers::VerifiedEvent;

/// What became of one delivery. Stored in `processed_events.outcome` and
/// answered in the response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Effects applied.
    Processed,
    /// This event id was seen before; nothing new was written.
    Duplicate,
    /// Nothing to do: an unhandled type, or an effect another event already owns.
    Ignored,
    /// Older than the stored state; nothing changed.
    Superseded,
    /// Waits for an event it depends on; applied when that one arrives.
    Deferred,
    /// The payload can never be applied (reason in `detail`).
    Rejected,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Processed => "processed",
            Outcome::Duplicate => "duplicate",
            Outcome::Ignored => "ignored",
            Outcome::Superseded => "superseded",
            Outcome::Deferred => "deferred",
            Outcome::Rejected => "rejected",
        }
    }
}

/// The result of applying one event: its outcome and the `detail` stored with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub outcome: Outcome,
    pub detail: Value,
}

impl Applied {
    pub fn processed(detail: Value) -> Self {
        Applied {
            outcome: Outcome::Processed,
            detail,
        }
    }

    pub fn ignored(reason: &str) -> Self {
        Applied {
            outcome: Outcome::Ignored,
            detail: json!({ "reason": reason }),
        }
    }

    /// The effect's natural key belongs to another event.
    pub fn owned_by(reason: &str, owner_event_id: &str) -> Self {
        Applied {
            outcome: Outcome::Ignored,
            detail: json!({ "reason": reason, "owner_event_id": owner_event_id }),
        }
    }

    pub fn superseded(detail: Value) -> Self {
        Applied {
            outcome: Outcome::Superseded,
            detail,
        }
    }

    pub fn deferred(waits_for: &str) -> Self {
        Applied {
            outcome: Outcome::Deferred,
            detail: json!({ "waits_for": waits_for }),
        }
    }

    pub fn rejected(reason: impl Into<String>) -> Self {
        Applied {
            outcome: Outcome::Rejected,
            detail: json!({ "reason": reason.into() }),
        }
    }
}

/// Applies `event`'s effects for its provider.
pub async fn apply(conn: &mut PgConnection, event: &VerifiedEvent) -> Result<Applied, sqlx::Error> {
    match event.provider() {
        stripe::PROVIDER => stripe::apply(conn, event).await,
        _ => Ok(Applied::ignored("no effects for this provider")),
    }
}
