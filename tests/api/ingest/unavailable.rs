//! A database that is there but not ready (SQLSTATE 55000,
//! object_not_in_prerequisite_state) is a moment's trouble: ingest answers
//! 503 with Retry-After, writes nothing, and the provider's retry applies.

use reqwest::StatusCode;
use sqlx::PgPool;

use crate::helpers::{now, payment_intent_succeeded, spawn_app, subscription};

#[sqlx::test]
async fn an_event_meeting_sqlstate_55000_is_answered_503_with_retry_after_and_applies_on_retry(
    pool: PgPool,
) {
    sqlx::query(
        "create function not_ready() returns trigger language plpgsql as $$
         begin raise exception 'not ready' using errcode = '55000'; end $$",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "create trigger not_ready before insert on processed_events
         for each statement execute function not_ready()",
    )
    .execute(&pool)
    .await
    .unwrap();
    let app = spawn_app(pool.clone()).await;
    // A credit (batched) and a subscription event (alone).
    let credit = payment_intent_succeeded("evt_55000", "pi_55000", "user_1", 700);
    let sub = subscription(
        "evt_55000_sub",
        "customer.subscription.created",
        "sub_1",
        "active",
        now(),
    );
    for body in [&credit, &sub] {
        let response = app.post_stripe(body).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(response.headers()["retry-after"], "5");
    }
    app.assert_nothing_written().await;

    sqlx::query("drop trigger not_ready on processed_events")
        .execute(&pool)
        .await
        .unwrap();
    app.deliver_each(&[(&credit, "processed"), (&sub, "processed")])
        .await;
    assert_eq!(app.balance("user_1", "USD").await, Some(700));
    app.assert_consistent().await;
}
