//! Reading a payload's fields as the effects need them: identifiers that
//! key something (refused when they are not identifiers, never rewritten),
//! loose informational ones, Unix times, currencies.

use serde_json::Value;

use super::effect::Reason;
use crate::money::currency;
use crate::providers;

/// A non-empty string at `pointer`.
pub(super) fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The identifier that keys something (an object's id, a subscription's
/// status) at `pointer`: `None` when absent, null or empty; refused when it
/// is anything but an identifier (at most
/// [`providers::MAX_ID_LEN`] printable ASCII characters, so no NUL or other
/// control character), never rewritten.
pub(super) fn ident_at<'a>(
    object: &'a Value,
    pointer: &str,
    what: &str,
) -> Result<Option<&'a str>, Reason> {
    match object.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if providers::is_identifier(s) => Ok(Some(s)),
        Some(_) => Err(not_an_identifier(what)),
    }
}

fn not_an_identifier(what: &str) -> Reason {
    format!(
        "{what} is not an identifier (1 to {} printable ASCII characters)",
        providers::MAX_ID_LEN
    )
}

/// The identifier at `pointer`, which must be there: `missing` says so.
pub(super) fn required_ident<'a>(
    object: &'a Value,
    pointer: &str,
    what: &str,
    missing: &str,
) -> Result<&'a str, Reason> {
    ident_at(object, pointer, what)?.ok_or_else(|| missing.to_owned())
}

/// An informational identifier at `pointer` (a customer, a plan, an order, a
/// status with a default, a user id that owns no money): kept when it is an
/// identifier, else left out. Never rewritten, and never a reason to refuse
/// an event whose keys are sound (Stripe's metadata values, say, may hold
/// any text).
pub(super) fn loose_ident_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    str_at(object, pointer).filter(|s| providers::is_identifier(s))
}

/// [`loose_ident_at`] of an expandable reference ([`id_at`]).
pub(super) fn loose_id_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    match object.pointer(pointer) {
        Some(expanded @ Value::Object(_)) => loose_ident_at(expanded, "/id"),
        _ => loose_ident_at(object, pointer),
    }
}

/// The user id at `pointer` of a wallet owner, whose credit is keyed by it:
/// refused when it is not an identifier ([`ident_at`]).
pub(super) fn owner_at<'a>(object: &'a Value, pointer: &str) -> Result<Option<&'a str>, Reason> {
    ident_at(
        object,
        pointer,
        pointer.trim_start_matches('/').replace('/', ".").as_str(),
    )
}

/// A Unix time at `pointer`, if it is one Postgres can store.
pub(super) fn unix_at(object: &Value, pointer: &str) -> Option<i64> {
    object
        .pointer(pointer)
        .and_then(Value::as_i64)
        .filter(|t| providers::is_unix_time(*t))
}

/// An expandable reference: the id string, or the expanded object's `id`.
pub(super) fn id_at<'a>(
    object: &'a Value,
    pointer: &str,
    what: &str,
) -> Result<Option<&'a str>, Reason> {
    match object.pointer(pointer) {
        Some(expanded @ Value::Object(_)) => ident_at(expanded, "/id", what),
        _ => ident_at(object, pointer, what),
    }
}

/// The ISO 4217 currency at `pointer`, upper-cased; `what` names the object.
pub(super) fn currency_at(
    object: &Value,
    pointer: &str,
    what: &str,
) -> Result<&'static str, Reason> {
    str_at(object, pointer)
        .and_then(currency)
        .ok_or_else(|| format!("{what} has no ISO 4217 currency with a minor unit"))
}

/// `refunded` or `partially_refunded` once anything was refunded.
pub(super) fn refund_status(amount_minor: i64, refunded_minor: i64) -> Option<&'static str> {
    match refunded_minor {
        r if r <= 0 => None,
        r if r >= amount_minor => Some("refunded"),
        _ => Some("partially_refunded"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owners_must_be_identifiers_and_notes_may_be_an_empty_array() {
        assert_eq!(
            owner_at(&json!({"notes": {"user_id": "u1"}}), "/notes/user_id"),
            Ok(Some("u1"))
        );
        assert_eq!(owner_at(&json!({"notes": []}), "/notes/user_id"), Ok(None));
        for refused in [
            json!("u 1"),
            json!("u\u{0}1"),
            json!(7),
            json!("x".repeat(256)),
        ] {
            let object = json!({"notes": {"user_id": refused}});
            assert_eq!(
                owner_at(&object, "/notes/user_id").unwrap_err(),
                "notes.user_id is not an identifier (1 to 255 printable ASCII characters)"
            );
        }
    }
}
