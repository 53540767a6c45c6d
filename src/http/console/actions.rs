//! What the console changes: log in and out, replay an event, retry
//! outbox rows. Each action runs the CLI's code, checks the form's CSRF
//! token, and is logged with who did it and to what.

use std::net::SocketAddr;

use axum::Extension;
use axum::extract::{ConnectInfo, Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::auth::{Actor, Check};
use super::pages::OutboxQuery;
use super::views::{self, Login, page_with};
use super::{Console, EventRef, RowPath, cookie, refused};
use crate::ingest::{self, ReplayRefused};
use crate::outbox::{self, browse};
use crate::telemetry::bounded;

/// Where a login (or an action) may send the browser: a console page,
/// never elsewhere, and only as printable ASCII (a `Location` header).
fn safe_next(next: &str) -> &str {
    let local = next.starts_with("/console")
        && !next.contains("//")
        && !next.contains('\\')
        && next.bytes().all(|b| b.is_ascii_graphic());
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
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let next = safe_next(&form.next);
    let client = peer.map(|Extension(ConnectInfo(peer))| peer.ip());
    match console.auth.check_token(form.token.trim(), client) {
        Check::Valid => {
            let (value, ttl, actor) = console.auth.new_session();
            tracing::info!(actor = %actor.describe(), "console: logged in");
            let set = cookie::issue(&value, ttl, cookie::behind_https(&headers));
            ([(header::SET_COOKIE, set)], Redirect::to(next)).into_response()
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
        Check::Limited(refusal) => refused(&console, refusal),
    }
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

fn forbidden() -> Response {
    tracing::warn!("console: a form without its session's CSRF token was refused");
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
    for value in cookie::values(&headers) {
        console.auth.log_out(value);
    }
    tracing::info!(actor = %actor.describe(), "console: logged out");
    let cleared = cookie::clear(cookie::behind_https(&headers))
        .into_iter()
        .map(|set| (header::SET_COOKIE, set));
    (AppendHeaders(cleared), Redirect::to("/console/login")).into_response()
}

pub async fn replay(
    State(console): State<Console>,
    Extension(actor): Extension<Actor>,
    EventRef { provider, event_id }: EventRef,
    Form(form): Form<CsrfForm>,
) -> Response {
    if !console.auth.csrf_ok(&actor, &form.csrf) {
        return forbidden();
    }
    let back = views::event_href(&provider, &event_id);
    match ingest::replay_stored(
        &console.app.pool,
        &console.app.providers,
        console.app.fetcher.as_deref(),
        &provider,
        &event_id,
    )
    .await
    {
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
                "{back}&replayed={outcome}&changed={}",
                done.replayed.recorded
            ))
            .into_response()
        }
        Ok(Err(ReplayRefused::NotFound)) => views::not_found("No such event is stored."),
        Ok(Err(refused)) => views::bad_request(&refused.to_string()),
        Err(ingest::Error::Database(error)) => views::database_failed(&error),
        Err(error) if error.is_transient() => views::unavailable(),
        Err(error) => {
            tracing::warn!(%error, "console: a replay failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the replay failed; see the log\n",
            )
                .into_response()
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
    Path(RowPath { id }): Path<RowPath>,
    Form(form): Form<RetryForm>,
) -> Response {
    if !console.auth.csrf_ok(&actor, &form.csrf) {
        return forbidden();
    }
    let requeued = match outbox::retry_dead(&console.app.pool, Some(id)).await {
        Ok(requeued) => requeued,
        Err(error) => return views::database_failed(&error),
    };
    tracing::info!(actor = %actor.describe(), id, requeued = requeued.len(), "console: retried an outbox row");
    // The way back, without a fragment (the notice goes in its query).
    let back = safe_next(form.back.split('#').next().unwrap_or_default());
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
    sink: String,
    #[serde(default)]
    error: String,
    /// The highest id the dry run counted, and when it counted: rows that
    /// died since are left.
    max_id: i64,
    #[serde(default)]
    as_of: String,
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
        sink: form.sink,
        error: form.error,
        ..OutboxQuery::default()
    };
    let filter: browse::Filter = query.filter();
    let bound = browse::Bound {
        id: None,
        max_id: Some(form.max_id),
        dead_by: Some(form.as_of.as_str()).filter(|t| !t.is_empty()),
    };
    let requeued = match browse::retry_dead_matching(&console.app.pool, &filter, &bound).await {
        Ok(requeued) => requeued,
        Err(error) => return views::database_failed(&error),
    };
    tracing::info!(
        actor = %actor.describe(),
        topic = %bounded(filter.topic.as_deref().unwrap_or("*")),
        sink = %bounded(filter.sink.as_deref().unwrap_or("*")),
        error = %bounded(filter.error.as_deref().unwrap_or("*")),
        max_id = form.max_id,
        as_of = %bounded(&form.as_of),
        requeued = requeued.len(),
        ids = ?&requeued[..requeued.len().min(100)],
        "console: bulk-retried dead outbox rows"
    );
    Redirect::to(&format!(
        "/console/outbox?{}&retried={}",
        query.query(),
        requeued.len()
    ))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn only_console_pages_are_followed() {
        assert_eq!(
            safe_next("/console/events?q=evt_1"),
            "/console/events?q=evt_1"
        );
        for elsewhere in [
            "//evil.example",
            "https://evil.example/console",
            "/console//evil.example",
            "/console\\evil",
            "/console\r\nSet-Cookie: x=1",
            "/console/é",
            "",
        ] {
            assert_eq!(safe_next(elsewhere), "/console", "{elsewhere:?}");
        }
    }
}
