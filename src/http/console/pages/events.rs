//! The events list (filters, search, keyset pages) and one event's page.

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::Response;
use serde::Deserialize;

use super::{PAGE_ROWS, failed, given};
use crate::events::{self, Outcome};
use crate::http::console::auth::Actor;
use crate::http::console::chart;
use crate::http::console::shown::{self, SHOWN_JSON_BYTES};
use crate::http::console::views::{self, Chrome, EventFilterView, page, query_value};
use crate::http::console::{Console, EventRef};
use crate::outbox::browse;
use crate::{ledger, payments, story, subscriptions};

/// Lines of an event's story its page shows at most (`webhookd explain`
/// prints them all).
const STORY_LINES: usize = 500;

/// How an event arrived (a replay keeps the way it first came).
const VIAS: [&str; 3] = ["webhook", "sweep", "import"];

/// The events page's query: the filter, and where the page starts.
#[derive(Debug, Default, Deserialize)]
pub struct EventsQuery {
    #[serde(default)]
    provider: String,
    #[serde(default, rename = "type")]
    event_type: String,
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    via: String,
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    #[serde(default)]
    q: String,
    #[serde(default)]
    before_at: String,
    #[serde(default)]
    before_provider: String,
    #[serde(default)]
    before_id: String,
}

/// A time from the form (`2026-12-01T15:30`, seconds optional, UTC) as
/// Unix seconds.
fn parse_time(value: &str) -> Result<Option<f64>, String> {
    let Some(value) = given(value) else {
        return Ok(None);
    };
    let value = value.trim_end_matches(['Z', 'z']);
    let full = if value.len() == 16 {
        format!("{value}:00")
    } else {
        value.to_owned()
    };
    humantime::parse_rfc3339_weak(&full)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| Some(d.as_secs_f64()))
        .ok_or_else(|| "A time is written 2026-12-01T15:30 (UTC).".to_owned())
}

pub async fn events(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
    Query(query): Query<EventsQuery>,
) -> Response {
    let (from, to) = match (parse_time(&query.from), parse_time(&query.to)) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(message), _) | (_, Err(message)) => return views::bad_request(&message),
    };
    let filter = events::Filter {
        provider: given(&query.provider),
        event_type: given(&query.event_type),
        outcome: given(&query.outcome),
        received_via: given(&query.via),
        from,
        to,
        q: given(&query.q),
    };
    let before = if query.before_at.is_empty() {
        None
    } else {
        match events::Cursor::new(&query.before_at, &query.before_provider, &query.before_id) {
            Some(cursor) => Some(cursor),
            None => return views::bad_request("That page link is malformed."),
        }
    };
    let rows = match events::page(&console.app.pool, &filter, before.as_ref(), PAGE_ROWS).await {
        Ok(rows) => rows,
        Err(error) => return failed(&error),
    };
    let view = EventFilterView {
        provider: query.provider.trim().to_owned(),
        event_type: query.event_type.trim().to_owned(),
        outcome: query.outcome.trim().to_owned(),
        via: query.via.trim().to_owned(),
        from: query.from.trim().to_owned(),
        to: query.to.trim().to_owned(),
        q: query.q.trim().to_owned(),
    };
    let older = (rows.len() == usize::try_from(PAGE_ROWS).unwrap_or(usize::MAX))
        .then(|| rows.last())
        .flatten()
        .map(|last| {
            format!(
                "/console/events?{}&before_at={}&before_provider={}&before_id={}",
                filter_query(&view),
                query_value(&last.cursor_at),
                query_value(&last.provider),
                query_value(&last.event_id)
            )
        });
    let mut chrome = Chrome::new(&console, &actor, "events");
    chrome.search.clone_from(&view.q);
    page(&views::Events {
        chrome,
        providers: console
            .app
            .providers
            .names()
            .iter()
            .map(|p| (*p).to_owned())
            .collect(),
        outcomes: &chart::OUTCOMES,
        vias: &VIAS,
        rows,
        older,
        first_page: before.is_none(),
        filter: view,
    })
}

fn filter_query(view: &EventFilterView) -> String {
    [
        ("provider", &view.provider),
        ("type", &view.event_type),
        ("outcome", &view.outcome),
        ("via", &view.via),
        ("from", &view.from),
        ("to", &view.to),
        ("q", &view.q),
    ]
    .iter()
    .map(|(k, v)| format!("{k}={}", query_value(v)))
    .collect::<Vec<_>>()
    .join("&")
}

/// What an action tells the page it returns to.
#[derive(Debug, Default, Deserialize)]
pub struct Notice {
    #[serde(default)]
    replayed: String,
    #[serde(default)]
    changed: bool,
    #[serde(default)]
    retried: Option<u64>,
}

pub async fn event(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
    EventRef { provider, event_id }: EventRef,
    Query(notice): Query<Notice>,
) -> Response {
    let pool = &console.app.pool;
    let chars = i32::try_from(SHOWN_JSON_BYTES).unwrap_or(i32::MAX);
    let stored = match events::preview(pool, &provider, &event_id, chars).await {
        Ok(Some(stored)) => stored,
        Ok(None) => {
            return views::not_found("No such event is stored: it was pruned, or never received.");
        }
        Err(error) => return failed(&error),
    };
    let reads = tokio::try_join!(
        ledger::entries_of_event(pool, &provider, &event_id),
        payments::of_event(pool, &provider, &event_id),
        subscriptions::rows(pool, None, Some((&provider, &event_id))),
        browse::of_event(pool, &provider, &event_id),
        story::timeline(pool, &event_id),
    );
    let (entries, payments, subscriptions, outbox, mut story) = match reads {
        Ok(reads) => reads,
        Err(error) => return failed(&error),
    };
    let story_more = story.len().saturating_sub(STORY_LINES);
    story.truncate(STORY_LINES);
    let ids: Vec<i64> = outbox.iter().map(|o| o.id).collect();
    let attempts = match browse::failed_attempts(pool, &ids).await {
        Ok(attempts) => attempts,
        Err(error) => return failed(&error),
    };
    let notice = notice
        .replayed
        .parse::<Outcome>()
        .ok()
        .filter(|outcome| chart::OUTCOMES.contains(outcome))
        .map(|outcome| {
            format!(
                "Replayed: {outcome}. The stored outcome {}.",
                if notice.changed {
                    "changed"
                } else {
                    "is unchanged"
                }
            )
        })
        .or_else(|| {
            notice
                .retried
                .map(|n| format!("Re-queued {n} outbox row(s)."))
        });
    page(&views::EventPage {
        chrome: Chrome::new(&console, &actor, "events"),
        payload: shown::json(
            &stored.payload_head,
            usize::try_from(stored.payload_bytes).unwrap_or(0),
            SHOWN_JSON_BYTES,
        ),
        detail: shown::json(
            &stored.detail_head,
            usize::try_from(stored.detail_bytes).unwrap_or(0),
            SHOWN_JSON_BYTES,
        ),
        can_replay: stored.outcome != Outcome::Imported
            && stored.erased_at.is_none()
            && stored.payload_expired_at.is_none(),
        expected_api_version: console
            .app
            .providers
            .receiver(stored.source_name())
            .and_then(|receiver| receiver.api_version.clone()),
        stored,
        entries: entries.into_iter().map(Into::into).collect(),
        payments: payments.into_iter().map(Into::into).collect(),
        subscriptions,
        outbox,
        attempts,
        story,
        story_more,
        notice,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn a_form_time_is_utc_with_or_without_seconds_and_zone() {
        let at = 1_796_139_000.0;
        for written in [
            "2026-12-01T15:30",
            "2026-12-01T15:30Z",
            "2026-12-01T15:30:00",
            "2026-12-01T15:30:00Z",
            " 2026-12-01 15:30:00 ",
        ] {
            assert_eq!(parse_time(written), Ok(Some(at)), "{written:?}");
        }
        assert_eq!(parse_time(""), Ok(None));
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("2026-13-01T15:30").is_err());
    }
}
