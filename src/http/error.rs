//! The one error type the HTTP layer answers with. Client errors say what was
//! wrong with the request; server errors say nothing internal. The full cause
//! chain is logged once, inside the request span.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::ingest;
use crate::providers::SignatureError;
use crate::{fetch, telemetry};

/// Seconds a provider is asked to wait before retrying after a 503.
pub const RETRY_AFTER_SECS: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unknown provider")]
    UnknownProvider,
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error("temporarily unavailable")]
    Unavailable(#[source] ingest::Error),
    #[error("temporarily unavailable")]
    FetchUnavailable(#[from] fetch::Unavailable),
    #[error("request timed out")]
    TimedOut,
    #[error("unexpected error")]
    Unexpected(#[source] anyhow::Error),
}

/// An event that was not applied: 503 when a retry can succeed (the
/// provider retries), else 500. Poison never gets here: ingest records it
/// `rejected`, unless recording it failed too.
impl From<ingest::Error> for ApiError {
    fn from(error: ingest::Error) -> Self {
        if error.is_transient() {
            ApiError::Unavailable(error)
        } else {
            ApiError::Unexpected(error.into())
        }
    }
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::UnknownProvider => StatusCode::NOT_FOUND,
            ApiError::Signature(SignatureError::KeyUnavailable) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Signature(_) => StatusCode::BAD_REQUEST,
            ApiError::Unavailable(_) | ApiError::FetchUnavailable(_) | ApiError::TimedOut => {
                StatusCode::SERVICE_UNAVAILABLE
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingest_errors_map_to_what_a_provider_should_do() {
        let status = |error: ingest::Error| ApiError::from(error).status();
        // Retried: the provider comes back later.
        assert_eq!(
            status(ingest::Error::ShuttingDown),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status(sqlx::Error::PoolTimedOut.into()),
            StatusCode::SERVICE_UNAVAILABLE
        );
        // A bug: retrying the same delivery would not help.
        assert_eq!(
            status(ingest::Error::Invariant("test")),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            status(sqlx::Error::RowNotFound.into()),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn a_signing_key_that_cannot_be_had_is_retried_and_a_bad_one_is_refused() {
        let status = |error: SignatureError| ApiError::from(error).status();
        assert_eq!(
            status(SignatureError::KeyUnavailable),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status(SignatureError::InvalidCertificate("expired")),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(status(SignatureError::Mismatch), StatusCode::BAD_REQUEST);
    }
}
