//! `webhookd prune`: retention, a month at a time. The months of events
//! and of the outbox (with its attempts) past the retention are detached
//! and dropped whole (`events::partitions`, `outbox::store::retention`),
//! what they keep moved to the current month first; payloads older than
//! their own retention become stubs, in short batches. Ingest and the
//! drainer never wait.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use sqlx::PgPool;

use super::retention::RetentionArgs;
use crate::clock::Clock;
use crate::db::partitions::Retirement;
use crate::events;
use crate::outbox::store;

#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Age past which rows go (e.g. `30d`, `12h`); defaults to the retention.
    /// `reconcile` expects entries' events for the whole retention: prune
    /// sooner only with a matching WEBHOOKD_RETENTION_DAYS.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub older_than: Option<Duration>,
    /// Payloads expired per statement.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    pub batch: i64,
    /// How long stored event payloads are kept, in days; past it they
    /// become a stub naming the event (its key, outcome and times stay for
    /// the retention). Defaults to the retention; longer keeps the events'
    /// months as long.
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
    /// Whether some of those counts are the tables' statistics (a large
    /// month's, `db::partitions::COUNTED_PAGES`).
    pub estimated: bool,
    /// Outbox rows dropped with their month's partition.
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
    let payload_age = args
        .payload_retention_days
        .map_or(age, |days| Duration::from_secs(u64::from(days) * 86_400));
    #[allow(clippy::cast_precision_loss)]
    let now = clock.now() as f64;
    // A month goes once it is past both: a payload kept longer than its
    // event's key keeps the event's month.
    let cutoff = now - age.max(payload_age).as_secs_f64();
    let events = events::partitions::retire(pool, cutoff, clock.pinned()).await?;
    say(out, &events, "events")?;
    let (events_dropped, events_estimated) = events.rows(events::partitions::TABLE);
    let mut pruned = Pruned {
        events: events_dropped,
        estimated: events_estimated,
        ..Pruned::default()
    };
    pruned.payloads =
        events::expire_payloads(pool, now - payload_age.as_secs_f64(), args.batch).await?;
    let outbox = store::retention::retire(pool, cutoff, clock.pinned()).await?;
    say(out, &outbox, "rows")?;
    let (outbox_rows, outbox_estimated) = outbox.rows(store::retention::TABLE);
    pruned.outbox_rows = outbox_rows;
    pruned.estimated |= outbox_estimated;
    writeln!(
        out,
        "pruned {}{} events and {} outbox rows older than {}; {} payloads older than {} expired",
        if pruned.estimated { "about " } else { "" },
        pruned.events,
        pruned.outbox_rows,
        humantime::format_duration(age.max(payload_age)),
        pruned.payloads,
        humantime::format_duration(payload_age),
    )?;
    Ok(pruned)
}

/// Says which partitions `retirement` dropped, each with its rows (`what`)
/// and those it kept, and which it left and why.
fn say(out: &mut impl Write, retirement: &Retirement, what: &str) -> std::io::Result<()> {
    for retired in &retirement.retired {
        let rows = retired.rows;
        if retired.estimated {
            write!(
                out,
                "dropped partition {}: about {rows} {what} by its statistics",
                retired.partition
            )?;
        } else {
            write!(
                out,
                "dropped partition {}: {rows} {what}",
                retired.partition
            )?;
        }
        if retired.moved > 0 {
            write!(out, " ({} kept, moved to the current month)", retired.moved)?;
        }
        writeln!(
            out,
            "; detached in {:.2} s, dropped in {:.2} s",
            retired.detach.as_secs_f64(),
            retired.drop.as_secs_f64()
        )?;
    }
    for (partition, why) in &retirement.left {
        writeln!(out, "kept partition {partition}: {why}")?;
    }
    Ok(())
}
