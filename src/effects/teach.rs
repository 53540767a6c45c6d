//! Owners taught while applying: an event that names an owner together
//! with a customer or a payment teaches it ([`teach`]); the first owner
//! learned stays, a new one releases the events waiting for it, and a
//! conflicting claim is recorded in `detail.owner_conflict`.

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::effect::{Applied, Error};
use crate::owners::{self, Learned, Subject, Teaching};
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

    /// What another lesson of the same event brought, added.
    pub(super) fn merge(&mut self, other: Taught) {
        self.releases.extend(other.releases);
        self.conflicts.extend(other.conflicts);
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

/// One owner an event teaches: `subject` `id` belongs to `user_id`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lesson<'a> {
    pub event: &'a Event,
    pub subject: Subject,
    pub id: &'a str,
    pub user_id: &'a str,
}

/// Teaches `lessons` in order, one statement for all when no two teach one
/// subject: the first owner learned stays. A new customer's owner is also
/// given to its subscriptions that have none. What each lesson brought, in
/// order. Call with the subjects' locks held (their plans' keys,
/// [`owners::lock_key`]).
pub(super) async fn teach_all(
    conn: &mut PgConnection,
    lessons: &[Lesson<'_>],
) -> Result<Vec<Taught>, Error> {
    let teachings: Vec<Teaching<'_>> = lessons
        .iter()
        .map(|lesson| Teaching {
            provider: lesson.event.provider(),
            subject: lesson.subject,
            id: lesson.id,
            user_id: lesson.user_id,
            event_id: lesson.event.event_id(),
        })
        .collect();
    let learned = owners::learn(conn, &teachings).await?;
    let customers: Vec<(&str, &str, &str)> = teachings
        .iter()
        .zip(&learned)
        .filter(|(t, learned)| t.subject == Subject::Customer && **learned == Learned::New)
        .map(|(t, _)| (t.provider, t.id, t.user_id))
        .collect();
    subscriptions::attribute(conn, &customers).await?;
    Ok(teachings
        .iter()
        .zip(learned)
        .map(|(t, learned)| {
            let mut taught = Taught::default();
            match learned {
                Learned::New => taught.releases.push(owners::wait_key(t.subject, t.id)),
                Learned::Known => {}
                Learned::Conflict { kept, kept_by } => taught.conflicts.push(json!({
                    "subject": t.subject.as_str(),
                    "id": t.id,
                    "claimed": t.user_id,
                    "kept": kept,
                    "kept_by": kept_by,
                })),
            }
            taught
        })
        .collect())
}

/// Teaches that `subject` `id` belongs to `user_id`, as `event` says
/// ([`teach_all`] of one), adding what it brought to `taught`.
pub(super) async fn teach(
    conn: &mut PgConnection,
    event: &Event,
    subject: Subject,
    id: &str,
    user_id: &str,
    taught: &mut Taught,
) -> Result<(), Error> {
    let lesson = Lesson {
        event,
        subject,
        id,
        user_id,
    };
    for learned in teach_all(conn, &[lesson]).await? {
        taught.merge(learned);
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
