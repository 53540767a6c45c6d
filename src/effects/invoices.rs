//! `invoice.paid`, announced once per invoice.

use serde_json::json;
use sqlx::PgConnection;

use super::effect::{Applied, Error, StripeInvoice};
use crate::invoices::{self, Claimed};
use crate::outbox;
use crate::providers::Event;

pub(super) async fn announce_paid(
    conn: &mut PgConnection,
    event: &Event,
    invoice: &StripeInvoice,
) -> Result<Applied, Error> {
    let provider = event.provider();
    if let Claimed::AnnouncedBy(owner) =
        invoices::claim(conn, provider, &invoice.id, event.event_id()).await?
    {
        return Ok(Applied::owned_by(
            "this invoice was already announced",
            &owner,
        ));
    }
    let payload = json!({
        "invoice_id": invoice.id,
        "customer_id": invoice.customer_id,
        "subscription_id": invoice.subscription_id,
        "user_id": invoice.user_id,
        "amount_paid_minor": invoice.amount_paid_minor,
        "currency": invoice.currency,
    });
    let message = outbox::Message {
        topic: "invoice.paid",
        provider,
        event_id: event.event_id(),
        payload: &payload,
        ordering_key: None,
    };
    let outbox_id = outbox::enqueue_one(conn, message).await?;
    Ok(Applied::processed(json!({ "outbox_id": outbox_id })))
}
