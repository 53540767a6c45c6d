//! `send paypal` signs what PayPal would sign, checked with the public key
//! of the committed test-only certificate.

use clap::Parser;
use ring::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};
use rustls_pki_types::CertificateDer;

use super::*;

const KEY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/paypal/test-only-signing-key.pem"
);
const CERT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/paypal/CERT-webhookd-test.pem"
);

#[derive(Parser)]
struct Command {
    #[command(flatten)]
    send: SendArgs,
}

fn args(extra: &[&str]) -> Result<SendArgs, clap::Error> {
    let fixed = [
        "send",
        "paypal",
        "--paypal-webhook-id",
        "8PT597110X687430LKGECATA, WH-OLD",
    ];
    Command::try_parse_from(fixed.iter().chain(extra)).map(|c| c.send)
}

fn header<'a>(headers: &'a [(&str, String)], name: &str) -> &'a str {
    let found = headers.iter().find(|(n, _)| *n == name);
    found
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name}"))
}

/// The public key of the test certificate, as ring reads RSA keys.
fn certificate_key() -> Vec<u8> {
    let pem = std::fs::read(CERT).unwrap();
    let der = CertificateDer::from_pem_slice(&pem).unwrap();
    let (_, certificate) = x509_parser::parse_x509_certificate(&der).unwrap();
    certificate.public_key().subject_public_key.data.to_vec()
}

#[test]
fn the_signature_verifies_with_the_certificate_s_public_key() {
    let send = args(&[
        "PAYMENT.CAPTURE.COMPLETED",
        "--user",
        "u_1",
        "--amount",
        "30.00",
        "--currency",
        "usd",
        "--paypal-key",
        KEY,
    ])
    .unwrap();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_119_200);
    let (body, headers) = delivery(&send, now, 42).unwrap();
    let time = header(&headers, TRANSMISSION_TIME);
    assert_eq!(time, "2026-12-01T10:00:00Z");
    let transmission = header(&headers, TRANSMISSION_ID);
    assert_eq!(
        (transmission.len(), &transmission[14..15]),
        (36, "4"),
        "{transmission}"
    );
    assert_eq!(header(&headers, AUTH_ALGO), "SHA256withRSA");
    assert_eq!(header(&headers, CERT_URL), DEFAULT_CERT_URL);
    // Signed for the first webhook id of the list.
    let message = signed_message(
        transmission,
        time,
        "8PT597110X687430LKGECATA",
        body.as_bytes(),
    );
    let signature = base64::engine::general_purpose::STANDARD
        .decode(header(&headers, TRANSMISSION_SIG))
        .unwrap();
    let key = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, certificate_key());
    key.verify(message.as_bytes(), &signature).unwrap();
    let forged = signed_message(transmission, time, "8PT597110X687430LKGECATA", b"{}");
    assert!(key.verify(forged.as_bytes(), &signature).is_err());

    let event: Value = serde_json::from_str(&body).unwrap();
    let resource = &event["resource"];
    assert_eq!(
        (&event["event_type"], &event["resource_type"]),
        (&json!("PAYMENT.CAPTURE.COMPLETED"), &json!("capture"))
    );
    assert_eq!(
        (&resource["custom_id"], &resource["status"]),
        (&json!("u_1"), &json!("COMPLETED"))
    );
    assert_eq!(
        resource["amount"],
        json!({ "currency_code": "USD", "value": "30.00" })
    );
    let parsed = crate::providers::Event::from_stored("paypal", "", "", body.into()).unwrap();
    assert_eq!(parsed.created(), Some(1_796_119_200));
}

#[test]
fn refunds_name_their_capture_and_subscriptions_carry_their_status() {
    let now = SystemTime::now();
    let refund = args(&[
        "PAYMENT.CAPTURE.REFUNDED",
        "--capture",
        "2GG279541U471931P",
        "--amount",
        "5",
    ])
    .unwrap();
    let refund = event(&refund, now, 7);
    let up = refund["resource"]["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["rel"] == "up")
        .unwrap();
    assert!(
        up["href"]
            .as_str()
            .unwrap()
            .ends_with("/v2/payments/captures/2GG279541U471931P"),
        "{up}"
    );
    assert_eq!(refund["resource"]["amount"]["value"], "5");
    for (kind, status) in [("ACTIVATED", "ACTIVE"), ("CANCELLED", "CANCELLED")] {
        let send = args(&[&format!("BILLING.SUBSCRIPTION.{kind}"), "--user", "u_2"]).unwrap();
        let subscription = event(&send, now, 8)["resource"].clone();
        assert_eq!(
            (&subscription["status"], &subscription["custom_id"]),
            (&json!(status), &json!("u_2"))
        );
        assert!(subscription["id"].as_str().unwrap().starts_with("I-"));
    }
}

#[test]
fn amounts_are_decimal_strings_and_a_key_and_webhook_id_are_needed() {
    for bad in ["30,00", "-1", "1e3", "30.", ".5", "thirty"] {
        assert!(
            args(&["PAYMENT.CAPTURE.COMPLETED", "--amount", bad]).is_err(),
            "{bad}"
        );
    }
    assert!(args(&["PAYMENT.CAPTURE.COMPLETED", "--currency", "DOLLARS"]).is_err());
    let unsigned = args(&["PAYMENT.CAPTURE.COMPLETED"]).unwrap();
    let error = delivery(&unsigned, SystemTime::now(), 1)
        .unwrap_err()
        .to_string();
    assert!(error.contains("--paypal-key"), "{error}");
    let mut no_id = args(&["PAYMENT.CAPTURE.COMPLETED", "--paypal-key", KEY]).unwrap();
    no_id.paypal.paypal_webhook_id = Some(" , ".into());
    let error = delivery(&no_id, SystemTime::now(), 1)
        .unwrap_err()
        .to_string();
    assert!(error.contains("PAYPAL_WEBHOOK_ID"), "{error}");
    let mut not_a_key = args(&["PAYMENT.CAPTURE.COMPLETED", "--paypal-key", CERT]).unwrap();
    not_a_key.paypal.paypal_webhook_id = Some("WH".into());
    assert!(delivery(&not_a_key, SystemTime::now(), 1).is_err());
}
