//! The API client's rules that need no server.

use super::*;

fn api(base: &str) -> anyhow::Result<Api> {
    Api::new(
        "stripe",
        base,
        &Auth::Bearer("sk_test_x".into()),
        20,
        "check it",
    )
}

#[test]
fn the_key_travels_over_https_or_to_a_loopback_address_only() {
    assert!(api("https://api.stripe.com").is_ok());
    assert!(api("http://127.0.0.1:4000").is_ok());
    assert!(api("http://[::1]:4000").is_ok());
    // A name could resolve anywhere: only a literal loopback address.
    assert!(api("http://localhost:4000").is_err());
    for refused in [
        "http://api.stripe.com",
        "http://10.0.0.1",
        "ftp://x",
        "not a url",
    ] {
        assert!(api(refused).is_err(), "{refused}");
    }
}

#[test]
fn backoff_doubles_within_its_jitter_and_is_capped() {
    for attempt in 1..=10 {
        let wait = backoff(attempt, 7).as_secs_f64();
        let base = (0.5 * f64::from(1u32 << (attempt - 1))).min(30.0);
        assert!(
            wait >= base * 0.8 - 1e-9 && wait <= base * 1.2 + 1e-9,
            "{attempt}: {wait}"
        );
    }
    let header = HeaderValue::from_static("3600");
    assert_eq!(retry_after(Some(&header)), Some(LONGEST_BACKOFF));
    assert_eq!(
        retry_after(Some(&HeaderValue::from_static("2"))),
        Some(Duration::from_secs(2))
    );
    assert_eq!(retry_after(Some(&HeaderValue::from_static("soon"))), None);
}

#[test]
fn the_providers_message_is_kept_and_bounded() {
    let body = br#"{"error":{"type":"invalid_request_error","message":"No such event"}}"#;
    assert_eq!(error_message(body), "No such event");
    let body = br#"{"error":{"code":"BAD_REQUEST_ERROR","description":"bad from"}}"#;
    assert_eq!(error_message(body), "bad from");
    let body = br#"{"name":"INVALID_REQUEST","message":"Request is not well-formed.","details":[{"field":"start_time","issue":"INVALID_PARAMETER_SYNTAX"}]}"#;
    assert_eq!(
        error_message(body),
        "Request is not well-formed. (start_time: INVALID_PARAMETER_SYNTAX)"
    );
    let body = br#"{"error":"invalid_client","error_description":"Client Authentication failed"}"#;
    assert_eq!(error_message(body), "Client Authentication failed");
    assert_eq!(error_message(b"<html>"), "no error message");
}
