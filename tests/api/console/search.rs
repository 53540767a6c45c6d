//! The search box (`?q=`): every event that names an id, whichever kind
//! of id it is.

use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::events;

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

/// The events of `user_big` (6,000 credits, every 400th found by a sweep,
/// one every 2 s) and as many of `user_small`'s between them, written as
/// webhookd writes them.
async fn a_user_with_thousands_of_events(pool: &PgPool) {
    sqlx::raw_sql(
        r"
        insert into wallets (user_id, currency) values ('user_big', 'USD'), ('user_small', 'USD');
        insert into processed_events (provider, event_id, event_type, outcome, payload, received_at,
                                      received_via)
        select 'stripe', format('evt_%s_%s', who, i), 'payment_intent.succeeded', 'processed', '{}',
               now() - make_interval(secs => 2 * (6000 - i) + (who = 'small')::int),
               case when i % 400 = 0 then 'sweep' else 'webhook' end
        from generate_series(1, 6000) i, (values ('big'), ('small')) as users (who);
        insert into wallet_entries (user_id, currency, amount_minor, kind, provider, source_ref, event_id)
        select format('user_%s', who), 'USD', 100, 'credit', 'stripe', format('pi_%s_%s', who, i),
               format('evt_%s_%s', who, i)
        from generate_series(1, 6000) i, (values ('big'), ('small')) as users (who);
        ",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// What a page holds, read plainly: the events of `user_big` (`evt_big_*`)
/// received via `via`, newest first, after the event `before`.
async fn expected_page(pool: &PgPool, via: Option<&str>, before: Option<&str>) -> Vec<String> {
    sqlx::query_scalar(
        "select event_id from processed_events
         where event_id like 'evt_big_%' and ($1::text is null or received_via = $1)
           and ($2::text is null or (received_at, provider, event_id)
                < (select received_at, provider, event_id from processed_events where event_id = $2))
         order by received_at desc, provider desc, event_id desc limit 50",
    )
    .bind(via)
    .bind(before)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test]
async fn a_user_with_thousands_of_events_is_paged_newest_first_whichever_way_it_is_read(
    pool: PgPool,
) {
    a_user_with_thousands_of_events(&pool).await;
    let filter = |via: Option<&str>| events::Filter {
        q: Some("user_big".to_owned()),
        received_via: via.map(str::to_owned),
        ..events::Filter::default()
    };
    let ids = |rows: &[events::Row]| rows.iter().map(|r| r.event_id.clone()).collect::<Vec<_>>();

    // Read by walking the newest events: 6,000 related events.
    let first = events::page(&pool, &filter(None), None, 50).await.unwrap();
    assert_eq!(ids(&first), expected_page(&pool, None, None).await);
    assert_eq!(first[0].event_id, "evt_big_6000");
    // The next page from its cursor, the same way.
    let last = first.last().unwrap();
    let cursor = events::Cursor::new(&last.cursor_at, &last.provider, &last.event_id).unwrap();
    let second = events::page(&pool, &filter(None), Some(&cursor), 50)
        .await
        .unwrap();
    assert_eq!(
        ids(&second),
        expected_page(&pool, None, Some(&last.event_id)).await
    );
    // Rare among them: the walk does not fill the page, so each is looked
    // up by its key.
    let swept = events::page(&pool, &filter(Some("sweep")), None, 50)
        .await
        .unwrap();
    assert_eq!(swept.len(), 15);
    assert_eq!(ids(&swept), expected_page(&pool, Some("sweep"), None).await);
    // An event id: one related event, looked up by its key.
    let small = events::Filter {
        q: Some("evt_small_17".to_owned()),
        ..events::Filter::default()
    };
    assert_eq!(
        ids(&events::page(&pool, &small, None, 50).await.unwrap()),
        ["evt_small_17"]
    );
}

#[sqlx::test]
async fn a_user_whose_events_are_all_older_than_the_walk_is_looked_up_by_key(pool: PgPool) {
    a_user_with_thousands_of_events(&pool).await;
    // 50,000 newer events of another kind, none related to `user_big`: the
    // walk reads its 50,000 without filling the page, and the page comes
    // from looking each related event up by its key.
    sqlx::raw_sql(
        r"
        insert into processed_events (provider, event_id, event_type, outcome, payload, received_at)
        select 'stripe', format('evt_newer_%s', i), 'customer.created', 'ignored', '{}',
               now() + make_interval(secs => i)
        from generate_series(1, 50000) i;
        ",
    )
    .execute(&pool)
    .await
    .unwrap();
    let filter = events::Filter {
        q: Some("user_big".to_owned()),
        ..events::Filter::default()
    };
    let rows = events::page(&pool, &filter, None, 50).await.unwrap();
    let ids: Vec<String> = rows.iter().map(|r| r.event_id.clone()).collect();
    assert_eq!(ids, expected_page(&pool, None, None).await);
    assert_eq!(ids[0], "evt_big_6000");
}
