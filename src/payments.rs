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
    let merged = sqlx::query!(
        r#"
        insert into payments as p
            (provider, payment_id, payment_ref, user_id, amount_minor, currency, status,
             refunded_minor, provider_created_at, event_id)
        values ($1, $2, $3, $4, $5::bigint, $6, $7, least($8::bigint, $5::bigint), to_timestamp($9::bigint), $10)
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
        returning event_id
        "#,
        payment.provider,
        payment.payment_id,
        payment.payment_ref,
        payment.user_id,
        payment.amount_minor,
        payment.currency,
        payment.status,
        payment.refunded_minor,
        payment.created,
        receipt_event_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(match merged {
        Some(row) => Recorded::Recorded {
            receipt_owner: row.event_id,
        },
        None => Recorded::Differs,
    })
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
