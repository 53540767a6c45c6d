//! Input the console must refuse cleanly, and the order of a bulk retry
//! against rows that die while the operator reads its count.

use reqwest::StatusCode;
use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{Browser, TOKEN, console_app, dead_ids, kill_due_rows};
use crate::helpers::payment_intent_succeeded;

#[sqlx::test]
async fn input_the_database_cannot_read_is_a_bad_request_not_an_outage(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let browser = Browser::logged_in(&app).await;
    for path in [
        "/console/events?q=%00",
        "/console/events?type=%00",
        "/console/users/%00",
        "/console/events/stripe/%00",
        "/console/outbox?topic=%00",
        "/console/outbox/retry?error=%00",
        // The cursor's shape, but no time.
        "/console/events?before_at=2026-99-99T99%3A99%3A99.000000Z&before_provider=stripe&before_id=e",
    ] {
        let page = browser.get(path).await;
        page.assert_status(StatusCode::BAD_REQUEST, path);
    }
    let replay = browser
        .post(
            "/console/events/stripe/%00/replay",
            &[("csrf", &browser.page("/console").await.csrf())],
        )
        .await;
    replay.assert_status(StatusCode::BAD_REQUEST, "replay");
}

#[sqlx::test]
async fn a_cross_site_post_is_refused_before_it_spends_a_login_attempt(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // A page elsewhere posting wrong tokens, over and over.
    for _ in 0..10 {
        let refused = client
            .post(app.admin("/console/login"))
            .header("sec-fetch-site", "cross-site")
            .form(&[("token", "guess"), ("next", "/console")])
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    }
    // The operator's own login still works: no attempt was spent.
    let login = client
        .post(app.admin("/console/login"))
        .header("sec-fetch-site", "same-origin")
        .form(&[("token", TOKEN), ("next", "/console")])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    assert!(login.headers().contains_key("set-cookie"));
}

#[sqlx::test]
async fn a_bulk_retry_leaves_a_row_that_died_after_the_count_whatever_its_id(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    // The older row is still being retried (not due yet) when the count is
    // taken; the newer one is dead.
    app.deliver(
        &payment_intent_succeeded("evt_old", "pi_old", "u", 100),
        "processed",
    )
    .await;
    sqlx::query("update outbox set available_at = now() + interval '1 hour'")
        .execute(&app.pool)
        .await
        .unwrap();
    app.deliver(
        &payment_intent_succeeded("evt_new", "pi_new", "u", 100),
        "processed",
    )
    .await;
    assert_eq!(kill_due_rows(&app, 500).await, 1);
    let browser = Browser::logged_in(&app).await;
    let dry_run = browser.page("/console/outbox/retry?state=dead").await;
    assert!(
        dry_run
            .body
            .contains("<strong>1</strong> dead row(s) match")
    );

    // Now the older row dies too: its id is below the count's highest.
    sqlx::query("update outbox set available_at = now() where dead_at is null")
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(kill_due_rows(&app, 500).await, 1);
    let dead = dead_ids(&app.pool).await;
    assert_eq!(dead.len(), 2);

    let confirmed = browser
        .post(
            "/console/outbox/retry",
            &[
                ("csrf", &dry_run.csrf()),
                ("topic", ""),
                ("error", ""),
                ("max_id", &dry_run.input("max_id").unwrap()),
                ("as_of", &dry_run.input("as_of").unwrap()),
            ],
        )
        .await;
    confirmed.assert_status(StatusCode::SEE_OTHER, "confirmed");
    assert!(
        confirmed.location().ends_with("retried=1"),
        "{}",
        confirmed.location()
    );
    assert_eq!(
        dead_ids(&app.pool).await,
        vec![dead[0]],
        "the older row stays dead"
    );
}
