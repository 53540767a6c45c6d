//! Invoices announced: the natural key of `invoice.paid`, one announcement
//! per invoice whatever the event id (the `invoices` table).

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
