//! The arguments of the smaller subcommands.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::{Secrets, parse_secrets};

#[derive(Debug, Clone, Args)]
pub struct RetentionArgs {
    /// How long events and delivered outbox rows are kept, in days.
    #[arg(long, env = "WEBHOOKD_RETENTION_DAYS", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    pub retention_days: u32,
}

impl RetentionArgs {
    pub fn window(&self) -> Duration {
        Duration::from_secs(u64::from(self.retention_days) * 86_400)
    }
}

#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Age past which rows go (e.g. `30d`, `12h`); defaults to the retention.
    /// `reconcile` expects entries' events for the whole retention: prune
    /// sooner only with a matching WEBHOOKD_RETENTION_DAYS.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub older_than: Option<Duration>,
    /// Rows deleted per statement.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    pub batch: i64,
    #[command(flatten)]
    pub retention: RetentionArgs,
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// The newest events first.
    List {
        /// Only this provider's (or source's).
        #[arg(long)]
        provider: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// One event: outcome, detail and the verified payload.
    Show { provider: String, event_id: String },
    /// Re-run a stored event's effects through the same idempotent path.
    Replay { provider: String, event_id: String },
}

#[derive(Debug, Clone, Args)]
pub struct SendArgs {
    /// `stripe` or `razorpay`.
    pub provider: String,
    /// e.g. payment_intent.succeeded, charge.refunded, invoice.paid,
    /// customer.subscription.updated; payment.captured, refund.processed.
    pub event_type: String,
    /// The wallet owner (`metadata.user_id` / `notes.user_id`).
    #[arg(long, default_value = "user_123")]
    pub user: String,
    /// Amount in the currency's minor unit.
    #[arg(long, default_value_t = 2000)]
    pub amount: i64,
    /// The payment the event is about (default: a fresh id); a refund names
    /// the payment it refunds.
    #[arg(long)]
    pub payment: Option<String>,
    /// Base URL of the running webhookd.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    #[arg(long, env = "STRIPE_WEBHOOK_SECRET", hide_env_values = true, value_parser = parse_secrets, default_value = "")]
    pub stripe_webhook_secret: Secrets,
    #[arg(long, env = "RAZORPAY_WEBHOOK_SECRET", hide_env_values = true, value_parser = parse_secrets, default_value = "")]
    pub razorpay_webhook_secret: Secrets,
}

#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// List rows not delivered yet (pending, leased or dead), oldest first.
    List {
        /// Only dead-lettered rows.
        #[arg(long)]
        dead: bool,
        /// Most rows to show.
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Re-queue a dead-lettered row (or all of them) for a fresh set of attempts.
    Retry {
        /// The outbox id (its `webhook-id`).
        #[arg(required_unless_present = "all_dead", conflicts_with = "all_dead")]
        id: Option<i64>,
        /// Every dead-lettered row.
        #[arg(long)]
        all_dead: bool,
    },
}
