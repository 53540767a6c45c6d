//! Refunds that carry their own amount and id (Razorpay's `rfnd_…`,
//! PayPal's refunds): each debits its amount once, never more than is left
//! of its payment's credit, and waits for that credit.

use serde_json::Value;
use sqlx::PgConnection;

use super::money::{self, Debit, Found};
use super::{Applied, Error};
use crate::ledger::{self, Entry, EntryKind};
use crate::payments::{self, Payment, Recorded};
use crate::providers::Event;

/// A validated refund of payment `payment_id`.
pub(super) struct OwnRefund<'a> {
    /// Its natural key.
    pub id: &'a str,
    /// The payment whose credit it debits.
    pub payment_id: &'a str,
    /// Positive.
    pub amount_minor: i64,
    pub currency: &'static str,
    /// Provider-specific fields for the `wallet.debited` payload.
    pub context: Value,
}

/// How a refund keeps its payment's row: a row stored with another amount
/// or currency rejects the refund.
pub(super) enum RefundRow<'a> {
    /// As the refund event carries it (Razorpay's payment entity), if it
    /// does: recorded once the credit is found.
    Carried(Option<Payment<'a>>),
    /// The event carries no payment (PayPal's refunds): the credited
    /// payment's row moves to what the ledger has refunded of it, this
    /// refund included.
    FromLedger,
}

/// Debits `refund` (its own amount, never more than is left of the
/// credit), once per refund id; deferred until the payment is credited. A
/// refund larger than its payment or in another currency than its credit
/// is rejected before anything is written.
pub(super) async fn debit_own_refund(
    conn: &mut PgConnection,
    event: &Event,
    refund: OwnRefund<'_>,
    row: RefundRow<'_>,
) -> Result<Applied, Error> {
    let found = money::credit_or_defer(conn, event, refund.payment_id, refund.currency).await?;
    let credit = match found {
        Found::Credit(credit) => credit,
        Found::Deferred => return Ok(Applied::deferred(refund.payment_id)),
        Found::Mismatch(reason) => return Ok(Applied::rejected(reason)),
    };
    if refund.amount_minor > credit.amount_minor {
        return Ok(Applied::rejected("the refund is larger than its payment"));
    }
    if let RefundRow::Carried(Some(payment)) = &row
        && let Recorded::Differs = payments::upsert(conn, payment, None).await?
    {
        return Ok(Applied::rejected(payments::DIFFERS));
    }
    let provider = event.provider();
    if let Some(owner) = ledger::find(conn, provider, EntryKind::Refund, refund.id).await? {
        return Ok(Applied::owned_by(
            "this refund was already debited",
            &owner.event_id,
        ));
    }
    let refunded = ledger::refunded(conn, provider, refund.payment_id, None).await?;
    let amount_minor = refund
        .amount_minor
        .min(credit.amount_minor - refunded.total_minor);
    if amount_minor <= 0 {
        return Ok(Applied::ignored("the credit is already fully refunded"));
    }
    if let RefundRow::FromLedger = row
        && let Some(rejected) = record_refunded(
            conn,
            event,
            &refund,
            &credit,
            refunded.total_minor + amount_minor,
        )
        .await?
    {
        return Ok(rejected);
    }
    let debit = Debit {
        credit: &credit,
        parent_ref: refund.payment_id,
        source_ref: refund.id,
        amount_minor,
        context: refund.context,
    };
    money::debit(conn, event, debit).await
}

/// Moves the credited payment's row to `refunded_minor` refunded (its
/// status to `partially_refunded` or `refunded`): `Some(rejected)` when the
/// row was stored with another amount or currency.
async fn record_refunded(
    conn: &mut PgConnection,
    event: &Event,
    refund: &OwnRefund<'_>,
    credit: &Entry,
    refunded_minor: i64,
) -> Result<Option<Applied>, Error> {
    let payment = Payment {
        provider: event.provider(),
        payment_id: refund.payment_id,
        payment_ref: None,
        user_id: Some(&credit.user_id),
        amount_minor: credit.amount_minor,
        currency: &credit.currency,
        status: super::refund_status(credit.amount_minor, refunded_minor)
            .ok_or(Error::Invariant("a refund refunds nothing"))?,
        refunded_minor,
        created: None,
    };
    Ok(match payments::upsert(conn, &payment, None).await? {
        Recorded::Differs => Some(Applied::rejected(payments::DIFFERS)),
        Recorded::Recorded { .. } => None,
    })
}
