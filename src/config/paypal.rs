//! PayPal's webhook settings: the endpoints' ids and where its signing
//! certificates are kept.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Args)]
pub struct PaypalArgs {
    /// The webhook ids PayPal gave your endpoints, comma-separated; a
    /// delivery signed for any of them is accepted. Unset: /webhooks/paypal
    /// is 404.
    #[arg(long, env = "PAYPAL_WEBHOOK_ID", default_value = "")]
    pub paypal_webhook_id: String,

    /// Where PayPal's signing certificates are kept as `<CERT-id>.pem`. A
    /// certificate found there is used without fetching (pin one to run
    /// offline); fetched ones are written there. Unset: kept in memory only.
    #[arg(long, env = "WEBHOOKD_PAYPAL_CERT_DIR")]
    pub paypal_cert_dir: Option<PathBuf>,

    /// Longest one certificate fetch from PayPal may take; a delivery whose
    /// certificate cannot be had is answered 503 (PayPal retries).
    #[arg(long, env = "WEBHOOKD_PAYPAL_CERT_TIMEOUT", value_parser = humantime::parse_duration, default_value = "5s")]
    pub paypal_cert_timeout: Duration,

    /// Whose deliveries are accepted: PayPal's `live` environment, its
    /// `sandbox`, or `both`. Set `live` in production, so that a sandbox
    /// webhook id left in PAYPAL_WEBHOOK_ID cannot credit real wallets.
    #[arg(long, env = "WEBHOOKD_PAYPAL_ENV", value_enum, default_value_t = PaypalEnv::Both)]
    pub paypal_env: PaypalEnv,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PaypalEnv {
    Live,
    Sandbox,
    Both,
}

/// The webhook id PayPal's public simulator signs for: anyone can have
/// PayPal sign a sample event for it, so no endpoint may accept it.
pub const SIMULATOR_WEBHOOK_ID: &str = "WEBHOOK_ID";

impl PaypalArgs {
    /// The configured webhook ids, trimmed, without empty items.
    pub fn webhook_ids(&self) -> Vec<String> {
        self.paypal_webhook_id
            .split(',')
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .collect()
    }
}
