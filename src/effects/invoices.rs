//! `invoice.paid`, announced once per invoice with its owner; the payment
//! intent it names (older API versions) is the invoice's.

use serde_json::json;
use sqlx::PgConnection;

use super::effect::{Applied, Error, StripeInvoice};
use super::learning::link_invoice;
use crate::invoices::{self, Claimed};
use crate::providers::Event;
use crate::{outbox, owners};

pub(super) async fn announce_paid(
    conn: &mut PgConnection,
    event: &Event,
    invoice: &StripeInvoice,
) -> Result<Applied, Error> {
    let provider = event.provider();
    let releases = match &invoice.payment_intent {
        Some(intent) => link_invoice(conn, event, intent, &invoice.id).await?,
        None => Vec::new(),
    };
    if let Claimed::AnnouncedBy(owner) =
        invoices::claim(conn, provider, &invoice.id, event.event_id()).await?
    {
        let mut announced = Applied::owned_by("this invoice was already announced", &owner);
        announced.releases = releases;
        return Ok(announced);
    }
    // Attribution moves no money: the owner its metadata names, else its
    // customer's learned one.
    let user_id = owners::resolve(conn, provider, &invoice.owner).await?;
    let payload = json!({
        "invoice_id": invoice.id,
        "customer_id": invoice.customer_id,
        "subscription_id": invoice.subscription_id,
        "user_id": user_id,
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
    let mut announced = Applied::processed(json!({ "outbox_id": outbox_id }));
    announced.releases = releases;
    Ok(announced)
}
