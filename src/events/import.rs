//! Events recorded without effects: imported from an earlier handler.

use crate::db;
use sqlx::{PgConnection, PgPool};

use crate::providers::{Event, Via};

/// Records `event` as `imported`, without effects: an earlier handler
/// applied it, so a redelivery or a sweep of it must be a duplicate.
/// `false`: it was recorded already.
pub async fn import(conn: &mut PgConnection, event: &Event) -> Result<bool, sqlx::Error> {
    let payload = event.stored_payload();
    super::take_claims(&mut *conn, &[(event.provider(), event.event_id())]).await?;
    let result = sqlx::query!(
        r#"
        insert into processed_events
            (provider, event_id, event_type, outcome, detail, payload, provider_created_at, received_via)
        select $1, $2, $3, 'imported', '{"reason": "applied before webhookd, recorded by webhookd import"}',
               ($4::text)::jsonb, to_timestamp($5::bigint), $6
        where not exists (select from processed_events where provider = $1 and event_id = $2)
        on conflict do nothing
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

/// Most events claimed by one transaction of [`import_rows`]: each claim
/// is an advisory lock, and Postgres's lock table is shared and bounded
/// (`max_locks_per_transaction` × connections).
const CLAIMS_PER_TRANSACTION: usize = 500;

/// Records each row as `imported` under `provider`, without effects or
/// payload, claimed first, one transaction and statement a
/// [`CLAIMS_PER_TRANSACTION`]. Returns how many were new.
pub async fn import_rows(
    pool: &PgPool,
    provider: &str,
    rows: &[ImportRow],
) -> Result<u64, sqlx::Error> {
    let mut imported = 0;
    for chunk in rows.chunks(CLAIMS_PER_TRANSACTION) {
        imported += import_chunk(pool, provider, chunk).await?;
    }
    Ok(imported)
}

/// [`import_rows`] of at most [`CLAIMS_PER_TRANSACTION`] rows.
async fn import_chunk(
    pool: &PgPool,
    provider: &str,
    rows: &[ImportRow],
) -> Result<u64, sqlx::Error> {
    let ids: Vec<String> = rows.iter().map(|r| r.event_id.clone()).collect();
    let types: Vec<String> = rows.iter().map(|r| r.event_type.clone()).collect();
    let at: Vec<Option<i64>> = rows.iter().map(|r| r.processed_at).collect();
    let mut tx = db::begin(pool).await?;
    let claims: Vec<(&str, &str)> = ids.iter().map(|id| (provider, id.as_str())).collect();
    super::take_claims(&mut tx, &claims).await?;
    let result = sqlx::query!(
        r#"
        insert into processed_events
            (provider, event_id, event_type, outcome, detail, payload, received_at, received_via)
        select $1, event_id, event_type, 'imported',
               '{"reason": "applied before webhookd, recorded by webhookd import"}',
               ($4::text)::jsonb, coalesce(to_timestamp(processed_at), now()), $6
        from unnest($2::text[], $3::text[], $5::bigint[]) as input (event_id, event_type, processed_at)
        where not exists (select from processed_events e
                          where e.provider = $1 and e.event_id = input.event_id)
        order by event_id
        on conflict do nothing
        "#,
        provider,
        &ids,
        &types,
        NO_PAYLOAD,
        &at as &[Option<i64>],
        Via::Import.as_str(),
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(result.rows_affected())
}

/// Which of `event_ids` are recorded under `provider` (a dry run's "already
/// seen").
pub async fn recorded(
    pool: &PgPool,
    provider: &str,
    event_ids: &[String],
) -> Result<std::collections::HashSet<String>, sqlx::Error> {
    let found = db::read_only(pool).all(sqlx::query!(
        r#"
        select event_id from processed_events
        where provider = $1 and event_id = any($2::text[])
        "#,
        provider,
        event_ids,
    ));
    Ok(found.await?.into_iter().map(|row| row.event_id).collect())
}
