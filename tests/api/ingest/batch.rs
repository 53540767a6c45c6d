//! Group commit: batches of events keep every guarantee of one event per
//! transaction. Batches are formed explicitly here (`batch::apply`), so each
//! test knows what shared a transaction; the HTTP tests elsewhere go through
//! the dispatcher.

use bytes::Bytes;
use futures_util::future::join_all;
use serde_json::Value;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use webhookd::effects;
use webhookd::events::Outcome;
use webhookd::ingest::Wake;
use webhookd::ingest::batch::{self, Answer};
use webhookd::providers::{self, Event};

use crate::helpers::{charge, payment_intent_succeeded, spawn_app, until_waiting_on_locks};

fn credit(event_id: &str, intent: &str, user_id: &str, amount: i64) -> Event {
    let body = payment_intent_succeeded(event_id, intent, user_id, amount);
    let event = stripe_event(event_id, "payment_intent.succeeded", body);
    assert!(effects::decode(event.clone()).is_credit(), "a plain credit");
    event
}

fn stripe_event(event_id: &str, event_type: &str, body: String) -> Event {
    providers::Event::from_stored("stripe", event_id, event_type, Bytes::from(body))
        .expect("a well-formed event")
}

/// One transaction for `events`, without the one-by-one fallback; no
/// request gives up.
async fn try_batch(
    pool: &PgPool,
    events: &[Event],
) -> Result<Vec<Answer>, webhookd::ingest::Error> {
    let waiting: Vec<CancellationToken> = events.iter().map(|_| CancellationToken::new()).collect();
    batch::try_batch(pool, events, &waiting, &Wake::Notify).await
}

/// Another session's claim of Stripe event `event_id`, in flight until the
/// transaction returned ends.
async fn hold_claim(pool: &PgPool, event_id: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut holder = pool.begin().await.unwrap();
    sqlx::query(
        "insert into processed_events (provider, event_id, event_type, outcome, payload)
         values ('stripe', $1, 'payment_intent.succeeded', 'pending', '{}')",
    )
    .bind(event_id)
    .execute(&mut *holder)
    .await
    .unwrap();
    holder
}

fn outcomes(answers: &[Answer]) -> Vec<Outcome> {
    answers
        .iter()
        .map(|answer| answer.as_ref().expect("applied").outcome)
        .collect()
}

async fn outbox_balance(pool: &PgPool, event_id: &str) -> i64 {
    sqlx::query_scalar(
        "select (payload ->> 'balance_minor')::bigint from outbox
         where topic = 'wallet.credited' and event_id = $1",
    )
    .bind(event_id)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test]
async fn copies_in_one_batch_apply_once_and_each_credit_announces_its_own_balance(pool: PgPool) {
    let app = spawn_app(pool).await;
    let credits = [
        credit("evt_b1", "pi_b1", "user_b", 100),
        credit("evt_b1", "pi_b1", "user_b", 100),
        credit("evt_b2", "pi_b2", "user_b", 200),
        credit("evt_b3", "pi_b3", "user_c", 50),
        credit("evt_b1", "pi_b1", "user_b", 100),
    ];
    let answers = try_batch(&app.pooled, &credits)
        .await
        .expect("the batch commits");
    use Outcome::{Duplicate, Processed};
    assert_eq!(
        outcomes(&answers),
        [Processed, Duplicate, Processed, Processed, Duplicate]
    );

    assert_eq!(app.balance("user_b", "USD").await, Some(300));
    assert_eq!(app.balance("user_c", "USD").await, Some(50));
    assert_eq!(app.count("processed_events").await, 3);
    assert_eq!(app.count("wallet_entries").await, 2 + 1);
    assert_eq!(app.count("outbox").await, 3);
    // Entries of one wallet in one batch: each announcement carries the
    // balance right after its own entry, in entry order.
    assert_eq!(outbox_balance(&app.pool, "evt_b1").await, 100);
    assert_eq!(outbox_balance(&app.pool, "evt_b2").await, 300);
    assert_eq!(outbox_balance(&app.pool, "evt_b3").await, 50);
    let (outcome, detail) = app.event("evt_b2").await;
    assert_eq!(outcome, "processed");
    assert_eq!(detail["balance_minor"], 300);
    assert_eq!(detail["applied_deferred"], Value::Array(vec![]));

    // A later batch of the same events writes nothing.
    let again = try_batch(&app.pooled, &credits[..3])
        .await
        .expect("the batch commits");
    assert_eq!(outcomes(&again), [Duplicate, Duplicate, Duplicate]);
    assert_eq!(app.balance("user_b", "USD").await, Some(300));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn concurrent_batches_of_overlapping_events_in_opposite_orders_apply_each_once(pool: PgPool) {
    let app = spawn_app(pool).await;
    // Forty events for eight wallets, in two batches of opposite order.
    let forward: Vec<Event> = (0..40)
        .map(|n| {
            credit(
                &format!("evt_o{n:02}"),
                &format!("pi_o{n:02}"),
                &format!("user_o{}", n % 8),
                10 + n,
            )
        })
        .collect();
    let backward: Vec<Event> = forward.iter().rev().cloned().collect();
    // Another session has claimed an event in the middle: both batches stop
    // there, each holding the claims it made so far, and go on together when
    // that session rolls back. Claiming in input order, they would deadlock.
    let holder = hold_claim(&app.pool, "evt_o20").await;
    let pool = &app.pool;
    let release = async {
        until_waiting_on_locks(pool, 2).await;
        holder.rollback().await.unwrap();
    };
    // No fallback here: a deadlock (or a lock wait past the batch's lock
    // timeout) fails the batch, and the test.
    let (first, second, ()) = tokio::join!(
        try_batch(pool, &forward),
        try_batch(pool, &backward),
        release,
    );

    let mut processed = 0;
    for answers in [first, second] {
        let answers = answers.expect("no batch fails");
        for outcome in outcomes(&answers) {
            match outcome {
                Outcome::Processed => processed += 1,
                Outcome::Duplicate => {}
                other => panic!("unexpected outcome {other:?}"),
            }
        }
    }
    assert_eq!(processed, 40, "each event processed exactly once");
    assert_eq!(app.count("wallet_entries").await, 40);
    assert_eq!(app.count("outbox").await, 40);
    let total: i64 = sqlx::query_scalar("select sum(balance_minor)::bigint from wallets")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(total, (0..40).map(|n| 10 + n).sum::<i64>());
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_failing_credit_does_not_fail_the_others_in_its_batch(pool: PgPool) {
    let app = spawn_app(pool).await;
    // This wallet cannot take another cent: its next credit overflows bigint.
    let full = [credit("evt_full", "pi_full", "user_full", i64::MAX)];
    assert_eq!(
        outcomes(
            &try_batch(&app.pooled, &full)
                .await
                .expect("the batch commits")
        ),
        [Outcome::Processed]
    );

    let credits = [
        credit("evt_n1", "pi_n1", "user_n", 10),
        credit("evt_over", "pi_over", "user_full", 1),
        credit("evt_n2", "pi_n2", "user_n", 20),
    ];
    let answers = batch::apply(&app.pooled, &credits, Wake::Notify).await;
    assert_eq!(answers[0].as_ref().unwrap().outcome, Outcome::Processed);
    // The overflow would recur on every retry: recorded, without effect.
    assert_eq!(answers[1].as_ref().unwrap().outcome, Outcome::Rejected);
    assert_eq!(answers[2].as_ref().unwrap().outcome, Outcome::Processed);

    assert_eq!(app.balance("user_n", "USD").await, Some(30));
    assert_eq!(app.balance("user_full", "USD").await, Some(i64::MAX));
    let (outcome, detail) = app.event("evt_over").await;
    assert_eq!(outcome, "rejected");
    assert_eq!(detail["sqlstate"], "22003");
    let entries: i64 =
        sqlx::query_scalar("select count(*) from wallet_entries where source_ref = 'pi_over'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(entries, 0, "the rejected credit left no entry");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_payment_credited_by_another_event_is_ignored_with_its_owner(pool: PgPool) {
    let app = spawn_app(pool).await;
    // Two event ids for one PaymentIntent, in one batch (which must not
    // need the one-by-one fallback), then a third later.
    let credits = [
        credit("evt_p1", "pi_same", "user_p", 500),
        credit("evt_p2", "pi_same", "user_p", 500),
    ];
    let answers = try_batch(&app.pooled, &credits)
        .await
        .expect("the batch commits");
    assert_eq!(outcomes(&answers), [Outcome::Processed, Outcome::Ignored]);
    let (outcome, detail) = app.event("evt_p2").await;
    assert_eq!(outcome, "ignored");
    assert_eq!(detail["owner_event_id"], "evt_p1");

    let later = [credit("evt_p3", "pi_same", "user_p", 500)];
    let answers = try_batch(&app.pooled, &later)
        .await
        .expect("the batch commits");
    assert_eq!(outcomes(&answers), [Outcome::Ignored]);
    assert_eq!(app.event("evt_p3").await.1["owner_event_id"], "evt_p1");
    assert_eq!(app.balance("user_p", "USD").await, Some(500));
    assert_eq!(app.count("outbox").await, 1);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_batched_credit_applies_the_refund_waiting_for_it(pool: PgPool) {
    let app = spawn_app(pool).await;
    let refund = charge("evt_rf", "charge.refunded", "ch_w", "pi_w", 1000, 400);
    app.deliver(&refund, "deferred").await;

    let credits = [
        credit("evt_w0", "pi_w0", "user_1", 5),
        credit("evt_w", "pi_w", "user_1", 1000),
    ];
    let answers = try_batch(&app.pooled, &credits)
        .await
        .expect("the batch commits");
    assert_eq!(outcomes(&answers), [Outcome::Processed, Outcome::Processed]);
    let (_, detail) = app.event("evt_w").await;
    assert_eq!(detail["applied_deferred"], serde_json::json!(["evt_rf"]));
    assert_eq!(detail["balance_minor"], 1005);
    let (outcome, detail) = app.event("evt_rf").await;
    assert_eq!(outcome, "processed");
    assert_eq!(detail["applied_by"], "evt_w");
    assert_eq!(app.balance("user_1", "USD").await, Some(1005 - 400));
    assert_eq!(app.count("deferred_events").await, 0);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_credit_whose_request_gave_up_before_the_commit_is_never_committed(pool: PgPool) {
    let app = spawn_app(pool).await;
    let credits = [
        credit("evt_g1", "pi_g1", "user_g", 10),
        credit("evt_g2", "pi_g2", "user_g", 20),
        credit("evt_g3", "pi_g3", "user_g", 30),
    ];
    // The second request is answered (timed out) after the batch started:
    // the batch waits on a claim another session holds, the request gives
    // up meanwhile, then the other session rolls back.
    let holder = hold_claim(&app.pool, "evt_g3").await;
    let requests: Vec<CancellationToken> =
        credits.iter().map(|_| CancellationToken::new()).collect();
    let give_up = async {
        until_waiting_on_locks(&app.pool, 1).await;
        requests[1].cancel();
        holder.rollback().await.unwrap();
    };
    let (answers, ()) = tokio::join!(
        batch::try_batch(&app.pooled, &credits, &requests, &Wake::Notify),
        give_up,
    );
    let answers = answers.expect("the batch commits");
    assert_eq!(answers[0].as_ref().unwrap().outcome, Outcome::Processed);
    assert!(answers[1].is_err());
    assert_eq!(answers[2].as_ref().unwrap().outcome, Outcome::Processed);

    assert_eq!(app.balance("user_g", "USD").await, Some(40));
    let gone: i64 =
        sqlx::query_scalar("select count(*) from processed_events where event_id = 'evt_g2'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(gone, 0, "the abandoned credit left nothing behind");
    // The provider's retry applies it.
    let retry = [credit("evt_g2", "pi_g2", "user_g", 20)];
    assert_eq!(
        outcomes(
            &try_batch(&app.pooled, &retry)
                .await
                .expect("the batch commits")
        ),
        [Outcome::Processed]
    );
    assert_eq!(app.balance("user_g", "USD").await, Some(60));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn many_concurrent_requests_for_few_wallets_credit_each_event_once(pool: PgPool) {
    let app = spawn_app(pool).await;
    // 60 events x 3 copies, fired at once: they arrive together and share
    // batches through the dispatcher.
    let bodies: Vec<String> = (0..60)
        .flat_map(|n| {
            let body = payment_intent_succeeded(
                &format!("evt_h{n}"),
                &format!("pi_h{n}"),
                &format!("user_h{}", n % 3),
                100,
            );
            [body.clone(), body.clone(), body]
        })
        .collect();
    let app = &app;
    let answers = join_all(bodies.iter().map(|body| async move {
        let response = app.post_stripe(body).await;
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        let answer: Value = response.json().await.unwrap();
        answer["outcome"].as_str().unwrap().to_owned()
    }))
    .await;
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("\nwebhookd_ingest_batch_fallbacks_total 0\n"),
        "every batch committed as one: {metrics}"
    );
    assert_eq!(answers.iter().filter(|o| *o == "processed").count(), 60);
    assert_eq!(answers.iter().filter(|o| *o == "duplicate").count(), 120);
    for user in 0..3 {
        assert_eq!(
            app.balance(&format!("user_h{user}"), "USD").await,
            Some(20 * 100)
        );
    }
    assert_eq!(app.count("outbox").await, 60);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_locked_wallet_holds_back_only_its_own_credits(pool: PgPool) {
    let app = spawn_app(pool).await;
    let seed = payment_intent_succeeded("evt_l0", "pi_l0", "user_locked", 100);
    app.deliver(&seed, "processed").await;

    // Another session holds the wallet row until told otherwise.
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("select 1 from wallets where user_id = 'user_locked' for update")
        .execute(&mut *holder)
        .await
        .unwrap();
    let locked = {
        let (client, url) = (
            app.client.clone(),
            format!("{}/webhooks/stripe", app.address),
        );
        let body = payment_intent_succeeded("evt_l1", "pi_l1", "user_locked", 50);
        let header = webhookd::providers::stripe::signature_header(
            crate::helpers::SECRET,
            crate::helpers::now(),
            body.as_bytes(),
        );
        tokio::spawn(async move {
            let response = client
                .post(url)
                .header("stripe-signature", header)
                .body(body)
                .send()
                .await
                .unwrap();
            let answer: Value = response.json().await.unwrap();
            answer["outcome"].as_str().unwrap().to_owned()
        })
    };
    // The others (possibly in the locked credit's batch) go through.
    let app = &app;
    join_all((0..5).map(|n| async move {
        let body = payment_intent_succeeded(
            &format!("evt_free{n}"),
            &format!("pi_free{n}"),
            &format!("user_free{n}"),
            10,
        );
        app.deliver(&body, "processed").await;
    }))
    .await;
    assert!(!locked.is_finished(), "the locked credit waits for its row");

    holder.rollback().await.unwrap();
    assert_eq!(locked.await.unwrap(), "processed");
    assert_eq!(app.balance("user_locked", "USD").await, Some(150));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_credit_retried_alone_after_its_batch_failed_rolls_back_when_its_request_times_out(
    pool: PgPool,
) {
    // The request outlives the batch's 1 s lock timeout, so its credit is
    // retried on its own, and then times out while that retry still waits.
    let app = crate::helpers::spawn_app_with(pool, webhookd::clock::Clock::System, |s| {
        s.request_timeout = std::time::Duration::from_millis(1500);
    })
    .await;
    let seed = payment_intent_succeeded("evt_t0", "pi_t0", "user_timeout", 100);
    app.deliver(&seed, "processed").await;
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("select 1 from wallets where user_id = 'user_timeout' for update")
        .execute(&mut *holder)
        .await
        .unwrap();

    let late = payment_intent_succeeded("evt_t1", "pi_t1", "user_timeout", 50);
    let response = app.post_stripe(&late).await;
    assert_eq!(response.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    holder.rollback().await.unwrap();

    // Answered 503, so nothing of it may remain: the retry applies it.
    app.deliver(&late, "processed").await;
    assert_eq!(app.balance("user_timeout", "USD").await, Some(150));
    app.assert_consistent().await;
}

/// Shutdown: once the server stopped, the ingestor is closed. Its
/// dispatcher then ends even while a clone of it lives on (a connection
/// outliving the grace period holds one), so waiting for the process's
/// tasks ends; later events are answered `ShuttingDown` (503) and write
/// nothing.
#[sqlx::test]
async fn a_closed_ingestor_answers_shutting_down_and_its_tasks_drain(pool: PgPool) {
    use std::time::Duration;
    use tokio_util::task::TaskTracker;
    use webhookd::ingest::{self, Ingestor};
    use webhookd::providers::testing;

    let tasks = TaskTracker::new();
    let settings = batch::BatchSettings {
        max_events: 8,
        concurrency: 1,
    };
    let ingestor = Ingestor::start(pool.clone(), settings, Wake::Notify, &tasks);
    let before = credit("evt_open", "pi_open", "user_close", 100);
    let answer = ingestor.ingest(testing::assume_verified(before)).await;
    assert_eq!(answer.expect("applied").outcome, Outcome::Processed);

    ingestor.close();
    tasks.close();
    tokio::time::timeout(Duration::from_secs(30), tasks.wait())
        .await
        .expect("the dispatcher stops though a clone of the ingestor lives");
    let after = credit("evt_closed", "pi_closed", "user_close", 50);
    let answer = ingestor.ingest(testing::assume_verified(after)).await;
    assert!(
        matches!(answer, Err(ingest::Error::ShuttingDown)),
        "{answer:?}"
    );
    let recorded: Vec<String> =
        sqlx::query_scalar("select event_id from processed_events order by event_id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(recorded, ["evt_open"]);
    let balance: i64 =
        sqlx::query_scalar("select balance_minor from wallets where user_id = 'user_close'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(balance, 100);
}
