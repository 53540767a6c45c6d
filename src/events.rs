//! The dedupe ledger (`processed_events`) and the events waiting for a
//! dependency (`deferred_events`): all of their SQL.

use serde_json::Value;
use sqlx::PgConnection;

use crate::effects::Outcome;
use crate::providers::VerifiedEvent;

/// Claims `(provider, event_id)`. `false`: the event id is already recorded
/// (a concurrent claim waits on the primary key until the first commits or
/// rolls back, so exactly one delivery wins).
pub async fn claim(conn: &mut PgConnection, event: &VerifiedEvent) -> Result<bool, sqlx::Error> {
    // Parsed as JSON before it got here, so this cannot fail in practice.
    let payload = event
        .stored_payload()
        .map_err(|e| sqlx::Error::Decode(e.into()))?;
    let result = sqlx::query!(
        r#"
        insert into processed_events
            (provider, event_id, event_type, outcome, payload, provider_created_at)
        values ($1, $2, $3, 'pending', ($4::text)::jsonb, to_timestamp($5::bigint))
        on conflict (provider, event_id) do nothing
        "#,
        event.provider(),
        event.event_id(),
        event.event_type(),
        payload,
        event.created(),
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}

pub async fn record_outcome(
    conn: &mut PgConnection,
    provider: &str,
    event_id: &str,
    outcome: Outcome,
    detail: &Value,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        update processed_events set outcome = $3, detail = $4
        where provider = $1 and event_id = $2
        "#,
        provider,
        event_id,
        outcome.as_str(),
        detail,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Parks an event until `waits_for` (the key of its dependency) is applied.
pub async fn defer(
    conn: &mut PgConnection,
    provider: &str,
    event_id: &str,
    waits_for: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        insert into deferred_events (provider, event_id, waits_for)
        values ($1, $2, $3)
        on conflict (provider, event_id) do update set waits_for = excluded.waits_for
        "#,
        provider,
        event_id,
        waits_for
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A stored event, as it was received.
#[derive(Debug)]
pub struct StoredEvent {
    pub provider: String,
    pub event_id: String,
    pub payload: String,
}

/// Removes and returns the events waiting for `waits_for`, oldest event first.
pub async fn take_deferred(
    conn: &mut PgConnection,
    provider: &str,
    waits_for: &str,
) -> Result<Vec<StoredEvent>, sqlx::Error> {
    sqlx::query_as!(
        StoredEvent,
        r#"
        with taken as (
            delete from deferred_events
            where provider = $1 and waits_for = $2
            returning provider, event_id
        )
        select e.provider, e.event_id, e.payload::text as "payload!"
        from taken join processed_events e using (provider, event_id)
        order by e.provider_created_at nulls first, e.event_id
        "#,
        provider,
        waits_for
    )
    .fetch_all(conn)
    .await
}
