//! `POST /webhooks/{provider}`: raw bytes in, verified, then ingested. A
//! provider without a configured secret is not mounted: 404, never accepted
//! unverified.

use std::time::Instant;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use bytes::Bytes;

use super::AppState;
use super::error::ApiError;
use crate::ingest::Receipt;

// `provider` is recorded only once it names a mounted provider: the path is
// attacker-controlled and never reaches a log line as is.
#[tracing::instrument(
    name = "webhook",
    skip_all,
    fields(provider, event_id, event_type, outcome)
)]
pub async fn receive(
    State(state): State<AppState>,
    Path(provider): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Receipt>, ApiError> {
    let started = Instant::now();
    let span = tracing::Span::current();
    let Some(verifier) = state.providers.get(&provider) else {
        return Err(ApiError::UnknownProvider);
    };
    span.record("provider", provider.as_str());
    let now = state.clock.now();
    let checked = match verifier.prepare(&headers, now).await {
        Ok(()) => verifier.verify(&headers, &body, now),
        Err(refusal) => Err(refusal),
    };
    let event = match checked {
        Ok(event) => event,
        Err(refusal) => {
            state.metrics.event(&provider, refusal.label());
            return Err(refusal.into());
        }
    };
    state.arrivals.note(&provider);
    span.record("event_id", event.event_id());
    span.record("event_type", event.event_type());
    state
        .metrics
        .secret_matched(&provider, event.secret_index());
    if let (Some(version), Some(receiver)) = (event.api_version(), event.receiver()) {
        let expected = receiver
            .api_version
            .as_ref()
            .map(|expected| expected == version);
        state.metrics.api_version(&provider, version, expected);
    }
    // What the API must add (a thin event's data, a tie's current
    // state), fetched before the transaction.
    let event = match &state.fetcher {
        Some(fetcher) => fetcher.complete(&state.pool, event).await?,
        None => event,
    };

    let receipt = state.ingestor.ingest(event).await?;
    let elapsed = started.elapsed();
    span.record("outcome", receipt.outcome.as_str());
    state.metrics.event(&provider, receipt.outcome.as_str());
    state.metrics.ingest_latency(&provider, elapsed);
    tracing::info!(
        latency_ms = elapsed.as_secs_f64() * 1000.0,
        "webhook {}",
        receipt.outcome.as_str()
    );
    Ok(Json(receipt))
}
