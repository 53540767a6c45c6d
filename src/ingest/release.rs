//! Deferred events, released: an event that waits for another's effect (a
//! refund for its payment's credit) is stored `deferred` under the key it
//! waits for; the event whose effect brings that key says so
//! ([`Applied::releases`]), and the engine applies the waiting ones right
//! after it, oldest first, in the same transaction. One mechanism for
//! every kind of wait.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;
use sqlx::PgConnection;

use super::error;
use crate::effects::{self, Applied, Error};
use crate::events;
use crate::providers::Event;

/// Applies what `applied` (the result of `event`) releases, if anything,
/// listing their ids in its `applied_deferred`.
pub(super) async fn waiting(
    conn: &mut PgConnection,
    event: &Event,
    applied: &mut Applied,
) -> Result<(), Error> {
    let Some(key) = applied.releases.take() else {
        return Ok(());
    };
    let released = release(conn, event.provider(), key, event.event_id().to_owned()).await?;
    if let Value::Object(detail) = &mut applied.detail {
        detail.insert("applied_deferred".into(), released.into());
    }
    Ok(())
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// Applies, oldest first, the events deferred until `waits_for` existed,
/// recording each one's outcome with `applied_by`. Returns their event
/// ids. Boxed, because an event released can release others.
fn release<'a>(
    conn: &'a mut PgConnection,
    provider: &str,
    waits_for: String,
    by_event_id: String,
) -> Boxed<'a, Vec<String>> {
    let provider = provider.to_owned();
    Box::pin(async move {
        let mut released = Vec::new();
        for stored in events::take_deferred(conn, &provider, &waits_for).await? {
            let waiting = Event::from_stored(
                &stored.provider,
                &stored.event_id,
                &stored.event_type,
                stored.payload.into(),
            );
            let mut result = match waiting {
                Ok(waiting) => {
                    let unit = effects::decode(waiting);
                    let mut result = apply_isolated(conn, &unit).await?;
                    if let Some(key) = result.releases.take() {
                        let by = stored.event_id.clone();
                        let more = release(conn, &provider, key, by).await?;
                        if let Value::Object(detail) = &mut result.detail {
                            detail.insert("applied_deferred".into(), more.into());
                        }
                    }
                    result
                }
                Err(_) => Applied::rejected("the stored payload is no longer a readable event"),
            };
            if let Value::Object(detail) = &mut result.detail {
                detail.insert("applied_by".into(), by_event_id.as_str().into());
            }
            events::record_outcome(
                conn,
                &provider,
                &stored.event_id,
                result.outcome,
                &result.detail,
            )
            .await?;
            released.push(stored.event_id);
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
    match effects::apply(&mut savepoint, unit).await {
        Ok(applied) => {
            savepoint.commit().await?;
            Ok(applied)
        }
        Err(error) => match error.poison() {
            Some(poison) => {
                savepoint.rollback().await?;
                let what = "a waiting event's data: recorded as rejected";
                error::warn_refused(unit.event(), &poison, what);
                Ok(Applied::refused(&poison))
            }
            None => Err(error),
        },
    }
}
