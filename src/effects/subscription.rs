//! A subscription's state: the guarded upsert, ordered by the event's own
//! time, and its `subscription.changed` announcement when the state
//! changed.

use serde_json::json;
use sqlx::PgConnection;

use super::effect::{Applied, Error};
use super::subscription_key;
use super::teach::{Taught, teach};
use crate::outbox;
use crate::owners::{self, Subject};
use crate::providers::Event;
use crate::subscriptions::{self, Subscription, Upserted};

/// The guarded subscription upsert, ordered by the event's own time, and its
/// `subscription.changed` announcement when the state changed. Its owner is
/// the one its metadata names, which it teaches for its customer, else its
/// customer's learned one.
pub(super) async fn apply(
    conn: &mut PgConnection,
    event: &Event,
    next: &Subscription,
    event_time: i64,
) -> Result<Applied, Error> {
    let mut taught = Taught::default();
    let mut attributed = None;
    match (&next.user_id, &next.customer_id) {
        (Some(user_id), Some(customer)) => {
            teach(
                conn,
                event,
                Subject::Customer,
                customer,
                user_id,
                &mut taught,
            )
            .await?;
        }
        (None, Some(customer)) => {
            let owner = owners::of(conn, event.provider(), Subject::Customer, customer).await?;
            attributed = owner.map(|user_id| Subscription {
                user_id: Some(user_id),
                ..next.clone()
            });
        }
        (_, None) => {}
    }
    let next = attributed.as_ref().unwrap_or(next);
    Ok(taught.onto(upsert(conn, event, next, event_time).await?))
}

async fn upsert(
    conn: &mut PgConnection,
    event: &Event,
    next: &Subscription,
    event_time: i64,
) -> Result<Applied, Error> {
    match subscriptions::upsert(conn, next, event_time, event.event_id()).await? {
        Upserted::Changed { previous } => {
            let user_id = next
                .user_id
                .clone()
                .or_else(|| previous.as_ref().and_then(|p| p.user_id.clone()));
            let payload = json!({
                "subscription_id": next.subscription_id,
                "customer_id": next.customer_id,
                "user_id": user_id,
                "status": next.status,
                "previous_status": previous.as_ref().map(|p| &p.status),
                "plan_id": next.plan_id,
                "current_period_end": next.current_period_end,
            });
            // Its lock key is also the order its announcements keep.
            let key = subscription_key(event.provider(), &next.subscription_id);
            let message = outbox::Message {
                topic: "subscription.changed",
                provider: event.provider(),
                event_id: event.event_id(),
                event_type: Some(event.event_type()),
                payload: &payload,
                ordering_key: Some(&key),
            };
            let outbox_id = outbox::enqueue_one(conn, message).await?;
            Ok(Applied::processed(json!({ "outbox_id": outbox_id })))
        }
        Upserted::Unchanged => Ok(Applied::processed(json!({ "changed": false }))),
        Upserted::Superseded {
            stored_event_time,
            stored_status,
        } => Ok(Applied::superseded(json!({
            "reason": "older than the stored state",
            "stored_event_time": stored_event_time,
            "stored_status": stored_status,
        }))),
    }
}
