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
    /// What to store instead of `raw` when `raw` cannot be stored as is.
    stored: Option<String>,
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

    /// The exact bytes that were verified.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The payload to keep for audit and replay: the verified bytes, except
    /// that NUL characters (which Postgres `jsonb` cannot hold) become U+FFFD.
    pub fn stored_payload(&self) -> Result<&str, std::str::Utf8Error> {
        match &self.stored {
            Some(stored) => Ok(stored),
            None => std::str::from_utf8(&self.raw),
        }
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

/// Unix seconds from 1970 up to the end of year 9999: what Postgres
/// `timestamptz` and the providers agree on.
pub fn is_unix_time(t: i64) -> bool {
    (0..=253_402_300_799).contains(&t)
}

/// Replaces the NUL characters in `value` (parsed from `raw`) with U+FFFD,
/// since Postgres `jsonb` cannot store them. Returns whether anything changed.
fn scrub_nul(raw: &[u8], value: &mut Value) -> bool {
    // JSON can only carry NUL as the escape `\u0000`: skip the walk without it.
    if !raw.windows(6).any(|w| w == br"\u0000") {
        return false;
    }
    scrub(value)
}

fn scrub(value: &mut Value) -> bool {
    match value {
        Value::String(s) if s.contains('\0') => {
            *s = s.replace('\0', "\u{FFFD}");
            true
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, item| scrub(item) | changed),
        Value::Object(fields) => {
            let mut changed = false;
            if fields.keys().any(|k| k.contains('\0')) {
                *fields = std::mem::take(fields)
                    .into_iter()
                    .map(|(k, v)| (k.replace('\0', "\u{FFFD}"), v))
                    .collect();
                changed = true;
            }
            fields
                .values_mut()
                .fold(changed, |changed, item| scrub(item) | changed)
        }
        _ => false,
    }
}
