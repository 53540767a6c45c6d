//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, where each
//! `v1` is HMAC-SHA256 over `"{t}.{raw body}"` keyed by an endpoint secret.
//!
//! Header parsing is as strict as the official SDKs: split on `,`, then at the
//! first `=`, no trimming; exactly one `t`; any number of `v1`; other schemes
//! (such as `v0`) ignored. The timestamp must be within the tolerance in both
//! directions.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

use super::{Event, Fetched, Related, Thin, VerifiedEvent, delivered_id, verified};
use super::{
    HmacSha256, Keys, Kind, Scope, SignatureError, Verify, Via, check_tolerance, id_and_type,
    is_identifier, is_unix_time, lower_hex_32, parse_object, parse_timestamp, required_header,
};
use crate::secrets::Secrets;

pub const PROVIDER: &str = "stripe";
pub const SIGNATURE_HEADER: &str = "stripe-signature";

/// Verifies Stripe deliveries against every configured endpoint secret.
/// Keys are prepared once at start-up, never per request.
#[derive(Debug)]
pub struct StripeVerifier {
    keys: Keys,
    tolerance_secs: u64,
    /// The mode and Connect accounts this endpoint takes.
    scope: Scope,
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
    pub fn new(secrets: &Secrets, tolerance_secs: u64, scope: Scope) -> Option<Self> {
        (!secrets.is_empty()).then(|| StripeVerifier {
            keys: Keys::from_secrets(secrets),
            tolerance_secs,
            scope,
        })
    }
}

impl Verify for StripeVerifier {
    /// Checks the signature on the raw body, then the timestamp, then parses
    /// the event envelope. `now` is Unix seconds.
    fn verify(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        now: i64,
    ) -> Result<VerifiedEvent, SignatureError> {
        let header = parse_header(required_header(
            headers,
            SIGNATURE_HEADER,
            "Stripe-Signature",
        )?)?;
        let secret = self.keys.verify(
            &[header.timestamp.as_bytes(), b".", body],
            &header.signatures,
        )?;
        check_tolerance(now, header.unix, self.tolerance_secs)?;
        let event = parse_event(body)?;
        delivered_id(event.event_id())?;
        Ok(verified(event.within(&self.scope), secret))
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
            // Stripe sends lower-case hex; the SDKs compare the strings.
            "v1" => signatures.extend(lower_hex_32(val)),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::MalformedHeader("no t"))?;
    let unix = parse_timestamp(timestamp)
        .ok_or(SignatureError::MalformedHeader("t is not a Unix timestamp"))?;
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
    use hmac::Mac;
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "t={timestamp},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

/// An event that Stripe's API listed to us (`GET /v1/events`, over TLS,
/// with our key): trusted like a verified delivery, and recorded as found
/// by a sweep. `raw` is the event object exactly as listed.
pub fn listed_event(raw: &Bytes) -> Result<Event, SignatureError> {
    Ok(parse_event(raw)?.arrived_via(Via::Sweep))
}

/// The `object` of a thin event's envelope.
pub const THIN_EVENT_OBJECT: &str = "v2.core.event";

/// Parses a Stripe event envelope: `id`, `type`, `created`, `data.object`;
/// of a thin event (`object: "v2.core.event"`), `created` as RFC 3339,
/// `context` and `related_object`, and the object fetched for it when it
/// was stored with one ([`Event::fetched`]).
pub(crate) fn parse_event(body: &Bytes) -> Result<Event, SignatureError> {
    let super::JsonBody { mut fields, stored } = parse_object(body)?;
    let (event_id, event_type) = id_and_type(&fields, "type")?;
    let thin = fields.get("object").and_then(Value::as_str) == Some(THIN_EVENT_OBJECT);
    let created = match fields.get("created") {
        None | Some(Value::Null) => None,
        Some(Value::String(created)) if thin => Some(super::paypal::parse_time(created).ok_or(
            SignatureError::InvalidPayload("created is not an RFC 3339 time"),
        )?),
        Some(created) => Some(created.as_i64().filter(|t| is_unix_time(*t)).ok_or(
            SignatureError::InvalidPayload("created is not a Unix timestamp"),
        )?),
    };
    let thin = thin.then(|| thin_reference(&fields));
    let livemode = fields.get("livemode").and_then(Value::as_bool);
    let account = match (fields.get("account"), &thin) {
        // A thin event's connected account is its context's.
        (None | Some(Value::Null), Some(thin)) => thin.context.as_deref().and_then(context_account),
        (None | Some(Value::Null), None) => None,
        (Some(Value::String(account)), _) => Some(account.clone()),
        // Present, but no account any list could name.
        (Some(_), _) => Some(String::new()),
    };
    // A version is a date and perhaps a release name (`2025-03-31.basil`);
    // anything else is not one, and kept as none.
    let api_version = fields
        .get("api_version")
        .and_then(Value::as_str)
        .filter(|version| is_api_version(version))
        .map(str::to_owned);
    let object = fields
        .get_mut("data")
        .and_then(|data| data.get_mut("object"))
        .map_or(Value::Null, Value::take);
    // A thin event stored with what was fetched for it carries it as a
    // snapshot event carries its object.
    let thin = thin.map(|mut thin| {
        if !object.is_null() {
            thin.fetched = Fetched::Found;
        }
        Box::new(thin)
    });
    Ok(Event {
        created,
        object,
        livemode,
        account,
        api_version,
        thin,
        ..Event::delivered(
            Arc::from(PROVIDER),
            Kind::Stripe,
            event_id,
            event_type,
            body,
            stored,
        )
    })
}

/// The connected account a thin event's `context` names: the context
/// itself (`acct_…`), or its last part under an organisation
/// (`org_…/acct_…`); `None` for the platform's own (an organisation's).
fn context_account(context: &str) -> Option<String> {
    let last = context.rsplit('/').next()?;
    (last.starts_with("acct_") && is_identifier(last)).then(|| last.to_owned())
}

/// Whether `version` is shaped like a Stripe API version: a date
/// (`2024-06-20`), perhaps followed by `.` and a release name.
pub fn is_api_version(version: &str) -> bool {
    let (date, name) = version.split_once('.').unwrap_or((version, "a"));
    date.len() == 10
        && date.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
        && !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A thin event's `context` and `related_object`, as far as they are
/// strings; nothing fetched yet.
fn thin_reference(fields: &serde_json::Map<String, Value>) -> Thin {
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
    let related = fields.get("related_object").and_then(|related| {
        Some(Related {
            id: text(related.get("id"))?,
            kind: text(related.get("type"))?,
            url: text(related.get("url"))?,
        })
    });
    Thin {
        related,
        context: text(fields.get("context")),
        fetched: Fetched::Not,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_version_is_a_date_and_perhaps_a_release_name() {
        for version in ["2024-06-20", "2025-03-31.basil", "2025-09-30.clover"] {
            assert!(is_api_version(version), "{version}");
        }
        for not in [
            "",
            "latest",
            "2024-6-20",
            "2024-06-20.",
            "2024-06-20.Basil",
            "2024_06_20",
        ] {
            assert!(!is_api_version(not), "{not}");
        }
    }

    #[test]
    fn a_thin_events_account_is_its_contexts_last_account() {
        assert_eq!(context_account("acct_1"), Some("acct_1".to_owned()));
        assert_eq!(context_account("org_1/acct_2"), Some("acct_2".to_owned()));
        assert_eq!(context_account("org_1"), None);
        assert_eq!(context_account("acct_1 x"), None);
    }

    #[test]
    fn an_account_sweep_takes_an_unnamed_event_as_its_own_and_refuses_anothers() {
        let event = |account: Option<&str>| {
            let mut body = serde_json::json!({ "id": "evt_1", "type": "payment_intent.succeeded",
                "created": 1, "data": { "object": {} } });
            if let Some(account) = account {
                body["account"] = account.into();
            }
            parse_event(&Bytes::from(body.to_string())).unwrap()
        };
        let unnamed = event(None).listed_for("acct_1");
        assert_eq!(
            (unnamed.account(), unnamed.refusal()),
            (Some("acct_1"), None)
        );
        let own = event(Some("acct_1")).listed_for("acct_1");
        assert_eq!((own.account(), own.refusal()), (Some("acct_1"), None));
        let other = event(Some("acct_2")).listed_for("acct_1");
        assert_eq!(other.account(), Some("acct_2"));
        assert!(other.refusal().is_some());
        // The scope cannot take the refusal back.
        let scope = Scope {
            connect: true,
            ..Scope::ANY
        };
        assert!(other.within(&scope).refusal().is_some());
    }

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
    fn a_thin_event_reads_its_rfc_3339_time_its_reference_and_what_was_fetched() {
        let body = Bytes::from_static(
            br#"{"id":"evt_t","object":"v2.core.event","type":"v1.payment_intent.succeeded","created":"2024-09-26T19:25:42.123Z","livemode":false,"context":"acct_1","related_object":{"id":"pi_1","type":"payment_intent","url":"/v1/payment_intents/pi_1"}}"#,
        );
        let event = parse_event(&body).unwrap();
        assert_eq!(event.created(), Some(1_727_378_742));
        let thin = event.thin().unwrap();
        assert_eq!(thin.fetched, Fetched::Not);
        assert_eq!(thin.context.as_deref(), Some("acct_1"));
        assert_eq!(
            thin.related.as_ref().unwrap().url,
            "/v1/payment_intents/pi_1"
        );
        assert!(event.object().is_null());
        // Stored with what was fetched, it is read back fetched.
        let fetched = event.fetched(serde_json::json!({ "id": "pi_1", "amount": 5 }));
        let stored = Bytes::from(fetched.stored_payload().to_owned());
        let again = parse_event(&stored).unwrap();
        assert_eq!(again.thin().unwrap().fetched, Fetched::Found);
        assert_eq!(again.object()["amount"], 5);
        // A snapshot event's numeric time, and a thin one's that is not a time.
        let bad = br#"{"id":"evt_t","object":"v2.core.event","type":"x","created":"yesterday"}"#;
        assert!(parse_event(&Bytes::from_static(bad)).is_err());
        let snapshot =
            br#"{"id":"evt_s","object":"event","type":"x","created":"2024-09-26T19:25:42Z"}"#;
        assert!(parse_event(&Bytes::from_static(snapshot)).is_err());
    }

    #[test]
    fn signing_and_verifying_agree() {
        let verifier = StripeVerifier::new(&Secrets::new(["whsec_test"]), 300, Scope::ANY).unwrap();
        let body =
            Bytes::from_static(br#"{"id":"evt_1","type":"x","created":1,"data":{"object":{}}}"#);
        let mut headers = HeaderMap::new();
        let header = signature_header("whsec_test", 1_000, &body);
        headers.insert(SIGNATURE_HEADER, header.parse().unwrap());
        let event = Verify::verify(&verifier, &headers, &body, 1_000).unwrap();
        assert_eq!(event.event_id(), "evt_1");
        assert_eq!(event.event_type(), "x");
        assert_eq!(event.created(), Some(1));
    }
}
