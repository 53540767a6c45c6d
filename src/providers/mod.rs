//! Signature schemes and event envelopes, one module per provider.
//!
//! Verification is pure: headers + raw bytes + "now" in, [`VerifiedEvent`] or
//! [`SignatureError`] out. Nothing here touches the database, and nothing
//! below the HTTP handler accepts an event that did not come through here.

pub mod stripe;

use bytes::Bytes;
use serde_json::Value;

/// An event whose signature was checked on its exact raw bytes and whose
/// envelope was parsed afterwards. Only this module can build one.
#[derive(Debug, Clone)]
pub struct VerifiedEvent {
    provider: &'static str,
    event_id: String,
    event_type: String,
    created: Option<i64>,
    object: Value,
    raw: Bytes,
}

impl VerifiedEvent {
    /// The provider (or generic source) name: the `provider` column.
    pub fn provider(&self) -> &'static str {
        self.provider
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

    /// The object the event is about (Stripe: `data.object`).
    pub fn object(&self) -> &Value {
        &self.object
    }

    /// The exact bytes that were verified, kept for audit and replay.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }
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

/// Longest event id or type we accept; the providers' own are far shorter.
const MAX_ID_LEN: usize = 255;

/// Non-empty, bounded, printable ASCII: safe as a key and in a log line.
pub fn is_identifier(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ID_LEN && s.bytes().all(|b| b.is_ascii_graphic())
}

/// Postgres `jsonb` cannot hold the NUL character: refuse such a body up
/// front (400) rather than fail its transaction on every retry.
fn check_storable(body: &[u8]) -> Result<(), SignatureError> {
    if body.windows(6).any(|w| w == br"\u0000") {
        return Err(SignatureError::InvalidPayload(
            "contains \\u0000, which cannot be stored",
        ));
    }
    Ok(())
}
