//! Replay from the console runs what `webhookd events replay` runs: the
//! stored outcome changes only when an event that was not `processed` now
//! comes out otherwise, and an imported event is never replayed.

use reqwest::StatusCode;
use serde_json::json;
use sqlx::PgPool;
use webhookd::cli;
use webhookd::cli::events::EventsCommand;
use webhookd::clock::Clock;
use webhookd::events::{ImportRow, import_rows};

use super::{
    Browser, console_app, deferred_refund_with_its_credit_repaired, repaired_deferred_refund,
};
use crate::helpers::{TestApp, event_of_type, payment_intent_succeeded};

/// What a replay could change: wallets, entries, outbox rows, outcomes.
async fn snapshot(app: &TestApp) -> (Vec<(String, i64)>, i64, i64, Vec<(String, String)>) {
    let pool = &app.pool;
    let wallets = sqlx::query_as("select user_id, balance_minor from wallets order by user_id")
        .fetch_all(pool)
        .await
        .unwrap();
    let events = sqlx::query_as("select event_id, outcome from processed_events order by event_id")
        .fetch_all(pool)
        .await
        .unwrap();
    (
        wallets,
        app.count("wallet_entries").await,
        app.count("outbox").await,
        events,
    )
}

/// Replays `event_id` from the console; where it sends the browser.
async fn replay(browser: &Browser<'_>, event_id: &str) -> String {
    let page = browser
        .post(&format!("/console/events/stripe/{event_id}/replay"), &[])
        .await;
    page.assert_status(StatusCode::SEE_OTHER, event_id);
    page.location().to_owned()
}

#[sqlx::test]
async fn a_console_replay_changes_the_stored_outcome_only_when_the_cli_would(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    app.deliver(
        &payment_intent_succeeded("evt_applied", "pi_5", "user_5", 300),
        "processed",
    )
    .await;
    let no_owner = json!({
        "id": "pi_6", "object": "payment_intent", "amount": 300, "amount_received": 300,
        "currency": "usd", "metadata": {"user_id": "not an id"}, "status": "succeeded",
    });
    app.deliver(
        &event_of_type("evt_rejected", "payment_intent.succeeded", no_owner),
        "rejected",
    )
    .await;
    deferred_refund_with_its_credit_repaired(&app).await;
    repaired_deferred_refund(&app, "evt_refund_cli", "ch_9", "pi_9", "user_9").await;
    let browser = Browser::bearer(&app);

    // Applied already: its credit exists (the replay comes out `ignored`,
    // owned by the event itself) and nothing changes.
    let before = snapshot(&app).await;
    let back = replay(&browser, "evt_applied").await;
    assert_eq!(
        back,
        "/console/event?provider=stripe&id=evt_applied&replayed=ignored&changed=false"
    );
    assert_eq!(snapshot(&app).await, before);
    let page = browser.page(&back).await;
    assert!(
        page.body
            .contains("Replayed: ignored. The stored outcome is unchanged.")
    );
    assert!(
        page.body
            .contains("<span class=\"pill o-processed\">processed</span>")
    );

    // Rejected again: the same outcome, kept.
    let back = replay(&browser, "evt_rejected").await;
    assert_eq!(
        back,
        "/console/event?provider=stripe&id=evt_rejected&replayed=rejected&changed=false"
    );
    assert_eq!(snapshot(&app).await, before);

    // Deferred, and its credit is there now: applied, the outcome replaced,
    // as the CLI does the same to its twin.
    let back = replay(&browser, "evt_refund").await;
    assert_eq!(
        back,
        "/console/event?provider=stripe&id=evt_refund&replayed=processed&changed=true"
    );
    let page = browser.page(&back).await;
    assert!(
        page.body
            .contains("Replayed: processed. The stored outcome changed.")
    );
    let mut out = Vec::new();
    let command = EventsCommand::Replay {
        provider: "stripe".into(),
        event_id: "evt_refund_cli".into(),
        stripe: Box::default(),
    };
    cli::events::run(&app.pool, &command, &[], &mut out)
        .await
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("stored outcome changed from deferred to processed"),
        "{out}"
    );
    for (event_id, user_id) in [("evt_refund", "user_1"), ("evt_refund_cli", "user_9")] {
        assert_eq!(app.event(event_id).await.0, "processed", "{event_id}");
        assert_eq!(app.balance(user_id, "USD").await, Some(0), "{user_id}");
        let entries: Vec<(String, i64)> = sqlx::query_as(
            "select kind, amount_minor from wallet_entries where user_id = $1 order by id",
        )
        .bind(user_id)
        .fetch_all(&app.pool)
        .await
        .unwrap();
        assert_eq!(
            entries,
            [("credit".to_owned(), 700), ("refund".to_owned(), -700)]
        );
    }
    let (console_detail, cli_detail) = (
        app.event("evt_refund").await.1,
        app.event("evt_refund_cli").await.1,
    );
    let keys = |detail: &serde_json::Value| {
        let mut keys: Vec<String> = detail.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(
        keys(&console_detail),
        keys(&cli_detail),
        "{console_detail} / {cli_detail}"
    );

    // Once more: processed is never replaced, and nothing is debited twice.
    let after = snapshot(&app).await;
    let back = replay(&browser, "evt_refund").await;
    assert!(back.ends_with("&changed=false"), "{back}");
    assert_eq!(snapshot(&app).await, after);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn an_imported_event_cannot_be_replayed_from_the_console(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let imported = ImportRow {
        event_id: "evt_imported".to_owned(),
        event_type: "payment_intent.succeeded".to_owned(),
        processed_at: None,
    };
    assert_eq!(
        import_rows(&app.pool, "stripe", &[imported]).await.unwrap(),
        1
    );
    let browser = Browser::logged_in(&app).await;

    let page = browser.page("/console/events/stripe/evt_imported").await;
    assert!(
        page.body
            .contains("Imported: an earlier handler applied it, so it cannot be replayed.")
    );
    assert!(!page.body.contains("/replay\""), "no replay form");
    let csrf = page.csrf();
    let before = snapshot(&app).await;
    let refused = browser
        .post(
            "/console/events/stripe/evt_imported/replay",
            &[("csrf", &csrf)],
        )
        .await;
    refused.assert_status(StatusCode::BAD_REQUEST, "an imported event");
    assert!(refused.body.contains("it was imported"), "{}", refused.body);
    assert_eq!(snapshot(&app).await, before);
    assert_eq!(app.event("evt_imported").await.0, "imported");

    let missing = browser
        .post("/console/events/stripe/evt_nope/replay", &[("csrf", &csrf)])
        .await;
    missing.assert_status(StatusCode::NOT_FOUND, "no such event");
    assert_eq!(snapshot(&app).await, before);
}
