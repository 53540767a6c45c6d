//! Payload retention (`WEBHOOKD_PAYLOAD_RETENTION_DAYS`): stored payloads
//! older than it become a stub naming only the event, while the event's
//! key, type, outcome, detail and times stay until its month is retired.

use sqlx::PgPool;

use crate::db;

/// Replaces with a stub the payloads of events received before `cutoff`
/// (Unix seconds), `batch` rows a statement, from where the last run ended
/// (`payload_expiry`); returns how many. Kept whole: events still deferred
/// (their payload is what they will apply) and erased ones (a stub
/// already). A row another transaction holds is skipped, never waited for.
pub async fn expire_payloads(pool: &PgPool, cutoff: f64, batch: i64) -> Result<u64, sqlx::Error> {
    // Microseconds since the epoch: exact, where a float of seconds is not.
    let mut from: Option<i64> = sqlx::query_scalar!(
        r#"select (extract(epoch from through) * 1000000)::bigint as "through!" from payload_expiry"#
    )
    .fetch_optional(pool)
    .await?;
    let mut expired = 0;
    loop {
        let query = sqlx::query_scalar!(
            r#"
            with due as (
                select provider, event_id, month from processed_events
                where received_at >= coalesce('epoch'::timestamptz + $1::bigint * interval '1 microsecond',
                                              '-infinity')
                  and received_at < to_timestamp($2::float8)
                  and payload_expired_at is null and erased_at is null and outcome <> 'deferred'
                order by received_at
                limit $3
                for update skip locked
            )
            update processed_events e
            set payload = jsonb_build_object('webhookd', 'expired', 'id', e.event_id, 'type', e.event_type),
                payload_expired_at = now()
            from due
            where e.provider = due.provider and e.event_id = due.event_id and e.month = due.month
            returning (extract(epoch from e.received_at) * 1000000)::bigint as "received!"
            "#,
            from as Option<i64>,
            cutoff,
            batch,
        );
        let mut tx = db::begin(pool).await?;
        let done = query.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        expired += done.len() as u64;
        // The next batch reads on from the last row of this one.
        from = done.iter().copied().max().or(from);
        if (done.len() as u64) < u64::try_from(batch).unwrap_or(u64::MAX) {
            break;
        }
    }
    let query = sqlx::query!(
        r#"
        insert into payload_expiry (through) values (to_timestamp($1::float8))
        on conflict (singleton) do update set through = greatest(payload_expiry.through, excluded.through)
        "#,
        cutoff,
    );
    db::write_alone(pool, query).await?;
    Ok(expired)
}
