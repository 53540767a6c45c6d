//! Batches running at once (`WEBHOOKD_BATCH_CONCURRENCY` above 1) share no
//! key: an event whose wallet, payment or id a running batch holds waits
//! for it, so it never overtakes an earlier one; events sharing nothing go
//! past a batch stuck behind a lock.

use std::time::Duration;

use bytes::Bytes;
use sqlx::PgPool;
use tokio_util::task::TaskTracker;
use webhookd::events::Outcome;
use webhookd::ingest::batch::BatchSettings;
use webhookd::ingest::{Ingestor, Wake};
use webhookd::providers::{Event, testing};

use crate::helpers::{payment_intent_succeeded, until_waiting_on_locks};

fn credit(event_id: &str, user_id: &str, amount: i64) -> Event {
    let intent = event_id.replace("evt_", "pi_");
    let body = payment_intent_succeeded(event_id, &intent, user_id, amount);
    Event::from_stored(
        "stripe",
        event_id,
        "payment_intent.succeeded",
        Bytes::from(body),
    )
    .unwrap()
}

async fn claimed(pool: &PgPool, event_id: &str) -> bool {
    sqlx::query_scalar("select exists (select 1 from processed_events where event_id = $1)")
        .bind(event_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn a_batch_stuck_on_a_wallet_holds_back_that_wallet_only(pool: PgPool) {
    let tasks = TaskTracker::new();
    let settings = BatchSettings {
        max_events: 8,
        concurrency: 2,
    };
    let ingestor = Ingestor::start(pool.clone(), settings, Wake::Notify, &tasks);
    let first = ingestor.ingest(testing::assume_verified(credit("evt_w0", "user_w", 100)));
    assert_eq!(first.await.unwrap().outcome, Outcome::Processed);

    // The wallet's row is held elsewhere: the next credit's batch waits.
    let mut hold = pool.begin().await.unwrap();
    sqlx::query("select 1 from wallets where user_id = 'user_w' for update")
        .execute(&mut *hold)
        .await
        .unwrap();
    let stuck = tokio::spawn({
        let ingestor = ingestor.clone();
        async move {
            ingestor
                .ingest(testing::assume_verified(credit("evt_wa", "user_w", 10)))
                .await
        }
    });
    until_waiting_on_locks(&pool, 1).await;
    // Another credit of that wallet, after it: it must not go first.
    let behind = tokio::spawn({
        let ingestor = ingestor.clone();
        async move {
            ingestor
                .ingest(testing::assume_verified(credit("evt_wc", "user_w", 20)))
                .await
        }
    });
    // A credit of another wallet goes past both.
    let past = ingestor.ingest(testing::assume_verified(credit("evt_wb", "user_other", 30)));
    let past = tokio::time::timeout(Duration::from_secs(20), past)
        .await
        .expect("a batch sharing no key runs beside the stuck one");
    assert_eq!(past.unwrap().outcome, Outcome::Processed);
    assert!(
        !claimed(&pool, "evt_wc").await,
        "the wallet's later credit waits"
    );
    let waiting: i64 = sqlx::query_scalar(
        "select count(*) from pg_stat_activity
         where datname = current_database() and wait_event_type = 'Lock'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        waiting, 1,
        "only the stuck batch waits: the later credit is not running"
    );

    hold.rollback().await.unwrap();
    assert_eq!(stuck.await.unwrap().unwrap().outcome, Outcome::Processed);
    assert_eq!(behind.await.unwrap().unwrap().outcome, Outcome::Processed);
    let order: Vec<String> = sqlx::query_scalar(
        "select event_id from wallet_entries where user_id = 'user_w' order by id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(order, ["evt_w0", "evt_wa", "evt_wc"], "arrival order");
    ingestor.close();
}
