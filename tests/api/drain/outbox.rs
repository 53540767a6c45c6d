//! The outbox drainer against a real local HTTP server that checks each
//! delivery's Standard Webhooks signature. Time is injected; queues are
//! drained explicitly.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;
use webhookd::cli::outbox::OutboxCommand;
use webhookd::clock::Clock;
use webhookd::outbox::store::{self, Attempt};
use webhookd::outbox::worker::Drained;
use webhookd::outbox::{Drainer, DrainerSettings};
use webhookd::sinks::Sink;
use webhookd::sinks::log::LogSink;

pub(crate) use crate::drain::sink::settings;
use crate::drain::sink::{TestSink, row, seed};
use crate::helpers::{now, payment_intent_succeeded, spawn_app};

/// The pids of this database's LISTEN connections.
async fn listeners(pool: &PgPool) -> Vec<i32> {
    sqlx::query_scalar("select pid from pg_stat_activity where query ilike 'listen%' and datname = current_database()")
        .fetch_all(pool)
        .await
        .unwrap()
}

/// Waits (bounded) until a LISTEN connection other than `except` exists.
async fn until_listening(pool: &PgPool, except: Option<i32>) -> Vec<i32> {
    for _ in 0..200 {
        let pids = listeners(pool).await;
        if pids.len() == 1 && Some(pids[0]) != except {
            return pids;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no new LISTEN connection");
}

/// A drainer that only wakes on notifications: its poll is an hour.
fn drainer_without_polling(pool: &PgPool, sink: &TestSink) -> Drainer {
    let settings = DrainerSettings {
        poll: Duration::from_secs(3600),
        ..settings(5)
    };
    crate::helpers::drainer_on(pool, sink.sink(Clock::System), settings, Clock::System)
}

#[sqlx::test]
async fn a_committed_effect_reaches_the_users_app_once_signed_with_its_outbox_id(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.deliver(
        &payment_intent_succeeded("evt_out", "pi_out", "user_1", 1500),
        "processed",
    )
    .await;
    let sink = TestSink::start().await;
    let drainer = sink.drainer(pool.clone(), Clock::System, 5);

    let drained = drainer.drain_once().await.unwrap();
    assert_eq!(
        drained,
        Drained {
            leased: 1,
            delivered: 1,
            ..Drained::default()
        }
    );
    assert_eq!(
        drainer.drain_once().await.unwrap().leased,
        0,
        "nothing left to deliver"
    );

    let received = sink.received();
    assert_eq!(received.len(), 1);
    let outbox_id: i64 = sqlx::query_scalar("select id from outbox")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        received[0].verified,
        "the signature verifies with the Standard Webhooks scheme"
    );
    assert_eq!(received[0].webhook_id, outbox_id.to_string());
    assert_eq!(received[0].body["type"], "wallet.credited");
    assert_eq!(received[0].body["event_id"], "evt_out");
    assert_eq!(received[0].body["data"]["amount_minor"], 1500);
    let stored = row(&pool, outbox_id, now()).await;
    assert!(stored.delivered && !stored.dead);
    assert_eq!(stored.attempts, 1);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_failing_sink_is_retried_with_backoff_until_it_answers(pool: PgPool) {
    let t0 = now() + 5;
    let clock = Clock::manual(t0);
    let sink = TestSink::start().await;
    sink.script(&[(500, None), (500, None)]);
    let drainer = sink.drainer(pool.clone(), clock.clone(), 10);
    let id = seed(&pool, 1).await[0];

    assert_eq!(drainer.drain_once().await.unwrap().retried, 1);
    let after_one = row(&pool, id, t0).await;
    assert_eq!(after_one.attempts, 1);
    assert!(
        (0.9..=1.1).contains(&after_one.due_in),
        "1 s ± 10%: {}",
        after_one.due_in
    );
    assert_eq!(after_one.last_error.as_deref(), Some("HTTP 500"));
    assert_eq!(
        drainer.drain_once().await.unwrap().leased,
        0,
        "not due before its backoff"
    );

    clock.advance(Duration::from_secs(2));
    assert_eq!(drainer.drain_once().await.unwrap().retried, 1);
    let after_two = row(&pool, id, t0 + 2).await;
    assert!(
        (14.4..=17.6).contains(&after_two.due_in),
        "16 s ± 10%: {}",
        after_two.due_in
    );
    clock.advance(Duration::from_secs(10));
    assert_eq!(
        drainer.drain_once().await.unwrap().leased,
        0,
        "not due before its backoff"
    );

    clock.advance(Duration::from_secs(10));
    assert_eq!(drainer.drain_once().await.unwrap().delivered, 1);
    let delivered = row(&pool, id, t0).await;
    assert!(delivered.delivered);
    assert_eq!(delivered.attempts, 3);
    let ids = sink.webhook_ids();
    assert_eq!(
        ids,
        vec![id.to_string(); 3],
        "one stable webhook-id across retries"
    );
}

#[sqlx::test]
async fn a_sink_down_past_max_attempts_dead_letters_and_retry_requeues(pool: PgPool) {
    let t0 = now() + 5;
    let clock = Clock::manual(t0);
    let sink = TestSink::start().await;
    sink.script(&[(503, None), (503, None)]);
    let drainer = sink.drainer(pool.clone(), clock.clone(), 2);
    let id = seed(&pool, 1).await[0];

    drainer.drain_once().await.unwrap();
    clock.advance(Duration::from_secs(2));
    assert_eq!(drainer.drain_once().await.unwrap().dead, 1);
    let dead = row(&pool, id, t0).await;
    assert!(dead.dead && !dead.delivered);
    assert_eq!(
        dead.last_error.as_deref(),
        Some("HTTP 503 (after 2 attempts)")
    );
    clock.advance(Duration::from_secs(3600));
    assert_eq!(
        drainer.drain_once().await.unwrap().leased,
        0,
        "dead rows are kept, not retried"
    );

    let mut listing = Vec::new();
    webhookd::cli::outbox::run(
        &pool,
        &OutboxCommand::List {
            dead: true,
            sink: None,
            limit: 10,
        },
        &mut listing,
    )
    .await
    .unwrap();
    let listing = String::from_utf8(listing).unwrap();
    assert!(
        listing.contains("dead") && listing.contains("HTTP 503"),
        "{listing}"
    );

    let mut output = Vec::new();
    let retry = OutboxCommand::Retry {
        id: Some(id),
        all_dead: false,
        sink: None,
    };
    webhookd::cli::outbox::run(&pool, &retry, &mut output)
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8(output).unwrap(),
        format!("re-queued 1: {id}\n")
    );
    // Retrying a row that is not dead is an error, not a silent no-op.
    assert!(
        webhookd::cli::outbox::run(&pool, &retry, &mut Vec::new())
            .await
            .is_err()
    );

    // The re-queued row is due at the database's now, which the pinned clock
    // passed. Attempt numbers keep counting, so a stale outcome from attempt 1
    // can never land on the new attempt.
    let requeued = row(&pool, id, t0).await;
    assert_eq!((requeued.attempts, requeued.dead), (2, false));
    assert_eq!(drainer.drain_once().await.unwrap().delivered, 1);
    let delivered = row(&pool, id, t0).await;
    assert!(delivered.delivered && !delivered.dead);
    assert_eq!(delivered.attempts, 3);
    let stale = store::record(
        &pool,
        id,
        1,
        &Attempt::Dead {
            error: "late".into(),
        },
        None,
    )
    .await;
    assert!(!stale.unwrap(), "an old attempt's outcome is refused");
    assert_eq!(sink.received().len(), 3);
}

#[sqlx::test]
async fn permanent_refusals_dead_letter_at_once_and_retry_after_is_honoured(pool: PgPool) {
    let t0 = now() + 5;
    let clock = Clock::manual(t0);
    let sink = TestSink::start().await;
    let ids = seed(&pool, 2).await;
    let drainer = crate::helpers::drainer_on(
        &pool,
        sink.sink(clock.clone()),
        DrainerSettings {
            concurrency: 1,
            ..settings(10)
        },
        clock.clone(),
    );
    sink.script(&[(422, None), (429, Some("120"))]);
    let drained = drainer.drain_once().await.unwrap();
    assert_eq!((drained.dead, drained.retried), (1, 1));
    let (first, second) = (row(&pool, ids[0], t0).await, row(&pool, ids[1], t0).await);
    assert!(first.dead);
    assert_eq!(first.last_error.as_deref(), Some("HTTP 422"));
    assert!(!second.dead);
    assert!(
        (119.0..=121.0).contains(&second.due_in),
        "Retry-After 120: {}",
        second.due_in
    );
}

#[sqlx::test]
async fn two_drainers_deliver_a_thousand_rows_each_exactly_once(pool: PgPool) {
    seed(&pool, 1000).await;
    let sink = TestSink::start().await;
    let options = (*pool.connect_options()).clone();
    let shutdown = CancellationToken::new();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let own_pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone())
            .await
            .unwrap();
        let drainer = sink.drainer(own_pool, Clock::System, 5);
        runs.push(tokio::spawn(
            drainer.run(shutdown.clone(), Duration::from_secs(5)),
        ));
    }
    // Observe (bounded) until everything is delivered.
    let mut delivered = 0;
    for _ in 0..600 {
        delivered = sqlx::query_scalar::<_, i64>(
            "select count(*) from outbox where delivered_at is not null",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if delivered == 1000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    for run in runs {
        run.await.unwrap();
    }
    assert_eq!(delivered, 1000);
    let received = sink.received();
    let mut per_id: HashMap<String, usize> = HashMap::new();
    for r in &received {
        assert!(r.verified);
        *per_id.entry(r.webhook_id.clone()).or_default() += 1;
    }
    assert_eq!(per_id.len(), 1000, "every row delivered");
    assert!(per_id.values().all(|n| *n == 1), "none delivered twice");
    let attempts: i64 = sqlx::query_scalar("select sum(attempts) from outbox")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(attempts, 1000);
}

#[sqlx::test]
async fn a_drainer_killed_mid_delivery_is_taken_over_after_its_lease_expires(pool: PgPool) {
    let t0 = now() + 5;
    let clock = Clock::manual(t0);
    let sink = TestSink::start().await;
    let gate = sink.hold();
    let id = seed(&pool, 1).await[0];

    let first = sink.drainer(pool.clone(), clock.clone(), 5);
    let arrived = sink.state.arrived.notified();
    let killed = tokio::spawn(async move { first.drain_once().await });
    arrived.await;
    killed.abort(); // the process dies with the delivery in flight
    assert!(killed.await.unwrap_err().is_cancelled());

    let second = sink.drainer(pool.clone(), clock.clone(), 5);
    assert_eq!(
        second.drain_once().await.unwrap().leased,
        0,
        "the lease still holds"
    );
    clock.advance(Duration::from_secs(31));
    gate.add_permits(2);
    assert_eq!(second.drain_once().await.unwrap().delivered, 1);

    let ids = sink.webhook_ids();
    assert_eq!(
        ids,
        vec![id.to_string(); 2],
        "redelivered with the same webhook-id"
    );
    let delivered = row(&pool, id, t0).await;
    assert!(delivered.delivered);
    assert_eq!(delivered.attempts, 2);
}

#[sqlx::test]
async fn shutdown_lets_in_flight_deliveries_finish(pool: PgPool) {
    let sink = TestSink::start().await;
    let gate = sink.hold();
    let id = seed(&pool, 1).await[0];
    let drainer = sink.drainer(pool.clone(), Clock::System, 5);
    let shutdown = CancellationToken::new();
    let arrived = sink.state.arrived.notified();
    let run = tokio::spawn(drainer.run(shutdown.clone(), Duration::from_secs(10)));
    arrived.await;

    shutdown.cancel();
    gate.add_permits(1);
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the drainer stops")
        .unwrap();
    assert!(
        row(&pool, id, now()).await.delivered,
        "the in-flight delivery was finished and recorded"
    );
}

#[sqlx::test]
async fn a_notification_wakes_the_drainer_without_waiting_for_the_poll(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    let sink = TestSink::start().await;
    let drainer = drainer_without_polling(&pool, &sink);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(drainer.run(shutdown.clone(), Duration::from_secs(5)));
    until_listening(&pool, None).await;
    let arrived = sink.state.arrived.notified();
    app.deliver(
        &payment_intent_succeeded("evt_wake", "pi_wake", "user_1", 100),
        "processed",
    )
    .await;
    tokio::time::timeout(Duration::from_secs(20), arrived)
        .await
        .expect("delivered long before the hour-long poll");
    shutdown.cancel();
    run.await.unwrap();
    assert_eq!(sink.received()[0].body["event_id"], "evt_wake");
}

#[sqlx::test]
async fn the_log_sink_delivers_at_once(pool: PgPool) {
    let id = seed(&pool, 1).await[0];
    let drainer = crate::helpers::drainer_on(&pool, Sink::Log(LogSink), settings(5), Clock::System);
    assert_eq!(drainer.drain_once().await.unwrap().delivered, 1);
    assert!(row(&pool, id, now()).await.delivered);
}

#[sqlx::test]
async fn a_row_whose_lease_would_run_out_is_given_back_not_delivered_late(pool: PgPool) {
    let t0 = now() + 5;
    let clock = Clock::manual(t0);
    let sink = TestSink::start().await;
    let gate = sink.hold();
    let ids = seed(&pool, 2).await;
    // One delivery at a time, a 30 s lease, a 5 s sink timeout.
    let drainer = crate::helpers::drainer_on(
        &pool,
        sink.sink(clock.clone()),
        DrainerSettings {
            concurrency: 1,
            ..settings(5)
        },
        clock.clone(),
    );
    let arrived = sink.state.arrived.notified();
    let pass = tokio::spawn({
        let drainer = drainer.clone();
        async move { drainer.drain_once().await }
    });
    arrived.await;
    // The first delivery takes 24 s: the second could no longer finish (5 s)
    // within the lease with the margin, so it must not start.
    clock.advance(Duration::from_secs(24));
    gate.add_permits(10);
    let drained = pass.await.unwrap().unwrap();
    assert_eq!((drained.delivered, drained.released), (1, 1));
    let second = row(&pool, ids[1], t0).await;
    assert_eq!(
        (second.attempts, second.delivered),
        (0, false),
        "given back, attempt not spent"
    );

    assert_eq!(
        drainer.drain_once().await.unwrap().delivered,
        1,
        "due again at once"
    );
    let received = sink.webhook_ids();
    assert_eq!(
        received,
        [ids[0].to_string(), ids[1].to_string()],
        "each delivered once"
    );
}

#[sqlx::test]
async fn a_delivery_outliving_the_shutdown_grace_is_redelivered_after_its_lease(pool: PgPool) {
    let t0 = now() + 5;
    let clock = Clock::manual(t0);
    let sink = TestSink::start().await;
    let gate = sink.hold();
    let id = seed(&pool, 1).await[0];
    let shutdown = CancellationToken::new();
    let arrived = sink.state.arrived.notified();
    let run = tokio::spawn(
        sink.drainer(pool.clone(), clock.clone(), 5)
            .run(shutdown.clone(), Duration::from_millis(200)),
    );
    arrived.await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the hard stop ends it")
        .unwrap();
    let held = row(&pool, id, t0).await;
    assert!(!held.delivered, "cut off mid-delivery: nothing recorded");

    clock.advance(Duration::from_secs(31));
    gate.add_permits(10);
    assert_eq!(
        sink.drainer(pool.clone(), clock, 5)
            .drain_once()
            .await
            .unwrap()
            .delivered,
        1
    );
    let ids = sink.webhook_ids();
    assert_eq!(
        ids,
        vec![id.to_string(); 2],
        "the same webhook-id both times"
    );
}

#[sqlx::test]
async fn a_lost_listen_connection_is_replaced_and_notifications_wake_the_drainer_again(
    pool: PgPool,
) {
    let sink = TestSink::start().await;
    let drainer = drainer_without_polling(&pool, &sink);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(drainer.run(shutdown.clone(), Duration::from_secs(5)));
    // Kill the LISTEN connection server-side; a new one must take over.
    let first = until_listening(&pool, None).await[0];
    sqlx::query("select pg_terminate_backend($1)")
        .bind(first)
        .execute(&pool)
        .await
        .unwrap();
    until_listening(&pool, Some(first)).await;

    // A row committed with its notification, as ingest writes them, is
    // delivered long before the hour-long poll.
    let arrived = sink.state.arrived.notified();
    let id = seed(&pool, 1).await[0];
    sqlx::query("select pg_notify('webhookd_outbox', '')")
        .execute(&pool)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), arrived)
        .await
        .expect("woken by the new connection, not the poll");
    shutdown.cancel();
    run.await.unwrap();
    assert_eq!(sink.received()[0].webhook_id, id.to_string());
}
