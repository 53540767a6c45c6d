//! Signature schemes and event envelopes, one module per scheme.
//!
//! Verification is pure: headers + raw bytes + "now" in, [`Event`] or
//! [`SignatureError`] out. Nothing here touches the database, and nothing
//! below the HTTP handler accepts an event that did not come through here.
//!
//! Adding a scheme is one file here implementing [`Verify`], one line in
//! [`Providers::from_settings`], and, where it moves money, one file in
//! `effects/`.

mod fields;
pub mod github;
mod payload;
pub mod razorpay;
pub mod shopify;
pub mod standard;
pub mod stripe;

pub use fields::{MAX_ID_LEN, UNKNOWN_TYPE, is_identifier, is_unix_time};
pub(crate) use fields::{
    base64_32, check_tolerance, header, identifier_header, lower_hex_32, parse_timestamp,
    required_header,
};

pub(crate) use payload::{JsonBody, parse_object};

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use serde_json::Value;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::config::{Secrets, ServeSettings, SourceScheme};

/// Whose effects table applies to an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Stripe,
    Razorpay,
    /// A configured generic source: verified, deduped, forwarded.
    Source,
}

/// How an event reached webhookd: the `received_via` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A delivery to `POST /webhooks/{provider}`, its signature checked.
    Webhook,
    /// Listed by the provider's API over TLS with our key (`webhookd sweep`).
    Sweep,
    /// Recorded without effects by `webhookd import`.
    Import,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Webhook => "webhook",
            Via::Sweep => "sweep",
            Via::Import => "import",
        }
    }
}

/// An event's parsed envelope and the exact bytes it was read from: what
/// the ingest engine applies. It comes from one of three named paths:
/// - a delivery whose signature checked out ([`VerifiedEvent`], the only
///   way the webhook routes reach the engine);
/// - a provider's API listing, read over TLS with our key (the sweep's
///   `listed_event` of [`stripe`] and [`razorpay`]);
/// - a row this service verified and stored itself ([`Event::from_stored`]:
///   deferred events, replays; tests and benches build theirs this way).
///
/// Only this module builds one.
#[derive(Debug, Clone)]
pub struct Event {
    provider: Arc<str>,
    kind: Kind,
    event_id: String,
    event_type: String,
    created: Option<i64>,
    object: Value,
    raw: Bytes,
    /// What to store instead of `raw` when `raw` cannot be stored as is.
    stored: Option<String>,
    via: Via,
}

impl Event {
    /// The provider (or generic source) name: the `provider` column.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn event_id(&self) -> &str {
        &self.event_id
    }

    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The event's own time (Unix seconds), as the provider stamped it.
    pub fn created(&self) -> Option<i64> {
        self.created
    }

    /// What the event is about: Stripe's `data.object`, Razorpay's `payload`
    /// (its entities by name), a generic source's whole body.
    pub fn object(&self) -> &Value {
        &self.object
    }

    /// How the event reached us.
    pub fn via(&self) -> Via {
        self.via
    }

    /// The same event, recorded as arriving `via` (an API listing's event
    /// imported rather than applied, say).
    pub fn arrived_via(self, via: Via) -> Self {
        Event { via, ..self }
    }

    /// The exact bytes that were verified.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The payload to keep for audit and replay: the verified bytes, unless
    /// Postgres `jsonb` cannot hold them as sent (a NUL character, a number
    /// `numeric` cannot hold); then serde_json's reading of them, with each
    /// NUL replaced by U+FFFD ([`normalised`]).
    pub fn stored_payload(&self) -> &str {
        match &self.stored {
            Some(stored) => stored,
            // Every event is built from a body `parse_object` read as UTF-8.
            None => std::str::from_utf8(&self.raw).expect("an event's body is UTF-8"),
        }
    }
}

/// A delivery whose signature was checked on its exact raw bytes, its
/// envelope parsed afterwards. Only [`Verify::verify`] makes one: nothing
/// else in the crate, and nothing outside it, can.
#[derive(Debug, Clone)]
pub struct VerifiedEvent(Event);

impl VerifiedEvent {
    pub fn into_event(self) -> Event {
        self.0
    }
}

impl std::ops::Deref for VerifiedEvent {
    type Target = Event;

    fn deref(&self) -> &Event {
        &self.0
    }
}

/// Seals a verified delivery; the schemes' `verify` call it last.
fn verified(event: Event) -> VerifiedEvent {
    VerifiedEvent(event)
}

/// Why a delivery was refused before any database work. Every variant is a
/// 400: the message is safe to return (it names no secret and echoes no input).
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
}

impl SignatureError {
    /// A short, bounded label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            SignatureError::TimestampOutsideTolerance => "stale",
            SignatureError::InvalidPayload(_) => "invalid_payload",
            _ => "invalid_signature",
        }
    }
}

/// A signature scheme bound to its secrets: checks one delivery.
pub trait Verify: Send + Sync + fmt::Debug {
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
}

impl Providers {
    pub fn from_settings(settings: &ServeSettings) -> anyhow::Result<Self> {
        let mut providers = Providers::default();
        if let Some(stripe) =
            stripe::StripeVerifier::new(&settings.stripe_webhook_secret, settings.tolerance_secs)
        {
            providers.insert(stripe::PROVIDER, stripe);
        }
        if let Some(razorpay) = razorpay::RazorpayVerifier::new(&settings.razorpay_webhook_secret) {
            providers.insert(razorpay::PROVIDER, razorpay);
        }
        for source in &settings.sources {
            let name: Arc<str> = source.name.as_str().into();
            match source.scheme {
                SourceScheme::StandardWebhooks => providers.insert(
                    &source.name,
                    standard::StandardVerifier::new(
                        name,
                        &source.secrets,
                        settings.tolerance_secs,
                    )?,
                ),
                SourceScheme::Github => providers.insert(
                    &source.name,
                    github::GithubVerifier::new(name, &source.secrets),
                ),
                SourceScheme::Shopify => providers.insert(
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

    /// Mounted names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

/// A generic source's event: the whole verified body is its object. Its type
/// comes from a header, else (`None`) from the body's `type`, else it is
/// [`UNKNOWN_TYPE`].
pub(crate) fn source_event(
    provider: &Arc<str>,
    event_id: String,
    event_type: Option<String>,
    created: Option<i64>,
    body: &Bytes,
) -> Result<Event, SignatureError> {
    let json = parse_object(body)?;
    // The signature and the id are good: a missing type is no reason for the
    // sender to retry forever, so the event is forwarded as `unknown`.
    let event_type = match (event_type, json.fields.get("type")) {
        (Some(header), _) => header,
        (None, Some(Value::String(kind))) if is_identifier(kind) => kind.clone(),
        (None, _) => UNKNOWN_TYPE.to_owned(),
    };
    // The object is what the outbox forwards: stored, so NUL-free.
    let mut object = Value::Object(json.fields);
    if json.stored.is_some() {
        payload::scrub(&mut object);
    }
    Ok(Event {
        provider: provider.clone(),
        kind: Kind::Source,
        event_id,
        event_type,
        created,
        object,
        raw: body.clone(),
        stored: json.stored,
        via: Via::Webhook,
    })
}

impl Event {
    /// Rebuilds an event that this service verified and stored itself (a
    /// deferred event, or a replay) from its stored row. Any provider name
    /// other than the built-in ones is a generic source. The bytes are
    /// parsed, never verified: only rows this service wrote, or a test's
    /// own bodies, belong here.
    pub fn from_stored(
        provider: &str,
        event_id: &str,
        event_type: &str,
        payload: Bytes,
    ) -> Result<Event, SignatureError> {
        match provider {
            stripe::PROVIDER => stripe::parse_event(&payload),
            razorpay::PROVIDER => razorpay::parse_event(&payload, Some(event_id)),
            source => source_event(
                &Arc::from(source),
                event_id.to_owned(),
                Some(event_type.to_owned()),
                None,
                &payload,
            ),
        }
    }
}

/// For this crate's tests and benches only (the `test-support` feature,
/// which a build of the service never enables): a [`VerifiedEvent`] without
/// a signature, for tests of what happens after verification (the batcher,
/// say). Tests of verification itself sign their deliveries.
#[cfg(feature = "test-support")]
pub mod testing {
    use super::{Event, VerifiedEvent, verified};

    /// Seals `event` as if its delivery's signature had checked out.
    pub fn assume_verified(event: Event) -> VerifiedEvent {
        verified(event)
    }
}

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// HMAC keys prepared once at start-up, one per secret.
pub(crate) struct Keys(Vec<HmacSha256>);

impl Keys {
    pub(crate) fn new<'a>(secrets: impl IntoIterator<Item = &'a [u8]>) -> Self {
        Keys(
            secrets
                .into_iter()
                .map(|key| HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length"))
                .collect(),
        )
    }

    /// The raw bytes of each secret are the key (Stripe, Razorpay, GitHub, Shopify).
    pub(crate) fn from_secrets(secrets: &Secrets) -> Self {
        use secrecy::ExposeSecret;
        Keys::new(secrets.iter().map(|s| s.expose_secret().as_bytes()))
    }

    /// Ok when the HMAC of `parts`, under any key, equals any candidate;
    /// [`SignatureError::Mismatch`] otherwise.
    pub(crate) fn verify<C: AsRef<[u8]>>(
        &self,
        parts: &[&[u8]],
        candidates: &[C],
    ) -> Result<(), SignatureError> {
        if self.any_matches(parts, candidates) {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }

    /// Whether the HMAC of `parts`, under any key, equals any candidate.
    /// Every comparison runs, in constant time, whatever matched.
    fn any_matches<C: AsRef<[u8]>>(&self, parts: &[&[u8]], candidates: &[C]) -> bool {
        let mut matched = subtle::Choice::from(0);
        for key in &self.0 {
            let mut mac = key.clone();
            for part in parts {
                mac.update(part);
            }
            let expected = mac.finalize().into_bytes();
            for candidate in candidates {
                matched |= expected.as_slice().ct_eq(candidate.as_ref());
            }
        }
        matched.into()
    }
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Keys([{} redacted])", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_any_candidate_under_any_secret() {
        let keys = Keys::new([b"old".as_slice(), b"new".as_slice()]);
        let mut mac = HmacSha256::new_from_slice(b"new").unwrap();
        mac.update(b"a.b");
        let good = mac.finalize().into_bytes().to_vec();
        assert!(keys.any_matches(&[b"a", b".", b"b"], &[vec![0; 32], good.clone()]));
        assert!(!keys.any_matches(&[b"a.c"], &[good]));
        assert!(!keys.any_matches::<Vec<u8>>(&[b"a.b"], &[]));
    }

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
