//! The event store's months: dedupe across a month boundary, retention by
//! dropping whole months while ingest goes on, payload retention, and the
//! migration of a populated database to partitions. Months are placed by
//! an injected time: rows are moved into the partition of a month long
//! past, as if received then, and prune runs with a fixed clock.

use std::borrow::Cow;

use futures_util::future::join_all;
use reqwest::StatusCode;
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use webhookd::cli;
use webhookd::cli::args::RetentionArgs;
use webhookd::cli::prune::{PruneArgs, Pruned};
use webhookd::clock::Clock;
use webhookd::db::MIGRATOR;
use webhookd::db::partitions;
use webhookd::events::{self, partitions::TABLE};
use webhookd::ingest::{ReplayRefused, replay_stored};
use webhookd::outbox::store::retention;
use webhookd::providers::Providers;

use crate::helpers::{
    TestApp, charge, invoice_paid, payment_intent_succeeded, spawn_app, until_waiting_on_locks,
};

const RETENTION: RetentionArgs = RetentionArgs { retention_days: 30 };

fn prune_args(payload_retention_days: Option<u32>) -> PruneArgs {
    PruneArgs {
        older_than: None,
        batch: 25,
        payload_retention_days,
        retention: RETENTION,
    }
}

/// Unix seconds of the database's now.
async fn db_now(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select extract(epoch from now())::bigint")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Unix seconds of `day` (1-based) of the month `months` before the
/// current one (UTC), at `time`: always more than 30 days ago for 3 and more.
async fn months_ago(pool: &PgPool, months: i32, day: i32, time: &str) -> i64 {
    sqlx::query_scalar(
        "select extract(epoch from (date_trunc('month', now() at time zone 'UTC')
                 - make_interval(months => $1) + make_interval(days => $2 - 1) + $3::time)
                 at time zone 'UTC')::bigint",
    )
    .bind(months)
    .bind(day)
    .bind(time)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Moves the events `condition` selects into the partition of the month
/// of `at` (Unix seconds), as received then.
async fn received_at(pool: &PgPool, condition: &str, at: i64) {
    #[allow(clippy::cast_precision_loss)]
    partitions::ensure(pool, TABLE, Some(at as f64))
        .await
        .unwrap();
    // The condition comes from the tests themselves, never from input.
    sqlx::query(&format!(
        "update processed_events set received_at = to_timestamp($1),
             month = (date_trunc('month', to_timestamp($1) at time zone 'UTC'))::date
         where {condition}"
    ))
    .bind(at)
    .execute(pool)
    .await
    .unwrap();
}

/// Moves the outbox rows `condition` selects, and their attempts, into the
/// partitions of the month of `at` (Unix seconds), as written then.
async fn outbox_written_at(pool: &PgPool, condition: &str, at: i64) {
    for table in [retention::TABLE, retention::ATTEMPTS] {
        #[allow(clippy::cast_precision_loss)]
        partitions::ensure(pool, table, Some(at as f64))
            .await
            .unwrap();
    }
    // The condition comes from the tests themselves, never from input.
    sqlx::raw_sql(&format!(
        "create temporary table moving as select id, month from outbox where {condition};
         update outbox set created_at = to_timestamp({at}),
             month = (date_trunc('month', to_timestamp({at}) at time zone 'UTC'))::date
         where id in (select id from moving);
         update outbox_attempts a set month = (date_trunc('month', to_timestamp({at}) at time zone 'UTC'))::date
         from moving m where a.outbox_id = m.id and a.month = m.month;
         drop table moving;"
    ))
    .execute(pool)
    .await
    .unwrap();
}

/// The partition each of `event_ids` is in.
async fn partition_of(pool: &PgPool, event_id: &str) -> Option<String> {
    sqlx::query_scalar(
        "select tableoid::regclass::text from processed_events where provider = 'stripe' and event_id = $1",
    )
    .bind(event_id)
    .fetch_optional(pool)
    .await
    .unwrap()
}

async fn partitions_of(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "select relid::regclass::text from pg_partition_tree('processed_events') where level = 1 order by 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn prune(pool: &PgPool, args: &PruneArgs, now: i64) -> (Pruned, String) {
    let mut out = Vec::new();
    let pruned = cli::prune::run(pool, args, &Clock::Fixed(now), &mut out)
        .await
        .unwrap();
    (pruned, String::from_utf8(out).unwrap())
}

#[sqlx::test]
async fn the_months_ahead_exist_and_making_sure_again_changes_nothing(pool: PgPool) {
    let now = db_now(&pool).await;
    let current: String = sqlx::query_scalar(
        "select 'processed_events_' || to_char(now() at time zone 'UTC', 'YYYY_MM')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    #[allow(clippy::cast_precision_loss)]
    let again = partitions::ensure(&pool, TABLE, Some(now as f64))
        .await
        .unwrap();
    assert!(again.is_empty(), "the migration made them: {again:?}");
    let made = partitions_of(&pool).await;
    assert!(made.contains(&current), "{made:?}");
    assert_eq!(made.len(), 4, "legacy, this month and 2 ahead: {made:?}");
    // A clock a year on: its month and the two after it are made.
    let later = partitions::ensure(&pool, TABLE, Some(now as f64 + 365.0 * 86_400.0))
        .await
        .unwrap();
    assert_eq!(later.len(), 3, "{later:?}");
}

/// `body` as its provider would have stamped it at `at` (Unix seconds):
/// what a copy of an event first received then carries.
fn created_at(body: &str, at: i64) -> String {
    let mut event: serde_json::Value = serde_json::from_str(body).unwrap();
    event["created"] = at.into();
    event.to_string()
}

#[sqlx::test]
async fn a_copy_in_a_later_month_is_a_duplicate_sequentially_and_concurrently(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    // Created and first received in the last second of a month long past.
    let boundary = months_ago(&pool, 3, 1, "00:00").await - 1;
    let bodies: Vec<String> = (0..6)
        .map(|n| {
            let body =
                payment_intent_succeeded(&format!("evt_{n}"), &format!("pi_{n}"), "user_1", 100);
            created_at(&body, boundary)
        })
        .collect();
    for body in &bodies {
        app.deliver(body, "processed").await;
    }
    received_at(&pool, "event_id like 'evt_%'", boundary).await;
    let old = partition_of(&pool, "evt_0").await.unwrap();

    // Sequentially, then 6 copies of each at once.
    app.deliver(&bodies[0], "duplicate").await;
    let answers = join_all(bodies.iter().flat_map(|body| {
        let app: &TestApp = &app;
        (0..6).map(move |_| async move {
            app.post_stripe(body)
                .await
                .json::<serde_json::Value>()
                .await
                .unwrap()
        })
    }))
    .await;
    assert!(
        answers.iter().all(|a| a["outcome"] == "duplicate"),
        "{answers:?}"
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(600));

    // A copy in flight in the old month (its claim held, its row written
    // there, not committed) while 8 copies arrive now: each waits for the
    // claim and then finds the row across the boundary.
    let fresh = created_at(
        &payment_intent_succeeded("evt_fresh", "pi_fresh", "user_2", 70),
        boundary,
    );
    let mut in_flight = pool.begin().await.unwrap();
    sqlx::query("select pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(events::claim_key("stripe", "evt_fresh"))
        .execute(&mut *in_flight)
        .await
        .unwrap();
    sqlx::query(
        "insert into processed_events (provider, event_id, event_type, outcome, payload, received_at, month)
         values ('stripe', 'evt_fresh', 'payment_intent.succeeded', 'processed', $1::jsonb,
                 to_timestamp($2), (date_trunc('month', to_timestamp($2) at time zone 'UTC'))::date)",
    )
    .bind(&fresh)
    .bind(boundary)
    .execute(&mut *in_flight)
    .await
    .unwrap();
    let copies = join_all((0..8).map(|_| app.post_stripe(&fresh)));
    // Copies wait for the claim before the first commits.
    let first = async {
        until_waiting_on_locks(&pool, 1).await;
        in_flight.commit().await.unwrap();
    };
    let (answers, ()) = tokio::join!(copies, first);
    let statuses: Vec<StatusCode> = answers.iter().map(reqwest::Response::status).collect();
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    let (outcome, _) = app.event("evt_fresh").await;
    assert_eq!(outcome, "processed");
    assert_eq!(partition_of(&pool, "evt_fresh").await, Some(old));
    assert_eq!(
        app.balance("user_2", "USD").await,
        None,
        "the copy in flight applied nothing, and no copy applied it again"
    );
}

/// The claim reads the months from that of an event's `created` less a
/// day (`event_month_floor`): a copy is found in the month before its
/// `created` when the provider's clock ran ahead of ours, and in any month
/// when its `created` is further ahead than that, or missing.
#[sqlx::test]
async fn a_copy_is_found_whatever_the_providers_clock_said(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    let now = db_now(&pool).await;
    // Received in the last second of a month, stamped 30 s into the next.
    let boundary = months_ago(&pool, 3, 1, "00:00").await - 1;
    let ahead = created_at(
        &payment_intent_succeeded("evt_ahead", "pi_ahead", "user_1", 100),
        boundary + 31,
    );
    // Stamped 40 days ahead of the database's clock, received months ago.
    let future = created_at(
        &payment_intent_succeeded("evt_future", "pi_future", "user_1", 100),
        now + 40 * 86_400,
    );
    // Stamped with no time a scheme could read.
    let mut untimed: serde_json::Value = serde_json::from_str(&payment_intent_succeeded(
        "evt_untimed",
        "pi_untimed",
        "user_1",
        100,
    ))
    .unwrap();
    untimed.as_object_mut().unwrap().remove("created");
    let untimed = untimed.to_string();
    for body in [&ahead, &future, &untimed] {
        app.deliver(body, "processed").await;
    }
    received_at(&pool, "true", boundary).await;
    let old = partition_of(&pool, "evt_ahead").await.unwrap();
    for body in [&ahead, &future, &untimed] {
        app.deliver(body, "duplicate").await;
    }
    assert_eq!(app.balance("user_1", "USD").await, Some(300));
    for event in ["evt_ahead", "evt_future", "evt_untimed"] {
        assert_eq!(partition_of(&pool, event).await.as_ref(), Some(&old));
    }
}

#[sqlx::test]
async fn prune_drops_past_months_while_a_storm_ingests(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    // Old history: 300 applied events with delivered outbox rows, a deferred
    // refund, a dead row and an invoice announcement, received months ago.
    for n in 0..300 {
        let body = payment_intent_succeeded(
            &format!("evt_old_{n}"),
            &format!("pi_old_{n}"),
            "user_old",
            10,
        );
        app.deliver(&body, "processed").await;
    }
    app.deliver_each(&[
        (
            &charge(
                "evt_waiting",
                "charge.refunded",
                "ch_x",
                "pi_never",
                100,
                100,
            ),
            "deferred",
        ),
        (&invoice_paid("evt_invoice", "in_1"), "processed"),
    ])
    .await;
    let old = months_ago(&pool, 3, 10, "12:00").await;
    received_at(&pool, "true", old).await;
    let age = |sql: &'static str| {
        let pool = pool.clone();
        async move { sqlx::query(sql).bind(old).execute(&pool).await.unwrap() }
    };
    age("update wallet_entries set created_at = to_timestamp($1)").await;
    age("update outbox set delivered_at = to_timestamp($1)").await;
    age("update outbox set delivered_at = null, dead_at = to_timestamp($1) where event_id = 'evt_old_0'").await;
    sqlx::query(
        "insert into outbox_attempts (outbox_id, attempt, at, outcome, error)
         select id, 1, now(), 'dead', 'refused' from outbox where event_id = 'evt_old_0'",
    )
    .execute(&pool)
    .await
    .unwrap();
    outbox_written_at(&pool, "true", old).await;
    let old_outbox = partition_of(&pool, "evt_old_1")
        .await
        .unwrap()
        .replace("processed_events", "outbox");
    let old_partition = partition_of(&pool, "evt_old_1").await.unwrap();

    // Prune while 40 new deliveries arrive: none fails, none waits long.
    let deliveries = join_all((0..40).map(|n| {
        let app: &TestApp = &app;
        async move {
            let body = payment_intent_succeeded(
                &format!("evt_new_{n}"),
                &format!("pi_new_{n}"),
                "user_new",
                5,
            );
            app.post_stripe(&body).await.status()
        }
    }));
    let now = db_now(&pool).await;
    let args = prune_args(None);
    let pruning =
        tokio::time::timeout(std::time::Duration::from_secs(60), prune(&pool, &args, now));
    let (statuses, pruned) = tokio::join!(deliveries, pruning);
    let (pruned, said) = pruned.expect("prune never waits for long");
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert_eq!(pruned.events, 301, "300 old events and the invoice: {said}");
    assert_eq!(
        pruned.outbox_rows, 300,
        "delivered rows; the dead row is kept"
    );
    assert!(
        said.contains(&format!(
            "dropped partition {old_partition}: 301 events (1 kept, moved to the current month)"
        )),
        "{said}"
    );
    assert!(!partitions_of(&pool).await.contains(&old_partition));
    assert!(
        said.contains(&format!(
            "dropped partition {old_outbox}: 300 rows (1 kept, moved to the current month)"
        )),
        "{said}"
    );
    let old_attempts = old_outbox.replace("outbox", "outbox_attempts");
    assert!(
        said.contains(&format!("dropped partition {old_attempts}: 0 rows")),
        "its attempt moved with the dead row: {said}"
    );

    let kept: Vec<String> = sqlx::query_scalar(
        "select event_id from processed_events where event_id not like 'evt_new_%' order by event_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(kept, ["evt_waiting"], "the deferred refund waits on");
    assert_eq!(app.count("deferred_events").await, 1);
    assert_eq!(
        sqlx::query_scalar::<_, i64>(
            "select count(*) from processed_events where event_id like 'evt_new_%'"
        )
        .fetch_one(&pool)
        .await
        .unwrap(),
        40
    );
    let outbox_kept: Vec<String> = sqlx::query_scalar(
        "select topic || ':' || event_id from outbox where event_id not like 'evt_new_%' order by id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(outbox_kept, ["wallet.credited:evt_old_0"]);
    let attempts: Vec<String> = sqlx::query_scalar(
        "select a.error from outbox_attempts a join outbox o on o.id = a.outbox_id and o.month = a.month",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(attempts, ["refused"], "the dead row's attempt is beside it");
    // The invoice's natural key outlives its pruned event and outbox row: a
    // late copy under a new event id is still no second announcement.
    app.deliver(&invoice_paid("evt_invoice_again", "in_1"), "ignored")
        .await;
    // A copy of a pruned event, past the retention (providers stop retrying
    // within days), is taken as new: its natural key applies nothing twice.
    let answer = app
        .deliver(
            &payment_intent_succeeded("evt_old_5", "pi_old_5", "user_old", 10),
            "ignored",
        )
        .await;
    assert_eq!(app.event("evt_old_5").await.0, "ignored", "{answer}");
    assert_eq!(app.balance("user_old", "USD").await, Some(3000));
    // The deferred refund, moved to this month, is still released by its credit.
    app.deliver(
        &payment_intent_succeeded("evt_credit_x", "pi_never", "user_x", 100),
        "processed",
    )
    .await;
    assert_eq!(app.balance("user_x", "USD").await, Some(0));
    let (pruned, _) = prune(&pool, &prune_args(None), now).await;
    assert_eq!(pruned.events, 0, "a second prune finds nothing to drop");
    let mut out = Vec::new();
    assert!(
        cli::reconcile::run(&pool, &RETENTION, &mut out)
            .await
            .unwrap()
    );
}

#[sqlx::test]
async fn an_event_applied_late_moves_to_the_month_it_was_applied_in(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    // A refund received months ago, deferred until its credit came today.
    app.deliver(
        &charge("evt_late", "charge.refunded", "ch_1", "pi_1", 500, 500),
        "deferred",
    )
    .await;
    let old = months_ago(&pool, 3, 10, "12:00").await;
    received_at(&pool, "event_id = 'evt_late'", old).await;
    let old_partition = partition_of(&pool, "evt_late").await.unwrap();
    app.deliver(
        &payment_intent_succeeded("evt_credit", "pi_1", "user_1", 500),
        "processed",
    )
    .await;
    assert_eq!(
        partition_of(&pool, "evt_late").await,
        partition_of(&pool, "evt_credit").await,
        "applied now: kept for the retention from now"
    );
    let (pruned, said) = prune(&pool, &prune_args(None), db_now(&pool).await).await;
    assert!(
        said.contains(&format!("dropped partition {old_partition}: 0 events")),
        "{said}"
    );
    assert_eq!(pruned.events, 0);
    let mut out = Vec::new();
    assert!(
        cli::reconcile::run(&pool, &RETENTION, &mut out)
            .await
            .unwrap(),
        "{}",
        String::from_utf8(out).unwrap()
    );
}

#[sqlx::test]
async fn payloads_past_their_retention_become_stubs_once(pool: PgPool) {
    let app = crate::console::console_app(pool.clone(), Clock::System).await;
    app.deliver_each(&[
        (
            &payment_intent_succeeded("evt_old", "pi_1", "user_1", 500),
            "processed",
        ),
        (
            &charge(
                "evt_waiting",
                "charge.refunded",
                "ch_2",
                "pi_never",
                100,
                100,
            ),
            "deferred",
        ),
        (
            &payment_intent_succeeded("evt_young", "pi_3", "user_1", 700),
            "processed",
        ),
    ])
    .await;
    // Ten days old, within the retention of keys (30) and past that of
    // payloads (7); their month stays.
    let now = db_now(&pool).await;
    sqlx::query(
        "update processed_events set received_at = to_timestamp($1) where event_id <> 'evt_young'",
    )
    .bind(now - 10 * 86_400)
    .execute(&pool)
    .await
    .unwrap();
    let before = app.balance("user_1", "USD").await;

    let (pruned, said) = prune(&pool, &prune_args(Some(7)), now).await;
    assert_eq!(pruned.payloads, 1, "{said}");
    assert_eq!(pruned.events, 0);
    assert!(
        said.contains("1 payloads older than 7days expired"),
        "{said}"
    );
    let stored = events::find(&pool, "stripe", "evt_old")
        .await
        .unwrap()
        .unwrap();
    assert!(stored.payload_expired_at.is_some());
    let payload: serde_json::Value = serde_json::from_str(&stored.payload).unwrap();
    assert_eq!(
        payload,
        serde_json::json!({"webhookd": "expired", "id": "evt_old", "type": "payment_intent.succeeded"})
    );
    assert_eq!(
        stored.outcome.as_str(),
        "processed",
        "its key and outcome stay"
    );
    for kept in ["evt_waiting", "evt_young"] {
        let stored = events::find(&pool, "stripe", kept).await.unwrap().unwrap();
        assert!(stored.payload_expired_at.is_none(), "{kept}");
        assert!(stored.payload.contains("\"data\""), "{kept}");
    }
    // A copy is still a duplicate; a replay, explain and the console say why not.
    app.deliver(
        &payment_intent_succeeded("evt_old", "pi_1", "user_1", 500),
        "duplicate",
    )
    .await;
    let replayed = replay_stored(&pool, &Providers::default(), None, "stripe", "evt_old")
        .await
        .unwrap();
    assert_eq!(replayed.unwrap_err(), ReplayRefused::Expired);
    let mut out = Vec::new();
    cli::explain::run(&pool, "evt_old", &mut out).await.unwrap();
    let story = String::from_utf8(out).unwrap();
    assert!(story.contains("(payload expired at "), "{story}");
    let page = crate::console::Browser::bearer(&app)
        .page("/console/event?provider=stripe&id=evt_old")
        .await;
    assert!(
        page.body.contains("<dt>Payload expired</dt>"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("/console/event/replay"));
    assert_eq!(app.balance("user_1", "USD").await, before);

    // Again: nothing left to expire, and nothing read again.
    let (pruned, _) = prune(&pool, &prune_args(Some(7)), now).await;
    assert_eq!(pruned.payloads, 0);
    app.assert_consistent().await;
}

/// The migrations before the partitions.
fn before_partitions() -> Migrator {
    Migrator {
        migrations: Cow::Owned(
            MIGRATOR
                .iter()
                .filter(|m| m.version < 20_261_211_000_001)
                .cloned()
                .collect(),
        ),
        ..Migrator::DEFAULT
    }
}

#[sqlx::test(migrations = false)]
async fn the_migration_partitions_a_populated_database(pool: PgPool) {
    before_partitions().run(&pool).await.unwrap();
    // 2,000 events received 40 days ago and one today; one deferred; one
    // applied late (its entry young).
    sqlx::query(
        "insert into processed_events (provider, event_id, event_type, outcome, payload, received_at)
         select 'stripe', 'evt_' || n, 'payment_intent.succeeded', 'processed', '{}',
                now() - interval '40 days'
         from generate_series(1, 2000) as n",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::raw_sql(
        "update processed_events set outcome = 'deferred' where event_id = 'evt_1';
         insert into deferred_events (provider, event_id, waits_for) values ('stripe', 'evt_1', 'pi_never');
         insert into wallets (user_id, currency, balance_minor) values ('user_9', 'USD', 900);
         insert into wallet_entries (user_id, currency, amount_minor, kind, provider, event_id, source_ref)
         values ('user_9', 'USD', 900, 'credit', 'stripe', 'evt_2', 'pi_9');
         insert into processed_events (provider, event_id, event_type, outcome, payload)
         values ('stripe', 'evt_today', 'payment_intent.succeeded', 'processed', '{}');
         -- 300 outbox rows delivered 40 days ago, one dead with its
         -- attempt, one pending, one written today
         insert into outbox (topic, dedupe_key, provider, event_id, payload, created_at, delivered_at)
         select 'wallet.credited', 'stripe:evt_' || n, 'stripe', 'evt_' || n, '{}',
                now() - interval '40 days', now() - interval '40 days'
         from generate_series(3, 302) as n;
         update outbox set delivered_at = null, dead_at = now() - interval '40 days'
         where event_id = 'evt_3';
         insert into outbox_attempts (outbox_id, attempt, at, outcome, error)
         select id, 1, now() - interval '40 days', 'dead', 'refused' from outbox where event_id = 'evt_3';
         update outbox set delivered_at = null where event_id = 'evt_4';
         insert into outbox (topic, dedupe_key, provider, event_id, payload)
         values ('wallet.credited', 'stripe:evt_today', 'stripe', 'evt_today', '{}')",
    )
    .execute(&pool)
    .await
    .unwrap();

    MIGRATOR.run(&pool).await.unwrap();
    assert_eq!(
        sqlx::query_scalar::<_, i64>("select count(*) from processed_events_legacy")
            .fetch_one(&pool)
            .await
            .unwrap(),
        2001,
        "every row is in the legacy partition, none copied"
    );
    let made = partitions_of(&pool).await;
    assert_eq!(made.len(), 4, "{made:?}");
    let legacy_ids: (i64, i64) = sqlx::query_as("select count(*), max(id) from outbox_legacy")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(legacy_ids.0, 301);

    // Served: a copy of a legacy event is a duplicate; a new one lands in
    // this month's partition.
    let app = spawn_app(pool.clone()).await;
    app.deliver(
        &payment_intent_succeeded("evt_5", "pi_5", "user_5", 100),
        "duplicate",
    )
    .await;
    app.deliver(
        &payment_intent_succeeded("evt_new", "pi_new", "user_5", 100),
        "processed",
    )
    .await;
    assert_ne!(
        partition_of(&pool, "evt_new").await.as_deref(),
        Some("processed_events_legacy")
    );
    let new_id: i64 = sqlx::query_scalar(
        "select id from outbox where event_id = 'evt_new' and tableoid <> 'outbox_legacy'::regclass",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(new_id > legacy_ids.1, "ids go on from the legacy table's");

    // The legacy partition goes once its last event is past the retention:
    // not while evt_today is young; once it is old, at once, its deferred
    // event and its young entry's event moved out first.
    let now = db_now(&pool).await;
    let (pruned, said) = prune(&pool, &prune_args(None), now).await;
    assert_eq!(pruned.events, 0);
    assert!(
        said.contains("kept partition processed_events_legacy"),
        "{said}"
    );
    sqlx::query(
        "update processed_events set received_at = received_at - interval '40 days'
         where event_id = 'evt_today'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (pruned, said) = prune(&pool, &prune_args(None), now).await;
    assert!(
        said.contains("dropped partition processed_events_legacy: 1999 events (2 kept, moved to the current month)"),
        "{said}"
    );
    assert_eq!(pruned.events, 1999);
    for kept in ["evt_1", "evt_2", "evt_new"] {
        assert!(partition_of(&pool, kept).await.is_some(), "{kept}");
    }
    assert!(partition_of(&pool, "evt_today").await.is_none());
    // The outbox's legacy partition went with its events': the dead row and
    // the rows not delivered yet moved (the dead one with its attempt), the
    // delivered ones dropped.
    sqlx::query(
        "update outbox set created_at = created_at - interval '40 days' where event_id = 'evt_today'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (pruned, said) = prune(&pool, &prune_args(None), now).await;
    assert!(
        said.contains(
            "dropped partition outbox_legacy: 298 rows (3 kept, moved to the current month)"
        ),
        "{said}"
    );
    assert!(
        said.contains("dropped partition outbox_attempts_legacy: 0 rows"),
        "{said}"
    );
    assert_eq!(pruned.outbox_rows, 298);
    let kept: Vec<(String, Option<String>)> = sqlx::query_as(
        "select o.event_id, a.error from outbox o
         left join outbox_attempts a on a.outbox_id = o.id and a.month = o.month
         order by o.event_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        kept,
        [
            ("evt_3".to_owned(), Some("refused".to_owned())),
            ("evt_4".to_owned(), None),
            ("evt_new".to_owned(), None),
            ("evt_today".to_owned(), None),
        ]
    );
}

#[sqlx::test]
async fn a_replay_in_a_later_month_writes_no_second_outbox_row(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.deliver(
        &payment_intent_succeeded("evt_1", "pi_1", "user_1", 500),
        "processed",
    )
    .await;
    // Its outbox row written in a month long past, a replay now.
    let old = months_ago(&pool, 2, 28, "23:59").await;
    outbox_written_at(&pool, "event_id = 'evt_1'", old).await;
    let replayed = replay_stored(&pool, &Providers::default(), None, "stripe", "evt_1")
        .await
        .unwrap();
    assert!(replayed.is_ok(), "{replayed:?}");
    let rows: Vec<String> = sqlx::query_scalar(
        "select tableoid::regclass::text from outbox where dedupe_key = 'stripe:evt_1'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_ne!(
        rows[0],
        format!("outbox_{}", current_month_suffix(&pool).await)
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(500));
}

/// `YYYY_MM` of the database's now (UTC).
async fn current_month_suffix(pool: &PgPool) -> String {
    sqlx::query_scalar("select to_char(now() at time zone 'UTC', 'YYYY_MM')")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn a_payload_retention_longer_than_the_keys_keeps_their_months(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.deliver(
        &payment_intent_succeeded("evt_1", "pi_1", "user_1", 500),
        "processed",
    )
    .await;
    let old = months_ago(&pool, 3, 10, "12:00").await;
    received_at(&pool, "true", old).await;
    let now = db_now(&pool).await;
    let (pruned, said) = prune(&pool, &prune_args(Some(200)), now).await;
    assert_eq!((pruned.events, pruned.payloads), (0, 0), "{said}");
    assert!(!said.contains("processed_events_20"), "{said}");
    let stored = events::find(&pool, "stripe", "evt_1")
        .await
        .unwrap()
        .unwrap();
    assert!(stored.payload_expired_at.is_none());
    // With the payload retention shorter again, the month goes.
    let (pruned, said) = prune(&pool, &prune_args(Some(7)), now).await;
    assert_eq!(pruned.events, 1, "{said}");
}

#[sqlx::test]
async fn a_kept_event_held_while_its_month_goes_is_put_back(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.deliver(
        &charge(
            "evt_waiting",
            "charge.refunded",
            "ch_1",
            "pi_never",
            100,
            100,
        ),
        "deferred",
    )
    .await;
    let old = months_ago(&pool, 3, 10, "12:00").await;
    received_at(&pool, "true", old).await;
    let old_partition = partition_of(&pool, "evt_waiting").await.unwrap();
    // Another transaction holds the deferred event's row: the move passes
    // it by, the detach waits for that transaction, and the drop puts the
    // event back first.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("select 1 from processed_events where event_id = 'evt_waiting' for update")
        .execute(&mut *holder)
        .await
        .unwrap();
    let now = db_now(&pool).await;
    let args = prune_args(None);
    let pruning = prune(&pool, &args, now);
    let release = async {
        until_waiting_on_locks(&pool, 1).await;
        holder.commit().await.unwrap();
    };
    let ((pruned, said), ()) = tokio::join!(pruning, release);
    assert!(
        said.contains(&format!(
            "dropped partition {old_partition}: 0 events (1 kept, moved to the current month)"
        )),
        "{said}"
    );
    assert_eq!(pruned.events, 0);
    let (outcome, _) = app.event("evt_waiting").await;
    assert_eq!(outcome, "deferred");
    assert_ne!(
        partition_of(&pool, "evt_waiting").await,
        Some(old_partition)
    );
    // It still waits for its credit, and is released by it.
    app.deliver(
        &payment_intent_succeeded("evt_credit", "pi_never", "user_1", 100),
        "processed",
    )
    .await;
    assert_eq!(app.balance("user_1", "USD").await, Some(0));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_large_detached_month_is_told_by_its_statistics_a_small_one_counted(pool: PgPool) {
    let mut conn = pool.acquire().await.unwrap();
    let steps: [(&str, i64, (u64, bool)); 5] = [
        (
            "create table retired_month as select g as id from generate_series(1, 5000) g",
            partitions::COUNTED_PAGES,
            (5000, false),
        ),
        // More pages than counted: the live rows the statistics keep, the
        // delete included.
        ("delete from retired_month where id > 4000", 0, (4000, true)),
        // Within the pages counted: counted.
        ("select", partitions::COUNTED_PAGES, (4000, false)),
        // The statistics lost, as a crash loses them, and never vacuumed
        // or analysed: counted, however large.
        (
            "select pg_stat_reset_single_table_counters('retired_month'::regclass)",
            0,
            (4000, false),
        ),
        // Vacuumed since: what the vacuum counted.
        ("vacuum analyze retired_month", 0, (4000, true)),
    ];
    for (statement, counted_pages, expected) in steps {
        // The statement, and the statistics it made flushed.
        for statement in [statement, "select pg_stat_force_next_flush()"] {
            sqlx::query(statement).execute(&mut *conn).await.unwrap();
        }
        let held = partitions::held(&mut conn, "retired_month", counted_pages)
            .await
            .unwrap();
        assert_eq!(held, expected, "after {statement}");
    }
}
