//! What the commands print of ids and text from the network is bounded and
//! has its control characters escaped: a hostile event id cannot rewrite
//! the operator's terminal or flood it.

use sqlx::PgPool;
use webhookd::cli;
use webhookd::cli::events::EventsCommand;
use webhookd::cli::outbox::OutboxCommand;

/// An id that retitles the terminal, rings, clears the screen, reverses the
/// text that follows, and goes on for 2,000 bytes.
fn hostile() -> String {
    format!(
        "evt_\u{1b}]0;owned\u{7}\u{1b}[2J\u{202e}\u{9b}31m{}",
        "A".repeat(2000)
    )
}

fn assert_safe(output: &[u8], command: &str) {
    let text = String::from_utf8(output.to_vec()).unwrap();
    for c in ['\u{1b}', '\u{7}', '\u{202e}', '\u{9b}', '\r'] {
        assert!(!text.contains(c), "{command}: a raw {c:?} in {text}");
    }
    assert!(
        text.contains("evt_\\u{1b}]0;owned\\u{7}"),
        "{command}: {text}"
    );
    for line in text.lines() {
        assert!(
            line.len() <= 6 * 1024,
            "{command}: a line of {} bytes",
            line.len()
        );
    }
}

#[sqlx::test]
async fn listings_and_stories_escape_and_bound_what_the_network_sent(pool: PgPool) {
    let event_id = hostile();
    sqlx::query(
        "insert into processed_events (provider, event_id, event_type, outcome, detail, payload)
         values ('stripe', $1, $2, 'rejected', jsonb_build_object('reason', $1), jsonb_build_object('id', $1))",
    )
    .bind(&event_id)
    .bind("payment_intent.\u{1b}[31mred")
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "insert into outbox (topic, dedupe_key, provider, event_id, payload, last_error)
         values ('wallet.credited', 'stripe:' || md5($1), 'stripe', $1, '{}', 'HTTP 500: ' || $1)",
    )
    .bind(&event_id)
    .execute(&pool)
    .await
    .unwrap();

    let mut out = Vec::new();
    let list = EventsCommand::List {
        provider: None,
        limit: 10,
    };
    cli::events::run(&pool, &list, &[], &mut out).await.unwrap();
    assert_safe(&out, "events list");

    let mut out = Vec::new();
    let show = EventsCommand::Show {
        provider: "stripe".into(),
        event_id: event_id.clone(),
    };
    cli::events::run(&pool, &show, &[], &mut out).await.unwrap();
    let shown = String::from_utf8(out.clone()).unwrap();
    assert!(shown.contains("payment_intent.\\u{1b}[31mred"), "{shown}");
    assert!(!shown.contains('\u{1b}'));

    let mut out = Vec::new();
    let outbox = OutboxCommand::List {
        dead: false,
        sink: None,
        limit: 10,
    };
    cli::outbox::run(&pool, &outbox, &mut out).await.unwrap();
    assert_safe(&out, "outbox list");

    let mut out = Vec::new();
    assert!(cli::explain::run(&pool, &event_id, &mut out).await.unwrap());
    assert_safe(&out, "explain");

    // What the user typed, echoed back.
    let mut out = Vec::new();
    assert!(
        !cli::explain::run(&pool, &format!("{event_id}-unknown"), &mut out)
            .await
            .unwrap()
    );
    assert_safe(&out, "explain (nothing known)");
    let missing = EventsCommand::Show {
        provider: "stripe".into(),
        event_id: format!("{event_id}-unknown"),
    };
    let error = cli::events::run(&pool, &missing, &[], &mut Vec::new())
        .await
        .unwrap_err()
        .to_string();
    assert_safe(error.as_bytes(), "events show (missing)");
}
