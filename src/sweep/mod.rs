//! Sweeps: read what the provider's API holds and apply what was never
//! delivered, through the same ingest path as a webhook (claim under the
//! event's own id, effects, outbox, one transaction). An event delivered
//! before is a `duplicate`; a webhook that arrives after the sweep is one.
//!
//! Stripe and PayPal list their events ([`listing`]); Razorpay lists its
//! payments and refunds ([`razorpay`]).
//!
//! `webhookd import` reads the same listing and records each event
//! `imported`, without effects, for a team whose earlier handler applied
//! them already.

pub mod audit;
pub mod listing;
pub mod paypal;
pub mod razorpay;
pub mod schedule;
pub mod store;
pub mod stripe;

// The read side, for the console and metrics.
pub use schedule::SweepStats;
pub use store::{Run, last_successes, runs};

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

use crate::events::Outcome;
use crate::providers::{Event, Receiver, Scope};
use crate::{events, ingest};

/// The source whose events a sweep recovers (its provider's built-in
/// one): the events it takes, and what it does with them (only record
/// them, its owner rule), as its deliveries would be judged.
#[derive(Debug, Clone, Default)]
pub struct Swept {
    pub scope: Scope,
    /// `None`: the scheme's defaults.
    pub receiver: Option<Arc<Receiver>>,
    /// The connected account whose events are listed (Stripe Connect, the
    /// `Stripe-Account` header); `None`: the platform's own.
    pub account: Option<String>,
}

impl Swept {
    /// `event`, as this source takes it.
    pub(crate) fn judge(&self, event: Event) -> Event {
        let event = match &self.account {
            Some(account) => event.listed_for(account),
            None => event,
        };
        event.received_by(self.receiver.clone()).within(&self.scope)
    }
}

/// What a sweep does with each listed event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Apply what was never recorded (`recovered`).
    Apply,
    /// Count what would be recovered; write nothing.
    DryRun,
    /// Record what was never recorded as `imported`, without effects.
    Import,
}

/// The one JSON line a sweep prints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub provider: &'static str,
    /// The connected account swept (Stripe Connect); absent: the
    /// platform's own events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The window swept, in Unix seconds: `[since, until)`.
    pub since: i64,
    pub until: i64,
    /// Events the provider listed in the window.
    pub listed: u64,
    /// Never recorded before, and applied now: a credit, a debit, a
    /// subscription or payment row, an outbox row (in a dry run: never
    /// recorded before, so that would be applied or recorded now). Only
    /// these mean that deliveries failed. For an import: recorded
    /// `imported` now.
    pub recovered: u64,
    /// Never recorded before, and recorded now without an effect: `ignored`
    /// (its effect belongs to another event, or its type has none) or
    /// `superseded` (older than the stored state).
    pub ignored: u64,
    /// Never recorded before, and recorded now `deferred`: it applies when
    /// what it waits for arrives.
    pub deferred: u64,
    /// Recorded before (delivered, swept or imported), or its effect is in
    /// the ledger already: nothing to do.
    pub already_seen: u64,
    /// Listed but unusable (no usable id or type), not this source's (the
    /// other mode, a connected account it does not take), or recorded now
    /// `rejected`: left alone.
    pub skipped: u64,
    /// Pages of the provider's list read, and requests sent (retries included).
    pub pages: u64,
    pub requests: u64,
    pub dry_run: bool,
}

/// The periodic sweep's lease, renewed as each slice is applied.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// Its row in `sweeps`: the provider's, or a connected account's
    /// ([`schedule::Target::name`]).
    pub row: String,
    pub holder: String,
    pub lease: Duration,
}

impl Checkpoint {
    /// Everything before `to` is applied: advance, or stop when another
    /// process has taken the lease over.
    pub(crate) async fn advance(&self, pool: &PgPool, to: i64) -> anyhow::Result<()> {
        let row = &self.row;
        anyhow::ensure!(
            store::advance(pool, row, &self.holder, to, self.lease).await?,
            "lost the {row} sweep lease to another process; stopping"
        );
        Ok(())
    }
}

/// The earliest a sweep of `provider` may read: `since`, or the cut-over of
/// an import when later (an earlier handler applied what came before).
pub async fn floor(pool: &PgPool, provider: &str, since: i64) -> anyhow::Result<i64> {
    Ok(store::not_before(pool, provider)
        .await?
        .map_or(since, |at| at.max(since)))
}

impl Summary {
    pub(crate) fn new(
        provider: &'static str,
        account: Option<&str>,
        mode: Mode,
        (since, until): (i64, i64),
    ) -> Self {
        Summary {
            provider,
            account: account.map(str::to_owned),
            since,
            until,
            dry_run: mode == Mode::DryRun,
            ..Summary::default()
        }
    }
}

/// The slices still to read of `[since, until)`, oldest last (a stack: the
/// next is popped). An empty window (a cut-over later than its end) reads
/// nothing.
pub(crate) fn slices((since, until): (i64, i64)) -> Vec<(i64, i64)> {
    if since < until {
        vec![(since, until)]
    } else {
        Vec::new()
    }
}

/// Tries for one event whose transaction failed transiently (the database
/// restarting, a lock timeout) before the sweep gives up.
const INGEST_TRIES: u32 = 5;

/// Counts, for a dry run, the events of `ids` never recorded: they would
/// be recovered.
pub(crate) async fn count_unseen(
    pool: &PgPool,
    provider: &str,
    ids: &[String],
    summary: &mut Summary,
) -> anyhow::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let seen = events::recorded(pool, provider, ids).await?;
    summary.already_seen += seen.len() as u64;
    summary.recovered += (ids.len() - seen.len()) as u64;
    Ok(())
}

/// Applies or imports one listed event (never in a dry run: see
/// [`count_unseen`]), and counts what it came to.
pub(crate) async fn apply(
    pool: &PgPool,
    mode: Mode,
    event: &Event,
    summary: &mut Summary,
) -> anyhow::Result<()> {
    let outcome = match mode {
        Mode::Apply => apply_one(pool, event).await?,
        Mode::Import if import(pool, event).await? => Outcome::Processed,
        Mode::Import => Outcome::Duplicate,
        // Counted all at once, writing nothing.
        Mode::DryRun => {
            return count_unseen(
                pool,
                event.provider(),
                &[event.event_id().to_owned()],
                summary,
            )
            .await;
        }
    };
    summary.count(outcome);
    Ok(())
}

impl Summary {
    /// Counts an event recorded with `outcome` (`duplicate`: recorded
    /// before).
    pub(crate) fn count(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Processed => self.recovered += 1,
            Outcome::Ignored | Outcome::Superseded => self.ignored += 1,
            Outcome::Deferred => self.deferred += 1,
            // Recorded before: an ingest answers `duplicate`, never the
            // outcomes only stored (`pending`, `imported`).
            Outcome::Duplicate | Outcome::Pending | Outcome::Imported => self.already_seen += 1,
            // Recorded now, but it can never apply (reason in its detail).
            Outcome::Rejected => self.skipped += 1,
        }
    }
}

/// One event through the ingest path, retried while its failure is
/// transient. Its outcome (`duplicate` when it was recorded before).
async fn apply_one(pool: &PgPool, event: &Event) -> anyhow::Result<Outcome> {
    let mut tries = 0;
    loop {
        tries += 1;
        match ingest::ingest(pool, event).await {
            Ok(receipt) => return Ok(receipt.outcome),
            Err(error) if error.is_transient() && tries < INGEST_TRIES => {
                tracing::warn!(
                    event_id = event.event_id(),
                    error = %error,
                    "applying a swept event failed; retrying"
                );
                tokio::time::sleep(Duration::from_secs(u64::from(tries))).await;
            }
            Err(error) => {
                return Err(anyhow::Error::new(error)
                    .context(format!("cannot apply swept event {}", event.event_id())));
            }
        }
    }
}

async fn import(pool: &PgPool, event: &Event) -> anyhow::Result<bool> {
    let mut tx = crate::db::begin(pool).await?;
    let imported = events::import(&mut tx, event).await?;
    tx.commit().await?;
    Ok(imported)
}
