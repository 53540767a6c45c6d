//! Signature schemes and event envelopes, one module per scheme.
//!
//! Verification is pure: headers + raw bytes + "now" in, [`Event`] or
//! [`SignatureError`] out. Nothing here touches the database, and nothing
//! below the HTTP handler accepts an event that did not come through here.
//!
//! Adding a scheme is one file here implementing [`Verify`], one arm in
//! [`Providers::from_settings`]'s `verifier`, and, where it moves money,
//! one file in `effects/`.

mod body_signature;
mod event;
mod fields;
pub mod github;
mod keys;
mod payload;
pub mod paypal;
pub mod razorpay;
mod received;
mod scope;
pub mod shopify;
pub mod standard;
pub mod stripe;

pub use fields::{MAX_ID_LEN, UNKNOWN_TYPE, is_identifier, is_unix_time};
pub(crate) use fields::{
    base64_32, check_tolerance, header, id_and_type, identifier_header, lower_hex_32,
    parse_timestamp, required_header,
};

pub(crate) use body_signature::BodySignature;
pub(crate) use payload::{JsonBody, parse_object};

pub(crate) use event::source_event;
#[cfg(feature = "test-support")]
pub use event::testing;
pub use event::{
    Event, Fetched, Kind, Receiver, Refreshed, Related, Thin, VerifiedEvent, Via, is_own_id,
};
use event::{delivered_id, verified};
pub(crate) use keys::{HmacSha256, Keys};
use received::Received;
pub use scope::{Scope, key_mode, mode_name};

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;

use crate::owners::Rule;
use crate::secrets::Secrets;

/// Why a delivery was refused before any database work. Every variant but
/// [`SignatureError::KeyUnavailable`] is a 400; the message is safe to
/// return (it names no secret and echoes no input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing signature header {0}")]
    MissingHeader(&'static str),
    #[error("malformed signature header: {0}")]
    MalformedHeader(&'static str),
    #[error("no signature of a supported scheme")]
    NoSupportedSignature,
    #[error("signature does not match")]
    Mismatch,
    #[error("timestamp outside the tolerance")]
    TimestampOutsideTolerance,
    #[error("body is not a JSON event: {0}")]
    InvalidPayload(&'static str),
    /// The signing certificate is not one to trust: 400, nothing written.
    #[error("untrusted signing certificate: {0}")]
    InvalidCertificate(&'static str),
    /// The signing certificate could not be had just now (PayPal's
    /// certificate fetch failed): 503, so the provider retries.
    #[error("the signing certificate is unavailable")]
    KeyUnavailable,
}

impl SignatureError {
    /// A short, bounded label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            SignatureError::TimestampOutsideTolerance => "stale",
            SignatureError::InvalidPayload(_) => "invalid_payload",
            SignatureError::KeyUnavailable => "key_unavailable",
            SignatureError::InvalidCertificate(_) => "invalid_certificate",
            _ => "invalid_signature",
        }
    }
}

/// A signature scheme bound to its secrets: checks one delivery.
pub trait Verify: Send + Sync + fmt::Debug {
    /// Fetches what checking this delivery needs beyond the configured
    /// secrets (PayPal's certificate), outside any transaction. The HMAC
    /// schemes need nothing.
    fn prepare<'a>(
        &'a self,
        _headers: &'a HeaderMap,
        _now: i64,
    ) -> futures_util::future::BoxFuture<'a, Result<(), SignatureError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Verifies `body` against `headers` at Unix time `now`, then parses it.
    fn verify(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        now: i64,
    ) -> Result<VerifiedEvent, SignatureError>;
}

/// Every mounted source, by the name in `/webhooks/{name}`, and what each
/// configured source (mounted or not) does with its events. A source
/// without a configured secret is absent: 404, never unverified.
///
/// Cheap to clone (the server's state is cloned for every request): the
/// maps are shared.
#[derive(Debug, Default, Clone)]
pub struct Providers {
    maps: Arc<Maps>,
}

#[derive(Debug, Default)]
struct Maps {
    by_name: HashMap<String, Arc<dyn Verify>>,
    /// The scope of each source that has one other than [`Scope::ANY`]
    /// (a Stripe source's), mounted or not: a replay judges by it too.
    scopes: HashMap<String, Scope>,
    /// Each configured source's [`Receiver`], mounted or not: a replay
    /// of its events does what it does.
    receivers: HashMap<String, Arc<Receiver>>,
}

/// What to mount: each source with its own keys. `startup` builds it from
/// the configuration.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Largest accepted difference, in seconds, between a signed timestamp
    /// and now, either way.
    pub tolerance_secs: u64,
    /// The built-in sources (`stripe`, `razorpay`, `paypal`, configured or
    /// not) and the named ones.
    pub sources: Vec<Source>,
}

/// A source: one endpoint, mounted at `POST /webhooks/{name}`.
#[derive(Debug, Clone)]
pub struct Source {
    /// Its route and its `source` column; a generic scheme's `provider`
    /// column too (a payment scheme's is the scheme's, whichever of its
    /// sources received the event: one dedupe space per scheme).
    pub name: String,
    pub scheme: Scheme,
    /// Its secrets; none: not mounted. A PayPal source has `paypal`
    /// instead.
    pub secrets: Secrets,
    /// A PayPal source's webhook ids and certificates; `None`: not mounted.
    pub paypal: Option<paypal::PaypalSettings>,
    /// The events it takes (a Stripe source's mode and Connect accounts).
    pub scope: Scope,
    /// Whether it only records its events ([`Receiver::record_only`]).
    pub record_only: bool,
    pub owner: Option<Rule>,
    pub invoice_credits: bool,
    /// The API version it expects ([`Receiver::api_version`]).
    pub api_version: Option<String>,
}

impl Source {
    /// Whether its endpoint is mounted: it has its secrets (a PayPal
    /// source, its webhook ids).
    pub fn mounted(&self) -> bool {
        match self.scheme {
            Scheme::Paypal => self.paypal.is_some(),
            _ => !self.secrets.is_empty(),
        }
    }
}

impl Source {
    /// A source of `scheme` with `secrets`, every other setting at its
    /// default (a generic scheme's records: it has nothing to apply).
    pub fn new(name: &str, scheme: Scheme, secrets: Secrets) -> Self {
        Source {
            name: name.to_owned(),
            scheme,
            secrets,
            paypal: None,
            scope: Scope::ANY,
            record_only: !scheme.is_payment(),
            owner: None,
            invoice_credits: false,
            api_version: None,
        }
    }

    fn receiver(&self) -> Receiver {
        Receiver {
            name: self.name.clone(),
            record_only: self.record_only,
            owner: self.owner.clone(),
            invoice_credits: self.invoice_credits,
            api_version: self.api_version.clone(),
        }
    }
}

/// How a source signs its deliveries and what its events mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Stripe,
    Razorpay,
    Paypal,
    StandardWebhooks,
    Github,
    Shopify,
}

impl Scheme {
    /// Whether its events move money: its sources share the scheme's
    /// provider name ([`stripe::PROVIDER`], ...) and dedupe space.
    pub fn is_payment(self) -> bool {
        self.provider().is_some()
    }

    /// A payment scheme's provider name (`stripe`, ...): its events'
    /// dedupe space, and what `webhookd sweep` names.
    pub fn provider(self) -> Option<&'static str> {
        match self {
            Scheme::Stripe => Some(stripe::PROVIDER),
            Scheme::Razorpay => Some(razorpay::PROVIDER),
            Scheme::Paypal => Some(paypal::PROVIDER),
            Scheme::StandardWebhooks | Scheme::Github | Scheme::Shopify => None,
        }
    }
}

impl Providers {
    /// Mounts every source that has its keys, each verifier stamping its
    /// events with the source that received them ([`Event::received_by`]).
    /// Two sources of one name are refused.
    pub fn from_settings(settings: &Settings) -> anyhow::Result<Self> {
        let mut providers = Maps::registry(settings);
        let mut names = std::collections::HashSet::new();
        for source in &settings.sources {
            anyhow::ensure!(
                names.insert(source.name.as_str()),
                "two sources are named {}",
                source.name
            );
            let Some(verifier) = verifier(source, settings.tolerance_secs)? else {
                continue;
            };
            let receiver = providers.receivers[&source.name].clone();
            providers.by_name.insert(
                source.name.clone(),
                Arc::new(Received::new(verifier, receiver)),
            );
        }
        Ok(Providers {
            maps: Arc::new(providers),
        })
    }

    /// What each source of `settings` does with its events (its scope and
    /// [`Receiver`]), none of them mounted: for judging stored events (a
    /// replay) outside `serve`.
    pub fn registry(settings: &Settings) -> Self {
        Providers {
            maps: Arc::new(Maps::registry(settings)),
        }
    }

    pub fn get(&self, name: &str) -> Option<&dyn Verify> {
        self.maps.by_name.get(name).map(|v| &**v)
    }

    /// The events the source `name` takes ([`Scope::ANY`] for most).
    pub fn scope(&self, name: &str) -> &Scope {
        self.maps.scopes.get(name).unwrap_or(&Scope::ANY)
    }

    /// What the source `name` does with its events; `None`: no source of
    /// that name is configured.
    pub fn receiver(&self, name: &str) -> Option<Arc<Receiver>> {
        self.maps.receivers.get(name).cloned()
    }

    /// The Stripe source whose events a sweep of connected account
    /// `account` is judged as: the source `stripe` when it takes that
    /// account's events, else the first named source that does; `None`
    /// when none does.
    pub fn taking_account(&self, account: &str) -> Option<&str> {
        let mut names: Vec<&str> = self.maps.scopes.keys().map(String::as_str).collect();
        names.sort_unstable_by_key(|name| (*name != stripe::PROVIDER, *name));
        names
            .into_iter()
            .find(|name| self.scope(name).takes_account(account))
    }

    /// Mounted names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.maps.by_name.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

impl Maps {
    /// [`Providers::registry`], unshared.
    fn registry(settings: &Settings) -> Self {
        let mut providers = Maps::default();
        for source in &settings.sources {
            if source.scope != Scope::ANY {
                providers
                    .scopes
                    .insert(source.name.clone(), source.scope.clone());
            }
            providers
                .receivers
                .insert(source.name.clone(), Arc::new(source.receiver()));
        }
        providers
    }
}

/// The verifier of `source`, with its own keys; `None` when it has none.
fn verifier(source: &Source, tolerance_secs: u64) -> anyhow::Result<Option<Box<dyn Verify>>> {
    let name: Arc<str> = source.name.as_str().into();
    let secrets = &source.secrets;
    if source.scheme != Scheme::Paypal && secrets.is_empty() {
        return Ok(None);
    }
    Ok(match source.scheme {
        Scheme::Stripe => {
            stripe::StripeVerifier::new(secrets, tolerance_secs, source.scope.clone())
                .map(|v| Box::new(v) as Box<dyn Verify>)
        }
        Scheme::Razorpay => {
            razorpay::RazorpayVerifier::new(secrets).map(|v| Box::new(v) as Box<dyn Verify>)
        }
        Scheme::Paypal => match &source.paypal {
            Some(paypal) => Some(Box::new(paypal::PaypalVerifier::new(paypal)?)),
            None => None,
        },
        Scheme::StandardWebhooks => Some(Box::new(standard::StandardVerifier::new(
            name,
            secrets,
            tolerance_secs,
        )?)),
        Scheme::Github => Some(Box::new(github::GithubVerifier::new(name, secrets))),
        Scheme::Shopify => Some(Box::new(shopify::ShopifyVerifier::new(name, secrets))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_are_strict() {
        assert!(lower_hex_32(&"ab".repeat(32)).is_some());
        assert!(lower_hex_32(&"AB".repeat(32)).is_none());
        assert!(lower_hex_32(&"ab".repeat(31)).is_none());
        assert!(base64_32("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=").is_some());
        assert!(
            base64_32(&"ab".repeat(32)).is_none(),
            "hex is not base64 of 32 bytes"
        );
        assert_eq!(parse_timestamp("0123"), Some(123));
        assert_eq!(parse_timestamp("-1"), None);
        assert_eq!(parse_timestamp(""), None);
        assert_eq!(parse_timestamp(&"9".repeat(19)), None);
    }
}
