//! THE transaction: claim the event ids, apply their effects, write their
//! outbox rows, record their outcomes, commit. Either all of it commits or
//! none of it does, so a failed delivery leaves nothing behind and its
//! retry starts clean.
//!
//! In layers that point one way: [`engine`] is the transaction (claim,
//! locks, apply, [`release`] of deferred events, record, commit);
//! [`one`] is one event (data the database refuses recorded `rejected`);
//! [`batch`] is the batcher ([`Ingestor`]: queue, group commit, and
//! after a failed batch its fallback, one by one). [`replay`] sits beside them. Each
//! event is decoded once ([`effects::decode`]) before any of them.

pub mod batch;
mod engine;
mod error;
mod gap;
mod locks;
mod one;
pub mod owner_wait;
mod receipt;
mod release;
mod replay;
mod schedule;

use sqlx::PgPool;

use crate::effects;
use crate::providers::Event;

pub use batch::{BatchStats, Ingestor};
pub use engine::Wake;
pub use error::Error;
pub use gap::{DELIVERY_GAP, announce_delivery_gap};
pub use receipt::{Answer, Receipt};
pub use replay::{ReplayRefused, Replayed, ReplayedStored, replay, replay_stored};

/// Applies one event in its own transaction (a batch of one), waking a
/// drainer in another process with `pg_notify`. Data the database refuses
/// is recorded `rejected` ([`one::apply`]).
pub async fn ingest(pool: &PgPool, event: &Event) -> Result<Receipt, Error> {
    one::apply(pool, &effects::decode(event.clone()), &Wake::Notify).await
}

/// Applies `events` in order as one batch (one transaction when it
/// succeeds, else one by one in order), answering each: the same outcomes
/// as [`ingest`] of each in turn.
pub async fn ingest_batch(pool: &PgPool, events: &[Event]) -> Vec<Answer> {
    batch::apply(pool, events, Wake::Notify).await
}
