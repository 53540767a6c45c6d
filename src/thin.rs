//! Stripe's thin events (`object: "v2.core.event"`): their payload names
//! what they are about without its data, which is fetched from Stripe's API
//! before the event's transaction, never inside it.
//!
//! - A thin event of a v1 type webhookd applies
//!   ([`effects::stripe::applied_thin_type`]: `v1.payment_intent.succeeded`)
//!   is given its related object (`related_object.url`), and then does what
//!   the snapshot event of that type does: same natural keys, so a payment
//!   announced both ways credits once.
//! - Any other thin event is given the event as `GET /v2/core/events/{id}`
//!   serves it, and is forwarded as outbox `stripe.thin`.
//!
//! Both requests carry the event's `context` as `Stripe-Context`. A failure
//! a retry may mend (a network error, a timeout, 429, a 5xx, a key Stripe
//! refused) is [`Unavailable`]: the delivery is answered 503 and nothing is
//! written, so Stripe delivers it again. An answer that will never do (a
//! URL outside the API, an object of another id, a body over the bound, a
//! 404) rejects the event with the reason. Without `STRIPE_API_KEY` nothing
//! is fetched, and the event is rejected saying so; `webhookd events
//! replay` fetches and applies it once the key is set.

use std::time::Duration;

use reqwest::header::HeaderValue;
use secrecy::SecretString;
use serde_json::Value;

use crate::api::{Api, ApiFailure, Auth, Once};
use crate::effects::stripe::applied_thin_type;
use crate::providers::stripe::PROVIDER;
use crate::providers::{Event, Fetched, VerifiedEvent, is_identifier};

/// Longest a fetch may take: well within a webhook's request timeout.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest object fetched: what a webhook's body may be by default
/// (`WEBHOOKD_MAX_BODY_BYTES`); a Stripe object is a few kilobytes.
pub const MOST_OBJECT_BYTES: usize = 2 * 1024 * 1024;

/// Said when Stripe refuses the key.
const UNAUTHORIZED_HINT: &str =
    "check STRIPE_API_KEY (a restricted key needs read access to the objects thin events name)";

/// Why a thin event's data could not be fetched this time.
#[derive(Debug, thiserror::Error)]
#[error("a thin event's data could not be fetched from Stripe: {0}")]
pub struct Unavailable(String);

/// Stripe's API as thin events are fetched from it: the sweep's client
/// ([`crate::api`]), one request a fetch, shared by every delivery.
#[derive(Debug)]
pub struct Fetcher {
    api: Api,
}

impl Fetcher {
    /// Fetches from `base` (`WEBHOOKD_STRIPE_API_BASE`) with `key`
    /// (`STRIPE_API_KEY`).
    pub fn new(base: &str, key: SecretString) -> anyhow::Result<Self> {
        let api = Api::new(PROVIDER, base, &Auth::Bearer(key), 1, UNAUTHORIZED_HINT)?;
        Ok(Fetcher { api })
    }

    /// `event` with its data fetched, when it is a thin event not fetched
    /// yet; rejected with the reason when it never can be; any other event
    /// as it is.
    pub async fn fetch(&self, event: VerifiedEvent) -> Result<VerifiedEvent, Unavailable> {
        Ok(match self.fetch_for(&event).await? {
            None => event,
            Some(Ok(object)) => event.fetched(object),
            Some(Err(reason)) => event.not_fetched(reason),
        })
    }

    /// [`Fetcher::fetch`] of a stored event (a replay).
    pub async fn fetch_stored(&self, event: Event) -> Result<Event, Unavailable> {
        Ok(match self.fetch_for(&event).await? {
            None => event,
            Some(Ok(object)) => event.fetched(object),
            Some(Err(reason)) => event.not_fetched(reason),
        })
    }

    /// What to fetch for `event` and what came of it: `None` when nothing
    /// is to be fetched, else its object or why it can never be had.
    async fn fetch_for(&self, event: &Event) -> Result<Option<Result<Value, String>>, Unavailable> {
        let Some(thin) = event.thin().filter(|thin| thin.fetched == Fetched::Not) else {
            return Ok(None);
        };
        let refused = |reason: &str| Ok(Some(Err(reason.to_owned())));
        let context = match thin.context.as_deref().map(HeaderValue::from_str) {
            None => None,
            Some(Ok(context)) => Some(context),
            Some(Err(_)) => return refused("its context is not a header value"),
        };
        let (path, id) = match applied_thin_type(event.event_type()) {
            Some(_) => match &thin.related {
                Some(related) if is_api_path(&related.url, &related.id) => {
                    (related.url.clone(), related.id.clone())
                }
                Some(_) => {
                    return refused("its related_object is not an object of Stripe's v1 API");
                }
                None => return refused("it names no related_object"),
            },
            None => {
                let id = event.event_id().to_owned();
                (format!("/v2/core/events/{id}"), id)
            }
        };
        let headers: Vec<(&'static str, HeaderValue)> = context
            .map(|context| ("stripe-context", context))
            .into_iter()
            .collect();
        let body = match self
            .api
            .get_once(&path, &headers, FETCH_TIMEOUT, MOST_OBJECT_BYTES)
            .await
        {
            Ok(body) => body,
            Err(Once::Transient(error)) => return Err(Unavailable(error)),
            Err(Once::Failed(failure @ ApiFailure::Unauthorized { .. })) => {
                // The key is wrong, not the event: Stripe keeps it until the
                // key is mended.
                tracing::error!(error = %failure, "a thin event could not be fetched");
                return Err(Unavailable(failure.to_string()));
            }
            Err(Once::Failed(failure)) => {
                return Ok(Some(Err(format!(
                    "its data could not be fetched: {failure}"
                ))));
            }
        };
        Ok(Some(match serde_json::from_slice::<Value>(&body) {
            Ok(object) if object.get("id").and_then(Value::as_str) == Some(id.as_str()) => {
                Ok(object)
            }
            Ok(_) => Err(format!("Stripe's API answered another object than {id}")),
            Err(_) => Err("Stripe's API answered something that is not JSON".to_owned()),
        }))
    }
}

/// Whether `url` is the path of v1 object `id` on Stripe's API: `/v1/`,
/// then path segments of letters, digits, `_` and `-`, the last one `id`.
/// Nothing a hostile payload names can leave the API's base or its v1
/// objects.
fn is_api_path(url: &str, id: &str) -> bool {
    let Some(rest) = url.strip_prefix("/v1/") else {
        return false;
    };
    let segments: Vec<&str> = rest.split('/').collect();
    is_identifier(id)
        && segments.len() >= 2
        && segments.last() == Some(&id)
        && segments.iter().all(|segment| {
            !segment.is_empty()
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::is_api_path;

    #[test]
    fn only_a_v1_object_of_its_own_id_is_fetched() {
        assert!(is_api_path("/v1/payment_intents/pi_1", "pi_1"));
        assert!(is_api_path("/v1/billing/meters/mtr_1", "mtr_1"));
        for (url, id) in [
            ("/v1/payment_intents/pi_2", "pi_1"),
            ("https://evil.example/v1/payment_intents/pi_1", "pi_1"),
            ("//evil.example/v1/x/pi_1", "pi_1"),
            ("/v1/payment_intents/../customers/pi_1", "pi_1"),
            ("/v1/payment_intents/pi_1?expand=x", "pi_1"),
            ("/v2/core/events/pi_1", "pi_1"),
            ("/v1//pi_1", "pi_1"),
            ("/v1/pi_1", "pi_1"),
            ("/v1/payment_intents/pi 1", "pi 1"),
        ] {
            assert!(!is_api_path(url, id), "{url}");
        }
    }
}
