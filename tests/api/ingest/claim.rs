//! The claim: an advisory lock on the event's id, its row written once with
//! its outcome at the end. A copy in flight and an event recorded by a
//! transaction that takes no claim are both found, never applied twice;
//! an import and webhookd's own events claim too.

use serde_json::Value;
use sqlx::PgPool;
use webhookd::events;

use crate::helpers::{
    TestApp, charge, payment_intent_succeeded, spawn_app, until_waiting_on_locks,
};

/// What a copy in flight leaves once it commits: its recorded row.
async fn record(tx: &mut sqlx::PgConnection, event_id: &str) {
    sqlx::query(
        "insert into processed_events (provider, event_id, event_type, outcome, payload)
         values ('stripe', $1, 'payment_intent.succeeded', 'processed', '{\"copy\": 1}')",
    )
    .bind(event_id)
    .execute(tx)
    .await
    .unwrap();
}

/// A copy of Stripe event `event_id` in flight: its claim held and its row
/// written, until the transaction returned ends.
async fn copy_in_flight(
    app: &TestApp,
    event_id: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut copy = app.pool.begin().await.unwrap();
    sqlx::query("select pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(events::claim_key("stripe", event_id))
        .execute(&mut *copy)
        .await
        .unwrap();
    record(&mut copy, event_id).await;
    copy
}

/// Nothing of the delivery `event_id` applied: no entry, no outbox row,
/// and its row is the other transaction's.
async fn assert_left_to_the_other(app: &TestApp, event_id: &str) {
    assert_eq!(app.count("wallet_entries").await, 0);
    assert_eq!(app.count("outbox").await, 0);
    assert_eq!(app.balance("user_1", "USD").await, None);
    let payload: Value =
        sqlx::query_scalar("select payload from processed_events where event_id = $1")
            .bind(event_id)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        payload,
        serde_json::json!({"copy": 1}),
        "the first row stays"
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_delivery_whose_claim_waited_for_a_copy_that_committed_is_a_duplicate(pool: PgPool) {
    let app = spawn_app(pool).await;
    // Another transaction holds this event's claim, as a copy in flight does.
    let copy = copy_in_flight(&app, "evt_held").await;

    let body = payment_intent_succeeded("evt_held", "pi_held", "user_1", 900);
    let other = async {
        until_waiting_on_locks(&app.pool, 1).await;
        copy.commit().await.unwrap();
    };
    tokio::join!(app.deliver(&body, "duplicate"), other);
    assert_left_to_the_other(&app, "evt_held").await;
}

#[sqlx::test]
async fn an_event_recorded_without_a_claim_while_its_delivery_ran_is_a_duplicate(pool: PgPool) {
    let app = spawn_app(pool).await;
    // Recorded by a transaction that takes no claim (no writer of webhookd's
    // does: a hand-written insert, say), not committed yet: the delivery does not see it, applies its effect,
    // and then waits to write its row.
    let mut import = app.pool.begin().await.unwrap();
    record(&mut import, "evt_imported").await;

    let body = payment_intent_succeeded("evt_imported", "pi_imported", "user_1", 900);
    let other = async {
        until_waiting_on_locks(&app.pool, 1).await;
        import.commit().await.unwrap();
    };
    // Its row is not written: it rolls back and runs again, a duplicate.
    tokio::join!(app.deliver(&body, "duplicate"), other);
    assert_left_to_the_other(&app, "evt_imported").await;
}

#[sqlx::test]
async fn an_import_waits_for_a_copy_in_flight_and_finds_it_recorded(pool: PgPool) {
    let app = spawn_app(pool).await;
    // A delivery in flight: its claim held, its row not written yet.
    let mut copy = app.pool.begin().await.unwrap();
    sqlx::query("select pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(events::claim_key("stripe", "evt_both_ways"))
        .execute(&mut *copy)
        .await
        .unwrap();
    let body = payment_intent_succeeded("evt_both_ways", "pi_both_ways", "user_1", 900);
    let event = webhookd::providers::Event::from_stored(
        "stripe",
        "evt_both_ways",
        "payment_intent.succeeded",
        body.into(),
    )
    .unwrap();
    let import = async {
        let mut tx = app.pool.begin().await.unwrap();
        let imported = events::import(&mut tx, &event).await.unwrap();
        tx.commit().await.unwrap();
        imported
    };
    let other = async {
        // The import waits for the claim (without it, it would find no row
        // and record the event as imported), then the copy records it.
        until_waiting_on_locks(&app.pool, 1).await;
        record(&mut copy, "evt_both_ways").await;
        copy.commit().await.unwrap();
    };
    let (imported, ()) = tokio::join!(import, other);
    assert!(!imported, "the copy recorded it first");
    assert_left_to_the_other(&app, "evt_both_ways").await;
}

#[sqlx::test]
async fn a_delivery_whose_claim_waited_for_a_copy_that_rolled_back_applies(pool: PgPool) {
    let app = spawn_app(pool).await;
    let copy = copy_in_flight(&app, "evt_back").await;

    let body = payment_intent_succeeded("evt_back", "pi_back", "user_1", 900);
    let other = async {
        until_waiting_on_locks(&app.pool, 1).await;
        copy.rollback().await.unwrap();
    };
    tokio::join!(app.deliver(&body, "processed"), other);
    assert_eq!(app.balance("user_1", "USD").await, Some(900));
    let (outcome, detail) = app.event("evt_back").await;
    assert_eq!(outcome, "processed");
    assert_eq!(detail["balance_minor"], 900);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_refund_deferred_while_its_credits_claim_waited_is_released_by_the_credit(pool: PgPool) {
    let app = spawn_app(pool).await;
    // A refund's transaction in flight, as it leaves things before its
    // commit: its payment's key held, the refund recorded and deferred for
    // that payment, whose credit has not arrived.
    let refund = charge(
        "evt_race_refund",
        "charge.refunded",
        "ch_race",
        "pi_race",
        900,
        300,
    );
    let mut refunding = app.pool.begin().await.unwrap();
    sqlx::query("select pg_advisory_xact_lock(hashtextextended('stripe:credit:pi_race', 0))")
        .execute(&mut *refunding)
        .await
        .unwrap();
    sqlx::query(
        "insert into processed_events (provider, event_id, event_type, outcome, payload)
         values ('stripe', 'evt_race_refund', 'charge.refunded', 'deferred', $1::jsonb)",
    )
    .bind(&refund)
    .execute(&mut *refunding)
    .await
    .unwrap();
    sqlx::query(
        "insert into deferred_events (provider, event_id, waits_for)
         values ('stripe', 'evt_race_refund', 'pi_race')",
    )
    .execute(&mut *refunding)
    .await
    .unwrap();

    // The credit's claim waits for the payment's key, and the deferral
    // commits while it waits: read after the locks, with a snapshot of its
    // own, the waiting refund is found and released by the credit.
    let body = payment_intent_succeeded("evt_race_credit", "pi_race", "user_1", 900);
    let other = async {
        until_waiting_on_locks(&app.pool, 1).await;
        refunding.commit().await.unwrap();
    };
    tokio::join!(app.deliver(&body, "processed"), other);
    assert_eq!(app.balance("user_1", "USD").await, Some(600));
    let (outcome, _) = app.event("evt_race_refund").await;
    assert_eq!(outcome, "processed");
    assert_eq!(app.count("deferred_events").await, 0);
    let (_, detail) = app.event("evt_race_credit").await;
    assert_eq!(
        detail["applied_deferred"],
        serde_json::json!(["evt_race_refund"])
    );
    app.assert_consistent().await;
}
