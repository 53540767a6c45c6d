//! An in-process fake of Stripe's `GET /v1/events` (List all events), with
//! hooks to inject failures and to hold a sweep half way; and of what a
//! thin event is fetched from: a payment intent by id, a v2 event by id
//! (`GET /v2/core/events/{id}`); of a subscription by id, which a tie
//! refreshes. A request with `Stripe-Account` lists that connected
//! account's events (those whose `account` it is, or that are listed
//! under it: `x_listed_under`, `null` for the platform's); one without,
//! the platform's own.

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, routing::get};
use serde_json::{Value, json};

use super::server::{Failure, FakeServer, Handle, parse_query, respond, with_retry_after};

/// A full Stripe event object, in the shape of `helpers::envelope`.
pub fn event(id: &str, event_type: &str, created: i64, object: Value) -> Value {
    json!({
        "id": id, "object": "event", "api_version": "2024-06-20", "created": created,
        "data": { "object": object }, "livemode": false, "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null }, "type": event_type,
    })
}

/// One answered request: its path, its percent-decoded query pairs in the
/// order sent, whether it carried `Authorization: Bearer <the key>`, its
/// `Stripe-Context` and `Stripe-Account`, and its status.
#[derive(Clone, Debug)]
pub struct Request {
    pub path: String,
    pub query: Vec<(String, String)>,
    pub authorized: bool,
    pub context: Option<String>,
    pub account: Option<String>,
    pub status: u16,
}

/// The running fake. Scripted failures, pauses and the requests answered
/// are [`FakeServer`]'s: a failure answers the next `/v1/events` request
/// before any other check, and a pause holds authorized, well-formed
/// requests for events, which read the list when let go.
pub type FakeStripe = FakeServer<Stripe, Request>;

type Fake = Handle<Stripe, Request>;

/// Everything the fake knows of Stripe.
#[derive(Default)]
pub struct Stripe {
    key: String,
    /// In list order: `created` descending, then `id` descending.
    events: Vec<Value>,
    /// Payment intents and refunds (`GET /v1/payment_intents`, `/v1/refunds`),
    /// in the same order.
    payment_intents: Vec<Value>,
    refunds: Vec<Value>,
    /// v2 events by id (`GET /v2/core/events/{id}`).
    v2_events: Vec<Value>,
    /// Subscriptions by id (`GET /v1/subscriptions/{id}`).
    subscriptions: Vec<Value>,
    /// The account's webhook endpoints (`GET /v1/webhook_endpoints`), in
    /// list order.
    webhook_endpoints: Vec<Value>,
    /// What is served for an id instead of its object: another object, a
    /// body over any bound, anything.
    instead: Vec<(String, String)>,
    /// How long a retrieval waits before it answers.
    slow: Option<std::time::Duration>,
}

impl FakeStripe {
    /// Starts serving `events` (full Stripe event objects, each with "id",
    /// "created" and "type") to callers presenting API key `key`.
    pub async fn start(key: &str, events: Vec<Value>) -> FakeStripe {
        let app = Router::new()
            .route("/v1/events", get(list_events))
            .route("/v1/payment_intents", get(list_payment_intents))
            .route("/v1/payment_intents/{id}", get(retrieve_payment_intent))
            .route("/v2/core/events/{id}", get(retrieve_v2_event))
            .route("/v1/subscriptions/{id}", get(retrieve_subscription))
            .route("/v1/refunds", get(list_refunds))
            .route("/v1/webhook_endpoints", get(list_webhook_endpoints));
        let stripe = Stripe {
            key: key.to_owned(),
            ..Stripe::default()
        };
        let fake = FakeServer::serve(stripe, app).await;
        events.into_iter().for_each(|event| fake.add(event));
        fake
    }

    /// Adds an event; the list is live, so the next page served may show it.
    pub fn add(&self, event: Value) {
        self.modify(|s| insert(&mut s.events, event));
    }

    /// Adds a payment intent (`GET /v1/payment_intents`, and by id).
    pub fn add_payment_intent(&self, intent: Value) {
        self.modify(|s| insert(&mut s.payment_intents, intent));
    }

    /// Adds a v2 event (`GET /v2/core/events/{id}`).
    pub fn add_v2_event(&self, event: Value) {
        self.modify(|s| s.v2_events.push(event));
    }

    /// Sets subscription `subscription` as `GET /v1/subscriptions/{id}`
    /// serves it (replacing the one of its id).
    pub fn set_subscription(&self, subscription: Value) {
        self.modify(|s| {
            s.subscriptions.retain(|o| o["id"] != subscription["id"]);
            s.subscriptions.push(subscription);
        });
    }

    /// Serves `body` (any text) when the object `id` is retrieved.
    pub fn serve_instead(&self, id: &str, body: String) {
        self.modify(|s| s.instead.push((id.to_owned(), body)));
    }

    /// Makes every retrieval wait `delay` before it answers.
    pub fn slow_retrievals(&self, delay: std::time::Duration) {
        self.modify(|s| s.slow = Some(delay));
    }

    /// The requests that retrieved one object (a payment intent, a v2
    /// event), in the order answered.
    pub fn retrievals(&self) -> Vec<Request> {
        let requests = self.requests().into_iter();
        requests.filter(|r| r.path != "/v1/events").collect()
    }

    /// Adds a webhook endpoint (`GET /v1/webhook_endpoints`).
    pub fn add_webhook_endpoint(&self, endpoint: Value) {
        self.modify(|s| insert(&mut s.webhook_endpoints, endpoint));
    }

    /// Adds a refund object (`GET /v1/refunds`).
    pub fn add_refund(&self, refund: Value) {
        self.modify(|s| insert(&mut s.refunds, refund));
    }
}

/// Inserts `object` in list order (`created`, then `id`, descending).
fn insert(list: &mut Vec<Value>, object: Value) {
    let order = |e: &Value| (e["created"].as_i64(), e["id"].as_str().map(str::to_owned));
    list.push(object);
    list.sort_by_key(|e| std::cmp::Reverse(order(e)));
}

async fn list_payment_intents(
    State(fake): State<Fake>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    list_objects(
        &fake,
        &headers,
        raw,
        |s| &s.payment_intents,
        "/v1/payment_intents",
    )
}

async fn list_refunds(
    State(fake): State<Fake>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    list_objects(&fake, &headers, raw, |s| &s.refunds, "/v1/refunds")
}

async fn list_webhook_endpoints(
    State(fake): State<Fake>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let path = "/v1/webhook_endpoints";
    let query = parse_query(raw.as_deref().unwrap_or_default());
    let serve = async {
        let page = fake.read(|s| page(&query, &s.webhook_endpoints));
        page.map_or_else(respond, |mut page| {
            page["url"] = json!(path);
            Json(page).into_response()
        })
    };
    answer(&fake, &headers, path.into(), query.clone(), serve).await
}

/// A webhook endpoint as Stripe's API describes one: `id`, pointed at
/// `url`, `status` `enabled` or `disabled`, subscribed to `events`, on
/// `api_version` (`None`: the account's default).
pub fn webhook_endpoint(
    id: &str,
    url: &str,
    status: &str,
    events: &[&str],
    api_version: Option<&str>,
) -> Value {
    json!({
        "id": id, "object": "webhook_endpoint", "api_version": api_version,
        "application": null, "created": 1_700_000_000, "description": null,
        "enabled_events": events, "livemode": false, "metadata": {},
        "status": status, "url": url,
    })
}

/// A list of other objects than events: the same paging, no types, no
/// injected failures or pauses.
fn list_objects(
    fake: &Fake,
    headers: &HeaderMap,
    raw: Option<String>,
    of: fn(&Stripe) -> &Vec<Value>,
    url: &str,
) -> Response {
    let key = bearer(headers);
    if !fake.read(|s| key == s.key) {
        return unauthorized(key);
    }
    let query = parse_query(raw.as_deref().unwrap_or_default());
    match fake.read(|s| page(&query, of(s))) {
        Ok(mut page) => {
            page["url"] = json!(url);
            Json(page).into_response()
        }
        Err(failure) => respond(failure),
    }
}

async fn retrieve_payment_intent(
    State(fake): State<Fake>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let path = format!("/v1/payment_intents/{id}");
    retrieve(
        &fake,
        &headers,
        path,
        &id,
        |s| &s.payment_intents,
        "payment_intent",
    )
    .await
}

async fn retrieve_subscription(
    State(fake): State<Fake>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let path = format!("/v1/subscriptions/{id}");
    retrieve(
        &fake,
        &headers,
        path,
        &id,
        |s| &s.subscriptions,
        "subscription",
    )
    .await
}

async fn retrieve_v2_event(
    State(fake): State<Fake>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let path = format!("/v2/core/events/{id}");
    retrieve(&fake, &headers, path, &id, |s| &s.v2_events, "event").await
}

/// One object by id, as Stripe serves it: an injected failure first, then
/// the key, then (after the delay of [`FakeStripe::slow_retrievals`]) the
/// object or a 404. Each request is recorded.
async fn retrieve(
    fake: &Fake,
    headers: &HeaderMap,
    path: String,
    id: &str,
    of: fn(&Stripe) -> &Vec<Value>,
    kind: &str,
) -> Response {
    let serve = async {
        if let Some(delay) = fake.read(|s| s.slow) {
            tokio::time::sleep(delay).await;
        }
        if let Some(body) = fake.read(|s| s.instead.iter().find(|(i, _)| i == id).cloned()) {
            let json = [(header::CONTENT_TYPE, "application/json")];
            return (json, body.1).into_response();
        }
        let found = fake.read(|s| of(s).iter().find(|o| o["id"] == id).cloned());
        match found {
            Some(object) => Json(object).into_response(),
            None => error(
                404,
                "invalid_request_error",
                &format!("No such {kind}: '{id}'"),
            ),
        }
    };
    answer(fake, headers, path, Vec::new(), serve).await
}

async fn list_events(
    State(fake): State<Fake>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let query = parse_query(raw.as_deref().unwrap_or_default());
    let account = headers.get("stripe-account").and_then(|v| v.to_str().ok());
    // The platform's events, or the connected account's.
    let listed = |s: &Stripe| -> Vec<Value> {
        // `x_listed_under` (never in Stripe's own answers) lists an event
        // under an account it does not name: a mistaken or hostile API.
        let whose = |e: &&Value| match e.get("x_listed_under") {
            Some(under) => under.as_str() == account,
            None => e["account"].as_str() == account,
        };
        s.events.iter().filter(whose).cloned().collect()
    };
    let serve = async {
        if let Err(failure) = fake.read(|s| page(&query, &listed(s))) {
            return respond(failure);
        }
        fake.admit().await;
        let page = fake.read(|s| page(&query, &listed(s)));
        page.map_or_else(respond, |page| Json(page).into_response())
    };
    answer(&fake, &headers, "/v1/events".into(), query.clone(), serve).await
}

/// Answers a request as Stripe does: an injected failure first, then the
/// key, then what `serve` answers; and records it.
async fn answer(
    fake: &Fake,
    headers: &HeaderMap,
    path: String,
    query: Vec<(String, String)>,
    serve: impl std::future::Future<Output = Response>,
) -> Response {
    let key = bearer(headers);
    let authorized = fake.read(|s| key == s.key);
    let response = match fake.next_failure() {
        Some((status, retry_after)) => injected(status, retry_after, key),
        None if !authorized => unauthorized(key),
        None => serve.await,
    };
    let header = |name: &str| {
        let value = headers.get(name).and_then(|v| v.to_str().ok());
        value.map(str::to_owned)
    };
    fake.record(Request {
        path,
        query,
        authorized,
        context: header("stripe-context"),
        account: header("stripe-account"),
        status: response.status().as_u16(),
    });
    response
}

/// The page of `events` that `query` asks for, or the 400 Stripe would answer.
fn page(query: &[(String, String)], events: &[Value]) -> Result<Value, Failure> {
    let (mut limit, mut start, mut kind, mut types) = (10, 0, None, vec![]);
    let mut chosen: Vec<(usize, &Value)> = events.iter().enumerate().collect();
    for (key, value) in query {
        let int = || value.parse().map_err(|_| invalid(key, "Invalid integer"));
        let mut created = |compare: fn(&i64, &i64) -> bool| {
            let at = int()?;
            chosen.retain(|(_, e)| compare(&e["created"].as_i64().unwrap_or_default(), &at));
            Ok::<_, Failure>(())
        };
        match key.as_str() {
            "limit" => match int()? {
                ..1 => return Err(invalid(key, "This value must be at least 1.")),
                101.. => return Err(invalid(key, "This value must be at most 100.")),
                n => limit = n as usize,
            },
            "starting_after" => {
                let at = events.iter().position(|e| e["id"] == value.as_str());
                let message = format!("No such event: '{value}'");
                start = 1 + at.ok_or_else(|| invalid(key, &message))?;
            }
            "type" => kind = Some(value.as_str()),
            "types[]" => types.push(value.as_str()),
            "created" => created(i64::eq)?,
            "created[gt]" => created(i64::gt)?,
            "created[gte]" => created(i64::ge)?,
            "created[lt]" => created(i64::lt)?,
            "created[lte]" => created(i64::le)?,
            "ending_before" => return Err(invalid(key, "This fake only pages forwards.")),
            _ => return Err(invalid(key, &format!("Received unknown parameter: {key}"))),
        }
    }
    if types.len() > 20 {
        return Err(invalid("types", "You may pass at most 20 types."));
    }
    let of_types = |e: &Value| types.is_empty() || types.iter().any(|t| e["type"] == *t);
    let of_kind = |e: &Value| kind.is_none_or(|kind| e["type"] == kind);
    let wanted = |(at, e): &(usize, &Value)| *at >= start && of_types(e) && of_kind(e);
    let mut chosen = chosen.into_iter().filter(wanted).map(|(_, e)| e);
    let data: Vec<_> = chosen.by_ref().take(limit).collect();
    let has_more = chosen.next().is_some();
    Ok(json!({ "object": "list", "url": "/v1/events", "has_more": has_more, "data": data }))
}

fn error(status: u16, kind: &str, message: &str) -> Response {
    let body = json!({ "error": { "type": kind, "message": message } });
    respond((status, body))
}

fn invalid(param: &str, message: &str) -> Failure {
    let error = json!({ "type": "invalid_request_error", "message": message, "param": param });
    (400, json!({ "error": error }))
}

/// The key of `Authorization: Bearer <key>`, or "".
fn bearer(headers: &HeaderMap) -> &str {
    let value = headers.get(header::AUTHORIZATION);
    value
        .and_then(|v| v.to_str().ok()?.strip_prefix("Bearer "))
        .unwrap_or_default()
}

/// Stripe's 401, which shows only the key's prefix and last four characters.
fn unauthorized(key: &str) -> Response {
    let prefix = key.rfind('_').map_or(0, |at| at + 1);
    let tail = &key[key.len().saturating_sub(4).max(prefix)..];
    let message = format!("Invalid API Key provided: {}****{tail}", &key[..prefix]);
    error(401, "invalid_request_error", &message)
}

fn injected(status: u16, retry_after: Option<u64>, key: &str) -> Response {
    let kind = match status {
        401 => return unauthorized(key),
        429 => "rate_limit_error",
        500.. => "api_error",
        _ => "invalid_request_error",
    };
    let response = error(status, kind, &format!("An injected {status}."));
    with_retry_after(response, retry_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk_test_fake_key";

    /// Status, `Retry-After` and body of a request for `query` with `key`.
    async fn send(fake: &FakeStripe, query: &str, key: &str) -> (u16, Option<String>, Value) {
        let url = format!("{}/v1/events?{query}", fake.base_url());
        let request = reqwest::Client::new().get(url).bearer_auth(key);
        let response = request.send().await.unwrap();
        let retry_after = response.headers().get(header::RETRY_AFTER);
        let retry_after = retry_after.map(|v| v.to_str().unwrap().to_owned());
        let status = response.status().as_u16();
        (status, retry_after, response.json().await.unwrap())
    }

    /// The ids on a 200 page, then "+" if it has more.
    async fn page_of(fake: &FakeStripe, query: &str) -> String {
        let (status, _, page) = send(fake, query, KEY).await;
        assert_eq!((status, &page["object"]), (200, &json!("list")), "{page}");
        let data = page["data"].as_array().unwrap().iter();
        let ids: Vec<_> = data.map(|e| e["id"].as_str().unwrap()).collect();
        let more = if page["has_more"] == true { "+" } else { "" };
        ids.join(",") + more
    }

    /// Listed newest first as d, e, c, b, a (c and b tie on `created`).
    async fn five_events() -> FakeStripe {
        let events = vec![
            event("a", "charge.refunded", 100, json!({})),
            event("b", "payment_intent.succeeded", 101, json!({})),
            event("c", "charge.succeeded", 101, json!({})),
            event("d", "payment_intent.succeeded", 103, json!({})),
            event("e", "charge.refunded", 102, json!({})),
        ];
        FakeStripe::start(KEY, events).await
    }

    #[tokio::test]
    async fn pages_run_newest_first_and_starting_after_walks_to_the_end() {
        let fake = five_events().await;
        assert_eq!(page_of(&fake, "").await, "d,e,c,b,a");
        assert_eq!(page_of(&fake, "limit=2").await, "d,e+");
        assert_eq!(page_of(&fake, "limit=2&starting_after=e").await, "c,b+");
        assert_eq!(page_of(&fake, "limit=2&starting_after=b").await, "a");
        let sent = &fake.requests()[2].query;
        assert_eq!(sent[1], ("starting_after".into(), "e".into()));
    }

    #[tokio::test]
    async fn percent_encoded_brackets_and_repeated_types_filter_the_list() {
        let fake = five_events().await;
        let query = "created%5Bgte%5D=101&created%5Blt%5D=103\
                     &types%5B%5D=charge.refunded&types[]=payment_intent.succeeded";
        assert_eq!(page_of(&fake, query).await, "e,b");
        let query = "type=charge.succeeded&created=101";
        assert_eq!(page_of(&fake, query).await, "c");
        let decoded = &fake.requests()[0].query;
        assert_eq!(decoded[2], ("types[]".into(), "charge.refunded".into()));
    }

    #[tokio::test]
    async fn errors_come_in_stripes_shape_and_every_request_is_recorded() {
        let fake = five_events().await;
        let types = vec!["types[]=x"; 21].join("&");
        let bad = "limit=0 limit=101 limit=ten created[gte]=soon starting_after=z ending_before=a";
        for query in bad.split(' ').chain([types.as_str(), "colour=red"]) {
            let (status, _, body) = send(&fake, query, KEY).await;
            let param = query.split_once('=').unwrap().0.trim_end_matches("[]");
            let error = (status, &body["error"]["type"], &body["error"]["param"]);
            let stripes = (400, &json!("invalid_request_error"), &json!(param));
            assert_eq!(error, stripes, "{query}");
        }
        let (status, _, body) = send(&fake, "", "sk_test_wrong1234").await;
        let message = "Invalid API Key provided: sk_test_****1234";
        assert_eq!((status, &body["error"]["message"]), (401, &json!(message)));
        fake.fail_next(429, 2, Some(7));
        fake.fail_next(500, 1, None);
        let (status, retry_after, body) = send(&fake, "", KEY).await;
        assert_eq!((status, retry_after.as_deref()), (429, Some("7")));
        assert_eq!(body["error"]["type"], "rate_limit_error");
        assert_eq!(send(&fake, "", KEY).await.0, 429);
        assert_eq!(send(&fake, "", KEY).await.2["error"]["type"], "api_error");
        assert_eq!(page_of(&fake, "limit=1").await, "d+");
        let requests = fake.requests();
        let statuses: Vec<_> = requests.iter().map(|r| r.status).collect();
        assert_eq!(statuses[8..], [401, 429, 429, 500, 200]);
        assert!(!requests[8].authorized && requests[9..].iter().all(|r| r.authorized));
    }

    #[tokio::test]
    async fn a_paused_fake_holds_requests_until_released_then_serves_the_live_list() {
        let fake = five_events().await;
        fake.pause_after(1);
        assert_eq!(page_of(&fake, "limit=1").await, "d+");
        let url = format!("{}/v1/events?limit=1", fake.base_url());
        let held = tokio::spawn(reqwest::Client::new().get(url).bearer_auth(KEY).send());
        fake.paused().await;
        assert_eq!(fake.requests().len(), 1, "the held request is unanswered");
        fake.add(event("f", "charge.refunded", 104, json!({})));
        fake.release();
        let page: Value = held.await.unwrap().unwrap().json().await.unwrap();
        assert_eq!(page["data"][0]["id"], "f");
        assert_eq!(page_of(&fake, "limit=1&starting_after=f").await, "d+");
    }
}
