//! Erasing recorded events' personal data (`webhookd erase`): their
//! payloads become a stub naming only the event, and their detail keeps
//! only its numbers and flags (outbox ids, counts), never free text. Keys,
//! types, outcomes and times stay, so dedupe, the ledger's references and
//! the story hold.

use sqlx::PgConnection;

use crate::db::Timestamp;

/// A recorded event of a subject's, as an erasure finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub provider: String,
    pub event_id: String,
    /// When it was erased, if it was.
    pub erased_at: Option<Timestamp>,
    /// Whether it waits for a dependency (`deferred`): its payload is what
    /// it will apply, so it is kept until it has.
    pub waiting: bool,
}

/// The recorded events `webhookd explain <user_id>` tells of
/// (`related_events`), locked against a concurrent erasure of the same.
pub async fn of_user(conn: &mut PgConnection, user_id: &str) -> Result<Vec<Found>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select e.provider, e.event_id, e.erased_at as "erased_at: Timestamp",
               e.outcome = 'deferred' as "waiting!"
        from processed_events e join related_events($1) r using (provider, event_id)
        order by e.provider, e.event_id
        for update of e
        "#,
        user_id,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| Found {
            provider: row.provider,
            event_id: row.event_id,
            erased_at: row.erased_at,
            waiting: row.waiting,
        })
        .collect())
}

/// Erases the events `keys` (`(provider, event_id)`) not erased yet and not
/// waiting, as of the transaction's time; returns how many.
pub async fn erase(conn: &mut PgConnection, keys: &[(&str, &str)]) -> Result<u64, sqlx::Error> {
    let providers: Vec<&str> = keys.iter().map(|(p, _)| *p).collect();
    let event_ids: Vec<&str> = keys.iter().map(|(_, e)| *e).collect();
    let result = sqlx::query!(
        r#"
        update processed_events e
        set payload = jsonb_build_object('webhookd', 'erased', 'id', e.event_id, 'type', e.event_type),
            detail = jsonb_build_object('erased', true) || coalesce(
                (select jsonb_object_agg(key, value) from jsonb_each(
                     case jsonb_typeof(e.detail) when 'object' then e.detail else '{}' end)
                 where jsonb_typeof(value) in ('number', 'boolean')),
                '{}'),
            erased_at = now()
        from unnest($1::text[], $2::text[]) as input (provider, event_id)
        where e.provider = input.provider and e.event_id = input.event_id
          and e.erased_at is null and e.outcome <> 'deferred'
        "#,
        &providers as &[&str],
        &event_ids as &[&str],
    )
    .execute(conn)
    .await?;
    Ok(result.rows_affected())
}
