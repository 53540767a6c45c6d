//! Razorpay's decoder (the README's "Razorpay" section). The wallet owner
//! is `notes.user_id` on the payment entity (`notes` may be an empty
//! array); amounts are in paise (the currency's minor unit).
//!
//! | event | effect |
//! |---|---|
//! | `payment.captured` | upsert the payment; credit the owner, keyed by `pay_...`; without `notes.user_id`, wait for its order's |
//! | `order.paid` | its order's notes teach the payment's owner |
//! | `payment.failed` | upsert the payment (recorded only) |
//! | `refund.processed` | debit the refund, keyed by `rfnd_...`; deferred until the payment is credited |
//! | `subscription.*` | guarded upsert on the envelope's `created_at`, `subscription.changed` |
//!
//! Everything else is recorded `ignored`. The payment's own
//! `payment.captured` carries the credit, so a replay under a new
//! (unsigned) event id and `order.paid` credit nothing more: `order.paid`
//! only teaches the owner its order's notes name (Razorpay Checkout puts
//! it there), which releases a capture that waits for it.

use serde_json::{Value, json};

use super::effect::{Effect, Owed, Owing, OwnRefund, PaymentRecord, Reason, RefundRow};
use super::fields::{currency_at, loose_ident_at, refund_status, required_ident, unix_at};
use super::owner::{Clues, candidates, first_named};
use crate::owners::{Candidate, Rule};
use crate::providers::Event;
use crate::subscriptions::Subscription;

pub use crate::providers::razorpay::PROVIDER;

/// What `event` does.
pub(super) fn decode(event: &Event) -> Effect {
    let payload = event.object();
    Effect::from_result(match event.event_type() {
        "payment.captured" => capture(payload, event.owner_rule()),
        "order.paid" => order_paid(payload, event.owner_rule()),
        "payment.failed" => payment(payload).map(Effect::Status),
        "refund.processed" => refund(payload),
        // Ordered by the envelope's created_at, never the entity's own.
        kind if kind.starts_with("subscription.") => {
            subscription(payload).and_then(|next| Effect::subscription(next, event))
        }
        _ => Ok(Effect::Ignored("event type has no effect")),
    })
}

/// A capture: its payment row, then its credit to the owner its notes
/// name, else to the one its order's notes name (`order.paid`), which it
/// waits for.
fn capture(payload: &Value, rule: &Rule) -> Result<Effect, Reason> {
    let entity = payload
        .pointer("/payment/entity")
        .ok_or("no payment entity")?;
    let (payment, owed, found) = captured_entity(entity, rule)?;
    Ok(match first_named(&found) {
        Some(owner) => Effect::Credit {
            credit: owed.to(owner.to_owned()),
            payment: Some(payment),
        },
        None if found.is_empty() => {
            return Err(format!(
                "payment has no {}",
                rule.to_string()
                    .replace("metadata.", "notes.")
                    .replace(',', " or ")
            ));
        }
        None => Effect::Unowned {
            credit: owed,
            candidates: found,
            payment: Some(payment),
        },
    })
}

/// A captured payment entity as `payment.captured` reads it by the
/// default rule: what an audit against Razorpay's own list expects in the
/// ledger (the owner in its notes, else learned from its order's).
pub fn payment_owing(entity: &Value) -> Result<Owing, Reason> {
    let (_, owed, candidates) = captured_entity(entity, Rule::metadata_default())?;
    Ok(Owing {
        owed,
        candidates,
        invoice: None,
    })
}

fn captured_entity(
    entity: &Value,
    rule: &Rule,
) -> Result<(PaymentRecord, Owed, Vec<Candidate>), Reason> {
    let payment = payment_of(entity)?;
    if payment.amount_minor <= 0 {
        return Err("payment has no positive amount".into());
    }
    let clues = Clues {
        metadata: &["/notes"],
        ..Clues::default()
    };
    // An owner in the notes is the credit's key: it must be an identifier.
    let mut found = candidates(rule, entity, clues)?;
    // Else its order's notes, which `order.paid` teaches.
    if rule.metadata_keys().next().is_some() {
        found.push(Candidate::Payment(payment.payment_id.clone()));
    }
    let owed = Owed {
        currency: payment.currency.to_owned(),
        amount_minor: payment.amount_minor,
        source_ref: payment.payment_id.clone(),
        context: json!({ "payment_id": payment.payment_id, "order_id": payment.payment_ref }),
        customer: None,
    };
    Ok((payment, owed, found))
}

/// `order.paid`: the owner its payment's notes, else its order's notes,
/// name, taught for the payment.
fn order_paid(payload: &Value, rule: &Rule) -> Result<Effect, Reason> {
    let payment = required_ident(
        payload,
        "/payment/entity/id",
        "payment id",
        "order.paid has no payment entity",
    )?;
    let clues = Clues {
        metadata: &["/payment/entity/notes", "/order/entity/notes"],
        ..Clues::default()
    };
    Ok(match first_named(&candidates(rule, payload, clues)?) {
        Some(owner) => Effect::LearnPayment {
            payment: payment.to_owned(),
            user_id: owner.to_owned(),
        },
        None => Effect::Ignored("the order's notes name no owner"),
    })
}

fn subscription(payload: &Value) -> Result<Subscription, Reason> {
    let entity = payload
        .pointer("/subscription/entity")
        .ok_or("no subscription entity")?;
    let missing = "subscription has no id or status";
    Ok(Subscription {
        provider: PROVIDER.to_owned(),
        subscription_id: required_ident(entity, "/id", "subscription id", missing)?.to_owned(),
        customer_id: loose_ident_at(entity, "/customer_id").map(str::to_owned),
        user_id: loose_ident_at(entity, "/notes/user_id").map(str::to_owned),
        status: required_ident(entity, "/status", "subscription status", missing)?.to_owned(),
        plan_id: loose_ident_at(entity, "/plan_id").map(str::to_owned),
        current_period_end: unix_at(entity, "/current_end"),
    })
}

/// A `refund.processed` refund, debited once per `rfnd_...`, with the
/// payment entity that rides along recorded. A refund carrying another
/// payment's entity can never apply: a refund only touches the payment it
/// refunds.
fn refund(payload: &Value) -> Result<Effect, Reason> {
    let entity = payload
        .pointer("/refund/entity")
        .ok_or("refund has no id or payment_id")?;
    let missing = "refund has no id or payment_id";
    let id = required_ident(entity, "/id", "refund id", missing)?;
    let payment_id = required_ident(entity, "/payment_id", "refund payment_id", missing)?;
    let amount_minor = entity
        .get("amount")
        .and_then(Value::as_i64)
        .filter(|amount| *amount > 0)
        .ok_or("refund has no positive integer amount")?;
    let currency = currency_at(entity, "/currency", "refund")?;
    let payment = match payload.pointer("/payment/entity") {
        Some(_) => Some(self::payment(payload)?),
        None => None,
    };
    if let Some(payment) = &payment {
        if payment.payment_id != payment_id {
            return Err("the refund carries another payment's entity".into());
        }
        if payment.currency != currency {
            return Err("the refund's currency differs from its payment's".into());
        }
        if amount_minor > payment.amount_minor {
            return Err("the refund is larger than its payment".into());
        }
    }
    let refund = OwnRefund {
        id: id.to_owned(),
        payment_id: payment_id.to_owned(),
        amount_minor,
        currency,
        context: json!({ "payment_id": payment_id, "refund_id": id }),
    };
    Ok(Effect::Refund {
        refund,
        row: RefundRow::Carried(payment),
    })
}

/// The payment entity of a Razorpay event, validated.
fn payment(payload: &Value) -> Result<PaymentRecord, Reason> {
    let entity = payload
        .pointer("/payment/entity")
        .ok_or("no payment entity")?;
    payment_of(entity)
}

/// A payment entity, validated: its refunded amount never exceeds its
/// amount.
fn payment_of(entity: &Value) -> Result<PaymentRecord, Reason> {
    let id = required_ident(entity, "/id", "payment id", "payment has no id")?;
    let amount_minor = entity
        .get("amount")
        .and_then(Value::as_i64)
        .filter(|amount| *amount >= 0)
        .ok_or("payment has no non-negative integer amount")?;
    let refunded_minor = entity
        .get("amount_refunded")
        .and_then(Value::as_i64)
        .filter(|amount| *amount >= 0)
        .unwrap_or(0);
    if refunded_minor > amount_minor {
        return Err("payment has an amount_refunded larger than its amount".into());
    }
    let status = match refund_status(amount_minor, refunded_minor) {
        Some(status) => status,
        None => loose_ident_at(entity, "/status").unwrap_or("captured"),
    };
    Ok(PaymentRecord {
        payment_id: id.to_owned(),
        payment_ref: loose_ident_at(entity, "/order_id").map(str::to_owned),
        user_id: loose_ident_at(entity, "/notes/user_id").map(str::to_owned),
        amount_minor,
        currency: currency_at(entity, "/currency", "payment")?,
        status: status.to_owned(),
        refunded_minor,
        created: unix_at(entity, "/created_at"),
    })
}
