//! The console in a real browser: headless Chromium, driven over W3C
//! WebDriver, logs in and walks every page of a console holding real
//! deliveries; each page's content is checked, its browser log must hold
//! no error (a script error, a CSP violation, a failed load), and each is
//! photographed under `<target dir>/console-screenshots/` (which is where
//! the pictures in `docs/CONSOLE.md` come from).
//!
//! Without chromedriver and Chromium the test says it is skipped, unless
//! `WEBHOOKD_BROWSER_TESTS=required` (as `scripts/test.sh` sets), which
//! makes it fail instead.

mod webdriver;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::outbox::{Drainer, DrainerSettings};

use crate::console::{TOKEN, console_app};
use crate::drain::sink::{TestSink, settings};
use crate::helpers::{TestApp, charge, payment_intent_succeeded};
use webdriver::{Browser, Installed};

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 900;
const PHONE_WIDTH: u32 = 390;
const PHONE_HEIGHT: u32 = 844;
/// The tallest a full-page screenshot gets.
const MAX_SHOT_HEIGHT: u32 = 2400;

const USER: &str = "user_browser";
/// A user id that is markup: it must show as text, never run.
const SCRIPT_USER: &str = "<script>alert(1)</script>";

/// chromedriver and Chromium, or `None` (skipped) when they are missing
/// and not required.
fn installed() -> Option<Installed> {
    match Installed::find() {
        Ok(installed) => Some(installed),
        Err(missing) => {
            if std::env::var("WEBHOOKD_BROWSER_TESTS").as_deref() == Ok("required") {
                panic!("WEBHOOKD_BROWSER_TESTS=required, but {missing}");
            }
            eprintln!(
                "browser test skipped: {missing}; set WEBHOOKD_BROWSER_TESTS=required to fail instead"
            );
            None
        }
    }
}

/// `<target dir>/console-screenshots`.
fn screenshots() -> PathBuf {
    let crate_root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| crate_root.join("target"), PathBuf::from);
    crate_root.join(target).join("console-screenshots")
}

/// Fails on any SEVERE entry of the browser's log since the last read.
async fn assert_clean_log(browser: &Browser, page: &str) {
    let severe: Vec<String> = browser
        .log()
        .await
        .into_iter()
        .filter(|e| e.level == "SEVERE")
        .map(|e| format!("[{}] {}", e.source, e.message))
        .collect();
    assert!(
        severe.is_empty(),
        "the browser logged errors on {page}:\n{}",
        severe.join("\n")
    );
}

/// Checks the page and its log, and photographs it 1280 px wide.
async fn visited(browser: &Browser, name: &str) {
    assert_clean_log(browser, name).await;
    let title = browser.title().await;
    assert!(
        title.ends_with("· webhookd console"),
        "{name}: title {title:?}"
    );
    browser
        .screenshot_page(
            &screenshots().join(format!("{name}.png")),
            WIDTH,
            HEIGHT,
            MAX_SHOT_HEIGHT,
        )
        .await;
}

/// The texts of every element matching `css`.
async fn texts(browser: &Browser, css: &str) -> Vec<String> {
    let mut all = Vec::new();
    for element in browser.find_all(css).await {
        all.push(browser.text(&element).await);
    }
    all
}

/// Types `q` into the header's search box and submits it.
async fn search(browser: &Browser, q: &str) {
    let input = browser.find("#search-q").await;
    browser.clear(&input).await;
    browser.send_keys(&input, q).await;
    browser
        .click(&browser.find("form.search button").await)
        .await;
    browser
        .wait_for_url_containing(&format!("/console/events?q={}", form_encoded(q)))
        .await;
    browser.wait_for("h1 q").await;
}

/// `value` as a browser puts it in a GET form's query.
fn form_encoded(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                char::from(b).to_string()
            }
            b' ' => "+".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Real deliveries: two credits and a refund for [`USER`], a credit for
/// [`SCRIPT_USER`], a refund that waits for a credit that never came.
async fn deliver_the_story(app: &TestApp) {
    app.deliver_each(&[
        (
            &payment_intent_succeeded("evt_b_credit_1", "pi_b_1", USER, 2500),
            "processed",
        ),
        (
            &payment_intent_succeeded("evt_b_credit_2", "pi_b_2", USER, 1200),
            "processed",
        ),
        (
            &charge(
                "evt_b_refund",
                "charge.refunded",
                "ch_b_1",
                "pi_b_1",
                2500,
                500,
            ),
            "processed",
        ),
        (
            &payment_intent_succeeded("evt_b_markup", "pi_b_markup", SCRIPT_USER, 700),
            "processed",
        ),
        (
            &charge(
                "evt_b_waiting",
                "charge.refunded",
                "ch_b_9",
                "pi_b_never",
                900,
                900,
            ),
            "deferred",
        ),
    ])
    .await;
}

/// Drains the outbox once into a sink that refuses the first delivery
/// for good (422): that row dies, the rest are delivered. The dead row's
/// id and event.
async fn one_dead_row(pool: &PgPool) -> (i64, String) {
    let sink = TestSink::start().await;
    sink.script(&[(422, None)]);
    let drainer = Drainer::new(
        pool.clone(),
        sink.sink(Clock::System),
        DrainerSettings {
            concurrency: 1,
            ..settings(5)
        },
        Clock::System,
    );
    let drained = drainer.drain_once().await.unwrap();
    assert_eq!(drained.dead, 1, "{drained:?}");
    let dead: Vec<(i64, String)> =
        sqlx::query_as("select id, event_id from outbox where dead_at is not null")
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let pending: i64 = sqlx::query_scalar(
        "select count(*) from outbox where dead_at is null and delivered_at is null",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(pending, 0, "every other row was delivered");
    let dead = dead.into_iter().next().unwrap();
    // Rows are leased oldest first: the first credit's is the one refused.
    assert_eq!(dead.1, "evt_b_credit_1");
    dead
}

#[sqlx::test]
async fn the_console_works_in_a_real_browser(pool: PgPool) {
    let Some(installed) = installed() else {
        return;
    };
    let started = Instant::now();
    let app = console_app(pool.clone(), Clock::System).await;
    deliver_the_story(&app).await;
    let (dead_id, dead_event) = one_dead_row(&pool).await;
    let browser = Browser::start(&installed, WIDTH, HEIGHT).await;

    // Signed out, the console sends the browser to its login form.
    browser.goto(&app.admin("/console")).await;
    let url = browser.wait_for_path("/console/login").await;
    assert!(url.ends_with("/console/login?next=%2Fconsole"), "{url}");
    browser.wait_for("#token").await;
    visited(&browser, "login").await;
    let token = browser.find("#token").await;
    assert_eq!(browser.property(&token, "type").await, "password");
    browser.send_keys(&token, TOKEN).await;
    browser
        .click(&browser.find("form.login button[type=submit]").await)
        .await;
    browser.wait_for_path("/console").await;

    // The overview.
    browser.wait_for("#live .cards").await;
    assert_eq!(browser.text_of("main h1").await, "Overview");
    let live = browser.text_of("#live").await;
    assert!(live.contains("1 dead"), "{live}");
    assert!(live.contains("1 waiting"), "the deferred refund: {live}");
    assert!(live.contains("Last hour: events per minute"), "{live}");
    let bars = browser.find_all("#live svg.chart rect").await;
    assert!(!bars.is_empty(), "the charts draw this hour's events");
    visited(&browser, "overview").await;

    // It refreshes by itself: an event arrives, and the pending count on
    // the page follows (polled, bounded; the script refreshes every 10 s).
    let pending = "#live .card:first-child .figure a";
    assert_eq!(browser.text_now(pending).await.as_deref(), Some("0"));
    app.deliver(
        &payment_intent_succeeded("evt_b_live", "pi_b_live", USER, 300),
        "processed",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let refreshed_after = Instant::now();
    loop {
        let now = browser.text_now(pending).await;
        if now.as_deref() == Some("1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the overview did not refresh within 30 s: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "the overview refreshed itself {:.1} s after the event arrived",
        refreshed_after.elapsed().as_secs_f64()
    );
    assert_clean_log(&browser, "overview, refreshed").await;

    // The events, newest first, with their filters.
    browser.goto(&app.admin("/console/events")).await;
    browser.wait_for("table.events").await;
    browser.find("form.filters").await;
    let listed = texts(&browser, "table.events td.id a").await;
    for id in [
        "evt_b_live",
        "evt_b_waiting",
        "evt_b_markup",
        "evt_b_refund",
        "evt_b_credit_2",
        "evt_b_credit_1",
    ] {
        assert!(listed.contains(&id.to_owned()), "{id} in {listed:?}");
    }
    assert_eq!(listed[0], "evt_b_live", "newest first");
    let outcomes = texts(&browser, "table.events .pill").await;
    assert!(outcomes.contains(&"deferred".to_owned()), "{outcomes:?}");
    visited(&browser, "events").await;

    // Searching the dead row's event by id, from the header, and on to it.
    search(&browser, &dead_event).await;
    let found = browser.find_all("table.events td.id a").await;
    let mut target = None;
    for link in found {
        if browser.text(&link).await == dead_event {
            target = Some(link);
        }
    }
    let link = target.unwrap_or_else(|| panic!("{dead_event} is not listed"));
    assert_clean_log(&browser, "the search for an event").await;
    browser.click(&link).await;
    browser.wait_for("h1.id").await;
    assert_eq!(browser.text_of("h1.id").await, dead_event);
    let heading = browser
        .execute(
            "return parseFloat(getComputedStyle(document.querySelector('h1.id')).fontSize)
                  / parseFloat(getComputedStyle(document.body).fontSize);",
            json!([]),
        )
        .await;
    assert!(
        heading.as_f64().is_some_and(|ratio| ratio > 1.2),
        "an id heading is set larger than the text: {heading}"
    );
    let facts = browser.text_of("dl.facts").await;
    assert!(
        facts.contains("processed") && facts.contains("webhook"),
        "{facts}"
    );
    assert!(
        texts(&browser, "form.action button")
            .await
            .iter()
            .any(|b| b == "Replay"),
        "a Replay button"
    );
    let outbox = browser.text_of("#outbox + .scroll table").await;
    assert!(
        outbox.contains("dead") && outbox.contains("HTTP 422"),
        "{outbox}"
    );
    assert!(
        texts(&browser, "section[aria-labelledby=outbox] button")
            .await
            .contains(&"Retry".to_owned()),
        "a dead row has a Retry button"
    );
    let story = browser.find_all("ol.story li").await;
    assert!(!story.is_empty(), "the story has lines");
    let story = browser.text_of("ol.story").await;
    assert!(story.contains(&dead_event), "{story}");
    visited(&browser, "event").await;

    // On to the user, from the event's ledger entry.
    let user_link = browser
        .find(&format!("a[href=\"/console/user?id={USER}\"]"))
        .await;
    browser.click(&user_link).await;
    browser.wait_for_path("/console/user").await;
    assert_eq!(browser.text_of("h1.id").await, USER);
    // 25.00 + 12.00 + 3.00 credited, 5.00 refunded.
    let wallets = browser.text_of("ul.wallets").await;
    assert!(wallets.contains("35.00 USD"), "{wallets}");
    let kinds = texts(&browser, "section[aria-labelledby=money] td").await;
    assert!(kinds.contains(&"refund".to_owned()), "{kinds:?}");
    assert!(kinds.contains(&"-5.00".to_owned()), "{kinds:?}");
    visited(&browser, "user").await;

    // Searching by user id lists the events that name the user.
    search(&browser, USER).await;
    assert_eq!(browser.text_of("main h1 q").await, USER);
    let listed = texts(&browser, "table.events td.id a").await;
    for id in ["evt_b_credit_1", "evt_b_credit_2", "evt_b_live"] {
        assert!(listed.contains(&id.to_owned()), "{id} in {listed:?}");
    }
    assert!(!listed.contains(&"evt_b_markup".to_owned()), "{listed:?}");
    assert_clean_log(&browser, "the search for a user").await;

    // Markup in an id is text: searched for, and on its user's page.
    search(&browser, SCRIPT_USER).await;
    assert_eq!(browser.text_of("main h1 q").await, SCRIPT_USER);
    assert_eq!(
        texts(&browser, "table.events td.id a").await,
        ["evt_b_markup"]
    );
    assert_clean_log(&browser, "the search for markup").await;
    let user_path = "/console/users/%3Cscript%3Ealert%281%29%3C%2Fscript%3E";
    browser.goto(&app.admin(user_path)).await;
    browser.wait_for("h1.id").await;
    assert_eq!(browser.text_of("h1.id").await, SCRIPT_USER);
    let wallets = browser.text_of("ul.wallets").await;
    assert!(wallets.contains("7.00 USD"), "{wallets}");
    let scripts = browser
        .execute("return document.scripts.length;", json!([]))
        .await;
    assert_eq!(scripts, 1, "only the console's own script");
    let source = browser.source().await;
    assert!(
        source.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "escaped in the page"
    );
    assert_clean_log(&browser, "the user named with markup").await;

    // The outbox: the dead row, and the pending one that just arrived.
    browser.goto(&app.admin("/console/outbox")).await;
    browser.wait_for("form.filters").await;
    let sinks = browser.text_of("main table.sinks tbody").await;
    assert!(sinks.starts_with("default 1 "), "each sink's rows: {sinks}");
    let rows = browser.text_of("main table.rows tbody").await;
    assert!(rows.contains("dead") && rows.contains("pending"), "{rows}");
    assert!(rows.contains("HTTP 422"), "{rows}");
    assert!(
        browser
            .text_of("main > p")
            .await
            .contains("1 pending (the oldest waiting"),
    );
    visited(&browser, "outbox").await;

    // The dead ones, and the bulk retry's dry run from there.
    browser
        .click(&browser.find("#o-state option[value=dead]").await)
        .await;
    browser
        .click(&browser.find("form.filters button[type=submit]").await)
        .await;
    browser
        .wait_for_url_containing("/console/outbox?state=dead")
        .await;
    let listed = texts(&browser, "main table.rows tbody tr").await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_clean_log(&browser, "the dead rows").await;
    browser.click(&browser.find("a.button").await).await;
    browser.wait_for_path("/console/outbox/retry").await;
    assert_eq!(
        browser.text_of("#bulk-count").await,
        "1 dead row(s) match; retry them?"
    );
    visited(&browser, "bulk-retry").await;

    // Retrying the dead row, from the outbox's dead rows.
    browser.goto(&app.admin("/console/outbox?state=dead")).await;
    let retry = browser
        .wait_for(&format!("button[aria-label=\"Retry row {dead_id}\"]"))
        .await;
    browser.click(&retry).await;
    let notice = browser.wait_for("p.notice").await;
    assert_eq!(
        browser.text(&notice).await,
        "Re-queued 1 dead row(s) for delivery."
    );
    assert_eq!(
        browser.text_of("p.empty").await,
        "No undelivered row matches.",
        "no dead row is left"
    );
    let still_dead: bool =
        sqlx::query_scalar("select dead_at is not null from outbox where id = $1")
            .bind(dead_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(!still_dead, "the row is re-queued in the database");
    visited(&browser, "outbox-retried").await;

    // The deferred refund.
    browser.goto(&app.admin("/console/deferred")).await;
    browser.wait_for("main table").await;
    let rows = browser.text_of("main table tbody").await;
    assert!(
        rows.contains("evt_b_waiting") && rows.contains("charge.refunded"),
        "{rows}"
    );
    assert!(rows.contains("pi_b_never"), "what it waits for: {rows}");
    visited(&browser, "deferred").await;

    // The doctor: every check of this process, the dead row's sink among them.
    browser.goto(&app.admin("/console/doctor")).await;
    browser.wait_for("table.doctor").await;
    let rows = browser.text_of("table.doctor tbody").await;
    for check in [
        "database",
        "migrations",
        "clock",
        "sink.default",
        "outbox.default",
    ] {
        assert!(rows.contains(check), "{check}: {rows}");
    }
    visited(&browser, "doctor").await;

    // A phone: the overview and the events, 390 px wide, no sideways scroll.
    browser.set_window_size(PHONE_WIDTH, PHONE_HEIGHT).await;
    for (name, path, ready) in [
        ("overview-phone", "/console", "#live .cards"),
        ("events-phone", "/console/events", "table.events"),
    ] {
        browser.goto(&app.admin(path)).await;
        browser.wait_for(ready).await;
        let overflow = browser
            .execute(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
                json!([]),
            )
            .await;
        assert_eq!(overflow, 0, "{name} scrolls sideways");
        assert_clean_log(&browser, name).await;
        browser
            .screenshot_page(
                &screenshots().join(format!("{name}.png")),
                PHONE_WIDTH,
                PHONE_HEIGHT,
                MAX_SHOT_HEIGHT,
            )
            .await;
    }
    browser.set_window_size(WIDTH, HEIGHT).await;

    // Logging out ends the session.
    browser
        .click(&browser.find("form.logout button").await)
        .await;
    browser.wait_for_path("/console/login").await;
    browser.goto(&app.admin("/console/outbox")).await;
    let url = browser.wait_for_path("/console/login").await;
    assert!(url.ends_with("next=%2Fconsole%2Foutbox"), "{url}");
    assert_clean_log(&browser, "the login after logging out").await;

    browser.quit().await;
    app.assert_consistent().await;
    eprintln!(
        "browser test: {:.1} s; screenshots in {}",
        started.elapsed().as_secs_f64(),
        screenshots().display()
    );
}
