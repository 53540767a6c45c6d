//! Signature schemes and event envelopes, one module per scheme.
//!
//! Verification is pure: headers + raw bytes + "now" in, [`Event`] or
//! [`SignatureError`] out. Nothing here touches the database, and nothing
//! below the HTTP handler accepts an event that did not come through here.
//!
//! Adding a scheme is one file here implementing [`Verify`], one line in
//! [`Providers::from_settings`], and, where it moves money, one file in
//! `effects/`.

mod body_signature;
mod event;
mod fields;
pub mod github;
mod keys;
mod payload;
pub mod paypal;
pub mod razorpay;
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
pub use event::{Event, Kind, Receiver, VerifiedEvent, Via, is_own_id};
use event::{delivered_id, verified};
pub(crate) use keys::{HmacSha256, Keys};
pub use scope::{Scope, key_mode, mode_name};

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;

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

/// Every mounted provider and source, by the name in `/webhooks/{name}`.
/// A provider without a configured secret is absent: 404, never unverified.
#[derive(Debug, Default, Clone)]
pub struct Providers {
    by_name: HashMap<String, Arc<dyn Verify>>,
    /// The scope of each provider that has one other than [`Scope::ANY`]
    /// (Stripe's), mounted or not: a replay judges by it too.
    scopes: HashMap<String, Scope>,
}

/// What to mount: each scheme with its own keys. `startup` builds it from
/// the configuration.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Largest accepted difference, in seconds, between a signed timestamp
    /// and now, either way.
    pub tolerance_secs: u64,
    /// Stripe's endpoint secrets; none: Stripe is not mounted.
    pub stripe: Secrets,
    /// The mode and Connect accounts Stripe's endpoint takes.
    pub stripe_scope: Scope,
    /// Razorpay's webhook secrets; none: Razorpay is not mounted.
    pub razorpay: Secrets,
    /// PayPal's webhook ids and certificates; none: PayPal is not mounted.
    pub paypal: Option<paypal::PaypalSettings>,
    pub sources: Vec<Source>,
}

/// A generic source, mounted at `POST /webhooks/{name}`.
#[derive(Debug, Clone)]
pub struct Source {
    /// The `provider` column of its events.
    pub name: String,
    pub scheme: Scheme,
    pub secrets: Secrets,
}

/// How a generic source signs its deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    StandardWebhooks,
    Github,
    Shopify,
}

impl Providers {
    pub fn from_settings(settings: &Settings) -> anyhow::Result<Self> {
        let mut providers = Providers::default();
        providers
            .scopes
            .insert(stripe::PROVIDER.to_owned(), settings.stripe_scope.clone());
        if let Some(stripe) = stripe::StripeVerifier::new(
            &settings.stripe,
            settings.tolerance_secs,
            settings.stripe_scope.clone(),
        ) {
            providers.insert(stripe::PROVIDER, stripe);
        }
        if let Some(razorpay) = razorpay::RazorpayVerifier::new(&settings.razorpay) {
            providers.insert(razorpay::PROVIDER, razorpay);
        }
        if let Some(paypal) = &settings.paypal {
            providers.insert(paypal::PROVIDER, paypal::PaypalVerifier::new(paypal)?);
        }
        for source in &settings.sources {
            let name: Arc<str> = source.name.as_str().into();
            match source.scheme {
                Scheme::StandardWebhooks => providers.insert(
                    &source.name,
                    standard::StandardVerifier::new(
                        name,
                        &source.secrets,
                        settings.tolerance_secs,
                    )?,
                ),
                Scheme::Github => providers.insert(
                    &source.name,
                    github::GithubVerifier::new(name, &source.secrets),
                ),
                Scheme::Shopify => providers.insert(
                    &source.name,
                    shopify::ShopifyVerifier::new(name, &source.secrets),
                ),
            }
        }
        Ok(providers)
    }

    fn insert(&mut self, name: &str, verifier: impl Verify + 'static) {
        self.by_name.insert(name.to_owned(), Arc::new(verifier));
    }

    pub fn get(&self, name: &str) -> Option<&dyn Verify> {
        self.by_name.get(name).map(|v| &**v)
    }

    /// The events `provider` takes ([`Scope::ANY`] for most).
    pub fn scope(&self, provider: &str) -> &Scope {
        self.scopes.get(provider).unwrap_or(&Scope::ANY)
    }

    /// Mounted names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
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
