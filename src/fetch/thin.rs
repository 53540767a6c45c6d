//! Stripe's thin events (`object: "v2.core.event"`): their payload names
//! what they are about without its data, which is fetched before the
//! event's transaction.
//!
//! - A thin event of a v1 type webhookd applies
//!   ([`applied_thin_type`]: `v1.payment_intent.succeeded`) is given its
//!   related object (`related_object.url`), and then does what the
//!   snapshot event of that type does: same natural keys, so a payment
//!   announced both ways credits once.
//! - Any other thin event is given the event as `GET /v2/core/events/{id}`
//!   serves it, and is forwarded as outbox `stripe.thin`.
//!
//! Both requests carry the event's `context` as `Stripe-Context`. A failure
//! a retry may mend is [`Unavailable`]: the delivery is answered 503 and
//! nothing is written, so Stripe delivers it again. An answer that will
//! never do (a URL outside the API, an object of another id, a body over
//! the bound, a 404) rejects the event with the reason. Without
//! `STRIPE_API_KEY` nothing is fetched, and the event is rejected saying
//! so; `webhookd events replay` fetches and applies it once the key is set.

use reqwest::header::HeaderValue;
use serde_json::Value;

use sqlx::PgPool;

use super::{Fetcher, Unavailable};
use crate::effects::stripe::applied_thin_type;
use crate::events;
use crate::providers::{Event, Fetched, is_identifier};

/// What was fetched for `event`: `None` when it is no thin event waiting
/// for its data, or (a `delivery`) one recorded already: a redelivery,
/// which its claim answers `duplicate` without its data. Else its object
/// or why it can never be had.
pub(super) async fn fetch(
    fetcher: &Fetcher,
    pool: &PgPool,
    event: &Event,
    delivery: bool,
) -> Result<Option<Result<Value, String>>, Unavailable> {
    let Some(thin) = event.thin().filter(|thin| thin.fetched == Fetched::Not) else {
        return Ok(None);
    };
    if delivery {
        let id = [event.event_id().to_owned()];
        match events::recorded(pool, event.provider(), &id).await {
            Ok(recorded) if !recorded.is_empty() => return Ok(None),
            Ok(_) => {}
            // Not known: fetch, as for a new event.
            Err(error) => tracing::warn!(%error, "cannot read whether a thin event is recorded"),
        }
    }
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
            Some(_) => return refused("its related_object is not an object of Stripe's v1 API"),
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
    Ok(Some(fetcher.object(&path, &id, &headers).await?))
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
