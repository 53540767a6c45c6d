//! Fuzzing by property: every signature-header parser (through its
//! verifier) and the envelope extraction of every provider take arbitrary
//! bytes without panicking. The suite runs `FUZZ_CASES` cases of each
//! (default 256); `scripts/fuzz.sh` runs many more for a bounded time.
//! proptest keeps any failing input in
//! `tests/api/proptest-regressions/signature/fuzz.txt`, and replays it first
//! on every later run: commit that file with the fix.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use webhookd::effects;
use webhookd::providers::github::GithubVerifier;
use webhookd::providers::paypal::certs::{CertSettings, Env};
use webhookd::providers::paypal::{PaypalSettings, PaypalVerifier};
use webhookd::providers::razorpay::RazorpayVerifier;
use webhookd::providers::shopify::ShopifyVerifier;
use webhookd::providers::standard::StandardVerifier;
use webhookd::providers::stripe::StripeVerifier;
use webhookd::providers::{self, Scope, Verify};
use webhookd::secrets::Secrets;

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256)
}

const NOW: i64 = 1_800_000_000;

/// Every verifier, with the headers it reads.
fn verifiers() -> Vec<(Box<dyn Verify>, &'static [&'static str])> {
    let secrets = Secrets::new(["whsec_fuzz", "whsec_fuzz_previous"]);
    let standard = Secrets::new(["whsec_ZnV6ei1zdGFuZGFyZC1rZXk="]);
    vec![
        (
            Box::new(StripeVerifier::new(&secrets, 300, Scope::ANY).unwrap()),
            &["stripe-signature"],
        ),
        (
            Box::new(RazorpayVerifier::new(&secrets).unwrap()),
            &["x-razorpay-signature", "x-razorpay-event-id"],
        ),
        (
            Box::new(StandardVerifier::new(Arc::from("svix"), &standard, 300).unwrap()),
            &[
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "svix-id",
                "svix-timestamp",
                "svix-signature",
            ],
        ),
        (
            Box::new(GithubVerifier::new(Arc::from("gh"), &secrets)),
            &["x-hub-signature-256", "x-github-delivery", "x-github-event"],
        ),
        (
            Box::new(ShopifyVerifier::new(Arc::from("shop"), &secrets)),
            &[
                "x-shopify-hmac-sha256",
                "x-shopify-webhook-id",
                "x-shopify-topic",
            ],
        ),
    ]
}

/// The fuzz clock of PayPal's verifier: inside the test certificate's validity.
const PAYPAL_NOW: i64 = crate::signature::paypal_certs::NOW;

/// PayPal's verifier, with the test certificate pinned as `CERT-fuzz`, and
/// a runtime for its certificate loading.
fn paypal() -> &'static (tokio::runtime::Runtime, PaypalVerifier) {
    static PAYPAL: std::sync::OnceLock<(tokio::runtime::Runtime, PaypalVerifier)> =
        std::sync::OnceLock::new();
    PAYPAL.get_or_init(|| {
        let dir = crate::signature::paypal_certs::temp_dir("paypal-fuzz");
        let pem = crate::signature::paypal_certs::fixture("live.pem");
        std::fs::write(dir.join("CERT-fuzz.pem"), pem).unwrap();
        let certs = CertSettings {
            dir: Some(dir),
            connect_to: Some("127.0.0.1:9".parse().unwrap()),
            ..CertSettings::default()
        };
        let settings = PaypalSettings {
            webhook_ids: vec!["WH-FUZZ".into()],
            tolerance_secs: 300,
            environments: vec![Env::Live, Env::Sandbox],
            certs,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let verifier = runtime.block_on(async { PaypalVerifier::new(&settings).unwrap() });
        (runtime, verifier)
    })
}

/// PayPal's header values: arbitrary, and shaped like PayPal's.
fn paypal_header(name: &'static str) -> BoxedStrategy<Vec<u8>> {
    let shaped = match name {
        "paypal-transmission-id" => "[0-9a-f-]{0,40}".boxed(),
        // Mostly within the tolerance of the fuzz clock, so that the
        // certificate and the signature are reached.
        "paypal-transmission-time" => prop_oneof![
            3 => (-400_i64..400).prop_map(|offset| crate::signature::paypal_certs::rfc3339(PAYPAL_NOW + offset)),
            1 => "20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,3})?Z?",
        ]
        .boxed(),
        "paypal-transmission-sig" => "[A-Za-z0-9+/=]{0,400}".boxed(),
        "paypal-cert-url" => prop_oneof![
            Just("https://api.paypal.com/v1/notifications/certs/CERT-fuzz".to_owned()),
            "https://api(\\.sandbox)?\\.paypal\\.com/v1/notifications/certs/[ -~]{0,40}",
        ]
        .boxed(),
        _ => prop_oneof![Just("SHA256withRSA".to_owned()), "[A-Za-z0-9]{0,20}"].boxed(),
    };
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..120),
        shaped.prop_map(String::into_bytes),
    ]
    .boxed()
}

/// Header values as a client can send them: any bytes but the few HTTP
/// forbids (and a value `HeaderValue` refuses is skipped).
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..120),
        "[tv0-9a-f=, ]{0,120}".prop_map(String::into_bytes),
        "t=[0-9]{1,12},v1=[0-9a-f]{0,64}(,v0=[0-9a-f]{0,8})?".prop_map(String::into_bytes),
        "(v1,[A-Za-z0-9+/=]{0,60} ?){0,3}".prop_map(String::into_bytes),
        "sha256=[0-9a-fA-F]{0,70}".prop_map(String::into_bytes),
    ]
}

/// Bodies: arbitrary bytes, and text shaped like JSON events.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..400),
        r#"[{}\[\]":,0-9a-z_ .\-\\]{0,300}"#.prop_map(String::into_bytes),
        (
            "[a-z_.]{0,30}",
            "[a-z0-9_]{0,20}",
            prop_oneof![Just("null".to_owned()), "-?[0-9]{1,20}", r#""[a-z]{0,5}""#],
        )
            .prop_map(|(kind, id, amount)| {
                format!(
                    r#"{{"id":"{id}","type":"{kind}","event":"{kind}","created":{amount},"created_at":{amount},
                        "data":{{"object":{{"id":"{id}","amount":{amount},"currency":"usd","metadata":{{"user_id":"{id}"}}}}}},
                        "payload":{{"payment":{{"entity":{{"id":"{id}","amount":{amount},"notes":[]}}}}}}}}"#
                )
                .into_bytes()
            }),
        // PayPal's envelope: its times as it writes them, and as its
        // simulator does (`2018-19-12T22:20:32Z`).
        (
            "[A-Z.]{0,30}",
            "[A-Z0-9-]{0,24}",
            prop_oneof![
                Just("null".to_owned()),
                "-?[0-9]{1,20}",
                r#""[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?Z?""#,
                r#""[ -~]{0,12}""#,
            ],
            prop_oneof![Just("null".to_owned()), r#""-?[0-9]{0,12}(\.[0-9]{0,3})?""#, "-?[0-9]{1,20}"],
        )
            .prop_map(|(kind, id, time, value)| {
                format!(
                    r#"{{"id":"{id}","event_type":"{kind}","create_time":{time},"resource_type":"capture",
                        "resource":{{"id":"{id}","custom_id":"{id}","status":"COMPLETED","update_time":{time},
                        "amount":{{"currency_code":"USD","value":{value}}},
                        "links":[{{"href":"https://api.paypal.com/v2/payments/captures/{id}","rel":"up"}}]}}}}"#
                )
                .into_bytes()
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn no_verifier_panics_on_any_headers_and_body(
        values in proptest::collection::vec(header_value(), 6),
        body in body(),
        now in prop_oneof![Just(NOW), any::<i64>()],
    ) {
        let body = Bytes::from(body);
        for (verifier, names) in verifiers() {
            let mut headers = HeaderMap::new();
            for (name, value) in names.iter().zip(&values) {
                if let Ok(value) = HeaderValue::from_bytes(value) {
                    headers.insert(HeaderName::from_static(name), value);
                }
            }
            let _ = verifier.verify(&headers, &body, now);
        }
    }

    #[test]
    fn paypal_verification_never_panics_on_any_headers_and_body(
        values in (
            paypal_header("paypal-transmission-id"),
            paypal_header("paypal-transmission-time"),
            paypal_header("paypal-transmission-sig"),
            paypal_header("paypal-cert-url"),
            paypal_header("paypal-auth-algo"),
        ),
        body in body(),
        now in prop_oneof![4 => Just(PAYPAL_NOW), 1 => any::<i64>()],
    ) {
        let (runtime, verifier) = paypal();
        let names = [
            "paypal-transmission-id",
            "paypal-transmission-time",
            "paypal-transmission-sig",
            "paypal-cert-url",
            "paypal-auth-algo",
        ];
        let values = [values.0, values.1, values.2, values.3, values.4];
        let mut headers = HeaderMap::new();
        for (name, value) in names.iter().zip(&values) {
            if let Ok(value) = HeaderValue::from_bytes(value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        }
        let body = Bytes::from(body);
        if runtime.block_on(verifier.prepare(&headers, now)).is_ok() {
            let _ = verifier.verify(&headers, &body, now);
        }
    }

    #[test]
    fn envelope_extraction_never_panics(body in body(), id in "[ -~]{0,40}", kind in "[ -~]{0,40}") {
        for provider in ["stripe", "razorpay", "paypal", "svix"] {
            if let Ok(event) = providers::Event::from_stored(provider, &id, &kind, Bytes::from(body.clone())) {
                let _ = effects::decode(event.clone());
                let _ = event.stored_payload();
            }
        }
    }
}
