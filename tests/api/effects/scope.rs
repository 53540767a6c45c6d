//! A source's mode and Connect accounts (`WEBHOOKD_SOURCE_STRIPE_LIVEMODE`,
//! `WEBHOOKD_SOURCE_STRIPE_CONNECT`, `WEBHOOKD_STRIPE_CONNECT_ACCOUNTS`):
//! test-mode money and other accounts' money never reach a wallet, on the
//! webhook, on the sweep, or on a replay.

use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::cli::events::EventsCommand;
use webhookd::cli::sweep::{StripeSweepArgs, SweepCommand};
use webhookd::clock::Clock;
use webhookd::config::{ServeSettings, StripeApiArgs, StripeScopeArgs};

use crate::fakes::stripe::{FakeStripe, event};
use crate::helpers::{TestApp, now, spawn_app_with};

/// A `payment_intent.succeeded` of `amount` cents to `user`, of mode
/// `livemode`, from connected account `account` (none: the platform's).
fn payment(event_id: &str, livemode: bool, account: Option<&str>, amount: i64) -> Value {
    let intent = json!({ "id": format!("pi_{event_id}"), "object": "payment_intent",
        "amount": amount, "amount_received": amount, "currency": "usd",
        "metadata": { "user_id": "user_1" }, "status": "succeeded" });
    let mut event = event(event_id, "payment_intent.succeeded", now() - 60, intent);
    event["livemode"] = livemode.into();
    if let Some(account) = account {
        event["account"] = account.into();
        // Listed by the platform's sweep all the same: as if the API
        // answered what it should not.
        event["x_listed_under"] = Value::Null;
    }
    event
}

fn scope(livemode: Option<&str>, connect: bool, accounts: Option<&str>) -> StripeScopeArgs {
    StripeScopeArgs {
        stripe_livemode: livemode.map(str::to_owned),
        stripe_connect: connect.then(|| "true".to_owned()),
        stripe_connect_accounts: accounts.map(str::to_owned),
    }
}

/// The app, its source `stripe` configured by `configure` (no periodic
/// sweep: a key given here is only for its mode).
async fn app(pool: PgPool, configure: impl FnOnce(&mut ServeSettings)) -> TestApp {
    spawn_app_with(pool, Clock::System, |settings| {
        settings.sweep.sweep_interval = std::time::Duration::ZERO;
        configure(settings);
    })
    .await
}

/// Delivers `event` and returns `(outcome, detail.reason)` as stored.
async fn deliver(app: &TestApp, event: &Value) -> (String, String) {
    let answer = app.post_stripe(&event.to_string()).await;
    assert_eq!(answer.status(), reqwest::StatusCode::OK, "answered 200");
    let answer: Value = answer.json().await.unwrap();
    let id = event["id"].as_str().unwrap();
    assert_eq!(answer["event_id"], id);
    let (outcome, detail) = app.event(id).await;
    (
        outcome,
        detail["reason"].as_str().unwrap_or_default().to_owned(),
    )
}

#[sqlx::test]
async fn a_live_source_rejects_test_mode_money_and_credits_live_money(pool: PgPool) {
    let app = app(pool, |s| {
        s.sweep.stripe.scope = scope(Some("true"), false, None)
    })
    .await;

    let (outcome, reason) = deliver(&app, &payment("evt_test", false, None, 1234)).await;
    assert_eq!(outcome, "rejected");
    assert!(reason.contains("test-mode event"), "{reason}");
    let mut unsaid = payment("evt_unsaid", true, None, 99);
    unsaid.as_object_mut().unwrap().remove("livemode");
    let (outcome, reason) = deliver(&app, &unsaid).await;
    assert_eq!(outcome, "rejected");
    assert!(reason.contains("does not say its mode"), "{reason}");
    assert_eq!(
        app.balance("user_1", "USD").await,
        None,
        "no test-mode money"
    );
    assert_eq!(app.count("outbox").await, 0, "nothing forwarded");

    assert_eq!(
        deliver(&app, &payment("evt_live", true, None, 500)).await.0,
        "processed"
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(500));
    // Its retry is a duplicate, as for any rejected event.
    app.deliver(
        &payment("evt_test", false, None, 1234).to_string(),
        "duplicate",
    )
    .await;
    app.assert_consistent().await;
}

#[sqlx::test]
async fn unset_the_mode_is_the_api_key_s_and_either_without_one(pool: PgPool) {
    let live_key = app(pool.clone(), |s| {
        s.sweep.stripe.stripe_api_key = Some("sk_live_its_mode_only".into());
    })
    .await;
    let (outcome, reason) = deliver(&live_key, &payment("evt_t", false, None, 4321)).await;
    assert_eq!(
        (outcome.as_str(), reason.contains("test-mode")),
        ("rejected", true)
    );
    assert_eq!(live_key.balance("user_1", "USD").await, None);
    drop(live_key);

    // No key and no setting: either mode (as before; `doctor` will warn).
    let open = app(pool, |_| {}).await;
    assert_eq!(
        deliver(&open, &payment("evt_t2", false, None, 7)).await.0,
        "processed"
    );
}

#[sqlx::test]
async fn a_connected_account_s_event_applies_only_on_a_connect_source_for_a_listed_account(
    pool: PgPool,
) {
    let platform = app(pool.clone(), |_| {}).await;
    let (outcome, reason) = deliver(
        &platform,
        &payment("evt_acct", false, Some("acct_SOMEONE_ELSE"), 4321),
    )
    .await;
    assert_eq!(outcome, "rejected");
    assert!(
        reason.contains("WEBHOOKD_SOURCE_<NAME>_CONNECT=true"),
        "{reason}"
    );
    assert_eq!(platform.balance("user_1", "USD").await, None);
    drop(platform);

    let connect = app(pool, |s| {
        s.sweep.stripe.scope = scope(None, true, Some("acct_OURS, acct_ALSO"));
    })
    .await;
    let (outcome, reason) = deliver(
        &connect,
        &payment("evt_other", false, Some("acct_SOMEONE_ELSE"), 10),
    )
    .await;
    assert_eq!(outcome, "rejected");
    assert!(reason.contains("does not list"), "{reason}");
    assert_eq!(
        deliver(&connect, &payment("evt_ours", false, Some("acct_OURS"), 20))
            .await
            .0,
        "processed"
    );
    assert_eq!(
        deliver(&connect, &payment("evt_own", false, None, 30))
            .await
            .0,
        "processed"
    );
    assert_eq!(connect.balance("user_1", "USD").await, Some(50));
    connect.assert_consistent().await;
}

#[sqlx::test]
async fn a_replay_judges_by_the_scope_as_it_is_now(pool: PgPool) {
    let app = app(pool, |s| {
        s.sweep.stripe.scope = scope(Some("true"), false, None)
    })
    .await;
    assert_eq!(
        deliver(&app, &payment("evt_test", false, None, 1234))
            .await
            .0,
        "rejected"
    );

    let replay = |livemode| EventsCommand::Replay {
        provider: "stripe".into(),
        event_id: "evt_test".into(),
        stripe: Box::new(StripeApiArgs {
            scope: scope(livemode, false, None),
            ..StripeApiArgs::default()
        }),
    };
    let mut out = Vec::new();
    let live = replay(Some("true"));
    webhookd::cli::events::run(&app.pool, &live, &[], &mut out)
        .await
        .unwrap();
    let said = String::from_utf8(out).unwrap();
    assert!(
        said.contains("rejected") && said.contains("unchanged"),
        "{said}"
    );
    assert_eq!(app.balance("user_1", "USD").await, None);

    // The console replays under the running source's scope, too.
    let live = StripeApiArgs {
        scope: scope(Some("true"), false, None),
        ..StripeApiArgs::default()
    };
    let sources = webhookd::startup::registry(&live, &[]).unwrap();
    let replayed = webhookd::ingest::replay_stored(&app.pool, &sources, None, "stripe", "evt_test")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(replayed.replayed.applied.outcome.as_str(), "rejected");
    assert_eq!(app.balance("user_1", "USD").await, None);
}

#[test]
fn a_key_of_the_other_mode_is_refused_with_the_fix() {
    let mut settings = ServeSettings::default();
    settings.sweep.stripe.stripe_api_key = Some("sk_test_wrong_mode".into());
    settings.sweep.stripe.scope = scope(Some("true"), false, None);
    let database = webhookd::config::DatabaseSettings {
        database_url: Some("postgres://localhost/webhookd".to_owned().into()),
        db_pooler: webhookd::config::DbPooler::None,
        direct_database_url: None,
        db_max_connections: 4,
        db_acquire_timeout: std::time::Duration::from_secs(1),
        db_statement_timeout: std::time::Duration::from_secs(1),
    };
    let error = webhookd::startup::validate(&settings, &database)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("STRIPE_API_KEY is a test-mode key")
            && error.contains("WEBHOOKD_SOURCE_STRIPE_LIVEMODE"),
        "{error}"
    );
    assert!(
        !error.contains("sk_test_wrong_mode"),
        "the key is never shown"
    );

    settings.sweep.stripe.scope = scope(Some("any"), false, None);
    webhookd::startup::validate(&settings, &database).unwrap();
    settings.sweep.stripe.scope = scope(None, true, Some("acct_1,not an id"));
    let error = webhookd::startup::validate(&settings, &database).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("WEBHOOKD_STRIPE_CONNECT_ACCOUNTS")
    );
}

#[sqlx::test]
async fn the_sweep_skips_events_of_the_other_mode_and_of_accounts_it_does_not_take(pool: PgPool) {
    const KEY: &str = "sk_live_sweep_scope";
    let app = app(pool, |_| {}).await;
    let fake = FakeStripe::start(
        KEY,
        vec![
            payment("evt_test_mode", false, None, 7777),
            payment("evt_someone_else", true, Some("acct_SOMEONE_ELSE"), 8888),
            payment("evt_live", true, None, 100),
        ],
    )
    .await;
    let sweep = |dry_run, api_key: &str| {
        SweepCommand::Stripe(StripeSweepArgs {
            since: std::time::Duration::from_secs(3600),
            dry_run,
            account: None,
            api: StripeApiArgs {
                stripe_api_key: Some(api_key.into()),
                stripe_api_base: fake.base_url(),
                rate: 100,
                stripe_refresh_on_tie: None,
                scope: StripeScopeArgs::default(),
            },
        })
    };
    let run = async |command: &SweepCommand| -> anyhow::Result<Value> {
        let mut out = Vec::new();
        webhookd::cli::sweep::sweep(&app.pool, command, &[], &Clock::System, &mut out).await?;
        Ok(serde_json::from_slice(&out).unwrap())
    };

    let counted = run(&sweep(true, KEY)).await.unwrap();
    assert_eq!(
        (&counted["recovered"], &counted["skipped"]),
        (&json!(1), &json!(2)),
        "{counted}"
    );
    let summary = run(&sweep(false, KEY)).await.unwrap();
    assert_eq!(
        (
            &summary["listed"],
            &summary["recovered"],
            &summary["skipped"]
        ),
        (&json!(3), &json!(1), &json!(2)),
        "{summary}"
    );
    // The live key's mode is the source's: only the live platform money.
    assert_eq!(app.balance("user_1", "USD").await, Some(100));
    assert_eq!(
        app.count("processed_events").await,
        1,
        "the others are left alone"
    );

    // A key of the other mode than the one set is refused before any request.
    let mut wrong = sweep(false, "sk_test_other_mode");
    if let SweepCommand::Stripe(args) = &mut wrong {
        args.api.scope = scope(Some("true"), false, None);
    }
    let before = fake.requests().len();
    let error = run(&wrong).await.unwrap_err().to_string();
    assert!(error.contains("test-mode key"), "{error}");
    assert_eq!(fake.requests().len(), before);
}
