//! The months of `processed_events` (`db::partitions`): each month (UTC)
//! of written events is a partition of its own, created ahead and, once
//! past the retention, detached and dropped whole ([`retire`]), so that
//! retention never deletes row by row from the table ingest writes.
//!
//! Which partition a row is in never decides whether it is a duplicate:
//! every writer claims the event id first (an advisory lock,
//! [`super::claim_key`]) and then reads whether it is recorded. A row is
//! written after its provider created the event and may move to a later
//! month ([`retire`] moves the rows it keeps, a release or a replay moves
//! the row it records), never to an earlier one; so the engine's claim
//! reads only the months from that of the event's `created` less a day
//! (`event_month_floor`, for a provider's clock ahead of ours) and the
//! legacy partition, and every other read probes every partition.

use sqlx::PgPool;

use sqlx::PgConnection;

use crate::db::partitions::{self, Keeper, Past, Retirement, quote_ident};

pub const TABLE: &str = "processed_events";

/// Detaches and drops every partition of events written before `cutoff`
/// (Unix seconds) and before the current month (of `now`, Unix seconds;
/// `None`: the database's now), [`partitions::past`]:
/// - the legacy partition (the table before partitions) goes once its last
///   event was received before the cutoff;
/// - the events a partition keeps are first moved to the current month:
///   events still deferred (they wait for their dependency), and in the
///   legacy partition events whose ledger entry is younger than the cutoff
///   (applied late), so that `reconcile` finds every young entry's event.
///   A month's partition holds no such event: an event applied later than
///   it was received has its row moved to the month it was applied in
///   (`record_outcomes`);
/// - detached without blocking ingest; then, in one transaction, any kept
///   event the move left (held by another transaction then, or deferred
///   since) is put back, the rest counted and the table dropped.
pub async fn retire(
    pool: &PgPool,
    cutoff: f64,
    now: Option<f64>,
) -> Result<Retirement, sqlx::Error> {
    let mut retirement = Retirement::default();
    let keeper = Events { cutoff, now };
    partitions::retire(pool, TABLE, cutoff, now, &keeper, &mut retirement).await?;
    Ok(retirement)
}

/// What the event store keeps of its past months ([`retire`]).
struct Events {
    cutoff: f64,
    now: Option<f64>,
}

impl Keeper for Events {
    async fn stays(&self, pool: &PgPool, past: &Past) -> Result<Option<String>, sqlx::Error> {
        partitions::legacy_stays(
            pool,
            TABLE,
            past,
            "received_at",
            self.cutoff,
            "events received",
        )
        .await
    }

    async fn move_kept(&self, pool: &PgPool, past: &Past) -> Result<u64, sqlx::Error> {
        move_kept(pool, &past.partition, past.legacy, self.cutoff, self.now).await
    }

    async fn put_back(&self, conn: &mut PgConnection, partition: &str) -> Result<u64, sqlx::Error> {
        let legacy = partition == format!("{TABLE}_legacy");
        put_back(conn, partition, legacy, self.cutoff, self.now).await
    }
}

/// Whether an event `e` of a past month is kept ([`retire`]), as SQL over
/// the cutoff `$1` (Unix seconds) and whether the month is the legacy
/// partition `$3`.
const KEPT: &str = "(e.outcome = 'deferred'
    or ($3 and exists (select from wallet_entries w
                       where w.provider = e.provider and w.event_id = e.event_id
                         and w.created_at >= to_timestamp($1))))";

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
            where {KEPT}
            for update skip locked
        )
        update processed_events e set month = {current}
        from kept
        where e.provider = kept.provider and e.event_id = kept.event_id and e.month = kept.month
        "#,
        table = quote_ident(partition),
        current = partitions::current_month(2),
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

/// Puts back, as of the current month, the kept events of the detached
/// `partition` that [`move_kept`] left: one another transaction held, or a
/// deferral that committed between the move and the detach; returns how
/// many.
async fn put_back(
    conn: &mut PgConnection,
    partition: &str,
    legacy: bool,
    cutoff: f64,
    now: Option<f64>,
) -> Result<u64, sqlx::Error> {
    // Every column as it is but the month, whatever columns the table has.
    let put_back = format!(
        r#"
        insert into processed_events
        select (row.r).* from (
            select jsonb_populate_record(null::processed_events,
                       to_jsonb(e) || jsonb_build_object('month', {current})) as r
            from {table} e where {KEPT}
        ) as row
        on conflict do nothing
        "#,
        table = quote_ident(partition),
        current = partitions::current_month(2),
    );
    Ok(sqlx::query(&put_back)
        .bind(cutoff)
        .bind(now)
        .bind(legacy)
        .execute(conn)
        .await?
        .rows_affected())
}
