//! Payments that waited too long for their owner
//! (`WEBHOOKD_OWNER_WAIT`, default 72 hours): each is recorded `rejected`
//! with reason `no owner`, and an outbox row `payment.unowned` tells the
//! user's systems, in one transaction. Never silently lost: `events replay`
//! applies one whose owner became known later.

use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::Error;
use super::engine::BEGIN_ONE;
use crate::clock::Clock;
use crate::effects::{self, Effect};
use crate::events::{self, Outcome, TakenWait};
use crate::providers::Event;
use crate::{db, outbox};

/// How long a payment waits for its owner unless configured.
pub const DEFAULT_OWNER_WAIT: Duration = Duration::from_secs(72 * 3600);

/// How often a serving process looks for waits past their time.
const EVERY: Duration = Duration::from_secs(60);

/// Most waits expired per transaction round.
const ROUND: i64 = 500;

/// Rejects every payment that has waited for its owner since before
/// `now - wait` (Unix seconds), each in its own transaction; an event that
/// brought the owner first keeps its release. Returns how many it rejected.
pub async fn expire(pool: &PgPool, now: i64, wait: Duration) -> Result<usize, Error> {
    let cutoff = now.saturating_sub(i64::try_from(wait.as_secs()).unwrap_or(i64::MAX));
    let mut expired = 0;
    loop {
        let waiting = events::owner_waits_before(pool, cutoff, ROUND).await?;
        let round = waiting.len();
        for wait in waiting {
            let mut tx = db::begin_with(pool, BEGIN_ONE).await?;
            match events::take_owner_wait(&mut tx, &wait.provider, &wait.event_id).await? {
                Some(taken) => {
                    reject(&mut tx, &taken).await?;
                    tx.commit().await?;
                    expired += 1;
                }
                None => tx.rollback().await?,
            }
        }
        if round < usize::try_from(ROUND).unwrap_or(usize::MAX) {
            return Ok(expired);
        }
    }
}

async fn reject(conn: &mut sqlx::PgConnection, taken: &TakenWait) -> Result<(), Error> {
    let stored = &taken.event;
    let payload = unowned(taken);
    let message = outbox::Message {
        topic: "payment.unowned",
        provider: &stored.provider,
        event_id: &stored.event_id,
        event_type: Some(&stored.event_type),
        payload: &payload,
        ordering_key: None,
        account: stored.account.as_deref(),
    };
    let outbox_id = outbox::enqueue_one(conn, message).await?;
    let detail = json!({
        "reason": "no owner",
        "waited_for": taken.waits_for,
        "waited_since": taken.since.millis(),
        "outbox_id": outbox_id,
    });
    let (provider, event_id) = (&stored.provider, &stored.event_id);
    events::record_outcome(conn, provider, event_id, Outcome::Rejected, &detail).await?;
    Ok(())
}

/// The `payment.unowned` payload: the payment and what it would have
/// credited, with a null owner.
fn unowned(taken: &TakenWait) -> Value {
    let stored = &taken.event;
    let mut payload = json!({
        "user_id": null,
        "event_id": stored.event_id,
        "event_type": stored.event_type,
        "waited_for": taken.waits_for,
        "waited_since": taken.since.millis(),
    });
    let event = Event::from_stored(
        &stored.provider,
        &stored.event_id,
        &stored.event_type,
        stored.payload.clone().into(),
    );
    let decoded = event.ok().map(effects::decode);
    let owed = decoded.as_ref().and_then(|decoded| match decoded.effect() {
        Effect::Unowned { credit, .. } => Some(credit),
        Effect::InvoicePaid(invoice) => invoice.credit.as_ref(),
        _ => None,
    });
    if let (Some(credit), Value::Object(fields)) = (owed, &mut payload) {
        fields.insert("payment_id".into(), credit.source_ref.clone().into());
        fields.insert("amount_minor".into(), credit.amount_minor.into());
        fields.insert("currency".into(), credit.currency.clone().into());
        fields.insert("customer_id".into(), credit.customer.clone().into());
        fields.insert("context".into(), credit.context.clone());
    }
    payload
}

/// Expires owners' waits every minute until `shutdown`.
pub async fn run(pool: PgPool, clock: Clock, wait: Duration, shutdown: CancellationToken) {
    crate::clock::every(EVERY, &shutdown, || async {
        match expire(&pool, clock.now(), wait).await {
            Ok(0) => {}
            Ok(expired) => tracing::warn!(expired, "payments rejected: no owner came in time"),
            Err(error) => tracing::warn!(error = %error, "could not expire owners' waits"),
        }
    })
    .await;
}
