//! Reading the ledger back: audits against the provider, and the checks of
//! `webhookd reconcile`.

use crate::db;
use sqlx::PgConnection;

use super::EntryKind;

/// A credit, with what was debited against it since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credited {
    pub source_ref: String,
    pub user_id: String,
    pub currency: String,
    pub amount_minor: i64,
    pub refunded_minor: i64,
}

/// `provider`'s credits keyed by one of `source_refs`, or made in
/// `[since, until)` (Unix seconds), each with its refunds' total.
pub async fn credits_for_audit(
    pool: &sqlx::PgPool,
    provider: &str,
    source_refs: &[String],
    since: i64,
    until: i64,
) -> Result<Vec<Credited>, sqlx::Error> {
    db::read_only(pool).all(sqlx::query_as!(
        Credited,
        r#"
        select c.source_ref, c.user_id, c.currency, c.amount_minor,
               coalesce((select -sum(r.amount_minor) from wallet_entries r
                         where r.provider = c.provider and r.kind = 'refund'
                           and r.parent_ref = c.source_ref), 0)::bigint as "refunded_minor!"
        from wallet_entries c
        where c.provider = $1 and c.kind = 'credit'
          and (c.source_ref = any($2::text[])
               or (c.created_at >= to_timestamp($3::bigint) and c.created_at < to_timestamp($4::bigint)))
        "#,
        provider,
        source_refs,
        since,
        until,
    )).await
}

/// Which of `source_refs` have an entry of `kind` under `provider`.
pub async fn existing(
    pool: &sqlx::PgPool,
    provider: &str,
    kind: EntryKind,
    source_refs: &[String],
) -> Result<std::collections::HashSet<String>, sqlx::Error> {
    let found = db::read_only(pool).all(sqlx::query!(
        r#"
        select source_ref from wallet_entries
        where provider = $1 and kind = $2 and source_ref = any($3::text[])
        "#,
        provider,
        kind.as_str(),
        source_refs,
    ));
    Ok(found.await?.into_iter().map(|row| row.source_ref).collect())
}

/// A wallet whose balance differs from the sum of its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub user_id: String,
    pub currency: String,
    pub balance_minor: i64,
    pub entries_minor: i64,
}

/// Every wallet whose balance is not the sum of its entries (none, normally).
pub async fn mismatches(conn: &mut PgConnection) -> Result<Vec<Mismatch>, sqlx::Error> {
    sqlx::query_as!(
        Mismatch,
        r#"
        select w.user_id, w.currency, w.balance_minor,
               coalesce(e.total, 0)::bigint as "entries_minor!"
        from wallets w
        left join (
            select user_id, currency, sum(amount_minor) as total
            from wallet_entries group by user_id, currency
        ) e using (user_id, currency)
        where w.balance_minor <> coalesce(e.total, 0)
        order by w.user_id, w.currency
        "#
    )
    .fetch_all(conn)
    .await
}

/// Entries newer than `since` (Unix seconds) whose event is not recorded:
/// within the retention window every entry must have one.
pub async fn orphan_entries(
    conn: &mut PgConnection,
    since: f64,
) -> Result<Vec<(i64, String, String)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select w.id, w.provider, w.event_id
        from wallet_entries w
        where w.created_at >= to_timestamp($1::float8)
          and not exists (select 1 from processed_events e
                          where e.provider = w.provider and e.event_id = w.event_id)
        order by w.id
        "#,
        since,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.id, r.provider, r.event_id))
        .collect())
}
