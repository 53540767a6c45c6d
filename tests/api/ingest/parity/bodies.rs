//! Event bodies as the providers send them, trimmed to what webhookd reads,
//! verified the way stored events are.

use bytes::Bytes;
use serde_json::{Value, json};
use webhookd::providers::{self, Event};

/// The events' own times count from here: fixed, so that a seed replays
/// the same bodies on any day.
pub(super) const T0: i64 = 1_767_225_600;

pub(super) fn event(provider: &str, event_id: &str, event_type: &str, body: String) -> Event {
    providers::Event::from_stored(provider, event_id, event_type, Bytes::from(body))
        .unwrap_or_else(|e| panic!("{provider} event {event_id} does not parse: {e}"))
}

pub(super) fn stripe_event(event_id: &str, event_type: &str, created: i64, object: Value) -> Event {
    let body = json!({
        "id": event_id, "object": "event", "api_version": "2024-06-20", "created": created,
        "data": { "object": object }, "livemode": false, "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null }, "type": event_type,
    });
    event("stripe", event_id, event_type, body.to_string())
}

/// A succeeded intent whose metadata names its owner; of the owner's
/// customer, which it teaches.
pub(super) fn payment_intent(id: &str, user: &str, currency: &str, amount: i64) -> Value {
    json!({
        "id": id, "object": "payment_intent", "amount": amount, "amount_received": amount,
        "currency": currency, "customer": format!("cus_{user}"),
        "metadata": { "user_id": user }, "status": "succeeded",
    })
}

pub(super) fn stripe_charge(
    id: &str,
    intent: &str,
    user: &str,
    currency: &str,
    amount: i64,
    refunded: i64,
) -> Value {
    json!({
        "id": id, "object": "charge", "amount": amount, "amount_captured": amount,
        "amount_refunded": refunded, "currency": currency, "payment_intent": intent,
        "metadata": { "user_id": user }, "refunded": refunded >= amount,
        "status": "succeeded", "created": T0 + 5,
    })
}

pub(super) fn razorpay_event(
    event_id: &str,
    event_type: &str,
    payload: Value,
    created: i64,
) -> Event {
    let contains: Vec<String> = payload
        .as_object()
        .map_or(vec![], |p| p.keys().cloned().collect());
    let body = json!({
        "entity": "event", "account_id": "acc_parity", "event": event_type,
        "contains": contains, "payload": payload, "created_at": created,
    });
    event("razorpay", event_id, event_type, body.to_string())
}

pub(super) fn razorpay_payment_entity(
    id: &str,
    user: &str,
    currency: &str,
    amount: i64,
    refunded: i64,
    status: &str,
) -> Value {
    json!({ "entity": {
        "id": id, "entity": "payment", "amount": amount, "currency": currency,
        "status": status, "order_id": format!("order_{}", id.trim_start_matches("pay_")),
        "amount_refunded": refunded, "notes": { "user_id": user }, "created_at": T0 + 3,
    }})
}
