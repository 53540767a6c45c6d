//! The periodic sweep: every interval, each provider whose API key is
//! configured is swept by one process at a time (a lease in `sweeps`), from
//! its checkpoint (less an overlap: events can appear in a list late) or
//! the window's start, whichever is later. A run stopped half way loses
//! nothing: the checkpoint advances only past applied slices, and the next
//! run starts there.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::api::Api;
use super::{Mode, Summary, store};
use crate::clock::Clock;
use crate::{ingest, telemetry};

/// How long a run holds the provider before another process may take it
/// over; renewed after every slice.
pub const LEASE: Duration = Duration::from_secs(300);

/// How far before its checkpoint a run starts again.
pub const OVERLAP: Duration = Duration::from_secs(600);

/// What the periodic sweeps of this process did, for `/metrics`.
#[derive(Debug, Default)]
pub struct SweepStats {
    pub runs_ok: AtomicU64,
    pub runs_failed: AtomicU64,
    pub recovered: AtomicU64,
    pub already_seen: AtomicU64,
    pub skipped: AtomicU64,
}

/// Sweeps Stripe every `interval` over at most `window`.
pub struct Sweeper {
    pub pool: PgPool,
    pub api: Api,
    pub interval: Duration,
    pub window: Duration,
    pub clock: Clock,
    pub stats: Arc<SweepStats>,
}

impl Sweeper {
    /// Runs until `shutdown`; a run in progress is dropped then (its
    /// checkpoint keeps what it applied) and its lease given back.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            tokio::select! {
                () = shutdown.cancelled() => {
                    if let Err(error) = store::release(&self.pool, crate::providers::stripe::PROVIDER).await {
                        tracing::warn!(%error, "could not give the sweep lease back");
                    }
                    return;
                }
                () = self.run_once() => {}
            }
        }
    }

    /// One run, if no other process is sweeping.
    pub async fn run_once(&mut self) {
        let provider = crate::providers::stripe::PROVIDER;
        let checkpoint = match store::lease(&self.pool, provider, LEASE).await {
            Ok(Some(checkpoint)) => checkpoint,
            Ok(None) => return, // another process is sweeping it
            Err(error) => {
                tracing::warn!(provider, %error, "cannot take the sweep lease");
                return;
            }
        };
        // The current second included: the next run starts well before it.
        let until = self.clock.now() + 1;
        let floor = until - secs(self.window);
        let since = checkpoint.map_or(floor, |swept| (swept - secs(OVERLAP)).max(floor));
        let swept = super::stripe::sweep(
            &mut self.api,
            &self.pool,
            Mode::Apply,
            (since, until),
            Some(LEASE),
        )
        .await;
        let (succeeded, result) = match &swept {
            Ok(summary) => {
                self.count(summary);
                (true, json!(summary))
            }
            Err(error) => {
                self.stats.runs_failed.fetch_add(1, Ordering::Relaxed);
                let error = format!("{error:#}");
                tracing::warn!(provider, error = %telemetry::bounded_to(&error, 2048), "the sweep failed");
                (
                    false,
                    json!({ "error": telemetry::bounded_to(&error, 2048) }),
                )
            }
        };
        if let Ok(summary) = &swept
            && summary.recovered > 0
        {
            announce_gap(&self.pool, summary).await;
        }
        if let Err(error) = store::finish(&self.pool, provider, succeeded, &result).await {
            tracing::warn!(provider, %error, "cannot record the sweep's result");
        }
    }

    fn count(&self, summary: &Summary) {
        let stats = &self.stats;
        stats.runs_ok.fetch_add(1, Ordering::Relaxed);
        stats
            .recovered
            .fetch_add(summary.recovered, Ordering::Relaxed);
        stats
            .already_seen
            .fetch_add(summary.already_seen, Ordering::Relaxed);
        stats.skipped.fetch_add(summary.skipped, Ordering::Relaxed);
    }
}

/// Says so when a sweep recovered events: one warning, and one outbox row
/// `webhookd.delivery_gap` for the user's systems to alert on.
async fn announce_gap(pool: &PgPool, summary: &Summary) {
    tracing::warn!(
        provider = summary.provider,
        recovered = summary.recovered,
        "{} events were never delivered: check the endpoint",
        summary.recovered
    );
    let payload = json!({
        "provider": summary.provider,
        "count": summary.recovered,
        "since": summary.since,
        "until": summary.until,
    });
    if let Err(error) =
        ingest::announce_delivery_gap(pool, summary.provider, summary.until, &payload).await
    {
        tracing::warn!(%error, "cannot write the delivery_gap outbox row");
    }
}

fn secs(duration: Duration) -> i64 {
    i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)
}
