//! Erasing outbox rows' personal data (`webhookd erase`): a row of an
//! erased event keeps its topic, keys and amounts (numbers, flags, and the
//! ids of what it is about: `invoice_id`, `payment_id`, `refund_id`,
//! `subscription_id`, `session_id`, its `currency` and `status`) and loses
//! the rest. A row not delivered yet is dead-lettered `erased`, and no
//! retry takes it back: an erased payload is never delivered.

use sqlx::PgConnection;

/// What a dead-lettered erased row says.
pub const ERASED: &str = "erased";

/// Erases the rows of events `keys` (`(provider, event_id)`), each found
/// under each topic by its dedupe key; returns how many were erased now.
pub async fn erase(conn: &mut PgConnection, keys: &[(&str, &str)]) -> Result<u64, sqlx::Error> {
    let dedupe_keys: Vec<String> = keys.iter().map(|(p, e)| format!("{p}:{e}")).collect();
    let result = sqlx::query!(
        r#"
        with recursive topics (topic) as (
            select min(topic) from outbox
            union all
            select (select min(o.topic) from outbox o where o.topic > t.topic)
            from topics t where t.topic is not null
        )
        update outbox o
        set payload = jsonb_build_object('webhookd', 'erased') || coalesce(
                (select jsonb_object_agg(key, value) from jsonb_each(
                     case jsonb_typeof(o.payload) when 'object' then o.payload else '{}' end)
                 where jsonb_typeof(value) in ('number', 'boolean')
                    or key in ('invoice_id', 'payment_id', 'refund_id', 'subscription_id',
                               'session_id', 'currency', 'status')),
                '{}'),
            erased_at = now(),
            dead_at = case when o.delivered_at is null then coalesce(o.dead_at, now()) else o.dead_at end,
            last_error = case when o.delivered_at is null then $2 else o.last_error end,
            locked_until = null
        from topics t cross join unnest($1::text[]) as k (dedupe_key)
        where t.topic is not null and o.topic = t.topic and o.dedupe_key = k.dedupe_key
          and o.erased_at is null
        "#,
        &dedupe_keys,
        ERASED,
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected())
}
