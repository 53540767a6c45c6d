//! `webhookd prune`: retention. Events go a month at a time (their
//! partition detached and dropped whole, `events::partitions`); payloads
//! older than their own retention become stubs; delivered outbox rows go in
//! short batches that skip rows other transactions hold. Ingest never waits.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use sqlx::PgPool;

use super::retention::RetentionArgs;
use crate::clock::Clock;
use crate::events;
use crate::outbox::store;

#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Age past which rows go (e.g. `30d`, `12h`); defaults to the retention.
    /// `reconcile` expects entries' events for the whole retention: prune
    /// sooner only with a matching WEBHOOKD_RETENTION_DAYS.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub older_than: Option<Duration>,
    /// Rows changed per statement (delivered outbox rows deleted, payloads
    /// expired).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    pub batch: i64,
    /// How long stored event payloads are kept, in days; past it they
    /// become a stub naming the event (its key, outcome and times stay for
    /// the retention). Defaults to the retention.
    #[arg(long, env = "WEBHOOKD_PAYLOAD_RETENTION_DAYS", value_parser = clap::value_parser!(u32).range(1..))]
    pub payload_retention_days: Option<u32>,
    #[command(flatten)]
    pub retention: RetentionArgs,
}

/// What a prune did.
#[derive(Debug, Default)]
pub struct Pruned {
    /// Events dropped with their month's partition.
    pub events: u64,
    /// Delivered outbox rows deleted.
    pub outbox_rows: u64,
    /// Payloads replaced by a stub.
    pub payloads: u64,
}

pub async fn run(
    pool: &PgPool,
    args: &PruneArgs,
    clock: &Clock,
    out: &mut impl Write,
) -> anyhow::Result<Pruned> {
    let age = args.older_than.unwrap_or_else(|| args.retention.window());
    if age < args.retention.window() {
        writeln!(
            out,
            "note: pruning sooner than WEBHOOKD_RETENTION_DAYS; run reconcile with the same retention"
        )?;
    }
    #[allow(clippy::cast_precision_loss)]
    let now = clock.now() as f64;
    let cutoff = now - age.as_secs_f64();
    let retirement = events::partitions::retire(pool, cutoff, clock.pinned()).await?;
    let mut pruned = Pruned::default();
    for retired in &retirement.retired {
        pruned.events += retired.events;
        writeln!(
            out,
            "dropped partition {}: {} events{}",
            retired.partition,
            retired.events,
            if retired.moved > 0 {
                format!(" ({} kept, moved to the current month)", retired.moved)
            } else {
                String::new()
            }
        )?;
    }
    for (partition, why) in &retirement.left {
        writeln!(out, "kept partition {partition}: {why}")?;
    }
    let payload_age = args
        .payload_retention_days
        .map_or(age, |days| Duration::from_secs(u64::from(days) * 86_400));
    pruned.payloads =
        events::expire_payloads(pool, now - payload_age.as_secs_f64(), args.batch).await?;
    pruned.outbox_rows = in_batches(args.batch, async |batch| {
        store::prune_delivered_batch(pool, cutoff, batch).await
    })
    .await?;
    writeln!(
        out,
        "pruned {} events and {} delivered outbox rows older than {}; {} payloads older than {} expired",
        pruned.events,
        pruned.outbox_rows,
        humantime::format_duration(age),
        pruned.payloads,
        humantime::format_duration(payload_age),
    )?;
    Ok(pruned)
}

/// Rows deleted by `prune_batch` (up to `batch` a statement), run batch
/// after batch until one comes back short: each is its own short statement,
/// so ingest never waits behind a long delete.
async fn in_batches(
    batch: i64,
    prune_batch: impl AsyncFn(i64) -> Result<u64, sqlx::Error>,
) -> Result<u64, sqlx::Error> {
    let full = u64::try_from(batch).unwrap_or(u64::MAX);
    let mut pruned = 0;
    loop {
        let deleted = prune_batch(batch).await?;
        pruned += deleted;
        if deleted < full {
            return Ok(pruned);
        }
    }
}
