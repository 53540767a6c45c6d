//! Stripe's decoder (the README's "What each Stripe event does"). The
//! wallet owner is `metadata.user_id` on the event's object.
//!
//! | event type | effect |
//! |---|---|
//! | `payment_intent.succeeded` | credit `amount_received` (else `amount`), keyed by the intent |
//! | `charge.succeeded` | upsert the payment, `payment.receipt` |
//! | `charge.refunded` | debit what this charge has not debited yet |
//! | `invoice.paid` | `invoice.paid`, once per invoice |
//! | `customer.subscription.created/updated/deleted` | guarded upsert, `subscription.changed` |
//!
//! A new type is one row of [`DECODERS`] and, when its effect is a new
//! kind, one applier (`effects::apply`).

use serde_json::{Value, json};

use super::effect::{Effect, PaymentRecord, PlainCredit, Reason, StripeCharge, StripeInvoice};
use super::fields::{
    currency_at, id_at, loose_id_at, loose_ident_at, owner_at, refund_status, required_ident,
    str_at, unix_at,
};
use crate::money::currency;
use crate::providers::Event;
use crate::subscriptions::Subscription;

pub use crate::providers::stripe::PROVIDER;

type Decoder = fn(&Event) -> Result<Effect, Reason>;

/// Each event type with an effect, and how its payload becomes one.
const DECODERS: [(&str, Decoder); 7] = [
    ("payment_intent.succeeded", payment_intent),
    ("charge.succeeded", |event| {
        Ok(Effect::Receipt(charge(event)?))
    }),
    ("charge.refunded", charge_refund),
    ("invoice.paid", |event| {
        Ok(Effect::InvoicePaid(invoice(event)?))
    }),
    ("customer.subscription.created", subscription),
    ("customer.subscription.updated", subscription),
    ("customer.subscription.deleted", subscription),
];

/// Every event type [`decode`] gives an effect: what a sweep lists (Stripe
/// takes at most 20 `types[]`).
pub const HANDLED_TYPES: [&str; DECODERS.len()] = types(DECODERS);

const fn types<const N: usize>(decoders: [(&'static str, Decoder); N]) -> [&'static str; N] {
    let mut types = [""; N];
    let mut i = 0;
    while i < N {
        types[i] = decoders[i].0;
        i += 1;
    }
    types
}

/// The credit a succeeded PaymentIntent object gives its owner, as
/// `payment_intent.succeeded` applies it: what an audit against Stripe's
/// own list expects in the ledger.
pub fn payment_intent_credit(intent: &Value) -> Result<PlainCredit, Reason> {
    intent_credit(intent)
}

/// What `event` does.
pub(super) fn decode(event: &Event) -> Effect {
    match DECODERS
        .iter()
        .find(|(kind, _)| *kind == event.event_type())
    {
        Some((_, decoder)) => Effect::from_result(decoder(event)),
        None => Effect::Ignored("event type has no effect"),
    }
}

// Stripe's objects as the effects read them, validated: every id an
// identifier, every currency ISO 4217, no refund above its charge.

/// `payment_intent.succeeded`: credits `metadata.user_id` with
/// `amount_received` (else `amount`), keyed by the intent.
fn payment_intent(event: &Event) -> Result<Effect, Reason> {
    Ok(Effect::Credit {
        credit: intent_credit(event.object())?,
        payment: None,
    })
}

fn intent_credit(object: &Value) -> Result<PlainCredit, Reason> {
    let id = required_ident(
        object,
        "/id",
        "payment intent id",
        "payment intent has no id",
    )?;
    let user_id =
        owner_at(object, "/metadata/user_id")?.ok_or("payment intent has no metadata.user_id")?;
    let amount_minor = object
        .get("amount_received")
        .filter(|amount| !amount.is_null())
        .or_else(|| object.get("amount"))
        .and_then(Value::as_i64)
        .filter(|amount| *amount > 0)
        .ok_or("payment intent has no positive integer amount_received or amount")?;
    Ok(PlainCredit {
        user_id: user_id.to_owned(),
        currency: currency_at(object, "/currency", "payment intent")?.to_owned(),
        amount_minor,
        source_ref: id.to_owned(),
        context: json!({ "payment_intent": id }),
    })
}

/// A charge object (`charge.succeeded`, `charge.refunded`), validated: its
/// refunded amount never exceeds its amount.
fn charge(event: &Event) -> Result<StripeCharge, Reason> {
    let object = event.object();
    let id = required_ident(object, "/id", "charge id", "charge has no id")?;
    let amount_minor = object
        .get("amount")
        .and_then(Value::as_i64)
        .filter(|amount| *amount >= 0)
        .ok_or("charge has no non-negative integer amount")?;
    let refunded_minor = match object.get("amount_refunded") {
        None | Some(Value::Null) => 0,
        Some(value) => value
            .as_i64()
            .filter(|amount| *amount >= 0)
            .ok_or("charge has a malformed amount_refunded")?,
    };
    if refunded_minor > amount_minor {
        return Err("charge has an amount_refunded larger than its amount".into());
    }
    let status =
        refund_status(amount_minor, refunded_minor).unwrap_or(match str_at(object, "/status") {
            Some("pending") => "pending",
            Some("failed") => "failed",
            _ => "succeeded",
        });
    let payment_intent = id_at(object, "/payment_intent", "charge payment_intent")?;
    Ok(StripeCharge {
        payment: PaymentRecord {
            payment_id: id.to_owned(),
            payment_ref: payment_intent.map(str::to_owned),
            user_id: loose_ident_at(object, "/metadata/user_id").map(str::to_owned),
            amount_minor,
            currency: currency_at(object, "/currency", "charge")?,
            status: status.to_owned(),
            refunded_minor,
            created: unix_at(object, "/created"),
        },
    })
}

/// `charge.refunded`: debits its PaymentIntent's credit.
fn charge_refund(event: &Event) -> Result<Effect, Reason> {
    let charge = charge(event)?;
    if charge.payment_intent().is_none() {
        return Err("charge has no payment_intent, so no wallet credit to debit".into());
    }
    if charge.payment.refunded_minor <= 0 {
        return Err("charge.refunded without a positive amount_refunded".into());
    }
    Ok(Effect::ChargeRefund(charge))
}

/// An `invoice.paid` object, validated.
fn invoice(event: &Event) -> Result<StripeInvoice, Reason> {
    let object = event.object();
    let owned = |id: Option<&str>| id.map(str::to_owned);
    Ok(StripeInvoice {
        id: required_ident(object, "/id", "invoice id", "invoice has no id")?.to_owned(),
        customer_id: owned(loose_id_at(object, "/customer")),
        subscription_id: owned(loose_id_at(object, "/subscription")),
        user_id: owned(loose_ident_at(object, "/metadata/user_id")),
        amount_paid_minor: object.pointer("/amount_paid").and_then(Value::as_i64),
        currency: str_at(object, "/currency").and_then(currency),
    })
}

/// `customer.subscription.*`: the guarded upsert, ordered by the event's
/// `created`.
fn subscription(event: &Event) -> Result<Effect, Reason> {
    let next = parse_subscription(event.object())?;
    Effect::subscription(next, event)
}

fn parse_subscription(object: &Value) -> Result<Subscription, Reason> {
    let missing = "subscription has no id or status";
    Ok(Subscription {
        provider: PROVIDER.to_owned(),
        subscription_id: required_ident(object, "/id", "subscription id", missing)?.to_owned(),
        customer_id: loose_id_at(object, "/customer").map(str::to_owned),
        user_id: loose_ident_at(object, "/metadata/user_id").map(str::to_owned),
        status: required_ident(object, "/status", "subscription status", missing)?.to_owned(),
        plan_id: loose_ident_at(object, "/items/data/0/price/id")
            .or_else(|| loose_ident_at(object, "/plan/id"))
            .map(str::to_owned),
        // Newer API versions keep the period on the subscription item.
        current_period_end: unix_at(object, "/current_period_end")
            .or_else(|| unix_at(object, "/items/data/0/current_period_end")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payment_intent_prefers_amount_received() {
        let object = json!({"id": "pi_1", "amount": 500, "amount_received": 400,
                            "currency": "usd", "metadata": {"user_id": "u1"}});
        let intent = intent_credit(&object).unwrap();
        assert_eq!(
            (intent.amount_minor, intent.currency.as_str()),
            (400, "USD")
        );
        let object =
            json!({"id": "pi_1", "amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}});
        assert_eq!(intent_credit(&object).unwrap().amount_minor, 500);
        let object = json!({"id": "pi_1", "amount": 500, "amount_received": null,
                            "currency": "usd", "metadata": {"user_id": "u1"}});
        assert_eq!(intent_credit(&object).unwrap().amount_minor, 500);
    }

    #[test]
    fn malformed_payment_intents_are_refused_with_a_reason() {
        for object in [
            json!({"id": "pi_1", "amount": 500, "currency": "usd", "metadata": {}}),
            json!({"id": "pi_1", "amount": 500, "currency": "usd"}),
            json!({"id": "pi_1", "amount": "500", "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi_1", "amount": -5, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi_1", "amount": 500, "currency": "dollars", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi_1", "amount": 500, "currency": "zzz", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi\u{0}1", "amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi_".repeat(100), "amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!("not an object"),
        ] {
            assert!(intent_credit(&object).is_err(), "{object}");
        }
    }
}
