//! The drainer: leases due rows, delivers them with no transaction open and
//! bounded concurrency, records each outcome against `(id, attempts)`. It
//! wakes on `LISTEN/NOTIFY` (the ingest transaction notifies at commit) and
//! also polls, so it works behind PgBouncer and after a lost notification.
//! Several drainers may share one database: `skip locked` and the lease keep
//! them apart, and a crashed drainer's lease simply expires.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::retry::{self, Next, RetryPolicy};
use super::store::{self, Attempt, Leased};
use crate::clock::Clock;
use crate::sinks::{Delivery, Sink};

#[derive(Debug, Clone, Copy)]
pub struct DrainerSettings {
    /// Rows leased per statement.
    pub batch: i64,
    /// Deliveries in flight at once.
    pub concurrency: usize,
    /// How long a leased row stays invisible to other drainers; keep it above
    /// the sink's timeout.
    pub lease: Duration,
    /// Fallback wake-up when no notification arrives.
    pub poll: Duration,
    pub retry: RetryPolicy,
}

/// Deliveries by result since start: hooks for metrics.
#[derive(Debug, Default)]
pub struct DrainerStats {
    pub delivered: AtomicU64,
    pub retried: AtomicU64,
    pub dead: AtomicU64,
    /// Outcomes not recorded because the lease had been taken over.
    pub lost_leases: AtomicU64,
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    pub leased: usize,
    pub delivered: usize,
    pub retried: usize,
    pub dead: usize,
    /// Leased but not started (stopping, or too little lease left): given back.
    pub released: usize,
    /// Delivered or not, but the outcome could not be written; the lease
    /// expires and the row is tried again.
    pub unrecorded: usize,
}

#[derive(Debug, Clone)]
pub struct Drainer {
    pool: PgPool,
    sink: Arc<Sink>,
    settings: DrainerSettings,
    clock: Clock,
    stats: Arc<DrainerStats>,
    /// Once cancelled, no new delivery starts.
    stopping: CancellationToken,
}

impl Drainer {
    pub fn new(pool: PgPool, sink: Sink, settings: DrainerSettings, clock: Clock) -> Self {
        Drainer {
            pool,
            sink: Arc::new(sink),
            settings,
            clock,
            stats: Arc::default(),
            stopping: CancellationToken::new(),
        }
    }

    pub fn stats(&self) -> &Arc<DrainerStats> {
        &self.stats
    }

    /// Leases one batch of due rows, delivers them, records the outcomes.
    pub async fn drain_once(&self) -> Result<Drained, sqlx::Error> {
        let leased_at = self.clock.now();
        let leased = store::lease(
            &self.pool,
            self.settings.batch,
            self.settings.lease.as_secs_f64(),
            self.clock.pinned(),
        )
        .await?;
        let mut drained = Drained {
            leased: leased.len(),
            ..Drained::default()
        };
        let mut outcomes = futures_util::stream::iter(leased)
            .map(|message| self.deliver(message, leased_at))
            .buffer_unordered(self.settings.concurrency.max(1));
        while let Some(outcome) = outcomes.next().await {
            match outcome {
                Ok(Some(Attempt::Delivered)) => drained.delivered += 1,
                Ok(Some(Attempt::Retry { .. })) => drained.retried += 1,
                Ok(Some(Attempt::Dead { .. })) => drained.dead += 1,
                Ok(None) => drained.released += 1,
                // One row's bookkeeping failing must not abandon the others.
                Err(error) => {
                    tracing::warn!(error = %error, "could not record an outbox attempt");
                    drained.unrecorded += 1;
                }
            }
        }
        Ok(drained)
    }

    /// Whether a delivery started now could outlive the lease taken at
    /// `leased_at` (Unix seconds), letting another drainer take the row over
    /// while it is still being delivered.
    fn lease_too_short(&self, leased_at: i64) -> bool {
        let elapsed =
            Duration::from_secs(self.clock.now().saturating_sub(leased_at).unsigned_abs());
        elapsed + self.sink.timeout() + LEASE_MARGIN >= self.settings.lease
    }

    /// Delivers one leased row and records the outcome; `None` when the row
    /// was given back unstarted.
    #[tracing::instrument(name = "deliver", skip_all, fields(outbox_id = message.id, attempt = message.attempts, topic = %message.topic))]
    async fn deliver(
        &self,
        message: Leased,
        leased_at: i64,
    ) -> Result<Option<Attempt>, sqlx::Error> {
        if self.stopping.is_cancelled() || self.lease_too_short(leased_at) {
            store::release(&self.pool, message.id, message.attempts).await?;
            return Ok(None);
        }
        let attempt = match self.sink.deliver(&message).await {
            Delivery::Delivered => Attempt::Delivered,
            Delivery::Permanent { error } => Attempt::Dead { error },
            Delivery::Retry { error, retry_after } => {
                let jitter = retry::jitter(message.id, message.attempts);
                // The budget restarts when a dead row is re-queued.
                let attempt = message.attempts - message.requeued_attempts;
                match self.settings.retry.next(attempt, retry_after, jitter) {
                    Next::RetryAfter(wait) => Attempt::Retry {
                        after_secs: wait.as_secs_f64(),
                        error,
                    },
                    Next::GiveUp => Attempt::Dead {
                        error: format!("{error} (after {attempt} attempts)"),
                    },
                }
            }
        };
        let recorded = store::record(
            &self.pool,
            message.id,
            message.attempts,
            &attempt,
            self.clock.pinned(),
        )
        .await?;
        let counter = match (&attempt, recorded) {
            (_, false) => &self.stats.lost_leases,
            (Attempt::Delivered, true) => &self.stats.delivered,
            (Attempt::Retry { .. }, true) => &self.stats.retried,
            (Attempt::Dead { .. }, true) => &self.stats.dead,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        match &attempt {
            _ if !recorded => {
                tracing::warn!("lease expired during delivery; the row was taken over")
            }
            Attempt::Delivered => tracing::debug!(sink = self.sink.name(), "delivered"),
            Attempt::Retry { after_secs, error } => {
                tracing::warn!(sink = self.sink.name(), %error, retry_in_secs = after_secs, "delivery failed")
            }
            Attempt::Dead { error } => {
                tracing::error!(sink = self.sink.name(), %error, "delivery dead-lettered")
            }
        }
        Ok(Some(attempt))
    }

    /// Drains until `shutdown` is cancelled. Then it stops leasing and starting
    /// deliveries (unstarted rows are given back), lets the deliveries in
    /// flight finish for up to `grace` (soft stop), and drops the rest (hard
    /// stop): their leases expire and another pass redelivers them with the
    /// same `webhook-id`.
    pub async fn run(mut self, shutdown: CancellationToken, grace: Duration) {
        self.stopping = shutdown.clone();
        let wake = Arc::new(Notify::new());
        let listener = tokio::spawn(listen(self.pool.clone(), wake.clone(), shutdown.clone()));
        let mut failures: u32 = 0;
        loop {
            let pass = self.drain_once();
            tokio::pin!(pass);
            let result = tokio::select! {
                result = &mut pass => result,
                () = shutdown.cancelled() => {
                    if tokio::time::timeout(grace, &mut pass).await.is_err() {
                        tracing::warn!(?grace, "deliveries outlived the grace period; their leases will expire");
                    }
                    break;
                }
            };
            let pause = match result {
                // A full batch, all of it attempted: more may be due right away.
                Ok(drained)
                    if drained.released == 0
                        && i64::try_from(drained.leased).unwrap_or(i64::MAX)
                            >= self.settings.batch =>
                {
                    failures = 0;
                    continue;
                }
                Ok(drained) if drained.released > 0 && !shutdown.is_cancelled() => {
                    tracing::warn!(
                        released = drained.released,
                        "rows given back unstarted: the lease is too short for the batch; raise \
                         WEBHOOKD_OUTBOX_LEASE or WEBHOOKD_OUTBOX_CONCURRENCY, or lower WEBHOOKD_OUTBOX_BATCH"
                    );
                    failures = 0;
                    self.settings.poll
                }
                Ok(_) => {
                    failures = 0;
                    self.settings.poll
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(error = %error, "outbox pass failed; backing off");
                    backoff(failures).min(self.settings.poll.max(Duration::from_secs(1)) * 10)
                }
            };
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep(pause) => {}
                () = shutdown.cancelled() => break,
            }
        }
        listener.abort();
        tracing::info!("outbox drainer stopped");
    }
}

/// Wakes the drainer on every notification of the outbox channel, on a
/// connection of its own, reconnecting with backoff.
async fn listen(pool: PgPool, wake: Arc<Notify>, shutdown: CancellationToken) {
    let mut failures: u32 = 0;
    while !shutdown.is_cancelled() {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(error) => {
                failures = failures.saturating_add(1);
                tracing::warn!(error = %error, "cannot LISTEN for outbox rows; polling meanwhile");
                tokio::time::sleep(backoff(failures)).await;
                continue;
            }
        };
        if let Err(error) = listener.listen(super::CHANNEL).await {
            failures = failures.saturating_add(1);
            tracing::warn!(error = %error, "cannot LISTEN for outbox rows; polling meanwhile");
            tokio::time::sleep(backoff(failures)).await;
            continue;
        }
        failures = 0;
        // Rows may have been written while we were not listening.
        wake.notify_one();
        loop {
            match listener.try_recv().await {
                Ok(Some(_)) => wake.notify_one(),
                // The connection dropped: reconnect (and catch up).
                Ok(None) => {
                    wake.notify_one();
                }
                Err(error) => {
                    tracing::warn!(error = %error, "outbox LISTEN connection failed");
                    break;
                }
            }
        }
    }
}

/// Time kept in hand between the end of a delivery and the end of its lease,
/// for recording the outcome.
pub const LEASE_MARGIN: Duration = Duration::from_secs(2);

/// 0.5 s, 1 s, 2 s, ... up to 30 s.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(500u64.saturating_mul(1 << failures.min(6).saturating_sub(1)))
        .min(Duration::from_secs(30))
}
