//! `webhookd reconcile`: every wallet balance equals the sum of its entries,
//! and every entry within the retention window has its event. With
//! `--against stripe|razorpay`: the ledger against the provider's payments.

use std::io::Write;
use std::time::Duration;

use clap::{Args, ValueEnum};
use sqlx::PgPool;

use super::retention::RetentionArgs;
use super::{MAX_SHOWN_TEXT_BYTES, id, json_line, shown};
use crate::clock::Clock;
use crate::config::{RazorpayApiArgs, StripeApiArgs};
use crate::{ledger, startup, sweep};

/// `webhookd reconcile`, and with `--against`, the ledger against a provider.
#[derive(Debug, Clone, Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub retention: RetentionArgs,
    /// Compare the ledger with this provider's succeeded payments and
    /// refunds of the last `--since` instead (exit 1 on any difference).
    #[arg(long, value_enum)]
    pub against: Option<Against>,
    /// The window `--against` compares.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30d")]
    pub since: Duration,
    #[command(flatten)]
    pub stripe: StripeApiArgs,
    #[command(flatten)]
    pub razorpay: RazorpayApiArgs,
}

/// Which provider `reconcile --against` compares the ledger with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Against {
    Stripe,
    Razorpay,
}

/// `reconcile --against`: Ok(true) when the ledger and the provider agree;
/// each difference is printed, then one JSON line.
pub async fn against(
    pool: &PgPool,
    args: &ReconcileArgs,
    against: Against,
    clock: &Clock,
    out: &mut impl Write,
) -> anyhow::Result<bool> {
    let now = clock.now();
    let since = now.saturating_sub(i64::try_from(args.since.as_secs()).unwrap_or(i64::MAX));
    let report = match against {
        Against::Stripe => {
            let mut api = startup::stripe_api(&args.stripe)?;
            sweep::audit::stripe(&mut api, pool, (since, now + 1)).await?
        }
        Against::Razorpay => {
            // A settled window, as the sweep reads: offsets cannot shift.
            let mut api = startup::razorpay_api(&args.razorpay)?;
            let until = now - sweep::razorpay::SETTLE_SECS;
            sweep::audit::razorpay(&mut api, pool, (since, until)).await?
        }
    };
    // Findings quote ids and metadata from the provider's API.
    for finding in &report.findings {
        writeln!(out, "{}", shown(finding, MAX_SHOWN_TEXT_BYTES))?;
    }
    writeln!(out, "{}", json_line(&report)?)?;
    Ok(report.ok())
}

/// Ok(true) when everything reconciles; mismatches are printed.
pub async fn run(
    pool: &PgPool,
    retention: &RetentionArgs,
    out: &mut impl Write,
) -> anyhow::Result<bool> {
    // One snapshot for both reads, written out once it has ended.
    let mut conn =
        crate::db::begin_with(pool, "begin isolation level repeatable read read only").await?;
    let mismatches = ledger::mismatches(&mut conn).await?;
    #[allow(clippy::cast_precision_loss)]
    let since = (Clock::System.now() as f64) - retention.window().as_secs_f64();
    let orphans = ledger::orphan_entries(&mut conn, since).await?;
    conn.commit().await?;
    for m in &mismatches {
        writeln!(
            out,
            "MISMATCH wallet {} {}: balance {} but entries sum to {}",
            id(&m.user_id),
            id(&m.currency),
            m.balance_minor,
            m.entries_minor
        )?;
    }
    for (entry, provider, event_id) in &orphans {
        writeln!(
            out,
            "ORPHAN entry {entry}: its event {} {} is not recorded",
            id(provider),
            id(event_id)
        )?;
    }
    let ok = mismatches.is_empty() && orphans.is_empty();
    writeln!(
        out,
        "{}: {} wallet mismatches, {} entries without their event",
        if ok { "ok" } else { "FAILED" },
        mismatches.len(),
        orphans.len()
    )?;
    Ok(ok)
}
