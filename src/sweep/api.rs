//! A provider's REST API as a sweep reads it: `https://` only (loopback
//! aside, for tests), our key on every request and nowhere else, a pace
//! under the provider's rate limit, and retries where a retry can help.
//!
//! - 429 and 5xx are retried with exponential backoff and jitter, never
//!   sooner than a `Retry-After` asks (up to 30 s: a provider cannot park a
//!   sweep);
//! - network errors are retried a bounded number of times;
//! - 401 and 403 stop at once: the key is wrong or lacks access;
//! - any other answer stops with the provider's message (bounded).

use std::net::IpAddr;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use secrecy::{ExposeSecret, SecretString};
use tokio::time::Instant;

use crate::outbox::retry::jitter;
use crate::telemetry;

/// How many times one request is tried before the sweep gives up.
const MOST_TRIES: u32 = 8;
/// The first backoff; it doubles each try, up to [`LONGEST_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const LONGEST_BACKOFF: Duration = Duration::from_secs(30);
/// Longest one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a sweep stopped talking to the provider.
#[derive(Debug, thiserror::Error)]
pub enum ApiFailure {
    #[error("{provider} refused the API key ({status}): {hint}")]
    Unauthorized {
        provider: &'static str,
        status: u16,
        hint: &'static str,
    },
    #[error("{provider} answered {status}: {message}")]
    Refused {
        provider: &'static str,
        status: u16,
        message: String,
    },
    #[error("{provider} still failed after {tries} tries: {last}")]
    GaveUp {
        provider: &'static str,
        tries: u32,
        last: String,
    },
    #[error("{provider} sent a body that is not what its API documents: {0}", provider = .1)]
    Malformed(String, &'static str),
}

/// How a request authenticates.
pub enum Auth {
    Bearer(SecretString),
    Basic {
        user: String,
        password: SecretString,
    },
}

/// One provider's API: its base URL, key and pace.
pub struct Api {
    provider: &'static str,
    /// Said when the provider refuses the key.
    unauthorized_hint: &'static str,
    base: Url,
    auth: HeaderValue,
    client: reqwest::Client,
    /// Least time between the starts of two requests.
    interval: Duration,
    next_start: Instant,
    /// Requests sent, retries included.
    pub requests: u64,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("provider", &self.provider)
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

impl Api {
    /// `base` must be `https://`, or `http://` on a loopback address.
    pub fn new(
        provider: &'static str,
        base: &str,
        auth: &Auth,
        requests_per_second: u32,
        unauthorized_hint: &'static str,
    ) -> anyhow::Result<Self> {
        let base = Url::parse(base)
            .map_err(|_| anyhow::anyhow!("the {provider} API base is not a URL"))?;
        anyhow::ensure!(
            base.scheme() == "https" || (base.scheme() == "http" && is_loopback(&base)),
            "the {provider} API base must be https:// (plain http only on a loopback address): \
             the API key must not travel in the clear"
        );
        let mut auth = match auth {
            Auth::Bearer(key) => HeaderValue::try_from(format!("Bearer {}", key.expose_secret())),
            Auth::Basic { user, password } => {
                use base64::Engine;
                let pair = format!("{user}:{}", password.expose_secret());
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                HeaderValue::try_from(format!("Basic {encoded}"))
            }
        }
        .map_err(|_| anyhow::anyhow!("the {provider} API key is not a valid header value"))?;
        auth.set_sensitive(true);
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            // The key goes to the base's host only, never where a redirect points.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("webhookd/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Api {
            provider,
            unauthorized_hint,
            base,
            auth,
            client,
            interval: Duration::from_secs_f64(1.0 / f64::from(requests_per_second.max(1))),
            next_start: Instant::now(),
            requests: 0,
        })
    }

    /// GETs `path` with `query`, retrying what a retry can mend, and returns
    /// the body of the 200.
    pub async fn get(
        &mut self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Vec<u8>, ApiFailure> {
        let mut url = self.base.clone();
        url.set_path(path);
        url.query_pairs_mut().extend_pairs(query);
        let mut last = String::new();
        for attempt in 1..=MOST_TRIES {
            let wait = match self.try_once(&url).await? {
                Tried::Answered(body) => return Ok(body),
                Tried::Failed { error, retry_after } => {
                    last = error;
                    retry_after
                }
            };
            if attempt < MOST_TRIES {
                self.back_off(attempt, &last, wait).await;
            }
        }
        Err(ApiFailure::GaveUp {
            provider: self.provider,
            tries: MOST_TRIES,
            last,
        })
    }

    /// One try of `url`, at the pace.
    async fn try_once(&mut self, url: &Url) -> Result<Tried, ApiFailure> {
        self.pace().await;
        self.requests += 1;
        let sent = self
            .client
            .get(url.clone())
            .header(AUTHORIZATION, self.auth.clone())
            .send()
            .await;
        match sent {
            Err(error) => Ok(Tried::Failed {
                error: error.without_url().to_string(),
                retry_after: None,
            }),
            Ok(response) => {
                let status = response.status();
                let retry_after = retry_after(response.headers().get(RETRY_AFTER));
                self.judge(status, read_bounded(response).await, retry_after)
            }
        }
    }

    /// What an answer with `status` and `body` comes to: its body, a
    /// failure worth another try (429, 5xx, a body cut short), or the end
    /// of the request.
    fn judge(
        &self,
        status: StatusCode,
        body: Result<Vec<u8>, Unread>,
        retry_after: Option<Duration>,
    ) -> Result<Tried, ApiFailure> {
        match (status, body) {
            (StatusCode::OK, Ok(body)) => Ok(Tried::Answered(body)),
            (_, Err(Unread::TooLarge)) => Err(ApiFailure::Malformed(
                format!("a body over {MOST_BODY_BYTES} bytes"),
                self.provider,
            )),
            (_, Err(Unread::Failed(error))) => Ok(Tried::Failed {
                error: error.without_url().to_string(),
                retry_after: None,
            }),
            (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, _) => {
                Err(ApiFailure::Unauthorized {
                    provider: self.provider,
                    status: status.as_u16(),
                    hint: self.unauthorized_hint,
                })
            }
            (status, Ok(_))
                if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() =>
            {
                Ok(Tried::Failed {
                    error: format!("HTTP {}", status.as_u16()),
                    retry_after,
                })
            }
            (status, Ok(body)) => Err(ApiFailure::Refused {
                provider: self.provider,
                status: status.as_u16(),
                message: error_message(&body),
            }),
        }
    }

    /// Says that try `attempt` failed with `error`, and waits its backoff,
    /// or longer if the provider `asked` to.
    async fn back_off(&self, attempt: u32, error: &str, asked: Option<Duration>) {
        let backoff = backoff(attempt, self.requests).max(asked.unwrap_or_default());
        tracing::warn!(
            provider = self.provider,
            attempt,
            error = %error,
            retry_in_ms = backoff.as_millis() as u64,
            "provider API request failed; retrying"
        );
        tokio::time::sleep(backoff).await;
    }

    /// Waits until the next request may start.
    async fn pace(&mut self) {
        tokio::time::sleep_until(self.next_start).await;
        self.next_start = Instant::now() + self.interval;
    }
}

/// Largest body read from a provider: a page of 100 objects is far smaller.
pub const MOST_BODY_BYTES: usize = 32 * 1024 * 1024;

enum Unread {
    TooLarge,
    Failed(reqwest::Error),
}

/// What one try of a request came to, when it does not end the request.
enum Tried {
    /// The body of the 200.
    Answered(Vec<u8>),
    /// Worth another try, no sooner than a `Retry-After` asks.
    Failed {
        error: String,
        retry_after: Option<Duration>,
    },
}

/// The body, read chunk by chunk, refused past [`MOST_BODY_BYTES`].
async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, Unread> {
    if response
        .content_length()
        .is_some_and(|length| length > MOST_BODY_BYTES as u64)
    {
        return Err(Unread::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Unread::Failed)? {
        if body.len() + chunk.len() > MOST_BODY_BYTES {
            return Err(Unread::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn is_loopback(url: &Url) -> bool {
    match url.host_str() {
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

/// Exponential from [`FIRST_BACKOFF`], capped, with ±20% jitter.
fn backoff(attempt: u32, salt: u64) -> Duration {
    let base = FIRST_BACKOFF
        .saturating_mul(1 << (attempt - 1).min(16))
        .min(LONGEST_BACKOFF);
    #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
    let jitter = jitter(salt as i64, attempt as i32);
    base.mul_f64(1.0 + 0.2 * jitter)
}

/// A `Retry-After` in seconds, bounded (a provider cannot park a sweep).
fn retry_after(value: Option<&HeaderValue>) -> Option<Duration> {
    let seconds: u64 = value?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(seconds.min(LONGEST_BACKOFF.as_secs())))
}

/// The provider's own error message (`{"error": {"message": ...}}`, or
/// Razorpay's `{"error": {"description": ...}}`), bounded.
fn error_message(body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let message = value
        .pointer("/error/message")
        .or_else(|| value.pointer("/error/description"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or("no error message");
    telemetry::bounded(message).into_owned()
}

#[cfg(test)]
mod tests {
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
        assert_eq!(error_message(b"<html>"), "no error message");
    }
}
