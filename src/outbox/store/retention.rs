//! The months of the outbox (`db::partitions`): `outbox` and
//! `outbox_attempts` are partitioned by the month a row was written in (an
//! attempt by its row's), and a month of both is dropped at once when it
//! is past the retention ([`retire`]). The rows it keeps move to the
//! current month first, with their attempts: rows not delivered (pending
//! or dead: a dead row waits for `outbox retry` or a person) and rows
//! delivered within the retention.

use sqlx::{PgConnection, PgPool};

use crate::db::partitions::{self, Keeper, Past, Retirement, quote_ident};

pub const TABLE: &str = "outbox";
pub const ATTEMPTS: &str = "outbox_attempts";

/// Whether a row is kept past its month, as SQL over the row `o` and the
/// cutoff `$1` (Unix seconds).
const KEPT: &str = "(o.delivered_at is null or o.delivered_at >= to_timestamp($1))";

/// Drops the months of the outbox, and of its attempts, written before
/// `cutoff` (Unix seconds) and before the current month (of `now`, Unix
/// seconds; `None`: the database's now): the kept rows ([`KEPT`]) and
/// their attempts moved to the current month first, each month's outbox
/// partition detached without blocking the drainer or ingest, any row
/// kept meanwhile put back (a row the move waited for), then dropped. The
/// legacy partition (the table before partitions) goes once its last row
/// was written before the cutoff.
pub async fn retire(
    pool: &PgPool,
    cutoff: f64,
    now: Option<f64>,
) -> Result<Retirement, sqlx::Error> {
    let mut retirement = Retirement::default();
    let rows = Rows { cutoff, now };
    partitions::retire(pool, TABLE, cutoff, now, &rows, &mut retirement).await?;
    partitions::retire(pool, ATTEMPTS, cutoff, now, &Attempts, &mut retirement).await?;
    Ok(retirement)
}

/// What the outbox keeps of its past months ([`retire`]).
struct Rows {
    cutoff: f64,
    now: Option<f64>,
}

impl Keeper for Rows {
    async fn stays(&self, pool: &PgPool, past: &Past) -> Result<Option<String>, sqlx::Error> {
        partitions::legacy_stays(pool, TABLE, past, "created_at", self.cutoff, "rows written").await
    }

    async fn move_kept(&self, pool: &PgPool, past: &Past) -> Result<u64, sqlx::Error> {
        move_kept(pool, &past.partition, self.cutoff, self.now).await
    }

    async fn put_back(&self, conn: &mut PgConnection, partition: &str) -> Result<u64, sqlx::Error> {
        put_back(conn, partition, self.cutoff, self.now).await
    }
}

/// The attempts' months: the attempts of kept rows moved with them, so
/// what is left goes with the outbox's month, once that is gone.
struct Attempts;

impl Keeper for Attempts {
    async fn stays(&self, pool: &PgPool, past: &Past) -> Result<Option<String>, sqlx::Error> {
        let month = past.partition.trim_start_matches(ATTEMPTS);
        let rows = format!("{TABLE}{month}");
        Ok(partitions::attached(pool, TABLE, &rows)
            .await?
            .then(|| format!("its rows' partition {rows} stays")))
    }

    async fn move_kept(&self, _: &PgPool, _: &Past) -> Result<u64, sqlx::Error> {
        Ok(0)
    }

    async fn put_back(&self, _: &mut PgConnection, _: &str) -> Result<u64, sqlx::Error> {
        Ok(0)
    }
}

/// Moves the rows `partition` keeps, and their attempts, to the current
/// month, in one transaction; returns how many rows.
async fn move_kept(
    pool: &PgPool,
    partition: &str,
    cutoff: f64,
    now: Option<f64>,
) -> Result<u64, sqlx::Error> {
    // The partition's name comes from the catalogue; quoted all the same.
    let rows = format!(
        r#"
        with kept as (select o.id, o.month from {table} o where {KEPT}),
        moved as (
            update outbox o set month = {current}
            from kept where o.id = kept.id and o.month = kept.month
            returning o.id, kept.month as old, o.month as new
        ),
        attempts as (
            update outbox_attempts a set month = moved.new
            from moved where a.outbox_id = moved.id and a.month = moved.old
        )
        select count(*) from moved
        "#,
        table = quote_ident(partition),
        current = partitions::current_month(2),
    );
    let mut tx = crate::db::begin(pool).await?;
    let moved: i64 = sqlx::query_scalar(&rows)
        .bind(cutoff)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(u64::try_from(moved).unwrap_or(0))
}

/// Puts back, as of the current month, the kept rows of the detached
/// `partition` and their attempts (a row kept after [`move_kept`] read
/// it); returns how many rows.
async fn put_back(
    conn: &mut PgConnection,
    partition: &str,
    cutoff: f64,
    now: Option<f64>,
) -> Result<u64, sqlx::Error> {
    let current = partitions::current_month(2);
    // Every column as it is but the month, whatever columns the table has.
    let rows = format!(
        r#"
        insert into outbox
        select (row.r).* from (
            select jsonb_populate_record(null::outbox, to_jsonb(o) || jsonb_build_object('month', {current})) as r
            from {table} o where {KEPT}
        ) as row
        on conflict do nothing
        "#,
        table = quote_ident(partition),
    );
    let put = sqlx::query(&rows)
        .bind(cutoff)
        .bind(now)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    if put > 0 {
        let attempts = format!(
            r#"
            update outbox_attempts a set month = {current}
            from {table} o
            where {KEPT} and a.outbox_id = o.id and a.month = o.month
            "#,
            table = quote_ident(partition),
        );
        sqlx::query(&attempts)
            .bind(cutoff)
            .bind(now)
            .execute(conn)
            .await?;
    }
    Ok(put)
}
