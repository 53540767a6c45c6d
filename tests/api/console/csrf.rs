//! A session's actions need the CSRF token of a page the session was
//! shown: without it (or with another's) nothing changes; with it the
//! action is done. A bearer client has no ambient credentials and needs
//! none.

use reqwest::StatusCode;
use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{
    Browser, console_app, dead_ids, deferred_refund_with_its_credit_repaired, kill_due_rows,
};
use crate::helpers::{TestApp, payment_intent_succeeded};

/// Forms a session must refuse: no token, a made-up one, another
/// session's.
async fn forged_tokens(app: &TestApp) -> Vec<Option<String>> {
    let other = Browser::logged_in(app).await.page("/console").await.csrf();
    vec![None, Some("0".repeat(64)), Some(other)]
}

fn with_token<'a>(csrf: Option<&'a str>, form: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut form = form.to_vec();
    if let Some(csrf) = csrf {
        form.push(("csrf", csrf));
    }
    form
}

async fn outcome(app: &TestApp, event_id: &str) -> String {
    app.event(event_id).await.0
}

#[sqlx::test]
async fn retrying_a_row_from_a_session_needs_the_pages_csrf_token(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    app.deliver(
        &payment_intent_succeeded("evt_1", "pi_1", "user_1", 2000),
        "processed",
    )
    .await;
    assert_eq!(kill_due_rows(&app, 500).await, 1);
    let dead = dead_ids(&app.pool).await;
    let path = format!("/console/outbox/{}/retry", dead[0]);
    let browser = Browser::logged_in(&app).await;

    for forged in forged_tokens(&app).await {
        let form = with_token(forged.as_deref(), &[("back", "/console/outbox")]);
        browser
            .post(&path, &form)
            .await
            .assert_status(StatusCode::FORBIDDEN, &format!("{forged:?}"));
        assert_eq!(dead_ids(&app.pool).await, dead, "still dead");
    }

    let page = browser.page("/console/outbox?state=dead").await;
    assert!(page.body.contains(&format!("action=\"{path}\"")));
    let retried = browser
        .post(
            &path,
            &[
                ("csrf", &page.csrf()),
                ("back", "/console/outbox?state=dead"),
            ],
        )
        .await;
    retried.assert_status(StatusCode::SEE_OTHER, "with the page's token");
    assert_eq!(retried.location(), "/console/outbox?state=dead&retried=1");
    assert!(dead_ids(&app.pool).await.is_empty(), "re-queued");
}

#[sqlx::test]
async fn replaying_from_a_session_needs_the_pages_csrf_token(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    deferred_refund_with_its_credit_repaired(&app).await;
    let path = "/console/events/stripe/evt_refund/replay";
    let browser = Browser::logged_in(&app).await;

    for forged in forged_tokens(&app).await {
        let form = with_token(forged.as_deref(), &[]);
        browser
            .post(path, &form)
            .await
            .assert_status(StatusCode::FORBIDDEN, &format!("{forged:?}"));
        assert_eq!(outcome(&app, "evt_refund").await, "deferred");
        assert_eq!(app.balance("user_1", "USD").await, Some(700));
    }

    let page = browser.page("/console/events/stripe/evt_refund").await;
    let replayed = browser.post(path, &[("csrf", &page.csrf())]).await;
    replayed.assert_status(StatusCode::SEE_OTHER, "with the page's token");
    assert_eq!(outcome(&app, "evt_refund").await, "processed");
    assert_eq!(app.balance("user_1", "USD").await, Some(0));
}

#[sqlx::test]
async fn a_bulk_retry_from_a_session_needs_the_pages_csrf_token(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    for n in 1..=2 {
        app.deliver(
            &payment_intent_succeeded(&format!("evt_{n}"), &format!("pi_{n}"), "user_1", 100),
            "processed",
        )
        .await;
    }
    assert_eq!(kill_due_rows(&app, 500).await, 2);
    let dead = dead_ids(&app.pool).await;
    let browser = Browser::logged_in(&app).await;
    let dry_run = browser.page("/console/outbox/retry?state=dead").await;
    let max_id = dry_run.input("max_id").unwrap();

    for forged in forged_tokens(&app).await {
        let form = with_token(forged.as_deref(), &[("max_id", &max_id)]);
        browser
            .post("/console/outbox/retry", &form)
            .await
            .assert_status(StatusCode::FORBIDDEN, &format!("{forged:?}"));
        assert_eq!(dead_ids(&app.pool).await, dead, "still dead");
    }

    let retried = browser
        .post(
            "/console/outbox/retry",
            &[("csrf", &dry_run.csrf()), ("max_id", &max_id)],
        )
        .await;
    retried.assert_status(StatusCode::SEE_OTHER, "with the page's token");
    assert!(dead_ids(&app.pool).await.is_empty());
}

#[sqlx::test]
async fn a_bearer_client_acts_without_a_csrf_token(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    deferred_refund_with_its_credit_repaired(&app).await;
    for n in 1..=2 {
        app.deliver(
            &payment_intent_succeeded(&format!("evt_{n}"), &format!("pi_2{n}"), "user_2", 100),
            "processed",
        )
        .await;
    }
    assert_eq!(kill_due_rows(&app, 500).await, 2);
    let dead = dead_ids(&app.pool).await;
    let bearer = Browser::bearer(&app);
    // Its pages have no session to log out of, and carry no token.
    let page = bearer.page("/console/outbox").await;
    assert_eq!(page.input("csrf").as_deref(), Some(""), "a row's form");
    assert!(!page.body.contains("/console/logout"));

    let one = bearer
        .post(&format!("/console/outbox/{}/retry", dead[0]), &[])
        .await;
    one.assert_status(StatusCode::SEE_OTHER, "a single retry");
    assert_eq!(dead_ids(&app.pool).await, [dead[1]]);
    let bulk = bearer
        .post("/console/outbox/retry", &[("max_id", &dead[1].to_string())])
        .await;
    bulk.assert_status(StatusCode::SEE_OTHER, "a bulk retry");
    assert!(dead_ids(&app.pool).await.is_empty());
    let replay = bearer
        .post("/console/events/stripe/evt_refund/replay", &[])
        .await;
    replay.assert_status(StatusCode::SEE_OTHER, "a replay");
    assert_eq!(outcome(&app, "evt_refund").await, "processed");
}
