//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, where each
//! `v1` is HMAC-SHA256 over `"{t}.{raw body}"` keyed by an endpoint secret.
//!
//! Header parsing is as strict as the official SDKs: split on `,`, then at the
//! first `=`, no trimming; exactly one `t`; any number of `v1`; other schemes
//! (such as `v0`) ignored. The timestamp must be within the tolerance in both
//! directions.

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use secrecy::ExposeSecret;
use serde_json::Value;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::{SignatureError, VerifiedEvent, is_identifier, is_unix_time, scrub_nul};
use crate::config::Secrets;

pub const PROVIDER: &str = "stripe";
pub const SIGNATURE_HEADER: &str = "stripe-signature";

type HmacSha256 = Hmac<Sha256>;

/// Verifies Stripe deliveries against every configured endpoint secret.
/// Keys are prepared once at start-up, never per request.
#[derive(Clone)]
pub struct StripeVerifier {
    keys: Vec<HmacSha256>,
    tolerance_secs: i64,
}

impl std::fmt::Debug for StripeVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeVerifier")
            .field("keys", &format_args!("[{} redacted]", self.keys.len()))
            .field("tolerance_secs", &self.tolerance_secs)
            .finish()
    }
}

/// The parts of a `Stripe-Signature` header that matter.
#[derive(Debug, PartialEq, Eq)]
pub struct SignatureHeader<'a> {
    /// The timestamp exactly as sent: the signed payload uses these bytes.
    pub timestamp: &'a str,
    pub unix: i64,
    /// Every `v1` value, decoded; values that are not 64 lower-case hex
    /// digits can never match and are dropped, as the SDKs do.
    pub signatures: Vec<[u8; 32]>,
}

impl StripeVerifier {
    /// `None` when no secret is configured: the provider is then not mounted.
    pub fn new(secrets: &Secrets, tolerance_secs: u64) -> Option<Self> {
        if secrets.is_empty() {
            return None;
        }
        let keys = secrets
            .iter()
            .map(|s| {
                HmacSha256::new_from_slice(s.expose_secret().as_bytes())
                    .expect("HMAC accepts keys of any length")
            })
            .collect();
        Some(StripeVerifier {
            keys,
            tolerance_secs: i64::try_from(tolerance_secs).unwrap_or(i64::MAX),
        })
    }

    /// Checks the signature on the raw body, then the timestamp, then parses
    /// the event envelope. `now` is Unix seconds.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        now: i64,
    ) -> Result<VerifiedEvent, SignatureError> {
        let value = headers
            .get(SIGNATURE_HEADER)
            .ok_or(SignatureError::MissingHeader("Stripe-Signature"))?
            .to_str()
            .map_err(|_| SignatureError::MalformedHeader("not visible ASCII"))?;
        let header = parse_header(value)?;

        let mut matched = false;
        for key in &self.keys {
            let mut mac = key.clone();
            mac.update(header.timestamp.as_bytes());
            mac.update(b".");
            mac.update(body);
            let expected = mac.finalize().into_bytes();
            for candidate in &header.signatures {
                // Constant time, and no early exit on a match either.
                matched |= bool::from(expected.as_slice().ct_eq(candidate));
            }
        }
        if !matched {
            return Err(SignatureError::Mismatch);
        }
        if now.abs_diff(header.unix) > self.tolerance_secs.unsigned_abs() {
            return Err(SignatureError::TimestampOutsideTolerance);
        }
        parse_event(body)
    }
}

/// Parses a `Stripe-Signature` value. Never panics, whatever the input.
pub fn parse_header(value: &str) -> Result<SignatureHeader<'_>, SignatureError> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in value.split(',') {
        let (key, val) = item
            .split_once('=')
            .ok_or(SignatureError::MalformedHeader("item without '='"))?;
        match key {
            "t" if timestamp.replace(val).is_some() => {
                return Err(SignatureError::MalformedHeader("more than one t"));
            }
            "t" => {}
            "v1" => {
                // Stripe sends lower-case hex; the SDKs compare the strings.
                let mut decoded = [0u8; 32];
                let lower_hex = val.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                if lower_hex && hex::decode_to_slice(val, &mut decoded).is_ok() {
                    signatures.push(decoded);
                }
            }
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::MalformedHeader("no t"))?;
    if timestamp.is_empty()
        || timestamp.len() > 18
        || !timestamp.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(SignatureError::MalformedHeader("t is not a Unix timestamp"));
    }
    let unix = timestamp
        .parse()
        .map_err(|_| SignatureError::MalformedHeader("t is not a Unix timestamp"))?;
    if signatures.is_empty() {
        return Err(SignatureError::NoSupportedSignature);
    }
    Ok(SignatureHeader {
        timestamp,
        unix,
        signatures,
    })
}

/// Signs `body` as Stripe does, for `webhookd send`, tests and benchmarks.
pub fn signature_header(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "t={timestamp},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

fn parse_event(body: &Bytes) -> Result<VerifiedEvent, SignatureError> {
    let mut envelope: Value = serde_json::from_slice(body)
        .map_err(|_| SignatureError::InvalidPayload("body is not valid JSON"))?;
    let stored = scrub_nul(body, &mut envelope).then(|| envelope.to_string());
    let Value::Object(fields) = &mut envelope else {
        return Err(SignatureError::InvalidPayload("expected a JSON object"));
    };
    let event_id = match fields.get("id") {
        Some(Value::String(id)) if is_identifier(id) => id.clone(),
        _ => return Err(SignatureError::InvalidPayload("no usable event id")),
    };
    let event_type = match fields.get("type") {
        Some(Value::String(kind)) if is_identifier(kind) => kind.clone(),
        _ => return Err(SignatureError::InvalidPayload("no usable event type")),
    };
    let created = match fields.get("created") {
        None | Some(Value::Null) => None,
        Some(created) => Some(created.as_i64().filter(|t| is_unix_time(*t)).ok_or(
            SignatureError::InvalidPayload("created is not a Unix timestamp"),
        )?),
    };
    let object = fields
        .get_mut("data")
        .and_then(|data| data.get_mut("object"))
        .map_or(Value::Null, Value::take);
    Ok(VerifiedEvent {
        provider: PROVIDER,
        event_id,
        event_type,
        created,
        object,
        raw: body.clone(),
        stored,
    })
}

/// Rebuilds an event that this service verified and stored itself (a
/// deferred event, or a replay), from its stored payload.
pub fn from_stored(payload: Bytes) -> Result<VerifiedEvent, SignatureError> {
    parse_event(&payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_with_several_v1_and_other_schemes_parses() {
        let sig = "a".repeat(64);
        let value = format!("t=12,v0=zz,v1={sig},v1=nothex,x=1");
        let header = parse_header(&value).unwrap();
        assert_eq!(header.timestamp, "12");
        assert_eq!(header.unix, 12);
        assert_eq!(header.signatures, vec![[0xaa; 32]]);
    }

    #[test]
    fn malformed_headers_are_rejected() {
        let sig = "a".repeat(64);
        for value in [
            String::new(),
            "garbage".to_owned(),
            format!("v1={sig}"),
            format!("t=1,t=2,v1={sig}"),
            format!("t=,v1={sig}"),
            format!("t=-5,v1={sig}"),
            format!("t=+5,v1={sig}"),
            format!("t=1.5,v1={sig}"),
            format!("t=1, v1={sig}"),
            format!(" t=1,v1={sig}"),
            format!("t=1,,v1={sig}"),
            format!("t=99999999999999999999,v1={sig}"),
            "t=1".to_owned(),
            format!("t=1,v0={sig}"),
        ] {
            assert!(parse_header(&value).is_err(), "accepted {value:?}");
        }
    }

    #[test]
    fn signing_and_verifying_agree() {
        let verifier = StripeVerifier::new(&Secrets::new(["whsec_test"]), 300).unwrap();
        let body =
            Bytes::from_static(br#"{"id":"evt_1","type":"x","created":1,"data":{"object":{}}}"#);
        let mut headers = HeaderMap::new();
        let header = signature_header("whsec_test", 1_000, &body);
        headers.insert(SIGNATURE_HEADER, header.parse().unwrap());
        let event = verifier.verify(&headers, &body, 1_000).unwrap();
        assert_eq!(event.event_id(), "evt_1");
        assert_eq!(event.event_type(), "x");
        assert_eq!(event.created(), Some(1));
    }
}
