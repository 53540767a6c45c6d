//! `/metrics` and `/readyz` as an on-call engineer relies on them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use webhookd::clock::Clock;
use webhookd::providers::stripe::signature_header;

use crate::helpers::{
    OLD_SECRET, SECRET, TestApp, charge, event_of_type, now, payment_intent_succeeded, spawn_app,
    spawn_app_with, subscription,
};

async fn scrape(app: &TestApp) -> HashMap<String, f64> {
    let response = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    response
        .text()
        .await
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .map(|(name, value)| (name.to_owned(), value.parse().unwrap()))
        .collect()
}

#[sqlx::test]
async fn metrics_count_every_outcome(pool: PgPool) {
    let app = spawn_app(pool).await;
    let t = now();
    let credit = payment_intent_succeeded("evt_1", "pi_1", "user_1", 100);
    app.deliver_each(&[
        (&credit, "processed"),
        (&credit, "duplicate"),
        (
            &event_of_type("evt_2", "product.created", serde_json::json!({})),
            "ignored",
        ),
        (
            &subscription(
                "evt_3",
                "customer.subscription.updated",
                "sub_1",
                "active",
                t,
            ),
            "processed",
        ),
    ])
    .await;
    app.deliver(
        &subscription(
            "evt_4",
            "customer.subscription.updated",
            "sub_1",
            "past_due",
            t - 5,
        ),
        "superseded",
    )
    .await;
    app.deliver_each(&[
        (
            &charge("evt_5", "charge.refunded", "ch_9", "pi_9", 100, 100),
            "deferred",
        ),
        (
            &event_of_type("evt_6", "payment_intent.succeeded", serde_json::json!({})),
            "rejected",
        ),
    ])
    .await;
    let forged = app
        .post_stripe_with(credit.clone().into_bytes(), Some("t=1,v1=00"))
        .await;
    assert_eq!(forged.status(), StatusCode::BAD_REQUEST);
    let stale = signature_header(SECRET, t - 3600, credit.as_bytes());
    assert_eq!(
        app.post_stripe_with(credit.into_bytes(), Some(&stale))
            .await
            .status(),
        StatusCode::BAD_REQUEST
    );

    let metrics = scrape(&app).await;
    let events = |outcome: &str| {
        metrics
            .get(&format!(
                "webhookd_events_total{{provider=\"stripe\",outcome=\"{outcome}\"}}"
            ))
            .copied()
    };
    assert_eq!(events("processed"), Some(2.0));
    for outcome in [
        "duplicate",
        "ignored",
        "superseded",
        "deferred",
        "rejected",
        "invalid_signature",
        "stale",
    ] {
        assert_eq!(events(outcome), Some(1.0), "{outcome}");
    }
    let route = "/webhooks/{provider}";
    assert_eq!(
        metrics.get(&format!(
            "webhookd_http_requests_total{{route=\"{route}\",status=\"200\"}}"
        )),
        Some(&7.0)
    );
    assert_eq!(
        metrics.get(&format!(
            "webhookd_http_requests_total{{route=\"{route}\",status=\"400\"}}"
        )),
        Some(&2.0)
    );
    assert_eq!(
        metrics.get("webhookd_ingest_duration_seconds_count{provider=\"stripe\"}"),
        Some(&7.0)
    );
    assert_eq!(
        metrics.get("webhookd_outbox_depth{sink=\"default\"}"),
        Some(&2.0),
        "wallet.credited and subscription.changed wait"
    );
    assert_eq!(
        metrics.get("webhookd_outbox_dead{sink=\"default\"}"),
        Some(&0.0)
    );
    // Every verified event goes through the group commit; these were sent
    // one after the other, so each was a batch of one.
    assert_eq!(metrics.get("webhookd_ingest_batches_total"), Some(&7.0));
    assert_eq!(
        metrics.get("webhookd_ingest_batched_events_total"),
        Some(&7.0)
    );
    assert_eq!(
        metrics.get("webhookd_ingest_batch_fallbacks_total"),
        Some(&0.0)
    );
    // ... and so the batch size histogram has them all in its first bucket.
    let size = |series: &str| metrics.get(&format!("webhookd_ingest_batch_size{series}"));
    assert_eq!(size("_bucket{le=\"1\"}"), Some(&7.0));
    assert_eq!(size("_bucket{le=\"256\"}"), Some(&7.0));
    assert_eq!(size("_bucket{le=\"+Inf\"}"), Some(&7.0));
    assert_eq!(size("_count"), Some(&7.0));
    assert_eq!(size("_sum"), Some(&7.0));
    assert!(metrics.contains_key("webhookd_outbox_oldest_pending_age_seconds{sink=\"default\"}"));
}

#[sqlx::test]
async fn metrics_show_owners_learned_their_conflicts_and_payments_waiting_for_one(pool: PgPool) {
    use crate::effects::checkout::objects::{Session, intent};

    let app = spawn_app(pool).await;
    let metrics = scrape(&app).await;
    for gauge in [
        "webhookd_owners_learned",
        "webhookd_owner_conflicts",
        "webhookd_owner_waits",
        "webhookd_owner_wait_oldest_age_seconds",
        "webhookd_deferred_depth",
    ] {
        assert_eq!(metrics.get(gauge), Some(&0.0), "{gauge}");
    }

    // Two sessions of one customer for two users: three owners learned
    // (two intents, the customer) and one conflicting claim.
    for (event_id, session, intent_id, user) in [
        ("evt_a", "cs_a", "pi_a", "user_a"),
        ("evt_b", "cs_b", "pi_b", "user_b"),
    ] {
        let session = Session {
            customer: Some("cus_shared"),
            ..Session::paid(session, intent_id, user, 100)
        };
        app.deliver(&session.completed(event_id), "processed").await;
    }
    // A payment waiting for its owner for two hours, and a refund waiting
    // for its credit.
    app.deliver(&intent("evt_wait", "pi_wait", None, 500), "deferred")
        .await;
    app.deliver(
        &charge("evt_refund", "charge.refunded", "ch_9", "pi_9", 100, 100),
        "deferred",
    )
    .await;
    sqlx::query(
        "update deferred_events set created_at = now() - interval '2 hours' where event_id = 'evt_wait'",
    )
    .execute(&app.pool)
    .await
    .unwrap();

    let metrics = scrape(&app).await;
    assert_eq!(metrics.get("webhookd_owners_learned"), Some(&3.0));
    assert_eq!(metrics.get("webhookd_owner_conflicts"), Some(&1.0));
    assert_eq!(metrics.get("webhookd_owner_waits"), Some(&1.0));
    assert_eq!(metrics.get("webhookd_deferred_depth"), Some(&2.0));
    for gauge in [
        "webhookd_owner_wait_oldest_age_seconds",
        "webhookd_deferred_oldest_age_seconds",
    ] {
        let age = metrics[gauge];
        assert!((7200.0..7300.0).contains(&age), "{gauge}: {age}");
    }

    // Its session teaches the owner: the wait ends, the refund's stays.
    let session = Session::paid("cs_wait", "pi_wait", "user_w", 500);
    app.deliver(&session.completed("evt_cs_wait"), "processed")
        .await;
    let metrics = scrape(&app).await;
    assert_eq!(metrics.get("webhookd_owner_waits"), Some(&0.0));
    assert_eq!(
        metrics.get("webhookd_owner_wait_oldest_age_seconds"),
        Some(&0.0)
    );
    assert_eq!(metrics.get("webhookd_deferred_depth"), Some(&1.0));
    assert_eq!(metrics.get("webhookd_owners_learned"), Some(&4.0));
}

/// A TCP proxy in front of Postgres that can be cut and restored, so the
/// database becomes unreachable for the app only.
struct Proxy {
    port: u16,
    open: Arc<AtomicBool>,
    connections: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(upstream: (String, u16)) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let connections: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (accepting, tracked) = (open.clone(), connections.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !accepting.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused
                }
                let upstream = upstream.clone();
                tracked.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                }));
            }
        });
        Proxy {
            port,
            open,
            connections,
        }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

async fn readyz(app: &TestApp) -> StatusCode {
    app.client
        .get(format!("{}/readyz", app.address))
        .send()
        .await
        .unwrap()
        .status()
}

#[sqlx::test]
async fn readiness_goes_503_while_the_database_is_unreachable_and_recovers(pool: PgPool) {
    let options = (*pool.connect_options()).clone();
    let proxy = Proxy::start((options.get_host().to_owned(), options.get_port())).await;
    let through_proxy = PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(1))
        .connect_lazy_with(options.port(proxy.port));
    let app = spawn_app_with(through_proxy, Clock::System, |_| {}).await;
    assert_eq!(readyz(&app).await, StatusCode::OK);

    proxy.cut();
    assert_eq!(readyz(&app).await, StatusCode::SERVICE_UNAVAILABLE);
    let body = payment_intent_succeeded("evt_outage", "pi_outage", "user_1", 100);
    let during = app.post_stripe(&body).await;
    assert_eq!(
        during.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "never 2xx for uncommitted work"
    );

    proxy.restore();
    // The pool reconnects by itself; observe (bounded) until it has.
    let mut recovered = false;
    for _ in 0..50 {
        if readyz(&app).await == StatusCode::OK {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "/readyz did not come back");
    app.deliver(&body, "processed").await;
    let balance: i64 =
        sqlx::query_scalar("select balance_minor from wallets where user_id = 'user_1'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(balance, 100);
}

#[sqlx::test]
async fn a_worker_process_serves_health_and_metrics_but_no_webhooks(pool: PgPool) {
    let app = spawn_app_with(pool, Clock::System, |s| {
        s.role = webhookd::config::Role::Worker
    })
    .await;
    let body = payment_intent_succeeded("evt_w", "pi_w", "user_1", 100);
    assert_eq!(app.post_stripe(&body).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(readyz(&app).await, StatusCode::OK);
    assert!(
        scrape(&app)
            .await
            .contains_key("webhookd_outbox_depth{sink=\"default\"}")
    );
    app.assert_nothing_written().await;
}

#[sqlx::test]
async fn which_secret_of_a_rotation_signed_is_counted_so_an_old_one_can_be_known_unused(
    pool: PgPool,
) {
    let app = spawn_app(pool).await;
    for (i, secret) in [SECRET, OLD_SECRET, SECRET].iter().enumerate() {
        let body = payment_intent_succeeded(&format!("evt_rot{i}"), &format!("pi_rot{i}"), "u", 1);
        let header = signature_header(secret, now(), body.as_bytes());
        let answer = app.post_stripe_with(body.into_bytes(), Some(&header)).await;
        assert_eq!(answer.status(), StatusCode::OK);
    }
    let refused = app
        .post_stripe_with(b"{}".to_vec(), Some("t=1,v1=00"))
        .await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let metrics = scrape(&app).await;
    let matched = |index: &str| {
        metrics
            .get(&format!(
                "webhookd_signature_secret_matched_total{{provider=\"stripe\",secret_index=\"{index}\"}}"
            ))
            .copied()
    };
    assert_eq!((matched("0"), matched("1")), (Some(2.0), Some(1.0)));
}
