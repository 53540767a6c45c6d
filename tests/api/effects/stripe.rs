//! Stripe's effects, asserted in the tables; deliveries go through the
//! app's router, without a socket.

use serde_json::json;
use sqlx::PgPool;

use crate::helpers::{
    charge, event_of_type, invoice_paid, now, payment_intent_succeeded, route_app, subscription,
};

#[sqlx::test]
async fn a_succeeded_payment_intent_credits_the_owners_wallet_once(pool: PgPool) {
    let app = route_app(pool).await;
    app.deliver(
        &payment_intent_succeeded("evt_pi", "pi_1", "user_1", 1999),
        "processed",
    )
    .await;

    let (user_id, currency, amount, kind, source_ref, event_id): (
        String,
        String,
        i64,
        String,
        String,
        String,
    ) = sqlx::query_as(
        "select user_id, currency, amount_minor, kind, source_ref, event_id from wallet_entries",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        (
            user_id.as_str(),
            currency.as_str(),
            amount,
            kind.as_str(),
            source_ref.as_str(),
            event_id.as_str()
        ),
        ("user_1", "USD", 1999, "credit", "pi_1", "evt_pi")
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(1999));

    let (topic, dedupe_key, payload): (String, String, serde_json::Value) =
        sqlx::query_as("select topic, dedupe_key, payload from outbox")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        (topic.as_str(), dedupe_key.as_str()),
        ("wallet.credited", "stripe:evt_pi")
    );
    assert_eq!(payload["amount_minor"], 1999);
    assert_eq!(payload["balance_minor"], 1999);
    assert_eq!(payload["currency"], "USD");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn amount_received_is_credited_rather_than_amount(pool: PgPool) {
    let app = route_app(pool).await;
    let body = payment_intent_succeeded("evt_partial", "pi_partial", "user_1", 1000)
        .replace(r#""amount_received":1000"#, r#""amount_received":800"#);
    app.deliver(&body, "processed").await;
    assert_eq!(app.balance("user_1", "USD").await, Some(800));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_charge_for_an_already_credited_intent_records_the_payment_but_credits_nothing(
    pool: PgPool,
) {
    let app = route_app(pool).await;
    app.deliver(
        &payment_intent_succeeded("evt_pi", "pi_1", "user_1", 5000),
        "processed",
    )
    .await;
    // The credit belongs to payment_intent.succeeded: the charge is recorded,
    // its receipt sent, and the event marked ignored with the credit's owner.
    let answer = app
        .deliver(
            &charge("evt_ch", "charge.succeeded", "ch_1", "pi_1", 5000, 0),
            "ignored",
        )
        .await;
    assert_eq!(answer["event_id"], "evt_ch");
    let (_, detail) = app.event("evt_ch").await;
    assert_eq!(detail["owner_event_id"], "evt_pi");
    // The same charge announced again under another event id.
    let answer = app
        .deliver(
            &charge("evt_ch_again", "charge.succeeded", "ch_1", "pi_1", 5000, 0),
            "ignored",
        )
        .await;
    assert_eq!(answer["event_id"], "evt_ch_again");

    assert_eq!(app.balance("user_1", "USD").await, Some(5000));
    assert_eq!(app.count("wallet_entries").await, 1);
    let (status, amount, payment_ref, user_id): (String, i64, String, String) = sqlx::query_as(
        "select status, amount_minor, payment_ref, user_id from payments where payment_id = 'ch_1'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        (
            status.as_str(),
            amount,
            payment_ref.as_str(),
            user_id.as_str()
        ),
        ("succeeded", 5000, "pi_1", "user_1")
    );
    let receipts: i64 =
        sqlx::query_scalar("select count(*) from outbox where topic = 'payment.receipt'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(receipts, 1);
    let (_, detail) = app.event("evt_ch_again").await;
    assert_eq!(detail["owner_event_id"], "evt_ch");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_refund_before_its_payment_waits_then_applies_once(pool: PgPool) {
    let app = route_app(pool).await;
    let refund = charge("evt_refund", "charge.refunded", "ch_1", "pi_1", 5000, 2000);

    app.deliver(&refund, "deferred").await;
    assert_eq!(app.count("wallet_entries").await, 0);
    assert_eq!(app.count("deferred_events").await, 1);

    let answer = app
        .deliver(
            &payment_intent_succeeded("evt_pi", "pi_1", "user_1", 5000),
            "processed",
        )
        .await;
    assert_eq!(answer["event_id"], "evt_pi");
    let (outcome, detail) = app.event("evt_refund").await;
    assert_eq!(outcome, "processed");
    assert_eq!(detail["applied_by"], "evt_pi");
    assert_eq!(app.count("deferred_events").await, 0);
    assert_eq!(app.balance("user_1", "USD").await, Some(3000));

    // The refund redelivered, and re-sent under a new event id: nothing more.
    app.deliver_each(&[
        (&refund, "duplicate"),
        (&refund.replace("evt_refund", "evt_refund_again"), "ignored"),
    ])
    .await;

    let entries: Vec<(String, i64)> =
        sqlx::query_as("select kind, amount_minor from wallet_entries order by id")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        entries,
        [("credit".to_owned(), 5000), ("refund".to_owned(), -2000)]
    );
    assert_eq!(app.balance("user_1", "USD").await, Some(3000));
    let topics: Vec<String> = sqlx::query_scalar("select topic from outbox order by id")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(topics, ["wallet.credited", "wallet.debited"]);
    let refunded: i64 =
        sqlx::query_scalar("select refunded_minor from payments where payment_id = 'ch_1'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(refunded, 2000);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn partial_refunds_debit_only_what_is_new_in_any_order(pool: PgPool) {
    let app = route_app(pool).await;
    app.deliver(
        &payment_intent_succeeded("evt_pi", "pi_1", "user_1", 1000),
        "processed",
    )
    .await;

    // In order: 300, then the rest.
    app.deliver(
        &charge("evt_r300", "charge.refunded", "ch_1", "pi_1", 1000, 300),
        "processed",
    )
    .await;
    assert_eq!(app.balance("user_1", "USD").await, Some(700));
    app.deliver(
        &charge("evt_r1000", "charge.refunded", "ch_1", "pi_1", 1000, 1000),
        "processed",
    )
    .await;
    assert_eq!(app.balance("user_1", "USD").await, Some(0));

    // Out of order on a second payment: the full refund first, then the older partial one.
    app.deliver_each(&[
        (
            &payment_intent_succeeded("evt_pi2", "pi_2", "user_1", 1000),
            "processed",
        ),
        (
            &charge("evt_b1000", "charge.refunded", "ch_2", "pi_2", 1000, 1000),
            "processed",
        ),
    ])
    .await;
    app.deliver(
        &charge("evt_b300", "charge.refunded", "ch_2", "pi_2", 1000, 300),
        "superseded",
    )
    .await;
    assert_eq!(app.balance("user_1", "USD").await, Some(0));

    let status: String =
        sqlx::query_scalar("select status from payments where payment_id = 'ch_2'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        status, "refunded",
        "an older partial refund does not move the payment back"
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn refunds_never_debit_more_than_was_credited(pool: PgPool) {
    let app = route_app(pool).await;
    app.deliver(
        &payment_intent_succeeded("evt_pi", "pi_1", "user_1", 500),
        "processed",
    )
    .await;
    // A second charge on the same intent refunding more than the credit.
    app.deliver_each(&[
        (
            &charge("evt_r1", "charge.refunded", "ch_1", "pi_1", 500, 400),
            "processed",
        ),
        (
            &charge("evt_r2", "charge.refunded", "ch_2", "pi_1", 500, 500),
            "processed",
        ),
        (
            &charge("evt_r3", "charge.refunded", "ch_3", "pi_1", 500, 500),
            "ignored",
        ),
    ])
    .await;
    assert_eq!(app.balance("user_1", "USD").await, Some(0));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_late_charge_succeeded_never_moves_a_refunded_payment_back(pool: PgPool) {
    let app = route_app(pool).await;
    app.deliver_each(&[
        (
            &payment_intent_succeeded("evt_pi", "pi_1", "user_1", 900),
            "processed",
        ),
        (
            &charge("evt_refund", "charge.refunded", "ch_1", "pi_1", 900, 900),
            "processed",
        ),
    ])
    .await;
    // The intent is credited already, so the charge is `ignored`; its row
    // keeps the refunded state.
    app.deliver(
        &charge("evt_ch", "charge.succeeded", "ch_1", "pi_1", 900, 0),
        "ignored",
    )
    .await;

    let (status, refunded): (String, i64) =
        sqlx::query_as("select status, refunded_minor from payments where payment_id = 'ch_1'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!((status.as_str(), refunded), ("refunded", 900));
    assert_eq!(app.balance("user_1", "USD").await, Some(0));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn subscription_state_never_moves_backwards(pool: PgPool) {
    let app = route_app(pool).await;
    let t = now();
    // `updated` (newer) arrives before `created` (older).
    app.deliver(
        &subscription(
            "evt_upd",
            "customer.subscription.updated",
            "sub_1",
            "active",
            t,
        ),
        "processed",
    )
    .await;
    let answer = app
        .deliver(
            &subscription(
                "evt_cre",
                "customer.subscription.created",
                "sub_1",
                "incomplete",
                t - 60,
            ),
            "superseded",
        )
        .await;
    assert_eq!(answer["event_id"], "evt_cre");

    let (status, plan_id, user_id, event_id): (String, String, String, String) =
        sqlx::query_as("select status, plan_id, user_id, event_id from subscriptions where subscription_id = 'sub_1'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        (
            status.as_str(),
            plan_id.as_str(),
            user_id.as_str(),
            event_id.as_str()
        ),
        ("active", "price_pro", "user_1", "evt_upd")
    );
    let changes: i64 =
        sqlx::query_scalar("select count(*) from outbox where topic = 'subscription.changed'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(changes, 1, "a superseded event announces nothing");

    // Newer events apply.
    app.deliver(
        &subscription(
            "evt_due",
            "customer.subscription.updated",
            "sub_1",
            "past_due",
            t + 60,
        ),
        "processed",
    )
    .await;
    let status: String =
        sqlx::query_scalar("select status from subscriptions where subscription_id = 'sub_1'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(status, "past_due");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn on_a_tie_a_canceled_subscription_is_not_revived(pool: PgPool) {
    let app = route_app(pool).await;
    let t = now();
    app.deliver(
        &subscription(
            "evt_del",
            "customer.subscription.deleted",
            "sub_1",
            "canceled",
            t,
        ),
        "processed",
    )
    .await;
    app.deliver(
        &subscription(
            "evt_upd",
            "customer.subscription.updated",
            "sub_1",
            "active",
            t,
        ),
        "superseded",
    )
    .await;
    // But the later arrival wins a tie between non-terminal states.
    app.deliver_each(&[
        (
            &subscription(
                "evt_a",
                "customer.subscription.updated",
                "sub_2",
                "trialing",
                t,
            ),
            "processed",
        ),
        (
            &subscription(
                "evt_b",
                "customer.subscription.updated",
                "sub_2",
                "active",
                t,
            ),
            "processed",
        ),
    ])
    .await;

    let statuses: Vec<(String, String)> = sqlx::query_as(
        "select subscription_id, status from subscriptions order by subscription_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        statuses,
        [
            ("sub_1".to_owned(), "canceled".to_owned()),
            ("sub_2".to_owned(), "active".to_owned())
        ]
    );
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_paid_invoice_is_announced_once(pool: PgPool) {
    let app = route_app(pool).await;
    app.deliver_each(&[
        (&invoice_paid("evt_inv", "in_1"), "processed"),
        (&invoice_paid("evt_inv_again", "in_1"), "ignored"),
    ])
    .await;
    let rows: Vec<(String, String, serde_json::Value)> =
        sqlx::query_as("select topic, event_id, payload from outbox")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].0.as_str(), rows[0].1.as_str()),
        ("invoice.paid", "evt_inv")
    );
    assert_eq!(rows[0].2["invoice_id"], "in_1");
    assert_eq!(rows[0].2["currency"], "USD");
    let (_, detail) = app.event("evt_inv_again").await;
    assert_eq!(detail["owner_event_id"], "evt_inv");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn unknown_event_types_are_recorded_as_ignored(pool: PgPool) {
    let app = route_app(pool).await;
    app.deliver(
        &event_of_type("evt_cust", "customer.created", json!({"id": "cus_1"})),
        "ignored",
    )
    .await;
    let (outcome, _) = app.event("evt_cust").await;
    assert_eq!(outcome, "ignored");
    assert_eq!(app.count("outbox").await, 0);
    assert_eq!(app.count("wallets").await, 0);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn money_events_that_can_never_apply_are_rejected_with_a_reason(pool: PgPool) {
    let app = route_app(pool).await;
    let cases = [
        (
            "evt_bad_owner",
            json!({"id": "pi_1", "amount": 100, "currency": "usd", "metadata": {"user_id": "u 1"}}),
        ),
        (
            "evt_bad_amount",
            json!({"id": "pi_2", "amount": "100", "currency": "usd", "metadata": {"user_id": "u"}}),
        ),
        (
            "evt_bad_currency",
            json!({"id": "pi_3", "amount": 100, "currency": "dollars", "metadata": {"user_id": "u"}}),
        ),
        ("evt_no_object", serde_json::Value::Null),
    ];
    for (event_id, object) in cases {
        app.deliver(
            &event_of_type(event_id, "payment_intent.succeeded", object),
            "rejected",
        )
        .await;
        let (outcome, detail) = app.event(event_id).await;
        assert_eq!(outcome, "rejected");
        assert!(
            detail["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{event_id}: {detail}"
        );
    }
    let refund_without_intent =
        json!({"id": "ch_1", "amount": 100, "amount_refunded": 100, "currency": "usd"});
    app.deliver(
        &event_of_type(
            "evt_refund_orphan",
            "charge.refunded",
            refund_without_intent,
        ),
        "rejected",
    )
    .await;

    assert_eq!(app.count("wallets").await, 0);
    assert_eq!(app.count("wallet_entries").await, 0);
    assert_eq!(app.count("outbox").await, 0);
    assert_eq!(app.count("processed_events").await, 5);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn one_users_dollars_from_several_payments_share_one_wallet(pool: PgPool) {
    let app = route_app(pool).await;
    app.deliver_each(&[
        (
            &payment_intent_succeeded("evt_1", "pi_1", "user_1", 100),
            "processed",
        ),
        (
            &payment_intent_succeeded("evt_2", "pi_2", "user_1", 250),
            "processed",
        ),
        (
            &payment_intent_succeeded("evt_3", "pi_3", "user_2", 75),
            "processed",
        ),
    ])
    .await;
    assert_eq!(app.count("wallets").await, 2);
    assert_eq!(app.balance("user_1", "USD").await, Some(350));
    assert_eq!(app.balance("user_2", "USD").await, Some(75));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_charge_before_its_intent_is_credited_is_processed(pool: PgPool) {
    let app = route_app(pool).await;
    app.deliver_each(&[
        (
            &charge("evt_ch", "charge.succeeded", "ch_1", "pi_1", 700, 0),
            "processed",
        ),
        (
            &payment_intent_succeeded("evt_pi", "pi_1", "user_1", 700),
            "processed",
        ),
    ])
    .await;
    assert_eq!(app.balance("user_1", "USD").await, Some(700));
    let topics: Vec<String> = sqlx::query_scalar("select topic from outbox order by id")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(topics, ["payment.receipt", "wallet.credited"]);
    app.assert_consistent().await;
}
