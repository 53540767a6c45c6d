//! Reading and pruning the recorded events.

use crate::db;
use serde_json::Value;
use sqlx::PgPool;

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
    db::read_only(pool).optional(sqlx::query_as!(
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
    )).await
}

/// A stored event as a page shows it: the text of its detail and payload
/// only up to `chars` characters each, beside their whole lengths in bytes,
/// so that showing a large payload reads only what is shown.
#[derive(Debug, Clone)]
pub struct Preview {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub outcome: String,
    pub detail_head: String,
    pub detail_bytes: i32,
    pub payload_head: String,
    pub payload_bytes: i32,
    pub provider_created_at: Option<String>,
    pub received_at: String,
    pub received_via: String,
}

pub async fn preview(
    pool: &PgPool,
    provider: &str,
    event_id: &str,
    chars: i32,
) -> Result<Option<Preview>, sqlx::Error> {
    db::read_only(pool).optional(sqlx::query_as!(
        Preview,
        r#"
        select provider, event_id, event_type, outcome,
               left(detail::text, $3) as "detail_head!", octet_length(detail::text) as "detail_bytes!",
               left(payload::text, $3) as "payload_head!", octet_length(payload::text) as "payload_bytes!",
               to_char(provider_created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as provider_created_at,
               to_char(received_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as "received_at!",
               received_via
        from processed_events
        where provider = $1 and event_id = $2
        "#,
        provider,
        event_id,
        chars,
    )).await
}

/// Deletes up to `batch` events received before `cutoff` (Unix seconds),
/// skipping rows other transactions hold, so it never waits on ingest.
/// Deferred events are kept (they still wait for their dependency), and so
/// are events whose ledger entry is newer than the cutoff (applied late), so
/// that `reconcile` finds every young entry's event.
pub async fn prune_batch(pool: &PgPool, cutoff: f64, batch: i64) -> Result<u64, sqlx::Error> {
    let mut tx = db::begin(pool).await?;
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
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(result.rows_affected())
}
