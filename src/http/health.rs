//! `/healthz`: the process is alive. `/readyz`: the database answers within a
//! short timeout, migrations are applied, and we are not shutting down.

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
    let reason = if state.shutdown.is_cancelled() {
        Some("shutting down")
    } else {
        match tokio::time::timeout(READY_TIMEOUT, db::migrations_applied(&state.pool)).await {
            Ok(Ok(true)) => None,
            Ok(Ok(false)) => Some("migrations not applied"),
            Ok(Err(_)) | Err(_) => Some("database unavailable"),
        }
    };
    match reason {
        None => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "unavailable", "reason": reason })),
        ),
    }
}
