//! The settings of `serve` and of the database connection, from the command
//! line, the environment (12-factor: every flag also reads an environment
//! variable) and the configuration file ([`Layers`]). Validated once, at
//! start-up. The parser itself, and the other commands' arguments, are in
//! `src/cli/`.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser, ValueEnum};
use secrecy::{ExposeSecret, SecretString};

pub use crate::telemetry::LogFormat;

mod admin;
mod connections;
mod invalid;
mod keys;
mod layers;
mod outbox;
mod parse;
mod paypal;
mod refused;
mod sinks;
mod sources;
mod sweep;
use crate::secrets::{Secrets, parse_secrets};
pub use admin::{AdminArgs, AdminListen, AdminToken, DEFAULT_ADMIN_LISTEN, MIN_TOKEN_CHARS};
pub use connections::ConnectionSettings;
pub use invalid::Invalid;
pub use keys::Keys;
pub use layers::{CONFIG_VARIABLE, Layers, Origin, Setting, file_named, flags_of};
pub use outbox::{OutboxOrder, OutboxSettings};
pub use parse::parse;
pub use paypal::{PaypalArgs, PaypalEnv, SIMULATOR_WEBHOOK_ID};
pub use refused::refused;
pub use sinks::{DEFAULT_SINK, SinkEntry, Topics, sinks_from_env};
pub use sources::{
    LiveMode, SourceEffects, SourceScheme, SourceSettings, StripeScopeArgs, sources_from_env,
};
pub use sweep::{PeriodicSweepArgs, RazorpayApiArgs, StripeApiArgs};

/// Which parts of the service a `serve` process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// The HTTP API and the outbox drainer.
    All,
    /// Only the HTTP API (run drainers elsewhere).
    Api,
    /// Only the outbox drainer (HTTP serves only health and metrics).
    Worker,
}

impl Role {
    pub fn serves_webhooks(self) -> bool {
        matches!(self, Role::All | Role::Api)
    }

    pub fn drains(self) -> bool {
        matches!(self, Role::All | Role::Worker)
    }
}

/// What sits between webhookd and Postgres (`WEBHOOKD_DB_POOLER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum DbPooler {
    /// Nothing, or a pooler in session mode.
    #[default]
    None,
    /// A pooler in transaction mode.
    Transaction,
}

#[derive(Debug, Clone, Args)]
pub struct DatabaseSettings {
    /// Postgres connection string, e.g. postgres://user:pass@host:5432/webhookd.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    pub database_url: Option<SecretString>,

    /// What DATABASE_URL reaches Postgres through: `none` (Postgres itself,
    /// or a pooler in session mode) or `transaction` (PgBouncer's
    /// `pool_mode = transaction`, or a managed offering's pooler).
    #[arg(
        long,
        env = "WEBHOOKD_DB_POOLER",
        value_enum,
        default_value_t = DbPooler::None,
        global = true
    )]
    pub db_pooler: DbPooler,

    /// A connection string of Postgres itself, past the pooler, for what
    /// needs a session: migrations at start-up and LISTEN. Optional; see
    /// WEBHOOKD_DB_POOLER.
    #[arg(
        long,
        env = "WEBHOOKD_DIRECT_DATABASE_URL",
        hide_env_values = true,
        global = true
    )]
    pub direct_database_url: Option<SecretString>,

    /// Most connections the pool opens.
    #[arg(
        long,
        env = "WEBHOOKD_DB_MAX_CONNECTIONS",
        default_value_t = 16,
        global = true
    )]
    pub db_max_connections: u32,

    /// How long a request waits for a pooled connection before answering 503.
    #[arg(long, env = "WEBHOOKD_DB_ACQUIRE_TIMEOUT", value_parser = humantime::parse_duration, default_value = "5s", global = true)]
    pub db_acquire_timeout: Duration,

    /// Postgres cancels any statement (a lock wait included) that runs longer,
    /// and ends any transaction left idle that long; keep it below the
    /// request timeout. Migrations are exempt.
    #[arg(long, env = "WEBHOOKD_DB_STATEMENT_TIMEOUT", value_parser = humantime::parse_duration, default_value = "10s", global = true)]
    pub db_statement_timeout: Duration,
}

impl DatabaseSettings {
    pub fn url(&self) -> anyhow::Result<&str> {
        match &self.database_url {
            Some(url) if !url.expose_secret().trim().is_empty() => Ok(url.expose_secret()),
            _ => Err(Invalid::one(
                "DATABASE_URL is not set (pass --database-url, set DATABASE_URL or database_url in the configuration file)",
            )
            .into()),
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct ServeSettings {
    /// Address to listen on.
    #[arg(long, env = "WEBHOOKD_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,

    /// Where providers reach this service, e.g. `https://hooks.example.com`:
    /// `doctor` checks that each provider's endpoint is `<it>/webhooks/<source>`.
    /// Empty: unset.
    #[arg(long, env = "WEBHOOKD_PUBLIC_URL", value_parser = parse_public_url)]
    pub public_url: Option<String>,

    /// Stripe endpoint signing secrets (`whsec_...`), comma-separated; any one
    /// may match, so a rotation lists old and new. Unset: /webhooks/stripe is 404.
    #[arg(long, env = "STRIPE_WEBHOOK_SECRET", hide_env_values = true, value_parser = parse_secrets, default_value = "")]
    pub stripe_webhook_secret: Secrets,

    /// Razorpay webhook secrets, comma-separated; any one may match (Razorpay
    /// retries older events with the old secret). Unset: /webhooks/razorpay is 404.
    #[arg(long, env = "RAZORPAY_WEBHOOK_SECRET", hide_env_values = true, value_parser = parse_secrets, default_value = "")]
    pub razorpay_webhook_secret: Secrets,

    /// The sources, read from `WEBHOOKD_SOURCE_<NAME>_*` (see
    /// [`sources_from_env`]): the named ones, and the built-in ones' own
    /// settings.
    #[arg(skip)]
    pub sources: Vec<SourceSettings>,

    /// Largest accepted difference, in seconds, between a signed timestamp and
    /// now, in either direction.
    #[arg(long, env = "WEBHOOKD_TOLERANCE_SECS", default_value_t = 300)]
    pub tolerance_secs: u64,

    /// Largest accepted request body in bytes; larger bodies get 413.
    #[arg(long, env = "WEBHOOKD_MAX_BODY_BYTES", default_value_t = 2 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1..=(64 * 1024 * 1024)))]
    pub max_body_bytes: u64,

    /// Longest a webhook request may take before it is answered 503 (and its
    /// transaction rolled back; a batched credit is taken out of its batch
    /// before the commit).
    #[arg(long, env = "WEBHOOKD_REQUEST_TIMEOUT", value_parser = humantime::parse_duration, default_value = "30s")]
    pub request_timeout: Duration,

    /// How long shutdown waits for in-flight requests and deliveries after SIGTERM.
    #[arg(long, env = "WEBHOOKD_SHUTDOWN_GRACE", value_parser = humantime::parse_duration, default_value = "25s")]
    pub shutdown_grace: Duration,

    /// What this process runs: `all`, `api` (no drainer) or `worker` (the
    /// drainer; HTTP then serves only /healthz, /readyz and /metrics).
    #[arg(long, env = "WEBHOOKD_ROLE", value_enum, default_value_t = Role::All)]
    pub role: Role,

    /// Most credit events that share one transaction (group commit). 1
    /// gives each its own transaction, still on the batched statements.
    #[arg(long, env = "WEBHOOKD_BATCH_MAX_EVENTS", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub batch_max_events: u32,

    /// Most batches in flight at once, each holding one pooled connection.
    /// One is fastest when credits share wallets (concurrent batches would
    /// wait for each other's wallet rows); keep it below
    /// WEBHOOKD_DB_MAX_CONNECTIONS.
    #[arg(long, env = "WEBHOOKD_BATCH_CONCURRENCY", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub batch_concurrency: u32,

    /// How long a payment whose owner is not known yet waits for the event
    /// that brings it (a Checkout Session, a customer) before it is
    /// rejected with reason `no owner` and announced as `payment.unowned`.
    #[arg(long, env = "WEBHOOKD_OWNER_WAIT", value_parser = humantime::parse_duration, default_value = "72h")]
    pub owner_wait: Duration,

    #[command(flatten)]
    pub connections: ConnectionSettings,

    #[command(flatten)]
    pub admin: AdminArgs,

    #[command(flatten)]
    pub paypal: PaypalArgs,

    #[command(flatten)]
    pub sweep: PeriodicSweepArgs,

    #[command(flatten)]
    pub outbox: OutboxSettings,
}

/// `WEBHOOKD_PUBLIC_URL`: an `http(s)` URL with no query or fragment,
/// without its trailing `/`; empty (as compose passes an unset variable).
fn parse_public_url(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Ok(String::new());
    }
    let refused = || {
        "expected the service's URL as providers reach it, e.g. https://hooks.example.com"
            .to_owned()
    };
    let url = reqwest::Url::parse(text.trim()).map_err(|_| refused())?;
    let fits = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some()
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    if !fits {
        return Err(refused());
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// `serve` alone, as its arguments are parsed.
#[derive(Parser)]
struct ServeOnly {
    #[command(flatten)]
    serve: ServeSettings,
}

impl ServeSettings {
    /// `WEBHOOKD_PUBLIC_URL`, when it is set.
    pub fn public_url(&self) -> Option<&str> {
        self.public_url.as_deref().filter(|url| !url.is_empty())
    }

    /// The settings of `webhookd` run without a subcommand, which means
    /// `webhookd serve`: the command line's defaults, overridden by the
    /// environment (`WEBHOOKD_*`, the secrets).
    pub fn from_env() -> Self {
        ServeOnly::parse_from(["webhookd"]).serve
    }

    /// As [`ServeSettings::from_env`], with the configuration file under
    /// the environment, and the generic sources.
    pub fn from_layers(layers: &Layers) -> Result<Self, Invalid> {
        let only: ServeOnly = parse(layers, vec!["webhookd".into()])?;
        only.serve.with_sources(layers)
    }

    /// These settings with the generic sources the layers configure.
    pub fn with_sources(mut self, layers: &Layers) -> Result<Self, Invalid> {
        self.sources = sources_from_env(layers.variables())
            .map_err(|error| Invalid::one(format!("{error:#}")))?;
        self.outbox.sinks = sinks_from_env(&self.outbox, layers.variables())
            .map_err(|error| Invalid::one(format!("{error:#}")))?;
        Ok(self)
    }
}

/// The command line's defaults, whatever the environment holds: an exported
/// `WEBHOOKD_*` never changes what a test or an embedding program gets.
impl Default for ServeSettings {
    fn default() -> Self {
        defaults()
    }
}

/// The command line's defaults of the arguments `T`, the environment
/// ignored (every one of them must have a default).
pub(crate) fn defaults<T: Args + clap::FromArgMatches>() -> T {
    let command =
        T::augment_args(clap::Command::new("webhookd")).mut_args(|arg| arg.env(None::<&str>));
    let matches = command
        .try_get_matches_from(["webhookd"])
        .expect("every setting has a default");
    T::from_arg_matches(&matches).expect("the defaults parse")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs [`defaults_in_a_child`] in a child process whose environment
    /// sets a variable: the environment of this process stays untouched.
    #[test]
    fn serve_defaults_ignore_the_environment() {
        let exe = std::env::current_exe().unwrap();
        let status = std::process::Command::new(exe)
            .args(["--exact", "config::tests::defaults_in_a_child", "--quiet"])
            .env("WEBHOOKD_TOLERANCE_SECS", "7")
            .env("WEBHOOKD_TEST_CHILD", "1")
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn defaults_in_a_child() {
        if std::env::var_os("WEBHOOKD_TEST_CHILD").is_none() {
            return;
        }
        assert_eq!(ServeSettings::default().tolerance_secs, 300);
        assert_eq!(ServeSettings::from_env().tolerance_secs, 7);
    }

    #[test]
    fn serve_defaults_match_the_design() {
        let serve = ServeSettings::default();
        assert_eq!(serve.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(serve.tolerance_secs, 300);
        assert_eq!(serve.max_body_bytes, 2 * 1024 * 1024);
        assert_eq!(
            serve.admin.listen(),
            (Some("127.0.0.1:9090".parse().unwrap()), false)
        );
        assert!(
            serve.admin.admin_token.0.is_none(),
            "the console is off by default"
        );
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_public_url_is_an_http_url_without_its_trailing_slash() {
        assert_eq!(
            parse_public_url(" https://hooks.example.com/ ").unwrap(),
            "https://hooks.example.com"
        );
        assert_eq!(
            parse_public_url("http://example.com/prefix/").unwrap(),
            "http://example.com/prefix"
        );
        for refused in [
            "hooks.example.com",
            "ftp://x",
            "https://x/?a=1",
            "https://u:p@x",
        ] {
            assert!(parse_public_url(refused).is_err(), "{refused}");
        }
        assert_eq!(parse_public_url(" ").unwrap(), "", "unset");
    }

    #[test]
    fn sources_are_read_from_the_environment() {
        let sources = sources_from_env(env(&[
            ("WEBHOOKD_SOURCE_GH_SCHEME", "github"),
            ("WEBHOOKD_SOURCE_GH_SECRET", "a,b"),
            ("WEBHOOKD_SOURCE_MY_SHOP_SCHEME", "Shopify"),
            ("WEBHOOKD_SOURCE_MY_SHOP_SECRET", "s"),
            ("WEBHOOKD_SOURCE_SVIX_SCHEME", "standard-webhooks"),
            ("WEBHOOKD_SOURCE_SVIX_SECRET", "whsec_c2VjcmV0"),
            ("UNRELATED", "x"),
        ]))
        .unwrap();
        let summary: Vec<_> = sources
            .iter()
            .map(|s| (s.name.as_str(), s.scheme, s.secrets.iter().count()))
            .collect();
        assert_eq!(
            summary,
            [
                ("gh", SourceScheme::Github, 2),
                ("my_shop", SourceScheme::Shopify, 1),
                ("svix", SourceScheme::StandardWebhooks, 1)
            ]
        );
    }

    #[test]
    fn half_configured_sources_are_refused() {
        for vars in [
            env(&[("WEBHOOKD_SOURCE_GH_SCHEME", "github")]),
            env(&[
                ("WEBHOOKD_SOURCE_GH_SCHEME", "gitlab"),
                ("WEBHOOKD_SOURCE_GH_SECRET", "s"),
            ]),
            env(&[
                ("WEBHOOKD_SOURCE_STRIPE_SCHEME", "github"),
                ("WEBHOOKD_SOURCE_STRIPE_SECRET", "s"),
            ]),
            env(&[
                ("WEBHOOKD_SOURCE_g-h_SCHEME", "github"),
                ("WEBHOOKD_SOURCE_g-h_SECRET", "s"),
            ]),
        ] {
            let error = sources_from_env(vars.clone()).unwrap_err().to_string();
            assert!(!error.contains("\"s\""), "{error}");
            assert!(error.contains("WEBHOOKD_SOURCE_"), "{vars:?}: {error}");
        }
    }
}
