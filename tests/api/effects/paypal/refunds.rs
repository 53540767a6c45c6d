//! PayPal's refunds and reversals: each debits its own amount from the
//! capture its `up` link names, once, never more than is left of it, and
//! moves the capture's payment row to what has been refunded.

use futures_util::future::join_all;
use serde_json::json;
use sqlx::PgPool;
use webhookd::events::Outcome;
use webhookd::ingest;

use super::bodies::{completed, deliver, envelope, event, refund, refunded, rfc3339};
use super::books;
use crate::helpers::{TestApp, now};

impl TestApp {
    /// A capture's payment status and refunded amount.
    async fn refunded(&self, capture_id: &str) -> (String, i64) {
        sqlx::query_as(
            "select status, refunded_minor from payments
             where provider = 'paypal' and payment_id = $1",
        )
        .bind(capture_id)
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }
}

#[sqlx::test]
async fn a_refund_before_its_capture_waits_then_applies_once(pool: PgPool) {
    let app = books(pool);
    let early = refunded("WH-R1", "REF1", "CAP-R", "10.00");
    let detail = app.paypal(&early, "deferred").await;
    assert_eq!(detail["waits_for"], "CAP-R");
    assert_eq!(app.count("wallet_entries").await, 0);

    app.paypal(&completed("WH-CR", "CAP-R", "30.00", "user_1"), "processed")
        .await;
    let (outcome, detail) = app.event_of("paypal", "WH-R1").await;
    assert_eq!(
        (outcome.as_str(), &detail["applied_by"]),
        ("processed", &json!("WH-CR"))
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(2000));
    app.paypal(&early, "duplicate").await;
    let mut replayed = early.clone();
    replayed["id"] = json!("WH-R1-again");
    let detail = app.paypal(&replayed, "ignored").await;
    assert_eq!(detail["owner_event_id"], "WH-R1");

    assert_eq!(app.balance("user_1", "USD").await, Some(2000));
    assert_eq!(
        app.refunded("CAP-R").await,
        ("partially_refunded".into(), 1000)
    );
    assert_eq!(app.count("deferred_events").await, 0);
    assert_eq!(app.topics().await, ["wallet.credited", "wallet.debited"]);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn refunds_and_reversals_never_debit_more_than_is_left_of_the_capture(pool: PgPool) {
    let app = books(pool);
    app.paypal(&completed("WH-C", "CAP-P", "30.00", "user_1"), "processed")
        .await;
    let detail = app
        .paypal(&refunded("WH-R1", "REF1", "CAP-P", "10.00"), "processed")
        .await;
    assert_eq!(detail["debited_minor"], 1000);
    app.paypal(&refunded("WH-R2", "REF2", "CAP-P", "15.50"), "processed")
        .await;
    assert_eq!(app.balance("user_1", "USD").await, Some(450));
    // A reversal is a refund too, and the last one is clamped to what is left.
    let reversal = refund("REV3", "CAP-P", "10.00", "USD");
    let body = envelope(
        "WH-R3",
        "PAYMENT.CAPTURE.REVERSED",
        &rfc3339(now()),
        reversal,
    );
    let detail = app.paypal(&body, "processed").await;
    assert_eq!(detail["debited_minor"], 450);
    let detail = app
        .paypal(&refunded("WH-R4", "REF4", "CAP-P", "1.00"), "ignored")
        .await;
    assert_eq!(detail["reason"], "the credit is already fully refunded");
    let detail = app
        .paypal(&refunded("WH-R5", "REF5", "CAP-P", "30.01"), "rejected")
        .await;
    assert_eq!(detail["reason"], "the refund is larger than its payment");

    assert_eq!(app.balance("user_1", "USD").await, Some(0));
    assert_eq!(app.refunded("CAP-P").await, ("refunded".into(), 3000));
    let refunds: Vec<(String, i64)> = app
        .entries()
        .await
        .into_iter()
        .filter(|(kind, _, _)| kind == "refund")
        .map(|(_, key, amount)| (key, amount))
        .collect();
    assert_eq!(
        refunds,
        [
            ("REF1".into(), -1000),
            ("REF2".into(), -1550),
            ("REV3".into(), -450)
        ]
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn refunds_that_cannot_apply_are_rejected_or_ignored_and_debit_nothing(pool: PgPool) {
    let app = books(pool);
    app.paypal(&completed("WH-C", "CAP-Q", "30.00", "user_1"), "processed")
        .await;
    let t = rfc3339(now());
    let mut to_order = refund("REF-O", "CAP-Q", "1.00", "USD");
    to_order["links"][1]["href"] = json!("https://api.paypal.com/v2/checkout/orders/CAP-Q");
    let mut nested = refund("REF-N", "CAP-Q", "1.00", "USD");
    nested["links"][1]["href"] = json!("https://api.paypal.com/v2/payments/captures/CAP-Q/x");
    for (id, resource) in [("WH-O", to_order), ("WH-N", nested)] {
        let body = envelope(id, "PAYMENT.CAPTURE.REFUNDED", &t, resource);
        let detail = app.paypal(&body, "rejected").await;
        assert!(
            detail["reason"]
                .as_str()
                .unwrap()
                .starts_with("refund has no up link")
        );
    }
    let in_euros = refund("REF-E", "CAP-Q", "1.00", "EUR");
    let body = envelope("WH-E", "PAYMENT.CAPTURE.REFUNDED", &t, in_euros);
    let detail = app.paypal(&body, "rejected").await;
    assert_eq!(
        detail["reason"],
        "the refund is in EUR but its payment was credited in USD"
    );
    let mut failed = refund("REF-F", "CAP-Q", "1.00", "USD");
    failed["status"] = json!("FAILED");
    let body = envelope("WH-F", "PAYMENT.CAPTURE.REFUNDED", &t, failed);
    app.paypal(&body, "ignored").await;

    assert_eq!(app.balance("user_1", "USD").await, Some(3000));
    assert_eq!(app.refunded("CAP-Q").await, ("completed".into(), 0));
    assert_eq!(app.count("wallet_entries").await, 1);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn refunds_racing_their_captures_are_never_lost_alone_or_in_one_batch(pool: PgPool) {
    let app = books(pool);
    let deliveries = (0..10).flat_map(|n| {
        [
            completed(&format!("WH-C{n}"), &format!("CAP-{n}"), "50.00", "user_1"),
            refunded(
                &format!("WH-R{n}"),
                &format!("REF-{n}"),
                &format!("CAP-{n}"),
                "20.00",
            ),
        ]
    });
    let answers = join_all(deliveries.map(|body| {
        let pool = app.pool.clone();
        async move { deliver(&pool, &body).await.outcome }
    }))
    .await;
    assert!(
        answers
            .iter()
            .all(|o| [Outcome::Processed, Outcome::Deferred].contains(o)),
        "{answers:?}"
    );
    for n in 0..10 {
        let (outcome, _) = app.event_of("paypal", &format!("WH-R{n}")).await;
        assert_eq!(outcome, "processed", "refund {n}");
    }
    // A refund ahead of its capture in one transaction waits, then applies.
    let batch = [
        event(&refunded("WH-RB", "REF-B", "CAP-B", "5.00")),
        event(&completed("WH-CB", "CAP-B", "5.00", "user_1")),
    ];
    let answers: Vec<Outcome> = ingest::ingest_batch(&app.pool, &batch)
        .await
        .into_iter()
        .map(|answer| answer.unwrap().outcome)
        .collect();
    assert_eq!(answers, [Outcome::Deferred, Outcome::Processed]);
    let (outcome, detail) = app.event_of("paypal", "WH-RB").await;
    assert_eq!(
        (outcome.as_str(), &detail["applied_by"]),
        ("processed", &json!("WH-CB"))
    );

    assert_eq!(app.balance("user_1", "USD").await, Some(10 * 3000));
    assert_eq!(app.count("deferred_events").await, 0);
    app.assert_consistent().await;
}
