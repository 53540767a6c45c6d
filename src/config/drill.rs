//! `webhookd drill`: how much to send, how, and what to sign it with.

use std::time::Duration;

use clap::Args;

use super::{Secrets, parse_secrets};

#[derive(Debug, Clone, Args)]
pub struct DrillArgs {
    /// Unique events to send (at most, with `--duration`).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub events: u64,
    /// Copies of each event, fired at the same moment (a retry storm).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub duplicates: u64,
    /// Events in flight at once (each with all its copies).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub concurrency: u64,
    /// Wallets the credits spread over.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub users: u64,
    /// A realistic mix instead of credits only: 50% Stripe
    /// `payment_intent.succeeded`, 10% `charge.succeeded`, 10%
    /// `charge.refunded` (of a credit of the run, sometimes before it), 10%
    /// `customer.subscription.updated`, 20% Razorpay `payment.captured`
    /// (needs RAZORPAY_WEBHOOK_SECRET).
    #[arg(long)]
    pub mix: bool,
    /// Stop starting new events after this long (e.g. `15s`); the run is
    /// verified over what was sent.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Base URL of the webhookd under test. Repeat it to spread each event's
    /// copies over several servers (of one database).
    #[arg(long = "url", default_value = "http://127.0.0.1:8080")]
    pub urls: Vec<String>,
    /// Give up on a request after this long of retrying.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "120s")]
    pub give_up_after: Duration,
    #[arg(long, env = "STRIPE_WEBHOOK_SECRET", hide_env_values = true, value_parser = parse_secrets, default_value = "")]
    pub stripe_webhook_secret: Secrets,
    #[arg(long, env = "RAZORPAY_WEBHOOK_SECRET", hide_env_values = true, value_parser = parse_secrets, default_value = "")]
    pub razorpay_webhook_secret: Secrets,
}
