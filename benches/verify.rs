//! CPU cost of what happens before the database: checking a delivery's
//! signature and parsing its envelope, by payload size.
//!
//!   cargo bench --bench verify
//!
//! `verify` is the whole check a request pays (header parsing, HMAC-SHA256
//! over the raw body, timestamp, envelope parsing); `parse` is the envelope
//! alone; `credit` reads the plain credit out of a parsed event.

use bytes::Bytes;
use divan::Bencher;
use divan::counter::BytesCount;
use http::{HeaderMap, HeaderValue};
use serde_json::json;
use webhookd::config::Secrets;
use webhookd::effects;
use webhookd::providers::razorpay::{self, RazorpayVerifier};
use webhookd::providers::standard::{Signer, StandardVerifier};
use webhookd::providers::stripe::{self, StripeVerifier};
use webhookd::providers::{self, Verify};

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
    let verifier = StripeVerifier::new(&Secrets::new([STRIPE_SECRET, "whsec_bench_previous"]), 300)
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
    bencher.bench(|| effects::plan(&event).credit.expect("a plain credit"));
}
