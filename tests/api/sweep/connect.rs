//! Stripe Connect: events of connected accounts (with `account`) are
//! stored with their account, shown by `explain`, and passed on in outbox
//! rows; `webhookd sweep stripe --account` and the periodic sweep of each
//! account in `WEBHOOKD_STRIPE_CONNECT_ACCOUNTS` list each account's
//! events with `Stripe-Account`, deduped against the webhooks.

use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::cli::sweep::{StripeSweepArgs, SweepCommand};
use webhookd::clock::Clock;
use webhookd::config::{ServeSettings, StripeApiArgs, StripeScopeArgs};

use crate::fakes::stripe::{FakeStripe, event};
use crate::helpers::{TestApp, now, route_app_with};

const KEY: &str = "rk_test_connect_key_4242";

/// A succeeded payment intent of `user` on a connected account's event,
/// as Stripe sends and lists it: the envelope names the `account`.
fn connected(
    event_id: &str,
    account: Option<&str>,
    intent: &str,
    user: &str,
    amount: i64,
) -> Value {
    let object = json!({ "id": intent, "object": "payment_intent", "amount": amount,
        "amount_received": amount, "currency": "usd", "metadata": { "user_id": user },
        "status": "succeeded" });
    let mut event = event(event_id, "payment_intent.succeeded", now() - 600, object);
    if let Some(account) = account {
        event["account"] = json!(account);
    }
    event
}

/// The Stripe API arguments with the fake as its base, and the source
/// `stripe` taking connected accounts' events (`accounts`: only those).
fn api_args(fake: &FakeStripe, accounts: Option<&str>) -> StripeApiArgs {
    StripeApiArgs {
        stripe_api_key: Some(KEY.into()),
        stripe_api_base: fake.base_url(),
        rate: 100,
        stripe_refresh_on_tie: None,
        scope: StripeScopeArgs {
            stripe_connect: Some("true".to_owned()),
            stripe_connect_accounts: accounts.map(str::to_owned),
            ..StripeScopeArgs::default()
        },
    }
}

async fn app(pool: PgPool, fake: &FakeStripe) -> TestApp {
    let scope = api_args(fake, None).scope;
    route_app_with(pool, Clock::System, move |settings| {
        settings.sweep.stripe.scope = scope;
    })
    .await
}

/// `webhookd sweep stripe [--account ACCOUNT]`'s JSON line.
async fn sweep(
    app: &TestApp,
    fake: &FakeStripe,
    account: Option<&str>,
    scope: StripeScopeArgs,
) -> anyhow::Result<Value> {
    let command = SweepCommand::Stripe(StripeSweepArgs {
        since: std::time::Duration::from_secs(3600),
        dry_run: false,
        account: account.map(str::to_owned),
        api: StripeApiArgs {
            scope,
            ..api_args(fake, None)
        },
    });
    let mut out = Vec::new();
    webhookd::cli::sweep::sweep(&app.pool, &command, &[], &Clock::System, &mut out).await?;
    Ok(serde_json::from_str(String::from_utf8(out).unwrap().trim()).unwrap())
}

/// `(event_id, account, outcome, received_via)` of every stored event.
async fn stored(app: &TestApp) -> Vec<(String, Option<String>, String, String)> {
    sqlx::query_as(
        "select event_id, account, outcome, received_via from processed_events order by event_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

#[sqlx::test]
async fn a_connected_accounts_event_keeps_its_account_in_the_row_the_outbox_and_explain(
    pool: PgPool,
) {
    let fake = FakeStripe::start(KEY, vec![]).await;
    let app = app(pool, &fake).await;
    for (event_id, account, intent) in [
        ("evt_a1", Some("acct_1"), "pi_a1"),
        ("evt_a2", Some("acct_2"), "pi_a2"),
        ("evt_own", None, "pi_own"),
    ] {
        let body = connected(event_id, account, intent, "user_1", 500).to_string();
        app.deliver(&body, "processed").await;
    }
    assert_eq!(
        stored(&app).await,
        [
            (
                "evt_a1".into(),
                Some("acct_1".into()),
                "processed".into(),
                "webhook".into()
            ),
            (
                "evt_a2".into(),
                Some("acct_2".into()),
                "processed".into(),
                "webhook".into()
            ),
            ("evt_own".into(), None, "processed".into(), "webhook".into()),
        ]
    );
    let accounts: Vec<(String, Option<String>)> = sqlx::query_as(
        "select event_id, payload->>'account' from outbox where topic = 'wallet.credited' order by event_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        accounts,
        [
            ("evt_a1".into(), Some("acct_1".into())),
            ("evt_a2".into(), Some("acct_2".into())),
            ("evt_own".into(), None),
        ]
    );
    let mut out = Vec::new();
    assert!(
        webhookd::cli::explain::run(&app.pool, "pi_a1", &mut out)
            .await
            .unwrap()
    );
    let story = String::from_utf8(out).unwrap();
    assert!(
        story.contains(
            "(payment_intent.succeeded, connected account acct_1, API version 2024-06-20)"
        ),
        "{story}"
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_sweep_per_account_lists_with_stripe_account_and_dedupes_against_the_webhooks(
    pool: PgPool,
) {
    let fake = FakeStripe::start(
        KEY,
        vec![
            connected("evt_1_seen", Some("acct_1"), "pi_1a", "user_1", 100),
            connected("evt_1_lost", Some("acct_1"), "pi_1b", "user_1", 200),
            connected("evt_2_lost", Some("acct_2"), "pi_2a", "user_2", 300),
            connected("evt_platform", None, "pi_p", "user_3", 400),
        ],
    )
    .await;
    let app = app(pool, &fake).await;
    let seen = connected("evt_1_seen", Some("acct_1"), "pi_1a", "user_1", 100).to_string();
    app.deliver(&seen, "processed").await;

    let scope = api_args(&fake, None).scope;
    let first = sweep(&app, &fake, Some("acct_1"), scope.clone())
        .await
        .unwrap();
    assert_eq!(first["account"], "acct_1");
    assert_eq!(
        (first["listed"].as_u64(), first["recovered"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(first["already_seen"], 1);
    let second = sweep(&app, &fake, Some("acct_2"), scope.clone())
        .await
        .unwrap();
    assert_eq!(
        (second["listed"].as_u64(), second["recovered"].as_u64()),
        (Some(1), Some(1))
    );
    // Every list request of an account's sweep named it, and only it.
    let accounts: Vec<Option<String>> = fake.requests().into_iter().map(|r| r.account).collect();
    let first_requests = first["requests"].as_u64().unwrap() as usize;
    let second_requests = second["requests"].as_u64().unwrap() as usize;
    assert_eq!(accounts.len(), first_requests + second_requests);
    let (of_first, of_second) = accounts.split_at(first_requests);
    assert!(
        of_first.iter().all(|a| a.as_deref() == Some("acct_1")),
        "{accounts:?}"
    );
    assert!(
        of_second.iter().all(|a| a.as_deref() == Some("acct_2")),
        "{accounts:?}"
    );
    // The platform's own event belongs to the platform's sweep only.
    assert_eq!(app.balance("user_3", "USD").await, None);
    // A webhook that arrives after the sweep is a duplicate.
    let late = connected("evt_2_lost", Some("acct_2"), "pi_2a", "user_2", 300).to_string();
    app.deliver(&late, "duplicate").await;

    assert_eq!(
        stored(&app).await,
        [
            (
                "evt_1_lost".into(),
                Some("acct_1".into()),
                "processed".into(),
                "sweep".into()
            ),
            (
                "evt_1_seen".into(),
                Some("acct_1".into()),
                "processed".into(),
                "webhook".into()
            ),
            (
                "evt_2_lost".into(),
                Some("acct_2".into()),
                "processed".into(),
                "sweep".into()
            ),
        ]
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(300));
    assert_eq!(app.balance("user_2", "USD").await, Some(300));

    // A source that takes no connected account's events cannot be swept
    // for one, and says how to make it.
    let error = sweep(&app, &fake, Some("acct_1"), StripeScopeArgs::default())
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("WEBHOOKD_SOURCE_STRIPE_CONNECT=true"),
        "{error}"
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn an_account_sweep_takes_unnamed_events_as_that_accounts_and_skips_anothers(pool: PgPool) {
    let fake = FakeStripe::start(KEY, vec![]).await;
    // Listed for acct_1 without an `account`: acct_1's.
    let mut unnamed = connected("evt_unnamed", None, "pi_unnamed", "user_1", 50);
    unnamed["x_listed_under"] = json!("acct_1");
    fake.add(unnamed);
    // Listed for acct_1, yet naming acct_2: not to be believed.
    let mut foreign = connected("evt_foreign", Some("acct_2"), "pi_foreign", "user_1", 700);
    foreign["x_listed_under"] = json!("acct_1");
    fake.add(foreign);
    let app = app(pool, &fake).await;
    let scope = api_args(&fake, None).scope;
    let summary = sweep(&app, &fake, Some("acct_1"), scope).await.unwrap();
    assert_eq!(
        (summary["recovered"].as_u64(), summary["skipped"].as_u64()),
        (Some(1), Some(1))
    );
    // The foreign one is skipped, as an event the source does not take:
    // nothing recorded, nothing moved.
    assert_eq!(
        stored(&app).await,
        [(
            "evt_unnamed".into(),
            Some("acct_1".into()),
            "processed".into(),
            "sweep".into()
        )]
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(50));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn the_periodic_sweep_reads_each_listed_account_on_its_own(pool: PgPool) {
    let fake = FakeStripe::start(
        KEY,
        vec![
            connected("evt_p_1", Some("acct_1"), "pi_p1", "user_1", 100),
            connected("evt_p_2", Some("acct_2"), "pi_p2", "user_2", 200),
            connected("evt_p_3", Some("acct_3"), "pi_p3", "user_3", 400),
            connected("evt_p_own", None, "pi_pown", "user_4", 800),
        ],
    )
    .await;
    let app = app(pool, &fake).await;
    let mut settings = ServeSettings::default();
    settings.sweep.stripe = api_args(&fake, Some("acct_1,acct_2"));
    let mut sweeper = webhookd::startup::sweeper(&settings, app.pool.clone(), Clock::System)
        .unwrap()
        .expect("the sweep is on");
    sweeper.run_once().await;

    // The platform and the two accounts listed; acct_3 is not.
    assert_eq!(app.balance("user_1", "USD").await, Some(100));
    assert_eq!(app.balance("user_2", "USD").await, Some(200));
    assert_eq!(app.balance("user_3", "USD").await, None);
    assert_eq!(app.balance("user_4", "USD").await, Some(800));
    let rows: Vec<(String, bool)> = sqlx::query_as(
        "select provider, last_success_at is not null from sweeps order by provider",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            ("stripe".into(), true),
            ("stripe:acct_1".into(), true),
            ("stripe:acct_2".into(), true),
        ]
    );
    // Each recovery announces its own delivery gap.
    let gaps: Vec<String> = sqlx::query_scalar(
        "select event_id from processed_events where event_type = 'webhookd.delivery_gap' order by 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(gaps.len(), 3, "{gaps:?}");
    assert!(gaps.iter().any(|id| id.starts_with("delivery_gap:acct_1:")));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn an_account_sweeps_event_released_later_keeps_its_account(pool: PgPool) {
    // The sweep of acct_1 finds a refund whose credit has not arrived: it
    // waits. Its payload names no account; the sweep knew whose it was.
    let mut refund: Value = serde_json::from_str(&crate::helpers::charge(
        "evt_refund_1",
        "charge.refunded",
        "ch_1",
        "pi_r1",
        500,
        200,
    ))
    .unwrap();
    refund["created"] = json!(now() - 600);
    refund["x_listed_under"] = json!("acct_1");
    let fake = FakeStripe::start(KEY, vec![refund]).await;
    let app = app(pool, &fake).await;
    let scope = api_args(&fake, None).scope;
    let summary = sweep(&app, &fake, Some("acct_1"), scope).await.unwrap();
    assert_eq!(summary["deferred"], 1, "{summary}");

    // The credit arrives on the Connect endpoint and releases the refund.
    let credit = connected("evt_credit_1", Some("acct_1"), "pi_r1", "user_1", 500).to_string();
    app.deliver(&credit, "processed").await;
    let (outcome, _) = app.event("evt_refund_1").await;
    assert_eq!(outcome, "processed");
    let debited: Option<String> = sqlx::query_scalar(
        "select payload->>'account' from outbox where event_id = 'evt_refund_1' and topic = 'wallet.debited'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(debited.as_deref(), Some("acct_1"));
    assert_eq!(app.balance("user_1", "USD").await, Some(300));
    app.assert_consistent().await;
}
