//! "Now", injectable so that tests never sleep or race the wall clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// The machine's clock; the database uses its own `now()`.
    #[default]
    System,
    /// Always the given Unix time, in seconds.
    Fixed(i64),
    /// A clock the tests move by hand ([`Clock::advance`]).
    Manual(Arc<AtomicI64>),
}

impl Clock {
    pub fn manual(start: i64) -> Self {
        Clock::Manual(Arc::new(AtomicI64::new(start)))
    }

    /// Unix seconds.
    pub fn now(&self) -> i64 {
        match self {
            Clock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
            Clock::Fixed(now) => *now,
            Clock::Manual(now) => now.load(Ordering::SeqCst),
        }
    }

    /// The time to use in SQL instead of the database's `now()`: `None` for
    /// the system clock, so that the database's own clock decides.
    pub fn pinned(&self) -> Option<f64> {
        match self {
            Clock::System => None,
            // Unix seconds are far below 2^53: exact as f64.
            #[allow(clippy::cast_precision_loss)]
            _ => Some(self.now() as f64),
        }
    }

    /// Moves a manual clock forward; other clocks ignore it.
    pub fn advance(&self, by: Duration) {
        if let Clock::Manual(now) = self {
            now.fetch_add(
                i64::try_from(by.as_secs()).unwrap_or(i64::MAX),
                Ordering::SeqCst,
            );
        }
    }
}

/// A duration as a person says it: `45 s`, `12 min`, `3 h 5 min`,
/// `2 days 4 h` (the doctor's checks, the console's ages).
pub fn spoken(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0..120 => format!("{secs} s"),
        120..7_200 => format!("{} min", secs / 60),
        7_200..172_800 => match (secs / 60) % 60 {
            0 => format!("{} h", secs / 3_600),
            min => format!("{} h {min} min", secs / 3_600),
        },
        _ => match (secs / 3_600) % 24 {
            0 => format!("{} days", secs / 86_400),
            h => format!("{} days {h} h", secs / 86_400),
        },
    }
}

/// Runs `tick` at once and then every `period` until `shutdown` (a tick
/// that overran delays the next one, never bunches them): the loop of a
/// periodic task.
pub async fn every<T: Future<Output = ()>>(
    period: Duration,
    shutdown: &tokio_util::sync::CancellationToken,
    mut tick: impl FnMut() -> T,
) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => tick().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_said_as_a_person_would() {
        for (secs, said) in [
            (0, "0 s"),
            (119, "119 s"),
            (120, "2 min"),
            (7_199, "119 min"),
            (7_200, "2 h"),
            (11_100, "3 h 5 min"),
            (172_800, "2 days"),
            (187_200, "2 days 4 h"),
        ] {
            assert_eq!(spoken(Duration::from_secs(secs)), said);
        }
    }
}
