//! Event ids webhookd makes up itself live in a namespace no delivery can
//! name, and the sweep decides what is missing by the effects' natural
//! keys: nobody holding one signed delivery can pre-empt a payment or a
//! refund that a sweep would recover.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::cli::sweep::{RazorpaySweepArgs, SweepCommand};
use webhookd::clock::Clock;
use webhookd::config::RazorpayApiArgs;

use crate::fakes::razorpay::{FakeRazorpay, payment, refund};
use crate::helpers::{RAZORPAY_SECRETS, TestApp, now, payment_intent_succeeded, spawn_app};
use crate::signature::paypal::{capture_completed, cert_dir, paypal_app, post_signed};

const KEY_ID: &str = "rzp_test_preempt";
const KEY_SECRET: &str = "preempt_secret";

/// Re-sends a signed Razorpay delivery (the attacker's own captured
/// payment) under the event id header `event_id`.
async fn resend_as(app: &TestApp, event_id: &str) -> StatusCode {
    let own = payment("pay_ATTACKER", 100, "captured", Some("mallory"), now());
    let body = json!({ "entity": "event", "account_id": "acc_1", "event": "payment.captured",
        "contains": ["payment"], "payload": { "payment": { "entity": own } },
        "created_at": now() })
    .to_string();
    let signature = webhookd::providers::razorpay::signature(RAZORPAY_SECRETS.0, body.as_bytes());
    let headers = [
        ("x-razorpay-signature".to_owned(), signature),
        ("x-razorpay-event-id".to_owned(), event_id.to_owned()),
    ];
    app.post_to("razorpay", body.into_bytes(), &headers)
        .await
        .status()
}

async fn sweep(app: &TestApp, fake: &FakeRazorpay) -> Value {
    let command = SweepCommand::Razorpay(RazorpaySweepArgs {
        since: std::time::Duration::from_secs(24 * 3600),
        dry_run: false,
        api: RazorpayApiArgs {
            razorpay_key_id: Some(KEY_ID.to_owned()),
            razorpay_key_secret: Some(KEY_SECRET.into()),
            razorpay_api_base: fake.base_url(),
        },
    });
    let mut out = Vec::new();
    webhookd::cli::sweep::sweep(&app.pool, &command, &[], &Clock::System, &mut out)
        .await
        .unwrap();
    serde_json::from_slice(&out).unwrap()
}

/// Records `event_id` as a delivery the way webhookd did before its ids had
/// a namespace of their own: the state of a database an attacker reached
/// first.
async fn taken_before_the_namespace(app: &TestApp, event_id: &str) {
    sqlx::query(
        "insert into processed_events (provider, event_id, event_type, outcome, detail, payload, received_via)
         values ('razorpay', $1, 'payment.captured', 'ignored', '{}', '{}', 'webhook')",
    )
    .bind(event_id)
    .execute(&app.pool)
    .await
    .unwrap();
}

#[sqlx::test]
async fn a_delivery_naming_an_id_of_webhookd_s_own_namespace_is_refused_and_writes_nothing(
    pool: PgPool,
) {
    let app = spawn_app(pool).await;
    for id in [
        "webhookd:sweep:payment.captured:pay_VICTIM",
        "sweep:payment.captured:pay_VICTIM",
        "sweep:refund.processed:rfnd_VICTIM",
        "delivery_gap:1700000000",
        "payment.captured:pay_VICTIM:1700000000",
    ] {
        assert_eq!(resend_as(&app, id).await, StatusCode::BAD_REQUEST, "{id}");
    }
    // Stripe and PayPal name their events in the signed body: the same rule.
    let stripe = payment_intent_succeeded("evt:forged", "pi_1", "user_1", 100);
    let answer = app.post_stripe(&stripe).await;
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    app.assert_nothing_written().await;
    // An id of the shape Razorpay gives its events is taken as before.
    assert_eq!(resend_as(&app, "evt_PLAIN123").await, StatusCode::OK);
}

#[sqlx::test]
async fn a_paypal_event_whose_id_is_in_webhookd_s_namespace_is_refused(pool: PgPool) {
    let dir = cert_dir(&[(crate::signature::paypal::LIVE_ID, "live.pem")]);
    let app = paypal_app(pool, &dir).await;
    let body = capture_completed("WH-1:forged", "2GG279541U471931P", "user_pp", "30.00");
    let answer = post_signed(&app, &body).await;
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    app.assert_nothing_written().await;
}

#[sqlx::test]
async fn a_payment_and_a_refund_whose_sweep_ids_were_taken_first_are_still_recovered(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 3600;
    let victim = payment("pay_VICTIM", 75_000, "captured", Some("user_v"), t);
    let refunded = payment("pay_REFUNDED", 20_000, "captured", Some("user_r"), t + 1);
    let fake = FakeRazorpay::start(
        KEY_ID,
        KEY_SECRET,
        vec![victim, refunded],
        vec![refund("rfnd_VICTIM", "pay_REFUNDED", 20_000, t + 2)],
    )
    .await;
    // Today the namespace is refused at the door; a database an attacker
    // reached before holds such rows, under the ids sweeps used then.
    assert_eq!(
        resend_as(&app, "sweep:payment.captured:pay_VICTIM").await,
        StatusCode::BAD_REQUEST
    );
    taken_before_the_namespace(&app, "sweep:payment.captured:pay_VICTIM").await;
    taken_before_the_namespace(&app, "sweep:refund.processed:rfnd_VICTIM").await;

    let summary = sweep(&app, &fake).await;
    assert_eq!(
        (&summary["recovered"], &summary["already_seen"]),
        (&json!(3), &json!(0)),
        "{summary}"
    );
    assert_eq!(
        app.balance("user_v", "INR").await,
        Some(75_000),
        "750.00 INR credited"
    );
    assert_eq!(
        app.balance("user_r", "INR").await,
        Some(0),
        "the full refund debited"
    );
    // Run again: the ledger says all is applied.
    let again = sweep(&app, &fake).await;
    assert_eq!(
        (&again["recovered"], &again["already_seen"]),
        (&json!(0), &json!(3)),
        "{again}"
    );
    assert_eq!(app.balance("user_v", "INR").await, Some(75_000));
    app.assert_consistent().await;
}
