//! The ingest transaction: exactly-once under concurrent copies, nothing left
//! behind by a failure, 503 when the database is away.

use axum::Json;
use axum::extract::State;
use futures_util::future::join_all;
use reqwest::StatusCode;
use serde_json::Value;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use webhookd::clock::Clock;
use webhookd::config::ServeSettings;
use webhookd::http::{AppState, health};
use webhookd::ingest::{Ingestor, Wake};
use webhookd::providers::Providers;
use webhookd::startup;

use crate::helpers::{
    charge, now, payment_intent_succeeded, spawn_app, spawn_app_with, subscription,
};

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
    app.deliver_each(&[(&first, "processed"), (&second, "processed")])
        .await;
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
async fn an_unreachable_database_answers_503_with_retry_after(_pool: PgPool) {
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
}

#[sqlx::test]
async fn readiness_needs_migrations_and_turns_503_on_shutdown(pool: PgPool) {
    let app = spawn_app(pool).await;
    let ready = app
        .client
        .get(format!("{}/readyz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    assert!(ready.headers().contains_key("x-request-id"));

    let stopping = bare_state(app.pool.clone());
    stopping.shutdown.cancel();
    let (status, Json(body)) = health::readyz(State(stopping)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["reason"], "shutting down");
    app.assert_consistent().await;
}

/// The state of an app on `pool` with no provider, the defaults, and the
/// system clock.
fn bare_state(pool: PgPool) -> AppState {
    AppState {
        ingestor: Ingestor::start(
            pool.clone(),
            startup::batch_settings(&ServeSettings::default()),
            Wake::Notify,
            &TaskTracker::new(),
        ),
        pool,
        providers: Providers::default(),
        fetcher: None,
        clock: Clock::System,
        shutdown: CancellationToken::new(),
        metrics: Default::default(),
        arrivals: Default::default(),
    }
}

#[sqlx::test(migrations = false)]
async fn readiness_is_503_before_migrations(pool: PgPool) {
    let (status, Json(body)) = health::readyz(State(bare_state(pool))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["reason"], "migrations not applied");
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
    assert!(response.headers().contains_key("retry-after"));
    tx.rollback().await.unwrap();

    app.deliver(&second, "processed").await;
    assert_eq!(app.balance("user_hot", "USD").await, Some(150));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn refunds_racing_their_credits_are_never_lost(pool: PgPool) {
    let app = spawn_app(pool).await;
    // Each pair races: the refund must end up applied whichever commits first.
    let pairs = 10;
    let deliveries = (0..pairs).flat_map(|n| {
        let credit = payment_intent_succeeded(
            &format!("evt_pi_{n}"),
            &format!("pi_{n}"),
            &format!("user_{n}"),
            1000,
        );
        let refund = charge(
            &format!("evt_re_{n}"),
            "charge.refunded",
            &format!("ch_{n}"),
            &format!("pi_{n}"),
            1000,
            400,
        );
        [credit, refund]
    });
    let app = &app;
    let responses =
        join_all(deliveries.map(|body| async move { app.post_stripe(&body).await.status() })).await;
    assert!(
        responses.iter().all(|s| *s == StatusCode::OK),
        "{responses:?}"
    );

    for n in 0..pairs {
        assert_eq!(
            app.balance(&format!("user_{n}"), "USD").await,
            Some(600),
            "pair {n}"
        );
        let (outcome, _) = app.event(&format!("evt_re_{n}")).await;
        assert_eq!(outcome, "processed", "pair {n}");
    }
    assert_eq!(app.count("deferred_events").await, 0);
    assert_eq!(app.count("wallet_entries").await, 2 * pairs);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn concurrent_events_for_one_payment_intent_credit_once(pool: PgPool) {
    let app = spawn_app(pool).await;
    let bodies: Vec<String> = (0..10)
        .map(|n| payment_intent_succeeded(&format!("evt_same_pi_{n}"), "pi_shared", "user_1", 500))
        .collect();
    let app = &app;
    let answers = join_all(bodies.iter().map(|body| async move {
        let response = app.post_stripe(body).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.json::<Value>().await.unwrap()["outcome"]
            .as_str()
            .unwrap()
            .to_owned()
    }))
    .await;
    assert_eq!(
        answers.iter().filter(|o| *o == "processed").count(),
        1,
        "{answers:?}"
    );
    assert_eq!(
        answers.iter().filter(|o| *o == "ignored").count(),
        9,
        "{answers:?}"
    );
    assert_eq!(app.count("processed_events").await, 10);
    assert_eq!(app.balance("user_1", "USD").await, Some(500));
    assert_eq!(app.count("outbox").await, 1);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn racing_subscription_events_settle_on_the_newest(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now();
    let statuses = [
        "incomplete",
        "trialing",
        "active",
        "past_due",
        "unpaid",
        "active",
        "past_due",
        "active",
    ];
    let bodies: Vec<String> = statuses
        .iter()
        .enumerate()
        .map(|(n, status)| {
            let created = t + i64::try_from(n).unwrap();
            subscription(
                &format!("evt_sub_{n}"),
                "customer.subscription.updated",
                "sub_race",
                status,
                created,
            )
        })
        .collect();
    let responses = join_all(bodies.iter().map(|body| app.post_stripe(body))).await;
    assert!(responses.iter().all(|r| r.status() == StatusCode::OK));

    let (status, event_id): (String, String) = sqlx::query_as(
        "select status, event_id from subscriptions where subscription_id = 'sub_race'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), event_id.as_str()),
        ("active", "evt_sub_7")
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn the_verified_payload_and_event_time_are_stored(pool: PgPool) {
    let app = spawn_app(pool).await;
    let body = payment_intent_succeeded("evt_store", "pi_store", "user_1", 100);
    app.deliver(&body, "processed").await;
    let (payload, created, event_type): (Value, i64, String) = sqlx::query_as(
        "select payload, extract(epoch from provider_created_at)::bigint, event_type
         from processed_events where event_id = 'evt_store'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let sent: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(payload, sent);
    assert_eq!(created, sent["created"].as_i64().unwrap());
    assert_eq!(event_type, "payment_intent.succeeded");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn nul_characters_are_stored_as_replacement_characters(pool: PgPool) {
    let app = spawn_app(pool).await;
    let with_nul = payment_intent_succeeded("evt_nul", "pi_nul", "user_1", 100).replace(
        r#""status":"succeeded""#,
        r#""status":"succeeded","description":"a\u0000b""#,
    );
    app.deliver(&with_nul, "processed").await;
    // An escaped backslash followed by u0000 is just text, stored as sent.
    let escaped = payment_intent_succeeded("evt_text", "pi_text", "user_1", 100).replace(
        r#""status":"succeeded""#,
        r#""status":"succeeded","description":"a\\u0000b""#,
    );
    app.deliver(&escaped, "processed").await;

    let descriptions: Vec<String> = sqlx::query_scalar(
        "select payload #>> '{data,object,description}' from processed_events order by event_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(descriptions, ["a\u{FFFD}b", "a\\u0000b"]);
    assert_eq!(app.balance("user_1", "USD").await, Some(200));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn timestamps_postgres_cannot_store_never_fail_a_transaction(pool: PgPool) {
    let app = spawn_app(pool).await;
    // In the envelope: not an event we can order, refused before any work.
    let body = payment_intent_succeeded("evt_far", "pi_far", "user_1", 100).replacen(
        &format!(r#""created":{}"#, now()),
        r#""created":99999999999999"#,
        1,
    );
    assert_eq!(
        app.post_stripe(&body).await.status(),
        StatusCode::BAD_REQUEST
    );
    // Inside the object: ignored, the event still applies.
    let body = subscription(
        "evt_sub_far",
        "customer.subscription.created",
        "sub_far",
        "active",
        now(),
    )
    .replace(
        r#""current_period_end":"#,
        r#""current_period_end":99999999999999,"x":"#,
    );
    app.deliver(&body, "processed").await;
    let end: Option<i64> = sqlx::query_scalar(
        "select extract(epoch from current_period_end)::bigint from subscriptions where subscription_id = 'sub_far'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(end, None);
    app.assert_consistent().await;
}
