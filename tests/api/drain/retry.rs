//! When a failed delivery is tried again: `max(attempt^4 ± 10%, Retry-After)`
//! within the cap, Retry-After as seconds or as an HTTP-date, a due retry
//! run by its own timer rather than the poll, and the cause of a failure
//! kept in `last_error`.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use webhookd::clock::Clock;
use webhookd::outbox::DrainerSettings;
use webhookd::sinks::Sink;
use webhookd::sinks::http::HttpSink;

use crate::drain::sink::{SINK_SECRET, TestSink, row, seed, settings, until_delivered};
use crate::helpers::now;

/// `at` (Unix seconds) as an IMF-fixdate, formatted by Postgres.
async fn http_date(pool: &PgPool, at: i64) -> String {
    sqlx::query_scalar(
        r#"select to_char(to_timestamp($1) at time zone 'UTC', 'Dy, DD Mon YYYY HH24:MI:SS "GMT"')"#,
    )
    .bind(at)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test]
async fn retry_after_lengthens_the_backoff_never_shortens_it_and_may_be_a_date(pool: PgPool) {
    let t0 = now() + 5;
    let clock = Clock::manual(t0);
    let sink = TestSink::start().await;
    let id = seed(&pool, 1).await[0];
    let t4 = t0 + 2 + 18 + 600;
    let date = http_date(&pool, t4 + 300).await;
    sink.script(&[
        (503, Some("1")),
        (503, Some("1")),
        (503, Some("600")),
        (503, Some(date.as_str())),
        (429, Some("86400")),
    ]);
    let drainer = sink.drainer(pool.clone(), clock.clone(), 10);

    // (when, expected wait): max(backoff, Retry-After), capped at an hour.
    let steps = [
        (t0, 1.0..=1.1),             // max(1 s ± 10%, 1 s)
        (t0 + 2, 14.4..=17.6),       // max(16 s ± 10%, 1 s): the backoff wins
        (t0 + 20, 600.0..=600.0),    // max(81 s ± 10%, 600 s)
        (t4, 300.0..=300.0),         // max(256 s ± 10%, a date 300 s ahead)
        (t4 + 300, 3600.0..=3600.0), // max(625 s ± 10%, a day), capped
    ];
    for (attempt, (at, expected)) in steps.into_iter().enumerate() {
        clock.advance(Duration::from_secs(
            u64::try_from(at - clock.now()).unwrap(),
        ));
        assert_eq!(
            drainer.drain_once().await.unwrap().retried,
            1,
            "attempt {attempt}"
        );
        let stored = row(&pool, id, at).await;
        assert!(
            expected.contains(&((stored.due_in * 1000.0).round() / 1000.0)),
            "attempt {}: due in {} s, expected {expected:?}",
            attempt + 1,
            stored.due_in
        );
        assert_eq!(
            drainer.drain_once().await.unwrap().leased,
            0,
            "not due before then"
        );
    }
    assert_eq!(sink.received().len(), 5);
    // Every failed attempt is kept, in order, with its error and time.
    let kept: Vec<(i32, String, String, i64)> = sqlx::query_as(
        "select attempt, outcome, error, extract(epoch from at)::int8 from outbox_attempts
         where outbox_id = $1 order by attempt",
    )
    .bind(id)
    .fetch_all(&pool)
    .await
    .unwrap();
    let attempts: Vec<i32> = kept.iter().map(|k| k.0).collect();
    assert_eq!(attempts, [1, 2, 3, 4, 5]);
    assert!(kept.iter().all(|k| k.1 == "retry"), "{kept:?}");
    assert!(kept[0].2.contains("503"), "{kept:?}");
    assert!(kept[4].2.contains("429"), "{kept:?}");
    assert_eq!(kept[2].3, t0 + 20, "recorded at the drainer's clock");
}

#[sqlx::test]
async fn a_due_retry_runs_when_it_is_due_not_at_the_next_poll(pool: PgPool) {
    let sink = TestSink::start().await;
    sink.script(&[(503, Some("1"))]);
    let id = seed(&pool, 1).await[0];
    let drainer = sink.drainer_with(
        pool.clone(),
        DrainerSettings {
            poll: Duration::from_secs(3600),
            ..settings(5)
        },
    );
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(drainer.run(shutdown.clone(), Duration::from_secs(5)));
    // About a second after the first attempt; the poll is an hour away.
    sink.until_received(2).await;
    until_delivered(&pool, 1).await;
    shutdown.cancel();
    run.await.unwrap();
    let delivered = row(&pool, id, now()).await;
    assert!(delivered.delivered);
    assert_eq!(delivered.attempts, 2);
}

#[sqlx::test]
async fn a_refused_connection_is_retried_with_its_cause_in_last_error(pool: PgPool) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/hooks?token=do-not-log");
    let sink = HttpSink::new(&url, SINK_SECRET, Duration::from_secs(5), Clock::System).unwrap();
    let drainer = crate::helpers::drainer_on(
        &pool,
        Sink::Http(Box::new(sink)),
        settings(5),
        Clock::System,
    );
    let id = seed(&pool, 1).await[0];
    assert_eq!(drainer.drain_once().await.unwrap().retried, 1);
    let error = row(&pool, id, now()).await.last_error.unwrap();
    assert!(error.starts_with("connection failed: "), "{error}");
    assert!(
        error.to_lowercase().contains("connection refused"),
        "the cause is kept: {error}"
    );
    assert!(!error.contains("do-not-log"), "{error}");
    assert!(error.len() <= webhookd::telemetry::MAX_LOGGED_ERROR_BYTES + 20);
}

/// A dead row re-queued for a fresh set of attempts (the console's retry)
/// is never settled by a late report of the attempt that killed it: only
/// an attempt started after the re-queue counts.
#[sqlx::test]
async fn a_straggling_report_never_settles_a_row_requeued_since(pool: PgPool) {
    let sink = TestSink::start().await;
    let id = seed(&pool, 1).await[0];
    sink.script(&[(500, None)]);
    let drainer = sink.drainer(pool.clone(), Clock::System, 1);
    assert_eq!(drainer.drain_once().await.unwrap().dead, 1);
    assert_eq!(
        webhookd::outbox::retry_dead(&pool, Some(id)).await.unwrap(),
        [id]
    );

    // The report of attempt 1 arrives again, late.
    let dead = webhookd::outbox::store::Attempt::Dead {
        error: "late".into(),
    };
    let recorded = webhookd::outbox::store::record(&pool, id, 1, &dead, None)
        .await
        .unwrap();
    assert!(!recorded, "not an attempt of this set");
    let requeued = row(&pool, id, now()).await;
    assert!(!requeued.dead && !requeued.delivered, "still due");

    assert_eq!(drainer.drain_once().await.unwrap().delivered, 1);
    let delivered = row(&pool, id, now()).await;
    assert_eq!((delivered.delivered, delivered.attempts), (true, 2));
}
