//! Deferred events, released: an event that waits for another's effect (a
//! refund for its payment's credit) is stored `deferred` under the key it
//! waits for; the event whose effect brings that key says so
//! ([`Applied::releases`]), and the engine applies the waiting ones right
//! after it, oldest first, in the same transaction, each under its own
//! plan's locks ([`locks`]): a refund racing a payment released by its
//! customer's owner serialises on the payment's credit key as it would
//! with the payment itself. One mechanism for every kind of wait.
//!
//! Those locks come after the releasing event's, outside the global order
//! (what waits is only known once its key is held). Two transactions
//! that each hold what the other's released event needs are a deadlock
//! Postgres detects: one of them fails whole and is retried (a batch
//! falls back to one event at a time; a lone event is answered 503 and
//! redelivered). Nothing is lost or applied twice either way.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use sqlx::PgConnection;

use super::schedule::Schedule;
use super::{error, locks};
use crate::effects::{self, Applied, Decoded, Error};
use crate::providers::{Event, Receiver};
use crate::{events, outbox};

/// Applies what `applied` (the result of `event`) releases, if anything,
/// listing their ids in its `applied_deferred`: the events waiting for its
/// keys, of which `waiting` are those any event waits for (read under the
/// keys' locks).
pub(super) async fn waiting(
    conn: &mut PgConnection,
    event: &Event,
    applied: &mut Applied,
    waiting: &HashSet<String>,
) -> Result<(), Error> {
    let mut keys = std::mem::take(&mut applied.releases);
    if keys.is_empty() {
        return Ok(());
    }
    keys.retain(|key| waiting.contains(key));
    let by = event.event_id();
    let released = release_all(conn, event.provider(), event.receiver(), keys, by).await?;
    if let Value::Object(detail) = &mut applied.detail {
        detail.insert("applied_deferred".into(), released.into());
    }
    Ok(())
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// Applies, oldest first, the events deferred until each of `keys`
/// existed, recording each one's outcome with `applied_by`. Returns their
/// event ids. A waiting event is read by the owner rule of the source that
/// released it (`receiver`): they are one provider's. Those of a key are
/// taken in one statement, locked in one sweep, and applied each kind
/// together as far as their order allows ([`apply_released`]); what one
/// of them releases applies right after it. Boxed, because an event
/// released can release others.
fn release_all<'a>(
    conn: &'a mut PgConnection,
    provider: &'a str,
    receiver: Option<&'a Arc<Receiver>>,
    keys: Vec<String>,
    by_event_id: &'a str,
) -> Boxed<'a, Vec<String>> {
    Box::pin(async move {
        let mut released = Vec::new();
        // Key by key: an event applied for one key may wait again for a
        // later one, and is then released with it.
        for waits_for in &keys {
            let stored = events::take_deferred(conn, provider, waits_for).await?;
            if stored.is_empty() {
                continue;
            }
            let units: Vec<Option<Decoded>> = stored
                .iter()
                .map(|stored| {
                    let waiting = Event::from_stored(
                        &stored.provider,
                        &stored.event_id,
                        &stored.event_type,
                        stored.payload.clone().into(),
                    );
                    let waiting = match (waiting.ok()?, stored.account.as_deref()) {
                        // An account sweep's event keeps the account it
                        // was listed for.
                        (waiting, Some(account)) => waiting.listed_for(account),
                        (waiting, None) => waiting,
                    };
                    let waiting = waiting.received_by(receiver.cloned());
                    Some(effects::decode(waiting))
                })
                .collect();
            let readable: Vec<&Decoded> = units.iter().flatten().collect();
            locks::claim_and_lock(conn, &[], &readable).await?;
            let mut applied = apply_released(conn, &readable).await?.into_iter();
            let mut results = Vec::with_capacity(units.len());
            for unit in &units {
                let mut result = match unit {
                    Some(_) => applied
                        .next()
                        .ok_or(Error::Invariant("a released event has no outcome"))?,
                    None => Applied::rejected("the stored payload is no longer a readable event"),
                };
                if let Value::Object(detail) = &mut result.detail {
                    detail.insert("applied_by".into(), by_event_id.into());
                }
                results.push(result);
            }
            let outcomes: Vec<events::Recorded<'_>> = stored
                .iter()
                .zip(&results)
                .map(|(stored, result)| events::Recorded {
                    provider,
                    event_id: &stored.event_id,
                    outcome: result.outcome,
                    detail: &result.detail,
                })
                .collect();
            events::record_outcomes(conn, &outcomes).await?;
            released.extend(stored.into_iter().map(|stored| stored.event_id));
        }
        Ok(released)
    })
}

/// Applies released events (`units`, in order, their locks held) set by
/// set ([`effects::apply_set`]), the events one of them releases right
/// after it ([`release_all`]), each set inside a savepoint: data the
/// database refuses ([`crate::db::Poison`]) in a set applies that set's
/// first event alone, and a refusal of its own rejects that event alone,
/// never the one that brought its dependency.
async fn apply_released(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let schedule = Schedule::arrival(units);
    let mut applied: Vec<Applied> = Vec::with_capacity(units.len());
    while let Some((set, positions)) = schedule.next_set(applied.len()) {
        let rest = units
            .get(positions)
            .ok_or(Error::Invariant("a set runs past its events"))?;
        let done = match apply_set_isolated(conn, set, rest).await? {
            Some(done) if !done.is_empty() && done.len() <= rest.len() => done,
            Some(_) => {
                return Err(Error::Invariant(
                    "a set of events answered none or too many",
                ));
            }
            None => vec![apply_isolated(conn, rest[0]).await?],
        };
        for (unit, mut result) in rest.iter().zip(done) {
            let more = std::mem::take(&mut result.releases);
            if !more.is_empty() {
                let (provider, receiver) = (unit.event().provider(), unit.event().receiver());
                let by = unit.event().event_id();
                let more = release_all(conn, provider, receiver, more, by).await?;
                if let Value::Object(detail) = &mut result.detail {
                    detail.insert("applied_deferred".into(), more.into());
                }
            }
            applied.push(result);
        }
    }
    Ok(applied)
}

/// [`effects::apply_set`] inside a savepoint; `None`, rolled back, when the
/// database refused the data of one of its events.
async fn apply_set_isolated(
    conn: &mut PgConnection,
    set: effects::Set,
    units: &[&Decoded],
) -> Result<Option<Vec<Applied>>, Error> {
    let mut savepoint = sqlx::Connection::begin(&mut *conn).await?;
    let handed = outbox::handoff::mark();
    match effects::apply_set(&mut savepoint, set, units).await {
        Ok(applied) => {
            savepoint.commit().await?;
            Ok(Some(applied))
        }
        Err(error) if error.poison().is_some() => {
            savepoint.rollback().await?;
            outbox::handoff::forget_since(handed);
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// Applies a waiting event inside a savepoint: data the database refuses
/// ([`crate::db::Poison`]) rejects that event alone, never the one that
/// brought its dependency.
async fn apply_isolated(conn: &mut PgConnection, unit: &Decoded) -> Result<Applied, Error> {
    let mut savepoint = sqlx::Connection::begin(&mut *conn).await?;
    let handed = outbox::handoff::mark();
    match effects::apply(&mut savepoint, unit).await {
        Ok(applied) => {
            savepoint.commit().await?;
            Ok(applied)
        }
        Err(error) => match error.poison() {
            Some(poison) => {
                savepoint.rollback().await?;
                outbox::handoff::forget_since(handed);
                let what = "a waiting event's data: recorded as rejected";
                error::warn_refused(unit.event(), &poison, what);
                Ok(Applied::refused(&poison))
            }
            None => Err(error),
        },
    }
}
