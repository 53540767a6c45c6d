//! The outbox's undelivered rows, and the dry run of a bulk retry.

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::Response;
use serde::Deserialize;

use super::{PAGE_ROWS, failed, given};
use crate::http::console::Console;
use crate::http::console::auth::Actor;
use crate::http::console::views::{self, Chrome, page, query_value};
use crate::outbox::{self, browse};

/// The outbox page's filter.
#[derive(Debug, Default, Deserialize)]
pub struct OutboxQuery {
    /// `dead`, `pending` or empty (both).
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub topic: String,
    /// A sink's name, or empty (every sink).
    #[serde(default)]
    pub sink: String,
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
            sink: given(&self.sink),
            error: given(&self.error),
        }
    }

    /// The filter as a query string (without the page).
    pub fn query(&self) -> String {
        format!(
            "state={}&topic={}&sink={}&error={}",
            query_value(self.state.trim()),
            query_value(self.topic.trim()),
            query_value(self.sink.trim()),
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
    let (rows, sinks) = match tokio::try_join!(
        browse::page(pool, &filter, query.after, PAGE_ROWS),
        outbox::depth_by_sink(pool)
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
        sink: query.sink.trim().to_owned(),
        error: query.error.trim().to_owned(),
        rows,
        later,
        first_page: query.after.is_none(),
        depth: outbox::Depth::total(&sinks),
        sinks,
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
    let counted = match browse::count_dead(&console.app.pool, &query.filter()).await {
        Ok(counted) => counted,
        Err(error) => return failed(&error),
    };
    page(&views::BulkRetry {
        chrome: Chrome::new(&console, &actor, "outbox"),
        topic: query.topic.trim().to_owned(),
        sink: query.sink.trim().to_owned(),
        error: query.error.trim().to_owned(),
        count: counted.count,
        max_id: counted.max_id.unwrap_or(0),
        as_of: counted.as_of,
        query: query.query(),
    })
}
