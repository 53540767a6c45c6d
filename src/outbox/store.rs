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

/// Writes the rows in order, in one statement; returns each one's id. A
/// message is written once for each sink whose topics take it
/// ([`routes`]), each row that sink's alone; its id here is the first of
/// them, `None` when no sink takes its topic. The dedupe key is
/// `{provider}:{event_id}`: an event writes at most one row per topic and
/// sink, whatever month's partition holds the first, and an event's rows
/// are found by that key (the outbox has no index by event:
/// [`browse::of_event`], `story::timeline`). `None` at an index also: its
/// rows exist already, or it comes earlier in `messages`. Nothing is
/// notified: the ingest transaction wakes the drainers once per commit
/// ([`notify`]). Inside [`handoff::leasing`] the rows of the sink this
/// process drains in memory are written leased to it, their first attempt
/// started, and kept for its drainer.
pub async fn enqueue<'a>(
    conn: &mut PgConnection,
    messages: &[Message<'a>],
) -> Result<Vec<Option<i64>>, sqlx::Error> {
    let column = |f: fn(&Message<'a>) -> &'a str| messages.iter().map(f).collect::<Vec<_>>();
    let payloads: Vec<Value> = messages.iter().map(Message::stored_payload).collect();
    let keys: Vec<Option<&str>> = messages.iter().map(|m| m.ordering_key).collect();
    let lease = handoff::lease();
    let (lease_secs, leased_sink) = match &lease {
        Some(handoff::Lease { secs, sink }) => (Some(*secs), Some(sink.as_str())),
        None => (None, None),
    };
    let rows = sqlx::query!(
        r#"
        with input as (
            select * from unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[])
                with ordinality
                as input (topic, provider, event_id, payload, ordering_key, position)
        ), routed as (
            -- A row for each sink that takes the topic (outbox::store::routes).
            select input.*, s.name as sink, s.name = $7::text as leased
            from input join outbox_sinks s on input.topic like any (s.patterns)
        ), written as (
            insert into outbox
                (topic, dedupe_key, provider, event_id, payload, ordering_key, attempts,
                 locked_until, sink)
            select topic, provider || ':' || event_id, provider, event_id, payload,
                   coalesce(ordering_key, provider || ':' || event_id),
                   case when leased then 1 else 0 end,
                   -- From the insert, not the transaction's start: the
                   -- drainer counts it from here too.
                   case when leased then clock_timestamp() + make_interval(secs => $6::float8) end,
                   sink
            from routed
            -- Unique across months too: every writer of an event's rows
            -- holds that event's locks (its claim, or its effects' for a
            -- replay or a release), so this read is exact. One lookup by
            -- key a row (the limit keeps it one: planned once a connection,
            -- on a new database's empty outbox, an anti join read the whole
            -- outbox each time once it had grown).
            left join lateral (select true as found from outbox o
                               where o.topic = routed.topic
                                 and o.dedupe_key = routed.provider || ':' || routed.event_id
                                 and o.sink = routed.sink
                               limit 1) as seen on true
            where seen.found is null
            order by position, sink
            on conflict do nothing
            returning id, topic, provider, event_id, sink, attempts,
                      case when locked_until is not null then payload::text end as leased_payload,
                      created_at
        )
        select (min(routed.position) - 1)::int as "index!", written.id as "id!",
               min(written.attempts) as "attempts!",
               min(written.leased_payload) as "leased_payload?",
               -- RFC 3339, as the lease gives it; the colons quoted, so that
               -- pgbench (scripts/own-statements.py) reads no variable here.
               to_char(min(written.created_at) at time zone 'UTC',
                       'YYYY-MM-DD"T"HH24":"MI":"SS.US"Z"') as "created_at!"
        from written join routed using (topic, provider, event_id, sink)
        group by written.id
        order by written.id
        "#,
        &column(|m| m.topic) as &[&str],
        &column(|m| m.provider) as &[&str],
        &column(|m| m.event_id) as &[&str],
        &payloads,
        &keys as &[Option<&str>],
        lease_secs,
        leased_sink,
    )
    .fetch_all(conn)
    .await?;
    let mut ids = vec![None; messages.len()];
    let mut leased = Vec::new();
    for row in rows {
        let Some(index) = usize::try_from(row.index).ok().filter(|&i| i < ids.len()) else {
            continue;
        };
        // The first of its rows (by id, as ordered).
        ids[index].get_or_insert(row.id);
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
// Which sinks take which topics.
pub mod routes;

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
    /// The sink it goes to.
    pub sink: String,
    pub provider: String,
    pub event_id: String,
    pub attempts: i32,
    pub state: String,
    pub created_at: Timestamp,
    pub available_at: Timestamp,
    pub last_error: Option<String>,
}

/// Moves the outbox's ids past every id handed out so far, even by a
/// database this one was restored from ([`db::sequence_past_now`]): a row
/// written after a restore never takes the `webhook-id` a receiver saw for
/// another message. Run at each start of `serve` and by `migrate`.
pub async fn ids_past_now(pool: &PgPool) -> Result<(), sqlx::Error> {
    db::sequence_past_now(pool, "outbox_row_id").await
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

impl Depth {
    /// Every sink's of `by_sink` together.
    pub fn total(by_sink: &[(String, Depth)]) -> Depth {
        Depth {
            pending: by_sink.iter().map(|(_, d)| d.pending).sum(),
            oldest_pending_secs: (by_sink.iter())
                .map(|(_, d)| d.oldest_pending_secs)
                .fold(0.0, f64::max),
            dead: by_sink.iter().map(|(_, d)| d.dead).sum(),
        }
    }
}

/// [`depth_by_sink`], every sink together.
pub async fn depth(pool: &PgPool) -> Result<Depth, sqlx::Error> {
    Ok(Depth::total(&depth_by_sink(pool).await?))
}

/// The gauges of each sink: every sink routed now, and any other whose
/// rows are not delivered yet (one removed since), by name.
pub async fn depth_by_sink(pool: &PgPool) -> Result<Vec<(String, Depth)>, sqlx::Error> {
    let rows = db::read_only(pool).all(sqlx::query!(
        r#"
        select coalesce(s.name, o.sink) as "sink!",
               coalesce(o.pending, 0) as "pending!",
               coalesce(o.oldest, 0)::float8 as "oldest!",
               coalesce(o.dead, 0) as "dead!"
        from outbox_sinks s
        full join (
            select sink,
                   count(*) filter (where dead_at is null) as pending,
                   extract(epoch from now() - min(created_at) filter (where dead_at is null)) as oldest,
                   count(*) filter (where dead_at is not null) as dead
            from outbox
            where delivered_at is null
            group by sink
        ) as o on o.sink = s.name
        order by 1
        "#
    )).await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let depth = Depth {
                pending: row.pending,
                oldest_pending_secs: row.oldest,
                dead: row.dead,
            };
            (row.sink, depth)
        })
        .collect())
}
