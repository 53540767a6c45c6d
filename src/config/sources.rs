//! Generic sources (`WEBHOOKD_SOURCE_<NAME>_*`) and secret lists.

use clap::ValueEnum;

use crate::secrets::{Secrets, parse_secrets};

/// A generic source mounted at `POST /webhooks/<name>`.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// Lower case; the `provider` column of its events.
    pub name: String,
    pub scheme: SourceScheme,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceScheme {
    StandardWebhooks,
    Github,
    Shopify,
}

/// Names that belong to the built-in providers.
const RESERVED_SOURCE_NAMES: [&str; 2] = ["stripe", "razorpay"];

/// Reads every `WEBHOOKD_SOURCE_<NAME>_SCHEME` (with its
/// `WEBHOOKD_SOURCE_<NAME>_SECRET`) from `vars`, sorted by name. A scheme
/// without a secret, an unknown scheme or a reserved name is an error: a
/// source is never mounted half-configured.
pub fn sources_from_env(
    vars: impl IntoIterator<Item = (String, String)>,
) -> anyhow::Result<Vec<SourceSettings>> {
    let vars: std::collections::BTreeMap<String, String> = vars.into_iter().collect();
    let mut sources = Vec::new();
    for (key, scheme) in &vars {
        let Some(upper) = key
            .strip_prefix("WEBHOOKD_SOURCE_")
            .and_then(|rest| rest.strip_suffix("_SCHEME"))
        else {
            continue;
        };
        if upper.is_empty()
            || !upper
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            anyhow::bail!("{key}: a source name is upper-case letters, digits and underscores");
        }
        let name = upper.to_ascii_lowercase();
        if RESERVED_SOURCE_NAMES.contains(&name.as_str()) {
            anyhow::bail!("{key}: `{name}` is a built-in provider, not a generic source");
        }
        let scheme = SourceScheme::from_str(scheme.trim(), true).map_err(|_| {
            anyhow::anyhow!("{key}: unknown scheme; expected standard-webhooks, github or shopify")
        })?;
        let secret_key = format!("WEBHOOKD_SOURCE_{upper}_SECRET");
        let secrets = parse_secrets(vars.get(&secret_key).map_or("", String::as_str))
            .map_err(anyhow::Error::msg)?;
        if secrets.is_empty() {
            anyhow::bail!(
                "{key} is set but {secret_key} is not: a source is never accepted unverified"
            );
        }
        sources.push(SourceSettings {
            name,
            scheme,
            secrets,
        });
    }
    Ok(sources)
}

/// `WEBHOOKD_SOURCE_<NAME>_LIVEMODE`: the mode of the events a Stripe
/// source takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LiveMode {
    /// Live events only.
    #[value(name = "true")]
    Live,
    /// Test-mode events only.
    #[value(name = "false")]
    Test,
    /// Either.
    Any,
}

impl LiveMode {
    /// `Some(livemode)` of the events taken; `None`: either.
    pub fn livemode(self) -> Option<bool> {
        match self {
            LiveMode::Live => Some(true),
            LiveMode::Test => Some(false),
            LiveMode::Any => None,
        }
    }
}

/// Which events the built-in source `stripe` takes: its mode and its
/// Connect accounts (see [`crate::providers::Scope`]). Read as text, so
/// that an empty value (as `${VAR:-}` in compose files gives) is unset,
/// and checked by [`StripeScopeArgs::scope`] at start-up.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StripeScopeArgs {
    /// Which events the source `stripe` takes: `true` (live only), `false`
    /// (test mode only) or `any`. Unset: the mode of STRIPE_API_KEY when
    /// one is given (`sk_live_`/`rk_live_` or `sk_test_`/`rk_test_`), else
    /// `any`. Events of the other mode are recorded `rejected` and skipped
    /// by the sweep.
    #[arg(long, env = "WEBHOOKD_SOURCE_STRIPE_LIVEMODE")]
    pub stripe_livemode: Option<String>,
    /// `true`: the source `stripe` takes events of connected accounts (a
    /// Connect endpoint's, which carry `account`); unset or `false`, they
    /// are recorded `rejected`.
    #[arg(long, env = "WEBHOOKD_SOURCE_STRIPE_CONNECT")]
    pub stripe_connect: Option<String>,
    /// With WEBHOOKD_SOURCE_STRIPE_CONNECT: only these connected accounts'
    /// events (comma-separated `acct_…` ids); unset: any account's.
    #[arg(long, env = "WEBHOOKD_STRIPE_CONNECT_ACCOUNTS")]
    pub stripe_connect_accounts: Option<String>,
}

impl StripeScopeArgs {
    /// The scope of the source `stripe`, whose sweep reads with a key of
    /// mode `key_mode` (`None`: no key, or a key of no known mode). A
    /// mode set against the key's is refused: that key would sweep the
    /// other mode's events.
    pub fn scope(&self, key_mode: Option<bool>) -> anyhow::Result<crate::providers::Scope> {
        use crate::providers::{is_identifier, mode_name};
        let set = match set_text(&self.stripe_livemode) {
            None => None,
            Some(text) => Some(LiveMode::from_str(text, true).map_err(|_| {
                anyhow::anyhow!("WEBHOOKD_SOURCE_STRIPE_LIVEMODE is true, false or any")
            })?),
        };
        let livemode = match (set, key_mode) {
            (Some(set), Some(key)) if set.livemode().is_some_and(|mode| mode != key) => {
                anyhow::bail!(
                    "STRIPE_API_KEY is a {} key but WEBHOOKD_SOURCE_STRIPE_LIVEMODE takes {} events: \
                     use a key of the source's mode",
                    mode_name(key),
                    mode_name(!key)
                )
            }
            (Some(set), _) => set.livemode(),
            (None, key) => key,
        };
        let connect = match set_text(&self.stripe_connect).map(str::to_ascii_lowercase) {
            None => false,
            Some(text) => match text.as_str() {
                "true" | "1" | "yes" | "on" => true,
                "false" | "0" | "no" | "off" => false,
                _ => anyhow::bail!("WEBHOOKD_SOURCE_STRIPE_CONNECT is true or false"),
            },
        };
        let accounts = match set_text(&self.stripe_connect_accounts) {
            None => None,
            Some(list) => {
                let accounts: std::collections::BTreeSet<String> = list
                    .split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned)
                    .collect();
                anyhow::ensure!(
                    accounts.iter().all(|a| is_identifier(a)),
                    "WEBHOOKD_STRIPE_CONNECT_ACCOUNTS: each account is an id such as acct_1A2b3C"
                );
                Some(accounts)
            }
        };
        Ok(crate::providers::Scope {
            livemode,
            connect,
            accounts,
        })
    }
}

/// A setting's text, trimmed; `None` when unset or empty.
fn set_text(value: &Option<String>) -> Option<&str> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|text| !text.is_empty())
}
