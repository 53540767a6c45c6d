//! The outbox page: undelivered rows by state, topic and error text; a
//! dead row retried; a bulk retry counted first and confirmed for exactly
//! the rows counted. Rows die as they do in production: a drainer
//! delivers them to a sink that fails.

use reqwest::StatusCode;
use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{Browser, console_app, dead_ids, kill_due_rows};
use crate::helpers::{TestApp, charge, payment_intent_succeeded};

/// `count` credits of user_1 (`wallet.credited` rows), ids from `first`.
async fn credits(app: &TestApp, first: usize, count: usize) {
    for n in first..first + count {
        app.deliver(
            &payment_intent_succeeded(&format!("evt_{n}"), &format!("pi_{n}"), "user_1", 100),
            "processed",
        )
        .await;
    }
}

/// `count` charges recorded after their credit (`payment.receipt` rows).
async fn receipts(app: &TestApp, first: usize, count: usize) {
    for n in first..first + count {
        app.deliver(
            &charge(
                &format!("evt_ch_{n}"),
                "charge.succeeded",
                &format!("ch_{n}"),
                &format!("pi_{n}"),
                100,
                0,
            ),
            "ignored",
        )
        .await;
    }
}

async fn ids(pool: &PgPool, sql: &str) -> Vec<i64> {
    sqlx::query_scalar(sql).fetch_all(pool).await.unwrap()
}

/// Every row's `(id, dead, attempts)`, by id.
async fn states(pool: &PgPool) -> Vec<(i64, bool, i32)> {
    sqlx::query_as("select id, dead_at is not null, attempts from outbox order by id")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn the_outbox_page_lists_undelivered_rows_by_state_topic_and_error_text(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    credits(&app, 1, 3).await;
    assert_eq!(kill_due_rows(&app, 500).await, 3);
    receipts(&app, 1, 2).await;
    assert_eq!(kill_due_rows(&app, 503).await, 2);
    credits(&app, 10, 2).await;
    receipts(&app, 10, 1).await;
    let pool = &app.pool;
    let browser = Browser::bearer(&app);

    // (filter, the rows it should list, how many those are)
    let cases = [
        ("", "select id from outbox", 8),
        (
            "state=dead",
            "select id from outbox where dead_at is not null",
            5,
        ),
        (
            "state=pending",
            "select id from outbox where dead_at is null",
            3,
        ),
        (
            "topic=payment.receipt",
            "select id from outbox where topic = 'payment.receipt'",
            3,
        ),
        (
            "state=pending&topic=wallet.credited",
            "select id from outbox where dead_at is null and topic = 'wallet.credited'",
            2,
        ),
        (
            "error=503",
            "select id from outbox where last_error like 'HTTP 503%'",
            2,
        ),
        (
            "error=http%205",
            "select id from outbox where last_error like 'HTTP 5%'",
            5,
        ),
        (
            "state=pending&error=503",
            "select id from outbox where false",
            0,
        ),
        ("topic=invoice.paid", "select id from outbox where false", 0),
    ];
    for (query, sql, count) in cases {
        let expected = ids(pool, &format!("{sql} order by id")).await;
        assert_eq!(expected.len(), count, "{sql}");
        let page = browser.page(&format!("/console/outbox?{query}")).await;
        assert_eq!(page.row_ids(), expected, "{query}");
        if expected.is_empty() {
            assert!(page.body.contains("No undelivered row matches."));
        }
    }
    let page = browser.page("/console/outbox").await;
    assert!(page.body.contains("3 pending"), "{}", page.body);
    assert!(page.body.contains("5 dead."));
    // A dead row has a retry; a pending one has none.
    for (id, dead, _) in states(pool).await {
        let form = format!("action=\"/console/outbox/{id}/retry\"");
        assert_eq!(page.body.contains(&form), dead, "row {id}");
    }
    // The filter goes along to the bulk retry.
    let filtered = browser
        .page("/console/outbox?state=dead&topic=wallet.credited&error=500")
        .await;
    assert!(filtered.body.contains(
        "href=\"/console/outbox/retry?state=dead&#38;topic=wallet.credited&#38;sink=&#38;error=500\""
    ));
}

#[sqlx::test]
async fn retrying_a_dead_row_requeues_it_for_a_fresh_set_of_attempts(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    credits(&app, 1, 2).await;
    assert_eq!(kill_due_rows(&app, 500).await, 2);
    credits(&app, 3, 1).await;
    let dead = dead_ids(&app.pool).await;
    let pending = ids(&app.pool, "select id from outbox where dead_at is null").await[0];
    let browser = Browser::logged_in(&app).await;
    let csrf = browser.page("/console/outbox").await.csrf();

    let retried = browser
        .post(
            &format!("/console/outbox/{}/retry", dead[0]),
            &[("csrf", &csrf), ("back", "/console/outbox?state=dead")],
        )
        .await;
    retried.assert_status(StatusCode::SEE_OTHER, "a retry");
    assert_eq!(retried.location(), "/console/outbox?state=dead&retried=1");
    assert_eq!(
        states(&app.pool).await,
        [(dead[0], false, 1), (dead[1], true, 1), (pending, false, 0)],
        "only that row, its attempts kept"
    );
    let (due, lease): (bool, Option<f64>) = sqlx::query_as(
        "select available_at <= now(), extract(epoch from locked_until)::float8 from outbox where id = $1",
    )
    .bind(dead[0])
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert!(due, "due now");
    assert_eq!(lease, None);
    let notice = browser.page(retried.location()).await;
    assert!(
        notice
            .body
            .contains("Re-queued 1 dead row(s) for delivery.")
    );
    assert_eq!(notice.row_ids(), [dead[1]]);

    // The drainer tries it again (with the pending row): both die.
    assert_eq!(
        kill_due_rows(&app, 500).await,
        2,
        "re-queued rows are tried again"
    );
    assert_eq!(dead_ids(&app.pool).await.len(), 3);

    // Retrying a row that is not dead changes nothing; the way back stays
    // on the console.
    credits(&app, 4, 1).await;
    let pending = ids(&app.pool, "select id from outbox where dead_at is null").await[0];
    for (id, back, location) in [
        (
            pending,
            "/console/events/stripe/evt_4",
            "/console/events/stripe/evt_4?retried=0",
        ),
        (999_999, "https://evil.example/", "/console?retried=0"),
        (
            999_999,
            "/console/outbox\r\nX-Injected: 1",
            "/console?retried=0",
        ),
    ] {
        let page = browser
            .post(
                &format!("/console/outbox/{id}/retry"),
                &[("csrf", &csrf), ("back", back)],
            )
            .await;
        page.assert_status(StatusCode::SEE_OTHER, back);
        assert_eq!(page.location(), location);
    }
    assert_eq!(dead_ids(&app.pool).await.len(), 3);
    // From an event's page, back to it with a notice.
    let back = "/console/events/stripe/evt_1";
    let page = browser
        .post(
            &format!("/console/outbox/{}/retry", dead[0]),
            &[("csrf", &csrf), ("back", back)],
        )
        .await;
    assert_eq!(page.location(), format!("{back}?retried=1"));
    let event = browser.page(page.location()).await;
    assert!(event.body.contains("Re-queued 1 outbox row(s)."));
    assert!(
        event
            .body
            .contains("<span class=\"pill s-pending\">pending</span>")
    );
}

#[sqlx::test]
async fn a_bulk_retry_counts_first_and_then_retries_exactly_the_rows_it_counted(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    credits(&app, 1, 3).await;
    assert_eq!(kill_due_rows(&app, 500).await, 3);
    receipts(&app, 1, 2).await;
    assert_eq!(kill_due_rows(&app, 503).await, 2);
    credits(&app, 10, 1).await;
    let browser = Browser::logged_in(&app).await;

    // Dry runs: how many dead rows each filter matches.
    for (query, count) in [
        ("state=dead", 5),
        ("state=dead&topic=wallet.credited", 3),
        ("state=dead&topic=payment.receipt", 2),
        ("state=dead&error=HTTP%20503", 2),
        ("state=dead&topic=wallet.credited&error=503", 0),
    ] {
        let page = browser
            .page(&format!("/console/outbox/retry?{query}"))
            .await;
        if count == 0 {
            assert!(page.body.contains("No dead row matches."), "{query}");
            assert_eq!(page.input("max_id"), None);
        } else {
            assert!(
                page.body
                    .contains(&format!("<strong>{count}</strong> dead row(s) match")),
                "{query}: {}",
                page.body
            );
        }
    }
    let before = dead_ids(&app.pool).await;
    assert_eq!(before.len(), 5, "dry runs change nothing");

    let dry_run = browser
        .page("/console/outbox/retry?state=dead&topic=wallet.credited")
        .await;
    assert_eq!(dry_run.input("topic").as_deref(), Some("wallet.credited"));
    let counted = ids(
        &app.pool,
        "select id from outbox where dead_at is not null and topic = 'wallet.credited' order by id",
    )
    .await;
    let max_id = dry_run.input("max_id").unwrap();
    assert_eq!(max_id, counted.last().unwrap().to_string());

    // A row of the same topic dies after the count.
    assert_eq!(kill_due_rows(&app, 500).await, 1);
    let late = *dead_ids(&app.pool).await.last().unwrap();
    assert!(late > counted[2]);
    let again = browser
        .page("/console/outbox/retry?state=dead&topic=wallet.credited")
        .await;
    assert!(again.body.contains("<strong>4</strong> dead row(s) match"));

    // Confirming the first count retries the three it counted only.
    let confirmed = browser
        .post(
            "/console/outbox/retry",
            &[
                ("csrf", &dry_run.csrf()),
                ("topic", "wallet.credited"),
                ("error", ""),
                ("max_id", &max_id),
            ],
        )
        .await;
    confirmed.assert_status(StatusCode::SEE_OTHER, "confirmed");
    assert_eq!(
        confirmed.location(),
        "/console/outbox?state=dead&topic=wallet.credited&sink=&error=&retried=3"
    );
    let still_dead = dead_ids(&app.pool).await;
    let receipts_dead = ids(
        &app.pool,
        "select id from outbox where topic = 'payment.receipt' order by id",
    )
    .await;
    let mut expected = receipts_dead.clone();
    expected.push(late);
    expected.sort_unstable();
    assert_eq!(
        still_dead, expected,
        "the late row and the other topic stay dead"
    );
    let requeued = ids(
        &app.pool,
        "select id from outbox where dead_at is null and topic = 'wallet.credited' and attempts = 1 order by id",
    )
    .await;
    assert_eq!(requeued, counted);
    let notice = browser.page(confirmed.location()).await;
    assert!(
        notice
            .body
            .contains("Re-queued 3 dead row(s) for delivery.")
    );

    // By error text: the receipts' 503s.
    let by_error = browser
        .page("/console/outbox/retry?state=dead&error=503")
        .await;
    assert!(
        by_error
            .body
            .contains("<strong>2</strong> dead row(s) match")
    );
    let confirmed = browser
        .post(
            "/console/outbox/retry",
            &[
                ("csrf", &by_error.csrf()),
                ("topic", ""),
                ("error", "503"),
                ("max_id", &by_error.input("max_id").unwrap()),
            ],
        )
        .await;
    assert!(confirmed.location().ends_with("&retried=2"));
    assert_eq!(dead_ids(&app.pool).await, [late]);
}
