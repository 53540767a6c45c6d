//! A batch applies each kind's events together, and moves an event only
//! past events it shares nothing with: every wallet's entries and balances
//! come out in arrival order, whether a refund's wallet is known from the
//! database or from a credit earlier in the batch; an owner learned anew
//! that releases a waiting credit sends the batch back to arrival order
//! when events were moved past it.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::ingest;
use webhookd::providers::{Event, Receiver};

use crate::effects::checkout::objects::{Session, customer_object, intent, intent_object_at};
use crate::helpers::{assert_consistent, charge, now, payment_intent_succeeded};

fn stripe(event_id: &str, event_type: &str, body: String) -> Event {
    Event::from_stored("stripe", event_id, event_type, Bytes::from(body)).unwrap()
}

fn credit(event_id: &str, intent: &str, user_id: &str, amount: i64) -> Event {
    let body = payment_intent_succeeded(event_id, intent, user_id, amount);
    stripe(event_id, "payment_intent.succeeded", body)
}

fn charged(event_id: &str, event_type: &str, id: &str, intent: &str, refunded: i64) -> Event {
    stripe(
        event_id,
        event_type,
        charge(event_id, event_type, id, intent, 1000, refunded),
    )
}

/// Ingests `events` as one batch: each one's outcome.
async fn batch(pool: &PgPool, events: &[Event]) -> Vec<String> {
    ingest::ingest_batch(pool, events)
        .await
        .into_iter()
        .map(|answer| answer.unwrap().outcome.as_str().to_owned())
        .collect()
}

/// Each `wallet.*` announcement of `user_id`, in the order written: the
/// balance it announces.
async fn announced_balances(pool: &PgPool, user_id: &str) -> Vec<i64> {
    sqlx::query_scalar(
        "select (payload->>'balance_minor')::bigint from outbox
         where topic like 'wallet.%' and payload->>'user_id' = $1 order by id",
    )
    .bind(user_id)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The outcome and detail event `event_id` was recorded with.
async fn recorded(pool: &PgPool, event_id: &str) -> (String, Value) {
    sqlx::query_as("select outcome, detail from processed_events where event_id = $1")
        .bind(event_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The id of the entry event `event_id` posted.
async fn entry_of(pool: &PgPool, event_id: &str) -> i64 {
    sqlx::query_scalar("select id from wallet_entries where event_id = $1")
        .bind(event_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn credits_move_ahead_of_refunds_but_never_past_one_of_their_own_wallet(pool: PgPool) {
    batch(&pool, &[credit("evt_e", "pi_e", "user_3", 600)]).await;
    let events = [
        credit("evt_a", "pi_a", "user_1", 1000),
        // Its wallet is known from the credit before it in this batch.
        charged("evt_a_refund", "charge.refunded", "ch_a", "pi_a", 300),
        credit("evt_b", "pi_b", "user_1", 500),
        // Its wallet is known from the database, once its credit is locked.
        charged("evt_e_refund", "charge.refunded", "ch_e", "pi_e", 100),
        credit("evt_f", "pi_f", "user_3", 50),
        charged("evt_a_charge", "charge.succeeded", "ch_a", "pi_a", 300),
        credit("evt_g", "pi_g", "user_2", 200),
    ];
    let outcomes = batch(&pool, &events).await;
    assert_eq!(
        outcomes,
        [
            "processed",
            "processed",
            "processed",
            "processed",
            "processed",
            "ignored",
            "processed"
        ]
    );
    // Each wallet's announcements in arrival order, with the balance right
    // after each entry.
    assert_eq!(announced_balances(&pool, "user_1").await, [1000, 700, 1200]);
    assert_eq!(announced_balances(&pool, "user_3").await, [600, 500, 550]);
    assert_eq!(announced_balances(&pool, "user_2").await, [200]);
    // The credit of another wallet did move: it shared the first credits'
    // statements, ahead of the refund that arrived before it.
    assert!(entry_of(&pool, "evt_g").await < entry_of(&pool, "evt_a_refund").await);
    assert!(entry_of(&pool, "evt_b").await > entry_of(&pool, "evt_a_refund").await);
    assert!(entry_of(&pool, "evt_f").await > entry_of(&pool, "evt_e_refund").await);
    assert_consistent(&pool).await;
}

/// A Stripe event of `event_type` about `object`.
fn body(event_id: &str, event_type: &str, object: Value) -> String {
    json!({
        "id": event_id, "object": "event", "api_version": "2024-06-20", "created": now(),
        "data": { "object": object }, "livemode": false, "type": event_type,
    })
    .to_string()
}

/// The event `object` of `event_type` as a source whose owner rule reads
/// the customer receives it.
fn by_customer(event_id: &str, event_type: &str, object: Value) -> Event {
    let body = body(event_id, event_type, object);
    let receiver = Receiver {
        name: "stripe".into(),
        record_only: false,
        owner: Some("metadata.user_id,customer".parse().unwrap()),
        invoice_credits: false,
        api_version: None,
    };
    stripe(event_id, event_type, body).received_by(Some(Arc::new(receiver)))
}

#[sqlx::test]
async fn a_charge_moved_ahead_of_an_owner_learned_in_its_batch_still_sees_the_credit_it_releases(
    pool: PgPool,
) {
    let intent = intent_object_at("pi_x", Some("cus_x"), 1000, now());
    let waiting = by_customer("evt_x_pi", "payment_intent.succeeded", intent);
    assert_eq!(batch(&pool, &[waiting]).await, ["deferred"]);
    let events = [
        charged("evt_0_charge", "charge.succeeded", "ch_0", "pi_0", 0),
        // Teaches cus_x's owner, which releases the credit of pi_x.
        by_customer(
            "evt_x_customer",
            "customer.created",
            customer_object("cus_x", Some("user_x"), now()),
        ),
        charged("evt_x_charge", "charge.succeeded", "ch_x", "pi_x", 0),
    ];
    // The two charges would share their statements, the second ahead of
    // the customer: it would not see the credit the customer releases.
    let outcomes = batch(&pool, &events).await;
    assert_eq!(outcomes, ["processed", "processed", "ignored"]);
    let (outcome, detail) = recorded(&pool, "evt_x_charge").await;
    assert_eq!(outcome, "ignored");
    assert_eq!(detail["owner_event_id"], "evt_x_pi");
    let (outcome, detail) = recorded(&pool, "evt_x_pi").await;
    assert_eq!(outcome, "processed");
    assert_eq!(detail["applied_by"], "evt_x_customer");
    assert_eq!(announced_balances(&pool, "user_x").await, [1000]);
    assert_consistent(&pool).await;
}

#[sqlx::test]
async fn a_subscription_owner_taught_in_a_set_reaches_the_customers_subscription_before_it(
    pool: PgPool,
) {
    let subscription = |event_id: &str, id: &str, metadata: Value| {
        let object = json!({
            "id": id, "object": "subscription", "customer": "cus_s", "status": "active",
            "metadata": metadata,
            "items": { "object": "list", "data": [
                { "id": format!("si_{id}"), "price": { "id": "price_pro" }, "current_period_end": now() + 2_592_000 }
            ]},
        });
        let event_type = "customer.subscription.created";
        stripe(event_id, event_type, body(event_id, event_type, object))
    };
    let events = [
        subscription("evt_sub_a", "sub_a", json!({})),
        // Teaches cus_s's owner, which the subscription before it then has.
        subscription("evt_sub_b", "sub_b", json!({ "user_id": "user_s" })),
    ];
    assert_eq!(batch(&pool, &events).await, ["processed", "processed"]);
    let owners: Vec<(String, Option<String>)> = sqlx::query_as(
        "select subscription_id, user_id from subscriptions order by subscription_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let owner = Some("user_s".to_owned());
    assert_eq!(
        owners,
        [("sub_a".into(), owner.clone()), ("sub_b".into(), owner)]
    );
    assert_consistent(&pool).await;
}

/// A generic source's event (a Standard Webhooks source named `svix`).
fn forwarded(event_id: &str) -> Event {
    let body = json!({ "type": "user.created", "data": { "id": event_id } });
    Event::from_stored(
        "svix",
        event_id,
        "user.created",
        Bytes::from(body.to_string()),
    )
    .unwrap()
}

/// Razorpay's `payment.failed` of `payment`: a status, recorded only.
fn failed(event_id: &str, payment: &str) -> Event {
    let body = json!({
        "entity": "event", "account_id": "acc_1", "event": "payment.failed",
        "contains": ["payment"], "created_at": now(),
        "payload": {"payment": {"entity": {
            "id": payment, "entity": "payment", "amount": 900, "currency": "INR",
            "status": "failed", "amount_refunded": 0, "notes": {"user_id": "user_1"},
            "created_at": now(),
        }}},
    });
    Event::from_stored(
        "razorpay",
        event_id,
        "payment.failed",
        Bytes::from(body.to_string()),
    )
    .unwrap()
}

/// The id of the outbox row event `event_id` wrote.
async fn outbox_of(pool: &PgPool, event_id: &str) -> i64 {
    sqlx::query_scalar("select id from outbox where event_id = $1")
        .bind(event_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn forwarded_events_and_payment_statuses_apply_as_sets_across_the_credits_between_them(
    pool: PgPool,
) {
    let events = [
        forwarded("msg_1"),
        failed("rzp_failed_1", "pay_failed_1"),
        credit("evt_c1", "pi_c1", "user_1", 100),
        forwarded("msg_2"),
        failed("rzp_failed_2", "pay_failed_2"),
        credit("evt_c2", "pi_c2", "user_2", 200),
        forwarded("msg_3"),
    ];
    let outcomes = batch(&pool, &events).await;
    assert!(outcomes.iter().all(|o| o == "processed"), "{outcomes:?}");
    // The forwarded events share one set: their rows were written together,
    // ahead of the credits that arrived between them.
    let (m1, m2, m3) = (
        outbox_of(&pool, "msg_1").await,
        outbox_of(&pool, "msg_2").await,
        outbox_of(&pool, "msg_3").await,
    );
    assert_eq!((m2, m3), (m1 + 1, m1 + 2));
    assert!(m3 < outbox_of(&pool, "evt_c1").await);
    // And one statement: rows a statement writes share its command id.
    let commands: i64 = sqlx::query_scalar(
        "select count(distinct cmin::text) from outbox where topic = 'source.svix'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(commands, 1);
    let commands: i64 = sqlx::query_scalar(
        "select count(distinct cmin::text) from payments where provider = 'razorpay'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(commands, 1, "the statuses' payment rows share a statement");
    let topic: String = sqlx::query_scalar("select topic from outbox where id = $1")
        .bind(m1)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(topic, "source.svix");
    // Each status recorded its payment row.
    let (_, detail) = recorded(&pool, "rzp_failed_2").await;
    assert_eq!(detail["payment_id"], "pay_failed_2");
    let statuses: Vec<(String, String)> = sqlx::query_as(
        "select payment_id, status from payments where provider = 'razorpay' order by payment_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        statuses,
        [
            ("pay_failed_1".to_owned(), "failed".to_owned()),
            ("pay_failed_2".to_owned(), "failed".to_owned())
        ]
    );
    assert_consistent(&pool).await;
}

/// A `checkout.session.completed` of a paid session.
fn session(event_id: &str, id: &str, intent: &str, owner: &str, amount: i64) -> Event {
    let body = Session::paid(id, intent, owner, amount).completed(event_id);
    stripe(event_id, "checkout.session.completed", body)
}

/// How many statements wrote the rows of `table` that `filter` selects:
/// rows a statement writes share its command id.
async fn statements(pool: &PgPool, table: &str, filter: &str) -> i64 {
    let query = format!("select count(distinct cmin::text) from {table} where {filter}");
    sqlx::query_scalar(&query).fetch_one(pool).await.unwrap()
}

#[sqlx::test]
async fn checkout_sessions_share_their_statements_until_one_releases_a_waiting_intent(
    pool: PgPool,
) {
    // The intent of the third session arrived first and waits for its owner.
    let waiting = intent("evt_i3", "pi_s3", None, 300);
    let waiting = stripe("evt_i3", "payment_intent.succeeded", waiting);
    assert_eq!(batch(&pool, &[waiting]).await, ["deferred"]);
    let events = [
        session("evt_s1", "cs_1", "pi_s1", "user_1", 100),
        session("evt_s2", "cs_2", "pi_s2", "user_2", 200),
        session("evt_s3", "cs_3", "pi_s3", "user_3", 300),
        session("evt_s4", "cs_4", "pi_s4", "user_1", 400),
        session("evt_s5", "cs_5", "pi_s5", "user_5", 500),
    ];
    let outcomes = batch(&pool, &events).await;
    assert!(outcomes.iter().all(|o| o == "processed"), "{outcomes:?}");
    // The first three sessions taught their owners in one statement and
    // credited in one; the third released the intent waiting for its owner,
    // which applied before the sessions after it, so they form a set of
    // their own.
    let owners_of = |ids: &str| format!("subject_id in ({ids})");
    assert_eq!(
        statements(&pool, "owners", &owners_of("'pi_s1', 'pi_s2', 'pi_s3'")).await,
        1
    );
    assert_eq!(
        statements(&pool, "owners", &owners_of("'pi_s4', 'pi_s5'")).await,
        1
    );
    assert_eq!(
        statements(&pool, "owners", &owners_of("'pi_s3', 'pi_s4'")).await,
        2
    );
    let credits = "kind = 'credit' and source_ref in ('pi_s1', 'pi_s2', 'pi_s3')";
    assert_eq!(statements(&pool, "wallet_entries", credits).await, 1);
    // The intent, released, found its credit posted by its session.
    let (outcome, detail) = recorded(&pool, "evt_i3").await;
    assert_eq!(outcome, "ignored", "{detail}");
    assert_eq!(detail["owner_event_id"], "evt_s3");
    let (_, detail) = recorded(&pool, "evt_s3").await;
    assert_eq!(detail["applied_deferred"], json!(["evt_i3"]));
    // Every wallet once, user_1's in arrival order.
    assert_eq!(announced_balances(&pool, "user_1").await, [100, 500]);
    assert_eq!(announced_balances(&pool, "user_3").await, [300]);
    assert_consistent(&pool).await;
}

#[sqlx::test]
async fn customers_and_the_payments_they_own_apply_as_sets_and_a_payment_waits_for_its_owner(
    pool: PgPool,
) {
    let customer = |n: u32, owner: &str| {
        let object = customer_object(&format!("cus_{n}"), Some(owner), now());
        by_customer(&format!("evt_cus_{n}"), "customer.created", object)
    };
    let paid = |n: u32, customer: &str| {
        let object = intent_object_at(
            &format!("pi_{n}"),
            Some(customer),
            100 * i64::from(n),
            now(),
        );
        by_customer(&format!("evt_pi_{n}"), "payment_intent.succeeded", object)
    };
    let taught = batch(
        &pool,
        &[
            customer(1, "user_1"),
            customer(2, "user_2"),
            customer(3, "user_3"),
        ],
    )
    .await;
    assert_eq!(taught, ["processed"; 3]);
    let customers = "subject = 'customer' and subject_id in ('cus_1', 'cus_2', 'cus_3')";
    assert_eq!(statements(&pool, "owners", customers).await, 1);

    // Two payments of known customers and one of a customer nobody has
    // named yet, and one more waiting: the owners of all are read in one
    // statement, the credits posted in one.
    let outcomes = batch(
        &pool,
        &[
            paid(1, "cus_1"),
            paid(4, "cus_4"),
            paid(2, "cus_2"),
            paid(5, "cus_5"),
        ],
    )
    .await;
    assert_eq!(outcomes, ["processed", "deferred", "processed", "deferred"]);
    let credits = "kind = 'credit' and source_ref in ('pi_1', 'pi_2')";
    assert_eq!(statements(&pool, "wallet_entries", credits).await, 1);
    let waits = "event_id in ('evt_pi_4', 'evt_pi_5')";
    assert_eq!(statements(&pool, "deferred_events", waits).await, 1);
    let (_, detail) = recorded(&pool, "evt_pi_4").await;
    assert_eq!(detail["waits_for"], "owner:customer:cus_4");

    // Naming cus_4's owner releases its payment, and nothing else.
    assert_eq!(batch(&pool, &[customer(4, "user_4")]).await, ["processed"]);
    let (outcome, detail) = recorded(&pool, "evt_pi_4").await;
    assert_eq!(outcome, "processed");
    assert_eq!(detail["applied_by"], "evt_cus_4");
    assert_eq!(announced_balances(&pool, "user_4").await, [400]);
    assert_eq!(announced_balances(&pool, "user_1").await, [100]);
    assert_eq!(announced_balances(&pool, "user_2").await, [200]);
    let (outcome, _) = recorded(&pool, "evt_pi_5").await;
    assert_eq!(outcome, "deferred");
    assert_consistent(&pool).await;
}
