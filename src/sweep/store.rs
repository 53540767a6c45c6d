//! The `sweeps` table: the periodic sweep's lease and checkpoint, and the
//! cut-over before which no sweep reads, one row per provider. All of its
//! SQL.

use crate::db::{self, Timestamp};
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;

/// A lease taken: who holds it, and how far the last run got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The holder's token: only it may advance, finish or give the lease back.
    pub holder: String,
    /// Unix seconds; `None` before the first sweep.
    pub swept_until: Option<i64>,
    /// The cut-over (Unix seconds) before which no sweep reads.
    pub not_before: Option<i64>,
}

/// Takes the provider's sweep lease for `lease` when no other process holds
/// it (or its holder let it expire).
pub async fn lease(
    pool: &PgPool,
    provider: &str,
    lease: Duration,
) -> Result<Option<Lease>, sqlx::Error> {
    let mut tx = db::begin(pool).await?;
    sqlx::query!(
        "insert into sweeps (provider) values ($1) on conflict (provider) do nothing",
        provider
    )
    .execute(&mut *tx)
    .await?;
    let row = sqlx::query!(
        r#"
        update sweeps set leased_until = now() + make_interval(secs => $2::float8),
                          holder = gen_random_uuid()
        where provider = $1 and (leased_until is null or leased_until < now())
        returning holder::text as "holder!",
                  extract(epoch from swept_until)::bigint as swept_until,
                  extract(epoch from not_before)::bigint as not_before
        "#,
        provider,
        lease.as_secs_f64(),
    )
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(row.map(|row| Lease {
        holder: row.holder,
        swept_until: row.swept_until,
        not_before: row.not_before,
    }))
}

/// Everything created before `swept_until` (Unix seconds) was swept; the
/// lease is renewed for `lease`. Never moves the checkpoint back. `false`:
/// `holder` no longer holds the lease (it expired and another process took
/// it), and the run must stop.
pub async fn advance(
    pool: &PgPool,
    provider: &str,
    holder: &str,
    swept_until: i64,
    lease: Duration,
) -> Result<bool, sqlx::Error> {
    let mut tx = db::begin(pool).await?;
    let result = sqlx::query!(
        r#"
        update sweeps set
            swept_until = greatest(swept_until, to_timestamp($3::bigint)),
            leased_until = now() + make_interval(secs => $4::float8)
        where provider = $1 and holder::text = $2
        "#,
        provider,
        holder,
        swept_until,
        lease.as_secs_f64(),
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(result.rows_affected() == 1)
}

/// Gives the lease back without recording a run (the process is stopping),
/// if `holder` still holds it.
pub async fn release(pool: &PgPool, provider: &str, holder: &str) -> Result<(), sqlx::Error> {
    let mut tx = db::begin(pool).await?;
    sqlx::query!(
        "update sweeps set leased_until = null, holder = null where provider = $1 and holder::text = $2",
        provider,
        holder,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Records how `holder`'s run went and gives the lease back.
pub async fn finish(
    pool: &PgPool,
    provider: &str,
    holder: &str,
    succeeded: bool,
    result: &Value,
) -> Result<(), sqlx::Error> {
    let mut tx = db::begin(pool).await?;
    sqlx::query!(
        r#"
        update sweeps set
            leased_until = null,
            holder = null,
            last_run_at = now(),
            last_success_at = case when $3 then now() else last_success_at end,
            last_result = $4
        where provider = $1 and holder::text = $2
        "#,
        provider,
        holder,
        succeeded,
        result,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Records the cut-over of an import: an earlier handler applied what was
/// created before `at` (Unix seconds), so no sweep reads earlier. Never
/// moves it back.
pub async fn cut_over(pool: &PgPool, provider: &str, at: i64) -> Result<(), sqlx::Error> {
    let mut tx = db::begin(pool).await?;
    sqlx::query!(
        r#"
        insert into sweeps (provider, not_before) values ($1, to_timestamp($2::bigint))
        on conflict (provider) do update
            set not_before = greatest(sweeps.not_before, excluded.not_before)
        "#,
        provider,
        at,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The cut-over of `provider`'s imports (Unix seconds), if any.
pub async fn not_before(pool: &PgPool, provider: &str) -> Result<Option<i64>, sqlx::Error> {
    let row = db::read_only(pool).optional(sqlx::query!(
        r#"select extract(epoch from not_before)::bigint as at from sweeps where provider = $1"#,
        provider
    ));
    Ok(row.await?.and_then(|row| row.at))
}

/// The last successful run of each provider's sweep (Unix seconds), for
/// `/metrics`.
pub async fn last_successes(pool: &PgPool) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let query = sqlx::query!(
        r#"
        select provider, extract(epoch from last_success_at)::bigint as "at!"
        from sweeps where last_success_at is not null order by provider
        "#
    );
    let rows = db::read_only(pool).all(query).await?;
    Ok(rows.into_iter().map(|row| (row.provider, row.at)).collect())
}

/// How one provider's sweep last went, for the console.
#[derive(Debug, Clone)]
pub struct Run {
    pub provider: String,
    pub last_run_at: Option<Timestamp>,
    pub last_success_at: Option<Timestamp>,
    /// What the run reported (its counts, or its error).
    pub last_result: Option<Value>,
}

pub async fn runs(pool: &PgPool) -> Result<Vec<Run>, sqlx::Error> {
    db::read_only(pool)
        .all(sqlx::query_as!(
            Run,
            r#"
        select provider,
               last_run_at as "last_run_at: Timestamp",
               last_success_at as "last_success_at: Timestamp",
               last_result
        from sweeps order by provider
        "#
        ))
        .await
}
