//! What the console shows of the owners learned: the conflicting claims,
//! then the owners newest first, conflicts highlighted; a user's on their
//! page; and on the deferred page, the payments waiting for an owner
//! apart from the other waits, with their age.

use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{Browser, console_app, encoded};
use crate::effects::checkout::objects::{Session, intent};
use crate::helpers::charge;

/// The part of `body` from `start` to the next `</section>`.
fn section<'a>(body: &'a str, start: &str) -> &'a str {
    let from = body
        .find(start)
        .unwrap_or_else(|| panic!("{start} in {body}"));
    let rest = &body[from..];
    &rest[..rest.find("</section>").unwrap()]
}

#[sqlx::test]
async fn the_owners_page_lists_conflicts_first_and_owners_newest_first(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let browser = Browser::bearer(&app);
    let empty = browser.page("/console/owners").await;
    assert!(empty.body.contains("No conflicting claim."));
    assert!(empty.body.contains("No owner learned yet."));
    assert!(
        empty
            .body
            .contains("<a href=\"/console/owners\" aria-current=\"page\">Owners</a>")
    );

    let first = Session {
        customer: Some("cus_shared"),
        ..Session::paid("cs_a", "pi_a", "user_a", 100)
    };
    let second = Session {
        customer: Some("cus_shared"),
        ..Session::paid("cs_b", "pi_b", "user_b", 200)
    };
    app.deliver(&first.completed("evt_a"), "processed").await;
    app.deliver(&second.completed("evt_b"), "processed").await;

    let page = browser.page("/console/owners").await;
    let conflicts = section(&page.body, ">Conflicting claims</h2>");
    assert!(conflicts.contains("<tr class=\"conflict\">"), "{conflicts}");
    assert!(conflicts.contains(">cus_shared</a>"));
    assert!(conflicts.contains("<span class=\"pill conflict\">1 conflicting</span>"));
    assert!(
        conflicts.contains("href=\"/console/user?id=user_a\""),
        "the first owner stays"
    );
    assert!(!conflicts.contains("pi_a"), "{conflicts}");
    let recent = section(&page.body, ">Learned most recently</h2>");
    let at = |id: &str| {
        recent
            .find(&format!(">{id}</a>"))
            .unwrap_or_else(|| panic!("{id} in {recent}"))
    };
    assert!(at("pi_b") < at("pi_a"), "newest first: {recent}");
    assert!(at("cus_shared") > 0);
    assert!(recent.contains(&format!(
        "href=\"/console/events?q={}\">pi_b</a>",
        encoded("pi_b")
    )));
    assert!(recent.contains("href=\"/console/event?provider=stripe&#38;id=evt_b\">evt_b</a>"));
    assert!(recent.contains("href=\"/console/user?id=user_b\""));

    // A user's page lists what is theirs, the conflict included.
    let user = browser.page("/console/user?id=user_a").await;
    let owned = section(&user.body, ">Owners learned</h2>");
    assert!(owned.contains(">pi_a</a>") && owned.contains(">cus_shared</a>"));
    assert!(owned.contains("1 conflicting"));
    assert!(!owned.contains("pi_b"));
    // Searching a user finds the sessions that taught their owners, one
    // that credited nothing too.
    let failed = Session {
        payment_status: "unpaid",
        ..Session::paid("cs_c", "pi_c", "user_c", 300)
    };
    app.deliver(
        &failed.event("evt_c", "checkout.session.async_payment_failed"),
        "processed",
    )
    .await;
    assert_eq!(app.balance("user_c", "USD").await, None);
    let found = browser.page("/console/events?q=user_c").await;
    assert_eq!(found.event_ids(), ["evt_c"]);
}

#[sqlx::test]
async fn the_deferred_page_shows_a_payment_waiting_for_its_owner_apart_with_its_age(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    app.deliver(
        &intent("evt_lost", "pi_lost", Some("cus_lost"), 2500),
        "deferred",
    )
    .await;
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
    sqlx::query(
        "update deferred_events set created_at = now() - interval '5 hours' where event_id = 'evt_lost'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let browser = Browser::bearer(&app);

    let page = browser.page("/console/deferred").await;
    let body = &page.body;
    assert!(
        body.contains("2 event(s) wait for a dependency; the oldest for 5 h"),
        "{body}"
    );
    assert!(
        body.contains(
            "<span class=\"owner-wait\">1 of them wait for an owner</span>, the oldest for 5 h"
        ),
        "{body}"
    );
    let row = &body[body.find("<tr class=\"owner-wait\">").expect("a row apart")..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains(">evt_lost</a>"), "{row}");
    assert!(row.contains("<td>payment_intent.succeeded</td>"));
    assert!(
        row.contains(&format!(
            "waits for the owner of payment <a href=\"/console/events?q={}\">pi_lost</a>",
            encoded("pi_lost")
        )),
        "{row}"
    );
    assert!(row.contains("<td>5 h</td>"), "{row}");
    assert!(
        !row.contains("owner:payment:"),
        "the key is not shown: {row}"
    );
    // The refund's wait is shown as before.
    assert!(body.contains(&format!(
        "href=\"/console/events?q={}\">pi_late</a>",
        encoded("pi_late")
    )));
    assert_eq!(body.matches("<tr class=\"owner-wait\">").count(), 1);
    // What it waits for finds it.
    let waiting = browser.page("/console/events?q=pi_lost").await;
    assert_eq!(waiting.event_ids(), ["evt_lost"]);

    // Its session teaches the owner: nothing waits for one any more.
    let session = Session::paid("cs_lost", "pi_lost", "user_l", 2500);
    app.deliver(&session.completed("evt_cs_lost"), "processed")
        .await;
    assert_eq!(app.balance("user_l", "USD").await, Some(2500));
    let page = browser.page("/console/deferred").await;
    assert!(page.body.contains("1 event(s) wait for a dependency"));
    assert!(page.body.contains("None of them waits for an owner"));
    assert!(!page.body.contains("evt_lost"));
}
