//! Replays: a stored event's effect run again through the engine, under
//! the same locks, without a claim.

use sqlx::PgPool;

use super::Error;
use super::engine;
use crate::effects;
use crate::events::{self, Outcome};
use crate::fetch::Fetcher;
use crate::providers::{Event, Providers};

/// Re-runs a stored event's effects through the same idempotent path, in one
/// transaction, under the same locks. Effects that exist already are kept:
/// their natural keys make them no-ops, so replaying an applied event
/// changes nothing. The stored outcome is updated only when an event that
/// was not `processed` now has another outcome (say, `rejected` before a
/// fix).
pub async fn replay(
    pool: &PgPool,
    event: &Event,
    stored_outcome: Outcome,
) -> Result<Replayed, Error> {
    let unit = effects::decode(event.clone());
    let reapplied = engine::reapply(pool, &unit).await?;
    let applied = &reapplied.applied;
    let recorded = stored_outcome != Outcome::Processed && applied.outcome != stored_outcome;
    let applied = reapplied.commit(recorded).await?;
    Ok(Replayed { applied, recorded })
}

/// What a replay did.
#[derive(Debug, Clone, PartialEq)]
pub struct Replayed {
    pub applied: effects::Applied,
    /// Whether the stored outcome was replaced.
    pub recorded: bool,
}

/// Why [`replay_stored`] would not replay an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayRefused {
    #[error("no such stored event (pruned, or never received)")]
    NotFound,
    /// An earlier handler applied it, so replaying it would apply it twice.
    #[error("it was imported: an earlier handler applied it, so replaying it would apply it twice")]
    Imported,
    #[error("the stored payload cannot be replayed: {0}")]
    Unreplayable(String),
    /// Its personal data was erased: what it applied stays, but it has no
    /// payload left to apply again.
    #[error("its personal data was erased (webhookd erase): it has no payload to replay")]
    Erased,
    /// Its payload was older than the payload retention
    /// (`WEBHOOKD_PAYLOAD_RETENTION_DAYS`) and is a stub now.
    #[error("its payload expired (WEBHOOKD_PAYLOAD_RETENTION_DAYS): it has no payload to replay")]
    Expired,
    /// A thin event whose data Stripe's API could not give now.
    #[error("{0}; try again")]
    NotFetched(String),
    /// The source that received it is not configured now: what it does
    /// with its events (apply, or only record) is not known.
    #[error("the source `{0}` that received it is not configured")]
    UnknownSource(String),
}

/// What [`replay_stored`] did: the outcome stored before, and the replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayedStored {
    pub stored_outcome: Outcome,
    pub replayed: Replayed,
}

/// Replays the stored event `provider`/`event_id` through [`replay`],
/// except for an imported event: what `webhookd events replay` and the
/// console's "replay" both run. It is judged by the source that received
/// it as `sources` configure it now (its scope: an event it does not take
/// is rejected, as its delivery would be; whether it only records); an
/// event of a named source no longer configured is not replayed. A Stripe
/// thin event stored without its data (no key when it arrived) is fetched
/// first, outside the transaction, by `fetcher` (`STRIPE_API_KEY` set), which also refreshes a
/// subscription event that ties with the stored state.
pub async fn replay_stored(
    pool: &PgPool,
    sources: &Providers,
    fetcher: Option<&Fetcher>,
    provider: &str,
    event_id: &str,
) -> Result<Result<ReplayedStored, ReplayRefused>, Error> {
    let Some(stored) = events::find(pool, provider, event_id).await? else {
        return Ok(Err(ReplayRefused::NotFound));
    };
    if stored.outcome == Outcome::Imported {
        return Ok(Err(ReplayRefused::Imported));
    }
    if stored.erased_at.is_some() {
        return Ok(Err(ReplayRefused::Erased));
    }
    if stored.payload_expired_at.is_some() {
        return Ok(Err(ReplayRefused::Expired));
    }
    let source = stored.source_name().to_owned();
    let receiver = sources.receiver(&source);
    if receiver.is_none() && stored.source.is_some() {
        return Ok(Err(ReplayRefused::UnknownSource(source)));
    }
    let account = stored.account;
    let event = match Event::from_stored_at(
        &stored.provider,
        &stored.event_id,
        &stored.event_type,
        stored.payload.into(),
        stored.provider_created_at.as_deref(),
    ) {
        // An account sweep's event keeps the account it was listed for.
        Ok(event) => match account.as_deref() {
            Some(account) => event.listed_for(account),
            None => event,
        }
        .received_by(receiver)
        .within(sources.scope(&source)),
        Err(error) => return Ok(Err(ReplayRefused::Unreplayable(error.to_string()))),
    };
    let event = match fetcher {
        Some(fetcher) => match fetcher.complete(pool, event).await {
            Ok(event) => event,
            Err(unavailable) => return Ok(Err(ReplayRefused::NotFetched(unavailable.to_string()))),
        },
        None => event,
    };
    let replayed = replay(pool, &event, stored.outcome).await?;
    Ok(Ok(ReplayedStored {
        stored_outcome: stored.outcome,
        replayed,
    }))
}
