//! `webhookd outbox list [--dead] [--sink NAME]` and `webhookd outbox retry
//! <id>|--all-dead [--sink NAME]`.

use std::io::Write;

use clap::Subcommand;
use sqlx::PgPool;

use super::{MAX_SHOWN_TEXT_BYTES, id, shown};
use crate::outbox::store::{self, browse};

#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// List rows not delivered yet (pending, leased or dead), oldest first.
    List {
        /// Only dead-lettered rows.
        #[arg(long)]
        dead: bool,
        /// Only the rows of this sink (`default`: WEBHOOKD_SINK_URL's).
        #[arg(long)]
        sink: Option<String>,
        /// Most rows to show.
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Re-queue a dead-lettered row (or all of them) for a fresh set of attempts.
    Retry {
        /// The outbox id (its `webhook-id`).
        #[arg(required_unless_present = "all_dead", conflicts_with = "all_dead")]
        id: Option<i64>,
        /// Every dead-lettered row.
        #[arg(long)]
        all_dead: bool,
        /// With --all-dead: only the rows of this sink.
        #[arg(long, requires = "all_dead")]
        sink: Option<String>,
    },
}

pub async fn run(
    pool: &PgPool,
    command: &OutboxCommand,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        OutboxCommand::List { dead, sink, limit } => {
            let filter = browse::Filter {
                dead: dead.then_some(true),
                sink: sink.clone(),
                ..browse::Filter::default()
            };
            let rows = browse::page(pool, &filter, None, *limit).await?;
            writeln!(
                out,
                "{:>8}  {:<8}  {:<22}  {:<10}  {:<10}  {:<28}  {:>8}  {:<20}  last_error",
                "id", "state", "topic", "sink", "provider", "event_id", "attempts", "available_at"
            )?;
            for row in &rows {
                writeln!(
                    out,
                    "{:>8}  {:<8}  {:<22}  {:<10}  {:<10}  {:<28}  {:>8}  {:<20}  {}",
                    row.id,
                    row.state,
                    id(&row.topic),
                    id(&row.sink),
                    id(&row.provider),
                    id(&row.event_id),
                    row.attempts,
                    row.available_at,
                    shown(
                        row.last_error.as_deref().unwrap_or("-"),
                        MAX_SHOWN_TEXT_BYTES
                    ),
                )?;
            }
            writeln!(out, "{} shown", rows.len())?;
            for (name, depth) in store::depth_by_sink(pool).await? {
                if sink.as_ref().is_none_or(|sink| *sink == name) {
                    writeln!(
                        out,
                        "sink {}: {} pending (oldest {:.0} s), {} dead",
                        id(&name),
                        depth.pending,
                        depth.oldest_pending_secs,
                        depth.dead
                    )?;
                }
            }
        }
        OutboxCommand::Retry { id, all_dead, sink } => {
            let filter = browse::Filter {
                sink: sink.clone(),
                ..browse::Filter::default()
            };
            let bound = browse::Bound {
                id: if *all_dead { None } else { *id },
                ..browse::Bound::default()
            };
            let requeued = browse::retry_dead_matching(pool, &filter, &bound).await?;
            if requeued.is_empty() {
                match id {
                    Some(id) if !*all_dead => {
                        anyhow::bail!("outbox row {id} is not dead-lettered (or does not exist)")
                    }
                    _ => writeln!(out, "no dead-lettered rows")?,
                }
            } else {
                let ids: Vec<String> = requeued.iter().map(i64::to_string).collect();
                writeln!(out, "re-queued {}: {}", requeued.len(), ids.join(", "))?;
            }
        }
    }
    Ok(())
}
