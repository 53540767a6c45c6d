//! POSTs each message as JSON to `WEBHOOKD_SINK_URL`, signed with the Standard
//! Webhooks scheme under `WEBHOOKD_SINK_SECRET`, so the receiving app verifies
//! it with an off-the-shelf library. `webhook-id` is the outbox id: stable
//! across retries, it doubles as the idempotency key. 2xx is delivered.
//!
//! Body: `{"type": topic, "timestamp": created_at, "data": payload,
//! "provider": ..., "event_id": ..., "event_type": ...}`; for a generic
//! source, `data` is the verified body and `event_type` its type (GitHub's
//! `X-GitHub-Event`, Shopify's `X-Shopify-Topic`). A body larger than
//! `WEBHOOKD_SINK_MAX_BODY_BYTES` is never sent: the row is dead-lettered.
//! A failed request's error keeps its cause chain, never the URL.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER, USER_AGENT};

use super::{Delivery, Message, retry_after};
use crate::clock::Clock;
use crate::providers::standard::Signer;
use crate::telemetry;

/// The default of `WEBHOOKD_SINK_MAX_BODY_BYTES`: twice the largest webhook
/// webhookd accepts by default (`WEBHOOKD_MAX_BODY_BYTES`), whose verified
/// body a generic source's row carries, with room for the envelope.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Clone)]
pub struct HttpSink {
    client: reqwest::Client,
    url: reqwest::Url,
    signer: Signer,
    clock: Clock,
    timeout: Duration,
    max_body_bytes: u64,
}

impl std::fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a token: show only where it goes.
        f.debug_struct("HttpSink")
            .field("host", &self.url.host_str())
            .field("timeout", &self.timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl HttpSink {
    /// `timeout` bounds each whole request. Redirects are not followed: a
    /// signed message goes only where it was configured to go. Bodies are
    /// limited to [`DEFAULT_MAX_BODY_BYTES`] until
    /// [`HttpSink::with_max_body_bytes`] says otherwise.
    pub fn new(url: &str, secret: &str, timeout: Duration, clock: Clock) -> anyhow::Result<Self> {
        let url = reqwest::Url::parse(url)
            .map_err(|_| anyhow::anyhow!("WEBHOOKD_SINK_URL is not a URL"))?;
        anyhow::ensure!(
            matches!(url.scheme(), "http" | "https"),
            "WEBHOOKD_SINK_URL must be http or https"
        );
        let signer = Signer::new(secret).map_err(|_| {
            anyhow::anyhow!(
                "WEBHOOKD_SINK_SECRET must be a Standard Webhooks secret: whsec_ followed by base64"
            )
        })?;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(HttpSink {
            client,
            url,
            signer,
            clock,
            timeout,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        })
    }

    /// The largest request body sent (`WEBHOOKD_SINK_MAX_BODY_BYTES`): a row
    /// whose body is larger is dead-lettered without being sent.
    #[must_use]
    pub fn with_max_body_bytes(mut self, max_body_bytes: u64) -> Self {
        self.max_body_bytes = max_body_bytes;
        self
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub async fn deliver(&self, message: Message) -> Delivery {
        let body = body(&message);
        let id = message.id.to_string();
        // The body holds the payload now: free the leased copy.
        drop(message);
        if body.len() as u64 > self.max_body_bytes {
            return Delivery::Permanent {
                error: format!(
                    "not sent: the body is {} bytes, over the sink's limit of {} (WEBHOOKD_SINK_MAX_BODY_BYTES)",
                    body.len(),
                    self.max_body_bytes
                ),
            };
        }
        let timestamp = self.clock.now();
        let signature = self.signer.sign(&id, timestamp, &body);
        let response = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("webhookd/", env!("CARGO_PKG_VERSION")))
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await;
        match response {
            Ok(response) => classify(response.status(), response.headers(), self.clock.now()),
            Err(error) => Delivery::Retry {
                error: describe(error),
                retry_after: None,
            },
        }
    }
}

/// The request body, built once: `{"type", "timestamp", "data", "provider",
/// "event_id", "event_type"}`, with the payload spliced in as Postgres wrote
/// it (`jsonb` output is always valid JSON), never parsed or copied twice.
fn body(message: &Message) -> Vec<u8> {
    fn string(body: &mut Vec<u8>, value: Option<&str>) {
        serde_json::to_writer(body, &value).expect("a string serializes into a Vec");
    }
    let mut body = Vec::with_capacity(message.payload.len() + 256);
    body.extend_from_slice(br#"{"type":"#);
    string(&mut body, Some(&message.topic));
    body.extend_from_slice(br#","timestamp":"#);
    string(&mut body, Some(&message.created_at));
    body.extend_from_slice(br#","data":"#);
    body.extend_from_slice(message.payload.as_bytes());
    body.extend_from_slice(br#","provider":"#);
    string(&mut body, Some(&message.provider));
    body.extend_from_slice(br#","event_id":"#);
    string(&mut body, Some(&message.event_id));
    body.extend_from_slice(br#","event_type":"#);
    string(&mut body, message.event_type.as_deref());
    body.push(b'}');
    body
}

/// What went wrong, with its cause chain (timeout, refused connection, TLS,
/// ...), never the URL (it may carry credentials), at most
/// [`telemetry::MAX_LOGGED_ERROR_BYTES`].
fn describe(error: reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connection failed"
    } else {
        "request failed"
    }
    .to_owned();
    let error = error.without_url();
    let mut cause: Option<&dyn std::error::Error> = Some(&error);
    while let Some(current) = cause {
        let said = current.to_string();
        // Some errors repeat their source's message in their own.
        if !said.is_empty() && !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = current.source();
    }
    telemetry::bounded_to(&text, telemetry::MAX_LOGGED_ERROR_BYTES).into_owned()
}

/// 2xx delivered; 408, 429, 5xx (and anything odd) retried; other 4xx
/// permanent, and so are redirects, which are never followed.
/// `now` (Unix seconds) reads a `Retry-After` date.
fn classify(status: StatusCode, headers: &HeaderMap, now: i64) -> Delivery {
    if status.is_success() {
        return Delivery::Delivered;
    }
    if status.is_redirection() {
        return Delivery::Permanent {
            error: format!("HTTP {} (redirects are not followed)", status.as_u16()),
        };
    }
    let error = format!("HTTP {}", status.as_u16());
    let retryable = status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || !status.is_client_error();
    if !retryable {
        return Delivery::Permanent { error };
    }
    let retry_after = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry_after::parse(v, now));
    Delivery::Retry { error, retry_after }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-01T00:00:00Z.
    const NOW: i64 = 1_796_083_200;

    #[test]
    fn statuses_are_classified_for_retrying() {
        let none = HeaderMap::new();
        let classify = |status| classify(status, &none, NOW);
        assert_eq!(classify(StatusCode::OK), Delivery::Delivered);
        assert_eq!(classify(StatusCode::NO_CONTENT), Delivery::Delivered);
        for status in [
            StatusCode::BAD_REQUEST,
            StatusCode::UNAUTHORIZED,
            StatusCode::NOT_FOUND,
            StatusCode::GONE,
            StatusCode::MOVED_PERMANENTLY,
        ] {
            assert!(
                matches!(classify(status), Delivery::Permanent { .. }),
                "{status}"
            );
        }
        for status in [
            StatusCode::REQUEST_TIMEOUT,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::BAD_GATEWAY,
        ] {
            assert!(
                matches!(classify(status), Delivery::Retry { .. }),
                "{status}"
            );
        }
    }

    #[test]
    fn retry_after_is_read_as_seconds_or_as_an_http_date() {
        for (value, wait) in [
            ("120", Some(120)),
            ("Tue, 01 Dec 2026 00:10:00 GMT", Some(600)),
            ("Mon, 30 Nov 2026 00:00:00 GMT", Some(0)),
            ("whenever", None),
        ] {
            let mut asked = HeaderMap::new();
            asked.insert(RETRY_AFTER, value.parse().unwrap());
            assert_eq!(
                classify(StatusCode::SERVICE_UNAVAILABLE, &asked, NOW),
                Delivery::Retry {
                    error: "HTTP 503".to_owned(),
                    retry_after: wait.map(Duration::from_secs)
                },
                "{value}"
            );
        }
    }

    #[test]
    fn the_body_carries_the_payload_as_stored_and_escapes_the_rest() {
        let message = Message {
            id: 7,
            topic: "wallet.credited".into(),
            provider: "stripe".into(),
            event_id: "evt_\"quoted\"\n".into(),
            event_type: None,
            payload: r#"{"amount_minor": 1500, "user_id": "u1"}"#.into(),
            attempts: 1,
            created_at: "2026-12-01T00:00:00.000000Z".into(),
        };
        let body: serde_json::Value = serde_json::from_slice(&body(&message)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "type": "wallet.credited",
                "timestamp": "2026-12-01T00:00:00.000000Z",
                "data": {"amount_minor": 1500, "user_id": "u1"},
                "provider": "stripe",
                "event_id": "evt_\"quoted\"\n",
                "event_type": null,
            })
        );
    }

    #[tokio::test]
    async fn a_failed_request_keeps_its_cause_but_not_its_url() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://user:token@127.0.0.1:{port}/hooks?key=secret");
        let error = reqwest::Client::new().get(&url).send().await.unwrap_err();
        let described = describe(error);
        assert!(described.starts_with("connection failed: "), "{described}");
        assert!(
            described.to_lowercase().contains("connection refused"),
            "the cause is kept: {described}"
        );
        assert!(
            !described.contains("token") && !described.contains("secret"),
            "{described}"
        );
    }
}
