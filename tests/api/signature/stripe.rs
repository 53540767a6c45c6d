//! Stripe-Signature verification through the app's router (no socket: what
//! a request is answered, and what it writes): every refusal is a 400 with
//! nothing written; any configured secret and any `v1` may match.

use bytes::Bytes;
use http::HeaderMap;
use proptest::prelude::*;
use reqwest::StatusCode;
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::providers::stripe::{
    SIGNATURE_HEADER, StripeVerifier, parse_header, signature_header,
};
use webhookd::providers::{Scope, SignatureError, Verify};
use webhookd::secrets::Secrets;

use crate::helpers::{
    OLD_SECRET, SECRET, now, payment_intent_succeeded, route_app, route_app_with,
};

fn v1(secret: &str, t: i64, body: &str) -> String {
    signature_header(secret, t, body.as_bytes())
        .split_once(",v1=")
        .unwrap()
        .1
        .to_owned()
}

#[sqlx::test]
async fn a_validly_signed_event_is_processed(pool: PgPool) {
    let app = route_app(pool).await;
    let body = payment_intent_succeeded("evt_valid", "pi_valid", "user_1", 1000);
    let answer = app.deliver(&body, "processed").await;
    assert_eq!(answer["event_id"], "evt_valid");
    assert_eq!(app.count("processed_events").await, 1);
    assert_eq!(app.balance("user_1", "USD").await, Some(1000));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn any_v1_in_the_header_may_match(pool: PgPool) {
    let app = route_app(pool).await;
    let t = now();
    let bogus = "0".repeat(64);
    for (n, order) in ["good_first", "good_second"].into_iter().enumerate() {
        let body =
            payment_intent_succeeded(&format!("evt_{order}"), &format!("pi_{n}"), "user_1", 100);
        let good = v1(SECRET, t, &body);
        let header = match order {
            "good_first" => format!("t={t},v1={good},v1={bogus}"),
            _ => format!("t={t},v1={bogus},v1={good}"),
        };
        let response = app.post_stripe_with(body.into_bytes(), Some(&header)).await;
        assert_eq!(response.status(), StatusCode::OK, "{order}");
    }
    assert_eq!(app.count("processed_events").await, 2);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn the_previous_secret_still_verifies_during_a_rotation(pool: PgPool) {
    let app = route_app(pool).await;
    let body = payment_intent_succeeded("evt_rotated", "pi_rotated", "user_1", 100);
    let header = signature_header(OLD_SECRET, now(), body.as_bytes());
    let response = app.post_stripe_with(body.into_bytes(), Some(&header)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(app.count("processed_events").await, 1);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn forged_deliveries_are_refused_and_write_nothing(pool: PgPool) {
    let app = route_app(pool).await;
    let t = now();
    let body = payment_intent_succeeded("evt_forged", "pi_forged", "user_1", 1000);
    let good = v1(SECRET, t, &body);
    let tampered = body.replace("1000", "9000");
    let cases: Vec<(&str, Vec<u8>, Option<String>)> = vec![
        (
            "tampered body",
            tampered.clone().into_bytes(),
            Some(format!("t={t},v1={good}")),
        ),
        (
            "wrong secret",
            body.clone().into_bytes(),
            Some(signature_header("whsec_wrong", t, body.as_bytes())),
        ),
        ("missing header", body.clone().into_bytes(), None),
        (
            "empty header",
            body.clone().into_bytes(),
            Some(String::new()),
        ),
        (
            "v0 only",
            body.clone().into_bytes(),
            Some(format!("t={t},v0={good}")),
        ),
        (
            "no timestamp",
            body.clone().into_bytes(),
            Some(format!("v1={good}")),
        ),
        (
            "two timestamps",
            body.clone().into_bytes(),
            Some(format!("t={t},t={t},v1={good}")),
        ),
        (
            "space after comma",
            body.clone().into_bytes(),
            Some(format!("t={t}, v1={good}")),
        ),
        (
            "item without equals",
            body.clone().into_bytes(),
            Some(format!("t={t},v1,v1={good}")),
        ),
        (
            "negative timestamp",
            body.clone().into_bytes(),
            Some(format!("t=-{t},v1={good}")),
        ),
        (
            "fractional timestamp",
            body.clone().into_bytes(),
            Some(format!("t={t}.0,v1={good}")),
        ),
        (
            "empty v1",
            body.clone().into_bytes(),
            Some(format!("t={t},v1=")),
        ),
        (
            "truncated v1",
            body.clone().into_bytes(),
            Some(format!("t={t},v1={}", &good[..62])),
        ),
        (
            "upper-case v1",
            body.clone().into_bytes(),
            Some(format!("t={t},v1={}", good.to_uppercase())),
        ),
        (
            "signature of another timestamp",
            body.clone().into_bytes(),
            Some(format!("t={},v1={good}", t - 1)),
        ),
        (
            "body signed without timestamp",
            body.clone().into_bytes(),
            Some(format!("t={t},v1={}", hmac_hex(SECRET, body.as_bytes()))),
        ),
    ];
    for (case, body, header) in cases {
        let response = app.post_stripe_with(body, header.as_deref()).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{case}");
        let answer: serde_json::Value = response.json().await.unwrap();
        let error = answer["error"].as_str().unwrap_or_default().to_owned();
        let expected = match case {
            "tampered body"
            | "wrong secret"
            | "signature of another timestamp"
            | "body signed without timestamp" => "signature does not match",
            "missing header" => "missing signature header Stripe-Signature",
            "v0 only" | "empty v1" | "truncated v1" | "upper-case v1" | "space after comma" => {
                "no signature of a supported scheme"
            }
            _ => "malformed signature header",
        };
        assert!(error.starts_with(expected), "{case}: {error}");
    }
    app.assert_nothing_written().await;
}

fn hmac_hex(secret: &str, data: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(data);
    hex::encode(mac.finalize().into_bytes())
}

#[sqlx::test]
async fn a_header_with_invalid_bytes_is_refused(pool: PgPool) {
    let app = route_app(pool).await;
    let body = payment_intent_succeeded("evt_bytes", "pi_bytes", "user_1", 100);
    // A valid, fresh signature; the stray bytes sit in an item that would be ignored.
    let mut header = signature_header(SECRET, now(), body.as_bytes()).into_bytes();
    header.extend_from_slice(b",x=\xff\xfe");
    let request = app
        .client
        .post(format!("{}/webhooks/stripe", app.address))
        .header(
            "stripe-signature",
            reqwest::header::HeaderValue::from_bytes(&header).unwrap(),
        )
        .body(body);
    let response = app.send(request).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let answer: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        answer["error"],
        "malformed signature header: not visible ASCII"
    );
    app.assert_nothing_written().await;
    app.assert_consistent().await;
}

#[sqlx::test]
async fn timestamps_outside_the_tolerance_are_refused_in_both_directions(pool: PgPool) {
    let t0 = 1_800_000_000;
    let app = route_app_with(pool, Clock::Fixed(t0), |s| s.tolerance_secs = 300).await;
    for (case, t) in [("stale", t0 - 301), ("future", t0 + 301)] {
        let body = payment_intent_succeeded(&format!("evt_{case}"), "pi_t", "user_1", 100);
        let header = signature_header(SECRET, t, body.as_bytes());
        let response = app.post_stripe_with(body.into_bytes(), Some(&header)).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{case}");
    }
    app.assert_nothing_written().await;

    for (case, t) in [
        ("just old enough", t0 - 300),
        ("just early enough", t0 + 300),
    ] {
        let body =
            payment_intent_succeeded(&format!("evt_{}", t), &format!("pi_{t}"), "user_1", 100);
        let header = signature_header(SECRET, t, body.as_bytes());
        let response = app.post_stripe_with(body.into_bytes(), Some(&header)).await;
        assert_eq!(response.status(), StatusCode::OK, "{case}");
    }
    assert_eq!(app.count("processed_events").await, 2);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_signed_body_that_is_not_an_event_is_refused(pool: PgPool) {
    let app = route_app(pool).await;
    let long_id = format!(r#"{{"id":"{}","type":"x","created":1}}"#, "e".repeat(300));
    for body in [
        "not json",
        "[1,2,3]",
        "{}",
        r#"{"type":"payment_intent.succeeded","created":1}"#,
        r#"{"id":"","type":"payment_intent.succeeded"}"#,
        r#"{"id":"evt_1","created":1}"#,
        r#"{"id":42,"type":"payment_intent.succeeded"}"#,
        r#"{"id":"evt 1","type":"payment_intent.succeeded"}"#,
        r#"{"id":"evt_1","type":"x","created":"yesterday"}"#,
        long_id.as_str(),
    ] {
        let response = app.post_stripe(body).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
    }
    app.assert_nothing_written().await;
    app.assert_consistent().await;
}

#[sqlx::test]
async fn an_unknown_or_unconfigured_provider_is_not_found(pool: PgPool) {
    let app = route_app(pool.clone()).await;
    let request = app
        .client
        .post(format!("{}/webhooks/paypal", app.address))
        .body("{}");
    let response = app.send(request).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);

    let unconfigured = route_app_with(pool, Clock::System, |s| {
        s.stripe_webhook_secret = Secrets::default()
    })
    .await;
    let body = payment_intent_succeeded("evt_nosecret", "pi_nosecret", "user_1", 100);
    let response = unconfigured.post_stripe(&body).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    unconfigured.assert_nothing_written().await;
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_body_over_the_limit_is_refused_with_413(pool: PgPool) {
    let app = route_app_with(pool, Clock::System, |s| s.max_body_bytes = 4096).await;
    let padding = "x".repeat(5000);
    let body = payment_intent_succeeded("evt_big", "pi_big", "user_1", 100).replace(
        "\"livemode\"",
        &format!("\"pad\":\"{padding}\",\"livemode\""),
    );
    let response = app.post_stripe(&body).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    app.assert_nothing_written().await;

    // Just under the limit is fine.
    let body = payment_intent_succeeded("evt_small", "pi_small", "user_1", 100);
    assert!(body.len() < 4096);
    app.deliver(&body, "processed").await;
    app.assert_consistent().await;
}

// Pure properties of the parser and verifier: no database, no HTTP.

const T: i64 = 1_800_000_000;

fn verifier() -> StripeVerifier {
    StripeVerifier::new(&Secrets::new([SECRET]), 300, Scope::ANY).unwrap()
}

fn headers(value: &[u8]) -> Option<HeaderMap> {
    let mut headers = HeaderMap::new();
    headers.insert(SIGNATURE_HEADER, http::HeaderValue::from_bytes(value).ok()?);
    Some(headers)
}

fn sample_body(note: &str) -> Bytes {
    Bytes::from(
        serde_json::json!({"id": "evt_prop", "type": "invoice.paid", "created": T,
                           "data": {"object": {"id": "in_1", "note": note}}})
        .to_string(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_header_parser_never_panics(input in any::<String>()) {
        let _ = parse_header(&input);
    }

    #[test]
    fn header_like_input_never_panics(input in "[tv01=,a-f ]{0,200}") {
        let _ = parse_header(&input);
        if let Some(h) = headers(input.as_bytes()) {
            let _ = verifier().verify(&h, &sample_body(""), T);
        }
    }

    #[test]
    fn any_one_byte_change_to_the_body_fails(note in "[^\\x00]{0,64}", index in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let body = sample_body(&note);
        let header = signature_header(SECRET, T, &body);
        let h = headers(header.as_bytes()).unwrap();
        prop_assert!(verifier().verify(&h, &body, T).is_ok());

        let mut changed = body.to_vec();
        let i = index.index(changed.len());
        changed[i] ^= flip;
        let result = verifier().verify(&h, &Bytes::from(changed), T);
        prop_assert_eq!(result.err(), Some(SignatureError::Mismatch));
    }

    #[test]
    fn any_one_byte_change_to_the_header_fails(index in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let body = sample_body("");
        let mut header = signature_header(SECRET, T, &body).into_bytes();
        let i = index.index(header.len());
        header[i] ^= flip;
        if let Some(h) = headers(&header) {
            prop_assert!(verifier().verify(&h, &body, T).is_err());
        }
    }
}
