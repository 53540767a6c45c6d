//! Deliveries flow: a slow row holds one slot and the rows behind it are
//! delivered meanwhile; outcomes of many deliveries share one statement.

use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use webhookd::clock::Clock;
use webhookd::outbox::DrainerSettings;
use webhookd::sinks::Sink;
use webhookd::sinks::log::LogSink;

use crate::drain::sink::{TestSink, row, seed, settings, until_delivered};
use crate::helpers::now;

#[sqlx::test]
async fn a_slow_row_holds_one_slot_while_the_rows_behind_it_are_delivered(pool: PgPool) {
    let ids = seed(&pool, 31).await;
    let slow = ids[0];
    let sink = TestSink::start().await;
    let release = sink.hold_row(slow);
    let drainer = sink.drainer_with(
        pool.clone(),
        DrainerSettings {
            batch: 8,
            concurrency: 4,
            ..settings(5)
        },
    );
    let stats = drainer.stats().clone();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(drainer.run(shutdown.clone(), Duration::from_secs(5)));

    // Thirty rows behind it, leased in batches of at most eight, go through
    // the other three slots while the slow one is held.
    until_delivered(&pool, 30).await;
    let held = row(&pool, slow, now()).await;
    assert!(!held.delivered, "still held");
    assert_eq!(held.attempts, 1);
    assert!(stats.lease_statements.load(Ordering::Relaxed) >= 4);

    release.send(()).unwrap();
    until_delivered(&pool, 31).await;
    shutdown.cancel();
    run.await.unwrap();
    let received = sink.webhook_ids();
    assert_eq!(received.len(), 31, "each row once");
}

#[sqlx::test]
async fn the_log_sink_settles_a_whole_batch_in_one_lease_and_a_record_or_two(pool: PgPool) {
    seed(&pool, 100).await;
    let drainer = crate::helpers::drainer_on(
        &pool,
        Sink::Log(LogSink),
        DrainerSettings {
            batch: 100,
            ..settings(5)
        },
        Clock::System,
    );
    assert_eq!(drainer.drain_once().await.unwrap().delivered, 100);
    let stats = drainer.stats();
    assert_eq!(stats.lease_statements.load(Ordering::Relaxed), 1);
    // One statement for the hundred outcomes; two on a machine so busy that
    // the first outcome's few milliseconds of waiting for company ran out
    // before the last was settled. Never one a row.
    let records = stats.record_statements.load(Ordering::Relaxed);
    assert!((1..=2).contains(&records), "{records} record statements");
    let delivered: i64 =
        sqlx::query_scalar("select count(*) from outbox where delivered_at is not null")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(delivered, 100);
}

#[sqlx::test]
async fn outcomes_of_concurrent_deliveries_share_their_statements(pool: PgPool) {
    seed(&pool, 64).await;
    let sink = TestSink::start().await;
    let gate = sink.hold();
    let drainer = sink.drainer_with(
        pool.clone(),
        DrainerSettings {
            batch: 64,
            concurrency: 16,
            ..settings(5)
        },
    );
    let pass = tokio::spawn({
        let drainer = drainer.clone();
        async move { drainer.drain_once().await }
    });
    sink.until_received(16).await;
    gate.add_permits(1000);
    let drained = pass.await.unwrap().unwrap();
    assert_eq!(drained.delivered, 64);
    let records = drainer.stats().record_statements.load(Ordering::Relaxed);
    assert!(
        records <= 16,
        "{records} record statements for 64 deliveries"
    );
    assert_eq!(drainer.stats().delivered.load(Ordering::Relaxed), 64);
}
