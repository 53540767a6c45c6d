//! A sweep's memory is bounded by bytes, on every provider: against an API
//! that lists 300 KB events, 100 a page, with "more" on every page, for
//! ever, a sweep reads a bounded number of pages and stops with the reason;
//! a page with more items than were asked for is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::{Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::cli::sweep::{PaypalSweepArgs, RazorpaySweepArgs, StripeSweepArgs, SweepCommand};
use webhookd::clock::Clock;
use webhookd::config::{RazorpayApiArgs, StripeApiArgs};
use webhookd::sweep::paypal::PaypalApiArgs;

/// An API that never ends: each page holds `per_page` items of about
/// `pad` bytes each, all created at the window's start, and says there is
/// more.
#[derive(Clone)]
struct Endless {
    per_page: usize,
    pad: Arc<String>,
    served: Arc<AtomicUsize>,
    bytes: Arc<AtomicUsize>,
    /// `http://127.0.0.1:PORT`, which PayPal's `next` links name.
    base: String,
}

type Params = Query<Vec<(String, String)>>;

fn param<'a>(query: &'a [(String, String)], name: &str) -> &'a str {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

impl Endless {
    async fn start(per_page: usize, pad: usize) -> (Endless, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let endless = Endless {
            per_page,
            pad: Arc::new("0".repeat(pad)),
            served: Arc::default(),
            bytes: Arc::default(),
            base: base.clone(),
        };
        let app = Router::new()
            .route("/v1/events", get(stripe))
            .route("/v1/payments", get(razorpay))
            .route("/v1/refunds", get(razorpay))
            .route("/v1/oauth2/token", post(token))
            .route("/v1/notifications/webhooks-events", get(paypal))
            .with_state(endless.clone());
        tokio::spawn(axum::serve(listener, app).into_future());
        (endless, base)
    }

    /// A page of items made by `item(index)`, counted.
    fn page(&self, item: impl Fn(usize) -> Value) -> Vec<Value> {
        let first = self.served.fetch_add(1, Ordering::Relaxed) * self.per_page;
        let items: Vec<Value> = (first..first + self.per_page).map(item).collect();
        let bytes = items.len() * self.pad.len();
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        items
    }
}

async fn stripe(State(api): State<Endless>, Query(query): Params) -> Json<Value> {
    let created: i64 = param(&query, "created[gte]").parse().unwrap();
    let data = api.page(|i| {
        let intent = json!({ "id": format!("pi_{i}"), "object": "payment_intent",
            "amount": 100, "currency": "usd", "description": api.pad.as_str() });
        crate::fakes::stripe::event(
            &format!("evt_{i:09}"),
            "payment_intent.succeeded",
            created,
            intent,
        )
    });
    Json(json!({ "object": "list", "url": "/v1/events", "has_more": true, "data": data }))
}

async fn razorpay(State(api): State<Endless>, Query(query): Params) -> Json<Value> {
    let created: i64 = param(&query, "from").parse().unwrap();
    let items = api.page(|i| {
        let mut payment =
            crate::fakes::razorpay::payment(&format!("pay_{i}"), 100, "captured", None, created);
        payment["description"] = api.pad.as_str().into();
        payment
    });
    Json(json!({ "entity": "collection", "count": items.len(), "items": items }))
}

async fn token() -> Json<Value> {
    Json(json!({ "access_token": "A21AAF", "token_type": "Bearer", "expires_in": 32400 }))
}

async fn paypal(State(api): State<Endless>, Query(query): Params) -> Json<Value> {
    let start = param(&query, "start_time").to_owned();
    let page: usize = param(&query, "page").parse().unwrap_or(1);
    let events = api.page(|i| {
        json!({ "id": format!("WH-{i:09}"), "event_version": "1.0", "create_time": start,
            "resource_type": "capture", "event_type": "PAYMENT.CAPTURE.COMPLETED",
            "summary": api.pad.as_str(), "resource": { "id": format!("CAP{i}") } })
    });
    let next = format!(
        "{}/v1/notifications/webhooks-events?page_size=100&start_time={start}&end_time={}&page={}",
        api.base,
        param(&query, "end_time"),
        page + 1
    );
    Json(json!({ "events": events, "count": events.len(),
        "links": [{ "href": next, "rel": "next", "method": "GET" }] }))
}

/// Runs `command` (a dry run, as in the finding) and returns its error.
async fn refused(pool: &PgPool, command: SweepCommand) -> String {
    let mut out = Vec::new();
    let swept = webhookd::cli::sweep::sweep(pool, &command, &[], &Clock::System, &mut out).await;
    format!("{:#}", swept.expect_err("the sweep stops"))
}

fn stripe_sweep(base: &str) -> SweepCommand {
    SweepCommand::Stripe(StripeSweepArgs {
        since: std::time::Duration::from_secs(2),
        dry_run: true,
        account: None,
        api: StripeApiArgs {
            stripe_api_key: Some("sk_test_endless".into()),
            stripe_api_base: base.to_owned(),
            rate: 100,
            stripe_refresh_on_tie: None,
            scope: Default::default(),
        },
    })
}

fn razorpay_sweep(base: &str) -> SweepCommand {
    SweepCommand::Razorpay(RazorpaySweepArgs {
        // Its window ends a minute back: two seconds of it.
        since: std::time::Duration::from_secs(62),
        dry_run: true,
        api: RazorpayApiArgs {
            razorpay_key_id: Some("rzp_test_endless".into()),
            razorpay_key_secret: Some("secret".into()),
            razorpay_api_base: base.to_owned(),
        },
    })
}

fn paypal_sweep(base: &str) -> SweepCommand {
    SweepCommand::Paypal(PaypalSweepArgs {
        since: std::time::Duration::from_secs(2),
        dry_run: true,
        api: PaypalApiArgs {
            paypal_client_id: Some("client".into()),
            paypal_client_secret: Some("secret".into()),
            paypal_api_base: base.to_owned(),
        },
    })
}

/// The most a sweep of a two-second window may read before it stops: the
/// bound of each of its slices (the whole window, then one second), and a
/// page over it each.
const MOST_READ: usize = 2 * (64 << 20) + 2 * 100 * 300_000;

#[sqlx::test]
async fn endless_pages_of_large_events_stop_every_provider_s_sweep_at_the_byte_bound(pool: PgPool) {
    for (name, sweep) in [
        ("stripe", stripe_sweep as fn(&str) -> SweepCommand),
        ("razorpay", razorpay_sweep),
        ("paypal", paypal_sweep),
    ] {
        let (api, base) = Endless::start(100, 300_000).await;
        let error = refused(&pool, sweep(&base)).await;
        assert!(
            error.contains("more than 64 MiB of events in one second"),
            "{name}: {error}"
        );
        let read = api.bytes.load(Ordering::Relaxed);
        assert!(
            read <= MOST_READ,
            "{name} read {read} bytes in {} pages",
            api.served.load(Ordering::Relaxed)
        );
    }
    let written: i64 = sqlx::query_scalar("select count(*) from processed_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(written, 0, "a dry run writes nothing");
}

#[sqlx::test]
async fn a_page_with_more_items_than_asked_for_is_refused_on_every_provider(pool: PgPool) {
    for (name, sweep) in [
        ("stripe", stripe_sweep as fn(&str) -> SweepCommand),
        ("razorpay", razorpay_sweep),
        ("paypal", paypal_sweep),
    ] {
        let (api, base) = Endless::start(10_000, 10).await;
        let error = refused(&pool, sweep(&base)).await;
        assert!(
            error.contains("a page of 10000 items, where 100 were asked for"),
            "{name}: {error}"
        );
        assert_eq!(api.served.load(Ordering::Relaxed), 1, "{name}");
    }
}
