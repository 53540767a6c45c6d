//! POSTs each message as JSON to `WEBHOOKD_SINK_URL`, signed with the Standard
//! Webhooks scheme under `WEBHOOKD_SINK_SECRET`, so the receiving app verifies
//! it with an off-the-shelf library. `webhook-id` is the outbox id: stable
//! across retries, it doubles as the idempotency key. 2xx is delivered.
//!
//! Body: `{"type": topic, "timestamp": created_at, "data": payload,
//! "provider": ..., "event_id": ..., "event_type": ...}`; for a generic
//! source, `data` is the verified body and `event_type` its type (GitHub's
//! `X-GitHub-Event`, Shopify's `X-Shopify-Topic`).

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER, USER_AGENT};
use serde_json::json;

use super::Delivery;
use crate::clock::Clock;
use crate::outbox::store::Leased;
use crate::providers::standard::Signer;

#[derive(Clone)]
pub struct HttpSink {
    client: reqwest::Client,
    url: reqwest::Url,
    signer: Signer,
    clock: Clock,
    timeout: Duration,
}

impl std::fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a token: show only where it goes.
        f.debug_struct("HttpSink")
            .field("host", &self.url.host_str())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl HttpSink {
    /// `timeout` bounds each whole request. Redirects are not followed: a
    /// signed message goes only where it was configured to go.
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
        })
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub async fn deliver(&self, message: &Leased) -> Delivery {
        let body = json!({
            "type": message.topic,
            "timestamp": message.created_at,
            "data": message.payload,
            "provider": message.provider,
            "event_id": message.event_id,
            "event_type": message.event_type,
        })
        .to_string();
        let id = message.id.to_string();
        let timestamp = self.clock.now();
        let response = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("webhookd/", env!("CARGO_PKG_VERSION")))
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string())
            .header(
                "webhook-signature",
                self.signer.sign(&id, timestamp, body.as_bytes()),
            )
            .body(body)
            .send()
            .await;
        match response {
            Ok(response) => classify(response.status(), response.headers()),
            Err(error) => Delivery::Retry {
                // Never the URL: it may carry credentials.
                error: if error.is_timeout() {
                    "timed out".to_owned()
                } else if error.is_connect() {
                    "connection failed".to_owned()
                } else {
                    format!("request failed: {}", error.without_url())
                },
                retry_after: None,
            },
        }
    }
}

/// 2xx delivered; 408, 429, 5xx (and anything odd) retried; other 4xx
/// permanent, and so are redirects, which are never followed.
fn classify(status: StatusCode, headers: &HeaderMap) -> Delivery {
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
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    Delivery::Retry { error, retry_after }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_for_retrying() {
        let none = HeaderMap::new();
        assert_eq!(classify(StatusCode::OK, &none), Delivery::Delivered);
        assert_eq!(classify(StatusCode::NO_CONTENT, &none), Delivery::Delivered);
        for status in [
            StatusCode::BAD_REQUEST,
            StatusCode::UNAUTHORIZED,
            StatusCode::NOT_FOUND,
            StatusCode::GONE,
            StatusCode::MOVED_PERMANENTLY,
        ] {
            assert!(
                matches!(classify(status, &none), Delivery::Permanent { .. }),
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
                matches!(classify(status, &none), Delivery::Retry { .. }),
                "{status}"
            );
        }
        let mut asked = HeaderMap::new();
        asked.insert(RETRY_AFTER, "120".parse().unwrap());
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, &asked),
            Delivery::Retry {
                error: "HTTP 429".to_owned(),
                retry_after: Some(Duration::from_secs(120))
            }
        );
    }
}
