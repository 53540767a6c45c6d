//! The search box (`?q=`): every event that names an id, whichever kind
//! of id it is.

use sqlx::PgPool;
use webhookd::clock::Clock;

use super::{Browser, console_app, deliver_razorpay, razorpay_captured, razorpay_refund};
use crate::helpers::{charge, now, payment_intent_succeeded, subscription};

#[sqlx::test]
async fn the_search_finds_the_events_that_name_an_event_user_payment_refund_or_subscription_id(
    pool: PgPool,
) {
    let app = console_app(pool, Clock::System).await;
    app.deliver_each(&[
        (
            &payment_intent_succeeded("evt_credit", "pi_1", "user_1", 2000),
            "processed",
        ),
        (
            &charge("evt_charge", "charge.succeeded", "ch_1", "pi_1", 2000, 0),
            "ignored",
        ),
        (
            &charge("evt_refund", "charge.refunded", "ch_1", "pi_1", 2000, 500),
            "processed",
        ),
        (
            &subscription(
                "evt_sub",
                "customer.subscription.created",
                "sub_1",
                "active",
                now(),
            ),
            "processed",
        ),
        (
            &payment_intent_succeeded("evt_other", "pi_2", "user_2", 100),
            "processed",
        ),
    ])
    .await;
    deliver_razorpay(
        &app,
        "rzp_paid",
        &razorpay_captured("pay_1", 5000),
        "processed",
    )
    .await;
    deliver_razorpay(
        &app,
        "rzp_refunded",
        &razorpay_refund("rfnd_1", "pay_1", 1000),
        "processed",
    )
    .await;
    let browser = Browser::bearer(&app);

    let cases: [(&str, &[&str]); 9] = [
        ("evt_credit", &["evt_credit"]),
        ("evt_other", &["evt_other"]),
        (
            "user_1",
            &[
                "evt_charge",
                "evt_credit",
                "evt_refund",
                "evt_sub",
                "rzp_paid",
                "rzp_refunded",
            ],
        ),
        ("user_2", &["evt_other"]),
        ("pi_1", &["evt_charge", "evt_credit", "evt_refund"]),
        ("ch_1", &["evt_charge", "evt_refund"]),
        ("rfnd_1", &["rzp_refunded"]),
        ("pay_1", &["rzp_paid", "rzp_refunded"]),
        ("sub_1", &["evt_sub"]),
    ];
    for (q, expected) in cases {
        let page = browser.page(&format!("/console/events?q={q}")).await;
        let mut found = page.event_ids();
        found.sort();
        assert_eq!(found, expected, "q={q}");
        assert!(page.body.contains(&format!("naming <q>{q}</q>")), "q={q}");
        assert_eq!(page.input("q").as_deref(), Some(q), "the box keeps it");
    }
    // The header's search box leads there too, with filters beside it.
    let page = browser
        .page("/console/events?q=user_1&provider=razorpay")
        .await;
    let mut found = page.event_ids();
    found.sort();
    assert_eq!(found, ["rzp_paid", "rzp_refunded"]);

    let unknown = browser.page("/console/events?q=pi_nobody_knows").await;
    assert!(unknown.event_ids().is_empty());
    assert!(
        unknown.body.contains("No event matches."),
        "{}",
        unknown.body
    );
}
