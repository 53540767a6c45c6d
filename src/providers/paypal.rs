//! PayPal: deliveries signed with PayPal's private key, checked against the
//! certificate their `PAYPAL-CERT-URL` names ([`certs`]), and the event
//! envelope (`id`, `event_type`, `create_time`, `resource`).

mod cert_url;
pub mod certs;
mod signer;
mod verify;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::{Event, Kind, SignatureError, Via, id_and_type, is_unix_time, parse_object};

pub use verify::{PaypalSettings, PaypalVerifier, SIGNING_ALGO};

pub const PROVIDER: &str = "paypal";

/// The headers of a PayPal delivery.
pub mod header {
    pub const TRANSMISSION_ID: &str = "paypal-transmission-id";
    pub const TRANSMISSION_TIME: &str = "paypal-transmission-time";
    pub const TRANSMISSION_SIG: &str = "paypal-transmission-sig";
    pub const CERT_URL: &str = "paypal-cert-url";
    pub const AUTH_ALGO: &str = "paypal-auth-algo";
}

/// What PayPal signs for a delivery:
/// `{transmission_id}|{transmission_time}|{webhook_id}|{crc32}`, where
/// `crc32` is the CRC-32 (IEEE) of the raw body as an unsigned decimal.
pub fn signed_message(
    transmission_id: &str,
    transmission_time: &str,
    webhook_id: &str,
    body: &[u8],
) -> String {
    message(transmission_id, transmission_time, webhook_id, crc32(body))
}

/// The CRC-32 (IEEE) of `body`.
pub(crate) fn crc32(body: &[u8]) -> u32 {
    crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(body)
}

/// [`signed_message`] with the body's CRC-32 already computed.
pub(crate) fn message(
    transmission_id: &str,
    transmission_time: &str,
    webhook_id: &str,
    crc: u32,
) -> String {
    format!("{transmission_id}|{transmission_time}|{webhook_id}|{crc}")
}

/// An event that PayPal's API listed to us
/// (`GET /v1/notifications/webhooks-events`, over TLS, with our OAuth
/// token): trusted like a verified delivery, recorded as found by a sweep.
/// `raw` is the event object exactly as listed.
pub fn listed_event(raw: &Bytes) -> Result<Event, SignatureError> {
    Ok(parse_event(raw, None)?.arrived_via(Via::Sweep))
}

/// Parses a PayPal envelope: `id` (`WH-…`), `event_type`, `create_time`,
/// `resource`. The event's time is `create_time`, else the resource's
/// `update_time`, else `transmitted` (the delivery's signed time): the
/// simulator stamps impossible dates (`2018-19-12T22:20:32Z`), and a time
/// that does not parse is absent, never a reason to refuse a verified
/// delivery.
pub(crate) fn parse_event(body: &Bytes, transmitted: Option<i64>) -> Result<Event, SignatureError> {
    let super::JsonBody { mut fields, stored } = parse_object(body)?;
    let (event_id, event_type) = id_and_type(&fields, "event_type")?;
    let object = fields.get_mut("resource").map_or(Value::Null, Value::take);
    let created = fields
        .get("create_time")
        .and_then(rfc3339)
        .or_else(|| object.get("update_time").and_then(rfc3339))
        .or(transmitted);
    Ok(Event {
        created,
        object,
        ..Event::delivered(
            Arc::from(PROVIDER),
            Kind::Paypal,
            event_id,
            event_type,
            body,
            stored,
        )
    })
}

/// Unix seconds of an RFC 3339 time in UTC (`2026-12-01T10:00:00Z`, with or
/// without fractional seconds), if it is one.
pub(crate) fn rfc3339(value: &Value) -> Option<i64> {
    parse_time(value.as_str()?)
}

/// Unix seconds of an RFC 3339 UTC time string, if it is a real time.
pub fn parse_time(text: &str) -> Option<i64> {
    let at = humantime::parse_rfc3339(text).ok()?;
    let secs = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    i64::try_from(secs).ok().filter(|t| is_unix_time(*t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(body: &str, transmitted: Option<i64>) -> Event {
        parse_event(&Bytes::from(body.to_owned()), transmitted).unwrap()
    }

    #[test]
    fn the_event_time_falls_back_from_create_time_to_update_time_to_the_transmission() {
        let body = r#"{"id":"WH-1","event_type":"PAYMENT.CAPTURE.COMPLETED","create_time":"2026-12-01T10:00:00.123Z","resource":{"update_time":"2026-12-01T09:00:00Z"}}"#;
        assert_eq!(event(body, Some(1)).created(), Some(1_796_119_200));
        let body = r#"{"id":"WH-1","event_type":"X","create_time":"2018-19-12T22:20:32Z","resource":{"update_time":"2026-12-01T09:00:00Z"}}"#;
        assert_eq!(event(body, Some(1)).created(), Some(1_796_115_600));
        let body =
            r#"{"id":"WH-1","event_type":"X","create_time":"2018-19-12T22:20:32Z","resource":{}}"#;
        assert_eq!(event(body, Some(7)).created(), Some(7));
        assert_eq!(event(body, None).created(), None);
        let body = r#"{"id":"WH-1","event_type":"X","create_time":12,"resource":{"id":"C"}}"#;
        let parsed = event(body, None);
        assert_eq!(parsed.created(), None);
        assert_eq!(parsed.object()["id"], "C");
        assert_eq!(parsed.kind(), Kind::Paypal);
    }

    #[test]
    fn the_signed_message_carries_the_body_s_crc32_in_decimal() {
        // zlib.crc32(b"hello") == 907060870
        assert_eq!(
            signed_message("t-1", "2026-12-01T10:00:00Z", "WH", b"hello"),
            "t-1|2026-12-01T10:00:00Z|WH|907060870"
        );
    }

    #[test]
    fn an_envelope_without_a_usable_id_or_type_is_refused() {
        for body in [
            r#"{"event_type":"X"}"#,
            r#"{"id":"","event_type":"X"}"#,
            r#"{"id":"WH-1"}"#,
            r#"{"id":"WH-1","event_type":"A\u0000"}"#,
            r#"[]"#,
        ] {
            assert!(parse_event(&Bytes::from(body), None).is_err(), "{body}");
        }
    }
}
