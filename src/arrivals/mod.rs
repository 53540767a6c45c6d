//! When each source's deliveries arrive: a tally in memory that every
//! verified delivery adds to (a lock and a map lookup, no I/O), written to
//! `source_arrivals` an hour's row at a time by a task of its own, at most
//! every [`FLUSH_EVERY`] and at shutdown. `doctor` and `/metrics` read it
//! ([`store::seen`]) to tell a source gone silent for longer than it
//! usually is: the Stripe endpoint disabled, the webhook deleted, the URL
//! pointed elsewhere.
//!
//! A process killed outright loses the tally since its last write (at most
//! [`FLUSH_EVERY`] of it): the table is a sign of life, not a record; the
//! events themselves are in `processed_events`.

pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
pub use store::{Seen, USUAL_GAP_DAYS, seen};

/// Longest a delivery's arrival waits in memory, once the first since the
/// last write has been written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(30);

/// One source's deliveries in one hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub deliveries: i64,
    /// Unix seconds of the first and of the last.
    pub first_at: i64,
    pub last_at: i64,
}

impl Tally {
    /// One delivery at `at`.
    fn one(at: i64) -> Self {
        Tally {
            deliveries: 1,
            first_at: at,
            last_at: at,
        }
    }

    /// This tally and `other`'s, of the same hour.
    fn add(&mut self, other: Tally) {
        self.deliveries += other.deliveries;
        self.first_at = self.first_at.min(other.first_at);
        self.last_at = self.last_at.max(other.last_at);
    }
}

/// The tally not yet written, by source, then by hour (Unix seconds of
/// its start).
type Pending = HashMap<String, BTreeMap<i64, Tally>>;

/// The deliveries this process has verified and not yet written.
#[derive(Debug, Default)]
pub struct Arrivals {
    clock: Clock,
    pending: Mutex<Pending>,
    /// Told of the first arrival of a source's hour: written at once, so
    /// that a quiet source's first delivery shows without waiting.
    noticed: Notify,
}

impl Arrivals {
    pub fn new(clock: Clock) -> Self {
        Arrivals {
            clock,
            ..Arrivals::default()
        }
    }

    /// A verified delivery to `source`, now.
    pub fn note(&self, source: &str) {
        let now = self.clock.now();
        let hour = now - now.rem_euclid(3600);
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let hours = match pending.get_mut(source) {
            Some(hours) => hours,
            None => pending.entry(source.to_owned()).or_default(),
        };
        match hours.get_mut(&hour) {
            Some(tally) => tally.add(Tally::one(now)),
            None => {
                hours.insert(hour, Tally::one(now));
                self.noticed.notify_one();
            }
        }
    }

    /// Writes what is pending; what could not be written stays pending.
    pub async fn flush(&self, pool: &PgPool) {
        let taken = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if taken.is_empty() {
            return;
        }
        let rows: Vec<(&str, i64, Tally)> = (taken.iter())
            .flat_map(|(source, hours)| {
                (hours.iter()).map(|(hour, tally)| (source.as_str(), *hour, *tally))
            })
            .collect();
        if let Err(error) = store::add(pool, &rows, self.clock.pinned()).await {
            tracing::warn!(%error, "could not write when the sources' deliveries arrived; kept for the next try");
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            for (source, hours) in taken {
                let kept = pending.entry(source).or_default();
                for (hour, tally) in hours {
                    match kept.get_mut(&hour) {
                        Some(into) => into.add(tally),
                        None => {
                            kept.insert(hour, tally);
                        }
                    }
                }
            }
            // Tried again after the pause, whatever arrives meanwhile.
            self.noticed.notify_one();
        }
    }

    /// Writes the tally as it comes: an hour's first arrival at once, the
    /// rest at most every [`FLUSH_EVERY`]; once more when `shutdown` is
    /// cancelled, then returns.
    pub async fn run(&self, pool: PgPool, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.noticed.notified() => {}
            }
            self.flush(&pool).await;
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(FLUSH_EVERY) => {}
            }
        }
        self.flush(&pool).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_are_tallied_by_source_and_hour() {
        let clock = Clock::manual(7_200 + 59);
        let arrivals = Arrivals::new(clock.clone());
        arrivals.note("stripe");
        clock.advance(Duration::from_secs(10));
        arrivals.note("stripe");
        clock.advance(Duration::from_secs(3_600));
        arrivals.note("stripe");
        arrivals.note("paypal");
        let pending = arrivals.pending.lock().unwrap().clone();
        let tally = |deliveries, first_at, last_at| Tally {
            deliveries,
            first_at,
            last_at,
        };
        let hours = [
            (7_200, tally(2, 7_259, 7_269)),
            (10_800, tally(1, 10_869, 10_869)),
        ];
        assert_eq!(pending["stripe"], BTreeMap::from(hours));
        assert_eq!(
            pending["paypal"],
            BTreeMap::from([(10_800, tally(1, 10_869, 10_869))])
        );
    }
}
