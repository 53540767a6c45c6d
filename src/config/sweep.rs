//! The periodic sweep `serve` runs, and how to reach each provider's API
//! (which the `sweep`, `import` and `reconcile` commands read too).

use std::time::Duration;

use clap::Args;
use secrecy::SecretString;

use super::StripeScopeArgs;

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

impl RazorpayApiArgs {
    /// Whether both the key id and its secret are set: a sweep of
    /// Razorpay can run.
    pub fn configured(&self) -> bool {
        let id = (self.razorpay_key_id.as_ref()).is_some_and(|id| !id.trim().is_empty());
        id && crate::secrets::non_empty(&self.razorpay_key_secret).is_some()
    }
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
    /// `subscriptions`: a subscription event that ties with the stored
    /// state on `created` (Stripe's times are to the second) is given the
    /// subscription as `GET /v1/subscriptions/{id}` serves it now before it
    /// applies. Unset or `off`: the later arrival applies.
    #[arg(long, env = "WEBHOOKD_STRIPE_REFRESH_ON_TIE")]
    pub stripe_refresh_on_tie: Option<String>,
    #[command(flatten)]
    pub scope: StripeScopeArgs,
}

/// The command line's defaults, whatever the environment holds (as
/// [`crate::config::ServeSettings::default`]): no key, Stripe's own API.
impl Default for StripeApiArgs {
    fn default() -> Self {
        super::defaults()
    }
}

impl StripeApiArgs {
    /// Whether a subscription event that ties with the stored state is
    /// refreshed from the API (`WEBHOOKD_STRIPE_REFRESH_ON_TIE`), which
    /// needs `STRIPE_API_KEY`.
    pub fn refresh_subscriptions_on_tie(&self) -> anyhow::Result<bool> {
        use secrecy::ExposeSecret;
        let on = match self.stripe_refresh_on_tie.as_deref().map(str::trim) {
            None | Some("" | "off") => false,
            Some("subscriptions") => true,
            Some(_) => anyhow::bail!("WEBHOOKD_STRIPE_REFRESH_ON_TIE is subscriptions or off"),
        };
        let keyed =
            (self.stripe_api_key.as_ref()).is_some_and(|k| !k.expose_secret().trim().is_empty());
        anyhow::ensure!(
            !on || keyed,
            "WEBHOOKD_STRIPE_REFRESH_ON_TIE=subscriptions reads Stripe's API: set STRIPE_API_KEY"
        );
        Ok(on)
    }

    /// The events the source `stripe` takes: its settings, and the mode of
    /// the key when they name none ([`StripeScopeArgs::scope`]).
    pub fn scope(&self) -> anyhow::Result<crate::providers::Scope> {
        use secrecy::ExposeSecret;
        let key_mode = self
            .stripe_api_key
            .as_ref()
            .and_then(|key| crate::providers::key_mode(key.expose_secret().trim()));
        self.scope.scope(key_mode)
    }
}

/// The periodic sweep `serve` runs in every process that drains the outbox.
#[derive(Debug, Clone, Args)]
pub struct PeriodicSweepArgs {
    /// How often to sweep each provider whose API key is configured; `0`
    /// turns the periodic sweep off.
    #[arg(long, env = "WEBHOOKD_SWEEP_INTERVAL", value_parser = humantime::parse_duration, default_value = "10m")]
    pub sweep_interval: Duration,
    /// How far back a periodic sweep reaches at most (default: `72h` for
    /// Stripe and PayPal, which retry a delivery for three days; `24h` for
    /// Razorpay).
    #[arg(long, env = "WEBHOOKD_SWEEP_WINDOW", value_parser = humantime::parse_duration)]
    pub sweep_window: Option<Duration>,
    #[command(flatten)]
    pub stripe: StripeApiArgs,
    #[command(flatten)]
    pub razorpay: RazorpayApiArgs,
    #[command(flatten)]
    pub paypal: crate::sweep::paypal::PaypalApiArgs,
}
