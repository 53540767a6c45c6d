//! An in-process fake of Razorpay's Fetch All Payments (`GET /v1/payments`),
//! Fetch All Refunds (`GET /v1/refunds`) and Fetch a Payment With ID
//! (`GET /v1/payments/:id`), with hooks to inject failures and to hold a
//! sweep half way.

use std::cmp::Reverse;
use std::collections::HashMap;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, routing::get};
use base64::{Engine, engine::general_purpose::STANDARD};
use serde_json::{Value, json};

use super::server::{Failure, FakeServer, Handle, parse_query, respond, with_retry_after};

/// A payment entity in INR, paid by UPI, with `notes` `{"user_id": user}`,
/// or `[]` (as Razorpay sends empty notes) when `user` is `None`.
pub fn payment(id: &str, amount: i64, status: &str, user: Option<&str>, created_at: i64) -> Value {
    let notes = user.map_or(json!([]), |user| json!({ "user_id": user }));
    let order = format!("order_{}", id.trim_start_matches("pay_"));
    json!({
        "id": id, "entity": "payment", "amount": amount, "currency": "INR", "status": status,
        "order_id": order, "method": "upi", "amount_refunded": 0, "refund_status": null,
        "captured": status == "captured", "notes": notes, "created_at": created_at,
    })
}

/// A processed refund entity in INR, with empty notes.
pub fn refund(id: &str, payment_id: &str, amount: i64, created_at: i64) -> Value {
    json!({
        "id": id, "entity": "refund", "amount": amount, "currency": "INR",
        "payment_id": payment_id, "notes": [], "status": "processed", "created_at": created_at,
    })
}

/// One answered request: its path, its percent-decoded query pairs in the
/// order sent, whether it carried Basic auth `key_id:key_secret`, and its
/// status.
#[derive(Clone, Debug)]
pub struct Request {
    pub path: String,
    pub query: Vec<(String, String)>,
    pub authorized: bool,
    pub status: u16,
}

/// The running fake. Scripted failures, pauses and the requests answered
/// are [`FakeServer`]'s: a failure answers the next request before any
/// other check, and a pause holds authorized, well-formed list requests
/// (of either list), which read the list when let go; fetching a payment
/// by id is not a page and is never held.
pub type FakeRazorpay = FakeServer<Razorpay, Request>;

type Fake = Handle<Razorpay, Request>;

const PAYMENTS: &str = "/v1/payments";
const REFUNDS: &str = "/v1/refunds";

/// Everything the fake knows of Razorpay.
#[derive(Default)]
pub struct Razorpay {
    key: (String, String),
    /// By list path, each newest first: `created_at` descending, then `id`.
    lists: HashMap<&'static str, Vec<Value>>,
}

impl FakeRazorpay {
    /// Starts serving `payments` and `refunds` (entities each with "id" and
    /// "created_at") to callers presenting Basic auth `key_id:key_secret`.
    pub async fn start(
        key_id: &str,
        key_secret: &str,
        payments: Vec<Value>,
        refunds: Vec<Value>,
    ) -> FakeRazorpay {
        let app = Router::new()
            .route(PAYMENTS, get(answer))
            .route(REFUNDS, get(answer))
            .route("/v1/payments/{id}", get(answer));
        let razorpay = Razorpay {
            key: (key_id.to_owned(), key_secret.to_owned()),
            ..Razorpay::default()
        };
        let fake = FakeServer::serve(razorpay, app).await;
        payments.into_iter().for_each(|p| fake.add_payment(p));
        refunds.into_iter().for_each(|r| fake.add_refund(r));
        fake
    }

    /// Adds a payment; the list is live, so the next page served may show it.
    pub fn add_payment(&self, payment: Value) {
        self.add(PAYMENTS, payment);
    }

    /// Adds a refund; the list is live, so the next page served may show it.
    pub fn add_refund(&self, refund: Value) {
        self.add(REFUNDS, refund);
    }

    fn add(&self, list: &'static str, entity: Value) {
        self.modify(|s| {
            let list = s.lists.entry(list).or_default();
            list.push(entity);
            list.sort_by_key(|e| Reverse((e["created_at"].as_i64(), e["id"].to_string())));
        });
    }
}

async fn answer(
    State(fake): State<Fake>,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let (path, query) = (uri.path(), parse_query(raw.as_deref().unwrap_or_default()));
    let auth = fake.read(|s| authenticate(&headers, s));
    let list = |path| fake.read(|s| s.lists.get(path).cloned().unwrap_or_default());
    let response = async {
        if let Some((status, retry_after)) = fake.next_failure() {
            return injected(status, retry_after, auth.err().unwrap_or(INVALID_KEY));
        }
        if let Err(description) = auth {
            return respond(error(401, "BAD_REQUEST_ERROR", description, None));
        }
        if let Some(id) = path.strip_prefix("/v1/payments/") {
            return fetch(id, &list(PAYMENTS));
        }
        if let Err(failure) = page(&query, &list(path)) {
            return respond(failure);
        }
        fake.admit().await;
        page(&query, &list(path)).map_or_else(respond, |page| Json(page).into_response())
    }
    .await;
    fake.record(Request {
        path: path.to_owned(),
        query,
        authorized: auth.is_ok(),
        status: response.status().as_u16(),
    });
    response
}

const NO_KEY: &str = "Please provide your api key for authentication purposes.";
const INVALID_KEY: &str = "The api key provided is invalid";
const INVALID_SECRET: &str = "The api secret provided is invalid";
const RATE_LIMITED: &str = "Request failed. Please try after sometime.";
const TROUBLE: &str =
    "We are facing some trouble completing your request at the moment. Please try again shortly.";

/// Checks `Authorization: Basic base64(key_id:key_secret)`, or gives the
/// description of the 401 Razorpay would answer.
fn authenticate(headers: &HeaderMap, s: &Razorpay) -> Result<(), &'static str> {
    let (key_id, secret) = &s.key;
    let header = headers.get(header::AUTHORIZATION).ok_or(NO_KEY)?;
    let token = header.to_str().ok().and_then(|v| v.strip_prefix("Basic "));
    let decoded = token.and_then(|t| String::from_utf8(STANDARD.decode(t).ok()?).ok());
    match decoded.as_deref().and_then(|d| d.split_once(':')) {
        Some(pair) if pair == (key_id.as_str(), secret.as_str()) => Ok(()),
        Some((id, _)) if id == key_id => Err(INVALID_SECRET),
        _ => Err(INVALID_KEY),
    }
}

/// The payment with `id`, or the 400 (never a 404) Razorpay answers instead.
fn fetch(id: &str, payments: &[Value]) -> Response {
    match payments.iter().find(|p| p["id"] == id) {
        Some(payment) => Json(payment).into_response(),
        None if !id.starts_with("pay_") => {
            respond(invalid(None, &format!("{id} is not a valid id")))
        }
        None => respond(invalid(None, "The id provided does not exist")),
    }
}

/// Each list parameter Razorpay accepts, with its allowed range.
const RULES: [(&str, i64, i64); 4] = [
    ("from", 946684800, 4765046400),
    ("to", 946684800, 4765046400),
    ("count", 1, 100),
    ("skip", 0, i64::MAX),
];

/// The page of `items` that `query` asks for, or the 400 Razorpay would
/// answer. As at Razorpay, an empty value counts as absent, the last of a
/// repeated key wins, and `from` and `to` both include their own second.
fn page(query: &[(String, String)], items: &[Value]) -> Result<Value, Failure> {
    if let Some((key, _)) = query.iter().find(|(k, _)| RULES.iter().all(|r| r.0 != k)) {
        let description = format!("{key} is/are not required and should not be sent");
        return Err(invalid(None, &description));
    }
    let mut values = [None; 4];
    for (value, &(name, min, max)) in values.iter_mut().zip(&RULES) {
        let Some((_, sent)) = query.iter().rev().find(|(k, v)| k == name && !v.is_empty()) else {
            continue;
        };
        let not_integer = || invalid(Some(name), &format!("The {name} must be an integer."));
        let n: i64 = sent.parse().map_err(|_| not_integer())?;
        if (min..=max).contains(&n) {
            *value = Some(n);
            continue;
        }
        let problem = match name {
            "from" | "to" => format!("{name} must be between {min} and {max}"),
            _ if n < min => format!("The {name} must be at least {min}."),
            _ => format!("The {name} may not be greater than {max}."),
        };
        return Err(invalid(Some(name), &problem));
    }
    let [from, to, count, skip] = values;
    let span = from.unwrap_or(i64::MIN)..=to.unwrap_or(i64::MAX);
    let within = |e: &&Value| span.contains(&e["created_at"].as_i64().unwrap_or_default());
    let chosen = items.iter().filter(within).skip(skip.unwrap_or(0) as usize);
    let items: Vec<_> = chosen.take(count.unwrap_or(10) as usize).collect();
    Ok(json!({ "entity": "collection", "count": items.len(), "items": items }))
}

/// Razorpay's error body: on a 400 blaming the input (and naming the `field`
/// at fault, if there is one), otherwise with source, step and reason "NA".
fn error(status: u16, code: &str, description: &str, field: Option<&str>) -> Failure {
    let input = ["business", "payment_initiation", "input_validation_failed"];
    let [source, step, reason] = if status == 400 { input } else { ["NA"; 3] };
    let mut error = json!({ "code": code, "description": description, "source": source,
                            "step": step, "reason": reason, "metadata": {} });
    if let Some(field) = field {
        error["field"] = field.into();
    }
    (status, json!({ "error": error }))
}

fn invalid(field: Option<&str>, description: &str) -> Failure {
    error(400, "BAD_REQUEST_ERROR", description, field)
}

/// An injected failure. Razorpay's public code for 429 (as for any 4xx) is
/// BAD_REQUEST_ERROR; for a 5xx this fake says SERVER_ERROR.
fn injected(status: u16, retry_after: Option<u64>, unauthorized: &str) -> Response {
    let (code, description) = match status {
        401 => ("BAD_REQUEST_ERROR", unauthorized),
        429 => ("BAD_REQUEST_ERROR", RATE_LIMITED),
        500.. => ("SERVER_ERROR", TROUBLE),
        _ => ("BAD_REQUEST_ERROR", "An injected failure."),
    };
    let response = respond(error(status, code, description, None));
    with_retry_after(response, retry_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AUTH: (&str, &str) = ("rzp_test_fake", "fake_secret");
    const T: i64 = 1_700_000_000;

    /// Status, `Retry-After` and body of a GET of `path` with Basic auth `id:secret`.
    async fn send(fake: &FakeRazorpay, path: &str, (id, secret): (&str, &str)) -> Reply {
        let request = reqwest::Client::new().get(format!("{}{path}", fake.base_url()));
        let response = request.basic_auth(id, Some(secret)).send().await.unwrap();
        let retry_after = response.headers().get(header::RETRY_AFTER);
        let retry_after = retry_after.map(|v| v.to_str().unwrap().to_owned());
        let status = response.status().as_u16();
        (status, retry_after, response.json().await.unwrap())
    }

    type Reply = (u16, Option<String>, Value);

    /// The ids on a 200 page, less their `pay_` or `rfnd_` prefix.
    async fn page_of(fake: &FakeRazorpay, path: &str) -> String {
        let (status, _, page) = send(fake, path, AUTH).await;
        assert_eq!(status, 200, "{page}");
        let items = page["items"].as_array().unwrap();
        assert_eq!(page["count"], items.len());
        let ids = items.iter().map(|e| e["id"].as_str().unwrap());
        let ids: Vec<_> = ids.map(|id| id.split_once('_').unwrap().1).collect();
        ids.join(",")
    }

    /// `"{status} {field, or -}: {description}"` of an error answer.
    async fn error_of(fake: &FakeRazorpay, path: &str, auth: (&str, &str)) -> String {
        let (status, _, body) = send(fake, path, auth).await;
        let (field, description) = (&body["error"]["field"], &body["error"]["description"]);
        let field = field.as_str().unwrap_or("-");
        format!("{status} {field}: {}", description.as_str().unwrap())
    }

    /// Payments listed newest first as d, e, c, b, a (c and b tie on
    /// `created_at`), and refunds y, x.
    async fn fake() -> FakeRazorpay {
        let payments = [("a", 0), ("b", 1), ("c", 1), ("d", 3), ("e", 2)];
        let captured = |(id, at)| payment(&format!("pay_{id}"), 500, "captured", Some("u"), T + at);
        let refunds = [("x", "pay_a", T + 5), ("y", "pay_b", T + 6)];
        let refunds = refunds.map(|(id, paid, at)| refund(&format!("rfnd_{id}"), paid, 100, at));
        let (payments, refunds) = (payments.map(captured).into(), refunds.into());
        FakeRazorpay::start(AUTH.0, AUTH.1, payments, refunds).await
    }

    #[tokio::test]
    async fn lists_run_newest_first_and_count_and_skip_walk_to_the_end() {
        let fake = fake().await;
        assert_eq!(page_of(&fake, "/v1/payments").await, "d,e,c,b,a");
        assert_eq!(page_of(&fake, "/v1/payments?count=2").await, "d,e");
        assert_eq!(page_of(&fake, "/v1/payments?count=2&skip=2").await, "c,b");
        assert_eq!(page_of(&fake, "/v1/payments?count=2&skip=4").await, "a");
        assert_eq!(page_of(&fake, "/v1/payments?count=2&skip=6").await, "");
        assert_eq!(page_of(&fake, "/v1/refunds?count=100").await, "y,x");
        let Request { path, query, .. } = &fake.requests()[2];
        assert_eq!((&path[..], &query[1].1[..]), ("/v1/payments", "2"));
    }

    #[tokio::test]
    async fn from_and_to_include_both_ends_and_arrive_percent_decoded() {
        let fake = fake().await;
        let query = format!("/v1/payments?%66rom={}&to={}", T + 1, T + 2);
        assert_eq!(page_of(&fake, &query).await, "e,c,b");
        let query = format!("/v1/payments?from={}&to=&count=1&skip=1", T + 2);
        assert_eq!(page_of(&fake, &query).await, "e", "an empty `to` is absent");
        let from = fake.requests()[0].query[0].clone();
        assert_eq!(from, ("from".into(), (T + 1).to_string()));
    }

    #[tokio::test]
    async fn errors_come_in_razorpays_shape_and_every_request_is_recorded() {
        let fake = fake().await;
        let bad = [
            "count=101 400 count: The count may not be greater than 100.",
            "count=0 400 count: The count must be at least 1.",
            "count=ten 400 count: The count must be an integer.",
            "skip=-1 400 skip: The skip must be at least 0.",
            "from=5 400 from: from must be between 946684800 and 4765046400",
            "colour=red 400 -: colour is/are not required and should not be sent",
        ];
        for (query, expected) in bad.map(|case| case.split_once(' ').unwrap()) {
            let answer = error_of(&fake, &format!("/v1/refunds?{query}"), AUTH).await;
            assert_eq!(answer, expected);
        }
        let other_key = error_of(&fake, "/v1/payments", ("rzp_test_other", AUTH.1)).await;
        assert_eq!(other_key, format!("401 -: {INVALID_KEY}"));
        let wrong_secret = error_of(&fake, "/v1/payments", (AUTH.0, "wrong")).await;
        assert_eq!(wrong_secret, format!("401 -: {INVALID_SECRET}"));
        let bare = reqwest::get(format!("{}/v1/payments", fake.base_url())).await;
        let body: Value = bare.unwrap().json().await.unwrap();
        assert_eq!(body["error"]["description"], NO_KEY);
        fake.fail_next(429, 2, Some(7));
        fake.fail_next(500, 1, None);
        let (status, retry_after, body) = send(&fake, "/v1/payments", AUTH).await;
        assert_eq!((status, retry_after.as_deref()), (429, Some("7")));
        assert_eq!(body["error"]["code"], "BAD_REQUEST_ERROR");
        assert_eq!(send(&fake, "/v1/payments", AUTH).await.0, 429);
        let (status, _, body) = send(&fake, "/v1/payments", AUTH).await;
        assert_eq!(status, 500);
        assert_eq!(body["error"]["code"], "SERVER_ERROR");
        assert_eq!(page_of(&fake, "/v1/payments?count=1").await, "d");
        let requests = fake.requests();
        let statuses: Vec<_> = requests.iter().map(|r| r.status).collect();
        assert_eq!(statuses[5..], [400, 401, 401, 401, 429, 429, 500, 200]);
        assert!(requests.iter().all(|r| r.authorized != (r.status == 401)));
    }

    #[tokio::test]
    async fn a_payment_fetched_by_id_comes_back_whole_or_as_razorpays_400() {
        let fake = fake().await;
        let (status, _, body) = send(&fake, "/v1/payments/pay_b", AUTH).await;
        let b = payment("pay_b", 500, "captured", Some("u"), T + 1);
        assert_eq!((status, body), (200, b));
        let (status, _, body) = send(&fake, "/v1/payments/pay_zzz", AUTH).await;
        let missing = invalid(None, "The id provided does not exist");
        assert_eq!((status, body), missing);
        let not_an_id = error_of(&fake, "/v1/payments/abc", AUTH).await;
        assert_eq!(not_an_id, "400 -: abc is not a valid id");
        assert_eq!(fake.requests()[1].path, "/v1/payments/pay_zzz");
        let failed = payment("pay_q", 1, "failed", None, T);
        assert_eq!(failed["notes"], json!([]));
        assert_eq!(failed["captured"], false);
    }

    #[tokio::test]
    async fn a_paused_fake_holds_list_requests_until_released_then_serves_the_live_list() {
        let fake = fake().await;
        fake.pause_after(1);
        assert_eq!(page_of(&fake, "/v1/payments?count=1").await, "d");
        let url = format!("{}/v1/payments?count=1", fake.base_url());
        let request = reqwest::Client::new().get(url);
        let held = tokio::spawn(request.basic_auth(AUTH.0, Some(AUTH.1)).send());
        fake.paused().await;
        let (status, _, _) = send(&fake, "/v1/payments/pay_a", AUTH).await;
        assert_eq!(status, 200, "fetching by id is never held");
        assert_eq!(fake.requests().len(), 2, "the held request is unanswered");
        fake.add_payment(payment("pay_f", 1, "captured", None, T + 9));
        fake.release();
        let page: Value = held.await.unwrap().unwrap().json().await.unwrap();
        assert_eq!(page["items"][0]["id"], "pay_f");
        assert_eq!(page_of(&fake, "/v1/refunds?count=1").await, "y");
    }
}
