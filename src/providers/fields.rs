//! Reading what a delivery carries, before anything is trusted: headers,
//! signatures' encodings, timestamps, identifiers.

use http::HeaderMap;

use super::SignatureError;

/// A header's value, if present; values that are not visible ASCII are refused.
pub(crate) fn header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
) -> Result<Option<&'a str>, SignatureError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map_err(|_| SignatureError::MalformedHeader("not visible ASCII"))
        })
        .transpose()
}

pub(crate) fn required_header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
    shown: &'static str,
) -> Result<&'a str, SignatureError> {
    header(headers, name)?.ok_or(SignatureError::MissingHeader(shown))
}

/// An event id or type taken from a header.
pub(crate) fn identifier_header(
    headers: &HeaderMap,
    name: &'static str,
    shown: &'static str,
) -> Result<String, SignatureError> {
    let value = header(headers, name)?.ok_or(SignatureError::InvalidPayload(shown))?;
    if !is_identifier(value) {
        return Err(SignatureError::InvalidPayload(shown));
    }
    Ok(value.to_owned())
}

/// Exactly 64 lower-case hex digits (what the providers send), decoded.
pub(crate) fn lower_hex_32(value: &str) -> Option<[u8; 32]> {
    let mut decoded = [0u8; 32];
    let lower = value
        .bytes()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    (lower && hex::decode_to_slice(value, &mut decoded).is_ok()).then_some(decoded)
}

/// Standard base64 (with padding) of exactly 32 bytes, decoded.
pub(crate) fn base64_32(value: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(value)
        .ok()
        .filter(|decoded| decoded.len() == 32)
}

/// Refuses a signed time more than `tolerance_secs` away from `now`, either way.
pub(crate) fn check_tolerance(
    now: i64,
    signed_at: i64,
    tolerance_secs: u64,
) -> Result<(), SignatureError> {
    if now.abs_diff(signed_at) > tolerance_secs {
        return Err(SignatureError::TimestampOutsideTolerance);
    }
    Ok(())
}

/// A signed timestamp: 1 to 18 ASCII digits.
pub(crate) fn parse_timestamp(value: &str) -> Option<i64> {
    if value.is_empty() || value.len() > 18 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// The type recorded for a verified event that names none usable.
/// The envelope's event id (`id`) and type (field `type_field`), both
/// identifiers, or why the body is not an event.
pub(crate) fn id_and_type(
    fields: &serde_json::Map<String, serde_json::Value>,
    type_field: &str,
) -> Result<(String, String), super::SignatureError> {
    use serde_json::Value;
    let event_id = match fields.get("id") {
        Some(Value::String(id)) if is_identifier(id) => id.clone(),
        _ => return Err(super::SignatureError::InvalidPayload("no usable event id")),
    };
    let event_type = match fields.get(type_field) {
        Some(Value::String(kind)) if is_identifier(kind) => kind.clone(),
        _ => {
            return Err(super::SignatureError::InvalidPayload(
                "no usable event type",
            ));
        }
    };
    Ok((event_id, event_type))
}

pub const UNKNOWN_TYPE: &str = "unknown";

/// Longest event id or type we accept; the providers' own are far shorter.
pub const MAX_ID_LEN: usize = 255;

/// Non-empty, bounded, printable ASCII: safe as a key and in a log line.
pub fn is_identifier(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ID_LEN && s.bytes().all(|b| b.is_ascii_graphic())
}

/// Unix seconds from 1970 up to the end of year 9999: what Postgres
/// `timestamptz` and the providers agree on.
pub fn is_unix_time(t: i64) -> bool {
    (0..=253_402_300_799).contains(&t)
}
