//! What a drainer is: its settings and counters, the handles every part of
//! a pass shares (pool, sink, clock, the stop and wake signals), and the
//! delivery of one leased row, whose outcome the pipeline records. How it
//! runs over time is [`super::worker`]; one pass's flow of rows,
//! [`super::pipeline`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::handoff::Waker;
use super::retry::{self, Next, RetryPolicy};
use super::store::{Attempt, Leased, Settled};
use crate::clock::Clock;
use crate::sinks::{Delivery, Sink};

#[derive(Debug, Clone, Copy)]
pub struct DrainerSettings {
    /// Most rows leased per statement, and held (leased, not yet settled)
    /// at once.
    pub batch: i64,
    /// Most payload bytes (as JSON text) held at once; a row larger than
    /// this is leased alone. Bounds the drainer's memory whatever the rows.
    pub batch_bytes: u64,
    /// Deliveries in flight at once.
    pub concurrency: usize,
    /// Rows of one ordering key are delivered in the order they were
    /// written: a row is not leased while an older row with its key is
    /// neither delivered nor dead (`WEBHOOKD_OUTBOX_ORDER=key`).
    pub ordered: bool,
    /// How long a leased row stays invisible to other drainers; keep it above
    /// the sink's timeout.
    pub lease: Duration,
    /// Fallback wake-up when no notification arrives.
    pub poll: Duration,
    pub retry: RetryPolicy,
}

/// The default of `WEBHOOKD_OUTBOX_BATCH_BYTES`.
pub const DEFAULT_BATCH_BYTES: u64 = 8 * 1024 * 1024;

/// Deliveries by result since start, and the drainer's statements and
/// memory: hooks for metrics.
#[derive(Debug, Default)]
pub struct DrainerStats {
    pub delivered: AtomicU64,
    pub retried: AtomicU64,
    /// Dead-lettered, by the sink's answer or because the attempts ran out
    /// (abandoned ones included).
    pub dead: AtomicU64,
    /// Rows dead-lettered at lease: their last attempt never reported back.
    pub abandoned: AtomicU64,
    /// Outcomes not recorded because the lease had been taken over.
    pub lost_leases: AtomicU64,
    /// Lease statements run.
    pub lease_statements: AtomicU64,
    /// Statements that recorded outcomes (each of many rows).
    pub record_statements: AtomicU64,
    /// Payload bytes held now: leased and not yet delivered.
    pub held_bytes: AtomicU64,
    /// The most payload bytes ever held at once.
    pub peak_held_bytes: AtomicU64,
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Rows the lease took, abandoned ones included.
    pub leased: usize,
    pub delivered: usize,
    pub retried: usize,
    /// Dead-lettered, abandoned ones included.
    pub dead: usize,
    /// Leased but not started (stopping, or too little lease left): given back.
    pub released: usize,
    /// Delivered or not, but the outcome could not be written; the lease
    /// expires and the row is tried again.
    pub unrecorded: usize,
}

#[derive(Debug, Clone)]
pub struct Drainer {
    pub(super) pool: PgPool,
    /// The name of the sink it drains: the `sink` of its rows.
    pub(super) route: Arc<str>,
    sink: Arc<Sink>,
    pub(super) settings: DrainerSettings,
    pub(super) clock: Clock,
    pub(super) stats: Arc<DrainerStats>,
    /// Once cancelled, no new delivery starts.
    pub(super) stopping: CancellationToken,
    pub(super) waker: Waker,
    /// Where it LISTENs for new rows: a session connection's pool (the
    /// drainer's own pool, unless told otherwise), or nowhere (it polls).
    pub(super) listen: Option<PgPool>,
}

impl Drainer {
    pub fn new(pool: PgPool, sink: Sink, settings: DrainerSettings, clock: Clock) -> Self {
        Drainer {
            pool: pool.clone(),
            route: Arc::from(super::DEFAULT_SINK),
            sink: Arc::new(sink),
            settings,
            clock,
            stats: Arc::default(),
            stopping: CancellationToken::new(),
            waker: Waker::default(),
            listen: Some(pool),
        }
    }

    /// Drains the rows of the sink `name` (`default` unless told).
    pub fn for_sink(mut self, name: &str) -> Self {
        self.route = Arc::from(name);
        self
    }

    /// The name of the sink it drains.
    pub fn route(&self) -> &str {
        &self.route
    }

    /// LISTENs on `listen` rather than on the drainer's own pool, or, with
    /// `None`, not at all (behind a transaction pooler, where LISTEN cannot
    /// work): it then wakes on its [`Waker`] and polls.
    pub fn listening_on(mut self, listen: Option<PgPool>) -> Self {
        self.listen = listen;
        self
    }

    pub fn stats(&self) -> &Arc<DrainerStats> {
        &self.stats
    }

    /// The handle that wakes this drainer (see [`Waker`]).
    pub fn waker(&self) -> Waker {
        self.waker.clone()
    }

    /// Whether a delivery started now could outlive the lease taken at
    /// `leased_at` (Unix seconds), letting another drainer take the row over
    /// while it is still being delivered.
    pub(super) fn lease_too_short(&self, leased_at: i64) -> bool {
        let elapsed =
            Duration::from_secs(self.clock.now().saturating_sub(leased_at).unsigned_abs());
        elapsed + self.sink.timeout() + LEASE_MARGIN >= self.settings.lease
    }

    /// Delivers one leased row and decides what becomes of it.
    pub(super) async fn attempt(&self, leased: Leased) -> Settled {
        let Leased {
            message,
            requeued_attempts,
        } = leased;
        let (id, attempts) = (message.id, message.attempts);
        let attempt = match self.sink.deliver(message).await {
            Delivery::Delivered => Attempt::Delivered,
            Delivery::Permanent { error } => Attempt::Dead { error },
            Delivery::Retry { error, retry_after } => {
                let jitter = retry::jitter(id, attempts);
                // The budget restarts when a dead row is re-queued.
                let attempt = attempts - requeued_attempts;
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
        Settled {
            id,
            attempts,
            attempt,
        }
    }
}

/// Counts `n` into `counter`.
pub(super) fn count(counter: &AtomicU64, n: usize) {
    counter.fetch_add(n as u64, Ordering::Relaxed);
}

/// Time kept in hand between the end of a delivery and the end of its lease,
/// for recording the outcome.
pub const LEASE_MARGIN: Duration = Duration::from_secs(2);

/// The shortest wait for the next due row: a row due already but not leased
/// (locked for a moment by another statement) is not leased in a loop.
pub(super) const MIN_WAIT: Duration = Duration::from_millis(10);

/// The wait after the `failures`-th failure in a row of a lease or a
/// LISTEN connection: 0.5 s, 1 s, 2 s, ... up to 30 s.
pub(super) fn backoff(failures: u32) -> Duration {
    Duration::from_millis(500u64.saturating_mul(1 << failures.min(6).saturating_sub(1)))
        .min(Duration::from_secs(30))
}
