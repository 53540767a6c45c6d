//! Payment rows: one per provider payment (a Stripe charge). They only move
//! forward: `refunded_minor` only grows and the status never goes back
//! (`payment_status_rank` in the schema).

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

/// Records the payment, merging with what is stored. `receipt_event_id` is the
/// event that announces the payment itself; the first one to do so keeps it.
/// Returns the event that owns the receipt, if any.
pub async fn upsert(
    conn: &mut PgConnection,
    payment: &Payment<'_>,
    receipt_event_id: Option<&str>,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        insert into payments as p
            (provider, payment_id, payment_ref, user_id, amount_minor, currency, status,
             refunded_minor, provider_created_at, event_id)
        values ($1, $2, $3, $4, $5, $6, $7, $8, to_timestamp($9::bigint), $10)
        on conflict (provider, payment_id) do update set
            payment_ref = coalesce(p.payment_ref, excluded.payment_ref),
            user_id = coalesce(p.user_id, excluded.user_id),
            refunded_minor = greatest(p.refunded_minor, excluded.refunded_minor),
            status = case
                when payment_status_rank(excluded.status) > payment_status_rank(p.status)
                then excluded.status else p.status end,
            provider_created_at = coalesce(p.provider_created_at, excluded.provider_created_at),
            event_id = coalesce(p.event_id, excluded.event_id),
            updated_at = now()
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
    .fetch_one(conn)
    .await
}
