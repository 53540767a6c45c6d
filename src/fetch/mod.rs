//! What is read from Stripe's API for a delivery before its transaction,
//! never inside it, with `STRIPE_API_KEY`, through the client the sweep
//! uses ([`crate::api`]), one bounded request at a time:
//!
//! - a thin event's data ([`thin`]): without it the event means nothing;
//! - with `WEBHOOKD_STRIPE_REFRESH_ON_TIE=subscriptions`, the subscription
//!   of a subscription event that ties with the stored state on `created`
//!   ([`tie`]): Stripe's second-precise times cannot say which of the two
//!   is newer, and the API's current object can.

mod thin;
mod tie;

use std::time::Duration;

use reqwest::header::HeaderValue;
use secrecy::SecretString;
use serde_json::Value;
use sqlx::PgPool;

use crate::api::{Api, ApiFailure, Auth, Once};
use crate::providers::stripe::PROVIDER;
use crate::providers::{Event, VerifiedEvent};

/// Longest a fetch may take: well within a webhook's request timeout.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest object fetched: what a webhook's body may be by default
/// (`WEBHOOKD_MAX_BODY_BYTES`); a Stripe object is a few kilobytes.
pub const MOST_OBJECT_BYTES: usize = 2 * 1024 * 1024;

/// Said when Stripe refuses the key.
const UNAUTHORIZED_HINT: &str = "check STRIPE_API_KEY (a restricted key needs read access to \
     the objects thin events name, and to subscriptions when ties are refreshed)";

/// Why a delivery's data could not be fetched this time.
#[derive(Debug, thiserror::Error)]
#[error("a thin event's data could not be fetched from Stripe: {0}")]
pub struct Unavailable(String);

/// An event [`Fetcher::complete`] completes: what it was given, as it was
/// given (a delivery stays sealed as verified).
pub trait Completed: Sized {
    /// A delivery (a redelivery of a recorded thin event needs no data: it
    /// is a duplicate), not a stored event (whose replay needs it).
    const DELIVERY: bool;
    fn event(&self) -> &Event;
    fn fetched(self, object: Value) -> Self;
    fn not_fetched(self, reason: String) -> Self;
    fn refreshed(self, refreshed: Result<Value, String>) -> Self;
}

impl Completed for Event {
    const DELIVERY: bool = false;
    fn event(&self) -> &Event {
        self
    }
    fn fetched(self, object: Value) -> Self {
        Event::fetched(self, object)
    }
    fn not_fetched(self, reason: String) -> Self {
        Event::not_fetched(self, reason)
    }
    fn refreshed(self, refreshed: Result<Value, String>) -> Self {
        Event::refreshed(self, refreshed)
    }
}

impl Completed for VerifiedEvent {
    const DELIVERY: bool = true;
    fn event(&self) -> &Event {
        self
    }
    fn fetched(self, object: Value) -> Self {
        VerifiedEvent::fetched(self, object)
    }
    fn not_fetched(self, reason: String) -> Self {
        VerifiedEvent::not_fetched(self, reason)
    }
    fn refreshed(self, refreshed: Result<Value, String>) -> Self {
        VerifiedEvent::refreshed(self, refreshed)
    }
}

/// Stripe's API as deliveries are completed from it: the sweep's client,
/// one request a fetch, shared by every delivery.
#[derive(Debug)]
pub struct Fetcher {
    api: Api,
    /// `WEBHOOKD_STRIPE_REFRESH_ON_TIE=subscriptions`.
    refresh_subscriptions: bool,
}

impl Fetcher {
    /// Fetches from `base` (`WEBHOOKD_STRIPE_API_BASE`) with `key`
    /// (`STRIPE_API_KEY`); refreshes subscriptions on a tie when
    /// `refresh_subscriptions`.
    pub fn new(base: &str, key: SecretString, refresh_subscriptions: bool) -> anyhow::Result<Self> {
        let api = Api::new(PROVIDER, base, &Auth::Bearer(key), 1, UNAUTHORIZED_HINT)?;
        Ok(Fetcher {
            api,
            refresh_subscriptions,
        })
    }

    /// `event` with what it needs from Stripe's API: a thin event's data
    /// (or why it can never be had), a tying subscription's current state
    /// (or why it could not be had). A thin event's data that a retry may
    /// yet bring is [`Unavailable`]. A delivery ([`VerifiedEvent`]) or a
    /// stored event (a replay's [`Event`]).
    pub async fn complete<E: Completed>(&self, pool: &PgPool, event: E) -> Result<E, Unavailable> {
        let event = match thin::fetch(self, pool, event.event(), E::DELIVERY).await? {
            None => event,
            Some(Ok(object)) => event.fetched(object),
            Some(Err(reason)) => event.not_fetched(reason),
        };
        Ok(match tie::refresh(self, pool, event.event()).await {
            None => event,
            Some(refreshed) => event.refreshed(refreshed),
        })
    }

    /// The object `id` at `path`, with `headers`: `Ok(Err(reason))` when
    /// it can never be had (Stripe refused for good, or answered another
    /// object or no JSON); [`Unavailable`] when a retry may mend it (a
    /// network error, a timeout, 429, a 5xx, a key Stripe refused).
    async fn object(
        &self,
        path: &str,
        id: &str,
        headers: &[(&'static str, HeaderValue)],
    ) -> Result<Result<Value, String>, Unavailable> {
        let body = match self
            .api
            .get_once(path, headers, FETCH_TIMEOUT, MOST_OBJECT_BYTES)
            .await
        {
            Ok(body) => body,
            Err(Once::Transient(error)) => return Err(Unavailable(error)),
            Err(Once::Failed(failure @ ApiFailure::Unauthorized { .. })) => {
                // The key is wrong, not the event: Stripe keeps it until the
                // key is mended.
                tracing::error!(error = %failure, "an object could not be fetched from Stripe");
                return Err(Unavailable(failure.to_string()));
            }
            Err(Once::Failed(failure)) => {
                return Ok(Err(format!("its data could not be fetched: {failure}")));
            }
        };
        Ok(match serde_json::from_slice::<Value>(&body) {
            Ok(object) if object.get("id").and_then(Value::as_str) == Some(id) => Ok(object),
            Ok(_) => Err(format!("Stripe's API answered another object than {id}")),
            Err(_) => Err("Stripe's API answered something that is not JSON".to_owned()),
        })
    }
}
