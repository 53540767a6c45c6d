//! PayPal's decoder (the README's "PayPal" section). The wallet owner is
//! the capture's `custom_id`; amounts are decimal strings in
//! `amount.currency_code`, read exactly into its minor unit.
//!
//! | event type | effect |
//! |---|---|
//! | `PAYMENT.CAPTURE.COMPLETED` | upsert the payment; credit `custom_id`, keyed by the capture id |
//! | `PAYMENT.CAPTURE.PENDING`, `.DECLINED`, `.DENIED` | upsert the payment (recorded only) |
//! | `PAYMENT.CAPTURE.REFUNDED`, `.REVERSED` | debit the refund, keyed by its id; deferred until its capture (its `up` link) is credited |
//! | `BILLING.SUBSCRIPTION.*` | guarded upsert on the event's time, `subscription.changed` |

mod resources;

use super::effect::{Effect, Reason, RefundRow};
use crate::providers::Event;

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

/// The capture events with an effect, which a PayPal webhook must be
/// subscribed to (`doctor` checks it); subscription events besides.
pub const CAPTURE_TYPES: [&str; 6] = [
    COMPLETED,
    RECORDED[0],
    RECORDED[1],
    RECORDED[2],
    REFUNDS[0],
    REFUNDS[1],
];

/// What `event` does.
pub(super) fn decode(event: &Event) -> Effect {
    let resource = event.object();
    Effect::from_result(match event.event_type() {
        // Its payment row, then its credit.
        COMPLETED => capture(event),
        // A pending, declined or denied capture: its row's status only,
        // which never moves a completed capture back.
        kind if RECORDED.contains(&kind) => resources::capture(resource, kind).map(Effect::Status),
        kind if REFUNDS.contains(&kind) => refund(event),
        // Ordered by the event's time: `create_time`, else the resource's
        // `update_time`, else the delivery's.
        kind if kind.starts_with(SUBSCRIPTION) => {
            resources::subscription(resource).and_then(|next| Effect::subscription(next, event))
        }
        _ => Ok(Effect::Ignored("event type has no effect")),
    })
}

/// A completed capture: its row, then its credit.
fn capture(event: &Event) -> Result<Effect, Reason> {
    let payment = resources::capture(event.object(), event.event_type())?;
    let credit = resources::capture_credit(event.object(), &payment)?;
    Ok(Effect::Credit {
        credit,
        payment: Some(payment),
    })
}

/// One refund (or reversal) of a capture, debited once per refund id; one
/// whose status says it did not go through debits nothing.
fn refund(event: &Event) -> Result<Effect, Reason> {
    Ok(match resources::refund(event.object())? {
        Some(refund) => Effect::Refund {
            refund,
            row: RefundRow::FromLedger,
        },
        None => Effect::Ignored("the refund did not go through"),
    })
}
