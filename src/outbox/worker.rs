//! The drainer at work: leases due rows, delivers them with no transaction
//! open and a bounded number in flight, records the outcomes of many
//! deliveries in one statement against `(id, attempts)` ([`super::pipeline`]).
//! It wakes on an in-process [`Waker`] (ingest in the same process), on
//! `LISTEN/NOTIFY` (ingest in other processes), at the time the next retry
//! is due, and on a poll, so it works behind PgBouncer and after a lost
//! notification. Several drainers may share one database: `skip locked` and
//! the lease keep them apart, and a crashed drainer's lease simply expires.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use super::drainer::backoff;
pub use super::drainer::{
    DEFAULT_BATCH_BYTES, Drained, Drainer, DrainerSettings, DrainerStats, LEASE_MARGIN,
};
pub use super::handoff::{Waker, Wakers};
use super::pipeline::{Mode, Pipeline};
use super::store::{self, Attempt, Settled};

impl Drainer {
    /// Leases one batch of due rows, delivers them, records the outcomes.
    pub async fn drain_once(&self) -> Result<Drained, sqlx::Error> {
        Pipeline::new(self, Mode::Once).run(Duration::MAX).await
    }

    /// Drains until `shutdown` is cancelled. Then it stops leasing and starting
    /// deliveries (unstarted rows are given back), lets the deliveries in
    /// flight finish for up to `grace` (soft stop), and drops the rest (hard
    /// stop): their leases expire and another pass redelivers them with the
    /// same `webhook-id`.
    pub async fn run(mut self, shutdown: CancellationToken, grace: Duration) {
        self.stopping = shutdown.clone();
        let listener = self
            .listen
            .clone()
            .map(|pool| tokio::spawn(listen(pool, self.waker(), shutdown.clone())));
        if let Err(error) = Pipeline::new(&self, Mode::Continuous).run(grace).await {
            tracing::error!(error = %error, "outbox drainer failed");
        }
        // Stopped and waited for: nothing of the drainer outlives `run`.
        if let Some(listener) = listener {
            listener.abort();
            let _ = listener.await;
        }
        tracing::info!("outbox drainer stopped");
    }
}

/// Gives back, due at once, the rows still handed to a drainer that has
/// stopped (rows committed while it was stopping): without this they would
/// wait for their lease to expire. Returns how many.
pub async fn give_back(pool: &PgPool, waker: &Waker) -> Result<usize, sqlx::Error> {
    waker.accept(None, 0);
    let taken = waker.take(usize::MAX, u64::MAX, true);
    let settled: Vec<Settled> = (taken.rows.iter())
        .map(|row| (row.message.id, row.message.attempts))
        .chain(taken.given_back)
        .map(|(id, attempts)| Settled {
            id,
            attempts,
            attempt: Attempt::Released,
        })
        .collect();
    if !settled.is_empty() {
        store::record_many(pool, &settled, None).await?;
    }
    Ok(settled.len())
}

/// [`give_back`] of every drainer of `wakers`. Returns how many rows.
pub async fn give_back_all(pool: &PgPool, wakers: &Wakers) -> Result<usize, sqlx::Error> {
    let mut rows = 0;
    for waker in wakers.each() {
        rows += give_back(pool, waker).await?;
    }
    Ok(rows)
}

/// Wakes the drainer on every notification of the outbox channel, on a
/// connection of its own, reconnecting with backoff.
async fn listen(pool: PgPool, wake: Waker, shutdown: CancellationToken) {
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
        wake.wake();
        loop {
            match listener.try_recv().await {
                Ok(Some(_)) => wake.wake(),
                // The connection dropped: reconnect (and catch up).
                Ok(None) => wake.wake(),
                Err(error) => {
                    tracing::warn!(error = %error, "outbox LISTEN connection failed");
                    break;
                }
            }
        }
    }
}
