//! Large rows: a drainer holds at most WEBHOOKD_OUTBOX_BATCH_BYTES of
//! payloads whatever the rows, a row over the sink's limit is dead-lettered
//! unsent, and a row whose delivery kills the drainer is attempted at most
//! its budget of times while the rows behind it are delivered.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use webhookd::clock::Clock;
use webhookd::outbox::DrainerSettings;
use webhookd::outbox::worker::Drained;
use webhookd::sinks::Sink;
use webhookd::sinks::http::HttpSink;

use crate::drain::sink::{SINK_SECRET, TestSink, row, seed, seed_sized, settings, until_delivered};
use crate::helpers::now;
use crate::service::lifecycle::{Server, database_url};

const MIB: i32 = 1024 * 1024;

#[sqlx::test]
async fn a_hundred_rows_of_two_mib_are_delivered_holding_no_more_than_the_byte_bound(pool: PgPool) {
    seed_sized(&pool, 100, 2 * MIB).await;
    let sink = TestSink::start().await;
    // Two rows fit in the bound, a third does not.
    let bound = 5 * 1024 * 1024;
    let drainer = sink.drainer_with(
        pool.clone(),
        DrainerSettings {
            batch: 50,
            batch_bytes: bound,
            ordered: false,
            concurrency: 8,
            ..settings(5)
        },
    );
    let stats = drainer.stats().clone();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(drainer.run(shutdown.clone(), Duration::from_secs(5)));
    until_delivered(&pool, 100).await;
    shutdown.cancel();
    run.await.unwrap();

    let received = sink.received();
    let mut per_id: HashMap<&str, usize> = HashMap::new();
    for r in &received {
        assert!(r.verified, "signed over the whole body");
        assert!(r.bytes > 2 * 1024 * 1024, "{} bytes", r.bytes);
        *per_id.entry(&r.webhook_id).or_default() += 1;
    }
    assert_eq!(per_id.len(), 100, "every row delivered");
    assert!(per_id.values().all(|n| *n == 1), "none twice");
    let peak = stats.peak_held_bytes.load(Ordering::Relaxed);
    assert!(peak <= bound, "held {peak} bytes at once, over {bound}");
    assert!(
        peak > 2 * 1024 * 1024,
        "more than one row at a time: {peak}"
    );
    assert_eq!(stats.held_bytes.load(Ordering::Relaxed), 0);
    assert!(
        stats.lease_statements.load(Ordering::Relaxed) >= 50,
        "at most two rows a lease"
    );
}

#[sqlx::test]
async fn a_row_larger_than_the_byte_bound_is_leased_alone(pool: PgPool) {
    let ids = seed_sized(&pool, 3, 2 * MIB).await;
    let sink = TestSink::start().await;
    let drainer = sink.drainer_with(
        pool.clone(),
        DrainerSettings {
            batch_bytes: 1024 * 1024,
            ordered: false,
            ..settings(5)
        },
    );
    for _ in &ids {
        let drained = drainer.drain_once().await.unwrap();
        assert_eq!((drained.leased, drained.delivered), (1, 1));
    }
    assert_eq!(drainer.drain_once().await.unwrap().leased, 0);
    let peak = drainer.stats().peak_held_bytes.load(Ordering::Relaxed);
    assert!(
        (2 * 1024 * 1024..3 * 1024 * 1024).contains(&peak),
        "one row at a time: {peak}"
    );
    assert_eq!(sink.received().len(), 3);
}

#[sqlx::test]
async fn a_row_over_the_sinks_limit_is_dead_lettered_with_the_reason_and_never_sent(pool: PgPool) {
    let small = seed(&pool, 1).await[0];
    let large = seed_sized(&pool, 1, 2 * MIB).await[0];
    let behind = seed(&pool, 1).await[0];
    let sink = TestSink::start().await;
    let limited = HttpSink::new(
        &sink.url,
        SINK_SECRET,
        Duration::from_secs(5),
        Clock::System,
    )
    .unwrap()
    .with_max_body_bytes(1024 * 1024);
    let drainer = crate::helpers::drainer_on(
        &pool,
        Sink::Http(Box::new(limited)),
        settings(5),
        Clock::System,
    );

    let drained = drainer.drain_once().await.unwrap();
    assert_eq!((drained.delivered, drained.dead), (2, 1));
    let dead = row(&pool, large, now()).await;
    assert!(dead.dead && !dead.delivered);
    assert_eq!(dead.attempts, 1);
    let reason = dead.last_error.unwrap();
    assert!(
        reason.starts_with("not sent: the body is ")
            && reason.ends_with(
                "bytes, over the sink's limit of 1048576 (WEBHOOKD_SINK_MAX_BODY_BYTES)"
            ),
        "{reason}"
    );
    let mut sent = sink.webhook_ids();
    sent.sort();
    let mut expected = vec![small.to_string(), behind.to_string()];
    expected.sort();
    assert_eq!(sent, expected, "the large row never reached the sink");
}

#[sqlx::test]
async fn a_row_whose_delivery_kills_the_drainer_is_dead_after_its_attempts_and_rows_behind_it_deliver(
    pool: PgPool,
) {
    let t0 = now() + 5;
    let clock = Clock::manual(t0);
    let sink = TestSink::start().await;
    let crashing = seed(&pool, 1).await[0];
    let max_attempts = 3;
    for attempt in 1..=max_attempts {
        // The sink never answers; the process dies with the delivery in
        // flight, and its lease expires.
        let _never = sink.hold_row(crashing);
        let drainer = sink.drainer(pool.clone(), clock.clone(), max_attempts);
        let pass = tokio::spawn(async move { drainer.drain_once().await });
        sink.until_received(attempt as usize).await;
        pass.abort();
        assert!(pass.await.unwrap_err().is_cancelled());
        clock.advance(Duration::from_secs(31));
    }
    let behind = seed(&pool, 2).await;

    let drainer = sink.drainer(pool.clone(), clock.clone(), max_attempts);
    let drained = drainer.drain_once().await.unwrap();
    assert_eq!(
        drained,
        Drained {
            leased: 3,
            delivered: 2,
            dead: 1,
            ..Drained::default()
        }
    );
    assert_eq!(drainer.stats().abandoned.load(Ordering::Relaxed), 1);
    let dead = row(&pool, crashing, t0).await;
    assert!(dead.dead && !dead.delivered);
    assert_eq!(dead.attempts, max_attempts, "attempted exactly its budget");
    let reason = dead.last_error.unwrap();
    assert!(
        reason.starts_with("gave up after 3 attempts: the last one never reported back"),
        "{reason}"
    );
    let received = sink.webhook_ids();
    let attempts = received
        .iter()
        .filter(|id| **id == crashing.to_string())
        .count();
    assert_eq!(attempts, 3, "never sent a fourth time");
    for id in behind {
        assert!(row(&pool, id, t0).await.delivered);
        assert!(received.contains(&id.to_string()));
    }
    assert_eq!(
        drainer.drain_once().await.unwrap().leased,
        0,
        "dead rows are not leased again"
    );
}

/// The most memory the process `pid` ever had resident (`VmHWM`), in bytes.
fn peak_resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("Linux reports VmHWM");
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

/// The real binary: 200 MiB of rows drain through a 4 MiB bound in well
/// under 100 MiB resident (a debug build idles near 30 MiB; without the
/// byte bound, the same rows take about 300 MiB).
#[sqlx::test]
async fn the_served_drainer_stays_near_its_byte_bound_on_two_hundred_mib_of_rows(pool: PgPool) {
    seed_sized(&pool, 100, 2 * MIB).await;
    let sink = TestSink::start().await;
    let server = Server::start_with(
        &database_url(&pool),
        &[
            ("WEBHOOKD_SINK_URL", sink.url.as_str()),
            ("WEBHOOKD_SINK_SECRET", SINK_SECRET),
            ("WEBHOOKD_OUTBOX_BATCH_BYTES", "4194304"),
            ("RUST_LOG", "warn"),
        ],
    )
    .await;
    until_delivered(&pool, 100).await;
    let peak = peak_resident_bytes(server.pid());
    server.signal("-TERM");
    let (status, logs) = server.wait().await;
    assert!(status.success(), "exit status {status:?}; logs:\n{logs}");
    assert_eq!(sink.received().len(), 100);
    assert!(
        peak < 96 * 1024 * 1024,
        "peak resident {} MiB",
        peak / 1024 / 1024
    );
}
