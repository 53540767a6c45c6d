//! Stripe's `GET /v1/events`: the types webhookd handles, created in the
//! window, 100 a page, paginated with `starting_after` while `has_more`.
//!
//! The list is newest first; events are applied oldest first, by
//! `(created, id)`. Memory stays bounded: the window is read one time slice
//! at a time, and a slice that holds more than [`SLICE_EVENTS`] events is
//! split in two and read again (a slice of one second is read whole).

use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use sqlx::PgPool;

use super::api::{Api, ApiFailure};
use super::{Checkpoint, Mode, Summary};
use crate::effects::stripe::HANDLED_TYPES;
use crate::providers::stripe::{PROVIDER, listed_event};

/// How far back a periodic sweep reaches: Stripe retries a delivery for
/// three days.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(72 * 3600);

/// Said when Stripe refuses the key.
pub const UNAUTHORIZED_HINT: &str =
    "check STRIPE_API_KEY (a restricted key needs read access to Events)";

/// Most events held in memory at once (one slice's).
pub const SLICE_EVENTS: usize = 5_000;

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

/// An event as listed: its position in the list and its exact bytes.
struct Listed {
    id: String,
    created: i64,
    raw: Bytes,
}

/// Sweeps `[since, until)` (Unix seconds): lists Stripe's events of the
/// handled types and applies, counts or imports them ([`Mode`]). With
/// `checkpoint` (the periodic sweep's lease), the `sweeps` row advances
/// past each slice once it is applied, and the lease is renewed; a run
/// whose lease another process took over stops.
pub async fn sweep(
    api: &mut Api,
    pool: &PgPool,
    mode: Mode,
    (since, until): (i64, i64),
    checkpoint: Option<&Checkpoint>,
) -> anyhow::Result<Summary> {
    let requests_before = api.requests;
    let mut summary = Summary::new(PROVIDER, mode, (since, until));
    let mut slices = super::slices((since, until));
    while let Some((from, to)) = slices.pop() {
        let Some(mut listed) = list(api, from, to, &mut summary).await? else {
            let middle = from + (to - from) / 2;
            slices.push((middle, to));
            slices.push((from, middle));
            continue;
        };
        listed.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        summary.listed += listed.len() as u64;
        let mut events = Vec::with_capacity(listed.len());
        for event in listed {
            match listed_event(&event.raw) {
                Ok(event) => events.push(event),
                Err(refusal) => {
                    tracing::warn!(event_id = %crate::telemetry::bounded(&event.id), %refusal,
                        "Stripe listed an event webhookd cannot read; skipped");
                    summary.skipped += 1;
                }
            }
        }
        super::apply(pool, mode, events, &mut summary).await?;
        if let Some(checkpoint) = checkpoint {
            checkpoint.advance(pool, PROVIDER, to).await?;
        }
    }
    summary.requests = api.requests - requests_before;
    Ok(summary)
}

/// Every handled event created in `[from, to)`, or `None` when there are
/// more than [`SLICE_EVENTS`] of them and the slice can be split.
async fn list(
    api: &mut Api,
    from: i64,
    to: i64,
    summary: &mut Summary,
) -> Result<Option<Vec<Listed>>, ApiFailure> {
    let mut listed: Vec<Listed> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut query: Vec<(&str, String)> = HANDLED_TYPES
            .iter()
            .map(|kind| ("types[]", (*kind).to_owned()))
            .collect();
        query.extend([
            ("created[gte]", from.to_string()),
            ("created[lt]", to.to_string()),
            ("limit", "100".to_owned()),
        ]);
        if let Some(after) = &after {
            query.push(("starting_after", after.clone()));
        }
        let body = api.get("/v1/events", &query).await?;
        summary.pages += 1;
        let page: Page = serde_json::from_slice(&body)
            .map_err(|e| ApiFailure::Malformed(format!("a list page: {e}"), PROVIDER))?;
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
            return Ok(Some(listed));
        }
        let last = listed.last().map(|event| event.id.clone());
        if last.is_none() || last == after {
            // More, it says, yet nothing new: never take that for the end.
            return Err(ApiFailure::Malformed(
                "a page with has_more but no new event".into(),
                PROVIDER,
            ));
        }
        if listed.len() > SLICE_EVENTS && to - from > 1 {
            return Ok(None);
        }
        if listed.len() > SLICE_EVENTS * 20 {
            return Err(ApiFailure::Malformed(
                format!("more than {} events in one second", SLICE_EVENTS * 20),
                PROVIDER,
            ));
        }
        after = last;
    }
}
