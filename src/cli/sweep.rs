//! `webhookd sweep stripe|razorpay|paypal` and `webhookd import`: each
//! prints one JSON line. An import lists the provider's API as a sweep does
//! and records what it lists; or it reads a file of ids (`import_file`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use serde::Serialize;
use sqlx::PgPool;

use super::import_file;
use super::json_line;
use crate::clock::Clock;
use crate::config::{RazorpayApiArgs, SourceSettings, StripeApiArgs};
use crate::startup;
use crate::sweep::listing;
use crate::sweep::paypal::{Paypal, PaypalApiArgs};
use crate::sweep::stripe::Stripe;
use crate::sweep::{self, Mode, Summary};

#[derive(Debug, Subcommand)]
pub enum SweepCommand {
    /// List Stripe's events (`GET /v1/events`) of the window and apply those
    /// never delivered, through the same path as a webhook.
    Stripe(StripeSweepArgs),
    /// List Razorpay's payments and refunds of the window (it has no events
    /// API) and apply those never credited or debited.
    Razorpay(RazorpaySweepArgs),
    /// List PayPal's webhook events (`GET /v1/notifications/webhooks-events`)
    /// of the window and apply those never delivered.
    Paypal(PaypalSweepArgs),
}

#[derive(Debug, Clone, Args)]
pub struct StripeSweepArgs {
    /// How far back to look: a duration (`72h`; Stripe keeps events for
    /// 30 days) or a time in UTC (`2026-12-06T09:00:00Z`, a backup's).
    #[arg(long, value_parser = parse_since, default_value = "72h")]
    pub since: Duration,
    /// List and count; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// List this connected account's events (Stripe Connect: the
    /// `Stripe-Account` header) instead of the platform's own. They are
    /// judged as the Stripe source that takes that account's events.
    #[arg(long, value_name = "acct_...")]
    pub account: Option<String>,
    #[command(flatten)]
    pub api: StripeApiArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RazorpaySweepArgs {
    /// How far back to look: a duration (`24h`: Razorpay retries a
    /// delivery for a day) or a time in UTC (`2026-12-06T09:00:00Z`).
    #[arg(long, value_parser = parse_since, default_value = "24h")]
    pub since: Duration,
    /// List and count; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub api: RazorpayApiArgs,
}

#[derive(Debug, Clone, Args)]
pub struct PaypalSweepArgs {
    /// How far back to look: a duration (`72h`: PayPal retries a delivery
    /// for three days) or a time in UTC (`2026-12-06T09:00:00Z`).
    #[arg(long, value_parser = parse_since, default_value = "72h")]
    pub since: Duration,
    /// List and count; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub api: PaypalApiArgs,
}

/// `webhookd import stripe|paypal [--since 30d]`, or `webhookd import --provider
/// NAME --from-csv FILE`.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("what").required(true).args(["source", "provider"])))]
pub struct ImportArgs {
    /// List this provider's events of the last `--since` and record them.
    #[arg(value_enum)]
    pub source: Option<ImportSource>,
    /// Record the event ids of `--from-csv` under this provider (or source) name.
    #[arg(long, requires = "from_csv", conflicts_with = "source")]
    pub provider: Option<String>,
    /// A file of event ids, one per line, with optional columns
    /// `event_type` and `processed_at` (RFC 3339 or Unix seconds).
    #[arg(long, requires = "provider")]
    pub from_csv: Option<PathBuf>,
    /// How far back to list (with a provider's API).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30d")]
    pub since: Duration,
    /// Count; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub api: StripeApiArgs,
    #[command(flatten)]
    pub paypal: PaypalApiArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportSource {
    Stripe,
    Paypal,
}

/// `webhookd sweep`, judging what it recovers as the sources `configured`
/// would.
pub async fn sweep(
    pool: &PgPool,
    command: &SweepCommand,
    configured: &[SourceSettings],
    clock: &Clock,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mode = |dry_run| if dry_run { Mode::DryRun } else { Mode::Apply };
    let dry_run = match command {
        SweepCommand::Stripe(args) => args.dry_run,
        SweepCommand::Razorpay(args) => args.dry_run,
        SweepCommand::Paypal(args) => args.dry_run,
    };
    if !dry_run {
        // What it applies writes outbox rows and ledger entries.
        startup::ids_past_now(pool).await?;
    }
    let summary = match command {
        SweepCommand::Stripe(args) => {
            let (mut api, source) = match &args.account {
                None => (
                    startup::stripe_api(&args.api)?,
                    startup::swept_of(&args.api, configured, crate::providers::stripe::PROVIDER)?,
                ),
                Some(account) => {
                    let sources = startup::registry(&args.api, configured)?;
                    let source = startup::swept_account(&sources, account)?;
                    (startup::stripe_account_api(&args.api, account)?, source)
                }
            };
            let window =
                floored(pool, clock, crate::providers::stripe::PROVIDER, args.since).await?;
            listing::sweep::<Stripe>(&mut api, pool, mode(args.dry_run), &source, window, None)
                .await?
        }
        SweepCommand::Razorpay(args) => {
            let mut api = startup::razorpay_api(&args.api)?;
            let (since, _) = window(clock, args.since);
            let since = sweep::floor(pool, crate::providers::razorpay::PROVIDER, since).await?;
            let until = clock.now() - sweep::razorpay::SETTLE_SECS;
            let source = startup::swept_of(
                &StripeApiArgs::default(),
                configured,
                crate::providers::razorpay::PROVIDER,
            )?;
            let mode = mode(args.dry_run);
            sweep::razorpay::sweep(&mut api, pool, mode, &source, (since, until), None).await?
        }
        SweepCommand::Paypal(args) => {
            let mut api = sweep::paypal::api(&args.api)?;
            let window =
                floored(pool, clock, crate::providers::paypal::PROVIDER, args.since).await?;
            let source = startup::swept_of(
                &StripeApiArgs::default(),
                configured,
                crate::providers::paypal::PROVIDER,
            )?;
            listing::sweep::<Paypal>(&mut api, pool, mode(args.dry_run), &source, window, None)
                .await?
        }
    };
    let mode = mode(summary.dry_run);
    if mode == Mode::Apply && summary.recovered > 0 {
        tracing::warn!(
            provider = summary.provider,
            recovered = summary.recovered,
            "{} events were never delivered: check the endpoint",
            summary.recovered
        );
    }
    writeln!(out, "{}", json_line(&summary)?)?;
    Ok(())
}

/// `webhookd import`, of the sources `configured`.
pub async fn import(
    pool: &PgPool,
    args: &ImportArgs,
    configured: &[SourceSettings],
    clock: &Clock,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let line = match (args.source, &args.provider, &args.from_csv) {
        (Some(source), _, _) => {
            json_line(&import_listed(pool, args, configured, source, clock).await?)?
        }
        (None, Some(provider), Some(path)) => {
            let imported =
                import_file::run(pool, provider, path, args.dry_run, clock.now()).await?;
            json_line(&imported)?
        }
        _ => {
            anyhow::bail!("say `import stripe|paypal`, or `import --provider NAME --from-csv FILE`")
        }
    };
    writeln!(out, "{line}")?;
    Ok(())
}

/// Records the events `source`'s API lists of the last `--since` as
/// imported (counts them in a dry run), and the import's cut-over.
async fn import_listed(
    pool: &PgPool,
    args: &ImportArgs,
    configured: &[SourceSettings],
    source: ImportSource,
    clock: &Clock,
) -> anyhow::Result<Imported> {
    let (since, until) = window(clock, args.since);
    let mode = if args.dry_run {
        Mode::DryRun
    } else {
        Mode::Import
    };
    let summary = match source {
        ImportSource::Stripe => {
            let mut api = startup::stripe_api(&args.api)?;
            let source =
                startup::swept_of(&args.api, configured, crate::providers::stripe::PROVIDER)?;
            listing::sweep::<Stripe>(&mut api, pool, mode, &source, (since, until), None).await?
        }
        ImportSource::Paypal => {
            let mut api = sweep::paypal::api(&args.paypal)?;
            let source = startup::swept_of(
                &StripeApiArgs::default(),
                configured,
                crate::providers::paypal::PROVIDER,
            )?;
            listing::sweep::<Paypal>(&mut api, pool, mode, &source, (since, until), None).await?
        }
    };
    if mode == Mode::Import {
        sweep::store::cut_over(pool, summary.provider, until).await?;
    }
    Ok(Imported::from(summary))
}

/// The JSON line of an import from a provider's API.
#[derive(Debug, Serialize)]
struct Imported {
    provider: &'static str,
    since: i64,
    until: i64,
    listed: u64,
    /// Recorded `imported` now (in a dry run: would be).
    imported: u64,
    already_seen: u64,
    skipped: u64,
    pages: u64,
    requests: u64,
    dry_run: bool,
}

impl From<Summary> for Imported {
    fn from(s: Summary) -> Self {
        Imported {
            provider: s.provider,
            since: s.since,
            until: s.until,
            listed: s.listed,
            imported: s.recovered,
            already_seen: s.already_seen,
            skipped: s.skipped,
            pages: s.pages,
            requests: s.requests,
            dry_run: s.dry_run,
        }
    }
}

/// `--since`: a duration (`72h`), or a time in UTC, RFC 3339 with `Z`
/// (`2026-12-06T09:00:00Z`; without the `Z`, UTC all the same), which is
/// how far back that time is now: after a restore, the backup's time.
fn parse_since(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(duration) = humantime::parse_duration(text) {
        return Ok(duration);
    }
    let at = humantime::parse_rfc3339_weak(text).map_err(|_| {
        "expected a duration (72h, 30m) or a time in UTC (2026-12-06T09:00:00Z)".to_owned()
    })?;
    std::time::SystemTime::now()
        .duration_since(at)
        .map_err(|_| format!("{text} is in the future"))
}

/// [`window`], starting no earlier than `provider`'s cut-over.
async fn floored(
    pool: &PgPool,
    clock: &Clock,
    provider: &str,
    since: Duration,
) -> anyhow::Result<(i64, i64)> {
    let (since, until) = window(clock, since);
    Ok((sweep::floor(pool, provider, since).await?, until))
}

/// `[now - since, now]` in Unix seconds (the current second included).
fn window(clock: &Clock, since: Duration) -> (i64, i64) {
    let now = clock.now();
    let since = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
    (now.saturating_sub(since).max(0), now + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_is_a_duration_or_a_time_before_now() {
        assert_eq!(parse_since("72h").unwrap(), Duration::from_secs(72 * 3600));
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        let stamp = humantime::format_rfc3339_seconds(hour_ago).to_string();
        let since = parse_since(&stamp).unwrap().as_secs();
        assert!((3599..=3602).contains(&since), "{stamp}: {since}");
        assert!(
            parse_since("2999-01-01T00:00:00Z")
                .unwrap_err()
                .contains("future")
        );
        assert!(parse_since("yesterday").is_err());
    }
}
