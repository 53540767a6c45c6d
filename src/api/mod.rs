//! A provider's REST API as webhookd reads it (a sweep's listings, a thin
//! event's fetch): `https://` only (loopback aside, for tests), our key on
//! every request and nowhere else, a pace under the provider's rate limit,
//! and retries where a retry can help.
//!
//! - 429 and 5xx are retried with exponential backoff and jitter, never
//!   sooner than a `Retry-After` asks (up to 30 s: a provider cannot park a
//!   sweep);
//! - network errors are retried a bounded number of times;
//! - 401 and 403 stop at once: the key is wrong or lacks access (with
//!   OAuth client credentials, a 401 first fetches a new token, once:
//!   [`oauth`]);
//! - any other answer stops with the provider's message (bounded).

use std::net::IpAddr;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, DATE, HeaderValue, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use secrecy::{ExposeSecret, SecretString};
use tokio::time::Instant;

use crate::outbox::retry::jitter;

mod answer;
mod oauth;

pub use answer::MOST_BODY_BYTES;
use answer::{Unread, error_message, read_bounded, retry_after};

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
    /// More than a sweep holds in memory at once, even split as far as it
    /// goes: sweep a shorter window (`--since`), or a smaller one.
    #[error("{provider} listed more than a sweep holds at once: {0}; refused", provider = .1)]
    Oversized(String, &'static str),
}

/// Why a single request ([`Api::get_once`]) got no body.
#[derive(Debug, thiserror::Error)]
pub enum Once {
    /// A retry may mend it: a network error, 429, a 5xx.
    #[error("{0}")]
    Transient(String),
    #[error(transparent)]
    Failed(ApiFailure),
}

/// How a request authenticates.
pub enum Auth {
    Bearer(SecretString),
    Basic {
        user: String,
        password: SecretString,
    },
    /// OAuth 2.0 client credentials: the pair goes (as HTTP Basic) to
    /// `token_path` only, and every other request carries the bearer token
    /// it answers.
    ClientCredentials {
        token_path: &'static str,
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
    /// `Authorization` of every request, or with client credentials of the
    /// token request only.
    auth: HeaderValue,
    /// With client credentials: where tokens come from, and the one held.
    token_path: Option<&'static str>,
    token: Option<oauth::Token>,
    client: reqwest::Client,
    /// Least time between the starts of two requests.
    interval: Duration,
    next_start: Instant,
    /// Sent with every request besides the key (Stripe Connect's
    /// `Stripe-Account`).
    headers: Vec<(&'static str, HeaderValue)>,
    /// Requests sent, retries included.
    pub requests: u64,
    /// The `Date` of the provider's last answer (its clock, to the
    /// second), and when that answer came.
    pub date: Option<(std::time::SystemTime, Instant)>,
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
        let (auth, token_path) = match auth {
            Auth::Bearer(key) => (format!("Bearer {}", key.expose_secret()), None),
            Auth::Basic { user, password } => (basic(user, password), None),
            Auth::ClientCredentials {
                token_path,
                user,
                password,
            } => (basic(user, password), Some(*token_path)),
        };
        let auth = sensitive(auth)
            .map_err(|_| anyhow::anyhow!("the {provider} API key is not a valid header value"))?;
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
            token_path,
            token: None,
            client,
            interval: Duration::from_secs_f64(1.0 / f64::from(requests_per_second.max(1))),
            next_start: Instant::now(),
            headers: Vec::new(),
            requests: 0,
            date: None,
        })
    }

    /// The same API, every request also carrying header `name: value`.
    pub fn with_header(mut self, name: &'static str, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// The base URL requests go to (and the host that links must name).
    pub fn base(&self) -> &Url {
        &self.base
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
        match self.token_path {
            None => {
                let auth = self.auth.clone();
                self.send(&Sending::get(url, auth)).await
            }
            Some(token_path) => self.get_with_token(url, token_path).await,
        }
    }

    /// GETs `path` once, with `headers` besides the key, within `timeout`,
    /// its body at most `most` bytes (a body over them is refused for good):
    /// for a request that answers a webhook, which must not wait out a
    /// sweep's backoff. What a retry can mend (429, 5xx, a network error, a
    /// body cut short) is [`Once::Transient`], for the caller's caller to
    /// retry later; the rest is what [`Api::get`] would stop with. Shared by
    /// concurrent requests: it neither paces nor counts them.
    pub async fn get_once(
        &self,
        path: &str,
        headers: &[(&'static str, HeaderValue)],
        timeout: Duration,
        most: usize,
    ) -> Result<Vec<u8>, Once> {
        if self.token_path.is_some() {
            return Err(Once::Failed(ApiFailure::Malformed(
                "a single request cannot buy a token".into(),
                self.provider,
            )));
        }
        let mut url = self.base.clone();
        url.set_path(path);
        let mut builder = self
            .client
            .get(url)
            .timeout(timeout)
            .header(AUTHORIZATION, self.auth.clone());
        for (name, value) in headers {
            builder = builder.header(*name, value.clone());
        }
        let response = match builder.send().await {
            Ok(response) => response,
            Err(error) => return Err(Once::Transient(error.without_url().to_string())),
        };
        let status = response.status();
        let retry_after = retry_after(response.headers().get(RETRY_AFTER));
        match self.judge(status, read_bounded(response, most).await, retry_after) {
            Ok(Tried::Answered(body)) => Ok(body),
            Ok(Tried::Failed { error, .. }) => Err(Once::Transient(error)),
            Err(failure) => Err(Once::Failed(failure)),
        }
    }

    /// Sends `request` until it is answered, or a retry cannot help.
    async fn send(&mut self, request: &Sending) -> Result<Vec<u8>, ApiFailure> {
        let mut last = String::new();
        for attempt in 1..=MOST_TRIES {
            let wait = match self.try_once(request).await? {
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

    /// One try of `request`, at the pace.
    async fn try_once(&mut self, request: &Sending) -> Result<Tried, ApiFailure> {
        self.pace().await;
        self.requests += 1;
        let mut builder = self
            .client
            .request(request.method.clone(), request.url.clone())
            .header(AUTHORIZATION, request.auth.clone());
        for (name, value) in &self.headers {
            builder = builder.header(*name, value.clone());
        }
        if let Some(form) = request.form {
            builder = builder
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(form);
        }
        let sent = builder.send().await;
        match sent {
            Err(error) => Ok(Tried::Failed {
                error: error.without_url().to_string(),
                retry_after: None,
            }),
            Ok(response) => {
                let status = response.status();
                let retry_after = retry_after(response.headers().get(RETRY_AFTER));
                let date = response.headers().get(DATE).and_then(|v| v.to_str().ok());
                if let Some(date) = date.and_then(|date| httpdate::parse_http_date(date).ok()) {
                    self.date = Some((date, Instant::now()));
                }
                self.judge(
                    status,
                    read_bounded(response, MOST_BODY_BYTES).await,
                    retry_after,
                )
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
                "a body over the bound".into(),
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

/// One request as it is tried again and again.
struct Sending {
    method: Method,
    url: Url,
    auth: HeaderValue,
    /// An `application/x-www-form-urlencoded` body.
    form: Option<&'static str>,
}

impl Sending {
    fn get(url: Url, auth: HeaderValue) -> Self {
        Sending {
            method: Method::GET,
            url,
            auth,
            form: None,
        }
    }
}

/// `Basic base64(user:password)`.
fn basic(user: &str, password: &SecretString) -> String {
    use base64::Engine;
    let pair = format!("{user}:{}", password.expose_secret());
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
    format!("Basic {encoded}")
}

/// A header value that is never shown (in a `Debug` of the request, say).
fn sensitive(value: String) -> Result<HeaderValue, reqwest::header::InvalidHeaderValue> {
    let mut value = HeaderValue::try_from(value)?;
    value.set_sensitive(true);
    Ok(value)
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

#[cfg(test)]
mod tests;
