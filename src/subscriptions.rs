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
    let previous = match stored(conn, next).await? {
        Some((stored, stored_event_time))
            if !may_replace(stored_event_time, &stored.status, event_time, &next.status) =>
        {
            return Ok(Upserted::Superseded {
                stored_event_time,
                stored_status: stored.status,
            });
        }
        Some((stored, _)) => Some(stored),
        None => None,
    };
    write(conn, next, event_time, event_id).await?;
    let unchanged = previous.as_ref().is_some_and(|prev| same_state(prev, next));
    Ok(if unchanged {
        Upserted::Unchanged
    } else {
        Upserted::Changed { previous }
    })
}

/// Gives the subscriptions of `customer_id` that have no owner the owner
/// just learned for that customer. Moves no money and keeps every
/// subscription's state and order.
pub async fn attribute(
    conn: &mut PgConnection,
    provider: &str,
    customer_id: &str,
    user_id: &str,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        r#"
        update subscriptions set user_id = $3
        where provider = $1 and customer_id = $2 and user_id is null
        "#,
        provider,
        customer_id,
        user_id,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The stored state of `next`'s subscription, and the time of the event
/// that wrote it.
async fn stored(
    conn: &mut PgConnection,
    next: &Subscription,
) -> Result<Option<(Subscription, i64)>, sqlx::Error> {
    let stored = sqlx::query!(
        r#"
        select customer_id, user_id, status, plan_id,
               extract(epoch from current_period_end)::bigint as current_period_end,
               extract(epoch from provider_updated_at)::bigint as "event_time!"
        from subscriptions
        where provider = $1 and subscription_id = $2
        "#,
        next.provider,
        next.subscription_id
    )
    .fetch_optional(conn)
    .await?;
    Ok(stored.map(|row| {
        let subscription = Subscription {
            provider: next.provider.clone(),
            subscription_id: next.subscription_id.clone(),
            customer_id: row.customer_id,
            user_id: row.user_id,
            status: row.status,
            plan_id: row.plan_id,
            current_period_end: row.current_period_end,
        };
        (subscription, row.event_time)
    }))
}

/// Stores `next` as of `event_time`. The guard of [`upsert`] is repeated
/// in SQL as belt and braces.
async fn write(
    conn: &mut PgConnection,
    next: &Subscription,
    event_time: i64,
    event_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        insert into subscriptions as s
            (provider, subscription_id, customer_id, user_id, status, plan_id,
             current_period_end, provider_updated_at, event_id)
        values ($1, $2, $3, $4, $5, $6, to_timestamp($7::bigint), to_timestamp($8::bigint), $9)
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
        next.provider,
        next.subscription_id,
        next.customer_id,
        next.user_id,
        next.status,
        next.plan_id,
        next.current_period_end,
        event_time,
        event_id,
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
