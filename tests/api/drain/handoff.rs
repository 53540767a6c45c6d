//! Rows this process writes, leased to its drainer at insert and handed
//! over in memory: delivered without a lease statement, each once, with the
//! body a lease would give; what the drainer cannot hold goes back to the
//! table, due at once; a drainer that dies holding them leaves them to the
//! next once their lease expires.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use webhookd::clock::Clock;
use webhookd::ingest::Wake;
use webhookd::outbox::{Drainer, DrainerSettings, Waker, Wakers};
use webhookd::providers::Event;

use crate::drain::sink::{TestSink, settings, until_delivered};

/// The drainers of a process that drains the sink `default` alone.
fn one_sink(waker: &Waker) -> Wakers {
    Wakers::new(vec![("default".to_owned(), waker.clone())])
}
use crate::helpers::payment_intent_succeeded;

/// `n` Stripe credits, one wallet each.
fn credits(prefix: &str, n: usize) -> Vec<Event> {
    (0..n)
        .map(|i| {
            let (event_id, intent) = (format!("evt_{prefix}{i}"), format!("pi_{prefix}{i}"));
            let body = payment_intent_succeeded(&event_id, &intent, &format!("user_{i}"), 100);
            Event::from_stored(
                "stripe",
                &event_id,
                "payment_intent.succeeded",
                Bytes::from(body),
            )
            .unwrap()
        })
        .collect()
}

/// Runs `drainer` until the returned token is cancelled, once it takes
/// handed rows.
async fn running(drainer: Drainer) -> (Waker, CancellationToken, tokio::task::JoinHandle<()>) {
    let waker = drainer.waker();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(drainer.run(shutdown.clone(), Duration::from_secs(5)));
    tokio::time::timeout(Duration::from_secs(10), async {
        while waker.lease_secs().is_none() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the drainer accepts handed rows");
    (waker, shutdown, run)
}

/// Outbox rows `(attempts, locked_until is set, delivered)`, by id.
async fn rows(pool: &PgPool) -> Vec<(i32, bool, bool)> {
    sqlx::query_as(
        "select attempts, locked_until is not null, delivered_at is not null from outbox order by id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test]
async fn rows_written_in_this_process_are_delivered_without_a_lease(pool: PgPool) {
    let sink = TestSink::start().await;
    let drainer = sink
        .drainer_with(
            pool.clone(),
            DrainerSettings {
                // Only the handoff, not a poll, can deliver them soon.
                poll: Duration::from_secs(3600),
                ..settings(5)
            },
        )
        // Nor a notification (a LISTEN that connects leases once, to catch up).
        .listening_on(None);
    let stats = drainer.stats().clone();
    let (waker, shutdown, run) = running(drainer).await;
    let leases = stats.lease_statements.load(Ordering::Relaxed);

    let events = credits("h", 20);
    for batch in events.chunks(5) {
        let answers =
            webhookd::ingest::batch::apply(&pool, batch, Wake::InProcess(one_sink(&waker))).await;
        assert!(answers.iter().all(Result::is_ok));
    }
    until_delivered(&pool, 20).await;
    // A lease would have started a second attempt of a row: each was
    // delivered on the attempt its insert started.
    assert!(
        rows(&pool).await.iter().all(|&row| row == (1, false, true)),
        "one attempt each, settled: {:?}",
        rows(&pool).await
    );
    // At most the one lease a transient error's backoff runs (a loaded
    // machine, a pooler out of server connections), never one a batch.
    let during = stats.lease_statements.load(Ordering::Relaxed) - leases;
    assert!(
        during <= 1,
        "{during} lease statements for 4 batches handed over"
    );
    let received = sink.received();
    assert_eq!(received.len(), 20, "each row once");
    assert!(received.iter().all(|r| r.verified));
    // The body a lease of the same row would give: the payload as Postgres
    // writes it, and the event's type.
    let (id, payload): (i64, String) =
        sqlx::query_as("select id, payload::text from outbox order by id limit 1")
            .fetch_one(&pool)
            .await
            .unwrap();
    let first = received
        .iter()
        .find(|r| r.webhook_id == id.to_string())
        .unwrap();
    assert_eq!(first.body["event_type"], "payment_intent.succeeded");
    assert_eq!(
        first.body["data"],
        serde_json::from_str::<serde_json::Value>(&payload).unwrap()
    );
    shutdown.cancel();
    run.await.unwrap();
}

#[sqlx::test]
async fn rows_beyond_the_byte_budget_go_back_to_the_table_due_at_once(pool: PgPool) {
    let sink = TestSink::start().await;
    let drainer = sink.drainer_with(
        pool.clone(),
        DrainerSettings {
            // Room for one row at a time: the rest is given back.
            batch_bytes: 1,
            poll: Duration::from_secs(3600),
            ..settings(5)
        },
    );
    let (waker, shutdown, run) = running(drainer).await;
    let events = credits("b", 12);
    let answers =
        webhookd::ingest::batch::apply(&pool, &events, Wake::InProcess(one_sink(&waker))).await;
    assert!(answers.iter().all(Result::is_ok));
    until_delivered(&pool, 12).await;
    let mut ids = sink.webhook_ids();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 12, "each row delivered");
    let attempts: i64 = sqlx::query_scalar("select sum(attempts)::int8 from outbox")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(attempts, 12, "a row given back did not spend its attempt");
    shutdown.cancel();
    run.await.unwrap();
}

#[sqlx::test]
async fn handed_rows_of_a_drainer_that_died_are_delivered_once_their_lease_expires(pool: PgPool) {
    let sink = TestSink::start().await;
    let gate = sink.hold();
    let drainer = sink.drainer_with(pool.clone(), settings(5));
    let (waker, _shutdown, run) = running(drainer).await;
    let events = credits("d", 3);
    let answers =
        webhookd::ingest::batch::apply(&pool, &events, Wake::InProcess(one_sink(&waker))).await;
    assert!(answers.iter().all(Result::is_ok));
    // Its deliveries arrived and hang; the process dies.
    sink.until_received(3).await;
    run.abort();
    let _ = run.await;
    assert!(rows(&pool).await.iter().all(|&row| row == (1, true, false)));
    gate.add_permits(1000);

    // Another drainer, after the lease (30 s) has expired by its clock.
    let later = Clock::Fixed(crate::helpers::now() + 31);
    let next = sink.drainer(pool.clone(), later, 5);
    assert_eq!(next.drain_once().await.unwrap().delivered, 3);
    assert!(rows(&pool).await.iter().all(|&row| row == (2, false, true)));
}

#[sqlx::test]
async fn rows_handed_after_the_drainer_stopped_are_given_back_due_at_once(pool: PgPool) {
    let sink = TestSink::start().await;
    let drainer = sink
        .drainer_with(pool.clone(), settings(5))
        .listening_on(None);
    let (waker, shutdown, run) = running(drainer).await;
    // A transaction that read the lease while the drainer ran commits
    // after it stopped.
    let lease = one_sink(&waker).lease();
    shutdown.cancel();
    run.await.unwrap();
    let payload = serde_json::json!({ "late": true });
    let (ids, handed) = webhookd::outbox::leasing(lease, async {
        let mut tx = pool.begin().await.unwrap();
        let message = webhookd::outbox::Message {
            topic: "wallet.credited",
            provider: "stripe",
            event_id: "evt_late",
            event_type: Some("payment_intent.succeeded"),
            payload: &payload,
            ordering_key: None,
            account: None,
        };
        let ids = webhookd::outbox::enqueue(&mut tx, &[message])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        ids
    })
    .await;
    assert_eq!(handed.len(), 1);
    waker.hand(handed);
    assert_eq!(
        rows(&pool).await,
        [(1, true, false)],
        "leased to a drainer that is gone"
    );

    let given_back = webhookd::outbox::give_back(&pool, &waker).await.unwrap();
    assert_eq!(given_back, 1);
    assert_eq!(
        rows(&pool).await,
        [(0, false, false)],
        "due at once, its attempt not spent"
    );
    let next = sink.drainer(pool.clone(), Clock::System, 5);
    assert_eq!(next.drain_once().await.unwrap().delivered, 1);
    assert_eq!(sink.webhook_ids(), [ids[0].unwrap().to_string()]);
}
