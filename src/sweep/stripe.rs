//! Stripe's `GET /v1/events`: the types webhookd handles, created in the
//! window, 100 a page, paginated with `starting_after` while `has_more`,
//! read and applied by the events-API sweep ([`super::listing`]).

use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::listing::{self, EventsApi, Listed};
use crate::api::{Api, ApiFailure};
use crate::effects::stripe::HANDLED_TYPES;
use crate::providers::stripe::{PROVIDER, listed_event};
use crate::providers::{Event, SignatureError};

/// How far back a periodic sweep reaches: Stripe retries a delivery for
/// three days.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(72 * 3600);

/// Said when Stripe refuses the key.
pub const UNAUTHORIZED_HINT: &str =
    "check STRIPE_API_KEY (a restricted key needs read access to Events)";

/// Events a page is asked for (Stripe's most).
const PAGE: usize = 100;

#[derive(Deserialize)]
struct Page {
    data: Vec<Box<RawValue>>,
    has_more: bool,
}

#[derive(Deserialize)]
struct Head {
    id: String,
    created: i64,
}

/// Stripe's events API, for [`listing::sweep`].
pub(crate) struct Stripe;

impl EventsApi for Stripe {
    const PROVIDER: &'static str = PROVIDER;

    /// The last event listed: the next page starts after it.
    type Cursor = Option<String>;

    fn first(_window: (i64, i64)) -> Option<String> {
        None
    }

    async fn page(
        api: &mut Api,
        (from, to): (i64, i64),
        after: &mut Option<String>,
        listed: &mut Vec<Listed>,
    ) -> Result<bool, ApiFailure> {
        let mut query: Vec<(&str, String)> = HANDLED_TYPES
            .iter()
            .map(|kind| ("types[]", (*kind).to_owned()))
            .collect();
        query.extend([
            ("created[gte]", from.to_string()),
            ("created[lt]", to.to_string()),
            ("limit", PAGE.to_string()),
        ]);
        if let Some(after) = after {
            query.push(("starting_after", after.clone()));
        }
        let body = api.get("/v1/events", &query).await?;
        let page: Page = serde_json::from_slice(&body)
            .map_err(|e| ApiFailure::Malformed(format!("a list page: {e}"), PROVIDER))?;
        listing::page_of(page.data.len(), PAGE, PROVIDER)?;
        for raw in page.data {
            let head: Head = serde_json::from_str(raw.get())
                .map_err(|e| ApiFailure::Malformed(format!("an event: {e}"), PROVIDER))?;
            // Hostile or mistaken answers must not loop or widen the window.
            if head.created < from || head.created >= to {
                return Err(ApiFailure::Malformed(
                    format!("event created at {} outside [{from}, {to})", head.created),
                    PROVIDER,
                ));
            }
            listed.push(Listed {
                id: head.id,
                created: head.created,
                raw: Bytes::from(raw.get().to_owned()),
            });
        }
        if !page.has_more {
            return Ok(false);
        }
        let last = listed.last().map(|event| event.id.clone());
        if last.is_none() || last == *after {
            // More, it says, yet nothing new: never take that for the end.
            return Err(ApiFailure::Malformed(
                "a page with has_more but no new event".into(),
                PROVIDER,
            ));
        }
        *after = last;
        Ok(true)
    }

    fn event(raw: &Bytes) -> Result<Event, SignatureError> {
        listed_event(raw)
    }
}
