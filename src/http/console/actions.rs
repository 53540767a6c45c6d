//! What the console changes: log in and out, replay an event, retry
//! outbox rows. Each action runs the CLI's code, checks the form's CSRF
//! token, and is logged with who did it and to what.

use axum::Extension;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::auth::{Actor, COOKIE, Check};
use super::pages::OutboxQuery;
use super::views::{self, Login, page_with, query_value};
use super::{Console, cookie};
use crate::ingest::{self, ReplayRefused};
use crate::outbox::store::{self, browse};
use crate::telemetry::bounded;

/// Where a login (or an action's way back) may send the browser: a
/// console page, never elsewhere, and nothing a `Location` header cannot
/// hold (a control character made `Redirect::to` panic: a 500).
fn safe_next(next: &str) -> &str {
    let local = next.starts_with("/console")
        && !next.contains("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control);
    if local { next } else { "/console" }
}

#[derive(Debug, Default, Deserialize)]
pub struct NextQuery {
    #[serde(default)]
    next: String,
}

pub async fn login_form(Query(query): Query<NextQuery>) -> Response {
    page_with(
        StatusCode::OK,
        &Login {
            next: safe_next(&query.next),
            error: None,
        },
    )
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: String,
}

pub async fn log_in(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let next = safe_next(&form.next);
    match console.auth.check_token(form.token.trim()) {
        Check::Valid => {
            let (value, ttl) = console.auth.new_session();
            let actor = console.auth.session(&value).expect("a new session is live");
            tracing::info!(actor = %actor.describe(), "console: logged in");
            let secure = if behind_https(&headers) {
                "; Secure"
            } else {
                ""
            };
            let cookie = format!(
                "{COOKIE}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
                ttl.as_secs()
            );
            ([(header::SET_COOKIE, cookie)], Redirect::to(next)).into_response()
        }
        Check::Invalid => {
            tracing::warn!("console: a login with a wrong token was refused");
            page_with(
                StatusCode::UNAUTHORIZED,
                &Login {
                    next,
                    error: Some("That is not the admin token."),
                },
            )
        }
        Check::Limited(wait) => {
            tracing::warn!("console: a login was refused unchecked: too many wrong tokens lately");
            views::too_many_attempts(wait)
        }
    }
}

/// Whether the browser reached us over https (through a proxy that says
/// so): then the cookie is `Secure`.
fn behind_https(headers: &HeaderMap) -> bool {
    let says = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
    };
    says("x-forwarded-proto")
        || headers
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|o| o.starts_with("https://"))
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

fn forbidden() -> Response {
    page_with(
        StatusCode::FORBIDDEN,
        &views::Message {
            title: "Form expired",
            message: "This form's security token is missing or belongs to another session. Go back, reload the page and try again.",
        },
    )
}

pub async fn log_out(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if !console.auth.csrf_ok(&actor, &form.csrf) {
        return forbidden();
    }
    if let Some(value) = cookie(&headers) {
        console.auth.log_out(value);
    }
    tracing::info!(actor = %actor.describe(), "console: logged out");
    let clear = format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0");
    (
        [(header::SET_COOKIE, clear)],
        Redirect::to("/console/login"),
    )
        .into_response()
}

pub async fn replay(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
    Path((provider, event_id)): Path<(String, String)>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if !console.auth.csrf_ok(&actor, &form.csrf) {
        return forbidden();
    }
    let back = format!(
        "/console/events/{}/{}",
        query_value(&provider),
        query_value(&event_id)
    );
    match ingest::replay_stored(&console.app.pool, &provider, &event_id).await {
        Ok(Ok(done)) => {
            let outcome = done.replayed.applied.outcome.as_str();
            tracing::info!(
                actor = %actor.describe(),
                provider = %bounded(&provider),
                event_id = %bounded(&event_id),
                outcome,
                changed = done.replayed.recorded,
                "console: replayed an event"
            );
            Redirect::to(&format!(
                "{back}?replayed={outcome}&changed={}",
                done.replayed.recorded
            ))
            .into_response()
        }
        Ok(Err(ReplayRefused::NotFound)) => views::not_found("No such event is stored."),
        Ok(Err(refused)) => views::bad_request(&refused.to_string()),
        Err(error) => {
            tracing::warn!(%error, "console: a replay failed");
            if error.is_transient() {
                views::unavailable()
            } else {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the replay failed; see the log\n",
                )
                    .into_response()
            }
        }
    }
}

#[derive(Deserialize)]
pub struct RetryForm {
    #[serde(default)]
    csrf: String,
    /// Where to go back to: the outbox page's query, or an event's page.
    #[serde(default)]
    back: String,
}

pub async fn retry(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
    Path(id): Path<i64>,
    Form(form): Form<RetryForm>,
) -> Response {
    if !console.auth.csrf_ok(&actor, &form.csrf) {
        return forbidden();
    }
    let requeued = match store::retry_dead(&console.app.pool, Some(id)).await {
        Ok(requeued) => requeued,
        Err(error) => {
            tracing::warn!(%error, "console: a retry failed");
            return views::unavailable();
        }
    };
    tracing::info!(actor = %actor.describe(), id, requeued = requeued.len(), "console: retried an outbox row");
    let back = safe_next(&form.back);
    let sep = if back.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{back}{sep}retried={}", requeued.len())).into_response()
}

#[derive(Deserialize)]
pub struct BulkRetryForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    topic: String,
    #[serde(default)]
    error: String,
    /// The highest id the dry run counted: rows that died since are left.
    max_id: i64,
}

pub async fn bulk_retry(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
    Form(form): Form<BulkRetryForm>,
) -> Response {
    if !console.auth.csrf_ok(&actor, &form.csrf) {
        return forbidden();
    }
    let query = OutboxQuery {
        state: "dead".to_owned(),
        topic: form.topic,
        error: form.error,
        ..OutboxQuery::default()
    };
    let filter: browse::Filter = query.filter();
    let requeued =
        match browse::retry_dead_matching(&console.app.pool, &filter, None, form.max_id).await {
            Ok(requeued) => requeued,
            Err(error) => {
                tracing::warn!(%error, "console: a bulk retry failed");
                return views::unavailable();
            }
        };
    tracing::info!(
        actor = %actor.describe(),
        topic = %bounded(filter.topic.as_deref().unwrap_or("*")),
        error = %bounded(filter.error.as_deref().unwrap_or("*")),
        max_id = form.max_id,
        requeued = requeued.len(),
        "console: bulk-retried dead outbox rows"
    );
    Redirect::to(&format!(
        "/console/outbox?{}&retried={}",
        query.query(),
        requeued.len()
    ))
    .into_response()
}
