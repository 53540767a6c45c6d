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

use super::{error, locks};
use crate::effects::{self, Applied, Error};
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
/// released it (`receiver`): they are one provider's. Boxed, because an
/// event released can release others.
fn release_all<'a>(
    conn: &'a mut PgConnection,
    provider: &'a str,
    receiver: Option<&'a Arc<Receiver>>,
    keys: Vec<String>,
    by_event_id: &'a str,
) -> Boxed<'a, Vec<String>> {
    Box::pin(async move {
        let mut released = Vec::new();
        for waits_for in keys {
            for stored in events::take_deferred(conn, provider, &waits_for).await? {
                let waiting = Event::from_stored(
                    &stored.provider,
                    &stored.event_id,
                    &stored.event_type,
                    stored.payload.into(),
                );
                let mut result = match waiting {
                    Ok(waiting) => {
                        let unit = effects::decode(waiting.received_by(receiver.cloned()));
                        locks::claim_and_lock(conn, &[], &[&unit]).await?;
                        let mut result = apply_isolated(conn, &unit).await?;
                        let more = std::mem::take(&mut result.releases);
                        if !more.is_empty() {
                            let by = stored.event_id.as_str();
                            let more = release_all(conn, provider, receiver, more, by).await?;
                            if let Value::Object(detail) = &mut result.detail {
                                detail.insert("applied_deferred".into(), more.into());
                            }
                        }
                        result
                    }
                    Err(_) => Applied::rejected("the stored payload is no longer a readable event"),
                };
                if let Value::Object(detail) = &mut result.detail {
                    detail.insert("applied_by".into(), by_event_id.into());
                }
                events::record_outcome(
                    conn,
                    provider,
                    &stored.event_id,
                    result.outcome,
                    &result.detail,
                )
                .await?;
                released.push(stored.event_id);
            }
        }
        Ok(released)
    })
}

/// Applies a waiting event inside a savepoint: data the database refuses
/// ([`crate::db::Poison`]) rejects that event alone, never the one that
/// brought its dependency.
async fn apply_isolated(
    conn: &mut PgConnection,
    unit: &effects::Decoded,
) -> Result<Applied, Error> {
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
