//! Outbox drain throughput: rows/s from Postgres to a local HTTP sink, to
//! RabbitMQ and to NATS JetStream (and to the log sink), through the real
//! drainer: in passes (`drain_once` until nothing is due) and running as
//! `serve` runs it (`run`); and the CPU time this process spent per row
//! (the drainer's, and for `http` the in-process receiving app's too; the
//! brokers' own CPU is not counted).
//!
//!   DATABASE_URL=postgres://... cargo bench --bench drain [-- ROWS]
//!
//! The brokers: `WEBHOOKD_BENCH_AMQP_URL` (default
//! `amqp://guest:guest@127.0.0.1:5672/%2f`; an exchange and a durable queue
//! `webhookd_bench`) and `WEBHOOKD_BENCH_NATS_URL` (default
//! `nats://127.0.0.1:4222`; a file stream `WEBHOOKD_BENCH`), each made
//! before and removed after.
//!
//! Creates a scratch database next to DATABASE_URL's, fills its outbox, drains
//! it to completion once per configuration, prints a markdown table, and drops
//! the database. `scripts/bench-drain.sh` provides a durable local Postgres.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};
use tokio_util::sync::CancellationToken;
use webhookd::clock::Clock;
use webhookd::outbox::retry::RetryPolicy;
use webhookd::outbox::worker::DEFAULT_BATCH_BYTES;
use webhookd::outbox::{Drainer, DrainerSettings};
use webhookd::sinks::{Sink, SinkSettings};

const SINK_SECRET: &str = "whsec_YmVuY2htYXJrLXNpbmstc2VjcmV0";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let rows: i64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    let admin: PgConnectOptions = std::env::var("DATABASE_URL")?.parse()?;
    let name = format!("webhookd_bench_{}", std::process::id());
    let mut conn = admin.connect().await?;
    sqlx::query(&format!("create database {name}"))
        .execute(&mut conn)
        .await?;
    let result = run(admin.clone().database(&name), rows).await;
    sqlx::query(&format!("drop database {name} with (force)"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    result
}

async fn run(options: PgConnectOptions, rows: i64) -> anyhow::Result<()> {
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    webhookd::db::MIGRATOR.run(&pool).await?;
    seed(&pool, rows).await?;
    let received = Arc::new(AtomicU64::new(0));
    let url = start_sink(received.clone()).await?;
    let brokers = Brokers::make().await?;

    println!(
        "| sink | drain | concurrency | batch | rows | seconds | rows/s | CPU µs/row | record statements | arrived |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (label, mode, concurrency, batch) in [
        ("log", Mode::Passes, 1, 100),
        ("http", Mode::Passes, 16, 100),
        ("amqp", Mode::Passes, 16, 100),
        ("nats", Mode::Passes, 16, 100),
        ("http", Mode::Passes, 64, 200),
        ("amqp", Mode::Passes, 64, 200),
        ("nats", Mode::Passes, 64, 200),
        ("log", Mode::Run, 1, 100),
        ("http", Mode::Run, 16, 100),
        ("amqp", Mode::Run, 16, 100),
        ("nats", Mode::Run, 16, 100),
        ("http", Mode::Run, 64, 200),
        ("amqp", Mode::Run, 64, 200),
        ("nats", Mode::Run, 64, 200),
    ] {
        sqlx::query("update outbox set delivered_at = null, attempts = 0, locked_until = null")
            .execute(&pool)
            .await?;
        sqlx::query("vacuum analyze outbox").execute(&pool).await?;
        brokers.empty().await?;
        let url = match label {
            "log" => "log".to_owned(),
            "amqp" => brokers.amqp.clone(),
            "nats" => brokers.nats.clone(),
            _ => url.clone(),
        };
        let sink_settings = SinkSettings {
            timeout: Duration::from_secs(10),
            max_body_bytes: 4 << 20,
        };
        let sink = Sink::from_url(&url, Some(SINK_SECRET), sink_settings, Clock::System)?;
        let settings = DrainerSettings {
            batch,
            batch_bytes: DEFAULT_BATCH_BYTES,
            ordered: false,
            concurrency,
            lease: Duration::from_secs(60),
            poll: Duration::from_secs(1),
            retry: RetryPolicy {
                max_attempts: 5,
                cap: Duration::from_secs(60),
            },
        };
        let drainer = Drainer::new(pool.clone(), sink, settings, Clock::System);
        let (cpu_before, received_before) = (cpu_secs(), received.load(Ordering::Relaxed));
        let started = Instant::now();
        let delivered = match mode {
            Mode::Passes => passes(&drainer).await?,
            Mode::Run => run_until(&drainer, rows).await,
        };
        let secs = started.elapsed().as_secs_f64();
        let cpu = cpu_secs() - cpu_before;
        anyhow::ensure!(delivered as i64 == rows, "delivered {delivered} of {rows}");
        #[allow(clippy::cast_precision_loss)]
        let (rate, cpu_per_row) = (delivered as f64 / secs, cpu * 1e6 / delivered as f64);
        let records = drainer.stats().record_statements.load(Ordering::Relaxed);
        // What the receiving end holds: requests, queued or stored messages.
        let arrived = match label {
            "http" => (received.load(Ordering::Relaxed) - received_before).to_string(),
            "amqp" => brokers.queued().await?.to_string(),
            "nats" => brokers.streamed().await?.to_string(),
            _ => "-".to_owned(),
        };
        println!(
            "| {label} | {} | {concurrency} | {batch} | {rows} | {secs:.2} | {rate:.0} | {cpu_per_row:.0} | {records} | {arrived} |",
            mode.label()
        );
    }
    brokers.remove().await;
    Ok(())
}

/// CPU seconds (user and system) this process has used.
fn cpu_secs() -> f64 {
    // SAFETY: getrusage writes the struct it is given, nothing else.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &raw mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The bench's exchange and queue on RabbitMQ and stream on NATS; each
/// configuration finds them empty.
struct Brokers {
    amqp: String,
    nats: String,
    channel: lapin::Channel,
    jetstream: async_nats::jetstream::Context,
}

const BENCH_NAME: &str = "webhookd_bench";
const BENCH_STREAM: &str = "WEBHOOKD_BENCH";

impl Brokers {
    async fn make() -> anyhow::Result<Brokers> {
        use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
        use lapin::types::FieldTable;
        let amqp_base = std::env::var("WEBHOOKD_BENCH_AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
        let connection =
            lapin::Connection::connect(&amqp_base, lapin::ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        channel
            .exchange_declare(
                BENCH_NAME.into(),
                lapin::ExchangeKind::Topic,
                ExchangeDeclareOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel
            .queue_declare(BENCH_NAME.into(), durable, FieldTable::default())
            .await?;
        channel
            .queue_bind(
                BENCH_NAME.into(),
                BENCH_NAME.into(),
                "#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let nats_base = std::env::var("WEBHOOKD_BENCH_NATS_URL")
            .unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
        let server = nats_base.trim_start_matches("nats://").to_owned();
        let jetstream = async_nats::jetstream::new(async_nats::connect(server).await?);
        Ok(Brokers {
            amqp: format!("{amqp_base}?exchange={BENCH_NAME}"),
            nats: format!("{nats_base}?stream={BENCH_STREAM}&subject_prefix={BENCH_NAME}"),
            channel,
            jetstream,
        })
    }

    /// Purges the queue, and makes the stream anew: a purge keeps the
    /// stream's duplicate window, which would take the next run's messages
    /// (the same outbox ids) for copies and store none of them.
    async fn empty(&self) -> anyhow::Result<()> {
        self.channel
            .queue_purge(BENCH_NAME.into(), Default::default())
            .await?;
        let _ = self.jetstream.delete_stream(BENCH_STREAM).await;
        self.jetstream
            .create_stream(async_nats::jetstream::stream::Config {
                name: BENCH_STREAM.to_owned(),
                subjects: vec![format!("{BENCH_NAME}.>")],
                storage: async_nats::jetstream::stream::StorageType::File,
                ..Default::default()
            })
            .await?;
        Ok(())
    }

    async fn queued(&self) -> anyhow::Result<u32> {
        let queue = self
            .channel
            .queue_declare(
                BENCH_NAME.into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                lapin::types::FieldTable::default(),
            )
            .await?;
        Ok(queue.message_count())
    }

    async fn streamed(&self) -> anyhow::Result<u64> {
        let mut stream = self.jetstream.get_stream(BENCH_STREAM).await?;
        Ok(stream.info().await?.state.messages)
    }

    async fn remove(self) {
        let _ = self
            .channel
            .queue_delete(BENCH_NAME.into(), Default::default())
            .await;
        let _ = self
            .channel
            .exchange_delete(BENCH_NAME.into(), Default::default())
            .await;
        let _ = self.jetstream.delete_stream(BENCH_STREAM).await;
    }
}

#[derive(Clone, Copy)]
enum Mode {
    /// `drain_once` until a pass leases nothing.
    Passes,
    /// `run`, as `serve` drains, until every row is delivered.
    Run,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Passes => "drain_once",
            Mode::Run => "run",
        }
    }
}

async fn passes(drainer: &Drainer) -> anyhow::Result<usize> {
    let mut delivered = 0;
    loop {
        let pass = drainer.drain_once().await?;
        delivered += pass.delivered;
        if pass.leased == 0 {
            return Ok(delivered);
        }
    }
}

/// Runs the drainer until its counters say `rows` were delivered.
async fn run_until(drainer: &Drainer, rows: i64) -> usize {
    let stats = drainer.stats().clone();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(
        drainer
            .clone()
            .run(shutdown.clone(), Duration::from_secs(5)),
    );
    let target = u64::try_from(rows).unwrap_or(u64::MAX);
    while stats.delivered.load(Ordering::Relaxed) < target && !run.is_finished() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    shutdown.cancel();
    let _ = run.await;
    usize::try_from(stats.delivered.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
}

async fn seed(pool: &PgPool, rows: i64) -> anyhow::Result<()> {
    sqlx::query(
        "insert into outbox (topic, dedupe_key, provider, event_id, payload)
         select 'wallet.credited', 'stripe:evt_' || g, 'stripe', 'evt_' || g,
                jsonb_build_object('user_id', 'user_' || (g % 100), 'currency', 'USD',
                                   'amount_minor', 1000, 'balance_minor', g * 1000, 'entry_id', g)
         from generate_series(1, $1) g",
    )
    .bind(rows)
    .execute(pool)
    .await?;
    Ok(())
}

/// A minimal receiving app: counts requests, answers 204.
async fn start_sink(received: Arc<AtomicU64>) -> anyhow::Result<String> {
    let app = axum::Router::new().route(
        "/hooks",
        axum::routing::post(move || {
            let received = received.clone();
            async move {
                received.fetch_add(1, Ordering::Relaxed);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hooks", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}
