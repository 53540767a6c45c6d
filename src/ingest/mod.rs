//! THE transaction: claim the event ids, apply their effects, write their
//! outbox rows, record their outcomes, commit ([`engine`]), for the events
//! that arrive together ([`batch`]) or for one. Either all of it commits or
//! none of it does, so a failed delivery leaves nothing behind and its retry
//! starts clean.

pub mod batch;
mod engine;
mod error;
mod fallback;

use serde::Serialize;
use sqlx::PgPool;
use tokio_util::task::TaskTracker;

use crate::effects;
use crate::events::{self, Claim, Outcome};
use crate::providers::{Event, Scope, VerifiedEvent};
use crate::{db, outbox};
use batch::{BatchSettings, Batcher};
pub use engine::Wake;
pub use error::Error;

/// Applies verified events through the group commit of [`batch`].
#[derive(Debug, Clone)]
pub struct Ingestor {
    batcher: Batcher,
}

impl Ingestor {
    /// Starts the batch dispatcher on `tasks` (call inside the Tokio
    /// runtime): shutdown waits for them once the ingestor is dropped.
    /// `wake` is how the drainer hears of new outbox rows.
    pub fn start(pool: PgPool, settings: BatchSettings, wake: Wake, tasks: &TaskTracker) -> Self {
        Self::start_with_sizes(pool, settings, wake, tasks, metrics::Histogram::noop())
    }

    /// [`Ingestor::start`], recording each batch's events in `batch_sizes`.
    pub fn start_with_sizes(
        pool: PgPool,
        settings: BatchSettings,
        wake: Wake,
        tasks: &TaskTracker,
        batch_sizes: metrics::Histogram,
    ) -> Self {
        Ingestor {
            batcher: Batcher::start(pool, settings, wake, tasks, batch_sizes),
        }
    }

    /// Stops taking events (shutdown, once the server stopped): later ones
    /// are answered [`Error::ShuttingDown`]; batches running finish.
    pub fn close(&self) {
        self.batcher.close();
    }

    pub fn batch_stats(&self) -> &batch::BatchStats {
        self.batcher.stats()
    }

    /// Applies `event` with whatever arrives with it, once its batch
    /// committed.
    pub async fn ingest(&self, event: VerifiedEvent) -> batch::Answer {
        self.batcher.submit(event.into_event()).await
    }
}

/// The answer to a delivery: `{"outcome": ..., "event_id": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    pub outcome: Outcome,
    pub event_id: String,
}

/// Applies one event in its own transaction (a batch of one), waking a
/// drainer in another process with `pg_notify`.
///
/// Data the database refuses (a poison message, [`db::Poison`]) would fail
/// the same way on every retry, and the provider would retry it for days:
/// the event is then recorded `rejected` with the reason instead, in a
/// transaction of its own, so that its retry is a `duplicate`. Transient
/// failures stay errors (answered 503, retried).
pub async fn ingest(pool: &PgPool, event: &Event) -> Result<Receipt, Error> {
    ingest_waking(pool, event, &Wake::Notify).await
}

/// Applies `events` in order as one batch (one transaction when it
/// succeeds, else one by one in order), answering each: the same outcomes
/// as [`ingest`] of each in turn.
pub async fn ingest_batch(pool: &PgPool, events: &[Event]) -> Vec<batch::Answer> {
    batch::apply(pool, events, Wake::Notify).await
}

async fn ingest_waking(pool: &PgPool, event: &Event, wake: &Wake) -> Result<Receipt, Error> {
    let applied = engine::commit(pool, &[event], engine::BEGIN_ONE, wake, || true, || {}).await;
    match applied {
        Ok(outcomes) => {
            let outcome = outcomes
                .and_then(|o| o.first().copied())
                .ok_or(Error::Invariant("a committed event has no outcome"))?;
            Ok(receipt(outcome, event))
        }
        Err(error) => match error.poison() {
            Some(poison) => Ok(reject(pool, event, &poison).await?),
            None => Err(error),
        },
    }
}

/// The topic of the row a sweep writes when it recovered events that were
/// never delivered.
pub const DELIVERY_GAP: &str = "webhookd.delivery_gap";

/// Records a sweep's finding (`payload`: provider, count, window) as an
/// event of webhookd's own, `delivery_gap:{until}`, with its
/// [`DELIVERY_GAP`] outbox row, in one transaction.
pub async fn announce_delivery_gap(
    pool: &PgPool,
    provider: &str,
    until: i64,
    payload: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    let event_id = format!("delivery_gap:{until}");
    let mut tx = db::begin(pool).await?;
    if !events::claim_own(&mut tx, provider, &event_id, DELIVERY_GAP, payload).await? {
        return Ok(());
    }
    let message = outbox::Message {
        topic: DELIVERY_GAP,
        provider,
        event_id: &event_id,
        payload,
        ordering_key: None,
    };
    let outbox_id = outbox::enqueue_one(&mut tx, message).await?;
    let detail = serde_json::json!({ "outbox_id": outbox_id });
    events::record_outcome(&mut tx, provider, &event_id, Outcome::Processed, &detail).await?;
    outbox::notify(&mut tx).await?;
    tx.commit().await
}

/// Records `event` as `rejected` for `poison`, without effects. When the
/// claim itself is what the database refuses (the payload), the event is
/// recorded without its payload, so that even then its retry is a
/// `duplicate` rather than the same failure.
async fn reject(pool: &PgPool, event: &Event, poison: &db::Poison) -> Result<Receipt, sqlx::Error> {
    tracing::warn!(
        provider = event.provider(),
        event_id = event.event_id(),
        sqlstate = %poison.sqlstate,
        constraint = poison.constraint.as_deref(),
        "the database refuses this event's data: recorded as rejected"
    );
    let mut tx = db::begin(pool).await?;
    let mut payload_stored = true;
    let claimed = match events::claim(&mut tx, Claim::of(event)).await {
        Err(error) if db::Poison::of(&error).is_some() => {
            tx.rollback().await?;
            tx = db::begin(pool).await?;
            payload_stored = false;
            events::claim(&mut tx, Claim::without_payload(event)).await?
        }
        claimed => claimed?,
    };
    if !claimed {
        tx.rollback().await?;
        return Ok(receipt(Outcome::Duplicate, event));
    }
    let mut detail = poison.detail();
    if !payload_stored {
        detail["payload_stored"] = false.into();
    }
    events::record_outcome(
        &mut tx,
        event.provider(),
        event.event_id(),
        Outcome::Rejected,
        &detail,
    )
    .await?;
    tx.commit().await?;
    Ok(receipt(Outcome::Rejected, event))
}

fn receipt(outcome: Outcome, event: &Event) -> Receipt {
    Receipt {
        outcome,
        event_id: event.event_id().to_owned(),
    }
}

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
    let (applied, recorded) = engine::reapply(pool, event, |applied| {
        stored_outcome != Outcome::Processed && applied.outcome != stored_outcome
    })
    .await?;
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
}

/// What [`replay_stored`] did: the outcome stored before, and the replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayedStored {
    pub stored_outcome: Outcome,
    pub replayed: Replayed,
}

/// Replays the stored event `provider`/`event_id` through [`replay`],
/// except for an imported event: what `webhookd events replay` and the
/// console's "replay" both run. `scope` is the provider's as configured
/// now: an event it does not take is rejected, as its delivery would be.
pub async fn replay_stored(
    pool: &PgPool,
    scope: &Scope,
    provider: &str,
    event_id: &str,
) -> Result<Result<ReplayedStored, ReplayRefused>, Error> {
    let Some(stored) = events::find(pool, provider, event_id).await? else {
        return Ok(Err(ReplayRefused::NotFound));
    };
    if stored.outcome == Outcome::Imported {
        return Ok(Err(ReplayRefused::Imported));
    }
    let event = match Event::from_stored_at(
        &stored.provider,
        &stored.event_id,
        &stored.event_type,
        stored.payload.into(),
        stored.provider_created_at.as_deref(),
    ) {
        Ok(event) => event.within(scope),
        Err(error) => return Ok(Err(ReplayRefused::Unreplayable(error.to_string()))),
    };
    let replayed = replay(pool, &event, stored.outcome).await?;
    Ok(Ok(ReplayedStored {
        stored_outcome: stored.outcome,
        replayed,
    }))
}
