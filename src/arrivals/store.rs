//! The `source_arrivals` table: each source's deliveries an hour at a
//! time. All of its SQL.

use sqlx::PgPool;

use super::Tally;
use crate::db;

/// How many days back a source's usual gap is measured over.
pub const USUAL_GAP_DAYS: i64 = 14;

/// How many days of rows are kept (each source's last [`USUAL_GAP_DAYS`]
/// of deliveries besides, however old).
const KEPT_DAYS: i64 = 35;

/// What is known of when a source's deliveries arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub source: String,
    /// Unix seconds of the last delivery.
    pub last_at: i64,
    /// Deliveries in the [`USUAL_GAP_DAYS`] days before the last.
    pub deliveries: i64,
    /// The longest silence between two of them in those days, in seconds:
    /// from an hour's last delivery to the next hour's first (a silence
    /// within an hour is not seen), 3600 at least. `None` until deliveries
    /// arrived in two hours.
    pub usual_gap: Option<i64>,
}

/// Adds `rows` (source, hour in Unix seconds, its tally) to what was
/// written, and deletes rows past [`KEPT_DAYS`] of `now` (Unix seconds;
/// `None`: the database's clock), except each source's last
/// [`USUAL_GAP_DAYS`] days of deliveries.
pub async fn add(
    pool: &PgPool,
    rows: &[(&str, i64, Tally)],
    now: Option<f64>,
) -> Result<(), sqlx::Error> {
    let sources: Vec<&str> = rows.iter().map(|(source, ..)| *source).collect();
    let hours: Vec<i64> = rows.iter().map(|(_, hour, _)| *hour).collect();
    let deliveries: Vec<i64> = rows.iter().map(|(.., tally)| tally.deliveries).collect();
    let first: Vec<i64> = rows.iter().map(|(.., tally)| tally.first_at).collect();
    let last: Vec<i64> = rows.iter().map(|(.., tally)| tally.last_at).collect();
    let mut tx = db::begin(pool).await?;
    // In one order, whatever the caller's: two processes' writes of the
    // same rows never wait for each other in a circle.
    sqlx::query!(
        r#"
        insert into source_arrivals (source, hour, deliveries, first_at, last_at)
        select source, to_timestamp(hour), deliveries, to_timestamp(first), to_timestamp(last)
        from unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
             as r(source, hour, deliveries, first, last)
        order by source, hour
        on conflict (source, hour) do update
            set deliveries = source_arrivals.deliveries + excluded.deliveries,
                first_at = least(source_arrivals.first_at, excluded.first_at),
                last_at = greatest(source_arrivals.last_at, excluded.last_at)
        "#,
        &sources as &[&str],
        &hours,
        &deliveries,
        &first,
        &last,
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        r#"
        delete from source_arrivals a
        where a.hour < coalesce(to_timestamp($1::float8), now()) - make_interval(days => $2::int)
          and a.hour < (select max(b.hour) from source_arrivals b where b.source = a.source)
                       - make_interval(days => $3::int)
        "#,
        now,
        KEPT_DAYS as i32,
        USUAL_GAP_DAYS as i32,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// What is known of every source that ever had deliveries, by name: its
/// usual gap measured over the [`USUAL_GAP_DAYS`] days before its last
/// delivery, however long ago that was.
pub async fn seen(pool: &PgPool) -> Result<Vec<Seen>, sqlx::Error> {
    let query = sqlx::query_as!(
        Seen,
        r#"
        with hours as (
            select source, hour, deliveries, last_at,
                   first_at - lag(last_at) over (partition by source order by hour) as gap,
                   max(hour) over (partition by source) as newest
            from source_arrivals
        ), recent as (
            select * from hours where hour >= newest - make_interval(days => $1::int)
        )
        select source as "source!",
               extract(epoch from max(last_at))::bigint as "last_at!",
               sum(deliveries)::bigint as "deliveries!",
               case when max(gap) is not null
                    then greatest(extract(epoch from max(gap))::bigint, 3600) end as usual_gap
        from recent
        group by source
        order by source
        "#,
        USUAL_GAP_DAYS as i32,
    );
    db::read_only(pool).all(query).await
}
