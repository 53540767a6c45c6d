//! After a restore from a backup: the ids that reach the user's systems
//! (an outbox row's `webhook-id`, a wallet entry's `entry_id`) are never
//! handed out again for another message.

use sqlx::PgPool;

use crate::helpers::{payment_intent_succeeded, spawn_app};

async fn last_ids(pool: &PgPool) -> (i64, i64) {
    sqlx::query_as("select (select max(id) from outbox), (select max(id) from wallet_entries)")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn a_restored_database_hands_out_no_id_it_handed_out_before(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.deliver(
        &payment_intent_succeeded("evt_r1", "pi_r1", "user_r", 100),
        "processed",
    )
    .await;
    let (outbox_before, entry_before) = last_ids(&pool).await;
    // What a restore does to the sequences: they go back to the backup's
    // values, below ids already handed out (and seen by receivers).
    sqlx::query("select setval('outbox_row_id', 1), setval('wallet_entries_id_seq', 1)")
        .execute(&pool)
        .await
        .unwrap();

    webhookd::startup::ids_past_now(&pool).await.unwrap();
    app.deliver(
        &payment_intent_succeeded("evt_r2", "pi_r2", "user_r", 200),
        "processed",
    )
    .await;
    let (outbox_after, entry_after) = last_ids(&pool).await;
    assert!(
        outbox_after > outbox_before,
        "{outbox_after} after {outbox_before}"
    );
    assert!(
        entry_after > entry_before,
        "{entry_after} after {entry_before}"
    );

    // A second start, at once: the ids only move forward.
    webhookd::startup::ids_past_now(&pool).await.unwrap();
    app.deliver(
        &payment_intent_succeeded("evt_r3", "pi_r3", "user_r", 300),
        "processed",
    )
    .await;
    let (outbox_next, entry_next) = last_ids(&pool).await;
    assert!(outbox_next > outbox_after && entry_next > entry_after);
    app.assert_consistent().await;
}
