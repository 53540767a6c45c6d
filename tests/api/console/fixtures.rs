//! What the console's tests set up through the real paths: dead outbox
//! rows, a deferred refund ready to replay, Razorpay deliveries.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::clock::Clock;

use crate::drain::sink::TestSink;
use crate::helpers::{RAZORPAY_SECRETS, TestApp, charge, now};

/// Delivers every outbox row now due to a sink that answers `status`,
/// with a single attempt allowed: each dies with `HTTP {status}` as its
/// last error, as a failing sink leaves them. Returns how many died.
pub async fn kill_due_rows(app: &TestApp, status: u16) -> usize {
    let sink = TestSink::start().await;
    let drainer = sink.drainer(app.pool.clone(), Clock::System, 1);
    let mut died = 0;
    loop {
        sink.script(&[(status, None); 50]);
        let drained = drainer.drain_once().await.unwrap();
        assert_eq!(drained.dead, drained.leased, "every row leased died");
        if drained.leased == 0 {
            return died;
        }
        died += drained.dead;
    }
}

/// The ids of the dead rows, in order.
pub async fn dead_ids(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar(
        "select id from outbox where dead_at is not null and delivered_at is null order by id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A refund of `pi_1` (700 of user_1's USD), deferred because its credit
/// had not come, and then that credit written by hand (as a repair would)
/// without the event that would have applied the waiting refund: a replay
/// of `evt_refund` now applies it and changes its stored outcome.
pub async fn deferred_refund_with_its_credit_repaired(app: &TestApp) {
    repaired_deferred_refund(app, "evt_refund", "ch_1", "pi_1", "user_1").await;
}

/// [`deferred_refund_with_its_credit_repaired`] under other ids.
pub async fn repaired_deferred_refund(
    app: &TestApp,
    event_id: &str,
    charge_id: &str,
    intent: &str,
    user_id: &str,
) {
    let body = charge(event_id, "charge.refunded", charge_id, intent, 700, 700)
        .replace("\"user_1\"", &format!("\"{user_id}\""));
    app.deliver(&body, "deferred").await;
    sqlx::query("insert into wallets (user_id, currency, balance_minor) values ($1, 'USD', 700)")
        .bind(user_id)
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query(
        "insert into wallet_entries (user_id, currency, amount_minor, kind, provider, source_ref, event_id)
         values ($1, 'USD', 700, 'credit', 'stripe', $2, $3)",
    )
    .bind(user_id)
    .bind(intent)
    .bind(event_id)
    .execute(&app.pool)
    .await
    .unwrap();
}

/// Delivers a Razorpay event under `event_id` and expects `outcome`.
pub async fn deliver_razorpay(app: &TestApp, event_id: &str, body: &str, outcome: &str) {
    let signature = webhookd::providers::razorpay::signature(RAZORPAY_SECRETS.0, body.as_bytes());
    let headers = [
        ("x-razorpay-signature".to_owned(), signature),
        ("x-razorpay-event-id".to_owned(), event_id.to_owned()),
    ];
    let response = app
        .post_to("razorpay", body.as_bytes().to_vec(), &headers)
        .await;
    assert_eq!(response.status(), StatusCode::OK, "{body}");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["outcome"], outcome, "{body}");
}

/// A Razorpay payment entity of user_1, in INR.
fn razorpay_payment(payment: &str, amount: i64, refunded: i64) -> Value {
    json!({ "entity": {
        "id": payment, "entity": "payment", "amount": amount, "currency": "INR",
        "status": "captured", "order_id": "order_1", "method": "upi",
        "amount_refunded": refunded, "captured": true, "notes": {"user_id": "user_1"},
        "created_at": now(),
    }})
}

pub fn razorpay_captured(payment: &str, amount: i64) -> String {
    json!({
        "entity": "event", "account_id": "acc_1", "event": "payment.captured",
        "contains": ["payment"], "created_at": now(),
        "payload": { "payment": razorpay_payment(payment, amount, 0) },
    })
    .to_string()
}

pub fn razorpay_refund(refund: &str, payment: &str, amount: i64) -> String {
    json!({
        "entity": "event", "account_id": "acc_1", "event": "refund.processed",
        "contains": ["refund", "payment"], "created_at": now(),
        "payload": {
            "refund": {"entity": {"id": refund, "entity": "refund", "amount": amount, "currency": "INR",
                                  "payment_id": payment, "status": "processed", "notes": []}},
            "payment": razorpay_payment(payment, 5000, amount),
        },
    })
    .to_string()
}
