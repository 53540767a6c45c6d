//! Reading and re-queueing rows by filter, as the console does: pending or
//! dead rows by topic, sink and error text, keyset-paginated by id, and a bulk
//! retry that first counts what it would touch.

use crate::db::{self, Timestamp};
use sqlx::PgPool;

use super::Listed;

/// Which undelivered rows: `dead`, `pending` (leased ones included), or
/// both when `state` is `None`.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub dead: Option<bool>,
    pub topic: Option<String>,
    /// Rows of this sink only.
    pub sink: Option<String>,
    /// Rows whose last error contains this text, ignoring case.
    pub error: Option<String>,
}

/// Up to `limit` undelivered rows matching `filter`, oldest first, after
/// id `after` when given.
pub async fn page(
    pool: &PgPool,
    filter: &Filter,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<Listed>, sqlx::Error> {
    db::read_only(pool)
        .all(sqlx::query_as!(
            Listed,
            r#"
        select id, topic, sink, provider, event_id, attempts,
               case when dead_at is not null then 'dead'
                    when locked_until > now() then 'leased'
                    else 'pending' end as "state!",
               created_at as "created_at!: Timestamp",
               available_at as "available_at!: Timestamp",
               last_error
        from outbox
        where delivered_at is null
          and id > coalesce($4::bigint, 0)
          and ($1::bool is null or (dead_at is not null) = $1)
          and ($2::text is null or topic = $2)
          and ($3::text is null or strpos(lower(coalesce(last_error, '')), lower($3)) > 0)
          and ($6::text is null or sink = $6)
        order by id
        limit $5
        "#,
            filter.dead,
            filter.topic,
            filter.error,
            after,
            limit,
            filter.sink,
        ))
        .await
}

/// The rows of one event, delivered or not, oldest first. The outbox has
/// no index by event (every event writes a row and every delivery updates
/// it: an index costs ingest twice), but its `(topic, dedupe_key)` key holds
/// `{provider}:{event_id}` under each topic ([`super::enqueue`]): the
/// topics are read off that index one step each (a skip scan, a handful of
/// probes) and the event's row looked up under each.
pub async fn of_event(
    pool: &PgPool,
    provider: &str,
    event_id: &str,
) -> Result<Vec<Listed>, sqlx::Error> {
    db::read_only(pool)
        .all(sqlx::query_as!(
            Listed,
            r#"
        with recursive topics (topic) as (
            select min(topic) from outbox
            union all
            select (select min(o.topic) from outbox o where o.topic > t.topic)
            from topics t where t.topic is not null
        )
        select o.id, o.topic, o.sink, o.provider, o.event_id, o.attempts,
               case when o.delivered_at is not null then 'delivered'
                    when o.dead_at is not null then 'dead'
                    when o.locked_until > now() then 'leased'
                    else 'pending' end as "state!",
               o.created_at as "created_at!: Timestamp",
               coalesce(o.delivered_at, o.dead_at, o.available_at) as "available_at!: Timestamp",
               o.last_error
        from topics t
        join outbox o on o.topic = t.topic and o.dedupe_key = $1 || ':' || $2
        where o.provider = $1 and o.event_id = $2
        order by o.id
        "#,
            provider,
            event_id,
        ))
        .await
}

/// What a bulk retry of `filter`'s dead rows would touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    pub count: i64,
    /// The highest id counted.
    pub max_id: Option<i64>,
    /// When it was counted (the database's clock, to the microsecond): the
    /// confirmed retry takes only rows dead by then, so rows that die after
    /// the count are not swept in unseen, whatever their id.
    pub as_of: String,
}

pub async fn count_dead(pool: &PgPool, filter: &Filter) -> Result<Counted, sqlx::Error> {
    let row = db::read_only(pool).one(sqlx::query!(
        r#"
        select count(*) as "count!", max(id) as max_id, now() as "as_of!: Timestamp"
        from outbox
        where dead_at is not null and delivered_at is null
          and ($1::text is null or topic = $1)
          and ($2::text is null or strpos(lower(coalesce(last_error, '')), lower($2)) > 0)
          and ($3::text is null or sink = $3)
        "#,
        filter.topic,
        filter.error,
        filter.sink,
    ));
    let row = row.await?;
    Ok(Counted {
        count: row.count,
        max_id: row.max_id,
        as_of: row.as_of.micros(),
    })
}

/// Which dead rows a retry takes besides the filter: one row, rows up to
/// an id, rows dead by a time (RFC 3339, as [`Counted::as_of`]).
#[derive(Debug, Clone, Default)]
pub struct Bound<'a> {
    pub id: Option<i64>,
    pub max_id: Option<i64>,
    pub dead_by: Option<&'a str>,
}

/// Re-queues the dead rows matching `filter` and `bound` for a fresh set
/// of attempts; `attempts` keeps counting. Returns the ids re-queued.
pub async fn retry_dead_matching(
    pool: &PgPool,
    filter: &Filter,
    bound: &Bound<'_>,
) -> Result<Vec<i64>, sqlx::Error> {
    let mut tx = db::begin(pool).await?;
    let answer = sqlx::query_scalar!(
        r#"
        update outbox
        set dead_at = null, requeued_attempts = attempts, available_at = now(), locked_until = null
        where dead_at is not null and delivered_at is null and erased_at is null
          and ($3::bigint is null or id = $3)
          and ($4::bigint is null or id <= $4)
          and ($5::text is null or dead_at <= $5::text::timestamptz)
          and ($1::text is null or topic = $1)
          and ($2::text is null or strpos(lower(coalesce(last_error, '')), lower($2)) > 0)
          and ($6::text is null or sink = $6)
        returning id
        "#,
        filter.topic,
        filter.error,
        bound.id,
        bound.max_id,
        bound.dead_by,
        filter.sink,
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(answer)
}

/// One failed delivery attempt.
#[derive(Debug, Clone)]
pub struct FailedAttempt {
    pub outbox_id: i64,
    pub attempt: i32,
    pub at: Timestamp,
    /// `retry` or `dead`.
    pub outcome: String,
    pub error: String,
}

/// The failed attempts of the rows `ids` (an event's: [`of_event`]), in
/// order, the first 1,000.
pub async fn failed_attempts(
    pool: &PgPool,
    ids: &[i64],
) -> Result<Vec<FailedAttempt>, sqlx::Error> {
    let query = sqlx::query_as!(
        FailedAttempt,
        r#"
        select outbox_id, attempt,
               at as "at!: Timestamp",
               outcome, error
        from outbox_attempts
        where outbox_id = any($1::int8[])
        order by outbox_id, attempt
        limit 1000
        "#,
        ids,
    );
    db::read_only(pool).all(query).await
}

/// The rows of the events whose id starts with `id_prefix` (a drill's
/// run), per topic.
pub async fn topics_with_prefix(
    pool: &PgPool,
    id_prefix: &str,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let query = sqlx::query!(
        r#"
        select topic, count(*) as "n!" from outbox
        where starts_with(event_id, $1) group by topic order by topic
        "#,
        id_prefix,
    );
    let rows = db::read_only(pool).all(query).await?;
    Ok(rows.into_iter().map(|r| (r.topic, r.n)).collect())
}
