//! An in-process fake of PayPal's REST API as a sweep reads it: the OAuth
//! token endpoint (`POST /v1/oauth2/token`, client credentials) and List
//! event notifications (`GET /v1/notifications/webhooks-events`); and as
//! `doctor` reads it, List webhooks (`GET /v1/notifications/webhooks`); with
//! PayPal's shapes, validation, `next` links and errors, and hooks to
//! inject failures, expire tokens and tamper with links.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{HeaderMap, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, routing::get, routing::post};
use base64::Engine;
use serde_json::{Value, json};

use super::server::{FakeServer, Handle, parse_query, respond, with_retry_after};

mod listing;
#[cfg(test)]
mod tests;

/// `2026-12-01T10:00:00.000Z`, as PayPal writes times.
pub fn time(at: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_secs(at as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

/// A full PayPal event notification, as listed and as delivered.
pub fn event(id: &str, event_type: &str, at: i64, resource: Value) -> Value {
    let resource_type = match event_type.split('.').nth(1) {
        Some("CAPTURE") => "capture",
        Some("SUBSCRIPTION") => "subscription",
        _ => "checkout-order",
    };
    let href = format!("https://api.paypal.com/v1/notifications/webhooks-events/{id}");
    json!({
        "id": id, "event_version": "1.0", "create_time": time(at),
        "resource_type": resource_type, "resource_version": "2.0", "event_type": event_type,
        "summary": format!("An event of type {event_type}"), "resource": resource,
        "links": [
            { "href": href, "rel": "self", "method": "GET" },
            { "href": format!("{href}/resend"), "rel": "resend", "method": "POST" },
        ],
    })
}

/// One answered request: path, percent-decoded query pairs in the order
/// sent, its `Authorization` header, form body and status.
#[derive(Clone, Debug)]
pub struct Request {
    pub path: String,
    pub query: Vec<(String, String)>,
    pub authorization: String,
    pub body: String,
    pub status: u16,
}

/// What the `next` links of the fake's pages say.
#[derive(Clone, Debug, Default)]
pub enum Next {
    /// The next page of this listing, on the fake's own host.
    #[default]
    Real,
    /// The next page, but on this base (`https://elsewhere.example`).
    On(String),
    /// This very page again.
    Stale,
}

/// The running fake. Scripted failures and the requests answered are
/// [`FakeServer`]'s: a failure answers the next listing request (never a
/// token request) before any other check.
pub type FakePaypal = FakeServer<Paypal, Request>;

type Fake = Handle<Paypal, Request>;

/// Everything the fake knows of PayPal.
#[derive(Default)]
pub struct Paypal {
    base: String,
    credentials: String,
    /// In list order: `create_time` descending, then `id` descending.
    events: Vec<Value>,
    issued: u64,
    tokens: Vec<String>,
    expired: Vec<String>,
    /// The count of pages served at which every token issued expires.
    expire_at: Option<usize>,
    /// Every token is answered `invalid_token`, new ones too.
    revoked: bool,
    next: Next,
    /// The app's webhooks (`GET /v1/notifications/webhooks`).
    webhooks: Vec<Value>,
}

impl FakePaypal {
    /// Serves `events` (full event objects) to the REST app `client_id`.
    pub async fn start(client_id: &str, secret: &str, events: Vec<Value>) -> FakePaypal {
        let app = Router::new()
            .route("/v1/oauth2/token", post(token))
            .route("/v1/notifications/webhooks-events", get(listing::list))
            .route("/v1/notifications/webhooks", get(listing::webhooks));
        let paypal = Paypal {
            credentials: format!("{client_id}:{secret}"),
            ..Paypal::default()
        };
        let fake = FakeServer::serve(paypal, app).await;
        let base = fake.base_url();
        fake.modify(|s| s.base = base);
        events.into_iter().for_each(|event| fake.add(event));
        fake
    }

    /// Adds an event; the list is live.
    pub fn add(&self, event: Value) {
        let order = |e: &Value| {
            (
                instant(&e["create_time"]),
                e["id"].as_str().map(str::to_owned),
            )
        };
        self.modify(|s| {
            s.events.push(event);
            s.events.sort_by_key(|e| std::cmp::Reverse(order(e)));
        });
    }

    /// Adds a webhook of the app: `id`, pointed at `url`, subscribed to
    /// `events` (names; `*` for all).
    pub fn add_webhook(&self, id: &str, url: &str, events: &[&str]) {
        let types: Vec<Value> = (events.iter())
            .map(|name| json!({ "name": name, "description": "", "status": "ENABLED" }))
            .collect();
        let href = format!("https://api.paypal.com/v1/notifications/webhooks/{id}");
        let webhook = json!({
            "id": id, "url": url, "event_types": types,
            "links": [{ "href": href, "rel": "self", "method": "GET" }],
        });
        self.modify(|s| s.webhooks.push(webhook));
    }

    /// Once `pages` more pages have been served, every token issued so far
    /// expires (PayPal's 401 `invalid_token`).
    pub fn expire_tokens_after(&self, pages: usize) {
        let at = self.served() + pages;
        self.modify(|s| s.expire_at = Some(at));
    }

    /// From now on, every token is refused as expired, however new.
    pub fn revoke_every_token(&self) {
        self.modify(|s| s.revoked = true);
    }

    pub fn set_next(&self, next: Next) {
        self.modify(|s| s.next = next);
    }

    /// The listing requests answered so far.
    pub fn listings(&self) -> Vec<Request> {
        let requests = self.requests().into_iter();
        requests
            .filter(|r| r.path.ends_with("webhooks-events"))
            .collect()
    }
}

fn instant(time: &Value) -> Option<SystemTime> {
    humantime::parse_rfc3339(time.as_str()?).ok()
}

fn record(fake: &Fake, uri: &Uri, headers: &HeaderMap, body: String, response: &Response) {
    let request = Request {
        path: uri.path().to_owned(),
        query: parse_query(uri.query().unwrap_or_default()),
        authorization: header_of(headers, header::AUTHORIZATION).to_owned(),
        body,
        status: response.status().as_u16(),
    };
    fake.record(request);
}

fn header_of(headers: &HeaderMap, name: header::HeaderName) -> &str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

async fn token(State(fake): State<Fake>, uri: Uri, headers: HeaderMap, body: String) -> Response {
    let basic = header_of(&headers, header::AUTHORIZATION).strip_prefix("Basic ");
    let decoded = basic.and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
    let form = header_of(&headers, header::CONTENT_TYPE) == "application/x-www-form-urlencoded";
    let grant = parse_query(&body)
        .into_iter()
        .find(|(k, _)| k == "grant_type");
    let response = fake.modify(|shared| {
        if decoded.as_deref() != Some(shared.credentials.as_bytes()) {
            oauth_error(401, "invalid_client", "Client Authentication failed")
        } else if !form || grant.is_none() {
            oauth_error(400, "unsupported_grant_type", "Grant Type is NULL")
        } else if grant.is_some_and(|(_, grant)| grant != "client_credentials") {
            oauth_error(400, "unsupported_grant_type", "unsupported grant_type")
        } else {
            shared.issued += 1;
            let token = format!("A21AAFakeToken{:04}", shared.issued);
            shared.tokens.push(token.clone());
            Json(json!({
                "scope": "https://uri.paypal.com/services/applications/webhooks openid",
                "access_token": token, "token_type": "Bearer", "app_id": "APP-80W284485P519543T",
                "expires_in": 32400, "nonce": format!("2026-12-01T10:00:00Z{}", shared.issued),
            }))
            .into_response()
        }
    });
    record(&fake, &uri, &headers, body, &response);
    response
}

/// An OAuth error (the token endpoint's, or an expired token's).
fn oauth_error(status: u16, error: &str, description: &str) -> Response {
    let body = json!({ "error": error, "error_description": description });
    respond((status, body))
}

/// The error shape of PayPal's REST APIs.
fn rest_error(status: u16, name: &str, message: &str, detail: Option<Value>) -> Response {
    let information = format!("https://developer.paypal.com/docs/api/webhooks/v1/#error-{name}");
    let mut body = json!({
        "name": name, "message": message, "debug_id": "f0a1e2d3c4b5a",
        "information_link": information,
        "links": [{ "href": information, "rel": "information_link", "method": "GET" }],
    });
    if let Some(detail) = detail {
        body["details"] = json!([detail]);
    }
    respond((status, body))
}

fn injected(status: u16, retry_after: Option<u64>) -> Response {
    let (name, message) = match status {
        429 => (
            "RATE_LIMIT_REACHED",
            "Too many requests. Blocked due to rate limiting.",
        ),
        500.. => (
            "INTERNAL_SERVICE_ERROR",
            "An internal service error has occurred.",
        ),
        _ => ("INVALID_REQUEST", "An injected error."),
    };
    let response = rest_error(status, name, message, None);
    with_retry_after(response, retry_after)
}
