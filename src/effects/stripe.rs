//! Stripe's decoder (the README's "What each Stripe event does"). The
//! wallet owner is found by the source's owner rule (by default
//! `metadata.user_id` on the event's object, then the Checkout Session's
//! `client_reference_id` learned for the payment intent).
//!
//! | event type | effect |
//! |---|---|
//! | `payment_intent.succeeded` | credit `amount_received` (else `amount`), keyed by the intent; waits for its owner when none is written on it; the invoice's when it pays one |
//! | `charge.succeeded` | upsert the payment, `payment.receipt` |
//! | `charge.refunded` | debit what this charge has not debited yet |
//! | `checkout.session.completed` | learn owners; a paid `payment` session credits `amount_total`, keyed by its intent; else `checkout.completed` |
//! | `checkout.session.async_payment_succeeded` | learn owners, credit as above |
//! | `checkout.session.async_payment_failed` | `checkout.failed` |
//! | `customer.created/updated` | learn the customer's owner from its metadata |
//! | `invoice.paid` | `invoice.paid` with its owner, once per invoice |
//! | `invoice_payment.paid` | the payment intent is the invoice's |
//! | `customer.subscription.created/updated/deleted` | guarded upsert, `subscription.changed` |
//!
//! A new type is one row of [`DECODERS`] and, when its effect is a new
//! kind, one applier (`effects::apply`).

use serde_json::{Value, json};

use super::effect::{
    CheckoutSession, Effect, Owed, Owing, PaymentRecord, Reason, StripeCharge, StripeInvoice,
};
use super::fields::{
    currency_at, id_at, loose_id_at, loose_ident_at, refund_status, required_ident, str_at, unix_at,
};
use super::owner::{Clues, candidates, first_named, named};
use crate::money::currency;
use crate::owners::{Candidate, Rule};
use crate::providers::{Event, Fetched, Kind};
use crate::subscriptions::Subscription;

pub use crate::providers::stripe::PROVIDER;

type Decoder = fn(&Event) -> Result<Effect, Reason>;

/// Each event type with an effect, and how its payload becomes one.
const DECODERS: [(&str, Decoder); 13] = [
    ("payment_intent.succeeded", payment_intent),
    ("checkout.session.completed", checkout),
    ("checkout.session.async_payment_succeeded", checkout),
    ("checkout.session.async_payment_failed", checkout),
    ("customer.created", customer),
    ("customer.updated", customer),
    ("invoice_payment.paid", invoice_payment),
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

/// A succeeded PaymentIntent object as `payment_intent.succeeded` reads
/// it by the default rule: what an audit against Stripe's own list expects
/// in the ledger (a Checkout payment's owner is learned, not written on it;
/// an older API's intent names the invoice it pays).
pub fn payment_intent_owing(intent: &Value) -> Result<Owing, Reason> {
    let owed = intent_owed(intent)?;
    let rule = Rule::stripe_default();
    let candidates = candidates(rule, intent, intent_clues(&owed))?;
    let invoice = loose_id_at(intent, "/invoice").map(str::to_owned);
    Ok(Owing {
        owed,
        candidates,
        invoice,
    })
}

/// Why a thin event whose data was never fetched is rejected.
pub const NOT_FETCHED: &str = "a thin event whose data was not fetched: STRIPE_API_KEY is not set \
    (`webhookd events replay` applies it once it is)";

/// What `event` does. A thin event of a type webhookd applies
/// ([`applied_thin_type`]) does what the snapshot event of that type does,
/// with the object fetched for it; any other thin event is forwarded.
pub(super) fn decode(event: &Event) -> Effect {
    let event_type = match event.thin().map(|thin| &thin.fetched) {
        None => event.event_type(),
        Some(Fetched::Not) => return Effect::rejected(NOT_FETCHED),
        Some(Fetched::Refused(reason)) => return Effect::rejected(reason.as_str()),
        Some(Fetched::Found) => match applied_thin_type(event.event_type()) {
            Some(snapshot) => snapshot,
            None => return Effect::Thin,
        },
    };
    match DECODERS.iter().find(|(kind, _)| *kind == event_type) {
        Some((_, decoder)) => Effect::from_result(decoder(event)),
        None => Effect::Ignored("event type has no effect"),
    }
}

/// The snapshot type a thin event's type stands for when webhookd applies
/// it: `v1.payment_intent.succeeded` is `payment_intent.succeeded`.
pub fn applied_thin_type(thin_type: &str) -> Option<&'static str> {
    let snapshot = thin_type.strip_prefix("v1.")?;
    HANDLED_TYPES.iter().copied().find(|kind| *kind == snapshot)
}

/// The subscription a snapshot subscription event (`customer.subscription.*`)
/// is about, which a tie may refresh ([`crate::fetch`]); `None` for any
/// other event.
pub fn refreshable_subscription(event: &Event) -> Option<&str> {
    let kind = event.event_type();
    let is_subscription =
        kind.starts_with("customer.subscription.") && HANDLED_TYPES.contains(&kind);
    (event.kind() == Kind::Stripe && event.thin().is_none() && is_subscription)
        .then(|| loose_ident_at(event.object(), "/id"))
        .flatten()
}

// Stripe's objects as the effects read them, validated: every id an
// identifier, every currency ISO 4217, no refund above its charge.

/// `payment_intent.succeeded`: credits its owner with `amount_received`
/// (else `amount`), keyed by the intent. An intent that pays an invoice is
/// the invoice's; one whose owner is not written on it waits for it.
fn payment_intent(event: &Event) -> Result<Effect, Reason> {
    let object = event.object();
    let owed = intent_owed(object)?;
    // Older API versions name the invoice an intent pays on the intent.
    if let Some(invoice) = loose_id_at(object, "/invoice") {
        return Ok(Effect::PaysInvoice {
            payment: owed.source_ref,
            invoice: invoice.to_owned(),
        });
    }
    let rule = event.owner_rule();
    let found = candidates(rule, object, intent_clues(&owed))?;
    Ok(match first_named(&found) {
        Some(owner) => Effect::Credit {
            credit: owed.to(owner.to_owned()),
            payment: None,
        },
        None if found.is_empty() => {
            return Err(format!(
                "payment intent has no {}",
                rule.to_string().replace(',', " or ")
            ));
        }
        None => Effect::Unowned {
            credit: owed,
            candidates: found,
            payment: None,
        },
    })
}

/// What an intent's owner rule reads: its metadata, its own id (for the
/// owner a Checkout Session taught), its customer.
fn intent_clues(owed: &Owed) -> Clues<'_> {
    Clues {
        metadata: &["/metadata"],
        payment: Some(&owed.source_ref),
        customer: owed.customer.as_deref(),
        ..Clues::default()
    }
}

fn intent_owed(object: &Value) -> Result<Owed, Reason> {
    let id = required_ident(
        object,
        "/id",
        "payment intent id",
        "payment intent has no id",
    )?;
    let amount_minor = object
        .get("amount_received")
        .filter(|amount| !amount.is_null())
        .or_else(|| object.get("amount"))
        .and_then(Value::as_i64)
        .filter(|amount| *amount > 0)
        .ok_or("payment intent has no positive integer amount_received or amount")?;
    Ok(Owed {
        currency: currency_at(object, "/currency", "payment intent")?.to_owned(),
        amount_minor,
        source_ref: id.to_owned(),
        context: json!({ "payment_intent": id }),
        customer: loose_id_at(object, "/customer").map(str::to_owned),
    })
}

/// `checkout.session.*`: a Checkout Session (Payment Links make them too).
/// A paid `payment` session credits its owner by `amount_total`, keyed by
/// its payment intent; every session teaches its owner for its payment
/// intent and customer.
fn checkout(event: &Event) -> Result<Effect, Reason> {
    let object = event.object();
    let id = required_ident(
        object,
        "/id",
        "checkout session id",
        "checkout session has no id",
    )?;
    let mode = loose_ident_at(object, "/mode").unwrap_or("payment");
    let payment_status = loose_ident_at(object, "/payment_status");
    let payment_intent = id_at(object, "/payment_intent", "checkout session payment_intent")?;
    let customer = id_at(object, "/customer", "checkout session customer")?;
    let owner = candidates(
        event.owner_rule(),
        object,
        Clues {
            metadata: &["/metadata"],
            client_reference_id: Some("/client_reference_id"),
            customer,
            ..Clues::default()
        },
    )?;
    let currency = str_at(object, "/currency").and_then(currency);
    let amount_total = object.pointer("/amount_total").and_then(Value::as_i64);
    let failed = event.event_type() == "checkout.session.async_payment_failed";
    let pays = mode == "payment"
        && !failed
        && (event.event_type() == "checkout.session.async_payment_succeeded"
            || payment_status == Some("paid"));
    let credit = match (pays, payment_intent) {
        (true, Some(intent)) => Some(Owed {
            currency: currency
                .ok_or("checkout session has no ISO 4217 currency with a minor unit")?
                .to_owned(),
            amount_minor: amount_total
                .filter(|amount| *amount > 0)
                .ok_or("a paid checkout session has no positive integer amount_total")?,
            source_ref: intent.to_owned(),
            context: json!({ "payment_intent": intent, "checkout_session": id }),
            // The session teaches its customer's owner itself.
            customer: None,
        }),
        _ => None,
    };
    Ok(Effect::Checkout(CheckoutSession {
        id: id.to_owned(),
        mode: mode.to_owned(),
        payment_status: payment_status.map(str::to_owned),
        payment_intent: payment_intent.map(str::to_owned),
        customer: customer.map(str::to_owned),
        subscription: loose_id_at(object, "/subscription").map(str::to_owned),
        owner,
        credit,
        announces: if failed {
            "checkout.failed"
        } else {
            "checkout.completed"
        },
        amount_total,
        currency,
    }))
}

/// `customer.created/updated`: a customer whose metadata names its owner
/// teaches it.
fn customer(event: &Event) -> Result<Effect, Reason> {
    let object = event.object();
    let id = required_ident(object, "/id", "customer id", "customer has no id")?;
    let found = candidates(
        event.owner_rule(),
        object,
        Clues {
            metadata: &["/metadata"],
            ..Clues::default()
        },
    )?;
    Ok(match first_named(&found) {
        Some(owner) => Effect::LearnCustomer {
            customer: id.to_owned(),
            user_id: owner.to_owned(),
        },
        None => Effect::Ignored("the customer's metadata names no owner"),
    })
}

/// `invoice_payment.paid`: the payment intent that paid an invoice is the
/// invoice's (current API versions join them only here).
fn invoice_payment(event: &Event) -> Result<Effect, Reason> {
    let object = event.object();
    let invoice = id_at(object, "/invoice", "invoice payment invoice")?
        .ok_or("invoice payment has no invoice")?;
    Ok(
        match id_at(
            object,
            "/payment/payment_intent",
            "invoice payment payment_intent",
        )? {
            Some(intent) => Effect::InvoicePayment {
                payment: intent.to_owned(),
                invoice: invoice.to_owned(),
            },
            None => Effect::Ignored("the invoice was not paid by a payment intent"),
        },
    )
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

/// An `invoice.paid` object, validated: its owner is the one its metadata
/// names by the source's rule, else its customer's learned one.
fn invoice(event: &Event) -> Result<StripeInvoice, Reason> {
    let object = event.object();
    let owned = |id: Option<&str>| id.map(str::to_owned);
    let customer_id = loose_id_at(object, "/customer");
    let mut owner: Vec<Candidate> = named(event.owner_rule(), object, "/metadata")
        .map(Candidate::Named)
        .into_iter()
        .collect();
    owner.extend(customer_id.map(|c| Candidate::Customer(c.to_owned())));
    let payment_intent = match id_at(object, "/payment_intent", "invoice payment_intent")? {
        Some(intent) => Some(intent),
        None => id_at(
            object,
            "/payments/data/0/payment/payment_intent",
            "invoice payment_intent",
        )?,
    };
    let id = required_ident(object, "/id", "invoice id", "invoice has no id")?;
    let amount_paid_minor = object.pointer("/amount_paid").and_then(Value::as_i64);
    let currency = str_at(object, "/currency").and_then(currency);
    let credit = match (event.invoice_credits(), amount_paid_minor) {
        (true, Some(amount)) if amount > 0 => Some(Owed {
            currency: currency
                .ok_or("invoice has no ISO 4217 currency with a minor unit")?
                .to_owned(),
            amount_minor: amount,
            source_ref: id.to_owned(),
            context: json!({ "invoice_id": id }),
            customer: None,
        }),
        _ => None,
    };
    Ok(StripeInvoice {
        id: id.to_owned(),
        customer_id: owned(customer_id),
        subscription_id: owned(loose_id_at(object, "/subscription")),
        owner,
        payment_intent: owned(payment_intent),
        credit,
        amount_paid_minor,
        currency,
    })
}

/// `customer.subscription.*`: the guarded upsert, ordered by the event's
/// `created`.
fn subscription(event: &Event) -> Result<Effect, Reason> {
    let next = parse_subscription(event.object(), event.owner_rule())?;
    Effect::subscription(next, event)
}

fn parse_subscription(object: &Value, rule: &Rule) -> Result<Subscription, Reason> {
    let missing = "subscription has no id or status";
    Ok(Subscription {
        provider: PROVIDER.to_owned(),
        subscription_id: required_ident(object, "/id", "subscription id", missing)?.to_owned(),
        customer_id: loose_id_at(object, "/customer").map(str::to_owned),
        user_id: named(rule, object, "/metadata"),
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
        let intent = payment_intent_owing(&object).unwrap().named().unwrap();
        assert_eq!(
            (intent.amount_minor, intent.currency.as_str()),
            (400, "USD")
        );
        let object =
            json!({"id": "pi_1", "amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}});
        assert_eq!(
            payment_intent_owing(&object)
                .unwrap()
                .named()
                .unwrap()
                .amount_minor,
            500
        );
        let object = json!({"id": "pi_1", "amount": 500, "amount_received": null,
                            "currency": "usd", "metadata": {"user_id": "u1"}});
        assert_eq!(
            payment_intent_owing(&object)
                .unwrap()
                .named()
                .unwrap()
                .amount_minor,
            500
        );
    }

    #[test]
    fn malformed_payment_intents_are_refused_with_a_reason() {
        for object in [
            json!({"id": "pi_1", "amount": "500", "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi_1", "amount": -5, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi_1", "amount": 500, "currency": "dollars", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi_1", "amount": 500, "currency": "zzz", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi\u{0}1", "amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi_".repeat(100), "amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!("not an object"),
        ] {
            assert!(payment_intent_owing(&object).is_err(), "{object}");
        }
    }
}
