//! The dedupe ledger (`processed_events`) and the events waiting for a
//! dependency (`deferred_events`): all of their SQL.

use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use crate::effects::Outcome;
use crate::providers::{VerifiedEvent, Via};

/// Claims `(provider, event_id)`. `false`: the event id is already recorded
/// (a concurrent claim waits on the primary key until the first commits or
/// rolls back, so exactly one delivery wins).
pub async fn claim(conn: &mut PgConnection, event: &VerifiedEvent) -> Result<bool, sqlx::Error> {
    // Parsed as JSON before it got here, so this cannot fail in practice.
    let payload = event
        .stored_payload()
        .map_err(|e| sqlx::Error::Decode(e.into()))?;
    claim_storing(conn, event, payload).await
}

/// What [`claim_without_payload`] stores in place of the payload.
pub const PAYLOAD_NOT_STORED: &str =
    r#"{"webhookd": "payload not stored: the database refused it"}"#;

/// [`claim`], storing [`PAYLOAD_NOT_STORED`]: for an event whose payload
/// is what the database refuses, so that it is still recorded once.
pub async fn claim_without_payload(
    conn: &mut PgConnection,
    event: &VerifiedEvent,
) -> Result<bool, sqlx::Error> {
    claim_storing(conn, event, PAYLOAD_NOT_STORED).await
}

async fn claim_storing(
    conn: &mut PgConnection,
    event: &VerifiedEvent,
    payload: &str,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query!(
        r#"
        insert into processed_events
            (provider, event_id, event_type, outcome, payload, provider_created_at, received_via)
        values ($1, $2, $3, 'pending', ($4::text)::jsonb, to_timestamp($5::bigint), $6)
        on conflict (provider, event_id) do nothing
        "#,
        event.provider(),
        event.event_id(),
        event.event_type(),
        payload,
        event.created(),
        event.via().as_str(),
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Claims an event webhookd itself raises (a sweep's `webhookd.delivery_gap`),
/// recorded as arriving by sweep. `false`: it was recorded already.
pub async fn claim_own(
    conn: &mut PgConnection,
    provider: &str,
    event_id: &str,
    event_type: &str,
    payload: &Value,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query!(
        r#"
        insert into processed_events
            (provider, event_id, event_type, outcome, payload, received_via)
        values ($1, $2, $3, 'pending', $4, 'sweep')
        on conflict (provider, event_id) do nothing
        "#,
        provider,
        event_id,
        event_type,
        payload,
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Records `event` as `imported`, without effects: an earlier handler
/// applied it, so a redelivery or a sweep of it must be a duplicate.
/// `false`: it was recorded already.
pub async fn import(conn: &mut PgConnection, event: &VerifiedEvent) -> Result<bool, sqlx::Error> {
    let payload = event
        .stored_payload()
        .map_err(|e| sqlx::Error::Decode(e.into()))?;
    let result = sqlx::query!(
        r#"
        insert into processed_events
            (provider, event_id, event_type, outcome, detail, payload, provider_created_at, received_via)
        values ($1, $2, $3, 'imported', '{"reason": "applied before webhookd, recorded by webhookd import"}',
                ($4::text)::jsonb, to_timestamp($5::bigint), $6)
        on conflict (provider, event_id) do nothing
        "#,
        event.provider(),
        event.event_id(),
        event.event_type(),
        payload,
        event.created(),
        Via::Import.as_str(),
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// An event id to import from a file, with what else the file says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportRow {
    pub event_id: String,
    pub event_type: String,
    /// When the earlier handler processed it (Unix seconds): its
    /// `received_at`, so that retention counts from then.
    pub processed_at: Option<i64>,
}

/// What [`import`] stores as the payload of an event imported from a file.
pub const NO_PAYLOAD: &str = r#"{"webhookd": "imported from a file: no payload"}"#;

/// Records each row as `imported` under `provider`, without effects or
/// payload, in one statement. Returns how many were new.
pub async fn import_rows(
    pool: &PgPool,
    provider: &str,
    rows: &[ImportRow],
) -> Result<u64, sqlx::Error> {
    let ids: Vec<String> = rows.iter().map(|r| r.event_id.clone()).collect();
    let types: Vec<String> = rows.iter().map(|r| r.event_type.clone()).collect();
    let at: Vec<Option<i64>> = rows.iter().map(|r| r.processed_at).collect();
    let result = sqlx::query!(
        r#"
        insert into processed_events
            (provider, event_id, event_type, outcome, detail, payload, received_at, received_via)
        select $1, event_id, event_type, 'imported',
               '{"reason": "applied before webhookd, recorded by webhookd import"}',
               ($4::text)::jsonb, coalesce(to_timestamp(processed_at), now()), $6
        from unnest($2::text[], $3::text[], $5::bigint[]) as input (event_id, event_type, processed_at)
        order by event_id
        on conflict (provider, event_id) do nothing
        "#,
        provider,
        &ids,
        &types,
        NO_PAYLOAD,
        &at as &[Option<i64>],
        Via::Import.as_str(),
    )
    .execute(pool)
    .await?;
    Ok(result.rows_affected())
}

/// Which of `event_ids` are recorded under `provider` (a dry run's "already
/// seen").
pub async fn recorded(
    pool: &PgPool,
    provider: &str,
    event_ids: &[String],
) -> Result<std::collections::HashSet<String>, sqlx::Error> {
    let found = sqlx::query_scalar!(
        r#"
        select event_id from processed_events
        where provider = $1 and event_id = any($2::text[])
        "#,
        provider,
        event_ids,
    )
    .fetch_all(pool)
    .await?;
    Ok(found.into_iter().collect())
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
    pub event_type: String,
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
        select e.provider, e.event_id, e.event_type, e.payload::text as "payload!"
        from taken join processed_events e using (provider, event_id)
        order by e.provider_created_at nulls first, e.event_id
        "#,
        provider,
        waits_for
    )
    .fetch_all(conn)
    .await
}

/// One line of `webhookd events list`.
#[derive(Debug, Clone)]
pub struct Summary {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub outcome: String,
    pub received_at: String,
    /// `webhook`, `sweep` or `import`.
    pub received_via: String,
}

/// The newest events first, optionally of one provider.
pub async fn list(
    pool: &PgPool,
    provider: Option<&str>,
    limit: i64,
) -> Result<Vec<Summary>, sqlx::Error> {
    sqlx::query_as!(
        Summary,
        r#"
        select provider, event_id, event_type, outcome,
               to_char(received_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as "received_at!",
               received_via
        from processed_events
        where $1::text is null or provider = $1
        order by received_at desc
        limit $2
        "#,
        provider,
        limit,
    )
    .fetch_all(pool)
    .await
}

/// A stored event with everything kept about it.
#[derive(Debug, Clone)]
pub struct Stored {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub outcome: String,
    pub detail: Value,
    pub payload: String,
    pub provider_created_at: Option<String>,
    pub received_at: String,
    pub received_via: String,
}

pub async fn find(
    pool: &PgPool,
    provider: &str,
    event_id: &str,
) -> Result<Option<Stored>, sqlx::Error> {
    sqlx::query_as!(
        Stored,
        r#"
        select provider, event_id, event_type, outcome, detail, payload::text as "payload!",
               to_char(provider_created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as provider_created_at,
               to_char(received_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as "received_at!",
               received_via
        from processed_events
        where provider = $1 and event_id = $2
        "#,
        provider,
        event_id,
    )
    .fetch_optional(pool)
    .await
}

/// Deletes up to `batch` events received before `cutoff` (Unix seconds),
/// skipping rows other transactions hold, so it never waits on ingest.
/// Deferred events are kept (they still wait for their dependency), and so
/// are events whose ledger entry is newer than the cutoff (applied late), so
/// that `reconcile` finds every young entry's event.
pub async fn prune_batch(pool: &PgPool, cutoff: f64, batch: i64) -> Result<u64, sqlx::Error> {
    let result = sqlx::query!(
        r#"
        delete from processed_events
        where (provider, event_id) in (
            select provider, event_id from processed_events
            where received_at < to_timestamp($1::float8) and outcome <> 'deferred'
              -- an event applied late (deferred) keeps its row as long as its entry is young
              and not exists (select 1 from wallet_entries w
                              where w.provider = processed_events.provider
                                and w.event_id = processed_events.event_id
                                and w.created_at >= to_timestamp($1::float8))
            limit $2
            for update skip locked
        )
        "#,
        cutoff,
        batch,
    )
    .execute(pool)
    .await?;
    Ok(result.rows_affected())
}
