//! Stripe's effects (the README's "What each Stripe event does"). The wallet owner is
//! `metadata.user_id` on the event's object.
//!
//! | event type | effect |
//! |---|---|
//! | `payment_intent.succeeded` | credit `amount_received` (else `amount`), keyed by the intent |
//! | `charge.succeeded` | upsert the payment, `payment.receipt` |
//! | `charge.refunded` | debit what this charge has not debited yet |
//! | `invoice.paid` | `invoice.paid`, once per invoice |
//! | `customer.subscription.created/updated/deleted` | guarded upsert, `subscription.changed` |

use super::Error;
use serde_json::json;
use sqlx::PgConnection;

mod objects;

use super::money::{self, Debit, Found, PlainCredit};
use super::plan::{Plan, credit_key, invoice_key, subscription_key};
use super::{Applied, Outcome};
use crate::ledger::{self, EntryKind};
use crate::outbox;
use crate::payments::{self, Recorded};
use crate::providers::Event;
use objects::{Charge, Invoice, PaymentIntent, parse_subscription};

pub use crate::providers::stripe::PROVIDER;

/// Every event type [`apply`] gives an effect: what a sweep lists (Stripe
/// takes at most 20 `types[]`).
pub const HANDLED_TYPES: [&str; 7] = [
    "payment_intent.succeeded",
    "charge.succeeded",
    "charge.refunded",
    "invoice.paid",
    "customer.subscription.created",
    "customer.subscription.updated",
    "customer.subscription.deleted",
];

pub async fn apply(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    match event.event_type() {
        "payment_intent.succeeded" => credit(conn, event).await,
        "charge.succeeded" => record_charge(conn, event).await,
        "charge.refunded" => refund(conn, event).await,
        "invoice.paid" => invoice_paid(conn, event).await,
        "customer.subscription.created"
        | "customer.subscription.updated"
        | "customer.subscription.deleted" => subscription(conn, event).await,
        _ => Ok(Applied::ignored("event type has no effect")),
    }
}

/// Credits the owner's wallet once per PaymentIntent.
async fn credit(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    match PaymentIntent::parse(event.object()) {
        Ok(intent) => money::credit(conn, event, intent.credit()).await,
        Err(reason) => Ok(Applied::rejected(reason)),
    }
}

/// What `event` will lock ([`super::plan`]), from the same parse as its
/// effect.
pub(super) fn plan(event: &Event) -> Plan {
    let object = event.object();
    match event.event_type() {
        "payment_intent.succeeded" => match PaymentIntent::parse(object) {
            Ok(intent) => {
                let credit = PlainCredit::from(intent.credit());
                Plan {
                    keys: vec![credit_key(PROVIDER, intent.id)],
                    wallets: vec![(credit.user_id.clone(), credit.currency.clone())],
                    credit: Some(credit),
                    ..Plan::default()
                }
            }
            Err(_) => Plan::default(),
        },
        "charge.succeeded" | "charge.refunded" => match Charge::parse(object) {
            // A charge's row is written under its intent's key, as its
            // refunds are.
            Ok(charge) => Plan {
                keys: vec![credit_key(
                    PROVIDER,
                    charge.payment_intent.unwrap_or(charge.id),
                )],
                debits: (event.event_type() == "charge.refunded")
                    .then_some(charge.payment_intent)
                    .flatten()
                    .map(str::to_owned),
                ..Plan::default()
            },
            Err(_) => Plan::default(),
        },
        "invoice.paid" => match Invoice::parse(object) {
            Ok(invoice) => Plan::keyed(vec![invoice_key(PROVIDER, invoice.id)]),
            Err(_) => Plan::default(),
        },
        "customer.subscription.created"
        | "customer.subscription.updated"
        | "customer.subscription.deleted" => match parse_subscription(object) {
            Ok(next) => Plan::keyed(vec![subscription_key(PROVIDER, &next.subscription_id)]),
            Err(_) => Plan::default(),
        },
        _ => Plan::default(),
    }
}

/// Records the charge; the first event that announces it sends the receipt.
/// The wallet credit belongs to `payment_intent.succeeded`: when that came
/// first, this event is recorded `ignored` with the credit's owner (the
/// payment row and its receipt are still written).
async fn record_charge(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    let charge = match Charge::parse(event.object()) {
        Ok(charge) => charge,
        Err(reason) => return Ok(Applied::rejected(reason)),
    };
    let owner = match payments::upsert(conn, &charge.payment(), Some(event.event_id())).await? {
        Recorded::Recorded { receipt_owner } => receipt_owner,
        Recorded::Differs => return Ok(Applied::rejected(payments::DIFFERS)),
    };
    if let Some(owner) = owner.as_deref().filter(|owner| *owner != event.event_id()) {
        return Ok(Applied::owned_by("this charge was already recorded", owner));
    }
    let payload = json!({
        "payment_id": charge.id,
        "payment_intent": charge.payment_intent,
        "user_id": charge.user_id,
        "amount_minor": charge.amount_minor,
        "currency": charge.currency,
        "status": charge.status,
    });
    let payment = format!("{PROVIDER}:payment:{}", charge.id);
    let receipt = outbox::Message {
        topic: "payment.receipt",
        provider: PROVIDER,
        event_id: event.event_id(),
        payload: &payload,
        ordering_key: Some(&payment),
    };
    let outbox_id = outbox::enqueue_one(conn, receipt).await?;
    let credit = match charge.payment_intent {
        Some(intent) => ledger::find(conn, PROVIDER, EntryKind::Credit, intent).await?,
        None => None,
    };
    Ok(match credit {
        Some(credit) => Applied {
            outcome: Outcome::Ignored,
            detail: json!({
                "reason": "the payment intent was already credited",
                "owner_event_id": credit.event_id,
                "receipt_outbox_id": outbox_id,
            }),
        },
        None => Applied::processed(json!({ "outbox_id": outbox_id })),
    })
}

/// Debits the wallet credited for the charge's PaymentIntent by
/// `amount_refunded` minus what was already debited for this charge (never
/// negative, never more than what is left of the credit). Deferred until
/// that credit exists. A refund in another currency than its credit's, or
/// of a charge recorded with another amount or currency, is rejected before
/// anything is written.
async fn refund(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    let charge = match Charge::parse(event.object()) {
        Ok(charge) => charge,
        Err(reason) => return Ok(Applied::rejected(reason)),
    };
    let Some(payment_intent) = charge.payment_intent else {
        return Ok(Applied::rejected(
            "charge has no payment_intent, so no wallet credit to debit",
        ));
    };
    if charge.amount_refunded_minor <= 0 {
        return Ok(Applied::rejected(
            "charge.refunded without a positive amount_refunded",
        ));
    }
    let credit = match money::credit_or_defer(conn, event, payment_intent, charge.currency).await? {
        Found::Credit(credit) => credit,
        Found::Deferred => return Ok(Applied::deferred(payment_intent)),
        Found::Mismatch(reason) => return Ok(Applied::rejected(reason)),
    };
    if let Recorded::Differs = payments::upsert(conn, &charge.payment(), None).await? {
        return Ok(Applied::rejected(payments::DIFFERS));
    }
    let source_ref = refund_key(charge.id, charge.amount_refunded_minor);
    if let Some(owner) = ledger::find(conn, PROVIDER, EntryKind::Refund, &source_ref).await? {
        return Ok(Applied::owned_by(
            "this refund was already debited",
            &owner.event_id,
        ));
    }
    let refunded = ledger::refunded(conn, PROVIDER, payment_intent, Some(charge.id)).await?;
    let outstanding = charge.amount_refunded_minor - refunded.matching_minor;
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
        context: json!({ "payment_intent": payment_intent, "charge": charge.id }),
    };
    money::debit(conn, event, debit).await
}

/// The natural key of a charge's refunds: `{charge id}:{amount_refunded}`
/// (cumulative, so each larger total is a new entry for the difference).
/// [`ledger::refunded`] matches exactly this shape, never a prefix.
fn refund_key(charge: &str, amount_refunded_minor: i64) -> String {
    format!("{charge}:{amount_refunded_minor}")
}

async fn invoice_paid(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    let invoice = match Invoice::parse(event.object()) {
        Ok(invoice) => invoice,
        Err(reason) => return Ok(Applied::rejected(reason)),
    };
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
        provider: PROVIDER,
        event_id: event.event_id(),
        payload: &payload,
        ordering_key: None,
    };
    match outbox::enqueue_one(conn, message).await? {
        Some(outbox_id) => Ok(Applied::processed(json!({ "outbox_id": outbox_id }))),
        None => {
            let owner = outbox::store::invoice_paid_owner(conn, PROVIDER, invoice.id).await?;
            Ok(Applied::owned_by(
                "this invoice was already announced",
                owner.as_deref().unwrap_or("unknown"),
            ))
        }
    }
}

async fn subscription(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    match parse_subscription(event.object()) {
        Ok(next) => super::apply_subscription(conn, event, next).await,
        Err(reason) => Ok(Applied::rejected(reason)),
    }
}
