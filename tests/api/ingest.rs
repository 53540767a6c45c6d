//! The ingest transaction: exactly-once under concurrent copies, nothing left
//! behind by a failure, 503 when the database is away.

use futures_util::future::join_all;
use reqwest::StatusCode;
use serde_json::Value;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use webhookd::clock::Clock;

use crate::helpers::{now, payment_intent_succeeded, spawn_app, spawn_app_with, subscription};

#[sqlx::test]
async fn twenty_concurrent_copies_of_an_event_apply_once(pool: PgPool) {
    let app = spawn_app(pool).await;
    let body = payment_intent_succeeded("evt_storm", "pi_storm", "user_1", 2500);

    let responses = join_all((0..20).map(|_| app.post_stripe(&body))).await;
    let mut outcomes = Vec::new();
    for response in responses {
        assert_eq!(response.status(), StatusCode::OK);
        let answer: Value = response.json().await.unwrap();
        outcomes.push(answer["outcome"].as_str().unwrap().to_owned());
    }
    outcomes.sort();
    assert_eq!(
        outcomes.iter().filter(|o| *o == "processed").count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| *o == "duplicate").count(),
        19,
        "{outcomes:?}"
    );

    assert_eq!(app.count("processed_events").await, 1);
    assert_eq!(app.count("wallet_entries").await, 1);
    assert_eq!(app.count("outbox").await, 1);
    assert_eq!(app.balance("user_1", "USD").await, Some(2500));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_second_delivery_of_an_event_changes_nothing(pool: PgPool) {
    let app = spawn_app(pool).await;
    let body = payment_intent_succeeded("evt_twice", "pi_twice", "user_1", 700);
    app.deliver(&body, "processed").await;
    let answer = app.deliver(&body, "duplicate").await;
    assert_eq!(answer["event_id"], "evt_twice");
    let (outcome, _) = app.event("evt_twice").await;
    assert_eq!(
        outcome, "processed",
        "the stored outcome is the first delivery's"
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(700));
    assert_eq!(app.count("outbox").await, 1);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn two_event_ids_with_identical_bodies_are_two_events(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now();
    let first = subscription(
        "evt_same_a",
        "customer.subscription.updated",
        "sub_same",
        "active",
        t,
    );
    let second = first.replace("evt_same_a", "evt_same_b");
    app.deliver(&first, "processed").await;
    app.deliver(&second, "processed").await;
    assert_eq!(app.count("processed_events").await, 2);

    // The same holds for money, where the natural key then decides: the second
    // event is recorded, never answered as a duplicate of the first.
    let credit = payment_intent_succeeded("evt_money_a", "pi_same", "user_1", 300);
    app.deliver(&credit, "processed").await;
    let answer = app
        .deliver(&credit.replace("evt_money_a", "evt_money_b"), "ignored")
        .await;
    assert_eq!(answer["event_id"], "evt_money_b");
    let (_, detail) = app.event("evt_money_b").await;
    assert_eq!(detail["owner_event_id"], "evt_money_a");
    assert_eq!(app.count("processed_events").await, 4);
    assert_eq!(app.balance("user_1", "USD").await, Some(300));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_failure_after_the_claim_rolls_everything_back_and_the_retry_succeeds(pool: PgPool) {
    let app = spawn_app(pool).await;
    // The outbox insert runs after the claim, the ledger entry and the wallet
    // update: failing it must take all of them back.
    sqlx::raw_sql(
        "create function fail_outbox() returns trigger language plpgsql as
             $$ begin raise exception 'injected failure'; end $$;
         create trigger fail_outbox before insert on outbox
             for each row execute function fail_outbox();",
    )
    .execute(&app.pool)
    .await
    .unwrap();

    let body = payment_intent_succeeded("evt_fail", "pi_fail", "user_1", 1200);
    let response = app.post_stripe(&body).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"], "internal error", "nothing internal leaks");
    app.assert_nothing_written().await;

    sqlx::raw_sql("drop trigger fail_outbox on outbox")
        .execute(&app.pool)
        .await
        .unwrap();
    app.deliver(&body, "processed").await;
    assert_eq!(app.count("wallet_entries").await, 1);
    assert_eq!(app.balance("user_1", "USD").await, Some(1200));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn an_unreachable_database_answers_503_with_retry_after(pool: PgPool) {
    // A pool whose server never answers: nothing listens on port 1.
    let away = PgPoolOptions::new()
        .acquire_timeout(std::time::Duration::from_millis(500))
        .connect_lazy("postgres://postgres@127.0.0.1:1/none")
        .unwrap();
    let app = spawn_app_with(away, Clock::System, |_| {}).await;
    let body = payment_intent_succeeded("evt_away", "pi_away", "user_1", 100);
    let response = app.post_stripe(&body).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let answer: Value = response.json().await.unwrap();
    assert!(!answer.to_string().contains("127.0.0.1"), "{answer}");

    let ready = app
        .client
        .get(format!("{}/readyz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    let alive = app
        .client
        .get(format!("{}/healthz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(alive.status(), StatusCode::OK);

    // The real database never saw the delivery.
    let events: i64 = sqlx::query_scalar("select count(*) from processed_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(events, 0);
}

#[sqlx::test]
async fn readiness_follows_the_database_and_shutdown(pool: PgPool) {
    let app = spawn_app(pool).await;
    let ready = app
        .client
        .get(format!("{}/readyz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    assert!(ready.headers().contains_key("x-request-id"));
}

#[sqlx::test]
async fn a_lock_held_past_the_request_timeout_answers_503_and_the_retry_succeeds(pool: PgPool) {
    let app = spawn_app_with(pool, Clock::System, |s| {
        s.request_timeout = std::time::Duration::from_millis(500);
    })
    .await;
    let first = payment_intent_succeeded("evt_hot_1", "pi_hot_1", "user_hot", 100);
    app.deliver(&first, "processed").await;

    // Another session holds the hot wallet row.
    let mut tx = app.pool.begin().await.unwrap();
    sqlx::query("select 1 from wallets where user_id = 'user_hot' for update")
        .execute(&mut *tx)
        .await
        .unwrap();
    let second = payment_intent_succeeded("evt_hot_2", "pi_hot_2", "user_hot", 50);
    let response = app.post_stripe(&second).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    tx.rollback().await.unwrap();

    app.deliver(&second, "processed").await;
    assert_eq!(app.balance("user_hot", "USD").await, Some(150));
    app.assert_consistent().await;
}
