//! Every page is bounded in bytes whatever is stored: a payload that the
//! pretty-printer would blow up (arrays nested 118 deep around a million
//! zeros: every zero on a line of its own, 236 spaces in) is shown in part
//! and downloaded whole; errors, details and sweep results of a megabyte
//! are cut. Each page's size is printed (`--nocapture`).

use reqwest::StatusCode;
use reqwest::header;
use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{Browser, console_app, kill_due_rows};
use crate::helpers::{now, payment_intent_succeeded};

/// The most bytes any page may take here: the shown payload's 256 KiB and
/// the page around it.
const PAGE_BUDGET: usize = 512 * 1024;

/// A signed Stripe event just under the 2 MiB body limit: `depth` arrays
/// nested around `zeros` zeros.
fn nested_event(event_id: &str, depth: usize, zeros: usize) -> String {
    let mut deep = "[".repeat(depth);
    deep.push_str(&"0,".repeat(zeros - 1));
    deep.push('0');
    deep.push_str(&"]".repeat(depth));
    format!(
        r#"{{"id":"{event_id}","object":"event","type":"deep.nesting","created":{},"data":{{"object":{{"id":"obj_deep","object":"thing","deep":{deep}}}}}}}"#,
        now()
    )
}

#[sqlx::test]
async fn a_payload_nested_118_deep_is_shown_in_part_and_downloaded_whole(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    let body = nested_event("evt_deep", 118, 1_000_000);
    assert!(body.len() < 2 * 1024 * 1024, "{} bytes", body.len());
    app.deliver(&body, "ignored").await;
    let (stored, stored_bytes): (String, i32) = sqlx::query_as(
        "select payload::text, octet_length(payload::text) from processed_events where event_id = 'evt_deep'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();

    let browser = Browser::logged_in(&app).await;
    let list = browser.page("/console/events").await;
    let page = browser.page(&list.link("evt_deep")).await;
    eprintln!(
        "the event page of a {}-byte delivery ({stored_bytes} bytes stored): {} bytes",
        body.len(),
        page.body.len()
    );
    assert!(
        page.body.len() < PAGE_BUDGET,
        "{} bytes of page",
        page.body.len()
    );
    // It says how much it shows, indented as before.
    assert!(
        page.body.contains(&format!("of {stored_bytes} bytes")),
        "no note of the stored size"
    );
    assert!(page.body.contains("\n          [\n"), "indented");

    // The whole payload, as stored, is a download.
    let download = page.link("Download the payload");
    let raw = browser.get(&download).await;
    raw.assert_status(StatusCode::OK, &download);
    assert_eq!(raw.headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(
        raw.headers[header::CONTENT_DISPOSITION],
        "attachment; filename=\"stripe-evt_deep.json\""
    );
    assert_eq!(raw.body.len(), stored.len());
    assert!(raw.body == stored, "the download is the stored payload");
}

#[sqlx::test]
async fn errors_details_and_sweep_results_of_a_megabyte_are_cut_on_every_page(pool: PgPool) {
    let app = console_app(pool, Clock::System).await;
    app.deliver(
        &payment_intent_succeeded("evt_big", "pi_big", "user_big", 100),
        "processed",
    )
    .await;
    assert_eq!(kill_due_rows(&app, 500).await, 1);
    for statement in [
        "update outbox set last_error = repeat('e', 1000000), attempts = 2",
        "insert into outbox_attempts (outbox_id, attempt, at, outcome, error)
         select id, 2, now(), 'dead', repeat('a', 1000000) from outbox",
        "update processed_events set detail = jsonb_build_object('reason', repeat('d', 1000000))",
        "insert into sweeps (provider, last_run_at, last_result)
         values ('stripe', now(), jsonb_build_object('error', repeat('s', 1000000)))",
        // Waiting, so that the deferred page lists it.
        "insert into deferred_events (provider, event_id, waits_for) values ('stripe', 'evt_big', 'pi_none')",
    ] {
        sqlx::query(statement).execute(&app.pool).await.unwrap();
    }

    let browser = Browser::logged_in(&app).await;
    let event = browser
        .page("/console/event?provider=stripe&id=evt_big")
        .await;
    let mut sizes = vec![("event", event.body.len())];
    for (name, path) in [
        ("overview", "/console"),
        ("live", "/console/live"),
        ("events", "/console/events"),
        ("user", "/console/user?id=user_big"),
        ("outbox", "/console/outbox"),
        ("dead", "/console/outbox?state=dead&error=eee"),
        ("deferred", "/console/deferred"),
        ("owners", "/console/owners"),
        ("doctor", "/console/doctor"),
    ] {
        sizes.push((name, browser.page(path).await.body.len()));
    }
    eprintln!("page sizes in bytes: {sizes:?}");
    for (name, size) in &sizes {
        assert!(*size < PAGE_BUDGET, "{name}: {size} bytes");
    }
    // What was cut says so.
    assert!(event.body.contains("…(1000000 bytes)"), "the errors");
    let detail_bytes: i32 =
        sqlx::query_scalar("select octet_length(detail::text) from processed_events")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert!(
        event.body.contains(&format!("of {detail_bytes} bytes")),
        "the detail"
    );
}
