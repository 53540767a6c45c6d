//! Sources (`WEBHOOKD_SOURCE_<NAME>_*`): each endpoint's name, scheme,
//! secrets and what it does with its events; and the built-in source
//! `stripe`'s scope (its mode and Connect accounts).

use std::collections::BTreeMap;

use clap::ValueEnum;

use super::SIMULATOR_WEBHOOK_ID;
use crate::owners::{Place, Rule};
use crate::secrets::{Secrets, parse_secrets};

/// A source: one endpoint, `POST /webhooks/<name>`.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// Lower case: its route, and its `source` column (a generic scheme's
    /// events are stored under it as their `provider` too).
    pub name: String,
    pub scheme: SourceScheme,
    /// `WEBHOOKD_SOURCE_<NAME>_SECRET`. Empty for a built-in source (its
    /// secrets are STRIPE_WEBHOOK_SECRET's, RAZORPAY_WEBHOOK_SECRET's) and
    /// for a PayPal one.
    pub secrets: Secrets,
    /// A PayPal source's `WEBHOOKD_SOURCE_<NAME>_WEBHOOK_ID` (the built-in
    /// one's are PAYPAL_WEBHOOK_ID's).
    pub webhook_ids: Vec<String>,
    pub effects: SourceEffects,
    /// `WEBHOOKD_SOURCE_<NAME>_OWNER`; `None`: the scheme's default.
    pub owner: Option<Rule>,
    /// `WEBHOOKD_SOURCE_<NAME>_INVOICE_CREDITS` (Stripe).
    pub invoice_credits: bool,
    /// `WEBHOOKD_SOURCE_<NAME>_LIVEMODE` of a named Stripe source; `None`:
    /// the mode of the source `stripe`. (The built-in source's own is
    /// [`StripeScopeArgs`]'.)
    pub livemode: Option<LiveMode>,
    /// `WEBHOOKD_SOURCE_<NAME>_CONNECT` of a named Stripe source.
    pub connect: bool,
    /// `WEBHOOKD_SOURCE_<NAME>_API_VERSION` (Stripe): the API version its
    /// endpoint is pinned to. Events of another are applied, counted and
    /// shown, so that an upgrade can be watched; `None`: none expected.
    pub api_version: Option<String>,
}

impl SourceSettings {
    /// A source of `scheme` with `secrets` and every other setting at its
    /// default.
    pub fn new(name: &str, scheme: SourceScheme, secrets: Secrets) -> Self {
        SourceSettings {
            name: name.to_owned(),
            scheme,
            secrets,
            webhook_ids: Vec::new(),
            effects: scheme.default_effects(),
            owner: None,
            invoice_credits: false,
            livemode: None,
            connect: false,
            api_version: None,
        }
    }

    /// Whether it is the built-in source of its scheme (`stripe`,
    /// `razorpay`, `paypal`), whose keys are the scheme's old variable's.
    pub fn is_built_in(&self) -> bool {
        self.scheme.built_in_name() == Some(self.name.as_str())
    }
}

/// How a source's deliveries are signed and what its events mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceScheme {
    Stripe,
    Razorpay,
    Paypal,
    StandardWebhooks,
    Github,
    Shopify,
}

impl SourceScheme {
    /// The payment schemes' built-in source, by the scheme's name.
    pub fn built_in_name(self) -> Option<&'static str> {
        match self {
            SourceScheme::Stripe => Some("stripe"),
            SourceScheme::Razorpay => Some("razorpay"),
            SourceScheme::Paypal => Some("paypal"),
            _ => None,
        }
    }

    /// Whether its events move money (Stripe, Razorpay, PayPal), rather
    /// than only being forwarded.
    pub fn is_payment(self) -> bool {
        self.built_in_name().is_some()
    }

    /// What its sources do unless told: apply (the payment schemes), or
    /// record (the generic ones, which have nothing to apply).
    pub fn default_effects(self) -> SourceEffects {
        if self.is_payment() {
            SourceEffects::Apply
        } else {
            SourceEffects::Record
        }
    }

    /// The scheme whose built-in source is named `name`.
    fn of_built_in(name: &str) -> Option<SourceScheme> {
        [
            SourceScheme::Stripe,
            SourceScheme::Razorpay,
            SourceScheme::Paypal,
        ]
        .into_iter()
        .find(|scheme| scheme.built_in_name() == Some(name))
    }
}

/// `WEBHOOKD_SOURCE_<NAME>_EFFECTS`: what a source does with its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceEffects {
    /// Applies the scheme's effects (wallets, payments, subscriptions).
    Apply,
    /// Verifies, dedupes and stores each event, and forwards it once as
    /// outbox topic `source.<name>`; applies nothing.
    Record,
}

/// The settings a source may have: the variable
/// `WEBHOOKD_SOURCE_<NAME>_<SETTING>` of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Setting {
    Scheme,
    Secret,
    WebhookId,
    Effects,
    Owner,
    InvoiceCredits,
    Livemode,
    Connect,
    ApiVersion,
}

impl Setting {
    const ALL: [Setting; 9] = [
        Setting::Scheme,
        Setting::Secret,
        Setting::WebhookId,
        Setting::Effects,
        Setting::Owner,
        Setting::InvoiceCredits,
        Setting::Livemode,
        Setting::Connect,
        Setting::ApiVersion,
    ];

    /// The end of its variable's name (no setting's is the end of another's).
    fn suffix(self) -> &'static str {
        match self {
            Setting::Scheme => "_SCHEME",
            Setting::Secret => "_SECRET",
            Setting::WebhookId => "_WEBHOOK_ID",
            Setting::Effects => "_EFFECTS",
            Setting::Owner => "_OWNER",
            Setting::InvoiceCredits => "_INVOICE_CREDITS",
            Setting::Livemode => "_LIVEMODE",
            Setting::Connect => "_CONNECT",
            Setting::ApiVersion => "_API_VERSION",
        }
    }
}

/// Why `rule` cannot be a rule of a `scheme` source, if it cannot: it
/// names a place that scheme's events never carry (a rule that would
/// silently read nothing there).
fn unread_place(scheme: SourceScheme, rule: &Rule) -> Option<String> {
    let (name, reads): (&str, fn(&Place) -> bool) = match scheme {
        SourceScheme::Stripe => ("Stripe", |place| !matches!(place, Place::CustomId)),
        SourceScheme::Razorpay => ("Razorpay", |place| matches!(place, Place::Metadata(_))),
        SourceScheme::Paypal => ("PayPal", |place| matches!(place, Place::CustomId)),
        _ => return None,
    };
    let unread = rule.places().iter().find(|place| !reads(place))?;
    let carries = match scheme {
        SourceScheme::Razorpay => "metadata.<key> (its notes)",
        SourceScheme::Paypal => "custom_id",
        _ => "metadata.<key>, client_reference_id or customer",
    };
    Some(format!(
        "names {}, which {name} events do not carry; a {name} rule reads {carries}",
        unread.kind()
    ))
}

const PREFIX: &str = "WEBHOOKD_SOURCE_";

/// One source's variables as set (non-empty): each setting's variable
/// name and value.
type Given = BTreeMap<Setting, (String, String)>;

/// Reads every source from the `WEBHOOKD_SOURCE_<NAME>_<SETTING>`
/// variables in `vars`, sorted by name: the named ones (each with its
/// `_SCHEME`), and a built-in one (`stripe`, `razorpay`, `paypal`) when
/// any of its settings is set. A variable set to an empty value is unset.
/// Every problem (a scheme without its secret, an unknown scheme or
/// setting, a setting its scheme does not have) is reported, one a line,
/// naming the variable and never quoting its value: a source is never
/// mounted half-configured.
pub fn sources_from_env(
    vars: impl IntoIterator<Item = (String, String)>,
) -> anyhow::Result<Vec<SourceSettings>> {
    let mut problems = Vec::new();
    let mut by_name: BTreeMap<String, Given> = BTreeMap::new();
    for (key, value) in vars {
        let Some(rest) = key.strip_prefix(PREFIX) else {
            continue;
        };
        if value.trim().is_empty() {
            continue;
        }
        let Some(setting) = Setting::ALL
            .into_iter()
            .find(|s| rest.ends_with(s.suffix()))
        else {
            problems.push(format!(
                "{key}: not a source setting; a source has _SCHEME, _SECRET, _WEBHOOK_ID, \
                 _EFFECTS, _OWNER, _INVOICE_CREDITS, _LIVEMODE, _CONNECT and _API_VERSION"
            ));
            continue;
        };
        let upper = &rest[..rest.len() - setting.suffix().len()];
        if upper.is_empty()
            || !upper
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            problems.push(format!(
                "{key}: a source name is upper-case letters, digits and underscores"
            ));
            continue;
        }
        by_name
            .entry(upper.to_owned())
            .or_default()
            .insert(setting, (key, value));
    }
    let mut sources = Vec::new();
    for (upper, given) in &by_name {
        match source(upper, given) {
            Ok(Some(source)) => sources.push(source),
            Ok(None) => {}
            Err(mut found) => problems.append(&mut found),
        }
    }
    match problems.as_slice() {
        [] => Ok(sources),
        [one] => anyhow::bail!("invalid configuration: {one}"),
        many => anyhow::bail!("invalid configuration:\n  - {}", many.join("\n  - ")),
    }
}

/// The source `upper` from its variables `given`; `None`: a built-in
/// source whose only settings are read elsewhere (the source `stripe`'s
/// mode and Connect, [`StripeScopeArgs`]). `Err`: every problem found.
fn source(upper: &str, given: &Given) -> Result<Option<SourceSettings>, Vec<String>> {
    let name = upper.to_ascii_lowercase();
    let built_in = SourceScheme::of_built_in(&name);
    let scheme_key = format!("{PREFIX}{upper}_SCHEME");
    let scheme = match (given.get(&Setting::Scheme), built_in) {
        (Some((key, text)), _) => {
            let Ok(scheme) = SourceScheme::from_str(text.trim(), true) else {
                return Err(vec![format!(
                    "{key}: unknown scheme; expected stripe, razorpay, paypal, \
                     standard-webhooks, github or shopify"
                )]);
            };
            match built_in {
                Some(own) if own != scheme => {
                    return Err(vec![format!(
                        "{key}: `{name}` is the built-in {name} source; its scheme is {name}"
                    )]);
                }
                _ => scheme,
            }
        }
        (None, Some(own)) => own,
        (None, None) => {
            let (key, _) = given.values().next().expect("a source has a variable");
            return Err(vec![format!(
                "{key} is set but {scheme_key} is not: a source names its scheme"
            )]);
        }
    };
    let mut settings = SourceSettings::new(&name, scheme, Secrets::default());
    let is_built_in = settings.is_built_in();
    let mut problems = Vec::new();
    let mut read_any = false;
    for (setting, (key, text)) in given {
        let text = text.trim();
        let refused = |why: &str| format!("{key}: {why}");
        let expects = |values: &str| format!("{key} is {values}");
        match setting {
            Setting::Scheme => continue,
            Setting::Livemode | Setting::Connect
                if is_built_in && scheme == SourceScheme::Stripe =>
            {
                // Read by `StripeScopeArgs`, with the sweep's key.
                continue;
            }
            Setting::Secret if is_built_in => problems.push(refused(&format!(
                "the built-in source `{name}` takes its secrets from {}",
                old_variable(scheme)
            ))),
            Setting::WebhookId if is_built_in => problems.push(refused(
                "the built-in source `paypal` takes its webhook ids from PAYPAL_WEBHOOK_ID",
            )),
            Setting::Secret if scheme == SourceScheme::Paypal => problems.push(refused(&format!(
                "a PayPal source is verified by its webhook ids: set {PREFIX}{upper}_WEBHOOK_ID"
            ))),
            Setting::Secret => match parse_secrets(text) {
                Ok(secrets) => settings.secrets = secrets,
                Err(why) => problems.push(refused(&why)),
            },
            Setting::WebhookId if scheme != SourceScheme::Paypal => {
                problems.push(refused("only a PayPal source has webhook ids"));
            }
            Setting::WebhookId => {
                settings.webhook_ids = text
                    .split(',')
                    .map(str::trim)
                    .filter(|id| !id.is_empty())
                    .map(str::to_owned)
                    .collect();
                if settings
                    .webhook_ids
                    .iter()
                    .any(|id| id == SIMULATOR_WEBHOOK_ID)
                {
                    problems.push(refused(&format!(
                        "lists {SIMULATOR_WEBHOOK_ID}, the id PayPal's public simulator signs \
                         for: anyone could deliver sample events"
                    )));
                }
            }
            Setting::Effects => match SourceEffects::from_str(text, true) {
                Ok(SourceEffects::Apply) if !scheme.is_payment() => problems.push(refused(
                    "a generic source has no effects to apply; it records and forwards its events",
                )),
                Ok(effects) => settings.effects = effects,
                Err(_) => problems.push(expects("apply or record")),
            },
            Setting::Owner if !scheme.is_payment() => problems.push(refused(
                "a generic source moves no money, so it has no owner rule",
            )),
            Setting::Owner => match text.parse::<Rule>() {
                Ok(rule) => match unread_place(scheme, &rule) {
                    Some(why) => problems.push(refused(&why)),
                    None => settings.owner = Some(rule),
                },
                Err(why) => problems.push(refused(&why.to_string())),
            },
            Setting::InvoiceCredits
            | Setting::Livemode
            | Setting::Connect
            | Setting::ApiVersion
                if scheme != SourceScheme::Stripe =>
            {
                problems.push(refused("only a Stripe source has this setting"));
            }
            Setting::InvoiceCredits => match flag(text) {
                Some(on) => settings.invoice_credits = on,
                None => problems.push(expects("true or false")),
            },
            Setting::Livemode => match LiveMode::from_str(text, true) {
                Ok(mode) => settings.livemode = Some(mode),
                Err(_) => problems.push(expects("true, false or any")),
            },
            Setting::Connect => match flag(text) {
                Some(on) => settings.connect = on,
                None => problems.push(expects("true or false")),
            },
            Setting::ApiVersion if crate::providers::stripe::is_api_version(text) => {
                settings.api_version = Some(text.to_owned());
            }
            Setting::ApiVersion => problems.push(expects(
                "a Stripe API version, such as 2025-03-31.basil or 2024-06-20",
            )),
        }
        read_any = true;
    }
    if !is_built_in {
        let (wanted, missing) = match scheme {
            SourceScheme::Paypal => ("_WEBHOOK_ID", settings.webhook_ids.is_empty()),
            _ => ("_SECRET", settings.secrets.is_empty()),
        };
        if missing {
            problems.push(format!(
                "{scheme_key} is set but {PREFIX}{upper}{wanted} is not: a source is never \
                 accepted unverified"
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok((read_any || !is_built_in).then_some(settings))
}

/// The variable a built-in source's keys are read from.
fn old_variable(scheme: SourceScheme) -> &'static str {
    match scheme {
        SourceScheme::Stripe => "STRIPE_WEBHOOK_SECRET",
        SourceScheme::Razorpay => "RAZORPAY_WEBHOOK_SECRET",
        _ => "PAYPAL_WEBHOOK_ID",
    }
}

/// `true`/`false` (or `1`/`0`, `yes`/`no`, `on`/`off`), any case.
fn flag(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
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
        let connect = match set_text(&self.stripe_connect) {
            None => false,
            Some(text) => flag(text).ok_or_else(|| {
                anyhow::anyhow!("WEBHOOKD_SOURCE_STRIPE_CONNECT is true or false")
            })?,
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
