//! A subscription's state: the guarded upsert, ordered by the event's own
//! time, and its `subscription.changed` announcement when the state
//! changed; many subscriptions to a statement.

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::effect::{Applied, Effect, Error};
use super::subscription_key;
use super::teach::{Taught, teach};
use super::{Decoded, announce_each};
use crate::owners::{self, Subject};
use crate::providers::{Event, Refreshed};
use crate::subscriptions::{self, Subscription, Upserted};

/// Applies each subscription event ([`Effect::Subscription`]), in order:
/// the guarded upsert, ordered by the event's own time, and its
/// `subscription.changed` announcement when the state changed, in a
/// handful of statements whatever their number. Its owner is the one its
/// metadata names, which it teaches for its customer, else its customer's
/// learned one. Answers a prefix of `units` (never empty when `units` is
/// not): it stops after an event that teaches an owner anew (what waited
/// for that owner applies first), and before one that shares a key with an
/// event before it. Call with their plans' locks held.
pub(super) async fn apply_all(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let mut owned: Vec<(&Event, Subscription, i64, Taught)> = Vec::with_capacity(units.len());
    for (i, unit) in units.iter().enumerate() {
        let Effect::Subscription { next, event_time } = unit.effect() else {
            return Err(Error::Invariant(
                "a set of subscriptions holds another event",
            ));
        };
        let keys = &unit.plan().keys;
        if units[..i]
            .iter()
            .any(|before| before.plan().keys.iter().any(|key| keys.contains(key)))
        {
            break;
        }
        let (next, taught) = owner_of(conn, unit.event(), next).await?;
        let new = taught.is_new();
        owned.push((unit.event(), next, *event_time, taught));
        if new {
            break;
        }
    }
    let nexts: Vec<(&Subscription, i64, &str)> = owned
        .iter()
        .map(|(event, next, time, _)| (next, *time, event.event_id()))
        .collect();
    let upserted = subscriptions::upsert_many(conn, &nexts).await?;
    let announced = announce(conn, &owned, &upserted).await?;
    let mut outbox_ids = announced.into_iter();
    let mut applied = Vec::with_capacity(owned.len());
    for ((event, _, _, taught), upserted) in owned.into_iter().zip(upserted) {
        let result = match upserted {
            Upserted::Changed { .. } => {
                let outbox_id = outbox_ids.next().flatten();
                Applied::processed(json!({ "outbox_id": outbox_id }))
            }
            Upserted::Unchanged => Applied::processed(json!({ "changed": false })),
            Upserted::Superseded {
                stored_event_time,
                stored_status,
            } => Applied::superseded(json!({
                "reason": "older than the stored state",
                "stored_event_time": stored_event_time,
                "stored_status": stored_status,
            })),
        };
        applied.push(taught.onto(refreshed(event, result)));
    }
    Ok(applied)
}

/// `applied`, its detail saying whether the event's object was refreshed
/// on a tie ([`crate::fetch`]) and how.
fn refreshed(event: &Event, mut applied: Applied) -> Applied {
    let note = match event.refresh() {
        None => return applied,
        Some(Refreshed::Current) => json!({
            "refreshed": "it tied with the stored state on created: applied the subscription as Stripe's API serves it now",
        }),
        Some(Refreshed::Failed(reason)) => json!({
            "refresh_failed": reason,
            "tie_rule": "it tied with the stored state on created: the later arrival applies",
        }),
    };
    if let (Value::Object(detail), Value::Object(note)) = (&mut applied.detail, note) {
        detail.extend(note);
    }
    applied
}

/// `next` with its owner: the one it names, taught for its customer, else
/// its customer's learned one.
async fn owner_of(
    conn: &mut PgConnection,
    event: &Event,
    next: &Subscription,
) -> Result<(Subscription, Taught), Error> {
    let mut taught = Taught::default();
    let mut owned = next.clone();
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
            owned.user_id = owners::of(conn, event.provider(), Subject::Customer, customer).await?;
        }
        (_, None) => {}
    }
    Ok((owned, taught))
}

/// Writes the `subscription.changed` row of each subscription whose state
/// changed, in order, in one statement: their outbox ids.
async fn announce(
    conn: &mut PgConnection,
    owned: &[(&Event, Subscription, i64, Taught)],
    upserted: &[Upserted],
) -> Result<Vec<Option<i64>>, Error> {
    let mut payloads: Vec<Value> = Vec::new();
    let mut keys: Vec<String> = Vec::new();
    let mut changed: Vec<&Event> = Vec::new();
    for ((event, next, _, _), upserted) in owned.iter().zip(upserted) {
        let Upserted::Changed { previous } = upserted else {
            continue;
        };
        let user_id = next
            .user_id
            .clone()
            .or_else(|| previous.as_ref().and_then(|p| p.user_id.clone()));
        payloads.push(json!({
            "subscription_id": next.subscription_id,
            "customer_id": next.customer_id,
            "user_id": user_id,
            "status": next.status,
            "previous_status": previous.as_ref().map(|p| &p.status),
            "plan_id": next.plan_id,
            "current_period_end": next.current_period_end,
        }));
        // Its lock key is also the order its announcements keep.
        keys.push(subscription_key(event.provider(), &next.subscription_id));
        changed.push(event);
    }
    announce_each(conn, "subscription.changed", &changed, &payloads, &keys).await
}
