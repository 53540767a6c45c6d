//! `webhookd outbox list [--dead]` and `webhookd outbox retry <id>|--all-dead`.

use std::io::Write;

use clap::Subcommand;
use sqlx::PgPool;

use super::{MAX_SHOWN_TEXT_BYTES, id, shown};
use crate::outbox::store;

#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// List rows not delivered yet (pending, leased or dead), oldest first.
    List {
        /// Only dead-lettered rows.
        #[arg(long)]
        dead: bool,
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
    },
}

pub async fn run(
    pool: &PgPool,
    command: &OutboxCommand,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        OutboxCommand::List { dead, limit } => {
            let rows = store::list(pool, *dead, *limit).await?;
            writeln!(
                out,
                "{:>8}  {:<8}  {:<22}  {:<10}  {:<28}  {:>8}  {:<20}  last_error",
                "id", "state", "topic", "provider", "event_id", "attempts", "available_at"
            )?;
            for row in &rows {
                writeln!(
                    out,
                    "{:>8}  {:<8}  {:<22}  {:<10}  {:<28}  {:>8}  {:<20}  {}",
                    row.id,
                    row.state,
                    id(&row.topic),
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
            let depth = store::depth(pool).await?;
            writeln!(
                out,
                "{} shown; {} pending (oldest {:.0} s), {} dead",
                rows.len(),
                depth.pending,
                depth.oldest_pending_secs,
                depth.dead
            )?;
        }
        OutboxCommand::Retry { id, all_dead } => {
            let requeued = store::retry_dead(pool, if *all_dead { None } else { *id }).await?;
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
