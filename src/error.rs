//! The one error type the HTTP layer answers with. Client errors say what was
//! wrong with the request; server errors say nothing internal. The full cause
//! chain is logged once, inside the request span.

use std::sync::Arc;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::db::{self, Failure};
use crate::providers::SignatureError;
use crate::telemetry;

/// Seconds a provider is asked to wait before retrying after a 503.
pub const RETRY_AFTER_SECS: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unknown provider")]
    UnknownProvider,
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error("database unavailable")]
    Unavailable(#[source] Arc<sqlx::Error>),
    #[error("request timed out")]
    TimedOut,
    #[error("unexpected error")]
    Unexpected(#[source] anyhow::Error),
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        Arc::new(error).into()
    }
}

/// The error of a batch, shared by its events.
impl From<Arc<sqlx::Error>> for ApiError {
    fn from(error: Arc<sqlx::Error>) -> Self {
        match db::classify(&error) {
            Failure::Transient => ApiError::Unavailable(error),
            // Poison is recorded `rejected` by ingest: here only when that failed too.
            Failure::Poison | Failure::Permanent => ApiError::Unexpected(error.into()),
        }
    }
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::UnknownProvider => StatusCode::NOT_FOUND,
            ApiError::Signature(_) => StatusCode::BAD_REQUEST,
            ApiError::Unavailable(_) | ApiError::TimedOut => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unexpected(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        // Client errors carry their (input-free) reason; server errors only
        // their status, so nothing internal leaks.
        let message = match status {
            StatusCode::SERVICE_UNAVAILABLE => "temporarily unavailable, retry later".to_owned(),
            StatusCode::INTERNAL_SERVER_ERROR => "internal error".to_owned(),
            _ => self.to_string(),
        };
        if status.is_server_error() {
            let cause = format!("{:#}", anyhow::Error::from(self));
            tracing::error!(
                error = %telemetry::bounded_to(&cause, telemetry::MAX_LOGGED_ERROR_BYTES),
                "request failed"
            );
        } else {
            tracing::info!(error = %message, "request refused");
        }
        let mut response = (status, Json(json!({ "error": message }))).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        response
    }
}
