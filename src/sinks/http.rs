//! POSTs each message as JSON to `WEBHOOKD_SINK_URL`, signed with the Standard
//! Webhooks scheme under `WEBHOOKD_SINK_SECRET`, so the receiving app verifies
//! it with an off-the-shelf library: the body and headers of
//! [`super::envelope`]. 2xx is delivered.
//! A failed request's error keeps its cause chain, never the URL.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER, USER_AGENT};

use super::envelope::Sealer;
use super::{Delivery, Message, Problem, retry_after};
use crate::clock::Clock;

/// The default of `WEBHOOKD_SINK_MAX_BODY_BYTES`: twice the largest webhook
/// webhookd accepts by default (`WEBHOOKD_MAX_BODY_BYTES`), whose verified
/// body a generic source's row carries, with room for the envelope.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Clone)]
pub struct HttpSink {
    client: reqwest::Client,
    url: reqwest::Url,
    sealer: Sealer,
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
        let sealer = Sealer::new(Some(secret), clock, DEFAULT_MAX_BODY_BYTES).map_err(|_| {
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
            sealer,
            timeout,
        })
    }

    /// The largest request body sent (`WEBHOOKD_SINK_MAX_BODY_BYTES`): a row
    /// whose body is larger is dead-lettered without being sent.
    #[must_use]
    pub fn with_max_body_bytes(mut self, max_body_bytes: u64) -> Self {
        self.sealer = self.sealer.with_max_body_bytes(max_body_bytes);
        self
    }

    /// Whether the receiver answers at all: a `HEAD` of its URL, unsigned,
    /// whose status (a 405 as much as a 200) is what it answered.
    pub async fn reach(&self) -> Result<u16, Problem> {
        let sent = self
            .client
            .head(self.url.clone())
            .timeout(self.timeout)
            .send();
        match sent.await {
            Ok(response) => Ok(response.status().as_u16()),
            Err(error) => {
                // The causes say why: refused, timed out, a certificate.
                let error = error.without_url();
                let mut said = error.to_string();
                let mut cause = std::error::Error::source(&error);
                while let Some(error) = cause {
                    said.push_str(&format!(": {error}"));
                    cause = error.source();
                }
                Err(Problem::Unreachable(format!(
                    "{} did not answer: {said}",
                    self.where_to()
                )))
            }
        }
    }

    /// Where deliveries go, without what the URL may carry besides (a
    /// token in its path or query, a password).
    fn where_to(&self) -> String {
        let host = self.url.host_str().unwrap_or_default();
        match self.url.port() {
            Some(port) => format!("{}://{host}:{port}", self.url.scheme()),
            None => format!("{}://{host}", self.url.scheme()),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub async fn deliver(&self, message: Message) -> Delivery {
        let sealed = match self.sealer.seal(message) {
            Ok(sealed) => sealed,
            Err(refused) => return refused,
        };
        let mut request = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("webhookd/", env!("CARGO_PKG_VERSION")));
        for (name, value) in sealed.headers() {
            request = request.header(name, value);
        }
        let response = request.body(sealed.body).send().await;
        match response {
            Ok(response) => classify(response.status(), response.headers(), self.sealer.now()),
            Err(error) => Delivery::Retry {
                error: describe(error),
                retry_after: None,
            },
        }
    }
}

/// What went wrong, with its cause chain (timeout, refused connection, TLS,
/// ...), never the URL (it may carry credentials), at most
/// [`crate::telemetry::MAX_LOGGED_ERROR_BYTES`].
fn describe(error: reqwest::Error) -> String {
    let text = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connection failed"
    } else {
        "request failed"
    }
    .to_owned();
    super::with_causes(text, &error.without_url())
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
