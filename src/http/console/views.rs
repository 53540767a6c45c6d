//! The pages' templates (askama, under `templates/console/`, escaped for
//! HTML) and what each shows.

use std::time::Duration;

use askama::Template;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::Console;
use super::auth::Actor;
use super::shown;
use crate::events;
use crate::ledger::EntryRow;
use crate::outbox::Listed;
use crate::{owners, subscriptions};

/// Characters left as they are in a query value.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `value` percent-encoded for a query string or a path segment.
pub fn query_value(value: &str) -> String {
    utf8_percent_encode(value, QUERY_VALUE).to_string()
}

/// The address of an event's page. The event is named in the query
/// string, never in the path: browsers and proxies resolve `.` and `..`
/// path segments (even written `%2E%2E`) and some decode `%2F`, so an id
/// such as `..` or `a/b` would open another page. A query string is
/// passed on as it is.
pub fn event_href(provider: impl AsRef<str>, event_id: impl AsRef<str>) -> String {
    format!("/console/event?{}", event_query(provider, event_id))
}

/// `provider=…&id=…`: what names an event in the console's addresses
/// (its page, its replay, its payload's download).
pub fn event_query(provider: impl AsRef<str>, event_id: impl AsRef<str>) -> String {
    format!(
        "provider={}&id={}",
        query_value(provider.as_ref()),
        query_value(event_id.as_ref())
    )
}

/// The address of a user's page, the user named as an event is
/// ([`event_href`]).
pub fn user_href(user_id: impl AsRef<str>) -> String {
    format!("/console/user?id={}", query_value(user_id.as_ref()))
}

/// What every signed-in page has around it.
pub struct Chrome {
    /// Which navigation entry is current.
    pub nav: &'static str,
    /// The CSRF token of this page's forms.
    pub csrf: String,
    /// What the search box holds.
    pub search: String,
    pub actor: String,
}

impl Chrome {
    pub fn new(console: &Console, actor: &Actor, nav: &'static str) -> Self {
        Chrome {
            nav,
            csrf: console.auth.csrf_token(actor),
            search: String::new(),
            actor: actor.describe(),
        }
    }
}

/// A rendered page, or 500 if a template failed (it never should).
pub fn page(template: &impl Template) -> Response {
    page_with(StatusCode::OK, template)
}

/// Rendered within [`shown::MAX_PAGE_BYTES`]: a page that would take
/// more (what some table holds is far larger than what webhookd writes) is
/// refused rather than held in memory.
pub fn page_with(status: StatusCode, template: &impl Template) -> Response {
    let mut page = shown::Page::default();
    match template.render_into(&mut page) {
        Ok(()) => (status, Html(page.text)).into_response(),
        Err(_) if page.over => {
            tracing::warn!(
                max_bytes = shown::MAX_PAGE_BYTES,
                "a console page was refused: it would be larger than its bound"
            );
            page_with(
                StatusCode::INTERNAL_SERVER_ERROR,
                &Message {
                    title: "Too large to show",
                    message: "This page would be larger than 8 MiB: something stored is unusually large. webhookd explain prints it in a terminal.",
                },
            )
        }
        Err(error) => {
            tracing::error!(%error, "a console template failed to render");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response()
        }
    }
}

#[derive(Template)]
#[template(path = "console/message.html")]
pub struct Message<'a> {
    pub title: &'a str,
    pub message: &'a str,
}

pub fn not_found(message: &str) -> Response {
    page_with(
        StatusCode::NOT_FOUND,
        &Message {
            title: "Not found",
            message,
        },
    )
}

pub fn bad_request(message: &str) -> Response {
    page_with(
        StatusCode::BAD_REQUEST,
        &Message {
            title: "Bad request",
            message,
        },
    )
}

/// What a failed statement answers: 400 when the database refused the
/// input itself (a data exception: a NUL byte, a time that is no time),
/// 503 when a query ran too long (narrow the filter), else 503 (the
/// database is unavailable).
pub fn database_failed(error: &sqlx::Error) -> Response {
    let code = error
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned());
    match code.as_deref() {
        Some(code) if code.starts_with("22") => bad_request(
            "The database cannot read that input (a character or a time it does not take).",
        ),
        Some("57014") => {
            let mut response = page_with(
                StatusCode::SERVICE_UNAVAILABLE,
                &Message {
                    title: "Too slow",
                    message: "The query ran past its time limit. Narrow it: add a time range or another filter.",
                },
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
            response
        }
        _ => {
            tracing::warn!(%error, "a console statement failed");
            unavailable()
        }
    }
}

pub fn unavailable() -> Response {
    let mut response = page_with(
        StatusCode::SERVICE_UNAVAILABLE,
        &Message {
            title: "Database unavailable",
            message: "The database did not answer. Try again in a moment.",
        },
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
    response
}

pub fn forbidden_cross_site() -> Response {
    page_with(
        StatusCode::FORBIDDEN,
        &Message {
            title: "Refused",
            message: "This form was sent from another site. Use the console's own pages.",
        },
    )
}

pub fn too_many_attempts(wait: Duration) -> Response {
    let mut response = page_with(
        StatusCode::TOO_MANY_REQUESTS,
        &Message {
            title: "Too many attempts",
            message: "Too many wrong tokens lately. Wait a little and try again.",
        },
    );
    if let Ok(value) = header::HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

#[derive(Template)]
#[template(path = "console/login.html")]
pub struct Login<'a> {
    pub next: &'a str,
    pub error: Option<&'a str>,
}

/// One provider's sweep, as the overview shows it.
pub struct SweepView {
    pub provider: String,
    pub last_run_at: String,
    pub last_success_at: String,
    pub result: String,
    pub failed: bool,
}

#[derive(Template)]
#[template(path = "console/overview.html")]
pub struct Overview {
    pub chrome: Chrome,
    pub live: Live,
}

/// The part of the overview that refreshes itself.
#[derive(Template)]
#[template(path = "console/live.html")]
pub struct Live {
    pub as_of: String,
    pub outbox: Option<crate::outbox::Depth>,
    pub deferred: Option<(i64, f64)>,
    pub p50_ms: Option<String>,
    pub p99_ms: Option<String>,
    pub timed: u64,
    pub batches: u64,
    pub mean_batch: String,
    pub fallbacks: u64,
    /// `None` when they cannot be read.
    pub sweeps: Option<Vec<SweepView>>,
    /// The last hour's and the last day's; `None` when unreadable.
    pub charts: Vec<Option<super::chart::Chart>>,
    /// The Stripe API versions this process received, by source.
    pub api_versions: Vec<crate::http::metrics::VersionCount>,
}

/// The events page's filter, as its form shows it.
#[derive(Default)]
pub struct EventFilterView {
    pub provider: String,
    pub event_type: String,
    pub outcome: String,
    pub via: String,
    pub from: String,
    pub to: String,
    pub q: String,
}

#[derive(Template)]
#[template(path = "console/events.html")]
pub struct Events {
    pub chrome: Chrome,
    pub filter: EventFilterView,
    pub providers: Vec<String>,
    pub outcomes: &'static [events::Outcome],
    pub vias: &'static [&'static str],
    pub rows: Vec<events::Row>,
    /// The older page's address, when there may be one.
    pub older: Option<String>,
    pub first_page: bool,
}

/// A ledger entry, with its amount as people read it.
pub struct EntryView {
    pub entry: EntryRow,
    pub amount: String,
}

impl From<EntryRow> for EntryView {
    fn from(entry: EntryRow) -> Self {
        let amount = crate::money::decimal(entry.amount_minor, &entry.currency);
        EntryView { entry, amount }
    }
}

/// A payment row, with its amounts as people read them.
pub struct PaymentView {
    pub payment: crate::payments::Row,
    pub amount: String,
    pub refunded: String,
}

impl From<crate::payments::Row> for PaymentView {
    fn from(payment: crate::payments::Row) -> Self {
        let amount = crate::money::decimal(payment.amount_minor, &payment.currency);
        let refunded = crate::money::decimal(payment.refunded_minor, &payment.currency);
        PaymentView {
            payment,
            amount,
            refunded,
        }
    }
}

#[derive(Template)]
#[template(path = "console/event.html")]
pub struct EventPage {
    pub chrome: Chrome,
    pub stored: events::Preview,
    /// The API version its source expects, when it names one.
    pub expected_api_version: Option<String>,
    pub payload: super::shown::Json,
    pub detail: super::shown::Json,
    pub entries: Vec<EntryView>,
    pub payments: Vec<PaymentView>,
    pub subscriptions: Vec<subscriptions::Row>,
    pub outbox: Vec<Listed>,
    /// The failed attempts of those rows.
    pub attempts: Vec<crate::outbox::browse::FailedAttempt>,
    pub story: Vec<(String, String)>,
    /// The story's lines left out.
    pub story_more: usize,
    pub notice: Option<String>,
    pub can_replay: bool,
}

#[derive(Template)]
#[template(path = "console/user.html")]
pub struct UserPage {
    pub chrome: Chrome,
    pub user_id: String,
    /// (currency, balance as people read it, updated at)
    pub wallets: Vec<(String, String, String)>,
    pub entries: Vec<EntryView>,
    pub payments: Vec<PaymentView>,
    pub subscriptions: Vec<subscriptions::Row>,
    /// The customers and payments learned as this user's.
    pub owners: Vec<owners::Owner>,
}

#[derive(Template)]
#[template(path = "console/doctor.html")]
pub struct DoctorPage {
    pub chrome: Chrome,
    /// Every check, in `webhookd doctor`'s order.
    pub checks: Vec<crate::doctor::Check>,
    /// How many of each status.
    pub counts: [(&'static str, usize); 3],
}

#[derive(Template)]
#[template(path = "console/owners.html")]
pub struct OwnersPage {
    pub chrome: Chrome,
    /// The owners another user claimed too, most recently learned first.
    pub conflicted: Vec<owners::Owner>,
    /// The owners learned most recently.
    pub recent: Vec<owners::Owner>,
    /// How many of each the page lists at most.
    pub rows: i64,
}

impl OwnersPage {
    /// Each list with its title, what it says when empty, and whether it
    /// may hold more than it shows.
    pub fn sections(&self) -> [(&'static str, &'static str, &[owners::Owner], bool); 2] {
        let full =
            |list: &[owners::Owner]| i64::try_from(list.len()).unwrap_or(i64::MAX) >= self.rows;
        [
            (
                "Conflicting claims",
                "No conflicting claim.",
                &self.conflicted,
                full(&self.conflicted),
            ),
            (
                "Learned most recently",
                "No owner learned yet.",
                &self.recent,
                full(&self.recent),
            ),
        ]
    }
}

#[derive(Template)]
#[template(path = "console/outbox.html")]
pub struct OutboxPage {
    pub chrome: Chrome,
    pub state: String,
    pub topic: String,
    pub sink: String,
    pub error: String,
    pub rows: Vec<Listed>,
    pub later: Option<String>,
    pub first_page: bool,
    pub depth: crate::outbox::Depth,
    /// Each sink's rows waiting and dead.
    pub sinks: Vec<(String, crate::outbox::Depth)>,
    pub notice: Option<String>,
    /// This filter's query string, for the bulk retry and the way back.
    pub query: String,
}

#[derive(Template)]
#[template(path = "console/bulk_retry.html")]
pub struct BulkRetry {
    pub chrome: Chrome,
    pub topic: String,
    pub sink: String,
    pub error: String,
    pub count: i64,
    pub max_id: i64,
    pub as_of: String,
    pub query: String,
}

#[derive(Template)]
#[template(path = "console/deferred.html")]
pub struct DeferredPage {
    pub chrome: Chrome,
    pub rows: Vec<DeferredRow>,
    pub count: i64,
    pub oldest: String,
    /// Those of them waiting for an owner, and the oldest one's age.
    pub owner_count: i64,
    pub owner_oldest: String,
}

/// A waiting event, with the subject whose owner it waits for when it
/// waits for one (`payment`, `pi_…`).
pub struct DeferredRow {
    pub row: events::Deferred,
    pub owner_of: Option<(&'static str, String)>,
}

impl From<events::Deferred> for DeferredRow {
    fn from(row: events::Deferred) -> Self {
        let owner_of = owners::waited_for(&row.waits_for)
            .map(|(subject, id)| (subject.as_str(), id.to_owned()));
        DeferredRow { row, owner_of }
    }
}

/// Seconds as people read an age ([`crate::clock::spoken`]): `42 s`,
/// `7 min`, `3 h 5 min`, `2 days 4 h`.
pub fn age(secs: impl std::borrow::Borrow<f64>) -> String {
    let secs = secs.borrow().max(0.0).round();
    let age = std::time::Duration::try_from_secs_f64(secs).unwrap_or_default();
    crate::clock::spoken(age)
}
