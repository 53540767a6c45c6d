//! Property: a payment's, its refunds' and a subscription's event history,
//! delivered in any order, any event any number of times, some copies at
//! the same moment, ends in the state of the in-order history.
//!
//! Cases are generated from a fixed seed (`PROPERTY_CASES` sets how many;
//! `PROPERTY_SEED` picks another sequence); a failure prints the case's
//! delivery order so it can be replayed.

use futures_util::future::join_all;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use reqwest::StatusCode;
use sqlx::PgPool;

use crate::helpers::{TestApp, charge, now, payment_intent_succeeded, spawn_app, subscription};

const AMOUNT: i64 = 1000;
const REFUNDS: [i64; 2] = [300, 700];

/// The history of case `case`, in order: (event id, body).
fn history(case: usize, t0: i64) -> Vec<(String, String)> {
    let id = |name: &str| format!("evt_{case}_{name}");
    let (intent, charge_id, user, sub) = (
        format!("pi_{case}"),
        format!("ch_{case}"),
        format!("user_{case}"),
        format!("sub_{case}"),
    );
    let mut events = vec![
        (
            id("credit"),
            payment_intent_succeeded(&id("credit"), &intent, &user, AMOUNT),
        ),
        (
            id("charge"),
            charge(
                &id("charge"),
                "charge.succeeded",
                &charge_id,
                &intent,
                AMOUNT,
                0,
            ),
        ),
    ];
    for (n, refunded) in REFUNDS.into_iter().enumerate() {
        let event_id = id(&format!("refund{n}"));
        let body = charge(
            &event_id,
            "charge.refunded",
            &charge_id,
            &intent,
            AMOUNT,
            refunded,
        );
        events.push((event_id, body));
    }
    for (n, (kind, status)) in [
        ("created", "incomplete"),
        ("updated", "active"),
        ("updated", "past_due"),
        ("deleted", "canceled"),
    ]
    .into_iter()
    .enumerate()
    {
        let event_id = id(&format!("sub{n}"));
        let body = subscription(
            &event_id,
            &format!("customer.subscription.{kind}"),
            &sub,
            status,
            t0 + 10 * n as i64,
        );
        events.push((event_id, body));
    }
    events
}

/// A delivery order: each event 1 to 3 times, shuffled, cut into groups
/// whose copies are sent at the same moment.
fn deliveries(events: usize) -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    proptest::collection::vec(1..=3usize, events).prop_flat_map(|copies| {
        let order: Vec<usize> = copies
            .iter()
            .enumerate()
            .flat_map(|(event, &n)| std::iter::repeat_n(event, n))
            .collect();
        let total = order.len();
        (
            Just(order).prop_shuffle(),
            proptest::collection::vec(1..=4usize, total),
        )
    })
}

/// Balance, payment status and refunded amount, subscription status, events
/// recorded, events still deferred.
async fn state(app: &TestApp, case: usize) -> (Option<i64>, String, i64, String, i64, i64) {
    let balance = app.balance(&format!("user_{case}"), "USD").await;
    let (status, refunded): (String, i64) = sqlx::query_as(
        "select status, refunded_minor from payments where provider = 'stripe' and payment_id = $1",
    )
    .bind(format!("ch_{case}"))
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let subscription: String =
        sqlx::query_scalar("select status from subscriptions where subscription_id = $1")
            .bind(format!("sub_{case}"))
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let count = |sql: &'static str| {
        let pattern = format!("evt_{case}_");
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .bind(pattern)
                .fetch_one(&app.pool)
                .await
                .unwrap()
        }
    };
    let events =
        count("select count(*) from processed_events where starts_with(event_id, $1)").await;
    let deferred =
        count("select count(*) from deferred_events where starts_with(event_id, $1)").await;
    (balance, status, refunded, subscription, events, deferred)
}

#[sqlx::test]
async fn any_order_with_copies_ends_in_the_in_order_state(pool: PgPool) {
    let app = spawn_app(pool).await;
    let cases: usize = std::env::var("PROPERTY_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(24);
    let seed: u64 = std::env::var("PROPERTY_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(7);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let t0 = now() - 1000;

    // The in-order history, once, as the reference.
    let reference = cases;
    for (_, body) in history(reference, t0) {
        assert_eq!(app.post_stripe(&body).await.status(), StatusCode::OK);
    }
    let expected = state(&app, reference).await;
    assert_eq!(
        expected,
        (
            Some(AMOUNT - REFUNDS[1]),
            "partially_refunded".to_owned(),
            REFUNDS[1],
            "canceled".to_owned(),
            8,
            0,
        ),
        "the in-order history"
    );

    for case in 0..cases {
        let events = history(case, t0);
        let (order, groups) = deliveries(events.len())
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let mut rest = &order[..];
        for size in groups {
            if rest.is_empty() {
                break;
            }
            let (group, tail) = rest.split_at(size.min(rest.len()));
            rest = tail;
            let statuses = join_all(group.iter().map(|&event| {
                let (app, body) = (&app, &events[event].1);
                async move { app.post_stripe(body).await.status() }
            }))
            .await;
            assert!(
                statuses.iter().all(|s| *s == StatusCode::OK),
                "case {case}, order {order:?}: {statuses:?}"
            );
        }
        let delivered: Vec<&str> = order.iter().map(|&e| events[e].0.as_str()).collect();
        assert_eq!(
            state(&app, case).await,
            expected,
            "case {case} (seed {seed}) delivered in this order: {delivered:?}"
        );
    }
    app.assert_consistent().await;
}
