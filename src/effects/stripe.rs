//! Stripe's effects (DESIGN.md, "Default effects"). The wallet owner is
//! `metadata.user_id` on the event's object.
//!
//! | event type                                   | effect                                       |
//! |----------------------------------------------|----------------------------------------------|
//! | `payment_intent.succeeded`                   | credit `amount_received` (else `amount`)      |
//! | `charge.succeeded`                           | upsert the payment, `payment.receipt`         |
//! | `charge.refunded`                            | debit what this charge has not yet debited    |
//! | `invoice.paid`                               | `invoice.paid`                                |
//! | `customer.subscription.created/updated/deleted` | guarded upsert, `subscription.changed`     |

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::{Applied, Outcome};
use crate::ledger::{self, EntryKind, NewEntry, Posted};
use crate::payments::{self, Payment};
use crate::providers::{self, VerifiedEvent};
use crate::subscriptions::{self, Subscription, Upserted};
use crate::{db, events, outbox};

pub use crate::providers::stripe::PROVIDER;

pub async fn apply(conn: &mut PgConnection, event: &VerifiedEvent) -> Result<Applied, sqlx::Error> {
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

/// Credits the owner's wallet once per PaymentIntent, then applies the
/// refunds that were waiting for this credit.
async fn credit(conn: &mut PgConnection, event: &VerifiedEvent) -> Result<Applied, sqlx::Error> {
    let intent = match PaymentIntent::parse(event.object()) {
        Ok(intent) => intent,
        Err(reason) => return Ok(Applied::rejected(reason)),
    };
    db::lock_key(conn, PROVIDER, &credit_lock(intent.id)).await?;
    let entry = NewEntry {
        user_id: intent.user_id,
        currency: &intent.currency,
        amount_minor: intent.amount_minor,
        kind: EntryKind::Credit,
        provider: PROVIDER,
        source_ref: intent.id,
        event_id: event.event_id(),
        parent_ref: None,
    };
    let (entry_id, balance_minor) = match ledger::post(conn, &entry).await? {
        Posted::Posted {
            entry_id,
            balance_minor,
        } => (entry_id, balance_minor),
        Posted::AlreadyPosted { owner_event_id } => {
            return Ok(Applied::owned_by(
                "this payment intent was already credited",
                &owner_event_id,
            ));
        }
    };
    let payload = json!({
        "user_id": intent.user_id,
        "currency": intent.currency,
        "amount_minor": intent.amount_minor,
        "balance_minor": balance_minor,
        "entry_id": entry_id,
        "payment_intent": intent.id,
    });
    let outbox_id = outbox::enqueue(
        conn,
        "wallet.credited",
        PROVIDER,
        event.event_id(),
        &payload,
    )
    .await?;
    let applied_refunds = apply_waiting_refunds(conn, intent.id, event.event_id()).await?;
    Ok(Applied::processed(json!({
        "entry_id": entry_id,
        "balance_minor": balance_minor,
        "outbox_id": outbox_id,
        "applied_deferred": applied_refunds,
    })))
}

/// Applies, in event order, the refunds deferred until `payment_intent` was
/// credited, recording each one's outcome. Returns their event ids.
async fn apply_waiting_refunds(
    conn: &mut PgConnection,
    payment_intent: &str,
    by_event_id: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let mut applied = Vec::new();
    for stored in events::take_deferred(conn, PROVIDER, payment_intent).await? {
        let mut result = match providers::stripe::from_stored(stored.payload.into()) {
            Ok(waiting) => refund(conn, &waiting).await?,
            Err(_) => Applied::rejected("the stored payload is no longer a readable event"),
        };
        if let Value::Object(detail) = &mut result.detail {
            detail.insert("applied_by".into(), by_event_id.into());
        }
        events::record_outcome(
            conn,
            PROVIDER,
            &stored.event_id,
            result.outcome,
            &result.detail,
        )
        .await?;
        applied.push(stored.event_id);
    }
    Ok(applied)
}

/// Records the charge; the first event that announces it sends the receipt.
/// The wallet credit belongs to `payment_intent.succeeded`: when that came
/// first, this event is recorded `ignored` with the credit's owner (the
/// payment row and its receipt are still written).
async fn record_charge(
    conn: &mut PgConnection,
    event: &VerifiedEvent,
) -> Result<Applied, sqlx::Error> {
    let charge = match Charge::parse(event.object()) {
        Ok(charge) => charge,
        Err(reason) => return Ok(Applied::rejected(reason)),
    };
    let owner = payments::upsert(conn, &charge.payment(), Some(event.event_id())).await?;
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
    let outbox_id = outbox::enqueue(
        conn,
        "payment.receipt",
        PROVIDER,
        event.event_id(),
        &payload,
    )
    .await?;
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
/// that credit exists.
async fn refund(conn: &mut PgConnection, event: &VerifiedEvent) -> Result<Applied, sqlx::Error> {
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
    // The credit's lock first, always: a credit applying deferred refunds
    // takes it before the payment row too, so the two cannot deadlock.
    db::lock_key(conn, PROVIDER, &credit_lock(payment_intent)).await?;
    payments::upsert(conn, &charge.payment(), None).await?;
    let Some(credit) = ledger::find(conn, PROVIDER, EntryKind::Credit, payment_intent).await?
    else {
        events::defer(conn, PROVIDER, event.event_id(), payment_intent).await?;
        return Ok(Applied::deferred(payment_intent));
    };
    let source_ref = format!("{}:{}", charge.id, charge.amount_refunded_minor);
    if let Some(owner) = ledger::find(conn, PROVIDER, EntryKind::Refund, &source_ref).await? {
        return Ok(Applied::owned_by(
            "this refund was already debited",
            &owner.event_id,
        ));
    }
    let refunded =
        ledger::refunded(conn, PROVIDER, payment_intent, &format!("{}:", charge.id)).await?;
    let outstanding = charge.amount_refunded_minor - refunded.matching_minor;
    if outstanding <= 0 {
        return Ok(Applied::superseded(json!({
            "reason": "a larger refund of this charge was already debited",
            "debited_minor": refunded.matching_minor,
        })));
    }
    let debit = outstanding.min(credit.amount_minor - refunded.total_minor);
    if debit <= 0 {
        return Ok(Applied::ignored("the credit is already fully refunded"));
    }
    let entry = NewEntry {
        user_id: &credit.user_id,
        currency: &credit.currency,
        amount_minor: -debit,
        kind: EntryKind::Refund,
        provider: PROVIDER,
        source_ref: &source_ref,
        event_id: event.event_id(),
        parent_ref: Some(payment_intent),
    };
    let (entry_id, balance_minor) = match ledger::post(conn, &entry).await? {
        Posted::Posted {
            entry_id,
            balance_minor,
        } => (entry_id, balance_minor),
        Posted::AlreadyPosted { owner_event_id } => {
            return Ok(Applied::owned_by(
                "this refund was already debited",
                &owner_event_id,
            ));
        }
    };
    let payload = json!({
        "user_id": credit.user_id,
        "currency": credit.currency,
        "amount_minor": debit,
        "balance_minor": balance_minor,
        "entry_id": entry_id,
        "payment_intent": payment_intent,
        "charge": charge.id,
    });
    let outbox_id =
        outbox::enqueue(conn, "wallet.debited", PROVIDER, event.event_id(), &payload).await?;
    Ok(Applied::processed(json!({
        "entry_id": entry_id,
        "debited_minor": debit,
        "balance_minor": balance_minor,
        "outbox_id": outbox_id,
    })))
}

async fn invoice_paid(
    conn: &mut PgConnection,
    event: &VerifiedEvent,
) -> Result<Applied, sqlx::Error> {
    let object = event.object();
    let Some(invoice_id) = str_at(object, "/id") else {
        return Ok(Applied::rejected("invoice has no id"));
    };
    let payload = json!({
        "invoice_id": invoice_id,
        "customer_id": id_at(object, "/customer"),
        "subscription_id": id_at(object, "/subscription"),
        "user_id": str_at(object, "/metadata/user_id"),
        "amount_paid_minor": object.pointer("/amount_paid").and_then(Value::as_i64),
        "currency": str_at(object, "/currency").and_then(currency),
    });
    match outbox::enqueue(conn, "invoice.paid", PROVIDER, event.event_id(), &payload).await? {
        Some(outbox_id) => Ok(Applied::processed(json!({ "outbox_id": outbox_id }))),
        None => {
            let owner = outbox::store::invoice_paid_owner(conn, PROVIDER, invoice_id).await?;
            Ok(Applied::owned_by(
                "this invoice was already announced",
                owner.as_deref().unwrap_or("unknown"),
            ))
        }
    }
}

async fn subscription(
    conn: &mut PgConnection,
    event: &VerifiedEvent,
) -> Result<Applied, sqlx::Error> {
    let object = event.object();
    let (Some(subscription_id), Some(status)) = (str_at(object, "/id"), str_at(object, "/status"))
    else {
        return Ok(Applied::rejected("subscription has no id or status"));
    };
    let Some(event_time) = event.created() else {
        return Ok(Applied::rejected(
            "event has no created time to order it by",
        ));
    };
    let next = Subscription {
        provider: PROVIDER.to_owned(),
        subscription_id: subscription_id.to_owned(),
        customer_id: id_at(object, "/customer").map(str::to_owned),
        user_id: str_at(object, "/metadata/user_id").map(str::to_owned),
        status: status.to_owned(),
        plan_id: str_at(object, "/items/data/0/price/id")
            .or_else(|| str_at(object, "/plan/id"))
            .map(str::to_owned),
        // Newer API versions keep the period on the subscription item.
        current_period_end: unix_at(object, "/current_period_end")
            .or_else(|| unix_at(object, "/items/data/0/current_period_end")),
    };
    match subscriptions::upsert(conn, &next, event_time, event.event_id()).await? {
        Upserted::Changed { previous } => {
            let payload = json!({
                "subscription_id": next.subscription_id,
                "customer_id": next.customer_id,
                "user_id": next.user_id.clone().or_else(|| previous.as_ref().and_then(|p| p.user_id.clone())),
                "status": next.status,
                "previous_status": previous.as_ref().map(|p| &p.status),
                "plan_id": next.plan_id,
                "current_period_end": next.current_period_end,
            });
            let outbox_id = outbox::enqueue(
                conn,
                "subscription.changed",
                PROVIDER,
                event.event_id(),
                &payload,
            )
            .await?;
            Ok(Applied::processed(json!({ "outbox_id": outbox_id })))
        }
        Upserted::Unchanged => Ok(Applied::processed(json!({ "changed": false }))),
        Upserted::Superseded {
            stored_event_time,
            stored_status,
        } => Ok(Applied::superseded(json!({
            "reason": "older than the stored state",
            "stored_event_time": stored_event_time,
            "stored_status": stored_status,
        }))),
    }
}

fn credit_lock(payment_intent: &str) -> String {
    format!("credit:{payment_intent}")
}

/// A `payment_intent.succeeded` object, validated.
struct PaymentIntent<'a> {
    id: &'a str,
    user_id: &'a str,
    amount_minor: i64,
    currency: String,
}

impl<'a> PaymentIntent<'a> {
    fn parse(object: &'a Value) -> Result<Self, &'static str> {
        let id = str_at(object, "/id").ok_or("payment intent has no id")?;
        let user_id = owner(object).ok_or("payment intent has no metadata.user_id")?;
        let amount_minor = object
            .get("amount_received")
            .filter(|amount| !amount.is_null())
            .or_else(|| object.get("amount"))
            .and_then(Value::as_i64)
            .filter(|amount| *amount > 0)
            .ok_or("payment intent has no positive integer amount_received or amount")?;
        let currency = str_at(object, "/currency")
            .and_then(currency)
            .ok_or("payment intent has no three-letter currency")?;
        Ok(PaymentIntent {
            id,
            user_id,
            amount_minor,
            currency,
        })
    }
}

/// A charge object (`charge.succeeded`, `charge.refunded`), validated.
struct Charge<'a> {
    id: &'a str,
    payment_intent: Option<&'a str>,
    user_id: Option<&'a str>,
    amount_minor: i64,
    amount_refunded_minor: i64,
    currency: String,
    status: &'static str,
    created: Option<i64>,
}

impl<'a> Charge<'a> {
    fn parse(object: &'a Value) -> Result<Self, &'static str> {
        let id = str_at(object, "/id").ok_or("charge has no id")?;
        let amount_minor = object
            .get("amount")
            .and_then(Value::as_i64)
            .filter(|amount| *amount >= 0)
            .ok_or("charge has no non-negative integer amount")?;
        let amount_refunded_minor = match object.get("amount_refunded") {
            None | Some(Value::Null) => 0,
            Some(value) => value
                .as_i64()
                .filter(|amount| *amount >= 0)
                .ok_or("charge has a malformed amount_refunded")?,
        };
        let currency = str_at(object, "/currency")
            .and_then(currency)
            .ok_or("charge has no three-letter currency")?;
        let status = if amount_refunded_minor > 0 && amount_refunded_minor >= amount_minor {
            "refunded"
        } else if amount_refunded_minor > 0 {
            "partially_refunded"
        } else {
            match str_at(object, "/status") {
                Some("pending") => "pending",
                Some("failed") => "failed",
                _ => "succeeded",
            }
        };
        Ok(Charge {
            id,
            payment_intent: id_at(object, "/payment_intent"),
            user_id: owner(object),
            amount_minor,
            amount_refunded_minor,
            currency,
            status,
            created: unix_at(object, "/created"),
        })
    }

    fn payment(&self) -> Payment<'_> {
        Payment {
            provider: PROVIDER,
            payment_id: self.id,
            payment_ref: self.payment_intent,
            user_id: self.user_id,
            amount_minor: self.amount_minor,
            currency: &self.currency,
            status: self.status,
            refunded_minor: self.amount_refunded_minor,
            created: self.created,
        }
    }
}

/// `metadata.user_id`, if it is a usable identifier.
fn owner(object: &Value) -> Option<&str> {
    str_at(object, "/metadata/user_id").filter(|id| providers::is_identifier(id))
}

/// A non-empty string at `pointer`.
fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A Unix time at `pointer`, if it is one Postgres can store.
fn unix_at(object: &Value, pointer: &str) -> Option<i64> {
    object
        .pointer(pointer)
        .and_then(Value::as_i64)
        .filter(|t| providers::is_unix_time(*t))
}

/// An expandable reference: the id string, or the expanded object's `id`.
fn id_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    match object.pointer(pointer)? {
        Value::String(id) if !id.is_empty() => Some(id),
        expanded @ Value::Object(_) => str_at(expanded, "/id"),
        _ => None,
    }
}

/// An ISO 4217 code, upper-cased (`usd` -> `USD`).
pub fn currency(raw: &str) -> Option<String> {
    (raw.len() == 3 && raw.bytes().all(|b| b.is_ascii_alphabetic()))
        .then(|| raw.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn currencies_are_upper_cased_and_validated() {
        assert_eq!(currency("usd").as_deref(), Some("USD"));
        assert_eq!(currency("INR").as_deref(), Some("INR"));
        assert_eq!(currency("us"), None);
        assert_eq!(currency("usd1"), None);
        assert_eq!(currency("u$d"), None);
    }

    #[test]
    fn a_payment_intent_prefers_amount_received() {
        let object = json!({"id": "pi_1", "amount": 500, "amount_received": 400,
                            "currency": "usd", "metadata": {"user_id": "u1"}});
        let intent = PaymentIntent::parse(&object).unwrap();
        assert_eq!(
            (intent.amount_minor, intent.currency.as_str()),
            (400, "USD")
        );
        let object =
            json!({"id": "pi_1", "amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}});
        assert_eq!(PaymentIntent::parse(&object).unwrap().amount_minor, 500);
        let object = json!({"id": "pi_1", "amount": 500, "amount_received": null,
                            "currency": "usd", "metadata": {"user_id": "u1"}});
        assert_eq!(PaymentIntent::parse(&object).unwrap().amount_minor, 500);
    }

    #[test]
    fn malformed_payment_intents_are_refused_with_a_reason() {
        for object in [
            json!({"id": "pi_1", "amount": 500, "currency": "usd", "metadata": {}}),
            json!({"id": "pi_1", "amount": 500, "currency": "usd"}),
            json!({"id": "pi_1", "amount": "500", "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi_1", "amount": -5, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi_1", "amount": 500, "currency": "dollars", "metadata": {"user_id": "u1"}}),
            json!({"amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!("not an object"),
        ] {
            assert!(PaymentIntent::parse(&object).is_err(), "{object}");
        }
    }
}
