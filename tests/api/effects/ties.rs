//! Fresh state on ties (`WEBHOOKD_STRIPE_REFRESH_ON_TIE=subscriptions`):
//! two subscription events in one second cannot be ordered by `created`.
//! Without the refresh the later arrival applies; with it the event is
//! given the subscription as (a fake of) Stripe's API serves it now, still
//! as of its own time; a refresh that fails falls back to the later
//! arrival and says so.

use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;
use webhookd::clock::Clock;

use crate::fakes::stripe::FakeStripe;
use crate::helpers::{TestApp, now, spawn_app_with, subscription};

const KEY: &str = "sk_test_ties";

/// The app with `STRIPE_API_KEY` set, the fake as Stripe's API, and the
/// refresh on ties on or off.
async fn app(pool: PgPool, refresh: bool) -> (TestApp, FakeStripe) {
    let fake = FakeStripe::start(KEY, vec![]).await;
    let base = fake.base_url();
    let app = spawn_app_with(pool, Clock::System, |settings| {
        settings.sweep.stripe.stripe_api_key = Some(KEY.into());
        settings.sweep.stripe.stripe_api_base = base;
        settings.sweep.stripe.stripe_refresh_on_tie = refresh.then(|| "subscriptions".to_owned());
        settings.request_timeout = Duration::from_secs(2);
    })
    .await;
    (app, fake)
}

/// `GET /v1/subscriptions/sub_1` as Stripe would serve it now.
fn current(status: &str) -> Value {
    json!({ "id": "sub_1", "object": "subscription", "customer": "cus_1", "status": status,
            "metadata": { "user_id": "user_1" } })
}

/// The stored status of `sub_1` and the time of the event that wrote it.
async fn stored(app: &TestApp) -> (String, i64) {
    sqlx::query_as(
        "select status, extract(epoch from provider_updated_at)::bigint from subscriptions
         where subscription_id = 'sub_1'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap()
}

/// Two events of one second: `active` arrives first, `past_due` second,
/// though Stripe's current state is `active` (`past_due` was the older).
fn a_tie(t: i64) -> (String, String) {
    (
        subscription(
            "evt_active",
            "customer.subscription.updated",
            "sub_1",
            "active",
            t,
        ),
        subscription(
            "evt_past_due",
            "customer.subscription.updated",
            "sub_1",
            "past_due",
            t,
        ),
    )
}

#[sqlx::test]
async fn without_the_refresh_the_later_arrival_of_a_tie_applies(pool: PgPool) {
    let (app, fake) = app(pool, false).await;
    fake.set_subscription(current("active"));
    let t = now() - 60;
    let (active, past_due) = a_tie(t);
    app.deliver(&active, "processed").await;
    app.deliver(&past_due, "processed").await;
    assert_eq!(stored(&app).await, ("past_due".to_owned(), t));
    assert!(fake.retrievals().is_empty(), "nothing is fetched");
    let (_, detail) = app.event("evt_past_due").await;
    assert!(detail.get("refreshed").is_none(), "{detail}");
    app.assert_consistent().await;
}

#[sqlx::test]
async fn with_the_refresh_a_tie_applies_the_apis_current_state_as_of_its_own_time(pool: PgPool) {
    let (app, fake) = app(pool, true).await;
    fake.set_subscription(current("active"));
    let t = now() - 60;
    let (active, past_due) = a_tie(t);
    // The first has nothing stored to tie with: nothing fetched.
    app.deliver(&active, "processed").await;
    assert!(fake.retrievals().is_empty());
    app.deliver(&past_due, "processed").await;
    assert_eq!(stored(&app).await, ("active".to_owned(), t));
    let (_, detail) = app.event("evt_past_due").await;
    assert!(
        detail["refreshed"]
            .as_str()
            .is_some_and(|note| note.contains("as Stripe's API serves it now")),
        "{detail}"
    );
    let paths: Vec<String> = fake.retrievals().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/subscriptions/sub_1"]);
    // The stored payload is what was delivered.
    let payload: Value =
        sqlx::query_scalar("select payload from processed_events where event_id = 'evt_past_due'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(payload["data"]["object"]["status"], "past_due");

    // A later event is no tie: applied as delivered, nothing fetched.
    let later = subscription(
        "evt_canceled",
        "customer.subscription.deleted",
        "sub_1",
        "canceled",
        t + 1,
    );
    app.deliver(&later, "processed").await;
    assert_eq!(stored(&app).await, ("canceled".to_owned(), t + 1));
    // An older one never moves the state back, refreshed or not.
    let older = subscription(
        "evt_older",
        "customer.subscription.updated",
        "sub_1",
        "active",
        t,
    );
    app.deliver(&older, "superseded").await;
    assert_eq!(fake.retrievals().len(), 1);
    assert_eq!(stored(&app).await, ("canceled".to_owned(), t + 1));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_connected_accounts_tie_is_refreshed_from_that_account(pool: PgPool) {
    let fake = FakeStripe::start(KEY, vec![]).await;
    let base = fake.base_url();
    let app = spawn_app_with(pool, Clock::System, |settings| {
        settings.sweep.stripe.stripe_api_key = Some(KEY.into());
        settings.sweep.stripe.stripe_api_base = base;
        settings.sweep.stripe.stripe_refresh_on_tie = Some("subscriptions".to_owned());
        settings.sweep.stripe.scope.stripe_connect = Some("true".to_owned());
    })
    .await;
    fake.set_subscription(current("active"));
    let t = now() - 60;
    let of_account = |body: String| {
        let mut event: Value = serde_json::from_str(&body).unwrap();
        event["account"] = "acct_1".into();
        event.to_string()
    };
    let (active, past_due) = a_tie(t);
    app.deliver(&of_account(active), "processed").await;
    app.deliver(&of_account(past_due), "processed").await;
    assert_eq!(stored(&app).await, ("active".to_owned(), t));
    let retrieved = fake.retrievals();
    assert_eq!(retrieved.len(), 1);
    assert_eq!(retrieved[0].account.as_deref(), Some("acct_1"));
    app.assert_consistent().await;
}

#[sqlx::test]
async fn a_refresh_that_fails_falls_back_to_the_later_arrival_and_says_so(pool: PgPool) {
    let (app, fake) = app(pool, true).await;
    let t = now() - 60;
    let (active, past_due) = a_tie(t);
    app.deliver(&active, "processed").await;
    fake.fail_next(500, 1, None);
    // Not a 503: the event applies by the usual rule.
    app.deliver(&past_due, "processed").await;
    assert_eq!(stored(&app).await, ("past_due".to_owned(), t));
    let (_, detail) = app.event("evt_past_due").await;
    assert!(
        detail["refresh_failed"]
            .as_str()
            .is_some_and(|reason| reason.contains("HTTP 500")),
        "{detail}"
    );
    assert_eq!(
        detail["tie_rule"],
        "it tied with the stored state on created: the later arrival applies"
    );
    app.assert_consistent().await;
}

#[test]
fn config_check_refuses_a_refresh_it_cannot_do() {
    let database = webhookd::config::DatabaseSettings {
        database_url: Some("postgres://localhost/webhookd".to_owned().into()),
        db_pooler: webhookd::config::DbPooler::None,
        direct_database_url: None,
        db_max_connections: 4,
        db_acquire_timeout: Duration::from_secs(1),
        db_statement_timeout: Duration::from_secs(1),
    };
    let mut settings = webhookd::config::ServeSettings::default();
    for (value, key, problem) in [
        ("subscriptions", None, "set STRIPE_API_KEY"),
        (
            "always",
            Some(KEY),
            "WEBHOOKD_STRIPE_REFRESH_ON_TIE is subscriptions or off",
        ),
    ] {
        settings.sweep.stripe.stripe_refresh_on_tie = Some(value.to_owned());
        settings.sweep.stripe.stripe_api_key = key.map(Into::into);
        let error = webhookd::startup::validate(&settings, &database)
            .unwrap_err()
            .to_string();
        assert!(error.contains(problem), "{error}");
    }
    settings.sweep.stripe.stripe_refresh_on_tie = Some("subscriptions".to_owned());
    settings.sweep.stripe.stripe_api_key = Some(KEY.into());
    webhookd::startup::validate(&settings, &database).unwrap();
}
