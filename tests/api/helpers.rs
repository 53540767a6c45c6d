//! Spawns the real application on a free port against the test's own fresh
//! database, or builds its router to call without a socket, and signs
//! deliveries the way Stripe does.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use webhookd::clock::Clock;
use webhookd::config::{AdminListen, ServeSettings, SourceScheme, SourceSettings};
use webhookd::http::metrics::Metrics;
use webhookd::http::{AppState, Limits};
use webhookd::ingest::{Ingestor, Wake};
use webhookd::ledger;
use webhookd::providers::Providers;
use webhookd::providers::stripe::signature_header;
use webhookd::secrets::{Secrets, parse_secrets};
use webhookd::startup::{self, Application};

/// The current endpoint secret, and the previous one still accepted during a rotation.
pub const SECRET: &str = "whsec_test_current_secret";
pub const OLD_SECRET: &str = "whsec_test_previous_secret";

/// Secrets of the other providers and sources every test app mounts:
/// `(current, previous)`.
pub const RAZORPAY_SECRETS: (&str, &str) = ("rzp_current_secret", "rzp_previous_secret");
pub const STANDARD_SECRETS: (&str, &str) = (
    "whsec_Y3VycmVudC1zdGFuZGFyZC1rZXk=",
    "whsec_cHJldmlvdXMtc3RhbmRhcmQta2V5",
);
pub const GITHUB_SECRETS: (&str, &str) = ("github current secret", "github previous secret");
pub const SHOPIFY_SECRETS: (&str, &str) = ("shpss_current", "shpss_previous");

fn source(name: &str, scheme: SourceScheme, (current, previous): (&str, &str)) -> SourceSettings {
    SourceSettings::new(name, scheme, Secrets::new([current, previous]))
}

pub struct TestApp {
    pub address: String,
    /// The admin listener's base URL, unless it is off.
    pub admin_address: Option<String>,
    pub pool: PgPool,
    /// The pool the app runs on ([`app_pool`]): `pool`, or the same
    /// database through a transaction pooler.
    pub pooled: PgPool,
    pub client: reqwest::Client,
    pub shutdown: CancellationToken,
    /// The public listener's router, for an app called without a socket
    /// ([`route_app_with`]): its requests go to this, not to `address`.
    pub router: Option<Router>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .try_into()
        .unwrap()
}

/// The app with both secrets configured and the system clock.
pub async fn spawn_app(pool: PgPool) -> TestApp {
    spawn_app_with(pool, Clock::System, |_| {}).await
}

pub async fn spawn_app_with(
    pool: PgPool,
    clock: Clock,
    configure: impl FnOnce(&mut ServeSettings),
) -> TestApp {
    let settings = settings_with(configure);
    let shutdown = CancellationToken::new();
    let pooled = app_pool(&pool);
    let app = Application::build(
        &settings,
        pooled.clone(),
        clock,
        shutdown.clone(),
        Default::default(),
    )
    .await
    .expect("the application builds");
    let address = format!("http://{}", app.local_addr());
    let admin_address = app.admin_addr().map(|a| format!("http://{a}"));
    tokio::spawn(app.run_until_stopped());
    TestApp {
        address,
        admin_address,
        pool,
        pooled,
        client: reqwest::Client::new(),
        shutdown,
        router: None,
    }
}

/// The app with both secrets configured and the system clock, called
/// without a socket: for tests of what a request is answered, and what it
/// writes, that need no connection, timeout or concurrent client.
pub async fn route_app(pool: PgPool) -> TestApp {
    route_app_with(pool, Clock::System, |_| {}).await
}

/// The public listener's router (`webhookd::http::router`, its middleware
/// included) with the settings [`spawn_app_with`] would serve, called by
/// `oneshot` instead of over a socket. No admin listener.
pub async fn route_app_with(
    pool: PgPool,
    clock: Clock,
    configure: impl FnOnce(&mut ServeSettings),
) -> TestApp {
    let settings = settings_with(configure);
    let shutdown = CancellationToken::new();
    let pooled = app_pool(&pool);
    let providers = startup::providers_settings(&settings).expect("the providers' settings");
    // As `Application::build` assembles it, with the default workers.
    let metrics = std::sync::Arc::new(Metrics::default());
    let state = AppState {
        ingestor: Ingestor::start_with_sizes(
            pooled.clone(),
            startup::batch_settings(&settings),
            Wake::Notify,
            &TaskTracker::new(),
            metrics.batch_sizes(),
        ),
        pool: pooled.clone(),
        providers: Providers::from_settings(&providers).expect("the providers mount"),
        fetcher: startup::fetcher(&settings.sweep.stripe).expect("the fetcher"),
        clock,
        shutdown: shutdown.clone(),
        metrics,
        arrivals: Default::default(),
    };
    let limits = Limits {
        max_body_bytes: usize::try_from(settings.max_body_bytes).unwrap(),
        request_timeout: settings.request_timeout,
    };
    TestApp {
        address: "http://router.invalid".to_owned(),
        admin_address: None,
        pool,
        pooled,
        client: reqwest::Client::new(),
        shutdown,
        router: Some(webhookd::http::router(state, limits, true)),
    }
}

/// Every test app's settings: both Stripe secrets, Razorpay's, the three
/// sources, free ports; then `configure`'s changes.
fn settings_with(configure: impl FnOnce(&mut ServeSettings)) -> ServeSettings {
    let mut settings = ServeSettings {
        listen: "127.0.0.1:0".parse().unwrap(),
        stripe_webhook_secret: parse_secrets(&format!("{SECRET},{OLD_SECRET}")).unwrap(),
        razorpay_webhook_secret: Secrets::new([RAZORPAY_SECRETS.0, RAZORPAY_SECRETS.1]),
        sources: vec![
            source("svix", SourceScheme::StandardWebhooks, STANDARD_SECRETS),
            source("gh", SourceScheme::Github, GITHUB_SECRETS),
            source("shop", SourceScheme::Shopify, SHOPIFY_SECRETS),
        ],
        ..ServeSettings::default()
    };
    // Every app side by side gets a free port for its admin listener too.
    settings.admin.admin_listen = Some(AdminListen(Some("127.0.0.1:0".parse().unwrap())));
    configure(&mut settings);
    settings
}

/// The pool the code under test runs on: `pool` itself, or, when
/// `WEBHOOKD_TEST_POOLER_URL` names a transaction-mode PgBouncer in front of
/// the test database's server (`scripts/test.sh` runs part of the suite
/// so), the same database through it, in webhookd's transaction-pooler
/// mode. The test's own checks keep reading `pool`, directly.
pub fn app_pool(pool: &PgPool) -> PgPool {
    let Ok(pooler) = std::env::var("WEBHOOKD_TEST_POOLER_URL") else {
        return pool.clone();
    };
    let database = pool
        .connect_options()
        .get_database()
        .expect("a test database has a name")
        .to_owned();
    webhookd::db::pool(&webhookd::db::Options {
        url: format!("{}/{database}", pooler.trim_end_matches('/')).into(),
        pooler: webhookd::db::Pooler::Transaction,
        direct_url: None,
        max_connections: 8,
        acquire_timeout: std::time::Duration::from_secs(10),
        statement_timeout: std::time::Duration::from_secs(10),
    })
    .expect("the pooler's URL is valid")
}

/// A drainer of `pool`'s database on [`app_pool`], listening on `pool`
/// itself (as `WEBHOOKD_DIRECT_DATABASE_URL` has it listen behind a pooler).
pub fn drainer_on(
    pool: &PgPool,
    sink: webhookd::sinks::Sink,
    settings: webhookd::outbox::DrainerSettings,
    clock: Clock,
) -> webhookd::outbox::Drainer {
    webhookd::outbox::Drainer::new(app_pool(pool), sink, settings, clock)
        .listening_on(Some(pool.clone()))
}

impl TestApp {
    /// POSTs `body` to /webhooks/stripe signed with the current secret, now.
    pub async fn post_stripe(&self, body: &str) -> reqwest::Response {
        let header = signature_header(SECRET, now(), body.as_bytes());
        self.post_stripe_with(body.as_bytes().to_vec(), Some(&header))
            .await
    }

    /// POSTs `body` with the given `Stripe-Signature` header (or none).
    pub async fn post_stripe_with(&self, body: Vec<u8>, header: Option<&str>) -> reqwest::Response {
        let mut request = self
            .client
            .post(format!("{}/webhooks/stripe", self.address))
            .header("content-type", "application/json")
            .body(body);
        if let Some(header) = header {
            request = request.header("stripe-signature", header);
        }
        self.send(request).await
    }

    /// POSTs `body` to /webhooks/{provider} with the given headers.
    pub async fn post_to(
        &self,
        provider: &str,
        body: Vec<u8>,
        headers: &[(String, String)],
    ) -> reqwest::Response {
        let mut request = self
            .client
            .post(format!("{}/webhooks/{provider}", self.address))
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        self.send(request).await
    }

    /// Sends `request`: over the socket, or to the router of an app called
    /// without one, with the `content-length` a client would send.
    pub async fn send(&self, request: reqwest::RequestBuilder) -> reqwest::Response {
        let Some(router) = &self.router else {
            return request.send().await.expect("the request is sent");
        };
        let request = request.build().expect("the request builds");
        let body = request
            .body()
            .and_then(|b| b.as_bytes())
            .unwrap_or_default();
        let mut routed = http::Request::builder()
            .method(request.method())
            .uri(request.url().path());
        for (name, value) in request.headers() {
            routed = routed.header(name, value);
        }
        let routed = routed
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(axum::body::Body::from(body.to_vec()))
            .unwrap();
        let response = router.clone().oneshot(routed).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        http::Response::from_parts(parts, body).into()
    }

    /// Delivers a Stripe event and expects 200 with `outcome`.
    pub async fn deliver(&self, body: &str, outcome: &str) -> Value {
        let response = self.post_stripe(body).await;
        assert_eq!(response.status(), StatusCode::OK, "delivering {body}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["outcome"], outcome, "delivering {body}");
        answer
    }

    /// Delivers each Stripe event in turn, expecting 200 with its outcome.
    pub async fn deliver_each(&self, deliveries: &[(&str, &str)]) {
        for (body, outcome) in deliveries {
            self.deliver(body, outcome).await;
        }
    }

    /// `GET /metrics`, as text.
    pub async fn metrics(&self) -> String {
        let response = self
            .client
            .get(format!("{}/metrics", self.address))
            .send()
            .await
            .expect("the request is sent");
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.unwrap()
    }

    pub async fn count(&self, table: &str) -> i64 {
        // Table names come from the tests themselves, never from input.
        sqlx::query_scalar(&format!("select count(*) from {table}"))
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// `(outcome, detail)` of a stored Stripe event.
    pub async fn event(&self, event_id: &str) -> (String, Value) {
        self.event_of("stripe", event_id).await
    }

    /// `(outcome, detail)` of a stored event.
    pub async fn event_of(&self, provider: &str, event_id: &str) -> (String, Value) {
        sqlx::query_as(
            "select outcome, detail from processed_events where provider = $1 and event_id = $2",
        )
        .bind(provider)
        .bind(event_id)
        .fetch_one(&self.pool)
        .await
        .unwrap_or_else(|e| panic!("event {event_id}: {e}"))
    }

    /// The payload of the one `webhookd.delivery_gap` outbox row.
    pub async fn delivery_gap(&self) -> Value {
        let sql = "select payload from outbox where topic = 'webhookd.delivery_gap'";
        sqlx::query_scalar(sql).fetch_one(&self.pool).await.unwrap()
    }

    pub async fn balance(&self, user_id: &str, currency: &str) -> Option<i64> {
        sqlx::query_scalar("select balance_minor from wallets where user_id = $1 and currency = $2")
            .bind(user_id)
            .bind(currency)
            .fetch_optional(&self.pool)
            .await
            .unwrap()
    }

    /// Nothing was written: the request was refused before any database work.
    pub async fn assert_nothing_written(&self) {
        for table in [
            "processed_events",
            "wallet_entries",
            "wallets",
            "payments",
            "subscriptions",
            "outbox",
        ] {
            assert_eq!(self.count(table).await, 0, "{table} has rows");
        }
    }

    /// Invariants that hold after every test ([`assert_consistent`]).
    pub async fn assert_consistent(&self) {
        assert_consistent(&self.pool).await;
    }
}

/// Invariants that hold after every test: each balance equals the sum of
/// its entries, every entry, outbox row and deferral belongs to a recorded
/// event, and every attempt is beside its outbox row (in its month).
pub async fn assert_consistent(pool: &PgPool) {
    let mut conn = pool.acquire().await.unwrap();
    let mismatches = ledger::mismatches(&mut conn).await.unwrap();
    assert!(
        mismatches.is_empty(),
        "balances differ from their entries: {mismatches:?}"
    );
    let orphans: i64 = sqlx::query_scalar(
        "select (select count(*) from wallet_entries w where not exists
                    (select 1 from processed_events e where e.provider = w.provider and e.event_id = w.event_id))
              + (select count(*) from outbox o where not exists
                    (select 1 from processed_events e where e.provider = o.provider and e.event_id = o.event_id))
              -- what the foreign keys said before partitions
              + (select count(*) from deferred_events d where not exists
                    (select 1 from processed_events e where e.provider = d.provider and e.event_id = d.event_id))
              + (select count(*) from outbox_attempts a where not exists
                    (select 1 from outbox o where o.id = a.outbox_id and o.month = a.month))",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(orphans, 0, "effects without their event");
    let pending: i64 =
        sqlx::query_scalar("select count(*) from processed_events where outcome = 'pending'")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    assert_eq!(pending, 0, "events committed without an outcome");
    // Every refund debits a credit of its own wallet and currency, and a
    // credit's refunds never add up to more than it.
    let refunds_astray: i64 = sqlx::query_scalar(
        "select count(*) from wallet_entries r
         where r.kind = 'refund' and not exists
            (select 1 from wallet_entries c
             where c.provider = r.provider and c.kind = 'credit' and c.source_ref = r.parent_ref
               and c.user_id = r.user_id and c.currency = r.currency)",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(refunds_astray, 0, "refunds without their credit");
    let over_refunded: i64 = sqlx::query_scalar(
        "select count(*) from wallet_entries c
         where c.kind = 'credit' and c.amount_minor < coalesce(
            (select -sum(r.amount_minor) from wallet_entries r
             where r.provider = c.provider and r.kind = 'refund' and r.parent_ref = c.source_ref), 0)",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(over_refunded, 0, "credits refunded beyond their amount");
}

// Stripe-shaped events, trimmed to what webhookd reads plus the envelope.

fn envelope(event_id: &str, event_type: &str, created: i64, object: Value) -> String {
    json!({
        "id": event_id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": created,
        "data": { "object": object },
        "livemode": false,
        "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null },
        "type": event_type,
    })
    .to_string()
}

pub fn payment_intent_succeeded(
    event_id: &str,
    intent: &str,
    user_id: &str,
    amount: i64,
) -> String {
    envelope(
        event_id,
        "payment_intent.succeeded",
        now(),
        json!({
            "id": intent,
            "object": "payment_intent",
            "amount": amount,
            "amount_received": amount,
            "currency": "usd",
            "metadata": { "user_id": user_id },
            "status": "succeeded",
        }),
    )
}

pub fn charge(
    event_id: &str,
    event_type: &str,
    charge: &str,
    intent: &str,
    amount: i64,
    refunded: i64,
) -> String {
    envelope(
        event_id,
        event_type,
        now(),
        json!({
            "id": charge,
            "object": "charge",
            "amount": amount,
            "amount_captured": amount,
            "amount_refunded": refunded,
            "currency": "usd",
            "payment_intent": intent,
            "metadata": { "user_id": "user_1" },
            "refunded": refunded >= amount,
            "status": "succeeded",
            "created": now(),
        }),
    )
}

pub fn subscription(
    event_id: &str,
    event_type: &str,
    subscription: &str,
    status: &str,
    created: i64,
) -> String {
    envelope(
        event_id,
        event_type,
        created,
        json!({
            "id": subscription,
            "object": "subscription",
            "customer": "cus_1",
            "status": status,
            "metadata": { "user_id": "user_1" },
            "items": { "object": "list", "data": [
                { "id": "si_1", "price": { "id": "price_pro" }, "current_period_end": created + 2_592_000 }
            ]},
        }),
    )
}

pub fn invoice_paid(event_id: &str, invoice: &str) -> String {
    envelope(
        event_id,
        "invoice.paid",
        now(),
        json!({
            "id": invoice,
            "object": "invoice",
            "customer": "cus_1",
            "subscription": "sub_1",
            "amount_paid": 2000,
            "currency": "usd",
        }),
    )
}

pub fn event_of_type(event_id: &str, event_type: &str, object: Value) -> String {
    envelope(event_id, event_type, now(), object)
}

/// Waits (bounded) until `count` sessions of this database wait on a lock.
pub async fn until_waiting_on_locks(pool: &PgPool, count: i64) {
    for _ in 0..1000 {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if waiting >= count {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    panic!("{count} sessions never waited on a lock");
}
