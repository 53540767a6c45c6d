//! Subscription snapshots, guarded by the EVENT's time so that state never
//! moves backwards: an event strictly older than the stored one changes
//! nothing; on a tie the later arrival applies, except that a terminal status
//! is never replaced by a non-terminal one.

use crate::db::{self, Timestamp};
use sqlx::PgConnection;

/// Statuses after which a subscription does not come back, in any case:
/// statuses are stored as the provider spells them (PayPal's `CANCELLED`,
/// Stripe's `canceled`).
pub const TERMINAL_STATUSES: [&str; 4] = ["canceled", "cancelled", "completed", "expired"];

pub fn is_terminal(status: &str) -> bool {
    TERMINAL_STATUSES
        .iter()
        .any(|terminal| terminal.eq_ignore_ascii_case(status))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub provider: String,
    pub subscription_id: String,
    pub customer_id: Option<String>,
    pub user_id: Option<String>,
    pub status: String,
    pub plan_id: Option<String>,
    /// Unix seconds.
    pub current_period_end: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upserted {
    /// Stored; `previous` is the state it replaced (None: a new subscription).
    Changed { previous: Option<Subscription> },
    /// Newer (or tied) but identical state: only the event time moved.
    Unchanged,
    /// Older than what is stored: nothing changed.
    Superseded {
        stored_event_time: i64,
        stored_status: String,
    },
}

/// Whether an event at `event_time` with `status` may replace the stored
/// state written by an event at `stored_time` with `stored_status`.
pub fn may_replace(stored_time: i64, stored_status: &str, event_time: i64, status: &str) -> bool {
    match event_time.cmp(&stored_time) {
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Greater => true,
        // A terminal status is never replaced by a non-terminal one.
        std::cmp::Ordering::Equal => !is_terminal(stored_status) || is_terminal(status),
    }
}

/// Applies `next` as of `event_time` (Unix seconds) if it is not older than
/// what is stored. Call with the subscription's lock held (the ingest
/// engine takes it), so that the read and the write see one state.
pub async fn upsert(
    conn: &mut PgConnection,
    next: &Subscription,
    event_time: i64,
    event_id: &str,
) -> Result<Upserted, sqlx::Error> {
    let mut upserted = upsert_many(conn, &[(next, event_time, event_id)]).await?;
    upserted
        .pop()
        .ok_or_else(|| sqlx::Error::Protocol("a subscription upsert answered nothing".into()))
}

/// [`upsert`] of each `(next, event_time, event_id)`, in order: two
/// statements when no two are one subscription, else one after another.
pub async fn upsert_many(
    conn: &mut PgConnection,
    nexts: &[(&Subscription, i64, &str)],
) -> Result<Vec<Upserted>, sqlx::Error> {
    if nexts.is_empty() {
        return Ok(Vec::new());
    }
    let mut upserted = Vec::with_capacity(nexts.len());
    for run in db::distinct_runs(nexts, |(next, ..)| (&next.provider, &next.subscription_id)) {
        upserted.extend(upsert_distinct(conn, run).await?);
    }
    Ok(upserted)
}

/// [`upsert_many`] of distinct subscriptions.
async fn upsert_distinct(
    conn: &mut PgConnection,
    nexts: &[(&Subscription, i64, &str)],
) -> Result<Vec<Upserted>, sqlx::Error> {
    let subscriptions: Vec<&Subscription> = nexts.iter().map(|(next, _, _)| *next).collect();
    let stored = stored(conn, &subscriptions).await?;
    let mut upserted = Vec::with_capacity(nexts.len());
    let mut writes = Vec::with_capacity(nexts.len());
    for (&(next, event_time, event_id), stored) in nexts.iter().zip(stored) {
        let previous = match stored {
            Some((stored, stored_event_time))
                if !may_replace(stored_event_time, &stored.status, event_time, &next.status) =>
            {
                upserted.push(Upserted::Superseded {
                    stored_event_time,
                    stored_status: stored.status,
                });
                continue;
            }
            Some((stored, _)) => Some(stored),
            None => None,
        };
        writes.push((next, event_time, event_id));
        let unchanged = previous.as_ref().is_some_and(|prev| same_state(prev, next));
        upserted.push(if unchanged {
            Upserted::Unchanged
        } else {
            Upserted::Changed { previous }
        });
    }
    write(conn, &writes).await?;
    Ok(upserted)
}

/// Gives the subscriptions of each `(provider, customer_id, user_id)`
/// customer that have no owner the owner just learned for that customer,
/// in one statement (none for none). Moves no money and keeps every
/// subscription's state and order. Returns how many it gave.
pub async fn attribute(
    conn: &mut PgConnection,
    customers: &[(&str, &str, &str)],
) -> Result<u64, sqlx::Error> {
    if customers.is_empty() {
        return Ok(0);
    }
    let providers: Vec<&str> = customers.iter().map(|(p, ..)| *p).collect();
    let ids: Vec<&str> = customers.iter().map(|(_, c, _)| *c).collect();
    let owners: Vec<&str> = customers.iter().map(|(.., u)| *u).collect();
    let done = sqlx::query!(
        r#"
        update subscriptions s set user_id = given.user_id
        from unnest($1::text[], $2::text[], $3::text[]) as given (provider, customer_id, user_id)
        where s.provider = given.provider and s.customer_id = given.customer_id
          and s.user_id is null
        "#,
        &providers as &[&str],
        &ids as &[&str],
        &owners as &[&str],
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The time (Unix seconds) of the event that wrote subscription
/// `subscription_id`'s stored state; `None` when none is stored. Read
/// outside any transaction, before one ([`crate::fetch`]'s tie check).
pub async fn event_time(
    pool: &sqlx::PgPool,
    provider: &str,
    subscription_id: &str,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select extract(epoch from provider_updated_at)::bigint as "event_time!"
        from subscriptions where provider = $1 and subscription_id = $2
        "#,
        provider,
        subscription_id,
    )
    .fetch_optional(pool)
    .await
}

/// The stored state of each of `nexts`' subscriptions, and the time of the
/// event that wrote it, in order.
async fn stored(
    conn: &mut PgConnection,
    nexts: &[&Subscription],
) -> Result<Vec<Option<(Subscription, i64)>>, sqlx::Error> {
    let providers: Vec<&str> = nexts.iter().map(|n| n.provider.as_str()).collect();
    let ids: Vec<&str> = nexts.iter().map(|n| n.subscription_id.as_str()).collect();
    let rows = sqlx::query!(
        r#"
        select (wanted.position - 1)::int as "index!", s.customer_id, s.user_id, s.status, s.plan_id,
               extract(epoch from s.current_period_end)::bigint as current_period_end,
               extract(epoch from s.provider_updated_at)::bigint as "event_time!"
        from unnest($1::text[], $2::text[]) with ordinality as wanted (provider, subscription_id, position)
        join subscriptions s
            on s.provider = wanted.provider and s.subscription_id = wanted.subscription_id
        "#,
        &providers as &[&str],
        &ids as &[&str],
    )
    .fetch_all(conn)
    .await?;
    let mut stored: Vec<Option<(Subscription, i64)>> = vec![None; nexts.len()];
    for row in rows {
        let Some((slot, next)) = usize::try_from(row.index)
            .ok()
            .and_then(|i| Some((stored.get_mut(i)?, nexts.get(i)?)))
        else {
            continue;
        };
        let subscription = Subscription {
            provider: next.provider.clone(),
            subscription_id: next.subscription_id.clone(),
            customer_id: row.customer_id,
            user_id: row.user_id,
            status: row.status,
            plan_id: row.plan_id,
            current_period_end: row.current_period_end,
        };
        *slot = Some((subscription, row.event_time));
    }
    Ok(stored)
}

/// Stores each `next` as of its `event_time`, in one statement. The guard
/// of [`upsert`] is repeated in SQL as belt and braces.
async fn write(
    conn: &mut PgConnection,
    nexts: &[(&Subscription, i64, &str)],
) -> Result<(), sqlx::Error> {
    if nexts.is_empty() {
        return Ok(());
    }
    let text =
        |f: fn(&Subscription) -> &str| nexts.iter().map(|(n, _, _)| f(n)).collect::<Vec<_>>();
    let optional = |f: fn(&Subscription) -> Option<&str>| {
        nexts.iter().map(|(n, _, _)| f(n)).collect::<Vec<_>>()
    };
    let period_ends: Vec<Option<i64>> =
        nexts.iter().map(|(n, _, _)| n.current_period_end).collect();
    let times: Vec<i64> = nexts.iter().map(|(_, time, _)| *time).collect();
    let events: Vec<&str> = nexts.iter().map(|(_, _, event_id)| *event_id).collect();
    sqlx::query!(
        r#"
        insert into subscriptions as s
            (provider, subscription_id, customer_id, user_id, status, plan_id,
             current_period_end, provider_updated_at, event_id)
        select provider, subscription_id, customer_id, user_id, status, plan_id,
               to_timestamp(period_end), to_timestamp(event_time), event_id
        from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                    $7::bigint[], $8::bigint[], $9::text[])
            as input (provider, subscription_id, customer_id, user_id, status, plan_id,
                      period_end, event_time, event_id)
        on conflict (provider, subscription_id) do update set
            customer_id = coalesce(excluded.customer_id, s.customer_id),
            user_id = coalesce(excluded.user_id, s.user_id),
            status = excluded.status,
            plan_id = coalesce(excluded.plan_id, s.plan_id),
            current_period_end = coalesce(excluded.current_period_end, s.current_period_end),
            provider_updated_at = excluded.provider_updated_at,
            event_id = excluded.event_id,
            updated_at = now()
        where s.provider_updated_at <= excluded.provider_updated_at
        "#,
        &text(|n| n.provider.as_str()) as &[&str],
        &text(|n| n.subscription_id.as_str()) as &[&str],
        &optional(|n| n.customer_id.as_deref()) as &[Option<&str>],
        &optional(|n| n.user_id.as_deref()) as &[Option<&str>],
        &text(|n| n.status.as_str()) as &[&str],
        &optional(|n| n.plan_id.as_deref()) as &[Option<&str>],
        &period_ends as &[Option<i64>],
        &times,
        &events as &[&str],
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Whether `next` says nothing new of `previous`: the same status, and
/// each field it carries (the others are kept) the same.
fn same_state(previous: &Subscription, next: &Subscription) -> bool {
    previous.status == next.status
        && next
            .plan_id
            .as_ref()
            .is_none_or(|p| previous.plan_id.as_ref() == Some(p))
        && next
            .current_period_end
            .is_none_or(|e| previous.current_period_end == Some(e))
        && next
            .customer_id
            .as_ref()
            .is_none_or(|c| previous.customer_id.as_ref() == Some(c))
        && next
            .user_id
            .as_ref()
            .is_none_or(|u| previous.user_id.as_ref() == Some(u))
}

/// A subscription row as the console shows it.
#[derive(Debug, Clone)]
pub struct Row {
    pub provider: String,
    pub subscription_id: String,
    pub user_id: Option<String>,
    pub status: String,
    pub plan_id: Option<String>,
    pub current_period_end: Option<Timestamp>,
    /// The event whose state is stored.
    pub event_id: String,
    pub updated_at: Timestamp,
}

/// The user's subscriptions, or those whose stored state came from one
/// event (`Some((provider, event_id))`), newest first.
pub async fn rows(
    pool: &sqlx::PgPool,
    user_id: Option<&str>,
    event: Option<(&str, &str)>,
) -> Result<Vec<Row>, sqlx::Error> {
    let (provider, event_id) = event.unzip();
    db::read_only(pool).all(sqlx::query_as!(
        Row,
        r#"
        select provider as "provider!", subscription_id as "subscription_id!", user_id, status as "status!",
               plan_id,
               current_period_end as "current_period_end: Timestamp",
               event_id as "event_id!",
               updated_at as "updated_at!: Timestamp"
        from subscriptions
        where user_id = $1
        union all
        select provider, subscription_id, user_id, status, plan_id,
               current_period_end,
               event_id,
               updated_at
        from subscriptions
        where provider = $2 and event_id = $3
        order by 8 desc, 1, 2
        limit 200
        "#,
        user_id,
        provider,
        event_id,
    )).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_events_never_replace_newer_state() {
        assert!(!may_replace(100, "active", 99, "active"));
        assert!(!may_replace(100, "past_due", 99, "canceled"));
        assert!(may_replace(100, "active", 101, "past_due"));
    }

    #[test]
    fn on_a_tie_the_later_arrival_wins_unless_it_would_undo_a_terminal_status() {
        assert!(may_replace(100, "active", 100, "past_due"));
        assert!(may_replace(100, "active", 100, "canceled"));
        assert!(may_replace(100, "canceled", 100, "canceled"));
        assert!(!may_replace(100, "canceled", 100, "active"));
        assert!(!may_replace(100, "CANCELLED", 100, "ACTIVE"));
        assert!(may_replace(100, "ACTIVE", 100, "EXPIRED"));
        assert!(!may_replace(100, "expired", 100, "active"));
    }
}
