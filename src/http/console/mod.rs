//! The console: server-rendered pages on the admin listener that answer
//! "what happened to X" — the overview, the events and each event's story,
//! a user's money, the outbox with retries, the deferred events, the
//! owners learned. Reads use the owner modules' queries (and `story`, as
//! `webhookd explain` does); actions run the CLI's code
//! (`ingest::replay_stored`, the outbox store's retries). Templates are
//! askama's, checked at compile time and escaped; the one script is a
//! small local file.

mod actions;
pub mod auth;
mod chart;
mod cookie;
mod pages;
mod shown;
mod throttle;
mod views;

use axum::Router;
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::AppState;
pub use auth::Auth;
use auth::{Actor, Check};
pub use pages::DayCounts;
use throttle::{Refusal, Scope};

/// A page's path parameters, by name: the admin router's own wildcard
/// (`/console/{*page}`) travels with them, so they are read by name, never
/// by position.
#[derive(Debug, serde::Deserialize)]
pub struct EventPath {
    pub provider: String,
    pub event_id: String,
}

#[derive(Debug, serde::Deserialize)]
pub struct UserPath {
    pub user_id: String,
}

/// The event a page or an action is about: named in the query string
/// (`?provider=…&id=…`, how the console links to it, whatever the id:
/// [`views::event_href`]) or in the path (`/console/events/{provider}/{event_id}`,
/// kept for addresses written before, where an id such as `..` cannot be).
#[derive(Debug)]
pub struct EventRef {
    pub provider: String,
    pub event_id: String,
}

#[derive(serde::Deserialize)]
struct EventQuery {
    provider: String,
    id: String,
}

impl<S: Send + Sync> FromRequestParts<S> for EventRef {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        if let Ok(Path(EventPath { provider, event_id })) =
            Path::from_request_parts(parts, state).await
        {
            return Ok(EventRef { provider, event_id });
        }
        match Query::<EventQuery>::from_request_parts(parts, state).await {
            Ok(Query(EventQuery { provider, id })) => Ok(EventRef {
                provider,
                event_id: id,
            }),
            Err(_) => Err(views::bad_request("Which event? Its address names none.")),
        }
    }
}

/// The user a page is about, named as an event is ([`EventRef`]):
/// `?id=…`, or in the path (`/console/users/{user_id}`).
#[derive(Debug)]
pub struct UserRef(pub String);

#[derive(serde::Deserialize)]
struct UserQuery {
    id: String,
}

impl<S: Send + Sync> FromRequestParts<S> for UserRef {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        if let Ok(Path(UserPath { user_id })) = Path::from_request_parts(parts, state).await {
            return Ok(UserRef(user_id));
        }
        match Query::<UserQuery>::from_request_parts(parts, state).await {
            Ok(Query(UserQuery { id })) => Ok(UserRef(id)),
            Err(_) => Err(views::bad_request("Which user? Its address names none.")),
        }
    }
}

#[derive(Debug, serde::Deserialize)]
pub struct RowPath {
    pub id: i64,
}

/// What the console's handlers share.
#[derive(Clone, Debug)]
pub struct Console {
    pub app: AppState,
    pub auth: Auth,
    /// What the doctor page runs: every check of this process's settings.
    pub doctor: Doctor,
    /// The overview's last day of counts, read at most once a minute.
    pub day: DayCounts,
}

/// The checks of the running process's settings, run anew at each call.
#[derive(Clone)]
pub struct Doctor(pub std::sync::Arc<dyn Fn() -> DoctorRun + Send + Sync>);

/// One run of the checks.
pub type DoctorRun = futures_util::future::BoxFuture<'static, Vec<crate::doctor::Check>>;

impl std::fmt::Debug for Doctor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Doctor")
    }
}

const CSP: &str = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");
/// The pages name their icon: without one, browsers ask for /favicon.ico,
/// which the admin listener does not serve.
const ICON: &str = include_str!("assets/favicon.svg");

/// The routes under `/console` (full paths: the admin router hands it
/// `/console` and everything below as they are).
pub fn router(console: Console) -> Router {
    for scope in [Scope::Client, Scope::Global] {
        // Counted from 0, so that an alert sees the first refusal.
        console
            .app
            .metrics
            .console_auth_throttled(scope.as_str(), 0);
    }
    let signed_in = Router::new()
        .route("/console", get(pages::overview))
        .route("/console/live", get(pages::overview_live))
        .route("/console/events", get(pages::events))
        .route("/console/event", get(pages::event))
        .route("/console/event/replay", post(actions::replay))
        .route("/console/event/payload", get(pages::payload))
        .route("/console/events/{provider}/{event_id}", get(pages::event))
        .route(
            "/console/events/{provider}/{event_id}/replay",
            post(actions::replay),
        )
        .route("/console/user", get(pages::user))
        .route("/console/users/{user_id}", get(pages::user))
        .route("/console/outbox", get(pages::outbox))
        .route(
            "/console/outbox/retry",
            get(pages::bulk_retry).post(actions::bulk_retry),
        )
        .route("/console/outbox/{id}/retry", post(actions::retry))
        .route("/console/deferred", get(pages::deferred))
        .route("/console/owners", get(pages::owners))
        .route("/console/doctor", get(pages::doctor))
        .route("/console/logout", post(actions::log_out))
        .route_layer(middleware::from_fn_with_state(
            console.clone(),
            signed_in_only,
        ));
    Router::new()
        .route(
            "/console/login",
            get(actions::login_form).post(actions::log_in),
        )
        .route(
            "/console/static/console.css",
            get(|| async { asset("text/css", CSS) }),
        )
        .route(
            "/console/static/console.js",
            get(|| async { asset("text/javascript", JS) }),
        )
        .route(
            "/console/static/favicon.svg",
            get(|| async { asset("image/svg+xml", ICON) }),
        )
        .merge(signed_in)
        .fallback(|| async { views::not_found("No such page.") })
        .layer(middleware::from_fn(same_site_posts_only))
        .layer(middleware::from_fn(security_headers))
        .with_state(console)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// Every console response: the CSP, no sniffing, no framing, no caching,
/// no referrer.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Lets a request through with its [`Actor`] when it carries a live
/// session cookie or the token (`Authorization: Bearer`). A session is
/// checked by its signature alone, before any bearer token, so the rate
/// limit never refuses it. Otherwise a browser's GET goes to the login
/// page and anything else gets 401; neither body holds any data. Another
/// scheme in `Authorization` (a proxy's Basic) is no credential.
async fn signed_in_only(
    State(console): State<Console>,
    mut request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let session = cookie::values(headers).find_map(|c| console.auth.session(c));
    let bearer = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or_default())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ').unwrap_or((v, ""));
            scheme.eq_ignore_ascii_case("bearer").then_some(token)
        });
    let actor = match (session, bearer) {
        (Some(actor), _) => actor,
        (None, Some(token)) => match console.auth.check_token(token.trim(), client(&request)) {
            Check::Valid => Actor::Bearer,
            Check::Invalid => {
                tracing::warn!("console: a request with a wrong bearer token was refused");
                return unauthorized();
            }
            Check::Limited(refusal) => return refused(&console, refusal),
        },
        (None, None) if request.method() == Method::GET => {
            let next = request
                .uri()
                .path_and_query()
                .map_or("/console", |p| p.as_str());
            let next = format!("/console/login?next={}", views::query_value(next));
            return Redirect::to(&next).into_response();
        }
        (None, None) => return unauthorized(),
    };
    request.extensions_mut().insert(actor);
    next.run(request).await
}

/// What a token refused unchecked answers (429 with `Retry-After`),
/// counted by the bucket that refused; an emptied bucket of all is logged
/// as an attack, once per its refill.
pub(super) fn refused(console: &Console, refusal: Refusal) -> Response {
    console
        .app
        .metrics
        .console_auth_throttled(refusal.scope.as_str(), 1);
    if let Some(refused) = refusal.report {
        tracing::warn!(
            refused,
            every_secs = throttle::report_every().as_secs(),
            "console: wrong tokens from many clients used up the attempts of all: every token presented is refused for now, the right one too (sessions already open keep working); a guessing attack?"
        );
    } else {
        tracing::debug!(
            scope = refusal.scope.as_str(),
            "console: a token was refused unchecked: too many wrong tokens lately"
        );
    }
    views::too_many_attempts(refusal.wait)
}

/// Who connected, when the accept loop said.
pub fn client(request: &Request) -> Option<std::net::IpAddr> {
    request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

/// Refuses a POST that a browser says came from another site (a form or a
/// `fetch` on some page the operator has open): it must not even spend
/// the operator's login attempts. Browsers send `Sec-Fetch-Site`; clients
/// that do not (curl, scripts) are left to the token and CSRF checks.
async fn same_site_posts_only(request: Request, next: Next) -> Response {
    let cross_site = request.method() == Method::POST
        && request
            .headers()
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|site| !matches!(site, "same-origin" | "none"));
    if cross_site {
        tracing::warn!("console: a cross-site form post was refused");
        return views::forbidden_cross_site();
    }
    next.run(request).await
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer realm=\"webhookd console\"")],
        "unauthorized: send Authorization: Bearer <WEBHOOKD_ADMIN_TOKEN>, or log in at /console/login\n",
    )
        .into_response()
}
