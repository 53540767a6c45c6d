//! The periodic sweep: every interval, each provider whose API key is
//! configured is swept by one process at a time (a lease in `sweeps`), from
//! its checkpoint (less an overlap: events can appear in a list late) or
//! the window's start, whichever is later. A run stopped half way loses
//! nothing: the checkpoint advances only past applied slices, and the next
//! run starts there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::listing;
use super::paypal::Paypal;
use super::stripe::Stripe;
use super::{Checkpoint, Mode, Summary, store};
use crate::api::Api;
use crate::clock::Clock;
use crate::{ingest, telemetry};

/// How long a run holds the provider before another process may take it
/// over; renewed after every slice (a run that finds it taken stops).
pub const LEASE: Duration = Duration::from_secs(900);

/// How far before its checkpoint a run starts again.
pub const OVERLAP: Duration = Duration::from_secs(600);

/// The last minutes a periodic run leaves alone: their webhooks may still be
/// on the way, and a gap alert for them would be noise.
pub const IN_FLIGHT: Duration = Duration::from_secs(300);

/// What the periodic sweeps of this process did to one provider.
#[derive(Debug, Default)]
pub struct Counters {
    pub runs_ok: AtomicU64,
    pub runs_failed: AtomicU64,
    pub recovered: AtomicU64,
    pub ignored: AtomicU64,
    pub deferred: AtomicU64,
    pub already_seen: AtomicU64,
    pub skipped: AtomicU64,
}

/// What the periodic sweeps of this process did, by target
/// ([`Target::name`]), for `/metrics`.
#[derive(Debug, Default)]
pub struct SweepStats {
    pub providers: Vec<(String, Counters)>,
}

/// One provider (or one connected account of Stripe's) to sweep: its API,
/// how far back to reach, and its source (the events it takes, the others
/// skipped; what it does with them).
pub struct Target {
    pub provider: &'static str,
    pub api: Api,
    pub window: Duration,
    pub source: super::Swept,
}

impl Target {
    /// Its row in `sweeps` (its lease and checkpoint), and its name in
    /// metrics: the provider's, or `stripe:acct_…` for a connected
    /// account's events, each swept on its own.
    pub fn name(&self) -> String {
        match &self.source.account {
            None => self.provider.to_owned(),
            Some(account) => format!("{}:{account}", self.provider),
        }
    }
}

/// Sweeps each target every `interval`.
pub struct Sweeper {
    pub pool: PgPool,
    pub targets: Vec<Target>,
    pub interval: Duration,
    pub clock: Clock,
    pub stats: Arc<SweepStats>,
    /// The leases this process holds now, by target, to give back on stop.
    held: Arc<Mutex<Vec<Option<String>>>>,
}

impl Sweeper {
    pub fn new(pool: PgPool, targets: Vec<Target>, interval: Duration, clock: Clock) -> Self {
        let stats = SweepStats {
            providers: targets
                .iter()
                .map(|t| (t.name(), Counters::default()))
                .collect(),
        };
        Sweeper {
            pool,
            held: Arc::new(Mutex::new(vec![None; targets.len()])),
            targets,
            interval,
            clock,
            stats: Arc::new(stats),
        }
    }

    /// Runs until `shutdown`; a run in progress is dropped then (its
    /// checkpoint keeps what it applied) and the leases this process holds
    /// are given back (never another process's).
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let held = self.held.clone();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.run_once() => {}
            }
        }
        let leases: Vec<(usize, String)> = {
            let held = held
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            held.iter()
                .enumerate()
                .filter_map(|(i, h)| Some((i, h.clone()?)))
                .collect()
        };
        for (index, holder) in leases {
            let target = self.targets[index].name();
            if let Err(error) = store::release(&self.pool, &target, &holder).await {
                tracing::warn!(%target, %error, "could not give the sweep lease back");
            }
        }
    }

    /// One run of every target that no other process is sweeping.
    pub async fn run_once(&mut self) {
        for index in 0..self.targets.len() {
            self.run_target(index).await;
        }
    }

    fn hold(&self, index: usize, holder: Option<String>) {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        held[index] = holder;
    }

    async fn run_target(&mut self, index: usize) {
        let target = self.targets[index].name();
        let Some(lease) = self.take_lease(&target).await else {
            return;
        };
        self.hold(index, Some(lease.holder.clone()));
        let swept = self.sweep(index, &target, &lease).await;
        let (succeeded, result) = count(&self.stats.providers[index].1, &target, &swept);
        if let Ok(summary) = &swept
            && summary.recovered > 0
        {
            announce_gap(&self.pool, summary).await;
        }
        if let Err(error) =
            store::finish(&self.pool, &target, &lease.holder, succeeded, &result).await
        {
            tracing::warn!(%target, %error, "cannot record the sweep's result");
        }
        self.hold(index, None);
    }

    /// The target's sweep lease; `None` when another process is sweeping
    /// it, or the lease cannot be taken (said in a warning).
    async fn take_lease(&self, target: &str) -> Option<store::Lease> {
        match store::lease(&self.pool, target, LEASE).await {
            Ok(lease) => lease,
            Err(error) => {
                tracing::warn!(%target, %error, "cannot take the sweep lease");
                None
            }
        }
    }

    /// Sweeps target `index` (named `name`) over its [`window`],
    /// checkpointing under `lease`.
    async fn sweep(
        &mut self,
        index: usize,
        name: &str,
        lease: &store::Lease,
    ) -> anyhow::Result<Summary> {
        let checkpoint = Checkpoint {
            row: name.to_owned(),
            holder: lease.holder.clone(),
            lease: LEASE,
        };
        let now = self.clock.now();
        let target = &mut self.targets[index];
        let provider = target.provider;
        let window_start = now - secs(target.window);
        // Down for longer than the window (and not because of a cut-over).
        if lease.swept_until.is_some_and(|swept| swept < window_start)
            && lease.not_before.is_none_or(|cut| cut < window_start)
        {
            tracing::warn!(
                provider,
                "the last sweep ended before the window: events in between were never swept"
            );
        }
        let window = window(provider, lease, now, window_start);
        let (api, pool, source) = (&mut target.api, &self.pool, &target.source);
        let checkpoint = Some(&checkpoint);
        match provider {
            crate::providers::razorpay::PROVIDER => {
                super::razorpay::sweep(api, pool, Mode::Apply, source, window, checkpoint).await
            }
            crate::providers::paypal::PROVIDER => {
                listing::sweep::<Paypal>(api, pool, Mode::Apply, source, window, checkpoint).await
            }
            _ => listing::sweep::<Stripe>(api, pool, Mode::Apply, source, window, checkpoint).await,
        }
    }
}

/// What a periodic run of `provider` reads at `now`, the run's window
/// starting at `window_start` (or at the cut-over, if later).
fn window(provider: &str, lease: &store::Lease, now: i64, window_start: i64) -> (i64, i64) {
    let floor = window_start.max(lease.not_before.unwrap_or(0));
    if provider == crate::providers::razorpay::PROVIDER {
        // A payment's status changes after it was created (a late
        // capture, a refund still pending): every run reads the whole
        // window again; the natural keys keep that exactly once.
        (floor, now - super::razorpay::SETTLE_SECS)
    } else {
        // Events (Stripe's, PayPal's) are immutable: from the checkpoint
        // (less the overlap), and not the last minutes, whose webhooks may
        // still be on the way.
        let since = lease
            .swept_until
            .map_or(floor, |swept| (swept - secs(OVERLAP)).max(floor));
        (since, now - secs(IN_FLIGHT))
    }
}

/// Adds a run's outcome to `counters`; returns whether it succeeded and
/// the result `sweeps` records (a failure is also said in a warning).
fn count(
    counters: &Counters,
    target: &str,
    swept: &anyhow::Result<Summary>,
) -> (bool, serde_json::Value) {
    match swept {
        Ok(summary) => {
            counters.runs_ok.fetch_add(1, Ordering::Relaxed);
            for (counter, count) in [
                (&counters.recovered, summary.recovered),
                (&counters.ignored, summary.ignored),
                (&counters.deferred, summary.deferred),
                (&counters.already_seen, summary.already_seen),
                (&counters.skipped, summary.skipped),
            ] {
                counter.fetch_add(count, Ordering::Relaxed);
            }
            (true, json!(summary))
        }
        Err(error) => {
            counters.runs_failed.fetch_add(1, Ordering::Relaxed);
            let error = format!("{error:#}");
            let error = telemetry::bounded_to(&error, telemetry::MAX_LOGGED_ERROR_BYTES);
            tracing::warn!(%target, %error, "the sweep failed");
            (false, json!({ "error": error }))
        }
    }
}

/// Says so when a sweep recovered events: one warning, and one outbox row
/// `webhookd.delivery_gap` for the user's systems to alert on.
async fn announce_gap(pool: &PgPool, summary: &Summary) {
    tracing::warn!(
        provider = summary.provider,
        account = summary.account.as_deref(),
        recovered = summary.recovered,
        "{} events were never delivered: check the endpoint",
        summary.recovered
    );
    let payload = json!({
        "provider": summary.provider,
        "account": summary.account,
        "count": summary.recovered,
        "since": summary.since,
        "until": summary.until,
    });
    if let Err(error) = ingest::announce_delivery_gap(
        pool,
        summary.provider,
        summary.account.as_deref(),
        summary.until,
        &payload,
    )
    .await
    {
        tracing::warn!(%error, "cannot write the delivery_gap outbox row");
    }
}

fn secs(duration: Duration) -> i64 {
    i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)
}
