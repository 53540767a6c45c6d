//! Operator commands: reconcile, prune, events replay, explain, send,
//! healthcheck. Each asserts its effect in the database.

use std::process::Command;
use std::time::Duration;

use sqlx::PgPool;
use webhookd::cli;
use webhookd::cli::args::RetentionArgs;
use webhookd::cli::drill::DrillArgs;
use webhookd::cli::events::EventsCommand;
use webhookd::cli::send::SendArgs;
use webhookd::cli::send::paypal::{DEFAULT_CERT_URL, PaypalSendArgs};
use webhookd::clock::Clock;
use webhookd::outbox::Drainer;
use webhookd::secrets::Secrets;
use webhookd::sinks::Sink;
use webhookd::sinks::log::LogSink;

use crate::helpers::{SECRET, charge, payment_intent_succeeded, spawn_app};

const RETENTION: RetentionArgs = RetentionArgs { retention_days: 30 };

fn output(buffer: Vec<u8>) -> String {
    String::from_utf8(buffer).unwrap()
}

#[sqlx::test]
async fn reconcile_passes_on_a_clean_ledger_and_fails_on_a_corrupted_balance(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.deliver_each(&[
        (
            &payment_intent_succeeded("evt_1", "pi_1", "user_1", 900),
            "processed",
        ),
        (
            &charge("evt_2", "charge.refunded", "ch_1", "pi_1", 900, 300),
            "processed",
        ),
    ])
    .await;

    let mut out = Vec::new();
    assert!(
        cli::reconcile::run(&pool, &RETENTION, &mut out)
            .await
            .unwrap()
    );
    assert!(output(out).starts_with("ok"));

    sqlx::query("update wallets set balance_minor = balance_minor + 1 where user_id = 'user_1'")
        .execute(&pool)
        .await
        .unwrap();
    let mut out = Vec::new();
    assert!(
        !cli::reconcile::run(&pool, &RETENTION, &mut out)
            .await
            .unwrap()
    );
    let out = output(out);
    assert!(
        out.contains("MISMATCH wallet user_1 USD: balance 601 but entries sum to 600"),
        "{out}"
    );

    // The binary turns that into its exit code.
    let status = Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .arg("reconcile")
        .env(
            "DATABASE_URL",
            crate::service::lifecycle::database_url(&pool),
        )
        .output()
        .unwrap()
        .status;
    assert_eq!(status.code(), Some(1));
}

#[sqlx::test]
async fn reconcile_flags_entries_whose_event_is_missing(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.deliver(
        &payment_intent_succeeded("evt_1", "pi_1", "user_1", 900),
        "processed",
    )
    .await;
    sqlx::query("delete from processed_events")
        .execute(&pool)
        .await
        .unwrap();
    let mut out = Vec::new();
    assert!(
        !cli::reconcile::run(&pool, &RETENTION, &mut out)
            .await
            .unwrap()
    );
    assert!(output(out).contains("ORPHAN entry"));
}

#[sqlx::test]
async fn replaying_an_applied_event_changes_nothing(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.deliver_each(&[
        (
            &payment_intent_succeeded("evt_1", "pi_1", "user_1", 700),
            "processed",
        ),
        (
            &charge("evt_2", "charge.refunded", "ch_1", "pi_1", 700, 200),
            "processed",
        ),
    ])
    .await;
    let before = snapshot(&pool).await;

    for event_id in ["evt_1", "evt_2"] {
        let replay = EventsCommand::Replay {
            provider: "stripe".into(),
            event_id: event_id.into(),
            stripe: Box::default(),
        };
        let mut out = Vec::new();
        cli::events::run(&pool, &replay, &[], &mut out)
            .await
            .unwrap();
        let out = output(out);
        assert!(
            out.contains("stored outcome unchanged (processed)"),
            "{out}"
        );
    }
    assert_eq!(snapshot(&pool).await, before);
    let missing = EventsCommand::Replay {
        provider: "stripe".into(),
        event_id: "evt_nope".into(),
        stripe: Box::default(),
    };
    assert!(
        cli::events::run(&pool, &missing, &[], &mut Vec::new())
            .await
            .is_err()
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn replaying_a_deferred_refund_after_its_credit_applies_it_once(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.deliver(
        &charge("evt_refund", "charge.refunded", "ch_1", "pi_1", 700, 700),
        "deferred",
    )
    .await;
    // The credit's row is written by hand (as a repair would), without the
    // event that would have applied the waiting refund.
    sqlx::raw_sql(
        "insert into wallets (user_id, currency, balance_minor) values ('user_1', 'USD', 700);
         insert into wallet_entries (user_id, currency, amount_minor, kind, provider, source_ref, event_id)
         values ('user_1', 'USD', 700, 'credit', 'stripe', 'pi_1', 'evt_refund')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let replay = EventsCommand::Replay {
        provider: "stripe".into(),
        event_id: "evt_refund".into(),
        stripe: Box::default(),
    };
    let mut out = Vec::new();
    cli::events::run(&pool, &replay, &[], &mut out)
        .await
        .unwrap();
    assert!(output(out).contains("stored outcome changed from deferred to processed"));
    cli::events::run(&pool, &replay, &[], &mut Vec::new())
        .await
        .unwrap();
    assert_eq!(app.balance("user_1", "USD").await, Some(0));
    app.assert_consistent().await;
}

async fn snapshot(pool: &PgPool) -> (Vec<(String, i64)>, i64, i64, Vec<(String, String)>) {
    let wallets = sqlx::query_as("select user_id, balance_minor from wallets order by user_id")
        .fetch_all(pool)
        .await
        .unwrap();
    let entries = sqlx::query_scalar("select count(*) from wallet_entries")
        .fetch_one(pool)
        .await
        .unwrap();
    let outbox = sqlx::query_scalar("select count(*) from outbox")
        .fetch_one(pool)
        .await
        .unwrap();
    let events = sqlx::query_as("select event_id, outcome from processed_events order by event_id")
        .fetch_all(pool)
        .await
        .unwrap();
    (wallets, entries, outbox, events)
}

#[sqlx::test]
async fn explain_tells_the_whole_story_of_a_payment(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.deliver_each(&[
        (
            &charge("evt_refund", "charge.refunded", "ch_1", "pi_1", 900, 400),
            "deferred",
        ),
        (
            &payment_intent_succeeded("evt_credit", "pi_1", "user_1", 900),
            "processed",
        ),
        (
            &charge("evt_charge", "charge.succeeded", "ch_1", "pi_1", 900, 0),
            "ignored",
        ),
    ])
    .await;
    let drainer = Drainer::new(
        pool.clone(),
        Sink::Log(LogSink),
        crate::drain::outbox::settings(5),
        Clock::System,
    );
    drainer.drain_once().await.unwrap();

    let mut out = Vec::new();
    assert!(cli::explain::run(&pool, "pi_1", &mut out).await.unwrap());
    let story = output(out);
    for expected in [
        "event stripe evt_credit (payment_intent.succeeded, API version 2024-06-20) received, signature verified, claimed: processed",
        "event stripe evt_refund (charge.refunded, API version 2024-06-20) received, signature verified, claimed: processed",
        "ledger entry #1: credit 900 USD for wallet user_1/USD (natural key pi_1) by event evt_credit",
        "refund -400 USD for wallet user_1/USD (natural key ch_1:400) by event evt_refund",
        "wallet.credited written by event evt_credit",
        "wallet.debited written by event evt_refund",
        "delivered (webhook-id",
        "payment stripe ch_1: partially_refunded, 900 USD, refunded 400, user user_1",
        "wallet user_1/USD balance 500",
    ] {
        assert!(
            story.contains(expected),
            "missing {expected:?} in:\n{story}"
        );
    }
    // The same story is found from the user, and nothing from a stranger.
    let mut out = Vec::new();
    assert!(cli::explain::run(&pool, "user_1", &mut out).await.unwrap());
    assert!(output(out).contains("by event evt_refund"));
    assert!(
        !cli::explain::run(&pool, "pi_unknown", &mut Vec::new())
            .await
            .unwrap()
    );
}

#[sqlx::test]
async fn send_signs_a_sample_that_the_service_applies(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    let send = |event_type: &str, payment: Option<&str>| SendArgs {
        provider: "stripe".into(),
        event_type: event_type.into(),
        user: "user_sent".into(),
        amount: Some("2500".into()),
        currency: None,
        payment: payment.map(str::to_owned),
        url: app.address.clone(),
        stripe_webhook_secret: Secrets::new([SECRET]),
        razorpay_webhook_secret: Secrets::default(),
        stripe: Default::default(),
        paypal: PaypalSendArgs {
            paypal_key: None,
            paypal_cert_url: DEFAULT_CERT_URL.into(),
            paypal_webhook_id: None,
        },
    };
    let mut out = Vec::new();
    cli::send::run(&send("payment_intent.succeeded", Some("pi_sent")), &mut out)
        .await
        .unwrap();
    assert!(output(out).contains(r#"200 OK {"outcome":"processed""#));
    cli::send::run(&send("charge.refunded", Some("pi_sent")), &mut Vec::new())
        .await
        .unwrap();
    assert_eq!(app.balance("user_sent", "USD").await, Some(0));

    let razorpay = SendArgs {
        provider: "razorpay".into(),
        razorpay_webhook_secret: Secrets::new([crate::helpers::RAZORPAY_SECRETS.0]),
        ..send("payment.captured", Some("pay_sent"))
    };
    cli::send::run(&razorpay, &mut Vec::new()).await.unwrap();
    assert_eq!(app.balance("user_sent", "INR").await, Some(2500));

    let unsigned = SendArgs {
        stripe_webhook_secret: Secrets::default(),
        ..send("invoice.paid", None)
    };
    assert!(
        cli::send::run(&unsigned, &mut Vec::new()).await.is_err(),
        "no secret, nothing sent"
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn healthcheck_succeeds_only_against_a_live_server(pool: PgPool) {
    let app = spawn_app(pool).await;
    let mut out = Vec::new();
    cli::healthcheck(&format!("{}/healthz", app.address), &mut out)
        .await
        .unwrap();
    assert_eq!(output(out), "ok: 200 OK\n");
    assert!(
        cli::healthcheck(&format!("{}/nope", app.address), &mut Vec::new())
            .await
            .is_err()
    );
    assert!(
        cli::healthcheck("http://127.0.0.1:1/healthz", &mut Vec::new())
            .await
            .is_err()
    );
}

#[sqlx::test]
async fn the_drill_storms_two_servers_and_finds_the_books_exact(pool: PgPool) {
    // Two servers on one database; each event's copies go to both, and the
    // credits land on 16 hot wallets.
    let app = spawn_app(pool.clone()).await;
    let second = spawn_app(pool.clone()).await;
    let args = DrillArgs {
        events: 200,
        duplicates: 5,
        users: 16,
        urls: vec![app.address.clone(), second.address.clone()],
        ..drill_args(&app)
    };
    let mut out = Vec::new();
    assert!(cli::drill::run(&args, Some(&pool), &mut out).await.unwrap());
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(report["sent"], 1000, "{report}");
    assert_eq!(report["statuses"]["200"], 1000);
    let checks = &report["verification"]["checks"];
    for (check, expected) in [
        ("stripe_events", 200),
        ("stripe_credits", 200),
        ("outbox_wallet_credited", 200),
        ("razorpay_events", 0),
    ] {
        assert_eq!(checks[check]["found"], expected, "{check}: {report}");
    }
    assert_eq!(
        checks["usd_total_minor"]["found"],
        checks["usd_total_minor"]["expected"]
    );
    assert_eq!(report["verification"]["failed"], serde_json::json!([]));
    assert_eq!(report["passed"], true);
    let duplicates: i64 = sqlx::query_scalar("select count(*) from processed_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(duplicates, 200, "800 copies absorbed");
    let wallets: i64 = sqlx::query_scalar("select count(*) from wallets")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(wallets <= 16, "{wallets} wallets");
    app.assert_consistent().await;

    // Without the secret there is nothing to sign with.
    let unsigned = DrillArgs {
        stripe_webhook_secret: Secrets::default(),
        ..args
    };
    assert!(
        cli::drill::run(&unsigned, None, &mut Vec::new())
            .await
            .is_err()
    );
}

#[sqlx::test]
async fn a_mixed_drill_finds_the_books_exact_and_fails_on_a_corrupted_balance(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    // 21 groups of ten and a short one: 106 credits, 22 charges, 21
    // refunds, 22 subscription updates, 44 Razorpay captures.
    let args = DrillArgs {
        events: 215,
        mix: true,
        razorpay_webhook_secret: Secrets::new([crate::helpers::RAZORPAY_SECRETS.0]),
        ..drill_args(&app)
    };
    let mut out = Vec::new();
    let passed = cli::drill::run(&args, Some(&pool), &mut out).await.unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert!(passed, "{report}");
    assert_eq!(report["statuses"]["200"], 645, "{report}");
    for (kind, events) in [
        ("payment_intent.succeeded", 106),
        ("charge.succeeded", 22),
        ("charge.refunded", 21),
        ("customer.subscription.updated", 22),
        ("payment.captured", 44),
    ] {
        assert_eq!(report["kinds"][kind]["events"], events, "{kind}: {report}");
        assert_eq!(
            report["kinds"][kind]["outcomes"]["duplicate"],
            events * 2,
            "{kind}: {report}"
        );
    }
    let checks = &report["verification"]["checks"];
    for (check, expected) in [
        ("stripe_events", 171),
        ("razorpay_events", 44),
        ("stripe_credits", 106),
        ("stripe_refunds", 21),
        ("razorpay_credits", 44),
        ("outbox_wallet_credited", 150),
        ("outbox_wallet_debited", 21),
        ("outbox_payment_receipt", 22),
        ("outbox_subscription_changed", 22),
        ("deferred_waiting", 0),
        ("balance_mismatches", 0),
    ] {
        assert_eq!(checks[check]["found"], expected, "{check}: {report}");
    }
    let prefix = format!("drill_{}_", report["run"].as_str().unwrap());
    let wallets: i64 = sqlx::query_scalar(
        "select count(distinct user_id) from wallets where starts_with(user_id, $1)",
    )
    .bind(&prefix)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!((40..=50).contains(&wallets), "{wallets} wallets");
    app.assert_consistent().await;

    // The same books with one balance off by one unit fail, and say where.
    sqlx::query(
        "update wallets set balance_minor = balance_minor + 1
         where (user_id, currency) = (select user_id, currency from wallets
                                      where starts_with(user_id, $1) and currency = 'USD'
                                      order by user_id limit 1)",
    )
    .bind(&prefix)
    .execute(&pool)
    .await
    .unwrap();
    let plan = cli::drill::Plan {
        run_id: report["run"].as_str().unwrap().parse().unwrap(),
        events: 215,
        users: 50,
        shape: cli::drill::Shape::Mix,
    };
    let verification = cli::drill::verify(&pool, &plan, 215).await.unwrap();
    assert_eq!(verification["passed"], false);
    assert_eq!(
        verification["failed"],
        serde_json::json!(["usd_total_minor", "balance_mismatches"])
    );

    // One event at a time, the refunds of odd groups come before their
    // credits: deferred, then applied by the credit.
    let report = twenty_one_at_a_time(&pool, args.clone()).await;
    assert_eq!(
        report["kinds"]["charge.refunded"]["outcomes"],
        serde_json::json!({ "deferred": 1, "processed": 1 }),
        "{report}"
    );

    // The mix needs the Razorpay secret.
    let without = DrillArgs {
        razorpay_webhook_secret: Secrets::default(),
        ..args
    };
    assert!(
        cli::drill::run(&without, None, &mut Vec::new())
            .await
            .is_err()
    );
}

#[sqlx::test]
async fn a_checkout_drill_credits_each_payment_once_whichever_of_its_events_comes_first(
    pool: PgPool,
) {
    let app = spawn_app(pool.clone()).await;
    // Six groups of ten and a short one: 20 sessions and their 20 intents,
    // 19 charges, 6 plain credits.
    let args = DrillArgs {
        events: 65,
        checkout: true,
        ..drill_args(&app)
    };
    let mut out = Vec::new();
    let passed = cli::drill::run(&args, Some(&pool), &mut out).await.unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert!(passed, "{report}");
    assert_eq!(report["shape"], "checkout");
    for (kind, events) in [
        ("checkout.session.completed", 20),
        ("payment_intent.succeeded (checkout)", 20),
        ("charge.succeeded", 19),
        ("payment_intent.succeeded", 6),
    ] {
        assert_eq!(report["kinds"][kind]["events"], events, "{kind}: {report}");
    }
    let checks = &report["verification"]["checks"];
    for (check, expected) in [
        ("stripe_events", 65),
        ("stripe_credits", 26),
        ("outbox_wallet_credited", 26),
        ("outbox_payment_receipt", 19),
        ("deferred_waiting", 0),
        ("balance_mismatches", 0),
    ] {
        assert_eq!(checks[check]["found"], expected, "{check}: {report}");
    }
    app.assert_consistent().await;

    // One event at a time: in even groups the session credits and its
    // intent finds the credit; in odd ones the intent waits for its session.
    let report = twenty_one_at_a_time(&pool, args).await;
    assert_eq!(
        report["kinds"]["payment_intent.succeeded (checkout)"]["outcomes"],
        serde_json::json!({ "deferred": 3, "ignored": 3 }),
        "{report}"
    );
}

/// A drill of `app`: 3 copies of each event, 8 at once, over 50 wallets,
/// Stripe credits only.
fn drill_args(app: &crate::helpers::TestApp) -> DrillArgs {
    DrillArgs {
        events: 100,
        duplicates: 3,
        concurrency: 8,
        users: 50,
        mix: false,
        checkout: false,
        duration: None,
        urls: vec![app.address.clone()],
        give_up_after: Duration::from_secs(60),
        run_id: None,
        stripe_webhook_secret: Secrets::new([SECRET]),
        razorpay_webhook_secret: Secrets::default(),
    }
}

/// Runs `args` for 20 events, one at a time without copies: its report,
/// once its books were found exact.
async fn twenty_one_at_a_time(pool: &PgPool, args: DrillArgs) -> serde_json::Value {
    let sequential = DrillArgs {
        events: 20,
        duplicates: 1,
        concurrency: 1,
        ..args
    };
    let mut out = Vec::new();
    assert!(
        cli::drill::run(&sequential, Some(pool), &mut out)
            .await
            .unwrap()
    );
    serde_json::from_slice(&out).unwrap()
}
