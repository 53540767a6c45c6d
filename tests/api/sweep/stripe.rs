//! `webhookd sweep stripe`, `webhookd import` and the periodic sweep against
//! a fake of Stripe's Events API over real HTTP, with effects asserted in
//! the database.

use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::api::{Api, Auth};
use webhookd::cli::sweep::{ImportArgs, ImportSource, StripeSweepArgs, SweepCommand};
use webhookd::clock::Clock;
use webhookd::config::StripeApiArgs;
use webhookd::sweep::schedule::{Sweeper, Target};

use crate::fakes::stripe::{FakeStripe, event};
use crate::helpers::{TestApp, now, spawn_app};

const KEY: &str = "rk_test_sweep_key_4242";

fn intent(id: &str, user: &str, amount: i64) -> Value {
    json!({ "id": id, "object": "payment_intent", "amount": amount, "amount_received": amount,
            "currency": "usd", "metadata": { "user_id": user }, "status": "succeeded" })
}

fn refunded_charge(id: &str, intent: &str, amount: i64, refunded: i64) -> Value {
    json!({ "id": id, "object": "charge", "amount": amount, "amount_refunded": refunded,
            "currency": "usd", "payment_intent": intent, "metadata": { "user_id": "user_1" },
            "status": "succeeded", "created": now() })
}

fn subscription(id: &str, status: &str) -> Value {
    json!({ "id": id, "object": "subscription", "customer": "cus_1", "status": status,
            "metadata": { "user_id": "user_1" } })
}

fn api_args(fake: &FakeStripe, key: &str) -> StripeApiArgs {
    StripeApiArgs {
        stripe_api_key: Some(key.into()),
        stripe_api_base: fake.base_url(),
        rate: 100,
        stripe_refresh_on_tie: None,
        scope: Default::default(),
    }
}

/// Runs `webhookd sweep stripe` and returns its JSON line.
async fn sweep(app: &TestApp, fake: &FakeStripe, dry_run: bool) -> anyhow::Result<Value> {
    let command = SweepCommand::Stripe(StripeSweepArgs {
        since: std::time::Duration::from_secs(72 * 3600),
        dry_run,
        account: None,
        api: api_args(fake, KEY),
    });
    let mut out = Vec::new();
    webhookd::cli::sweep::sweep(&app.pool, &command, &[], &Clock::System, &mut out).await?;
    let line = String::from_utf8(out).unwrap();
    Ok(serde_json::from_str(line.trim()).unwrap())
}

impl TestApp {
    async fn received_via(&self, event_id: &str) -> String {
        sqlx::query_scalar("select received_via from processed_events where event_id = $1")
            .bind(event_id)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }
}

/// Waits (bounded) until a connection of this test's database waits on a lock.
async fn until_blocked_on_a_lock(pool: &PgPool) {
    for _ in 0..400 {
        let blocked: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if blocked > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the sweep never reached the held wallet");
}

/// A webhook of a listed event: the same bytes Stripe would have posted.
fn webhook(listed: &Value) -> String {
    listed.to_string()
}

#[sqlx::test]
async fn a_sweep_applies_what_was_never_delivered_and_a_later_webhook_is_a_duplicate(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 3600;
    let delivered = event(
        "evt_1",
        "payment_intent.succeeded",
        t,
        intent("pi_1", "user_1", 1000),
    );
    let lost = [
        event(
            "evt_2",
            "payment_intent.succeeded",
            t + 1,
            intent("pi_2", "user_1", 500),
        ),
        event(
            "evt_3",
            "charge.refunded",
            t + 2,
            refunded_charge("ch_2", "pi_2", 500, 200),
        ),
        event(
            "evt_4",
            "customer.subscription.updated",
            t + 3,
            subscription("sub_1", "active"),
        ),
    ];
    app.deliver(&webhook(&delivered), "processed").await;
    let mut listed = vec![delivered];
    listed.extend(lost.iter().cloned());
    let fake = FakeStripe::start(KEY, listed).await;

    let summary = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(
        (
            &summary["listed"],
            &summary["recovered"],
            &summary["already_seen"],
            &summary["skipped"]
        ),
        (&json!(4), &json!(3), &json!(1), &json!(0)),
        "{summary}"
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(1000 + 500 - 200));
    assert_eq!(app.received_via("evt_1").await, "webhook");
    for id in ["evt_2", "evt_3", "evt_4"] {
        assert_eq!(app.received_via(id).await, "sweep");
        assert_eq!(app.event(id).await.0, "processed");
    }
    // The sweep asked for what webhookd handles, in the window, 100 a page.
    let request = &fake.requests()[0];
    assert!(request.authorized);
    let types: Vec<&str> = request
        .query
        .iter()
        .filter(|(k, _)| k == "types[]")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(types, webhookd::effects::stripe::HANDLED_TYPES);
    assert!(request.query.contains(&("limit".into(), "100".into())));
    assert!(request.query.iter().any(|(k, _)| k == "created[gte]"));

    // The webhooks that were lost arrive after all: nothing twice.
    for listed in &lost {
        app.deliver(&webhook(listed), "duplicate").await;
    }
    assert_eq!(app.balance("user_1", "USD").await, Some(1300));
    // A second sweep finds everything seen.
    let again = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(
        (&again["recovered"], &again["already_seen"]),
        (&json!(0), &json!(4))
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn only_what_applied_an_effect_counts_as_recovered(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 3600;
    let credited = event(
        "evt_c1",
        "payment_intent.succeeded",
        t,
        intent("pi_c1", "user_1", 1000),
    );
    app.deliver(&webhook(&credited), "processed").await;
    // Never delivered, but their effects are another event's (the credit
    // of the intent each charge paid) or older than the stored state.
    let mut charge = refunded_charge("ch_c1", "pi_c1", 1000, 0);
    charge["status"] = "succeeded".into();
    let fake = FakeStripe::start(
        KEY,
        vec![
            credited,
            event("evt_c2", "charge.succeeded", t + 1, charge),
            event(
                "evt_c3",
                "payment_intent.succeeded",
                t + 2,
                intent("pi_c1", "user_1", 1000),
            ),
            event(
                "evt_c4",
                "payment_intent.succeeded",
                t + 3,
                intent("pi_c4", "user_1", 50),
            ),
        ],
    )
    .await;
    let summary = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(
        (
            &summary["recovered"],
            &summary["ignored"],
            &summary["already_seen"]
        ),
        (&json!(1), &json!(2), &json!(1)),
        "{summary}"
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(1050));
}

#[sqlx::test]
async fn a_dry_run_counts_and_writes_nothing(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 60;
    let fake = FakeStripe::start(
        KEY,
        vec![
            event(
                "evt_d1",
                "payment_intent.succeeded",
                t,
                intent("pi_d1", "user_1", 100),
            ),
            event(
                "evt_d2",
                "invoice.paid",
                t + 1,
                json!({ "id": "in_1", "customer": "cus_1" }),
            ),
        ],
    )
    .await;
    let summary = sweep(&app, &fake, true).await.unwrap();
    assert_eq!(
        (&summary["recovered"], &summary["dry_run"]),
        (&json!(2), &json!(true))
    );
    app.assert_nothing_written().await;
}

#[sqlx::test]
async fn pages_are_followed_and_events_applied_oldest_first(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 7200;
    // 240 updates of one subscription, a second apart, then a credit: had
    // they been applied newest first, the older updates would be superseded.
    let mut listed: Vec<Value> = (0..240)
        .map(|n| {
            let status = if n == 239 { "canceled" } else { "active" };
            event(
                &format!("evt_s{n:03}"),
                "customer.subscription.updated",
                t + n,
                subscription("sub_o", status),
            )
        })
        .collect();
    listed.push(event(
        "evt_c",
        "payment_intent.succeeded",
        t + 300,
        intent("pi_o", "user_o", 42),
    ));
    let fake = FakeStripe::start(KEY, listed).await;
    let summary = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(
        (&summary["listed"], &summary["pages"]),
        (&json!(241), &json!(3))
    );
    let superseded: i64 =
        sqlx::query_scalar("select count(*) from processed_events where outcome = 'superseded'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(superseded, 0, "applied oldest first");
    let status: String = sqlx::query_scalar("select status from subscriptions")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(status, "canceled");
    assert_eq!(app.balance("user_o", "USD").await, Some(42));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn rate_limits_and_server_errors_are_retried_and_a_refused_key_stops_at_once(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 60;
    let fake = FakeStripe::start(
        KEY,
        vec![event(
            "evt_r1",
            "payment_intent.succeeded",
            t,
            intent("pi_r1", "user_1", 100),
        )],
    )
    .await;
    fake.fail_next(429, 1, Some(1));
    fake.fail_next(500, 1, None);
    let summary = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(
        (&summary["recovered"], &summary["requests"]),
        (&json!(1), &json!(3))
    );
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [429, 500, 200]);

    // A wrong key: no retry, a message that says what to check.
    let command = SweepCommand::Stripe(StripeSweepArgs {
        since: std::time::Duration::from_secs(3600),
        dry_run: false,
        account: None,
        api: api_args(&fake, "rk_test_wrong"),
    });
    let error =
        webhookd::cli::sweep::sweep(&app.pool, &command, &[], &Clock::System, &mut Vec::new())
            .await
            .unwrap_err();
    let message = format!("{error:#}");
    assert!(
        message.contains("stripe refused the API key (401)"),
        "{message}"
    );
    assert!(message.contains("STRIPE_API_KEY"), "{message}");
    assert!(!message.contains("rk_test_wrong"), "the key is never shown");
    assert_eq!(fake.requests().len(), 4, "the refusal is not retried");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_sweep_stopped_half_way_and_run_again_applies_each_event_once(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 600;
    let listed: Vec<Value> = (0..6)
        .map(|n| {
            let user = if n == 3 { "user_held" } else { "user_free" };
            event(
                &format!("evt_h{n}"),
                "payment_intent.succeeded",
                t + n,
                intent(&format!("pi_h{n}"), user, 10),
            )
        })
        .collect();
    let fake = FakeStripe::start(KEY, listed).await;
    app.deliver(
        &webhook(&event(
            "evt_seed",
            "payment_intent.succeeded",
            t - 1,
            intent("pi_seed", "user_held", 1),
        )),
        "processed",
    )
    .await;
    // Hold the fourth event's wallet: the sweep stops inside its transaction.
    let mut holder = app.pool.begin().await.unwrap();
    sqlx::query("select 1 from wallets where user_id = 'user_held' for update")
        .execute(&mut *holder)
        .await
        .unwrap();
    let running = {
        let (pool, base) = (app.pool.clone(), fake.base_url());
        tokio::spawn(async move {
            let command = SweepCommand::Stripe(StripeSweepArgs {
                since: std::time::Duration::from_secs(3600),
                dry_run: false,
                account: None,
                api: StripeApiArgs {
                    stripe_api_key: Some(KEY.into()),
                    stripe_api_base: base,
                    rate: 100,
                    stripe_refresh_on_tie: None,
                    scope: Default::default(),
                },
            });
            webhookd::cli::sweep::sweep(&pool, &command, &[], &Clock::System, &mut Vec::new()).await
        })
    };
    until_blocked_on_a_lock(&app.pool).await;
    running.abort();
    let _ = running.await;
    holder.rollback().await.unwrap();
    let applied: i64 =
        sqlx::query_scalar("select count(*) from wallet_entries where source_ref like 'pi_h%'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(applied, 3, "the first three were applied before the stop");

    let summary = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(
        (&summary["recovered"], &summary["already_seen"]),
        (&json!(3), &json!(3))
    );
    assert_eq!(app.balance("user_free", "USD").await, Some(50));
    assert_eq!(app.balance("user_held", "USD").await, Some(11));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn imported_events_are_never_applied_and_their_redelivery_is_a_duplicate(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now() - 600;
    let listed = vec![
        event(
            "evt_i1",
            "payment_intent.succeeded",
            t,
            intent("pi_i1", "user_1", 700),
        ),
        event(
            "evt_i2",
            "customer.subscription.updated",
            t + 1,
            subscription("sub_i", "active"),
        ),
    ];
    let fake = FakeStripe::start(KEY, listed.clone()).await;
    let import = |dry_run| ImportArgs {
        source: Some(ImportSource::Stripe),
        provider: None,
        from_csv: None,
        since: std::time::Duration::from_secs(3600),
        dry_run,
        api: api_args(&fake, KEY),
        paypal: crate::sweep::paypal::unset(),
    };
    let mut out = Vec::new();
    webhookd::cli::sweep::import(&app.pool, &import(true), &[], &Clock::System, &mut out)
        .await
        .unwrap();
    let dry: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (&dry["imported"], &dry["dry_run"]),
        (&json!(2), &json!(true))
    );
    app.assert_nothing_written().await;

    let mut out = Vec::new();
    webhookd::cli::sweep::import(&app.pool, &import(false), &[], &Clock::System, &mut out)
        .await
        .unwrap();
    let done: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        (&done["imported"], &done["already_seen"]),
        (&json!(2), &json!(0)),
        "{done}"
    );
    assert_eq!(app.event("evt_i1").await.0, "imported");
    assert_eq!(app.received_via("evt_i1").await, "import");
    for listed in &listed {
        app.deliver(&webhook(listed), "duplicate").await;
    }
    // The import recorded its cut-over: no sweep reads before it.
    let swept = sweep(&app, &fake, false).await.unwrap();
    assert_eq!(
        (&swept["listed"], &swept["recovered"]),
        (&json!(0), &json!(0)),
        "{swept}"
    );
    assert!(swept["since"].as_i64().unwrap() >= now() - 5, "{swept}");
    assert_eq!(app.count("wallet_entries").await, 0, "nothing applied");
    assert_eq!(app.count("subscriptions").await, 0);
    assert_eq!(app.count("outbox").await, 0);

    // From a file: ids with optional columns, idempotent.
    let dir = std::env::temp_dir().join(format!("webhookd-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{}.csv", now()));
    std::fs::write(&file, "event_id,event_type,processed_at\nevt_f1,payment.captured,2026-11-01T10:00:00Z\nevt_f2\nevt_i1\n").unwrap();
    let from_file = ImportArgs {
        source: None,
        provider: Some("Razorpay".into()),
        from_csv: Some(file.clone()),
        since: std::time::Duration::from_secs(3600),
        dry_run: false,
        api: api_args(&fake, KEY),
        paypal: crate::sweep::paypal::unset(),
    };
    for expected in [json!(3), json!(0)] {
        let mut out = Vec::new();
        webhookd::cli::sweep::import(&app.pool, &from_file, &[], &Clock::System, &mut out)
            .await
            .unwrap();
        let line: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (&line["provider"], &line["rows"], &line["imported"]),
            (&json!("razorpay"), &json!(3), &expected),
            "{line}"
        );
    }
    std::fs::remove_file(&file).unwrap();
    let (outcome, _) = app.event_of("razorpay", "evt_f1").await;
    assert_eq!(outcome, "imported");
    app.assert_consistent().await;
}

fn sweeper(app: &TestApp, fake: &FakeStripe) -> Sweeper {
    let api = Api::new(
        "stripe",
        &fake.base_url(),
        &Auth::Bearer(KEY.into()),
        100,
        "check it",
    )
    .unwrap();
    let target = Target {
        provider: "stripe",
        api,
        window: std::time::Duration::from_secs(72 * 3600),
        source: webhookd::sweep::Swept::default(),
    };
    Sweeper::new(
        app.pool.clone(),
        vec![target],
        std::time::Duration::from_secs(600),
        Clock::System,
    )
}

#[sqlx::test]
async fn the_periodic_sweep_recovers_announces_the_gap_and_resumes_from_its_checkpoint(
    pool: PgPool,
) {
    let app = spawn_app(pool).await;
    let t = now() - 7200;
    let fake = FakeStripe::start(
        KEY,
        vec![event(
            "evt_p1",
            "payment_intent.succeeded",
            t,
            intent("pi_p1", "user_1", 300),
        )],
    )
    .await;
    let mut first = sweeper(&app, &fake);
    first.run_once().await;
    assert_eq!(app.balance("user_1", "USD").await, Some(300));
    let gap = app.delivery_gap().await;
    assert_eq!(
        (&gap["provider"], &gap["count"]),
        (&json!("stripe"), &json!(1)),
        "{gap}"
    );
    let (swept_until, result): (i64, Value) = sqlx::query_as(
        "select extract(epoch from swept_until)::bigint, last_result from sweeps where provider = 'stripe'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    // The run leaves the last minutes alone: their webhooks may be on the way.
    assert!(
        swept_until >= now() - 305 && swept_until <= now() - 295,
        "checkpoint at the run's end"
    );
    assert_eq!(result["recovered"], 1);
    let metrics = app.metrics().await;
    let gauge = "webhookd_sweep_last_success_timestamp_seconds{provider=\"stripe\"} ";
    assert!(metrics.contains(gauge), "{metrics}");

    // The next run starts at the checkpoint less the overlap, not 72 h back.
    first.run_once().await;
    let since: i64 = fake
        .requests()
        .last()
        .unwrap()
        .query
        .iter()
        .find(|(k, _)| k == "created[gte]")
        .unwrap()
        .1
        .parse()
        .unwrap();
    assert!(
        since >= swept_until - 600 && since <= swept_until - 590,
        "{since} vs {swept_until}"
    );
    assert_eq!(
        app.count("outbox").await,
        2,
        "one credit, one gap: no new gap"
    );

    // While one process holds the lease, another does not sweep.
    sqlx::query("update sweeps set leased_until = now() + interval '1 minute'")
        .execute(&app.pool)
        .await
        .unwrap();
    let before = fake.requests().len();
    sweeper(&app, &fake).run_once().await;
    assert_eq!(
        fake.requests().len(),
        before,
        "the lease keeps a second sweeper out"
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_lease_is_advanced_finished_and_given_back_by_its_holder_only(pool: PgPool) {
    use webhookd::sweep::store;
    let app = spawn_app(pool).await;
    let lease = std::time::Duration::from_secs(60);
    let mine = store::lease(&app.pool, "stripe", lease)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store::lease(&app.pool, "stripe", lease)
            .await
            .unwrap()
            .is_none()
    );
    // Its lease expires and another process takes over.
    sqlx::query("update sweeps set leased_until = now() - interval '1 second'")
        .execute(&app.pool)
        .await
        .unwrap();
    let theirs = store::lease(&app.pool, "stripe", lease)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(mine.holder, theirs.holder);
    // The first one's late writes change nothing: it must stop.
    assert!(
        !store::advance(&app.pool, "stripe", &mine.holder, now(), lease)
            .await
            .unwrap()
    );
    store::release(&app.pool, "stripe", &mine.holder)
        .await
        .unwrap();
    store::finish(&app.pool, "stripe", &mine.holder, true, &json!({}))
        .await
        .unwrap();
    let (holder, swept): (Option<String>, Option<i64>) =
        sqlx::query_as("select holder::text, extract(epoch from swept_until)::bigint from sweeps")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        (holder.as_deref(), swept),
        (Some(theirs.holder.as_str()), None)
    );
    assert!(
        store::advance(&app.pool, "stripe", &theirs.holder, now(), lease)
            .await
            .unwrap()
    );
}
