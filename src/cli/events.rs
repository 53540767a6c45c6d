//! `webhookd events list|show|replay`.

use std::io::Write;

use sqlx::PgPool;

use crate::config::EventsCommand;
use crate::{events, ingest, providers};

pub async fn run(
    pool: &PgPool,
    command: &EventsCommand,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        EventsCommand::List { provider, limit } => {
            for e in events::list(pool, provider.as_deref(), *limit).await? {
                writeln!(
                    out,
                    "{}  {:<10}  {:<32}  {:<34}  {:<10}  {}",
                    e.received_at, e.provider, e.event_id, e.event_type, e.outcome, e.received_via
                )?;
            }
        }
        EventsCommand::Show { provider, event_id } => {
            let stored = find(pool, provider, event_id).await?;
            writeln!(out, "provider:    {}", stored.provider)?;
            writeln!(out, "event_id:    {}", stored.event_id)?;
            writeln!(out, "type:        {}", stored.event_type)?;
            writeln!(
                out,
                "created:     {}",
                stored.provider_created_at.as_deref().unwrap_or("-")
            )?;
            writeln!(out, "received:    {}", stored.received_at)?;
            writeln!(out, "via:         {}", stored.received_via)?;
            writeln!(out, "outcome:     {}", stored.outcome)?;
            writeln!(out, "detail:      {}", stored.detail)?;
            writeln!(out, "payload:     {}", stored.payload)?;
        }
        EventsCommand::Replay { provider, event_id } => {
            let stored = find(pool, provider, event_id).await?;
            anyhow::ensure!(
                stored.outcome != "imported",
                "{provider} {event_id} was imported: an earlier handler applied it, so replaying it would apply it twice"
            );
            let event = providers::from_stored(
                &stored.provider,
                &stored.event_id,
                &stored.event_type,
                stored.payload.into(),
            )
            .map_err(|e| anyhow::anyhow!("the stored payload cannot be replayed: {e}"))?;
            let replayed = ingest::replay(pool, &event, &stored.outcome).await?;
            writeln!(
                out,
                "replayed {provider} {event_id}: {} {}",
                replayed.applied.outcome.as_str(),
                replayed.applied.detail
            )?;
            if replayed.recorded {
                writeln!(
                    out,
                    "stored outcome changed from {} to {}",
                    stored.outcome,
                    replayed.applied.outcome.as_str()
                )?;
            } else {
                writeln!(out, "stored outcome unchanged ({})", stored.outcome)?;
            }
        }
    }
    Ok(())
}

async fn find(pool: &PgPool, provider: &str, event_id: &str) -> anyhow::Result<events::Stored> {
    events::find(pool, provider, event_id)
        .await?
        .ok_or_else(|| {
            anyhow::anyhow!("no stored event {provider} {event_id} (pruned, or never received)")
        })
}
