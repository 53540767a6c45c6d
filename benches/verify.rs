//! CPU cost of what happens before the database: checking a delivery's
//! signature and parsing its envelope, by payload size.
//!
//!   cargo bench --bench verify
//!
//! `verify` is the whole check a request pays (header parsing, HMAC-SHA256
//! over the raw body, or for PayPal CRC-32 and RSA with a loaded
//! certificate, timestamp, envelope parsing); `parse` is the envelope
//! alone; `credit` reads the plain credit out of a parsed event.

use bytes::Bytes;
use divan::Bencher;
use divan::counter::BytesCount;
use http::{HeaderMap, HeaderValue};
use serde_json::json;
use webhookd::effects;
use webhookd::providers::razorpay::{self, RazorpayVerifier};
use webhookd::providers::standard::{Signer, StandardVerifier};
use webhookd::providers::stripe::{self, StripeVerifier};
use webhookd::providers::{self, Scope, Verify};
use webhookd::secrets::Secrets;

const STRIPE_SECRET: &str = "whsec_bench_current";
const RAZORPAY_SECRET: &str = "rzp_bench_current";
const STANDARD_SECRET: &str = "whsec_YmVuY2htYXJrLXN0YW5kYXJkLWtleQ==";
const NOW: i64 = 1_800_000_000;

/// Body sizes, in bytes (approximate: the padding is a metadata field).
const SIZES: [usize; 4] = [512, 4 * 1024, 64 * 1024, 1024 * 1024];

fn main() {
    divan::main();
}

/// A `payment_intent.succeeded` of about `size` bytes.
fn stripe_body(size: usize) -> Bytes {
    let body = |padding: &str| {
        json!({
            "id": "evt_bench", "object": "event", "type": "payment_intent.succeeded",
            "created": NOW, "livemode": false, "api_version": "2024-06-20",
            "data": { "object": {
                "id": "pi_bench", "object": "payment_intent", "amount": 1500,
                "amount_received": 1500, "currency": "usd", "status": "succeeded",
                "metadata": { "user_id": "user_bench", "padding": padding },
            }},
        })
        .to_string()
    };
    let base = body("").len();
    Bytes::from(body(&"x".repeat(size.saturating_sub(base))))
}

fn razorpay_body(size: usize) -> Bytes {
    let body = |padding: &str| {
        json!({
            "entity": "event", "account_id": "acc_bench", "event": "payment.captured",
            "created_at": NOW, "contains": ["payment"],
            "payload": { "payment": { "entity": {
                "id": "pay_bench", "entity": "payment", "amount": 1500, "currency": "INR",
                "status": "captured", "order_id": "order_bench",
                "notes": { "user_id": "user_bench", "padding": padding },
            }}},
        })
        .to_string()
    };
    let base = body("").len();
    Bytes::from(body(&"x".repeat(size.saturating_sub(base))))
}

fn header(headers: &mut HeaderMap, name: &'static str, value: &str) {
    headers.insert(name, HeaderValue::from_str(value).expect("an ASCII header"));
}

#[divan::bench(args = SIZES)]
fn verify_stripe(bencher: Bencher, size: usize) {
    let verifier = StripeVerifier::new(
        &Secrets::new([STRIPE_SECRET, "whsec_bench_previous"]),
        300,
        Scope::ANY,
    )
    .expect("a secret");
    let body = stripe_body(size);
    let mut headers = HeaderMap::new();
    let signature = stripe::signature_header(STRIPE_SECRET, NOW, &body);
    header(&mut headers, stripe::SIGNATURE_HEADER, &signature);
    bencher
        .counter(BytesCount::new(body.len()))
        .bench(|| verifier.verify(&headers, &body, NOW).expect("verified"));
}

#[divan::bench(args = SIZES)]
fn verify_razorpay(bencher: Bencher, size: usize) {
    let verifier = RazorpayVerifier::new(&Secrets::new([RAZORPAY_SECRET])).expect("a secret");
    let body = razorpay_body(size);
    let mut headers = HeaderMap::new();
    header(
        &mut headers,
        razorpay::SIGNATURE_HEADER,
        &razorpay::signature(RAZORPAY_SECRET, &body),
    );
    header(&mut headers, razorpay::EVENT_ID_HEADER, "evt_bench");
    bencher
        .counter(BytesCount::new(body.len()))
        .bench(|| verifier.verify(&headers, &body, NOW).expect("verified"));
}

#[divan::bench(args = SIZES)]
fn verify_standard_webhooks(bencher: Bencher, size: usize) {
    let verifier = StandardVerifier::new("svix".into(), &Secrets::new([STANDARD_SECRET]), 300)
        .expect("a valid secret");
    let body = stripe_body(size);
    let mut headers = HeaderMap::new();
    let signature =
        Signer::new(STANDARD_SECRET)
            .expect("a valid secret")
            .sign("msg_bench", NOW, &body);
    header(&mut headers, "webhook-id", "msg_bench");
    header(&mut headers, "webhook-timestamp", &NOW.to_string());
    header(&mut headers, "webhook-signature", &signature);
    bencher
        .counter(BytesCount::new(body.len()))
        .bench(|| verifier.verify(&headers, &body, NOW).expect("verified"));
}

/// PayPal's check once its certificate is loaded (the first delivery of a
/// certificate pays its fetch or file read once): CRC-32 of the body and an
/// RSA-2048 PKCS#1 v1.5 SHA-256 verification, then the envelope.
#[divan::bench(args = SIZES)]
fn verify_paypal(bencher: Bencher, size: usize) {
    use webhookd::providers::paypal::certs::{CertSettings, Env};
    use webhookd::providers::paypal::{self, PaypalSettings, PaypalVerifier, header as h};

    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paypal");
    let dir = std::env::temp_dir().join(format!("webhookd-bench-paypal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    std::fs::copy(fixtures.join("live.pem"), dir.join("CERT-bench.pem"))
        .expect("the test certificate");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let verifier = runtime.block_on(async {
        PaypalVerifier::new(&PaypalSettings {
            webhook_ids: vec!["WH-BENCH".into()],
            tolerance_secs: 300,
            environments: vec![Env::Live],
            certs: CertSettings {
                dir: Some(dir.clone()),
                ..CertSettings::default()
            },
        })
        .expect("a verifier")
    });
    let body = paypal_body(size);
    let time = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(NOW as u64),
    )
    .to_string();
    let message = paypal::signed_message("bench-1", &time, "WH-BENCH", &body);
    let signature =
        webhookd::cli::send::paypal::sign(&fixtures.join("live.key"), &message).expect("signed");
    let mut headers = HeaderMap::new();
    header(&mut headers, h::TRANSMISSION_ID, "bench-1");
    header(&mut headers, h::TRANSMISSION_TIME, &time);
    header(&mut headers, h::TRANSMISSION_SIG, &signature);
    header(
        &mut headers,
        h::CERT_URL,
        "https://api.paypal.com/v1/notifications/certs/CERT-bench",
    );
    header(&mut headers, h::AUTH_ALGO, paypal::SIGNING_ALGO);
    runtime
        .block_on(verifier.prepare(&headers, NOW))
        .expect("the certificate loads");
    bencher
        .counter(BytesCount::new(body.len()))
        .bench(|| verifier.verify(&headers, &body, NOW).expect("verified"));
    let _ = std::fs::remove_dir_all(dir);
}

/// A `PAYMENT.CAPTURE.COMPLETED` of about `size` bytes.
fn paypal_body(size: usize) -> Bytes {
    let body = |padding: &str| {
        json!({
            "id": "WH-BENCH-1", "event_version": "1.0", "create_time": "2027-01-15T08:00:00Z",
            "resource_type": "capture", "event_type": "PAYMENT.CAPTURE.COMPLETED",
            "summary": padding,
            "resource": {
                "id": "2GG279541U471931P", "status": "COMPLETED", "custom_id": "user_bench",
                "amount": { "currency_code": "USD", "value": "15.00" },
            },
        })
        .to_string()
    };
    let base = body("").len();
    Bytes::from(body(&"x".repeat(size.saturating_sub(base))))
}

#[divan::bench(args = SIZES)]
fn parse_stripe(bencher: Bencher, size: usize) {
    let body = stripe_body(size);
    bencher.counter(BytesCount::new(body.len())).bench(|| {
        providers::Event::from_stored(
            "stripe",
            "evt_bench",
            "payment_intent.succeeded",
            body.clone(),
        )
        .expect("an event")
    });
}

#[divan::bench(args = SIZES)]
fn parse_razorpay(bencher: Bencher, size: usize) {
    let body = razorpay_body(size);
    bencher.counter(BytesCount::new(body.len())).bench(|| {
        providers::Event::from_stored("razorpay", "evt_bench", "payment.captured", body.clone())
            .expect("an event")
    });
}

#[divan::bench]
fn credit(bencher: Bencher) {
    let event = providers::Event::from_stored(
        "stripe",
        "evt_bench",
        "payment_intent.succeeded",
        stripe_body(1024),
    )
    .expect("an event");
    bencher.bench(|| {
        let unit = effects::decode(event.clone());
        assert!(unit.is_credit(), "a plain credit");
        unit
    });
}
