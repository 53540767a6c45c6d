//! PayPal's `GET /v1/notifications/webhooks-events`: every event of the
//! REST app created in the window (`start_time` and `end_time`, RFC 3339,
//! both inclusive), [`PAGE_SIZE`] a page, newest first, paginated by
//! following the page's `rel: next` link while there is one; read and
//! applied by the events-API sweep ([`super::listing`]). Requests carry an
//! OAuth token the client id and secret buy (`POST /v1/oauth2/token`,
//! [`crate::api::Auth::ClientCredentials`]).
//!
//! PayPal lists every event type (its filter takes one type only): those
//! webhookd has no effect for are recorded `ignored`, as their webhooks
//! would be. A `next` link is hostile input: it must name the listing, on
//! the API base's host or one of PayPal's own, and only its query is used,
//! always sent to the API base (the token never goes anywhere else); a link
//! that does not move on is an error, never taken for the end.

use std::collections::HashSet;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use clap::Args;
use reqwest::Url;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::listing::{self, EventsApi, Listed};
use crate::api::{Api, ApiFailure, Auth};
use crate::providers::paypal::{PROVIDER, listed_event, parse_time};
use crate::providers::{Event, SignatureError};

/// How far back a periodic sweep reaches: PayPal retries a delivery (up to
/// 25 times) for three days.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(72 * 3600);

/// Said when PayPal refuses the client credentials or the token they bought.
pub const UNAUTHORIZED_HINT: &str = "check PAYPAL_CLIENT_ID and PAYPAL_CLIENT_SECRET (the REST \
     app whose webhooks these are; sandbox credentials need the sandbox API base)";

/// Events a page. PayPal documents a default of 10 and no maximum.
pub const PAGE_SIZE: u32 = 100;

/// Most pages one slice may take: as many as the most events a slice can
/// hold fill, and a few more. Pages past them (empty ones that never end)
/// are an error.
const MAX_PAGES_PER_SLICE: usize = listing::SLICE_EVENTS * 20 / PAGE_SIZE as usize + 10;

/// Requests a second to PayPal's API.
pub const RATE: u32 = 10;

pub const TOKEN_PATH: &str = "/v1/oauth2/token";
pub const LIST_PATH: &str = "/v1/notifications/webhooks-events";

/// PayPal's API hosts, which its links name (`api.paypal.com`, where the
/// API base is `api-m.paypal.com`).
const PAYPAL_HOSTS: [&str; 4] = [
    "api.paypal.com",
    "api-m.paypal.com",
    "api.sandbox.paypal.com",
    "api-m.sandbox.paypal.com",
];

/// How to reach PayPal's API.
#[derive(Debug, Clone, Args)]
pub struct PaypalApiArgs {
    /// The REST app's client id.
    #[arg(long, env = "PAYPAL_CLIENT_ID")]
    pub paypal_client_id: Option<String>,
    /// The REST app's client secret.
    #[arg(long, env = "PAYPAL_CLIENT_SECRET", hide_env_values = true)]
    pub paypal_client_secret: Option<SecretString>,
    /// PayPal's API base (`https://api-m.sandbox.paypal.com` for the
    /// sandbox): `https://` (plain `http://` only on a loopback address,
    /// for tests).
    #[arg(
        long,
        env = "WEBHOOKD_PAYPAL_API_BASE",
        default_value = "https://api-m.paypal.com"
    )]
    pub paypal_api_base: String,
}

impl PaypalApiArgs {
    /// The client id and secret, when both are set.
    fn credentials(&self) -> Option<(&String, &SecretString)> {
        let id = self
            .paypal_client_id
            .as_ref()
            .filter(|id| !id.trim().is_empty());
        let secret = self.paypal_client_secret.as_ref();
        id.zip(secret.filter(|s| !s.expose_secret().trim().is_empty()))
    }

    /// Whether a periodic sweep of PayPal can run.
    pub fn configured(&self) -> bool {
        self.credentials().is_some()
    }
}

/// PayPal's API, paced at [`RATE`] requests a second.
pub fn api(args: &PaypalApiArgs) -> anyhow::Result<Api> {
    let Some((user, password)) = args.credentials() else {
        anyhow::bail!("PAYPAL_CLIENT_ID and PAYPAL_CLIENT_SECRET are needed to read PayPal's API");
    };
    let auth = Auth::ClientCredentials {
        token_path: TOKEN_PATH,
        user: user.clone(),
        password: password.clone(),
    };
    Api::new(
        PROVIDER,
        &args.paypal_api_base,
        &auth,
        RATE,
        UNAUTHORIZED_HINT,
    )
}

/// PayPal's events API, for [`listing::sweep`].
pub(crate) struct Paypal;

impl EventsApi for Paypal {
    const PROVIDER: &'static str = PROVIDER;

    type Cursor = Pages;

    fn first((from, to): (i64, i64)) -> Pages {
        let window = vec![
            ("page_size".to_owned(), PAGE_SIZE.to_string()),
            ("start_time".to_owned(), rfc3339(from)),
            ("end_time".to_owned(), rfc3339(to)),
        ];
        Pages {
            query: window.clone(),
            window,
            asked: HashSet::new(),
        }
    }

    /// PayPal's `end_time` is inclusive: an event created at `to` is left
    /// to the next slice.
    async fn page(
        api: &mut Api,
        (from, to): (i64, i64),
        pages: &mut Pages,
        listed: &mut Vec<Listed>,
    ) -> Result<bool, ApiFailure> {
        if !pages.asked.insert(pages.query.clone()) {
            return Err(malformed("a next link to a page already read".into()));
        }
        if pages.asked.len() > MAX_PAGES_PER_SLICE {
            return Err(malformed(format!(
                "more than {MAX_PAGES_PER_SLICE} pages for one slice"
            )));
        }
        let pairs: Vec<(&str, String)> = pages
            .query
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let body = api.get(LIST_PATH, &pairs).await?;
        let page: Page =
            serde_json::from_slice(&body).map_err(|e| malformed(format!("a list page: {e}")))?;
        listing::page_of(page.events.len(), PAGE_SIZE as usize, PROVIDER)?;
        for raw in page.events {
            if let Some(event) = listed_in(&raw, (from, to))? {
                listed.push(event);
            }
        }
        let Some(next) = page.links.iter().find(|link| link.rel == "next") else {
            return Ok(false);
        };
        pages.query = next_query(api.base(), &next.href, &pages.window)?;
        Ok(true)
    }

    fn event(raw: &Bytes) -> Result<Event, SignatureError> {
        listed_event(raw)
    }
}

/// Where the listing of a slice stands: the slice's own page size and
/// times, the query of the next page, and every query asked so far, so
/// that links that go round in a circle, or pages that never end, stop the
/// sweep instead of looping.
pub(crate) struct Pages {
    window: Vec<(String, String)>,
    query: Vec<(String, String)>,
    asked: HashSet<Vec<(String, String)>>,
}

#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    events: Vec<Box<RawValue>>,
    #[serde(default)]
    links: Vec<Link>,
}

#[derive(Deserialize)]
struct Link {
    href: String,
    rel: String,
}

#[derive(Deserialize)]
struct Head {
    id: String,
    create_time: Option<String>,
}

/// The listed event `raw`, unless it was created at `to` (the next slice's).
/// An event without a usable `create_time` is kept (PayPal listed it for
/// this window) and ordered first.
fn listed_in(raw: &RawValue, (from, to): (i64, i64)) -> Result<Option<Listed>, ApiFailure> {
    let head: Head =
        serde_json::from_str(raw.get()).map_err(|e| malformed(format!("an event: {e}")))?;
    let created = head.create_time.as_deref().and_then(parse_time);
    match created {
        // Hostile or mistaken answers must not widen the window.
        Some(at) if at < from || at > to => {
            return Err(malformed(format!(
                "an event created at {at}, outside [{from}, {to}]"
            )));
        }
        Some(at) if at == to => return Ok(None),
        Some(_) => {}
        None => tracing::warn!(event_id = %crate::telemetry::bounded(&head.id),
            "PayPal listed an event without a usable create_time; applied first"),
    }
    Ok(Some(Listed {
        id: head.id,
        created: created.unwrap_or(from),
        raw: Bytes::from(raw.get().to_owned()),
    }))
}

/// The query of a `next` link, which must name the listing on the API
/// base's host or one of PayPal's own: its paging parameters, with our own
/// `window` (page size and times) in place of the link's, so that a link
/// cannot widen or move the window.
fn next_query(
    base: &Url,
    href: &str,
    window: &[(String, String)],
) -> Result<Vec<(String, String)>, ApiFailure> {
    let link = Url::parse(href).map_err(|_| malformed("a next link that is not a URL".into()))?;
    let on_base = link.scheme() == base.scheme()
        && link.host_str() == base.host_str()
        && link.port_or_known_default() == base.port_or_known_default();
    let on_paypal =
        link.scheme() == "https" && link.host_str().is_some_and(|h| PAYPAL_HOSTS.contains(&h));
    if !(on_base || on_paypal) {
        return Err(malformed(
            "a next link to another host than the API's".into(),
        ));
    }
    if link.path() != LIST_PATH {
        return Err(malformed(
            "a next link to another path than the listing".into(),
        ));
    }
    let mut query = window.to_vec();
    query.extend(
        link.query_pairs()
            .into_owned()
            .filter(|(key, _)| !window.iter().any(|(ours, _)| ours == key)),
    );
    Ok(query)
}

fn malformed(what: String) -> ApiFailure {
    ApiFailure::Malformed(what, PROVIDER)
}

/// `2026-12-01T10:00:00Z`.
fn rfc3339(at: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_secs(u64::try_from(at).unwrap_or_default());
    humantime::format_rfc3339_seconds(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_links_must_name_the_listing_on_the_base_or_paypal() {
        let base = Url::parse("https://api-m.paypal.com").unwrap();
        let window = vec![
            ("page_size".to_owned(), "100".to_owned()),
            ("start_time".to_owned(), "2026-12-01T00:00:00Z".to_owned()),
            ("end_time".to_owned(), "2026-12-01T01:00:00Z".to_owned()),
        ];
        // The link's paging token, with our own window: a link that tries
        // to widen it is held to ours.
        let ok = "https://api.paypal.com/v1/notifications/webhooks-events?page_size=300&start_time=2000-01-01T00:00:00Z&next_page_token=abc";
        let query = next_query(&base, ok, &window).unwrap();
        let mut expected = window.clone();
        expected.push(("next_page_token".into(), "abc".into()));
        assert_eq!(query, expected);
        let fake = Url::parse("http://127.0.0.1:4000").unwrap();
        assert!(
            next_query(
                &fake,
                "http://127.0.0.1:4000/v1/notifications/webhooks-events?a=1",
                &window
            )
            .is_ok()
        );
        for hostile in [
            "https://api.paypal.com.evil.example/v1/notifications/webhooks-events",
            "http://api.paypal.com/v1/notifications/webhooks-events",
            "http://127.0.0.1:4001/v1/notifications/webhooks-events",
            "https://api.paypal.com/v1/oauth2/token",
            "/v1/notifications/webhooks-events",
        ] {
            assert!(next_query(&fake, hostile, &window).is_err(), "{hostile}");
        }
    }

    #[test]
    fn windows_are_sent_in_rfc3339_and_events_at_the_end_are_the_next_slice_s() {
        assert_eq!(rfc3339(1_796_119_200), "2026-12-01T10:00:00Z");
        let event = |time: &str| {
            let raw = format!(r#"{{"id":"WH-1","create_time":"{time}"}}"#);
            listed_in(&RawValue::from_string(raw).unwrap(), (100, 200))
        };
        let at = |secs: i64| rfc3339(secs).replace('Z', ".250Z");
        assert_eq!(event(&at(100)).unwrap().unwrap().created, 100);
        assert!(event(&at(200)).unwrap().is_none());
        assert!(event(&at(99)).is_err() && event(&at(201)).is_err());
        assert_eq!(event("2018-19-12T22:20:32Z").unwrap().unwrap().created, 100);
    }
}
