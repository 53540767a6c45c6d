//! One event in its own transaction: the engine's, plus what only one event
//! can do, recording data the database refuses as `rejected`.

use sqlx::PgPool;

use super::engine::{self, Wake};
use super::{Error, Receipt, error};
use crate::db;
use crate::effects::Decoded;
use crate::events::{self, Claim, Outcome};
use crate::providers::Event;

/// Applies `unit` in a transaction of its own, waking the drainer as `wake`
/// says.
///
/// Data the database refuses (a poison message, [`db::Poison`]) would fail
/// the same way on every retry, and the provider would retry it for days:
/// the event is then recorded `rejected` with the reason instead, in a
/// transaction of its own, so that its retry is a `duplicate`. Transient
/// failures stay errors (answered 503, retried).
pub(super) async fn apply(pool: &PgPool, unit: &Decoded, wake: &Wake) -> Result<Receipt, Error> {
    let committed = async {
        let prepared = engine::prepare(pool, &[unit], engine::BEGIN_ONE, wake).await?;
        prepared.commit(wake).await
    };
    match committed.await {
        Ok(outcomes) => {
            let outcome = outcomes
                .first()
                .copied()
                .ok_or(Error::Invariant("a committed event has no outcome"))?;
            Ok(Receipt::of(outcome, unit.event()))
        }
        Err(error) => match error.poison() {
            Some(poison) => Ok(reject(pool, unit.event(), &poison).await?),
            None => Err(error),
        },
    }
}

/// Records `event` as `rejected` for `poison`, without effects. When the
/// claim itself is what the database refuses (the payload), the event is
/// recorded without its payload, so that even then its retry is a
/// `duplicate` rather than the same failure.
async fn reject(pool: &PgPool, event: &Event, poison: &db::Poison) -> Result<Receipt, sqlx::Error> {
    error::warn_refused(event, poison, "this event's data: recorded as rejected");
    let mut tx = db::begin(pool).await?;
    let mut payload_stored = true;
    let claimed = match events::claim(&mut tx, Claim::of(event)).await {
        Err(error) if db::Poison::of(&error).is_some() => {
            tx.rollback().await?;
            tx = db::begin(pool).await?;
            payload_stored = false;
            events::claim(&mut tx, Claim::without_payload(event)).await?
        }
        claimed => claimed?,
    };
    if !claimed {
        tx.rollback().await?;
        return Ok(Receipt::of(Outcome::Duplicate, event));
    }
    let mut detail = poison.detail();
    if !payload_stored {
        detail["payload_stored"] = false.into();
    }
    events::record_outcome(
        &mut tx,
        event.provider(),
        event.event_id(),
        Outcome::Rejected,
        &detail,
    )
    .await?;
    tx.commit().await?;
    Ok(Receipt::of(Outcome::Rejected, event))
}
