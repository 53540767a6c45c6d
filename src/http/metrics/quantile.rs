//! Quantiles estimated from a histogram's buckets, for the console.

use std::sync::atomic::{AtomicU64, Ordering};

/// A histogram of counts per bucket, lock-free.
#[derive(Debug)]
pub struct Buckets {
    bounds: &'static [f64],
    /// One per bound, and one more past the last.
    counts: Vec<AtomicU64>,
}

impl Buckets {
    pub fn new(bounds: &'static [f64]) -> Self {
        Buckets {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn record(&self, value: f64) {
        let bucket = self
            .bounds
            .iter()
            .position(|&bound| value <= bound)
            .unwrap_or(self.bounds.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// The value at quantile `q`: see [`quantile`].
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        quantile(self.bounds, &counts, q)
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// The value at quantile `q` of a histogram with `counts` per bucket of
/// upper `bounds` (one count more: the overflow), interpolated linearly
/// within the bucket that holds it.
#[allow(clippy::cast_precision_loss)]
pub fn quantile(bounds: &[f64], counts: &[u64], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    for (i, &count) in counts.iter().enumerate() {
        if count > 0 && (below + count) as f64 >= rank {
            let Some(&upper) = bounds.get(i) else {
                return bounds.last().copied();
            };
            let lower = if i == 0 { 0.0 } else { bounds[i - 1] };
            let within = (rank - below as f64) / count as f64;
            return Some(lower + (upper - lower) * within);
        }
        below += count;
    }
    bounds.last().copied()
}

#[cfg(test)]
mod tests {
    use super::{Buckets, quantile};

    const BOUNDS: [f64; 3] = [0.01, 0.1, 1.0];

    #[test]
    fn nothing_counted_has_no_quantile() {
        assert_eq!(quantile(&BOUNDS, &[0, 0, 0, 0], 0.5), None);
    }

    #[test]
    fn a_quantile_is_interpolated_within_its_bucket() {
        // 10 under 10 ms, 10 between 10 and 100 ms.
        let counts = [10, 10, 0, 0];
        assert!((quantile(&BOUNDS, &counts, 0.5).unwrap() - 0.01).abs() < 1e-9);
        assert!((quantile(&BOUNDS, &counts, 0.75).unwrap() - 0.055).abs() < 1e-9);
        assert!((quantile(&BOUNDS, &counts, 1.0).unwrap() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn recorded_values_land_in_their_buckets() {
        let buckets = Buckets::new(&BOUNDS);
        for value in [0.005, 0.05, 0.05, 5.0] {
            buckets.record(value);
        }
        assert_eq!(buckets.count(), 4);
        assert_eq!(buckets.quantile(1.0), Some(1.0));
        assert!((buckets.quantile(0.25).unwrap() - 0.01).abs() < 1e-9);
    }

    #[test]
    fn past_the_last_bucket_answers_the_last_bound() {
        assert_eq!(quantile(&BOUNDS, &[0, 0, 0, 5], 0.99), Some(1.0));
    }
}
