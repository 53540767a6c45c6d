//! All outbox SQL.

use super::handoff;
use crate::db::{self, Timestamp};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};

/// An outbox row to write: `topic`'s message about event `event_id`.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    pub topic: &'a str,
    pub provider: &'a str,
    pub event_id: &'a str,
    /// The type of that event, for the delivery (`None`: no event's).
    pub event_type: Option<&'a str>,
    pub payload: &'a Value,
    /// The rows delivered in enqueue order among themselves when ordered
    /// delivery is on (`WEBHOOKD_OUTBOX_ORDER=key`); `None`: the event's own
    /// (`{provider}:{event_id}`).
    pub ordering_key: Option<&'a str>,
    /// The connected account whose event it is (Stripe Connect): written
    /// into the payload as `account`, unless the payload names one itself.
    pub account: Option<&'a str>,
}

impl Message<'_> {
    /// The payload to store: [`Message::payload`], with its `account`.
    fn stored_payload(&self) -> Value {
        let mut payload = self.payload.clone();
        if let (Some(account), Value::Object(fields)) = (self.account, &mut payload) {
            fields
                .entry("account")
                .or_insert_with(|| Value::from(account));
        }
        payload
    }
}

/// Writes the rows in order, in one statement; returns each one's id. The
/// dedupe key is `{provider}:{event_id}`: an event writes at most one row
/// per topic, whatever month's partition holds the first, and an event's rows are found by that key (the outbox has no
/// index by event: [`browse::of_event`], `story::timeline`). `None` at an
/// index: a row with its key exists already, or comes earlier in
/// `messages`. Nothing is notified: the ingest transaction wakes the
/// drainer once per commit ([`notify`]). Inside [`handoff::leasing`] the
/// rows are written leased to this process, their first attempt started,
/// and kept for its drainer.
pub async fn enqueue<'a>(
    conn: &mut PgConnection,
    messages: &[Message<'a>],
) -> Result<Vec<Option<i64>>, sqlx::Error> {
    let column = |f: fn(&Message<'a>) -> &'a str| messages.iter().map(f).collect::<Vec<_>>();
    let payloads: Vec<Value> = messages.iter().map(Message::stored_payload).collect();
    let keys: Vec<Option<&str>> = messages.iter().map(|m| m.ordering_key).collect();
    let lease_secs = handoff::lease_secs();
    let rows = sqlx::query!(
        r#"
        with input as (
            select * from unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[])
                with ordinality
                as input (topic, provider, event_id, payload, ordering_key, position)
        ), written as (
            insert into outbox
                (topic, dedupe_key, provider, event_id, payload, ordering_key, attempts, locked_until)
            select topic, provider || ':' || event_id, provider, event_id, payload,
                   coalesce(ordering_key, provider || ':' || event_id),
                   case when $6::float8 is null then 0 else 1 end,
                   -- From the insert, not the transaction's start: the
                   -- drainer counts it from here too.
                   clock_timestamp() + make_interval(secs => $6::float8)
            from input
            -- Unique across months too: every writer of an event's rows
            -- holds that event's locks (its claim, or its effects' for a
            -- replay or a release), so this read is exact.
            where not exists (select from outbox o
                              where o.topic = input.topic
                                and o.dedupe_key = input.provider || ':' || input.event_id)
            order by position
            on conflict do nothing
            returning id, topic, provider, event_id, attempts,
                      case when $6::float8 is not null then payload::text end as leased_payload,
                      created_at
        )
        select (min(input.position) - 1)::int as "index!", written.id as "id!",
               min(written.attempts) as "attempts!",
               min(written.leased_payload) as "leased_payload?",
               -- RFC 3339, as the lease gives it; the colons quoted, so that
               -- pgbench (scripts/own-statements.py) reads no variable here.
               to_char(min(written.created_at) at time zone 'UTC',
                       'YYYY-MM-DD"T"HH24":"MI":"SS.US"Z"') as "created_at!"
        from written join input using (topic, provider, event_id)
        group by written.id
        "#,
        &column(|m| m.topic) as &[&str],
        &column(|m| m.provider) as &[&str],
        &column(|m| m.event_id) as &[&str],
        &payloads,
        &keys as &[Option<&str>],
        lease_secs,
    )
    .fetch_all(conn)
    .await?;
    let mut ids = vec![None; messages.len()];
    let mut leased = Vec::new();
    for row in rows {
        let Some(index) = usize::try_from(row.index).ok().filter(|&i| i < ids.len()) else {
            continue;
        };
        ids[index] = Some(row.id);
        if let Some(payload) = row.leased_payload {
            let message = &messages[index];
            leased.push(crate::sinks::Message {
                id: row.id,
                topic: message.topic.to_owned(),
                provider: message.provider.to_owned(),
                event_id: message.event_id.to_owned(),
                event_type: message.event_type.map(str::to_owned),
                payload,
                attempts: row.attempts,
                created_at: row.created_at,
            });
        }
    }
    handoff::keep(leased);
    Ok(ids)
}

/// [`enqueue`] of one row.
pub async fn enqueue_one(
    conn: &mut PgConnection,
    message: Message<'_>,
) -> Result<Option<i64>, sqlx::Error> {
    Ok(enqueue(conn, &[message]).await?.pop().flatten())
}

/// Wakes drainers in other processes at commit (`LISTEN`): once per
/// transaction, never per row.
pub async fn notify(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "select pg_notify($1, '') as \"notified!: ()\"",
        super::CHANNEL
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

// The console's reads and its bulk retry.
pub mod browse;
pub mod erase;
pub mod retention;

// The drainer's statements: lease and record.
mod drain;
pub use drain::{
    Abandoned, Attempt, Budget, Lease, Leased, Settled, Terms, lease, record, record_many,
};

/// One row as `webhookd outbox list` shows it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub id: i64,
    pub topic: String,
    pub provider: String,
    pub event_id: String,
    pub attempts: i32,
    pub state: String,
    pub created_at: Timestamp,
    pub available_at: Timestamp,
    pub last_error: Option<String>,
}

/// Rows not delivered yet (pending or dead), or only the dead ones, oldest
/// first: the console's first page of that filter.
pub async fn list(pool: &PgPool, dead_only: bool, limit: i64) -> Result<Vec<Listed>, sqlx::Error> {
    let filter = browse::Filter {
        dead: dead_only.then_some(true),
        ..browse::Filter::default()
    };
    browse::page(pool, &filter, None, limit).await
}

/// Re-queues dead rows (`id`, or all of them with `None`) for a fresh set of
/// attempts; `attempts` keeps counting. Returns the ids re-queued.
pub async fn retry_dead(pool: &PgPool, id: Option<i64>) -> Result<Vec<i64>, sqlx::Error> {
    let bound = browse::Bound {
        id,
        ..browse::Bound::default()
    };
    browse::retry_dead_matching(pool, &browse::Filter::default(), &bound).await
}

/// Gauges for monitoring: rows waiting, the age of the oldest, rows dead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Depth {
    pub pending: i64,
    pub oldest_pending_secs: f64,
    pub dead: i64,
}

pub async fn depth(pool: &PgPool) -> Result<Depth, sqlx::Error> {
    let row = db::read_only(pool).one(sqlx::query!(
        r#"
        select count(*) filter (where dead_at is null) as "pending!",
               coalesce(extract(epoch from now() - min(created_at) filter (where dead_at is null)), 0)::float8
                   as "oldest!",
               count(*) filter (where dead_at is not null) as "dead!"
        from outbox
        where delivered_at is null
        "#
    )).await?;
    Ok(Depth {
        pending: row.pending,
        oldest_pending_secs: row.oldest,
        dead: row.dead,
    })
}
