//! PayPal's effects (the README's "PayPal" section). The wallet owner is
//! the capture's `custom_id`; amounts are decimal strings in
//! `amount.currency_code`, read exactly into its minor unit.
//!
//! | event type | effect |
//! |---|---|
//! | `PAYMENT.CAPTURE.COMPLETED` | upsert the payment; credit `custom_id`, keyed by the capture id |
//! | `PAYMENT.CAPTURE.PENDING`, `.DECLINED`, `.DENIED` | upsert the payment (recorded only) |
//! | `PAYMENT.CAPTURE.REFUNDED`, `.REVERSED` | debit the refund, keyed by its id; deferred until its capture (its `up` link) is credited |
//! | `BILLING.SUBSCRIPTION.*` | guarded upsert on the event's time, `subscription.changed` |

use sqlx::PgConnection;

mod resources;

use super::money::PlainCredit;
use super::plan::{Plan, credit_key, subscription_key};
use super::refunds::{self, RefundRow};
use super::{Applied, Error, Reason, credits};
use crate::providers::Event;
use resources::{Capture, Refund, parse_subscription};

pub use crate::providers::paypal::PROVIDER;

const COMPLETED: &str = "PAYMENT.CAPTURE.COMPLETED";
/// Capture events that only record the payment's status.
const RECORDED: [&str; 3] = [
    "PAYMENT.CAPTURE.PENDING",
    "PAYMENT.CAPTURE.DECLINED",
    "PAYMENT.CAPTURE.DENIED",
];
/// Events whose resource is a refund of a capture.
const REFUNDS: [&str; 2] = ["PAYMENT.CAPTURE.REFUNDED", "PAYMENT.CAPTURE.REVERSED"];
const SUBSCRIPTION: &str = "BILLING.SUBSCRIPTION.";

pub async fn apply(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    match event.event_type() {
        // Its payment row, then its credit: through the credits' shared
        // path, as when it shares statements with other credits.
        COMPLETED => credits::apply_capture(conn, event, &capture(event)).await,
        // A pending, declined or denied capture: its row's status only,
        // which never moves a completed capture back.
        kind if RECORDED.contains(&kind) => {
            credits::record_status(conn, &Capture::parse(event.object(), kind)).await
        }
        kind if REFUNDS.contains(&kind) => refund(conn, event).await,
        kind if kind.starts_with(SUBSCRIPTION) => subscription(conn, event).await,
        _ => Ok(Applied::ignored("event type has no effect")),
    }
}

/// What `event` will lock ([`super::plan`]), from the same parse as its
/// effect: every capture's row, credit and refunds under its credit's key.
pub(super) fn plan(event: &Event) -> Plan {
    let resource = event.object();
    match event.event_type() {
        // Its payment row, then its credit: it may share statements with
        // other credits.
        COMPLETED => match capture(event) {
            Ok((capture, credit)) => Plan::crediting(PROVIDER, capture.id, credit, true),
            Err(_) => Plan::default(),
        },
        kind if RECORDED.contains(&kind) => match Capture::parse(resource, kind) {
            Ok(capture) => Plan::keyed(vec![credit_key(PROVIDER, capture.id)]),
            Err(_) => Plan::default(),
        },
        kind if REFUNDS.contains(&kind) => match Refund::parse(resource) {
            Ok(refund) => Plan::debiting(PROVIDER, refund.capture_id),
            Err(_) => Plan::default(),
        },
        kind if kind.starts_with(SUBSCRIPTION) => match parse_subscription(resource) {
            Ok(next) => Plan::keyed(vec![subscription_key(PROVIDER, &next.subscription_id)]),
            Err(_) => Plan::default(),
        },
        _ => Plan::default(),
    }
}

/// A completed capture and its credit, or why it can never apply.
pub(super) fn capture(event: &Event) -> Result<(Capture<'_>, PlainCredit), Reason> {
    let capture = Capture::parse(event.object(), event.event_type())?;
    let credit = PlainCredit::from(capture.credit()?);
    Ok((capture, credit))
}

/// Debits one refund (or reversal) of a capture, once per refund id
/// ([`refunds::debit_own_refund`]); one whose status says it did not go
/// through debits nothing.
async fn refund(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    match Refund::parse(event.object()) {
        Ok(refund) if refund.undone => Ok(Applied::ignored("the refund did not go through")),
        Ok(refund) => {
            refunds::debit_own_refund(conn, event, refund.own(), RefundRow::FromLedger).await
        }
        Err(reason) => Ok(Applied::rejected(reason)),
    }
}

async fn subscription(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    match parse_subscription(event.object()) {
        // Ordered by the event's time: `create_time`, else the resource's
        // `update_time`, else the delivery's.
        Ok(next) => super::apply_subscription(conn, event, next).await,
        Err(reason) => Ok(Applied::rejected(reason)),
    }
}
