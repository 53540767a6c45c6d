//! `/healthz`: the process is alive. `/readyz`: the database answers within a
//! short timeout, migrations are applied, no transaction pooler was found
//! behind a pool configured without one (`db::detection`), and we are not
//! shutting down.

use std::future::Future;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;
use crate::db;

const READY_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    match unready(&state).await {
        None => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "unavailable", "reason": reason })),
        ),
    }
}

/// Why the process is not ready, or `None` when it is (`/readyz`, and
/// `webhookd_ready`).
pub(super) async fn unready(state: &AppState) -> Option<&'static str> {
    if state.shutdown.is_cancelled() {
        return Some("shutting down");
    }
    if let Some(found) = db::detection::found() {
        return Some(found);
    }
    let pool = state.pool.clone();
    let read = async move {
        let applied = db::migrations_applied(&pool).await;
        if let Err(error) = &applied {
            db::detection::notice(error);
        }
        applied
    };
    match read_within(READY_TIMEOUT, read).await {
        Some(true) => None,
        Some(false) => Some("migrations not applied"),
        // This very read may have been what showed the pooler.
        None => Some(db::detection::found().unwrap_or("database unavailable")),
    }
}

/// Runs `read` on a task of its own and waits for it at most `timeout`;
/// `None` when it failed or took longer. A read given up on still runs to
/// its end: dropped while its BEGIN is in flight, sqlx would put the
/// connection back in the pool with that transaction open (behind a
/// transaction pooler, holding a server connection) until Postgres ends it.
pub(super) async fn read_within<T: Send + 'static>(
    timeout: Duration,
    read: impl Future<Output = Result<T, sqlx::Error>> + Send + 'static,
) -> Option<T> {
    match tokio::time::timeout(timeout, tokio::spawn(read)).await {
        Ok(Ok(Ok(value))) => Some(value),
        _ => None,
    }
}
