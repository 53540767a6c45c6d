//! Refunds: those that carry their own amount and id (Razorpay's
//! `rfnd_…`, PayPal's refunds), each debiting its amount once, and Stripe's
//! cumulative `charge.refunded`, debiting what its total adds. Never more
//! than is left of the payment's credit; each waits for that credit.

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::credits::post_and_announce;
use super::effect::{Applied, Error, OwnRefund, Reason, RefundRow, StripeCharge};
use super::fields::refund_status;
use crate::ledger::{self, Entry, EntryKind, NewEntry};
use crate::payments::{self, Payment, Recorded};
use crate::providers::Event;
use crate::{events, invoices};

/// Debits `refund` (its own amount, never more than is left of the
/// credit), once per refund id; deferred until the payment is credited. A
/// refund larger than its payment or in another currency than its credit
/// is rejected before anything is written.
pub(super) async fn debit_own_refund(
    conn: &mut PgConnection,
    event: &Event,
    refund: &OwnRefund,
    row: &RefundRow,
) -> Result<Applied, Error> {
    let found = credit_or_defer(conn, event, &refund.payment_id, refund.currency).await?;
    let credit = match found.settled(&refund.payment_id) {
        Ok(credit) => credit,
        Err(settled) => return Ok(settled),
    };
    if refund.amount_minor > credit.amount_minor {
        return Ok(Applied::rejected("the refund is larger than its payment"));
    }
    if let RefundRow::Carried(Some(payment)) = row
        && let Recorded::Differs =
            payments::upsert(conn, &payment.row(event.provider()), None).await?
    {
        return Ok(Applied::rejected(payments::DIFFERS));
    }
    let provider = event.provider();
    if let Some(owner) = ledger::find(conn, provider, EntryKind::Refund, &refund.id).await? {
        return Ok(Applied::owned_by(
            "this refund was already debited",
            &owner.event_id,
        ));
    }
    let refunded = ledger::refunded(conn, provider, &refund.payment_id, None).await?;
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
            refund,
            &credit,
            refunded.total_minor + amount_minor,
        )
        .await?
    {
        return Ok(rejected);
    }
    let debit = Debit {
        credit: &credit,
        parent_ref: &refund.payment_id,
        source_ref: &refund.id,
        amount_minor,
        context: refund.context.clone(),
    };
    post_debit(conn, event, debit).await
}

/// Moves the credited payment's row to `refunded_minor` refunded (its
/// status to `partially_refunded` or `refunded`): `Some(rejected)` when the
/// row was stored with another amount or currency.
async fn record_refunded(
    conn: &mut PgConnection,
    event: &Event,
    refund: &OwnRefund,
    credit: &Entry,
    refunded_minor: i64,
) -> Result<Option<Applied>, Error> {
    let payment = Payment {
        provider: event.provider(),
        payment_id: &refund.payment_id,
        payment_ref: None,
        user_id: Some(&credit.user_id),
        amount_minor: credit.amount_minor,
        currency: &credit.currency,
        status: refund_status(credit.amount_minor, refunded_minor)
            .ok_or(Error::Invariant("a refund refunds nothing"))?,
        refunded_minor,
        created: None,
    };
    Ok(match payments::upsert(conn, &payment, None).await? {
        Recorded::Differs => Some(Applied::rejected(payments::DIFFERS)),
        Recorded::Recorded { .. } => None,
    })
}

/// Debits the wallet credited for the charge's PaymentIntent by
/// `amount_refunded` minus what was already debited for this charge (never
/// negative, never more than what is left of the credit). Deferred until
/// that credit exists. A refund in another currency than its credit's, or
/// of a charge recorded with another amount or currency, is rejected before
/// anything is written.
pub(super) async fn debit_charge_refund(
    conn: &mut PgConnection,
    event: &Event,
    charge: &StripeCharge,
) -> Result<Applied, Error> {
    let Some(payment_intent) = charge.payment_intent() else {
        return Err(Error::Invariant("a charge refund has no payment intent"));
    };
    let (currency, refunded_total) = (charge.payment.currency, charge.payment.refunded_minor);
    let found = credit_or_defer(conn, event, payment_intent, currency).await?;
    let credit = match found.settled(payment_intent) {
        Ok(credit) => credit,
        Err(settled) => return Ok(settled),
    };
    let row = charge.payment.row(event.provider());
    if let Recorded::Differs = payments::upsert(conn, &row, None).await? {
        return Ok(Applied::rejected(payments::DIFFERS));
    }
    let provider = event.provider();
    let source_ref = charge_refund_key(charge.id(), refunded_total);
    if let Some(owner) = ledger::find(conn, provider, EntryKind::Refund, &source_ref).await? {
        return Ok(Applied::owned_by(
            "this refund was already debited",
            &owner.event_id,
        ));
    }
    let refunded = ledger::refunded(conn, provider, payment_intent, Some(charge.id())).await?;
    let outstanding = refunded_total - refunded.matching_minor;
    if outstanding <= 0 {
        return Ok(Applied::superseded(json!({
            "reason": "a larger refund of this charge was already debited",
            "debited_minor": refunded.matching_minor,
        })));
    }
    let amount_minor = outstanding.min(credit.amount_minor - refunded.total_minor);
    if amount_minor <= 0 {
        return Ok(Applied::ignored("the credit is already fully refunded"));
    }
    let debit = Debit {
        credit: &credit,
        parent_ref: payment_intent,
        source_ref: &source_ref,
        amount_minor,
        context: json!({ "payment_intent": payment_intent, "charge": charge.id() }),
    };
    post_debit(conn, event, debit).await
}

/// The natural key of a charge's refunds: `{charge id}:{amount_refunded}`
/// (cumulative, so each larger total is a new entry for the difference).
/// [`ledger::refunded`] matches exactly this shape, never a prefix.
fn charge_refund_key(charge: &str, amount_refunded_minor: i64) -> String {
    format!("{charge}:{amount_refunded_minor}")
}

/// What a refund finds of the credit it debits.
enum Found {
    Credit(Entry),
    /// Not credited yet: the refund waits for it.
    Deferred,
    /// Credited in another currency: the refund can never apply.
    Mismatch(Reason),
    /// Never credited, and never will be: the payment pays an invoice
    /// (whose effects are the invoice's), so its refund moves no wallet.
    Invoice(String),
}

impl Found {
    /// What a refund records when there is no credit to debit.
    fn settled(self, payment: &str) -> Result<Entry, Applied> {
        match self {
            Found::Credit(credit) => Ok(credit),
            Found::Deferred => Err(Applied::deferred(payment)),
            Found::Mismatch(reason) => Err(Applied::rejected(reason)),
            Found::Invoice(invoice) => Err(Applied::ignored_with(json!({
                "reason": "the payment pays an invoice: its refund moves no wallet",
                "invoice_id": invoice,
            }))),
        }
    }
}

/// The credit of payment `source_ref`, provided it is in `currency`; when
/// there is none yet, parks `event` until it exists, unless the payment
/// pays an invoice (it is never credited). Call with the credit's lock held
/// (the engine takes it; [`super::learning::link_invoice`] holds it too, and
/// releases what waits here).
async fn credit_or_defer(
    conn: &mut PgConnection,
    event: &Event,
    source_ref: &str,
    currency: &str,
) -> Result<Found, Error> {
    let provider = event.provider();
    Ok(
        match ledger::find(conn, provider, EntryKind::Credit, source_ref).await? {
            Some(credit) if credit.currency != currency => Found::Mismatch(format!(
                "the refund is in {currency} but its payment was credited in {}",
                credit.currency
            )),
            Some(credit) => Found::Credit(credit),
            None => match invoices::paid_by(conn, provider, source_ref).await? {
                Some(invoice) => Found::Invoice(invoice),
                None => {
                    events::defer(conn, provider, event.event_id(), source_ref).await?;
                    Found::Deferred
                }
            },
        },
    )
}

/// A debit of `amount_minor` (positive) against `credit`.
struct Debit<'a> {
    pub credit: &'a Entry,
    /// The credit's `source_ref`.
    pub parent_ref: &'a str,
    /// The refund's natural key.
    pub source_ref: &'a str,
    pub amount_minor: i64,
    /// Provider-specific fields for the `wallet.debited` payload.
    pub context: Value,
}

/// Posts the refund entry and announces `wallet.debited`.
async fn post_debit(
    conn: &mut PgConnection,
    event: &Event,
    debit: Debit<'_>,
) -> Result<Applied, Error> {
    let entry = NewEntry {
        user_id: &debit.credit.user_id,
        currency: &debit.credit.currency,
        amount_minor: -debit.amount_minor,
        kind: EntryKind::Refund,
        provider: event.provider(),
        source_ref: debit.source_ref,
        event_id: event.event_id(),
        parent_ref: Some(debit.parent_ref),
    };
    match post_and_announce(conn, event, &entry, "wallet.debited", debit.context).await? {
        Ok(announced) => Ok(Applied::processed(json!({
            "entry_id": announced.entry_id,
            "debited_minor": debit.amount_minor,
            "balance_minor": announced.balance_minor,
            "outbox_id": announced.outbox_id,
        }))),
        Err(owner) => Ok(Applied::owned_by("this refund was already debited", &owner)),
    }
}
