//! How fast the token may be guessed. Every wrong token presented (a login
//! or a bearer) spends one from its client's bucket (by address) and one
//! from a bucket for all clients together; while either is empty, a
//! presented token is refused unchecked, the right one too: were the right
//! one let through, the buckets would stop bounding the guesses. Sessions
//! never come here (their cookie is checked by its signature), so an
//! attack that empties the bucket of all keeps new logins and bearer
//! clients out, never an operator already signed in; it is reported once
//! per refill of that bucket, not once per refusal.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// Wrong tokens one client may present at once, and how often one more.
pub const FAILURE_BURST: f64 = 5.0;
pub const FAILURE_REFILL: Duration = Duration::from_secs(12);
/// The same for every client together.
pub const ALL_FAILURE_BURST: f64 = 50.0;
pub const ALL_FAILURE_REFILL: Duration = Duration::from_secs(2);
/// Clients whose failures are remembered at most (the oldest forgiven).
const MAX_TRACKED_CLIENTS: usize = 4096;

/// Which bucket refused: a metric's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The client's own (by address).
    Client,
    /// Every client's together: many addresses are guessing.
    Global,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Client => "client",
            Scope::Global => "global",
        }
    }
}

/// A presented token refused unchecked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// When one more attempt will be allowed.
    pub wait: Duration,
    pub scope: Scope,
    /// Set on the first refusal by the bucket of all since it was last
    /// reported (at most once per its refill, [`report_every`]): the
    /// refusals it counts, this one included. Log it then.
    pub report: Option<u64>,
}

/// How often an emptied bucket of all is reported at most: the time it
/// takes to refill whole.
pub fn report_every() -> Duration {
    ALL_FAILURE_REFILL.mul_f64(ALL_FAILURE_BURST)
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: i64,
}

impl Bucket {
    fn full(burst: f64, now: i64) -> Self {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    /// Refills up to `now`; how long until one more failure is allowed, if
    /// none is now.
    fn wait(&mut self, now: i64, burst: f64, refill: Duration) -> Option<Duration> {
        #[allow(clippy::cast_precision_loss)]
        let refilled = (now - self.at).max(0) as f64 / refill.as_secs_f64();
        self.tokens = (self.tokens + refilled).min(burst);
        self.at = now;
        (self.tokens < 1.0)
            .then(|| Duration::from_secs_f64(((1.0 - self.tokens) * refill.as_secs_f64()).ceil()))
    }
}

/// The buckets, and what is left to report.
#[derive(Debug)]
pub struct Throttle {
    all: Bucket,
    by_client: HashMap<IpAddr, Bucket>,
    /// Refusals by the bucket of all not reported yet, and until when the
    /// last report stands.
    unreported: u64,
    reported_until: i64,
}

impl Throttle {
    pub fn new(now: i64) -> Self {
        Throttle {
            all: Bucket::full(ALL_FAILURE_BURST, now),
            by_client: HashMap::new(),
            unreported: 0,
            reported_until: i64::MIN,
        }
    }

    /// Whether `client` may present a token now.
    pub fn admit(&mut self, now: i64, client: Option<IpAddr>) -> Result<(), Refusal> {
        if let Some(wait) = self.all.wait(now, ALL_FAILURE_BURST, ALL_FAILURE_REFILL) {
            self.unreported += 1;
            let report = (now >= self.reported_until).then(|| {
                self.reported_until =
                    now + i64::try_from(report_every().as_secs()).unwrap_or(i64::MAX / 2);
                std::mem::take(&mut self.unreported)
            });
            return Err(Refusal {
                wait,
                scope: Scope::Global,
                report,
            });
        }
        let own = client.and_then(|ip| self.by_client.get_mut(&ip));
        match own.and_then(|b| b.wait(now, FAILURE_BURST, FAILURE_REFILL)) {
            Some(wait) => Err(Refusal {
                wait,
                scope: Scope::Client,
                report: None,
            }),
            None => Ok(()),
        }
    }

    /// A wrong token from `client`: one from its bucket and from the
    /// bucket of all.
    pub fn failed(&mut self, now: i64, client: Option<IpAddr>) {
        self.all.tokens -= 1.0;
        let Some(ip) = client else {
            return;
        };
        let mut bucket = self
            .by_client
            .get(&ip)
            .copied()
            .unwrap_or_else(|| Bucket::full(FAILURE_BURST, now));
        bucket.wait(now, FAILURE_BURST, FAILURE_REFILL);
        bucket.tokens -= 1.0;
        if !self.by_client.contains_key(&ip) && self.by_client.len() >= MAX_TRACKED_CLIENTS {
            // Forgive those whose bucket is full again, then the rest.
            self.by_client.retain(|_, b| {
                b.wait(now, FAILURE_BURST, FAILURE_REFILL);
                b.tokens < FAILURE_BURST
            });
            if self.by_client.len() >= MAX_TRACKED_CLIENTS {
                self.by_client.clear();
            }
        }
        self.by_client.insert(ip, bucket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_bucket_of_all_is_reported_once_per_refill_with_its_count() {
        let mut throttle = Throttle::new(1_000);
        for n in 0..50u8 {
            let client = Some(IpAddr::from([10, 0, 0, n]));
            assert_eq!(throttle.admit(1_000, client), Ok(()));
            throttle.failed(1_000, client);
        }
        let refused = |throttle: &mut Throttle, now| throttle.admit(now, None).unwrap_err();
        let first = refused(&mut throttle, 1_000);
        assert_eq!((first.scope, first.report), (Scope::Global, Some(1)));
        assert_eq!(first.wait, ALL_FAILURE_REFILL);
        for _ in 0..9 {
            assert_eq!(refused(&mut throttle, 1_001).report, None, "not again");
        }
        // Kept empty by one guess a refill: reported again a window later,
        // with what was refused meanwhile.
        let mut now = 1_000;
        while now < 1_000 + 100 {
            now += 2;
            if throttle.admit(now, None).is_ok() {
                throttle.failed(now, None);
            }
        }
        // The nine refused after the report, and this one.
        assert_eq!(refused(&mut throttle, now).report, Some(10));
    }

    #[test]
    fn one_clients_bucket_refuses_it_alone_and_is_not_an_attack() {
        let mut throttle = Throttle::new(1_000);
        let guesser = Some(IpAddr::from([10, 0, 0, 1]));
        for _ in 0..5 {
            throttle.failed(1_000, guesser);
        }
        let refusal = throttle.admit(1_000, guesser).unwrap_err();
        assert_eq!((refusal.scope, refusal.report), (Scope::Client, None));
        assert_eq!(
            throttle.admit(1_000, Some(IpAddr::from([10, 0, 0, 2]))),
            Ok(())
        );
    }
}
