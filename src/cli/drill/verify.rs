//! The books after a drill: exactly-once effects for the run's events.

use serde_json::{Value, json};
use sqlx::PgPool;

use super::Plan;

/// Compares what the database holds for `plan`'s run with what its first
/// `sent` events must have written; `passed` only when every check holds.
pub async fn verify(pool: &PgPool, plan: &Plan, sent: u64) -> anyhow::Result<Value> {
    let expected = plan.expected(sent);
    let found = crate::ledger::drill_counts(pool, &plan.prefix()).await?;
    let total = |currency: &str| {
        found
            .totals
            .iter()
            .find(|(c, _)| c == currency)
            .map_or(0, |(_, total)| *total)
    };
    let others: i64 = found
        .totals
        .iter()
        .filter(|(c, _)| c != "USD" && c != "INR")
        .map(|(_, total)| *total)
        .sum();
    let checks = [
        ("stripe_events", found.stripe_events, expected.stripe_events),
        (
            "razorpay_events",
            found.razorpay_events,
            expected.razorpay_events,
        ),
        (
            "stripe_credits",
            found.stripe_credits,
            expected.stripe_credits,
        ),
        (
            "stripe_refunds",
            found.stripe_refunds,
            expected.stripe_refunds,
        ),
        (
            "razorpay_credits",
            found.razorpay_credits,
            expected.razorpay_credits,
        ),
        ("razorpay_refunds", found.razorpay_refunds, 0),
        (
            "outbox_wallet_credited",
            found.credited,
            expected.stripe_credits + expected.razorpay_credits,
        ),
        (
            "outbox_wallet_debited",
            found.debited,
            expected.stripe_refunds,
        ),
        ("outbox_payment_receipt", found.receipts, expected.receipts),
        (
            "outbox_subscription_changed",
            found.subscription_changes,
            expected.subscription_changes,
        ),
        ("deferred_waiting", found.deferred, 0),
        ("usd_total_minor", total("USD"), expected.usd_minor),
        ("inr_total_minor", total("INR"), expected.inr_minor),
        ("other_currencies_total_minor", others, 0),
        ("balance_mismatches", found.mismatched_wallets, 0),
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
