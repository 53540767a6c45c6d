//! With PayPal's client credentials: the REST app's webhooks
//! (`GET /v1/notifications/webhooks`), as PayPal sees them. Each PayPal
//! source needs one pointed at `WEBHOOKD_PUBLIC_URL/webhooks/<source>`,
//! whose id is one the source verifies signatures with, subscribed to the
//! capture events webhookd applies (or `*`). A PayPal webhook has no
//! state: it is there or it is not.

use std::time::Duration;

use serde::Deserialize;

use super::local::bounded;
use super::{Answered, Check, endpoint_url, of_scheme, unsubscribed};
use crate::api::ApiFailure;
use crate::config::ServeSettings;
use crate::effects::paypal::CAPTURE_TYPES;
use crate::providers::{Scheme, Source};

/// Longest the listing may take, the token's request and retries included.
const WITHIN: Duration = Duration::from_secs(15);

const LIST_PATH: &str = "/v1/notifications/webhooks";

#[derive(Debug, Deserialize)]
struct Webhooks {
    webhooks: Vec<Webhook>,
}

#[derive(Debug, Deserialize)]
struct Webhook {
    id: String,
    url: String,
    event_types: Vec<EventType>,
}

#[derive(Debug, Deserialize)]
struct EventType {
    name: String,
}

/// `endpoint.<source>` for each mounted PayPal source, when the client id
/// and secret are set.
pub(super) async fn webhooks(settings: &ServeSettings, mounted: &[Source]) -> Answered {
    let sources = of_scheme(mounted, Scheme::Paypal);
    if sources.is_empty() || !settings.sweep.paypal.configured() {
        return Answered::default();
    }
    let (listed, date) = match crate::sweep::paypal::api(&settings.sweep.paypal) {
        Ok(mut api) => {
            let answered = tokio::time::timeout(WITHIN, api.get(LIST_PATH, &[])).await;
            (listed(answered), api.date)
        }
        Err(error) => (Err((format!("{error:#}"), false)), None),
    };
    let checks = (sources.into_iter())
        .map(|source| match &listed {
            Ok(listed) => judge(settings, source, &listed.webhooks),
            Err((said, true)) => Check::fail(
                format!("endpoint.{}", source.name),
                bounded(said),
                "check PAYPAL_CLIENT_ID and PAYPAL_CLIENT_SECRET: the REST app whose webhooks these are",
            ),
            Err((said, false)) => Check::warn(
                format!("endpoint.{}", source.name),
                format!("PayPal's webhooks could not be listed: {}", bounded(said)),
                "run `webhookd doctor` again; if it persists, check WEBHOOKD_PAYPAL_API_BASE (sandbox or live)",
            ),
        })
        .collect();
    Answered { checks, date }
}

/// The webhooks PayPal answered, or what it said instead and whether it
/// refused the credentials.
fn listed(
    answered: Result<Result<Vec<u8>, ApiFailure>, tokio::time::error::Elapsed>,
) -> Result<Webhooks, (String, bool)> {
    match answered {
        Ok(Ok(body)) => serde_json::from_slice::<Webhooks>(&body)
            .map_err(|e| ApiFailure::Malformed(format!("a list of webhooks: {e}"), "paypal"))
            .map_err(|failure| (failure.to_string(), false)),
        Ok(Err(failure)) => {
            let refused = matches!(failure, ApiFailure::Unauthorized { .. });
            Err((failure.to_string(), refused))
        }
        Err(_) => Err((format!("no answer within {}", super::spoken(WITHIN)), false)),
    }
}

/// Whether `source` has a webhook pointed at it, with an id it verifies
/// with, subscribed to what webhookd applies.
fn judge(settings: &ServeSettings, source: &Source, webhooks: &[Webhook]) -> Check {
    let check = format!("endpoint.{}", source.name);
    let ids: &[String] = source.paypal.as_ref().map_or(&[], |p| &p.webhook_ids);
    let Some(url) = endpoint_url(settings, &source.name) else {
        return Check::warn(
            check,
            format!(
                "WEBHOOKD_PUBLIC_URL is not set, so which of the app's {} webhook(s) is this \
                 service's cannot be told",
                webhooks.len()
            ),
            format!(
                "set WEBHOOKD_PUBLIC_URL to the URL PayPal reaches this service at (the webhook \
                 is then <it>/webhooks/{})",
                source.name
            ),
        );
    };
    let ours: Vec<&Webhook> = (webhooks.iter())
        .filter(|w| w.url.trim_end_matches('/') == url)
        .collect();
    if ours.is_empty() {
        return Check::fail(
            check,
            format!(
                "none of the REST app's {} webhook(s) points at {url}: PayPal delivers nothing here",
                webhooks.len()
            ),
            format!(
                "add a webhook for {url} (developer.paypal.com, Apps & Credentials, the app, Add \
                 Webhook) with the PAYMENT.CAPTURE.* events, set its id as PAYPAL_WEBHOOK_ID, \
                 and run `webhookd sweep paypal --since 72h`"
            ),
        );
    }
    // The best of them decides: one that works is enough.
    (ours.into_iter())
        .map(|webhook| judge_one(source, webhook, &url, ids, &check))
        .min_by_key(|c| c.status)
        .expect("at least one webhook")
}

/// One webhook pointed at `source`: an id it verifies with, subscribed.
fn judge_one(source: &Source, webhook: &Webhook, url: &str, ids: &[String], check: &str) -> Check {
    let id = bounded(&webhook.id);
    if !ids.contains(&webhook.id) {
        return Check::fail(
            check,
            format!(
                "the webhook for {url} is {id}, which is not among the ids this source verifies \
                 signatures with: every delivery is refused"
            ),
            format!("set PAYPAL_WEBHOOK_ID={id} (comma-separated with others during a move)"),
        );
    }
    let names: Vec<&str> = webhook
        .event_types
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    if !source.record_only {
        let missing = unsubscribed(&CAPTURE_TYPES, &names);
        if !missing.is_empty() {
            return Check::fail(
                check,
                format!(
                    "webhook {id} is not subscribed to {}: those events never reach webhookd",
                    missing.join(", ")
                ),
                "add them to the webhook's events (or `*`), then run `webhookd sweep paypal --since 72h`",
            );
        }
    }
    Check::ok(
        check,
        format!(
            "webhook {id} points here, subscribed to {} event type(s)",
            names.len()
        ),
    )
}
