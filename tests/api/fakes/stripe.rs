//! An in-process fake of Stripe's `GET /v1/events` (List all events), with
//! hooks to inject failures and to hold a sweep half way.

use std::{collections::VecDeque, net::SocketAddr, sync::Arc};

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, routing::get};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A full Stripe event object, in the shape of `helpers::envelope`.
pub fn event(id: &str, event_type: &str, created: i64, object: Value) -> Value {
    json!({
        "id": id, "object": "event", "api_version": "2024-06-20", "created": created,
        "data": { "object": object }, "livemode": false, "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null }, "type": event_type,
    })
}

/// One answered request: its percent-decoded query pairs in the order sent,
/// whether it carried `Authorization: Bearer <the key>`, and its status.
#[derive(Clone, Debug)]
pub struct Request {
    pub query: Vec<(String, String)>,
    pub authorized: bool,
    pub status: u16,
}

/// The running fake; its server stops when this is dropped.
pub struct FakeStripe {
    address: SocketAddr,
    state: Arc<watch::Sender<Shared>>,
    shutdown: CancellationToken,
}

/// Everything the fake knows, in a watch channel so held requests can wait.
#[derive(Default)]
struct Shared {
    key: String,
    /// In list order: `created` descending, then `id` descending.
    events: Vec<Value>,
    /// Payment intents and refunds (`GET /v1/payment_intents`, `/v1/refunds`),
    /// in the same order.
    payment_intents: Vec<Value>,
    refunds: Vec<Value>,
    failures: VecDeque<(u16, Option<u64>)>,
    requests: Vec<Request>,
    /// Pages served, the count at which to start holding, requests held now.
    served: usize,
    pause_at: Option<usize>,
    held: usize,
}

impl FakeStripe {
    /// Starts serving `events` (full Stripe event objects, each with "id",
    /// "created" and "type") to callers presenting API key `key`.
    pub async fn start(key: &str, events: Vec<Value>) -> FakeStripe {
        let state = Arc::new(watch::Sender::new(Shared::default()));
        state.send_modify(|s| s.key = key.to_owned());
        let app = Router::new()
            .route("/v1/events", get(list_events))
            .route("/v1/payment_intents", get(list_payment_intents))
            .route("/v1/payment_intents/{id}", get(retrieve_payment_intent))
            .route("/v1/refunds", get(list_refunds));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (address, shutdown) = (listener.local_addr().unwrap(), CancellationToken::new());
        let server = axum::serve(listener, app.with_state(state.clone()));
        let stop = shutdown.clone().cancelled_owned();
        tokio::spawn(server.with_graceful_shutdown(stop).into_future());
        let fake = FakeStripe {
            address,
            state,
            shutdown,
        };
        events.into_iter().for_each(|event| fake.add(event));
        fake
    }

    /// `http://127.0.0.1:PORT`, to which a client appends `/v1/events`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Adds an event; the list is live, so the next page served may show it.
    pub fn add(&self, event: Value) {
        let order = |e: &Value| (e["created"].as_i64(), e["id"].as_str().map(str::to_owned));
        self.state.send_modify(|s| {
            s.events.push(event);
            s.events.sort_by_key(|e| std::cmp::Reverse(order(e)));
        });
    }

    /// Adds a payment intent (`GET /v1/payment_intents`, and by id).
    pub fn add_payment_intent(&self, intent: Value) {
        self.state
            .send_modify(|s| insert(&mut s.payment_intents, intent));
    }

    /// Adds a refund object (`GET /v1/refunds`).
    pub fn add_refund(&self, refund: Value) {
        self.state.send_modify(|s| insert(&mut s.refunds, refund));
    }

    /// Answers the next `times` requests, before any other check, with
    /// `status` (and `Retry-After: retry_after` if given). Calls queue up.
    pub fn fail_next(&self, status: u16, times: usize, retry_after: Option<u64>) {
        let failures = std::iter::repeat_n((status, retry_after), times);
        self.state.send_modify(|s| s.failures.extend(failures));
    }

    /// Every request answered so far, oldest first (a held one once answered).
    pub fn requests(&self) -> Vec<Request> {
        self.state.borrow().requests.clone()
    }

    /// Once `pages` more pages (from now) have been served, holds further
    /// authorized, well-formed requests until [`release`](Self::release); a
    /// held request reads the list when let go.
    pub fn pause_after(&self, pages: usize) {
        let pause_at = |s: &mut Shared| s.pause_at = Some(s.served + pages);
        self.state.send_modify(pause_at);
    }

    /// Lets held requests go and stops holding new ones.
    pub fn release(&self) {
        self.state.send_modify(|s| s.pause_at = None);
    }

    /// Waits until a request is held (one whose client gave up still counts).
    pub async fn paused(&self) {
        let mut state = self.state.subscribe();
        state.wait_for(|s| s.held > 0).await.unwrap();
    }
}

impl Drop for FakeStripe {
    fn drop(&mut self) {
        self.release();
        self.shutdown.cancel();
    }
}

/// Inserts `object` in list order (`created`, then `id`, descending).
fn insert(list: &mut Vec<Value>, object: Value) {
    let order = |e: &Value| (e["created"].as_i64(), e["id"].as_str().map(str::to_owned));
    list.push(object);
    list.sort_by_key(|e| std::cmp::Reverse(order(e)));
}

async fn list_payment_intents(
    State(state): State<Arc<watch::Sender<Shared>>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    list_objects(
        &state,
        &headers,
        raw,
        |s| &s.payment_intents,
        "/v1/payment_intents",
    )
}

async fn list_refunds(
    State(state): State<Arc<watch::Sender<Shared>>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    list_objects(&state, &headers, raw, |s| &s.refunds, "/v1/refunds")
}

/// A list of other objects than events: the same paging, no types, no
/// injected failures or pauses.
fn list_objects(
    state: &watch::Sender<Shared>,
    headers: &HeaderMap,
    raw: Option<String>,
    of: fn(&Shared) -> &Vec<Value>,
    url: &str,
) -> Response {
    let key = bearer(headers);
    if key != state.borrow().key {
        return unauthorized(key);
    }
    let query = parse_query(raw.as_deref().unwrap_or_default());
    match page(&query, of(&state.borrow())) {
        Ok(mut page) => {
            page["url"] = json!(url);
            Json(page).into_response()
        }
        Err(failure) => respond(failure),
    }
}

async fn retrieve_payment_intent(
    State(state): State<Arc<watch::Sender<Shared>>>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let key = bearer(&headers);
    if key != state.borrow().key {
        return unauthorized(key);
    }
    let found = state
        .borrow()
        .payment_intents
        .iter()
        .find(|p| p["id"] == id.as_str())
        .cloned();
    match found {
        Some(intent) => Json(intent).into_response(),
        None => error(
            404,
            "invalid_request_error",
            &format!("No such payment_intent: '{id}'"),
        ),
    }
}

async fn list_events(
    State(state): State<Arc<watch::Sender<Shared>>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let query = parse_query(raw.as_deref().unwrap_or_default());
    let key = bearer(&headers);
    let authorized = key == state.borrow().key;
    let response = async {
        let mut failure = None;
        state.send_modify(|s| failure = s.failures.pop_front());
        if let Some((status, retry_after)) = failure {
            return injected(status, retry_after, key);
        }
        if !authorized {
            return unauthorized(key);
        }
        if let Err(failure) = page(&query, &state.borrow().events) {
            return respond(failure);
        }
        admit(&state).await;
        let page = page(&query, &state.borrow().events);
        page.map_or_else(respond, |page| Json(page).into_response())
    }
    .await;
    let status = response.status().as_u16();
    let request = Request {
        query,
        authorized,
        status,
    };
    state.send_modify(|s| s.requests.push(request));
    response
}

/// Waits while requests are being held, then counts one page served.
async fn admit(state: &watch::Sender<Shared>) {
    let (mut changes, mut held) = (state.subscribe(), false);
    loop {
        let mut admitted = false;
        state.send_if_modified(|s| {
            admitted = s.pause_at.is_none_or(|at| s.served < at);
            s.served += usize::from(admitted);
            s.held = s.held + usize::from(!admitted && !held) - usize::from(admitted && held);
            !admitted && !held
        });
        if admitted {
            return;
        }
        held = true;
        changes.changed().await.unwrap();
    }
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

/// Splits a raw query into percent-decoded pairs (`+` is a space).
fn parse_query(raw: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let (mut out, mut i) = (vec![], 0);
        while let Some(&byte) = s.as_bytes().get(i) {
            let hex = s.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16));
            let (byte, width) = match (byte, hex) {
                (b'%', Some(Ok(decoded))) => (decoded, 3),
                (b'+', _) => (b' ', 1),
                _ => (byte, 1),
            };
            out.push(byte);
            i += width;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    let pairs = raw.split('&').filter(|pair| !pair.is_empty());
    let pairs = pairs.map(|pair| pair.split_once('=').unwrap_or((pair, "")));
    pairs.map(|(k, v)| (decode(k), decode(v))).collect()
}

/// An HTTP status and the Stripe error body sent with it.
type Failure = (u16, Value);

fn respond((status, body): Failure) -> Response {
    (StatusCode::from_u16(status).unwrap(), Json(body)).into_response()
}

fn error(status: u16, kind: &str, message: &str) -> Response {
    let body = json!({ "error": { "type": kind, "message": message } });
    respond((status, body))
}

fn invalid(param: &str, message: &str) -> Failure {
    let error = json!({ "type": "invalid_request_error", "message": message, "param": param });
    (400, json!({ "error": error }))
}

/// Stripe's 401, which shows only the key's prefix and last four characters.
/// The key of `Authorization: Bearer <key>`, or "".
fn bearer(headers: &HeaderMap) -> &str {
    let value = headers.get(header::AUTHORIZATION);
    value
        .and_then(|v| v.to_str().ok()?.strip_prefix("Bearer "))
        .unwrap_or_default()
}

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
    let mut response = error(status, kind, &format!("An injected {status}."));
    let retry_after = retry_after.map(|seconds| (header::RETRY_AFTER, seconds.into()));
    response.headers_mut().extend(retry_after);
    response
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
