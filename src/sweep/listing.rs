//! A sweep of a provider's events API (Stripe's `GET /v1/events`, PayPal's
//! `GET /v1/notifications/webhooks-events`): each lists its events newest
//! first; they are applied oldest first, by `(created, id)`.
//!
//! Memory stays bounded by bytes: the window is read one time slice at a
//! time, and a slice that holds more than [`SLICE_EVENTS`] events or
//! [`SLICE_BYTES`] bytes of them is split in two and read again; a slice of
//! one second that holds more is refused with that reason. A page holds
//! at most what was asked for, in at most the API's body bound
//! ([`crate::api::MOST_BODY_BYTES`]); events are held as listed (their
//! bytes) and parsed one at a time as they are applied.

use bytes::Bytes;
use sqlx::PgPool;

use super::{Checkpoint, Mode, Summary, Swept};
use crate::api::{Api, ApiFailure};
use crate::providers::{Event, SignatureError};

/// Most events held in memory at once (one slice's).
pub const SLICE_EVENTS: usize = 5_000;

/// Most bytes of listed events held in memory at once (one slice's).
pub const SLICE_BYTES: usize = 64 * 1024 * 1024;

/// An event as listed: its position in the list and its exact bytes.
pub(crate) struct Listed {
    pub id: String,
    pub created: i64,
    pub raw: Bytes,
}

/// A provider's events API, as a sweep reads it: page by page ([`list`]).
pub(crate) trait EventsApi {
    const PROVIDER: &'static str;

    /// Where the listing of one slice stands between its pages.
    type Cursor;

    /// The cursor of the first page of the slice `window`.
    fn first(window: (i64, i64)) -> Self::Cursor;

    /// Reads the page `cursor` names into `listed`: the events created in
    /// `window`, `[from, to)` (Unix seconds), in any order. Moves `cursor`
    /// on to the next page and answers `true`, or `false` when no page
    /// follows. An answer that would widen the window, or that names a next
    /// page yet moves on to nothing new, is an error.
    async fn page(
        api: &mut Api,
        window: (i64, i64),
        cursor: &mut Self::Cursor,
        listed: &mut Vec<Listed>,
    ) -> Result<bool, ApiFailure>;

    /// The event an API listed (its `listed_event`).
    fn event(raw: &Bytes) -> Result<Event, SignatureError>;
}

/// Every event `P` lists created in `window`, page after page, or `None`
/// when there are more than the sweep holds at once and the slice can be
/// split ([`split`]).
async fn list<P: EventsApi>(
    api: &mut Api,
    window: (i64, i64),
    summary: &mut Summary,
) -> Result<Option<Vec<Listed>>, ApiFailure> {
    let mut listed = Vec::new();
    let mut cursor = P::first(window);
    loop {
        let more = P::page(api, window, &mut cursor, &mut listed).await?;
        summary.pages += 1;
        if !more {
            return Ok(Some(listed));
        }
        if split(&listed, window, P::PROVIDER)? {
            return Ok(None);
        }
    }
}

/// Sweeps `[since, until)` (Unix seconds) of `P`'s events and applies,
/// counts or imports those its `source` takes ([`Mode`]), as that source
/// would their deliveries ([`Swept::judge`]); the others are
/// skipped. With `checkpoint` (the periodic sweep's lease), the `sweeps`
/// row advances past each slice once it is applied, and the lease is
/// renewed; a run whose lease another process took over stops.
pub(crate) async fn sweep<P: EventsApi>(
    api: &mut Api,
    pool: &PgPool,
    mode: Mode,
    source: &Swept,
    (since, until): (i64, i64),
    checkpoint: Option<&Checkpoint>,
) -> anyhow::Result<Summary> {
    let requests_before = api.requests;
    let mut summary = Summary::new(P::PROVIDER, source.account.as_deref(), mode, (since, until));
    let mut slices = super::slices((since, until));
    while let Some((from, to)) = slices.pop() {
        let Some(mut listed) = list::<P>(api, (from, to), &mut summary).await? else {
            let middle = from + (to - from) / 2;
            slices.push((middle, to));
            slices.push((from, middle));
            continue;
        };
        listed.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        listed.dedup_by(|a, b| a.id == b.id);
        summary.listed += listed.len() as u64;
        // A dry run counts the ids of those never recorded, all at once.
        let mut unseen = Vec::new();
        for listed in listed {
            let event = match P::event(&listed.raw) {
                Ok(event) => source.judge(event),
                Err(refusal) => {
                    tracing::warn!(provider = P::PROVIDER,
                        event_id = %crate::telemetry::bounded(&listed.id), %refusal,
                        "the API listed an event webhookd cannot read; skipped");
                    summary.skipped += 1;
                    continue;
                }
            };
            if let Some(refusal) = event.refusal() {
                tracing::warn!(provider = P::PROVIDER, event_id = event.event_id(), %refusal,
                    "the API listed an event this source does not take; skipped");
                summary.skipped += 1;
            } else if mode == Mode::DryRun {
                unseen.push(event.event_id().to_owned());
            } else {
                super::apply(pool, mode, &event, &mut summary).await?;
            }
        }
        super::count_unseen(pool, P::PROVIDER, &unseen, &mut summary).await?;
        if let Some(checkpoint) = checkpoint {
            checkpoint.advance(pool, to).await?;
        }
    }
    summary.requests = api.requests - requests_before;
    Ok(summary)
}

/// Whether a slice `[from, to)` of which `listed` events were read so far
/// should be split rather than read on; an error when even one second holds
/// more than the sweep holds at once.
pub(crate) fn split(
    listed: &[Listed],
    (from, to): (i64, i64),
    provider: &'static str,
) -> Result<bool, ApiFailure> {
    let bytes: usize = listed.iter().map(|event| event.raw.len()).sum();
    split_at(listed.len(), bytes, (from, to), provider)
}

/// [`split`] of a slice of which `count` items of `bytes` bytes were read
/// so far (Razorpay's payments and refunds too).
pub(crate) fn split_at(
    count: usize,
    bytes: usize,
    (from, to): (i64, i64),
    provider: &'static str,
) -> Result<bool, ApiFailure> {
    let over = count > SLICE_EVENTS || bytes > SLICE_BYTES;
    if over && to - from > 1 {
        return Ok(true);
    }
    if count > SLICE_EVENTS * 20 {
        return Err(ApiFailure::Oversized(
            format!("more than {} events in one second", SLICE_EVENTS * 20),
            provider,
        ));
    }
    if bytes > SLICE_BYTES {
        return Err(ApiFailure::Oversized(
            format!(
                "more than {} MiB of events in one second",
                SLICE_BYTES / (1024 * 1024)
            ),
            provider,
        ));
    }
    Ok(false)
}

/// Refuses a page that holds more than the `asked` items a page was asked for.
pub(crate) fn page_of(got: usize, asked: usize, provider: &'static str) -> Result<(), ApiFailure> {
    if got > asked {
        return Err(ApiFailure::Malformed(
            format!("a page of {got} items, where {asked} were asked for"),
            provider,
        ));
    }
    Ok(())
}
