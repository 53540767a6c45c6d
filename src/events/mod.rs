//! The dedupe ledger (`processed_events`) and the events waiting for a
//! dependency (`deferred_events`): all of their SQL.

use std::collections::HashSet;

use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use crate::db;
use crate::providers::Event;

mod browse;
pub mod erase;
mod expiry;
mod import;
mod outcome;
pub mod partitions;
mod stored;
mod waiting;

pub use browse::{
    Cursor, Deferred, Filter, PrefixCounts, Row, counts_by_outcome, counts_with_prefix, deferred,
    deferred_depth, owner_waits, page,
};
pub use expiry::expire_payloads;
pub use import::{ImportRow, NO_PAYLOAD, import, import_rows, recorded};
pub use outcome::{Outcome, UnknownOutcome};
pub use stored::{Preview, Stored, find, preview};
pub use waiting::{defer, defer_many, knowing_nothing_waits, waiting, waiting_any};

/// An event to claim, with the payload to store for it.
pub struct Claim<'a> {
    pub event: &'a Event,
    pub payload: &'a str,
}

impl<'a> Claim<'a> {
    /// The event with its verified payload.
    pub fn of(event: &'a Event) -> Self {
        Claim {
            event,
            payload: event.stored_payload(),
        }
    }

    /// The event with [`PAYLOAD_NOT_STORED`]: for an event whose payload is
    /// what the database refuses, so that it is still recorded once.
    pub fn without_payload(event: &'a Event) -> Self {
        Claim {
            event,
            payload: PAYLOAD_NOT_STORED,
        }
    }
}

/// What a claim stores in place of a payload the database refused.
pub const PAYLOAD_NOT_STORED: &str =
    r#"{"webhookd": "payload not stored: the database refused it"}"#;

/// An advisory lock to take with the claims: `owner` is the index of the
/// claim it belongs to (taken only when that event is claimed), or `None`
/// to take it in any case. Locks are taken in one global order, `(class,
/// hash of key)`, so no two transactions that lock this way can deadlock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub owner: Option<usize>,
    pub class: i16,
    pub key: String,
}

/// The class of the claims' locks ([`claim_key`]): the first of the global
/// order, so every claim is taken before any other lock.
pub const CLAIM_LOCK_CLASS: i16 = 0;

/// The advisory lock key that claims `provider`'s event `event_id`.
pub fn claim_key(provider: &str, event_id: &str) -> String {
    format!("event:{provider}:{event_id}")
}

/// Claims each event of `claims` not recorded yet and then takes the locks
/// of the events claimed, all in their global order. Returns the indexes of
/// the claims that are new (copies among `claims` claim once, the first),
/// and which of `probes` (`(provider, waits_for)` keys that events may be
/// deferred for) have events waiting, read once every lock is held.
///
/// A claim is the advisory lock of the event's id ([`claim_key`]), not a
/// row: the event's row is written once, with its outcome, at the end of
/// the transaction ([`record_claimed`]). Whether an event is recorded is
/// read by the same statement, in the months a copy of it can be in: from
/// the month of its `created` less a day (`event_month_floor`, [`partitions`])
/// and the legacy partition. When a claim had to wait (a copy of the
/// event was in flight, and its transaction has ended since), the events
/// are read again in a statement of their own, which sees what that copy
/// committed. Every other writer of `processed_events` (an import,
/// webhookd's own events) claims first too ([`take_claims`]), so the read is
/// exact whatever unique index the table has; [`record_claimed`] still
/// checks what it wrote.
/// The probes are read by `deferred_waiting`, with a snapshot taken after
/// the locks: a deferral committed while the statement waited for them is
/// seen.
pub async fn claim_and_lock(
    conn: &mut PgConnection,
    claims: &[Claim<'_>],
    locks: &[Lock],
    probes: &[(&str, &str)],
) -> Result<Claimed, sqlx::Error> {
    let providers: Vec<&str> = claims.iter().map(|c| c.event.provider()).collect();
    let event_ids: Vec<&str> = claims.iter().map(|c| c.event.event_id()).collect();
    let created: Vec<Option<i64>> = claims.iter().map(|c| c.event.created()).collect();
    let claim_keys: Vec<String> = claims
        .iter()
        .map(|c| claim_key(c.event.provider(), c.event.event_id()))
        .collect();
    let lock_owner: Vec<Option<i32>> = locks
        .iter()
        .map(|l| l.owner.map(|o| i32::try_from(o).unwrap_or(i32::MAX)))
        .collect();
    let lock_class: Vec<i16> = locks.iter().map(|l| l.class).collect();
    let lock_key: Vec<&str> = locks.iter().map(|l| l.key.as_str()).collect();
    let probe_providers: Vec<&str> = probes.iter().map(|(provider, _)| *provider).collect();
    let probe_keys: Vec<&str> = probes.iter().map(|(_, key)| *key).collect();
    // The outer select takes the locks in the subquery's (sorted) order:
    // each first without waiting, then, if another transaction holds it,
    // waiting for it, so that a claim that waited is known; the probes
    // depend on what the locks returned, so they are read after them.
    let rows = sqlx::query!(
        r#"
        with input as (
            select * from unnest($1::text[], $2::text[], $7::text[], $10::bigint[]) with ordinality
                as input (provider, event_id, claim_key, created, position)
        ), new as (
            select (min(position) - 1)::int as index, provider, event_id, claim_key
            from input
            where not exists (select from processed_events e
                              where e.provider = input.provider and e.event_id = input.event_id
                                and (e.month >= event_month_floor(input.created)
                                     or e.month = date '1970-01-01'))
            group by provider, event_id, claim_key
        ), lock as (
            select $6::smallint as class, hashtextextended(claim_key, 0) as hash
            from new
            union all
            select class, hashtextextended(key, 0)
            from unnest($3::int[], $4::smallint[], $5::text[]) as lock (owner, class, key)
            where owner is null or owner in (select index from new)
        )
        select new.index as "index!", false as "waited!",
               null::text as "provider?", null::text as "waits_for?"
        from new
        union all
        select -1, locks.waited, waiting.provider, waiting.waits_for
        from (
            select coalesce(bool_or(waited), false) as waited from (
                select case when pg_try_advisory_xact_lock(hash) then false
                            else (select class = $6 from pg_advisory_xact_lock(hash) as waited)
                       end as waited
                from (select distinct class, hash from lock order by class, hash) as sorted
            ) as taken
        ) as locks
        left join lateral (
            select * from deferred_waiting($8::text[], $9::text[], locks.waited)
            where cardinality($9::text[]) > 0
        ) as waiting on true
        "#,
        &providers as &[&str],
        &event_ids as &[&str],
        &lock_owner as &[Option<i32>],
        &lock_class,
        &lock_key as &[&str],
        CLAIM_LOCK_CLASS,
        &claim_keys,
        &probe_providers as &[&str],
        &probe_keys as &[&str],
        &created as &[Option<i64>],
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut waited = false;
    let mut claimed = Vec::with_capacity(rows.len());
    let mut waiting = HashSet::new();
    for row in rows {
        match usize::try_from(row.index) {
            Ok(index) => claimed.push(index),
            Err(_) => {
                waited |= row.waited;
                if let (Some(provider), Some(key)) = (row.provider, row.waits_for) {
                    waiting.insert((provider, key));
                }
            }
        }
    }
    claimed.sort_unstable();
    if waited {
        let recorded = recorded_among(conn, claims, &claimed).await?;
        claimed.retain(|i| !recorded.contains(i));
    }
    Ok(Claimed { claimed, waiting })
}

/// What [`claim_and_lock`] claimed, and what it read of the probes.
#[derive(Debug, Default)]
pub struct Claimed {
    /// The indexes of the claims that are new, in order.
    pub claimed: Vec<usize>,
    /// The probes that have events waiting for them.
    pub waiting: HashSet<(String, String)>,
}

/// Which of `claims[indexes]` are recorded, read by a statement of its own.
async fn recorded_among(
    conn: &mut PgConnection,
    claims: &[Claim<'_>],
    indexes: &[usize],
) -> Result<Vec<usize>, sqlx::Error> {
    let index: Vec<i32> = indexes
        .iter()
        .filter_map(|&i| i32::try_from(i).ok())
        .collect();
    let providers: Vec<&str> = indexes
        .iter()
        .map(|&i| claims[i].event.provider())
        .collect();
    let event_ids: Vec<&str> = indexes
        .iter()
        .map(|&i| claims[i].event.event_id())
        .collect();
    let found = sqlx::query_scalar!(
        r#"
        select input.index as "index!"
        from unnest($1::int[], $2::text[], $3::text[]) as input (index, provider, event_id)
        where exists (select from processed_events e
                      where e.provider = input.provider and e.event_id = input.event_id)
        "#,
        &index,
        &providers as &[&str],
        &event_ids as &[&str],
    )
    .fetch_all(conn)
    .await?;
    Ok(found
        .into_iter()
        .filter_map(|i| usize::try_from(i).ok())
        .collect())
}

/// The `source` column of `event`: the source that received it, unless
/// that is the one named as its provider (`/webhooks/stripe`, a generic
/// source's own) or none (a sweep's).
fn stored_source(event: &Event) -> Option<&str> {
    event.source().filter(|source| *source != event.provider())
}

/// Takes the claims ([`claim_key`]) of `events` (`(provider, event_id)`)
/// in the global order, waiting for any held, and records nothing: for a
/// writer that records events without the engine (an import, webhookd's
/// own events). Whether one is recorded must then be read by a statement
/// of its own, which sees what a copy that held its claim committed. So
/// every writer of `processed_events` claims first, and dedupe never rests
/// on a unique index alone.
async fn take_claims(conn: &mut PgConnection, events: &[(&str, &str)]) -> Result<(), sqlx::Error> {
    let keys: Vec<String> = events.iter().map(|(p, e)| claim_key(p, e)).collect();
    sqlx::query!(
        r#"
        select count(pg_advisory_xact_lock(hash)) as "taken!"
        from (select distinct hashtextextended(key, 0) as hash
              from unnest($1::text[]) as key order by hash) as sorted
        "#,
        &keys,
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// Claims an event webhookd itself raises (a sweep's `webhookd.delivery_gap`),
/// recorded as arriving by sweep. `false`: it was recorded already.
pub async fn claim_own(
    conn: &mut PgConnection,
    provider: &str,
    event_id: &str,
    event_type: &str,
    payload: &Value,
) -> Result<bool, sqlx::Error> {
    take_claims(&mut *conn, &[(provider, event_id)]).await?;
    let result = sqlx::query!(
        r#"
        insert into processed_events
            (provider, event_id, event_type, outcome, payload, received_via)
        select $1, $2, $3, 'pending', $4, 'sweep'
        where not exists (select from processed_events where provider = $1 and event_id = $2)
        on conflict do nothing
        "#,
        provider,
        event_id,
        event_type,
        payload,
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// An event's outcome and the `detail` stored with it.
pub struct Recorded<'a> {
    pub provider: &'a str,
    pub event_id: &'a str,
    pub outcome: Outcome,
    pub detail: &'a Value,
}

/// Writes the rows of claimed events, each with its outcome and `detail`,
/// in one statement. Returns how many were written: fewer than given only
/// if another transaction recorded one of them since its claim without
/// claiming it (no writer of this module does), and the caller must not
/// commit.
pub async fn record_claimed(
    conn: &mut PgConnection,
    claimed: &[(&Claim<'_>, Outcome, &Value)],
) -> Result<u64, sqlx::Error> {
    if claimed.is_empty() {
        return Ok(0);
    }
    let text = |f: for<'a, 'b> fn(&'a Claim<'b>) -> &'a str| {
        claimed.iter().map(|(c, ..)| f(c)).collect::<Vec<_>>()
    };
    let outcomes: Vec<&str> = claimed.iter().map(|(_, o, _)| o.as_str()).collect();
    let details: Vec<Value> = claimed.iter().map(|(.., d)| (*d).clone()).collect();
    let created: Vec<Option<i64>> = claimed.iter().map(|(c, ..)| c.event.created()).collect();
    let source: Vec<Option<&str>> = claimed
        .iter()
        .map(|(c, ..)| stored_source(c.event))
        .collect();
    let optional = |f: for<'a, 'b> fn(&'a Claim<'b>) -> Option<&'a str>| {
        claimed.iter().map(|(c, ..)| f(c)).collect::<Vec<_>>()
    };
    let result = sqlx::query!(
        r#"
        insert into processed_events
            (provider, event_id, event_type, outcome, detail, payload, provider_created_at,
             received_via, source, account, api_version)
        select provider, event_id, event_type, outcome, detail, payload::jsonb, to_timestamp(created),
               received_via, source, account, api_version
        from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::text[],
                    $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[])
            as input (provider, event_id, event_type, outcome, detail, payload, created,
                      received_via, source, account, api_version)
        on conflict do nothing
        "#,
        &text(|c| c.event.provider()) as &[&str],
        &text(|c| c.event.event_id()) as &[&str],
        &text(|c| c.event.event_type()) as &[&str],
        &outcomes as &[&str],
        &details,
        &text(|c| c.payload) as &[&str],
        &created as &[Option<i64>],
        &text(|c| c.event.via().as_str()) as &[&str],
        &source as &[Option<&str>],
        &optional(|c| c.event.account()) as &[Option<&str>],
        &optional(|c| c.event.api_version()) as &[Option<&str>],
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected())
}

/// Records the outcomes of recorded events, in one statement. Their rows
/// move to the current month's partition: what is applied now is kept for
/// the retention from now ([`partitions`]).
pub async fn record_outcomes(
    conn: &mut PgConnection,
    outcomes: &[Recorded<'_>],
) -> Result<(), sqlx::Error> {
    if outcomes.is_empty() {
        return Ok(());
    }
    let providers: Vec<&str> = outcomes.iter().map(|o| o.provider).collect();
    let event_ids: Vec<&str> = outcomes.iter().map(|o| o.event_id).collect();
    let kinds: Vec<&str> = outcomes.iter().map(|o| o.outcome.as_str()).collect();
    let details: Vec<Value> = outcomes.iter().map(|o| o.detail.clone()).collect();
    sqlx::query!(
        r#"
        update processed_events e set outcome = input.outcome, detail = input.detail,
            -- recorded now: kept for the retention from now (events::partitions)
            month = greatest(e.month, (date_trunc('month', now() at time zone 'UTC'))::date)
        from unnest($1::text[], $2::text[], $3::text[], $4::jsonb[])
            as input (provider, event_id, outcome, detail)
        where e.provider = input.provider and e.event_id = input.event_id
        "#,
        &providers as &[&str],
        &event_ids as &[&str],
        &kinds as &[&str],
        &details,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// [`record_outcomes`] of one event.
pub async fn record_outcome(
    conn: &mut PgConnection,
    provider: &str,
    event_id: &str,
    outcome: Outcome,
    detail: &Value,
) -> Result<(), sqlx::Error> {
    let recorded = Recorded {
        provider,
        event_id,
        outcome,
        detail,
    };
    record_outcomes(conn, &[recorded]).await
}

/// Ends the wait of event `event_id`, if it waits: a replay applied it.
pub async fn undefer(
    conn: &mut PgConnection,
    provider: &str,
    event_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "delete from deferred_events where provider = $1 and event_id = $2",
        provider,
        event_id
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A stored event, as it was received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub payload: String,
    /// The source that received it, when not the one named as its
    /// provider (the `source` column).
    pub source: Option<String>,
    /// The connected account whose event it is (the `account` column:
    /// also an account sweep's, whose payload may not name it).
    pub account: Option<String>,
}

/// Removes and returns the events waiting for `waits_for`, oldest event first.
pub async fn take_deferred(
    conn: &mut PgConnection,
    provider: &str,
    waits_for: &str,
) -> Result<Vec<StoredEvent>, sqlx::Error> {
    sqlx::query_as!(
        StoredEvent,
        r#"
        with taken as (
            delete from deferred_events
            where provider = $1 and waits_for = $2
            returning provider, event_id
        )
        select e.provider, e.event_id, e.event_type, e.payload::text as "payload!", e.source,
               e.account
        from taken join processed_events e using (provider, event_id)
        order by e.provider_created_at nulls first, e.event_id
        "#,
        provider,
        waits_for
    )
    .fetch_all(conn)
    .await
}

/// An event waiting for its owner since `since` (Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerWait {
    pub provider: String,
    pub event_id: String,
}

/// The events that have waited for an owner (`waits_for` `owner:…`) since
/// before `cutoff` (Unix seconds), oldest first, at most `limit`.
pub async fn owner_waits_before(
    pool: &PgPool,
    cutoff: i64,
    limit: i64,
) -> Result<Vec<OwnerWait>, sqlx::Error> {
    let query = sqlx::query_as!(
        OwnerWait,
        r#"
        select provider, event_id from deferred_events
        where starts_with(waits_for, 'owner:') and created_at < to_timestamp($1::bigint)
        order by created_at
        limit $2
        "#,
        cutoff,
        limit,
    );
    db::read_only(pool).all(query).await
}

/// An owner's wait taken for good: the event, what it waited for, since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenWait {
    pub event: StoredEvent,
    pub waits_for: String,
    pub since: db::Timestamp,
}

/// Removes the owner's wait of event `event_id`, if it still waits for one
/// (an event that brought the owner may have released it first).
pub async fn take_owner_wait(
    conn: &mut PgConnection,
    provider: &str,
    event_id: &str,
) -> Result<Option<TakenWait>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        with taken as (
            delete from deferred_events
            where provider = $1 and event_id = $2 and starts_with(waits_for, 'owner:')
            returning provider, event_id, waits_for, created_at
        )
        select e.provider, e.event_id, e.event_type, e.payload::text as "payload!", e.source,
               e.account, t.waits_for, t.created_at as "since: db::Timestamp"
        from taken t join processed_events e using (provider, event_id)
        "#,
        provider,
        event_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|row| TakenWait {
        event: StoredEvent {
            provider: row.provider,
            event_id: row.event_id,
            event_type: row.event_type,
            payload: row.payload,
            source: row.source,
            account: row.account,
        },
        waits_for: row.waits_for,
        since: row.since,
    }))
}
