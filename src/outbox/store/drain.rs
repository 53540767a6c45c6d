//! The drainer's SQL: one statement leases a batch of due rows (bounded by
//! count and by payload bytes), one records the outcomes of many deliveries.

use crate::db;
use sqlx::PgPool;

use crate::sinks::Message;

/// A row leased for delivery. `message.attempts` counts this attempt; the
/// outcome is recorded against `(id, attempts)`, so a delivery whose lease
/// expired and was taken over cannot overwrite the newer attempt's outcome.
#[derive(Debug, Clone)]
pub struct Leased {
    pub message: Message,
    /// `attempts` when the row was last re-queued from the dead letters: the
    /// retry budget counts from there.
    pub requeued_attempts: i32,
}

/// A row the lease dead-lettered instead of leasing: every attempt of its
/// budget was started and the last one never reported back (the drainer
/// died or lost its lease during delivery), so it is not tried again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abandoned {
    pub id: i64,
    pub attempts: i32,
    /// Its `last_error` now.
    pub error: String,
}

/// What one lease statement took.
#[derive(Debug, Default)]
pub struct Lease {
    pub rows: Vec<Leased>,
    pub abandoned: Vec<Abandoned>,
    /// Rows that were due and not locked, up to the row limit: more than
    /// were taken when the byte budget stopped the lease.
    pub due: i64,
    /// Seconds until the next row that is not due yet becomes due.
    pub next_due_secs: Option<f64>,
}

/// How much one lease may take: at most `rows` rows whose payloads (as JSON
/// text) add up to at most `bytes`, except that with `oversized` a first row
/// larger than `bytes` is taken alone, so that no row is too big to lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub rows: i64,
    pub bytes: i64,
    pub oversized: bool,
}

/// How rows are leased, whatever the budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Terms {
    pub lease_secs: f64,
    pub max_attempts: i32,
    /// Only the oldest undelivered row of each ordering key is due.
    pub ordered: bool,
}

/// Leases due rows of `sink` for `lease_secs`, oldest first, within `budget`: one
/// statement picks them with `for update skip locked`, bumps `attempts`,
/// sets `locked_until`, and commits. A row whose budget of `max_attempts`
/// is spent (see [`Abandoned`]) is dead-lettered by the same statement.
/// `now` is Unix seconds, or `None` for the database's clock.
pub async fn lease(
    pool: &PgPool,
    sink: &str,
    budget: Budget,
    terms: Terms,
    now: Option<f64>,
) -> Result<Lease, sqlx::Error> {
    let mut tx = db::begin(pool).await?;
    let rows = sqlx::query_as!(
        LeaseRow,
        r#"
        with clock as (select coalesce(to_timestamp($3::float8), now()) as now),
        due as (
            select o.id, o.available_at,
                   o.attempts - o.requeued_attempts >= $5 as spent,
                   coalesce(o.payload_bytes, octet_length(o.payload::text))::int8 as bytes
            from outbox o, clock
            where o.sink = $8 and o.delivered_at is null and o.dead_at is null
              and o.available_at <= clock.now
              and (o.locked_until is null or o.locked_until <= clock.now)
              -- Ordered: only the oldest undelivered row of its key.
              and (not $7 or o.ordering_key is null or not exists (
                  select 1 from outbox older
                  where older.ordering_key = o.ordering_key and older.id < o.id
                    and older.sink = o.sink
                    and older.delivered_at is null and older.dead_at is null))
            order by o.available_at, o.id
            limit $1
            for update of o skip locked
        ),
        sized as (
            select id, spent, bytes,
                   (sum(case when spent then 0 else bytes end) over (order by available_at, id))::int8 as running
            from due
        ),
        chosen as (
            select id, spent from sized
            where spent or running <= $4::int8 or ($6 and running = bytes)
        ),
        leased as (
            update outbox o
            set attempts = case when c.spent then o.attempts else o.attempts + 1 end,
                locked_until = case when c.spent then null
                                    else clock.now + make_interval(secs => $2) end,
                dead_at = case when c.spent then clock.now end,
                last_error = case when c.spent
                    then format('gave up after %s attempts: the last one never reported back '
                                '(the drainer died or lost its lease during delivery)%s',
                                o.attempts - o.requeued_attempts,
                                '; last error: ' || o.last_error)
                    else o.last_error end
            from chosen c, clock
            where o.id = c.id
            returning o.id, o.topic, o.provider, o.event_id, o.attempts, o.requeued_attempts,
                      c.spent, o.last_error,
                      case when c.spent then null else o.payload::text end as payload,
                      (select p.event_type from processed_events p
                       where p.provider = o.provider and p.event_id = o.event_id) as event_type,
                      to_char(o.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as created_at,
                      o.available_at
        )
        select l.id as "id?", l.topic as "topic?", l.provider as "provider?",
               l.event_id as "event_id?", l.attempts as "attempts?",
               l.requeued_attempts as "requeued_attempts?", l.spent as "spent?",
               l.last_error as "last_error?", l.payload as "payload?",
               l.event_type as "event_type?", l.created_at as "created_at?",
               (select count(*) from due) as "due!",
               (select extract(epoch from min(n.available_at) - (select now from clock))::float8
                from outbox n
                where n.sink = $8 and n.delivered_at is null and n.dead_at is null
                  and n.available_at > (select now from clock)) as "next_due_secs?"
        from (select 1) as one left join leased l on true
        order by l.available_at, l.id
        "#,
        budget.rows,
        terms.lease_secs,
        now,
        budget.bytes,
        terms.max_attempts,
        budget.oversized,
        terms.ordered,
        sink,
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Lease::from(rows))
}

/// One row of the lease statement's answer: a leased row and the lease's
/// summary, or only the summary when nothing was leased.
struct LeaseRow {
    id: Option<i64>,
    topic: Option<String>,
    provider: Option<String>,
    event_id: Option<String>,
    attempts: Option<i32>,
    requeued_attempts: Option<i32>,
    spent: Option<bool>,
    last_error: Option<String>,
    payload: Option<String>,
    event_type: Option<String>,
    created_at: Option<String>,
    due: i64,
    next_due_secs: Option<f64>,
}

impl From<Vec<LeaseRow>> for Lease {
    fn from(rows: Vec<LeaseRow>) -> Self {
        let mut lease = Lease::default();
        for row in rows {
            lease.due = row.due;
            lease.next_due_secs = row.next_due_secs;
            let (Some(id), Some(attempts)) = (row.id, row.attempts) else {
                continue;
            };
            if row.spent == Some(true) {
                lease.abandoned.push(Abandoned {
                    id,
                    attempts,
                    error: row.last_error.unwrap_or_default(),
                });
                continue;
            }
            lease.rows.push(Leased {
                message: Message {
                    id,
                    topic: row.topic.unwrap_or_default(),
                    provider: row.provider.unwrap_or_default(),
                    event_id: row.event_id.unwrap_or_default(),
                    event_type: row.event_type,
                    payload: row.payload.unwrap_or_default(),
                    attempts,
                    created_at: row.created_at.unwrap_or_default(),
                },
                requeued_attempts: row.requeued_attempts.unwrap_or_default(),
            });
        }
        lease
    }
}

/// What became of one leased row.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    Delivered,
    /// Try again `after_secs` from now.
    Retry {
        after_secs: f64,
        error: String,
    },
    /// Given up: kept, listed and re-queueable.
    Dead {
        error: String,
    },
    /// Never started (shutting down, or too little lease left): given back,
    /// due again at once, the attempt not spent.
    Released,
}

/// The outcome of attempt `attempts` of row `id`.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub id: i64,
    pub attempts: i32,
    pub attempt: Attempt,
}

/// Records many outcomes in one statement; returns the ids recorded. A row
/// missing from the answer was leased again since (our lease expired), or
/// re-queued from the dead letters after that attempt: nothing of it is
/// overwritten. Each failed attempt is also kept, with its
/// error, in `outbox_attempts`.
pub async fn record_many(
    pool: &PgPool,
    settled: &[Settled],
    now: Option<f64>,
) -> Result<Vec<i64>, sqlx::Error> {
    let mut ids = Vec::with_capacity(settled.len());
    let mut attempts = Vec::with_capacity(settled.len());
    let mut outcomes = Vec::with_capacity(settled.len());
    let mut after_secs = Vec::with_capacity(settled.len());
    let mut errors = Vec::with_capacity(settled.len());
    for s in settled {
        let (outcome, after, error) = match &s.attempt {
            Attempt::Delivered => ("delivered", 0.0, None),
            Attempt::Retry { after_secs, error } => ("retry", *after_secs, Some(error.as_str())),
            Attempt::Dead { error } => ("dead", 0.0, Some(error.as_str())),
            Attempt::Released => ("released", 0.0, None),
        };
        ids.push(s.id);
        attempts.push(s.attempts);
        outcomes.push(outcome);
        after_secs.push(after);
        errors.push(error);
    }
    let mut tx = db::begin(pool).await?;
    let answer = sqlx::query_scalar!(
        r#"
        with clock as (select coalesce(to_timestamp($6::float8), now()) as now),
        settled as (
            select * from unnest($1::int8[], $2::int4[], $3::text[], $4::float8[], $5::text[])
                as s(id, attempts, outcome, after_secs, error)
        ),
        recorded as (
            update outbox o
            set delivered_at = case when s.outcome = 'delivered' then clock.now end,
                dead_at = case when s.outcome = 'dead' then clock.now end,
                available_at = case when s.outcome = 'retry'
                                    then clock.now + make_interval(secs => s.after_secs)
                                    else o.available_at end,
                last_error = case when s.outcome = 'released' then o.last_error else s.error end,
                attempts = case when s.outcome = 'released' then o.attempts - 1 else o.attempts end,
                locked_until = null
            from settled s, clock
            where o.id = s.id and o.attempts = s.attempts
              and o.delivered_at is null and o.dead_at is null
              -- Never an attempt from before the row was re-queued: a
              -- straggling report must not settle a fresh set of attempts.
              and s.attempts > o.requeued_attempts
            returning o.id, s.attempts, o.month
        ),
        failed as (
            -- Only the attempts the update applied: a batch may also hold an
            -- older attempt of a row leased again since.
            -- In its row's month: the two go together (outbox::store::retire).
            insert into outbox_attempts (outbox_id, attempt, at, outcome, error, month)
            select s.id, s.attempts, clock.now, s.outcome, coalesce(s.error, ''), r.month
            from settled s join recorded r on r.id = s.id and r.attempts = s.attempts, clock
            where s.outcome in ('retry', 'dead')
            on conflict do nothing
        )
        select id as "id!" from recorded
        "#,
        &ids,
        &attempts,
        &outcomes as &[&str],
        &after_secs,
        &errors as &[Option<&str>],
        now,
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(answer)
}

/// Records the outcome of attempt `attempts` of row `id` ([`record_many`]
/// of one). `false` when the row was leased again since.
pub async fn record(
    pool: &PgPool,
    id: i64,
    attempts: i32,
    attempt: &Attempt,
    now: Option<f64>,
) -> Result<bool, sqlx::Error> {
    let settled = Settled {
        id,
        attempts,
        attempt: attempt.clone(),
    };
    Ok(!record_many(pool, &[settled], now).await?.is_empty())
}
