//! The fake's List event notifications: PayPal's validation, pages newest
//! first, `next` links with a `next_page_token`.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Fake, Next, Paypal, header_of, injected, instant, oauth_error, record, rest_error};
use crate::fakes::server::parse_query;

pub(super) async fn list(
    State(fake): State<Fake>,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let query = parse_query(raw.as_deref().unwrap_or_default());
    let bearer = header_of(&headers, header::AUTHORIZATION).strip_prefix("Bearer ");
    let response = if let Some((status, retry_after)) = fake.next_failure() {
        injected(status, retry_after)
    } else {
        match fake.read(|shared| answer(shared, bearer, &query)) {
            Ok(page) => {
                let served = fake.admit().await;
                fake.modify(|shared| {
                    if shared.expire_at == Some(served) {
                        let tokens = std::mem::take(&mut shared.tokens);
                        shared.expired.extend(tokens);
                    }
                });
                Json(page).into_response()
            }
            Err(refusal) => *refusal,
        }
    };
    record(&fake, &uri, &headers, String::new(), &response);
    response
}

/// List webhooks: every webhook of the app, in one answer (PayPal does not
/// page it), to a holder of a token.
pub(super) async fn webhooks(State(fake): State<Fake>, uri: Uri, headers: HeaderMap) -> Response {
    let bearer = header_of(&headers, header::AUTHORIZATION).strip_prefix("Bearer ");
    let response = match fake.read(|shared| authorized(shared, bearer)) {
        Ok(()) => Json(json!({ "webhooks": fake.read(|s| s.webhooks.clone()) })).into_response(),
        Err(refusal) => *refusal,
    };
    record(&fake, &uri, &headers, String::new(), &response);
    response
}

/// The page for a request with `bearer`, or the refusal PayPal answers.
fn answer(
    shared: &Paypal,
    bearer: Option<&str>,
    query: &[(String, String)],
) -> Result<Value, Box<Response>> {
    authorized(shared, bearer)?;
    page(shared, query).map_err(|(field, value, issue)| {
        let detail = json!({ "field": field, "value": value, "location": "query", "issue": issue,
            "description": format!("{field} is not valid: {issue}") });
        Box::new(rest_error(
            400,
            "INVALID_REQUEST",
            "Request is not well-formed, syntactically incorrect, or violates schema.",
            Some(detail),
        ))
    })
}

/// Whether `bearer` is a token the fake issued and still honours, or the
/// refusal PayPal answers.
fn authorized(shared: &Paypal, bearer: Option<&str>) -> Result<(), Box<Response>> {
    if bearer.is_some_and(|t| shared.revoked || shared.expired.iter().any(|e| e == t)) {
        let expired = oauth_error(401, "invalid_token", "Access Token not found in cache");
        return Err(Box::new(expired));
    }
    if !bearer.is_some_and(|t| shared.tokens.iter().any(|e| e == t)) {
        return Err(Box::new(rest_error(
            401,
            "AUTHENTICATION_FAILURE",
            "Authentication failed due to invalid authentication credentials or a missing Authorization header.",
            None,
        )));
    }
    Ok(())
}

/// A query field that PayPal would refuse: `(field, value, issue)`.
type Invalid = (String, String, &'static str);

/// The page `query` asks for, or why PayPal would refuse it.
fn page(shared: &Paypal, query: &[(String, String)]) -> Result<Value, Invalid> {
    let invalid = |k: &str, v: &str, issue| (k.to_owned(), v.to_owned(), issue);
    let (mut size, mut start, mut end, mut after, mut kind) = (10, None, None, None, None);
    for (key, value) in query {
        let at = || {
            humantime::parse_rfc3339(value)
                .map_err(|_| invalid(key, value, "INVALID_PARAMETER_SYNTAX"))
        };
        match key.as_str() {
            // PayPal documents no maximum; this fake refuses past 300.
            "page_size" => match value.parse::<usize>() {
                Ok(n @ 1..=300) => size = n,
                Ok(_) => return Err(invalid(key, value, "INVALID_PARAMETER_VALUE")),
                Err(_) => return Err(invalid(key, value, "INVALID_PARAMETER_SYNTAX")),
            },
            "start_time" => start = Some(at()?),
            "end_time" => end = Some(at()?),
            "event_type" => kind = Some(value.clone()),
            "next_page_token" => {
                let id = hex::decode(value)
                    .ok()
                    .and_then(|id| String::from_utf8(id).ok());
                let at =
                    id.and_then(|id| shared.events.iter().position(|e| e["id"] == id.as_str()));
                after = Some(at.ok_or_else(|| invalid(key, value, "INVALID_PARAMETER_VALUE"))?);
            }
            _ => return Err(invalid(key, value, "UNSUPPORTED_PARAMETER")),
        }
    }
    match (start, end) {
        (Some(start), Some(end)) if start >= end => {
            return Err(invalid(
                "start_time",
                "",
                "START_TIME_MUST_BE_BEFORE_END_TIME",
            ));
        }
        (Some(_), None) => return Err(invalid("end_time", "", "MISSING_REQUIRED_PARAMETER")),
        (None, Some(_)) => return Err(invalid("start_time", "", "MISSING_REQUIRED_PARAMETER")),
        _ => {}
    }
    let wanted = |(at, e): &(usize, &Value)| {
        let time = instant(&e["create_time"]);
        after.is_none_or(|after| *at > after)
            && start.is_none_or(|start| time >= Some(start))
            && end.is_none_or(|end| time.is_some_and(|t| t <= end))
            && kind
                .as_ref()
                .is_none_or(|kind| e["event_type"] == kind.as_str())
    };
    let mut chosen = shared.events.iter().enumerate().filter(wanted);
    let events: Vec<&Value> = chosen.by_ref().take(size).map(|(_, e)| e).collect();
    let mut links = vec![link(shared, query, None, "self")];
    if chosen.next().is_some() {
        let last = events
            .last()
            .and_then(|e| e["id"].as_str())
            .unwrap_or_default();
        links.push(link(shared, query, Some(hex::encode(last)), "next"));
    }
    Ok(json!({ "events": events, "count": events.len(), "links": links }))
}

/// A link to the listing with `query`, paged on by `token`.
fn link(shared: &Paypal, query: &[(String, String)], token: Option<String>, rel: &str) -> Value {
    let mut pairs: Vec<(String, String)> = query.to_vec();
    let (base, token) = match (&shared.next, rel) {
        (Next::On(base), "next") => (base.clone(), token),
        (Next::Stale, "next") => (shared.base.clone(), None),
        _ => (shared.base.clone(), token),
    };
    if let Some(token) = token {
        pairs.retain(|(k, _)| k != "next_page_token");
        pairs.push(("next_page_token".into(), token));
    }
    let mut href =
        reqwest::Url::parse(&format!("{base}/v1/notifications/webhooks-events")).unwrap();
    href.query_pairs_mut().extend_pairs(pairs);
    json!({ "href": href.as_str(), "rel": rel, "method": "GET" })
}
