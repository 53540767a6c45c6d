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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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

/// One owner to teach: `subject` `id` of `provider` belongs to `user_id`,
/// as event `event_id` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Teaching<'a> {
    pub provider: &'a str,
    pub subject: Subject,
    pub id: &'a str,
    pub user_id: &'a str,
    pub event_id: &'a str,
}

/// Teaches each of `teachings`, in order: what each found. One statement
/// when no two teach one subject, else one after another. Call with the
/// subjects' locks held ([`lock_key`]).
pub async fn learn<'a>(
    conn: &mut PgConnection,
    teachings: &[Teaching<'a>],
) -> Result<Vec<Learned>, sqlx::Error> {
    let mut learned = Vec::with_capacity(teachings.len());
    for run in db::distinct_runs(teachings, |t| (t.provider, t.subject, t.id)) {
        learned.extend(learn_distinct(conn, run).await?);
    }
    Ok(learned)
}

/// [`learn`] of distinct subjects, in one statement.
async fn learn_distinct(
    conn: &mut PgConnection,
    teachings: &[Teaching<'_>],
) -> Result<Vec<Learned>, sqlx::Error> {
    let column =
        |f: for<'t> fn(&'t Teaching<'_>) -> &'t str| teachings.iter().map(f).collect::<Vec<&str>>();
    // A claim of the same owner writes nothing; another owner's only
    // counts itself. Each row that comes back is its subject's by position.
    let rows = sqlx::query!(
        r#"
        with input as (
            select * from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
                with ordinality as input (provider, subject, subject_id, user_id, event_id, position)
        ), taught as (
            insert into owners as o (provider, subject, subject_id, user_id, event_id)
            select provider, subject, subject_id, user_id, event_id from input order by position
            on conflict (provider, subject, subject_id) do update
                set conflicts = o.conflicts + 1
                where o.user_id <> excluded.user_id
            returning o.provider, o.subject, o.subject_id, o.user_id, o.event_id,
                      (xmax = 0) as inserted
        )
        select (input.position - 1)::int as "index!", taught.user_id as "user_id!",
               taught.event_id as "event_id!", taught.inserted as "inserted!"
        from taught join input using (provider, subject, subject_id)
        "#,
        &column(|t| t.provider) as &[&str],
        &teachings.iter().map(|t| t.subject.as_str()).collect::<Vec<_>>() as &[&str],
        &column(|t| t.id) as &[&str],
        &column(|t| t.user_id) as &[&str],
        &column(|t| t.event_id) as &[&str],
    )
    .fetch_all(conn)
    .await?;
    let mut learned = vec![Learned::Known; teachings.len()];
    for row in rows {
        if let Some(slot) = usize::try_from(row.index)
            .ok()
            .and_then(|i| learned.get_mut(i))
        {
            *slot = match row.inserted {
                true => Learned::New,
                false => Learned::Conflict {
                    kept: row.user_id,
                    kept_by: row.event_id,
                },
            };
        }
    }
    Ok(learned)
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
    Ok(resolve_many(conn, &[(provider, candidates)])
        .await?
        .pop()
        .flatten())
}

/// [`resolve`] of each `(provider, candidates)`, in one statement for all
/// the learned subjects they read (none when each names its owner first).
pub async fn resolve_many(
    conn: &mut PgConnection,
    lists: &[(&str, &[Candidate])],
) -> Result<Vec<Option<String>>, sqlx::Error> {
    // What each list reads: its learned candidates before its first named one.
    let mut wanted: Vec<(&str, Subject, &str)> = Vec::new();
    for (provider, candidates) in lists {
        for candidate in candidates.iter() {
            let Some((subject, id)) = candidate.learned() else {
                break;
            };
            if !wanted.contains(&(provider, subject, id)) {
                wanted.push((provider, subject, id));
            }
        }
    }
    let learned = learned_of(conn, &wanted).await?;
    Ok(lists
        .iter()
        .map(|(provider, candidates)| {
            candidates.iter().find_map(|candidate| match candidate {
                Candidate::Named(user_id) => Some(user_id.clone()),
                learned_one => {
                    let (subject, id) = learned_one.learned()?;
                    learned
                        .iter()
                        .find(|(p, s, i, _)| p == provider && *s == subject && i == id)
                        .map(|(.., user_id)| user_id.clone())
                }
            })
        })
        .collect())
}

/// The owners learned for `wanted` subjects, in one statement (none for
/// none): `(provider, subject, id, user_id)` of those that have one.
async fn learned_of(
    conn: &mut PgConnection,
    wanted: &[(&str, Subject, &str)],
) -> Result<Vec<(String, Subject, String, String)>, sqlx::Error> {
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let providers: Vec<&str> = wanted.iter().map(|(p, ..)| *p).collect();
    let subjects: Vec<&str> = wanted.iter().map(|(_, s, _)| s.as_str()).collect();
    let ids: Vec<&str> = wanted.iter().map(|(.., id)| *id).collect();
    let rows = sqlx::query!(
        r#"
        select (wanted.position - 1)::int as "index!", o.user_id
        from unnest($1::text[], $2::text[], $3::text[]) with ordinality
            as wanted (provider, subject, subject_id, position)
        cross join lateral (
            select user_id from owners o
            where o.provider = wanted.provider and o.subject = wanted.subject
              and o.subject_id = wanted.subject_id
        ) as o
        "#,
        &providers as &[&str],
        &subjects as &[&str],
        &ids as &[&str],
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let (provider, subject, id) = wanted.get(usize::try_from(row.index).ok()?)?;
            Some((
                (*provider).to_owned(),
                *subject,
                (*id).to_owned(),
                row.user_id,
            ))
        })
        .collect())
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
