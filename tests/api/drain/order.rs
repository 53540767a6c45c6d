//! Ordered delivery per key (`WEBHOOKD_OUTBOX_ORDER=key`): the rows of one
//! ordering key reach the sink in the order they were written, retries
//! included, while other keys go on.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::outbox::{self, DrainerSettings};

use crate::drain::sink::{TestSink, settings};
use crate::helpers::now;

const KEYS: usize = 50;
const ROUNDS: usize = 6;

/// Writes ROUNDS rows for each of KEYS keys, interleaved (each round in
/// another order of keys), through the service's own enqueue.
async fn write_interleaved(pool: &PgPool) {
    let mut order: Vec<usize> = (0..KEYS).collect();
    let (mut ids, mut keys, mut payloads) = (Vec::new(), Vec::new(), Vec::new());
    let mut state: u64 = 7;
    for round in 0..ROUNDS {
        // A fixed shuffle per round (Fisher-Yates over a small LCG).
        for i in (1..order.len()).rev() {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            order.swap(i, usize::try_from(state >> 33).unwrap() % (i + 1));
        }
        for &key in &order {
            ids.push(format!("evt_order_{key}_{round}"));
            keys.push(format!("wallet:user_{key}:USD"));
            payloads.push(json!({ "key": key, "seq": round }));
        }
    }
    let messages: Vec<outbox::Message<'_>> = (0..ids.len())
        .map(|i| outbox::Message {
            topic: "wallet.credited",
            provider: "stripe",
            event_id: &ids[i],
            event_type: None,
            payload: &payloads[i],
            ordering_key: Some(&keys[i]),
            account: None,
        })
        .collect();
    let mut conn = pool.acquire().await.unwrap();
    let written = outbox::enqueue(&mut conn, &messages).await.unwrap();
    assert!(written.iter().all(Option::is_some));
}

async fn undelivered(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from outbox where delivered_at is null and dead_at is null")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn rows_of_one_key_arrive_in_the_order_written_through_retries_at_concurrency_16(
    pool: PgPool,
) {
    write_interleaved(&pool).await;
    let sink = TestSink::start().await;
    // The first 80 requests fail: heads of many keys are retried while the
    // rows behind them wait and other keys go on.
    let failures: Vec<(u16, Option<&str>)> = (0..80).map(|_| (503, None)).collect();
    sink.script(&failures);
    // Ahead of the rows' available_at (written on the database's clock).
    let clock = Clock::manual(now() + 5);
    let settings = DrainerSettings {
        concurrency: 16,
        ordered: true,
        ..settings(20)
    };
    let drainer =
        crate::helpers::drainer_on(&pool, sink.sink(clock.clone()), settings, clock.clone());
    let mut passes = 0;
    while undelivered(&pool).await > 0 {
        passes += 1;
        assert!(passes <= 60, "the outbox did not empty");
        drainer.drain_once().await.unwrap();
        // Retries become due (attempt 1 waits about 1 s, attempt 2 16 s).
        clock.advance(Duration::from_secs(20));
    }

    // Per key, the rows attempted, in the order the sink saw them: never a
    // later row before an earlier one was delivered.
    let mut attempts: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for received in sink.received() {
        assert!(received.verified);
        let data = &received.body["data"];
        let (key, seq) = (data["key"].as_u64().unwrap(), data["seq"].as_u64().unwrap());
        attempts.entry(key).or_default().push(seq);
    }
    assert_eq!(attempts.len(), KEYS);
    let mut retried = 0;
    for (key, seqs) in &attempts {
        assert!(
            seqs.windows(2).all(|w| w[0] <= w[1]),
            "key {key} out of order: {seqs:?}"
        );
        let mut distinct = seqs.clone();
        distinct.dedup();
        assert_eq!(
            distinct,
            (0..ROUNDS as u64).collect::<Vec<_>>(),
            "key {key}"
        );
        retried += seqs.len() - ROUNDS;
    }
    assert_eq!(retried, 80, "every failed attempt was retried");
    // Keys went on in parallel: far fewer passes than rows.
    assert!(passes < 3 * ROUNDS, "{passes} passes");
}

#[sqlx::test]
async fn without_ordering_rows_behind_a_retried_one_are_not_held_back(pool: PgPool) {
    write_interleaved(&pool).await;
    let sink = TestSink::start().await;
    sink.script(&[(503, None)]);
    // Ahead of the rows' available_at (written on the database's clock).
    let clock = Clock::manual(now() + 5);
    let drainer = crate::helpers::drainer_on(
        &pool,
        sink.sink(clock.clone()),
        DrainerSettings {
            batch: 400,
            concurrency: 16,
            ..settings(20)
        },
        clock.clone(),
    );
    drainer.drain_once().await.unwrap();
    // One pass delivered everything but the failed row, behind which the
    // rows of its key went out all the same.
    assert_eq!(undelivered(&pool).await, 1);
}
