//! Razorpay's effects (the README's "Razorpay" section). The wallet owner is `notes.user_id` on the
//! payment entity (`notes` may be an empty array); amounts are in paise (the
//! currency's minor unit).
//!
//! | event | effect |
//! |---|---|
//! | `payment.captured` | upsert the payment; credit the owner, keyed by `pay_...` |
//! | `payment.failed` | upsert the payment (recorded only) |
//! | `refund.processed` | debit the refund, keyed by `rfnd_...`; deferred until the payment is credited |
//! | `subscription.*` | guarded upsert on the envelope's `created_at`, `subscription.changed` |
//!
//! Everything else, `order.paid` included, is recorded `ignored`: the
//! payment's own `payment.captured` carries the credit, so a replay under a
//! new (unsigned) event id and `order.paid` credit nothing more.

use super::Error;
use serde_json::{Value, json};
use sqlx::PgConnection;

use super::credits::{self, PaymentRow};
use super::money::{Credit, PlainCredit};
use super::plan::{Plan, credit_key, subscription_key};
use super::refunds::{self, OwnRefund, RefundRow};
use super::{Applied, Reason, currency_at, loose_ident_at, owner_at, required_ident, unix_at};
use crate::payments::Payment;
use crate::providers::Event;
use crate::subscriptions::Subscription;

pub use crate::providers::razorpay::PROVIDER;

pub async fn apply(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    match event.event_type() {
        // Its payment row, then its credit: through the credits' shared
        // path, as when it shares statements with other credits.
        "payment.captured" => credits::apply_capture(conn, event, &capture(event)).await,
        "payment.failed" => {
            credits::record_status(conn, &RazorpayPayment::parse(event.object())).await
        }
        "refund.processed" => refund(conn, event).await,
        kind if kind.starts_with("subscription.") => subscription(conn, event).await,
        _ => Ok(Applied::ignored("event type has no effect")),
    }
}

/// What `event` will lock ([`super::plan`]), from the same parse as its
/// effect: every payment's row, credit and refunds under its credit's key.
pub(super) fn plan(event: &Event) -> Plan {
    let object = event.object();
    match event.event_type() {
        // Its payment row, then its credit: it may share statements with
        // other credits.
        "payment.captured" => match capture(event) {
            Ok((payment, credit)) => {
                Plan::crediting(PROVIDER, payment.id, PlainCredit::from(credit), true)
            }
            Err(_) => Plan::default(),
        },
        "payment.failed" => match RazorpayPayment::parse(object) {
            Ok(payment) => Plan::keyed(vec![credit_key(PROVIDER, payment.id)]),
            Err(_) => Plan::default(),
        },
        "refund.processed" => match Refund::parse(object) {
            Ok(refund) => Plan::debiting(PROVIDER, refund.payment_id),
            Err(_) => Plan::default(),
        },
        kind if kind.starts_with("subscription.") => match parse_subscription(object) {
            Ok(next) => Plan::keyed(vec![subscription_key(PROVIDER, &next.subscription_id)]),
            Err(_) => Plan::default(),
        },
        _ => Plan::default(),
    }
}

/// A well-formed capture's payment and credit, or why it can never apply.
pub(super) fn capture(event: &Event) -> Result<(RazorpayPayment<'_>, Credit<'_>), Reason> {
    let payment = RazorpayPayment::parse(event.object())?;
    // The owner is the credit's key: it must be an identifier.
    let owner = event.object().pointer("/payment/entity");
    let user_id = match owner.map(|entity| owner_at(entity, "/notes/user_id")) {
        Some(Ok(Some(user_id))) => user_id,
        Some(Err(reason)) => return Err(reason),
        _ => return Err("payment has no notes.user_id".into()),
    };
    if payment.amount_minor <= 0 {
        return Err("payment has no positive amount".into());
    }
    let credit = Credit {
        user_id,
        currency: payment.currency,
        amount_minor: payment.amount_minor,
        source_ref: payment.id,
        context: json!({ "payment_id": payment.id, "order_id": payment.order_id }),
    };
    Ok((payment, credit))
}

/// Debits one refund, once per `rfnd_...` ([`refunds::debit_own_refund`]),
/// recording the payment entity that rides along. A refund carrying another
/// payment's entity is rejected before anything is written: a refund only
/// touches the payment it refunds.
async fn refund(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    match Refund::parse(event.object()) {
        Ok(refund) => {
            let payment = refund.payment.as_ref().map(RazorpayPayment::row);
            refunds::debit_own_refund(conn, event, refund.own(), RefundRow::Carried(payment)).await
        }
        Err(reason) => Ok(Applied::rejected(reason)),
    }
}

async fn subscription(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    match parse_subscription(event.object()) {
        // Ordered by the envelope's created_at, never the entity's own.
        Ok(next) => super::apply_subscription(conn, event, next).await,
        Err(reason) => Ok(Applied::rejected(reason)),
    }
}

fn parse_subscription(payload: &Value) -> Result<Subscription, Reason> {
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

/// A `refund.processed` refund entity, validated, with the payment entity
/// that rides along (which must be the refunded payment's).
struct Refund<'a> {
    id: &'a str,
    payment_id: &'a str,
    amount_minor: i64,
    currency: &'static str,
    payment: Option<RazorpayPayment<'a>>,
}

impl<'a> Refund<'a> {
    fn parse(payload: &'a Value) -> Result<Self, Reason> {
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
            Some(_) => Some(RazorpayPayment::parse(payload)?),
            None => None,
        };
        if let Some(payment) = &payment {
            if payment.id != payment_id {
                return Err("the refund carries another payment's entity".into());
            }
            if payment.currency != currency {
                return Err("the refund's currency differs from its payment's".into());
            }
            if amount_minor > payment.amount_minor {
                return Err("the refund is larger than its payment".into());
            }
        }
        Ok(Refund {
            id,
            payment_id,
            amount_minor,
            currency,
            payment,
        })
    }

    /// What it debits: its own amount, keyed by its id.
    fn own(&self) -> OwnRefund<'a> {
        OwnRefund {
            id: self.id,
            payment_id: self.payment_id,
            amount_minor: self.amount_minor,
            currency: self.currency,
            context: json!({ "payment_id": self.payment_id, "refund_id": self.id }),
        }
    }
}

/// The payment entity of a Razorpay event, validated: its refunded amount
/// never exceeds its amount.
pub(super) struct RazorpayPayment<'a> {
    id: &'a str,
    order_id: Option<&'a str>,
    user_id: Option<&'a str>,
    amount_minor: i64,
    refunded_minor: i64,
    currency: &'static str,
    status: &'a str,
    created: Option<i64>,
}

impl<'a> RazorpayPayment<'a> {
    fn parse(payload: &'a Value) -> Result<Self, Reason> {
        let entity = payload
            .pointer("/payment/entity")
            .ok_or("no payment entity")?;
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
        let status = match super::refund_status(amount_minor, refunded_minor) {
            Some(status) => status,
            None => loose_ident_at(entity, "/status").unwrap_or("captured"),
        };
        Ok(RazorpayPayment {
            id,
            order_id: loose_ident_at(entity, "/order_id"),
            user_id: loose_ident_at(entity, "/notes/user_id"),
            amount_minor,
            refunded_minor,
            currency: currency_at(entity, "/currency", "payment")?,
            status,
            created: unix_at(entity, "/created_at"),
        })
    }
}

impl PaymentRow for RazorpayPayment<'_> {
    fn row(&self) -> Payment<'_> {
        Payment {
            provider: PROVIDER,
            payment_id: self.id,
            payment_ref: self.order_id,
            user_id: self.user_id,
            amount_minor: self.amount_minor,
            currency: self.currency,
            status: self.status,
            refunded_minor: self.refunded_minor,
            created: self.created,
        }
    }
}
