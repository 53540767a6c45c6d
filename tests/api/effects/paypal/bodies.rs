//! PayPal-shaped events (webhook envelope v1.0, resources of the v2 APIs,
//! trimmed to what PayPal sends) and their delivery. PayPal's signature
//! check is not mounted here: events are built as stored ones
//! (`Event::from_stored`) and applied through `ingest`, exactly what a
//! verified delivery is handed to.

use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::ingest::{self, Receipt};
use webhookd::providers::Event;

/// The simulator's sample time: month 19 does not exist.
pub const IMPOSSIBLE_TIME: &str = "2018-19-12T22:20:32Z";

/// RFC 3339 (UTC, seconds) of Unix time `t`.
pub fn rfc3339(t: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_secs(t.try_into().unwrap());
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A webhook envelope around `resource`, created at `create_time`.
pub fn envelope(id: &str, event_type: &str, create_time: &str, resource: Value) -> Value {
    let resource_type = match event_type {
        t if t.starts_with("BILLING.SUBSCRIPTION.") => "subscription",
        "PAYMENT.CAPTURE.REFUNDED" | "PAYMENT.CAPTURE.REVERSED" => "refund",
        _ => "capture",
    };
    let hook = format!("https://api.paypal.com/v1/notifications/webhooks-events/{id}");
    json!({
        "id": id,
        "event_version": "1.0",
        "create_time": create_time,
        "resource_type": resource_type,
        "resource_version": "2.0",
        "event_type": event_type,
        "summary": format!("{event_type} (test)"),
        "resource": resource,
        "links": [
            { "href": hook, "rel": "self", "method": "GET" },
            { "href": format!("{hook}/resend"), "rel": "resend", "method": "POST" },
        ],
    })
}

fn money(value: &str, currency: &str) -> Value {
    json!({ "currency_code": currency, "value": value })
}

/// A capture resource of `value` in `currency`, paid for `custom_id`.
pub fn capture(
    id: &str,
    status: &str,
    value: &str,
    currency: &str,
    custom_id: Option<&str>,
) -> Value {
    let at = rfc3339(crate::helpers::now());
    let captures = format!("https://api.paypal.com/v2/payments/captures/{id}");
    let mut resource = json!({
        "id": id,
        "status": status,
        "amount": money(value, currency),
        "final_capture": true,
        "seller_protection": { "status": "ELIGIBLE", "dispute_categories": ["ITEM_NOT_RECEIVED"] },
        "seller_receivable_breakdown": {
            "gross_amount": money(value, currency),
            "paypal_fee": money("0", currency),
            "net_amount": money(value, currency),
        },
        "links": [
            { "href": captures, "rel": "self", "method": "GET" },
            { "href": format!("{captures}/refund"), "rel": "refund", "method": "POST" },
            { "href": "https://api.paypal.com/v2/checkout/orders/5O190127TN364715T", "rel": "up", "method": "GET" },
        ],
        "create_time": at,
        "update_time": at,
    });
    if let Some(custom_id) = custom_id {
        resource["custom_id"] = json!(custom_id);
    }
    resource
}

/// A completed USD capture for `user`: the common case.
pub fn completed(event_id: &str, capture_id: &str, value: &str, user: &str) -> Value {
    let resource = capture(capture_id, "COMPLETED", value, "USD", Some(user));
    envelope(
        event_id,
        "PAYMENT.CAPTURE.COMPLETED",
        &rfc3339(crate::helpers::now()),
        resource,
    )
}

/// A refund resource of `value` in `currency` of capture `capture_id`.
pub fn refund(id: &str, capture_id: &str, value: &str, currency: &str) -> Value {
    let at = rfc3339(crate::helpers::now());
    json!({
        "id": id,
        "amount": money(value, currency),
        "seller_payable_breakdown": {
            "gross_amount": money(value, currency),
            "net_amount": money(value, currency),
            "total_refunded_amount": money(value, currency),
        },
        "status": "COMPLETED",
        "links": [
            { "href": format!("https://api.paypal.com/v2/payments/refunds/{id}"), "rel": "self", "method": "GET" },
            { "href": format!("https://api.paypal.com/v2/payments/captures/{capture_id}"), "rel": "up", "method": "GET" },
        ],
        "create_time": at,
        "update_time": at,
    })
}

/// A `PAYMENT.CAPTURE.REFUNDED` event of a USD refund.
pub fn refunded(event_id: &str, refund_id: &str, capture_id: &str, value: &str) -> Value {
    let resource = refund(refund_id, capture_id, value, "USD");
    envelope(
        event_id,
        "PAYMENT.CAPTURE.REFUNDED",
        &rfc3339(crate::helpers::now()),
        resource,
    )
}

/// A subscription resource, last updated at `updated`.
pub fn subscription(id: &str, status: &str, updated: i64) -> Value {
    json!({
        "id": id,
        "plan_id": "P-5ML4271244454362WXNWU5NQ",
        "start_time": rfc3339(updated - 86_400),
        "quantity": "1",
        "status": status,
        "status_update_time": rfc3339(updated),
        "custom_id": "user_1",
        "subscriber": {
            "payer_id": "2J6QB8YJQSJRJ",
            "email_address": "customer@example.com",
            "name": { "given_name": "John", "surname": "Doe" },
        },
        "billing_info": {
            "outstanding_balance": money("0.00", "USD"),
            "last_payment": { "amount": money("10.00", "USD"), "time": rfc3339(updated) },
            "next_billing_time": rfc3339(updated + 2_592_000),
            "failed_payments_count": 0,
        },
        "create_time": rfc3339(updated - 86_400),
        "update_time": rfc3339(updated),
        "links": [{ "href": format!("https://api.paypal.com/v1/billing/subscriptions/{id}"), "rel": "self", "method": "GET" }],
    })
}

/// A `BILLING.SUBSCRIPTION.{kind}` event of subscription `id`, created at `created`.
pub fn subscription_event(
    event_id: &str,
    kind: &str,
    id: &str,
    status: &str,
    created: i64,
) -> Value {
    let resource = subscription(id, status, created);
    envelope(
        event_id,
        &format!("BILLING.SUBSCRIPTION.{kind}"),
        &rfc3339(created),
        resource,
    )
}

/// `body` as the event webhookd applies.
pub fn event(body: &Value) -> Event {
    let id = body["id"].as_str().unwrap_or_default();
    let kind = body["event_type"].as_str().unwrap_or_default();
    Event::from_stored("paypal", id, kind, Bytes::from(body.to_string())).expect("an envelope")
}

/// Applies `body` in its own transaction, as a verified delivery would be.
pub async fn deliver(pool: &PgPool, body: &Value) -> Receipt {
    ingest::ingest(pool, &event(body)).await.expect("applied")
}
