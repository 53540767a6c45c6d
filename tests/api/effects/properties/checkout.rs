//! A Stripe Checkout history for the property: a paid session and its
//! intent without metadata, the charge and two cumulative refunds of it,
//! the customer that names its owner, and a subscription bought through a
//! second session (its `customer.subscription.created` without metadata,
//! its invoice, and the intent that paid it, joined by
//! `invoice_payment.paid`). Besides the in-order state, whatever the order
//! and however many copies arrive at once: the session's event credits the
//! intent (the intent waits for the owner it brings), the subscription
//! carries the session's owner, the invoice's intent credits nothing.

use serde_json::Value;
use sqlx::PgPool;

use super::{AMOUNT, Provider, REFUNDS, check};
use crate::effects::checkout::objects::{
    Session, customer, intent, invoice, invoice_payment, subscription,
};
use crate::helpers::charge;

pub(super) fn history(case: usize) -> Vec<(String, String)> {
    let id = |name: &str| format!("evt_{case}_{name}");
    let (cs, pi, ch, cus, user) = (
        format!("cs_{case}"),
        format!("pi_{case}"),
        format!("ch_{case}"),
        format!("cus_{case}"),
        format!("user_{case}"),
    );
    let (cs_sub, sub, inv, pi_sub) = (
        format!("cs_sub_{case}"),
        format!("sub_{case}"),
        format!("in_{case}"),
        format!("pi_sub_{case}"),
    );
    let paid = Session {
        customer: Some(&cus),
        ..Session::paid(&cs, &pi, &user, AMOUNT)
    };
    let bought = Session {
        mode: "subscription",
        payment_intent: None,
        customer: Some(&cus),
        subscription: Some(&sub),
        ..Session::paid(&cs_sub, "", &user, 2000)
    };
    // Checkout's charges carry no metadata.
    let charge = |event_id: &str, event_type: &str, refunded: i64| {
        let mut body: Value =
            serde_json::from_str(&charge(event_id, event_type, &ch, &pi, AMOUNT, refunded))
                .unwrap();
        body["data"]["object"]["metadata"] = serde_json::json!({});
        body.to_string()
    };
    let mut events = vec![
        (id("credit"), paid.completed(&id("credit"))),
        (id("intent"), intent(&id("intent"), &pi, Some(&cus), AMOUNT)),
        (id("charge"), charge(&id("charge"), "charge.succeeded", 0)),
    ];
    for (n, refunded) in REFUNDS.into_iter().enumerate() {
        let event_id = id(&format!("refund{n}"));
        let body = charge(&event_id, "charge.refunded", refunded);
        events.push((event_id, body));
    }
    events.extend([
        (id("customer"), customer(&id("customer"), &cus, Some(&user))),
        (id("sub_session"), bought.completed(&id("sub_session"))),
        (id("sub0"), subscription(&id("sub0"), &sub, &cus)),
        (
            id("invoice"),
            invoice(&id("invoice"), &inv, &cus, Some(&sub), None, 2000),
        ),
        (
            id("inpay"),
            invoice_payment(&id("inpay"), &inv, &pi_sub, 2000),
        ),
        (
            id("sub_intent"),
            intent(&id("sub_intent"), &pi_sub, Some(&cus), 2000),
        ),
    ]);
    events
}

#[sqlx::test]
async fn any_order_of_a_checkout_history_with_copies_ends_in_the_in_order_state(pool: PgPool) {
    let expected = (
        Some(AMOUNT - REFUNDS[1]),
        "partially_refunded".to_owned(),
        REFUNDS[1],
        "active".to_owned(),
        11,
        0,
    );
    let (app, cases) = check(pool, Provider::Checkout, expected).await;
    for case in 0..=cases {
        let context = format!("case {case}");
        let credits: Vec<(String, String, i64, String)> = sqlx::query_as(
            "select source_ref, user_id, amount_minor, event_id from wallet_entries
             where kind = 'credit' and source_ref in ($1, $2)",
        )
        .bind(format!("pi_{case}"))
        .bind(format!("pi_sub_{case}"))
        .fetch_all(&app.pool)
        .await
        .unwrap();
        let credit = (
            format!("pi_{case}"),
            format!("user_{case}"),
            AMOUNT,
            format!("evt_{case}_credit"),
        );
        assert_eq!(credits, vec![credit], "{context}");
        let (outcome, detail) = app.event(&format!("evt_{case}_intent")).await;
        assert_eq!(outcome, "ignored", "{context}: {detail}");
        assert_eq!(detail["owner_event_id"], format!("evt_{case}_credit"));
        let (outcome, detail) = app.event(&format!("evt_{case}_sub_intent")).await;
        assert_eq!(outcome, "ignored", "{context}: {detail}");
        assert_eq!(detail["invoice_id"], format!("in_{case}"), "{context}");
        let owner: Option<String> =
            sqlx::query_scalar("select user_id from subscriptions where subscription_id = $1")
                .bind(format!("sub_{case}"))
                .fetch_one(&app.pool)
                .await
                .unwrap();
        assert_eq!(owner, Some(format!("user_{case}")), "{context}");
        let owners: Vec<(String, String, i64)> = sqlx::query_as(
            "select subject, user_id, conflicts from owners
             where subject_id in ($1, $2) order by subject",
        )
        .bind(format!("pi_{case}"))
        .bind(format!("cus_{case}"))
        .fetch_all(&app.pool)
        .await
        .unwrap();
        let user = format!("user_{case}");
        let expected = vec![
            ("customer".to_owned(), user.clone(), 0),
            ("payment".to_owned(), user, 0),
        ];
        assert_eq!(owners, expected, "{context}");
    }
}
