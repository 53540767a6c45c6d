//! Several sinks: each takes the topics its patterns match, keeps its own
//! attempts and dead letters, and one down never holds back another; a
//! sink added later takes only the rows written from then on.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use webhookd::cli::outbox::OutboxCommand;
use webhookd::config::Topics;
use webhookd::outbox::store::routes;

use crate::drain::sink::{SINK_SECRET, TestSink};
use crate::helpers::{now, payment_intent_succeeded, subscription};
use crate::service::lifecycle::{Server, database_url};

/// Rows of `sink` delivered.
async fn delivered(pool: &PgPool, sink: &str) -> i64 {
    sqlx::query_scalar("select count(*) from outbox where sink = $1 and delivered_at is not null")
        .bind(sink)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Waits (bounded) until `n` rows of `sink` are delivered.
async fn until_delivered_to(pool: &PgPool, sink: &str, n: i64) {
    for _ in 0..1200 {
        if delivered(pool, sink).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{n} rows of sink {sink} were not delivered");
}

#[sqlx::test]
async fn two_sinks_take_their_topics_and_one_down_never_delays_the_other(pool: PgPool) {
    let billing = TestSink::start().await;
    let ops = TestSink::start().await;
    // Ops is down: it answers 503 until the test brings it back.
    ops.script(&[(503, None); 10_000]);
    let server = Server::start_with(
        &database_url(&pool),
        &[
            ("WEBHOOKD_SINK_BILLING_URL", &billing.url),
            ("WEBHOOKD_SINK_BILLING_SECRET", SINK_SECRET),
            ("WEBHOOKD_SINK_BILLING_TOPICS", "wallet.*"),
            ("WEBHOOKD_SINK_OPS_URL", &ops.url),
            ("WEBHOOKD_SINK_OPS_SECRET", SINK_SECRET),
            // Retries soon, so that the catch-up is quick.
            ("WEBHOOKD_OUTBOX_BACKOFF_CAP", "200ms"),
            ("WEBHOOKD_OUTBOX_MAX_ATTEMPTS", "100000"),
            ("WEBHOOKD_OUTBOX_POLL", "100ms"),
        ],
    )
    .await;
    let routing: Vec<(String, Vec<String>)> =
        sqlx::query_as("select name, topics from outbox_sinks order by name")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        routing,
        [
            ("billing".to_owned(), vec!["wallet.*".to_owned()]),
            ("ops".to_owned(), vec!["*".to_owned()]),
        ],
        "the routing is the configuration's, `default` gone"
    );
    for n in 0..10 {
        let credit = payment_intent_succeeded(&format!("evt_{n}"), &format!("pi_{n}"), "user_1", 5);
        assert!(server.post(credit).await.unwrap().status().is_success());
    }
    let renewal = subscription(
        "evt_sub",
        "customer.subscription.updated",
        "sub_1",
        "active",
        now(),
    );
    assert!(server.post(renewal).await.unwrap().status().is_success());

    // Billing has every credit while ops is still failing.
    until_delivered_to(&pool, "billing", 10).await;
    ops.until_received(11).await;
    assert_eq!(delivered(&pool, "ops").await, 0, "ops is down");
    let billing_topics: HashSet<String> = (billing.received().iter())
        .map(|r| r.body["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        billing_topics,
        HashSet::from(["wallet.credited".to_owned()])
    );
    assert!(billing.received().iter().all(|r| r.verified));
    let scraped = server
        .client
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        r#"webhookd_outbox_deliveries_total{result="delivered",sink="billing"} 10"#,
        r#"webhookd_outbox_depth{sink="ops"} 11"#,
        r#"webhookd_outbox_depth{sink="billing"} 0"#,
    ] {
        assert!(scraped.contains(series), "{series} in {scraped}");
    }
    assert!(
        scraped.contains(r#"webhookd_outbox_deliveries_total{result="retried",sink="ops"}"#),
        "{scraped}"
    );

    // Ops comes back and catches up: every row of its own, once each.
    ops.recover();
    until_delivered_to(&pool, "ops", 11).await;
    let rows: Vec<(i64, String)> =
        sqlx::query_as("select id, sink from outbox where sink = 'ops' order by id")
            .fetch_all(&pool)
            .await
            .unwrap();
    let delivered_ids: HashSet<String> = (ops.received().iter())
        .filter(|r| r.verified)
        .map(|r| r.webhook_id.clone())
        .collect();
    for (id, _) in &rows {
        assert!(delivered_ids.contains(&id.to_string()), "row {id}");
    }
    let ops_topics: HashSet<String> = (ops.received().iter())
        .map(|r| r.body["type"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        ops_topics.contains("wallet.credited") && ops_topics.len() >= 2,
        "{ops_topics:?}"
    );
    // A credit's row of each sink is a row of its own, with an id of its own.
    let per_event: Vec<i64> = sqlx::query_scalar(
        "select count(distinct sink) from outbox where topic = 'wallet.credited' group by event_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(per_event, vec![2; 10]);
    // Nothing was written for a sink nobody configured.
    let default_rows: i64 =
        sqlx::query_scalar("select count(*) from outbox where sink = 'default'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(default_rows, 0);
}

/// An outbox row of `event_id` for topic `wallet.credited`, written as the
/// ingest transaction writes it.
async fn write(pool: &PgPool, event_id: &str) -> Option<i64> {
    let payload = json!({ "n": event_id });
    let message = webhookd::outbox::Message {
        topic: "wallet.credited",
        provider: "stripe",
        event_id,
        event_type: Some("payment_intent.succeeded"),
        payload: &payload,
        ordering_key: None,
        account: None,
    };
    let mut conn = pool.acquire().await.unwrap();
    webhookd::outbox::enqueue_one(&mut conn, message)
        .await
        .unwrap()
}

/// The sinks of the rows of `event_id`.
async fn sinks_of(pool: &PgPool, event_id: &str) -> Vec<String> {
    sqlx::query_scalar("select sink from outbox where event_id = $1 order by sink")
        .bind(event_id)
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn a_sink_added_later_takes_only_the_rows_written_from_then_on(pool: PgPool) {
    // Before any `serve` synced: the one sink `default` takes every topic.
    assert!(write(&pool, "evt_before").await.is_some());
    assert_eq!(sinks_of(&pool, "evt_before").await, ["default"]);

    let all = Topics::all();
    let wallets = Topics::parse("wallet.*").unwrap();
    let synced = routes::sync(&pool, &[("default", &all), ("audit", &wallets)])
        .await
        .unwrap();
    assert_eq!(synced.added, ["audit"]);
    assert!(write(&pool, "evt_after").await.is_some());
    assert_eq!(sinks_of(&pool, "evt_after").await, ["audit", "default"]);
    assert_eq!(
        sinks_of(&pool, "evt_before").await,
        ["default"],
        "nothing written before is sent to the new sink"
    );
    // The same again changes nothing; a copy of an event writes nothing.
    let again = routes::sync(&pool, &[("default", &all), ("audit", &wallets)])
        .await
        .unwrap();
    assert_eq!(again, routes::Synced::default());
    assert_eq!(write(&pool, "evt_after").await, None);

    // A sink whose topics take none of the row's: no row for it.
    let payments = Topics::parse("payment.*").unwrap();
    let synced = routes::sync(&pool, &[("default", &payments), ("audit", &wallets)])
        .await
        .unwrap();
    assert_eq!(synced.changed, ["default"]);
    assert!(write(&pool, "evt_audit_only").await.is_some());
    assert_eq!(sinks_of(&pool, "evt_audit_only").await, ["audit"]);

    // Removed: it takes no more; its undelivered rows stay and are said.
    let synced = routes::sync(&pool, &[("audit", &wallets)]).await.unwrap();
    assert_eq!(synced.removed, [("default".to_owned(), 2)]);
    assert_eq!(
        sinks_of(&pool, "evt_after").await,
        ["audit", "default"],
        "kept"
    );
    // With no sink taking a topic, nothing is written and no id returned.
    let none = routes::sync(&pool, &[("audit", &payments)]).await.unwrap();
    assert_eq!(none.changed, ["audit"]);
    assert_eq!(write(&pool, "evt_nowhere").await, None);
    assert!(sinks_of(&pool, "evt_nowhere").await.is_empty());
    // Only `*` is a wildcard: `_` is itself (no `LIKE` wildcard leaks in),
    // and `*` takes any run of characters, dots included.
    let literal = Topics::parse("wallet_credited").unwrap();
    let any = Topics::parse("w*d").unwrap();
    routes::sync(&pool, &[("audit", &literal), ("wide", &any)])
        .await
        .unwrap();
    assert!(write(&pool, "evt_literal").await.is_some());
    assert_eq!(sinks_of(&pool, "evt_literal").await, ["wide"]);
}

#[sqlx::test]
async fn the_cli_lists_and_retries_one_sinks_dead_rows(pool: PgPool) {
    let all = Topics::all();
    routes::sync(&pool, &[("default", &all), ("audit", &all)])
        .await
        .unwrap();
    for event in ["evt_1", "evt_2"] {
        write(&pool, event).await;
    }
    sqlx::query("update outbox set dead_at = now(), last_error = 'HTTP 410 from ' || sink")
        .execute(&pool)
        .await
        .unwrap();
    let run = |command: OutboxCommand| {
        let pool = pool.clone();
        async move {
            let mut out = Vec::new();
            webhookd::cli::outbox::run(&pool, &command, &mut out)
                .await
                .unwrap();
            String::from_utf8(out).unwrap()
        }
    };
    let listed = run(OutboxCommand::List {
        dead: true,
        sink: Some("audit".into()),
        limit: 10,
    })
    .await;
    assert_eq!(listed.matches("HTTP 410 from audit").count(), 2, "{listed}");
    assert!(!listed.contains("from default"), "{listed}");
    assert!(
        listed.contains("sink audit: 0 pending (oldest 0 s), 2 dead"),
        "{listed}"
    );
    assert!(!listed.contains("sink default"), "{listed}");

    let retried = run(OutboxCommand::Retry {
        id: None,
        all_dead: true,
        sink: Some("audit".into()),
    })
    .await;
    assert!(retried.starts_with("re-queued 2: "), "{retried}");
    let dead: Vec<(String, i64)> = sqlx::query_as(
        "select sink, count(*) filter (where dead_at is not null) from outbox group by sink order by sink",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(dead, [("audit".to_owned(), 0), ("default".to_owned(), 2)]);
}
