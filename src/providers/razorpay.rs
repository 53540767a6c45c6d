//! Razorpay: `X-Razorpay-Signature` is the hex HMAC-SHA256 of the raw body
//! under a webhook secret. Razorpay signs no timestamp and its event id
//! travels only in `x-razorpay-event-id`, which the signature does not cover:
//! a replayed body under a fresh id verifies, so money is protected by the
//! effects' natural keys (`effects::razorpay`). Without the header the event id is
//! `{event}:{id of the first entity in contains}:{created_at}`. A header id
//! with a `:` is refused (400): ids with one are webhookd's own (this
//! composite key, a sweep's), so no delivery can take one first
//! ([`super::is_own_id`]).

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

use super::{
    BodySignature, Keys, Kind, SignatureError, UNKNOWN_TYPE, Verify, Via, header, is_identifier,
    is_unix_time, lower_hex_32, parse_object,
};
use super::{Event, VerifiedEvent, delivered_id, verified};
use crate::secrets::Secrets;

pub const PROVIDER: &str = "razorpay";
pub const SIGNATURE_HEADER: &str = "x-razorpay-signature";
pub const EVENT_ID_HEADER: &str = "x-razorpay-event-id";

const SIGNATURE: BodySignature<[u8; 32]> = BodySignature {
    name: SIGNATURE_HEADER,
    shown: "X-Razorpay-Signature",
    decode: lower_hex_32,
    malformed: "not 64 lower-case hex digits",
};

#[derive(Debug)]
pub struct RazorpayVerifier {
    keys: Keys,
}

impl RazorpayVerifier {
    /// `None` when no secret is configured: the provider is then not mounted.
    pub fn new(secrets: &Secrets) -> Option<Self> {
        (!secrets.is_empty()).then(|| RazorpayVerifier {
            keys: Keys::from_secrets(secrets),
        })
    }
}

impl Verify for RazorpayVerifier {
    fn verify(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        _now: i64,
    ) -> Result<VerifiedEvent, SignatureError> {
        let secret = SIGNATURE.verify(&self.keys, headers, body)?;
        let event_id = match header(headers, EVENT_ID_HEADER)? {
            Some(id) if is_identifier(id) => Some(delivered_id(id)?),
            Some(_) => {
                return Err(SignatureError::InvalidPayload(
                    "unusable x-razorpay-event-id",
                ));
            }
            None => None,
        };
        parse_event(body, event_id).map(|event| verified(event, secret))
    }
}

/// Parses a Razorpay envelope: `event`, `created_at`, `contains`, `payload`.
/// An event built from entities that Razorpay's API listed to us (over
/// TLS, with our key): `body` is a `payment.captured` or `refund.processed`
/// envelope around them, `event_id` the documented synthetic id, in
/// webhookd's own namespace (`webhookd:sweep:{event}:{entity id}`). Trusted like a verified delivery, and
/// recorded as found by a sweep.
pub fn listed_event(body: &Bytes, event_id: &str) -> Result<Event, SignatureError> {
    if !is_identifier(event_id) {
        return Err(SignatureError::InvalidPayload("no usable event id"));
    }
    Ok(parse_event(body, Some(event_id))?.arrived_via(Via::Sweep))
}

pub(crate) fn parse_event(body: &Bytes, event_id: Option<&str>) -> Result<Event, SignatureError> {
    let super::JsonBody { mut fields, stored } = parse_object(body)?;
    // Signed, so a malformed envelope is a permanent problem: recorded (and
    // ignored or rejected by the effects), not refused for ever-retrying.
    let event_type = match fields.get("event") {
        Some(Value::String(kind)) if is_identifier(kind) => kind.clone(),
        _ => UNKNOWN_TYPE.to_owned(),
    };
    let created = fields
        .get("created_at")
        .and_then(Value::as_i64)
        .filter(|t| is_unix_time(*t));
    let object = fields.remove("payload").unwrap_or(Value::Null);
    let event_id = match (event_id, created) {
        (Some(id), _) => id.to_owned(),
        (None, Some(created)) => composite_id(&event_type, &fields, &object, created)?,
        (None, None) => {
            return Err(SignatureError::InvalidPayload(
                "no x-razorpay-event-id and no created_at to build the event id from",
            ));
        }
    };
    Ok(Event {
        created,
        object,
        ..Event::delivered(
            Arc::from(PROVIDER),
            Kind::Razorpay,
            event_id,
            event_type,
            body,
            stored,
        )
    })
}

/// `{event}:{id of the first entity in contains}:{created_at}`.
fn composite_id(
    event_type: &str,
    fields: &serde_json::Map<String, Value>,
    payload: &Value,
    created: i64,
) -> Result<String, SignatureError> {
    let first = fields
        .get("contains")
        .and_then(|c| c.get(0))
        .and_then(Value::as_str)
        .ok_or(SignatureError::InvalidPayload(
            "no x-razorpay-event-id and no contains",
        ))?;
    let entity_id = payload
        .get(first)
        .and_then(|e| e.pointer("/entity/id"))
        .and_then(Value::as_str)
        .ok_or(SignatureError::InvalidPayload(
            "no x-razorpay-event-id and no entity id",
        ))?;
    let id = format!("{event_type}:{entity_id}:{created}");
    if !is_identifier(&id) {
        return Err(SignatureError::InvalidPayload("no usable event id"));
    }
    Ok(id)
}

/// Signs `body` as Razorpay does, for `webhookd send`, tests and benchmarks.
pub fn signature(secret: &str, body: &[u8]) -> String {
    use hmac::Mac;
    let mut mac = super::HmacSha256::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verifier() -> RazorpayVerifier {
        RazorpayVerifier::new(&Secrets::new(["old_secret", "new_secret"])).unwrap()
    }

    const BODY: &str = r#"{"entity":"event","event":"payment.captured","contains":["payment"],"payload":{"payment":{"entity":{"id":"pay_1"}}},"created_at":1700000000}"#;

    #[test]
    fn the_event_id_header_wins_and_the_composite_key_stands_in_for_it() {
        let body = Bytes::from_static(BODY.as_bytes());
        let mut headers = HeaderMap::new();
        headers.insert(
            SIGNATURE_HEADER,
            signature("new_secret", &body).parse().unwrap(),
        );
        let event = verifier().verify(&headers, &body, 0).unwrap();
        assert_eq!(event.event_id(), "payment.captured:pay_1:1700000000");
        assert_eq!(event.event_type(), "payment.captured");
        assert_eq!(event.created(), Some(1_700_000_000));
        assert_eq!(event.object()["payment"]["entity"]["id"], "pay_1");

        headers.insert(EVENT_ID_HEADER, "evt_abc".parse().unwrap());
        assert_eq!(
            verifier().verify(&headers, &body, 0).unwrap().event_id(),
            "evt_abc"
        );
    }

    #[test]
    fn upper_case_or_short_signatures_are_malformed() {
        let body = Bytes::from_static(BODY.as_bytes());
        let good = signature("new_secret", &body);
        for bad in [
            good.to_uppercase(),
            good[..62].to_owned(),
            format!("sha256={good}"),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(SIGNATURE_HEADER, bad.parse().unwrap());
            assert!(matches!(
                verifier().verify(&headers, &body, 0),
                Err(SignatureError::MalformedHeader(_))
            ));
        }
    }
}
