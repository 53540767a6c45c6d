//! Invoices announced: the natural key of `invoice.paid`, one announcement
//! per invoice whatever the event id (the `invoices` table); and the
//! payments that pay an invoice (`invoice_payments`), whose money is the
//! invoice's, never a wallet top-up.

use sqlx::PgConnection;

/// What [`claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// This event announces the invoice.
    First,
    /// An event announced it before (another, or this one applied again):
    /// its id.
    AnnouncedBy(String),
}

/// Claims invoice `invoice_id` of `provider` for `event_id`'s announcement.
/// Call with the invoice's lock held (the engine takes it).
pub async fn claim(
    conn: &mut PgConnection,
    provider: &str,
    invoice_id: &str,
    event_id: &str,
) -> Result<Claimed, sqlx::Error> {
    let claimed = sqlx::query!(
        r#"
        with claimed as (
            insert into invoices (provider, invoice_id, event_id)
            values ($1, $2, $3)
            on conflict do nothing
            returning event_id
        )
        select event_id as "event_id!", true as "first!" from claimed
        union all
        select event_id, false from invoices
        where provider = $1 and invoice_id = $2 and not exists (select from claimed)
        "#,
        provider,
        invoice_id,
        event_id,
    )
    .fetch_one(conn)
    .await?;
    Ok(match claimed.first {
        true => Claimed::First,
        false => Claimed::AnnouncedBy(claimed.event_id),
    })
}

/// Records that payment `payment_id` of `provider` pays invoice
/// `invoice_id`, as `event_id` says; the first link stays. Whether it is
/// new. Call with the payment's credit lock held (the engine takes it).
pub async fn link_payment(
    conn: &mut PgConnection,
    provider: &str,
    payment_id: &str,
    invoice_id: &str,
    event_id: &str,
) -> Result<bool, sqlx::Error> {
    let linked = sqlx::query!(
        r#"
        insert into invoice_payments (provider, payment_id, invoice_id, event_id)
        values ($1, $2, $3, $4)
        on conflict do nothing
        "#,
        provider,
        payment_id,
        invoice_id,
        event_id,
    )
    .execute(conn)
    .await?;
    Ok(linked.rows_affected() == 1)
}

/// The invoice that payment `payment_id` of `provider` pays, if one is known.
pub async fn paid_by(
    conn: &mut PgConnection,
    provider: &str,
    payment_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    Ok(paid_by_many(conn, &[(provider, payment_id)])
        .await?
        .pop()
        .flatten())
}

/// [`paid_by`] of each `(provider, payment_id)`, in one statement (none
/// for none).
pub async fn paid_by_many(
    conn: &mut PgConnection,
    payments: &[(&str, &str)],
) -> Result<Vec<Option<String>>, sqlx::Error> {
    let mut paid = vec![None; payments.len()];
    if payments.is_empty() {
        return Ok(paid);
    }
    let providers: Vec<&str> = payments.iter().map(|(p, _)| *p).collect();
    let ids: Vec<&str> = payments.iter().map(|(_, id)| *id).collect();
    let rows = sqlx::query!(
        r#"
        select (wanted.position - 1)::int as "index!", i.invoice_id
        from unnest($1::text[], $2::text[]) with ordinality
            as wanted (provider, payment_id, position)
        cross join lateral (
            select invoice_id from invoice_payments i
            where i.provider = wanted.provider and i.payment_id = wanted.payment_id
        ) as i
        "#,
        &providers as &[&str],
        &ids as &[&str],
    )
    .fetch_all(conn)
    .await?;
    for row in rows {
        if let Some(slot) = usize::try_from(row.index)
            .ok()
            .and_then(|i| paid.get_mut(i))
        {
            *slot = Some(row.invoice_id);
        }
    }
    Ok(paid)
}
