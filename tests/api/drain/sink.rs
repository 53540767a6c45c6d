//! What the drainer tests share: a user's app as a real local HTTP server
//! that checks each delivery's Standard Webhooks signature and answers as
//! scripted, drainer settings, and outbox rows written directly.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use serde_json::Value;
use sqlx::PgPool;
use tokio::sync::{Notify, Semaphore, oneshot};
use webhookd::clock::Clock;
use webhookd::outbox::retry::RetryPolicy;
use webhookd::outbox::{Drainer, DrainerSettings};
use webhookd::providers::Verify;
use webhookd::providers::standard::StandardVerifier;
use webhookd::secrets::Secrets;
use webhookd::sinks::Sink;
use webhookd::sinks::http::HttpSink;

pub const SINK_SECRET: &str = "whsec_c2luay1zZWNyZXQtZm9yLXRoZS10ZXN0cw==";

/// Bodies larger than this are kept without their `data`.
const KEPT_BODY_BYTES: usize = 64 * 1024;

/// One request the sink received.
#[derive(Debug, Clone)]
pub struct Received {
    pub webhook_id: String,
    /// The parsed body (without `data` when the body was large).
    pub body: Value,
    pub bytes: usize,
    /// The Standard Webhooks signature checked out.
    pub verified: bool,
}

#[derive(Default)]
pub struct SinkState {
    /// Statuses (and `Retry-After`) to answer, in order; 200 once they run out.
    script: Mutex<VecDeque<(u16, Option<String>)>>,
    received: Mutex<Vec<Received>>,
    pub arrived: Notify,
    /// When set, each request waits for a permit before answering.
    gate: Mutex<Option<Arc<Semaphore>>>,
    /// Requests for these webhook ids wait until the test says.
    held: Mutex<HashMap<String, oneshot::Receiver<()>>>,
}

/// A user's app: verifies, records, answers as scripted.
pub struct TestSink {
    pub url: String,
    pub state: Arc<SinkState>,
}

impl TestSink {
    pub async fn start() -> TestSink {
        let state = Arc::new(SinkState::default());
        let app = axum::Router::new()
            .route("/hooks", post(receive))
            .layer(DefaultBodyLimit::disable())
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        TestSink { url, state }
    }

    pub fn script(&self, statuses: &[(u16, Option<&str>)]) {
        self.state.script.lock().unwrap().extend(
            statuses
                .iter()
                .map(|(status, after)| (*status, after.map(str::to_owned))),
        );
    }

    /// Answers 200 from now on, whatever was scripted.
    pub fn recover(&self) {
        self.state.script.lock().unwrap().clear();
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    /// The `webhook-id` of each request received, in order.
    pub fn webhook_ids(&self) -> Vec<String> {
        self.received().into_iter().map(|r| r.webhook_id).collect()
    }

    /// Holds every request until the returned semaphore gets permits.
    pub fn hold(&self) -> Arc<Semaphore> {
        let gate = Arc::new(Semaphore::new(0));
        *self.state.gate.lock().unwrap() = Some(gate.clone());
        gate
    }

    /// Holds the first request for outbox row `id` until the test sends on
    /// (or drops) the returned channel.
    pub fn hold_row(&self, id: i64) -> oneshot::Sender<()> {
        let (release, held) = oneshot::channel();
        self.state.held.lock().unwrap().insert(id.to_string(), held);
        release
    }

    /// Waits (bounded) until `n` requests arrived.
    pub async fn until_received(&self, n: usize) {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let arrived = self.state.arrived.notified();
                if self.state.received.lock().unwrap().len() >= n {
                    return;
                }
                arrived.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{n} requests did not arrive"));
    }

    /// The `http` sink pointed at this app.
    pub fn sink(&self, clock: Clock) -> Sink {
        let sink = HttpSink::new(&self.url, SINK_SECRET, Duration::from_secs(5), clock).unwrap();
        Sink::Http(Box::new(sink))
    }

    /// A drainer with `settings`, on the system clock.
    pub fn drainer_with(&self, pool: PgPool, settings: DrainerSettings) -> Drainer {
        crate::helpers::drainer_on(&pool, self.sink(Clock::System), settings, Clock::System)
    }

    pub fn drainer(&self, pool: PgPool, clock: Clock, max_attempts: i32) -> Drainer {
        crate::helpers::drainer_on(
            &pool,
            self.sink(clock.clone()),
            settings(max_attempts),
            clock,
        )
    }
}

pub(crate) fn settings(max_attempts: i32) -> DrainerSettings {
    DrainerSettings {
        batch: 50,
        batch_bytes: 8 * 1024 * 1024,
        ordered: false,
        concurrency: 8,
        lease: Duration::from_secs(30),
        poll: Duration::from_millis(100),
        retry: RetryPolicy {
            max_attempts,
            cap: Duration::from_secs(3600),
        },
    }
}

async fn receive(State(state): State<Arc<SinkState>>, headers: HeaderMap, body: Bytes) -> Response {
    let verifier = StandardVerifier::new("sink".into(), &Secrets::new([SINK_SECRET]), 300).unwrap();
    let signed_at: i64 = headers["webhook-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let webhook_id = headers["webhook-id"].to_str().unwrap().to_owned();
    let mut parsed: Value = serde_json::from_slice(&body).unwrap();
    if body.len() > KEPT_BODY_BYTES {
        parsed["data"] = Value::Null;
    }
    let received = Received {
        webhook_id: webhook_id.clone(),
        body: parsed,
        bytes: body.len(),
        verified: verifier.verify(&headers, &body, signed_at).is_ok(),
    };
    drop(body);
    state.received.lock().unwrap().push(received);
    state.arrived.notify_waiters();
    let gate = state.gate.lock().unwrap().clone();
    if let Some(gate) = gate {
        gate.acquire().await.unwrap().forget();
    }
    let held = state.held.lock().unwrap().remove(&webhook_id);
    if let Some(held) = held {
        let _ = held.await;
    }
    let next = state.script.lock().unwrap().pop_front();
    let (status, retry_after) = next.unwrap_or((200, None));
    let mut response = StatusCode::from_u16(status).unwrap().into_response();
    if let Some(value) = retry_after {
        response
            .headers_mut()
            .insert("retry-after", value.parse().unwrap());
    }
    response
}

/// Outbox rows written directly, as the ingest transaction writes them.
pub async fn seed(pool: &PgPool, count: i64) -> Vec<i64> {
    seed_sized(pool, count, 0).await
}

/// `count` rows whose payloads carry a string of `bytes` bytes.
pub async fn seed_sized(pool: &PgPool, count: i64, bytes: i32) -> Vec<i64> {
    sqlx::query_scalar(
        "insert into outbox (topic, dedupe_key, provider, event_id, payload)
         select 'wallet.credited', 'stripe:' || gen_random_uuid(), 'stripe', 'evt_' || g,
                jsonb_build_object('n', g, 'blob', repeat('x', $2))
         from generate_series(1, $1) g
         returning id",
    )
    .bind(count)
    .bind(bytes)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[derive(Debug, sqlx::FromRow)]
pub struct Row {
    pub attempts: i32,
    pub delivered: bool,
    pub dead: bool,
    /// Seconds from `now` until the row is due.
    pub due_in: f64,
    pub last_error: Option<String>,
}

pub async fn row(pool: &PgPool, id: i64, now: i64) -> Row {
    sqlx::query_as(
        "select attempts, delivered_at is not null as delivered, dead_at is not null as dead,
                extract(epoch from available_at - to_timestamp($2))::float8 as due_in, last_error
         from outbox where id = $1",
    )
    .bind(id)
    .bind(now)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Waits (bounded) until `n` rows are delivered, watching the database.
pub async fn until_delivered(pool: &PgPool, n: i64) {
    let mut delivered = 0;
    for _ in 0..1200 {
        delivered = sqlx::query_scalar::<_, i64>(
            "select count(*) from outbox where delivered_at is not null",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if delivered >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{delivered} of {n} rows delivered");
}
