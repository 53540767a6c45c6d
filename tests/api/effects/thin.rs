//! Stripe's thin events: verified, their data fetched from (a fake of)
//! Stripe's API before their transaction, and then applied as the snapshot
//! event of their type, or forwarded as `stripe.thin`. A fetch that a
//! retry may mend answers 503 and writes nothing; one that never can
//! rejects the event; without an API key the event is rejected, and a
//! replay applies it once the key is set.

use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::providers::stripe::signature_header;

use crate::fakes::stripe::FakeStripe;
use crate::helpers::{TestApp, now, payment_intent_succeeded, spawn_app_with};

const KEY: &str = "sk_test_thin_events";

/// The signing secret of the source `thin`: a thin destination has its own.
const THIN_SECRET: &str = "whsec_thin_destination";

/// A thin event as an event destination sends it: no data, the object it
/// is about in `related_object`.
fn thin(event_id: &str, event_type: &str, related: Option<Value>, context: Option<&str>) -> String {
    let created = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    json!({
        "id": event_id, "object": "v2.core.event", "type": event_type, "created": created,
        "livemode": false, "context": context, "related_object": related,
        "reason": { "type": "request", "request": { "id": "req_1", "idempotency_key": null } },
    })
    .to_string()
}

/// The `related_object` of payment intent `id`.
fn intent_ref(id: &str) -> Option<Value> {
    Some(json!({ "id": id, "type": "payment_intent", "url": format!("/v1/payment_intents/{id}") }))
}

/// A succeeded payment intent of `user_id`, as `GET /v1/payment_intents/{id}`
/// answers it.
fn intent(id: &str, user_id: &str, amount: i64) -> Value {
    json!({
        "id": id, "object": "payment_intent", "amount": amount, "amount_received": amount,
        "currency": "usd", "status": "succeeded", "metadata": { "user_id": user_id },
        "created": 1_764_547_200, "livemode": false,
    })
}

/// The app with `STRIPE_API_KEY` set (or not) and the fake as Stripe's API.
async fn app(pool: PgPool, key: Option<&str>) -> (TestApp, FakeStripe) {
    let fake = FakeStripe::start(KEY, vec![]).await;
    let base = fake.base_url();
    let key = key.map(str::to_owned);
    let app = spawn_app_with(pool, Clock::System, |settings| {
        let thin = webhookd::config::sources_from_env([
            (
                "WEBHOOKD_SOURCE_THIN_SCHEME".to_owned(),
                "stripe".to_owned(),
            ),
            (
                "WEBHOOKD_SOURCE_THIN_SECRET".to_owned(),
                THIN_SECRET.to_owned(),
            ),
            // Connect: it takes connected accounts' events too.
            ("WEBHOOKD_SOURCE_THIN_CONNECT".to_owned(), "true".to_owned()),
        ])
        .expect("the source is valid");
        settings.sources.extend(thin);
        settings.sweep.stripe.stripe_api_key = key.map(Into::into);
        settings.sweep.stripe.stripe_api_base = base;
        settings.request_timeout = Duration::from_secs(2);
    })
    .await;
    (app, fake)
}

/// POSTs `body` to the thin destination's own endpoint, `/webhooks/thin`.
async fn post_thin(app: &TestApp, body: &str) -> reqwest::Response {
    let header = signature_header(THIN_SECRET, now(), body.as_bytes());
    let headers = [("stripe-signature".to_owned(), header)];
    app.post_to("thin", body.as_bytes().to_vec(), &headers)
        .await
}

/// The `outcome` `response` answers, expecting 200.
async fn outcome_of(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    answer["outcome"].as_str().unwrap().to_owned()
}

/// How many credit entries payment `intent` has.
async fn credits_of(app: &TestApp, intent: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from wallet_entries where kind = 'credit' and source_ref = $1",
    )
    .bind(intent)
    .fetch_one(&app.pool)
    .await
    .unwrap()
}

#[sqlx::test]
async fn a_thin_payment_intent_succeeded_credits_once_what_stripes_api_says(pool: PgPool) {
    let (app, fake) = app(pool, Some(KEY)).await;
    fake.add_payment_intent(intent("pi_thin", "user_1", 1500));
    let body = thin(
        "evt_thin_1",
        "v1.payment_intent.succeeded",
        intent_ref("pi_thin"),
        None,
    );
    let answer = app.deliver(&body, "processed").await;
    assert_eq!(answer["event_id"], "evt_thin_1");
    assert_eq!(app.balance("user_1", "USD").await, Some(1500));
    let retrieved = fake.retrievals();
    assert_eq!(retrieved.len(), 1);
    assert_eq!(retrieved[0].path, "/v1/payment_intents/pi_thin");
    assert!(retrieved[0].authorized);
    // Stored as received, with what was fetched where a snapshot event
    // carries its object.
    let payload: Value =
        sqlx::query_scalar("select payload from processed_events where event_id = 'evt_thin_1'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(payload["object"], "v2.core.event");
    assert_eq!(payload["data"]["object"]["id"], "pi_thin");
    // A redelivery is a duplicate, and asks Stripe for nothing.
    app.deliver(&body, "duplicate").await;
    assert_eq!(app.balance("user_1", "USD").await, Some(1500));
    assert_eq!(fake.retrievals().len(), 1);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_payment_as_a_snapshot_and_as_a_thin_event_credits_once_in_any_order(pool: PgPool) {
    let (app, fake) = app(pool, Some(KEY)).await;
    for (n, order) in ["snapshot first", "thin first", "at once"]
        .iter()
        .enumerate()
    {
        let id = format!("pi_both_{n}");
        fake.add_payment_intent(intent(&id, "user_2", 700));
        let snapshot = payment_intent_succeeded(&format!("evt_snap_{n}"), &id, "user_2", 700);
        let thin = thin(
            &format!("evt_thin_{n}"),
            "v1.payment_intent.succeeded",
            intent_ref(&id),
            None,
        );
        // The snapshot on the endpoint `stripe`, the thin event on the
        // thin destination's own.
        let outcomes = match *order {
            "snapshot first" => vec![
                outcome_of(app.post_stripe(&snapshot).await).await,
                outcome_of(post_thin(&app, &thin).await).await,
            ],
            "thin first" => {
                let mut outcomes = vec![
                    outcome_of(post_thin(&app, &thin).await).await,
                    outcome_of(app.post_stripe(&snapshot).await).await,
                ];
                outcomes.reverse();
                outcomes
            }
            _ => {
                let (a, b) = tokio::join!(app.post_stripe(&snapshot), post_thin(&app, &thin));
                let mut outcomes = vec![outcome_of(a).await, outcome_of(b).await];
                outcomes.sort();
                outcomes
            }
        };
        let expected = match *order {
            "at once" => ["ignored", "processed"],
            "thin first" => ["ignored", "processed"],
            _ => ["processed", "ignored"],
        };
        assert_eq!(outcomes, expected, "{order}");
        let source: Option<String> =
            sqlx::query_scalar("select source from processed_events where event_id = $1")
                .bind(format!("evt_thin_{n}"))
                .fetch_one(&app.pool)
                .await
                .unwrap();
        assert_eq!(source.as_deref(), Some("thin"), "{order}");
        assert_eq!(credits_of(&app, &id).await, 1, "{order}");
    }
    assert_eq!(app.balance("user_2", "USD").await, Some(2100));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_fetch_a_retry_may_mend_answers_503_and_writes_nothing(pool: PgPool) {
    let (app, fake) = app(pool, Some(KEY)).await;
    fake.add_payment_intent(intent("pi_retry", "user_3", 900));
    let body = thin(
        "evt_thin_retry",
        "v1.payment_intent.succeeded",
        intent_ref("pi_retry"),
        None,
    );
    fake.fail_next(500, 1, None);
    fake.fail_next(429, 1, Some(1));
    for _ in 0..2 {
        let response = app.post_stripe(&body).await;
        assert_eq!(response.status(), 503);
        assert!(response.headers().contains_key("retry-after"));
    }
    // Slower than the request may take: the request gives up, nothing kept.
    fake.slow_retrievals(Duration::from_secs(4));
    assert_eq!(app.post_stripe(&body).await.status(), 503);
    fake.slow_retrievals(Duration::ZERO);
    assert_eq!(app.count("processed_events").await, 0);
    assert_eq!(app.count("outbox").await, 0);
    // Stripe delivers it again, and it applies.
    app.deliver(&body, "processed").await;
    assert_eq!(app.balance("user_3", "USD").await, Some(900));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn an_answer_that_never_will_do_rejects_the_event_with_its_reason(pool: PgPool) {
    let (app, fake) = app(pool, Some(KEY)).await;
    // Another object than the one named; a body over the bound; a 404.
    fake.serve_instead(
        "pi_other",
        intent("pi_someone_else", "user_4", 100).to_string(),
    );
    let huge = json!({ "id": "pi_huge", "pad": "x".repeat(3 * 1024 * 1024) });
    fake.serve_instead("pi_huge", huge.to_string());
    let cases = [
        (
            "evt_other",
            intent_ref("pi_other"),
            "another object than pi_other",
        ),
        ("evt_huge", intent_ref("pi_huge"), "a body over the bound"),
        ("evt_gone", intent_ref("pi_gone"), "No such payment_intent"),
        // A URL outside Stripe's v1 objects is never requested.
        (
            "evt_hostile",
            Some(
                json!({ "id": "pi_x", "type": "payment_intent", "url": "https://evil.example/v1/payment_intents/pi_x" }),
            ),
            "not an object of Stripe's v1 API",
        ),
        ("evt_nothing", None, "names no related_object"),
    ];
    for (event_id, related, reason) in cases {
        let body = thin(event_id, "v1.payment_intent.succeeded", related, None);
        app.deliver(&body, "rejected").await;
        let (_, detail) = app.event(event_id).await;
        let stored = detail["reason"].as_str().unwrap_or_default();
        assert!(stored.contains(reason), "{event_id}: {detail}");
    }
    let paths: Vec<String> = fake.retrievals().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        [
            "/v1/payment_intents/pi_other",
            "/v1/payment_intents/pi_huge",
            "/v1/payment_intents/pi_gone"
        ]
    );
    assert_eq!(app.count("wallet_entries").await, 0);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn thin_events_webhookd_does_not_apply_are_forwarded_with_the_fetched_event(pool: PgPool) {
    let (app, fake) = app(pool, Some(KEY)).await;
    let meter =
        json!({ "id": "mtr_1", "type": "billing.meter", "url": "/v1/billing/meters/mtr_1" });
    let error_report = thin(
        "evt_meter",
        "v1.billing.meter.error_report_triggered",
        Some(meter),
        Some("acct_9"),
    );
    let ping = thin("evt_ping", "v2.core.event_destination.ping", None, None);
    for (id, kind) in [
        ("evt_meter", "v1.billing.meter.error_report_triggered"),
        ("evt_ping", "v2.core.event_destination.ping"),
    ] {
        fake.add_v2_event(json!({
            "id": id, "object": "v2.core.event", "type": kind, "created": "2026-12-06T00:00:00.000Z",
            "livemode": false, "data": { "developer_message_summary": "one error" },
        }));
    }
    // A connected account's (its context), on the destination that takes them.
    assert_eq!(
        outcome_of(post_thin(&app, &error_report).await).await,
        "ignored"
    );
    let account: Option<String> =
        sqlx::query_scalar("select account from processed_events where event_id = 'evt_meter'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(account.as_deref(), Some("acct_9"));
    app.deliver(&ping, "ignored").await;
    let forwarded: Vec<(String, Value)> = sqlx::query_as(
        "select event_id, payload from outbox where topic = 'stripe.thin' order by event_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(forwarded.len(), 2);
    assert_eq!(forwarded[0].0, "evt_meter");
    assert_eq!(forwarded[0].1["account"], "acct_9");
    assert_eq!(
        forwarded[0].1["data"]["developer_message_summary"],
        "one error"
    );
    assert_eq!(forwarded[1].1["type"], "v2.core.event_destination.ping");
    // The event, not its related object, was fetched, in its context.
    let retrieved = fake.retrievals();
    assert_eq!(retrieved[0].path, "/v2/core/events/evt_meter");
    assert_eq!(retrieved[0].context.as_deref(), Some("acct_9"));
    assert_eq!(retrieved[1].path, "/v2/core/events/evt_ping");
    assert_eq!(retrieved[1].context, None);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn without_a_key_a_thin_event_is_rejected_and_a_replay_with_one_applies_it(pool: PgPool) {
    let (app, fake) = app(pool, None).await;
    fake.add_payment_intent(intent("pi_later", "user_5", 1200));
    let body = thin(
        "evt_later",
        "v1.payment_intent.succeeded",
        intent_ref("pi_later"),
        None,
    );
    app.deliver(&body, "rejected").await;
    let (_, detail) = app.event("evt_later").await;
    assert!(
        detail["reason"]
            .as_str()
            .unwrap()
            .contains("STRIPE_API_KEY"),
        "{detail}"
    );
    assert!(fake.retrievals().is_empty());

    // The key set: `webhookd events replay` fetches it and applies it.
    let fetcher = webhookd::fetch::Fetcher::new(&fake.base_url(), KEY.into(), false).unwrap();
    let sources = webhookd::providers::Providers::default();
    let replayed =
        webhookd::ingest::replay_stored(&app.pool, &sources, Some(&fetcher), "stripe", "evt_later")
            .await
            .unwrap()
            .unwrap();
    assert_eq!(replayed.replayed.applied.outcome.as_str(), "processed");
    assert!(replayed.replayed.recorded);
    let (outcome, _) = app.event("evt_later").await;
    assert_eq!(outcome, "processed");
    assert_eq!(app.balance("user_5", "USD").await, Some(1200));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn webhookd_send_thin_signs_a_thin_event_the_server_fetches_and_applies(pool: PgPool) {
    use webhookd::cli::send::SendArgs;
    use webhookd::cli::send::paypal::{DEFAULT_CERT_URL, PaypalSendArgs};
    use webhookd::cli::send::stripe::StripeSendArgs;
    use webhookd::secrets::Secrets;

    let (app, fake) = app(pool, Some(KEY)).await;
    fake.add_payment_intent(intent("pi_sent_thin", "user_6", 2500));
    let args = SendArgs {
        provider: "stripe".into(),
        event_type: "payment_intent.succeeded".into(),
        user: "user_6".into(),
        amount: Some("2500".into()),
        currency: None,
        payment: Some("pi_sent_thin".into()),
        url: app.address.clone(),
        stripe_webhook_secret: Secrets::new([crate::helpers::SECRET]),
        razorpay_webhook_secret: Secrets::default(),
        stripe: StripeSendArgs {
            thin: true,
            ..StripeSendArgs::default()
        },
        paypal: PaypalSendArgs {
            paypal_key: None,
            paypal_cert_url: DEFAULT_CERT_URL.into(),
            paypal_webhook_id: None,
        },
    };
    let mut out = Vec::new();
    webhookd::cli::send::run(&args, &mut out).await.unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("\"outcome\":\"processed\""), "{out}");
    let (event_type,): (String,) =
        sqlx::query_as("select event_type from processed_events where outcome = 'processed'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(event_type, "v1.payment_intent.succeeded");
    assert_eq!(app.balance("user_6", "USD").await, Some(2500));
    assert_eq!(
        fake.retrievals()[0].path,
        "/v1/payment_intents/pi_sent_thin"
    );
}
