//! Reading the recorded events page by page, as the console shows them:
//! newest first, filtered, keyset-paginated (no OFFSET, so the thousandth
//! page costs what the first does), and found by what they name.

use sqlx::PgPool;

use super::Outcome;
use crate::db::{self, Timestamp};

/// Which events a page shows. Every field is optional.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub provider: Option<String>,
    pub event_type: Option<String>,
    pub outcome: Option<String>,
    /// `webhook`, `sweep`, `replay` or `import`.
    pub received_via: Option<String>,
    /// Received at or after (Unix seconds).
    pub from: Option<f64>,
    /// Received before (Unix seconds).
    pub to: Option<f64>,
    /// An event id, user id, payment or refund id, or subscription id: the
    /// events `related_events` finds for it.
    pub q: Option<String>,
}

/// Where a page starts: just after (older than) this event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// `received_at` in UTC to the microsecond, `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
    pub received_at: String,
    pub provider: String,
    pub event_id: String,
}

impl Cursor {
    /// A cursor from the network, checked before it reaches SQL: the time
    /// must be exactly the shape [`page`] writes.
    pub fn new(received_at: &str, provider: &str, event_id: &str) -> Option<Self> {
        let shape = received_at.len() == 27
            && received_at.char_indices().all(|(i, c)| match i {
                4 | 7 => c == '-',
                10 => c == 'T',
                13 | 16 => c == ':',
                19 => c == '.',
                26 => c == 'Z',
                _ => c.is_ascii_digit(),
            });
        shape.then(|| Cursor {
            received_at: received_at.to_owned(),
            provider: provider.to_owned(),
            event_id: event_id.to_owned(),
        })
    }
}

/// One event of a page.
#[derive(Debug, Clone)]
pub struct Row {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub outcome: Outcome,
    pub received_via: String,
    /// To the millisecond, for people.
    pub received_at: String,
    /// To the microsecond, for the next page's [`Cursor`].
    pub cursor_at: String,
}

/// A [`Row`] as read.
struct Listed {
    provider: String,
    event_id: String,
    event_type: String,
    outcome: Outcome,
    received_via: String,
    received_at: Timestamp,
}

impl From<Listed> for Row {
    fn from(row: Listed) -> Self {
        Row {
            provider: row.provider,
            event_id: row.event_id,
            event_type: row.event_type,
            outcome: row.outcome,
            received_via: row.received_via,
            received_at: row.received_at.millis(),
            cursor_at: row.received_at.micros(),
        }
    }
}

/// How many related events make a search walk the newest events first
/// ([`page`]).
const WALKED_RELATED: i64 = 5_000;

/// How many of the newest events that walk reads at most before it looks
/// the related ones up by key instead: about 40 ms.
const WALKED_EVENTS: i64 = 50_000;

/// Up to `limit` events matching `filter`, newest first, older than
/// `before` when given: one statement.
/// - Without `filter.q`, the walk down `processed_events_received_at` (the
///   time bounds its index condition), or down
///   `processed_events_event_type`, `processed_events_received_via` or
///   `processed_events_exceptions` when those filters are the rarer.
/// - With it, the related events are found first (each arm of
///   `related_events` by its own index). Past [`WALKED_RELATED`] of them,
///   the same walk (of at most [`WALKED_EVENTS`]) keeps the related ones:
///   the answer when it fills the page or reads every event the filters let
///   by. Else (a subject of a few events, or a page of rare ones among
///   many) each related event is looked up by its key (a probe a partition),
///   filtered and sorted.
///
/// Planned for its parameters every time ([`db::BEGIN_LOOKUP`]): a filter
/// left out (`$n is null`) is folded away, with the branch a search does
/// not take, and a given one meets the column's statistics. A cached
/// generic plan can do neither: at 5 million events it drove a search's
/// join from the events' time index, seconds for any `q`
/// (docs/PERFORMANCE.md, "Console queries at 5 M events").
pub async fn page(
    pool: &PgPool,
    filter: &Filter,
    before: Option<&Cursor>,
    limit: i64,
) -> Result<Vec<Row>, sqlx::Error> {
    let (before_at, before_provider, before_id) = match before {
        Some(c) => (
            Some(c.received_at.as_str()),
            Some(c.provider.as_str()),
            Some(c.event_id.as_str()),
        ),
        None => (None, None, None),
    };
    let rows = db::lookup(pool).all(sqlx::query_as!(
        Listed,
        r#"
        with related as materialized (
            select distinct r.provider, r.event_id from related_events($11) r where $11::text is not null
        ),
        -- the events the filters let by, newest first: the page itself, or
        -- for a subject with many related events the ones walked for them
        newest as materialized (
            select provider, event_id, event_type, outcome, received_via, received_at
            from processed_events
            where ($11::text is null or (select count(*) from related) >= $12)
              and received_at >= coalesce(to_timestamp($5::float8), '-infinity')
              and received_at < coalesce(to_timestamp($6::float8), 'infinity')
              and received_at <= coalesce($7::text::timestamptz, 'infinity')
              and ($7::text is null or (received_at, provider, event_id) < ($7::text::timestamptz, $8, $9))
              and ($1::text is null or provider = $1)
              and ($2::text is null or event_type = $2)
              and ($3::text is null or outcome = $3)
              and ($4::text is null or received_via = $4)
            order by received_at desc, provider desc, event_id desc
            limit case when $11::text is null then $10::int8 else $13::int8 end
        ),
        walked as materialized (
            select * from newest e
            where $11::text is null
               or exists (select from related r where r.provider = e.provider and r.event_id = e.event_id)
            order by e.received_at desc, e.provider desc, e.event_id desc
            limit $10
        ),
        -- walked, it found the page or read every event the filters let by
        walk_done (done) as (
            select $11::text is null
                or ((select count(*) from related) >= $12
                    and ((select count(*) from walked) = $10 or (select count(*) from newest) < $13))
        )
        select provider as "provider!", event_id as "event_id!", event_type as "event_type!",
               outcome as "outcome!: Outcome", received_via as "received_via!",
               received_at as "received_at!: Timestamp"
        from walked where (select done from walk_done)
        union all
        (select e.provider, e.event_id, e.event_type, e.outcome, e.received_via, e.received_at
         from processed_events e
         join related r on r.provider = e.provider and r.event_id = e.event_id
         where not (select done from walk_done)
           and e.received_at >= coalesce(to_timestamp($5::float8), '-infinity')
           and e.received_at < coalesce(to_timestamp($6::float8), 'infinity')
           and ($7::text is null or (e.received_at, e.provider, e.event_id) < ($7::text::timestamptz, $8, $9))
           and ($1::text is null or e.provider = $1)
           and ($2::text is null or e.event_type = $2)
           and ($3::text is null or e.outcome = $3)
           and ($4::text is null or e.received_via = $4)
         order by e.received_at desc, e.provider desc, e.event_id desc
         limit $10)
        order by 6 desc, 1 desc, 2 desc -- received_at, provider, event_id
        "#,
        filter.provider,
        filter.event_type,
        filter.outcome,
        filter.received_via,
        filter.from,
        filter.to,
        before_at,
        before_provider,
        before_id,
        limit,
        filter.q,
        WALKED_RELATED,
        WALKED_EVENTS,
    )).await?;
    Ok(rows.into_iter().map(Row::from).collect())
}

/// Events received since `since` (Unix seconds), counted by outcome in
/// buckets of `bucket_secs` aligned to the epoch: `(bucket start, outcome,
/// count)`, oldest first. Bucketed with `date_bin` on the timestamps (a
/// `numeric` epoch per row cost more than reading the rows, and its cast
/// rounded the last half second of a bucket into the next); planned for
/// the window asked for ([`db::BEGIN_LOOKUP`]): a generic plan guessed a
/// third of the table and paid for JIT compilation.
pub async fn counts_by_outcome(
    pool: &PgPool,
    since: i64,
    bucket_secs: i64,
) -> Result<Vec<(i64, Outcome, i64)>, sqlx::Error> {
    let rows = db::lookup(pool).all(sqlx::query!(
        r#"
        select extract(epoch from bucket)::bigint as "bucket!", outcome as "outcome: Outcome", count as "count!"
        from (select date_bin(make_interval(secs => $2::bigint), received_at, timestamptz 'epoch') as bucket,
                     outcome, count(*)
              from processed_events
              where received_at >= to_timestamp($1::bigint)
              group by 1, 2) buckets
        order by 1, 2
        "#,
        since,
        bucket_secs,
    )).await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.bucket, r.outcome, r.count))
        .collect())
}

/// One event waiting for a dependency.
#[derive(Debug, Clone)]
pub struct Deferred {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub waits_for: String,
    pub since: Timestamp,
    pub waited_secs: f64,
}

/// The events waiting longest first, up to `limit`.
pub async fn deferred(pool: &PgPool, limit: i64) -> Result<Vec<Deferred>, sqlx::Error> {
    let query = sqlx::query_as!(
        Deferred,
        r#"
        select d.provider, d.event_id, e.event_type, d.waits_for,
               d.created_at as "since!: Timestamp",
               extract(epoch from now() - d.created_at)::float8 as "waited_secs!"
        from deferred_events d join processed_events e using (provider, event_id)
        order by d.created_at, d.provider, d.event_id
        limit $1
        "#,
        limit,
    );
    db::read_only(pool).all(query).await
}

/// How many events wait, and for how long the oldest has (seconds).
pub async fn deferred_depth(pool: &PgPool) -> Result<(i64, f64), sqlx::Error> {
    let query = sqlx::query!(
        r#"
        select count(*) as "count!",
               coalesce(extract(epoch from now() - min(created_at)), 0)::float8 as "oldest!"
        from deferred_events
        "#
    );
    let row = db::read_only(pool).one(query).await?;
    Ok((row.count, row.oldest))
}

/// How many events wait for an owner (`waits_for` `owner:…`), and for how
/// long the oldest has (seconds): `deferred_depth`'s share of them, read
/// from `deferred_events_owner_waits`.
pub async fn owner_waits(pool: &PgPool) -> Result<(i64, f64), sqlx::Error> {
    let query = sqlx::query!(
        r#"
        select count(*) as "count!",
               coalesce(extract(epoch from now() - min(created_at)), 0)::float8 as "oldest!"
        from deferred_events
        where starts_with(waits_for, 'owner:')
        "#
    );
    let row = db::read_only(pool).one(query).await?;
    Ok((row.count, row.oldest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_from_the_network_has_exactly_the_written_shape() {
        assert!(Cursor::new("2026-12-01T15:30:00.123456Z", "stripe", "evt_1").is_some());
        for bad in [
            "2026-12-01T15:30:00Z",
            "2026-12-01 15:30:00.123456Z",
            "2026-12-01T15:30:00.123456Z'; drop",
            "x026-12-01T15:30:00.123456Z",
            "",
        ] {
            assert!(Cursor::new(bad, "stripe", "evt_1").is_none(), "{bad}");
        }
    }
}

/// The events whose id starts with `id_prefix` (a drill's run), per
/// provider, and how many of them still wait as deferred.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrefixCounts {
    pub by_provider: Vec<(String, i64)>,
    pub deferred: i64,
}

pub async fn counts_with_prefix(
    pool: &PgPool,
    id_prefix: &str,
) -> Result<PrefixCounts, sqlx::Error> {
    let query = sqlx::query!(
        r#"
        select provider, count(*) as "n!" from processed_events
        where starts_with(event_id, $1) group by provider order by provider
        "#,
        id_prefix,
    );
    let by_provider = db::read_only(pool).all(query).await?;
    let query = sqlx::query!(
        r#"select count(*) as "n!" from deferred_events where starts_with(event_id, $1)"#,
        id_prefix,
    );
    let deferred = db::read_only(pool).one(query).await?.n;
    Ok(PrefixCounts {
        by_provider: by_provider.into_iter().map(|r| (r.provider, r.n)).collect(),
        deferred,
    })
}
