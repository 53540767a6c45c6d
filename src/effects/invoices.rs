//! `invoice.paid`, announced once per invoice with its owner, and with
//! invoice credits on, credited to that owner once per invoice (waiting for
//! the customer's owner when none is known); the payment intent it names
//! (older API versions) is the invoice's.

use serde_json::json;
use sqlx::PgConnection;

use super::credits::post_and_announce;
use super::effect::{Applied, Error, PlainCredit, StripeInvoice};
use super::learning::link_invoice;
use crate::invoices::{self, Claimed};
use crate::ledger::{EntryKind, NewEntry};
use crate::owners::{self, Subject};
use crate::providers::Event;
use crate::{events, outbox};

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
    // The owner its metadata names, else its customer's learned one.
    let user_id = owners::resolve(conn, provider, &invoice.owner).await?;
    if invoice.credit.is_some() && user_id.is_none() {
        // A credit per paid invoice waits for its customer's owner.
        let mut waiting = match &invoice.customer_id {
            Some(customer) => {
                let waits_for = owners::wait_key(Subject::Customer, customer);
                events::defer(conn, provider, event.event_id(), &waits_for).await?;
                Applied::deferred(&waits_for)
            }
            None => Applied::rejected("the invoice names no owner and no customer"),
        };
        waiting.releases = releases;
        return Ok(waiting);
    }
    if let Claimed::AnnouncedBy(owner) =
        invoices::claim(conn, provider, &invoice.id, event.event_id()).await?
    {
        let mut announced = Applied::owned_by("this invoice was already announced", &owner);
        announced.releases = releases;
        return Ok(announced);
    }
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
        event_type: Some(event.event_type()),
        payload: &payload,
        ordering_key: None,
        account: event.account(),
    };
    let outbox_id = outbox::enqueue_one(conn, message).await?;
    let mut announced = Applied::processed(json!({ "outbox_id": outbox_id }));
    if let (Some(owed), Some(user_id)) = (&invoice.credit, &user_id) {
        announced = credit_invoice(conn, event, &owed.to(user_id.clone()), announced).await?;
    }
    announced.releases = releases;
    Ok(announced)
}

/// The credit granted per paid invoice, under the invoice's own key: one
/// per invoice whatever the event (its claim above already says so), and
/// never the key of the payment intent that paid it.
async fn credit_invoice(
    conn: &mut PgConnection,
    event: &Event,
    credit: &PlainCredit,
    announced: Applied,
) -> Result<Applied, Error> {
    let entry = NewEntry {
        user_id: &credit.user_id,
        currency: &credit.currency,
        amount_minor: credit.amount_minor,
        kind: EntryKind::InvoiceCredit,
        provider: event.provider(),
        source_ref: &credit.source_ref,
        event_id: event.event_id(),
        parent_ref: None,
    };
    let context = credit.context.clone();
    Ok(
        match post_and_announce(conn, event, &entry, "wallet.credited", context).await? {
            Ok(posted) => announced
                .noting("entry_id", posted.entry_id.into())
                .noting("balance_minor", posted.balance_minor.into())
                .noting("credit_outbox_id", posted.outbox_id.into()),
            Err(owner) => announced.noting("credited_by", owner.into()),
        },
    )
}
