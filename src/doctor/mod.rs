//! `webhookd doctor`, and the console's page of the same: what stands
//! between a payment and its effect, each check `ok`, `warn` or `fail`
//! with what it saw and what to do. The checks read, and never write:
//! the database, each sink (a `HEAD`, a broker's connection), and with API
//! keys the providers' own view of their webhooks.
//!
//! - [`local`]: the database, its migrations, the clock, the admin listener;
//! - [`sinks`]: each sink reached;
//! - [`stripe`], [`paypal`]: the providers' endpoints pointed at this
//!   service, enabled and subscribed;
//! - [`traffic`]: when each source last delivered against its usual gap,
//!   what waits, what the outbox could not deliver, what the sweeps found.

mod local;
mod paypal;
mod sinks;
mod stripe;
mod traffic;

use std::time::{Duration, SystemTime};

use serde::Serialize;
use sqlx::PgPool;

use crate::clock::{Clock, spoken};
use crate::config::{ServeSettings, SinkEntry};
use crate::providers::{Scheme, Source};
use crate::sinks::Sink;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One check: its name (stable, `sink.default`, `endpoint.stripe`), how it
/// came out, what it saw, and what to do (empty when nothing is to do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub check: String,
    pub status: Status,
    pub detail: String,
    pub fix: String,
}

impl Check {
    pub fn ok(check: impl Into<String>, detail: impl Into<String>) -> Self {
        Check::with(Status::Ok, check, detail, "")
    }

    pub fn warn(
        check: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Check::with(Status::Warn, check, detail, fix)
    }

    pub fn fail(
        check: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Check::with(Status::Fail, check, detail, fix)
    }

    fn with(
        status: Status,
        check: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Check {
            check: check.into(),
            status,
            detail: detail.into(),
            fix: fix.into(),
        }
    }
}

/// What the checks look at, built from the configuration by the caller
/// (`startup::examine`).
pub struct Setup<'a> {
    /// The configuration, as `serve` reads it.
    pub settings: &'a ServeSettings,
    /// The sources whose endpoints are mounted.
    pub sources: &'a [Source],
    /// Each sink of the configuration, built; or why they could not be.
    pub sinks: &'a Result<Vec<(SinkEntry, Sink)>, String>,
    /// The database's pool; connected to by [`local::database`].
    pub pool: &'a PgPool,
    /// "Now" on this machine: the clock checked against the others'.
    pub clock: &'a Clock,
}

/// Every check, in a stable order: the database, its migrations, the
/// clock, the admin listener, each Stripe source's mode, each sink, each provider's endpoints, each
/// source's deliveries, what waits, each sink's outbox, each sweep. Those
/// that read the database are left out when it cannot be reached, and
/// those of the traffic while migrations are pending.
pub async fn examine(setup: &Setup<'_>) -> Vec<Check> {
    let mut checks = Vec::new();
    let reached = local::database(setup.pool).await;
    let database_up = reached.status != Status::Fail;
    checks.push(reached);
    // The traffic's tables are there once the migrations are.
    let mut migrated = false;
    if database_up {
        let migrations = local::migrations(setup.pool).await;
        migrated = migrations.status != Status::Fail;
        checks.push(migrations);
    }
    // What may wait on the network, all at once (the console's page must
    // answer within its request's timeout); the providers' answers before
    // the clock, whose `Date` is one to check it against.
    let (stripe, paypal, reached) = tokio::join!(
        stripe::endpoints(setup.settings, setup.sources),
        paypal::webhooks(setup.settings, setup.sources),
        sinks::reached(setup.sinks),
    );
    let pool = database_up.then_some(setup.pool);
    let dates: Vec<(&str, Dated)> = [("Stripe's", stripe.date), ("PayPal's", paypal.date)]
        .into_iter()
        .filter_map(|(whose, date)| Some((whose, date?)))
        .collect();
    checks.push(local::clock(setup, pool, &dates).await);
    checks.push(local::admin(setup.settings));
    checks.extend(local::modes(setup.sources));
    checks.extend(reached);
    checks.extend(stripe.checks);
    checks.extend(paypal.checks);
    if let Some(pool) = pool.filter(|_| migrated) {
        checks.extend(traffic::checks(setup, pool).await);
    }
    checks
}

/// The types of `required` that a webhook subscribed to `subscribed` does
/// not get: none when it takes `*`.
fn unsubscribed<'a>(required: &[&'a str], subscribed: &[&str]) -> Vec<&'a str> {
    if subscribed.contains(&"*") {
        return Vec::new();
    }
    (required.iter().copied())
        .filter(|kind| !subscribed.contains(kind))
        .collect()
}

/// What a provider's API said: a check per source of it, and the `Date`
/// of its answer (a clock to compare with).
#[derive(Default)]
struct Answered {
    checks: Vec<Check>,
    date: Option<Dated>,
}

/// A provider's `Date`, and when its answer came.
type Dated = (SystemTime, tokio::time::Instant);

/// Whether any check failed: `doctor` then exits 1.
pub fn failed(checks: &[Check]) -> bool {
    checks.iter().any(|check| check.status == Status::Fail)
}

/// The mounted sources of `scheme`.
fn of_scheme(sources: &[Source], scheme: Scheme) -> Vec<&Source> {
    (sources.iter())
        .filter(|source| source.scheme == scheme)
        .collect()
}

/// The URL a provider must deliver `source`'s webhooks to, when
/// `WEBHOOKD_PUBLIC_URL` says where this service is.
fn endpoint_url(settings: &ServeSettings, source: &str) -> Option<String> {
    (settings.public_url()).map(|base| format!("{base}/webhooks/{source}"))
}

/// [`spoken`] of a number of seconds, never negative.
fn spoken_secs(secs: i64) -> String {
    spoken(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_age_is_none() {
        assert_eq!(spoken_secs(-5), "0 s");
    }

    #[test]
    fn a_check_serialises_as_the_contract_says() {
        let check = Check::fail("sink.default", "down", "start it");
        assert_eq!(
            serde_json::to_value(&check).unwrap(),
            serde_json::json!({"check": "sink.default", "status": "fail", "detail": "down", "fix": "start it"})
        );
        assert!(failed(&[Check::ok("a", ""), check]));
        assert!(!failed(&[Check::warn("a", "", "")]));
    }
}
