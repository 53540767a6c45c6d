//! `webhookd erase user <id>`: a user's events and outbox rows lose their
//! personal data (payloads, free-text detail), keep their keys, amounts and
//! outcomes; the ledger stays; an erased row is never delivered; erasing
//! again changes nothing; it runs while events are being ingested.

use serde_json::Value;
use sqlx::PgPool;
use webhookd::cli::erase::EraseCommand;
use webhookd::ingest::{ReplayRefused, replay_stored};
use webhookd::providers::Providers;

use crate::helpers::{TestApp, charge, now, payment_intent_succeeded, spawn_app, subscription};

async fn erase(app: &TestApp, user_id: &str, dry_run: bool) -> Value {
    let command = EraseCommand::User {
        user_id: user_id.to_owned(),
        dry_run,
    };
    let mut out = Vec::new();
    webhookd::cli::erase::run(&app.pool, &command, &mut out)
        .await
        .unwrap();
    serde_json::from_slice(&out).unwrap()
}

/// How many rows of `table` hold `text` anywhere in `column`.
async fn holding(app: &TestApp, table: &str, column: &str, text: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "select count(*) from {table} where {column}::text like '%' || $1 || '%'"
    ))
    .bind(text)
    .fetch_one(&app.pool)
    .await
    .unwrap()
}

/// `user_1`'s credit, refund and subscription, and `user_2`'s credit.
async fn history(app: &TestApp) {
    app.deliver_each(&[
        (
            &payment_intent_succeeded("evt_credit", "pi_1", "user_1", 2000),
            "processed",
        ),
        (
            &charge("evt_refund", "charge.refunded", "ch_1", "pi_1", 2000, 500),
            "processed",
        ),
        (
            &subscription(
                "evt_sub",
                "customer.subscription.created",
                "sub_1",
                "active",
                now(),
            ),
            "processed",
        ),
        (
            &payment_intent_succeeded("evt_other", "pi_2", "user_2", 700),
            "processed",
        ),
    ])
    .await;
}

#[sqlx::test]
async fn erasing_a_user_removes_their_personal_data_and_keeps_the_money(pool: PgPool) {
    let app = crate::console::console_app(pool, webhookd::clock::Clock::System).await;
    history(&app).await;
    let entries_before = app.count("wallet_entries").await;

    // A dry run counts and writes nothing.
    let counted = erase(&app, "user_1", true).await;
    assert_eq!(counted["dry_run"], true);
    assert_eq!(counted["erased"], counted["events"]);
    assert!(counted["erased"].as_u64().unwrap() >= 3, "{counted}");
    assert!(holding(&app, "processed_events", "payload", "user_1").await >= 3);
    assert_eq!(app.count("erasures").await, 0);

    let erased = erase(&app, "user_1", false).await;
    assert_eq!(erased["erased"], counted["erased"], "{erased}");
    assert!(erased["outbox_rows"].as_u64().unwrap() >= 3, "{erased}");
    // Nothing of user_1's is left in payloads or outbox rows; user_2's is.
    for (table, column) in [
        ("processed_events", "payload"),
        ("processed_events", "detail"),
        ("outbox", "payload"),
    ] {
        assert_eq!(
            holding(&app, table, column, "user_1").await,
            0,
            "{table}.{column}"
        );
    }
    assert_eq!(
        holding(&app, "processed_events", "payload", "user_2").await,
        1
    );
    let (payload, erased_at): (Value, Option<String>) = sqlx::query_as(
        "select payload, erased_at::text from processed_events where event_id = 'evt_credit'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        payload,
        serde_json::json!({"webhookd": "erased", "id": "evt_credit", "type": "payment_intent.succeeded"})
    );
    assert!(erased_at.is_some());
    // The outbox row keeps its amounts and keys, not its user.
    let credited: Value = sqlx::query_scalar(
        "select payload from outbox where event_id = 'evt_credit' and topic = 'wallet.credited'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(credited["webhookd"], "erased");
    assert_eq!(credited["amount_minor"], 2000, "{credited}");
    assert!(credited.get("user_id").is_none(), "{credited}");

    // The money and the keys stay.
    assert_eq!(app.balance("user_1", "USD").await, Some(1500));
    assert_eq!(app.count("wallet_entries").await, entries_before);
    app.deliver(
        &payment_intent_succeeded("evt_credit", "pi_1", "user_1", 2000),
        "duplicate",
    )
    .await;

    // Undelivered rows are dead-lettered `erased`, and no retry takes them back.
    let undelivered: Vec<(Option<String>, bool)> = sqlx::query_as(
        "select last_error, dead_at is not null from outbox
         where erased_at is not null and delivered_at is null",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(!undelivered.is_empty());
    assert!(
        undelivered
            .iter()
            .all(|(error, dead)| error.as_deref() == Some("erased") && *dead)
    );
    let requeued = webhookd::outbox::retry_dead(&app.pool, None).await.unwrap();
    assert!(requeued.is_empty(), "{requeued:?}");

    // Recorded once; erasing again changes nothing.
    assert_eq!(app.count("erasures").await, 1);
    let again = erase(&app, "user_1", false).await;
    assert_eq!(again["erased"], 0);
    assert_eq!(again["already_erased"], erased["erased"]);
    assert_eq!(again["outbox_rows"], 0);
    assert_eq!(app.count("erasures").await, 1);

    // explain and a replay say so.
    let mut out = Vec::new();
    webhookd::cli::explain::run(&app.pool, "user_1", &mut out)
        .await
        .unwrap();
    let story = String::from_utf8(out).unwrap();
    assert!(story.contains("(personal data erased at "), "{story}");
    assert!(!story.contains("\"user_1\""), "{story}");
    let replayed = replay_stored(
        &app.pool,
        &Providers::default(),
        None,
        "stripe",
        "evt_credit",
    )
    .await
    .unwrap();
    assert_eq!(replayed.unwrap_err(), ReplayRefused::Erased);
    let page = crate::console::Browser::bearer(&app)
        .page("/console/event?provider=stripe&id=evt_credit")
        .await;
    assert!(page.body.contains("<dt>Erased</dt>"), "{}", page.body);
    assert!(page.body.contains("it has no payload left to replay"));
    assert!(!page.body.contains("/console/event/replay"));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn an_erasure_runs_while_events_are_ingested(pool: PgPool) {
    let app = spawn_app(pool).await;
    history(&app).await;
    let deliveries = async {
        for i in 0..20 {
            let body = payment_intent_succeeded(
                &format!("evt_more_{i}"),
                &format!("pi_more_{i}"),
                "user_2",
                10,
            );
            app.deliver(&body, "processed").await;
        }
    };
    let (erased, ()) = tokio::join!(erase(&app, "user_1", false), deliveries);
    assert!(erased["erased"].as_u64().unwrap() >= 3, "{erased}");
    assert_eq!(app.balance("user_2", "USD").await, Some(900));
    assert_eq!(
        holding(&app, "processed_events", "payload", "user_1").await,
        0
    );
    app.assert_consistent().await;
}
