//! All outbox SQL.

use serde_json::Value;
use sqlx::PgConnection;

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
