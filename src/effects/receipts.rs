//! A Stripe charge's receipt: its payment row, and `payment.receipt` from
//! the first event that announces it.

use serde_json::json;
use sqlx::PgConnection;

use super::effect::{Applied, Error, StripeCharge};
use crate::ledger::{self, EntryKind};
use crate::outbox;
use crate::payments::{self, Recorded};
use crate::providers::Event;

/// Records the charge; the first event that announces it sends the receipt.
/// The wallet credit belongs to `payment_intent.succeeded`: when that came
/// first, this event is recorded `ignored` with the credit's owner (the
/// payment row and its receipt are still written).
pub(super) async fn record_charge(
    conn: &mut PgConnection,
    event: &Event,
    charge: &StripeCharge,
) -> Result<Applied, Error> {
    let provider = event.provider();
    let row = charge.payment.row(provider);
    let owner = match payments::upsert(conn, &row, Some(event.event_id())).await? {
        Recorded::Recorded { receipt_owner } => receipt_owner,
        Recorded::Differs => return Ok(Applied::rejected(payments::DIFFERS)),
    };
    if let Some(owner) = owner.as_deref().filter(|owner| *owner != event.event_id()) {
        return Ok(Applied::owned_by("this charge was already recorded", owner));
    }
    let payload = json!({
        "payment_id": charge.id(),
        "payment_intent": charge.payment_intent(),
        "user_id": charge.payment.user_id,
        "amount_minor": charge.payment.amount_minor,
        "currency": charge.payment.currency,
        "status": charge.payment.status,
    });
    let payment = format!("{provider}:payment:{}", charge.id());
    let receipt = outbox::Message {
        topic: "payment.receipt",
        provider,
        event_id: event.event_id(),
        event_type: Some(event.event_type()),
        payload: &payload,
        ordering_key: Some(&payment),
    };
    let outbox_id = outbox::enqueue_one(conn, receipt).await?;
    let credit = match charge.payment_intent() {
        Some(intent) => ledger::find(conn, provider, EntryKind::Credit, intent).await?,
        None => None,
    };
    Ok(match credit {
        Some(credit) => Applied::ignored_with(json!({
            "reason": "the payment intent was already credited",
            "owner_event_id": credit.event_id,
            "receipt_outbox_id": outbox_id,
        })),
        None => Applied::processed(json!({ "outbox_id": outbox_id })),
    })
}
