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

/// What the periodic sweeps of this process did to one provider.
#[derive(Debug, Default)]
pub struct Counters {
    pub runs_ok: AtomicU64,
    pub runs_failed: AtomicU64,
    pub recovered: AtomicU64,
    pub already_seen: AtomicU64,
    pub skipped: AtomicU64,
}

/// What the periodic sweeps of this process did, by provider, for `/metrics`.
#[derive(Debug, Default)]
pub struct SweepStats {
    pub providers: Vec<(&'static str, Counters)>,
}

/// One provider to sweep: its API and how far back to reach.
pub struct Target {
    pub provider: &'static str,
    pub api: Api,
    pub window: Duration,
}

/// Sweeps each target every `interval`.
pub struct Sweeper {
    pub pool: PgPool,
    pub targets: Vec<Target>,
    pub interval: Duration,
    pub clock: Clock,
    pub stats: Arc<SweepStats>,
}

impl Sweeper {
    pub fn new(pool: PgPool, targets: Vec<Target>, interval: Duration, clock: Clock) -> Self {
        let stats = SweepStats {
            providers: targets
                .iter()
                .map(|t| (t.provider, Counters::default()))
                .collect(),
        };
        Sweeper {
            pool,
            targets,
            interval,
            clock,
            stats: Arc::new(stats),
        }
    }

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
                    for target in &self.targets {
                        if let Err(error) = store::release(&self.pool, target.provider).await {
                            tracing::warn!(%error, "could not give the sweep lease back");
                        }
                    }
                    return;
                }
                () = self.run_once() => {}
            }
        }
    }

    /// One run of every target that no other process is sweeping.
    pub async fn run_once(&mut self) {
        for index in 0..self.targets.len() {
            self.run_target(index).await;
        }
    }

    async fn run_target(&mut self, index: usize) {
        let target = &mut self.targets[index];
        let provider = target.provider;
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
        let floor = until - secs(target.window);
        let since = checkpoint.map_or(floor, |swept| (swept - secs(OVERLAP)).max(floor));
        let window = (since, until);
        let swept = if provider == crate::providers::razorpay::PROVIDER {
            let window = (since, until - 1 - super::razorpay::SETTLE_SECS);
            super::razorpay::sweep(
                &mut target.api,
                &self.pool,
                Mode::Apply,
                window,
                Some(LEASE),
            )
            .await
        } else {
            super::stripe::sweep(
                &mut target.api,
                &self.pool,
                Mode::Apply,
                window,
                Some(LEASE),
            )
            .await
        };
        let counters = &self.stats.providers[index].1;
        let (succeeded, result) = match &swept {
            Ok(summary) => {
                counters.runs_ok.fetch_add(1, Ordering::Relaxed);
                counters
                    .recovered
                    .fetch_add(summary.recovered, Ordering::Relaxed);
                counters
                    .already_seen
                    .fetch_add(summary.already_seen, Ordering::Relaxed);
                counters
                    .skipped
                    .fetch_add(summary.skipped, Ordering::Relaxed);
                (true, json!(summary))
            }
            Err(error) => {
                counters.runs_failed.fetch_add(1, Ordering::Relaxed);
                let error = format!("{error:#}");
                let error = telemetry::bounded_to(&error, telemetry::MAX_LOGGED_ERROR_BYTES);
                tracing::warn!(provider, %error, "the sweep failed");
                (false, json!({ "error": error }))
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
