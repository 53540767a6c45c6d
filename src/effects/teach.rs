//! Owners taught while applying: an event that names an owner together
//! with a customer or a payment teaches it ([`teach`]); the first owner
//! learned stays, a new one releases the events waiting for it, and a
//! conflicting claim is recorded in `detail.owner_conflict`.

use serde_json::{Value, json};
use sqlx::PgConnection;

use super::effect::{Applied, Effect, Error};
use super::{Decoded, waits};
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

/// [`teach_all`] of the lessons of `events` events, each lesson with the
/// index of its event: what each event taught.
pub(super) async fn teach_each(
    conn: &mut PgConnection,
    events: usize,
    lessons: &[(usize, Lesson<'_>)],
) -> Result<Vec<Taught>, Error> {
    let only: Vec<Lesson<'_>> = lessons.iter().map(|(_, lesson)| *lesson).collect();
    let mut taught: Vec<Taught> = (0..events).map(|_| Taught::default()).collect();
    for ((i, _), learned) in lessons.iter().zip(teach_all(conn, &only).await?) {
        if let Some(taught) = taught.get_mut(*i) {
            taught.merge(learned);
        }
    }
    Ok(taught)
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

/// Applies a run of events that only name an owner ([`Effect::LearnCustomer`]:
/// a customer whose metadata names it, `customer.created/updated`;
/// [`Effect::LearnPayment`]: an order whose notes name its payment's,
/// Razorpay's `order.paid`), teaching each in order in one statement.
/// Answers a prefix of `units`, never empty when `units` is not: it ends
/// with the first whose owner events wait for, which apply before the
/// next. Call with their plans' locks held.
pub(super) async fn learn_all(
    conn: &mut PgConnection,
    units: &[&Decoded],
) -> Result<Vec<Applied>, Error> {
    let lessons = units
        .iter()
        .map(|unit| {
            let event = unit.event();
            let (subject, id, user_id) = match unit.effect() {
                Effect::LearnCustomer { customer, user_id } => {
                    (Subject::Customer, customer, user_id)
                }
                Effect::LearnPayment { payment, user_id } => (Subject::Payment, payment, user_id),
                _ => return Err(Error::Invariant("a set of owners holds another event")),
            };
            Ok(Lesson {
                event,
                subject,
                id,
                user_id,
            })
        })
        .collect::<Result<Vec<Lesson<'_>>, Error>>()?;
    let releases: Vec<(&str, Vec<String>)> = lessons
        .iter()
        .map(|lesson| {
            let wait = owners::wait_key(lesson.subject, lesson.id);
            (lesson.event.provider(), vec![wait])
        })
        .collect();
    let end = waits::released_after(conn, &releases).await?;
    let taught = teach_all(conn, &lessons[..end]).await?;
    Ok(lessons
        .iter()
        .zip(taught)
        .map(|(lesson, taught)| {
            let learned = match lesson.subject {
                Subject::Customer => json!({ "customer_id": lesson.id, "user_id": lesson.user_id }),
                Subject::Payment => json!({ "payment_id": lesson.id, "user_id": lesson.user_id }),
            };
            taught.onto(Applied::processed(learned))
        })
        .collect())
}
