//! The pages that answer "what happened": a user's money, an event's
//! story, what waits, and the overview's figures, each against what the
//! database holds.

use std::time::Duration;

use reqwest::StatusCode;
use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{
    Browser, console_app, dead_ids, deliver_razorpay, encoded, kill_due_rows, razorpay_captured,
};
use crate::helpers::{charge, now, payment_intent_succeeded};

#[sqlx::test]
async fn a_users_page_shows_each_wallet_formatted_and_entries_linking_to_their_events(
    pool: PgPool,
) {
    let app = console_app(pool, Clock::System).await;
    app.deliver_each(&[
        (
            &payment_intent_succeeded("evt_credit", "pi_1", "user_1", 2000),
            "processed",
        ),
        (
            &payment_intent_succeeded("evt_credit_2", "pi_2", "user_1", 55),
            "processed",
        ),
        (
            &charge("evt_refund", "charge.refunded", "ch_1", "pi_1", 2000, 500),
            "processed",
        ),
    ])
    .await;
    deliver_razorpay(
        &app,
        "rzp_paid",
        &razorpay_captured("pay_1", 5000),
        "processed",
    )
    .await;
    app.deliver(
        &payment_intent_succeeded("evt_other", "pi_3", "user_2", 100),
        "processed",
    )
    .await;
    assert_eq!(app.balance("user_1", "USD").await, Some(1555));
    assert_eq!(app.balance("user_1", "INR").await, Some(5000));
    let browser = Browser::bearer(&app);

    let page = browser.page("/console/users/user_1").await;
    assert!(page.body.contains("<h1 class=\"id\">user_1</h1>"));
    assert!(page.body.contains("15.55</span> USD"), "{}", page.body);
    assert!(page.body.contains("50.00</span> INR"), "{}", page.body);
    for amount in [">20.00<", ">0.55<", ">-5.00<", ">50.00<"] {
        assert!(page.body.contains(amount), "{amount}");
    }
    for event in [
        "stripe&#38;id=evt_credit",
        "stripe&#38;id=evt_credit_2",
        "stripe&#38;id=evt_refund",
        "razorpay&#38;id=rzp_paid",
    ] {
        assert!(
            page.body
                .contains(&format!("href=\"/console/event?provider={event}\"")),
            "a link to {event}"
        );
    }
    assert!(!page.body.contains("evt_other"), "another user's event");
    assert!(page.body.contains("href=\"/console/events?q=user_1\""));

    let nobody = browser.page("/console/users/user_nobody").await;
    assert!(nobody.body.contains("No wallet."));
    assert!(nobody.body.contains("Nothing is recorded for this user."));
}

#[sqlx::test]
async fn an_events_page_shows_its_payload_outcome_effects_outbox_and_story(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    app.deliver(
        &payment_intent_succeeded("evt_credit", "pi_1", "user_1", 2000),
        "processed",
    )
    .await;
    assert_eq!(kill_due_rows(&app, 503).await, 1);
    let dead = dead_ids(&app.pool).await[0];
    app.deliver(
        &charge("evt_charge", "charge.succeeded", "ch_1", "pi_1", 2000, 0),
        "ignored",
    )
    .await;
    let entry: i64 =
        sqlx::query_scalar("select id from wallet_entries where event_id = 'evt_credit'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let browser = Browser::bearer(&app);

    let page = browser.page("/console/events/stripe/evt_credit").await;
    let body = &page.body;
    assert!(body.contains("<h1 class=\"id\">evt_credit</h1>"));
    assert!(body.contains("<dd>payment_intent.succeeded</dd>"));
    assert!(body.contains("<span class=\"pill o-processed\">processed</span>"));
    assert!(body.contains("<dd>webhook</dd>"));
    // The payload, pretty-printed.
    assert!(body.contains("&#34;amount_received&#34;: 2000"), "{body}");
    assert!(body.contains("&#34;user_id&#34;: &#34;user_1&#34;"));
    // Its ledger entry and its outbox row, dead, with a retry.
    assert!(body.contains(&format!("<td>#{entry}</td>")));
    assert!(body.contains(">20.00<"));
    assert!(body.contains("href=\"/console/user?id=user_1\""));
    assert!(body.contains(&format!("<td>#{dead}</td><td>wallet.credited</td>")));
    assert!(body.contains("<span class=\"pill s-dead\">dead</span>"));
    assert!(body.contains("HTTP 503"));
    assert!(body.contains(&format!("action=\"/console/outbox/{dead}/retry\"")));
    assert!(
        page.body
            .contains("name=\"back\" value=\"/console/event?provider=stripe&#38;id=evt_credit\"")
    );
    // The story, as `webhookd explain` tells it.
    for line in [
        "event stripe evt_credit (payment_intent.succeeded, API version 2024-06-20) received, signature verified, claimed: processed".to_owned(),
        format!("ledger entry #{entry}: credit 2000 USD for wallet user_1/USD (natural key pi_1) by event evt_credit"),
        format!("outbox #{dead} wallet.credited written by event evt_credit"),
        format!("outbox #{dead} DEAD after 1 attempt(s): HTTP 503"),
    ] {
        assert!(body.contains(&line), "{line} in {body}");
    }
    assert!(body.contains("action=\"/console/event/replay?provider=stripe&#38;id=evt_credit\""));

    // The charge that came second: ignored, naming its owner; its payment
    // row and receipt.
    let charge = browser.page("/console/events/stripe/evt_charge").await;
    assert!(
        charge
            .body
            .contains("<span class=\"pill o-ignored\">ignored</span>")
    );
    assert!(
        charge
            .body
            .contains("&#34;owner_event_id&#34;: &#34;evt_credit&#34;")
    );
    assert!(charge.body.contains("<td>payment.receipt</td>"));
    assert!(charge.body.contains("href=\"/console/events?q=ch_1\""));
    assert!(charge.body.contains(">20.00 USD<"));

    for missing in [
        "/console/events/stripe/evt_nope",
        "/console/events/razorpay/evt_credit",
    ] {
        let page = browser.get(missing).await;
        page.assert_status(StatusCode::NOT_FOUND, missing);
        assert!(page.body.contains("No such event is stored"));
    }
}

#[sqlx::test]
async fn the_deferred_page_lists_a_refund_waiting_for_its_payment_until_it_comes(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    app.deliver(
        &charge(
            "evt_early_refund",
            "charge.refunded",
            "ch_1",
            "pi_late",
            900,
            300,
        ),
        "deferred",
    )
    .await;
    let browser = Browser::bearer(&app);

    let page = browser.page("/console/deferred").await;
    assert!(
        page.body.contains("1 event(s) wait for a dependency"),
        "{}",
        page.body
    );
    assert!(page.body.contains(">evt_early_refund</a>"));
    assert!(page.body.contains("<td>charge.refunded</td>"));
    assert!(page.body.contains(&format!(
        "href=\"/console/events?q={}\">pi_late</a>",
        encoded("pi_late")
    )));
    // What it waits for finds it.
    let waiting = browser.page("/console/events?q=pi_late").await;
    assert_eq!(waiting.event_ids(), ["evt_early_refund"]);

    app.deliver(
        &payment_intent_succeeded("evt_credit", "pi_late", "user_1", 900),
        "processed",
    )
    .await;
    assert_eq!(app.count("deferred_events").await, 0);
    assert_eq!(app.balance("user_1", "USD").await, Some(600));
    let page = browser.page("/console/deferred").await;
    assert!(page.body.contains("0 event(s) wait"));
    assert!(page.body.contains("Nothing waits."));
    assert!(!page.body.contains("evt_early_refund"));
}

#[sqlx::test]
async fn the_overview_and_its_live_part_show_the_outbox_and_deferred_counts(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    app.deliver(
        &payment_intent_succeeded("evt_1", "pi_1", "user_1", 100),
        "processed",
    )
    .await;
    assert_eq!(kill_due_rows(&app, 500).await, 1);
    for n in 2..=3 {
        app.deliver(
            &payment_intent_succeeded(&format!("evt_{n}"), &format!("pi_{n}"), "user_1", 100),
            "processed",
        )
        .await;
    }
    app.deliver(
        &charge("evt_waits", "charge.refunded", "ch_9", "pi_9", 100, 100),
        "deferred",
    )
    .await;
    let (pending, dead): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where dead_at is null), count(*) filter (where dead_at is not null)
         from outbox where delivered_at is null",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((pending, dead), (2, 1));
    let browser = Browser::bearer(&app);

    let overview = browser.page("/console").await;
    let live = browser.page("/console/live").await;
    assert!(overview.body.contains("<h1>Overview</h1>"));
    assert!(overview.body.contains("data-refresh=\"/console/live\""));
    assert!(!live.body.contains("<html"), "a fragment");
    for page in [&overview, &live] {
        let body = &page.body;
        assert!(
            body.contains("<a href=\"/console/outbox?state=pending\">2</a> <span>pending</span>"),
            "{body}"
        );
        assert!(body.contains("<a href=\"/console/outbox?state=dead\">1 dead</a>"));
        assert!(body.contains("<a href=\"/console/deferred\">1</a> <span>waiting</span>"));
        assert!(body.contains("processed 3"), "the chart's legend");
        assert!(body.contains("deferred 1"));
    }
}

/// The text of each chart's legend, in the page's order (the hour's, then
/// the day's).
fn legends(body: &str) -> Vec<String> {
    body.split("<p class=\"legend\">")
        .skip(1)
        .map(|rest| {
            let legend = &rest[..rest.find("</p>").unwrap()];
            let mut text = String::new();
            let mut in_tag = false;
            for c in legend.chars() {
                match c {
                    '<' => in_tag = true,
                    '>' => in_tag = false,
                    c if !in_tag => text.push(c),
                    _ => {}
                }
            }
            text.trim().to_owned()
        })
        .collect()
}

#[sqlx::test]
async fn the_overviews_day_is_read_at_most_once_a_minute_and_its_hour_each_time(pool: PgPool) {
    // A minute ahead of the database's clock, so that every event it
    // receives is in the charts' last bucket or before.
    let clock = Clock::manual(now() + 60);
    let app = console_app(pool, clock.clone()).await;
    let browser = Browser::bearer(&app);
    app.deliver(
        &payment_intent_succeeded("evt_1", "pi_1", "user_1", 100),
        "processed",
    )
    .await;
    let first = browser.page("/console/live").await;
    assert_eq!(legends(&first.body), ["processed 1", "processed 1"]);

    app.deliver(
        &payment_intent_succeeded("evt_2", "pi_2", "user_1", 100),
        "processed",
    )
    .await;
    let within_the_minute = browser.page("/console").await;
    assert_eq!(
        legends(&within_the_minute.body),
        ["processed 2", "processed 1"],
        "the hour read again, the day as read"
    );

    clock.advance(Duration::from_secs(60));
    let a_minute_later = browser.page("/console/live").await;
    assert_eq!(
        legends(&a_minute_later.body),
        ["processed 2", "processed 2"]
    );
}
