//! Owners taught while applying: an event that names an owner together
//! with a customer or a payment teaches it ([`teach`]); the first owner
//! learned stays, a new one releases the events waiting for it, and a
//! conflicting claim is recorded in `detail.owner_conflict`.

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::effect::{Applied, Error};
use crate::owners::{self, Learned, Subject};
use crate::providers::Event;
use crate::subscriptions;

/// What the owners an event taught bring: the waits they release and the
/// claims that conflicted with an owner learned before.
#[derive(Debug, Default)]
pub(super) struct Taught {
    releases: Vec<String>,
    conflicts: Vec<Value>,
}

impl Taught {
    pub(super) fn is_new(&self) -> bool {
        !self.releases.is_empty()
    }

    /// `applied`, releasing what the owners taught release, with the
    /// conflicting claims in `detail.owner_conflict`.
    pub(super) fn onto(self, mut applied: Applied) -> Applied {
        applied.releases.extend(self.releases);
        if self.conflicts.is_empty() {
            return applied;
        }
        applied.noting("owner_conflict", self.conflicts.into())
    }
}

/// Teaches that `subject` `id` belongs to `user_id`, as `event` says: the
/// first owner learned stays. A new customer's owner is also given to its
/// subscriptions that have none. Call with the subject's lock held (its
/// plan's key, [`owners::lock_key`]).
pub(super) async fn teach(
    conn: &mut PgConnection,
    event: &Event,
    subject: Subject,
    id: &str,
    user_id: &str,
    taught: &mut Taught,
) -> Result<(), Error> {
    let provider = event.provider();
    match owners::learn(conn, provider, subject, id, user_id, event.event_id()).await? {
        Learned::New => {
            if subject == Subject::Customer {
                subscriptions::attribute(conn, provider, id, user_id).await?;
            }
            taught.releases.push(owners::wait_key(subject, id));
        }
        Learned::Known => {}
        Learned::Conflict { kept, kept_by } => taught.conflicts.push(json!({
            "subject": subject.as_str(),
            "id": id,
            "claimed": user_id,
            "kept": kept,
            "kept_by": kept_by,
        })),
    }
    Ok(())
}

/// A customer whose metadata names its owner (`customer.created/updated`):
/// teaches it.
pub(super) async fn learn_customer(
    conn: &mut PgConnection,
    event: &Event,
    customer: &str,
    user_id: &str,
) -> Result<Applied, Error> {
    let mut taught = Taught::default();
    teach(
        conn,
        event,
        Subject::Customer,
        customer,
        user_id,
        &mut taught,
    )
    .await?;
    let learned = Applied::processed(json!({ "customer_id": customer, "user_id": user_id }));
    Ok(taught.onto(learned))
}

/// An order whose notes name its payment's owner (Razorpay's `order.paid`):
/// teaches it.
pub(super) async fn learn_payment(
    conn: &mut PgConnection,
    event: &Event,
    payment: &str,
    user_id: &str,
) -> Result<Applied, Error> {
    let mut taught = Taught::default();
    teach(conn, event, Subject::Payment, payment, user_id, &mut taught).await?;
    let learned = Applied::processed(json!({ "payment_id": payment, "user_id": user_id }));
    Ok(taught.onto(learned))
}
