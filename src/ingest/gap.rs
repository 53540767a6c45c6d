//! A sweep's finding, recorded: events that were never delivered, as an
//! event of webhookd's own with its outbox row.

use sqlx::PgPool;

use crate::events::{self, Outcome};
use crate::{db, outbox};

/// The topic of the row a sweep writes when it recovered events that were
/// never delivered.
pub const DELIVERY_GAP: &str = "webhookd.delivery_gap";

/// Records a sweep's finding (`payload`: provider, count, window) as an
/// event of webhookd's own, `delivery_gap:{until}` (of a connected
/// account's sweep: `delivery_gap:{account}:{until}`), with its
/// [`DELIVERY_GAP`] outbox row, in one transaction.
pub async fn announce_delivery_gap(
    pool: &PgPool,
    provider: &str,
    account: Option<&str>,
    until: i64,
    payload: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    let event_id = match account {
        None => format!("delivery_gap:{until}"),
        Some(account) => format!("delivery_gap:{account}:{until}"),
    };
    let mut tx = db::begin(pool).await?;
    if !events::claim_own(&mut tx, provider, &event_id, DELIVERY_GAP, payload).await? {
        return Ok(());
    }
    let message = outbox::Message {
        topic: DELIVERY_GAP,
        provider,
        event_id: &event_id,
        event_type: None,
        payload,
        ordering_key: None,
        account,
    };
    let outbox_id = outbox::enqueue_one(&mut tx, message).await?;
    let detail = serde_json::json!({ "outbox_id": outbox_id });
    events::record_outcome(&mut tx, provider, &event_id, Outcome::Processed, &detail).await?;
    outbox::notify(&mut tx).await?;
    tx.commit().await
}
