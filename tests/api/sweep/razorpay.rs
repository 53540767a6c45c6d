//! `webhookd sweep razorpay` against a fake of Razorpay's payments and
//! refunds APIs over real HTTP, with effects asserted in the database.

use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::cli::sweep::{RazorpaySweepArgs, SweepCommand};
use webhookd::clock::Clock;
use webhookd::config::RazorpayApiArgs;

use crate::fakes::razorpay::{FakeRazorpay, payment, refund};
use crate::helpers::{RAZORPAY_SECRETS, TestApp, now, spawn_app};

const KEY_ID: &str = "rzp_test_sweep";
const KEY_SECRET: &str = "sweep_secret";

fn args(fake: &FakeRazorpay, secret: &str, dry_run: bool) -> SweepCommand {
    SweepCommand::Razorpay(RazorpaySweepArgs {
        since: std::time::Duration::from_secs(24 * 3600),
        dry_run,
        api: RazorpayApiArgs {
            razorpay_key_id: Some(KEY_ID.to_owned()),
            razorpay_key_secret: Some(secret.into()),
            razorpay_api_base: fake.base_url(),
        },
    })
}

async fn sweep(app: &TestApp, fake: &FakeRazorpay, dry_run: bool) -> Value {
    let mut out = Vec::new();
    webhookd::cli::sweep::sweep(
        &app.pool,
        &args(fake, KEY_SECRET, dry_run),
        &[],
        &Clock::System,
        &mut out,
    )
    .await
    .unwrap();
    serde_json::from_slice(&out).unwrap()
}

/// A signed Razorpay webhook of `entities` under `event_id`; its outcome.
async fn webhook(app: &TestApp, event: &str, entities: Value, event_id: &str) -> String {
    let contains: Vec<String> = entities.as_object().unwrap().keys().cloned().collect();
    let body = json!({ "entity": "event", "account_id": "acc_1", "event": event,
                       "contains": contains, "payload": entities, "created_at": now() })
    .to_string();
    let signature = webhookd::providers::razorpay::signature(RAZORPAY_SECRETS.0, body.as_bytes());
    let headers = [
        ("x-razorpay-signature".to_owned(), signature),
        ("x-razorpay-event-id".to_owned(), event_id.to_owned()),
    ];
    let response = app.post_to("razorpay", body.into_bytes(), &headers).await;
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let answer: Value = response.json().await.unwrap();
    answer["outcome"].as_str().unwrap().to_owned()
}

#[sqlx::test]
async fn a_razorpay_sweep_credits_and_debits_what_was_never_delivered_and_nothing_twice(
    pool: PgPool,
) {
    let app = spawn_app(pool).await;
    let t = now() - 3600;
    let delivered = payment("pay_1", 5000, "captured", Some("user_1"), t);
    let lost = payment("pay_2", 3000, "captured", Some("user_1"), t + 1);
    let payments = vec![
        delivered.clone(),
        lost.clone(),
        payment("pay_3", 900, "failed", Some("user_1"), t + 2),
        payment("pay_4", 700, "captured", None, t + 3),
    ];
    // A refund of a payment captured before the window, never credited.
    let old = payment(
        "pay_old",
        2000,
        "refunded",
        Some("user_2"),
        now() - 40 * 3600,
    );
    let refunds = vec![
        refund("rfnd_1", "pay_2", 1000, t + 10),
        refund("rfnd_2", "pay_old", 2000, t + 11),
    ];
    let fake = FakeRazorpay::start(KEY_ID, KEY_SECRET, payments, refunds).await;
    fake.add_payment(old);
    assert_eq!(
        webhook(
            &app,
            "payment.captured",
            json!({ "payment": { "entity": delivered } }),
            "evt_w1"
        )
        .await,
        "processed"
    );

    let summary = sweep(&app, &fake, false).await;
    assert_eq!(
        (
            &summary["recovered"],
            &summary["already_seen"],
            &summary["skipped"]
        ),
        (&json!(4), &json!(1), &json!(1)),
        "{summary}"
    );
    assert_eq!(app.balance("user_1", "INR").await, Some(5000 + 3000 - 1000));
    assert_eq!(app.balance("user_2", "INR").await, Some(0));
    let (outcome, _) = app
        .event_of("razorpay", "webhookd:sweep:payment.captured:pay_2")
        .await;
    assert_eq!(outcome, "processed");
    let (outcome, _) = app
        .event_of("razorpay", "webhookd:sweep:payment.captured:pay_4")
        .await;
    // No owner in its notes: it waits for its order's (`order.paid`).
    assert_eq!(outcome, "deferred");
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.path == "/v1/payments/pay_old"),
        "the refunded payment outside the window was fetched"
    );
    // Lists in settled windows: `to` at least a minute in the past.
    let first = &fake.requests()[0];
    let to: i64 = first
        .query
        .iter()
        .find(|(k, _)| k == "to")
        .unwrap()
        .1
        .parse()
        .unwrap();
    assert!(to <= now() - 60, "{to}");

    // The lost webhooks arrive late: recorded, nothing applied twice.
    assert_eq!(
        webhook(
            &app,
            "payment.captured",
            json!({ "payment": { "entity": lost } }),
            "evt_w2"
        )
        .await,
        "ignored"
    );
    let late_refund = json!({ "refund": { "entity": refund("rfnd_1", "pay_2", 1000, t + 10) } });
    assert_eq!(
        webhook(&app, "refund.processed", late_refund, "evt_w3").await,
        "ignored"
    );
    assert_eq!(app.balance("user_1", "INR").await, Some(7000));
    let again = sweep(&app, &fake, false).await;
    assert_eq!(
        (&again["recovered"], &again["already_seen"]),
        (&json!(0), &json!(5)),
        "{again}"
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_razorpay_dry_run_counts_and_writes_nothing_and_a_refused_key_stops(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 600;
    let fake = FakeRazorpay::start(
        KEY_ID,
        KEY_SECRET,
        vec![payment("pay_d", 100, "captured", Some("user_1"), t)],
        vec![],
    )
    .await;
    let summary = sweep(&app, &fake, true).await;
    assert_eq!(
        (&summary["recovered"], &summary["dry_run"]),
        (&json!(1), &json!(true))
    );
    app.assert_nothing_written().await;

    let error = webhookd::cli::sweep::sweep(
        &app.pool,
        &args(&fake, "wrong", false),
        &[],
        &Clock::System,
        &mut Vec::new(),
    )
    .await
    .unwrap_err();
    let message = format!("{error:#}");
    assert!(
        message.contains("razorpay refused the API key (401)"),
        "{message}"
    );
    assert!(message.contains("RAZORPAY_KEY_SECRET"), "{message}");
    app.assert_nothing_written().await;
}

fn sweeper(app: &TestApp, fake: &FakeRazorpay) -> webhookd::sweep::schedule::Sweeper {
    use webhookd::api::{Api, Auth};
    let auth = Auth::Basic {
        user: KEY_ID.to_owned(),
        password: KEY_SECRET.into(),
    };
    let target = webhookd::sweep::schedule::Target {
        provider: "razorpay",
        api: Api::new("razorpay", &fake.base_url(), &auth, 100, "check it").unwrap(),
        window: std::time::Duration::from_secs(24 * 3600),
        source: webhookd::sweep::Swept::default(),
    };
    webhookd::sweep::schedule::Sweeper::new(
        app.pool.clone(),
        vec![target],
        std::time::Duration::from_secs(600),
        Clock::System,
    )
}

#[sqlx::test]
async fn a_payment_captured_after_a_periodic_run_listed_it_is_credited_by_the_next(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 3600;
    // Authorized when the first run reads it; captured before the second.
    let fake = FakeRazorpay::start(
        KEY_ID,
        KEY_SECRET,
        vec![payment("pay_late", 1500, "authorized", Some("user_1"), t)],
        vec![],
    )
    .await;
    let mut sweeper = sweeper(&app, &fake);
    sweeper.run_once().await;
    assert_eq!(app.balance("user_1", "INR").await, None);
    let captured = FakeRazorpay::start(
        KEY_ID,
        KEY_SECRET,
        vec![payment("pay_late", 1500, "captured", Some("user_1"), t)],
        vec![],
    )
    .await;
    sweeper.targets[0].api = {
        use webhookd::api::{Api, Auth};
        let auth = Auth::Basic {
            user: KEY_ID.to_owned(),
            password: KEY_SECRET.into(),
        };
        Api::new("razorpay", &captured.base_url(), &auth, 100, "check it").unwrap()
    };
    sweeper.run_once().await;
    assert_eq!(app.balance("user_1", "INR").await, Some(1500));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn after_an_import_no_razorpay_sweep_credits_what_the_earlier_handler_applied(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 3600;
    // The earlier handler credited pay_old; webhookd imports its event ids.
    let fake = FakeRazorpay::start(
        KEY_ID,
        KEY_SECRET,
        vec![payment("pay_old", 900, "captured", Some("user_1"), t)],
        vec![],
    )
    .await;
    let file = std::env::temp_dir().join(format!(
        "webhookd-rzp-import-{}-{}.csv",
        std::process::id(),
        now()
    ));
    std::fs::write(&file, "evt_handled_by_the_old_handler\n").unwrap();
    let import = webhookd::cli::sweep::ImportArgs {
        source: None,
        provider: Some("razorpay".into()),
        from_csv: Some(file.clone()),
        since: std::time::Duration::from_secs(3600),
        dry_run: false,
        api: webhookd::config::StripeApiArgs {
            stripe_api_key: None,
            stripe_api_base: "https://api.stripe.com".into(),
            rate: 20,
            stripe_refresh_on_tie: None,
            scope: Default::default(),
        },
        paypal: crate::sweep::paypal::unset(),
    };
    webhookd::cli::sweep::import(&app.pool, &import, &[], &Clock::System, &mut Vec::new())
        .await
        .unwrap();
    std::fs::remove_file(&file).unwrap();
    let summary = sweep(&app, &fake, false).await;
    assert_eq!(
        (&summary["listed"], &summary["recovered"]),
        (&json!(0), &json!(0)),
        "{summary}"
    );
    sweeper(&app, &fake).run_once().await;
    assert_eq!(
        app.balance("user_1", "INR").await,
        None,
        "nothing credited twice"
    );
    // A payment after the cut-over is swept as usual (an hour later).
    fake.add_payment(payment(
        "pay_new",
        400,
        "captured",
        Some("user_1"),
        now() + 1800,
    ));
    let later = Clock::Fixed(now() + 3600);
    let mut out = Vec::new();
    webhookd::cli::sweep::sweep(
        &app.pool,
        &args(&fake, KEY_SECRET, false),
        &[],
        &later,
        &mut out,
    )
    .await
    .unwrap();
    let summary: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(summary["recovered"], 1, "{summary}");
    assert_eq!(app.balance("user_1", "INR").await, Some(400));
}
