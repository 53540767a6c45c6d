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
