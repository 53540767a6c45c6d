//! The `sweeps` table: the periodic sweep's lease and checkpoint, one row
//! per provider. All of its SQL.

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;

/// Takes the provider's sweep lease for `lease` when no other process holds
/// it. `Some(swept_until)` (Unix seconds, `None` before the first sweep)
/// when taken.
pub async fn lease(
    pool: &PgPool,
    provider: &str,
    lease: Duration,
) -> Result<Option<Option<i64>>, sqlx::Error> {
    sqlx::query!(
        "insert into sweeps (provider) values ($1) on conflict (provider) do nothing",
        provider
    )
    .execute(pool)
    .await?;
    let row = sqlx::query!(
        r#"
        update sweeps set leased_until = now() + make_interval(secs => $2::float8)
        where provider = $1 and (leased_until is null or leased_until < now())
        returning extract(epoch from swept_until)::bigint as swept_until
        "#,
        provider,
        lease.as_secs_f64(),
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|row| row.swept_until))
}

/// Everything created before `swept_until` (Unix seconds) was swept; the
/// lease is renewed for `lease`. Never moves the checkpoint back.
pub async fn advance(
    pool: &PgPool,
    provider: &str,
    swept_until: i64,
    lease: Duration,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        update sweeps set
            swept_until = greatest(swept_until, to_timestamp($2::bigint)),
            leased_until = now() + make_interval(secs => $3::float8)
        where provider = $1
        "#,
        provider,
        swept_until,
        lease.as_secs_f64(),
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Gives the lease back without recording a run (the process is stopping).
pub async fn release(pool: &PgPool, provider: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "update sweeps set leased_until = null where provider = $1",
        provider
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Records how the run went and gives the lease back.
pub async fn finish(
    pool: &PgPool,
    provider: &str,
    succeeded: bool,
    result: &Value,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        update sweeps set
            leased_until = null,
            last_run_at = now(),
            last_success_at = case when $2 then now() else last_success_at end,
            last_result = $3
        where provider = $1
        "#,
        provider,
        succeeded,
        result,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The last successful run of each provider's sweep (Unix seconds), for
/// `/metrics`.
pub async fn last_successes(pool: &PgPool) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select provider, extract(epoch from last_success_at)::bigint as "at!"
        from sweeps where last_success_at is not null order by provider
        "#
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|row| (row.provider, row.at)).collect())
}
