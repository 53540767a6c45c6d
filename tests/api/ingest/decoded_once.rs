//! Each event is decoded once on its way to the database: through the
//! dispatcher and its group commit, and through the fallback after a
//! failed batch (which applies the same decoded events again, one by one).
//! A deferred event is decoded once more when a credit releases it: it is
//! then read back from storage, in another transaction.

use bytes::Bytes;
use futures_util::future::join_all;
use sqlx::PgPool;
use tokio_util::task::TaskTracker;
use webhookd::effects::testing::decodes_of;
use webhookd::events::Outcome;
use webhookd::ingest::batch::{self, BatchSettings};
use webhookd::ingest::{Ingestor, Wake};
use webhookd::providers::{Event, testing};

use crate::helpers::{charge, now, payment_intent_succeeded, spawn_app, subscription};

fn stripe(event_id: &str, event_type: &str, body: String) -> Event {
    Event::from_stored("stripe", event_id, event_type, Bytes::from(body)).expect("an event")
}

fn credit(event_id: &str, intent: &str, user_id: &str, amount: i64) -> Event {
    let body = payment_intent_succeeded(event_id, intent, user_id, amount);
    stripe(event_id, "payment_intent.succeeded", body)
}

#[sqlx::test]
async fn concurrent_deliveries_through_the_group_commit_are_decoded_once_each(pool: PgPool) {
    let app = spawn_app(pool).await;
    let tasks = TaskTracker::new();
    let settings = BatchSettings {
        max_events: 16,
        concurrency: 2,
    };
    let ingestor = Ingestor::start(app.pooled.clone(), settings, Wake::Notify, &tasks);
    let now = now();
    let events: Vec<Event> = (0..24)
        .map(|n| match n % 3 {
            0 => credit(
                &format!("evt_once_c{n}"),
                &format!("pi_once_{n}"),
                "user_once",
                10,
            ),
            1 => stripe(
                &format!("evt_once_s{n}"),
                "customer.subscription.updated",
                subscription(
                    &format!("evt_once_s{n}"),
                    "customer.subscription.updated",
                    &format!("sub_once_{n}"),
                    "active",
                    now,
                ),
            ),
            _ => stripe(
                &format!("evt_once_r{n}"),
                "charge.succeeded",
                charge(
                    &format!("evt_once_r{n}"),
                    "charge.succeeded",
                    &format!("ch_once_{n}"),
                    &format!("pi_once_{}", n - 2),
                    10,
                    0,
                ),
            ),
        })
        .collect();
    let answers = join_all(
        events
            .iter()
            .map(|event| ingestor.ingest(testing::assume_verified(event.clone()))),
    )
    .await;
    for (event, answer) in events.iter().zip(answers) {
        let outcome = answer.expect("applied").outcome;
        assert!(
            matches!(outcome, Outcome::Processed | Outcome::Ignored),
            "{}: {outcome:?}",
            event.event_id()
        );
        assert_eq!(
            decodes_of("stripe", event.event_id()),
            1,
            "{}",
            event.event_id()
        );
    }
    assert_eq!(app.balance("user_once", "USD").await, Some(80));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_failed_batch_applies_its_events_one_by_one_without_decoding_them_again(pool: PgPool) {
    let app = spawn_app(pool).await;
    // A wallet that cannot take another cent: a credit to it fails its batch.
    let full = [credit(
        "evt_once_full",
        "pi_once_full",
        "user_once_full",
        i64::MAX,
    )];
    batch::apply(&app.pooled, &full, Wake::Notify).await;
    let events = [
        credit("evt_once_f1", "pi_once_f1", "user_once_f", 10),
        credit("evt_once_over", "pi_once_over", "user_once_full", 1),
        stripe(
            "evt_once_rf",
            "charge.refunded",
            charge(
                "evt_once_rf",
                "charge.refunded",
                "ch_once_f1",
                "pi_once_f1",
                10,
                4,
            ),
        ),
        credit("evt_once_f2", "pi_once_f2", "user_once_f", 20),
    ];
    let answers = batch::apply(&app.pooled, &events, Wake::Notify).await;
    let outcomes: Vec<Outcome> = answers
        .iter()
        .map(|answer| answer.as_ref().expect("answered").outcome)
        .collect();
    use Outcome::{Processed, Rejected};
    assert_eq!(outcomes, [Processed, Rejected, Processed, Processed]);
    for event in &events {
        assert_eq!(
            decodes_of("stripe", event.event_id()),
            1,
            "{}",
            event.event_id()
        );
    }
    assert_eq!(app.balance("user_once_f", "USD").await, Some(26));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_deferred_refund_is_decoded_when_delivered_and_once_more_when_released(pool: PgPool) {
    let app = spawn_app(pool).await;
    let refund = stripe(
        "evt_once_early_rf",
        "charge.refunded",
        charge(
            "evt_once_early_rf",
            "charge.refunded",
            "ch_once_e",
            "pi_once_e",
            50,
            20,
        ),
    );
    let answers = batch::apply(&app.pooled, &[refund], Wake::Notify).await;
    assert_eq!(answers[0].as_ref().unwrap().outcome, Outcome::Deferred);
    let credit = credit("evt_once_e", "pi_once_e", "user_once_e", 50);
    let answers = batch::apply(&app.pooled, &[credit], Wake::Notify).await;
    assert_eq!(answers[0].as_ref().unwrap().outcome, Outcome::Processed);
    assert_eq!(decodes_of("stripe", "evt_once_e"), 1);
    assert_eq!(decodes_of("stripe", "evt_once_early_rf"), 2);
    assert_eq!(app.balance("user_once_e", "USD").await, Some(30));
    let (outcome, detail) = app.event("evt_once_early_rf").await;
    assert_eq!(outcome, "processed");
    assert_eq!(detail["applied_by"], "evt_once_e");
    app.assert_consistent().await;
}
