//! The sources to mount, from the configuration: the built-in `stripe`,
//! `razorpay` and `paypal` (their keys from STRIPE_WEBHOOK_SECRET,
//! RAZORPAY_WEBHOOK_SECRET and PAYPAL_WEBHOOK_ID, their other settings
//! from `WEBHOOKD_SOURCE_<NAME>_*`) and each named source, with its own
//! keys, scope and what it does with its events.

use crate::config::{
    LiveMode, PaypalArgs, PaypalEnv, ServeSettings, SourceEffects, SourceScheme, SourceSettings,
    StripeApiArgs,
};
use crate::providers::paypal::PaypalSettings;
use crate::providers::paypal::certs::{CertSettings, Env};
use crate::providers::{self, Providers, Scheme, Scope};
use crate::secrets::Secrets;
use crate::sweep::Swept;

/// Each source's own keys, and the events each takes.
pub fn providers_settings(settings: &ServeSettings) -> anyhow::Result<providers::Settings> {
    let keys = |source: &SourceSettings| -> Keys {
        match (source.is_built_in(), source.scheme) {
            (true, SourceScheme::Stripe) => Keys::Secrets(settings.stripe_webhook_secret.clone()),
            (true, SourceScheme::Razorpay) => {
                Keys::Secrets(settings.razorpay_webhook_secret.clone())
            }
            (true, _) => paypal_keys(settings, settings.paypal.webhook_ids()),
            (false, SourceScheme::Paypal) => paypal_keys(settings, source.webhook_ids.clone()),
            (false, _) => Keys::Secrets(source.secrets.clone()),
        }
    };
    Ok(providers::Settings {
        tolerance_secs: settings.tolerance_secs,
        sources: sources(&settings.sweep.stripe, &settings.sources, keys)?,
    })
}

/// What the sources configured do with their events, none mounted: how a
/// replay outside `serve` (`webhookd events replay`) judges a stored
/// event by the source that received it.
pub fn registry(
    stripe: &StripeApiArgs,
    configured: &[SourceSettings],
) -> anyhow::Result<Providers> {
    let sources = sources(stripe, configured, |_| Keys::Secrets(Secrets::default()))?;
    Ok(Providers::registry(&providers::Settings {
        tolerance_secs: 0,
        sources,
    }))
}

/// The built-in source `provider` of `sources`, as a sweep of its
/// provider's API recovers its events.
pub fn swept(sources: &Providers, provider: &str) -> Swept {
    Swept {
        scope: sources.scope(provider).clone(),
        receiver: sources.receiver(provider),
        account: None,
    }
}

/// What a sweep of connected account `account`'s Stripe events recovers
/// them as: the Stripe source that takes that account's events
/// ([`Providers::taking_account`]); an error saying how to configure one
/// when none does.
pub fn swept_account(sources: &Providers, account: &str) -> anyhow::Result<Swept> {
    anyhow::ensure!(
        account.starts_with("acct_") && crate::providers::is_identifier(account),
        "a connected account is an id such as acct_1A2b3C"
    );
    let Some(source) = sources.taking_account(account) else {
        anyhow::bail!(
            "no Stripe source takes connected account {account}'s events: set \
             WEBHOOKD_SOURCE_STRIPE_CONNECT=true (or WEBHOOKD_SOURCE_<NAME>_CONNECT=true of a \
             Connect endpoint's source), and list the account in \
             WEBHOOKD_STRIPE_CONNECT_ACCOUNTS if that is set"
        );
    };
    Ok(Swept {
        account: Some(account.to_owned()),
        ..swept(sources, source)
    })
}

/// [`swept`] for a command outside `serve` (`webhookd sweep`, `import`):
/// the sources `configured` (the file's and the environment's), the
/// source `stripe`'s scope from `stripe`.
pub fn swept_of(
    stripe: &StripeApiArgs,
    configured: &[SourceSettings],
    provider: &str,
) -> anyhow::Result<Swept> {
    Ok(swept(&registry(stripe, configured)?, provider))
}

/// What verifies a source's deliveries.
enum Keys {
    Secrets(Secrets),
    /// PayPal's webhook ids and certificates; `None`: no webhook id.
    Paypal(Option<PaypalSettings>),
}

/// The built-in sources (each with its settings from `configured`, if
/// any) and the named ones of `configured`, with the keys `keys` gives.
/// The source `stripe`'s scope is `stripe`'s (its mode, by default its
/// key's); a named Stripe source's mode is its own, else the source
/// `stripe`'s.
fn sources(
    stripe: &StripeApiArgs,
    configured: &[SourceSettings],
    keys: impl Fn(&SourceSettings) -> Keys,
) -> anyhow::Result<Vec<providers::Source>> {
    let stripe_scope = stripe.scope()?;
    let built_in = [
        SourceScheme::Stripe,
        SourceScheme::Razorpay,
        SourceScheme::Paypal,
    ]
    .map(|scheme| {
        let name = scheme.built_in_name().expect("a payment scheme");
        configured
            .iter()
            .find(|source| source.name == name)
            .cloned()
            .unwrap_or_else(|| SourceSettings::new(name, scheme, Secrets::default()))
    });
    let named = configured.iter().filter(|source| !source.is_built_in());
    Ok(built_in
        .iter()
        .chain(named)
        .map(|source| {
            let scope = match (source.is_built_in(), source.scheme) {
                (true, SourceScheme::Stripe) => stripe_scope.clone(),
                (false, SourceScheme::Stripe) => Scope {
                    livemode: source
                        .livemode
                        .map_or(stripe_scope.livemode, LiveMode::livemode),
                    connect: source.connect,
                    accounts: None,
                },
                _ => Scope::ANY,
            };
            let (secrets, paypal) = match keys(source) {
                Keys::Secrets(secrets) => (secrets, None),
                Keys::Paypal(paypal) => (Secrets::default(), paypal),
            };
            providers::Source {
                secrets,
                paypal,
                scope,
                record_only: source.effects == SourceEffects::Record,
                owner: source.owner.clone(),
                invoice_credits: source.invoice_credits,
                api_version: source.api_version.clone(),
                ..providers::Source::new(&source.name, scheme(source.scheme), Secrets::default())
            }
        })
        .collect())
}

fn scheme(scheme: SourceScheme) -> Scheme {
    match scheme {
        SourceScheme::Stripe => Scheme::Stripe,
        SourceScheme::Razorpay => Scheme::Razorpay,
        SourceScheme::Paypal => Scheme::Paypal,
        SourceScheme::StandardWebhooks => Scheme::StandardWebhooks,
        SourceScheme::Github => Scheme::Github,
        SourceScheme::Shopify => Scheme::Shopify,
    }
}

/// A PayPal source's keys: `webhook_ids`, verified under PayPal's
/// environments and certificate settings (which every PayPal source
/// shares). No webhook id: not mounted.
fn paypal_keys(settings: &ServeSettings, webhook_ids: Vec<String>) -> Keys {
    let paypal: &PaypalArgs = &settings.paypal;
    let environments = match paypal.paypal_env {
        PaypalEnv::Live => vec![Env::Live],
        PaypalEnv::Sandbox => vec![Env::Sandbox],
        PaypalEnv::Both => vec![Env::Live, Env::Sandbox],
    };
    Keys::Paypal((!webhook_ids.is_empty()).then(|| PaypalSettings {
        webhook_ids,
        tolerance_secs: settings.tolerance_secs,
        environments,
        certs: CertSettings {
            dir: paypal.paypal_cert_dir.clone(),
            timeout: paypal.paypal_cert_timeout,
            ..CertSettings::default()
        },
    }))
}
