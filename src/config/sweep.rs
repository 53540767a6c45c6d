//! `webhookd sweep` and `webhookd import`: which provider API, which window.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use secrecy::SecretString;

#[derive(Debug, Subcommand)]
pub enum SweepCommand {
    /// List Stripe's events (`GET /v1/events`) of the window and apply those
    /// never delivered, through the same path as a webhook.
    Stripe(StripeSweepArgs),
    /// List Razorpay's payments and refunds of the window (it has no events
    /// API) and apply those never credited or debited.
    Razorpay(RazorpaySweepArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RazorpaySweepArgs {
    /// How far back to look (e.g. `24h`: Razorpay retries a delivery for a day).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "24h")]
    pub since: Duration,
    /// List and count; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub api: RazorpayApiArgs,
}

/// How to reach Razorpay's API.
#[derive(Debug, Clone, Args)]
pub struct RazorpayApiArgs {
    /// The API key id (`rzp_live_…`).
    #[arg(long, env = "RAZORPAY_KEY_ID")]
    pub razorpay_key_id: Option<String>,
    /// The API key secret.
    #[arg(long, env = "RAZORPAY_KEY_SECRET", hide_env_values = true)]
    pub razorpay_key_secret: Option<SecretString>,
    /// Razorpay's API base: `https://` (plain `http://` only on a loopback
    /// address, for tests).
    #[arg(
        long,
        env = "WEBHOOKD_RAZORPAY_API_BASE",
        default_value = "https://api.razorpay.com"
    )]
    pub razorpay_api_base: String,
}

#[derive(Debug, Clone, Args)]
pub struct StripeSweepArgs {
    /// How far back to look (e.g. `72h`; Stripe keeps events for 30 days).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "72h")]
    pub since: Duration,
    /// List and count; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub api: StripeApiArgs,
}

/// How to reach Stripe's API.
#[derive(Debug, Clone, Args)]
pub struct StripeApiArgs {
    /// A Stripe secret or restricted key; read access to Events is enough.
    #[arg(long, env = "STRIPE_API_KEY", hide_env_values = true)]
    pub stripe_api_key: Option<SecretString>,
    /// Stripe's API base: `https://` (plain `http://` only on a loopback
    /// address, for tests).
    #[arg(
        long,
        env = "WEBHOOKD_STRIPE_API_BASE",
        default_value = "https://api.stripe.com"
    )]
    pub stripe_api_base: String,
    /// Most requests a second to the provider's API (Stripe allows more;
    /// this leaves room for the application's own calls).
    #[arg(long, env = "WEBHOOKD_SWEEP_RATE", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rate: u32,
}

/// `webhookd import stripe [--since 30d]`, or `webhookd import --provider
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
}

/// The periodic sweep `serve` runs in every process that drains the outbox.
#[derive(Debug, Clone, Args)]
pub struct PeriodicSweepArgs {
    /// How often to sweep each provider whose API key is configured; `0`
    /// turns the periodic sweep off.
    #[arg(long, env = "WEBHOOKD_SWEEP_INTERVAL", value_parser = humantime::parse_duration, default_value = "10m")]
    pub sweep_interval: Duration,
    /// How far back a periodic sweep reaches at most (default: `72h` for
    /// Stripe, which retries a delivery for three days; `24h` for Razorpay).
    #[arg(long, env = "WEBHOOKD_SWEEP_WINDOW", value_parser = humantime::parse_duration)]
    pub sweep_window: Option<Duration>,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportSource {
    Stripe,
}

/// `webhookd reconcile`, and with `--against`, the ledger against a provider.
#[derive(Debug, Clone, Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub retention: super::RetentionArgs,
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
