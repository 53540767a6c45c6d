//! Monthly partitions, whatever the table: a table partitioned by range of
//! a `month` date column (the first day, UTC, of its rows' month) has a
//! partition a month, `{table}_YYYY_MM`, created ahead ([`ensure`]) and,
//! once past the retention, detached without blocking writers and dropped
//! ([`past`], [`detach`], [`drop_detached`]). What a partition keeps, and
//! where those rows go before it is dropped, is its owner's to say: this
//! module writes no row.

use std::time::{Duration, Instant};

use sqlx::{PgConnection, PgPool};

/// How many months after the current one have their partition: the next
/// month's exists a month ahead.
pub const MONTHS_AHEAD: i32 = 2;

/// How long creating or dropping a partition waits for a lock before it
/// gives up until the next time: writers never queue behind it for long.
const LOCK_TIMEOUT: &str = "set local lock_timeout = '5s'";

/// The key (`month`) of the month of `now` (Unix seconds; `None`: the
/// database's now), as SQL over parameter `$n`.
pub fn current_month(n: u8) -> String {
    format!(
        "(date_trunc('month', coalesce(to_timestamp(${n}::float8), now()) at time zone 'UTC'))::date"
    )
}

/// Creates the partitions of `table` for the month of `now` (Unix seconds;
/// `None`: the database's now) and the [`MONTHS_AHEAD`] after it that are
/// missing (`add_month_partition`: an empty table attached, which never
/// waits for writers); returns the names of those it created.
pub async fn ensure(
    pool: &PgPool,
    table: &'static str,
    now: Option<f64>,
) -> Result<Vec<String>, sqlx::Error> {
    let mut tx = super::begin(pool).await?;
    sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
    let created = sqlx::query_scalar!(
        r#"
        select format('%s_%s', $1::text, to_char(first, 'YYYY_MM')) as "partition!"
        from (select (date_trunc('month', coalesce(to_timestamp($2::float8), now()) at time zone 'UTC')
                      + make_interval(months => n))::date as first
              from generate_series(0, $3::int) as n) as months
        where add_month_partition($1::text::regclass, first)
        "#,
        table,
        now,
        MONTHS_AHEAD,
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(created)
}

/// A partition retired: dropped with its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retired {
    pub table: &'static str,
    pub partition: String,
    /// The rows it held when it was dropped: counted, or read from the
    /// table's statistics when counting would read more than
    /// [`COUNTED_PAGES`] ([`Retired::estimated`]).
    pub rows: u64,
    /// Whether `rows` is the statistics' estimate.
    pub estimated: bool,
    /// The rows it kept, moved to the current month's partition first.
    pub moved: u64,
    /// How long the statements on the live table took: moving what it
    /// keeps, and the detach (which waits for the transactions that may
    /// use the partition).
    pub detach: Duration,
    /// How long the statements on the detached table took, which no one
    /// waits for: putting back what it keeps, its rows' count (or their
    /// statistics) and the drop (its files' removal at commit).
    pub drop: Duration,
}

/// The most pages of a detached partition counted row by row: past it
/// (128 MiB, about 200,000 events) the rows dropped are Postgres's
/// statistics of the table ([`held`]), since a month of 10 million rows
/// takes a second to count, as long again as dropping it.
pub const COUNTED_PAGES: i64 = 16_384;

/// What a retention run did to the partitions of its tables.
#[derive(Debug, Default)]
pub struct Retirement {
    pub retired: Vec<Retired>,
    /// Partitions past the cutoff left for another run, with why.
    pub left: Vec<(String, String)>,
}

impl Retirement {
    /// The rows of `table` dropped, and whether any were estimated
    /// ([`Retired::estimated`]).
    pub fn rows(&self, table: &str) -> (u64, bool) {
        self.retired
            .iter()
            .filter(|retired| retired.table == table)
            .fold((0, false), |(rows, estimated), retired| {
                (rows + retired.rows, estimated || retired.estimated)
            })
    }
}

/// What the owner of a partitioned table says when its past months are
/// retired ([`retire`]).
pub trait Keeper {
    /// Why `past` stays for now, if it does (its rows' age is not its
    /// month's, or another table's rows go with it).
    fn stays(
        &self,
        pool: &PgPool,
        past: &Past,
    ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send;

    /// Moves the rows `partition` keeps to the current month (the rows'
    /// owner writes them); how many.
    fn move_kept(
        &self,
        pool: &PgPool,
        past: &Past,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    /// Puts back, from the detached `partition`, rows kept after
    /// [`Keeper::move_kept`] read it (a row it had to leave, a change that
    /// committed meanwhile); how many.
    fn put_back(
        &self,
        conn: &mut PgConnection,
        partition: &str,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;
}

/// Why `past` stays ([`Keeper::stays`]) if it is the legacy partition of
/// `table`: while its last row's `column` (a time) is not before `cutoff`
/// (Unix seconds), in words of its `rows`. Its rows' age is not its
/// month's; a month's partition never stays for this.
pub async fn legacy_stays(
    pool: &PgPool,
    table: &'static str,
    past: &Past,
    column: &'static str,
    cutoff: f64,
    rows: &str,
) -> Result<Option<String>, sqlx::Error> {
    if !past.legacy {
        return Ok(None);
    }
    let last: Option<f64> = sqlx::query_scalar(&format!(
        "select extract(epoch from max({column}))::float8 from {}",
        quote_ident(&format!("{table}_legacy"))
    ))
    .fetch_one(pool)
    .await?;
    Ok(last
        .filter(|last| *last >= cutoff)
        .map(|_| format!("it holds {rows} within the retention")))
}

/// Retires the past months of `table` at `cutoff` ([`past`]) into
/// `retirement`: for each, unless its keeper says it stays, the kept rows
/// moved, the partition detached without blocking writers, then in one
/// transaction the rows kept meanwhile put back, the rest counted and the
/// table dropped.
pub async fn retire(
    pool: &PgPool,
    table: &'static str,
    cutoff: f64,
    now: Option<f64>,
    keeper: &impl Keeper,
    retirement: &mut Retirement,
) -> Result<(), sqlx::Error> {
    ensure(pool, table, now).await?;
    for past in past(pool, table, cutoff, now).await? {
        if let Some(why) = keeper.stays(pool, &past).await? {
            retirement.left.push((past.partition, why));
            continue;
        }
        let started = Instant::now();
        let moved = keeper.move_kept(pool, &past).await?;
        detach(pool, table, &past.partition).await?;
        let detached = Instant::now();
        let mut tx = super::begin(pool).await?;
        let put = keeper.put_back(&mut tx, &past.partition).await?;
        let (rows, estimated) = held(&mut tx, &past.partition, COUNTED_PAGES).await?;
        drop_detached(&mut tx, &past.partition).await?;
        tx.commit().await?;
        retirement.retired.push(Retired {
            table,
            partition: past.partition,
            rows: rows.saturating_sub(put),
            estimated,
            moved: moved + put,
            detach: detached - started,
            drop: detached.elapsed(),
        });
    }
    Ok(())
}

/// A partition whose rows are all older than a cutoff ([`past`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Past {
    pub partition: String,
    /// The table from before partitions (`{table}_legacy`, the key
    /// 1970-01-01): its rows' age is not its month's, and its owner must
    /// read it.
    pub legacy: bool,
}

/// The partitions of `table` to retire at `cutoff` (Unix seconds): those
/// whose range ends by the cutoff and before the current month (of `now`),
/// oldest first, and the legacy partition. Read from the catalogue, by
/// their bounds, whoever made them. A partition whose detach an earlier run
/// left unfinished comes first, finished ([`detach`] then does nothing).
pub async fn past(
    pool: &PgPool,
    table: &'static str,
    cutoff: f64,
    now: Option<f64>,
) -> Result<Vec<Past>, sqlx::Error> {
    let pending = sqlx::query_scalar!(
        r#"
        select c.relname::text as "name!"
        from pg_inherits i join pg_class c on c.oid = i.inhrelid
        where i.inhparent = $1::text::regclass and i.inhdetachpending
        "#,
        table,
    )
    .fetch_all(pool)
    .await?;
    for partition in &pending {
        let statement = format!(
            "alter table {} detach partition {} finalize",
            quote_ident(table),
            quote_ident(partition)
        );
        sqlx::raw_sql(&statement).execute(pool).await?;
    }
    let rows = sqlx::query!(
        r#"
        with partitions as (
            select c.relname::text as name,
                   substring(pg_get_expr(c.relpartbound, c.oid) from $$TO \('([0-9-]+)'\)$$)::date as upper
            from pg_partition_tree($1::text::regclass) t join pg_class c on c.oid = t.relid
            where t.level = 1
        )
        select name as "name!", name = $1 || '_legacy' as "legacy!"
        from partitions
        where upper <= (date_trunc('month', coalesce(to_timestamp($3::float8), now()) at time zone 'UTC'))::date
          and (name = $1 || '_legacy' or upper <= (to_timestamp($2::float8) at time zone 'UTC')::date)
        order by upper
        "#,
        table,
        cutoff,
        now,
    )
    .fetch_all(pool)
    .await?;
    Ok(pending
        .into_iter()
        .map(|partition| Past {
            legacy: partition == format!("{table}_legacy"),
            partition,
        })
        .chain(rows.into_iter().map(|row| Past {
            partition: row.name,
            legacy: row.legacy,
        }))
        .collect())
}

/// Detaches `partition` from `table` without blocking writers: `DETACH
/// ... CONCURRENTLY`, outside a transaction as it must be, waits for the
/// transactions that may use the partition, and nothing waits for it. A
/// partition detached already is left as it is.
pub async fn detach(
    pool: &PgPool,
    table: &'static str,
    partition: &str,
) -> Result<(), sqlx::Error> {
    if attached(pool, table, partition).await? {
        let statement = format!(
            "alter table {} detach partition {} concurrently",
            quote_ident(table),
            quote_ident(partition)
        );
        sqlx::raw_sql(&statement).execute(pool).await?;
    }
    Ok(())
}

/// Whether `partition` is a partition of `table` now.
pub async fn attached(
    pool: &PgPool,
    table: &'static str,
    partition: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select exists (select from pg_inherits
                       where inhparent = $1::text::regclass and inhrelid = to_regclass($2)) as "attached!"
        "#,
        table,
        quote_ident(partition),
    )
    .fetch_one(pool)
    .await
}

/// The rows of the detached `partition`, and whether that is an estimate
/// from Postgres's statistics: counted when it has at most `counted_pages`
/// ([`COUNTED_PAGES`]); else its live rows as the statistics keep them
/// (`n_live_tup`, counted as rows are inserted and deleted), or when those
/// were lost (a crash resets them) the last vacuum's or analyse's count
/// (`reltuples`), or counted when it has neither.
pub async fn held(
    conn: &mut PgConnection,
    partition: &str,
    counted_pages: i64,
) -> Result<(u64, bool), sqlx::Error> {
    let statistics = sqlx::query!(
        r#"
        select pg_relation_size(oid) / current_setting('block_size')::int8 as "pages!",
               pg_stat_get_tuples_inserted(oid) as "inserted!",
               pg_stat_get_live_tuples(oid) as "live!",
               reltuples::float8 as "reltuples!"
        from pg_class where oid = $1::text::regclass
        "#,
        quote_ident(partition),
    )
    .fetch_one(&mut *conn)
    .await?;
    if statistics.pages > counted_pages {
        if statistics.inserted > 0 {
            return Ok((u64::try_from(statistics.live).unwrap_or(0), true));
        }
        if statistics.reltuples >= 0.0 {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            return Ok((statistics.reltuples.round() as u64, true));
        }
    }
    let rows: i64 = sqlx::query_scalar(&format!("select count(*) from {}", quote_ident(partition)))
        .fetch_one(conn)
        .await?;
    Ok((u64::try_from(rows).unwrap_or(0), false))
}

/// Drops the detached `partition`, in the caller's transaction (after what
/// its owner puts back): it locks only that table, which no one uses.
pub async fn drop_detached(conn: &mut PgConnection, partition: &str) -> Result<(), sqlx::Error> {
    sqlx::query(LOCK_TIMEOUT).execute(&mut *conn).await?;
    sqlx::query(&format!("drop table {}", quote_ident(partition)))
        .execute(conn)
        .await?;
    Ok(())
}

/// `name` as an SQL identifier.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
