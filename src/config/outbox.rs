//! The drainer's settings (`WEBHOOKD_OUTBOX_*`, `WEBHOOKD_SINK_*`).

use std::time::Duration;

use clap::Args;
use secrecy::SecretString;

/// `WEBHOOKD_OUTBOX_ORDER`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutboxOrder {
    #[default]
    None,
    Key,
}

#[derive(Debug, Clone, Args)]
pub struct OutboxSettings {
    /// Deliver outbox rows by POSTing them here (signed, Standard Webhooks).
    /// Unset: the `log` sink, which only logs them.
    #[arg(long, env = "WEBHOOKD_SINK_URL", hide_env_values = true)]
    pub sink_url: Option<SecretString>,

    /// The `whsec_...` secret the receiving app verifies deliveries with.
    #[arg(long, env = "WEBHOOKD_SINK_SECRET", hide_env_values = true)]
    pub sink_secret: Option<SecretString>,

    /// Which topics the sink `default` (WEBHOOKD_SINK_URL) takes: patterns,
    /// comma-separated, `*` for any run of characters. Unset: every topic.
    #[arg(long, env = "WEBHOOKD_SINK_TOPICS")]
    pub sink_topics: Option<String>,

    /// The named sinks, `WEBHOOKD_SINK_<NAME>_URL`, `_SECRET` and `_TOPICS`
    /// ([`super::sinks_from_env`]), and the sink `default`: every sink.
    #[arg(skip)]
    pub sinks: Vec<super::SinkEntry>,

    /// Longest a delivery may take.
    #[arg(long, env = "WEBHOOKD_SINK_TIMEOUT", value_parser = humantime::parse_duration, default_value = "10s")]
    pub sink_timeout: Duration,

    /// Largest request body the http sink sends; a row whose body is larger
    /// is dead-lettered unsent.
    #[arg(long, env = "WEBHOOKD_SINK_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub sink_max_body_bytes: u64,

    /// Rows leased per statement, and most rows a drainer holds at once.
    #[arg(long, env = "WEBHOOKD_OUTBOX_BATCH", default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=10_000))]
    pub outbox_batch: i64,

    /// Most payload bytes a drainer holds at once (a larger row is leased
    /// alone): bounds its memory, whatever the size of the rows.
    #[arg(long, env = "WEBHOOKD_OUTBOX_BATCH_BYTES", default_value_t = 8 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1..=(1 << 40)))]
    pub outbox_batch_bytes: u64,

    /// Deliveries in flight at once.
    #[arg(long, env = "WEBHOOKD_OUTBOX_CONCURRENCY", default_value_t = 16)]
    pub outbox_concurrency: usize,

    /// `key`: rows with one ordering key (a wallet, a subscription, a
    /// payment) are delivered in the order they were written, one at a
    /// time; other keys are not held back. `none`: any order, fastest.
    #[arg(
        long,
        env = "WEBHOOKD_OUTBOX_ORDER",
        value_enum,
        default_value = "none"
    )]
    pub outbox_order: OutboxOrder,

    /// How long a leased row is hidden from other drainers (above the sink timeout).
    #[arg(long, env = "WEBHOOKD_OUTBOX_LEASE", value_parser = humantime::parse_duration, default_value = "60s")]
    pub outbox_lease: Duration,

    /// Fallback poll interval, besides LISTEN/NOTIFY.
    #[arg(long, env = "WEBHOOKD_OUTBOX_POLL", value_parser = humantime::parse_duration, default_value = "5s")]
    pub outbox_poll: Duration,

    /// Attempts before a row is dead-lettered.
    #[arg(long, env = "WEBHOOKD_OUTBOX_MAX_ATTEMPTS", default_value_t = 20, value_parser = clap::value_parser!(i32).range(1..))]
    pub outbox_max_attempts: i32,

    /// Longest wait between two attempts (also bounds a sink's Retry-After).
    #[arg(long, env = "WEBHOOKD_OUTBOX_BACKOFF_CAP", value_parser = humantime::parse_duration, default_value = "1h")]
    pub outbox_backoff_cap: Duration,
}
