//! Whose money it is: the owners learned for a provider's customers and
//! payments (the `owners` table), each source's [`Rule`] of where the owner
//! is written, and the resolution of a payment's owner by its
//! [`Candidate`]s. The first owner learned for a subject stays; a different
//! later claim is counted, never applied.

mod rule;

use sqlx::{PgConnection, PgPool};

use crate::db;

pub use rule::{Place, Rule, RuleError};

/// What an owner is learned for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subject {
    /// The provider's customer (`cus_…`).
    Customer,
    /// A payment (a Stripe PaymentIntent, a Razorpay payment).
    Payment,
}

impl Subject {
    pub fn as_str(self) -> &'static str {
        match self {
            Subject::Customer => "customer",
            Subject::Payment => "payment",
        }
    }
}

/// One place a payment's owner may come from, in its rule's order: the
/// first that yields wins.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Candidate {
    /// Written on the object itself (metadata, notes, custom_id).
    Named(String),
    /// The owner learned for this payment (a Checkout Session's
    /// client_reference_id).
    Payment(String),
    /// The owner learned for this customer.
    Customer(String),
}

/// The owner `candidates` name outright, when the first one does.
pub fn first_named(candidates: &[Candidate]) -> Option<&str> {
    match candidates.first() {
        Some(Candidate::Named(owner)) => Some(owner),
        _ => None,
    }
}

impl Candidate {
    /// The subject it looks up, if it is learned rather than named.
    pub fn learned(&self) -> Option<(Subject, &str)> {
        match self {
            Candidate::Named(_) => None,
            Candidate::Payment(id) => Some((Subject::Payment, id)),
            Candidate::Customer(id) => Some((Subject::Customer, id)),
        }
    }
}

/// The lock key of a learned subject: learning and resolving it happen
/// under it (a payment's is its credit's key, which its effects hold).
pub fn lock_key(provider: &str, subject: Subject, id: &str) -> String {
    match subject {
        Subject::Payment => format!("{provider}:credit:{id}"),
        Subject::Customer => format!("{provider}:customer:{id}"),
    }
}

/// The key an event waits under (`deferred_events.waits_for`) until the
/// owner of `subject` `id` is learned.
pub fn wait_key(subject: Subject, id: &str) -> String {
    format!("owner:{}:{id}", subject.as_str())
}

/// Whether `waits_for` is an owner's wait ([`wait_key`]).
pub fn is_wait_key(waits_for: &str) -> bool {
    waits_for.starts_with("owner:")
}

/// The subject whose owner `waits_for` waits for, if it is an owner's
/// wait: [`wait_key`] read back.
pub fn waited_for(waits_for: &str) -> Option<(Subject, &str)> {
    let (subject, id) = waits_for.strip_prefix("owner:")?.split_once(':')?;
    let subject = match subject {
        "customer" => Subject::Customer,
        "payment" => Subject::Payment,
        _ => return None,
    };
    Some((subject, id))
}

/// What teaching an owner found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Learned {
    /// The subject had no owner; now it has this one.
    New,
    /// It had this owner already.
    Known,
    /// It has another owner, which stays; the claim is counted.
    Conflict { kept: String, kept_by: String },
}

/// Teaches that `subject` `id` of `provider` belongs to `user_id`, as
/// `event_id` says. Call with the subject's lock held ([`lock_key`]).
pub async fn learn(
    conn: &mut PgConnection,
    provider: &str,
    subject: Subject,
    id: &str,
    user_id: &str,
    event_id: &str,
) -> Result<Learned, sqlx::Error> {
    // A claim of the same owner writes nothing; another owner's only
    // counts itself.
    let row = sqlx::query!(
        r#"
        insert into owners as o (provider, subject, subject_id, user_id, event_id)
        values ($1, $2, $3, $4, $5)
        on conflict (provider, subject, subject_id) do update
            set conflicts = o.conflicts + 1
            where o.user_id <> excluded.user_id
        returning o.user_id, o.event_id, (xmax = 0) as "inserted!"
        "#,
        provider,
        subject.as_str(),
        id,
        user_id,
        event_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(match row {
        None => Learned::Known,
        Some(row) if row.inserted => Learned::New,
        Some(row) => Learned::Conflict {
            kept: row.user_id,
            kept_by: row.event_id,
        },
    })
}

/// The owner learned for `subject` `id` of `provider`, if any.
pub async fn of(
    conn: &mut PgConnection,
    provider: &str,
    subject: Subject,
    id: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "select user_id from owners where provider = $1 and subject = $2 and subject_id = $3",
        provider,
        subject.as_str(),
        id,
    )
    .fetch_optional(conn)
    .await
}

/// The first of `candidates` (in order) that yields an owner. Call with
/// the learned subjects' locks held for an answer that stays true until
/// commit.
pub async fn resolve(
    conn: &mut PgConnection,
    provider: &str,
    candidates: &[Candidate],
) -> Result<Option<String>, sqlx::Error> {
    for candidate in candidates {
        match candidate {
            Candidate::Named(user_id) => return Ok(Some(user_id.clone())),
            learned => {
                let (subject, id) = learned.learned().expect("not named");
                if let Some(owner) = of(conn, provider, subject, id).await? {
                    return Ok(Some(owner));
                }
            }
        }
    }
    Ok(None)
}

/// Owners learned and conflicting claims, for the console and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub learned: i64,
    pub conflicts: i64,
}

pub async fn counts(pool: &PgPool) -> Result<Counts, sqlx::Error> {
    let query = sqlx::query!(
        r#"select count(*) as "learned!", coalesce(sum(conflicts), 0)::bigint as "conflicts!"
           from owners"#
    );
    let row = db::read_only(pool).one(query).await?;
    Ok(Counts {
        learned: row.learned,
        conflicts: row.conflicts,
    })
}

/// An owner learned, as the console lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub provider: String,
    pub subject: String,
    pub subject_id: String,
    pub user_id: String,
    pub event_id: String,
    pub conflicts: i64,
    pub learned_at: db::Timestamp,
}

/// The owners learned most recently, newest first.
pub async fn recent(pool: &PgPool, limit: i64) -> Result<Vec<Owner>, sqlx::Error> {
    let query = sqlx::query_as!(
        Owner,
        r#"
        select provider, subject, subject_id, user_id, event_id, conflicts,
               learned_at as "learned_at: db::Timestamp"
        from owners order by learned_at desc limit $1
        "#,
        limit,
    );
    db::read_only(pool).all(query).await
}

/// The owners that another user claimed too (`conflicts` > 0), most
/// recently learned first, for the console.
pub async fn conflicted(pool: &PgPool, limit: i64) -> Result<Vec<Owner>, sqlx::Error> {
    let query = sqlx::query_as!(
        Owner,
        r#"
        select provider, subject, subject_id, user_id, event_id, conflicts,
               learned_at as "learned_at: db::Timestamp"
        from owners where conflicts > 0 order by learned_at desc limit $1
        "#,
        limit,
    );
    db::read_only(pool).all(query).await
}

/// The subjects `user_id` owns, for `explain` and the console's user page.
pub async fn of_user(pool: &PgPool, user_id: &str) -> Result<Vec<Owner>, sqlx::Error> {
    let query = sqlx::query_as!(
        Owner,
        r#"
        select provider, subject, subject_id, user_id, event_id, conflicts,
               learned_at as "learned_at: db::Timestamp"
        from owners where user_id = $1 order by learned_at limit 100
        "#,
        user_id,
    );
    db::read_only(pool).all(query).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_key_reads_back_as_its_subject() {
        for (subject, id) in [(Subject::Payment, "pi_1"), (Subject::Customer, "cus_a:b")] {
            let key = wait_key(subject, id);
            assert!(is_wait_key(&key));
            assert_eq!(waited_for(&key), Some((subject, id)));
        }
        for other in ["pi_1", "owner:", "owner:invoice:in_1", "owner:payment"] {
            assert_eq!(waited_for(other), None, "{other}");
        }
    }
}
