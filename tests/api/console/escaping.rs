//! What the network sent is shown as text: a real signed event whose id,
//! user id and payload carry a script is escaped on every page that shows
//! it.

use serde_json::json;
use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{Browser, console_app, encoded};
use crate::helpers::event_of_type;

const SCRIPT: &str = "<script>alert(1)</script>";
/// `SCRIPT` as askama escapes it.
const ESCAPED: &str = "&#60;script&#62;alert(1)&#60;/script&#62;";

#[sqlx::test]
async fn a_script_in_an_event_id_user_id_or_payload_is_escaped_on_every_page(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let event_id = format!("evt_{SCRIPT}");
    let user_id = SCRIPT;
    let body = event_of_type(
        &event_id,
        "payment_intent.succeeded",
        json!({
            "id": "pi_1",
            "object": "payment_intent",
            "amount": 2000,
            "amount_received": 2000,
            "currency": "usd",
            "description": format!("{SCRIPT} \"quoted\" & 'so'"),
            "metadata": { "user_id": user_id },
            "status": "succeeded",
        }),
    );
    app.deliver(&body, "processed").await;
    assert_eq!(app.balance(user_id, "USD").await, Some(2000));

    let browser = Browser::bearer(&app);
    let pages = [
        "/console/events".to_owned(),
        format!("/console/events/stripe/{}", encoded(&event_id)),
        format!("/console/users/{}", encoded(user_id)),
        format!("/console/events?q={}", encoded(user_id)),
        format!("/console/events?q={}", encoded(&event_id)),
        format!("/console/events?q={}", encoded("pi_1")),
        "/console/outbox".to_owned(),
    ];
    for path in &pages {
        let page = browser.page(path).await;
        assert!(!page.body.contains(SCRIPT), "{path}: raw in {}", page.body);
        assert!(!page.body.contains("<script>"), "{path}");
        assert!(page.body.contains(ESCAPED), "{path}: {}", page.body);
    }
    // Each list found the event, under its escaped id.
    for path in [&pages[0], &pages[3], &pages[4], &pages[5]] {
        let page = browser.page(path).await;
        assert_eq!(page.event_ids(), std::slice::from_ref(&event_id), "{path}");
    }
    // The event's page shows the payload's text escaped, quotes included.
    let event = browser.page(&pages[1]).await;
    assert!(
        event.body.contains(&format!(
            "{ESCAPED} \\&#34;quoted\\&#34; &#38; &#39;so&#39;"
        )),
        "{}",
        event.body
    );
    // Links to it carry the id percent-encoded.
    let user = browser.page(&pages[2]).await;
    assert!(
        user.body.contains(&format!(
            "href=\"/console/event?provider=stripe&#38;id={}\"",
            encoded(&event_id)
        )),
        "{}",
        user.body
    );
}
