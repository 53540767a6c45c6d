//! The console's pages: reads only.

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde::Deserialize;

use super::Console;
use super::auth::Actor;
use super::chart;
use super::views::{self, Chrome, EventFilterView, SweepView, age, page, query_value};
use crate::outbox::store::{self, browse};
use crate::{events, ledger, payments, story, subscriptions, sweep};

/// Rows a page shows at most.
const PAGE_ROWS: i64 = 50;
/// A user's entries and payments shown at most.
const USER_ROWS: i64 = 100;

const VIAS: [&str; 4] = ["webhook", "sweep", "replay", "import"];

/// What a failed read answers: 503 when the database is down, which is the
/// only way a read here fails.
fn failed(error: &sqlx::Error) -> Response {
    tracing::warn!(%error, "a console read failed");
    views::unavailable()
}

pub async fn overview(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
) -> Response {
    let live = live(&console).await;
    page(&views::Overview {
        chrome: Chrome::new(&console, &actor, "overview"),
        live,
    })
}

/// The overview's figures alone, which its script fetches every few
/// seconds.
pub async fn overview_live(State(console): State<Console>) -> Response {
    page(&live(&console).await)
}

/// Reads what the overview shows. A figure that cannot be read is left
/// out (and the page says so) rather than failing the page.
async fn live(console: &Console) -> views::Live {
    let pool = &console.app.pool;
    let now = console.app.clock.now();
    let hour = events::counts_by_outcome(pool, now / 60 * 60 - 59 * 60, 60).await;
    let day = events::counts_by_outcome(pool, now / 900 * 900 - 95 * 900, 900).await;
    let metrics = &console.app.metrics;
    let batches = console.app.ingestor.batch_stats();
    let batch_count = batches.batches.load(std::sync::atomic::Ordering::Relaxed);
    let batched = batches.events.load(std::sync::atomic::Ordering::Relaxed);
    #[allow(clippy::cast_precision_loss)]
    let mean_batch = if batch_count == 0 {
        "-".to_owned()
    } else {
        format!("{:.1}", batched as f64 / batch_count as f64)
    };
    let ms = |q: f64| {
        metrics
            .ingest_quantile(q)
            .map(|s| format!("{:.1}", s * 1000.0))
    };
    views::Live {
        as_of: humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(now).unwrap_or(0)),
        )
        .to_string(),
        outbox: store::depth(pool).await.ok(),
        deferred: events::deferred_depth(pool).await.ok(),
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        timed: metrics.ingest_count(),
        batches: batch_count,
        mean_batch,
        fallbacks: batches.fallbacks.load(std::sync::atomic::Ordering::Relaxed),
        sweeps: sweep::store::runs(pool)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(sweep_view)
            .collect(),
        charts: vec![
            hour.ok().map(|c| chart::draw("Last hour", &c, now, 60, 60)),
            day.ok().map(|c| chart::draw("Last day", &c, now, 96, 900)),
        ],
    }
}

fn sweep_view(run: sweep::store::Run) -> SweepView {
    let (result, failed) = match &run.last_result {
        Some(result) => match result.get("error").and_then(|e| e.as_str()) {
            Some(error) => (format!("failed: {error}"), true),
            None => (
                format!(
                    "{} recovered, {} already seen",
                    result
                        .get("recovered")
                        .and_then(serde_json::Value::as_u64)
                        .unwrap_or(0),
                    result
                        .get("already_seen")
                        .and_then(serde_json::Value::as_u64)
                        .unwrap_or(0),
                ),
                false,
            ),
        },
        None => ("not run yet".to_owned(), false),
    };
    SweepView {
        provider: run.provider,
        last_run_at: run.last_run_at.unwrap_or_else(|| "-".to_owned()),
        last_success_at: run.last_success_at.unwrap_or_else(|| "never".to_owned()),
        result,
        failed,
    }
}

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

/// An empty form field is no filter.
fn given(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// A time from the form (`2026-12-01T15:30`, seconds optional, UTC) as
/// Unix seconds.
fn parse_time(value: &str) -> Result<Option<f64>, String> {
    let Some(value) = given(value) else {
        return Ok(None);
    };
    let full = if value.len() == 16 {
        format!("{value}:00")
    } else {
        value.clone()
    };
    humantime::parse_rfc3339_weak(full.trim_end_matches('Z'))
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
    Path((provider, event_id)): Path<(String, String)>,
    Query(notice): Query<Notice>,
) -> Response {
    let pool = &console.app.pool;
    let stored = match events::find(pool, &provider, &event_id).await {
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
    let (entries, payments, subscriptions, outbox, story) = match reads {
        Ok(reads) => reads,
        Err(error) => return failed(&error),
    };
    let notice = chart::OUTCOMES
        .iter()
        .chain(&["ignored"])
        .find(|o| **o == notice.replayed)
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
        payload: pretty(&stored.payload),
        detail: pretty(&stored.detail.to_string()),
        can_replay: stored.outcome != "imported",
        stored,
        entries: entries.into_iter().map(Into::into).collect(),
        payments: payments.into_iter().map(Into::into).collect(),
        subscriptions,
        outbox,
        story,
        notice,
    })
}

/// JSON indented for reading; as stored when it is not JSON.
fn pretty(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| json.to_owned())
}

pub async fn user(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
    Path(user_id): Path<String>,
) -> Response {
    let pool = &console.app.pool;
    let reads = tokio::try_join!(
        ledger::wallets_of_user(pool, &user_id),
        ledger::entries_of_user(pool, &user_id, USER_ROWS),
        payments::of_user(pool, &user_id, USER_ROWS),
        subscriptions::rows(pool, Some(&user_id), None),
    );
    let (wallets, entries, payments, subscriptions) = match reads {
        Ok(reads) => reads,
        Err(error) => return failed(&error),
    };
    let mut chrome = Chrome::new(&console, &actor, "users");
    chrome.search.clone_from(&user_id);
    page(&views::UserPage {
        chrome,
        wallets: wallets
            .into_iter()
            .map(|w| {
                let balance = crate::effects::decimal(w.balance_minor, &w.currency);
                (w.currency, balance, w.updated_at)
            })
            .collect(),
        entries: entries.into_iter().map(Into::into).collect(),
        payments: payments.into_iter().map(Into::into).collect(),
        subscriptions,
        user_id,
    })
}

/// The outbox page's filter.
#[derive(Debug, Default, Deserialize)]
pub struct OutboxQuery {
    /// `dead`, `pending` or empty (both).
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub topic: String,
    #[serde(default)]
    pub error: String,
    #[serde(default)]
    pub after: Option<i64>,
    #[serde(default)]
    pub retried: Option<u64>,
}

impl OutboxQuery {
    pub fn filter(&self) -> browse::Filter {
        browse::Filter {
            dead: match self.state.as_str() {
                "dead" => Some(true),
                "pending" => Some(false),
                _ => None,
            },
            topic: given(&self.topic),
            error: given(&self.error),
        }
    }

    /// The filter as a query string (without the page).
    pub fn query(&self) -> String {
        format!(
            "state={}&topic={}&error={}",
            query_value(self.state.trim()),
            query_value(self.topic.trim()),
            query_value(self.error.trim())
        )
    }
}

pub async fn outbox(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
    Query(query): Query<OutboxQuery>,
) -> Response {
    let pool = &console.app.pool;
    let filter = query.filter();
    let (rows, depth) = match tokio::try_join!(
        browse::page(pool, &filter, query.after, PAGE_ROWS),
        store::depth(pool)
    ) {
        Ok(reads) => reads,
        Err(error) => return failed(&error),
    };
    let later = (rows.len() == usize::try_from(PAGE_ROWS).unwrap_or(usize::MAX))
        .then(|| rows.last())
        .flatten()
        .map(|last| format!("/console/outbox?{}&after={}", query.query(), last.id));
    page(&views::OutboxPage {
        chrome: Chrome::new(&console, &actor, "outbox"),
        state: query.state.trim().to_owned(),
        topic: query.topic.trim().to_owned(),
        error: query.error.trim().to_owned(),
        rows,
        later,
        first_page: query.after.is_none(),
        depth,
        notice: query
            .retried
            .map(|n| format!("Re-queued {n} dead row(s) for delivery.")),
        query: query.query(),
    })
}

/// The dry run of a bulk retry: how many dead rows match, and a form to
/// retry exactly those.
pub async fn bulk_retry(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
    Query(query): Query<OutboxQuery>,
) -> Response {
    let (count, max_id) = match browse::count_dead(&console.app.pool, &query.filter()).await {
        Ok(counted) => counted,
        Err(error) => return failed(&error),
    };
    page(&views::BulkRetry {
        chrome: Chrome::new(&console, &actor, "outbox"),
        topic: query.topic.trim().to_owned(),
        error: query.error.trim().to_owned(),
        count,
        max_id: max_id.unwrap_or(0),
        query: query.query(),
    })
}

pub async fn deferred(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
) -> Response {
    let pool = &console.app.pool;
    let (rows, (count, oldest)) =
        match tokio::try_join!(events::deferred(pool, 200), events::deferred_depth(pool)) {
            Ok(reads) => reads,
            Err(error) => return failed(&error),
        };
    page(&views::DeferredPage {
        chrome: Chrome::new(&console, &actor, "deferred"),
        rows,
        count,
        oldest: age(oldest),
    })
}
