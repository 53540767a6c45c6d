//! Delivery to the real brokers: RabbitMQ (the machine's, 127.0.0.1:5672)
//! and NATS JetStream (a server of the test's own). What a consumer gets is
//! checked as a consumer would: each message's signature over its body, its
//! id, and after deduping on the id exactly the rows written.

pub mod nats;
pub mod rabbitmq;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use serde_json::Value;
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::outbox::Drainer;
use webhookd::providers::Verify;
use webhookd::providers::standard::StandardVerifier;
use webhookd::secrets::Secrets;
use webhookd::sinks::{Sink, SinkSettings};

use super::sink::{SINK_SECRET, settings};

/// One message as a broker's consumer read it.
#[derive(Debug)]
pub struct Consumed {
    /// The broker's own id of it (AMQP `message_id`, `Nats-Msg-Id`).
    pub broker_id: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Consumed {
    /// The outbox id it carries, after checking it as a consumer would: the
    /// broker's id is the `webhook-id`, the signature holds over the body
    /// (at the time it was signed: the drainer's clock is the test's), and
    /// the body is the envelope of the row whose `n` it names.
    pub fn verified(&self) -> (i64, i64) {
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            headers.insert(
                HeaderName::from_bytes(name.to_lowercase().as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let signed_at: i64 = headers["webhook-timestamp"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let verifier =
            StandardVerifier::new("sink".into(), &Secrets::new([SINK_SECRET]), 300).unwrap();
        verifier
            .verify(&headers, &self.body, signed_at)
            .unwrap_or_else(|error| {
                panic!("message {} does not verify: {error:?}", self.broker_id)
            });
        assert_eq!(
            headers["webhook-id"].to_str().unwrap(),
            self.broker_id,
            "the broker's id is the webhook-id"
        );
        let body: Value = serde_json::from_slice(&self.body).unwrap();
        assert_eq!(body["type"], "wallet.credited");
        assert_eq!(body["provider"], "stripe");
        (
            self.broker_id.parse().unwrap(),
            body["data"]["n"].as_i64().unwrap(),
        )
    }
}

/// `count` rows whose payload names their `n`; their ids and `n`s.
pub async fn seed(pool: &PgPool, count: i64) -> BTreeMap<i64, i64> {
    seed_sized(pool, count, 0).await
}

/// `count` rows whose payload names their `n` and carries a string of
/// `bytes` bytes; their ids and `n`s.
pub async fn seed_sized(pool: &PgPool, count: i64, bytes: i32) -> BTreeMap<i64, i64> {
    sqlx::query_as(
        "insert into outbox (topic, dedupe_key, provider, event_id, payload)
         select 'wallet.credited', 'stripe:' || gen_random_uuid(), 'stripe', 'evt_' || g,
                jsonb_build_object('n', g, 'blob', repeat('x', $2))
         from generate_series(1, $1) g
         returning id, (payload->>'n')::int8",
    )
    .bind(count)
    .bind(bytes)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// That the consumed messages are, after deduping on the id, exactly the
/// rows written, each verified; how many copies arrived.
pub fn assert_exactly(consumed: &[Consumed], rows: &BTreeMap<i64, i64>) -> usize {
    let got: BTreeMap<i64, i64> = consumed.iter().map(Consumed::verified).collect();
    assert_eq!(
        got.keys().collect::<BTreeSet<_>>(),
        rows.keys().collect::<BTreeSet<_>>(),
        "every row arrived, and nothing else"
    );
    assert_eq!(&got, rows, "each id carries its own row");
    consumed.len()
}

/// That all `rows` of the outbox are delivered, some of them only after a
/// failed attempt (the broker's restart cut them).
pub async fn assert_delivered_after_retries(pool: &PgPool, rows: i64) {
    assert_eq!(states(pool).await, (rows, 0, 0));
    let retried: i64 = sqlx::query_scalar("select count(*) from outbox where attempts > 1")
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(
        retried > 0,
        "the restart cut deliveries, which were retried"
    );
}

/// Counts of the outbox by state.
pub async fn states(pool: &PgPool) -> (i64, i64, i64) {
    sqlx::query_as(
        "select count(*) filter (where delivered_at is not null),
                count(*) filter (where dead_at is not null),
                count(*) filter (where delivered_at is null and dead_at is null)
         from outbox",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Drains pass after pass until no row is waiting, moving `clock` past
/// each backoff; a pass that only failed waits a moment for the broker (a
/// pace, not a correctness wait). Once `at` rows are delivered, `midway`
/// starts and runs beside the passes until it ends (a broker restarted
/// while deliveries are in flight). Bounded.
pub async fn drain_all(
    pool: &PgPool,
    drainer: &Drainer,
    clock: &Clock,
    at: i64,
    midway: impl Future<Output = ()>,
) {
    let mut midway = std::pin::pin!(midway);
    let (mut started, mut done) = (false, false);
    for _ in 0..3000 {
        let (delivered, _, _) = states(pool).await;
        started |= delivered >= at;
        let pass = drainer.drain_once();
        let mut pass = std::pin::pin!(pass);
        let drained = loop {
            tokio::select! {
                drained = &mut pass => break drained.unwrap(),
                () = &mut midway, if started && !done => done = true,
            }
        };
        let (_, _, waiting) = states(pool).await;
        if waiting == 0 && done {
            return;
        }
        if drained.retried > 0 || drained.leased == 0 {
            clock.advance(Duration::from_secs(3600));
        }
        if drained.delivered == 0 {
            let pause = tokio::time::sleep(Duration::from_millis(20));
            let mut pause = std::pin::pin!(pause);
            loop {
                tokio::select! {
                    () = &mut pause => break,
                    () = &mut midway, if started && !done => done = true,
                }
            }
        }
    }
    panic!("the outbox never drained: {:?}", states(pool).await);
}

/// The sink `url` names, signing under the tests' secret.
pub fn sink(url: &str, timeout: Duration, clock: Clock) -> Sink {
    let settings = SinkSettings {
        timeout,
        max_body_bytes: 4 << 20,
    };
    Sink::from_url(url, Some(SINK_SECRET), settings, clock).unwrap()
}

/// A drainer of [`sink`] giving up after `max_attempts`, and the clock it
/// runs on: one the test moves, a second past now (rows written now are
/// due).
pub fn drainer(pool: &PgPool, url: &str, timeout: Duration, max_attempts: i32) -> (Drainer, Clock) {
    drainer_paced(pool, url, timeout, max_attempts, 8)
}

/// [`drainer`] with `concurrency` deliveries in flight at most.
pub fn drainer_paced(
    pool: &PgPool,
    url: &str,
    timeout: Duration,
    max_attempts: i32,
    concurrency: usize,
) -> (Drainer, Clock) {
    let clock = Clock::manual(Clock::System.now() + 1);
    let sink = sink(url, timeout, clock.clone());
    let settings = webhookd::outbox::DrainerSettings {
        concurrency,
        ..settings(max_attempts)
    };
    let drainer = crate::helpers::drainer_on(pool, sink, settings, clock.clone());
    (drainer, clock)
}

/// Drains every row of `rows` to the broker at `url` as `serve` does
/// (`run`), with `bound` bytes of payload held at most, and returns the
/// most the drainer held at once.
pub async fn drain_within(pool: &PgPool, url: &str, rows: usize, bound: u64) -> u64 {
    let sink = sink(url, Duration::from_secs(10), Clock::System);
    let drainer = crate::helpers::drainer_on(
        pool,
        sink,
        webhookd::outbox::DrainerSettings {
            batch: 50,
            batch_bytes: bound,
            concurrency: 8,
            ..settings(5)
        },
        Clock::System,
    );
    let stats = drainer.stats().clone();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(drainer.run(shutdown.clone(), Duration::from_secs(5)));
    super::sink::until_delivered(pool, i64::try_from(rows).unwrap()).await;
    shutdown.cancel();
    run.await.unwrap();
    assert_eq!(
        stats.held_bytes.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    stats
        .peak_held_bytes
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// The last error of row `id`.
pub async fn last_error(pool: &PgPool, id: i64) -> String {
    sqlx::query_scalar::<_, Option<String>>("select last_error from outbox where id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
        .unwrap_or_default()
}
