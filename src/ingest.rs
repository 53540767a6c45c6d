//! THE transaction: claim the event id, apply its effects, write its outbox
//! rows, record its outcome, commit. Either all of it commits or none of it
//! does, so a failed delivery leaves nothing behind and its retry starts clean.

use serde::Serialize;
use sqlx::PgPool;

use crate::effects::{self, Outcome};
use crate::events;
use crate::providers::VerifiedEvent;

/// The answer to a delivery: `{"outcome": ..., "event_id": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    pub outcome: Outcome,
    pub event_id: String,
}

pub async fn ingest(pool: &PgPool, event: &VerifiedEvent) -> Result<Receipt, sqlx::Error> {
    let mut tx = pool.begin().await?;
    if !events::claim(&mut tx, event).await? {
        // Seen before (or just committed by a concurrent copy): nothing new.
        tx.rollback().await?;
        return Ok(receipt(Outcome::Duplicate, event));
    }
    let applied = effects::apply(&mut tx, event).await?;
    events::record_outcome(
        &mut tx,
        event.provider(),
        event.event_id(),
        applied.outcome,
        &applied.detail,
    )
    .await?;
    tx.commit().await?;
    Ok(receipt(applied.outcome, event))
}

fn receipt(outcome: Outcome, event: &VerifiedEvent) -> Receipt {
    Receipt {
        outcome,
        event_id: event.event_id().to_owned(),
    }
}
