//! The events list: newest first, 50 a page, walked by its "Older" links
//! without a gap or a repeat; filtered by provider, type, outcome, how it
//! arrived and when; bad times and cursors refused.

use futures_util::future::join_all;
use reqwest::StatusCode;
use serde_json::json;
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::events::{ImportRow, import_rows};

use super::{Browser, console_app, deliver_razorpay, encoded, razorpay_captured};
use crate::helpers::{TestApp, charge, event_of_type, payment_intent_succeeded};

/// Walks from `first` through every "Older" link: each page's event ids.
async fn walk(browser: &Browser<'_>, first: &str) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut next = Some(first.to_owned());
    while let Some(path) = next {
        assert!(pages.len() < 10, "the walk never ends");
        let page = browser.page(&path).await;
        if !pages.is_empty() {
            assert!(page.body.contains(">Newest</a>"), "{path}");
        }
        pages.push(page.event_ids());
        next = page.next_link();
    }
    pages
}

/// The ids the database holds, newest first, as the console orders them.
async fn newest_first(app: &TestApp, outcome: Option<&str>) -> Vec<String> {
    sqlx::query_scalar(
        "select event_id from processed_events where $1::text is null or outcome = $1
         order by received_at desc, provider desc, event_id desc",
    )
    .bind(outcome)
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

#[sqlx::test]
async fn the_older_links_walk_every_event_once_newest_first_fifty_a_page(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    // 90 credits and 30 events without an effect, delivered 20 at a time
    // (credits share group commits, so many share a received_at).
    let bodies: Vec<(String, &str)> = (0..120)
        .map(|n| {
            let id = format!("evt_{n:03}");
            if n % 4 == 3 {
                let body = event_of_type(&id, "customer.created", json!({"id": "cus_1"}));
                (body, "ignored")
            } else {
                let body = payment_intent_succeeded(&id, &format!("pi_{n}"), "user_1", 10);
                (body, "processed")
            }
        })
        .collect();
    for chunk in bodies.chunks(20) {
        join_all(
            chunk
                .iter()
                .map(|(body, outcome)| app.deliver(body, outcome)),
        )
        .await;
    }
    let browser = Browser::bearer(&app);

    let pages = walk(&browser, "/console/events").await;
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [50, 50, 20], "the last page has no Older link");
    let walked: Vec<String> = pages.concat();
    assert_eq!(walked, newest_first(&app, None).await);
    let mut unique = walked.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 120, "every event exactly once");

    // The filter goes along with each link.
    let pages = walk(&browser, "/console/events?outcome=processed").await;
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [50, 40]);
    assert_eq!(pages.concat(), newest_first(&app, Some("processed")).await);
}

/// Ids of the events `path` lists, sorted.
async fn listed(browser: &Browser<'_>, path: &str) -> Vec<String> {
    let mut ids = browser.page(path).await.event_ids();
    ids.sort();
    ids
}

#[sqlx::test]
async fn the_filters_narrow_the_list_by_provider_type_outcome_and_arrival(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    app.deliver_each(&[
        (
            &payment_intent_succeeded("evt_credit", "pi_1", "user_1", 2000),
            "processed",
        ),
        (
            &event_of_type("evt_ignored", "customer.created", json!({"id": "cus_1"})),
            "ignored",
        ),
        (
            &charge("evt_deferred", "charge.refunded", "ch_9", "pi_9", 500, 500),
            "deferred",
        ),
    ])
    .await;
    deliver_razorpay(
        &app,
        "rzp_evt_1",
        &razorpay_captured("pay_1", 5000),
        "processed",
    )
    .await;
    let imported = ImportRow {
        event_id: "evt_imported".to_owned(),
        event_type: "payment_intent.succeeded".to_owned(),
        processed_at: None,
    };
    assert_eq!(
        import_rows(&app.pool, "stripe", &[imported]).await.unwrap(),
        1
    );
    let browser = Browser::bearer(&app);

    let cases: [(&str, &[&str]); 11] = [
        (
            "",
            &[
                "evt_credit",
                "evt_deferred",
                "evt_ignored",
                "evt_imported",
                "rzp_evt_1",
            ],
        ),
        ("provider=razorpay", &["rzp_evt_1"]),
        (
            "provider=stripe",
            &["evt_credit", "evt_deferred", "evt_ignored", "evt_imported"],
        ),
        ("type=customer.created", &["evt_ignored"]),
        (
            "type=payment_intent.succeeded",
            &["evt_credit", "evt_imported"],
        ),
        ("outcome=deferred", &["evt_deferred"]),
        ("outcome=processed", &["evt_credit", "rzp_evt_1"]),
        ("via=import", &["evt_imported"]),
        (
            "via=webhook",
            &["evt_credit", "evt_deferred", "evt_ignored", "rzp_evt_1"],
        ),
        ("via=sweep", &[]),
        (
            "provider=stripe&type=payment_intent.succeeded&outcome=processed&via=webhook",
            &["evt_credit"],
        ),
    ];
    for (query, expected) in cases {
        let path = format!("/console/events?{query}");
        assert_eq!(listed(&browser, &path).await, expected, "{path}");
    }
    // The form shows the filter it applied.
    let page = browser
        .page("/console/events?provider=razorpay&outcome=processed&type=payment.captured")
        .await;
    assert!(page.body.contains("<option selected>razorpay</option>"));
    assert!(page.body.contains("<option selected>processed</option>"));
    assert_eq!(page.input("type").as_deref(), Some("payment.captured"));
    let nothing = browser.page("/console/events?outcome=rejected").await;
    assert!(nothing.event_ids().is_empty());
    assert!(nothing.body.contains("No event matches."));
}

#[sqlx::test]
async fn the_time_filters_keep_what_was_received_in_the_window_and_bad_input_is_refused(
    pool: PgPool,
) {
    let app = console_app(pool, Clock::System).await;
    for id in ["evt_a", "evt_b", "evt_c"] {
        app.deliver(
            &event_of_type(id, "customer.created", json!({"id": "cus_1"})),
            "ignored",
        )
        .await;
    }
    // Received at known times (UTC).
    sqlx::raw_sql(
        "update processed_events set received_at = '2026-11-01T10:00:00Z' where event_id = 'evt_a';
         update processed_events set received_at = '2026-11-01T12:00:00Z' where event_id = 'evt_b';
         update processed_events set received_at = '2026-11-02T09:30:15Z' where event_id = 'evt_c';",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let browser = Browser::bearer(&app);
    let cases: [(&str, &[&str]); 7] = [
        ("from=2026-11-01T11:00", &["evt_b", "evt_c"]),
        ("from=2026-11-01T12:00", &["evt_b", "evt_c"]),
        ("to=2026-11-01T12:00", &["evt_a"]),
        (
            "from=2026-11-01T10:00&to=2026-11-02T00:00",
            &["evt_a", "evt_b"],
        ),
        ("from=2026-11-02T09:30:15", &["evt_c"]),
        ("from=2026-11-02T09:30:16", &[]),
        (
            "from=2026-11-01T12:00:00Z&to=2026-11-03T00:00:00Z",
            &["evt_b", "evt_c"],
        ),
    ];
    for (query, expected) in cases {
        let path = format!("/console/events?{query}");
        assert_eq!(listed(&browser, &path).await, expected, "{path}");
    }

    for query in [
        "from=yesterday",
        "to=2026-13-01T00:00",
        "from=2026-11-01",
        "to=1762000000",
    ] {
        let page = browser.get(&format!("/console/events?{query}")).await;
        page.assert_status(StatusCode::BAD_REQUEST, query);
        assert!(
            page.body.contains("2026-12-01T15:30"),
            "says how: {}",
            page.body
        );
    }
    for cursor in [
        "2026-11-01T10:00:00Z",
        "2026-11-01 10:00:00.000000Z",
        "garbage",
        "2026-11-01T10:00:00.000000Z'; drop table processed_events; --",
    ] {
        let path = format!(
            "/console/events?before_at={}&before_provider=stripe&before_id=evt_b",
            encoded(cursor)
        );
        let page = browser.get(&path).await;
        page.assert_status(StatusCode::BAD_REQUEST, cursor);
        assert!(page.body.contains("That page link is malformed."));
    }
    assert_eq!(app.count("processed_events").await, 3);
    // A well-formed cursor starts the page after it.
    let path = format!(
        "/console/events?before_at={}&before_provider=stripe&before_id=evt_b",
        encoded("2026-11-01T12:00:00.000000Z")
    );
    assert_eq!(listed(&browser, &path).await, ["evt_a"]);
}
