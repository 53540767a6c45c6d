//! Razorpay's effects (DESIGN.md). The wallet owner is `notes.user_id` on the
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

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::money::{self, Credit, Debit};
use super::{Applied, currency, owner_at, str_at, unix_at};
use crate::ledger::{self, EntryKind};
use crate::payments::{self, Payment};
use crate::providers::VerifiedEvent;
use crate::subscriptions::Subscription;

pub use crate::providers::razorpay::PROVIDER;

pub async fn apply(conn: &mut PgConnection, event: &VerifiedEvent) -> Result<Applied, sqlx::Error> {
    match event.event_type() {
        "payment.captured" => captured(conn, event).await,
        "payment.failed" => failed(conn, event).await,
        "refund.processed" => refund(conn, event).await,
        kind if kind.starts_with("subscription.") => subscription(conn, event).await,
        _ => Ok(Applied::ignored("event type has no effect")),
    }
}

async fn captured(conn: &mut PgConnection, event: &VerifiedEvent) -> Result<Applied, sqlx::Error> {
    let payment = match RazorpayPayment::parse(event.object()) {
        Ok(payment) => payment,
        Err(reason) => return Ok(Applied::rejected(reason)),
    };
    let Some(user_id) = payment.user_id else {
        return Ok(Applied::rejected("payment has no notes.user_id"));
    };
    if payment.amount_minor <= 0 {
        return Ok(Applied::rejected("payment has no positive amount"));
    }
    // The credit's lock before the payment row, as refunds take them.
    money::lock_credit(conn, PROVIDER, payment.id).await?;
    payments::upsert(conn, &payment.row(), Some(event.event_id())).await?;
    let credit = Credit {
        user_id,
        currency: &payment.currency,
        amount_minor: payment.amount_minor,
        source_ref: payment.id,
        context: json!({ "payment_id": payment.id, "order_id": payment.order_id }),
    };
    money::credit(conn, event, credit).await
}

async fn failed(conn: &mut PgConnection, event: &VerifiedEvent) -> Result<Applied, sqlx::Error> {
    let payment = match RazorpayPayment::parse(event.object()) {
        Ok(payment) => payment,
        Err(reason) => return Ok(Applied::rejected(reason)),
    };
    payments::upsert(conn, &payment.row(), None).await?;
    Ok(Applied::processed(json!({ "payment_id": payment.id })))
}

/// Debits one refund (its own amount, never more than is left of the
/// credit), once per `rfnd_...`; deferred until the payment is credited.
async fn refund(conn: &mut PgConnection, event: &VerifiedEvent) -> Result<Applied, sqlx::Error> {
    let object = event.object();
    let (Some(refund_id), Some(payment_id)) = (
        str_at(object, "/refund/entity/id"),
        str_at(object, "/refund/entity/payment_id"),
    ) else {
        return Ok(Applied::rejected("refund has no id or payment_id"));
    };
    let Some(amount_minor) = object
        .pointer("/refund/entity/amount")
        .and_then(Value::as_i64)
        .filter(|amount| *amount > 0)
    else {
        return Ok(Applied::rejected("refund has no positive integer amount"));
    };
    // The payment entity usually rides along; keep its refunded state.
    let payment = RazorpayPayment::parse(object).ok();

    money::lock_credit(conn, PROVIDER, payment_id).await?;
    if let Some(payment) = &payment {
        payments::upsert(conn, &payment.row(), None).await?;
    }
    let Some(credit) = money::credit_or_defer(conn, event, payment_id).await? else {
        return Ok(Applied::deferred(payment_id));
    };
    if let Some(owner) = ledger::find(conn, PROVIDER, EntryKind::Refund, refund_id).await? {
        return Ok(Applied::owned_by(
            "this refund was already debited",
            &owner.event_id,
        ));
    }
    let refunded = ledger::refunded(conn, PROVIDER, payment_id, "").await?;
    let amount_minor = amount_minor.min(credit.amount_minor - refunded.total_minor);
    if amount_minor <= 0 {
        return Ok(Applied::ignored("the credit is already fully refunded"));
    }
    let debit = Debit {
        credit: &credit,
        parent_ref: payment_id,
        source_ref: refund_id,
        amount_minor,
        context: json!({ "payment_id": payment_id, "refund_id": refund_id }),
    };
    money::debit(conn, event, debit).await
}

async fn subscription(
    conn: &mut PgConnection,
    event: &VerifiedEvent,
) -> Result<Applied, sqlx::Error> {
    let Some(entity) = event.object().pointer("/subscription/entity") else {
        return Ok(Applied::rejected("no subscription entity"));
    };
    let (Some(subscription_id), Some(status)) = (str_at(entity, "/id"), str_at(entity, "/status"))
    else {
        return Ok(Applied::rejected("subscription has no id or status"));
    };
    let next = Subscription {
        provider: PROVIDER.to_owned(),
        subscription_id: subscription_id.to_owned(),
        customer_id: str_at(entity, "/customer_id").map(str::to_owned),
        user_id: owner_at(entity, "/notes/user_id").map(str::to_owned),
        status: status.to_owned(),
        plan_id: str_at(entity, "/plan_id").map(str::to_owned),
        current_period_end: unix_at(entity, "/current_end"),
    };
    // Ordered by the envelope's created_at, never the entity's own.
    super::apply_subscription(conn, event, next).await
}

/// The payment entity of a Razorpay event, validated.
struct RazorpayPayment<'a> {
    id: &'a str,
    order_id: Option<&'a str>,
    user_id: Option<&'a str>,
    amount_minor: i64,
    refunded_minor: i64,
    currency: String,
    status: &'a str,
    created: Option<i64>,
}

impl<'a> RazorpayPayment<'a> {
    fn parse(payload: &'a Value) -> Result<Self, &'static str> {
        let entity = payload
            .pointer("/payment/entity")
            .ok_or("no payment entity")?;
        let id = str_at(entity, "/id").ok_or("payment has no id")?;
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
        let currency = str_at(entity, "/currency")
            .and_then(currency)
            .ok_or("payment has no three-letter currency")?;
        let status = super::refund_status(amount_minor, refunded_minor)
            .or_else(|| str_at(entity, "/status"))
            .unwrap_or("captured");
        Ok(RazorpayPayment {
            id,
            order_id: str_at(entity, "/order_id"),
            user_id: owner_at(entity, "/notes/user_id"),
            amount_minor,
            refunded_minor,
            currency,
            status,
            created: unix_at(entity, "/created_at"),
        })
    }

    fn row(&self) -> Payment<'_> {
        Payment {
            provider: PROVIDER,
            payment_id: self.id,
            payment_ref: self.order_id,
            user_id: self.user_id,
            amount_minor: self.amount_minor,
            currency: &self.currency,
            status: self.status,
            refunded_minor: self.refunded_minor,
            created: self.created,
        }
    }
}
