//! With `STRIPE_API_KEY`: the account's webhook endpoints
//! (`GET /v1/webhook_endpoints`), as Stripe sees them. Each Stripe source
//! needs one pointed at `WEBHOOKD_PUBLIC_URL/webhooks/<source>`, enabled,
//! subscribed to every type webhookd applies (or `*`), on the API version
//! the source expects.

use std::time::Duration;

use serde::Deserialize;

use super::local::bounded;
use super::{Answered, Check, endpoint_url, of_scheme, unsubscribed};
use crate::api::{Api, ApiFailure, Auth};
use crate::config::ServeSettings;
use crate::effects::stripe::HANDLED_TYPES;
use crate::providers::{Scheme, Source};
use crate::secrets::non_empty;

/// Said when Stripe refuses the key.
const UNAUTHORIZED_HINT: &str = "check STRIPE_API_KEY (a restricted key needs read access to \
     Webhook Endpoints for doctor, besides Events for the sweep)";

/// Endpoints a page (Stripe's most).
const PAGE: usize = 100;

/// Most pages read: an account has a handful of endpoints (Stripe allows
/// 16).
const MOST_PAGES: usize = 10;

/// Longest the listing may take, retries included.
const WITHIN: Duration = Duration::from_secs(15);

/// A webhook endpoint, as the API describes it.
#[derive(Debug, Deserialize)]
struct Endpoint {
    id: String,
    url: String,
    /// `enabled` or `disabled`.
    status: String,
    enabled_events: Vec<String>,
    /// `null`: the account's default version.
    api_version: Option<String>,
}

#[derive(Deserialize)]
struct Page {
    data: Vec<Endpoint>,
    has_more: bool,
}

/// `endpoint.<source>` for each mounted Stripe source, when
/// `STRIPE_API_KEY` is set.
pub(super) async fn endpoints(settings: &ServeSettings, mounted: &[Source]) -> Answered {
    let sources = of_scheme(mounted, Scheme::Stripe);
    let args = &settings.sweep.stripe;
    let Some(key) = non_empty(&args.stripe_api_key).filter(|_| !sources.is_empty()) else {
        return Answered::default();
    };
    let api = Api::new(
        "stripe",
        &args.stripe_api_base,
        &Auth::Bearer(key),
        args.rate,
        UNAUTHORIZED_HINT,
    );
    let mut api = match api {
        Ok(api) => api,
        Err(error) => {
            let check = Check::fail(
                "endpoint.stripe",
                bounded(&format!("{error:#}")),
                "mend WEBHOOKD_STRIPE_API_BASE",
            );
            return Answered {
                checks: vec![check],
                date: None,
            };
        }
    };
    let listed = tokio::time::timeout(WITHIN, list(&mut api)).await;
    let checks = match listed {
        Ok(Ok(endpoints)) => (sources.iter().copied())
            .map(|source| judge(settings, source, &endpoints))
            .collect(),
        Ok(Err(failure)) => (sources.iter().copied())
            .map(|source| {
                unlisted(
                    source,
                    &failure.to_string(),
                    matches!(failure, ApiFailure::Unauthorized { .. }),
                )
            })
            .collect(),
        Err(_) => (sources.iter().copied())
            .map(|source| {
                unlisted(
                    source,
                    &format!("no answer within {}", super::spoken(WITHIN)),
                    false,
                )
            })
            .collect(),
    };
    Answered {
        checks,
        date: api.date,
    }
}

/// Every endpoint of the account, page after page.
async fn list(api: &mut Api) -> Result<Vec<Endpoint>, ApiFailure> {
    let mut endpoints: Vec<Endpoint> = Vec::new();
    for _ in 0..MOST_PAGES {
        let mut query = vec![("limit", PAGE.to_string())];
        if let Some(last) = endpoints.last() {
            query.push(("starting_after", last.id.clone()));
        }
        let body = api.get("/v1/webhook_endpoints", &query).await?;
        let page: Page = serde_json::from_slice(&body).map_err(|e| {
            ApiFailure::Malformed(format!("a list of webhook endpoints: {e}"), "stripe")
        })?;
        if page.data.len() > PAGE {
            return Err(ApiFailure::Malformed(
                format!(
                    "a page of {} endpoints, where {PAGE} were asked for",
                    page.data.len()
                ),
                "stripe",
            ));
        }
        let before = endpoints.len();
        endpoints.extend(page.data);
        if !page.has_more {
            return Ok(endpoints);
        }
        if endpoints.len() == before {
            return Err(ApiFailure::Malformed(
                "a page with has_more but no endpoint".into(),
                "stripe",
            ));
        }
    }
    Err(ApiFailure::Malformed(
        format!("more than {} endpoints", PAGE * MOST_PAGES),
        "stripe",
    ))
}

/// The check of a source whose endpoints could not be listed.
fn unlisted(source: &Source, said: &str, refused: bool) -> Check {
    let check = format!("endpoint.{}", source.name);
    if refused {
        return Check::fail(
            check,
            bounded(said),
            "give STRIPE_API_KEY read access to Webhook Endpoints (a restricted key: Webhook \
             Endpoints, Read), or use the account's secret key",
        );
    }
    Check::warn(
        check,
        format!(
            "Stripe's webhook endpoints could not be listed: {}",
            bounded(said)
        ),
        "run `webhookd doctor` again; if it persists, check https://status.stripe.com and WEBHOOKD_STRIPE_API_BASE",
    )
}

/// Whether `source` has an endpoint pointed at it, and what is wrong with it.
fn judge(settings: &ServeSettings, source: &Source, endpoints: &[Endpoint]) -> Check {
    let check = format!("endpoint.{}", source.name);
    let Some(url) = endpoint_url(settings, &source.name) else {
        let urls: Vec<&str> = endpoints.iter().map(|e| e.url.as_str()).collect();
        return Check::warn(
            check,
            format!(
                "WEBHOOKD_PUBLIC_URL is not set, so which of the account's {} endpoint(s) is this \
                 service's cannot be told ({})",
                endpoints.len(),
                shown_urls(&urls)
            ),
            format!(
                "set WEBHOOKD_PUBLIC_URL to the URL Stripe reaches this service at (the endpoint \
                 is then <it>/webhooks/{})",
                source.name
            ),
        );
    };
    let ours: Vec<&Endpoint> = endpoints
        .iter()
        .filter(|e| same_url(&e.url, &url))
        .collect();
    if ours.is_empty() {
        let elsewhere: Vec<&str> = endpoints.iter().map(|e| e.url.as_str()).collect();
        return Check::fail(
            check,
            format!(
                "none of the account's {} webhook endpoint(s) points at {url}{}: Stripe delivers \
                 nothing here",
                endpoints.len(),
                match elsewhere.is_empty() {
                    true => String::new(),
                    false => format!(" (they point at {})", shown_urls(&elsewhere)),
                }
            ),
            format!(
                "add an endpoint for {url} (Dashboard, Developers, Webhooks, Add endpoint) with the \
                 events webhookd applies, put its signing secret in {}, and run `webhookd sweep \
                 stripe --since 72h` for what was missed",
                secret_variable(source)
            ),
        );
    }
    // The best of them decides: one that works is enough.
    let judged: Vec<Check> = ours.iter().map(|e| judge_one(source, e, &check)).collect();
    let mut best = judged
        .into_iter()
        .min_by_key(|c| c.status)
        .expect("at least one endpoint");
    if ours.len() > 1 && best.status == super::Status::Ok {
        best.detail.push_str(&format!(
            " ({} endpoints point here: each event is delivered {} times, and applied once)",
            ours.len(),
            ours.len()
        ));
    }
    best
}

/// One endpoint pointed at `source`: enabled, subscribed, on its version.
fn judge_one(source: &Source, endpoint: &Endpoint, check: &str) -> Check {
    let id = crate::telemetry::bounded(&endpoint.id);
    if endpoint.status != "enabled" {
        return Check::fail(
            check,
            format!(
                "endpoint {id} ({}) is {}: Stripe delivers it nothing (Stripe disables an \
                 endpoint whose deliveries failed for days)",
                bounded(&endpoint.url),
                bounded(&endpoint.status)
            ),
            format!(
                "enable it (Dashboard, Developers, Webhooks, {id}, Enable; or `curl \
                 https://api.stripe.com/v1/webhook_endpoints/{id} -u $STRIPE_API_KEY: -d \
                 disabled=false`), then run `webhookd sweep stripe --since 72h` (further back if \
                 it was off longer, up to 30 days) to apply what it missed"
            ),
        );
    }
    let subscribed: Vec<&str> = endpoint.enabled_events.iter().map(String::as_str).collect();
    let all = subscribed.contains(&"*");
    if !source.record_only {
        let missing = unsubscribed(&HANDLED_TYPES, &subscribed);
        if !missing.is_empty() {
            return Check::fail(
                check,
                format!(
                    "endpoint {id} is not subscribed to {}: those events never reach webhookd",
                    missing.join(", ")
                ),
                format!(
                    "add them to the endpoint's events (Dashboard, Developers, Webhooks, {id}, \
                     Update details), or subscribe it to `*`; then run `webhookd sweep stripe \
                     --since 72h`"
                ),
            );
        }
    }
    if let Some(expected) = &source.api_version {
        match &endpoint.api_version {
            Some(version) if version != expected => {
                return Check::fail(
                    check,
                    format!(
                        "endpoint {id} sends events of API version {}, and this source expects \
                         {expected} (WEBHOOKD_SOURCE_{}_API_VERSION)",
                        bounded(version),
                        source.name.to_ascii_uppercase()
                    ),
                    "make the two agree: create an endpoint on the expected version (an \
                     endpoint's version is set when it is created), or change the setting once \
                     webhookd's decoding of the new version is checked",
                );
            }
            None => {
                return Check::warn(
                    check,
                    format!(
                        "endpoint {id} follows the account's default API version, which changes \
                         when the account is upgraded; this source expects {expected}"
                    ),
                    "create the endpoint with an explicit api_version equal to the expected one",
                );
            }
            Some(_) => {}
        }
    }
    let events = match all {
        true => "every event (`*`)".to_owned(),
        false => format!("{} event types", endpoint.enabled_events.len()),
    };
    let version = match &endpoint.api_version {
        Some(version) => format!("API version {}", bounded(version)),
        None => "the account's default API version".to_owned(),
    };
    Check::ok(
        check,
        format!("endpoint {id} is enabled, subscribed to {events}, on {version}"),
    )
}

/// Whether two URLs name the same endpoint: a trailing `/` aside.
fn same_url(theirs: &str, ours: &str) -> bool {
    theirs.trim_end_matches('/') == ours
}

/// URLs as a detail lists them: a few, each bounded.
fn shown_urls(urls: &[&str]) -> String {
    let mut shown: Vec<String> = urls.iter().take(5).map(|u| bounded(u)).collect();
    if urls.len() > 5 {
        shown.push(format!("and {} more", urls.len() - 5));
    }
    match shown.is_empty() {
        true => "none".to_owned(),
        false => shown.join(", "),
    }
}

/// The variable of `source`'s signing secrets.
fn secret_variable(source: &Source) -> String {
    match source.name.as_str() {
        "stripe" => "STRIPE_WEBHOOK_SECRET".to_owned(),
        name => format!("WEBHOOKD_SOURCE_{}_SECRET", name.to_ascii_uppercase()),
    }
}
