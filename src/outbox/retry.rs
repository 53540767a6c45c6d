//! When to try a failed delivery again: `max(attempt^4 seconds ±10% jitter,
//! Retry-After)`, at most the cap. The backoff grows 1, 16, 81, 256, 625, ...
//! seconds; a sink's `Retry-After` can only lengthen it. After
//! `max_attempts` the row is dead-lettered.

use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: i32,
    /// The longest wait between two attempts.
    pub cap: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    RetryAfter(Duration),
    GiveUp,
}

impl RetryPolicy {
    /// What to do after attempt number `attempts` failed. `jitter` is in
    /// [-1, 1] and moves the backoff by up to 10%; the sink's `retry_after`
    /// is a floor.
    pub fn next(&self, attempts: i32, retry_after: Option<Duration>, jitter: f64) -> Next {
        if attempts >= self.max_attempts {
            return Next::GiveUp;
        }
        let base = f64::from(attempts.max(1)).powi(4);
        let backoff = Duration::from_secs_f64(base * (1.0 + 0.1 * jitter.clamp(-1.0, 1.0)));
        let wait = backoff.max(retry_after.unwrap_or_default());
        Next::RetryAfter(wait.min(self.cap))
    }
}

/// A number in [-1, 1] that differs between rows and attempts, so that
/// retries of a failed batch spread out instead of arriving together.
pub fn jitter(id: i64, attempts: i32) -> f64 {
    use std::hash::BuildHasher;
    let hash = std::collections::hash_map::RandomState::new().hash_one((id, attempts));
    #[allow(clippy::cast_precision_loss)]
    let unit = (hash >> 11) as f64 / (1u64 << 53) as f64;
    unit * 2.0 - 1.0
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        max_attempts: 5,
        cap: Duration::from_secs(3600),
    };

    #[test]
    fn backoff_grows_as_the_fourth_power_within_ten_percent() {
        for (attempts, base) in [(1, 1.0), (2, 16.0), (3, 81.0), (4, 256.0)] {
            for jitter in [-1.0, 0.0, 1.0] {
                let Next::RetryAfter(wait) = POLICY.next(attempts, None, jitter) else {
                    panic!("gave up at {attempts}");
                };
                let secs = wait.as_secs_f64();
                assert!(
                    secs >= base * 0.9 - 1e-9 && secs <= base * 1.1 + 1e-9,
                    "{attempts}: {secs}"
                );
            }
        }
    }

    #[test]
    fn retry_after_is_honoured_within_the_cap_and_attempts_run_out() {
        let asked = POLICY.next(1, Some(Duration::from_secs(120)), 0.0);
        assert_eq!(asked, Next::RetryAfter(Duration::from_secs(120)));
        // Retry-After is a floor, never a shortcut past the backoff.
        let shorter = POLICY.next(3, Some(Duration::from_secs(1)), 0.0);
        assert_eq!(shorter, Next::RetryAfter(Duration::from_secs(81)));
        let jittered = POLICY.next(2, Some(Duration::from_secs(1)), -1.0);
        assert_eq!(jittered, Next::RetryAfter(Duration::from_secs_f64(14.4)));
        let bounded = POLICY.next(1, Some(Duration::from_secs(86_400)), 0.0);
        assert_eq!(bounded, Next::RetryAfter(Duration::from_secs(3600)));
        let zero = POLICY.next(1, Some(Duration::ZERO), 0.0);
        assert_eq!(zero, Next::RetryAfter(Duration::from_secs(1)));
        assert_eq!(POLICY.next(5, None, 0.0), Next::GiveUp);
        let capped = RetryPolicy {
            max_attempts: 100,
            cap: Duration::from_secs(60),
        };
        assert_eq!(
            capped.next(10, None, 1.0),
            Next::RetryAfter(Duration::from_secs(60))
        );
    }

    #[test]
    fn jitter_stays_in_range() {
        for id in 0..1000 {
            let j = jitter(id, 3);
            assert!((-1.0..=1.0).contains(&j), "{j}");
        }
    }
}
