//! OAuth 2.0 client credentials (PayPal's REST APIs): `POST {token_path}`
//! with the client id and secret as HTTP Basic and the form
//! `grant_type=client_credentials` answers a bearer token, which every
//! other request carries. The token is fetched when first needed, kept
//! until shortly before it expires, and fetched again once when a request
//! is refused with 401 (it may have been revoked, or the clock disagrees):
//! a second 401 stops the request, like a refused key.

use std::time::Duration;

use reqwest::header::HeaderValue;
use reqwest::{Method, Url};
use serde::Deserialize;
use tokio::time::Instant;

use super::{Api, ApiFailure, Sending, sensitive};

/// A token is dropped this long before the provider says it expires.
const EXPIRY_MARGIN: Duration = Duration::from_secs(300);

/// The token held, and when to stop using it.
pub(super) struct Token {
    bearer: HeaderValue,
    until: Instant,
}

/// The token endpoint's answer (`scope`, `app_id`, `nonce` are not read).
#[derive(Deserialize)]
struct Granted {
    access_token: String,
    token_type: String,
    #[serde(default)]
    expires_in: u64,
}

impl Api {
    /// GETs `url` with the token, fetching a new one once on a 401.
    pub(super) async fn get_with_token(
        &mut self,
        url: Url,
        token_path: &'static str,
    ) -> Result<Vec<u8>, ApiFailure> {
        let mut renewed = false;
        loop {
            let bearer = self.bearer(token_path).await?;
            match self.send(&Sending::get(url.clone(), bearer)).await {
                Err(ApiFailure::Unauthorized { status: 401, .. }) if !renewed => {
                    tracing::info!(
                        provider = self.provider,
                        "the API refused the access token; fetching a new one"
                    );
                    self.token = None;
                    renewed = true;
                }
                answered => return answered,
            }
        }
    }

    /// The `Authorization` of a request: the token held while it is good,
    /// else a new one.
    async fn bearer(&mut self, token_path: &'static str) -> Result<HeaderValue, ApiFailure> {
        if let Some(token) = &self.token
            && Instant::now() < token.until
        {
            return Ok(token.bearer.clone());
        }
        let mut url = self.base.clone();
        url.set_path(token_path);
        let request = Sending {
            method: Method::POST,
            url,
            auth: self.auth.clone(),
            form: Some("grant_type=client_credentials"),
        };
        let body = self.send(&request).await?;
        let token = self.token_of(&body)?;
        let bearer = token.bearer.clone();
        self.token = Some(token);
        Ok(bearer)
    }

    /// The token in the endpoint's answer `body`.
    fn token_of(&self, body: &[u8]) -> Result<Token, ApiFailure> {
        let malformed =
            |what: &str| ApiFailure::Malformed(format!("a token: {what}"), self.provider);
        let granted: Granted =
            serde_json::from_slice(body).map_err(|_| malformed("not the documented JSON"))?;
        if !granted.token_type.eq_ignore_ascii_case("bearer") {
            return Err(malformed("not a bearer token"));
        }
        if granted.access_token.trim().is_empty() {
            return Err(malformed("empty"));
        }
        let bearer = sensitive(format!("Bearer {}", granted.access_token))
            .map_err(|_| malformed("not a header value"))?;
        // A lifetime the answer exaggerates is held to a day; one too short
        // to keep is kept a minute (a 401 buys another anyway).
        let lifetime = Duration::from_secs(granted.expires_in)
            .min(Duration::from_secs(24 * 3600))
            .saturating_sub(EXPIRY_MARGIN)
            .max(Duration::from_secs(60));
        Ok(Token {
            bearer,
            until: Instant::now() + lifetime,
        })
    }
}
