//! Ids that a URL's path cannot carry (`..`, `.`, `a/b`, `a?b#c`, `%2e`):
//! browsers, `reqwest` and proxies resolve `.` and `..` segments (even
//! written `%2E%2E`) before the server sees them. Each link the console
//! writes to such an event or user is followed as a real client follows it.

use reqwest::StatusCode;
use sqlx::PgPool;
use webhookd::clock::Clock;

use super::browser::unescape;
use super::{Browser, Page, console_app};
use crate::helpers::payment_intent_succeeded;

/// Ids that a path segment loses or changes on the way.
const AWKWARD: [&str; 7] = ["..", ".", "a/b", "a?b#c", "%2e", "%2E%2E", ".%2e"];

/// Where the page's replay form posts.
fn replay_action(page: &Page) -> String {
    let form = &page.body[page.body.find("<form class=\"action\"").unwrap()..];
    let start = form.find("action=\"").unwrap() + 8;
    unescape(&form[start..start + form[start..].find('"').unwrap()])
}

#[sqlx::test]
async fn events_and_users_whose_ids_a_path_would_lose_open_from_every_link(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    for (i, id) in AWKWARD.iter().enumerate() {
        // An event of that id, and a user of that id credited by another.
        app.deliver_each(&[
            (
                &payment_intent_succeeded(id, &format!("pi_a{i}"), &format!("user_{i}"), 100),
                "processed",
            ),
            (
                &payment_intent_succeeded(&format!("evt_{i}"), &format!("pi_b{i}"), id, 100),
                "processed",
            ),
        ])
        .await;
    }
    let browser = Browser::logged_in(&app).await;
    let list = browser.page("/console/events").await;
    for (i, id) in AWKWARD.iter().enumerate() {
        // From the events list to the event's page.
        let address = list.link(id);
        let event = browser.get(&address).await;
        event.assert_status(StatusCode::OK, &address);
        assert!(
            event.body.contains(&format!("<h1 class=\"id\">{id}</h1>")),
            "{address} opened another page: {}",
            event.body
        );
        // Its replay form posts to it, and comes back to it.
        let replay = replay_action(&event);
        let replayed = browser.post(&replay, &[("csrf", &event.csrf())]).await;
        replayed.assert_status(StatusCode::SEE_OTHER, &replay);
        let back = browser.get(replayed.location()).await;
        back.assert_status(StatusCode::OK, replayed.location());
        assert!(back.body.contains("Replayed: ignored."), "{}", back.body);

        // From the other event's ledger entry to the user, and back.
        let other = browser.page(&list.link(&format!("evt_{i}"))).await;
        let address = other.link(id);
        let user = browser.get(&address).await;
        user.assert_status(StatusCode::OK, &address);
        assert!(
            user.body.contains("1.00</span> USD"),
            "{address}: {}",
            user.body
        );
        browser.page(&user.link(&format!("evt_{i}"))).await;
    }
}
