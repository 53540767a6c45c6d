//! Payment rows: one per provider payment (a Stripe charge). They only move
//! forward: `refunded_minor` only grows and the status never goes back
//! (`payment_status_rank` in the schema).

use crate::db::{self, Timestamp};
use sqlx::PgConnection;

#[derive(Debug)]
pub struct Payment<'a> {
    pub provider: &'a str,
    pub payment_id: &'a str,
    /// The payment's parent: a Stripe PaymentIntent.
    pub payment_ref: Option<&'a str>,
    pub user_id: Option<&'a str>,
    pub amount_minor: i64,
    pub currency: &'a str,
    pub status: &'a str,
    pub refunded_minor: i64,
    /// Unix seconds.
    pub created: Option<i64>,
}

/// What [`upsert`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Inserted or merged. `receipt_owner`: the event that announced the
    /// payment itself, if any did.
    Recorded { receipt_owner: Option<String> },
    /// The stored payment has another amount or currency: nothing changed.
    Differs,
}

/// The `rejected` reason of an event whose payment [`Recorded::Differs`].
pub const DIFFERS: &str = "the payment was recorded with another amount or currency";

/// Records the payment, merging with what is stored: `refunded_minor` only
/// grows (never past the amount) and the status only moves forward. A
/// payment whose amount or currency differs from the stored one changes
/// nothing ([`Recorded::Differs`]). `receipt_event_id` is the event that
/// announces the payment itself; the first one to do so keeps it.
pub async fn upsert(
    conn: &mut PgConnection,
    payment: &Payment<'_>,
    receipt_event_id: Option<&str>,
) -> Result<Recorded, sqlx::Error> {
    let mut recorded = upsert_many(conn, &[(payment, receipt_event_id)]).await?;
    Ok(recorded.pop().unwrap_or(Recorded::Differs))
}

/// [`upsert`] of each payment, in order, with its receipt's event: one
/// statement when no two are one payment, else one after another.
pub async fn upsert_many<'a>(
    conn: &mut PgConnection,
    payments: &[(&Payment<'a>, Option<&'a str>)],
) -> Result<Vec<Recorded>, sqlx::Error> {
    if payments.is_empty() {
        return Ok(Vec::new());
    }
    let mut recorded = Vec::with_capacity(payments.len());
    for run in db::distinct_runs(payments, |(p, _)| (p.provider, p.payment_id)) {
        recorded.extend(merge(conn, run).await?);
    }
    Ok(recorded)
}

/// [`upsert_many`] of distinct payments, in one statement.
async fn merge<'a>(
    conn: &mut PgConnection,
    payments: &[(&Payment<'a>, Option<&'a str>)],
) -> Result<Vec<Recorded>, sqlx::Error> {
    let column =
        |f: fn(&Payment<'a>) -> &'a str| payments.iter().map(|(p, _)| f(p)).collect::<Vec<_>>();
    let optional = |f: fn(&Payment<'a>) -> Option<&'a str>| {
        payments.iter().map(|(p, _)| f(p)).collect::<Vec<_>>()
    };
    let number =
        |f: fn(&Payment<'a>) -> i64| payments.iter().map(|(p, _)| f(p)).collect::<Vec<_>>();
    let created: Vec<Option<i64>> = payments.iter().map(|(p, _)| p.created).collect();
    let receipts: Vec<Option<&str>> = payments.iter().map(|(_, r)| *r).collect();
    let rows = sqlx::query!(
        r#"
        insert into payments as p
            (provider, payment_id, payment_ref, user_id, amount_minor, currency, status,
             refunded_minor, provider_created_at, event_id)
        select provider, payment_id, payment_ref, user_id, amount_minor, currency, status,
               least(refunded_minor, amount_minor), to_timestamp(created), event_id
        from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[],
                    $7::text[], $8::bigint[], $9::bigint[], $10::text[])
            as input (provider, payment_id, payment_ref, user_id, amount_minor, currency, status,
                      refunded_minor, created, event_id)
        on conflict (provider, payment_id) do update set
            payment_ref = coalesce(p.payment_ref, excluded.payment_ref),
            user_id = coalesce(p.user_id, excluded.user_id),
            -- capped by the amount: also mends a row written before that check
            refunded_minor = least(greatest(p.refunded_minor, excluded.refunded_minor), p.amount_minor),
            status = case
                when payment_status_rank(excluded.status) > payment_status_rank(p.status)
                then excluded.status else p.status end,
            provider_created_at = coalesce(p.provider_created_at, excluded.provider_created_at),
            event_id = coalesce(p.event_id, excluded.event_id),
            updated_at = now()
        where p.amount_minor = excluded.amount_minor and p.currency = excluded.currency
        returning provider, payment_id, event_id
        "#,
        &column(|p| p.provider) as &[&str],
        &column(|p| p.payment_id) as &[&str],
        &optional(|p| p.payment_ref) as &[Option<&str>],
        &optional(|p| p.user_id) as &[Option<&str>],
        &number(|p| p.amount_minor),
        &column(|p| p.currency) as &[&str],
        &column(|p| p.status) as &[&str],
        &number(|p| p.refunded_minor),
        &created as &[Option<i64>],
        &receipts as &[Option<&str>],
    )
    .fetch_all(conn)
    .await?;
    Ok(payments
        .iter()
        .map(|(p, _)| {
            match rows
                .iter()
                .find(|row| row.provider == p.provider && row.payment_id == p.payment_id)
            {
                Some(row) => Recorded::Recorded {
                    receipt_owner: row.event_id.clone(),
                },
                None => Recorded::Differs,
            }
        })
        .collect())
}

/// A payment row as the console shows it.
#[derive(Debug, Clone)]
pub struct Row {
    pub provider: String,
    pub payment_id: String,
    pub user_id: Option<String>,
    pub amount_minor: i64,
    pub currency: String,
    pub status: String,
    pub refunded_minor: i64,
    /// The event that recorded the payment itself.
    pub event_id: Option<String>,
    pub updated_at: Timestamp,
}

/// The user's payments, newest first, up to `limit`.
pub async fn of_user(
    pool: &sqlx::PgPool,
    user_id: &str,
    limit: i64,
) -> Result<Vec<Row>, sqlx::Error> {
    db::read_only(pool).all(sqlx::query_as!(
        Row,
        r#"
        select provider, payment_id, user_id, amount_minor, currency, status, refunded_minor, event_id,
               updated_at as "updated_at!: Timestamp"
        from payments where user_id = $1
        order by updated_at desc, provider, payment_id
        limit $2
        "#,
        user_id,
        limit,
    )).await
}

/// The payments an event recorded.
pub async fn of_event(
    pool: &sqlx::PgPool,
    provider: &str,
    event_id: &str,
) -> Result<Vec<Row>, sqlx::Error> {
    db::read_only(pool).all(sqlx::query_as!(
        Row,
        r#"
        select provider, payment_id, user_id, amount_minor, currency, status, refunded_minor, event_id,
               updated_at as "updated_at!: Timestamp"
        from payments where provider = $1 and event_id = $2
        order by payment_id
        "#,
        provider,
        event_id,
    )).await
}
