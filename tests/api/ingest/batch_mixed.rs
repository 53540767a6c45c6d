//! Group commit of every kind of event: a batch mixing credits, refunds,
//! charges, subscriptions, invoices and other providers keeps the results of
//! one event per transaction in arrival order, and batches with refunds
//! never deadlock however they overlap.

use bytes::Bytes;
use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::events::Outcome;
use webhookd::ingest::{self, Wake, batch};
use webhookd::providers::{self, Event};

use crate::helpers::{
    TestApp, charge, invoice_paid, now, payment_intent_succeeded, spawn_app, subscription,
    until_waiting_on_locks,
};

fn stripe(event_id: &str, event_type: &str, body: String) -> Event {
    providers::Event::from_stored("stripe", event_id, event_type, Bytes::from(body))
        .expect("a well-formed event")
}

fn razorpay_captured(event_id: &str, payment: &str, user_id: &str, amount: i64) -> Event {
    let body = json!({
        "entity": "event", "account_id": "acc_1", "event": "payment.captured",
        "contains": ["payment"], "created_at": now(),
        "payload": {"payment": {"entity": {
            "id": payment, "entity": "payment", "amount": amount, "currency": "INR",
            "status": "captured", "amount_refunded": 0, "notes": {"user_id": user_id},
            "created_at": now(),
        }}},
    });
    providers::Event::from_stored(
        "razorpay",
        event_id,
        "payment.captured",
        Bytes::from(body.to_string()),
    )
    .expect("a well-formed event")
}

/// A history that needs every rule: a refund before its credit, two events
/// for one payment intent, a charge after its credit, subscription events
/// out of order, an invoice twice, a Razorpay capture, a malformed credit.
fn history() -> Vec<Event> {
    let t = now();
    vec![
        stripe(
            "evt_x_refund",
            "charge.refunded",
            charge("evt_x_refund", "charge.refunded", "ch_x", "pi_x", 1000, 300),
        ),
        stripe(
            "evt_x_sub_new",
            "customer.subscription.updated",
            subscription(
                "evt_x_sub_new",
                "customer.subscription.updated",
                "sub_x",
                "past_due",
                t,
            ),
        ),
        stripe(
            "evt_x_credit",
            "payment_intent.succeeded",
            payment_intent_succeeded("evt_x_credit", "pi_x", "user_1", 1000),
        ),
        stripe(
            "evt_x_other",
            "payment_intent.succeeded",
            payment_intent_succeeded("evt_x_other", "pi_x", "user_1", 1000),
        ),
        stripe(
            "evt_x_sub_old",
            "customer.subscription.updated",
            subscription(
                "evt_x_sub_old",
                "customer.subscription.updated",
                "sub_x",
                "active",
                t - 10,
            ),
        ),
        stripe(
            "evt_x_charge",
            "charge.succeeded",
            charge("evt_x_charge", "charge.succeeded", "ch_x", "pi_x", 1000, 0),
        ),
        stripe(
            "evt_x_inv1",
            "invoice.paid",
            invoice_paid("evt_x_inv1", "in_x"),
        ),
        razorpay_captured("evt_x_rzp", "pay_x", "user_1", 5000),
        stripe(
            "evt_x_inv2",
            "invoice.paid",
            invoice_paid("evt_x_inv2", "in_x"),
        ),
        stripe(
            "evt_x_credit2",
            "payment_intent.succeeded",
            payment_intent_succeeded("evt_x_credit2", "pi_x2", "user_1", 50),
        ),
        stripe(
            "evt_x_bad",
            "payment_intent.succeeded",
            payment_intent_succeeded("evt_x_bad", "pi_x3", "not an id", 50),
        ),
    ]
}

/// What the tables hold, without serial ids and timestamps.
async fn contents(app: &TestApp) -> Vec<String> {
    let queries = [
        "select provider || ' ' || event_id || ' ' || outcome || ' ' ||
                (detail - 'entry_id' - 'outbox_id' - 'receipt_outbox_id')::text
         from processed_events order by provider, event_id",
        "select user_id || ' ' || currency || ' ' || balance_minor from wallets order by 1",
        "select provider || ' ' || kind || ' ' || source_ref || ' ' || event_id || ' ' || amount_minor
         from wallet_entries order by id",
        "select provider || ' ' || payment_id || ' ' || status || ' ' || refunded_minor || ' ' ||
                coalesce(event_id, '-') from payments order by 1",
        "select provider || ' ' || subscription_id || ' ' || status || ' ' || event_id
         from subscriptions order by 1",
        "select topic || ' ' || dedupe_key || ' ' || (payload - 'entry_id')::text from outbox order by id",
        "select provider || ' ' || event_id from deferred_events order by 1",
    ];
    let mut rows = Vec::new();
    for query in queries {
        let found: Vec<String> = sqlx::query_scalar(query)
            .fetch_all(&app.pool)
            .await
            .unwrap();
        rows.extend(found);
    }
    rows
}

/// A second migrated database beside the test's own, for the same history
/// applied another way.
async fn second_database(pool: &PgPool) -> PgPool {
    // Test databases' names may be as long as Postgres allows.
    let other: String = sqlx::query_scalar("select 'second_' || md5(current_database())")
        .fetch_one(pool)
        .await
        .unwrap();
    sqlx::query(&format!("drop database if exists \"{other}\""))
        .execute(pool)
        .await
        .unwrap();
    sqlx::query(&format!("create database \"{other}\""))
        .execute(pool)
        .await
        .unwrap();
    let options = (*pool.connect_options()).clone().database(&other);
    let other = PgPool::connect_with(options).await.unwrap();
    webhookd::db::MIGRATOR.run(&other).await.unwrap();
    other
}

/// One request per event, none of which gives up.
fn none_gave_up<T>(events: &[T]) -> Vec<tokio_util::sync::CancellationToken> {
    events.iter().map(|_| Default::default()).collect()
}

fn outcomes(answers: &[batch::Answer]) -> Vec<Outcome> {
    answers
        .iter()
        .map(|answer| answer.as_ref().expect("applied").outcome)
        .collect()
}

#[sqlx::test]
async fn a_mixed_batch_commits_once_with_the_results_of_one_event_per_transaction(pool: PgPool) {
    let other = second_database(&pool).await;
    let batched = spawn_app(pool).await;
    let one_by_one = spawn_app(other).await;
    let events = history();

    // No fallback: the whole history is one transaction.
    let answers = batch::try_batch(
        &batched.pool,
        &events,
        &none_gave_up(&events),
        &Wake::Notify,
    )
    .await
    .expect("the batch commits");
    let mut expected = Vec::new();
    for event in &events {
        expected.push(
            ingest::ingest(&one_by_one.pool, event)
                .await
                .unwrap()
                .outcome,
        );
    }
    use Outcome::{Deferred, Ignored, Processed, Rejected, Superseded};
    assert_eq!(
        expected,
        [
            Deferred, Processed, Processed, Ignored, Superseded, Ignored, Processed, Processed,
            Ignored, Processed, Rejected
        ]
    );
    assert_eq!(outcomes(&answers), expected);
    assert_eq!(contents(&batched).await, contents(&one_by_one).await);

    let (outcome, detail) = batched.event("evt_x_refund").await;
    assert_eq!(outcome, "processed", "{detail}");
    assert_eq!(detail["applied_by"], "evt_x_credit");
    assert_eq!(
        batched.balance("user_1", "USD").await,
        Some(1000 - 300 + 50)
    );
    assert_eq!(batched.balance("user_1", "INR").await, Some(5000));
    batched.assert_consistent().await;
    one_by_one.assert_consistent().await;
}

#[sqlx::test]
async fn copies_of_a_mixed_batch_in_one_batch_and_in_later_ones_are_duplicates(pool: PgPool) {
    let app = spawn_app(pool).await;
    let mut events = history();
    events.extend(history());
    let answers = outcomes(&ingest::ingest_batch(&app.pooled, &events).await);
    let (first, copies) = answers.split_at(11);
    assert!(first.iter().all(|o| *o != Outcome::Duplicate));
    assert!(copies.iter().all(|o| *o == Outcome::Duplicate));
    let before = contents(&app).await;
    let again = ingest::ingest_batch(&app.pooled, &history()).await;
    assert!(outcomes(&again).iter().all(|o| *o == Outcome::Duplicate));
    assert_eq!(contents(&app).await, before);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn batches_of_credits_and_refunds_over_shared_wallets_in_opposite_orders_never_deadlock(
    pool: PgPool,
) {
    let app = spawn_app(pool).await;
    // Six credits to refund later, over four wallets.
    let credited: Vec<Event> = (0..6)
        .map(|n| {
            let id = format!("evt_c{n}");
            let body = payment_intent_succeeded(
                &id,
                &format!("pi_c{n}"),
                &format!("user_d{}", n % 4),
                1000,
            );
            stripe(&id, "payment_intent.succeeded", body)
        })
        .collect();
    ingest::ingest_batch(&app.pooled, &credited).await;
    // Credits and refunds interleaved, touching every wallet.
    let mut forward = Vec::new();
    for n in 0..24 {
        let id = format!("evt_d{n:02}");
        let body =
            payment_intent_succeeded(&id, &format!("pi_d{n:02}"), &format!("user_d{}", n % 4), 10);
        forward.push(stripe(&id, "payment_intent.succeeded", body));
        if n % 4 == 0 {
            let (id, c) = (format!("evt_r{n}"), n / 4);
            let body = charge(
                &id,
                "charge.refunded",
                &format!("ch_c{c}"),
                &format!("pi_c{c}"),
                1000,
                100,
            );
            forward.push(stripe(&id, "charge.refunded", body));
        }
    }
    let backward: Vec<Event> = forward.iter().rev().cloned().collect();
    // Another session holds the key of a credit in the middle: both batches
    // stop there holding their claims and the keys before it, and go on
    // together when it lets go. Out of one global order, they would deadlock.
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("select pg_advisory_xact_lock(hashtextextended('stripe:credit:pi_d12', 0))")
        .execute(&mut *holder)
        .await
        .unwrap();
    let pool = &app.pool;
    let release = async {
        until_waiting_on_locks(pool, 2).await;
        holder.rollback().await.unwrap();
    };
    let (forward_requests, backward_requests) = (none_gave_up(&forward), none_gave_up(&backward));
    let (first, second, ()) = tokio::join!(
        batch::try_batch(pool, &forward, &forward_requests, &Wake::Notify),
        batch::try_batch(pool, &backward, &backward_requests, &Wake::Notify),
        release,
    );
    let mut processed = 0;
    for answers in [first, second] {
        for outcome in outcomes(&answers.expect("no batch fails")) {
            match outcome {
                Outcome::Processed => processed += 1,
                Outcome::Duplicate => {}
                other => panic!("unexpected outcome {other:?}"),
            }
        }
    }
    assert_eq!(processed, 24 + 6, "each event processed exactly once");
    let total: i64 = sqlx::query_scalar("select sum(balance_minor)::bigint from wallets")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(total, 6 * 1000 + 24 * 10 - 6 * 100);
    let deferred: Value = json!(app.count("deferred_events").await);
    assert_eq!(deferred, json!(0));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_failed_batch_applies_events_that_share_a_key_in_arrival_order(pool: PgPool) {
    let app = spawn_app(pool).await;
    // A wallet that cannot take another cent: a credit to it fails its batch.
    let full = [stripe(
        "evt_f_full",
        "payment_intent.succeeded",
        payment_intent_succeeded("evt_f_full", "pi_f_full", "user_full", i64::MAX),
    )];
    ingest::ingest_batch(&app.pooled, &full).await;
    let t = now();
    let update = |id: &str, status: &str| {
        let body = subscription(id, "customer.subscription.updated", "sub_f", status, t);
        stripe(id, "customer.subscription.updated", body)
    };
    // Two updates of one subscription at the same second: the later arrival
    // wins, also when a poison neighbour sends the batch one by one.
    let events = [
        update("evt_f_1", "past_due"),
        stripe(
            "evt_f_over",
            "payment_intent.succeeded",
            payment_intent_succeeded("evt_f_over", "pi_f_over", "user_full", 1),
        ),
        update("evt_f_2", "active"),
        update("evt_f_3", "unpaid"),
    ];
    let answers = outcomes(&ingest::ingest_batch(&app.pooled, &events).await);
    use Outcome::{Processed, Rejected};
    assert_eq!(answers, [Processed, Rejected, Processed, Processed]);
    let status: String =
        sqlx::query_scalar("select status from subscriptions where subscription_id = 'sub_f'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(status, "unpaid", "the last to arrive of equal times");
    assert_eq!(app.event("evt_f_over").await.1["sqlstate"], "22003");
    app.assert_consistent().await;
}
