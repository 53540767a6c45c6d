//! PayPal's history for the property: a completed capture, two refunds of
//! it (each debits its own amount) and a subscription's four changes,
//! ordered by the envelopes' `create_time`. Its events are handed to
//! `ingest` as verified deliveries are (no PayPal verifier is mounted in
//! the test app).

use reqwest::StatusCode;
use serde_json::Value;
use sqlx::PgPool;
use webhookd::ingest;

use super::{AMOUNT, Provider, check};
use crate::effects::paypal::bodies::{
    capture, envelope, event, refund, rfc3339, subscription_event,
};
use crate::helpers::TestApp;

/// Each refund's own amount, in dollars (of [`AMOUNT`] cents).
const REFUNDS: [(&str, i64); 2] = [("3.00", 300), ("4.00", 400)];

pub(super) fn history(case: usize, t0: i64) -> Vec<(String, String)> {
    let id = |name: &str| format!("evt_{case}_{name}");
    let capture_id = format!("CAP-{case}");
    let value = format!("{}.{:02}", AMOUNT / 100, AMOUNT % 100);
    let owner = format!("user_{case}");
    let paid = capture(&capture_id, "COMPLETED", &value, "USD", Some(&owner));
    let mut events = vec![(
        id("credit"),
        envelope(
            &id("credit"),
            "PAYMENT.CAPTURE.COMPLETED",
            &rfc3339(t0),
            paid,
        ),
    )];
    for (n, (value, _)) in REFUNDS.into_iter().enumerate() {
        let resource = refund(&format!("REF-{case}-{n}"), &capture_id, value, "USD");
        let event_id = id(&format!("refund{n}"));
        let created = rfc3339(t0 + 1 + n as i64);
        let body = envelope(&event_id, "PAYMENT.CAPTURE.REFUNDED", &created, resource);
        events.push((event_id, body));
    }
    for (n, (kind, status)) in [
        ("CREATED", "APPROVAL_PENDING"),
        ("ACTIVATED", "ACTIVE"),
        ("SUSPENDED", "SUSPENDED"),
        ("CANCELLED", "CANCELLED"),
    ]
    .into_iter()
    .enumerate()
    {
        let event_id = id(&format!("sub{n}"));
        let at = t0 + 10 * (n as i64 + 1);
        let body = subscription_event(&event_id, kind, &format!("sub_{case}"), status, at);
        events.push((event_id, body));
    }
    events
        .into_iter()
        .map(|(id, body): (String, Value)| (id, body.to_string()))
        .collect()
}

/// What a delivery of `body` would be answered.
pub(super) async fn post(app: &TestApp, body: &str) -> StatusCode {
    let parsed: Value = serde_json::from_str(body).unwrap();
    match ingest::ingest(&app.pool, &event(&parsed)).await {
        Ok(_) => StatusCode::OK,
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[sqlx::test]
async fn any_order_of_a_paypal_history_with_copies_ends_in_the_in_order_state(pool: PgPool) {
    let refunded: i64 = REFUNDS.iter().map(|(_, minor)| minor).sum();
    let expected = (
        Some(AMOUNT - refunded),
        "partially_refunded".to_owned(),
        refunded,
        "CANCELLED".to_owned(),
        7,
        0,
    );
    check(pool, Provider::Paypal, expected).await;
}
