//! PayPal's effects, asserted in the tables. Events are applied through
//! `ingest` as a verified delivery is ([`bodies::deliver`]).

pub(crate) mod bodies;
mod refunds;
mod subscriptions;

use futures_util::future::join_all;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use webhookd::events::Outcome;
use webhookd::ingest;

use crate::helpers::{TestApp, now};
use bodies::{IMPOSSIBLE_TIME, capture, completed, deliver, envelope, event, rfc3339};

/// The tables' helpers, without a server: nothing here goes over HTTP.
pub(crate) fn books(pool: PgPool) -> TestApp {
    TestApp {
        address: String::new(),
        admin_address: None,
        pooled: crate::helpers::app_pool(&pool),
        pool,
        client: reqwest::Client::new(),
        shutdown: CancellationToken::new(),
        router: None,
    }
}

impl TestApp {
    /// Applies `body` and expects `outcome`; returns the stored detail.
    async fn paypal(&self, body: &Value, outcome: &str) -> Value {
        let receipt = deliver(&self.pool, body).await;
        assert_eq!(receipt.outcome.as_str(), outcome, "{body}");
        let id = body["id"].as_str().unwrap();
        let (stored, detail) = self.event_of("paypal", id).await;
        if outcome != "duplicate" {
            assert_eq!(stored, outcome, "{body}");
        }
        detail
    }

    async fn payment(&self, capture_id: &str) -> (String, i64, String, Option<String>) {
        sqlx::query_as(
            "select status, amount_minor, currency, payment_ref from payments
             where provider = 'paypal' and payment_id = $1",
        )
        .bind(capture_id)
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }

    async fn topics(&self) -> Vec<String> {
        sqlx::query_scalar("select topic from outbox order by id")
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }

    /// The wallet entries' `(kind, source_ref, amount_minor)`, in order.
    async fn entries(&self) -> Vec<(String, String, i64)> {
        sqlx::query_as(
            "select kind, source_ref, amount_minor from wallet_entries where provider = 'paypal'
             order by id",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }
}

#[sqlx::test]
async fn a_completed_capture_credits_its_custom_id_once_and_records_the_payment(pool: PgPool) {
    let app = books(pool);
    let body = completed("WH-1", "CAP1", "30.00", "user_1");
    let detail = app.paypal(&body, "processed").await;
    assert_eq!(detail["balance_minor"], 3000);
    app.paypal(&body, "duplicate").await;
    // Another event about the same capture credits nothing more.
    let mut again = body.clone();
    again["id"] = json!("WH-2");
    let detail = app.paypal(&again, "ignored").await;
    assert_eq!(detail["owner_event_id"], "WH-1");

    assert_eq!(app.balance("user_1", "USD").await, Some(3000));
    assert_eq!(
        app.entries().await,
        [("credit".into(), "CAP1".into(), 3000)]
    );
    let payment = app.payment("CAP1").await;
    assert_eq!(
        payment,
        (
            "completed".into(),
            3000,
            "USD".into(),
            Some("5O190127TN364715T".into())
        )
    );
    assert_eq!(app.topics().await, ["wallet.credited"]);
    let payload: Value = sqlx::query_scalar("select payload from outbox")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        (
            &payload["user_id"],
            &payload["amount_minor"],
            &payload["capture_id"]
        ),
        (&json!("user_1"), &json!(3000), &json!("CAP1"))
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn amounts_are_read_in_each_currency_s_minor_unit_and_extra_decimals_rejected(pool: PgPool) {
    let app = books(pool);
    let t = rfc3339(now());
    let paid = |id: &str, value: &str, currency: &str| {
        let resource = capture(
            &format!("CAP-{id}"),
            "COMPLETED",
            value,
            currency,
            Some("user_1"),
        );
        envelope(id, "PAYMENT.CAPTURE.COMPLETED", &t, resource)
    };
    for (id, value, currency, minor) in [
        ("WH-USD", "30.5", "USD", 3050),
        ("WH-JPY", "1000", "JPY", 1000),
        ("WH-BHD", "1.234", "BHD", 1234),
    ] {
        app.paypal(&paid(id, value, currency), "processed").await;
        assert_eq!(
            app.balance("user_1", currency).await,
            Some(minor),
            "{value} {currency}"
        );
    }
    for (id, value, currency, reason) in [
        (
            "WH-X1",
            "30.001",
            "USD",
            "capture amount.value: more decimals than USD has (2)",
        ),
        (
            "WH-X2",
            "1.5",
            "JPY",
            "capture amount.value: more decimals than JPY has (0)",
        ),
        (
            "WH-X3",
            "-5.00",
            "USD",
            "capture amount.value: not a decimal number of digits (such as 30.00)",
        ),
        (
            "WH-X4",
            "1e3",
            "USD",
            "capture amount.value: not a decimal number of digits (such as 30.00)",
        ),
        (
            "WH-X5",
            "5.00",
            "ZZZ",
            "capture has no ISO 4217 currency with a minor unit",
        ),
        ("WH-X6", "0.00", "USD", "capture has no positive amount"),
    ] {
        let body = paid(id, value, currency);
        let detail = app.paypal(&body, "rejected").await;
        assert_eq!(detail["reason"], reason, "{value} {currency}");
        app.paypal(&body, "duplicate").await;
    }
    assert_eq!(app.count("wallet_entries").await, 3);
    assert_eq!(app.count("payments").await, 3);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_capture_without_custom_id_is_rejected_and_its_retry_is_a_duplicate(pool: PgPool) {
    let app = books(pool);
    // The simulator's sample capture carries no custom_id.
    let resource = capture("CAP-SIM", "COMPLETED", "100.00", "USD", None);
    let body = envelope(
        "WH-SIM",
        "PAYMENT.CAPTURE.COMPLETED",
        IMPOSSIBLE_TIME,
        resource,
    );
    let detail = app.paypal(&body, "rejected").await;
    assert_eq!(detail["reason"], "capture has no custom_id");
    app.paypal(&body, "duplicate").await;
    let mut resource = capture("CAP-SP", "COMPLETED", "1.00", "USD", Some("user 1"));
    resource["custom_id"] = json!("user 1");
    let body = envelope(
        "WH-SP",
        "PAYMENT.CAPTURE.COMPLETED",
        IMPOSSIBLE_TIME,
        resource,
    );
    let detail = app.paypal(&body, "rejected").await;
    assert!(
        detail["reason"]
            .as_str()
            .unwrap()
            .starts_with("custom_id is not an identifier")
    );
    for table in ["wallets", "wallet_entries", "payments", "outbox"] {
        assert_eq!(app.count(table).await, 0, "{table}");
    }
    app.assert_consistent().await;
}

#[sqlx::test]
async fn concurrent_copies_of_a_capture_credit_once_alone_and_in_a_batch(pool: PgPool) {
    let app = books(pool);
    let copies = event(&completed("WH-C", "CAP-C", "12.34", "user_1"));
    let answers = join_all((0..10).map(|_| {
        let (pool, copy) = (app.pool.clone(), copies.clone());
        async move { ingest::ingest(&pool, &copy).await.unwrap().outcome }
    }))
    .await;
    let processed = answers.iter().filter(|o| **o == Outcome::Processed).count();
    assert_eq!(processed, 1, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|o| [Outcome::Processed, Outcome::Duplicate].contains(o))
    );

    let batched = event(&completed("WH-B", "CAP-B", "0.66", "user_1"));
    let answers = ingest::ingest_batch(&app.pool, &[batched.clone(), batched.clone(), batched])
        .await
        .into_iter()
        .map(|answer| answer.unwrap().outcome)
        .collect::<Vec<_>>();
    assert_eq!(
        answers,
        [Outcome::Processed, Outcome::Duplicate, Outcome::Duplicate]
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(1234 + 66));
    assert_eq!(app.count("wallet_entries").await, 2);
    assert_eq!(app.count("outbox").await, 2);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn pending_then_completed_then_declined_never_undoes_the_completed_capture(pool: PgPool) {
    let app = books(pool);
    let t = rfc3339(now());
    let at = |id: &str, kind: &str, status: &str| {
        let resource = capture("CAP-S", status, "9.99", "USD", Some("user_1"));
        envelope(id, &format!("PAYMENT.CAPTURE.{kind}"), &t, resource)
    };
    let detail = app
        .paypal(&at("WH-P", "PENDING", "PENDING"), "processed")
        .await;
    assert_eq!(detail["payment_id"], "CAP-S");
    assert_eq!(app.payment("CAP-S").await.0, "pending");
    assert_eq!(app.count("wallet_entries").await, 0);
    app.paypal(&at("WH-C", "COMPLETED", "COMPLETED"), "processed")
        .await;
    assert_eq!(app.payment("CAP-S").await.0, "completed");
    app.paypal(&at("WH-D", "DECLINED", "DECLINED"), "processed")
        .await;
    app.paypal(&at("WH-N", "DENIED", "DENIED"), "processed")
        .await;
    app.paypal(&at("WH-P2", "PENDING", "PENDING"), "processed")
        .await;

    assert_eq!(app.payment("CAP-S").await.0, "completed");
    assert_eq!(app.balance("user_1", "USD").await, Some(999));
    assert_eq!(app.count("wallet_entries").await, 1);
    // A declined capture alone is recorded, and credits nothing.
    let mut declined = capture("CAP-D", "DECLINED", "5.00", "USD", None);
    declined.as_object_mut().unwrap().remove("status");
    let body = envelope("WH-D2", "PAYMENT.CAPTURE.DENIED", &t, declined);
    app.paypal(&body, "processed").await;
    assert_eq!(app.payment("CAP-D").await.0, "denied");
    assert_eq!(app.topics().await, ["wallet.credited"]);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn unknown_event_types_are_recorded_ignored(pool: PgPool) {
    let app = books(pool);
    let t = rfc3339(now());
    for (id, kind) in [
        ("WH-1", "CHECKOUT.ORDER.APPROVED"),
        ("WH-2", "PAYMENT.AUTHORIZATION.CREATED"),
        ("WH-3", "PAYMENT.SALE.COMPLETED"),
        ("WH-4", "payment.capture.completed"),
    ] {
        let resource = capture("CAP-U", "COMPLETED", "1.00", "USD", Some("user_1"));
        let detail = app
            .paypal(&envelope(id, kind, &t, resource), "ignored")
            .await;
        assert_eq!(detail["reason"], "event type has no effect");
    }
    assert_eq!(app.count("processed_events").await, 4);
    for table in ["wallets", "payments", "subscriptions", "outbox"] {
        assert_eq!(app.count(table).await, 0, "{table}");
    }
    app.assert_consistent().await;
}
