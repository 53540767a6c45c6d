//! Routes, middleware and status codes.

pub mod console;
pub mod error;
pub mod health;
pub mod metrics;
pub mod serve;
pub mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

use crate::clock::Clock;
use crate::ingest::Ingestor;
use crate::providers::Providers;
use crate::telemetry;
use error::ApiError;
use metrics::Metrics;

/// What every handler shares. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    pub pool: PgPool,
    /// Applies verified events (group commit for credits).
    pub ingestor: Ingestor,
    /// The mounted providers and sources, by name.
    pub providers: Providers,
    /// What completes deliveries from Stripe's API (`STRIPE_API_KEY` set).
    pub fetcher: Option<Arc<crate::fetch::Fetcher>>,
    pub clock: Clock,
    /// Cancelled when the process starts shutting down (`/readyz` turns 503).
    pub shutdown: CancellationToken,
    pub metrics: Arc<Metrics>,
    /// When each source's verified deliveries arrive (written by a task of
    /// the application's own).
    pub arrivals: Arc<crate::arrivals::Arrivals>,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
}

/// Headers whose values never reach a log line.
pub const SENSITIVE_HEADERS: [HeaderName; 9] = [
    header::AUTHORIZATION,
    header::COOKIE,
    HeaderName::from_static("stripe-signature"),
    HeaderName::from_static("x-razorpay-signature"),
    HeaderName::from_static("webhook-signature"),
    HeaderName::from_static("x-hub-signature"),
    HeaderName::from_static("x-hub-signature-256"),
    HeaderName::from_static("x-shopify-hmac-sha256"),
    HeaderName::from_static("svix-signature"),
];

/// The public listener. `webhooks: false` serves only health and metrics
/// (a worker process). It never serves the console.
pub fn router(state: AppState, limits: Limits, webhooks: bool) -> Router {
    let routes = if webhooks {
        Router::new().route("/webhooks/{provider}", post(webhooks::receive))
    } else {
        Router::new()
    };
    with_middleware(monitored(routes), state, limits)
}

/// The admin listener: health and metrics, and the console under
/// `/console` when it has a token (else 404 there, as for any path).
/// `doctor`: what the console's doctor page runs.
pub fn admin_router(
    state: AppState,
    limits: Limits,
    console: Option<console::Auth>,
    doctor: console::Doctor,
) -> Router {
    let mut routes = monitored(Router::new());
    if let Some(auth) = console {
        let console = console::Console {
            app: state.clone(),
            auth,
            doctor,
            day: console::DayCounts::default(),
        };
        let console = console::router(console);
        routes = routes
            .route_service("/console", console.clone())
            .route_service("/console/{*page}", console);
    }
    with_middleware(routes, state, limits)
}

/// Health and metrics beside `routes`, every route counted in `/metrics`.
fn monitored(routes: Router<AppState>) -> Router<AppState> {
    routes
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::metrics))
}

fn with_middleware(routes: Router<AppState>, state: AppState, limits: Limits) -> Router {
    let x_request_id = HeaderName::from_static("x-request-id");
    // Outermost first.
    let middleware = ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new(SENSITIVE_HEADERS))
        .layer(SetRequestIdLayer::new(
            x_request_id.clone(),
            MakeRequestUuid,
        ))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<_>| {
                // A client may send its own x-request-id: bounded like
                // every other field from the network.
                let request_id = request
                    .headers()
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                tracing::info_span!(
                    "request",
                    method = %telemetry::bounded(request.method().as_str()),
                    path = %telemetry::bounded(request.uri().path()),
                    request_id = %telemetry::bounded(request_id),
                )
            }),
        )
        .layer(PropagateRequestIdLayer::new(x_request_id))
        .layer(CatchPanicLayer::custom(|_| internal_error()))
        .layer(middleware::from_fn_with_state(
            limits.request_timeout,
            timeout,
        ))
        .layer(RequestBodyLimitLayer::new(limits.max_body_bytes));
    routes
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(DefaultBodyLimit::disable())
        .layer(middleware)
        .with_state(state)
}

/// Answers 503 (with Retry-After) when a request outlives its deadline. The
/// handler's future is dropped, so its transaction rolls back; a batched
/// credit is left out of its batch, which rolls back and runs again without
/// it if it had started (`ingest::batch`).
async fn timeout(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::TimedOut.into_response(),
    }
}

fn internal_error() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        axum::Json(json!({ "error": "internal error" })),
    )
        .into_response()
}
