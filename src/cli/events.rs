//! `webhookd events list|show|replay`.

use std::io::Write;

use clap::Subcommand;
use sqlx::PgPool;

use super::{MAX_SHOWN_TEXT_BYTES, id, shown};
use crate::config::{SourceSettings, StripeApiArgs};
use crate::fetch::Fetcher;
use crate::providers::Providers;
use crate::{events, ingest};

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// The newest events first.
    List {
        /// Only this provider's (or source's).
        #[arg(long)]
        provider: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// One event: outcome, detail and the verified payload.
    Show { provider: String, event_id: String },
    /// Re-run a stored event's effects through the same idempotent path,
    /// judged by the source that received it as it is configured now
    /// (`WEBHOOKD_SOURCE_<NAME>_*`; a Stripe event by its source's mode and
    /// Connect settings). A Stripe thin event stored without its data is
    /// fetched first, with STRIPE_API_KEY.
    Replay {
        provider: String,
        event_id: String,
        #[command(flatten)]
        stripe: Box<StripeApiArgs>,
    },
}

/// `webhookd events`: a replay reads the event as the sources
/// `configured` would.
pub async fn run(
    pool: &PgPool,
    command: &EventsCommand,
    configured: &[SourceSettings],
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        EventsCommand::List { provider, limit } => {
            list(pool, provider.as_deref(), *limit, out).await
        }
        EventsCommand::Show { provider, event_id } => show(pool, provider, event_id, out).await,
        EventsCommand::Replay {
            provider,
            event_id,
            stripe,
        } => {
            let sources = crate::startup::registry(stripe, configured)?;
            let thin = crate::startup::fetcher(stripe)?;
            crate::startup::ids_past_now(pool).await?;
            replay(pool, &sources, thin.as_deref(), provider, event_id, out).await
        }
    }
}

async fn list(
    pool: &PgPool,
    provider: Option<&str>,
    limit: i64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let filter = events::Filter {
        provider: provider.map(str::to_owned),
        ..events::Filter::default()
    };
    for e in events::page(pool, &filter, None, limit).await? {
        writeln!(
            out,
            "{}  {:<10}  {:<32}  {:<34}  {:<10}  {}",
            e.received_at,
            id(&e.provider),
            id(&e.event_id),
            id(&e.event_type),
            e.outcome,
            id(&e.received_via)
        )?;
    }
    Ok(())
}

async fn show(
    pool: &PgPool,
    provider: &str,
    event_id: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let stored = find(pool, provider, event_id).await?;
    writeln!(out, "provider:    {}", id(&stored.provider))?;
    writeln!(out, "event_id:    {}", id(&stored.event_id))?;
    writeln!(out, "type:        {}", id(&stored.event_type))?;
    writeln!(
        out,
        "created:     {}",
        id(stored.provider_created_at.as_deref().unwrap_or("-"))
    )?;
    writeln!(out, "received:    {}", stored.received_at)?;
    writeln!(out, "via:         {}", id(&stored.received_via))?;
    writeln!(out, "source:      {}", id(stored.source_name()))?;
    if let Some(account) = &stored.account {
        writeln!(out, "account:     {}", id(account))?;
    }
    if let Some(version) = &stored.api_version {
        writeln!(out, "api_version: {}", id(version))?;
    }
    writeln!(out, "outcome:     {}", stored.outcome)?;
    if let Some(at) = &stored.erased_at {
        writeln!(
            out,
            "erased:      {at} (its personal data removed: webhookd erase)"
        )?;
    }
    if let Some(at) = &stored.payload_expired_at {
        writeln!(
            out,
            "expired:     {at} (its payload past WEBHOOKD_PAYLOAD_RETENTION_DAYS)"
        )?;
    }
    let detail = stored.detail.to_string();
    writeln!(out, "detail:      {}", shown(&detail, MAX_SHOWN_TEXT_BYTES))?;
    // The whole payload (it is what was asked for), escaped.
    let payload = stored.payload.to_string();
    writeln!(out, "payload:     {}", shown(&payload, usize::MAX))?;
    Ok(())
}

/// Replays through the same path as ingest (`ingest::replay_stored`),
/// except for an imported event: an earlier handler applied it, so its
/// effects must not run here.
async fn replay(
    pool: &PgPool,
    sources: &Providers,
    thin: Option<&Fetcher>,
    provider: &str,
    event_id: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let done = ingest::replay_stored(pool, sources, thin, provider, event_id)
        .await?
        .map_err(|refused| anyhow::anyhow!("{} {}: {refused}", id(provider), id(event_id)))?;
    let applied = &done.replayed.applied;
    let detail = applied.detail.to_string();
    writeln!(
        out,
        "replayed {} {}: {} {}",
        id(provider),
        id(event_id),
        applied.outcome.as_str(),
        shown(&detail, MAX_SHOWN_TEXT_BYTES)
    )?;
    if done.replayed.recorded {
        writeln!(
            out,
            "stored outcome changed from {} to {}",
            done.stored_outcome,
            applied.outcome.as_str()
        )?;
    } else {
        writeln!(out, "stored outcome unchanged ({})", done.stored_outcome)?;
    }
    Ok(())
}

async fn find(pool: &PgPool, provider: &str, event_id: &str) -> anyhow::Result<events::Stored> {
    events::find(pool, provider, event_id)
        .await?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no stored event {} {} (pruned, or never received)",
                id(provider),
                id(event_id)
            )
        })
}
