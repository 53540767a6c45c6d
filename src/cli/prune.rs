//! `webhookd prune`: retention in short batches. Each batch is its own
//! statement and skips rows other transactions hold, so ingest never waits.

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
    /// Rows deleted per statement.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    pub batch: i64,
    #[command(flatten)]
    pub retention: RetentionArgs,
}

/// Rows deleted: `(events, outbox rows)`.
pub async fn run(
    pool: &PgPool,
    args: &PruneArgs,
    clock: &Clock,
    out: &mut impl Write,
) -> anyhow::Result<(u64, u64)> {
    let age = args.older_than.unwrap_or_else(|| args.retention.window());
    if age < args.retention.window() {
        writeln!(
            out,
            "note: pruning sooner than WEBHOOKD_RETENTION_DAYS; run reconcile with the same retention"
        )?;
    }
    #[allow(clippy::cast_precision_loss)]
    let cutoff = clock.now() as f64 - age.as_secs_f64();
    let pruned = (
        in_batches(args.batch, async |batch| {
            events::prune_batch(pool, cutoff, batch).await
        })
        .await?,
        in_batches(args.batch, async |batch| {
            store::prune_delivered_batch(pool, cutoff, batch).await
        })
        .await?,
    );
    writeln!(
        out,
        "pruned {} events and {} delivered outbox rows older than {}",
        pruned.0,
        pruned.1,
        humantime::format_duration(age)
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
