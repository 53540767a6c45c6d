//! What is stored of a verified body: the raw bytes when Postgres `jsonb`
//! holds them as sent, else serde_json's reading of them.

use serde_json::{Map, Value};

use super::SignatureError;

/// A verified body parsed as a JSON object, with what to store for it.
pub(crate) struct JsonBody {
    pub fields: Map<String, Value>,
    /// `None`: the raw body is stored as it is.
    pub stored: Option<String>,
}

/// Parses a verified body: it must be one JSON object (UTF-8 and escapes are
/// checked). The fields are exactly what was sent (a NUL stays a NUL, so
/// that an id carrying one is refused, never rewritten); what is stored is
/// the raw body when Postgres `jsonb` can hold it, else [`normalised`].
pub(crate) fn parse_object(body: &[u8]) -> Result<JsonBody, SignatureError> {
    // UTF-8 is checked once, here, for the whole body: an [`super::Event`]'s
    // stored payload is then its raw bytes as text, infallibly.
    let value: Value = std::str::from_utf8(body)
        .ok()
        .and_then(|text| serde_json::from_str(text).ok())
        .ok_or(SignatureError::InvalidPayload("body is not valid JSON"))?;
    let stored = (!storable_as_is(body)).then(|| normalised(&value));
    match value {
        Value::Object(fields) => Ok(JsonBody { fields, stored }),
        _ => Err(SignatureError::InvalidPayload("expected a JSON object")),
    }
}

/// What is stored for a body `jsonb` cannot hold as sent: serde_json's
/// reading of it, written back (numbers as the `f64` it read, which `jsonb`
/// always holds), with each NUL character replaced by U+FFFD.
fn normalised(value: &Value) -> String {
    let mut copy = value.clone();
    scrub(&mut copy);
    copy.to_string()
}

/// Whether Postgres `jsonb` holds this (valid JSON) text as it is: no NUL
/// escape (`\u0000`) in any string, and no number with more digits or a
/// larger exponent than `numeric` takes (131,072 digits before the point,
/// 16,383 after; kept well inside both).
fn storable_as_is(raw: &[u8]) -> bool {
    let mut i = 0;
    let mut in_string = false;
    while i < raw.len() {
        let byte = raw[i];
        if in_string {
            match byte {
                b'\\' if raw[i + 1..].starts_with(b"u0000") => return false,
                // Skip the escaped character (a quote or a backslash among them).
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
        } else if byte == b'"' {
            in_string = true;
            i += 1;
        } else if byte == b'-' || byte.is_ascii_digit() {
            let start = i;
            while i < raw.len() && matches!(raw[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
            {
                i += 1;
            }
            if !numeric_holds(&raw[start..i]) {
                return false;
            }
        } else {
            i += 1;
        }
    }
    true
}

/// Whether a JSON number fits Postgres `numeric` with room to spare.
fn numeric_holds(number: &[u8]) -> bool {
    const MOST_INTEGER_DIGITS: i64 = 100_000;
    const MOST_FRACTION_DIGITS: i64 = 10_000;
    let (mantissa, exponent) = match number.iter().position(|b| matches!(b, b'e' | b'E')) {
        Some(at) => (&number[..at], &number[at + 1..]),
        None => (number, &b""[..]),
    };
    let exponent = match std::str::from_utf8(exponent)
        .ok()
        .map(|e| e.trim_start_matches('+'))
    {
        Some("") => 0,
        // Anything longer than six digits is out of range either way.
        Some(e) if e.trim_start_matches(['-', '0']).len() <= 6 => {
            e.parse::<i64>().unwrap_or(i64::MAX)
        }
        _ => return false,
    };
    let (integer, fraction) = match mantissa.iter().position(|&b| b == b'.') {
        Some(at) => (&mantissa[..at], &mantissa[at + 1..]),
        None => (mantissa, &b""[..]),
    };
    let integer_digits = integer.iter().filter(|b| b.is_ascii_digit()).count() as i64;
    let fraction_digits = fraction.len() as i64;
    integer_digits + exponent.max(0) <= MOST_INTEGER_DIGITS
        && fraction_digits - exponent.min(0) <= MOST_FRACTION_DIGITS
}

/// Replaces the NUL characters in `value` with U+FFFD, since Postgres
/// `jsonb` cannot store them. Returns whether anything changed.
pub(super) fn scrub(value: &mut Value) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_jsonb_cannot_hold_is_stored_normalised_and_the_rest_as_sent() {
        for sent in [
            r#"{"a":1,"b":-2.5e10,"c":"x\\u0000","d":"\"1e99999\"","e":1E+300}"#,
            r#"{"amount":9223372036854775807,"n":0.5,"e":1e-9999}"#,
        ] {
            let parsed = parse_object(sent.as_bytes()).unwrap();
            assert!(parsed.stored.is_none(), "{sent}");
        }
        let fraction = format!(r#"{{"f":0.{}1}}"#, "0".repeat(17_000));
        for sent in [
            r#"{"junk":1e-20000}"#,
            r#"{"junk":[1,{"x":-1.5e-17000}]}"#,
            r#"{"id":"pi_\u0000"}"#,
            r#"{"\u0000":1}"#,
            fraction.as_str(),
        ] {
            let parsed = parse_object(sent.as_bytes()).unwrap();
            let stored = parsed.stored.expect(sent);
            assert!(
                !stored.contains("\\u0000") && !stored.contains("e-20000"),
                "{stored}"
            );
        }
        // The fields keep the NUL: an id that carries one is refused, not rewritten.
        let parsed = parse_object(br#"{"id":"pi_\u0000"}"#).unwrap();
        assert_eq!(parsed.fields["id"], "pi_\u{0}");
        assert_eq!(parsed.stored.as_deref(), Some("{\"id\":\"pi_\u{FFFD}\"}"));
    }
}
