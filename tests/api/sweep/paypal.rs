//! `webhookd sweep paypal` and `webhookd import paypal` against a fake of
//! PayPal's REST API over real HTTP, asserted in `processed_events` and in
//! the wallets and subscriptions the recovered events apply to.

use bytes::Bytes;
use serde_json::{Value, json};
use webhookd::cli::sweep::{ImportArgs, ImportSource, PaypalSweepArgs, SweepCommand};
use webhookd::clock::Clock;
use webhookd::config::StripeApiArgs;
use webhookd::events::Outcome;
use webhookd::providers::Event;
use webhookd::sweep::paypal::PaypalApiArgs;

use crate::fakes::paypal::{FakePaypal, event, time};
use crate::helpers::{TestApp, now, spawn_app};

pub const CLIENT_ID: &str = "AZwebhookd-test-client-id";
pub const CLIENT_SECRET: &str = "EKwebhookd-test-client-secret-4242";

pub fn api_args(fake: &FakePaypal, secret: &str) -> PaypalApiArgs {
    PaypalApiArgs {
        paypal_client_id: Some(CLIENT_ID.into()),
        paypal_client_secret: Some(secret.into()),
        paypal_api_base: fake.base_url(),
    }
}

/// PayPal's API arguments when nothing is set.
pub fn unset() -> PaypalApiArgs {
    PaypalApiArgs {
        paypal_client_id: None,
        paypal_client_secret: None,
        paypal_api_base: "https://api-m.paypal.com".into(),
    }
}

/// A completed capture (Payments v2) for `user`.
pub fn capture(id: &str, user: &str, value: &str) -> Value {
    let href = format!("https://api.paypal.com/v2/payments/captures/{id}");
    json!({
        "id": id, "status": "COMPLETED", "amount": { "currency_code": "USD", "value": value },
        "final_capture": true, "custom_id": user, "seller_protection": { "status": "ELIGIBLE" },
        "create_time": time(now() - 7200), "update_time": time(now() - 7200),
        "links": [
            { "href": href, "rel": "self", "method": "GET" },
            { "href": format!("{href}/refund"), "rel": "refund", "method": "POST" },
        ],
    })
}

/// A capture event created at `at`.
pub fn captured(id: &str, at: i64, user: &str) -> Value {
    let capture_id = format!("CAP-{}", id.trim_start_matches("WH-"));
    event(
        id,
        "PAYMENT.CAPTURE.COMPLETED",
        at,
        capture(&capture_id, user, "10.00"),
    )
}

/// Runs `webhookd sweep paypal` over the last 72 hours; its JSON line.
pub async fn sweep(app: &TestApp, fake: &FakePaypal, dry_run: bool) -> anyhow::Result<Value> {
    let command = SweepCommand::Paypal(PaypalSweepArgs {
        since: std::time::Duration::from_secs(72 * 3600),
        dry_run,
        api: api_args(fake, CLIENT_SECRET),
    });
    let mut out = Vec::new();
    webhookd::cli::sweep::sweep(&app.pool, &command, &[], &Clock::System, &mut out).await?;
    Ok(serde_json::from_slice(&out).unwrap())
}

/// A webhook of `listed` (the bytes PayPal would have posted), through the
/// ingest path a verified delivery takes; its outcome.
pub async fn deliver(app: &TestApp, listed: &Value) -> Outcome {
    let (id, kind) = (
        listed["id"].as_str().unwrap(),
        listed["event_type"].as_str().unwrap(),
    );
    let body = Bytes::from(listed.to_string());
    let event = Event::from_stored("paypal", id, kind, body).unwrap();
    webhookd::ingest::ingest(&app.pool, &event)
        .await
        .unwrap()
        .outcome
}

/// `(outcome, received_via)` of a recorded PayPal event.
pub async fn recorded(app: &TestApp, event_id: &str) -> (String, String) {
    let sql = "select outcome, received_via from processed_events where provider = 'paypal' and event_id = $1";
    sqlx::query_as(sql)
        .bind(event_id)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// Recorded now and applied.
pub fn applied(outcome: &str) -> bool {
    outcome == "processed"
}

/// `(listed, recovered, already_seen, skipped)` of a sweep's line.
pub fn counts(line: &Value) -> (u64, u64, u64, u64) {
    let n = |k: &str| line[k].as_u64().unwrap_or_else(|| panic!("{k} in {line}"));
    (n("listed"), n("recovered"), n("already_seen"), n("skipped"))
}

fn unix(time: &str) -> i64 {
    let at = humantime::parse_rfc3339(time).unwrap();
    at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

#[sqlx::test]
async fn a_paypal_sweep_recovers_what_was_never_delivered_and_late_webhooks_are_duplicates(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = now() - 3600;
    let delivered = captured("WH-1", t, "user_1");
    let refund = json!({ "id": "REF-2", "status": "COMPLETED", "custom_id": "user_1",
        "amount": { "currency_code": "USD", "value": "4.00" },
        "links": [{ "href": "https://api.paypal.com/v2/payments/captures/CAP-2", "rel": "up", "method": "GET" }] });
    let subscription =
        json!({ "id": "I-SUB3", "plan_id": "P-PLAN", "status": "ACTIVE", "custom_id": "user_1" });
    let lost = [
        captured("WH-2", t + 1, "user_1"),
        event("WH-3", "PAYMENT.CAPTURE.REFUNDED", t + 2, refund),
        event(
            "WH-4",
            "BILLING.SUBSCRIPTION.ACTIVATED",
            t + 3,
            subscription,
        ),
    ];
    assert!(applied(deliver(&app, &delivered).await.as_str()));
    let mut listed = vec![delivered];
    listed.extend(lost.iter().cloned());
    let fake = FakePaypal::start(CLIENT_ID, CLIENT_SECRET, listed).await;

    let summary = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(counts(&summary), (4, 3, 1, 0), "{summary}");
    assert_eq!(
        (
            &summary["provider"],
            &summary["pages"],
            &summary["requests"]
        ),
        (&json!("paypal"), &json!(1), &json!(2))
    );
    assert_eq!(recorded(&app, "WH-1").await.1, "webhook");
    for id in ["WH-2", "WH-3", "WH-4"] {
        let (outcome, via) = recorded(&app, id).await;
        assert!(
            applied(&outcome) && via == "sweep",
            "{id}: {outcome} via {via}"
        );
    }
    // The delivered capture, the recovered one, less the recovered refund.
    assert_eq!(app.balance("user_1", "USD").await, Some(1000 + 1000 - 400));
    let status: String = sqlx::query_scalar(
        "select status from subscriptions where provider = 'paypal' and subscription_id = 'I-SUB3'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(status, "ACTIVE");

    // One token bought with the client credentials, then the listing.
    let requests = fake.requests();
    assert_eq!(
        (requests[0].path.as_str(), requests[0].body.as_str()),
        ("/v1/oauth2/token", "grant_type=client_credentials")
    );
    use base64::Engine;
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{CLIENT_SECRET}"));
    assert_eq!(requests[0].authorization, format!("Basic {basic}"));
    let listing = &requests[1];
    assert_eq!(listing.authorization, "Bearer A21AAFakeToken0001");
    let keys: Vec<&str> = listing.query.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["page_size", "start_time", "end_time"]);
    assert_eq!(listing.query[0].1, "100");
    let (start, end) = (unix(&listing.query[1].1), unix(&listing.query[2].1));
    assert!(
        (start - (now() - 72 * 3600)).abs() <= 5 && (end - now()).abs() <= 5,
        "{listing:?}"
    );

    // The webhooks that were lost arrive after all: nothing twice.
    for listed in &lost {
        assert_eq!(deliver(&app, listed).await, Outcome::Duplicate);
    }
    let again = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(counts(&again), (4, 0, 4, 0), "{again}");
    let rows: i64 =
        sqlx::query_scalar("select count(*) from processed_events where provider = 'paypal'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(rows, 4);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_paypal_dry_run_counts_and_writes_nothing(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 60;
    let listed = vec![
        captured("WH-D1", t, "user_1"),
        captured("WH-D2", t + 1, "user_2"),
    ];
    let fake = FakePaypal::start(CLIENT_ID, CLIENT_SECRET, listed).await;
    let summary = sweep(&app, &fake, true).await.unwrap();
    assert_eq!(
        (counts(&summary), &summary["dry_run"]),
        ((2, 2, 0, 0), &json!(true))
    );
    app.assert_nothing_written().await;
}

#[sqlx::test]
async fn paypal_pages_are_followed_and_events_applied_oldest_first(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 7200;
    let listed = (0..250).map(|n| captured(&format!("WH-{n:04}"), t + n, "user_o"));
    let fake = FakePaypal::start(CLIENT_ID, CLIENT_SECRET, listed.collect()).await;
    let summary = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(counts(&summary), (250, 250, 0, 0), "{summary}");
    assert_eq!(
        (&summary["pages"], &summary["requests"]),
        (&json!(3), &json!(4))
    );
    // Pages after the first follow the `next` link: its token, the same window.
    let listings = fake.listings();
    let token = |n: usize| {
        listings[n]
            .query
            .iter()
            .find(|(k, _)| k == "next_page_token")
            .map(|(_, v)| v.clone())
    };
    assert!(token(0).is_none() && token(1).is_some() && token(2).is_some() && token(1) != token(2));
    assert_eq!(listings[2].query[..3], listings[0].query[..3]);
    let order: Vec<String> = sqlx::query_scalar(
        "select event_id from processed_events where provider = 'paypal' order by received_at",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let oldest_first: Vec<String> = (0..250).map(|n| format!("WH-{n:04}")).collect();
    assert_eq!(
        order, oldest_first,
        "listed newest first, applied oldest first"
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn paypal_rate_limits_and_server_errors_are_retried(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let fake = FakePaypal::start(
        CLIENT_ID,
        CLIENT_SECRET,
        vec![captured("WH-R1", now() - 60, "user_1")],
    )
    .await;
    fake.fail_next(429, 1, Some(1));
    fake.fail_next(500, 1, None);
    let summary = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(
        (counts(&summary), &summary["requests"]),
        ((1, 1, 0, 0), &json!(4))
    );
    let statuses: Vec<u16> = fake.listings().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [429, 500, 200]);
    assert_eq!(fake.requests().len(), 4, "one token for the whole run");
    assert!(applied(&recorded(&app, "WH-R1").await.0));
}

#[sqlx::test]
async fn paypal_events_are_imported_without_effects_and_sweeps_start_after(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 600;
    let listed = vec![
        captured("WH-I1", t, "user_1"),
        captured("WH-I2", t + 1, "user_1"),
    ];
    let fake = FakePaypal::start(CLIENT_ID, CLIENT_SECRET, listed.clone()).await;
    let import = ImportArgs {
        source: Some(ImportSource::Paypal),
        provider: None,
        from_csv: None,
        since: std::time::Duration::from_secs(30 * 86_400),
        dry_run: false,
        api: StripeApiArgs {
            stripe_api_key: None,
            stripe_api_base: "https://api.stripe.com".into(),
            rate: 20,
            stripe_refresh_on_tie: None,
            scope: Default::default(),
        },
        paypal: api_args(&fake, CLIENT_SECRET),
    };
    let mut out = Vec::new();
    webhookd::cli::sweep::import(&app.pool, &import, &[], &Clock::System, &mut out)
        .await
        .unwrap();
    let line: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (&line["provider"], &line["imported"], &line["already_seen"]),
        (&json!("paypal"), &json!(2), &json!(0)),
        "{line}"
    );
    let start = unix(&fake.listings()[0].query[1].1);
    assert!(
        (start - (now() - 30 * 86_400)).abs() <= 5,
        "import reads 30 days back"
    );
    for event in &listed {
        let id = event["id"].as_str().unwrap();
        assert_eq!(
            recorded(&app, id).await,
            ("imported".into(), "import".into())
        );
        assert_eq!(deliver(&app, event).await, Outcome::Duplicate);
    }
    // The cut-over: no sweep reads what came before the import.
    let swept = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(counts(&swept), (0, 0, 0, 0), "{swept}");
    assert!(swept["since"].as_i64().unwrap() >= now() - 5, "{swept}");
    assert_eq!(app.count("outbox").await, 0);
    app.assert_consistent().await;
}
