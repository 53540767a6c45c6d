//! Outbox drain throughput: rows/s from Postgres to a local HTTP sink (and to
//! the log sink), through the real drainer: in passes (`drain_once` until
//! nothing is due) and running as `serve` runs it (`run`).
//!
//!   DATABASE_URL=postgres://... cargo bench --bench drain [-- ROWS]
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
use webhookd::sinks::Sink;
use webhookd::sinks::http::HttpSink;
use webhookd::sinks::log::LogSink;

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

    println!(
        "| sink | drain | concurrency | batch | rows | seconds | rows/s | record statements |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (label, mode, concurrency, batch) in [
        ("log", Mode::Passes, 1, 100),
        ("http", Mode::Passes, 16, 100),
        ("http", Mode::Passes, 64, 200),
        ("log", Mode::Run, 1, 100),
        ("http", Mode::Run, 16, 100),
        ("http", Mode::Run, 64, 200),
    ] {
        sqlx::query("update outbox set delivered_at = null, attempts = 0, locked_until = null")
            .execute(&pool)
            .await?;
        sqlx::query("vacuum analyze outbox").execute(&pool).await?;
        let sink = match label {
            "log" => Sink::Log(LogSink),
            _ => Sink::Http(Box::new(HttpSink::new(
                &url,
                SINK_SECRET,
                Duration::from_secs(10),
                Clock::System,
            )?)),
        };
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
        let started = Instant::now();
        let delivered = match mode {
            Mode::Passes => passes(&drainer).await?,
            Mode::Run => run_until(&drainer, rows).await,
        };
        let secs = started.elapsed().as_secs_f64();
        anyhow::ensure!(delivered as i64 == rows, "delivered {delivered} of {rows}");
        #[allow(clippy::cast_precision_loss)]
        let rate = delivered as f64 / secs;
        let records = drainer.stats().record_statements.load(Ordering::Relaxed);
        println!(
            "| {label} | {} | {concurrency} | {batch} | {rows} | {secs:.2} | {rate:.0} | {records} |",
            mode.label()
        );
    }
    println!(
        "\nhttp sink requests received: {}",
        received.load(Ordering::Relaxed)
    );
    Ok(())
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
