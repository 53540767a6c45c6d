//! The months of `processed_events`: each month (UTC) of received events is
//! a partition of its own, created ahead ([`ensure`]) and, once past the
//! retention, detached and dropped whole ([`retire`]), so that retention
//! never deletes row by row from the table ingest writes.
//!
//! Which partition a row is in never decides whether it is a duplicate:
//! every writer claims the event id first (an advisory lock, [`super::claim_key`])
//! and then reads whether it is recorded, a read that probes every
//! partition. A row may move to a later month ([`retire`] moves the rows it
//! keeps, a release or a replay moves the row it records), never to an
//! earlier one.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;

/// How many months after the current one have their partition: the next
/// month's always exists a month ahead.
pub const MONTHS_AHEAD: i32 = 2;

/// How often a serving process makes sure of the months ahead.
const EVERY: Duration = Duration::from_secs(3600);

/// How long creating or dropping a partition waits for a lock before it
/// gives up until the next time: it never holds up ingest behind it.
const LOCK_TIMEOUT: &str = "set local lock_timeout = '5s'";

/// Creates the partitions of the month of `now` (Unix seconds; `None`: the
/// database's now) and of the [`MONTHS_AHEAD`] after it that are missing.
/// Returns the names of those it created.
pub async fn ensure(pool: &PgPool, now: Option<f64>) -> Result<Vec<String>, sqlx::Error> {
    let mut tx = crate::db::begin(pool).await?;
    sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
    let created = sqlx::query_scalar!(
        r#"
        select format('processed_events_%s', to_char(first, 'YYYY_MM')) as "partition!"
        from (select (date_trunc('month', coalesce(to_timestamp($1::float8), now()) at time zone 'UTC')
                      + make_interval(months => n))::date as first
              from generate_series(0, $2::int) as n) as months
        where processed_events_add_month(first)
        "#,
        now,
        MONTHS_AHEAD,
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(created)
}

/// Makes sure of the months ahead every hour until `shutdown`.
pub async fn run(pool: PgPool, clock: Clock, shutdown: CancellationToken) {
    crate::clock::every(EVERY, &shutdown, || async {
        match ensure(&pool, clock.pinned()).await {
            Ok(created) if created.is_empty() => {}
            Ok(created) => tracing::info!(?created, "event partitions created ahead"),
            Err(error) => tracing::warn!(error = %error, "could not create event partitions ahead"),
        }
    })
    .await;
}

/// A partition [`retire`] dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retired {
    pub partition: String,
    /// The events it held when it was dropped.
    pub events: u64,
    /// The events it kept, moved to the current month's partition first.
    pub moved: u64,
}

/// What [`retire`] did.
#[derive(Debug, Default)]
pub struct Retirement {
    pub retired: Vec<Retired>,
    /// Partitions past the cutoff left for another run, with why.
    pub left: Vec<(String, String)>,
}

/// Detaches and drops every partition of events received before `cutoff`
/// (Unix seconds) and of a month before the current one (of `now`, Unix
/// seconds; `None`: the database's now):
/// - a month's partition is retired once its whole month is before the
///   cutoff; the legacy partition (the table before partitions) once its
///   last event is;
/// - the events it keeps are first moved to the current month: events
///   still deferred (they wait for their dependency), and in the legacy
///   partition events whose ledger entry is younger than the cutoff
///   (applied late), so that `reconcile` finds every young entry's event.
///   A month's partition holds no such event: an event applied later than
///   it was received has its row moved to the month it was applied in;
/// - `DETACH ... CONCURRENTLY` waits for the transactions that may use the
///   partition, and ingest never waits for it; the drop then locks only
///   the detached table. A detach left unfinished by an earlier run is
///   finished first.
pub async fn retire(
    pool: &PgPool,
    cutoff: f64,
    now: Option<f64>,
) -> Result<Retirement, sqlx::Error> {
    ensure(pool, now).await?;
    let mut retirement = Retirement::default();
    for pending in detach_pending(pool).await? {
        finish_detach(pool, &pending).await?;
        retirement
            .retired
            .push(drop_detached(pool, &pending, now, 0).await?);
    }
    let candidates = sqlx::query!(
        r#"
        with partitions as (
            select c.relname::text as name,
                   substring(pg_get_expr(c.relpartbound, c.oid) from $$TO \('([0-9-]+)'\)$$)::date as upper
            from pg_partition_tree('processed_events') t join pg_class c on c.oid = t.relid
            where t.level = 1
        )
        select name as "name!", upper as "upper!",
               name = 'processed_events_legacy' as "legacy!"
        from partitions
        where upper <= (date_trunc('month', coalesce(to_timestamp($2::float8), now()) at time zone 'UTC'))::date
          and (name = 'processed_events_legacy' or upper <= (to_timestamp($1::float8) at time zone 'UTC')::date)
        order by upper
        "#,
        cutoff,
        now,
    )
    .fetch_all(pool)
    .await?;
    for candidate in candidates {
        let partition = candidate.name;
        if candidate.legacy {
            match legacy_last_received(pool).await? {
                Some(last) if last >= cutoff => {
                    retirement.left.push((
                        partition,
                        "it holds events received within the retention".to_owned(),
                    ));
                    continue;
                }
                _ => {}
            }
        }
        let moved = move_kept(pool, &partition, candidate.legacy, cutoff, now).await?;
        detach(pool, &partition).await?;
        retirement
            .retired
            .push(drop_detached(pool, &partition, now, moved).await?);
    }
    Ok(retirement)
}

/// When the legacy partition's last event was received (Unix seconds).
async fn legacy_last_received(pool: &PgPool) -> Result<Option<f64>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select extract(epoch from max(received_at))::float8 from processed_events_legacy"#
    )
    .fetch_one(pool)
    .await
}

/// Moves the events `partition` keeps ([`retire`]) to the current month,
/// waiting for no row another transaction holds (a release in flight moves
/// its row itself); returns how many it moved.
async fn move_kept(
    pool: &PgPool,
    partition: &str,
    legacy: bool,
    cutoff: f64,
    now: Option<f64>,
) -> Result<u64, sqlx::Error> {
    // The partition's name comes from the catalogue; quoted all the same.
    let kept = format!(
        r#"
        with kept as (
            select provider, event_id, month from {table} e
            where e.outcome = 'deferred'
               or ($3 and exists (select from wallet_entries w
                                  where w.provider = e.provider and w.event_id = e.event_id
                                    and w.created_at >= to_timestamp($1)))
            for update skip locked
        )
        update processed_events e
        set month = (date_trunc('month', coalesce(to_timestamp($2), now()) at time zone 'UTC'))::date
        from kept
        where e.provider = kept.provider and e.event_id = kept.event_id and e.month = kept.month
        "#,
        table = quote_ident(partition),
    );
    let mut tx = crate::db::begin(pool).await?;
    let moved = sqlx::query(&kept)
        .bind(cutoff)
        .bind(now)
        .bind(legacy)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(moved)
}

/// The partitions whose `DETACH ... CONCURRENTLY` an earlier run began and
/// did not finish (it was cancelled, or its process ended).
async fn detach_pending(pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select c.relname::text as "name!"
        from pg_inherits i join pg_class c on c.oid = i.inhrelid
        where i.inhparent = 'processed_events'::regclass and i.inhdetachpending
        "#
    )
    .fetch_all(pool)
    .await
}

async fn finish_detach(pool: &PgPool, partition: &str) -> Result<(), sqlx::Error> {
    let statement = format!(
        "alter table processed_events detach partition {} finalize",
        quote_ident(partition)
    );
    sqlx::raw_sql(&statement).execute(pool).await?;
    Ok(())
}

/// Detaches `partition` without blocking ingest: outside a transaction, as
/// `CONCURRENTLY` must be.
async fn detach(pool: &PgPool, partition: &str) -> Result<(), sqlx::Error> {
    let statement = format!(
        "alter table processed_events detach partition {} concurrently",
        quote_ident(partition)
    );
    sqlx::raw_sql(&statement).execute(pool).await?;
    Ok(())
}

/// Drops the detached `partition`, after putting back any event deferred
/// meanwhile (a deferral committed between [`move_kept`] and the detach),
/// as of the current month.
async fn drop_detached(
    pool: &PgPool,
    partition: &str,
    now: Option<f64>,
    moved: u64,
) -> Result<Retired, sqlx::Error> {
    let table = quote_ident(partition);
    let mut tx = crate::db::begin(pool).await?;
    sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
    let events: i64 = sqlx::query_scalar(&format!("select count(*) from {table}"))
        .fetch_one(&mut *tx)
        .await?;
    let put_back = format!(
        r#"
        insert into processed_events
        select (row.r).* from (
            select jsonb_populate_record(null::processed_events,
                       to_jsonb(e) || jsonb_build_object('month',
                           (date_trunc('month', coalesce(to_timestamp($1), now()) at time zone 'UTC'))::date)) as r
            from {table} e where e.outcome = 'deferred'
        ) as row
        on conflict do nothing
        "#
    );
    let put = sqlx::query(&put_back)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    sqlx::query(&format!("drop table {table}"))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Retired {
        partition: partition.to_owned(),
        events: u64::try_from(events).unwrap_or(0).saturating_sub(put),
        moved: moved + put,
    })
}

/// `name` as an SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
