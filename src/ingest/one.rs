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
/// event's row itself is what the database refuses (its payload), the event is
/// recorded without its payload, so that even then its retry is a
/// `duplicate` rather than the same failure.
async fn reject(pool: &PgPool, event: &Event, poison: &db::Poison) -> Result<Receipt, sqlx::Error> {
    error::warn_refused(event, poison, "this event's data: recorded as rejected");
    let detail = poison.detail();
    let mut tx = db::begin(pool).await?;
    let written = match record_rejected(&mut tx, &Claim::of(event), &detail).await {
        Err(error) if db::Poison::of(&error).is_some() => {
            tx.rollback().await?;
            tx = db::begin(pool).await?;
            let mut detail = detail;
            detail["payload_stored"] = false.into();
            record_rejected(&mut tx, &Claim::without_payload(event), &detail).await?
        }
        written => written?,
    };
    if !written {
        tx.rollback().await?;
        return Ok(Receipt::of(Outcome::Duplicate, event));
    }
    tx.commit().await?;
    Ok(Receipt::of(Outcome::Rejected, event))
}

/// Claims and records `claim`'s event as `rejected`. `false`: it was
/// recorded already.
async fn record_rejected(
    conn: &mut sqlx::PgConnection,
    claim: &Claim<'_>,
    detail: &serde_json::Value,
) -> Result<bool, sqlx::Error> {
    let locks = [];
    if events::claim_and_lock(conn, std::slice::from_ref(claim), &locks, &[])
        .await?
        .claimed
        .is_empty()
    {
        return Ok(false);
    }
    let written = events::record_claimed(conn, &[(claim, Outcome::Rejected, detail)]).await?;
    Ok(written == 1)
}
