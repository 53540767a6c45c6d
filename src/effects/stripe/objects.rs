//! Stripe's objects as the effects read them, validated: every id an
//! identifier, every currency ISO 4217, no refund above its charge.

use serde_json::{Value, json};

use super::PROVIDER;
use crate::effects::money::Credit;
use crate::effects::{
    Reason, currency, currency_at, id_at, loose_id_at, loose_ident_at, owner_at, refund_status,
    required_ident, str_at, unix_at,
};
use crate::payments::Payment;
use crate::subscriptions::Subscription;

pub(super) fn parse_subscription(object: &Value) -> Result<Subscription, Reason> {
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

/// An `invoice.paid` object, validated.
pub(super) struct Invoice<'a> {
    pub(super) id: &'a str,
    pub(super) customer_id: Option<&'a str>,
    pub(super) subscription_id: Option<&'a str>,
    pub(super) user_id: Option<&'a str>,
    pub(super) amount_paid_minor: Option<i64>,
    pub(super) currency: Option<&'static str>,
}

impl<'a> Invoice<'a> {
    pub(super) fn parse(object: &'a Value) -> Result<Self, Reason> {
        Ok(Invoice {
            id: required_ident(object, "/id", "invoice id", "invoice has no id")?,
            customer_id: loose_id_at(object, "/customer"),
            subscription_id: loose_id_at(object, "/subscription"),
            user_id: loose_ident_at(object, "/metadata/user_id"),
            amount_paid_minor: object.pointer("/amount_paid").and_then(Value::as_i64),
            currency: str_at(object, "/currency").and_then(currency),
        })
    }
}

/// A `payment_intent.succeeded` object, validated.
pub(super) struct PaymentIntent<'a> {
    pub(super) id: &'a str,
    pub(super) user_id: &'a str,
    pub(super) amount_minor: i64,
    pub(super) currency: &'static str,
}

impl<'a> PaymentIntent<'a> {
    pub(super) fn parse(object: &'a Value) -> Result<Self, Reason> {
        let id = required_ident(
            object,
            "/id",
            "payment intent id",
            "payment intent has no id",
        )?;
        let user_id = owner_at(object, "/metadata/user_id")?
            .ok_or("payment intent has no metadata.user_id")?;
        let amount_minor = object
            .get("amount_received")
            .filter(|amount| !amount.is_null())
            .or_else(|| object.get("amount"))
            .and_then(Value::as_i64)
            .filter(|amount| *amount > 0)
            .ok_or("payment intent has no positive integer amount_received or amount")?;
        Ok(PaymentIntent {
            id,
            user_id,
            amount_minor,
            currency: currency_at(object, "/currency", "payment intent")?,
        })
    }

    pub(super) fn credit(&self) -> Credit<'_> {
        Credit {
            user_id: self.user_id,
            currency: self.currency,
            amount_minor: self.amount_minor,
            source_ref: self.id,
            context: json!({ "payment_intent": self.id }),
        }
    }
}

/// A charge object (`charge.succeeded`, `charge.refunded`), validated: its
/// refunded amount never exceeds its amount.
pub(super) struct Charge<'a> {
    pub(super) id: &'a str,
    pub(super) payment_intent: Option<&'a str>,
    pub(super) user_id: Option<&'a str>,
    pub(super) amount_minor: i64,
    pub(super) amount_refunded_minor: i64,
    pub(super) currency: &'static str,
    pub(super) status: &'static str,
    pub(super) created: Option<i64>,
}

impl<'a> Charge<'a> {
    pub(super) fn parse(object: &'a Value) -> Result<Self, Reason> {
        let id = required_ident(object, "/id", "charge id", "charge has no id")?;
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
        if amount_refunded_minor > amount_minor {
            return Err("charge has an amount_refunded larger than its amount".into());
        }
        let status = refund_status(amount_minor, amount_refunded_minor).unwrap_or(
            match str_at(object, "/status") {
                Some("pending") => "pending",
                Some("failed") => "failed",
                _ => "succeeded",
            },
        );
        Ok(Charge {
            id,
            payment_intent: id_at(object, "/payment_intent", "charge payment_intent")?,
            user_id: loose_ident_at(object, "/metadata/user_id"),
            amount_minor,
            amount_refunded_minor,
            currency: currency_at(object, "/currency", "charge")?,
            status,
            created: unix_at(object, "/created"),
        })
    }

    pub(super) fn payment(&self) -> Payment<'_> {
        Payment {
            provider: PROVIDER,
            payment_id: self.id,
            payment_ref: self.payment_intent,
            user_id: self.user_id,
            amount_minor: self.amount_minor,
            currency: self.currency,
            status: self.status,
            refunded_minor: self.amount_refunded_minor,
            created: self.created,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payment_intent_prefers_amount_received() {
        let object = json!({"id": "pi_1", "amount": 500, "amount_received": 400,
                            "currency": "usd", "metadata": {"user_id": "u1"}});
        let intent = PaymentIntent::parse(&object).unwrap();
        assert_eq!((intent.amount_minor, intent.currency), (400, "USD"));
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
            json!({"id": "pi_1", "amount": 500, "currency": "zzz", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi\u{0}1", "amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"id": "pi_".repeat(100), "amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!({"amount": 500, "currency": "usd", "metadata": {"user_id": "u1"}}),
            json!("not an object"),
        ] {
            assert!(PaymentIntent::parse(&object).is_err(), "{object}");
        }
    }
}
