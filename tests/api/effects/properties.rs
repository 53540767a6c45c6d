//! Property: a payment's, its refunds' and a subscription's event history
//! (Stripe's, Razorpay's, PayPal's: [`paypal`], and Stripe Checkout's:
//! [`checkout`]), delivered in any order, any event any number
//! of times, some copies at the same moment, ends in the state of the
//! in-order history.
//!
//! Cases are generated from a fixed seed (`PROPERTY_CASES` sets how many;
//! `PROPERTY_SEED` picks another sequence); a failure prints the case's
//! delivery order so it can be replayed.

mod checkout;
mod paypal;

use futures_util::future::join_all;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::helpers::{
    RAZORPAY_SECRETS, TestApp, charge, now, payment_intent_succeeded, spawn_app, subscription,
};

pub(crate) const AMOUNT: i64 = 1000;
/// Stripe's refund events carry the charge's cumulative refunded amount.
pub(crate) const REFUNDS: [i64; 2] = [300, 700];
/// Razorpay's each carry their own.
const RAZORPAY_REFUNDS: [i64; 2] = [300, 400];

#[derive(Debug, Clone, Copy)]
pub(crate) enum Provider {
    Stripe,
    Razorpay,
    Paypal,
    Checkout,
}

impl Provider {
    fn name(self) -> &'static str {
        match self {
            Provider::Stripe | Provider::Checkout => "stripe",
            Provider::Razorpay => "razorpay",
            Provider::Paypal => "paypal",
        }
    }

    fn currency(self) -> &'static str {
        match self {
            Provider::Stripe | Provider::Paypal | Provider::Checkout => "USD",
            Provider::Razorpay => "INR",
        }
    }

    /// The payment row's id: Stripe's charge, Razorpay's payment, PayPal's capture.
    fn payment_id(self, case: usize) -> String {
        match self {
            Provider::Stripe | Provider::Checkout => format!("ch_{case}"),
            Provider::Razorpay => format!("pay_{case}"),
            Provider::Paypal => format!("CAP-{case}"),
        }
    }

    /// The history of case `case`, in order: (event id, body).
    fn history(self, case: usize, t0: i64) -> Vec<(String, String)> {
        match self {
            Provider::Stripe => stripe_history(case, t0),
            Provider::Razorpay => razorpay_history(case, t0),
            Provider::Paypal => paypal::history(case, t0),
            Provider::Checkout => checkout::history(case),
        }
    }

    async fn post(self, app: &TestApp, event_id: &str, body: &str) -> StatusCode {
        match self {
            Provider::Stripe | Provider::Checkout => app.post_stripe(body).await.status(),
            Provider::Razorpay => {
                let signature =
                    webhookd::providers::razorpay::signature(RAZORPAY_SECRETS.0, body.as_bytes());
                let headers = [
                    ("x-razorpay-signature".to_owned(), signature),
                    ("x-razorpay-event-id".to_owned(), event_id.to_owned()),
                ];
                app.post_to("razorpay", body.as_bytes().to_vec(), &headers)
                    .await
                    .status()
            }
            Provider::Paypal => paypal::post(app, body).await,
        }
    }
}

pub(crate) fn stripe_history(case: usize, t0: i64) -> Vec<(String, String)> {
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

/// A captured payment, two refunds of it (each debits its own amount) and
/// a subscription's four changes, ordered by the envelope's `created_at`.
fn razorpay_history(case: usize, t0: i64) -> Vec<(String, String)> {
    let id = |name: &str| format!("evt_{case}_{name}");
    let payment = format!("pay_{case}");
    let envelope = |event: &str, payload: Value, created_at: i64| {
        json!({
            "entity": "event", "account_id": "acc_1", "event": event,
            "contains": payload.as_object().map(|p| p.keys().cloned().collect::<Vec<_>>()),
            "payload": payload, "created_at": created_at,
        })
        .to_string()
    };
    let payment_entity = |refunded: i64| {
        json!({ "entity": {
            "id": payment, "entity": "payment", "amount": AMOUNT, "currency": "INR",
            "status": if refunded > 0 { "refunded" } else { "captured" },
            "order_id": format!("order_{case}"), "amount_refunded": refunded,
            "notes": { "user_id": format!("user_{case}") }, "created_at": t0,
        }})
    };
    let mut events = vec![(
        id("credit"),
        envelope(
            "payment.captured",
            json!({ "payment": payment_entity(0) }),
            t0,
        ),
    )];
    let mut refunded = 0;
    for (n, amount) in RAZORPAY_REFUNDS.into_iter().enumerate() {
        refunded += amount;
        let refund = json!({ "entity": {
            "id": format!("rfnd_{case}_{n}"), "entity": "refund", "amount": amount,
            "currency": "INR", "payment_id": payment, "status": "processed",
        }});
        events.push((
            id(&format!("refund{n}")),
            envelope(
                "refund.processed",
                json!({ "refund": refund, "payment": payment_entity(refunded) }),
                t0 + 1 + n as i64,
            ),
        ));
    }
    for (n, status) in ["authenticated", "active", "halted", "cancelled"]
        .into_iter()
        .enumerate()
    {
        let entity = json!({ "entity": {
            "id": format!("sub_{case}"), "entity": "subscription", "plan_id": "plan_pro",
            "customer_id": "cust_1", "status": status, "notes": { "user_id": format!("user_{case}") },
            "created_at": 1_700_000_000,
        }});
        events.push((
            id(&format!("sub{n}")),
            envelope(
                &format!("subscription.{status}"),
                json!({ "subscription": entity }),
                t0 + 10 * (n as i64 + 1),
            ),
        ));
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
pub(crate) async fn state(
    app: &TestApp,
    provider: Provider,
    case: usize,
) -> (Option<i64>, String, i64, String, i64, i64) {
    let balance = app
        .balance(&format!("user_{case}"), provider.currency())
        .await;
    let (status, refunded): (String, i64) = sqlx::query_as(
        "select status, refunded_minor from payments where provider = $1 and payment_id = $2",
    )
    .bind(provider.name())
    .bind(provider.payment_id(case))
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let subscription: String = sqlx::query_scalar(
        "select status from subscriptions where provider = $1 and subscription_id = $2",
    )
    .bind(provider.name())
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
async fn any_order_of_a_stripe_history_with_copies_ends_in_the_in_order_state(pool: PgPool) {
    let expected = (
        Some(AMOUNT - REFUNDS[1]),
        "partially_refunded".to_owned(),
        REFUNDS[1],
        "canceled".to_owned(),
        8,
        0,
    );
    check(pool, Provider::Stripe, expected).await;
}

#[sqlx::test]
async fn any_order_of_a_razorpay_history_with_copies_ends_in_the_in_order_state(pool: PgPool) {
    let refunded: i64 = RAZORPAY_REFUNDS.iter().sum();
    let expected = (
        Some(AMOUNT - refunded),
        "partially_refunded".to_owned(),
        refunded,
        "cancelled".to_owned(),
        7,
        0,
    );
    check(pool, Provider::Razorpay, expected).await;
}

/// Delivers the in-order history once (its state must be `expected`), then
/// each case's shuffled history with copies; each must end in that state.
/// Returns the app and the number of cases (the in-order history is case
/// `cases`), for further checks.
async fn check(
    pool: PgPool,
    provider: Provider,
    expected: (Option<i64>, String, i64, String, i64, i64),
) -> (TestApp, usize) {
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

    let reference = cases;
    for (event_id, body) in provider.history(reference, t0) {
        assert_eq!(provider.post(&app, &event_id, &body).await, StatusCode::OK);
    }
    assert_eq!(
        state(&app, provider, reference).await,
        expected,
        "the in-order history"
    );

    for case in 0..cases {
        let events = provider.history(case, t0);
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
                let (app, (event_id, body)) = (&app, &events[event]);
                async move { provider.post(app, event_id, body).await }
            }))
            .await;
            assert!(
                statuses.iter().all(|s| *s == StatusCode::OK),
                "case {case}, order {order:?}: {statuses:?}"
            );
        }
        let delivered: Vec<&str> = order.iter().map(|&e| events[e].0.as_str()).collect();
        assert_eq!(
            state(&app, provider, case).await,
            expected,
            "case {case} (seed {seed}) delivered in this order: {delivered:?}"
        );
    }
    app.assert_consistent().await;
    (app, cases)
}
