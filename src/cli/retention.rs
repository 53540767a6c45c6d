//! How long events and delivered outbox rows are kept: `prune` deletes
//! past the retention, `reconcile` checks within it.

use std::time::Duration;

use clap::Args;

/// The retention `prune` deletes past and `reconcile` checks within.
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
