//! The console's pages: reads only.

mod doctor;
mod download;
mod events;
mod outbox;
mod owners;

pub use doctor::doctor;
pub use download::payload;
pub use events::{event, events};
pub use outbox::{OutboxQuery, bulk_retry, outbox};
pub use owners::owners;

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::response::Response;

use super::auth::Actor;
use super::chart;
use super::views::{self, Chrome, SweepView, age, page};
use super::{Console, UserRef};
use crate::events::Outcome;
use crate::{ledger, payments, subscriptions, sweep};

/// Rows a page shows at most.
pub(super) const PAGE_ROWS: i64 = 50;
/// A user's entries and payments shown at most.
const USER_ROWS: i64 = 100;

/// What a failed read answers ([`views::database_failed`]).
pub(super) fn failed(error: &sqlx::Error) -> Response {
    views::database_failed(error)
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

/// How long the overview's day of counts is shown before it is read again
/// (seconds): that read counts the day's events, about 100 ms at 5 million
/// retained (docs/PERFORMANCE.md), and the overview refreshes every few
/// seconds, in every open tab. The hour's counts are read each time.
const DAY_READ_EVERY: i64 = 60;

/// The day's buckets: 96 of 15 minutes.
const DAY_BUCKET: i64 = 900;
const DAY_BUCKETS: i64 = 96;

/// The overview's last day of counts by outcome, in 15-minute buckets, as
/// read at most [`DAY_READ_EVERY`] and at each new bucket; one read at a
/// time, whoever asks.
#[derive(Clone, Default)]
pub struct DayCounts(Arc<tokio::sync::Mutex<Option<(i64, Counts)>>>);

/// `(bucket start, outcome, count)`, as `events::counts_by_outcome` reads them.
type Counts = Vec<(i64, Outcome, i64)>;

impl std::fmt::Debug for DayCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DayCounts")
    }
}

impl DayCounts {
    /// The counts as of `now` (Unix seconds), read again when older than
    /// [`DAY_READ_EVERY`] or of an earlier bucket.
    async fn read(&self, pool: &sqlx::PgPool, now: i64) -> Result<Counts, sqlx::Error> {
        let mut held = self.0.lock().await;
        if let Some((at, counts)) = held.as_ref()
            && (0..DAY_READ_EVERY).contains(&(now - at))
            && now / DAY_BUCKET == at / DAY_BUCKET
        {
            return Ok(counts.clone());
        }
        let since = now / DAY_BUCKET * DAY_BUCKET - (DAY_BUCKETS - 1) * DAY_BUCKET;
        let counts = crate::events::counts_by_outcome(pool, since, DAY_BUCKET).await?;
        *held = Some((now, counts.clone()));
        Ok(counts)
    }
}

/// Reads what the overview shows. A figure that cannot be read is left
/// out (and the page says so) rather than failing the page.
async fn live(console: &Console) -> views::Live {
    let pool = &console.app.pool;
    let now = console.app.clock.now();
    let hour = crate::events::counts_by_outcome(pool, now / 60 * 60 - 59 * 60, 60).await;
    let day = console.day.read(pool, now).await;
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
            .ingest_latencies()
            .quantile(q)
            .map(|s| format!("{:.1}", s * 1000.0))
    };
    views::Live {
        as_of: humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(now).unwrap_or(0)),
        )
        .to_string(),
        outbox: crate::outbox::depth(pool).await.ok(),
        deferred: crate::events::deferred_depth(pool).await.ok(),
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        timed: metrics.ingest_latencies().count(),
        batches: batch_count,
        mean_batch,
        fallbacks: batches.fallbacks.load(std::sync::atomic::Ordering::Relaxed),
        sweeps: sweep::runs(pool)
            .await
            .ok()
            .map(|runs| runs.into_iter().map(sweep_view).collect()),
        charts: vec![
            hour.ok().map(|c| chart::draw("Last hour", &c, now, 60, 60)),
            day.ok()
                .map(|c| chart::draw("Last day", &c, now, DAY_BUCKETS, DAY_BUCKET)),
        ],
        api_versions: metrics.api_versions(),
    }
}

fn sweep_view(run: sweep::Run) -> SweepView {
    let (result, failed) = match &run.last_result {
        Some(result) => match result.get("error").and_then(|e| e.as_str()) {
            Some(error) => (format!("failed: {}", super::shown::text(error)), true),
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
        last_run_at: run
            .last_run_at
            .map_or_else(|| "-".to_owned(), |at| at.to_string()),
        last_success_at: run
            .last_success_at
            .map_or_else(|| "never".to_owned(), |at| at.to_string()),
        result,
        failed,
    }
}

pub async fn user(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
    UserRef(user_id): UserRef,
) -> Response {
    let pool = &console.app.pool;
    let reads = tokio::try_join!(
        ledger::wallets_of_user(pool, &user_id),
        ledger::entries_of_user(pool, &user_id, USER_ROWS),
        payments::of_user(pool, &user_id, USER_ROWS),
        subscriptions::rows(pool, Some(&user_id), None),
        crate::owners::of_user(pool, &user_id),
    );
    let (wallets, entries, payments, subscriptions, owners) = match reads {
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
                let balance = crate::money::decimal(w.balance_minor, &w.currency);
                (w.currency, balance, w.updated_at.to_string())
            })
            .collect(),
        entries: entries.into_iter().map(Into::into).collect(),
        payments: payments.into_iter().map(Into::into).collect(),
        subscriptions,
        owners,
        user_id,
    })
}

pub async fn deferred(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
) -> Response {
    let pool = &console.app.pool;
    let (rows, (count, oldest), (owner_count, owner_oldest)) = match tokio::try_join!(
        crate::events::deferred(pool, 200),
        crate::events::deferred_depth(pool),
        crate::events::owner_waits(pool)
    ) {
        Ok(reads) => reads,
        Err(error) => return failed(&error),
    };
    page(&views::DeferredPage {
        chrome: Chrome::new(&console, &actor, "deferred"),
        rows: rows.into_iter().map(views::DeferredRow::from).collect(),
        count,
        oldest: age(oldest),
        owner_count,
        owner_oldest: age(owner_oldest),
    })
}

/// An empty form field is no filter.
pub(super) fn given(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}
