//! The books after a drill: exactly-once effects for the run's events.

use serde_json::{Value, json};
use sqlx::PgPool;

use super::Plan;
use crate::{events, ledger, outbox};

/// Compares what the database holds for `plan`'s run with what its first
/// `sent` events must have written; `passed` only when every check holds.
pub async fn verify(pool: &PgPool, plan: &Plan, sent: u64) -> anyhow::Result<Value> {
    let expected = plan.expected(sent);
    let found = Found::read(pool, &plan.prefix()).await?;
    let total = |currency: &str| {
        found
            .ledger
            .totals
            .iter()
            .find(|(c, _)| c == currency)
            .map_or(0, |(_, total)| *total)
    };
    let others: i64 = found
        .ledger
        .totals
        .iter()
        .filter(|(c, _)| c != "USD" && c != "INR")
        .map(|(_, total)| *total)
        .sum();
    let checks = [
        (
            "stripe_events",
            found.events("stripe"),
            expected.stripe_events,
        ),
        (
            "razorpay_events",
            found.events("razorpay"),
            expected.razorpay_events,
        ),
        (
            "stripe_credits",
            found.entries("stripe", "credit"),
            expected.stripe_credits,
        ),
        (
            "stripe_refunds",
            found.entries("stripe", "refund"),
            expected.stripe_refunds,
        ),
        (
            "razorpay_credits",
            found.entries("razorpay", "credit"),
            expected.razorpay_credits,
        ),
        ("razorpay_refunds", found.entries("razorpay", "refund"), 0),
        (
            "outbox_wallet_credited",
            found.topic("wallet.credited"),
            expected.stripe_credits + expected.razorpay_credits,
        ),
        (
            "outbox_wallet_debited",
            found.topic("wallet.debited"),
            expected.stripe_refunds,
        ),
        (
            "outbox_payment_receipt",
            found.topic("payment.receipt"),
            expected.receipts,
        ),
        (
            "outbox_subscription_changed",
            found.topic("subscription.changed"),
            expected.subscription_changes,
        ),
        ("deferred_waiting", found.events.deferred, 0),
        ("usd_total_minor", total("USD"), expected.usd_minor),
        ("inr_total_minor", total("INR"), expected.inr_minor),
        ("other_currencies_total_minor", others, 0),
        ("balance_mismatches", found.ledger.mismatched_wallets, 0),
    ];
    let failed: Vec<&str> = checks
        .iter()
        .filter(|(_, found, expected)| found != expected)
        .map(|(name, ..)| *name)
        .collect();
    let checks: serde_json::Map<String, Value> = checks
        .iter()
        .map(|(name, found, expected)| {
            let check = json!({ "found": found, "expected": expected });
            ((*name).to_owned(), check)
        })
        .collect();
    Ok(json!({ "checks": checks, "failed": failed, "passed": failed.is_empty() }))
}

/// What a run (ids starting `prefix`) left behind, each owner counting its
/// own rows: events per provider and those still deferred (`evt_…`),
/// ledger entries of the run's payments (`pi_…`, `pay_…`) and its wallets,
/// outbox rows per topic.
struct Found {
    events: events::PrefixCounts,
    ledger: ledger::DrillLedger,
    topics: Vec<(String, i64)>,
}

impl Found {
    async fn read(pool: &PgPool, prefix: &str) -> Result<Self, sqlx::Error> {
        let event_ids = format!("evt_{prefix}");
        let payments = [format!("pi_{prefix}"), format!("pay_{prefix}")];
        Ok(Found {
            events: events::counts_with_prefix(pool, &event_ids).await?,
            ledger: ledger::drill_counts(pool, prefix, &payments).await?,
            topics: outbox::store::browse::topics_with_prefix(pool, &event_ids).await?,
        })
    }

    fn events(&self, provider: &str) -> i64 {
        let by_provider = &self.events.by_provider;
        by_provider
            .iter()
            .find(|(p, _)| p == provider)
            .map_or(0, |(_, n)| *n)
    }

    fn entries(&self, provider: &str, kind: &str) -> i64 {
        let entries = &self.ledger.entries;
        entries
            .iter()
            .find(|(p, k, _)| p == provider && k == kind)
            .map_or(0, |(.., n)| *n)
    }

    fn topic(&self, topic: &str) -> i64 {
        let topics = &self.topics;
        topics
            .iter()
            .find(|(t, _)| t == topic)
            .map_or(0, |(_, n)| *n)
    }
}
