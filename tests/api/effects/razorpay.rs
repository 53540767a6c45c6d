//! Razorpay's effects, asserted in the tables.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::helpers::{RAZORPAY_SECRETS, TestApp, now, spawn_app};

fn envelope(event: &str, contains: &[&str], payload: Value, created_at: i64) -> String {
    json!({
        "entity": "event",
        "account_id": "acc_BFQ7uQEaa7j2z7",
        "event": event,
        "contains": contains,
        "payload": payload,
        "created_at": created_at,
    })
    .to_string()
}

fn payment_entity(payment: &str, amount: i64, refunded: i64, notes: Value) -> Value {
    json!({ "entity": {
        "id": payment, "entity": "payment", "amount": amount, "currency": "INR",
        "status": "captured", "order_id": "order_1", "method": "upi",
        "amount_refunded": refunded, "captured": true, "notes": notes, "created_at": now(),
    }})
}

fn captured(payment: &str, amount: i64) -> String {
    envelope(
        "payment.captured",
        &["payment"],
        json!({ "payment": payment_entity(payment, amount, 0, json!({"user_id": "user_1"})) }),
        now(),
    )
}

fn order_paid(payment: &str, amount: i64) -> String {
    envelope(
        "order.paid",
        &["payment", "order"],
        json!({
            "payment": payment_entity(payment, amount, 0, json!({"user_id": "user_1"})),
            "order": {"entity": {"id": "order_1", "entity": "order", "amount": amount, "status": "paid"}},
        }),
        now(),
    )
}

fn refund(refund: &str, payment: &str, amount: i64, refunded_so_far: i64) -> String {
    envelope(
        "refund.processed",
        &["refund", "payment"],
        json!({
            "refund": {"entity": {"id": refund, "entity": "refund", "amount": amount, "currency": "INR",
                                  "payment_id": payment, "status": "processed", "notes": []}},
            "payment": payment_entity(payment, 5000, refunded_so_far, json!({"user_id": "user_1"})),
        }),
        now(),
    )
}

fn subscription(status: &str, created_at: i64) -> String {
    envelope(
        &format!("subscription.{status}"),
        &["subscription"],
        json!({ "subscription": {"entity": {
            "id": "sub_1", "entity": "subscription", "plan_id": "plan_pro", "customer_id": "cust_1",
            "status": status, "current_end": created_at + 2_592_000, "notes": {"user_id": "user_1"},
            // The entity's own time is the same on every event: never the guard.
            "created_at": 1_700_000_000,
        }}}),
        created_at,
    )
}

impl TestApp {
    /// Delivers a Razorpay event (with `event_id` in `x-razorpay-event-id`
    /// when given) and expects 200 with `outcome` (any, when empty).
    async fn razorpay(&self, body: &str, event_id: Option<&str>, outcome: &str) -> Value {
        let signature =
            webhookd::providers::razorpay::signature(RAZORPAY_SECRETS.0, body.as_bytes());
        let mut headers = vec![("x-razorpay-signature".to_owned(), signature)];
        if let Some(id) = event_id {
            headers.push(("x-razorpay-event-id".to_owned(), id.to_owned()));
        }
        let response = self
            .post_to("razorpay", body.as_bytes().to_vec(), &headers)
            .await;
        assert_eq!(response.status(), reqwest::StatusCode::OK, "{body}");
        let answer: Value = response.json().await.unwrap();
        if !outcome.is_empty() {
            assert_eq!(answer["outcome"], outcome, "{body}");
        }
        answer
    }
}

#[sqlx::test]
async fn a_captured_payment_credits_once_however_it_is_redelivered(pool: PgPool) {
    let app = spawn_app(pool).await;
    let body = captured("pay_1", 5000);
    app.razorpay(&body, Some("evt_1"), "processed").await;
    app.razorpay(&body, Some("evt_1"), "duplicate").await;
    // The id header is not signed: a replay under a fresh id is a new event,
    // and the payment's natural key keeps it from crediting again.
    app.razorpay(&body, Some("evt_replayed"), "ignored").await;
    let (_, detail) = app.event_of("razorpay", "evt_replayed").await;
    assert_eq!(detail["owner_event_id"], "evt_1");
    // order.paid teaches the owner its notes name and credits nothing more.
    app.razorpay(&order_paid("pay_1", 5000), Some("evt_order"), "processed")
        .await;

    assert_eq!(app.balance("user_1", "INR").await, Some(5000));
    assert_eq!(app.count("wallet_entries").await, 1);
    let (status, amount, order): (String, i64, String) = sqlx::query_as(
        "select status, amount_minor, payment_ref from payments where provider = 'razorpay'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), amount, order.as_str()),
        ("captured", 5000, "order_1")
    );
    let topics: Vec<String> = sqlx::query_scalar("select topic from outbox")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(topics, ["wallet.credited"]);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn without_the_event_id_header_the_composite_key_dedupes(pool: PgPool) {
    let app = spawn_app(pool).await;
    let body = captured("pay_2", 700);
    let answer = app.razorpay(&body, None, "processed").await;
    let event_id = answer["event_id"].as_str().unwrap().to_owned();
    assert!(
        event_id.starts_with("payment.captured:pay_2:"),
        "{event_id}"
    );
    app.razorpay(&body, None, "duplicate").await;
    assert_eq!(app.count("processed_events").await, 1);
    assert_eq!(app.balance("user_1", "INR").await, Some(700));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_refund_before_its_payment_is_applied_when_the_payment_arrives(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.razorpay(
        &refund("rfnd_1", "pay_3", 1500, 1500),
        Some("evt_refund"),
        "deferred",
    )
    .await;
    assert_eq!(app.count("wallet_entries").await, 0);

    app.razorpay(&captured("pay_3", 5000), Some("evt_captured"), "processed")
        .await;
    let (outcome, detail) = app.event_of("razorpay", "evt_refund").await;
    assert_eq!(outcome, "processed");
    assert_eq!(detail["applied_by"], "evt_captured");
    assert_eq!(app.balance("user_1", "INR").await, Some(3500));

    // Redelivered, and replayed under a new id: debited once.
    app.razorpay(
        &refund("rfnd_1", "pay_3", 1500, 1500),
        Some("evt_refund"),
        "duplicate",
    )
    .await;
    app.razorpay(
        &refund("rfnd_1", "pay_3", 1500, 1500),
        Some("evt_refund_2"),
        "ignored",
    )
    .await;
    // A second, distinct refund of the same payment, and one past the credit.
    app.razorpay(
        &refund("rfnd_2", "pay_3", 3000, 4500),
        Some("evt_refund_3"),
        "processed",
    )
    .await;
    app.razorpay(
        &refund("rfnd_3", "pay_3", 1000, 5000),
        Some("evt_refund_4"),
        "processed",
    )
    .await;
    assert_eq!(
        app.balance("user_1", "INR").await,
        Some(0),
        "never more than the credit"
    );
    app.razorpay(
        &refund("rfnd_4", "pay_3", 100, 5000),
        Some("evt_refund_5"),
        "ignored",
    )
    .await;

    let refunded: i64 =
        sqlx::query_scalar("select refunded_minor from payments where payment_id = 'pay_3'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(refunded, 5000);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_payment_without_an_owner_waits_for_its_orders(pool: PgPool) {
    let app = spawn_app(pool).await;
    // Razorpay sends `notes` as an empty array when there are none.
    let body = envelope(
        "payment.captured",
        &["payment"],
        json!({ "payment": payment_entity("pay_4", 100, 0, json!([])) }),
        now(),
    );
    app.razorpay(&body, Some("evt_no_owner"), "deferred").await;
    let (_, detail) = app.event_of("razorpay", "evt_no_owner").await;
    assert_eq!(detail["waits_for"], "owner:payment:pay_4");
    assert_eq!(app.count("wallets").await, 0);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_failed_payment_is_recorded_and_never_undoes_a_capture(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.razorpay(&captured("pay_5", 900), Some("evt_cap"), "processed")
        .await;
    let failed = envelope(
        "payment.failed",
        &["payment"],
        json!({ "payment": payment_entity("pay_5", 900, 0, json!([])) })
            .to_string()
            .replace("captured", "failed")
            .parse::<Value>()
            .unwrap(),
        now(),
    );
    app.razorpay(&failed, Some("evt_failed"), "processed").await;
    let status: String =
        sqlx::query_scalar("select status from payments where payment_id = 'pay_5'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(status, "captured");
    assert_eq!(app.balance("user_1", "INR").await, Some(900));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn subscriptions_follow_the_envelope_time_not_the_entitys(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now();
    // Every entity carries the same created_at: a guard on it would see ties
    // and let the late `active` win. The envelope time says it is older.
    app.razorpay(&subscription("active", t), Some("evt_act"), "processed")
        .await;
    app.razorpay(
        &subscription("halted", t + 10),
        Some("evt_halt"),
        "processed",
    )
    .await;
    app.razorpay(
        &subscription("active", t + 5),
        Some("evt_late"),
        "superseded",
    )
    .await;
    let status: String =
        sqlx::query_scalar("select status from subscriptions where provider = 'razorpay'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(status, "halted");

    // A tie does not revive a cancelled subscription.
    app.razorpay(
        &subscription("cancelled", t + 20),
        Some("evt_can"),
        "processed",
    )
    .await;
    app.razorpay(
        &subscription("active", t + 20),
        Some("evt_tie"),
        "superseded",
    )
    .await;
    let (status, plan): (String, String) =
        sqlx::query_as("select status, plan_id from subscriptions where provider = 'razorpay'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!((status.as_str(), plan.as_str()), ("cancelled", "plan_pro"));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn refunds_racing_their_captures_are_never_lost(pool: PgPool) {
    let app = spawn_app(pool).await;
    let app = &app;
    let deliveries = (0..10).flat_map(|n| {
        [
            (
                captured(&format!("pay_race_{n}"), 5000),
                format!("evt_cap_{n}"),
            ),
            (
                refund(
                    &format!("rfnd_race_{n}"),
                    &format!("pay_race_{n}"),
                    2000,
                    2000,
                ),
                format!("evt_ref_{n}"),
            ),
        ]
    });
    futures_util::future::join_all(deliveries.map(|(body, id)| async move {
        let answer = app.razorpay(&body, Some(&id), "").await;
        let outcome = answer["outcome"].as_str().unwrap();
        assert!(["processed", "deferred"].contains(&outcome), "{answer}");
    }))
    .await;
    for n in 0..10 {
        let (outcome, _) = app.event_of("razorpay", &format!("evt_ref_{n}")).await;
        assert_eq!(outcome, "processed", "refund {n}");
    }
    assert_eq!(app.balance("user_1", "INR").await, Some(10 * 3000));
    assert_eq!(app.count("deferred_events").await, 0);
    app.assert_consistent().await;
}

/// Razorpay Checkout puts the owner in the order's notes: a capture whose
/// payment has none waits for `order.paid`, in either order, and is
/// credited once.
#[sqlx::test]
async fn a_capture_without_notes_is_credited_to_its_orders_owner_in_either_order(pool: PgPool) {
    let app = spawn_app(pool).await;
    for (k, order) in [[0, 1], [1, 0]].iter().enumerate() {
        let payment = format!("pay_o{k}");
        let capture = envelope(
            "payment.captured",
            &["payment"],
            json!({ "payment": payment_entity(&payment, 700, 0, json!([])) }),
            now(),
        );
        let paid = envelope(
            "order.paid",
            &["payment", "order"],
            json!({
                "payment": payment_entity(&payment, 700, 0, json!([])),
                "order": {"entity": {"id": "order_1", "entity": "order", "amount": 700,
                                     "status": "paid", "notes": {"user_id": "user_o"}}},
            }),
            now(),
        );
        let events = [
            (capture, format!("evt_cap_{k}")),
            (paid, format!("evt_ord_{k}")),
        ];
        for &i in order {
            let (body, id) = &events[i];
            app.razorpay(body, Some(id), "").await;
            app.razorpay(body, Some(id), "duplicate").await;
        }
        let (outcome, detail) = app.event_of("razorpay", &format!("evt_cap_{k}")).await;
        assert_eq!(outcome, "processed", "{detail}");
        let owner: String = sqlx::query_scalar(
            "select user_id from payments where provider = 'razorpay' and payment_id = $1",
        )
        .bind(&payment)
        .fetch_one(&app.pool)
        .await
        .unwrap();
        assert_eq!(owner, "user_o");
    }
    assert_eq!(app.balance("user_o", "INR").await, Some(1400));
    assert_eq!(app.count("deferred_events").await, 0);
    app.assert_consistent().await;
}
