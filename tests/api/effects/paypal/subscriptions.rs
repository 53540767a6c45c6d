//! PayPal's subscriptions: ordered by the event's time, terminal statuses
//! kept.

use serde_json::{Value, json};
use sqlx::PgPool;

use super::bodies::{IMPOSSIBLE_TIME, envelope, subscription, subscription_event};
use super::books;
use crate::helpers::now;

#[sqlx::test]
async fn subscriptions_follow_the_event_time_and_a_cancelled_one_is_never_revived(pool: PgPool) {
    let app = books(pool);
    let t = now();
    let sub = |id: &str, kind: &str, status: &str, at: i64| {
        subscription_event(id, kind, "I-BW452GLLEP1G", status, at)
    };
    app.paypal(&sub("WH-1", "ACTIVATED", "ACTIVE", t), "processed")
        .await;
    app.paypal(&sub("WH-2", "SUSPENDED", "SUSPENDED", t + 10), "processed")
        .await;
    let detail = app
        .paypal(&sub("WH-3", "UPDATED", "ACTIVE", t + 5), "superseded")
        .await;
    assert_eq!(detail["stored_status"], "SUSPENDED");
    app.paypal(&sub("WH-4", "CANCELLED", "CANCELLED", t + 20), "processed")
        .await;
    // A tie does not revive it; nor does an older event.
    app.paypal(&sub("WH-5", "RE-ACTIVATED", "ACTIVE", t + 20), "superseded")
        .await;
    app.paypal(&sub("WH-6", "ACTIVATED", "ACTIVE", t + 15), "superseded")
        .await;
    let detail = app
        .paypal(&sub("WH-7", "EXPIRED", "EXPIRED", t + 20), "processed")
        .await;
    assert!(detail["outbox_id"].is_number(), "{detail}");

    let row: (String, String, String, String) = sqlx::query_as(
        "select status, customer_id, user_id, plan_id from subscriptions where provider = 'paypal'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let expected = (
        "EXPIRED",
        "2J6QB8YJQSJRJ",
        "user_1",
        "P-5ML4271244454362WXNWU5NQ",
    );
    assert_eq!(
        (
            row.0.as_str(),
            row.1.as_str(),
            row.2.as_str(),
            row.3.as_str()
        ),
        expected
    );
    let changes: Vec<(Value, Value)> = sqlx::query_as(
        "select payload -> 'status', payload -> 'previous_status' from outbox
         where topic = 'subscription.changed' order by id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let statuses: Vec<&str> = changes.iter().map(|(s, _)| s.as_str().unwrap()).collect();
    assert_eq!(statuses, ["ACTIVE", "SUSPENDED", "CANCELLED", "EXPIRED"]);
    app.assert_consistent().await;
}

#[sqlx::test]
async fn the_simulator_s_impossible_create_time_falls_back_to_the_resource_s_update_time(
    pool: PgPool,
) {
    let app = books(pool);
    let t = now();
    app.paypal(
        &subscription_event("WH-1", "UPDATED", "I-SIM", "ACTIVE", t),
        "processed",
    )
    .await;
    // The simulator's envelope around `resource`.
    let simulated = |id: &str, kind: &str, resource: Value| {
        envelope(
            id,
            &format!("BILLING.SUBSCRIPTION.{kind}"),
            IMPOSSIBLE_TIME,
            resource,
        )
    };
    // Its resource was updated later: it applies, at that time.
    let later = simulated(
        "WH-2",
        "SUSPENDED",
        subscription("I-SIM", "SUSPENDED", t + 60),
    );
    app.paypal(&later, "processed").await;
    let stored: i64 = sqlx::query_scalar(
        "select extract(epoch from provider_updated_at)::bigint from subscriptions",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(stored, t + 60);
    // One updated earlier is older than the stored state.
    let earlier = simulated("WH-3", "ACTIVATED", subscription("I-SIM", "ACTIVE", t + 30));
    app.paypal(&earlier, "superseded").await;
    // Without any usable time it can never be ordered.
    let mut timeless = subscription("I-SIM", "ACTIVE", t + 90);
    timeless["update_time"] = json!(IMPOSSIBLE_TIME);
    let body = simulated("WH-4", "UPDATED", timeless);
    let detail = app.paypal(&body, "rejected").await;
    assert_eq!(detail["reason"], "event has no created time to order it by");
    let status: String = sqlx::query_scalar("select status from subscriptions")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(status, "SUSPENDED");
    app.assert_consistent().await;
}
