//! A sweep of a provider's events API (Stripe's `GET /v1/events`, PayPal's
//! `GET /v1/notifications/webhooks-events`): each lists its events newest
//! first; they are applied oldest first, by `(created, id)`.
//!
//! Memory stays bounded: the window is read one time slice at a time, and a
//! slice that holds more than [`SLICE_EVENTS`] events is split in two and
//! read again (a slice of one second is read whole).

use bytes::Bytes;
use sqlx::PgPool;

use super::api::{Api, ApiFailure};
use super::{Checkpoint, Mode, Summary};
use crate::providers::{Event, SignatureError};

/// Most events held in memory at once (one slice's).
pub const SLICE_EVENTS: usize = 5_000;

/// An event as listed: its position in the list and its exact bytes.
pub(crate) struct Listed {
    pub id: String,
    pub created: i64,
    pub raw: Bytes,
}

/// A provider's events API, as a sweep reads it.
pub(crate) trait EventsApi {
    const PROVIDER: &'static str;

    /// Every event created in `window`, `[from, to)` (Unix seconds), in
    /// any order, or `None` when there are more than [`SLICE_EVENTS`] of
    /// them and the slice can be split ([`split`]).
    async fn list(
        api: &mut Api,
        window: (i64, i64),
        summary: &mut Summary,
    ) -> Result<Option<Vec<Listed>>, ApiFailure>;

    /// The event an API listed (its `listed_event`).
    fn event(raw: &Bytes) -> Result<Event, SignatureError>;
}

/// Sweeps `[since, until)` (Unix seconds) of `P`'s events and applies,
/// counts or imports them ([`Mode`]). With `checkpoint` (the periodic
/// sweep's lease), the `sweeps` row advances past each slice once it is
/// applied, and the lease is renewed; a run whose lease another process
/// took over stops.
pub(crate) async fn sweep<P: EventsApi>(
    api: &mut Api,
    pool: &PgPool,
    mode: Mode,
    (since, until): (i64, i64),
    checkpoint: Option<&Checkpoint>,
) -> anyhow::Result<Summary> {
    let requests_before = api.requests;
    let mut summary = Summary::new(P::PROVIDER, mode, (since, until));
    let mut slices = super::slices((since, until));
    while let Some((from, to)) = slices.pop() {
        let Some(mut listed) = P::list(api, (from, to), &mut summary).await? else {
            let middle = from + (to - from) / 2;
            slices.push((middle, to));
            slices.push((from, middle));
            continue;
        };
        listed.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        listed.dedup_by(|a, b| a.id == b.id);
        summary.listed += listed.len() as u64;
        let mut events = Vec::with_capacity(listed.len());
        for listed in listed {
            match P::event(&listed.raw) {
                Ok(event) => events.push(event),
                Err(refusal) => {
                    tracing::warn!(provider = P::PROVIDER,
                        event_id = %crate::telemetry::bounded(&listed.id), %refusal,
                        "the API listed an event webhookd cannot read; skipped");
                    summary.skipped += 1;
                }
            }
        }
        super::apply(pool, mode, events, &mut summary).await?;
        if let Some(checkpoint) = checkpoint {
            checkpoint.advance(pool, P::PROVIDER, to).await?;
        }
    }
    summary.requests = api.requests - requests_before;
    Ok(summary)
}

/// Whether a slice `[from, to)` of which `listed` events were read so far
/// should be split rather than read on; an error when even one second holds
/// more than anyone could mean.
pub(crate) fn split(
    listed: usize,
    (from, to): (i64, i64),
    provider: &'static str,
) -> Result<bool, ApiFailure> {
    if listed > SLICE_EVENTS && to - from > 1 {
        return Ok(true);
    }
    if listed > SLICE_EVENTS * 20 {
        return Err(ApiFailure::Malformed(
            format!("more than {} events in one second", SLICE_EVENTS * 20),
            provider,
        ));
    }
    Ok(false)
}
