//! A sweep judges what it recovers as the built-in source would its
//! deliveries: `WEBHOOKD_SOURCE_STRIPE_EFFECTS=record` makes the periodic
//! sweep forward the events it finds, and move no money.

use serde_json::json;
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::config::{ServeSettings, StripeApiArgs, sources_from_env};

use crate::fakes::stripe::{FakeStripe, event};
use crate::helpers::{now, route_app};

const KEY: &str = "rk_test_sweep_key_4242";

#[sqlx::test]
async fn the_periodic_sweep_of_a_record_source_forwards_what_it_finds_and_moves_no_money(
    pool: PgPool,
) {
    let app = route_app(pool).await;
    let intent = json!({ "id": "pi_swept", "object": "payment_intent", "amount": 800,
        "amount_received": 800, "currency": "usd", "metadata": { "user_id": "user_1" },
        "status": "succeeded" });
    let lost = event("evt_swept", "payment_intent.succeeded", now() - 600, intent);
    let fake = FakeStripe::start(KEY, vec![lost]).await;
    let mut settings = ServeSettings {
        sources: sources_from_env([(
            "WEBHOOKD_SOURCE_STRIPE_EFFECTS".to_owned(),
            "record".to_owned(),
        )])
        .unwrap(),
        ..ServeSettings::default()
    };
    settings.sweep.stripe = StripeApiArgs {
        stripe_api_key: Some(KEY.into()),
        stripe_api_base: fake.base_url(),
        rate: 100,
        stripe_refresh_on_tie: None,
        scope: Default::default(),
    };
    let mut sweeper = webhookd::startup::sweeper(&settings, app.pool.clone(), Clock::System)
        .unwrap()
        .expect("the sweep is on");
    sweeper.run_once().await;

    let (outcome, via): (String, String) = sqlx::query_as(
        "select outcome, received_via from processed_events where event_id = 'evt_swept'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((outcome.as_str(), via.as_str()), ("processed", "sweep"));
    let topics: Vec<String> =
        sqlx::query_scalar("select topic from outbox where event_id = 'evt_swept'")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(topics, ["source.stripe"]);
    for table in ["wallets", "wallet_entries", "payments"] {
        assert_eq!(app.count(table).await, 0, "{table} has rows");
    }
}
