//! All outbox SQL.

use serde_json::Value;
use sqlx::{PgConnection, PgPool};

/// Writes one outbox row for `topic` and notifies the drainer (delivered at
/// commit). The dedupe key is `{provider}:{event_id}`: an event writes at most
/// one row per topic. `None`: a row with this key (or, for `invoice.paid`, for
/// this invoice) already exists.
pub async fn enqueue(
    conn: &mut PgConnection,
    topic: &str,
    provider: &str,
    event_id: &str,
    payload: &Value,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with row as (
            insert into outbox (topic, dedupe_key, provider, event_id, payload)
            values ($1, $2 || ':' || $3, $2, $3, $4)
            on conflict do nothing
            returning id
        )
        select row.id from row, (select pg_notify($5, '')) as notify
        "#,
        topic,
        provider,
        event_id,
        payload,
        super::CHANNEL,
    )
    .fetch_optional(conn)
    .await
}

/// The event whose `invoice.paid` row announced this invoice, if any.
pub async fn invoice_paid_owner(
    conn: &mut PgConnection,
    provider: &str,
    invoice_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select event_id from outbox
        where topic = 'invoice.paid' and provider = $1 and payload ->> 'invoice_id' = $2
        "#,
        provider,
        invoice_id
    )
    .fetch_optional(conn)
    .await
}

// The drainer's statements: lease and record.
mod drain;
pub use drain::{Abandoned, Attempt, Budget, Lease, Leased, Settled, lease, record, record_many};

/// One row as `webhookd outbox list` shows it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub id: i64,
    pub topic: String,
    pub provider: String,
    pub event_id: String,
    pub attempts: i32,
    pub state: String,
    pub created_at: String,
    pub available_at: String,
    pub last_error: Option<String>,
}

/// Rows not delivered yet (pending or dead), or only the dead ones, oldest first.
pub async fn list(pool: &PgPool, dead_only: bool, limit: i64) -> Result<Vec<Listed>, sqlx::Error> {
    sqlx::query_as!(
        Listed,
        r#"
        select id, topic, provider, event_id, attempts,
               case when dead_at is not null then 'dead'
                    when locked_until > now() then 'leased'
                    else 'pending' end as "state!",
               to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as "created_at!",
               to_char(available_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as "available_at!",
               last_error
        from outbox
        where delivered_at is null and (dead_at is not null or not $1)
        order by id
        limit $2
        "#,
        dead_only,
        limit,
    )
    .fetch_all(pool)
    .await
}

/// Re-queues dead rows (`id`, or all of them with `None`) for a fresh set of
/// attempts; `attempts` keeps counting. Returns the ids re-queued.
pub async fn retry_dead(pool: &PgPool, id: Option<i64>) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        update outbox
        set dead_at = null, requeued_attempts = attempts, available_at = now(), locked_until = null
        where dead_at is not null and delivered_at is null and ($1::bigint is null or id = $1)
        returning id
        "#,
        id,
    )
    .fetch_all(pool)
    .await
}

/// Gauges for monitoring: rows waiting, the age of the oldest, rows dead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Depth {
    pub pending: i64,
    pub oldest_pending_secs: f64,
    pub dead: i64,
}

pub async fn depth(pool: &PgPool) -> Result<Depth, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select count(*) filter (where dead_at is null) as "pending!",
               coalesce(extract(epoch from now() - min(created_at) filter (where dead_at is null)), 0)::float8
                   as "oldest!",
               count(*) filter (where dead_at is not null) as "dead!"
        from outbox
        where delivered_at is null
        "#
    )
    .fetch_one(pool)
    .await?;
    Ok(Depth {
        pending: row.pending,
        oldest_pending_secs: row.oldest,
        dead: row.dead,
    })
}

/// Deletes up to `batch` rows delivered before `cutoff` (Unix seconds),
/// skipping locked rows. Dead rows are kept, and so are `invoice.paid` rows,
/// which carry that event's natural key (one announcement per invoice).
pub async fn prune_delivered_batch(
    pool: &PgPool,
    cutoff: f64,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let result = sqlx::query!(
        r#"
        delete from outbox
        where id in (
            select id from outbox
            where delivered_at < to_timestamp($1::float8) and topic <> 'invoice.paid'
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
